"""Asynchronous GRPO (a staleness bound ``k``): every response comes with the policy version that sampled it (the
executor's stamp on its payload, one per payload, so a group's responses come from one version), the actor reports how far behind its own version they were, its ratio is
taken against the behaviour policy's log-probabilities, and a run under ``k = 1`` resumes exactly. The workers run
the tests' tiny addition setup (``hf_grpo_tiny.py``); ``tests/test_workload_port.py`` checks that ``k = 0``
computes what it did before, with lag and behaviour KL 0."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hf_grpo_tiny import CONFIG, GROUP_SIZE, PROMPTS, context, one_thread, tiny_config, tiny_sets

from rlinf.api import Stamp, concat_payloads, stamp_of
from rlinf.app.checkpoint import read_manifest
from rlinf.cli import main
from rlinf.core.schedule import StampedPayload
from rlinf.workloads.hf_grpo.actor import ActorWorker
from rlinf.workloads.hf_grpo.checkpoints import weights_payload
from rlinf.workloads.hf_grpo.rollout import RolloutWorker
from rlinf.workloads.hf_grpo.scoring import InferenceWorker, RewardWorker
from rlinf.workloads.hf_grpo.workload import WORKLOAD

pytest.importorskip("transformers", reason='needs the hf extra: pip install -e ".[hf]"')

ITERATIONS = 3


@pytest.fixture(scope="module", autouse=True)
def single_thread() -> Iterator[None]:
    with one_thread():
        yield


def last_step_computes(run: Path) -> set[str]:
    """The components whose compute ops did work in the run's last step (its ``timeline.json``: under a bound, the
    drain step, which trains the last batch and runs what sits behind the buffer; the ops of the rollout side are
    skipped there and last no time, under 0.1 ms, where a compute op of this setup takes milliseconds)."""
    events = json.loads((run / "timeline.json").read_text())["traceEvents"]
    return {
        e["name"].split(".")[0]
        for e in events
        if e.get("ph") == "X" and e.get("cat") == "compute" and e["dur"] > 100  # microseconds
    }


def computed(run: Path) -> list[dict]:
    """Per step, every metric that does not measure time (durations and rates end in ``_s``)."""
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.endswith("_s")} for line in lines]


BEHIND_BUFFER = """placement: {rollout: 0, reward: 0, inference: 0, actor: 0}
granularity: {rollout->reward: 2, reward->inference: 2, inference->actor: 2}
max_staleness: 1
buffer_before: [inference]
"""
"""The collocated plan with the inference behind the buffer: it scores batch ``i`` while the rollout generates
batch ``i + 1``, with the weights that sampled batch ``i``, one version behind the actor's."""


def train(cache: Path, out: Path, *args: str, plan: Path | None = None) -> int:
    """``rlinf train`` of the tiny addition setup, collocated on one device, under ``--max-staleness 1`` (or
    ``plan``)."""
    command = ["train", CONFIG, *tiny_sets(cache), "--devices", "1"]
    command += ["--mode", "collocated", "--max-staleness", "1"] if plan is None else ["--plan", str(plan)]
    command += ["--iterations", str(ITERATIONS), "--no-progress", "--out", str(out)]
    return main([*command, *args])


