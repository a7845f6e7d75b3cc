"""The planner is the one author of the plan shapes (planner.modes), plan files go through structure_config, and
a cost model holds no state that pricing changes."""

from __future__ import annotations

import warnings

import attrs
import pytest

from planner.modes import fixed_plan, staleness_modes
from planner.space import build_space
from rlinf.core.costs import fit
from rlinf.core.errors import ConfigError, ExtrapolationWarning
from rlinf.core.lowering import lower
from rlinf.core.plan import plan_from_yaml
from tests.factories import embodied_workflow, grpo_trace


def test_staleness_modes_are_the_spaces_and_stop_at_two() -> None:
    workflow = grpo_trace().workflow
    cuts = workflow.buffer_cuts
    assert staleness_modes(workflow, 0) == ((0, ()),)
    assert staleness_modes(workflow, 5) == ((0, ()), *((k, cut) for k in (1, 2) for cut in cuts))
    assert build_space(workflow, 4, max_staleness=5).staleness_modes == staleness_modes(workflow, 5)
    assert build_space(workflow, 4, max_staleness=5).staleness_ladder == (0, 1, 2)
    assert staleness_modes(embodied_workflow(), 0) == ((0, ()),)


def test_a_fixed_mode_carries_its_staleness_and_buffer_position() -> None:
    workflow = grpo_trace().workflow
    plan, logical = fixed_plan(workflow, "disaggregated", 8, max_staleness=1, buffer_before=("inference",))
    assert (plan.mode, logical, plan.max_staleness, plan.buffer_before) == (
        "disaggregated",
        8,
        1,
        ("inference",),
    )
    synchronous, _ = fixed_plan(workflow, "disaggregated", 8)
    assert (synchronous.max_staleness, synchronous.buffer_before) == (0, ())
    with pytest.raises(ConfigError, match=r"mode='diagonal': unknown mode; fix: use one of"):
        fixed_plan(workflow, "diagonal", 8)


def test_plan_files_are_read_by_the_structured_config_path() -> None:
    plan = plan_from_yaml("placement: {a: all}\noffload: null\nmax_staleness: null\n", 2)
    assert (plan.offload, plan.max_staleness) == (frozenset(), 0)  # a null key counts as absent
    with pytest.raises(ConfigError, match=r"^p\.yaml\.buffer_before\[0\]=3: must be a string"):
        plan_from_yaml("placement: {a: all}\nbuffer_before: [3]\n", 2, source="p.yaml")
    with pytest.raises(
        ConfigError, match=r"^p\.yaml\.data_parallel\.b='b': names a component that is not placed"
    ):
        plan_from_yaml("placement: {a: all}\ndata_parallel: {b: 1}\n", 2, source="p.yaml")


def test_pricing_leaves_the_cost_model_unchanged_and_warns_in_every_call() -> None:
    """No record of shown warnings in the model: each call that prices a program shows its warnings once."""
    full = grpo_trace(response_lengths=(10.0, 20.0, 40.0))
    trace = attrs.evolve(full, samples=tuple(s for s in full.samples if s.devices == 2))
    costs = fit(trace)  # measured on 2 devices only: a plan on 8 is scaled, with a warning per component
    before = repr(costs)
    text = "placement: {rollout: 0-7, reward: 0-7, inference: 0-7, actor: 0-7}\ngranularity: {rollout->reward: 4}"
    program = lower(trace.workflow, plan_from_yaml(text, 64), trace.cluster)
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ExtrapolationWarning)
            costs.durations(program)
        messages = [str(w.message) for w in caught if issubclass(w.category, ExtrapolationWarning)]
        assert len(messages) == 4 and len(set(messages)) == 4, messages  # each once, in each call
    assert repr(costs) == before
    assert costs.generation_fractions(4).flags.writeable is False
