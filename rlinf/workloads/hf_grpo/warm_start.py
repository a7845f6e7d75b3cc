"""The supervised warm start: steps on worked solutions so that GRPO starts with a nonzero reward, cached by the
settings it depends on.

:func:`warm_start_checkpoint` is what every worker calls in ``setup``: under the cache's lock, the first worker
builds the base model (:func:`~rlinf.workloads.hf_grpo.checkpoints.base_checkpoint`), trains the warm start on
its device, measures its accuracy on both held-out sets (validation and test) and saves the result as a Hugging
Face checkpoint (safetensors) plus a ``warm_start.json`` into ``<cache_dir>/warm-<key>`` (written in a temporary folder and renamed); the others wait
and load it with ``from_pretrained``. A changed setting trains anew; repeated runs start at once.

Whether it runs at all is :attr:`~rlinf.workloads.hf_grpo.config.HfGrpoConfig.trains_warm_start`: by default for a
model built from ``model.config`` and never for a user's checkpoint (``model.path``) unless
``warm_start.enabled: true``; without it every worker loads the base directory itself.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs
import torch

from rlinf.api import mark_phase
from rlinf.workloads.hf_grpo.checkpoints import (
    base_checkpoint,
    cache_lock,
    cached_directory,
    checkpoint_identity,
    load_model,
    load_tokenizer,
    save_checkpoint,
    settings_key,
)
from rlinf.workloads.hf_grpo.config import HfGrpoConfig
from rlinf.workloads.hf_grpo.evaluation import heldout_accuracies
from rlinf.workloads.hf_grpo.payloads import response_logprobs, response_mask, right_padded, sequence_arrays
from rlinf.workloads.hf_grpo.task import HELDOUT_SETS, sample_problems

METADATA = "warm_start.json"


def _read_only(accuracies: Mapping[str, float] | None) -> Mapping[str, float] | None:
    return None if accuracies is None else MappingProxyType(dict(accuracies))


@attrs.frozen(kw_only=True)
class WarmStart:
    """Where the warm-started checkpoint is and how good it is."""

    directory: Path
    accuracies: Mapping[str, float] | None = attrs.field(converter=_read_only)
    """Greedy accuracy on each held-out set by name (``validation``, ``test``); None when no warm start runs (the
    model as loaded)."""
    seconds: float


def learning_rate(step: int, num_steps: int, peak: float) -> float:
    """Linear warm-up over the first 5% of the steps, then cosine decay to a tenth of ``peak``."""
    warmup = max(1, num_steps // 20)
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, num_steps - warmup)
    return peak * (0.1 + 0.45 * (1.0 + math.cos(math.pi * progress)))


def supervised_step(model: Any, tokenizer: Any, prompts: list[str], solutions: list[str], device: Any) -> Any:
    """The mean negative log-likelihood of the solutions (EOS included) given the prompts (to backpropagate)."""
    eos = tokenizer.eos_token_id
    arrays = sequence_arrays(
        [tokenizer.encode(p) for p in prompts], [tokenizer.encode(s) + [eos] for s in solutions]
    )
    rows = torch.arange(len(prompts)).numpy()
    tokens, mask = right_padded(arrays, rows, tokenizer.pad_token_id)
    width = int(arrays["response_len"].max())
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        logp = response_logprobs(
            model, tokens.to(device), mask.to(device), torch.as_tensor(arrays["prompt_len"]).to(device), width
        )
    weights = response_mask(arrays["response_len"], width).to(device)
    return -(logp * weights).sum() / weights.sum()


def warm_start_batches(
    config: HfGrpoConfig, exclude: frozenset[str]
) -> Iterator[tuple[list[Any], list[str]]]:
    """The ``warm_start.num_steps`` batches of problems and their worked solutions (a sloppy teacher's at
    ``warm_start.teacher_error_rate``), drawn from ``config.seed``; no problem's prompt is in ``exclude``."""
    settings = config.warm_start
    rng = random.Random(config.seed)
    for _ in range(settings.num_steps):
        problems = sample_problems(settings.batch_size, config.task, rng, exclude=exclude)
        yield problems, [config.task.solution(p, rng, settings.teacher_error_rate) for p in problems]


def train_warm_start(model: Any, tokenizer: Any, config: HfGrpoConfig, exclude: frozenset[str]) -> None:
    """``warm_start.num_steps`` AdamW steps on the worked solutions of :func:`warm_start_batches` (none of whose
    prompts is in ``exclude``, the held-out prompts)."""
    settings = config.warm_start
    device = next(model.parameters()).device
    torch.manual_seed(config.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.0)
    model.train()
    for step, (problems, solutions) in enumerate(warm_start_batches(config, exclude)):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, settings.num_steps, settings.lr)
        loss = supervised_step(model, tokenizer, [p.prompt for p in problems], solutions, device)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    model.eval()


def warm_start_key(config: HfGrpoConfig, base: Path, device: torch.device) -> str:
    """The hash of everything the warm start depends on."""
    identity = base.name if config.model.path is None else checkpoint_identity(str(base))
    return settings_key(
        {
            "base": identity,
            "seed": config.seed,
            "task": repr(config.task),
            "warm_start": repr(config.warm_start),
            "eval": [
                config.eval.num_problems,
                config.eval.seed,
                config.eval.test_seed,
                config.eval.batch_size,
            ],
            "max_new_tokens": config.grpo.max_new_tokens,
            "device": device.type,
        }
    )


def warm_start_checkpoint(config: HfGrpoConfig, device: torch.device) -> WarmStart:
    """The warm-started checkpoint of ``config`` (trained on ``device`` once per settings, then cached)."""
    cache = Path(config.cache_dir)
    with cache_lock(cache):
        base = base_checkpoint(config)
        mark_phase("base_model_ready")
        if not config.trains_warm_start:
            return WarmStart(directory=base, accuracies=None, seconds=0.0)
        folder = cache / f"warm-{warm_start_key(config, base, device)}"

        def train(directory: Path) -> None:
            started = time.perf_counter()
            model, tokenizer = load_model(base, device), load_tokenizer(base)
            heldout = config.heldout_sets()
            train_warm_start(model, tokenizer, config, heldout.prompts)
            accuracies = heldout_accuracies(
                model,
                tokenizer,
                heldout,
                HELDOUT_SETS,
                task=config.task,
                max_new_tokens=config.grpo.max_new_tokens,
                batch_size=config.eval.batch_size,
            )
            save_checkpoint(model, tokenizer, directory)
            seconds = time.perf_counter() - started
            (directory / METADATA).write_text(json.dumps({"accuracies": accuracies, "seconds": seconds}))

        cached_directory(folder, train)
        mark_phase("warm_start_ready")
    metadata = json.loads((folder / METADATA).read_text())
    return WarmStart(
        directory=folder,
        accuracies={name: float(metadata["accuracies"][name]) for name in HELDOUT_SETS},
        seconds=float(metadata["seconds"]),
    )
