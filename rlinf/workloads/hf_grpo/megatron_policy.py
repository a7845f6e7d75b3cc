"""The HF GRPO inference / actor policy on a megatron-core ``GPTModel`` (optional; needs
``pip install megatron-core`` and a CUDA GPU).

The ``GPTModel`` is built from the checkpoint's own ``config.json`` (Qwen2 or Llama: RMSNorm, SwiGLU, rotary
embeddings, grouped-query attention, Qwen2's query/key/value biases, tied or untied embeddings) with the local
(non-Transformer-Engine) layer spec, tensor and pipeline parallel size 1 (data-parallel replicas are the
component's own, averaging gradients as the ``hf`` actor does). Its weights come from the Hugging Face
checkpoint and leave it under Hugging Face names through :mod:`~rlinf.workloads.hf_grpo.megatron_layout`, so the
rollout and the other components take them unchanged. ``megatron.core`` is imported inside the class only.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from rlinf.api import ConfigError
from rlinf.workloads.hf_grpo.backends import PolicyBackend, require_cuda_device
from rlinf.workloads.hf_grpo.checkpoints import load_model
from rlinf.workloads.hf_grpo.megatron_layout import from_megatron, layout_of, to_megatron


def bias_flags(hf_config: Any, field: str) -> tuple[bool, bool]:
    """Megatron's ``(add_bias_linear, add_qkv_bias)`` for the checkpoint's biases; refuses what Megatron's
    flags cannot express (attention biases without MLP biases or the reverse, in Llama)."""
    if hf_config.model_type == "qwen2":
        return False, True
    attention, mlp = (
        bool(getattr(hf_config, "attention_bias", False)),
        bool(getattr(hf_config, "mlp_bias", False)),
    )
    if attention != mlp:
        raise ConfigError(
            field,
            "megatron",
            f"cannot express attention_bias={attention} with mlp_bias={mlp} (one add_bias_linear flag)",
            f"use {field}: hf for this checkpoint",
        )
    return attention, False


def rotary_base(hf_config: Any, field: str) -> float:
    """The rotary base of an unscaled rotary embedding (scaled variants are refused)."""
    parameters = getattr(hf_config, "rope_parameters", None) or {}
    scaling = getattr(hf_config, "rope_scaling", None) or parameters
    kind = scaling.get("rope_type", scaling.get("type", "default")) if scaling else "default"
    if kind != "default":
        raise ConfigError(
            field,
            "megatron",
            f"has no mapping for rope_type={kind!r}",
            f"use {field}: hf for this checkpoint",
        )
    return float(parameters.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0)))


class MegatronPolicyBackend(PolicyBackend):
    """Scoring and training of a megatron-core ``GPTModel`` on one GPU (tensor / pipeline parallel size 1)."""

    name = "megatron"

    def __init__(
        self, directory: Path, *, device: torch.device, dtype: torch.dtype, seed: int, component: str
    ) -> None:
        field = f"backends.{component}"
        try:
            from megatron.core import parallel_state, tensor_parallel
            from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
            from megatron.core.models.gpt.gpt_model import GPTModel
            from megatron.core.transformer.transformer_config import TransformerConfig
        except ImportError as error:
            raise ConfigError(
                field,
                "megatron",
                f"megatron-core is not importable ({error})",
                f"pip install megatron-core on a CUDA machine, or use {field}: hf",
            ) from error
        require_cuda_device(field, "megatron", device)
        from transformers import AutoConfig

        hf_config = AutoConfig.from_pretrained(directory, local_files_only=True)
        self.layout = layout_of(hf_config)
        if hf_config.hidden_act != "silu":
            raise ConfigError(
                field, "megatron", f"has no mapping for hidden_act={hf_config.hidden_act!r}", "use hf"
            )
        add_bias_linear, add_qkv_bias = bias_flags(hf_config, field)
        torch.cuda.set_device(device if device.index is not None else torch.cuda.current_device())
        self._store_dir = _single_rank_group()
        if not parallel_state.model_parallel_is_initialized():
            parallel_state.initialize_model_parallel(
                tensor_model_parallel_size=1, pipeline_model_parallel_size=1
            )
        tensor_parallel.model_parallel_cuda_manual_seed(seed)
        core = TransformerConfig(
            num_layers=self.layout.num_layers,
            hidden_size=hf_config.hidden_size,
            num_attention_heads=self.layout.num_heads,
            num_query_groups=self.layout.num_kv_heads,
            kv_channels=self.layout.head_dim,
            ffn_hidden_size=hf_config.intermediate_size,
            normalization="RMSNorm",
            layernorm_epsilon=hf_config.rms_norm_eps,
            add_bias_linear=add_bias_linear,
            add_qkv_bias=add_qkv_bias,
            gated_linear_unit=True,
            activation_func=F.silu,
            bias_activation_fusion=False,
            masked_softmax_fusion=False,
            bias_dropout_fusion=False,
            persist_layer_norm=False,
            gradient_accumulation_fusion=False,
            apply_rope_fusion=False,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            use_cpu_initialization=True,
            params_dtype=dtype,
            bf16=dtype == torch.bfloat16,
        )
        self.model = GPTModel(
            config=core,
            transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
            vocab_size=hf_config.vocab_size,
            max_sequence_length=hf_config.max_position_embeddings,
            position_embedding_type="rope",
            rotary_base=rotary_base(hf_config, field),
            share_embeddings_and_output_weights=self.layout.tied_embeddings,
        ).to(device)
        self.directory, self.device, self.dtype = directory, device, dtype
        self._generation_model: Any = None
        self.load_weights(load_model(directory, torch.device("cpu")).state_dict())

    def _own(self) -> dict[str, torch.Tensor]:
        return {name: t for name, t in self.model.state_dict().items() if isinstance(t, torch.Tensor)}

    def logits(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Right-padded sequences need only the causal mask: no real token attends to the padding after it."""
        steps = tokens.shape[1]
        positions = torch.arange(steps, device=tokens.device).expand_as(tokens)
        causal = torch.triu(torch.ones(steps, steps, dtype=torch.bool, device=tokens.device), diagonal=1)
        return self.model(tokens, positions, causal[None, None])

    def weights(self) -> dict[str, torch.Tensor]:
        """The weights under Hugging Face names (:func:`megatron_layout.from_megatron`)."""
        return from_megatron({name: t.detach() for name, t in self._own().items()}, self.layout)

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Hugging Face weights into the ``GPTModel`` in place (:func:`megatron_layout.to_megatron`)."""
        converted, own = to_megatron(weights, self.layout), self._own()
        if set(converted) != set(own):
            raise ConfigError(
                "weights",
                sorted(set(converted) ^ set(own))[:4],
                "differ between the mapped checkpoint and the megatron model",
                "sync weights of the same model",
            )
        with torch.no_grad():
            for name, tensor in converted.items():
                own[name].copy_(tensor)

    def generation_model(self) -> Any:
        """The checkpoint's ``transformers`` model with the ``GPTModel``'s current weights (for evaluation)."""
        if self._generation_model is None:
            self._generation_model = load_model(self.directory, self.device, self.dtype)
        self._generation_model.load_state_dict(self.weights())
        return self._generation_model


def _single_rank_group() -> tempfile.TemporaryDirectory | None:
    """Megatron needs ``torch.distributed``; a component without replicas gets a one-rank NCCL group over a
    file store in a private directory (no port). A data-parallel component's group is already there."""
    if torch.distributed.is_initialized():
        return None
    folder = tempfile.TemporaryDirectory(prefix="rlinf-megatron-")
    store = torch.distributed.FileStore(str(Path(folder.name) / "store"), 1)
    torch.distributed.init_process_group(backend="nccl", store=store, world_size=1, rank=0)
    return folder
