"""FfnBert configuration: BERT's config plus one field per axis of variation (FFN variant, LayerNorm place).

Every `BertConfig` field keeps its name, meaning and default (the class subclasses `BertConfig`), so a BERT
config converts without loss. The new fields are:

- `ffn_type`: which feed-forward network each layer uses (a name, or one name per layer).
- `layer_norm_position`: `"post"` (BERT) or `"pre"` (Xiong et al. 2020), globally or per layer.
- `embedding_layer_norm`: keep the embedding LayerNorm (BERT, ModernBERT) or drop it (MegatronBERT).
- `ffn_bias`: biases on the FFN projections (BERT: yes; Shazeer's GLU variants: no).
- `leaky_relu_negative_slope`, `elu_alpha`, `swish_beta`: parameters of those activations.
- `unpad_tokens`: run every token-wise part on the real tokens only (an execution switch, off by default).
- `sparse_prediction`: with labels, decode only the masked positions in the MLM head (an execution switch, off).

This module has no dependency on `hf_ffn` itself, so it can be copied next to a saved model for
`trust_remote_code` loading.
"""

from __future__ import annotations

import math
import os
from typing import Any

from huggingface_hub.dataclasses import strict
from transformers import BertConfig
from transformers.activations import ACT2CLS
from transformers.utils import logging

logger = logging.get_logger(__name__)

# Gated FFNs of Shazeer 2020 ("GLU Variants Improve Transformer", arXiv 2002.05202, eqs. 5-6 and table 1):
# FFN(x) = down_proj(act(gate_proj(x)) * up_proj(x)). The value names the activation of the gate branch (an
# `ACT2FN` name, or one of the parametrised activations below).
GATED_FFN_ACTIVATIONS: dict[str, str] = {
    "glu": "sigmoid",  # Dauphin et al. 2017
    "bilinear": "linear",  # identity gate
    "reglu": "relu",
    "geglu": "gelu",  # exact (erf) GELU, the same op as BERT's `hidden_act="gelu"`
    "swiglu": "swish",  # x * sigmoid(beta * x); beta = `swish_beta`, 1.0 (= SiLU) by default
}
# Activations whose parameters live in the config (the names shadow `ACT2FN`'s fixed-parameter versions).
PARAMETRISED_ACTIVATIONS = ("leaky_relu", "elu", "swish")
# Activations with learnable parameters that BERT's initialisation does not cover (their values would be left
# uninitialised when a checkpoint lacks them), so they are not offered.
LEARNABLE_ACTIVATIONS = ("xielu",)
# `hidden_act` values: what BERT's MLM head transform can build with `ACT2FN`.
HIDDEN_ACTS: tuple[str, ...] = tuple(sorted(set(ACT2CLS) - set(LEARNABLE_ACTIVATIONS)))
# A standard two-layer FFN `down_proj(act(up_proj(x)))` is named by its activation.
STANDARD_FFN_TYPES: tuple[str, ...] = tuple(sorted(set(HIDDEN_ACTS) | set(PARAMETRISED_ACTIVATIONS)))
FFN_TYPES: tuple[str, ...] = STANDARD_FFN_TYPES + tuple(GATED_FFN_ACTIVATIONS)
LAYER_NORM_POSITIONS = ("post", "pre")
# Checked at construction (a model build would fail on them later, in a module's constructor). The sizes that
# transformers' `ConfigTester` sets to 0 (`create_and_test_config_common_properties`) are checked at the build, as
# upstream BERT checks them (`MODEL_SIZE_FIELDS`).
SIZE_FIELDS = ("intermediate_size",)
MODEL_SIZE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")
DROPOUT_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout")
# Model types whose checkpoints have BERT's layout and config fields.
BERT_MODEL_TYPES = ("bert", "ffn_bert")
# Model types whose checkpoints have RoBERTa's layout and config fields: `FfnRobertaConfig`'s (RoBERTa-PreLayerNorm:
# with its norms renamed, `checkpoint_names.PRELAYERNORM_KEY_MAPPING`).
ROBERTA_MODEL_TYPES = ("roberta", "xlm-roberta", "camembert", "roberta-prelayernorm", "ffn_roberta")
# Model types whose checkpoints have ELECTRA's layout and config fields (`embedding_size`, ...): `FfnElectraConfig`'s.
ELECTRA_MODEL_TYPES = ("electra", "ffn_electra")


