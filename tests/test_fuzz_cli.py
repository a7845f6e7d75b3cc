"""Property-based fuzzing of every CLI entry point (issue 15): mutated shipped traces, plans, cluster specs, configs,
step logs and command lines must end in exit 0 or in exit 2 with one line naming a field of the input; never a
traceback; within a bounded time and memory. The harness and the checks are in ``tests/fuzzing.py``; the outcome
counts are ``docs/reliability.md``'s table (``python benchmarks/reliability_table.py`` regenerates it, and the last
test here checks that it matches this run).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import yaml
from fuzzing import (
    CASES_PER_ENTRY,
    CLUSTER_DOCS,
    CLUSTER_SPECS,
    CONFIGS,
    CPU_PLANS,
    ENTRY_POINTS,
    EXAMPLE_PLANS,
    ODD_CLUSTER_SPECS,
    OUT_VARIANTS,
    REPO,
    RLINF_CSV,
    TALLY,
    TRACES,
    VERL_LOG,
    Case,
    FileSpec,
    counts_of,
    document_file,
    mutated_argv,
    out_path,
    run_case,
    tally_counts,
)
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

FUZZ = settings(
    max_examples=CASES_PER_ENTRY,
    deadline=None,
    derandomize=not os.environ.get(
        "RLINF_FUZZ_RANDOM"
    ),  # RLINF_FUZZ_RANDOM=1: new cases each run, to explore
    database=None,
    phases=(Phase.explicit, Phase.generate, Phase.shrink),
    suppress_health_check=list(HealthCheck),
)
"""Derandomized: (nearly) the same cases every run, so ``docs/reliability.md``'s counts are reproducible (see
:func:`test_reliability_table_matches_this_run` for the "nearly")."""


@pytest.fixture(autouse=True)
def _same_draws_in_every_session(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Hypothesis mixes the literals of every loaded local module (rlinf's, the tests') into what it draws, so the
    derandomized cases depended on what a session had imported before: the whole suite drew other validate cases
    than this file alone (398 / 24 / 78 against 372 / 22 / 106 outcomes, reproduced by importing rlinf's modules
    first). Pinning that pool to empty (and dropping what was cached from it) makes the cases the same in every
    session. A private Hypothesis function: with a version without it, nothing is pinned, and
    :func:`test_reliability_table_matches_this_run` then compares only the case counts."""
    from hypothesis.internal.conjecture import providers

    if not hasattr(providers, "_get_local_constants") or not hasattr(providers, "CONSTANTS_CACHE"):
        yield
        return
    providers.CONSTANTS_CACHE.cache.clear()
    monkeypatch.setattr(providers, "_get_local_constants", providers.Constants)
    yield
    providers.CONSTANTS_CACHE.cache.clear()


SERIALIZED: dict[tuple[str, str], bytes] = {}


def plain(name: str, kind: str, seed: Any) -> FileSpec:
    """``seed`` written unchanged (serialized once per seed)."""
    key = (name + kind, str(id(seed)))
    if key not in SERIALIZED:
        text = json.dumps(seed) if kind == "json" else yaml.safe_dump(seed, sort_keys=False)
        SERIALIZED[key] = text.encode()
    return FileSpec(name, SERIALIZED[key])


def maybe_mutated(draw: st.DrawFn, mutate: bool, name: str, kind: str, seed: Any) -> FileSpec:
    return document_file(name, kind, seed)(draw) if mutate else plain(name, kind, seed)


def with_out(
    draw: st.DrawFn, pairs: list[tuple[str, str | None]], files: list[FileSpec], default: str
) -> None:
    """Add ``--out``: usually ``default`` (a fresh path in the case folder), sometimes an awkward one."""
    variant = draw(st.sampled_from(OUT_VARIANTS))
    value, needed = out_path(variant) if variant != "fresh" else (default, ())
    pairs.append(("--out", value))
    files.extend(needed)


def finish(draw: st.DrawFn, pairs: list[tuple[str, str | None]], files: list[FileSpec], mutate_args: bool,
           extra: tuple[str, ...], head: tuple[str, ...] = ()) -> Case:  # fmt: skip
    argv = draw(mutated_argv(pairs, extra)) if mutate_args else [a for p in pairs for a in p if a is not None]
    return Case(argv=(*head, *argv), files=tuple(files))


