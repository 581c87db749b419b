"""Named variants of a pretrained BERT checkpoint: the one list (`VARIANTS`), and the one text that says when a
variant is not function-preserving (`not_function_preserving_message`, `warn_if_not_function_preserving`).

A `Variant` names what changes (`ffn_type`, `layer_norm_position`), how the converted weights start (`init`,
`width`: `hf_ffn.conversion.convert_checkpoint`'s keywords), whether that conversion computes the source's function
(`exact`, for a GELU BERT) and, where it does not, the best healing recipe measured (`heal`: `hf-ffn heal` arguments,
i.e. `HealArguments`, `LayerwiseArguments` and `TrainingArguments` fields). `VARIANTS["gelu-post"]` is BERT itself
(`BASELINE`). Every `heal` recipe and `measured` line comes from docs/healing.md (the layer-wise study on
all-MiniLM-L6-v2: "Before → after" and the free-stream Pre-LN section) and studies/four_tasks/README.md (the
fine-tuning table).

    >>> from hf_ffn.variants import get_variant
    >>> get_variant("swiglu-approx").convert("path/to/bert", "out/swiglu-approx/converted")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers.utils import logging

from .checkpoints import REPORT_FILE

logger = logging.get_logger(__name__)

HEALING_GUIDE = "docs/healing.md"
TASKS_STUDY = "studies/four_tasks/README.md"  # the four-task fine-tuning study that measured it
# The layer-wise stage alone (`--max_steps 0`: no end-to-end stage after it), the last hidden state as target.
_LAYERWISE = {"method": "layerwise", "layers": "last", "layerwise_tokens": 65536, "max_steps": 0}


@dataclass(frozen=True)
class Variant:
    """One named variant of a pretrained BERT checkpoint.

    Attributes:
        name: the key in `VARIANTS` (e.g. "swiglu-approx").
        description: one sentence for tables and `--help`.
        ffn_type, layer_norm_position: the config switches (None: the checkpoint's own).
        init: how the converted FFNs start: "preserving" (the function-preserving recipe of
            `hf_ffn.conversion.recipes`), "fresh" or "pruned" (`hf_ffn.conversion.pruning`, needs calibration text).
        width: the FFN width: "keep", "matched" (the source FFN's parameter count) or a number of units.
        exact: whether the conversion of a GELU BERT computes the source's function bit for bit (the conversion
            report's `exact` is the truth for a given checkpoint).
        heal: the best measured healing recipe, as `hf-ffn heal` argument → value; None where nothing needs healing.
        prune_score: the unit importance score of `init="pruned"` (`hf_ffn.conversion.IMPORTANCE_SCORES`).
        measured: what was measured for this variant on all-MiniLM-L6-v2, converted → healed → fine-tuned, with
            the guide it comes from (the warnings and model cards quote it).
    """

    name: str
    description: str
    ffn_type: str | None = None
    layer_norm_position: str | None = None
    init: str = "preserving"
    width: str | int = "keep"
    exact: bool = True
    heal: Mapping[str, Any] | None = field(default=None, hash=False)
    prune_score: str | None = None
    measured: str = ""

    def conversion_options(self) -> dict[str, Any]:
        """`convert_checkpoint`'s keywords for this variant (without calibration text)."""
        options: dict[str, Any] = {
            "ffn_type": self.ffn_type,
            "layer_norm_position": self.layer_norm_position,
            "init": self.init,
            "width": self.width,
        }
        if self.prune_score is not None:
            options["prune_score"] = self.prune_score
        return options

    def convert(
        self,
        checkpoint: str,
        output_dir: str | os.PathLike,
        *,
        calibration_files: list[str] | None = None,
        calibration_tokens: int | None = None,
        calibration_block: int = 128,
        **kwargs: Any,
    ):
        """Convert `checkpoint` into this variant at `output_dir` (`hf_ffn.conversion.convert_checkpoint` with the
        variant's switches; a converted folder with `conversion_report.json` and a model card).

        `calibration_files` (text files or folders): the text `init="pruned"` scores units on, `calibration_tokens`
        of it (default: the healing recipe's `layerwise_tokens`, 65,536) in blocks of `calibration_block` tokens.
        `kwargs` go to `convert_checkpoint` (`model_class`, `seed`, `base_model`, `license`, ...) and may not
        override the variant's switches.

        Returns:
            the `ConversionReport` (its `difference`: the measured output difference from `checkpoint`).

        Raises:
            ValueError: `init="pruned"` without `calibration_files`; a keyword that overrides a switch of the
                variant; anything `convert_checkpoint` raises.
        """
        from .conversion import convert_checkpoint  # the conversion stack imports this module (warnings, cards)

        options = self.conversion_options()
        clash = sorted(set(kwargs) & set(options))
        if clash:
            raise ValueError(
                f"variant {self.name!r} sets {', '.join(clash)} itself; use another variant or "
                f"hf_ffn.conversion.convert_checkpoint directly"
            )
        if self.init == "pruned":
            if not calibration_files:
                raise ValueError(
                    f"variant {self.name!r} (init='pruned') needs calibration_files: plain text to "
                    f"score the FFN units on"
                )
            from transformers import AutoTokenizer

            from .training.data import calibration_ids

            tokens = calibration_tokens or (self.heal or {}).get("layerwise_tokens", 65536)
            kwargs["calibration_ids"] = calibration_ids(
                list(calibration_files),
                AutoTokenizer.from_pretrained(checkpoint),
                calibration_block,
                tokens,
                argument="calibration_files",
            )
        return convert_checkpoint(checkpoint, output_dir, **options, **kwargs)


BASELINE = "gelu-post"
VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant(
            "gelu-post",
            "BERT as published: GELU FFN, Post-LN (no change; the baseline).",
        ),
        Variant(
            "geglu",
            "GeGLU FFN at the same width, converted exactly (up_proj ← weights 0, bias 1).",
            ffn_type="geglu",
            measured=f"fine-tuned: inside the noise on CoLA, STS-B, MRPC and rt_polarity ({TASKS_STUDY})",
        ),
        Variant(
            "swiglu-approx",
            "SwiGLU FFN at the same width, converted approximately (GELU(z) ≈ z·σ(1.702 z)), then healed layer-wise.",
            ffn_type="swiglu",
            exact=False,
            # docs/healing.md, "Before → after" and the experiments table: one closed-form down projection per
            # layer (Adam steps only made it worse), 65,536 calibration tokens.
            heal={**_LAYERWISE, "layerwise_steps": 0},
            measured=f"converted: embedding cosine 0.99691 to the source, linear probe −0.05 points; healed "
            f"layer-wise: cosine 0.99967, probe +0.00 points ({HEALING_GUIDE}); fine-tuned after healing: "
            f"inside the noise on CoLA, STS-B, MRPC and rt_polarity ({TASKS_STUDY})",
        ),
        Variant(
            "swiglu-matched",
            "SwiGLU FFN pruned to the baseline's parameter count (1,024 of 1,536 units for "
            "MiniLM), its down projection refitted, then healed layer-wise.",
            ffn_type="swiglu",
            init="pruned",
            width="matched",
            exact=False,
            prune_score="magnitude",
            # docs/healing.md: FFN fits with 1000 Adam steps per layer measured best (0.91763, probe −1.20); whole
            # layers on the student's inputs were no better.
            heal={**_LAYERWISE, "layerwise_steps": 1000},
            measured=f"pruned: embedding cosine 0.90111 to the source, linear probe −1.45 points; healed "
            f"layer-wise: cosine 0.91763, probe −1.20 points ({HEALING_GUIDE}); fine-tuned after healing: "
            f"CoLA −4.70 points [−6.37, −3.04], the other tasks inside the noise ({TASKS_STUDY})",
        ),
        Variant(
            "pre-ln",
            "Post-LN → Pre-LN with the weights kept (one final LayerNorm added), then healed layer-wise.",
            layer_norm_position="pre",
            exact=False,
            # docs/healing.md, "Pre-LN with a free residual stream": whole layers on the student's own inputs, the
            # stream fitted in normalised form; the best Pre-LN probe measured (−0.82 points), the student of the
            # fine-tuning table in studies/four_tasks/README.md.
            heal={
                **_LAYERWISE,
                "layerwise_steps": 1000,
                "layerwise_parts": "layer",
                "layerwise_inputs": "student",
                "layerwise_stream": "free",
            },
            measured=f"converted: embedding cosine 0.083 to the source, linear probe −5.05 points; healed "
            f"layer-wise (free stream): cosine 0.876, probe −0.82 points ({HEALING_GUIDE}); but fine-tuning "
            f"the healed model collapses on STS-B, CoLA and MRPC (STS-B 20.99 and 41.28 against the "
            f"baseline's 80.79 and 81.61; CoLA 23.54, then 0.00), the unhealed conversion too; only "
            f"rt_polarity is learnt ({TASKS_STUDY})",
        ),
    )
}


