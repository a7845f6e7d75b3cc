"""Devices are CPU cores or CUDA GPUs, chosen with --accelerator. What needs no GPU (argument handling, device
selection, the CPU side of the device abstraction) runs everywhere; the GPU checks are marked ``gpu`` and skip
with a reason where torch sees no CUDA device (they ran only where docs/gpu.md says)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

import executor
from executor.devices import (
    Device,
    cuda_devices,
    is_oversubscribed,
    logical_devices,
    resolve_accelerator,
    visible_gpus,
)
from executor.offload import HostStore
from rlinf.cli import main
from rlinf.core.errors import ConfigError

HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="torch sees no CUDA device on this machine (GPU check)")
without_gpu = pytest.mark.skipif(HAS_GPU, reason="checks the behaviour of a machine without a GPU")
HOPPER = ["examples/hopper_ppo.yaml", "--set", "num_steps=8", "--set", "num_epochs=1", "--no-progress"]


@without_gpu
def test_the_default_accelerator_is_the_cpu_without_a_gpu() -> None:
    assert resolve_accelerator(None) == "cpu" and visible_gpus() == ()
    with pytest.raises(
        ConfigError, match=r"--accelerator='cuda': no CUDA GPU is visible.*fix: use --accelerator cpu"
    ):
        resolve_accelerator("cuda")


@without_gpu
@pytest.mark.parametrize("command", ["train", "validate"])
def test_asking_for_cuda_without_a_gpu_is_one_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main([command, *HOPPER, "--accelerator", "cuda", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--accelerator='cuda': no CUDA GPU is visible" in err[0]
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_logical_devices_time_share_the_physical_ones() -> None:
    gpus = cuda_devices(3, gpus=(0, 1))  # given ordinals: builds the devices without touching CUDA
    assert [d.torch_device for d in gpus] == ["cuda:0", "cuda:1", "cuda:0"]
    assert {d.collective_backend for d in gpus} == {"nccl"} and is_oversubscribed(gpus)
    cores = logical_devices("cpu", 3, (4, 5))
    assert [(d.kind, d.core) for d in cores] == [("cpu", 4), ("cpu", 5), ("cpu", 4)]
    assert cores[0].collective_backend == "gloo" and not is_oversubscribed(logical_devices("cpu", 2, (4, 5)))


def test_a_cpu_device_needs_no_synchronisation_and_reports_no_gpu_peak() -> None:
    device = Device(index=0, kind="cpu", core=0)
    device.synchronize()
    assert device.peak_bytes() is None


def test_the_train_command_accepts_cpu_explicitly(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [
        "train",
        *HOPPER,
        "--accelerator",
        "cpu",
        "--mode",
        "collocated",
        "--iterations",
        "1",
        "--devices",
        "1",
    ]
    assert main([*args, "--out", str(out)]) == 0 and (out / "metrics.jsonl").is_file()


# ----------------------------------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
@needs_gpu
def test_offload_moves_state_to_pinned_host_memory_and_frees_the_gpu() -> None:
    state = [torch.randn(1 << 20, device="cuda"), torch.randn(256, 256, device="cuda")]
    copies = [t.clone() for t in state]
    before = torch.cuda.memory_allocated()
    store = HostStore()
    moved = store.offload(state)
    assert moved == sum(t.numel() * t.element_size() for t in copies)
    assert torch.cuda.memory_allocated() <= before - moved + (1 << 20)
    assert store._pinned is not None and store._pinned.is_pinned()
    store.onload(state)
    assert all(torch.equal(a, b) for a, b in zip(state, copies, strict=True))


@pytest.mark.gpu
@needs_gpu
def test_op_timing_waits_for_the_gpu_and_peaks_come_from_torch() -> None:
    device = cuda_devices(1)[0]
    device.bind()
    device.peak_bytes()
    start = time.perf_counter()
    torch.cuda._sleep(200_000_000)  # queued, returns at once
    device.synchronize()
    assert time.perf_counter() - start > 0.01
    block = torch.empty(64 << 20, dtype=torch.uint8, device=device.torch_device)
    assert device.peak_bytes() >= block.numel()


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("mode", ["collocated", "auto"])
def test_train_on_a_gpu(mode: str, tmp_path: Path) -> None:
    out = tmp_path / mode
    args = ["train", *HOPPER, "--accelerator", "cuda", "--mode", mode, "--iterations", "2", "--devices", "1"]
    extra = ["--profile-budget", "30"] if mode == "auto" else ["--set", "execution.offload=[rollout, actor]"]
    assert main([*args, *extra, "--out", str(out)]) == 0
    assert (out / "trace.json").is_file()


def test_the_executor_exports_the_accelerator_helpers() -> None:
    assert executor.cuda_devices is cuda_devices
