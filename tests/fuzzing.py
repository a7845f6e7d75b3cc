"""The fuzz harness of ``tests/test_fuzz_cli.py``: seed inputs, mutations, one in-process CLI run per case, the
checks every outcome must pass, and the tally that ``docs/reliability.md`` reports.

A *case* is a command line plus the files it names. Files are the shipped traces (their sample lists cut short, so
a case runs in milliseconds), the example plans and configs, cluster specs and step logs, each mutated: wrong
types, deleted keys, NaN/inf, huge values, unknown keys, garbage bytes, UTF-16, truncation, deep nesting, alias
bombs. Every case must end in exit 0 (or reach the stubbed heavy stage: planning search, capacity cells,
calibration fit, training, profiling) or in exit 2 with one ``rlinf: error:`` line whose field exists in the input;
never a traceback; within :data:`CASE_SECONDS` and :data:`MEMORY_GROWTH_BYTES`.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import io
import json
import os
import re
import resource
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml
from hypothesis import strategies as st

from rlinf import cli
from rlinf.core.errors import ConfigError, RlinfError

REPO = Path(__file__).resolve().parents[1]
ENTRY_POINTS = (
    "simulate",
    "plan",
    "trace show",
    "trace synth",
    "trace calibrate",
    "trace import",
    "capacity",
    "train",
    "validate",
)
CASES_PER_ENTRY = int(os.environ.get("RLINF_FUZZ_EXAMPLES", "200"))
"""Cases per entry point (``RLINF_FUZZ_EXAMPLES`` runs more or fewer; the table needs 200, the default suite's
count: every mutation kind is drawn for every entry point well within it)."""
CASE_SECONDS = 10.0
"""No case may take longer (the slowest accepted case, a simulation of a 7B plan, takes well under a second)."""
MEMORY_GROWTH_BYTES = 1 << 30
"""No case may raise the process's peak RSS by this much."""
OUTCOMES = ("clean error", "limit", "accepted", "traceback")
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
BASE_LOADER = yaml.BaseLoader  # pure Python: libyaml's loaders crash on very deep block nesting


class Reached(Exception):
    """Raised by the stubs of the heavy stages: the input got through every check (outcome ``accepted``)."""


# ----------------------------------------------------------------------------------------------------- seeds
def _shrunk_trace(name: str, per_group: int = 3, lengths: int = 64) -> dict[str, Any]:
    """A shipped trace with at most ``per_group`` samples per (component, op, devices) and ``lengths`` response
    lengths: the same schema and workflow, small enough that a case loads in milliseconds."""
    data = json.loads((REPO / "traces" / f"{name}.json").read_text())
    kept: Counter[tuple[Any, ...]] = Counter()
    samples = []
    for sample in data["samples"]:
        key = (sample["component"], sample["op"], sample["devices"])
        if kept[key] < per_group:
            kept[key] += 1
            samples.append(sample)
    data["samples"] = samples
    data["distributions"]["response_length"] = data["distributions"]["response_length"][:lengths]
    provenance = data["provenance"]
    for key in ("formulas", "packages", "probe_plans"):
        provenance.pop(key, None)
    if isinstance(provenance.get("workload"), dict):  # what-ifs re-synthesize from it: keep that quick too
        provenance["workload"]["num_stored_lengths"] = lengths
        provenance["sampling"]["max_devices"] = 1024
    return data


