"""Rollout on vLLM's offline engine (optional; needs ``pip install vllm`` and a GPU).

The policy is GPT-2-shaped, so the backend hands vLLM a Hugging Face GPT-2 checkpoint (config + weights in a
temporary directory) the first time it receives weights, and afterwards updates the engine's weights *in place*
through the model's own ``load_weights``. Each prompt group is one request with ``n = group_size``; driving the
engine step by step yields a group as soon as its request has finished (streaming). ``offload`` / ``onload`` use
vLLM's sleep mode (level 1: weights to host memory, KV cache discarded) for context switching.

``vllm`` is imported inside the class only, so this module imports (and its weight-layout function is tested)
without vLLM installed.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from rlinf.core.errors import ConfigError
from rlinf.workloads.arith.generation import GroupRollout, SamplingParams
from rlinf.workloads.arith.model import TransformerConfig

_CONV1D = ("attn.qkv", "attn.proj", ".fc.", "fc_proj")
_HF_NAMES = (
    ("tok_emb.", "transformer.wte."),
    ("pos_emb.", "transformer.wpe."),
    ("ln_f.", "transformer.ln_f."),
    ("attn.qkv.", "attn.c_attn."),
    ("attn.proj.", "attn.c_proj."),
    ("fc_proj.", "mlp.c_proj."),
    (".fc.", ".mlp.c_fc."),
)


def to_hf_gpt2(weights: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Canonical weights -> Hugging Face ``GPT2LMHeadModel`` names and layout (Conv1D weights are ``[in, out]``)."""
    converted = {}
    for name, tensor in weights.items():
        hf_name = name
        for ours, theirs in _HF_NAMES:
            hf_name = hf_name.replace(ours, theirs)
        hf_name = hf_name.replace("blocks.", "transformer.h.")
        is_conv1d = name.endswith(".weight") and any(part in name for part in _CONV1D)
        converted[hf_name] = tensor.t().contiguous() if is_conv1d else tensor.contiguous()
    return converted


def hf_gpt2_config(config: TransformerConfig, *, bos_id: int, eos_id: int) -> dict:
    """The ``config.json`` of a GPT-2 with this transformer's shape."""
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": config.vocab_size,
        "n_positions": config.max_seq_len,
        "n_ctx": config.max_seq_len,
        "n_embd": config.d_model,
        "n_layer": config.num_layers,
        "n_head": config.num_heads,
        "n_inner": config.d_ff,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "tie_word_embeddings": True,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "torch_dtype": "float32",
    }


def _load_hf_weights(model: Any, *, weights: list[tuple[str, torch.Tensor]]) -> None:
    """Runs inside vLLM's worker: its GPT-2 ``load_weights`` accepts HF names and layout."""
    model.load_weights(iter(weights))


class VllmRolloutBackend:
    """Generation on ``vllm.LLM`` (offline engine) with in-place weight updates and sleep/wake."""

    name = "vllm"

    def __init__(
        self,
        model_config: TransformerConfig,
        *,
        eos_id: int,
        pad_id: int,
        seed: int,
        device: str = "cuda",
        bos_id: int = 1,
        gpu_memory_utilization: float = 0.2,
    ) -> None:
        try:
            import vllm
        except ImportError as error:
            raise ConfigError(
                "rollout.backend",
                "vllm",
                f"vllm is not importable ({error})",
                "pip install vllm on a CUDA machine, or use rollout.backend=torch",
            ) from error
        self._vllm = vllm
        self.model_config = model_config
        self.eos_id = eos_id
        self.pad_id = pad_id
        self.bos_id = bos_id
        self.seed = seed
        self.device = device
        self.gpu_memory_utilization = gpu_memory_utilization
        self._llm = None
        self._checkpoint_dir: tempfile.TemporaryDirectory | None = None
        self._request_counter = 0

    def _start(self, hf_weights: dict[str, torch.Tensor]) -> None:
        # in-place weight updates send a function to vLLM's workers; recent vLLM only pickles functions for
        # its own worker processes when this is set (they are this process's children, not a remote service)
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        self._checkpoint_dir = tempfile.TemporaryDirectory(prefix="rlinf-vllm-")
        path = Path(self._checkpoint_dir.name)
        config = hf_gpt2_config(self.model_config, bos_id=self.bos_id, eos_id=self.eos_id)
        (path / "config.json").write_text(json.dumps(config))
        torch.save({name: t.cpu() for name, t in hf_weights.items()}, path / "pytorch_model.bin")
        self._llm = self._vllm.LLM(
            model=str(path),
            skip_tokenizer_init=True,
            dtype="float32",
            seed=self.seed,
            enforce_eager=True,
            enable_sleep_mode=True,
            gpu_memory_utilization=self.gpu_memory_utilization,
            max_model_len=self.model_config.max_seq_len,
            load_format="pt",
        )

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """First call starts the engine from these weights; later calls update the engine's weights in place."""
        hf_weights = to_hf_gpt2(weights)
        if self._llm is None:
            self._start(hf_weights)
            return
        items = [(name, tensor.to(self.device)) for name, tensor in hf_weights.items()]
        self._llm.apply_model(functools.partial(_load_hf_weights, weights=items))
        self._llm.reset_prefix_cache()

    def stream_groups(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        group_size: int,
        params: SamplingParams,
        seed: int,
        min_new_tokens: Sequence[int] | None = None,
    ) -> Iterator[GroupRollout]:
        """One request per prompt (``n=group_size``); yields a group when its request finishes."""
        if self._llm is None:
            raise ConfigError(
                "rollout",
                "vllm",
                "the engine has no weights yet",
                "call load_weights (weight sync) before generating",
            )
        engine = self._llm.llm_engine
        request_ids = {}
        for index, prompt in enumerate(prompts):
            sampling = self._vllm.SamplingParams(
                n=group_size,
                temperature=params.temperature,
                max_tokens=params.max_new_tokens,
                min_tokens=0 if min_new_tokens is None else int(min_new_tokens[index]),
                stop_token_ids=[self.eos_id],
                seed=seed + index,
                logprobs=0,
                detokenize=False,
            )
            self._request_counter += 1
            request_id = f"rlinf-{self._request_counter}"
            request_ids[request_id] = index
            engine.add_request(request_id, {"prompt_token_ids": list(prompt)}, sampling)
        while engine.has_unfinished_requests():
            for output in engine.step():
                if output.finished and output.request_id in request_ids:
                    yield self._group(request_ids[output.request_id], prompts, output)

    def _group(self, index: int, prompts: Sequence[Sequence[int]], output) -> GroupRollout:
        responses, logprobs, ended = [], [], []
        for completion in sorted(output.outputs, key=lambda c: c.index):
            ids = list(completion.token_ids)
            at_eos = completion.finish_reason == "stop"
            if at_eos and (not ids or ids[-1] != self.eos_id):
                ids.append(self.eos_id)
            step_logprobs = [
                float(step[token].logprob)
                for step, token in zip(completion.logprobs or [], ids, strict=False)
            ]
            responses.append(tuple(ids))
            logprobs.append(tuple(step_logprobs))
            ended.append(at_eos)
        return GroupRollout(
            group_index=index,
            prompt_ids=tuple(prompts[index]),
            response_ids=tuple(responses),
            response_logprobs=tuple(logprobs),
            ended_at_eos=tuple(ended),
        )

    def offload(self) -> None:
        """Sleep level 1: weights to host memory, KV cache freed."""
        if self._llm is not None:
            self._llm.sleep(level=1)

    def onload(self) -> None:
        if self._llm is not None:
            self._llm.wake_up()
