"""Settings of a run that its log states: the generation limit (longest response, in tokens) and how the actor's
training state is sharded.

A response limit changes the analytic decode model a great deal (the slowest replica decodes the batch's longest
response), so ``rlinf trace import`` takes it from the log when the user does not give it, and says where it came
from. :func:`response_limit` looks, in order, at

1. the run's configuration as veRL prints it at start-up (``'max_response_length': 1024,`` in the pretty-printed
   config) or as the launch command sets it (``data.max_response_length=1024``, the last one wins, as in Hydra);
2. the longest logged response of a step in which some responses were clipped (veRL's ``response_length/max``
   where ``response_length/clip_ratio`` > 0): clipped responses are exactly as long as the limit;
3. the longest logged response of any step, which is a lower bound of the limit (stated as such).

The actor's training state takes very different memory per device depending on veRL's actor strategy, so
:func:`actor_sharding` reads that too, in order from

1. the printed config: the first ``'strategy': 'fsdp' | 'fsdp2' | 'megatron'`` (pprint sorts keys, so the actor's
   section, ``actor_rollout_ref.actor``, comes first) and the first ``'use_distributed_optimizer': True | False``;
2. the launch command: ``actor_rollout_ref.actor.strategy=...`` (the last one wins),
   ``--config-name=ppo_megatron_trainer`` (veRL's Megatron config) and
   ``actor_rollout_ref.actor.megatron.use_distributed_optimizer=...``.

FSDP shards weights, gradients and optimizer state over the data-parallel ranks (``fsdp``); veRL's Megatron
workers use Megatron's distributed optimizer, which shards the optimizer state only (``optimizer``: always until
2025-03-23, the default since), unless the config turns it off (``none``).

Each decode step pays the rollout engine's fixed cost, which differs by engine, so :func:`rollout_engine` reads the
engine veRL ran (``actor_rollout_ref.rollout.name``) from the launch command (the last one wins) or else the printed
config (the first ``'name': 'vllm' | 'sglang'``: no other section of veRL's config names one of these), and names
the entry of :data:`rlinf.analytic.engine_costs.ENGINE_STEP_COSTS` that prices it.

Pure: text and step log in, a value and a sentence out.
"""

from __future__ import annotations

import re

import attrs

from rlinf.analytic.step_log import StepLog
from rlinf.analytic.trace_import_names import MetricNames

_PRINTED_CONFIG = re.compile(r"'max_response_length': (\d{1,9})\b")
_COMMAND_LINE = re.compile(r"(?:^|[\s'\"])\+{0,2}data\.max_response_length=(\d{1,9})\b")
_PRINTED_STRATEGY = re.compile(r"'strategy': '(fsdp2?|megatron)'")
_PRINTED_DISTRIBUTED_OPTIMIZER = re.compile(r"'use_distributed_optimizer': (True|False)\b")
_COMMAND_STRATEGY = re.compile(r"(?:^|[\s'\"])\+{0,2}actor_rollout_ref\.actor\.strategy=(fsdp2?|megatron)\b")
_COMMAND_MEGATRON_CONFIG = re.compile(r"--config-name[= ]['\"]?ppo_megatron_trainer(?:\.yaml)?\b")
_COMMAND_DISTRIBUTED_OPTIMIZER = re.compile(
    r"(?:^|[\s'\"])\+{0,2}actor_rollout_ref\.actor\.megatron\.use_distributed_optimizer=(\w+)"
)
_COMMAND_ENGINE = re.compile(r"(?:^|[\s'\"])\+{0,2}actor_rollout_ref\.rollout\.name=(vllm|sglang)\b")
_PRINTED_ENGINE = re.compile(r"'name': '(vllm|sglang)'")
ENGINE_COST_OF_ROLLOUT = {"vllm": "vllm-0.6", "sglang": "sglang-0.4"}
"""veRL rollout name -> the published per-step cost that prices it (the nearest version the table holds)."""
SHARDING_OF_STRATEGY = {"fsdp": "fsdp", "fsdp2": "fsdp", "megatron": "optimizer"}
"""veRL actor strategy -> how its training state is sharded over the data-parallel ranks."""


@attrs.frozen(kw_only=True)
class LoggedLimit:
    """A response limit the log gives, and how it was found."""

    tokens: int
    source: str
    """One sentence: where in the log the value comes from."""
    exact: bool
    """``False`` when the value is only a lower bound (the longest response seen)."""


