"""`--config_overrides` of `hf-ffn mlm`, as `run_mlm.py`'s (`"hidden_dropout_prob=0.0,initializer_range=0.01"`,
typed by `PretrainedConfig.update_from_string`): from scratch the fields without an option of their own
(`SCRATCH_KEYS`), for a checkpoint only the dropout probabilities (`CHECKPOINT_KEYS`: the rest would change what
the weights were trained for).
"""

from __future__ import annotations

from ..configuration_ffn_bert import FfnBertConfig

OPTION = "--config_overrides"
CHECKPOINT_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob")
SCRATCH_KEYS = (
    *CHECKPOINT_KEYS,
    "initializer_range",
    "layer_norm_eps",
    "type_vocab_size",
    "embedding_layer_norm",
    "ffn_bias",
    "leaky_relu_negative_slope",
    "elu_alpha",
    "swish_beta",
)
OWN_OPTIONS = {
    "vocab_size": "--vocab_size",
    "hidden_size": "--hidden_size",
    "num_hidden_layers": "--num_hidden_layers",
    "num_attention_heads": "--num_attention_heads",
    "intermediate_size": "--intermediate_size and --ffn_width",
    "hidden_act": "--hidden_act",
    "ffn_type": "--ffn_type",
    "layer_norm_position": "--layer_norm_position",
    "sparse_prediction": "--sparse_prediction",
    "unpad_tokens": "--unpad_tokens",
    "max_position_embeddings": "--max_seq_length (512 or the block length, the larger)",
    "pad_token_id": "the tokenizer",
}
# (low, high, low included): checked here, so the error names the option before a model is built
RANGES = {
    "hidden_dropout_prob": (0.0, 1.0, True),
    "attention_probs_dropout_prob": (0.0, 1.0, True),
    "initializer_range": (0.0, float("inf"), False),
    "layer_norm_eps": (0.0, float("inf"), False),
    "type_vocab_size": (1, float("inf"), True),
}


def parse_config_overrides(text: str | None, checkpoint: bool) -> dict:
    """The typed overrides of `text` (`"key=value,key=value"`; `{}` for None or empty), each checked: allowed,
    of the field's type, in range.

    Raises:
        ValueError: naming --config_overrides, the key or piece and what is allowed.
    """
    if not text:
        return {}
    allowed = CHECKPOINT_KEYS if checkpoint else SCRATCH_KEYS
    template = FfnBertConfig()
    overrides = {}
    for piece in text.split(","):
        key, sep, value = piece.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value or "=" in value:
            raise ValueError(f"{OPTION}: {piece!r} is not key=value (expected e.g. 'hidden_dropout_prob=0.0,...')")
        if key not in allowed:
            if key in OWN_OPTIONS and not checkpoint:
                why = f"it has its own option: {OWN_OPTIONS[key]}"
            elif checkpoint and hasattr(template, key):
                why = "with --model_name_or_path only dropout probabilities may change: the rest is the checkpoint's"
            else:
                why = "not a field that may be overridden"
            raise ValueError(f"{OPTION}: {key!r} cannot be set ({why}); allowed: {', '.join(allowed)}")
        if key in overrides:
            raise ValueError(f"{OPTION}: {key!r} is given twice")
        try:
            template.update_from_string(f"{key}={value}")
        except ValueError as error:
            kind = type(getattr(FfnBertConfig(), key)).__name__
            raise ValueError(f"{OPTION}: {key}={value!r} is not a {kind} ({error})") from None
        overrides[key] = getattr(template, key)
        if key in RANGES:
            low, high, closed = RANGES[key]
            if not ((low <= overrides[key]) if closed else (low < overrides[key])) or not overrides[key] < high:
                interval = f"{'[' if closed else '('}{low:g}, {high:g})"
                raise ValueError(f"{OPTION}: {key} must be in {interval}, got {value}")
    try:
        FfnBertConfig(**overrides)  # FfnBert's own checks of its fields (e.g. leaky_relu_negative_slope in [0, 1))
    except ValueError as error:
        raise ValueError(f"{OPTION}: {error}") from None
    return overrides
