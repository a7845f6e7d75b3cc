"""A training run's checkpoint as a typed record: what the runner saves every ``checkpoint_every`` iterations and a
segment starts from (``--resume``, a restart after a worker failure).

:class:`RunCheckpoint` is written with :func:`rlinf.app.checkpoint.save_checkpoint` as the state
:meth:`RunCheckpoint.to_state` gives (the layout of every earlier version: ``iteration``, ``workload``, ``config``,
``plan``, ``workers``, ``driver_rng``, ``measured`` and, under a staleness bound, ``buffered``) and read back with
:func:`load_run_checkpoint`, which checks the layout (a file of another layout is refused with one line).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from executor.stamps import BufferedBatch
from rlinf.app.checkpoint import load_latest
from rlinf.core.errors import ConfigError, require
from rlinf.core.schedule import Schedule

RESUME_MAY_CHANGE = frozenset({"iterations", "num_iterations", "checkpoint_every", "max_staleness"})
"""Config keys (at any depth) that may differ between a run and its resumption. ``execution.max_staleness`` is the
bound a run may use (auto mode chooses one up to it); the bound it runs with is its plan's, compared on its own."""


@attrs.frozen(kw_only=True)
class DriverRng:
    """The driver's random states: Python's, NumPy's global and torch's CPU generator."""

    python: Any
    numpy: Any
    torch: Any

    @classmethod
    def capture(cls) -> DriverRng:
        """The driver's random states now."""
        import random

        import numpy as np
        import torch

        return cls(python=random.getstate(), numpy=np.random.get_state(), torch=torch.get_rng_state())

    def restore(self) -> None:
        """Put these states back."""
        import random

        import numpy as np
        import torch

        random.setstate(self.python)
        np.random.set_state(self.numpy)
        torch.set_rng_state(self.torch)


@attrs.frozen(kw_only=True)
class KeptIteration:
    """A measured iteration as a checkpoint keeps it: its ops' start and end times and the peak memory per device."""

    iteration: int
    counted: bool
    """Whether its ops count as cost samples (not a warm-up, fill or drain step)."""
    start_s: tuple[float, ...]
    end_s: tuple[float, ...]
    peak_memory_bytes: tuple[int, ...]


