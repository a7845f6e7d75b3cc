"""What a capacity sweep is asked: cluster sizes, a price, a target, strategies and what-if series.

Device lists are written as in the CLI: ``8,16,32`` or with an ellipsis, ``8,16,...,1024`` (a geometric
progression when the second term is a whole multiple >= 2 of the first, as here: 8, 16, 32, ..., 1024) or
``8,16,24,...,64`` (three or more terms with a constant step: arithmetic).
"""

from __future__ import annotations

import attrs

from rlinf.core import limits
from rlinf.core.errors import ConfigError, is_number, require, to_tuple

TARGET_KINDS = ("throughput", "deadline")


@attrs.frozen(kw_only=True)
class Target:
    """What the smallest sufficient cluster must reach: a throughput (units/s) or an iteration deadline (s)."""

    kind: str
    """``throughput`` (units per second, at least) or ``deadline`` (iteration seconds, at most)."""
    value: float

    def __attrs_post_init__(self) -> None:
        require(
            self.kind in TARGET_KINDS,
            "target.kind",
            self.kind,
            "unknown target",
            f"use one of {TARGET_KINDS}",
        )
        flag = "--target-throughput" if self.kind == "throughput" else "--deadline-s"
        require(
            is_number(self.value) and self.value > 0,
            flag,
            self.value,
            "must be a finite number > 0",
            f"give {flag} a positive number",
        )

    def met_by(self, iteration_s: float, units_per_s: float) -> bool:
        """Whether an iteration of ``iteration_s`` seconds at ``units_per_s`` reaches the target."""
        if self.kind == "throughput":
            return units_per_s >= self.value
        return iteration_s <= self.value

    def describe(self, unit: str) -> str:
        """``throughput >= 50 samples/s`` or ``iteration <= 120 s``."""
        if self.kind == "throughput":
            return f"throughput >= {self.value:g} {unit}/s"
        return f"iteration <= {self.value:g} s"


@attrs.frozen(kw_only=True)
class SweepOptions:
    """How hard the planner searches each cluster size, and what the devices cost."""

    device_counts: tuple[int, ...] = attrs.field(converter=to_tuple)
    """Cluster sizes to sweep, ascending, distinct."""
    strategies: tuple[str, ...] = attrs.field(converter=to_tuple)
    """Plan sources per size: ``best`` (the planner) and fixed baselines (see :mod:`rlinf.capacity.planning`)."""
    price_per_device_hour: float | None = None
    """Currency per device-hour; ``None`` reports device-hours only."""
    target: Target | None = None
    search_time_s: float = 5.0
    """CP-SAT time limit of the ``best`` search per cluster size (the baselines need none)."""
    seed: int = 0
    max_staleness: int = 0
    """The staleness bound the ``best`` search may use (asynchronous plans); the baselines stay synchronous."""

    def __attrs_post_init__(self) -> None:
        require(
            len(self.device_counts) > 0,
            "--devices",
            "",
            "is empty",
            "list cluster sizes, e.g. 8,16,32 or 8,16,...,1024",
        )
        for count in self.device_counts:
            require(
                isinstance(count, int) and not isinstance(count, bool) and count >= 1,
                "--devices",
                count,
                "must be an integer >= 1",
                "list whole device counts",
            )
        require(
            list(self.device_counts) == sorted(set(self.device_counts)),
            "--devices",
            ",".join(map(str, self.device_counts)),
            "must be ascending without repeats",
            "sort the list and drop duplicates",
        )
        require(len(self.strategies) > 0, "--modes", "", "is empty", "name at least one mode")
        if self.price_per_device_hour is not None:
            require(
                is_number(self.price_per_device_hour) and self.price_per_device_hour > 0,
                "--price-per-device-hour",
                self.price_per_device_hour,
                "must be a finite number > 0",
                "give the price of one device for one hour, e.g. 2.5",
            )
        require(
            is_number(self.search_time_s) and self.search_time_s > 0,
            "--search-time-s",
            self.search_time_s,
            "must be > 0",
            "give the planner a few seconds per size",
        )


def parse_device_counts(text: str) -> tuple[int, ...]:
    """``8,16,32`` or ``8,16,...,1024`` -> ascending device counts; raises :class:`ConfigError` naming ``--devices``."""
    parts = [part.strip() for part in str(text).split(",") if part.strip()]
    if not parts:
        raise ConfigError("--devices", text, "is empty", "list cluster sizes, e.g. 8,16,32 or 8,16,...,1024")
    if "..." not in parts:
        _check_size(len(parts), text)
        return tuple(_count(part, text) for part in parts)
    require(
        parts.count("...") == 1 and parts.index("...") >= 2 and parts.index("...") == len(parts) - 2,
        "--devices",
        text,
        "an ellipsis needs two or more terms before it and exactly one after",
        "write e.g. 8,16,...,1024",
    )
    head = [_count(part, text) for part in parts[:-2]]
    last = _count(parts[-1], text)
    return tuple(_progression(head, last, text))


def _check_size(num_sizes: int, text: str) -> None:
    bound = limits.current().max_sweep_sizes
    if num_sizes > bound:
        raise limits.exceeded(
            "--devices", text, f"cluster sizes (it expands to {num_sizes:,})", "max_sweep_sizes", bound
        )


def _count(part: str, text: str) -> int:
    bound = limits.current().max_devices
    digits = part.lstrip("+").lstrip("0")
    if part.isascii() and digits.isdigit() and len(digits) > len(str(bound)):
        raise limits.exceeded("--devices", text, "devices", "max_devices", bound)
    try:
        value = int(part)
    except ValueError:
        raise ConfigError(
            "--devices", text, f"{part!r} is not a whole number", "write e.g. 8,16,...,1024"
        ) from None
    require(value >= 1, "--devices", text, f"{value} is not >= 1", "use positive device counts")
    if value > bound:
        raise limits.exceeded("--devices", text, "devices", "max_devices", bound)
    return value


def _progression(head: list[int], last: int, text: str) -> list[int]:
    first, second = head[0], head[1]
    geometric = second % first == 0 and second // first >= 2
    if len(head) >= 3:
        steps = {b - a for a, b in zip(head, head[1:], strict=False)}
        geometric = len(steps) != 1
    if geometric:
        ratio = second // first
        expected = [first * ratio**i for i in range(len(head))]
        require(
            head == expected,
            "--devices",
            text,
            f"the terms before '...' are not a progression with ratio {ratio}",
            "write e.g. 8,16,32,...,1024",
        )
        counts = list(head)
        while counts[-1] < last:
            counts.append(counts[-1] * ratio)
    else:
        step = second - first
        require(
            step > 0 and all(b - a == step for a, b in zip(head, head[1:], strict=False)),
            "--devices",
            text,
            "the terms before '...' are not an ascending progression",
            "write e.g. 8,16,24,...,64 or 8,16,...,1024",
        )
        _check_size(len(head) + max(0, -(-(last - head[-1]) // step)), text)
        counts = list(head)
        while counts[-1] < last:
            counts.append(counts[-1] + step)
    require(
        counts[-1] == last,
        "--devices",
        text,
        f"the progression does not reach {last} (it passes {counts[-1]})",
        f"end it at a term of the progression, e.g. {counts[-2] if len(counts) > 1 else counts[-1]}",
    )
    _check_size(len(counts), text)
    return counts
