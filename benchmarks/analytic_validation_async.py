"""Asynchronous against synchronous: the generated section of docs/analytic_validation.md that sets the published
async/sync ratios of one system's runs of one model beside rlinf's.

Pairs come from the published rows (benchmarks/analytic_validation_rows.py): every disaggregated run and the
collocated run of the same system, model and GPU type; rlinf's side is each row's prediction. veRL's two
asynchronous recipes (benchmarks/analytic_validation_verl.py) publish both of their runs' step times but not their
response lengths, so each is predicted from its published facts at a range of assumed mean lengths, both runs at the
same one (:func:`verl_rows`). :func:`every_pair` puts all of them in one table and counts the pairs predicted in the
published direction and within 15% of the published ratio.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from analytic_validation_model import Prediction, predict, setup_of, staleness_of
from analytic_validation_runs import DISAGGREGATED, PublishedRun
from analytic_validation_verl import ASSUMED_MEANS, RECIPES, VerlRecipe

# ------------------------------------------------------------------ pairs of published rows


def pairs_of(runs: Sequence[PublishedRun]) -> list[tuple[PublishedRun, PublishedRun]]:
    """(synchronous, asynchronous) runs of one system, model and GPU type, in the rows' order."""
    out = []
    for run in runs:
        if run.mode not in DISAGGREGATED:
            continue
        (synchronous,) = (
            r
            for r in runs
            if r.mode == "collocated"
            and (r.system, r.model.name, r.device) == (run.system, run.model.name, run.device)
        )
        out.append((synchronous, run))
    return out


def per_gpu_throughput_ratio(asynchronous_s: float, asynchronous_gpus: int, synchronous_s: float,
                             synchronous_gpus: int) -> float:  # fmt: skip
    """Async/sync samples per second per GPU of two runs of the same samples per step."""
    return (synchronous_s * synchronous_gpus) / (asynchronous_s * asynchronous_gpus)


def published_in(run: PublishedRun) -> str:
    """The document and table a row was read from (its source up to the file, commits and recipes)."""
    return run.source.split(" (docs/")[0]


def pair_rows(runs: Sequence[PublishedRun], now: Sequence[Prediction]) -> list[dict[str, Any]]:
    """Per pair: both runs' GPUs and step times, published and predicted; the async/sync ratios of seconds per
    step and of samples per second per GPU (both runs process the same samples per step)."""
    number = {run.key: index for index, run in enumerate(runs, start=1)}
    predicted = {p.key: p.predicted_s for p in now}
    rows = []
    for synchronous, asynchronous in pairs_of(runs):
        assert (
            synchronous.num_prompts * synchronous.group_size
            == asynchronous.num_prompts * asynchronous.group_size
        )
        row: dict[str, Any] = {
            "model": synchronous.model.name,
            "system": synchronous.system,
            "device": synchronous.device,
            "rows": [number[synchronous.key], number[asynchronous.key]],
            "keys": [synchronous.key, asynchronous.key],
            "gpus": [synchronous.num_devices, asynchronous.num_devices],
            "published_in": published_in(asynchronous),
        }
        for side, (sync_s, async_s) in (
            ("published", (synchronous.reported_s, asynchronous.reported_s)),
            ("predicted", (predicted[synchronous.key], predicted[asynchronous.key])),
        ):
            row[f"{side}_s"] = [round(sync_s, 1), round(async_s, 1)]
            row[f"{side}_step_ratio"] = round(async_s / sync_s, 3)
            row[f"{side}_per_gpu_ratio"] = round(
                per_gpu_throughput_ratio(async_s, asynchronous.num_devices, sync_s, synchronous.num_devices),
                3,
            )
        rows.append(row)
    return rows


def literal_placement(runs: Sequence[PublishedRun]) -> list[dict[str, Any]]:
    """Each disaggregated row simulated with its log-prob forwards left in rlinf's inference component on the
    training GPUs (the placement read literally), at its staleness bound with the buffer before the actor and
    before the inference (``buffer_before``), and without a bound."""
    out = []
    for run in runs:
        if run.mode not in DISAGGREGATED:
            continue
        setup = setup_of(run, as_run=False)
        out.append(
            {
                "key": run.key,
                "staleness_s": round(setup.timeline(staleness_of(run)).iteration_s, 1),
                "behind_buffer_s": round(setup.timeline(staleness_of(run), ("inference",)).iteration_s, 1),
                "synchronous_s": round(setup.timeline(0).iteration_s, 1),
            }
        )
    return out


