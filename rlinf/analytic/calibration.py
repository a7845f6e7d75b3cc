"""Calibration: fit the analytic model's free parameters to a measured trace by least squares.

The analytic model (:mod:`rlinf.analytic.synthesis`) prices each op of an LLM iteration with roofline formulas whose
efficiencies and fixed costs are assumptions: prefill/inference MFU, decode bandwidth utilization, training MFU,
the reward's seconds per response and a fixed overhead per op. :func:`calibrate` takes a prior
:class:`~rlinf.analytic.llm_workload.LLMWorkload` (the assumptions), a measured trace, and finds the values that make the
model's seconds match the measured samples' seconds:

* every measured ``generate`` / ``reward`` / ``infer`` / ``train`` sample of a component whose role the analytic
  model describes is one observation; the others are counted in :attr:`Calibration.excluded` with the reason
  (movement ops; and in a profiled trace, ``generate`` samples of streamed micro-batches, which are segments of
  one whole-batch generation rather than generations of their own);
* a deterministic split (by ``split_seed``, stratified per op) holds out a share of the observations; the fit
  minimizes the sum of squared log-ratios ``log(predicted / measured)`` over the rest, so a sample's relative
  error counts the same at milliseconds and at minutes;
* parameters are fitted in log space inside their bounds (efficiencies in ``(0, 1]``, seconds ``>= 0``), with a
  weak pull towards the prior (:data:`PRIOR_WEIGHT`); one that no fitted sample depends on keeps its prior and
  is reported as unconstrained, one the samples barely separate from others as weakly constrained.

The result reports prior and fitted values, their relative standard errors, and the median relative error per op
before and after the fit, on the fitted and on the held-out observations. Pure: values in, values out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from rlinf.analytic.calibration_fit import (
    CRITIC_LABEL,
    CRITIC_PARAMETERS,
    PRIOR_SHARE_WEAK,
    WEAK_RELATIVE_ERROR,
    TimeModel,
    fitted_values,
    log_bounds,
    parameter_names,
    parameter_values,
    parameter_vector,
    std_errors,
    workload_with,
)
from rlinf.analytic.calibration_samples import observations_of, split_observations
from rlinf.analytic.llm_workload import OPS, LLMWorkload
from rlinf.analytic.synthesis import Physics, synthesize
from rlinf.core.cluster import Cluster
from rlinf.core.errors import require
from rlinf.core.trace import MOVEMENT_OPS, CostSample, Trace


@attrs.frozen(kw_only=True)
class FittedParameter:
    """One free parameter: the assumption, the fitted value, and how well the samples pin it down."""

    name: str
    prior: float
    fitted: float
    relative_std_error: float | None
    """Standard error of the fitted value relative to it (from the Jacobian at the optimum); ``None`` when the
    parameter is unconstrained or too few observations remain."""
    status: str
    """``fitted``; ``weakly constrained`` (the samples barely tell it apart from other parameters, so it stays
    near the prior); ``at upper bound`` / ``at lower bound``; ``unconstrained`` (no fitted sample depends on it:
    kept at the prior)."""


@attrs.frozen(kw_only=True)
class ErrorRow:
    """Median relative error ``|predicted - measured| / measured`` of one op's observations."""

    op: str
    """An op name, or ``all``."""
    num_samples: int
    median_before: float
    """With the prior parameters."""
    median_after: float
    """With the fitted parameters."""
    median_lookup: float | None
    """Of a model-free reference: each sample predicted by the median of the fitted samples of the same op, device
    count and batch (what :func:`rlinf.core.costs.fit` does with a profiled trace): the measurement noise that no
    parameters remove. ``None`` when no fitted sample shares a configuration with these."""


