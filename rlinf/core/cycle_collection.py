"""Python's cycle collector, paused while a pure computation builds and drops a great many objects.

Lowering, simulating and searching allocate hundreds of thousands of small objects (ops, events, spans, table
rows) that reference counting frees. The collector's passes over a heap of millions of them took a third to half
the time of a large ``rlinf simulate`` (a synthesized 1.5B trace's plan of 100,000 micro-batches, 700,000 ops:
91 s wall, 36 s CPU with them; 57 s and 26 s without, on a shared 2-core machine) and about 5% of a plan search
(``tests/bench_planner.py``)."""

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