# ------------------------------------------------------------------ veRL's recipes, at assumed lengths


def verl_rows(recipe: VerlRecipe) -> list[dict[str, Any]]:
    """Per assumed mean response: both runs' predictions (the asynchronous one at each staleness bound), their
    ratios and the phases that the recipe's table breaks down."""
    rows = []
    for mean in ASSUMED_MEANS:
        synchronous, asynchronous = recipe.runs(mean)
        sync = predict(synchronous)
        row: dict[str, Any] = {
            "mean_response_tokens": mean,
            "synchronous_s": round(sync.predicted_s, 1),
            "synchronous_phases_s": _phases(sync, synchronous),
        }
        for k in recipe.staleness:
            async_k = predict(asynchronous, max_staleness=k)
            row[f"staleness_{k}_s"] = round(async_k.predicted_s, 1)
            row[f"staleness_{k}_ratio"] = round(async_k.predicted_s / sync.predicted_s, 3)
            row[f"staleness_{k}_update_s"] = round(async_k.component_s.get("actor", 0.0), 1)
        rows.append(row)
    return rows


def _phases(prediction: Prediction, run: PublishedRun) -> dict[str, float]:
    names = {"generation": ("rollout",), "log-probs": ("inference",), "update": ("actor",)}
    return {
        phase: round(sum(prediction.component_s.get(n, 0.0) for n in names[phase]), 1)
        for phase, _ in run.reported_phases_s
    }


def verl_report(recipe: VerlRecipe) -> dict[str, Any]:
    """A recipe's published figures, sources and rows."""
    return {
        "title": recipe.title,
        "published_s": recipe.published_s,
        "published_ratio": round(recipe.published_ratio, 3),
        "published_phases_s": {mode: dict(phases) for mode, phases in recipe.published_phases_s.items()},
        "source": recipe.source,
        "scripts": recipe.scripts,
        "facts": list(recipe.facts),
        "assumed": list(recipe.assumed),
        "staleness": list(recipe.staleness),
        "rows": verl_rows(recipe),
    }


# ------------------------------------------------------------------ every published pair, one table

WITHIN = 0.15
"""A pair's prediction is within this fraction of its published async/sync ratio, or not."""


