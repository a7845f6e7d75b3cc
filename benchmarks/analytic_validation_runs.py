"""The published RL post-training runs that benchmarks/analytic_validation.py predicts: every number, its source.

Each :class:`PublishedRun` is one configuration that an RL system published with its iteration time, with where
each number was read and what had to be assumed. ``previous`` names the fields whose values the previous version
of docs/analytic_validation.md used instead (so that its column is reproduced exactly), with the reason they
changed. Nothing here is a prediction; nothing is fitted.
"""

from __future__ import annotations

import attrs

from rlinf.cluster import DEVICE_PRESETS, DeviceSpec, Links
from rlinf.llm_workload import ModelSpec

NEMO_DOC = (
    "NeMo RL performance summary, section 'Nemo RL v0.5', table '{table}' "
    "(docs/about/performance-summary.md of github.com/NVIDIA-NeMo/RL at e7c0123d71ee, 2026-04-14; "
    "rendered at https://docs.nvidia.com/nemo/rl/0.5.0/about/performance-summary.html); recipe "
    "examples/configs/recipes/llm/performance/{recipe}.yaml at {recipe_commit}, on "
    "examples/configs/grpo_math_1B.yaml (Megatron distributed optimizer, sequence packing, vLLM with CUDA graphs)"
)
V05_RECIPES = "fab623423 (2025-12-19, the v0.5 perf recipes; unchanged to e7c0123d71ee)"
V05_RECIPES_GB200_QWEN = "fab623423 (2025-12-19, the v0.5 perf recipe, which the table's layouts match; 4e03c8ca9 changed it in 2026-04)"
VERL_LOG = (
    "veRL docs 'Algorithm Baselines' (docs/algo/baseline.md), GSM8k table, row 'AMD MI300 | "
    "deepseek-ai/deepseek-llm-7b-chat | {algo}', linked log "
    "https://github.com/yushengsu-thu/verl_training_log/blob/main/gsm8k/{log} (commit deb1507ca074): mean of "
    "timing_s/step over its 1,008 steps without validation"
)

ENGINES: dict[str, str] = {
    "vllm-0.11-cudagraphs": (
        "vLLM 0.11.2 (the pin of NeMo RL's pyproject.toml at fab623423) with CUDA graphs (enforce_eager false); "
        "the synchronous LLM engine in the collocated recipes, the async engine in the one-step-off ones"
    ),
    "vllm-0.6.3-eager-rocm": (
        "vLLM 0.6.3 on ROCm (veRL's docker/Dockerfile.rocm at 44a65f956d72) with enforce_eager true: no graphs, "
        "every decode step launches its kernels one by one"
    ),
}
"""The inference engine of each run, which sets the per-decode-step overhead the calibrated column fits."""

# Model shapes: Megatron-Bridge model providers (github.com/NVIDIA-NeMo/Megatron-Bridge,
# src/megatron/bridge/models/{llama/llama_provider.py, qwen/qwen_provider.py}) and the Hugging Face config of
# deepseek-llm-7b; parameter counts are computed from the shapes (embeddings untied). Qwen3-32B has 64 heads of
# 128 dims (8 KV heads) on a 5120 hidden size.
LLAMA31_8B = ModelSpec(
    name="Llama-3.1-8B",
    num_params=8.03e9,
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
)
QWEN3_32B = ModelSpec(
    name="Qwen3-32B",
    num_params=32.76e9,
    num_layers=64,
    hidden_size=5120,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=128,
)
DEEPSEEK_7B = ModelSpec(
    name="deepseek-llm-7b",
    num_params=6.91e9,
    num_layers=30,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=32,
)