TRACES = {
    name: _shrunk_trace(name)
    for name in ("grpo_7b_h100", "grpo_1.5b_h100", "grpo_32b_h200", "grpo_arith_cpu2", "hopper_ppo_cpu2")
}
EXAMPLE_PLANS = {
    path.stem: yaml.safe_load(path.read_text())
    for path in sorted((REPO / "examples" / "plans").glob("*.yaml"))
}
CPU_PLANS = {
    "hopper_ppo_cpu2": [
        {
            "placement": {"env": "0", "rollout": "0", "actor": "0-1"},
            "data_parallel": {"actor": 2},
            "granularity": {"loop": 2},
        },
        {"placement": {"env": "all", "rollout": "all", "actor": "all"}, "offload": ["rollout", "actor"]},
    ],
    "grpo_arith_cpu2": [
        {
            "placement": {"rollout": "all", "reward": "all", "inference": "all", "actor": "all"},
            "granularity": {"rollout->reward": 4, "reward->inference": 4, "inference->actor": 4},
        },
        {"placement": {"rollout": 0, "reward": 0, "inference": 1, "actor": [1]}},
    ],
}
"""Plans for the CPU traces (the example plans are for the LLM traces' 32 devices)."""
CLUSTER_SPECS = ("4x8xH100", "8xH100", "2x8xH200", "2xCPU", "1x8xA100", "16xH100")
ODD_CLUSTER_SPECS = (
    "1000000x8xH100", "99999999999999999999x8xH100", "0x8xH100", "8xTPU", "x8xH100", "", "8x", "4x8xh100",
    "65536x1xCPU", "9" * 5000 + "xH100", "/proc/self/status", "cluster.yaml",
)  # fmt: skip
CLUSTER_DOCS = {
    "custom": {
        "num_nodes": 4,
        "devices_per_node": 8,
        "device": {
            "name": "X1",
            "memory_bytes": 85899345920,
            "peak_flops": 9.0e14,
            "memory_bandwidth_bytes_per_s": 3.0e12,
        },
        "links": {
            "intra_node_bytes_per_s": 4.0e11,
            "inter_node_bytes_per_s": 5.0e10,
            "host_device_bytes_per_s": 5.0e10,
        },
    },
    "preset": {"num_nodes": 4, "devices_per_node": 8, "device": "H100"},
}
CONFIGS = {
    "hopper_ppo": yaml.safe_load((REPO / "examples" / "hopper_ppo.yaml").read_text()),
    "grpo_arith": yaml.safe_load((REPO / "examples" / "grpo_arith.yaml").read_text()),
    "custom": {
        **yaml.safe_load((REPO / "examples" / "custom_workload" / "config.yaml").read_text()),
        "workload": f"{REPO / 'examples' / 'custom_workload' / 'ppo_critic.py'}:WORKLOAD",
    },
}
VERL_STEP = {
    "timing_s/gen": 60.0,
    "timing_s/reward": 2.0,
    "timing_s/old_log_prob": 8.0,
    "timing_s/ref": 7.0,
    "timing_s/update_actor": 30.0,
    "timing_s/update_weights": 1.5,
    "timing_s/step": 110.0,
    "response_length/mean": 1200.0,
    "prompt_length/mean": 300.0,
}
VERL_LOG = [{"step": step, "data": {**VERL_STEP, "timing_s/gen": 60.0 + step}} for step in range(1, 4)]
RLINF_CSV = [["step", "tag", "value"]] + [
    [str(step), tag, value]
    for step in (0, 2)
    for tag, value in (
        ("time/rollout", "50.0"),
        ("time/reward", "1.0"),
        ("time/actor/inference", "9.0"),
        ("time/actor/training", "25.0"),
        ("time/sync_weights", "2.0"),
        ("time/step", "90.0"),
        ("rollout/response_length", "900"),
    )
]

# ----------------------------------------------------------------------------------------------- mutations
HUGE = (10**6, 10**9, 2**31, 2**63, 10**30, 10**400, 1e300, -(10**9))
INTERESTING: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 2, 3, 7, 64, 0.5, 1.5, -0.0, -2.5, 1e-300,
    float("nan"), float("inf"), float("-inf"), *HUGE,
    "", " ", "x", "all", "0-3", "0-999999999", "7-2", "1.0e12", "H100", "actor", "rollout", "loop", "-1",
    "\u00e9\u4e2d", "a\nb", "a.b", "rollout->reward", [], {}, [1], ["x"], [[[]]], {"a": 1}, {"x": [1, 2]},
)  # fmt: skip
MUTATION_KINDS = (
    "replace",
    "replace",
    "scale",
    "scale",
    "scale",
    "delete",
    "delete",
    "add_key",
    "wrap",
    "duplicate",
)
SCALES = (2, 2, 3, 10, 0.5, 1.5, 1.000001, 0, -1, 1000, 10**6, 10**12)
"""Mostly benign factors (the input often stays valid and the case runs through), some that break limits."""
FILE_CORRUPTIONS = ("none",) * 20 + (
    "utf16", "utf16le", "utf8_bom", "latin1", "truncate", "garbage_insert", "garbage", "empty", "deep", "nul",
)  # fmt: skip
YAML_BOMB = (
    'a: &a ["x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n'
    "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
    "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\nplacement: [*g,*g,*g,*g]\n"
)
YAML_SPECIALS = (
    YAML_BOMB,
    "&a [*a]\n",
    "placement: " + "[" * 3000 + "]" * 3000 + "\n",
    "- " * 100_000 + "x\n",
    "!!python/object:os.system x\n",
)


