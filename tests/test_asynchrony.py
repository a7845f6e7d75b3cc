"""Asynchrony in one place (:mod:`rlinf.core.schedule`): a staleness-``k`` program's schedule (``k`` fill steps,
steady steps, ``k`` drain steps, a policy version each) is what the simulator and the executor run; the executor
stamps every batch it moves with the version that produced it and refuses one read outside the lag bound; the
batches a buffer holds between runs leave in a checkpoint as typed records (older positional ones still load)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
from executor_workers import ChainWorker, chain_facts
from factories import costs_for, grpo_trace
from test_executor import chain_program

import executor
from executor.stamps import BufferedBatch
from rlinf.api import Stamp, stamp_of
from rlinf.app import state_codec
from rlinf.app.checkpoint import checkpoint_name, load_latest, save_checkpoint
from rlinf.cli import main
from rlinf.core.errors import ConfigError
from rlinf.core.lowering import lower
from rlinf.core.plan import plan_from_yaml
from rlinf.core.schedule import UNSTAMPED, Phase, Schedule, StampedPayload
from simulator import simulate

APART_K1 = "placement: {rollout: 0, reward: 0, actor: 1}\nmax_staleness: 1\n"
"""The chain flow (rollout -> reward -> actor, weights back to the rollout) one step off: the actor on its own
device trains on the batch the rollout side made the step before."""


class StampWorker(ChainWorker):
    """A :class:`ChainWorker` that keeps the stamps of what it receives (``seen``, through ``backend.call``)."""

    def setup(self, config: dict[str, Any], context: Any) -> None:
        super().setup(config, context)
        self.stamps: list[tuple[str, int, int]] = []

    def compute(self, op_name: str, micro_batch: int, step: int, inputs: list) -> tuple[dict, dict]:
        self.stamps += [(op_name, stamp_of(p).policy_version, stamp_of(p).lag) for p in inputs]
        if not inputs:
            self.stamps.append((op_name, -1, -1))  # an op without inputs: it ran
        return super().compute(op_name, micro_batch, step, inputs)

    def load_weights(self, payload: dict[str, np.ndarray]) -> None:
        self.stamps.append(("weights", stamp_of(payload).policy_version, stamp_of(payload).lag))
        super().load_weights(payload)

    def seen(self) -> list[tuple[str, int, int]]:
        return [tuple(s) for s in self.stamps]  # type: ignore[misc]


def stamp_specs() -> dict[str, executor.WorkerSpec]:
    return {
        name: executor.WorkerSpec(
            factory=StampWorker, facts=chain_facts(name), config={"seconds": 0.001, "rows": 4}
        )
        for name in ("rollout", "reward", "actor")
    }


# ---------------------------------------------------------------------------------------------- the schedule
@pytest.mark.parametrize("k", [0, 1, 2])
def test_a_staleness_k_program_runs_k_fill_steps_then_steady_then_k_drain(k: int) -> None:
    program = lower(grpo_trace().workflow, plan_from_yaml(APART_GRPO + f"max_staleness: {k}\n", 8), CLUSTER)
    schedule = program.schedule(5)
    assert schedule == Schedule(num_iterations=5, max_staleness=k)
    steps = list(schedule)
    assert [s.phase for s in steps] == [Phase.FILL] * k + [Phase.STEADY] * (5 - k) + [Phase.DRAIN] * k
    assert [s.number for s in steps] == list(range(1, 6 + k))
    # The trainers train in every step but the fill steps; a step's version counts the trainings before it.
    assert [s.policy_version for s in steps] == [max(0, n - 1 - k) for n in range(1, 6 + k)]
    assert [s.trained_iterations for s in steps][-1] == 5 and [s.produced_iterations for s in steps][-1] == 5
    # The batch of step j is read k steps later, at most k versions on.
    lags = [steps[j + k].policy_version - steps[j].policy_version for j in range(5)]
    assert lags == [min(j, k) for j in range(5)]


def test_a_metrics_record_states_its_phase_by_the_enum_value_and_old_records_read_as_steady() -> None:
    assert Phase.of_record({"phase": "drain"}) is Phase.DRAIN
    assert Phase.of_record({"iteration": 3}) is Phase.STEADY  # synchronous runs, older files
    with pytest.raises(ValueError, match="'idle' is not a valid Phase"):
        Phase.of_record({"phase": "idle"})


APART_GRPO = "placement: {rollout: 0-3, reward: 0-3, inference: 0-3, actor: 4-7}\n"
CLUSTER = grpo_trace().cluster.with_num_devices(8)


def test_the_simulator_runs_each_phase_of_the_schedule() -> None:
    """A fill step is the rollout side alone, a drain step the actor alone (their other ops take no time), a steady
    step both: the plan's steady state, the default."""
    trace = grpo_trace()
    costs = costs_for(trace)
    program = lower(trace.workflow, plan_from_yaml(APART_GRPO + "max_staleness: 1\n", 8), CLUSTER)
    timelines = {step.phase: simulate(program, costs, phase=step.phase) for step in program.schedule(3)}
    assert simulate(program, costs).iteration_s == timelines[Phase.STEADY].iteration_s

    def busy(phase: Phase) -> set[str]:
        timeline = timelines[phase]
        return {
            op.component
            for op, start, end in zip(program.ops, timeline.start_s, timeline.end_s, strict=True)
            if op.kind == "compute" and end > start
        }

    assert busy(Phase.FILL) == {"rollout", "reward", "inference"}
    assert busy(Phase.DRAIN) == {"actor"}
    assert busy(Phase.STEADY) == {"rollout", "reward", "inference", "actor"}
    assert timelines[Phase.FILL].iteration_s < timelines[Phase.STEADY].iteration_s
    assert timelines[Phase.DRAIN].iteration_s < timelines[Phase.STEADY].iteration_s


