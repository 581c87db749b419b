"""Converting checkpoints into and out of FfnBert: the function-preserving recipes (`recipes`), `load_converted`
(`loader`), `load_pruned` (`pruning`), MegatronBERT (`megatron`), the Llama / ModernBERT FFN key maps
(`state_dicts`), the report (`report`), its measured difference (`measure`), the model card (`card`) and the folders
(`folders`: `convert_checkpoint`, `export_to_bert`). Every public name of the parts is importable from here.
"""

from ..checkpoint_names import (
    BERT_NAME_OF,
    FFN_TO_LLAMA_MLP,
    FFN_TO_MODERNBERT_MLP,
    LLAMA_MLP_TO_FFN,
    MEGATRON_KEY_MAPPING,
    MEGATRON_NAME_OF,
    MODERNBERT_MLP_TO_FFN,
    KeyMap,
    bert_key,
    reverse_key_maps,
)
from .card import build_model_card
from .folders import (
    REPORT_FILE,
    atomic_output_dir,
    convert_checkpoint,
    export_to_bert,
    ffn_class_for,
    parse_cli_options,
    source_tokenizer,
    write_converted_folder,
)
from .loader import load_converted
from .measure import (
    COMPARED_OUTPUTS,
    SENTENCE_PAIRS,
    example_batch,
    head_inputs,
    measure_difference,
    output_difference,
    padded_batch,
    tensor_difference,
)
from .megatron import load_megatron_bert, megatron_config_to_ffn_bert
from .pruning import IMPORTANCE_SCORES, load_pruned, prune_model, solve_down
from .recipes import (
    EXACT_GATED_TARGET,
    INITS,
    SIGMOID_FORM_IS_EXACT,
    SIGMOID_SLOPE,
    WIDTHS,
    FfnRecipe,
    allowed_preserving_targets,
    ffn_recipe,
    parse_width,
)
from .report import ConversionReport
from .state_dicts import convert_state_dict

__all__ = [
    "BERT_NAME_OF",
    "COMPARED_OUTPUTS",
    "EXACT_GATED_TARGET",
    "FFN_TO_LLAMA_MLP",
    "FFN_TO_MODERNBERT_MLP",
    "IMPORTANCE_SCORES",
    "INITS",
    "LLAMA_MLP_TO_FFN",
    "MEGATRON_KEY_MAPPING",
    "MEGATRON_NAME_OF",
    "MODERNBERT_MLP_TO_FFN",
    "REPORT_FILE",
    "SENTENCE_PAIRS",
    "SIGMOID_FORM_IS_EXACT",
    "SIGMOID_SLOPE",
    "WIDTHS",
    "allowed_preserving_targets",
    "atomic_output_dir",
    "bert_key",
    "build_model_card",
    "ConversionReport",
    "convert_checkpoint",
    "convert_state_dict",
    "example_batch",
    "export_to_bert",
    "ffn_class_for",
    "ffn_recipe",
    "FfnRecipe",
    "head_inputs",
    "KeyMap",
    "load_converted",
    "load_megatron_bert",
    "load_pruned",
    "measure_difference",
    "megatron_config_to_ffn_bert",
    "output_difference",
    "padded_batch",
    "parse_cli_options",
    "parse_width",
    "prune_model",
    "reverse_key_maps",
    "solve_down",
    "source_tokenizer",
    "tensor_difference",
    "write_converted_folder",
]
