"""hf_ffn: BERT with switchable feed-forward networks (standard, GLU family) and LayerNorm placement.

Importing the package registers `FfnBertConfig` (`model_type="ffn_bert"`) and the FfnBert models with the Auto
classes (`AutoConfig`, `AutoModel`, `AutoModelForMaskedLM`, ...; the table is `modeling_ffn_bert.HEAD_CLASSES`)
and BERT's tokenizer with `AutoTokenizer`. transformers' own `bert` registration is left untouched.

`VARIANTS` (`hf_ffn.variants`) names the variants of a pretrained BERT (`gelu-post`, `geglu`, `swiglu-approx`,
`swiglu-matched`, `pre-ln`): their switches, conversion and best measured healing recipe.
"""

from importlib.metadata import version

import transformers
from transformers import AutoConfig, AutoTokenizer, BertTokenizer

from .configuration_ffn_bert import (
    FFN_TYPES,
    GATED_FFN_ACTIVATIONS,
    FfnBertConfig,
    is_gated,
    parameter_matched_glu_width,
)
from .modeling_ffn_bert import (
    AUTO_MAP,
    HEAD_CLASSES,
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
from .variants import BASELINE, VARIANTS, Variant, get_variant, warn_if_not_function_preserving

__version__ = version("hf_ffn")  # pyproject.toml's, as installed

# exist_ok: importing twice (or alongside remote code that registered the same names) must not fail.
AutoConfig.register(FfnBertConfig.model_type, FfnBertConfig, exist_ok=True)
for _head in HEAD_CLASSES:
    getattr(transformers, _head.auto_class).register(FfnBertConfig, _head.ffn_bert, exist_ok=True)
AutoTokenizer.register(FfnBertConfig, tokenizer_class=BertTokenizer, exist_ok=True)

# trust_remote_code: `save_pretrained` then copies configuration_ffn_bert.py and modeling_ffn_bert.py (with the
# files they import relatively: checkpoint_names.py, unpadding.py, grouped_attention.py, sparse_prediction.py)
# next to the weights and writes `auto_map`, so the folder loads where hf_ffn is not installed:
# `AutoModel.from_pretrained(folder, trust_remote_code=True)`. `AUTO_MAP` names every Auto class, for folders that should load with any of them.
FfnBertConfig.register_for_auto_class()
for _head in HEAD_CLASSES:
    _head.ffn_bert.register_for_auto_class(_head.auto_class)

__all__ = [
    "BASELINE",
    "FFN_TYPES",
    "GATED_FFN_ACTIVATIONS",
    "VARIANTS",
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
    "Variant",
    "get_variant",
    "is_gated",
    "parameter_matched_glu_width",
    "warn_if_not_function_preserving",
]
