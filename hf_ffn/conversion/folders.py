"""Writing folders, each atomically: `write_converted_folder` (the one writer of a converted folder),
`convert_checkpoint` (what `hf-ffn convert` runs) and `export_to_bert`."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from transformers import BertConfig, PretrainedConfig, PreTrainedTokenizerBase

from ..checkpoints import REPORT_FILE, check_checkpoint, load_pretrained, load_tokenizer
from ..configuration_ffn_bert import FfnBertConfig
from ..conversion_warning import warn_if_not_function_preserving
from ..families import checkpoint_family, model_type_family
from ..files import atomic_output_dir
from ..logging_utils import quiet_transformers
from ..modeling_ffn_bert import FfnBertPreTrainedModel, head_class_for
from .card import build_model_card
from .loader import load_converted
from .measure import measure_difference
from .pruning import DEFAULT_SCORE, load_pruned
from .recipes import parse_width
from .report import ConversionReport

logger = logging.getLogger(__name__)

# FfnBert's own config fields (and remote-code bookkeeping) that a plain BERT config does not carry.
FFN_ONLY_FIELDS = (
    "ffn_type",
    "layer_norm_position",
    "embedding_layer_norm",
    "ffn_bias",
    "leaky_relu_negative_slope",
    "elu_alpha",
    "swish_beta",
    "auto_map",
    "model_type",
    "architectures",
)


def source_tokenizer(checkpoint: str) -> PreTrainedTokenizerBase | None:
    """The checkpoint's tokenizer (`load_tokenizer`), or None and a warning if it has none."""
    try:
        return load_tokenizer(checkpoint)
    except (OSError, ValueError, TypeError) as error:
        logger.warning("%s; the converted folder will hold no tokenizer", error)
        return None


def write_converted_folder(
    folder: str | os.PathLike,
    model: FfnBertPreTrainedModel,
    report: ConversionReport,
    *,
    tokenizer: PreTrainedTokenizerBase | None = None,
    model_dir: str | os.PathLike | None = None,
    report_extra: Mapping[str, Any] | None = None,
    card_section: str = "",
    **card_options: Any,
) -> None:
    """Write a converted folder into the empty `folder`: the model (`save_pretrained`: config with `auto_map`,
    weights, remote code), the tokenizer, `REPORT_FILE` (`report` and `report_extra`) and README.md
    (`build_model_card(model, report, **card_options)` and `card_section`). `model_dir`: model and tokenizer are
    already saved there (a sentence-transformers backbone): only the report (beside them) and the card are written.
    """
    folder = Path(folder)
    if model_dir is None:
        model.save_pretrained(folder)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
    report_file = Path(model_dir or folder) / REPORT_FILE
    report_file.write_text(
        json.dumps({**report.to_dict(), **(report_extra or {})}, indent=2, default=str) + "\n", encoding="utf-8"
    )
    card = build_model_card(model, report, healed="healing" in (report_extra or {}), **card_options)
    card.text += card_section
    card.save(folder / "README.md")


def ffn_class_for(checkpoint: str | PretrainedConfig) -> type[FfnBertPreTrainedModel]:
    """The hf_ffn twin of the checkpoint's (or config's) `architectures[0]` in its family (`hf_ffn.families`: FfnBert's,
    FfnRoberta's for a RoBERTa-family checkpoint, FfnElectra's for an ELECTRA one); the family's base model for none
    or another. A config of no supported family is taken for BERT's."""
    if isinstance(checkpoint, PretrainedConfig):
        architectures = checkpoint.architectures or []
        family = model_type_family(checkpoint.model_type) or model_type_family("bert")
    else:
        architectures = PretrainedConfig.get_config_dict(checkpoint)[0].get("architectures") or []
        family = checkpoint_family(checkpoint)
    head = family.head_for(architectures[0]) if architectures else None
    return (head or family.heads[0]).ffn_bert


