"""The planner's plan against brute force over the same space (the simulator judges both); brute force's pruning
bound; one plan space for the planner, brute force and the capacity sweep."""

from __future__ import annotations

import contextlib
import importlib
import io
import itertools
import json
import random
import warnings
from pathlib import Path

import attrs
import numpy as np
import pytest
from benchmark_scripts import load
from factories import costs_for, embodied_trace, grpo_trace, linear_samples
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from planner import search
from planner.brute_force import brute_force, distinct_programs
from planner.judge import judge
from planner.space import build_space
from planner.tables import build_tables
from rlinf.capacity.planning import STRATEGIES, propose
from rlinf.cli import main as rlinf
from rlinf.core.cluster import GIB, parse_cluster
from rlinf.core.costs import fit
from rlinf.core.errors import ExtrapolationWarning, InfeasiblePlanError
from rlinf.core.lowering import lower
from rlinf.core.trace import CostSample, Trace, load_trace
from rlinf.core.workflow import Component, Edge, WeightSync, Workflow
from simulator import replay

ROOT = Path(__file__).resolve().parent.parent
search_module = importlib.import_module(
    "planner.search"
)  # the module (``planner.search`` is also the function)
GAP = 0.005
DISAGGREGATED = ("rollout", "inference", "actor")
"""Components that end a group of their own in the 3- and 4-group partitions a 32-device sample is drawn from."""


def _gap(workflow, cluster, costs, max_granularity: int, max_loop_stages: int = 4) -> float:
    result = search(
        workflow, cluster, costs, max_granularity=max_granularity, max_loop_stages=max_loop_stages
    )
    space = build_space(
        workflow, cluster.num_devices, max_granularity=max_granularity, max_loop_stages=max_loop_stages
    )
    exhaustive = brute_force(workflow, cluster, costs, space)
    assert exhaustive.best.fits
    unpruned = brute_force(workflow, cluster, costs, space, prune=False)
    assert unpruned.num_simulated == unpruned.num_programs >= exhaustive.num_simulated
    assert exhaustive.best.iteration_s == unpruned.best.iteration_s, "pruning lost the best program"
    return result.best.iteration_s / exhaustive.best.iteration_s - 1


def test_grpo_factory_matches_brute_force():
    trace = grpo_trace()
    cluster = trace.cluster.with_num_devices(4)
    assert _gap(trace.workflow, cluster, fit(trace, cluster), max_granularity=4) <= GAP


def test_embodied_loop_matches_brute_force():
    trace = embodied_trace()
    assert _gap(trace.workflow, trace.cluster, costs_for(trace), max_granularity=4, max_loop_stages=8) <= GAP


def test_brute_force_from_an_incumbent():
    """From the planner's plan as the incumbent, brute force holds only the programs whose bound is below its time
    and finds the optimum it finds from scratch (on the GRPO factory, whose first program by the bound is that
    optimum: the bound is its simulated time)."""
    trace = grpo_trace()
    cluster = trace.cluster.with_num_devices(4)
    costs = fit(trace, cluster)
    space = build_space(trace.workflow, 4, max_granularity=4)
    scratch = brute_force(trace.workflow, cluster, costs, space)
    assert scratch.complete and scratch.num_held == scratch.num_programs and scratch.num_simulated == 1
    assert scratch.lower_bound_s == scratch.best.iteration_s == scratch.least_bound_s
    planner = search(trace.workflow, cluster, costs, max_granularity=4).best
    seeded = brute_force(trace.workflow, cluster, costs, space, incumbent=planner)
    assert seeded.complete and seeded.best.iteration_s == scratch.best.iteration_s
    assert seeded.num_held < scratch.num_programs and seeded.num_simulated <= seeded.num_held


def test_brute_force_within_a_budget_certifies_a_lower_bound():
    """Stopped after a few simulations (the embodied loop factory needs hundreds), brute force says it did not
    complete and certifies a lower bound that the optimum does not beat and that is at least the least bound."""
    trace = embodied_trace()
    costs = costs_for(trace)
    space = build_space(trace.workflow, trace.cluster.num_devices, max_granularity=4, max_loop_stages=8)
    scratch = brute_force(trace.workflow, trace.cluster, costs, space)
    cut = brute_force(trace.workflow, trace.cluster, costs, space, max_simulated=10)
    assert scratch.complete and scratch.num_simulated > 10
    assert not cut.complete and cut.num_simulated == 10
    assert cut.least_bound_s <= cut.lower_bound_s <= scratch.best.iteration_s <= cut.best.iteration_s
    with pytest.raises(ValueError, match="max_simulated=3 needs prune"):
        brute_force(trace.workflow, trace.cluster, costs, space, prune=False, max_simulated=3)


