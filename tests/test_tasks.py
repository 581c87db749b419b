"""Sentence pairs, regression, the named task readers, the metrics and the zero-shot STS measure. Tiny models and
tiny data written by the tests; a few optimizer steps each."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset, DatasetDict
from transformers import AutoTokenizer, EvalPrediction
from transformers.utils import logging as hf_logging

from hf_ffn import FfnBertForMaskedLM, FfnBertForSequenceClassification, FfnBertModel
from hf_ffn.finetune.arguments import ClassificationDataArguments
from hf_ffn.finetune.classification import baseline_metrics, classification_metrics, regression_metrics
from hf_ffn.finetune.data import check_columns_and_labels
from hf_ffn.finetune.run import apply_recipe, finetune_given_options, finetune_parser, summarize
from hf_ffn.finetune.tasks import (
    GLUE_RECIPE,
    TASKS,
    Recipe,
    get_task,
    load_cola,
    load_mrpc,
    load_stsb,
    read_stsb,
    task_score,
)
from hf_ffn.similarity import sts_spearman

from .conftest import tiny_config

REPO = Path(__file__).resolve().parents[1]
WORDS = ["good", "great", "fine", "nice", "happy", "bad", "awful", "poor", "sad", "dull"]


@pytest.fixture(autouse=True)
def quiet_transformers():
    hf_logging.set_verbosity_error()
    yield
    hf_logging.set_verbosity_warning()


@pytest.fixture(scope="module")
def tiny_checkpoint(bundled_checkpoint, tmp_path_factory) -> str:
    """A tiny FfnBert checkpoint (hidden 32, 2 layers, no dropout) with the bundled BERT tokenizer next to it."""
    tokenizer = AutoTokenizer.from_pretrained(bundled_checkpoint)
    folder = tmp_path_factory.mktemp("tiny_tasks")
    torch.manual_seed(0)
    config = tiny_config(
        vocab_size=tokenizer.vocab_size,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    FfnBertForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def finetune(argv: list[str]) -> dict:
    spec = importlib.util.spec_from_file_location(
        "finetune_classification", REPO / "scripts" / "finetune_classification.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv)


def common(checkpoint: str, output_dir: Path, *extra: str) -> list[str]:
    return [
        "--model_name_or_path",
        checkpoint,
        "--output_dir",
        str(output_dir),
        "--max_steps",
        "3",
        "--per_device_train_batch_size",
        "4",
        "--per_device_eval_batch_size",
        "64",
        "--max_seq_length",
        "32",
        "--learning_rate",
        "1e-2",
        "--report_to",
        "none",
        "--save_strategy",
        "no",
        "--disable_tqdm",
        "true",
        "--use_cpu",
        "true",
        *extra,
    ]


# ---------------------------------------------------------------------------------------------------------------
# Metrics against hand-computed values
# ---------------------------------------------------------------------------------------------------------------
def test_classification_metrics_hand_computed():
    labels = np.array([1, 1, 1, 0, 0, 0, 0])
    predicted = np.array([1, 1, 0, 1, 0, 0, 0])  # TP 2, FN 1, FP 1, TN 3
    logits = np.eye(2)[predicted]
    metrics = classification_metrics(EvalPrediction(predictions=logits, label_ids=labels))
    assert metrics["accuracy"] == pytest.approx(5 / 7)
    assert metrics["f1_binary"] == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))  # 2TP / (2TP + FP + FN), class 1
    assert metrics["f1_macro"] == pytest.approx((2 / 3 + 2 * 3 / (2 * 3 + 1 + 1)) / 2)  # macro: mean of both classes'
    # Matthews: (TP·TN − FP·FN) / √((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (6 − 1) / √(3·3·4·4)
    assert metrics["matthews_correlation"] == pytest.approx(5 / 12)
    three = classification_metrics(EvalPrediction(predictions=np.eye(3)[[0, 1, 2]], label_ids=np.array([0, 1, 1])))
    assert "f1_binary" not in three and three["accuracy"] == pytest.approx(2 / 3)


def test_regression_metrics_hand_computed():
    predicted = np.array([[0.5], [2.0], [3.0], [10.0]])
    labels = np.array([1.0, 3.0, 2.0, 4.0])
    metrics = regression_metrics(EvalPrediction(predictions=predicted, label_ids=labels))
    # Spearman: ranks 1 2 3 4 vs 1 3 2 4, d² = 0 1 1 0: 1 − 6·2 / (4·(16 − 1)) = 0.8
    assert metrics["spearman"] == pytest.approx(0.8)
    x, y = predicted[:, 0] - predicted.mean(), labels - labels.mean()
    assert metrics["pearson"] == pytest.approx((x * y).sum() / np.sqrt((x * x).sum() * (y * y).sum()))
    assert metrics["mse"] == pytest.approx((0.25 + 1 + 1 + 36) / 4)
    assert task_score("stsb", {"eval_pearson": 0.5, "eval_spearman": 0.7}, "eval_") == pytest.approx(60)


# ---------------------------------------------------------------------------------------------------------------
# A pair task and a regression task train
# ---------------------------------------------------------------------------------------------------------------
def pair_rows(n: int) -> list[tuple[str, str, int]]:
    """Paraphrase-like pairs: label 1 iff both sentences use the same word."""
    return [(f"a {WORDS[i % 10]} film", f"a {WORDS[(i + (i % 2) * 3) % 10]} movie", 1 - i % 2) for i in range(n)]


def write_pairs(path: Path, rows) -> str:
    path.write_text("first,second,label\n" + "".join(f"{a},{b},{label}\n" for a, b, label in rows))
    return str(path)


def test_pair_task_trains_with_token_type_ids_and_scores_like_its_saved_model(tiny_checkpoint, tmp_path, monkeypatch):
    files = {
        split: write_pairs(tmp_path / f"{split}.csv", pair_rows(n))
        for split, n in (("train", 16), ("validation", 10), ("test", 6))
    }
    seen = []
    forward = FfnBertForSequenceClassification.forward

    @functools.wraps(forward)  # Trainer reads the signature to keep the dataset's columns
    def recording(self, *args, **kwargs):
        seen.append(kwargs.get("token_type_ids"))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(FfnBertForSequenceClassification, "forward", recording)
    output_dir = tmp_path / "out"
    outcome = finetune(
        common(
            tiny_checkpoint,
            output_dir,
            "--train_file",
            files["train"],
            "--validation_file",
            files["validation"],
            "--test_file",
            files["test"],
            "--text_column",
            "first",
            "--text_pair_column",
            "second",
        )
    )
    monkeypatch.undo()
    # BERT pairs: segment 1 ids present in every training batch (each row has a second sentence)
    assert len(seen) >= 3 and all(ids is not None and (ids == 1).any(dim=1).all() for ids in seen[:3])
    results = outcome["results"]
    assert outcome["regression"] is False and outcome["labels"] == ["0", "1"]
    # The saved model, run on the validation pairs by hand, gives the reported metrics.
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    model = FfnBertForSequenceClassification.from_pretrained(output_dir).eval()
    rows = pair_rows(10)
    batch = tokenizer([a for a, _, _ in rows], [b for _, b, _ in rows], padding=True, return_tensors="pt")
    assert batch["token_type_ids"][0].tolist().count(1) == len(tokenizer("a good movie")["input_ids"]) - 1
    with torch.no_grad():
        predicted = model(**batch).logits.argmax(-1).numpy()
    labels = np.array([label for _, _, label in rows])
    tp, fp = int(((predicted == 1) & (labels == 1)).sum()), int(((predicted == 1) & (labels == 0)).sum())
    fn = int(((predicted == 0) & (labels == 1)).sum())
    assert results["eval_accuracy"] == pytest.approx((predicted == labels).mean())
    assert results["eval_f1_binary"] == pytest.approx(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    assert "test_matthews_correlation" in results and len(outcome["test_predicted_ids"]) == 6


def write_stsb(folder: Path, lines_per_split: int = 12) -> Path:
    """An STS-B folder: tab-separated, score in column 5, some lines with two extra trailing columns."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("sts-train.csv", "sts-dev.csv", "sts-test.csv"):
        lines = []
        for i in range(lines_per_split):
            first, second = f"the {WORDS[i % 10]} cat sat", f"the {WORDS[(i * 3) % 10]} dog ran"
            extra = "\tsrc\tsrc2" if i % 4 == 0 else ""
            lines.append(f"main-captions\tMSRvid\t2012test\t{i:04d}\t{(i * 0.37) % 5:.3f}\t{first}\t{second}{extra}")
        (folder / name).write_text("\n".join(lines) + "\n")
    return folder


