"""``candidates`` (CP-SAT, by the surrogate) and ``search`` (candidates ranked by the simulator)."""

from __future__ import annotations

import time

import attrs

from planner.baselines import closed_form_point, collocated_points, disaggregated_points
from planner.cpsat import ScoredPoint, solve
from planner.explain import explain_infeasible
from planner.judge import Evaluation, judge, rank
from planner.refine import refined
from planner.space import DEFAULT_MAX_GRANULARITY, DEFAULT_MAX_LOOP_STAGES, PlanSpace, build_space
from planner.spread import SPREAD_SOURCE, spread_loop_plans
from planner.tables import CostTables, build_tables
from rlinf.core import cycle_collection
from rlinf.core.cluster import Cluster
from rlinf.core.costs import CostModel
from rlinf.core.errors import InfeasiblePlanError
from rlinf.core.lowering import lower
from rlinf.core.plan import Plan
from rlinf.core.workflow import Workflow

DEFAULT_K = 16
DEFAULT_TIME_LIMIT_S = 10.0


def is_own(source: str) -> bool:
    """Whether a candidate of :func:`search` is the planner's own: a CP-SAT candidate (``cp-sat#N``), or one's
    loop spread over every device (``spread loop of cp-sat#N``); not a baseline's plan nor a spread of one."""
    return source.startswith(("cp-sat", f"{SPREAD_SOURCE} of cp-sat"))


@attrs.frozen(kw_only=True)
class SearchResult:
    """The chosen plan, every plan the simulator judged (best first) and how long the search took."""

    plan: Plan
    best: Evaluation
    ranking: tuple[Evaluation, ...]
    space_size: int
    """Points in the plan space (what brute force would simulate)."""
    search_s: float
    """Wall seconds of the whole search, simulation of every candidate included."""

    @property
    def best_synchronous(self) -> Evaluation | None:
        """The fastest fitting plan without a staleness bound (the chosen one when it is synchronous)."""
        return next((e for e in self.ranking if e.fits and e.plan.max_staleness == 0), None)

    def to_dict(self) -> dict:
        """JSON-ready form: at least ``plan``, ``mode``, ``max_staleness``, ``predicted_iteration_s``, ``search_s``,
        ``candidates``, and with an asynchronous plan ``best_synchronous`` (its plan and time) and
        ``speedup_over_synchronous``."""
        synchronous = self.best_synchronous
        extra = {}
        if self.plan.max_staleness and synchronous is not None:
            extra = {
                "best_synchronous": {
                    "plan": synchronous.plan.to_dict(),
                    "iteration_s": synchronous.iteration_s,
                },
                "speedup_over_synchronous": synchronous.iteration_s / self.best.iteration_s,
            }
        return {
            "plan": self.plan.to_dict(),
            "mode": self.plan.mode,
            "max_staleness": self.plan.max_staleness,
            **extra,
            "predicted_iteration_s": self.best.iteration_s,
            "throughput": dict(self.best.throughput),
            "search_s": self.search_s,
            "space_size": self.space_size,
            "candidates": [e.to_dict() for e in self.ranking],
        }


def prepare(
    workflow: Workflow,
    cluster: Cluster,
    costs: CostModel,
    *,
    max_granularity: int,
    max_loop_stages: int,
    max_staleness: int = 0,
) -> tuple[PlanSpace, CostTables]:
    """The plan space and its cost tables."""
    space = build_space(
        workflow,
        cluster.num_devices,
        num_cores=cluster.num_cores,
        max_granularity=max_granularity,
        max_loop_stages=max_loop_stages,
        max_staleness=max_staleness,
    )
    return space, build_tables(space, cluster, costs)


