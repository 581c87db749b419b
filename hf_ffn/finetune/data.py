"""The classification splits of `hf-ffn finetune`: read (`load_classification_datasets`), checked before any training
(`check_columns_and_labels`: each error names the file or option, the value and what is allowed) and tokenized
(`encode_splits`)."""

from __future__ import annotations

import math

import numpy as np

from .arguments import ClassificationDataArguments
from .readers import DATA_FILE_EXTENSIONS, DEFAULT_TEXT_COLUMNS, check_data_file, load_label_files
from .tasks import get_task


def load_classification_datasets(args: ClassificationDataArguments):
    """The raw splits (`DatasetDict` with train, validation and, if given, test) from the source `args` names;
    `ValueError` also when local files mix formats or do not read as one dataset."""
    from datasets import load_dataset
    from datasets.exceptions import DatasetGenerationError

    if args.task is not None:
        return get_task(args.task).load(args.data_dir)
    if args.label_dir is not None:
        return load_label_files(args.label_dir, args.split_sizes, args.split_seed)
    if args.dataset_name is not None:
        return load_dataset(args.dataset_name, args.dataset_config_name)
    files = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
    checked = {split: check_data_file(path, f"--{split}_file") for split, path in files.items() if path is not None}
    formats = {path.suffix.replace(".jsonl", ".json") for path in checked.values()}
    if len(formats) != 1:
        raise ValueError(
            f"data files mix formats ({', '.join(map(str, checked.values()))}); use one of csv, tsv or json"
        )
    builder, options = DATA_FILE_EXTENSIONS[next(iter(checked.values())).suffix]
    try:
        raw = load_dataset(builder, data_files={split: str(path) for split, path in checked.items()}, **options)
    except DatasetGenerationError as error:  # e.g. a column of numbers in train and of words in validation
        cause = error.__cause__ or error
        if isinstance(cause, UnicodeDecodeError):
            raise ValueError(
                f"the data files ({', '.join(map(str, checked.values()))}) are not all UTF-8 text ({cause}); "
                f"re-save them as UTF-8, e.g. `iconv -f latin1 -t UTF-8 FILE`"
            ) from error
        raise ValueError(
            f"the data files ({', '.join(map(str, checked.values()))}) do not read as one dataset: every file must "
            f"have the same columns with the same types (numbers in one file's label column and words in "
            f"another's?): {cause}"
        ) from error
    test = raw.get("test")
    if test is not None and args.label_column in test.column_names and set(test[args.label_column]) == {None}:
        # a test file without labels: `datasets` gives it the other files' columns, filled with None
        raw["test"] = test.remove_columns(args.label_column)
    return raw


def _as_number(value) -> float | None:
    """`value` as a float if it is a number or a string that parses as one (not a bool), else None."""
    try:
        return None if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None


def check_label_values(values, where: str, column: str) -> bool:
    """Whether the labels `values` of one split are real numbers (regression: a float column, as in `run_glue.py`)
    rather than classes (strings or integers); `ValueError` naming the row of a missing label, a value of another
    type, or a word among non-integer numbers (a typo in a number column)."""

    def refuse(row: int, value, why: str):
        raise ValueError(
            f"--label_column {column!r}: row {row} of the {where} has label {value!r} ({why}); a label "
            f"must be a class (a string or an integer) or a real number (regression)"
        )

    fractional = word = None
    for row, value in enumerate(values):
        if value is None or (isinstance(value, float) and math.isnan(value)):
            refuse(row, value, "missing")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            refuse(row, value, f"a {type(value).__name__}")
        number = _as_number(value)
        if isinstance(value, str):
            if number is None and word is None:
                word = (row, value)
            elif number is not None and not number.is_integer() and fractional is None:
                fractional = (row, value)
    if word is not None and fractional is not None:
        refuse(*word, f"a word among numbers such as {fractional[1]!r} in row {fractional[0]}")
    return any(isinstance(value, float) for value in values)


