"""The HF GRPO rollout on vLLM's offline engine (optional; needs ``pip install vllm`` and a CUDA GPU).

The engine starts from the warm-start checkpoint directory itself (a Hugging Face checkpoint: ``config.json``,
``model.safetensors``), with ``skip_tokenizer_init`` since prompts arrive as token ids. After every iteration the
actor's weights arrive under Hugging Face ``state_dict`` names and are loaded *in place* through the vLLM model's
own ``load_weights``, which takes Hugging Face names (it fuses ``q/k/v_proj`` and ``gate/up_proj`` itself and
skips ``lm_head.weight`` of a tied model). Each prompt group is one request with ``n = group_size``; stepping the
engine yields a group as soon as its request finishes (streaming). :meth:`offload` / :meth:`onload` put the
engine to sleep (level 1: weights to host memory, KV cache freed) and wake it, for context switching; the
engine's memory is its own, so :meth:`state_tensors` is empty and the executor moves nothing.

vLLM picks its GPU itself (the first one ``CUDA_VISIBLE_DEVICES`` shows), so run one vLLM rollout replica per
visible GPU set. ``vllm`` is imported inside the class only.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from rlinf.api import ConfigError
from rlinf.workloads.hf_grpo.backends import host_copy, require_cuda_device
from rlinf.workloads.hf_grpo.generation import GroupRollout, SamplingParams


def _load_hf_weights(model: Any, *, weights: list[tuple[str, torch.Tensor]]) -> None:
    """Runs inside vLLM's worker: the model's ``load_weights`` accepts Hugging Face names and layouts."""
    model.load_weights(iter(weights))


class VllmRolloutBackend:
    """Generation on ``vllm.LLM`` with in-place weight updates and sleep / wake-up."""

    name = "vllm"

    def __init__(
        self,
        directory: Path,
        *,
        device: torch.device,
        eos_id: int,
        seed: int,
        gpu_memory_utilization: float = 0.3,
    ) -> None:
        try:
            import vllm
        except ImportError as error:
            raise ConfigError(
                "backends.rollout",
                "vllm",
                f"vllm is not importable ({error})",
                "pip install vllm on a CUDA machine, or use backends.rollout: hf",
            ) from error
        require_cuda_device("backends.rollout", "vllm", device)
        # in-place weight updates send a function to vLLM's workers; recent vLLM pickles functions for its own
        # worker processes only when this is set (they are this process's children, not a remote service)
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        self._vllm = vllm
        self.eos_id = eos_id
        self.device = device
        self._llm = vllm.LLM(
            model=str(directory),
            skip_tokenizer_init=True,
            dtype="bfloat16",
            seed=seed,
            enforce_eager=True,
            enable_sleep_mode=True,
            gpu_memory_utilization=gpu_memory_utilization,
        )
        self._asleep = False
        self._num_requests = 0
        self._host_weights: dict[str, torch.Tensor] | None = None

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Overwrite the engine's weights in place (Hugging Face names) and drop cached prefixes."""
        self.onload()
        items = [(name, tensor.to(self.device, torch.bfloat16)) for name, tensor in weights.items()]
        self._llm.apply_model(functools.partial(_load_hf_weights, weights=items))
        self._llm.reset_prefix_cache()
        self._host_weights = host_copy(weights)

    def weights(self) -> dict[str, torch.Tensor] | None:
        """A host copy of the weights last loaded (vLLM keeps its own out of reach); None before the first sync,
        when the engine holds the checkpoint it started from."""
        return self._host_weights

    def state_tensors(self) -> list[torch.Tensor]:
        return []

    def stream_groups(
        self, prompts: Sequence[Sequence[int]], *, group_size: int, params: SamplingParams, seed: int
    ) -> Iterator[GroupRollout]:
        """One request per prompt (``n=group_size``); yields a group when its request finishes."""
        self.onload()
        engine = self._llm.llm_engine
        request_ids = {}
        for index, prompt in enumerate(prompts):
            sampling = self._vllm.SamplingParams(
                n=group_size,
                temperature=params.temperature,
                max_tokens=params.max_new_tokens,
                stop_token_ids=[self.eos_id],
                seed=seed + index,
                detokenize=False,
            )
            self._num_requests += 1
            request_id = f"rlinf-{self._num_requests}"
            request_ids[request_id] = index
            engine.add_request(request_id, {"prompt_token_ids": list(prompt)}, sampling)
        while engine.has_unfinished_requests():
            for output in engine.step():
                if output.finished and output.request_id in request_ids:
                    yield self._group(
                        request_ids[output.request_id], prompts[request_ids[output.request_id]], output
                    )

    def _group(self, index: int, prompt: Sequence[int], output: Any) -> GroupRollout:
        responses, ended = [], []
        for completion in sorted(output.outputs, key=lambda c: c.index):
            ids = list(completion.token_ids)
            at_eos = completion.finish_reason == "stop"
            if at_eos and (not ids or ids[-1] != self.eos_id):
                ids.append(self.eos_id)  # vLLM may leave the stop token out of the output
            responses.append(tuple(ids))
            ended.append(at_eos)
        return GroupRollout(
            group_index=index,
            prompt_ids=tuple(prompt),
            response_ids=tuple(responses),
            ended_at_eos=tuple(ended),
        )

    def offload(self) -> None:
        """Sleep level 1: weights to host memory, KV cache freed."""
        if not self._asleep:
            self._llm.sleep(level=1)
            self._asleep = True

    def onload(self) -> None:
        if self._asleep:
            self._llm.wake_up()
            self._asleep = False
