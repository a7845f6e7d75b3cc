"""What the benchmark scripts share: the provenance of an artifact and the generated blocks of the docs.

Every benchmark that writes a JSON artifact records the command that measured it, the commit, the date, the
machine's cores, processor model and load average before and after, next to the raw per-iteration values, and
writes the file atomically (readers see the old artifact or the whole new one)::

    started = suite.begin("python benchmarks/bench_ray.py", argv)
    ...measure...
    suite.write_artifact(path, {"seconds": [...], ...}, started)

A generated block is the text between ``<!-- KIND:NAME -->`` and ``<!-- /KIND:NAME -->`` in a Markdown file that a
script writes and a test recomputes, so that a figure edited by hand, or left behind when its source changed,
fails: kind ``figures`` (simulated, ``benchmarks/doc_figures.py``), ``measured`` (rendered from the artifacts,
``benchmarks/measurements.py``) and ``analytic-validation`` (``benchmarks/analytic_validation.py``).

:class:`LoadSampler` records what else ran on the machine while a command of ours ran: a thread reads ``/proc/stat``
(every core's busy time) and the CPU time of the command's process tree every :data:`PERIOD_S` seconds; the busy
time that is not the tree's is other processes' (other users' jobs, the system), the load a measurement ran under,
phase by phase, which the 1-minute load average blurs (Linux only)::

    with LoadSampler(pid) as sampler:   # pid: the command's process; its descendants count as ours
        ...
    sampler.others_cores(start_s, end_s)  # mean cores other processes kept busy in that window (time.monotonic)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import io
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from executor.devices import processor_name
from rlinf.core.files import write_text_atomic

FIELDS = (
    "command",
    "commit",
    "uncommitted_code_changes",
    "date",
    "cores",
    "processor",
    "load_average_before",
    "load_average_after",
)
"""The keys of an artifact's ``provenance`` object (plus ``wall_s``)."""


@attrs.frozen(kw_only=True)
class Started:
    """What is known when a measurement starts."""

    command: str
    """The command line that measures, as a user would type it from the repository root."""
    commit: str
    """``git rev-parse --short HEAD`` of the checkout that measured (``unknown`` outside git)."""
    uncommitted_code_changes: bool
    """Whether tracked files other than docs (``docs/``, ``*.md``: artifacts and prose that benchmarks rewrite)
    differed from that commit when the measurement started."""
    date: str
    """UTC start time, ISO 8601."""
    cores: int
    """``os.cpu_count()``."""
    processor: str
    """The processor model (:func:`executor.devices.processor_name`): figures measured on one model need not hold
    on another."""
    load_average_before: tuple[float, float, float]
    """1-, 5- and 15-minute load averages at the start."""
    started_s: float
    """``time.perf_counter()`` at the start."""


def begin(script: str, argv: Sequence[str] | None = None) -> Started:
    """Provenance of a measurement starting now; ``script`` is the command without its arguments (e.g.
    ``python benchmarks/bench_ray.py``), ``argv`` its arguments (default: ``sys.argv[1:]``)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    return Started(
        command=" ".join([script, *(shlex.quote(a) for a in arguments)]),
        commit=commit(),
        uncommitted_code_changes=bool(
            _git("status", "--porcelain", "--untracked-files=no", "--", ":/", ":/!docs", ":/!*.md")
        ),
        date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        cores=os.cpu_count() or 0,
        processor=processor_name(),
        load_average_before=_load_average(),
        started_s=time.perf_counter(),
    )


def finish(started: Started) -> dict[str, Any]:
    """The ``provenance`` object of an artifact: :class:`Started`'s fields, the load average now and the wall
    seconds since :func:`begin`."""
    record = {name: getattr(started, name) for name in FIELDS if name != "load_average_after"}
    record["load_average_before"] = list(started.load_average_before)
    record["load_average_after"] = list(_load_average())
    record["wall_s"] = round(time.perf_counter() - started.started_s, 1)
    return record


def document(body: dict[str, Any], started: Started) -> dict[str, Any]:
    """``body`` with its ``provenance`` (see :func:`finish`) first."""
    return {"provenance": finish(started), **body}


def write_artifact(path: str | Path, body: dict[str, Any], started: Started) -> dict[str, Any]:
    """Write ``body`` with its ``provenance`` as indented JSON to ``path`` atomically; returns what was written."""
    written = document(body, started)
    write_text_atomic(path, json.dumps(written, indent=1) + "\n")
    return written


def commit() -> str:
    """The checkout's short commit hash (``unknown`` outside a git checkout)."""
    return _git("rev-parse", "--short", "HEAD") or "unknown"


def _load_average() -> tuple[float, float, float]:
    one, five, fifteen = os.getloadavg()
    return round(one, 2), round(five, 2), round(fifteen, 2)


def _git(*arguments: str) -> str:
    try:
        out = subprocess.run(
            ["git", *arguments], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        )
    except (OSError, subprocess.CalledProcessError):
        return ""
    return out.stdout.strip()


# ------------------------------------------------------------------------------------------ generated blocks
ROOT = Path(__file__).resolve().parent.parent


@attrs.frozen
class Block:
    """A generated block: the file (relative to the repository root), its marker's name and what renders it."""

    path: str
    name: str
    make: Callable[[], str]


def pattern(kind: str, name: str) -> re.Pattern[str]:
    """A block in a file: the opening marker, the body, the closing marker (which may be indented)."""
    return re.compile(
        rf"(<!-- {kind}:{re.escape(name)} -->\n)(.*?)\n?( *<!-- /{kind}:{re.escape(name)} -->)", re.S
    )


