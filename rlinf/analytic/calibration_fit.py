"""The numerical side of calibration: the analytic model's seconds as a function of its free parameters, and the
least-squares fit of them (see :mod:`rlinf.analytic.calibration` for what is fitted to what).

Parameters live in log space: an efficiency of 0.5 is ``log(0.5)``, so that a step means the same relative change
for an MFU and for an overhead of milliseconds, and bounds keep efficiencies in ``(0, 1]`` and seconds positive.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np
from scipy.optimize import least_squares

from rlinf.analytic.calibration_samples import Observation
from rlinf.analytic.llm_workload import OPS, LLMWorkload
from rlinf.analytic.roofline import OpTime
from rlinf.analytic.synthesis import OP_OF_ROLE, Physics

EFFICIENCIES = ("prefill_mfu", "decode_mbu", "train_mfu", "critic_train_mfu")
PARAMETERS = (*EFFICIENCIES[:3], "reward_seconds_per_sample", *(f"overhead_s.{op}" for op in OPS))
"""Free parameters of every workload, in the order of the fit vector. ``overhead_s.<op>`` is the fixed cost of
that op."""
CRITIC_PARAMETERS = ("critic_train_mfu", "overhead_s.critic_train")
"""Added for PPO: the critic's training gets its own efficiency and fixed cost (a critic trains another model,
often with other micro-batches and a value head, so its time is not the actor's). Their prior is the actor's."""
CRITIC_LABEL = "train (critic)"
"""How the critic's train observations are reported, apart from the actor's."""
BOUNDS = {"efficiency": (1e-4, 1.0), "seconds": (1e-9, 1e5)}
"""Search range of each kind of parameter; seconds at the lower bound are reported as zero."""
FLAT_SENSITIVITY = 1e-9
"""A parameter whose log-space step moves no fitted log-residual by more than this is unconstrained."""
PRIOR_WEIGHT = 0.01
"""Weight of the pull towards the prior: moving a parameter's log by ``d`` costs as much as a log-residual of
``0.01 * d`` on one sample. Negligible next to the data for a parameter the samples determine; decisive for one
they cannot tell apart from another (e.g. an op's efficiency and its overhead when every sample of the op has the
same size), which then stays near its prior instead of drifting."""
PRIOR_SHARE_WEAK = 0.3
"""A parameter whose fitted variance is more than this share of what the prior pull alone would give is
reported as weakly constrained..."""
WEAK_RELATIVE_ERROR = 0.5
"""... and so is one whose relative standard error exceeds this (the samples are too noisy to pin it down)."""


def parameter_names(workload: LLMWorkload) -> tuple[str, ...]:
    """The free parameters of ``workload``'s fit: :data:`PARAMETERS`, and :data:`CRITIC_PARAMETERS` for PPO."""
    return (*PARAMETERS, *CRITIC_PARAMETERS) if workload.algorithm == "ppo" else PARAMETERS