def test_regression_task_trains_mse_and_reports_correlations(tiny_checkpoint, tmp_path):
    data = write_stsb(tmp_path / "stsb")
    output_dir = tmp_path / "out"
    outcome = finetune(common(tiny_checkpoint, output_dir, "--task", "stsb", "--data_dir", str(data)))
    results = outcome["results"]
    assert outcome["regression"] is True and outcome["labels"] is None
    config = json.loads((output_dir / "config.json").read_text())
    assert config["num_labels"] == 1 if "num_labels" in config else len(config["id2label"]) == 1
    assert config["problem_type"] == "regression"
    # one evaluation batch (64 ≥ 12 rows): Trainer's eval_loss is the model's MSE loss over the split, the same
    # quantity as scikit-learn's MSE of the predictions (float32 loss vs float64 metric: relative 1e-5)
    assert results["eval_mse"] == pytest.approx(results["eval_loss"], rel=1e-5)
    assert -1 <= results["eval_pearson"] <= 1 and -1 <= results["eval_spearman"] <= 1
    card = (output_dir / "README.md").read_text()
    assert "eval_pearson" in card
    # the card names the task once, the split by its name, and the FFN type the model has (not "(checkpoint's)")
    assert "on stsb." in card and "stsb (stsb)" not in card
    assert "split: validation" in card and "split: eval" not in card
    hidden_act = json.loads((output_dir / "config.json").read_text())["hidden_act"]
    assert f"ffn_type: `{hidden_act}`" in card and "(checkpoint's)" not in card


