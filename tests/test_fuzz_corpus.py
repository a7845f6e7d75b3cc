"""The classes of bad input issue 15 found (tracebacks, silently accepted values, unclear messages, resource
blow-ups), one fixed case each: every one ends in exit 2 with one line naming a field of the input (checked by
``fuzzing.run_case``) and the expected problem. The property-based suite (``test_fuzz_cli.py``) explores around
them."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from fuzzing import CONFIGS, EXAMPLE_PLANS, TRACES, YAML_BOMB, Case, FileSpec, run_case

TRACE = TRACES["grpo_7b_h100"]
PLAN = EXAMPLE_PLANS["hybrid"]


def edited(seed: Any, *path_and_value: Any, delete: bool = False) -> Any:
    """A copy of ``seed`` with the value at ``path`` replaced (or deleted)."""
    *path, value = path_and_value
    doc = copy.deepcopy(seed)
    node = doc
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


def trace_file(doc: Any) -> FileSpec:
    return FileSpec("trace.json", json.dumps(doc).encode())


def plan_file(doc: Any) -> FileSpec:
    return FileSpec("plan.yaml", yaml.safe_dump(doc).encode())


def show(spec: FileSpec) -> tuple[str, Case]:
    return "trace show", Case(("trace", "show", "{trace.json}"), (spec,))


def simulate(*extra: str, trace: FileSpec | None = None, plan: FileSpec | None = None) -> tuple[str, Case]:
    files = (trace or trace_file(TRACE), plan or plan_file(PLAN))
    return "simulate", Case(
        ("simulate", "--trace", "{trace.json}", "--plan", "{plan.yaml}", "--json", *extra), files
    )


def config(name: str, *extra: str, doc: Any = None, command: str = "train") -> tuple[str, Case]:
    files = (FileSpec("config.yaml", yaml.safe_dump(doc if doc is not None else CONFIGS[name]).encode()),)
    argv = (command, "{config.yaml}", *extra)
    if "--out" not in extra:
        argv += ("--out", "{dir}/out")
    if command == "train" and "--mode" not in extra:
        argv += ("--mode", "collocated")
    return command, Case(argv, files)


SYNTH = ("trace", "synth", "--num-devices", "8", "--prompts", "8", "--out", "{dir}/t.json")
CORPUS: dict[str, tuple[tuple[str, Case], str]] = {
    # files that are not UTF-8 JSON/YAML text
    "utf16 trace": (show(FileSpec("trace.json", json.dumps(TRACE).encode("utf-16"))), "is UTF-16 text"),
    "binary trace": (show(FileSpec("trace.json", b"\x89PNG\r\n\x1a\n\x00\x00")), "is not text"),
    "latin-1 trace": (show(FileSpec("trace.json", b'{"schema": "caf\xe9"}')), "is not UTF-8 text"),
    "trace is a folder": (show(FileSpec("trace.json", special="dir")), "is a folder"),
    "trace is a device": (show(FileSpec("trace.json", special="/dev/zero")), "not a regular file"),
    "deep JSON": (show(FileSpec("trace.json", b"[" * 100_000 + b"]" * 100_000)), "levels of nesting"),
    # JSON values of the wrong type, NaN, infinity, fractions, negatives, unknown keys
    "samples not a list": (show(trace_file(edited(TRACE, "samples", 5))), "samples=5: must be a list"),
    "NaN seconds": (show(trace_file(edited(TRACE, "samples", 0, "seconds", float("nan")))), "finite"),
    "infinite samples": (show(trace_file(edited(TRACE, "samples", 0, "samples", float("inf")))), "finite"),
    "fractional samples": (
        show(trace_file(edited(TRACE, "samples", 0, "samples", 2.5))),
        "must be an integer",
    ),
    "negative tokens": (
        show(trace_file(edited(TRACE, "samples", 0, "tokens", -3))),
        "must be an integer >= 0",
    ),
    "list as a component name": (
        show(trace_file(edited(TRACE, "workflow", "components", 0, "name", ["a"]))),
        "must be a string",
    ),
    "infinite memory": (
        show(trace_file(edited(TRACE, "cluster", "device", "memory_bytes", 1e400))),
        "finite",
    ),
    "negative tokens per sample": (
        show(trace_file(edited(TRACE, "workflow", "tokens_per_sample", -1.0))),
        "tokens_per_sample=-1.0: must be >= 0",
    ),
    "unknown key in memory": (
        show(trace_file(edited(TRACE, "memory", "colour", 1))),
        "memory.colour=['colour']: unknown key",
    ),
    "provenance a string": (
        show(trace_file(edited(TRACE, "provenance", "x"))),
        "provenance='x': must be an object",
    ),
    # plans
    "boolean granularity": (
        simulate(plan=plan_file(edited(PLAN, "granularity", "rollout->reward", True))),
        "granularity.rollout->reward=True: must be an integer",
    ),
    "data_parallel of an unknown component": (
        simulate(plan=plan_file({**PLAN, "data_parallel": {"critic": 2}})),
        "data_parallel.critic",
    ),
    "placement in the millions": (
        simulate(plan=plan_file(edited(PLAN, "placement", "actor", "0-999999999"))),
        "exceeds the limit of 65,536 devices",
    ),
    "YAML alias bomb": (
        simulate(plan=FileSpec("plan.yaml", YAML_BOMB.encode())),
        "once its aliases are expanded",
    ),
    "deep block nesting (libyaml would crash)": (
        simulate(plan=FileSpec("plan.yaml", b"- " * 100_000 + b"x\n")),
        "levels of nesting",
    ),
    "recursive YAML alias": (simulate(plan=FileSpec("plan.yaml", b"&a [*a]\n")), "refers to itself"),
    "offload of a list": (simulate(plan=plan_file({**PLAN, "offload": [["actor"]]})), "offload[0]"),
    # cluster specs and command-line values
    "a million nodes": (simulate("--cluster", "1000000x8xH100"), "cluster.num_nodes"),
    "an empty cluster spec": (simulate("--cluster", ""), "is not a cluster spec"),
    "negative seed": (simulate("--seed", "-1"), "--seed=-1: must be an integer in 0-4294967295"),
    "--out is a file": (simulate("--out", "{plan.yaml}"), "--out"),
    "--out in /proc": (simulate("--out", "/proc/rlinf/out"), "pseudo-filesystem"),
    "--out under a file": (simulate("--out", "{plan.yaml}/out"), "is a file, not a folder"),
    "plan --out is a folder": (
        ("plan", Case(("plan", "--trace", "{trace.json}", "--out", "{dir}"), (trace_file(TRACE),))),
        "is a folder, not a file",
    ),
    "capacity progression to 10^8": (
        (
            "capacity",
            Case(
                ("capacity", "--trace", "{trace.json}", "--devices", "8,9,...,100000000", "--out", "{dir}/r"),
                (trace_file(TRACE),),
            ),
        ),
        "RLINF_MAX_DEVICES",
    ),
    "capacity progression of 1000 sizes": (
        (
            "capacity",
            Case(
                ("capacity", "--trace", "{trace.json}", "--devices", "1,2,3,...,1000", "--out", "{dir}/r"),
                (trace_file(TRACE),),
            ),
        ),
        "RLINF_MAX_SWEEP_SIZES",
    ),
    "heads that do not divide the hidden size": (
        (
            "trace synth",
            Case((*SYNTH, "--params", "1e9", "--layers", "4", "--hidden-size", "2048", "--heads", "3")),
        ),
        "--heads=3: does not divide the hidden size 2048",
    ),
    "NaN parameters": (
        ("trace synth", Case((*SYNTH, "--params", "nan"))),
        "--params=nan: must be a finite number",
    ),
    "NaN holdout": (
        (
            "trace calibrate",
            Case(
                (
                    "trace",
                    "calibrate",
                    "--measured",
                    "{trace.json}",
                    "--holdout",
                    "nan",
                    "--out",
                    "{dir}/c.json",
                ),
                (trace_file(TRACE),),
            ),  # fmt: skip
        ),
        "--holdout=nan",
    ),
    "UTF-16 step log": (
        (
            "trace import",
            Case(
                (
                    "trace",
                    "import",
                    "{run.jsonl}",
                    "--format",
                    "verl",
                    "--model",
                    "1.5b",
                    "--out",
                    "{dir}/t.json",
                ),
                (FileSpec("run.jsonl", b'{"step": 1}\n'.decode().encode("utf-16")),),
            ),
        ),
        "is UTF-16 text",
    ),
    # workload configs and their overrides
    "gamma: high": (config("hopper_ppo", doc={**CONFIGS["hopper_ppo"], "gamma": "high"}), "gamma='high'"),
    "--set value that is not YAML": (config("hopper_ppo", "--set", "gamma=[1"), "--set"),
    "--set infinite value": (config("hopper_ppo", "--set", "gamma=.inf"), "finite"),
    "train negative seed": (config("hopper_ppo", "--seed", "-1"), "--seed=-1"),
    "train --out is a file": (config("hopper_ppo", "--out", "{config.yaml}"), "--out"),
    "validate --out is a file": (config("grpo_arith", "--out", "{config.yaml}", command="validate"), "--out"),
    "arith group of one": (config("grpo_arith", "--set", "grpo.group_size=1"), "grpo.group_size=1"),
    "custom workload with a negative horizon": (
        config("custom", "--set", "num_steps=-4"),
        "config.yaml='edges.env->critic.bytes_per_sample=-128': makes an invalid workflow",
    ),
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_issue_corpus_is_refused_in_one_line_naming_the_field(name: str) -> None:
    (entry, case), expected = CORPUS[name]
    result = run_case(entry, case, record=False)
    assert result.code == 2, (name, result.outcome, result.stderr)
    assert expected in result.stderr, (name, result.stderr)


def test_a_utf8_byte_order_mark_is_accepted() -> None:
    bom = FileSpec("trace.json", b"\xef\xbb\xbf" + json.dumps(TRACE).encode())
    result = run_case("trace show", show(bom)[1], record=False)
    assert result.code == 0, result.stderr


def test_the_unchanged_seeds_are_accepted() -> None:
    """The fuzz starts from valid inputs: each seed alone runs through (or reaches the stubbed heavy stage)."""
    assert run_case("simulate", simulate()[1], record=False).outcome == "accepted"
    for name in CONFIGS:
        assert run_case("train", config(name)[1], record=False).outcome == "accepted", name
