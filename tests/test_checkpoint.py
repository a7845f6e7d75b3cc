"""Checkpoints: atomic files with a manifest of checksums, fallback past corrupt ones, and exact resume of the
embodied PPO workers (4 iterations straight == 2, checkpoint, fresh workers, restore, 2 more)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import executor
from rlinf.app.checkpoint import MANIFEST, load_latest, read_manifest, save_checkpoint, verify
from rlinf.app.jobs import get_job
from rlinf.core.errors import ConfigError, RlinfWarning
from rlinf.core.program import Program
from rlinf.core.run_settings import RunSettings
from rlinf.workloads.embodied.config import EmbodiedConfig


def state(iteration: int) -> dict:
    return {"iteration": iteration, "weights": torch.full((64,), float(iteration)), "rng": [iteration] * 3}


def test_save_and_load_the_newest(tmp_path: Path) -> None:
    for iteration in (1, 2, 3):
        save_checkpoint(tmp_path, iteration, state(iteration))
    loaded = load_latest(tmp_path)
    assert loaded.iteration == 3 and loaded.path.name == "iter_000003.safetensors"
    assert torch.equal(loaded.state["weights"], torch.full((64,), 3.0)) and loaded.state["rng"] == [3, 3, 3]
    entries = read_manifest(tmp_path)
    assert [e.iteration for e in entries] == [1, 2, 3]
    assert all(verify(tmp_path, e) == "" for e in entries)
    assert not list(tmp_path.glob(".*.tmp"))


def test_keeps_only_the_last_n(tmp_path: Path) -> None:
    for iteration in range(1, 6):
        save_checkpoint(tmp_path, iteration, state(iteration), keep=2)
    assert sorted(p.name for p in tmp_path.glob("iter_*.safetensors")) == [
        "iter_000004.safetensors",
        "iter_000005.safetensors",
    ]
    assert [e.file for e in read_manifest(tmp_path)] == ["iter_000004.safetensors", "iter_000005.safetensors"]


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda p: p.write_bytes(p.read_bytes()[:-100]), "bytes instead of"),
        (
            lambda p: p.write_bytes(p.read_bytes()[:50] + b"X" + p.read_bytes()[51:]),
            "checksum does not match",
        ),
        (lambda p: p.unlink(), "the file is missing"),
    ],
)
def test_a_corrupt_newest_checkpoint_falls_back_with_a_warning(tmp_path: Path, damage, problem: str) -> None:
    for iteration in (1, 2):
        save_checkpoint(tmp_path, iteration, state(iteration))
    damage(tmp_path / "iter_000002.safetensors")
    with pytest.warns(
        RlinfWarning,
        match=rf"iter_000002\.safetensors is corrupt \(.*{problem}.*falling back to iter_000001\.safetensors",
    ):
        loaded = load_latest(tmp_path)
    assert loaded.iteration == 1 and loaded.state["rng"] == [1, 1, 1]


def test_no_valid_checkpoint_is_an_error(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, 1, state(1))
    (tmp_path / "iter_000001.safetensors").write_bytes(b"garbage")
    with (
        pytest.warns(RlinfWarning, match="falling back to nothing"),
        pytest.raises(ConfigError, match="holds no valid checkpoint"),
    ):
        load_latest(tmp_path)
    with pytest.raises(ConfigError, match="holds no valid checkpoint"):
        load_latest(tmp_path / "empty")


def test_rejects_keep_below_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="keep=0: must be >= 1"):
        save_checkpoint(tmp_path, 1, state(1), keep=0)


def test_unreadable_manifest_is_an_error(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, 1, state(1))
    (tmp_path / MANIFEST).write_text("{not json")
    with pytest.raises(ConfigError, match="is unreadable"):
        load_latest(tmp_path)


def test_an_unlisted_newer_file_is_reported_and_ignored(tmp_path: Path) -> None:
    """A crash between renaming a checkpoint into place and listing it leaves a complete but unverified file."""
    for iteration in (1, 2):
        save_checkpoint(tmp_path, iteration, state(iteration))
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    manifest["checkpoints"] = manifest["checkpoints"][:1]
    (tmp_path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.warns(RlinfWarning, match=r"ignoring .*iter_000002\.safetensors: its write was interrupted"):
        loaded = load_latest(tmp_path)
    assert loaded.iteration == 1


# --------------------------------------------------------------------------- exact resume of embodied PPO
SMALL = EmbodiedConfig(
    num_envs=4, num_steps=8, hidden_sizes=(16, 16), num_epochs=2, num_minibatches=2, seed=3
)


def embodied_program(
    config: EmbodiedConfig, num_devices: int
) -> tuple[Program, dict[str, executor.WorkerSpec]]:
    """The collocated program of ``config`` on ``num_devices`` devices and its workers' specs."""
    job = get_job("embodied_ppo", settings=RunSettings(seed=config.seed))
    plan, logical = job.fixed_plan("collocated", num_devices, config)
    program = job.lower(plan, config, logical)
    return program, job.worker_specs(config, plan, program)


def outcomes(result: executor.RunResult) -> list[tuple]:
    """Everything an iteration computed (losses, returns, lengths), in a fixed order, timing excluded."""
    return sorted(
        (i.component, i.rank, i.op_index, json.dumps(dict(i.info), sort_keys=True)) for i in result.infos
    )


def test_resumed_workers_continue_exactly(tmp_path: Path) -> None:
    """Bitwise: CPU, one torch thread per worker, the same seeds and op order (one device keeps it quick; the
    Ray tests cover two data-parallel replicas). Any state missing from a checkpoint (optimizer moments, normalizers, RNGs, MuJoCo warm start, episode
    counters) changes the losses or returns of iterations 3-4."""
    program, specs = embodied_program(SMALL, 1)
    devices = executor.cpu_devices(1)
    with executor.LocalBackend(devices) as backend:
        straight = [outcomes(executor.run(program, specs, backend=backend)) for _ in range(2)]
        save_checkpoint(tmp_path, 2, {"iteration": 2, "workers": backend.snapshot()})  # reads, never changes
        straight += [outcomes(executor.run(program, specs, backend=backend)) for _ in range(2)]
    loaded = load_latest(tmp_path)
    with executor.LocalBackend(devices) as backend:
        backend.start(program, specs)
        with pytest.raises(ConfigError, match="holds worker states for a different layout"):
            backend.restore({"actor": loaded.state["workers"]["actor"][:1]})
        backend.restore(loaded.state["workers"])
        resumed = [outcomes(executor.run(program, specs, backend=backend)) for _ in range(2)]
    assert resumed == straight[2:]
    assert straight[2] != straight[1]  # the comparison has teeth: iterations differ from each other
