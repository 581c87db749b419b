"""FfnRoberta: RoBERTa with FfnBert's switchable FFN and LayerNorm placement, in transformers' own pattern.

transformers' `modular_roberta.py` builds RoBERTa from BERT's modules and overrides what differs: the embeddings
(positions count from `padding_idx + 1`, pads sit at `padding_idx`) and the heads (`RobertaLMHead`,
`RobertaClassificationHead` on `<s>`). FfnRoberta does the same over hf_ffn's encoder: upstream's
`RobertaEmbeddings`, `RobertaPooler`, heads and heads' `forward`s, over `FfnBertEncoder` (FFN type and LayerNorm
placement per layer, unpadding). With the defaults every head is upstream's `RobertaFor*` bit for bit; XLM-RoBERTa and
CamemBERT are the same model (`XLMRobertaModel`, `CamembertModel` subclass `RobertaModel`) and load into these
classes; RoBERTa-PreLayerNorm checkpoints load with `layer_norm_position="pre"`, their norms renamed
(`checkpoint_names.PRELAYERNORM_KEY_MAPPING`), bit for bit with upstream `RobertaPreLayerNorm*`.

Weight names. On disk every weight RoBERTa has keeps RoBERTa's name (`roberta.` prefix, `lm_head.`, `classifier.`),
the FFN's as BERT's (`intermediate.dense`, `output.dense`, `output.LayerNorm`), renamed in memory by the same
weight-conversion mapping as FfnBert (`checkpoint_names`, registered for `model_type="ffn_roberta"`). So a RoBERTa
checkpoint loads with no missing or unexpected keys, and a default-config FfnRoberta folder loads in upstream
`RobertaModel` / `RobertaFor*`. A folder loaded from RoBERTa-PreLayerNorm saves FfnRoberta's layout (Pre-LN: its
attention norm as `attention.output.LayerNorm`, FFN norm as `output.LayerNorm`, final norm `encoder.final_norm`).

Padding-free batches (`DataCollatorWithFlattening`): RoBERTa's positions start at `padding_idx + 1` (2), so its
sequences must restart there (`DataCollatorWithFlattening(position_ids_start=2)`, transformers #47525); position ids
that restart at 0 (the collator's default, the silent degradation of transformers #47496) raise `ValueError`.

This file imports from `hf_ffn` only `modeling_ffn_bert`, its config, naming and `unpadding` modules (relatively), so
`save_pretrained` ships them beside a saved model for `trust_remote_code` loading.
"""

