"""Simulator fidelity: how well predicted iteration times match measured ones, plan by plan (pure functions).

* the error of each plan in rlinf's one error measure, ``measured / predicted - 1`` (the README's, ``rlinf train``'s
  and this report's), its absolute value's median and maximum;
* the bias: the signed median of ``measured / predicted - 1`` over the plans (positive: predictions too fast), the
  part of the error that is systematic rather than spread; the verdict asks for both (:data:`MAX_BIAS`,
  :data:`MIN_WITHIN_TURNS`);
* top-1: whether the plan the simulator ranks fastest is the plan measured fastest, and the regret when it is
  not (how much slower, measured, the predicted-best plan is than the measured best);
* Kendall's tau-b between the two rankings (ties in either counted as in the usual tau-b);
* when the plans' per-iteration times are given, whether a top-1 miss is more than noise: a one-sided
  permutation test of "the predicted-best plan's iterations are slower than the measured best's" on the
  difference of medians (:func:`slower_p_value`);
* when a plan was measured in turns (each with fresh worker processes), whether its prediction lies within the
  range of its turns' medians: with ``n`` turns, a range that holds the plan's typical turn time with probability
  ``1 - 2 / 2**n`` (87.5% for 4 turns: the sign test's interval for a median), so a prediction outside it is off
  by more than the measurement's own spread (:attr:`PlanFidelity.within_turn_range`).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from rlinf.core.errors import require


@attrs.frozen(kw_only=True)
class PlanFidelity:
    """One plan's predicted and measured iteration time."""

    name: str
    """How the plan is shown (``Plan.describe()``)."""
    predicted_s: float
    measured_s: float
    """Median of the measured iterations (warm-up excluded)."""
    source: str = ""
    """Why the plan is in the comparison (``planner#1``, ``collocated``, ...)."""
    oversubscribed: bool = False
    """More logical devices than cores (the simulator does not model cores shared between devices)."""
    in_profile: bool = False
    """The plan was also profiled: its own measured samples are in the trace its prediction comes from."""
    measured_each_s: tuple[float, ...] = ()
    """Every measured iteration (warm-up excluded), in the order run; empty when not kept."""
    turn_sizes: tuple[int, ...] = ()
    """Measured iterations per turn, in the order run (``measured_each_s`` is the turns' iterations one turn
    after the other); empty when the turns are not known."""

    def __attrs_post_init__(self) -> None:
        require(self.measured_s > 0, f"{self.name}.measured_s", self.measured_s, "must be > 0", "measure it")
        require(
            self.predicted_s >= 0, f"{self.name}.predicted_s", self.predicted_s, "must be >= 0", "predict it"
        )
        if self.turn_sizes:
            require(
                sum(self.turn_sizes) == len(self.measured_each_s) and min(self.turn_sizes) >= 1,
                f"{self.name}.turn_sizes",
                self.turn_sizes,
                f"must be positive and add up to the {len(self.measured_each_s)} measured iterations",
                "give each turn's count of measured iterations",
            )

    @property
    def turn_medians_s(self) -> tuple[float, ...]:
        """Each turn's median iteration time, in the order run (empty without :attr:`turn_sizes`)."""
        medians, start = [], 0
        for size in self.turn_sizes:
            medians.append(statistics.median(self.measured_each_s[start : start + size]))
            start += size
        return tuple(medians)

    @property
    def within_turn_range(self) -> bool | None:
        """Whether the prediction lies between the smallest and the largest of :attr:`turn_medians_s` (``None``
        with fewer than 2 turns): outside it, the prediction is off by more than the plan's own spread from one
        set of worker processes to the next."""
        medians = self.turn_medians_s
        if len(medians) < 2:
            return None
        return min(medians) <= self.predicted_s <= max(medians)

    @property
    def error(self) -> float:
        """``|measured / predicted - 1|`` (:func:`relative_error`)."""
        return relative_error(self.predicted_s, self.measured_s)


MAX_BIAS = 0.05
"""A trustworthy model's ``|bias|`` over the validated plans."""
MIN_WITHIN_TURNS = 0.8
"""The share of plans whose prediction lies within their own turn range that a trustworthy model reaches."""


def bias(predicted: Sequence[float], measured: Sequence[float]) -> float:
    """The signed median of ``measured / predicted - 1`` over paired times (positive: the predictions are fast)."""
    require(
        len(predicted) == len(measured) >= 1,
        "bias",
        (len(predicted), len(measured)),
        "needs pairs",
        "pair them",
    )
    return float(statistics.median(m / p - 1.0 for p, m in zip(predicted, measured, strict=True)))


