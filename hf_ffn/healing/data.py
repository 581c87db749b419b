"""The text `hf-ffn heal` reads, once: the training blocks, cut as `hf-ffn mlm` cuts them (`hf_ffn.training.corpus`,
`hf_ffn.training.blocks`), the layer-wise calibration blocks, and the held-out `--eval_data` snippets."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from ..finetune.readers import read_labelled_texts
from ..training.blocks import documents_to_blocks
from ..training.corpus import corpus_files, is_streamed, load_documents, load_hub_corpus
from .metrics import PROBE_FOLDS

if TYPE_CHECKING:
    from .run import HealArguments


@dataclass
class HealData:
    """What `read_data` read: `blocks` (a `Dataset`, or with --streaming an `IterableDataset`: input_ids,
    attention_mask), `calibration` (blocks, seq) int64 or None, held-out `texts` and `labels` (None without),
    `curve_texts` (measured during training) and `summary` (the record's counts)."""

    blocks: Any
    calibration: torch.Tensor | None
    texts: list[str] | None
    labels: list | None
    curve_texts: list[str]
    summary: dict[str, Any]


def read_data(heal_args: HealArguments, tokenizer: PreTrainedTokenizerBase, calibration_tokens: int | None) -> HealData:
    """The training text as blocks of --max_seq_length tokens (the first --max_train_samples; nothing held out of it:
    the held-out text is --eval_data), `calibration_tokens` of them as a stream's calibration (evenly spaced blocks
    are picked later from a whole data set; None: no layer-wise stage), and --eval_data's seeded subsets.

    Raises:
        FileNotFoundError, ValueError: a missing or empty file, a data set that cannot be loaded, no such column,
            text shorter than one block (not checked on a stream), a subset too small for the probe's folds.
    """
    if heal_args.train_files is not None:
        files = corpus_files(heal_args.train_files, argument="--train_files")
        documents = load_documents(files, heal_args.document_boundary, text_column=heal_args.text_column)
    else:  # only the train split: the held-out text is --eval_data
        documents = load_hub_corpus(
            heal_args.dataset_name,
            heal_args.dataset_config_name,
            streaming=heal_args.streaming,
            text_column=heal_args.text_column,
            validation_split_percentage=None,
        )["train"]

    def subset(items: list, size: int) -> list:  # `size` of them (all if fewer), seeded, in their order
        if size >= len(items):
            return list(items)
        return [items[i] for i in sorted(np.random.default_rng(0).choice(len(items), size=size, replace=False))]

    texts = labels = None
    if heal_args.eval_data:
        texts, labels = read_labelled_texts(
            heal_args.eval_data,
            text_column=heal_args.eval_text_column,
            label_column=heal_args.eval_label_column,
            split=heal_args.eval_split,
            argument="--eval_data",
        )
    if texts and heal_args.max_eval_snippets:
        size = heal_args.max_eval_snippets
        texts, labels = subset(texts, size), labels and subset(labels, size)
        counts = {label: labels.count(label) for label in sorted(set(labels), key=str)} if labels else {}
        if heal_args.probe and counts and min(counts.values()) < PROBE_FOLDS:
            raise ValueError(
                f"--max_eval_snippets {heal_args.max_eval_snippets}: the seeded subset has {counts} "
                f"snippets per label, but the {PROBE_FOLDS}-fold probe needs at least {PROBE_FOLDS} of "
                f"each; give a larger number or --probe false"
            )
    block = heal_args.max_seq_length
    blocks = documents_to_blocks(documents, tokenizer, block).remove_columns("special_tokens_mask")
    streamed = is_streamed(blocks)
    if streamed:
        blocks = blocks.take(heal_args.max_train_samples) if heal_args.max_train_samples else blocks
        blocks = blocks.map(lambda row: {"attention_mask": [1] * block})
    else:
        if len(blocks) == 0:
            where = "--train_files" if heal_args.train_files is not None else "--dataset_name"
            raise ValueError(f"{where}: the text is shorter than one block of --max_seq_length {block} tokens")
        if heal_args.max_train_samples:
            blocks = blocks.select(range(min(heal_args.max_train_samples, len(blocks))))
        blocks = blocks.add_column("attention_mask", [[1] * block] * len(blocks))
    calibration = None
    if calibration_tokens is not None:  # a stream's: its first blocks, as many as the memory cap could use
        first = -(-calibration_tokens // block) if streamed else None
        calibration = torch.tensor([row["input_ids"] for row in blocks.take(first)] if first else blocks["input_ids"])
    summary = {
        "train_files": heal_args.train_files,
        "dataset_name": heal_args.dataset_name,
        "documents": "streamed" if streamed else len(documents),
        "blocks": "streamed" if streamed else len(blocks),
        "block_tokens": block,
    }
    curve_texts = subset(texts, heal_args.curve_snippets) if texts else []
    return HealData(blocks, calibration, texts, labels, curve_texts, summary)


def end_to_end_blocks(blocks, probability: float, pad_token_id: int, seed: int, frame: tuple[int, int] | None = None):
    """The end-to-end stage's blocks: `blocks`, each cut with `probability` by `short_block` (seeded by `seed` and
    the block's index) and, with `frame` = (cls_token_id, sep_token_id), framed; the layer-wise calibration takes the
    blocks whole."""
    if probability == 0 and frame is None:
        return blocks
    options = {"probability": probability, "pad_token_id": pad_token_id, "seed": seed, "frame": frame}
    return blocks.map(short_block, with_indices=True, fn_kwargs=options)


def short_block(
    row: dict, index: int, probability: float, pad_token_id: int, seed: int, frame: tuple[int, int] | None = None
) -> dict:
    """BERT's short sequences (`short_seq_prob` of google-research/bert `create_pretraining_data.py`): with
    `probability`, block `index` is cut to a length drawn uniformly from [2, its length] and padded back with
    `pad_token_id` (attention_mask 0 there), so the student also fits the short inputs it is used on; else all of
    it. The draw depends only on (`seed`, `index`): the same blocks are cut on every run and on resuming.

    With `frame` = (cls, sep) the kept length is `cls`, the block's first tokens (a leading `cls` not repeated), `sep`,
    as each of BERT's pre-training instances is, so position 0 is [CLS] as in every input the student is used on."""
    ids = row["input_ids"]
    draw = random.Random(f"{seed}:{index}")
    length = draw.randint(2, len(ids)) if draw.random() < probability else len(ids)
    if frame is None:
        kept = ids[:length]
    else:
        cls, sep = frame
        text = ids[1:] if ids[0] == cls else ids
        kept = [cls, *text[: length - 2], sep]
    return {
        "input_ids": kept + [pad_token_id] * (len(ids) - length),
        "attention_mask": [1] * length + [0] * (len(ids) - length),
    }
