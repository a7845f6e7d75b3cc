"""The dispatch rule of a program, as pure bookkeeping shared by every executor backend.

An op becomes ready when all of its dependencies are done and each of its devices has finished the op before it
in that device's order (``Program.device_order``): the same rule as :func:`simulator.engine.replay`. The
interpreter only counts; a backend asks it which ops are ready, runs them, and reports completions.
"""

from __future__ import annotations

from rlinf.program import Program


class Interpreter:
    """Tracks which ops of one program run are ready, running and done; one instance per run."""

    def __init__(self, program: Program) -> None:
        ops = program.ops
        self._program = program
        self._waiting = [len(op.deps) for op in ops]
        self._successors: list[list[int]] = [[] for _ in ops]
        for op in ops:
            for dep in op.deps:
                self._successors[dep].append(op.index)
        for order in program.device_order:
            for before, after in zip(order, order[1:], strict=False):
                self._successors[before].append(after)
                self._waiting[after] += 1
        self._done = [False] * len(ops)
        self._num_done = 0
        self._started = False

    def start(self) -> list[int]:
        """The ops ready at the beginning, in program order. Call once."""
        assert not self._started, "start() called twice"
        self._started = True
        return [i for i, count in enumerate(self._waiting) if count == 0]

    def complete(self, index: int) -> list[int]:
        """Mark op ``index`` done; return the ops that became ready, in program order."""
        assert self._started, "complete() before start()"
        assert not self._done[index], f"op {self._program.ops[index].label} completed twice"
        self._done[index] = True
        self._num_done += 1
        ready = []
        for successor in self._successors[index]:
            self._waiting[successor] -= 1
            if self._waiting[successor] == 0:
                ready.append(successor)
        return sorted(ready)

    @property
    def finished(self) -> bool:
        """Whether every op is done."""
        return self._num_done == len(self._done)
