"""The example batches every comparison runs on: one seeded padded-batch builder (`padded_batch`), the
tokenized sentence-pair batch of the parity job and the conversion reports (`example_batch`), and the
multiple-choice layout of a batch (`head_inputs`)."""

from __future__ import annotations

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

__all__ = [
    "FALLBACK_LENGTHS",
    "FALLBACK_SEGMENTS",
    "SENTENCE_PAIRS",
    "TIME_FLIES_IDS",
    "example_batch",
    "head_inputs",
    "padded_batch",
]
