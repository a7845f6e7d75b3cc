"""Asynchronous against synchronous: the section of docs/analytic_validation.md beside published async/sync runs.

Pairs come from the published rows (benchmarks/analytic_validation_rows.py): every disaggregated run and the
collocated run of the same system, model and GPU type; rlinf's side is each row's prediction. veRL's two
asynchronous recipes (:data:`RECIPES`, below) publish a colocated synchronous run and an asynchronous one of
Qwen2.5-Math-7B DAPO on H20 GPUs with their phase times but not their response lengths, so each is predicted from
its published facts at a range of assumed mean lengths, both runs at the same one (:func:`verl_rows`); every
figure's source is in the recipe's ``source`` and ``scripts``, what had to be assumed in ``assumed``.
:func:`every_pair` puts all of them in one table and counts the pairs predicted in the published direction and
within 15% of the published ratio. Nothing here is fitted."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
from analytic_validation_model import Prediction, predict, setup_of, staleness_of
from analytic_validation_runs import DISAGGREGATED, R1_DISTILL_7B, PublishedRun, kv_cache_fraction

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


# --------------------------------------------------------------------- veRL's two asynchronous recipes
QWEN25_MATH_7B = attrs.evolve(R1_DISTILL_7B, name="Qwen2.5-Math-7B")
ASSUMED_MEANS = (1000, 2000, 4000, 8000, 16000)
"""Mean response tokens tried (neither recipe publishes one)."""
PROMPT_TOKENS = 200


@attrs.frozen(kw_only=True)
class VerlRecipe:
    """One published pair: its source, what was read and assumed, the published seconds, and its runs."""

    key: str
    title: str
    source: str
    scripts: str
    facts: tuple[str, ...]
    assumed: tuple[str, ...]
    published_s: dict[str, float]
    """``collocated`` and the asynchronous mode's seconds per step."""
    published_phases_s: dict[str, tuple[tuple[str, float], ...]]
    staleness: tuple[int, ...]
    """The staleness bounds the asynchronous run is simulated at (the first is the one the pair table uses)."""
    runs: Callable[[float], tuple[PublishedRun, PublishedRun]]
    """(synchronous, asynchronous) runs at an assumed mean response."""

    @property
    def published_ratio(self) -> float:
        """Async/sync seconds per step, published."""
        asynchronous = next(mode for mode in self.published_s if mode != "collocated")
        return self.published_s[asynchronous] / self.published_s["collocated"]


# ------------------------------------------------------------------ the fully asynchronous recipe

FULLY_ASYNC_DOC = (
    "veRL docs 'Recipe: Fully Async Policy Trainer' (docs/advance/fully_async.md of github.com/volcengine/verl at "
    "214700982, 2025-10-29; the same figures at b178a3cd5), section 'Asynchronous Training on 7B Model': H20, "
    "Qwen2.5-Math-7B, DAPO, max_response_length 28K, rollout.n 16, ppo_mini_batch_size 32; colocate sync: "
    "train_batch_size 512; fully_async_policy: require_batches 4, trigger_parameter_sync_step 4 (4 x 4 x 32 = 512 "
    "prompts per parameter sync, one step), staleness_threshold 0.5, partial_rollout True; rows 'colocate sync | "
    "128' (step 356.30 s: gen 177.85, old_log_prob 53.92, update_actor 113.81) and 'fully_async_policy | 64:64' "
    "(step 150.63 s: gen 33.14, old_log_prob none, update_actor 113.16)"
)
FULLY_ASYNC_SCRIPTS = (
    "the runs' scripts on the recipe's pull request (#2981): recipe/fully_async_policy/exp/qwen2-7B-math_128/"
    "fsdp2_colocate/dapo_7b_math_fsdp2_colocate.sh at 7f837ac3a and fsdp2_fully-async_64-64/"
    "dapo_qwen2-7B-math_28k_fsdp2_fully-async_64-64_mbs32_tfq4.sh at 34cf9e7b9: max_prompt_length 2,048, "
    "max_response_length 28,672, vLLM tensor parallelism 4 at gpu_memory_utilization 0.8, FSDP2 with fsdp_size 2 "
    "and Ulysses sequence parallelism 4, no KL term (use_kl_loss and use_kl_in_reward false: no reference model); "
    "colocated: actor weights and optimizer state offloaded; asynchronous: not offloaded, log-probs returned by "
    "vLLM (calculate_log_probs true); the asynchronous script's staleness_threshold 1 is the doc's 0.5 in its "
    "table, which is used"
)
_VLLM_EAGER = (
    "vLLM: max_num_seqs 1,024, eager (no CUDA graphs) and the KV cache freed after generating (veRL's rollout "
    "defaults at the scripts' commits); KV pool = 0.8 x memory - weights; priced by the nearest published "
    "per-step cost (engine vllm-v1-eager)"
)
_FSDP = (
    "training: FSDP2, priced by the published FSDP efficiency (framework fsdp), one model-parallel rank per GPU "
    "(sequence parallelism splits each sequence's work, not the model), the optimizer state sharded over 2 GPUs, "
    "activations recomputed (gradient checkpointing), 16 optimizer steps per step (512 / ppo_mini_batch_size 32); "
    "a colocated weight sync priced by veRL's published resharding time (weight sync verl)"
)
FULLY_ASYNC_FACTS = (
    "Qwen2.5-Math-7B priced as rlinf's 7b preset (the Qwen2.5-7B shapes it shares)",
    "512 prompts x 16 responses per step on 16 nodes of 8 H20",
    _VLLM_EAGER,
    _FSDP,
    "colocated run: synchronous, every component on all 128 GPUs, rollout, old-policy forward and actor offloaded "
    "between phases; asynchronous run: generation and reward on 64 GPUs, the actor on the other 64, no log-prob "
    "forward (the engine returns them), simulated with max_staleness 1 (whole batches one step ahead) and 2 "
    "(continuous generation: the rollout admits the next step's prompts while it generates, as partial rollout "
    "does)",
)
_ASSUMED_LENGTHS = (
    "mean prompt 200 tokens (not published)",
    "response lengths lognormal, sigma 0.6, cut at the generation limit, at each assumed mean (not published); "
    "both runs at the same one",
)


