"""The simulator's fidelity as ``rlinf validate`` measured it, rendered from its studies.

The Hopper runs
(``docs/data/validate_hopper.json``: every run, and today's replay of their profiles) and the GRPO runs
(``docs/grpo_validate*.json``). Part of ``benchmarks/measurements.py``, which writes these blocks into the docs."""

from __future__ import annotations

import statistics
import textwrap
from pathlib import Path
from typing import Any

from suite import artifact, load

from rlinf.app.profiling import split_iterations
from rlinf.core.fidelity import PlanFidelity

ROOT = Path(__file__).resolve().parent.parent
HOPPER = "docs/data/validate_hopper.json"
GRPO = (
    "docs/grpo_validate.json",
    "docs/grpo_validate_run2.json",
    "docs/grpo_validate_run3.json",
    "docs/grpo_validate_run4.json",
)
TURNS = 4
"""Turns per plan: validate measures each plan in 4 turns of fresh worker processes."""
MEDIAN_BOUND, MAX_BOUND = 0.05, 0.10
"""The bounds the issue set on one run: median error <= 5%, maximum <= 10%."""


def hopper_runs() -> list[dict[str, Any]]:
    return artifact(HOPPER)["runs"]


def grpo_runs() -> list[dict[str, Any]]:
    return [artifact(path) for path in GRPO]


def percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def on_cores(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The plans that ran on the machine's cores (not oversubscribed): the ones validate summarises."""
    return [p for p in run["plans"] if not p["oversubscribed"]]


def fidelity(plan: dict[str, Any], iterations: int) -> PlanFidelity:
    """A plan row as :class:`rlinf.core.fidelity.PlanFidelity`, its iterations split into validate's turns."""
    return PlanFidelity(
        name=plan["name"],
        predicted_s=plan["predicted_s"],
        measured_s=plan["measured_s"],
        measured_each_s=tuple(plan["measured_each_s"]),
        turn_sizes=tuple(split_iterations(iterations, TURNS)),
    )


def plan_error(plan: dict[str, Any]) -> float:
    """A plan's error in rlinf's one measure, ``measured / predicted - 1`` (positive: slower than predicted),
    recomputed from its times (artifacts written before it stored ``|predicted - measured| / measured``)."""
    return plan["measured_s"] / plan["predicted_s"] - 1


def run_errors(run: dict[str, Any]) -> list[float]:
    """``|measured / predicted - 1|`` of each plan on the cores of a validate run."""
    return [abs(plan_error(p)) for p in on_cores(run)]


def signed(value: float) -> str:
    return f"{100 * value:+.1f}%"


def within_bounds(errors: list[float]) -> bool:
    return statistics.median(errors) <= MEDIAN_BOUND and max(errors) <= MAX_BOUND


def within_turn_range(run: dict[str, Any]) -> tuple[int, int]:
    """How many of a run's predictions on the cores lie within their plan's range of turn medians, of how many."""
    verdicts = [bool(fidelity(p, run["iterations"]).within_turn_range) for p in on_cores(run)]
    return sum(verdicts), len(verdicts)


def machine(run: dict[str, Any]) -> str:
    return run["provenance"].get("processor", "not recorded")


# ------------------------------------------------------------------------------------------------ Hopper
def signed_errors(runs: list[dict[str, Any]]) -> list[float]:
    """``measured / predicted - 1`` of every prediction on the cores of ``runs`` (positive: the plan ran slower
    than predicted)."""
    return [p["measured_s"] / p["predicted_s"] - 1 for r in runs for p in on_cores(r)]


def pooled() -> dict[str, float]:
    """Every shipped validate prediction pooled: how many, the median, 90th percentile and largest absolute error,
    and the bias (the signed median)."""
    signed = signed_errors(hopper_runs() + grpo_runs())
    errors = sorted(abs(e) for e in signed)
    return {
        "count": len(signed),
        "median": statistics.median(errors),
        "p90": statistics.quantiles(errors, n=10, method="inclusive")[-1],
        "max": errors[-1],
        "bias": statistics.median(signed),
    }


def accuracy() -> str:
    """The validate studies' part of the README's accuracy paragraph: every prediction pooled."""
    hopper, grpo, all_of = hopper_runs(), grpo_runs(), pooled()
    return (
        f"Over the {all_of['count']} plans that the shipped `rlinf validate` runs predicted out of sample and then "
        f"measured ({len(signed_errors(hopper))} Hopper PPO plans in {len(hopper)} runs, "
        f"{len(signed_errors(grpo))} GRPO plans in {len(grpo)} runs, 2 CPU cores), a prediction is typically "
        f"{percent(all_of['median'])} off (the median of the absolute error), {percent(all_of['p90'])} at the 90th "
        f"percentile and {percent(all_of['max'])} at most; their bias, the signed median, is {all_of['bias']:+.1%}."
    )


def hopper_table() -> str:
    """One row per Hopper validate run."""
    lines = [
        "| run | commit | processor | median \\|error\\| | max \\|error\\| | Kendall tau | pick vs measured best | "
        "within turn range | load average |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in hopper_runs():
        inside, total = within_turn_range(run)
        lines.append(
            f"| {run['label']} | {run['provenance']['commit']} | {machine(run)} | "
            f"{percent(statistics.median(run_errors(run)))} | {percent(max(run_errors(run)))} | {run['kendall_tau']:.2f} | "
            f"{'the best' if run['top1_match'] else percent(run['top1_regret']) + ' slower'} | "
            f"{inside} of {total} | {load(run['provenance']).removeprefix('load average ')} |"
        )
    notes = [
        textwrap.fill(f"- {run['label']}: {run['note']}.", 115, subsequent_indent="  ")
        for run in hopper_runs()
        if "note" in run
    ]
    return "\n".join([*lines, "", *notes])


def hopper_tallies() -> str:
    runs = hopper_runs()
    met = sum(within_bounds(run_errors(r)) for r in runs)
    inside = [within_turn_range(r) for r in runs]
    text = (
        f"As measured, the errors meet the bounds set for one run (median <= {MEDIAN_BOUND:.0%}, max <= "
        f"{MAX_BOUND:.0%}) in {met} of {len(runs)} runs; the pick was the measured best in "
        f"{sum(r['top1_match'] for r in runs)} of {len(runs)}. Of the {sum(n for _, n in inside)} predictions on the "
        f"cores, {sum(i for i, _ in inside)} lie within their plan's range of turn medians, a range that holds a "
        f"plan's typical turn time with probability {1 - 2 / 2**TURNS:.1%} (the sign test's interval for a median of "
        f"{TURNS} turns)."
    )
    return textwrap.fill(text, 115)


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.1f} ms"


def hopper_first_run() -> str:
    """The first run, plan by plan."""
    run = hopper_runs()[0]
    lines = [
        f"| plan ({run['label']}, commit {run['provenance']['commit']}) | proposed by | a probe plan | predicted | "
        "measured | error (measured / predicted - 1) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for p in on_cores(run):
        lines.append(
            f"| {p['name'].replace(' | ', ', ')} | {p['source']} | {'yes' if p['in_profile'] else 'no'} | "
            f"{_ms(p['predicted_s'])} | {_ms(p['measured_s'])} | {signed(plan_error(p))} |"
        )
    apart = [p for p in run["plans"] if p["oversubscribed"]]
    lines += [
        "",
        *(
            textwrap.fill(
                f"Reported apart, since it needs more devices than cores: {p['name'].replace(' | ', ', ')} (logical devices on "
                f"{run['num_devices']} cores): predicted {_ms(p['predicted_s'])}, measured {_ms(p['measured_s'])}.",
                115,
            )
            for p in apart
        ),
    ]
    return "\n".join(lines).rstrip()


def _spread(values: list[float], signed: bool = False) -> str:
    fmt = "{:+.1f}%" if signed else "{:.1f}%"
    return f"{fmt.format(100 * min(values))} to {fmt.format(100 * max(values))}"


def hopper_replay() -> str:
    """Today's replay of every run's profile, with the probes as measured and with their speeds evened out."""
    study = artifact(HOPPER)
    replay = study["replay"]
    lines = [
        "| run | commit | probes as measured | probe speeds evened | a plan from its own probe alone | "
        "training step, fastest / slowest probe |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    met = {"as_measured": 0, "evened": 0}
    for run in study["runs"]:
        if run["label"] not in replay["runs"]:
            lines.append(f"| {run['label']} | {run['provenance']['commit']} | not replayed yet | | | |")
            continue
        rows = replay["runs"][run["label"]]
        cells = []
        for key in ("as_measured", "evened"):
            errors = list(rows[key].values())
            met[key] += within_bounds(errors)
            cells.append(f"{percent(statistics.median(errors))} / {percent(max(errors))}")
        own = list(rows["own_probe"].values())
        steps = rows["training_step_ms"]
        lines.append(
            f"| {run['label']} | {run['provenance']['commit']} | {' | '.join(cells)} | "
            f"{_spread(own, signed=True) if own else '-'} | {min(steps):.1f} / {max(steps):.1f} ms |"
        )
    own_all = [e for rows in replay["runs"].values() for e in rows["own_probe"].values()]
    summary = (
        f"Median / max error over the plans on the cores. With the probes' speeds evened the bounds hold in "
        f"{met['evened']} of {len(study['runs'])} replays, without it in {met['as_measured']}. A measured plan that "
        f"was also a probe, predicted from its own probe's samples alone (6 iterations in one set of worker "
        f"processes), lands {_spread(own_all, signed=True)} from its later measurement over all runs. Replayed at "
        f"commit {replay['provenance']['commit']} (`python benchmarks/replay_validate.py --write`)."
    )
    return "\n".join([*lines, "", textwrap.fill(summary, 115)])


# ------------------------------------------------------------------------------------------------ GRPO
def grpo_summary() -> str:
    """One row per GRPO validate run."""
    lines = [
        "| run | artifact | commit | median \\|error\\| | max \\|error\\| | Kendall tau | pick vs measured best | "
        "load average | wall |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for number, (path, run) in enumerate(zip(GRPO, grpo_runs(), strict=True), start=1):
        p = run["provenance"]
        lines.append(
            f"| {number} | `{path}` | {p['commit']} | {percent(statistics.median(run_errors(run)))} | "
            f"{percent(max(run_errors(run)))} | {run['kendall_tau']:.2f} | "
            f"{'the best' if run['top1_match'] else percent(run['top1_regret']) + ' slower'} | "
            f"{load(p).removeprefix('load average ')} | {p['wall_s']:.0f} s |"
        )
    return "\n".join(lines)


def grpo_runs_detail() -> str:
    """Every GRPO validate run, plan by plan."""
    parts = []
    for number, run in enumerate(grpo_runs(), start=1):
        lines = [
            f"Run {number} (commit {run['provenance']['commit']}):",
            "",
            "| plan | source | predicted | measured | error (measured / predicted - 1) |",
            "| --- | --- | --- | --- | --- |",
        ]
        for p in run["plans"]:
            marks = " (a probe)" if p["in_profile"] else ""
            if p["oversubscribed"]:
                marks += " (logical devices on the 2 cores, not in the summary)"
            lines.append(
                f"| {p['name'].replace(' | ', ', ')}{marks} | {p['source']} | {_ms(p['predicted_s'])} | "
                f"{_ms(p['measured_s'])} | {signed(plan_error(p))} |"
            )
        parts.append("\n".join(lines))
    return "\n\n".join(parts)
