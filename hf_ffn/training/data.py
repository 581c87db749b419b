"""Data for fine-tuning, healing and MLM: the readers of any labelled text (a folder with one text file per label,
a csv / tsv / json file with named columns, a `datasets` dataset; `read_labelled_texts` picks one), the seeded
train / validation / test split, checked local files, column and label checks, plain-text documents (a folder of
text files), MLM blocks and the MLM collators.

Everything that can be wrong with the input (a missing or empty file, a column that does not exist, labels that
differ between splits) raises before any training starts, naming the file or field, the value and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from transformers import (
    DataCollatorForLanguageModeling,
    DataCollatorWithFlattening,
    PreTrainedTokenizerBase,
    default_data_collator,
)

from ..checkpoints import looks_local
from .arguments import DEFAULT_SPLIT, ClassificationDataArguments

# file extension → (`datasets` builder, its options); .tsv is the csv builder with tabs
DATA_FILE_EXTENSIONS = {".csv": ("csv", {}), ".tsv": ("csv", {"sep": "\t"}), ".json": ("json", {}),
                        ".jsonl": ("json", {})}
DEFAULT_TEXT_COLUMNS = ("text", "sentence")


def check_data_file(path: str, argument: str) -> Path:
    """`path` as a `Path` after checking it exists, is a csv/tsv/json/jsonl file and is not empty.

    Raises:
        FileNotFoundError: if `path` does not exist or is not a file.
        ValueError: on an unsupported extension, an empty (or whitespace-only) file, or a csv/tsv file with a header
            line only.
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{argument}: data file {str(file)!r} does not exist (or is not a file)")
    if file.suffix not in DATA_FILE_EXTENSIONS:
        raise ValueError(
            f"{argument}: {str(file)!r} has extension {file.suffix!r}; allowed: {', '.join(DATA_FILE_EXTENSIONS)}"
        )
    with file.open("rb") as handle:
        start = handle.read(65536)
    if not start.strip():
        raise ValueError(f"{argument}: data file {str(file)!r} is empty")
    if file.suffix in (".csv", ".tsv") and len([line for line in start.splitlines() if line.strip()]) < 2:
        raise ValueError(f"{argument}: data file {str(file)!r} has a header but no rows")
    return file


# Files a label folder holds beside its label files (a data set's own notes), skipped by `read_label_files`.
NOTE_FILES = ("README*", "LICENSE*", "SOURCE*")


