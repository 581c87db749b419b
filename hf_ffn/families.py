"""Which hf_ffn classes a checkpoint loads into, by its config.json's `model_type`: BERT's (`FfnBert*`), the RoBERTa
family's (`FfnRoberta*`) or ELECTRA's (`FfnElectra*`), and which upstream classes it reproduces (the parity job's
reference)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from .configuration_ffn_bert import BERT_MODEL_TYPES, FfnBertConfig
from .configuration_ffn_electra import ELECTRA_MODEL_TYPES, FfnElectraConfig
from .configuration_ffn_roberta import ROBERTA_MODEL_TYPES, FfnRobertaConfig
from .modeling_ffn_bert import HEAD_CLASSES, HeadClass
from .modeling_ffn_electra import HEAD_CLASSES as ELECTRA_HEAD_CLASSES
from .modeling_ffn_roberta import HEAD_CLASSES as ROBERTA_HEAD_CLASSES
from .modeling_ffn_roberta import saved_model_type

SUPPORTED_MODEL_TYPES = BERT_MODEL_TYPES + ROBERTA_MODEL_TYPES + ELECTRA_MODEL_TYPES
# Every family's head table: an hf_ffn class of any family names its Auto class here (`Family.same_head`).
ALL_HEAD_CLASSES: tuple[HeadClass, ...] = HEAD_CLASSES + ROBERTA_HEAD_CLASSES + ELECTRA_HEAD_CLASSES


# How the documentation writes each upstream family's name (a model card's "a RoBERTa checkpoint").
FAMILY_NAMES = {
    "bert": "BERT",
    "roberta": "RoBERTa",
    "xlm-roberta": "XLM-RoBERTa",
    "camembert": "CamemBERT",
    "roberta-prelayernorm": "RoBERTa-PreLayerNorm",
    "electra": "ELECTRA",
}


@dataclass(frozen=True)
class Family:
    """A family of checkpoints: hf_ffn's config class and head table, and the `model_type` whose upstream classes it
    reproduces (`upstream_class`: e.g. `XLMRobertaForMaskedLM` for "xlm-roberta")."""

    config_class: type[FfnBertConfig]
    heads: tuple[HeadClass, ...]
    upstream_type: str

    def upstream_class(self, head: HeadClass) -> type:
        """Upstream's class for `head`: its Auto class's entry for the family's upstream config class."""
        return getattr(transformers, head.auto_class)._model_mapping[CONFIG_MAPPING[self.upstream_type]]

    @property
    def name(self) -> str:
        """The family's name as written in prose: "BERT", "RoBERTa", "XLM-RoBERTa", "ELECTRA", ..."""
        return FAMILY_NAMES.get(self.upstream_type, self.upstream_type)

    @property
    def has_pooler(self) -> bool:
        """Whether the family's base model has a pooler (built unless `add_pooling_layer=False`): BERT's and RoBERTa's
        do, ELECTRA's has none (and no such argument)."""
        return "add_pooling_layer" in inspect.signature(self.heads[0].ffn_bert.__init__).parameters

    def ffn_class(self, auto_class: str) -> type:
        """hf_ffn's class of this family for `auto_class` (e.g. "AutoModelForSequenceClassification").

        Raises:
            ValueError: a head the family does not have (e.g. BERT's next-sentence head for RoBERTa or ELECTRA).
        """
        for head in self.heads:
            if head.auto_class == auto_class:
                return head.ffn_bert
        raise ValueError(f"the {self.upstream_type} family has no {auto_class} head in hf_ffn")

    def head_for(self, architecture: str) -> HeadClass | None:
        """The head whose hf_ffn or upstream class is named `architecture` (a config's `architectures[0]`)."""
        for head in self.heads:
            if architecture in (head.ffn_bert.__name__, head.bert.__name__, self.upstream_class(head).__name__):
                return head
        return None

    def same_head(self, model_class: type) -> type:
        """This family's hf_ffn class with the Auto class of `model_class` (an hf_ffn class of any family).

        Raises:
            ValueError: `model_class`'s head is one this family lacks.
        """
        auto_class = next(h.auto_class for h in ALL_HEAD_CLASSES if h.ffn_bert is model_class)
        return self.ffn_class(auto_class)


def checkpoint_family(checkpoint: str, argument: str = "checkpoint") -> Family:
    """The `Family` of `checkpoint`, by its config.json's `model_type` (an hf_ffn folder is of the upstream family it
    reproduces: ffn_bert of BERT, ffn_roberta of RoBERTa, ffn_electra of ELECTRA; a folder without config.json is
    taken for BERT, whose loading then says what is missing).

    Raises:
        ValueError: a `model_type` of no supported family, naming `argument`, it and the supported ones.
    """
    model_type = saved_model_type(checkpoint) or "bert"
    family = model_type_family(model_type)
    if family is None:
        raise ValueError(
            f"{argument} {checkpoint} has model_type={model_type!r}; hf_ffn loads checkpoints of the families "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    return family


def model_type_family(model_type: str) -> Family | None:
    """The `Family` of a config's `model_type` (an upstream one or hf_ffn's own: "ffn_electra" is ELECTRA's); None
    for a `model_type` of no supported family."""
    if model_type in BERT_MODEL_TYPES:
        return Family(FfnBertConfig, HEAD_CLASSES, "bert")
    if model_type in ROBERTA_MODEL_TYPES:
        upstream = "roberta" if model_type == FfnRobertaConfig.model_type else model_type
        return Family(FfnRobertaConfig, ROBERTA_HEAD_CLASSES, upstream)
    if model_type in ELECTRA_MODEL_TYPES:
        return Family(FfnElectraConfig, ELECTRA_HEAD_CLASSES, "electra")
    return None


__all__ = [
    "ALL_HEAD_CLASSES",
    "FAMILY_NAMES",
    "SUPPORTED_MODEL_TYPES",
    "Family",
    "checkpoint_family",
    "model_type_family",
]
