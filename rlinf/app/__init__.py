"""The application: training runs (the runner), profiling, auto-planning, validation, checkpoints, run
directories and jobs (workloads made trainable). The commands parse arguments and print; the work is here.

A run from Python, as ``rlinf train`` makes it::

    from rlinf.app import RunFlags, build_request, choose_plan, run

    request = build_request(RunFlags(config=Path("examples/hopper_ppo.yaml"), mode="collocated"))
    result = run(request, choose_plan(request))

The names below are loaded on first use (the runner imports torch).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlinf.app.plan_choice import PlanChoice, choose_plan
    from rlinf.app.request import RunFlags, RunRequest, build_request
    from rlinf.app.runner import Segment, TrainResult, run

_EXPORTS = {
    "RunFlags": "rlinf.app.request",
    "RunRequest": "rlinf.app.request",
    "build_request": "rlinf.app.request",
    "PlanChoice": "rlinf.app.plan_choice",
    "choose_plan": "rlinf.app.plan_choice",
    "Segment": "rlinf.app.runner",
    "TrainResult": "rlinf.app.runner",
    "run": "rlinf.app.runner",
}
__all__ = [
    "PlanChoice",
    "RunFlags",
    "RunRequest",
    "Segment",
    "TrainResult",
    "build_request",
    "choose_plan",
    "run",
]


def __getattr__(name: str) -> Any:
    """The exported name ``name``, imported from its module on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rlinf.app' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
