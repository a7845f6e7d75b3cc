"""Hugging Face Qwen2 / Llama weights <-> megatron-core ``GPTModel`` names and layouts (pure tensor maths).

Megatron fuses what Hugging Face keeps apart:

* ``self_attention.linear_qkv`` holds the query, key and value projections *interleaved by query group* (one
  group per key/value head under grouped-query attention): ``[q heads of group 0, k_0, v_0, q heads of group 1,
  k_1, v_1, ...]``, each head ``head_dim`` rows, which is how ``SelfAttention.get_query_key_value_tensors``
  splits it. Hugging Face query head ``h`` attends with key/value head ``h // (num_heads // num_kv_heads)``, so
  group ``g`` holds query heads ``g * heads_per_group ...`` in order. Biases (Qwen2) follow the rows.
* ``mlp.linear_fc1`` is ``[gate_proj; up_proj]`` (Megatron's SwiGLU applies the activation to the first half).
* Layer norms are ``input_layernorm`` / ``pre_mlp_layernorm`` in the local spec, or fused into the next linear
  as ``linear_qkv.layer_norm_weight`` / ``linear_fc1.layer_norm_weight`` in the Transformer Engine spec.
* With tied embeddings Megatron has no ``output_layer.weight``; Hugging Face's ``state_dict`` lists
  ``lm_head.weight`` as the embedding's tensor, which :func:`from_megatron` gives back.

Rotary embeddings need no permutation: Hugging Face checkpoints of these architectures use the half-rotation
convention, which is Megatron's default (``rotary_interleaved=False``). :func:`to_megatron` and
:func:`from_megatron` are exact inverses (tensors are reshaped and concatenated, never cast); a name either side
does not expect is an error, never dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import torch

from rlinf.api import ConfigError, positive, require

ARCHITECTURES = ("qwen2", "llama")
"""Hugging Face ``model_type`` values whose state dict has this layout."""


@attrs.frozen(kw_only=True)
class GptLayout:
    """The sizes that decide how a Qwen2 / Llama state dict maps onto a megatron-core ``GPTModel``."""

    num_layers: int
    num_heads: int
    """Query heads."""
    num_kv_heads: int
    """Key/value heads (Megatron's ``num_query_groups``); divides ``num_heads``."""
    head_dim: int
    tied_embeddings: bool
    """The output layer is the input embedding (no ``lm_head`` / ``output_layer`` weight of its own)."""
    fused_layernorm: bool = False
    """Transformer Engine layer spec: the layer norms are ``layer_norm_weight`` of ``linear_qkv`` / ``linear_fc1``."""

    def __attrs_post_init__(self) -> None:
        for name in ("num_layers", "num_heads", "num_kv_heads", "head_dim"):
            positive(f"layout.{name}", getattr(self, name))
        require(
            self.num_heads % self.num_kv_heads == 0,
            "layout.num_kv_heads",
            self.num_kv_heads,
            f"must divide num_heads={self.num_heads}",
            "use a grouped-query attention model",
        )

    @property
    def heads_per_group(self) -> int:
        return self.num_heads // self.num_kv_heads


def layout_of(hf_config: Any, *, fused_layernorm: bool = False) -> GptLayout:
    """The layout of a ``transformers`` Qwen2 or Llama config; other architectures are refused."""
    require(
        hf_config.model_type in ARCHITECTURES,
        "model",
        hf_config.model_type,
        "has no megatron-core weight mapping",
        f"use a model of type {list(ARCHITECTURES)} or the hf backend",
    )
    num_heads = int(hf_config.num_attention_heads)
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // num_heads
    return GptLayout(
        num_layers=int(hf_config.num_hidden_layers),
        num_heads=num_heads,
        num_kv_heads=int(getattr(hf_config, "num_key_value_heads", None) or num_heads),
        head_dim=int(head_dim),
        tied_embeddings=bool(hf_config.tie_word_embeddings),
        fused_layernorm=fused_layernorm,
    )


def fuse_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: GptLayout) -> torch.Tensor:
    """Hugging Face ``q_proj`` / ``k_proj`` / ``v_proj`` weights (or biases) -> Megatron's ``linear_qkv``."""
    groups, per_group, d = layout.num_kv_heads, layout.heads_per_group, layout.head_dim
    rest = q.shape[1:]
    blocks = [
        q.reshape(groups, per_group * d, *rest),
        k.reshape(groups, d, *rest),
        v.reshape(groups, d, *rest),
    ]
    return torch.cat(blocks, dim=1).reshape(-1, *rest)


