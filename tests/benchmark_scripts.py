"""The scripts of ``benchmarks/`` as modules, for tests that check what they compute. The folder is not a package:
its scripts import their siblings by name (``import provenance``), as they do when run as
``python benchmarks/NAME.py``, so the folder goes on ``sys.path`` first."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load(name: str) -> ModuleType:
    """``benchmarks/NAME.py`` as a module (imported once per process)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)
