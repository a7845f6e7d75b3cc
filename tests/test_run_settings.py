"""rlinf's run settings (the config's ``execution:`` section, :mod:`rlinf.core.run_settings`): one section for every
workload, checked by rlinf before the workload reads its own keys; old layouts and bad values fail in one line
that says where the key went or how to fix it; the command line wins."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from rlinf.api import RunSettings
from rlinf.app.jobs import load_job_config
from rlinf.cli import main
from rlinf.core.errors import ConfigError
from rlinf.core.run_settings import run_settings

ROOT = Path(__file__).resolve().parent.parent
HOPPER = str(ROOT / "examples" / "hopper_ppo.yaml")


def test_the_examples_keep_their_run_settings_in_the_section() -> None:
    job, config = load_job_config(HOPPER)
    assert job.settings == RunSettings(iterations=60, seed=0, mode="auto", granularity=1, checkpoint_every=10)
    assert config.seed == 0
    job, config = load_job_config(ROOT / "examples" / "custom_workload" / "config.yaml")
    assert job.settings.seed == config.seed == 1 and job.settings.mode == "collocated"


def test_the_command_line_and_set_reach_every_setting() -> None:
    sets = [
        "execution.iterations=7",
        "execution.seed=11",
        "execution.mode=hybrid",
        "execution.checkpoint_every=3",
        "execution.granularity=2",
        "execution.offload=[rollout, actor]",
        "execution.max_staleness=1",
    ]
    job, config = load_job_config(HOPPER, sets)
    assert job.settings == RunSettings(
        iterations=7, seed=11, mode="hybrid", checkpoint_every=3, granularity=2, offload=("rollout", "actor"),
        max_staleness=1,
    )  # fmt: skip
    assert config.seed == 11  # the workload copies the seed it computes with
    plan, _ = job.fixed_plan("collocated", 2, config)
    assert plan.offload == {"rollout", "actor"} and set(plan.granularity.values()) == {2}
    job, config = load_job_config(HOPPER, sets, iterations=3, seed=5)  # --iterations, --seed win
    assert (job.settings.iterations, job.settings.seed, config.seed) == (3, 5, 5)


def test_the_seed_reaches_every_worker_context() -> None:
    job, config = load_job_config(HOPPER, ["execution.seed=9"])
    plan, logical = job.fixed_plan("collocated", 1, config)
    specs = job.worker_specs(config, plan, job.lower(plan, config, logical))
    assert {spec.facts.seed for spec in specs.values()} == {9}


class Recording:
    """A workload that records what ``load_config`` receives (and is nothing more)."""

    name = "recording"
    headline: dict[str, str] = {}

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, Any], RunSettings]] = []

    def load_config(self, data: Any, source: str, settings: RunSettings) -> Any:
        self.received.append((dict(data), settings))
        raise ConfigError("recorded", None, "stop here", "nothing to fix")

    def workflow(self, config: Any) -> Any: ...
    def workers(self, config: Any) -> Any: ...
    def metrics(self, result: Any, config: Any, iteration: int) -> Any: ...
    def summary(self, metrics: Any) -> str: ...


def test_the_workload_reads_only_its_own_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rlinf.app.jobs as jobs

    workload = Recording()
    monkeypatch.setattr(jobs, "load_workload", lambda reference, base: workload)
    config = tmp_path / "c.yaml"
    config.write_text("workload: anything\nsize: 3\nexecution: {seed: 4, iterations: 2}\n")
    with pytest.raises(ConfigError, match="stop here"):
        load_job_config(config)
    assert workload.received == [({"size": 3}, RunSettings(seed=4, iterations=2))]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("iterations: 3\n", "c.yaml.iterations=3: is a run setting, which moved to the execution section; fix: "
         "write it as execution: {iterations: ...}"),
        ("seed: 1\n", "c.yaml.seed=1: is a run setting, which moved to the execution section"),
        ("stages: 2\n", "c.yaml.stages=2: is a run setting, which moved to the execution section; fix: write it as "
         "execution: {granularity: ...}"),
        ("execution: {cache_dir: x}\n", "execution.cache_dir='x': is not a run setting; fix: keep only "
         "['checkpoint_every', 'granularity', 'iterations', 'max_staleness', 'mode', 'offload', 'seed', "
         "'watchdog_s']"),
        ("execution: {watchdog_s: 0}\n", "execution.watchdog_s=0.0: must be > 0; fix: give seconds, e.g. 60"),
        ("execution: {watchdog_s: soon}\n", "execution.watchdog_s='soon': must be a number"),
        ("execution: 3\n", "execution=3: must be a mapping"),
        ("execution: {mode: sideways}\n", "execution.mode='sideways': unknown mode; fix: use one of ['auto', "),
        ("execution: {iterations: 0}\n", "execution.iterations=0: must be an integer >= 1"),
        ("execution: {seed: -1}\n", "execution.seed=-1: must be an integer >= 0 and <= 4294967295"),
        ("execution: {granularity: 2.5}\n", "execution.granularity=2.5: must be an integer"),
        ("execution: {max_staleness: 65}\n", "execution.max_staleness=65: must be an integer >= 0 and <= 64"),
        ("execution: {offload: rollout}\n", "execution.offload='rollout': must be a list"),
        ("execution: {offload: [critic]}\n", "execution.offload=['critic']: unknown component; fix: use some of "
         "['env', 'rollout', 'actor']"),
        ("execution: {granularity: 3}\n", "execution.granularity=3: does not divide the 8 environments"),
    ],
)  # fmt: skip
def test_bad_run_settings_are_one_line(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"workload: embodied_ppo\n{text}")
    code = main(["train", str(config), "--mode", "collocated", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0], err


def test_a_run_setting_set_at_the_top_level_says_where_it_went() -> None:
    with pytest.raises(ConfigError, match=r"--set='stages=2': .*fix: write --set execution.granularity=2"):
        load_job_config(HOPPER, ["stages=2"])
    with pytest.raises(ConfigError, match=r"--set='seed=3': .*fix: write --set execution.seed=3"):
        load_job_config(HOPPER, ["seed=3"])


def test_the_settings_validate_where_they_are_built() -> None:
    assert run_settings({}, "c.yaml") == RunSettings()
    with pytest.raises(ConfigError, match=r"execution.checkpoint_every=0: must be an integer >= 1"):
        RunSettings(checkpoint_every=0)
    with pytest.raises(ConfigError, match=r"execution.offload=\(''\,\): must be a list of component names"):
        RunSettings(offload=("",))


OLD_WORKLOAD = """
    import sys
    sys.path.insert(0, {example!r})
    import ppo_critic

    class Old(ppo_critic.PPOCritic):
        def load_config(self, data, source):
            return super().load_config(data, source, None)

    WORKLOAD = Old()
"""


def test_a_workload_written_for_config_keys_is_told_what_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = OLD_WORKLOAD.format(example=str(ROOT / "examples" / "custom_workload"))
    (tmp_path / "oldwl.py").write_text(textwrap.dedent(module))
    (tmp_path / "c.yaml").write_text("workload: oldwl.py:WORKLOAD\n")
    code = main(["train", str(tmp_path / "c.yaml"), "--mode", "collocated", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "has load_config(data, source)" in err[0] and "take load_config(data, source, settings)" in err[0]


def test_grpo_iterations_moved_to_the_section(tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason='needs the hf extra: pip install -e ".[hf]"')
    arith, cache = ROOT / "examples" / "grpo_arith.yaml", f"cache_dir={tmp_path}"
    with pytest.raises(ConfigError, match=r"grpo.num_iterations=3: is a run setting, which moved"):
        load_job_config(arith, ["grpo.num_iterations=3", cache])
    job, config = load_job_config(arith, [cache], iterations=4)
    assert config.grpo.num_iterations == job.settings.iterations == 4 and config.eval.enabled
