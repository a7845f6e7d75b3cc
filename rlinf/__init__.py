"""rlinf: RL training that plans its own execution.

The package is split by layer (each imports only those below it; ``pyproject.toml``'s import contracts):
``rlinf.core`` (the values every part shares: cluster, workflow, plan, program, timeline, trace, cost model, and
the M2Flow lowering), ``rlinf.algorithms`` (RL math), ``rlinf.api`` (the workload API a user writes against,
``docs/workloads.md``), ``rlinf.analytic`` (the analytic model of LLM-scale RL), ``rlinf.workloads`` (the
built-in workloads, plug-ins like a user's), ``rlinf.app`` (training, profiling, planning, validation,
checkpoints), ``rlinf.capacity`` (capacity reports) and ``rlinf.commands`` / ``rlinf.cli`` (the command line).
This module re-exports the names most scripts need.
"""

from rlinf.api.worker_context import WorkerContext
from rlinf.api.workload import Payload, Worker, Workload
from rlinf.core.cluster import Cluster, DeviceSpec, parse_cluster
from rlinf.core.config_structure import structure_config
from rlinf.core.costs import CostModel, fit
from rlinf.core.errors import ConfigError, InfeasiblePlanError, RlinfError, RlinfWarning
from rlinf.core.lowering import lower
from rlinf.core.payloads import concat_payloads
from rlinf.core.plan import Placement, Plan
from rlinf.core.program import Op, Program
from rlinf.core.run_settings import RunSettings
from rlinf.core.schedule import Stamp, stamp_of
from rlinf.core.timeline import Span, Timeline
from rlinf.core.trace import CostSample, Trace
from rlinf.core.workflow import Component, Edge, Loop, WeightSync, Workflow

__all__ = [
    "Cluster",
    "Component",
    "ConfigError",
    "CostModel",
    "CostSample",
    "DeviceSpec",
    "Edge",
    "InfeasiblePlanError",
    "Loop",
    "Op",
    "Placement",
    "Plan",
    "Program",
    "RlinfError",
    "RlinfWarning",
    "RunSettings",
    "Span",
    "Stamp",
    "Timeline",
    "Trace",
    "WeightSync",
    "Worker",
    "WorkerContext",
    "Workflow",
    "Workload",
    "Payload",
    "concat_payloads",
    "fit",
    "lower",
    "parse_cluster",
    "stamp_of",
    "structure_config",
]
