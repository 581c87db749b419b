"""The example batches every comparison runs on (from `hf_ffn.conversion.measure`) and the padding-free layout of a
padded batch (`flattened_batch`)."""

from __future__ import annotations

import torch
import transformers
from packaging.version import Version

from ..conversion.measure import (
    FALLBACK_LENGTHS,
    FALLBACK_SEGMENTS,
    SENTENCE_PAIRS,
    example_batch,
    head_inputs,
    padded_batch,
)

# "time flies like an arrow" in the bert-base-uncased vocabulary, without [CLS]/[SEP].
TIME_FLIES_IDS = [2051, 10029, 2066, 2019, 8612]

# Whether upstream `BertModel` keeps the sequences of a padding-free batch apart: from transformers 5.25 on it masks
# them by `position_ids` when no `attention_mask` is given (FfnBert keeps them apart on every release).
UPSTREAM_MASKS_PACKED_SEQUENCES = Version(transformers.__version__).release >= (5, 25)


def flattened_batch(batch: dict[str, torch.Tensor], position_ids_start: int = 0) -> dict[str, torch.Tensor]:
    """The sequences of a right-padded `batch` as one padding-free row (1, n_real), the layout of transformers'
    `DataCollatorWithFlattening`: real tokens concatenated, `position_ids` restarting at `position_ids_start` (0; a
    RoBERTa's `padding_idx + 1`), no `attention_mask`."""
    real = batch["attention_mask"].bool()
    flat = {"input_ids": batch["input_ids"][real][None]}
    if "token_type_ids" in batch:
        flat["token_type_ids"] = batch["token_type_ids"][real][None]
    device = batch["input_ids"].device
    flat["position_ids"] = torch.cat(
        [torch.arange(n, device=device) + position_ids_start for n in real.sum(1).tolist()]
    )[None]
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
