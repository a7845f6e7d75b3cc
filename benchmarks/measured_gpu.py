"""The GPU check's figures in ``docs/gpu.md``, rendered from the artifacts ``benchmarks/gpu_check.py`` wrote
(``docs/data/gpu_check_<device>.json``). Part of ``benchmarks/measurements.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def gpu_check() -> str:
    """Per device, every check of the newest GPU check: passed or not, its time and its headline."""
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
            if check.get("skipped"):
                result, figures = "skipped", check["skipped"]
            elif check.get("ok"):
                result, figures = "passed", _figure(check)
            else:
                result, figures = "**failed**", check.get("error", "")
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


def rollout_table() -> str:
    """rlinf's rollout against ``generate`` with a static cache and the roofline, per batch."""
    for _, document in artifacts():
        check = next(
            (c for c in document["checks"] if c["name"] == "rollout_throughput" and c.get("ok")), None
        )
        if check is None:
            continue
        f = check["figures"]
        lines = [
            f"{f['preset']} ({f['parameters'] / 1e6:.0f}M parameters, bf16, random weights) on {f['device']}: "
            f"{f['prompt_tokens']}-token prompts continued by exactly {f['new_tokens']} sampled tokens "
            f"(`python benchmarks/bench_rollout.py`, median of {f['repeats']}).",
            "",
            "| batch | rlinf tokens/s | generate (static cache) tokens/s | roofline tokens/s | rlinf step | "
            "roofline step | rlinf of roofline |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        by = {(r["engine"], r["batch"]): r for r in f["rows"]}
        for batch in sorted({r["batch"] for r in f["rows"]}):
            ours, theirs = by[("rlinf", batch)], by[("generate-static", batch)]
            lines.append(
                f"| {batch} | {ours['tokens_per_s']:,.0f} | {theirs['tokens_per_s']:,.0f} | "
                f"{ours['roofline_tokens_per_s']:,.0f} | {1e3 * ours['step_s']:.2f} ms | "
                f"{1e3 * ours['roofline_step_s']:.2f} ms | {100 * ours['of_roofline']:.0f}% |"
            )
        return "\n".join(lines)
    return "No rollout measurement on a GPU is committed yet."


def readme_line() -> str:
    """The README's sentence on GPUs, from the newest GPU check artifact."""
    found = artifacts()
    if not found:
        return "No GPU check has run yet (`docs/gpu.md`)."
    _, document = found[-1]
    by_name = {c["name"]: c for c in document["checks"]}
    done = [c["name"] for c in document["checks"] if c.get("ok")]
    missing = [c["name"] for c in document["checks"] if not c.get("ok")]
    ratios = [
        c["figures"]["measured_over_predicted"]
        for c in document["checks"]
        if c.get("ok") and "measured_over_predicted" in c.get("figures", {})
    ]
    text = f"On one {document['device']} (`python benchmarks/gpu_check.py`, `docs/gpu.md`): {len(done)} of "
    text += f"{len(document['checks'])} checks passed"
    if "gpu_tests" in done:
        text += (
            f" ({by_name['gpu_tests']['figures']['summary'].split(',')[0]} GPU tests, context switching of "
        )
        text += "Qwen2 and Llama models with their AdamW state among them)"
    ratio = document.get("summary", {}).get("hopper_cores_over_gpu_alone")
    if ratio is not None:
        text += f"; Hopper ran {ratio:.2f}x faster with its environments on the CPU cores beside the GPU"
    if ratios:
        text += (
            f"; measured iterations were {min(ratios):.2f}x to {max(ratios):.2f}x the predicted ones, so predictions"
            " on a GPU are not yet to be trusted"
        )
    if missing:
        text += f"; not yet measured: {', '.join(missing)}"
    return text + "."


def predictions() -> str:
    """Every auto-mode check's measured against predicted iteration, every attempt (a GPU's prediction error)."""
    lines = []
    for _, document in artifacts():
        runs = (
            document["provenance"] if isinstance(document["provenance"], list) else [document["provenance"]]
        )
        number = {r["date"]: i + 1 for i, r in enumerate(runs)}
        for check in document["checks"]:
            for attempt in [*check.get("earlier", []), check]:
                f = attempt.get("figures") or {}
                if "predicted_iteration_s" not in f:
                    continue
                chosen = f.get("chosen", "").split(" (from")[0]
                lines.append(
                    f"- `{check['name']}`, run {number.get(attempt.get('run'), 1)}: measured "
                    f"{1e3 * f['median_iteration_s']:.0f} ms against {1e3 * f['predicted_iteration_s']:.0f} ms "
                    f"predicted ({f['measured_over_predicted']:.2f}x), plan `{chosen}`"
                )
    return "\n".join(lines) or "No auto-mode run on a GPU is committed yet."
