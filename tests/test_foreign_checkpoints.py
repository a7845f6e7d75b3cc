"""Checkpoints rlinf did not build (issue 34, item 4): the tiny Qwen2 and Llama checkpoints of
``foreign_checkpoints.py`` (random weights saved with ``save_pretrained``, tokenizers trained with the
``tokenizers`` library on English text, their own special tokens at their own ids, one without a pad token, one
that adds a BOS, tied and untied embeddings).

``rlinf train examples/grpo_hf.yaml --set model.path=DIR`` trains one iteration from the checkpoint's own weights
(no warm start unless asked for); prompts that do not fit ``grpo.max_prompt_tokens`` fail in one line on the
driver, before any worker starts; EOS and pad come from the checkpoint.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import foreign_checkpoints
import pytest
import torch
from foreign_checkpoints import byte_level_bpe, save
from hf_grpo_tiny import one_thread

from rlinf.app.checkpoint import load_latest
from rlinf.app.jobs import load_job_config
from rlinf.cli import main
from rlinf.core.errors import ConfigError, RlinfWarning
from rlinf.workloads.hf_grpo.checkpoints import load_model, load_tokenizer
from rlinf.workloads.hf_grpo.generation import SamplingParams, stream_groups
from rlinf.workloads.hf_grpo.preflight import run_prompts
from rlinf.workloads.hf_grpo.warm_start import warm_start_checkpoint

pytest.importorskip("transformers", reason='needs the hf extra: pip install -e ".[hf]"')

CONFIG = "examples/grpo_hf.yaml"
SMALL_RUN = {
    "grpo.prompts_per_iteration": 2,
    "grpo.group_size": 2,
    "grpo.max_new_tokens": 8,
    "eval.num_problems": 4,
    "execution.granularity": 1,
    "execution.checkpoint_every": 1,
}
"""What the CLI runs change in the example to take seconds (the limits stay the example's)."""
FITS = {"qwen2_tied_no_pad": {"grpo.max_prompt_tokens": 256}, "llama_untied_wordpiece": {}}
"""What each checkpoint needs beyond :data:`SMALL_RUN`: the byte-level BPE spells the prompts in ~200 tokens (the
fix the refusal names), the WordPiece fits the example's 160."""


@pytest.fixture(scope="module", autouse=True)
def single_thread() -> Iterator[None]:
    with one_thread():
        yield


@pytest.fixture(scope="module")
def qwen2_tied_no_pad(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return foreign_checkpoints.qwen2_tied_no_pad(tmp_path_factory.mktemp("qwen2-tied-no-pad"))


@pytest.fixture(scope="module")
def llama_untied_wordpiece(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return foreign_checkpoints.llama_untied_wordpiece(tmp_path_factory.mktemp("llama-untied-wordpiece"))


def sets(values: dict[str, Any]) -> list[str]:
    return [item for key, value in values.items() for item in ("--set", f"{key}={value}")]


def grpo_lr_sum(config: Any, steps: int) -> float:
    """The sum of the GRPO learning rates of the first ``steps`` AdamW steps (linear warm-up): no weight moves
    further in those steps (an Adam step moves a weight by at most about its learning rate)."""
    rl = config.grpo
    return sum(rl.lr * min(1.0, (k + 1) / rl.warmup_steps) for k in range(steps))


@pytest.mark.parametrize("name", ["qwen2_tied_no_pad", "llama_untied_wordpiece"])
def test_a_foreign_checkpoint_trains_one_iteration_from_its_own_weights(
    name: str, request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``rlinf train examples/grpo_hf.yaml --set model.path=DIR --iterations 1``: no warm start (nothing in the
    cache, no warm-start accuracy) and the actor's weights after the iteration are the checkpoint's moved by at
    most GRPO's own two steps (a warm start of the example's 600 steps at lr 0.003 would move them by far more)."""
    from safetensors.torch import load_file

    checkpoint: Path = request.getfixturevalue(name)
    run, cache = tmp_path / "run", tmp_path / "cache"
    args = ["train", CONFIG, "--set", f"model.path={checkpoint}", "--iterations", "1", "--devices", "1"]
    extra = {**SMALL_RUN, **FITS[name], "cache_dir": cache}
    assert main([*args, *sets(extra), "--out", str(run), "--no-progress"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    [metrics] = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert metrics["iteration"] == 1 and metrics["samples"] == 4 and metrics["optimizer_steps"] == 2
    assert "warm_start_accuracy" not in metrics and "heldout_accuracy" in metrics
    assert not any(cache.glob("warm-*")) and not any(cache.glob("base-*"))  # nothing trained or built
    saved = load_file(str(checkpoint / "model.safetensors"))
    trained = load_latest(run / "checkpoints").state["workers"]["actor"][0]["model"]
    assert saved.keys() <= trained.keys()
    moved = max(float((trained[key].float() - saved[key].float()).abs().max()) for key in saved)
    _, config = load_job_config(CONFIG, [f"model.path={checkpoint}"])
    assert moved <= 1.01 * grpo_lr_sum(config, steps=2) + 1e-6


def test_prompts_that_do_not_fit_fail_in_one_line_before_any_worker_starts(
    qwen2_tied_no_pad: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The user's case: the example's ``max_prompt_tokens: 160`` against a tokenizer that spells the word problems
    in ~200 tokens. One line naming the field, the longest prompt (as the rollout would tokenize it) and the fix;
    exit 2; no run directory and no cache (the workers create both before they load anything)."""
    run, cache = tmp_path / "run", tmp_path / "cache"
    args = ["train", CONFIG, "--set", f"model.path={qwen2_tied_no_pad}", "--iterations", "1"]
    assert main([*args, "--set", f"cache_dir={cache}", "--out", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    [line] = [text for text in err.splitlines() if text.startswith("rlinf: error:")]
    match = re.fullmatch(
        r"rlinf: error: grpo\.max_prompt_tokens=160: is shorter than the longest prompt \((\d+) tokens with "
        r"(.+)'s tokenizer\); fix: raise grpo\.max_prompt_tokens to at least (\d+)",
        line,
    )
    assert match is not None, line
    _, config = load_job_config(CONFIG, [f"model.path={qwen2_tied_no_pad}", "execution.iterations=1"])
    tokenizer = load_tokenizer(qwen2_tied_no_pad)
    training, _ = run_prompts(config)
    longest = max(len(tokenizer.encode(prompt)) for prompt in training)
    assert int(match[1]) == int(match[3]) == longest > 160 and match[2] == str(qwen2_tied_no_pad)
    assert "Traceback" not in err and not run.exists() and not cache.exists()


def checked(checkpoint: Path, *overrides: str) -> None:
    """The driver's check of the example on ``checkpoint`` (what ``rlinf train`` runs before any worker)."""
    job, config = load_job_config(CONFIG, [f"model.path={checkpoint}", "execution.iterations=3", *overrides])
    job.check(config)


def test_the_limit_is_the_longest_prompt_of_the_run_exactly(llama_untied_wordpiece: Path) -> None:
    """Every prompt of the run's iterations counts (``grpo.num_iterations``, after ``--iterations``), tokenized with
    the checkpoint's BOS; the longest one fits exactly and one token less does not. The positions bound the
    responses: the longest prompt plus ``max_new_tokens`` must fit the checkpoint's 512."""
    _, config = load_job_config(CONFIG, [f"model.path={llama_untied_wordpiece}", "execution.iterations=3"])
    tokenizer = load_tokenizer(llama_untied_wordpiece)
    training, heldout = run_prompts(config)
    assert len(training) > 3 * 32 // 2 and len(heldout) == 2 * config.eval.num_problems  # validation, test
    assert all(tokenizer.encode(prompt)[0] == tokenizer.bos_token_id for prompt in training[:5])
    longest = max(len(tokenizer.encode(prompt)) for prompt in training)
    checked(llama_untied_wordpiece, f"grpo.max_prompt_tokens={longest}", "grpo.max_new_tokens=8")
    with pytest.raises(ConfigError, match=rf"grpo.max_prompt_tokens={longest - 1}: .*at least {longest}$"):
        checked(llama_untied_wordpiece, f"grpo.max_prompt_tokens={longest - 1}")
    everything = max(len(ids) for ids in tokenizer([*training, *heldout])["input_ids"])
    with pytest.raises(ConfigError, match=rf"grpo.max_new_tokens=500: .*at most {512 - everything}$"):
        checked(llama_untied_wordpiece, "grpo.max_prompt_tokens=400", "grpo.max_new_tokens=500")


def test_a_tokenizer_larger_than_the_models_embedding_is_refused(
    qwen2_tied_no_pad: Path, tmp_path: Path
) -> None:
    """A checkpoint whose config has fewer embedding rows than its tokenizer uses: one line naming model.path,
    not an index error in a worker."""
    from transformers import AutoConfig

    folder = tmp_path / "small-vocab"
    tokenizer = load_tokenizer(qwen2_tied_no_pad)
    config = AutoConfig.from_pretrained(qwen2_tied_no_pad, local_files_only=True)
    config.vocab_size = 300  # the BPE's merges go beyond, and its EOS comes after them
    save(folder, config, tokenizer)
    eos = tokenizer.eos_token_id
    with pytest.raises(ConfigError, match=rf"model.path=.*EOS token id {eos} .*beyond the model's 300-token"):
        checked(folder, "grpo.max_prompt_tokens=400")


def test_the_warm_start_is_off_for_a_checkpoint_and_on_for_a_built_model_unless_set(
    qwen2_tied_no_pad: Path, tmp_path: Path
) -> None:
    """The default follows the model (a built model is trained first; a user's checkpoint is not); an explicit
    ``warm_start.enabled`` wins both ways, and with it a checkpoint's weights are trained (a new cache entry that
    differs from the checkpoint); ``enabled`` with ``num_steps: 0`` warns that it does nothing."""
    path = f"model.path={qwen2_tied_no_pad}"
    cache = f"cache_dir={tmp_path}"

    def config(*overrides: str) -> Any:
        return load_job_config(CONFIG, [cache, *overrides])[1]

    assert config().trains_warm_start and not config("warm_start.enabled=false").trains_warm_start
    assert not config(path).trains_warm_start and config(path, "warm_start.enabled=true").trains_warm_start
    with pytest.warns(RlinfWarning, match="warm_start.enabled has no effect when warm_start.num_steps is 0"):
        assert not config(path, "warm_start.enabled=true", "warm_start.num_steps=0").trains_warm_start

    cpu = torch.device("cpu")
    assert warm_start_checkpoint(config(path), cpu).directory == qwen2_tied_no_pad
    small = (
        "eval.num_problems=2",
        "grpo.max_new_tokens=4",
        "warm_start.num_steps=2",
        "warm_start.batch_size=2",
    )
    warm = warm_start_checkpoint(config(path, "warm_start.enabled=true", *small), cpu)
    assert warm.directory.parent == tmp_path and warm.directory.name.startswith("warm-")
    assert warm.accuracies is not None and set(warm.accuracies) == {"validation", "test"}
    before, after = load_model(qwen2_tied_no_pad, cpu), load_model(warm.directory, cpu)
    assert not torch.equal(before.model.embed_tokens.weight, after.model.embed_tokens.weight)


def tokenizer_only(folder: Path, *, eos_in_tokenizer: bool, files: dict[str, Any]) -> Path:
    """A byte-level BPE with the special token ``<|end|>`` (and EOS only when ``eos_in_tokenizer``) saved in
    ``folder`` beside the JSON ``files`` given (``config.json``, ``generation_config.json``)."""
    tokenizer = byte_level_bpe(300)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|end|>", "<|stop|>"]})
    if eos_in_tokenizer:
        tokenizer.eos_token = "<|stop|>"
    tokenizer.save_pretrained(folder)
    for name, data in files.items():
        (folder / name).write_text(json.dumps(data))
    return folder


def test_eos_comes_from_the_tokenizer_then_the_generation_config_then_the_model_config(
    tmp_path: Path,
) -> None:
    """No token id of rlinf's own tokenizer: EOS is whatever the checkpoint names, and pad is EOS when it names no
    pad token."""
    qwen = {"model_type": "qwen2", "eos_token_id": 301}
    cases = [
        (True, {"config.json": qwen, "generation_config.json": {"eos_token_id": [300, 301]}}, "<|stop|>"),
        (False, {"config.json": qwen, "generation_config.json": {"eos_token_id": [300, 301]}}, "<|end|>"),
        (False, {"config.json": qwen}, "<|stop|>"),
    ]
    for index, (in_tokenizer, files, eos) in enumerate(cases):
        folder = tokenizer_only(tmp_path / str(index), eos_in_tokenizer=in_tokenizer, files=files)
        tokenizer = load_tokenizer(folder)
        assert (tokenizer.eos_token, tokenizer.pad_token) == (eos, eos), index
        assert tokenizer.pad_token_id == tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids(eos)
    nameless = tokenizer_only(
        tmp_path / "none", eos_in_tokenizer=False, files={"config.json": {"model_type": "qwen2"}}
    )
    with pytest.raises(ConfigError, match=r"names no EOS token .*fix: set eos_token"):
        load_tokenizer(nameless)
    beyond = tokenizer_only(
        tmp_path / "beyond", eos_in_tokenizer=False, files={"config.json": {**qwen, "eos_token_id": 9999}}
    )
    with pytest.raises(
        ConfigError, match=r"names EOS token id 9999, which its tokenizer of \d+ tokens lacks"
    ):
        load_tokenizer(beyond)


def test_padding_with_eos_changes_no_response(qwen2_tied_no_pad: Path) -> None:
    """The checkpoint without a pad token pads with its EOS: prompts of different lengths sampled greedily in one
    batch (left-padded with EOS) get the responses they get alone, because attention masks come from lengths."""
    tokenizer = load_tokenizer(qwen2_tied_no_pad)
    model = load_model(qwen2_tied_no_pad, torch.device("cpu"))
    # Not the "<|endoftext|>" that transformers' Qwen2Tokenizer class names and appends by default:
    assert tokenizer.pad_token == tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token_id == tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    prompts = [
        tokenizer.encode(text) for text in ("The river", "Travellers who stopped at the old inn were told")
    ]
    params = SamplingParams(max_new_tokens=12, temperature=0.0)

    def responses(batch: list[list[int]]) -> list[tuple[int, ...]]:
        groups = stream_groups(
            model, batch, group_size=1, params=params, eos_id=tokenizer.eos_token_id,
            pad_id=tokenizer.pad_token_id, generator=torch.Generator(),
        )  # fmt: skip
        return [g.response_ids[0] for g in sorted(groups, key=lambda g: g.group_index)]

    together = responses(prompts)
    assert together == responses(prompts[:1]) + responses(prompts[1:])
    assert len(set(together)) == 2
