"""Checkpoint layouts as data: every weight name FfnBert reads or writes, and the renames derived from them.

One table per layout; everything else (transformers' weight renames for `model_type="ffn_bert"`, the inverse
maps used in reports, the `load_state_dict` pre-hook, key classification) is computed from these tables.

    layout        table                        checkpoint name (on disk)        FfnBert name (in memory)
    BERT          `BERT_FFN_NAMES`             encoder.layer.{i}.intermediate.dense   encoder.layer.{i}.mlp.up_proj
                                               encoder.layer.{i}.output.dense         encoder.layer.{i}.mlp.down_proj
                                               encoder.layer.{i}.output.LayerNorm     encoder.layer.{i}.mlp_norm
    TF-era BERT   `LEGACY_PARAMETER_NAMES`     ...LayerNorm.gamma / .beta             ...weight / .bias
    MegatronBERT  `MEGATRON_NAMES`             encoder.ln                             encoder.final_norm
                  (+ BERT's FFN projections)   encoder.layer.{i}.attention.ln         ...attention.output.LayerNorm
                                               encoder.layer.{i}.ln                   encoder.layer.{i}.mlp_norm
    Llama MLP     `LLAMA_MLP_TO_FFN`           gate_proj / up_proj / down_proj        the same
    ModernBERT    `MODERNBERT_MLP_TO_FFN`      Wi (fused [gate; up]) / Wo             gate_proj + up_proj / down_proj

Weights only FfnBert has (`FFN_BERT_ONLY_NAMES`) carry their in-memory name on disk too; every weight BERT has keeps
BERT's name on disk, so BERT checkpoints load with no missing or unexpected keys and a default-config FfnBert
checkpoint loads into upstream `BertModel`. Module names say `mlp`, as transformers' own FFNs do (`LlamaMLP`), so
PEFT `target_modules` read the same; API and config names say `ffn`. The attention block is upstream
`BertAttention` itself, so its LayerNorm keeps the name `attention.output.LayerNorm` in both placements.

This file imports only transformers: `save_pretrained` ships it beside a saved model for `trust_remote_code`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from transformers.conversion_mapping import get_checkpoint_conversion_mapping, register_checkpoint_conversion_mapping
from transformers.core_model_loading import Chunk, ConversionOps, WeightRenaming

MODEL_TYPE = "ffn_bert"

# BERT's FFN names (on disk) → FfnBert's (in memory), relative to `encoder.layer.{i}`.
BERT_FFN_NAMES: dict[str, str] = {
    "intermediate.dense": "mlp.up_proj",
    "output.dense": "mlp.down_proj",
    "output.LayerNorm": "mlp_norm",
}
# Weights that only FfnBert variants have: new when a BERT checkpoint loads into a gated or Pre-LN variant.
GATE_PROJ = "mlp.gate_proj"  # relative to encoder.layer.{i}; gated FFNs only
FINAL_NORM = "encoder.final_norm"  # relative to the base model; a Pre-LN last layer only
FFN_BERT_ONLY_NAMES: tuple[str, ...] = (GATE_PROJ, FINAL_NORM)
# TF-era BERT checkpoints name LayerNorm parameters gamma/beta.
LEGACY_PARAMETER_NAMES: dict[str, str] = {"gamma": "weight", "beta": "bias"}

# The same as regexes for transformers' weight conversion (and the pre-hook); `(?<!attention\.)` keeps the attention
# block's `attention.output.dense` / `attention.output.LayerNorm` (upstream `BertAttention`, unchanged) out of it.
CHECKPOINT_KEY_MAPPING: dict[str, str] = {
    r"(?<!attention\.)" + re.escape(bert + "."): ours + "." for bert, ours in BERT_FFN_NAMES.items()
}
# After the rename `output.LayerNorm.gamma` is `mlp_norm.gamma`, which transformers' "legacy" renames no longer see:
# the pre-hook renames it with this map, transformers' weight conversion with `ParameterAliasRenaming`.
LEGACY_KEY_MAPPING: dict[str, str] = {
    re.escape(f"{BERT_FFN_NAMES['output.LayerNorm']}.{old}"): f"{BERT_FFN_NAMES['output.LayerNorm']}.{new}"
    for old, new in LEGACY_PARAMETER_NAMES.items()
}
# In-memory FFN names → BERT's names, as substrings of a full key.
BERT_NAME_OF: dict[str, str] = {f".{ours}.": f".{bert}." for bert, ours in BERT_FFN_NAMES.items()}


def bert_key(key: str) -> str:
    """BERT's (on-disk) name for an in-memory FfnBert key (`...mlp.up_proj.weight` → `...intermediate.dense.weight`);
    keys without an FFN name are returned unchanged."""
    for ours, theirs in BERT_NAME_OF.items():
        key = key.replace(ours, theirs)
    return key


def memory_key(key: str) -> str:
    """FfnBert's in-memory name for a checkpoint key in BERT's layout (gamma/beta included); `bert_key`'s inverse."""
    for pattern, replacement in {**CHECKPOINT_KEY_MAPPING, **LEGACY_KEY_MAPPING}.items():
        key = re.sub(pattern, replacement, key)
    return key


