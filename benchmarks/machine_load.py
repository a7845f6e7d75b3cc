"""What else ran on the machine while a command of ours ran: CPU seconds per second taken by other processes.

    with LoadSampler(pid) as sampler:   # pid: the command's process; its descendants count as ours
        ...
    sampler.others_cores(start_s, end_s)  # mean cores other processes kept busy in that window (time.monotonic)

A thread reads ``/proc/stat`` (every core's busy time) and the CPU time of the command's process tree
(``/proc/PID/stat`` of it and its descendants) every :data:`PERIOD_S` seconds; the busy time that is not the tree's
is other processes' (other users' jobs, the system). On a machine shared with other work this is the load a
measurement ran under, phase by phase, which the 1-minute load average blurs. Linux only.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

PERIOD_S = 0.5
TICKS = os.sysconf("SC_CLK_TCK")


def busy_s() -> float:
    """Busy CPU seconds of every core together since boot (``/proc/stat``: all but idle and iowait)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in fields[:8]]
    return (sum(values) - values[3] - values[4]) / TICKS


def tree_cpu_s(root: int) -> float:
    """CPU seconds of ``root`` and its living descendants, as far as ``/proc`` shows them: their own (user +
    system) and that of their children that ended and were waited for (a profile's short-lived worker processes;
    before this was counted, the benchmark's first 20 runs counted those workers' CPU time as other processes')."""
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        parent[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICKS
    ours = {root}
    changed = True
    while changed:
        grown = {pid for pid, ppid in parent.items() if ppid in ours} - ours
        changed = bool(grown)
        ours |= grown
    return sum(cpu.get(pid, 0.0) for pid in ours)


class LoadSampler:
    """Samples (time, all busy seconds, the tree's CPU seconds) every :data:`PERIOD_S` in a thread."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._tree_max = 0.0

    def _sample(self) -> None:
        # A process that ended takes its CPU time out of the tree: keep the tree's total monotone.
        self._tree_max = max(self._tree_max, tree_cpu_s(self.root))
        self.samples.append((time.monotonic(), busy_s(), self._tree_max))

    def _run(self) -> None:
        while not self._stop.wait(PERIOD_S):
            self._sample()

    def __enter__(self) -> LoadSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def others_cores(self, start_s: float, end_s: float) -> float | None:
        """Mean cores kept busy by other processes between ``start_s`` and ``end_s`` (``time.monotonic``); the
        samples nearest inside the window, ``None`` when fewer than two fall in it."""
        inside = [s for s in self.samples if start_s <= s[0] <= end_s]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        (t0, busy0, ours0), (t1, busy1, ours1) = inside[0], inside[-1]
        return max(0.0, (busy1 - busy0) - (ours1 - ours0)) / (t1 - t0)
