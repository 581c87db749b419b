"""Converting checkpoints into and out of FfnBert, as data plus one loader per direction.

- `load_converted`: a pretrained BERT → an FfnBert variant (another FFN, Pre-LN, another width), either
  function-preserving (exact where the math allows, a documented approximation where it does not) or with the
  converted FFNs freshly initialised. Returns the model and a `ConversionReport` (JSON-serialisable: which
  weights were copied, mapped or newly initialised, the config changes, and the measured output difference,
  `measure_difference`).
- Key maps (data, applied with transformers' `Chunk`/`Concatenate`) between FfnBert's gated FFN and
  transformers' `LlamaMLP` / `ModernBertMLP`; `load_megatron_bert` (MegatronBERT = Pre-LN, through
  `from_pretrained(key_mapping=...)`).
- Folders: `convert_checkpoint` (what `hf-ffn convert` and scripts/convert_checkpoint.py run) and
  `export_to_bert`, both written atomically (`atomic_output_dir`).

Function-preserving recipes (`ffn_recipe`). A BERT FFN is `down(act(W x + b))`; write z = W x + b.

    exact     act → gated act':  gate_proj ← (W, b), up_proj ← (0, 1), down_proj ← down
              act(z) · (0·x + 1) = act(z), bit for bit (x·0 sums to 0, + 1 is exactly 1.0, ·1.0 is exact).
              GELU → GeGLU, ReLU → ReGLU, SiLU → SwiGLU (β = 1).
    sigmoid   GELU(z) ≈ z·σ(k z), k = 1.702 (Hendrycks & Gimpel 2016, arXiv 1606.08415, §2); SiLU is k = 1.
    form      → SwiGLU, Swish_β(u) = u·σ(β u):  with u = c z, c = k/β,
                  Swish_β(c z) / c = z·σ(β c z) = z·σ(k z),
                so gate_proj ← c·(W, b), up_proj ← (0, 1/c), down_proj ← down.
              → GLU, σ(gate)·up:  gate_proj ← k·(W, b), up_proj ← (W, b), so σ(k z)·z.
              The approximation error |GELU(z) − z·σ(1.702 z)| is at most 0.0203 for every z (at |z| ≈ 2.27; even in z),
              so one layer's FFN output moves by at most 0.0203·Σ_j |down_proj[i, j]| per coordinate i.
    kept      standard act → standard act' (and Post-LN → Pre-LN): weights kept as they are; no exact mapping
              exists, the report carries the measured drift.

Any other pair (e.g. ReLU → SwiGLU, GELU → bilinear) raises `ValueError` listing what is allowed for that
source activation. Sources: Shazeer 2020 (GLU variants, arXiv 2002.05202), Hendrycks & Gimpel 2016.

Names. Target keys in reports are the model's own parameter names (in memory: `mlp.gate_proj`, `mlp.up_proj`,
`mlp.down_proj`, `mlp_norm`); source keys are BERT's names for the same weights in the same namespace
(`intermediate.dense`, `output.dense`, `output.LayerNorm`; see the table in `modeling_ffn_bert`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import BertModel, PreTrainedModel
from transformers.core_model_loading import Chunk, ConversionOps

from .configuration_ffn_bert import STANDARD_FFN_TYPES, FfnBertConfig, is_gated, parameter_matched_glu_width
from .modeling_ffn_bert import BERT_FFN_NAMES, FfnBertModel, FfnBertPreTrainedModel

# ---------------------------------------------------------------------------------------------------------------
# Recipes (data)
# ---------------------------------------------------------------------------------------------------------------
# BERT activation → the gated variant whose gate activation is the same op (exact conversion).
EXACT_GATED_TARGET: dict[str, str] = {"gelu": "geglu", "relu": "reglu", "silu": "swiglu", "swish": "swiglu"}
# act(z) = z·σ(k z): k = 1.702 approximates erf-GELU (Hendrycks & Gimpel 2016, §2); SiLU/Swish_1 is exactly k = 1.
SIGMOID_SLOPE: dict[str, float] = {"gelu": 1.702, "silu": 1.0, "swish": 1.0}
SIGMOID_FORM_IS_EXACT: dict[str, bool] = {"gelu": False, "silu": True, "swish": True}
INITS = ("preserving", "fresh")
WIDTHS = ("keep", "matched")

# In-memory FFN names → BERT's names (the inverse of `modeling_ffn_bert.BERT_FFN_NAMES`).
BERT_NAME_OF: dict[str, str] = {f".{ours}.": f".{bert}." for bert, ours in BERT_FFN_NAMES.items()}


@dataclass(frozen=True)
class FfnRecipe:
    """How one layer's FFN is built from a standard FFN's first projection (W, b) when preserving.

    `gate_scale`: gate_proj ← gate_scale·(W, b). `up`: "constant" (up_proj weight 0, bias `up_bias`) or
    "copy" (up_proj ← (W, b)). `kind`: "unchanged", "exact", "approximate" or "kept" (standard → standard).
    A standard target (`gated=False`) keeps all weights.
    """

    kind: str
    gated: bool = False
    gate_scale: float = 1.0
    up: str = "constant"
    up_bias: float = 1.0
    note: str = ""


def allowed_preserving_targets(source_act: str) -> list[str]:
    """The `ffn_type`s a standard FFN with activation `source_act` can be converted to with init='preserving'."""
    targets = {"any standard activation (weights kept, approximate)"}
    if source_act in EXACT_GATED_TARGET:
        targets.add(EXACT_GATED_TARGET[source_act])
    if source_act in SIGMOID_SLOPE:
        targets |= {"swiglu", "glu"}
    return sorted(targets)


def ffn_recipe(source_act: str, target: str, swish_beta: float = 1.0) -> FfnRecipe:
    """The function-preserving recipe from a standard `source_act` FFN to `target` (see the module docstring).

    Raises:
        ValueError: if no exact or approximate mapping exists, naming the allowed targets.
    """
    if target == source_act:
        return FfnRecipe("unchanged")
    if not is_gated(target):
        return FfnRecipe("kept", note=f"standard FFN, activation {source_act} → {target}: weights kept (approximate)")
    exact_target = EXACT_GATED_TARGET.get(source_act)
    if target == exact_target and (target != "swiglu" or swish_beta == 1.0):
        return FfnRecipe("exact", gated=True, note=f"{source_act}(z)·1 = {source_act}(z): gate ← (W, b), up ← (0, 1)")
    if target in ("swiglu", "glu") and source_act in SIGMOID_SLOPE:
        k = SIGMOID_SLOPE[source_act]
        kind = "approximate" if not SIGMOID_FORM_IS_EXACT[source_act] else "approximate (float rounding only)"
        if target == "swiglu":
            c = k / swish_beta
            return FfnRecipe(
                kind, gated=True, gate_scale=c, up="constant", up_bias=1.0 / c,
                note=f"{source_act}(z) ≈ z·σ({k}z) = Swish_{swish_beta}({c:.6g}z)/{c:.6g}: gate ← {c:.6g}·(W, b), "
                f"up ← (0, 1/{c:.6g})",
            )
        return FfnRecipe(
            kind, gated=True, gate_scale=k, up="copy",
            note=f"{source_act}(z) ≈ σ({k}z)·z: gate ← {k}·(W, b), up ← (W, b)",
        )
    raise ValueError(
        f"init='preserving' cannot convert a {source_act!r} FFN to ffn_type={target!r}: no exact or approximate "
        f"function-preserving mapping exists; allowed for {source_act!r}: "
        f"{', '.join(allowed_preserving_targets(source_act))}; or use init='fresh'"
    )


# ---------------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class ConversionReport:
    """What a conversion did, JSON-serialisable (`to_dict`, `to_json`, `save`).

    Attributes:
        source: the checkpoint converted. model_class: the FfnBert class it was loaded into.
        init: "preserving" or "fresh". exact: whether the converted encoder computes exactly the source's function
            (every layer "unchanged"/"exact", LayerNorm placement and embedding LayerNorm unchanged).
        config_changes: field → [source value, converted value].
        layers: per layer: source and target FFN, the recipe kind and a note.
        copied: target keys loaded unchanged from the checkpoint.
        mapped: {"target", "source" (BERT name or None for a constant), "operation"} for each weight a recipe set.
        new: target keys randomly initialised (as BERT initialises: normal(0, initializer_range), zero bias;
            LayerNorms ones/zeros).
        dropped: checkpoint weights not used.
        difference: measured output difference from the source model (`measure_difference`), when measured.
    """

    source: str
    model_class: str
    init: str
    exact: bool
    config_changes: dict[str, list[Any]] = field(default_factory=dict)
    layers: list[dict[str, Any]] = field(default_factory=list)
    copied: list[str] = field(default_factory=list)
    mapped: list[dict[str, Any]] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    difference: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """A few human-readable lines: what was converted and the measured difference."""
        lines = [f"{self.source} -> {self.model_class} (init={self.init}, exact={self.exact})"]
        lines += [f"  config: {k}: {a!r} -> {b!r}" for k, (a, b) in self.config_changes.items()]
        lines.append(
            f"  weights: {len(self.copied)} copied, {len(self.mapped)} mapped, {len(self.new)} new, "
            f"{len(self.dropped)} dropped"
        )
        for key, d in (self.difference or {}).items():
            if isinstance(d, dict) and "max_abs_diff" in d:
                lines.append(
                    f"  {key}: max |diff| {d['max_abs_diff']:.4g}, mean |diff| {d['mean_abs_diff']:.4g}, "
                    f"equal={d['equal']}"
                )
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.to_json() + "\n")


def bert_key(key: str) -> str:
    """BERT's name for an in-memory FfnBert key (`...mlp.up_proj.weight` → `...intermediate.dense.weight`)."""
    for ours, theirs in BERT_NAME_OF.items():
        key = key.replace(ours, theirs)
    return key


