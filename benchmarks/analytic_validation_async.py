"""Asynchronous against synchronous: the generated section of docs/analytic_validation.md that sets the published
async/sync ratios of one system's runs of one model beside rlinf's.

Pairs come from the published rows (benchmarks/analytic_validation_rows.py): every disaggregated run and the
collocated run of the same system, model and GPU type; rlinf's side is each row's prediction. veRL's fully
asynchronous recipe publishes both of its runs' step times but not their response lengths, so it is predicted from
its published facts at a range of assumed mean lengths, both runs at the same one (:func:`verl_fully_async`).
"""

from __future__ import annotations

from collections.abc import Sequence
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


# ------------------------------------------------------------------ veRL's fully asynchronous recipe

VERL_ASYNC_DOC = (
    "veRL docs 'Recipe: Fully Async Policy Trainer' (docs/advance/fully_async.md of github.com/volcengine/verl at "
    "214700982, 2025-10-29; the same figures at b178a3cd5), section 'Asynchronous Training on 7B Model': H20, "
    "Qwen2.5-Math-7B, DAPO, max_response_length 28K, rollout.n 16, ppo_mini_batch_size 32; colocate sync: "
    "train_batch_size 512; fully_async_policy: require_batches 4, trigger_parameter_sync_step 4 (4 x 4 x 32 = 512 "
    "prompts per parameter sync, one step), staleness_threshold 0.5, partial_rollout True; rows 'colocate sync | "
    "128' (step 356.30 s: gen 177.85, old_log_prob 53.92, update_actor 113.81) and 'fully_async_policy | 64:64' "
    "(step 150.63 s: gen 33.14, old_log_prob none, update_actor 113.16)"
)
VERL_ASYNC_SCRIPTS = (
    "the runs' scripts on the recipe's pull request (#2981): recipe/fully_async_policy/exp/qwen2-7B-math_128/"
    "fsdp2_colocate/dapo_7b_math_fsdp2_colocate.sh at 7f837ac3a and fsdp2_fully-async_64-64/"
    "dapo_qwen2-7B-math_28k_fsdp2_fully-async_64-64_mbs32_tfq4.sh at 34cf9e7b9: max_prompt_length 2,048, "
    "max_response_length 28,672, vLLM tensor parallelism 4 at gpu_memory_utilization 0.8, FSDP2 with fsdp_size 2 "
    "and Ulysses sequence parallelism 4, no KL term (use_kl_loss and use_kl_in_reward false: no reference model); "
    "colocated: actor weights and optimizer state offloaded; asynchronous: not offloaded, log-probs returned by "
    "vLLM (calculate_log_probs true); the asynchronous script's staleness_threshold 1 is the doc's 0.5 in its "
    "table, which is used"
)
VERL_ASYNC_FACTS = (
    "Qwen2.5-Math-7B priced as rlinf's 7b preset (the Qwen2.5-7B shapes it shares)",
    "512 prompts x 16 responses per step on 16 nodes of 8 H20",
    "vLLM: max_num_seqs 1,024, eager (no CUDA graphs) and the KV cache freed after generating (veRL's rollout "
    "defaults at the scripts' commits); KV pool = 0.8 x memory - weights; priced by the nearest published "
    "per-step cost (engine vllm-v1-eager)",
    "training: one model-parallel rank per GPU (sequence parallelism splits each sequence's work, not the model), "
    "the optimizer state sharded over 2 GPUs, activations recomputed (gradient checkpointing: set in the colocated "
    "script, veRL's default at 34cf9e7b9)",
    "colocated run: synchronous, every component on all 128 GPUs, rollout, old-policy forward and actor offloaded "
    "between phases; asynchronous run: generation and reward on 64 GPUs, the actor on the other 64, no log-prob "
    "forward (the engine returns them), simulated with max_staleness 1 (whole batches one step ahead) and 2 "
    "(continuous generation: the rollout admits the next step's prompts while it generates, as partial rollout "
    "does)",
)
VERL_ASYNC_ASSUMED = (
    "mean prompt 200 tokens (not published)",
    "response lengths lognormal, sigma 0.6, cut at 28,672, at each assumed mean (not published); both runs at "
    "the same one",
)
VERL_PUBLISHED_S = {"collocated": 356.30, "fully-async": 150.63}
VERL_PUBLISHED_PHASES_S = {
    "collocated": (("generation", 177.85), ("log-probs", 53.92), ("update", 113.81)),
    "fully-async": (("generation", 33.14), ("update", 113.16)),
}
VERL_ASSUMED_MEANS = (1000, 2000, 4000, 8000, 16000)
"""Mean response tokens tried (the recipe publishes none)."""
VERL_STALENESS = (1, 2)
VERL_PROMPT_TOKENS = 200


