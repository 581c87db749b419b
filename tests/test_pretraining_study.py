"""The from-scratch study's report (`studies.pretraining.report`) on a synthetic runs file: the summary's schema,
the paired intervals with their Bonferroni correction (hand-computed), and the one-command regeneration; issue 42's
pieces: recipe units, the plateau probe and exit, the stop at a step or deadline, a saved unit's record, the
launcher's options."""

import json
import math
import statistics
import time
from argparse import Namespace
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, TrainerControl, TrainerState

from hf_ffn.configuration_ffn_bert import FfnBertConfig
from hf_ffn.mlm.initialisation import seed_by_name
from hf_ffn.modeling_ffn_bert import FfnBertForMaskedLM
from hf_ffn.training.corpus import load_corpus
from studies.pretraining import diagnostics, launch, report
from studies.pretraining import run as run_module
from studies.pretraining.plateau import (
    PlateauProbe,
    StopAt,
    attention_locality,
    held_out_sources,
    plateau_curve,
    plateau_exit_tokens,
    score_sources,
    source_of,
)
from studies.pretraining.run import (
    STUDY,
    continue_earlier,
    finetune_units,
    finished,
    main_records,
    pretrained_checkpoint,
    probe_folder,
    train_unit,
    unit_arguments,
    untrained_checkpoint,
)
from studies.pretraining.settings import (
    DATA_FILES,
    FINETUNE_SEEDS,
    FINETUNE_TASKS,
    GRID_ARM,
    LAUNCH_PARTS,
    best_rates,
    bracketed_rate,
    ffn_units,
    grid_best_rates,
    grid_rate_units,
    grid_unit,
    grid_units,
    pilot_units,
    placement_rate_units,
    placement_seed_units,
    placement_stage_units,
    recipe_units,
    sweep_units,
    untrained_seed,
)

# Student-t quantiles (tables): t_{1 − 0.025/2, 2} = 6.205347 and t_{1 − 0.025/2, 1} = 25.451700 (two comparisons:
# Bonferroni 1 − 0.05/2 intervals); t_{0.975, 2} = 4.302653 (one comparison).
T_2, T_1, T_2_SINGLE, T_1_SINGLE = 6.205347, 25.451700, 4.302653, 12.706205
FLOORS = {"unigram_mask": 6.6, "copy_aware": 6.0, "copy_aware_kept": 0.4}


def record(kind, ffn, seed, loss, placement="pre", lr=2e-3, warmup=300):
    return {
        "name": f"{kind}-{ffn}-{placement}-lr{lr:g}-warmup{warmup}-seed{seed}",
        "kind": kind,
        "ffn_type": ffn,
        "placement": placement,
        "learning_rate": lr,
        "warmup_steps": warmup,
        "seed": seed,
        "mask_loss": loss,
        "below_unigram_floor": 6.6 - loss,
        "floors": FLOORS,
        "tokens_seen": 16_384_000,
        "epochs": 0.25,
        "heldout_tokens": 500_000,
    }


RECORDS = [
    *(record("ffn", "gelu", s, loss) for s, loss in enumerate((5.0, 5.1, 5.2))),
    *(record("ffn", "swiglu", s, loss) for s, loss in enumerate((4.9, 5.1, 5.0))),  # − GELU: −0.1, 0.0, −0.2
    *(record("ffn", "relu", s, loss) for s, loss in enumerate((5.3, 5.1))),
    record("placement", "gelu", 0, 5.5, "post", 1e-3, 1000),
    record("placement", "gelu", 1, 5.7, "post", 1e-3, 1000),
    record("placement", "gelu", 0, 5.9, "post", 5e-4, 1000),
    record("placement", "gelu", 0, 5.2, "pre", 4e-3, 300),
    record("placement", "gelu", 1, 5.0, "pre", 4e-3, 300),
    record("placement", "gelu", 0, 5.3, "pre", 2e-3, 300),
    record("placement", "swiglu", 0, 5.4, "post", 1e-3, 1000),
    record("sweep", "gelu", 0, 5.6, "pre", 1e-3),
    record("sweep", "gelu", 0, 5.4, "pre", 4e-3),
]
FINETUNED = [  # "seed": the fine-tuning seed; the pre-training seed is the checkpoint's
    {"checkpoint": "untrained-seed0", "task": "cola", "seed": 0, "score": 10.0},
    {"checkpoint": "untrained-seed0", "task": "cola", "seed": 1, "score": 12.0},
    {"checkpoint": "untrained-seed1", "task": "cola", "seed": 0, "score": 14.0},
    {"checkpoint": "untrained-seed1", "task": "cola", "seed": 1, "score": 14.0},
    # GELU, pre-training seed 0 (its model trained again for the second run, 0.25 nats off runs.jsonl's 5.0)
    {"checkpoint": RECORDS[0]["name"], "task": "cola", "seed": 0, "score": 20.0, "checkpoint_mask_loss": 5.0},
    {"checkpoint": RECORDS[0]["name"], "task": "cola", "seed": 1, "score": 26.0, "checkpoint_mask_loss": 5.25},
    {"checkpoint": RECORDS[1]["name"], "task": "cola", "seed": 0, "score": 22.0},  # GELU, pre-training seed 1
    {"checkpoint": RECORDS[1]["name"], "task": "cola", "seed": 1, "score": 24.0},
]


def test_summary_schema_and_hand_computed_intervals():
    result = report.summary(RECORDS, FINETUNED, arm=None)  # issue 37's main runs (kind "ffn"), no grid arm
    assert set(result) == {
        "training_tokens_per_main_run",
        "planned_tokens_per_main_run",
        "grid_arm",
        "epochs_per_main_run",
        "heldout_tokens",
        "floors",
        "device",
        "corpus_parts",
        "gate",
        "plateau_exit",
        "ffn_table",
        "ffn_table_second_size",
        "placement_table",
        "finetune",
        "finetune_rate_check",
    }
    assert result["ffn_table_second_size"] == [] and result["finetune_rate_check"] == []  # one size, one rate
    assert result["planned_tokens_per_main_run"] == 4000 * 32 * 128 and result["epochs_per_main_run"] == 0.25
    assert result["floors"] == {"unigram_mask": 6.6, "copy_aware": 6.0}
    gate = result["gate"]  # the best main run: SwiGLU seed 0, 6.6 − 4.9 = 1.7 nats below the floor
    assert (gate["from"], gate["unit"], gate["passed"]) == ("best main run", RECORDS[3]["name"], True)
    assert gate["below_unigram_floor"] == pytest.approx(1.7)
    assert (result["training_tokens_per_main_run"], result["heldout_tokens"]) == (16_384_000, 500_000)
    rows = {row["variant"]: row for row in result["ffn_table"]}
    assert [row["variant"] for row in result["ffn_table"]] == ["gelu", "swiglu", "relu"]
    fields = {"variant", "placement", "learning_rate", "seeds", "mask_loss", "delta_vs_gelu", "interval", "confidence"}
    assert all(set(row) == fields for row in result["ffn_table"])
    assert rows["gelu"]["delta_vs_gelu"] is None and rows["gelu"]["interval"] is None
    assert rows["gelu"]["mask_loss"] == pytest.approx(5.1) and rows["gelu"]["seeds"] == [0, 1, 2]
    # SwiGLU − GELU by seed: −0.1, 0.0, −0.2: mean −0.1, sd 0.1, n 3; two comparisons → Bonferroni 97.5% intervals
    half = T_2 * 0.1 / math.sqrt(3)
    assert rows["swiglu"]["delta_vs_gelu"] == pytest.approx(-0.1)
    assert rows["swiglu"]["interval"] == pytest.approx([-0.1 - half, -0.1 + half], abs=1e-5)
    assert rows["swiglu"]["confidence"] == pytest.approx(0.975) and rows["gelu"]["confidence"] is None
    # ReLU − GELU: 0.3, 0.0: mean 0.15, sd 0.3/√2, n 2
    half = T_1 * (0.3 / math.sqrt(2)) / math.sqrt(2)
    assert rows["relu"]["interval"] == pytest.approx([0.15 - half, 0.15 + half], abs=1e-5)
    # Post-LN vs Pre-LN for one FFN (issue 42: it compared SwiGLU with GELU): GELU's best Pre-LN cell (lr 4e-3,
    # seeds 0, 1: 5.2, 5.0) against its best Post-LN cell (lr 1e-3: 5.5, 5.7; lr 5e-4 is worse): −0.3, −0.7
    gelu_pre, gelu_post = result["placement_table"][0]["pre"], result["placement_table"][0]["post"]
    assert [row["variant"] for row in result["placement_table"]] == ["gelu", "swiglu"]
    assert gelu_pre == {"learning_rate": 4e-3, "warmup_steps": 300, "seeds": [0, 1], "mask_loss": pytest.approx(5.1)}
    assert (gelu_post["learning_rate"], gelu_post["warmup_steps"], gelu_post["mask_loss"]) == (1e-3, 1000, 5.6)
    gelu = result["placement_table"][0]
    half = T_1_SINGLE * (0.4 / math.sqrt(2)) / math.sqrt(2)  # differences −0.3, −0.7: sd 0.4/√2; one comparison
    assert gelu["delta_pre_minus_post"] == pytest.approx(-0.5)
    assert gelu["interval"] == pytest.approx([-0.5 - half, -0.5 + half], abs=1e-5) and gelu["confidence"] == 0.95
    swiglu = result["placement_table"][1]  # Post-LN only: nothing to pair
    assert swiglu["pre"] is None and swiglu["delta_pre_minus_post"] is None and swiglu["interval"] is None
    # fine-tuning, paired by pre-training seed (each side's fine-tuning seeds averaged): GELU seed 0 23 − its control
    # 11 = 12, seed 1 23 − 14 = 9; mean 10.5, sd 3/√2; one comparison → 10.5 ± t_{0.975,1}·(3/√2)/√2 = ± 19.0593
    finetune = {row["checkpoint"]: row for row in result["finetune"]}
    assert set(result["finetune"][0]) == {
        "checkpoint",
        "task",
        "pretraining_seeds",
        "score",
        "delta_vs_untrained",
        "interval",
        "confidence",
        "checkpoint_gap",
    }
    assert finetune["gelu"]["checkpoint_gap"] == 0.25 and finetune["untrained"]["checkpoint_gap"] is None
    assert finetune["gelu"]["score"] == pytest.approx(23.0) and finetune["gelu"]["delta_vs_untrained"] == 10.5
    assert finetune["gelu"]["interval"] == pytest.approx([10.5 - 19.059308, 10.5 + 19.059308], abs=1e-5)
    assert finetune["gelu"]["pretraining_seeds"] == finetune["untrained"]["pretraining_seeds"] == [0, 1]
    assert finetune["untrained"]["score"] == 12.5 and finetune["untrained"]["delta_vs_untrained"] is None
    # a fine-tuned GELU checkpoint outside the FFN table (Post-LN, kind "placement") is not pooled into GELU's row
    post = next(r for r in RECORDS if r["kind"] == "placement" and r["placement"] == "post")
    stray = {"checkpoint": post["name"], "task": "cola", "seed": 0, "score": 90.0}
    assert report.summary(RECORDS, [*FINETUNED, stray], arm=None)["finetune"] == result["finetune"]