# ---------------------------------------------------------------------------------------------------------------
# Loading a converted model
# ---------------------------------------------------------------------------------------------------------------
_BOOKKEEPING_FIELDS = {"architectures", "transformers_version", "model_type", "_name_or_path", "dtype", "torch_dtype"}


def _target_width(width: str | int, source_width: int, target_types: list[str]) -> int:
    if isinstance(width, bool) or not (width in WIDTHS or (isinstance(width, int) and width > 0)):
        raise ValueError(f"width has unknown value {width!r}; allowed: 'keep', 'matched' or a positive integer")
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
    """Load a BERT checkpoint into an FfnBert variant, preserving its function where possible.

    Args:
        checkpoint: a BERT folder or hub name (`model_type` "bert"), or a default-config FfnBert one.
        model_class: any FfnBert class (`FfnBertModel` or a head). Head weights the checkpoint lacks are new.
        ffn_type: target FFN (one name or one per layer); None keeps the source's.
        layer_norm_position: "post"/"pre" (or one per layer); None keeps the source's. Post → Pre keeps weights.
        init: "preserving" (recipes of the module docstring) or "fresh" (every layer whose FFN type or width
            changes gets gate/up/down newly initialised as BERT initialises linears: normal(0,
            initializer_range), zero bias).
        width: "keep" (the source's intermediate_size), "matched" (`parameter_matched_glu_width`, e.g. 1536 →
            1024, 3072 → 2048) or an int.
        **from_pretrained_kwargs: passed to `model_class.from_pretrained` (config overrides such as `num_labels`,
            `attn_implementation`, ...).

    Returns:
        `(model, report)`; the model is in eval mode. `report.difference` is not filled (see `measure_difference`).

    Raises:
        ValueError: a checkpoint that is not BERT-shaped (or a non-default FfnBert one); an unknown `init`,
            `width`, `ffn_type` or `layer_norm_position`; init='preserving' with a target that has no exact or
            approximate mapping, a width other than the source's, or `ffn_bias=False`; init='fresh' with no
            FFN change; `intermediate_size` or `output_loading_info` in the kwargs.
    """
    if init not in INITS:
        raise ValueError(f"init has unknown value {init!r}; allowed: {', '.join(INITS)}")
    for reserved in ("intermediate_size", "output_loading_info", "hidden_act"):
        if reserved in from_pretrained_kwargs:
            raise ValueError(f"{reserved} is set by load_converted (use width= / ffn_type=), not as a keyword")
    source_config = FfnBertConfig.from_pretrained(checkpoint)  # raises ValueError for non-BERT model_type
    if not source_config.is_default_bert:
        raise ValueError(
            f"{checkpoint} is an FfnBert checkpoint with a non-default config (ffn_type {source_config.ffn_type!r}, "
            f"layer_norm_position {source_config.layer_norm_position!r}, ...); conversion starts from plain BERT"
        )
    source_act = source_config.hidden_act
    overrides: dict[str, Any] = {}
    if ffn_type is not None:
        overrides["ffn_type"] = ffn_type
        if isinstance(ffn_type, str) and ffn_type in STANDARD_FFN_TYPES:
            overrides["hidden_act"] = ffn_type  # a standard FFN's activation is BERT's hidden_act
    if layer_norm_position is not None:
        overrides["layer_norm_position"] = layer_norm_position
    # Validate the names before touching weights (FfnBertConfig raises naming the field and allowed values).
    probe = FfnBertConfig.from_bert_dict(source_config.to_dict(), source=str(checkpoint), **overrides)[0]
    target_types = probe.ffn_types
    target_width = _target_width(width, source_config.intermediate_size, target_types)
    width_changed = target_width != source_config.intermediate_size
    swish_beta = from_pretrained_kwargs.get("swish_beta", source_config.swish_beta)

    if init == "preserving":
        if width_changed:
            raise ValueError(
                f"width={width!r} gives intermediate_size={target_width}, but init='preserving' copies the source "
                f"FFN weights of width {source_config.intermediate_size}; use width='keep' or init='fresh'"
            )
        if from_pretrained_kwargs.get("ffn_bias", True) is False:
            raise ValueError("init='preserving' needs ffn_bias=True (the recipes set the up_proj bias); got False")
        recipes = [ffn_recipe(source_act, t, swish_beta) for t in target_types]
    else:
        converted = [t != source_act or width_changed for t in target_types]
        if not any(converted):
            raise ValueError(
                f"init='fresh' re-initialises the FFN of every layer whose FFN changes, but none does (ffn_type "
                f"{ffn_type!r}, width {width!r}); change ffn_type or width, or use init='preserving'"
            )
        recipes = [FfnRecipe("fresh" if c else "unchanged", note="newly initialised" if c else "") for c in converted]

    from .parity import quiet_transformers

    with quiet_transformers():  # transformers' load table would call the mapped weights "missing": ours replaces it
        model, info = model_class.from_pretrained(
            checkpoint,
            **overrides,
            intermediate_size=target_width,
            ignore_mismatched_sizes=init == "fresh",
            output_loading_info=True,
            **from_pretrained_kwargs,
        )
    model.eval()
    prefix = f"{model.base_model_prefix}." if model is not model.base_model else ""
    mapped: list[dict[str, Any]] = []
    fresh_keys: list[str] = []
    with torch.no_grad():
        for i, (layer, recipe) in enumerate(zip(model.base_model.encoder.layer, recipes)):
            name = f"{prefix}encoder.layer.{i}.mlp"
            if recipe.kind == "fresh":
                fresh_keys += _reinit_linears(model, layer.mlp, name)
            elif recipe.gated:
                mapped += _apply_recipe(layer.mlp, recipe, name)

    mismatched = {str(k[0]) if isinstance(k, tuple) else str(k) for k in info["mismatched_keys"]}
    missing = set(info["missing_keys"]) | mismatched
    mapped_targets = {m["target"] for m in mapped}
    new = sorted((missing | set(fresh_keys)) - mapped_targets)
    state_keys = list(model.state_dict().keys())
    copied = [k for k in state_keys if k not in missing and k not in mapped_targets and k not in fresh_keys]
    # Re-initialised weights that BERT had (all but gate_proj) are checkpoint weights not used.
    dropped = sorted(set(info["unexpected_keys"]) | {bert_key(k) for k in fresh_keys if ".gate_proj." not in k})
    source_lns = source_config.layer_norm_positions
    layers = [
        {"layer": i, "source_ffn": source_act, "target_ffn": t, "recipe": r.kind, "note": r.note,
         "layer_norm_position": [source_lns[i], probe.layer_norm_positions[i]]}
        for i, (t, r) in enumerate(zip(target_types, recipes))
    ]
    exact = (
        all(r.kind in ("unchanged", "exact") for r in recipes)
        and model.config.layer_norm_positions == source_lns
        and model.config.embedding_layer_norm == source_config.embedding_layer_norm
    )
    report = ConversionReport(
        source=str(checkpoint),
        model_class=model_class.__name__,
        init=init,
        exact=exact,
        config_changes=_config_changes(source_config, model.config),
        layers=layers,
        copied=copied,
        mapped=mapped,
        new=new,
        dropped=dropped,
    )
    return model, report


