"""The analytic model against published RL post-training runs: the tables of docs/analytic_validation.md.

    python benchmarks/analytic_validation.py [--json docs/analytic_validation.json] [--markdown]

The runs, their sources and assumptions are in benchmarks/analytic_validation_runs.py. For each run the script
builds the analytic model's workload (:class:`rlinf.llm_workload.LLMWorkload` at its default efficiencies),
synthesizes a trace on the run's cluster, lowers the run's placement (collocated, or disaggregated for the
one-step-off-policy runs) and simulates one iteration. The prediction is the simulated iteration time; for a
one-step-off-policy run, whose generation of step k+1 overlaps the training of step k, it is the busy time of
the busiest device in that iteration (the pipeline's steady-state step). The ratio is predicted over reported
seconds.

Every run is predicted by each :data:`ABLATION` variant, cumulatively: the model as the previous page had it
("before"), then each change of this page, the last being the model "now". Nothing in them is fitted to these runs.
A last column ("calibrated, held out") adds the one quantity no datasheet gives, the inference engine's seconds
per decode step: for each run it is fitted, by least squares on log ratios, to the *other* runs of the same engine
only (leave one out), so that every calibrated prediction is of a run its fit did not see.

``--markdown`` prints the doc's generated tables; ``--json`` writes everything as JSON.
tests/test_analytic_validation.py recomputes both and checks that the doc and its JSON still agree.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

sys.path.insert(
    0, str(Path(__file__).resolve().parent)
)  # benchmarks/ is not a package: find the runs beside us

from analytic_validation_runs import (  # noqa: E402
    DEVICES,
    ENGINES,
    MESH_LINK_BYTES_PER_S,
    PHASES,
    RUNS,
    PublishedRun,
)

from rlinf.analytic import synthesize  # noqa: E402
from rlinf.cluster import Cluster  # noqa: E402
from rlinf.costs import fit  # noqa: E402
from rlinf.errors import RlinfWarning  # noqa: E402
from rlinf.llm_workload import LLMWorkload, ResponseLengths  # noqa: E402
from rlinf.lowering import lower  # noqa: E402
from rlinf.plan import plan_from_dict  # noqa: E402
from rlinf.timeline import Timeline  # noqa: E402
from simulator import simulate  # noqa: E402

SEED = 0
RESPONSE_SIGMA = 0.6
"""Lognormal spread of response lengths (the project's recipes' value): no source states a distribution."""
OVERHEAD_GRID_S = np.linspace(0.0, 0.2, 20001)
"""Per-decode-step overheads the calibration tries: 0 to 200 ms in steps of 10 microseconds."""
REFERENCE_OVERHEAD_S = 0.01
"""The second overhead at which each run is simulated to draw its prediction as a line in the overhead."""


@attrs.frozen(kw_only=True)
class Variant:
    """One version of the model (and of how the rows are read)."""

    key: str
    label: str
    as_previously: bool
    """Read the rows as the previous page did (:meth:`PublishedRun.as_previously`)."""
    attention_and_recompute: bool
    """Attention FLOPs and activation recomputation (added by the previous page)."""
    tensor_parallel_comm: bool
    free_kv_cache: bool


ABLATION: tuple[Variant, ...] = (
    Variant(key="first", label="the first model: no attention FLOPs, no recomputation", as_previously=True,
            attention_and_recompute=False, tensor_parallel_comm=False, free_kv_cache=False),
    Variant(key="before", label="before: the previous page (+ attention FLOPs, recomputation)", as_previously=True,
            attention_and_recompute=True, tensor_parallel_comm=False, free_kv_cache=False),
    Variant(key="layouts", label="+ the runs' own layouts: optimizer sharding, max_num_seqs 1,024, what each "
            "system offloads", as_previously=False, attention_and_recompute=True, tensor_parallel_comm=False,
            free_kv_cache=False),
    Variant(key="tensor_parallel", label="+ tensor-parallel all-reduces", as_previously=False,
            attention_and_recompute=True, tensor_parallel_comm=True, free_kv_cache=False),
    Variant(key="now", label="+ KV cache freed, not copied, on collocated switches (= now)", as_previously=False,
            attention_and_recompute=True, tensor_parallel_comm=True, free_kv_cache=True),
)  # fmt: skip
VARIANTS = {variant.key: variant for variant in ABLATION}
BEFORE, NOW = VARIANTS["before"], VARIANTS["now"]


def median_for_mean(mean_tokens: float, max_tokens: int, *, sigma: float = RESPONSE_SIGMA, seed: int = SEED,
                    num_lengths: int = 4096) -> float:  # fmt: skip
    """The lognormal median whose clipped draw (as :func:`rlinf.analytic.synthesize` makes it) has the given mean."""
    if not 1 <= mean_tokens < max_tokens:
        raise ValueError(f"mean response {mean_tokens} must lie in [1, max_tokens={max_tokens})")
    low, high = 1.0, float(max_tokens)

    def mean_of(median: float) -> float:
        lengths = ResponseLengths(median_tokens=median, sigma=sigma, max_tokens=max_tokens)
        return float(lengths.draw(num_lengths, np.random.default_rng(seed)).mean())

    if mean_of(high) < mean_tokens:
        raise ValueError(f"no median up to {max_tokens} gives a mean of {mean_tokens} with sigma {sigma}")
    for _ in range(60):
        middle = math.sqrt(low * high)
        low, high = (middle, high) if mean_of(middle) < mean_tokens else (low, middle)
    return math.sqrt(low * high)


def workload_of(
    run: PublishedRun, variant: Variant = NOW, *, decode_step_overhead_s: float = 0.0
) -> LLMWorkload:
    """The analytic model's workload for ``run``: the run's facts, the model's default efficiencies, the terms the
    ``variant`` turns on, and the engine's per-decode-step overhead (0 but in the calibrated column)."""
    row = run.as_previously() if variant.as_previously else run
    return LLMWorkload(
        model=row.model,
        num_prompts=row.num_prompts,
        group_size=row.group_size,
        prompt_tokens=row.prompt_tokens,
        response=ResponseLengths(
            median_tokens=median_for_mean(row.response_mean_tokens, row.max_response_tokens),
            sigma=RESPONSE_SIGMA,
            max_tokens=row.max_response_tokens,
        ),
        algorithm=row.algorithm,
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
        decode_step_overhead_s=decode_step_overhead_s,
    )


