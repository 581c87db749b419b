"""Healing converted BERTs: `hf-ffn heal` (`run.run_healing`) and its parts, `data`, `layerwise`, `distill`,
`metrics` and `healed_folder`. docs/healing.md."""

from .distill import DistillationLoss, DistillationTrainer, dropout_off
from .layerwise import LayerwiseArguments
from .metrics import compare_to_teacher, linear_probe
from .run import HealArguments, run_healing

__all__ = [
    "DistillationLoss",
    "DistillationTrainer",
    "HealArguments",
    "LayerwiseArguments",
    "compare_to_teacher",
    "dropout_off",
    "linear_probe",
    "run_healing",
]
