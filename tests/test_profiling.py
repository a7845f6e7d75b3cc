"""Profiling: dispatch-inclusive samples replay a measured iteration exactly; the profiling phase respects its
budget and covers what the planner considers; traces merge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from factories import grpo_trace

import executor
from rlinf.app.jobs import load_job_config
from rlinf.app.profiling import (
    ProfileSettings,
    dispatch_inclusive_samples,
    merge_traces,
    profile,
    samples_by_plan,
)
from rlinf.core.cluster import cpu_cluster
from rlinf.core.costs import fit
from rlinf.core.errors import ConfigError
from rlinf.core.lowering import lower
from rlinf.core.plan import plan_from_dict
from rlinf.core.timeline import Timeline
from rlinf.core.trace import load_trace
from simulator import replay

CONFIG = "examples/hopper_ppo.yaml"
SMALL = ["num_steps=4", "num_epochs=1", "num_minibatches=2", "execution.checkpoint_every=100"]


def _measured_with_gaps(gap_s: float) -> Timeline:
    """A 'measured' timeline of the collocated small config: every op starts ``gap_s`` after it became ready
    (a dispatch round trip) and runs 1 ms."""
    job, config = load_job_config(CONFIG, SMALL)
    plan, logical = job.fixed_plan("hybrid", 2, config)
    program = lower(job.workflow(config), plan, cpu_cluster(logical))
    durations = [1e-3] * program.num_ops
    ideal = replay(program, [gap_s + d for d in durations])
    # Shift every start by the gap: the op occupies its device only after dispatch.
    return Timeline(
        program=program,
        start_s=[s + gap_s for s in ideal.start_s],
        end_s=list(ideal.end_s),
        peak_memory_bytes=list(ideal.peak_memory_bytes),
        source="measured",
    )


def test_dispatch_inclusive_samples_replay_the_measured_iteration() -> None:
    measured = _measured_with_gaps(4e-4)
    samples = dispatch_inclusive_samples(measured)
    assert [s.seconds for s in samples] == pytest.approx([1.4e-3] * len(samples))
    replayed = replay(measured.program, [s.seconds for s in samples])
    # Every op ends when it ended in the measured iteration (whose first ops were dispatched at time 0).
    assert replayed.end_s == pytest.approx(measured.end_s)
    # The span alone would miss every gap on the critical path.
    spans = replay(measured.program, [e - s for s, e in zip(measured.start_s, measured.end_s, strict=True)])
    assert spans.iteration_s < 0.8 * measured.iteration_s


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="--profile-budget=0: must be > 0"):
        ProfileSettings(budget_s=0)
    with pytest.raises(ConfigError, match="--profile-iterations=0: must be >= 1"):
        ProfileSettings(iterations_per_plan=0)


def test_probe_plans_run_and_cover_the_planner_space() -> None:
    job, config = load_job_config(CONFIG, SMALL)
    probes = job.probes(2, config)
    assert len(probes) >= 4 and {p.mode for p, _ in probes} == {"collocated", "hybrid"}
    for plan, _ in probes:
        job.check_plan(plan, config)
    stages = {p.granularity_of("loop") for p, _ in probes}
    assert min(stages) == 1 and max(stages) == config.num_envs  # the fewest and the most environments per op


def test_every_loop_step_size_is_measured_by_two_probes_with_different_compute() -> None:
    """Validation predicts a probe plan without its own samples (nor those of a plan with the same compute ops):
    each (op, devices, size, shared) a loop probe measures must be measured by another probe too."""
    from rlinf.app.validation import same_compute

    job, config = load_job_config(CONFIG, [])
    probes = [plan for plan, _ in job.probes(2, config)]
    workflow = job.workflow(config)
    measured: dict[tuple, list] = {}
    for plan in probes:
        for op in lower(workflow, plan, cpu_cluster(2)).ops:
            if op.name in ("act", "env_step"):
                key = (op.name, len(op.devices), op.samples, op.shared)
                if plan not in measured.setdefault(key, []):
                    measured[key].append(plan)
    assert {key[3] for key in measured} == {False, True}
    for key, plans in measured.items():
        assert any(not same_compute(a, b) for a in plans for b in plans), (key, [p.describe() for p in plans])


def test_profiling_stays_within_its_budget() -> None:
    """Each probe plan runs under a deadline, its share of what is left of the budget, and the phase starts a probe
    only when its expected start-up, warm-up and one iteration fit in its share, and stops iterating when the last
    iteration would not fit again. So the phase ends within its budget plus the time to stop one probe's workers
    (the margin asserted). Fifty iterations per plan would take far longer than the budget, so the budget, not the
    iteration count, ends the phase."""
    job, config = load_job_config(CONFIG, SMALL)
    budget_s = 12.0
    settings = ProfileSettings(budget_s=budget_s, iterations_per_plan=50, warmup_iterations=1)
    result = profile(job, config, 2, settings=settings, progress=False)
    assert result.elapsed_s <= budget_s + 3.0, result.elapsed_s
    assert result.iterations < 50 * len(job.probes(2, config))
    assert result.trace.provenance["kind"] == "profiled" and result.trace.provenance["budget_s"] == budget_s
    assert {"machine", "python", "packages", "date", "command"} <= set(result.trace.provenance)
    costs = fit(result.trace)
    assert ("env", "env_step") in costs.curves and ("actor", "train") in costs.curves
    # The saved trace says which probe plan measured which samples (validate --trace predicts out of sample).
    assert samples_by_plan(result.trace) == result.samples_by_plan


def test_merged_traces_keep_every_response_length() -> None:
    first = grpo_trace(response_lengths=(3.0, 40.0))
    second = grpo_trace(response_lengths=(7.0,))
    merged = merge_traces(first, second, grpo_trace())
    assert merged.response_lengths == (3.0, 40.0, 7.0)
    assert len(merged.samples) == 3 * len(first.samples)


def test_generation_orders_reverse_the_start_order_and_share_the_iterations() -> None:
    from rlinf.app.profiling import generation_orders, split_iterations

    assert generation_orders(3, 3) == [(0, 1, 2), (2, 1, 0), (0, 1, 2)]
    # Over two generations every plan's mean start position is the same.
    starts = [sum(order.index(plan) for order in generation_orders(5, 2)) for plan in range(5)]
    assert len(set(starts)) == 1
    assert split_iterations(7, 2) == [4, 3] and split_iterations(2, 2) == [1, 1]
    with pytest.raises(ConfigError, match="generations=0"):
        generation_orders(2, 0)


def test_plans_are_measured_one_at_a_time_in_turns_with_fresh_workers() -> None:
    """Each plan is measured in turns (warm-up, then its iterations back to back), each turn with new worker
    processes and no other plan's workers alive; the second generation of turns runs the plans in the reverse
    order (on real local backends, observed)."""
    from rlinf.app.profiling import local_backends, measure_plans

    job, config = load_job_config(CONFIG, SMALL)
    plans = [
        (
            plan_from_dict(
                {"placement": {"actor": 0, "env": 0, "rollout": 0}, "granularity": {"loop": loop}}, 1
            ),
            1,
        )
        for loop in (1, 2)
    ]  # 3 workers each, hosted by one process (they share the core): the test starts 4 processes
    local = local_backends(1)
    pids: list[set[int]] = []  # per backend opened, the worker processes seen
    runs: list[tuple[int, int]] = []  # (backend, stages of the program run)
    alive: list[int] = [0]

    class Observed:
        def __init__(self, logical: int) -> None:
            self.backend = local(logical)
            self.index = len(pids)
            pids.append(set())

        def __enter__(self) -> Observed:
            self.backend.__enter__()
            alive[0] += 1
            return self

        def __exit__(self, *exc: object) -> None:
            alive[0] -= 1
            self.backend.__exit__(*exc)

        def execute(self, program, workers, step=None, **run):  # type: ignore[no-untyped-def]
            assert alive[0] == 1, "another plan's workers are alive"
            stages = max(op.num_micro_batches for op in program.ops if op.name == "env_step")
            runs.append((self.index, stages))
            result = self.backend.execute(program, workers, step, **run)
            pids[self.index] |= set(self.backend.worker_pids().values())
            return result

    measured = measure_plans(
        job,
        config,
        plans,
        iterations=4,
        warmup_iterations=1,
        generations=2,
        backends=Observed,
        progress=False,
    )
    assert [len(m.iteration_s) for m in measured] == [4, 4]
    # Generation 1: plan 0 (loop 1) then plan 1 (loop 2), 1 warm-up + 2 measured each; generation 2 reversed.
    assert runs == [(0, 1)] * 3 + [(1, 2)] * 3 + [(2, 2)] * 3 + [(3, 1)] * 3
    # Each turn's workers are a new process (one: the three workers share one core).
    assert not pids[0] & pids[3] and not pids[1] & pids[2] and all(len(p) == 1 for p in pids)


def _probe(scale: float, train_s: float = 0.05) -> tuple:
    """One probe's samples: 3 training steps and 4 env steps, every op ``scale`` times its typical duration."""
    from rlinf.core.trace import CostSample

    plan = plan_from_dict({"placement": {"actor": "0", "env": "0", "rollout": "0"}}, 1)
    train = [CostSample(component="actor", op="train", devices=1, samples=8, seconds=train_s * scale)] * 3
    step = [CostSample(component="env", op="env_step", devices=1, samples=8, seconds=1e-3 * scale)] * 4
    moved = [CostSample(component="actor", op="sync_weights", devices=1, samples=0, seconds=2e-3 * scale)]
    return plan, tuple(train + step + moved)


