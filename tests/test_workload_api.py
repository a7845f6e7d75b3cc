"""The public workload API: a workload from outside the package trains in every mode and in auto mode, bad
references fail in one line, plans and worker contexts are derived by rlinf (no per-workload plan code)."""

from __future__ import annotations

import json
import shlex
import subprocess
import textwrap
import typing
from pathlib import Path

import numpy as np
import pytest

from executor.protocol import share_slice
from rlinf.api import WorkerContext, Workload
from rlinf.api.workload import WORKLOAD_METHODS
from rlinf.app.jobs import Job, get_job, load_job_config
from rlinf.cli import main
from rlinf.core.component_facts import component_facts
from rlinf.core.errors import ConfigError
from rlinf.core.plan import Placement, Plan
from rlinf.core.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = str(ROOT / "examples" / "custom_workload" / "config.yaml")
QUICK = ["--set", "num_steps=16", "--set", "epochs=1", "--no-progress"]


ENV_SPLIT_POLICY_APART = Plan(
    placements=[
        Placement(component="env", devices=(0, 1)),
        Placement(component="policy", devices=(2,)),
        Placement(component="critic", devices=(0, 1)),
        Placement(component="actor", devices=(0, 1)),
    ],
    granularity={"loop": 2},
)
"""Two env replicas, one policy replica: not a pinned loop (each stage splits over both env replicas)."""


