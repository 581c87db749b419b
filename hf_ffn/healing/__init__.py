"""Healing converted BERTs (`hf-ffn heal`, `run.run_healing`): distil a converted FfnBert (the student) from its source
checkpoint (the teacher) layer by layer (`layerwise`) and/or end to end (`distill`), on the text `data` reads, measured
on held-out text (`metrics`), written as a converted folder (`healed_folder`). docs/healing.md.
"""

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