def get_variant(name: str) -> Variant:
    """The `Variant` called `name`.

    Raises:
        ValueError: naming the value and the allowed names.
    """
    try:
        return VARIANTS[name]
    except (KeyError, TypeError):
        raise ValueError(f"variant has unknown value {name!r}; allowed: {', '.join(VARIANTS)}") from None


# ---------------------------------------------------------------------------------------------------------------
# Honest defaults: the one text for a conversion that is not function-preserving.
def _single(value: Any) -> Any:
    """A config value as one name: a per-layer list with one value → that value; mixed lists stay lists."""
    if isinstance(value, (list, tuple)) and len(set(value)) == 1:
        return value[0]
    return value


def variant_of_report(report: Mapping[str, Any]) -> Variant | None:
    """The `VARIANTS` entry a conversion report describes (same `ffn_type`, `layer_norm_position` and `init`),
    else None (e.g. a per-layer mix, or another target)."""
    changes = report.get("config_changes") or {}
    target = (
        _single(changes.get("ffn_type", [None, None])[1]),
        _single(changes.get("layer_norm_position", [None, None])[1]),
        report.get("init"),
    )
    for variant in VARIANTS.values():
        if variant.name != BASELINE and (variant.ffn_type, variant.layer_norm_position, variant.init) == target:
            return variant
    return None


