"""The ``rlinf`` command line: one subcommand per module in :mod:`rlinf.commands`.

Bad input is printed as one line (``rlinf: error: ...``) with exit code 2, never a traceback; internal bugs
still crash loudly.
"""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

from rlinf.core.errors import RlinfError, RlinfWarning

# Subcommand name -> module in rlinf.commands exposing add_arguments(parser) and run(args) -> int.
COMMANDS = {
    "capacity": "rlinf.commands.capacity",
    "plan": "rlinf.commands.plan",
    "simulate": "rlinf.commands.simulate",
    "trace": "rlinf.commands.trace",
    "train": "rlinf.commands.train",
    "validate": "rlinf.commands.validate",
}


class UsageError(RlinfError):
    """A command line argparse refuses (unknown flag, missing argument, a value its type refuses)."""


class Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line ``FLAG='value': problem; fix: ...`` (exit 2 from
    :func:`main`), like every other input error, instead of a usage block."""

    def error(self, message: str) -> NoReturn:
        """Raise :class:`UsageError` with ``message`` in the project's error format."""
        raise UsageError(f"{_usage_message(message)}; fix: see '{self.prog} --help'")


_INVALID = re.compile(r"^argument (?P<flag>[^:\s]+)(?:/\S+)?: invalid (?P<what>.+?) value: (?P<value>.*)$")
_ARGUMENT = re.compile(r"^argument (?P<flag>[^:\s]+)(?:/\S+)?: (?P<rest>.*)$")


def _usage_message(message: str) -> str:
    message = " ".join(str(message).split())
    if match := _INVALID.match(message):
        return f"{match['flag']}={match['value']}: invalid {match['what']} value"
    if match := _ARGUMENT.match(message):
        if match["rest"].startswith(
            "="
        ):  # a typed value's own message (rlinf.commands.values): =text: problem
            return f"{match['flag']}{match['rest']}"
        if match["rest"].startswith("invalid choice: "):
            choice, _, choices = match["rest"].removeprefix("invalid choice: ").partition(" (")
            return f"{match['flag']}={choice}: invalid choice ({choices}"
        return f"{match['flag']}: {match['rest']}"
    for lead, problem in (
        ("the following arguments are required: ", "is required"),
        ("unrecognized arguments: ", "is not a flag of this command"),
    ):
        if message.startswith(lead):
            names = message.removeprefix(lead)
            return f"{names.split(', ')[0].split(' ')[0]}: {problem} ({lead.rstrip(': ')}: {names})"
    return message


def build_parser() -> argparse.ArgumentParser:
    """The parser with every registered subcommand."""
    parser = Parser(prog="rlinf", description="RL training that plans its own execution.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        sub = subparsers.add_parser(
            name, help=module.__doc__.strip().splitlines()[0] if module.__doc__ else None
        )
        module.add_arguments(sub)
        sub.set_defaults(handler=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    parser = build_parser()
    with warnings.catch_warnings():
        warnings.simplefilter("default", RlinfWarning)
        warnings.showwarning = _show_warning
        try:
            args = parser.parse_args(argv)
            # What a profile's provenance records as its command (also when called in-process with ``argv``).
            args.command_line = shlex.join(["rlinf", *(sys.argv[1:] if argv is None else argv)])
            return int(args.handler(args) or 0)
        except RlinfError as error:
            report_error(error)
            return 2
        except KeyboardInterrupt:
            print("rlinf: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:
            # The reader (e.g. `| head`) went away: stop quietly, as Unix tools do.
            sys.stderr.close()
            return 0


def report_error(error: RlinfError) -> None:
    """Print ``error`` as the one line a user sees (exit code 2 follows)."""
    print(f"rlinf: error: {error}", file=sys.stderr)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    print(f"rlinf: warning: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
