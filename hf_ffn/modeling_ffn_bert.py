"""FfnBert: BERT with a switchable feed-forward network and LayerNorm placement.

Reads top-down: FFN variants (their activations: `activations`) → layer (two LayerNorm placements) → encoder →
pre-trained base → heads. Everything else is upstream BERT (`transformers.models.bert.modeling_bert`): embeddings,
self-attention (so eager, sdpa, flash and flex attention all work), pooler, prediction heads and the heads'
`forward`s.

Weight names. In memory the FFN projections are named by role (`mlp.gate_proj`, `mlp.up_proj`, `mlp.down_proj`)
and the FFN's LayerNorm is `mlp_norm`. On disk every weight BERT has keeps BERT's name, so BERT checkpoints
load with no missing or unexpected keys and a default-config FfnBert checkpoint loads into upstream `BertModel`.
The renames are transformers' own weight-conversion mapping, registered for `model_type="ffn_bert"`, applied by
`from_pretrained` and reverted by `save_pretrained`; the tables, and why the names are what they are, are in
`checkpoint_names`:

    BERT / disk name                               in memory
    encoder.layer.{i}.intermediate.dense           encoder.layer.{i}.mlp.up_proj
    encoder.layer.{i}.output.dense                 encoder.layer.{i}.mlp.down_proj
    encoder.layer.{i}.output.LayerNorm             encoder.layer.{i}.mlp_norm
    (new)  encoder.layer.{i}.mlp.gate_proj          encoder.layer.{i}.mlp.gate_proj   (gated FFNs only)
    (new)  encoder.final_norm                       encoder.final_norm                (Pre-LN last layer only)

This file imports from `hf_ffn` only its config, naming, `activations`, `unpadding` and `sparse_prediction` modules
(relatively), so `save_pretrained` ships them beside a saved model for `trust_remote_code` loading; `from_pretrained`'s
check of a converted folder comes from `hf_ffn.conversion_warning` when hf_ffn is installed and is skipped where it
is not.
"""

# No `from __future__ import annotations` here: transformers reads the `**kwargs: Unpack[TransformersKwargs]`
# annotation of a model's `forward` at run time (which attention outputs a model can return), so annotations in this
# module must be objects, not strings, as in upstream's modeling files.
from typing import NamedTuple

import torch
from torch import nn
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPastAndCrossAttentions,
    BaseModelOutputWithPoolingAndCrossAttentions,
)
from transformers.models.bert.modeling_bert import (
    BertAttention,
    BertEmbeddings,
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForNextSentencePrediction,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    BertOnlyMLMHead,
    BertOnlyNSPHead,
    BertPooler,
    BertPreTrainedModel,
    BertPreTrainingHeads,
    BertSelfAttention,
)
from transformers.processing_utils import Unpack
from transformers.pytorch_utils import apply_chunking_to_forward
from transformers.utils import TransformersKwargs

from .activations import Swish, get_activation
from .checkpoint_names import BERT_FFN_NAMES, CHECKPOINT_KEY_MAPPING, register_weight_renamings, rename_to_memory_keys
from .configuration_ffn_bert import GATED_FFN_ACTIVATIONS, FfnBertConfig, is_gated
from .sparse_prediction import SparsePredictionMixin
from .unpadding import (
    TokenPacking,
    block_diagonal_forward,
    compute_dtype,
    packed_self_attention,
    unpadded_model_forward,
)

try:  # the check of a converted folder on load; where this file runs as remote code without hf_ffn, there is none
    from hf_ffn.conversion_warning import warn_if_not_function_preserving
except ImportError:
    warn_if_not_function_preserving = None

# FfnBert's weight renames (BERT's names on disk ↔ role names in memory) for `model_type="ffn_bert"`.
register_weight_renamings()


# ---------------------------------------------------------------------------------------------------------------
# FFN variants: one constructor signature `(config, ffn_type)`, one input/output contract
# (batch, seq, hidden_size) → (batch, seq, hidden_size). No dropout, norm or residual here: the layer owns those.
# ---------------------------------------------------------------------------------------------------------------
class FfnBertMLP(nn.Module):
    """Standard two-layer FFN, `down_proj(act(up_proj(x)))` (Vaswani et al. 2017, eq. 2; BERT's
    `BertIntermediate` + `BertOutput.dense`, the same ops in the same order).

    Shapes: x (batch, seq, hidden_size) → up_proj (batch, seq, intermediate_size) → (batch, seq, hidden_size).
    """

    def __init__(self, config: FfnBertConfig, ffn_type: str):
        super().__init__()
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.ffn_bias)
        self.act_fn = get_activation(ffn_type, config)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.ffn_bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.up_proj(hidden_states)))


