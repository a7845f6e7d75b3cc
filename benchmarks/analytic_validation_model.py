"""The analytic model's prediction of one published run (benchmarks/analytic_validation_rows.py), in each version.

A run becomes an :class:`rlinf.analytic.llm_workload.LLMWorkload` (its facts, the model's default efficiencies, the terms a
:class:`Variant` turns on), a trace synthesized at the run's device counts, a plan (collocated, or generation on
its own GPUs) and one simulated iteration. A collocated run's prediction is the simulated iteration; a
one-step-off-policy run, whose generation of step k+1 overlaps the training of step k, is predicted by the busy
time of its busiest device (the steady-state step of a two-stage pipeline).

Inputs a user would not know can be moved (:class:`Inputs`): the spread of the response lengths, the engine's
per-step cost, the MFU and the decode bandwidth utilization; :func:`predict` takes them, and the sensitivity table
and the held-out fit of docs/analytic_validation.md are made from them.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
from analytic_validation_runs import DEVICES, MESH_LINK_BYTES_PER_S, PublishedRun, step_cost_of

from rlinf.analytic.llm_workload import LLMWorkload, ResponseLengths
from rlinf.analytic.response_lengths import lognormal_for, with_draw_mean
from rlinf.analytic.straggler import straggler_of
from rlinf.analytic.synthesis import synthesize
from rlinf.core.cluster import Cluster
from rlinf.core.costs import fit
from rlinf.core.errors import ConfigError, RlinfWarning
from rlinf.core.lowering import lower
from rlinf.core.plan import plan_from_dict
from rlinf.core.timeline import Timeline
from rlinf.core.trace import Trace
from simulator import simulate

SEED = 0
RESPONSE_SIGMA = 0.6
"""Log-spread of the response lengths where a source publishes no spread statistic (the project's recipes')."""


@attrs.frozen(kw_only=True)
class Variant:
    """One version of the model (and of how the rows are read)."""

    key: str
    label: str
    as_previously: bool
    """Read the rows as the first validation page did (:meth:`PublishedRun.as_previously`)."""
    attention_and_recompute: bool
    tensor_parallel_comm: bool
    free_kv_cache: bool
    kv_preemption: bool = False
    """Decode as it happens: KV-pool admission and preemption (:func:`rlinf.analytic.decode.schedule_decode`)."""
    engine_cost: bool = False
    """The engine's published per-step cost (:mod:`rlinf.analytic.engine_costs`)."""
    published_spread: bool = False
    """The spread of the response lengths from the statistics the source publishes (else sigma 0.6)."""


ABLATION: tuple[Variant, ...] = (
    Variant(key="first", label="the first model: no attention FLOPs, no recomputation", as_previously=True,
            attention_and_recompute=False, tensor_parallel_comm=False, free_kv_cache=False),
    Variant(key="attention", label="+ attention FLOPs, recomputation", as_previously=True,
            attention_and_recompute=True, tensor_parallel_comm=False, free_kv_cache=False),
    Variant(key="layouts", label="+ the runs' own layouts: optimizer sharding, max_num_seqs 1,024, what each "
            "system offloads", as_previously=False, attention_and_recompute=True, tensor_parallel_comm=False,
            free_kv_cache=False),
    Variant(key="tensor_parallel", label="+ tensor-parallel all-reduces", as_previously=False,
            attention_and_recompute=True, tensor_parallel_comm=True, free_kv_cache=False),
    Variant(key="previous", label="+ KV cache freed, not copied (= the previous page)", as_previously=False,
            attention_and_recompute=True, tensor_parallel_comm=True, free_kv_cache=True),
    Variant(key="decode", label="+ decode as it happens: KV-pool admission and preemption", as_previously=False,
            attention_and_recompute=True, tensor_parallel_comm=True, free_kv_cache=True, kv_preemption=True),
    Variant(key="engine", label="+ the engine's per-step cost, published", as_previously=False,
            attention_and_recompute=True, tensor_parallel_comm=True, free_kv_cache=True, kv_preemption=True,
            engine_cost=True),
    Variant(key="now", label="+ the spread of response lengths from published statistics (= now)",
            as_previously=False, attention_and_recompute=True, tensor_parallel_comm=True, free_kv_cache=True,
            kv_preemption=True, engine_cost=True, published_spread=True),
)  # fmt: skip
VARIANTS = {variant.key: variant for variant in ABLATION}
PREVIOUS, NOW = VARIANTS["previous"], VARIANTS["now"]


