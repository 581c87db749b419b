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
import tempfile
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import snapshot_download
from transformers import AutoModel

from .checkpoints import check_checkpoint, looks_local
from .configuration_ffn_bert import BERT_MODEL_TYPES
from .conversion import (
    ConversionReport,
    export_to_bert,
    load_converted,
    load_pruned,
    measure_difference,
    write_converted_folder,
)
from .conversion.pruning import DEFAULT_SCORE
from .conversion_warning import warn_if_not_function_preserving
from .files import atomic_output_dir
from .modeling_ffn_bert import FfnBertModel

# What marks a sentence-transformers model folder (read by `SentenceTransformer`, written by its `save`).
MODULES_FILE = "modules.json"

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
    modules_file = folder / MODULES_FILE
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


def is_sentence_transformer(name_or_path: str | os.PathLike) -> bool:
    """Whether `name_or_path` is a local sentence-transformers model folder (it holds `modules.json`)."""
    return (Path(name_or_path).expanduser() / MODULES_FILE).is_file()


def convert_sentence_transformer(
    source: str | os.PathLike,
    output_dir: str | os.PathLike,
    seed: int = 0,
    base_model: str | None = None,
    license: str | None = None,
    **conversion: Any,
) -> ConversionReport:
    """Save a copy of a sentence-transformers BERT model whose backbone is an FfnBert variant.

    The backbone is converted by `hf_ffn.conversion.load_converted(backbone, FfnBertModel, **conversion)`
    (`ffn_type`, `layer_norm_position`, `init`, `width`, ... ; no arguments keeps plain BERT); the other modules
    (Pooling, Normalize, Dense, ...), the tokenizer and the sentence-transformers settings are kept. The folder
    is written by `SentenceTransformer.save` into a temporary folder beside `output_dir` and renamed
    (`hf_ffn.files.atomic_output_dir`), so a failure leaves nothing; `SentenceTransformer(output_dir)` loads
    it (after `import hf_ffn`, or with `trust_remote_code=True`). A conversion that is not function-preserving logs
    a warning once, as `convert_checkpoint` does. The folder also holds what `hf-ffn convert` writes for a plain
    checkpoint (`hf_ffn.conversion.write_converted_folder`): the `auto_map` of every FfnBert Auto class, the backbone's
    `conversion_report.json` (with the measured difference from the source backbone, `measure_difference`) beside
    its weights, and hf_ffn's model card (README.md, in place of the one sentence-transformers generates).
    `hf-ffn convert` runs this for a source with `modules.json`.

    Args:
        source: a local sentence-transformers model folder, or a hub name already in the local cache.
        output_dir: the new folder; must not exist, or be empty.
        seed: seeds every weight the conversion initialises.
        base_model, license: for the model card (default: the source card's), as in `convert_checkpoint`.
        **conversion: keyword arguments of `load_converted`.

    Returns:
        The `ConversionReport` of the backbone (which weights were copied, mapped or newly initialised;
        whether the conversion is exact).

    Raises:
        FileNotFoundError: `source` looks local and is not a folder with `modules.json` (`check_checkpoint`).
        ValueError: `source` is not a sentence-transformers model with a BERT backbone (see
            `bert_backbone_folder`), or `load_converted` rejects the conversion arguments.
        FileExistsError: `output_dir` exists and is not empty.
    """
    from sentence_transformers import SentenceTransformer  # optional dependency (the `sentence-transformers` extra)

    check_checkpoint(source, marker=MODULES_FILE)
    folder = Path(source).expanduser()
    with atomic_output_dir(output_dir) as tmp:  # raises FileExistsError first, for a non-empty output_dir
        if not looks_local(source):
            folder = Path(snapshot_download(str(source)))
        backbone = bert_backbone_folder(folder)
        torch.manual_seed(seed)
        if conversion.get("init") == "pruned":  # init="pruned" needs calibration blocks (hf_ffn.conversion.pruning)
            if conversion.get("layer_norm_position") is not None:
                raise ValueError("init='pruned' keeps the source's LayerNorm placement; convert to Pre-LN separately")
            calibration = conversion.pop("calibration_ids")
            conversion = {k: v for k, v in conversion.items() if k not in ("init", "layer_norm_position")}
            model, report = load_pruned(
                str(backbone),
                FfnBertModel,
                input_ids=calibration,
                score=conversion.pop("prune_score", DEFAULT_SCORE),
                **conversion,
            )
        else:
            model, report = load_converted(str(backbone), FfnBertModel, **conversion)
        measure_difference(str(backbone), model, report)
        st_model = SentenceTransformer(str(folder), device="cpu")
        st_model[0].model = model  # same forward signature (BertModel.forward), so the module's bookkeeping holds
        st_model.save(str(tmp))  # the backbone (through model.save_pretrained), the tokenizer and every module
        write_converted_folder(
            tmp, model, report, model_dir=bert_backbone_folder(tmp), base_model=base_model, license=license
        )
    warn_if_not_function_preserving(report, folder=output_dir)  # as convert_checkpoint: the difference, the next step
    return report


def export_sentence_transformer_to_bert(source: str | os.PathLike, output_dir: str | os.PathLike) -> Path:
    """The inverse of `convert_sentence_transformer` for a default-config FfnBert backbone: the same
    sentence-transformers model with a plain BERT backbone (`hf_ffn.conversion.export_to_bert`, strict), every
    other module (Pooling, Normalize, Dense, ...) and the settings kept, written by `SentenceTransformer.save`
    atomically. `hf-ffn convert --to_bert` runs this for a source with `modules.json`.

    Raises:
        FileNotFoundError: `source` looks local and is not a folder with `modules.json` (`check_checkpoint`).
        ValueError: not a sentence-transformers model with a BERT-shaped backbone (`bert_backbone_folder`), or a
            backbone that is not plain BERT (`export_to_bert` names each non-default switch).
        FileExistsError: `output_dir` exists and is not empty.
    """
    from sentence_transformers import SentenceTransformer  # optional dependency (the `sentence-transformers` extra)

    check_checkpoint(source, marker=MODULES_FILE)
    folder = Path(source).expanduser()
    with atomic_output_dir(output_dir) as tmp, tempfile.TemporaryDirectory() as scratch:
        if not looks_local(source):
            folder = Path(snapshot_download(str(source)))
        bert_folder = export_to_bert(bert_backbone_folder(folder), Path(scratch) / "bert")
        st_model = SentenceTransformer(str(folder), device="cpu")
        st_model[0].model = AutoModel.from_pretrained(bert_folder)  # upstream BertModel: the same forward
        st_model.save(str(tmp))
    return Path(output_dir)


__all__ = [
    "MODULES_FILE",
    "TRANSFORMER_MODULE_TYPES",
    "bert_backbone_folder",
    "convert_sentence_transformer",
    "export_sentence_transformer_to_bert",
    "is_sentence_transformer",
]
