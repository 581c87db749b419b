"""`mlm_trainer`, the one MLM `Trainer` of the package, and its callbacks: `ThroughputCallback`, early stopping
(`--early_stopping_patience`), `StopAtStep` (`--stop_at_step`); the note for a checkpoint without an MLM head."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import torch
from transformers import (
    DataCollatorForLanguageModeling,
    EarlyStoppingCallback,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    default_data_collator,
)
from transformers.utils import logging as hf_logging

from ..params import MlmFlops
from ..training.blocks import fixed_maskings
from ..training.collators import PaddingFreeCollator
from .metrics import IGNORE_INDEX, mlm_metrics_arguments
from .speed import prediction_positions, prediction_rows

logger = hf_logging.get_logger(__name__)

MLM_HEAD_PREFIX = "cls.predictions."
# transformers' warning for a checkpoint without an MLM head (a sentence-embedding BERT): nothing is corrupted, the
# head is new (`new_mlm_head_note` says so).
ABSENT_HEAD_WARNING = "This checkpoint seem corrupted"


class FixedOrRandomMaskCollator(DataCollatorForLanguageModeling):
    """BERT's masking (Devlin et al. 2019, sec. 3.1) of training batches, afresh each batch (torch's global RNG);
    batches that carry `labels` (the fixed maskings) pass through; with `fixed_prediction_rows` a masked batch gets
    `prediction_positions` too."""

    def __init__(
        self, tokenizer, mlm_probability, mask_replace_prob=0.8, random_replace_prob=0.1, fixed_prediction_rows=False
    ):
        rates = {"mask_replace_prob": mask_replace_prob, "random_replace_prob": random_replace_prob}
        super().__init__(tokenizer, mlm_probability=mlm_probability, **rates)
        self.fixed_prediction_rows = fixed_prediction_rows

    def __call__(self, features: list[dict], return_tensors: str | None = None) -> dict[str, torch.Tensor]:
        if "labels" in features[0]:
            return default_data_collator(features)
        batch = super().__call__(features, return_tensors)
        if self.fixed_prediction_rows:
            labels = batch["labels"]
            rows = prediction_rows(labels.numel(), self.mlm_probability)
            batch["prediction_positions"] = prediction_positions(labels, rows)
        return batch


@contextlib.contextmanager
def absent_head_warning_dropped() -> Iterator[None]:
    """Drop `ABSENT_HEAD_WARNING` while an MLM model loads."""
    modeling_logger = hf_logging.get_logger("transformers.modeling_utils")
    log_filter = lambda record: ABSENT_HEAD_WARNING not in record.getMessage()  # noqa: E731
    modeling_logger.addFilter(log_filter)
    try:
        yield
    finally:
        modeling_logger.removeFilter(log_filter)


def new_mlm_head_note(new_weights: list[str], checkpoint: str, vocab_size: int) -> str | None:
    """The message for a checkpoint without an MLM head (new `cls.predictions.*` weights), else None."""
    head = sorted(k for k in new_weights if MLM_HEAD_PREFIX in k)
    if not head:
        return None
    return (
        f"{checkpoint} has no MLM head (e.g. a sentence-embedding BERT such as all-MiniLM-L6-v2): the head's "
        f"{len(head)} weights ({', '.join(head)}) are newly initialised; the decoder weight is tied to the word "
        f"embeddings. 'before' perplexity therefore measures a random head (a uniform guess over the {vocab_size:,}-"
        f"token vocabulary scores {vocab_size:,}; a random head scores far worse), not the checkpoint: compare "
        f"'after' runs, or start from a checkpoint with an MLM head (e.g. bert-base-uncased)."
    )


def mlm_trainer(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train_blocks,
    eval_blocks,
    training_args: TrainingArguments,
    mlm_probability: float = 0.15,
    seed: int = 42,
    padding_free: bool = False,
    callbacks: list[TrainerCallback] | None = None,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    fixed_prediction_rows: bool = False,
) -> Trainer:
    """A `Trainer` for masked-language-model training of `model` on `train_blocks` (rows of `documents_to_blocks`),
    masked afresh each batch (`FixedOrRandomMaskCollator`). `eval_blocks`: fixed maskings (rows with `labels`), or
    blocks masked once here with `seed`: every evaluation scores the same tokens, and reports `mlm_scores`.
    `padding_free`: `PaddingFreeCollator`; `fixed_prediction_rows`: batches carry `prediction_positions`.
    """
    masking = dict(mlm_probability=mlm_probability, mask_replace_prob=mask_replace_prob)
    masking["random_replace_prob"] = random_replace_prob
    collator = FixedOrRandomMaskCollator(tokenizer, **masking, fixed_prediction_rows=fixed_prediction_rows)
    if "labels" not in eval_blocks.column_names:
        eval_blocks = fixed_maskings(eval_blocks, tokenizer, 1, seed, **masking)
    return Trainer(
        model=model,
        args=training_args,
        train_dataset=train_blocks,
        eval_dataset=eval_blocks,
        processing_class=tokenizer,
        data_collator=PaddingFreeCollator(then=collator) if padding_free else collator,
        callbacks=callbacks,
        **mlm_metrics_arguments(tokenizer.mask_token_id, training_args),
    )


DEFAULT_METRIC = "mask_loss"  # eval_mask_loss: the held-out loss on [MASK] positions (hf_ffn.mlm.metrics)


def early_stopping_callback(
    patience: int | None, threshold: float, training_args: TrainingArguments
) -> EarlyStoppingCallback | None:
    """`EarlyStoppingCallback(patience, threshold)` with `training_args` set up for it in place
    (`load_best_model_at_end`; `metric_for_best_model` `DEFAULT_METRIC` unless given); None for `patience` None.
    Raises `ValueError` naming --early_stopping_patience without evaluations, or checkpoints that miss the best."""
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
    """Refuse a `--stop_at_step` the run cannot stop at: no --max_steps, not below it, or not after `resumed_step`
    (the step of the checkpoint `resume`)."""
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


class ThroughputCallback(TrainerCallback):
    """Adds `train_tokens_per_second` and `train_gflops_per_second` (since the previous training log) to every
    training log line (and `state.log_history`), and the same over the whole run with `train_tokens` to the final
    one (replacing transformers' own). Tokens: the non-padding ones, counted by a forward pre-hook, and the rows the
    head decodes; seconds: training's, less evaluating and saving; FLOPs: `MlmFlops.training_flops` (3 × the forward
    matmuls, Kaplan et al. 2020). Under `torchrun` each process counts its own. `flops`: `hf_ffn.params.mlm_flops`
    (None: tokens per second only); `pad_token_id`: for batches without an attention mask; `clock`: fake in tests.
    """

    def __init__(
        self,
        flops: MlmFlops | None = None,
        sparse_prediction: bool = True,
        pad_token_id: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.flops, self.sparse_prediction = flops, sparse_prediction
        self.pad_token_id, self.clock = pad_token_id, clock
        self.tokens = self.decoded = 0  # since the last training log
        self.total_tokens = self.total_decoded = 0
        self.seconds = self.total_seconds = 0.0
        self.mark = None  # the clock when training (not evaluation or saving) last resumed
        self.hook = None

    def count(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        """Forward pre-hook: count a training batch, on its device (read back once per log line, not per step:
        reading a CUDA tensor waits for the GPU)."""
        if not module.training:
            return
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        attention_mask, labels = kwargs.get("attention_mask"), kwargs.get("labels")
        if attention_mask is not None and attention_mask.dim() == 2:
            tokens = (attention_mask != 0).sum()  # also for masks that number the documents of a row
        elif input_ids is not None and self.pad_token_id is not None:
            tokens = (input_ids != self.pad_token_id).sum()
        else:
            tokens = input_ids.numel() if input_ids is not None else 0
        decoded = (labels != IGNORE_INDEX).sum() if labels is not None and self.sparse_prediction else tokens
        self.tokens = self.tokens + tokens
        self.decoded = self.decoded + decoded

    def rates(self, tokens: int, decoded: int, seconds: float) -> dict[str, float]:
        """Tokens per second and achieved GFLOP/s of `tokens` (and `decoded` head rows) in `seconds`."""
        if seconds <= 0:
            return {}
        rates = {"train_tokens_per_second": round(tokens / seconds, 3)}
        if self.flops is not None:
            rates["train_gflops_per_second"] = round(self.flops.training_flops(tokens, decoded) / seconds / 1e9, 3)
        return rates

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if model is not None and self.hook is None:
            # run eagerly under torch.compile (a hook outside the compiled graph)
            self.hook = model.register_forward_pre_hook(torch.compiler.disable(self.count), with_kwargs=True)
        self.mark = self.clock()

    def on_step_end(self, args, state, control, **kwargs):
        now = self.clock()  # a step ends; logging, evaluation and saving follow
        self.seconds += now - self.mark
        self.mark = now

    def on_evaluate(self, args, state, control, **kwargs):
        self.mark = self.clock()  # training resumes now: the time since the last mark was not training

    on_save = on_evaluate

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs is None:
            return
        self.tokens, self.decoded = int(self.tokens), int(self.decoded)  # the one read-back per log line
        if "loss" in logs:  # a training log line
            added = self.rates(self.tokens, self.decoded, self.seconds)
            self.total_tokens += self.tokens
            self.total_decoded += self.decoded
            self.total_seconds += self.seconds
            self.tokens = self.decoded = 0
            self.seconds = 0.0
        elif "train_runtime" in logs:  # the final line: the whole run
            tokens, decoded = self.total_tokens + self.tokens, self.total_decoded + self.decoded
            added = {"train_tokens": tokens, **self.rates(tokens, decoded, self.total_seconds + self.seconds)}
        else:
            return
        logs.update(added)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(added)  # Trainer copied `logs` there before calling on_log

    def on_train_end(self, args, state, control, **kwargs):
        if self.hook is not None:
            self.hook.remove()
            self.hook = None
