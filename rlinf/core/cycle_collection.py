"""Python's cycle collector, paused while a pure computation builds and drops a great many objects.

Lowering, simulating and searching allocate hundreds of thousands of small objects (ops, events, spans, table
rows) that reference counting frees. The collector's passes over a heap of millions of them took most of the time
of a large ``rlinf simulate`` (20,000 micro-batches: 21.1 s with it, 9.9 s without; 100,000: 107 s and 51 s)
and about 5% of a plan search (``tests/bench_planner.py``)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The cycle collector off for the block; it resumes, as it was, when the block ends (or raises)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
