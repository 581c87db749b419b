"""Parity rows for a pair of model outputs (`compare_outputs`), built on `hf_ffn.conversion.measure`'s
`tensor_difference` (re-exported here with `output_difference`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..conversion.measure import COMPARED_OUTPUTS, output_difference, tensor_difference


@dataclass
class ParityRow:
    """One compared tensor: which head and output, its shape, max |upstream − hf_ffn| and `torch.equal`; it holds
    when equal, or with a `tolerance` (the unpadded rows) when `max_abs_diff` ≤ `tolerance`."""

    head: str
    output: str
    shape: list[int]
    max_abs_diff: float
    equal: bool
    tolerance: float | None = None

    @property
    def holds(self) -> bool:
        return self.equal if self.tolerance is None else self.max_abs_diff <= self.tolerance


def compare_tensors(head: str, output: str, reference: torch.Tensor, candidate: torch.Tensor) -> ParityRow:
    """A `ParityRow` for one tensor pair (every position; other shapes: not equal, infinite difference)."""
    d = tensor_difference(reference, candidate)
    shape = reference.shape if reference.shape == candidate.shape else candidate.shape
    return ParityRow(head, output, list(shape), d["max_abs_diff"], d["equal"])


def flatten_output(prefix: str, value: Any) -> dict[str, torch.Tensor]:
    """The tensors in `value` by name: a tensor as `prefix`, a tuple/list as `prefix[i]` (recursively)."""
    if isinstance(value, torch.Tensor):
        return {prefix: value}
    if isinstance(value, (tuple, list)):
        return {k: v for i, item in enumerate(value) for k, v in flatten_output(f"{prefix}[{i}]", item).items()}
    return {}


def compare_outputs(head: str, reference, candidate) -> list[ParityRow]:
    """One `ParityRow` per tensor of a `ModelOutput` (tuples expanded); one the candidate lacks is not equal."""
    rows = []
    for key in reference.keys():
        ref_tensors = flatten_output(key, reference[key])
        cand_tensors = flatten_output(key, candidate[key]) if key in candidate else {}
        for name, ref in ref_tensors.items():
            if name in cand_tensors:
                rows.append(compare_tensors(head, name, ref, cand_tensors[name]))
            else:  # an output hf_ffn does not return at all
                rows.append(ParityRow(head, name, list(ref.shape), float("inf"), False))
    return rows


__all__ = [
    "COMPARED_OUTPUTS",
    "ParityRow",
    "compare_outputs",
    "compare_tensors",
    "flatten_output",
    "output_difference",
    "tensor_difference",
]
