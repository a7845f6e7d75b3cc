"""Seconds from a SIGKILL of a worker in the middle of an op to the error naming it, local and Ray.

It runs the fault-injection tests that measure it, ``--runs`` times, and collects what they print.

    python benchmarks/bench_kill_detection.py [--runs 2] [--json docs/data/kill_detection.json]

Each run is ``python -m pytest tests/test_fault_injection.py -s -q -k killed_mid_op`` (a hybrid chain program on
2 cores; a thread kills the reward worker once it is inside ``reward[2]``); the tests assert < 5 s.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import suite

TEST_COMMAND = ["-m", "pytest", "tests/test_fault_injection.py", "-s", "-q", "-k", "killed_mid_op"]
PRINTED = re.compile(r"(local|ray) backend: SIGKILL detected after (\d+) ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--json", type=Path, default=Path("docs/data/kill_detection.json"))
    args = parser.parse_args(argv)
    started = suite.begin("python benchmarks/bench_kill_detection.py", argv)
    detected_ms: dict[str, list[int]] = {"local": [], "ray": []}
    for _ in range(args.runs):
        done = subprocess.run([sys.executable, *TEST_COMMAND], capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout[-4000:], done.stderr[-4000:], file=sys.stderr)
            return done.returncode
        found = PRINTED.findall(done.stdout)
        if sorted(kind for kind, _ in found) != ["local", "ray"]:
            print(f"expected one local and one Ray measurement, got {found}", file=sys.stderr)
            return 1
        for kind, ms in found:
            detected_ms[kind].append(int(ms))
    body = {"test_command": "python " + " ".join(TEST_COMMAND), "detected_ms": detected_ms}
    suite.write_artifact(args.json, body, started)
    print(
        f"SIGKILL to error: local {detected_ms['local']} ms, Ray {detected_ms['ray']} ms; wrote {args.json}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
