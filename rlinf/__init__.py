"""rlinf: RL training that plans its own execution.

The functional core (this package's top-level modules) holds the values every other part shares:
cluster, workflow, plan, program, timeline, trace and cost model, plus the M2Flow lowering. The workload API
(:class:`Workload`, :class:`Worker`, :class:`WorkerContext`, :class:`ConfigKeys`, :func:`structure_config`) is
what a user writes a workload against (``docs/workloads.md``).
"""

from rlinf.cluster import Cluster, DeviceSpec, parse_cluster
from rlinf.config_structure import structure_config
from rlinf.costs import CostModel, fit
from rlinf.errors import ConfigError, InfeasiblePlanError, RlinfError, RlinfWarning
from rlinf.lowering import lower
from rlinf.plan import Placement, Plan
from rlinf.program import Op, Program
from rlinf.timeline import Span, Timeline
from rlinf.trace import CostSample, Trace
from rlinf.worker_context import WorkerContext
from rlinf.workflow import Component, Edge, Loop, WeightSync, Workflow
from rlinf.workload import ConfigKeys, Payload, Worker, Workload

__all__ = [
    "Cluster",
    "ConfigKeys",
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
    "Span",
    "Timeline",
    "Trace",
    "WeightSync",
    "Worker",
    "WorkerContext",
    "Workflow",
    "Workload",
    "Payload",
    "fit",
    "lower",
    "parse_cluster",
    "structure_config",
]
