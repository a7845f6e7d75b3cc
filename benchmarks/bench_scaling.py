"""Scaling benchmark: do a second device and elastic pipelining pay off with the executor's worker-run lanes?

    python benchmarks/bench_scaling.py [--iterations 5] [--out docs/bench_scaling.json]

Everything is measured in this one process, one configuration after the other, with the same seeds and the same
work per iteration; each figure is the median over the measured iterations (the first is dropped as warm-up).
Prints one JSON object:

* ``hopper_best_2dev_over_1dev``: Hopper-v5 with CleanRL's hyper-parameters (8 envs x 256 steps, 10 epochs,
  32 minibatches), env steps/s of the best 2-device plan over the best 1-device plan (each the best measured of
  its candidates: on 1 device collocated; on 2 the fixed modes and two layouts with one actor replica
  (:data:`PLACEMENTS`); each with 1 and 2 loop stages);
* ``halfcheetah_best_2dev_over_1dev``: HalfCheetah-v5, 16 envs x 64 steps, 256x256 policy, same comparison;
* ``pipelining_2stages_over_1``: the default Hopper config (``examples/hopper_ppo.yaml``), 2 loop stages vs 1,
  each on its best 2-device layout;
* ``single_process_ratio``: the best rlinf plan (Hopper, CleanRL) vs a plain single-process loop running the same
  workers' maths in order (no executor, no processes), at its best torch thread count;
* ``shared_processes_over_one_per_worker``: the best 1-device and the best 2-device Hopper plan (CleanRL settings),
  each as measured (the workers of a CPU core share one process, :mod:`executor.local`) over the same plan with
  one process per worker (``executor.local.SHARE_PROCESSES = False``), env steps/s;
* ``per_op_overhead_us``: median executor overhead per compute op (``executor_overhead_s``: start after the ops
  it follows ended, plus its span outside ``worker.compute``), over every measured iteration of every plan;
* ``driver_cpu_share``: the driver's CPU time during a run over the run's wall time (median over plans): what
  the driver takes from the workers' cores.
* ``ceiling``: the same ratios for the fastest any 2-core plan could be (:func:`two_core_ceiling`: PPO is on
  policy, so training cannot overlap the rollout; the rollout split evenly over both cores, training on one core
  or data-parallel at the measured cost of half-size minibatches with a free all-reduce), from the plain loop's
  parts measured in this process: a target above its ceiling cannot be met by any plan or executor.

Candidates and their measured env steps/s are in the JSON too, with the machine's cores and load average.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import suite
import torch

from executor import local
from executor.devices import Device, available_cores, cpu_devices
from rlinf.api.worker_context import WorkerContext
from rlinf.app.jobs import Job, get_job
from rlinf.app.plan_choice import PlanChoice
from rlinf.app.request import RunRequest
from rlinf.app.runner import run
from rlinf.core.files import write_text_atomic
from rlinf.core.plan import Placement, Plan
from rlinf.core.run_settings import RunSettings
from rlinf.workloads.embodied.actor_worker import ActorWorker
from rlinf.workloads.embodied.config import EmbodiedConfig
from rlinf.workloads.embodied.env_worker import EnvWorker
from rlinf.workloads.embodied.rollout_worker import RolloutWorker

HOPPER_CLEANRL = EmbodiedConfig(
    env_id="Hopper-v5", num_envs=8, num_steps=256, num_epochs=10, num_minibatches=32, hidden_sizes=(64, 64)
)
HALFCHEETAH = EmbodiedConfig(
    env_id="HalfCheetah-v5",
    num_envs=16,
    num_steps=64,
    num_epochs=10,
    num_minibatches=32,
    hidden_sizes=(256, 256),
)
HOPPER_DEFAULT = EmbodiedConfig()  # examples/hopper_ppo.yaml: 8 envs x 32 steps, 4 minibatches


PLACEMENTS = {
    "collocated": None,
    "hybrid": None,
    "disaggregated": None,
    "loop-split, actor@0": {"env": (0, 1), "rollout": (0, 1), "actor": (0,)},
    "env@0 rollout@1 actor@1": {"env": (0,), "rollout": (1,), "actor": (1,)},
}
"""Candidate layouts on 2 devices: the fixed modes, and two the fixed modes miss (one actor replica, so that
training pays no gradient all-reduce, with the loop spread over both cores)."""


def plan_of(name: str, job: Job[EmbodiedConfig], config: EmbodiedConfig, num_cores: int) -> tuple[Plan, int]:
    """The plan called ``name`` (a fixed mode, or a layout of :data:`PLACEMENTS`) and its logical devices."""
    layout = PLACEMENTS.get(name)
    if layout is None:
        return job.fixed_plan(name, num_cores, config)
    plan = Plan(
        placements=[Placement(component=c, devices=d) for c, d in layout.items()],
        granularity={"loop": job.settings.granularity},
    )
    return plan, num_cores


def measure_plan(config: EmbodiedConfig, mode: str, stages: int, num_cores: int, iterations: int) -> dict:
    """Median env steps/s (and executor overhead) of plan ``mode`` with ``stages`` loop stages on ``num_cores``."""
    settings = RunSettings(iterations=iterations, checkpoint_every=10_000, granularity=stages)
    job = get_job("embodied_ppo", settings=settings)
    plan, logical = plan_of(mode, job, config, num_cores)
    devices = cpu_devices(logical, available_cores()[:num_cores])
    with tempfile.TemporaryDirectory() as run_dir:
        request = RunRequest(job=job, config=config, out=Path(run_dir), progress=False)
        result = run(request, PlanChoice.given(plan, logical, devices))
    kept = result.metrics[1:]
    return {
        "mode": mode,
        "stages": stages,
        "devices": num_cores,
        "plan": plan.describe(),
        "env_steps_per_s": statistics.median(m["env_steps_per_s"] for m in kept),
        "env_steps_per_s_each": [round(m["env_steps_per_s"], 1) for m in kept],
        "rollout_env_steps_per_s": statistics.median(m["rollout_env_steps_per_s"] for m in kept),
        "executor_overhead_us": [round(m["executor_overhead_s"] * 1e6, 1) for m in kept],
        "driver_cpu_share": statistics.median(m["driver_cpu_s"] / m["iteration_s"] for m in kept),
    }


def best(
    config: EmbodiedConfig, num_cores: int, candidates: Sequence[tuple[str, int]], iterations: int
) -> tuple[dict, list[dict]]:
    """Every candidate ``(mode, stages)`` measured; the one with the most env steps/s, and all of them."""
    measured = []
    for mode, stages in candidates:
        row = measure_plan(config, mode, stages, num_cores, iterations)
        print(
            f"  {config.env_id} {num_cores} dev {mode:13s} stages={stages}: {row['env_steps_per_s']:8.0f} steps/s",
            file=sys.stderr,
        )
        measured.append(row)
    return max(measured, key=lambda r: r["env_steps_per_s"]), measured


ONE_DEVICE = [("collocated", 1), ("collocated", 2)]
TWO_DEVICES = [(name, stages) for name in PLACEMENTS for stages in (1, 2)]


@attrs.frozen
class PlainLoop:
    """What the plain single-process loop measured: its rate and where its time went (medians, warm-up dropped)."""

    env_steps_per_s: float
    policy_s: float
    """Seconds per iteration in the rollout's policy (``act``)."""
    env_s: float
    """Seconds per iteration stepping the environments."""
    train_s: float
    """Seconds per iteration in the actor's PPO update."""


