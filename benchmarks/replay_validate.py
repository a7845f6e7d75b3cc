"""Today's code replaying the profiles of the Hopper validate runs against what those runs measured.

Each plan is
measured on the cores predicted out of sample from the profile its run took (``docs/data/validate_hopper.json``),
as ``rlinf validate`` predicts now, against the median measured in that run.

    python benchmarks/replay_validate.py            # print the replay of every run
    python benchmarks/replay_validate.py --write    # store it as the study's "replay" (then: measurements.py --write)

The profiles (5 MB each) are not in the tree: each run names the commit and path that hold its profile in git
history (``profile``), and this script reads it from there (``git show COMMIT:PATH``), or, for a run added since
(no commit), from the path it was written to; ``--profile LABEL=FILE`` reads one from a file instead (JSON, or JSON compressed with xz, as ``tests/data/`` holds two). Per run it
stores, plan by plan: the error ``|measured / predicted - 1|`` with the probes as measured and with their speeds evened out
(:func:`rlinf.app.profiling.even_probe_speeds`), the signed error of a measured plan that was also a probe when
predicted from its own probe's samples alone, and the training step's median in each probe.
"""

from __future__ import annotations

import argparse
import functools
import json
import lzma
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import suite

from rlinf.app.jobs import load_job_config
from rlinf.app.profiling import COST_STATISTIC, samples_by_plan
from rlinf.app.validation import out_of_sample
from rlinf.core.cluster import cpu_cluster
from rlinf.core.costs import fit
from rlinf.core.files import write_text_atomic
from rlinf.core.lowering import lower
from rlinf.core.plan import Plan, plan_from_dict
from rlinf.core.trace import Trace, trace_from_dict
from simulator import simulate

ROOT = Path(__file__).resolve().parent.parent
STUDY = ROOT / "docs" / "data" / "validate_hopper.json"
CONFIG = ROOT / "examples" / "hopper_ppo.yaml"


def plan_from_name(name: str, num_devices: int) -> Plan:
    """A plan from its description, e.g. ``hybrid: actor@0 env@0 rollout@1 | loop=2 | offload actor``."""
    placements, granularity, *offload = name.split(": ", 1)[1].split(" | ")
    data = {
        "placement": dict(item.split("@") for item in placements.split()),
        "granularity": {k: int(v) for k, v in (item.split("=") for item in granularity.split())},
        "offload": offload[0].removeprefix("offload ").split(",") if offload else [],
    }
    return plan_from_dict(data, num_devices)


def load_profile(source: str | Path) -> Trace:
    """A profile from a file (``.json`` or ``.json.xz``) or from git history (``COMMIT:PATH``)."""
    text = str(source)
    if text.endswith(".xz"):
        raw = lzma.decompress(Path(text).read_bytes()).decode()
    elif Path(text).is_file():
        raw = Path(text).read_text()
    else:
        raw = subprocess.run(
            ["git", "show", text], capture_output=True, text=True, check=True, cwd=ROOT
        ).stdout
    return trace_from_dict(json.loads(raw), source=Path(text.split(":")[-1]).name)


@functools.cache
def _job() -> tuple[Any, Any]:
    return load_job_config(CONFIG)


def _predicted_s(trace: Trace, plan: Plan, num_devices: int) -> float:
    job, config = _job()
    cluster = cpu_cluster(num_devices)
    costs = fit(trace, cluster, statistic=COST_STATISTIC)
    return simulate(lower(job.workflow(config), plan, cluster), costs).iteration_s


def replay_run(run: dict[str, Any], trace: Trace) -> dict[str, Any]:
    """One run's replay from its profile ``trace`` (see the module's docstring)."""
    by_plan = samples_by_plan(trace)
    if not by_plan:
        raise ValueError("the profile does not say which probe plan measured which samples")
    num_devices = run["num_devices"]
    measured = {p["name"]: p["measured_s"] for p in run["plans"] if not p["oversubscribed"]}
    replay: dict[str, Any] = {"as_measured": {}, "evened": {}, "own_probe": {}}
    for name, measured_s in measured.items():
        plan = plan_from_name(name, num_devices)
        for key, even in (("as_measured", False), ("evened", True)):
            left_out, feeding = out_of_sample(trace, by_plan, plan, even_speeds=even)
            if feeding != run["predicted_from"][name]:
                raise ValueError(
                    f"{name}: today's validate would predict it from other probes than the run did"
                )
            replay[key][name] = abs(measured_s / _predicted_s(left_out, plan, num_devices) - 1)
    for plan, samples in by_plan:
        if plan.describe() in measured:
            own = _predicted_s(attrs.evolve(trace, samples=samples), plan, num_devices)
            replay["own_probe"][plan.describe()] = own / measured[plan.describe()] - 1
    steps = (
        [s.seconds for s in samples if s.component == "actor" and s.op == "train" and s.devices == 1]
        for _, samples in by_plan
    )
    replay["training_step_ms"] = [1e3 * statistics.median(s) for s in steps if s]
    return replay


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="store the replay in the study's JSON")
    parser.add_argument(
        "--profile", action="append", default=[], metavar="LABEL=FILE", help="a run's profile"
    )
    args = parser.parse_args(argv)
    started = suite.begin("python benchmarks/replay_validate.py", argv)
    study = json.loads(STUDY.read_text())
    files = dict(item.split("=", 1) for item in args.profile)
    runs = {}
    for run in study["runs"]:
        label = run["label"]
        profile = run["profile"]
        in_git = f"{profile['commit']}:{profile['path']}" if "commit" in profile else profile["path"]
        source = files.get(label) or in_git
        runs[label] = replay_run(run, load_profile(source))
        errors = runs[label]["evened"].values()
        print(f"{label}: median {statistics.median(errors):.1%}, max {max(errors):.1%}", file=sys.stderr)
    if args.write:
        study["replay"] = {"provenance": suite.finish(started), "runs": runs}
        write_text_atomic(STUDY, json.dumps(study, indent=1) + "\n")
        print(f"wrote {STUDY.relative_to(ROOT)}")
    else:
        print(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
