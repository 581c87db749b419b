"""Early stopping from the command line (`--early_stopping_patience`, `--early_stopping_threshold`): transformers'
`EarlyStoppingCallback` with the `TrainingArguments` it needs.

The callback stops training once the metric has not improved (by more than the threshold) for `patience`
evaluations in a row; it reads the best value Trainer tracks for `metric_for_best_model`, and the best checkpoint
is loaded at the end (`load_best_model_at_end`), so the saved model is the best one evaluated.
"""

from __future__ import annotations

from transformers import EarlyStoppingCallback, TrainingArguments

DEFAULT_METRIC = "mask_loss"  # eval_mask_loss: the held-out loss on [MASK] positions (hf_ffn.training.mlm_metrics)


def early_stopping_callback(
    patience: int | None, threshold: float, training_args: TrainingArguments
) -> EarlyStoppingCallback | None:
    """`EarlyStoppingCallback(patience, threshold)` with `training_args` set up for it (in place):
    `load_best_model_at_end`, and, unless `--metric_for_best_model` was given, `metric_for_best_model` =
    `DEFAULT_METRIC` with `greater_is_better=False`. `patience` `None`: no early stopping, `None` returned and
    `training_args` left alone.

    Raises:
        ValueError: naming --early_stopping_patience when there is no evaluation during training
            (`--eval_strategy no`), or when the checkpoints cannot hold the best model (`--save_strategy` neither
            "best" nor the evaluation's strategy, or `--save_steps` not a multiple of `--eval_steps`).
    """
    if patience is None:
        return None
    option = f"--early_stopping_patience {patience}"
    eval_strategy, save_strategy = str(training_args.eval_strategy.value), str(training_args.save_strategy.value)
    if eval_strategy == "no":
        raise ValueError(
            f"{option} stops after evaluations that do not improve: give --eval_strategy steps (and --eval_steps) "
            f"or epoch; got --eval_strategy no"
        )
    if save_strategy != "best":
        if save_strategy != eval_strategy:
            raise ValueError(
                f"{option} loads the best checkpoint at the end: --save_strategy must be 'best' or "
                f"--eval_strategy's {eval_strategy!r}; got {save_strategy!r}"
            )
        if eval_strategy == "steps" and training_args.save_steps % training_args.eval_steps != 0:
            raise ValueError(
                f"{option} loads the best checkpoint at the end: --save_steps ({training_args.save_steps:g}) must "
                f"be a multiple of --eval_steps ({training_args.eval_steps:g}), or --save_strategy best"
            )
    training_args.load_best_model_at_end = True
    if training_args.metric_for_best_model is None:
        training_args.metric_for_best_model = DEFAULT_METRIC
        training_args.greater_is_better = False
    return EarlyStoppingCallback(early_stopping_patience=patience, early_stopping_threshold=threshold)


__all__ = ["DEFAULT_METRIC", "early_stopping_callback"]
