"""The GRPO workload piece by piece: the BPE tokenizer, checkpoint directories through from_pretrained and
AutoTokenizer, KV-cache generation and streaming, the workers (streaming in completion order, the warm start's
learning signal, gradient accumulation, skipping zero advantages, the reference policy, weight sync) and the
actor's check of its share. The workers run the tests' tiny addition setup (``hf_grpo_tiny.py``)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from hf_grpo_tiny import CONFIG, GROUP_SIZE, PROMPTS, context, one_thread, tiny_config

from rlinf.api import ConfigError, concat_payloads
from rlinf.app.jobs import load_job_config
from rlinf.cli import main
from rlinf.core.errors import RlinfWarning
from rlinf.workloads.hf_grpo.actor import ActorWorker
from rlinf.workloads.hf_grpo.addition import AdditionTask
from rlinf.workloads.hf_grpo.checkpoints import (
    base_checkpoint,
    cache_lock,
    check_checkpoint,
    load_model,
    load_tokenizer,
    save_checkpoint,
)
from rlinf.workloads.hf_grpo.generation import SamplingParams, in_prompt_order, stream_groups
from rlinf.workloads.hf_grpo.rollout import RolloutWorker
from rlinf.workloads.hf_grpo.scoring import InferenceWorker, RewardWorker
from rlinf.workloads.hf_grpo.task import sample_problems
from rlinf.workloads.hf_grpo.warm_start import warm_start_checkpoint
from rlinf.workloads.hf_grpo.word_problems import WordProblemsTask

pytest.importorskip("transformers", reason='needs the hf extra: pip install -e ".[hf]"')


@pytest.fixture(scope="module", autouse=True)
def single_thread() -> Iterator[None]:
    with one_thread():
        yield


@pytest.fixture(scope="module")
def base(grpo_cache: Path) -> Path:
    """The tiny addition model as built, before its warm start."""
    with cache_lock(grpo_cache):
        return base_checkpoint(tiny_config(grpo_cache))


def test_the_bpe_round_trips_and_loads_with_auto_tokenizer(base: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    _, words = load_job_config("examples/grpo_hf.yaml", [f"cache_dir={tmp_path}"])
    with cache_lock(tmp_path):
        folder = base_checkpoint(words)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id) == (0, 1) and 300 < len(tokenizer) <= 512
    task = WordProblemsTask()
    for problem in sample_problems(20, task, random.Random(3)):
        for text in (problem.prompt, task.solution(problem)):
            assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.convert_ids_to_tokens(tokenizer.encode("123"))[-3:] == ["1", "2", "3"]  # digit by digit
    assert len(tokenizer.tokenize(" starts with")) == 2  # words merge
    sums = load_tokenizer(base)  # the addition task's: bytes and the special tokens, nothing to merge
    assert len(sums) == 258 and sums.convert_ids_to_tokens(sums.encode("042+317=")) == list("042+317=")


def test_a_saved_checkpoint_round_trips_through_from_pretrained(base: Path, tmp_path: Path) -> None:
    model, tokenizer = load_model(base, torch.device("cpu")), load_tokenizer(base)
    assert type(model).__name__ == "Qwen2ForCausalLM" and model.get_input_embeddings().num_embeddings == 300
    with torch.no_grad():
        model.model.embed_tokens.weight.add_(0.01)  # not the saved weights any more
    save_checkpoint(model, tokenizer, tmp_path)
    again = load_model(tmp_path, torch.device("cpu"))
    tokens = torch.tensor([tokenizer.encode("042+317=953")])
    with torch.no_grad():
        torch.testing.assert_close(again(tokens).logits, model(tokens).logits, rtol=0, atol=0)


def test_llama_models_build_too(tmp_path: Path) -> None:
    llama = "{architecture: llama, vocab_size: 300, max_position_embeddings: 64}"
    config = tiny_config(tmp_path, **{"model.config": llama})
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


def _prompts(base: Path) -> list[list[int]]:
    """Additions of different lengths (no zero padding): left padding matters."""
    tokenizer = load_tokenizer(base)
    problems = sample_problems(4, AdditionTask(min_digits=1, max_digits=3, zero_pad=False), random.Random(1))
    prompts = [tokenizer.encode(p.prompt) for p in problems]
    assert len({len(p) for p in prompts}) > 1
    return prompts


def test_kv_cache_generation_equals_recomputing_and_hf_generate(base: Path) -> None:
    model, prompts = load_model(base, torch.device("cpu")), _prompts(base)
    greedy = SamplingParams(max_new_tokens=24, temperature=0.0)
    kwargs = {"group_size": 2, "params": greedy, "eos_id": 1, "pad_id": 0, "generator": torch.Generator()}
    cached = in_prompt_order(stream_groups(model, prompts, **kwargs))
    assert cached == in_prompt_order(stream_groups(model, prompts, use_cache=False, **kwargs))
    for group, prompt in zip(cached, prompts, strict=True):
        out = model.generate(
            torch.tensor([prompt]), max_new_tokens=24, do_sample=False, eos_token_id=1, pad_token_id=0
        )
        assert group.response_ids[0] == tuple(out[0, len(prompt) :].tolist())  # alone: no padding
    sampled = SamplingParams(max_new_tokens=24, temperature=1.0)
    draws = [
        in_prompt_order(
            stream_groups(
                model, prompts, **{**kwargs, "params": sampled, "generator": torch.Generator().manual_seed(s)}
            )
        )
        for s in (0, 0, 1)
    ]
    assert draws[0] == draws[1] and draws[0] != draws[2]


def test_finished_groups_leave_the_batch_and_stream_out_before_the_last(base: Path, grpo_cache: Path) -> None:
    """A group is yielded as soon as its responses ended, and its rows leave the batch (and the KV cache): the
    forward passes shrink, and the first group comes out while others are still generating."""
    warm = warm_start_checkpoint(tiny_config(grpo_cache), torch.device("cpu"))
    model = load_model(warm.directory, torch.device("cpu"))
    batch_sizes: list[int] = []
    model.register_forward_hook(
        lambda module, args, kwargs, out: batch_sizes.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    prompts = _prompts(base) * 3
    yields, order = [], []
    for group in stream_groups(
        model,
        prompts,
        group_size=2,
        params=SamplingParams(max_new_tokens=12, temperature=2.0),  # hot: responses of many lengths
        eos_id=1,
        pad_id=0,
        generator=torch.Generator().manual_seed(2),
    ):
        yields.append(len(batch_sizes))
        order.append(group.group_index)
        assert all(ids[-1] == 1 or len(ids) == 12 for ids in group.response_ids)
    assert sorted(order) == list(range(len(prompts)))  # every group once
    assert yields[0] < yields[-1] and batch_sizes == sorted(batch_sizes, reverse=True)
    assert batch_sizes[0] == 2 * len(prompts) > batch_sizes[-1]


def _rollout(config: object, **shape: int) -> RolloutWorker:
    worker = RolloutWorker()
    worker.setup(config, context("rollout", **shape))
    return worker


def test_the_rollout_streams_every_group_once_in_completion_order(grpo_cache: Path) -> None:
    config = tiny_config(grpo_cache)  # its responses end after 2 to 4 tokens
    worker = _rollout(config, micro_batches=4)
    payloads = [worker.compute("generate", j, 0, [])[0] for j in range(4)]
    assert [len(p["group_index"]) for p in payloads] == [2, 2, 2, 2]
    order = np.concatenate([p["group_index"] for p in payloads]).tolist()
    assert sorted(order) == list(range(PROMPTS))
    finish = np.concatenate([p["response_len"].max(axis=1) for p in payloads]).tolist()
    assert (
        finish == sorted(finish) and finish[0] < finish[-1]
    )  # a group is done when its longest response ends
    second = _rollout(config, micro_batches=4, rank=1, world=2)
    share = np.concatenate([second.compute("generate", j, 0, [])[0]["group_index"] for j in range(4)])
    assert sorted(share.tolist()) == [1, 3, 5, 7]  # replica 1's half of each micro-batch's two groups


def _scored(config: object) -> dict[str, np.ndarray]:
    rollout, rewarder, inference = _rollout(config), RewardWorker(), InferenceWorker()
    rewarder.setup(config, context("reward"))
    inference.setup(config, context("inference"))
    generated = [rollout.compute("generate", j, 0, [])[0] for j in range(2)]
    scored = [rewarder.compute("reward", j, 0, [p])[0] for j, p in enumerate(generated)]
    return concat_payloads([inference.compute("infer", j, 0, [p])[0] for j, p in enumerate(scored)])


def test_the_warm_start_gives_a_learning_signal(grpo_cache: Path) -> None:
    config = tiny_config(grpo_cache)
    payload = _scored(config)
    assert payload["rewards"].mean() > 0  # GRPO starts with nonzero reward
    assert np.abs(payload["advantages"]).sum() > 0  # and some group is not all equal
    width = payload["response_len"]
    columns = np.arange(config.grpo.max_new_tokens)[None, None, :]
    assert payload["old_logprobs"].shape == (PROMPTS, GROUP_SIZE, config.grpo.max_new_tokens)
    assert (payload["old_logprobs"][columns >= width[..., None]] == 0).all()
    assert (payload["old_logprobs"][columns < width[..., None]] < 0).all()
    # The reference policy (kl_coef > 0 in the example) is the warm start, as the old policy is before any sync.
    np.testing.assert_array_equal(payload["ref_logprobs"], payload["old_logprobs"])


def _signal(payload: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The payload with advantages of both signs in every group (the tiny warm start may tie a group's rewards)."""
    advantages = np.linspace(-1, 1, PROMPTS * GROUP_SIZE, dtype=np.float32).reshape(PROMPTS, GROUP_SIZE)
    return {**payload, "advantages": advantages}


