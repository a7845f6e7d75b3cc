"""The flags of the analytic model's long-response terms: the engine, the decode schedule, response statistics.

They describe what decides a long chain-of-thought generation (docs/analytic_validation.md): the inference
engine's fixed and per-sequence costs of a step (``--engine``, from :mod:`rlinf.analytic.engine_costs`), its cap on sequences in flight
(``--max-num-seqs``), the model's opt-in terms (``--terms``: attention FLOPs, tensor-parallel all-reduces, a KV
cache freed on offload, KV-pool admission and preemption), and the response lengths from the statistics a run
logs (``--response-mean`` with ``--response-clip-ratio`` or ``--response-sigma``).

By default every term is on and each decode step pays :data:`DEFAULT_ENGINE`'s published costs: the model
that docs/analytic_validation.md checks against published runs, not the earlier whole-batch one, which predicts
about half the step of a long chain-of-thought run. ``--terms none --engine none`` give the earlier model back. A
provenance command always spells out the engine and the terms, so it re-synthesizes the same trace whatever the
defaults.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import attrs

from rlinf.analytic.engine_costs import ENGINE_STEP_COSTS, engine_step_cost
from rlinf.analytic.llm_workload import NUM_STORED_LENGTHS, LLMWorkload, ResponseLengths
from rlinf.analytic.response_lengths import lognormal_for, with_draw_mean
from rlinf.commands import values
from rlinf.core.errors import ConfigError

TERMS = {
    "attention": "count_attention_flops",
    "tp-comm": "count_tensor_parallel_comm",
    "free-kv": "free_kv_cache_on_offload",
    "kv-preemption": "kv_preemption",
    "pipeline": "count_pipeline_bubbles",
}
"""``--terms`` names -> the :class:`LLMWorkload` switch each turns on (``all``: every one, the default; ``none``: no
one)."""

NO_ENGINE = "none"
"""``--engine none``: no per-step engine cost (the roofline alone)."""
DEFAULT_ENGINE = min(ENGINE_STEP_COSTS, key=lambda key: ENGINE_STEP_COSTS[key].fixed_step_s)
"""The engine a command without ``--engine`` (or ``--decode-step-overhead-s``) is priced with: the one whose
published fixed per-step cost is least, so that the default is a lower bound of any engine's, never 0 (no engine
decodes a step for free)."""

FLAG_OF_FIELD = {
    "response mean": "--response-mean",
    "response clip ratio": "--response-clip-ratio",
    "response sigma": "--response-sigma",
    "max_concurrent_sequences": "--max-num-seqs",
    "engine": "--engine",
}
"""Fields of this module's errors -> the flag that sets them."""


def add_decode_arguments(parser: argparse.ArgumentParser) -> None:
    """``--response-mean``, ``--response-clip-ratio``, ``--engine``, ``--max-num-seqs``, ``--terms``,
    ``--activation-recompute``, ``--no-reference-model``."""
    parser.add_argument(
        "--response-mean",
        type=values.real(0.0, 1e7, exclusive_minimum=True),
        default=None,
        help="mean response tokens (instead of --response-median; the median follows from it and the spread)",
    )
    parser.add_argument(
        "--response-clip-ratio",
        type=values.real(0.0, 1.0, exclusive_minimum=True, exclusive_maximum=True),
        default=None,
        help="share of responses cut at --response-max, with --response-mean (sets the spread instead of "
        "--response-sigma)",
    )
    parser.add_argument(
        "--engine",
        default=None,
        help=f"inference engine whose published costs (fixed, and per sequence in flight) to add to every decode "
        f"step: "
        f"{', '.join(ENGINE_STEP_COSTS)}, or {NO_ENGINE} (default {DEFAULT_ENGINE}, the least published cost, "
        f"unless --decode-step-overhead-s is given)",
    )
    parser.add_argument(
        "--max-num-seqs",
        type=values.count(1, 1_000_000),
        default=None,
        help="the engine's cap on sequences in flight per rollout replica (default 256)",
    )
    parser.add_argument(
        "--terms",
        default=None,
        help=f"comma-separated model terms to turn on: {', '.join(TERMS)}, all (the default) or none",
    )
    parser.add_argument(
        "--activation-recompute",
        action="store_true",
        help="training recomputes activations (8*N FLOPs per token instead of 6*N)",
    )
    parser.add_argument(
        "--no-reference-model",
        action="store_true",
        help="no reference model forward (a run without a KL term)",
    )


