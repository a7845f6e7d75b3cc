"""Every command of the README and docs is still accepted as written (benchmarks/doc_commands.py): rlinf's parser
takes it, the files it names exist, the scripts and modules it runs exist. Running them all is
``python benchmarks/doc_commands.py --run`` (minutes to hours: learning runs and benchmarks among them)."""

from __future__ import annotations

import pytest
from benchmark_scripts import load

doc_commands = load("doc_commands")


def test_every_command_of_the_docs_is_accepted_as_written() -> None:
    rows = doc_commands.check()
    assert len(rows) >= 50  # the README's quick start and the docs' examples are all found
    assert {"README.md:24", "README.md:25"} <= {row["where"] for row in rows}  # the quick start
    bad = [f"{row['where']}: {row['command']}: {row['detail']}" for row in rows if row["status"] == "bad"]
    assert bad == []
    skipped = [row for row in rows if row["status"] == "skipped"]
    assert len(skipped) <= len(rows) // 4, skipped  # templates and old commits stay the exception


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("rlinf train examples/hopper_ppo.yaml --mode sideways", "--mode='sideways': invalid choice"),
        (
            "rlinf simulate --trace traces/grpo_9b_h100.json --plan examples/plans/hybrid.yaml",
            "does not exist",
        ),
        ("rlinf plan --trace traces/grpo_7b_h100.json --top-k 3", "--top-k: is not a flag"),
        ("python benchmarks/no_such_benchmark.py --json out.json", "script benchmarks/no_such_benchmark.py"),
        ("python -m rlinf.workloads.no_such.learn", "module rlinf.workloads.no_such.learn does not exist"),
    ],
)
def test_a_command_that_no_longer_runs_is_caught(text: str, found: str) -> None:
    doc = f"Run:\n\n```bash\n{text}   # a comment\n```\n"
    (command,) = doc_commands.commands(texts={"docs/x.md": doc})
    assert command.text == text and command.line == 4
    problems = doc_commands.static_problems(command)
    assert any(found in problem for problem in problems), problems


def test_templates_and_old_commits_are_skipped_with_the_reason() -> None:
    doc = (
        "```\nrlinf validate examples/hopper_ppo.yaml [--plans 6]\n"
        "rlinf trace import --format verl LOG --out TRACE.json\n"
        "python benchmarks/learn_grpo_arith.py   # at commit 31040b3\n"
        "rlinf trace synth --model 7b --device H100 --out t.json \\\n    --num-devices 8\n```\n"
    )
    reasons = [c.skip_reason() for c in doc_commands.commands(texts={"docs/x.md": doc})]
    assert reasons[0] is not None and "template" in reasons[0]
    assert reasons[1] is not None and "LOG" in reasons[1]
    assert reasons[2] == "marked as run at an old commit"
    assert reasons[3] is None  # H100 is a device, not a placeholder; the continued line is joined


def test_an_exit_code_the_doc_states_is_what_the_command_must_end_with() -> None:
    doc = (
        "```bash\nrlinf train examples/grpo_hf.yaml --iterations 1\n# -> exit 2 before any worker starts\n"
        "rlinf trace show traces/grpo_7b_h100.json\n```\n"
    )
    stated, plain = doc_commands.commands(texts={"docs/x.md": doc})
    assert (stated.exit_code, plain.exit_code) == (2, 0)
