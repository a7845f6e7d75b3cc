"""Backends of the HF GRPO workload: the Hugging Face <-> megatron-core weight mapping (exact round trip, fused
QKV and SwiGLU against the Hugging Face modules, a whole forward pass in Megatron's layout), the backend choice
(one line and exit 2 without the package or a GPU), and the optional GPU backends (skipped with a reason here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import transformers

from rlinf.api import ConfigError
from rlinf.cli import main
from rlinf.workloads.hf_grpo.backend_registry import policy_backend, rollout_backend
from rlinf.workloads.hf_grpo.backends import (
    HfPolicyBackend,
    HfRolloutBackend,
    PolicyBackend,
    RolloutBackend,
    check_backends,
    package_available,
)
from rlinf.workloads.hf_grpo.config import BackendConfig
from rlinf.workloads.hf_grpo.generation import SamplingParams
from rlinf.workloads.hf_grpo.megatron_layout import (
    GptLayout,
    from_megatron,
    fuse_qkv,
    layout_of,
    split_qkv,
    to_megatron,
)

CONFIG = "examples/grpo_hf.yaml"
CPU = torch.device("cpu")
SHAPES = [  # (architecture, num_heads, num_kv_heads, tied embeddings)
    ("qwen2", 8, 2, False),
    ("qwen2", 4, 4, True),
    ("llama", 8, 2, True),
    ("llama", 6, 3, False),
]


def tiny_model(
    architecture: str, num_heads: int, num_kv_heads: int, tied: bool, vocab_size: int = 97, **extra: Any
) -> Any:
    """A 2-layer model built from its config, with random (not zero) weights and biases everywhere."""
    cls = transformers.Qwen2Config if architecture == "qwen2" else transformers.LlamaConfig
    config = cls(
        vocab_size=vocab_size,
        hidden_size=8 * num_heads,
        intermediate_size=40,
        num_hidden_layers=2,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=64,
        tie_word_embeddings=tied,
        **extra,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.3)
    return model


@pytest.mark.parametrize("fused_layernorm", [False, True])
@pytest.mark.parametrize(("architecture", "heads", "kv_heads", "tied"), SHAPES)
def test_megatron_mapping_round_trips_exactly(
    architecture: str, heads: int, kv_heads: int, tied: bool, fused_layernorm: bool
) -> None:
    model = tiny_model(architecture, heads, kv_heads, tied)
    layout = layout_of(model.config, fused_layernorm=fused_layernorm)
    assert (layout.num_heads, layout.num_kv_heads, layout.head_dim, layout.tied_embeddings) == (
        heads,
        kv_heads,
        8,
        tied,
    )
    hf = model.state_dict()
    megatron = to_megatron(hf, layout)
    norm = "self_attention.linear_qkv.layer_norm_weight" if fused_layernorm else "input_layernorm.weight"
    layer = {
        norm,
        "mlp.linear_fc1.layer_norm_weight" if fused_layernorm else "pre_mlp_layernorm.weight",
        "self_attention.linear_qkv.weight",
        "self_attention.linear_proj.weight",
        "mlp.linear_fc1.weight",
        "mlp.linear_fc2.weight",
    } | ({"self_attention.linear_qkv.bias"} if architecture == "qwen2" else set())
    top = {"embedding.word_embeddings.weight", "decoder.final_layernorm.weight"}
    expected = top | {f"decoder.layers.{i}.{name}" for i in range(2) for name in layer}
    assert set(megatron) == expected | (set() if tied else {"output_layer.weight"})
    qkv = megatron["decoder.layers.1.self_attention.linear_qkv.weight"]
    assert qkv.shape == ((heads + 2 * kv_heads) * 8, 8 * heads)
    assert megatron["decoder.layers.0.mlp.linear_fc1.weight"].shape == (80, 8 * heads)
    back = from_megatron(megatron, layout)
    assert set(back) == set(hf)
    for name, tensor in hf.items():
        assert torch.equal(back[name], tensor), name
    again = to_megatron(back, layout)
    assert all(torch.equal(again[name], tensor) for name, tensor in megatron.items())


@pytest.mark.parametrize(("architecture", "heads", "kv_heads", "tied"), SHAPES)
def test_fused_qkv_and_fc1_compute_what_the_hf_modules_compute(
    architecture: str, heads: int, kv_heads: int, tied: bool
) -> None:
    model = tiny_model(architecture, heads, kv_heads, tied)
    layout = layout_of(model.config)
    megatron = to_megatron(model.state_dict(), layout)
    attention, mlp = model.model.layers[1].self_attn, model.model.layers[1].mlp
    x = torch.randn(3, 5, 8 * heads, generator=torch.Generator().manual_seed(1))
    prefix = "decoder.layers.1."
    weight = megatron[f"{prefix}self_attention.linear_qkv.weight"]
    bias = megatron.get(f"{prefix}self_attention.linear_qkv.bias")
    # Megatron's split (SelfAttention.get_query_key_value_tensors): [.., groups, (heads/group + 2) * head_dim]
    mixed = F.linear(x, weight, bias).view(3, 5, kv_heads, (heads // kv_heads + 2) * 8)
    query, key, value = mixed.split([heads // kv_heads * 8, 8, 8], dim=-1)
    with torch.no_grad():
        torch.testing.assert_close(query.reshape(3, 5, heads, 8), attention.q_proj(x).view(3, 5, heads, 8))
        torch.testing.assert_close(
            key.reshape(3, 5, kv_heads, 8), attention.k_proj(x).view(3, 5, kv_heads, 8)
        )
        torch.testing.assert_close(
            value.reshape(3, 5, kv_heads, 8), attention.v_proj(x).view(3, 5, kv_heads, 8)
        )
        gate, up = F.linear(x, megatron[f"{prefix}mlp.linear_fc1.weight"]).chunk(2, dim=-1)
        swiglu = F.linear(F.silu(gate) * up, megatron[f"{prefix}mlp.linear_fc2.weight"])
        torch.testing.assert_close(swiglu, mlp(x))


def _rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding, half-rotation convention (Megatron's ``rotary_interleaved=False``); x is [b, h, t, d]."""
    d, t = x.shape[-1], x.shape[-2]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = torch.outer(torch.arange(t, dtype=torch.float32), inv_freq)
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


