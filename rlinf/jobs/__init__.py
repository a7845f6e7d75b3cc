"""Jobs: the adapters that let the runner train a workload with real workers.

RL code (``rlinf/workloads/``, ``rlinf/algorithms/``) knows nothing of the executor; a job adapter joins the two:
it builds the workload's config, workflow, plans and workers, and reads metrics from measured iterations. A
config file names its job with a top-level ``workload:`` key; the registry below is explicit and loud.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs
import yaml

import executor
from rlinf.errors import ConfigError, require
from rlinf.plan import Plan
from rlinf.workflow import Workflow

# Job name -> "module:attribute" of its adapter (imported on first use: each pulls in its own libraries).
JOBS = {
    "embodied_ppo": "rlinf.jobs.embodied:JOB",
    "grpo_arith": "rlinf.jobs.grpo_arith:JOB",
}


@attrs.frozen(kw_only=True)
class RunOptions:
    """The options every job has, whatever its config looks like."""

    iterations: int
    seed: int
    mode: str
    """Mode used when neither ``--mode`` nor ``--plan`` is given."""
    checkpoint_every: int


class Job(Protocol):
    """What the runner needs from a workload."""

    name: str

    def config_from_mapping(self, data: Mapping[str, Any], source: str) -> Any:
        """Validate a config mapping (the YAML without its ``workload`` key); unknown keys are errors."""

    def options(self, config: Any) -> RunOptions:
        """Iterations, seed, default mode and checkpoint interval of a config."""

    def with_options(self, config: Any, *, iterations: int | None, seed: int | None) -> Any:
        """The config with ``--iterations`` / ``--seed`` applied (None leaves a value as it is)."""

    def workflow(self, config: Any) -> Workflow:
        """The macro flow of one iteration (validates what needs the outside world, e.g. an env id)."""

    def plan_for_mode(self, mode: str, num_devices: int, config: Any) -> tuple[Plan, int]:
        """A plan for a fixed mode on ``num_devices`` devices and how many logical devices it uses."""

    def check_plan(self, plan: Plan, config: Any) -> None:
        """Raise :class:`ConfigError` when the workload cannot run under ``plan`` (e.g. uneven splits)."""

    def with_plan(self, config: Any, plan: Plan) -> Any:
        """The config with what the workers read from the plan (e.g. the loop's pipeline stages or the rollout's
        granularity), so that a plan chosen by the planner (``--mode auto``) can run; call before ``check_plan``."""

    def probe_plans(self, num_devices: int, config: Any) -> list[tuple[Plan, int]]:
        """Plans (with their logical device counts) whose iterations the profiling phase measures
        (:mod:`rlinf.profiling`), most informative first. Together they should give the cost model samples for
        every (component, op) at every device count the planner considers on ``num_devices`` devices, and
        samples per replica spanning the granularities it considers, so that ``--mode auto`` plans without
        extrapolating. Each plan must pass ``check_plan`` under ``with_plan(config, plan)``."""

    def worker_specs(self, config: Any) -> dict[str, executor.WorkerSpec]:
        """One worker spec per component."""

    def iteration_metrics(self, result: executor.RunResult, config: Any, iteration: int) -> dict[str, Any]:
        """Metrics of one measured iteration (JSON-ready; ``iteration_s`` and a throughput included)."""

    def progress(self, metrics: Mapping[str, Any]) -> dict[str, str]:
        """A few short fields for the progress bar."""

    def summary(self, metrics: Mapping[str, Any]) -> str:
        """One line about the last iteration, printed when training ends."""


def get_job(name: str) -> Job:
    """The adapter registered as ``name``; raises listing the registered names."""
    target = JOBS.get(name)
    if target is None:
        raise ConfigError("workload", name, "unknown workload", f"use one of {sorted(JOBS)}")
    module_name, attribute = target.split(":")
    return getattr(importlib.import_module(module_name), attribute)


def load_job_config(path: str | Path, overrides: Sequence[str] = ()) -> tuple[Job, Any]:
    """Read a YAML config, apply ``key=value`` overrides (dotted keys reach nested sections; values are parsed
    as YAML) and build the job's config. The file's ``workload`` key names the job."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(
            "config", str(path), "file does not exist", "pass a YAML file such as examples/hopper_ppo.yaml"
        )
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else "syntax error"
        raise ConfigError(path.name, first, "is not valid YAML", "fix the YAML syntax") from None
    require(isinstance(data, dict), path.name, data, "must be a mapping", "write the config's keys")
    require(
        "workload" in data,
        f"{path.name}.workload",
        None,
        "is missing",
        f"add 'workload: <one of {sorted(JOBS)}>'",
    )
    job = get_job(str(data.pop("workload")))
    for item in overrides:
        key, sep, text = item.partition("=")
        require(
            bool(sep) and bool(key.strip()), "--set", item, "is not key=value", "write e.g. --set num_envs=16"
        )
        _assign(data, key.strip().split("."), yaml.safe_load(text), item)
    return job, job.config_from_mapping(data, path.name)


def _assign(data: dict[str, Any], keys: list[str], value: Any, item: str) -> None:
    for key in keys[:-1]:
        section = data.setdefault(key, {})
        require(
            isinstance(section, dict),
            "--set",
            item,
            f"{key} is not a section",
            "set a nested key of a section",
        )
        data = section
    data[keys[-1]] = value
