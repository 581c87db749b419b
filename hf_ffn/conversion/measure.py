"""Measuring how far a model is from another: the fixed inputs (`example_batch`, `padded_batch`, `head_inputs`), the
one output-difference helper (`tensor_difference`, `output_difference`) and `measure_difference`, a converted model
against its source. The parity job (`hf_ffn.parity`) builds on them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from ..checkpoint_names import is_variant_key
from ..checkpoints import load_tokenizer
from ..configuration_ffn_roberta import ROBERTA_MODEL_TYPES
from ..families import checkpoint_family
from ..logging_utils import quiet_transformers
from ..modeling_ffn_bert import FfnBertPreTrainedModel
from .report import ConversionReport

SENTENCE_PAIRS = [
    ("time flies like an arrow.", "fruit flies like a banana."),
    ("the quick brown fox jumps over the lazy dog near the river bank on a sunny afternoon.", "it rained."),
    ("hello", "world"),
]
# Rows of the random fallback batch: (real tokens, first-segment tokens).
FALLBACK_LENGTHS, FALLBACK_SEGMENTS = (21, 13, 6), (9, 5, 3)


# Outputs `output_difference` compares by default, when both models return them.
COMPARED_OUTPUTS = (
    "last_hidden_state",
    "pooler_output",
    "logits",
    "prediction_logits",
    "seq_relationship_logits",
    "start_logits",
    "end_logits",
)


def padded_batch(
    vocab_size: int,
    lengths: Sequence[int],
    second_segment_starts: Sequence[int | None] | None = None,
    seed: int = 0,
    seq_len: int | None = None,
    pad_token_id: int = 0,
) -> dict[str, torch.Tensor]:
    """A seeded random batch, right-padded with `pad_token_id`: row i has `lengths[i]` real tokens drawn from the ids
    of 1 .. vocab_size − 1 other than `pad_token_id`; its second segment (`token_type_ids` = 1) runs from
    `second_segment_starts[i]` (or None) to its last real token.

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
    input_ids = torch.full((len(lengths), seq), pad_token_id, dtype=torch.long)  # (batch, seq)
    token_type_ids = torch.zeros_like(input_ids)
    attention_mask = torch.zeros_like(input_ids)
    for row, (n, start) in enumerate(zip(lengths, starts, strict=False)):
        ids = torch.randint(1, vocab_size, (n,), generator=generator)
        input_ids[row, :n] = torch.where(ids == pad_token_id, 0, ids)  # no pad id among the real tokens
        attention_mask[row, :n] = 1
        if start is not None:
            token_type_ids[row, start:n] = 1
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


def usable_positions(config: PretrainedConfig) -> int:
    """The most tokens one sequence can hold: `max_position_embeddings`, less a RoBERTa-family model's offset (its
    positions count from `pad_token_id + 1`: roberta-base's 514 hold 512)."""
    offset = (config.pad_token_id or 0) + 1 if config.model_type in ROBERTA_MODEL_TYPES else 0
    return config.max_position_embeddings - offset


def example_batch(checkpoint: str, config: PretrainedConfig) -> dict[str, torch.Tensor]:
    """A padded batch (3, seq) of sentence pairs of unequal lengths: `SENTENCE_PAIRS` through the checkpoint's
    tokenizer, or `padded_batch` over `config`'s vocabulary when it has none. Pairs longer than the model's
    positions (`usable_positions`: a small vocabulary splits them into many tokens) are truncated to them."""
    try:
        tokenizer = load_tokenizer(checkpoint)
    except (OSError, ValueError, TypeError):
        tokenizer = None
    if tokenizer is not None:
        first, second = zip(*SENTENCE_PAIRS, strict=False)
        batch = tokenizer(
            list(first),
            list(second),
            padding=True,
            truncation=True,
            max_length=usable_positions(config),
            return_tensors="pt",
        )
        return {
            k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask") if k in batch
        }  # RoBERTa: no types
    if config.type_vocab_size < 2:  # one token type (RoBERTa's): no second segment
        return padded_batch(config.vocab_size, FALLBACK_LENGTHS, pad_token_id=config.pad_token_id or 0)
    return padded_batch(config.vocab_size, FALLBACK_LENGTHS, FALLBACK_SEGMENTS)


