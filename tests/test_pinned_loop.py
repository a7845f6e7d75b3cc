"""A loop pinned over two cores (stage ``s`` on replica ``s``) against the same stages on one core, with the real
embodied workers: the routing must deliver each stage's rows to the replica that runs it and back to the actor."""

from __future__ import annotations

import json

import executor
from rlinf.app.jobs import get_job
from rlinf.core.plan import plan_from_yaml
from rlinf.workloads.embodied.config import EmbodiedConfig

CONFIG = EmbodiedConfig(
    num_envs=4, num_steps=8, hidden_sizes=(16, 16), num_epochs=2, num_minibatches=2, seed=3
)


def run_plan(placement: str, num_devices: int, iterations: int = 2) -> tuple[list[list[tuple]], object]:
    """Per iteration, what the workers computed (losses, episode returns) keyed by op label, and the program."""
    job = get_job("embodied_ppo")
    plan = plan_from_yaml(f"placement: {placement}\ngranularity: {{loop: 2}}", num_devices)
    program = job.lower(plan, CONFIG, num_devices)
    specs = job.worker_specs(CONFIG, plan, program)
    out = []
    with executor.LocalBackend(executor.cpu_devices(num_devices)) as backend:
        for _ in range(iterations):
            result = executor.run(program, specs, backend=backend)
            out.append(
                sorted(
                    (i.component, program.ops[i.op_index].label, json.dumps(dict(i.info), sort_keys=True))
                    for i in result.infos
                )
            )
    return out, program


def test_a_pinned_loop_trains_exactly_as_the_same_stages_on_one_core() -> None:
    """Tolerance 0 (CPU, one torch thread per worker, the same seeds): each stage steps the same environments
    with the same actions wherever it runs, and the actor trains on the same rows in the same order."""
    pinned, program = run_plan("{env: 0-1, rollout: 0-1, actor: 0}", 2)
    assert {op.devices for op in program.ops if op.name in ("act", "env_step")} == {(0,), (1,)}
    one_core, _ = run_plan("{env: 0, rollout: 0, actor: 0}", 1)
    assert pinned == one_core
    assert any("policy_loss" in entry[2] for entry in pinned[1])
    assert pinned[0] != pinned[1]  # the comparison has teeth: the iterations differ
