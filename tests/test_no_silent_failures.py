"""Issue 55, what a new user broke: a load that did not load is an error (renamed weights, a truncated file, a folder
without a tokenizer), a conversion is never called exact beside a measured difference, a training time excludes the
final evaluation, two runs cannot share an output folder, an interrupted run says how to resume and a rerun never
silently starts over, and a from-scratch FFN width follows the hidden size. Each test fails on the code before the
fix with the wrong value it gave."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import BertConfig, BertForPreTraining

from hf_ffn import FfnBertForSequenceClassification, FfnBertModel
from hf_ffn.checkpoints import CheckpointNotLoadedError, load_pretrained, load_tokenizer
from hf_ffn.cli import EXIT_INTERRUPTED
from hf_ffn.cli import main as cli
from hf_ffn.conversion import convert_checkpoint, load_converted, measure_difference
from hf_ffn.conversion.folders import source_tokenizer
from hf_ffn.files import LOCK_FILE, RunInterrupted, one_run_per_output_dir
from hf_ffn.finetune.run import finetune_argv
from hf_ffn.healing.run import load_teacher
from hf_ffn.mlm.arguments import PretrainingArguments
from hf_ffn.mlm.run import LOAD_HINT
from hf_ffn.parity import run_parity, variant_report
from hf_ffn.training.arguments import ModelArguments
from hf_ffn.training.outputs import check_output_dir, load_model

from .conftest import TINY

TOKENIZER_NAMES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


@pytest.fixture(scope="module")
def folder(tokenizer, tmp_path_factory) -> str:
    """A tiny upstream BERT checkpoint (pre-training heads, seeded) with a tokenizer."""
    path = tmp_path_factory.mktemp("tiny_bert_tok")
    torch.manual_seed(0)
    BertForPreTraining(BertConfig(**{**TINY, "vocab_size": len(tokenizer)})).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def copy_of(folder: str, target: Path) -> Path:
    shutil.copytree(folder, target)
    return target


@pytest.fixture
def renamed(folder, tmp_path) -> Path:
    """The checkpoint with every weight under another prefix (`roberta.`): nothing of it loads into BERT."""
    path = copy_of(folder, tmp_path / "renamed")
    weights = load_file(path / "model.safetensors")
    save_file({f"roberta.{k}": v for k, v in weights.items()}, path / "model.safetensors", metadata={"format": "pt"})
    return path


@pytest.fixture
def truncated(folder, tmp_path) -> Path:
    path = copy_of(folder, tmp_path / "truncated")
    os.truncate(path / "model.safetensors", (path / "model.safetensors").stat().st_size // 2)
    return path


@pytest.fixture
def no_tokenizer(folder, tmp_path) -> Path:
    path = copy_of(folder, tmp_path / "no_tokenizer")
    for name in TOKENIZER_NAMES:
        (path / name).unlink(missing_ok=True)
    return path


RENAMED = r"did not load: \d+ of \d+ encoder weights missing \(first: .*\), \d+ unexpected \(first: roberta\."


def test_parity_refuses_a_checkpoint_whose_weights_never_loaded(renamed, folder, capsys):
    # Before: both sides initialised the same seeded random weights and every row was equal ("EXACT", exit 0).
    with pytest.raises(CheckpointNotLoadedError, match=RENAMED):
        run_parity(str(renamed))
    with pytest.raises(CheckpointNotLoadedError, match=RENAMED):
        variant_report(str(renamed), ffn_type="swiglu")
    with pytest.raises(SystemExit) as exit_info:
        cli(["parity", "--model_name_or_path", str(renamed)])
    assert exit_info.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]  # (progress bars aside)
    assert len(err) == 1 and str(renamed) in err[0] and "unexpected (first: roberta." in err[0]
    assert cli(["parity", "--model_name_or_path", folder]) == 0  # the same weights under BERT's names: exact
    assert "every encoder weight loaded from the checkpoint" in capsys.readouterr().out


def test_every_command_refuses_it_and_writes_nothing(renamed, tmp_path, capsys):
    # Before: convert printed "exact, function-preserving" beside "equal=False" and wrote "exact": true.
    output = tmp_path / "converted"
    with pytest.raises(CheckpointNotLoadedError, match=RENAMED):
        convert_checkpoint(str(renamed), output, ffn_type="geglu")
    assert not output.exists()
    with pytest.raises(CheckpointNotLoadedError, match=RENAMED):  # finetune and mlm load through load_model
        load_model(ModelArguments(model_name_or_path=str(renamed)), FfnBertForSequenceClassification, num_labels=2)
    with pytest.raises(CheckpointNotLoadedError, match=RENAMED):  # heal's teacher
        load_teacher(str(renamed), with_head=False)
    with pytest.raises(SystemExit) as exit_info:
        cli(["convert", str(renamed), str(output), "--variant", "geglu"])
    assert exit_info.value.code == 2 and "did not load" in capsys.readouterr().err and not output.exists()


def test_what_a_variant_or_head_adds_stays_a_report(folder):
    # The weights a variant adds (gate_proj, Pre-LN's final_norm, a fresh FFN) and a head the checkpoint never had
    # are new by design: reported, not refused.
    _, geglu = load_converted(folder, FfnBertModel, ffn_type="geglu")
    assert geglu.exact and not geglu.new  # gate_proj mapped from the FFN, up_proj a constant
    _, pre = load_converted(folder, FfnBertModel, layer_norm_position="pre")
    assert {"encoder.final_norm.weight", "encoder.final_norm.bias"} <= set(pre.new)
    _, fresh = load_converted(folder, FfnBertModel, ffn_type="swiglu", init="fresh", width="matched")
    assert {f"encoder.layer.{i}.mlp.gate_proj.weight" for i in range(TINY["num_hidden_layers"])} <= set(fresh.new)
    _, report = load_model(ModelArguments(model_name_or_path=folder), FfnBertForSequenceClassification, num_labels=2)
    assert set(report["new_weights"]) == {"classifier.weight", "classifier.bias"}


def test_a_truncated_weights_file_is_one_line_exit_2(truncated, tmp_path, capsys):
    # Before: a raw SafetensorError traceback, exit 1 (for parity: "outputs differ").
    with pytest.raises(CheckpointNotLoadedError, match="its weights file cannot be read .* truncated or corrupt"):
        load_pretrained(FfnBertModel, truncated)
    for argv in (["parity", "--model_name_or_path", str(truncated)], ["convert", str(truncated), str(tmp_path / "o")]):
        with pytest.raises(SystemExit) as exit_info:
            cli([*argv, "--ffn_type", "geglu"] if argv[0] == "convert" else argv)
        assert exit_info.value.code == 2
        assert "truncated or corrupt" in capsys.readouterr().err


def test_a_folder_without_tokenizer_files_is_refused(no_tokenizer, tmp_path):
    # Before: transformers built an empty 5-token BertTokenizer (every word [UNK]); sts scored 0.038 with it and
    # finetune trained and saved it.
    with pytest.raises(CheckpointNotLoadedError, match=rf"{no_tokenizer} has no tokenizer \(none of tokenizer.json"):
        load_tokenizer(no_tokenizer)
    from hf_ffn.training.outputs import load_tokenizer as training_tokenizer

    with pytest.raises(CheckpointNotLoadedError, match="has no tokenizer .* or pass --tokenizer_name"):
        training_tokenizer(ModelArguments(model_name_or_path=str(no_tokenizer)))
    (no_tokenizer / "tokenizer_config.json").write_text("{}")  # a config without a vocabulary: still none
    with pytest.raises(CheckpointNotLoadedError, match="has no tokenizer"):
        load_tokenizer(no_tokenizer)
    assert source_tokenizer(str(no_tokenizer)) is None  # convert copies no tokenizer, never the empty one
    out = tmp_path / "converted"
    convert_checkpoint(str(no_tokenizer), out, ffn_type="geglu")
    assert not any((out / name).exists() for name in ("vocab.txt", "tokenizer.json"))


def test_convert_never_calls_a_differing_output_exact(folder):
    model, report = load_converted(folder, FfnBertModel, ffn_type="geglu")
    measure_difference(folder, model, report)
    assert report.exact and report.difference["last_hidden_state"]["equal"]
    with torch.no_grad():
        model.encoder.layer[0].mlp.down_proj.bias.add_(1.0)
    measure_difference(folder, model, report)
    assert report.difference["last_hidden_state"]["equal"] is False
    assert report.exact is False  # before: true beside equal=False


def write_csv(path: Path) -> str:
    rows = [("good movie", "pos"), ("great film", "pos"), ("bad movie", "neg"), ("awful film", "neg")] * 4
    path.write_text("sentence,label\n" + "".join(f"{text},{label}\n" for text, label in rows))
    return str(path)


def finetune_args(folder: str, tmp_path: Path, output_dir: Path, *extra: str) -> list[str]:
    data = write_csv(tmp_path / "train.csv")
    return [
        *("--model_name_or_path", folder, "--train_file", data, "--validation_file", data),
        *("--output_dir", str(output_dir), "--max_steps", "1", "--per_device_train_batch_size", "4"),
        *("--max_seq_length", "8", "--report_to", "none", "--disable_tqdm", "true", *extra),
    ]


def test_one_step_training_time_excludes_the_final_evaluation(folder, tmp_path):
    # Before: the final evaluation (after train()) was subtracted from train_runtime: a 1-step run reported
    # train_seconds -28.87 and negative tokens/s.
    outcome = finetune_argv(finetune_args(folder, tmp_path, tmp_path / "out", "--eval_strategy", "no"))
    results = outcome["results"]
    assert outcome["train_seconds"] == results["train_runtime"] > 0  # no evaluation ran inside training
    assert results["train_tokens_per_second"] == pytest.approx(outcome["train_tokens"] / results["train_runtime"])
    assert results["eval_runtime"] > 0  # the final evaluation ran, and is not in the training time


def hold_lock(output_dir: Path) -> subprocess.Popen:
    """Another process holding the run lock of `output_dir` (as a running `hf-ffn finetune` does)."""
    code = (
        "import sys, time; from filelock import FileLock; lock = FileLock(sys.argv[1]); lock.acquire(); "
        "print('locked', flush=True); time.sleep(600)"
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", code, str(output_dir / LOCK_FILE)], stdout=subprocess.PIPE)
    assert holder.stdout.readline().strip() == b"locked"
    return holder


def test_two_runs_into_one_output_dir_the_second_is_refused(folder, tmp_path):
    # Before: two runs started one second apart both exited 0 and mixed their checkpoints in one folder.
    output_dir = tmp_path / "race"
    holder = hold_lock(output_dir)
    try:
        with pytest.raises(FileExistsError, match=rf"--output_dir '{output_dir}' is in use by another run"):
            finetune_argv(finetune_args(folder, tmp_path, output_dir))
        assert sorted(p.name for p in output_dir.iterdir()) == [LOCK_FILE]  # nothing of the second run
    finally:
        holder.kill()  # a crash: the OS releases the lock with the process
        holder.wait()
    finetune_argv(finetune_args(folder, tmp_path, output_dir))
    assert (output_dir / "config.json").is_file() and not (output_dir / LOCK_FILE).exists()


def test_the_lock_is_reentrant_and_a_failed_new_folder_is_removed(tmp_path):
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path / "new"), report_to="none")

    @one_run_per_output_dir
    def nested(training_args, depth):  # a warm-up's first phase runs inside its run, in the same process
        assert (Path(training_args.output_dir) / LOCK_FILE).exists()
        return nested(training_args, depth - 1) if depth else "done"

    assert nested(args, 2) == "done" and not (tmp_path / "new" / LOCK_FILE).exists()

    @one_run_per_output_dir(disposable=("tokenizer",))
    def fails(training_args):
        (Path(training_args.output_dir) / "tokenizer").mkdir()  # what a failed mlm run left behind
        raise ValueError("bad input found late")

    shutil.rmtree(tmp_path / "new")
    with pytest.raises(ValueError, match="found late"):
        fails(args)
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "given"
    kept.mkdir()
    with pytest.raises(ValueError):
        fails(TrainingArguments(output_dir=str(kept), report_to="none"))
    assert (kept / "tokenizer").is_dir()  # a folder the user had is never removed

    @one_run_per_output_dir(disposable=("tokenizer", "short_blocks/"))
    def fails_in_a_warmup(training_args, checkpoint):  # a warm-up's first phase: its folder inside the run's
        first = Path(training_args.output_dir) / "short_blocks"
        (first / "tokenizer").mkdir(parents=True)
        if checkpoint:
            (first / "checkpoint-2").mkdir()
        raise ValueError("bad input found late")

    for checkpoint, left in ((False, False), (True, True)):  # a first phase's checkpoint is kept for resuming
        with pytest.raises(ValueError):
            fails_in_a_warmup(
                TrainingArguments(output_dir=str(tmp_path / f"warm{checkpoint}"), report_to="none"), checkpoint
            )
        assert (tmp_path / f"warm{checkpoint}" / "short_blocks" / "checkpoint-2").is_dir() is left
        assert (tmp_path / f"warm{checkpoint}").exists() is left

    @one_run_per_output_dir
    def interrupted_layerwise(training_args):  # heal's resumable layer-wise fits are kept
        (Path(training_args.output_dir) / "layerwise").mkdir()
        raise KeyboardInterrupt

    with pytest.raises(RunInterrupted):
        interrupted_layerwise(TrainingArguments(output_dir=str(tmp_path / "heal"), report_to="none"))
    assert (tmp_path / "heal" / "layerwise").is_dir()


def test_ctrl_c_names_the_last_checkpoint_and_a_rerun_never_starts_over(folder, tmp_path, monkeypatch, capsys):
    output_dir = tmp_path / "interrupted"
    argv = finetune_args(folder, tmp_path, output_dir, "--max_steps", "2", "--save_strategy", "steps")
    argv += ["--save_steps", "1"]

    def ctrl_c(trainer):  # Ctrl-C after training saved checkpoint-1 and checkpoint-2, before the final save
        raise KeyboardInterrupt

    monkeypatch.setattr("hf_ffn.finetune.classification.final_evaluation", ctrl_c)
    with pytest.raises(SystemExit) as exit_info:
        cli(["finetune", *argv])
    assert exit_info.value.code == EXIT_INTERRUPTED == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"hf-ffn finetune: interrupted; the last checkpoint is {output_dir}/checkpoint-2: rerun the same command "
        f"with --resume_from_checkpoint last to go on from it"
    )
    monkeypatch.undo()
    # Before: the rerun started again at step 0 and overwrote the checkpoints.
    with pytest.raises(FileExistsError, match=r"holds the checkpoints of an earlier run \(the last: .*checkpoint-2\)"):
        finetune_argv(argv)
    with pytest.raises(FileExistsError, match="--resume_from_checkpoint last"):
        check_output_dir(str(output_dir))
    outcome = finetune_argv([*argv, "--resume_from_checkpoint", "last"])
    assert (output_dir / "config.json").is_file() and outcome["results"]["train_runtime"] >= 0


def test_ctrl_c_before_any_checkpoint_says_so(tmp_path):
    from transformers import TrainingArguments

    @one_run_per_output_dir
    def interrupted(training_args):
        raise KeyboardInterrupt

    with pytest.raises(RunInterrupted, match=r"no checkpoint saved yet in .*: run again to start over"):
        interrupted(TrainingArguments(output_dir=str(tmp_path / "x"), report_to="none"))


@pytest.mark.parametrize(
    "given, width", [({}, 1024), ({"hidden_size": 64}, 256), ({"hidden_size": 64, "intermediate_size": 100}, 100)]
)
def test_the_scratch_ffn_width_follows_the_hidden_size(given, width):
    # Before: --hidden_size 64 kept 1024 (16x), though the help said "1024 = 4 x hidden".
    assert PretrainingArguments(**given).scratch("intermediate_size") == width


def test_the_smaller_ones(folder, tmp_path, capsys):
    from hf_ffn.training.readers import decode_text

    converted = tmp_path / "geglu"
    convert_checkpoint(folder, converted, ffn_type="geglu")
    # An FfnBert source: the error names its config's fields, not the user's option with the config's value.
    with pytest.raises(SystemExit):
        cli(["convert", str(converted), str(tmp_path / "o"), "--layer_norm_position", "middle"])
    err = capsys.readouterr().err
    assert "config.layer_norm_position 'post'" in err and "--layer_norm_position 'post'" not in err
    # UTF-16 text: named, not "need at least two documents, got 1".
    with pytest.raises(ValueError, match=r"is UTF-16 text .*iconv -f UTF-16 -t UTF-8"):
        decode_text("one\n\ntwo\n".encode("utf-16"), "doc.txt")
    wide = tmp_path / "wide.txt"
    wide.write_bytes("one document\n\nanother one\n".encode("utf-16"))
    with pytest.raises(SystemExit) as exit_info:
        cli(["mlm", "--train_files", str(wide), "--max_steps", "1", "--output_dir", str(tmp_path / "mlm")])
    assert exit_info.value.code == 2 and "is UTF-16 text" in capsys.readouterr().err
    assert not (tmp_path / "mlm").exists()  # a failed run leaves no folder (nor its tokenizer) behind
    # A Latin-1 CSV: named as an encoding problem first, not as a column-type one.
    latin = tmp_path / "latin.csv"
    latin.write_bytes("sentence,label\ncaf\xe9 good,pos\nna\xefve bad,neg\n".encode("latin-1"))
    argv = finetune_args(folder, tmp_path, tmp_path / "ft")
    argv[argv.index("--train_file") + 1] = argv[argv.index("--validation_file") + 1] = str(latin)
    with pytest.raises(ValueError, match=r"are not all UTF-8 text .*iconv -f latin1 -t UTF-8"):
        finetune_argv(argv)
    # --output_dir a file: named, not "[Errno 17] File exists".
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    argv = finetune_args(folder, tmp_path, a_file)
    with pytest.raises(FileExistsError, match=rf"--output_dir '{a_file}': '{a_file}' is a file, not a folder"):
        finetune_argv(argv)
    assert a_file.read_text() == "mine"
    # The mlm "load it" line says how to load the model without hf_ffn too.
    assert "AutoModelForMaskedLM.from_pretrained('F', trust_remote_code=True)" in LOAD_HINT.format(folder="F")
    assert json.loads((converted / "conversion_report.json").read_text())["exact"] is True


# --- found by a fresh new-user check of the fixes above ------------------------------------------------------------


def test_a_fine_tuned_classifier_checkpoint_passes_parity_and_takes_another_head(folder, tmp_path):
    # A 2-label BertForSequenceClassification: the multiple-choice head (1 label) does not fit its classifier; that
    # head is new (seeded), not a load that failed (it was refused as "shapes differ from its config.json's").
    from transformers import BertForSequenceClassification

    path = tmp_path / "seqcls"
    torch.manual_seed(0)
    config = BertConfig.from_pretrained(folder, num_labels=2)
    BertForSequenceClassification.from_pretrained(folder, config=config).save_pretrained(path)
    rows = run_parity(str(path))
    assert rows and all(row.equal for row in rows if row.tolerance is None)
    _, report = load_model(ModelArguments(model_name_or_path=str(path)), FfnBertForSequenceClassification, num_labels=1)
    assert set(report["new_weights"]) == {"classifier.weight", "classifier.bias"}  # re-sized: new, and said


def test_a_config_with_fewer_layers_than_the_weights_is_refused(folder, tmp_path):
    # It loaded 1 of 2 layers and said EXACT (sts 0.668 instead of 0.867 on the bundled checkpoint at 4 of 6).
    path = copy_of(folder, tmp_path / "short")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    with pytest.raises(
        CheckpointNotLoadedError, match=r"holds \d+ encoder weights .* no place for \(first: .*layer\.1\."
    ):
        load_pretrained(FfnBertModel, path)
    with pytest.raises(CheckpointNotLoadedError, match="no place for"):
        run_parity(str(path))


def test_a_truncated_pytorch_model_bin_is_refused(folder, tmp_path):
    path = tmp_path / "bin"  # an older checkpoint's layout: pytorch_model.bin, no safetensors
    path.mkdir()
    shutil.copy(Path(folder) / "config.json", path / "config.json")
    weights = path / "pytorch_model.bin"
    torch.save(load_file(Path(folder) / "model.safetensors"), weights)
    assert load_pretrained(FfnBertModel, path)[0] is not None  # whole, it loads
    os.truncate(weights, weights.stat().st_size // 2)
    with pytest.raises(CheckpointNotLoadedError, match="truncated or corrupt"):
        load_pretrained(FfnBertModel, path)


def test_last_means_the_last_checkpoint_saved_completely(tmp_path):
    # A run cut during a save leaves checkpoint-N without trainer_state.json; "last" picked it and the resume failed.
    from transformers import TrainingArguments

    from hf_ffn.files import last_complete_checkpoint
    from hf_ffn.training.arguments import resume_checkpoint

    for step, complete in ((1, True), (2, True), (3, False)):
        (tmp_path / f"checkpoint-{step}").mkdir()
        if complete:
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"max_steps": 4}))
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")
    args = TrainingArguments(output_dir=str(tmp_path), resume_from_checkpoint="last", report_to="none")
    assert resume_checkpoint(args) == str(tmp_path / "checkpoint-2")
    with pytest.raises(FileExistsError, match=r"the last: .*checkpoint-2\)"):
        check_output_dir(str(tmp_path))


def test_resuming_as_another_variant_is_refused(folder, tmp_path):
    # Resumed with --ffn_type relu, a GELU run's checkpoint trained on as relu from the GELU weights, exit 0.
    from hf_ffn import FfnBertConfig
    from hf_ffn.training.outputs import check_resume_matches

    checkpoint = tmp_path / "checkpoint-2"
    FfnBertModel(FfnBertConfig.from_pretrained(folder)).save_pretrained(checkpoint)
    check_resume_matches(FfnBertConfig.from_pretrained(folder), str(checkpoint))  # the same model: resumes
    relu = FfnBertConfig.from_pretrained(folder, ffn_type="relu", warn_reused_weights=False)
    with pytest.raises(ValueError, match=r"was trained with ffn_types \['gelu', 'gelu'\], and this run builds"):
        check_resume_matches(relu, str(checkpoint))


def test_a_converted_folder_names_its_source_from_any_folder(folder, tmp_path, monkeypatch):
    # heal read a relative "source" against the current folder: another model of the same name there, exit 0.
    from hf_ffn.checkpoints import conversion_source

    work = tmp_path / "work"
    work.mkdir()
    copy_of(folder, work / "orig")
    monkeypatch.chdir(work)
    convert_checkpoint("orig", "converted", ffn_type="geglu")
    monkeypatch.chdir(tmp_path)
    assert conversion_source(work / "converted") == str(work / "orig")
