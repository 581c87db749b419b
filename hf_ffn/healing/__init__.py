"""Healing converted BERTs: distil a converted FfnBert (the student) from its source checkpoint (the teacher), end to
end (`distill`) or layer by layer (`layerwise`, `layerwise_folder`), measure it on held-out text (`metrics`) and write
the healed folder (`healed_folder`); `run` is what `hf-ffn heal` runs.
"""

from .distill import (
    HIDDEN_LOSSES,
    LAYER_CHOICES,
    TRAIN_PARTS,
    DistillationLoss,
    DistillationTrainer,
    dropout_off,
    encoder_outputs,
    is_trainable,
    select_trainable,
)
from .healed_folder import healing_section, keep_student_files, save_healed
from .layerwise import LayerwiseArguments, heal_layerwise
from .metrics import (
    AgreementCallback,
    compare_to_teacher,
    linear_probe,
    mean_pool,
    measure_agreement,
    subset_indices,
)
from .run import (
    HEALING_FILE,
    HealArguments,
    HealModels,
    check_models,
    healing_summary,
    run_healing,
)

__all__ = [
    "AgreementCallback",
    "DistillationLoss",
    "DistillationTrainer",
    "HIDDEN_LOSSES",
    "HEALING_FILE",
    "HealArguments",
    "LAYER_CHOICES",
    "LayerwiseArguments",
    "TRAIN_PARTS",
    "HealModels",
    "check_models",
    "compare_to_teacher",
    "dropout_off",
    "encoder_outputs",
    "heal_layerwise",
    "healing_section",
    "healing_summary",
    "is_trainable",
    "keep_student_files",
    "linear_probe",
    "mean_pool",
    "measure_agreement",
    "run_healing",
    "save_healed",
    "select_trainable",
    "subset_indices",
]
