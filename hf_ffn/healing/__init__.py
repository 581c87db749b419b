"""Healing converted BERTs: distil a converted FfnBert (the student) from its source checkpoint (the teacher) on
plain text, and measure how closely it reproduces the teacher on held-out snippets.

- `distill`: the loss (`DistillationLoss`), `DistillationTrainer` (transformers' `Trainer` with `compute_loss`
  overridden), which parameters train (`select_trainable`), dropout off during distillation (`dropout_off`).
- `metrics`: sentence-embedding cosine and |Δ| to the teacher (`compare_to_teacher`), the linear probe
  (`linear_probe`), both together (`measure_agreement`), the during-training curve (`AgreementCallback`).
- `layerwise`: `heal_layerwise` (`--method layerwise`): each converted layer fitted to its teacher layer (closed-form
  down projection, Adam on the FFN or the whole layer, a Pre-LN residual stream to the teacher's hidden state once
  both are normalised, `--layerwise_stream free`, or as it is, `teacher`); `layerwise_folder`: its resumable work
  folder and model-card section.
- `run`: `HealArguments` and `run_healing` (what `hf-ffn heal` and scripts/heal.py run), its summary line.
- `healed_folder`: the healed folder (`save_healed`): a converted folder with the healing record and model-card
  section (`healing_section`), keeping the student's other files (`keep_student_files`).
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