def cluster_of(run: PublishedRun) -> Cluster:
    """The run's cluster: whole nodes of its device."""
    device, links = DEVICES[run.device]
    per_node = min(run.devices_per_node, run.num_devices)
    return Cluster(
        num_nodes=run.num_devices // per_node, devices_per_node=per_node, device=device, links=links
    )


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


def simulate_run(
    run: PublishedRun, variant: Variant = NOW, *, decode_step_overhead_s: float = 0.0
) -> Timeline:
    """Synthesize, lower and simulate one iteration of ``run``."""
    workload = workload_of(run, variant, decode_step_overhead_s=decode_step_overhead_s)
    cluster = cluster_of(run)
    trace = synthesize(workload, cluster, seed=SEED, date="unused")
    names = [c.name for c in trace.workflow.components]
    row = run.as_previously() if variant.as_previously else run
    plan = plan_from_dict(plan_of(row, names), cluster.num_devices, source=run.key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RlinfWarning)
        return simulate(lower(trace.workflow, plan, cluster), fit(trace, cluster))


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


def predicted_seconds(run: PublishedRun, timeline: Timeline) -> float:
    """A collocated run's iteration; a one-step-off run's busiest device (the pipeline's steady-state step)."""
    if run.mode == "one-step-off":
        return float(timeline.device_busy_seconds().max())
    return timeline.iteration_s


def predict(run: PublishedRun, variant: Variant = NOW, *, decode_step_overhead_s: float = 0.0) -> Prediction:
    """``run``'s prediction by ``variant`` (see :func:`predicted_seconds`)."""
    timeline = simulate_run(run, variant, decode_step_overhead_s=decode_step_overhead_s)
    predicted = predicted_seconds(run, timeline)
    component = {name: round(seconds, 3) for name, seconds in sorted(timeline.component_seconds().items())}
    return Prediction(
        key=run.key,
        predicted_s=predicted,
        iteration_s=timeline.iteration_s,
        component_s=component,
        ratio=predicted / run.reported_s,
    )


# ------------------------------------------------------------------ calibration of the engine, held out


