"""The one output-difference helper (`tensor_difference`) and what is built on it: parity rows for a pair of
model outputs (`compare_outputs`) and the measured difference of two models on one batch (`output_difference`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

# Outputs `output_difference` compares by default, when both models return them.
COMPARED_OUTPUTS = (
    "last_hidden_state", "pooler_output", "logits", "prediction_logits", "seq_relationship_logits",
    "start_logits", "end_logits",
)


def tensor_difference(
    reference: torch.Tensor, candidate: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> dict[str, Any]:
    """max and mean |reference − candidate| (in float32 or wider) and `torch.equal` for one tensor pair.

    With `attention_mask` (batch, seq), a per-token tensor (batch, seq, ...) is measured on real tokens only
    (mask == 1): padded positions carry no meaning. `equal` is always over the whole tensors. Tensors of different
    shapes are not equal and differ by `inf`; empty tensors differ by 0.

    Returns:
        {"max_abs_diff": float, "mean_abs_diff": float, "equal": bool}.
    """
    if reference.shape != candidate.shape:
        return {"max_abs_diff": float("inf"), "mean_abs_diff": float("inf"), "equal": False}
    diff = (reference.float() - candidate.float()).abs()
    if attention_mask is not None and diff.dim() >= 2 and diff.shape[:2] == attention_mask.shape:
        diff = diff[attention_mask.bool()]  # (real tokens, ...)
    if not diff.numel():
        return {"max_abs_diff": 0.0, "mean_abs_diff": 0.0, "equal": torch.equal(reference, candidate)}
    return {
        "max_abs_diff": diff.max().item(), "mean_abs_diff": diff.mean().item(),
        "equal": torch.equal(reference, candidate),
    }


@dataclass
class ParityRow:
    """One compared tensor: which head and output, its shape, max |upstream − hf_ffn| and `torch.equal`."""

    head: str
    output: str
    shape: list[int]
    max_abs_diff: float
    equal: bool


def compare_tensors(head: str, output: str, reference: torch.Tensor, candidate: torch.Tensor) -> ParityRow:
    """A `ParityRow` for one tensor pair (every position, padding included); shapes that differ count as not
    equal with an infinite difference (the row then carries the candidate's shape)."""
    d = tensor_difference(reference, candidate)
    shape = reference.shape if reference.shape == candidate.shape else candidate.shape
    return ParityRow(head, output, list(shape), d["max_abs_diff"], d["equal"])


def flatten_output(prefix: str, value: Any) -> dict[str, torch.Tensor]:
    """The tensors in `value` by name: a tensor as `prefix`, a tuple/list as `prefix[i]` (recursively); others dropped."""
    if isinstance(value, torch.Tensor):
        return {prefix: value}
    if isinstance(value, (tuple, list)):
        return {k: v for i, item in enumerate(value) for k, v in flatten_output(f"{prefix}[{i}]", item).items()}
    return {}


def compare_outputs(head: str, reference, candidate) -> list[ParityRow]:
    """One `ParityRow` per tensor of a `ModelOutput` (tuples such as `hidden_states` are expanded); an output the
    candidate lacks is a row that is not equal."""
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


def output_difference(
    reference: nn.Module, candidate: nn.Module, inputs: dict[str, torch.Tensor], outputs=COMPARED_OUTPUTS
) -> dict[str, dict[str, Any]]:
    """`tensor_difference` of each output in `outputs` that both models return on `inputs`, on real tokens
    (`inputs["attention_mask"]`, when given). Both models run in eval mode without gradients.

    Returns:
        {output name: {"max_abs_diff", "mean_abs_diff", "equal"}}.
    """
    reference.eval(), candidate.eval()
    with torch.no_grad():
        ref_out, cand_out = reference(**inputs), candidate(**inputs)
    mask = inputs.get("attention_mask")
    return {
        key: tensor_difference(ref_out[key], cand_out[key], mask)
        for key in outputs
        if ref_out.get(key) is not None and cand_out.get(key) is not None
    }


__all__ = [
    "COMPARED_OUTPUTS",
    "ParityRow",
    "compare_outputs",
    "compare_tensors",
    "flatten_output",
    "output_difference",
    "tensor_difference",
]
