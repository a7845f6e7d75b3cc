"""Run directories are data, never code: planted checkpoints cannot run code, manifests cannot reach outside
their directory, a run never overwrites another, and a finished or torn run resumes cleanly (docs/security.md)."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from rlinf.app.checkpoint import MANIFEST, load_latest, read_manifest, save_checkpoint
from rlinf.app.run_dir import default_out, read_metrics
from rlinf.cli import main
from rlinf.core.errors import ConfigError, RlinfWarning

CONFIG = "examples/hopper_ppo.yaml"
TINY = ["--mode", "collocated", "--devices", "1", "--no-progress"]
TINY += [
    "--set",
    "num_steps=8",
    "--set",
    "num_epochs=1",
    "--set",
    "num_minibatches=2",
    "--set",
    "execution.checkpoint_every=1",
]


class Planted:
    """Unpickling this creates ``marker``: what a hostile checkpoint would do with a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real two-iteration run (checkpoints at 1 and 2), copied by each test that changes it."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main(["train", CONFIG, *TINY, "--iterations", "2", "--out", str(out)]) == 0
    return out


@pytest.fixture
def run(finished_run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(finished_run, copy)
    return copy


def plant(checkpoints: Path, name: str, data: bytes, *, version: int) -> None:
    """List ``data`` as the newest checkpoint under ``name`` with a correct hash (the attacker writes both)."""
    (checkpoints / name).write_bytes(data)
    entry = {"file": name, "iteration": 3, "sha256": hashlib.sha256(data).hexdigest(), "num_bytes": len(data)}
    (checkpoints / MANIFEST).write_text(json.dumps({"version": version, "checkpoints": [entry]}))


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    lines = capsys.readouterr().err.splitlines()
    err = [line for line in lines if line.startswith("rlinf") and not line.startswith("rlinf: warning")]
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    ("name", "version", "message"),
    [
        ("iter_000003.pt", 1, "is version 1, not 2"),
        ("iter_000003.pt", 2, "is an old pickle-format checkpoint"),
        ("iter_000003.safetensors", 2, "holds no valid checkpoint"),
    ],
)
def test_a_planted_pickle_never_runs_on_resume(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, version: int, message: str
) -> None:
    marker = tmp_path / "pwned"
    plant(run / "checkpoints", name, pickle.dumps({"state": Planted(marker)}), version=version)
    code = main(["train", CONFIG, *TINY, "--iterations", "3", "--resume", str(run)])
    assert code == 2 and not marker.exists()
    assert message in one_line_error(capsys)


def test_a_planted_torch_save_never_runs_on_the_restart_path(run: Path, tmp_path: Path) -> None:
    """The restart after a worker failure loads checkpoints the same way as ``--resume``."""
    from rlinf.app.request import RunRequest
    from rlinf.app.runner import restart_segment

    marker = tmp_path / "pwned"
    checkpoints = run / "checkpoints"
    path = tmp_path / "planted.bin"
    torch.save({"state": Planted(marker)}, path)
    plant(checkpoints, "iter_000003.safetensors", path.read_bytes(), version=2)
    with pytest.warns(RlinfWarning, match="does not decode"), pytest.raises(ConfigError, match="no valid"):
        restart_segment(RunRequest(job=None, config=None, out=run), None)  # type: ignore[arg-type]
    assert not marker.exists()


@pytest.mark.parametrize(
    "entry", ["../../outside/victim.bin", "/ABSOLUTE/victim.bin", "sub/iter_000001.safetensors"]
)
def test_manifest_entries_outside_the_directory_are_refused(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], entry: str
) -> None:
    victim = tmp_path / "outside" / "victim.bin"
    victim.parent.mkdir()
    victim.write_bytes(b"precious")
    entry = entry.replace("/ABSOLUTE", str(tmp_path / "outside"))
    checkpoints = run / "checkpoints"
    manifest = json.loads((checkpoints / MANIFEST).read_text())
    manifest["checkpoints"][0]["file"] = entry  # the oldest: what pruning would delete
    (checkpoints / MANIFEST).write_text(json.dumps(manifest))
    assert main(["train", CONFIG, *TINY, "--iterations", "3", "--resume", str(run)]) == 2
    assert "must be the plain name iter_000001.safetensors (no path)" in one_line_error(capsys)
    with pytest.raises(ConfigError, match="entry 0 file"):  # pruning past keep reads the manifest first
        save_checkpoint(checkpoints, 9, {"x": 1}, keep=1)
    assert victim.read_bytes() == b"precious"
    assert not (checkpoints / "iter_000009.safetensors").exists()


