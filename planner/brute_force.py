"""Brute force: the best point of a whole plan space by simulation, the reference the planner is measured against.

Every distinct program of the space (:func:`planner.bounds.distinct_programs`) is judged by simulation. With
``prune`` (the default) programs are simulated in the order of a proven lower bound on their simulated time (see
:mod:`planner.bounds`) and the search stops once the bound reaches the best time found, which is exact. Given an
``incumbent`` (a plan of the space already simulated, e.g. the planner's), programs whose bound is not below its
time are never held; given ``max_simulated``, the search may stop early, and then certifies a lower bound instead
of the optimum: every program left has a bound at least that of the first one not simulated.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from planner.bounds import distinct_programs
from planner.judge import Evaluation, judge
from planner.space import PlanSpace
from planner.tables import build_tables
from rlinf.core.cluster import Cluster
from rlinf.core.costs import CostModel
from rlinf.core.workflow import Workflow

__all__ = ["RELATIVE_TOLERANCE", "BruteForceResult", "brute_force", "distinct_programs"]

RELATIVE_TOLERANCE = 1e-9
"""Rounding allowed between the bound and a simulated time before the bound counts as broken."""


@attrs.frozen(kw_only=True)
class BruteForceResult:
    """The best point of the whole space by simulation."""

    best: Evaluation
    num_points: int
    """Points in the space (:meth:`PlanSpace.count`), spread-loop twins not counted."""
    num_programs: int
    """Distinct programs among them (edge granularities that give the same micro-batch counts share one), with
    the spread-loop programs."""
    num_spread_programs: int = 0
    """Of :attr:`num_programs`, those with the loop spread over every device (none without a loop)."""
    num_simulated: int
    """Programs lowered and simulated: all of them without pruning, those whose bound was below the best time
    found with it (and below the incumbent's)."""
    num_held: int = 0
    """Programs whose bound was below the incumbent's time (all of them without an incumbent or pruning): the
    only ones that could beat it."""
    complete: bool = True
    """Whether every held program whose bound was below the best time found was simulated (``max_simulated``
    not reached): :attr:`best` is then the optimum of the space."""
    lower_bound_s: float = 0.0
    """Seconds no program of the space simulates below: the best time when :attr:`complete`, else the least of
    it and the bound of the first program not simulated."""
    least_bound_s: float = 0.0
    """The least bound of any program, at most the best time (programs at or above an incumbent's time are not
    held): what the bound certifies without simulating anything."""


def brute_force(
    workflow: Workflow,
    cluster: Cluster,
    costs: CostModel,
    space: PlanSpace,
    *,
    prune: bool = True,
    incumbent: Evaluation | None = None,
    max_simulated: int | None = None,
) -> BruteForceResult:
    """Simulate the programs of ``space`` (every one without ``prune``; see the module docstring); the fastest
    that fits wins, ties going to the incumbent, then to the first in the order of the bound, then of the
    space's enumeration. ``max_simulated`` (with ``prune``) stops the search after that many simulations."""
    if max_simulated is not None and (not prune or max_simulated < 1):
        raise ValueError(f"max_simulated={max_simulated} needs prune and at least 1 simulation")
    below_s = incumbent.iteration_s if prune and incumbent is not None and incumbent.fits else math.inf
    programs = distinct_programs(build_tables(space, cluster, costs), below_s=below_s)
    bounds = programs.bounds_s
    best = incumbent
    num_simulated = 0
    stopped_at_s = math.inf
    for position in np.argsort(bounds, kind="stable") if prune else range(len(bounds)):
        bound = float(bounds[position])
        if prune and best is not None and best.fits and bound >= best.iteration_s:
            break
        if max_simulated is not None and num_simulated >= max_simulated:
            stopped_at_s = bound
            break
        plan = programs.plan(int(programs.ids[position]))
        evaluation = judge(workflow, cluster, costs, plan, "brute-force")
        num_simulated += 1
        assert not evaluation.fits or evaluation.iteration_s >= bound * (1 - RELATIVE_TOLERANCE), (
            f"simulated {evaluation.iteration_s} s is below the bound {bound} s for {plan.describe()}"
        )
        if best is None or (evaluation.fits, -evaluation.iteration_s) > (best.fits, -best.iteration_s):
            best = evaluation
    assert best is not None, "the space holds at least the collocated point"
    return BruteForceResult(
        best=best,
        num_points=space.count(),
        num_programs=programs.num_programs,
        num_spread_programs=programs.num_spread,
        num_simulated=num_simulated,
        num_held=len(bounds),
        complete=math.isinf(stopped_at_s),
        lower_bound_s=min(best.iteration_s, stopped_at_s),
        least_bound_s=min(best.iteration_s, float(bounds.min(initial=math.inf))),
    )
