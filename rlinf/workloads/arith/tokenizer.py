"""A character-level tokenizer for arithmetic prompts and answers.

The vocabulary is fixed and tiny: three special tokens (padding, begin of sequence, end of sequence), the ten
digits and the operator characters. ``encode`` rejects characters outside the vocabulary instead of mapping them
to an unknown token, so a malformed problem fails where it is made.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from rlinf.core.errors import require

PAD = "<pad>"
BOS = "<bos>"
EOS = "<eos>"
SPECIAL_TOKENS = (PAD, BOS, EOS)
CHARACTERS = tuple("0123456789+=")


@attrs.frozen
class ArithTokenizer:
    """Maps characters to ids and back. ``pad_id == 0``, ``bos_id == 1``, ``eos_id == 2``."""

    tokens: tuple[str, ...] = SPECIAL_TOKENS + CHARACTERS

    def __attrs_post_init__(self) -> None:
        require(
            len(set(self.tokens)) == len(self.tokens),
            "tokenizer.tokens",
            self.tokens,
            "has duplicates",
            "list each token once",
        )
        require(
            self.tokens[:3] == SPECIAL_TOKENS,
            "tokenizer.tokens",
            self.tokens[:3],
            "must start with pad, bos, eos",
            f"start with {SPECIAL_TOKENS}",
        )

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    @property
    def pad_id(self) -> int:
        return 0

    @property
    def bos_id(self) -> int:
        return 1

    @property
    def eos_id(self) -> int:
        return 2

    def encode(self, text: str) -> list[int]:
        """Ids of the characters of ``text`` (no special tokens added)."""
        index = {token: i for i, token in enumerate(self.tokens)}
        unknown = sorted({ch for ch in text if ch not in index or ch in SPECIAL_TOKENS})
        require(
            not unknown,
            "text",
            text,
            f"has characters outside the vocabulary: {unknown}",
            f"use only {''.join(CHARACTERS)}",
        )
        return [index[ch] for ch in text]

    def encode_prompt(self, text: str) -> list[int]:
        """``[bos] + encode(text)``: the prompt the policy continues."""
        return [self.bos_id, *self.encode(text)]

    def encode_response(self, text: str) -> list[int]:
        """``encode(text) + [eos]``: a complete response."""
        return [*self.encode(text), self.eos_id]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``: stops at the first EOS, drops BOS and padding."""
        require(
            all(0 <= i < self.vocab_size for i in ids),
            "ids",
            list(ids),
            "has ids outside the vocabulary",
            f"use ids in [0, {self.vocab_size})",
        )
        chars = []
        for i in ids:
            if i == self.eos_id:
                break
            if i in (self.pad_id, self.bos_id):
                continue
            chars.append(self.tokens[i])
        return "".join(chars)