def split_qkv(fused: torch.Tensor, layout: GptLayout) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Megatron's ``linear_qkv`` weight (or bias) -> Hugging Face ``(q_proj, k_proj, v_proj)``; inverse of
    :func:`fuse_qkv`."""
    groups, per_group, d = layout.num_kv_heads, layout.heads_per_group, layout.head_dim
    rest = fused.shape[1:]
    expected = groups * (per_group + 2) * d
    if fused.shape[0] != expected:
        raise ConfigError(
            "weights",
            list(fused.shape),
            f"linear_qkv has {fused.shape[0]} rows, the layout needs {expected}",
            "map weights of a model with this layout",
        )
    q, k, v = fused.reshape(groups, (per_group + 2) * d, *rest).split([per_group * d, d, d], dim=1)
    return q.reshape(-1, *rest), k.reshape(-1, *rest), v.reshape(-1, *rest)


def _layer_names(layout: GptLayout, i: int) -> tuple[tuple[str, str], ...]:
    """``(hf, megatron)`` names of the one-to-one tensors of layer ``i``."""
    hf, mc = f"model.layers.{i}.", f"decoder.layers.{i}."
    norms = (
        (f"{mc}self_attention.linear_qkv.layer_norm_weight", f"{mc}mlp.linear_fc1.layer_norm_weight")
        if layout.fused_layernorm
        else (f"{mc}input_layernorm.weight", f"{mc}pre_mlp_layernorm.weight")
    )
    return (
        (f"{hf}input_layernorm.weight", norms[0]),
        (f"{hf}post_attention_layernorm.weight", norms[1]),
        (f"{hf}self_attn.o_proj.weight", f"{mc}self_attention.linear_proj.weight"),
        (f"{hf}self_attn.o_proj.bias", f"{mc}self_attention.linear_proj.bias"),
        (f"{hf}mlp.down_proj.weight", f"{mc}mlp.linear_fc2.weight"),
        (f"{hf}mlp.down_proj.bias", f"{mc}mlp.linear_fc2.bias"),
    )


_TOP_NAMES = (
    ("model.embed_tokens.weight", "embedding.word_embeddings.weight"),
    ("model.norm.weight", "decoder.final_layernorm.weight"),
)


def _take(source: dict[str, torch.Tensor], name: str, side: str) -> torch.Tensor:
    if name not in source:
        raise ConfigError(
            "weights", name, f"is missing from the {side} state dict", "map a complete state dict"
        )
    return source.pop(name)


def _refuse_leftovers(source: Mapping[str, torch.Tensor], side: str) -> None:
    if source:
        raise ConfigError(
            "weights",
            sorted(source)[:4],
            f"{len(source)} {side} tensor(s) have no counterpart",
            "map the state dict of a Qwen2 or Llama causal LM with this layout",
        )


def to_megatron(hf: Mapping[str, torch.Tensor], layout: GptLayout) -> dict[str, torch.Tensor]:
    """A Hugging Face Qwen2 / Llama ``state_dict`` -> megatron-core ``GPTModel`` names and layouts."""
    source = dict(hf)
    out = {mc: _take(source, name, "Hugging Face") for name, mc in _TOP_NAMES}
    head = source.pop("lm_head.weight", None)
    if layout.tied_embeddings:
        if head is not None and not torch.equal(head, out["embedding.word_embeddings.weight"]):
            raise ConfigError(
                "weights", "lm_head.weight", "differs from the embedding of a tied model", "untie the layout"
            )
    else:
        out["output_layer.weight"] = _require(head, "lm_head.weight")
    for i in range(layout.num_layers):
        attention, mlp = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        fused = f"decoder.layers.{i}.self_attention.linear_qkv."
        for kind in ("weight", "bias"):
            if kind == "weight" or f"{attention}q_proj.{kind}" in source:
                q, k, v = (_take(source, f"{attention}{p}_proj.{kind}", "Hugging Face") for p in "qkv")
                out[f"{fused}{kind}"] = fuse_qkv(q, k, v, layout)
            if kind == "weight" or f"{mlp}gate_proj.{kind}" in source:
                gate, up = (_take(source, f"{mlp}{p}_proj.{kind}", "Hugging Face") for p in ("gate", "up"))
                out[f"decoder.layers.{i}.mlp.linear_fc1.{kind}"] = torch.cat([gate, up])
        for name, mc in _layer_names(layout, i):
            if name.endswith(".weight") or name in source:
                out[mc] = _take(source, name, "Hugging Face")
    _refuse_leftovers(source, "Hugging Face")
    return out


def from_megatron(megatron: Mapping[str, torch.Tensor], layout: GptLayout) -> dict[str, torch.Tensor]:
    """megatron-core ``GPTModel`` weights -> the Hugging Face ``state_dict``; inverse of :func:`to_megatron`.
    Megatron's ``_extra_state`` entries (Transformer Engine's FP8 metadata) carry no weights and are skipped."""
    source = {name: t for name, t in megatron.items() if not name.endswith("_extra_state")}
    out = {name: _take(source, mc, "megatron") for name, mc in _TOP_NAMES}
    if layout.tied_embeddings:
        out["lm_head.weight"] = out["model.embed_tokens.weight"]
    else:
        out["lm_head.weight"] = _take(source, "output_layer.weight", "megatron")
    for i in range(layout.num_layers):
        attention, mlp = f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        for kind in ("weight", "bias"):
            fused = f"decoder.layers.{i}.self_attention.linear_qkv.{kind}"
            if kind == "weight" or fused in source:
                q, k, v = split_qkv(_take(source, fused, "megatron"), layout)
                out.update({f"{attention}q_proj.{kind}": q, f"{attention}k_proj.{kind}": k})
                out[f"{attention}v_proj.{kind}"] = v
            fc1 = f"decoder.layers.{i}.mlp.linear_fc1.{kind}"
            if kind == "weight" or fc1 in source:
                gate, up = _take(source, fc1, "megatron").chunk(2, dim=0)
                out.update({f"{mlp}gate_proj.{kind}": gate, f"{mlp}up_proj.{kind}": up})
        for name, mc in _layer_names(layout, i):
            if name.endswith(".weight") or mc in source:
                out[name] = _take(source, mc, "megatron")
    _refuse_leftovers(source, "megatron")
    return out


def _require(tensor: torch.Tensor | None, name: str) -> torch.Tensor:
    if tensor is None:
        raise ConfigError(
            "weights", name, "is missing from an untied model's state dict", "map a complete state dict"
        )
    return tensor
