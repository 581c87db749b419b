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
from . import card, folders, loader, measure, megatron, pruning, recipes, report, state_dicts
from .card import *  # noqa: F403
from .folders import *  # noqa: F403
from .loader import *  # noqa: F403
from .measure import *  # noqa: F403
from .megatron import *  # noqa: F403
from .pruning import *  # noqa: F403
from .recipes import *  # noqa: F403
from .report import *  # noqa: F403
from .state_dicts import *  # noqa: F403

__all__ = [
    "BERT_NAME_OF",
    "FFN_TO_LLAMA_MLP",
    "FFN_TO_MODERNBERT_MLP",
    "LLAMA_MLP_TO_FFN",
    "MEGATRON_KEY_MAPPING",
    "MEGATRON_NAME_OF",
    "MODERNBERT_MLP_TO_FFN",
    "KeyMap",
    "bert_key",
    "reverse_key_maps",
    *card.__all__,
    *folders.__all__,
    *loader.__all__,
    *measure.__all__,
    *megatron.__all__,
    *pruning.__all__,
    *recipes.__all__,
    *report.__all__,
    *state_dicts.__all__,
]
