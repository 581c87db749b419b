"""`load_converted`: a pretrained BERT → an FfnBert variant (another FFN, Pre-LN, another width), in four steps:
`plan_conversion` (validate, choose each layer's recipe), `load_planned` (`from_pretrained`), `apply_plan` (set or
re-initialise each converted FFN) and `conversion_report`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from ..checkpoint_names import FINAL_NORM, GATE_PROJ, bert_key
from ..checkpoints import check_checkpoint, load_pretrained
from ..configuration_ffn_bert import FfnBertConfig, is_gated, parameter_matched_glu_width
from ..families import checkpoint_family
from ..logging_utils import quiet_transformers
from ..modeling_ffn_bert import FfnBertModel, FfnBertPreTrainedModel
from .recipes import INITS, FfnRecipe, ffn_recipe, parse_width
from .report import ConversionReport

# Config fields that say where a config came from, not what the model computes.
BOOKKEEPING_FIELDS = {
    "architectures",
    "transformers_version",
    "model_type",
    "_name_or_path",
    "dtype",
    "torch_dtype",
    "auto_map",
}
RESERVED_KEYWORDS = ("intermediate_size", "output_loading_info")


@dataclass
class ConversionPlan:
    """A validated conversion request, with one recipe per layer."""

    checkpoint: str
    init: str
    source_config: FfnBertConfig
    overrides: dict[str, Any]
    target_config: FfnBertConfig
    target_width: int
    recipes: list[FfnRecipe]


def target_width(width: str | int, source_width: int, target_types: list[str]) -> int:
    """The FFN width for `width` ("keep", "matched" or a positive int) given the source width and target types.

    Raises:
        ValueError: an unknown `width`, or "matched" with no gated layer.
    """
    width = parse_width(width)
    if width == "keep":
        return source_width
    if width == "matched":
        if not any(is_gated(t) for t in target_types):
            raise ValueError(
                f"width='matched' sizes a gated FFN to a standard one's weight count, but no layer is gated "
                f"(ffn_type {sorted(set(target_types))}); allowed: 'keep' or an integer"
            )
        return parameter_matched_glu_width(source_width)
    return width


def plan_conversion(
    checkpoint: str,
    *,
    ffn_type: str | list[str] | None,
    layer_norm_position: str | list[str] | None,
    init: str,
    width: str | int,
    from_pretrained_kwargs: dict[str, Any],
) -> ConversionPlan:
    """Validate a `load_converted` request and choose each layer's recipe; touches no weights (raises as it)."""
    if init not in INITS:
        raise ValueError(f"init has unknown value {init!r}; allowed: {', '.join(INITS)}")
    if init == "pruned":
        raise ValueError(
            "init='pruned' needs calibration text: use hf_ffn.conversion.load_pruned (or hf-ffn convert "
            "--init pruned --calibration_files PATH)"
        )
    for reserved in RESERVED_KEYWORDS:
        if reserved in from_pretrained_kwargs:
            raise ValueError(f"{reserved} is set by load_converted (use width=), not as a keyword")
    config_class = checkpoint_family(checkpoint).config_class  # BERT's or RoBERTa's; another family raises
    source_config = config_class.from_pretrained(checkpoint)
    if not source_config.is_default_bert:
        raise ValueError(
            f"{checkpoint} is a checkpoint with a non-default config (its config.ffn_type "
            f"{source_config.ffn_type!r}, config.layer_norm_position {source_config.layer_norm_position!r}, ...); "
            f"conversion starts from plain BERT"
        )
    source_act = source_config.hidden_act
    overrides = {
        k: v for k, v in (("ffn_type", ffn_type), ("layer_norm_position", layer_norm_position)) if v is not None
    }
    # Validate the names before touching weights (FfnBertConfig raises naming the field and allowed values).
    probe = config_class.from_dict(source_config.to_dict(), warn_reused_weights=False, **overrides)
    target_types = probe.ffn_types
    new_width = target_width(width, source_config.intermediate_size, target_types)
    width_changed = new_width != source_config.intermediate_size
    if init == "preserving":
        if width_changed:
            raise ValueError(
                f"width={width!r} gives intermediate_size={new_width}, but init='preserving' copies the source "
                f"FFN weights of width {source_config.intermediate_size}; use width='keep' or init='fresh'"
            )
        if from_pretrained_kwargs.get("ffn_bias", True) is False:
            raise ValueError("init='preserving' needs ffn_bias=True (the recipes set the up_proj bias); got False")
        swish_beta = from_pretrained_kwargs.get("swish_beta", source_config.swish_beta)
        recipes = [ffn_recipe(source_act, t, swish_beta) for t in target_types]
    else:
        converted = [t != source_act or width_changed for t in target_types]
        if not any(converted):
            raise ValueError(
                f"init='fresh' re-initialises the FFN of every layer whose FFN changes, but none does (ffn_type "
                f"{ffn_type!r}, width {width!r}); change ffn_type or width, or use init='preserving'"
            )
        recipes = [FfnRecipe("fresh" if c else "unchanged", note="newly initialised" if c else "") for c in converted]
    return ConversionPlan(str(checkpoint), init, source_config, overrides, probe, new_width, recipes)


