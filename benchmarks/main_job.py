"""The README's main job, measured: ``rlinf train examples/hopper_ppo.yaml`` (mode auto: profile, plan, train) run
in this process, and what it did written as an artifact with provenance: profiling time and probe plans, the
chosen plan, each iteration's measured and predicted time, and the best plan on fewer devices that the same
profile predicts (re-planned from the run's saved profile; planning is deterministic).

    python benchmarks/main_job.py --artifact docs/data/main_job_hopper.json

Every argument after the options below goes to ``rlinf train`` unchanged (``--out`` is set here).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import provenance

from executor import WorkerError
from rlinf.cli import build_parser

CONFIG = "examples/hopper_ppo.yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", type=Path, required=True, help="where the JSON artifact goes")
    parser.add_argument(
        "--out", type=Path, default=Path("runs/main_job"), help="train's --out (run directory)"
    )
    args, train_args = parser.parse_known_args(argv)
    started = provenance.begin("python benchmarks/main_job.py", argv)
    command = ["train", CONFIG, *train_args, "--out", str(args.out), "--no-progress"]
    train = build_parser().parse_args(command)
    tick = time.perf_counter()
    try:  # not through rlinf's main, which prints one line: a failed benchmark shows the worker's traceback
        train.handler(train)
    except WorkerError as error:
        print(f"{error}\n{error.remote_traceback}", file=sys.stderr)
        return 1
    command_s = time.perf_counter() - tick
    body = {"rlinf_command": "rlinf " + " ".join(command), "command_s": command_s, **summary(args.out)}
    provenance.write_artifact(args.artifact, body, started)
    print(json.dumps({k: v for k, v in body.items() if k != "iterations"}, indent=1))
    print(f"wrote {args.artifact}")
    return 0


def summary(out: Path) -> dict:
    """What the run directory ``out`` says about the run: profile, chosen plan, iterations, fewer-device best."""
    from rlinf.app.auto import plan_from_trace
    from rlinf.app.jobs import load_job_config
    from rlinf.core.trace import load_trace

    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "iteration_s" in r]
    profile = load_trace(out / "profile_trace.json")
    job, config = load_job_config(CONFIG)
    num_devices = profile.cluster.num_devices
    auto = plan_from_trace(job, config, profile, num_devices, seed=job.settings.seed)
    chosen = auto.chosen
    fewer = [c for c in auto.candidates if len(c.plan.devices_used) < len(chosen.plan.devices_used)]
    best_fewer = min(fewer, key=lambda c: c.predicted_s) if fewer else None
    measured = [r["iteration_s"] for r in rows]
    predicted = [r["predicted_iteration_s"] for r in rows]
    return {
        "profile_s": profile.provenance["elapsed_s"],
        "probe_plans": len(profile.provenance["probe_plans"]),
        "chosen_plan": chosen.plan.describe(),
        "chosen_devices_used": len(chosen.plan.devices_used),
        "num_devices": num_devices,
        "predicted_iteration_s": chosen.predicted_s,
        "median_measured_iteration_s": statistics.median(measured),
        "median_predicted_iteration_s": statistics.median(predicted),
        "best_on_fewer_devices": None
        if best_fewer is None
        else {
            "plan": best_fewer.plan.describe(),
            "predicted_s": best_fewer.predicted_s,
            "slower_than_chosen": best_fewer.predicted_s / chosen.predicted_s - 1,
        },
        "iterations": [
            {
                "iteration": r["iteration"],
                "iteration_s": r["iteration_s"],
                "predicted_s": r["predicted_iteration_s"],
            }
            for r in rows
        ],
    }


if __name__ == "__main__":
    raise SystemExit(main())
