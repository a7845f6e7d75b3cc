"""A small decoder-only transformer in plain torch, with a key/value cache for generation.

The architecture is GPT-2's (learned absolute positions, pre-LayerNorm blocks, fused QKV projection with bias,
tanh-GELU MLP, final LayerNorm, output head tied to the token embedding), so its weights map one-to-one onto a
Hugging Face ``GPT2LMHeadModel`` (used by the vLLM backend) and onto a megatron-core ``GPTModel``.

``forward`` serves both uses:

* training / scoring: right-padded ``tokens`` with ``positions = arange``, no key mask, plain causal attention;
* generation: left-padded prompts with a ``key_mask`` (False on padding) and ``positions`` counted over real
  tokens; it returns a :class:`KVCache` to which each next step appends one token.
"""

from __future__ import annotations

import math

import attrs
import torch
import torch.nn.functional as F
from torch import nn

from rlinf.core.errors import positive, require


@attrs.frozen(kw_only=True)
class TransformerConfig:
    """Sizes of the transformer."""

    vocab_size: int
    d_model: int = 128
    """Width of the residual stream."""
    num_layers: int = 2
    num_heads: int = 4
    """Attention heads; must divide ``d_model``."""
    d_ff: int = 512
    """Hidden width of the MLP."""
    max_seq_len: int = 32
    """Longest sequence (prompt + response) the position embedding covers."""

    def __attrs_post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "num_layers", "num_heads", "d_ff", "max_seq_len"):
            positive(f"model.{name}", getattr(self, name))
        require(
            self.d_model % self.num_heads == 0,
            "model.num_heads",
            self.num_heads,
            f"must divide d_model={self.d_model}",
            "pick num_heads that divides d_model",
        )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads


@attrs.frozen
class KVCache:
    """Keys and values of every layer (``[B, H, K, head_dim]`` each) and which of the ``K`` keys are real."""

    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]
    key_mask: torch.Tensor
    """``[B, K]`` bool: False on left padding and on steps of rows that had already finished."""

    @property
    def length(self) -> int:
        return int(self.key_mask.shape[1])

    def select(self, rows: torch.Tensor) -> KVCache:
        """The cache of the batch rows ``rows`` only (used to drop finished groups from a batch)."""
        layers = tuple((k.index_select(0, rows), v.index_select(0, rows)) for k, v in self.layers)
        return KVCache(layers, self.key_mask.index_select(0, rows))


class Attention(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None,
        past: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        batch, steps, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=-1)
        q, k, v = (t.view(batch, steps, self.num_heads, -1).transpose(1, 2) for t in (q, k, v))
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        if attn_mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.proj(out.transpose(1, 2).reshape(batch, steps, width)), (k, v)


class Block(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model)
        self.attn = Attention(config)
        self.ln_2 = nn.LayerNorm(config.d_model)
        self.fc = nn.Linear(config.d_model, config.d_ff)
        self.fc_proj = nn.Linear(config.d_ff, config.d_model)

    def forward(self, x, attn_mask, past):
        attended, present = self.attn(self.ln_1(x), attn_mask, past)
        x = x + attended
        x = x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))
        return x, present


class DecoderTransformer(nn.Module):
    """GPT-2-shaped decoder. ``forward(tokens, ...) -> (logits [B, S, vocab], KVCache | None)``."""

    def __init__(self, config: TransformerConfig, *, seed: int) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.max_seq_len, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.reset_parameters(torch.Generator().manual_seed(seed))

    def reset_parameters(self, generator: torch.Generator) -> None:
        """GPT-2 initialisation (normal 0.02; residual projections scaled by ``1/sqrt(2 * num_layers)``)."""
        residual_std = 0.02 / math.sqrt(2 * self.config.num_layers)
        with torch.no_grad():
            for name, param in self.named_parameters():
                if name.endswith("bias"):
                    param.zero_()
                elif "ln" in name:
                    param.fill_(1.0)
                else:
                    std = residual_std if name.endswith(("proj.weight", "fc_proj.weight")) else 0.02
                    param.copy_(torch.randn(param.shape, generator=generator) * std)

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        *,
        return_cache: bool = False,
    ) -> tuple[torch.Tensor, KVCache | None]:
        """Logits for ``tokens [B, S]``.

        ``positions [B, S]`` defaults to ``arange(S)`` (right padding). ``key_mask [B, S]`` marks the real new
        tokens; with it (or with ``cache``) attention is masked explicitly: query ``s`` sees the cached keys and
        the new keys up to ``s`` that are real, and always itself (so padding queries never see an empty row).
        """
        batch, steps = tokens.shape
        past_len = 0 if cache is None else cache.length
        require(
            past_len + steps <= self.config.max_seq_len,
            "sequence length",
            past_len + steps,
            f"exceeds model.max_seq_len={self.config.max_seq_len}",
            "raise model.max_seq_len",
        )
        if positions is None:
            positions = torch.arange(past_len, past_len + steps, device=tokens.device).expand(batch, steps)
        x = self.tok_emb(tokens) + self.pos_emb(positions)
        attn_mask = None
        full_key_mask = None
        if key_mask is not None or cache is not None:
            new_mask = (
                key_mask
                if key_mask is not None
                else torch.ones(batch, steps, dtype=torch.bool, device=tokens.device)
            )
            full_key_mask = new_mask if cache is None else torch.cat([cache.key_mask, new_mask], dim=1)
            attn_mask = _attention_mask(full_key_mask, past_len, steps)
        presents = []
        for i, block in enumerate(self.blocks):
            x, present = block(x, attn_mask, None if cache is None else cache.layers[i])
            presents.append(present)
        logits = self.ln_f(x) @ self.tok_emb.weight.T
        if not return_cache:
            return logits, None
        if full_key_mask is None:
            full_key_mask = torch.ones(batch, steps, dtype=torch.bool, device=tokens.device)
        return logits, KVCache(tuple(presents), full_key_mask)


def _attention_mask(key_mask: torch.Tensor, past_len: int, steps: int) -> torch.Tensor:
    """``[B, 1, S, K]`` bool: causal over the new steps, restricted to real keys, diagonal always allowed."""
    num_keys = key_mask.shape[1]
    key_index = torch.arange(num_keys, device=key_mask.device)
    query_index = torch.arange(past_len, past_len + steps, device=key_mask.device)
    causal = key_index[None, :] <= query_index[:, None]
    diagonal = key_index[None, :] == query_index[:, None]
    allowed = (causal[None] & key_mask[:, None, :]) | diagonal[None]
    return allowed[:, None]


def token_logprobs(model: DecoderTransformer, tokens: torch.Tensor) -> torch.Tensor:
    """``[B, T] -> [B, T - 1]``: log p(tokens[:, t + 1] | tokens[:, : t + 1]) for right-padded ``tokens``."""
    logits, _ = model(tokens)
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)