def verl_fully_async(mean_tokens: float) -> tuple[PublishedRun, PublishedRun]:
    """veRL's colocated and fully asynchronous Qwen2.5-Math-7B DAPO runs on 128 H20 at an assumed mean response."""
    model = attrs.evolve(R1_DISTILL_7B, name="Qwen2.5-Math-7B")
    common = {
        "system": "veRL (fully async recipe)",
        "source": f"{VERL_ASYNC_DOC}; {VERL_ASYNC_SCRIPTS}",
        "model": model,
        "device": "H20",
        "num_devices": 128,
        "devices_per_node": 8,
        "num_prompts": 512,
        "group_size": 16,
        "prompt_tokens": VERL_PROMPT_TOKENS,
        "response_mean_tokens": mean_tokens,
        "max_response_tokens": 28 * 1024,
        "rollout_mp": 4,
        "train_mp": 1,
        "optimizer_shards": 2,
        "kv_cache_fraction": kv_cache_fraction(model, "H20", 4, 0.8),
        "activation_recompute": True,
        "engine": "vllm-v1-eager",
        "reference_model": False,
        "assumptions": VERL_ASYNC_FACTS + VERL_ASYNC_ASSUMED,
    }
    synchronous = PublishedRun(
        key=f"verl-qwen7b-math-h20-128-mean{mean_tokens:g}",
        mode="collocated",
        reported_s=VERL_PUBLISHED_S["collocated"],
        offload=("rollout", "inference", "actor"),
        reported_phases_s=VERL_PUBLISHED_PHASES_S["collocated"],
        **common,
    )
    asynchronous = PublishedRun(
        key=f"verl-qwen7b-math-h20-64-64-async-mean{mean_tokens:g}",
        mode="fully-async",
        reported_s=VERL_PUBLISHED_S["fully-async"],
        rollout_devices=64,
        log_prob_forwards="engine",
        reported_phases_s=VERL_PUBLISHED_PHASES_S["fully-async"],
        **common,
    )
    return synchronous, asynchronous


def verl_rows() -> list[dict[str, Any]]:
    """Per assumed mean response: both runs' predictions (the asynchronous one at each staleness bound), their
    ratios and the phases that the recipe's table breaks down."""
    rows = []
    for mean in VERL_ASSUMED_MEANS:
        synchronous, asynchronous = verl_fully_async(mean)
        sync = predict(synchronous)
        row: dict[str, Any] = {
            "mean_response_tokens": mean,
            "synchronous_s": round(sync.predicted_s, 1),
            "synchronous_phases_s": _phases(sync, synchronous),
        }
        for k in VERL_STALENESS:
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


# ------------------------------------------------------------------ the section


def report(runs: Sequence[PublishedRun], now: Sequence[Prediction]) -> dict[str, Any]:
    """The section's figures (for the JSON) and its generated block."""
    pairs = pair_rows(runs, now)
    literal = literal_placement(runs)
    verl = verl_rows()
    published_ratio = round(VERL_PUBLISHED_S["fully-async"] / VERL_PUBLISHED_S["collocated"], 3)
    result = {
        "pairs": pairs,
        "literal_placement": literal,
        "verl_fully_async": {
            "published_s": VERL_PUBLISHED_S,
            "published_ratio": published_ratio,
            "source": VERL_ASYNC_DOC,
            "scripts": VERL_ASYNC_SCRIPTS,
            "facts": list(VERL_ASYNC_FACTS),
            "assumed": list(VERL_ASYNC_ASSUMED),
            "rows": verl,
        },
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
    verl = result["verl_fully_async"]
    lines += [
        "",
        f"veRL's fully asynchronous recipe, Qwen2.5-Math-7B DAPO on H20: published {verl['published_s']['fully-async']:.2f} s "
        f"per step on 64 + 64 GPUs against {verl['published_s']['collocated']:.2f} s colocated on 128, async/sync "
        f"**{verl['published_ratio']:.2f}** (same GPUs, same 512 x 16 samples per step). rlinf at each **assumed** "
        "mean response length, both runs at the same one (seconds per step):",
        "",
        "| assumed mean response (tokens) | sync | its generation / log-probs / update | async, max_staleness 1 "
        "| async/sync | its update | async, max_staleness 2 | async/sync |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in verl["rows"]:
        phases = " / ".join(
            f"{row['synchronous_phases_s'][p]:.1f}" for p in ("generation", "log-probs", "update")
        )
        lines.append(
            f"| {row['mean_response_tokens']:,} | {row['synchronous_s']:.1f} | {phases} | {row['staleness_1_s']:.1f} "
            f"| {row['staleness_1_ratio']:.2f} | {row['staleness_1_update_s']:.1f} | {row['staleness_2_s']:.1f} "
            f"| {row['staleness_2_ratio']:.2f} |"
        )
    lines += [
        "",
        "Published phases: colocated "
        + ", ".join(f"{p} {s:.2f}" for p, s in VERL_PUBLISHED_PHASES_S["collocated"])
        + " s; fully async "
        + ", ".join(f"{p} {s:.2f}" for p, s in VERL_PUBLISHED_PHASES_S["fully-async"])
        + " s.",
        "",
        f"Source: {verl['source']}; {verl['scripts']}. Read from them: "
        + "; ".join(verl["facts"])
        + ". Assumed: "
        + "; ".join(verl["assumed"])
        + ".",
    ]
    return "\n".join(lines)
