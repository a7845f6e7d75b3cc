"""Resource limits on user input: sizes beyond them are refused with one clear error before any work starts.

Each limit has a default (:class:`Limits`) that is far above what a real trace, plan, cluster or config needs, and
can be raised for one command with an environment variable, e.g. ``RLINF_MAX_DEVICES=200000 rlinf simulate ...``
(``docs/reliability.md`` lists them). A message that reports a limit names the variable that raises it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping

import attrs

from rlinf.core.errors import ConfigError

ENV_PREFIX = "RLINF_"


@attrs.frozen(kw_only=True)
class Limits:
    """The largest inputs rlinf accepts. Every field can be overridden by ``RLINF_<FIELD NAME IN CAPITALS>``."""

    max_devices: int = 65_536
    """Devices of a cluster, a device id in a placement, a size of a capacity sweep, ``--num-devices``."""
    max_micro_batches: int = 4_096
    """Micro-batches of a stream edge or pipeline stages of a loop (a plan's granularity, ``--max-granularity``)."""
    max_loop_steps: int = 100_000
    """Steps of an embodied env <-> policy loop per iteration."""
    max_batch_size: int = 16_777_216
    """Samples of one iteration (prompts x group size, or environments)."""
    max_list_length: int = 10_000_000
    """Items of any one list in a JSON or YAML input (cost samples, response lengths, ...)."""
    max_json_depth: int = 64
    """Nesting of lists and objects in a JSON or YAML input (the shipped traces nest 5 deep)."""
    max_yaml_nodes: int = 1_000_000
    """Values of a YAML document once its aliases (``*name``) are expanded."""
    max_input_bytes: int = 1 << 30
    """Size of an input file (trace, plan, cluster, config, metric log)."""
    max_sweep_sizes: int = 64
    """Cluster sizes of one ``rlinf capacity`` sweep (after expanding ``8,16,...,1024``)."""

    def __attrs_post_init__(self) -> None:
        for field in attrs.fields(type(self)):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    env_name(field.name), value, "must be an integer >= 1", "give a positive limit"
                )

    @staticmethod
    def env_names() -> tuple[str, ...]:
        """The environment variables that override the limits."""
        return tuple(env_name(field.name) for field in attrs.fields(Limits))


def env_name(field: str) -> str:
    """``max_devices`` -> ``RLINF_MAX_DEVICES``."""
    return ENV_PREFIX + field.upper()


ENV_NAMES = Limits.env_names()


def current(environ: Mapping[str, str] | None = None) -> Limits:
    """The limits in force: the defaults, each replaced by its environment variable when that is set."""
    environ = os.environ if environ is None else environ
    return _limits_of(tuple(environ.get(name) for name in ENV_NAMES))


@functools.lru_cache(maxsize=8)
def _limits_of(texts: tuple[str | None, ...]) -> Limits:
    """The limits for the environment variables' values ``texts`` (in field order), parsed once per value set."""
    overrides = {}
    for field, text in zip(attrs.fields(Limits), texts, strict=True):
        if text is None or not text.strip():
            continue
        name = env_name(field.name)
        try:
            overrides[field.name] = int(text.strip().replace("_", ""))
        except ValueError:
            raise ConfigError(
                name, text, "is not a whole number", f"set {name} to a positive integer"
            ) from None
    return Limits(**overrides)


def exceeded(field: str, value: object, what: str, limit_field: str, limit: int) -> ConfigError:
    """The error for ``field=value`` beyond ``limit`` (``what``: e.g. ``'devices'``), naming the variable that
    raises the limit."""
    return ConfigError(
        field,
        value,
        f"exceeds the limit of {limit:,} {what}",
        f"use at most {limit:,} (or raise the limit with {env_name(limit_field)}=N)",
    )
