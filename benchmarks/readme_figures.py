"""The README's simulated figures, regenerated: the 7B trace under the three example plans, and the plan the
planner picks for the 7B trace at each cluster size.

Usage::

    python benchmarks/readme_figures.py           # print both tables
    python benchmarks/readme_figures.py --check   # exit 1 when README.md differs from what the code computes
    python benchmarks/readme_figures.py --write   # rewrite the tables in README.md

Each table sits in README.md between ``<!-- figures:NAME -->`` and ``<!-- /figures:NAME -->``;
``tests/test_readme_figures.py`` fails when they drift from this script's output (a hand edit included).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
from pathlib import Path

from rlinf.cli import main as rlinf

ROOT = Path(__file__).resolve().parent.parent
TRACE = "traces/grpo_7b_h100.json"
PLANS = {
    "collocated (offload all, 8 micro-batches)": "examples/plans/collocated.yaml",
    "disaggregated (32 micro-batches)": "examples/plans/disaggregated.yaml",
    "hybrid (reward on the rollout devices)": "examples/plans/hybrid.yaml",
}
SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)


def _json(args: list[str]) -> dict:
    """One rlinf command's ``--json`` output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = rlinf([*args, "--json"])
    if code != 0:
        raise RuntimeError(f"rlinf {' '.join(args)} exited {code}")
    return json.loads(out.getvalue())


def simulate_table() -> str:
    """The 7B trace on its cluster under each example plan."""
    lines = ["| plan | iteration | samples/s | tokens/s | bubble |", "| --- | --- | --- | --- | --- |"]
    for name, plan in PLANS.items():
        result = _json(["simulate", "--trace", str(ROOT / TRACE), "--plan", str(ROOT / plan)])
        speed = result["throughput"]
        lines.append(
            f"| {name} | {result['iteration_s']:.1f} s | {speed['samples_per_s']:.2f} | "
            f"{speed['tokens_per_s']:,.0f} | {100 * result['bubble_fraction']:.1f}% |"
        )
    return "\n".join(lines)


def size_table() -> str:
    """The planner's mode and predicted seconds per iteration for the 7B trace at each cluster size."""
    plans = [_json(["plan", "--trace", str(ROOT / TRACE), "--cluster", f"{n // 8}x8xH100"]) for n in SIZES]
    return "\n".join(
        [
            "  | devices | " + " | ".join(str(n) for n in SIZES) + " |",
            "  |" + "---|" * (len(SIZES) + 1),
            "  | mode | " + " | ".join(p["mode"] for p in plans) + " |",
            "  | s/iteration | " + " | ".join(f"{p['predicted_iteration_s']:.1f}" for p in plans) + " |",
        ]
    )


TABLES = {"simulate-7b": simulate_table, "plan-by-size-7b": size_table}


def block(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- figures:{name} -->\n)(.*?)(\n *<!-- /figures:{name} -->)", re.S)


def differences(readme: str, tables: dict[str, str]) -> list[str]:
    """Names of the tables whose README block differs from ``tables`` (or is missing)."""
    out = []
    for name, text in tables.items():
        found = block(name).search(readme)
        if found is None or found.group(2) != text:
            out.append(name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true", help="exit 1 when README.md differs")
    action.add_argument("--write", action="store_true", help="rewrite the tables in README.md")
    args = parser.parse_args(argv)
    tables = {name: make() for name, make in TABLES.items()}
    path = ROOT / "README.md"
    readme = path.read_text()
    if args.write:
        for name, text in tables.items():
            readme = block(name).sub(lambda m, text=text: m.group(1) + text + m.group(3), readme)
        path.write_text(readme)
    elif args.check:
        stale = differences(readme, tables)
        if stale:
            print(f"README.md figures differ from the code: {', '.join(stale)}; fix: {sys.argv[0]} --write")
            return 1
    else:
        print("\n\n".join(tables.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
