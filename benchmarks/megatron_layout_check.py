"""Checks the Hugging Face -> megatron-core weight mapping against a real megatron-core ``GPTModel`` on CPU.

    pip install --no-deps --target /tmp/mcore megatron-core
    PYTHONPATH=/tmp/mcore:. python benchmarks/megatron_layout_check.py

For tiny Qwen2 (query/key/value biases, grouped-query attention, untied and tied embeddings) and Llama models
built from configs with random weights, it builds the ``GPTModel`` that
:class:`rlinf.workloads.hf_grpo.megatron_policy.MegatronPolicyBackend` builds, loads
:func:`~rlinf.workloads.hf_grpo.megatron_layout.to_megatron` of the Hugging Face ``state_dict`` with ``strict``
names, and prints the largest difference between the two models' logits and whether
:func:`~rlinf.workloads.hf_grpo.megatron_layout.from_megatron` of the ``GPTModel``'s own ``state_dict`` gives back
the Hugging Face one exactly. megatron-core supports CUDA only, so on a CPU machine this script replaces two
CUDA-only calls that carry no weights (the rotary table's device move and the dropout RNG tracker's fork); it is
a check of the mapping, not a way to run the megatron backend (which needs a GPU). Not part of the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers

from rlinf.workloads.hf_grpo.megatron_layout import from_megatron, layout_of, to_megatron
from rlinf.workloads.hf_grpo.megatron_policy import bias_flags, rotary_base


class _NoRngTracker:
    def fork(self, *args: object, **kwargs: object) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args(argv)
    warnings.filterwarnings("ignore")
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    if not torch.cuda.is_available():  # the CPU stand-ins for the two CUDA-only calls
        torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
        tensor_parallel.get_cuda_rng_tracker = lambda *args, **kwargs: _NoRngTracker()
    with tempfile.TemporaryDirectory() as folder:
        store = torch.distributed.FileStore(str(Path(folder) / "store"), 1)
        torch.distributed.init_process_group(backend="gloo", store=store, world_size=1, rank=0)
        parallel_state.initialize_model_parallel(1, 1)
        worst = 0.0
        for architecture, tied in (("qwen2", False), ("qwen2", True), ("llama", False), ("llama", True)):
            cls = transformers.Qwen2Config if architecture == "qwen2" else transformers.LlamaConfig
            hf_config = cls(
                vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
                num_key_value_heads=2, tie_word_embeddings=tied, max_position_embeddings=128,
            )  # fmt: skip
            torch.manual_seed(0)
            hf = transformers.AutoModelForCausalLM.from_config(hf_config).eval()
            with torch.no_grad():
                for param in hf.parameters():
                    param.normal_(0.0, 0.2)
            layout = layout_of(hf_config)
            add_bias_linear, add_qkv_bias = bias_flags(hf_config, "backends.actor")
            core = TransformerConfig(
                num_layers=2, hidden_size=64, num_attention_heads=8, num_query_groups=2, kv_channels=8,
                ffn_hidden_size=96, normalization="RMSNorm", layernorm_epsilon=hf_config.rms_norm_eps,
                add_bias_linear=add_bias_linear, add_qkv_bias=add_qkv_bias, gated_linear_unit=True,
                activation_func=F.silu, bias_activation_fusion=False, masked_softmax_fusion=False,
                bias_dropout_fusion=False, persist_layer_norm=False, gradient_accumulation_fusion=False,
                apply_rope_fusion=False, hidden_dropout=0.0, attention_dropout=0.0, use_cpu_initialization=True,
                params_dtype=torch.float32,
            )  # fmt: skip
            megatron = GPTModel(
                config=core,
                transformer_layer_spec=get_gpt_layer_local_spec(normalization="RMSNorm"),
                vocab_size=300,
                max_sequence_length=128,
                position_embedding_type="rope",
                rotary_base=int(rotary_base(hf_config, "backends.actor")),
                share_embeddings_and_output_weights=tied,
            ).eval()
            megatron.load_state_dict(to_megatron(hf.state_dict(), layout), strict=True)
            tokens = torch.randint(0, 300, (2, 12), generator=torch.Generator().manual_seed(1))
            positions = torch.arange(12).expand_as(tokens)
            causal = torch.triu(torch.ones(12, 12, dtype=torch.bool), diagonal=1)[None, None]
            with torch.no_grad():
                difference = float((megatron(tokens, positions, causal) - hf(tokens).logits).abs().max())
            own = {k: v for k, v in megatron.state_dict().items() if isinstance(v, torch.Tensor)}
            back, expected = from_megatron(own, layout), hf.state_dict()
            exact = set(back) == set(expected) and all(torch.equal(back[k], expected[k]) for k in expected)
            worst = max(worst, difference)
            print(
                f"{architecture} tied={tied}: max |logits difference| {difference:.2e}; "
                f"from_megatron(GPTModel.state_dict()) == HF state_dict: {exact}"
            )
        torch.distributed.destroy_process_group()
    print(
        f"megatron-core {_version()} on {'cuda' if torch.cuda.is_available() else 'cpu'}: worst {worst:.2e}"
    )
    return 0 if worst < 1e-4 else 1


def _version() -> str:
    from importlib.metadata import version

    return version("megatron-core")


if __name__ == "__main__":
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    raise SystemExit(main())
