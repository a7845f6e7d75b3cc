"""Every command the README and the docs show, checked as written.

    python benchmarks/doc_commands.py                       # the static check of every command (a test runs it)
    python benchmarks/doc_commands.py --run [--timeout 180] [--match TEXT] [--json OUT.json]

The commands are the lines of the fenced code blocks of README.md and docs/*.md that start with ``rlinf``,
``python``, ``python3``, ``pip`` or ``bash`` (continued lines joined, ``&&`` chains split, ``#`` comments dropped).

The static check: an ``rlinf`` command parses with rlinf's own argument parser; every file a command names under
examples/, traces/, docs/, benchmarks/ or tests/ exists; a ``python`` command names a script or module that exists.
Templates (``[optional]`` parts, ``a|b`` choices, ``...``, placeholders in capitals such as ``LOG`` or ``DIR``) and
commands the docs mark as run at an old commit are skipped, with the reason.

``--run`` also runs every command that is not skipped (nor a ``pip`` install: the environment is the one that
runs this script; nor the test suite, which CI runs), file by file in the order the docs give them, in a clean copy
of the committed tree (``git worktree`` in a temporary folder, removed afterwards, its packages first on
``PYTHONPATH``): commands that write docs/ artifacts cannot change this checkout, and uncommitted code changes do
not count. The checkout's GRPO warm-start cache, ``runs/hf_grpo_cache``, is copied in when it exists. A command
still running at ``--timeout`` seconds without an error counts as ``running`` (a learning run or a long benchmark
started as written); one that exits with another code than the doc says (0 unless a ``# -> exit N`` line follows it) is
``failed``, with the end of its output; a GPU-only one
that says it found no GPU is skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/*.md")
STARTS = ("rlinf", "python", "python3", "pip", "bash")
REPO_FOLDERS = ("examples/", "traces/", "docs/", "benchmarks/", "tests/")
FENCE = re.compile(r"^([ \t]*)```[\w-]*\n(.*?)^\1```", re.S | re.M)
OLD_COMMIT = re.compile(r"\bat (?:commit )?[0-9a-f]{7}\b")
NO_GPU = "no CUDA GPU is visible"
"""What a GPU-only benchmark prints (exit code 2) on a machine without one."""
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*(?:\.json|\.yaml|:\d+)?$")


def _values_in_capitals() -> frozenset[str]:
    from rlinf.core.cluster import DEVICE_PRESETS

    return frozenset(DEVICE_PRESETS) | {"CPU"}


_VALUES_IN_CAPITALS = _values_in_capitals()
"""Real values written in capitals (device names), not placeholders."""


@attrs.frozen
class Command:
    """One command as a doc shows it."""

    path: str
    line: int
    text: str
    comment: str = ""
    exit_code: int = 0
    """The exit code the doc says the command ends with (``# -> exit 2`` on the lines after it), else 0."""

    @property
    def words(self) -> list[str]:
        return shlex.split(self.text)

    def skip_reason(self) -> str | None:
        """Why the command is not checked as a runnable command (``None``: it is)."""
        if OLD_COMMIT.search(self.comment):
            return "marked as run at an old commit"
        for word in self.words:
            if word.startswith("[") or "|" in word or "..." in word:
                return f"a template ({word!r})"
            if PLACEHOLDER.match(word) and word not in _VALUES_IN_CAPITALS:
                return f"a template (placeholder {word!r})"
        return None


def commands(root: Path = ROOT, texts: dict[str, str] | None = None) -> list[Command]:
    """Every command of the README and docs (``texts``: path -> text, else read from ``root``)."""
    if texts is None:
        files = [p for pattern in DOCS for p in sorted(root.glob(pattern))]
        texts = {str(p.relative_to(root)): p.read_text() for p in files}
    found = []
    for path, text in texts.items():
        for fence in FENCE.finditer(text):
            first_line = text.count("\n", 0, fence.start(2)) + 1
            lines = fence.group(2).splitlines()
            index = 0
            while index < len(lines):
                start, line = index, lines[index].strip()
                while line.endswith("\\") and index + 1 < len(lines):
                    index += 1
                    line = line[:-1].rstrip() + " " + lines[index].strip()
                index += 1
                if not line.startswith(STARTS) or not re.match(r"^\S+ ", line):
                    continue
                code, comment = _split_comment(line)
                said = re.search(r"->\s*exit (\d+)", " ".join(_comments_after(lines, index)))
                for part in re.split(r"\s&&\s", code):
                    if _is_command(part.strip()):
                        exit_code = int(said[1]) if said else 0
                        found.append(Command(path, first_line + start, part.strip(), comment, exit_code))
    return found


def _comments_after(lines: list[str], index: int) -> list[str]:
    """The comment lines right after a command (what the doc says it prints)."""
    found = []
    while index < len(lines) and lines[index].strip().startswith("#"):
        found.append(lines[index].strip())
        index += 1
    return found


def _is_command(text: str) -> bool:
    """Whether a line of a code block is a command (not prose or output that starts with one of the names)."""
    try:
        words = shlex.split(text)
    except ValueError:
        return False
    if len(words) < 2 or words[0] not in STARTS:
        return False
    if words[0] == "rlinf":
        from rlinf.cli import COMMANDS

        return words[1] in COMMANDS or words[1].startswith("-")
    return True


def _split_comment(line: str) -> tuple[str, str]:
    """The code and the ``#`` comment of a shell line (a ``#`` inside quotes is code)."""
    quote = None
    for position, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (position == 0 or line[position - 1].isspace()):
            return line[:position].rstrip(), line[position + 1 :].strip()
    return line, ""


def static_problems(command: Command, root: Path = ROOT) -> list[str]:
    """What is wrong with a command as written, without running it (empty: nothing)."""
    words = command.words
    problems = [
        f"{word} does not exist"
        for word in words
        if word.startswith(REPO_FOLDERS) and not any(c in word for c in "*?") and not (root / word).exists()
    ]
    if words[0] == "rlinf":
        from rlinf.cli import build_parser

        try:
            build_parser().parse_args(words[1:])
        except Exception as error:  # noqa: BLE001 - the parser's own one-line message is the finding
            problems.append(f"rlinf does not accept it: {error}")
    elif words[0] in ("python", "python3"):
        if words[1] == "-m":
            module = words[2]
            if module != "pytest" and not _module_exists(module, root):
                problems.append(f"module {module} does not exist")
        elif not (root / words[1]).is_file():
            problems.append(f"script {words[1]} does not exist")
    return problems


def _module_exists(module: str, root: Path) -> bool:
    base = root.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()


def check(root: Path = ROOT) -> list[dict[str, Any]]:
    """The static check of every command: one row per command."""
    rows = []
    for command in commands(root):
        reason = command.skip_reason()
        row = {"where": f"{command.path}:{command.line}", "command": command.text}
        if reason:
            rows.append({**row, "status": "skipped", "detail": reason})
            continue
        problems = static_problems(command, root)
        rows.append({**row, "status": "bad" if problems else "ok", "detail": "; ".join(problems)})
    return rows


GRPO_CACHE = "runs/hf_grpo_cache"
"""The GRPO examples' ``cache_dir`` (built models and warm starts, keyed by the settings they depend on)."""


def run_all(timeout_s: float, match: str | None, files: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Run every runnable command in a clean copy of the committed tree (see the module docstring); ``files``:
    only the commands of these docs."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlinf-doc-commands-") as tmp:
        copy = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(copy), "HEAD"], cwd=ROOT, check=True)
        if (
            ROOT / GRPO_CACHE
        ).is_dir():  # a newcomer trains each warm start once; this run reuses the checkout's
            shutil.copytree(ROOT / GRPO_CACHE, copy / GRPO_CACHE)
        try:
            for command in commands(copy):
                row = {"where": f"{command.path}:{command.line}", "command": command.text}
                if (match and match not in command.text) or (files and command.path not in files):
                    continue
                reason = command.skip_reason() or _not_run(command)
                if reason:
                    rows.append({**row, "status": "skipped", "detail": reason})
                    continue
                words = command.words
                if words[0] in ("python", "python3"):
                    words[0] = sys.executable
                started = time.monotonic()
                process = subprocess.Popen(
                    words,
                    cwd=copy,
                    env={
                        **os.environ,
                        "PYTHONPATH": os.pathsep.join([str(copy), os.environ.get("PYTHONPATH", "")]),
                    },
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
                try:
                    output, _ = process.communicate(timeout=timeout_s)
                    status = "ok" if process.returncode == command.exit_code else "failed"
                    detail = "" if status == "ok" else output[-600:]
                    if process.returncode == 2 and NO_GPU in output:
                        status, detail = "skipped", "needs a GPU (it says so and exits 2)"
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)  # the command and every process it started
                    process.communicate()
                    status, detail = "running", f"no error within {timeout_s:.0f} s"
                rows.append(
                    {
                        **row,
                        "status": status,
                        "seconds": round(time.monotonic() - started, 1),
                        "detail": detail,
                    }
                )
                print(f"{status:<8} {rows[-1]['seconds']:7.1f} s  {row['where']}: {command.text}", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(copy)], cwd=ROOT, check=False)
    return rows


def _not_run(command: Command) -> str | None:
    """Why ``--run`` leaves a command that is not a template alone (``None``: it runs it)."""
    if command.words[0] == "pip":
        return "an install (not run: the environment is the one running this script)"
    if command.words[1:3] == ["-m", "pytest"]:
        return "the test suite (CI runs it: bash .ci/run)"
    if command.words[1:] == ["benchmarks/doc_commands.py", "--run"]:
        return "this script"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="also run every runnable command")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per command with --run")
    parser.add_argument("--match", help="with --run: only the commands that contain this text")
    parser.add_argument("--files", nargs="+", default=(), help="with --run: only the commands of these docs")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    rows = run_all(args.timeout, args.match, args.files) if args.run else check()
    if not args.run:
        for row in rows:
            detail = f"  ({row['detail']})" if row["detail"] else ""
            print(f"{row['status']:<8} {row['where']}: {row['command']}{detail}")
    counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "running", "skipped", "bad", "failed")}
    print(", ".join(f"{n} {s}" for s, n in counts.items() if n))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 1 if counts["bad"] or counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
