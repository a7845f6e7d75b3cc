"""Typed command-line values: argparse ``type=`` functions that refuse what a command cannot use (NaN, infinity,
negative seeds, counts out of range) while the command line is parsed, before any work starts.

Each returns a converter; a refused value becomes ``rlinf: error: --flag='text': problem; fix: ...`` (one line,
exit 2) through :class:`rlinf.cli.Parser`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from rlinf.core import limits

MAX_SEED = 2**32 - 1
"""Seeds go to numpy, torch and Python's random; every one of them takes 0 .. 2**32 - 1."""


def count(minimum: int = 1, maximum: int | None = None, *, limit: str | None = None) -> Callable[[str], int]:
    """A whole number in ``[minimum, maximum]``; ``limit`` names a field of :class:`rlinf.core.limits.Limits` that caps
    it instead of ``maximum`` (read when the flag is parsed, so its environment variable applies)."""

    def convert(text: str) -> int:
        value = _whole(text)
        high = getattr(limits.current(), limit) if limit is not None else maximum
        if value < minimum:
            raise _refused(text, f"must be >= {minimum}")
        if high is not None and value > high:
            hint = f" (or raise the limit with {limits.env_name(limit)}=N)" if limit is not None else ""
            raise _refused(text, f"must be <= {high:,}{hint}")
        return value

    convert.__name__ = "integer"
    return convert


def seed(text: str) -> int:
    """A random seed: a whole number in 0 .. 2**32 - 1."""
    value = _whole(text)
    if not 0 <= value <= MAX_SEED:
        raise _refused(text, f"must be an integer in 0-{MAX_SEED}")
    return value


def real(
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    exclusive_minimum: bool = False,
    exclusive_maximum: bool = False,
) -> Callable[[str], float]:
    """A finite number in the given range (``exclusive_*``: the bound itself is refused)."""

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise _refused(text, "must be a number") from None
        if not math.isfinite(value):
            raise _refused(text, "must be a finite number")
        if minimum is not None and (value < minimum or (exclusive_minimum and value == minimum)):
            raise _refused(text, f"must be a finite number {'>' if exclusive_minimum else '>='} {minimum:g}")
        if maximum is not None and (value > maximum or (exclusive_maximum and value == maximum)):
            raise _refused(text, f"must be a finite number {'<' if exclusive_maximum else '<='} {maximum:g}")
        return value

    convert.__name__ = "number"
    return convert


positive_seconds = real(0.0, exclusive_minimum=True)
"""Seconds > 0 (time limits, budgets)."""


def _whole(text: str) -> int:
    stripped = text.strip()
    if (
        len(stripped) > 30
    ):  # no count or seed has more digits; int() of thousands of digits is slow or refused
        raise _refused(text[:27] + "...", "must be a whole number of at most 30 digits")
    try:
        return int(stripped)
    except ValueError:
        raise _refused(text, "must be a whole number") from None


def _refused(text: str, problem: str) -> argparse.ArgumentTypeError:
    """The error argparse reports as ``argument --flag: =VALUE: problem``, which :class:`rlinf.cli.Parser` prints
    as ``--flag=VALUE: problem`` (a plain number shown as written, anything else quoted)."""
    try:
        float(text)
        shown = text if text.strip() == text and text.isprintable() else repr(text)
    except ValueError:
        shown = repr(text)
    return argparse.ArgumentTypeError(f"={shown}: {problem}")
