"""Masked language modelling: `mlm_trainer` (a `Trainer` over MLM blocks, the one MLM training path of the
package) and the note for a checkpoint without an MLM head. The runs (`run_pretraining`, `run_mlm`) are in
`hf_ffn.mlm.run`, their data path in `hf_ffn.training.corpus`."""

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
# transformers' warning when both ends of the tied MLM decoder bias are absent, i.e. the checkpoint has no MLM head
# at all (a sentence-embedding BERT): nothing is corrupted, the head is new; `run_mlm` says so in its own words.
ABSENT_HEAD_WARNING = "This checkpoint seem corrupted"


class FixedOrRandomMaskCollator:
    """Masks training batches afresh each time (BERT's dynamic masking, `DataCollatorForLanguageModeling`) but
    passes batches that already carry `labels` through unchanged: the evaluation set is masked once, with a seed,
    so perplexity before and after training is measured on the same masked tokens. The masking rule:
    `masking_collator`'s. With `fixed_prediction_rows`, a batch it masks also gets `prediction_positions`
    (`hf_ffn.mlm.speed.prediction_positions`: a fixed number of positions per batch shape for sparse
    prediction to decode)."""

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
    """Drop transformers' misleading "checkpoint seem corrupted" warning while an MLM model loads (see above)."""
    modeling_logger = hf_logging.get_logger("transformers.modeling_utils")
    log_filter = _DropAbsentHeadWarning()
    modeling_logger.addFilter(log_filter)
    try:
        yield
    finally:
        modeling_logger.removeFilter(log_filter)


def new_mlm_head_note(new_weights: list[str], checkpoint: str, vocab_size: int) -> str | None:
    """The message for a checkpoint without an MLM head (its `cls.predictions.*` weights are newly initialised),
    else None."""
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
    """A `Trainer` for masked-language-model training of `model` on `train_blocks` (rows of `documents_to_blocks`).

    Training batches are masked afresh each time (BERT's dynamic masking, `masking_collator`: `mlm_probability` of
    the tokens, BERT's 0.15; of those `mask_replace_prob` [MASK], `random_replace_prob` a random token, the rest
    kept). `eval_blocks`: fixed maskings (`fixed_maskings`: rows with `labels`), evaluated as they are, or blocks
    without `labels`, then masked once here with `seed`; either way losses before, during and after training are
    measured on the same masked tokens. `padding_free`: every batch concatenated into one row
    (`PaddingFreeCollator`), each block computed as if alone. `callbacks`: extra `TrainerCallback`s (e.g. a
    study's gradient recorder), added to the Trainer's defaults. `fixed_prediction_rows`: training batches carry
    `prediction_positions`, a fixed number of positions per batch for sparse prediction to decode
    (`hf_ffn.mlm.speed.prediction_positions`).

    Every evaluation reports, besides Trainer's `eval_loss`, `hf_ffn.mlm.metrics.mlm_scores` (loss on
    [MASK] positions `eval_mask_loss`, `eval_token_loss`, accuracies): `"inputs"` is added to
    `training_args.include_for_metrics` (in place).
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


__all__ = ["absent_head_warning_dropped", "mlm_trainer", "new_mlm_head_note"]