@pytest.mark.parametrize(
    ("mode", "stages"), [("collocated", 1), ("disaggregated", 1), ("hybrid", 1), ("collocated", 2)]
)  # collocated with 2 stages on 2 devices: a pinned loop, each env replica sets up one stage
def test_the_example_workload_trains_in_every_mode(mode: str, stages: int, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["train", EXAMPLE, "--mode", mode, "--iterations", "2", "--devices", "2"]
    args += ["--set", f"execution.granularity={stages}", *QUICK]
    assert main([*args, "--out", str(out)]) == 0
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == [1, 2]
    assert all(m["env_steps_per_s"] > 0 and "value_loss" in m and "policy_loss" in m for m in metrics)
    assert f"mode: {mode}" in (out / "plan.yaml").read_text()


def test_the_example_workload_plans_and_trains_in_auto_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "auto"
    args = ["train", EXAMPLE, "--mode", "auto", "--iterations", "3", "--profile-budget", "10", *QUICK]
    assert main([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "auto: profiled" in printed and "auto: chose" in printed and "predicted" in printed
    assert (out / "profile_trace.json").is_file() and (out / "trace.json").is_file()
    # The profile records the command that took it, as given (here in-process, not this process's argv).
    recorded = load_trace(out / "profile_trace.json").provenance["command"]
    assert recorded == shlex.join(["rlinf", *args, "--out", str(out)])


def test_the_example_lives_outside_the_package_and_uses_only_the_public_api() -> None:
    source = (ROOT / "examples" / "custom_workload" / "ppo_critic.py").read_text()
    imported = [line for line in source.splitlines() if line.startswith(("from rlinf", "import rlinf"))]
    assert imported and all(line.startswith("from rlinf.api import ") for line in imported)
    assert len(source.splitlines()) <= 290  # a page or so: it is documentation


def test_no_per_workload_plan_functions_remain() -> None:
    found = subprocess.run(
        ["grep", "-rn", r"def plan_for_mode\|def probe_plans\|def with_plan", "rlinf/workloads", "rlinf/app/jobs", "examples"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert found.returncode == 1 and found.stdout == "", found.stdout


def test_the_workload_protocol_is_small_and_generic() -> None:
    assert len(WORKLOAD_METHODS) <= 6
    assert typing.Generic in Workload.__mro__ and Workload.__parameters__  # generic over the config


def write(tmp_path: Path, module: str, workload_line: str) -> str:
    (tmp_path / "userwl.py").write_text(textwrap.dedent(module))
    config = tmp_path / "config.yaml"
    config.write_text(f"workload: {workload_line}\n")
    return str(config)


BROKEN_WORKER = """
    import sys
    sys.path.insert(0, {example!r})
    import ppo_critic

    class NoCompute:
        def setup(self, config, context): ...
        def checkpoint(self): return {{}}
        def restore(self, state): ...

    class Broken(ppo_critic.PPOCritic):
        def workers(self, config):
            return {{**super().workers(config), "critic": NoCompute}}

    WORKLOAD = Broken()
"""


LENGTHS_NOT_A_METHOD = """
    import sys
    sys.path.insert(0, {example!r})
    import ppo_critic

    class Lengths(ppo_critic.PPOCritic):
        response_lengths = 3

    WORKLOAD = Lengths()
"""


CHECK_NOT_A_METHOD = LENGTHS_NOT_A_METHOD.replace("response_lengths = 3", "check = 3")


CHECK_REFUSES = """
    import sys
    sys.path.insert(0, {example!r})
    import ppo_critic
    from rlinf.api import ConfigError

    class Checked(ppo_critic.PPOCritic):
        def check(self, config):
            raise ConfigError("seed", config.seed, "refused by check()", "none")

    WORKLOAD = Checked()
"""
"""A workload whose optional ``check`` refuses the run: it sees ``--seed`` applied, before any worker."""


@pytest.mark.parametrize(
    ("module", "reference", "message"),
    [
        (CHECK_NOT_A_METHOD, "userwl.py:WORKLOAD", "has a check attribute that is not a method"),
        (CHECK_REFUSES, "userwl.py:WORKLOAD", "seed=7: refused by check(); fix: none"),
        ("", "nosuch.module:x", "workload='nosuch.module:x': cannot import nosuch"),
        ("X = 1\n", "userwl.py:WORKLOAD", "module userwl has no attribute 'WORKLOAD'"),
        ("WORKLOAD = 42\n", "userwl.py:WORKLOAD", "is a int, not a workload: it lacks name, load_config"),
        (BROKEN_WORKER, "userwl.py:WORKLOAD", "worker critic='NoCompute': lacks compute"),
        (LENGTHS_NOT_A_METHOD, "userwl.py:WORKLOAD", "has a response_lengths attribute that is not a method"),
        ("", "no_colon_here", "is not a built-in workload"),
        ("", "missing_file.py:W", "file missing_file.py does not exist"),
        (
            "raise RuntimeError('boom')\n",
            "userwl.py:WORKLOAD",
            "importing userwl failed (RuntimeError: boom)",
        ),
    ],
)
def test_bad_references_are_one_line(
    module: str, reference: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    module = module.format(example=str(ROOT / "examples" / "custom_workload"))
    config = write(tmp_path, module, reference)
    code = main(
        [
            "train",
            config,
            "--mode",
            "collocated",
            "--iterations",
            "1",
            "--seed",
            "7",
            "--out",
            str(tmp_path / "run"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0], err
    if module == CHECK_REFUSES:
        assert not (tmp_path / "run").exists()  # refused before the run directory, let alone a worker


class ReportsLengths:
    """Just enough of a workload for :meth:`Job.response_lengths`."""

    name = "lengths"

    def __init__(self, lengths: list) -> None:
        self.lengths = lengths

    def response_lengths(self, result: object, config: object) -> list:
        return self.lengths


def test_response_lengths_are_optional_whole_token_counts() -> None:
    assert get_job("embodied_ppo").response_lengths(None, None) == ()  # a workload without the method
    lengths = Job(workload=ReportsLengths([3, np.int64(5)])).response_lengths(None, None)
    assert lengths == (3, 5) and all(type(n) is int for n in lengths)
    for bad in (0, 2.5, True, "4"):
        with pytest.raises(
            ConfigError, match=r"workload lengths response_lengths\(\)\[1\]=.*is not a token count"
        ):
            Job(workload=ReportsLengths([7, bad])).response_lengths(None, None)


def test_contexts_give_each_replica_the_executors_share() -> None:
    """Two loop stages over two env replicas and one policy replica: each env replica's environments are the
    rows the executor would hand it, and the facts come from the program (stages, offload). With as many policy
    as env replicas the loop is pinned: stage ``s`` is replica ``s``'s alone."""
    job, config = load_job_config(EXAMPLE, ["num_envs=8", "execution.granularity=2"])
    split = ENV_SPLIT_POLICY_APART
    program = job.lower(split, config, 3)
    facts = component_facts(job.workflow(config), split, program, seed=7)
    assert (
        facts["env"].num_micro_batches == 2
        and facts["env"].loop_stages == 2
        and facts["critic"].num_micro_batches == 1
    )
    for rank in (0, 1):
        context = WorkerContext.for_replica(facts["env"], rank=rank, world=2, device=None)
        for stage, (lo, hi) in enumerate(context.micro_batch_groups):
            first, last = share_slice(hi - lo, 0, 1, rank, 2)
            assert context.my_groups(stage) == (lo + first, lo + last)
            assert context.my_position(stage) == (rank, 2)
    assert context.seed == 7 and not context.offload
    plan, logical = job.fixed_plan("collocated", 2, config)
    facts = component_facts(job.workflow(config), plan, job.lower(plan, config, logical))
    for name in ("env", "policy"):
        contexts = [
            WorkerContext.for_replica(facts[name], rank=rank, world=2, device=None) for rank in (0, 1)
        ]
        assert [[c.my_groups(stage) for stage in (0, 1)] for c in contexts] == [
            [(0, 4), (4, 4)],
            [(0, 0), (4, 8)],
        ]
        assert [[c.my_position(stage) for stage in (0, 1)] for c in contexts] == [
            [(0, 1), None],
            [None, (0, 1)],
        ]
    critic = WorkerContext.for_replica(facts["critic"], rank=1, world=2, device=None)
    assert critic.my_groups(0) == (4, 8) and critic.my_position(0) == (1, 2)  # not in the loop: split as ever


def test_the_plan_check_takes_uneven_shares_and_refuses_empty_ones() -> None:
    """Three environments per stage over two replicas split 1 + 2 (shares differ by one environment; a replica's
    whole iteration is one range); one environment per stage would leave a replica none; an uneven producer
    hands its rows on only to one consumer replica or as many as it has."""
    job, config = load_job_config(EXAMPLE, ["num_envs=6", "execution.granularity=2"])
    plan = ENV_SPLIT_POLICY_APART
    facts = component_facts(job.workflow(config), plan, job.lower(plan, config, 3))
    contexts = [WorkerContext.for_replica(facts["env"], rank=rank, world=2, device=None) for rank in (0, 1)]
    assert [[c.my_groups(stage) for stage in (0, 1)] for c in contexts] == [
        [(0, 1), (3, 4)],
        [(1, 3), (4, 6)],
    ]
    assert [c.my_batch() for c in contexts] == [(0, 2), (2, 6)]
    uneven = Plan(
        placements=[
            Placement(component="env", devices=(0, 1)),
            Placement(component="policy", devices=(2, 3, 4)),
            Placement(component="critic", devices=(0, 1)),
            Placement(component="actor", devices=(0, 1)),
        ],
        granularity={"loop": 2},
    )
    with pytest.raises(
        ConfigError, match=r"env->policy replicas='2->3': env's micro-batches of \[3\] groups"
    ):
        job.lower(uneven, config, 5)
    job, config = load_job_config(EXAMPLE, ["num_envs=6", "execution.granularity=6"])
    plan, logical = job.fixed_plan("collocated", 2, config)
    with pytest.raises(
        ConfigError, match=r"critic replicas=2: a micro-batch of 1 groups from env leaves some"
    ):
        job.lower(plan, config, logical)


def test_fixed_plans_are_derived_from_the_workflow() -> None:
    job, config = load_job_config(EXAMPLE)
    workflow = job.workflow(config)
    collocated, _ = job.fixed_plan("collocated", 4, config)
    assert {p.devices for p in collocated.placements} == {(0, 1, 2, 3)}
    disaggregated, logical = job.fixed_plan("disaggregated", 2, config)
    assert logical == 4 and disaggregated.mode == "disaggregated"
    hybrid, _ = job.fixed_plan("hybrid", 4, config)
    assert hybrid.devices_of("env") == (0, 1) and hybrid.devices_of("policy") == (2, 3)
    assert hybrid.devices_of("actor") == (0, 1, 2, 3) and set(hybrid.granularity) == set(
        workflow.granularity_keys
    )
    grpo = get_job("grpo_hf")
    _, grpo_config = load_job_config(ROOT / "examples" / "grpo_arith.yaml")
    split, _ = grpo.fixed_plan("hybrid", 2, grpo_config)
    assert split.devices_of("rollout") == split.devices_of("reward") == (0,)
    assert split.devices_of("inference") == split.devices_of("actor") == (1,)