def megatron_layout_forward(weights: dict[str, torch.Tensor], layout: GptLayout, tokens: torch.Tensor) -> Any:
    """Logits of a pre-norm GPT computed from Megatron-named weights alone (RMSNorm, rotary GQA attention with the
    grouped QKV split, SwiGLU over ``[gate; up]``): the semantics the names and layouts must carry."""

    def norm(x: torch.Tensor, name: str) -> torch.Tensor:
        return weights[name] * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    b, t = tokens.shape
    groups, per_group, d = layout.num_kv_heads, layout.heads_per_group, layout.head_dim
    x = weights["embedding.word_embeddings.weight"][tokens]
    for i in range(layout.num_layers):
        p = f"decoder.layers.{i}."
        h = norm(x, f"{p}input_layernorm.weight")
        qkv = F.linear(
            h,
            weights[f"{p}self_attention.linear_qkv.weight"],
            weights.get(f"{p}self_attention.linear_qkv.bias"),
        )
        q, k, v = qkv.view(b, t, groups, (per_group + 2) * d).split([per_group * d, d, d], dim=-1)
        q = _rope(q.reshape(b, t, groups * per_group, d).transpose(1, 2), 10000.0)
        k = _rope(k.transpose(1, 2), 10000.0).repeat_interleave(per_group, dim=1)
        v = v.transpose(1, 2).repeat_interleave(per_group, dim=1)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, -1)
        x = x + F.linear(attended, weights[f"{p}self_attention.linear_proj.weight"])
        gate, up = F.linear(
            norm(x, f"{p}pre_mlp_layernorm.weight"), weights[f"{p}mlp.linear_fc1.weight"]
        ).chunk(2, -1)
        x = x + F.linear(F.silu(gate) * up, weights[f"{p}mlp.linear_fc2.weight"])
    x = norm(x, "decoder.final_layernorm.weight")
    output = weights["embedding.word_embeddings.weight" if layout.tied_embeddings else "output_layer.weight"]
    return F.linear(x, output)