def single_process(config: EmbodiedConfig, iterations: int, threads: int) -> PlainLoop:
    """A plain loop: the same env, rollout and actor maths called in order in this process (one stage, one
    replica of each), weights handed over as objects; its env steps/s and its time per part."""
    torch.set_num_threads(threads)
    device = Device(index=0)  # not bound: the loop may use every core through torch's threads

    def context(component: str) -> WorkerContext:
        return WorkerContext(
            component=component, rank=0, world=1, device=device, num_micro_batches=1,
            micro_batch_groups=((0, config.num_envs),), group_size=1, loop_stages=1, offload=False,
            seed=config.seed,
        )  # fmt: skip

    env, rollout, actor = EnvWorker(), RolloutWorker(), ActorWorker()
    env.setup(config, context("env"))
    rollout.setup(config, context("rollout"))
    actor.setup(config, context("actor"))
    rates: list[float] = []
    parts: list[tuple[float, float, float]] = []
    clock = time.perf_counter
    for _ in range(iterations):
        started = clock()
        policy_s = env_s = 0.0
        rollout.load_weights(actor.weights())
        obs: Any = {}
        # as the workflow's loop: act(s) reads env(s-1), env(s) act(s)
        for step in range(config.num_steps + 1):
            begin = clock()
            act, _ = rollout.compute("act", 0, step, [obs] if step else [])
            middle = clock()
            obs, _ = env.compute("env_step", 0, step, [act] if step else [])
            policy_s, env_s = policy_s + middle - begin, env_s + clock() - middle
        begin = clock()
        actor.compute("train", 0, 0, [obs])  # the last env step emits the trajectory
        ended = clock()
        rates.append(config.num_envs * config.num_steps / (ended - started))
        parts.append((policy_s, env_s, ended - begin))
    kept = parts[1:]
    return PlainLoop(
        env_steps_per_s=statistics.median(rates[1:]),
        policy_s=statistics.median(p[0] for p in kept),
        env_s=statistics.median(p[1] for p in kept),
        train_s=statistics.median(p[2] for p in kept),
    )


