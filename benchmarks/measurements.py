"""The measured figures of the README and docs, rendered from the JSON artifacts the benchmarks wrote.

Usage::

    python benchmarks/measurements.py            # print every block
    python benchmarks/measurements.py --check    # exit 1 when a doc differs from what the artifacts give
    python benchmarks/measurements.py --write    # rewrite every block in the docs
    python benchmarks/measurements.py --add-validate-run runs/v.json --label quiet_run7   # a new Hopper run

Each block sits in its file between ``<!-- measured:NAME -->`` and ``<!-- /measured:NAME -->``;
``tests/test_measurements.py`` regenerates every block from the committed artifacts and fails when a file differs
(a figure edited by hand included), and checks that each artifact agrees with itself (its summary figures
recomputed from the per-iteration values it holds). Each artifact records the command that measured it, the
commit, date, cores and the 1-minute load average before and after (``benchmarks/suite.py``); the artifacts of
one study with several runs hold them all (``docs/data/validate_hopper.json``). Every figure here is a measurement
on this project's machine; the simulated figures are ``benchmarks/doc_figures.py``'s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import measured_docs as docs
import measured_gpu
import measured_validate as validate
import suite
from measured_docs import (
    MACHINE_SPEED_RUNS,
    MAIN_JOB_BENCHMARK,
    MAIN_JOB_RUNS,
    PIPELINING,
    PLANNER_TRACES,
    RAY_RUNS,
    STREAMING_RUNS,
    planner_means,
)
from suite import Block, artifact, conditions, fill, indented, load, plan_text, ratio_x

from rlinf.core.files import write_text_atomic

ROOT = Path(__file__).resolve().parent.parent
KIND = "measured"


# ---------------------------------------------------------------------------------- the main job, the machine
def main_job() -> str:
    """``rlinf train examples/hopper_ppo.yaml`` (profile, plan, train) measured by ``benchmarks/main_job.py``."""
    lines = [
        "| run | processor | whole command | profiling | iterations | median measured | median predicted | "
        "single iterations | load average |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for path in MAIN_JOB_RUNS:
        a = artifact(path)
        p = a["provenance"]
        its = [i["iteration_s"] for i in a["iterations"]]
        lines.append(
            f"| `{path}`, commit {p['commit']} | {p.get('processor', 'not recorded')} | {a['command_s']:.0f} s | "
            f"{a['profile_s']:.0f} s, {a['probe_plans']} probe plans | {len(its)} | "
            f"{1e3 * a['median_measured_iteration_s']:.1f} ms | {1e3 * a['median_predicted_iteration_s']:.1f} ms | "
            f"{1e3 * min(its):.1f} to {1e3 * max(its):.1f} ms | {load(p).removeprefix('load average ')} |"
        )
    chosen = {artifact(path)["chosen_plan"] for path in MAIN_JOB_RUNS}
    first = artifact(MAIN_JOB_RUNS[0])
    fewer = first["best_on_fewer_devices"]
    text = (
        f"Chosen plan: {' and '.join(f'`{plan_text(c)}`' for c in sorted(chosen))} "
        f"({'the same in every run' if len(chosen) == 1 else 'differing between runs'}), using "
        f"{first['chosen_devices_used']} of the {first['num_devices']} cores; the best plan on fewer cores "
        f"(`{plan_text(fewer['plan'])}`) was predicted {100 * fewer['slower_than_chosen']:.0f}% slower."
    )
    return "\n".join([*lines, "", fill(text)])


def machine_speed() -> str:
    """The machine's own speed (``benchmarks/machine_speed.py``): the same fixed work per core, binned."""
    first = artifact(MACHINE_SPEED_RUNS[0])
    lines = [
        f"In {first['bin_s']} s bins, a bin is slow when it takes over {first['slow_over_fast_threshold']}x the "
        "core's fast level:",
        "",
        "| run | commit, load average | slow bins, core 0 / 1 | both at once | a slow bin over a fast one, core 0 / 1 | "
        "longest slow phase, core 0 / 1 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for path in MACHINE_SPEED_RUNS:
        a = artifact(path)
        c0, c1 = a["cores"]["0"], a["cores"]["1"]
        lines.append(
            f"| `{path}` ({a['seconds']:.0f} s) | {conditions(a)} | {100 * c0['slow_fraction']:.0f}% / "
            f"{100 * c1['slow_fraction']:.0f}% | {100 * a['both_slow_fraction']:.1f}% | {c0['slow_over_fast']:.2f}x / "
            f"{c1['slow_over_fast']:.2f}x | {c0['longest_slow_s']:g} s / {c1['longest_slow_s']:g} s |"
        )
    return "\n".join(lines)


def order_bias() -> str:
    """The A/A test of validate's measurement protocol (``benchmarks/bench_order_bias.py``)."""
    a = artifact("docs/data/order_bias.json")
    one, two = a["protocols"]["one generation"], a["protocols"]["two generations"]
    spread = max(abs(r - 1) for r in one["ratios"] + two["ratios"])
    return fill(
        f"The plan `{plan_text(a['plan'])}` entered twice ({conditions(a)}, {a['provenance']['wall_s']:.0f} s, "
        f"{a['iterations']} iterations per entry): with one turn per entry, entry 0 first, entry 0 measured slower "
        f"in {one['entry0_slower']} of {one['runs']} runs (ratios of medians "
        f"{', '.join(f'{r:.4f}' for r in one['ratios'])}; mean {one['mean_ratio']:.4f}); with two turns per entry in "
        f"opposite orders the ratios were {', '.join(f'{r:.4f}' for r in two['ratios'])} (mean "
        f"{two['mean_ratio']:.4f}; entry 0 slower in {two['entry0_slower']} of {two['runs']}). No bias towards either "
        f"entry is left, but one plan measures up to {100 * spread:.1f}% apart from itself: plans whose measured "
        "times differ by less than that are a tie that one run cannot order."
    )


# ------------------------------------------------------------------------------------------ the big table
def benchmarks_table() -> str:
    """Every benchmark's headline, its command and its conditions (details on the page each row names)."""
    h = artifact("docs/hopper_learning.json")
    s = artifact("docs/bench_scaling.json")
    pipe = {label: artifact(path) for label, path in PIPELINING.items()}
    g = artifact("docs/grpo_executor_learning.json")
    add = artifact("docs/grpo_arith_learning.json")
    hf = artifact("docs/grpo_hf_learning.json")
    streaming = [artifact(path) for path in STREAMING_RUNS]
    auto_h, auto_g = artifact("docs/auto_mode_hopper.json"), artifact("docs/grpo_auto_mode.json")
    kill = artifact("docs/data/kill_detection.json")
    means = planner_means()
    rows = [
        ("Hopper learning, PPO from a random policy, seed 0", "python benchmarks/learn_hopper.py --out docs/hopper_learning.png",
         f"mean return first >= {h['target']:,.0f} at {h['first_iteration_at_or_above_target_env_steps']:,} env steps; "
         f"{docs.last_mean(docs.hopper_returns(h)):,.0f} at {h['env_steps']:,} (mean of the last {docs.NUM_LAST} "
         f"iterations; {h['wall_s']:.0f} s)", conditions(h), "docs/executor.md"),
        ("a second core and pipelining (same process, seeds and work)", "python benchmarks/bench_scaling.py --iterations 5 --out docs/bench_scaling.json",
         f"best 2-core over best 1-core plan: Hopper {ratio_x(s['hopper_best_2dev_over_1dev'])}, HalfCheetah "
         f"{ratio_x(s['halfcheetah_best_2dev_over_1dev'])}; 2 loop stages vs 1: {ratio_x(s['pipelining_2stages_over_1'])}; "
         f"best plan vs a plain single-process loop {ratio_x(s['single_process_ratio'])}; {s['per_op_overhead_us']:.0f} us "
         "executor overhead per op", f"commit {s['details']['commit']}, {load(s['details'])}", "docs/executor.md"),
        ("env pipelining, 2 loop stages vs 1 on one disaggregated plan", "python benchmarks/bench_pipelining.py --num-envs 32 --hidden 1024 1024 --json docs/bench_pipelining_1024.json",
         "; ".join(f"{label}: {ratio_x(a['rollout_ratio_2_over_1'])} rollout env steps/s "
                   f"({ratio_x(a['iteration_ratio_2_over_1'])} whole iteration)" for label, a in pipe.items()),
         "; ".join(conditions(a) for a in pipe.values()), "docs/executor.md"),
        (f"GRPO, the addition task (161,856-parameter Qwen2), learning through the executor (warm start degraded on purpose: `teacher_error_rate: {add['teacher_error_rate']}`)",
         "python benchmarks/learn_grpo_arith.py",
         f"{'test-set' if add.get('reported_set') == 'test' else 'held-out'} accuracy {100 * add['warm_start_accuracy']:.1f}% -> "
         f"{100 * docs.last_mean([c['heldout_accuracy'] for c in add['curve']]):.1f}% (mean of the last {docs.NUM_LAST} "
         f"evaluations) in {add['wall_s'] / 60:.1f} min", conditions(add), "docs/grpo.md"),
        (f"GRPO arithmetic learning through the executor, the former arithmetic workload (warm start degraded on purpose: `teacher_error_rate: {g['teacher_error_rate']}`)",
         "python benchmarks/learn_grpo_arith.py at commit 31040b3",
         f"held-out accuracy {100 * g['warm_start_accuracy']:.1f}% -> "
         f"{100 * docs.last_mean([c['heldout_accuracy'] for c in g['curve']]):.1f}% (mean of the last {docs.NUM_LAST} "
         f"evaluations) in {g['wall_s'] / 60:.1f} min", conditions(g), "docs/grpo.md"),
        ("GRPO on a Hugging Face model (Qwen2 architecture, 189k parameters)", "python benchmarks/learn_grpo_hf.py",
         f"test-set accuracy {100 * hf['warm_start_accuracy']:.1f}% -> {100 * hf['last_mean_accuracy']:.1f}% "
         f"(mean of the last {hf['num_last_evaluations']} evaluations; {hf['gain_points']:+.1f} points) in "
         f"{hf['wall_s'] / 60:.1f} min", conditions(hf), "docs/grpo_hf.md"),
        (f"GRPO long tail (forced: `long_tail_fraction: {streaming[0]['long_tail']['long_tail_fraction']}`), streaming vs whole-batch hand-off, the former arithmetic workload",
         "python benchmarks/bench_streaming.py at commit 31040b3 (removed with that workload)",
         "; ".join(f"granularity {k} vs 1: " + " and ".join(ratio_x(a["speedup_over_whole_batch"][k]) for a in streaming)
                   for k in streaming[0]["speedup_over_whole_batch"]) + f" ({len(streaming)} runs)",
         "; ".join(conditions(a) for a in streaming), "docs/grpo.md"),
        ("auto vs fixed modes, Hopper (each fixed mode at its best stage count)", "python benchmarks/bench_auto_mode.py --iterations 12 --json docs/auto_mode_hopper.json",
         f"auto {ratio_x(auto_h['auto_over_collocated'])} the best collocated plan, {ratio_x(auto_h['auto_over_best_fixed'])} "
         "the best fixed plan", conditions(auto_h), "docs/plan_then_run.md"),
        ("auto vs fixed modes, GRPO arithmetic, the former arithmetic workload (each fixed mode at its best granularity)",
         "python benchmarks/bench_auto_mode.py --config examples/grpo_arith.yaml --set eval.enabled=false --profile-budget 300 --iterations 12 --json docs/grpo_auto_mode.json",
         f"auto {ratio_x(auto_g['auto_over_collocated'])} the best collocated plan, {ratio_x(auto_g['auto_over_best_fixed'])} "
         "the best fixed plan", conditions(auto_g), "docs/grpo.md"),
        ("Ray vs local backend, Hopper, each fixed mode", "python benchmarks/bench_ray.py --json docs/ray_vs_local.json",
         "; ".join(f"run {n}: " + ", ".join(f"{ratio_x(m['ratio'])} {mode}" for mode, m in artifact(path)["modes"].items())
                   for n, path in enumerate(RAY_RUNS, start=1)), "; ".join(conditions(artifact(p)) for p in RAY_RUNS), "docs/ray.md"),
        ("kill -9 of a worker in the middle of an op, to the error naming it", "python benchmarks/bench_kill_detection.py",
         f"local {' / '.join(map(str, kill['detected_ms']['local']))} ms, Ray {' / '.join(map(str, kill['detected_ms']['ray']))} ms",
         conditions(kill), "docs/ray.md"),
        ("planner search incl. simulating every candidate, 1.5B / 7B / 32B traces, one core", "taskset -c 1 python3 -m pytest -m benchmark --benchmark-enable tests/bench_planner.py",
         "; ".join(" / ".join(f"{means[(n, t)]:.3f}" for t in PLANNER_TRACES.values()) + f" s at {n} devices" for n in (256, 1024)),
         "see docs/planner.md", "docs/planner.md"),
    ]  # fmt: skip
    lines = ["| what | command | result | conditions | details |", "| --- | --- | --- | --- | --- |"]
    lines += [
        f"| {what} | `{command}` | {result} | {cond} | `{doc}` |" for what, command, result, cond, doc in rows
    ]
    return "\n".join(lines)


QUIET_CORES = 0.1
"""Other processes' cores under which a run counts as having trained on a quiet machine."""
ONE_MEASURE = "measured / predicted - 1"
"""rlinf's one error measure (positive: slower than predicted); a spread is its absolute value."""


def accuracy() -> str:
    """The README's accuracy paragraph: the main job over every run of its benchmark, then every validate
    prediction pooled, in one error measure."""
    a = artifact(MAIN_JOB_BENCHMARK)
    s = a["summary"]
    done = [r for r in a["runs"] if not r["failed"]]
    quiet = [r["prediction"]["bias"] for r in done if (r["others_cores_train"] or 0.0) < QUIET_CORES]
    failed = f"; {s['failed']} failed and count as outside" if s["failed"] else ""
    batches = len(a.get("earlier_batches", [])) + 1
    main = (
        f"One error measure throughout: {ONE_MEASURE} (positive: slower than predicted). The main job (`rlinf train "
        f"examples/hopper_ppo.yaml`), run {s['runs']} times by `python benchmarks/main_job.py` ({batches} batches, "
        f"every run counted{failed}): the median run measured its median iteration **{s['median_bias']:+.1%}** "
        f"from the prediction it printed ({s['min_bias']:+.1%} to {s['max_bias']:+.1%}), and **{s['inside_interval']} "
        f"of {s['runs']}** measured inside the interval it printed; the {len(quiet)} that trained with nothing else "
        f"running were {min(quiet):+.1%} to {max(quiet):+.1%} off (`{MAIN_JOB_BENCHMARK}`). "
    )
    return fill(main + validate.accuracy())


def main_job_runs() -> str:
    """Every run of ``benchmarks/main_job.py``: its prediction, interval, measurement and the load it ran under."""
    a = artifact(MAIN_JOB_BENCHMARK)
    lines = [
        "| run | predicted (held out) | interval | measured median | error | inside | the choosing half | the whole "
        "profile (before) | other processes' cores while training | load average |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in a["runs"]:
        if r["failed"]:
            lines.append(f"| {r['run']} | failed (exit {r['returncode']}) | | | | no | | | | |")
            continue
        p = r["prediction"]
        low, high = p["interval_s"] if p["interval_s"] else (None, None)
        interval = "-" if low is None else f"{1e3 * low:.1f} to {1e3 * high:.1f} ms"
        cores = " / ".join(
            "-" if c is None else f"{c:.2f}" for c in (r["others_cores_profile"], r["others_cores_train"])
        )
        lines.append(
            f"| {r['run']} | {1e3 * p['predicted_iteration_s']:.1f} ms | {interval} | {1e3 * p['measured_median_s']:.1f} ms "
            f"| {p['bias']:+.1%} | {'yes' if p.get('inside_interval') else 'no'} | {1e3 * p['choosing_half_s']:.1f} ms | "
            f"{1e3 * r['full_profile_choice']['predicted_s']:.1f} ms | {cores} | "
            f"{r['load_average_before'][0]:.1f} -> {r['load_average_after'][0]:.1f} |"
        )
    s = a["summary"]
    done = [r for r in a["runs"] if not r["failed"]]
    whole = [r["full_profile_s"] / r["prediction"]["predicted_iteration_s"] - 1 for r in done]
    former = [r["prediction"]["measured_median_s"] / r["full_profile_s"] - 1 for r in done]
    plans = sorted({r["chosen_plan"] for r in done})
    quiet = [r["prediction"]["bias"] for r in done if (r["others_cores_train"] or 0.0) < QUIET_CORES]
    busy = [r["prediction"]["bias"] for r in done if (r["others_cores_train"] or 0.0) >= QUIET_CORES]
    by_load = " ".join(
        f"{len(group)} runs trained while other processes took {what} cores: errors {min(group):+.1%} to "
        f"{max(group):+.1%}, median {statistics.median(group):+.1%}."
        for group, what in ((quiet, f"under {QUIET_CORES}"), (busy, f"{QUIET_CORES} or more"))
        if group
    )
    text = (
        f"Error = {ONE_MEASURE} of the run's median iteration (iterations 2-60). Other processes' cores while the "
        f"run trained: busy CPU time of the machine less the run's own processes' (`benchmarks/suite.py`); the "
        f"artifact's figure for the profile is left out: it counted the profile's short-lived worker processes as "
        f"other processes' (fixed since, for later runs). Median over the {s['runs']} runs "
        f"{s['median_bias']:+.1%}, {s['slower_than_predicted']} slower than predicted; {s['inside_interval']} of "
        f"{s['runs']} inside their interval. {by_load} The choosing half predicted its own choice "
        f"{s['median_choosing_over_held_out']:+.1%} from the held-out half (the median over runs: the winner's curse, "
        f"measured); the whole profile's prediction of the same plan (how rlinf predicted before this change) was a "
        f"median {statistics.median(whole):+.1%} from the held-out one and would have been "
        f"{statistics.median(former):+.1%} off (median). Chosen: "
        + ", ".join(f"`{plan_text(plan)}`" for plan in plans)
        + f". `{MAIN_JOB_BENCHMARK}`; "
        + "; ".join(
            f"batch {n}: commit {b['commit']}, {load(b).removeprefix('load average ')} load average, {b['wall_s'] / 60:.0f} min"
            for n, b in enumerate([*a.get("earlier_batches", []), a["provenance"]], start=1)
        )
        + "."
    )
    return "\n".join([*lines, "", fill(text)])


SUITE = "docs/data/test_suite.json"


def suite_time() -> str:
    """The README's sentence on the default suite's time, from its recorded run (``benchmarks/suite_time.py``)."""
    if not (ROOT / SUITE).is_file():
        return fill(
            "No recorded run of the default suite yet (two pytest-xdist workers, each module whole on one worker, "
            f"the longest first): `python benchmarks/suite_time.py --artifact {SUITE}` records one."
        )
    a = artifact(SUITE)
    counts = ", ".join(f"{n} {word}" for word, n in a["outcomes"].items())
    verdict = "" if a["returncode"] == 0 else f" (it failed: exit {a['returncode']})"
    return fill(
        f"The default suite runs on two pytest-xdist workers, each module whole on one worker (`--dist loadscope`), "
        f"the longest modules first (`tests/conftest.py`): its recorded run took **{a['wall_s'] / 60:.1f} minutes** "
        f"on 2 cores ({counts}{verdict}; `python benchmarks/suite_time.py`, `{SUITE}`, {conditions(a)})."
    )


def analytic_line() -> str:
    """The README's sentences on the analytic model, from ``docs/analytic_validation.json``."""
    result = artifact("docs/analytic_validation.json")
    now, cot, priced = result["summary"], result["summary_long_cot"], result["summary_priced"]
    borrowed = result["summary_long_cot_no_per_sequence"]
    pairs = result["asynchronous"]["every_pair"]
    right, close = sum(p["direction"] for p in pairs), sum(p["within"] for p in pairs)
    return fill(
        f"Analytic model, nothing fitted: {now['num_runs']} published RL runs' step times at a median "
        f"{now['median_ratio_exact']:.3f} of the reported (worst {priced['worst_ratio']:.2f}, engine modes priced), "
        f"long chain-of-thought {cot['median_ratio_exact']:.3f} with vLLM V1's per-sequence decode cost borrowed "
        f"({borrowed['median_ratio_exact']:.3f} without); {right} of {len(pairs)} published async/sync pairs in the "
        f"published direction, {close} within 15% (`docs/analytic_validation.md`)."
    )


BLOCKS = (
    Block("README.md", "accuracy", accuracy),
    Block("README.md", "analytic", analytic_line),
    Block("README.md", "suite-time", suite_time),
    Block("README.md", "gpu", lambda: fill(measured_gpu.readme_line())),
    Block("docs/measurements.md", "accuracy", accuracy),
    Block("docs/measurements.md", "validate-hopper-runs", validate.hopper_table),
    Block("docs/measurements.md", "validate-hopper-tallies", validate.hopper_tallies),
    Block("docs/measurements.md", "validate-hopper-first-run", validate.hopper_first_run),
    Block("docs/measurements.md", "validate-hopper-replay", validate.hopper_replay),
    Block("docs/measurements.md", "machine-speed", machine_speed),
    Block("docs/measurements.md", "order-bias", order_bias),
    Block("docs/measurements.md", "validate-grpo-summary", validate.grpo_summary),
    Block("docs/measurements.md", "validate-grpo-runs", validate.grpo_runs_detail),
    Block("docs/measurements.md", "main-job", main_job),
    Block("docs/measurements.md", "main-job-runs", main_job_runs),
    Block("docs/measurements.md", "benchmarks", benchmarks_table),
    Block("docs/grpo.md", "validate-grpo-summary", validate.grpo_summary),
    Block("docs/grpo.md", "grpo-learning", docs.grpo_learning),
    Block("docs/grpo.md", "grpo-arith-learning", lambda: docs.grpo_learning("docs/grpo_arith_learning.json")),
    Block("docs/grpo.md", "grpo-streaming", docs.grpo_streaming),
    Block("docs/grpo.md", "auto-mode-grpo", lambda: docs.auto_mode("docs/grpo_auto_mode.json")),
    Block("docs/plan_then_run.md", "auto-mode-hopper", lambda: docs.auto_mode("docs/auto_mode_hopper.json")),
    Block("docs/planner.md", "planner-speed", docs.planner_speed),
    Block("docs/planner_bruteforce.md", "planner-optimality", docs.planner_optimality),
    Block("docs/planner.md", "planner-optimality-summary", docs.planner_optimality_summary),
    Block("docs/planner.md", "staleness-learning", docs.staleness_learning),
    Block("docs/planner.md", "staleness-learning-grpo", lambda: docs.staleness_learning("grpo")),
    Block("docs/planner.md", "staleness-timing", docs.staleness_timing),
    Block("docs/planner.md", "staleness-timing-grpo", docs.staleness_timing_grpo),
    Block("docs/grpo.md", "staleness-timing-grpo", docs.staleness_timing_grpo),
    Block("docs/prediction_bias.md", "interference", docs.interference),
    Block("docs/prediction_bias.md", "probe-vs-run", docs.probe_vs_run),
    Block("docs/prediction_bias.md", "winners-curse", docs.winners_curse),
    Block("docs/prediction_bias.md", "main-job-runs", main_job_runs),
    Block("docs/prediction_bias.md", "main-job-breakdown", docs.main_job_breakdown),
    Block("docs/mutation.md", "mutation", docs.mutation),
    Block("docs/prediction_bias.md", "validate-breakdown", docs.validate_breakdown),
    Block("README.md", "planner-optimality-summary", indented(docs.planner_optimality_summary, "  ")),
    Block("docs/ray.md", "ray-vs-local", docs.ray_table),
    Block("docs/ray.md", "kill-detection", docs.kill_detection),
    Block("docs/executor.md", "bench-scaling", docs.scaling_table),
    Block("docs/executor.md", "shape-sweep", docs.shape_sweep),
    Block("docs/executor.md", "pipelining", docs.pipelining),
    Block("docs/executor.md", "hopper-learning", docs.hopper_learning),
    Block("docs/grpo_hf.md", "hf-learning", docs.hf_learning),
    Block("docs/grpo_hf.md", "hf-streaming", lambda: docs.hf_streaming("docs/grpo_hf_streaming.json")),
    Block("docs/gpu.md", "gpu-check", measured_gpu.gpu_check),
    Block("docs/gpu.md", "gpu-rollout", measured_gpu.rollout_table),
    Block("docs/gpu.md", "gpu-predictions", indented(measured_gpu.predictions, "  ")),
    Block("docs/gpu.md", "gpu-window", indented(measured_gpu.window_text, "  ")),
    Block("docs/gpu.md", "gpu-hopper-cause", indented(lambda: fill(measured_gpu.hopper_cause_text()), "  ")),
    Block(
        "docs/grpo_hf.md",
        "hf-streaming-loaded",
        lambda: docs.hf_streaming("docs/data/grpo_hf_streaming_loaded.json"),
    ),
)


def compute() -> dict[tuple[str, str], str]:
    return suite.compute(BLOCKS)


def read_docs() -> dict[str, str]:
    return suite.read(BLOCKS)


def differences(texts: dict[str, str], bodies: dict[tuple[str, str], str]) -> list[str]:
    return suite.differences(KIND, texts, bodies)


def add_validate_run(path: Path, label: str, note: str | None) -> None:
    """Append a ``benchmarks/validate_artifact.py`` artifact of ``examples/hopper_ppo.yaml`` to the Hopper validate
    study. Its profile (``ARTIFACT_trace.json``) stays out of the tree: commit it nowhere, keep it with the run, and
    replay it with ``python benchmarks/replay_validate.py --profile LABEL=FILE --write``."""
    study_path = ROOT / validate.HOPPER
    study = json.loads(study_path.read_text())
    if label in {run["label"] for run in study["runs"]}:
        raise SystemExit(f"{validate.HOPPER} already holds a run labelled {label!r}")
    data = json.loads(path.read_text())
    if not data.get("rlinf_command", "").startswith("rlinf validate examples/hopper_ppo.yaml"):
        raise SystemExit(f"{path} is not a validate artifact of examples/hopper_ppo.yaml")
    trace = data.pop("trace")
    run: dict[str, Any] = {"label": label, "condition": "loaded" if label.startswith("loaded") else "quiet"}
    if note:
        run["note"] = note
    run.update({"profile": {"path": trace}, **data})
    study["runs"].append(run)
    write_text_atomic(study_path, json.dumps(study, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = suite.check_write_arguments(parser, "rewrite every block")
    action.add_argument("--add-validate-run", type=Path, metavar="ARTIFACT", help="add a Hopper validate run")
    parser.add_argument(
        "--label", help="the added run's label (loaded... when other processes loaded the cores)"
    )
    parser.add_argument("--note", help="what was special about the added run, in words")
    args = parser.parse_args(argv)
    if args.add_validate_run:
        if not args.label:
            parser.error("--add-validate-run needs --label")
        add_validate_run(args.add_validate_run, args.label, args.note)
        return 0
    return suite.check_or_write(KIND, BLOCKS, args, "measured figures differ from their artifacts")


if __name__ == "__main__":
    sys.exit(main())