def _runs(recipe: str, *, mean_tokens: float, num_devices: int, max_response: int, sync_rollout_mp: int,
          async_rollout_mp: int, rollout_devices: int, mode: str, log_prob_forwards: str,
          published_s: dict[str, float], phases: dict[str, tuple[tuple[str, float], ...]], source: str,
          assumptions: tuple[str, ...]) -> tuple[PublishedRun, PublishedRun]:  # fmt: skip
    """A recipe's colocated run and its asynchronous run at ``mean_tokens``: the same model, batch, lengths and
    training layout; each its own rollout layout and placement."""
    common = {
        "system": f"veRL ({recipe} recipe)",
        "source": source,
        "model": QWEN25_MATH_7B,
        "device": "H20",
        "num_devices": num_devices,
        "devices_per_node": 8,
        "num_prompts": 512,
        "group_size": 16,
        "prompt_tokens": PROMPT_TOKENS,
        "response_mean_tokens": mean_tokens,
        "max_response_tokens": max_response,
        "train_mp": 1,
        "optimizer_shards": 2,
        "activation_recompute": True,
        "engine": "vllm-v1-eager",
        "reference_model": False,
        "framework": "fsdp",
        "optimizer_steps": 512 // 32,
        "weight_sync": "verl",
        "assumptions": assumptions,
    }
    synchronous = PublishedRun(
        key=f"verl-{recipe}-qwen7b-math-h20-{num_devices}-mean{mean_tokens:g}",
        mode="collocated",
        reported_s=published_s["collocated"],
        rollout_mp=sync_rollout_mp,
        kv_cache_fraction=kv_cache_fraction(QWEN25_MATH_7B, "H20", sync_rollout_mp, 0.8),
        offload=("rollout", "inference", "actor"),
        reported_phases_s=phases["collocated"],
        **common,
    )
    asynchronous = PublishedRun(
        key=f"verl-{recipe}-qwen7b-math-h20-{rollout_devices}-{num_devices - rollout_devices}-mean{mean_tokens:g}",
        mode=mode,
        reported_s=published_s[mode],
        rollout_mp=async_rollout_mp,
        kv_cache_fraction=kv_cache_fraction(QWEN25_MATH_7B, "H20", async_rollout_mp, 0.8),
        rollout_devices=rollout_devices,
        log_prob_forwards=log_prob_forwards,
        reported_phases_s=phases[mode],
        **common,
    )
    return synchronous, asynchronous


FULLY_ASYNC_S = {"collocated": 356.30, "fully-async": 150.63}
FULLY_ASYNC_PHASES_S = {
    "collocated": (("generation", 177.85), ("log-probs", 53.92), ("update", 113.81)),
    "fully-async": (("generation", 33.14), ("update", 113.16)),
}

FULLY_ASYNC = VerlRecipe(
    key="fully-async",
    title="veRL's fully asynchronous recipe, Qwen2.5-Math-7B DAPO on 128 H20 (64 + 64 asynchronous)",
    source=FULLY_ASYNC_DOC,
    scripts=FULLY_ASYNC_SCRIPTS,
    facts=FULLY_ASYNC_FACTS,
    assumed=_ASSUMED_LENGTHS,
    published_s=FULLY_ASYNC_S,
    published_phases_s=FULLY_ASYNC_PHASES_S,
    staleness=(1, 2),
    runs=lambda mean: _runs(
        "fully-async", mean_tokens=mean, num_devices=128, max_response=28 * 1024, sync_rollout_mp=4,
        async_rollout_mp=4, rollout_devices=64, mode="fully-async", log_prob_forwards="engine",
        published_s=FULLY_ASYNC_S, phases=FULLY_ASYNC_PHASES_S, source=f"{FULLY_ASYNC_DOC}; {FULLY_ASYNC_SCRIPTS}",
        assumptions=FULLY_ASYNC_FACTS + _ASSUMED_LENGTHS,
    ),
)  # fmt: skip


