"""`mlm_trainer`, the one MLM `Trainer` of the package, and the note for a checkpoint without an MLM head."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import torch
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    default_data_collator,
)
from transformers.utils import logging as hf_logging

from ..training.blocks import fixed_maskings, masking_collator
from ..training.collators import PaddingFreeCollator
from .metrics import mlm_metrics_arguments
from .speed import prediction_positions, prediction_rows

logger = hf_logging.get_logger(__name__)

MLM_HEAD_PREFIX = "cls.predictions."
# transformers' warning for a checkpoint without an MLM head (a sentence-embedding BERT): nothing is corrupted, the
# head is new (`new_mlm_head_note` says so).
ABSENT_HEAD_WARNING = "This checkpoint seem corrupted"


class FixedOrRandomMaskCollator:
    """Masks training batches afresh (`masking_collator`) and passes batches that carry `labels` (the fixed
    maskings) through; with `fixed_prediction_rows` a masked batch gets `prediction_positions` too."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        mlm_probability: float,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        fixed_prediction_rows: bool = False,
    ):
        self.mlm = masking_collator(tokenizer, mlm_probability, mask_replace_prob, random_replace_prob)
        self.mlm_probability, self.fixed_prediction_rows = mlm_probability, fixed_prediction_rows

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        if "labels" in features[0]:
            return default_data_collator(features)
        batch = self.mlm(features)
        if self.fixed_prediction_rows:
            labels = batch["labels"]
            rows = prediction_rows(labels.numel(), self.mlm_probability)
            batch["prediction_positions"] = prediction_positions(labels, rows)
        return batch


class _DropAbsentHeadWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return ABSENT_HEAD_WARNING not in record.getMessage()


@contextlib.contextmanager
def absent_head_warning_dropped() -> Iterator[None]:
    """Drop `ABSENT_HEAD_WARNING` while an MLM model loads."""
    modeling_logger = hf_logging.get_logger("transformers.modeling_utils")
    log_filter = _DropAbsentHeadWarning()
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
    masked afresh each batch (`masking_collator`'s rates). `eval_blocks`: fixed maskings (rows with `labels`), or
    blocks masked once here with `seed`: every evaluation scores the same tokens, and reports `mlm_scores`
    (`"inputs"` is added to `training_args.include_for_metrics`). `padding_free`: `PaddingFreeCollator`.
    `fixed_prediction_rows`: training batches carry `prediction_positions` (`hf_ffn.mlm.speed`).
    """
    masking = {"mlm_probability": mlm_probability, "mask_replace_prob": mask_replace_prob}
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
