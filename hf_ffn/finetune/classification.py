"""Sequence classification and regression: `run_classification` fine-tunes `FfnBertForSequenceClassification` with
`Trainer` (the job of transformers' `run_glue.py`: single sentences or sentence pairs, classes or real-number
labels), `classification_metrics` / `regression_metrics` score it (scikit-learn / scipy)."""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import EvalPrediction, Trainer, TrainingArguments

from ..checkpoints import check_checkpoint
from ..families import checkpoint_family
from ..files import one_run_per_output_dir
from ..modeling_ffn_bert import FfnBertForSequenceClassification
from ..training.arguments import ModelArguments, check_numeric_options, resolve_max_seq_length, resume_checkpoint
from ..training.collators import PaddingFreeCollator
from ..training.outputs import (
    check_output_dir,
    check_resume_matches,
    checkpoint_max_positions,
    checkpoint_step,
    checkpoint_unpad_tokens,
    final_evaluation,
    load_model,
    load_tokenizer,
    model_card,
    save_outputs,
    training_seconds,
)
from .arguments import ClassificationDataArguments, check_task_columns
from .data import check_columns_and_labels, encode_splits, load_classification_datasets
from .tasks import get_task


def _logits(prediction: EvalPrediction) -> np.ndarray:
    return np.asarray(
        prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
    )


def classification_metrics(prediction: EvalPrediction) -> dict[str, float]:
    """Accuracy, `f1_macro` (the unweighted mean of each class's F1), Matthews correlation (GLUE's CoLA metric) and,
    for two classes, `f1_binary` (the F1 of class id 1: GLUE's MRPC F1), by scikit-learn, of the argmax of the logits
    (examples, num_labels) against the class ids (examples,)."""
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    logits = _logits(prediction)
    predicted = logits.argmax(axis=-1)
    labels = np.asarray(prediction.label_ids)
    metrics = {
        "accuracy": float(accuracy_score(labels, predicted)),
        "f1_macro": float(f1_score(labels, predicted, average="macro")),
        "matthews_correlation": float(matthews_corrcoef(labels, predicted)),
    }
    if logits.shape[-1] == 2:
        metrics["f1_binary"] = float(f1_score(labels, predicted, average="binary", pos_label=1))
    return metrics


def regression_metrics(prediction: EvalPrediction) -> dict[str, float]:
    """Pearson and Spearman correlation (GLUE's STS-B metrics; nan for a constant prediction) and the mean squared
    error of the predictions (examples, 1) or (examples,) against the labels (examples,)."""
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import mean_squared_error

    predicted = _logits(prediction).reshape(-1).astype(np.float64)
    labels = np.asarray(prediction.label_ids, dtype=np.float64).reshape(-1)
    return {
        "pearson": float(pearsonr(predicted, labels).statistic),
        "spearman": float(spearmanr(predicted, labels).statistic),
        "mse": float(mean_squared_error(labels, predicted)),
    }


def baseline_metrics(label_ids: Sequence[float], num_labels: int | None) -> dict[str, float]:
    """The metrics of a predictor that ignores its input, on one split's `label_ids`: the chance level a fine-tuned
    score must beat. Classes (`num_labels` given): always the majority class (a tie goes to the lowest id);
    regression (`num_labels` None): always the mean label, its correlations counted as 0 (not nan)."""
    labels = np.asarray(label_ids)
    if num_labels is None:
        constant = np.full(len(labels), labels.astype(np.float64).mean())
        with warnings.catch_warnings():  # scipy's ConstantInputWarning: the nan is replaced below
            warnings.simplefilter("ignore")
            metrics = regression_metrics(EvalPrediction(predictions=constant, label_ids=labels))
        return {name: 0.0 if math.isnan(value) else value for name, value in metrics.items()}
    majority = int(np.bincount(labels.astype(np.int64), minlength=num_labels).argmax())
    logits = np.zeros((len(labels), num_labels))
    logits[:, majority] = 1.0
    return classification_metrics(EvalPrediction(predictions=logits, label_ids=labels))


BASELINE_PREFIX = "baseline_"  # all_results.json: eval_baseline_accuracy, test_baseline_pearson, ...


def predict_in_order(trainer: Trainer, dataset, metric_key_prefix: str = "test"):
    """`trainer.predict(dataset)` in the order of `dataset`'s rows: with the sequential sampler, not the
    `LengthGroupedSampler` that `train_sampling_strategy="group_by_length"` also evaluates with."""
    strategy = trainer.args.train_sampling_strategy
    trainer.args.train_sampling_strategy = "random"  # evaluation sampler: sequential
    try:
        return trainer.predict(dataset, metric_key_prefix=metric_key_prefix)
    finally:
        trainer.args.train_sampling_strategy = strategy