# Devices that rlinf.cluster has no preset for. GB200 (per GPU of a GB200 NVL72, 1,200 W): 2.5 PFLOP/s dense BF16
# and 8 TB/s HBM3e (glennklockwood.com/garden/processors/B200), 13.4 TB of HBM3e per 72 GPUs = 186 GB
# (aiwiki.ai/wiki/nvidia_gb200_nvl72), NVLink 5 at 900 GB/s per direction across the rack
# (verda.com/blog/gb300-nvl72-architecture); host link assumed 450 GB/s (NVLink-C2C of one Grace shared by two
# GPUs). MI300X: 192 GB HBM3 at 5.3 TB/s, ~1.3 PFLOP/s dense FP16/BF16
# (jaredwatkins.com/research/ai-accelerators/amd-instinct/mi300-series; aiwiki.ai/wiki/amd_instinct_mi300x),
# Infinity Fabric 448 GB/s aggregate per GPU (emergentmind.com/topics/amd-mi300x-gpu), host link as the H100
# preset's PCIe Gen5 x16.
DEVICES: dict[str, tuple[DeviceSpec, Links]] = {
    "H100": DEVICE_PRESETS["H100"],
    "GB200": (
        DeviceSpec(
            name="GB200", memory_bytes=186 * 10**9, peak_flops=2.5e15, memory_bandwidth_bytes_per_s=8e12
        ),
        Links(intra_node_bytes_per_s=900e9, inter_node_bytes_per_s=900e9, host_device_bytes_per_s=450e9),
    ),
    "MI300X": (
        DeviceSpec(
            name="MI300X", memory_bytes=192 * 10**9, peak_flops=1.3e15, memory_bandwidth_bytes_per_s=5.3e12
        ),
        Links(intra_node_bytes_per_s=448e9, inter_node_bytes_per_s=50e9, host_device_bytes_per_s=55e9),
    ),
}
MESH_LINK_BYTES_PER_S: dict[str, float] = {"MI300X": 448e9 / 7}
"""Devices whose node is a point-to-point mesh rather than a switch: the bandwidth of one peer link. An 8-GPU
MI300X node connects every GPU to its 7 peers directly, so the 448 GB/s aggregate is 64 GB/s per peer, and a
tensor-parallel all-reduce among t GPUs has t - 1 of those links (NVLink through NVSwitch gives any peer the
full per-GPU rate)."""

PHASES: dict[str, tuple[str, ...]] = {
    "generation": ("rollout",),
    "log-probs": ("inference",),
    "update": ("actor", "critic"),
    "other": ("onload", "offload", "reward", "sync_weights", "transfer"),
}
"""A reported phase and the simulated components (and movement kinds) whose seconds it compares with."""

STATEFUL = ("rollout", "inference", "actor", "critic")


