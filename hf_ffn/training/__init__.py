"""Fine-tuning FfnBert variants with transformers' `Trainer`.

`finetune` (and `finetune_main(argv)`, behind `hf-ffn finetune` and `scripts/finetune_classification.py`) fine-tunes
on a task preset or your own data with the preset's recipe and prints one summary line with the task score;
`scripts/finetune_mlm.py` wraps `run_mlm`. They follow transformers' `run_glue.py` / `run_mlm.py`:
`HfArgumentParser` over `ModelArguments`, a data-argument dataclass and `TrainingArguments`).

Modules, one job each:

- `arguments`: the `HfArgumentParser` dataclasses and their checks (the numeric options' table `NUMERIC_OPTIONS`,
  `check_numeric_options`), `parse_arguments` (argv or one .json file).
- `readers`: the readers of labelled text (`read_label_files`: a folder with one file per label; `read_table`: a
  csv/tsv/json file with named columns; a `datasets` dataset; `read_labelled_texts` picks one), the seeded split
  (`split_dataset`), data-file checks, plain-text documents (`read_text_documents`, a folder of text files, UTF-8
  else Latin-1).
- `corpus`: the MLM data path through `datasets`, corpus → documents → blocks → masks (`load_corpus`,
  `documents_to_blocks`, `fixed_maskings`; compressed text, json or parquet files, cached tokenization).
- `data`: the classification splits (`load_classification_datasets`), column and label checks, MLM blocks of a
  list of texts (`mlm_blocks`) and the MLM collators.
- `outputs`: checkpoint and tokenizer loading, output-folder checks, the finished save (`save_finished`: nothing
  that loads as a model until every file is written), the final evaluation, the model card.
- `classification`: `run_classification` (single sentences or pairs, classes or regression), its metrics and their
  baseline (`baseline_metrics`: the majority class, or a regression's mean label).
- `tasks`: the task presets (`TASKS`, `--task NAME`): their readers, columns, splits, metrics and `Recipe`s.
- `finetuning`: `finetune` / `finetune_main`, the preset rule (`apply_recipe`), the default output folder
  (`default_output_dir`, under out/finetune/) and the summary line with its baseline (`summarize`).
- `mlm`: `mlm_trainer` (the one MLM training path, also used by the Pre-/Post-LN study).
- `mlm_metrics`: the MLM evaluation metrics (loss on [MASK] positions, token loss, accuracy), O(tokens) memory.
- `floors`: the context-free floors of an MLM evaluation (the [MASK]-position unigram floor, the copy-aware
  context-free floor) on its fixed maskings.
- `initialisation`: `seed_by_name` (each module's initial weights from seed and module name: the FFN variants of
  a seed share every other weight) and `ffn_output_rms` (each layer's FFN output size at the start).
- `throughput`: `ThroughputCallback`, tokens per second and achieved GFLOP/s in the training log.
- `config_overrides`: `--config_overrides` (`run_mlm.py`'s), checked against what a run may change.
- `early_stopping`: `--early_stopping_patience`, transformers' `EarlyStoppingCallback` and the arguments it needs.
- `pretraining`: `run_pretraining` (from scratch or continued; `hf-ffn mlm`), `run_mlm` (the same run from a
  checkpoint, `scripts/finetune_mlm.py`), `train_tokenizer`.

Everything that can be wrong with the input (a missing or empty data file, a column that does not exist, labels
that differ between splits, a checkpoint path that does not exist, a bad variant switch) raises before any
training starts, naming the file or field, the value and what is allowed.
"""

from .arguments import (
    DEFAULT_SPLIT,
    EXIT_BAD_INPUT,
    RESUME_LAST,
    ClassificationDataArguments,
    MlmDataArguments,
    ModelArguments,
    bad_input_exits,
    check_numeric_options,
    fresh_output_dir,
    given_options,
    parse_arguments,
    resume_checkpoint,
)
from .classification import baseline_metrics, classification_metrics, regression_metrics, run_classification
from .corpus import (
    documents_to_blocks,
    fixed_maskings,
    held_out_split,
    load_corpus,
    load_hub_corpus,
    masking_collator,
)
from .data import (
    DATA_FILE_EXTENSIONS,
    DEFAULT_TEXT_COLUMNS,
    FixedOrRandomMaskCollator,
    PaddingFreeCollator,
    calibration_ids,
    check_columns_and_labels,
    check_data_file,
    check_label_values,
    dataset_columns,
    decode_text,
    load_classification_datasets,
    load_label_files,
    mlm_blocks,
    parse_split_sizes,
    read_label_files,
    read_labelled_texts,
    read_table,
    read_text_documents,
    sort_by_length,
    split_dataset,
)
from .finetuning import (
    apply_recipe,
    default_output_dir,
    finetune,
    finetune_argv,
    finetune_given_options,
    finetune_main,
    finetune_parser,
    run_finetuning,
    summarize,
)
from .mlm import mlm_trainer
from .outputs import (
    STAGING_FOLDER,
    check_checkpoint,
    check_not_started,
    check_output_dir,
    checkpoint_unpad_tokens,
    final_evaluation,
    load_model,
    load_tokenizer,
    model_card,
    save_finished,
    save_outputs,
    training_seconds,
)
from .pretraining import (
    PretrainingArguments,
    PretrainingDataArguments,
    pretraining_main,
    run_mlm,
    run_pretraining,
    train_tokenizer,
)
from .tasks import GLUE_RECIPE, TASKS, Recipe, Task, get_task, load_cola, load_mrpc, load_stsb, read_stsb, task_score

__all__ = [
    "EXIT_BAD_INPUT",
    "bad_input_exits",
    "calibration_ids",
    "GLUE_RECIPE",
    "TASKS",
    "Recipe",
    "Task",
    "apply_recipe",
    "check_numeric_options",
    "dataset_columns",
    "default_output_dir",
    "finetune",
    "finetune_argv",
    "finetune_main",
    "finetune_parser",
    "finetune_given_options",
    "fresh_output_dir",
    "given_options",
    "load_label_files",
    "parse_split_sizes",
    "read_label_files",
    "read_labelled_texts",
    "read_table",
    "run_finetuning",
    "split_dataset",
    "summarize",
    "check_label_values",
    "get_task",
    "load_cola",
    "load_mrpc",
    "load_stsb",
    "read_stsb",
    "task_score",
    "ClassificationDataArguments",
    "DATA_FILE_EXTENSIONS",
    "DEFAULT_TEXT_COLUMNS",
    "FixedOrRandomMaskCollator",
    "PaddingFreeCollator",
    "MlmDataArguments",
    "ModelArguments",
    "RESUME_LAST",
    "DEFAULT_SPLIT",
    "parse_arguments",
    "resume_checkpoint",
    "STAGING_FOLDER",
    "check_checkpoint",
    "checkpoint_unpad_tokens",
    "check_columns_and_labels",
    "check_data_file",
    "check_not_started",
    "check_output_dir",
    "baseline_metrics",
    "classification_metrics",
    "decode_text",
    "final_evaluation",
    "load_classification_datasets",
    "load_model",
    "load_tokenizer",
    "masking_collator",
    "fixed_maskings",
    "documents_to_blocks",
    "held_out_split",
    "load_corpus",
    "load_hub_corpus",
    "mlm_blocks",
    "mlm_trainer",
    "model_card",
    "read_text_documents",
    "regression_metrics",
    "run_classification",
    "run_mlm",
    "PretrainingArguments",
    "PretrainingDataArguments",
    "pretraining_main",
    "run_pretraining",
    "train_tokenizer",
    "save_finished",
    "save_outputs",
    "sort_by_length",
    "training_seconds",
]
