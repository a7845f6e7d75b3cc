"""The cost of one small message through a worker pipe, before and after issue 48's transport.

``multiprocessing``'s ``Connection.send`` + ``recv`` (the
transport before issue 48) against :mod:`executor.pipes` (pickle, frame, a non-blocking write, a read into a
buffer allocated once), both in one process, so that no scheduling is timed.

    python benchmarks/bench_pipes.py [--number 5000] [--repeat 9]

The message is a loop step's: a 4 x 11 observation and 4 rewards, packed as the mailbox packs them, with the op's
completion signal. Prints the best of ``--repeat`` rounds of ``--number`` messages, in microseconds per message.
"""

from __future__ import annotations

import argparse
import os
import timeit
from multiprocessing import Pipe

import numpy as np

from executor.channels import pack
from executor.pipes import InboundPipe, frame, write_some


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args(argv)
    payload = {"obs": np.zeros((4, 11), np.float32), "reward": np.zeros(4, np.float32)}
    items = [(1, ("data", 3), pack(payload)[0]), (1, ("done", 3), {})]
    old_reader, old_writer = Pipe(duplex=False)
    new_reader, new_writer = Pipe(duplex=False)
    os.set_blocking(new_writer.fileno(), False)
    inbound, fd = InboundPipe(new_reader), new_writer.fileno()

    def connection() -> None:
        old_writer.send(items)
        old_reader.recv()

    def pipes() -> None:
        write_some(fd, frame(items))
        inbound.read()

    for name, send_and_read in (("Connection.send + recv", connection), ("executor.pipes", pipes)):
        best = min(timeit.repeat(send_and_read, number=args.number, repeat=args.repeat)) / args.number
        print(f"{name}: {1e6 * best:.2f} us per message")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
