"""What a published RL post-training run is to benchmarks/analytic_validation.py: its facts, its engine, its devices.

:class:`PublishedRun` holds one configuration that an RL system published with its iteration time, where each
number was read and what had to be assumed; the rows themselves are in benchmarks/analytic_validation_rows.py.
``previous`` names the fields whose values an earlier version of docs/analytic_validation.md used instead (so
that its columns are reproduced exactly). Nothing here is a prediction; nothing is fitted.
"""

from __future__ import annotations

import attrs

from rlinf.analytic.engine_costs import ENGINE_STEP_COSTS
from rlinf.analytic.llm_workload import MODEL_PRESETS, ModelSpec
from rlinf.analytic.training_costs import TRAINING_EFFICIENCIES
from rlinf.analytic.weight_sync import RESHARD_MEASUREMENTS
from rlinf.core.cluster import DEVICE_PRESETS, GIB, DeviceSpec, Links


@attrs.frozen(kw_only=True)
class Engine:
    """A run's inference engine, and the published per-step cost that prices it (:mod:`rlinf.analytic.engine_costs`)."""

    description: str
    step_cost: str
    """A key of :data:`rlinf.analytic.engine_costs.ENGINE_STEP_COSTS`."""
    match: str
    """How that published measurement relates to this engine (same version line, or the nearest there is)."""
    unpriced_mode: str = ""
    """Where the engine ran in a mode no published per-step cost describes: why. Its rows stay in the table,
    flagged, outside the worst-row target (the issue's decision)."""


ENGINES: dict[str, Engine] = {
    "vllm-0.11-cudagraphs": Engine(
        description="vLLM 0.11 (0.11.0 in NeMo RL 0.4, 0.11.2 in 0.5: the pins of NeMo RL's pyproject.toml) with "
        "CUDA graphs (enforce_eager false); the synchronous LLM engine in the collocated recipes, the async "
        "engine in the one-step-off ones",
        step_cost="vllm-v1",
        match="the same engine (V1) with CUDA graphs, on an H100 PCIe: a later vLLM (2026) than 0.11, with a slower "
        "host CPU than a DGX's, so the fixed cost may err either way; the nearest published (the earlier page "
        "priced it with vLLM 0.6.3's on an A100)",
    ),
    "vllm-v1-eager": Engine(
        description="vLLM's V1 engine (VLLM_USE_V1=1 in veRL's fully asynchronous recipe scripts; the asynchronous "
        "run serves it through veRL's AgentLoop) with enforce_eager true (veRL's rollout default at the scripts' "
        "commits 7f837ac3a and 34cf9e7b9, which leave it unset): no graphs; the scripts do not state the vLLM "
        "version",
        step_cost="vllm-v1",
        match="the same engine (V1), measured with CUDA graphs on an H100 PCIe: eager mode launches every kernel "
        "from Python, so the figure is a lower bound here",
    ),
    "vllm-0.6.3-eager-rocm": Engine(
        description="vLLM 0.6.3 on ROCm (veRL's docker/Dockerfile.rocm at 44a65f956d72) with enforce_eager true: "
        "no graphs, every decode step launches its kernels one by one",
        step_cost="vllm-0.6",
        match="the same vLLM version, measured with CUDA graphs on an A100: eager mode launches every kernel from "
        "Python, so the figure is a lower bound here",
        unpriced_mode="eager vLLM on ROCm: no published per-step cost of an engine in that mode was found",
    ),
    "sglang-0.4-cudagraphs": Engine(
        description="SGLang 0.4 (0.4.6.post5 or 0.4.8 in veRL 0.5's images, 0.4.4 in RLinf's Dockerfile at "
        "298084c8b) with CUDA graphs (its default)",
        step_cost="sglang-0.4",
        match="the same version line: SGLang 0.4.6.post1, measured on an H20",
    ),
}
"""The inference engine of each run and the published per-step cost that prices it."""

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
# DeepSeek-R1-Distill-Qwen-1.5B and -7B: the Qwen2.5-Math shapes of their Hugging Face configs (28 layers; hidden
# 1536 with 12 heads and 2 KV heads, and 3584 with 28 heads and 4 KV heads; untied embeddings) and the parameter
# counts of rlinf's 1.5b and 7b presets (rlinf/analytic/llm_workload.py), which are these models'.
R1_DISTILL_1_5B = attrs.evolve(MODEL_PRESETS["1.5b"], name="R1-Distill-Qwen-1.5B")
R1_DISTILL_7B = attrs.evolve(MODEL_PRESETS["7b"], name="R1-Distill-Qwen-7B")
DEEPSEEK_7B = ModelSpec(
    name="deepseek-llm-7b",
    num_params=6.91e9,
    num_layers=30,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=32,
)

