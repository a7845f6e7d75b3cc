"""A run's request: what a training run is asked to do, merged once from the config file, its ``--set`` overrides and
the command's flags, and read by everything after (:func:`rlinf.app.plan_choice.choose_plan`,
:func:`rlinf.app.runner.run`).

:class:`RunFlags` are the flags as given (``None``: not given); :func:`build_request` checks them, loads the config
(``--iterations``, ``--seed`` and ``--max-staleness`` merged into its ``execution`` section, so the job's settings are
the values the run uses), settles the machine, the device count, the run directory and, for ``--plan`` or
``--resume``, the plan, and returns the frozen :class:`RunRequest`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from rlinf.app.console import Progress
from rlinf.app.jobs import Job, load_job_config
from rlinf.app.profiling import ProfileSettings
from rlinf.core.cluster import CPU_MACHINE, Machine
from rlinf.core.errors import ConfigError, require
from rlinf.core.outputs import check_output_dir
from rlinf.core.phases import mark as mark_phase
from rlinf.core.plan import Plan, load_plan
from rlinf.core.run_settings import RUN_MODES, RunSettings

BACKENDS = ("local", "ray")
_AS_GIVEN = (
    *("trace", "merge_traces", "profile", "nodes", "backend"),
    *("address", "max_restarts", "progress", "command_line"),
)
"""Fields a request takes from its flags as they are."""


REPLAN_MODES = ("off", "auto")
"""Values of ``--replan``."""


@attrs.frozen(kw_only=True)
class RunFlags:
    """The flags of ``rlinf train`` as given (``None``: not given, the config's value or the default applies)."""

    config: Path
    """The YAML config naming its workload."""
    overrides: tuple[str, ...] = ()
    """``--set KEY=VALUE``, in order."""
    mode: str | None = None
    """``auto`` or a fixed mode; default: the config's ``execution.mode``."""
    plan: Path | None = None
    """``--plan FILE``: train under this plan."""
    trace: Path | None = None
    """Auto mode: plan from this trace instead of profiling."""
    merge_traces: tuple[Path, ...] = ()
    """Auto mode: traces of earlier runs merged into the profile."""
    profile: ProfileSettings = ProfileSettings()
    iterations: int | None = None
    seed: int | None = None
    max_staleness: int | None = None
    num_devices: int | None = None
    """``--devices``; default: every core or GPU this process may use."""
    accelerator: str | None = None
    num_cpu_devices: int | None = None
    """``--cpu-devices``: CPU cores beside the GPUs."""
    nodes: int = 1
    backend: str = "local"
    address: str | None = None
    out: Path | None = None
    resume: Path | None = None
    max_restarts: int = 0
    """Worker failures the run survives by restarting from its newest checkpoint (``rlinf train``: 3)."""
    progress: Progress = True
    """A bar in a terminal (``True``), lines at a cadence (``"lines"``), or nothing (``False``)."""
    command_line: str = "rlinf train"
    replan: str | None = None
    """``--replan``: ``off`` or ``auto``; default ``auto`` in auto mode, else ``off``."""


@attrs.frozen(kw_only=True)
class RunRequest:
    """One training run, as asked: every value the run uses, checked. Build it with :func:`build_request` (from
    flags) or directly (a script: a job, its config and a run directory; the rest has defaults)."""

    job: Job[Any]
    """The workload with the run's settings (:attr:`settings`): ``--iterations``, ``--seed`` and
    ``--max-staleness`` already merged."""
    config: Any
    """The workload's typed config."""
    out: Path
    """The run directory."""
    mode: str = "auto"
    """``auto`` (profile, plan, run) or a fixed mode; with :attr:`plan`, the plan's own mode."""
    plan: Plan | None = None
    """The plan to train under (``--plan FILE``, or the run's ``plan.yaml`` on ``--resume``); ``None``: choose one."""
    plan_source: str = ""
    """Where :attr:`plan` came from, e.g. ``--plan plans/x.yaml``."""
    trace: Path | None = None
    merge_traces: tuple[Path, ...] = ()
    profile: ProfileSettings = ProfileSettings()
    num_devices: int = 1
    """Devices (CPU cores or GPUs) the run may use, over all nodes."""
    machine: Machine = CPU_MACHINE
    accelerator: str = "cpu"
    num_cpu_devices: int = 0
    """CPU cores beside the GPUs (the core pool)."""
    nodes: int = 1
    backend: str = "local"
    address: str | None = None
    resume: bool = False
    """Continue the run in :attr:`out` from its newest valid checkpoint."""
    max_restarts: int = 0
    progress: Progress = True
    """A bar in a terminal (``True``), lines at a cadence (``"lines"``), or nothing (``False``); profiling shows a
    bar only with ``True``."""
    command_line: str = "rlinf train"
    replan: str = "off"
    """``auto``: re-plan while training when the measured iterations leave the prediction's band
    (:class:`rlinf.app.replan.Replanner`); ``off``: keep the chosen plan."""

    @property
    def settings(self) -> RunSettings:
        """The run settings (the config's ``execution`` section with the flags merged)."""
        return self.job.settings


def build_request(flags: RunFlags) -> RunRequest:
    """Check ``flags`` and merge them with the config into the request, before any worker starts: the config (and what
    needs the outside world: an environment id, a tokenizer), the machine, the device count against this machine,
    the run directory (``--resume``'s, a fresh ``--out``, or a new ``runs/<workload>-<stamp>``) and the plan of
    ``--plan`` or of the resumed run."""
    if flags.iterations is not None:
        require(
            flags.iterations >= 1,
            "--iterations",
            flags.iterations,
            "must be >= 1",
            "train at least one iteration",
        )
    require(
        flags.max_restarts >= 0,
        "--max-restarts",
        flags.max_restarts,
        "must be >= 0",
        "use 0 to stop at a failure",
    )
    if flags.replan is not None:
        require(
            flags.replan in REPLAN_MODES,
            "--replan",
            flags.replan,
            "unknown value",
            f"use one of {list(REPLAN_MODES)}",
        )
    if flags.mode is not None:
        require(
            flags.mode in RUN_MODES, "--mode", flags.mode, "unknown mode", f"use one of {list(RUN_MODES)}"
        )
    require(
        flags.backend in BACKENDS,
        "--backend",
        flags.backend,
        "unknown backend",
        f"use one of {list(BACKENDS)}",
    )
    job, config = load_job_config(
        flags.config, flags.overrides, iterations=flags.iterations, seed=flags.seed,
        max_staleness=flags.max_staleness,
    )  # fmt: skip
    job.check(config)  # what needs the outside world (an env id, a tokenizer), before any worker starts
    mark_phase("config_checked")
    machine, accelerator, num_cpu_devices = _machine(flags)
    num_devices = _num_devices(flags, accelerator)
    plan_path = flags.plan
    if flags.resume is not None and plan_path is None and flags.mode is None:
        plan_path = flags.resume / "plan.yaml"  # the run's own plan
    plan = None if plan_path is None else _plan_file(flags, plan_path, num_devices, machine)
    settings = job.settings
    if plan is not None and plan.max_staleness != settings.max_staleness:
        job = attrs.evolve(job, settings=attrs.evolve(settings, max_staleness=plan.max_staleness))
    mode = plan.mode if plan is not None else flags.mode or settings.mode
    return RunRequest(
        job=job,
        config=config,
        out=_out(flags, job.name),
        mode=mode,
        replan=flags.replan or ("auto" if mode == "auto" else "off"),
        plan=plan,
        plan_source="" if plan_path is None else f"--plan {plan_path}",
        num_devices=num_devices,
        machine=machine,
        accelerator=accelerator,
        num_cpu_devices=num_cpu_devices,
        resume=flags.resume is not None,
        **{name: getattr(flags, name) for name in _AS_GIVEN},
    )


def machine_of(accelerator: str | None, num_cpu_devices: int | None) -> tuple[Machine, str, int]:
    """The machine a run trains on (:func:`executor.devices.machine_for`), its accelerator (``--accelerator``;
    default: cuda when a GPU is visible) and the CPU cores beside its GPUs (``--cpu-devices``; default: the
    machine's cores less one per GPU). Cores beside GPUs without GPUs are refused (the cores are the devices then),
    and so are more cores than there are."""
    from executor.devices import core_pool_cores, default_cpu_devices, machine_for, resolve_accelerator

    accelerator = resolve_accelerator(accelerator)
    if num_cpu_devices is None:
        num_cpu_devices = default_cpu_devices(accelerator)
    elif accelerator != "cuda" and num_cpu_devices:
        raise ConfigError(
            "--cpu-devices", num_cpu_devices, "places components on CPU cores beside GPUs, and this run has none "
            "(--accelerator cpu: the cores are the devices)", "use --devices N, or --accelerator cuda on a GPU machine",
        )  # fmt: skip
    core_pool_cores(num_cpu_devices)
    return machine_for(accelerator, num_cpu_devices), accelerator, num_cpu_devices


def _machine(flags: RunFlags) -> tuple[Machine, str, int]:
    """:func:`machine_of` the flags; CPU cores beside GPUs run with the local backend only."""
    machine, accelerator, num_cores = machine_of(flags.accelerator, flags.num_cpu_devices)
    if num_cores and flags.backend == "ray":
        raise ConfigError(
            "--cpu-devices", num_cores, "CPU cores beside GPUs run with the local backend only",
            "use --backend local, or --cpu-devices 0",
        )  # fmt: skip
    return machine, accelerator, num_cores


def _num_devices(flags: RunFlags, accelerator: str) -> int:
    """``--devices`` (default: every core or GPU this process may use), within this machine's units per node and
    with at least one device per ``--nodes`` (Ray only)."""
    from executor.devices import physical_units

    units = physical_units(accelerator)
    num_devices = len(units) if flags.num_devices is None else flags.num_devices
    require(num_devices >= 1, "--devices", num_devices, "must be >= 1", "use at least one device")
    require(
        1 <= flags.nodes <= num_devices, "--nodes", flags.nodes, f"must be between 1 and the {num_devices} devices",
        "use fewer nodes or more --devices",
    )  # fmt: skip
    require(
        flags.nodes == 1 or flags.backend == "ray", "--nodes", flags.nodes, "only the ray backend spans nodes",
        "add --backend ray",
    )  # fmt: skip
    unit = "CPU cores" if accelerator == "cpu" else "GPUs"
    require(
        -(-num_devices // flags.nodes) <= len(units),
        "--devices",
        num_devices,
        f"this machine lets rlinf use {len(units)} {unit}"
        + (f" and {flags.nodes} nodes are assumed to have as many" if flags.nodes > 1 else ""),
        f"use --devices {len(units) * flags.nodes} or fewer",
    )
    return num_devices


def _out(flags: RunFlags, workload: str) -> Path:
    """The run directory: ``--resume``'s, a fresh ``--out`` (refused when it holds a run), or a new default one."""
    from rlinf.app.run_dir import default_out, require_fresh, require_no_links

    if flags.resume is not None:
        require(
            flags.resume.is_dir(),
            "--resume",
            str(flags.resume),
            "is not a run directory",
            "pass the --out of a run",
        )
        require_no_links(flags.resume)
        return flags.resume
    if flags.out is None:
        return default_out(workload)
    require_fresh(check_output_dir(flags.out, "--out"))
    return flags.out


def _plan_file(flags: RunFlags, path: Path, num_devices: int, machine: Machine) -> Plan:
    """The plan of ``path`` (``--plan``, or the resumed run's), refused when ``--mode`` or ``--max-staleness``
    says otherwise."""
    require(path.is_file(), "--plan", str(path), "file does not exist", "pass a plan YAML file")
    plan = load_plan(path, max(num_devices, 64), field="--plan", num_cores=machine.num_cores)
    if flags.max_staleness is not None and flags.max_staleness != plan.max_staleness:
        raise ConfigError(
            "--max-staleness", flags.max_staleness, f"conflicts with --plan, whose max_staleness is "
            f"{plan.max_staleness}", "drop --max-staleness or change the plan's max_staleness",
        )  # fmt: skip
    if flags.mode is not None and flags.mode != plan.mode:
        raise ConfigError(
            "--mode",
            flags.mode,
            f"conflicts with --plan, whose placement is {plan.mode}",
            "drop --mode or change the plan",
        )
    return plan
