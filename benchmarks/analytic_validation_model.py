"""The analytic model's prediction of one published run (benchmarks/analytic_validation_rows.py), in each version.

A run becomes an :class:`rlinf.analytic.llm_workload.LLMWorkload` (its facts, the model's default efficiencies, the terms a
:class:`Variant` turns on), a trace synthesized at the run's device counts, a plan (collocated, or generation on
its own GPUs) and one simulated iteration. A collocated run's plan is synchronous. A one-step-off-policy run,
whose generation of step k+1 overlaps the training of step k, is simulated with its disaggregated plan at
``max_staleness: 1``: the lowering cuts the buffered edge into the trainer, so one simulated iteration is the
steady-state step of the pipeline (:func:`staleness_of`). A run whose trainer computes the log-prob forwards from
the buffered batch has them folded into the actor (the same step as rlinf's inference component behind the buffer,
``Plan.buffer_before``, on the training GPUs), and one whose rollout engine returns them has none
(:func:`as_the_trainer_reads`).

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
from analytic_validation_runs import (
    DEVICES,
    DISAGGREGATED,
    MESH_LINK_BYTES_PER_S,
    PublishedRun,
    step_cost_of,
)

from rlinf.analytic.llm_workload import LLMWorkload, ResponseLengths
from rlinf.analytic.response_lengths import lognormal_for, with_draw_mean
from rlinf.analytic.straggler import straggler_of
from rlinf.analytic.synthesis import synthesize
from rlinf.analytic.training_costs import training_efficiency
from rlinf.analytic.weight_sync import reshard_measurement
from rlinf.core.cluster import Cluster
from rlinf.core.costs import CostModel, fit
from rlinf.core.errors import ConfigError, RlinfWarning
from rlinf.core.lowering import lower
from rlinf.core.plan import Plan, plan_from_dict
from rlinf.core.timeline import Timeline
from rlinf.core.trace import Trace
from rlinf.core.workflow import Edge, Workflow
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
    work_per_device: bool = False
    """Efficiency that depends on the work per device: the run's training framework's published MFU by model size
    and fixed cost per optimizer step (:mod:`rlinf.analytic.training_costs`), pipeline bubbles and stage-to-stage
    transfers (:mod:`rlinf.analytic.pipeline`), and a collocated weight sync's published resharding time
    (:mod:`rlinf.analytic.weight_sync`)."""


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
    Variant(key="engine", label="+ the engine's per-step costs (fixed and per sequence in flight), published", as_previously=False,
            attention_and_recompute=True, tensor_parallel_comm=True, free_kv_cache=True, kv_preemption=True,
            engine_cost=True),
    Variant(key="spread", label="+ the spread of response lengths from published statistics (= the previous "
            "page's now)", as_previously=False, attention_and_recompute=True, tensor_parallel_comm=True,
            free_kv_cache=True, kv_preemption=True, engine_cost=True, published_spread=True),
    Variant(key="now", label="+ efficiency by the work per device: the framework's published MFU and fixed cost "
            "per optimizer step, pipeline bubbles, published resharding (= now)", as_previously=False,
            attention_and_recompute=True, tensor_parallel_comm=True, free_kv_cache=True, kv_preemption=True,
            engine_cost=True, published_spread=True, work_per_device=True),
)  # fmt: skip
VARIANTS = {variant.key: variant for variant in ABLATION}
PREVIOUS, SPREAD, NOW = VARIANTS["previous"], VARIANTS["spread"], VARIANTS["now"]


@attrs.frozen(kw_only=True)
class Inputs:
    """Multipliers of the inputs a user would not know, and an extra per-step cost: all neutral by default."""

    sigma_scale: float = 1.0
    """Scales the log-spread of the response lengths (the median follows, so the mean stays the reported one)."""
    engine_cost_scale: float = 1.0
    """Scales the engine's published costs, fixed and per sequence in flight."""
    per_sequence_scale: float = 1.0
    """Scales the cost per sequence in flight alone (0: a batch-1 table's engine without the borrowed one)."""
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
    per_sequence_scale = inputs.engine_cost_scale * inputs.per_sequence_scale
    train_mfu = defaults["train_mfu"].default
    per_device: dict[str, Any] = {}
    if variant.work_per_device:
        efficiency = training_efficiency(row.framework)
        train_mfu = efficiency.plateau_mfu(row.model.num_params)
        per_device = {
            "train_fixed_tokens_per_step": efficiency.fixed_tokens_per_step,
            "optimizer_steps": row.optimizer_steps,
            "train_micro_batch_tokens": row.train_micro_batch_tokens,
            "count_pipeline_bubbles": True,
            "forwards_at_train_mfu": True,
            "reshard_bytes_per_device_per_s": reshard_measurement(row.weight_sync).bytes_per_device_per_s,
        }
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
        decode_step_overhead_per_sequence_s=per_sequence * per_sequence_scale,
        prefill_mfu=min(1.0, defaults["prefill_mfu"].default * inputs.mfu_scale),
        train_mfu=min(1.0, train_mfu * inputs.mfu_scale),
        decode_mbu=min(1.0, defaults["decode_mbu"].default * inputs.mbu_scale),
        **per_device,
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
    if run.mode in DISAGGREGATED:
        return (run.rollout_devices, run.num_devices - run.rollout_devices)
    return (run.num_devices,)