def planned_new(plan: ConversionPlan) -> Callable[[str], bool]:
    """Which encoder keys the checkpoint need not hold: `mlp.gate_proj`, `encoder.final_norm`, a "fresh" layer's FFN."""
    fresh = {i for i, recipe in enumerate(plan.recipes) if recipe.kind == "fresh"}

    def may_be_new(key: str) -> bool:
        layer = re.search(r"encoder\.layer\.(\d+)\.mlp\.", key)
        return f".{GATE_PROJ}." in key or f"{FINAL_NORM}." in key or (layer is not None and int(layer[1]) in fresh)

    return may_be_new


def load_planned(
    plan: ConversionPlan, model_class: type[FfnBertPreTrainedModel], from_pretrained_kwargs: dict[str, Any]
) -> tuple[FfnBertPreTrainedModel, dict[str, Any]]:
    """`model_class.from_pretrained` with the plan's config: (model in eval mode, loading info).

    Raises:
        CheckpointNotLoadedError: as `hf_ffn.checkpoints.load_pretrained`.
    """
    with quiet_transformers():  # transformers' load table would call the mapped weights "missing": ours replaces it
        model, info = load_pretrained(
            model_class,
            plan.checkpoint,
            may_be_new=planned_new(plan),
            **plan.overrides,
            intermediate_size=plan.target_width,
            ignore_mismatched_sizes=True,  # a fresh FFN of another width, or a head of another shape: new
            warn_reused_weights=False,  # the variant changes on purpose: the plan maps or re-initialises the weights
            **from_pretrained_kwargs,
        )
    # The source's own remote-code classes are not this model's; `save_pretrained` writes FfnBert's (`AUTO_MAP`).
    model.config.auto_map = None
    return model.eval(), info


def apply_recipe(mlp: nn.Module, recipe: FfnRecipe, name: str) -> list[dict[str, Any]]:
    """Set `mlp.gate_proj` / `mlp.up_proj` from the standard FFN weights loaded into `mlp.up_proj`; returns one
    `ConversionReport.mapped` entry per weight set."""
    weight, bias = mlp.up_proj.weight.clone(), mlp.up_proj.bias.clone()  # (intermediate, hidden), (intermediate,)
    source_w, source_b = bert_key(f"{name}.up_proj.weight"), bert_key(f"{name}.up_proj.bias")
    scale = recipe.gate_scale
    op = "copy" if scale == 1.0 else f"multiply by {scale:.9g}"
    mlp.gate_proj.weight.copy_(weight if scale == 1.0 else weight * scale)
    mlp.gate_proj.bias.copy_(bias if scale == 1.0 else bias * scale)
    rows = [
        {"target": f"{name}.gate_proj.weight", "source": source_w, "operation": op},
        {"target": f"{name}.gate_proj.bias", "source": source_b, "operation": op},
    ]
    if recipe.up == "constant":
        mlp.up_proj.weight.zero_()
        mlp.up_proj.bias.fill_(recipe.up_bias)
        rows += [
            {"target": f"{name}.up_proj.weight", "source": None, "operation": "constant 0"},
            {"target": f"{name}.up_proj.bias", "source": None, "operation": f"constant {recipe.up_bias:.9g}"},
        ]
    else:  # "copy": up_proj already holds (W, b)
        rows += [
            {"target": f"{name}.up_proj.weight", "source": source_w, "operation": "copy"},
            {"target": f"{name}.up_proj.bias", "source": source_b, "operation": "copy"},
        ]
    return rows