@attrs.frozen(kw_only=True)
class Inputs:
    """Multipliers of the inputs a user would not know, and an extra per-step cost: all neutral by default."""

    sigma_scale: float = 1.0
    """Scales the log-spread of the response lengths (the median follows, so the mean stays the reported one)."""
    engine_cost_scale: float = 1.0
    extra_step_s: float = 0.0
    """Seconds added to every decode step beyond the engine's published cost (the held-out fit's constant)."""
    mfu_scale: float = 1.0
    """Scales the prefill/forward and training MFU (at most 1)."""
    mbu_scale: float = 1.0
    """Scales the decode memory-bandwidth utilization (at most 1)."""


DEFAULT_INPUTS = Inputs()


def median_for_mean(mean_tokens: float, max_tokens: int, *, sigma: float = RESPONSE_SIGMA, seed: int = SEED,
                    num_lengths: int = 4096) -> float:  # fmt: skip
    """The lognormal median whose cut draw (as :func:`rlinf.analytic.synthesis.synthesize` makes it) has the given mean
    (:func:`rlinf.analytic.response_lengths.with_draw_mean`)."""
    start = ResponseLengths(median_tokens=1.0, sigma=sigma, max_tokens=max_tokens)
    return with_draw_mean(start, mean_tokens, num_lengths=num_lengths, seed=seed).median_tokens


def sigma_of(run: PublishedRun, variant: Variant = NOW) -> float:
    """The run's log-spread: from its published clip ratio or longest response where the variant reads them,
    else :data:`RESPONSE_SIGMA`."""
    if not variant.published_spread or not run.spread_source:
        return RESPONSE_SIGMA
    batch = run.num_prompts * run.group_size
    longest = None if run.response_longest is None else (run.response_longest, batch)
    fitted = lognormal_for(
        run.response_mean_tokens, run.max_response_tokens, clip=run.response_clip_ratio, longest=longest
    )
    return fitted.sigma


def workload_of(run: PublishedRun, variant: Variant = NOW, inputs: Inputs = DEFAULT_INPUTS) -> LLMWorkload:
    """The analytic model's workload for ``run``: the run's facts, the model's default efficiencies (scaled by
    ``inputs``), the terms the ``variant`` turns on."""
    row = run.as_previously() if variant.as_previously else run
    defaults = attrs.fields_dict(LLMWorkload)
    sigma = sigma_of(row, variant) * inputs.sigma_scale
    fixed, per_sequence = step_cost_of(row.engine) if variant.engine_cost else (0.0, 0.0)
    return LLMWorkload(
        model=row.model,
        num_prompts=row.num_prompts,
        group_size=row.group_size,
        prompt_tokens=row.prompt_tokens,
        response=ResponseLengths(
            median_tokens=median_for_mean(row.response_mean_tokens, row.max_response_tokens, sigma=sigma),
            sigma=sigma,
            max_tokens=row.max_response_tokens,
        ),
        algorithm=row.algorithm,
        reference_model=row.reference_model,
        rollout_model_parallel=row.rollout_mp,
        inference_model_parallel=row.train_mp,
        actor_model_parallel=row.train_mp,
        pipeline_parallel=row.train_pp,
        optimizer_shards=row.optimizer_shards,
        kv_cache_fraction=row.kv_cache_fraction,
        max_concurrent_sequences=row.max_concurrent_sequences,
        activation_recompute=row.activation_recompute and variant.attention_and_recompute,
        count_attention_flops=variant.attention_and_recompute,
        count_tensor_parallel_comm=variant.tensor_parallel_comm,
        mesh_link_bytes_per_s=MESH_LINK_BYTES_PER_S.get(row.device),
        free_kv_cache_on_offload=variant.free_kv_cache,
        kv_preemption=variant.kv_preemption,
        decode_step_overhead_s=fixed * inputs.engine_cost_scale + inputs.extra_step_s,
        decode_step_overhead_per_sequence_s=per_sequence * inputs.engine_cost_scale,
        prefill_mfu=min(1.0, defaults["prefill_mfu"].default * inputs.mfu_scale),
        train_mfu=min(1.0, defaults["train_mfu"].default * inputs.mfu_scale),
        decode_mbu=min(1.0, defaults["decode_mbu"].default * inputs.mbu_scale),
    )


