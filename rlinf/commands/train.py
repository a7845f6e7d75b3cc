"""Train a workload with real workers under a plan (auto: profile, plan, run; a fixed mode; or a plan file).

The flags (:mod:`rlinf.commands.train_args`) become one request (:func:`rlinf.app.request.build_request`); the
application chooses the plan (:func:`rlinf.app.plan_choice.choose_plan`: ``--mode auto`` profiles the job's probe
plans within ``--profile-budget`` seconds or reuses ``--trace``, merges ``--merge-trace`` samples, chooses and
predicts) and trains under it (:func:`rlinf.app.runner.run`: a sequence of segments; a failing worker makes the run
restart from the newest checkpoint, up to ``--max-restarts`` times; ``--resume RUN_DIR`` continues a stopped run).
This module prints what they report: the choice and a closing summary (the run's progress is
:mod:`rlinf.app.console`'s). ``--backend ray`` runs workers as Ray actors in one Ray session for profiling and training.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rlinf.commands.train_args import add_arguments, run_flags

__all__ = ["add_arguments", "run"]


def run(args: argparse.Namespace) -> int:
    """Build the request, choose the plan, train, print."""
    from rlinf.app import plan_choice, runner
    from rlinf.app.console import closing_summary, recent_metrics
    from rlinf.app.placement import backend_session
    from rlinf.app.request import build_request

    request = build_request(run_flags(args))
    if not request.resume:
        print(f"rlinf: writing the run to {request.out}")
    with backend_session(request) as where:
        if where is not None:
            print(f"ray: {where}")
        choice = plan_choice.choose_plan(request, report=print)
        if choice.oversubscribed:
            unit = "CPU core" if request.accelerator == "cpu" else "GPU"
            print(
                f"rlinf: warning: {choice.num_logical} logical devices share {request.num_devices} {unit}(s); "
                "devices are oversubscribed",
                file=sys.stderr,
            )
        result = runner.run(request, choice)
    iterations = request.settings.iterations
    if result.complete_before:
        missing = ", ".join(result.written) or "nothing was missing"
        print(f"{result.run_dir}: the run is complete ({iterations} iterations); wrote {missing}")
        return 0
    accuracy = Path(result.run_dir) / "prediction.json"
    held = json.loads(accuracy.read_text()) if choice.prediction is not None and accuracy.is_file() else None
    if held is not None:
        print(_held(held))
    summary = request.job.summary(recent_metrics(result.metrics))
    print(
        closing_summary(
            plan=choice.plan.describe(), iterations=iterations, workload_summary=summary, prediction=held,
            run_dir=str(result.run_dir),
        )
    )  # fmt: skip
    return 0


def _held(held: dict[str, Any]) -> str:
    """How the prediction held over the run (``prediction.json``), in one line."""
    inside = held.get("inside_interval")
    return (
        f"prediction: measured median {held['measured_median_s']:.4f} s against {held['predicted_iteration_s']:.4f} s "
        f"predicted over {held['iterations']} iterations: {100 * held['bias']:+.1f}% (measured / predicted - 1)"
        + ("" if inside is None else f", {'inside' if inside else 'outside'} the interval")
        + f"; single iterations: median |error| {100 * held['median_error']:.1f}%, 90th percentile "
        f"{100 * held['p90_error']:.1f}%"
    )
