"""What differs between a profile's probe iterations and a training run: one plan measured three ways, in turns.

    python benchmarks/probe_vs_run.py --rounds 8 --artifact docs/data/probe_vs_run.json

The main job's plan (``examples/hopper_ppo.yaml``, the plan ``rlinf train`` chooses on 2 cores unless ``--plan``) is
measured in ``--rounds`` rounds, each running three arms one after the other, in an order that rotates from round to
round, every arm with fresh worker processes:

* ``probe``: as the profiling phase measures a probe plan (2 warm-up iterations, then 6 measured ones, nothing
  else in the driver: :func:`rlinf.app.profiling.measure_plans`);
* ``bare``: the same for as many iterations as training counts (1 warm-up, then 59): a long run without the
  training loop's extras;
* ``train``: the training run itself (:func:`rlinf.app.runner.run`, 60 iterations: metrics, TensorBoard,
  checkpoints every 10), its iterations after the first counted as ``rlinf train`` counts them.

Before each arm, a fixed piece of pure-Python work is timed in this process (``speed_ms``: a machine-speed probe;
slower when the host or other processes take the cores). Per round the artifact holds each arm's iteration times and
median, and the ratios train / probe, bare / probe and train / bare; over the rounds the median of each ratio. A
ratio whose median across rounds stays near 1 while single rounds scatter says the run differs from the probes only by
when it ran; a median away from 1 names a systematic difference (the iteration count: ``bare``; the training loop's
extras: ``train`` against ``bare``). The train arm's iterations are also split into its first 6 counted ones and the
rest (``train_early_over_late``: drift along a run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import suite

CONFIG = "examples/hopper_ppo.yaml"
PLAN = {
    "mode": "hybrid",
    "placement": {"actor": "0", "env": "0-1", "rollout": "0-1"},
    "granularity": {"loop": 2},
}
"""The plan the main job chose in every recorded run on 2 cores (``docs/data/main_job_*.json``)."""
SPEED_ADDS = 200_000


def speed_ms(repeats: int = 15) -> float:
    """Median milliseconds of a fixed pure-Python loop in this process: the machine's speed right now."""
    times = []
    for _ in range(repeats):
        tick = time.perf_counter()
        total = 0
        for i in range(SPEED_ADDS):
            total += i
        times.append(1e3 * (time.perf_counter() - tick))
    return statistics.median(times)


def _arm(name: str, job: Any, config: Any, plan: Any, workdir: Path) -> list[float]:
    from rlinf.app.plan_choice import PlanChoice
    from rlinf.app.profiling import measure_plans
    from rlinf.app.request import RunRequest
    from rlinf.app.runner import run

    if name == "probe":
        measured = measure_plans(job, config, [(plan, 2)], iterations=6, warmup_iterations=2, generations=1,
                                 progress=False)  # fmt: skip
        return list(measured[0].iteration_s)
    if name == "bare":
        measured = measure_plans(job, config, [(plan, 2)], iterations=59, warmup_iterations=1, generations=1,
                                 progress=False)  # fmt: skip
        return list(measured[0].iteration_s)
    request = RunRequest(job=job, config=config, out=workdir / f"train-{time.monotonic_ns()}", progress=False)
    result = run(request, PlanChoice.given(plan, 2))
    return [m["iteration_s"] for m in result.metrics[1:]]


def main(argv: list[str] | None = None) -> int:
    from rlinf.app.jobs import load_job_config
    from rlinf.core.plan import plan_from_dict

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--artifact", type=Path, required=True)
    args = parser.parse_args(argv)
    started = suite.begin("python benchmarks/probe_vs_run.py", argv)
    job, config = load_job_config(CONFIG)
    plan = plan_from_dict(PLAN, 2, source="PLAN")
    arms = ("probe", "bare", "train")
    rounds = []
    with tempfile.TemporaryDirectory() as workdir:
        for index in range(args.rounds):
            order = arms[index % 3 :] + arms[: index % 3]
            record: dict[str, Any] = {"order": list(order)}
            for name in order:
                speed = speed_ms()
                times = _arm(name, job, config, plan, Path(workdir))
                record[name] = {"speed_ms": speed, "iteration_s": times, "median_s": statistics.median(times)}
            probe, bare, trained = (record[a]["median_s"] for a in arms)
            early, late = record["train"]["iteration_s"][:6], record["train"]["iteration_s"][6:]
            record["train_over_probe"] = trained / probe
            record["bare_over_probe"] = bare / probe
            record["train_over_bare"] = trained / bare
            record["train_early_over_late"] = statistics.median(early) / statistics.median(late)
            rounds.append(record)
            print(json.dumps({k: v for k, v in record.items() if k not in arms}
                             | {a: round(record[a]["median_s"], 4) for a in arms}), flush=True)  # fmt: skip
    ratios = ("train_over_probe", "bare_over_probe", "train_over_bare", "train_early_over_late")
    body = {
        "config": CONFIG,
        "plan": plan.describe(),
        "rounds": rounds,
        "median": {name: statistics.median(r[name] for r in rounds) for name in ratios},
    }
    suite.write_artifact(args.artifact, body, started)
    print(json.dumps(body["median"], indent=1))
    print(f"wrote {args.artifact}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