def test_finetune_rate_check_beside_the_studys_rate_hand_computed():
    """finetune_rates.jsonl's runs (`run.py --stage finetune --learning_rate R`) against the study's rate: GELU seed 0
    at 1e-3 scores 30, 34 (mean 32) against its control's 20 (seed 1 only) → +12; at the study's 1e-4 (FINETUNED)
    23 − 11 = +12 beside it; the control's rows have no delta; a rate the control lacks has none either."""
    gelu = RECORDS[0]["name"]
    at_rates = [
        {"checkpoint": gelu, "task": "cola", "seed": 0, "score": 30.0, "learning_rate": 1e-3},
        {"checkpoint": gelu, "task": "cola", "seed": 1, "score": 34.0, "learning_rate": 1e-3},
        {"checkpoint": gelu, "task": "cola", "seed": 0, "score": 5.0, "learning_rate": 3e-3},
        {"checkpoint": "untrained-seed0", "task": "cola", "seed": 1, "score": 20.0, "learning_rate": 1e-3},
    ]
    rows = report.summary(RECORDS, FINETUNED, arm=None, finetuned_at_rates=at_rates)["finetune_rate_check"]
    assert [(row["checkpoint"], row["task"]) for row in rows] == [(gelu, "cola"), ("untrained-seed0", "cola")]
    assert rows[0]["rates"] == [
        {"learning_rate": 1e-4, "seeds": [0, 1], "score": 23.0, "delta_vs_untrained": 12.0},
        {"learning_rate": 1e-3, "seeds": [0, 1], "score": 32.0, "delta_vs_untrained": 12.0},
        {"learning_rate": 3e-3, "seeds": [0], "score": 5.0, "delta_vs_untrained": None},
    ]
    assert [cell["delta_vs_untrained"] for cell in rows[1]["rates"]] == [None, None]
    assert [cell["score"] for cell in rows[1]["rates"]] == [11.0, 20.0]
    text = report.report_markdown(
        report.summary(RECORDS, FINETUNED, arm=None, finetuned_at_rates=at_rates), RECORDS, []
    )
    assert f"| {gelu} | cola | 0.001 | 0,1 | 32.00 | +12.00 |" in text


def test_summary_before_the_grid_reports_the_gate_from_the_last_full_pilot():
    slice_pilot = record("pilot-slice", "gelu", 0, 5.0) | {"tokens_seen": 4_096_000}
    failed = record("pilot", "gelu", 0, 6.45) | {"floors": {"unigram_mask": 6.616, "copy_aware": 6.045}}
    failed["below_unigram_floor"] = 6.616 - 6.45
    result = report.summary([], [], [slice_pilot, failed], arm=None)  # issue 37's plan: no grid arm
    assert result["gate"] == {
        "from": "last pilot",
        "unit": failed["name"],
        "tokens_seen": 16_384_000,
        "mask_loss": 6.45,
        "unigram_mask": 6.616,
        "below_unigram_floor": pytest.approx(0.166),
        "required": 1.0,
        "passed": False,
    }
    assert result["floors"] == {"unigram_mask": 6.616, "copy_aware": 6.045}  # the pilot's: no main run yet
    # issue 42: no main run yet, so no main run's tokens (it was the last pilot's count); the plan is settings.py's
    assert (result["training_tokens_per_main_run"], result["heldout_tokens"]) == (None, 500_000)
    assert result["planned_tokens_per_main_run"] == 16_384_000 and result["epochs_per_main_run"] is None
    # with a grid arm the main runs are recipe units stopped at RECIPE_STOP (5,000 steps of 4,096 tokens)
    assert report.summary([], [], [failed], arm="32, then 128")["planned_tokens_per_main_run"] == 20_480_000
    # records before issue 42 name no device or parts: the study's units ran on the CPU over every part
    assert result["device"] == [] and result["corpus_parts"] == [list(DATA_FILES)]
    on_gpu = record("recipe", "gelu", 0, 5.0) | {"device": "NVIDIA H200", "corpus_parts": ["wiki-00.txt.xz"]}
    both = report.summary([on_gpu], [], [failed | {"threads": 2}])
    assert both["device"] == ["NVIDIA H200", "cpu (2 threads)"]
    assert both["corpus_parts"] == [["wiki-00.txt.xz"], list(DATA_FILES)]
    assert result["ffn_table"] == result["placement_table"] == result["finetune"] == []
    passed = failed | {"mask_loss": 5.5, "below_unigram_floor": 1.116}
    assert report.summary([], [], [failed, passed])["gate"]["passed"] is True  # the last full pilot counts
    # issue 42, before any main run: the best unit of the grid's arm (said "passed: false" from the pilot while the
    # recipe units were 1.4-2.2 nats below); units of another arm do not count
    arm = "32, then 128"
    units = [u for u in recipe_units() if u.seed == 0]
    of_arm = [
        record("recipe", u.ffn_type, 0, loss) | u.settings() | {"name": u.name}
        for u, loss in zip(units, (4.0, 5.0, 5.2, 5.3, 4.1, 3.0), strict=True)
    ]
    gate = report.summary(of_arm, [], [failed], arm=arm)["gate"]
    cooldown = "constant, then cool-down"
    assert [u.arm for u in units] == ["blocks of 32", arm, "blocks of 32", arm, cooldown, cooldown]
    assert gate["from"] == f"best unit of the grid's arm ({arm}); no main run yet" and gate["unit"] == units[1].name
    assert gate["below_unigram_floor"] == pytest.approx(6.6 - 5.0) and gate["passed"] is True


