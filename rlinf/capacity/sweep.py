"""The capacity sweep: for each series and cluster size, each strategy's plan, simulated.

:func:`sweep` is a function of its inputs: cells run in parallel processes (``jobs``), each cell is a pure
computation, and rows are sorted before they are returned, so the result does not depend on ``jobs`` or on the
order in which cells finish. A progress bar (tqdm, on stderr) is shown on request.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import sys
import warnings
from collections.abc import Sequence

import attrs
from tqdm import tqdm

from rlinf.capacity.config import SweepOptions
from rlinf.capacity.planning import check_strategies, propose
from rlinf.capacity.result import BASELINE, CapacityResult, CapacityRow
from rlinf.capacity.whatif import WhatIf, apply_whatif
from rlinf.core.cluster import Cluster
from rlinf.core.costs import fit
from rlinf.core.errors import ConfigError, RlinfWarning
from rlinf.core.lowering import lower
from rlinf.core.plan import Plan
from rlinf.core.timeline import Timeline
from rlinf.core.trace import MOVEMENT_OPS, Trace
from simulator import simulate

WAITING = "waiting"
"""Breakdown key for critical-path gaps (nothing on the chain was running)."""


@attrs.frozen(kw_only=True)
class Cell:
    """One unit of parallel work: a strategy on one cluster size of one series."""

    series: str
    trace: Trace
    num_devices: int
    strategy: str
    search_time_s: float
    seed: int
    max_staleness: int = 0


def check_trace(trace: Trace, source: str = "trace") -> None:
    """Raise :class:`ConfigError` when a component has no compute samples (nothing to predict its cost from)."""
    covered = {s.component for s in trace.samples if s.op not in MOVEMENT_OPS}
    for name in trace.workflow.component_names:
        if name not in covered:
            raise ConfigError(
                source,
                name,
                f"has no cost samples for component {name!r}",
                "profile that component or synthesize a trace that includes it (rlinf trace synth)",
            )


def cluster_for(trace: Trace, num_devices: int) -> Cluster:
    """The trace's kind of cluster with ``num_devices`` devices (whole nodes above one node)."""
    return trace.cluster.with_num_devices(num_devices)


def simulate_plan(trace: Trace, num_devices: int, plan: Plan, *, seed: int = 0) -> Timeline:
    """Lower and simulate ``plan`` exactly as ``rlinf simulate`` does (expected response lengths)."""
    cluster = cluster_for(trace, num_devices)
    program = lower(trace.workflow, plan, cluster)
    return simulate(program, fit(trace, cluster), seed=seed)


def breakdown(timeline: Timeline) -> tuple[tuple[str, float], ...]:
    """Critical-path seconds per component (movement ops by kind) plus ``waiting`` for gaps, largest first;
    the values add up to the iteration time."""
    seconds: dict[str, float] = {}
    for index in timeline.critical_path():
        span = timeline.spans[index]
        key = span.component if span.kind == "compute" else span.kind
        seconds[key] = seconds.get(key, 0.0) + span.seconds
    gap = timeline.iteration_s - sum(seconds.values())
    if gap > 1e-9 * max(1.0, timeline.iteration_s):
        seconds[WAITING] = gap
    return tuple(sorted(seconds.items(), key=lambda item: (-item[1], item[0])))


def evaluate(cell: Cell) -> CapacityRow:
    """Plan one cell with its strategy and simulate the plan (runs in a worker process)."""
    trace, n = cell.trace, cell.num_devices
    cluster = cluster_for(trace, n)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RlinfWarning)
        costs = fit(trace, cluster)
        proposal = propose(
            trace.workflow,
            cluster,
            costs,
            cell.strategy,
            time_limit_s=cell.search_time_s,
            seed=cell.seed,
            max_staleness=cell.max_staleness,
        )
        timeline = None
        if proposal.plan is not None:
            timeline = simulate(lower(trace.workflow, proposal.plan, cluster), costs, seed=cell.seed)
    notes = tuple(dict.fromkeys(str(w.message) for w in caught))
    empty = CapacityRow(
        series=cell.series,
        strategy=cell.strategy,
        num_devices=n,
        plan=None,
        problem=proposal.problem,
        warnings=notes,
    )
    if timeline is None or proposal.plan is None:
        return empty
    throughput = timeline.throughput()
    parts = breakdown(timeline)
    compute_parts = [(k, v) for k, v in parts if k != WAITING] or list(parts)
    return attrs.evolve(
        empty,
        plan=proposal.plan,
        problem="",
        source=proposal.source or cell.strategy,
        mode=proposal.plan.mode,
        num_devices_used=len(proposal.plan.devices_used),
        iteration_s=timeline.iteration_s,
        units_per_s=throughput.get(f"{timeline.unit}_per_s", 0.0),
        samples_per_s=throughput.get("samples_per_s", throughput.get(f"{timeline.unit}_per_s", 0.0)),
        tokens_per_s=throughput.get("tokens_per_s", 0.0),
        samples_per_iteration=timeline.samples_per_iteration,
        tokens_per_iteration=timeline.tokens_per_iteration,
        breakdown_s=parts,
        bottleneck=max(compute_parts, key=lambda item: item[1])[0],
        bubble_fraction=timeline.bubble_fraction(),
        peak_memory_bytes=max(timeline.peak_memory_bytes, default=0),
    )


