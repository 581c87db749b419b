"""The example batches every comparison runs on: one seeded padded-batch builder (`padded_batch`), the
tokenized sentence-pair batch of the parity job and the conversion reports (`example_batch`), and the
multiple-choice layout of a batch (`head_inputs`)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from transformers import AutoTokenizer, BertForMultipleChoice, PretrainedConfig

# "time flies like an arrow" in the bert-base-uncased vocabulary, without [CLS]/[SEP].
TIME_FLIES_IDS = [2051, 10029, 2066, 2019, 8612]
SENTENCE_PAIRS = [
    ("time flies like an arrow.", "fruit flies like a banana."),
    ("the quick brown fox jumps over the lazy dog near the river bank on a sunny afternoon.", "it rained."),
    ("hello", "world"),
]
# Rows of the random fallback batch: (real tokens, first-segment tokens).
FALLBACK_LENGTHS, FALLBACK_SEGMENTS = (21, 13, 6), (9, 5, 3)


def padded_batch(
    vocab_size: int,
    lengths: Sequence[int],
    second_segment_starts: Sequence[int | None] | None = None,
    seed: int = 0,
    seq_len: int | None = None,
) -> dict[str, torch.Tensor]:
    """A seeded random batch, right-padded with id 0: row i has `lengths[i]` real tokens drawn uniformly from
    1 .. vocab_size − 1 (row by row from one `torch.Generator(seed)`), then padding.

    `second_segment_starts[i]` (or None) is where row i's second segment (`token_type_ids` = 1) starts; it runs to
    the row's last real token. `seq_len` defaults to `max(lengths)`.

    Returns:
        `input_ids`, `token_type_ids`, `attention_mask`, each (len(lengths), seq_len), int64.

    Raises:
        ValueError: a length below 1 or above `seq_len`, or `second_segment_starts` of another length.
    """
    seq = max(lengths) if seq_len is None else seq_len
    starts = list(second_segment_starts) if second_segment_starts is not None else [None] * len(lengths)
    if len(starts) != len(lengths):
        raise ValueError(f"second_segment_starts has {len(starts)} entries; lengths has {len(lengths)}")
    if any(n < 1 or n > seq for n in lengths):
        raise ValueError(f"lengths {list(lengths)} must each lie in 1..{seq} (seq_len)")
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.zeros(len(lengths), seq, dtype=torch.long)  # (batch, seq); 0 = [PAD]
    token_type_ids = torch.zeros_like(input_ids)
    attention_mask = torch.zeros_like(input_ids)
    for row, (n, start) in enumerate(zip(lengths, starts)):
        input_ids[row, :n] = torch.randint(1, vocab_size, (n,), generator=generator)
        attention_mask[row, :n] = 1
        if start is not None:
            token_type_ids[row, start:n] = 1
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


def example_batch(checkpoint: str, config: PretrainedConfig) -> dict[str, torch.Tensor]:
    """A padded batch of sentence pairs of unequal lengths with `token_type_ids` and `attention_mask`.

    Uses the checkpoint's tokenizer on `SENTENCE_PAIRS` when it has one; otherwise `padded_batch` over the whole
    vocabulary of `config` (rows of 21, 13 and 6 tokens, second segments from 9, 5 and 3). (A local folder
    without tokenizer files is checked explicitly: transformers would build an empty tokenizer for it and turn
    every word into [UNK].) Shapes: each (3, seq), int64.
    """
    tokenizer = None
    if not os.path.isdir(checkpoint) or any(
        os.path.isfile(os.path.join(checkpoint, name)) for name in ("tokenizer.json", "vocab.txt")
    ):
        try:
            tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        except (OSError, ValueError, TypeError):
            tokenizer = None
    if tokenizer is not None:
        first, second = zip(*SENTENCE_PAIRS)
        batch = tokenizer(list(first), list(second), padding=True, return_tensors="pt")
        return {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    return padded_batch(config.vocab_size, FALLBACK_LENGTHS, FALLBACK_SEGMENTS)


def head_inputs(upstream_class: type, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`batch` as the head `upstream_class` (or its FfnBert twin) takes it: for multiple choice, (batch,
    num_choices=2, seq), the batch and its rows reversed as the two choices; every other head takes it as is."""
    if issubclass(upstream_class, BertForMultipleChoice):
        return {k: torch.stack([v, v.flip(0)], dim=1) for k, v in batch.items()}
    return batch


__all__ = ["SENTENCE_PAIRS", "TIME_FLIES_IDS", "example_batch", "head_inputs", "padded_batch"]
