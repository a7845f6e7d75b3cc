"""The flags that say what a device of this machine is (``--accelerator``, ``--cpu-devices``) and the machine they
make, and the profiling flags: shared by ``rlinf train`` and ``rlinf validate``, the commands that run workers
here."""

from __future__ import annotations

import argparse
from typing import Any

from rlinf.commands import values


def add_machine_arguments(parser: argparse.ArgumentParser) -> None:
    """``--accelerator`` and ``--cpu-devices``."""
    parser.add_argument(
        "--accelerator",
        choices=("cpu", "cuda"),
        help="what a device is: a CPU core or a CUDA GPU (default: cuda when a GPU is visible, else cpu)",
    )
    parser.add_argument(
        "--cpu-devices",
        type=int,
        metavar="N",
        help="with GPUs: CPU cores beside them on which components that need no GPU (environments, a rule-based "
        "reward) may run (default: the machine's cores less one per GPU; 0: everything on the GPUs)",
    )


def add_profiling_arguments(parser: argparse.ArgumentParser, *, budget_help: str) -> None:
    """``--profile-budget`` (described by ``budget_help``) and ``--profile-iterations``."""
    parser.add_argument("--profile-budget", type=values.positive_seconds, default=120.0, help=budget_help)
    parser.add_argument(
        "--profile-iterations",
        type=int,
        default=6,
        metavar="N",
        help="measured iterations per probe plan, after its 2 warm-up ones (default 6; fewer: more probe plans "
        "fit a short --profile-budget)",
    )


def resolve_machine(args: argparse.Namespace) -> Any:
    """The machine of the flags (:func:`rlinf.app.request.machine_of`), after settling ``args.accelerator`` and
    ``args.cpu_devices`` to the values it used."""
    from rlinf.app.request import machine_of

    machine, args.accelerator, args.cpu_devices = machine_of(args.accelerator, args.cpu_devices)
    return machine
