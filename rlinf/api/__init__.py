"""The public workload API, the one door a workload (built-in or a user's) imports rlinf through
(``docs/workloads.md``; the import contracts in ``pyproject.toml`` hold every built-in workload and the custom
example to it, with :mod:`rlinf.algorithms` for the RL math).

- the protocols a workload follows: :class:`Workload`, :class:`Worker`, and what they are handed:
  :class:`WorkerContext` (a replica's share of the plan), :class:`RunSettings` (the config's ``execution``
  section, for ``load_config``), :class:`IterationResult` / :class:`WorkerInfo` (one measured iteration, for
  ``metrics``), :class:`Timeline` (its measured timeline);
- the macro flow's values: :class:`Workflow`, :class:`Component`, :class:`Edge`, :class:`Loop`,
  :class:`WeightSync`;
- payloads: :data:`Payload`, :func:`concat_payloads` to join the payloads a worker receives,
  :func:`reported_response_lengths`, :func:`episode_mean` (the mean return of the episodes of recent iterations, for ``summary``);
- configs and errors: :func:`structure_config` for a typed config; :class:`ConfigError` (one line naming the field,
  its value and the fix), :class:`RlinfError`, :class:`RlinfWarning`, and the checks that raise it
  (:func:`require`, :func:`integer`, :func:`number`, :func:`positive`, :func:`non_negative`);
- resource limits on user input: :class:`Limits`, :func:`current_limits`, :func:`limit_exceeded`;
- :func:`mark_phase` to say where a worker's set-up time goes (:mod:`rlinf.core.phases`);
- :func:`stamp_of` to read the :class:`Stamp` the executor puts on every payload a worker receives (the policy
  version that produced it, and how far behind the reader it is).
"""

from rlinf.api.iteration import IterationResult, WorkerInfo
from rlinf.api.worker_context import WorkerContext
from rlinf.api.workload import Payload, Worker, Workload, episode_mean, reported_response_lengths
from rlinf.core.config_structure import structure_config
from rlinf.core.errors import (
    ConfigError,
    RlinfError,
    RlinfWarning,
    integer,
    non_negative,
    number,
    positive,
    require,
)
from rlinf.core.limits import Limits
from rlinf.core.limits import current as current_limits
from rlinf.core.limits import exceeded as limit_exceeded
from rlinf.core.payloads import concat_payloads
from rlinf.core.phases import mark as mark_phase
from rlinf.core.run_settings import RunSettings
from rlinf.core.schedule import Stamp, stamp_of
from rlinf.core.timeline import Timeline
from rlinf.core.workflow import Component, Edge, Loop, WeightSync, Workflow

__all__ = [
    "Component",
    "ConfigError",
    "Edge",
    "IterationResult",
    "Limits",
    "Loop",
    "Payload",
    "RlinfError",
    "RlinfWarning",
    "RunSettings",
    "Stamp",
    "Timeline",
    "WeightSync",
    "Worker",
    "WorkerContext",
    "WorkerInfo",
    "Workflow",
    "Workload",
    "concat_payloads",
    "current_limits",
    "episode_mean",
    "integer",
    "limit_exceeded",
    "mark_phase",
    "non_negative",
    "number",
    "positive",
    "reported_response_lengths",
    "stamp_of",
    "require",
    "structure_config",
]
