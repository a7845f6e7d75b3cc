"""The published RL post-training runs that benchmarks/analytic_validation.py predicts: every number, its source.

Rows 1-10 are the previous page's (NeMo RL 0.5's dense rows, veRL's two MI300X logs); rows 11-14 are NeMo RL 0.4's
H100 rows (the same four configurations a release earlier, measured again); rows 15-17 are the long
chain-of-thought runs of RLinf's comparison with veRL (DeepSeek-R1-Distill-Qwen-1.5B and -7B, generation limit
27,648 tokens, mean responses of 10-14k tokens). Each row says where every number was read and what had to be
assumed. Nothing here is a prediction; nothing is fitted.
"""

from __future__ import annotations

from analytic_validation_runs import (
    DEEPSEEK_7B,
    LLAMA31_8B,
    QWEN3_32B,
    R1_DISTILL_1_5B,
    R1_DISTILL_7B,
    STATEFUL,
    PublishedRun,
    kv_cache_fraction,
    nemo_prompt_tokens,
)

from rlinf.analytic.llm_workload import ModelSpec

NEMO_DOC = (
    "NeMo RL performance summary, section 'Nemo RL v{release}', table '{table}' "
    "(docs/about/performance-summary.md of github.com/NVIDIA-NeMo/RL at {doc_commit}; "
    "rendered at https://docs.nvidia.com/nemo/rl/{release}.0/about/performance-summary.html); recipe "
    "examples/configs/recipes/llm/performance/{recipe}.yaml at {recipe_commit}, on "
    "examples/configs/grpo_math_1B.yaml (Megatron distributed optimizer, sequence packing, vLLM with CUDA graphs)"
)
V05_DOC = "e7c0123d71ee, 2026-04-14"
V04_DOC = "cff17f83b, 2025-12-01, where the section has one table, of H100 BF16 runs"
V04_RECIPES = "cff17f83b (2025-12-01, the v0.4 perf recipes: the v0.5 layouts but for the Llama one-step-off run's 2 pipeline stages)"
V05_RECIPES = "fab623423 (2025-12-19, the v0.5 perf recipes; unchanged to e7c0123d71ee)"
V05_RECIPES_GB200_QWEN = "fab623423 (2025-12-19, the v0.5 perf recipe, which the table's layouts match; 4e03c8ca9 changed it in 2026-04)"
VERL_LOG = (
    "veRL docs 'Algorithm Baselines' (docs/algo/baseline.md), GSM8k table, row 'AMD MI300 | "
    "deepseek-ai/deepseek-llm-7b-chat | {algo}', linked log "
    "https://github.com/yushengsu-thu/verl_training_log/blob/main/gsm8k/{log} (commit deb1507ca074): mean of "
    "timing_s/step over its 1,008 steps without validation (the same steps' means of response_length/mean and "
    "response_length/max give the row's mean and longest response)"
)

_NEMO_PROMPT = (
    "mean prompt tokens derived from the table's Tokens/sec/GPU x GPUs x step time / 2,048 samples minus the mean "
    "response (the table's G-Average Seq len, which that identity shows to be the generated length)"
)
_NEMO_COMMON = (
    "response lengths lognormal with the reported mean (sigma 0.6: the table gives no spread), cut at 4,096 minus "
    "the prompt (max_model_len)",
    "KV pool = gpu_memory_utilization x memory - weights",
)
_COLLOCATED = (
    "each step NeMo RL offloads the Megatron state (weights, gradients, optimizer), swaps the reference weights in "
    "from host memory, and puts vLLM to sleep (weights to host, KV cache freed)"
)
_ONE_OFF = (
    "one-step-off-policy: the trainer takes the batch generated a step earlier from the replay buffer and computes "
    "its log-prob forwards, then the update, on the training GPUs while the generation GPUs generate the next batch "
    "(async_grpo_train in nemo_rl/algorithms/grpo.py at cff17f83b and fab623423: replay_buffer.sample, then "
    "policy.get_logprobs and get_reference_policy_logprobs, then policy.train); the row's workflow folds the log-prob "
    "forwards into the actor (their seconds added to its update, their weights to its memory) and its disaggregated "
    "plan is simulated with max_staleness 1 (the forwards in rlinf's inference component behind the buffer, "
    "buffer_before [inference], simulate the same step: 'Asynchronous against synchronous')"
)
# What the previous page used where this one reads the recipes more closely: a model-parallel size raised so that
# unsharded Adam state fits (the model had no optimizer sharding), and vLLM's max_num_seqs taken as 256.
_PREVIOUS_NEMO = (("optimizer_shards", 1), ("max_concurrent_sequences", 256))