# ---------------------------------------------------------------------------------------------------------------
# The named readers on fixtures in the real layouts
# ---------------------------------------------------------------------------------------------------------------
def test_task_readers_read_the_real_layouts(tmp_path):
    stsb = write_stsb(tmp_path / "stsb", 5)
    test = read_stsb(stsb / "sts-test.csv")
    assert test.column_names == ["sentence1", "sentence2", "label"] and len(test) == 5
    assert test[1] == {"sentence1": "the great cat sat", "sentence2": "the nice dog ran", "label": pytest.approx(0.37)}
    assert set(load_stsb(stsb)) == {"train", "validation"}

    cola = tmp_path / "cola"
    cola.mkdir()
    rows = ['gj04\t1\t\tOur friends won\'t buy this "analysis".', "gj04\t0\t*\tThe more you eat, the more fat."]
    for name in ("in_domain_train.tsv", "in_domain_dev.tsv"):
        (cola / name).write_text("\n".join(rows) + "\n")
    train = load_cola(cola)["train"]
    assert train.column_names == ["sentence", "label"]
    assert train["sentence"][0] == 'Our friends won\'t buy this "analysis".' and train["label"] == [1, 0]

    mrpc = tmp_path / "mrpc"
    mrpc.mkdir()
    text = (
        'Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\r\n1\t11\t12\tHe said "yes".\tHe agreed.\r\n'
        "0\t13\t14\tIt rained.\tStocks fell 2%.\r\n"
    )
    (mrpc / "msr-para-train.tsv").write_bytes(b"\xef\xbb\xbf" + text.encode())  # byte-order mark, CRLF
    (mrpc / "msr-para-val.tsv").write_bytes(text.encode())
    read = load_mrpc(mrpc)
    assert read["train"].column_names == ["sentence1", "sentence2", "label"]
    assert read["train"][0] == {"sentence1": 'He said "yes".', "sentence2": "He agreed.", "label": 1}
    assert read["validation"]["label"] == [1, 0]

    with pytest.raises(
        FileNotFoundError,
        match=r"--data_dir: .* has no in_domain_dev\.tsv \(the validation split "
        r"of --task cola\)",
    ):
        (cola / "in_domain_dev.tsv").unlink()
        load_cola(cola)
    # --data_dir given as the parent of the task folders: the error says which folder was meant
    with pytest.raises(FileNotFoundError, match=rf"has no msr-para-train\.tsv .*; did you mean --data_dir {mrpc}\?$"):
        load_mrpc(tmp_path)
    rt = tmp_path / "rt_polarity"
    rt.mkdir()
    for name in ("rt-polarity.neg", "rt-polarity.pos"):
        (rt / name).write_text("a line\n")
    with pytest.raises(FileNotFoundError, match=rf"rt-polarity\.\* files .*; did you mean --data_dir {rt}\?$"):
        get_task("rt_polarity").load(tmp_path)
    (stsb / "sts-dev.csv").write_text("a\tb\tc\td\tfive\tx\ty\n")
    with pytest.raises(ValueError, match=r"sts-dev\.csv' line 1: score 'five' is not a number in \[0, 5\]"):
        read_stsb(stsb / "sts-dev.csv")