def test_bonferroni_uses_the_comparisons_that_have_intervals():
    (interval,) = report.bonferroni_intervals([[1.0, 2.0, 3.0]])
    assert interval == pytest.approx([2 - T_2_SINGLE / math.sqrt(3), 2 + T_2_SINGLE / math.sqrt(3)], abs=1e-5)
    two = report.bonferroni_intervals([[1.0, 2.0, 3.0], [5.0], []])
    assert two[0] == pytest.approx(interval) and two[1:] == [None, None]  # one comparison with ≥ 2 pairs: m = 1


def test_report_regenerates_from_the_runs_file_with_one_command(tmp_path):
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    (tmp_path / "finetune.jsonl").write_text("".join(json.dumps(r) + "\n" for r in FINETUNED))
    report.main(["--records_dir", str(tmp_path)])
    first = (tmp_path / "summary.json").read_text(), (tmp_path / "report.md").read_text()
    report.main(["--records_dir", str(tmp_path)])
    assert ((tmp_path / "summary.json").read_text(), (tmp_path / "report.md").read_text()) == first
    assert json.loads(first[0]) == json.loads(json.dumps(report.summary(RECORDS, FINETUNED)))
    assert "| swiglu | pre | 0.002 | 0,1,2 | 5.000 | -0.100 |" in first[1]
    assert "| gelu | 0.004, 300, 5.100 | 0.001, 1000, 5.600 | -0.500 |" in first[1]


def test_the_ffn_table_runs_each_variant_at_its_best_swept_rate():
    assert best_rates(RECORDS) == {("gelu", "pre"): 4e-3}
    # a diverged sweep run (NaN loss) never wins, even when it comes first (it once stayed best: x < NaN is False)
    diverged = [record("sweep", "gelu", 0, float("nan"), "pre", 8e-3), *RECORDS]
    assert best_rates(diverged) == {("gelu", "pre"): 4e-3}
    units = ffn_units(RECORDS)
    assert [(u.ffn_type, u.learning_rate, u.seed) for u in units][:2] == [("gelu", 4e-3, 0), ("gelu", 4e-3, 1)]
    assert len(sweep_units()) == 18 and len({u.name for u in sweep_units()}) == 18


# ---------------------------------------------------------------------------------------------------------------
# Issue 42: the recipe units, the plateau exit, the stop at a step or deadline, a saved unit's record, the launcher
# ---------------------------------------------------------------------------------------------------------------
def test_unit_names_keep_the_recorded_ones_and_name_the_recipe_shape():
    assert pilot_units(10000)[0].name == "pilot-gelu-pre-lr0.004-warmup300-steps10000-seed0"  # pilots.jsonl's
    units = recipe_units()
    assert len(units) == 18 and len({u.name for u in units}) == 18
    assert [(u.arm, u.ffn_type, u.seed) for u in units[:4]] == [
        ("blocks of 32", "gelu", 0),
        ("32, then 128", "gelu", 0),
        ("blocks of 32", "swiglu", 0),
        ("32, then 128", "swiglu", 0),
    ]
    first, warmup, cooldown = units[0], units[1], units[12]
    assert first.name == "recipe-gelu-pre-lr0.004-warmup300-block32x128-steps16000-stop5000-seed0"
    assert warmup.name == "recipe-gelu-pre-lr0.004-warmup300-block32x128to128x32at2500-steps16000-stop5000-seed0"
    assert cooldown.name == "recipe-gelu-pre-lr0.004-warmup300-constant-cooldown1000-block32x128-steps5000-seed0"
    assert cooldown.arm == "constant, then cool-down"
    for unit in (first, warmup, cooldown):  # 20.5M tokens each, 4,096 a step
        assert (unit.stop_step or unit.max_steps) * unit.max_seq_length * unit.batch_size == 20_480_000
    # the warm-up's first 2,500 steps are the recorded blocks-of-32 unit (runs.jsonl), whose checkpoint it continues
    recorded = {json.loads(line)["name"] for line in (STUDY / "runs.jsonl").read_text().splitlines()}
    assert warmup.first_phase().name == replace(first, stop_step=2500).name in recorded
    assert warmup.first_phase().settings()["arm"] == "blocks of 32"
    with pytest.raises(ValueError, match=r"short_block 48: must divide the 4096 tokens of a step"):
        replace(warmup, short_block=48)
    with pytest.raises(ValueError, match=r"no sequence-length warm-up"):
        first.first_phase()


def test_a_unit_continues_the_checkpoint_of_its_earlier_steps(tmp_path):
    """`continue_earlier` copies the checkpoint a unit's first steps ended at into its folder (no training here:
    each earlier folder holds the checkpoint already)."""
    first, warmup = recipe_units()[:2]
    runs = tmp_path / "runs"
    for stop in (1000, 2500, 6000):  # 6,000 is past the unit's 5,000: not a start for it
        (runs / replace(first, stop_step=stop).name / f"checkpoint-{stop}").mkdir(parents=True)
        (runs / replace(first, stop_step=stop).name / f"checkpoint-{stop}" / "trainer_state.json").write_text(str(stop))
    (runs / replace(first, stop_step=3000).name).mkdir()  # a folder without its stop's checkpoint
    arguments = (tmp_path / "no-corpus", tmp_path, tmp_path / "no-records")
    assert continue_earlier(first, *arguments) == replace(first, stop_step=2500).name
    assert (runs / first.name / "checkpoint-2500" / "trainer_state.json").read_text() == "2500"
    assert continue_earlier(first, *arguments) is None  # it has a checkpoint now: a plain resume
    assert continue_earlier(warmup, *arguments) == warmup.first_phase().name
    assert (runs / warmup.name / "checkpoint-2500" / "trainer_state.json").read_text() == "2500"
    assert continue_earlier(recipe_units()[12], *arguments) is None  # the cool-down arm starts from scratch
    # a warm-up unit run longer (the placement stage: step 10,000) continues the same unit's step-5,000 checkpoint,
    # not its first phase
    longer = replace(warmup, stop_step=10_000)
    (runs / warmup.name / "checkpoint-5000").mkdir()
    (runs / warmup.name / "checkpoint-5000" / "trainer_state.json").write_text("5000")
    assert continue_earlier(longer, *arguments) == warmup.name
    assert (runs / longer.name / "checkpoint-5000" / "trainer_state.json").read_text() == "5000"


def test_a_rate_is_chosen_only_inside_the_rates_tried():
    """`bracketed_rate`: a winner at the lowest (highest) rate tried adds half (twice) it; the rate is chosen once
    every unit has reported and the winner lies inside."""
    units = {rate: replace(recipe_units()[1], learning_rate=rate) for rate in (1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2)}

    def choose(losses):
        records = [{"name": units[rate].name, "mask_loss": loss} for rate, loss in losses.items()]
        tried, rate = bracketed_rate((2e-3, 4e-3, 8e-3), units.__getitem__, records)
        return [u.learning_rate for u in tried], rate

    assert choose({2e-3: 5.0, 4e-3: 5.1}) == ([2e-3, 4e-3, 8e-3], None)  # 8e-3 has not reported
    assert choose({2e-3: 5.2, 4e-3: 5.1, 8e-3: 5.3}) == ([2e-3, 4e-3, 8e-3], 4e-3)
    assert choose({2e-3: 5.0, 4e-3: 5.1, 8e-3: 5.3}) == ([1e-3, 2e-3, 4e-3, 8e-3], None)  # the lowest won: try 1e-3
    assert choose({1e-3: 5.05, 2e-3: 5.0, 4e-3: 5.1, 8e-3: 5.3}) == ([1e-3, 2e-3, 4e-3, 8e-3], 2e-3)
    assert choose({2e-3: 5.3, 4e-3: 5.1, 8e-3: 5.0}) == ([2e-3, 4e-3, 8e-3, 1.6e-2], None)  # the highest: 1.6e-2