def is_gated(ffn_type: str) -> bool:
    """Whether `ffn_type` names a gated (GLU-family) FFN."""
    return ffn_type in GATED_FFN_ACTIVATIONS


def parameter_matched_glu_width(intermediate_size: int, multiple_of: int = 256) -> int:
    """Width of a gated FFN with (at least) the weights of a standard FFN of width `intermediate_size`.

    A standard FFN has 2·d·`intermediate_size` weights, a gated one 3·d·width, so width = 2/3 of
    `intermediate_size`, rounded up to a multiple of `multiple_of` (LLaMA's rule, Touvron et al. 2023; the same
    arithmetic turns LLaMA-2-7B's 4·4096 = 16384 into 11008). Examples: 3072 → 2048 (then 3·768·2048 =
    2·768·3072 = 4,718,592 weights, exactly BERT-base's FFN), 16384 → 11008.

    Raises:
        ValueError: if either argument is not a positive integer.
    """
    for name, value in (("intermediate_size", intermediate_size), ("multiple_of", multiple_of)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return multiple_of * math.ceil(2 * intermediate_size / (3 * multiple_of))


@strict
class FfnBertConfig(BertConfig):
    r"""Configuration of an FfnBert model: a BERT whose FFN variant and LayerNorm placement are switchable.

    With the defaults it describes exactly the BERT that `BertConfig` describes (bert-base-uncased sizes).

    Args:
        ffn_type (`str` or `list[str]`, *optional*):
            The FFN of every layer, or a list with one entry per layer. A standard FFN `down_proj(act(up_proj(x)))`
            is named by its activation: any `transformers.activations.ACT2FN` name (`"gelu"`, `"gelu_new"`,
            `"relu"`, `"silu"`, `"tanh"`, ...) or `"leaky_relu"`, `"elu"`, `"swish"` with the parameters below.
            A gated FFN `down_proj(act(gate_proj(x)) * up_proj(x))` (Shazeer 2020) is one of `"glu"` (sigmoid),
            `"bilinear"` (identity), `"reglu"` (ReLU), `"geglu"` (GELU), `"swiglu"` (Swish/SiLU). Sets the FFN
            alone: `hidden_act` is left as it is. Defaults to `hidden_act`, i.e. BERT's own FFN.
        hidden_act (`str`, *optional*, defaults to `"gelu"`):
            BERT's field, unchanged: the checkpoint's activation (an `ACT2FN` name). The MLM head transform
            always uses `ACT2FN[hidden_act]` (with its fixed parameters); the FFN uses it only when `ffn_type` is
            not given (`ffn_type` is then set to it at construction, and saved). So `FfnBertConfig(ffn_type="relu")`
            has a ReLU FFN and BERT's GELU head transform, and a BERT checkpoint loaded with `ffn_type="relu"` keeps
            its own `hidden_act`.
        layer_norm_position (`str` or `list[str]`, *optional*, defaults to `"post"`):
            `"post"`: `x = LN(x + f(x))` after each sublayer (Vaswani et al. 2017; BERT). `"pre"`:
            `x = x + f(LN(x))` (Xiong et al. 2020, arXiv 2002.04745), with one final LayerNorm after the last
            layer when that layer is Pre-LN. One value, or a list with one entry per layer.
        embedding_layer_norm (`bool`, *optional*, defaults to `True`):
            Whether the embeddings end with a LayerNorm. BERT and ModernBERT keep it; MegatronBERT (Pre-LN) drops it.
        ffn_bias (`bool`, *optional*, defaults to `True`):
            Biases on the FFN projections (BERT has them; Shazeer's GLU variants and LLaMA, `mlp_bias`, do not).
        leaky_relu_negative_slope (`float`, *optional*, defaults to 0.01):
            Slope α of LeakyReLU for x < 0 (Maas et al. 2013), in [0, 1).
        elu_alpha (`float`, *optional*, defaults to 1.0):
            α of ELU, α·(exp(x) − 1) for x < 0 (Clevert et al. 2016), finite and > 0.
        swish_beta (`float`, *optional*, defaults to 1.0):
            β of Swish x·σ(βx) (Ramachandran et al. 2017), finite and > 0; β = 1 is SiLU. Used by `"swish"` and
            `"swiglu"`.
        unpad_tokens (`bool`, *optional*, defaults to `False`):
            Unpadded execution. `False`: upstream BERT exactly, pad positions included. `True`: when the
            `attention_mask` is a plain padding mask (2-D, 0/1, some 0, a 1 in column 0 of every row), every
            token-wise part (embedding LayerNorm and dropout, Q/K/V and attention output projections, LayerNorms,
            FFN, residual adds, dropout, the final norm) runs on the real tokens only, packed as
            (n_real_tokens, hidden_size), re-padded only for the attention core. Every real token's output, the
            pooler, every head's logits at real positions and every loss that ignores pad positions (labels -100
            there, as the data collators set them) equal the padded path's within fp32 rounding (attention sums its
            terms in another order, BLAS may pick its kernel by the row count: docs/unpadded.md); hidden states at pad
            positions are zeros (so the question-answering span loss, a softmax over all positions, differs).
            Other masks, no padding and `output_attentions` run the padded path. Compute and memory scale with
            the real tokens instead of batch × seq. An execution switch: the weights are the same either way.
        sparse_prediction (`bool`, *optional*, defaults to `False`):
            `FfnBertForMaskedLM` only, and only when `labels` are given: the MLM head (transform and vocabulary
            decoder) runs on the hidden states of the labelled positions alone (`labels != -100`, the masked
            tokens), as MosaicBERT (Portes et al. 2023) and ModernBERT (`sparse_prediction`, Warner et al. 2024)
            do. The loss is the same cross-entropy over the same rows (equal within fp32 rounding); the returned
            `logits` are then (n_masked, vocab_size), the masked positions in row-major order. Without labels the
            head decodes every position, as upstream. At small sizes the decoder over a 30k vocabulary costs more
            than the encoder, and only ~15% of its rows enter the loss. An execution switch: same weights.

    Validation follows `BertConfig`: BERT's own fields are checked at construction only for their types (by
    transformers' strict dataclass, which raises `StrictDataclassFieldValidationError` naming the field), and for
    their values when a model is built (`check_model_fields`), as upstream BERT checks them in its modules. So
    `FfnBertConfig(hidden_size=32)` constructs, like `BertConfig(hidden_size=32)`, and `FfnBertModel` then
    rejects it (32 is not divisible by the default 12 heads).

    Raises:
        ValueError: at construction, on an FfnBert field: an unknown `ffn_type` or `layer_norm_position`, a
            per-layer list whose length is not `num_hidden_layers`, an activation parameter out of range, a
            non-bool switch, or a `model_type` other than "bert"/"ffn_bert". An `ffn_type` entry equal to
            `hidden_act` is BERT's own FFN and is checked with `hidden_act`, at model build.
    """

    model_type = "ffn_bert"
    # The `model_type`s of the saved configs (and checkpoints) this class loads; a family's config class sets its own.
    checkpoint_model_types = BERT_MODEL_TYPES

    # `None` here only tells "not given" apart from a value; after construction it is never `None`.
    ffn_type: str | list[str] | None = None
    layer_norm_position: str | list[str] = "post"
    embedding_layer_norm: bool = True
    ffn_bias: bool = True
    leaky_relu_negative_slope: float = 0.01
    elu_alpha: float = 1.0
    swish_beta: float = 1.0
    unpad_tokens: bool = False
    sparse_prediction: bool = False

    def __post_init__(self, **kwargs):
        # A BERT config dict (`BertConfig().to_dict()`) carries `model_type="bert"`: as an instance attribute it
        # would shadow ours and switch off the BERT key mapping, so check it and drop it.
        _check_model_type(kwargs.pop("model_type", self.model_type), "config", type(self))
        if self.ffn_type is None:
            self.ffn_type = self.hidden_act  # BERT's FFN
        super().__post_init__(**kwargs)
        # Checked here too (not only in `validate_architecture`) so that bad values raise a plain `ValueError`.
        self.check_ffn_fields()

    def validate_architecture(self):
        """Part of `@strict` validation (run at init and at save): upstream's checks, then `check_ffn_fields`."""
        super().validate_architecture()
        self.check_ffn_fields()

    def check_ffn_fields(self) -> None:
        """Validate the FfnBert fields, `SIZE_FIELDS` (positive integers) and the dropout probabilities
        (`DROPOUT_FIELDS`: in [0, 1]), at construction and at save. An `ffn_type` entry equal to
        `hidden_act` is BERT's own FFN: like `hidden_act` itself it is checked at model build
        (`check_model_fields`), where upstream BERT checks it.

        Raises:
            ValueError: naming the field, the bad value and what is allowed.
        """
        for name, allowed in (("ffn_type", FFN_TYPES), ("layer_norm_position", LAYER_NORM_POSITIONS)):
            for value in self._per_layer(name):
                if value not in allowed and not (name == "ffn_type" and value == self.hidden_act):
                    raise ValueError(f"{name} has unknown value {value!r}; allowed: {', '.join(allowed)}")
        for name in SIZE_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in DROPOUT_FIELDS:  # torch.nn.Dropout's range; classifier_dropout None: hidden_dropout_prob's
            value = getattr(self, name, None)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1
            ):
                raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
        for name in ("embedding_layer_norm", "ffn_bias", "unpad_tokens", "sparse_prediction"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        for name, low, high, closed_low in (
            ("leaky_relu_negative_slope", 0.0, 1.0, True),
            ("elu_alpha", 0.0, math.inf, False),
            ("swish_beta", 0.0, math.inf, False),
        ):
            value = getattr(self, name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not (number and (low <= value if closed_low else low < value) and value < high):
                interval = f"{'[' if closed_low else '('}{low:g}, {high:g})"
                raise ValueError(f"{name} must be a number in {interval}, got {value!r}")

    def check_model_fields(self) -> None:
        """Validate everything a model build needs: the checks upstream BERT makes in its modules (positive
        `MODEL_SIZE_FIELDS`, `hidden_size` divisible by `num_attention_heads` as in `BertSelfAttention`, `hidden_act`
        an `ACT2FN` name as in `BertPredictionHeadTransform`), that the model is an encoder, and `check_ffn_fields`.
        Models call it when built, so a config changed by attribute assignment after construction is checked before
        use.

        Raises:
            ValueError: naming the field, the bad value and what is allowed.
        """
        for name in MODEL_SIZE_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads})"
            )
        if self.hidden_act not in HIDDEN_ACTS:  # the MLM head transform builds ACT2FN[hidden_act]
            raise ValueError(f"hidden_act has unknown value {self.hidden_act!r}; allowed: {', '.join(HIDDEN_ACTS)}")
        for value in self.ffn_types:
            if value not in FFN_TYPES:
                raise ValueError(f"ffn_type has unknown value {value!r}; allowed: {', '.join(FFN_TYPES)}")
        if self.is_decoder or self.add_cross_attention:
            raise ValueError(
                f"FfnBert is an encoder: is_decoder={self.is_decoder!r} and add_cross_attention="
                f"{self.add_cross_attention!r} are not supported; allowed: False for both"
            )
        self.check_ffn_fields()

    def _per_layer(self, name: str) -> list[str]:
        value = getattr(self, name)
        if isinstance(value, str):
            return [value] * self.num_hidden_layers
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{name} must be a string or a list of {self.num_hidden_layers} strings, got {value!r}")
        if len(value) != self.num_hidden_layers:
            raise ValueError(
                f"{name} has {len(value)} entries but num_hidden_layers is {self.num_hidden_layers}; "
                f"give one value or a list of {self.num_hidden_layers}"
            )
        return list(value)

    @property
    def ffn_types(self) -> list[str]:
        """`ffn_type` of each layer (a list of length `num_hidden_layers`)."""
        return self._per_layer("ffn_type")

    @property
    def layer_norm_positions(self) -> list[str]:
        """`layer_norm_position` of each layer (a list of length `num_hidden_layers`)."""
        return self._per_layer("layer_norm_position")

    @property
    def is_default_bert(self) -> bool:
        """Whether this config describes plain BERT, so that the model is exactly upstream `BertModel`: no
        `non_default_fields`."""
        return not self.non_default_fields()

    def non_default_fields(self) -> list[str]:
        """Why this config is not plain BERT: one 'field=value (BERT: ...)' entry per non-default switch; [] if it
        is. Plain BERT: every layer's FFN is the standard one with `hidden_act` (the activation upstream uses),
        Post-LN, with the embedding LayerNorm and FFN biases, and `hidden_act` is not one that FfnBert parametrises
        differently from `ACT2FN`."""
        reasons = []
        if self.ffn_types != [self.hidden_act] * self.num_hidden_layers:
            reasons.append(f"ffn_type={self.ffn_type!r} (BERT: the standard FFN with hidden_act={self.hidden_act!r})")
        if self.hidden_act in PARAMETRISED_ACTIVATIONS:
            reasons.append(f"hidden_act={self.hidden_act!r} is parametrised by FfnBert; BERT's ACT2FN has its own")
        if self.layer_norm_positions != ["post"] * self.num_hidden_layers:
            reasons.append(f"layer_norm_position={self.layer_norm_position!r} (BERT: 'post')")
        if not self.embedding_layer_norm:
            reasons.append("embedding_layer_norm=False (BERT: True)")
        if not self.ffn_bias:
            reasons.append("ffn_bias=False (BERT: True)")
        return reasons

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], warn_reused_weights: bool = True, **kwargs):
        """The one way to build an FfnBertConfig from a saved config: an FfnBert config dict or a plain BERT one
        (`BertConfig().to_dict()`, a BERT checkpoint's `config.json`). `from_pretrained` (through `get_config_dict`),
        `AutoConfig` and every model class's `from_pretrained` come through here.

        Keyword overrides of config fields (`ffn_type="swiglu"`, `layer_norm_position="pre"`, ...) are merged in before
        the config is built, so derived fields and checks see them (upstream `from_dict` sets them afterwards,
        unchecked). An override of `ffn_type` or `layer_norm_position` that changes the saved value (for a plain BERT
        dict: the standard FFN with `hidden_act`, Post-LN) while the saved weights keep their shapes logs a warning
        (see `warn_reused_weights_of`): those weights are then reused under another activation or placement, and no
        weight is missing or unexpected, so transformers' loading report says nothing.

        Args:
            config_dict: the saved config (its `model_type` "ffn_bert", "bert" or absent).
            warn_reused_weights: whether to log that warning. Pass False where the caller maps or re-initialises the
                weights itself or reports them (the conversion API, the parity job, the benchmark's variants); a model
                class's `from_pretrained(path, ..., warn_reused_weights=False)` passes it here.
            **kwargs: config field overrides, and `from_dict`'s own keywords (`return_unused_kwargs`, ...).

        Raises:
            ValueError: if `config_dict["model_type"]` is neither "bert" nor "ffn_bert", or on a bad value.
        """
        saved = cls.as_own_dict(config_dict, "config")
        field_names = set(cls.__dataclass_fields__)
        overrides = {k: kwargs.pop(k) for k in list(kwargs) if k in field_names}
        result = super().from_dict({**saved, **overrides}, **kwargs)
        if warn_reused_weights:
            warn_reused_weights_of(saved, overrides, result[0] if isinstance(result, tuple) else result)
        return result

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path: str | os.PathLike, **kwargs):
        """transformers' `get_config_dict`, with the saved dict in FfnBert's terms (`as_ffn_bert_dict`, which names the
        checkpoint in a `model_type` error), so `from_pretrained` reads a BERT checkpoint's config without
        transformers' model-type mismatch warning and then builds it with `from_dict`.

        Raises:
            ValueError: if the checkpoint's `model_type` is neither "bert" nor "ffn_bert".
        """
        config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        return cls.as_own_dict(config_dict, str(pretrained_model_name_or_path)), kwargs

    @classmethod
    def as_own_dict(cls, config_dict: dict[str, Any], source: str) -> dict[str, Any]:
        """`as_ffn_bert_dict` for this class (its `model_type` and `checkpoint_model_types`); a family's config class
        adds what its checkpoints' model types imply."""
        return as_ffn_bert_dict(config_dict, source, cls)