# ---------------------------------------------------------------------------------------------- the executor
def test_the_executor_runs_the_schedule_and_stamps_every_batch_with_its_version() -> None:
    """Three iterations one step off (4 steps): the actor sits the fill step out, then reads the batch of the step
    before, stamped with the version that made it, ``min(j - 1, 1)`` behind; the rollout sits the drain step out
    and takes each trained version's weights, stamped one on."""
    program = chain_program(APART_K1)
    with executor.LocalBackend(executor.cpu_devices(2)) as backend:
        for step in program.schedule(3):
            executor.run(program, stamp_specs(), backend=backend, step=step)
        seen = {name: backend.call(name, "seen") for name in ("rollout", "reward", "actor")}
    assert [s for s in seen["actor"] if s[0] == "train"] == [
        ("train", 0, 0),
        ("train", 0, 1),
        ("train", 1, 1),
    ]
    assert [s for s in seen["rollout"] if s[0] == "generate"] == [
        ("generate", -1, -1)
    ] * 3  # not in the drain
    assert [s for s in seen["rollout"] if s[0] == "weights"] == [("weights", 1, 0), ("weights", 2, 0)]
    assert [s[1:] for s in seen["reward"]] == [(0, 0), (0, 0), (1, 0)]  # fresh, at the rollout's version


def test_the_executor_refuses_a_batch_further_behind_than_the_bound() -> None:
    """Under ``max_staleness: 1`` a buffered batch read one version on is trained on; one read three versions on
    (a step run out of the schedule) stops the run naming the reader, the versions and the bound, and so does a
    batch planted through a checkpoint's typed record with a stamp four versions old."""
    program = chain_program(APART_K1)
    schedule = program.schedule(10)
    late = schedule.step(6)
    assert late.phase is Phase.STEADY and late.policy_version == 4
    with executor.LocalBackend(executor.cpu_devices(2)) as backend:
        executor.run(program, stamp_specs(), backend=backend, step=schedule.step(1))
        (record,) = backend.buffered()
        assert record.policy_version == 0 and record.age == 0
        executor.run(program, stamp_specs(), backend=backend, step=schedule.step(3))  # version 1: lag 1
        assert ("train", 0, 1) in backend.call("actor", "seen")
        with pytest.raises(executor.WorkerError) as skipped:  # the batch of version 1, read at 4
            executor.run(program, stamp_specs(), backend=backend, step=late)
    assert "LagBoundError: actor.train[0] read a batch of policy version 1 at version 4" in str(skipped.value)
    with executor.LocalBackend(executor.cpu_devices(2)) as backend:
        backend.start(program, stamp_specs())
        backend.rebuffer([attrs.evolve(record, policy_version=0)])
        with pytest.raises(executor.WorkerError) as planted:
            executor.run(program, stamp_specs(), backend=backend, step=late)
    message = str(planted.value)
    assert "LagBoundError: actor.train[0] read a batch of policy version 0 at version 4" in message
    assert "4 versions behind, outside the plan's bound 0..1 (max_staleness)" in message


def test_a_payload_not_moved_by_the_executor_reads_as_current() -> None:
    assert stamp_of({"x": np.zeros(1)}) == UNSTAMPED and UNSTAMPED.lag == 0
    stamped = StampedPayload({"x": np.zeros(1)}, Stamp(2, 3))
    assert stamp_of(stamped).lag == 1 and dict(stamped).keys() == {"x"}