def test_the_grid_reuses_the_recipe_units_and_runs_each_cell_at_its_rate_chosen_at_full_length(monkeypatch):
    arm = "32, then 128"
    rate_units = grid_rate_units(arm)
    assert len(rate_units) == 3 * 3 and all(u.seed == 0 and u.arm == arm for u in rate_units)  # Pre-LN cells
    assert [u.learning_rate for u in rate_units[:3]] == [2e-3, 4e-3, 8e-3]  # GELU Pre-LN
    recipe_names = {u.name for u in recipe_units()}
    reused = [u.name for u in rate_units if u.name in recipe_names]  # GELU and SwiGLU at 4e-3: the recipe's own
    assert reused == [recipe_units()[1].name, recipe_units()[3].name]
    # Post-LN's 20.5M-token rate units, recorded as grid cells before its rate moved to the placement stage
    post = [grid_unit(arm, "gelu", "post", rate, 0) for rate in (5e-4, 1e-3, 2e-3)]
    assert post[0].name == "recipe-gelu-post-lr0.0005-warmup1000-block32x128to128x32at2500-steps16000-stop5000-seed0"
    # GELU Pre-LN's lowest rate wins (so 1e-3 is tried next), SwiGLU's 4e-3 inside its rates; GeGLU has one rate unit
    # missing; a NaN loss (a diverged run) never wins
    losses = {(u.ffn_type, u.learning_rate): 5.0 for u in rate_units}
    losses |= {("gelu", 2e-3): 4.9, ("swiglu", 2e-3): math.nan, ("swiglu", 4e-3): 4.8}
    records = [{"name": u.name, "mask_loss": losses[(u.ffn_type, u.learning_rate)]} for u in rate_units]
    records = [r for r in records if "geglu" not in r["name"] or "lr0.008" not in r["name"]]
    records += [{"name": u.name, "mask_loss": 6.4} for u in post]
    assert grid_best_rates(arm, records) == {("swiglu", "pre"): 4e-3}
    gelu_1e3 = grid_unit(arm, "gelu", "pre", 1e-3, 0)
    assert grid_rate_units(arm, records) == [gelu_1e3, *rate_units]
    records.append({"name": gelu_1e3.name, "mask_loss": 4.95})
    assert grid_best_rates(arm, records) == {("gelu", "pre"): 2e-3, ("swiglu", "pre"): 4e-3}
    main = grid_units(arm, records)  # the Pre-LN cells: Post-LN's seeds run in the placement stage, longer
    assert [(u.ffn_type, u.placement, u.seed) for u in main[:4]] == [
        ("gelu", "pre", 0),
        ("swiglu", "pre", 0),
        ("gelu", "pre", 1),
        ("swiglu", "pre", 1),
    ]
    assert len(main) == 5 + 5 and {u.learning_rate for u in main if u.ffn_type == "swiglu"} == {4e-3}
    # the placement stage: Post-LN's rate units continued to step 10,000 (41.0M tokens), then 3 seeds of each
    # placement there once Post-LN's rate is chosen at that length (not the 20.5M-token choice)
    long_rates, chosen = placement_rate_units(arm, records)
    assert chosen is None and [(u.placement, u.learning_rate, u.warmup_steps) for u in long_rates] == [
        ("post", 5e-4, 1000),
        ("post", 1e-3, 1000),
        ("post", 2e-3, 1000),
    ]
    assert {u.stop_step * u.max_seq_length * u.batch_size for u in long_rates} == {40_960_000}
    assert [replace(u, stop_step=5000) for u in long_rates] == post  # the same units, run longer
    assert placement_stage_units(arm, records) == long_rates and placement_seed_units(arm, records) == []
    records += [{"name": u.name, "mask_loss": loss} for u, loss in zip(long_rates, (5.6, 5.5, 5.7), strict=True)]
    seeds = placement_seed_units(arm, records)
    assert [(u.placement, u.learning_rate, u.seed, u.stop_step) for u in seeds] == [
        (place, rate, seed, 10_000) for seed in (0, 1, 2) for place, rate in (("post", 1e-3), ("pre", 2e-3))
    ]
    assert placement_stage_units(arm, records) == long_rates + seeds[1:]  # Post-LN seed 0 is the winning rate unit
    with pytest.raises(ValueError, match=r"arm 'blocks of 64' is not one of 'blocks of 32', '32, then 128'"):
        grid_unit("blocks of 64", "gelu", "pre", 4e-3, 0)
    monkeypatch.setattr(launch, "GRID_ARM", None)
    with pytest.raises(ValueError, match=r"--stage rates: the grid's arm is not chosen yet \(settings.GRID_ARM"):
        launch.units(stage="rates")
    monkeypatch.setattr(launch, "GRID_ARM", arm)
    assert launch.units(stage="rates") == rate_units and launch.units(stage="grid", records=records) == main
    assert launch.units(stage="rates", records=records) == [gelu_1e3, *rate_units]
    assert launch.units(stage="placement", records=records) == long_rates + seeds[1:]


def test_the_grids_main_cells_fill_the_ffn_and_placement_tables():
    """`report.grid_cells`: each cell at its rate chosen at full length (seed 0 of its rate units), its seeds paired
    with GELU's (FFN table) and GELU Pre-LN with Post-LN (placement table), by hand: SwiGLU − GELU over seeds 0-4
    is −0.1, −0.2, 0, −0.1, −0.1 (mean −0.1, standard deviation √(0.02/4)); Pre − Post over seeds 0-2 is −0.3,
    −0.25, −0.4."""
    arm = "32, then 128"
    rows = []
    for unit in grid_rate_units(arm):
        chosen = unit.learning_rate == {"pre": 4e-3, "post": 1e-3}[unit.placement]
        loss = {"gelu": 5.0, "swiglu": 4.9, "geglu": 5.05}[unit.ffn_type] + (0.3 if unit.placement == "post" else 0)
        rows.append((unit, loss if chosen else loss + 0.2))
    for seed, swiglu in zip((1, 2, 3, 4), (4.8, 5.0, 4.9, 4.9), strict=True):
        rows += [
            (grid_unit(arm, "gelu", "pre", 4e-3, seed), 5.0),
            (grid_unit(arm, "swiglu", "pre", 4e-3, seed), swiglu),
        ]
    # the placement table: at step 10,000, Post-LN's rate units (1e-3 wins), its seeds 1-2 there and GELU Pre-LN's
    # seeds 0-2 at its grid rate; the 20.5M-token Post-LN units above are not in it
    post_losses = {5e-4: 5.5, 1e-3: 5.2, 2e-3: 5.3}
    rows += [(u, post_losses[u.learning_rate]) for u in placement_rate_units(arm)[0]]
    long = [
        replace(grid_unit(arm, "gelu", place, rate, seed), stop_step=10_000)
        for place, rate in (("post", 1e-3), ("pre", 4e-3))
        for seed in (0, 1, 2)
    ]
    rows += [(u, loss) for u, loss in zip(long[1:], (5.25, 5.35, 4.9, 5.0, 4.95), strict=True)]
    records = [
        record("recipe", u.ffn_type, u.seed, loss, u.placement, u.learning_rate, u.warmup_steps)
        | u.settings()
        | {"name": u.name}
        for u, loss in rows
    ]
    result = report.summary(records, [], arm=arm)
    assert result["grid_arm"] == arm and result["planned_tokens_per_main_run"] == 20_480_000
    table = {row["variant"]: row for row in result["ffn_table"]}
    assert [table[f]["seeds"] for f in ("gelu", "swiglu", "geglu")] == [[0, 1, 2, 3, 4]] * 2 + [[0]]
    assert table["swiglu"]["delta_vs_gelu"] == pytest.approx(-0.1) and table["geglu"]["interval"] is None
    half = (
        2.776445 * math.sqrt(0.02 / 4) / math.sqrt(5)
    )  # t_{0.975, 4}: one comparison with an interval (GeGLU: 1 seed)
    assert table["swiglu"]["interval"] == pytest.approx([-0.1 - half, -0.1 + half])
    [placement] = result["placement_table"]
    assert (placement["pre"]["seeds"], placement["post"]["seeds"]) == ([0, 1, 2], [0, 1, 2])
    assert (placement["pre"]["learning_rate"], placement["post"]["learning_rate"]) == (4e-3, 1e-3)
    assert placement["post"]["warmup_steps"] == 1000
    assert placement["delta_pre_minus_post"] == pytest.approx((-0.3 - 0.25 - 0.4) / 3)
    half = 4.302653 * statistics.stdev([-0.3, -0.25, -0.4]) / math.sqrt(3)  # t_{0.975, 2}: one comparison
    assert placement["interval"] == pytest.approx([(-0.95 / 3) - half, (-0.95 / 3) + half])
    assert report.summary(records, [], arm=None)["ffn_table"] == []  # no grid before its arm is chosen


