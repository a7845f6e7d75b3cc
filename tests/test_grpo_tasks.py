"""The GRPO workload's verifiable tasks (word problems, addition) and the config that chooses one: problems, worked
solutions and the sloppy teacher's, the verifiers, held-out sets and their exclusion from training draws, and
every bad setting refused with a message naming the field."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import numpy as np
import pytest

from rlinf.app.jobs import load_job_config
from rlinf.cli import main
from rlinf.core.errors import ConfigError
from rlinf.workloads.hf_grpo.addition import AdditionProblem, AdditionTask, carry_free_sum, parse_answer
from rlinf.workloads.hf_grpo.config import HfGrpoConfig, ModelSizes, RlConfig
from rlinf.workloads.hf_grpo.rollout import iteration_problems
from rlinf.workloads.hf_grpo.task import heldout_problems, sample_problems, task_config
from rlinf.workloads.hf_grpo.warm_start import warm_start_batches
from rlinf.workloads.hf_grpo.word_problems import WordProblemsTask, extract_answer, reward
from rlinf.workloads.hf_grpo.workload import mean_response_tokens

ROOT = Path(__file__).resolve().parents[1]
ARITH = ROOT / "examples" / "grpo_arith.yaml"
WORDS = ROOT / "examples" / "grpo_hf.yaml"


# ------------------------------------------------------------------------------------------------ word problems
@pytest.mark.parametrize(
    ("response", "expected"),
    [
        (" Mia starts with 3.\n3+4=7.\n#### 7", 7),
        ("#### -2", -2),
        ("####12 then #### 13", 12),
        ("the answer is 7", None),
        ("#### seven", None),
        ("", None),
    ],
)
def test_word_problem_answers_are_extracted_after_the_marker(response: str, expected: int | None) -> None:
    assert extract_answer(response) == expected
    assert reward(7, response) == WordProblemsTask().reward(7, response) == (1.0 if expected == 7 else 0.0)


def test_worked_solutions_are_right_and_lengths_have_a_tail() -> None:
    task = WordProblemsTask(max_steps=8)
    rng = random.Random(0)
    problems = [task.sample(rng) for _ in range(400)]
    assert all(task.reward(p.answer, task.solution(p)) == 1.0 for p in problems)
    assert all(1 <= v <= task.max_value for p in problems for v in p.values)
    steps = np.array([len(p.steps) for p in problems])
    assert steps.min() == 1 and steps.max() == 8 and np.median(steps) <= 2  # most short, a long tail
    sloppy = [task.solution(p, random.Random(i), error_rate=1.0) for i, p in enumerate(problems)]
    assert 0.3 < np.mean([task.reward(p.answer, s) for p, s in zip(problems, sloppy, strict=True)]) < 0.9
    assert 20 < mean_response_tokens(task, 512) < 100


# ----------------------------------------------------------------------------------------------------- addition
def test_the_addition_verifier_reads_reversed_and_plain_answers() -> None:
    reversed_task, plain_task = AdditionTask(), AdditionTask(answer_format="plain")
    problem = AdditionProblem(58, 67)  # 125
    assert reversed_task.solution(problem) == "521" and plain_task.solution(problem) == "125"
    assert reversed_task.reward(125, "521") == 1.0 and reversed_task.reward(125, "125") == 0.0
    assert plain_task.reward(125, "125") == 1.0
    for wrong in (
        "5210",
        "",
        "5+1",
        " 521",
        "0521",
        "٥٢١",
    ):  # 125 * 10, empty, no number, leading zero, Arabic
        assert reversed_task.reward(125, wrong) == 0.0, wrong
    assert parse_answer("0", "reversed") == 0 and parse_answer("00", "plain") is None


def test_the_sloppy_teacher_forgets_carries() -> None:
    assert (carry_free_sum(37, 24), carry_free_sum(95, 8), carry_free_sum(58, 67), carry_free_sum(0, 0)) == (
        51,
        93,
        15,
        0,
    )
    task = AdditionTask()
    assert (
        task.solution(AdditionProblem(58, 67), random.Random(0), error_rate=1.0) == "51"
    )  # 5+6 -> 1, 8+7 -> 5
    carry_free = AdditionProblem(12, 31)
    assert task.solution(carry_free, random.Random(0), error_rate=1.0) == task.solution(carry_free) == "34"
    rng = random.Random(1)
    problems = sample_problems(400, task, random.Random(2))
    right = np.mean([task.reward(p.answer, task.solution(p, rng, error_rate=0.6)) for p in problems])
    assert 0.4 < right < 0.9  # 40% by the careful teacher, and the sloppy one's carry-free sums


def test_additions_are_deterministic_by_seed_and_zero_padded() -> None:
    task = AdditionTask(min_digits=2, max_digits=3)
    first = sample_problems(50, task, random.Random(7))
    assert first == sample_problems(50, task, random.Random(7)) != sample_problems(50, task, random.Random(8))
    assert all(10 <= p.a <= 999 and 10 <= p.b <= 999 for p in first)
    assert {len(str(p.a)) for p in first} == {2, 3} and {len(p.prompt) for p in first} == {8}
    assert AdditionProblem(42, 317, 3).prompt == "042+317=" and AdditionProblem(42, 317).prompt == "42+317="
    unpadded = sample_problems(50, AdditionTask(zero_pad=False), random.Random(7))
    assert {len(p.prompt) for p in unpadded} > {8}
    assert mean_response_tokens(task, 6) == pytest.approx(4.0, abs=0.2)  # 3 or 4 sum digits and EOS


@pytest.mark.parametrize(
    "task", [WordProblemsTask(), AdditionTask(min_digits=2, max_digits=2)], ids=["words", "sums"]
)
def test_heldout_problems_are_fixed_distinct_and_excluded_from_training(task: object) -> None:
    heldout = heldout_problems(200, task, seed=3)  # type: ignore[arg-type]
    prompts = {p.prompt for p in heldout}
    assert heldout == heldout_problems(200, task, seed=3) and len(prompts) == 200  # type: ignore[arg-type]
    drawn = sample_problems(3_000, task, random.Random(0), exclude=prompts)  # type: ignore[arg-type]
    assert not prompts & {p.prompt for p in drawn}


VALIDATION_SHA256 = "6c9ce3acd63d4781df29adb621c14e4fdc563e5f11b2c23fa785581c7705e12f"
"""The example's 200 held-out prompts (``eval.seed`` 12345) before the test set existed, joined by newlines: the
set every setting of docs/grpo_hf.md was tuned on."""


def test_the_validation_set_is_the_former_heldout_set_and_the_test_set_is_new() -> None:
    _, config = load_job_config(WORDS)
    sets = config.heldout_sets()
    joined = "\n".join(p.prompt for p in sets.validation)
    assert hashlib.sha256(joined.encode()).hexdigest() == VALIDATION_SHA256
    assert len({p.prompt for p in sets.test}) == len(sets.test) == config.eval.num_problems
    assert sets.test == config.heldout_sets().test  # fixed by eval.test_seed
    _, reseeded = load_job_config(WORDS, ["eval.test_seed=1"])
    assert reseeded.heldout_sets().validation == sets.validation and reseeded.heldout_sets().test != sets.test


def test_training_validation_and_test_prompts_are_disjoint() -> None:
    """By problem text, over every draw of the example's run: the warm start's batches and GRPO's iterations
    never hold a held-out prompt, and the two held-out sets share none. Excluding only the validation prompts (as
    before the test set) would let training draw test problems: the exclusion is what keeps them apart."""
    _, config = load_job_config(WORDS)
    sets = config.heldout_sets()
    validation, test = {p.prompt for p in sets.validation}, {p.prompt for p in sets.test}
    assert not validation & test and sets.prompts == validation | test

    def training(exclude: frozenset[str]) -> set[str]:
        grpo = (iteration_problems(config, i, exclude) for i in range(1, config.grpo.num_iterations + 1))
        warm = (problems for problems, _ in warm_start_batches(config, exclude))
        return {p.prompt for problems in (*grpo, *warm) for p in problems}

    assert not training(sets.prompts) & sets.prompts
    assert training(frozenset(validation)) & test  # teeth: the test set's problems are drawable


def test_every_problem_of_a_small_task_is_in_exactly_one_of_training_validation_and_test() -> None:
    """One-digit sums have 100 problems: 25 validation, 25 test, and training draws cover the other 50."""
    _, config = load_job_config(
        ARITH, ["task.min_digits=1", "task.max_digits=1", "eval.num_problems=25", "execution.iterations=100"]
    )
    sets = config.heldout_sets()
    validation, test = {p.prompt for p in sets.validation}, {p.prompt for p in sets.test}
    training = {p.prompt for i in range(1, 101) for p in iteration_problems(config, i, sets.prompts)}
    assert len(validation) == len(test) == 25 and len(training) == 50
    assert not validation & test and not training & (validation | test)
    assert len(validation | test | training) == config.task.num_distinct_problems == 100


# --------------------------------------------------------------------------------------------- choosing a task
def test_the_example_configs_choose_their_task() -> None:
    _, sums = load_job_config(ARITH)
    _, words = load_job_config(WORDS)
    assert isinstance(sums.task, AdditionTask) and isinstance(words.task, WordProblemsTask)
    assert sums.model.config.vocab_size == 300 and sums.grpo.max_new_tokens == 6
    assert task_config({"kind": "addition", "max_digits": 4}) == AdditionTask(max_digits=4)
    assert task_config({}) == WordProblemsTask()


@pytest.mark.parametrize(
    ("values", "match"),
    [
        (
            {"task": {"kind": "subtraction"}},
            r"task.kind='subtraction': unknown task.*\['addition', 'word_problems'\]",
        ),
        ({"task": {"kind": "addition", "min_steps": 2}}, r"task.min_steps.*unknown key.*max_digits"),
        ({"task": {"kind": "addition", "max_digits": "3"}}, r"task.max_digits='3'"),
        ({"task": 5}, r"task=5: must be a mapping"),
        ({"task": {"kind": "addition", "min_digits": 3, "max_digits": 2}}, r"task.max_digits=2"),
        ({"task": {"kind": "addition", "answer_format": "roman"}}, r"task.answer_format='roman'"),
        ({"task": {"min_steps": 3, "max_steps": 2}}, r"task.max_steps=2"),
        (
            {"task": {"kind": "addition", "min_digits": 1, "max_digits": 1}, "eval": {"num_problems": 51}},
            r"eval.num_problems=51.*100",
        ),
        (
            {"task": {"kind": "addition", "min_digits": 1, "max_digits": 1}, "eval": {"num_problems": 26}},
            r"eval.num_problems=26: makes two held-out sets .* 100 distinct",
        ),
        ({"eval": {"test_seed": 12345}}, r"eval.test_seed=12345: must differ from eval.seed"),
        ({"eval": {"sets": ["train"]}}, r"eval.sets='train': unknown held-out set.*\['validation', 'test'\]"),
        ({"eval": {"sets": []}}, r"eval.sets=\[\]: must name one or more sets"),
        (
            {"eval": {"sets": ["test", "test"]}},
            r"eval.sets=\['test', 'test'\]: must name one or more sets, each once",
        ),
        ({"seed": -1}, r"seed=-1"),
        ({"grpo": {"group_sise": 8}}, r"grpo.group_sise.*unknown key.*group_size"),
        ({"model": {"config": {"num_heads": 4, "num_kv_heads": 3}}}, r"model.config.num_kv_heads=3"),
        ({"model": {"config": "gpt-5"}}, r"model.config='gpt-5': unknown model preset.*tiny-addition"),
        ({"warm_start": {"teacher_error_rate": 1.5}}, r"warm_start.teacher_error_rate=1.5"),
    ],
)
def test_bad_settings_fail_naming_the_field(values: dict, match: str) -> None:
    from rlinf.api import structure_config

    with pytest.raises(ConfigError, match=match):
        structure_config(HfGrpoConfig, values)


def test_sequences_longer_than_the_models_positions_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by the fuzz suite on the former arithmetic workload: ``grpo.max_new_tokens: 1000000000`` sized its
    position table at 256 GB; the payloads of this one would be as large. Refused before anything is built."""
    with pytest.raises(ConfigError, match="grpo.group_size"):
        RlConfig(group_size=1)
    with pytest.raises(ConfigError, match="model.config.architecture"):
        ModelSizes(architecture="gpt2")
    args = ["train", str(ARITH), "--mode", "collocated", "--iterations", "1", "--out", str(tmp_path / "run")]
    assert main([*args, "--set", "grpo.max_new_tokens=1000000000"]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(
        "rlinf: error: grpo.max_new_tokens=1000000000: with grpo.max_prompt_tokens=8 makes sequences of 1000000008 "
        "tokens, more than the model's 64 positions"
    )
    assert "\n" not in line and not (tmp_path / "run").exists()


def test_default_lengths_too_long_for_the_chosen_model_name_the_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by the fuzz suite: a config that sets no lengths gets the defaults (160 + 160 tokens), which the
    tiny model's 64 positions cannot hold; the error names what the config wrote, ``model.config``."""
    config = tmp_path / "short.yaml"
    config.write_text("workload: grpo_hf\nmodel:\n  config: tiny-addition\ntask:\n  kind: addition\n")
    assert main(["train", str(config), "--mode", "collocated", "--out", str(tmp_path / "run")]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(
        "rlinf: error: model.config='tiny-addition': is too short for the default response"
    )
    assert "grpo.max_new_tokens=160 with grpo.max_prompt_tokens=160 makes sequences of 320 tokens" in line
    assert "\n" not in line and not (tmp_path / "run").exists()


def test_the_retired_arithmetic_workload_name_says_what_replaced_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "old.yaml"
    old.write_text("workload: grpo_arith\nmodel:\n  d_model: 64\n")
    assert main(["train", str(old), "--out", str(tmp_path / "run")]) == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and line.startswith(
        "rlinf: error: workload='grpo_arith': is no longer a built-in workload"
    )
    assert "task: {kind: addition" in line and "examples/grpo_arith.yaml" in line
