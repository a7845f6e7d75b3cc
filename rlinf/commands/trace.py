"""Make and inspect traces: ``synth`` (analytic LLM trace), ``calibrate`` (fit it to a measured trace), ``import``
(a veRL or RLinf timing log as a trace), ``show`` (a summary of a trace file)."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from rlinf.analytic.synthesis import synthesize
from rlinf.app.console import WorkProgress
from rlinf.commands import trace_calibrate, trace_import, values
from rlinf.commands.decode_args import response_provenance
from rlinf.commands.efficiency_args import efficiency_provenance
from rlinf.commands.llm_args import (
    add_workload_arguments,
    flags_named,
    today,
    workload_flags,
    workload_from_args,
)
from rlinf.core.cluster import GIB
from rlinf.core.outputs import check_output_file, writing
from rlinf.core.trace import Trace, load_trace


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Subcommands ``synth``, ``calibrate``, ``import`` and ``show``."""
    sub = parser.add_subparsers(dest="trace_command", metavar="SUBCOMMAND", required=True)
    synth = sub.add_parser("synth", help="synthesize an analytic LLM trace (roofline model)")
    add_workload_arguments(synth)
    synth.add_argument(
        "--seed", type=values.seed, default=0, help="seed of the response-length draw (default 0)"
    )
    synth.add_argument("--date", default=None, help="date recorded in provenance (default: today, UTC)")
    synth.add_argument("--out", required=True, help="trace JSON file to write (atomically)")
    trace_calibrate.add_arguments(
        sub.add_parser(
            "calibrate",
            help="fit the analytic model's efficiencies and overheads to a measured trace",
            description=trace_calibrate.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    )
    trace_import.add_arguments(
        sub.add_parser(
            "import",
            help="turn a veRL or RLinf per-step timing log (JSONL or CSV) into a trace",
            description=trace_import.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    )
    show = sub.add_parser("show", help="print a short summary of a trace file")
    show.add_argument("path", help="trace JSON file")


def run(args: argparse.Namespace) -> int:
    """Dispatch to the subcommand."""
    if args.trace_command == "synth":
        return _synth(args)
    if args.trace_command == "calibrate":
        return trace_calibrate.run(args)
    if args.trace_command == "import":
        return trace_import.run(args)
    sys.stdout.write(describe_trace(load_trace(args.path, field="path")))
    return 0


def _synth(args: argparse.Namespace) -> int:
    check_output_file(args.out, "--out")
    workload, cluster = workload_from_args(args)
    progress = WorkProgress("trace synth", "responses")
    try:
        with flags_named():
            trace = synthesize(
                workload, cluster, seed=args.seed, date=args.date or today(), progress=progress
            )
    finally:
        progress.close()
    parts = ["rlinf", "trace", "synth", *workload_flags(args, workload, cluster)]
    command = shlex.join([*parts, "--seed", str(args.seed), "--out", args.out])
    provenance = {
        **trace.provenance,
        **response_provenance(args, workload),
        **efficiency_provenance(args),
        "command": command,
    }
    trace = attrs.evolve(trace, provenance=provenance)
    with writing(args.out, "--out"):
        trace.save(args.out)
    print(f"wrote {args.out}: {len(trace.samples)} samples, {trace.workflow.name} on {cluster.spec()}")
    return 0


def describe_trace(trace: Trace) -> str:
    """A few lines: workflow, cluster, components, samples, response lengths, provenance."""
    workflow = trace.workflow
    lines = [
        f"workflow   {workflow.name}: batch {workflow.batch_size} = {workflow.batch_size // workflow.group_size} "
        f"prompts x {workflow.group_size}, {workflow.tokens_per_sample:.0f} tokens/sample",
        f"cluster    {trace.cluster.spec()} ({trace.cluster.num_devices} devices)",
    ]
    for component in workflow.components:
        mine = [s for s in trace.samples if s.component == component.name]
        devices = sorted({s.devices for s in mine})
        ops = ",".join(sorted({s.op for s in mine})) or "-"
        span = f"{devices[0]}-{devices[-1]} devices" if devices else "no samples"
        lines.append(
            f"component  {component.name:<10} role={component.role:<9} mp={component.model_parallel_size:<3} "
            f"state={component.state_bytes / GIB:7.1f} GiB  {len(mine):4d} samples of {ops} on {span}"
        )
    lengths = np.asarray(trace.response_lengths)
    if lengths.size:
        lines.append(
            f"responses  {lengths.size} lengths: mean {lengths.mean():.0f}, p50 {np.median(lengths):.0f}, "
            f"p99 {np.quantile(lengths, 0.99):.0f}, max {lengths.max():.0f} tokens"
        )
    lines.append(f"samples    {len(trace.samples)} in all")
    lines.extend(_provenance_lines(trace.provenance))
    return "\n".join(lines) + "\n"


def _provenance_lines(provenance: Mapping[str, Any]) -> list[str]:
    lines = []
    for key in ("kind", "generator", "date", "seed", "source", "machine", "command"):
        if key in provenance:
            lines.append(f"provenance {key}: {provenance[key]}")
    if isinstance(provenance.get("imported_from"), Mapping):
        lines.append(f"provenance {trace_import.summary_line(provenance['imported_from'])}")
    if isinstance(provenance.get("calibration"), Mapping):
        lines.append(f"provenance {trace_calibrate.summary_line(provenance['calibration'])}")
    assumptions = provenance.get("assumptions")
    if isinstance(assumptions, list) and assumptions:
        lines.append(f"provenance assumptions: {len(assumptions)} (see the trace file)")
    return lines
