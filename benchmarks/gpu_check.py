"""The GPU check: every GPU path of rlinf, run as a user runs it, in one command, with one JSON artifact.

On a machine with one CUDA GPU and no network, from the repository root (the wheels of what that machine lacks come
from ``bash ../shared/gpu/wheels.sh``, run beforehand on a machine with network, into the ignored ``.whl/``;
``benchmarks/gpu_window.sh`` does all of this and packs the results)::

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
      && PYTHONPATH=/tmp/site:$PWD python3 benchmarks/gpu_check.py [--deadline 470] [--only NAME ...] [--out FILE]

Each check runs in its own process session under its own time limit (and within what is left of ``--deadline``
seconds; a check that no longer fits is reported as skipped, not run), in the order of :data:`CHECKS`: what it
proves first. Every process of a check appends phase marks to a file (:mod:`rlinf.core.phases`), so a check cut at
its limit still records where its time went (``phases``), and a ``train`` check keeps the figures of the iterations
it finished (``partial_figures``); ``nvidia-smi`` samples the GPU's memory during ``train`` checks. The artifact
(default ``docs/data/gpu_check_<device>.json``) holds ``device``, ``provenance`` and ``checks``: one ``{name, ok,
seconds, figures | error, partial_figures, phases, skipped}`` per check, and is rewritten after every check (with
the running one marked) so a run cut short keeps what it measured. ``--merge A.json B.json`` joins the checks of
two partial runs on the same device (the later run wins) into ``--out``. ``--dry-run-cpu`` rehearses every command
on the CPU (``--quick``: scaled for the test suite). Without a GPU and without ``--dry-run-cpu`` it exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rlinf.core.phases import PHASES_ENV, durations, read_marks  # noqa: E402

PY = sys.executable
RLINF = [PY, "-m", "rlinf"]
WORK = ROOT / "runs" / "gpu_check"
HOPPER = ["examples/hopper_ppo.yaml", "--accelerator", "cuda", "--no-progress"]
HOPPER_WIDE = [*HOPPER, "--set", "num_envs=32", "--set", "num_epochs=4"]
"""Hopper with 32 environments (1,024 env steps per iteration): what CPU cores beside the GPU can share."""
GRPO = [
    "examples/grpo_hf.yaml",
    "--accelerator",
    "cuda",
    "--no-progress",
    "--set",
    "warm_start.num_steps=200",
]
"""The example's tiny model with a shorter warm start (200 of its 600 supervised steps: a check, not a study)."""
GRPO_05B = [
    "examples/grpo_hf.yaml",
    *("--accelerator", "cuda", "--no-progress"),
    *("--set", "model.config=qwen2.5-0.5b", "--set", "warm_start.num_steps=0"),
    *("--set", "grpo.prompts_per_iteration=16", "--set", "eval.enabled=false"),
]
"""GRPO on the Qwen2.5-0.5B shape, random weights (throughput, memory and context switching, not learning): no
warm start, no held-out evaluation; 16 prompts x 8 responses of up to 160 tokens per iteration."""
GRPO_05B_CPU = ["--devices", "1", "--set", "grpo.prompts_per_iteration=4", "--set", "grpo.group_size=2",
                "--set", "grpo.max_new_tokens=8", "--set", "grpo.micro_batch_size=4"]  # fmt: skip
"""The dry run's scaling of :data:`GRPO_05B` (with the tiny model): one core, 8 responses of 8 tokens. (The 0.5B
model itself on 2 CPU cores takes about 2 minutes an iteration at this size: the dry run would not fit the
suite.)"""