def _nemo(key: str, *, table: str, recipe: str, model: ModelSpec, device: str, gpus: int, per_node: int,
          response: float, tokens_per_gpu_s: float, step_s: float, mode: str, rollout_mp: int, train_mp: int,
          train_pp: int, gpu_util: float, rollout_devices: int = 0, recipe_commit: str = V05_RECIPES,
          previous_train_mp: int | None = None, release: str = "0.5") -> PublishedRun:  # fmt: skip
    # The Llama recipes set megatron_cfg.activation_checkpointing: true; the Qwen3-32B ones keep the default false.
    prompt = nemo_prompt_tokens(tokens_per_gpu_s, gpus, step_s, 2048, response)
    train_devices = gpus - rollout_devices if mode == "one-step-off" else gpus
    previous = _PREVIOUS_NEMO + ((("train_mp", previous_train_mp),) if previous_train_mp else ())
    return PublishedRun(
        key=key,
        system=f"NeMo RL {release}",
        source=NEMO_DOC.format(
            release=release,
            doc_commit=V05_DOC if release == "0.5" else V04_DOC,
            table=table,
            recipe=recipe,
            recipe_commit=recipe_commit,
        ),
        model=model,
        device=device,
        num_devices=gpus,
        devices_per_node=per_node,
        num_prompts=64,
        group_size=32,
        prompt_tokens=prompt,
        response_mean_tokens=response,
        max_response_tokens=4096 - prompt,
        mode=mode,
        reported_s=step_s,
        rollout_mp=rollout_mp,
        train_mp=train_mp,
        train_pp=train_pp,
        optimizer_shards=train_devices // train_mp,
        kv_cache_fraction=kv_cache_fraction(model, device, rollout_mp, gpu_util),
        rollout_devices=rollout_devices,
        log_prob_forwards="trainer" if mode == "one-step-off" else "inference",
        activation_recompute=model is LLAMA31_8B,
        engine="vllm-0.11-cudagraphs",
        framework="megatron",
        optimizer_steps=2048 // 512,
        train_micro_batch_tokens=4096,
        weight_sync="nemo-rl",
        assumptions=(_NEMO_PROMPT, *_NEMO_COMMON, _ONE_OFF if mode == "one-step-off" else _COLLOCATED),
        previous=previous,
    )


_VERL_ASSUMED = (
    "'AMD MI300' of the veRL table taken as MI300X",
    "response lengths lognormal with the log's mean response_length/mean and a spread that puts the expected "
    "longest of a step's responses at the log's mean response_length/max, cut at the max response",
    "veRL's rollout defaults when the log was written (verl/trainer/config/ppo_trainer.yaml at 44a65f956d72): "
    "max_num_seqs 1,024, enforce_eager true, free_cache_engine true; KV pool = gpu_memory_utilization x memory - "
    "weights",
    "FSDP shards the optimizer state over the 8 GPUs; actor and critic stay on the GPUs (param_offload and "
    "optimizer_offload false), the reference model is offloaded (ref.fsdp_config.param_offload true), and the "
    "rollout frees its weights and KV cache after generating",
)


def _verl(key: str, *, algo: str, log: str, group_size: int, response: float, longest: float, max_response: int,
          step_s: float, rollout_mp: int, gpu_util: float,
          phases: tuple[tuple[str, float], ...]) -> PublishedRun:  # fmt: skip
    # Both runs: 1 node of 8 GPUs, train_batch_size 1024, max_prompt_length 512, FSDP actor with
    # enable_gradient_checkpointing=True, colocated hybrid engine; the logs' mean prompt_length/mean is 82.6.
    return PublishedRun(
        key=key,
        system="veRL (ROCm)",
        source=VERL_LOG.format(algo=algo, log=log),
        model=DEEPSEEK_7B,
        device="MI300X",
        num_devices=8,
        devices_per_node=8,
        num_prompts=1024,
        group_size=group_size,
        prompt_tokens=83,
        response_mean_tokens=response,
        response_longest=longest,
        max_response_tokens=max_response,
        mode="collocated",
        reported_s=step_s,
        rollout_mp=rollout_mp,
        train_mp=1,
        optimizer_shards=8,
        kv_cache_fraction=kv_cache_fraction(DEEPSEEK_7B, "MI300X", rollout_mp, gpu_util),
        activation_recompute=True,
        engine="vllm-0.6.3-eager-rocm",
        framework="fsdp",
        weight_sync="verl",
        algorithm="ppo" if algo == "PPO" else "grpo",
        offload=("rollout", "inference"),
        reported_phases_s=phases,
        assumptions=_VERL_ASSUMED,
        previous=(("optimizer_shards", 1), ("offload", STATEFUL)),
    )