def value_paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths to every value of ``data``; of a list longer than 3 only its first, a middle and its last item."""
    paths = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            paths += value_paths(value, (*prefix, key))
    elif isinstance(data, list):
        indices = range(len(data)) if len(data) <= 3 else (0, len(data) // 2, len(data) - 1)
        for index in indices:
            paths += value_paths(data[index], (*prefix, index))
    return paths


FROZEN_KEYS = frozenset({"hidden"})
"""Keys never mutated: the custom example workload builds torch layers ``hidden`` wide to size its state, and what a
user's own code allocates is beyond what rlinf can bound (docs/reliability.md)."""


@st.composite
def mutated_document(draw: st.DrawFn, seed: Any, max_mutations: int = 3) -> Any:
    """``seed`` (a parsed JSON/YAML document, not changed) with up to ``max_mutations`` random edits."""
    doc = copy.deepcopy(seed)
    for _ in range(draw(st.integers(1, max_mutations))):
        paths = [p for p in value_paths(doc)[1:] if not FROZEN_KEYS.intersection(map(str, p))] or [()]
        path = paths[draw(st.integers(0, len(paths) - 1))]
        doc = _mutate(doc, path, draw(st.sampled_from(MUTATION_KINDS)), draw)
    return doc


def _mutate(doc: Any, path: tuple[Any, ...], kind: str, draw: st.DrawFn) -> Any:
    if not path and kind in ("delete", "scale"):
        kind = "replace"
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    current = parent[path[-1]] if path else doc
    if kind == "replace":
        new = copy.deepcopy(draw(st.sampled_from(INTERESTING)))
    elif kind == "scale":
        factor = draw(st.sampled_from(SCALES))
        if isinstance(current, bool) or not isinstance(current, (int, float)):
            new = copy.deepcopy(draw(st.sampled_from(INTERESTING)))
        else:
            new = current * factor
            if isinstance(current, int) and isinstance(factor, int):
                new = int(new)
    elif kind == "wrap":
        new = draw(st.sampled_from(([current], {"value": current}, str(current)[:40])))
    elif kind == "duplicate":
        new = (
            [current, copy.deepcopy(current)]
            if not isinstance(current, list)
            else current + copy.deepcopy(current)
        )
    elif kind == "add_key":
        if isinstance(current, dict):
            new = {**current, draw(st.sampled_from(("colour", "extra", "", "1", "placement"))): 1}
        elif isinstance(current, list):
            new = [*current, copy.deepcopy(draw(st.sampled_from(INTERESTING)))]
        else:
            new = copy.deepcopy(draw(st.sampled_from(INTERESTING)))
    else:  # delete
        if isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent.pop(path[-1])
        return doc
    if not path:
        return new
    parent[path[-1]] = new
    return doc


@st.composite
def file_bytes(draw: st.DrawFn, doc: Any, kind: str) -> bytes:
    """``doc`` serialized as ``kind`` (``json``, ``yaml``, ``jsonl``, ``csv``), then maybe corrupted."""
    if kind == "json":
        text = json.dumps(doc)
    elif kind == "jsonl":
        text = "".join(json.dumps(line) + "\n" for line in doc) if isinstance(doc, list) else json.dumps(doc)
    elif kind == "csv":
        rows = doc if isinstance(doc, list) else [[doc]]
        text = "".join(
            ",".join(str(cell) for cell in (row if isinstance(row, list) else [row])) + "\n" for row in rows
        )
    else:
        text = yaml.dump(doc, Dumper=DUMPER, sort_keys=False, allow_unicode=True)
        if draw(st.integers(0, 40)) == 0:
            text = draw(st.sampled_from(YAML_SPECIALS))
    data = text.encode("utf-8")
    corruption = draw(st.sampled_from(FILE_CORRUPTIONS))
    if corruption == "utf16":
        return text.encode("utf-16")
    if corruption == "utf16le":
        return text.encode("utf-16-le")
    if corruption == "utf8_bom":
        return b"\xef\xbb\xbf" + data
    if corruption == "latin1":
        return data[:20] + "\u00e9".encode("latin-1") + data[20:]
    if corruption == "truncate":
        return data[: draw(st.integers(0, max(0, len(data) - 1)))]
    if corruption == "garbage_insert":
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    if corruption == "garbage":
        return draw(st.binary(max_size=64))
    if corruption == "empty":
        return b""
    if corruption == "nul":
        return data[:10] + b"\x00" + data[10:]
    if corruption == "deep":
        depth = draw(st.sampled_from((70, 2000, 100_000)))
        return (
            ("[" * depth + "]" * depth).encode()
            if kind != "yaml"
            else ("a: " + "[" * depth + "]" * depth).encode()
        )
    return data