class TimeModel:
    """Predicted seconds of every observation as a function of the log-parameter vector.

    Each distinct (role, samples, replicas) is priced once as an :class:`OpTime`, so an evaluation only divides
    precomputed parts by the efficiencies: a least-squares run costs milliseconds per evaluation. ``names`` are
    the parameters of the vector (:func:`parameter_names`); with the critic's own, critic observations use them."""

    def __init__(
        self, physics: Physics, observations: Sequence[Observation], names: tuple[str, ...] = PARAMETERS
    ) -> None:
        keys = sorted({(o.role, o.samples, o.replicas) for o in observations})
        position = {key: i for i, key in enumerate(keys)}
        self.names = names
        self.times: list[OpTime] = [physics.op_time(*key) for key in keys]
        own_critic = "critic_train_mfu" in names
        self.key_parts = [
            ("overhead_s.critic_train", "critic_train_mfu")
            if role == "critic" and own_critic
            else (f"overhead_s.{OP_OF_ROLE[role]}", "train_mfu")
            for role, _, _ in keys
        ]
        self.index = np.array([position[(o.role, o.samples, o.replicas)] for o in observations], dtype=int)
        self.measured = np.array([o.seconds for o in observations])
        self.ops = np.array([o.op for o in observations])
        self.labels = np.array([CRITIC_LABEL if o.role == "critic" else o.op for o in observations])
        self.configurations = [(o.op, o.role, o.devices, o.samples) for o in observations]

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predicted seconds of every observation at log-parameters ``x``."""
        values = dict(zip(self.names, np.exp(x), strict=True))
        per_key = np.array(
            [
                values[overhead]
                + time.seconds(
                    prefill_mfu=values["prefill_mfu"],
                    train_mfu=values[train_mfu],
                    decode_mbu=values["decode_mbu"],
                    reward_seconds_per_sample=values["reward_seconds_per_sample"],
                )
                for (overhead, train_mfu), time in zip(self.key_parts, self.times, strict=True)
            ]
        )
        return per_key[self.index]

    def log_residuals(self, x: np.ndarray) -> np.ndarray:
        """``log(predicted / measured)`` of every observation."""
        return np.log(np.maximum(self.predict(x), 1e-300) / self.measured)

    def relative_errors(self, x: np.ndarray) -> np.ndarray:
        """``|predicted - measured| / measured`` of every observation."""
        return np.abs(self.predict(x) - self.measured) / self.measured

    def lookup_errors(self, fit_rows: np.ndarray) -> np.ndarray:
        """Relative error of the median of the fitted samples of each observation's configuration (nan if none)."""
        by_configuration: dict[tuple[str, str, int, int], list[float]] = {}
        for row in fit_rows:
            by_configuration.setdefault(self.configurations[row], []).append(float(self.measured[row]))
        medians = {key: float(np.median(values)) for key, values in by_configuration.items()}
        predicted = np.array([medians.get(key, np.nan) for key in self.configurations])
        return np.abs(predicted - self.measured) / self.measured

    def sensitive(self, x: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Which parameters move some fitted residual (a log-space step of 0.1 each way)."""
        base = self.log_residuals(x)[rows]
        moved = []
        for i in range(x.size):
            change = 0.0
            for step in (-0.1, 0.1):
                shifted = x.copy()
                shifted[i] += step
                change = max(change, float(np.max(np.abs(self.log_residuals(shifted)[rows] - base))))
            moved.append(change > FLAT_SENSITIVITY)
        return np.array(moved)

    def fit(self, x0: np.ndarray, free: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Least squares over the observations ``rows``, moving the ``free`` parameters from ``x0``."""
        low, high = log_bounds(self.names)
        margin = 1e-9
        start = np.clip(x0[free], low[free] + margin, high[free] - margin)

        def residuals(z: np.ndarray) -> np.ndarray:
            x = x0.copy()
            x[free] = z
            return np.concatenate([self.log_residuals(x)[rows], PRIOR_WEIGHT * (z - x0[free])])

        result = least_squares(residuals, start, bounds=(low[free], high[free]), method="trf", x_scale=1.0)
        x = x0.copy()
        x[free] = result.x
        return x


def kind_of(name: str) -> str:
    """``efficiency`` or ``seconds``: which bounds a parameter has."""
    return "efficiency" if name in EFFICIENCIES else "seconds"


def log_bounds(names: tuple[str, ...] = PARAMETERS) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds of the log-parameter vector."""
    low = np.log([BOUNDS[kind_of(name)][0] for name in names])
    high = np.log([BOUNDS[kind_of(name)][1] for name in names])
    return low, high


def parameter_values(workload: LLMWorkload) -> dict[str, float]:
    """The values of :func:`parameter_names` in ``workload`` (the critic's are the actor's: a workload holds one
    training efficiency)."""
    values = {
        name: float(getattr(workload, name)) for name in (*EFFICIENCIES[:3], "reward_seconds_per_sample")
    }
    values.update({f"overhead_s.{op}": workload.overhead_s(op) for op in OPS})
    values.update(
        {"critic_train_mfu": values["train_mfu"], "overhead_s.critic_train": values["overhead_s.train"]}
    )
    return values


def parameter_vector(workload: LLMWorkload, names: tuple[str, ...] = PARAMETERS) -> np.ndarray:
    """``workload``'s parameters as a log vector, clipped into the bounds."""
    low, high = log_bounds(names)
    values = parameter_values(workload)
    return np.clip(np.log([max(values[name], 1e-300) for name in names]), low, high)


def fitted_values(
    prior: LLMWorkload, x: np.ndarray, free: np.ndarray, names: tuple[str, ...] = PARAMETERS
) -> dict[str, float]:
    """Every parameter's value: the ``free`` ones from ``x``, the others at the prior's exactly; seconds at their
    lower bound become zero, efficiencies are at most 1."""
    values = parameter_values(prior)
    values.update({name: float(np.exp(x[i])) for i, name in enumerate(names) if free[i]})
    floor = BOUNDS["seconds"][0] * 1.000001
    return {
        name: (0.0 if v <= floor else float(v)) if kind_of(name) == "seconds" else min(1.0, float(v))
        for name, v in values.items()
    }


def workload_with(
    prior: LLMWorkload, x: np.ndarray, free: np.ndarray, names: tuple[str, ...] = PARAMETERS
) -> LLMWorkload:
    """``prior`` with the ``free`` parameters of ``x`` (the others keep their prior values exactly); the critic's
    own parameters are not part of a workload (see :func:`fitted_values`)."""
    values = fitted_values(prior, x, free, names)
    return attrs.evolve(
        prior,
        prefill_mfu=values["prefill_mfu"],
        decode_mbu=values["decode_mbu"],
        train_mfu=values["train_mfu"],
        reward_seconds_per_sample=values["reward_seconds_per_sample"],
        op_overheads_s={op: values[f"overhead_s.{op}"] for op in OPS},
    )


def std_errors(
    model: TimeModel, x: np.ndarray, free: np.ndarray, rows: np.ndarray
) -> tuple[dict[int, float], dict[int, float]]:
    """Standard errors of the free log-parameters (= relative errors of the values), ``s^2 (J^T J + w^2 I)^-1``
    with the prior pull ``w``, and each one's prior share: its variance relative to the prior pull's alone."""
    columns = np.flatnonzero(free)
    base = model.log_residuals(x)[rows]
    step = 1e-6
    jacobian = np.empty((rows.size, columns.size))
    for j, i in enumerate(columns):
        shifted = x.copy()
        shifted[i] += step
        jacobian[:, j] = (model.log_residuals(shifted)[rows] - base) / step
    inverse = np.linalg.inv(jacobian.T @ jacobian + PRIOR_WEIGHT**2 * np.eye(columns.size))
    variance = float(base @ base) / max(rows.size - columns.size, 1)
    errors = {int(i): float(np.sqrt(variance * max(inverse[j, j], 0.0))) for j, i in enumerate(columns)}
    shares = {int(i): float(inverse[j, j] * PRIOR_WEIGHT**2) for j, i in enumerate(columns)}
    return errors, shares