def test_symlinked_checkpoints_are_not_followed(run: Path, tmp_path: Path) -> None:
    checkpoints = run / "checkpoints"
    outside = tmp_path / "outside.safetensors"
    shutil.copyfile(checkpoints / "iter_000002.safetensors", outside)
    (checkpoints / "iter_000002.safetensors").unlink()
    (checkpoints / "iter_000002.safetensors").symlink_to(outside)
    with pytest.warns(RlinfWarning, match=r"iter_000002\.safetensors is corrupt \(it is a symbolic link"):
        assert load_latest(checkpoints).iteration == 1
    linked = tmp_path / "linked"
    linked.symlink_to(checkpoints)
    with pytest.raises(ConfigError, match="is a symbolic link"):
        load_latest(linked)
    assert outside.is_file()


def test_a_symlinked_run_file_is_refused_on_resume(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text("precious\n")
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").symlink_to(outside)
    assert main(["train", CONFIG, *TINY, "--iterations", "3", "--resume", str(run)]) == 2
    assert f"--resume {run}='metrics.jsonl': is a symbolic link" in one_line_error(capsys)
    assert outside.read_text() == "precious\n"


def test_a_second_run_into_a_used_out_stops_before_training(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = {
        p.name: p.read_bytes() for p in [run / "metrics.jsonl", *sorted((run / "checkpoints").iterdir())]
    }
    assert main(["train", CONFIG, *TINY, "--iterations", "1", "--out", str(run)]) == 2
    line = one_line_error(capsys)
    assert (
        f"--out={str(run)!r}: holds a run (iterations 1-2); fix: --resume it, or choose another --out" in line
    )
    after = {
        p.name: p.read_bytes() for p in [run / "metrics.jsonl", *sorted((run / "checkpoints").iterdir())]
    }
    assert after == before


def test_resume_of_a_finished_run_writes_the_missing_outputs(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As if killed after its last checkpoint, before its final files."""
    trace = json.loads((run / "trace.json").read_text())
    for name in ("trace.json", "timeline.json", "gantt.png"):
        (run / name).unlink()
    assert main(["train", CONFIG, *TINY, "--iterations", "2", "--resume", str(run)]) == 0
    assert (
        "the run is complete (2 iterations); wrote trace.json, timeline.json, gantt.png"
        in capsys.readouterr().out
    )
    assert json.loads((run / "trace.json").read_text())["samples"] == trace["samples"]
    assert [m["iteration"] for m in read_metrics(run / "metrics.jsonl")] == [1, 2]


def test_a_torn_metrics_line_and_stray_temporaries_are_cleaned_on_resume(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with (run / "metrics.jsonl").open("a") as stream:
        stream.write('{"iteration": 3, "episodic_ret')
    stray = run / "checkpoints" / ".manifest.json.abc123.tmp"
    stray.write_text("{")
    assert main(["train", CONFIG, *TINY, "--iterations", "3", "--resume", str(run)]) == 0
    err = capsys.readouterr().err
    assert "metrics.jsonl: dropping its torn last line 3" in err and ".manifest.json.abc123.tmp" in err
    assert [m["iteration"] for m in read_metrics(run / "metrics.jsonl")] == [1, 2, 3]
    assert not stray.exists() and not list(run.rglob(".*.tmp"))
    assert [e.iteration for e in read_manifest(run / "checkpoints")] == [1, 2, 3]


def test_a_corrupt_metrics_line_in_the_middle_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"iteration": 1}\n\xff\xfe garbage\n{"iteration": 3}\n')
    with pytest.raises(ConfigError, match="line 2.*is not a metrics record"):
        read_metrics(path)


def test_the_default_out_is_new_for_every_run(tmp_path: Path) -> None:
    import datetime

    now = datetime.datetime(2026, 11, 24, 10, 30, 5)
    first = default_out("embodied_ppo", now=now, root=tmp_path)
    second = default_out("embodied_ppo", now=now, root=tmp_path)
    assert first.name == "embodied_ppo-20261124-103005" and second.name == "embodied_ppo-20261124-103005-2"
    assert first.is_dir() and second.is_dir()