ROLES = ("rollout", "reward", "inference", "actor")
OPS = {"rollout": "generate", "reward": "reward", "inference": "infer", "actor": "train"}


@st.composite
def small_cases(draw):
    num_components = draw(st.integers(2, 3))
    roles = ROLES[:1] + tuple(draw(st.permutations(ROLES[1:])))[: num_components - 1]
    names = [f"c{i}" for i in range(num_components)]
    components = [
        Component(name=n, role=r, state_bytes=int(draw(st.sampled_from([0, 1, 3, 5])) * GIB))
        for n, r in zip(names, roles, strict=True)
    ]
    edges = [
        Edge(
            src=a,
            dst=b,
            kind=draw(st.sampled_from(["stream", "barrier"])),
            bytes_per_sample=draw(st.sampled_from([0, 4096])),
        )
        for a, b in zip(names, names[1:], strict=False)
    ]
    group_size = draw(st.sampled_from([1, 2]))
    workflow = Workflow(
        name="random",
        components=components,
        edges=edges,
        weight_sync=[WeightSync(src=names[-1], dst=names[0], num_bytes=GIB // 8)]
        if draw(st.booleans())
        else [],
        batch_size=draw(st.sampled_from([4, 8])) * group_size,
        group_size=group_size,
    )
    samples: list[CostSample] = []
    for name, role in zip(names, roles, strict=True):
        base = draw(st.floats(0.001, 0.2))
        per_sample = draw(st.floats(0.0005, 0.05))
        samples += linear_samples(name, OPS[role], base, per_sample, max_devices=4, max_batch=16)
    num_devices = draw(st.sampled_from([2, 4]))
    trace = Trace(
        workflow=workflow,
        cluster=parse_cluster(f"1x{num_devices}xCPU"),
        provenance={"kind": "synthesized", "source": "hypothesis"},
        samples=samples,
        activation_bytes_per_sample={names[-1]: draw(st.sampled_from([0.0, 0.25 * GIB]))},
    )
    return trace


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(small_cases())
def test_random_small_workflows_match_brute_force(trace):
    gap = _gap(trace.workflow, trace.cluster, fit(trace), max_granularity=4)
    assert gap <= GAP, f"search is {100 * gap:.2f}% slower than brute force"


@st.composite
def dag_cases(draw):
    """A small workflow with every feature the bound prices: a DAG (a chain plus, maybe, an edge that skips one
    component), stream and barrier edges, weight syncs within and across groups, onloads and offloads priced
    differently, uneven generation fractions (response lengths), one or two nodes, and maybe a staleness bound;
    with the cost model and the plan space (granularities up to 4) its programs come from."""
    trace = draw(small_cases())
    workflow = trace.workflow
    names = [c.name for c in workflow.components]
    extra = []
    if len(names) == 3 and draw(st.booleans()):
        extra = [Edge(src=names[0], dst=names[2], kind=draw(st.sampled_from(["stream", "barrier"])))]
    pairs = [(a, b) for a in names for b in names if a != b]
    syncs = draw(st.lists(st.sampled_from(pairs), max_size=2, unique=True))
    workflow = attrs.evolve(
        workflow,
        edges=workflow.edges + tuple(extra),
        weight_sync=tuple(
            WeightSync(src=a, dst=b, num_bytes=draw(st.sampled_from([GIB // 64, GIB]))) for a, b in syncs
        ),
    )
    # Without sync samples a sync is priced by its link's bandwidth (local, intra-node, inter-node).
    kinds = ("onload", "offload") + (("sync_weights",) if draw(st.booleans()) else ())
    moves = []
    for name in names:
        for kind in kinds:
            per_gib = draw(st.floats(0.01, 0.5))
            moves += [
                CostSample(
                    component=name,
                    op=kind,
                    devices=1,
                    samples=0,
                    seconds=per_gib * k / 8,
                    num_bytes=k * GIB // 8,
                )
                for k in (1, 64)
            ]
    num_devices = trace.cluster.num_devices
    cluster = parse_cluster(draw(st.sampled_from([f"1x{num_devices}xCPU", f"2x{num_devices // 2}xCPU"])))
    lengths = draw(st.lists(st.floats(10.0, 1000.0), min_size=0, max_size=6))
    trace = attrs.evolve(
        trace,
        workflow=workflow,
        cluster=cluster,
        samples=trace.samples + tuple(moves),
        response_lengths=tuple(lengths),
    )
    space = build_space(
        workflow, num_devices, max_granularity=4, max_staleness=draw(st.sampled_from([0, 0, 2]))
    )
    return trace, space


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(dag_cases(), st.randoms(use_true_random=False))
def test_the_bound_never_exceeds_a_simulated_time_on_random_workflows(case, rng):
    """Brute force skips a program, and a certificate stands on its bound, only if no simulation of it beats the
    bound: on random small workflows (:func:`dag_cases`) the bound of every program sampled is at most its simulated
    time. A head or tail the dependencies do not force, a switch counted before and after the last op, or a sync
    on the wrong link breaks it here."""
    trace, space = case
    costs = fit(trace)
    programs = distinct_programs(build_tables(space, trace.cluster, costs))
    indices = range(programs.num_programs)
    for index in rng.sample(indices, min(len(indices), 60)):
        try:
            program = lower(trace.workflow, programs.plan(index), trace.cluster)
        except InfeasiblePlanError:
            continue
        seconds = _simulated_s(program, costs)
        assert programs.bounds_s[index] <= seconds * (1 + 1e-9), (
            programs.plan(index).describe(),
            programs.bounds_s[index],
            seconds,
        )


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(dag_cases())
def test_pruned_brute_force_finds_the_optimum_of_exhaustive_brute_force(case):
    """On random small workflows (:func:`dag_cases`), brute force in the order of the bound, from scratch or from
    an incumbent (a plan of the space), finds the time that simulating every program finds (which also checks the
    bound against every program that fits: brute force asserts it)."""
    trace, space = case
    costs = fit(trace)
    exhaustive = brute_force(trace.workflow, trace.cluster, costs, space, prune=False)
    assume(exhaustive.best is not None and exhaustive.best.fits)
    pruned = brute_force(trace.workflow, trace.cluster, costs, space)
    assert exhaustive.num_simulated == exhaustive.num_programs >= pruned.num_simulated
    assert pruned.complete and pruned.best.iteration_s == exhaustive.best.iteration_s
    assert pruned.least_bound_s <= pruned.lower_bound_s == pruned.best.iteration_s
    incumbent = judge(
        trace.workflow, trace.cluster, costs, space.points().__next__().to_plan(), "first point of the space"
    )
    seeded = brute_force(trace.workflow, trace.cluster, costs, space, incumbent=incumbent)
    assert seeded.complete and seeded.best.iteration_s == exhaustive.best.iteration_s


def _busiest_device_s(program, costs) -> float:
    """The op seconds of the program's busiest device (its ops run one at a time)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        durations = costs.durations(program)
    work = np.zeros(program.num_devices)
    for op, seconds in zip(program.ops, durations, strict=True):
        work[list(op.devices)] += seconds
    return float(work.max())


def _simulated_s(program, costs) -> float:
    """The program's simulated iteration seconds, whether or not it fits in memory."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        return replay(program, costs.durations(program)).iteration_s


@pytest.mark.parametrize(
    ("source", "num_devices"),
    [
        ("grpo_7b_h100.json", 16),
        ("grpo_1.5b_h100.json", 16),
        ("grpo_32b_h200.json", 32),
        ("grpo_7b_h100.json", 32),
        ("embodied", 8),
    ],
)
def test_the_pruning_bound_never_exceeds_a_simulated_time(source, num_devices):
    """Brute force may skip a program, and the 32/64-device certificates may stand on its bound, only if no
    simulation of it could beat the bound: on a sample of programs (with and without offload, uneven shares,
    every granularity, 1-4 groups, and the loop) the bound is at most the simulated time (a bound with a head or
    tail the dependencies do not force, a sync on the wrong link, or a switch counted twice breaks it), and
    close to it on the GRPO traces (a bound far below every time would prune nothing)."""
    trace = embodied_trace() if source == "embodied" else load_trace(ROOT / "traces" / source)
    cluster = trace.cluster.with_num_devices(num_devices)
    costs = fit(trace, cluster)
    space = build_space(trace.workflow, num_devices)
    if (
        num_devices == 32 and source == "grpo_7b_h100.json"
    ):  # the planner's 3 groups there, and 4 (fewer plans)
        kept = [
            i for i, groups in enumerate(space.partitions) if set(DISAGGREGATED) <= {g[-1] for g in groups}
        ]
        space = attrs.evolve(
            space,
            partitions=tuple(space.partitions[i] for i in kept),
            pools=tuple(space.pools[i] for i in kept),
        )
    programs = distinct_programs(build_tables(space, cluster, costs))
    assert np.array_equal(programs.ids, np.arange(programs.num_programs))
    rng = random.Random(0)
    ratios, with_offload, groups = [], 0, set()
    for index in rng.sample(range(len(programs.bounds_s)), 400):
        point = programs.point(index)
        try:
            program = lower(trace.workflow, programs.plan(index), cluster)
        except InfeasiblePlanError:
            continue
        seconds = _simulated_s(program, costs)
        assert programs.bounds_s[index] <= seconds * (1 + 1e-9), programs.plan(index).describe()
        if trace.workflow.loop is not None:  # the loop's bound is the busiest device's work, as before
            assert programs.bounds_s[index] <= _busiest_device_s(program, costs) * (1 + 1e-9), point
        ratios.append(programs.bounds_s[index] / seconds)
        with_offload += bool(point.offload)
        groups.add(len(point.groups))
    assert len(ratios) >= 100 and with_offload >= 10, (len(ratios), with_offload)
    if trace.workflow.loop is None:
        assert len(groups) >= 2 and float(np.median(ratios)) > 0.9, (groups, np.median(ratios))


@pytest.mark.parametrize("num_devices", [2, 4])
def test_loop_programs_spread_twins_and_their_bound_on_the_hopper_profile(num_devices):
    """Brute force over a loop workflow also holds every point's spread-loop twin (env and policy on all the
    point's devices, the actor on its block), each distinct layout once; every program's bound, twins included,
    is at most the busiest device's op seconds in its lowered program (the shipped Hopper profile prices loop steps
    whose env and policy share devices lower than the others: a bound priced the other way broke on
    ``collocated ... | loop=8``); pruning keeps the best; on the profile's own 2 cores a twin is the best plan, and
    the planner's own candidates (CP-SAT's and their spread variants) reach it."""
    trace = load_trace(ROOT / "traces" / "hopper_ppo_cpu2.json")
    cluster = trace.cluster.with_num_devices(num_devices)
    costs = fit(trace, cluster)
    space = build_space(trace.workflow, num_devices)
    programs = distinct_programs(build_tables(space, cluster, costs))
    regular = len(programs.bounds_s) - programs.num_spread
    assert programs.num_spread > 0 and regular == len(programs.bounds_s) - programs.num_spread
    layouts = set()
    for index in range(len(programs.bounds_s)):
        plan = programs.plan(index)
        if index >= regular:
            assert (
                plan.devices_of("env")
                == plan.devices_of("rollout")
                == tuple(sorted({d for p in plan.placements for d in p.devices}))
            )
            assert plan.devices_of("actor") != plan.devices_of("env"), plan.describe()
            layouts.add((plan.placements, plan.offload, plan.granularity_of("loop")))
        program = lower(trace.workflow, plan, cluster)
        assert programs.bounds_s[index] <= _busiest_device_s(program, costs) * (1 + 1e-9), plan.describe()
    assert len(layouts) == programs.num_spread, "a spread layout was counted twice"
    pruned = brute_force(trace.workflow, cluster, costs, space)
    unpruned = brute_force(trace.workflow, cluster, costs, space, prune=False)
    assert pruned.best.iteration_s == unpruned.best.iteration_s
    assert unpruned.num_spread_programs == programs.num_spread
    if num_devices == 2:
        best = pruned.best.plan
        assert best.devices_of("env") == (0, 1) and len(best.devices_of("actor")) == 1, best.describe()
        case = load("compare_planner").compare_case(
            str(ROOT / "traces" / "hopper_ppo_cpu2.json"), 2, with_brute_force=True
        )
        assert case.own is not None and case.own.source.startswith("spread loop of cp-sat")
        assert case.own.iteration_s <= pruned.best.iteration_s * (1 + GAP)


def test_brute_force_capacity_and_search_share_one_space(monkeypatch):
    """``rlinf plan``, ``planner.search``, every strategy of ``rlinf capacity`` and the brute-force comparison all
    search the space ``build_space`` gives with the planner's defaults: one that narrowed or widened it (another
    granularity cap, other device counts) would build a different space here or count other points."""
    built = []
    real = search_module.build_space

    def spy(*args, **kwargs):
        space = real(*args, **kwargs)
        built.append(space)
        return space

    monkeypatch.setattr(search_module, "build_space", spy)
    path = ROOT / "traces" / "grpo_32b_h200.json"
    trace = load_trace(path)
    cluster = trace.cluster.with_num_devices(8)
    costs = fit(trace, cluster)
    reference = build_space(trace.workflow, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        proposals = {
            s: propose(trace.workflow, cluster, costs, s, time_limit_s=10, seed=0) for s in STRATEGIES
        }
    case = load("compare_planner").compare_case(str(path), 8, with_brute_force=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert rlinf(["plan", "--trace", str(path), "--cluster", "1x8xH200", "--json"]) == 0
    assert len(built) >= len(STRATEGIES) + 3
    assert all(space == reference for space in built)
    assert case.brute is not None
    assert case.brute.num_points == case.chosen.space_size == json.loads(out.getvalue())["space_size"]
    assert case.brute.num_points == reference.count()
    assert proposals["best"].plan == case.chosen.plan
    assert case.brute.best.iteration_s <= case.chosen.best.iteration_s * (1 + 1e-9)


def test_the_certificate_at_8_devices_is_the_optimum_of_brute_force_from_scratch():
    """``benchmarks/certify_planner.py`` on a reduced case (the 32B trace at 8 devices, where brute force from
    scratch is quick): from the planner's plan as the incumbent it finds the optimum brute force finds without one,
    simulating only programs whose bound is below the planner's time; stopped after one simulation it certifies
    no more than a lower bound, and its gap is then an upper bound."""
    certify = load("certify_planner")
    path = str(ROOT / "traces" / "grpo_32b_h200.json")
    certificate = certify.certify_case(path, 8)
    trace = load_trace(path)
    cluster = trace.cluster.with_num_devices(8)
    scratch = brute_force(trace.workflow, cluster, fit(trace, cluster), build_space(trace.workflow, 8))
    assert certificate.complete and scratch.complete
    assert certificate.best_s == certificate.lower_bound_s == scratch.best.iteration_s
    assert certificate.num_programs == scratch.num_programs
    assert certificate.num_simulated <= certificate.num_held < certificate.num_programs
    assert certificate.gap == certificate.planner_s / scratch.best.iteration_s - 1 >= 0
    cut = certify.certify_case(path, 8, max_simulated=1)
    assert not cut.complete and cut.num_simulated == 1
    assert cut.least_bound_s <= cut.lower_bound_s <= scratch.best.iteration_s and cut.gap >= certificate.gap
    assert "| grpo_32b_h200 | 8 |" in certify.certificate_table([certificate, cut])
    assert ">= " in certify.certificate_table([cut])


@pytest.mark.parametrize(("num_devices", "num_cores"), [(16, 0), (12, 3)])
def test_fitting_sizes_are_the_sizes_that_fit_in_product_order(num_devices, num_cores):
    """``PlanSpace.fitting_sizes`` (what brute force enumerates) yields exactly the tuples of group sizes that fit
    each pool's budget, in ``itertools.product`` order, for every partition (core-pool groups included)."""
    workflow = load_trace(ROOT / "traces" / "grpo_7b_h100.json").workflow
    workflow = attrs.evolve(
        workflow,
        components=tuple(
            attrs.evolve(c, cpu_ok=True) if c.role == "reward" else c for c in workflow.components
        ),
    )
    space = build_space(workflow, num_devices, num_cores=num_cores)
    assert num_cores == 0 or any("cpu" in pools for pools in space.pools)
    for groups, pools in zip(space.partitions, space.pools, strict=True):
        options = [space.sizes(g, p) for g, p in zip(groups, pools, strict=True)]
        expected = [s for s in itertools.product(*options) if space.fits_budgets(s, pools)]
        assert list(space.fitting_sizes(groups, pools)) == expected, groups
