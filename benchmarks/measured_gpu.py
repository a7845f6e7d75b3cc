"""The GPU check's figures in ``docs/gpu.md``, rendered from the artifacts of ``gpu_check.py``.

The artifacts are ``docs/data/gpu_check_<device>.json``. Part of ``benchmarks/measurements.py``."""

from __future__ import annotations

import functools
import json
import statistics
import warnings
from pathlib import Path
from typing import Any

import suite

ROOT = Path(__file__).resolve().parent.parent


def artifacts() -> list[tuple[str, dict[str, Any]]]:
    """Every committed GPU check artifact, by file name."""
    return [
        (p.name, json.loads(p.read_text())) for p in sorted((ROOT / "docs" / "data").glob("gpu_check_*.json"))
    ]


def _provenance(document: dict[str, Any]) -> str:
    runs = document["provenance"]
    runs = runs if isinstance(runs, list) else [runs]
    parts = [
        f"run {i}: {r['date']}, commit {r['commit']}, torch {r['torch']} (CUDA {r['cuda']}), {r['cpu_cores']} cores"
        for i, r in enumerate(runs, 1)
    ]
    return "; ".join(parts)


def _figure(check: dict[str, Any]) -> str:
    """The headline of one check."""
    f = check.get("figures") or {}
    name = check["name"]
    if name == "gpu_tests":
        return f["summary"]
    if name == "offload_bench":
        g = f["gb_per_s"]
        return (
            f"offload {g['offload']:.1f} GB/s ({f['offload_over_copy']:.2f}x a pinned `copy_`), onload "
            f"{g['onload']:.1f} GB/s ({f['onload_over_copy']:.2f}x)"
        )
    if name == "decode_steps":
        parts = []
        for label, run in f.items():
            steps = ", ".join(f"{1e3 * r['step_s']:.1f}" for r in run["rows"])
            batches = "/".join(str(r["batch"]) for r in run["rows"])
            parts.append(f"{label}: {steps} ms at batch {batches}")
        return "; ".join(parts)
    if name == "rollout_throughput":
        rows = [r for r in f["rows"] if r["engine"] == "rlinf"]
        best = max(rows, key=lambda r: r["batch"])
        return (
            f"{f['preset']}: {best['tokens_per_s']:,.0f} tokens/s at batch {best['batch']}; one decode step "
            + ", ".join(f"{1e3 * r['step_s']:.1f} ms at batch {r['batch']}" for r in rows)
        )
    if name == "grpo_05b_predicted":
        return (
            f"the collocated-with-offload run predicted from validate's profile (another run's probes): "
            f"{f['predicted_iteration_s']:.1f} s against {f['median_iteration_s']:.1f} s measured "
            f"({f['measured_over_predicted']:.2f}x)"
        )
    if name.startswith("validate"):
        return (
            f"median error {100 * f['median_error']:.1f}%, max {100 * f['max_error']:.1f}%, bias "
            f"{100 * f['bias']:+.1f}% over {len(f['plans'])} plans"
        )
    rate = next((k for k in f if k.startswith("median_") and k.endswith("_per_s")), None)
    if rate is None:
        return "see the artifact"
    unit = "env steps/s" if "env_steps" in rate else "tokens/s"
    text = f"{f[rate]:,.0f} {unit}, iteration {1e3 * f['median_iteration_s']:.0f} ms"
    if "predicted_iteration_s" in f:
        text += f" (predicted {1e3 * f['predicted_iteration_s']:.0f} ms)"
    if "heldout_accuracy" in f:
        text += f", held-out accuracy {f['heldout_accuracy']:.3f}"
    return text


def _result(check: dict[str, Any]) -> tuple[str, str]:
    """(result, figures) of one check: passed, skipped, or failed (crashed or timed out: failed either way, with
    what it measured before and where its time went)."""
    if check.get("skipped"):
        return "skipped", check["skipped"]
    if check.get("ok"):
        return "passed", _figure(check)
    text = check.get("error", "")
    partial = check.get("partial_figures") or {}
    if "median_iteration_s" in partial:
        text += (
            f"; before the cut: {partial['iterations']} iterations, median {partial['median_iteration_s']:.1f} s "
            f"(first {partial['first_iteration_s']:.1f} s)"
        )
    slowest = sorted(check.get("phases") or [], key=lambda p: -p["took_s"])[:3]
    if slowest:
        text += "; longest phases: " + ", ".join(f"{p['phase']} {p['took_s']:.0f} s" for p in slowest)
    return "**failed**", text


