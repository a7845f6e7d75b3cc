"""The README's main job, run N times as a user runs it, every run counted: ``rlinf train examples/hopper_ppo.yaml``.

    python benchmarks/main_job.py --runs 10 --artifact docs/data/main_job_runs.json [--append]

Each run is a fresh ``python -m rlinf train examples/hopper_ppo.yaml --out DIR --no-progress`` (profile, choose the
plan with half of the profile, predict it from the other half with an interval, train 60 iterations), one after the
other; none is dropped (a run that fails is recorded as failed and counts against the figures). Per run the artifact
holds what ``rlinf train`` printed about its plan and prediction, its ``prediction.json`` (predicted, interval,
measured median, ``bias`` = measured median / predicted - 1: rlinf's one error measure), every counted iteration's
time, the load it ran under (the load average before and after, and the cores other processes kept busy during the
profile and during training: :class:`suite.LoadSampler`), and what the whole profile, the samples that chose the plan,
predicts for it: the prediction rlinf showed before it held out half its profile (``full_profile_s``; with the plan
the whole profile chooses, ``full_profile_choice``). The summary: the median ``bias`` over the runs, how many runs
measured inside their printed interval, and the winner's-curse measurement (the choosing half's prediction of its own
choice against the predicting half's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import suite
from suite import LoadSampler

ROOT = Path(__file__).resolve().parent.parent
CONFIG = "examples/hopper_ppo.yaml"
ERROR_MEASURE = (
    "measured / predicted - 1, of the run's median measured iteration (positive: slower than predicted)"
)


def run_once(out: Path) -> dict[str, Any]:
    """One fresh ``rlinf train`` of the main job into ``out``: its printed lines with when they came, its exit
    status and the load it ran under."""
    command = [sys.executable, "-m", "rlinf", "train", CONFIG, "--out", str(out), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    load_before = list(os.getloadavg())
    started = time.monotonic()
    lines: list[tuple[float, str]] = []
    with (
        subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as process,
        LoadSampler(process.pid) as sampler,
    ):
        assert process.stdout is not None
        for line in process.stdout:
            lines.append((time.monotonic(), line.rstrip("\n")))
        returncode = process.wait()
    ended = time.monotonic()
    chose = next((t for t, line in lines if line.startswith("auto: chose")), None)
    iterations = [t for t, line in lines if line.startswith("iteration ")]
    return {
        "command": " ".join(["rlinf", *command[3:]]),
        "returncode": returncode,
        "command_s": ended - started,
        "load_average_before": [round(v, 2) for v in load_before],
        "load_average_after": [round(v, 2) for v in os.getloadavg()],
        "others_cores_profile": None if chose is None else sampler.others_cores(started, chose),
        "others_cores_train": sampler.others_cores(iterations[0], iterations[-1])
        if len(iterations) > 1
        else None,
        "printed": [line for _, line in lines if line.startswith(("auto:", "prediction:"))],
        "output_tail": [line for _, line in lines[-12:]] if returncode else [],
    }


def in_sample(out: Path) -> dict[str, Any]:
    """What the whole profile (every sample, those that chose the plan among them) predicts: for the plan the run
    trained, and the plan it would choose itself, as rlinf chose and predicted before it held out half its profile."""
    from rlinf.app.auto import plan_from_trace
    from rlinf.app.jobs import load_job_config
    from rlinf.app.profiling import COST_STATISTIC, evened
    from rlinf.core.costs import fit
    from rlinf.core.lowering import lower
    from rlinf.core.plan import load_plan
    from rlinf.core.trace import load_trace
    from simulator import simulate

    profile = load_trace(out / "profile_trace.json")
    job, config = load_job_config(CONFIG)
    num_devices = profile.cluster.num_devices
    plan = load_plan(out / "plan.yaml", num_devices)
    cluster = profile.cluster.with_num_devices(max(num_devices, plan.num_logical[0]))
    program = lower(profile.workflow, plan, cluster)
    full_s = simulate(program, fit(evened(profile), cluster, statistic=COST_STATISTIC)).iteration_s
    auto = plan_from_trace(job, config, profile, num_devices, seed=job.settings.seed)
    return {
        "full_profile_s": full_s,
        "full_profile_choice": {"plan": auto.chosen.plan.describe(), "predicted_s": auto.chosen.predicted_s},
        "profile_s": profile.provenance["elapsed_s"],
        "probe_plans": len(profile.provenance["probe_plans"]),
    }


def record(index: int, out: Path) -> dict[str, Any]:
    """Run ``index`` (from 1): the run itself, then what its run directory says."""
    from rlinf.core.plan import load_plan

    date = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    run = {"run": index, "date": date, **run_once(out)}
    if run["returncode"] != 0 or not (out / "prediction.json").is_file():
        return {**run, "failed": True}
    metrics = suite.metrics_of(out)
    prediction = json.loads((out / "prediction.json").read_text())
    return {
        **run,
        "failed": False,
        "chosen_plan": load_plan(out / "plan.yaml", 64).describe(),
        "prediction": prediction,
        "iteration_s": [m["iteration_s"] for m in metrics[1:]],
        **in_sample(out),
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures the README states, over every run (a failed run has no bias and is not inside its interval)."""
    done = [r for r in runs if not r["failed"]]
    biases = [r["prediction"]["bias"] for r in done]
    held = [r["prediction"]["choosing_half_s"] / r["prediction"]["predicted_iteration_s"] - 1 for r in done]
    former = [
        r["prediction"]["measured_median_s"] / r["full_profile_choice"]["predicted_s"] - 1 for r in done
    ]
    return {
        "error_measure": ERROR_MEASURE,
        "runs": len(runs),
        "failed": len(runs) - len(done),
        "median_bias": statistics.median(biases) if biases else None,
        "min_bias": min(biases, default=None),
        "max_bias": max(biases, default=None),
        "median_abs_bias": statistics.median(abs(b) for b in biases) if biases else None,
        "slower_than_predicted": sum(b > 0 for b in biases),
        "inside_interval": sum(bool(r["prediction"].get("inside_interval")) for r in done),
        "median_choosing_over_held_out": statistics.median(held) if held else None,
        "median_bias_of_whole_profile_prediction": statistics.median(former) if former else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="fresh runs of the main job (default 10)")
    parser.add_argument("--artifact", type=Path, required=True, help="where the JSON artifact goes")
    parser.add_argument(
        "--keep", type=Path, help="keep the run directories here (default: a temporary folder)"
    )
    parser.add_argument(
        "--append",
        action="store_true",
        help="add the runs to the artifact's earlier runs: the summary then counts every run of every batch",
    )
    args = parser.parse_args(argv)
    started = suite.begin("python benchmarks/main_job.py", argv)
    earlier: dict[str, Any] = json.loads(args.artifact.read_text()) if args.append else {}
    runs: list[dict[str, Any]] = list(earlier.get("runs", []))
    batches = [*earlier.get("earlier_batches", []), earlier["provenance"]] if earlier else []
    with tempfile.TemporaryDirectory() as scratch:
        base = args.keep or Path(scratch)
        for index in range(len(runs) + 1, len(runs) + args.runs + 1):
            runs.append(record(index, base / f"run{index}"))
            shown = {k: runs[-1].get(k) for k in ("run", "failed", "chosen_plan", "others_cores_profile",
                                                  "others_cores_train")}  # fmt: skip
            print(json.dumps(shown | {"prediction": runs[-1].get("prediction", {}).get("bias")}), flush=True)
    body = {"config": CONFIG, "summary": summary(runs), "runs": runs, "earlier_batches": batches}
    suite.write_artifact(args.artifact, body, started)
    print(json.dumps(body["summary"], indent=1))
    print(f"wrote {args.artifact}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
