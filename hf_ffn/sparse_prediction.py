"""Sparse prediction for a BERT masked-language-model head: with labels, decode only the masked positions.

During MLM training only the masked ~15% of the positions enter the loss, and at small sizes the vocabulary decoder
(hidden × vocab_size per position) costs more than the encoder. MosaicBERT (Portes et al. 2023, arXiv 2312.17482)
and ModernBERT (Warner et al. 2024, arXiv 2412.13663, its config's `sparse_prediction`) gather the hidden states of
the labelled positions before the head; the loss is the same cross-entropy over the same rows. FfnBert switches it
with `FfnBertConfig.sparse_prediction` (off by default: upstream `BertForMaskedLM.forward`, bit for bit).
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
        """`BertForMaskedLM.forward`. With `config.sparse_prediction` and `labels` (batch, seq) given, the head
        decodes only the positions where `labels != -100`: `logits` is (n_masked, vocab_size), the masked positions
        in row-major order, and `loss` the mean cross-entropy over them, the same rows upstream's loss averages
        (see the module docstring). Without labels every position is decoded, as upstream (the fill-mask pipeline).

        `prediction_positions` (k,) int64, with sparse prediction and labels: decode these flat positions (into
        `labels.flatten()`) instead, a fixed number per batch (`hf_ffn.mlm.speed.prediction_positions`: every
        labelled position, then unlabelled ones, whose -100 labels the loss ignores). `logits` is (k, vocab_size)
        and `loss` the same mean over the labelled positions, with no data-dependent shape and nothing read back
        from the device. Positions that leave out a labelled one leave it out of the loss: the collator's
        positions never do."""
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
            logits = self.cls(hidden)  # (k, vocab_size)
            loss = nn.functional.cross_entropy(logits, labels.flatten().index_select(0, prediction_positions))
            return MaskedLMOutput(
                loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
            )
        selected = labels != -100  # (batch, seq): the masked positions (CrossEntropyLoss's ignore_index elsewhere)
        logits = self.cls(outputs[0][selected])  # (n_masked, hidden) → (n_masked, vocab_size)
        loss = nn.functional.cross_entropy(logits, labels[selected])
        return MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


__all__ = ["SparsePredictionMixin"]