def staleness_of(run: PublishedRun) -> int:
    """The staleness bound a run's plan is simulated with: 1 for a disaggregated run (its generation runs a step
    ahead of its training), else 0."""
    return 1 if run.mode in DISAGGREGATED else 0


def plan_of(run: PublishedRun, workflow: Workflow) -> dict[str, Any]:
    """The run's synchronous plan. Collocated: every component on every device, the ones the system offloads
    offloaded when they yield them. Disaggregated: rollout and reward on the first ``rollout_devices``, the rest on
    the others."""
    names = workflow.component_names
    edges = {edge.key: 1 for edge in workflow.edges}
    if run.mode == "collocated":
        offload = [c for c in names if c in run.offload]
        return {"placement": dict.fromkeys(names, "all"), "granularity": edges, "offload": offload}
    generate = f"0-{run.rollout_devices - 1}"
    train = f"{run.rollout_devices}-{run.num_devices - 1}"
    placement = {c: generate if c in ("rollout", "reward") else train for c in names}
    return {"placement": placement, "granularity": edges}


def as_the_trainer_reads(trace: Trace, run: PublishedRun) -> Trace:
    """``trace`` with the log-prob forwards where the run computes them (:attr:`PublishedRun.log_prob_forwards`).

    rlinf's inference component sits before the buffer (the staleness bound cuts only the edges into the actor), so
    on a trainer's devices its forwards would wait for the current generation. ``inference`` keeps the trace;
    ``trainer`` folds the component into the actor (each training sample takes the forwards' seconds at the same
    devices and batch, the actor holds their weights, its activations are the larger of the two, the reward feeds
    the actor); ``engine`` drops it (the rollout engine returned the log-probs)."""
    if run.log_prob_forwards == "inference":
        return trace
    workflow = trace.workflow
    forwards, actor = workflow.component("inference"), workflow.component("actor")
    fold = run.log_prob_forwards == "trainer"
    if fold and forwards.model_parallel_size != actor.model_parallel_size:
        raise ValueError(
            f"{run.key}: the log-prob forwards and training differ in layout; they cannot be folded"
        )
    extra = {(s.devices, s.samples): s.seconds for s in trace.samples if s.component == "inference"}
    samples = []
    for sample in trace.samples:
        if sample.component == "inference":
            continue
        if fold and sample.component == "actor" and sample.op == "train":
            sample = attrs.evolve(
                sample, seconds=sample.seconds + extra.pop((sample.devices, sample.samples))
            )
        samples.append(sample)
    if fold and extra:
        raise ValueError(
            f"{run.key}: log-prob forward samples {sorted(extra)} have no training sample to join"
        )
    folded = attrs.evolve(actor, state_bytes=actor.state_bytes + forwards.state_bytes) if fold else actor
    (into,) = (e for e in workflow.edges if e.dst == "inference")
    edges = [e for e in workflow.edges if "inference" not in (e.src, e.dst)]
    edges.append(Edge(src=into.src, dst="actor", kind=into.kind, bytes_per_sample=into.bytes_per_sample))
    activation = dict(trace.activation_bytes_per_sample)
    forwards_activation = activation.pop("inference", 0.0)
    if fold and "actor" in activation:
        activation["actor"] = max(activation["actor"], forwards_activation)
    return attrs.evolve(
        trace,
        workflow=attrs.evolve(
            workflow,
            components=[folded if c is actor else c for c in workflow.components if c is not forwards],
            edges=edges,
            weight_sync=[w for w in workflow.weight_sync if w.dst != "inference"],
        ),
        samples=samples,
        activation_bytes_per_sample=activation,
    )


@attrs.frozen(kw_only=True)
class Setup:
    """What a run's prediction simulates: its trace (as its trainer reads it), cluster, costs, synchronous plan."""

    trace: Trace
    cluster: Cluster
    costs: CostModel = attrs.field(eq=False)
    plan: Plan

    def timeline(self, max_staleness: int, buffer_before: tuple[str, ...] = ()) -> Timeline:
        """One simulated iteration of the plan with ``max_staleness`` and ``buffer_before``
        (:attr:`rlinf.core.plan.Plan.max_staleness`, :attr:`rlinf.core.plan.Plan.buffer_before`)."""
        plan = attrs.evolve(self.plan, max_staleness=max_staleness, buffer_before=buffer_before)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RlinfWarning)
            return simulate(lower(self.trace.workflow, plan, self.cluster), self.costs)