def read_label_files(
    directory: str | Path, argument: str = "--label_dir", pattern: str = "*"
) -> tuple[list[str], list[str]]:
    """`(texts, labels)` of a folder with one text file per label, one example per line (e.g. `pos.txt`,
    `neg.txt`; or `reviews.pos`, `reviews.neg`).

    The files are those matching `pattern`, sorted by name, without hidden files and notes (`NOTE_FILES`: README*,
    LICENSE*, SOURCE*). A file's label is its stem (`pos.txt` → "pos"), or its extension when every file has the
    same stem (`reviews.pos` → "pos"). Lines are stripped, blank lines skipped; files are decoded by
    `decode_text` (UTF-8, else Latin-1). Examples come file by file in name order, so the same files always give
    the same lists.

    Raises:
        FileNotFoundError: naming `argument`, if `directory` is not a folder or holds no matching file.
        ValueError: naming `argument`, if a label file is empty, two files give the same label, or fewer than two
            labels are found.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise FileNotFoundError(f"{argument}: no such folder: {str(folder)!r}")
    files = sorted(file for file in folder.glob(pattern) if file.is_file() and not file.name.startswith(".")
                   and not any(file.match(note) for note in NOTE_FILES))
    if not files:
        raise FileNotFoundError(f"{argument}: {str(folder)!r} holds no label files matching {pattern!r} (one text "
                                f"file per label, one example per line, e.g. pos.txt and neg.txt)")
    if len(files) < 2:
        raise ValueError(f"{argument}: {str(folder)!r} has one label file ({files[0].name}); need two or more")
    same_stem = len({file.stem for file in files}) == 1
    names = [file.suffix[1:] if same_stem else file.stem for file in files]
    if len(set(names)) != len(names):
        raise ValueError(f"{argument}: the files of {str(folder)!r} give the same label twice: "
                         f"{', '.join(file.name for file in files)}")
    texts: list[str] = []
    labels: list[str] = []
    for file, name in zip(files, names, strict=True):
        lines = [line.strip() for line in decode_text(file.read_bytes()).splitlines()]
        lines = [line for line in lines if line]
        if not lines:
            raise ValueError(f"{argument}: label file {str(file)!r} is empty")
        texts += lines
        labels += [name] * len(lines)
    return texts, labels


def parse_split_sizes(value: str | Sequence[int | float], total: int, argument: str = "--split_sizes") -> list[int]:
    """Three split sizes (train, validation, test) as row counts: `value` is three counts ("8000,1000,1662") or
    three fractions of `total` ("0.8,0.1,0.1": each rounded down, the remainder added to train).

    Raises:
        ValueError: naming `argument`, unless the sizes are three positive numbers adding up to at most `total`
            (fractions: at most 1).
    """
    parts = [part for part in value.split(",") if part.strip()] if isinstance(value, str) else list(value)
    try:
        numbers = [float(part) for part in parts]
    except ValueError:
        numbers = []
    fractions = len(numbers) == 3 and all(0 < n < 1 for n in numbers) and sum(numbers) <= 1 + 1e-9
    sizes = [int(n * total) for n in numbers] if fractions else [int(n) for n in numbers if float(n).is_integer()]
    if fractions:
        sizes[0] += int(round(sum(numbers) * total)) - sum(sizes)
    if len(sizes) != 3 or any(size <= 0 for size in sizes) or sum(sizes) > total:
        raise ValueError(f"{argument} must be three positive sizes (train,validation,test) adding up to at most "
                         f"{total} (the examples), or three fractions adding up to at most 1; got {value!r}")
    return sizes


def split_dataset(dataset, split_sizes: str | Sequence[int | float], seed: int = 42, argument: str = "--split_sizes"):
    """`dataset` as a `DatasetDict` train / validation / test: shuffled with `Dataset.shuffle(seed=seed)` and cut
    into `split_sizes` (`parse_split_sizes`: counts or fractions). The same rows and seed always give the same split.

    Raises:
        ValueError: as `parse_split_sizes`.
    """
    from datasets import DatasetDict

    sizes = parse_split_sizes(split_sizes, len(dataset), argument)
    shuffled = dataset.shuffle(seed=seed).flatten_indices()
    bounds = np.cumsum([0] + sizes)
    return DatasetDict({name: shuffled.select(range(bounds[i], bounds[i + 1]))
                        for i, name in enumerate(("train", "validation", "test"))})


def load_label_files(directory: str | Path, split_sizes: str | Sequence[int | float] = DEFAULT_SPLIT,
                     seed: int = 42, pattern: str = "*", argument: str = "--label_dir"):
    """A folder with one text file per label (`read_label_files`) as a `DatasetDict` with splits train /
    validation / test (`split_dataset`: seeded shuffle, then `split_sizes`) and columns text, label.

    Raises:
        FileNotFoundError, ValueError: as `read_label_files` and `parse_split_sizes`.
    """
    from datasets import Dataset

    texts, labels = read_label_files(directory, argument, pattern)
    return split_dataset(Dataset.from_dict({"text": texts, "label": labels}), split_sizes, seed)


def read_table(path: str | Path, text_column: str | None = None, label_column: str | None = "label",
               argument: str = "--file") -> tuple[list[str], list | None]:
    """`(texts, labels)` of one csv / tsv / json / jsonl file (`check_data_file`; read by `datasets`' csv or json
    builder) from its named columns: `text_column` (default: the first of `DEFAULT_TEXT_COLUMNS` it has) and
    `label_column` (None, or a column the file lacks when it is the default "label": no labels).

    Raises:
        FileNotFoundError, ValueError: as `check_data_file`; ValueError naming the column and the file's columns when
            a named column does not exist.
    """
    from datasets import load_dataset

    file = check_data_file(str(path), argument)
    builder, options = DATA_FILE_EXTENSIONS[file.suffix]
    dataset = load_dataset(builder, data_files=str(file), split="train", **options)
    return dataset_columns(dataset, text_column, label_column, f"{argument} {str(file)!r}")


def dataset_columns(dataset, text_column: str | None = None, label_column: str | None = "label",
                    where: str = "the dataset") -> tuple[list[str], list | None]:
    """`(texts, labels)` from a `datasets.Dataset`'s columns (the defaults as `read_table`).

    Raises:
        ValueError: naming the column, `where` and the columns there, when a named column does not exist.
    """
    columns = dataset.column_names
    if text_column is None:
        found = [name for name in DEFAULT_TEXT_COLUMNS if name in columns]
        if not found:
            raise ValueError(f"no text column given and {where} has none of {DEFAULT_TEXT_COLUMNS}; columns: "
                             f"{', '.join(columns)}")
        text_column = found[0]
    for name in (text_column, label_column):
        if name is not None and name not in columns and not (name == "label" and name == label_column):
            raise ValueError(f"column {name!r} does not exist in {where}; columns: {', '.join(columns)}")
    labels = dataset[label_column] if label_column in columns else None
    return [str(text) for text in dataset[text_column]], labels


def read_labelled_texts(source: str | Path, *, text_column: str | None = None, label_column: str | None = "label",
                        split: str = "train", pattern: str = "*", argument: str = "--data"):
    """`(texts, labels)` (labels None when the data has none) from any of the package's text sources:

    - a csv / tsv / json / jsonl file: `read_table` with `text_column` / `label_column`;
    - a folder saved by `datasets` (`save_to_disk`: holds `dataset_dict.json` or `state.json`): its `split`, columns
      as a file's;
    - another folder: one text file per label (`read_label_files` with `pattern`);
    - anything else that could be a hub name (`hf_ffn.checkpoints.looks_local` is false): a `datasets` hub
      dataset (needs hub access), its `split`.

    Raises:
        FileNotFoundError, ValueError: as the reader used, naming `argument`.
    """
    path = Path(source)
    if path.is_file():
        return read_table(path, text_column, label_column, argument)
    if path.is_dir():
        if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
            from datasets import DatasetDict, load_from_disk

            dataset = load_from_disk(str(path))
            if isinstance(dataset, DatasetDict):
                if split not in dataset:
                    raise ValueError(f"{argument}: {str(path)!r} has no {split!r} split; splits: {', '.join(dataset)}")
                dataset = dataset[split]
            return dataset_columns(dataset, text_column, label_column, f"{argument} {str(path)!r}")
        return read_label_files(path, argument, pattern)
    if looks_local(source):
        raise FileNotFoundError(f"{argument}: {str(source)!r} is no file or folder (nor a hub dataset name)")
    from datasets import load_dataset

    return dataset_columns(load_dataset(str(source), split=split), text_column, label_column,
                           f"{argument} {str(source)!r}")


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
        raise ValueError(f"--label_column {column!r}: row {row} of the {where} has label {value!r} ({why}); a label "
                         f"must be a class (a string or an integer) or a real number (regression)")

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
    options = {text_column: "--text_column", args.text_pair_column: "--text_pair_column",
               args.label_column: "--label_column"}
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
    labelled = [split for split in ("train", "validation", "test")
                if split in raw and args.label_column in raw[split].column_names]
    is_number = {split: check_label_values(raw[split][args.label_column], where(split), args.label_column)
                 for split in labelled}
    if is_number["train"]:
        for split in labelled:
            for row, value in enumerate(raw[split][args.label_column]):
                if _as_number(value) is None:
                    raise ValueError(f"--label_column {args.label_column!r}: the training labels are real numbers "
                                     f"(a regression), but row {row} of the {where(split)} has label {value!r}")
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


def decode_text(data: bytes) -> str:
    """`data` decoded as UTF-8, or as Latin-1 when that fails.

    Latin-1 maps every byte to a character, so nothing is replaced or dropped (a few State of the Union files are
    Latin-1). The one decoding rule of the package's text readers (`read_text_documents`, `read_label_files`).
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def read_text_documents(
    paths: Sequence[str | Path], pattern: str = "*.txt", argument: str = "--train_files"
) -> list[tuple[str, str]]:
    """`(file name, text)` for each file in `paths`, each folder expanded to its files matching `pattern`, sorted by
    name; decoded by `decode_text` (UTF-8, else Latin-1).

    For `../shared/data/state_union` use `pattern="[0-9]*.txt"`: the speeches (`1945-Truman.txt`, ...) without
    `SOURCE.txt`. `argument` names the option the paths came from in error messages.

    Raises:
        FileNotFoundError: if a path does not exist or a folder holds no file matching `pattern`.
        ValueError: if a file is empty (or whitespace only).
    """
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(file for file in path.glob(pattern) if file.is_file())
            if not found:
                raise FileNotFoundError(f"{argument}: folder {str(path)!r} holds no file matching {pattern!r}")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"{argument}: {str(path)!r} does not exist")
    documents = []
    for file in files:
        text = decode_text(file.read_bytes())
        if not text.strip():
            raise ValueError(f"{argument}: text file {str(file)!r} is empty")
        documents.append((file.name, text))
    return documents