# ---------------------------------------------------------------------------------------------- simulate, plan
@st.composite
def simulate_cases(draw: st.DrawFn) -> Case:
    trace_name = draw(st.sampled_from(sorted(TRACES)))
    plans = CPU_PLANS.get(trace_name) or list(EXAMPLE_PLANS.values())
    plan = draw(st.sampled_from(plans))
    target = draw(st.sampled_from(("trace", "trace", "plan", "plan", "cluster", "args")))
    files = [
        maybe_mutated(draw, target == "trace", "trace.json", "json", TRACES[trace_name]),
        maybe_mutated(draw, target == "plan", "plan.yaml", "yaml", plan),
    ]
    pairs: list[tuple[str, str | None]] = [("--trace", "{trace.json}"), ("--plan", "{plan.yaml}")]
    if target == "cluster" or draw(st.integers(0, 5)) == 0:
        if trace_name in CPU_PLANS or draw(st.booleans()):
            pairs.append(("--cluster", draw(st.sampled_from(CLUSTER_SPECS + ODD_CLUSTER_SPECS))))
        else:
            seed = CLUSTER_DOCS[draw(st.sampled_from(sorted(CLUSTER_DOCS)))]
            files.append(maybe_mutated(draw, target == "cluster", "cluster.yaml", "yaml", seed))
            pairs.append(("--cluster", "{cluster.yaml}"))
    if draw(st.booleans()):
        pairs.append(("--seed", draw(st.sampled_from(("0", "7", "4294967295")))))
        pairs.append(("--stochastic", None))
    pairs.append(("--json", None))
    if draw(st.integers(0, 15)) == 0:  # the PNG export is slow: a few cases only
        with_out(draw, pairs, files, "{dir}/out")
    return finish(draw, pairs, files, target == "args", ("--seed", "--cluster", "--out"), ("simulate",))


@st.composite
def plan_cases(draw: st.DrawFn) -> Case:
    trace_name = draw(st.sampled_from(sorted(TRACES)))
    target = draw(st.sampled_from(("trace", "trace", "args", "args", "cluster")))
    files = [maybe_mutated(draw, target == "trace", "trace.json", "json", TRACES[trace_name])]
    pairs: list[tuple[str, str | None]] = [("--trace", "{trace.json}"), ("--top", "4"), ("--time-limit", "1")]
    if target == "cluster":
        if draw(st.booleans()):
            pairs.append(("--cluster", draw(st.sampled_from(CLUSTER_SPECS + ODD_CLUSTER_SPECS))))
        else:
            seed = CLUSTER_DOCS[draw(st.sampled_from(sorted(CLUSTER_DOCS)))]
            files.append(maybe_mutated(draw, True, "cluster.yaml", "yaml", seed))
            pairs.append(("--cluster", "{cluster.yaml}"))
    pairs += [("--seed", "0"), ("--max-granularity", "32"), ("--json", None)]
    with_out(draw, pairs, files, "{dir}/plan.yaml")
    extra = ("--top", "--time-limit", "--seed", "--max-granularity", "--cluster", "--out")
    return finish(draw, pairs, files, target == "args", extra, ("plan",))


# ------------------------------------------------------------------------------------------------------ trace
@st.composite
def trace_show_cases(draw: st.DrawFn) -> Case:
    trace_name = draw(st.sampled_from(sorted(TRACES)))
    files = [maybe_mutated(draw, True, "trace.json", "json", TRACES[trace_name])]
    argv = ["trace", "show", "{trace.json}"]
    if draw(st.integers(0, 20)) == 0:
        argv += draw(st.sampled_from((["--json"], ["{trace.json}"], [])))
    return Case(argv=tuple(argv), files=tuple(files))


MODEL_FLAGS: tuple[tuple[tuple[str, str], ...], ...] = (
    (("--model", "1.5b"),),
    (("--model", "7b"), ("--actor-mp", "2")),
    (("--model", "32b"), ("--num-devices", "64"), ("--rollout-mp", "4"), ("--inference-mp", "4"), ("--actor-mp", "8")),
    (("--params", "1e9"), ("--layers", "24"), ("--hidden-size", "2048"), ("--heads", "16"), ("--kv-heads", "4")),
)  # fmt: skip
WORKLOAD_FLAGS = (
    "--model", "--params", "--layers", "--hidden-size", "--heads", "--kv-heads", "--device", "--num-devices",
    "--prompts", "--group-size", "--prompt-tokens", "--response-median", "--response-sigma", "--response-max",
    "--algorithm", "--rollout-mp", "--inference-mp", "--actor-mp", "--prefill-mfu", "--decode-mbu", "--train-mfu",
    "--op-overhead-s", "--reward-seconds-per-sample", "--weight-bytes-per-param", "--kv-cache-fraction",
)  # fmt: skip