def test_the_second_size_runs_gelu_and_swiglu_at_4x256_each_at_its_own_rate_and_fills_its_own_table(tmp_path):
    """Item 5: the grid's arm at 4 × 256 (Turc et al. 2019: 4 heads, FFN 1,024), GELU and SwiGLU Pre-LN, rates
    bracketed from 5e-4, 1e-3, 2e-3, then 3 seeds each; its records fill `ffn_table_second_size` and leave the first
    size's tables as they were. By hand: SwiGLU − GELU over seeds 0-2 is −0.1, −0.3, −0.2 (mean −0.2, sd 0.1)."""
    arm = "32, then 128"
    first = grid_units(arm, [])  # nothing recorded: no rate chosen at either size
    rate_units = grid_rate_units(arm, [], 256)
    assert first == [] and [(u.ffn_type, u.learning_rate, u.seed) for u in rate_units] == [
        (ffn, rate, 0) for ffn in ("gelu", "swiglu") for rate in (5e-4, 1e-3, 2e-3)
    ]
    assert rate_units[1].name == (
        "recipe-gelu-pre-hidden256-lr0.001-warmup300-block32x128to128x32at2500-steps16000-stop5000-seed0"
    )
    # the first size's names are those of its records (no size in them)
    assert grid_unit(arm, "gelu", "pre", 1e-3, 0).name == rate_units[1].name.replace("-hidden256", "")
    assert rate_units[1].first_phase().hidden_size == 256  # its blocks-of-32 phase is the same model
    args = unit_arguments(rate_units[1], tmp_path, tmp_path, STUDY)[0]
    assert (args.hidden_size, args.num_hidden_layers, args.num_attention_heads, args.intermediate_size) == (
        256,
        4,
        4,
        1024,
    )
    args = unit_arguments(grid_unit(arm, "gelu", "pre", 1e-3, 0), tmp_path, tmp_path, STUDY)[0]
    assert (args.hidden_size, args.num_attention_heads, args.intermediate_size) == (128, 2, 512)
    with pytest.raises(ValueError, match=r"hidden_size 512: the study's sizes are 128, 256"):
        replace(rate_units[0], hidden_size=512)
    # GELU's 1e-3 and SwiGLU's 2e-3 win (SwiGLU's at the edge: 4e-3 is tried next, and loses)
    losses = {(u.ffn_type, u.learning_rate): 5.0 for u in rate_units} | {("gelu", 1e-3): 4.5, ("swiglu", 2e-3): 4.4}
    rows = [(u, losses[(u.ffn_type, u.learning_rate)]) for u in rate_units]
    assert (
        grid_rate_units(arm, [{"name": u.name, "mask_loss": loss} for u, loss in rows], 256)[-1].learning_rate == 4e-3
    )
    rows.append((grid_unit(arm, "swiglu", "pre", 4e-3, 0, 256), 4.6))
    records = [{"name": u.name, "mask_loss": loss} for u, loss in rows]
    assert grid_best_rates(arm, records, 256) == {("gelu", "pre"): 1e-3, ("swiglu", "pre"): 2e-3}
    assert grid_best_rates(arm, records) == {}  # the first size's rates are its own units'
    seeds = grid_units(arm, records, 256)
    assert [(u.ffn_type, u.learning_rate, u.seed, u.hidden_size) for u in seeds] == [
        (ffn, rate, seed, 256) for seed in (0, 1, 2) for ffn, rate in (("gelu", 1e-3), ("swiglu", 2e-3))
    ]
    rows += [(u, 4.5 if u.ffn_type == "gelu" else 4.4 - 0.2 * (u.seed == 1)) for u in seeds if u.seed > 0]
    records = [
        record("recipe", u.ffn_type, u.seed, loss, u.placement, u.learning_rate, u.warmup_steps)
        | u.settings()
        | {"name": u.name}
        for u, loss in rows
    ]
    records[-1]["mask_loss"] = 4.3  # SwiGLU seed 2: −0.2 against GELU's 4.5
    result = report.summary(records, [], arm=arm)
    assert result["ffn_table"] == [] and result["placement_table"] == []
    gelu, swiglu = result["ffn_table_second_size"]
    assert (gelu["variant"], gelu["learning_rate"], gelu["seeds"]) == ("gelu", 1e-3, [0, 1, 2])
    assert (swiglu["variant"], swiglu["learning_rate"]) == ("swiglu", 2e-3)
    assert swiglu["delta_vs_gelu"] == pytest.approx(-0.2)
    half = 4.302653 * 0.1 / math.sqrt(3)  # t_{0.975, 2}: one comparison
    assert swiglu["interval"] == pytest.approx([-0.2 - half, -0.2 + half])
    # the plateau rows keep the sizes apart: GELU seed 0 at 1e-3 of each size, the 4 × 128 one exiting sooner
    probed = {id(r) for r in records if r["seed"] == 0 and r["ffn_type"] == "gelu" and r["learning_rate"] == 1e-3}
    small = grid_unit(arm, "gelu", "pre", 1e-3, 0)
    records.append(record("recipe", "gelu", 0, 4.3, "pre", 1e-3) | small.settings() | {"name": small.name})
    probed.add(id(records[-1]))
    for r in records:
        exit_at = 5_242_880 if r.get("hidden_size") == 128 else 8_388_608
        curve = [
            {"tokens": 0, "neighbour_weight_vs_uniform": 1.0},
            {"tokens": exit_at, "neighbour_weight_vs_uniform": 5.0},
        ]
        r |= {"plateau_curve": curve, "plateau_exit_tokens": exit_at} if id(r) in probed else {}
    rows = report.summary(records, [], arm=arm)["plateau_exit"]
    assert [(row["variant"], row["seeds"], row["tokens_to_exit"]) for row in rows] == [
        ("gelu", [0], [8_388_608]),
        ("gelu", [0], [5_242_880]),
    ]
    assert rows[0]["recipe"].startswith("recipe: 4 × 256 model, blocks 32x128, then 128x32 from step 2500")
    assert rows[1]["recipe"].startswith("recipe: blocks 32x128, then 128x32 from step 2500")  # the first size's
    with pytest.raises(ValueError, match=r"--hidden_size 512: not one of the study's sizes \(128, 256\)"):
        launch.units(stage="rates", hidden_size=512)
    with pytest.raises(ValueError, match=r"--hidden_size 256 with --stage placement: the second size runs"):
        launch.units(stage="placement", hidden_size=256)
    assert launch.units(stage="rates", records=records, hidden_size=256) == grid_rate_units(GRID_ARM, records, 256)


def test_fine_tuning_starts_from_the_grids_pre_ln_cells_at_their_chosen_rates_and_the_untrained_control():
    """`run.finetune_units` on the grid (issue 42, item 4): seeds 0-4 of each Pre-LN cell whose rate is chosen, at
    that rate (not the rate units it lost to), seed-major with each seed's control first, no control for a seed
    without a checkpoint (4 here); Post-LN and the recipe's other units are not fine-tuned."""
    arm = "32, then 128"
    rows = [(u, 5.0 if u.learning_rate == 4e-3 else 5.2) for u in grid_rate_units(arm)]
    rows += [(grid_unit(arm, ffn, "pre", 4e-3, seed), 5.0) for ffn in ("gelu", "swiglu") for seed in (1, 2, 3)]
    rows += [(recipe_units()[0], 5.1)]  # blocks of 32: not a grid cell
    records = [record("recipe", u.ffn_type, u.seed, loss) | u.settings() | {"name": u.name} for u, loss in rows]
    units = finetune_units(main_records(records))
    checkpoints = list(dict.fromkeys(name for name, _, _ in units))
    expected = [
        grid_unit(arm, ffn, "pre", 4e-3, seed).name for ffn in ("gelu", "swiglu", "geglu") for seed in (0, 1, 2, 3)
    ]
    for seed in (1, 2, 3):
        expected.remove(grid_unit(arm, "geglu", "pre", 4e-3, seed).name)
    controls = ["untrained-seed0", "untrained-seed1", "untrained-seed2", "untrained-seed3"]  # a control per seed
    assert sorted(checkpoints) == sorted(expected + controls)
    seeds = [untrained_seed(name) if name in controls else int(name[-1]) for name in checkpoints]
    assert seeds == sorted(seeds)  # seed-major: stopping early leaves whole pre-training seeds
    assert [checkpoints[seeds.index(seed)] for seed in (0, 1, 2, 3)] == controls  # each seed's control first
    assert len(units) == len(checkpoints) * len(FINETUNE_TASKS) * len(FINETUNE_SEEDS)
    assert units[:2] == [("untrained-seed0", FINETUNE_TASKS[0], 0), ("untrained-seed0", FINETUNE_TASKS[0], 1)]
    assert [untrained_seed(name) for name in ("untrained", "untrained-seed2", expected[0])] == [0, 2, None]


