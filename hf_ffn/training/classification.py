"""Sequence classification: `run_classification` fine-tunes `FfnBertForSequenceClassification` with `Trainer`
(the job of transformers' `run_glue.py`), and `classification_metrics` scores it (accuracy, macro F1)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import EvalPrediction, Trainer, TrainingArguments

from ..modeling_ffn_bert import FfnBertForSequenceClassification
from .arguments import ClassificationDataArguments, ModelArguments, resume_checkpoint
from .data import check_columns_and_labels, load_classification_datasets, sort_by_length
from .outputs import (
    check_checkpoint,
    check_output_dir,
    checkpoint_unpad_tokens,
    final_evaluation,
    load_model,
    load_tokenizer,
    model_card,
    save_outputs,
    training_seconds,
)


def classification_metrics(prediction: EvalPrediction) -> dict[str, float]:
    """Accuracy and macro-averaged F1 (the unweighted mean of each class's F1; scikit-learn) of argmax logits.

    `prediction.predictions`: logits (examples, num_labels); `prediction.label_ids`: (examples,) class ids.
    """
    from sklearn.metrics import accuracy_score, f1_score

    logits = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
    predicted = np.asarray(logits).argmax(axis=-1)
    labels = np.asarray(prediction.label_ids)
    return {"accuracy": float(accuracy_score(labels, predicted)), "f1": float(f1_score(labels, predicted, average="macro"))}


def predict_in_order(trainer: Trainer, dataset, metric_key_prefix: str = "test"):
    """`trainer.predict(dataset)` with the predictions in the order of `dataset`'s rows.

    Under `train_sampling_strategy="group_by_length"` Trainer also evaluates through a `LengthGroupedSampler`
    (a seeded shuffle, then sorting by length), so rows of equal length come back in a seed-dependent order and
    predictions no longer line up with the file. Prediction therefore runs with the sequential sampler; the
    strategy is restored afterwards (the samplers are the only readers of it).
    """
    strategy = trainer.args.train_sampling_strategy
    trainer.args.train_sampling_strategy = "random"  # evaluation sampler: sequential
    try:
        return trainer.predict(dataset, metric_key_prefix=metric_key_prefix)
    finally:
        trainer.args.train_sampling_strategy = strategy


def run_classification(
    model_args: ModelArguments, data_args: ClassificationDataArguments, training_args: TrainingArguments
) -> dict[str, Any]:
    """Fine-tune `FfnBertForSequenceClassification` with `Trainer`; evaluate on validation and test; save.

    Order: every input check (data files, columns, labels, checkpoint, output folder), then loading, training,
    evaluation, and last the finished save (see `hf_ffn.training.outputs`). Returns a dict with `results` (eval_* and
    test_* accuracy/F1/loss, train metrics), `log_history` (Trainer's, for eval curves), `train_tokens`
    (non-padding training tokens seen), `train_seconds` (training time without in-training evaluation),
    `wall_seconds`, `conversion` (what the variant load changed) and, for a labelled test split,
    `test_predicted_ids` / `test_label_ids` (class ids per test example, in the test split's length-sorted order,
    which is the same for every run on the same data and tokenizer).

    Raises:
        FileNotFoundError, FileExistsError, ValueError: on bad input, before training starts.
    """
    start = time.perf_counter()
    check_output_dir(training_args.output_dir)
    resume = resume_checkpoint(training_args)
    raw = load_classification_datasets(data_args)
    text_column, labels = check_columns_and_labels(raw, data_args)
    check_checkpoint(model_args.model_name_or_path, "--model_name_or_path")
    tokenizer = load_tokenizer(model_args)

    label2id = {label: i for i, label in enumerate(labels)}

    def encode(batch: dict) -> dict:
        encoded = tokenizer(batch[text_column], truncation=True, max_length=data_args.max_seq_length)
        if data_args.label_column in batch:
            encoded["labels"] = [label2id[label] for label in batch[data_args.label_column]]
        return encoded

    splits = {}
    for split, limit in (("train", data_args.max_train_samples), ("validation", data_args.max_eval_samples),
                         ("test", data_args.max_test_samples)):
        if split in raw:
            dataset = raw[split] if limit is None else raw[split].select(range(min(limit, len(raw[split]))))
            splits[split] = dataset.map(encode, batched=True, remove_columns=dataset.column_names)
    for split in ("validation", "test"):
        # shortest first: less padding per batch; accuracy and F1 do not depend on the order. An unlabelled test
        # split keeps its order, so its predictions line up with the file.
        if split in splits and "labels" in splits[split].column_names:
            splits[split] = sort_by_length(splits[split])

    # Seed before the model is built: the new weights (classifier, fresh FFNs) depend on it, as in run_glue.
    torch.manual_seed(training_args.seed)
    model, conversion = load_model(
        model_args, FfnBertForSequenceClassification, num_labels=len(labels),
        id2label={i: str(label) for i, label in enumerate(labels)},
        label2id={str(label): i for i, label in enumerate(labels)},
    )
    # Count the non-padding tokens trained on (for tokens/s); the attribute is read when `train` starts.
    training_args.include_num_input_tokens_seen = "non_padding"
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=splits["train"],
        eval_dataset=splits["validation"],
        processing_class=tokenizer,  # also gives DataCollatorWithPadding (dynamic padding)
        compute_metrics=classification_metrics,
    )
    train_output = trainer.train(resume_from_checkpoint=resume)
    results = dict(train_output.metrics)
    results.update(final_evaluation(trainer))
    predictions = test_predicted_ids = test_label_ids = None
    if "test" in splits:
        test_output = predict_in_order(trainer, splits["test"])
        results.update(test_output.metrics)  # accuracy/F1 only when the test split has labels
        if "labels" not in splits["test"].column_names:
            predictions = [str(labels[i]) for i in test_output.predictions.argmax(-1)]
        else:  # per-snippet predictions for paired tests, in the length-sorted order (the same for every run)
            test_predicted_ids = test_output.predictions.argmax(-1).tolist()
            test_label_ids = test_output.label_ids.tolist()
    train_seconds = training_seconds(trainer.state.log_history, train_output.metrics["train_runtime"])
    extra = {
        "conversion": conversion,
        "unpad_tokens": model_args.unpad_tokens,  # how the run executed (not saved in config.json)
        "labels": [str(label) for label in labels],
        "train_tokens": trainer.state.num_input_tokens_seen,
        "train_seconds": train_seconds,
        "test_predictions": predictions,
        "test_predicted_ids": test_predicted_ids,
        "test_label_ids": test_label_ids,
    }
    results["train_tokens_per_second"] = extra["train_tokens"] / train_seconds
    dataset_name = data_args.dataset_name or (
        f"rt_polarity (split {data_args.rt_polarity_split}, seed {data_args.split_seed})"
        if data_args.rt_polarity_dir else Path(data_args.train_file).name
    )
    card = model_card(model_args, training_args, "text-classification", dataset_name, results, conversion,
                      ("accuracy", "f1"))
    save_outputs(trainer, tokenizer, card, results, extra, training_args.output_dir,
                 unpad_tokens=checkpoint_unpad_tokens(model_args.model_name_or_path))
    return {
        "results": results,
        "log_history": trainer.state.log_history,
        "wall_seconds": time.perf_counter() - start,
        **extra,
    }


__all__ = ["classification_metrics", "predict_in_order", "run_classification"]