class FfnBertGatedMLP(nn.Module):
    """Gated FFN, `down_proj(act(gate_proj(x)) * up_proj(x))` (Shazeer 2020, arXiv 2002.05202, eqs. 5-6; the
    layout of HF `LlamaMLP`). The activated branch is the gate; `up_proj` is the linear branch.

    `ffn_type` picks the gate activation: glu → sigmoid, bilinear → identity, reglu → ReLU, geglu → GELU (erf),
    swiglu → Swish_β (SiLU for β = 1).
    Shapes: x (batch, seq, hidden_size) → gate, up (batch, seq, intermediate_size) → (batch, seq, hidden_size).
    """

    def __init__(self, config: FfnBertConfig, ffn_type: str):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.ffn_bias)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.ffn_bias)
        self.act_fn = get_activation(GATED_FFN_ACTIVATIONS[ffn_type], config)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.ffn_bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(hidden_states)) * self.up_proj(hidden_states))


def build_ffn(config: FfnBertConfig, ffn_type: str) -> nn.Module:
    """The FFN module for one layer: `FfnBertGatedMLP` for GLU-family names, `FfnBertMLP` otherwise."""
    return (FfnBertGatedMLP if is_gated(ffn_type) else FfnBertMLP)(config, ffn_type)


# ---------------------------------------------------------------------------------------------------------------
# Layer
# ---------------------------------------------------------------------------------------------------------------
class FfnBertLayer(GradientCheckpointingLayer):
    r"""One encoder layer: self-attention and FFN sublayers with Post-LN or Pre-LN residual connections.

    Post-LN (BERT, Vaswani et al. 2017)             Pre-LN (Xiong et al. 2020, arXiv 2002.04745; MegatronBERT)

        x ──► Attn ──► drop ──► (+x) ──► LN_a            x ──► LN_a ──► Attn ──► drop ──► (+x)
          ──► FFN  ──► drop ──► (+x) ──► LN_f              ──► LN_f ──► FFN  ──► drop ──► (+x)

    `Attn` is upstream self-attention with its output projection (`attention.self`, `attention.output.dense`), LN_a
    `attention.output.LayerNorm` (upstream's name in both placements), LN_f `mlp_norm`, FFN `mlp`, drop dropout
    (`hidden_dropout_prob`). `chunk_size_feed_forward` > 0 runs the FFN sublayer in chunks of that many tokens as
    `BertLayer` does (`apply_chunking_to_forward`, raising `ValueError` when seq is not a multiple of it).
    Shapes: (batch, seq, hidden_size) → same. Packed (`packing`, `hf_ffn.unpadding`): the same body on real tokens
    (n_real, hidden_size), attention by `packed_self_attention`, FFN chunks split off n_real (the last may be
    shorter); a padded input (hidden states being recorded) is packed, and the output re-padded (zeros at pads).
    """

    def __init__(self, config: FfnBertConfig, layer_idx: int):
        super().__init__()
        self.layer_norm_position = config.layer_norm_positions[layer_idx]
        self.chunk_size_feed_forward = config.chunk_size_feed_forward
        self.attention = BertAttention(config, layer_idx=layer_idx)
        self.mlp = build_ffn(config, config.ffn_types[layer_idx])
        self.mlp_dropout = nn.Dropout(config.hidden_dropout_prob)
        self.mlp_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.register_load_state_dict_pre_hook(rename_to_memory_keys)  # Trainer's resume

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        packing: TokenPacking | None = None,
        **kwargs,
    ) -> torch.Tensor:
        repad = packing is not None and hidden_states.dim() == 3  # recorded hidden states travel padded
        x = packing.unpad(hidden_states) if repad else hidden_states

        def attend(x: torch.Tensor) -> torch.Tensor:  # the one step that differs: (..., hidden) → (..., hidden)
            if packing is None:
                return self.attention.self(x, attention_mask=attention_mask, **kwargs)[0]
            return packed_self_attention(self.attention.self, x, packing, **kwargs)

        attention = self.attention
        if self.layer_norm_position == "post":
            x = attention.output(attend(x), x)  # BertSelfOutput: LN_a(x + drop(dense(attn)))
        else:
            x = x + attention.output.dropout(attention.output.dense(attend(attention.output.LayerNorm(x))))
        chunk = self.chunk_size_feed_forward
        if packing is not None and chunk:  # n_real depends on the batch: the last chunk may be shorter
            x = torch.cat([self.feed_forward(part) for part in x.split(chunk)])
        else:
            x = apply_chunking_to_forward(self.feed_forward, chunk, 1, x)  # chunk 0: one call
        return packing.pad(x) if repad else x

    def feed_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The FFN sublayer: Post-LN `LN_f(x + drop(FFN(x)))`, Pre-LN `x + drop(FFN(LN_f(x)))`; token-wise."""
        if self.layer_norm_position == "post":
            return self.mlp_norm(hidden_states + self.mlp_dropout(self.mlp(hidden_states)))
        return hidden_states + self.mlp_dropout(self.mlp(self.mlp_norm(hidden_states)))


# ---------------------------------------------------------------------------------------------------------------
# Encoder
# ---------------------------------------------------------------------------------------------------------------
class FfnBertEncoder(nn.Module):
    """The stack of `FfnBertLayer`s, plus `final_norm` when the last layer is Pre-LN (its output is not normalised;
    Post-LN layers end with a norm). hidden_states (batch, seq, hidden_size) or packed (n_real, hidden_size) → same."""

    def __init__(self, config: FfnBertConfig):
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList([FfnBertLayer(config, layer_idx=i) for i in range(config.num_hidden_layers)])
        last_is_pre = config.layer_norm_positions[-1] == "pre"
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if last_is_pre else None

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache=None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        # `encoder_hidden_states`, `cache`, ... are BertModel's decoder arguments; FfnBertConfig forbids decoders.
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask, **kwargs)
        if self.final_norm is not None:
            hidden_states = self.final_norm(hidden_states)
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=hidden_states)


# ---------------------------------------------------------------------------------------------------------------
# Pre-trained base and models
# ---------------------------------------------------------------------------------------------------------------
class FfnBertPreTrainedModel(BertPreTrainedModel):
    """BERT's pre-trained base (weight init as BERT: linears normal(0, `initializer_range`), zero biases,
    LayerNorms ones/zeros) with FfnBert's config and layer class."""

    config_class = FfnBertConfig
    config: FfnBertConfig
    _no_split_modules = ["BertEmbeddings", "FfnBertLayer"]
    # The heads' losses are means over the local batch (upstream BERT's `forward`s ignore `num_items_in_batch`).
    # Without this, `Trainer` sees `**kwargs` in `forward`, assumes the loss is normalised by the global item
    # count and multiplies it by the number of processes (DDP/FSDP) and skips the division by
    # gradient_accumulation_steps: gradients, logged losses and clipping would all be off by those factors.
    accepts_loss_kwargs = False
    _can_record_outputs = {"hidden_states": FfnBertLayer, "attentions": BertSelfAttention}

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, nn.PReLU):  # a learnable FFN activation (ffn_type="prelu"): torch's own init value
            init.constant_(module.weight, module.init)

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path, *model_args, warn_not_function_preserving: bool = True, **kwargs
    ):
        """`PreTrainedModel.from_pretrained`, unchanged, plus one check: a folder converted by hf_ffn whose
        `conversion_report.json` says the conversion is not function-preserving (and it was not healed since; or a
        Post-LN → Pre-LN conversion, healed or not) logs a warning once, with the measured difference and the next
        step (`hf_ffn.conversion_warning.warn_if_not_function_preserving`). `warn_not_function_preserving=False` skips
        it (for callers that heal or convert the folder themselves). Where this file runs as remote code without
        hf_ffn installed, there is no check."""
        loaded = super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        if (
            warn_not_function_preserving
            and warn_if_not_function_preserving is not None
            and (pretrained_model_name_or_path is not None)
        ):
            warn_if_not_function_preserving(pretrained_model_name_or_path)
        return loaded

    def save_pretrained(self, save_directory, *args, **kwargs):
        # `auto_map` names every Auto class (`AUTO_MAP`), so a folder saved from any head loads with `AutoModel`,
        # `AutoModelForMaskedLM`, ... and trust_remote_code; transformers' `custom_object_save` adds only the
        # saving class's own entry to what the config already has.
        self.config.auto_map = {**AUTO_MAP, **(getattr(self.config, "auto_map", None) or {})}
        return super().save_pretrained(save_directory, *args, **kwargs)


