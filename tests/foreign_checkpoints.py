"""Checkpoints rlinf did not build, as a user brings them: tiny Qwen2 and Llama models made from ``transformers``
configs with random weights and saved with ``save_pretrained``, beside tokenizers trained with the ``tokenizers``
library on English text (never on the task's), with their own special tokens at their own ids.

* ``qwen2-tied-no-pad``: Qwen2, tied embeddings; a byte-level BPE (as GPT-2's and Qwen2's) learned from one
  paragraph without digits, so it spells a word problem in ~200 tokens: more than the example's
  ``max_prompt_tokens: 160``. Its one special token, EOS ``<|im_end|>``, comes after the merges; no pad token
  anywhere; the embedding has 7 rows more than the tokenizer (a padded vocabulary).
* ``llama-untied-wordpiece``: Llama, untied embeddings, no grouped-query attention; a lower-casing WordPiece
  learned from three paragraphs of prose (digits included), whose encodings start with ``<s>`` (as Llama's do):
  ``[UNK]`` 0, ``<s>`` 1, ``</s>`` 2 (EOS), ``<pad>`` 3. The example's prompts fit it (at most ~150 tokens).

``python tests/foreign_checkpoints.py DIR`` saves both under ``DIR`` (the commands of ``docs/grpo_hf.md`` that
train one and refuse the other).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

PARAGRAPH = (
    "The river wound slowly through the valley, past orchards heavy with apples and fields where farmers gathered "
    "the last of the summer wheat. In the evenings the village square filled with music, and children ran between "
    "the stalls selling bread, cheese and honey. Travellers who stopped at the old inn were told stories of the "
    "mountain pass, of storms that lasted for days, and of the shepherd who counted his flock twice every morning "
    "before he let the dogs lead the sheep up to the high meadows."
)
"""What the byte-level BPE learns its merges from: no digits, no word problems."""
PROSE = (
    "On the first Saturday of every month, the people of the valley bring what they have to the market in the old "
    "square. A farmer sells eggs by the dozen and potatoes by the bag; a baker has bread, 2 kinds of cake and more "
    "biscuits than anyone could eat. Children run between the stalls with a few coins each, trying to decide what "
    "to buy. One boy counts his money again and again: 5 coins, then 7 after his uncle gives him 2 more, then 4 "
    "after he buys a drink. How many does he have now? He is never quite sure.\n"
    "His sister would rather read. She spends her coins on second-hand books, and when she has too many she gives "
    "some away to her friends or shares them equally among her cousins. Last year she had 30 books; now she has 18, "
    "and she says that is plenty. Their grandmother keeps a notebook with every price written in pencil, because "
    "she likes to know whether things cost more or less than they did 10 years ago.\n"
    "In the afternoon the musicians arrive, the square fills with dancing, and the traders pack what is left into "
    "their carts. Everyone goes home tired, a little poorer, and happy, counting the hours until the next market "
    "day: 4 weeks, 28 days, or 672 hours, depending on whom you ask."
)
"""What the WordPiece learns from: everyday English prose, not the task's text."""


def byte_level_bpe(vocab_size: int) -> Any:
    """A byte-level BPE trained on :data:`PARAGRAPH`, wrapped for ``transformers``, with no special tokens yet."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet, show_progress=False)
    bpe.train_from_iterator([PARAGRAPH], trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe)


def wordpiece_with_bos(vocab_size: int) -> Any:
    """A lower-casing WordPiece trained on :data:`PROSE` whose encodings start with ``<s>``; special tokens
    ``[UNK]`` 0, ``<s>`` 1, ``</s>`` 2 (EOS), ``<pad>`` 3."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["[UNK]", "<s>", "</s>", "<pad>"]
    wordpiece = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wordpiece.normalizer = normalizers.BertNormalizer(lowercase=True)
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wordpiece.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    wordpiece.train_from_iterator([PROSE], trainer=trainer)
    wordpiece.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(
        tokenizer_object=wordpiece, unk_token="[UNK]", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


def save(directory: Path, config: Any, tokenizer: Any) -> Path:
    """A random-weight model of ``config`` (seed 0) and ``tokenizer``, saved as ``transformers`` saves them."""
    from transformers import AutoModelForCausalLM

    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def qwen2_tied_no_pad(directory: Path) -> Path:
    """The ``qwen2-tied-no-pad`` checkpoint (module docstring) saved in ``directory``."""
    from transformers import Qwen2Config

    tokenizer = byte_level_bpe(400)
    tokenizer.add_special_tokens({"eos_token": "<|im_end|>"})
    config = Qwen2Config(
        vocab_size=len(tokenizer) + 7, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=None,
    )  # fmt: skip
    return save(directory, config, tokenizer)


def llama_untied_wordpiece(directory: Path) -> Path:
    """The ``llama-untied-wordpiece`` checkpoint (module docstring) saved in ``directory``."""
    from transformers import LlamaConfig

    tokenizer = wordpiece_with_bos(600)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, pad_token_id=3,
    )  # fmt: skip
    return save(directory, config, tokenizer)


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "foreign_checkpoints")
    for build in (qwen2_tied_no_pad, llama_untied_wordpiece):
        print(build(root / build.__name__.replace("_", "-")))