def test_probe_speeds_are_evened_out_against_the_op_every_probe_ran() -> None:
    """A probe that ran 20% slow (its training step against the other probes') has its compute samples brought to
    the typical probe's speed; its movement samples and the other probes' stay as measured; with too few probes
    sharing an op nothing changes."""
    from rlinf.app.profiling import even_probe_speeds, evened, probe_speed_factors

    groups = [_probe(1.0), _probe(1.2), _probe(1.0), _probe(0.9)]
    assert probe_speed_factors(groups) == pytest.approx((1.0, 1.2, 1.0, 0.9))
    samples = even_probe_speeds(groups)
    assert len(samples) == sum(len(g[1]) for g in groups)
    compute = [s for s in samples if s.op != "sync_weights"]
    assert {round(s.seconds, 12) for s in compute if s.op == "env_step"} == {1e-3}
    assert {round(s.seconds, 12) for s in compute if s.op == "train"} == {0.05}
    assert sorted(round(s.seconds, 12) for s in samples if s.op == "sync_weights") == [
        1.8e-3,
        2e-3,
        2e-3,
        2.4e-3,
    ]
    assert probe_speed_factors(groups[:2]) == (1.0, 1.0)  # the reference op in fewer than 3 probes
    # A trace that does not say which probe measured what is fitted as it is.
    trace = grpo_trace()
    assert evened(trace) is trace
    # The shipped Hopper profile records its probes: evened, it keeps every sample in place, at another speed.
    shipped = load_trace("traces/hopper_ppo_cpu2.json")
    even = evened(shipped)
    assert len(even.samples) == len(shipped.samples) and even.samples != shipped.samples
    assert [(s.component, s.op, s.samples) for s in even.samples] == [
        (s.component, s.op, s.samples) for s in shipped.samples
    ]