def cluster_of(run: PublishedRun) -> Cluster:
    """The run's cluster: whole nodes of its device."""
    device, links = DEVICES[run.device]
    per_node = min(run.devices_per_node, run.num_devices)
    return Cluster(
        num_nodes=run.num_devices // per_node, devices_per_node=per_node, device=device, links=links
    )


def device_counts_of(run: PublishedRun) -> tuple[int, ...]:
    """The device counts the run's plan puts components on."""
    if run.mode == "one-step-off":
        return (run.rollout_devices, run.num_devices - run.rollout_devices)
    return (run.num_devices,)


def plan_of(run: PublishedRun, components: Sequence[str]) -> dict[str, Any]:
    """Collocated: every component on every device, the ones the system offloads offloaded when they yield them.
    One-step-off: rollout and reward on the first ``rollout_devices``, the log-prob forwards and training on the
    rest."""
    edges = {"rollout->reward": 1, "reward->inference": 1, "inference->actor": 1}
    if run.mode == "collocated":
        offload = [c for c in components if c in run.offload]
        return {"placement": dict.fromkeys(components, "all"), "granularity": edges, "offload": offload}
    generate = f"0-{run.rollout_devices - 1}"
    train = f"{run.rollout_devices}-{run.num_devices - 1}"
    placement = {c: generate if c in ("rollout", "reward") else train for c in components}
    return {"placement": placement, "granularity": edges}


def simulate_run(run: PublishedRun, variant: Variant = NOW, inputs: Inputs = DEFAULT_INPUTS) -> Timeline:
    """Synthesize (at the run's device counts), lower and simulate one iteration of ``run``."""
    return simulate_with_trace(run, variant, inputs)[1]


@attrs.frozen(kw_only=True)
class Prediction:
    """rlinf's side of one row."""

    key: str
    predicted_s: float
    iteration_s: float
    """The simulated synchronous iteration (equal to ``predicted_s`` for collocated runs)."""
    component_s: dict[str, float]
    ratio: float
    """predicted_s / reported_s."""
    straggler_s: float = 0.0
    """Seconds of the generation's straggler tail (:mod:`rlinf.analytic.straggler`) in the simulated iteration."""
    tail_share: float = 0.0
    """Its share of the slowest rollout replica's generation."""


def predicted_seconds(run: PublishedRun, timeline: Timeline) -> float:
    """A collocated run's iteration; a one-step-off run's busiest device (the pipeline's steady-state step)."""
    if run.mode == "one-step-off":
        return float(timeline.device_busy_seconds().max())
    return timeline.iteration_s


def predict(run: PublishedRun, variant: Variant = NOW, inputs: Inputs = DEFAULT_INPUTS) -> Prediction:
    """``run``'s prediction by ``variant`` with ``inputs`` (see :func:`predicted_seconds`)."""
    trace, timeline = simulate_with_trace(run, variant, inputs)
    predicted = predicted_seconds(run, timeline)
    component = {name: round(seconds, 3) for name, seconds in sorted(timeline.component_seconds().items())}
    tails = straggler_of(trace, timeline)
    return Prediction(
        key=run.key,
        predicted_s=predicted,
        iteration_s=timeline.iteration_s,
        component_s=component,
        ratio=predicted / run.reported_s,
        straggler_s=max((t.seconds for t in tails), default=0.0),
        tail_share=max((t.share_of_generation for t in tails), default=0.0),
    )


