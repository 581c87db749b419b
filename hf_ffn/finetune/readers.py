"""The labelled-data readers of `hf-ffn finetune` (and `hf-ffn heal`'s calibration text): a folder with one file per
label, a csv / tsv / json file, a `datasets` dataset (`read_labelled_texts` picks one) and the seeded train /
validation / test split. Bad input raises naming the file or option, the value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..checkpoints import looks_local
from ..training.readers import is_saved_dataset, read_label_files

DEFAULT_SPLIT = "0.8,0.1,0.1"  # train / validation / test fractions of a --label_dir folder

# file extension → (`datasets` builder, its options); .tsv is the csv builder with tabs
DATA_FILE_EXTENSIONS = {
    ".csv": ("csv", {}),
    ".tsv": ("csv", {"sep": "\t"}),
    ".json": ("json", {}),
    ".jsonl": ("json", {}),
}
DEFAULT_TEXT_COLUMNS = ("text", "sentence")


def check_data_file(path: str, argument: str) -> Path:
    """`path` as a `Path` after checking it is a csv/tsv/json/jsonl file with rows (`FileNotFoundError`: no file;
    `ValueError`: another extension, a blank file, a header only)."""
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


def parse_split_sizes(value: str | Sequence[int | float], total: int, argument: str = "--split_sizes") -> list[int]:
    """Three split sizes (train, validation, test) as row counts: `value` is three counts ("8000,1000,1662") or
    three fractions of `total` ("0.8,0.1,0.1": each rounded down, the remainder to train); `ValueError` naming
    `argument` unless three positive sizes adding up to at most `total` (fractions: 1)."""
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
        raise ValueError(
            f"{argument} must be three positive sizes (train,validation,test) adding up to at most "
            f"{total} (the examples), or three fractions adding up to at most 1; got {value!r}"
        )
    return sizes


def split_dataset(dataset, split_sizes: str | Sequence[int | float], seed: int = 42, argument: str = "--split_sizes"):
    """`dataset` as a `DatasetDict` train / validation / test: `Dataset.shuffle(seed=seed)`, cut into `split_sizes`."""
    from datasets import DatasetDict

    sizes = parse_split_sizes(split_sizes, len(dataset), argument)
    shuffled = dataset.shuffle(seed=seed).flatten_indices()
    bounds = np.cumsum([0] + sizes)
    names = ("train", "validation", "test")
    return DatasetDict({name: shuffled.select(range(bounds[i], bounds[i + 1])) for i, name in enumerate(names)})


def load_label_files(
    directory: str | Path,
    split_sizes: str | Sequence[int | float] = DEFAULT_SPLIT,
    seed: int = 42,
    pattern: str = "*",
    argument: str = "--label_dir",
):
    """`read_label_files` as a `DatasetDict` (`split_dataset`) with columns text, label."""
    from datasets import Dataset

    texts, labels = read_label_files(directory, argument, pattern)
    return split_dataset(Dataset.from_dict({"text": texts, "label": labels}), split_sizes, seed)


def read_table(
    path: str | Path, text_column: str | None = None, label_column: str | None = "label", argument: str = "--file"
) -> tuple[list[str], list | None]:
    """`(texts, labels)` of one csv / tsv / json / jsonl file (`check_data_file`), as `dataset_columns`."""
    from datasets import load_dataset

    file = check_data_file(str(path), argument)
    builder, options = DATA_FILE_EXTENSIONS[file.suffix]
    dataset = load_dataset(builder, data_files=str(file), split="train", **options)
    return dataset_columns(dataset, text_column, label_column, f"{argument} {str(file)!r}")


def dataset_columns(
    dataset, text_column: str | None = None, label_column: str | None = "label", where: str = "the dataset"
) -> tuple[list[str], list | None]:
    """`(texts, labels)` from a `datasets.Dataset`'s columns: `text_column` (default: the first of
    `DEFAULT_TEXT_COLUMNS` it has) and `label_column` (None, or the default "label" absent: no labels); `ValueError`
    naming `where` and its columns when a named column does not exist."""
    columns = dataset.column_names
    if text_column is None:
        found = [name for name in DEFAULT_TEXT_COLUMNS if name in columns]
        if not found:
            raise ValueError(
                f"no text column given and {where} has none of {DEFAULT_TEXT_COLUMNS}; columns: {', '.join(columns)}"
            )
        text_column = found[0]
    for name in (text_column, label_column):
        if name is not None and name not in columns and not (name == "label" and name == label_column):
            raise ValueError(f"column {name!r} does not exist in {where}; columns: {', '.join(columns)}")
    labels = dataset[label_column] if label_column in columns else None
    return [str(text) for text in dataset[text_column]], labels


def read_labelled_texts(
    source: str | Path,
    *,
    text_column: str | None = None,
    label_column: str | None = "label",
    split: str = "train",
    pattern: str = "*",
    argument: str = "--data",
):
    """`(texts, labels)` (labels None when the data has none) of a csv / tsv / json / jsonl file (`read_table`), a
    folder saved by `datasets` (its `split`), a folder of label files (`read_label_files`) or a hub dataset name."""
    path = Path(source)
    if path.is_file():
        return read_table(path, text_column, label_column, argument)
    if path.is_dir():
        if is_saved_dataset(path):
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

    return dataset_columns(
        load_dataset(str(source), split=split), text_column, label_column, f"{argument} {str(source)!r}"
    )