# No `from __future__ import annotations`: transformers reads `forward`'s `Unpack[TransformersKwargs]` at run time.
import torch
import transformers
from packaging.version import Version
from torch import nn
from transformers import PreTrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPoolingAndCrossAttentions
from transformers.models.roberta.modeling_roberta import (
    RobertaClassificationHead,
    RobertaEmbeddings,
    RobertaForMaskedLM,
    RobertaForMultipleChoice,
    RobertaForQuestionAnswering,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
    RobertaLMHead,
    RobertaModel,
    RobertaPooler,
    RobertaPreTrainedModel,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs

from .checkpoint_names import PRELAYERNORM_KEY_MAPPING, register_weight_renamings
from .configuration_ffn_roberta import PRE_LAYER_NORM_MODEL_TYPES, FfnRobertaConfig
from .modeling_ffn_bert import FfnBertEncoder, FfnBertPreTrainedModel, HeadClass
from .unpadding import TokenPacking, block_diagonal_forward, compute_dtype, unpadded_model_forward

# FfnBert's weight renames (BERT's FFN names on disk ↔ role names in memory), for `model_type="ffn_roberta"` too.
register_weight_renamings(FfnRobertaConfig.model_type)

# The oldest transformers FfnRoberta is proven bit for bit against (tests/test_roberta_family.py runs on the pin and
# the newest release); older releases' RoBERTa-family heads differ (5.6's XLMRobertaForMultipleChoice has no pooler).
MIN_TRANSFORMERS = (5, 25)

# `from_pretrained` keywords that say where a checkpoint's config.json is (read to tell its family).
HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder")


def saved_model_type(pretrained_model_name_or_path, **kwargs) -> str | None:
    """The `model_type` in a checkpoint's config.json (None where there is none to read)."""
    if pretrained_model_name_or_path is None:
        return None
    try:
        config_dict, _ = PreTrainedConfig.get_config_dict(
            pretrained_model_name_or_path, **{k: kwargs[k] for k in HUB_KWARGS if k in kwargs}
        )
    except OSError:
        return None
    return config_dict.get("model_type")


class FfnRobertaPreTrainedModel(FfnBertPreTrainedModel, RobertaPreTrainedModel):
    """RoBERTa's pre-trained base (`base_model_prefix="roberta"`; init as RoBERTa: BERT's, the LM head's bias
    zeros) with FfnRoberta's config and FfnBert's layer class, `from_pretrained` check and remote-code `auto_map`."""

    config_class = FfnRobertaConfig
    config: FfnRobertaConfig
    base_model_prefix = "roberta"
    _no_split_modules = ["RobertaEmbeddings", "FfnBertLayer"]

    def __init__(self, config: FfnRobertaConfig, *args, **kwargs):
        """`PreTrainedModel.__init__`, on a transformers release FfnRoberta is proven on.

        Raises:
            ValueError: on a release older than `MIN_TRANSFORMERS` (its RoBERTa-family classes differ).
        """
        if Version(transformers.__version__).release < MIN_TRANSFORMERS:
            raise ValueError(
                f"FfnRoberta needs transformers >= {'.'.join(map(str, MIN_TRANSFORMERS))} (installed: "
                f"{transformers.__version__}): its parity with upstream's RoBERTa classes is proven there; "
                f"pip install 'transformers>={'.'.join(map(str, MIN_TRANSFORMERS))}'"
            )
        # Not `super().__init__`: in a model's MRO that is upstream's `RobertaModel.__init__` / `RobertaFor*.__init__`,
        # which would build (and initialise) a whole upstream model, XLM-R's 250,002-row embedding included, before
        # this one replaces its modules (as `FfnElectraPreTrainedModel.__init__`).
        PreTrainedModel.__init__(self, config, *args, **kwargs)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """`FfnBertPreTrainedModel.from_pretrained`; a RoBERTa-PreLayerNorm checkpoint (config.json's `model_type`
        "roberta-prelayernorm") loads through `PRELAYERNORM_KEY_MAPPING` (its config with `layer_norm_position="pre"`,
        `FfnRobertaConfig`). transformers would revert those renames at save (`_weight_conversions`); they are dropped,
        so that `save_pretrained` writes FfnRoberta's own layout, which reloads without `key_mapping`."""
        prelayernorm = "key_mapping" not in kwargs and (
            saved_model_type(pretrained_model_name_or_path, **kwargs) in PRE_LAYER_NORM_MODEL_TYPES
        )
        if not prelayernorm:
            return super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        loaded = super().from_pretrained(
            pretrained_model_name_or_path, *model_args, key_mapping=PRELAYERNORM_KEY_MAPPING, **kwargs
        )
        (loaded[0] if isinstance(loaded, tuple) else loaded).__dict__.pop("_weight_conversions", None)
        return loaded

    def save_pretrained(self, save_directory, *args, **kwargs):
        # `auto_map` names every FfnRoberta Auto class (`AUTO_MAP`), as FfnBert's folders name FfnBert's.
        self.config.auto_map = {**AUTO_MAP, **(getattr(self.config, "auto_map", None) or {})}
        return PreTrainedModel.save_pretrained(self, save_directory, *args, **kwargs)


def _reads_packing(attention_mask: torch.Tensor | None) -> bool:
    """Whether `position_ids` may describe a padding-free batch: no mask, or a 2-D all-ones one (as FfnBert reads
    them). With a padding mask they do not: RoBERTa's own position ids restart at `padding_idx` on the pads."""
    return attention_mask is None or (attention_mask.dim() == 2 and bool((attention_mask == 1).all()))


class FfnRobertaModel(FfnRobertaPreTrainedModel, RobertaModel):
    """The bare FfnRoberta encoder: upstream `RobertaModel` (its `forward`, `RobertaEmbeddings`, `RobertaPooler`) over
    an `FfnBertEncoder`. Inputs and outputs are `RobertaModel`'s: `last_hidden_state` (batch, seq, hidden_size),
    `pooler_output` (batch, hidden_size), `hidden_states` (num_hidden_layers + 1), `attentions`
    (num_hidden_layers × (batch, heads, seq, seq)).

    Positions as upstream: from `input_ids`, `padding_idx + 1` onwards with pads at `padding_idx`
    (`RobertaEmbeddings.create_position_ids_from_input_ids`), or `padding_idx + 1 ..` for `inputs_embeds`. Packed
    execution as `FfnBertModel`: with `unpad_tokens=True` and a padding mask the real tokens (at upstream's positions)
    run packed; a padding-free batch (no `attention_mask`, or an all-ones one; `position_ids` restarting at
    `padding_idx + 1`) runs with each sequence attending to itself, bit for bit with upstream (which builds the same
    mask from `position_ids` from transformers 5.25 on), `pooler_output` one per sequence. With a padding mask,
    `position_ids` are positions only (pads may sit at `padding_idx`), as upstream reads them.

    Raises:
        ValueError: position ids that restart within a row but not at `padding_idx + 1`
            (`TokenPacking.from_position_ids`).
    """

    def __init__(self, config: FfnRobertaConfig, add_pooling_layer: bool = True):
        FfnRobertaPreTrainedModel.__init__(self, config)
        config.check_model_fields()
        self.config = config
        self.gradient_checkpointing = False
        self.embeddings = RobertaEmbeddings(config)
        if not config.embedding_layer_norm:
            self.embeddings.LayerNorm = nn.Identity()
        self.encoder = FfnBertEncoder(config)
        self.pooler = RobertaPooler(config) if add_pooling_layer else None
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPoolingAndCrossAttentions:
        """`RobertaModel.forward` (the same arguments and outputs), packed where the class docstring says."""
        inputs = (input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        output_attentions = kwargs.get("output_attentions", self.config.output_attentions)
        dtype = compute_dtype(self.dtype, self.device) if self.config.unpad_tokens else self.dtype
        padding_idx = self.embeddings.padding_idx
        packing = TokenPacking.for_batch(
            self.config,
            input_ids,
            attention_mask,
            token_type_ids,
            # given ids first: `_reads_packing` reads the mask's values, which `torch.export` cannot trace (ONNX
            # export passes no position_ids, so it never asks)
            position_ids if position_ids is not None and _reads_packing(attention_mask) else None,
            inputs_embeds,
            output_attentions=output_attentions,
            dtype=dtype,
            sequence_start=padding_idx + 1,
        )
        if packing is None:
            return super().forward(*inputs, **kwargs)
        if packing.padding_free and (output_attentions or packing.kernel is None):
            return block_diagonal_forward(self, super().forward, *inputs, packing=packing, **kwargs)
        if position_ids is None:  # upstream's, from the padded batch (the packed path gathers the real tokens')
            if input_ids is not None:
                position_ids = self.embeddings.create_position_ids_from_input_ids(input_ids, padding_idx)
            else:
                position_ids = self.embeddings.create_position_ids_from_inputs_embeds(inputs_embeds, padding_idx)
        return unpadded_model_forward(
            self, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, packing=packing, **kwargs
        )


# Heads: upstream RoBERTa heads (their `forward`s and head modules) over `FfnRobertaModel`; each `__init__` mirrors
# upstream's with `FfnRobertaModel` in place of `RobertaModel`.
class FfnRobertaForMaskedLM(FfnRobertaPreTrainedModel, RobertaForMaskedLM):
    def __init__(self, config: FfnRobertaConfig):
        FfnRobertaPreTrainedModel.__init__(self, config)
        if config.sparse_prediction:  # FfnBertForMaskedLM's switch; not here yet: refuse rather than ignore it
            raise ValueError("sparse_prediction=True is supported by FfnBertForMaskedLM only; allowed here: False")
        self.roberta = FfnRobertaModel(config, add_pooling_layer=False)
        self.lm_head = RobertaLMHead(config)
        self.post_init()


class FfnRobertaForSequenceClassification(FfnRobertaPreTrainedModel, RobertaForSequenceClassification):
    def __init__(self, config: FfnRobertaConfig):
        FfnRobertaPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.config = config
        self.roberta = FfnRobertaModel(config, add_pooling_layer=False)
        self.classifier = RobertaClassificationHead(config)  # on <s> (token 0), no pooler
        self.post_init()


class FfnRobertaForMultipleChoice(FfnRobertaPreTrainedModel, RobertaForMultipleChoice):
    def __init__(self, config: FfnRobertaConfig):
        FfnRobertaPreTrainedModel.__init__(self, config)
        self.roberta = FfnRobertaModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)  # as upstream: not classifier_dropout
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()


class FfnRobertaForTokenClassification(FfnRobertaPreTrainedModel, RobertaForTokenClassification):
    def __init__(self, config: FfnRobertaConfig):
        FfnRobertaPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.roberta = FfnRobertaModel(config, add_pooling_layer=False)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


class FfnRobertaForQuestionAnswering(FfnRobertaPreTrainedModel, RobertaForQuestionAnswering):
    def __init__(self, config: FfnRobertaConfig):
        FfnRobertaPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.roberta = FfnRobertaModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


# Auto class ↔ FfnRoberta class ↔ upstream RoBERTa class (`HeadClass`'s fields: `ffn_bert` the hf_ffn class, `bert`
# the upstream one), in the order of FfnBert's table; every encoder head `RobertaFor*` has (not the decoder,
# `RobertaForCausalLM`). XLM-RoBERTa's, CamemBERT's and RoBERTa-PreLayerNorm's classes are the same heads under
# their names (the same Auto class with their config).
HEAD_CLASSES: tuple[HeadClass, ...] = (
    HeadClass("AutoModel", FfnRobertaModel, RobertaModel),
    HeadClass("AutoModelForMaskedLM", FfnRobertaForMaskedLM, RobertaForMaskedLM),
    HeadClass(
        "AutoModelForSequenceClassification", FfnRobertaForSequenceClassification, RobertaForSequenceClassification
    ),
    HeadClass("AutoModelForTokenClassification", FfnRobertaForTokenClassification, RobertaForTokenClassification),
    HeadClass("AutoModelForQuestionAnswering", FfnRobertaForQuestionAnswering, RobertaForQuestionAnswering),
    HeadClass("AutoModelForMultipleChoice", FfnRobertaForMultipleChoice, RobertaForMultipleChoice),
)
# `auto_map` naming every Auto class, for remote-code loading with any of them.
AUTO_MAP: dict[str, str] = {"AutoConfig": f"{FfnRobertaConfig.__module__.rsplit('.', 1)[-1]}.FfnRobertaConfig"} | {
    head.auto_class: f"{__name__.rsplit('.', 1)[-1]}.{head.ffn_bert.__name__}" for head in HEAD_CLASSES
}


__all__ = [
    "AUTO_MAP",
    "HEAD_CLASSES",
    "MIN_TRANSFORMERS",
    "FfnRobertaForMaskedLM",
    "FfnRobertaForMultipleChoice",
    "FfnRobertaForQuestionAnswering",
    "FfnRobertaForSequenceClassification",
    "FfnRobertaForTokenClassification",
    "FfnRobertaModel",
    "FfnRobertaPreTrainedModel",
]