# ---------------------------------------------------------------------------------------------------------------
# Task presets: the recipe fills what the user did not set; the summary line and its task score
# ---------------------------------------------------------------------------------------------------------------
def test_every_preset_defaults_to_berts_glue_recipe():
    # Devlin et al. 2019, App. A.3: batch 32, 3 epochs, lr from {5e-5, 4e-5, 3e-5, 2e-5}, 10% warm-up
    recipe = GLUE_RECIPE
    assert (recipe.per_device_train_batch_size, recipe.num_train_epochs, recipe.warmup_ratio) == (32, 3, 0.1)
    assert GLUE_RECIPE.learning_rate in (5e-5, 4e-5, 3e-5, 2e-5)
    assert all(task.recipe == Recipe() for task in TASKS.values())


def test_finetune_help_says_the_preset_replaces_trainers_defaults_and_lists_the_tasks():
    text = " ".join(finetune_parser().format_help().split())
    assert (
        "With --task, the task's recipe (BERT's GLUE recipe: lr 2e-5, batch 32, 3 epochs, 10% warm-up) replaces "
        "Trainer's defaults for any option you do not give" in text
    )
    assert "--task TASK A named task: cola, stsb, mrpc, rt_polarity." in text


def test_user_given_training_arguments_win_over_the_preset(tmp_path):
    from transformers import TrainingArguments

    # Trainer's own default batch (8), given explicitly, stays 8: what counts is being given, not the value
    argv = [
        "--model_name_or_path",
        "m",
        "--task",
        "mrpc",
        "--data_dir",
        "d",
        "--output_dir",
        str(tmp_path),
        "--learning_rate",
        "1e-4",
        "--per_device_train_batch_size=8",
    ]
    given = finetune_given_options(argv)
    assert {"learning_rate", "per_device_train_batch_size", "task"} <= given
    assert "num_train_epochs" not in given and "warmup_steps" not in given
    args = TrainingArguments(output_dir=str(tmp_path), learning_rate=1e-4, per_device_train_batch_size=8)
    applied = apply_recipe(args, TASKS["mrpc"].recipe, given)
    assert (args.learning_rate, args.per_device_train_batch_size, args.num_train_epochs) == (1e-4, 8, 3.0)
    assert set(applied) == {"num_train_epochs", "warmup_steps"} and args.get_warmup_steps(100) == 10
    # nothing given: the whole recipe; a warm-up given in steps keeps the recipe's warm-up out
    bare = TrainingArguments(output_dir=str(tmp_path))
    apply_recipe(bare, GLUE_RECIPE, finetune_given_options(["--model_name_or_path", "m"]))
    assert (bare.learning_rate, bare.per_device_train_batch_size, bare.num_train_epochs) == (2e-5, 32, 3.0)
    steps = TrainingArguments(output_dir=str(tmp_path), warmup_steps=7)
    apply_recipe(steps, GLUE_RECIPE, finetune_given_options(["--warmup_steps", "7"]))
    assert steps.get_warmup_steps(100) == 7
    # one .json file of arguments: its keys are the given ones
    (tmp_path / "args.json").write_text(json.dumps({"model_name_or_path": "m", "num_train_epochs": 1}))
    assert finetune_given_options([str(tmp_path / "args.json")]) == {"model_name_or_path", "num_train_epochs"}


