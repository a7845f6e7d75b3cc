"""The README's table of measured figures, and the docs that restate them, equal the JSON artifacts the
benchmarks wrote (``benchmarks/provenance.py``): each artifact carries its command, commit, date, cores, load
average and raw per-iteration values, its headline figures follow from those values, and the text shows exactly
those figures. A figure edited by hand fails here. Reads JSON only (no benchmark runs)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROVENANCE = {"command", "commit", "date", "cores", "load_average_before", "load_average_after", "wall_s"}


def artifact(name: str) -> dict[str, Any]:
    return json.loads((ROOT / name).read_text())


def load(data: dict[str, Any]) -> str:
    """How a row states the 1-minute load average of the run that measured it."""
    p = data["provenance"]
    return f"load average {p['load_average_before'][0]:.1f} -> {p['load_average_after'][0]:.1f}"


def hopper() -> list[str]:
    a = artifact("docs/hopper_learning.json")
    return [
        f"mean return first >= 1,000 at {a['first_iteration_at_or_above_target_env_steps']:,} env steps",
        f"{a['final_return']:,.0f} at {a['env_steps']:,} ({a['wall_s']:.0f} s)",
        load(a),
    ]


def pipelining() -> list[str]:
    big, small = artifact("docs/bench_pipelining_1024.json"), artifact("docs/bench_pipelining_default.json")
    return [
        f"{big['rollout_ratio_2_over_1']:.2f}x rollout env steps/s ({big['iteration_ratio_2_over_1']:.2f}x "
        f"whole iteration), {load(big)}",
        f"default 16 envs, 256x256: {small['rollout_ratio_2_over_1']:.2f}x "
        f"({small['iteration_ratio_2_over_1']:.2f}x), {load(small)}",
    ]


def grpo_arith() -> list[str]:
    a = artifact("docs/grpo_executor_learning.json")
    return [
        f"`teacher_error_rate: {a['teacher_error_rate']}`",
        f"held-out accuracy {100 * a['warm_start_accuracy']:.1f}% -> {100 * a['final_accuracy']:.1f}% "
        f"({a['gain_points']:+.1f} points) in {a['wall_s'] / 60:.1f} min",
        load(a),
    ]


def grpo_hf() -> list[str]:
    """The other agent's row (and artifact): only its headline numbers are checked."""
    a = artifact("docs/grpo_hf_learning.json")
    return [
        f"{100 * a['warm_start_accuracy']:.1f}% -> {100 * a['final_accuracy']:.1f}% ({a['gain_points']:+.1f} points",
        f"{a['wall_s'] / 60:.1f} min",
    ]


def streaming() -> list[str]:
    runs = [artifact("docs/grpo_streaming_run1.json"), artifact("docs/grpo_streaming.json")]
    tail = runs[0]["long_tail"]
    return [
        f"`long_tail_fraction: {tail['long_tail_fraction']}`, `max_new_tokens: {tail['max_new_tokens']}`",
        "; ".join(
            f"granularity {g} vs 1: " + " and ".join(f"{r['speedup_over_whole_batch'][g]:.2f}x" for r in runs)
            for g in ("4", "8")
        )
        + " (two runs",
        ", ".join(load(r) for r in runs),
    ]


VALIDATE_RUNS = (
    "docs/grpo_validate.json",
    "docs/grpo_validate_run2.json",
    "docs/grpo_validate_run3.json",
    "docs/grpo_validate_run4.json",
)


def fidelity() -> list[str]:
    claims = []
    for name in VALIDATE_RUNS:
        a = artifact(name)
        on_cores = sum(not p["oversubscribed"] for p in a["plans"])
        claims.append(
            f"median error {100 * a['median_error']:.1f}% over {on_cores} plans, max {100 * a['max_error']:.1f}%, "
            f"Kendall tau {a['kendall_tau']:.2f}; its pick measured {100 * a['top1_regret']:.1f}% slower than "
            f"the measured best ({load(a)})"
        )
    return claims


def grpo_auto() -> list[str]:
    """The README's GRPO auto-vs-fixed-modes row (``benchmarks/bench_auto_mode.py --config
    examples/grpo_arith.yaml``)."""
    a = artifact("docs/grpo_auto_mode.json")
    rows = a["plans"]
    best = {mode: rows[name] for mode, name in a["best_of_mode"].items()}
    return [
        f"auto {rows['auto']['samples_per_s']:,.0f} samples/s ({rows['auto']['plan'].replace(' | ', ', ')})",
        f"**{a['auto_over_collocated']:.2f}x** the best collocated plan",
        f"**{a['auto_over_best_fixed']:.2f}x** the best fixed plan",
        *(f"{mode} {best[mode]['samples_per_s']:,.0f}" for mode in ("collocated", "hybrid", "disaggregated")),
        load(a),
    ]


