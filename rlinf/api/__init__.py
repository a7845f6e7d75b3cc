"""The public workload API: what a user (and each built-in workload) writes a workload against
(``docs/workloads.md``): :class:`Workload`, :class:`Worker`, :class:`WorkerContext`, the macro flow's values
(:class:`Workflow`, :class:`Component`, :class:`Edge`, :class:`Loop`, :class:`WeightSync`), the run settings a
workload's ``load_config`` receives (:class:`RunSettings`, the config's ``execution`` section) and
:func:`structure_config` for a typed config, :func:`concat_payloads` to join the payloads a worker receives, :func:`mark_phase` to say where a worker's
set-up time goes (:mod:`rlinf.core.phases`), :func:`stamp_of` to read the :class:`Stamp` the executor puts on every
payload a worker receives (the policy version that produced it, and how far behind the reader it is)."""

from rlinf.api.worker_context import WorkerContext
from rlinf.api.workload import Payload, Worker, Workload, reported_response_lengths
from rlinf.core.config_structure import structure_config
from rlinf.core.errors import ConfigError, RlinfError, RlinfWarning
from rlinf.core.payloads import concat_payloads
from rlinf.core.phases import mark as mark_phase
from rlinf.core.run_settings import RunSettings
from rlinf.core.schedule import Stamp, stamp_of
from rlinf.core.workflow import Component, Edge, Loop, WeightSync, Workflow

__all__ = [
    "Component",
    "ConfigError",
    "Edge",
    "Loop",
    "Payload",
    "RlinfError",
    "RlinfWarning",
    "RunSettings",
    "Stamp",
    "WeightSync",
    "Worker",
    "WorkerContext",
    "Workflow",
    "Workload",
    "concat_payloads",
    "mark_phase",
    "reported_response_lengths",
    "stamp_of",
    "structure_config",
]