def _config_changes(source: FfnBertConfig, target: FfnBertConfig) -> dict[str, list[Any]]:
    before, after = source.to_dict(), target.to_dict()
    return {
        k: [before.get(k), after.get(k)]
        for k in sorted(set(before) | set(after))
        if k not in _BOOKKEEPING_FIELDS and before.get(k) != after.get(k)
    }


def _apply_recipe(mlp: nn.Module, recipe: FfnRecipe, name: str) -> list[dict[str, Any]]:
    """Set `mlp.gate_proj` / `mlp.up_proj` from the standard FFN weights just loaded into `mlp.up_proj`."""
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


def _reinit_linears(model: PreTrainedModel, mlp: nn.Module, name: str) -> list[str]:
    """Re-initialise every linear of `mlp` with the model's own `_init_weights` (BERT: normal(0,
    initializer_range), zero bias). transformers marks loaded tensors `_is_hf_initialized` and its init
    functions skip those, so the flag is cleared first."""
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


# ---------------------------------------------------------------------------------------------------------------
# Measuring the difference from the source
# ---------------------------------------------------------------------------------------------------------------
# Outputs compared, when both models return them.
COMPARED_OUTPUTS = (
    "last_hidden_state", "pooler_output", "logits", "prediction_logits", "seq_relationship_logits",
    "start_logits", "end_logits",
)