RAY_RUNS = ("docs/ray_vs_local.json", "docs/ray_vs_local_run2.json")


def ray() -> list[str]:
    claims = []
    for name in RAY_RUNS:
        a = artifact(name)
        claims.append(
            ", ".join(f"{m['ratio']:.2f}x {mode}" for mode, m in a["modes"].items()) + f" ({load(a)})"
        )
    return claims


def kill() -> list[str]:
    a = artifact("docs/data/kill_detection.json")
    ms = a["detected_ms"]
    return [
        f"local {' / '.join(map(str, ms['local']))} ms, Ray {' / '.join(map(str, ms['ray']))} ms",
        load(a),
    ]


def planner_means() -> dict[tuple[int, str], float]:
    """Mean search seconds per (devices, trace) from the planner benchmark's pytest-benchmark JSON."""
    a = artifact("docs/data/bench_planner.json")
    return {
        (b["params"]["num_devices"], b["params"]["trace_path"]): b["stats"]["mean"] for b in a["benchmarks"]
    }


PLANNER_TRACES = ("traces/grpo_1.5b_h100.json", "traces/grpo_7b_h100.json", "traces/grpo_32b_h200.json")


def planner_speed() -> list[str]:
    a, means = artifact("docs/data/bench_planner.json"), planner_means()
    return [
        f"load average {a['load_average_before'][0]:.1f} -> {a['load_average_after'][0]:.1f}",
        " / ".join(f"{means[(256, t)]:.3f}" for t in PLANNER_TRACES) + " s (mean of 3)",
    ]


def planner_speed_1024() -> list[str]:
    means = planner_means()
    return [" / ".join(f"{means[(1024, t)]:.3f}" for t in PLANNER_TRACES) + " s"]


README_ROWS: dict[str, Callable[[], list[str]]] = {
    "planner search incl. simulating": planner_speed,
    "the same, 1024 devices": planner_speed_1024,
    "Hopper learning": hopper,
    "env pipelining": pipelining,
    "GRPO learning through the executor": grpo_arith,
    "GRPO on a Hugging Face model": grpo_hf,
    "GRPO long tail": streaming,
    "GRPO simulator fidelity": fidelity,
    "GRPO samples/s, auto vs fixed modes": grpo_auto,
    "Ray vs local backend": ray,
    "kill -9 of a worker": kill,
}
"""Each README row (by the start of its first cell) and the figures its text must hold."""


def ray_doc() -> list[str]:
    rows = [
        f"{1e3 * m['local']['median_s']:.1f} ms | {1e3 * m['ray']['median_s']:.1f} ms | **{m['ratio']:.2f}**"
        for name in RAY_RUNS
        for m in artifact(name)["modes"].values()
    ]
    rows += [load(artifact(name)) for name in RAY_RUNS]
    ms = artifact("docs/data/kill_detection.json")["detected_ms"]
    kill_claim = f"local backend {' and '.join(map(str, ms['local']))} ms, Ray backend {' and '.join(map(str, ms['ray']))} ms"
    return [*rows, kill_claim, kill()[1]]


def main_job() -> list[str]:
    """The README's paragraph on its main job (``benchmarks/main_job.py``)."""
    a = artifact("docs/data/main_job_hopper.json")
    fewer = a["best_on_fewer_devices"]
    return [
        f"{load(a)}): the whole command took {a['command_s']:.0f} s ({a['profile_s']:.0f} s profiling "
        f"{a['probe_plans']} probe plans, {len(a['iterations'])} iterations at a median "
        f"{a['median_measured_iteration_s']:.4f} s each against {a['median_predicted_iteration_s']:.4f} s predicted)",
        f"the chosen plan ({a['chosen_plan'].replace(' | ', ', ')}) uses {a['chosen_devices_used']} of the "
        f"{a['num_devices']} cores",
        f"the best plan on fewer cores ({fewer['plan'].replace(' | ', ', ')}) was predicted "
        f"{100 * fewer['slower_than_chosen']:.0f}% slower",
    ]