def workload_pairs(draw: st.DrawFn) -> list[tuple[str, str | None]]:
    """A small valid workload description (a case runs in milliseconds)."""
    pairs: list[tuple[str, str | None]] = list(draw(st.sampled_from(MODEL_FLAGS)))
    flags = {flag for flag, _ in pairs}
    for flag, value in (
        ("--num-devices", "8"),
        ("--prompts", "8"),
        ("--group-size", "4"),
        ("--device", "H100"),
    ):
        if flag not in flags:
            pairs.append((flag, value))
    return pairs


@st.composite
def trace_synth_cases(draw: st.DrawFn) -> Case:
    pairs = workload_pairs(draw)
    files: list[FileSpec] = []
    if draw(st.booleans()):
        pairs.append(("--seed", draw(st.sampled_from(("0", "3")))))
    with_out(draw, pairs, files, "{dir}/synth.json")
    return finish(
        draw, pairs, files, True, (*WORKLOAD_FLAGS, "--seed", "--date", "--out"), ("trace", "synth")
    )


ARITH_FLAGS: tuple[tuple[str, str], ...] = (  # the model of traces/grpo_arith_cpu2.json (examples/grpo_arith.yaml)
    ("--params", "161856"), ("--layers", "2"), ("--hidden-size", "64"), ("--heads", "4"), ("--kv-heads", "2"),
    ("--device", "CPU"), ("--num-devices", "2"), ("--prompts", "32"), ("--group-size", "8"),
    ("--prompt-tokens", "8"), ("--response-median", "4"), ("--response-sigma", "0.1"), ("--response-max", "6"),
    ("--rollout-mp", "1"), ("--inference-mp", "1"), ("--actor-mp", "1"), ("--weight-bytes-per-param", "4"),
    ("--kv-cache-fraction", "0.00001"),
)  # fmt: skip


@st.composite
def trace_calibrate_cases(draw: st.DrawFn) -> Case:
    prior = draw(st.sampled_from(("flags", "analytic", "recorded")))
    target = draw(st.sampled_from(("measured", "args", "analytic")))
    files: list[FileSpec] = []
    if prior == "flags":
        measured = TRACES["grpo_arith_cpu2"]
        pairs: list[tuple[str, str | None]] = [("--measured", "{measured.json}"), *ARITH_FLAGS]
    else:
        measured = TRACES[draw(st.sampled_from(("grpo_7b_h100", "grpo_1.5b_h100")))]
        pairs = [("--measured", "{measured.json}")]
        if prior == "analytic":
            pairs.append(("--analytic", "{analytic.json}"))
            files.append(maybe_mutated(draw, target == "analytic", "analytic.json", "json", measured))
    files.append(maybe_mutated(draw, target == "measured", "measured.json", "json", measured))
    pairs += [("--holdout", "0.25"), ("--split-seed", "0")]
    with_out(draw, pairs, files, "{dir}/calibrated.json")
    extra = (*WORKLOAD_FLAGS, "--seed", "--split-seed", "--holdout", "--analytic", "--out")
    return finish(draw, pairs, files, target == "args", extra, ("trace", "calibrate"))


@st.composite
def trace_import_cases(draw: st.DrawFn) -> Case:
    system = draw(st.sampled_from(("verl", "rlinf")))
    name, kind, seed = ("run.jsonl", "jsonl", VERL_LOG) if system == "verl" else ("run.csv", "csv", RLINF_CSV)
    target = draw(st.sampled_from(("log", "log", "args")))
    files = [maybe_mutated_log(draw, target == "log", name, kind, seed)]
    pairs: list[tuple[str, str | None]] = [
        ("--format", system),
        ("--model", "1.5b"),
        ("--device", "H100"),
        ("--num-devices", "8"),
        ("--prompts", "16"),
        ("--group-size", "4"),
    ]
    if draw(st.integers(0, 3)) == 0:
        pairs.append(("--skip-steps", draw(st.sampled_from(("0", "1")))))
    if draw(st.integers(0, 3)) == 0:
        pairs.append(("--component-devices", draw(st.sampled_from(("rollout=4,actor=4", "reward=8", "x=1")))))
    with_out(draw, pairs, files, "{dir}/imported.json")
    extra = (*WORKLOAD_FLAGS, "--skip-steps", "--component-devices", "--input-format", "--format", "--out")
    return finish(draw, pairs, files, target == "args", extra, ("trace", "import", "{" + name + "}"))


def maybe_mutated_log(draw: st.DrawFn, mutate: bool, name: str, kind: str, seed: Any) -> FileSpec:
    if not mutate:
        text = (
            "".join(json.dumps(line) + "\n" for line in seed)
            if kind == "jsonl"
            else "".join(",".join(row) + "\n" for row in seed)
        )
        return FileSpec(name, text.encode())
    return document_file(name, kind, seed)(draw)


