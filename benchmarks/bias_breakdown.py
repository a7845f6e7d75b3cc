"""Where a run's prediction error comes from: the ops' own times, or what happens between them.

    python benchmarks/bias_breakdown.py RUN_DIR [RUN_DIR ...] [--json OUT.json]

For a ``rlinf train --mode auto`` run directory (``profile_trace.json``, ``trace.json``, ``plan.yaml``,
``metrics.jsonl``), three iteration times of the run's plan:

* ``predicted``: what the run predicted (its ``prediction.json``: since issue 47 from the half of the profile that did
  not choose the plan; for an older run, the whole profile, probes evened out, fitted as the auto mode fitted it);
* ``replayed``: the same simulation with the cost model fitted to the run's *own* op samples (its counted
  iterations), i.e. the ops at the durations they actually had in this run;
* ``measured``: the median measured iteration.

``replayed / predicted`` is the part of the error the ops' durations explain (an op slower in the run than in its
profile: the machine's speed, or interference between ops that run at the same time in this plan and did not in the
probes); ``measured / replayed`` is the rest: time between ops the simulator does not model (dispatch, the driver
process competing with the workers for the cores). Per op it also lists the profile's and the run's mean duration.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import suite

from rlinf.app.profiling import evened
from rlinf.app.validation import simulated
from rlinf.core.lowering import lower
from rlinf.core.plan import load_plan
from rlinf.core.trace import load_trace


def _mean_by_op(samples: Any) -> dict[tuple, float]:
    by: dict[tuple, list[float]] = {}
    for s in samples:
        by.setdefault((s.component, s.op, s.devices, s.samples, s.shared), []).append(s.seconds)
    return {key: statistics.fmean(values) for key, values in by.items()}


def breakdown(run_dir: Path) -> dict[str, Any]:
    """The three iteration times of one run and its per-op means (see the module docstring)."""
    profile = evened(load_trace(run_dir / "profile_trace.json"))
    run = load_trace(run_dir / "trace.json")
    metrics = suite.metrics_of(run_dir)
    measured = statistics.median(
        m["iteration_s"] for m in metrics[1:] if m.get("phase", "steady") == "steady"
    )
    plan = load_plan(run_dir / "plan.yaml", run.cluster.num_devices)
    program = lower(run.workflow, plan, run.cluster)
    shown = run_dir / "prediction.json"
    if shown.is_file():
        predicted = json.loads(shown.read_text())["predicted_iteration_s"]
    else:
        predicted = simulated(program, profile, run.cluster).iteration_s
    replayed = simulated(program, run, run.cluster).iteration_s
    in_profile, in_run = _mean_by_op(profile.samples), _mean_by_op(run.samples)
    ops = [
        {
            "op": f"{key[0]}.{key[1]} x{key[3]} on {key[2]}" + (" shared" if key[4] else ""),
            "profile_ms": 1e3 * in_profile[key] if key in in_profile else None,
            "run_ms": 1e3 * seconds,
            "run_over_profile": seconds / in_profile[key] if key in in_profile else None,
        }
        for key, seconds in sorted(in_run.items())
    ]
    return {
        "run": str(run_dir),
        "plan": plan.describe(),
        "predicted_s": predicted,
        "replayed_s": replayed,
        "measured_s": measured,
        "ops_explain": replayed / predicted - 1,
        "between_ops": measured / replayed - 1,
        "bias": measured / predicted - 1,
        "ops": ops,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, help="write the breakdowns here")
    args = parser.parse_args(argv)
    started = suite.begin("python benchmarks/bias_breakdown.py", argv)
    results = [breakdown(run) for run in args.runs]
    for r in results:
        print(
            f"{r['run']}: {r['plan']}\n  predicted {1e3 * r['predicted_s']:.1f} ms, replayed with the run's own op "
            f"times {1e3 * r['replayed_s']:.1f} ms, measured {1e3 * r['measured_s']:.1f} ms: bias "
            f"{100 * r['bias']:+.1f}% = ops {100 * r['ops_explain']:+.1f}% then between ops {100 * r['between_ops']:+.1f}%"
        )
        for op in r["ops"]:
            ratio = "" if op["run_over_profile"] is None else f"{op['run_over_profile']:.2f}x"
            shown = "-" if op["profile_ms"] is None else f"{op['profile_ms']:.2f}"
            print(f"    {op['op']:<40} profile {shown:>7} ms  run {op['run_ms']:7.2f} ms  {ratio}")
    if args.json:
        suite.write_artifact(args.json, {"runs": results}, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