def is_ffn_key(key: str) -> bool:
    """Whether an in-memory key belongs to a layer's FFN projections (`encoder.layer.{i}.mlp.*`)."""
    return re.search(r"encoder\.layer\.\d+\.mlp\.", key) is not None


def is_variant_key(key: str) -> bool:
    """Whether an in-memory key is one a variant changes or adds: an FFN projection or `encoder.final_norm`."""
    return is_ffn_key(key) or f"{FINAL_NORM}." in key


class ParameterAliasRenaming(WeightRenaming):
    r"""Load one parameter saved under today's name or its TF-era alias; save it under the name its source had.

    `ParameterAliasRenaming("output.LayerNorm", "weight", "gamma", "mlp_norm.weight", not_after="attention.")` renames
    `...output.LayerNorm.weight` and `.gamma` (not `...attention.output.LayerNorm.*`) to `...mlp_norm.weight`. Its one
    source pattern matches today's name, as transformers' `test_reverse_loading_mapping` requires; a re-saved TF-era
    checkpoint keeps its alias, as transformers' own "legacy" renames do.
    """

    __slots__ = ("saved_name", "alias_name", "alias_loaded")

    def __init__(self, module: str, name: str, alias: str, target: str, not_after: str = ""):
        guard = f"(?<!{re.escape(not_after)})" if not_after else ""
        super().__init__(rf"{guard}{re.escape(module)}\.(?:{re.escape(name)}|{re.escape(alias)})", target)
        self.saved_name, self.alias_name = f"{module}.{name}", f"{module}.{alias}"
        self.alias_loaded = False

    def rename_source_key(self, source_key: str) -> tuple[str, str | None]:
        renamed, pattern = super().rename_source_key(source_key)
        if pattern is not None and source_key.endswith(self.alias_name):
            self.alias_loaded = True
        return renamed, pattern

    def reverse_transform(self) -> WeightRenaming:
        saved = self.alias_name if self.alias_loaded else self.saved_name
        reverse = WeightRenaming(source_patterns=re.escape(self.target_patterns[0]), target_patterns=saved)
        for scope in ("scope_prefix", "base_model_prefix"):  # transformers >= 5.x scopes sub-model transforms
            if hasattr(self, scope):
                setattr(reverse, scope, getattr(self, scope))
        return reverse


def weight_renamings() -> list[WeightRenaming]:
    """FfnBert's weight-conversion mapping: BERT's FFN names → in-memory names, and the FFN LayerNorm's
    `weight`/`bias` (TF-era: `gamma`/`beta`) → `mlp_norm.weight`/`.bias`."""
    norm = BERT_FFN_NAMES["output.LayerNorm"]
    renames: list[WeightRenaming] = [
        WeightRenaming(source, target) for source, target in CHECKPOINT_KEY_MAPPING.items() if target != f"{norm}."
    ]
    return renames + [
        ParameterAliasRenaming("output.LayerNorm", new, old, f"{norm}.{new}", not_after="attention.")
        for old, new in LEGACY_PARAMETER_NAMES.items()
    ]


def register_weight_renamings(model_type: str = MODEL_TYPE) -> None:
    """Register `weight_renamings()` for `model_type` ("ffn_bert"; a family sharing FfnBert's encoder passes its own)
    (once; later calls keep the first registration)."""
    if get_checkpoint_conversion_mapping(model_type) is None:
        register_checkpoint_conversion_mapping(model_type, weight_renamings())


def rename_to_memory_keys(module, state_dict: dict, prefix: str, *args) -> None:
    """`load_state_dict` pre-hook (each `FfnBertLayer`'s): rename the keys under `prefix` from the on-disk layout to
    the in-memory one. Trainer's `resume_from_checkpoint` calls `load_state_dict(strict=False)`, which applies no
    weight conversion: without this hook every FFN weight would silently stay as initialised."""
    for key in [key for key in state_dict if key.startswith(prefix)]:
        renamed = prefix + memory_key(key[len(prefix) :])
        if renamed != key:
            state_dict[renamed] = state_dict.pop(key)


