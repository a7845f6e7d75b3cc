"""Training batches: prompt + response sequences, right-padded, with per-token masks and per-sequence values.

Log-probabilities are aligned to targets: column ``t`` of a ``[B, T - 1]`` tensor is the log-probability of
``tokens[:, t + 1]``. ``response_mask`` is 1.0 exactly on the columns whose target is a response token (EOS
included), so prompts and padding never count in a loss.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch

from rlinf.core.errors import positive, require


@attrs.frozen(kw_only=True)
class TrainBatch:
    """One (micro-)batch of sequences for scoring or training."""

    tokens: torch.Tensor
    """``[B, T]`` long, right-padded prompt + response."""
    response_mask: torch.Tensor
    """``[B, T - 1]`` float, 1.0 where the target token is part of the response."""
    advantages: torch.Tensor | None = None
    """``[B]`` float, one advantage per sequence (GRPO)."""
    old_logprobs: torch.Tensor | None = None
    """``[B, T - 1]`` log-probabilities under the policy that generated the responses."""
    ref_logprobs: torch.Tensor | None = None
    """``[B, T - 1]`` log-probabilities under the reference policy (KL penalty)."""

    def __attrs_post_init__(self) -> None:
        batch, width = self.tokens.shape
        require(
            tuple(self.response_mask.shape) == (batch, width - 1),
            "response_mask.shape",
            tuple(self.response_mask.shape),
            f"must be {(batch, width - 1)}",
            "align the mask to targets",
        )
        for name in ("old_logprobs", "ref_logprobs"):
            value = getattr(self, name)
            require(
                value is None or tuple(value.shape) == (batch, width - 1),
                f"{name}.shape",
                None if value is None else tuple(value.shape),
                f"must be {(batch, width - 1)}",
                "score the same tokens",
            )
        require(
            self.advantages is None or tuple(self.advantages.shape) == (batch,),
            "advantages.shape",
            None if self.advantages is None else tuple(self.advantages.shape),
            f"must be {(batch,)}",
            "give one advantage per sequence",
        )

    @property
    def num_sequences(self) -> int:
        return int(self.tokens.shape[0])

    def select(self, rows: slice) -> TrainBatch:
        """The sub-batch of ``rows``."""

        def cut(value: torch.Tensor | None) -> torch.Tensor | None:
            return None if value is None else value[rows]

        return TrainBatch(
            tokens=self.tokens[rows],
            response_mask=self.response_mask[rows],
            advantages=cut(self.advantages),
            old_logprobs=cut(self.old_logprobs),
            ref_logprobs=cut(self.ref_logprobs),
        )

    def to(self, device: torch.device) -> TrainBatch:
        """The batch with every tensor on ``device``."""

        def move(value: torch.Tensor | None) -> torch.Tensor | None:
            return None if value is None else value.to(device)

        return TrainBatch(
            tokens=self.tokens.to(device),
            response_mask=self.response_mask.to(device),
            advantages=move(self.advantages),
            old_logprobs=move(self.old_logprobs),
            ref_logprobs=move(self.ref_logprobs),
        )

    def micro_batches(self, micro_batch_size: int) -> list[TrainBatch]:
        """Consecutive sub-batches of at most ``micro_batch_size`` sequences."""
        positive("micro_batch_size", micro_batch_size)
        return [
            self.select(slice(i, i + micro_batch_size))
            for i in range(0, self.num_sequences, micro_batch_size)
        ]


def sequences(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int
) -> TrainBatch:
    """A batch of ``prompt + response`` rows, right-padded, with the response mask and no per-sequence values."""
    require(
        len(prompts) == len(responses),
        "responses",
        len(responses),
        f"must match the {len(prompts)} prompts",
        "pass one response per prompt",
    )
    width = max(len(p) + len(r) for p, r in zip(prompts, responses, strict=True))
    tokens = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width - 1), dtype=torch.float32)
    for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        length = len(prompt) + len(response)
        tokens[row, :length] = torch.tensor([*prompt, *response], dtype=torch.long)
        mask[row, len(prompt) - 1 : length - 1] = 1.0
    return TrainBatch(tokens=tokens, response_mask=mask)