class FfnBertModel(FfnBertPreTrainedModel, BertModel):
    """The bare FfnBert encoder: upstream `BertModel` (its `forward`, embeddings and pooler) over an
    `FfnBertEncoder`. Without the embedding LayerNorm (`embedding_layer_norm=False`) the embeddings'
    `LayerNorm` is an identity.

    Inputs and outputs are `BertModel`'s: `last_hidden_state` (batch, seq, hidden_size), `pooler_output` (batch,
    hidden_size), `hidden_states` (num_hidden_layers + 1), `attentions` (num_hidden_layers × (batch, heads, seq, seq)).
    Packed (`hf_ffn.unpadding`, docs/unpadded.md; real tokens within fp32 rounding of the padded path, pads zero):
    padded and padding-free batches with `config.unpad_tokens=True`. A padding-free batch (`DataCollatorWithFlattening`:
    `position_ids` restarting at 0 within a row) with the switch off, or with `output_attentions`, runs upstream's
    padded path with transformers' block-diagonal mask (`block_diagonal_forward`), which upstream `BertModel` itself
    builds from `position_ids` from transformers 5.25 on (without an `attention_mask`): each sequence attends to
    itself only, on every release, bit for bit with upstream from 5.25. Either way a padding-free batch gives
    `pooler_output` (num_sequences, hidden_size), one per sequence (upstream: one per row, the row's first sequence);
    position ids that restart but do not describe separable sequences raise `ValueError`. Otherwise it is upstream
    `BertModel.forward`, bit for bit.
    """

    def __init__(self, config: FfnBertConfig, add_pooling_layer: bool = True):
        FfnBertPreTrainedModel.__init__(self, config)
        config.check_model_fields()  # also catches fields changed by assignment after the config was built
        self.config = config
        self.gradient_checkpointing = False
        self.embeddings = BertEmbeddings(config)
        if not config.embedding_layer_norm:
            self.embeddings.LayerNorm = nn.Identity()
        self.encoder = FfnBertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
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
        """`BertModel.forward` (the same arguments and outputs), packed where the class docstring says."""
        inputs = (input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        output_attentions = kwargs.get("output_attentions", self.config.output_attentions)
        # which packed kernel applies depends on the dtype the matmuls run in (a flash kernel needs half precision)
        dtype = compute_dtype(self.dtype, self.device) if self.config.unpad_tokens else self.dtype
        packing = TokenPacking.for_batch(self.config, *inputs, output_attentions=output_attentions, dtype=dtype)
        if packing is None:
            return super().forward(*inputs, **kwargs)
        # A padding-free batch with the switch off, or on a device without a packed attention kernel: upstream's
        # padded path and mask (a flash kernel takes no mask, but the packed path gives it the sequence boundaries).
        if packing.padding_free and (output_attentions or packing.kernel is None):
            return block_diagonal_forward(self, super().forward, *inputs, packing=packing, **kwargs)
        return unpadded_model_forward(self, *inputs, packing=packing, **kwargs)


# Heads: upstream BERT heads (their `forward`s and head modules) over `FfnBertModel`. Each `__init__` mirrors
# the upstream one with `FfnBertModel` in place of `BertModel` (the pattern of transformers' modular files).
class FfnBertForPreTraining(FfnBertPreTrainedModel, BertForPreTraining):
    def __init__(self, config: FfnBertConfig):
        FfnBertPreTrainedModel.__init__(self, config)
        self.bert = FfnBertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.post_init()


class FfnBertForMaskedLM(FfnBertPreTrainedModel, SparsePredictionMixin, BertForMaskedLM):
    def __init__(self, config: FfnBertConfig):
        FfnBertPreTrainedModel.__init__(self, config)
        self.bert = FfnBertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.post_init()


class FfnBertForNextSentencePrediction(FfnBertPreTrainedModel, BertForNextSentencePrediction):
    def __init__(self, config: FfnBertConfig):
        FfnBertPreTrainedModel.__init__(self, config)
        self.bert = FfnBertModel(config)
        self.cls = BertOnlyNSPHead(config)
        self.post_init()


def _classifier_dropout(config: FfnBertConfig) -> nn.Dropout:
    # As upstream: `classifier_dropout`, else `hidden_dropout_prob`.
    p = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
    return nn.Dropout(p)


class FfnBertForSequenceClassification(FfnBertPreTrainedModel, BertForSequenceClassification):
    def __init__(self, config: FfnBertConfig):
        FfnBertPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.config = config
        self.bert = FfnBertModel(config)
        self.dropout = _classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


class FfnBertForMultipleChoice(FfnBertPreTrainedModel, BertForMultipleChoice):
    def __init__(self, config: FfnBertConfig):
        FfnBertPreTrainedModel.__init__(self, config)
        self.bert = FfnBertModel(config)
        self.dropout = _classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()


class FfnBertForTokenClassification(FfnBertPreTrainedModel, BertForTokenClassification):
    def __init__(self, config: FfnBertConfig):
        FfnBertPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.bert = FfnBertModel(config, add_pooling_layer=False)
        self.dropout = _classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


class FfnBertForQuestionAnswering(FfnBertPreTrainedModel, BertForQuestionAnswering):
    def __init__(self, config: FfnBertConfig):
        FfnBertPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.bert = FfnBertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


# ---------------------------------------------------------------------------------------------------------------
# The head classes: transformers Auto class ↔ FfnBert class ↔ upstream Bert class
# ---------------------------------------------------------------------------------------------------------------
class HeadClass(NamedTuple):
    """One FfnBert class with the Auto class that loads it and its upstream BERT twin (same head, same weights)."""

    auto_class: str
    ffn_bert: type[FfnBertPreTrainedModel]
    bert: type[BertPreTrainedModel]


# The one table of head classes, in the order the parity table prints them (registration, parity, conversion).
HEAD_CLASSES: tuple[HeadClass, ...] = (
    HeadClass("AutoModel", FfnBertModel, BertModel),
    HeadClass("AutoModelForPreTraining", FfnBertForPreTraining, BertForPreTraining),
    HeadClass("AutoModelForMaskedLM", FfnBertForMaskedLM, BertForMaskedLM),
    HeadClass("AutoModelForNextSentencePrediction", FfnBertForNextSentencePrediction, BertForNextSentencePrediction),
    HeadClass("AutoModelForSequenceClassification", FfnBertForSequenceClassification, BertForSequenceClassification),
    HeadClass("AutoModelForTokenClassification", FfnBertForTokenClassification, BertForTokenClassification),
    HeadClass("AutoModelForQuestionAnswering", FfnBertForQuestionAnswering, BertForQuestionAnswering),
    HeadClass("AutoModelForMultipleChoice", FfnBertForMultipleChoice, BertForMultipleChoice),
)
# `auto_map` naming every Auto class (for configs that should load with any of them through remote code).
AUTO_MAP: dict[str, str] = {"AutoConfig": f"{FfnBertConfig.__module__.rsplit('.', 1)[-1]}.FfnBertConfig"} | {
    head.auto_class: f"{__name__.rsplit('.', 1)[-1]}.{head.ffn_bert.__name__}" for head in HEAD_CLASSES
}


def head_class_for(name: str) -> HeadClass | None:
    """The `HeadClass` whose FfnBert or upstream class is named `name` (e.g. a config's `architectures[0]`)."""
    return next((h for h in HEAD_CLASSES if name in (h.ffn_bert.__name__, h.bert.__name__)), None)


__all__ = [
    "AUTO_MAP",
    "BERT_FFN_NAMES",
    "CHECKPOINT_KEY_MAPPING",
    "HEAD_CLASSES",
    "HeadClass",
    "head_class_for",
    "FfnBertEncoder",
    "FfnBertForMaskedLM",
    "FfnBertForMultipleChoice",
    "FfnBertForNextSentencePrediction",
    "FfnBertForPreTraining",
    "FfnBertForQuestionAnswering",
    "FfnBertForSequenceClassification",
    "FfnBertForTokenClassification",
    "FfnBertGatedMLP",
    "FfnBertLayer",
    "FfnBertMLP",
    "FfnBertModel",
    "FfnBertPreTrainedModel",
    "Swish",
    "build_ffn",
    "get_activation",
]
