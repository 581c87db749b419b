"""The healing budget curve's runner (studies/healing/budget/curve.py): its `hf-ffn heal` calls parse as the command
takes them and mean what the study says; its extrapolation fits the power law it names."""

import math
from pathlib import Path

import pytest

from hf_ffn.cli import passthrough_parser
from studies.healing.budget import curve


@pytest.mark.parametrize("budget", [0, 262_144])
def test_each_unit_is_a_heal_call_that_parses(budget, tmp_path):
    command = curve.heal_command("pre-ln", budget, 1, tmp_path, Path("text.txt"), "TEACHER", "EVAL")
    heal, layerwise, training = passthrough_parser("heal").parse_args_into_dataclasses(command)
    assert heal.teacher == "TEACHER" and heal.eval_data == "EVAL" and training.seed == 1
    assert training.output_dir == str(tmp_path / "runs" / f"pre-ln-{budget}-s1")
    if budget == 0:  # the variant's layer-wise recipe on the converted student, no end-to-end stage
        assert heal.student == str(tmp_path / "students" / "pre-ln") and heal.method == "layerwise"
        assert training.max_steps == 0 and layerwise.layerwise_parts == "layer" and layerwise.layerwise_steps == 1000
    else:  # one pass over the budget from the seed's layer-wise result
        assert heal.student == str(tmp_path / "runs" / "pre-ln-0-s1" / "healed") and heal.method == "end_to_end"
        assert heal.max_train_tokens == budget and heal.max_train_samples == budget // curve.BLOCK
        assert heal.hidden_loss == "cosine" and training.per_device_train_batch_size == curve.BATCH
        assert training.warmup_steps == budget // (curve.BLOCK * curve.BATCH) // 10


def record(tokens: int, cosine: float, seconds: float = 100.0) -> dict:
    return {
        "budget_tokens": tokens, "seed": 0, "end_to_end_tokens": tokens, "train_seconds": seconds,
        "after": {"agreement": {"cosine_mean": cosine}, "probe": {"difference": 0.0}},
    }  # fmt: skip


def test_the_extrapolation_recovers_a_power_law():
    rows = [record(t, 1 - 0.5 * t**-0.25) for t in (65_536, 262_144, 1_048_576)]  # 1 − cosine = 0.5 t^-1/4
    text = curve.extrapolation(rows)
    tokens = (0.5 / 0.01) ** 4  # where 0.5 t^-1/4 = 0.01
    rate = sum(r["end_to_end_tokens"] for r in rows) / sum(r["train_seconds"] for r in rows)
    assert "tokens^-0.250" in text and f"~{tokens:.2e} tokens" in text and "(3 points)" in text
    assert f"~{tokens / rate / 3600:.2e} h" in text and "no device pays" not in text
    slow = [record(t, 1 - 0.5 * t**-0.01) for t in (65_536, 262_144)]  # 0.99 only past 1e170 tokens
    assert "no device pays that" in curve.extrapolation(slow)
    flat = [record(t, 0.9) for t in (65_536, 262_144)]
    assert "does not fall with tokens" in curve.extrapolation(flat)
    assert "fewer than two" in curve.extrapolation(rows[:1])
    assert math.isclose(curve.points(rows[0])[0], rows[0]["after"]["agreement"]["cosine_mean"])


def test_a_method_probe_changes_only_its_options_and_stays_off_the_curve(tmp_path):
    command = curve.heal_command("swiglu-matched", 262_144, 0, tmp_path, Path("t.txt"), "T", "E", "short0.5")
    heal, _, training = passthrough_parser("heal").parse_args_into_dataclasses(command)
    assert training.output_dir == str(tmp_path / "runs" / "swiglu-matched-262144-s0-short0.5")
    assert heal.short_seq_probability == 0.5 and training.learning_rate == 1e-4 and heal.hidden_loss == "cosine"
    assert heal.max_seq_length == curve.BLOCK  # the held-out snippets measured as in the curve
    assert heal.student == str(tmp_path / "runs" / "swiglu-matched-0-s0" / "healed")  # the curve's start
    default = passthrough_parser("heal").parse_args_into_dataclasses(
        curve.heal_command("swiglu-matched", 262_144, 0, tmp_path, Path("t.txt"), "T", "E")
    )
    assert default[2].learning_rate == 1e-4 and default[0].layers == "last" and default[0].short_seq_probability == 0
    rows = [record(t, 1 - 0.5 * t**-0.25) for t in (65_536, 262_144)]
    probe = dict(record(262_144, 0.999), recipe="lr1e-3")  # a probe far off the curve changes no fit
    assert curve.extrapolation(rows + [probe]) == curve.extrapolation(rows)