CLI_VALUES = (
    "", " ", "-1", "0", "1", "2", "3", "8", "16", "64", "1.5", "nan", "inf", "-inf", "1e400", "1e9", "999999999999",
    "9" * 50, "abc", "all", "0x10", "1_000", "\u0663", "\u00e9", "-", "--", "8,16,...,1024", "8,9,...,100000000",
    "1,2,3", "0-3", "/proc/self/status", "/dev/null", "/dev/zero", "{dir}", "{dir}/nonexistent/x", "a=b", "=", "x=[1",
    "\x01",
)  # fmt: skip
"""Values put in place of any flag's value. Paths stay in the case's folder (``{dir}``) or in ``/proc`` and ``/dev``,
which rlinf refuses to write to: the suite runs as any user, root included, and must not write elsewhere."""


@attrs.frozen
class FileSpec:
    """A file a case writes into its folder before running (``data``), or a special path (``special``)."""

    name: str
    data: bytes = attrs.field(default=b"", repr=lambda data: f"<{len(data)} bytes: {data[:60]!r}...>")
    special: str = ""
    """``missing`` (not written), ``dir`` (a folder of that name) or an absolute path used as it is."""


@attrs.frozen
class Case:
    """A command line whose ``{name}`` placeholders are the case folder's files."""

    argv: tuple[str, ...]
    files: tuple[FileSpec, ...] = ()


OUT_VARIANTS = ("fresh",) * 14 + ("existing_file", "existing_dir", "proc", "under_file", "long", "empty")


def out_path(variant: str) -> tuple[str, tuple[FileSpec, ...]]:
    """An ``--out`` value (placeholders resolved by :func:`materialize`) and the files it needs."""
    if variant == "existing_file":
        return "{blocker}", (FileSpec("blocker", b"x"),)
    if variant == "existing_dir":
        return "{outdir}", (FileSpec("outdir", special="dir"),)
    if variant == "proc":
        return "/proc/rlinf-fuzz/out", ()
    if variant == "under_file":
        return "{blocker}/out", (FileSpec("blocker", b"x"),)
    if variant == "long":
        return "{dir}/" + "n" * 300, ()
    if variant == "empty":
        return "", ()
    return "{dir}/out", ()


@st.composite
def mutated_argv(
    draw: st.DrawFn, pairs: Sequence[tuple[str, str | None]], extra_flags: Sequence[str]
) -> list[str]:
    """``pairs`` (flag, value or None for a switch) as an argument list, with up to two random edits: a flag
    dropped, a value replaced, a flag repeated, an unknown or valueless flag added."""
    items = [list(pair) for pair in pairs]
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(
            st.sampled_from(("value", "value", "value", "drop", "repeat", "unknown", "bare", "extra"))
        )
        if kind == "extra" and extra_flags:
            items.append([draw(st.sampled_from(tuple(extra_flags))), draw(st.sampled_from(CLI_VALUES))])
        elif kind == "unknown":
            items.append([draw(st.sampled_from(("--colour", "-x", "--seeed"))), "1"])
        elif not items:
            continue
        else:
            index = draw(st.integers(0, len(items) - 1))
            if kind == "value" and items[index][1] is not None:
                items[index][1] = draw(st.sampled_from(CLI_VALUES))
            elif kind == "drop":
                items.pop(index)
            elif kind == "repeat":
                items.append(list(items[index]))
            elif kind == "bare" and items[index][1] is not None:
                items[index][1] = None
    argv: list[str] = []
    for flag, value in items:
        argv += [flag] if value is None else [flag, value]
    return argv