def gpu_check() -> str:
    """Per device, every check of its GPU check artifact: passed, failed (a crash or a timeout, with its phases) or
    skipped, its time and its headline."""
    found = artifacts()
    if not found:
        return (
            "No GPU check has run yet: no `docs/data/gpu_check_<device>.json` is committed, and this page reports no "
            "GPU figure."
        )
    out = []
    for path, document in found:
        out += [
            f"**{document['device']}** (`docs/data/{path}`; {_provenance(document)}):",
            "",
            "| check | run | result | seconds | figures |",
            "| --- | --- | --- | --- | --- |",
        ]
        runs = (
            document["provenance"] if isinstance(document["provenance"], list) else [document["provenance"]]
        )
        number = {r["date"]: i + 1 for i, r in enumerate(runs)}
        for check in document["checks"]:
            result, figures = _result(check)
            run = number.get(check.get("run", runs[0]["date"]), 1)
            out.append(f"| `{check['name']}` | {run} | {result} | {check.get('seconds', '')} | {figures} |")
        ratio = document.get("summary", {}).get("hopper_cores_over_gpu_alone")
        if ratio is not None:
            out += [
                "",
                f"Hopper (32 environments) with CPU cores for the environments ran {ratio:.2f}x the env steps/s "
                "of Hopper on the GPU alone (each with the plan its own `--mode auto` chose, same config, same run).",
            ]
        out.append("")
    return "\n".join(out).rstrip()


WINDOW = ROOT / "docs" / "data" / "gpu_window_h200"
"""What the H200 window's calls after the GPU check left (``docs/data/gpu_window_h200/README.md``)."""


def window() -> dict[str, Any]:
    """The H200 window's before/after figures, computed from its files: the 0.5B GRPO run of the GPU check (commit
    2a2f7d2) against the same command after the fixes (3a26aa7), the decode's GPU busy fraction, the weight sync
    in validate's profile, the rollout engines at batch 256."""
    before = suite.read_jsonl(WINDOW / "run1_grpo_05b_metrics.jsonl")
    after = suite.read_jsonl(WINDOW / "call4_grpo_05b_metrics.jsonl")
    steady = lambda rows: statistics.median(r["iteration_s"] for r in rows[1:])  # noqa: E731
    rate = lambda rows: statistics.median(r["tokens_per_s"] for r in rows[1:])  # noqa: E731
    profile = json.loads((WINDOW / "run1_validate_grpo_profile_trace.json").read_text())
    syncs = [s["seconds"] for s in profile["samples"] if s["op"] == "sync_weights"]
    iteration = sum(s["seconds"] for s in profile["samples"])
    busy_before = json.loads((WINDOW / "call2_busy_fraction_b64.json").read_text())["busy"]
    rollout = json.loads((WINDOW / "call4_rollout_b256.json").read_text())
    by = {r["engine"]: r for r in rollout["rows"]}
    memory = [int(line.split(",")[0]) for line in (WINDOW / "call4_gpu_memory.csv").read_text().splitlines()]
    total = int((WINDOW / "call4_gpu_memory.csv").read_text().splitlines()[0].split(",")[1])
    return {
        "grpo_before_s": steady(before),
        "grpo_after_s": steady(after),
        "grpo_before_iterations": len(before),
        "grpo_after_iterations": len(after),
        "tokens_per_s_before": rate(before),
        "tokens_per_s_after": rate(after),
        "first_before_s": before[0]["iteration_s"],
        "first_after_s": after[0]["iteration_s"],
        "sync_s": statistics.mean(syncs),
        "syncs": len(syncs),
        "profile_iteration_s": iteration,
        "busy_before": busy_before["gpu_busy_fraction"],
        "busy_before_batch": busy_before["batch"],
        "busy_after": rollout["busy"]["gpu_busy_fraction"],
        "busy_after_batch": rollout["busy"]["batch"],
        "rlinf_b256": by["rlinf"]["tokens_per_s"],
        "generate_b256": by["generate-static"]["tokens_per_s"],
        "step_b256_s": by["rlinf"]["step_s"],
        "of_roofline_b256": by["rlinf"]["of_roofline"],
        "peak_memory_mib": max(memory),
        "memory_mib": total,
    }


