"""Evaluation metrics of masked language modelling, the transformers way: `preprocess_logits_for_metrics` reduces
each evaluation batch's logits to one (loss, prediction) pair per position, so evaluation keeps O(tokens) numbers
instead of O(tokens × vocabulary) (`run_mlm.py` reduces to the argmax alone), and `compute_metrics` reads the
inputs (`TrainingArguments.include_for_metrics=["inputs"]`) to tell the scored positions apart:

- [MASK]: the input shows the [MASK] token (80% of the scored positions under BERT's 80/10/10 rule);
- kept: the input shows the true token (the 10% left unchanged, and the rare random draw that picked the true
  token: the model sees the same thing in both cases);
- random: the input shows another token (the rest of the 10% replaced by a random token).

`mask_loss` (loss on the [MASK] positions) is the measure a context-free predictor cannot game: on kept positions
copying the visible token scores well without any context. `token_loss` is the mean over every scored position,
each position weighing the same; Trainer's own `eval_loss` is the mean of the per-batch mean losses (each batch
weighted by its number of sequences), which equals `token_loss` only when every batch holds the same number of
scored positions (e.g. one evaluation batch).
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import EvalPrediction

IGNORE_INDEX = -100  # labels of unscored positions (CrossEntropyLoss's ignore_index, the collators' fill)


def per_position_loss_and_prediction(
    logits: torch.Tensor | tuple[torch.Tensor, ...], labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`Trainer`'s `preprocess_logits_for_metrics` for a masked-language model: the cross-entropy (nats, computed
    in float32) and the argmax of each scored position, laid out as `labels`.

    Args:
        logits: (batch, seq, vocab) when the head decodes every position (upstream `BertForMaskedLM`,
            `sparse_prediction` off), or (n_scored, vocab), the scored positions of `labels` in row-major order,
            when `FfnBertConfig.sparse_prediction` is on (its head decodes only those with labels given, also in
            evaluation). A tuple (the model's outputs after the loss): its first entry.
        labels: (batch, seq), `IGNORE_INDEX` where a position is not scored.

    Returns:
        `(losses, predictions)`, both (batch, seq): float32 losses (0 where not scored) and int64 argmax token ids
        (`IGNORE_INDEX` where not scored).

    Raises:
        ValueError: if the logits' shape fits neither layout.
    """
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
    """The MLM metrics of scored positions (all arrays of one shape, e.g. (blocks, seq); `labels` is `IGNORE_INDEX`
    where a position is not scored). Means are taken in float64.

    Returns:
        `mask_loss`, `kept_loss`, `random_loss`, `token_loss` (mean cross-entropy in nats over the [MASK], kept,
        randomly replaced and all scored positions; `nan` where a kind has no position), `accuracy` and
        `mask_accuracy` (fraction of argmax == label over all scored and over [MASK] positions), and the counts
        `scored_tokens` and `mask_tokens`.
    """
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
    """`Trainer`'s `compute_metrics` for a masked-language model evaluated with `per_position_loss_and_prediction`
    as `preprocess_logits_for_metrics` and `"inputs"` in `TrainingArguments.include_for_metrics`: `mlm_scores` of
    the whole evaluation set (Trainer prefixes the keys, e.g. `eval_mask_loss`)."""

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
    """The `Trainer` keyword arguments that evaluate an MLM with these metrics (`compute_metrics`,
    `preprocess_logits_for_metrics`); adds `"inputs"` to `training_args.include_for_metrics` (in place)."""
    if "inputs" not in training_args.include_for_metrics:
        training_args.include_for_metrics = [*training_args.include_for_metrics, "inputs"]
    return {
        "compute_metrics": MlmMetrics(mask_token_id),
        "preprocess_logits_for_metrics": per_position_loss_and_prediction,
    }


__all__ = ["IGNORE_INDEX", "MlmMetrics", "mlm_metrics_arguments", "mlm_scores", "per_position_loss_and_prediction"]
