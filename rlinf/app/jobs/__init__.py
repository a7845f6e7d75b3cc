"""Jobs: any workload (:class:`rlinf.Workload`) made trainable by the runner.

A :class:`Job` wraps a workload and derives everything the runner, the profiler and the commands need from its
workflow and the lowered program: run options from the config keys the workload names, fixed-mode and probe
plans and the plan check (:mod:`rlinf.app.jobs.plans`), and the executor's worker specs with each component's facts
(:mod:`rlinf.app.jobs.binding`). A config file names its workload with ``workload:`` (:mod:`rlinf.app.jobs.loading`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

import executor
from rlinf.api.worker_context import component_facts
from rlinf.app.jobs import plans
from rlinf.app.jobs.binding import Binding, BoundWorker
from rlinf.app.jobs.loading import BUILTIN, check_workers, load_workload
from rlinf.core import limits
from rlinf.core.cluster import CPU_MACHINE, Machine
from rlinf.core.errors import ConfigError, integer, require
from rlinf.core.inputs import load_yaml, parse_yaml
from rlinf.core.lowering import lower
from rlinf.core.plan import Plan
from rlinf.core.program import Program
from rlinf.core.workflow import Workflow


@attrs.frozen(kw_only=True)
class RunOptions:
    """The options every job has, whatever its config looks like."""

    iterations: int
    seed: int
    mode: str
    """Mode used when neither ``--mode`` nor ``--plan`` is given."""
    checkpoint_every: int


def _get(config: Any, path: str) -> Any:
    for part in path.split("."):
        config = getattr(config, part)
    return config


def _evolve(config: Any, path: str, value: Any) -> Any:
    head, _, tail = path.partition(".")
    if not tail:
        return attrs.evolve(config, **{head: value})
    return attrs.evolve(config, **{head: _evolve(getattr(config, head), tail, value)})


@attrs.frozen
class Job:
    """A workload as the runner trains it."""

    workload: Any
    reference: str = attrs.field(default="")

    @property
    def name(self) -> str:
        """The workload's name."""
        return str(self.workload.name)

    def config_from_mapping(self, data: Mapping[str, Any], source: str) -> Any:
        """The workload's typed config."""
        return self.workload.load_config(data, source)

    def options(self, config: Any) -> RunOptions:
        """Iterations, seed, default mode and checkpoint interval, read where the workload's config keys say."""
        keys = self.workload.config_keys
        return RunOptions(
            iterations=_get(config, keys.iterations),
            seed=_get(config, keys.seed),
            mode=_get(config, keys.mode),
            checkpoint_every=_get(config, keys.checkpoint_every),
        )

    def with_options(self, config: Any, *, iterations: int | None, seed: int | None) -> Any:
        """The config with ``--iterations`` / ``--seed`` applied (None leaves a value as it is)."""
        keys = self.workload.config_keys
        if iterations is not None:
            config = _evolve(config, keys.iterations, iterations)
        if seed is not None:
            config = _evolve(config, keys.seed, seed)
        return config

    def workflow(self, config: Any) -> Workflow:
        """The workload's macro flow."""
        return self.workload.workflow(config)

    def check(self, config: Any) -> None:
        """Everything about ``config`` that needs the outside world, before any worker starts: the workflow (e.g.
        an environment id) and the workload's optional :meth:`rlinf.Workload.check` (e.g. prompts against a
        tokenizer). Call once per run, after ``--iterations`` and ``--seed`` are applied."""
        self.workflow(config)
        method = getattr(self.workload, "check", None)
        if method is not None:
            method(config)

    def fixed_plan(self, mode: str, num_devices: int, config: Any) -> tuple[Plan, int]:
        """The fixed ``mode`` plan (:func:`rlinf.app.jobs.plans.fixed_plan`) with the config's granularity and
        offload, and its logical devices."""
        keys = self.workload.config_keys
        granularity = 1 if keys.granularity is None else int(_get(config, keys.granularity))
        offload = () if keys.offload is None else tuple(_get(config, keys.offload))
        return plans.fixed_plan(
            self.workflow(config), mode, num_devices, granularity=granularity, offload=offload
        )

    def lower(
        self, plan: Plan, config: Any, num_devices: int | None = None, *, machine: Machine = CPU_MACHINE
    ) -> Program:
        """The checked program of ``plan`` (:func:`rlinf.app.jobs.plans.check_plan`) on ``machine`` with
        ``num_devices`` (logical) devices, by default as many as the plan uses."""
        workflow = self.workflow(config)
        logical = num_devices or max(plan.num_logical[0], 1)
        return plans.check_plan(workflow, plan, lambda p: lower(workflow, p, machine.cluster(logical)))

    def check_plan(self, plan: Plan, config: Any, *, machine: Machine = CPU_MACHINE) -> None:
        """Raise :class:`ConfigError` when the workload cannot run under ``plan`` on ``machine`` (e.g. its states
        do not fit a device's memory)."""
        self.lower(plan, config, machine=machine)

    def probes(
        self, num_devices: int, config: Any, *, machine: Machine = CPU_MACHINE
    ) -> list[tuple[Plan, int]]:
        """Plans the profiling phase measures (:func:`rlinf.app.jobs.plans.derive_probes`)."""
        workflow = self.workflow(config)
        cluster = machine.cluster(num_devices)

        def runnable(plan: Plan) -> bool:
            try:
                plans.check_plan(workflow, plan, lambda p: lower(workflow, p, cluster))
            except ConfigError:
                return False
            return True

        found = plans.derive_probes(workflow, num_devices, runnable, num_cores=machine.num_cores)
        return [(plan, num_devices) for plan in found]

    def worker_specs(self, config: Any, plan: Plan, program: Program) -> dict[str, executor.WorkerSpec]:
        """One spec per component: the workload's worker class, set up with the config and the component's
        facts read from ``program``."""
        workflow = self.workflow(config)
        classes = self.workload.workers(config)
        syncs = tuple((s.src, s.dst) for s in workflow.weight_sync)
        check_workers(self.reference or self.name, classes, workflow.component_names, syncs)
        facts = component_facts(workflow, plan, program, seed=self.options(config).seed)
        return {
            name: executor.WorkerSpec(
                factory=functools.partial(BoundWorker, classes[name]),
                config=Binding(config=config, facts=facts[name]),
                collective=getattr(classes[name], "collective", True) is not False,
            )
            for name in workflow.component_names
        }

    def iteration_metrics(self, result: Any, config: Any, iteration: int) -> dict[str, Any]:
        """The workload's metrics of one measured iteration, with ``iteration`` and ``iteration_s``."""
        metrics = dict(self.workload.metrics(result, config, iteration))
        metrics.setdefault("iteration_s", result.timeline.iteration_s)
        return {"iteration": iteration, **{k: v for k, v in metrics.items() if k != "iteration"}}

    def response_lengths(self, result: Any, config: Any) -> tuple[int, ...]:
        """Generated tokens of every response of one measured iteration, from the workload's optional
        ``response_lengths`` (:class:`rlinf.Workload`); ``()`` for a workload without it. Raises
        :class:`ConfigError` naming the workload when a value is not a whole number >= 1."""
        method = getattr(self.workload, "response_lengths", None)
        if method is None:
            return ()
        lengths = tuple(method(result, config))
        for index, length in enumerate(lengths):
            require(
                isinstance(length, (int, np.integer)) and not isinstance(length, bool) and bool(length >= 1),
                f"workload {self.reference or self.name} response_lengths()[{index}]",
                length,
                "is not a token count >= 1",
                "return the generated tokens (EOS included) of every response as whole numbers",
            )
        return tuple(int(length) for length in lengths)

    def progress(self, metrics: Mapping[str, Any]) -> dict[str, str]:
        """The workload's headline metrics, shortened for the progress bar."""
        shown = {}
        for key, label in getattr(self.workload, "headline", {}).items():
            value = metrics.get(key)
            if isinstance(value, float):
                shown[label] = f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
            elif value is not None:
                shown[label] = str(value)
        return shown

    def summary(self, metrics: Mapping[str, Any]) -> str:
        """The workload's one-line summary."""
        return str(self.workload.summary(metrics))


