"""The flags that say what a device of this machine is (``--accelerator``, ``--cpu-devices``) and the machine they
make, and the profiling flags: shared by ``rlinf train`` and ``rlinf validate``, the commands that run workers
here."""

from __future__ import annotations

import argparse
from typing import Any

from rlinf.commands import values
from rlinf.core.errors import ConfigError


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
    """The machine of the flags (:func:`executor.devices.machine_for`), after settling ``args.accelerator``
    (default: cuda when a GPU is visible) and ``args.cpu_devices`` (default: the machine's cores less one per
    GPU); ``--cpu-devices`` without GPUs is refused (the cores are the devices then), and so are more cores than
    there are."""
    from executor.devices import core_pool_cores, default_cpu_devices, machine_for, resolve_accelerator

    args.accelerator = resolve_accelerator(args.accelerator)
    if args.cpu_devices is None:
        args.cpu_devices = default_cpu_devices(args.accelerator)
    elif args.accelerator != "cuda" and args.cpu_devices:
        raise ConfigError(
            "--cpu-devices", args.cpu_devices, "places components on CPU cores beside GPUs, and this run has none "
            "(--accelerator cpu: the cores are the devices)", "use --devices N, or --accelerator cuda on a GPU machine",
        )  # fmt: skip
    core_pool_cores(args.cpu_devices)
    return machine_for(args.accelerator, args.cpu_devices)