# Devices that rlinf.core.cluster has no preset for. GB200 (per GPU of a GB200 NVL72, 1,200 W): 2.5 PFLOP/s dense BF16
# and 8 TB/s HBM3e (glennklockwood.com/garden/processors/B200), 13.4 TB of HBM3e per 72 GPUs = 186 GB
# (aiwiki.ai/wiki/nvidia_gb200_nvl72), NVLink 5 at 900 GB/s per direction across the rack
# (verda.com/blog/gb300-nvl72-architecture); host link assumed 450 GB/s (NVLink-C2C of one Grace shared by two
# GPUs). MI300X: 192 GB HBM3 at 5.3 TB/s, ~1.3 PFLOP/s dense FP16/BF16
# (jaredwatkins.com/research/ai-accelerators/amd-instinct/mi300-series; aiwiki.ai/wiki/amd_instinct_mi300x),
# Infinity Fabric 448 GB/s aggregate per GPU (emergentmind.com/topics/amd-mi300x-gpu), host link as the H100
# preset's PCIe Gen5 x16. H20: 96 GB HBM3 at 4,000 GB/s, 148 TFLOP/s dense FP16/BF16, NVLink 4 at 900 GB/s
# (willitrunai.com/gpus/h20-96gb); 96 GB counted in GiB and the NVLink as 450 GB/s per direction, inter-node and
# host links as the H100 preset's, like the H100 preset's own figures.
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
    "H20": (
        DeviceSpec(name="H20", memory_bytes=96 * GIB, peak_flops=148e12, memory_bandwidth_bytes_per_s=4.0e12),
        DEVICE_PRESETS["H100"][1],
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
MODES = ("collocated", "one-step-off", "fully-async")
DISAGGREGATED = ("one-step-off", "fully-async")
"""Modes whose generation runs on its own devices, ahead of training (a plan with a staleness bound)."""
LOG_PROB_FORWARDS = ("inference", "trainer", "engine")
LONG_COT_TOKENS = 8000
"""Mean response tokens from which a run counts as long chain-of-thought (the issue's threshold)."""


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
    """``collocated`` (synchronous, every component on every device), ``one-step-off`` (generation on the first
    ``rollout_devices`` devices, one step ahead of training on the others) or ``fully-async`` (the same split,
    generation streaming ahead of training)."""
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
    reference_model: bool = True
    """The run computes a reference model's log-probs (a KL term); off when its config has none."""
    response_clip_ratio: float | None = None
    """The share of responses cut at the generation limit, where the source logs it."""
    response_longest: float | None = None
    """The longest response of a step (averaged over the steps read), where the source logs it: with the batch
    (prompts x group) it sets the spread of the lengths (:func:`rlinf.analytic.response_lengths.lognormal_for`)."""
    rollout_devices: int = 0
    log_prob_forwards: str = "inference"
    """Who computes the log-probs the loss needs: ``inference`` (a forward pass of their own, rlinf's inference
    component: the collocated runs), ``trainer`` (the training devices, from the buffered batch, before they train
    on it: NeMo RL's one-step-off runs) or ``engine`` (the rollout engine, while it generates: no forward at all)."""
    max_concurrent_sequences: int = 1024
    """The engine's cap on sequences in flight per replica (vLLM max_num_seqs, SGLang max_running_requests):
    1,024 where the system sets it so (veRL) or leaves vLLM's default on GPUs of 70 GiB or more other than A100
    (``EngineArgs.get_batch_defaults`` in vllm/engine/arg_utils.py); RLinf's config sets 64."""
    offload: tuple[str, ...] = STATEFUL
    """What the system moves off the GPUs when another component needs them (collocated runs only)."""
    framework: str = "megatron"
    """The training framework, a key of :data:`rlinf.analytic.training_costs.TRAINING_EFFICIENCIES`: whose published
    MFU by model size and fixed cost per optimizer step price the run's training."""
    optimizer_steps: int = 1
    """Optimizer steps per iteration (the batch over the training global batch), where the source gives it."""
    train_micro_batch_tokens: int = 4096
    """Tokens per training micro-batch (sequence packing): how many micro-batches fill a pipeline."""
    weight_sync: str = "verl"
    """A key of :data:`rlinf.analytic.weight_sync.RESHARD_MEASUREMENTS`: the published resharding time that prices
    a collocated weight sync (the run's own system's where one is published)."""
    reported_phases_s: tuple[tuple[str, float], ...] = ()
    """Per-phase seconds where the source breaks the step down: keys of :data:`PHASES`."""
    assumptions: tuple[str, ...] = ()
    previous: tuple[tuple[str, object], ...] = ()
    """Fields and the values the previous version of the page used for them (see :func:`as_previously`)."""

    def __attrs_post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"{self.key}: mode {self.mode!r} is not one of {list(MODES)}")
        if self.mode in DISAGGREGATED and not 0 < self.rollout_devices < self.num_devices:
            raise ValueError(
                f"{self.key}: rollout_devices {self.rollout_devices} must split {self.num_devices}"
            )
        if self.log_prob_forwards not in LOG_PROB_FORWARDS:
            raise ValueError(
                f"{self.key}: log_prob_forwards {self.log_prob_forwards!r} is not one of {list(LOG_PROB_FORWARDS)}"
            )
        if (self.mode in DISAGGREGATED) == (self.log_prob_forwards == "inference"):
            raise ValueError(
                f"{self.key}: log_prob_forwards {self.log_prob_forwards!r} does not suit mode {self.mode!r}: a "
                "collocated run computes them with its inference component; a disaggregated one on its trainer "
                "(trainer) or in its rollout engine (engine)"
            )
        unknown = {phase for phase, _ in self.reported_phases_s} - set(PHASES)
        if unknown:
            raise ValueError(f"{self.key}: unknown phases {sorted(unknown)}, use {sorted(PHASES)}")
        if self.device not in DEVICES:
            raise ValueError(f"{self.key}: unknown device {self.device!r}, use one of {sorted(DEVICES)}")
        if self.engine not in ENGINES:
            raise ValueError(f"{self.key}: unknown engine {self.engine!r}, use one of {sorted(ENGINES)}")
        if self.response_clip_ratio is not None and self.response_longest is not None:
            raise ValueError(f"{self.key}: give the clip ratio or the longest response, not both")
        if set(self.offload) - set(STATEFUL):
            raise ValueError(
                f"{self.key}: offload {list(self.offload)} names no component of {list(STATEFUL)}"
            )
        if self.framework not in TRAINING_EFFICIENCIES:
            raise ValueError(
                f"{self.key}: unknown framework {self.framework!r}, use one of {sorted(TRAINING_EFFICIENCIES)}"
            )
        if self.weight_sync not in RESHARD_MEASUREMENTS:
            raise ValueError(
                f"{self.key}: unknown weight sync {self.weight_sync!r}, use one of {sorted(RESHARD_MEASUREMENTS)}"
            )
        if self.train_mp % self.train_pp:
            raise ValueError(
                f"{self.key}: train_mp {self.train_mp} is not a multiple of train_pp {self.train_pp}"
            )

    @property
    def unpriced_engine(self) -> bool:
        """The row's engine ran in a mode no published per-step cost describes (flagged, outside the worst-row
        target)."""
        return bool(ENGINES[self.engine].unpriced_mode)

    @property
    def long_cot(self) -> bool:
        """A long chain-of-thought run: mean response of :data:`LONG_COT_TOKENS` tokens or more."""
        return self.response_mean_tokens >= LONG_COT_TOKENS

    @property
    def spread_source(self) -> str:
        """Which published statistic sets the spread of the response lengths, if any."""
        if self.response_clip_ratio is not None:
            return f"clip ratio {self.response_clip_ratio:g}"
        if self.response_longest is not None:
            return f"longest {self.response_longest:g} of {self.num_prompts * self.group_size}"
        return ""

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


def step_cost_of(engine: str) -> tuple[float, float]:
    """The published per-step cost of a run's engine: its :class:`Engine`'s table entry's fixed seconds per step
    and seconds per step and sequence in flight."""
    cost = ENGINE_STEP_COSTS[ENGINES[engine].step_cost]
    return cost.fixed_step_s, cost.per_sequence_s
