"""Offload/onload bandwidth of the executor's context switching against a plain pinned copy of the same bytes.

Usage (on a machine with a CUDA GPU)::

    python benchmarks/bench_offload.py [--mib 1024] [--tensors 64] [--repeats 5]

Prints one JSON object: the device, the bytes moved, GB/s of ``HostStore.offload`` (GPU -> pinned host, storage
released, ``empty_cache``) and ``HostStore.onload`` (back, in place), GB/s of ``copy_`` into / out of one
preallocated pinned buffer of the same size (the baseline: the same bytes with nothing else), and the ratios.
Medians over ``--repeats``. Without a GPU it says so and exits 2: there is nothing to measure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from executor.offload import HostStore


def timed(action) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    action()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="state size in MiB (default 1024)")
    parser.add_argument("--tensors", type=int, default=64, help="number of state tensors (default 64)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_offload: no CUDA GPU is visible; this benchmark only runs on a GPU", file=sys.stderr)
        return 2
    per_tensor = args.mib * (1 << 20) // args.tensors // 4
    state = [torch.randn(per_tensor, device="cuda") for _ in range(args.tensors)]
    total = sum(t.numel() * t.element_size() for t in state)
    pinned = torch.empty(total // 4, dtype=torch.float32, pin_memory=True)
    flat = torch.cat(state)
    store = HostStore()
    times: dict[str, list[float]] = {"offload": [], "onload": [], "copy_d2h": [], "copy_h2d": []}
    for _ in range(args.repeats):
        times["offload"].append(timed(lambda: store.offload(state)))
        times["onload"].append(timed(lambda: store.onload(state)))
        times["copy_d2h"].append(timed(lambda: pinned.copy_(flat, non_blocking=True)))
        times["copy_h2d"].append(timed(lambda: flat.copy_(pinned, non_blocking=True)))
    gbps = {k: total / statistics.median(v) / 1e9 for k, v in times.items()}
    print(json.dumps({
        "device": torch.cuda.get_device_name(0), "bytes": total, "tensors": args.tensors, "gb_per_s": gbps,
        "offload_over_copy": gbps["offload"] / gbps["copy_d2h"], "onload_over_copy": gbps["onload"] / gbps["copy_h2d"],
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