def main_job_elsewhere() -> list[str]:
    """The README's sentence on the main job measured on another machine (``docs/data/main_job_hopper_xeon.json``)."""
    a = artifact("docs/data/main_job_hopper_xeon.json")
    its = [i["iteration_s"] for i in a["iterations"]]
    assert a["median_measured_iteration_s"] == statistics.median(its)
    assert (
        a["chosen_plan"] == artifact("docs/data/main_job_hopper.json")["chosen_plan"]
    )  # "the same plan chosen"
    return [
        f"({a['provenance']['processor']}; `python benchmarks/main_job.py --artifact docs/data/main_job_hopper_xeon.json`, "
        f"commit {a['provenance']['commit']}, {load(a)}): {a['command_s']:.0f} s, the same plan chosen, {len(its)} "
        f"iterations at a median {a['median_measured_iteration_s']:.4f} s against "
        f"{a['median_predicted_iteration_s']:.4f} s predicted, single iterations from {1e3 * min(its):.1f} to "
        f"{1e3 * max(its):.1f} ms",
    ]


def order_bias() -> list[str]:
    """The A/A test of side-by-side measurement (README, validate section)."""
    a = artifact("docs/data/order_bias.json")
    one, two = a["protocols"]["one generation"], a["protocols"]["two generations"]
    return [
        f"commit {a['provenance']['commit']}, {a['provenance']['wall_s']:.0f} s, {load(a)})",
        f"measured slower in {one['entry0_slower']} of {one['runs']} runs (ratios of medians "
        f"{', '.join(f'{r:.4f}' for r in one['ratios'])}; mean {one['mean_ratio']:.4f})",
        f"the ratios were {', '.join(f'{r:.4f}' for r in two['ratios'])} (mean {two['mean_ratio']:.4f}; "
        f"entry 0 slower in {two['entry0_slower']} of {two['runs']})",
        f"one plan measures up to {100 * max(abs(r - 1) for r in one['ratios'] + two['ratios']):.1f}% apart from "
        "itself",
    ]


MACHINE_SPEED_RUNS = ("docs/data/machine_speed.json", "docs/data/machine_speed_run2.json")


def machine_speed() -> list[str]:
    """The README's paragraph on the machine's own speed (``benchmarks/machine_speed.py``), run by run."""
    claims = []
    for number, name in enumerate(MACHINE_SPEED_RUNS):
        a = artifact(name)
        c0, c1 = a["cores"]["0"], a["cores"]["1"]
        threshold = f"(over {a['slow_over_fast_threshold']}x its fast level) " if number == 0 else ""
        claims += [
            f"commit {a['provenance']['commit']}, {load(a)})",
            f"core 0 was slow {threshold}{100 * c0['slow_fraction']:.0f}% of the time and core 1 "
            f"{100 * c1['slow_fraction']:.0f}%, both at once {100 * a['both_slow_fraction']:.1f}%; a slow bin took "
            f"{c0['slow_over_fast']:.2f}x and {c1['slow_over_fast']:.2f}x a fast one; the longest slow phase lasted "
            f"{c0['longest_slow_s']:g} s and {c1['longest_slow_s']:g} s",
        ]
    return claims


def readme_paragraphs() -> list[str]:
    """The README's prose outside the table: the main job, auto mode against the fixed modes, Ray against local."""
    auto = artifact("docs/auto_mode_hopper.json")
    m = artifact("docs/ray_vs_local.json")["modes"]
    c = m["collocated"]
    first_validate = artifact("docs/data/validate_hopper_quiet.json")
    return [
        *main_job(),
        *main_job_elsewhere(),
        *order_bias(),
        *machine_speed(),
        f"see below (median error {100 * first_validate['median_error']:.1f}% in the first run",
        f"{auto['provenance']['wall_s']:.0f} s, {load(auto)}): the chosen plan",
        f"**{auto['auto_over_collocated']:.2f}x** the env steps/s of the best collocated plan "
        f"({auto['plans'][auto['best_of_mode']['collocated']]['plan'].replace(' | ', ', ')}) and "
        f"**{auto['auto_over_best_fixed']:.2f}x** the best fixed plan ({auto['best_fixed_plan'].replace(' | ', ', ')}:",
        *(
            f"{mode} {1e3 * auto['plans'][auto['best_of_mode'][mode]]['median_iteration_s']:.1f} ms"
            for mode in ("collocated", "hybrid", "disaggregated")
        ),
        f"{1e3 * c['ray']['median_s']:.1f} vs {1e3 * c['local']['median_s']:.1f} ms per iteration, "
        f"**{c['ratio']:.2f}x** (target <= 1.10x); hybrid {m['hybrid']['ratio']:.2f}x, disaggregated "
        f"{m['disaggregated']['ratio']:.2f}x",
    ]


