"""The model card of a fine-tuned folder: `build_training_card` (filled by `hf_ffn.training`) renders
`hf_ffn/model_cards/fine_tuned.md` with `huggingface_hub.ModelCard.from_template` (front matter from
`ModelCardData`: library_name, tags, model-index `eval_results`). A converted folder's card is
`hf_ffn.conversion.build_model_card`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .model_cards import TEMPLATES

# Trainer's metric prefixes → the names of the splits they were measured on (the card's model-index).
SPLIT_NAMES = {"eval": "validation", "test": "test"}


def conversion_summary(conversion: Mapping[str, Any]) -> str:
    """One line for a fine-tuned model's card: what loading the variant changed.

    `conversion` is `hf_ffn.training.outputs.load_model`'s report: a `ConversionReport` as a dict,
    `{"conversion": "none", "new_weights": [...]}` for a checkpoint loaded as saved, or
    `{"conversion": "from scratch", "new_weights": "all"}` for a model `hf-ffn mlm` built
    (`hf_ffn.mlm.run`).
    """

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

    `task`: the pipeline task ("text-classification", "fill-mask"); `base_model`: the checkpoint trained from (None:
    a model pre-trained from scratch); `variant`: ffn_type, layer_norm_position
    (the trained model's; None: the checkpoint's, unread), ffn_init, ffn_width; `conversion`: as for
    `conversion_summary`; `results`: the run's metrics, of which `eval_<metric>` and `test_<metric>` for each of
    `metric_names` also go into the front matter's `model-index` (`EvalResult`, rounded to 4 decimals; split
    "validation" or "test", `SPLIT_NAMES`); `notes`: lines under "Training hyperparameters" (the schedule beyond
    them: a pre-training run's blocks, warm-up, stop).
    """
    ffn_type = variant.get("ffn_type")
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
        tags=["hf_ffn", "ffn_bert", ffn_type if isinstance(ffn_type, str) else "per-layer-ffn", task],
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
    )


__all__ = ["SPLIT_NAMES", "build_training_card", "conversion_summary"]
