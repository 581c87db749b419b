"""Converting checkpoints into and out of FfnBert, as data plus one loader per direction.

- `recipes`: the function-preserving recipes as a lookup table (`ffn_recipe`, `PRESERVING_METHODS`).
- `loader`: `load_converted`, a pretrained BERT → an FfnBert variant (another FFN, Pre-LN, another width), either
  function-preserving (exact where the math allows, a documented approximation where it does not) or with the
  converted FFNs freshly initialised, cut into plan / load / apply / report steps.
- `report`: `ConversionReport` (JSON-serialisable: which weights were copied, mapped or newly initialised, the
  config changes, and the measured output difference).
- `measure`: `measure_difference`, the converted model against upstream BERT on a fixed example batch
  (`example_batch`), with the one output-difference helper (`tensor_difference`, `output_difference`) that the
  parity job (`hf_ffn.parity`, a test-time concern) builds on too.
- `megatron`: `load_megatron_bert` (MegatronBERT = Pre-LN, through `from_pretrained(key_mapping=...)`).
- `state_dicts`: `convert_state_dict`, applying the Llama / ModernBERT FFN key maps (data, in
  `hf_ffn.checkpoint_names`) with transformers' `Chunk`/`Concatenate`.
- `pruning`: `init="pruned"` (`load_pruned`): a narrower GLU keeping the most important units of the
  full-width conversion by a measured score on calibration text, its down projection refitted in closed form.
- `card`: `build_model_card`, a converted folder's model card (README.md).
- `folders`: `write_converted_folder` (the one writer of a converted folder), `convert_checkpoint` (what
  `hf-ffn convert` and scripts/convert_checkpoint.py run) and `export_to_bert`, written atomically
  (`atomic_output_dir`).

Every public name of the parts (and the key maps and `bert_key` of `hf_ffn.checkpoint_names`) is importable
from `hf_ffn.conversion`.
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