def executor_doc() -> list[str]:
    rows = []
    for name, label in (("default", "16 envs, 256x256"), ("1024", "32 envs, 1024x1024")):
        a = artifact(f"docs/bench_pipelining_{name}.json")
        rows.append(
            f"| {label} | {a['stages_1']['rollout_env_steps_per_s']:.0f} | "
            f"{a['stages_2']['rollout_env_steps_per_s']:.0f} | **{a['rollout_ratio_2_over_1']:.2f}** | "
            f"{a['iteration_ratio_2_over_1']:.2f} |"
        )
    h = artifact("docs/hopper_learning.json")
    rows.append(f"**{h['first_iteration_at_or_above_target_env_steps']:,} env steps**")
    rows.append(f"**{h['final_return']:,.0f}** at {h['env_steps']:,} env steps")
    rows.append(f"{h['wall_s']:.0f} s wall")
    return rows


def grpo_doc() -> list[str]:
    a = artifact("docs/grpo_executor_learning.json")
    curve = ", ".join(
        f"{i}: {100 * acc:.1f}"
        for i, acc in [(0, a["warm_start_accuracy"])]
        + [(c["iteration"], c["heldout_accuracy"]) for c in a["curve"]]
    )
    learning = (
        f"| {100 * a['warm_start_accuracy']:.1f} % | {100 * a['final_accuracy']:.1f} % | "
        f"**{a['gain_points']:+.1f} points** | {a['wall_s'] / 60:.1f} min"
    )
    streaming_rows = []
    runs = [artifact("docs/grpo_streaming_run1.json"), artifact("docs/grpo_streaming.json")]
    for g in ("4", "8"):
        cells = " | ".join(
            f"{1e3 * r['results'][g]['iteration_s']:.0f} ms | **{r['speedup_over_whole_batch'][g]:.2f}x**"
            for r in runs
        )
        streaming_rows.append(f"| {g} | {cells} |")
    fidelity_claims = [
        f"**Median error {100 * artifact(name)['median_error']:.1f} %**" for name in VALIDATE_RUNS
    ] + [
        f"{1e3 * p['predicted_s']:.1f} ms | {1e3 * p['measured_s']:.1f} ms | {100 * p['error']:.1f} % |"
        for name in VALIDATE_RUNS
        for p in artifact(name)["plans"]
    ]
    return [learning, curve, *streaming_rows, *fidelity_claims]


def planner_doc() -> list[str]:
    means = planner_means()
    rows = [
        f"| {label} | {means[(256, t)]:.3f} s | {means[(1024, t)]:.3f} s |"
        for label, t in zip(("1.5B", "7B", "32B"), PLANNER_TRACES, strict=True)
    ]
    return [*rows, planner_speed()[0]]


DOCS: dict[str, Callable[[], list[str]]] = {
    "docs/planner.md": planner_doc,
    "README.md": readme_paragraphs,
    "docs/ray.md": ray_doc,
    "docs/executor.md": executor_doc,
    "docs/grpo.md": grpo_doc,
}
"""Docs that restate the figures, and the figures they must hold."""


def flat(text: str) -> str:
    return " ".join(text.split())


def readme_row(readme: str, label: str) -> str:
    rows = [line for line in readme.splitlines() if line.startswith(f"| {label}")]
    assert len(rows) == 1, f"README: {len(rows)} table rows start with {label!r}"
    return flat(rows[0])


def differences(texts: dict[str, str]) -> list[str]:
    """Names of the README rows and docs whose text lacks a figure its artifact holds."""
    wrong = []
    readme = texts["README.md"]
    for label, claims in README_ROWS.items():
        row = readme_row(readme, label)
        wrong += [f"README row {label!r}: {claim!r}" for claim in claims() if flat(claim) not in row]
    for path, claims in DOCS.items():
        text = flat(texts[path])
        wrong += [f"{path}: {claim!r}" for claim in claims() if flat(claim) not in text]
    return wrong


def current_texts() -> dict[str, str]:
    return {path: (ROOT / path).read_text() for path in DOCS}


def test_the_measured_figures_in_the_readme_and_docs_equal_their_artifacts() -> None:
    assert differences(current_texts()) == []


