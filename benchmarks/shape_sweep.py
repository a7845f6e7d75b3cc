"""Batch shapes x plans: each runs one iteration under the watchdog or is refused up front (issue 48).

A refusal is one line; no combination hangs.

    python benchmarks/shape_sweep.py [--cases 240] [--seed 48] [--watchdog 30] [--json docs/data/shape_sweep.json]

A case is a workload and a batch shape (embodied PPO on Hopper: environments, steps, minibatches; GRPO on the
tiny addition task: prompts, group size, response length) under a plan (mode, 1 or 2 devices, a granularity,
offload on or off, staleness 0 or 1), set up as ``rlinf train --mode MODE --devices N --iterations 1`` sets it up
(the config with its ``--set`` keys, the fixed-mode plan, the workload's checks, the lowering): a
:class:`rlinf.core.errors.RlinfError` there is a refusal, which must be one line. Otherwise the iteration runs on
real local workers (under staleness 1 two steps: the rollout side fills the buffer, the training side drains it)
under a watchdog of ``--watchdog`` seconds: a stall is a hang, any other error a failure. The cases are drawn from
the whole product by a seeded generator (:func:`draw_cases`); ``tests/test_shapes_by_plans.py`` runs the first of
them in the default suite. GRPO cases share one warm start (``--cache``, trained once: a minute or two).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs

import executor
from executor.devices import physical_units, run_devices
from rlinf.app.jobs import load_job_config
from rlinf.core.errors import RlinfError

ROOT = Path(__file__).resolve().parent.parent
EMBODIED = ROOT / "examples/hopper_ppo.yaml"
GRPO = ROOT / "examples/grpo_arith.yaml"
GRPO_TINY = (
    "task.min_digits=1",
    "task.max_digits=1",
    "warm_start.num_steps=150",
    "eval.enabled=false",
    "eval.num_problems=20",
    "grpo.optimizer_steps_per_iteration=1",
)
"""The tests' tiny GRPO run (``tests/hf_grpo_tiny.py``): one-digit sums, a 150-step warm start, no evaluation."""
MODES = ("collocated", "hybrid", "disaggregated")
OUTCOMES = ("ran", "refused", "stalled", "failed")


@attrs.frozen(kw_only=True)
class Case:
    """One workload, batch shape and plan."""

    workload: str
    """``embodied`` or ``grpo``."""
    shape: tuple[tuple[str, int], ...]
    """The shape's config keys and values (``num_envs``, ``grpo.group_size``, ...)."""
    mode: str
    num_devices: int
    granularity: int
    offload: bool
    """Whether the fixed plan offloads every component with state when it yields a shared device."""
    staleness: int

    def sets(self, cache: Path) -> list[str]:
        """The case as ``--set`` items of its example config."""
        offloaded = "[rollout, actor]" if self.workload == "embodied" else "[rollout, inference, actor]"
        out = [f"{key}={value}" for key, value in self.shape]
        out += [
            f"execution.granularity={self.granularity}",
            f"execution.offload={offloaded if self.offload else '[]'}",
            f"execution.max_staleness={self.staleness}",
            "execution.iterations=1",
            "num_epochs=1" if self.workload == "embodied" else f"cache_dir={cache}",
        ]
        return ([] if self.workload == "embodied" else list(GRPO_TINY)) + out

    def describe(self) -> str:
        """One line: the shape, then the plan."""
        shape = " ".join(f"{key.split('.')[-1]}={value}" for key, value in self.shape)
        offload = " offload" if self.offload else ""
        return (
            f"{self.workload} {shape} | {self.mode} {self.num_devices} dev g={self.granularity}{offload} "
            f"k={self.staleness}"
        )


@attrs.frozen(kw_only=True)
class Outcome:
    """What a case did."""

    case: Case
    result: str
    """One of :data:`OUTCOMES`."""
    seconds: float
    message: str = ""
    """The refusal's or the error's line (empty when it ran)."""