class FixedOrRandomMaskCollator:
    """Masks training batches afresh each time (BERT's dynamic masking, `DataCollatorForLanguageModeling`) but
    passes batches that already carry `labels` through unchanged: the evaluation set is masked once, with a seed,
    so perplexity before and after training is measured on the same masked tokens."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, mlm_probability: float):
        self.mlm = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability)

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        if "labels" in features[0]:
            return default_data_collator(features)
        return self.mlm(features)


class PaddingFreeCollator:
    """Padding-free batches as transformers defines them (`DataCollatorWithFlattening`) for an encoder: the
    examples' token sequences concatenated into one row (1, total_tokens), `position_ids` (1, total_tokens)
    restarting at 0 for each, no padding. FfnBert computes each sequence as if it were alone (docs/unpadded.md).

    Unlike `DataCollatorWithFlattening` (made for causal LMs: it keeps only `input_ids`, `labels` and
    `position_ids`, and turns labels into shifted token labels), every token-level column of the features (a list
    per example: `token_type_ids`, `special_tokens_mask`, token `labels`, an all-ones `attention_mask`) is
    concatenated the same way, and a sequence-level column (one number per example, e.g. class `labels`) stays one
    per sequence, (num_sequences,): FfnBert's pooler gives one output per sequence of a padding-free batch.
    `then`, if given (e.g. MLM masking), collates the one concatenated row instead of plain tensors.
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
        return {**batch, **per_sequence, "position_ids": flat["position_ids"]}