def test_fine_tuning_at_another_rate_goes_to_its_own_records_for_the_checkpoints_and_tasks_asked(tmp_path, monkeypatch):
    """`run.py --stage finetune --learning_rate 1e-3 --only ... --tasks cola`: only those checkpoints and task, at
    that rate, recorded in finetune_rates.jsonl (names ending -lr0.001, `learning_rate` kept), finetune.jsonl left
    alone; run again, nothing is redone; at the study's rate the records go to finetune.jsonl as before."""
    arm = GRID_ARM
    rows = [(u, 5.0 if u.learning_rate == 4e-3 else 5.2) for u in grid_rate_units(arm)]
    records = [record("recipe", u.ffn_type, u.seed, loss) | u.settings() | {"name": u.name} for u, loss in rows]
    gelu = grid_unit(arm, "gelu", "pre", 4e-3, 0).name
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "data").mkdir()
    for name in DATA_FILES:
        (tmp_path / "data" / name).touch()
    calls = []

    def fake_finetune(start, task, tasks_dir, seed, run_dir, recipe):
        calls.append((Path(start).name, task, seed, run_dir.name, recipe["learning_rate"]))
        return {"score": 50.0 + seed, "metrics": {}, "split": "validation", "train_seconds": 1.0, "wall_seconds": 1.0}

    monkeypatch.setattr(run_module, "finetune_run", fake_finetune)
    monkeypatch.setattr(run_module, "shared_tokenizer", lambda *args: None)
    monkeypatch.setattr(run_module, "pretrained_checkpoint", lambda name, *args: {"mask_loss": 5.0})
    monkeypatch.setattr(run_module, "untrained_checkpoint", lambda output, ref, tok, seed: output / f"untrained{seed}")
    argv = ["--data_dir", str(tmp_path / "data"), "--stage", "finetune", "--records_dir", str(tmp_path / "records")]
    argv += ["--output_dir", str(tmp_path / "out"), "--threads", str(torch.get_num_threads())]
    argv += ["--only", "untrained-seed0", gelu, "--tasks", "cola"]
    assert run_module.main([*argv, "--learning_rate", "1e-3"]) == 0
    assert calls == [
        (start, "cola", seed, f"seed{seed}-lr0.001", 1e-3) for start in ("untrained0", gelu) for seed in FINETUNE_SEEDS
    ]
    at_rate = [json.loads(line) for line in (tmp_path / "records" / "finetune_rates.jsonl").read_text().splitlines()]
    assert [r["name"] for r in at_rate] == [
        f"finetune-{c}-cola-seed{seed}-lr0.001" for c in ("untrained-seed0", gelu) for seed in FINETUNE_SEEDS
    ]
    assert {r["learning_rate"] for r in at_rate} == {1e-3} and not (tmp_path / "records" / "finetune.jsonl").exists()
    calls.clear()
    assert run_module.main([*argv, "--learning_rate", "1e-3"]) == 0 and calls == []  # all recorded: nothing redone
    assert run_module.main(argv) == 0  # the study's rate
    assert [c[3:] for c in calls] == [(f"seed{seed}", 1e-4) for seed in FINETUNE_SEEDS] * 2
    study = [json.loads(line) for line in (tmp_path / "records" / "finetune.jsonl").read_text().splitlines()]
    assert len(study) == 6 and all("learning_rate" not in r for r in study)


def test_each_pre_training_seed_has_its_own_untrained_control_holding_that_seeds_initial_weights(tmp_path):
    """`run.untrained_checkpoint`: the control of seed s is the GELU model as `seed_by_name(model, s)` draws it, the
    weights pre-training seed s started from; seed 1's differs from seed 0's."""
    config = FfnBertConfig(vocab_size=4096, hidden_size=32, num_hidden_layers=1, num_attention_heads=2)
    config.intermediate_size = 64
    gelu = {"kind": "ffn", "ffn_type": "gelu", "seed": 0, "name": "gelu-seed0"}
    config.save_pretrained(tmp_path / "runs" / gelu["name"])
    controls = [untrained_checkpoint(tmp_path, gelu["name"], STUDY / "tokenizer", seed) for seed in (0, 1)]
    assert [c.name for c in controls] == ["untrained-seed0", "untrained-seed1"]
    loaded = [FfnBertForMaskedLM.from_pretrained(c).state_dict() for c in controls]
    expected = seed_by_name(FfnBertForMaskedLM(config), 1).state_dict()
    assert all(torch.equal(loaded[1][k], expected[k]) for k in expected)
    word = "bert.embeddings.word_embeddings.weight"
    assert not torch.equal(loaded[0][word], loaded[1][word])


def test_launch_log_says_above_the_floor_for_a_run_that_did_not_reach_it():
    # it printed "-0.120 below the floor" for a run 0.12 nats above it
    assert launch.relative_to_floor(-0.12) == "0.120 nats above the floor"
    assert launch.relative_to_floor(1.5) == "1.500 nats below the floor"


def test_unit_arguments_of_each_arms_schedule(tmp_path):
    first, warmup, cooldown = (recipe_units()[i] for i in (0, 1, 12))
    arguments = [unit_arguments(u, tmp_path, tmp_path, STUDY)[1:] for u in (first, warmup, cooldown)]
    shapes = [(d.max_seq_length, t.per_device_train_batch_size, t.max_steps) for d, t in arguments]
    assert shapes == [(32, 128, 16000), (128, 32, 16000), (32, 128, 5000)]
    schedules = [(t.lr_scheduler_type, t.lr_scheduler_kwargs) for _, t in arguments]
    assert schedules[:2] == [("linear", None)] * 2  # RECIPE's linear decay over the 16,000 steps
    assert schedules[2] == ("warmup_stable_decay", {"num_decay_steps": 1000, "decay_type": "linear"})


def probe_entry(step: int, below: float) -> dict:
    return {"step": step, "plateau_probe": {"tokens": step * 4096, "below_unigram_floor": below}}


def test_the_plateau_exit_is_the_first_evaluation_0_3_nats_below_the_floor():
    history = [probe_entry(s, b) for s, b in ((768, 0.31), (0, -1.6), (256, 0.1), (512, 0.299), (1024, 0.2))]
    history.append({"step": 3, "loss": 7.0})
    curve = plateau_curve(history)
    assert [entry["step"] for entry in curve] == [0, 256, 512, 768, 1024]  # in step order, probe entries only
    assert plateau_exit_tokens(curve) == 768 * 4096  # 0.299 is not 0.3; the dip after does not undo the exit
    assert plateau_exit_tokens(curve[:3]) is None


def test_stop_at_the_units_step_or_at_the_deadline_marking_the_cut():
    def step(callback, global_step):
        state, control = TrainerState(), TrainerControl()
        state.global_step = global_step
        callback.on_step_end(None, state, control)
        return control.should_training_stop, state.log_history

    assert step(StopAt(2500), 2499) == (False, []) and step(StopAt(2500), 2500) == (True, [])
    control = TrainerControl()
    StopAt(2500).on_step_end(None, TrainerState(global_step=2500), control)
    assert control.should_save  # a checkpoint where it stops, for the unit that continues it
    assert step(StopAt(2500, time.time() + 60), 1000) == (False, [])
    assert step(StopAt(2500, time.time() - 1), 1000) == (True, [{"step": 1000, "cut_by_time_limit": True}])
    assert step(StopAt(None, None), 10**6) == (False, [])


def test_attention_locality_of_a_model_that_attends_uniformly():
    config = FfnBertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
    )
    model = FfnBertForMaskedLM(config).eval()
    with torch.no_grad():  # query and key at zero: every score 0, every weight 1/8
        for name, parameter in model.named_parameters():
            if ".query." in name or ".key." in name:
                parameter.zero_()
    rows = attention_locality(model, torch.randint(5, 50, (3, 8)))
    assert len(rows) == 2 and model.config._attn_implementation == "sdpa"  # switched back after the call
    for row in rows:
        assert [row["previous"], row["next"], row["same"]] == pytest.approx([1 / 8] * 3, abs=1e-6)
        assert row["entropy"] == pytest.approx(math.log(8), abs=1e-5) and row["uniform"] == 1 / 8


