"""MegatronBERT → FfnBert (Pre-LN, no embedding LayerNorm), exactly, through `from_pretrained(key_mapping=...)`
with the renames of `hf_ffn.checkpoint_names.MEGATRON_KEY_MAPPING`."""

from __future__ import annotations

from typing import Any

from transformers import MegatronBertConfig

from ..checkpoint_names import MEGATRON_KEY_MAPPING, megatron_key
from ..checkpoints import load_pretrained
from ..configuration_ffn_bert import FfnBertConfig
from ..logging_utils import quiet_transformers
from ..modeling_ffn_bert import FfnBertModel, FfnBertPreTrainedModel
from .report import ConversionReport


def megatron_config_to_ffn_bert(config_dict: dict[str, Any], **overrides) -> FfnBertConfig:
    """FfnBert config for a MegatronBERT config dict: BERT's fields, Pre-LN, no embedding LayerNorm.

    Raises:
        ValueError: if `config_dict["model_type"]` is not "megatron-bert".
    """
    if config_dict.get("model_type") != "megatron-bert":
        raise ValueError(f"model_type must be 'megatron-bert', got {config_dict.get('model_type')!r}")
    bert_dict = {**config_dict, "model_type": "bert", "architectures": None}
    # MegatronBERT's placement is Pre-LN: its weights are mapped to those places exactly (no reuse to warn about).
    return FfnBertConfig.from_dict(
        bert_dict, warn_reused_weights=False, layer_norm_position="pre", embedding_layer_norm=False, **overrides
    )


def load_megatron_bert(
    checkpoint: str, model_class: type[FfnBertPreTrainedModel] = FfnBertModel, **from_pretrained_kwargs
) -> tuple[FfnBertPreTrainedModel, ConversionReport]:
    """Load a MegatronBERT checkpoint (`model_type` "megatron-bert") into an FfnBert class, exactly.

    Pre-LN with `embedding_layer_norm=False`, renamed by `MEGATRON_KEY_MAPPING`; it saves in FfnBert's own layout.
    Outputs equal MegatronBERT's bit for bit with eager attention when √(head size) is a power of two (e.g. 64):
    MegatronBERT divides scores by √d, BERT multiplies by d^-1/2.

    Returns:
        `(model, report)`.

    Raises:
        ValueError: if the checkpoint is not a MegatronBERT one.
        CheckpointNotLoadedError: an encoder weight missing or renamed, a corrupt file (`load_pretrained`).
    """
    source_dict = MegatronBertConfig.get_config_dict(checkpoint)[0]
    config_fields = set(FfnBertConfig.__dataclass_fields__)
    config_overrides = {k: from_pretrained_kwargs.pop(k) for k in list(from_pretrained_kwargs) if k in config_fields}
    config = megatron_config_to_ffn_bert(source_dict, **config_overrides)
    with quiet_transformers():
        model, info = load_pretrained(
            model_class, checkpoint, config=config, key_mapping=MEGATRON_KEY_MAPPING, **from_pretrained_kwargs
        )
    # Forget the load-time renames, which saving would revert: it then writes FfnBert's own layout.
    model.__dict__.pop("_weight_conversions", None)
    model.eval()
    missing = set(info["missing_keys"])
    mapped, copied = [], []
    for key in model.state_dict():
        if key in missing:
            continue
        source = megatron_key(key)
        if source == key:
            copied.append(key)
        else:
            mapped.append({"target": key, "source": source, "operation": "rename"})
    report = ConversionReport(
        source=str(checkpoint),
        model_class=model_class.__name__,
        init="preserving",
        exact=True,
        config_changes={
            "model_type": ["megatron-bert", "ffn_bert"],
            "layer_norm_position": [None, "pre"],
            "embedding_layer_norm": [None, False],
        },
        copied=copied,
        mapped=mapped,
        new=sorted(missing),
        dropped=sorted(info["unexpected_keys"]),
    )
    return model, report


__all__ = ["load_megatron_bert", "megatron_config_to_ffn_bert"]
