"""hf_ffn: BERT with switchable feed-forward networks (standard, GLU family) and LayerNorm placement.

Importing the package registers `FfnBertConfig` (`model_type="ffn_bert"`) and the FfnBert models with the Auto
classes (`AutoConfig`, `AutoModel`, `AutoModelForMaskedLM`, ...) and BERT's tokenizer with `AutoTokenizer`.
transformers' own `bert` registration is left untouched.
"""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForNextSentencePrediction,
    AutoModelForPreTraining,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    BertTokenizer,
)

from .configuration_ffn_bert import (
    FFN_TYPES,
    GATED_FFN_ACTIVATIONS,
    FfnBertConfig,
    is_gated,
    parameter_matched_glu_width,
)
from .modeling_ffn_bert import (
    FfnBertForMaskedLM,
    FfnBertForMultipleChoice,
    FfnBertForNextSentencePrediction,
    FfnBertForPreTraining,
    FfnBertForQuestionAnswering,
    FfnBertForSequenceClassification,
    FfnBertForTokenClassification,
    FfnBertGatedMLP,
    FfnBertLayer,
    FfnBertMLP,
    FfnBertModel,
    FfnBertPreTrainedModel,
)

__version__ = "0.1.0"

_AUTO_CLASSES = {
    AutoModel: FfnBertModel,
    AutoModelForPreTraining: FfnBertForPreTraining,
    AutoModelForMaskedLM: FfnBertForMaskedLM,
    AutoModelForNextSentencePrediction: FfnBertForNextSentencePrediction,
    AutoModelForSequenceClassification: FfnBertForSequenceClassification,
    AutoModelForTokenClassification: FfnBertForTokenClassification,
    AutoModelForQuestionAnswering: FfnBertForQuestionAnswering,
    AutoModelForMultipleChoice: FfnBertForMultipleChoice,
}

# exist_ok: importing twice (or alongside remote code that registered the same names) must not fail.
AutoConfig.register(FfnBertConfig.model_type, FfnBertConfig, exist_ok=True)
for _auto_class, _model_class in _AUTO_CLASSES.items():
    _auto_class.register(FfnBertConfig, _model_class, exist_ok=True)
AutoTokenizer.register(FfnBertConfig, tokenizer_class=BertTokenizer, exist_ok=True)

# trust_remote_code: `save_pretrained` then copies configuration_ffn_bert.py and modeling_ffn_bert.py (which imports
# only the former, relatively) next to the weights and writes `auto_map`, so the folder loads where hf_ffn is not
# installed: `AutoModel.from_pretrained(folder, trust_remote_code=True)`.
FfnBertConfig.register_for_auto_class()
for _auto_class, _model_class in _AUTO_CLASSES.items():
    _model_class.register_for_auto_class(_auto_class.__name__)
# Every Auto class → class, for configs that should load with any of them (see `conversion.full_auto_map`).
AUTO_MAP = {"AutoConfig": "configuration_ffn_bert.FfnBertConfig"} | {
    auto.__name__: f"modeling_ffn_bert.{model.__name__}" for auto, model in _AUTO_CLASSES.items()
}

__all__ = [
    "FFN_TYPES",
    "GATED_FFN_ACTIVATIONS",
    "FfnBertConfig",
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
    "is_gated",
    "parameter_matched_glu_width",
]