RLINF_BLOG = (
    "RLinf docs, blog 'Comparison with VeRL' ({where}); github.com/RLinf/RLinf, "
    "docs/source/rst_source/blog/compare_with_verl.rst at 298084c8b (2025-08-19, first published) and "
    "docs/source-en/rst_source/resources/blog/compare_with_verl.rst at a3816b596 (2026-08-22); rendered at "
    "https://rlinf.readthedocs.io/en/latest/rst_source/resources/blog/compare_with_verl.html"
)
_BLOG_PROMPT = (
    "mean prompt 150 tokens: the veRL 1.5B table's gen throughput (3,533.27 tokens/s per GPU x 8 GPUs x 260.922 s) "
    "over its 512 responses is 14,405 tokens each, 150 more than the mean response (the same Boba dataset for "
    "every row)"
)
_BLOG_LENGTHS = (
    "response lengths lognormal with the reported mean (sigma 0.6: the blog gives no spread), cut at 27,648 "
    "(context 28,672 minus the 1,024-token prompt limit)"
)
_BLOG_15B = (
    "512 responses per step: 128 per data-parallel rank x 4 ranks (the table's 'Batch Size Per DP' and 'Data "
    "Parallelism'), taken as 32 prompts x 16 responses (the blog's rollout.n)",
    "rollout tensor parallelism 2 (the table's), so 4 rollout replicas of 128 responses each",
    "activation recomputation on (the table's 'recompute 20 blocks': 20 of the 28 layers, priced as all 28)",
)


def _long_cot(key: str, *, system: str, where: str, model: ModelSpec, gpus: int, prompts: int, response: float,
              step_s: float, train_mp: int, shards: int, gpu_util: float, max_running: int, reference: bool,
              phases: tuple[tuple[str, float], ...], assumptions: tuple[str, ...],
              framework: str, weight_sync: str = "verl") -> PublishedRun:  # fmt: skip
    return PublishedRun(
        key=key,
        system=system,
        source=RLINF_BLOG.format(where=where),
        model=model,
        device="H100",
        num_devices=gpus,
        devices_per_node=8,
        num_prompts=prompts,
        group_size=16,
        prompt_tokens=150,
        response_mean_tokens=response,
        max_response_tokens=27648,
        mode="collocated",
        reported_s=step_s,
        rollout_mp=2,
        train_mp=train_mp,
        optimizer_shards=shards,
        kv_cache_fraction=kv_cache_fraction(model, "H100", 2, gpu_util),
        activation_recompute=True,
        engine="sglang-0.4-cudagraphs",
        framework=framework,
        weight_sync=weight_sync,
        reference_model=reference,
        max_concurrent_sequences=max_running,
        offload=("rollout", "inference", "actor"),
        reported_phases_s=phases,
        assumptions=(_BLOG_PROMPT, _BLOG_LENGTHS, *assumptions),
    )


_VERL_BLOG = (
    "the rollout engine and its memory share are those of the blog's veRL example (SGLang, "
    "gpu_memory_utilization 0.4); veRL leaves SGLang's max_running_requests unset, taken as 1,024 (it does not "
    "bind); KV pool = 0.4 x memory - weights",
    "FSDP with the blog example's offloading: actor weights and optimizer state to host memory between phases "
    "(param_offload, optimizer_offload), the reference model likewise, the rollout's KV cache freed; optimizer "
    "state sharded over all GPUs",
    "a reference model's log-probs are computed (the example's use_kl_loss=True)",
)


