"""Training on a megatron-core ``GPTModel`` (optional; needs ``pip install megatron-core`` and a CUDA GPU).

The megatron model has the policy's GPT-2 shape (learned absolute positions, LayerNorm, biased linears,
tanh-GELU, tied embeddings), built from the local (non-Transformer-Engine) layer spec in a single-rank process
group (tensor and pipeline parallel size 1). Weights cross the interface under canonical names; the only layout
difference is the fused QKV projection, which megatron stores per head (``[q_h, k_h, v_h]`` for each head)
where the canonical model stores ``[q, k, v]`` (all heads each). :func:`to_megatron` and :func:`from_megatron`
convert and are tested without megatron installed.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from rlinf.core.errors import ConfigError
from rlinf.workloads.arith.backends import OptimConfig, TrainMetrics
from rlinf.workloads.arith.batches import TrainBatch
from rlinf.workloads.arith.model import TransformerConfig
from rlinf.workloads.arith.objectives import Objective

_LAYER_NAMES = (
    ("ln_1.", "input_layernorm."),
    ("attn.qkv.", "self_attention.linear_qkv."),
    ("attn.proj.", "self_attention.linear_proj."),
    ("ln_2.", "pre_mlp_layernorm."),
    ("fc_proj.", "mlp.linear_fc2."),
    ("fc.", "mlp.linear_fc1."),
)
_TOP_NAMES = (
    ("tok_emb.weight", "embedding.word_embeddings.weight"),
    ("pos_emb.weight", "embedding.position_embeddings.weight"),
    ("ln_f.weight", "decoder.final_layernorm.weight"),
    ("ln_f.bias", "decoder.final_layernorm.bias"),
)


def _megatron_name(name: str) -> str:
    for ours, theirs in _TOP_NAMES:
        if name == ours:
            return theirs
    _, index, rest = name.split(".", 2)
    for ours, theirs in _LAYER_NAMES:
        if rest.startswith(ours):
            return f"decoder.layers.{index}.{theirs}{rest[len(ours) :]}"
    raise ConfigError(
        "weights", name, "no megatron name for this parameter", "sync weights of a DecoderTransformer"
    )


def _qkv_per_head(tensor: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``[3 * H * d, ...]`` ordered (q|k|v, head) -> ordered (head, q|k|v)."""
    rest = tensor.shape[1:]
    return tensor.reshape(3, num_heads, -1, *rest).transpose(0, 1).reshape(tensor.shape).contiguous()