def mlm_blocks(documents: Sequence[str], tokenizer: PreTrainedTokenizerBase, block_size: int):
    """A `Dataset` of `block_size`-token blocks with columns `input_ids` and `special_tokens_mask` (each a list of
    `block_size` ints per row): the documents tokenized ([CLS] text [SEP] each), concatenated and cut
    (`run_mlm.py`'s `group_texts`; the remainder shorter than a block is dropped, so a block starts with [CLS]
    only where a document starts)."""
    from datasets import Dataset

    ids: list[int] = []
    special: list[int] = []
    for text in documents:
        encoded = tokenizer(text, return_special_tokens_mask=True, verbose=False)
        ids += encoded["input_ids"]
        special += encoded["special_tokens_mask"]
    count = len(ids) // block_size
    cut = lambda values: [values[i * block_size:(i + 1) * block_size] for i in range(count)]  # noqa: E731
    return Dataset.from_dict({"input_ids": cut(ids), "special_tokens_mask": cut(special)})


def mask_once(blocks, tokenizer: PreTrainedTokenizerBase, mlm_probability: float, seed: int) -> dict[str, torch.Tensor]:
    """`blocks` (rows of `mlm_blocks`) masked once by `DataCollatorForLanguageModeling` with its own generator seeded
    by `seed` (BERT's rule: `mlm_probability` of the non-special tokens chosen, 80% → [MASK], 10% → a random token,
    10% kept): the same seed gives the same masks, whatever else used the global RNG.

    Returns `input_ids`, `attention_mask` and `labels` (-100 where not masked), each (rows, block_size).
    """
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability, seed=seed)
    return collator(
        [{"input_ids": ids, "special_tokens_mask": special}
         for ids, special in zip(blocks["input_ids"], blocks["special_tokens_mask"], strict=True)]
    )


__all__ = [
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
    "mask_once",
    "mlm_blocks",
    "read_text_documents",
    "sort_by_length",
]
