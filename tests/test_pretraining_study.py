"""The from-scratch study's report (`studies.pretraining.report`) on a synthetic runs file: the summary's schema,
the paired intervals with their Bonferroni correction (hand-computed), and the one-command regeneration."""

import json
import math

import pytest

from studies.pretraining import report
from studies.pretraining.settings import best_rates, ffn_units, sweep_units

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
FINETUNED = [
    {"checkpoint": "untrained", "task": "cola", "seed": 0, "score": 10.0},
    {"checkpoint": "untrained", "task": "cola", "seed": 1, "score": 12.0},
    {"checkpoint": RECORDS[0]["name"], "task": "cola", "seed": 0, "score": 20.0},
    {"checkpoint": RECORDS[0]["name"], "task": "cola", "seed": 1, "score": 26.0},
    {"checkpoint": RECORDS[1]["name"], "task": "cola", "seed": 0, "score": 22.0},  # a second gelu checkpoint
    {"checkpoint": RECORDS[1]["name"], "task": "cola", "seed": 1, "score": 24.0},
]


def test_summary_schema_and_hand_computed_intervals():
    result = report.summary(RECORDS, FINETUNED)
    assert set(result) == {
        "training_tokens_per_main_run",
        "planned_tokens_per_main_run",
        "epochs_per_main_run",
        "heldout_tokens",
        "floors",
        "device",
        "corpus_parts",
        "gate",
        "plateau_exit",
        "ffn_table",
        "placement_table",
        "finetune",
    }
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
    # fine-tuning: the GELU checkpoints' seeds averaged per fine-tuning seed (21, 25) − untrained (10, 12): 11, 13;
    # one comparison → a 95% interval: 12 ± t_{0.975,1}·√2/√2 = 12 ± 12.7062
    finetune = {row["checkpoint"]: row for row in result["finetune"]}
    assert set(result["finetune"][0]) == {"checkpoint", "task", "score", "delta_vs_untrained", "interval", "confidence"}
    assert finetune["gelu"]["score"] == pytest.approx(23.0) and finetune["gelu"]["delta_vs_untrained"] == 12.0
    assert finetune["gelu"]["interval"] == pytest.approx([12 - 12.706205, 12 + 12.706205], abs=1e-5)
    assert finetune["untrained"]["delta_vs_untrained"] is None


def test_summary_before_the_grid_reports_the_gate_from_the_last_full_pilot():
    slice_pilot = record("pilot-slice", "gelu", 0, 5.0) | {"tokens_seen": 4_096_000}
    failed = record("pilot", "gelu", 0, 6.45) | {"floors": {"unigram_mask": 6.616, "copy_aware": 6.045}}
    failed["below_unigram_floor"] = 6.616 - 6.45
    result = report.summary([], [], [slice_pilot, failed])
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
    assert result["ffn_table"] == result["placement_table"] == result["finetune"] == []
    passed = failed | {"mask_loss": 5.5, "below_unigram_floor": 1.116}
    assert report.summary([], [], [failed, passed])["gate"]["passed"] is True  # the last full pilot counts


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
    units = ffn_units(RECORDS)
    assert [(u.ffn_type, u.learning_rate, u.seed) for u in units][:2] == [("gelu", 4e-3, 0), ("gelu", 4e-3, 1)]
    assert len(sweep_units()) == 18 and len({u.name for u in sweep_units()}) == 18