@pytest.mark.parametrize(("architecture", "heads", "kv_heads", "tied"), SHAPES)
def test_a_forward_pass_in_megatron_layout_gives_the_hf_logits(
    architecture: str, heads: int, kv_heads: int, tied: bool
) -> None:
    model = tiny_model(architecture, heads, kv_heads, tied, rms_norm_eps=1e-6)
    layout = layout_of(model.config)
    tokens = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours = megatron_layout_forward(to_megatron(model.state_dict(), layout), layout, tokens)
        torch.testing.assert_close(ours, model(tokens).logits, rtol=1e-4, atol=1e-4)


def test_the_mapping_refuses_what_it_cannot_map() -> None:
    model = tiny_model("qwen2", 4, 2, False)
    layout = layout_of(model.config)
    weights = model.state_dict()
    with pytest.raises(ConfigError, match=r"model\.layers\.1\.mlp\.up_proj\.weight.*missing"):
        to_megatron({k: v for k, v in weights.items() if k != "model.layers.1.mlp.up_proj.weight"}, layout)
    with pytest.raises(ConfigError, match="1 Hugging Face tensor.*no counterpart"):
        to_megatron({**weights, "model.layers.0.self_attn.rotary.weight": torch.zeros(1)}, layout)
    with pytest.raises(ConfigError, match="lm_head.weight.*differs from the embedding"):
        to_megatron(weights, layout_of(tiny_model("qwen2", 4, 2, True).config))  # untied weights, tied layout
    with pytest.raises(ConfigError, match="linear_qkv has 40 rows, the layout needs 64"):
        split_qkv(torch.zeros(40, 32), layout)
    with pytest.raises(ConfigError, match="'gpt2'.*has no megatron-core weight mapping"):
        layout_of(transformers.GPT2Config(n_layer=1))
    with pytest.raises(ConfigError, match="layout.num_kv_heads=3: must divide num_heads=4"):
        GptLayout(num_layers=1, num_heads=4, num_kv_heads=3, head_dim=8, tied_embeddings=False)
    q, k, v = torch.randn(32, 3), torch.randn(16, 3), torch.randn(16, 3)
    assert all(
        torch.equal(a, b)
        for a, b in zip(split_qkv(fuse_qkv(q, k, v, layout), layout), (q, k, v), strict=True)
    )


def _optional_backend_reason(package: str) -> str | None:
    """Why selecting the backend of ``package`` must fail here (None where it may run)."""
    if not package_available(package):
        return "not installed"
    return None if torch.cuda.is_available() else "no GPU"