def reinit_linears(model: PreTrainedModel, mlp: nn.Module, name: str) -> list[str]:
    """Re-initialise every linear of `mlp` with the model's `_init_weights`; returns the keys. (transformers' init
    skips tensors marked `_is_hf_initialized`, so the mark is cleared first.)"""
    keys = []
    for proj_name, proj in mlp.named_children():
        if not isinstance(proj, nn.Linear):
            continue
        for param_name, param in proj.named_parameters(recurse=False):
            if hasattr(param, "_is_hf_initialized"):
                del param._is_hf_initialized
            keys.append(f"{name}.{proj_name}.{param_name}")
        proj.__dict__.pop("_is_hf_initialized", None)
        model._init_weights(proj)
    return keys


def apply_plan(model: FfnBertPreTrainedModel, plan: ConversionPlan) -> tuple[list[dict[str, Any]], list[str]]:
    """Apply each layer's recipe to the loaded model; returns (mapped entries, re-initialised keys)."""
    prefix = f"{model.base_model_prefix}." if model is not model.base_model else ""
    mapped: list[dict[str, Any]] = []
    fresh_keys: list[str] = []
    with torch.no_grad():
        for i, (layer, recipe) in enumerate(zip(model.base_model.encoder.layer, plan.recipes, strict=False)):
            name = f"{prefix}encoder.layer.{i}.mlp"
            if recipe.kind == "fresh":
                fresh_keys += reinit_linears(model, layer.mlp, name)
            elif recipe.gated:
                mapped += apply_recipe(layer.mlp, recipe, name)
    return mapped, fresh_keys


def config_changes(source: FfnBertConfig, target: FfnBertConfig) -> dict[str, list[Any]]:
    """field → [source value, target value] for every field that differs (not `BOOKKEEPING_FIELDS`)."""
    before, after = source.to_dict(), target.to_dict()
    return {
        k: [before.get(k), after.get(k)]
        for k in sorted(set(before) | set(after))
        if k not in BOOKKEEPING_FIELDS and before.get(k) != after.get(k)
    }


def conversion_report(
    plan: ConversionPlan,
    model: FfnBertPreTrainedModel,
    info: dict[str, Any],
    mapped: list[dict[str, Any]],
    fresh_keys: list[str],
) -> ConversionReport:
    """The `ConversionReport` of a planned, loaded and applied conversion."""
    mismatched = {str(k[0]) if isinstance(k, tuple) else str(k) for k in info["mismatched_keys"]}
    missing = set(info["missing_keys"]) | mismatched
    mapped_targets = {m["target"] for m in mapped}
    new = sorted((missing | set(fresh_keys)) - mapped_targets)
    copied = [k for k in model.state_dict() if k not in missing and k not in mapped_targets and k not in fresh_keys]
    # Re-initialised weights that BERT had (all but gate_proj) are checkpoint weights not used.
    dropped = sorted(set(info["unexpected_keys"]) | {bert_key(k) for k in fresh_keys if f".{GATE_PROJ}." not in k})
    source, target = plan.source_config, plan.target_config
    layers = [
        {
            "layer": i,
            "source_ffn": source.hidden_act,
            "target_ffn": t,
            "recipe": r.kind,
            "note": r.note,
            "layer_norm_position": [source.layer_norm_positions[i], target.layer_norm_positions[i]],
        }
        for i, (t, r) in enumerate(zip(target.ffn_types, plan.recipes, strict=False))
    ]
    exact = (
        all(r.kind in ("unchanged", "exact") for r in plan.recipes)
        and model.config.layer_norm_positions == source.layer_norm_positions
        and model.config.embedding_layer_norm == source.embedding_layer_norm
    )
    return ConversionReport(
        source=plan.checkpoint,
        model_class=type(model).__name__,
        init=plan.init,
        exact=exact,
        config_changes=config_changes(source, model.config),
        layers=layers,
        copied=copied,
        mapped=mapped,
        new=new,
        dropped=dropped,
    )