def response_from_args(
    args: argparse.Namespace, pick: Callable[[str, Any], Any], median: float, sigma: float, max_tokens: int
) -> ResponseLengths:
    """The response lengths the flags describe: ``--response-mean`` with the spread of
    ``--response-clip-ratio`` or ``--response-sigma`` (its median set so that the trace's drawn lengths have that
    mean), else the median and sigma (flags, then defaults)."""
    mean, clip = getattr(args, "response_mean", None), getattr(args, "response_clip_ratio", None)
    if mean is None:
        if clip is not None:
            raise ConfigError(
                "--response-clip-ratio", clip, "needs --response-mean", "give the mean response too"
            )
        return ResponseLengths(
            median_tokens=pick("response_median", median),
            sigma=pick("response_sigma", sigma),
            max_tokens=max_tokens,
        )
    if args.response_median is not None:
        raise ConfigError(
            "--response-mean", mean, "and --response-median both set the median", "give one of them"
        )
    if clip is not None:
        if args.response_sigma is not None:
            raise ConfigError(
                "--response-clip-ratio", clip, "and --response-sigma both set the spread", "give one of them"
            )
        fitted = lognormal_for(mean, max_tokens, clip=clip)
    else:
        fitted = lognormal_for(mean, max_tokens, sigma=pick("response_sigma", sigma))
    return with_draw_mean(fitted, mean, num_lengths=NUM_STORED_LENGTHS, seed=getattr(args, "seed", 0))


def apply_decode_arguments(args: argparse.Namespace, workload: LLMWorkload) -> LLMWorkload:
    """``workload`` with the engine's per-step cost, the cap on sequences, the terms and the switches the flags
    give (unchanged without them)."""
    changes: dict[str, Any] = {}
    engine = engine_of(args)
    if engine not in (None, NO_ENGINE):
        cost = engine_step_cost(engine)
        changes["decode_step_overhead_s"] = cost.fixed_step_s
        changes["decode_step_overhead_per_sequence_s"] = cost.per_sequence_s
    if getattr(args, "max_num_seqs", None) is not None:
        changes["max_concurrent_sequences"] = args.max_num_seqs
    for term in terms_of(getattr(args, "terms", None)):
        changes[TERMS[term]] = True
    if getattr(args, "activation_recompute", False):
        changes["activation_recompute"] = True
    if getattr(args, "no_reference_model", False):
        changes["reference_model"] = False
    return attrs.evolve(workload, **changes) if changes else workload


def engine_of(args: argparse.Namespace) -> str | None:
    """The engine whose cost the flags ask for: ``--engine``, else :data:`DEFAULT_ENGINE` unless a per-step
    overhead is given or the device is the CPU preset (then ``None``: those seconds, or none, price the step; the
    table holds GPU engines only); raises when both are given."""
    engine = getattr(args, "engine", None)
    overhead = any(
        getattr(args, dest, None) is not None
        for dest in ("decode_step_overhead_s", "decode_step_overhead_per_sequence_s")
    )
    if engine is None:
        on_cpu = str(getattr(args, "device", None)).upper() == "CPU"
        return None if overhead or on_cpu else DEFAULT_ENGINE
    if overhead and engine != NO_ENGINE:
        raise ConfigError(
            "--engine", engine, "and --decode-step-overhead-s (or -per-sequence-s) both set the per-step cost",
            "give one of them",
        )  # fmt: skip
    return engine


def terms_of(text: str | None) -> list[str]:
    """The term names of a ``--terms`` value (``all``, the default when ``None``: every one; ``none``: no one);
    raises naming the unknown ones."""
    if text is None or text.strip() == "all":
        return list(TERMS)
    if text.strip() == "none":
        return []
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in TERMS]
    if unknown or not names:
        raise ConfigError(
            "--terms", text, f"names no model term {unknown}", f"use {', '.join(TERMS)}, all or none"
        )
    return names


def decode_flags(args: argparse.Namespace, workload: LLMWorkload) -> list[str]:
    """The flags of this module, resolved (for ``provenance.command``): the engine (given or the default) and the
    terms spelled out, so that the command re-synthesizes the same trace whatever the defaults become (the seconds
    the engine set are in the provenance's workload, which re-synthesizes it whatever the table becomes)."""
    parts: list[str] = []
    engine = engine_of(args)
    if engine is not None:
        parts += ["--engine", engine]
    if getattr(args, "max_num_seqs", None) is not None:
        parts += ["--max-num-seqs", str(workload.max_concurrent_sequences)]
    terms = terms_of(getattr(args, "terms", None))
    parts += ["--terms", ",".join(terms) if terms else "none"]
    if getattr(args, "activation_recompute", False):
        parts.append("--activation-recompute")
    if getattr(args, "no_reference_model", False):
        parts.append("--no-reference-model")
    return parts


def response_provenance(args: argparse.Namespace, workload: LLMWorkload) -> dict[str, Any]:
    """What the flags said of the response lengths and the engine, for a synthesized trace's provenance."""
    out: dict[str, Any] = {}
    if getattr(args, "response_mean", None) is not None:
        out["response_lengths_from"] = {
            "mean": args.response_mean,
            "clip_ratio": args.response_clip_ratio,
            "sigma": None if args.response_clip_ratio is not None else workload.response.sigma,
            "fitted": {"median_tokens": workload.response.median_tokens, "sigma": workload.response.sigma},
        }
    engine = engine_of(args)
    if engine not in (None, NO_ENGINE):
        cost = engine_step_cost(engine)
        out["engine"] = {
            "key": cost.key,
            "engine": cost.engine,
            "device": cost.device,
            "fixed_step_s": cost.fixed_step_s,
            "per_sequence_s": cost.per_sequence_s,
            "per_sequence_from": cost.per_sequence_source,
            "source": cost.source,
        }
    return out