def test_streamed_gradient_accumulation_equals_the_whole_batch(grpo_cache: Path) -> None:
    config = tiny_config(grpo_cache, **{"grpo.max_grad_norm": 0.0, "grpo.micro_batch_size": 3})
    payload = _signal(_scored(config))
    whole, streamed = ActorWorker(), ActorWorker()
    whole.setup(config, context("actor", micro_batches=1))
    streamed.setup(config, context("actor", micro_batches=4))
    before = whole.backend.model.lm_head.weight.detach().clone()
    whole.compute("train", 0, 0, [payload])
    for j in range(4):  # 4 micro-batches of 2 groups, each cut into accumulation chunks of 3 sequences
        streamed.compute("train", j, 0, [{k: v[2 * j : 2 * j + 2] for k, v in payload.items()}])
    assert not torch.equal(before, whole.backend.model.lm_head.weight)  # the update did something
    for a, b in zip(whole.backend.model.parameters(), streamed.backend.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert whole.updates == streamed.updates == 2  # optimizer_steps_per_iteration of the example config


def test_the_actor_fails_loudly_on_more_or_fewer_sequences_than_its_share(grpo_cache: Path) -> None:
    """What a plan that fed a micro-batch twice delivered (rejected by ``check_plan``, tests/test_grpo_routing.py)
    would end in an ``IndexError`` mid-iteration or a half mini-batch carried into the next iteration; the actor
    names the counts instead."""
    config = tiny_config(grpo_cache)
    payload = _signal(_scored(config))  # 8 groups of 4: the actor's 32 sequences of one iteration
    actor = ActorWorker()
    actor.setup(config, context("actor"))
    with pytest.raises(
        AssertionError, match="received 64 sequences in micro-batch 0 after 0: more than its 32"
    ):
        actor.compute("train", 0, 0, [payload, payload])
    actor.compute("train", 0, 0, [{key: value[:4] for key, value in payload.items()}])
    with pytest.raises(AssertionError, match="starts an iteration with 16 of the last one's 32 sequences"):
        actor.compute("train", 0, 0, [payload])


def test_skipping_zero_advantages_gives_the_same_update_from_fewer_rows(grpo_cache: Path) -> None:
    settings = {"grpo.max_grad_norm": 0.0, "grpo.micro_batch_size": 3, "grpo.kl_coef": 0.0}
    config = tiny_config(grpo_cache, **settings)
    skipping = tiny_config(grpo_cache, **settings, **{"grpo.skip_zero_advantages": True})
    payload = _signal(_scored(config))
    payload["advantages"][::2] = 0.0  # four groups whose rewards were all equal
    inference = InferenceWorker()
    inference.setup(skipping, context("inference"))
    scored = inference.compute("infer", 0, 0, [{k: v for k, v in payload.items() if k != "old_logprobs"}])[0]
    assert (scored["old_logprobs"][::2] == 0).all()
    torch.testing.assert_close(scored["old_logprobs"][1::2], payload["old_logprobs"][1::2], rtol=0, atol=1e-5)
    full, skipped = ActorWorker(), ActorWorker()
    full.setup(config, context("actor", micro_batches=1))
    skipped.setup(skipping, context("actor", micro_batches=1))
    before = full.backend.model.lm_head.weight.detach().clone()
    rows: list[int] = []
    score = skipped.backend.response_logprobs
    skipped.backend.response_logprobs = lambda tokens, *rest: rows.append(len(tokens)) or score(tokens, *rest)  # type: ignore[method-assign]
    full.compute("train", 0, 0, [payload])
    skipped.compute("train", 0, 0, [scored])
    assert sum(rows) == 16  # the 16 responses with a nonzero advantage, not 32
    assert not torch.equal(before, full.backend.model.lm_head.weight)  # the update did something
    for a, b in zip(full.backend.model.parameters(), skipped.backend.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_skipping_zero_advantages_has_no_effect_with_a_kl_penalty(grpo_cache: Path) -> None:
    with pytest.warns(RlinfWarning, match="grpo.skip_zero_advantages has no effect when grpo.kl_coef > 0"):
        config = tiny_config(grpo_cache, **{"grpo.skip_zero_advantages": True, "grpo.kl_coef": 0.1})
    assert not config.grpo.skips_zero_advantages  # the KL term needs every response's log-probabilities
    assert tiny_config(
        grpo_cache, **{"grpo.skip_zero_advantages": True, "grpo.kl_coef": 0.0}
    ).grpo.skips_zero_advantages


def test_weight_sync_changes_the_old_policy_and_what_the_rollout_generates(grpo_cache: Path) -> None:
    config = tiny_config(grpo_cache)
    actor, inference = ActorWorker(), InferenceWorker()
    actor.setup(config, context("actor"))
    inference.setup(config, context("inference"))
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
    scored = {
        **after,
        "rewards": np.zeros((2, GROUP_SIZE), np.float32),
        "advantages": np.zeros((2, GROUP_SIZE), np.float32),
    }
    warm = inference.compute("infer", 0, 0, [scored])[0]
    inference.load_weights(
        actor.weights()
    )  # the old policy follows the actor; the reference stays the warm start
    synced = inference.compute("infer", 0, 0, [scored])[0]
    np.testing.assert_array_equal(synced["ref_logprobs"], warm["ref_logprobs"])
    assert not np.array_equal(synced["old_logprobs"], warm["old_logprobs"])
    restored = _rollout(config)
    restored.restore(rollout.checkpoint())
    assert restored.iteration == 1
    torch.testing.assert_close(
        restored.backend.model.lm_head.weight, actor.backend.model.lm_head.weight, rtol=0, atol=0
    )