def output_difference(
    reference: nn.Module, candidate: nn.Module, inputs: dict[str, torch.Tensor]
) -> dict[str, dict[str, float]]:
    """max and mean |reference − candidate| of each output in `COMPARED_OUTPUTS` both return, plus `equal`.

    Per-token outputs (batch, seq, ...) are compared on real tokens only (`attention_mask` == 1): padded
    positions carry no meaning. Both models run in eval mode without gradients.
    """
    reference.eval(), candidate.eval()
    with torch.no_grad():
        ref_out, cand_out = reference(**inputs), candidate(**inputs)
    mask = inputs.get("attention_mask")
    result = {}
    for key in COMPARED_OUTPUTS:
        ref, cand = ref_out.get(key), cand_out.get(key)
        if ref is None or cand is None:
            continue
        equal = torch.equal(ref, cand)
        diff = (ref.float() - cand.float()).abs()
        if mask is not None and diff.dim() >= 2 and diff.shape[:2] == mask.shape:
            diff = diff[mask.bool()]  # (real tokens, ...)
        result[key] = {"max_abs_diff": diff.max().item(), "mean_abs_diff": diff.mean().item(), "equal": equal}
    return result


def measure_difference(
    source: str, model: FfnBertPreTrainedModel, report: ConversionReport | None = None,
    inputs: dict[str, torch.Tensor] | None = None,
) -> dict[str, Any]:
    """The converted `model`'s output difference from the source checkpoint on a fixed input.

    The reference is upstream transformers' class matching `model` (e.g. `BertForMaskedLM` for
    `FfnBertForMaskedLM`) loaded from `source`, when every head weight of `model` came from the checkpoint
    (no `report.new` key outside the encoder FFNs); otherwise upstream `BertModel` against `model.base_model`
    (last_hidden_state only, as new head weights are random on both sides). The fixed input is
    `parity.example_batch`: three tokenized sentence pairs of unequal lengths, padded (or seeded random ids
    when the checkpoint has no tokenizer). If `report` is given, the result is also stored in
    `report.difference`.

    Returns:
        {"reference": class name, "inputs": description, "parameters": {"scope", "reference", "candidate"},
        output name: {"max_abs_diff", "mean_abs_diff", "equal"} for each compared output}.
    """
    from .parity import HEAD_PAIRS, SENTENCE_PAIRS, _head_inputs, quiet_transformers, example_batch

    upstream_of = {ours: theirs for theirs, ours in HEAD_PAIRS.items()}
    attn = model.config._attn_implementation
    with quiet_transformers():
        config = FfnBertConfig.from_pretrained(source)
        batch = inputs if inputs is not None else example_batch(source, config)
        new_outside_ffn = report is not None and any(
            not re.search(r"encoder\.(layer\.\d+\.mlp\.|final_norm\.)", k) for k in report.new
        )
        upstream = upstream_of.get(type(model), BertModel)
        if new_outside_ffn or report is None:
            upstream, candidate = BertModel, model.base_model
        else:
            candidate = model
        reference = upstream.from_pretrained(source, attn_implementation=attn)
    result: dict[str, Any] = {
        "reference": f"transformers.{upstream.__name__}",
        "inputs": "parity.example_batch: " + "; ".join(" / ".join(p) for p in SENTENCE_PAIRS)
        if inputs is None else "given",
    }
    result["parameters"] = {
        "scope": "base model" if candidate is not model else "whole model",
        "reference": sum(p.numel() for p in reference.parameters()),
        "candidate": sum(p.numel() for p in candidate.parameters()),
    }
    diffs = output_difference(reference, candidate, _head_inputs(upstream, batch))
    if upstream is BertModel and candidate is not model:
        diffs = {"last_hidden_state": diffs["last_hidden_state"]}
    result.update(diffs)
    if report is not None:
        report.difference = result
    return result


