"""Settings of a run that its log states: the generation limit (longest response, in tokens).

A response limit changes the analytic decode model a great deal (the slowest replica decodes the batch's longest
response), so ``rlinf trace import`` takes it from the log when the user does not give it, and says where it came
from. :func:`response_limit` looks, in order, at

1. the run's configuration as veRL prints it at start-up (``'max_response_length': 1024,`` in the pretty-printed
   config) or as the launch command sets it (``data.max_response_length=1024``, the last one wins, as in Hydra);
2. the longest logged response of a step in which some responses were clipped (veRL's ``response_length/max``
   where ``response_length/clip_ratio`` > 0): clipped responses are exactly as long as the limit;
3. the longest logged response of any step, which is a lower bound of the limit (stated as such).

Pure: text and step log in, a value and a sentence out.
"""

from __future__ import annotations

import re

import attrs

from rlinf.analytic.step_log import StepLog
from rlinf.analytic.trace_import_names import MetricNames

_PRINTED_CONFIG = re.compile(r"'max_response_length': (\d{1,9})\b")
_COMMAND_LINE = re.compile(r"(?:^|[\s'\"])\+{0,2}data\.max_response_length=(\d{1,9})\b")


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
