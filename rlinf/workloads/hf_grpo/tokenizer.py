"""A real tokenizer for a model built from a config: byte-level BPE trained with the ``tokenizers`` library on the
task's own text, wrapped as a ``transformers`` fast tokenizer (saved with the model by ``save_pretrained`` and
loaded back with ``AutoTokenizer``).

Digits are split one per token before the merges (as Qwen2's and Llama 3's tokenizers do), so numbers are spelled
digit by digit and the model can learn column arithmetic; words merge into whole-word tokens. Training is
deterministic for a given corpus (problems drawn from a fixed seed).
"""

from __future__ import annotations

import random

from rlinf.workloads.hf_grpo.task import TaskConfig

PAD, EOS = "<|pad|>", "<|endoftext|>"
CORPUS_PROBLEMS = 2_000
"""Problems (question and worked solution) the BPE merges are learned from."""


def task_corpus(task: TaskConfig, seed: int, count: int = CORPUS_PROBLEMS) -> list[str]:
    """Prompts and worked solutions of ``count`` problems drawn from ``seed``."""
    rng = random.Random(seed)
    texts: list[str] = []
    for _ in range(count):
        problem = task.sample(rng)
        texts.extend((problem.prompt, task.solution(problem)))
    return texts


def train_bpe(task: TaskConfig, *, vocab_size: int, seed: int) -> object:
    """A ``PreTrainedTokenizerFast`` with at most ``vocab_size`` tokens (``<|pad|>`` = 0, ``<|endoftext|>`` = 1)
    trained on :func:`task_corpus`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(task_corpus(task, seed), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token=PAD, eos_token=EOS)
