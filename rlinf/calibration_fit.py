"""The numerical side of calibration: the analytic model's seconds as a function of its free parameters, and the
least-squares fit of them (see :mod:`rlinf.calibration` for what is fitted to what).

Parameters live in log space: an efficiency of 0.5 is ``log(0.5)``, so that a step means the same relative change
for an MFU and for an overhead of milliseconds, and bounds keep efficiencies in ``(0, 1]`` and seconds positive.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np
from scipy.optimize import least_squares

from rlinf.analytic import OP_OF_ROLE, Physics
from rlinf.calibration_samples import Observation
from rlinf.llm_workload import OPS, LLMWorkload
from rlinf.roofline import OpTime

EFFICIENCIES = ("prefill_mfu", "decode_mbu", "train_mfu")
PARAMETERS = (*EFFICIENCIES, "reward_seconds_per_sample", *(f"overhead_s.{op}" for op in OPS))
"""Free parameters, in the order of the fit vector. ``overhead_s.<op>`` is the fixed cost of that op."""
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


class TimeModel:
    """Predicted seconds of every observation as a function of the log-parameter vector.

    Each distinct (role, samples, replicas) is priced once as an :class:`OpTime`, so an evaluation only divides
    precomputed parts by the efficiencies: a least-squares run costs milliseconds per evaluation."""

    def __init__(self, physics: Physics, observations: Sequence[Observation]) -> None:
        keys = sorted({(o.role, o.samples, o.replicas) for o in observations})
        position = {key: i for i, key in enumerate(keys)}
        self.times: list[OpTime] = [physics.op_time(*key) for key in keys]
        self.key_ops = [OP_OF_ROLE[role] for role, _, _ in keys]
        self.index = np.array([position[(o.role, o.samples, o.replicas)] for o in observations], dtype=int)
        self.measured = np.array([o.seconds for o in observations])
        self.ops = np.array([o.op for o in observations])
        self.configurations = [(o.op, o.devices, o.samples) for o in observations]

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predicted seconds of every observation at log-parameters ``x``."""
        values = dict(zip(PARAMETERS, np.exp(x), strict=True))
        per_key = np.array(
            [
                values[f"overhead_s.{op}"]
                + time.seconds(
                    prefill_mfu=values["prefill_mfu"],
                    train_mfu=values["train_mfu"],
                    decode_mbu=values["decode_mbu"],
                    reward_seconds_per_sample=values["reward_seconds_per_sample"],
                )
                for op, time in zip(self.key_ops, self.times, strict=True)
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
        by_configuration: dict[tuple[str, int, int], list[float]] = {}
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
        low, high = log_bounds()
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


def log_bounds() -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds of the log-parameter vector."""
    low = np.log([BOUNDS[kind_of(name)][0] for name in PARAMETERS])
    high = np.log([BOUNDS[kind_of(name)][1] for name in PARAMETERS])
    return low, high


def parameter_values(workload: LLMWorkload) -> dict[str, float]:
    """The values of :data:`PARAMETERS` in ``workload``."""
    values = {name: float(getattr(workload, name)) for name in (*EFFICIENCIES, "reward_seconds_per_sample")}
    values.update({f"overhead_s.{op}": workload.overhead_s(op) for op in OPS})
    return values


def parameter_vector(workload: LLMWorkload) -> np.ndarray:
    """``workload``'s parameters as a log vector, clipped into the bounds."""
    low, high = log_bounds()
    values = parameter_values(workload)
    return np.clip(np.log([max(values[name], 1e-300) for name in PARAMETERS]), low, high)


def workload_with(prior: LLMWorkload, x: np.ndarray, free: np.ndarray) -> LLMWorkload:
    """``prior`` with the ``free`` parameters of ``x`` (the others keep their prior values exactly); seconds at
    their lower bound become zero."""
    values = parameter_values(prior)
    values.update({name: float(np.exp(x[i])) for i, name in enumerate(PARAMETERS) if free[i]})
    floor = BOUNDS["seconds"][0] * 1.000001
    seconds = {
        name: 0.0 if v <= floor else float(v) for name, v in values.items() if kind_of(name) == "seconds"
    }
    return attrs.evolve(
        prior,
        prefill_mfu=min(1.0, float(values["prefill_mfu"])),
        decode_mbu=min(1.0, float(values["decode_mbu"])),
        train_mfu=min(1.0, float(values["train_mfu"])),
        reward_seconds_per_sample=seconds["reward_seconds_per_sample"],
        op_overheads_s={op: seconds[f"overhead_s.{op}"] for op in OPS},
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
