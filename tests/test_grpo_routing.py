"""The GRPO job admits only plans whose micro-batches the executor routes as the workers expect: every compute op
of every replica receives exactly its share of its micro-batch's groups (none twice, none missing). A plan whose
reward micro-batches were finer than the rollout's handed each reward op the whole rollout micro-batch; the actor
then trained on duplicates and ran past its iteration (``IndexError`` in ``ActorWorker.compute``, seen when
``rlinf validate`` happened to choose such a plan)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import pytest

from executor.dispatch import build_lanes
from executor.messages import Compute
from executor.protocol import share_slice
from executor.routing import layout_of, routes_of
from rlinf.api import WorkerContext
from rlinf.app.jobs import Job, load_job_config
from rlinf.core.component_facts import component_facts
from rlinf.core.errors import ConfigError
from rlinf.core.plan import Placement, Plan

pytest.importorskip("transformers", reason='needs the hf extra: pip install -e ".[hf]"')

CONFIG = "examples/grpo_arith.yaml"
EDGES = ("rollout->reward", "reward->inference", "inference->actor")
COMPONENTS = ("rollout", "reward", "inference", "actor")
PLACEMENTS = {
    "collocated on 1": dict.fromkeys(COMPONENTS, range(1)),
    "collocated on 2": dict.fromkeys(COMPONENTS, range(2)),
    "hybrid": {"rollout": range(1), "reward": range(1), "inference": range(1, 3), "actor": range(1, 3)},
}


def _plan(devices: Mapping[str, range], granularity: tuple[int, ...]) -> Plan:
    return Plan(
        placements=[Placement(component=name, devices=devices[name]) for name in COMPONENTS],
        granularity=dict(zip(EDGES, granularity, strict=True)),
    )


def misrouted(job: Job, config: Any, plan: Plan) -> list[str]:
    """Compute ops of ``plan`` whose replica the executor's lanes hand another number of groups than its share
    (``WorkerContext.my_groups``); the rollout makes its share, every other replica receives its producers'
    rows (a row per group) as ``CommandRunner._push`` slices them."""
    program = job.lower(plan, config)
    facts = component_facts(job.workflow(config), plan, program)
    layout = layout_of(program)
    commands = {
        (c.op, worker): c
        for worker, lane in build_lanes(program, layout, routes_of(program)).items()
        for c in lane
        if isinstance(c, Compute)
    }
    rows: dict[tuple[int, int], int] = {}
    wrong = []
    for op in (o for o in program.ops if o.kind == "compute"):
        for replica in layout.of(op.component):
            context = WorkerContext.for_replica(
                facts[op.component], rank=replica.rank, world=replica.world, device=None
            )
            lo, hi = context.my_groups(op.micro_batch)
            received = 0
            for source, worker in commands[(op.index, replica.worker)].inputs:
                producer = layout.replicas[worker]
                first, last = share_slice(
                    rows[(source, worker)], producer.rank, producer.world, replica.rank, replica.world
                )
                received += last - first
            rows[(op.index, replica.worker)] = received if op.component != "rollout" else hi - lo
            if rows[(op.index, replica.worker)] != hi - lo:
                wrong.append(f"{op.label}[{replica.rank}]: {received} groups, share {hi - lo}")
    return wrong


@pytest.mark.parametrize("prompts", [8, 12])
def test_every_admitted_plan_routes_each_replica_its_share(prompts: int) -> None:
    job, config = load_job_config(CONFIG, [f"grpo.prompts_per_iteration={prompts}"])
    admitted = 0
    granularities = list(itertools.product((1, 2, 3, 4), repeat=3))
    for devices, granularity in itertools.product(PLACEMENTS.values(), granularities):
        plan = _plan(devices, granularity)
        try:
            wrong = misrouted(job, config, plan)
        except ConfigError:
            continue
        admitted += 1
        assert not wrong, f"{plan.describe()}: {wrong[:3]}"
    assert admitted >= 40  # finer-downstream and uneven plans are rejected, the rest still run


def test_a_micro_batch_that_would_feed_several_is_rejected() -> None:
    job, config = load_job_config(CONFIG, [])
    # The validate crash: 1 rollout micro-batch feeding 4 reward micro-batches, each of which got all of it.
    finer_reward = _plan(PLACEMENTS["collocated on 1"], (1, 4, 1))
    with pytest.raises(ConfigError, match=r"rollout->reward micro-batches.*set granularity.rollout->reward"):
        job.check_plan(finer_reward, config)
    job.check_plan(_plan(PLACEMENTS["collocated on 1"], (4, 4, 1)), config)  # gathering downstream is fine


def test_uneven_shares_of_gathered_micro_batches_are_rejected() -> None:
    job, config = load_job_config(CONFIG, ["grpo.prompts_per_iteration=12"])
    # 4 reward micro-batches of 3 groups, gathered into 1 inference micro-batch over 2 replicas: shares of 1+1+1+1
    # and 2+2+2+2 groups where each replica expects 6.
    with pytest.raises(ConfigError, match=r"reward->inference replicas.*divides \[3\]"):
        job.check_plan(_plan(PLACEMENTS["collocated on 2"], (4, 1, 1)), config)