def test_a_profile_from_another_processor_model_is_named() -> None:
    """A profile records this machine's processor model; planning from a profile of another model warns, naming
    both; a trace that names no model (synthesized, imported, or an older profile that recorded only the
    architecture) does not."""
    import platform

    import attrs

    from executor.devices import processor_name
    from rlinf.app.profiling import other_processor, provenance
    from rlinf.core.trace import load_trace

    here = processor_name()
    assert here and provenance("test")["processor"] == here
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists() and "model name" in cpuinfo.read_text():
        assert here != platform.machine()  # the model, not the architecture platform.processor() gives
    shipped = load_trace("traces/hopper_ppo_cpu2.json")
    assert (
        shipped.provenance["processor"] == "x86_64" and other_processor(shipped) is None
    )  # no model recorded

    def profiled_on(processor: str, kind: str = "profiled") -> Any:
        return attrs.evolve(shipped, provenance={**shipped.provenance, "kind": kind, "processor": processor})

    assert other_processor(profiled_on(here)) is None
    warning = other_processor(profiled_on("Another Processor 9000"))
    assert warning is not None and "'Another Processor 9000'" in warning and repr(here) in warning
    assert "leave out --trace" in warning
    assert other_processor(profiled_on("Another Processor 9000", kind="synthesized")) is None


