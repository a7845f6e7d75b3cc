"""The shipped 7B trace re-synthesized with the efficiency model, planned as a user plans it: the generated block
``planner-7b`` of docs/analytic_validation.md.

The shipped ``traces/grpo_7b_h100.json`` keeps the earlier model (its provenance command turns every term off). Its
command without those switches synthesizes the same run under this page's model; ``rlinf plan`` then searches it
synchronously and with ``--max-staleness 1``, and ``rlinf simulate`` prices the example collocated plan. The same
three commands on the shipped trace are the comparison. Which efficiency curve makes the difference is read from
the two traces' own costs: each component's seconds on the devices the best plan gives it, against a linear share
of its seconds on the whole cluster.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Any

from rlinf.cli import main as rlinf
from rlinf.core.costs import fit
from rlinf.core.plan import plan_from_dict
from rlinf.core.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = "traces/grpo_7b_h100.json"
EARLIER_MODEL = (
    "--decode-step-overhead-s 0",
    "--terms none",
    "--pp 1",
    "--train-efficiency none",
    "--weight-sync none",
)
"""The switches of the shipped trace's command that keep the earlier model; dropped, the command gets this page's."""
COLLOCATED_PLAN = "examples/plans/collocated.yaml"


def resynthesis_command(out: str) -> str:
    """The shipped 7B trace's provenance command without the earlier model's switches, writing ``out``."""
    command = json.loads((ROOT / SHIPPED).read_text())["provenance"]["command"]
    for switch in EARLIER_MODEL:
        assert f" {switch} " in command, switch
        command = command.replace(f" {switch} ", " ")
    return command.replace(f"--out {SHIPPED}", f"--out {out}") + " --date 2026-01-01"


def _run(argv: str) -> dict[str, Any]:
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        rlinf(shlex.split(argv)[1:])
    return json.loads(output.getvalue())


def plans_of(trace: str) -> dict[str, Any]:
    """The collocated plan's iteration, and the planner's best plan synchronously and at staleness 1."""
    collocated = _run(f"rlinf simulate --trace {trace} --plan {COLLOCATED_PLAN} --json")
    out: dict[str, Any] = {"collocated_s": round(collocated["iteration_s"], 1)}
    for staleness in (0, 1):
        chosen = _run(f"rlinf plan --trace {trace} --max-staleness {staleness} --json")
        out[f"staleness_{staleness}"] = {
            "plan": chosen["plan"],
            "mode": chosen["mode"],
            "iteration_s": round(chosen["predicted_iteration_s"], 1),
            "gain": round(collocated["iteration_s"] / chosen["predicted_iteration_s"], 3),
        }
    out["curves"] = curves_of(trace, out["staleness_1"]["plan"])
    return out


def curves_of(trace_path: str, plan: dict[str, Any]) -> dict[str, Any]:
    """Per component of ``plan``: its seconds on its devices, and the linear share of its seconds on the whole
    cluster (``whole x all devices / its devices``): below the linear share, the work per device pays; and the
    collocated weight sync's resharding, which a split plan does not pay."""
    trace = load_trace(trace_path)
    costs = fit(trace)
    workflow = trace.workflow
    placed = plan_from_dict(plan, trace.cluster.num_devices, source="plan")
    out: dict[str, Any] = {}
    for component in ("rollout", "actor", "inference"):
        devices = len(placed.devices_of(component))
        everything = trace.cluster.num_devices
        op = {"rollout": "generate", "actor": "train", "inference": "infer"}[component]
        own = costs.compute_seconds(component, op, devices, workflow.batch_size)
        whole = costs.compute_seconds(component, op, everything, workflow.batch_size)
        out[component] = {
            "devices": devices,
            "seconds": round(own, 1),
            "linear_s": round(whole * everything / devices, 1),
            "efficiency": round(whole * everything / devices / own, 3),
        }
    (sync,) = (s for s in workflow.weight_sync if s.dst == "rollout")
    out["reshard_s"] = round(sync.reshard_s, 1)
    return out