class CheckFailed(Exception):
    """A check ran and did not pass; ``partial`` holds what it measured before it failed (a run cut at its limit
    keeps its finished iterations)."""

    def __init__(self, message: str, partial: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.partial = partial or {}


DRY_RUN: list[bool] = [False]
"""``--dry-run-cpu``: every command on the CPU (no core pool; the tiny model for the presets, the 0.5B GRPO runs
scaled by :data:`GRPO_05B_CPU`): a rehearsal of this script's commands and plumbing on a machine
without a GPU, never a figure."""


QUICK: list[bool] = [False]
"""``--quick`` (with ``--dry-run-cpu``): the rehearsal scaled to fit the default test suite: profiles of
:data:`QUICK_PROFILE_S` seconds, at most 2 iterations, 2 plans per validate, the rollout benchmarks at 2 batches of
24 tokens, no pytest of the GPU tests (they are the suite's own)."""
QUICK_PROFILE_S = "15"
QUICK_VALUES = {"--profile-budget": lambda _: QUICK_PROFILE_S, "--iterations": lambda v: str(min(int(v), 2)),
                "--plans": lambda _: "2", "--new-tokens": lambda _: "24"}  # fmt: skip


def on_cpu(command: list[str]) -> list[str]:
    """``command`` as the CPU dry run runs it (scaled further with :data:`QUICK`)."""
    out: list[str] = []
    names = {"cuda": "cpu", "qwen2.5-0.5b": "tiny", "qwen2.5-1.5b": "tiny",
             "model.config=qwen2.5-0.5b": "model.config=tiny"}  # fmt: skip
    index = 0
    while index < len(command):
        item = command[index]
        index += 1
        if item == "--cpu-devices":
            index += 1
        elif QUICK[0] and item in QUICK_VALUES:
            out += [item, QUICK_VALUES[item](command[index])]
            index += 1
        elif QUICK[0] and item == "--batches":
            values = list(itertools.takewhile(str.isdigit, command[index:]))
            out += [item, *values[:2]]
            index += len(values)
        else:
            out.append(names.get(item, item))
    if "model.config=qwen2.5-0.5b" in command:
        out += GRPO_05B_CPU
    if any(part.endswith("bench_rollout.py") for part in out):
        out += ["--device", "cpu"]
    return out


def stop(process: subprocess.Popen[Any]) -> None:
    """End ``process`` and everything it started (its own session: the driver, the fork server, the workers):
    SIGTERM, then SIGKILL after 5 s."""
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # the workers may outlive the driver


def run(command: list[str], limit_s: float, name: str) -> str:
    """Run ``command`` in the repository root within ``limit_s`` seconds, its output written to the work folder
    as it comes (a check cut at its limit keeps it); returns the output. Raises :class:`CheckFailed` on a non-zero
    exit or a timeout, after ending every process the command started."""
    if DRY_RUN[0]:
        command = on_cpu(command)
    log = WORK / f"{name}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
    with log.open("w") as stream:
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=stream, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            code = process.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            stop(process)
            raise CheckFailed(f"timed out after {limit_s:.0f} s: {shlex.join(command)}") from None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # nothing of a finished command lingers either
    text = log.read_text(errors="replace")
    if code != 0:
        lines = [line for line in text.strip().splitlines() if line.strip()] or [""]
        raise CheckFailed(f"exit {code}: {lines[-1][:400]}")
    return text


class MemoryWatch:
    """The GPU's used memory (every process on it) sampled by ``nvidia-smi`` every 200 ms while a check runs:
    its peak against the GPU's capacity. Nothing without ``nvidia-smi`` (the dry run)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.process: subprocess.Popen[Any] | None = None

    def __enter__(self) -> MemoryWatch:
        if shutil.which("nvidia-smi") and not DRY_RUN[0]:
            query = ["--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits", "-lms", "200"]
            with self.path.open("w") as stream:
                self.process = subprocess.Popen(
                    ["nvidia-smi", *query], stdout=stream, stderr=subprocess.DEVNULL
                )
        return self

    def __exit__(self, *_: object) -> None:
        if self.process is not None:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)

    def figures(self) -> dict[str, Any]:
        """``peak_gpu_memory_bytes`` and ``gpu_memory_bytes`` (MiB as nvidia-smi reports them, in bytes)."""
        rows = []
        for line in self.path.read_text().splitlines() if self.path.is_file() else []:
            with contextlib.suppress(ValueError):
                used, total = (int(part) for part in line.split(","))
                rows.append((used, total))
        if not rows:
            return {}
        return {
            "peak_gpu_memory_bytes": max(u for u, _ in rows) * 2**20,
            "gpu_memory_bytes": rows[0][1] * 2**20,
            "gpu_memory_samples": len(rows),
        }


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]


def timing(rows: list[dict[str, Any]], rate: str) -> dict[str, Any]:
    """Median measured (and predicted, in auto mode) iteration time and rate over the iterations after the first,
    and the first's (worker warm-up: allocator, kernels) on its own."""
    kept = rows[1:] or rows
    out: dict[str, Any] = {
        "iterations": len(rows),
        "first_iteration_s": rows[0]["iteration_s"],
        "median_iteration_s": statistics.median(r["iteration_s"] for r in kept),
        f"median_{rate}": statistics.median(r[rate] for r in kept if rate in r),
    }
    if "predicted_iteration_s" in kept[0]:
        out["predicted_iteration_s"] = kept[0]["predicted_iteration_s"]
        out["measured_over_predicted"] = out["median_iteration_s"] / out["predicted_iteration_s"]
    return out


def train(name: str, args: list[str], limit_s: float, rate: str) -> dict[str, Any]:
    out = WORK / name
    with MemoryWatch(WORK / f"{name}.memory.csv") as memory:
        try:
            text = run([*RLINF, "train", *args, "--out", str(out)], limit_s, name)
        except CheckFailed as error:
            done = metrics(out) if (out / "metrics.jsonl").is_file() else []
            partial = {**timing(done, rate), **memory.figures()} if done else memory.figures()
            raise CheckFailed(str(error), partial) from None
    figures = timing(metrics(out), rate)
    chose = [line for line in text.splitlines() if line.startswith("auto: chose")]
    if chose:
        figures["chosen"] = chose[0].removeprefix("auto: chose ")
    figures["plan"] = (out / "plan.yaml").read_text()
    last = metrics(out)[-1]
    for key in ("heldout_accuracy", "mean_reward", "episodic_return", "tokens", "rollout_busy_s", "actor_busy_s",
                "inference_busy_s", "reward_busy_s", "executor_overhead_s"):  # fmt: skip
        if key in last:
            figures[key] = last[key]
    figures.update(memory.figures())
    return figures


# ------------------------------------------------------------------------------------------------ the checks
def gpu_tests(limit_s: float) -> dict[str, Any]:
    if QUICK[0]:
        return {"dry_run": "skipped: the GPU tests are the test suite's own (they skip there without a GPU)"}
    files = ["tests/test_accelerator.py", "tests/test_hf_backends.py", "tests/test_offload.py"]
    files.append("tests/test_failure_exit.py")
    command = [PY, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-rs", "-q", "-n", "4", *files]
    text = run(command, limit_s, "gpu_tests")
    summary = [line for line in text.splitlines() if " passed" in line or " skipped" in line][-1]
    skipped = [line.split("] ", 1)[-1] for line in text.splitlines() if line.startswith("SKIPPED")]
    return {"summary": summary.strip("= "), "skipped": skipped}


def offload_bench(limit_s: float) -> dict[str, Any]:
    if DRY_RUN[0]:
        return {"dry_run": "skipped: bench_offload measures pinned host <-> GPU copies, which need a GPU"}
    text = run([PY, "benchmarks/bench_offload.py", "--mib", "1024"], limit_s, "offload_bench")
    return json.loads(text.strip().splitlines()[-1])


ROLLOUT_BATCHES = ["1", "8", "32", "64", "128", "256"]


def rollout_throughput(limit_s: float) -> dict[str, Any]:
    """The 0.5B preset's rollout at batch 1-256 (both engines; the rlinf rows are also its decode-step costs),
    the GPU's busy fraction at the largest batch (kernel time over wall time, torch's profiler): what separates
    a host-bound engine from slow kernels. Rows are kept as they come: a run cut at its limit keeps its rows."""
    out = WORK / "rollout.json"
    command = [PY, "benchmarks/bench_rollout.py", "--preset", "qwen2.5-0.5b", "--batches", *ROLLOUT_BATCHES]
    command += ["--new-tokens", "128", "--repeats", "1", "--busy-fraction", "--json", str(out)]
    try:
        run(command, limit_s, "rollout_throughput")
    except CheckFailed:
        if out.is_file():  # what it measured before the cut, for the record
            (WORK / "rollout_partial.json").write_text(out.read_text())
        raise
    return json.loads(out.read_text())


def decode_steps(limit_s: float) -> dict[str, Any]:
    """rlinf's decode step on the 1.5B preset at batch 1-256 with ~100 tokens of context, and on both presets at
    small batches with ~8,000 (the per-step engine cost the analytic model needs, ``rlinf/analytic/engine_costs.py``)."""
    runs = {  # the 0.5B at ~100 tokens of context is rollout_throughput's
        "1.5b-short": ("qwen2.5-1.5b", "64", ["1", "8", "64", "256"]),
        "0.5b-long": ("qwen2.5-0.5b", "8000", ["1", "8", "32"]),
        "1.5b-long": ("qwen2.5-1.5b", "8000", ["1", "8"]),
    }
    if DRY_RUN[0]:
        runs = {label: (preset, "64", batches[:2]) for label, (preset, _, batches) in runs.items()}
    started, out = time.monotonic(), {}
    for label, (preset, prompt, batches) in runs.items():
        path = WORK / f"decode_{label}.json"
        command = [PY, "benchmarks/bench_rollout.py", "--preset", preset, "--prompt-tokens", prompt]
        command += ["--engines", "rlinf", "--batches", *batches, "--new-tokens", "64", "--repeats", "1"]
        run(
            [*command, "--json", str(path)],
            max(5.0, limit_s - (time.monotonic() - started)),
            f"decode_{label}",
        )
        out[label] = json.loads(path.read_text())
    return out


def hopper_collocated_offload(limit_s: float) -> dict[str, Any]:
    args = [
        *HOPPER,
        "--cpu-devices",
        "0",
        "--mode",
        "collocated",
        "--set",
        "execution.offload=[rollout, actor]",
    ]
    return train("hopper_collocated_offload", [*args, "--iterations", "5"], limit_s, "env_steps_per_s")


def hopper_auto_gpu_only(limit_s: float) -> dict[str, Any]:
    args = [
        *HOPPER_WIDE,
        "--cpu-devices",
        "0",
        "--mode",
        "auto",
        "--profile-budget",
        "25",
        "--iterations",
        "6",
    ]
    return train("hopper_auto_gpu_only", args, limit_s, "env_steps_per_s")


def hopper_auto_cpu_cores(limit_s: float) -> dict[str, Any]:
    args = [*HOPPER_WIDE, "--mode", "auto", "--profile-budget", "25", "--iterations", "6"]
    return train("hopper_auto_cpu_cores", args, limit_s, "env_steps_per_s")


def grpo_tiny_collocated_offload(limit_s: float) -> dict[str, Any]:
    args = [*GRPO, "--mode", "collocated", "--set", "execution.offload=[rollout, actor]", "--iterations", "2"]
    return train("grpo_tiny_collocated_offload", args, limit_s, "tokens_per_s")


def grpo_05b_collocated_offload(limit_s: float) -> dict[str, Any]:
    args = [*GRPO_05B, "--mode", "collocated", "--set", "execution.offload=[rollout, actor]"]
    return train("grpo_05b_collocated_offload", [*args, "--iterations", "4"], limit_s, "tokens_per_s")


def grpo_05b_auto(limit_s: float) -> dict[str, Any]:
    args = [
        *GRPO_05B,
        "--mode",
        "auto",
        "--profile-budget",
        "75",
        "--profile-iterations",
        "1",
        "--iterations",
        "3",
    ]
    return train("grpo_05b_auto", args, limit_s, "tokens_per_s")


def validate(name: str, config: list[str], limit_s: float, extra: list[str]) -> dict[str, Any]:
    out = WORK / name
    command = [*RLINF, "validate", *config, "--json", "--out", str(out), *extra]
    text = run(command, limit_s, name)
    report, _ = json.JSONDecoder().raw_decode(text[text.index("{") :])
    keep = ("median_error", "max_error", "top1_match", "kendall_tau", "within_turn_range")
    figures = {key: report[key] for key in keep if key in report}
    figures["plans"] = [
        {k: p[k] for k in ("name", "source", "predicted_s", "measured_s", "error") if k in p}
        for p in report["plans"]
    ]
    # The signed error: measured / predicted - 1 at the median over plans (> 0: predictions are fast).
    figures["bias"] = statistics.median(p["measured_s"] / p["predicted_s"] - 1 for p in report["plans"])
    figures["breakdown"] = report.get("breakdown")
    return figures


def validate_hopper(limit_s: float) -> dict[str, Any]:
    extra = ["--plans", "4", "--iterations", "4", "--warmup", "1", "--profile-budget", "25"]
    return validate("validate_hopper", HOPPER_WIDE, limit_s, extra)


def validate_grpo(limit_s: float) -> dict[str, Any]:
    """``rlinf validate`` of the 0.5B GRPO (the config of :func:`grpo_05b_collocated_offload`): 4 plans, each
    predicted from a profile without its own samples, then measured."""
    extra = ["--plans", "4", "--iterations", "1", "--warmup", "1", "--profile-budget", "75"]
    extra += [
        "--profile-iterations",
        "1",
    ]  # more probe plans in the budget: each plan's prediction needs others
    return validate("validate_grpo", GRPO_05B, limit_s, extra)


def grpo_05b_predicted(limit_s: float) -> dict[str, Any]:
    """The collocated-with-offload run's plan predicted from validate's profile (another run: out of sample),
    against what the run measured."""
    trace, ran = WORK / "validate_grpo" / "trace.json", WORK / "grpo_05b_collocated_offload"
    if not trace.is_file() or not (ran / "metrics.jsonl").is_file():
        raise CheckFailed("needs validate_grpo's trace and grpo_05b_collocated_offload's run")
    command = [*RLINF, "simulate", "--trace", str(trace), "--plan", str(ran / "plan.yaml"), "--json"]
    text = run(command, limit_s, "grpo_05b_predicted")
    predicted = json.loads(text[text.index("{") :])["iteration_s"]
    measured = timing(metrics(ran), "tokens_per_s")["median_iteration_s"]
    return {"predicted_iteration_s": predicted, "median_iteration_s": measured,
            "measured_over_predicted": measured / predicted, "predicted_from": str(trace.relative_to(ROOT))}  # fmt: skip


CHECKS: tuple[tuple[str, float, Callable[[float], dict[str, Any]]], ...] = (
    ("grpo_05b_collocated_offload", 150, grpo_05b_collocated_offload),
    ("rollout_throughput", 120, rollout_throughput),
    ("validate_grpo", 200, validate_grpo),
    ("grpo_05b_predicted", 30, grpo_05b_predicted),
    ("hopper_auto_cpu_cores", 75, hopper_auto_cpu_cores),
    ("decode_steps", 120, decode_steps),
    ("hopper_auto_gpu_only", 75, hopper_auto_gpu_only),
    ("gpu_tests", 120, gpu_tests),
    ("offload_bench", 40, offload_bench),
    ("grpo_tiny_collocated_offload", 120, grpo_tiny_collocated_offload),
    ("hopper_collocated_offload", 60, hopper_collocated_offload),
    ("validate_hopper", 120, validate_hopper),
    ("grpo_05b_auto", 150, grpo_05b_auto),
)
"""(name, time limit in seconds, check), in the order of what they prove (issue 46): GRPO on the 0.5B preset,
its rollout against ``generate`` and the roofline, validate, Hopper with CPU cores (and on the GPU alone, for the
ratio), decode-step costs; then the checks that passed in an earlier window. A check that no longer fits the
deadline is skipped."""
MIN_START_S = 30.0
"""A check is started only with at least this much of the deadline left."""


def provenance() -> dict[str, Any]:
    import torch

    def git(*args: str) -> str:
        found = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return found.stdout.strip() or "unknown (no git here: the tree was copied)"

    return {
        "command": shlex.join([PY, *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "commit": os.environ.get("RLINF_COMMIT") or git("rev-parse", "--short", "HEAD"),
        "machine": platform.node(),
        "cpu_cores": os.cpu_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": __import__("transformers").__version__,
        "python": platform.python_version(),
    }


def device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0)


def short_name(device: str) -> str:
    """``h100``, ``h200``, ``a100`` or the name in lower case, for the artifact's file name."""
    return next(
        (k.lower() for k in ("H200", "H100", "A100") if k in device.upper()), device.lower().replace(" ", "_")
    )


def check_all(
    names: list[str] | None, deadline_s: float, save: Callable[[list[dict[str, Any]]], None] = lambda _: None
) -> list[dict[str, Any]]:
    """Run the checks (``names``, or all) in order within ``deadline_s``; ``save`` gets the results after each."""
    started = time.monotonic()
    results = []
    for name, limit_s, check in CHECKS:
        if names and name not in names:
            continue
        left = deadline_s - (time.monotonic() - started)
        entry: dict[str, Any] = {"name": name, "limit_s": limit_s}
        if left < MIN_START_S:
            entry.update(
                ok=False, skipped=f"out of time: {left:.0f} s of the {deadline_s:.0f} s deadline left"
            )
            results.append(entry)
            print(f"gpu_check: {name}: skipped ({entry['skipped']})", flush=True)
            continue
        phases = WORK / f"{name}.phases.jsonl"
        phases.unlink(missing_ok=True)
        os.environ[PHASES_ENV] = str(phases)  # the check's commands and their workers mark their phases there
        save([*results, {**entry, "ok": False, "running": True}])  # if this script is cut, it says where
        begin, begin_wall = time.monotonic(), time.time()
        try:
            entry["figures"] = check(min(limit_s, left))
            entry["ok"] = True
        except (CheckFailed, KeyError, ValueError, IndexError, OSError) as error:
            entry.update(ok=False, error=f"{type(error).__name__}: {error}")
            if isinstance(error, CheckFailed) and error.partial:
                entry["partial_figures"] = error.partial
        finally:
            os.environ.pop(PHASES_ENV, None)
        entry["seconds"] = round(time.monotonic() - begin, 1)
        entry["phases"] = durations(read_marks(phases), begin_wall, time.time())
        results.append(entry)
        save(results)
        print(f"gpu_check: {name}: {'ok' if entry['ok'] else 'FAILED ' + entry['error']} ({entry['seconds']} s)",
              flush=True)  # fmt: skip
        print(
            "gpu_check:   phases: " + ", ".join(f"{p['phase']} +{p['took_s']}" for p in entry["phases"]),
            flush=True,
        )
    return results


def summarise(checks: list[dict[str, Any]]) -> dict[str, Any]:
    """Cross-check figures: Hopper with CPU cores for the environments against the GPU alone (same config)."""
    by_name = {c["name"]: c for c in checks if c.get("ok")}
    out: dict[str, Any] = {}
    if "hopper_auto_gpu_only" in by_name and "hopper_auto_cpu_cores" in by_name:
        alone = by_name["hopper_auto_gpu_only"]["figures"]["median_env_steps_per_s"]
        cores = by_name["hopper_auto_cpu_cores"]["figures"]["median_env_steps_per_s"]
        out["hopper_cores_over_gpu_alone"] = cores / alone
    return out


def merge(paths: list[str]) -> dict[str, Any]:
    documents = [json.loads(Path(p).read_text()) for p in paths]
    devices = {d["device"] for d in documents}
    if len(devices) != 1:
        raise SystemExit(f"gpu_check: --merge needs runs on one device, got {sorted(devices)}")
    checks: dict[str, dict[str, Any]] = {}
    for document in documents:
        for check in document["checks"]:
            entry = {**check, "run": document["provenance"]["date"]}
            earlier = checks.get(check["name"])
            if earlier is None:
                checks[check["name"]] = entry
            elif not check.get("skipped"):  # the later attempt wins; the earlier one is kept beside it
                previous = [*earlier.pop("earlier", []), earlier]
                checks[check["name"]] = {**entry, "earlier": previous}
    order = [name for name, _, _ in CHECKS]
    merged = sorted(
        checks.values(), key=lambda c: order.index(c["name"]) if c["name"] in order else len(order)
    )
    return {
        "device": documents[0]["device"],
        "provenance": [d["provenance"] for d in documents],
        "checks": merged,
        "summary": summarise(merged),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deadline", type=float, default=450.0, help="seconds for every check together")
    parser.add_argument("--only", nargs="+", choices=[name for name, _, _ in CHECKS], help="run only these")
    parser.add_argument("--out", help="artifact path (default docs/data/gpu_check_<device>.json)")
    parser.add_argument("--merge", nargs="+", metavar="JSON", help="join partial runs' artifacts into --out")
    parser.add_argument("--dry-run-cpu", action="store_true", help="run the plumbing on the CPU (no figures)")
    parser.add_argument(
        "--quick", action="store_true", help="with --dry-run-cpu: scaled to fit the test suite (see QUICK)"
    )
    args = parser.parse_args(argv)
    DRY_RUN[0] = args.dry_run_cpu
    if args.quick and not args.dry_run_cpu:
        parser.error("--quick scales the CPU dry run: give --dry-run-cpu too")
    QUICK[0] = args.quick
    if args.merge:
        document = merge(args.merge)
        out = Path(args.out or ROOT / "docs" / "data" / f"gpu_check_{short_name(document['device'])}.json")
        out.write_text(json.dumps(document, indent=1) + "\n")
        print(f"gpu_check: merged {len(args.merge)} runs into {out}")
        return 0
    import torch

    if not torch.cuda.is_available() and not args.dry_run_cpu:
        print("gpu_check: no CUDA GPU is visible; the GPU check runs on a machine with one", file=sys.stderr)
        return 2
    if args.dry_run_cpu and not args.out:
        parser.error("--dry-run-cpu writes no artifact to docs/: give --out")
    WORK.mkdir(parents=True, exist_ok=True)
    device = "cpu (dry run)" if args.dry_run_cpu else device_name()
    out = Path(args.out or ROOT / "docs" / "data" / f"gpu_check_{short_name(device)}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    origin = provenance()

    def save(
        checks: list[dict[str, Any]],
    ) -> None:  # after every check: a run cut short keeps what it measured
        document = {"device": device, "provenance": origin, "checks": checks, "summary": summarise(checks)}
        out.write_text(json.dumps(document, indent=1) + "\n")

    checks = check_all(args.only, args.deadline, save)
    save(checks)
    failed = [c["name"] for c in checks if not c.get("ok")]
    print(f"gpu_check: {len(checks) - len(failed)} of {len(checks)} checks passed; wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
