"""The analytic model calibrated on the former GRPO arithmetic workload's profile: docs/calibration.md.

The former workload was a GPT-2-shaped
transformer written in torch, since replaced by the addition task of the GRPO workload; the study is kept with its
data (``docs/data/grpo_arith_former_cpu2_trace.json`` and the ``docs/grpo_validate*.json`` runs).

    python benchmarks/calibrate_arith.py [--split-seeds 0 1 2 3 4]

1. Per sample: for each split seed, the median relative error of the held-out samples before the fit (the analytic
   model's default efficiencies and overheads), after it, and of a per-configuration lookup of the fitted samples
   (the noise floor).
2. Per iteration: the plans of docs/grpo_validate.json that ran without oversubscribing the 2 cores, simulated
   from that run's own profile (docs/grpo_validate_trace.json): (a) the profile itself (``fit(statistic="mean")``,
   in sample: what ``rlinf validate`` does minus leaving each plan's own samples out), (b) the uncalibrated analytic
   trace and (c) the analytic trace calibrated on that profile, against the measured iteration times. Movement
   samples of the profile are carried into both analytic traces (the analytic model does not price data
   movement).
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import attrs
import numpy as np

from rlinf.analytic.calibration import MOVEMENT_OPS, calibrate, calibrated_trace
from rlinf.analytic.llm_workload import LLMWorkload, ModelSpec, ResponseLengths
from rlinf.analytic.synthesis import synthesize
from rlinf.core.costs import fit
from rlinf.core.errors import ExtrapolationWarning
from rlinf.core.lowering import lower
from rlinf.core.plan import plan_from_dict
from rlinf.core.trace import Trace, load_trace
from simulator import simulate

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "docs" / "data" / "grpo_arith_former_cpu2_trace.json"
VALIDATE = ROOT / "docs" / "grpo_validate.json"
VALIDATE_PROFILE = ROOT / "docs" / "grpo_validate_trace.json"
"""The profile taken in the same ``rlinf validate`` run as :data:`VALIDATE`'s measurements."""
# the former workload's model of examples/grpo_arith.yaml (d_model 64, 2 layers, 4 heads, fp32: 102,016 parameters, 408,064 bytes as in the
# profile's state_bytes); prompts "<bos>042+317=" are 9 tokens, responses at most 6. The worker reserves no KV pool,
# so the pool is set to a negligible share of the CPU preset's memory (the rollout's state stays ~0.5 MB).
PRIOR = LLMWorkload(
    model=ModelSpec(
        name="arith-0.1m",
        num_params=102016,
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_kv_heads=4,
    ),
    num_prompts=32,
    group_size=8,
    prompt_tokens=9,
    response=ResponseLengths(median_tokens=5, sigma=0.1, max_tokens=6),
    rollout_model_parallel=1,
    inference_model_parallel=1,
    actor_model_parallel=1,
    weight_bytes_per_param=4.0,
    kv_cache_fraction=1e-5,
)


def plan_of(name: str) -> dict:
    """The plan mapping of a plan's one-line description (``mode: comp@devices ... | edge=m ... | offload a,b``)."""
    head, *rest = [part.strip() for part in name.split("|")]
    placement = dict(item.split("@") for item in head.split(":", 1)[1].split())
    out: dict = {"placement": placement, "granularity": {}}
    for part in rest:
        if part.startswith("offload"):
            out["offload"] = part.split()[1].split(",")
        else:
            out["granularity"].update({k: int(v) for k, v in (item.split("=") for item in part.split())})
    return out


def iteration_s(trace: Trace, plan: dict, statistic: str = "median") -> float:
    program = lower(trace.workflow, plan_from_dict(plan, trace.cluster.num_devices), trace.cluster)
    return simulate(program, fit(trace, statistic=statistic)).iteration_s


def with_movement(trace: Trace, profile: Trace) -> Trace:
    """``trace`` plus the profile's movement samples (as :func:`calibrated_trace` keeps them)."""
    movement = [s for s in profile.samples if s.op in MOVEMENT_OPS]
    return attrs.evolve(trace, samples=(*trace.samples, *movement))


def heldout_rows(profile: Trace, split_seeds: list[int]) -> list[str]:
    """docs/calibration.md's held-out table: per split seed, the median relative error of the held-out samples
    before the fit, after it, and of the per-configuration lookup (the noise floor)."""
    rows = [
        "| split seed | held-out samples | before (prior) | after (fitted) | lookup (noise floor) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for seed in split_seeds:
        row = calibrate(PRIOR, profile.cluster, profile, seed=0, split_seed=seed).heldout_errors[-1]
        rows.append(
            f"| {seed} | {row.num_samples} | {row.median_before:.1%} | {row.median_after:.1%} "
            f"| {row.median_lookup:.1%} |"
        )
    return rows


def iteration_traces(split_seed: int = 0) -> dict[str, Trace]:
    """The traces the iteration table predicts from, all from :data:`VALIDATE_PROFILE`."""
    run = load_trace(VALIDATE_PROFILE)
    result = calibrate(PRIOR, run.cluster, run, seed=0, split_seed=split_seed)
    return {
        "profile": run,
        "analytic, uncalibrated": with_movement(synthesize(PRIOR, run.cluster, seed=0), run),
        "analytic, calibrated": calibrated_trace(
            result,
            run.cluster,
            run,
            seed=0,
            date="-",
            measured_source=str(VALIDATE_PROFILE.relative_to(ROOT)),
        ),
    }


def iteration_errors(traces: dict[str, Trace]) -> tuple[list[str], dict[str, list[float]]]:
    """Table rows and, per trace, each plan's relative error against its measured time."""
    plans = [p for p in json.loads(VALIDATE.read_text())["plans"] if not p["oversubscribed"]]
    rows = []
    errors: dict[str, list[float]] = {name: [] for name in traces}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        for entry in plans:
            plan, truth = plan_of(entry["name"]), entry["measured_s"]
            cells = []
            for name, trace in traces.items():
                predicted = iteration_s(trace, plan, statistic="mean" if name == "profile" else "median")
                errors[name].append(abs(predicted - truth) / truth)
                cells.append(f"{predicted * 1e3:.1f} ms ({(predicted - truth) / truth:+.1%})")
            label = entry["name"].replace("|", "\\|")
            rows.append(f"| {label} | {truth * 1e3:.1f} ms | " + " | ".join(cells) + " |")
    return rows, errors


def iteration_summary(errors: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
    """Per trace, (median, worst) relative error."""
    return {name: (float(np.median(values)), max(values)) for name, values in errors.items()}


def iteration_table(traces: dict[str, Trace]) -> None:
    rows, errors = iteration_errors(traces)
    print("| plan | measured | " + " | ".join(traces) + " |")
    print("| --- | --- |" + " --- |" * len(traces))
    print("\n".join(rows))
    print()
    for name, (median, worst) in iteration_summary(errors).items():
        print(f"{name}: median |error| {median:.1%}, worst {worst:.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split-seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    args = parser.parse_args()
    print("\n".join(heldout_rows(load_trace(PROFILE), args.split_seeds)))
    print()
    iteration_table(iteration_traces(args.split_seeds[0]))


if __name__ == "__main__":
    main()
