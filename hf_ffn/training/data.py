"""Data for fine-tuning and MLM: the classification splits a `ClassificationDataArguments` names
(`load_classification_datasets`, over the readers of `hf_ffn.training.readers`), column and label checks, MLM blocks
and the MLM collators.

Everything that can be wrong with the input (a missing or empty file, a column that does not exist, labels that
differ between splits) raises before any training starts, naming the file or field, the value and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from transformers import DataCollatorWithFlattening, PreTrainedTokenizerBase, default_data_collator

from .arguments import ClassificationDataArguments
from .corpus import documents_to_blocks, masking_collator
from .readers import (  # re-exported: hf_ffn.training.data was their home
    DATA_FILE_EXTENSIONS,
    DEFAULT_TEXT_COLUMNS,
    NOTE_FILES,
    check_data_file,
    dataset_columns,
    decode_text,
    load_label_files,
    parse_split_sizes,
    read_label_files,
    read_labelled_texts,
    read_table,
    read_text_documents,
    split_dataset,
)
from .speed import prediction_positions, prediction_rows


def load_classification_datasets(args: ClassificationDataArguments):
    """The raw splits (`DatasetDict` with train, validation and, if given, test) from the source `args` names.

    Local files are checked with `check_data_file` and read with `datasets.load_dataset("csv" | "json", ...)` (a
    .tsv file: the csv builder with `sep="\t"`). `--task` is read by `hf_ffn.training.tasks` instead.

    Raises:
        FileNotFoundError, ValueError: as `check_data_file` and `load_label_files`; ValueError if the local files
            mix formats (csv, tsv, json).
    """
    from datasets import load_dataset
    from datasets.exceptions import DatasetGenerationError

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
    """`value` as a float if it is an int/float or a string that parses as one (bools are not numbers), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def check_label_values(values, where: str, column: str) -> bool:
    """Whether the labels `values` of one split are real numbers (regression) rather than classes, after checking
    each is one or the other: a class is a string or an integer, a number an int or float (as `run_glue.py`:
    a float column means regression).

    Raises:
        ValueError: naming `--label_column`, `where` (the split) and the row for a missing label (None, NaN, an
            empty cell), a value of another type (a list, a bool...), or a text column whose labels mix
            non-integer numbers and words (a number column with a typo in it).
    """

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
    """`(text_columns, labels)`: the text column (and `--text_pair_column`, if given) and the sorted label set, or
    None for labels that are real numbers (a regression), after checking every split.

    Each split must have the text and label columns and at least one row; every label must be a class or a number
    (`check_label_values`). For classes, the label set of validation (and of a labelled test split) must equal the
    training set's; for a regression every split's labels must be numbers. Unlabelled test splits are allowed
    (predictions only).

    Raises:
        ValueError: naming the split (and its file) on a missing column, an empty split, a bad label or a differing
            label set.
    """
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
    labelled = [
        split
        for split in ("train", "validation", "test")
        if split in raw and args.label_column in raw[split].column_names
    ]
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


def sort_by_length(dataset):
    """`dataset` sorted by the length of `input_ids` (stable, so ties keep their order)."""
    lengths = [len(ids) for ids in dataset["input_ids"]]
    return dataset.select(np.argsort(lengths, kind="stable"))


