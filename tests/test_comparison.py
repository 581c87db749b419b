"""The comparison's statistics against hand calculations, on small known inputs (no training; one test times two
small steps of the bundled model)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from studies.common import comparison, start_weights
from studies.common.comparison import (
    BASELINE,
    correctness,
    encode_ids,
    healed_name,
    last_fifth_change,
    paired_bootstrap,
    paired_t_interval,
    parse_healed,
    report,
    variant_order,
)

REPO = Path(__file__).resolve().parents[1]


def test_paired_t_interval_by_hand():
    # differences 0.01, 0.03, 0.02: mean 0.02, sd = sqrt(((-.01)^2 + .01^2 + 0) / 2) = 0.01,
    # t_{0.975, 2} = 4.302652729911275 (tables: 4.303), half-width = 4.302652729911275 * 0.01 / sqrt(3)
    mean, low, high = paired_t_interval([0.01, 0.03, 0.02])
    half = 4.302652729911275 * 0.01 / math.sqrt(3)
    assert mean == pytest.approx(0.02, abs=1e-15)
    assert low == pytest.approx(0.02 - half, abs=1e-12)
    assert high == pytest.approx(0.02 + half, abs=1e-12)
    # two differences: t_{0.975, 1} = 12.706204736174707
    mean, low, high = paired_t_interval([0.0, 0.02])
    assert (high - low) / 2 == pytest.approx(12.706204736174707 * math.sqrt(2e-4) / math.sqrt(2), abs=1e-12)


def test_paired_t_interval_needs_two():
    with pytest.raises(ValueError, match="at least 2"):
        paired_t_interval([0.1])


def test_paired_bootstrap_by_hand():
    # one seed, 4 snippets: variant right on 0,1,2; baseline right on 0 → per-snippet differences 0, 1, 1, 0.
    variant = np.array([[1, 1, 1, 0]])
    baseline = np.array([[1, 0, 0, 0]])
    mean, low, high = paired_bootstrap(variant, baseline, resamples=20_000, seed=1)
    assert mean == 0.5
    # A resample's mean is k/4 with k ~ Binomial(4, 1/2): P(k=0) = 1/16 > 2.5%, so both percentiles sit at the
    # extremes 0 and 1 of the distribution's support.
    assert (low, high) == (0.0, 1.0)
    # Identical predictions: every resampled difference is 0.
    assert paired_bootstrap(variant, variant) == (0.0, 0.0, 0.0)


def test_paired_bootstrap_averages_seeds_per_snippet():
    # two seeds: per-snippet differences (1 - 0 + 0 - 0) / 2 = 0.5 on snippet 0, 0 elsewhere → mean 0.5 / 3.
    variant = np.array([[1, 1, 0], [0, 1, 0]])
    baseline = np.array([[0, 1, 0], [0, 1, 0]])
    mean, low, high = paired_bootstrap(variant, baseline, resamples=5_000, seed=0)
    assert mean == pytest.approx(0.5 / 3)
    # resampled means are (number of snippet-0 draws) · 0.5 / 3 ∈ {0, 1/6, 1/3, 1/2}; P(0 draws) = 8/27 > 2.5%,
    assert low == 0.0 and high == pytest.approx(0.5)  # P(3 draws) = 1/27 = 3.7% > 2.5%: the top value
    with pytest.raises(ValueError, match="shapes differ"):
        paired_bootstrap(variant, baseline[:1])


def test_paired_bootstrap_large_sample_matches_normal_approximation():
    # 2,000 snippets, differences ±1 on 400 (300 up, 100 down): mean 0.1, sd of the mean ≈ sqrt(var / n) with
    # var = E[d²] − mean² = 0.2 − 0.01 = 0.19 → 95% interval ≈ 0.1 ± 1.96 · sqrt(0.19 / 2000) = 0.1 ± 0.0191.
    d = np.zeros(2000)
    d[:300], d[300:400] = 1, -1
    variant, baseline = (d > 0).astype(int)[None], (d < 0).astype(int)[None]
    mean, low, high = paired_bootstrap(variant, baseline, resamples=20_000, seed=0)
    assert mean == pytest.approx(0.1)
    half = 1.96 * math.sqrt(0.19 / 2000)
    assert low == pytest.approx(0.1 - half, abs=0.002) and high == pytest.approx(0.1 + half, abs=0.002)


def test_last_fifth_change():
    # eval at 0, 50, ..., 250: the last fifth is steps 200 and 250; loss 0.40 → 0.38: slope −0.02/50 = −4e-4,
    # relative change −4e-4 · 50 / 0.39
    curve = [
        {"step": s, "eval_loss": v} for s, v in zip(range(0, 251, 50), [0.7, 0.5, 0.45, 0.42, 0.40, 0.38], strict=False)
    ]
    change = last_fifth_change(curve)
    assert change["points"] == 2
    assert change["slope_per_step"] == pytest.approx(-4e-4)
    assert change["relative_change"] == pytest.approx(-0.02 / 0.39)
    # the fifth before (steps 150, 200): 0.42 → 0.40, relative −0.02 / 0.41
    before = last_fifth_change(curve, start=0.6, end=0.8)
    assert before["points"] == 2 and before["relative_change"] == pytest.approx(-0.02 / 0.41)


def test_correctness_and_encoding():
    runs = [
        {"test_labels": encode_ids([0, 1, 1]), "test_predicted": encode_ids([0, 0, 1])},
        {"test_labels": "011", "test_predicted": "111"},
    ]
    assert correctness(runs).tolist() == [[True, False, True], [False, True, True]]
    with pytest.raises(ValueError, match="not in the same order"):
        correctness([runs[0], {"test_labels": "110", "test_predicted": "110"}])
    with pytest.raises(ValueError, match="0-9"):
        encode_ids([10])


def test_parse_healed(tmp_path):
    (tmp_path / "config.json").write_text('{"layer_norm_position": ["pre", "pre"]}')
    assert parse_healed([f"pre-ln={tmp_path}"]) == {"pre-ln healed": str(tmp_path)}
    # a folder of another variant is refused: its switches are not pre-ln's / swiglu's
    (tmp_path / "config.json").write_text('{"ffn_type": "swiglu", "layer_norm_position": ["pre", "pre"]}')
    with pytest.raises(ValueError, match=r"has layer_norm_position=\['pre', 'pre'\], but swiglu-approx has 'post'"):
        parse_healed([f"swiglu-approx={tmp_path}"])
    (tmp_path / "config.json").write_text('{"ffn_type": "geglu"}')
    with pytest.raises(ValueError, match=r"has ffn_type='geglu', but pre-ln has 'gelu'"):
        parse_healed([f"pre-ln={tmp_path}"])
    with pytest.raises(ValueError, match="geglu"):
        parse_healed([f"geglu={tmp_path}"])
    with pytest.raises(ValueError, match="no config.json"):
        parse_healed([f"pre-ln={tmp_path / 'missing'}"])
    # a report rewritten from its runs file needs the names only: no folder is read, a bad name is still refused
    assert parse_healed([f"pre-ln={tmp_path / 'missing'}"], check_folders=False) == {
        "pre-ln healed": str(tmp_path / "missing")
    }
    with pytest.raises(ValueError, match="expected VARIANT=FOLDER"):
        parse_healed([f"geglu={tmp_path}"], check_folders=False)
    assert variant_order([healed_name("pre-ln"), "pre-ln", BASELINE]) == [BASELINE, "pre-ln", "pre-ln healed"]


def test_report_verdicts():
    # baseline right on half of 400 snippets; "variant" right on every snippet in each of 3 seeds → +50 points
    # with zero spread: the t interval is the point +50 and the bootstrap excludes 0: outside the noise.
    labels = "0" * 400
    base = "1" * 200 + "0" * 200
    curve = [{"step": s, "eval_loss": 0.5, "eval_accuracy": 0.5, "eval_f1": 0.5} for s in range(0, 11, 2)]

    def run(variant, seed, predicted, accuracy):
        return {
            "variant": variant,
            "seed": seed,
            "test_accuracy": accuracy,
            "test_f1": accuracy,
            "test_labels": labels,
            "test_predicted": predicted,
            "train_tokens_per_second": 100.0,
            "wall_seconds": 10.0,
            "load_before": 1.0,
            "load_after": 2.0,
            "curve": curve,
            "threads": 1 + seed % 2,
        }

    runs = [run(BASELINE, s, base, 0.5) for s in range(3)] + [run("pre-ln", s, labels, 1.0) for s in range(3)]
    runs += [run("geglu", s, base, 0.5 + 0.01 * (s - 1)) for s in range(3)]
    header = {"title": "# t", "intro": "i", "machine": {"cpu": "cpu", "cores": 2}, "versions": "v", "command": "c"}
    text = report(runs, {}, header)
    rows = {line.split(" | ")[0][2:]: line for line in text.splitlines() if line.startswith("| ")}
    assert "+50.00 [+50.00, +50.00]" in rows["pre-ln"] and "**outside the noise**" in rows["pre-ln"]
    assert "inside the noise" in rows["geglu"]
    assert re.search(r"relative change [+-]0\.00%", text)
    # runs of seeds 0 and 2 used 1 thread, seed 1 used 2: the machine line counts both, per run
    assert "torch threads per run: 1 (6 runs), 2 (3 runs)" in text
    assert rows["pre-ln"].endswith("| – | – | 10 (1, 2) |")  # no throughput measured: no speed claimed
    assert "only when both exclude 0" in text and "not that the variants are equal" in text
    # no baseline: the reason is said, not "fewer than 2 paired seeds"
    alone = report([r for r in runs if r["variant"] == "pre-ln"], {}, header)
    assert "| no baseline runs |" in alone
    # a healed pre-ln right on half the snippets, as the baseline: −50 points against the converted pre-ln
    healed = [run(healed_name("pre-ln"), s, base, 0.5) for s in range(3)]
    text = report(runs + healed, {}, header)
    assert "- pre-ln healed: -50.00 [-50.00, -50.00] (seeds), -50.00 [" in text
    assert text.split("- pre-ln healed: ")[1].splitlines()[0].endswith(": **outside the noise**")
    # runs from two machines: both named with their number of runs (not only the last run's machine)
    two = [run | {"machine": {"cpu": "A" if run["seed"] else "B", "cores": 2}} for run in runs]
    assert "Machine: B, 2 logical cores (3 runs); A, 2 logical cores (6 runs); torch threads" in report(two, {}, header)
    # the hand-written reading (--notes) follows the table and its note on the verdicts
    noted = report(runs, {}, header | {"notes": "\nHealed rows: read me.\n"})
    assert (
        noted.index("not that the variants are equal")
        < noted.index("Healed rows: read me.")
        < noted.index("Baseline convergence")
    )


def test_report_longer_budget_check():
    # baseline right on 200 of 400 snippets at 250 steps, on 300 at 500 steps, in seeds 0 and 1: +25 points
    labels = "0" * 400

    def run(seed, steps, right):
        return {
            "variant": BASELINE,
            "seed": seed,
            "test_accuracy": right / 400,
            "test_f1": right / 400,
            "test_labels": labels,
            "test_predicted": "0" * right + "1" * (400 - right),
            "wall_seconds": 1.0,
            "load_before": 0.0,
            "load_after": 0.0,
            "threads": 1,
            "settings": {"max_steps": steps},
            "curve": [{"step": 0, "eval_loss": 0.7, "eval_accuracy": 0.5, "eval_f1": 0.5}],
        }

    short, longer = [run(s, 250, 200) for s in (0, 1)], [run(s, 500, 300) for s in (0, 1)]
    lines = comparison.longer_budget_lines(short, longer)
    assert lines[0].startswith("Convergence check: the same runs at 500 steps instead of 250")
    match = re.fullmatch(
        r"- gelu-post: 0\.7500 ± 0\.0000 at 500 steps \(seeds 0, 1\) against 0\.5000 ± 0\.0000; "
        r"longer − shorter \+25\.00 \[\+25\.00, \+25\.00\] points \(seeds\), \+25\.00 \[\+(\S+), \+(\S+)\] "
        r"\(snippets\): \*\*outside the noise\*\*",
        lines[2],
    )
    assert match, lines[2]
    # 100 of 400 snippets flip to right: the bootstrap interval brackets 25 points,
    # ± about 1.96 · √(0.25·0.75/400) = 4.2
    low, high = map(float, match.groups())
    assert 20 < low < 25 < high < 30
    assert comparison.longer_budget_lines(short, []) == []


def test_report_throughput_rows_healed_share_their_variant():
    runs = [
        {
            "variant": name,
            "seed": 0,
            "test_accuracy": 0.8,
            "test_f1": 0.8,
            "test_labels": "01",
            "test_predicted": "01",
            "wall_seconds": 5.0,
            "load_before": 0.1,
            "load_after": 0.2,
            "threads": 2,
            "curve": [{"step": 0, "eval_loss": 0.6, "eval_accuracy": 0.5, "eval_f1": 0.5}],
        }
        for name in (BASELINE, "pre-ln", "pre-ln healed")
    ]
    speed = {"real_tokens_per_s": 1500.0, "median_ms": 40.0, "ratio": 1.0183, "ratio_min": 0.9, "ratio_max": 1.1}
    throughput = {
        "variants": {BASELINE: {**speed, "ratio": 1.0, "ratio_min": 1.0, "ratio_max": 1.0}, "pre-ln": speed},
        "settings": {"batch_size": 32, "max_seq_length": 64, "batches": 6, "repeats": 30, "warmup": 1},
        "load_before": 0.1,
        "load_after": 0.3,
        "threads": 2,
        "unpad_tokens": True,
        "versions": "v",
    }
    header = {"title": "# t", "intro": "i", "machine": {"cpu": "cpu", "cores": 2}, "versions": "v", "command": "c"}
    text = report(runs, {}, header, throughput)
    rows = {line.split(" | ")[0][2:]: line for line in text.splitlines() if line.startswith("| ")}
    assert "| 1500 | 1.018 [0.900–1.100] | 5 (2) |" in rows["pre-ln"]
    assert "| 1500 | 1.018 [0.900–1.100] | 5 (2) |" in rows["pre-ln healed"]
    assert "Throughput (gelu-post, pre-ln):" in text
    # one eval point per fifth: no slope, said plainly (not nan)
    assert "- seed 0: fewer than 2 eval points in a fifth of training: no slope" in text and "nan" not in text
    assert "1.000 [1.000–1.000]" in rows[BASELINE]
    assert "30 interleaved rounds" in text and "load average (1 min) 0.10 before, 0.30 after" in text


def test_measure_throughput_times_every_variant_on_real_batches(bundled_checkpoint, tmp_path):
    from hf_ffn.training.arguments import ModelArguments
    from studies.variant_comparison.variant_throughput import measure_throughput

    folder = tmp_path / "rt"
    folder.mkdir()
    (folder / "rt-polarity.pos").write_text("".join(f"a fine and moving film number {i}\n" for i in range(12)))
    (folder / "rt-polarity.neg").write_text("".join(f"dull {'very ' * (i % 4)}dull {i}\n" for i in range(12)))
    starts = {
        BASELINE: ModelArguments(model_name_or_path=bundled_checkpoint, unpad_tokens=True),
        "geglu": ModelArguments(
            model_name_or_path=bundled_checkpoint, unpad_tokens=True, ffn_type="geglu", ffn_init="preserving"
        ),
    }
    measured = measure_throughput(starts, BASELINE, str(folder), batch_size=4, max_seq_length=8, batches=2, repeats=3)
    assert set(measured["variants"]) == set(starts)
    base = measured["variants"][BASELINE]
    assert base["ratio"] == base["ratio_min"] == base["ratio_max"] == 1.0  # its own times over its own times
    for speed in measured["variants"].values():
        assert speed["real_tokens_per_s"] > 0 and speed["ratio_min"] <= speed["ratio"] <= speed["ratio_max"]
    assert measured["settings"] == {"batch_size": 4, "max_seq_length": 8, "batches": 2, "repeats": 3, "warmup": 1}
    with pytest.raises(ValueError, match="baseline 'nope' is not among the variants to time"):
        measure_throughput(starts, "nope", str(folder))


def test_probes_from_healing_map_teacher_before_and_after():
    def probe(accuracy, std=0.01):
        return {"accuracy": accuracy, "std": std, "folds": [accuracy] * 5}

    healing = {
        "before": {"agreement": {"texts": 10662}, "probe": {"teacher": probe(0.80), "student": probe(0.78, 0.02)}},
        "after": {"agreement": {"texts": 10662}, "probe": {"teacher": probe(0.80), "student": probe(0.795, 0.03)}},
    }
    probes = comparison.probes_from_healing({"swiglu-fresh": {"init": "fresh", "healing": healing}})
    assert probes == {
        "gelu-post": {"accuracy": 0.80, "std": 0.01, "snippets": 10662},
        "swiglu-fresh-matched": {"accuracy": 0.78, "std": 0.02, "snippets": 10662},
        "swiglu-fresh-matched healed": {"accuracy": 0.795, "std": 0.03, "snippets": 10662},
    }
    # The layer-wise study's matched SwiGLU starts pruned, not fresh: its "before" is not the comparison's
    # swiglu-fresh-matched, so only the healed row comes from it; its approximate SwiGLU starts as the comparison's.
    probes = comparison.probes_from_healing(
        {
            "swiglu-matched-lw": {"init": "pruned", "healing": healing},
            "swiglu-approx-lw": {"init": "preserving", "healing": healing},
        }
    )
    assert set(probes) == {"gelu-post", "swiglu-fresh-matched healed", "swiglu-approx", "swiglu-approx healed"}
    assert probes["swiglu-approx"] == {"accuracy": 0.78, "std": 0.02, "snippets": 10662}


def test_weights_sha256_is_the_weights_identity_wherever_they_lie(tmp_path):
    for name, value in (("a", 1.0), ("b", 1.0), ("c", 2.0)):
        (tmp_path / name).mkdir()
        save_file({"w": torch.full((3,), value)}, tmp_path / name / "model.safetensors")
    assert start_weights.weights_sha256(tmp_path / "a") == start_weights.weights_sha256(str(tmp_path / "b"))
    assert start_weights.weights_sha256(tmp_path / "a") != start_weights.weights_sha256(tmp_path / "c")
    expected = hashlib.sha256((tmp_path / "a" / "model.safetensors").read_bytes()).hexdigest()
    assert start_weights.weights_sha256(tmp_path / "a") == expected
    with pytest.raises(FileNotFoundError, match="holds no"):
        start_weights.weights_sha256(tmp_path / "missing")


def load_compare_script():
    spec = importlib.util.spec_from_file_location(
        "compare_variants", REPO / "studies" / "variant_comparison" / "compare_variants.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_resume_refuses_runs_from_other_weights_and_accepts_the_same_weights_elsewhere(tmp_path, bundled_checkpoint):
    script = load_compare_script()
    args = script.parse_args(["--rt_polarity_dir", str(tmp_path)])
    curve = [{"step": s, "eval_loss": 0.5, "eval_accuracy": 0.8, "eval_f1": 0.8} for s in range(0, 251, 50)]
    line = {
        "variant": BASELINE,
        "seed": 0,
        "checkpoint": "/elsewhere/model",
        "checkpoint_sha256": "0" * 64,
        "settings": script.settings(args),
        "test_accuracy": 0.75,
        "test_f1": 0.75,
        "test_labels": "0011",
        "test_predicted": "0010",
        "wall_seconds": 1.0,
        "load_before": 0.0,
        "load_after": 0.0,
        "threads": 1,
        "machine": {"cpu": "cpu", "cores": 2},
        "versions": "v",
        "curve": curve,
    }
    (tmp_path / script.RESULTS).write_text(json.dumps(line) + "\n")
    argv = [
        "--rt_polarity_dir",
        str(tmp_path),
        "--output-dir",
        str(tmp_path),
        "--variants",
        BASELINE,
        "--seeds",
        "0",
        "--throughput_rounds",
        "0",
    ]
    with pytest.raises(ValueError, match=r"was run from other weights \('/elsewhere/model', sha256 0000"):
        script.main(argv)
    # the same weights at another path are the same start: the finished run is kept and reported, not rerun
    line["checkpoint_sha256"] = start_weights.weights_sha256(bundled_checkpoint)
    (tmp_path / script.RESULTS).write_text(json.dumps(line) + "\n")
    assert script.main(argv) == 0
    assert "| gelu-post | 0 | 0.7500 |" in (tmp_path / script.TABLE).read_text()
    # a converted variant's probe measured earlier is kept (a healed row's comes only from --heal-dir); --notes is
    # inserted without its comment lines; a missing --notes file is refused
    probe = {"accuracy": 0.7394, "std": 0.0077, "snippets": 10662}
    (tmp_path / script.SOURCES).write_text(
        json.dumps({"command": "c", "probes": {"swiglu-fresh-matched": probe, "swiglu-fresh-matched healed": probe}})
    )
    (tmp_path / "notes.md").write_text("<!-- not shown -->\nThe reading.\n")
    assert script.main(argv + ["--notes", str(tmp_path / "notes.md")]) == 0
    assert json.loads((tmp_path / script.SOURCES).read_text())["probes"] == {"swiglu-fresh-matched": probe}
    table = (tmp_path / script.TABLE).read_text()
    assert "The reading." in table and "not shown" not in table
    with pytest.raises(ValueError, match="--notes 'nope.md': no such file"):
        script.main(argv + ["--notes", "nope.md"])


def test_throughput_is_measured_again_when_it_does_not_cover_the_comparison(tmp_path):
    script = load_compare_script()
    args = script.parse_args(["--output-dir", str(tmp_path)])
    path = tmp_path / script.THROUGHPUT
    assert script.throughput_stale(path, {BASELINE: None}, args)  # nothing measured yet
    path.write_text(
        json.dumps(
            {
                "variants": {BASELINE: {}},
                "threads": torch.get_num_threads(),
                "settings": {"batch_size": 32, "max_seq_length": 64},
            }
        )
    )
    assert not script.throughput_stale(path, {BASELINE: None}, args)
    assert script.throughput_stale(path, {BASELINE: None, "pre-ln": None}, args)  # a variant it lacks
    assert script.throughput_stale(path, {BASELINE: None}, script.parse_args(["--max_seq_length", "128"]))
    assert script.throughput_stale(path, {BASELINE: None}, script.parse_args(["--remeasure_throughput"]))
    with pytest.raises(SystemExit):
        script.parse_args(["--throughput_rounds", "-1"])