@attrs.frozen(kw_only=True)
class OverheadLine:
    """A run's predicted figure (its step, or its reported phase) as a function of the per-decode-step overhead.

    Each op's seconds are linear in the overhead (a generation costs its roofline plus its steps times it), so a
    collocated iteration (a chain through the generation) is linear in it, and a one-step-off run's busiest device
    is the largest of its devices' linear busy times: two simulations give the exact function."""

    run: PublishedRun
    target: str
    """``step``, or the reported phase fitted instead (the generation, where the source gives it)."""
    reported_s: float
    at_zero: np.ndarray = attrs.field(eq=False)
    """The figure at zero overhead (per device for a one-step-off step, else one value)."""
    slope: np.ndarray = attrs.field(eq=False)
    """Its change per second of overhead."""

    def __call__(self, overhead_s: np.ndarray) -> np.ndarray:
        """The figure at each overhead."""
        values = self.at_zero[:, None] + self.slope[:, None] * np.asarray(overhead_s)[None, :]
        return values.max(axis=0)


def fit_target(run: PublishedRun) -> tuple[str, float]:
    """What a calibration fits to a run: its reported generation where the source breaks the step down (the
    overhead is the generation's), else its step."""
    phases = dict(run.reported_phases_s)
    if "generation" in phases:
        return "generation", phases["generation"]
    return "step", run.reported_s


def overhead_line(run: PublishedRun) -> OverheadLine:
    """The run's :class:`OverheadLine`, from simulations at zero and at :data:`REFERENCE_OVERHEAD_S`."""
    target, reported = fit_target(run)

    def figure(timeline: Timeline) -> np.ndarray:
        if target != "step":
            seconds = timeline.component_seconds()
            return np.array([sum(seconds.get(name, 0.0) for name in PHASES[target])])
        if run.mode == "one-step-off":
            return timeline.device_busy_seconds()
        return np.array([timeline.iteration_s])

    zero = figure(simulate_run(run))
    reference = figure(simulate_run(run, decode_step_overhead_s=REFERENCE_OVERHEAD_S))
    return OverheadLine(
        run=run,
        target=target,
        reported_s=reported,
        at_zero=zero,
        slope=(reference - zero) / REFERENCE_OVERHEAD_S,
    )


def fit_overhead(lines: Sequence[OverheadLine]) -> float:
    """The overhead on :data:`OVERHEAD_GRID_S` that minimizes the summed squared log ratios of ``lines``."""
    cost = sum(np.log(line(OVERHEAD_GRID_S) / line.reported_s) ** 2 for line in lines)
    return float(OVERHEAD_GRID_S[int(np.argmin(cost))])


@attrs.frozen(kw_only=True)
class HeldOut:
    """One run predicted with the overhead fitted to the other runs of its engine."""

    key: str
    fitted_on: tuple[str, ...]
    overhead_s: float
    alone_s: float
    """The overhead that fits this run by itself: in-sample, a diagnostic of how much the runs of one engine
    disagree, used for no prediction."""
    prediction: Prediction


def calibrate_held_out(runs: Sequence[PublishedRun]) -> list[HeldOut]:
    """Leave one out within each engine: every run's overhead is fitted to the others of its engine."""
    lines = {run.key: overhead_line(run) for run in runs}
    out = []
    for run in runs:
        others = [other for other in runs if other.engine == run.engine and other.key != run.key]
        if not others:
            raise ValueError(f"{run.key}: no other run of engine {run.engine} to fit its overhead to")
        overhead = fit_overhead([lines[other.key] for other in others])
        prediction = predict(run, decode_step_overhead_s=overhead)
        out.append(
            HeldOut(
                key=run.key,
                fitted_on=tuple(other.key for other in others),
                overhead_s=overhead,
                alone_s=fit_overhead([lines[run.key]]),
                prediction=prediction,
            )
        )
    return out


# ------------------------------------------------------------------ summaries and the doc's tables


def summarize(predictions: Sequence[Prediction]) -> dict[str, Any]:
    """Median ratio, and the worst one (farthest from 1 in either direction, i.e. largest |log ratio|)."""
    ratios = [p.ratio for p in predictions]
    worst = max(predictions, key=lambda p: abs(math.log(p.ratio)))
    return {
        "num_runs": len(ratios),
        "median_ratio": round(statistics.median(ratios), 2),
        "worst_ratio": round(worst.ratio, 2),
        "worst_run": worst.key,
        "median_abs_error": round(statistics.median(abs(r - 1) for r in ratios), 3),
    }


