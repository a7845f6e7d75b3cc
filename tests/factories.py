"""Small workflows, clusters and synthetic traces shared by the tests and benchmarks.

Costs here are simple linear functions so expected timings can be computed by hand."""

from __future__ import annotations

import attrs

from rlinf.analytic.llm_workload import MODEL_PRESETS, LLMWorkload, ResponseLengths
from rlinf.core.cluster import GIB, parse_cluster
from rlinf.core.costs import CostModel, fit
from rlinf.core.trace import CostSample, Trace
from rlinf.core.workflow import Component, Edge, Loop, WeightSync, Workflow

SYNTHETIC = {"kind": "synthesized", "source": "tests/factories.py: linear costs for unit tests"}


def linear_samples(
    component: str,
    op: str,
    base_s: float,
    per_sample_s: float,
    *,
    max_devices: int = 1024,
    max_batch: int = 4096,
    model_parallel: int = 1,
    pool: str = "device",
) -> list[CostSample]:
    """Samples of ``base_s + per_sample_s * samples_per_replica`` over a grid of device counts and batches (of
    ``pool``: ``device``, or ``cpu`` for the cores beside GPUs)."""
    out = []
    devices = model_parallel
    while devices <= max_devices:
        replicas = devices // model_parallel
        for per_replica in (1, max_batch):
            samples = per_replica * replicas
            out.append(
                CostSample(
                    component=component,
                    op=op,
                    devices=devices,
                    samples=samples,
                    seconds=base_s + per_sample_s * per_replica,
                    pool=pool,
                )
            )
        devices *= 2
    return out


def grpo_workflow(*, num_prompts: int = 64, group_size: int = 4, state_gib: float = 10.0) -> Workflow:
    """rollout -> reward -> inference -> actor, all stream edges, weight sync actor -> rollout."""
    state = int(state_gib * GIB)
    return Workflow(
        name="grpo-test",
        components=[
            Component(name="rollout", role="rollout", state_bytes=state),
            Component(name="reward", role="reward"),
            Component(name="inference", role="inference", state_bytes=state),
            Component(name="actor", role="actor", state_bytes=2 * state),
        ],
        edges=[
            Edge(src="rollout", dst="reward", bytes_per_sample=4096),
            Edge(src="reward", dst="inference", bytes_per_sample=4096),
            Edge(src="inference", dst="actor", bytes_per_sample=8192),
        ],
        weight_sync=[WeightSync(src="actor", dst="rollout", num_bytes=2 * GIB)],
        batch_size=num_prompts * group_size,
        group_size=group_size,
        tokens_per_sample=512.0,
    )


def grpo_trace(
    workflow: Workflow | None = None, cluster_spec: str = "8x8xH100", response_lengths: tuple[float, ...] = ()
) -> Trace:
    """A synthetic trace for :func:`grpo_workflow` with linear costs at 1..1024 devices."""
    workflow = workflow or grpo_workflow()
    samples = (
        linear_samples("rollout", "generate", 2.0, 0.05)
        + linear_samples("reward", "reward", 0.001, 0.0005)
        + linear_samples("inference", "infer", 0.05, 0.01)
        + linear_samples("actor", "train", 0.1, 0.03)
    )
    return Trace(
        workflow=workflow,
        cluster=parse_cluster(cluster_spec),
        provenance=SYNTHETIC,
        samples=samples,
        response_lengths=response_lengths,
    )


def embodied_workflow(*, num_envs: int = 8, num_steps: int = 4) -> Workflow:
    """env <-> rollout loop for ``num_steps`` steps, then a barrier edge to the actor."""
    return Workflow(
        name="embodied-test",
        components=[
            Component(name="env", role="env", state_bytes=GIB),
            Component(name="rollout", role="rollout", state_bytes=GIB),
            Component(name="actor", role="actor", state_bytes=2 * GIB),
        ],
        edges=[Edge(src="rollout", dst="actor", kind="barrier", bytes_per_sample=1024)],
        loop=Loop(
            env="env", policy="rollout", num_steps=num_steps, obs_bytes_per_env=64, action_bytes_per_env=16
        ),
        weight_sync=[WeightSync(src="actor", dst="rollout", num_bytes=GIB // 4)],
        batch_size=num_envs,
        unit="env_steps",
    )


def embodied_trace(workflow: Workflow | None = None, cluster_spec: str = "1x8xCPU") -> Trace:
    """Synthetic costs for :func:`embodied_workflow`."""
    workflow = workflow or embodied_workflow()
    samples = (
        linear_samples("env", "env_step", 0.002, 0.001, max_devices=8)
        + linear_samples("rollout", "act", 0.003, 0.0002, max_devices=8)
        + linear_samples("actor", "train", 0.05, 0.0005, max_devices=8)
    )
    return Trace(
        workflow=workflow, cluster=parse_cluster(cluster_spec), provenance=SYNTHETIC, samples=samples
    )


def costs_for(trace: Trace) -> CostModel:
    """Fit with the trace's own cluster."""
    return fit(trace)


def llm_7b(**changes: object) -> LLMWorkload:
    """The analytic model's 7B GRPO with a small batch (64 x 8), every component on two tensor-parallel ranks."""
    base = LLMWorkload(
        model=MODEL_PRESETS["7b"],
        num_prompts=64,
        group_size=8,
        response=ResponseLengths(median_tokens=2000, sigma=0.6, max_tokens=8192),
        rollout_model_parallel=2,
        inference_model_parallel=2,
        actor_model_parallel=2,
    )
    return attrs.evolve(base, **changes)


HOPPER_CONFIG = "examples/hopper_ppo.yaml"
HOPPER_SMALL = ["num_steps=4", "num_epochs=1", "num_minibatches=2", "execution.checkpoint_every=100"]
"""Overrides that make the Hopper config's iterations take milliseconds (auto-mode and held-out tests)."""


def made_up_seconds(op_name: str, samples: int, num_bytes: int) -> float:
    """Made-up costs of the Hopper job's ops: a per-op round trip plus a per-environment part; the actor's train
    dominates."""
    if op_name == "train":
        return 0.02
    if op_name in ("env_step", "act"):
        return 5e-4 + 1e-4 * samples
    return 1e-4 + num_bytes / 1e9
