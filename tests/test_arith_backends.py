"""Rollout/train backends: registry, torch implementations, weight sync, and the optional GPU backends."""

from __future__ import annotations

import importlib.util
import random

import attrs
import pytest
import torch

from rlinf.algorithms.grpo import GrpoConfig
from rlinf.core.errors import ConfigError
from rlinf.workloads.arith.backend_registry import rollout_backend_class, train_backend_class
from rlinf.workloads.arith.backends import (
    OptimConfig,
    RolloutBackend,
    TorchRolloutBackend,
    TorchTrainBackend,
    TrainBackend,
)
from rlinf.workloads.arith.components import (
    ActorWorker,
    InferenceWorker,
    RewardWorker,
    RolloutWorker,
    supervised_batch,
    sync_weights,
    training_batch,
)
from rlinf.workloads.arith.generation import SamplingParams
from rlinf.workloads.arith.megatron_backend import from_megatron, to_megatron
from rlinf.workloads.arith.model import TransformerConfig
from rlinf.workloads.arith.task import TaskConfig, sample_problems
from rlinf.workloads.arith.tokenizer import ArithTokenizer
from rlinf.workloads.arith.vllm_backend import to_hf_gpt2

TOK = ArithTokenizer()
CONFIG = TransformerConfig(
    vocab_size=TOK.vocab_size, d_model=32, num_layers=2, num_heads=4, d_ff=64, max_seq_len=16
)
TASK = TaskConfig(min_digits=2, max_digits=2)


def _rollout(seed: int = 1) -> TorchRolloutBackend:
    return TorchRolloutBackend(CONFIG, eos_id=TOK.eos_id, pad_id=TOK.pad_id, seed=seed)


def _scored_batch(actor: ActorWorker, rollout: TorchRolloutBackend, *, kl: bool):
    sync_weights(actor, rollout)
    problems = sample_problems(6, TASK, random.Random(0))
    worker = RolloutWorker(rollout, TOK, group_size=4, params=SamplingParams(max_new_tokens=4))
    reward = RewardWorker(TOK, answer_format="reversed", grpo=GrpoConfig())
    scored = [reward.score(group) for group in worker.stream(problems, seed=3)]
    inference = InferenceWorker(CONFIG, seed=0, with_reference=kl)
    inference.load_policy_weights(actor.weights())
    inference.load_reference_weights(actor.weights())
    return inference.score(training_batch(scored, TOK.pad_id))


def test_registry_lists_valid_names_for_unknown_backends():
    assert rollout_backend_class("torch") is TorchRolloutBackend
    assert train_backend_class("torch") is TorchTrainBackend
    with pytest.raises(ConfigError, match=r"rollout.backend='sglang'.*\['torch', 'vllm'\]"):
        rollout_backend_class("sglang")
    with pytest.raises(ConfigError, match=r"actor.backend='deepspeed'.*\['megatron', 'torch'\]"):
        train_backend_class("deepspeed")


def test_torch_backends_satisfy_the_protocols():
    assert isinstance(_rollout(), RolloutBackend)
    assert isinstance(TorchTrainBackend(CONFIG, optim=OptimConfig(), seed=0), TrainBackend)


def test_weight_sync_copies_in_place():
    actor = ActorWorker(TorchTrainBackend(CONFIG, optim=OptimConfig(), seed=0), grpo=GrpoConfig())
    rollout = _rollout(seed=1)
    before = {name: t.data_ptr() for name, t in rollout.model.state_dict().items()}
    assert not torch.equal(rollout.model.tok_emb.weight, actor.backend.model.tok_emb.weight)
    sync_weights(actor, rollout)
    for name, tensor in rollout.model.state_dict().items():
        assert torch.equal(tensor, actor.weights()[name])
        assert tensor.data_ptr() == before[name]


def test_weight_sync_rejects_foreign_weights():
    with pytest.raises(ConfigError, match="missing"):
        _rollout().load_weights({"tok_emb.weight": torch.zeros(1)})


def test_gradient_accumulation_over_micro_batches_equals_one_batch():
    actor = ActorWorker(TorchTrainBackend(CONFIG, optim=OptimConfig(), seed=0), grpo=GrpoConfig(kl_coef=0.1))
    batch = _scored_batch(actor, _rollout(), kl=True)
    batch = attrs.evolve(
        batch, advantages=torch.linspace(-1.5, 1.5, batch.num_sequences)
    )  # untrained: all rewards 0
    whole = TorchTrainBackend(CONFIG, optim=OptimConfig(lr=1e-2), seed=0)
    split = TorchTrainBackend(CONFIG, optim=OptimConfig(lr=1e-2), seed=0)
    metrics_whole = ActorWorker(whole, grpo=GrpoConfig(kl_coef=0.1)).train_step([batch])
    metrics_split = ActorWorker(split, grpo=GrpoConfig(kl_coef=0.1)).train_step(batch.micro_batches(5))
    assert metrics_split.num_micro_batches == 5 and metrics_split.num_sequences == 24
    assert metrics_split.loss == pytest.approx(metrics_whole.loss, abs=1e-5)
    assert metrics_split.grad_norm == pytest.approx(metrics_whole.grad_norm, rel=1e-4)
    # the accumulated gradients (left on the parameters after the step) are those of the whole batch
    for (name, whole_param), split_param in zip(
        whole.model.named_parameters(), split.model.parameters(), strict=True
    ):
        assert torch.allclose(whole_param.grad, split_param.grad, atol=1e-6), name
    assert not torch.equal(whole.model.tok_emb.weight, actor.backend.model.tok_emb.weight)


