"""Measured against predicted iteration time of the GRPO example at staleness bounds 0 and 1, on this machine.

    python benchmarks/staleness_timing_grpo.py [--iterations 40]      # about 2.5 minutes on 2 cores

Runs ``rlinf train examples/grpo_arith.yaml --mode auto`` with and without ``--max-staleness 1`` (each profiles,
plans and runs), and ``--mode auto --trace traces/grpo_arith_cpu2.json`` (planned from the shipped profile), one
after the other in fresh run folders, and keeps each run's ``prediction.json`` (the median measured iteration over
the run's counted iterations against the prediction of the plan it chose) and the plan. Writes
``docs/data/staleness_timing_grpo.json`` with its provenance; ``benchmarks/measurements.py`` renders it into
docs/planner.md and docs/grpo.md. Run it on a quiet machine: it measures time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import suite

ROOT = Path(__file__).resolve().parent.parent
ARTIFACT = "docs/data/staleness_timing_grpo.json"
CONFIG = "examples/grpo_arith.yaml"
RUNS = {
    "k0": ["--mode", "auto"],
    "k1": ["--mode", "auto", "--max-staleness", "1"],
    "shipped_profile": ["--mode", "auto", "--trace", "traces/grpo_arith_cpu2.json"],
}
"""Run name -> the flags of its ``rlinf train`` command."""


def measure(name: str, flags: list[str], iterations: int, out: Path) -> dict:
    """One run: its command, the plan it chose and its ``prediction.json``."""
    command = ["rlinf", "train", CONFIG, *flags, "--iterations", str(iterations), "--no-progress"]
    subprocess.run(
        [sys.executable, "-m", "rlinf", *command[1:], "--out", str(out / name)], cwd=ROOT, check=True
    )
    accuracy = json.loads((out / name / "prediction.json").read_text())
    return {
        "command": " ".join(command),
        "plan_yaml": (out / name / "plan.yaml").read_text(),
        **{
            key: accuracy[key] for key in ("predicted_iteration_s", "measured_median_s", "iterations", "bias")
        },
        "median_error": accuracy["median_error"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--out", default=ARTIFACT)
    args = parser.parse_args(argv)
    started = suite.begin("python benchmarks/staleness_timing_grpo.py", argv)
    with tempfile.TemporaryDirectory() as folder:
        runs = {name: measure(name, flags, args.iterations, Path(folder)) for name, flags in RUNS.items()}
    body = {"config": CONFIG, "iterations": args.iterations, "runs": runs}
    suite.write_artifact(ROOT / args.out, body, started)
    for name, run in runs.items():
        print(
            f"{name}: measured {run['measured_median_s']:.4f} s against {run['predicted_iteration_s']:.4f} s "
            f"predicted (bias {run['bias']:+.1%})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
