"""The flags of the commands that predict from a profiled trace on a cluster (``rlinf plan``, ``rlinf simulate``):
``--trace``, ``--cluster`` (default: the trace's own) and ``--json``, and the trace and cluster they name."""

from __future__ import annotations

import argparse

from rlinf.core.cluster import Cluster, parse_cluster
from rlinf.core.trace import Trace, load_trace


def add_trace_arguments(parser: argparse.ArgumentParser) -> None:
    """``--trace`` (required), ``--cluster`` and ``--json``."""
    parser.add_argument("--trace", required=True, help="trace JSON file (see traces/)")
    parser.add_argument(
        "--cluster", default=None, help="cluster spec (4x8xH100) or YAML file; default: the trace's"
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object on stdout instead of a table"
    )


def trace_and_cluster(args: argparse.Namespace) -> tuple[Trace, Cluster]:
    """The trace of ``--trace`` and the cluster of ``--cluster``, else the trace's."""
    trace = load_trace(args.trace)
    return trace, parse_cluster(args.cluster) if args.cluster is not None else trace.cluster