class FixedOrRandomMaskCollator:
    """Masks training batches afresh each time (BERT's dynamic masking, `DataCollatorForLanguageModeling`) but
    passes batches that already carry `labels` through unchanged: the evaluation set is masked once, with a seed,
    so perplexity before and after training is measured on the same masked tokens. The masking rule:
    `masking_collator`'s. With `fixed_prediction_rows`, a batch it masks also gets `prediction_positions`
    (`hf_ffn.training.speed.prediction_positions`: a fixed number of positions per batch shape for sparse
    prediction to decode)."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        mlm_probability: float,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        fixed_prediction_rows: bool = False,
    ):
        self.mlm = masking_collator(tokenizer, mlm_probability, mask_replace_prob, random_replace_prob)
        self.mlm_probability, self.fixed_prediction_rows = mlm_probability, fixed_prediction_rows

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        if "labels" in features[0]:
            return default_data_collator(features)
        batch = self.mlm(features)
        if self.fixed_prediction_rows:
            labels = batch["labels"]
            rows = prediction_rows(labels.numel(), self.mlm_probability)
            batch["prediction_positions"] = prediction_positions(labels, rows)
        return batch


class PaddingFreeCollator:
    """Padding-free batches as transformers defines them (`DataCollatorWithFlattening`) for an encoder: the
    examples' token sequences concatenated into one row (1, total_tokens), `position_ids` (1, total_tokens)
    restarting at 0 for each, no padding. FfnBert computes each sequence as if it were alone (docs/unpadded.md).

    Unlike `DataCollatorWithFlattening` (made for causal LMs: it keeps only `input_ids`, `labels` and
    `position_ids`, and turns labels into shifted token labels), every token-level column of the features (a list
    per example: `token_type_ids`, `special_tokens_mask`, token `labels`, an all-ones `attention_mask`) is
    concatenated the same way, and a sequence-level column (one number per example, e.g. class `labels`) stays one
    per sequence, (num_sequences,): FfnBert's pooler gives one output per sequence of a padding-free batch.
    `then`, if given (e.g. MLM masking), collates the one concatenated row instead of plain tensors. Features that
    carry their own `position_ids` (blocks whose documents attend only to themselves, `documents_to_blocks`) keep
    them: each starts at 0, so the concatenated row still restarts at every block, and at every document within.
    """

    def __init__(self, then: Callable[[list[dict]], dict] | None = None):
        self.flatten = DataCollatorWithFlattening(return_tensors="pt")
        self.then = then

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        flat = self.flatten([{"input_ids": feature["input_ids"]} for feature in features])
        row, per_sequence = {}, {}
        for key, value in features[0].items():
            if isinstance(value, (list, tuple)) or (torch.is_tensor(value) and value.dim() > 0):
                row[key] = [x for feature in features for x in list(feature[key])]  # token-level: concatenated
            else:
                per_sequence[key] = torch.tensor([feature[key] for feature in features])
        batch = self.then([row]) if self.then is not None else {key: torch.tensor([v]) for key, v in row.items()}
        positions = torch.tensor([row["position_ids"]]) if "position_ids" in row else flat["position_ids"]
        return {**batch, **per_sequence, "position_ids": positions}


def mlm_blocks(documents: Sequence[str], tokenizer: PreTrainedTokenizerBase, block_size: int):
    """`documents_to_blocks` of a list of texts (an in-memory `Dataset`): a `Dataset` of `block_size`-token blocks
    with columns `input_ids` and `special_tokens_mask` (each a list of `block_size` ints per row): the documents
    tokenized ([CLS] text [SEP] each), concatenated and cut (`run_mlm.py`'s `group_texts`; the remainder shorter
    than a block is dropped, so a block starts with [CLS] only where a document starts)."""
    from datasets import Dataset

    return documents_to_blocks(Dataset.from_dict({"text": list(documents)}), tokenizer, block_size)


def calibration_ids(
    paths: list[str], tokenizer, block: int = 128, tokens: int = 65536, argument: str = "--calibration_files"
) -> torch.Tensor:
    """Calibration blocks (count, `block`) of token ids, the text a pruned conversion scores FFN units on: blocks of
    the text files/folders `paths` (`mlm_blocks`), evenly spaced over the text, at most `tokens` tokens (whole
    blocks).

    Raises:
        FileNotFoundError, ValueError: missing or empty files (naming `argument`); text shorter than one block.
    """
    blocks = mlm_blocks([text for _, text in read_text_documents(paths, argument=argument)], tokenizer, block)
    if len(blocks) == 0:
        raise ValueError(f"{argument}: the text is shorter than one block of {block} tokens")
    ids = torch.tensor(blocks["input_ids"])
    count = max(1, min(len(ids), tokens // block))
    return ids[torch.linspace(0, len(ids) - 1, count).round().long()]


__all__ = [
    "calibration_ids",
    "DATA_FILE_EXTENSIONS",
    "DEFAULT_TEXT_COLUMNS",
    "FixedOrRandomMaskCollator",
    "PaddingFreeCollator",
    "check_columns_and_labels",
    "check_label_values",
    "check_data_file",
    "decode_text",
    "load_classification_datasets",
    "NOTE_FILES",
    "dataset_columns",
    "load_label_files",
    "parse_split_sizes",
    "read_label_files",
    "read_labelled_texts",
    "read_table",
    "split_dataset",
    "mlm_blocks",
    "read_text_documents",
    "sort_by_length",
]