def two_core_ceiling(config: EmbodiedConfig, iterations: int) -> dict[str, float]:
    """The fastest any 2-core plan could run ``config``, from the plain loop's parts measured here: PPO is on
    policy, so an iteration's training cannot overlap its rollout; at best the rollout (env + policy) splits
    evenly over both cores, and training runs either on one core or data-parallel with each replica doing what
    a loop over half the environments does (same minibatch count, so half-size minibatches) with a free
    all-reduce. Returns the parts and the ceiling's env steps/s."""
    full = single_process(config, iterations, 1)
    half = single_process(attrs.evolve(config, num_envs=config.num_envs // 2), iterations, 1)
    rollout_s = (full.policy_s + full.env_s) / 2
    train_s = min(full.train_s, half.train_s)
    return {
        "policy_s": full.policy_s,
        "env_s": full.env_s,
        "train_s": full.train_s,
        "train_half_minibatches_s": half.train_s,
        "ceiling_env_steps_per_s": config.num_envs * config.num_steps / (rollout_s + train_s),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5, help="per plan; the first is dropped as warm-up")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    cores = len(available_cores())
    if cores < 2:
        print("bench_scaling: needs 2 CPU cores", file=sys.stderr)
        return 2
    started = suite.begin("python benchmarks/bench_scaling.py", argv)
    out: dict[str, Any] = {}
    rows: dict[str, list[dict]] = {}

    hopper_1, rows["hopper_1dev"] = best(HOPPER_CLEANRL, 1, ONE_DEVICE, args.iterations)
    hopper_2, rows["hopper_2dev"] = best(HOPPER_CLEANRL, 2, TWO_DEVICES, args.iterations)
    out["hopper_best_2dev_over_1dev"] = hopper_2["env_steps_per_s"] / hopper_1["env_steps_per_s"]

    # The same two plans with one process per worker: what sharing a process per core brings.
    local.SHARE_PROCESSES = False
    try:
        separate = {
            key: measure_plan(HOPPER_CLEANRL, row["mode"], row["stages"], row["devices"], args.iterations)
            for key, row in (("hopper_1dev", hopper_1), ("hopper_2dev", hopper_2))
        }
    finally:
        local.SHARE_PROCESSES = True
    out["shared_processes_over_one_per_worker"] = {
        "hopper_1dev": hopper_1["env_steps_per_s"] / separate["hopper_1dev"]["env_steps_per_s"],
        "hopper_2dev": hopper_2["env_steps_per_s"] / separate["hopper_2dev"]["env_steps_per_s"],
    }

    cheetah_1, rows["halfcheetah_1dev"] = best(HALFCHEETAH, 1, ONE_DEVICE, args.iterations)
    cheetah_2, rows["halfcheetah_2dev"] = best(HALFCHEETAH, 2, TWO_DEVICES, args.iterations)
    out["halfcheetah_best_2dev_over_1dev"] = cheetah_2["env_steps_per_s"] / cheetah_1["env_steps_per_s"]

    _, rows["default_2dev"] = best(HOPPER_DEFAULT, 2, TWO_DEVICES, args.iterations)
    by_stages = {
        s: max(r["env_steps_per_s"] for r in rows["default_2dev"] if r["stages"] == s) for s in (1, 2)
    }
    out["pipelining_2stages_over_1"] = by_stages[2] / by_stages[1]

    plain = {t: single_process(HOPPER_CLEANRL, args.iterations, t).env_steps_per_s for t in (1, cores)}
    print(f"  plain single-process loop: {plain} steps/s by torch threads", file=sys.stderr)
    out["single_process_ratio"] = hopper_2["env_steps_per_s"] / max(plain.values())

    # What no 2-core plan can beat (see two_core_ceiling), as ratios comparable with the figures above.
    ceilings = {"hopper": two_core_ceiling(HOPPER_CLEANRL, args.iterations)}
    ceilings["halfcheetah"] = two_core_ceiling(HALFCHEETAH, args.iterations)
    out["ceiling"] = {
        "hopper_2dev_over_1dev": ceilings["hopper"]["ceiling_env_steps_per_s"] / hopper_1["env_steps_per_s"],
        "halfcheetah_2dev_over_1dev": ceilings["halfcheetah"]["ceiling_env_steps_per_s"]
        / cheetah_1["env_steps_per_s"],
        "single_process_ratio": ceilings["hopper"]["ceiling_env_steps_per_s"] / max(plain.values()),
    }

    overheads = [o for table in rows.values() for r in table for o in r["executor_overhead_us"]]
    out["per_op_overhead_us"] = statistics.median(overheads)
    out["driver_cpu_share"] = statistics.median(
        r["driver_cpu_share"] for table in rows.values() for r in table
    )
    out["details"] = {
        "best": {
            "hopper_1dev": hopper_1["plan"] + f" stages={hopper_1['stages']}",
            "hopper_2dev": hopper_2["plan"] + f" stages={hopper_2['stages']}",
            "halfcheetah_1dev": cheetah_1["plan"] + f" stages={cheetah_1['stages']}",
            "halfcheetah_2dev": cheetah_2["plan"] + f" stages={cheetah_2['stages']}",
        },
        "one_process_per_worker": separate,
        "plain_loop_env_steps_per_s_by_threads": plain,
        "two_core_ceiling_parts_s": ceilings,
        "candidates": rows,
        "iterations_per_plan": args.iterations,
        **suite.finish(started),
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out is not None:
        write_text_atomic(args.out, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