@attrs.frozen(kw_only=True)
class Calibration:
    """What :func:`calibrate` found."""

    prior: LLMWorkload
    fitted: LLMWorkload
    """The prior with the fitted values; for PPO, its one training efficiency is the actor's."""
    critic: Mapping[str, float]
    """For PPO, the critic's own fitted ``critic_train_mfu`` and ``overhead_s.critic_train``; empty for GRPO."""
    parameters: tuple[FittedParameter, ...]
    fit_errors: tuple[ErrorRow, ...]
    heldout_errors: tuple[ErrorRow, ...]
    """Empty when nothing was held out."""
    num_fit: int
    num_heldout: int
    excluded: Mapping[str, int]
    """Reason -> number of measured samples left out of the fit."""
    split_seed: int
    holdout_fraction: float
    rms_log_residual: float
    """Root mean square of ``log(predicted / measured)`` over the fitted observations, after the fit."""

    def provenance(self, *, measured_source: str, measured_provenance: Mapping[str, Any]) -> dict[str, Any]:
        """The record a calibrated trace keeps: parameters, residuals, the measured trace and the samples used."""
        return {
            "method": "least squares of log(predicted / measured) over measured samples (rlinf.analytic.calibration)",
            "measured": {
                "file": measured_source,
                **{
                    key: measured_provenance[key]
                    for key in ("kind", "source", "command", "date", "machine", "imported_from")
                    if key in measured_provenance
                },
            },
            "samples": {
                "fit": self.num_fit,
                "heldout": self.num_heldout,
                "excluded": dict(self.excluded),
                "split_seed": self.split_seed,
                "holdout_fraction": self.holdout_fraction,
            },
            "parameters": {p.name: attrs.asdict(p) for p in self.parameters},
            "residuals": {
                "rms_log_residual_fit": self.rms_log_residual,
                "median_relative_error_fit": {r.op: attrs.asdict(r) for r in self.fit_errors},
                "median_relative_error_heldout": {r.op: attrs.asdict(r) for r in self.heldout_errors},
            },
        }


def calibrate(
    prior: LLMWorkload,
    cluster: Cluster,
    measured: Trace,
    *,
    seed: int,
    split_seed: int = 0,
    holdout_fraction: float = 0.25,
) -> Calibration:
    """Fit ``prior``'s efficiencies and overheads to ``measured`` (see the module docstring).

    ``seed`` draws the analytic model's response lengths (as :func:`rlinf.analytic.synthesis.synthesize` does);
    ``split_seed`` and ``holdout_fraction`` choose the held-out observations."""
    require(
        0.0 <= holdout_fraction <= 0.9,
        "holdout_fraction",
        holdout_fraction,
        "must be in [0, 0.9]",
        "hold out e.g. 0.25 of the samples",
    )
    require(
        measured.workflow.loop is None,
        "measured.workflow.loop",
        measured.workflow.name,
        "is an embodied env loop; the analytic model describes LLM GRPO/PPO workflows",
        "calibrate against a trace of rollout/reward/inference/actor components",
    )
    require(
        measured.cluster.device.name == cluster.device.name,
        "measured.cluster.device",
        measured.cluster.device.name,
        f"differs from the analytic model's {cluster.device.name} devices",
        f"describe the measured run with --device {measured.cluster.device.name}",
    )
    observations, excluded = observations_of(measured, prior)
    require(
        len(observations) >= 2,
        "measured.samples",
        len(observations),
        "too few samples the analytic model describes (generate, reward, infer, train)",
        "measure an LLM workflow with rollout/reward/inference/actor components",
    )
    physics = Physics.of(prior, cluster, seed)
    names = parameter_names(prior)
    model = TimeModel(physics, observations, names)
    fit_index, heldout_index = split_observations(model.labels.tolist(), holdout_fraction, split_seed)
    x_prior = parameter_vector(prior, names)
    free = model.sensitive(x_prior, fit_index)
    x_fitted = x_prior.copy()
    if free.any():
        x_fitted = model.fit(x_prior, free, fit_index)
    fitted = workload_with(prior, x_fitted, free, names)
    values = fitted_values(prior, x_fitted, free, names)
    parameters = _parameters(prior, values, model, x_fitted, free, fit_index)
    residuals = model.log_residuals(x_fitted)[fit_index]
    lookup = model.lookup_errors(fit_index)
    return Calibration(
        prior=prior,
        fitted=fitted,
        critic={name: values[name] for name in names if name in CRITIC_PARAMETERS},
        parameters=parameters,
        fit_errors=_error_rows(model, x_prior, x_fitted, fit_index, lookup),
        heldout_errors=_error_rows(model, x_prior, x_fitted, heldout_index, lookup)
        if heldout_index.size
        else (),
        num_fit=int(fit_index.size),
        num_heldout=int(heldout_index.size),
        excluded=excluded,
        split_seed=split_seed,
        holdout_fraction=holdout_fraction,
        rms_log_residual=float(np.sqrt(np.mean(residuals**2))),
    )


