"""FfnElectra: ELECTRA with FfnBert's switchable FFN and LayerNorm placement, in transformers' own pattern.

Upstream ELECTRA is BERT's encoder ("Copied from transformers.models.bert" on every layer module) behind its own
embeddings (`ElectraEmbeddings`: BERT's, `embedding_size` wide) and, when `embedding_size != hidden_size`, a Linear
`embeddings_project` (embedding_size → hidden_size); it has no pooler, and its heads are its own
(`ElectraDiscriminatorPredictions`, `ElectraClassificationHead` on the first token, `ElectraSequenceSummary`,
`ElectraGeneratorPredictions`). FfnElectra is upstream's embeddings, projection, heads and heads' `forward`s over
`FfnBertEncoder` (FFN type and LayerNorm placement per layer, unpadding). With the defaults every head is upstream's
`ElectraFor*` bit for bit.

    input_ids ─► ElectraEmbeddings (embedding_size) ─► embeddings_project (→ hidden_size; only when the sizes differ)
              ─► FfnBertEncoder (hidden_size) ─► head

`hidden_states[0]` is the projected embeddings (the encoder's input), as upstream records it.

Weight names. On disk every weight ELECTRA has keeps ELECTRA's name (`electra.embeddings.*`,
`electra.embeddings_project`, `electra.encoder.layer.{i}.*`, `discriminator_predictions.*`, `classifier.*`,
`sequence_summary.*`, `generator_predictions.*`, `generator_lm_head`), the FFN's as BERT's (`intermediate.dense`,
`output.dense`, `output.LayerNorm`), renamed in memory by FfnBert's weight-conversion mapping (`checkpoint_names`,
registered for `model_type="ffn_electra"`). So an ELECTRA checkpoint loads with no missing or unexpected keys, and a
default-config FfnElectra folder loads in upstream `ElectraModel` / `ElectraFor*`.

Positions are BERT's (0, 1, ... in every row): padding-free batches (`DataCollatorWithFlattening`, `position_ids`
restarting at 0) and `unpad_tokens=True` run as in `FfnBertModel`.

This file imports from `hf_ffn` only `modeling_ffn_bert`, its config, naming and `unpadding` modules (relatively), so
`save_pretrained` ships them beside a saved model for `trust_remote_code` loading.
"""

