"""The GPU check (`python -m studies.benchmark.gpu`) on the CPU with tiny sizes: it runs, writes the document the
issue asks for, and judges its goals from the numbers it holds. It never asserts a speed (speed is the GPU run's
business: studies/benchmark/gpu.json)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from hf_ffn.cli import build_parser
from studies.benchmark import gpu


def test_half_real_batches_are_about_half_real():
    lengths = gpu.half_real_lengths(32, 512)
    assert len(lengths) == 32 and min(lengths) >= 64 and max(lengths) <= 448
    assert 0.4 < sum(lengths) / (32 * 512) < 0.6
    batch = gpu.benchmark_batch(32, 128, full=True, device=gpu.torch.device("cpu"))
    assert batch["attention_mask"].all() and batch["input_ids"].shape == (32, 128)


def test_goals_are_judged_from_the_measured_numbers():
    results = {
        "unpadded": {"train_32x512": 0.64, "infer_32x512": 0.66, "train_32x128": 1.0, "infer_full": 1.06},
        "pretraining": {"study_model_speedup": 4.2, "mask_loss_difference": -0.021, "bert_base_vs_run_mlm": 1.29},
        "parity": {"fp32_eager": True, "unpadded_within_tolerance": False},
    }
    assert gpu.goals(results) == {
        "unpadded_train_32x512": True,
        "unpadded_infer_32x512": False,
        "unpadded_train_32x128": True,
        "unpadded_infer_full": False,
        "study_model_speedup_4x": True,
        "study_model_loss_within_0.02": False,
        "bert_base_1.3x_run_mlm": False,
        "parity_fp32_eager": True,
        "parity_unpadded_within_tolerance": False,
    }


def test_quick_run_writes_the_document(tmp_path, capsys):
    assert gpu.main(["--quick", "--sections", "parity", "unpadded", "--output_dir", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "gpu.json").read_text())
    assert document["parity"] == {
        "fp32_eager": True,
        "fp32_sdpa": True,
        "bf16_eager": True,
        "bf16_sdpa": True,
        "unpadded_within_tolerance": True,
    }
    assert set(document["unpadded"]) == {f"{m}_{s}" for m in ("train", "infer") for s in ("32x512", "32x128", "full")}
    assert all(ratio > 0 for ratio in document["unpadded"].values())
    assert document["errors"] == {} and document["device"].startswith("cpu") and document["quick"] is True
    assert document["goals"] is None  # tiny sizes judge nothing
    infer = document["details"]["unpadded"]["infer_32x128"]
    assert set(infer["ms"]) == {"upstream", "switch_off", "unpadded"}
    assert 0.3 < infer["real_token_fraction"] < 0.7 and infer["batch"] == [4, 32]


def test_bad_rounds_name_the_option(capsys):
    with pytest.raises(SystemExit):
        gpu.main(["--rounds", "0"])
    assert "--rounds must be at least 1, got 0" in capsys.readouterr().err


def test_published_text_holds_no_machine_path():
    from pathlib import Path

    text = f"File {Path.cwd() / 'hf_ffn' / 'unpadding.py'}, File {gpu.json.__file__}"
    cleaned = gpu.public(text)
    assert str(Path.cwd()) not in cleaned and "File hf_ffn/unpadding.py" in cleaned
    assert cleaned.endswith("json/__init__.py")  # the standard library's folder left out too


def test_gpu_calls_hf_ffn_commands_parse():
    """Every `python3 -m hf_ffn.cli …` line of studies/gpu_call.sh parses with today's options (the script is run
    only on a lent GPU, so a renamed option would first fail there: `parity --model` did, after `--model` went)."""
    script = (Path(__file__).parents[1] / "studies" / "gpu_call.sh").read_text()
    calls = re.findall(r"python3 -m hf_ffn\.cli ([^>\n]+)", script)
    assert calls, "studies/gpu_call.sh runs no hf-ffn command"
    for call in calls:
        argv = shlex.split(call.replace("$DEVICE", "cuda").replace('"$dtype"', "float32").rstrip("\\ "))
        args = build_parser().parse_args(argv)
        assert args.model_name_or_path == "/tmp/small_bert" and args.device == "cuda"
