"""Response-length distributions from the statistics a run publishes: a lognormal cut at the generation limit.

RL systems log a batch's mean response length, often its share of responses cut at the limit (veRL's
``response_length/clip_ratio``), its longest response (``response_length/max``) or its median. :func:`lognormal_for` turns the mean and one more statistic into the
:class:`~rlinf.analytic.llm_workload.ResponseLengths` that has them: a lognormal of median ``m`` and log-spread ``sigma``
whose draws are cut at ``max_tokens`` (so the responses that would run longer end at the limit, as they do).

The formulas are the continuous ones (for ``X`` lognormal, ``E[min(X, L)]`` and ``P(X >= L)``); a synthesized
trace draws a few thousand whole-token lengths from the result, whose statistics are within sampling noise of them.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import attrs
import numpy as np

from rlinf.analytic.llm_workload import ResponseLengths
from rlinf.core.errors import ConfigError, require

STANDARD_NORMAL = NormalDist()
MAX_SIGMA = 10.0


def clipped_mean(median: float, sigma: float, max_tokens: float) -> float:
    """``E[min(X, max_tokens)]`` for ``X`` lognormal with this median and log-spread."""
    if sigma == 0:
        return min(median, max_tokens)
    mu, log_limit = math.log(median), math.log(max_tokens)
    below = median * math.exp(sigma**2 / 2) * STANDARD_NORMAL.cdf((log_limit - mu - sigma**2) / sigma)
    return below + max_tokens * (1.0 - STANDARD_NORMAL.cdf((log_limit - mu) / sigma))


def clip_ratio(median: float, sigma: float, max_tokens: float) -> float:
    """``P(X >= max_tokens)``: the share of responses cut at the limit."""
    if sigma == 0:
        return 1.0 if median >= max_tokens else 0.0
    return 1.0 - STANDARD_NORMAL.cdf((math.log(max_tokens) - math.log(median)) / sigma)


def lognormal_for(
    mean_tokens: float,
    max_tokens: int,
    *,
    sigma: float | None = None,
    clip: float | None = None,
    median: float | None = None,
    longest: tuple[float, int] | None = None,
) -> ResponseLengths:
    """The cut lognormal whose mean is ``mean_tokens`` and which has exactly one more given statistic: its
    ``sigma``, its share of responses cut at the limit (``clip``), its ``median``, or the ``longest`` of a batch,
    given as (longest response, responses in the batch) and read as the expected maximum of that many draws
    (Blom's plotting position for the largest of ``n`` normal log-lengths, below the limit)."""
    require(
        1 <= mean_tokens < max_tokens,
        "response mean",
        mean_tokens,
        f"must lie in [1, the generation limit {max_tokens})",
        "give the mean response length the run logged",
    )
    options = (("sigma", sigma), ("clip ratio", clip), ("median", median), ("longest", longest))
    given = [name for name, value in options if value is not None]
    require(
        len(given) == 1,
        "response statistics",
        given,
        "need exactly one of sigma, clip ratio, median or longest response besides the mean",
        "give one of them (the other follows)",
    )
    if sigma is not None:
        require(
            0 <= sigma <= MAX_SIGMA,
            "response sigma",
            sigma,
            f"must lie in [0, {MAX_SIGMA:g}]",
            "use e.g. 0.6",
        )
        fitted = _median_for_mean(mean_tokens, max_tokens, sigma)
        return ResponseLengths(median_tokens=fitted, sigma=sigma, max_tokens=max_tokens)
    if clip is not None:
        return _from_clip_ratio(mean_tokens, max_tokens, clip)
    if longest is not None:
        return _from_longest(mean_tokens, max_tokens, *longest)
    assert median is not None
    return _from_median(mean_tokens, max_tokens, median)


def _median_for_mean(mean: float, limit: int, sigma: float) -> float:
    """The median whose cut mean is ``mean`` (the cut mean grows with the median)."""
    high = float(limit)
    if clipped_mean(high, sigma, limit) < mean:
        raise ConfigError(
            "response mean", mean, f"is more than a lognormal of sigma {sigma:g} cut at {limit} can have",
            "lower the sigma or raise the generation limit",
        )  # fmt: skip
    return _bisect(lambda m: clipped_mean(m, sigma, limit) - mean, 1e-9, high, log_scale=True)


def _from_clip_ratio(mean: float, limit: int, clip: float) -> ResponseLengths:
    """The sigma (and median) whose cut mean is ``mean`` with ``clip`` of the responses at the limit: with the
    clip ratio held, a wider spread moves mass down, so the cut mean falls as sigma grows."""
    require(
        0 < clip < 1, "response clip ratio", clip, "must lie in (0, 1)", "give the share cut at the limit"
    )
    z = STANDARD_NORMAL.inv_cdf(1.0 - clip)

    def mean_at(sigma: float) -> float:
        return clipped_mean(limit * math.exp(-sigma * z), sigma, limit)

    tight, wide = 1e-6, MAX_SIGMA
    if not mean_at(wide) <= mean <= mean_at(tight):
        raise ConfigError(
            "response clip ratio", clip,
            f"cannot go with a mean of {mean:g} tokens under a limit of {limit} (a lognormal allows "
            f"{mean_at(wide):.0f}-{mean_at(tight):.0f})",
            "check the mean, the limit and the clip ratio the run logged",
        )  # fmt: skip
    sigma = _bisect(lambda s: mean - mean_at(s), tight, wide)
    return ResponseLengths(median_tokens=limit * math.exp(-sigma * z), sigma=sigma, max_tokens=limit)


def _from_longest(mean: float, limit: int, longest: float, batch: int) -> ResponseLengths:
    """The sigma whose cut lognormal of mean ``mean`` has ``longest`` as its expected largest of ``batch`` draws
    (a wider spread puts the largest draw higher)."""
    require(
        batch >= 2,
        "responses in the batch",
        batch,
        "must be >= 2",
        "give the batch the maximum was taken over",
    )
    require(
        mean < longest < limit,
        "longest response",
        longest,
        f"must lie between the mean {mean:g} and the generation limit {limit} (a maximum at the limit says "
        "only that some responses were cut: give their share as the clip ratio)",
        "give the longest response the run logged",
    )
    z = STANDARD_NORMAL.inv_cdf((batch - 0.375) / (batch + 0.25))

    def log_gap(sigma: float) -> float:
        return math.log(_median_for_mean(mean, limit, sigma)) + sigma * z - math.log(longest)

    sigma = _bisect(log_gap, 1e-6, _widest_sigma(mean, limit))
    return ResponseLengths(median_tokens=_median_for_mean(mean, limit, sigma), sigma=sigma, max_tokens=limit)


def _widest_sigma(mean: float, limit: int) -> float:
    """The largest sigma a cut lognormal of this mean can have (its cut mean at a median of the limit)."""
    if clipped_mean(limit, MAX_SIGMA, limit) >= mean:  # a cut mean falls from the limit to half of it
        return MAX_SIGMA
    return _bisect(lambda s: mean - clipped_mean(limit, s, limit), 1e-6, MAX_SIGMA)


def _from_median(mean: float, limit: int, median: float) -> ResponseLengths:
    """The smallest sigma whose cut mean is ``mean`` for this median (the cut mean first grows with sigma)."""
    require(
        1 <= median <= mean,
        "response median",
        median,
        f"must lie in [1, the mean {mean:g}]",
        "check the median",
    )
    grid = [i * MAX_SIGMA / 2000 for i in range(2001)]
    for low, high in zip(grid, grid[1:], strict=False):
        if clipped_mean(median, high, limit) >= mean:
            sigma = _bisect(lambda s: clipped_mean(median, s, limit) - mean, low, high)
            return ResponseLengths(median_tokens=median, sigma=sigma, max_tokens=limit)
    raise ConfigError(
        "response median", median, f"with a mean of {mean:g} under a limit of {limit} fits no lognormal",
        "check the statistics the run logged",
    )  # fmt: skip


def _bisect(f, low: float, high: float, *, log_scale: bool = False, steps: int = 200) -> float:  # type: ignore[no-untyped-def]
    """A root of the increasing ``f`` in ``[low, high]``."""
    for _ in range(steps):
        middle = math.sqrt(low * high) if log_scale else (low + high) / 2
        if f(middle) < 0:
            low = middle
        else:
            high = middle
    return math.sqrt(low * high) if log_scale else (low + high) / 2


def with_draw_mean(
    lengths: ResponseLengths, mean_tokens: float, *, num_lengths: int, seed: int
) -> ResponseLengths:
    """``lengths`` with its median moved so that the ``num_lengths`` whole-token lengths drawn with ``seed`` (as
    :func:`rlinf.analytic.synthesis.synthesize` draws them) have ``mean_tokens`` as their mean, within a token."""
    require(
        1 <= mean_tokens < lengths.max_tokens,
        "response mean",
        mean_tokens,
        f"must lie in [1, the generation limit {lengths.max_tokens})",
        "give the mean response length the run logged",
    )

    def gap(median: float) -> float:
        draw = attrs.evolve(lengths, median_tokens=median).draw(num_lengths, np.random.default_rng(seed))
        return float(draw.mean()) - mean_tokens

    high = float(lengths.max_tokens)
    if gap(high) < 0:
        raise ConfigError(
            "response mean", mean_tokens, f"is more than lengths of sigma {lengths.sigma:g} cut at "
            f"{lengths.max_tokens} can have", "lower the sigma or raise the generation limit",
        )  # fmt: skip
    return attrs.evolve(lengths, median_tokens=_bisect(gap, 1.0, high, log_scale=True, steps=60))
