"""Masked language modelling: `mlm_trainer` (a `Trainer` over MLM blocks, the one MLM training path of the
package) and `run_mlm` (the job of transformers' `run_mlm.py`: plain text in, perplexity before and after out)."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Iterator

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase, Trainer, TrainingArguments
from transformers.utils import logging as hf_logging

from ..modeling_ffn_bert import FfnBertForMaskedLM
from .arguments import MlmDataArguments, ModelArguments, resume_checkpoint
from .data import FixedOrRandomMaskCollator, PaddingFreeCollator, mask_once, mlm_blocks, read_text_documents
from .outputs import (
    check_checkpoint,
    check_output_dir,
    checkpoint_unpad_tokens,
    load_model,
    load_tokenizer,
    model_card,
    save_outputs,
    training_seconds,
)

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
        raise ValueError(f"--train_files: need at least two documents (whole documents are held out for "
                         f"validation), got {len(documents)}")
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
) -> Trainer:
    """A `Trainer` for masked-language-model training of `model` on `train_blocks` (rows of `mlm_blocks`).

    Training batches are masked afresh each time (BERT's dynamic masking); `eval_blocks` are masked once with
    `seed` (`masked_eval_dataset`), so losses before, during and after training are measured on the same masked
    tokens. `mlm_probability`: BERT's 0.15 (80% [MASK], 10% random token, 10% kept). `padding_free`: every batch
    concatenated into one row (`PaddingFreeCollator`), each block computed as if alone.
    """
    collator = FixedOrRandomMaskCollator(tokenizer, mlm_probability)
    return Trainer(
        model=model,
        args=training_args,
        train_dataset=train_blocks,
        eval_dataset=masked_eval_dataset(eval_blocks, tokenizer, mlm_probability, seed),
        processing_class=tokenizer,
        data_collator=PaddingFreeCollator(then=collator) if padding_free else collator,
    )


def run_mlm(model_args: ModelArguments, data_args: MlmDataArguments, training_args: TrainingArguments) -> dict:
    """Masked-language-model training of `FfnBertForMaskedLM` on plain text; perplexity before and after.

    Whole documents are held out for validation (seeded). Perplexity = exp(mean masked-token cross-entropy) on
    the validation blocks masked once with `split_seed` (15% of tokens, BERT's 80/10/10 rule), so the two
    numbers are comparable. A checkpoint without an MLM head (e.g. a sentence-embedding BERT) gets a newly
    initialised head, listed in the returned `conversion["new_weights"]`, and a very high perplexity before.

    Raises:
        FileNotFoundError, FileExistsError, ValueError: on bad input, before training starts.
    """
    start = time.perf_counter()
    check_output_dir(training_args.output_dir)
    resume = resume_checkpoint(training_args)
    documents = read_text_documents(data_args.train_files)
    train_docs, eval_docs = held_out_split([text for _, text in documents], data_args.validation_split_percentage,
                                           data_args.split_seed)
    check_checkpoint(model_args.model_name_or_path, "--model_name_or_path")
    tokenizer = load_tokenizer(model_args)

    train = mlm_blocks(train_docs, tokenizer, data_args.max_seq_length)
    evaluation = mlm_blocks(eval_docs, tokenizer, data_args.max_seq_length)
    if len(train) == 0 or len(evaluation) == 0:
        raise ValueError(f"--max_seq_length {data_args.max_seq_length}: the text is shorter than one block")
    if data_args.max_train_samples:
        train = train.select(range(min(data_args.max_train_samples, len(train))))
    if data_args.max_eval_samples:
        evaluation = evaluation.select(range(min(data_args.max_eval_samples, len(evaluation))))

    torch.manual_seed(training_args.seed)
    with absent_head_warning_dropped():
        model, conversion = load_model(model_args, FfnBertForMaskedLM)
    head_note = new_mlm_head_note(conversion.get("new_weights", conversion.get("new", [])),
                                  model_args.model_name_or_path, model.config.vocab_size)
    if head_note:
        logger.warning(head_note)
    trainer = mlm_trainer(model, tokenizer, train, evaluation, training_args, data_args.mlm_probability,
                          data_args.split_seed, padding_free=model_args.padding_free)
    before = trainer.evaluate(metric_key_prefix="before")
    train_output = trainer.train(resume_from_checkpoint=resume)
    after = trainer.evaluate()
    results = dict(train_output.metrics)
    results.update(before)
    results.update(after)
    results["before_perplexity"] = math.exp(before["before_loss"])
    results["eval_perplexity"] = math.exp(after["eval_loss"])
    train_seconds = training_seconds(trainer.state.log_history, train_output.metrics["train_runtime"])
    extra = {
        "conversion": conversion,
        "unpad_tokens": model_args.unpad_tokens,  # how the run executed (not saved in config.json)
        "documents": {"train": len(train_docs), "validation": len(eval_docs)},
        "blocks": {"train": len(train), "validation": len(evaluation)},
        "train_seconds": train_seconds,
        "mlm_head": "newly initialised" if head_note else "from the checkpoint",
    }
    card = model_card(model_args, training_args, "fill-mask", ", ".join(data_args.train_files), results,
                      conversion, ("perplexity",))
    save_outputs(trainer, tokenizer, card, results, extra, training_args.output_dir,
                 unpad_tokens=checkpoint_unpad_tokens(model_args.model_name_or_path))
    return {"results": results, "log_history": trainer.state.log_history,
            "wall_seconds": time.perf_counter() - start, **extra}


__all__ = ["absent_head_warning_dropped", "held_out_split", "masked_eval_dataset", "mlm_trainer", "new_mlm_head_note", "run_mlm"]
