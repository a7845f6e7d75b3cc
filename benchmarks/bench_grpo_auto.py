"""GRPO on arithmetic: generated tokens/s of ``rlinf train --mode auto`` against the fixed collocated plan, whose
granularity is the example config's own (4 micro-batches per stream edge).

    python benchmarks/bench_grpo_auto.py [--iterations 30] [--out runs/grpo_auto_bench]

Runs, one after the other, ``rlinf train examples/grpo_arith.yaml --mode auto`` (profiling included) and
``--mode collocated``, each ``--iterations`` iterations with ``execution.heldout_eval=false``, then reads their
``metrics.jsonl``: the median generated tokens/s over iterations 2..N (the first holds the workers' start-up) and
their ratio. One run of each mode, back to back: both see whatever else loads the machine, not at the same time.
Writes ``docs/grpo_auto_vs_collocated.json`` (provenance, plans, every iteration's tokens/s and time).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
from pathlib import Path

import provenance

from rlinf.cli import main as rlinf_main

MODES = ("auto", "collocated")


def train(config: str, mode: str, iterations: int, out: Path) -> dict:
    """Run ``rlinf train`` in this process; its command, plan and per-iteration metrics."""
    shutil.rmtree(out, ignore_errors=True)
    command = [
        "train",
        config,
        "--mode",
        mode,
        "--iterations",
        str(iterations),
        "--out",
        str(out),
        "--set",
        "execution.heldout_eval=false",
        "--no-progress",
    ]
    code = rlinf_main(command)
    if code != 0:
        raise SystemExit(code)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    kept = metrics[1:]
    return {
        "command": "rlinf " + " ".join(command),
        "plan": (out / "plan.yaml").read_text(),
        "tokens_per_s": [m["tokens_per_s"] for m in metrics],
        "iteration_s": [m["iteration_s"] for m in metrics],
        "median_tokens_per_s": statistics.median(m["tokens_per_s"] for m in kept),
        "median_iteration_s": statistics.median(m["iteration_s"] for m in kept),
        "last_mean_reward": metrics[-1]["mean_reward"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="examples/grpo_arith.yaml")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path("runs/grpo_auto_bench"), help="run directories")
    parser.add_argument("--json", type=Path, default=Path("docs/grpo_auto_vs_collocated.json"))
    args = parser.parse_args(argv)
    started = provenance.begin("python benchmarks/bench_grpo_auto.py", argv)
    runs = {mode: train(args.config, mode, args.iterations, args.out / mode) for mode in MODES}
    ratio = runs["auto"]["median_tokens_per_s"] / runs["collocated"]["median_tokens_per_s"]
    body = {
        "note": "one run of each mode, back to back; medians over iterations 2..N; collocated uses the config's "
        "granularity",
        **runs,
        "ratio_auto_over_collocated_median_tokens_per_s": ratio,
    }
    provenance.write_artifact(args.json, body, started)
    print(
        f"auto {runs['auto']['median_tokens_per_s']:.0f} vs collocated "
        f"{runs['collocated']['median_tokens_per_s']:.0f} generated tokens/s: {ratio:.2f}x; wrote {args.json}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