def _parameters(
    prior: LLMWorkload,
    after: Mapping[str, float],
    model: TimeModel,
    x: np.ndarray,
    free: np.ndarray,
    rows: np.ndarray,
) -> tuple[FittedParameter, ...]:
    errors, prior_shares = std_errors(model, x, free, rows)
    low, high = log_bounds(model.names)
    before = parameter_values(prior)
    out = []
    for i, name in enumerate(model.names):
        if not free[i]:
            status = "unconstrained"
        elif x[i] >= high[i] - 1e-6:
            status = "at upper bound"
        elif x[i] <= low[i] + 1e-6:
            status = "at lower bound"
        elif prior_shares[i] > PRIOR_SHARE_WEAK or errors[i] > WEAK_RELATIVE_ERROR:
            status = "weakly constrained"
        else:
            status = "fitted"
        error = errors.get(i) if status in ("fitted", "weakly constrained") else None
        out.append(
            FittedParameter(
                name=name, prior=before[name], fitted=after[name], relative_std_error=error, status=status
            )
        )
    return tuple(out)


def _error_rows(
    model: TimeModel, x_prior: np.ndarray, x_fitted: np.ndarray, rows: np.ndarray, lookup: np.ndarray
) -> tuple[ErrorRow, ...]:
    before = model.relative_errors(x_prior)[rows]
    after = model.relative_errors(x_fitted)[rows]
    reference = lookup[rows]
    labels = model.labels[rows]
    groups = [(label, labels == label) for label in (*OPS, CRITIC_LABEL) if label in set(labels.tolist())]
    groups.append(("all", np.ones(rows.size, dtype=bool)))
    out = []
    for op, mask in groups:
        known = reference[mask][~np.isnan(reference[mask])]
        out.append(
            ErrorRow(
                op=op,
                num_samples=int(mask.sum()),
                median_before=float(np.median(before[mask])),
                median_after=float(np.median(after[mask])),
                median_lookup=float(np.median(known)) if known.size else None,
            )
        )
    return tuple(out)


def calibrated_trace(
    calibration: Calibration,
    cluster: Cluster,
    measured: Trace,
    *,
    seed: int,
    date: str,
    measured_source: str,
) -> Trace:
    """The analytic trace of the fitted workload, with provenance recording the fit.

    The measured trace's movement samples (transfer, onload, offload, sync_weights) of components the analytic
    workflow also has are kept: the analytic model does not price data movement, and :func:`rlinf.core.costs.fit`
    prefers measured bandwidths to the cluster's nominal links. Movement an imported log counted inside its phases
    (zero-second samples, ``imported_from.switches_inside_phases``) is not carried: at other scales and placements
    it is the cluster's links that move those bytes. For PPO, the critic's train samples are priced with the
    critic's own fitted efficiency and fixed cost."""
    trace = synthesize(calibration.fitted, cluster, seed=seed, date=date)
    if calibration.critic:
        trace = attrs.evolve(trace, samples=_critic_repriced(trace, calibration, cluster, seed))
    names = set(trace.workflow.component_names)
    inside = measured.provenance.get("imported_from", {}).get("switches_inside_phases") is True
    carried = [
        s
        for s in measured.samples
        if s.op in MOVEMENT_OPS and s.component in names and not (inside and s.seconds == 0.0)
    ]
    record = calibration.provenance(measured_source=measured_source, measured_provenance=measured.provenance)
    record["samples"]["movement_carried"] = len(carried)
    provenance = {
        **trace.provenance,
        "generator": "rlinf.analytic.synthesis.synthesize with parameters fitted by rlinf.analytic.calibration.calibrate",
        "calibration": record,
    }
    return attrs.evolve(trace, provenance=provenance, samples=(*trace.samples, *carried))


def _critic_repriced(trace: Trace, calibration: Calibration, cluster: Cluster, seed: int) -> list[CostSample]:
    """``trace``'s samples with each critic train sample priced by the critic's own fitted parameters."""
    physics = Physics.of(calibration.fitted, cluster, seed)
    workflow = trace.workflow
    mfu, overhead = calibration.critic["critic_train_mfu"], calibration.critic["overhead_s.critic_train"]
    fitted = calibration.fitted
    out = []
    for sample in trace.samples:
        component = workflow.component(sample.component)
        if component.role != "critic" or sample.op != "train":
            out.append(sample)
            continue
        replicas = sample.devices // component.model_parallel_size
        seconds = overhead + physics.op_time("critic", sample.samples, replicas).seconds(
            prefill_mfu=fitted.prefill_mfu,
            train_mfu=mfu,
            decode_mbu=fitted.decode_mbu,
            reward_seconds_per_sample=fitted.reward_seconds_per_sample,
        )
        out.append(attrs.evolve(sample, seconds=float(seconds)))
    return out