def compute(blocks: Iterable[Block]) -> dict[tuple[str, str], str]:
    """Every block's body, by (file, name)."""
    return {(b.path, b.name): b.make() for b in blocks}


def read(blocks: Iterable[Block]) -> dict[str, str]:
    """The text of every file that holds one of ``blocks``."""
    return {path: (ROOT / path).read_text() for path in dict.fromkeys(b.path for b in blocks)}


def differences(kind: str, texts: dict[str, str], bodies: dict[tuple[str, str], str]) -> list[str]:
    """``path:name`` of each block whose body in ``texts[path]`` differs from ``bodies`` (or is missing)."""
    out = []
    for (path, name), body in bodies.items():
        found = pattern(kind, name).search(texts[path])
        if found is None or found.group(2) != body:
            out.append(f"{path}:{name}")
    return out


def rewrite(kind: str, texts: dict[str, str], bodies: dict[tuple[str, str], str]) -> dict[str, str]:
    """``texts`` with every block's body replaced by ``bodies`` (a missing block is an error: add its markers)."""
    out = dict(texts)
    for (path, name), body in bodies.items():
        block = pattern(kind, name)
        found = block.search(out[path])
        if found is None:
            raise ValueError(f"{path} has no block {kind}:{name}: add its markers where the block goes")
        out[path] = (
            out[path][: found.start()]
            + f"{found.group(1)}{body}\n{found.group(3)}"
            + out[path][found.end() :]
        )
    return out


def indented(make: Callable[[], str], indent: str) -> Callable[[], str]:
    """``make``'s text with every non-empty line indented (a block inside a list item)."""
    return lambda: "\n".join(indent + line if line else line for line in make().splitlines())


def check_write_arguments(
    parser: argparse.ArgumentParser, write_help: str
) -> argparse._MutuallyExclusiveGroup:
    """``--check`` and ``--write`` on ``parser`` (one or the other; neither prints every block)."""
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true", help="exit 1 when a doc differs")
    action.add_argument("--write", action="store_true", help=write_help)
    return action


def check_or_write(kind: str, blocks: Iterable[Block], args: argparse.Namespace, stale_what: str) -> int:
    """The blocks' command: rewrite them (``args.write``), check them (``args.check``: 1 and one line naming the
    stale ones when a doc differs) or print them."""
    blocks = tuple(blocks)
    bodies, texts = compute(blocks), read(blocks)
    if args.write:
        for path, text in rewrite(kind, texts, bodies).items():
            (ROOT / path).write_text(text)
    elif args.check:
        stale = differences(kind, texts, bodies)
        if stale:
            print(f"{stale_what}: {', '.join(stale)}; fix: {sys.argv[0]} --write")
            return 1
    else:
        print("\n\n".join(f"{path} {name}:\n{body}" for (path, name), body in bodies.items()))
    return 0


# ----------------------------- what else ran on the machine: CPU seconds per second of other processes
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


# ------------------------------------------------------------------------------------ runs, metrics, figures
def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """A JSON-lines file, one object per non-empty line."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def metrics_of(run_dir: str | Path) -> list[dict[str, Any]]:
    """A run directory's ``metrics.jsonl``: one object per iteration."""
    return read_jsonl(Path(run_dir) / "metrics.jsonl")


def rlinf_json(argv: Sequence[str]) -> dict[str, Any]:
    """One ``rlinf`` command run in this process (``argv`` without ``rlinf``, ``--json`` among it): what it
    printed, parsed; its other output is dropped and a failure raises."""
    from rlinf.cli import main as rlinf

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = rlinf(list(argv))
    if code not in (0, None):
        raise RuntimeError(f"rlinf {' '.join(argv)} exited {code}")
    return json.loads(out.getvalue())


@contextlib.contextmanager
def figure(path: str | Path, size: tuple[float, float], dpi: int = 120) -> Iterator[Any]:
    """The axes of one matplotlib figure (headless), laid out and saved as ``path`` when the block ends."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawing, axes = plt.subplots(figsize=size)
    try:
        yield axes
        drawing.tight_layout()
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        drawing.savefig(path, dpi=dpi)
    finally:
        plt.close(drawing)


# --------------------------------------------------------------------------- figures rendered from artifacts
@functools.cache
def artifact(path: str) -> dict[str, Any]:
    """A committed JSON artifact, by its path from the repository root (read once per process)."""
    return json.loads((ROOT / path).read_text())


def load(provenance: dict[str, Any]) -> str:
    """How a figure states the 1-minute load average of the run that measured it."""
    before, after = provenance["load_average_before"][0], provenance["load_average_after"][0]
    return f"load average {before:.1f} -> {after:.1f}"


def conditions(a: dict[str, Any]) -> str:
    """Commit and load average of an artifact, whichever way its benchmark recorded them."""
    if "provenance" in a:
        return f"commit {a['provenance']['commit']}, {load(a['provenance'])}"
    before = a["load_average"]["before"] if "load_average" in a else a["load_average_1min"]["before"]
    after = a["load_average"]["after"] if "load_average" in a else a["load_average_1min"]["after"]
    before, after = (v[0] if isinstance(v, list) else v for v in (before, after))
    return f"commit {a['commit']}, load average {before:.1f} -> {after:.1f}"


def fill(text: str) -> str:
    """A paragraph of a generated block, wrapped at 115 characters."""
    return textwrap.fill(text, 115)


def ratio_x(value: float) -> str:
    return f"{value:.2f}x"


def plan_text(name: str) -> str:
    """A plan's name as the docs write it."""
    return name.replace(" | ", ", ")