@attrs.frozen(kw_only=True)
class FidelityReport:
    """Per-plan errors and ranking agreement."""

    plans: tuple[PlanFidelity, ...]
    median_error: float
    max_error: float
    top1_match: bool
    top1_regret: float
    """Measured time of the simulator's best plan over the measured best, minus 1 (0 when top-1 matches)."""
    kendall_tau: float
    top1_p_value: float | None = None
    """On a top-1 miss, the permutation test's p-value that the predicted best is measured slower than the
    measured best (small: a real miss; large: the two are within noise); ``None`` on a match or without
    per-iteration times."""
    within_turn_range: tuple[int, int] | None = None
    """How many predictions lie within the range of their plan's turn medians, out of how many plans were
    measured in at least 2 turns (:attr:`PlanFidelity.within_turn_range`); ``None`` when none was."""
    bias: float = 0.0
    """Signed median of ``measured / predicted - 1`` over the plans (:func:`bias`)."""

    @property
    def verdict(self) -> str:
        """``trustworthy`` when ``|bias| <= MAX_BIAS`` and at least :data:`MIN_WITHIN_TURNS` of the plans measured
        in turns have their prediction within their turn range; else what fails (``biased``, ``spread``, both)."""
        failures = []
        if abs(self.bias) > MAX_BIAS:
            failures.append("biased")
        if self.within_turn_range is not None:
            inside, of = self.within_turn_range
            if inside < MIN_WITHIN_TURNS * of:
                failures.append("spread")
        return " and ".join(failures) or "trustworthy"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: ``plans`` (``name``, ``source``, ``predicted_s``, ``measured_s``, ``error``),
        ``median_error``, ``max_error``, ``top1_match``, ``top1_regret``, ``top1_p_value``, ``kendall_tau``,
        ``within_turn_range`` (``[inside, of]``), ``bias`` and ``verdict``; each plan also ``turn_medians_s`` and
        ``within_turn_range``."""
        return {
            "plans": [
                {
                    "name": p.name,
                    "source": p.source,
                    "predicted_s": p.predicted_s,
                    "measured_s": p.measured_s,
                    "error": p.error,
                    "oversubscribed": p.oversubscribed,
                    "in_profile": p.in_profile,
                    "measured_each_s": list(p.measured_each_s),
                    "turn_medians_s": list(p.turn_medians_s),
                    "within_turn_range": p.within_turn_range,
                }
                for p in self.plans
            ],
            "median_error": self.median_error,
            "max_error": self.max_error,
            "bias": self.bias,
            "verdict": self.verdict,
            "top1_match": self.top1_match,
            "top1_regret": self.top1_regret,
            "top1_p_value": self.top1_p_value,
            "kendall_tau": self.kendall_tau,
            "within_turn_range": list(self.within_turn_range) if self.within_turn_range else None,
        }


def relative_error(predicted: float, measured: float) -> float:
    """``|measured / predicted - 1|``: rlinf's one error measure, as an absolute value."""
    require(predicted > 0, "predicted", predicted, "must be > 0", "give a predicted time")
    return abs(measured / predicted - 1)


def kendall_tau(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Kendall's tau-b of two paired sequences: +1 same order, -1 reversed; nan when either is constant."""
    require(len(xs) == len(ys), "kendall_tau", (len(xs), len(ys)), "sequences differ in length", "pair them")
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(xs)):
        for j in range(i + 1, len(xs)):
            dx, dy = xs[i] - xs[j], ys[i] - ys[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / denominator if denominator > 0 else math.nan


def slower_p_value(
    slower: Sequence[float], faster: Sequence[float], *, num_permutations: int = 10_000, seed: int = 0
) -> float:
    """One-sided permutation test that ``slower``'s samples are slower than ``faster``'s: the share of random
    relabellings of the pooled samples whose difference of medians is at least the observed one (exact over
    every relabelling when there are fewer than ``num_permutations``)."""
    require(len(slower) >= 1 and len(faster) >= 1, "samples", (len(slower), len(faster)), "empty", "measure")
    pooled = np.asarray([*slower, *faster], dtype=float)
    size = len(slower)
    observed = float(np.median(slower) - np.median(faster))
    if math.comb(len(pooled), size) <= num_permutations:
        picks = [np.asarray(c) for c in itertools.combinations(range(len(pooled)), size)]
    else:
        rng = np.random.default_rng(seed)
        picks = [rng.permutation(len(pooled))[:size] for _ in range(num_permutations)]
    hits = 0
    for pick in picks:
        mask = np.zeros(len(pooled), dtype=bool)
        mask[pick] = True
        hits += float(np.median(pooled[mask]) - np.median(pooled[~mask])) >= observed - 1e-12
    return hits / len(picks)


def report(plans: Sequence[PlanFidelity]) -> FidelityReport:
    """Errors, top-1 agreement and Kendall's tau over ``plans`` (at least one)."""
    require(len(plans) >= 1, "plans", len(plans), "nothing to compare", "measure at least one plan")
    errors = [p.error for p in plans]
    predicted = [p.predicted_s for p in plans]
    measured = [p.measured_s for p in plans]
    predicted_best = min(range(len(plans)), key=lambda i: (predicted[i], i))
    measured_best = min(range(len(plans)), key=lambda i: (measured[i], i))
    slower, faster = plans[predicted_best].measured_each_s, plans[measured_best].measured_each_s
    p_value = None
    if predicted_best != measured_best and slower and faster:
        p_value = slower_p_value(slower, faster)
    verdicts = [p.within_turn_range for p in plans if p.within_turn_range is not None]
    return FidelityReport(
        plans=tuple(plans),
        median_error=float(statistics.median(errors)),
        max_error=max(errors),
        top1_match=predicted_best == measured_best,
        top1_regret=measured[predicted_best] / measured[measured_best] - 1.0,
        kendall_tau=kendall_tau(predicted, measured) if len(plans) >= 2 else math.nan,
        top1_p_value=p_value,
        within_turn_range=(sum(verdicts), len(verdicts)) if verdicts else None,
        bias=bias(predicted, measured),
    )