def as_ffn_bert_dict(config_dict: dict[str, Any], source: str, config_class: type | None = None) -> dict[str, Any]:
    """A saved config dict in FfnBert's terms: `model_type` checked (named with `source` in the error) and dropped;
    a plain BERT dict also drops its `architectures` (BERT class names). BERT's fields carry over unchanged (a plain
    BERT dict has no FfnBert field: its FFN is then the standard one with `hidden_act`, Post-LN). `config_class`
    (default `FfnBertConfig`) says which model types are accepted (`checkpoint_model_types`) and which is its own.

    Raises:
        ValueError: if `config_dict["model_type"]` is not one of `config_class.checkpoint_model_types`.
    """
    config_class = FfnBertConfig if config_class is None else config_class
    model_type = _check_model_type(config_dict.get("model_type", config_class.model_type), source, config_class)
    dropped = ("model_type", "architectures") if model_type != config_class.model_type else ("model_type",)
    return {k: v for k, v in config_dict.items() if k not in dropped}


def warn_reused_weights_of(saved: dict[str, Any], overrides: dict[str, Any], config: FfnBertConfig) -> None:
    """Log a warning for each of `ffn_type` / `layer_norm_position` that `overrides` changes in a layer whose
    saved weights are then reused unchanged: an FFN replaced by another of the same kind (standard → standard, or
    gated → gated: the same projections), or a LayerNorm placement changed (the same LayerNorm weights, applied
    elsewhere). A standard FFN turned gated or back is not warned about: its `gate_proj` is missing (newly
    initialised) or unexpected (unused), and transformers' loading report already lists it.

    `saved` is the checkpoint's config dict (a plain BERT dict has the standard FFN with its `hidden_act`, Post-LN);
    `config` is the config built with the overrides.
    """
    n = config.num_hidden_layers
    before_ffn = saved.get("ffn_type") or saved.get("hidden_act", "gelu")
    before_ln = saved.get("layer_norm_position", "post")
    checks = (
        ("ffn_type", before_ffn, config.ffn_types, lambda old, new: is_gated(old) == is_gated(new)),
        ("layer_norm_position", before_ln, config.layer_norm_positions, lambda old, new: True),
    )
    for name, before, after, reused in checks:
        if name not in overrides:
            continue
        old_layers = [before] * n if isinstance(before, str) else list(before)
        if len(old_layers) != n:  # another depth: the per-layer values do not line up
            continue
        changed = [
            i for i, (old, new) in enumerate(zip(old_layers, after, strict=False)) if old != new and reused(old, new)
        ]
        if not changed:
            continue
        layers = "" if len(changed) == n else f" (layers {', '.join(map(str, changed))})"
        old, new = old_layers[changed[0]], after[changed[0]]
        if name == "ffn_type":
            weights = "gate_proj/up_proj/down_proj" if is_gated(old) else "FFN (intermediate.dense/output.dense)"
            meaning = f"the saved {weights} weights, trained for {old}, are reused under {new}"
        else:
            meaning = (
                f"the saved LayerNorm weights, trained in {old.title()}-LN places, are applied in {new.title()}-LN "
                f"places"
            )
        kind = "" if name in saved else " (a plain BERT checkpoint)"
        logger.warning(
            f"ffn_bert config: the checkpoint's {name} is {before!r}{kind}, overridden at load with "
            f"{overrides[name]!r}{layers}: {meaning}; the outputs change. To make a variant on purpose, convert a "
            f"plain BERT checkpoint with hf_ffn.conversion.load_converted or `hf-ffn convert` (they map or "
            f"re-initialise the weights and report which)."
        )