def _moves_to_pre_ln(report: Mapping[str, Any]) -> bool:
    before, after = (report.get("config_changes") or {}).get("layer_norm_position", [None, None])
    return after is not None and "pre" in ([after] if isinstance(after, str) else after) and before != after


def _difference(report: Mapping[str, Any]) -> str:
    """The measured difference from the source, as one phrase: the last hidden state's, else the first output
    compared (a checkpoint with heads, e.g. `BertForPreTraining`, is compared on its heads' outputs)."""
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
        f"{name} {_single(a)!r} → {_single(b)!r}"
        for name, (a, b) in changes.items()
        if name in ("ffn_type", "layer_norm_position", "intermediate_size")
    ]
    return f"init={report.get('init')}" + (f", {', '.join(parts)}" if parts else "")


def not_function_preserving_message(
    report: Mapping[str, Any], folder: str | os.PathLike | None = None, subject: str | None = None
) -> str | None:
    """The warning for a conversion that does not compute its source's function, or None where there is nothing
    to warn about.

    `report`: a `ConversionReport` as a dict (`conversion_report.json`); a healed folder's has a `healing` entry.
    `folder`: where the converted model is (named in the next step; default `CONVERTED_FOLDER`); `subject`: what
    the text calls the model (default: `folder`, else "this conversion"). Cases: an exact conversion → None; not exact
    and not healed → the measured difference and the next step (`hf-ffn heal`); Post-LN → Pre-LN, healed or not →
    also what was measured after healing (fine-tuning collapses, `VARIANTS["pre-ln"].measured`); other healed
    conversions → None.
    """
    healed, pre_ln = "healing" in report, _moves_to_pre_ln(report)
    if (report.get("exact", True) and not pre_ln) or (healed and not pre_ln):
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
        variant = variant_of_report(report)
        if variant is not None and variant.measured and not pre_ln:
            text += f" Measured for the {variant.name} variant of all-MiniLM-L6-v2: {variant.measured}."
    if pre_ln:
        text += (
            f" Post-LN → Pre-LN of a pretrained checkpoint, measured on all-MiniLM-L6-v2: "
            f"{VARIANTS['pre-ln'].measured}. Healing does not make it fine-tune like the source; read "
            f"{HEALING_GUIDE} before relying on it."
        )
    return text


def read_conversion_report(folder: str | os.PathLike) -> dict[str, Any] | None:
    """A local folder's `conversion_report.json` as a dict; None if it has none (or it is unreadable)."""
    path = Path(folder) / REPORT_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def warn_if_not_function_preserving(
    source: str | os.PathLike | Mapping[str, Any] | Any, folder: str | os.PathLike | None = None
) -> str | None:
    """Log `not_function_preserving_message` once (transformers' `logger.warning_once`) for a conversion that does
    not compute its source's function; returns the message, or None when there is nothing to warn about.

    `source`: a converted folder (its `conversion_report.json`; a folder without one, e.g. a model trained as it
    is, never warns), a `ConversionReport`, or its dict (what `hf_ffn.training.load_model` returns for a variant).
    `folder`: the converted folder to name in the next step (default: `source` when it is a folder).

    Called by `FfnBertPreTrainedModel.from_pretrained` (loading), `hf_ffn.conversion.convert_checkpoint`
    (converting) and the fine-tuning entry points.
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


__all__ = [
    "BASELINE",
    "HEALING_GUIDE",
    "TASKS_STUDY",
    "VARIANTS",
    "Variant",
    "get_variant",
    "not_function_preserving_message",
    "read_conversion_report",
    "variant_of_report",
    "warn_if_not_function_preserving",
]
