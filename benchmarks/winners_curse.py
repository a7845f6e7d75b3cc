"""The winner's curse, measured on real profiles: how optimistic is the chosen plan's prediction?

How much lower is the chosen plan's prediction from the samples that
chose it than from samples that did not?

    python benchmarks/winners_curse.py RUN_DIR [RUN_DIR ...] --splits 4 --artifact docs/data/winners_curse.json

For each profile (``RUN_DIR/profile_trace.json`` of a ``rlinf train --mode auto`` run), ``--splits`` random halves:
each probe's measured iterations dealt at random into two halves of equal size (the halves of
:func:`rlinf.app.held_out.halves`, but drawn at random instead of alternately). Each half chooses a plan as the auto
mode does (:func:`rlinf.app.auto.plan_from_trace`) and the other half predicts that plan. ``optimism`` = the choosing
half's prediction of its own choice over the other half's prediction of it, minus 1: negative when choosing makes the
winner look fast. Its mean over every (profile, split, half) is the selection bias; the ``control`` is the same ratio
for one fixed plan (the plan the whole profile chooses), which no half selected: the halves' noise alone.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import warnings
from pathlib import Path
from typing import Any

import attrs
import suite

from rlinf.app.auto import plan_from_trace
from rlinf.app.held_out import iterations_of
from rlinf.app.jobs import load_job_config
from rlinf.app.profiling import probe_records
from rlinf.core.trace import Trace, load_trace

CONFIG = "examples/hopper_ppo.yaml"


def random_halves(trace: Trace, rng: random.Random) -> tuple[Trace, Trace]:
    """Each probe's iterations dealt at random into two halves of (nearly) equal size."""
    sides: tuple[list[Any], list[Any]] = ([], [])
    entries: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
    for record in probe_records(trace):
        iterations = iterations_of(trace, record)
        assert iterations is not None and len(iterations) >= 2, record.plan.describe()
        order = list(range(len(iterations)))
        rng.shuffle(order)
        half = len(order) // 2
        for side, picked in enumerate((sorted(order[:half]), sorted(order[half:]))):
            sides[side].extend(sample for i in picked for sample in iterations[i])
            entries[side].append(
                {
                    "plan": record.plan.to_dict(),
                    "devices": record.num_devices,
                    "samples": sum(len(iterations[i]) for i in picked),
                }
            )
    return tuple(  # type: ignore[return-value]
        attrs.evolve(
            trace, samples=tuple(sides[s]), provenance={**trace.provenance, "probe_plan_samples": entries[s]}
        )
        for s in (0, 1)
    )


def measure(profile: Trace, splits: int, seed: int) -> dict[str, Any]:
    """The optimism and control of every split of one profile."""
    job, config = load_job_config(CONFIG)
    num_devices = profile.cluster.num_devices

    def predictions(trace: Trace) -> tuple[Any, dict[Any, float]]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            auto = plan_from_trace(job, config, trace, num_devices, seed=job.settings.seed)
        return auto.chosen.plan, {c.plan: c.predicted_s for c in auto.candidates}

    whole_choice, _ = predictions(profile)
    rng = random.Random(seed)
    rows = []
    for _ in range(splits):
        first, second = random_halves(profile, rng)
        (chosen_a, a), (chosen_b, b) = predictions(first), predictions(second)
        for chosen, own, other in ((chosen_a, a, b), (chosen_b, b, a)):
            rows.append(
                {
                    "chosen": chosen.describe(),
                    "own_s": own[chosen],
                    "other_s": other[chosen],
                    "optimism": own[chosen] / other[chosen] - 1,
                    "control": own[whole_choice] / other[whole_choice] - 1,
                }
            )
    return {"whole_profile_choice": whole_choice.describe(), "splits": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories of rlinf train --mode auto")
    parser.add_argument("--splits", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--artifact", type=Path, required=True)
    args = parser.parse_args(argv)
    started = suite.begin("python benchmarks/winners_curse.py", argv)
    profiles = {}
    for number, run in enumerate(args.runs):
        label = str(run)  # the run directory as given: two runs may share a folder name
        profiles[label] = measure(load_trace(run / "profile_trace.json"), args.splits, args.seed + number)
        profiles[label]["probe_plans"] = len(probe_records(load_trace(run / "profile_trace.json")))
        print(run, json.dumps([round(r["optimism"], 4) for r in profiles[label]["splits"]]), flush=True)
    rows = [row for profile in profiles.values() for row in profile["splits"]]
    body = {
        "config": CONFIG,
        "profiles": profiles,
        "mean_optimism": statistics.fmean(r["optimism"] for r in rows),
        "mean_control": statistics.fmean(r["control"] for r in rows),
        "chose_the_whole_profiles_plan": sum(
            r["chosen"] == p["whole_profile_choice"] for p in profiles.values() for r in p["splits"]
        ),
        "halves": len(rows),
    }
    suite.write_artifact(args.artifact, body, started)
    print(json.dumps({k: v for k, v in body.items() if k != "profiles"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
