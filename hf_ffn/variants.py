"""Named variants of a pretrained BERT checkpoint (`VARIANTS`; `BASELINE` is BERT itself), each with its conversion
(`Variant.convert`) and the best healing recipe measured (docs/healing.md).

    >>> from hf_ffn.variants import get_variant
    >>> get_variant("swiglu-approx").convert("path/to/bert", "out/swiglu-approx/converted")  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .checkpoints import load_tokenizer
from .conversion import ConversionReport, convert_checkpoint
from .conversion.pruning import calibration_ids
from .conversion_warning import single_name

# The layer-wise stage alone (`--max_steps 0`: no end-to-end stage after it), the last hidden state as target.
_LAYERWISE = {"method": "layerwise", "layers": "last", "layerwise_tokens": 65536, "max_steps": 0}


@dataclass(frozen=True)
class Variant:
    """One named variant of a pretrained BERT checkpoint.

    Attributes:
        name: the key in `VARIANTS` (e.g. "swiglu-approx").
        description: one sentence for tables and `--help`.
        ffn_type, layer_norm_position: the config switches (None: the checkpoint's own).
        init, width: `convert_checkpoint`'s keywords ("pruned" needs calibration text).
        exact: whether the conversion of a GELU BERT computes the source's function bit for bit.
        heal: the best measured healing recipe, as `hf-ffn heal` argument → value; None where nothing needs healing.
        prune_score: the unit importance score of `init="pruned"` (`hf_ffn.conversion.IMPORTANCE_SCORES`).
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

    def conversion_options(self) -> dict[str, Any]:
        """`convert_checkpoint`'s keywords for this variant (without calibration text)."""
        options = {name: getattr(self, name) for name in ("ffn_type", "layer_norm_position", "init", "width")}
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
    ) -> ConversionReport:
        """Convert `checkpoint` into this variant at `output_dir` (`convert_checkpoint`, to which `kwargs` go).
        `init="pruned"` scores units on `calibration_tokens` (default: the recipe's `layerwise_tokens`) of
        `calibration_files`, in blocks of `calibration_block` tokens. Returns the `ConversionReport`.

        Raises:
            ValueError: `init="pruned"` without `calibration_files`; a keyword that overrides a switch of the
                variant; anything `convert_checkpoint` raises.
        """
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
            tokens = calibration_tokens or (self.heal or {}).get("layerwise_tokens", 65536)
            kwargs["calibration_ids"] = calibration_ids(
                list(calibration_files),
                load_tokenizer(checkpoint),
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
        ),
        Variant(
            "swiglu-approx",
            "SwiGLU FFN at the same width, converted approximately (GELU(z) ≈ z·σ(1.702 z)), then healed layer-wise.",
            ffn_type="swiglu",
            exact=False,
            # docs/healing.md: one closed-form down projection per layer (Adam steps only made it worse).
            heal={**_LAYERWISE, "layerwise_steps": 0},
        ),
        Variant(
            "swiglu-matched",
            "SwiGLU FFN pruned to the baseline's parameter count (2/3 of its units, rounded up to a multiple of "
            "256), its down projection refitted, then healed layer-wise.",
            ffn_type="swiglu",
            init="pruned",
            width="matched",
            exact=False,
            prune_score="magnitude",
            # docs/healing.md: FFN fits with 1000 Adam steps per layer measured best.
            heal={**_LAYERWISE, "layerwise_steps": 1000},
        ),
        Variant(
            "pre-ln",
            "Post-LN → Pre-LN with the weights kept (one final LayerNorm added), then healed layer-wise.",
            layer_norm_position="pre",
            exact=False,
            # docs/healing.md, "Pre-LN with a free residual stream": the best Pre-LN probe measured.
            heal={
                **_LAYERWISE,
                "layerwise_steps": 1000,
                "layerwise_parts": "layer",
                "layerwise_inputs": "student",
                "layerwise_stream": "free",
            },
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


def variant_of_report(report: Mapping[str, Any]) -> Variant | None:
    """The `VARIANTS` entry a conversion report (as a dict) describes (same `ffn_type`, `layer_norm_position`,
    `init`), else None."""
    changes = report.get("config_changes") or {}
    target = (
        single_name(changes.get("ffn_type", [None, None])[1]),
        single_name(changes.get("layer_norm_position", [None, None])[1]),
        report.get("init"),
    )
    for variant in VARIANTS.values():
        if variant.name != BASELINE and (variant.ffn_type, variant.layer_norm_position, variant.init) == target:
            return variant
    return None


__all__ = [
    "BASELINE",
    "VARIANTS",
    "Variant",
    "get_variant",
    "variant_of_report",
]