@attrs.frozen(kw_only=True)
class PublishedRun:
    """One published configuration and its reported iteration time."""

    key: str
    system: str
    source: str
    """Where every number of the row was read (document, section or table, commit)."""
    model: ModelSpec
    device: str
    """A key of :data:`DEVICES`."""
    num_devices: int
    devices_per_node: int
    num_prompts: int
    group_size: int
    prompt_tokens: int
    response_mean_tokens: float
    max_response_tokens: int
    """The generation limit: max_response_length (veRL), or max_model_len minus the prompt (NeMo RL's vLLM)."""
    mode: str
    """``collocated`` (synchronous, every component on every device) or ``one-step-off`` (generation on the
    first ``rollout_devices`` devices, one step ahead of training on the others)."""
    reported_s: float
    """Reported seconds per iteration (training step)."""
    rollout_mp: int
    train_mp: int
    """Model-parallel size of training and of the log-prob forwards (a replica's devices): tensor x pipeline."""
    train_pp: int = 1
    """Pipeline stages of the training layout (its tensor-parallel size is ``train_mp / train_pp``)."""
    optimizer_shards: int = 1
    """Data-parallel ranks that share the optimizer state (Megatron's distributed optimizer, FSDP)."""
    kv_cache_fraction: float
    activation_recompute: bool
    """The run's training recomputes activations (its config turns activation checkpointing on)."""
    engine: str
    """A key of :data:`ENGINES`: the rollout's inference engine."""
    algorithm: str = "grpo"
    rollout_devices: int = 0
    max_concurrent_sequences: int = 1024
    """The engine's max_num_seqs: 1,024 in both systems (veRL sets it; vLLM's default on GPUs of 70 GiB or more
    other than A100, ``EngineArgs.get_batch_defaults`` in vllm/engine/arg_utils.py)."""
    offload: tuple[str, ...] = STATEFUL
    """What the system moves off the GPUs when another component needs them (collocated runs only)."""
    reported_phases_s: tuple[tuple[str, float], ...] = ()
    """Per-phase seconds where the source breaks the step down: keys of :data:`PHASES`."""
    assumptions: tuple[str, ...] = ()
    previous: tuple[tuple[str, object], ...] = ()
    """Fields and the values the previous version of the page used for them (see :func:`as_previously`)."""

    def __attrs_post_init__(self) -> None:
        if self.mode not in ("collocated", "one-step-off"):
            raise ValueError(f"{self.key}: mode {self.mode!r} is not collocated or one-step-off")
        if self.mode == "one-step-off" and not 0 < self.rollout_devices < self.num_devices:
            raise ValueError(
                f"{self.key}: rollout_devices {self.rollout_devices} must split {self.num_devices}"
            )
        unknown = {phase for phase, _ in self.reported_phases_s} - set(PHASES)
        if unknown:
            raise ValueError(f"{self.key}: unknown phases {sorted(unknown)}, use {sorted(PHASES)}")
        if self.device not in DEVICES:
            raise ValueError(f"{self.key}: unknown device {self.device!r}, use one of {sorted(DEVICES)}")
        if self.engine not in ENGINES:
            raise ValueError(f"{self.key}: unknown engine {self.engine!r}, use one of {sorted(ENGINES)}")
        if set(self.offload) - set(STATEFUL):
            raise ValueError(
                f"{self.key}: offload {list(self.offload)} names no component of {list(STATEFUL)}"
            )
        if self.train_mp % self.train_pp:
            raise ValueError(
                f"{self.key}: train_mp {self.train_mp} is not a multiple of train_pp {self.train_pp}"
            )

    def as_previously(self) -> PublishedRun:
        """The row with the values the previous version of the page used."""
        return attrs.evolve(self, **dict(self.previous))


def kv_cache_fraction(model: ModelSpec, device: str, rollout_mp: int, gpu_memory_utilization: float) -> float:
    """The KV pool's share of a rollout device: the engine's memory share less the bf16 weights' share."""
    weights = 2.0 * model.num_params / (rollout_mp * DEVICES[device][0].memory_bytes)
    return round(gpu_memory_utilization - weights, 3)


def nemo_prompt_tokens(
    tokens_per_gpu_s: float, num_gpus: int, step_s: float, samples: int, response: float
) -> int:
    """The mean prompt of a NeMo RL row. Its Tokens/sec/GPU counts prompt + response tokens over the whole step
    (``print_performance_metrics`` in nemo_rl/algorithms/utils.py), so the prompt is what the table's tokens leave
    beside its mean response."""
    prompt = tokens_per_gpu_s * num_gpus * step_s / samples - response
    if prompt <= 0:
        raise ValueError(
            f"the reported tokens leave no prompt ({prompt:.1f} tokens): check the row's figures"
        )
    return round(prompt)


_NEMO_PROMPT = (
    "mean prompt tokens derived from the table's Tokens/sec/GPU x GPUs x step time / 2,048 samples minus the mean "
    "response (the table's G-Average Seq len, which that identity shows to be the generated length)"
)
_NEMO_COMMON = (
    "response lengths lognormal (sigma 0.6) with the reported mean, cut at 4,096 minus the prompt (max_model_len)",
    "KV pool = gpu_memory_utilization x memory - weights",
)
_COLLOCATED = (
    "each step NeMo RL offloads the Megatron state (weights, gradients, optimizer), swaps the reference weights in "
    "from host memory, and puts vLLM to sleep (weights to host, KV cache freed)"
)
_ONE_OFF = (
    "one-step-off-policy: prediction = busiest device's busy time in one simulated iteration of the disaggregated "
    "plan (generation overlaps the previous step's training; rlinf simulates one synchronous iteration)"
)
# What the previous page used where this one reads the recipes more closely: a model-parallel size raised so that
# unsharded Adam state fits (the model had no optimizer sharding), and vLLM's max_num_seqs taken as 256.
_PREVIOUS_NEMO = (("optimizer_shards", 1), ("max_concurrent_sequences", 256))


