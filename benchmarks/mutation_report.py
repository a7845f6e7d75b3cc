"""The mutation run's report: every mutant of the lowering, the plan and the cost model, and what became of it.

    mutmut run && python benchmarks/mutation_report.py --artifact docs/data/mutation.json

Reads mutmut's results (``mutants/rlinf/core/*.meta``, written by ``mutmut run`` with pyproject's
``[tool.mutmut]``) and the mutated sources beside them, and writes the artifact: per module the killed, untested and
surviving mutants, and every survivor with its diff (the original line(s) ``-``, the mutant's ``+``) and a category:

* ``draft index``: the ``index=-1`` that the lowering gives an op it is still building, changed: equivalent, since
  every op's index is set when the program is assembled (``_placed``) before anything reads it;
* ``message wording``: an argument of an error or warning other than its condition (the field, the value shown, the
  message, the fix), or the text of a message: the same error is raised at the same place with other words;
* ``logic``: anything else, a change of behaviour that no test of the run's selection noticed.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import suite

ROOT = Path(__file__).resolve().parent.parent
MODULES = ("lowering", "plan", "costs")
EXIT_KILLED = (1, 3)
EXIT_NO_TESTS = 33
MESSAGE_CALL = re.compile(
    r"\b(require|ConfigError|RlinfError|InfeasiblePlanError|exceeded|warn|_warn|integer|ExtrapolationWarning)\("
)
STRING = re.compile(r"(?:[rbfRBF]{0,2})\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'")


def functions(source: str) -> dict[str, str]:
    """Every function of a mutated module by name (the original as ``..._orig``, each mutant as ``..._N``)."""
    lines = source.splitlines()
    return {
        node.name: "\n".join(lines[node.lineno - 1 : node.end_lineno])
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


def diff(original: str, mutant: str) -> tuple[list[str], list[int]]:
    """The changed lines of a mutant against its original (body only), and the changed lines' numbers in the
    original function (1 = its ``def`` line)."""
    changed = list(difflib.unified_diff(original.splitlines()[1:], mutant.splitlines()[1:], lineterm="", n=0))
    numbers = []
    for line in changed:
        hunk = re.match(r"@@ -(\d+)(?:,(\d+))? ", line)
        if hunk:
            start, count = int(hunk.group(1)), int(hunk.group(2) or 1)
            numbers += [start + 1 + i for i in range(count)]  # +1: the def line was left out
    return [line for line in changed if line[:1] in "+-" and not line.startswith(("+++", "---"))], numbers


def in_message_arguments(original: str, numbers: list[int]) -> bool:
    """Whether every changed line lies in the arguments of an error or warning call, outside a ``require``'s
    condition (its first argument)."""
    tree = ast.parse(original)
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and MESSAGE_CALL.search(ast.unparse(node.func) + "("):
            arguments = list(node.args) + [k.value for k in node.keywords]
            if ast.unparse(node.func).endswith("require") and node.args:
                arguments = arguments[1:]
            spans += [(a.lineno, a.end_lineno) for a in arguments]
    return bool(numbers) and all(any(lo <= n <= hi for lo, hi in spans) for n in numbers)


def category(lines: list[str], original: str = "", numbers: list[int] | None = None) -> str:
    """``draft index``, ``message wording`` or ``logic`` (see the module docstring)."""
    old = [line[1:] for line in lines if line.startswith("-")]
    new = [line[1:] for line in lines if line.startswith("+")]
    if original and numbers and in_message_arguments(textwrap.dedent(original), numbers):
        return "message wording"
    if old and all("index=-1" in line for line in old) and all("index=" in line for line in new):
        return "draft index"
    same_code = [STRING.sub('""', line) for line in old] == [STRING.sub('""', line) for line in new]
    if old and new and same_code and all(MESSAGE_CALL.search(line) or line.strip()[:2] in ('f"', '"') or
                                         line.strip()[:1] == '"' for line in old):  # fmt: skip
        return "message wording"
    if len(old) == 1 and len(new) == 1 and MESSAGE_CALL.search(old[0]):
        condition = re.match(r"\s*require\((.*?),", old[0]), re.match(r"\s*require\((.*?),", new[0])
        if condition[0] is None or (
            condition[1] is not None and condition[0].group(1) == condition[1].group(1)
        ):
            return "message wording"
    return "logic"


def report(root: Path) -> dict[str, Any]:
    """The artifact's body from the mutmut results under ``root/mutants``."""
    modules: dict[str, Any] = {}
    survivors = []
    for module in MODULES:
        path = root / "mutants" / "rlinf" / "core" / f"{module}.py"
        meta = json.loads(path.with_name(f"{module}.py.meta").read_text())
        source = functions(path.read_text())
        counts: Counter[str] = Counter()
        for key, code in sorted(meta["exit_code_by_key"].items()):
            if code in EXIT_KILLED:
                counts["killed"] += 1
                continue
            if code == EXIT_NO_TESTS:
                counts["no tests"] += 1
                continue
            if code != 0:
                counts[f"exit {code}"] += 1
                continue
            name = key.rsplit(".", 1)[1]
            original = source[re.sub(r"__mutmut_\d+$", "__mutmut_orig", name)]
            lines, numbers = diff(original, source[name])
            kind = category(lines, original, numbers)
            counts[f"survived: {kind}"] += 1
            survivors.append({"mutant": key, "category": kind, "diff": lines})
        modules[module] = {"mutants": sum(counts.values()), **dict(sorted(counts.items()))}
    return {"modules": modules, "survivors": survivors}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", type=Path, required=True)
    args = parser.parse_args(argv)
    started = suite.begin("python benchmarks/mutation_report.py", argv)
    body = report(ROOT)
    suite.write_artifact(args.artifact, body, started)
    print(json.dumps(body["modules"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