def test_the_probe_scores_each_source_once_per_step_and_block_length():
    """`PlateauProbe`: each source's [MASK] loss (checked against the model's logits directly) below its own floor,
    their mean; a second call at the same step and block length adds nothing (a resumed run's start), a probe at
    another block length at the same step (a sequence-length warm-up's switch) is kept beside it."""
    import datasets

    torch.manual_seed(0)
    config = FfnBertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
    )
    model = FfnBertForMaskedLM(config).eval()

    def masked_set(block, seed):
        ids = torch.randint(5, 50, (6, block), generator=torch.Generator().manual_seed(seed))
        labels = torch.full_like(ids, -100)
        labels[:, 2], ids[:, 2] = ids[:, 2], 4  # one [MASK] (id 4) a block
        return datasets.Dataset.from_dict({"input_ids": ids.tolist(), "labels": labels.tolist()}), ids, labels

    (wiki, wiki_ids, wiki_labels), (books, *_) = masked_set(8, 1), masked_set(8, 2)
    info = {"wiki": {"unigram_mask": 4.0}, "books": {"unigram_mask": 3.5}}
    state = TrainerState(global_step=0)
    probe = PlateauProbe({"wiki": wiki, "books": books}, info, 4, 4096)
    probe.on_train_begin(None, state, None, model=model)
    probe.on_train_begin(None, state, None, model=model)
    [entry] = plateau_curve(state.log_history)
    with torch.no_grad():
        logits = model(input_ids=wiki_ids).logits
    expected = torch.nn.functional.cross_entropy(logits[:, 2], wiki_labels[:, 2]).item()
    assert entry["wiki"]["mask_loss"] == pytest.approx(expected, rel=1e-5)
    assert entry["wiki"]["below_unigram_floor"] == pytest.approx(4.0 - expected, rel=1e-5)
    mean = (entry["wiki"]["below_unigram_floor"] + entry["books"]["below_unigram_floor"]) / 2
    assert entry["below_unigram_floor"] == pytest.approx(mean) and (entry["block"], entry["tokens"]) == (8, 0)
    longer = PlateauProbe({"wiki": masked_set(16, 3)[0]}, {"wiki": {"unigram_mask": 4.0}}, 4, 4096)
    longer.on_train_begin(None, state, None, model=model)
    assert [(e["step"], e["block"]) for e in plateau_curve(state.log_history)] == [(0, 8), (0, 16)]


def test_context_scores_a_run_on_the_probe_sets_of_each_block_length(tmp_path):
    """diagnostics `context`: the run's model on the probe sets of each block length, read from their folders (the
    study's tokenizer; a tiny model of its vocabulary), each the same score the probe gives (`score_sources`)."""
    import datasets

    tokenizer = AutoTokenizer.from_pretrained(STUDY / "tokenizer")
    config = FfnBertConfig(
        vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    torch.manual_seed(0)
    model = FfnBertForMaskedLM(config).eval()
    model.save_pretrained(tmp_path / "run")
    sets = {}
    for block in (8, 16):
        ids = torch.randint(10, len(tokenizer), (4, block), generator=torch.Generator().manual_seed(block))
        labels = torch.full_like(ids, -100)
        labels[:, 1], ids[:, 1] = ids[:, 1], tokenizer.mask_token_id
        masked = datasets.Dataset.from_dict({"input_ids": ids.tolist(), "labels": labels.tolist()})
        folder = probe_folder(tmp_path, launch.LAUNCH_PARTS, block)
        masked.save_to_disk(str(folder / "wiki"))
        (folder / "probe.json").write_text(json.dumps({"wiki": {"unigram_mask": 8.0}}))
        sets[block] = masked
    result = diagnostics.context_scores(tmp_path / "run", tmp_path / "no-corpus-read", tmp_path, blocks=(8, 16))
    assert result["parts"] == list(launch.LAUNCH_PARTS) and list(result["blocks"]) == [8, 16]
    for block, masked in sets.items():
        with torch.no_grad():
            expected = score_sources(
                model, {"wiki": masked}, {"wiki": {"unigram_mask": 8.0}}, tokenizer.mask_token_id, 2
            )
        assert result["blocks"][block]["wiki"]["mask_loss"] == pytest.approx(expected["wiki"]["mask_loss"], rel=1e-6)
        assert result["blocks"][block]["below_unigram_floor"] == pytest.approx(8.0 - expected["wiki"]["mask_loss"])


def test_held_out_sources_name_each_held_out_documents_file(tmp_path):
    (tmp_path / "wiki-00.txt").write_text("\n\n".join(f"wiki article {i}" for i in range(6)) + "\n")
    (tmp_path / "books-00.txt").write_text("\n\n".join(f"book text {i}" for i in range(4)) + "\n")
    corpus = {
        "train_files": [str(tmp_path / "wiki-00.txt"), str(tmp_path / "books-00.txt")],
        "validation_split_percentage": 50,
        "split_seed": 42,
        "cache_dir": str(tmp_path / "cache"),
    }
    held_out = load_corpus(**corpus)["validation"]["text"]
    sources = held_out_sources(corpus)
    assert len(sources) == len(held_out) == 5
    assert sources == ["wiki" if text.startswith("wiki") else "books" for text in held_out]
    assert set(sources) == {"wiki", "books"}
    with pytest.raises(ValueError, match=r"corpus part 'news-00.txt.xz' is of no known source; allowed: wiki, books"):
        source_of("news-00.txt.xz")


def save_finished_unit(folder, steps: int = 2500, resumed_from: int = 2000, loss: float = 5.2) -> None:
    """What `run_pretraining` leaves in a finished unit's folder: config, report, results and log history (a probe
    exit at step 1,024; `resumed_from` steps before this process's own)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    report_fields = {
        "floors": {"unigram_mask": 6.72, "copy_aware": 6.1},
        "steps": steps,
        "resumed_from_step": resumed_from,
        "train_seconds": 100.0,
        "tokens_seen": steps * 4096,
        "epochs": 0.26,
        "blocks": {"validation": 1000, "tokens_per_block": 32, "validation_maskings": 3},
        "ffn_output_rms_at_start": [0.1],
        "ffn": {"ffn_type": "gelu"},
        "model": {"parameters": 1404544},
    }
    (folder / "run_info.json").write_text(json.dumps(report_fields))
    (folder / "all_results.json").write_text(
        json.dumps({"eval_mask_loss": loss, "eval_token_loss": 5.0, "eval_mask_accuracy": 0.12})
    )
    history = [
        probe_entry(0, -1.6),
        probe_entry(1024, 0.45),
        {"step": steps, "eval_mask_loss": loss, "eval_token_loss": 5.0},
    ]
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": steps, "log_history": history}))


def test_a_saved_unit_is_recorded_from_its_folder_with_its_own_seconds_per_step(tmp_path):
    """A unit saved but not recorded (interrupted between the two) stopped with FileExistsError (issue 42); its
    record now comes from the folder, and its seconds per step count only the steps after its resume."""
    unit = replace(recipe_units()[0], stop_step=2500)
    folder = tmp_path / "runs" / unit.name
    save_finished_unit(folder)
    record = train_unit(unit, tmp_path / "no-corpus-read", tmp_path, tmp_path / "no-tokenizer-read")
    assert record["seconds_per_step"] == 100.0 / 500  # not 100 / 2500
    assert record["below_unigram_floor"] == pytest.approx(1.52) and record["curve"] == [[2500, 5.2, 5.0]]
    assert record["plateau_exit_tokens"] == 1024 * 4096 and record["stopped_at_step"] == 2500
    assert record["cut_by_time_limit"] is False and record["corpus_parts"] == list(DATA_FILES)
    assert record["device"].startswith("cpu") and record["preprocessing_workers"] == 16
    # a model saved at step 2,500 when the unit stops at 5,000 was cut by a time limit: not finished, so a rerun
    # resumes it (a first phase cut so stopped every rerun with FileNotFoundError: no checkpoint-2500)
    assert finished(unit, folder) and not finished(replace(unit, stop_step=5000), folder)
    assert not finished(unit, tmp_path / "runs" / "no-such-unit")


def test_fine_tuning_reads_a_kept_grid_model_and_trains_only_grid_units_again(tmp_path):
    """`run.pretrained_checkpoint`: a session's machine keeps no model from an earlier one, so fine-tuning gets each
    grid model from `train_unit` (a finished folder is read, not trained: its own [MASK] loss, which the fine-tuning
    record carries), from the corpus parts its record names: the study's other parts made another model (a
    GELU seed 0 trained again on all eight parts ended 4.300 against the table's 4.318); a name outside the grid,
    which nothing here could train, raises KeyError naming it."""
    parts = ["wiki-00.txt.xz", "books-00.txt.xz"]
    records = [
        {"name": u.name, "mask_loss": 5.0 if u.learning_rate == 4e-3 else 5.2, "corpus_parts": parts}
        for u in grid_rate_units(GRID_ARM)
    ]
    unit = grid_units(GRID_ARM, records)[0]
    other = next(u for u in grid_units(GRID_ARM, records) if u.seed == 1)  # seed 1: no record yet
    save_finished_unit(tmp_path / "runs" / unit.name, steps=unit.stop_step, loss=4.31)
    args = Namespace(data_dir=tmp_path / "no-corpus-read", output_dir=tmp_path)
    record = pretrained_checkpoint(unit.name, records, args, tmp_path / "no-tokenizer-read")
    assert (record["name"], record["mask_loss"], record["stopped_at_step"]) == (unit.name, 4.31, unit.stop_step)
    assert record["corpus_parts"] == parts  # the record's, not the study's eight (`DATA_FILES`)
    save_finished_unit(tmp_path / "runs" / other.name, steps=other.stop_step)  # no record names its parts
    assert pretrained_checkpoint(other.name, records, args, tmp_path)["corpus_parts"] == list(LAUNCH_PARTS)
    with pytest.raises(KeyError, match="untrained-seed0: not a unit of the grid"):
        pretrained_checkpoint("untrained-seed0", records, args, tmp_path)


def test_a_grid_model_trained_again_for_fine_tuning_is_trained_whole_never_resumed(tmp_path, monkeypatch):
    """A unit resumed at another step than its record's run is another model (SwiGLU seed 0: its first phase cut at
    step 1,000 by a session's end and resumed ended 0.042 nats from the table's model), so `pretrained_checkpoint`
    removes a model's unfinished folder and its first phase (finished or not) before training it again from step 0."""
    parts = ["wiki-00.txt.xz"]
    records = [
        {"name": u.name, "mask_loss": 5.0 if u.learning_rate == 4e-3 else 5.2, "corpus_parts": parts}
        for u in grid_rate_units(GRID_ARM)
    ]
    unit = grid_units(GRID_ARM, records)[0]
    folder, first = tmp_path / "runs" / unit.name, tmp_path / "runs" / unit.first_phase().name
    (folder / "checkpoint-3000").mkdir(parents=True)  # cut at step 3,000 of 5,000
    save_finished_unit(first, steps=unit.first_phase().stop_step)  # finished, but maybe resumed on the way
    seen = []

    def train(unit_, data_dir, output_dir, where, device, parts_):
        seen.append((unit_.name, folder.exists(), first.exists(), parts_))
        return {"name": unit_.name}

    monkeypatch.setattr(run_module, "train_unit", train)
    args = Namespace(data_dir=tmp_path, output_dir=tmp_path)
    assert pretrained_checkpoint(unit.name, records, args, tmp_path) == {"name": unit.name}
    assert seen == [(unit.name, False, False, tuple(parts))]
    save_finished_unit(folder, steps=unit.stop_step, loss=4.3)  # a finished model is read as it is: nothing removed
    save_finished_unit(first, steps=unit.first_phase().stop_step)
    pretrained_checkpoint(unit.name, records, args, tmp_path)
    assert seen[-1] == (unit.name, True, True, tuple(parts))


