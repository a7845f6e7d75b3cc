"""rlinf's own settings of a training run: the ``execution:`` section of every config, whatever its workload.

A config file holds ``workload:`` (which workload), ``execution:`` (how rlinf runs it: :class:`RunSettings`) and
the workload's own keys. rlinf reads and checks the section (:func:`run_settings`) before the workload sees the
rest; the workload's ``load_config(data, source, settings)`` gets the validated settings to copy what its config
needs (a seed, the iterations of a learning-rate schedule). The command line wins over the section:
``--iterations``, ``--seed``, ``--mode``, ``--max-staleness`` and ``--plan`` (a plan has its own granularity,
offload and staleness bound).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from rlinf.core import limits
from rlinf.core.config_structure import structure_config
from rlinf.core.errors import ConfigError, integer, require, to_tuple
from rlinf.core.plan import MAX_STALENESS, MODES

SECTION = "execution"
"""The config's key of :class:`RunSettings`."""
RUN_MODES = ("auto", *MODES)
MAX_SEED = 2**32 - 1
FORMER_KEYS = {"stages": "granularity"}
"""Top-level keys of earlier configs that became a run setting under another name."""


@attrs.frozen(kw_only=True)
class RunSettings:
    """How ``rlinf train`` runs a workload (the config's ``execution:`` section); the same keys for every workload."""

    iterations: int = 10
    """Training iterations (``--iterations`` wins)."""
    seed: int = 0
    """The run's seed: handed to ``load_config`` and to every worker as ``context.seed`` (``--seed`` wins)."""
    mode: str = "auto"
    """Placement when the command gives neither ``--mode`` nor ``--plan``: ``auto`` (profile, plan, run),
    ``collocated``, ``disaggregated`` or ``hybrid``."""
    checkpoint_every: int = 10
    """Iterations between checkpoints (and one after the last)."""
    granularity: int = 1
    """Micro-batches of every stream edge (a loop: pipeline stages) of the fixed-mode plans; auto mode and
    ``--plan`` choose their own."""
    offload: tuple[str, ...] = attrs.field(default=(), converter=to_tuple)
    """Components the fixed-mode plans offload when they yield a shared device."""
    max_staleness: int = 0
    """Asynchronous RL: the rollout side may run up to this many iterations ahead of training (0: synchronous;
    auto mode: the planner chooses a bound up to it; ``--max-staleness`` wins)."""
    watchdog_s: float = 60.0
    """The executor watchdog's floor: a run (of training, profiling or validation) in which no op finishes for this
    many seconds, or for 10 times the longest op expected (predicted, or measured in an earlier iteration) when that
    is longer, is stopped with one line naming what every worker waits on (exit code 2) and its state in the run
    directory (``stall.json``)."""

    def __attrs_post_init__(self) -> None:
        for name, low, high in (
            ("iterations", 1, None),
            ("checkpoint_every", 1, None),
            ("seed", 0, MAX_SEED),
            ("granularity", 1, limits.current().max_micro_batches),
            ("max_staleness", 0, MAX_STALENESS),
        ):
            integer(f"{SECTION}.{name}", getattr(self, name), minimum=low, maximum=high)
        require(
            self.watchdog_s > 0,
            f"{SECTION}.watchdog_s",
            self.watchdog_s,
            "must be > 0",
            "give seconds, e.g. 60",
        )
        require(
            self.mode in RUN_MODES,
            f"{SECTION}.mode",
            self.mode,
            "unknown mode",
            f"use one of {list(RUN_MODES)}",
        )
        require(
            all(isinstance(name, str) and name for name in self.offload),
            f"{SECTION}.offload",
            self.offload,
            "must be a list of component names",
            "write e.g. [rollout, actor]",
        )


FIELDS = tuple(field.name for field in attrs.fields(RunSettings))


def moved_setting(key: str) -> str | None:
    """The run setting a top-level key of earlier configs became (``iterations``, ``stages`` -> ``granularity``),
    or ``None`` for any other key."""
    return key if key in FIELDS else FORMER_KEYS.get(key)


def run_settings(data: Mapping[str, Any], source: str) -> RunSettings:
    """The run settings of a config's mapping ``data`` (read from ``source``): its ``execution`` section, checked
    key by key. A run setting at the top level (where earlier configs kept them) is refused with where it moved."""
    for key in data:
        moved = moved_setting(key)
        if moved is not None:
            raise ConfigError(
                f"{source}.{key}", data[key], f"is a run setting, which moved to the {SECTION} section",
                f"write it as {SECTION}: {{{moved}: ...}} (docs/workloads.md)",
            )  # fmt: skip
    section = data.get(SECTION, {})
    if section is None:
        section = {}
    if isinstance(section, Mapping):
        unknown = sorted((key for key in section if key not in FIELDS), key=repr)
        if unknown:
            raise ConfigError(
                f"{SECTION}.{unknown[0]}", section[unknown[0]], "is not a run setting",
                f"keep only {sorted(FIELDS)} in {SECTION} and a workload's own settings in its own keys",
            )  # fmt: skip
    return structure_config(RunSettings, section, source, prefix=f"{SECTION}.")