# ---------------------------------------------------------------------------------------------------------------
# Agreement with the field's reference FFNs: key maps as data, applied with transformers' own ConversionOps
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KeyMap:
    """One entry of a state-dict mapping: `source` keys → `target` keys, through `op` (None: a plain rename).

    `op` is a transformers `ConversionOps` (`Chunk`, `Concatenate`, ...); the reverse mapping swaps source and
    target and uses `op.reverse_op`.
    """

    source: tuple[str, ...]
    target: tuple[str, ...]
    op: ConversionOps | None = None

    def reversed(self) -> KeyMap:
        return KeyMap(self.target, self.source, self.op.reverse_op if self.op is not None else None)


# transformers' `LlamaMLP`: down_proj(act_fn(gate_proj(x)) * up_proj(x)), act_fn = SiLU: the same layout and names
# as `FfnBertGatedMLP` with ffn_type="swiglu" (swish_beta=1 computes F.silu, like ACT2FN["silu"]). Llama has no MLP
# bias by default (`mlp_bias=False`): use ffn_bias=False; with biases the same names carry `.bias`.
LLAMA_MLP_TO_FFN: tuple[KeyMap, ...] = tuple(
    KeyMap((f"{proj}.{p}",), (f"{proj}.{p}",)) for proj in ("gate_proj", "up_proj", "down_proj") for p in ("weight", "bias")
)
# transformers' `ModernBertMLP`: `input, gate = Wi(x).chunk(2, dim=-1); Wo(act(input) * gate)`. The fused Wi is
# [activated half; linear half] along its output dimension (dim 0 of the weight). ModernBERT calls the *linear* half
# "gate"; here (as in Llama) gate_proj is the *activated* half, so Wi's first half → gate_proj, second → up_proj.
# act = ACT2FN[hidden_activation], "gelu" (erf) by default: ffn_type="geglu". No MLP bias by default (`mlp_bias`).
MODERNBERT_MLP_TO_FFN: tuple[KeyMap, ...] = tuple(
    m
    for p in ("weight", "bias")
    for m in (
        KeyMap((f"Wi.{p}",), (f"gate_proj.{p}", f"up_proj.{p}"), Chunk(dim=0)),
        KeyMap((f"Wo.{p}",), (f"down_proj.{p}",)),
    )
)