# ------------------------------------------------------------------------------------------------- running
@attrs.define
class Tally:
    """Outcomes per entry point, as ``docs/reliability.md`` reports them."""

    counts: dict[str, Counter[str]] = attrs.field(factory=dict)
    seconds: dict[str, float] = attrs.field(factory=dict)
    slowest: dict[str, float] = attrs.field(factory=dict)

    def add(self, entry: str, outcome: str, seconds: float) -> None:
        self.counts.setdefault(entry, Counter())[outcome] += 1
        self.seconds[entry] = self.seconds.get(entry, 0.0) + seconds
        self.slowest[entry] = max(self.slowest.get(entry, 0.0), seconds)

    def cases(self, entry: str) -> int:
        return sum(self.counts.get(entry, Counter()).values())


TALLY = Tally()


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@contextlib.contextmanager
def stubbed() -> Iterator[None]:
    """The heavy stages replaced by :class:`Reached`, and a fixed machine of 2 CPU cores and no GPU (so that
    outcomes do not depend on the machine running the suite)."""
    import executor.devices
    import rlinf.app.auto
    import rlinf.app.profiling
    import rlinf.app.runner
    import rlinf.commands.plan
    import rlinf.commands.trace_calibrate

    capacity_sweep = importlib.import_module(
        "rlinf.capacity.sweep"
    )  # the package exports a function of that name

    def reached(*args: Any, **kwargs: Any) -> Any:
        raise Reached

    with pytest.MonkeyPatch.context() as patch:
        for module, name in (
            (rlinf.app.runner, "run"),
            (rlinf.app.auto, "plan_from_trace"),
            (rlinf.app.profiling, "profile"),
            (rlinf.commands.plan, "search"),
            (capacity_sweep, "_run"),
            (rlinf.commands.trace_calibrate, "calibrate"),
        ):
            patch.setattr(module, name, reached)
        patch.setattr(cli, "build_parser", _parser)
        patch.setattr(executor.devices, "available_cores", lambda: (0, 1))
        patch.setattr(executor.devices, "visible_gpus", lambda: ())
        if hasattr(executor.devices, "physical_units"):
            patch.setattr(executor.devices, "physical_units", lambda accelerator="cpu": (0, 1))
        yield


@functools.cache
def _parser() -> Any:
    """The command-line parser, built once: argparse parsers are reusable, and building one per case would be
    a third of the suite's time."""
    return _BUILD_PARSER()


_BUILD_PARSER = cli.build_parser


def materialize(case: Case, folder: Path) -> list[str]:
    """Write the case's files into ``folder``; the command line with its placeholders resolved."""
    names = {"dir": str(folder)}
    for spec in case.files:
        path = folder / spec.name
        names[spec.name] = str(path)
        if spec.special == "missing":
            continue
        if spec.special == "dir":
            path.mkdir(exist_ok=True)
        elif spec.special:
            names[spec.name] = spec.special
        else:
            path.write_bytes(spec.data)
    argv = [re.sub(r"\{([\w.-]+)\}", lambda m: names.get(m.group(1), m.group(0)), arg) for arg in case.argv]
    for arg in argv:  # a harness bug, not a finding: a case may write only into its own folder
        assert not arg.startswith("/") or arg.startswith((str(folder), "/proc/", "/dev/")), arg
    return argv


@attrs.frozen
class Result:
    outcome: str
    code: int | None
    stderr: str
    error: BaseException | None
    seconds: float