def planner_points(tables: CostTables, *, k: int, time_limit_s: float, seed: int) -> list[ScoredPoint]:
    """The planner's own ``k`` best points by the surrogate, best first: CP-SAT's ``k // 4`` best points and its
    best point of each partition, each refined over every device count (:mod:`planner.refine`), then CP-SAT's
    points as they were; fewer when the space holds fewer, none when nothing fits."""
    return refined(tables, *solve(tables, k=max(1, k // 4), time_limit_s=time_limit_s, seed=seed), k=k)


def candidates(
    workflow: Workflow,
    cluster: Cluster,
    costs: CostModel,
    *,
    k: int = DEFAULT_K,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    seed: int = 0,
) -> list[Plan]:
    """The ``k`` best distinct synchronous plans by the surrogate over the default space, best first
    (:func:`planner_points`): what :func:`search` starts from with its default bounds.

    Raises :class:`InfeasiblePlanError` naming the component, memory, device type and fix when nothing fits."""
    space, tables = prepare(
        workflow,
        cluster,
        costs,
        max_granularity=DEFAULT_MAX_GRANULARITY,
        max_loop_stages=DEFAULT_MAX_LOOP_STAGES,
    )
    return [
        p.point.to_plan()
        for p in _own_points(space, tables, cluster, k=k, time_limit_s=time_limit_s, seed=seed)
    ]


def _own_points(
    space: PlanSpace, tables: CostTables, cluster: Cluster, *, k: int, time_limit_s: float, seed: int
) -> list[ScoredPoint]:
    """:func:`planner_points` of ``tables``; raises :class:`InfeasiblePlanError` when none fits."""
    points = planner_points(tables, k=k, time_limit_s=time_limit_s, seed=seed)
    if not points:
        raise InfeasiblePlanError(explain_infeasible(space, tables, cluster))
    return points


@cycle_collection.paused()
def search(
    workflow: Workflow,
    cluster: Cluster,
    costs: CostModel,
    *,
    k: int = DEFAULT_K,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    seed: int = 0,
    max_granularity: int = DEFAULT_MAX_GRANULARITY,
    max_loop_stages: int = DEFAULT_MAX_LOOP_STAGES,
    max_staleness: int = 0,
) -> SearchResult:
    """Simulate the planner's ``k`` candidates (:func:`candidates`; with ``max_staleness`` > 0 asynchronous ones
    too) plus the fixed-collocated, fixed-disaggregated and closed-form baselines' plans, and each of those with its
    loop spread over every device it uses (:mod:`planner.spread`); the fastest plan that fits in memory (by
    simulation) wins. Same inputs and seed give the same plan. Python's cycle collector pauses meanwhile
    (:func:`rlinf.core.cycle_collection.paused`)."""
    started = time.perf_counter()
    space, tables = prepare(
        workflow,
        cluster,
        costs,
        max_granularity=max_granularity,
        max_loop_stages=max_loop_stages,
        max_staleness=max_staleness,
    )
    points = _own_points(space, tables, cluster, k=k, time_limit_s=time_limit_s, seed=seed)
    evaluations = [
        judge(workflow, cluster, costs, p.point.to_plan(), f"cp-sat#{i + 1}", p.surrogate_s)
        for i, p in enumerate(points)
    ]
    if len(space.staleness_ladder) > 1:
        # The synchronous plans' own best candidates too: an asynchronous plan is compared with the best
        # synchronous one the planner finds, not with whichever synchronous points ranked among the k best.
        _, synchronous = prepare(
            workflow, cluster, costs, max_granularity=max_granularity, max_loop_stages=max_loop_stages
        )
        for i, p in enumerate(planner_points(synchronous, k=k, time_limit_s=time_limit_s, seed=seed)):
            evaluations.append(
                judge(workflow, cluster, costs, p.point.to_plan(), f"cp-sat-sync#{i + 1}", p.surrogate_s)
            )
    for point, surrogate_s in collocated_points(tables):
        evaluations.append(judge(workflow, cluster, costs, point.to_plan(), "collocated", surrogate_s))
    # The best fixed-disaggregated split is judged too, so the chosen plan is never slower than that baseline.
    for point, surrogate_s in disaggregated_points(tables):
        evaluations.append(judge(workflow, cluster, costs, point.to_plan(), "disaggregated", surrogate_s))
    closed = closed_form_point(tables)
    if closed is not None:
        evaluations.append(judge(workflow, cluster, costs, closed.to_plan(), "closed-form"))
    # The loop spread over every device of each plan above, pinned: outside the space's contiguous groups. Each is
    # named after the first plan it was derived from ("spread loop of cp-sat#2"), so a comparison can tell the
    # planner's own candidates from the baselines' plans.
    seen = {e.plan for e in evaluations}
    for origin in list(evaluations):
        for plan in spread_loop_plans(workflow, origin.plan, space.loop_ladder):
            if plan not in seen:
                seen.add(plan)
                evaluations.append(
                    judge(workflow, cluster, costs, plan, f"{SPREAD_SOURCE} of {origin.source}")
                )
    ranking = rank(evaluations)
    best = ranking[0]
    if not best.fits:
        raise InfeasiblePlanError(f"{explain_infeasible(space, tables, cluster)} (simulated: {best.problem})")
    costs.durations(
        lower(workflow, best.plan, cluster)
    )  # shows the chosen plan's extrapolation warnings, if any
    return SearchResult(
        plan=best.plan,
        best=best,
        ranking=ranking,
        space_size=space.count(),
        search_s=time.perf_counter() - started,
    )
