"""The data arguments of `hf-ffn finetune` (`ClassificationDataArguments`, for `HfArgumentParser` beside
`hf_ffn.training.arguments.ModelArguments` and `TrainingArguments`) and their checks."""

from __future__ import annotations

from dataclasses import dataclass

from ..training.arguments import DEFAULT_MAX_SEQ_LENGTH, check_numeric_options, option
from .readers import DEFAULT_SPLIT
from .tasks import TASKS, get_task


def check_task_columns(args: ClassificationDataArguments) -> None:
    """`--task` reads its own columns: refuse column flags it would ignore (`ValueError` naming them)."""
    columns = {"text_column": None, "text_pair_column": None, "label_column": "label"}  # the defaults
    changed = [
        f"--{name} {getattr(args, name)!r}" for name, default in columns.items() if getattr(args, name) != default
    ]
    if args.task is not None and changed:
        raise ValueError(
            f"--task {args.task} reads its own columns; drop {', '.join(changed)} (column flags apply "
            f"to --train_file and --dataset_name data)"
        )


@dataclass
class ClassificationDataArguments:
    """Where the labelled text comes from: one of the named tasks (`--task` with `--data_dir`, see
    `hf_ffn.finetune.tasks`), local csv/tsv/json/jsonl files, a folder with one text file per label (`--label_dir`,
    split by `--split_sizes` and `--split_seed`), or a `datasets` dataset.
    A second text column (`--text_pair_column`) makes the inputs BERT sentence pairs; real-number labels make the
    run a regression (`num_labels=1`, MSE), as in transformers' `run_glue.py`."""

    task: str | None = option(
        None,
        f"A named task: {', '.join(TASKS)}. It is read from --data_dir with its own columns, splits and metric, and "
        "trained with its recipe (BERT's GLUE recipe) for every training option not given "
        "(hf_ffn.finetune.tasks.TASKS).",
    )
    data_dir: str | None = option(None, "The folder holding --task's files (that task's folder of the data).")
    train_file: str | None = option(None, "A csv, tsv, json or jsonl file with the training data.")
    validation_file: str | None = option(None, "The validation file, in the same format (required with --train_file).")
    test_file: str | None = option(None, "The test file, in the same format; labels are optional.")
    dataset_name: str | None = option(None, "A dataset on the hub (needs hub access).")
    dataset_config_name: str | None = option(None, "The hub dataset's configuration.")
    label_dir: str | None = option(
        None,
        "A folder with one text file per label, one example per line (pos.txt, neg.txt: the label is the file's stem, "
        "or its extension when all files share a stem); split seeded into train, validation and test by --split_sizes.",
    )
    split_sizes: str = option(
        DEFAULT_SPLIT, "The train,validation,test sizes of --label_dir's split: three row counts or three fractions."
    )
    split_seed: int = option(
        42, "The seed of the --label_dir split (fixed: the same split for every run on the same files)."
    )
    text_column: str | None = option(None, "The text column. Default: 'text' or 'sentence'.")
    text_pair_column: str | None = option(
        None, "A second text column: the inputs become BERT pairs ([SEP] between, token_type_ids)."
    )
    label_column: str = option("label", "The label column.")
    max_seq_length: int | None = option(
        None,
        f"Inputs are truncated to this many tokens ([CLS] and [SEP] included), at most the checkpoint's "
        f"max_position_embeddings. Default: {DEFAULT_MAX_SEQ_LENGTH}, or the checkpoint's max_position_embeddings when "
        "it has fewer.",
    )
    max_train_samples: int | None = option(None, "Use only the first N training rows.")
    max_eval_samples: int | None = option(None, "Use only the first N validation rows.")
    max_test_samples: int | None = option(None, "Use only the first N test rows.")

    def __post_init__(self) -> None:
        sources = [
            name for name in ("task", "train_file", "dataset_name", "label_dir") if getattr(self, name) is not None
        ]
        if len(sources) != 1:
            raise ValueError(
                f"give exactly one data source: --task (with --data_dir), --train_file (with --validation_file), "
                f"--label_dir or --dataset_name; got {sources or 'none'}"
            )
        if self.task is not None:
            get_task(self.task)  # an unknown name is refused now, naming the allowed ones
        if (self.task is None) != (self.data_dir is None):
            raise ValueError(
                f"--task and --data_dir go together; got --task {self.task!r}, --data_dir {self.data_dir!r}"
            )
        if self.train_file is not None and self.validation_file is None:
            raise ValueError("--validation_file is required with --train_file (the label set is checked against it)")
        check_numeric_options(self)  # again with the training options and the checkpoint's length by the run