def check_columns_and_labels(raw, args: ClassificationDataArguments) -> tuple[tuple[str, ...], list | None]:
    """`(text_columns, labels)`: the text column (and `--text_pair_column`) and the sorted label set, or None for a
    regression, after checking that every split has the columns and a row, and that every labelled split has the
    training split's label set (classes) or only numbers (regression); a test split may be unlabelled. Errors name
    the split and its file."""
    sources = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}

    def where(split: str) -> str:
        return f"{split} split ({sources[split]})" if sources.get(split) else f"{split} split"

    for split in ("train", "validation"):
        if split not in raw:
            raise ValueError(f"the data has no {split} split; splits found: {', '.join(raw)}")
    text_column = args.text_column
    if text_column is None:
        found = [name for name in DEFAULT_TEXT_COLUMNS if name in raw["train"].column_names]
        if not found:
            raise ValueError(
                f"--text_column not given and the {where('train')} has none of {DEFAULT_TEXT_COLUMNS}; columns: "
                f"{', '.join(raw['train'].column_names)}"
            )
        text_column = found[0]
    text_columns = (text_column,) if args.text_pair_column is None else (text_column, args.text_pair_column)
    options = {
        text_column: "--text_column",
        args.text_pair_column: "--text_pair_column",
        args.label_column: "--label_column",
    }
    for split, dataset in raw.items():
        if len(dataset) == 0:
            raise ValueError(f"the {where(split)} has no rows")
        columns = dataset.column_names
        needed = list(text_columns) + ([args.label_column] if split != "test" else [])
        for column in needed:
            if column not in columns:
                raise ValueError(
                    f"{options[column]}: column {column!r} does not exist in the {where(split)}; columns: "
                    f"{', '.join(columns)}"
                )
    labelled = [s for s in ("train", "validation", "test") if s in raw and args.label_column in raw[s].column_names]
    is_number = {
        split: check_label_values(raw[split][args.label_column], where(split), args.label_column) for split in labelled
    }
    if is_number["train"]:
        for split in labelled:
            for row, value in enumerate(raw[split][args.label_column]):
                if _as_number(value) is None:
                    raise ValueError(
                        f"--label_column {args.label_column!r}: the training labels are real numbers "
                        f"(a regression), but row {row} of the {where(split)} has label {value!r}"
                    )
        return text_columns, None
    train_labels = set(raw["train"][args.label_column])
    for split in labelled[1:]:
        labels = set(raw[split][args.label_column])
        if labels != train_labels:
            raise ValueError(
                f"--label_column {args.label_column!r}: the label set of the {where(split)} differs from the training "
                f"split's: only in {split}: {sorted(labels - train_labels, key=str)}, only in train: "
                f"{sorted(train_labels - labels, key=str)}"
            )
    if len(train_labels) < 2:
        raise ValueError(f"--label_column {args.label_column!r} has one label in the {where('train')}: {train_labels}")
    return text_columns, sorted(train_labels, key=str)


def encode_splits(
    raw, tokenizer, text_columns: tuple[str, ...], labels: list | None, args: ClassificationDataArguments
):
    """The tokenized splits, the first `--max_*_samples` rows of each, labels as class ids (floats for a regression);
    a labelled validation or test split sorted shortest first (less padding; the metrics do not depend on the
    order), an unlabelled test split kept in order, so its predictions line up with the file."""
    label2id = {} if labels is None else {label: i for i, label in enumerate(labels)}

    def encode(batch: dict) -> dict:
        # one column: [CLS] a [SEP]; two: [CLS] a [SEP] b [SEP] with token_type_ids 0…0 1…1 (truncation: longest first)
        encoded = tokenizer(
            *(batch[column] for column in text_columns), truncation=True, max_length=args.max_seq_length
        )
        if args.label_column in batch:
            values = batch[args.label_column]
            encoded["labels"] = [float(v) for v in values] if labels is None else [label2id[v] for v in values]
        return encoded

    splits = {}
    limits = {"train": args.max_train_samples, "validation": args.max_eval_samples, "test": args.max_test_samples}
    for split, limit in limits.items():
        if split in raw:
            dataset = raw[split] if limit is None else raw[split].select(range(min(limit, len(raw[split]))))
            splits[split] = dataset.map(encode, batched=True, remove_columns=dataset.column_names)
            if split != "train" and "labels" in splits[split].column_names:  # stable: ties keep their order
                lengths = [len(ids) for ids in splits[split]["input_ids"]]
                splits[split] = splits[split].select(np.argsort(lengths, kind="stable"))
    return splits