def report() -> dict[str, Any]:
    """Both traces planned; the re-synthesis command."""
    with tempfile.TemporaryDirectory() as folder, contextlib.chdir(folder):
        for path in (SHIPPED, COLLOCATED_PLAN):
            (Path(folder) / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / path, Path(folder) / path)
        command = resynthesis_command("grpo_7b_now.json")
        with contextlib.redirect_stdout(io.StringIO()):
            rlinf(shlex.split(command)[1:])
        result = {"command": command, "now": plans_of("grpo_7b_now.json"), "shipped": plans_of(SHIPPED)}
    return {**result, "block": block(result)}


def _describe(plan: dict[str, Any]) -> str:
    placement = ", ".join(f"{name} {devices}" for name, devices in sorted(plan["placement"].items()))
    extra = [f"offload {', '.join(plan['offload'])}"] if plan.get("offload") else []
    if plan.get("max_staleness"):
        extra.append(
            f"max_staleness {plan['max_staleness']}, buffer before {', '.join(plan['buffer_before'])}"
        )
    return placement + ("; " + "; ".join(extra) if extra else "")


def block(result: dict[str, Any]) -> str:
    """The commands, the two traces' plans side by side, and the curves of the best plan."""
    lines = [
        "```",
        result["command"],
        "rlinf simulate --trace grpo_7b_now.json --plan examples/plans/collocated.yaml",
        "rlinf plan --trace grpo_7b_now.json                  # synchronous plans",
        "rlinf plan --trace grpo_7b_now.json --max-staleness 1",
        "```",
        "",
        "| trace | collocated (s) | best synchronous plan | s | gain | best plan, --max-staleness 1 | s | gain |",
        "| --- | ---: | --- | ---: | ---: | --- | ---: | ---: |",
    ]
    for name, label in (
        ("now", "re-synthesized, this page's model"),
        ("shipped", f"{SHIPPED} (earlier model)"),
    ):
        row = result[name]
        sync, stale = row["staleness_0"], row["staleness_1"]
        lines.append(
            f"| {label} | {row['collocated_s']:.1f} | {sync['mode']}: {_describe(sync['plan'])} "
            f"| {sync['iteration_s']:.1f} | {sync['gain']:.2f}x | {stale['mode']}: {_describe(stale['plan'])} "
            f"| {stale['iteration_s']:.1f} | {stale['gain']:.2f}x |"
        )
    lines += [
        "",
        "Each component of the best plan at staleness 1 on its devices, against a linear share of its time on all 32 "
        "(above 1: the work per device pays):",
        "",
        "| trace | component | devices | seconds | linear share (s) | linear / seconds |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for name in ("now", "shipped"):
        curves = result[name]["curves"]
        for component in ("rollout", "inference", "actor"):
            c = curves[component]
            lines.append(
                f"| {name} | {component} | {c['devices']} | {c['seconds']:.1f} | {c['linear_s']:.1f} "
                f"| {c['efficiency']:.2f} |"
            )
    curves = result["now"]["curves"]
    best = max(("rollout", "inference", "actor"), key=lambda c: curves[c]["efficiency"])
    lines += [
        "",
        f"The curve that makes the difference: the **{best}**'s, whose {curves[best]['devices']} devices take "
        f"{curves[best]['seconds']:.1f} s where a linear share would take {curves[best]['linear_s']:.1f} s "
        f"({curves[best]['efficiency']:.2f}x).",
    ]
    lines += [
        "",
        f"A collocated weight sync reshards the weights in place: {result['now']['curves']['reshard_s']:.1f} s per "
        f"step in the re-synthesized trace (the published rate, `--weight-sync`), "
        f"{result['shipped']['curves']['reshard_s']:.1f} s in the shipped one.",
    ]
    return "\n".join(lines)
