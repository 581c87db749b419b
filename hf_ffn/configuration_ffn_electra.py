"""FfnElectra configuration: ELECTRA's config plus FfnBert's switches (FFN variant, LayerNorm place, unpadding).

`ElectraConfig` is `BertConfig`'s fields with ELECTRA's defaults (electra-small-discriminator's sizes: hidden 256,
4 heads, FFN 1024) plus five of its own: `embedding_size` (the width of the embeddings, projected to `hidden_size`
by `embeddings_project` when they differ) and the `summary_*` fields of `ElectraSequenceSummary` (the multiple-choice
head). `FfnElectraConfig` is `FfnBertConfig` (its fields, checks and loading, unchanged) with those fields and
defaults and `model_type="ffn_electra"`; a saved `electra` config loads into it as it is.

This module imports only `configuration_ffn_bert` (relatively), so it can be copied next to a saved model for
`trust_remote_code` loading.
"""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers.activations import ACT2CLS

from .configuration_ffn_bert import ELECTRA_MODEL_TYPES, FfnBertConfig

# `ElectraSequenceSummary`'s `summary_type`s that it implements ("attn" raises NotImplementedError upstream).
SUMMARY_TYPES = ("first", "last", "mean", "cls_index")


@strict
class FfnElectraConfig(FfnBertConfig):
    r"""Configuration of an FfnElectra model: an ELECTRA whose FFN variant and LayerNorm placement are switchable.

    With the defaults it describes exactly the ELECTRA that `ElectraConfig` describes (electra-small-discriminator's
    encoder: vocabulary 30,522, embedding 128, hidden 256, 12 layers, 4 heads, FFN 1024). Every FfnBert field is
    `FfnBertConfig`'s (see there: `ffn_type`, `layer_norm_position`, `embedding_layer_norm`, `ffn_bias`, the
    activation parameters, `unpad_tokens`, `sparse_prediction`), validated the same way. ELECTRA's own fields:

    Args:
        embedding_size (`int`, *optional*, defaults to 128):
            Width of the word, position and token-type embeddings and their LayerNorm. When it differs from
            `hidden_size`, `embeddings_project` (a Linear embedding_size → hidden_size) follows the embeddings, as
            upstream; equal sizes (electra-base/large) have no projection.
        summary_type (`str`, *optional*, defaults to `"first"`):
            Which hidden state `ElectraSequenceSummary` (multiple choice) reads: one of `SUMMARY_TYPES`.
        summary_use_proj (`bool`, *optional*, defaults to `True`):
            Whether the summary has a hidden_size → hidden_size projection.
        summary_activation (`str`, *optional*, defaults to `"gelu"`):
            The summary's activation (an `ACT2FN` name), or None (or "") for none.
        summary_last_dropout (`float`, *optional*, defaults to 0.1):
            Dropout after the summary's projection and activation, in [0, 1].

    Validation as `FfnBertConfig`: ELECTRA's fields are checked for their values when a model is built
    (`check_model_fields`), where upstream's modules read them.

    Raises:
        ValueError: as `FfnBertConfig`; for a `model_type` not in `ELECTRA_MODEL_TYPES`, naming it and those.
    """

    model_type = "ffn_electra"
    checkpoint_model_types = ELECTRA_MODEL_TYPES

    vocab_size: int = 30522
    embedding_size: int = 128
    hidden_size: int = 256
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    summary_type: str = "first"
    summary_use_proj: bool = True
    summary_activation: str | None = "gelu"
    summary_last_dropout: float | int = 0.1

    def check_model_fields(self) -> None:
        """`FfnBertConfig.check_model_fields`, then ELECTRA's fields: `embedding_size` a positive integer, the
        `summary_*` fields ones `ElectraSequenceSummary` builds.

        Raises:
            ValueError: naming the field, the bad value and what is allowed.
        """
        super().check_model_fields()
        value = self.embedding_size
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"embedding_size must be a positive integer, got {value!r}")
        if self.summary_type not in SUMMARY_TYPES:
            raise ValueError(
                f"summary_type has unknown value {self.summary_type!r}; allowed: {', '.join(SUMMARY_TYPES)}"
            )
        if not isinstance(self.summary_use_proj, bool):
            raise ValueError(f"summary_use_proj must be True or False, got {self.summary_use_proj!r}")
        if self.summary_activation not in (None, "") and self.summary_activation not in ACT2CLS:
            raise ValueError(
                f"summary_activation has unknown value {self.summary_activation!r}; allowed: None or one of "
                f"{', '.join(sorted(ACT2CLS))}"
            )
        dropout = self.summary_last_dropout
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
            raise ValueError(f"summary_last_dropout must be a probability in [0, 1], got {dropout!r}")


__all__ = ["ELECTRA_MODEL_TYPES", "SUMMARY_TYPES", "FfnElectraConfig"]