@attrs.frozen(kw_only=True)
class RunCheckpoint:
    """Everything a run needs to go on from the end of ``iteration`` as if it had never stopped."""

    iteration: int
    workload: str
    config: Mapping[str, Any]
    """The config and run settings as :meth:`rlinf.app.jobs.Job.recorded` gives them."""
    plan: Mapping[str, Any]
    """The plan, as :meth:`rlinf.core.plan.Plan.to_dict` gives it."""
    workers: Any
    """Every replica's ``checkpoint()``, per component (the executor's snapshot)."""
    driver_rng: DriverRng
    measured: tuple[KeptIteration, ...]
    """The counted measured iterations and the last one (the run's trace and prediction accuracy need them)."""
    buffered: Any = None
    """Under a staleness bound: the batches produced but not yet trained on, as checkpoint entries
    (:meth:`executor.stamps.BufferedBatch.to_checkpoint`)."""

    def to_state(self) -> dict[str, Any]:
        """The state :func:`rlinf.app.checkpoint.save_checkpoint` writes (tensors for the op times)."""
        import torch

        kept = self.measured
        state = {
            "iteration": self.iteration,
            "workload": self.workload,
            "config": dict(self.config),
            "plan": dict(self.plan),
            "workers": self.workers,
            "driver_rng": {"python": self.driver_rng.python, "numpy": self.driver_rng.numpy,
                           "torch": self.driver_rng.torch},
            "measured": {
                "iteration": [m.iteration for m in kept],
                "counted": [m.counted for m in kept],
                "start_s": torch.tensor([list(m.start_s) for m in kept], dtype=torch.float64),
                "end_s": torch.tensor([list(m.end_s) for m in kept], dtype=torch.float64),
                "peak_memory_bytes": [list(m.peak_memory_bytes) for m in kept],
            },
        }  # fmt: skip
        if self.buffered is not None:
            state["buffered"] = self.buffered
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any], where: str) -> RunCheckpoint:
        """The record of a state :meth:`to_state` wrote (``where``: the file, named in a refusal)."""
        fix = "resume a run written by this version, or start a new run"
        if "workers" not in state:
            raise ConfigError("--resume", state.get("iteration"), "the checkpoint has no worker states", fix)
        try:
            rng, kept = state["driver_rng"], state["measured"]
            return cls(
                iteration=int(state["iteration"]),
                workload=str(state["workload"]),
                config=dict(state["config"]),
                plan=dict(state["plan"]),
                workers=state["workers"],
                driver_rng=DriverRng(python=rng["python"], numpy=rng["numpy"], torch=rng["torch"]),
                measured=_kept(kept),
                buffered=state.get("buffered") or None,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ConfigError(
                where, f"{type(error).__name__}: {error}", "is not a training run's checkpoint", fix
            ) from None

    def check_resumable(
        self, *, workload: str, config: Mapping[str, Any], plan: Mapping[str, Any], iterations: int
    ) -> None:
        """Raise unless this checkpoint was written by the same workload, config (iteration count, checkpoint
        interval and staleness bound aside, :data:`RESUME_MAY_CHANGE`) and plan, and holds what a run of
        ``iterations`` iterations goes on from (:meth:`check_buffer_holds`)."""

        def relevant(flat: Mapping[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in flat.items() if k.rsplit(".", 1)[-1] not in RESUME_MAY_CHANGE}

        saved_config, now_config = relevant(_flatten(self.config)), relevant(_flatten(config))
        fix = "resume with the config the run was started with"
        if self.workload != workload:
            raise ConfigError(
                "--resume workload", workload, f"differs from the checkpoint's {self.workload!r}", fix
            )
        changed = sorted(
            k for k in set(saved_config) | set(now_config) if saved_config.get(k) != now_config.get(k)
        )
        if changed:
            raise ConfigError("--resume config", changed, "differs from the checkpoint's", fix)
        if self.plan != plan:
            raise ConfigError(
                "--resume plan",
                plan,
                "differs from the checkpoint's",
                "resume without --plan/--mode (the run's plan)",
            )
        self.check_buffer_holds(iterations, int(plan.get("max_staleness", 0)))

    def check_buffer_holds(self, iterations: int, max_staleness: int) -> None:
        """Under a staleness bound, raise when the next step of a run of ``iterations`` iterations would train on
        batches this checkpoint does not hold: a run that finished drained its buffer (its last steps trained the
        last batches); resumed with more ``--iterations``, its next steady step would wait forever for a batch."""
        if not max_staleness or self.iteration >= iterations:
            return
        before = Schedule(num_iterations=iterations, max_staleness=max_staleness).step(self.iteration)
        needed = before.produced_iterations - before.trained_iterations
        held = {
            BufferedBatch.from_checkpoint(
                i, entry, checkpoint_step=self.iteration, max_staleness=max_staleness
            ).age
            for i, entry in enumerate(self.buffered or [])
        }
        require(
            len(held) >= needed,
            "--iterations",
            iterations,
            f"continues a run whose checkpoint at step {self.iteration} holds {len(held)} of the {needed} buffered "
            f"batch(es) its next step trains on (under staleness {max_staleness} the run drained its buffer when "
            "it ended)",
            "resume with the iterations the run was started with, or start a new run (--merge-trace "
            "RUN/trace.json keeps its measurements)",
        )


def _kept(measured: Mapping[str, Any]) -> tuple[KeptIteration, ...]:
    """The measured iterations of a checkpoint's ``measured`` entry (op times as tensors, one row per iteration)."""
    return tuple(
        KeptIteration(
            iteration=int(iteration),
            counted=bool(counted),
            start_s=tuple(float(x) for x in start),
            end_s=tuple(float(x) for x in end),
            peak_memory_bytes=tuple(int(x) for x in peak),
        )
        for iteration, counted, start, end, peak in zip(
            measured["iteration"],
            measured["counted"],
            measured["start_s"].tolist(),
            measured["end_s"].tolist(),
            measured["peak_memory_bytes"],
            strict=True,
        )
    )


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def load_run_checkpoint(directory: str | Path) -> RunCheckpoint:
    """The newest valid checkpoint of a run's ``checkpoints/`` (:func:`rlinf.app.checkpoint.load_latest`: a corrupt
    newer one is skipped with a warning) as a :class:`RunCheckpoint`."""
    loaded = load_latest(directory)
    return RunCheckpoint.from_state(loaded.state, str(loaded.path))


def resume_workers(backend: Any, program: Any, specs: Mapping[str, Any], checkpoint: RunCheckpoint) -> int:
    """Start ``backend``'s workers for ``program``, restore them, their buffered batches and the driver's random
    states from ``checkpoint``; returns the next iteration."""
    backend.start(program, specs)
    backend.restore(checkpoint.workers)
    if checkpoint.buffered:  # a staleness bound's samples produced but not yet trained on
        backend.rebuffer(
            [
                BufferedBatch.from_checkpoint(
                    i, entry, checkpoint_step=checkpoint.iteration, max_staleness=program.max_staleness
                )
                for i, entry in enumerate(checkpoint.buffered)
            ]
        )
    checkpoint.driver_rng.restore()
    return checkpoint.iteration + 1


def kept_iterations(measured: Sequence[Any]) -> tuple[KeptIteration, ...]:
    """What a checkpoint keeps of a run's measured iterations (:class:`rlinf.app.runner.MeasuredIteration`): the
    counted ones and the last."""
    kept = [m for m in measured if m.counted]
    if measured and not measured[-1].counted:
        kept.append(measured[-1])
    return tuple(
        KeptIteration(
            iteration=m.iteration,
            counted=m.counted,
            start_s=tuple(m.timeline.start_s),
            end_s=tuple(m.timeline.end_s),
            peak_memory_bytes=tuple(m.timeline.peak_memory_bytes),
        )
        for m in kept
    )
