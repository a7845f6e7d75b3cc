"""Jobs: any workload (:class:`rlinf.api.Workload`) made trainable by the runner.

A :class:`Job` wraps a workload with rlinf's run settings (the config's ``execution`` section,
:mod:`rlinf.core.run_settings`) and derives everything the runner, the profiler and the commands need from its
workflow and the lowered program: fixed-mode and probe plans and the plan check (:mod:`rlinf.app.jobs.plans`), and
the executor's worker specs with each component's facts (:func:`rlinf.core.component_facts.component_facts`). A config
file names its workload with ``workload:`` (:mod:`rlinf.app.jobs.loading`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import attrs
import numpy as np

import executor
from executor.routing import layout_of
from planner.modes import fixed_plan
from rlinf.api.worker_context import WorkerContext
from rlinf.api.workload import Workload
from rlinf.app.jobs import plans
from rlinf.app.jobs.loading import BUILTIN, check_workers, load_workload
from rlinf.core.cluster import CPU_MACHINE, Machine
from rlinf.core.component_facts import component_facts
from rlinf.core.errors import ConfigError, require
from rlinf.core.inputs import load_yaml, parse_yaml
from rlinf.core.lowering import lower
from rlinf.core.plan import Plan
from rlinf.core.program import Program
from rlinf.core.run_settings import SECTION, RunSettings, moved_setting, run_settings
from rlinf.core.workflow import Workflow

C = TypeVar("C", bound=attrs.AttrsInstance)
"""The workload's config: an attrs class (checkpoints record it with ``attrs.asdict``)."""


