"""The machine's own speed: does the same work take the same time on each core, from one second to the next?

    python benchmarks/machine_speed.py [--seconds 30] [--out docs/data/machine_speed.json] [--png docs/machine_speed.png]

One process per core, each pinned to its core and started at the same instant, runs the same fixed pure-Python
work (a chunk of :data:`CHUNK_ADDS` additions, about 3 ms) back to back and records each chunk's wall time. Run it
with nothing else on the machine: any difference between chunks is then the machine's, not this project's.

Each core's chunks are grouped in bins of :data:`BIN_S`; a bin's time is the median of its chunks. The *fast level*
of a core is the 10th percentile of its bins, and a bin is *slow* when it took more than :data:`SLOW_OVER_FAST`
times the fast level. Prints one JSON object (and writes it with its provenance to ``--out``):

* ``cores``: per core the bins' 10th, 50th and 90th percentiles (ms per chunk), the fraction of slow bins, the
  median slow bin over the median fast bin (``slow_over_fast``), and the longest run of slow bins in seconds;
* ``both_slow_fraction``: the fraction of bins slow on every core at once;
* ``bins_ms``: per core, every bin's time (the raw values the figures above follow from; :func:`summarise`).

On this project's virtual machines the same work runs at two speeds (likely other tenants on the same physical
cores: nothing of this machine's runs meanwhile), in phases that last seconds, as long as a profile probe or a plan's
measured turn. That is a noise floor under any comparison of a prediction with a measurement on such a machine
(README, "Validate the simulator against reality").
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import suite

CHUNK_ADDS = 100_000
"""Additions in one chunk of work (about 3.3 ms of one core at this machine's fast level)."""
BIN_S = 0.25
"""Seconds per bin: a chunk's time is noisy, a bin's median is not."""
SLOW_OVER_FAST = 1.25
"""A bin is slow when it took more than this times its core's fast level (the 10th percentile of its bins)."""


def _chunks(core: int, start_at: float, seconds: float, queue: Any) -> None:
    """In a child process pinned to ``core``: from ``start_at`` (``time.time()``) for ``seconds``, chunks of work
    back to back; puts ``(core, [(seconds since start, chunk seconds), ...])`` on ``queue``."""
    os.sched_setaffinity(0, {core})
    while time.time() < start_at:
        time.sleep(0.001)
    timed = []
    clock = time.perf_counter
    begin = clock()
    while clock() - begin < seconds:
        started = clock()
        total = 0
        for i in range(CHUNK_ADDS):
            total += i
        timed.append((started - begin, clock() - started))
    queue.put((core, timed))


def measure(cores: list[int], seconds: float) -> dict[int, list[float]]:
    """Per core, its bins' times in milliseconds per chunk, every core's process running at once."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    start_at = time.time() + 2.0  # time for every child to start before any measures
    children = [context.Process(target=_chunks, args=(c, start_at, seconds, queue)) for c in cores]
    for child in children:
        child.start()
    results = dict(queue.get() for _ in children)
    for child in children:
        child.join()
    bins: dict[int, list[float]] = {}
    for core, timed in sorted(results.items()):
        grouped: dict[int, list[float]] = {}
        for at_s, chunk_s in timed:
            grouped.setdefault(int(at_s / BIN_S), []).append(chunk_s)
        bins[core] = [round(1e3 * statistics.median(grouped[b]), 3) for b in sorted(grouped)]
    return bins


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarise(bins_ms: dict[str, list[float]]) -> dict[str, Any]:
    """The figures of the module docstring from every core's bins (keys: core numbers as strings)."""
    slow: dict[str, list[bool]] = {}
    cores: dict[str, dict[str, float]] = {}
    for core, values in bins_ms.items():
        fast_level = _percentile(values, 0.1)
        slow[core] = [v > SLOW_OVER_FAST * fast_level for v in values]
        slow_bins = [v for v, s in zip(values, slow[core], strict=True) if s]
        fast_bins = [v for v, s in zip(values, slow[core], strict=True) if not s]
        longest = run = 0
        for is_slow in slow[core]:
            run = run + 1 if is_slow else 0
            longest = max(longest, run)
        cores[core] = {
            "p10_ms": fast_level,
            "p50_ms": _percentile(values, 0.5),
            "p90_ms": _percentile(values, 0.9),
            "slow_fraction": sum(slow[core]) / len(values),
            "slow_over_fast": statistics.median(slow_bins) / statistics.median(fast_bins)
            if slow_bins
            else 1.0,
            "longest_slow_s": longest * BIN_S,
        }
    length = min(len(flags) for flags in slow.values())
    both = sum(all(flags[i] for flags in slow.values()) for i in range(length))
    return {"cores": cores, "both_slow_fraction": both / length}


def plot(artifact: dict[str, Any], path: Path) -> None:
    """Each core's bin times over the run and the slow threshold (of the faster core's fast level), as a PNG."""
    with suite.figure(path, (9, 3.2), dpi=110) as axes:
        for core, values in artifact["bins_ms"].items():
            seconds = [artifact["bin_s"] * (i + 0.5) for i in range(len(values))]
            summary = artifact["cores"][core]
            axes.plot(
                seconds,
                values,
                lw=1,
                label=f"core {core}: slow {100 * summary['slow_fraction']:.0f}% of the time",
            )
        fast = min(summary["p10_ms"] for summary in artifact["cores"].values())
        axes.axhline(
            fast * artifact["slow_over_fast_threshold"], color="grey", ls="--", lw=0.8, label="slow threshold"
        )
        axes.set_xlabel("seconds")
        axes.set_ylabel("ms per chunk of fixed work")
        axes.set_ylim(bottom=0)
        p = artifact["provenance"]
        axes.set_title(
            f"Same work, same core: {p['date'][:10]}, commit {p['commit']}, nothing else running", fontsize=10
        )
        axes.legend(loc="lower right", fontsize=8)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="how long each core works (default 30)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON artifact here")
    parser.add_argument("--png", type=Path, default=None, help="also plot each core's bins over time here")
    args = parser.parse_args(argv)
    if args.seconds <= 1:
        print(
            f"machine_speed: --seconds={args.seconds}: too short for a bin; fix: use at least 2",
            file=sys.stderr,
        )
        return 2
    started = suite.begin("python benchmarks/machine_speed.py", argv)
    cores = sorted(os.sched_getaffinity(0))
    bins = {str(core): values for core, values in measure(cores, args.seconds).items()}
    body = {
        "seconds": args.seconds,
        "chunk_adds": CHUNK_ADDS,
        "bin_s": BIN_S,
        "slow_over_fast_threshold": SLOW_OVER_FAST,
        **summarise(bins),
        "bins_ms": bins,
    }
    written = suite.write_artifact(args.out, body, started) if args.out else suite.document(body, started)
    if args.png:
        plot(written, args.png)
    print(json.dumps({k: v for k, v in written.items() if k != "bins_ms"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
