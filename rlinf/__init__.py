"""rlinf: RL training that plans its own execution.

The functional core (this package's top-level modules) holds the values every other part shares:
cluster, workflow, plan, program, timeline, trace and cost model, plus the M2Flow lowering.
"""

from rlinf.cluster import Cluster, DeviceSpec, parse_cluster
from rlinf.costs import CostModel, fit
from rlinf.errors import ConfigError, InfeasiblePlanError, RlinfError, RlinfWarning
from rlinf.lowering import lower
from rlinf.plan import Placement, Plan
from rlinf.program import Op, Program
from rlinf.timeline import Span, Timeline
from rlinf.trace import CostSample, Trace
from rlinf.workflow import Component, Edge, Loop, Workflow

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
    "Span",
    "Timeline",
    "Trace",
    "Workflow",
    "fit",
    "lower",
    "parse_cluster",
]
