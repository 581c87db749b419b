"""The example batches every comparison runs on: one seeded padded-batch builder (`padded_batch`), the
tokenized sentence-pair batch of the parity job and the conversion reports (`example_batch`), the multiple-choice
layout of a batch (`head_inputs`) and the padding-free layout of a padded batch (`flattened_batch`)."""

from __future__ import annotations

import torch
import transformers
from packaging.version import Version

from ..conversion.measure import (  # one copy: conversion and export measure with them too
    FALLBACK_LENGTHS,
    FALLBACK_SEGMENTS,
    SENTENCE_PAIRS,
    example_batch,
    head_inputs,
    padded_batch,
)

# "time flies like an arrow" in the bert-base-uncased vocabulary, without [CLS]/[SEP].
TIME_FLIES_IDS = [2051, 10029, 2066, 2019, 8612]

# Whether upstream `BertModel` keeps the sequences of a padding-free batch apart. From transformers 5.25 on it builds
# its bidirectional mask from `position_ids` when no `attention_mask` is given (`masking_utils`:
# `find_packed_sequence_indices`, `packed_sequence_mask_function`), so each sequence attends to itself only and
# FfnBert's default path gives its outputs bit for bit; before 5.25 it builds no such mask and the sequences attend
# to each other (FfnBert keeps them apart on every release). The parity job and the tests branch on it.
UPSTREAM_MASKS_PACKED_SEQUENCES = Version(transformers.__version__).release >= (5, 25)


def flattened_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The sequences of a right-padded `batch` (`input_ids`, `attention_mask` (batch, seq), optional
    `token_type_ids`) as one padding-free row, the layout of transformers' `DataCollatorWithFlattening`: each row's
    real tokens concatenated in order, `position_ids` restarting at 0 for each sequence, token types alongside, no
    `attention_mask`. Every tensor (1, n_real)."""
    real = batch["attention_mask"].bool()
    flat = {"input_ids": batch["input_ids"][real][None]}
    if "token_type_ids" in batch:
        flat["token_type_ids"] = batch["token_type_ids"][real][None]
    device = batch["input_ids"].device
    flat["position_ids"] = torch.cat([torch.arange(n, device=device) for n in real.sum(1).tolist()])[None]
    return flat


__all__ = [
    "FALLBACK_LENGTHS",
    "FALLBACK_SEGMENTS",
    "SENTENCE_PAIRS",
    "TIME_FLIES_IDS",
    "UPSTREAM_MASKS_PACKED_SEQUENCES",
    "example_batch",
    "flattened_batch",
    "head_inputs",
    "padded_batch",
]
