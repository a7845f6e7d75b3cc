"""The transformer, KV-cache generation, streaming groups, log-probabilities and the warm start."""

from __future__ import annotations

import random

import pytest
import torch

from rlinf.algorithms.grpo import GrpoConfig
from rlinf.workloads.arith.backends import OptimConfig, TorchTrainBackend
from rlinf.workloads.arith.batches import sequences
from rlinf.workloads.arith.components import ActorWorker, supervised_batch
from rlinf.workloads.arith.generation import SamplingParams, generate, stream_groups
from rlinf.workloads.arith.model import DecoderTransformer, TransformerConfig, token_logprobs
from rlinf.workloads.arith.task import TaskConfig, sample_problems
from rlinf.workloads.arith.tokenizer import ArithTokenizer

TOK = ArithTokenizer()
PROMPTS = [TOK.encode_prompt(text) for text in ("12+7=", "305+41=", "9+9=", "123+456=")]


@pytest.fixture
def tiny_config() -> TransformerConfig:
    return TransformerConfig(
        vocab_size=TOK.vocab_size, d_model=32, num_layers=2, num_heads=4, d_ff=64, max_seq_len=20
    )


@pytest.fixture
def tiny_model(tiny_config) -> DecoderTransformer:
    """An untrained model with large random weights, so that its outputs vary with the input."""
    model = DecoderTransformer(tiny_config, seed=3)
    generator = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    return model


def _generate(
    model, *, group_size=1, temperature=0.0, use_cache=True, seed=0, prompts=PROMPTS, max_new_tokens=6
):
    return generate(
        model,
        prompts,
        group_size=group_size,
        params=SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature),
        eos_id=TOK.eos_id,
        pad_id=TOK.pad_id,
        generator=torch.Generator().manual_seed(seed),
        use_cache=use_cache,
    )


def test_kv_cache_generation_equals_full_recomputation(tiny_model):
    cached = _generate(tiny_model, group_size=2)
    full = _generate(tiny_model, group_size=2, use_cache=False)
    assert [g.response_ids for g in cached] == [g.response_ids for g in full]
    for a, b in zip(cached, full, strict=True):
        for lp_a, lp_b in zip(a.response_logprobs, b.response_logprobs, strict=True):
            assert torch.allclose(torch.tensor(lp_a), torch.tensor(lp_b), atol=1e-5)
    # the prompts have different lengths (left padding) and the responses are not all identical
    assert len({g.response_ids[0] for g in cached}) > 1


def test_padding_does_not_change_a_prompt_continuation(tiny_model):
    alone = _generate(tiny_model, prompts=[PROMPTS[0]])[0]
    batched = _generate(tiny_model)[0]
    assert alone.response_ids == batched.response_ids


def test_logprobs_shape_and_mask_match_sampling(tiny_model):
    groups = _generate(tiny_model, group_size=3, temperature=1.0, seed=5)
    prompts = [g.prompt_ids for g in groups for _ in g.response_ids]
    responses = [r for g in groups for r in g.response_ids]
    batch = sequences(prompts, responses, TOK.pad_id)
    logprobs = token_logprobs(tiny_model, batch.tokens)
    assert logprobs.shape == (len(responses), batch.tokens.shape[1] - 1)
    assert batch.response_mask.sum(dim=1).tolist() == [float(len(r)) for r in responses]
    for row, prompt in enumerate(prompts):
        assert batch.response_mask[row, : len(prompt) - 1].sum() == 0
    sampled = torch.tensor([lp for g in groups for r in g.response_logprobs for lp in r])
    assert torch.allclose(logprobs[batch.response_mask > 0], sampled, atol=1e-5)


def test_generation_stops_at_eos(tiny_model):
    with torch.no_grad():  # make EOS the most likely next token everywhere
        tiny_model.tok_emb.weight[TOK.eos_id] *= 20.0
        tiny_model.ln_f.weight.zero_()
        tiny_model.ln_f.bias.copy_(tiny_model.tok_emb.weight[TOK.eos_id])
    for group in _generate(tiny_model, group_size=2):
        assert group.response_ids == ((TOK.eos_id,), (TOK.eos_id,))
        assert group.ended_at_eos == (True, True)


def test_sampled_responses_end_at_eos_or_the_limit(tiny_model):
    groups = _generate(tiny_model, group_size=4, temperature=1.5, seed=1, max_new_tokens=5)
    lengths = set()
    for group in groups:
        for ids, ended in zip(group.response_ids, group.ended_at_eos, strict=True):
            assert TOK.eos_id not in ids[:-1]
            assert ended == (ids[-1] == TOK.eos_id)
            assert ended or len(ids) == 5
            lengths.add(len(ids))
    assert len(lengths) > 1  # responses of varying length


def test_streaming_yields_every_group_once(tiny_model):
    stream = stream_groups(
        tiny_model,
        PROMPTS * 3,
        group_size=3,
        params=SamplingParams(max_new_tokens=6, temperature=1.5),
        eos_id=TOK.eos_id,
        pad_id=TOK.pad_id,
        generator=torch.Generator().manual_seed(2),
    )
    order = []
    for group in stream:
        order.append(group.group_index)
        assert group.group_size == 3
        assert all(ids[-1] == TOK.eos_id or len(ids) == 6 for ids in group.response_ids)
    assert sorted(order) == list(range(len(PROMPTS) * 3))


def test_streaming_reports_groups_before_generation_ends(tiny_model):
    batch_sizes = []
    tiny_model.register_forward_hook(lambda module, args, output: batch_sizes.append(args[0].shape[0]))
    forwards_at_yield = [
        len(batch_sizes)
        for _ in stream_groups(
            tiny_model,
            PROMPTS * 3,
            group_size=2,
            params=SamplingParams(max_new_tokens=6, temperature=1.5),
            eos_id=TOK.eos_id,
            pad_id=TOK.pad_id,
            generator=torch.Generator().manual_seed(2),
        )
    ]
    assert forwards_at_yield[0] < forwards_at_yield[-1]  # the first group came out while others still ran
    assert batch_sizes == sorted(batch_sizes, reverse=True)  # finished groups leave the batch
    assert batch_sizes[0] == 24 and batch_sizes[-1] < 24


def test_warm_start_loss_decreases(tiny_config):
    config = TransformerConfig(
        vocab_size=TOK.vocab_size, d_model=32, num_layers=1, num_heads=2, d_ff=64, max_seq_len=16
    )
    actor = ActorWorker(TorchTrainBackend(config, optim=OptimConfig(lr=3e-3), seed=0), grpo=GrpoConfig())
    rng = random.Random(0)
    task = TaskConfig(min_digits=2, max_digits=2)
    losses = [
        actor.warm_start_step(
            [supervised_batch(sample_problems(32, task, rng), TOK, answer_format="reversed")]
        ).loss
        for _ in range(25)
    ]
    assert sum(losses[-3:]) / 3 < 0.75 * sum(losses[:3]) / 3