def write_mrpc(folder: Path, train: int = 16, validation: int = 10) -> Path:
    """An MRPC-shaped folder (the dataset-sts layout: header, tab-separated) of `pair_rows`."""
    folder.mkdir()
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    for name, n in (("msr-para-train.tsv", train), ("msr-para-val.tsv", validation)):
        (folder / name).write_text(
            header + "".join(f"{label}\t{i}\t{i + 100}\t{a}\t{b}\n" for i, (a, b, label) in enumerate(pair_rows(n)))
        )
    return folder


def test_mrpc_summary_line_scores_binary_f1_of_the_paraphrase_class_and_accuracy(tiny_checkpoint, tmp_path, capsys):
    """`--task mrpc` through the script: one summary line, last; its score is (binary F1 + accuracy) / 2 × 100,
    the binary F1 recomputed by hand from the saved model's predictions on the validation pairs."""
    from transformers import AutoModelForSequenceClassification

    data = write_mrpc(tmp_path / "mrpc")
    output_dir = tmp_path / "out"
    outcome = finetune(common(tiny_checkpoint, output_dir, "--task", "mrpc", "--data_dir", str(data)))
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1] == outcome["summary"]
    assert [line for line in printed if line.startswith("task=")] == [outcome["summary"]]
    # the preset filled only what `common` leaves unset (it gives lr, batch and max_steps)
    assert outcome["recipe"] == {"num_train_epochs": 3.0, "warmup_steps": 0.1}

    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    model = AutoModelForSequenceClassification.from_pretrained(output_dir).eval()
    rows = pair_rows(10)
    with torch.no_grad():
        predicted = [int(model(**tokenizer(a, b, return_tensors="pt")).logits.argmax()) for a, b, _ in rows]
    labels = [label for _, _, label in rows]
    tp = sum(p == 1 and y == 1 for p, y in zip(predicted, labels, strict=False))
    fp = sum(p == 1 and y == 0 for p, y in zip(predicted, labels, strict=False))
    fn = sum(p == 0 and y == 1 for p, y in zip(predicted, labels, strict=False))
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0  # of class 1, the paraphrase class
    accuracy = sum(p == y for p, y in zip(predicted, labels, strict=False)) / len(labels)
    results = outcome["results"]
    assert results["eval_f1_binary"] == pytest.approx(f1) and results["eval_accuracy"] == pytest.approx(accuracy)
    assert outcome["task_score"] == pytest.approx(100 * (f1 + accuracy) / 2)
    # the baseline: the 10 validation pairs are 5 paraphrases and 5 not; the tie goes to class id 0 (label 0), so
    # always answering it is right half the time and never finds a paraphrase (F1 of class 1: 0) → (0 + 0.5) / 2
    assert results["eval_baseline_accuracy"] == 0.5 and results["eval_baseline_f1_binary"] == 0.0
    assert outcome["summary"] == (
        f"task=mrpc score={100 * (f1 + accuracy) / 2:.2f} (f1_binary={f1:.4f}, accuracy={accuracy:.4f}) on validation"
        "; baseline=25.00 (majority class)"
    )
    assert printed[-2] == f"saved to {output_dir} (model, tokenizer, model card README.md, all_results.json)"


def test_summarize_means_the_metrics_of_the_split_and_names_a_missing_one():
    results = {"eval_f1_binary": 0.8, "eval_accuracy": 0.7, "test_accuracy": 0.1}
    assert summarize("mrpc", ("f1_binary", "accuracy"), results, "validation") == (
        pytest.approx(75.0),
        "task=mrpc score=75.00 (f1_binary=0.8000, accuracy=0.7000) on validation",
    )
    line = summarize("reviews", ("accuracy",), results, "test")[1]
    assert line == "task=reviews score=10.00 (accuracy=0.1000) on test"
    with pytest.raises(KeyError, match="no test_f1_binary in the results of the test split"):
        summarize("mrpc", ("f1_binary", "accuracy"), results, "test")


