"""The text `hf-ffn heal` distils on, read as `hf-ffn mlm` reads it (`hf_ffn.training.corpus`,
`hf_ffn.training.blocks`), and the end-to-end stage's token budget."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from transformers import PreTrainedTokenizerBase, TrainingArguments

from ..training.blocks import documents_to_blocks
from ..training.corpus import corpus_files, is_streamed, load_documents, load_hub_corpus

if TYPE_CHECKING:
    from .run import HealArguments


def training_documents(heal_args: HealArguments):
    """The text to distil on as documents (a `Dataset`, or with --streaming an `IterableDataset`, column `text`):
    `--train_files` a document per text file or per json/parquet row (`hf_ffn.training.corpus.load_documents`), or
    the `train` split of `--dataset_name` (`load_hub_corpus`). Nothing is held out of it: the held-out text is
    `--eval_data`.

    Raises:
        FileNotFoundError, ValueError: a missing or empty file, a data set that cannot be loaded, no such column.
    """
    if heal_args.train_files is not None:
        files = corpus_files(heal_args.train_files, argument="--train_files")
        return load_documents(files, heal_args.document_boundary, text_column=heal_args.text_column)
    splits = load_hub_corpus(
        heal_args.dataset_name,
        heal_args.dataset_config_name,
        streaming=heal_args.streaming,
        text_column=heal_args.text_column,
        validation_split_percentage=None,  # only the train split: the held-out text is --eval_data
    )
    return splits["train"]


def training_blocks(documents, tokenizer: PreTrainedTokenizerBase, heal_args: HealArguments):
    """`documents` → blocks of --max_seq_length tokens (`documents_to_blocks`, as `hf-ffn mlm` cuts them), the
    first --max_train_samples, with an all-ones `attention_mask`.

    Raises:
        ValueError: the text is shorter than one block (not checked on a stream).
    """
    block = heal_args.max_seq_length
    blocks = documents_to_blocks(documents, tokenizer, block).remove_columns("special_tokens_mask")
    if is_streamed(blocks):
        blocks = blocks.take(heal_args.max_train_samples) if heal_args.max_train_samples else blocks
    elif len(blocks) == 0:
        where = "--train_files" if heal_args.train_files is not None else "--dataset_name"
        raise ValueError(f"{where}: the text is shorter than one block of --max_seq_length {block} tokens")
    elif heal_args.max_train_samples:
        blocks = blocks.select(range(min(heal_args.max_train_samples, len(blocks))))
    return blocks.map(lambda row: {"attention_mask": [1] * block})


def end_to_end_blocks(blocks, probability: float, pad_token_id: int, seed: int):
    """The end-to-end stage's blocks: `blocks`, each cut with `probability` by `short_block` (seeded by `seed` and
    the block's index); the layer-wise stage's calibration takes the blocks whole."""
    if probability == 0:
        return blocks
    cut = lambda row, index: short_block(row, index, probability, pad_token_id, seed)  # noqa: E731
    return blocks.map(cut, with_indices=True)


def short_block(row: dict, index: int, probability: float, pad_token_id: int, seed: int) -> dict:
    """BERT's short sequences (`short_seq_prob` of google-research/bert `create_pretraining_data.py`): with
    `probability`, block `index` is cut to a length drawn uniformly from [2, its length] and padded back with
    `pad_token_id` (attention_mask 0 there), so the student also fits the short inputs it is used on; else all of
    it. The draw depends only on (`seed`, `index`): the same blocks are cut on every run and on resuming."""
    ids = row["input_ids"]
    draw = random.Random(f"{seed}:{index}")
    length = draw.randint(2, len(ids)) if draw.random() < probability else len(ids)
    return {
        "input_ids": ids[:length] + [pad_token_id] * (len(ids) - length),
        "attention_mask": [1] * length + [0] * (len(ids) - length),
    }


def set_steps_for_tokens(heal_args: HealArguments, training_args: TrainingArguments) -> None:
    """--max_train_tokens N → `training_args.max_steps` = ceil(N / tokens per optimizer step).

    Raises:
        ValueError: --max_steps given as well.
    """
    if training_args.max_steps > 0:
        raise ValueError(
            f"--max_train_tokens {heal_args.max_train_tokens} and --max_steps {training_args.max_steps} both set the "
            f"end-to-end stage's length; give one"
        )
    per_step = (
        heal_args.max_seq_length
        * training_args.train_batch_size
        * training_args.gradient_accumulation_steps
        * training_args.world_size
    )
    training_args.max_steps = -(-heal_args.max_train_tokens // per_step)