def summary_line(summary: dict[str, Any], label: str) -> str:
    """One must-show line of the doc."""
    return (
        f"**{label}: {summary['num_runs']} configurations, median ratio {summary['median_ratio']:.2f}, worst ratio "
        f"{summary['worst_ratio']:.2f} ({summary['worst_run']})**"
    )


def phase_seconds(prediction: Prediction, phase: str) -> float:
    """The predicted seconds of a reported phase: the sum of its components' (and movements') seconds."""
    return sum(prediction.component_s.get(name, 0.0) for name in PHASES[phase])


def results_table(runs: Sequence[PublishedRun], before: Sequence[Prediction], now: Sequence[Prediction],
                  held_out: Sequence[HeldOut]) -> list[str]:  # fmt: skip
    """The doc's main table."""
    lines = [
        "| # | key | system | model | GPUs | prompts x group | prompt / response (mean tokens) | mode "
        "| reported s/step | before | ratio | now | ratio | calibrated, held out | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    rows = zip(runs, before, now, held_out, strict=True)
    for index, (run, old, new, calibrated) in enumerate(rows, start=1):
        mode = run.mode if run.algorithm == "grpo" else f"{run.mode}, PPO"
        tuned = calibrated.prediction
        lines.append(
            f"| {index} | {run.key} | {run.system} | {run.model.name} | {run.num_devices}x {run.device} "
            f"| {run.num_prompts} x {run.group_size} | {run.prompt_tokens} / {run.response_mean_tokens:g} | {mode} "
            f"| {run.reported_s:g} | {old.predicted_s:.1f} | {old.ratio:.2f} | {new.predicted_s:.1f} "
            f"| {new.ratio:.2f} | {tuned.predicted_s:.1f} | {tuned.ratio:.2f} |"
        )
    return lines


def ablation_table(summaries: dict[str, dict[str, Any]]) -> list[str]:
    """Median and worst ratio as each change is added."""
    lines = ["| model | median ratio | worst ratio | worst run |", "| --- | ---: | ---: | --- |"]
    for variant in ABLATION:
        summary = summaries[variant.key]
        lines.append(
            f"| {variant.label} | {summary['median_ratio']:.2f} | {summary['worst_ratio']:.2f} "
            f"| {summary['worst_run']} |"
        )
    return lines


def calibration_table(runs: Sequence[PublishedRun], held_out: Sequence[HeldOut]) -> list[str]:
    """Each run's fold: the engine, what its overhead was fitted to, the value and the held-out ratio."""
    lines = [
        "| key | engine | overhead fitted to | seconds per decode step | held-out ratio | the run alone would need |",
        "| --- | --- | --- | ---: | ---: | ---: |",
    ]
    for run, calibrated in zip(runs, held_out, strict=True):
        kinds = sorted({fit_target(RUN_OF[key])[0] for key in calibrated.fitted_on})
        others = calibrated.fitted_on
        targets = f"`{others[0]}`" if len(others) == 1 else f"the {len(others)} other runs"
        targets += f" ({' and '.join(kinds)} {'time' if len(others) == 1 else 'times'})"
        lines.append(
            f"| {run.key} | {run.engine} | {targets} | {1000 * calibrated.overhead_s:.2f} ms "
            f"| {calibrated.prediction.ratio:.2f} | {1000 * calibrated.alone_s:.2f} ms |"
        )
    return lines


def phase_table(
    runs: Sequence[PublishedRun], now: Sequence[Prediction], held_out: Sequence[HeldOut]
) -> list[str]:
    """Per reported phase: reported, now, calibrated (held out)."""
    lines = [
        "| key | phase | reported | now | ratio | calibrated, held out | ratio |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for run, prediction, calibrated in zip(runs, now, held_out, strict=True):
        for phase, reported in run.reported_phases_s:
            new = phase_seconds(prediction, phase)
            tuned = phase_seconds(calibrated.prediction, phase)
            lines.append(
                f"| {run.key} | {phase} | {reported:.2f} | {new:.2f} | {new / reported:.2f} | {tuned:.2f} "
                f"| {tuned / reported:.2f} |"
            )
    return lines


RUN_OF = {run.key: run for run in RUNS}


def markdown(runs: Sequence[PublishedRun], predictions: dict[str, list[Prediction]],
             held_out: Sequence[HeldOut]) -> str:  # fmt: skip
    """The doc's generated part: results, summaries, ablation, calibration folds, sources, phases."""
    before, now = predictions[BEFORE.key], predictions[NOW.key]
    summaries = {key: summarize(values) for key, values in predictions.items()}
    lines = results_table(runs, before, now, held_out)
    lines += ["", summary_line(summaries[BEFORE.key], "Before"), "", summary_line(summaries[NOW.key], "Now")]
    calibrated = summarize([h.prediction for h in held_out])
    lines += ["", summary_line(calibrated, "Calibrated, held out"), ""]
    lines += ["What each change does (cumulative, top to bottom; nothing fitted):", ""]
    lines += ablation_table(summaries)
    lines += [
        "",
        "The calibrated column, fold by fold (each run's overhead fitted to the other runs of its engine):",
    ]
    lines += ["", *calibration_table(runs, held_out), "", "Engines:", ""]
    lines += [f"* `{key}`: {text}." for key, text in ENGINES.items()]
    lines += ["", "Sources and assumptions, per row:", ""]
    for index, run in enumerate(runs, start=1):
        lines.append(f"{index}. `{run.key}`: {run.source}. Assumed: " + "; ".join(run.assumptions) + ".")
    lines += ["", "Per phase, where the source breaks the step down (seconds):", ""]
    lines += phase_table(runs, now, held_out)
    return "\n".join(lines)


def report(runs: Sequence[PublishedRun] = RUNS) -> dict[str, Any]:
    """Every row (its facts, assumptions and predictions), the summaries and the doc's tables, JSON-ready."""
    predictions = {variant.key: [predict(run, variant) for run in runs] for variant in ABLATION}
    held_out = calibrate_held_out(runs)
    rows = []
    for index, run in enumerate(runs):
        old, new, calibrated = predictions[BEFORE.key][index], predictions[NOW.key][index], held_out[index]
        row = attrs.asdict(run, recurse=True)
        row.update(
            response_median_tokens=round(workload_of(run).response.median_tokens, 1),
            predicted_s_before=round(old.predicted_s, 1),
            ratio_before=round(old.ratio, 2),
            predicted_s=round(new.predicted_s, 1),
            ratio=round(new.ratio, 2),
            simulated_iteration_s=round(new.iteration_s, 1),
            component_s=new.component_s,
            ratio_by_variant={key: round(values[index].ratio, 3) for key, values in predictions.items()},
            calibrated_overhead_s=calibrated.overhead_s,
            calibrated_fitted_on=list(calibrated.fitted_on),
            overhead_alone_s=calibrated.alone_s,
            predicted_s_calibrated=round(calibrated.prediction.predicted_s, 1),
            ratio_calibrated=round(calibrated.prediction.ratio, 2),
            component_s_calibrated=calibrated.prediction.component_s,
        )
        rows.append(row)
    return {
        "command": "python benchmarks/analytic_validation.py --json docs/analytic_validation.json",
        "seed": SEED,
        "summary_before": summarize(predictions[BEFORE.key]),
        "summary": summarize(predictions[NOW.key]),
        "summary_calibrated": summarize([h.prediction for h in held_out]),
        "ablation": {variant.key: summarize(predictions[variant.key]) for variant in ABLATION},
        "runs": rows,
        "markdown": markdown(runs, predictions, held_out),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, default=None, help="write the rows and summaries to this file")
    parser.add_argument(
        "--markdown", action="store_true", help="print the doc's generated tables, summaries and sources"
    )
    args = parser.parse_args()
    result = report()
    if args.markdown:
        print(result["markdown"])
    else:
        for row in result["runs"]:
            print(
                f"{row['key']:<30} reported {row['reported_s']:>6.1f} s  before {row['predicted_s_before']:>6.1f} s "
                f"({row['ratio_before']:.2f})  now {row['predicted_s']:>6.1f} s ({row['ratio']:.2f})  calibrated "
                f"{row['predicted_s_calibrated']:>6.1f} s ({row['ratio_calibrated']:.2f})"
            )
        print(summary_line(result["summary_before"], "Before"))
        print(summary_line(result["summary"], "Now"))
        print(summary_line(result["summary_calibrated"], "Calibrated, held out"))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
