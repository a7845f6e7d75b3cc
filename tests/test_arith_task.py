"""Tokenizer, problems, verifier and config loading of the arithmetic workload."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rlinf.core.errors import ConfigError
from rlinf.workloads.arith.config import config_from_mapping, load_config
from rlinf.workloads.arith.task import (
    ArithProblem,
    TaskConfig,
    carry_free_solution_text,
    heldout_problems,
    sample_problems,
    solution_text,
    verify,
)
from rlinf.workloads.arith.tokenizer import ArithTokenizer

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "grpo_arith.yaml"


def test_tokenizer_round_trip():
    tok = ArithTokenizer()
    ids = tok.encode_prompt("042+317=")
    assert ids[0] == tok.bos_id
    assert tok.decode(ids) == "042+317="
    assert tok.decode([*tok.encode("953"), tok.eos_id, *tok.encode("12")]) == "953"


def test_tokenizer_rejects_unknown_characters():
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        ArithTokenizer().encode("1*2")
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        ArithTokenizer().decode([99])


def test_verifier_reads_reversed_and_plain_answers():
    problem = ArithProblem(58, 67)  # 125
    assert solution_text(problem, "reversed") == "521"
    assert verify(problem, "521", "reversed") == 1.0
    assert verify(problem, "125", "reversed") == 0.0
    assert verify(problem, "125", "plain") == 1.0
    assert verify(problem, "5210", "reversed") == 0.0  # 125 * 10
    assert verify(problem, "", "reversed") == 0.0
    assert verify(problem, "5+1", "reversed") == 0.0


def test_sloppy_teacher_forgets_carries():
    assert carry_free_solution_text(ArithProblem(58, 67), "plain") == "15"  # 5+6 -> 1, 8+7 -> 5
    assert carry_free_solution_text(ArithProblem(58, 67), "reversed") == "51"
    assert carry_free_solution_text(ArithProblem(12, 31), "reversed") == solution_text(
        ArithProblem(12, 31), "reversed"
    )


def test_problem_generation_is_deterministic_by_seed():
    config = TaskConfig(min_digits=2, max_digits=3)
    first = sample_problems(50, config, random.Random(7))
    assert first == sample_problems(50, config, random.Random(7))
    assert first != sample_problems(50, config, random.Random(8))
    assert all(10 <= p.a <= 999 and 10 <= p.b <= 999 for p in first)
    assert {len(str(p.a)) for p in first} == {2, 3}


def test_heldout_set_is_fixed_distinct_and_excluded():
    config = TaskConfig()
    heldout = heldout_problems(200, config, seed=3)
    assert heldout == heldout_problems(200, config, seed=3)
    assert len(set(heldout)) == 200
    drawn = sample_problems(
        2000,
        TaskConfig(min_digits=2, max_digits=2),
        random.Random(0),
        exclude=heldout_problems(3000, TaskConfig(min_digits=2, max_digits=2), seed=1),
    )
    assert not set(drawn) & set(heldout_problems(3000, TaskConfig(min_digits=2, max_digits=2), seed=1))


def test_zero_padded_prompt():
    problem = sample_problems(1, TaskConfig(min_digits=2, max_digits=3, zero_pad=True), random.Random(1))[0]
    assert len(problem.prompt) == 8
    assert ArithProblem(42, 317, 3).prompt == "042+317="
    assert ArithProblem(42, 317).prompt == "42+317="


def test_task_config_validates():
    with pytest.raises(ConfigError, match="task.max_digits"):
        TaskConfig(min_digits=3, max_digits=2)
    with pytest.raises(ConfigError, match="answer_format"):
        TaskConfig(answer_format="roman")


def test_example_config_loads():
    config = load_config(EXAMPLE)
    assert config.grpo.group_size >= 2
    assert config.backends.rollout == "torch"


def test_unknown_config_keys_are_errors():
    with pytest.raises(ConfigError, match=r"grpo\.group_sise.*unknown key.*group_size"):
        config_from_mapping({"grpo": {"group_sise": 8}})
    with pytest.raises(ConfigError, match=r"modle.*unknown key"):
        config_from_mapping({"modle": {}})
    with pytest.raises(ConfigError, match="model.num_heads"):
        config_from_mapping({"model": {"d_model": 30, "num_heads": 4}})
    with pytest.raises(ConfigError, match="warm_start.teacher_error_rate"):
        config_from_mapping({"warm_start": {"teacher_error_rate": 1.5}})


def test_config_sections_must_be_mappings():
    with pytest.raises(ConfigError, match=r"model=5: must be a mapping"):
        config_from_mapping({"model": 5})


def test_learning_script_rejects_a_bad_config_with_exit_code_2(tmp_path, capsys):
    from rlinf.workloads.arith.learn import main

    config = tmp_path / "bad.yaml"
    config.write_text("grpo:\n  group_size: 1\n")
    assert main(["--config", str(config), "--out", str(tmp_path / "curve.png")]) == 2
    assert "grpo.group_size=1" in capsys.readouterr().err
    assert not (tmp_path / "curve.png").exists()