# No `from __future__ import annotations`: transformers reads `forward`'s `Unpack[TransformersKwargs]` at run time.
import torch
import transformers
from packaging.version import Version
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions
from transformers.models.electra.modeling_electra import (
    ElectraClassificationHead,
    ElectraDiscriminatorPredictions,
    ElectraEmbeddings,
    ElectraForMaskedLM,
    ElectraForMultipleChoice,
    ElectraForPreTraining,
    ElectraForQuestionAnswering,
    ElectraForSequenceClassification,
    ElectraForTokenClassification,
    ElectraGeneratorPredictions,
    ElectraModel,
    ElectraPreTrainedModel,
    ElectraSequenceSummary,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs

from .checkpoint_names import register_weight_renamings
from .configuration_ffn_electra import FfnElectraConfig
from .modeling_ffn_bert import FfnBertEncoder, FfnBertPreTrainedModel, HeadClass
from .unpadding import TokenPacking, block_diagonal_forward, compute_dtype, unpadded_model_forward

# FfnBert's weight renames (BERT's FFN names on disk ↔ role names in memory), for `model_type="ffn_electra"` too.
register_weight_renamings(FfnElectraConfig.model_type)

# The oldest transformers FfnElectra is proven bit for bit against (tests/test_electra_family.py runs on the pin and
# the newest release, as FfnRoberta's tests do).
MIN_TRANSFORMERS = (5, 25)


class FfnElectraPreTrainedModel(FfnBertPreTrainedModel, ElectraPreTrainedModel):
    """ELECTRA's pre-trained base (`base_model_prefix="electra"`; init as BERT's: linears normal(0,
    `initializer_range`), zero biases, LayerNorms ones/zeros, ELECTRA's embedding buffers) with FfnElectra's config and
    FfnBert's layer class, `from_pretrained` check and remote-code `auto_map`."""

    config_class = FfnElectraConfig
    config: FfnElectraConfig
    base_model_prefix = "electra"
    _no_split_modules = ["ElectraEmbeddings", "FfnBertLayer"]

    def __init__(self, config: FfnElectraConfig, *args, **kwargs):
        """`PreTrainedModel.__init__`, on a transformers release FfnElectra is proven on.

        Raises:
            ValueError: on a release older than `MIN_TRANSFORMERS`.
        """
        if Version(transformers.__version__).release < MIN_TRANSFORMERS:
            raise ValueError(
                f"FfnElectra needs transformers >= {'.'.join(map(str, MIN_TRANSFORMERS))} (installed: "
                f"{transformers.__version__}): its parity with upstream's ELECTRA classes is proven there; "
                f"pip install 'transformers>={'.'.join(map(str, MIN_TRANSFORMERS))}'"
            )
        # Not `super().__init__`: in a model's MRO that is upstream's `ElectraModel.__init__` / `ElectraFor*.__init__`,
        # which would build (and initialise) a whole upstream model before this one replaces its modules.
        PreTrainedModel.__init__(self, config, *args, **kwargs)

    def save_pretrained(self, save_directory, *args, **kwargs):
        # `auto_map` names every FfnElectra Auto class (`AUTO_MAP`), as FfnBert's folders name FfnBert's.
        self.config.auto_map = {**AUTO_MAP, **(getattr(self.config, "auto_map", None) or {})}
        return PreTrainedModel.save_pretrained(self, save_directory, *args, **kwargs)


class FfnElectraModel(FfnElectraPreTrainedModel, ElectraModel):
    """The bare FfnElectra encoder: upstream `ElectraModel` (its `forward`, `ElectraEmbeddings`, `embeddings_project`
    when `embedding_size != hidden_size`; no pooler) over an `FfnBertEncoder`. Without the embedding LayerNorm
    (`embedding_layer_norm=False`) the embeddings' `LayerNorm` is an identity.

    Inputs and outputs are `ElectraModel`'s: `input_ids` (batch, seq) → `last_hidden_state` (batch, seq,
    hidden_size), `hidden_states` (num_hidden_layers + 1, the first the projected embeddings), `attentions`
    (num_hidden_layers × (batch, heads, seq, seq)). Packed execution as `FfnBertModel` (`hf_ffn.unpadding`): with
    `unpad_tokens=True` and a padding mask the real tokens run packed (within fp32 rounding of the padded path, pads
    zero); a padding-free batch (`position_ids` restarting at 0 within a row, no `attention_mask`) runs with each
    sequence attending to itself, bit for bit with upstream (which builds the same mask from `position_ids` from
    transformers 5.25 on).

    Raises:
        ValueError: a bad config field (`FfnElectraConfig.check_model_fields`); position ids that restart but do not
            describe separable sequences (`TokenPacking.from_position_ids`).
    """

    def __init__(self, config: FfnElectraConfig):
        FfnElectraPreTrainedModel.__init__(self, config)
        config.check_model_fields()  # also catches fields changed by assignment after the config was built
        self.embeddings = ElectraEmbeddings(config)
        if not config.embedding_layer_norm:
            self.embeddings.LayerNorm = nn.Identity()
        if config.embedding_size != config.hidden_size:  # as upstream: (batch, seq, embedding) → (.., hidden)
            self.embeddings_project = nn.Linear(config.embedding_size, config.hidden_size)
        self.encoder = FfnBertEncoder(config)
        self.config = config
        self.gradient_checkpointing = False
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """`ElectraModel.forward` (the same arguments and outputs), packed where the class docstring says."""
        inputs = (input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        output_attentions = kwargs.get("output_attentions", self.config.output_attentions)
        dtype = compute_dtype(self.dtype, self.device) if self.config.unpad_tokens else self.dtype
        packing = TokenPacking.for_batch(self.config, *inputs, output_attentions=output_attentions, dtype=dtype)
        if packing is None:
            return super().forward(*inputs, **kwargs)
        if packing.padding_free and (output_attentions or packing.kernel is None):
            return block_diagonal_forward(self, super().forward, *inputs, packing=packing, **kwargs)
        return unpadded_model_forward(self, *inputs, packing=packing, **kwargs)  # applies `embeddings_project`


# Heads: upstream ELECTRA heads (their `forward`s and head modules) over `FfnElectraModel`; each `__init__` mirrors
# upstream's with `FfnElectraModel` in place of `ElectraModel`.
class FfnElectraForPreTraining(FfnElectraPreTrainedModel, ElectraForPreTraining):
    """The discriminator: `ElectraDiscriminatorPredictions` (dense, `hidden_act`, dense to 1) on every token;
    `logits` (batch, seq), one replaced-token score per position."""

    def __init__(self, config: FfnElectraConfig):
        FfnElectraPreTrainedModel.__init__(self, config)
        self.electra = FfnElectraModel(config)
        self.discriminator_predictions = ElectraDiscriminatorPredictions(config)
        self.post_init()


class FfnElectraForMaskedLM(FfnElectraPreTrainedModel, ElectraForMaskedLM):
    """The generator's head: `ElectraGeneratorPredictions` (hidden → embedding_size, GELU, LayerNorm) and
    `generator_lm_head` (tied to the word embeddings); `logits` (batch, seq, vocab_size).

    Raises:
        ValueError: `sparse_prediction=True` (FfnBertForMaskedLM's switch; not implemented for this head).
    """

    def __init__(self, config: FfnElectraConfig):
        FfnElectraPreTrainedModel.__init__(self, config)
        if config.sparse_prediction:  # refuse rather than ignore it
            raise ValueError("sparse_prediction=True is supported by FfnBertForMaskedLM only; allowed here: False")
        self.electra = FfnElectraModel(config)
        self.generator_predictions = ElectraGeneratorPredictions(config)
        self.generator_lm_head = nn.Linear(config.embedding_size, config.vocab_size)
        self.post_init()


class FfnElectraForSequenceClassification(FfnElectraPreTrainedModel, ElectraForSequenceClassification):
    """`ElectraClassificationHead` on the first token (dense, GELU, out_proj); `logits` (batch, num_labels)."""

    def __init__(self, config: FfnElectraConfig):
        FfnElectraPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.config = config
        self.electra = FfnElectraModel(config)
        self.classifier = ElectraClassificationHead(config)
        self.post_init()


class FfnElectraForTokenClassification(FfnElectraPreTrainedModel, ElectraForTokenClassification):
    """Dropout and a Linear per token; `logits` (batch, seq, num_labels)."""

    def __init__(self, config: FfnElectraConfig):
        FfnElectraPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.electra = FfnElectraModel(config)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


class FfnElectraForQuestionAnswering(FfnElectraPreTrainedModel, ElectraForQuestionAnswering):
    """A Linear to start/end scores per token; `start_logits`, `end_logits` (batch, seq)."""

    def __init__(self, config: FfnElectraConfig):
        FfnElectraPreTrainedModel.__init__(self, config)
        self.num_labels = config.num_labels
        self.electra = FfnElectraModel(config)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()


class FfnElectraForMultipleChoice(FfnElectraPreTrainedModel, ElectraForMultipleChoice):
    """`ElectraSequenceSummary` (`summary_*` fields) and a Linear to one score per choice: inputs (batch, choices,
    seq) → `logits` (batch, choices)."""

    def __init__(self, config: FfnElectraConfig):
        FfnElectraPreTrainedModel.__init__(self, config)
        self.electra = FfnElectraModel(config)
        self.sequence_summary = ElectraSequenceSummary(config)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()


# Auto class ↔ FfnElectra class ↔ upstream ELECTRA class (`HeadClass`'s fields: `ffn_bert` the hf_ffn class, `bert`
# the upstream one), in the order of FfnBert's table; every encoder head `ElectraFor*` has (not the decoder,
# `ElectraForCausalLM`).
HEAD_CLASSES: tuple[HeadClass, ...] = (
    HeadClass("AutoModel", FfnElectraModel, ElectraModel),
    HeadClass("AutoModelForPreTraining", FfnElectraForPreTraining, ElectraForPreTraining),
    HeadClass("AutoModelForMaskedLM", FfnElectraForMaskedLM, ElectraForMaskedLM),
    HeadClass(
        "AutoModelForSequenceClassification", FfnElectraForSequenceClassification, ElectraForSequenceClassification
    ),
    HeadClass("AutoModelForTokenClassification", FfnElectraForTokenClassification, ElectraForTokenClassification),
    HeadClass("AutoModelForQuestionAnswering", FfnElectraForQuestionAnswering, ElectraForQuestionAnswering),
    HeadClass("AutoModelForMultipleChoice", FfnElectraForMultipleChoice, ElectraForMultipleChoice),
)
# `auto_map` naming every Auto class, for remote-code loading with any of them.
AUTO_MAP: dict[str, str] = {"AutoConfig": f"{FfnElectraConfig.__module__.rsplit('.', 1)[-1]}.FfnElectraConfig"} | {
    head.auto_class: f"{__name__.rsplit('.', 1)[-1]}.{head.ffn_bert.__name__}" for head in HEAD_CLASSES
}


__all__ = [
    "AUTO_MAP",
    "HEAD_CLASSES",
    "MIN_TRANSFORMERS",
    "FfnElectraForMaskedLM",
    "FfnElectraForMultipleChoice",
    "FfnElectraForPreTraining",
    "FfnElectraForQuestionAnswering",
    "FfnElectraForSequenceClassification",
    "FfnElectraForTokenClassification",
    "FfnElectraModel",
    "FfnElectraPreTrainedModel",
]
