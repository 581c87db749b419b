"""Applying the reference-FFN key maps of `hf_ffn.checkpoint_names` (`LLAMA_MLP_TO_FFN`, `MODERNBERT_MLP_TO_FFN`
and their inverses) to module-level state dicts, with transformers' own `ConversionOps`."""

from __future__ import annotations

import torch

from ..checkpoint_names import KeyMap


def convert_state_dict(state_dict: dict[str, torch.Tensor], mapping: tuple[KeyMap, ...]) -> dict[str, torch.Tensor]:
    """Apply a `KeyMap` mapping to a (module-level) state dict, strictly; entries with no source key are skipped.

    Raises:
        ValueError: a key no entry maps, or an entry with only some of its source keys present.
    """
    remaining = dict(state_dict)
    out: dict[str, torch.Tensor] = {}
    for entry in mapping:
        present = [k for k in entry.source if k in remaining]
        if not present:
            continue
        if len(present) != len(entry.source):
            raise ValueError(f"state dict has {present} but not all of {list(entry.source)}")
        tensors = {k: remaining.pop(k) for k in entry.source}
        if entry.op is None:
            out.update(zip(entry.target, tensors.values(), strict=False))
        else:
            out.update(
                entry.op.convert(tensors, source_patterns=list(entry.source), target_patterns=list(entry.target))
            )
    if remaining:
        raise ValueError(f"keys not covered by the mapping: {sorted(remaining)}")
    return out


__all__ = ["convert_state_dict"]
