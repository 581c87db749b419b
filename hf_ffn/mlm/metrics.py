"""Evaluation metrics of masked language modelling: one (loss, prediction) pair kept per position (O(tokens), not
O(tokens × vocabulary)), the scored positions told apart by the input: [MASK], kept (the true token) or random.
`mask_loss` is the measure copying the visible token cannot game; `token_loss` weighs every scored position the same
(Trainer's `eval_loss` averages per-batch means).
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import EvalPrediction

IGNORE_INDEX = -100  # labels of unscored positions (CrossEntropyLoss's ignore_index, the collators' fill)


def per_position_loss_and_prediction(
    logits: torch.Tensor | tuple[torch.Tensor, ...], labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`Trainer`'s `preprocess_logits_for_metrics`: `(losses, predictions)`, both laid out as `labels` (batch, seq):
    the float32 cross-entropy (nats; 0 where not scored) and the argmax (`IGNORE_INDEX` where not scored).
    `logits`: (batch, seq, vocab), or (n_scored, vocab) under sparse prediction (row-major); a tuple: its first entry.
    Raises `ValueError` if the logits' shape fits neither layout."""
    if isinstance(logits, (tuple, list)):
        logits = logits[0]
    scored = labels != IGNORE_INDEX
    if logits.dim() == labels.dim() + 1 and logits.shape[:-1] == labels.shape:
        rows = logits[scored]  # full decoder: keep the scored positions
    elif logits.dim() == 2 and logits.shape[0] == int(scored.sum()):
        rows = logits  # sparse prediction: already the scored positions, in row-major order
    else:
        raise ValueError(
            f"MLM logits of shape {tuple(logits.shape)} fit neither (batch, seq, vocab) nor (n_scored, vocab) "
            f"for labels of shape {tuple(labels.shape)} with {int(scored.sum())} scored positions"
        )
    losses = torch.zeros(labels.shape, dtype=torch.float32, device=labels.device)
    losses[scored] = torch.nn.functional.cross_entropy(rows.float(), labels[scored], reduction="none")
    predictions = torch.full_like(labels, IGNORE_INDEX)
    predictions[scored] = rows.argmax(dim=-1)
    return losses, predictions


def mlm_scores(
    losses: np.ndarray, predictions: np.ndarray, labels: np.ndarray, input_ids: np.ndarray, mask_token_id: int
) -> dict[str, float]:
    """The MLM metrics of the scored positions (arrays of one shape, e.g. (blocks, seq)), means in float64:
    `mask_loss`, `kept_loss`, `random_loss`, `token_loss` (nats; `nan` where a kind has no position), `accuracy`,
    `mask_accuracy` (argmax == label over all scored and over [MASK] positions), `scored_tokens`, `mask_tokens`."""
    scored = labels != IGNORE_INDEX
    masked = scored & (input_ids == mask_token_id)
    kept = scored & (input_ids == labels)
    replaced = scored & ~masked & ~kept
    correct = predictions == labels
    losses = losses.astype(np.float64)

    def mean(values: np.ndarray, where: np.ndarray) -> float:
        return float(values[where].mean()) if where.any() else float("nan")

    return {
        "mask_loss": mean(losses, masked),
        "kept_loss": mean(losses, kept),
        "random_loss": mean(losses, replaced),
        "token_loss": mean(losses, scored),
        "accuracy": mean(correct, scored),
        "mask_accuracy": mean(correct, masked),
        "scored_tokens": int(scored.sum()),
        "mask_tokens": int(masked.sum()),
    }


class MlmMetrics:
    """`Trainer`'s `compute_metrics`: `mlm_scores` of the whole evaluation set (`mlm_metrics_arguments`)."""

    def __init__(self, mask_token_id: int):
        self.mask_token_id = mask_token_id

    def __call__(self, prediction: EvalPrediction) -> dict[str, float]:
        if prediction.inputs is None:
            raise ValueError(
                'MLM metrics need the evaluation inputs: add "inputs" to TrainingArguments.include_for_metrics'
            )
        losses, predictions = prediction.predictions
        return mlm_scores(losses, predictions, prediction.label_ids, prediction.inputs, self.mask_token_id)


def mlm_metrics_arguments(mask_token_id: int, training_args) -> dict:
    """The `Trainer` keyword arguments of these metrics; adds `"inputs"` to `training_args.include_for_metrics`."""
    if "inputs" not in training_args.include_for_metrics:
        training_args.include_for_metrics = [*training_args.include_for_metrics, "inputs"]
    return {
        "compute_metrics": MlmMetrics(mask_token_id),
        "preprocess_logits_for_metrics": per_position_loss_and_prediction,
    }