SLOW_SECOND_PROBE = """
import time

from rlinf.workloads.embodied.env_worker import EnvWorker
from rlinf.workloads.embodied.workload import EmbodiedWorkload


class SlowEnv(EnvWorker):
    def setup(self, config, context):
        super().setup(config, context)
        # only in the second probe plan's layout on one core: the loop in 4 stages
        self.planted = context.loop_stages == 4

    def compute(self, op_name, micro_batch, step, inputs):
        if self.planted:
            time.sleep(3600)  # a probe far slower than its share
        return super().compute(op_name, micro_batch, step, inputs)


class SlowSecondProbe(EmbodiedWorkload):
    def workers(self, config):
        return {**super().workers(config), "env": SlowEnv}


WORKLOAD = SlowSecondProbe()
"""


@pytest.mark.filterwarnings("ignore::rlinf.core.errors.ExtrapolationWarning")
def test_a_probe_that_overruns_its_share_is_left_out_and_profiling_holds_its_budget(tmp_path: Path) -> None:
    """The second probe plan sleeps in its first env step: its share (half of what the first probe left) runs out,
    it is stopped and left out, the third is measured in what is left, the phase ends within its budget (plus
    stopping one probe's workers) and auto-planning never chooses the left-out plan's compute ops."""
    from rlinf.app.auto import plan_from_trace
    from rlinf.app.profiling import left_out_plans, same_compute

    (tmp_path / "slow.py").write_text(SLOW_SECOND_PROBE)
    (tmp_path / "config.yaml").write_text("workload: slow.py:WORKLOAD\nnum_envs: 4\n")
    job, config = load_job_config(tmp_path / "config.yaml", SMALL)
    slow = job.probes(1, config)[1][0]  # on one core: 3 probe plans, one process each (quick to start)
    assert slow.describe() == "collocated: actor@0 env@0 rollout@0 | loop=4"
    # Start the workers' fork server (it imports torch once per process: 19 s at a load average of 12 on the 2
    # cores) with the first probe's workers, as a process that has run a plan before has: the phase's estimates
    # of a probe's start-up then hold, and the slow probe is started (within its share) rather than skipped.
    first = job.probes(1, config)[0][0]
    program = job.lower(first, config, 1)
    with executor.LocalBackend(executor.cpu_devices(1)) as backend:
        executor.run(program, job.worker_specs(config, first, program), backend=backend)
    budget_s = 30.0
    settings = ProfileSettings(budget_s=budget_s, iterations_per_plan=2, warmup_iterations=1)
    result = profile(job, config, 1, settings=settings, progress=False, state_dir=tmp_path)
    assert result.elapsed_s <= budget_s + 3.0  # stopping the last probe's workers
    (probe,) = result.left_out
    assert probe.plan == slow and probe.seconds <= budget_s / 2 + 3.0
    assert probe.line() == f"probe {slow.describe()} did not finish in {probe.seconds:.0f} s: left out"
    assert slow.describe() not in result.plans and len(result.plans) == 2  # the probes before and after it
    assert left_out_plans(result.trace) == (slow,)
    auto = plan_from_trace(job, config, result.trace, 1)
    assert not any(same_compute(c.plan, slow) for c in auto.candidates)
    forgotten = plan_from_trace(job, config, _forgetting(result.trace), 1)
    assert any(same_compute(c.plan, slow) for c in forgotten.candidates)  # the exclusion has teeth


def _forgetting(trace: Any) -> Any:
    """``trace`` without its record of left-out probes (what auto-planning would otherwise see)."""
    import attrs

    provenance = {k: v for k, v in trace.provenance.items() if k != "probe_plans_left_out"}
    return attrs.evolve(trace, provenance=provenance)


def test_a_probe_takes_half_of_what_is_left_until_two_different_probes_are_measured() -> None:
    from rlinf.app.profiling import probe_share_s

    assert probe_share_s(120.0, 22, 0) == 60.0  # the first: half, the other half for the next
    assert probe_share_s(60.0, 21, 0) == 30.0  # the first was left out: half again
    assert probe_share_s(100.0, 21, 1) == 50.0  # one measured: still room kept for a second
    assert probe_share_s(50.0, 20, 2) == 50.0  # two with different compute ops: what is left
    assert probe_share_s(80.0, 1, 0) == 80.0  # the last probe: all of it