@attrs.frozen
class Job(Generic[C]):
    """A workload as the runner trains it: the workload, how the config named it, and rlinf's run settings (the
    config's ``execution`` section, :class:`~rlinf.core.run_settings.RunSettings`)."""

    workload: Workload[C]
    reference: str = attrs.field(default="")
    settings: RunSettings = attrs.field(factory=RunSettings)

    @property
    def name(self) -> str:
        """The workload's name."""
        return str(self.workload.name)

    def config_from_mapping(self, data: Mapping[str, Any], source: str) -> C:
        """The workload's typed config of its own keys (``data`` without ``workload`` and ``execution``)."""
        return self.workload.load_config(data, source, self.settings)

    def recorded(self, config: C) -> dict[str, Any]:
        """The config and the run settings as a checkpoint records them (a resumed run must match)."""
        return {**attrs.asdict(config), SECTION: attrs.asdict(self.settings)}

    def workflow(self, config: C) -> Workflow:
        """The workload's macro flow."""
        return self.workload.workflow(config)

    def check(self, config: C) -> None:
        """Everything about ``config`` that needs the outside world, before any worker starts: the workflow (e.g.
        an environment id) and the workload's optional :meth:`rlinf.api.Workload.check` (e.g. prompts against a
        tokenizer). Call once per run, after ``--iterations`` and ``--seed`` are applied."""
        self.workflow(config)
        method = getattr(self.workload, "check", None)
        if method is not None:
            method(config)

    def fixed_plan(
        self,
        mode: str,
        num_devices: int,
        config: C,
        *,
        max_staleness: int = 0,
        buffer_before: tuple[str, ...] = (),
    ) -> tuple[Plan, int]:
        """The fixed ``mode`` plan (:func:`planner.modes.fixed_plan`) with the run's granularity and offload, at
        ``max_staleness`` with the buffer before ``buffer_before``, and its logical devices."""
        return fixed_plan(
            self.workflow(config),
            mode,
            num_devices,
            granularity=self.settings.granularity,
            offload=self.settings.offload,
            max_staleness=max_staleness,
            buffer_before=buffer_before,
        )

    def lower(
        self, plan: Plan, config: C, num_devices: int | None = None, *, machine: Machine = CPU_MACHINE
    ) -> Program:
        """The checked program of ``plan`` (:func:`rlinf.app.jobs.plans.check_plan`) on ``machine`` with
        ``num_devices`` (logical) devices, by default as many as the plan uses; every replica's share of the batch
        checked by the workload (:meth:`rlinf.api.Workload.check_replica`), before any worker starts."""
        workflow = self.workflow(config)
        logical = num_devices or max(plan.num_logical[0], 1)
        program = plans.check_plan(workflow, plan, lambda p: lower(workflow, p, machine.cluster(logical)))
        self._check_replicas(config, plan, program)
        return program

    def _check_replicas(self, config: C, plan: Plan, program: Program) -> None:
        """The workload's :meth:`rlinf.api.Workload.check_replica` for each replica of ``program`` (the plan named in
        a refusal)."""
        method = getattr(self.workload, "check_replica", None)
        if method is None:
            return
        facts = component_facts(self.workflow(config), plan, program, seed=self.settings.seed)
        for replica in layout_of(program).replicas:
            context = WorkerContext.for_replica(
                facts[replica.component], rank=replica.rank, world=replica.world, device=None
            )
            try:
                method(config, context)
            except ConfigError as error:
                problem = f"{error.problem} (plan {plan.describe()})"
                raise ConfigError(error.field, error.value, problem, error.fix) from None

    def check_plan(self, plan: Plan, config: C, *, machine: Machine = CPU_MACHINE) -> None:
        """Raise :class:`ConfigError` when the workload cannot run under ``plan`` on ``machine`` (e.g. its states
        do not fit a device's memory)."""
        self.lower(plan, config, machine=machine)

    def probes(
        self, num_devices: int, config: C, *, machine: Machine = CPU_MACHINE
    ) -> list[tuple[Plan, int]]:
        """Plans the profiling phase measures (:func:`rlinf.app.jobs.plans.derive_probes`)."""
        workflow = self.workflow(config)
        cluster = machine.cluster(num_devices)

        def runnable(plan: Plan) -> bool:
            try:
                program = plans.check_plan(workflow, plan, lambda p: lower(workflow, p, cluster))
                self._check_replicas(config, plan, program)
            except ConfigError:
                return False
            return True

        found = plans.derive_probes(workflow, num_devices, runnable, num_cores=machine.num_cores)
        return [(plan, num_devices) for plan in found]

    def worker_specs(self, config: C, plan: Plan, program: Program) -> dict[str, executor.WorkerSpec]:
        """One spec per component: the workload's worker class, set up with the config and the component's
        facts read from ``program`` (the executor adds each replica's rank, world and device)."""
        workflow = self.workflow(config)
        classes = self.workload.workers(config)
        syncs = tuple((s.src, s.dst) for s in workflow.weight_sync)
        check_workers(self.reference or self.name, classes, workflow.component_names, syncs)
        facts = component_facts(workflow, plan, program, seed=self.settings.seed)
        return {
            name: executor.WorkerSpec(
                factory=classes[name],
                config=config,
                facts=facts[name],
                collective=getattr(classes[name], "collective", True) is not False,
            )
            for name in workflow.component_names
        }

    def iteration_metrics(self, result: Any, config: C, iteration: int) -> dict[str, Any]:
        """The workload's metrics of one measured iteration, with ``iteration`` and ``iteration_s``."""
        metrics = dict(self.workload.metrics(result, config, iteration))
        metrics.setdefault("iteration_s", result.timeline.iteration_s)
        return {"iteration": iteration, **{k: v for k, v in metrics.items() if k != "iteration"}}

    def response_lengths(self, result: Any, config: C) -> tuple[int, ...]:
        """Generated tokens of every response of one measured iteration, from the workload's optional
        ``response_lengths`` (:class:`rlinf.api.Workload`); ``()`` for a workload without it. Raises
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

    def summary(self, recent: Sequence[Mapping[str, Any]]) -> str:
        """The workload's one-line summary of the run's ``recent`` iterations (:func:`rlinf.app.console.recent_metrics`)."""
        return str(self.workload.summary(recent))


def get_job(reference: str, *, base: Path = Path("."), settings: RunSettings | None = None) -> Job[Any]:
    """The job of a built-in workload name or a reference (see :mod:`rlinf.app.jobs.loading`), run with
    ``settings`` (default: :class:`RunSettings`'s defaults)."""
    return Job(load_workload(reference, base=base), reference=reference, settings=settings or RunSettings())


def load_job_config(
    path: str | Path,
    overrides: Sequence[str] = (),
    *,
    iterations: int | None = None,
    seed: int | None = None,
    max_staleness: int | None = None,
) -> tuple[Job[Any], Any]:
    """Read a YAML config, apply ``key=value`` overrides (dotted keys reach nested sections; values are parsed
    as YAML) and build the job and the workload's config. The file's ``workload`` key names the workload, its
    ``execution`` section holds the run settings (:func:`rlinf.core.run_settings.run_settings`), which
    ``iterations``, ``seed`` and ``max_staleness`` (``--iterations``, ``--seed``, ``--max-staleness``: a run's
    request, :func:`rlinf.app.request.build_request`, passes them) override; the workload reads the other keys. The file
    and every override are read within :mod:`rlinf.core.limits` (:mod:`rlinf.core.inputs`), and the config's types
    are checked here, before any worker starts."""
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
    reference = data.pop("workload")
    workload = load_workload(reference, base=path.parent)
    for item in overrides:
        key, sep, text = item.partition("=")
        keys = [part.strip() for part in key.split(".")]
        require(bool(sep) and all(keys), "--set", item, "is not key=value", "write e.g. --set num_envs=16")
        require(keys != ["workload"], "--set", item, "cannot change the workload", "edit the config file")
        moved = moved_setting(keys[0]) if len(keys) == 1 else None
        require(
            moved is None, "--set", item, f"is a run setting, which moved to the {SECTION} section",
            f"write --set {SECTION}.{moved}={text}",
        )  # fmt: skip
        _assign(data, keys, parse_yaml(text, "--set", item, root="--set"), item)
    settings = run_settings(data, path.name)
    if iterations is not None:
        settings = attrs.evolve(settings, iterations=iterations)
    if seed is not None:
        settings = attrs.evolve(settings, seed=seed)
    if max_staleness is not None:
        settings = attrs.evolve(settings, max_staleness=max_staleness)
    job = Job(workload, reference=reference, settings=settings)
    own = {key: value for key, value in data.items() if key != SECTION}
    config = job.config_from_mapping(own, path.name)
    _check_workflow(job, config, own, path.name)
    return job, config


def _check_workflow(job: Job[C], config: C, data: Mapping[str, Any], source: str) -> None:
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
    unknown = [name for name in job.settings.offload if name not in workflow.component_names]
    require(
        not unknown, f"{SECTION}.offload", unknown, "unknown component",
        f"use some of {list(workflow.component_names)}",
    )  # fmt: skip
    key = f"{SECTION}.granularity"
    granularity = job.settings.granularity  # the fixed-mode plans use it on every stream edge and the loop
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