def test_actor_state_dict_round_trip_continues_identically():
    def make() -> TorchTrainBackend:
        return TorchTrainBackend(CONFIG, optim=OptimConfig(lr=1e-2), seed=0)

    batch = supervised_batch(sample_problems(16, TASK, random.Random(0)), TOK, answer_format="reversed")
    first = ActorWorker(make(), grpo=GrpoConfig())
    first.warm_start_step([batch])
    second = ActorWorker(make(), grpo=GrpoConfig())
    second.load_state_dict(first.state_dict())
    assert first.warm_start_step([batch]).loss == pytest.approx(
        second.warm_start_step([batch]).loss, abs=1e-7
    )
    for name, tensor in first.weights().items():
        assert torch.allclose(tensor, second.weights()[name])


def test_inference_scores_old_and_reference_logprobs():
    actor = ActorWorker(TorchTrainBackend(CONFIG, optim=OptimConfig(), seed=0), grpo=GrpoConfig())
    batch = _scored_batch(actor, _rollout(), kl=True)
    assert batch.old_logprobs.shape == batch.ref_logprobs.shape == batch.response_mask.shape
    assert torch.allclose(batch.old_logprobs, actor.backend.logprobs(batch))
    assert torch.equal(batch.old_logprobs, batch.ref_logprobs)  # same weights loaded in both
    assert attrs.evolve(batch, ref_logprobs=None).ref_logprobs is None


def test_hf_gpt2_layout():
    weights = TorchTrainBackend(CONFIG, optim=OptimConfig(), seed=0).weights()
    hf = to_hf_gpt2(weights)
    assert torch.equal(hf["transformer.wte.weight"], weights["tok_emb.weight"])
    assert torch.equal(hf["transformer.h.1.attn.c_attn.weight"], weights["blocks.1.attn.qkv.weight"].t())
    assert torch.equal(hf["transformer.h.0.mlp.c_fc.weight"], weights["blocks.0.fc.weight"].t())
    assert torch.equal(hf["transformer.h.0.mlp.c_proj.bias"], weights["blocks.0.fc_proj.bias"])
    assert torch.equal(hf["transformer.h.0.ln_2.weight"], weights["blocks.0.ln_2.weight"])
    assert len(hf) == len(weights)


def test_megatron_layout_round_trip():
    weights = TorchTrainBackend(CONFIG, optim=OptimConfig(), seed=0).weights()
    converted = to_megatron(weights, CONFIG.num_heads)
    assert "decoder.layers.1.self_attention.linear_qkv.weight" in converted
    assert "decoder.layers.0.mlp.linear_fc2.bias" in converted
    qkv = converted["decoder.layers.0.self_attention.linear_qkv.bias"]
    ours = weights["blocks.0.attn.qkv.bias"]
    head_dim = CONFIG.head_dim
    # megatron row block 1 is the key of head 0, which canonically sits right after all queries
    assert torch.equal(qkv[head_dim : 2 * head_dim], ours[CONFIG.d_model : CONFIG.d_model + head_dim])
    back = from_megatron(converted, list(weights), CONFIG.num_heads)
    assert all(torch.equal(back[name], weights[name]) for name in weights)


def _cuda_reason(package: str) -> str | None:
    if importlib.util.find_spec(package) is None:
        return f"{package} is not installed (optional GPU backend: pip install rlinf[gpu] on a CUDA machine)"
    if not torch.cuda.is_available():
        return f"{package} backend needs a CUDA GPU and none is available"
    return None


def test_vllm_backend_generates_and_updates_weights_in_place():
    reason = _cuda_reason("vllm")
    if reason:
        pytest.skip(reason)
    vllm_class = rollout_backend_class("vllm")
    backend = vllm_class(CONFIG, eos_id=TOK.eos_id, pad_id=TOK.pad_id, seed=0)
    torch_rollout = _rollout(seed=5)
    backend.load_weights(torch_rollout.model.state_dict())
    prompts = [TOK.encode_prompt("12+34="), TOK.encode_prompt("56+78=")]
    greedy = SamplingParams(max_new_tokens=4, temperature=0.0)
    expected = sorted(
        torch_rollout.stream_groups(prompts, group_size=1, params=greedy, seed=0), key=lambda g: g.group_index
    )
    got = sorted(
        backend.stream_groups(prompts, group_size=1, params=greedy, seed=0), key=lambda g: g.group_index
    )
    assert [g.response_ids for g in got] == [g.response_ids for g in expected]
    other = _rollout(seed=9)
    backend.offload()
    backend.onload()
    backend.load_weights(other.model.state_dict())
    expected = sorted(
        other.stream_groups(prompts, group_size=1, params=greedy, seed=0), key=lambda g: g.group_index
    )
    got = sorted(
        backend.stream_groups(prompts, group_size=1, params=greedy, seed=0), key=lambda g: g.group_index
    )
    assert [g.response_ids for g in got] == [g.response_ids for g in expected]


def test_megatron_backend_matches_torch_logprobs_and_trains():
    reason = _cuda_reason("megatron")
    if reason:
        pytest.skip(reason)
    megatron_class = train_backend_class("megatron")
    backend = megatron_class(CONFIG, optim=OptimConfig(lr=1e-2), seed=0)
    reference = TorchTrainBackend(CONFIG, optim=OptimConfig(lr=1e-2), seed=0)
    backend.load_weights(reference.weights())
    batch = supervised_batch(sample_problems(8, TASK, random.Random(0)), TOK, answer_format="reversed")
    assert torch.allclose(backend.logprobs(batch), reference.logprobs(batch), atol=1e-4)
    first = ActorWorker(backend, grpo=GrpoConfig()).warm_start_step([batch]).loss
    for _ in range(5):
        last = ActorWorker(backend, grpo=GrpoConfig()).warm_start_step(batch.micro_batches(4)).loss
    assert last < first
    assert set(backend.weights()) == set(reference.weights())