def get_job(reference: str, *, base: Path = Path(".")) -> Job:
    """The job of a built-in workload name or a reference (see :mod:`rlinf.app.jobs.loading`)."""
    return Job(load_workload(reference, base=base), reference=reference)


def load_job_config(path: str | Path, overrides: Sequence[str] = ()) -> tuple[Job, Any]:
    """Read a YAML config, apply ``key=value`` overrides (dotted keys reach nested sections; values are parsed
    as YAML) and build the job's config. The file's ``workload`` key names the workload. The file and every
    override are read within :mod:`rlinf.core.limits` (:mod:`rlinf.core.inputs`), and the config's types are checked here,
    before any worker starts."""
    path = Path(path)
    data = load_yaml(path, "config", what="YAML config such as examples/hopper_ppo.yaml")
    if data is None:
        data = {}
    require(
        isinstance(data, dict), path.name, type(data).__name__, "must be a mapping", "write the config's keys"
    )
    require(
        "workload" in data,
        f"{path.name}.workload",
        None,
        "is missing",
        f"add 'workload: <one of {sorted(BUILTIN)} or package.module:attribute>'",
    )
    job = get_job(data.pop("workload"), base=path.parent)
    for item in overrides:
        key, sep, text = item.partition("=")
        keys = [part.strip() for part in key.split(".")]
        require(bool(sep) and all(keys), "--set", item, "is not key=value", "write e.g. --set num_envs=16")
        require(keys != ["workload"], "--set", item, "cannot change the workload", "edit the config file")
        _assign(data, keys, parse_yaml(text, "--set", item, root="--set"), item)
    config = job.config_from_mapping(data, path.name)
    _check_run_options(job, config)
    _check_workflow(job, config, data, path.name)
    return job, config