def reverse_key_maps(mapping: tuple[KeyMap, ...]) -> tuple[KeyMap, ...]:
    """The inverse mapping (FfnBert → the reference layout)."""
    return tuple(m.reversed() for m in mapping)


FFN_TO_LLAMA_MLP = reverse_key_maps(LLAMA_MLP_TO_FFN)
FFN_TO_MODERNBERT_MLP = reverse_key_maps(MODERNBERT_MLP_TO_FFN)


def convert_state_dict(state_dict: dict[str, torch.Tensor], mapping: tuple[KeyMap, ...]) -> dict[str, torch.Tensor]:
    """Apply a `KeyMap` mapping to a (module-level) state dict, strictly.

    Entries whose source keys are all absent are skipped (e.g. biases of a bias-free module).

    Raises:
        ValueError: a key no entry maps, or an entry with only some of its source keys present.
    """
    remaining = dict(state_dict)
    out: dict[str, torch.Tensor] = {}
    for entry in mapping:
        present = [k for k in entry.source if k in remaining]
        if not present:
            continue
        if len(present) != len(entry.source):
            raise ValueError(f"state dict has {present} but not all of {list(entry.source)}")
        tensors = {k: remaining.pop(k) for k in entry.source}
        if entry.op is None:
            out.update(zip(entry.target, tensors.values()))
        else:
            out.update(entry.op.convert(tensors, source_patterns=list(entry.source), target_patterns=list(entry.target)))
    if remaining:
        raise ValueError(f"keys not covered by the mapping: {sorted(remaining)}")
    return out


# ---------------------------------------------------------------------------------------------------------------
# MegatronBERT → FfnBert (Pre-LN, no embedding LayerNorm)
# ---------------------------------------------------------------------------------------------------------------
# Checkpoint-key renames passed as `key_mapping=` to `from_pretrained` (regexes, applied in this order, then
# FfnBert's own mapping: intermediate.dense → mlp.up_proj, output.dense → mlp.down_proj). From
# transformers/models/megatron_bert/modeling_megatron_bert.py: MegatronBertAttention.ln (before self-attention),
# MegatronBertLayer.ln (before the FFN), MegatronBertEncoder.ln (final), no embedding LayerNorm.
MEGATRON_KEY_MAPPING: dict[str, str] = {
    r"encoder\.ln\.": "encoder.final_norm.",
    r"attention\.ln\.": "attention.output.LayerNorm.",
    r"\.ln\.": ".mlp_norm.",  # what is left: encoder.layer.{i}.ln
}
# In-memory FfnBert name → MegatronBERT name (for the report), most specific first.
MEGATRON_NAME_OF: dict[str, str] = {
    "encoder.final_norm.": "encoder.ln.",
    "attention.output.LayerNorm.": "attention.ln.",
    ".mlp_norm.": ".ln.",
    ".mlp.up_proj.": ".intermediate.dense.",
    ".mlp.down_proj.": ".output.dense.",
}


def megatron_config_to_ffn_bert(config_dict: dict[str, Any], **overrides) -> FfnBertConfig:
    """FfnBert config for a MegatronBERT config dict: BERT's fields, Pre-LN, no embedding LayerNorm.

    Raises:
        ValueError: if `config_dict["model_type"]` is not "megatron-bert".
    """
    if config_dict.get("model_type") != "megatron-bert":
        raise ValueError(f"model_type must be 'megatron-bert', got {config_dict.get('model_type')!r}")
    bert_dict = {**config_dict, "model_type": "bert", "architectures": None}
    config, unused = FfnBertConfig.from_bert_dict(
        bert_dict, source="megatron-bert config", layer_norm_position="pre", embedding_layer_norm=False, **overrides
    )
    return config


