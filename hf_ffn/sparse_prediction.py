"""Sparse prediction for a BERT masked-language-model head: with labels, decode only the masked positions, as
MosaicBERT (arXiv 2312.17482) and ModernBERT (arXiv 2412.13663) do; the loss is the same cross-entropy over the same
rows. Switched by `FfnBertConfig.sparse_prediction` (off: upstream `BertForMaskedLM.forward`, bit for bit).
"""

import torch
from torch import nn
from transformers.modeling_outputs import MaskedLMOutput
from transformers.models.bert.modeling_bert import BertForMaskedLM
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs
from transformers.utils.generic import can_return_tuple


class SparsePredictionMixin:
    """`forward` of a `BertForMaskedLM`-shaped model (`self.bert`, `self.cls`, `self.config`) with sparse prediction
    when `config.sparse_prediction` is on and `labels` are given; otherwise `BertForMaskedLM.forward` itself."""

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        prediction_positions: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor] | MaskedLMOutput:
        """`BertForMaskedLM.forward`. With `config.sparse_prediction` and `labels` (batch, seq), the head decodes
        only the positions where `labels != -100`: `logits` (n_masked, vocab_size) in row-major order, `loss` their
        mean cross-entropy. Without labels every position is decoded, as upstream.

        `prediction_positions` (k,) int64 (`hf_ffn.mlm.speed.prediction_positions`): decode these flat positions
        instead, a fixed number per batch (no data-dependent shape); `logits` (k, vocab_size), the -100 labels of
        the slack ignored by the loss."""
        inputs = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "token_type_ids": token_type_ids,
            "position_ids": position_ids,
            "inputs_embeds": inputs_embeds,
            "encoder_hidden_states": encoder_hidden_states,
            "encoder_attention_mask": encoder_attention_mask,
        }
        if not (self.config.sparse_prediction and labels is not None):
            return BertForMaskedLM.forward(self, labels=labels, **inputs, **kwargs)
        outputs = self.bert(**inputs, return_dict=True, **kwargs)
        if prediction_positions is not None:  # (k,): a fixed number of rows, the slack labelled -100
            hidden = outputs[0].flatten(0, 1).index_select(0, prediction_positions)  # (k, hidden)
            targets = labels.flatten().index_select(0, prediction_positions)
        else:
            selected = labels != -100  # (batch, seq): the masked positions (CrossEntropyLoss's ignore_index elsewhere)
            hidden, targets = outputs[0][selected], labels[selected]  # (n_masked, hidden), (n_masked,)
        logits = self.cls(hidden)  # (rows, vocab_size)
        loss = nn.functional.cross_entropy(logits, targets)
        return MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


__all__ = ["SparsePredictionMixin"]
