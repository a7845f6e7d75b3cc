"""GRPO on Hugging Face causal LMs, piece by piece: the task and its reward, the BPE tokenizer, checkpoint
directories through from_pretrained/AutoTokenizer, KV-cache generation, streaming, weight sync, gradient
accumulation and the warm start's learning signal."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from hf_grpo_tiny import CONFIG, context, one_thread, tiny_config

from rlinf import ConfigError
from rlinf.cli import main
from rlinf.core.errors import RlinfWarning
from rlinf.workloads.hf_grpo.actor import ActorWorker
from rlinf.workloads.hf_grpo.checkpoints import (
    base_checkpoint,
    cache_lock,
    check_checkpoint,
    load_model,
    load_tokenizer,
    save_checkpoint,
)
from rlinf.workloads.hf_grpo.config import ModelSizes, RlConfig
from rlinf.workloads.hf_grpo.generation import SamplingParams, generate
from rlinf.workloads.hf_grpo.payloads import concat_rows
from rlinf.workloads.hf_grpo.rollout import RolloutWorker
from rlinf.workloads.hf_grpo.scoring import InferenceWorker, RewardWorker
from rlinf.workloads.hf_grpo.task import (
    TaskConfig,
    carry_free_sum,
    extract_answer,
    heldout_problems,
    reward,
    sample_problem,
    sample_problems,
    solution_text,
)
from rlinf.workloads.hf_grpo.workload import mean_response_tokens

pytest.importorskip("transformers", reason='needs the hf extra: pip install -e ".[hf]"')


@pytest.fixture(scope="module", autouse=True)
def single_thread() -> Iterator[None]:
    with one_thread():
        yield


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "hf_grpo_cache"


@pytest.fixture(scope="module")
def base(cache: Path) -> Path:
    config = tiny_config(cache)
    with cache_lock(cache):
        return base_checkpoint(config)


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (" Mia starts with 3.\n3+4=7.\n#### 7", 7),
        ("#### -2", -2),
        ("####12 then #### 13", 12),
        ("the answer is 7", None),
        ("#### seven", None),
        ("", None),
    ],
)
def test_answer_extraction(response: str, expected: int | None) -> None:
    assert extract_answer(response) == expected
    assert reward(7, response) == (1.0 if expected == 7 else 0.0)


def test_worked_solutions_are_right_and_lengths_have_a_tail() -> None:
    task = TaskConfig(max_steps=8)
    rng = random.Random(0)
    problems = [sample_problem(task, rng) for _ in range(400)]
    assert all(reward(p.answer, solution_text(p)) == 1.0 for p in problems)
    assert all(1 <= v <= task.max_value for p in problems for v in p.values)
    steps = np.array([len(p.steps) for p in problems])
    assert steps.min() == 1 and steps.max() == 8 and np.median(steps) <= 2  # most short, a long tail
    sloppy = [solution_text(p, random.Random(i), error_rate=1.0) for i, p in enumerate(problems)]
    assert 0.3 < np.mean([reward(p.answer, s) for p, s in zip(problems, sloppy, strict=True)]) < 0.9
    assert (carry_free_sum(37, 24), carry_free_sum(95, 8), carry_free_sum(12, 3)) == (51, 93, 15)
    assert 20 < mean_response_tokens(task, 512) < 100


def test_heldout_problems_are_fixed_and_excluded_from_training() -> None:
    task = TaskConfig()
    heldout = heldout_problems(50, task, seed=7)
    assert heldout == heldout_problems(50, task, seed=7) and len({p.question for p in heldout}) == 50
    questions = {p.question for p in heldout}
    drawn = sample_problems(2_000, task, random.Random(7), exclude=questions)
    assert not questions & {p.question for p in drawn}


def test_bad_settings_fail_clearly() -> None:
    with pytest.raises(ConfigError, match="task.max_steps"):
        TaskConfig(min_steps=3, max_steps=2)
    with pytest.raises(ConfigError, match="model.config.num_kv_heads"):
        ModelSizes(num_heads=4, num_kv_heads=3)
    with pytest.raises(ConfigError, match="model.config.architecture"):
        ModelSizes(architecture="gpt2")
    with pytest.raises(ConfigError, match="grpo.group_size"):
        RlConfig(group_size=1)


def test_tokenizer_round_trips_and_loads_with_auto_tokenizer(base: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id) == (0, 1) and len(tokenizer) <= 512
    rng = random.Random(3)
    for problem in sample_problems(20, TaskConfig(max_steps=6), rng):
        for text in (problem.prompt, solution_text(problem)):
            ids = tokenizer.encode(text)
            assert tokenizer.decode(ids) == text
    assert tokenizer.convert_ids_to_tokens(tokenizer.encode("123"))[-3:] == ["1", "2", "3"]  # digit by digit


def test_a_saved_checkpoint_round_trips_through_from_pretrained(base: Path, tmp_path: Path) -> None:
    model, tokenizer = load_model(base, torch.device("cpu")), load_tokenizer(base)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    with torch.no_grad():
        model.model.embed_tokens.weight.add_(0.01)  # not the saved weights any more
    save_checkpoint(model, tokenizer, tmp_path)
    again = load_model(tmp_path, torch.device("cpu"))
    tokens = torch.tensor([tokenizer.encode("Question: Mia has 3 apples.")])
    with torch.no_grad():
        torch.testing.assert_close(again(tokens).logits, model(tokens).logits, rtol=0, atol=0)


def test_llama_models_build_too(tmp_path: Path) -> None:
    config = tiny_config(tmp_path, **{"model.config.architecture": "llama"})
    with cache_lock(tmp_path):
        folder = base_checkpoint(config)
    assert type(load_model(folder, torch.device("cpu"))).__name__ == "LlamaForCausalLM"


def test_bad_model_paths_fail_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from transformers import Qwen2Config, ViTConfig

    with pytest.raises(ConfigError, match="does not exist"):
        check_checkpoint(str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="no config.json"):
        check_checkpoint(str(tmp_path))
    ViTConfig(num_hidden_layers=1).save_pretrained(tmp_path / "vit")  # an image model
    with pytest.raises(ConfigError, match="'vit' model, not a causal language model"):
        check_checkpoint(str(tmp_path / "vit"))
    Qwen2Config(num_hidden_layers=1).save_pretrained(tmp_path / "empty")
    with pytest.raises(ConfigError, match="holds no weights"):
        check_checkpoint(str(tmp_path / "empty"))
    args = ["train", CONFIG, "--iterations", "1", "--out", str(tmp_path / "run")]
    assert main([*args, "--set", f"model.path={tmp_path / 'vit'}", "--set", "model.config=null"]) == 2
    err = capsys.readouterr().err.strip()
    assert "model.path" in err and "not a causal language model" in err and len(err.splitlines()) == 1


def test_kv_cache_generation_equals_recomputing_and_hf_generate(base: Path) -> None:
    model, tokenizer = load_model(base, torch.device("cpu")), load_tokenizer(base)
    problems = sample_problems(3, TaskConfig(), random.Random(1))
    prompts = [tokenizer.encode(p.prompt) for p in problems]  # different lengths: left padding matters
    assert len({len(p) for p in prompts}) > 1
    greedy = SamplingParams(max_new_tokens=24, temperature=0.0)
    kwargs = {"group_size": 2, "params": greedy, "eos_id": 1, "pad_id": 0, "generator": torch.Generator()}
    cached = generate(model, prompts, **kwargs)
    assert cached == generate(model, prompts, use_cache=False, **kwargs)
    for group, prompt in zip(cached, prompts, strict=True):
        out = model.generate(
            torch.tensor([prompt]), max_new_tokens=24, do_sample=False, eos_token_id=1, pad_token_id=0
        )
        assert group.response_ids[0] == tuple(out[0, len(prompt) :].tolist())
    sampled = SamplingParams(max_new_tokens=24, temperature=1.0)
    draws = [
        generate(
            model, prompts, **{**kwargs, "params": sampled, "generator": torch.Generator().manual_seed(s)}
        )
        for s in (0, 0, 1)
    ]
    assert draws[0] == draws[1] and draws[0] != draws[2]


def _rollout(config: object, **shape: int) -> RolloutWorker:
    worker = RolloutWorker()
    worker.setup(config, context("rollout", **shape))
    return worker


def test_rollout_streams_every_group_once_in_completion_order(cache: Path) -> None:
    config = tiny_config(cache, **{"grpo.prompts_per_iteration": 8})
    worker = _rollout(config, groups=8, micro_batches=4)
    payloads = [worker.compute("generate", j, 0, [])[0] for j in range(4)]
    assert [len(p["group_index"]) for p in payloads] == [2, 2, 2, 2]
    order = np.concatenate([p["group_index"] for p in payloads]).tolist()
    assert sorted(order) == list(range(8))
    finish = np.concatenate([p["response_len"].max(axis=1) for p in payloads]).tolist()
    assert finish == sorted(finish)  # a group is done when its longest response ends
    second = _rollout(config, groups=8, micro_batches=4, rank=1, world=2)
    share = np.concatenate([second.compute("generate", j, 0, [])[0]["group_index"] for j in range(4)])
    assert sorted(share.tolist()) == [1, 3, 5, 7]  # replica 1's half of each micro-batch's two groups


def _scored(config: object) -> dict[str, np.ndarray]:
    rollout, rewarder, inference = _rollout(config), RewardWorker(), InferenceWorker()
    rewarder.setup(config, context("reward"))
    inference.setup(config, context("inference"))
    generated = [rollout.compute("generate", j, 0, [])[0] for j in range(2)]
    scored = [rewarder.compute("reward", j, 0, [p])[0] for j, p in enumerate(generated)]
    return concat_rows([inference.compute("infer", j, 0, [p])[0] for j, p in enumerate(scored)])


def test_the_warm_start_gives_a_learning_signal(cache: Path) -> None:
    config = tiny_config(cache, **{"grpo.skip_zero_advantages": False})
    payload = _scored(config)
    assert payload["rewards"].mean() > 0  # GRPO starts with nonzero reward
    assert np.abs(payload["advantages"]).sum() > 0  # and some group is not all equal
    width = payload["response_len"]
    assert payload["old_logprobs"].shape == (4, 4, config.grpo.max_new_tokens)
    assert (payload["old_logprobs"][np.arange(48)[None, None, :] >= width[..., None]] == 0).all()
    assert (payload["old_logprobs"][np.arange(48)[None, None, :] < width[..., None]] < 0).all()


def test_streamed_gradient_accumulation_equals_the_whole_batch(cache: Path) -> None:
    config = tiny_config(
        cache, **{"grpo.max_grad_norm": 0.0, "grpo.micro_batch_size": 3, "grpo.skip_zero_advantages": False}
    )
    payload = _scored(config)
    payload["advantages"] = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
    whole, streamed = ActorWorker(), ActorWorker()
    whole.setup(config, context("actor", micro_batches=1))
    streamed.setup(config, context("actor", micro_batches=2))
    whole.compute("train", 0, 0, [payload])
    for j in range(2):
        streamed.compute("train", j, 0, [{k: v[2 * j : 2 * j + 2] for k, v in payload.items()}])
    for a, b in zip(whole.backend.model.parameters(), streamed.backend.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert whole.updates == 2  # optimizer_steps_per_iteration of the example config


def test_skipping_zero_advantages_gives_the_same_update_from_fewer_rows(cache: Path) -> None:
    config = tiny_config(
        cache, **{"grpo.max_grad_norm": 0.0, "grpo.micro_batch_size": 3, "grpo.skip_zero_advantages": False}
    )
    payload = _scored(config)
    payload["advantages"] = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
    payload["advantages"][[0, 2]] = 0.0  # two groups whose rewards were all equal
    skipping = tiny_config(
        cache, **{"grpo.max_grad_norm": 0.0, "grpo.micro_batch_size": 3, "grpo.skip_zero_advantages": True}
    )
    inference = InferenceWorker()
    inference.setup(skipping, context("inference"))
    scored = inference.compute("infer", 0, 0, [{k: v for k, v in payload.items() if k != "old_logprobs"}])[0]
    assert (scored["old_logprobs"][[0, 2]] == 0).all()
    torch.testing.assert_close(
        scored["old_logprobs"][[1, 3]], payload["old_logprobs"][[1, 3]], rtol=0, atol=1e-5
    )
    full, skipped = ActorWorker(), ActorWorker()
    full.setup(config, context("actor", micro_batches=1))
    skipped.setup(skipping, context("actor", micro_batches=1))
    before = full.backend.model.lm_head.weight.detach().clone()
    rows: list[int] = []
    score = skipped.backend.response_logprobs
    skipped.backend.response_logprobs = lambda tokens, *rest: rows.append(len(tokens)) or score(tokens, *rest)  # type: ignore[method-assign]
    full.compute("train", 0, 0, [payload])
    skipped.compute("train", 0, 0, [scored])
    assert sum(rows) == 8  # the 8 responses with a nonzero advantage, not 16
    assert not torch.equal(before, full.backend.model.lm_head.weight)  # the update did something
    for a, b in zip(full.backend.model.parameters(), skipped.backend.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_skipping_zero_advantages_has_no_effect_with_a_kl_penalty(cache: Path) -> None:
    with pytest.warns(RlinfWarning, match="grpo.skip_zero_advantages has no effect when grpo.kl_coef > 0"):
        config = tiny_config(cache, **{"grpo.skip_zero_advantages": True, "grpo.kl_coef": 0.1})
    assert not config.grpo.skips_zero_advantages  # the KL term needs every response's log-probabilities
    assert tiny_config(cache, **{"grpo.skip_zero_advantages": True}).grpo.skips_zero_advantages


def test_weight_sync_changes_what_the_rollout_generates(cache: Path) -> None:
    config = tiny_config(cache, **{"grpo.temperature": 1.0})
    actor = ActorWorker()
    actor.setup(config, context("actor"))
    before = _rollout(config).compute("generate", 0, 0, [])[0]
    with torch.no_grad():
        for param in actor.backend.model.parameters():
            param.add_(torch.randn(param.shape, generator=torch.Generator().manual_seed(0)) * 0.05)
    rollout = _rollout(config)
    rollout.load_weights(actor.weights())
    for name, tensor in rollout.backend.model.state_dict().items():
        torch.testing.assert_close(tensor, actor.backend.model.state_dict()[name], rtol=0, atol=0)
    after = rollout.compute("generate", 0, 0, [])[0]
    assert not np.array_equal(before["response_ids"], after["response_ids"])
    restored = _rollout(config)
    restored.restore(rollout.checkpoint())
    assert restored.iteration == 1
    torch.testing.assert_close(
        restored.backend.model.lm_head.weight, actor.backend.model.lm_head.weight, rtol=0, atol=0
    )
