"""hf_ffn: BERT with switchable feed-forward networks (standard, GLU family) and LayerNorm placement.

Importing the package registers `FfnBertConfig` (`model_type="ffn_bert"`) and the FfnBert models with the Auto
classes (`AutoConfig`, `AutoModel`, `AutoModelForMaskedLM`, ...; the table is `modeling_ffn_bert.HEAD_CLASSES`)
and BERT's tokenizer with `AutoTokenizer`; likewise `FfnRobertaConfig` (`model_type="ffn_roberta"`: RoBERTa,
XLM-RoBERTa, CamemBERT and RoBERTa-PreLayerNorm checkpoints), its models (`modeling_ffn_roberta.HEAD_CLASSES`) and
RoBERTa's tokenizer, and `FfnElectraConfig` (`model_type="ffn_electra"`: ELECTRA checkpoints), its models
(`modeling_ffn_electra.HEAD_CLASSES`) and ELECTRA's tokenizer. transformers' own `bert`, `roberta` and `electra`
registrations are left untouched. Inside the
`hf-ffn` console command (argv[0] `hf-ffn`) this waits for a subcommand (`register_auto_classes`), so that
`hf-ffn --help` answers without importing torch and transformers.

`VARIANTS` (`hf_ffn.variants`) names the variants of a pretrained BERT (`gelu-post`, `geglu`, `swiglu-approx`,
`swiglu-matched`, `pre-ln`): their switches, conversion and best measured healing recipe. It converts through the
conversion stack and the training data readers, so `hf_ffn.VARIANTS`, `BASELINE`, `Variant` and `get_variant` are
imported on first use (`import hf_ffn` stays the config and the models).
"""

import sys
from importlib.metadata import version
from pathlib import Path

__version__ = version("hf_ffn")  # pyproject.toml's, as installed


def register_auto_classes() -> None:
    """Register `FfnBertConfig`, the FfnBert models and BERT's tokenizer with the Auto classes, and make
    `save_pretrained` write `auto_map` (idempotent). `import hf_ffn` calls it, except inside the `hf-ffn` command,
    whose `--help` must not wait for torch and transformers: there `hf_ffn.cli.main` calls it before a subcommand
    runs."""
    import transformers
    from transformers import AutoConfig, AutoTokenizer, BertTokenizer, ElectraTokenizer, RobertaTokenizer

    from .configuration_ffn_bert import FfnBertConfig
    from .configuration_ffn_electra import FfnElectraConfig
    from .configuration_ffn_roberta import FfnRobertaConfig
    from .modeling_ffn_bert import HEAD_CLASSES
    from .modeling_ffn_electra import HEAD_CLASSES as ELECTRA_HEAD_CLASSES
    from .modeling_ffn_roberta import HEAD_CLASSES as ROBERTA_HEAD_CLASSES

    families = (  # each config with its heads and the tokenizer upstream maps its family to
        (FfnBertConfig, HEAD_CLASSES, BertTokenizer),
        (FfnRobertaConfig, ROBERTA_HEAD_CLASSES, RobertaTokenizer),
        (FfnElectraConfig, ELECTRA_HEAD_CLASSES, ElectraTokenizer),
    )
    for config, heads, tokenizer in families:
        # exist_ok: importing twice (or alongside remote code that registered the same names) must not fail.
        AutoConfig.register(config.model_type, config, exist_ok=True)
        for head in heads:
            getattr(transformers, head.auto_class).register(config, head.ffn_bert, exist_ok=True)
        AutoTokenizer.register(config, tokenizer_class=tokenizer, exist_ok=True)
        # trust_remote_code: `save_pretrained` then copies the configuration and modeling files (with the files they
        # import relatively: activations.py, checkpoint_names.py, unpadding.py, grouped_attention.py,
        # sparse_prediction.py) next to the weights and writes `auto_map`, so the folder loads where hf_ffn is not
        # installed: `AutoModel.from_pretrained(folder, trust_remote_code=True)`. `AUTO_MAP` names every Auto class,
        # for folders that should load with any of them.
        config.register_for_auto_class()
        for head in heads:
            head.ffn_bert.register_for_auto_class(head.auto_class)


def __getattr__(name: str):
    """The package's names, imported on first use where the imports below were deferred (the `hf-ffn` command), and
    always for the named variants (`hf_ffn.variants` imports the conversion stack and the training data readers).
    Any other name is not looked up (`from . import commands` asks here first, and must import nothing heavy)."""
    import importlib

    if name in __all__ or name in ("AUTO_MAP", "HEAD_CLASSES"):
        modules = ("configuration_ffn_bert", "modeling_ffn_bert", "conversion_warning", "variants")
        families = ("configuration_ffn_roberta", "modeling_ffn_roberta", "configuration_ffn_electra")
        for module in modules + families + ("modeling_ffn_electra",):
            value = getattr(importlib.import_module(f".{module}", __name__), name, None)
            if value is not None:
                return value
    raise AttributeError(f"module 'hf_ffn' has no attribute {name!r}")


if Path(sys.argv[0] if sys.argv else "").name not in ("hf-ffn", "hf-ffn.exe"):  # not the console command
    from .configuration_ffn_bert import (
        FFN_TYPES,
        GATED_FFN_ACTIVATIONS,
        FfnBertConfig,
        is_gated,
        parameter_matched_glu_width,
    )
    from .configuration_ffn_electra import FfnElectraConfig
    from .configuration_ffn_roberta import FfnRobertaConfig
    from .conversion_warning import warn_if_not_function_preserving
    from .modeling_ffn_bert import (
        AUTO_MAP,  # noqa: F401  (public: hf_ffn.AUTO_MAP, as before)
        HEAD_CLASSES,  # noqa: F401  (public: hf_ffn.HEAD_CLASSES, as before)
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
    from .modeling_ffn_electra import (
        FfnElectraForMaskedLM,
        FfnElectraForMultipleChoice,
        FfnElectraForPreTraining,
        FfnElectraForQuestionAnswering,
        FfnElectraForSequenceClassification,
        FfnElectraForTokenClassification,
        FfnElectraModel,
        FfnElectraPreTrainedModel,
    )
    from .modeling_ffn_roberta import (
        FfnRobertaForMaskedLM,
        FfnRobertaForMultipleChoice,
        FfnRobertaForQuestionAnswering,
        FfnRobertaForSequenceClassification,
        FfnRobertaForTokenClassification,
        FfnRobertaModel,
        FfnRobertaPreTrainedModel,
    )

    register_auto_classes()

__all__ = [
    "BASELINE",
    "VARIANTS",
    "Variant",
    "get_variant",
    "warn_if_not_function_preserving",
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
    "FfnElectraConfig",
    "FfnElectraForMaskedLM",
    "FfnElectraForMultipleChoice",
    "FfnElectraForPreTraining",
    "FfnElectraForQuestionAnswering",
    "FfnElectraForSequenceClassification",
    "FfnElectraForTokenClassification",
    "FfnElectraModel",
    "FfnElectraPreTrainedModel",
    "FfnRobertaConfig",
    "FfnRobertaForMaskedLM",
    "FfnRobertaForMultipleChoice",
    "FfnRobertaForQuestionAnswering",
    "FfnRobertaForSequenceClassification",
    "FfnRobertaForTokenClassification",
    "FfnRobertaModel",
    "FfnRobertaPreTrainedModel",
    "is_gated",
    "parameter_matched_glu_width",
    "register_auto_classes",
]