def run_cli(argv: list[str], folder: Path) -> Result:
    """``rlinf.cli.main(argv)`` in ``folder``, stubbed, with stdout/stderr captured and the error it reports."""
    reported: list[RlinfError] = []
    original = cli.report_error

    def record(error: RlinfError) -> None:
        reported.append(error)
        original(error)

    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    start = time.perf_counter()
    code: int | None = None
    outcome = ""
    try:
        os.chdir(folder)
        with stubbed(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            setattr(cli, "report_error", record)  # noqa: B010
            try:
                code = cli.main(argv)
            except Reached:
                outcome = "accepted"
            except SystemExit as stop:  # --help and the like
                code = stop.code if isinstance(stop.code, int) else 1
            except Exception:  # noqa: BLE001 - a traceback is what the fuzz looks for
                err.write(traceback.format_exc())
                outcome = "traceback"
            finally:
                setattr(cli, "report_error", original)  # noqa: B010
    finally:
        os.chdir(cwd)
    seconds = time.perf_counter() - start
    if not outcome:
        if code == 0:
            outcome = "accepted"
        elif code == 2 and reported:
            outcome = "limit" if _is_limit(reported[-1]) else "clean error"
        else:
            outcome = "traceback"
    return Result(outcome, code, err.getvalue(), reported[-1] if reported else None, seconds)


def _is_limit(error: RlinfError) -> bool:
    return isinstance(error, ConfigError) and "exceeds the limit" in error.problem


def run_case(entry: str, case: Case, *, record: bool = True) -> Result:
    """Run ``case`` and check its outcome (see the module docstring); record it in :data:`TALLY` (unless not
    ``record``)."""
    before = _peak_rss()
    with tempfile.TemporaryDirectory(prefix="rlinf-fuzz-") as tmp:
        folder = Path(tmp)
        argv = materialize(case, folder)
        result = run_cli(argv, folder)
    if record:
        TALLY.add(entry, result.outcome, result.seconds)
    shown = f"{entry}: {argv}\n{result.stderr[-3000:]}"
    assert result.outcome != "traceback", shown
    assert result.seconds < CASE_SECONDS, f"{result.seconds:.1f} s: {shown}"
    grown = _peak_rss() - before  # the peak moves only in the case that raised it
    assert grown < MEMORY_GROWTH_BYTES, f"this case raised the peak RSS by {grown / 2**20:.0f} MiB: {shown}"
    if result.code == 2:
        lines = [line for line in result.stderr.splitlines() if not line.startswith("rlinf: warning: ")]
        assert len(lines) == 1 and lines[0].startswith("rlinf: error: "), shown
        assert result.error is not None
        if isinstance(result.error, (ConfigError, cli.UsageError)):
            field = result.error.field if isinstance(result.error, ConfigError) else usage_field(result.error)
            assert names_input(field, argv, case, entry), f"field {field!r} is not in the input: {shown}"
    return result


def usage_field(error: RlinfError) -> str:
    """The flag or argument a usage error names (its text before ``=`` or ``:``)."""
    return re.split(r"[=:]", str(error), maxsplit=1)[0]


def read_documents(case: Case) -> dict[str, Any]:
    """Each written file's parsed content (``None`` when it does not parse), by file name."""
    documents: dict[str, Any] = {}
    for spec in case.files:
        if spec.special or not spec.data or spec.data.count(b"[") > 5000:  # PyYAML is quadratic in nesting
            documents[spec.name] = None
            continue
        text = spec.data.decode("utf-8", "replace").lstrip("\ufeff")
        try:
            documents[spec.name] = (
                json.loads(text) if spec.name.endswith(".json") else yaml.load(text, Loader=BASE_LOADER)
            )
        except (ValueError, RecursionError, yaml.YAMLError):
            documents[spec.name] = None
    return documents


# --------------------------------------------------------------------------------------- field existence
FILE_ROLES = (
    "trace",
    "plan",
    "cluster",
    "config",
    "path",
    "--trace",
    "--plan",
    "--cluster",
    "--measured",
    "--analytic",
)


def names_input(field: str, argv: Sequence[str], case: Case, entry: str) -> bool:
    """Whether ``field`` (a ConfigError's field or a usage error's flag) exists in the input: a flag or argument
    of the command, or a path into one of its input documents (or into the ``--set`` overrides)."""
    field = field.strip()
    documents = {spec.name: None for spec in case.files}
    dests = command_fields(entry)
    head = re.split(r"[ .\[]", field, maxsplit=1)[0]
    if field in dests or head in dests or field in argv or field in documents:
        return True
    if any(field.startswith((name + ":", name + " ")) for name in documents):  # a line of a step log
        return True
    if head.startswith("-"):
        return head in argv or head.split("=")[0] in dests
    overrides = [
        item.partition("=")[0].strip() for flag, item in zip(argv, argv[1:], strict=False) if flag == "--set"
    ]
    if any(field == key or key.startswith(field + ".") or field.startswith(key) for key in overrides if key):
        return True
    parsed = read_documents(case)
    return any(_resolves(field, name, doc) for name, doc in parsed.items() if doc is not None)


def _resolves(field: str, name: str, doc: Any) -> bool:
    for prefix in (name, Path(name).stem, *FILE_ROLES, "measured", "workflow"):
        if field.startswith((prefix + ".", prefix + "[")):
            rest = field[len(prefix) :].removeprefix(".")
            if _walk(doc, rest) or (prefix in ("trace", "measured") and _walk(doc, "workflow." + rest)):
                return True
    return (
        _walk(doc, field) or _walk(doc.get("workflow"), field) if isinstance(doc, dict) else _walk(doc, field)
    )


def _walk(node: Any, rest: str) -> bool:
    """Whether the path ``rest`` (``a.b[2].c``; keys may hold dots) leads into ``node`` (its last key may be
    one the error reports missing)."""
    if not rest:
        return True
    if rest.startswith("["):
        end = rest.find("]")
        index = rest[1:end] if end > 0 else ""
        after = rest[end + 1 :].removeprefix(".")
        if isinstance(node, list) and index.isdigit() and int(index) < len(node):
            return _walk(node[int(index)], after)
        return False
    if isinstance(node, dict):
        for key in sorted((str(k) for k in node), key=len, reverse=True):
            if rest == key or rest.startswith(key + ".") or rest.startswith(key + "["):
                return _walk(
                    node[key] if key in node else _by_str(node, key), rest[len(key) :].removeprefix(".")
                )
        return "." not in rest and "[" not in rest  # a key the error says is missing from an existing section
    if isinstance(node, list):
        return any(str(item) == rest for item in node)
    return False


def _by_str(node: Mapping[Any, Any], key: str) -> Any:
    return next(value for k, value in node.items() if str(k) == key)


@functools.cache
def command_fields(entry: str) -> frozenset[str]:
    """The option strings and destinations of ``rlinf <entry>``'s parser, and its positional names."""
    parser = _parser()
    for word in entry.split():
        parser = _subparser(parser, word)
    fields = {"COMMAND", "SUBCOMMAND"}
    for action in parser._actions:
        fields.update(action.option_strings)
        fields.add(action.dest)
        if action.metavar:
            fields.add(str(action.metavar))
    return frozenset(fields)


def _subparser(parser: Any, name: str) -> Any:
    for action in parser._actions:
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict) and name in choices:
            return choices[name]
    raise KeyError(name)


