"""The ``rlinf`` command line: one subcommand per module in :mod:`rlinf.commands`.

Bad input is printed as one line (``rlinf: error: ...``) with exit code 2, never a traceback; internal bugs
still crash loudly.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from collections.abc import Sequence

from rlinf.errors import RlinfError, RlinfWarning

# Subcommand name -> module in rlinf.commands exposing add_arguments(parser) and run(args) -> int.
COMMANDS = {
    "capacity": "rlinf.commands.capacity",
    "plan": "rlinf.commands.plan",
    "simulate": "rlinf.commands.simulate",
    "trace": "rlinf.commands.trace",
    "train": "rlinf.commands.train",
    "validate": "rlinf.commands.validate",
}


def build_parser() -> argparse.ArgumentParser:
    """The parser with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="rlinf", description="RL training that plans its own execution.")
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
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("default", RlinfWarning)
        warnings.showwarning = _show_warning
        try:
            return int(args.handler(args) or 0)
        except RlinfError as error:
            print(f"rlinf: error: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("rlinf: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:
            # The reader (e.g. `| head`) went away: stop quietly, as Unix tools do.
            sys.stderr.close()
            return 0


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    print(f"rlinf: warning: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