# ---------------------------------------------------------------------------------------------------- capacity
WHATIFS = (
    "trace.batch_scale=2", "trace.response_length_scale=1.5", "trace.group_size=4", "trace.device=H200",
    "trace.batch_scale=0.3", "trace.response_length_scale=1e300", "trace.group_size=99999999999", "trace.colour=1",
    "trace.device=TPU", "batch_scale=2,batch_scale=3", "", ",", "trace.group_size=",
)  # fmt: skip
DEVICE_LISTS = ("8,16", "8,16,...,64", "8", "2", "1,2", "8,16,...,1024", "8,9,...,100000000", "16,8", "8,8")


@st.composite
def capacity_cases(draw: st.DrawFn) -> Case:
    trace_name = draw(st.sampled_from(sorted(TRACES)))
    target = draw(st.sampled_from(("trace", "trace", "args", "args")))
    files = [maybe_mutated(draw, target == "trace", "trace.json", "json", TRACES[trace_name])]
    devices = "2" if trace_name in CPU_PLANS else "8,16"
    pairs: list[tuple[str, str | None]] = [("--trace", "{trace.json}"), ("--devices", devices)]
    if draw(st.integers(0, 3)) == 0:
        pairs.append(("--set", draw(st.sampled_from(WHATIFS))))
    if draw(st.integers(0, 2)) == 0:
        pairs.append(draw(st.sampled_from((("--deadline-s", "150"), ("--target-throughput", "10")))))
        pairs.append(("--price-per-device-hour", "2.5"))
    pairs += [
        ("--modes", draw(st.sampled_from(("best,collocated", "collocated", "best")))),
        ("--quiet", None),
    ]
    with_out(draw, pairs, files, "{dir}/report")
    extra = ("--devices", "--set", "--modes", "--search-time-s", "--jobs", "--seed", "--deadline-s",
             "--target-throughput", "--price-per-device-hour")  # fmt: skip
    if target == "args" and draw(st.integers(0, 2)) == 0:
        pairs.append(("--devices", draw(st.sampled_from(DEVICE_LISTS))))
    return finish(draw, pairs, files, target == "args", extra, ("capacity",))


# --------------------------------------------------------------------------------------------- train, validate
PLAN_OF_CONFIG = {
    "hopper_ppo": CPU_PLANS["hopper_ppo_cpu2"][0],
    "grpo_arith": CPU_PLANS["grpo_arith_cpu2"][0],
}
TRACE_OF_CONFIG = {"hopper_ppo": "hopper_ppo_cpu2", "grpo_arith": "grpo_arith_cpu2"}
SET_KEYS = ("num_envs", "gamma", "hidden_sizes", "seed", "grpo.group_size", "grpo.lr", "model.num_heads",
            "execution.granularity", "epochs", "stages", "mode", "iterations", "a..b", "", "workload")  # fmt: skip
SET_VALUES = ("16", "high", "[64, 64]", "-1", "1e400", ".nan", "[1", "{a: 1}", "null", "true", "0", "2", "auto",
              "*a", "&a [*a]", "!!binary AAAA", "99999999999999999999")  # fmt: skip


def config_pairs(
    draw: st.DrawFn, files: list[FileSpec], target: str
) -> tuple[str, list[tuple[str, str | None]]]:
    name = draw(st.sampled_from(sorted(CONFIGS)))
    files.append(maybe_mutated(draw, target == "config", "config.yaml", "yaml", CONFIGS[name]))
    pairs: list[tuple[str, str | None]] = []
    for _ in range(draw(st.integers(0, 2)) if target == "set" else 0):
        key, value = draw(st.sampled_from(SET_KEYS)), draw(st.sampled_from(SET_VALUES))
        pairs.append(("--set", draw(st.sampled_from((f"{key}={value}", key, f"{key}=")))))
    return name, pairs


