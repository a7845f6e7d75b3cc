"""The default test suite, timed as the README runs it: ``python3 -m pytest -n 2``, its wall time and outcome recorded.

    python benchmarks/suite_time.py --artifact docs/data/test_suite.json

Runs the suite in a child process from the repository root, and writes the artifact (provenance, the command, wall
seconds, exit status, the counts pytest's last line reports and that line itself). The README's sentence on the
suite's time is rendered from it (``benchmarks/measurements.py``); a failed run is recorded as failed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

import suite

ROOT = Path(__file__).resolve().parent.parent
COMMAND = ["-m", "pytest", "-n", "2"]


def outcome_counts(last_line: str) -> dict[str, int]:
    """``{"passed": 1024, "skipped": 12, ...}`` from pytest's last line (``= 1024 passed, 12 skipped in 451.2s =``)."""
    return {
        word: int(number)
        for number, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)", last_line)
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", type=Path, required=True)
    args = parser.parse_args(argv)
    started = suite.begin("python benchmarks/suite_time.py", argv)
    tick = time.perf_counter()
    done = subprocess.run([sys.executable, *COMMAND], cwd=ROOT, capture_output=True, text=True)
    wall_s = time.perf_counter() - tick
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    body = {
        "suite_command": "python3 " + " ".join(COMMAND),
        "wall_s": round(wall_s, 1),
        "returncode": done.returncode,
        "outcomes": outcome_counts(last),
        "last_line": last.strip("= "),
    }
    suite.write_artifact(args.artifact, body, started)
    print(done.stdout[-3000:])
    print(f"{body['suite_command']}: {wall_s / 60:.1f} min, exit {done.returncode}; wrote {args.artifact}")
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