def load_converted(
    checkpoint: str,
    model_class: type[FfnBertPreTrainedModel] = FfnBertModel,
    *,
    ffn_type: str | list[str] | None = None,
    layer_norm_position: str | list[str] | None = None,
    init: str = "preserving",
    width: str | int = "keep",
    **from_pretrained_kwargs,
) -> tuple[FfnBertPreTrainedModel, ConversionReport]:
    """Load a BERT (or RoBERTa-family) checkpoint into an FfnBert (FfnRoberta) variant, preserving its function where
    possible.

    Args:
        checkpoint: a BERT folder or hub name (`model_type` "bert"), or a default-config FfnBert one; or one of the
            RoBERTa family (`hf_ffn.families`: then the FfnRoberta class of `model_class`'s head is loaded).
        model_class: any FfnBert class (`FfnBertModel` or a head). Head weights the checkpoint lacks are new.
        ffn_type: target FFN (one name or one per layer); None keeps the source's. `hidden_act` stays the source's.
        layer_norm_position: "post"/"pre" (or one per layer); None keeps the source's. Post → Pre keeps weights.
        init: "preserving" (`hf_ffn.conversion.recipes`) or "fresh" (each changed FFN newly initialised as BERT's).
        width: "keep", "matched" (`parameter_matched_glu_width`, e.g. 3072 → 2048) or an int.
        **from_pretrained_kwargs: passed to `model_class.from_pretrained` (`num_labels`, `attn_implementation`...).

    Returns:
        `(model, report)`; the model is in eval mode. `report.difference` is not filled (see `measure_difference`).

    Raises:
        FileNotFoundError: `checkpoint` looks local and is not a checkpoint folder (`hf_ffn.checkpoints`).
        CheckpointNotLoadedError: as `hf_ffn.checkpoints.load_pretrained`.
        ValueError: a checkpoint that is not BERT-shaped (or a non-default FfnBert one); an unknown `init`,
            `width`, `ffn_type` or `layer_norm_position`; init='preserving' with a target that has no exact or
            approximate mapping, a width other than the source's, or `ffn_bias=False`; init='fresh' with no
            FFN change; `intermediate_size` or `output_loading_info` in the kwargs.
    """
    check_checkpoint(checkpoint)
    plan = plan_conversion(
        checkpoint,
        ffn_type=ffn_type,
        layer_norm_position=layer_norm_position,
        init=init,
        width=width,
        from_pretrained_kwargs=from_pretrained_kwargs,
    )
    model_class = checkpoint_family(checkpoint).same_head(model_class)  # a RoBERTa checkpoint: FfnRoberta's head
    model, info = load_planned(plan, model_class, from_pretrained_kwargs)
    mapped, fresh_keys = apply_plan(model, plan)
    return model, conversion_report(plan, model, info, mapped, fresh_keys)


__all__ = [
    "BOOKKEEPING_FIELDS",
    "ConversionPlan",
    "apply_plan",
    "apply_recipe",
    "config_changes",
    "conversion_report",
    "load_converted",
    "load_planned",
    "plan_conversion",
    "planned_new",
    "reinit_linears",
    "target_width",
]