@pytest.fixture(scope="module")
def straight(grpo_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of 3 iterations under ``k = 1`` (a checkpoint every 2 steps, as ``tiny_sets`` sets)."""
    out = tmp_path_factory.mktemp("staleness_grpo") / "straight"
    assert train(grpo_cache, out) == 0
    return out


@pytest.fixture(scope="module")
def behind(grpo_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same run with the inference behind the buffer (:data:`BEHIND_BUFFER`), and its plan file."""
    folder = tmp_path_factory.mktemp("staleness_grpo_behind")
    plan = folder / "plan.yaml"
    plan.write_text(BEHIND_BUFFER)
    assert train(grpo_cache, folder / "run", plan=plan) == 0
    return folder / "run", plan


def test_behind_the_buffer_the_inference_scores_with_the_sampling_weights(
    straight: Path, behind: tuple[Path, Path]
) -> None:
    """The same samples, lags and behaviour log-probabilities as the buffer before the actor (the same plan
    otherwise, whose granularity ``--mode collocated`` chose): the inference
    scored every batch with the version that sampled it though the actor had moved on (else its own assertion
    stops the run, and the behaviour KL would be 0 where the samples are stale)."""
    run, _ = behind
    metrics = computed(run)
    assert [m["phase"] for m in metrics] == ["fill"] + ["steady"] * (ITERATIONS - 1) + ["drain"]
    lags = [m["policy_lag_max"] for m in metrics[1:]]
    assert lags == [float(min(j - 1, 1)) for j in range(1, ITERATIONS + 1)]
    assert [m["behaviour_kl"] != 0.0 for m in metrics[1:]] == [lag > 0 for lag in lags]
    assert metrics == computed(
        straight
    )  # where the buffer sits changes when the scoring runs, not what it computes
    assert "buffer_before:\n- inference" in (run / "plan.yaml").read_text()
    # ... and it does change when: behind the buffer the inference scores the last batch in the drain step, beside
    # the actor; before the actor's buffer it scored that batch in the step that sampled it (a lowering that
    # ignored buffer_before would run the same program as the straight run, and pass every line above)
    assert last_step_computes(run) == {"inference", "actor"}
    assert last_step_computes(straight) == {"actor"}


# ---------------------------------------------------------------------------------------------- real runs
def test_each_response_records_a_policy_one_step_behind_the_trainer(straight: Path) -> None:
    """Iteration ``j`` (trained at step ``j + 1``) was sampled by the weights of ``j - 2`` training steps (the warm
    start for ``j <= 2``): exactly ``min(j - 1, 1)`` behind the actor. Ignoring the bound would show 0; mixing
    versions inside an iteration would make the mean differ from the max."""
    metrics = computed(straight)
    assert [m["phase"] for m in metrics] == ["fill"] + ["steady"] * (ITERATIONS - 1) + ["drain"]
    assert "policy_lag_max" not in metrics[0]  # the fill step trains nothing
    trained = metrics[1:]
    lags = [m["policy_lag_max"] for m in trained]
    assert lags == [float(min(j - 1, 1)) for j in range(1, ITERATIONS + 1)]
    assert [m["policy_lag_mean"] for m in trained] == lags
    # The old log-probabilities are the sampling policy's: they differ from the actor's exactly when stale.
    assert [m["behaviour_kl"] != 0.0 for m in trained] == [lag > 0 for lag in lags]
    assert all(m["optimizer_steps"] == 2 for m in trained)
    printed = [json.loads(line) for line in (straight / "metrics.jsonl").read_text().splitlines()]
    assert "policy lag 1 (behaviour KL " in WORKLOAD.summary([printed[-1]])
    assert "policy lag" not in WORKLOAD.summary([printed[1]])  # not when the samples were fresh


def test_a_run_under_a_bound_resumes_exactly(grpo_cache: Path, straight: Path, tmp_path: Path) -> None:
    """The run stopped after its step-2 checkpoint (its later checkpoints removed): ``--resume`` restores every
    worker's policy version and the batch produced but not yet trained on, and computes steps 3 and 4 exactly as
    the uninterrupted run did."""
    resumed = tmp_path / "resumed"
    shutil.copytree(straight, resumed)
    checkpoints = resumed / "checkpoints"
    manifest = json.loads((checkpoints / "manifest.json").read_text())
    later = [entry for entry in manifest["checkpoints"] if entry["iteration"] > 2]
    assert later  # the run wrote checkpoints after step 2: they are what the interruption loses
    for entry in later:
        (checkpoints / entry["file"]).unlink()
    manifest["checkpoints"] = [entry for entry in manifest["checkpoints"] if entry["iteration"] <= 2]
    (checkpoints / "manifest.json").write_text(json.dumps(manifest))
    assert [entry.iteration for entry in read_manifest(checkpoints)] == [2]
    assert train(grpo_cache, resumed, "--resume", str(resumed)) == 0
    assert [m["iteration"] for m in computed(resumed)] == list(range(1, ITERATIONS + 2))
    assert computed(resumed) == computed(straight)


def test_behind_the_buffer_a_run_resumes_exactly(grpo_cache: Path, behind: tuple[Path, Path], tmp_path: Path):
    """The inference's checkpoint holds the versions synced and not yet scored with: resumed after step 2, the
    run computes steps 3 and 4 as the uninterrupted one did."""
    run, plan = behind
    resumed = tmp_path / "resumed"
    shutil.copytree(run, resumed)
    checkpoints = resumed / "checkpoints"
    manifest = json.loads((checkpoints / "manifest.json").read_text())
    for entry in [entry for entry in manifest["checkpoints"] if entry["iteration"] > 2]:
        (checkpoints / entry["file"]).unlink()
    manifest["checkpoints"] = [entry for entry in manifest["checkpoints"] if entry["iteration"] <= 2]
    (checkpoints / "manifest.json").write_text(json.dumps(manifest))
    (resumed / "timeline.json").unlink()  # written again by the resumed run's last step
    assert train(grpo_cache, resumed, "--resume", str(resumed), plan=plan) == 0
    assert computed(resumed) == computed(run)
    assert last_step_computes(resumed) == {
        "inference",
        "actor",
    }  # resumed behind the buffer, not before the actor


# ---------------------------------------------------------------------------------------------- the workers
def _rollout(config: object) -> RolloutWorker:
    worker = RolloutWorker()
    worker.setup(config, context("rollout"))
    return worker


def _versioned(rollout: RolloutWorker, version: int) -> StampedPayload:
    """A weight-sync payload of the rollout's own weights, stamped ``version`` (as the executor stamps it)."""
    weights = rollout.backend.weights()
    assert weights is not None
    return StampedPayload(weights_payload(weights), Stamp(version, version))


def _stamped(payload: dict[str, np.ndarray], version: int) -> StampedPayload:
    """``payload`` as the executor hands it over when the weights of ``version`` produced it."""
    return StampedPayload(payload, Stamp(version, version))


def test_the_rollout_takes_weights_only_between_iterations(grpo_cache: Path) -> None:
    """Every response of an iteration comes from one version (the executor stamps it on the payloads: the
    rollout itself records none)."""
    config = tiny_config(grpo_cache)
    rollout = _rollout(config)
    first = rollout.compute("generate", 0, 0, [])[0]
    with pytest.raises(AssertionError, match="received weights in the middle of iteration 1"):
        rollout.load_weights(_versioned(rollout, 3))
    payload = concat_payloads([first, rollout.compute("generate", 1, 0, [])[0]])
    assert payload["response_len"].shape == (PROMPTS, GROUP_SIZE) and "policy_version" not in payload
    rollout.load_weights(_versioned(rollout, 3))  # between iterations
    second = [rollout.compute("generate", j, 0, [])[0] for j in range(2)]
    assert sum(len(p["group_index"]) for p in second) == PROMPTS


@pytest.fixture(scope="module")
def scored(grpo_cache: Path) -> dict[str, np.ndarray]:
    """One iteration of the tiny setup through real rollout, reward and inference workers, with advantages of both
    signs in every group (the tiny warm start may tie a group's rewards). Copy before changing it."""
    config = tiny_config(grpo_cache)
    rollout, rewarder, inference = _rollout(config), RewardWorker(), InferenceWorker()
    rewarder.setup(config, context("reward"))
    inference.setup(config, context("inference"))
    generated = [rollout.compute("generate", j, 0, [])[0] for j in range(2)]
    scored = [rewarder.compute("reward", j, 0, [p])[0] for j, p in enumerate(generated)]
    payload = concat_payloads([inference.compute("infer", j, 0, [p])[0] for j, p in enumerate(scored)])
    advantages = np.linspace(-1, 1, PROMPTS * GROUP_SIZE, dtype=np.float32).reshape(PROMPTS, GROUP_SIZE)
    return {**payload, "advantages": advantages}


def test_inference_scores_only_responses_of_the_version_it_holds(grpo_cache: Path) -> None:
    """Its old log-probabilities are the behaviour policy's only if it holds the weights that sampled."""
    config = tiny_config(grpo_cache)
    rollout, inference = _rollout(config), InferenceWorker()
    inference.setup(config, context("inference"))
    payload = _stamped(  # sampled after one training step
        {**rollout.compute("generate", 0, 0, [])[0], "advantages": np.zeros((4, GROUP_SIZE), np.float32)}, 1
    )
    with pytest.raises(
        AssertionError, match=r"inference holds policy version 0 but scores .* sampled by \[1\]"
    ):
        inference.compute("infer", 0, 0, [payload])
    inference.load_weights(_versioned(rollout, 1))
    width = config.grpo.max_new_tokens
    assert inference.compute("infer", 0, 0, [payload])[0]["old_logprobs"].shape == (4, GROUP_SIZE, width)
    assert inference.checkpoint()["version"] == 1


def _trained(config: object, payload: dict[str, np.ndarray]) -> dict[str, float]:
    """What a fresh actor reports after training one iteration on ``payload``."""
    actor = ActorWorker()
    actor.setup(config, context("actor", micro_batches=1))
    info = actor.compute("train", 0, 0, [payload])[1]
    assert actor.iteration == 2  # one iteration trained
    return info


def test_the_ratio_is_taken_against_the_behaviour_log_probabilities(
    grpo_cache: Path, scored: dict[str, np.ndarray]
) -> None:
    """One real iteration trained on by fresh actors (the warm start, as the sampler): as recorded (ratio 1 at the
    start, behaviour KL 0), and with the behaviour log-probabilities lowered by 0.5 (a sampler that found those
    tokens less likely): the ratio starts at e^0.5, beyond the clip range, for every token. An actor that
    recomputed the old log-probabilities from its own weights would report the same for both."""
    config = tiny_config(grpo_cache)
    recorded = _trained(config, scored)
    shifted = _trained(config, {**scored, "old_logprobs": scored["old_logprobs"] - np.float32(0.5)})
    assert recorded["policy_lag_max"] == shifted["policy_lag_max"] == 0.0
    assert abs(recorded["behaviour_kl"]) < 1e-6
    assert shifted["behaviour_kl"] == pytest.approx(-0.5, abs=1e-5)
    assert recorded["clip_fraction"] < 0.5 < 0.9 < shifted["clip_fraction"]
    assert recorded["policy_loss"] != shifted["policy_loss"]


def test_the_actor_reports_the_lag_of_the_stamp(grpo_cache: Path, scored: dict[str, np.ndarray]) -> None:
    """A payload sampled by version 0 and read at version 2 (two training steps on): lag 2 for every response; the
    stamp is one per payload, so a group, never split between payloads, comes from one version."""
    config = tiny_config(grpo_cache)
    actor = ActorWorker()
    actor.setup(config, context("actor", micro_batches=1))
    info = actor.compute("train", 0, 0, [StampedPayload(scored, Stamp(0, 2))])[1]
    assert info["policy_lag_max"] == info["policy_lag_mean"] == 2.0


def test_inference_keeps_synced_versions_until_a_batch_of_theirs_comes(
    grpo_cache: Path, scored: dict[str, np.ndarray]
) -> None:
    """Behind the buffer the weights of version ``v + 1`` arrive before the batch that version ``v`` sampled: the
    inference scores each batch with its own version (the same log-probabilities as an inference that held only
    that one), then forgets the older ones; a checkpoint carries the versions not yet used."""
    config = tiny_config(grpo_cache)
    rollout = _rollout(config)
    weights = [_versioned(rollout, v) for v in (1, 2)]
    weights[1] = _stamped(
        {**weights[1], "lm_head.weight": weights[1]["lm_head.weight"] * 2.0}, 2
    )  # another policy
    batch = {k: v for k, v in scored.items() if k not in ("old_logprobs", "ref_logprobs")}

    def of(version: int) -> StampedPayload:
        return _stamped(batch, version)

    alone = []
    for w in weights:  # an inference that holds only the version that sampled
        single = InferenceWorker()
        single.setup(config, context("inference"))
        single.load_weights(w)
        alone.append(single.compute("infer", 0, 0, [of(stamp_of(w).policy_version)])[0]["old_logprobs"])
    assert not np.array_equal(alone[0], alone[1])
    both = InferenceWorker()
    both.setup(config, context("inference"))
    for w in weights:
        both.load_weights(w)
    np.testing.assert_array_equal(both.compute("infer", 0, 0, [of(1)])[0]["old_logprobs"], alone[0])
    saved = both.checkpoint()
    assert saved["version"] == 1 and list(saved["synced"]) == [2]
    restored = InferenceWorker()
    restored.setup(config, context("inference"))
    restored.restore(saved)
    for worker in (both, restored):
        np.testing.assert_array_equal(worker.compute("infer", 0, 0, [of(2)])[0]["old_logprobs"], alone[1])
        assert worker.version == 2 and not worker.synced
        with pytest.raises(AssertionError, match=r"holds policy version 2 but scores .* sampled by \[1\]"):
            worker.compute("infer", 0, 0, [of(1)])  # an older version is gone: it never comes back
