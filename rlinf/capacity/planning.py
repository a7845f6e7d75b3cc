"""Where each plan of the sweep comes from: the planner's best plan and the baselines of :mod:`planner`.

A *strategy* names a plan source for one cluster size: ``best`` is :func:`planner.search` (CP-SAT candidates
plus the collocated, disaggregated and closed-form baselines' plans, ranked by simulation); ``collocated``,
``disaggregated`` and ``closed-form`` are the planner's fixed baselines, each the plan the simulator ranks first
among its own. Every strategy searches the plan space of :func:`planner.search.prepare` with the planner's
defaults, the space ``rlinf plan`` and brute force search.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import attrs

from planner import search
from planner.baselines import closed_form, fixed_collocated, fixed_disaggregated
from planner.judge import Evaluation
from planner.search import prepare
from planner.space import DEFAULT_MAX_GRANULARITY, DEFAULT_MAX_LOOP_STAGES
from planner.tables import CostTables
from rlinf.core.cluster import Cluster
from rlinf.core.costs import CostModel
from rlinf.core.errors import ConfigError, ExtrapolationWarning, InfeasiblePlanError
from rlinf.core.plan import Plan
from rlinf.core.workflow import Workflow

Baseline = Callable[[Workflow, Cluster, CostModel, CostTables], Evaluation | None]
BASELINES: dict[str, Baseline] = {
    "collocated": fixed_collocated,
    "disaggregated": fixed_disaggregated,
    "closed-form": closed_form,
}
STRATEGIES = ("best", *BASELINES)


@attrs.frozen(kw_only=True)
class Proposal:
    """A strategy's plan for one cluster size, or why it has none."""

    strategy: str
    plan: Plan | None
    problem: str = ""
    source: str = ""
    """Who proposed the plan (``cp-sat#3``, ``collocated``, ``closed-form``, ...)."""


def check_strategies(names: tuple[str, ...]) -> tuple[str, ...]:
    """Validate strategy names (``--modes``); raises listing the valid ones."""
    for name in names:
        if name not in STRATEGIES:
            raise ConfigError("--modes", name, "unknown mode", f"use one of {list(STRATEGIES)}")
    return tuple(dict.fromkeys(names))


def propose(
    workflow: Workflow,
    cluster: Cluster,
    costs: CostModel,
    strategy: str,
    *,
    time_limit_s: float,
    seed: int,
    max_staleness: int = 0,
) -> Proposal:
    """The plan ``strategy`` picks on ``cluster``, or the reason it has none (nothing fits in memory);
    ``max_staleness`` bounds the asynchronous plans of the ``best`` search and of the disaggregated baseline (the
    collocated one gains nothing from a bound, the closed form is synchronous by construction)."""
    if strategy == "best":
        try:
            found = search(
                workflow, cluster, costs, time_limit_s=time_limit_s, seed=seed, max_staleness=max_staleness
            )
        except InfeasiblePlanError as error:
            return Proposal(strategy=strategy, plan=None, problem=str(error))
        return Proposal(strategy=strategy, plan=found.plan, source=found.best.source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        _, tables = prepare(
            workflow,
            cluster,
            costs,
            max_granularity=DEFAULT_MAX_GRANULARITY,
            max_loop_stages=DEFAULT_MAX_LOOP_STAGES,
            max_staleness=max_staleness if strategy == "disaggregated" else 0,
        )
        evaluation = BASELINES[strategy](workflow, cluster, costs, tables)
    if evaluation is None:
        return Proposal(
            strategy=strategy,
            plan=None,
            problem=f"no {strategy} plan fits this cluster (device count or memory)",
        )
    if not evaluation.fits:
        return Proposal(strategy=strategy, plan=None, problem=evaluation.problem)
    return Proposal(strategy=strategy, plan=evaluation.plan, source=evaluation.source)