@functools.cache
def hopper_cause() -> dict[str, Any]:
    """The H200 Hopper-with-cores run's prediction taken apart: the probe plans its profile measured, the plan
    simulated from that profile (the prediction) and from the run's own op samples (what its ops explain)."""
    from rlinf.app.validation import simulated
    from rlinf.core.lowering import lower
    from rlinf.core.plan import load_plan
    from rlinf.core.trace import load_trace

    profile = load_trace(WINDOW / "run1_hopper_cores_profile_trace.json")
    run = load_trace(WINDOW / "run1_hopper_cores_run_trace.json")
    plan = load_plan(
        WINDOW / "run1_hopper_cores_plan.yaml",
        profile.cluster.num_devices,
        num_cores=profile.cluster.num_cores,
    )
    program = lower(profile.workflow, plan, profile.cluster)
    check = next(
        c
        for _, d in artifacts()
        if d["device"] == "NVIDIA H200"
        for c in d["checks"]
        if c["name"] == "hopper_auto_cpu_cores"
    )
    pools = sorted({getattr(s, "pool", "device") for s in profile.samples})
    return {
        "probes": list(profile.provenance["probe_plans"]),
        "budget_s": profile.provenance["budget_s"],
        "pools_profiled": pools,
        "predicted_s": quietly(simulated, program, profile, profile.cluster).iteration_s,
        "replayed_s": quietly(simulated, program, run, run.cluster).iteration_s,
        "measured_s": check["figures"]["median_iteration_s"],
        "plan": plan.describe(),
    }


def quietly(function: Any, *args: Any) -> Any:
    """``function(*args)`` without its warnings (the cost model's extrapolation warnings are the finding, said in
    the text)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args)


def hopper_cause_text() -> str:
    """docs/gpu.md's paragraph on the cause of the H200 Hopper-with-cores error, from :func:`hopper_cause`."""
    h = hopper_cause()
    return (
        f"The H200's `hopper_auto_cpu_cores` ran {1e3 * h['measured_s']:.0f} ms per iteration against "
        f"{1e3 * h['predicted_s']:.0f} ms predicted. Simulated with the run's own op samples, the plan takes "
        f"{1e3 * h['replayed_s']:.0f} ms ({h['replayed_s'] / h['measured_s'] - 1:+.0%} of measured): the simulator's "
        f"structure is right and the costs were wrong. Its {h['budget_s']:.0f} s profile measured "
        f"{len(h['probes'])} probe plan (`{h['probes'][0]}`) before the budget ran out; the plan chosen "
        f"(`{h['plan']}`) runs its environments on 11 CPU cores, a pool no probe measured, so their cost was "
        "scaled from one device's samples of another size (`rlinf simulate` warns so). The same first probe "
        "filled validate's budget for the 0.5B GRPO, which then had no other probe to predict from. "
        "A budget shared between probes is issue 48's."
    )