def simulate_with_trace(
    run: PublishedRun, variant: Variant = NOW, inputs: Inputs = DEFAULT_INPUTS
) -> tuple[Trace, Timeline]:
    """:func:`simulate_run`, with the synthesized trace (whose provenance places the straggler tail)."""
    workload = workload_of(run, variant, inputs)
    cluster = cluster_of(run)
    trace = synthesize(workload, cluster, seed=SEED, date="unused", device_counts=device_counts_of(run))
    names = [c.name for c in trace.workflow.components]
    row = run.as_previously() if variant.as_previously else run
    plan = plan_from_dict(plan_of(row, names), cluster.num_devices, source=run.key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RlinfWarning)
        return trace, simulate(lower(trace.workflow, plan, cluster), fit(trace, cluster))


# ------------------------------------------------------------------ a constant fitted on a named subset


EXTRA_STEP_GRID_S = np.linspace(0.0, 0.05, 50001)
"""Extra seconds per decode step the held-out fit tries: 0 to 50 ms in steps of 1 microsecond."""
REFERENCE_EXTRA_S = 0.01


@attrs.frozen(kw_only=True)
class StepLine:
    """A run's predicted seconds as a function of an extra per-decode-step cost: each op is linear in it (its
    steps times it), so a collocated iteration is linear and a one-step-off run's busiest device is the largest of
    its devices' linear busy times; two simulations give the exact function."""

    run: PublishedRun
    at_zero: np.ndarray = attrs.field(eq=False)
    slope: np.ndarray = attrs.field(eq=False)

    def __call__(self, extra_s: np.ndarray) -> np.ndarray:
        """The prediction at each extra cost."""
        values = self.at_zero[:, None] + self.slope[:, None] * np.asarray(extra_s)[None, :]
        return values.max(axis=0)


def step_line(run: PublishedRun) -> StepLine:
    """The run's :class:`StepLine` (the model now, plus an extra cost), from two simulations."""

    def figure(timeline: Timeline) -> np.ndarray:
        if run.mode == "one-step-off":
            return timeline.device_busy_seconds()
        return np.array([timeline.iteration_s])

    zero = figure(simulate_run(run))
    reference = figure(simulate_run(run, inputs=Inputs(extra_step_s=REFERENCE_EXTRA_S)))
    return StepLine(run=run, at_zero=zero, slope=(reference - zero) / REFERENCE_EXTRA_S)


def fit_extra_step(lines: Sequence[StepLine]) -> float:
    """The extra per-step cost on :data:`EXTRA_STEP_GRID_S` that minimizes the summed squared log ratios."""
    cost = sum(np.log(line(EXTRA_STEP_GRID_S) / line.run.reported_s) ** 2 for line in lines)
    return float(EXTRA_STEP_GRID_S[int(np.argmin(cost))])


# ------------------------------------------------------------------ sensitivity

SENSITIVITY: tuple[tuple[str, str, Inputs], ...] = (
    ("sigma", "x0.5", Inputs(sigma_scale=0.5)),
    ("sigma", "x1.5", Inputs(sigma_scale=1.5)),
    ("engine per-step cost", "0", Inputs(engine_cost_scale=0.0)),
    ("engine per-step cost", "x2", Inputs(engine_cost_scale=2.0)),
    ("MFU (prefill, training)", "x0.75", Inputs(mfu_scale=0.75)),
    ("MFU (prefill, training)", "x1.25", Inputs(mfu_scale=1.25)),
    ("decode MBU", "x0.75", Inputs(mbu_scale=0.75)),
    ("decode MBU", "x1.25", Inputs(mbu_scale=1.25)),
)
"""The inputs a user would not know, each moved down and up with the others held: (input, move, inputs)."""


def sensitivity(run: PublishedRun) -> list[float | None]:
    """The run's predicted/reported ratio under each move of :data:`SENSITIVITY`; ``None`` where the move cannot
    describe the run (a spread so wide that no cut lognormal has the run's mean under its limit)."""
    out: list[float | None] = []
    for _, _, inputs in SENSITIVITY:
        try:
            out.append(predict(run, NOW, inputs).ratio)
        except ConfigError:
            out.append(None)
    return out
