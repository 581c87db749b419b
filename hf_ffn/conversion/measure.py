"""`measure_difference`: a converted model's output difference from its source checkpoint, on the parity job's
example batch, through the one output-difference helper (`hf_ffn.parity.compare.output_difference`)."""

from __future__ import annotations

from typing import Any

import torch
from transformers import BertModel, PreTrainedModel

from ..checkpoint_names import is_variant_key
from ..configuration_ffn_bert import FfnBertConfig
from ..logging_utils import quiet_transformers
from ..modeling_ffn_bert import HEAD_CLASSES, FfnBertModel, FfnBertPreTrainedModel
from ..parity.batches import SENTENCE_PAIRS, example_batch, head_inputs
from ..parity.compare import output_difference
from .report import ConversionReport


def measure_difference(
    source: str, model: FfnBertPreTrainedModel, report: ConversionReport | None = None,
    inputs: dict[str, torch.Tensor] | None = None, reference: PreTrainedModel | None = None,
) -> dict[str, Any]:
    """The converted `model`'s output difference from the source checkpoint on a fixed input.

    The reference is upstream transformers' class matching `model` (e.g. `BertForMaskedLM` for
    `FfnBertForMaskedLM`) loaded from `source`, when every head weight of `model` came from the checkpoint
    (no `report.new` key outside the encoder FFNs and `final_norm`); otherwise upstream `BertModel` against
    `model.base_model` (last_hidden_state only, as new head weights are random on both sides). A source that is an
    FfnBert variant (not plain BERT, e.g. a healed or converted teacher) is loaded as the FfnBert twin of that class
    instead, since an upstream class would drop its variant weights. `reference`: the source already loaded (e.g.
    the healing run's teacher), used instead of loading it again; when its class is not the one chosen above,
    the base models are compared (last_hidden_state only, unless `model` is the bare model). The fixed input is
    `parity.example_batch`: three tokenized sentence pairs of unequal lengths, padded (or seeded random ids
    when the checkpoint has no tokenizer); per-token outputs are compared on real tokens. If `report` is given,
    the result is also stored in `report.difference`.

    Returns:
        {"reference": class name, "inputs": description, "parameters": {"scope", "reference", "candidate"},
        output name: {"max_abs_diff", "mean_abs_diff", "equal"} for each compared output}.
    """
    upstream_of = {head.ffn_bert: head.bert for head in HEAD_CLASSES}
    ffn_bert_of = {head.bert: head.ffn_bert for head in HEAD_CLASSES}
    attn = model.config._attn_implementation
    with quiet_transformers():
        config = FfnBertConfig.from_pretrained(source)
        batch = inputs if inputs is not None else example_batch(source, config)
        new_outside_ffn = report is not None and any(not is_variant_key(k) for k in report.new)
        upstream = upstream_of.get(type(model), BertModel)
        if new_outside_ffn or report is None:
            upstream, candidate = BertModel, model.base_model
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
        "inputs": "parity.example_batch: " + "; ".join(" / ".join(p) for p in SENTENCE_PAIRS)
        if inputs is None else "given",
    }
    result["parameters"] = {
        "scope": "base model" if candidate is not model else "whole model",
        "reference": sum(p.numel() for p in reference.parameters()),
        "candidate": sum(p.numel() for p in candidate.parameters()),
    }
    diffs = output_difference(reference, candidate, head_inputs(upstream, batch))
    if upstream in (BertModel, FfnBertModel) and candidate is not model:
        diffs = {"last_hidden_state": diffs["last_hidden_state"]}
    result.update(diffs)
    if report is not None:
        report.difference = result
    return result


__all__ = ["measure_difference"]
