"""sentence-transformers models with an FfnBert backbone (another FFN variant and/or Pre-LN).

`sentence_transformers.SentenceTransformer` builds its first module, `Transformer`, with `AutoConfig` /
`AutoModel`, so once `import hf_ffn` has registered `model_type="ffn_bert"` any folder saved by hf_ffn loads as a
backbone: alone (`SentenceTransformer(folder)`, which adds mean pooling) or with the original model's Pooling /
Normalize / Dense modules. `convert_sentence_transformer` turns a sentence-transformers BERT model folder into a
variant folder: the backbone is converted with `hf_ffn.conversion.load_converted` (function-preserving where the
math allows), every other module is kept, and sentence-transformers' own `save` writes the folder.
See docs/sentence_transformers.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from huggingface_hub import snapshot_download

from .configuration_ffn_bert import BERT_MODEL_TYPES
from .conversion import ConversionReport, atomic_output_dir, load_converted
from .modeling_ffn_bert import FfnBertModel

# `type` of the first module in modules.json: the v2-v5 name and the v6 module path.
TRANSFORMER_MODULE_TYPES = (
    "sentence_transformers.models.Transformer",
    "sentence_transformers.base.modules.transformer.Transformer",
)


def bert_backbone_folder(folder: str | os.PathLike) -> Path:
    """The folder of the BERT backbone (its `config.json` and weights) of a local sentence-transformers model.

    Reads `modules.json`: its first module must be a sentence-transformers `Transformer` whose `config.json` has
    `model_type` "bert" or "ffn_bert".

    Raises:
        ValueError: no `modules.json` (not a sentence-transformers folder); a first module that is not a
            `Transformer`; a backbone without `config.json` or whose `model_type` is not BERT-shaped.
    """
    folder = Path(folder)
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        raise ValueError(
            f"{folder} is not a sentence-transformers model folder: it has no modules.json "
            f"(a plain BERT folder converts with hf_ffn.conversion.load_converted)"
        )
    modules = sorted(json.loads(modules_file.read_text(encoding="utf-8")), key=lambda m: m.get("idx", 0))
    first = modules[0] if modules else {}
    if first.get("type") not in TRANSFORMER_MODULE_TYPES:
        raise ValueError(
            f"{modules_file}: the first module has type {first.get('type')!r}; the backbone must be one of "
            f"{', '.join(TRANSFORMER_MODULE_TYPES)}"
        )
    backbone = folder / first.get("path", "")
    config_file = backbone / "config.json"
    if not config_file.is_file():
        raise ValueError(f"the backbone folder {backbone} of {folder} has no config.json")
    model_type = json.loads(config_file.read_text(encoding="utf-8")).get("model_type")
    if model_type not in BERT_MODEL_TYPES:
        raise ValueError(
            f"{folder}: the backbone ({config_file}) has model_type={model_type!r}, which is not BERT-shaped; "
            f"allowed: {', '.join(BERT_MODEL_TYPES)}"
        )
    return backbone


def convert_sentence_transformer(
    source: str | os.PathLike, output_dir: str | os.PathLike, **conversion: Any
) -> ConversionReport:
    """Save a copy of a sentence-transformers BERT model whose backbone is an FfnBert variant.

    The backbone is converted by `hf_ffn.conversion.load_converted(backbone, FfnBertModel, **conversion)`
    (`ffn_type`, `layer_norm_position`, `init`, `width`, ... ; no arguments keeps plain BERT); the other modules
    (Pooling, Normalize, Dense, ...), the tokenizer and the sentence-transformers settings are kept. The folder
    is written by `SentenceTransformer.save` into a temporary folder beside `output_dir` and renamed
    (`hf_ffn.conversion.atomic_output_dir`), so a failure leaves nothing; `SentenceTransformer(output_dir)` loads
    it (after `import hf_ffn`).

    Args:
        source: a local sentence-transformers model folder, or a hub name already in the local cache.
        output_dir: the new folder; must not exist, or be empty.
        **conversion: keyword arguments of `load_converted`.

    Returns:
        The `ConversionReport` of the backbone (which weights were copied, mapped or newly initialised;
        whether the conversion is exact).

    Raises:
        ValueError: `source` is not a sentence-transformers model with a BERT backbone (see
            `bert_backbone_folder`), or `load_converted` rejects the conversion arguments.
        FileExistsError: `output_dir` exists and is not empty.
    """
    from sentence_transformers import SentenceTransformer  # optional dependency (the `sentence-transformers` extra)

    folder = Path(source)
    with atomic_output_dir(output_dir) as tmp:  # raises FileExistsError first, for a non-empty output_dir
        if not folder.is_dir():
            folder = Path(snapshot_download(str(source)))
        backbone = bert_backbone_folder(folder)
        model, report = load_converted(str(backbone), FfnBertModel, **conversion)
        st_model = SentenceTransformer(str(folder), device="cpu")
        st_model[0].model = model  # same forward signature (BertModel.forward), so the module's bookkeeping holds
        st_model.save(str(tmp))
    return report


__all__ = ["TRANSFORMER_MODULE_TYPES", "bert_backbone_folder", "convert_sentence_transformer"]
