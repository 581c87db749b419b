"""The one text for a conversion that does not compute its source's function (`not_function_preserving_message`),
logged once when such a folder is converted, loaded or fine-tuned (`warn_if_not_function_preserving`) and put on its
model card. It reads only the conversion report and imports nothing of hf_ffn's above `checkpoints`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from transformers.utils import logging

from .checkpoints import read_conversion_report

logger = logging.get_logger(__name__)

HEALING_GUIDE = "docs/healing.md"
COLLAPSE_STUDY = "studies/finetune_collapse/README.md"  # fine-tuning a (healed) Pre-LN conversion collapses


def single_name(value: Any) -> Any:
    """A config value as one name: a per-layer list with one value → that value; mixed lists stay lists."""
    if isinstance(value, (list, tuple)) and len(set(value)) == 1:
        return value[0]
    return value


def _moves_to_pre_ln(report: Mapping[str, Any]) -> bool:
    before, after = (report.get("config_changes") or {}).get("layer_norm_position", [None, None])
    return after is not None and "pre" in ([after] if isinstance(after, str) else after) and before != after


def _difference(report: Mapping[str, Any]) -> str:
    """The measured difference from the source as one phrase: the last hidden state's, else the first output's."""
    measured = {
        name: d
        for name, d in (report.get("difference") or {}).items()
        if isinstance(d, Mapping) and "max_abs_diff" in d
    }
    if not measured:
        return "its output difference from the source was not measured"
    name = "last_hidden_state" if "last_hidden_state" in measured else next(iter(measured))
    d = measured[name]
    label = "last hidden state" if name == "last_hidden_state" else f"output {name}"
    return (
        f"measured on a fixed batch, its {label} differs from the source's by up to "
        f"{d['max_abs_diff']:.3g} (mean {d['mean_abs_diff']:.3g})"
    )


def _what_changed(report: Mapping[str, Any]) -> str:
    changes = report.get("config_changes") or {}
    parts = [
        f"{name} {single_name(a)!r} → {single_name(b)!r}"
        for name, (a, b) in changes.items()
        if name in ("ffn_type", "layer_norm_position", "intermediate_size")
    ]
    return f"init={report.get('init')}" + (f", {', '.join(parts)}" if parts else "")


def not_function_preserving_message(
    report: Mapping[str, Any], folder: str | os.PathLike | None = None, subject: str | None = None
) -> str | None:
    """The warning for a conversion that does not compute its source's function, or None: not exact and not healed
    → the measured difference and the next step (`hf-ffn heal`); Post-LN → Pre-LN, healed or not → also that it may
    not fine-tune like the source (`COLLAPSE_STUDY`). `report`: a `ConversionReport` as a dict; `folder`: named in
    the next step; `subject`: what the text calls the model (default: `folder`, else "this conversion").
    """
    healed, pre_ln = "healing" in report, _moves_to_pre_ln(report)
    if not pre_ln and (healed or report.get("exact", True)):
        return None
    where = f"{subject or folder or 'this conversion'} ({_what_changed(report)})"
    if healed:
        text = (
            f"{where} is a healed Post-LN → Pre-LN conversion of {report.get('source')}, which is not "
            f"function-preserving."
        )
    else:
        student = folder or "CONVERTED_FOLDER"
        text = (
            f"{where} is not function-preserving: it was converted from {report.get('source')} and "
            f"{_difference(report)}. Next step: heal it, `hf-ffn heal --student {student} --train_files TEXT "
            f"--output_dir OUTPUT` (distillation from the source on plain text; the healed model is written to "
            f"OUTPUT/healed; {HEALING_GUIDE})."
        )
    if pre_ln:
        text += (
            f" Post-LN → Pre-LN of a pretrained checkpoint: in the project's studies, fine-tuning it collapsed on "
            f"three of the four tasks tried, healed or not ({COLLAPSE_STUDY}). Healing does not make it fine-tune "
            f"like the source; read {HEALING_GUIDE} before relying on it."
        )
    return text


def warn_if_not_function_preserving(
    source: str | os.PathLike | Mapping[str, Any] | Any, folder: str | os.PathLike | None = None
) -> str | None:
    """Log `not_function_preserving_message` once (`logger.warning_once`) and return it (None: nothing to say).

    `source`: a converted folder (one without a report never warns), a `ConversionReport`, or its dict. `folder`:
    the folder to name in the next step (default: `source` when it is a folder).
    """
    if isinstance(source, (str, os.PathLike)):
        report = read_conversion_report(source) if os.path.isdir(source) else None
        folder = folder if folder is not None else source
    elif isinstance(source, Mapping):
        report = source
    elif hasattr(source, "to_dict"):  # a ConversionReport
        report = source.to_dict()
    else:
        raise TypeError(f"source must be a folder, a ConversionReport or its dict, got {type(source).__name__}")
    if report is None or "config_changes" not in report:
        return None
    message = not_function_preserving_message(report, folder)
    if message is not None:
        logger.warning_once(message)
    return message