def test_summary_plateau_exit_rows_per_arm():
    def recipe(ffn, seed, exit_tokens, cut=False, arm="blocks of 32", loss=5.0):
        unit = next(u for u in recipe_units() if (u.ffn_type, u.seed, u.arm) == (ffn, seed, arm))
        row = record("recipe", ffn, seed, loss, lr=unit.learning_rate) | unit.settings()
        tokens = 9_000_000 if cut else 20_480_000
        curve = [{"tokens": 0, "neighbour_weight_vs_uniform": 1.0}]
        curve += [{"tokens": exit_tokens, "neighbour_weight_vs_uniform": 3.5}] if exit_tokens else []
        rms = [0.4, 0.2] if ffn == "gelu" else [0.1, 0.2]
        return (
            row
            | {"plateau_curve": curve, "plateau_exit_tokens": exit_tokens, "tokens_seen": tokens}
            | {"ffn_output_rms_at_start": rms}
        )

    runs = [recipe("swiglu", 1, None, cut=True), recipe("gelu", 0, 6_291_456), recipe("swiglu", 0, 4_194_304)]
    runs.append(recipe("gelu", 0, 6_291_456, arm="32, then 128", loss=5.4))
    runs[0]["cut_by_time_limit"] = True
    rows = report.summary(runs, [])["plateau_exit"]
    label = "recipe: blocks 32x128, lr 0.004, warm-up 300, 16000-step schedule stopped at 5000"
    warmup = (
        "recipe: blocks 32x128, then 128x32 from step 2500, lr 0.004, warm-up 300, 16000-step schedule stopped at 5000"
    )
    text = report.report_markdown(report.summary(runs, []), runs, [])
    assert f"| swiglu | pre | {label} | 0,1 | 4.2M, – | 3.5, – | 20.5M, 9.0M | 1 | 1.600, 1.600 (32) | 2 of 2 |" in text
    assert f"| gelu | pre | {warmup} | 0 | 6.3M | 3.5 | 20.5M | 0 | 1.200 (128) | 1 of 1 | 0.30 |" in text
    assert [row["recipe"] for row in rows] == [label, label, warmup]  # by recipe, then placement and FFN
    assert rows[:2] == [
        {
            "variant": "gelu",
            "placement": "pre",
            "recipe": label,
            "seeds": [0],
            "tokens_to_exit": [6_291_456],
            "neighbour_weight_at_exit": [3.5],
            "tokens_seen": [20_480_000],
            "never_left": 0,
            "cut_by_time_limit": 0,
            "final_block": 32,
            "below_floor_at_end": [pytest.approx(1.6)],
            "passed_gate": 1,
            "ffn_output_rms_at_start": [pytest.approx(0.3)],
        },
        {
            "variant": "swiglu",
            "placement": "pre",
            "recipe": label,
            "seeds": [0, 1],
            "tokens_to_exit": [4_194_304, None],
            "neighbour_weight_at_exit": [3.5, None],
            "tokens_seen": [20_480_000, 9_000_000],
            "never_left": 1,
            "cut_by_time_limit": 1,
            "final_block": 32,
            "below_floor_at_end": [pytest.approx(1.6)] * 2,
            "passed_gate": 2,
            "ffn_output_rms_at_start": [pytest.approx(0.15)] * 2,
        },
    ]
    cooldown = next(u for u in recipe_units() if u.arm == "constant, then cool-down")
    assert report.recipe_label(cooldown.settings() | {"kind": "recipe"}) == (
        "recipe: blocks 32x128, lr 0.004, warm-up 300, constant, cool-down over the last 1000 of 5000 steps"
    )


def test_the_launcher_refuses_bad_options_naming_them(tmp_path, capsys):
    assert launch.part_names(["wiki-00", "books-01.txt.xz"]) == ("wiki-00.txt.xz", "books-01.txt.xz")
    with pytest.raises(ValueError, match=r"--parts: 'wiki-09' is not a part of the study's corpus; allowed: wiki-00,"):
        launch.part_names(["wiki-09"])
    common = ["--data_dir", str(tmp_path), "--out", str(tmp_path / "out"), "--device", "cpu"]
    with pytest.raises(SystemExit) as exit_:
        launch.main(common)
    assert exit_.value.code == 2 and "lacks wiki-00.txt.xz, wiki-01.txt.xz, books-00.txt.xz, books-01.txt.xz" in (
        capsys.readouterr().err
    )
    for part in launch.LAUNCH_PARTS:
        (tmp_path / part).write_bytes(b"x")
    for option, value, message in (
        ("--time_limit", "0", "--time_limit 0: must be a positive number of seconds"),
        ("--parallel", "0", "--parallel 0: must be a positive number of units"),
        ("--only", "recipe-relu", "--only recipe-relu: no such unit; the units: recipe-gelu-"),
    ):
        with pytest.raises(SystemExit):
            launch.main([*common, option, value])
        assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_unit_arguments_of_a_recipe_unit_on_cuda(tmp_path):
    unit = recipe_units()[2]  # SwiGLU, seed 0, blocks of 32
    args, data_args, training_args = unit_arguments(unit, tmp_path, tmp_path, STUDY, "cuda", launch.LAUNCH_PARTS, None)
    assert (args.ffn_type, args.speed_defaults, args.bf16_where_available) == ("swiglu", False, False)  # fp32
    assert (data_args.max_seq_length, training_args.per_device_train_batch_size) == (32, 128)
    assert (training_args.max_steps, training_args.eval_strategy, training_args.use_cpu) == (16000, "no", False)
    assert data_args.preprocessing_num_workers == 16
    assert [name.split("/")[-1] for name in data_args.train_files] == list(launch.LAUNCH_PARTS)
    with pytest.raises(ValueError, match=r"--device 'tpu' is not one of cpu, cuda"):
        unit_arguments(unit, tmp_path, tmp_path, STUDY, "tpu")