def setup_of(run: PublishedRun, variant: Variant = NOW, inputs: Inputs = DEFAULT_INPUTS, *,
             as_run: bool = True) -> Setup:  # fmt: skip
    """Synthesize ``run``'s trace (at its device counts), place its log-prob forwards where the run computes them
    (``as_run``; else leave them in rlinf's inference component), fit the costs, make its plan."""
    workload = workload_of(run, variant, inputs)
    cluster = cluster_of(run)
    synthesized = synthesize(workload, cluster, seed=SEED, date="unused", device_counts=device_counts_of(run))
    trace = as_the_trainer_reads(synthesized, run) if as_run else synthesized
    row = run.as_previously() if variant.as_previously else run
    plan = plan_from_dict(plan_of(row, trace.workflow), cluster.num_devices, source=run.key)
    return Setup(trace=trace, cluster=cluster, costs=fit(trace, cluster), plan=plan)


def simulate_run(run: PublishedRun, variant: Variant = NOW, inputs: Inputs = DEFAULT_INPUTS) -> Timeline:
    """One simulated iteration of ``run`` at its staleness bound (:func:`staleness_of`): its prediction."""
    return setup_of(run, variant, inputs).timeline(staleness_of(run))


@attrs.frozen(kw_only=True)
class Prediction:
    """rlinf's side of one row."""

    key: str
    predicted_s: float
    """The simulated iteration at the run's staleness bound."""
    synchronous_s: float
    """The simulated iteration of the same plan without a staleness bound (``predicted_s`` for collocated runs)."""
    component_s: dict[str, float]
    ratio: float
    """predicted_s / reported_s."""
    straggler_s: float = 0.0
    """Seconds of the generation's straggler tail (:mod:`rlinf.analytic.straggler`) in the simulated iteration."""
    tail_share: float = 0.0
    """Its share of the slowest rollout replica's generation."""


def predict(run: PublishedRun, variant: Variant = NOW, inputs: Inputs = DEFAULT_INPUTS,
            max_staleness: int | None = None) -> Prediction:  # fmt: skip
    """``run``'s prediction by ``variant`` with ``inputs``: one simulated iteration at ``max_staleness`` (by default
    the run's, :func:`staleness_of`)."""
    setup = setup_of(run, variant, inputs)
    staleness = staleness_of(run) if max_staleness is None else max_staleness
    timeline = setup.timeline(staleness)
    synchronous = setup.timeline(0) if staleness else timeline
    component = {name: round(seconds, 3) for name, seconds in sorted(timeline.component_seconds().items())}
    tails = straggler_of(setup.trace, timeline)
    return Prediction(
        key=run.key,
        predicted_s=timeline.iteration_s,
        synchronous_s=synchronous.iteration_s,
        component_s=component,
        ratio=timeline.iteration_s / run.reported_s,
        straggler_s=max((t.seconds for t in tails), default=0.0),
        tail_share=max((t.share_of_generation for t in tails), default=0.0),
    )


# ------------------------------------------------------------------ a constant fitted on a named subset


EXTRA_STEP_GRID_S = np.linspace(0.0, 0.05, 50001)
"""Extra seconds per decode step the held-out fit tries: 0 to 50 ms in steps of 1 microsecond."""
REFERENCE_EXTRA_S = 0.01


@attrs.frozen(kw_only=True)
class StepLine:
    """A run's predicted seconds as a function of an extra per-decode-step cost: each op is linear in it (its
    steps times it), so a collocated iteration is linear; a disaggregated run's steady-state step, whose two sides
    start together and meet only at the weight sync, is the busy time of its busiest device, the largest of its
    devices' linear busy times. Two simulations give the exact function."""

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
        if run.mode in DISAGGREGATED:
            busy = timeline.device_busy_seconds()
            assert np.isclose(busy.max(), timeline.iteration_s), (run.key, busy.max(), timeline.iteration_s)
            return busy
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
    ("cost per sequence in flight", "0", Inputs(per_sequence_scale=0.0)),
    ("MFU (prefill, training)", "x0.75", Inputs(mfu_scale=0.75)),
    ("MFU (prefill, training)", "x1.25", Inputs(mfu_scale=1.25)),
    ("decode MBU", "x0.75", Inputs(mbu_scale=0.75)),
    ("decode MBU", "x1.25", Inputs(mbu_scale=1.25)),
)
"""The inputs a user would not know, each moved down and up with the others held: (input, move, inputs)."""
SENSITIVITY_NO_PER_SEQUENCE = next(
    i for i, (name, move, _) in enumerate(SENSITIVITY) if (name, move) == ("cost per sequence in flight", "0")
)
"""The move that prices each decode step without the cost per sequence in flight (borrowed, for the long
chain-of-thought runs' SGLang, from vLLM's V1 series)."""


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