def _qkv_per_kind(tensor: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Inverse of :func:`_qkv_per_head`."""
    rest = tensor.shape[1:]
    return tensor.reshape(num_heads, 3, -1, *rest).transpose(0, 1).reshape(tensor.shape).contiguous()


def to_megatron(weights: Mapping[str, torch.Tensor], num_heads: int) -> dict[str, torch.Tensor]:
    """Canonical weights -> megatron-core ``GPTModel`` (local spec) names and QKV layout."""
    converted = {}
    for name, tensor in weights.items():
        value = _qkv_per_head(tensor, num_heads) if ".attn.qkv." in name else tensor
        converted[_megatron_name(name)] = value
    return converted


def from_megatron(
    weights: Mapping[str, torch.Tensor], names: Sequence[str], num_heads: int
) -> dict[str, torch.Tensor]:
    """Megatron weights -> canonical ``names`` (the inverse of :func:`to_megatron`)."""
    converted = {}
    for name in names:
        value = weights[_megatron_name(name)]
        converted[name] = _qkv_per_kind(value, num_heads) if ".attn.qkv." in name else value
    return converted


def _canonical_names(config: TransformerConfig) -> list[str]:
    names = ["tok_emb.weight", "pos_emb.weight"]
    for i in range(config.num_layers):
        for part in ("ln_1", "attn.qkv", "attn.proj", "ln_2", "fc", "fc_proj"):
            names += [f"blocks.{i}.{part}.weight", f"blocks.{i}.{part}.bias"]
    return [*names, "ln_f.weight", "ln_f.bias"]


class MegatronTrainBackend:
    """AdamW training of a megatron-core ``GPTModel`` on one GPU (tensor/pipeline parallel size 1)."""

    name = "megatron"

    def __init__(
        self, model_config: TransformerConfig, *, optim: OptimConfig, seed: int, device: str = "cuda"
    ) -> None:
        try:
            from megatron.core import parallel_state, tensor_parallel
            from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
            from megatron.core.models.gpt.gpt_model import GPTModel
            from megatron.core.transformer.transformer_config import TransformerConfig as CoreConfig
        except ImportError as error:
            raise ConfigError(
                "actor.backend",
                "megatron",
                f"megatron-core is not importable ({error})",
                "pip install megatron-core on a CUDA machine, or use actor.backend=torch",
            ) from error
        if not torch.cuda.is_available():
            raise ConfigError(
                "actor.backend",
                "megatron",
                "megatron-core needs a CUDA GPU",
                "run on a GPU machine or use actor.backend=torch",
            )
        if not torch.distributed.is_initialized():
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29517")
            torch.distributed.init_process_group(backend="nccl", world_size=1, rank=0)
        if not parallel_state.model_parallel_is_initialized():
            parallel_state.initialize_model_parallel(
                tensor_model_parallel_size=1, pipeline_model_parallel_size=1
            )
        tensor_parallel.model_parallel_cuda_manual_seed(seed)
        torch.manual_seed(seed)
        self.model_config = model_config
        self.optim = optim
        self.device = torch.device(device)
        core_config = CoreConfig(
            num_layers=model_config.num_layers,
            hidden_size=model_config.d_model,
            num_attention_heads=model_config.num_heads,
            ffn_hidden_size=model_config.d_ff,
            normalization="LayerNorm",
            layernorm_epsilon=1e-5,
            add_bias_linear=True,
            gated_linear_unit=False,
            activation_func=functools.partial(F.gelu, approximate="tanh"),
            bias_activation_fusion=False,
            masked_softmax_fusion=False,
            bias_dropout_fusion=False,
            persist_layer_norm=False,
            gradient_accumulation_fusion=False,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            use_cpu_initialization=True,
            params_dtype=torch.float32,
        )
        self.model = GPTModel(
            config=core_config,
            transformer_layer_spec=get_gpt_layer_local_spec(),
            vocab_size=model_config.vocab_size,
            max_sequence_length=model_config.max_seq_len,
            position_embedding_type="learned_absolute",
            share_embeddings_and_output_weights=True,
        ).to(self.device)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=optim.lr, betas=optim.betas, weight_decay=optim.weight_decay
        )
        self.num_steps = 0

    def _token_logprobs(self, tokens: torch.Tensor) -> torch.Tensor:
        tokens = tokens.to(self.device)
        steps = tokens.shape[1]
        positions = torch.arange(steps, device=self.device).expand_as(tokens)
        masked_out = torch.triu(torch.ones(steps, steps, dtype=torch.bool, device=self.device), diagonal=1)[
            None, None
        ]
        logits = self.model(tokens, positions, masked_out)
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        return logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)

    def logprobs(self, batch: TrainBatch) -> torch.Tensor:
        with torch.no_grad():
            return self._token_logprobs(batch.tokens).cpu()

    def train_step(self, micro_batches: Sequence[TrainBatch], objective: Objective) -> TrainMetrics:
        total = sum(mb.num_sequences for mb in micro_batches)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums = {"loss": 0.0, "policy_loss": 0.0, "kl": 0.0, "clip_fraction": 0.0}
        for mb in micro_batches:
            on_device = mb.to(self.device)
            terms = objective(self._token_logprobs(on_device.tokens), on_device)
            share = mb.num_sequences / total
            (terms.loss * share).backward()
            sums["loss"] += float(terms.loss.detach()) * share
            for key in ("policy_loss", "kl", "clip_fraction"):
                sums[key] += getattr(terms, key) * share
        max_norm = self.optim.max_grad_norm if self.optim.max_grad_norm > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm))
        self.optimizer.step()
        self.num_steps += 1
        return TrainMetrics(
            grad_norm=grad_norm, num_sequences=total, num_micro_batches=len(micro_batches), **sums
        )

    def weights(self) -> dict[str, torch.Tensor]:
        state = {
            name: t.detach() for name, t in self.model.state_dict().items() if isinstance(t, torch.Tensor)
        }
        return from_megatron(state, _canonical_names(self.model_config), self.model_config.num_heads)

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Initialise from canonical weights (e.g. a torch warm start)."""
        converted = to_megatron(weights, self.model_config.num_heads)
        own = self.model.state_dict()
        with torch.no_grad():
            for name, tensor in converted.items():
                own[name].copy_(tensor)

    def state_dict(self) -> dict[str, Any]:
        """A snapshot (deep copy) of weights, optimizer state and step count; later steps do not change it."""
        return copy.deepcopy(
            {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "num_steps": self.num_steps,
            }
        )

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"], strict=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.num_steps = int(state["num_steps"])

    def offload(self) -> None:
        self.model.to("cpu")
        for state in self.optimizer.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    state[key] = value.to("cpu")

    def onload(self) -> None:
        self.model.to(self.device)
        for state in self.optimizer.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    state[key] = value.to(self.device)