# ---------------------------------------------------------------------------------------------- checkpoints
def test_a_buffered_batch_is_checkpointed_as_a_typed_record() -> None:
    batch = BufferedBatch(
        worker=2, age=0, op=7, producer=1, policy_version=3, payload={"obs": np.arange(6.0).reshape(3, 2)}
    )
    decoded = state_codec.decode(state_codec.encode({"buffered": [batch.to_checkpoint()]}))["buffered"]
    assert decoded[0]["policy_version"] == 3 and set(decoded[0]) == set(batch.to_checkpoint())
    again = BufferedBatch.from_checkpoint(0, decoded[0], checkpoint_step=5, max_staleness=1)
    assert attrs_equal(again, batch)


def test_a_positional_buffered_batch_of_an_older_checkpoint_still_loads_with_its_schedule_stamp() -> None:
    """Written before batches were stamped: ``[worker, age, op, producer, payload]``. Saved after step 5 of a
    ``k = 1`` run with age 0, it was made in step 5, at version ``5 - 1 - 1 = 3``."""
    old = [2, 0, 7, 1, {"obs": np.zeros((3, 2))}]
    batch = BufferedBatch.from_checkpoint(0, old, checkpoint_step=5, max_staleness=1)
    assert (batch.worker, batch.age, batch.op, batch.producer, batch.policy_version) == (2, 0, 7, 1, 3)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"worker": 0},
            r"checkpoint buffered batch 0=\['worker'\]: must be a record with exactly \['worker', 'age'",
        ),
        ([0, 9, 1, 1, {}], r"checkpoint buffered batch 0 age=9: is older than the checkpoint's step 5"),
        (
            {"worker": -1, "age": 0, "op": 1, "producer": 0, "policy_version": 0, "payload": {}},
            r"checkpoint buffered batch 0 worker=-1: must be an integer >= 0",
        ),
    ],
)
def test_a_malformed_buffered_batch_is_refused_in_one_line(entry: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as error:
        BufferedBatch.from_checkpoint(0, entry, checkpoint_step=5, max_staleness=1)
    assert "\n" not in str(error.value)


def attrs_equal(a: BufferedBatch, b: BufferedBatch) -> bool:
    """Field by field (payload arrays by value)."""
    numbers = ("worker", "age", "op", "producer", "policy_version")
    return (
        all(getattr(a, n) == getattr(b, n) for n in numbers)
        and a.payload.keys() == b.payload.keys()
        and all(np.array_equal(a.payload[k], b.payload[k]) for k in a.payload)
    )


# ---------------------------------------------------------------------------------------------- a real run
HOPPER_K1 = ["train", "examples/hopper_ppo.yaml", "--no-progress", "--mode", "disaggregated"]
HOPPER_K1 += ["--max-staleness", "1", "--iterations", "4", "--set", "execution.checkpoint_every=2"]
HOPPER_K1 += [arg for item in ("num_envs=4", "num_steps=16", "num_epochs=1") for arg in ("--set", item)]


def _computed(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.endswith("_s")} for line in lines]


def _keep_only_step_2(run: Path, rewrite: Callable[[list], list]) -> None:
    """Leave only the checkpoint of step 2, its buffered batches written as ``rewrite`` returns them."""
    checkpoints = run / "checkpoints"
    state = state_codec.decode((checkpoints / checkpoint_name(2)).read_bytes())
    assert state["iteration"] == 2 and state["buffered"]
    shutil.rmtree(checkpoints)
    checkpoints.mkdir()
    save_checkpoint(checkpoints, 2, {**state, "buffered": rewrite(state["buffered"])})


def test_a_run_resumes_exactly_from_a_checkpoint_with_positional_buffered_batches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Hopper one step off, resumed after step 2 from a checkpoint whose buffered batch is written the way
    checkpoints were before batches were stamped (``[worker, age, op, producer, payload]``): it computes steps 3 to
    5 as the uninterrupted run did. A record that is neither form stops the resume in one line, exit code 2."""
    straight = tmp_path / "straight"
    assert main([*HOPPER_K1, "--out", str(straight)]) == 0
    written = load_latest(straight / "checkpoints").state["buffered"]
    assert all(
        set(entry) == {"worker", "age", "op", "producer", "policy_version", "payload"} for entry in written
    )
    old = tmp_path / "old"
    shutil.copytree(straight, old)
    _keep_only_step_2(
        old, lambda entries: [[e["worker"], e["age"], e["op"], e["producer"], e["payload"]] for e in entries]
    )
    assert main([*HOPPER_K1, "--resume", str(old), "--out", str(old)]) == 0
    assert _computed(old) == _computed(straight)
    broken = tmp_path / "broken"
    shutil.copytree(straight, broken)
    _keep_only_step_2(broken, lambda entries: [{"worker": 0}])
    capsys.readouterr()
    assert main([*HOPPER_K1, "--resume", str(broken), "--out", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "checkpoint buffered batch 0=['worker']: must be a record with exactly" in err
    assert "Traceback" not in err and len([line for line in err.splitlines() if "error" in line]) == 1