def test_summary_line_gives_the_baseline_beside_the_score():
    """The issue's run: 30 steps of MRPC scored exactly its majority class. With the split's baseline metrics in
    the results, the line says so; a regression's constant prediction has correlations 0."""
    majority = {"eval_f1_binary": 0.8180, "eval_accuracy": 0.6920}  # always "paraphrase" on MRPC's validation
    results = {**majority, **{key.replace("eval_", "eval_baseline_"): value for key, value in majority.items()}}
    assert summarize("mrpc", ("f1_binary", "accuracy"), results, "validation")[1] == (
        "task=mrpc score=75.50 (f1_binary=0.8180, accuracy=0.6920) on validation; baseline=75.50 (majority class)"
    )
    results = {"eval_pearson": 0.5, "eval_spearman": 0.4, "eval_baseline_pearson": 0.0, "eval_baseline_spearman": 0.0}
    assert summarize("stsb", ("pearson", "spearman"), results, "validation", regression=True)[1] == (
        "task=stsb score=45.00 (pearson=0.5000, spearman=0.4000) on validation; baseline=0.00 (constant prediction)"
    )


def test_baseline_metrics_hand_computed():
    """Always the majority class (the model's metric functions on a constant prediction); a regression's mean."""
    # 4 of 7 are class 0: accuracy 4/7; class 0's F1 2·4 / (2·4 + 3) = 8/11, class 1's 0 → macro 4/11; no class 1
    # predicted: binary F1 0; a constant prediction: Matthews 0
    metrics = baseline_metrics([1, 1, 1, 0, 0, 0, 0], num_labels=2)
    assert metrics == pytest.approx(
        {"accuracy": 4 / 7, "f1_macro": 4 / 11, "f1_binary": 0.0, "matthews_correlation": 0.0}
    )
    # 3 of 4 are class 1 (the paraphrase class of MRPC): binary F1 2·3 / (2·3 + 1) = 6/7, macro (6/7 + 0) / 2
    metrics = baseline_metrics([1, 0, 1, 1], num_labels=2)
    assert metrics == pytest.approx(
        {"accuracy": 3 / 4, "f1_macro": 3 / 7, "f1_binary": 6 / 7, "matthews_correlation": 0}
    )
    three = baseline_metrics([2, 2, 0, 1, 2], num_labels=3)  # class 2 is the majority: 3/5; no binary F1
    assert three["accuracy"] == pytest.approx(3 / 5) and "f1_binary" not in three
    # regression: always the mean 2.0 of [0, 1, 2, 5]: MSE (4 + 1 + 0 + 9) / 4 = 3.5, correlations 0 (not nan)
    assert baseline_metrics([0.0, 1.0, 2.0, 5.0], num_labels=None) == {"pearson": 0.0, "spearman": 0.0, "mse": 3.5}


def test_finetune_function_on_own_files_with_overrides(tiny_checkpoint, tmp_path, capsys):
    from hf_ffn.finetune.run import finetune as finetune_function

    files = {split: write_pairs(tmp_path / f"{split}.csv", pair_rows(n)) for split, n in (("train", 8), ("v", 6))}
    outcome = finetune_function(
        tiny_checkpoint,
        str(tmp_path / "out"),
        train_file=files["train"],
        validation_file=files["v"],
        text_column="first",
        text_pair_column="second",
        max_steps=2,
        per_device_train_batch_size=4,
        max_seq_length=16,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        use_cpu=True,
    )
    assert outcome["recipe"] == {"learning_rate": 2e-5, "num_train_epochs": 3.0, "warmup_steps": 0.1}
    assert capsys.readouterr().out.strip().splitlines()[-1] == outcome["summary"]
    accuracy = outcome["results"]["eval_accuracy"]
    # 3 of the 6 validation pairs are paraphrases: the tie goes to class id 0, right half the time
    assert outcome["summary"] == (
        f"task=train score={100 * accuracy:.2f} (accuracy={accuracy:.4f}) on validation"
        "; baseline=50.00 (majority class)"
    )
    with pytest.raises(ValueError, match="finetune has no argument learning_rat:"):
        finetune_function(tiny_checkpoint, str(tmp_path / "o2"), task="mrpc", data_dir="d", learning_rat=1.0)


