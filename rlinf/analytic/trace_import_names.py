"""What veRL and RLinf call their per-step timings, and what those timings include.

:data:`SYSTEMS` maps each system to a :class:`MetricNames`: which timers make each op of an rlinf workflow, the
whole-step timer, the mean lengths, the timers that mark validation and checkpoint steps, the older names a
release used for the same timers, and whether the logged phases already contain the system's own context
switches (veRL's rollout engine sleeps and wakes inside ``gen``; FSDP moves parameters to and from the host
inside the phase that uses them). The names were read in the systems' sources (see ``reference``).
"""

from __future__ import annotations

import attrs

from rlinf.core.errors import ConfigError


@attrs.frozen(kw_only=True)
class OpMetrics:
    """The metrics whose sum is the seconds of one op of one component role."""

    role: str
    op: str
    metrics: tuple[str, ...]


@attrs.frozen(kw_only=True)
class MetricNames:
    """What one system calls its per-step timings and lengths."""

    system: str
    timing_prefix: str
    """Every timing metric starts with it; those no :class:`OpMetrics` maps are reported, not imported."""
    old_prefixes: tuple[str, ...] = ()
    """Prefixes earlier releases gave the same timers; read as ``timing_prefix``."""
    ops: tuple[OpMetrics, ...]
    step_seconds: str
    prompt_length: str
    response_length: str
    response_max: str | None = None
    """The longest response of the step, if the system logs it."""
    response_clip_ratio: str | None = None
    """The share of responses that reached the generation limit, if the system logs it."""
    validation_timers: tuple[str, ...] = ()
    """A step that logs one of these ran a validation (its step time includes it)."""
    checkpoint_timers: tuple[str, ...] = ()
    """A step that logs one of these saved a checkpoint (its step time includes it)."""
    switches_inside_phases: bool = False
    """The logged phases include every onload, offload and weight sync of a collocated run (veRL's hybrid
    engine), so a replay must not add them again."""
    weight_syncs: tuple[tuple[str, str], ...] | None = None
    """The (src, dst) weight syncs the system performs, where fewer than the analytic workflow's; ``None``: all."""
    reference: str
    """The source files that define the names."""

    def mapped(self) -> frozenset[str]:
        """Every metric an op reads."""
        return frozenset(m for op in self.ops for m in op.metrics)

    def old_prefix_of(self, metric: str) -> str | None:
        """The older prefix ``metric`` starts with, if any."""
        return next((prefix for prefix in self.old_prefixes if metric.startswith(prefix)), None)

    def canonical(self, metric: str) -> str:
        """``metric`` under this release's name (an older prefix replaced by ``timing_prefix``)."""
        prefix = self.old_prefix_of(metric)
        return metric if prefix is None else self.timing_prefix + metric[len(prefix) :]

    def keep(self, metric: str) -> bool:
        """Whether a log reader should keep ``metric`` (after :meth:`canonical`)."""
        lengths = (self.prompt_length, self.response_length, self.response_max, self.response_clip_ratio)
        return metric.startswith(self.timing_prefix) or metric in lengths


VERL = "volcengine/verl"
SYSTEMS: dict[str, MetricNames] = {
    "verl": MetricNames(
        system="verl",
        timing_prefix="timing_s/",
        old_prefixes=("timing/", "timing(s)/"),
        ops=(
            OpMetrics(role="rollout", op="generate", metrics=("timing_s/gen",)),
            OpMetrics(role="reward", op="reward", metrics=("timing_s/reward", "timing_s/adv")),
            OpMetrics(
                role="inference",
                op="infer",
                metrics=("timing_s/old_log_prob", "timing_s/ref", "timing_s/values"),
            ),
            OpMetrics(role="actor", op="train", metrics=("timing_s/update_actor",)),
            OpMetrics(role="critic", op="train", metrics=("timing_s/update_critic",)),
            OpMetrics(role="actor", op="sync_weights", metrics=("timing_s/update_weights",)),
        ),
        step_seconds="timing_s/step",
        prompt_length="prompt_length/mean",
        response_length="response_length/mean",
        response_max="response_length/max",
        response_clip_ratio="response_length/clip_ratio",
        validation_timers=("timing_s/testing",),
        checkpoint_timers=("timing_s/save_checkpoint",),
        switches_inside_phases=True,
        weight_syncs=(("actor", "rollout"),),
        reference=f"{VERL} verl/trainer/ppo/ray_trainer.py (timer names; timing/ until 2025-01-17, timing(s)/ "
        "until 2025-01-21, then timing_s/; the reward ran inside the adv timer until 2025-04-23), "
        "verl/trainer/ppo/metric_utils.py (compute_timing_metrics, compute_data_metrics)",
    ),
    "rlinf": MetricNames(
        system="rlinf",
        timing_prefix="time/",
        ops=(
            OpMetrics(role="rollout", op="generate", metrics=("time/rollout",)),
            OpMetrics(role="reward", op="reward", metrics=("time/reward",)),
            OpMetrics(
                role="inference", op="infer", metrics=("time/actor/inference", "time/critic/inference")
            ),
            OpMetrics(role="actor", op="train", metrics=("time/actor/training",)),
            OpMetrics(role="critic", op="train", metrics=("time/critic/training",)),
            OpMetrics(role="actor", op="sync_weights", metrics=("time/sync_weights",)),
        ),
        step_seconds="time/step",
        prompt_length="rollout/prompt_length",
        response_length="rollout/response_length",
        reference="RLinf/RLinf rlinf/runners/reasoning_runner.py (time/ metrics), "
        "rlinf/utils/distributed.py (rollout/ length metrics)",
    ),
}


def metric_names(system: str) -> MetricNames:
    """The names of ``system``; raises listing the known systems."""
    if system not in SYSTEMS:
        raise ConfigError("--format", system, "unknown system", f"use one of {sorted(SYSTEMS)}")
    return SYSTEMS[system]
