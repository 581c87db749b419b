"""Ending a run before the end of its schedule: `--early_stopping_patience` / `--early_stopping_threshold`
(transformers' `EarlyStoppingCallback`; the best checkpoint is loaded at the end) and `--stop_at_step N`
(`StopAtStep`: a checkpoint after step N of the `--max_steps` schedule, its learning rate not decayed, for a later run
to go on from).
"""

from __future__ import annotations

from transformers import EarlyStoppingCallback, TrainerCallback, TrainingArguments

DEFAULT_METRIC = "mask_loss"  # eval_mask_loss: the held-out loss on [MASK] positions (hf_ffn.mlm.metrics)


def early_stopping_callback(
    patience: int | None, threshold: float, training_args: TrainingArguments
) -> EarlyStoppingCallback | None:
    """`EarlyStoppingCallback(patience, threshold)` with `training_args` set up for it in place
    (`load_best_model_at_end`; `metric_for_best_model` `DEFAULT_METRIC`, lower is better, unless given); None for
    `patience` None.

    Raises:
        ValueError: naming --early_stopping_patience with no evaluation during training, or checkpoints that cannot
            hold the best model.
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


class StopAtStep(TrainerCallback):
    """Ends training after step `step` with a checkpoint (`should_save`) that a later run can resume from."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_training_stop = control.should_save = True


def check_stop_at_step(
    stop: int | None, training_args: TrainingArguments, resume: str | None = None, resumed_step: int = 0
):
    """Refuse a `--stop_at_step` the run cannot stop at (None: nothing to check).

    Raises:
        ValueError: naming --stop_at_step: no --max_steps, not below it, or not after `resumed_step` (the step of
            the checkpoint `resume`).
    """
    if stop is None:
        return
    option = f"--stop_at_step {stop}"
    if training_args.max_steps <= 0:
        raise ValueError(f"{option}: give --max_steps (the run stops at a step of its schedule)")
    if stop >= training_args.max_steps:
        raise ValueError(
            f"{option} must be below --max_steps {training_args.max_steps} (the schedule's last step; to end there, "
            f"drop --stop_at_step)"
        )
    if stop <= resumed_step:
        raise ValueError(
            f"{option}: the checkpoint resumed from ({resume}) is at step {resumed_step} already; give a later step, "
            f"or drop --stop_at_step to train to --max_steps"
        )