# ---------------------------------------------------------------------------------------------------------------
# Bad input: clear errors before training
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "case",
    [
        "missing label",
        "word among numbers",
        "regression with a class in validation",
        "missing pair column",
        "empty split",
        "unknown task",
    ],
)
def test_bad_input_names_the_field_value_and_what_is_allowed(case, tiny_checkpoint, tmp_path):
    train = "first,second,label\n" + "".join(f"a {w},b {w},{i * 0.5}\n" for i, w in enumerate(WORDS))
    validation = train
    extra = ["--text_column", "first", "--text_pair_column", "second"]
    if case == "missing label":
        train = train.replace(",1.0\n", ",\n")
        match = (
            r"--label_column 'label': row 2 of the train split \(.*train\.csv\) has label None \(missing\); a "
            r"label must be a class \(a string or an integer\) or a real number"
        )
    elif case == "word among numbers":
        train = train.replace(",1.0\n", ",high\n")
        match = r"row 2 of the train split .* has label 'high' \(a word among numbers such as '0.5' in row 1\)"
    elif case == "regression with a class in validation":
        validation = "first,second,label\na x,b y,1\na x,b z,unsure\n"
        match = r"do not read as one dataset: every file must have the same columns with the same types .*'unsure'"
    elif case == "missing pair column":
        extra = ["--text_column", "first", "--text_pair_column", "third"]
        match = (
            r"--text_pair_column: column 'third' does not exist in the train split .*; columns: first, second, label"
        )
    elif case == "empty split":
        validation = "first,second,label\n"
        match = r"--validation_file: data file .*validation\.csv' has a header but no rows"
    else:
        extra = ["--task", "qqp", "--data_dir", str(tmp_path)]
        match = rf"--task has unknown value 'qqp'; allowed: {', '.join(TASKS)}"
    (tmp_path / "train.csv").write_text(train)
    (tmp_path / "validation.csv").write_text(validation)
    files = (
        []
        if case == "unknown task"
        else ["--train_file", str(tmp_path / "train.csv"), "--validation_file", str(tmp_path / "validation.csv")]
    )
    output_dir = tmp_path / "out"
    with pytest.raises(ValueError, match=match):
        finetune(common(tiny_checkpoint, output_dir, *files, *extra))
    assert not output_dir.exists()


def test_script_ends_bad_input_in_one_line_with_status_2(tiny_checkpoint, tmp_path):
    """Run as a command, the script prints `prog: error: message` (the message naming the flag) and exits 2, as
    argparse does for a bad command line: no traceback."""
    (tmp_path / "train.csv").write_text("first,label\na good one,1\na bad one,0\n")
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "finetune_classification.py"),
            *common(tiny_checkpoint, tmp_path / "out", "--train_file", str(tmp_path / "train.csv")),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        "finetune_classification.py: error: --validation_file is required with --train_file (the "
        "label set is checked against it)"
    )


# ---------------------------------------------------------------------------------------------------------------
# Zero-shot STS
# ---------------------------------------------------------------------------------------------------------------
def ranks(values: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(values)).astype(float)


def test_sts_spearman_matches_a_hand_computed_spearman(tiny_checkpoint, tmp_path):
    data = write_stsb(tmp_path / "stsb", 8)
    result = sts_spearman(tiny_checkpoint, str(data), batch_size=3)  # batches of 3: padding inside the batches
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    model = FfnBertModel.from_pretrained(tiny_checkpoint).eval()
    pairs = read_stsb(data / "sts-test.csv")

    def embed(text: str) -> np.ndarray:  # one sentence at a time: no padding, the plain mean over its tokens
        with torch.no_grad():
            return model(**tokenizer(text, return_tensors="pt")).last_hidden_state[0].mean(0).double().numpy()

    cosines = []
    for first, second in zip(pairs["sentence1"], pairs["sentence2"], strict=False):
        a, b = embed(first), embed(second)
        cosines.append(a @ b / np.sqrt((a @ a) * (b @ b)))
    gold = np.array(pairs["label"])
    assert len(set(np.round(cosines, 6))) == 8 and len(set(gold)) == 8  # no ties: Spearman = 1 − 6Σd² / (n(n²−1))
    d = ranks(np.array(cosines)) - ranks(gold)
    expected = 1 - 6 * (d * d).sum() / (8 * (8**2 - 1))
    # padded batches vs one sentence at a time: float32 rounding of the cosines, far from changing any rank here
    assert result["spearman"] == pytest.approx(expected, abs=1e-12)
    assert result["pairs"] == 8 and result["split"] == "test"
    with pytest.raises(ValueError, match=r"--split has unknown value 'dev'; allowed: test, validation, train"):
        sts_spearman(tiny_checkpoint, str(data), split="dev")
    with pytest.raises(FileNotFoundError, match=r"--model_name_or_path"):
        sts_spearman(str(tmp_path / "nowhere"), str(data))