def _check_model_type(model_type: str, source: str, config_class: type | None = None) -> str:
    allowed = (FfnBertConfig if config_class is None else config_class).checkpoint_model_types
    if model_type not in allowed:
        if allowed == BERT_MODEL_TYPES:
            family = ""  # where a checkpoint of another supported family goes instead
            commands = (
                "which every hf-ffn command takes but convert --to_bert (it writes plain BERT folders; "
                "docs/switches.md#model-families)"
            )
            if model_type in ROBERTA_MODEL_TYPES:
                family = f"; a RoBERTa-family checkpoint loads into FfnRobertaConfig / FfnRoberta*, {commands}"
            elif model_type in ELECTRA_MODEL_TYPES:
                family = f"; an ELECTRA checkpoint loads into FfnElectraConfig / FfnElectra*, {commands}"
            raise ValueError(
                f"{source} has model_type={model_type!r}; FfnBert loads BERT-shaped checkpoints only "
                f"(allowed: {', '.join(BERT_MODEL_TYPES)}){family}"
            )
        raise ValueError(
            f"{source} has model_type={model_type!r}; {config_class.__name__} loads only checkpoints of model_type "
            f"{', '.join(allowed)} (and FfnBertConfig those of {', '.join(BERT_MODEL_TYPES)})"
        )
    return model_type


__all__ = [
    "FfnBertConfig",
    "parameter_matched_glu_width",
    "is_gated",
    "as_ffn_bert_dict",
    "warn_reused_weights_of",
    "FFN_TYPES",
    "GATED_FFN_ACTIVATIONS",
]