H100_TABLE, GB200_TABLE = "H100 BF16 Benchmarks", "GB200 BF16 Benchmarks"
V04_TABLE = "H100, BF16 (DGX-H100, Megatron-core)"
RUNS: tuple[PublishedRun, ...] = (
    _nemo("nemo-llama8b-h100-16", table=H100_TABLE, recipe="grpo-llama3.1-8b-instruct-2n8g", model=LLAMA31_8B,
          device="H100", gpus=16, per_node=8, response=1019, tokens_per_gpu_s=1581, step_s=92.8,
          mode="collocated", rollout_mp=1, train_mp=2, train_pp=2, gpu_util=0.6),
    _nemo("nemo-llama8b-h100-16-off1", table=H100_TABLE, recipe="grpo-llama3.1-8b-instruct-2n8g-async-1off",
          model=LLAMA31_8B, device="H100", gpus=16, per_node=8, response=1123, tokens_per_gpu_s=2478, step_s=64.8,
          mode="one-step-off", rollout_mp=1, train_mp=1, train_pp=1, gpu_util=0.8, rollout_devices=8,
          previous_train_mp=2),
    _nemo("nemo-qwen32b-h100-32", table=H100_TABLE, recipe="grpo-qwen3-32b-4n8g", model=QWEN3_32B,
          device="H100", gpus=32, per_node=8, response=3251, tokens_per_gpu_s=571, step_s=376,
          mode="collocated", rollout_mp=4, train_mp=16, train_pp=4, gpu_util=0.6),
    _nemo("nemo-qwen32b-h100-64-off1", table=H100_TABLE, recipe="grpo-qwen3-32b-8n8g-async-1off",
          model=QWEN3_32B, device="H100", gpus=64, per_node=8, response=3252, tokens_per_gpu_s=538, step_s=200,
          mode="one-step-off", rollout_mp=4, train_mp=16, train_pp=4, gpu_util=0.8, rollout_devices=32),
    _nemo("nemo-llama8b-gb200-8", table=GB200_TABLE, recipe="grpo-llama3.1-8b-instruct-2n4g", model=LLAMA31_8B,
          device="GB200", gpus=8, per_node=4, response=1066, tokens_per_gpu_s=3359, step_s=91.0,
          mode="collocated", rollout_mp=1, train_mp=1, train_pp=1, gpu_util=0.6),
    _nemo("nemo-llama8b-gb200-8-off1", table=GB200_TABLE, recipe="grpo-llama3.1-8b-instruct-2n4g-async-1off",
          model=LLAMA31_8B, device="GB200", gpus=8, per_node=4, response=1107, tokens_per_gpu_s=4463, step_s=71.1,
          mode="one-step-off", rollout_mp=1, train_mp=1, train_pp=1, gpu_util=0.8, rollout_devices=4),
    _nemo("nemo-qwen32b-gb200-16", table=GB200_TABLE, recipe="grpo-qwen3-32b-4n4g", model=QWEN3_32B,
          device="GB200", gpus=16, per_node=4, response=3253, tokens_per_gpu_s=1127, step_s=381,
          mode="collocated", rollout_mp=1, train_mp=2, train_pp=1, gpu_util=0.6, previous_train_mp=4,
          recipe_commit=V05_RECIPES_GB200_QWEN),
    _nemo("nemo-qwen32b-gb200-32-off1", table=GB200_TABLE, recipe="grpo-qwen3-32b-8n4g-async-1off",
          model=QWEN3_32B, device="GB200", gpus=32, per_node=4, response=3258, tokens_per_gpu_s=1025, step_s=210,
          mode="one-step-off", rollout_mp=1, train_mp=2, train_pp=1, gpu_util=0.8, rollout_devices=16,
          previous_train_mp=4, recipe_commit=V05_RECIPES_GB200_QWEN),
    _verl("verl-deepseek7b-grpo-mi300x-8", algo="GRPO", log="grpo_run_deepseek7b_llm.log", group_size=5,
          response=133.4, longest=650.1, max_response=1024, step_s=74.07, rollout_mp=2, gpu_util=0.6,
          phases=(("generation", 38.46), ("log-probs", 5.56 + 5.94), ("update", 23.21), ("other", 0.89))),
    _verl("verl-deepseek7b-ppo-mi300x-8", algo="PPO", log="ppo_run_deepseek7b_llm.log", group_size=1,
          response=136.1, longest=452.5, max_response=512, step_s=37.70, rollout_mp=4, gpu_util=0.4,
          phases=(("generation", 22.32), ("log-probs", 1.21 + 1.33 + 1.15), ("update", 5.24 + 6.26),
                  ("other", 0.18))),
    _nemo("nemo04-llama8b-h100-16", table=V04_TABLE, recipe="grpo-llama3.1-8b-instruct-2n8g", model=LLAMA31_8B,
          device="H100", gpus=16, per_node=8, response=1060, tokens_per_gpu_s=1562, step_s=97.7,
          mode="collocated", rollout_mp=1, train_mp=2, train_pp=2, gpu_util=0.6, release="0.4",
          recipe_commit=V04_RECIPES),
    _nemo("nemo04-llama8b-h100-16-off1", table=V04_TABLE, recipe="grpo-llama3.1-8b-instruct-2n8g-async-1off",
          model=LLAMA31_8B, device="H100", gpus=16, per_node=8, response=1129, tokens_per_gpu_s=2161, step_s=74.6,
          mode="one-step-off", rollout_mp=1, train_mp=2, train_pp=2, gpu_util=0.8, rollout_devices=8,
          release="0.4", recipe_commit=V04_RECIPES),
    _nemo("nemo04-qwen32b-h100-32", table=V04_TABLE, recipe="grpo-qwen3-32b-4n8g", model=QWEN3_32B,
          device="H100", gpus=32, per_node=8, response=3206, tokens_per_gpu_s=540, step_s=393,
          mode="collocated", rollout_mp=4, train_mp=16, train_pp=4, gpu_util=0.6, release="0.4",
          recipe_commit=V04_RECIPES),
    _nemo("nemo04-qwen32b-h100-64-off1", table=V04_TABLE, recipe="grpo-qwen3-32b-8n8g-async-1off",
          model=QWEN3_32B, device="H100", gpus=64, per_node=8, response=3207, tokens_per_gpu_s=494, step_s=215,
          mode="one-step-off", rollout_mp=4, train_mp=16, train_pp=4, gpu_util=0.8, rollout_devices=32,
          release="0.4", recipe_commit=V04_RECIPES),
    _long_cot("verl-r1qwen7b-h100-64", system="veRL (f252da3)", model=R1_DISTILL_7B, gpus=64, prompts=128,
              where="veRL's DeepSeek-R1-Distill-Qwen-7B table, 'Testing conducted on July 22, 2025', 8 nodes x 8 "
              "GPUs, veRL f252da3: shown at 298084c8b, kept at a3816b596 as a reStructuredText comment that the "
              "rendered page omits; and the page's bash example 'ds_7b_fsdp_sglang' for its configuration",
              response=10425.8, step_s=447.36, train_mp=1, shards=64, gpu_util=0.4, max_running=1024,
              reference=True, framework="fsdp", weight_sync="nemo-rl",
              phases=(("generation", 325.09), ("log-probs", 21.58 + 20.74), ("update", 73.01),
                      ("other", 447.36 - 325.09 - 21.58 - 20.74 - 73.01)),
              assumptions=("the GPUs, which the table does not name, taken as H100 (the page's other runs')",
                           "the blog's bash example is this run's configuration (8 nodes x 8 GPUs, 128 prompts x "
                           "16, rollout tensor parallelism 2, FSDP with Ulysses sequence parallelism 4 and "
                           "gradient checkpointing)",
                           "the reported step is one step's timing_s, not an average", *_VERL_BLOG,
                           "its collocated weight sync priced by NeMo RL's published resharding time, not by veRL's "
                           "(weight sync verl), which was read from this run's own log")),
    _long_cot("verl-r1qwen1.5b-h100-8", system="veRL 0.5.0", model=R1_DISTILL_1_5B, gpus=8, prompts=32,
              where="the results table as it stands at a3816b596, VeRL column, veRL 8fdc4d3 (v0.5.0), 1 node x 8 "
              "H100; 298084c8b had its training time at 61.125 s and its throughputs over 4 GPUs",
              response=14254.8, step_s=363.55, train_mp=1, shards=8, gpu_util=0.4, max_running=1024,
              reference=True, framework="fsdp", phases=(("generation", 260.92), ("update", 66.53)),
              assumptions=(*_BLOG_15B, *_VERL_BLOG[:2],
                           "a reference model's log-probs are computed: the step leaves 18.6 s beyond its reported "
                           "phases, about one more log-prob pass (17.5 s)")),
    _long_cot("rlinf-r1qwen1.5b-h100-8", system="RLinf (298084c8b)", model=R1_DISTILL_1_5B, gpus=8, prompts=32,
              where="the results table as it stands at a3816b596, RLinf column, 1 node x 8 H100",
              response=13975.0, step_s=346.33, train_mp=2, shards=4, gpu_util=0.55, max_running=64,
              reference=False, framework="megatron",
              phases=(("generation", 266.08), ("log-probs", 17.78), ("update", 61.12),
                      ("other", 346.33 - 266.08 - 17.78 - 61.12)),
              assumptions=(*_BLOG_15B,
                           "RLinf's math config at 298084c8b (examples/math/config/qwen2.5-1.5b-grpo-megatron.yaml): "
                           "SGLang with gpu_memory_utilization 0.55 and max_running_requests 64, Megatron with "
                           "tensor parallelism 2 and the distributed optimizer, weights, gradients and optimizer "
                           "state offloaded between phases, kl_beta 0 (no reference model: the step leaves 1.4 s "
                           "beyond its phases), old log-probs recomputed by the actor (one forward)",)),
)  # fmt: skip
