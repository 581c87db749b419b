"""The four-task comparison: its statistics against hand-computed values, and the command end to end on a tiny
checkpoint and tiny task folders written by the test (a run, a resume that runs nothing, a refused resume)."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from scipy import stats
from transformers import AutoTokenizer
from transformers.utils import logging as hf_logging

from hf_ffn import FfnBertForMaskedLM
from hf_ffn.conversion import convert_checkpoint
from studies.common.comparison import BASELINE
from studies.four_tasks.task_comparison import glue_average, paired_score_difference

from .conftest import tiny_config
from .test_tasks import write_stsb

REPO = Path(__file__).resolve().parents[1]


def test_glue_average_and_paired_interval_hand_computed():
    runs = [
        {"variant": v, "seed": s, "task": t, "score": score}
        for v, s, t, score in [
            (BASELINE, 0, "cola", 40.0),
            (BASELINE, 0, "stsb", 80.0),
            (BASELINE, 1, "cola", 42.0),
            (BASELINE, 1, "stsb", 84.0),
            ("geglu", 0, "cola", 41.0),
            ("geglu", 0, "stsb", 82.0),
            ("geglu", 1, "cola", 46.0),
            ("geglu", 1, "stsb", 84.0),
            ("geglu", 2, "cola", 50.0),
        ]
    ]  # seed 2 has no stsb run: no average for it
    averages = glue_average(runs, ["cola", "stsb"])
    assert sorted((a["variant"], a["seed"], a["score"]) for a in averages) == sorted(
        [(BASELINE, 0, 60.0), (BASELINE, 1, 63.0), ("geglu", 0, 61.5), ("geglu", 1, 65.0)]
    )
    base = [a for a in averages if a["variant"] == BASELINE]
    mean, low, high = paired_score_difference([a for a in averages if a["variant"] != BASELINE], base)
    # differences 1.5 and 2.0: mean 1.75, sd √0.125, t_{0.975, 1} = 12.706…
    half = stats.t.ppf(0.975, 1) * 0.125**0.5 / 2**0.5
    assert (mean, low, high) == pytest.approx((1.75, 1.75 - half, 1.75 + half))
    assert paired_score_difference(averages[:1], base[1:]) is None  # no seed in common


def test_paired_score_difference_by_hand():
    # differences 1.5 and 2.0 (paired by seed): mean 1.75, sd √0.125, t_{0.975, 1}
    runs = [{"seed": 0, "score": 61.5}, {"seed": 1, "score": 65.0}, {"seed": 2, "score": 70.0}]
    reference = [{"seed": 0, "score": 60.0}, {"seed": 1, "score": 63.0}]
    half = stats.t.ppf(0.975, 1) * 0.125**0.5 / 2**0.5
    assert paired_score_difference(runs, reference) == pytest.approx((1.75, 1.75 - half, 1.75 + half))
    assert paired_score_difference(runs[:1], reference) is None


@pytest.fixture
def tiny_setup(bundled_checkpoint, tmp_path):
    hf_logging.set_verbosity_error()
    tokenizer = AutoTokenizer.from_pretrained(bundled_checkpoint)
    checkpoint = tmp_path / "tiny"
    torch.manual_seed(0)
    FfnBertForMaskedLM(tiny_config(vocab_size=tokenizer.vocab_size, max_position_embeddings=128)).save_pretrained(
        checkpoint
    )
    tokenizer.save_pretrained(checkpoint)
    root = tmp_path / "data"
    write_stsb(root / "stsb")
    cola = root / "cola"
    cola.mkdir()
    lines = "".join(f"src\t{i % 2}\t\tthe {'cat sat' if i % 2 else 'sat cat'} number {i}.\n" for i in range(12))
    (cola / "in_domain_train.tsv").write_text(lines)
    (cola / "in_domain_dev.tsv").write_text(lines)
    yield str(checkpoint), root
    hf_logging.set_verbosity_warning()


def test_compare_tasks_runs_resumes_and_refuses_other_settings(tiny_setup, tmp_path, capsys):
    checkpoint, root = tiny_setup
    spec = importlib.util.spec_from_file_location("compare_tasks", REPO / "studies" / "four_tasks" / "compare_tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    output = tmp_path / "out"
    argv = [
        "--model_name_or_path",
        checkpoint,
        "--data_root",
        str(root),
        "--tasks",
        "cola",
        "stsb",
        "--seeds",
        "0",
        "1",
        "--max_steps",
        "2",
        "--evals_per_run",
        "2",
        "--batch_size",
        "4",
        "--max_seq_length",
        "32",
        "--threads",
        "1",
        "--output_dir",
        str(output),
    ]
    assert module.main(argv) == 0
    runs = [json.loads(line) for line in (output / "task_runs.jsonl").read_text().splitlines()]
    assert sorted((r["task"], r["variant"], r["seed"]) for r in runs) == sorted(
        (task, variant, seed) for task in ("cola", "stsb") for variant in (BASELINE, "geglu") for seed in (0, 1)
    )
    stsb = next(r for r in runs if r["task"] == "stsb")
    assert stsb["score"] == pytest.approx(50 * (stsb["metrics"]["pearson"] + stsb["metrics"]["spearman"]))
    assert stsb["split"] == "eval" and stsb["unpad_tokens"] is True and stsb["train_rows_full"] == 12
    assert [point["step"] for point in stsb["curve"]] == [0, 1, 2]
    table = (output / "tasks.md").read_text()
    assert "## GLUE-style average over cola, stsb" in table and "| geglu | 0, 1 |" in table
    assert "## Baseline convergence" in table and "s/step training" in table
    # resume: every run is in the file, nothing runs again
    assert module.main(argv) == 0
    assert len((output / "task_runs.jsonl").read_text().splitlines()) == 8
    with pytest.raises(ValueError, match=r"holds cola runs with settings .* use another --output_dir"):
        module.main([*argv[:-2], "--learning_rate", "1e-3", "--output_dir", str(output)])
    # the table rewritten alone names the command that runs it, not --report_only
    assert module.main([*argv, "--report_only"]) == 0
    command = next(line for line in (output / "tasks.md").read_text().splitlines() if line.startswith("Command: "))
    assert "--report_only" not in command and "--tasks cola stsb" in command
    # runs from two machines (a table resumed elsewhere): the report names each with its count of runs
    lines = (output / "task_runs.jsonl").read_text().splitlines()
    moved = {**json.loads(lines[0]), "machine": {"cpu": "Other CPU", "cores": 16}}
    (output / "task_runs.jsonl").write_text("\n".join([json.dumps(moved), *lines[1:]]) + "\n")
    assert module.main([*argv, "--report_only"]) == 0
    cpu = runs[1]["machine"]["cpu"]
    assert (
        f"Machines (fp32 results differ in the last bits between CPUs): Other CPU, 16 logical cores (1 run); "
        f"{cpu}, {runs[1]['machine']['cores']} logical cores (7 runs), "
    ) in (output / "tasks.md").read_text()
    # --variants naming none runs only the --healed folder (one worker's unit: a variant and a seed)
    unit = [*argv[: argv.index("--tasks")], "--tasks", "cola", "--seeds", "0", *argv[argv.index("--max_steps") :]]
    convert_checkpoint(checkpoint, tmp_path / "pre-ln", layer_norm_position="pre")
    assert module.main([*unit, "--variants", "--healed", f"pre-ln={tmp_path / 'pre-ln'}"]) == 0
    runs = [json.loads(line) for line in (output / "task_runs.jsonl").read_text().splitlines()]
    assert [(r["task"], r["variant"], r["seed"]) for r in runs[8:]] == [("cola", "pre-ln healed", 0)]
    # the student re-made (another machine: the same recipe, weights differing in the last bits) is refused unless
    # --accept_remade_students; the runs then count two weight sets for the variant
    weights = tmp_path / "pre-ln" / "model.safetensors"
    tensors = load_file(weights)
    name = next(iter(tensors))
    tensors[name] = torch.nextafter(tensors[name], torch.full_like(tensors[name], math.inf))  # one ulp up
    save_file(tensors, weights, metadata={"format": "pt"})
    healed_unit = [*unit, "--variants", "--healed", f"pre-ln={tmp_path / 'pre-ln'}"]
    with pytest.raises(
        ValueError,
        match=r"'pre-ln healed' was run from other weights .* made by the same recipe: "
        r"--accept_remade_students resumes it",
    ):
        module.main(healed_unit)
    assert (
        module.main(
            [
                *healed_unit[: healed_unit.index("--seeds")],
                "--seeds",
                "1",
                *healed_unit[healed_unit.index("--seeds") + 2 :],
                "--accept_remade_students",
            ]
        )
        == 0
    )
    runs = [json.loads(line) for line in (output / "task_runs.jsonl").read_text().splitlines()]
    assert [(r["variant"], r["seed"]) for r in runs[9:]] == [("pre-ln healed", 1)]
    assert runs[9]["recipe_sha256"] == runs[8]["recipe_sha256"] != runs[0]["recipe_sha256"]  # None: bundled
    assert runs[9]["checkpoint_sha256"] != runs[8]["checkpoint_sha256"]
    assert (
        "Start weights: pre-ln healed: 2 weight sets made by one recipe (re-made on another machine); every other "
        "variant: one."
    ) in (output / "tasks.md").read_text()
    # another recipe (other conversion options) is refused with or without the flag
    report = json.loads((tmp_path / "pre-ln" / "conversion_report.json").read_text())
    (tmp_path / "pre-ln" / "conversion_report.json").write_text(json.dumps({**report, "init": "other"}))
    with pytest.raises(ValueError, match=r"made by another \(or an unrecorded\) recipe; use another --output_dir"):
        module.main([*healed_unit, "--accept_remade_students"])
    # the table rewritten where the student folder is gone (another machine): --report_only reads only the runs file
    shutil.rmtree(tmp_path / "pre-ln")
    assert module.main([*healed_unit, "--report_only"]) == 0
    assert "| pre-ln healed | 0, 1 |" in (output / "tasks.md").read_text()
    assert (
        f"Run time: {sum(r['wall_seconds'] for r in runs) / 3600:.2f} h summed over 10 runs"
        in (output / "tasks.md").read_text()
    )
    with pytest.raises(SystemExit):
        module.main([*unit, "--variants"])
    assert "--variants names none and no --healed is given: nothing to run" in capsys.readouterr().err


def _baseline_run(task, seed, scores, losses):
    """A baseline run of 100 steps with validation points at steps 0, 40, 80 and 100 (the last fifth: 80 and 100)."""
    curve = [
        {"step": step, "score": score, "eval_loss": loss}
        for step, score, loss in zip((0, 40, 80, 100), scores, losses, strict=True)
    ]
    return {"variant": BASELINE, "task": task, "seed": seed, "max_steps": 100, "curve": curve}


def test_convergence_labels_each_run_by_its_last_fifth():
    """A Matthews correlation stuck at 0 is flat in points (its relative change, 0/0, would be nan); a score rising
    5 points over the fifth is still rising; a rising validation loss is past its best; a falling one still falls."""
    from studies.four_tasks.task_comparison import convergence_lines

    lines = convergence_lines(
        [
            _baseline_run("cola", 0, [5.0, 0.0, 0.0, 0.0], [0.7, 0.62, 0.62, 0.62]),
            _baseline_run("stsb", 0, [0.0, 50.0, 70.0, 75.0], [8.0, 2.0, 1.0, 1.0]),
            _baseline_run("mrpc", 0, [50.0, 80.0, 84.0, 84.2], [0.6, 0.4, 0.40, 0.44]),
            _baseline_run("rt_polarity", 0, [50.0, 80.0, 85.0, 85.0], [0.6, 0.4, 0.40, 0.38]),
        ]
    )
    by_task = {line.split(",")[0][2:]: line for line in lines if not line.startswith("- **")}
    assert by_task["cola"].endswith("task score +0.00 points: flat"), by_task["cola"]
    # stsb: slope (75 - 70) / 20 = 0.25 per step, over the fifth (20 steps) → +5.00 points
    assert by_task["stsb"].endswith("task score +5.00 points: score still rising"), by_task["stsb"]
    # mrpc: loss 0.40 → 0.44 is +0.04 over a mean of 0.42: +9.52%; the score's +0.20 points is under FLAT_POINTS
    assert "validation loss +9.52%" in by_task["mrpc"] and by_task["mrpc"].endswith("+0.20 points: past its best")
    # rt_polarity: −0.02 over a mean of 0.39: −5.13%
    assert "validation loss -5.13%" in by_task["rt_polarity"]
    assert by_task["rt_polarity"].endswith("loss still falling"), by_task["rt_polarity"]
    assert "- **cola**, 1 seed (1 flat): fewer than 2 seeds with a finite change: no interval" in lines


def test_convergence_over_seeds_is_a_t_interval_of_the_score_change():
    """Per task over seeds: the mean score change over the last fifth with its Student-t 95% interval; above 0 is
    still improving, else (inside 0) no rise or fall was detected."""
    from studies.four_tasks.task_comparison import convergence_lines

    runs = [
        _baseline_run("stsb", seed, [0.0, 50.0, 70.0, 70.0 + rise], [8.0, 2.0, 1.0, 1.0])
        for seed, rise in enumerate((5.0, 6.0, 7.0))
    ]  # +5, +6, +7 points over the fifth
    runs += [
        _baseline_run("cola", seed, [0.0, 30.0, 33.0, 33.0 + rise], [0.7, 0.6, 0.6, 0.6])
        for seed, rise in enumerate((2.0, -2.0, 0.5))
    ]  # +2, −2, +0.5: no rise or fall detected
    lines = convergence_lines(runs)
    half = stats.t.ppf(0.975, 2) * 1.0 / 3**0.5  # the sd of (5, 6, 7) is 1
    assert (
        f"- **stsb**, 3 seeds (3 score still rising): task score +6.00 [{6 - half:+.2f}, {6 + half:+.2f}] points "
        "over the last fifth: **still improving**: not converged at this budget"
    ) in lines, lines
    cola = next(line for line in lines if line.startswith("- **cola**"))
    mean, sd = 0.5 / 3, stats.tstd([2.0, -2.0, 0.5])
    half = stats.t.ppf(0.975, 2) * sd / 3**0.5
    assert cola == (
        f"- **cola**, 3 seeds (1 flat, 1 past its best, 1 score still rising): task score {mean:+.2f} "
        f"[{mean - half:+.2f}, {mean + half:+.2f}] points over the last fifth: no rise or fall detected; "
        f"these seeds leave a change of up to {max(half - mean, mean + half):.2f} points possible"
    ), cola


def test_convergence_names_nan_falls_and_scores_that_never_move():
    """A nan in the curve is named, not read as flat, and left out of the interval; a fall on every seed is a
    detected fall (past its best); a score stuck at 0 on every seed is no change, not convergence."""
    from studies.four_tasks.task_comparison import convergence_lines, seeds_verdict

    nan = float("nan")
    lines = convergence_lines(
        [
            _baseline_run("stsb", 0, [0.0, 50.0, 70.0, nan], [8.0, 2.0, 1.0, 1.0]),
            _baseline_run("mrpc", 0, [50.0, 80.0, 84.0, 84.0], [0.6, 0.4, nan, 0.4]),
        ]
    )
    assert lines[0].endswith("points: nan in the curve") and lines[1].endswith("points: nan in the curve"), lines
    assert seeds_verdict([nan, 1.0]) == "fewer than 2 seeds with a finite change: no interval"
    falls = [-9.0, -10.0, -11.0]
    half = stats.t.ppf(0.975, 2) * 1.0 / 3**0.5
    assert seeds_verdict(falls) == (
        f"task score -10.00 [{-10 - half:+.2f}, {-10 + half:+.2f}] points over the last "
        "fifth: **falling**: past its best"
    )
    assert seeds_verdict([0.0, 0.0, nan]).startswith("no change on any seed")


def test_read_runs_leaves_a_line_being_appended(tmp_path):
    """Several processes append to one runs file: a last line without its newline is not read (yet)."""
    spec = importlib.util.spec_from_file_location("compare_tasks", REPO / "studies" / "four_tasks" / "compare_tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = tmp_path / "task_runs.jsonl"
    path.write_text('{"seed": 0}\n{"seed": 1}\n{"seed": 2, "sco')
    assert module.read_runs(path) == [{"seed": 0}, {"seed": 1}]
    path.write_text('{"seed": 0}\n')
    assert module.read_runs(path) == [{"seed": 0}]


def test_recipe_ignores_paths_and_weights_but_not_arguments(tmp_path):
    """The recipe of a healed folder: the same for a copy made elsewhere (other paths, other weights in the last
    bits), another for other healing arguments or another source; None without a report or its source."""
    from studies.common.start_weights import recipe_sha256

    source = tmp_path / "source"
    source.mkdir()
    save_file({"w": torch.ones(2)}, source / "model.safetensors")

    def folder(name, student="out/a", steps=1000, weights=1.0, source_dir=source):
        path = tmp_path / name
        path.mkdir()
        save_file({"w": torch.full((2,), weights)}, path / "model.safetensors")
        healing = {
            "arguments": {"student": student, "eval_dir": f"{student}/eval", "method": "layerwise"},
            "training": {"seed": 0},
            "layerwise": {"arguments": {"layerwise_steps": steps}},
            "data": {"train_files": [student], "documents": 65, "blocks": 512, "block_tokens": 128},
        }
        report = {
            "source": str(source_dir),
            "model_class": "FfnBertModel",
            "init": "pruned",
            "config_changes": {},
            "healing": healing,
        }
        (path / "conversion_report.json").write_text(json.dumps(report))
        return str(path)

    first = recipe_sha256(folder("a"))
    assert first is not None and len(first) == 64
    assert recipe_sha256(folder("b", student="/elsewhere/b", weights=1.0000001)) == first
    assert recipe_sha256(folder("c", steps=500)) != first
    other = tmp_path / "other"
    other.mkdir()
    save_file({"w": torch.zeros(2)}, other / "model.safetensors")
    assert recipe_sha256(folder("d", source_dir=other)) != first
    assert recipe_sha256(folder("e", source_dir=tmp_path / "gone")) is None
    assert recipe_sha256(str(source)) is None  # no conversion_report.json