@pytest.mark.parametrize(
    ("component", "name", "package"),
    [
        ("rollout", "vllm", "vllm"),
        ("actor", "megatron", "megatron.core"),
        ("inference", "megatron", "megatron.core"),
    ],
)
def test_an_optional_backend_without_its_package_or_gpu_is_one_line_and_exit_2(
    component: str, name: str, package: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reason = _optional_backend_reason(package)
    if reason is None:
        pytest.skip(f"{package} and a GPU are present: selecting {name} is valid here")
    args = ["train", CONFIG, "--iterations", "1", "--out", str(tmp_path / "run")]
    assert main([*args, "--set", f"backends.{component}={name}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    problem = (
        f"needs the {package} package, which is not installed"
        if reason == "not installed"
        else "needs a CUDA GPU"
    )
    assert f"backends.{component}='{name}'" in err and problem in err and "fix:" in err
    assert not (tmp_path / "run").exists()  # refused before anything ran


def test_backend_names_are_checked() -> None:
    with pytest.raises(
        ConfigError, match=r"backends.rollout='sglang': unknown backend.*\['hf', 'hf-generate', 'vllm'\]"
    ):
        BackendConfig(rollout="sglang")
    with pytest.raises(ConfigError, match=r"backends.actor='vllm': unknown backend.*\['hf', 'megatron'\]"):
        BackendConfig(actor="vllm")
    check_backends(BackendConfig())  # the default needs nothing optional
    with pytest.raises(ConfigError, match="backends.inference='deepspeed'"):
        policy_backend("inference", "deepspeed", Path("."), device=CPU, dtype=torch.float32, seed=0)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2 checkpoint directory (config, safetensors, a BPE tokenizer) saved like the workload's."""
    from rlinf.workloads.hf_grpo.checkpoints import save_checkpoint
    from rlinf.workloads.hf_grpo.tokenizer import train_bpe
    from rlinf.workloads.hf_grpo.word_problems import WordProblemsTask

    folder = tmp_path_factory.mktemp("tiny-qwen2")
    tokenizer = train_bpe(WordProblemsTask(), vocab_size=300, seed=0)
    model = tiny_model("qwen2", 4, 2, False, vocab_size=300, eos_token_id=1, pad_token_id=0)
    save_checkpoint(model, tokenizer, folder)
    return folder


def test_hf_backends_satisfy_the_interfaces_and_exchange_hf_weights(checkpoint: Path) -> None:
    policy = policy_backend("actor", "hf", checkpoint, device=CPU, dtype=torch.float32, seed=0)
    rollout = rollout_backend("hf", checkpoint, device=CPU, dtype=torch.float32, eos_id=1, pad_id=0, seed=0)
    assert isinstance(policy, PolicyBackend) and isinstance(policy, HfPolicyBackend)
    assert isinstance(rollout, RolloutBackend) and isinstance(rollout, HfRolloutBackend)
    with torch.no_grad():
        for param in policy.parameters():
            param.add_(0.01)
    rollout.load_weights(policy.weights())
    own = rollout.weights()
    assert own is not None and set(own) == set(policy.weights())
    assert all(torch.equal(own[name], tensor) for name, tensor in policy.weights().items())


def test_the_policy_scores_at_the_sampling_temperature(checkpoint: Path) -> None:
    policy = policy_backend("inference", "hf", checkpoint, device=CPU, dtype=torch.float32, seed=0)
    tokens = torch.randint(2, 300, (2, 10), generator=torch.Generator().manual_seed(3))
    mask, prompt_len = torch.ones_like(tokens), torch.tensor([4, 6])
    with torch.no_grad():
        logits = policy.generation_model()(tokens).logits
        cooled = policy.response_logprobs(tokens, mask, prompt_len, 4, temperature=0.5)
        plain = policy.response_logprobs(tokens, mask, prompt_len, 4)
    expected = torch.log_softmax(logits / 0.5, dim=-1)
    for row, start in enumerate((4, 6)):
        for t in range(4):
            position = min(start - 1 + t, 8)  # columns past the sequence repeat its last token's
            token = tokens[row, position + 1]
            torch.testing.assert_close(cooled[row, t], expected[row, position, token])
    assert not torch.allclose(cooled, plain)


def _cuda_reason(package: str) -> str | None:
    if not package_available(package):
        return f"{package} is not installed (optional GPU backend: pip install it on a CUDA machine)"
    if not torch.cuda.is_available():
        return f"the {package} backend needs a CUDA GPU and none is available"
    return None


@pytest.mark.gpu
def test_megatron_policy_scores_like_hf_and_round_trips_weights(checkpoint: Path) -> None:
    reason = _cuda_reason("megatron.core")
    if reason:
        pytest.skip(reason)
    cuda = torch.device("cuda")
    megatron = policy_backend("actor", "megatron", checkpoint, device=cuda, dtype=torch.float32, seed=0)
    reference = policy_backend("actor", "hf", checkpoint, device=cuda, dtype=torch.float32, seed=0)
    assert set(megatron.weights()) == set(reference.weights())
    for name, tensor in reference.weights().items():
        assert torch.equal(megatron.weights()[name], tensor), name
    tokens = torch.randint(2, 300, (3, 12), device=cuda, generator=torch.Generator(cuda).manual_seed(0))
    mask, prompt_len = torch.ones_like(tokens), torch.tensor([4, 5, 6], device=cuda)
    with torch.no_grad():
        ours = megatron.response_logprobs(tokens, mask, prompt_len, 6)
        torch.testing.assert_close(
            ours, reference.response_logprobs(tokens, mask, prompt_len, 6), rtol=1e-3, atol=1e-3
        )
    optimizer = torch.optim.AdamW(megatron.parameters(), lr=1e-2)
    megatron.response_logprobs(tokens, mask, prompt_len, 6).mean().backward()
    optimizer.step()
    reference.load_weights(megatron.weights())
    with torch.no_grad():
        torch.testing.assert_close(
            megatron.response_logprobs(tokens, mask, prompt_len, 6),
            reference.response_logprobs(tokens, mask, prompt_len, 6),
            rtol=1e-3,
            atol=1e-3,
        )


@pytest.mark.gpu
def test_vllm_rollout_generates_like_hf_and_updates_weights_in_place(checkpoint: Path) -> None:
    reason = _cuda_reason("vllm")
    if reason:
        pytest.skip(reason)
    cuda = torch.device("cuda")
    vllm = rollout_backend("vllm", checkpoint, device=cuda, dtype=torch.bfloat16, eos_id=1, pad_id=0, seed=0)
    hf = rollout_backend("hf", checkpoint, device=cuda, dtype=torch.bfloat16, eos_id=1, pad_id=0, seed=0)
    prompts, greedy = [[5, 6, 7, 8], [9, 10, 11]], SamplingParams(max_new_tokens=8, temperature=0.0)

    def responses(backend: RolloutBackend) -> list[tuple[tuple[int, ...], ...]]:
        groups = sorted(
            backend.stream_groups(prompts, group_size=1, params=greedy, seed=0), key=lambda g: g.group_index
        )
        return [g.response_ids for g in groups]

    assert responses(vllm) == responses(hf)
    policy = policy_backend("actor", "hf", checkpoint, device=cuda, dtype=torch.float32, seed=0)
    with torch.no_grad():
        for param in policy.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    vllm.offload()
    vllm.onload()
    vllm.load_weights(policy.weights())
    hf.load_weights(policy.weights())
    assert responses(vllm) == responses(hf)


def test_the_generate_backend_samples_what_the_step_by_step_engine_samples_greedily(checkpoint: Path) -> None:
    """``hf-generate`` (transformers' ``generate``, static KV cache) and ``hf`` (rlinf's engine, streaming) give
    the same greedy responses for prompts of different lengths (left padding, EOS ends a row), every group once."""
    from rlinf.workloads.hf_grpo.backends import HfGenerateRolloutBackend
    from rlinf.workloads.hf_grpo.generation import SamplingParams

    prompts = [[5, 9, 12], [7, 8, 20, 31, 4, 11], [40]]
    engines = [
        rollout_backend(name, checkpoint, device=CPU, dtype=torch.float32, eos_id=1, pad_id=0, seed=0)
        for name in ("hf", "hf-generate")
    ]
    assert isinstance(engines[1], HfGenerateRolloutBackend) and isinstance(engines[1], RolloutBackend)
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
    step, whole = (
        sorted(e.stream_groups(prompts, group_size=2, params=greedy, seed=1), key=lambda g: g.group_index)
        for e in engines
    )
    assert [g.group_index for g in whole] == [0, 1, 2]
    assert [g.response_ids for g in whole] == [g.response_ids for g in step]
    assert [g.ended_at_eos for g in whole] == [g.ended_at_eos for g in step]
    sampled = list(
        engines[1].stream_groups(prompts, group_size=4, params=SamplingParams(max_new_tokens=8), seed=2)
    )
    for group in sampled:
        assert len(group.response_ids) == 4 and all(1 <= len(r) <= 8 for r in group.response_ids)
        assert all(
            ended == (r[-1] == 1) and 1 not in r[:-1]
            for r, ended in zip(group.response_ids, group.ended_at_eos, strict=True)
        )