def load_megatron_bert(
    checkpoint: str, model_class: type[FfnBertPreTrainedModel] = FfnBertModel, **from_pretrained_kwargs
) -> tuple[FfnBertPreTrainedModel, ConversionReport]:
    """Load a MegatronBERT checkpoint (`model_type` "megatron-bert") into an FfnBert class, exactly.

    The model is Pre-LN with `embedding_layer_norm=False`; the renames are `MEGATRON_KEY_MAPPING`, applied by
    transformers' `key_mapping`. transformers remembers the renames used at load (`model._weight_conversions`)
    and would revert them at save, writing MegatronBERT names; they are dropped here so that `save_pretrained`
    writes FfnBert's own layout (BERT names, `encoder.final_norm`), which FfnBert reloads without `key_mapping`.

    Outputs equal MegatronBERT's bit for bit with eager attention when the head size is a power of 4 (√d a power
    of two, e.g. 64): MegatronBERT divides scores by √d, BERT multiplies by d^-1/2, the same float op only then.

    Returns:
        `(model, report)`: the report lists every renamed key (`mapped`), the new keys (heads the checkpoint
        lacks) and the checkpoint keys not used.

    Raises:
        ValueError: if the checkpoint is not a MegatronBERT one.
    """
    from transformers import MegatronBertConfig

    from .parity import quiet_transformers

    source_dict = MegatronBertConfig.get_config_dict(checkpoint)[0]
    config_fields = set(FfnBertConfig.__dataclass_fields__)
    config_overrides = {k: from_pretrained_kwargs.pop(k) for k in list(from_pretrained_kwargs) if k in config_fields}
    config = megatron_config_to_ffn_bert(source_dict, **config_overrides)
    with quiet_transformers():
        model, info = model_class.from_pretrained(
            checkpoint, config=config, key_mapping=MEGATRON_KEY_MAPPING, output_loading_info=True,
            **from_pretrained_kwargs,
        )
    # Forget the load-time renames: saving then falls back to FfnBert's registered mapping (its own layout).
    model.__dict__.pop("_weight_conversions", None)
    model.eval()
    missing = set(info["missing_keys"])
    mapped, copied = [], []
    for key in model.state_dict():
        if key in missing:
            continue
        source = key
        for ours, theirs in MEGATRON_NAME_OF.items():
            source = source.replace(ours, theirs)
        if source == key:
            copied.append(key)
        else:
            mapped.append({"target": key, "source": source, "operation": "rename"})
    report = ConversionReport(
        source=str(checkpoint), model_class=model_class.__name__, init="preserving", exact=True,
        config_changes={"model_type": ["megatron-bert", "ffn_bert"], "layer_norm_position": [None, "pre"],
                        "embedding_layer_norm": [None, False]},
        copied=copied, mapped=mapped, new=sorted(missing), dropped=sorted(info["unexpected_keys"]),
    )
    return model, report


# ---------------------------------------------------------------------------------------------------------------
# Writing folders: convert a BERT checkpoint, export a default FfnBert back to plain BERT
# ---------------------------------------------------------------------------------------------------------------
REPORT_FILE = "conversion_report.json"


@contextlib.contextmanager
def atomic_output_dir(output_dir: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside `output_dir`, renamed to `output_dir` only if the block succeeds.

    Nothing is left at `output_dir` (nor the temporary folder) when the block raises.

    Raises:
        FileExistsError: if `output_dir` exists and is not an empty folder (checked before the block runs).
    """
    output = Path(output_dir)
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise FileExistsError(f"output folder {str(output)!r} exists and is not empty; choose a new path")
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}.tmp-", dir=output.parent))
    try:
        yield tmp
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # mkdtemp makes it private (0700); the result is an ordinary folder
        if output.exists():
            output.rmdir()  # empty (checked above)
        tmp.rename(output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def full_auto_map() -> dict[str, str]:
    """`auto_map` naming every FfnBert Auto class, so a saved folder loads with any of them (remote code)."""
    from . import AUTO_MAP

    return dict(AUTO_MAP)


def _save_tokenizer(checkpoint: str, folder: Path) -> bool:
    """Save the checkpoint's tokenizer files into `folder` (through AutoTokenizer); False if it has none."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    except (OSError, ValueError, TypeError):
        return False
    tokenizer.save_pretrained(folder)
    return True


def ffn_class_for(checkpoint: str) -> type[FfnBertPreTrainedModel]:
    """The FfnBert class matching the checkpoint's `architectures[0]` (`BertForMaskedLM` → `FfnBertForMaskedLM`);
    `FfnBertModel` when it names none or another one."""
    from transformers import PretrainedConfig

    from .parity import HEAD_PAIRS

    architectures = PretrainedConfig.get_config_dict(checkpoint)[0].get("architectures") or []
    by_name = {up.__name__: ours for up, ours in HEAD_PAIRS.items()} | {ours.__name__: ours for ours in HEAD_PAIRS.values()}
    return by_name.get(architectures[0], FfnBertModel) if architectures else FfnBertModel


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
) -> ConversionReport:
    """Convert a BERT checkpoint into an FfnBert folder: config (with `auto_map`), model.safetensors, the
    configuration/modeling source for `trust_remote_code`, the tokenizer files, `conversion_report.json` (with the
    measured difference from the source on the fixed input of `measure_difference`) and a model card (README.md).

    `model_class` defaults to the FfnBert twin of the checkpoint's architecture. `seed` seeds every weight the
    conversion initialises. The folder is written beside `output_dir` and renamed at the end: on any error
    nothing is left at `output_dir`.

    Raises:
        FileExistsError: `output_dir` exists and is not empty.
        ValueError: as `load_converted`.
    """
    from .model_card import write_model_card

    with atomic_output_dir(output_dir) as tmp:
        model_class = model_class or ffn_class_for(checkpoint)
        torch.manual_seed(seed)
        model, report = load_converted(
            checkpoint, model_class, ffn_type=ffn_type, layer_norm_position=layer_norm_position, init=init, width=width
        )
        measure_difference(checkpoint, model, report)
        model.config.auto_map = full_auto_map()
        model.save_pretrained(tmp)
        _save_tokenizer(checkpoint, tmp)
        report.save(str(tmp / REPORT_FILE))
        write_model_card(tmp, model, report, base_model=base_model, license=license)
    return report