def _nemo(key: str, *, table: str, recipe: str, model: ModelSpec, device: str, gpus: int, per_node: int,
          response: float, tokens_per_gpu_s: float, step_s: float, mode: str, rollout_mp: int, train_mp: int,
          train_pp: int, gpu_util: float, rollout_devices: int = 0, recipe_commit: str = V05_RECIPES,
          previous_train_mp: int | None = None) -> PublishedRun:  # fmt: skip
    # The Llama recipes set megatron_cfg.activation_checkpointing: true; the Qwen3-32B ones keep the default false.
    prompt = nemo_prompt_tokens(tokens_per_gpu_s, gpus, step_s, 2048, response)
    train_devices = gpus - rollout_devices if mode == "one-step-off" else gpus
    previous = _PREVIOUS_NEMO + ((("train_mp", previous_train_mp),) if previous_train_mp else ())
    return PublishedRun(
        key=key,
        system="NeMo RL 0.5",
        source=NEMO_DOC.format(table=table, recipe=recipe, recipe_commit=recipe_commit),
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
        activation_recompute=model is LLAMA31_8B,
        engine="vllm-0.11-cudagraphs",
        assumptions=(_NEMO_PROMPT, *_NEMO_COMMON, _ONE_OFF if mode == "one-step-off" else _COLLOCATED),
        previous=previous,
    )


_VERL_ASSUMED = (
    "'AMD MI300' of the veRL table taken as MI300X",
    "response lengths lognormal (sigma 0.6) with the log's mean response_length/mean, cut at the max response",
    "veRL's rollout defaults when the log was written (verl/trainer/config/ppo_trainer.yaml at 44a65f956d72): "
    "max_num_seqs 1,024, enforce_eager true, free_cache_engine true; KV pool = gpu_memory_utilization x memory - "
    "weights",
    "FSDP shards the optimizer state over the 8 GPUs; actor and critic stay on the GPUs (param_offload and "
    "optimizer_offload false), the reference model is offloaded (ref.fsdp_config.param_offload true), and the "
    "rollout frees its weights and KV cache after generating",
)


def _verl(key: str, *, algo: str, log: str, group_size: int, response: float, max_response: int, step_s: float,
          rollout_mp: int, gpu_util: float, phases: tuple[tuple[str, float], ...]) -> PublishedRun:  # fmt: skip
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
        max_response_tokens=max_response,
        mode="collocated",
        reported_s=step_s,
        rollout_mp=rollout_mp,
        train_mp=1,
        optimizer_shards=8,
        kv_cache_fraction=kv_cache_fraction(DEEPSEEK_7B, "MI300X", rollout_mp, gpu_util),
        activation_recompute=True,
        engine="vllm-0.6.3-eager-rocm",
        algorithm="ppo" if algo == "PPO" else "grpo",
        offload=("rollout", "inference"),
        reported_phases_s=phases,
        assumptions=_VERL_ASSUMED,
        previous=(("optimizer_shards", 1), ("offload", STATEFUL)),
    )


H100_TABLE, GB200_TABLE = "H100 BF16 Benchmarks", "GB200 BF16 Benchmarks"
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
          response=133.4, max_response=1024, step_s=74.07, rollout_mp=2, gpu_util=0.6,
          phases=(("generation", 38.46), ("log-probs", 5.56 + 5.94), ("update", 23.21), ("other", 0.89))),
    _verl("verl-deepseek7b-ppo-mi300x-8", algo="PPO", log="ppo_run_deepseek7b_llm.log", group_size=1,
          response=136.1, max_response=512, step_s=37.70, rollout_mp=4, gpu_util=0.4,
          phases=(("generation", 22.32), ("log-probs", 1.21 + 1.33 + 1.15), ("update", 5.24 + 6.26),
                  ("other", 0.18))),
)  # fmt: skip
