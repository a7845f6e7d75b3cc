"""The simpy engine.

Semantics (the same as the executor's): an op starts when its dependencies are done and each of its devices has
finished the op before it in that device's order. Each op is one simpy timeout; when it fires, its callback
releases the ops waiting on it. simpy's event queue orders simultaneous events by insertion, so a run is fully
determined by the program, the durations and (for stochastic costs) the seed.

Memory is accounted per device in event order: component states resident at the start, ``onload`` adds a state
when it starts, ``offload`` frees it when it ends, and compute ops hold their transient activation memory while
they run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import simpy

from rlinf.core.costs import CostModel
from rlinf.core.program import Program
from rlinf.core.schedule import Phase
from rlinf.core.timeline import Timeline


def simulate(
    program: Program,
    costs: CostModel,
    *,
    seed: int = 0,
    stochastic: bool = False,
    phase: Phase = Phase.STEADY,
) -> Timeline:
    """Predict the timeline of one iteration of ``program``: a step of ``phase`` of its run
    (:meth:`rlinf.core.program.Program.schedule`; the plan's steady state by default). The ops of the components
    a fill or drain step idles (:meth:`rlinf.core.schedule.Phase.idle`) take no time and no activation memory
    there, as the executor only signals them.

    With ``stochastic=True`` the durations that depend on random quantities (response lengths of streamed
    generation) are drawn from the trace's distributions with ``seed``; otherwise expected values are used and
    ``seed`` has no effect. Either way the same inputs give the same timeline."""
    rng = np.random.default_rng(seed) if stochastic else None
    durations = costs.durations(program, rng)
    activation = [costs.activation_bytes(op) for op in program.ops]
    idle = phase.idle({op.component for op in program.ops}, program.trainer_side)
    if idle:
        skipped = np.array([op.component in idle for op in program.ops], dtype=bool)
        durations = np.where(skipped, 0.0, durations)
        activation = [0 if skip else a for skip, a in zip(skipped, activation, strict=True)]
    return replay(program, durations, activation)


def replay(
    program: Program, durations: Sequence[float] | np.ndarray, activation_bytes: Sequence[int] | None = None
) -> Timeline:
    """Run the program's event simulation with given op durations (seconds) and transient memory (bytes)."""
    ops = program.ops
    num_ops = len(ops)
    if len(durations) != num_ops:
        raise ValueError(f"durations has {len(durations)} entries for {num_ops} ops")
    if any(d < 0 for d in durations):
        bad = next(i for i, d in enumerate(durations) if d < 0)
        raise ValueError(f"negative duration {durations[bad]} for op {ops[bad].label}")
    activation = activation_bytes if activation_bytes is not None else [0] * num_ops

    initial_waiting, releases = program.release_graph
    waiting = list(initial_waiting)
    lanes = program.lanes
    lanes_of = program.lanes_of_op
    # Memory each op adds when it starts (onload: a state; compute: activations) and frees when it ends.
    added = [op.num_bytes if op.kind == "onload" else activation[op.index] for op in ops]
    freed = [op.num_bytes if op.kind == "offload" else activation[op.index] for op in ops]

    env = simpy.Environment()
    start = [0.0] * num_ops
    end = [-1.0] * num_ops
    # Devices of one lane share their memory history, so memory is tracked per lane.
    memory = [lane.initial_resident_bytes for lane in lanes]
    peak = list(memory)
    delays = [float(d) for d in durations]

    def launch(index: int) -> None:
        start[index] = env.now
        if added[index]:
            for lane_index in lanes_of[index]:
                memory[lane_index] += added[index]
                if memory[lane_index] > peak[lane_index]:
                    peak[lane_index] = memory[lane_index]
        env.timeout(delays[index], value=index).callbacks.append(finish)

    def finish(event: simpy.Event) -> None:
        index: int = event.value  # type: ignore[assignment]
        end[index] = env.now
        if freed[index]:
            for lane_index in lanes_of[index]:
                memory[lane_index] -= freed[index]
        for successor in releases[index]:
            waiting[successor] -= 1
            if waiting[successor] == 0:
                launch(successor)

    for index in range(num_ops):
        if waiting[index] == 0:
            launch(index)
    env.run()
    stuck = [ops[i].label for i in range(num_ops) if end[i] < 0]
    assert not stuck, f"program deadlocked; ops never ran: {stuck[:5]}"

    peak_per_device = [0] * program.num_devices
    for lane_index, lane in enumerate(lanes):
        for device in lane.devices:
            peak_per_device[device] = peak[lane_index]
    return Timeline(
        program=program, start_s=start, end_s=end, peak_memory_bytes=peak_per_device, source="simulated"
    )