def window_text() -> str:
    """docs/gpu.md's account of the H200 window's follow-up calls, from :func:`window`."""
    w = window()
    return "\n".join(
        [
            f"- **GRPO on the 0.5B shape runs on a GPU, collocated with offload.** In the GPU check (commit 2a2f7d2) "
            f"it ran {w['grpo_before_iterations']} iterations before its 150 s limit: a median "
            f"{w['grpo_before_s']:.1f} s per iteration after the first ({w['first_before_s']:.1f} s), "
            f"{w['tokens_per_s_before']:,.0f} generated tokens/s. The same configuration after the two fixes "
            f"below (3a26aa7, on a fresh H200, {w['grpo_after_iterations']} iterations): {w['grpo_after_s']:.1f} s "
            f"per iteration after the first ({w['grpo_before_s'] / w['grpo_after_s']:.2f}x faster; first "
            f"{w['first_after_s']:.1f} s), {w['tokens_per_s_after']:,.0f} tokens/s. The GPU's memory peaked at "
            f"{w['peak_memory_mib']:,} of {w['memory_mib']:,} MiB over that call (the rollout benchmark and this "
            "run; every process, sampled by `nvidia-smi` every 250 ms).",
            f"- **Weight sync was most of an iteration.** The profile `rlinf validate` took in the check measured "
            f"{w['syncs']} weight syncs of {w['sync_s']:.1f} s each in a {w['profile_iteration_s']:.1f} s "
            "iteration: the actor sent float32 copies of every tensor, one synchronised device-to-host copy each, "
            "made again for each receiver. Now the payload is in the receivers' compute dtype (bfloat16 bits on a "
            "GPU, half the bytes), copied to the host in one transfer, once per policy version "
            "(`tests/test_weight_sync.py`).",
            f"- **The decode step was host-bound.** At batch {w['busy_before_batch']} the GPU was busy "
            f"{100 * w['busy_before']:.1f}% of rlinf's decode (kernel time over wall time under torch's profiler); "
            "the profiler put half the host time in `aten::_cudnn_attention_forward`, about 1 ms per call, 24 "
            "calls a step (`docs/data/gpu_window_h200/call3_decode_profile_b64.txt`): cuDNN's attention builds "
            "its plan again whenever the key length changes, which a dynamic KV cache does every step, while "
            "`generate` with a static cache ran the same steps 2.2-2.8x faster. Generation now leaves cuDNN's "
            f"kernel out on a GPU. After it, at batch 256: rlinf {w['rlinf_b256']:,.0f} tokens/s against "
            f"`generate`'s {w['generate_b256']:,.0f} ({w['rlinf_b256'] / w['generate_b256']:.2f}x), one step "
            f"{1e3 * w['step_b256_s']:.0f} ms, {100 * w['of_roofline_b256']:.1f}% of the decode roofline, the GPU "
            f"busy {100 * w['busy_after']:.1f}%: still host-bound (per-op launches and Python per layer), the gap "
            "to the roofline being host time, not kernels.",
        ]
    )


