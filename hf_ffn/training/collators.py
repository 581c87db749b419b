"""The padding-free collator every training command uses (`PaddingFreeCollator`: transformers'
`DataCollatorWithFlattening` for an encoder, every token-level column kept)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import DataCollatorWithFlattening


class PaddingFreeCollator:
    """Padding-free batches as transformers defines them (`DataCollatorWithFlattening`) for an encoder: the
    examples' token sequences concatenated into one row (1, total_tokens), `position_ids` (1, total_tokens)
    restarting at 0 for each, no padding. FfnBert computes each sequence as if it were alone (docs/unpadded.md).

    Unlike `DataCollatorWithFlattening` (made for causal LMs: it keeps only `input_ids`, `labels` and
    `position_ids`, and turns labels into shifted token labels), every token-level column of the features (a list
    per example: `token_type_ids`, `special_tokens_mask`, token `labels`, an all-ones `attention_mask`) is
    concatenated the same way, and a sequence-level column (one number per example, e.g. class `labels`) stays one
    per sequence, (num_sequences,): FfnBert's pooler gives one output per sequence of a padding-free batch.
    `then`, if given (e.g. MLM masking), collates the one concatenated row instead of plain tensors. Features that
    carry their own `position_ids` (blocks whose documents attend only to themselves, `documents_to_blocks`) keep
    them: each starts at 0, so the concatenated row still restarts at every block, and at every document within.
    """

    def __init__(self, then: Callable[[list[dict]], dict] | None = None):
        self.flatten = DataCollatorWithFlattening(return_tensors="pt")
        self.then = then

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        flat = self.flatten([{"input_ids": feature["input_ids"]} for feature in features])
        row, per_sequence = {}, {}
        for key, value in features[0].items():
            if isinstance(value, (list, tuple)) or (torch.is_tensor(value) and value.dim() > 0):
                row[key] = [x for feature in features for x in list(feature[key])]  # token-level: concatenated
            else:
                per_sequence[key] = torch.tensor([feature[key] for feature in features])
        batch = self.then([row]) if self.then is not None else {key: torch.tensor([v]) for key, v in row.items()}
        positions = torch.tensor([row["position_ids"]]) if "position_ids" in row else flat["position_ids"]
        return {**batch, **per_sequence, "position_ids": positions}
