"""sentence-transformers models with an hf_ffn backbone (docs/sentence_transformers.md): a BERT, RoBERTa-family or
ELECTRA one converted into a variant (`convert_sentence_transformer`), a BERT one back
(`export_sentence_transformer_to_bert`), every module but the backbone kept."""

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
from .families import SUPPORTED_MODEL_TYPES
from .files import atomic_output_dir
from .modeling_ffn_bert import FfnBertModel

MODULES_FILE = "modules.json"  # what marks a sentence-transformers model folder
# `type` of the first module in modules.json: the v2-v5 name and the v6 module path.
TRANSFORMER_MODULE_TYPES = (
    "sentence_transformers.models.Transformer",
    "sentence_transformers.base.modules.transformer.Transformer",
)


def backbone_folder(folder: str | os.PathLike) -> Path:
    """The folder of the backbone (the first module of `modules.json`) of a local sentence-transformers model, of a
    family hf_ffn loads (BERT, RoBERTa, ELECTRA: `hf_ffn.families.SUPPORTED_MODEL_TYPES`).

    Raises:
        ValueError: no `modules.json` (not a sentence-transformers folder); a first module that is not a
            `Transformer`; a backbone without `config.json` or whose `model_type` is of no family hf_ffn loads.
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
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"{folder}: the backbone ({config_file}) has model_type={model_type!r}, of no family hf_ffn loads; "
            f"allowed: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    return backbone


def is_sentence_transformer(name_or_path: str | os.PathLike) -> bool:
    """Whether `name_or_path` is a local sentence-transformers model folder (it holds `modules.json`)."""
    return (Path(name_or_path).expanduser() / MODULES_FILE).is_file()


def _model_folder(source: str | os.PathLike) -> Path:
    """The local folder of sentence-transformers model `source`: itself, or a hub name's copy in the local cache."""
    return Path(source).expanduser() if looks_local(source) else Path(snapshot_download(str(source)))


def convert_sentence_transformer(
    source: str | os.PathLike,
    output_dir: str | os.PathLike,
    seed: int = 0,
    base_model: str | None = None,
    license: str | None = None,
    **conversion: Any,
) -> ConversionReport:
    """Write to `output_dir` (atomically) a copy of the sentence-transformers model `source` (a folder, or a hub name
    in the local cache) whose backbone is converted by `load_converted(backbone, FfnBertModel, **conversion)` (the
    backbone's family picks FfnBert, FfnRoberta or FfnElectra; `load_pruned` for `init="pruned"`), every other module
    kept, plus what `hf-ffn convert` writes (`write_converted_folder`; `seed`, `base_model`, `license` as in
    `convert_checkpoint`). Returns the backbone's `ConversionReport`; a conversion that is not function-preserving
    logs a warning.

    Raises:
        FileNotFoundError: `source` looks local and is not a folder with `modules.json` (`check_checkpoint`).
        ValueError: `source` is not a sentence-transformers model with a backbone of a family hf_ffn loads (see
            `backbone_folder`), or `load_converted` rejects the conversion arguments.
        FileExistsError: `output_dir` exists and is not empty.
    """
    from sentence_transformers import SentenceTransformer  # optional dependency (the `sentence-transformers` extra)

    check_checkpoint(source, marker=MODULES_FILE)
    with atomic_output_dir(output_dir) as tmp:  # raises FileExistsError first, for a non-empty output_dir
        folder = _model_folder(source)
        backbone = backbone_folder(folder)
        torch.manual_seed(seed)
        if conversion.get("init") == "pruned":  # init="pruned" needs calibration blocks (hf_ffn.conversion.pruning)
            if conversion.get("layer_norm_position") is not None:
                raise ValueError("init='pruned' keeps the source's LayerNorm placement; convert to Pre-LN separately")
            calibration = conversion.pop("calibration_ids")
            conversion = {k: v for k, v in conversion.items() if k not in ("init", "layer_norm_position")}
            score = conversion.pop("prune_score", DEFAULT_SCORE)
            model, report = load_pruned(str(backbone), FfnBertModel, input_ids=calibration, score=score, **conversion)
        else:
            model, report = load_converted(str(backbone), FfnBertModel, **conversion)
        measure_difference(str(backbone), model, report)
        st_model = SentenceTransformer(str(folder), device="cpu")
        st_model[0].model = model  # same forward as Bert/Roberta/ElectraModel's: the module's bookkeeping holds
        st_model.save(str(tmp))  # the backbone (through model.save_pretrained), the tokenizer and every module
        write_converted_folder(
            tmp, model, report, model_dir=backbone_folder(tmp), base_model=base_model, license=license
        )
    warn_if_not_function_preserving(report, folder=output_dir)  # as convert_checkpoint: the difference, the next step
    return report


def export_sentence_transformer_to_bert(source: str | os.PathLike, output_dir: str | os.PathLike) -> Path:
    """The inverse of `convert_sentence_transformer` for a default-config FfnBert backbone: the same model with a
    plain BERT backbone (`export_to_bert`), every other module kept, written atomically.

    Raises:
        FileNotFoundError: `source` looks local and is not a folder with `modules.json` (`check_checkpoint`).
        ValueError: not a sentence-transformers model with a BERT-shaped backbone (`backbone_folder`), or a
            backbone that is not plain BERT (`export_to_bert` names each non-default switch).
        FileExistsError: `output_dir` exists and is not empty.
    """
    from sentence_transformers import SentenceTransformer  # optional dependency (the `sentence-transformers` extra)

    check_checkpoint(source, marker=MODULES_FILE)
    with atomic_output_dir(output_dir) as tmp, tempfile.TemporaryDirectory() as scratch:
        folder = _model_folder(source)
        bert_folder = export_to_bert(backbone_folder(folder), Path(scratch) / "bert")
        st_model = SentenceTransformer(str(folder), device="cpu")
        st_model[0].model = AutoModel.from_pretrained(bert_folder)  # upstream BertModel: the same forward
        st_model.save(str(tmp))
    return Path(output_dir)
