"""The padding-free collator every training command uses (`PaddingFreeCollator`: transformers'
`DataCollatorWithFlattening` for an encoder, every token-level column kept)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import DataCollatorWithFlattening


class PaddingFreeCollator:
    """Padding-free batches (`DataCollatorWithFlattening`) for an encoder: the examples concatenated into one row
    (1, total_tokens), `position_ids` restarting at 0 for each (docs/unpadded.md). Unlike it (made for causal LMs),
    every token-level column (a list per example) is concatenated the same way and a sequence-level one (e.g. class
    `labels`) stays one per sequence, (num_sequences,). `then` (e.g. MLM masking) collates the concatenated row;
    features' own `position_ids` (`documents_to_blocks`) are kept.
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