def response_limit(text: str, log: StepLog, names: MetricNames) -> LoggedLimit | None:
    """The generation limit the log states (see the module docstring); ``None`` when it says nothing."""
    printed = [int(v) for v in _PRINTED_CONFIG.findall(text)]
    if printed:
        return LoggedLimit(
            tokens=printed[-1], source="from the run's printed config, 'max_response_length'", exact=True
        )
    commanded = [int(v) for line in text.splitlines() for v in _COMMAND_LINE.findall(line)]
    if commanded:
        return LoggedLimit(
            tokens=commanded[-1], source="from the launch command, data.max_response_length=...", exact=True
        )
    if names.response_max is None:
        return None
    longest = [m[names.response_max] for m in log.values.values() if names.response_max in m]
    if not longest:
        return None
    ratio = names.response_clip_ratio
    clipped = [m[names.response_max] for m in log.values.values() if ratio and m.get(ratio, 0.0) > 0]
    if clipped:
        return LoggedLimit(
            tokens=int(round(max(clipped))),
            source=f"from {names.response_max} of the steps whose {ratio} > 0: clipped responses end at the limit",
            exact=True,
        )
    return LoggedLimit(
        tokens=int(round(max(longest))),
        source=f"assumed: the longest response logged ({names.response_max}); no step reports clipping, so the "
        "limit may be higher, pass --response-max",
        exact=False,
    )


@attrs.frozen(kw_only=True)
class LoggedSharding:
    """How the log says the actor's training state is sharded, and where it says so."""

    mode: str
    """``fsdp`` (weights, gradients and optimizer state sharded), ``optimizer`` (the optimizer state only) or
    ``none``."""
    source: str
    """One sentence: where in the log the strategy comes from."""


def actor_sharding(text: str) -> LoggedSharding | None:
    """The actor's sharding the log's printed config or launch command states (see the module docstring);
    ``None`` when it says nothing."""
    printed = _PRINTED_STRATEGY.search(text)
    if printed is not None:
        optimizer = _PRINTED_DISTRIBUTED_OPTIMIZER.search(text)
        distributed = optimizer is None or optimizer.group(1) == "True"
        return _sharding(printed.group(1), distributed, "the run's printed config")
    commanded = [m for line in text.splitlines() for m in _COMMAND_STRATEGY.findall(line)]
    megatron_config = _COMMAND_MEGATRON_CONFIG.search(text) is not None
    if not commanded and not megatron_config:
        return None
    strategy = commanded[-1] if commanded else "megatron"
    switches = [m for line in text.splitlines() for m in _COMMAND_DISTRIBUTED_OPTIMIZER.findall(line)]
    distributed = not switches or switches[-1].lower() != "false"
    where = "actor_rollout_ref.actor.strategy=..." if commanded else "--config-name=ppo_megatron_trainer"
    return _sharding(strategy, distributed, f"the launch command ({where})")


def _sharding(strategy: str, distributed_optimizer: bool, where: str) -> LoggedSharding:
    mode = SHARDING_OF_STRATEGY[strategy]
    if strategy == "megatron" and not distributed_optimizer:
        mode = "none"
    detail = ""
    if strategy == "megatron":
        detail = ", distributed optimizer " + ("on" if distributed_optimizer else "off")
    return LoggedSharding(mode=mode, source=f"from {where}: actor strategy {strategy}{detail}")


@attrs.frozen(kw_only=True)
class LoggedEngine:
    """The rollout engine a log names, the per-step cost entry that prices it, and where the log says so."""

    name: str
    """``vllm`` or ``sglang``, as the run's config spells it."""
    cost_key: str
    """A key of :data:`rlinf.analytic.engine_costs.ENGINE_STEP_COSTS`."""
    source: str
    """One sentence: where in the log the engine comes from."""


def rollout_engine(text: str) -> LoggedEngine | None:
    """The rollout engine the log's launch command or printed config names (see the module docstring); ``None``
    when it names none."""
    commanded = [m for line in text.splitlines() for m in _COMMAND_ENGINE.findall(line)]
    if commanded:
        name, where = commanded[-1], "the launch command (actor_rollout_ref.rollout.name=...)"
    else:
        printed = _PRINTED_ENGINE.search(text)
        if printed is None:
            return None
        name, where = printed.group(1), "the run's printed config ('name')"
    key = ENGINE_COST_OF_ROLLOUT[name]
    return LoggedEngine(name=name, cost_key=key, source=f"from {where}: rollout {name}, priced as {key}")