def every_pair(pairs: list[dict[str, Any]], verl: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The published async/sync pairs in one list: NeMo RL's rows, and each veRL recipe at every assumed mean
    length (its asynchronous run at the recipe's first staleness bound). A pair is in the published direction and
    within :data:`WITHIN` only if it is at every length the page tries."""
    out = []
    for row in pairs:
        published, predicted = row["published_step_ratio"], row["predicted_step_ratio"]
        out.append(_judged(f"{row['model']}, {row['system']}, {row['device']}", published, [predicted]))
    for recipe in RECIPES:
        report = verl[recipe.key]
        k = recipe.staleness[0]
        predicted = [row[f"staleness_{k}_ratio"] for row in report["rows"]]
        out.append(_judged(report["title"], report["published_ratio"], predicted))
    return out


def _judged(what: str, published: float, predicted: list[float]) -> dict[str, Any]:
    errors = [p / published - 1 for p in predicted]
    return {
        "pair": what,
        "published": published,
        "predicted": [round(p, 3) for p in predicted],
        "direction": all((p < 1) == (published < 1) for p in predicted),
        "within": all(abs(e) <= WITHIN for e in errors),
        "worst_error": round(max(errors, key=abs), 3),
    }


def every_pair_block(rows: list[dict[str, Any]]) -> list[str]:
    """The table of every pair, and the count that holds."""
    lines = [
        "| pair | async/sync s/step, published | rlinf | rlinf / published - 1 (worst) | direction | "
        f"within {WITHIN:.0%} |",
        "| --- | ---: | --- | ---: | --- | --- |",
    ]
    for row in rows:
        predicted = " / ".join(f"{p:.2f}" for p in row["predicted"])
        lines.append(
            f"| {row['pair']} | {row['published']:.2f} | {predicted} | {row['worst_error']:+.2f} "
            f"| {'yes' if row['direction'] else '**no**'} | {'yes' if row['within'] else '**no**'} |"
        )
    right = sum(row["direction"] for row in rows)
    close = sum(row["within"] for row in rows)
    lines += [
        "",
        f"**{right} of {len(rows)} pairs predicted in the published direction, {close} of {len(rows)} within "
        f"{WITHIN:.0%} of the published ratio** (a veRL pair counts only if it holds at every assumed length).",
    ]
    return lines


# ------------------------------------------------------------------ the section


def report(runs: Sequence[PublishedRun], now: Sequence[Prediction]) -> dict[str, Any]:
    """The section's figures (for the JSON) and its generated block."""
    pairs = pair_rows(runs, now)
    verl = {recipe.key: verl_report(recipe) for recipe in RECIPES}
    result = {
        "pairs": pairs,
        "literal_placement": literal_placement(runs),
        "verl": verl,
        "every_pair": every_pair(pairs, verl),
    }
    return {**result, "block": block(result)}


def block(result: dict[str, Any]) -> str:
    """The generated tables of the section."""
    lines = [
        "| model | system, GPU | rows | GPUs, sync / async | published s/step, sync / async | async/sync s/step: "
        "published | rlinf | async/sync samples/s/GPU: published | rlinf | published in |",
        "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in result["pairs"]:
        lines.append(
            f"| {row['model']} | {row['system']}, {row['device']} | {row['rows'][0]}, {row['rows'][1]} "
            f"| {row['gpus'][0]} / {row['gpus'][1]} | {row['published_s'][0]:g} / {row['published_s'][1]:g} "
            f"| {row['published_step_ratio']:.2f} | {row['predicted_step_ratio']:.2f} "
            f"| {row['published_per_gpu_ratio']:.2f} | {row['predicted_per_gpu_ratio']:.2f} | {row['published_in']} |"
        )
    lines += [
        "",
        "The same disaggregated rows with the log-prob forwards left in rlinf's inference component on the training "
        "GPUs, as NeMo RL's placement reads literally (seconds per step):",
        "",
        "| key | max_staleness 1, buffer before the actor | max_staleness 1, buffer before the inference | "
        "synchronous | the row's prediction (forwards folded into the actor) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    folded = {row["keys"][1]: row["predicted_s"][1] for row in result["pairs"]}
    for row in result["literal_placement"]:
        lines.append(
            f"| {row['key']} | {row['staleness_s']:.1f} | {row['behind_buffer_s']:.1f} | {row['synchronous_s']:.1f} "
            f"| {folded[row['key']]:.1f} |"
        )
    for recipe in RECIPES:
        lines += ["", *verl_block(result["verl"][recipe.key])]
    lines += [
        "",
        "Every published pair, async/sync seconds per step:",
        "",
        *every_pair_block(result["every_pair"]),
    ]
    return "\n".join(lines)


def verl_block(verl: dict[str, Any]) -> list[str]:
    """One veRL recipe's table at each assumed length, its published phases and its sources."""
    (sync_mode, async_mode) = verl["published_s"]
    staleness = verl["staleness"]
    head = "| assumed mean response (tokens) | sync | its generation / log-probs / update |"
    rule = "| ---: | ---: | --- |"
    for k in staleness:
        head += f" async, max_staleness {k} | async/sync | its update |"
        rule += " ---: | ---: | ---: |"
    lines = [
        f"{verl['title']}: published {verl['published_s'][async_mode]:g} s per step asynchronously against "
        f"{verl['published_s'][sync_mode]:g} s colocated, async/sync **{verl['published_ratio']:.2f}** (same GPUs, "
        "same 512 x 16 samples per step). rlinf at each **assumed** mean response length, both runs at the same one "
        "(seconds per step):",
        "",
        head,
        rule,
    ]
    for row in verl["rows"]:
        phases = " / ".join(
            f"{row['synchronous_phases_s'][p]:.1f}" for p in ("generation", "log-probs", "update")
        )
        line = f"| {row['mean_response_tokens']:,} | {row['synchronous_s']:.1f} | {phases} |"
        for k in staleness:
            line += (
                f" {row[f'staleness_{k}_s']:.1f} | {row[f'staleness_{k}_ratio']:.2f} "
                f"| {row[f'staleness_{k}_update_s']:.1f} |"
            )
        lines.append(line)
    published = "; ".join(
        f"{mode} " + ", ".join(f"{phase} {seconds:g}" for phase, seconds in phases.items())
        for mode, phases in verl["published_phases_s"].items()
    )
    lines += [
        "",
        f"Published phases (s): {published}.",
        "",
        f"Source: {verl['source']}; {verl['scripts']}. Read from them: "
        + "; ".join(verl["facts"])
        + ". Assumed: "
        + "; ".join(verl["assumed"])
        + ".",
    ]
    return lines