def test_the_length_table_measures_agreement_at_real_tokens():
    """studies/healing/budget/lengths.py: a model agrees with itself exactly (cosine 1 per token and pooled), counts
    only real tokens, and a perturbed copy agrees less."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from hf_ffn.parity import bundled_checkpoint
    from studies.healing.budget import lengths

    from .conftest import TINY

    tokenizer = AutoTokenizer.from_pretrained(bundled_checkpoint())
    torch.manual_seed(0)
    config = BertConfig(**{**TINY, "vocab_size": tokenizer.vocab_size, "initializer_range": 0.3})  # layers that matter
    teacher = BertModel(config).eval()
    texts = ["a short one", "a somewhat longer text than the first of them", "mid length text"]
    real = sum(len(tokenizer(t)["input_ids"]) for t in texts) / len(texts)
    mean_tokens, token_cos, pooled_cos = lengths.agreement(teacher, teacher, tokenizer, texts, 128)
    assert math.isclose(mean_tokens, real) and math.isclose(token_cos, 1, abs_tol=1e-6)
    assert math.isclose(pooled_cos, 1, abs_tol=1e-6)
    assert lengths.agreement(teacher, teacher, tokenizer, texts, 4)[0] == 4  # truncated: every text reaches 4
    student = BertModel(config).eval()
    student.load_state_dict(teacher.state_dict())
    with torch.no_grad():
        student.encoder.layer[1].output.dense.weight.mul_(3.0)
    assert lengths.agreement(teacher, student, tokenizer, texts, 128)[1] < 0.999
    cls_cos, other_cos, t_spread, s_spread = lengths.cls_agreement(teacher, teacher, tokenizer, texts)
    assert math.isclose(cls_cos, 1, abs_tol=1e-6) and math.isclose(other_cos, 1, abs_tol=1e-6)
    assert t_spread == s_spread > 0
    first = teacher(**tokenizer(texts, padding=True, return_tensors="pt")).last_hidden_state[:, 0].detach()
    assert math.isclose(t_spread, float(first.std(0).mean() / first.norm(dim=-1).mean()), rel_tol=1e-5)


def test_a_recipe_run_at_several_budgets_gets_its_own_fit():
    """The short-block recipe's points make a curve of their own: fitted apart from the default's, never mixed."""
    default = [record(t, 1 - 0.5 * t**-0.25) for t in (65_536, 262_144)]
    short = [dict(record(t, 1 - 0.5 * t**-0.5), recipe="short0.5") for t in (262_144, 1_048_576, 4_194_304)]
    assert "tokens^-0.250" in curve.extrapolation(default + short)
    assert "tokens^-0.500" in curve.extrapolation(default + short, "short0.5") and "(3 points)" in curve.extrapolation(
        default + short, "short0.5"
    )
    heal, _, _ = passthrough_parser("heal").parse_args_into_dataclasses(
        curve.heal_command("pre-ln", 262_144, 0, Path("w"), Path("t.txt"), "T", "E", "cls-short0.5")
    )
    assert heal.frame_blocks is True and heal.short_seq_probability == 0.5 and heal.layers == "last"


def test_seeds_of_one_unit_are_summarised_with_a_t_interval():
    """Three seeds at one budget: the mean and a 95% t-interval (t(0.975, 2) = 4.303) of cosine and probe Δ; a
    budget run at one seed gets no line."""
    runs = []
    for seed, (cosine, probe) in enumerate([(0.95, -0.004), (0.96, -0.002), (0.97, -0.003)]):
        runs.append(dict(record(4_194_304, cosine), seed=seed, variant="pre-ln", recipe="short0.5"))
        runs[-1]["after"]["probe"]["difference"] = probe
    runs.append(dict(record(262_144, 0.9), variant="pre-ln", recipe="short0.5"))
    (line,) = curve.across_seeds(runs)
    half = 4.302653 * 0.01 / 3**0.5  # cosine: std 0.01 over 3 seeds
    assert line.startswith("- pre-ln, short0.5, 4,194,304 tokens, 3 seeds: ")
    assert f"cosine 0.9600 [{0.96 - half:.4f}, {0.96 + half:.4f}]" in line  # [0.9352, 0.9848]
    assert "probe Δ -0.30 [-0.55, -0.05] points" in line  # std 0.1 points: half 0.248
    assert "seed 0: 0.9500 / -0.40; seed 1: 0.9600 / -0.20; seed 2: 0.9700 / -0.30" in line
