"""Workloads by reference: a config's ``workload:`` is a built-in name, ``package.module:attribute`` or
``path/to/file.py:attribute``. What the reference names is checked to be a workload (:class:`rlinf.api.Workload`)
before anything runs; every failure is one line naming the reference and what is missing."""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

from rlinf.api.workload import WORKER_METHODS, WORKLOAD_METHODS
from rlinf.core.errors import ConfigError

BUILTIN = {
    "embodied_ppo": "rlinf.workloads.embodied.workload:WORKLOAD",
    "grpo_hf": "rlinf.workloads.hf_grpo.workload:WORKLOAD",
}
"""Built-in workloads by name; any other workload is named by its reference."""
RETIRED = {
    "grpo_arith": "write workload: grpo_hf with task: {kind: addition, ...}, as examples/grpo_arith.yaml does (the "
    "arithmetic workload became the addition task of the GRPO workload, docs/grpo.md)",
}
"""Built-in names that are gone, with what replaced them."""
FIX = "write 'workload: <built-in name>', 'package.module:attribute' or 'path/to/file.py:attribute'"


def load_workload(reference: Any, *, base: Path = Path(".")) -> Any:
    """The workload ``reference`` names (a relative file path is taken from ``base``, the config's folder)."""
    if not isinstance(reference, str) or not reference.strip():
        raise ConfigError("workload", reference, "must be a name or a reference", FIX)
    if reference in RETIRED:
        raise ConfigError("workload", reference, "is no longer a built-in workload", RETIRED[reference])
    target = BUILTIN.get(reference, reference)
    module_name, sep, attribute = target.rpartition(":")
    if not sep or not module_name or not attribute.isidentifier():
        raise ConfigError(
            "workload",
            reference,
            f"is not a built-in workload ({', '.join(sorted(BUILTIN))}) nor a reference",
            FIX,
        )
    module = _import(reference, module_name, base)
    if not hasattr(module, attribute):
        raise ConfigError(
            "workload", reference, f"module {module.__name__} has no attribute {attribute!r}",
            "name an attribute the module defines",
        )  # fmt: skip
    workload = getattr(module, attribute)
    check_workload(reference, workload)
    return workload


def _import(reference: str, module_name: str, base: Path) -> Any:
    """Import ``package.module``, or ``path/file.py`` as module ``file`` with its folder on ``sys.path`` (so that
    worker processes, which inherit ``sys.path``, can import its worker classes too)."""
    if module_name.endswith(".py"):
        path = base / module_name  # relative to the config's folder, else to the working directory
        if not path.is_file():
            path = Path(module_name)
        if not path.is_file():
            raise ConfigError(
                "workload", reference, f"file {path} does not exist", "give the path of a .py file"
            )
        folder = str(path.resolve().parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        module_name = path.stem
        sys.modules.pop(module_name, None)  # the file as it is now, not an earlier import of that name
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise ConfigError(
            "workload", reference, f"cannot import {module_name} ({error})",
            "install the package or fix the module path",
        ) from None  # fmt: skip
    except ConfigError:
        raise
    except Exception as error:  # the user's module failed while importing: say so in one line
        raise ConfigError(
            "workload", reference, f"importing {module_name} failed ({type(error).__name__}: {error})",
            "fix the module",
        ) from None  # fmt: skip


def check_workload(reference: str, workload: Any) -> None:
    """Raise unless ``workload`` has what :class:`rlinf.api.Workload` asks for."""
    missing = [m for m in WORKLOAD_METHODS if not callable(getattr(workload, m, None))]
    if not isinstance(getattr(workload, "name", None), str):
        missing.insert(0, "name")
    if missing:
        raise ConfigError(
            "workload", reference,
            f"is a {type(workload).__name__}, not a workload: it lacks {', '.join(missing)}",
            "point at an object implementing rlinf.api.Workload (docs/workloads.md)",
        )  # fmt: skip
    if hasattr(workload, "config_keys") or not _takes(workload.load_config, 3):
        raise ConfigError(
            "workload", reference, "names its run settings with config_keys or has load_config(data, source)",
            "remove config_keys and take load_config(data, source, settings): the iterations, seed, mode, "
            "checkpoint_every, granularity and offload moved to the config's execution section (docs/workloads.md)",
        )  # fmt: skip
    for name, signature in OPTIONAL_METHODS.items():
        if hasattr(workload, name) and not callable(getattr(workload, name)):
            raise ConfigError(
                "workload", reference, f"has a {name} attribute that is not a method",
                f"make it the optional method {name}{signature} or remove it (docs/workloads.md)",
            )  # fmt: skip


OPTIONAL_METHODS = {"response_lengths": "(result, config)", "check": "(config)"}
"""The optional methods of :class:`rlinf.api.Workload`, with their arguments."""


def _takes(method: Any, count: int) -> bool:
    """Whether ``method`` can be called with ``count`` positional arguments."""
    try:
        inspect.signature(method).bind(*range(count))
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): let the call decide
        return True
    return True


def check_workers(
    reference: str, workers: Any, components: tuple[str, ...], syncs: tuple[tuple[str, str], ...]
) -> None:
    """Raise unless ``workers`` maps every component to a class with the worker methods it needs."""
    fix = "implement rlinf.api.Worker (docs/workloads.md)"
    if not hasattr(workers, "keys") or set(workers.keys()) != set(components):
        raise ConfigError(
            "workload", reference, f"workers() must map exactly the components {list(components)}",
            f"return {{component: worker class}}, got {sorted(getattr(workers, 'keys', list)())}",
        )  # fmt: skip
    for name in components:
        worker = workers[name]
        needed = list(WORKER_METHODS)
        needed += ["weights"] * any(src == name for src, _ in syncs)
        needed += ["load_weights"] * any(dst == name for _, dst in syncs)
        lacking = [m for m in needed if not callable(getattr(worker, m, None))]
        if lacking:
            raise ConfigError(
                f"workload {reference} worker {name}", getattr(worker, "__name__", worker),
                f"lacks {', '.join(lacking)}", fix,
            )  # fmt: skip
