"""The measured figures of the docs' pages on each part, rendered from their JSON artifacts.

The parts: executor, GRPO, Ray, planner, plan-then-run.
Part of ``benchmarks/measurements.py``, which writes these blocks into the docs."""

from __future__ import annotations

import statistics
from typing import Any

import bench_auto_mode
import certify_planner
import yaml
from suite import artifact, conditions, fill, load, plan_text, ratio_x

PLANNER_TRACES = {
    "1.5B": "traces/grpo_1.5b_h100.json",
    "7B": "traces/grpo_7b_h100.json",
    "32B": "traces/grpo_32b_h200.json",
}
RAY_RUNS = ("docs/ray_vs_local.json", "docs/ray_vs_local_run2.json")
STREAMING_RUNS = ("docs/grpo_streaming_run1.json", "docs/grpo_streaming.json")
PIPELINING = {
    "16 envs, 256x256": "docs/bench_pipelining_default.json",
    "32 envs, 1024x1024": "docs/bench_pipelining_1024.json",
}
MAIN_JOB_RUNS = (
    "docs/data/main_job_hopper.json",
    "docs/data/main_job_hopper_xeon.json",
    "docs/data/main_job_hopper_run3.json",
    "docs/data/main_job_hopper_run4.json",
    "docs/data/main_job_hopper_run5.json",
    "docs/data/main_job_hopper_run6.json",
    "docs/data/main_job_hopper_run7.json",
    "docs/data/main_job_hopper_run8.json",
)
"""Single runs of the main job kept as artifacts before issue 47 (runs not kept are not here: not the accuracy figure)."""
MAIN_JOB_BENCHMARK = "docs/data/main_job_runs.json"
"""``python benchmarks/main_job.py --runs 10``: fresh runs of the main job, every one counted (the README's figure)."""
MACHINE_SPEED_RUNS = ("docs/data/machine_speed.json", "docs/data/machine_speed_run2.json")


# ----------------------------------------------------------------------------------------------- planner
def planner_means() -> dict[tuple[int, str], float]:
    """Mean search seconds per (devices, trace) of the planner benchmark (pytest-benchmark's JSON)."""
    a = artifact("docs/data/bench_planner.json")
    return {
        (b["params"]["num_devices"], b["params"]["trace_path"]): b["stats"]["mean"] for b in a["benchmarks"]
    }


def planner_speed() -> str:
    a, means = artifact("docs/data/bench_planner.json"), planner_means()
    rows = [
        f"| {label} | {means[(256, trace)]:.3f} s | {means[(1024, trace)]:.3f} s |"
        for label, trace in PLANNER_TRACES.items()
    ]
    head = (
        f"Commit {a['commit_info']['id'][:7]}, {a['machine_info']['cpu']['brand_raw']}, load average "
        f"{a['load_average_before'][0]:.1f} -> {a['load_average_after'][0]:.1f}, mean of 3 rounds:"
    )
    return "\n".join([head, "", "| trace | 256 devices | 1024 devices |", "|---|---|---|", *rows])


def planner_optimality_summary() -> str:
    """The largest gap of the planner's plan to the certified optimum at 32 and 64 devices, in one sentence."""
    certificates = certify_planner.certificates_of(artifact(certify_planner.ARTIFACT))
    return fill(certify_planner.certificate_summary(certificates, plans=False))


def planner_optimality() -> str:
    """The planner's plan against the certified optimum of its space at 32 and 64 devices
    (``benchmarks/certify_planner.py``): the table, the largest gap and the run's conditions."""
    a = artifact(certify_planner.ARTIFACT)
    certificates = certify_planner.certificates_of(a)
    p = a["provenance"]
    return "\n".join(
        [
            certify_planner.certificate_table(certificates),
            "",
            fill(
                f"{certify_planner.certificate_summary(certificates)} `{p['command']}` took "
                f"{p['wall_s']:.0f} s in all (commit {p['commit']}, {p['cores']} cores, {load(p)})."
            ),
        ]
    )


