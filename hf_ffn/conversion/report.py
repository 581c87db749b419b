"""`ConversionReport`: what a conversion did, as JSON-serialisable data (no model code, no other hf_ffn module)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ConversionReport:
    """What a conversion did, JSON-serialisable. Target keys are the model's in-memory names, source keys the
    checkpoint's (`hf_ffn.checkpoint_names`).

    Attributes:
        source: the checkpoint converted. model_class: the FfnBert class it was loaded into.
        init: "preserving" or "fresh". exact: whether the converted encoder computes exactly the source's function
            (every layer "unchanged"/"exact", LayerNorm placement and embedding LayerNorm unchanged).
        config_changes: field → [source value, converted value].
        layers: per layer: source and target FFN, the recipe kind and a note.
        copied: target keys loaded unchanged from the checkpoint.
        mapped: {"target", "source" (checkpoint name or None for a constant), "operation"} for each weight a recipe
            or a rename set.
        new: target keys newly initialised (as BERT initialises).
        dropped: checkpoint weights not used.
        difference: measured output difference from the source model (`measure_difference`), when measured.
        source_path: `source` resolved, when it is a local folder.
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
    source_path: str | None = None

    def __post_init__(self) -> None:
        # a local source also resolved, so that `hf-ffn heal` finds the teacher from any folder (`conversion_source`)
        if self.source_path is None and Path(self.source).is_dir():
            self.source_path = str(Path(self.source).resolve())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """A few human-readable lines: what was converted, whether exactly, and the measured difference."""
        preserving = "exact, function-preserving" if self.exact else "not function-preserving"
        lines = [f"{self.source} -> {self.model_class} (init={self.init}, {preserving})"]
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


__all__ = ["ConversionReport"]
