"""Long-tail benchmark: streaming rollouts (granularity > 1) vs whole-batch hand-off (granularity 1) for GRPO on
arithmetic, with the real executor.

    python benchmarks/bench_streaming.py [--iterations 8] [--repeats 3] [--granularities 4 8]

Skewed response lengths: most responses of the warm-started policy end after the answer (~5 tokens), but the
responses of a ``--long-tail-fraction`` of the prompts may not emit EOS before ``--max-new-tokens`` (EOS
suppressed, like vLLM's ``min_tokens``), so those groups finish last. Rollout and reward run on core 0, inference
and actor on core 1 (the hybrid plan). With granularity 1 the inference/actor core waits for the slowest group;
with granularity > 1 it scores and trains on the groups that finished early while the tail is still generating.

Runs of each granularity are interleaved (``--repeats``) because the cores are shared. Reported: the median over
all measured iterations (the first of each run dropped as warm-up) of iteration time, generated tokens/s and each
component's busy time per granularity, the speed-up over granularity 1, and the Gantt chart of the last iteration
of the last run of each granularity (``docs/grpo_streaming_g<N>.png``); a JSON artifact (provenance, the summary
and every run's per-iteration times and tokens/s) goes to ``--json``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import attrs
import provenance

from executor.devices import available_cores, cpu_devices
from rlinf.app.jobs import get_job, load_job_config
from rlinf.app.runner import train
from rlinf.workloads.arith.config import ArithGrpoConfig

JOB = get_job("grpo_arith")
BUSY = ("rollout", "reward", "inference", "actor")


def run_once(config: ArithGrpoConfig, granularity: int, gantt: Path) -> tuple[str, list[dict]]:
    """Train a hybrid run with ``granularity`` micro-batches per stream edge; its plan and per-iteration metrics
    (the first iteration dropped as warm-up). Copies the run's Gantt chart to ``gantt``."""
    config = attrs.evolve(config, execution=attrs.evolve(config.execution, granularity=granularity))
    plan, logical = JOB.fixed_plan("hybrid", 2, config)
    JOB.check_plan(plan, config)
    devices = cpu_devices(logical, available_cores()[:2])
    with tempfile.TemporaryDirectory() as run_dir:
        result = train(JOB, config, plan, logical, run_dir, devices=devices, progress=False)
        gantt.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(run_dir) / "gantt.png", gantt)
    return plan.describe(), list(result.metrics[1:])


def summarize(plan: str, kept: list[dict], gantt: Path) -> dict[str, float | str | int]:
    """Medians over the kept iterations of every run of one granularity."""
    out: dict[str, float | str | int] = {"plan": plan, "iterations_measured": len(kept), "gantt": str(gantt)}
    for key in ("iteration_s", "tokens_per_s", "rollout_s", "tokens", *(f"{n}_busy_s" for n in BUSY)):
        out[key] = statistics.median(m[key] for m in kept)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="examples/grpo_arith.yaml")
    parser.add_argument("--iterations", type=int, default=8, help="iterations per run (the first is dropped)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per granularity, interleaved")
    parser.add_argument(
        "--granularities", type=int, nargs="+", default=[4, 8], help="streaming runs' micro-batches"
    )
    parser.add_argument("--long-tail-fraction", type=float, default=0.125)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--docs", type=Path, default=Path("docs"), help="where the Gantt PNGs go")
    parser.add_argument("--json", type=Path, default=Path("docs/grpo_streaming.json"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    args = parser.parse_args(argv)
    if len(available_cores()) < 2:
        print("bench_streaming needs 2 CPU cores", file=sys.stderr)
        return 2
    started = provenance.begin("python benchmarks/bench_streaming.py", argv)
    overrides = [
        f"grpo.num_iterations={args.iterations}",
        f"grpo.long_tail_fraction={args.long_tail_fraction}",
        f"grpo.max_new_tokens={args.max_new_tokens}",
        "execution.heldout_eval=false",
        "execution.checkpoint_every=100000",
        *args.set,
    ]
    _, config = load_job_config(args.config, overrides)
    granularities = [1, *args.granularities]
    kept: dict[int, list[dict]] = {g: [] for g in granularities}
    plans: dict[int, str] = {}
    runs: list[dict] = []
    for repeat in range(args.repeats):
        order = granularities if repeat % 2 == 0 else granularities[::-1]
        for granularity in order:
            gantt = args.docs / f"grpo_streaming_g{granularity}.png"
            plans[granularity], metrics = run_once(config, granularity, gantt)
            kept[granularity].extend(metrics)
            runs.append(
                {
                    "repeat": repeat,
                    "granularity": granularity,
                    "iteration_s": [m["iteration_s"] for m in metrics],
                    "tokens_per_s": [m["tokens_per_s"] for m in metrics],
                }
            )
            median_ms = 1e3 * statistics.median(m["iteration_s"] for m in metrics)
            print(
                f"repeat {repeat} granularity {granularity}: median iteration {median_ms:.0f} ms", flush=True
            )
    results = {g: summarize(plans[g], kept[g], args.docs / f"grpo_streaming_g{g}.png") for g in granularities}
    whole = float(results[1]["iteration_s"])
    speedups = {g: whole / float(results[g]["iteration_s"]) for g in args.granularities}
    summary = {
        "long_tail": {
            "long_tail_fraction": config.grpo.long_tail_fraction,
            "max_new_tokens": config.grpo.max_new_tokens,
        },
        "results": {str(g): r for g, r in results.items()},
        "speedup_over_whole_batch": {str(g): v for g, v in speedups.items()},
        "runs": runs,
    }
    written = provenance.write_artifact(args.json, summary, started)
    for granularity in granularities:
        r = results[granularity]
        extra = "" if granularity == 1 else f", {speedups[granularity]:.2f}x granularity 1"
        print(
            f"granularity {granularity}: iteration {1e3 * float(r['iteration_s']):.0f} ms, "
            f"{float(r['tokens_per_s']):.0f} tokens/s{extra}"
        )
    load = written["provenance"]
    print(
        f"load average {load['load_average_before'][0]} -> {load['load_average_after'][0]}; wrote {args.json}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
