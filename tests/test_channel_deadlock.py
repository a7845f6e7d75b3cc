"""Issue 48: two worker processes that send each other more than a pipe holds, at the same moment, must not
deadlock. Hopper with 8 environments x 188 steps, the loop cut into 4 stages pinned over 2 cores (collocated),
hung for ever before the fix: at the loop's end each core's process sends the other core's actor replica one
trajectory share per stage it ran (2 stages x 32.7 KB of arrays under the shared-memory threshold, so inline in
the pipe), more than the 64 KiB a Linux pipe holds, and neither read while it wrote. 186 steps finished, 188, 190,
192 and 256 hung (the issue's shapes); the smallest that hung is the one run here."""

from __future__ import annotations

import os
import signal
from multiprocessing.connection import Pipe

import numpy as np

import executor
from executor.channels import SHM_MIN_BYTES, Mailbox, WorkerAddress
from rlinf.app.jobs import get_job
from rlinf.core.plan import plan_from_yaml
from rlinf.workloads.embodied.config import EmbodiedConfig

SMALLEST_HUNG = EmbodiedConfig(num_envs=8, num_steps=188, num_epochs=1, num_minibatches=1, seed=0)
OBS_SIZE = 11
"""Hopper-v5's observation width: a trajectory share's observations are 188 x 11 float32 = 8,272 bytes."""


def test_the_smallest_shape_that_hung_runs_an_iteration() -> None:
    # the band the bug lived in: each array inline (under the threshold), two stages' shares over a pipe's 64 KiB
    assert SMALLEST_HUNG.num_steps * OBS_SIZE * 4 < SHM_MIN_BYTES
    job = get_job("embodied_ppo")
    plan = plan_from_yaml("placement: {env: 0-1, rollout: 0-1, actor: 0-1}\ngranularity: {loop: 4}", 2)
    program = job.lower(plan, SMALLEST_HUNG, 2)
    specs = job.worker_specs(SMALLEST_HUNG, plan, program)
    # stall_timeout_s: before the fix the run raised WorkerError("no worker reported for 30 s") here
    with executor.LocalBackend(executor.cpu_devices(2), stall_timeout_s=30.0) as backend:
        result = executor.run(program, specs, backend=backend)
    losses = [i.info for i in result.infos if "policy_loss" in i.info]
    assert len(losses) == 2  # both actor replicas trained on the trajectories the other core sent them


def test_a_sender_reads_its_own_pipes_while_its_message_does_not_fit() -> None:
    """Two mailboxes of one process, each sending the other 200 KB inline (small arrays) before reading: with a
    blocking write the first send never returned."""
    a_to_b_read, a_to_b_write = Pipe(duplex=False)
    b_to_a_read, b_to_a_write = Pipe(duplex=False)
    a = Mailbox(WorkerAddress(worker=0), {1: a_to_b_write}, [b_to_a_read], {})
    b = Mailbox(WorkerAddress(worker=1), {0: b_to_a_write}, [a_to_b_read], {})
    chunk = {f"part{i}": np.full(SHM_MIN_BYTES // 8 - 64, i, dtype=np.float64) for i in range(13)}
    assert (
        sum(v.nbytes for v in chunk.values()) > 3 * 65536
        and max(v.nbytes for v in chunk.values()) < SHM_MIN_BYTES
    )
    pid = os.fork()
    if pid == 0:  # b's side, in a child process: send first, then read what a sent
        code = 1
        try:
            signal.alarm(20)  # a deadlocked child dies
            b.send(0, ("from b",), chunk)
            got = b.receive(("from a",))
            code = 0 if all(np.array_equal(got[k], chunk[k]) for k in chunk) else 3
        finally:
            os._exit(code)

    def stuck(*_: object) -> None:
        os.kill(pid, signal.SIGKILL)
        raise TimeoutError("both sides still writing after 20 s: deadlocked")

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(20)
    try:
        a.send(1, ("from a",), chunk)
        got = a.receive(("from b",))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert all(np.array_equal(got[k], chunk[k]) for k in chunk)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
