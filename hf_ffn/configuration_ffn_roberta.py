"""FfnRoberta configuration: RoBERTa's config plus FfnBert's switches (FFN variant, LayerNorm place, unpadding).

`RobertaConfig` has `BertConfig`'s fields with other defaults (roberta-base's vocabulary of 50,265 tokens,
`pad_token_id=1`, `bos_token_id=0`, `eos_token_id=2`), so `FfnRobertaConfig` is `FfnBertConfig` (its fields, checks
and loading, unchanged) with those defaults and `model_type="ffn_roberta"`. Checkpoints of the RoBERTa family load
into it: `roberta`, `xlm-roberta`, `camembert` (the same config and model, other tokenizers) and
`roberta-prelayernorm` (a Pre-LN RoBERTa: loaded with `layer_norm_position="pre"`).

This module imports only `configuration_ffn_bert` (relatively), so it can be copied next to a saved model for
`trust_remote_code` loading.
"""

from __future__ import annotations

from typing import Any

from huggingface_hub.dataclasses import strict

from .configuration_ffn_bert import ROBERTA_MODEL_TYPES, FfnBertConfig

# The one Pre-LN family: its checkpoints load with this placement.
PRE_LAYER_NORM_MODEL_TYPES = ("roberta-prelayernorm",)


@strict
class FfnRobertaConfig(FfnBertConfig):
    r"""Configuration of an FfnRoberta model: a RoBERTa whose FFN variant and LayerNorm placement are switchable.

    With the defaults it describes exactly the RoBERTa that `RobertaConfig` describes (roberta-base sizes). Every
    field is `FfnBertConfig`'s (see there: `ffn_type`, `layer_norm_position`, `embedding_layer_norm`, `ffn_bias`,
    the activation parameters, `unpad_tokens`, `sparse_prediction`), validated the same way; the defaults that
    differ are RoBERTa's. `pad_token_id` is also RoBERTa's `padding_idx`: positions count from `pad_token_id + 1`.

    A saved config of `model_type` "roberta", "xlm-roberta" or "camembert" loads as it is; "roberta-prelayernorm"
    loads with `layer_norm_position="pre"` unless the caller overrides it.

    Raises:
        ValueError: as `FfnBertConfig`; for a `model_type` not in `ROBERTA_MODEL_TYPES`, naming it and those.
    """

    model_type = "ffn_roberta"
    checkpoint_model_types = ROBERTA_MODEL_TYPES

    vocab_size: int = 50265
    pad_token_id: int | None = 1
    bos_token_id: int | None = 0
    eos_token_id: int | list[int] | None = 2

    @classmethod
    def as_own_dict(cls, config_dict: dict[str, Any], source: str) -> dict[str, Any]:
        """`FfnBertConfig.as_own_dict`, and a RoBERTa-PreLayerNorm dict gets `layer_norm_position="pre"`."""
        saved = super().as_own_dict(config_dict, source)
        if config_dict.get("model_type") in PRE_LAYER_NORM_MODEL_TYPES:
            saved.setdefault("layer_norm_position", "pre")
        return saved


__all__ = ["FfnRobertaConfig", "PRE_LAYER_NORM_MODEL_TYPES", "ROBERTA_MODEL_TYPES"]
