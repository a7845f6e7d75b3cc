"""The judge: every plan the planner or a baseline proposes is lowered and simulated, and ranked by that."""

from __future__ import annotations

import math
import warnings

import attrs

from rlinf.core.cluster import GIB, Cluster
from rlinf.core.costs import CostModel
from rlinf.core.errors import ExtrapolationWarning, InfeasiblePlanError
from rlinf.core.lowering import lower
from rlinf.core.plan import Plan
from rlinf.core.workflow import Workflow
from simulator import replay


@attrs.frozen(kw_only=True)
class Evaluation:
    """A plan with its simulated iteration."""

    plan: Plan
    source: str
    """Who proposed it: ``cp-sat#3``, ``collocated``, ``disaggregated``, ``closed-form``, ``brute-force``."""
    iteration_s: float
    """Simulated iteration seconds (infinite when the plan does not fit)."""
    throughput: dict[str, float] = attrs.field(factory=dict)
    peak_memory_bytes: int = 0
    """Largest simulated memory use of any device."""
    problem: str = ""
    """Why the plan cannot run, when it cannot."""
    surrogate_s: float = math.nan
    """The CP-SAT surrogate's estimate, where one was made."""

    @property
    def fits(self) -> bool:
        """Whether the plan runs within device memory."""
        return not self.problem

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {
            "source": self.source,
            "mode": self.plan.mode,
            "plan": self.plan.to_dict(),
            "describe": self.plan.describe(),
            "predicted_iteration_s": self.iteration_s if self.fits else None,
            "throughput": dict(self.throughput),
            "peak_memory_gib": self.peak_memory_bytes / GIB,
            "surrogate_s": None if math.isnan(self.surrogate_s) else self.surrogate_s,
            "problem": self.problem or None,
        }


def judge(
    workflow: Workflow,
    cluster: Cluster,
    costs: CostModel,
    plan: Plan,
    source: str,
    surrogate_s: float = math.nan,
) -> Evaluation:
    """Lower and simulate ``plan``; a plan whose states or simulated peak exceed device memory does not fit.

    Extrapolation warnings are not shown here."""
    try:
        program = lower(workflow, plan, cluster)
    except InfeasiblePlanError as error:
        return Evaluation(
            plan=plan, source=source, iteration_s=math.inf, problem=str(error), surrogate_s=surrogate_s
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        durations = costs.durations(program)
        activation = [costs.activation_bytes(op) for op in program.ops]
    timeline = replay(program, durations, activation)
    peak = max(timeline.peak_memory_bytes, default=0)
    problem = ""
    for device, used in enumerate(timeline.peak_memory_bytes):
        spec = cluster.spec_of(device)
        if used > spec.memory_bytes:
            where = (
                f"device {device}"
                if cluster.pool_of(device) == "device"
                else f"core cpu:{device - cluster.num_devices}"
            )
            problem = (
                f"simulated peak memory {used / GIB:.1f} GiB on {where} exceeds a {spec.name}'s "
                f"{spec.memory_bytes / GIB:.1f} GiB (states plus activations)"
            )
            break
    return Evaluation(
        plan=plan,
        source=source,
        iteration_s=math.inf if problem else timeline.iteration_s,
        throughput=timeline.throughput(),
        peak_memory_bytes=peak,
        problem=problem,
        surrogate_s=surrogate_s,
    )


def rank(evaluations: list[Evaluation]) -> tuple[Evaluation, ...]:
    """Best first: fitting plans by simulated time, ties broken by the plan's text (deterministic); each plan
    once (the first source that proposed it is kept)."""
    seen: set[Plan] = set()
    unique = []
    for evaluation in evaluations:
        if evaluation.plan not in seen:
            seen.add(evaluation.plan)
            unique.append(evaluation)
    return tuple(sorted(unique, key=lambda e: (not e.fits, e.iteration_s, e.plan.describe())))