# ------------------------------------------------------------------------------------------------- ray
def ray_table() -> str:
    lines = [
        "| run | plan (Hopper, 2 cores) | ops per iteration | local | Ray | **Ray / local** |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for number, path in enumerate(RAY_RUNS, start=1):
        a = artifact(path)
        for mode, m in a["modes"].items():
            label = f"{number} (`{path}`, {conditions(a)})" if mode == next(iter(a["modes"])) else ""
            local, ray = (statistics.median(m[side]["seconds"]) for side in ("local", "ray"))
            lines.append(
                f"| {label} | `{plan_text(m['plan'])}` | {m['num_ops']} | {1e3 * local:.1f} ms | {1e3 * ray:.1f} ms | "
                f"**{m['ratio']:.2f}** |"
            )
    return "\n".join(lines)


def kill_detection() -> str:
    a = artifact("docs/data/kill_detection.json")
    ms = a["detected_ms"]
    return fill(
        f"Measured on this 2-core machine (`python benchmarks/bench_kill_detection.py`: `{a['test_command']}`, "
        f"{len(ms['local'])} runs; {conditions(a)}; `docs/data/kill_detection.json`), from the kill to the error: "
        f"local backend {' and '.join(map(str, ms['local']))} ms, Ray backend {' and '.join(map(str, ms['ray']))} "
        "ms; the tests assert < 5 s."
    )


# -------------------------------------------------------------------------------------------- executor
def shape_sweep() -> str:
    """``benchmarks/shape_sweep.py``: batch shapes x plans, each run for an iteration under the watchdog."""
    a = artifact("docs/data/shape_sweep.json")
    counts, cases = a["counts"], a["cases"]
    grpo = sum(c["case"].startswith("grpo ") for c in cases)
    slowest = max(c["seconds"] for c in cases if c["result"] == "ran")
    return fill(
        f"Measured (`{a['provenance']['command']}`; {conditions(a)}, {a['provenance']['wall_s'] / 60:.0f} min; "
        f"`docs/data/shape_sweep.json`): {len(cases)} cases ({len(cases) - grpo} embodied PPO, {grpo} GRPO), "
        f"watchdog floor {a['watchdog_s']:.0f} s: **{counts['ran']} ran, {counts['refused']} refused (each in one "
        f"line), {counts['stalled']} stalled, {counts['failed']} failed**; the slowest case that ran took "
        f"{slowest:.1f} s."
    )


SCALING_TARGETS = {
    "hopper_best_2dev_over_1dev": "1.4",
    "halfcheetah_best_2dev_over_1dev": "1.5",
    "pipelining_2stages_over_1": "1.2",
    "single_process_ratio": "1.8",
}


def _best(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return max(rows, key=lambda r: r["env_steps_per_s"])


def scaling_table() -> str:
    a = artifact("docs/bench_scaling.json")
    d, ceiling = a["details"], a["ceiling"]
    best = {key: _best(rows) for key, rows in d["candidates"].items()}
    stages = {s: _best([r for r in d["candidates"]["default_2dev"] if r["stages"] == s]) for s in (1, 2)}
    threads = d["plain_loop_env_steps_per_s_by_threads"]
    separate = d["one_process_per_worker"]
    shared = a["shared_processes_over_one_per_worker"]

    def rate(row: dict[str, Any]) -> str:
        stages = f"{row['stages']} stage{'s' if row['stages'] > 1 else ''}"
        return f"{plan_text(row['plan'])}, {stages}: {row['env_steps_per_s']:,.0f} env steps/s"

    rows = [
        ("hopper_best_2dev_over_1dev", "Hopper-v5, CleanRL's settings (8 envs x 256 steps, 10 epochs, 32 "
         f"minibatches): best 2-device plan ({rate(best['hopper_2dev'])}) over the best 1-device plan "
         f"({rate(best['hopper_1dev'])})", f"**{a['hopper_best_2dev_over_1dev']:.2f}**",
         f"{ceiling['hopper_2dev_over_1dev']:.2f}"),
        ("halfcheetah_best_2dev_over_1dev", "HalfCheetah-v5, 16 envs x 64 steps, 256x256 policy: best 2-device "
         f"plan ({rate(best['halfcheetah_2dev'])}) over the best 1-device plan ({rate(best['halfcheetah_1dev'])})",
         f"**{a['halfcheetah_best_2dev_over_1dev']:.2f}**", f"{ceiling['halfcheetah_2dev_over_1dev']:.2f}"),
        ("pipelining_2stages_over_1", "default Hopper config, 2 loop stages vs 1, each on its best 2-device "
         f"layout ({rate(stages[2])}; {rate(stages[1])})", f"**{a['pipelining_2stages_over_1']:.2f}**", ""),
        ("single_process_ratio", "the best rlinf plan vs a plain loop calling the same workers' maths in one "
         f"process ({threads['1']:,.0f} env steps/s with 1 torch thread, {threads['2']:,.0f} with 2)",
         f"**{a['single_process_ratio']:.2f}**", f"{ceiling['single_process_ratio']:.2f}"),
        ("shared_processes_over_one_per_worker", "the best 1-device and the best 2-device Hopper plan as measured "
         "(a core's workers in one process) over the same plans with one process per worker "
         f"({separate['hopper_1dev']['env_steps_per_s']:,.0f} and {separate['hopper_2dev']['env_steps_per_s']:,.0f} "
         "env steps/s)", f"**{shared['hopper_1dev']:.2f}** and **{shared['hopper_2dev']:.2f}**", ""),
        ("per_op_overhead_us", "median executor overhead per compute op: start after the ops it follows ended "
         "plus span outside `worker.compute`", f"**{a['per_op_overhead_us']:.0f} us**", ""),
        ("driver_cpu_share", "the driver's CPU time over the iteration's wall time (median over plans)",
         f"**{100 * a['driver_cpu_share']:.1f}%**", ""),
    ]  # fmt: skip
    head = (
        f"Commit {d['commit']}, {load(d)}, {d['wall_s']:.0f} s; each figure the median of iterations 2-"
        f"{d['iterations_per_plan']} of one run per plan:"
    )
    lines = [
        head,
        "",
        "| key | what | measured | ceiling: no 2-core plan can beat | issue's target |",
        "| --- | --- | ---: | ---: | ---: |",
        *(
            f"| `{key}` | {what} | {shown} | {top} | {SCALING_TARGETS.get(key, '')} |"
            for key, what, shown, top in rows
        ),
    ]
    return "\n".join(lines)


def pipelining() -> str:
    runs = {label: artifact(path) for label, path in PIPELINING.items()}
    head = "Commit " + ", ".join(
        f"{a['provenance']['commit']} ({label}: {load(a['provenance'])})" for label, a in runs.items()
    )
    rows = [
        f"| {label} | {a['stages_1']['rollout_env_steps_per_s']:.0f} | {a['stages_2']['rollout_env_steps_per_s']:.0f} | "
        f"**{a['rollout_ratio_2_over_1']:.2f}** | {a['iteration_ratio_2_over_1']:.2f} |"
        for label, a in runs.items()
    ]
    return "\n".join(
        [
            head + ":",
            "",
            "| config | stages=1 rollout env steps/s | stages=2 | ratio 2/1 (rollout) | ratio 2/1 (whole iteration) |",
            "| --- | --- | --- | --- | --- |",
            *rows,
        ]
    )


NUM_LAST = 3
"""Learning figures are the mean of the last three evaluations (iterations, for Hopper), never the best one."""


def last_mean(values: list[float]) -> float:
    """The mean of the last :data:`NUM_LAST` values."""
    assert len(values) >= NUM_LAST, values
    return statistics.fmean(values[-NUM_LAST:])


def hopper_returns(h: dict[str, Any]) -> list[float]:
    """The mean episodic return of each iteration that finished an episode, in order."""
    return [i["episodic_return"] for i in h["iterations"] if i["episodic_return"] is not None]


def hopper_learning() -> str:
    h = artifact("docs/hopper_learning.json")
    returns = hopper_returns(h)
    return fill(
        f"One run ({conditions(h)}, the run's own processes included): mean episodic return (of the episodes "
        f"finished in an iteration) first >= {h['target']:,.0f} at "
        f"**{h['first_iteration_at_or_above_target_env_steps']:,} env steps**; **{last_mean(returns):,.0f}** at "
        f"{h['env_steps']:,} env steps, the mean of the last {NUM_LAST} iterations' returns ("
        + ", ".join(f"{r:,.0f}" for r in returns[-NUM_LAST:])
        + f"); {h['wall_s']:.0f} s wall."
    )


# ------------------------------------------------------------------------------------------------ GRPO
def grpo_learning(path: str = "docs/grpo_executor_learning.json") -> str:
    """The learning curve of ``benchmarks/learn_grpo_arith.py`` (by default the former arithmetic workload's run):
    the run's figure is the mean of its last :data:`NUM_LAST` evaluations, on the test set where the run has one."""
    a = artifact(path)
    tested = a.get("reported_set") == "test"
    accuracies = [c["heldout_accuracy"] for c in a["curve"]]
    mean = last_mean(accuracies)
    curve = ", ".join(
        f"{i}: {100 * acc:.1f}"
        for i, acc in [(0, a["warm_start_accuracy"])]
        + [(c["iteration"], c["heldout_accuracy"]) for c in a["curve"]]
    )
    where = (
        "test-set accuracy (500 problems no setting was chosen on)"
        if tested
        else "held-out accuracy (the one held-out set, which the settings were tuned on)"
    )
    notes = [f"Curve, {where.split(' (')[0]} (GRPO iteration: %): {curve}."]
    if tested:
        validation = [c["validation_accuracy"] for c in a["curve"]]
        notes.append(
            f"Validation set (the 500 problems the warm start was tuned on): "
            f"{100 * a['warm_start_validation_accuracy']:.1f}% -> {100 * last_mean(validation):.1f}% (mean of the last "
            f"{NUM_LAST})."
        )
    notes.append(f"One run ({conditions(a)} on 2 cores).")
    return "\n".join(
        [
            f"| run | warm start, {where} | mean of the last {NUM_LAST} evaluations | gain | wall time (warm start + "
            "workers + GRPO + evals) |",
            "| --- | --- | --- | --- | --- |",
            f"| collocated, granularity {a['granularity']}, `teacher_error_rate: {a['teacher_error_rate']}` | "
            f"{100 * a['warm_start_accuracy']:.1f} % | {100 * mean:.1f} % | "
            f"**{100 * (mean - a['warm_start_accuracy']):+.1f} points** | {a['wall_s'] / 60:.1f} min ({a['wall_s']:.0f} s) |",
            "",
            fill(" ".join(notes)),
        ]
    )


def hf_learning(path: str = "docs/grpo_hf_learning.json") -> str:
    """The headline of ``benchmarks/learn_grpo_hf.py``: the test set's gain, the mean of its last evaluations."""
    a = artifact(path)
    curve = a["curve"]

    def points(name: str) -> str:
        values = [a["warm_start_accuracy" if name == "test" else "warm_start_validation_accuracy"]]
        values += [c[f"{name}_accuracy"] for c in curve]
        return ", ".join(f"{100 * v:.1f}" for v in values)

    validation = [c["validation_accuracy"] for c in curve]
    tail = curve[-a["num_last_evaluations"] :]
    last = (
        ", ".join(f"{100 * c['test_accuracy']:.1f}" for c in tail)
        + "% at iterations "
        + ", ".join(str(c["iteration"]) for c in tail)
    )
    load_average = a["load_average_1min"]
    return fill(
        f"Test set (200 problems never used to choose settings), greedy: warm start "
        f"**{100 * a['warm_start_accuracy']:.1f}%**, mean of the last {a['num_last_evaluations']} evaluations "
        f"**{100 * a['last_mean_accuracy']:.1f}%** ({last}): **{a['gain_points']:+.1f} points** in "
        f"**{a['wall_s'] / 60:.1f} min wall** including the warm start (the first iteration, model, BPE, warm "
        f"start and its evaluation included, took {a['first_iteration_wall_s'] / 60:.1f} min). Validation set (the 200 problems the "
        f"settings were tuned on): {100 * a['warm_start_validation_accuracy']:.1f}% -> "
        f"{100 * last_mean(validation):.1f}% (mean of the last {NUM_LAST}). Curves, warm start then every "
        f"{curve[1]['iteration'] - curve[0]['iteration']} iterations (%): test {points('test')}; validation "
        f"{points('validation')}. Sampled train reward {a['mean_reward_first_fifth']:.3f} (first fifth of the "
        f"iterations) -> {a['mean_reward_last_fifth']:.3f} (last fifth); median {a['median_iteration_s']:.2f} "
        f"s/iteration, {a['median_tokens_per_s']:,.0f} generated tokens/s, {a['median_eval_s']:.1f} s per "
        f"evaluation of both sets. 1-minute load average {load_average['before']:.1f} at the start, mean "
        f"{load_average['mean_during']:.1f} and max {load_average['max_during']:.1f} over the run "
        f"({load_average['num_samples']} samples, {a['cores']} cores, the machine shared with other jobs); "
        f"commit {a['commit']}, {a['date']} (`docs/grpo_hf_learning.png`, `.json`)."
    )


def _repeat_medians_ms(a: dict[str, Any], granularity: int) -> str:
    runs = [r for r in a["runs"] if r["granularity"] == granularity]
    return "-".join(
        f"{1e3 * statistics.median(r['iteration_s']):.0f}" for r in sorted(runs, key=lambda r: r["repeat"])
    )


def grpo_streaming() -> str:
    runs = [artifact(path) for path in STREAMING_RUNS]
    last = runs[-1]
    head = (
        "Two benchmark runs, back to back ("
        + "; ".join(f"`{path}`, {conditions(a)}" for path, a in zip(STREAMING_RUNS, runs, strict=True))
        + "):"
    )
    lines = [
        fill(head),
        "",
        "| granularity | run 1: iteration | run 1: vs 1 | run 2: iteration | run 2: vs 1 | run 2: rollout / inference / actor busy |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for g in last["results"]:
        cells = []
        for a in runs:
            speedup = a["speedup_over_whole_batch"].get(g)
            cells.append(
                f"{1e3 * a['results'][g]['iteration_s']:.0f} ms | "
                + ("1.00" if speedup is None else f"**{ratio_x(speedup)}**")
            )
        r = last["results"][g]
        busy = " / ".join(f"{1e3 * r[f'{c}_busy_s']:.0f}" for c in ("rollout", "inference", "actor"))
        label = f"{g} (whole batch)" if g == "1" else g
        lines.append(f"| {label} | {' | '.join(cells)} | {busy} ms |")
    tokens = ", ".join(
        f"{last['results'][g]['tokens_per_s']:,.0f} (granularity {g})" for g in last["results"]
    )
    repeats = "; ".join(
        f"run {n} " + " / ".join(_repeat_medians_ms(a, int(g)) for g in a["results"])
        for n, a in enumerate(runs, start=1)
    )
    lines += [
        "",
        fill(
            f"Generated tokens/s move with the iteration time ({last['results']['1']['tokens']:,} tokens per "
            f"iteration), run 2: {tokens}. Per interleaved repeat (medians, ms), granularity "
            f"{' / '.join(last['results'])}: {repeats}."
        ),
    ]
    return "\n".join(lines)


def auto_mode(path: str) -> str:
    """bench_auto_mode's table of one artifact, its two ratios and the run's conditions."""
    a = artifact(path)
    p = a["provenance"]
    as_configured = a.get("auto_over_collocated_as_configured")
    summary = (
        f"auto / collocated at its best: **{a['auto_over_collocated']:.2f}x**; auto / best fixed plan "
        f"({a['best_fixed_plan']}): **{a['auto_over_best_fixed']:.2f}x**"
        + (
            ""
            if as_configured is None
            else f"; auto / collocated at the config's own granularity: {as_configured:.2f}x"
        )
        + f". Commit {p['commit']}, one run, "
        f"{p['wall_s']:.0f} s, {load(p)}, profile + plan {a['profile_and_plan_s']:.0f} s; predicted: from the auto "
        "mode's own profile."
    )
    return "\n".join([*bench_auto_mode.table_rows(a), "", fill(summary)])


def hf_streaming(path: str) -> str:
    """The planner's granularity against whole-batch hand-off on the Hugging Face GRPO workload."""
    a = artifact(path)
    by_plan = {p["plan"]: p for p in a["plans"]}
    whole = by_plan[a["whole_batch_plan"]]
    chose_whole = a["planner"].get("chose_whole_batch", False)
    streaming = by_plan[a["best_streaming_plan"] if chose_whole else a["planner"]["plan"]]
    label = (
        f"the best streaming variant measured ({max(streaming['granularity'].values())} micro-batches)"
        if chose_whole
        else "the planner's plan"
    )
    whole_label = "whole-batch hand-off (the planner's plan)" if chose_whole else "whole-batch hand-off"
    speedup = whole["median_iteration_s"] / streaming["median_iteration_s"]
    predicted = whole["predicted_iteration_s"] / streaming["predicted_iteration_s"]
    others = [
        f"{max(p['granularity'].values())} micro-batches: {ratio_x(whole['median_iteration_s'] / p['median_iteration_s'])}, "
        f"predicted {ratio_x(whole['predicted_iteration_s'] / p['predicted_iteration_s'])}"
        for p in a["plans"]
        if p is not whole and p is not streaming
    ]
    subject = "The best streaming variant" if chose_whole else "The planner's plan"
    sentence = (
        f"{subject} ran **{ratio_x(speedup)}** "
        f"({streaming['median_iteration_s']:.2f} vs {whole['median_iteration_s']:.2f} s/iteration; predicted "
        f"{ratio_x(predicted)}), load average {a['load_average']['before'][0]:.1f} on 2 cores"
        + (f" ({'; '.join(others)})" if others else "")
        + f"; commit {a['commit']}."
    )
    return "\n".join(
        [
            f"| | {label} | {whole_label} |",
            "| --- | --- | --- |",
            f"| plan | `{plan_text(streaming['plan'])}` | `{plan_text(whole['plan'])}` |",
            f"| predicted | {streaming['predicted_iteration_s']:.2f} s/iteration | {whole['predicted_iteration_s']:.2f} s |",
            f"| measured median | **{streaming['median_iteration_s']:.2f} s** | **{whole['median_iteration_s']:.2f} s** |",
            "",
            fill(sentence),
        ]
    )


def staleness_learning(name: str = "hopper") -> str:
    """What a staleness bound costs in learning (``benchmarks/learn_staleness.py hopper|grpo``, its artifact
    ``docs/staleness_<name>.json``), per bound: the mean score over seeds, each seed's, and the largest policy lag
    the runs recorded."""
    a = artifact(f"docs/staleness_{name}.json")
    bounds = a["bounds"]
    seeds = len(next(iter(bounds.values()))["scores"])
    grpo = name == "grpo"
    shown = "{:.1%}" if grpo else "{:.0f}"
    per_bound = "; ".join(
        f"k = {k}: {shown.format(b['mean_score'])} ("
        + ", ".join(shown.format(score) for score in b["scores"].values())
        + f"; lag at most {b['largest_policy_lag']:.0f})"
        for k, b in bounds.items()
    )
    what = (
        "GRPO on the addition task at equal samples (`examples/grpo_arith.yaml`: 150 iterations of 32 prompts x 8 "
        "responses, collocated on 2 cores"
        if grpo
        else "Hopper PPO at equal samples (300k env steps, collocated on 2 cores"
    )
    return fill(
        f"{what}, {seeds} seeds per bound; `python benchmarks/learn_staleness.py {name}`, "
        f"`docs/staleness_{name}.png`), {a['score']} by bound, the mean over seeds (each seed): {per_bound}. "
        f"{conditions(a)}."
    )


INTERFERENCE = ("docs/data/interference_run1.json", "docs/data/interference.json")
"""Two runs of ``benchmarks/interference.py`` half an hour apart on one quiet machine (the first written before the
script recorded provenance: its load average at the start only)."""


def interference() -> str:
    """Whether an op slows down when the other core is busy (``benchmarks/interference.py``), per run."""
    rows = [
        "| run | op (one iteration's share, one core) | alone | beside the actor's update | beside env steps |",
        "| --- | --- | --- | --- | --- |",
    ]
    names = {"train": "the actor's PPO update", "env": "32 steps of 8 Hopper envs"}
    notes = []
    for number, path in enumerate(INTERFERENCE, start=1):
        a = artifact(path)
        for op, row in a["ops"].items():
            ratio = row["ratio_beside"]
            rows.append(
                f"| {number} | {names[op]} | {row['alone_ms']:.1f} ms | {ratio['train']:.2f}x | {ratio['env']:.2f}x |"
            )
        when = conditions(a) if "provenance" in a else f"load average {a['load_before'][0]:.1f} at the start"
        notes.append(f"run {number}: `{path}`, {when}")
    note = (
        "Medians of 7 alternating rounds of 20 calls each (`python benchmarks/interference.py`); "
        + "; ".join(notes)
        + "."
    )
    return "\n".join([*rows, "", fill(note)])


VALIDATE_BREAKDOWN_RUNS = ("docs/data/validate_breakdown_run1.json", "docs/data/validate_breakdown_run2.json")
"""``rlinf validate examples/hopper_ppo.yaml --iterations 12`` on a quiet machine, each plan's error split into its
ops and the time between them (``validate.json``'s ``breakdown``), saved by ``benchmarks/validate_artifact.py``."""


def validate_breakdown() -> str:
    """Per validate plan: the error, the part its ops' own durations explain and the time between ops."""
    rows = [
        "| run | plan | predicted | measured | error | ops | between ops |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    notes = []
    for number, path in enumerate(VALIDATE_BREAKDOWN_RUNS, start=1):
        a = artifact(path)
        for plan in a["plans"]:
            if plan["oversubscribed"]:
                continue
            split = a["breakdown"][plan["name"]]
            rows.append(
                f"| {number} | {plan['name'].replace(' | ', ', ')} | {1e3 * plan['predicted_s']:.1f} ms | "
                f"{1e3 * plan['measured_s']:.1f} ms | {100 * (plan['measured_s'] / plan['predicted_s'] - 1):+.1f}% | "
                f"{100 * split['ops_explain']:+.1f}% | {100 * split['between_ops']:+.1f}% |"
            )
        notes.append(f"run {number}: `{path}`, bias {100 * a['bias']:+.1f}%, {conditions(a)}")
    note = (
        "Error = measured / predicted - 1; ops = the plan simulated with its own measured op durations against "
        "its prediction; between ops = measured against that replay. Plans on the 2 cores only. "
        + "; ".join(notes)
        + "."
    )
    return "\n".join([*rows, "", fill(note)])


STALENESS_K1_RUN = "docs/data/staleness_k1_hopper.json"


STALENESS_GRPO_TIMING = "docs/data/staleness_timing_grpo.json"


def staleness_timing_grpo() -> str:
    """The GRPO example measured against predicted at k = 0 and 1, and planned from the shipped profile."""
    a = artifact(STALENESS_GRPO_TIMING)
    runs = a["runs"]

    def pair(name: str) -> str:
        run = runs[name]
        return (
            f"{run['measured_median_s']:.4f} s measured against {run['predicted_iteration_s']:.4f} s predicted "
            f"(bias {run['bias']:+.1%}: measured / predicted - 1)"
        )

    plan = yaml.safe_load(runs["k1"]["plan_yaml"])
    cores: dict[str, list[str]] = {}
    for name, devices in plan["placement"].items():
        cores.setdefault(str(devices), []).append(name)
    where = "; ".join(f"{', '.join(names)} on core {devices}" for devices, names in sorted(cores.items()))
    behind = plan.get("buffer_before")
    k1_plan = f"{where}; the buffer before {'the ' + ', '.join(behind) if behind else 'the actor'}"
    return fill(
        f"The GRPO example on this project's 2 cores (`python benchmarks/staleness_timing_grpo.py`: each run "
        f"{a['iterations']} iterations, the median over the counted ones; {conditions(a)}): `--mode auto` chose the "
        f"collocated plan, {pair('k0')}; `--mode auto --max-staleness 1` chose a staleness-1 plan ({k1_plan}), "
        f"{pair('k1')}, "
        f"{runs['k0']['measured_median_s'] / runs['k1']['measured_median_s']:.2f}x the synchronous run's speed as "
        f"measured; planned from the shipped profile (`--trace traces/grpo_arith_cpu2.json`), {pair('shipped_profile')}."
    )


def staleness_timing() -> str:
    """Measured against predicted iteration time at k = 0 (the main job's runs) and k = 1 (one run of the main job
    with ``--max-staleness 1``), each the median over the run's counted iterations."""
    k1 = artifact(STALENESS_K1_RUN)
    k0 = [artifact(path) for path in MAIN_JOB_RUNS]
    zero = "; ".join(
        f"{1e3 * a['median_measured_iteration_s']:.1f} against {1e3 * a['median_predicted_iteration_s']:.1f} ms"
        for a in k0
    )
    return fill(
        f"On this project's 2 cores, the main job (`rlinf train examples/hopper_ppo.yaml`) measured its median "
        f"iteration against its prediction in {zero} (k = 0, {len(k0)} runs); with `--max-staleness 1` it chose a "
        f"staleness-1 plan and measured {1e3 * k1['measured_median_s']:.1f} against "
        f"{1e3 * k1['predicted_iteration_s']:.1f} ms predicted (bias {k1['bias']:+.1%}, measured / predicted - 1, "
        f"over {k1['iterations']} iterations)."
    )


PROBE_VS_RUN = ("docs/data/probe_vs_run.json",)
"""Runs of ``benchmarks/probe_vs_run.py``: the main job's plan measured as a probe, as a long bare run and as training."""


def probe_vs_run() -> str:
    """What differs between a profile's probe iterations and a training run (``benchmarks/probe_vs_run.py``)."""
    lines = [
        "| run | rounds | training / probe | long bare run / probe | training / long bare run | training's first 6 "
        "iterations / the rest | single rounds, training / probe | conditions |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for number, path in enumerate(PROBE_VS_RUN, start=1):
        a = artifact(path)
        m, rounds = a["median"], a["rounds"]
        each = [r["train_over_probe"] for r in rounds]
        lines.append(
            f"| {number} (`{path}`) | {len(rounds)} | {m['train_over_probe']:.3f} | {m['bare_over_probe']:.3f} | "
            f"{m['train_over_bare']:.3f} | {m['train_early_over_late']:.3f} | {min(each):.2f} to {max(each):.2f} | "
            f"{conditions(a)} |"
        )
    return "\n".join(
        [
            *lines,
            "",
            fill(
                "Medians over the rounds of each ratio of median iteration times (rounds in rotating arm order)."
            ),
        ]
    )


WINNERS_CURSE = "docs/data/winners_curse.json"


def winners_curse() -> str:
    """The winner's curse measured on real profiles (``benchmarks/winners_curse.py``): per profile, each half's
    prediction of the plan it chose against the other half's."""
    a = artifact(WINNERS_CURSE)
    lines = [
        "| profile | probe plans | a half's choice, its own prediction against the other half's | the whole profile's "
        "choice, the same (control) |",
        "| --- | --- | --- | --- |",
    ]
    for label, profile in a["profiles"].items():
        rows = profile["splits"]
        lines.append(
            f"| `{label}` | {profile['probe_plans']} | "
            + ", ".join(f"{r['optimism']:+.1%}" for r in rows)
            + " | "
            + ", ".join(f"{r['control']:+.1%}" for r in rows)
            + " |"
        )
    rows = [(p["probe_plans"], r) for p in a["profiles"].values() for r in p["splits"]]
    dense = [r["optimism"] for n, r in rows if n >= 19]
    sparse = [r["optimism"] for n, r in rows if n < 19]
    return "\n".join(
        [
            *lines,
            "",
            fill(
                f"Over the {a['halves']} halves: mean {a['mean_optimism']:+.1%} (control {a['mean_control']:+.1%}); "
                f"{a['chose_the_whole_profiles_plan']} chose the plan the whole profile chose. Profiles of 19 or more "
                f"probe plans (a quiet enough machine to finish them): mean {statistics.fmean(dense):+.1%} over "
                f"{len(dense)} halves; fewer probe plans (a loaded machine cut the profile short, a half then holds "
                f"one iteration of many probes): mean {statistics.fmean(sparse):+.1%} over {len(sparse)}. "
                f"`{WINNERS_CURSE}`, {conditions(a)}."
            ),
        ]
    )


MAIN_JOB_BREAKDOWN = "docs/data/main_job_runs_breakdown.json"


def main_job_breakdown() -> str:
    """Each benchmark run's error split into its ops' own durations and the time between them (``bias_breakdown``)."""
    a = artifact(MAIN_JOB_BREAKDOWN)
    lines = [
        "| run | plan | predicted | measured | error | ops | between ops |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for number, r in enumerate(a["runs"], start=1):
        lines.append(
            f"| {number} | {plan_text(r['plan'])} | {1e3 * r['predicted_s']:.1f} ms | {1e3 * r['measured_s']:.1f} ms | "
            f"{r['bias']:+.1%} | {r['ops_explain']:+.1%} | {r['between_ops']:+.1%} |"
        )
    ops = sorted(abs(r["ops_explain"]) for r in a["runs"])
    between = sorted(abs(r["between_ops"]) for r in a["runs"])
    return "\n".join(
        [
            *lines,
            "",
            fill(
                f"Ops = the run's plan simulated with the run's own op durations against its prediction; between ops = "
                f"the measured median against that replay (`python benchmarks/bias_breakdown.py RUN_DIR ...`, "
                f"`{MAIN_JOB_BREAKDOWN}`, {conditions(a)}). Median |ops| {statistics.median(ops):.1%}, median |between "
                f"ops| {statistics.median(between):.1%}."
            ),
        ]
    )


MUTATION = "docs/data/mutation.json"


def mutation() -> str:
    """The mutation run's figures per module (``benchmarks/mutation_report.py``) and where the surviving logic
    mutants are, by function."""
    a = artifact(MUTATION)
    kinds = ("killed", "survived: draft index", "survived: message wording", "survived: logic")
    lines = [
        "| module | mutants | killed | survived: draft index (equivalent) | survived: message wording | survived: logic |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    totals = dict.fromkeys(("mutants", *kinds), 0)
    for module, counts in a["modules"].items():
        lines.append(
            f"| `rlinf/core/{module}.py` | {counts['mutants']} | "
            + " | ".join(str(counts.get(kind, 0)) for kind in kinds)
            + " |"
        )
        for key in totals:
            totals[key] += counts.get(key, 0)
    lines.append("| all | " + " | ".join(str(totals[key]) for key in ("mutants", *kinds)) + " |")
    by_function: dict[str, int] = {}
    for survivor in a["survivors"]:
        if survivor["category"] == "logic":
            name = survivor["mutant"].rsplit("__mutmut_", 1)[0].split(".")
            function = name[-1].removeprefix("x_").replace("xǁ", "").replace("ǁ", ".")
            key = f"{name[2]}.{function}"
            by_function[key] = by_function.get(key, 0) + 1
    listed = ", ".join(f"`{k}` {n}" for k, n in sorted(by_function.items(), key=lambda kv: (-kv[1], kv[0])))
    untested = totals.get("no tests", 0)
    return "\n".join(
        [
            *lines,
            "",
            fill(
                f"Killed {totals['killed'] / totals['mutants']:.1%}. Surviving logic mutants by function: {listed}. "
                + (f"{untested} mutants no selected test reached. " if untested else "")
                + f"`{MUTATION}` (every survivor with its diff), {conditions(a)}."
            ),
        ]
    )