def test_labels_of_a_datasets_dataset_checked_split_by_split():
    # `datasets` dicts (hub or json) can hold numbers in train and words in validation; csv files cannot get there
    # (the csv builder refuses files of different types, tested above)
    args = ClassificationDataArguments(dataset_name="any", text_column="a", text_pair_column="b")
    raw = DatasetDict(
        {
            "train": Dataset.from_dict({"a": ["x", "y"], "b": ["u", "v"], "label": [0.5, 4.0]}),
            "validation": Dataset.from_dict({"a": ["x", "y"], "b": ["u", "v"], "label": ["1", "high"]}),
        }
    )
    with pytest.raises(
        ValueError,
        match=r"the training labels are real numbers \(a regression\), but row 1 of the "
        r"validation split has label 'high'",
    ):
        check_columns_and_labels(raw, args)
    raw["validation"] = Dataset.from_dict({"a": ["x"], "b": ["u"], "label": [3]})  # integers: numbers too
    assert check_columns_and_labels(raw, args) == (("a", "b"), None)
    raw["train"] = Dataset.from_dict({"a": ["x", "y"], "b": ["u", "v"], "label": [[1], [0]]})
    with pytest.raises(ValueError, match=r"row 0 of the train split has label \[1\] \(a list\)"):
        check_columns_and_labels(raw, args)


def test_task_refuses_column_flags_it_would_ignore():
    from hf_ffn.finetune.arguments import check_task_columns

    with pytest.raises(ValueError, match=r"--task cola reads its own columns; drop --text_pair_column 'sentence'"):
        check_task_columns(ClassificationDataArguments(task="cola", data_dir="cola", text_pair_column="sentence"))
    with pytest.raises(ValueError, match=r"drop --text_column 'a', --label_column 'y'"):
        check_task_columns(ClassificationDataArguments(task="stsb", data_dir="stsb", text_column="a", label_column="y"))
    check_task_columns(ClassificationDataArguments(task="mrpc", data_dir="mrpc"))  # the defaults: accepted


def test_default_output_dir_is_a_fresh_folder_under_out_finetune(tmp_path):
    """Without --output_dir: out/finetune/<data>-<checkpoint folder or hub name>; a folder holding a finished model
    (config.json) is passed over for -2, -3, ...; an interrupted run's folder (no config.json) is used again."""
    from hf_ffn.finetune.run import default_output_dir
    from hf_ffn.training.arguments import ModelArguments

    model = ModelArguments(model_name_or_path="google-bert/bert-base-uncased")
    data = ClassificationDataArguments(task="mrpc", data_dir="data/mrpc")
    root = tmp_path / "out" / "finetune"
    assert default_output_dir(model, data, root) == root / "mrpc-bert-base-uncased"
    (root / "mrpc-bert-base-uncased").mkdir(parents=True)
    (root / "mrpc-bert-base-uncased" / "checkpoint-2").mkdir()  # interrupted: resumable, so the same folder
    assert default_output_dir(model, data, root) == root / "mrpc-bert-base-uncased"
    (root / "mrpc-bert-base-uncased" / "config.json").write_text("{}")
    assert default_output_dir(model, data, root) == root / "mrpc-bert-base-uncased-2"
    (root / "mrpc-bert-base-uncased-2").mkdir()
    (root / "mrpc-bert-base-uncased-2" / "config.json").write_text("{}")
    assert default_output_dir(model, data, root) == root / "mrpc-bert-base-uncased-3"
    files = ClassificationDataArguments(train_file="d/reviews.csv", validation_file="d/v.csv")
    assert default_output_dir(ModelArguments(model_name_or_path="out/geglu/"), files, root) == root / "reviews-geglu"
    hub = ClassificationDataArguments(dataset_name="nyu-mll/glue", dataset_config_name="mrpc")
    assert default_output_dir(model, hub, root) == root / "nyu-mll_glue_mrpc-bert-base-uncased"