def parse_cli_options(args: Any) -> dict[str, Any]:
    """`convert_checkpoint` keywords from `hf-ffn convert` arguments: comma lists become per-layer lists, a
    numeric width an int (other values are validated by `load_converted`)."""

    def names(value: str | None) -> str | list[str] | None:
        return None if value is None else (value.split(",") if "," in value else value)

    width = int(args.width) if str(args.width).isdigit() else args.width
    return {
        "ffn_type": names(args.ffn_type), "layer_norm_position": names(args.layer_norm_position), "init": args.init,
        "width": width, "seed": args.seed, "base_model": args.base_model, "license": args.license,
    }


def non_default_fields(config: FfnBertConfig) -> list[str]:
    """Why `config` is not plain BERT: one 'field=value (BERT: ...)' entry per non-default switch; [] if it is."""
    reasons = []
    if config.ffn_types != [config.hidden_act] * config.num_hidden_layers:
        reasons.append(f"ffn_type={config.ffn_type!r} (BERT: the standard FFN with hidden_act={config.hidden_act!r})")
    if config.hidden_act in ("leaky_relu", "elu", "swish"):
        reasons.append(f"hidden_act={config.hidden_act!r} is parametrised by FfnBert; BERT's ACT2FN has its own")
    if config.layer_norm_positions != ["post"] * config.num_hidden_layers:
        reasons.append(f"layer_norm_position={config.layer_norm_position!r} (BERT: 'post')")
    if not config.embedding_layer_norm:
        reasons.append("embedding_layer_norm=False (BERT: True)")
    if not config.ffn_bias:
        reasons.append("ffn_bias=False (BERT: True)")
    return reasons


_FFN_ONLY_FIELDS = (
    "ffn_type", "layer_norm_position", "embedding_layer_norm", "ffn_bias", "leaky_relu_negative_slope", "elu_alpha",
    "swish_beta", "auto_map", "model_type", "architectures",
)


def export_to_bert(source: str | os.PathLike, output_dir: str | os.PathLike) -> Path:
    """Write a default-config FfnBert folder as a plain BERT folder (`model_type` "bert") for upstream `BertModel`.

    The weights already carry BERT's names on disk; upstream loads them (strictly: no missing or unexpected key
    allowed) and saves them with a `BertConfig`. The tokenizer files are copied through AutoTokenizer.

    Raises:
        ValueError: if the config is not plain BERT, naming each non-default switch (BERT has no such FFN/LN), or
            if the checkpoint is not FfnBert / BERT.
        FileExistsError: `output_dir` exists and is not empty.
    """
    from transformers import BertConfig

    from .parity import HEAD_PAIRS, quiet_transformers

    config = FfnBertConfig.from_pretrained(source)
    reasons = non_default_fields(config)
    if reasons:
        raise ValueError(
            f"{source} cannot be exported to plain BERT: upstream BertModel has only the standard Post-LN FFN with "
            f"biases and an embedding LayerNorm, and this model differs: {'; '.join(reasons)}"
        )
    ours = ffn_class_for(str(source))
    upstream = {o: u for u, o in HEAD_PAIRS.items()}[ours]
    fields = {k: v for k, v in config.to_dict().items() if k not in _FFN_ONLY_FIELDS}
    bert_config = BertConfig.from_dict(fields)
    bert_config.architectures = [upstream.__name__]
    with atomic_output_dir(output_dir) as tmp:
        with quiet_transformers():
            model, info = upstream.from_pretrained(source, config=bert_config, output_loading_info=True)
        problems = {k: sorted(map(str, v)) for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
        if problems:
            raise ValueError(f"{source}: weights do not load strictly into {upstream.__name__}: {problems}")
        model.save_pretrained(tmp)
        _save_tokenizer(str(source), tmp)
    return Path(output_dir)


__all__ = [
    "parse_cli_options",
    "atomic_output_dir",
    "convert_checkpoint",
    "export_to_bert",
    "ffn_class_for",
    "full_auto_map",
    "non_default_fields",
    "FFN_TO_LLAMA_MLP",
    "FFN_TO_MODERNBERT_MLP",
    "KeyMap",
    "LLAMA_MLP_TO_FFN",
    "MEGATRON_KEY_MAPPING",
    "MODERNBERT_MLP_TO_FFN",
    "convert_state_dict",
    "load_megatron_bert",
    "megatron_config_to_ffn_bert",
    "ConversionReport",
    "FfnRecipe",
    "allowed_preserving_targets",
    "bert_key",
    "ffn_recipe",
    "load_converted",
    "measure_difference",
    "output_difference",
]