def head_inputs(upstream_class: type, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`batch` as the head `upstream_class` takes it: for multiple choice (batch, 2, seq), the batch and its rows
    reversed as the two choices."""
    if upstream_class.__name__.endswith("ForMultipleChoice"):
        return {k: torch.stack([v, v.flip(0)], dim=1) for k, v in batch.items()}
    return batch


def tensor_difference(
    reference: torch.Tensor, candidate: torch.Tensor, attention_mask: torch.Tensor | None = None
) -> dict[str, Any]:
    """max and mean |reference − candidate| (in float32) and `torch.equal` (over the whole tensors) for one pair.

    With `attention_mask` (batch, seq), a per-token tensor is measured on real tokens only. Tensors of different
    shapes differ by `inf`; empty tensors by 0.

    Returns:
        {"max_abs_diff": float, "mean_abs_diff": float, "equal": bool}.
    """
    if reference.shape != candidate.shape:
        return {"max_abs_diff": float("inf"), "mean_abs_diff": float("inf"), "equal": False}
    diff = (reference.float() - candidate.float()).abs()
    if attention_mask is not None and diff.dim() >= 2 and diff.shape[:2] == attention_mask.shape:
        diff = diff[attention_mask.bool()]  # (real tokens, ...)
    empty = not diff.numel()
    return {
        "max_abs_diff": 0.0 if empty else diff.max().item(),
        "mean_abs_diff": 0.0 if empty else diff.mean().item(),
        "equal": torch.equal(reference, candidate),
    }


def output_difference(
    reference: nn.Module, candidate: nn.Module, inputs: dict[str, torch.Tensor], outputs=COMPARED_OUTPUTS
) -> dict[str, dict[str, Any]]:
    """`tensor_difference` of each output in `outputs` that both models (in eval mode) return on `inputs`.

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


def measure_difference(
    source: str,
    model: FfnBertPreTrainedModel,
    report: ConversionReport | None = None,
    inputs: dict[str, torch.Tensor] | None = None,
    reference: PreTrainedModel | None = None,
) -> dict[str, Any]:
    """The converted `model`'s output difference from the source checkpoint on `example_batch` (or `inputs`).

    The reference is upstream's class matching `model` loaded from `source` when every head weight came from the
    checkpoint, else upstream `BertModel` against `model.base_model` (last_hidden_state only); an FfnBert-variant
    source loads as the FfnBert twin. `reference`: the source already loaded (of another class: the base models are
    compared). With `report`, the result is stored in `report.difference`.

    Returns:
        {"reference": class name, "inputs": description, "parameters": {"scope", "reference", "candidate"},
        output name: {"max_abs_diff", "mean_abs_diff", "equal"} for each compared output}.
    """
    family = checkpoint_family(source)  # the source's upstream classes: BERT's, or its RoBERTa family's
    upstream_of = {head.ffn_bert: family.upstream_class(head) for head in family.heads}
    ffn_bert_of = {family.upstream_class(head): head.ffn_bert for head in family.heads}
    base = family.upstream_class(family.heads[0])  # BertModel, RobertaModel, ...
    attn = model.config._attn_implementation
    with quiet_transformers():
        config = family.config_class.from_pretrained(source)
        batch = inputs if inputs is not None else example_batch(source, config)
        new_outside_ffn = report is not None and any(not is_variant_key(k) for k in report.new)
        upstream = upstream_of.get(type(model), base)
        if new_outside_ffn or report is None:
            upstream, candidate = base, model.base_model
        else:
            candidate = model
        if not config.is_default_bert:
            upstream = ffn_bert_of[upstream]
        if reference is None:
            reference = upstream.from_pretrained(source, attn_implementation=attn)
        elif type(reference) is not upstream:  # another head of the same source: compare the encoders
            reference = reference.base_model
            upstream, candidate = type(reference), model.base_model
    result: dict[str, Any] = {
        "reference": f"{upstream.__module__.split('.')[0]}.{upstream.__name__}",
        "inputs": "example_batch: " + "; ".join(" / ".join(p) for p in SENTENCE_PAIRS) if inputs is None else "given",
    }
    result["parameters"] = {
        "scope": "base model" if candidate is not model else "whole model",
        "reference": sum(p.numel() for p in reference.parameters()),
        "candidate": sum(p.numel() for p in candidate.parameters()),
    }
    diffs = output_difference(reference, candidate, head_inputs(upstream, batch))
    if upstream in (base, family.heads[0].ffn_bert) and candidate is not model:
        diffs = {"last_hidden_state": diffs["last_hidden_state"]}
    result.update(diffs)
    if report is not None:
        report.difference = result
        # A recipe called exact whose output differs is not: the measurement wins.
        report.exact = report.exact and all(d["equal"] for d in diffs.values())
    return result


__all__ = [
    "COMPARED_OUTPUTS",
    "SENTENCE_PAIRS",
    "example_batch",
    "head_inputs",
    "measure_difference",
    "output_difference",
    "padded_batch",
    "tensor_difference",
    "usable_positions",
]
