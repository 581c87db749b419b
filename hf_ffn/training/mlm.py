"""Masked language modelling: `mlm_trainer` (a `Trainer` over MLM blocks, the one MLM training path of the
package), the held-out split of documents and the fixed evaluation masks, and the note for a checkpoint without an
MLM head. The runs (`run_pretraining`, `run_mlm`) are in `hf_ffn.training.pretraining`."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import numpy as np
from transformers import PreTrainedModel, PreTrainedTokenizerBase, Trainer, TrainerCallback, TrainingArguments
from transformers.utils import logging as hf_logging

from .data import FixedOrRandomMaskCollator, PaddingFreeCollator, mask_once
from .mlm_metrics import mlm_metrics_arguments

logger = hf_logging.get_logger(__name__)

MLM_HEAD_PREFIX = "cls.predictions."
# transformers' warning when both ends of the tied MLM decoder bias are absent, i.e. the checkpoint has no MLM head
# at all (a sentence-embedding BERT): nothing is corrupted, the head is new; `run_mlm` says so in its own words.
ABSENT_HEAD_WARNING = "This checkpoint seem corrupted"


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


def held_out_split(documents: list[str], percentage: float, seed: int) -> tuple[list[str], list[str]]:
    """`(train, held_out)`: whole documents, `percentage` of them (at least one, rounded) held out, chosen by a
    permutation from `numpy.random.default_rng(seed)`: the same documents and seed always give the same split.

    Raises:
        ValueError: with fewer than two documents (naming --train_files).
    """
    if len(documents) < 2:
        raise ValueError(
            f"--train_files: need at least two documents (whole documents are held out for "
            f"validation), got {len(documents)}"
        )
    order = np.random.default_rng(seed).permutation(len(documents))
    held_out = min(len(documents) - 1, max(1, round(len(documents) * percentage / 100)))
    return [documents[i] for i in order[held_out:]], [documents[i] for i in order[:held_out]]


def masked_eval_dataset(blocks, tokenizer: PreTrainedTokenizerBase, mlm_probability: float, seed: int):
    """`blocks` (rows of `mlm_blocks`) masked once with `seed` (`mask_once`), as a `Dataset` with columns
    `input_ids` and `labels`: every evaluation of a run scores the same masked tokens."""
    from datasets import Dataset

    masked = mask_once(blocks, tokenizer, mlm_probability, seed)
    return Dataset.from_dict({key: masked[key].tolist() for key in ("input_ids", "labels")})


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
) -> Trainer:
    """A `Trainer` for masked-language-model training of `model` on `train_blocks` (rows of `mlm_blocks`).

    Training batches are masked afresh each time (BERT's dynamic masking); `eval_blocks` are masked once with
    `seed` (`masked_eval_dataset`), so losses before, during and after training are measured on the same masked
    tokens. `mlm_probability`: BERT's 0.15 (80% [MASK], 10% random token, 10% kept). `padding_free`: every batch
    concatenated into one row (`PaddingFreeCollator`), each block computed as if alone. `callbacks`: extra
    `TrainerCallback`s (e.g. a study's gradient recorder), added to the Trainer's defaults.

    Every evaluation reports, besides Trainer's `eval_loss`, `hf_ffn.training.mlm_metrics.mlm_scores` (loss on
    [MASK] positions `eval_mask_loss`, `eval_token_loss`, accuracies): `"inputs"` is added to
    `training_args.include_for_metrics` (in place).
    """
    collator = FixedOrRandomMaskCollator(tokenizer, mlm_probability)
    return Trainer(
        model=model,
        args=training_args,
        train_dataset=train_blocks,
        eval_dataset=masked_eval_dataset(eval_blocks, tokenizer, mlm_probability, seed),
        processing_class=tokenizer,
        data_collator=PaddingFreeCollator(then=collator) if padding_free else collator,
        callbacks=callbacks,
        **mlm_metrics_arguments(tokenizer.mask_token_id, training_args),
    )


__all__ = ["absent_head_warning_dropped", "held_out_split", "masked_eval_dataset", "mlm_trainer", "new_mlm_head_note"]