@one_run_per_output_dir
def run_classification(
    model_args: ModelArguments, data_args: ClassificationDataArguments, training_args: TrainingArguments
) -> dict[str, Any]:
    """Fine-tune `FfnBertForSequenceClassification` with `Trainer` on one text column or a pair, classes or a
    regression (real-number labels: `num_labels=1`, MSE), as `run_glue.py` does; evaluate on validation and test;
    save. Every input is checked before loading (`FileNotFoundError`, `FileExistsError`, `ValueError`).

    Returns `results` (train, eval_*, test_* and their baseline_* metrics), `log_history`, `train_tokens`,
    `train_seconds` (without evaluations), `wall_seconds`, `conversion`, `regression`, `labels`, and a test split's
    predictions (`test_predictions` unlabelled; else `test_predicted_ids` / `test_label_ids`, length-sorted).
    """
    start = time.perf_counter()
    check_output_dir(training_args.output_dir, training_args.resume_from_checkpoint)
    resume = resume_checkpoint(training_args)
    check_task_columns(data_args)
    check_checkpoint(model_args.model_name_or_path, "--model_name_or_path")
    family = checkpoint_family(model_args.model_name_or_path, "--model_name_or_path")  # BERT's or RoBERTa's classes
    if model_args.padding_free and family.upstream_type != "bert":
        raise ValueError(
            f"--padding_free: {model_args.model_name_or_path} is a {family.upstream_type} checkpoint, whose "
            f"classification head reads the first token of each row, and a padding-free row holds several sequences; "
            f"allowed for BERT checkpoints only (without --padding_free this one trains on padded batches)"
        )
    max_positions = checkpoint_max_positions(model_args.model_name_or_path)
    check_numeric_options(data_args, training_args, max_positions=max_positions)  # --max_steps 0, lr <= 0, ...
    data_args = dataclasses.replace(
        data_args, max_seq_length=resolve_max_seq_length(data_args.max_seq_length, max_positions)
    )
    task = get_task(data_args.task) if data_args.task is not None else None
    if task is not None:  # the task's columns (its reader gives the hub copy's names)
        data_args = dataclasses.replace(
            data_args, text_column=task.text_column, text_pair_column=task.text_pair_column, label_column="label"
        )
    raw = load_classification_datasets(data_args)
    text_columns, labels = check_columns_and_labels(raw, data_args)
    regression = labels is None
    tokenizer = load_tokenizer(model_args)
    splits = encode_splits(raw, tokenizer, text_columns, labels, data_args)

    # Seed before the model is built: the new weights (classifier, fresh FFNs) depend on it, as in run_glue.
    torch.manual_seed(training_args.seed)
    head = {"num_labels": 1, "problem_type": "regression"} if regression else {"num_labels": len(labels)}
    if not regression:
        head |= {"id2label": dict(enumerate(map(str, labels))), "label2id": {str(x): i for i, x in enumerate(labels)}}
    model, conversion = load_model(model_args, FfnBertForSequenceClassification, **head)
    check_resume_matches(model.config, resume)
    # Count the non-padding tokens trained on (for tokens/s); the attribute is read when `train` starts.
    training_args.include_num_input_tokens_seen = "non_padding"
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=splits["train"],
        eval_dataset=splits["validation"],
        processing_class=tokenizer,  # also gives DataCollatorWithPadding (dynamic padding)
        data_collator=PaddingFreeCollator() if model_args.padding_free else None,  # one row, one output per sequence
        compute_metrics=regression_metrics if regression else classification_metrics,
    )
    train_output = trainer.train(resume_from_checkpoint=resume)
    train_seconds = training_seconds(
        trainer.state.log_history, train_output.metrics["train_runtime"], checkpoint_step(resume)
    )
    results = {**train_output.metrics, **final_evaluation(trainer)}
    predictions = test_predicted_ids = test_label_ids = None
    if "test" in splits:
        test_output = predict_in_order(trainer, splits["test"])
        results.update(test_output.metrics)  # metrics only when the test split has labels
        predicted = (test_output.predictions.reshape(-1) if regression else test_output.predictions.argmax(-1)).tolist()
        if "labels" not in splits["test"].column_names:
            predictions = predicted if regression else [str(labels[i]) for i in predicted]
        else:  # per-example predictions for paired tests, in the length-sorted order (the same for every run)
            test_predicted_ids, test_label_ids = predicted, test_output.label_ids.tolist()
    for split, prefix in (("validation", "eval_"), ("test", "test_")):  # the chance level beside each score
        if split in splits and "labels" in splits[split].column_names:
            baseline = baseline_metrics(splits[split]["labels"], None if regression else len(labels))
            results.update({f"{prefix}{BASELINE_PREFIX}{name}": value for name, value in baseline.items()})
    extra = {
        "conversion": conversion,
        "unpad_tokens": model_args.unpad_tokens,  # how the run executed (not saved in config.json)
        "regression": regression,
        "labels": None if regression else [str(label) for label in labels],
        "train_tokens": trainer.state.num_input_tokens_seen,
        "train_seconds": train_seconds,
        "test_predictions": predictions,
        "test_predicted_ids": test_predicted_ids,
        "test_label_ids": test_label_ids,
    }
    results["train_tokens_per_second"] = extra["train_tokens"] / train_seconds
    if task is not None:
        folder = Path(data_args.data_dir).name  # named once when it is the task's own folder (data/mrpc)
        dataset_name = task.name if folder == task.name else f"{task.name} ({folder})"
    else:
        dataset_name = data_args.dataset_name or (
            f"{Path(data_args.label_dir).name} (split {data_args.split_sizes}, seed {data_args.split_seed})"
            if data_args.label_dir
            else Path(data_args.train_file).name
        )
    metric_names = task.metrics if task else ("pearson", "spearman") if regression else ("accuracy", "f1_macro")
    card = model_card(
        model_args, training_args, "text-classification", dataset_name, results, conversion, metric_names, model
    )
    unpad_tokens = checkpoint_unpad_tokens(model_args.model_name_or_path)  # config.json keeps the checkpoint's
    save_outputs(trainer, tokenizer, card, results, extra, training_args.output_dir, unpad_tokens=unpad_tokens)
    wall_seconds = time.perf_counter() - start
    return {"results": results, "log_history": trainer.state.log_history, "wall_seconds": wall_seconds, **extra}
