"""GRPO on a Hugging Face causal LM on a CUDA device: the same workers run one iteration with the rollout and
inference models in bfloat16 and the actor's float32 weights under bfloat16 autocast (skipped without a GPU)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

from rlinf.api import RunSettings, WorkerContext
from rlinf.workloads.hf_grpo.actor import ActorWorker
from rlinf.workloads.hf_grpo.rollout import RolloutWorker
from rlinf.workloads.hf_grpo.scoring import InferenceWorker, RewardWorker
from rlinf.workloads.hf_grpo.workload import WORKLOAD

pytest.importorskip("transformers", reason='needs the hf extra: pip install -e ".[hf]"')

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def cuda_context(component: str) -> WorkerContext:
    return WorkerContext(
        component=component, rank=0, world=1, device=SimpleNamespace(torch_device="cuda"),
        num_micro_batches=2, micro_batch_groups=((0, 2), (2, 4)), group_size=4, loop_stages=1,
        offload=False, seed=0,
    )  # fmt: skip


def test_one_iteration_on_cuda_in_bfloat16(tmp_path: Path) -> None:
    data = yaml.safe_load(Path("examples/grpo_hf.yaml").read_text())
    data.pop("workload")
    data["task"]["max_steps"] = 2
    data["warm_start"].update(num_steps=150, lr=0.005)
    data["grpo"].update(prompts_per_iteration=4, group_size=4, max_new_tokens=48, max_prompt_tokens=64)
    data["grpo"]["kl_coef"] = 0.01
    data["eval"].update(num_problems=16)
    data["cache_dir"] = str(tmp_path)
    config = WORKLOAD.load_config(data, "test", RunSettings(**data.pop("execution")))
    rollout, rewarder, inference, actor = RolloutWorker(), RewardWorker(), InferenceWorker(), ActorWorker()
    for worker, name in (
        (rollout, "rollout"),
        (rewarder, "reward"),
        (inference, "inference"),
        (actor, "actor"),
    ):
        worker.setup(config, cuda_context(name))
    assert next(rollout.backend.model.parameters()).dtype == torch.bfloat16
    assert next(rollout.backend.model.parameters()).device.type == "cuda"
    assert next(actor.backend.model.parameters()).dtype == torch.float32
    infos = []
    for j in range(2):
        payload, info = rollout.compute("generate", j, 0, [])
        payload, _ = rewarder.compute("reward", j, 0, [payload])
        payload, _ = inference.compute("infer", j, 0, [payload])
        assert np.isfinite(payload["old_logprobs"]).all() and np.isfinite(payload["ref_logprobs"]).all()
        infos.append(actor.compute("train", j, 0, [payload])[1])
    assert sum(i.get("optimizer_steps", 0) for i in infos) == 2
    assert all(np.isfinite(i["loss"]) for i in infos if "loss" in i)
    weights = actor.weights()
    rollout.load_weights(weights)
    inference.load_weights(weights)
    synced = rollout.backend.model.state_dict()["lm_head.weight"].float().cpu().numpy()
    np.testing.assert_allclose(synced, weights["lm_head.weight"], rtol=1e-2, atol=1e-2)  # bf16 rounding
    assert "heldout_accuracy" in infos[-1] or config.grpo.num_iterations > 1