RUN_MODES = ("auto", "collocated", "disaggregated", "hybrid")
MAX_SEED = 2**32 - 1


def _check_run_options(job: Job, config: Any) -> None:
    """The settings rlinf reads from any workload's config (:class:`rlinf.ConfigKeys`), named by their key."""
    keys = job.workload.config_keys
    for path, low, high in (
        (keys.iterations, 1, None),
        (keys.checkpoint_every, 1, None),
        (keys.seed, 0, MAX_SEED),
        (keys.granularity, 1, limits.current().max_micro_batches),
    ):
        if path is not None:
            integer(path, _get(config, path), minimum=low, maximum=high)
    mode = _get(config, keys.mode)
    require(mode in RUN_MODES, keys.mode, mode, "unknown mode", f"use one of {list(RUN_MODES)}")
    if keys.offload is not None:
        offload = _get(config, keys.offload)
        require(
            isinstance(offload, (list, tuple)) and all(isinstance(name, str) for name in offload),
            keys.offload,
            offload,
            "must be a list of component names",
            "write e.g. [rollout, actor]",
        )


def _check_workflow(job: Job, config: Any, data: Mapping[str, Any], source: str) -> None:
    """Build the workflow once, so that a config value that makes an invalid workflow is reported now, naming
    the config, and not when a worker starts (an error about a config key keeps its own name)."""
    try:
        workflow = job.workflow(config)
    except ConfigError as error:
        if error.field.replace("[", ".").split(".", 1)[0] in data:
            raise
        raise ConfigError(
            source, f"{error.field}={error.value!r}", f"makes an invalid workflow: {error.problem}", error.fix
        ) from None
    key = job.workload.config_keys.granularity
    if key is None:
        return
    granularity = _get(config, key)  # the fixed-mode plans use it on every stream edge and the loop
    if workflow.loop is not None:
        require(
            workflow.batch_size % granularity == 0,
            key,
            granularity,
            f"does not divide the {workflow.batch_size} environments (the loop's pipeline stages)",
            "use a divisor of the number of environments",
        )
    groups = workflow.batch_size // workflow.group_size
    if any(edge.kind == "stream" for edge in workflow.edges):
        require(
            granularity <= groups,
            key,
            granularity,
            f"exceeds the {groups} prompt groups of a batch",
            f"use at most {groups} micro-batches",
        )


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