# ----------------------------------------------------------------------------------------------- reporting
def table(tally: Tally) -> str:
    """The Markdown table of ``docs/reliability.md``."""
    rows = [
        "| entry point | cases | clean error | limit | accepted | traceback | slowest case |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for entry in ENTRY_POINTS:
        counts = tally.counts.get(entry, Counter())
        cells = [f"`rlinf {entry}`", str(tally.cases(entry)), *(str(counts[o]) for o in OUTCOMES)]
        rows.append("| " + " | ".join(cells) + f" | {tally.slowest.get(entry, 0.0):.2f} s |")
    total = Counter[str]()
    for counts in tally.counts.values():
        total.update(counts)
    rows.append(
        "| **all** | "
        + " | ".join([str(sum(total.values())), *(str(total[o]) for o in OUTCOMES)])
        + f" | {max(tally.slowest.values(), default=0.0):.2f} s |"
    )
    return "\n".join(rows)


def counts_of(markdown: str) -> dict[str, tuple[int, ...]]:
    """Entry point -> (cases, clean error, limit, accepted, traceback) as a table in ``markdown`` states them."""
    out = {}
    for match in re.finditer(
        r"^\| `rlinf ([a-z ]+)` \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|", markdown, re.M
    ):
        out[match.group(1)] = tuple(int(match.group(i)) for i in range(2, 7))
    return out


def tally_counts(tally: Tally) -> dict[str, tuple[int, ...]]:
    """The same numbers from a tally."""
    return {
        entry: (tally.cases(entry), *(tally.counts.get(entry, Counter())[o] for o in OUTCOMES))
        for entry in ENTRY_POINTS
        if tally.cases(entry)
    }


def document_file(name: str, kind: str, seed: Any) -> Callable[[st.DrawFn], FileSpec]:
    """A drawer of one mutated file of ``seed`` (see :func:`mutated_document`, :func:`file_bytes`)."""

    def draw_file(draw: st.DrawFn) -> FileSpec:
        special = draw(st.integers(0, 60))
        if special == 0:
            return FileSpec(name, special="missing")
        if special == 1:
            return FileSpec(name, special="dir")
        if special == 2:
            return FileSpec(
                name, special=draw(st.sampled_from(("/dev/zero", "/proc/self/status", "/dev/null")))
            )
        doc = draw(mutated_document(seed))
        return FileSpec(name, draw(file_bytes(doc, kind)))

    return draw_file