def draw_cases(count: int, seed: int, *, grpo_every: int = 3) -> list[Case]:
    """``count`` cases drawn from the product of shapes and plans by ``random.Random(seed)``; every
    ``grpo_every``-th is GRPO (0: none), the others embodied PPO (cheaper to run). Granularities are mostly ones the
    batch divides into (a plan that runs), sometimes any (a plan to refuse)."""
    rng = random.Random(seed)
    cases = []
    for index in range(count):
        if not grpo_every or index % grpo_every != grpo_every - 1:
            num_envs = rng.choice((1, 2, 3, 4, 8, 16))
            shape: tuple[tuple[str, int], ...] = (
                ("num_envs", num_envs),
                ("num_steps", rng.choice((1, 3, 8, 32, 64, 188, 256))),
                ("num_minibatches", rng.choice((1, 2, 4, 32))),
            )
            batch, workload = num_envs, "embodied"
        else:
            prompts = rng.choice((1, 2, 3, 4, 8))
            shape = (
                ("grpo.prompts_per_iteration", prompts),
                ("grpo.group_size", rng.choice((1, 2, 4))),
                ("grpo.max_new_tokens", rng.choice((1, 3, 6))),
            )
            batch, workload = prompts, "grpo"
        dividing = [g for g in (1, 2, 3, 4, 8, 16) if batch % g == 0]
        granularity = rng.choice(dividing) if rng.random() < 0.8 else rng.choice((1, 2, 3, 4, 8, 16, 32))
        cases.append(
            Case(
                workload=workload,
                shape=shape,
                mode=rng.choice(MODES),
                num_devices=rng.choice((1, 2)),
                granularity=granularity,
                offload=rng.random() < 0.5,
                staleness=rng.choice((0, 1)),
            )
        )
    return cases


def prepare(case: Case, cache: Path) -> tuple[Any, Any, int]:
    """The case set up as ``rlinf train`` sets it up: its program, the workers' specs and the logical devices;
    raises :class:`RlinfError` for a case that is refused."""
    job, config = load_job_config(EMBODIED if case.workload == "embodied" else GRPO, case.sets(cache))
    job.check(config)
    plan, logical = job.fixed_plan(case.mode, case.num_devices, config)
    if case.staleness:
        plan = attrs.evolve(plan, max_staleness=case.staleness)
    job.check_plan(plan, config)
    program = job.lower(plan, config, logical)
    return program, job.worker_specs(config, plan, program), logical


def run_case(case: Case, *, watchdog_s: float, cache: Path) -> Outcome:
    """Set the case up as ``rlinf train`` would, then run one iteration under the watchdog."""
    started = time.monotonic()

    def outcome(result: str, message: str = "") -> Outcome:
        return Outcome(case=case, result=result, seconds=time.monotonic() - started, message=message)

    try:
        program, specs, logical = prepare(case, cache)
    except RlinfError as error:
        return outcome("refused", str(error))
    devices = run_devices("cpu", logical, physical_units("cpu")[: case.num_devices])
    watchdog = executor.Watchdog(floor_s=watchdog_s)
    try:
        with executor.LocalBackend(devices, watchdog=watchdog) as backend:
            for step in program.schedule(1):
                executor.run(program, specs, backend=backend, step=step)
    except executor.StallError as error:
        return outcome("stalled", str(error))
    except Exception as error:  # a failure the sweep reports (worker errors, bugs)
        return outcome("failed", f"{type(error).__name__}: {error}".splitlines()[0])
    return outcome("ran")


def main(argv: list[str] | None = None) -> int:
    import suite

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=240)
    parser.add_argument("--seed", type=int, default=48)
    parser.add_argument("--watchdog", type=float, default=30.0, help="the watchdog's floor in seconds")
    parser.add_argument("--cache", type=Path, default=Path("runs/hf_grpo_cache"))
    parser.add_argument("--json", type=Path, default=Path("docs/data/shape_sweep.json"))
    args = parser.parse_args(argv)
    started = suite.begin("python benchmarks/shape_sweep.py", argv)
    outcomes = []
    for index, case in enumerate(draw_cases(args.cases, args.seed)):
        done = run_case(case, watchdog_s=args.watchdog, cache=args.cache)
        outcomes.append(done)
        print(
            f"{index + 1:>4} {done.result:<8} {done.seconds:6.1f} s  {case.describe()}  {done.message[:160]}"
        )
        sys.stdout.flush()
    counts = Counter(o.result for o in outcomes)
    body: dict[str, Any] = {
        "seed": args.seed,
        "watchdog_s": args.watchdog,
        "counts": {name: counts.get(name, 0) for name in OUTCOMES},
        "refusals_one_line": all("\n" not in o.message for o in outcomes if o.result == "refused"),
        "cases": [
            {
                "case": o.case.describe(),
                "result": o.result,
                "seconds": round(o.seconds, 3),
                "message": o.message,
            }
            for o in outcomes
        ],
    }
    suite.write_artifact(args.json, body, started)
    print(f"{dict(body['counts'])}; wrote {args.json}")
    return 0 if counts["stalled"] == counts["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