def rollout_table() -> str:
    """rlinf's rollout against ``generate`` with a static cache and the roofline, per batch: every check's rows
    (a check cut at its limit keeps the rows it measured) and the window's call after the fixes."""
    tables = []
    sources = [
        (document, c)
        for _, document in artifacts()
        for c in document["checks"]
        if c["name"] == "rollout_throughput"
    ]
    found = []
    for document, check in sources:
        f = check.get("figures")
        if f is None and document["device"] == "NVIDIA H200":
            f = json.loads((WINDOW / "run1_rollout_partial.json").read_text())
        if f is not None:
            commit = document["provenance"]["commit"] if isinstance(document["provenance"], dict) else "?"
            found.append(
                (
                    f,
                    f"the GPU check (commit {commit}; cut at its limit after these rows)"
                    if not check.get("ok")
                    else f"the GPU check (commit {commit})",
                )
            )
    if (WINDOW / "call4_rollout_b256.json").is_file():
        found.append(
            (
                json.loads((WINDOW / "call4_rollout_b256.json").read_text()),
                "call 4 of the window (commit 3a26aa7, after the cuDNN fix)",
            )
        )
    for f, source in found:
        lines = [
            f"{f['preset']} ({f['parameters'] / 1e6:.0f}M parameters, bf16, random weights) on {f['device']}, "
            f"{source}: {f['prompt_tokens']}-token prompts continued by exactly {f['new_tokens']} sampled tokens "
            f"(`python benchmarks/bench_rollout.py`, median of {f['repeats']}).",
            "",
            "| batch | rlinf tokens/s | generate (static cache) tokens/s | roofline tokens/s | rlinf step | "
            "roofline step | rlinf of roofline |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        by = {(r["engine"], r["batch"]): r for r in f["rows"]}
        for batch in sorted({r["batch"] for r in f["rows"] if ("rlinf", r["batch"]) in by}):
            ours, theirs = by[("rlinf", batch)], by.get(("generate-static", batch))
            lines.append(
                f"| {batch} | {ours['tokens_per_s']:,.0f} | "
                f"{'' if theirs is None else format(theirs['tokens_per_s'], ',.0f')} | "
                f"{ours['roofline_tokens_per_s']:,.0f} | {1e3 * ours['step_s']:.1f} ms | "
                f"{1e3 * ours['roofline_step_s']:.2f} ms | {100 * ours['of_roofline']:.1f}% |"
            )
        tables.append("\n".join(lines))
    return "\n\n".join(tables) or "No rollout measurement on a GPU is committed yet."


def readme_line() -> str:
    """The README's sentence on GPUs, over every GPU check artifact and every auto-mode run in them."""
    found = artifacts()
    if not found:
        return "No GPU check has run yet (`docs/gpu.md`)."
    parts = []
    for _, document in found:
        passed = sum(1 for c in document["checks"] if c.get("ok"))
        runs = (
            document["provenance"] if isinstance(document["provenance"], list) else [document["provenance"]]
        )
        parts.append(
            f"{document['device']} ({len(runs)} run{'s' if len(runs) > 1 else ''}): {passed} of "
            f"{len(document['checks'])} checks passed"
        )
    ratios = [r for _, _, r in _prediction_rows()]
    text = "GPU checks (`python benchmarks/gpu_check.py`, `docs/gpu.md`, every run counted): " + "; ".join(
        parts
    )
    if ratios:
        cause = hopper_cause()
        text += (
            f". Runs with a prediction measured {min(ratios):.2f}x to {max(ratios):.2f}x their predicted "
            f"iteration ({len(ratios)} runs); the H200 Hopper run's {cause['measured_s'] / cause['predicted_s']:.2f}x "
            "came from a profile that measured one probe plan and a chosen plan that ran its environments on CPU "
            "cores no probe had measured"
        )
    w = window()
    text += (
        f". GRPO on the Qwen2.5-0.5B shape ran on the H200 at {w['grpo_after_s']:.1f} s per iteration "
        f"({w['grpo_before_s'] / w['grpo_after_s']:.2f}x faster than in the check, after fixing its weight sync and "
        "its decode's attention kernel), its rollout at batch 256 as fast as `generate` with a static cache but "
        "host-bound"
    )
    return text + "."


def _prediction_rows() -> list[tuple[str, dict[str, Any], float]]:
    """(label, figures, measured / predicted) of every check attempt with a prediction, in every artifact."""
    rows = []
    for _, document in artifacts():
        runs = (
            document["provenance"] if isinstance(document["provenance"], list) else [document["provenance"]]
        )
        number = {r["date"]: i + 1 for i, r in enumerate(runs)}
        short = document["device"].split()[1] if len(document["device"].split()) > 1 else document["device"]
        for check in document["checks"]:
            for attempt in [*check.get("earlier", []), check]:
                f = attempt.get("figures") or {}
                if "predicted_iteration_s" not in f or not attempt.get("ok"):
                    continue
                label = f"`{check['name']}`, {short} run {number.get(attempt.get('run'), 1)}"
                rows.append((label, f, f["measured_over_predicted"]))
    return rows


def predictions() -> str:
    """Every check's measured against predicted iteration, every attempt on every device."""
    lines = []
    for label, f, ratio in _prediction_rows():
        chosen = f.get("chosen", "").split(" (from")[0]
        plan = f" plan `{chosen}`" if chosen else f" predicted from `{f.get('predicted_from', '?')}`"
        lines.append(
            f"- {label}: measured {1e3 * f['median_iteration_s']:.0f} ms against "
            f"{1e3 * f['predicted_iteration_s']:.0f} ms predicted ({ratio:.2f}x),{plan}"
        )
    return "\n".join(lines) or "No auto-mode run on a GPU is committed yet."
