"""The model card of a converted folder: `build_model_card` fills `hf_ffn/model_cards/gated.md` (any GLU-family
layer) or `standard.md`, then `_body.md`, with `huggingface_hub.ModelCard.from_template`; the card names the model's
family (BERT, RoBERTa, XLM-RoBERTa, ELECTRA...: `hf_ffn.model_cards.card_family`) and its upstream class."""

from __future__ import annotations

import itertools
import os
from collections import Counter
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard, ModelCardData

from ..configuration_ffn_bert import FfnBertConfig, is_gated
from ..conversion_warning import not_function_preserving_message
from ..families import ALL_HEAD_CLASSES
from ..model_cards import TEMPLATES, card_family, family_lines
from .report import ConversionReport

CONFIG_FIELDS = (
    "ffn_type",
    "hidden_act",
    "layer_norm_position",
    "embedding_layer_norm",
    "ffn_bias",
    "intermediate_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "vocab_size",
    "swish_beta",
)


def template_family(config: FfnBertConfig) -> str:
    """ "gated" if any layer's FFN is GLU-family, else "standard"."""
    return "gated" if any(is_gated(t) for t in config.ffn_types) else "standard"


def source_card_data(checkpoint: str) -> dict[str, Any]:
    """The source folder's model card front matter (license, base model...), {} if it has none."""
    readme = Path(checkpoint) / "README.md"
    if not readme.is_file():
        return {}
    return ModelCard.load(readme).data.to_dict()


def _layer_rows(report: ConversionReport) -> list[dict[str, str]]:
    """Consecutive layers with the same conversion collapsed into one row ("0-5")."""
    rows = []
    for (source, target, recipe, note), group in itertools.groupby(
        report.layers, key=lambda layer: (layer["source_ffn"], layer["target_ffn"], layer["recipe"], layer["note"])
    ):
        layers = [layer["layer"] for layer in group]
        span = f"{layers[0]}" if len(layers) == 1 else f"{layers[0]}-{layers[-1]}"
        rows.append({"layers": span, "source_ffn": source, "target_ffn": target, "recipe": recipe, "note": note or "-"})
    return rows


def build_model_card(
    model,
    report: ConversionReport,
    *,
    base_model: str | None = None,
    license: str | None = None,
    model_name: str | None = None,
    healed: bool = False,
) -> ModelCard:
    """A `ModelCard` for a converted model. `base_model` defaults to the source when it is a hub name, else the
    source card's; `license` to the source card's, else "unknown". A conversion that is not function-preserving
    gets `not_function_preserving_message` (`healed`: the folder was healed since)."""
    config: FfnBertConfig = model.config
    source_data = source_card_data(report.source)
    if base_model is None and not os.path.exists(report.source):
        base_model = report.source
    base_model = base_model or source_data.get("base_model")
    template = template_family(config)
    family = card_family(model, report.source)
    lines = family_lines(model, family)
    ffn_names = sorted(set(config.ffn_types))
    lns = sorted(set(config.layer_norm_positions))
    card_data = ModelCardData(
        library_name="transformers",
        base_model=base_model,
        license=license or source_data.get("license") or "unknown",  # tags: BERT's "ffn_bert", "bert"
        tags=["hf_ffn", config.model_type, family.upstream_type, *ffn_names, *(f"{p}-ln" for p in lns)],
    )
    name = model_name or f"{(base_model or Path(report.source).name).split('/')[-1]}-{'-'.join(ffn_names)}"
    difference = report.difference or {}
    diff_rows = [(k, v) for k, v in difference.items() if isinstance(v, dict) and "max_abs_diff" in v]
    new_prefixes = Counter(k.rsplit(".", 1)[0].split(".")[-1] for k in report.new)
    template = (TEMPLATES / f"{template}.md").read_text(encoding="utf-8") + (TEMPLATES / "_body.md").read_text(
        encoding="utf-8"
    )
    return ModelCard.from_template(
        card_data,
        template_str=template,
        model_name=name,
        source_line=f"`{base_model or report.source}`" + (f" ({lines['a_family']} checkpoint)" if base_model else ""),
        **lines,
        config_rows=[(f, repr(getattr(config, f))) for f in CONFIG_FIELDS],
        init=report.init,
        exact_line=(
            "The conversion is **exact**: the converted encoder computes the source's function (see the measured "
            "difference below)."
            if report.exact
            else "The conversion is **not exact**, not function-preserving (an approximation, a re-initialisation or a "
            "LayerNorm move): the measured difference below is the drift from the source."
        ),
        warning=not_function_preserving_message(
            {**report.to_dict(), **({"healing": True} if healed else {})}, "path/to/this/folder", "This model"
        ),
        layer_rows=_layer_rows(report),
        n_copied=len(report.copied),
        n_mapped=len(report.mapped),
        n_new=len(report.new),
        n_dropped=len(report.dropped),
        new_summary=", ".join(f"{n}× {k}" for k, n in sorted(new_prefixes.items())),
        difference_reference=f"`{difference.get('reference', 'not measured')}` loaded from the source",
        difference_inputs=difference.get("inputs", "-"),
        difference_rows=diff_rows,
        n_params=sum(p.numel() for p in model.parameters()),
        n_ffn_params=sum(p.numel() for n, p in model.named_parameters() if ".mlp." in n),
        parameters=difference.get("parameters"),
        auto_class=_auto_class_name(model),
    )


def _auto_class_name(model) -> str:
    """The Auto class that loads `model`'s head (any family's), "AutoModel" for a class of none."""
    return next((h.auto_class for h in ALL_HEAD_CLASSES if h.ffn_bert is type(model)), "AutoModel")


__all__ = [
    "CONFIG_FIELDS",
    "build_model_card",
    "card_family",
    "family_lines",
    "source_card_data",
    "template_family",
]