@st.composite
def train_cases(draw: st.DrawFn) -> Case:
    target = draw(st.sampled_from(("config", "config", "set", "args", "plan")))
    files: list[FileSpec] = []
    name, pairs = config_pairs(draw, files, target)
    how = draw(st.sampled_from(("mode", "mode", "plan", "trace")))
    if how == "plan" and name in PLAN_OF_CONFIG:
        files.append(maybe_mutated(draw, target == "plan", "plan.yaml", "yaml", PLAN_OF_CONFIG[name]))
        pairs.append(("--plan", "{plan.yaml}"))
    elif how == "trace" and name in TRACE_OF_CONFIG:
        trace = TRACES[TRACE_OF_CONFIG[name]]
        files.append(maybe_mutated(draw, target == "plan", "trace.json", "json", trace))
        pairs += [("--mode", "auto"), ("--trace", "{trace.json}")]
    else:
        pairs.append(("--mode", draw(st.sampled_from(("collocated", "hybrid", "disaggregated", "auto")))))
    pairs += [("--iterations", "1"), ("--devices", "2"), ("--no-progress", None)]
    with_out(draw, pairs, files, "{dir}/run")
    extra = ("--iterations", "--devices", "--seed", "--set", "--nodes", "--max-restarts", "--profile-budget",
             "--merge-trace", "--mode", "--plan")  # fmt: skip
    return finish(draw, pairs, files, target == "args", extra, ("train", "{config.yaml}"))


@st.composite
def validate_cases(draw: st.DrawFn) -> Case:
    target = draw(st.sampled_from(("config", "config", "set", "args", "trace")))
    files: list[FileSpec] = []
    name, pairs = config_pairs(draw, files, target)
    if name in TRACE_OF_CONFIG and draw(st.booleans()):
        files.append(
            maybe_mutated(draw, target == "trace", "trace.json", "json", TRACES[TRACE_OF_CONFIG[name]])
        )
        pairs.append(("--trace", "{trace.json}"))
    pairs += [
        ("--plans", "2"),
        ("--iterations", "1"),
        ("--warmup", "0"),
        ("--json", None),
        ("--no-progress", None),
    ]
    with_out(draw, pairs, files, "{dir}/validate")
    extra = ("--plans", "--iterations", "--warmup", "--devices", "--profile-budget", "--set", "--trace")
    return finish(draw, pairs, files, target == "args", extra, ("validate", "{config.yaml}"))


# ------------------------------------------------------------------------------------------------------ tests
@FUZZ
@given(case=simulate_cases())
def test_fuzz_simulate(case: Case) -> None:
    run_case("simulate", case)


@FUZZ
@given(case=plan_cases())
def test_fuzz_plan(case: Case) -> None:
    run_case("plan", case)


@FUZZ
@given(case=trace_show_cases())
def test_fuzz_trace_show(case: Case) -> None:
    run_case("trace show", case)


@FUZZ
@given(case=trace_synth_cases())
def test_fuzz_trace_synth(case: Case) -> None:
    run_case("trace synth", case)


@FUZZ
@given(case=trace_calibrate_cases())
def test_fuzz_trace_calibrate(case: Case) -> None:
    run_case("trace calibrate", case)


@FUZZ
@given(case=trace_import_cases())
def test_fuzz_trace_import(case: Case) -> None:
    run_case("trace import", case)


@FUZZ
@given(case=capacity_cases())
def test_fuzz_capacity(case: Case) -> None:
    run_case("capacity", case)


@FUZZ
@given(case=train_cases())
def test_fuzz_train(case: Case) -> None:
    run_case("train", case)


@FUZZ
@given(case=validate_cases())
def test_fuzz_validate(case: Case) -> None:
    run_case("validate", case)


def test_reliability_table_matches_this_run() -> None:
    """``docs/reliability.md`` states the counts of this (derandomized) suite; regenerate it with
    ``python benchmarks/reliability_table.py`` when the cases or the validation change."""
    measured = tally_counts(TALLY)
    if set(measured) != set(ENTRY_POINTS) or any(n[0] < CASES_PER_ENTRY for n in measured.values()):
        pytest.skip("the whole fuzz suite did not run in this session")
    text = (REPO / "docs" / "reliability.md").read_text()
    documented = counts_of(text)
    assert set(documented) == set(ENTRY_POINTS)
    for entry, counts in documented.items():
        assert counts[0] >= CASES_PER_ENTRY and counts[-1] == 0, (entry, counts)
    assert {e: n[0] for e, n in documented.items()} == {e: n[0] for e, n in measured.items()}
    if f"(hypothesis {hypothesis.__version__})" not in text:  # another version draws other cases
        return
    for entry, counts in measured.items():
        # The draws no longer depend on what the session imported (_same_draws_in_every_session); a small
        # tolerance stays for what else may vary: the table is stale when the split moves by more.
        tolerance = max(10, counts[0] // 20)
        assert all(abs(a - b) <= tolerance for a, b in zip(counts, documented[entry], strict=True)), (
            f"docs/reliability.md is stale for rlinf {entry} ({documented[entry]} documented, {counts} measured): "
            "run python benchmarks/reliability_table.py"
        )
