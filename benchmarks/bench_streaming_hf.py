"""Long-tail benchmark of GRPO on a Hugging Face causal LM: streaming finished groups (granularity > 1) vs
whole-batch hand-off (granularity 1), with the real executor, on the workload's natural response lengths.

    python benchmarks/bench_streaming_hf.py [--iterations 8] [--repeats 2] [--granularities 1 4 16]

Every run is ``rlinf train examples/grpo_hf.yaml --mode hybrid --devices 2`` (rollout and reward on core 0,
inference and actor on core 1) with ``--set execution.granularity=G``; runs of the granularities are interleaved
(``--repeats``) because the cores are shared, and all use one warm-start cache (built by the first run). Reported
per granularity: the median over the measured iterations (each run's first dropped as warm-up; held-out
evaluation off) of the iteration time and generated tokens/s, and the speed-up over granularity 1; a JSON summary
goes to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from rlinf.cli import main as rlinf_main


def run_once(granularity: int, iterations: int, cache: Path, extra: list[str]) -> list[dict]:
    """One hybrid run's per-iteration metrics, the first iteration dropped."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "run"
        command = [
            "train", "examples/grpo_hf.yaml", "--mode", "hybrid", "--devices", "2", "--iterations",
            str(iterations), "--out", str(out), "--no-progress", "--set", f"execution.granularity={granularity}",
            "--set", f"execution.cache_dir={cache}", "--set", "execution.heldout_eval=false", *extra,
        ]  # fmt: skip
        if rlinf_main(command) != 0:
            raise SystemExit(f"rlinf {' '.join(command)} failed")
        lines = (out / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines][1:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--granularities", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--cache", type=Path, default=Path("runs/hf_grpo_cache"))
    parser.add_argument("--json", type=Path, default=Path("docs/grpo_hf_streaming.json"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    args = parser.parse_args(argv)
    extra = [item for pair in args.set for item in ("--set", pair)]
    kept: dict[int, list[dict]] = {g: [] for g in args.granularities}
    for _ in range(args.repeats):
        for granularity in args.granularities:
            kept[granularity].extend(run_once(granularity, args.iterations, args.cache, extra))
    summary = {
        granularity: {
            "iteration_s": statistics.median(m["iteration_s"] for m in metrics),
            "tokens_per_s": statistics.median(m["tokens_per_s"] for m in metrics),
            "iterations_measured": len(metrics),
        }
        for granularity, metrics in kept.items()
    }
    whole = summary[min(summary)]["iteration_s"]
    for granularity, row in summary.items():
        row["speedup_over_whole_batch"] = whole / row["iteration_s"]
        print(
            f"granularity {granularity:>3}: {row['iteration_s']:.3f} s/iteration, "
            f"{row['tokens_per_s']:.0f} tokens/s, {row['speedup_over_whole_batch']:.2f}x"
        )
    document = {
        "command": "python benchmarks/bench_streaming_hf.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "granularities": {str(g): row for g, row in summary.items()},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