def test_a_hand_edited_figure_is_caught() -> None:
    texts = current_texts()
    ratio = f"{artifact('docs/ray_vs_local.json')['modes']['hybrid']['ratio']:.2f}x hybrid"
    assert ratio in texts["README.md"]
    edited = {**texts, "README.md": texts["README.md"].replace(ratio, "0.50x hybrid", 1)}
    assert len(differences(edited)) == 1 and "Ray vs local backend" in differences(edited)[0]


def provenance_of(name: str) -> dict[str, Any]:
    data = artifact(name)
    p = data["provenance"]
    assert set(p) >= PROVENANCE, f"{name}: provenance lacks {PROVENANCE - set(p)}"
    assert p["cores"] >= 1 and len(p["load_average_before"]) == len(p["load_average_after"]) == 3
    return data


def test_each_artifact_carries_provenance_and_its_figures_follow_from_its_raw_values() -> None:
    h = provenance_of("docs/hopper_learning.json")
    returns = [i["episodic_return"] for i in h["iterations"] if i["episodic_return"] is not None]
    assert h["final_return"] == returns[-1] and h["env_steps"] == h["iterations"][-1]["env_steps"]
    hit = next(i["env_steps"] for i in h["iterations"] if (i["episodic_return"] or 0) >= h["target"])
    assert h["first_iteration_at_or_above_target_env_steps"] == hit

    for name in ("docs/bench_pipelining_default.json", "docs/bench_pipelining_1024.json"):
        p = provenance_of(name)
        for stages in ("stages_1", "stages_2"):
            s = p[stages]
            assert s["rollout_env_steps_per_s"] == statistics.median(s["rollout_env_steps_per_s_each"])
            assert s["env_steps_per_s"] == statistics.median(s["env_steps_per_s_each"])
        ratio = p["stages_2"]["rollout_env_steps_per_s"] / p["stages_1"]["rollout_env_steps_per_s"]
        assert p["rollout_ratio_2_over_1"] == ratio

    g = provenance_of("docs/grpo_executor_learning.json")
    assert g["final_accuracy"] == g["curve"][-1]["heldout_accuracy"] and len(g["mean_reward"]) == len(
        g["iteration_s"]
    )
    assert g["gain_points"] == 100 * (g["final_accuracy"] - g["warm_start_accuracy"])
    assert g["teacher_error_rate"] > 0  # the warm start is degraded on purpose; the row says so

    for name in ("docs/grpo_streaming_run1.json", "docs/grpo_streaming.json"):
        s = provenance_of(name)
        assert s["long_tail"]["long_tail_fraction"] > 0  # the long tail is forced; the row says so
        for key, result in s["results"].items():
            each = [t for run in s["runs"] if run["granularity"] == int(key) for t in run["iteration_s"]]
            assert result["iteration_s"] == statistics.median(each)
        for key, speedup in s["speedup_over_whole_batch"].items():
            assert speedup == s["results"]["1"]["iteration_s"] / s["results"][key]["iteration_s"]

    for name in VALIDATE_RUNS:
        v = provenance_of(name)
        for plan in v["plans"]:
            assert plan["measured_s"] == statistics.median(plan["measured_each_s"])
        errors = [p["error"] for p in v["plans"] if not p["oversubscribed"]]
        assert v["median_error"] == statistics.median(errors) and v["max_error"] == max(errors)

    a = provenance_of("docs/grpo_auto_mode.json")
    work = a["config"]["samples_per_iteration"]
    for row in a["plans"].values():  # each plan's rate follows from its measured iterations
        assert row["median_iteration_s"] == statistics.median(row["iteration_s"])
        assert row["samples_per_s"] == work / row["median_iteration_s"]
    best = {mode: a["plans"][name]["samples_per_s"] for mode, name in a["best_of_mode"].items()}
    assert a["auto_over_best_fixed"] == a["plans"]["auto"]["samples_per_s"] / max(best.values())
    assert a["auto_over_collocated"] == a["plans"]["auto"]["samples_per_s"] / best["collocated"]

    for name in RAY_RUNS:
        r = provenance_of(name)
        for m in r["modes"].values():
            assert len(m["local"]["seconds"]) == len(m["ray"]["seconds"]) == r["iterations"]
            assert m["ratio"] == statistics.median(m["ray"]["seconds"]) / statistics.median(
                m["local"]["seconds"]
            )
            assert m["same_outcomes"]

    auto = provenance_of("docs/auto_mode_hopper.json")
    for row in auto["plans"].values():
        assert row["median_iteration_s"] == statistics.median(row["iteration_s"])
    env_steps = auto["config"]["env_steps_per_iteration"]
    best = auto["best_of_mode"]
    assert auto["auto_over_collocated"] == (env_steps / auto["plans"]["auto"]["median_iteration_s"]) / (
        env_steps / auto["plans"][best["collocated"]]["median_iteration_s"]
    )
    for mode, name in best.items():  # each fixed mode's best is its fastest measured granularity
        assert name == mode or name.startswith(f"{mode} @ ")
        of_mode = [row for key, row in auto["plans"].items() if key == mode or key.startswith(f"{mode} @ ")]
        assert auto["plans"][name]["median_iteration_s"] == min(row["median_iteration_s"] for row in of_mode)
    assert auto["best_fixed_plan"] == auto["plans"][best[auto["best_fixed_mode"]]]["plan"]

    j = provenance_of("docs/data/main_job_hopper.json")
    assert j["rlinf_command"].startswith("rlinf train examples/hopper_ppo.yaml")
    assert j["median_measured_iteration_s"] == statistics.median(i["iteration_s"] for i in j["iterations"])
    assert j["median_predicted_iteration_s"] == statistics.median(i["predicted_s"] for i in j["iterations"])
    assert j["profile_s"] < j["command_s"]

    o = provenance_of("docs/data/order_bias.json")
    assert o["provenance"]["command"].startswith("python benchmarks/bench_order_bias.py")
    for name, summary in o["protocols"].items():
        ratios = [
            statistics.median(r["entry0_s"]) / statistics.median(r["entry1_s"]) for r in o["runs"][name]
        ]
        assert all(len(r["entry0_s"]) == len(r["entry1_s"]) == o["iterations"] for r in o["runs"][name])
        assert summary["ratios"] == [round(r, 4) for r in ratios] and summary["runs"] == len(ratios)
        assert summary["entry0_slower"] == sum(r > 1 for r in ratios)
        assert summary["mean_ratio"] == round(statistics.fmean(ratios), 4)

    k = provenance_of("docs/data/kill_detection.json")
    assert len(k["detected_ms"]["local"]) == len(k["detected_ms"]["ray"]) >= 1


