"""Realistic model sizes for GRPO on a Hugging Face model: ``model.config`` names the shape of a public checkpoint
(random weights), and a plan whose states do not fit a device's memory is refused in one line before any worker
starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlinf.app.jobs import load_job_config
from rlinf.cli import main

pytest.importorskip("transformers", reason='needs the hf extra: pip install -e ".[hf]"')

from rlinf.workloads.hf_grpo.checkpoints import hf_config, parameter_count, sizes_parameter_count  # noqa: E402
from rlinf.workloads.hf_grpo.config import MODEL_PRESETS, ModelSizes  # noqa: E402

PUBLIC_PARAMETERS = {
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-1.5b": 1_543_714_304,
    "llama-3.2-1b": 1_235_814_400,
}
"""Parameter counts of Qwen/Qwen2.5-0.5B, Qwen/Qwen2.5-1.5B and meta-llama/Llama-3.2-1B (tied embeddings)."""


@pytest.mark.parametrize("preset", sorted(PUBLIC_PARAMETERS))
def test_a_preset_has_the_shape_of_its_public_checkpoint(preset: str) -> None:
    _, config = load_job_config("examples/grpo_hf.yaml", [f"model.config={preset}"])
    assert config.model.config == MODEL_PRESETS[preset]
    assert parameter_count(config) == PUBLIC_PARAMETERS[preset]
    built = hf_config(MODEL_PRESETS[preset])
    assert built.tie_word_embeddings and built.model_type == MODEL_PRESETS[preset].architecture


@pytest.mark.parametrize(
    "sizes",
    [
        *MODEL_PRESETS.values(),
        ModelSizes(architecture="llama", num_heads=8, num_kv_heads=8, hidden_size=96, vocab_size=333),
        ModelSizes(
            architecture="qwen2",
            num_layers=3,
            num_heads=6,
            num_kv_heads=3,
            hidden_size=48,
            tie_word_embeddings=True,
        ),
    ],
    ids=[*MODEL_PRESETS, "llama-no-gqa", "qwen2-tied"],
)
def test_the_parameter_count_from_sizes_is_what_transformers_builds(sizes: ModelSizes) -> None:
    """Loading a config counts parameters from the sizes, without importing transformers; the count is the model's."""
    import torch
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config(sizes))
    assert sizes_parameter_count(sizes) == sum(p.numel() for p in model.parameters())


def test_a_model_that_does_not_fit_is_refused_before_any_worker_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    args = ["train", "examples/grpo_hf.yaml", "--set", "model.config=qwen2.5-1.5b", "--mode", "collocated"]
    assert main([*args, "--accelerator", "cpu", "--out", str(out)]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("rlinf: error")]
    assert len(errors) == 1
    assert (
        "component actor needs 23.0 GiB per device for its state, more than a CPU holds (8.0 GiB)"
        in errors[0]
    )
    assert not out.exists()  # nothing was built, trained or written


def test_an_unknown_preset_names_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "examples/grpo_hf.yaml", "--set", "model.config=qwen3-8b"]) == 2
    err = capsys.readouterr().err
    assert (
        "model.config='qwen3-8b': unknown model preset; fix: use one of ['llama-3.2-1b', 'qwen2.5-0.5b'"
        in err
    )
