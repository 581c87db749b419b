"""The model card of a fine-tuned folder (`build_training_card`: `hf_ffn/model_cards/fine_tuned.md` rendered by
`huggingface_hub.ModelCard.from_template`); it names the model's family (BERT, RoBERTa, XLM-RoBERTa, ELECTRA...), its
upstream class and tokenizer as a converted folder's card does (`hf_ffn.model_cards.card_family`, `family_lines`). A
converted folder's card is `hf_ffn.conversion.build_model_card`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .model_cards import TEMPLATES, card_family, family_lines

SPLIT_NAMES = {"eval": "validation", "test": "test"}  # Trainer's metric prefixes → the model-index's split names


def conversion_summary(conversion: Mapping[str, Any]) -> str:
    """One line for a fine-tuned model's card: what loading the variant changed (`conversion`:
    `hf_ffn.training.outputs.load_model`'s report, or `{"conversion": "from scratch"}` from `hf-ffn mlm`)."""

    def listed(keys: Sequence[str]) -> str:
        return f"{len(keys)} ({', '.join(keys)})" if 0 < len(keys) <= 6 else str(len(keys))

    if conversion.get("conversion") == "from scratch":
        return "built from scratch: every weight newly initialised (seeded by --seed), then pre-trained"
    if "config_changes" not in conversion:  # loaded as saved
        return f"loaded as saved; newly initialised: {listed(conversion.get('new_weights', []))}"
    changes = {k: v for k, v in conversion["config_changes"].items() if k not in ("id2label", "label2id")}
    return (
        f"init={conversion.get('init')}, exact={conversion.get('exact')}, config changes {json.dumps(changes)}; "
        f"tensors copied {len(conversion.get('copied', []))}, mapped {len(conversion.get('mapped', []))}, "
        f"newly initialised {listed(conversion.get('new', []))}, dropped {listed(conversion.get('dropped', []))}"
    )


def build_training_card(
    *,
    model,
    name: str,
    task: str,
    base_model: str | None,
    dataset: str,
    variant: Mapping[str, Any],
    conversion: Mapping[str, Any],
    results: Mapping[str, float],
    metric_names: Sequence[str],
    hyperparameters: Mapping[str, Any],
    notes: Sequence[str] = (),
) -> ModelCard:
    """A `ModelCard` for a fine-tuned model (template `fine_tuned.md`).

    `model`: the trained model (its family, head and upstream class are named: `card_family` of `base_model`);
    `task`: the pipeline task ("text-classification", "fill-mask"); `base_model`: None for a model pre-trained from
    scratch; `variant`: ffn_type, layer_norm_position, ffn_init, ffn_width; `results`: the run's metrics, of which
    `eval_<metric>` and `test_<metric>` of `metric_names` also go into the front matter's `model-index` (rounded to
    4 decimals); `notes`: lines under "Training hyperparameters".
    """
    ffn_type = variant.get("ffn_type")
    family = card_family(model, base_model)
    lines = family_lines(model, family)
    eval_results = [
        EvalResult(
            task_type=task,
            dataset_type=dataset,
            dataset_name=dataset,
            dataset_split=SPLIT_NAMES[split],
            metric_type=metric,
            metric_value=round(results[f"{split}_{metric}"], 4),
        )
        for split in ("eval", "test")
        for metric in metric_names
        if f"{split}_{metric}" in results
    ]
    card_data = ModelCardData(
        library_name="transformers",
        # the model's type and its family's ("ffn_bert", "bert"; "ffn_roberta", "xlm-roberta"; ...), as converted cards
        tags=[
            "hf_ffn",
            model.config.model_type,
            family.upstream_type,
            ffn_type if isinstance(ffn_type, str) else "per-layer-ffn",
            task,
        ],
        model_name=name,
        eval_results=eval_results or None,
    )
    return ModelCard.from_template(
        card_data,
        template_str=(TEMPLATES / "fine_tuned.md").read_text(encoding="utf-8"),
        model_name=name,
        task=task,
        base_model=base_model,
        dataset=dataset,
        variant=dict(variant),
        conversion=conversion_summary(conversion),
        result_rows=[
            (key, f"{value:.4f}" if isinstance(value, float) else value) for key, value in sorted(results.items())
        ],
        hyperparameters=json.dumps(dict(hyperparameters)),
        notes=list(notes),
        **lines,
    )


__all__ = ["SPLIT_NAMES", "build_training_card", "conversion_summary"]