def test_the_planner_benchmark_carries_its_rounds_and_conditions() -> None:
    a = artifact("docs/data/bench_planner.json")
    assert a["command"].startswith("python3 -m pytest -m benchmark --benchmark-enable --benchmark-save-data")
    assert a["commit_info"]["id"] and not a["commit_info"]["dirty"]
    assert a["machine_info"]["cpu"] and len(a["load_average_before"]) == len(a["load_average_after"]) == 3
    assert {(n, t) for n in (256, 1024) for t in PLANNER_TRACES} == set(planner_means())
    for b in a["benchmarks"]:
        rounds = b["stats"]["data"]
        assert len(rounds) == b["stats"]["rounds"] == 3
        assert b["stats"]["mean"] == statistics.mean(rounds)


def test_the_machine_speed_figures_follow_from_its_bins(monkeypatch: Any) -> None:
    """The machine-speed artifact's figures are what ``benchmarks/machine_speed.py`` computes from its raw bins."""
    import importlib.util

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # it imports its sibling provenance.py
    spec = importlib.util.spec_from_file_location("machine_speed", ROOT / "benchmarks" / "machine_speed.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for name in MACHINE_SPEED_RUNS:
        a = provenance_of(name)
        assert not a["provenance"]["uncommitted_code_changes"]
        assert a["bin_s"] == bench.BIN_S and a["slow_over_fast_threshold"] == bench.SLOW_OVER_FAST
        summary = bench.summarise(a["bins_ms"])
        assert summary == {"cores": a["cores"], "both_slow_fraction": a["both_slow_fraction"]}
        assert all(len(bins) >= a["seconds"] / a["bin_s"] - 1 for bins in a["bins_ms"].values())
    # and the summary measures what it says on bins made up here: core 1 slow (2x) in 3 bins, 2 of them in a row
    made_up = {"0": [1.0] * 10, "1": [1.0, 2.0, 2.0, 1.0, 1.0, 1.0, 2.0, 1.0, 1.0, 1.0]}
    figures = bench.summarise(made_up)
    assert figures["cores"]["0"]["slow_fraction"] == 0 and figures["cores"]["0"]["slow_over_fast"] == 1.0
    one = figures["cores"]["1"]
    assert (one["slow_fraction"], one["slow_over_fast"], one["longest_slow_s"]) == (0.3, 2.0, 2 * bench.BIN_S)
    assert figures["both_slow_fraction"] == 0