def convert_checkpoint(
    checkpoint: str,
    output_dir: str | os.PathLike,
    *,
    ffn_type: str | list[str] | None = None,
    layer_norm_position: str | list[str] | None = None,
    init: str = "preserving",
    width: str | int = "keep",
    model_class: type[FfnBertPreTrainedModel] | None = None,
    seed: int = 0,
    base_model: str | None = None,
    license: str | None = None,
    calibration_ids: torch.Tensor | None = None,
    prune_score: str = DEFAULT_SCORE,
) -> ConversionReport:
    """Convert a BERT checkpoint into an FfnBert folder (`write_converted_folder`, with the difference from the
    source measured by `measure_difference`); a conversion that is not function-preserving logs a warning once.

    `model_class` defaults to `ffn_class_for(checkpoint)`; `seed` seeds every weight initialised. `init="pruned"`
    (`load_pruned`) needs `calibration_ids` (blocks, seq) and takes `prune_score`.

    Raises:
        FileExistsError: `output_dir` exists and is not empty.
        FileNotFoundError: `checkpoint` looks local and is not a checkpoint folder (`check_checkpoint`).
        ValueError: as `load_converted`.
    """
    check_checkpoint(checkpoint)
    with atomic_output_dir(output_dir) as tmp:
        model_class = model_class or ffn_class_for(checkpoint)
        torch.manual_seed(seed)
        if init == "pruned":
            if calibration_ids is None:
                raise ValueError("init='pruned' needs calibration text (--calibration_files PATH)")
            if layer_norm_position is not None:
                raise ValueError("init='pruned' keeps the source's LayerNorm placement; convert to Pre-LN separately")
            model, report = load_pruned(
                checkpoint, model_class, input_ids=calibration_ids, ffn_type=ffn_type, width=width, score=prune_score
            )
        else:
            model, report = load_converted(
                checkpoint,
                model_class,
                ffn_type=ffn_type,
                layer_norm_position=layer_norm_position,
                init=init,
                width=width,
            )
        measure_difference(checkpoint, model, report)
        write_converted_folder(
            tmp, model, report, tokenizer=source_tokenizer(checkpoint), base_model=base_model, license=license
        )
    warn_if_not_function_preserving(report, folder=output_dir)  # once: the difference and the next step (heal)
    return report


def parse_cli_options(args: Any) -> dict[str, Any]:
    """`convert_checkpoint` keywords from `hf-ffn convert` arguments (comma lists become per-layer lists).

    Raises:
        ValueError: a bad `--width`."""

    def names(value: str | None) -> str | list[str] | None:
        return None if value is None else (value.split(",") if "," in value else value)

    return {
        "ffn_type": names(args.ffn_type),
        "layer_norm_position": names(args.layer_norm_position),
        "init": args.init,
        "width": parse_width(args.width, "--width"),
        "seed": args.seed,
        "base_model": args.base_model,
        "license": args.license,
    }


def export_to_bert(source: str | os.PathLike, output_dir: str | os.PathLike) -> Path:
    """Write a default-config FfnBert folder as a plain BERT folder (`model_type` "bert"), loaded strictly by
    upstream and saved with a `BertConfig`, with its tokenizer.

    Raises:
        ValueError: if the config is not plain BERT (naming each non-default switch) or not FfnBert / BERT.
        FileNotFoundError: `source` looks local and is not a checkpoint folder (`check_checkpoint`).
        FileExistsError: `output_dir` exists and is not empty.
    """
    check_checkpoint(source)
    config = FfnBertConfig.from_pretrained(source)
    reasons = config.non_default_fields()
    if reasons:
        raise ValueError(
            f"{source} cannot be exported to plain BERT: upstream BertModel has only the standard Post-LN FFN with "
            f"biases and an embedding LayerNorm, and this model differs: {'; '.join(reasons)}"
        )
    upstream = head_class_for(ffn_class_for(str(source)).__name__).bert
    bert_config = BertConfig.from_dict({k: v for k, v in config.to_dict().items() if k not in FFN_ONLY_FIELDS})
    bert_config.architectures = [upstream.__name__]
    with atomic_output_dir(output_dir) as tmp:
        with quiet_transformers():
            model, info = load_pretrained(upstream, source, config=bert_config)
        problems = {
            k: sorted(map(str, v))
            for k, v in info.items()
            if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v
        }
        if problems:
            raise ValueError(f"{source}: weights do not load strictly into {upstream.__name__}: {problems}")
        model.save_pretrained(tmp)
        tokenizer = source_tokenizer(str(source))
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
    return Path(output_dir)


__all__ = [
    "FFN_ONLY_FIELDS",
    "REPORT_FILE",
    "atomic_output_dir",
    "convert_checkpoint",
    "export_to_bert",
    "ffn_class_for",
    "parse_cli_options",
    "source_tokenizer",
    "write_converted_folder",
]
