"""veRL's two published asynchronous recipes, as pairs of runs for benchmarks/analytic_validation_async.py.

Both recipes publish a colocated synchronous run and an asynchronous one of Qwen2.5-Math-7B DAPO on H20 GPUs, with
their phase times, but not their response lengths; each pair is predicted from its published facts at a range of
assumed mean lengths, both runs of a pair at the same one (:class:`VerlRecipe`). Every figure's source is in the
recipe's ``source`` and ``scripts``; what had to be assumed is in ``assumed``. Nothing here is fitted.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
from analytic_validation_runs import R1_DISTILL_7B, PublishedRun, kv_cache_fraction

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
