"""Every command the README and the docs show, checked as written.

    python benchmarks/doc_commands.py                       # the static check of every command (a test runs it)
    python benchmarks/doc_commands.py --run [--timeout 180] [--match TEXT] [--json OUT.json]

The commands are the lines of the fenced code blocks of README.md and docs/*.md that start with ``rlinf``,
``python``, ``python3``, ``pip`` or ``bash`` (continued lines joined, ``&&`` chains split, ``#`` comments dropped).

The static check: an ``rlinf`` command parses with rlinf's own argument parser; every file a command names under
examples/, traces/, docs/, benchmarks/ or tests/ exists; a ``python`` command names a script or module that exists.
Templates (``[optional]`` parts, ``a|b`` choices, ``...``, placeholders in capitals such as ``LOG`` or ``DIR``) and
commands the docs mark as run at an old commit are skipped, with the reason.

``--run`` also runs every command that is not skipped (nor a ``pip`` install: the environment is the one that runs
this script), file by file in the order the docs give them, in a clean copy of the committed tree (``git worktree``
in a temporary folder, removed afterwards: commands that write docs/ artifacts cannot change this checkout). A
command still running at ``--timeout`` seconds without an error counts as ``running`` (a learning run or a long
benchmark started as written); one that exits with a non-zero code is ``failed``, with the end of its output.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/*.md")
STARTS = ("rlinf", "python", "python3", "pip", "bash")
REPO_FOLDERS = ("examples/", "traces/", "docs/", "benchmarks/", "tests/")
FENCE = re.compile(r"^([ \t]*)```[\w-]*\n(.*?)^\1```", re.S | re.M)
OLD_COMMIT = re.compile(r"\bat (?:commit )?[0-9a-f]{7}\b")
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
                for part in re.split(r"\s&&\s", code):
                    if _is_command(part.strip()):
                        found.append(Command(path, first_line + start, part.strip(), comment))
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


def run_all(timeout_s: float, match: str | None) -> list[dict[str, Any]]:
    """Run every runnable command in a clean copy of the committed tree (see the module docstring)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="rlinf-doc-commands-") as tmp:
        copy = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(copy), "HEAD"], cwd=ROOT, check=True)
        try:
            for command in commands(copy):
                row = {"where": f"{command.path}:{command.line}", "command": command.text}
                if match and match not in command.text:
                    continue
                reason = command.skip_reason() or (
                    "an install (not run)" if command.words[0] == "pip" else None
                )
                if reason:
                    rows.append({**row, "status": "skipped", "detail": reason})
                    continue
                words = command.words
                if words[0] in ("python", "python3"):
                    words[0] = sys.executable
                started = time.monotonic()
                try:
                    done = subprocess.run(
                        words, cwd=copy, capture_output=True, text=True, timeout=timeout_s, check=False
                    )
                    status = "ok" if done.returncode == 0 else "failed"
                    detail = "" if status == "ok" else (done.stdout + done.stderr)[-600:]
                except subprocess.TimeoutExpired:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="also run every runnable command")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per command with --run")
    parser.add_argument("--match", help="with --run: only the commands that contain this text")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    rows = run_all(args.timeout, args.match) if args.run else check()
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