# ------------------------------------------------------------------ the one-step-off-policy recipe

ONE_STEP_OFF_DOC = (
    "veRL docs 'Recipe: One Step Off Policy Async Trainer' (docs/advance/one_step_off.md of "
    "github.com/volcengine/verl at b178a3cd5, 'Last updated: 07/17/2025'; first published as "
    "recipe/one_step_off_policy/README.md at 7f3d1db81, 2025-07-10, with the same FSDP2 figures), 'Experimental "
    "Results': H20, generation on 4 GPUs and training on 12, Qwen2.5-Math-7B, DAPO, vLLM; rows 'colocate sync | "
    "VLLM+FSDP2' (step 749 s: gen 321, generate_sequences 247, old_log_prob 88, update_actor 286) and "
    "'one-step-overlap async | VLLM+FSDP2' (step 520 s: wait_prev_gen 45, generate_sequences 458, old_log_prob "
    "108, update_actor 337); 'colocate sync: step = gen + old_log_prob + update_actor; one-step-overlap async: "
    "step = wait_prev_gen + old_log_prob + update_actor'"
)
ONE_STEP_OFF_SCRIPTS = (
    "the recipe's scripts at 7f3d1db81 (recipe/one_step_off_policy/dapo_7b_math_fsdp2_colocate.sh and "
    "dapo_7b_math_fsdp2_4_12.sh): 2 nodes x 8 GPUs, train_prompt_bsz 512 (516 in the asynchronous script, taken "
    "as 512), rollout.n 16, train_prompt_mini_bsz 32, max_prompt_length 2,048, FSDP2 with fsdp_size 2 and Ulysses "
    "sequence parallelism 4, gradient checkpointing, no KL term (no reference model), vLLM at "
    "gpu_memory_utilization 0.8 with tensor parallelism 4 colocated and 2 on the 4 generation GPUs; colocated: "
    "actor weights and optimizer state offloaded; asynchronous: the actor not offloaded, the old log-probs "
    "computed by the trainer from the batch generated a step earlier. The scripts set max_response_length 8,192 "
    "(and the README of 7f3d1db81 says 8,000 tokens); the doc at b178a3cd5 says 20,480 for FSDP2, which is used"
)
ONE_STEP_OFF_FACTS = (
    "Qwen2.5-Math-7B priced as rlinf's 7b preset (the Qwen2.5-7B shapes it shares)",
    "512 prompts x 16 responses per step on 2 nodes of 8 H20",
    _VLLM_EAGER,
    _FSDP,
    "colocated run: synchronous, every component on all 16 GPUs, rollout, old-policy forward and actor offloaded "
    "between phases; asynchronous run: generation and reward on 4 GPUs (2 replicas of tensor parallelism 2), the "
    "trainer on the other 12, which computes the old log-probs itself from the buffered batch (folded into its "
    "update), simulated with max_staleness 1",
)
ONE_STEP_OFF_S = {"collocated": 749.0, "one-step-off": 520.0}
ONE_STEP_OFF_PHASES_S = {
    "collocated": (("generation", 321.0), ("log-probs", 88.0), ("update", 286.0)),
    "one-step-off": (("generation", 458.0), ("log-probs", 108.0), ("update", 337.0)),
}

ONE_STEP_OFF = VerlRecipe(
    key="one-step-off",
    title="veRL's one-step-off-policy recipe, Qwen2.5-Math-7B DAPO on 16 H20 (4 + 12 asynchronous), FSDP2",
    source=ONE_STEP_OFF_DOC,
    scripts=ONE_STEP_OFF_SCRIPTS,
    facts=ONE_STEP_OFF_FACTS,
    assumed=_ASSUMED_LENGTHS,
    published_s=ONE_STEP_OFF_S,
    published_phases_s=ONE_STEP_OFF_PHASES_S,
    staleness=(1,),
    runs=lambda mean: _runs(
        "one-step-off", mean_tokens=mean, num_devices=16, max_response=20480, sync_rollout_mp=4,
        async_rollout_mp=2, rollout_devices=4, mode="one-step-off", log_prob_forwards="trainer",
        published_s=ONE_STEP_OFF_S, phases=ONE_STEP_OFF_PHASES_S,
        source=f"{ONE_STEP_OFF_DOC}; {ONE_STEP_OFF_SCRIPTS}", assumptions=ONE_STEP_OFF_FACTS + _ASSUMED_LENGTHS,
    ),
)  # fmt: skip

RECIPES = (FULLY_ASYNC, ONE_STEP_OFF)
