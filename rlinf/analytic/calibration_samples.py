"""Which samples of a measured trace a calibration uses, and which of them it holds out.

:func:`observations_of` keeps the ``generate`` / ``reward`` / ``infer`` / ``train`` samples of components whose
role the analytic model describes and counts the others by reason; :func:`split_observations` holds out a seeded,
per-op share of them, so that :func:`rlinf.analytic.calibration.calibrate` can report errors on samples it did not fit.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from rlinf.analytic.llm_workload import OPS, LLMWorkload
from rlinf.analytic.synthesis import OP_OF_ROLE
from rlinf.core.trace import Trace


@attrs.frozen(kw_only=True)
class Observation:
    """One measured sample the analytic model describes."""

    op: str
    role: str
    devices: int
    replicas: int
    samples: int
    seconds: float


def observations_of(measured: Trace, prior: LLMWorkload) -> tuple[list[Observation], dict[str, int]]:
    """The measured samples the analytic model describes, and the count of the others by reason."""
    workflow = measured.workflow
    # A synthesized trace prices whole generations at every batch; a profiled one (rlinf's executor) records a
    # streamed rollout's generate op per micro-batch, each the segment of one whole-batch generation.
    segments = measured.provenance.get("kind") != "synthesized"
    model_parallel = {
        "rollout": prior.rollout_model_parallel,
        "inference": prior.inference_model_parallel,
        "actor": prior.actor_model_parallel,
        "critic": prior.actor_model_parallel,
        "reward": 1,
    }
    observations: list[Observation] = []
    excluded: dict[str, int] = {}

    def skip(reason: str) -> None:
        excluded[reason] = excluded.get(reason, 0) + 1

    for sample in measured.samples:
        role = workflow.component(sample.component).role
        if sample.op not in OPS:
            skip(f"{sample.op}: not an op the analytic model fits")
        elif OP_OF_ROLE.get(role) != sample.op:
            skip(f"{sample.op} of a {role} component: not described by the analytic model")
        elif role == "critic" and prior.algorithm != "ppo":
            skip("critic train: the analytic model is GRPO (no critic)")
        elif role == "rollout" and segments and sample.samples != workflow.batch_size:
            skip("generate of a streamed micro-batch (a segment of the whole-batch generation)")
        elif sample.samples == 0 or sample.seconds <= 0:
            skip("zero samples or zero seconds")
        elif sample.devices % model_parallel[role]:
            skip(f"{sample.op} on a device count that is not a multiple of its model-parallel size")
        else:
            observations.append(
                Observation(
                    op=sample.op,
                    role=role,
                    devices=sample.devices,
                    replicas=sample.devices // model_parallel[role],
                    samples=sample.samples,
                    seconds=float(sample.seconds),
                )
            )
    return observations, dict(sorted(excluded.items()))


def split_observations(
    ops: Sequence[str], holdout_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Indices (fit, held out): per op, a seeded shuffle holds out ``round(fraction * n)`` observations, always
    leaving at least one to fit."""
    rng = np.random.default_rng(seed)
    fit: list[int] = []
    heldout: list[int] = []
    for op in sorted(set(ops)):
        mine = np.array([i for i, name in enumerate(ops) if name == op])
        mine = mine[rng.permutation(mine.size)]
        num_out = min(int(round(holdout_fraction * mine.size)), mine.size - 1)
        heldout.extend(mine[:num_out].tolist())
        fit.extend(mine[num_out:].tolist())
    return np.array(sorted(fit), dtype=int), np.array(sorted(heldout), dtype=int)