# MegatronBERT's (Pre-LN) names → FfnBert's, most specific first (MegatronBertEncoder.ln, MegatronBertAttention.ln,
# MegatronBertLayer.ln); its FFN projections carry BERT's names.
MEGATRON_NAMES: dict[str, str] = {
    "encoder.ln": FINAL_NORM,
    "attention.ln": "attention.output.LayerNorm",
    "ln": BERT_FFN_NAMES["output.LayerNorm"],  # what is left: encoder.layer.{i}.ln
}
# `from_pretrained(key_mapping=...)` renames, in this order. `(?<![^.])`: the name starts the key or follows a dot.
MEGATRON_KEY_MAPPING: dict[str, str] = {
    r"(?<![^.])" + re.escape(theirs + "."): ours + "." for theirs, ours in MEGATRON_NAMES.items()
}
# In-memory FfnBert name → MegatronBERT name (for reports), as substrings of a full key.
MEGATRON_NAME_OF: dict[str, str] = {f"{ours}.": f"{theirs}." for theirs, ours in MEGATRON_NAMES.items()} | {
    f".{ours}.": f".{bert}." for bert, ours in BERT_FFN_NAMES.items() if ours not in MEGATRON_NAMES.values()
}


def megatron_key(key: str) -> str:
    """MegatronBERT's name for an in-memory FfnBert key (`...encoder.final_norm.weight` → `...encoder.ln.weight`)."""
    for ours, theirs in MEGATRON_NAME_OF.items():
        key = key.replace(ours, theirs)
    return key


# ---------------------------------------------------------------------------------------------------------------
# RoBERTa-PreLayerNorm (Pre-LN RoBERTa; its embeddings keep their LayerNorm)
# ---------------------------------------------------------------------------------------------------------------
# RoBERTa-PreLayerNorm's names → FfnRoberta's. From transformers/models/roberta_prelayernorm/
# modeling_roberta_prelayernorm.py: the base model is `roberta_prelayernorm`, its `LayerNorm` follows the encoder
# (final), `RobertaPreLayerNormAttention.LayerNorm` precedes self-attention, `RobertaPreLayerNormIntermediate.LayerNorm`
# the FFN; the FFN projections carry BERT's names (`BERT_FFN_NAMES`).
PRELAYERNORM_NAMES: dict[str, str] = {
    "attention.LayerNorm": "attention.output.LayerNorm",
    "intermediate.LayerNorm": BERT_FFN_NAMES["output.LayerNorm"],
}
# `key_mapping=` for `from_pretrained`, in this order: the prefix, the final norm of a head's or of a base model's
# checkpoint, then the layers' norms (FfnBert's own mapping then renames the FFN projections).
PRELAYERNORM_KEY_MAPPING: dict[str, str] = {
    r"^roberta_prelayernorm\.": "roberta.",
    r"^roberta\.LayerNorm\.": f"roberta.{FINAL_NORM}.",
    r"^LayerNorm\.": f"{FINAL_NORM}.",
} | {r"(?<![^.])" + re.escape(theirs + "."): ours + "." for theirs, ours in PRELAYERNORM_NAMES.items()}


@dataclass(frozen=True)
class KeyMap:
    """One entry of a state-dict mapping: `source` keys → `target` keys, through a transformers `ConversionOps`
    (`Chunk`, ...; None: a plain rename)."""

    source: tuple[str, ...]
    target: tuple[str, ...]
    op: ConversionOps | None = None

    def reversed(self) -> KeyMap:
        return KeyMap(self.target, self.source, self.op.reverse_op if self.op is not None else None)


# transformers' `LlamaMLP` = `FfnBertGatedMLP` with ffn_type="swiglu", same names (no bias by default: ffn_bias=False).
LLAMA_MLP_TO_FFN: tuple[KeyMap, ...] = tuple(
    KeyMap((f"{proj}.{p}",), (f"{proj}.{p}",))
    for proj in ("gate_proj", "up_proj", "down_proj")
    for p in ("weight", "bias")
)
# transformers' `ModernBertMLP`: `input, gate = Wi(x).chunk(2, dim=-1); Wo(act(input) * gate)`. Its *linear* half is
# called "gate"; here (as in Llama) gate_proj is the activated half: Wi's first half → gate_proj, second → up_proj.
# act "gelu" by default: ffn_type="geglu".
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


__all__ = [
    "BERT_FFN_NAMES",
    "BERT_NAME_OF",
    "CHECKPOINT_KEY_MAPPING",
    "FFN_BERT_ONLY_NAMES",
    "FINAL_NORM",
    "GATE_PROJ",
    "FFN_TO_LLAMA_MLP",
    "FFN_TO_MODERNBERT_MLP",
    "KeyMap",
    "LEGACY_KEY_MAPPING",
    "LEGACY_PARAMETER_NAMES",
    "LLAMA_MLP_TO_FFN",
    "MEGATRON_KEY_MAPPING",
    "MEGATRON_NAMES",
    "MEGATRON_NAME_OF",
    "MODERNBERT_MLP_TO_FFN",
    "MODEL_TYPE",
    "PRELAYERNORM_KEY_MAPPING",
    "PRELAYERNORM_NAMES",
    "ParameterAliasRenaming",
    "bert_key",
    "is_ffn_key",
    "is_variant_key",
    "megatron_key",
    "memory_key",
    "register_weight_renamings",
    "rename_to_memory_keys",
    "reverse_key_maps",
    "weight_renamings",
]