def default_jobs() -> int:
    """Worker processes when none are asked for: one per CPU."""
    return os.cpu_count() or 1


def sweep(
    trace: Trace,
    options: SweepOptions,
    *,
    whatifs: Sequence[WhatIf] = (),
    trace_name: str = "trace",
    jobs: int | None = None,
    progress: bool = False,
) -> CapacityResult:
    """Every strategy of ``options`` on every cluster size, for the trace and each what-if series.

    Raises :class:`ConfigError` for a trace without samples for a component, unknown strategies, duplicate
    series and sizes the trace's cluster cannot take (not whole nodes)."""
    check_strategies(options.strategies)
    check_trace(trace, trace_name)
    labels = [w.label for w in whatifs]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise ConfigError("--set", duplicates[0], "is given twice", "give each what-if series once")
    series = [(BASELINE, trace)] + [(w.label, _applied(trace, w)) for w in whatifs]
    for label, series_trace in series[1:]:
        check_trace(series_trace, f"--set {label}")
    for n in options.device_counts:
        cluster_for(trace, n)  # raises for sizes that are not whole nodes
    cells = [
        Cell(
            series=label,
            trace=series_trace,
            num_devices=n,
            strategy=strategy,
            search_time_s=options.search_time_s,
            seed=options.seed,
            max_staleness=options.max_staleness,
        )
        for label, series_trace in series
        for n in sorted(options.device_counts, reverse=True)  # large sizes first: they take longest
        for strategy in options.strategies
    ]
    rows = _best_of_all(_run(cells, jobs or default_jobs(), progress))
    order = {label: i for i, (label, _) in enumerate(series)}
    strategy_order = {s: i for i, s in enumerate(options.strategies)}
    rows.sort(key=lambda r: (order[r.series], strategy_order[r.strategy], r.num_devices))
    return CapacityResult(
        trace_name=trace_name,
        workflow_name=trace.workflow.name,
        unit=trace.workflow.unit,
        device_name=trace.cluster.device.name,
        provenance=dict(trace.provenance),
        options=options,
        whatifs=tuple(whatifs),
        rows=rows,
        series_devices={label: t.cluster.device.name for label, t in series},
    )


def _applied(trace: Trace, whatif: WhatIf) -> Trace:
    """The what-if series' trace; an error it causes in the trace is named by its ``--set``."""
    try:
        return apply_whatif(trace, whatif)
    except ConfigError as error:
        if error.field.startswith("--set"):
            raise
        raise ConfigError(
            "--set",
            whatif.label,
            f"makes {error.field}={error.value!r}: {error.problem}",
            "use a smaller change",
        ) from None


def _best_of_all(rows: list[CapacityRow]) -> list[CapacityRow]:
    """``best`` is the fastest simulated plan of a size: the planner's, or a fixed mode's when that one is faster
    (a search cut short by its time budget can miss a baseline's plan)."""
    by_cell: dict[tuple[str, int], list[CapacityRow]] = {}
    for row in rows:
        by_cell.setdefault((row.series, row.num_devices), []).append(row)
    out = []
    for row in rows:
        if row.strategy != "best":
            out.append(row)
            continue
        fitting = [r for r in by_cell[(row.series, row.num_devices)] if r.has_plan]
        winner = min(fitting, key=lambda r: (r.iteration_s, r.strategy != "best", r.strategy), default=row)
        out.append(attrs.evolve(winner, strategy="best"))
    return out


def _run(cells: list[Cell], jobs: int, progress: bool) -> list[CapacityRow]:
    bar = tqdm(total=len(cells), desc="capacity sweep", unit="cell", disable=not progress, file=sys.stderr)
    with bar:
        if jobs <= 1 or len(cells) == 1:
            rows = []
            for cell in cells:
                rows.append(evaluate(cell))
                bar.update(1)
            return rows
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(
            max_workers=min(jobs, len(cells)), mp_context=context
        ) as pool:
            futures = [pool.submit(evaluate, cell) for cell in cells]
            for _ in concurrent.futures.as_completed(futures):
                bar.update(1)
            return [future.result() for future in futures]
