"""Readers of text data: labelled text (a folder with one file per label, a csv / tsv / json file, a `datasets`
dataset: `read_labelled_texts` picks one), the seeded train / validation / test split and plain-text documents, all
decoded by `decode_text`. Bad input raises naming the file or option, the value and what is allowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..checkpoints import looks_local

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
    """`path` as a `Path` after checking it is a csv/tsv/json/jsonl file with rows.

    Raises:
        FileNotFoundError: if `path` is not a file.
        ValueError: an unsupported extension, a blank file, a csv/tsv file with a header only.
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
    """`(texts, labels)` of a folder with one text file per label, one example per line: the files matching
    `pattern` in name order, hidden files and `NOTE_FILES` left out. A file's label is its stem (`pos.txt` → "pos"),
    or its extension when every file has the same stem (`reviews.pos` → "pos"); blank lines are skipped.

    Raises:
        FileNotFoundError: naming `argument`: no such folder, no matching file.
        ValueError: naming `argument`: an empty label file, a label twice, fewer than two labels.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise FileNotFoundError(f"{argument}: no such folder: {str(folder)!r}")
    files = sorted(
        file
        for file in folder.glob(pattern)
        if file.is_file() and not file.name.startswith(".") and not any(file.match(note) for note in NOTE_FILES)
    )
    if not files:
        raise FileNotFoundError(
            f"{argument}: {str(folder)!r} holds no label files matching {pattern!r} (one text "
            f"file per label, one example per line, e.g. pos.txt and neg.txt)"
        )
    if len(files) < 2:
        raise ValueError(f"{argument}: {str(folder)!r} has one label file ({files[0].name}); need two or more")
    same_stem = len({file.stem for file in files}) == 1
    names = [file.suffix[1:] if same_stem else file.stem for file in files]
    if len(set(names)) != len(names):
        raise ValueError(
            f"{argument}: the files of {str(folder)!r} give the same label twice: "
            f"{', '.join(file.name for file in files)}"
        )
    texts: list[str] = []
    labels: list[str] = []
    for file, name in zip(files, names, strict=True):
        lines = [line.strip() for line in decode_text(file.read_bytes(), file).splitlines()]
        lines = [line for line in lines if line]
        if not lines:
            raise ValueError(f"{argument}: label file {str(file)!r} is empty")
        texts += lines
        labels += [name] * len(lines)
    return texts, labels


def parse_split_sizes(value: str | Sequence[int | float], total: int, argument: str = "--split_sizes") -> list[int]:
    """Three split sizes (train, validation, test) as row counts: `value` is three counts ("8000,1000,1662") or
    three fractions of `total` ("0.8,0.1,0.1": each rounded down, the remainder to train).

    Raises:
        ValueError: naming `argument`, unless three positive sizes adding up to at most `total` (fractions: 1).
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
        raise ValueError(
            f"{argument} must be three positive sizes (train,validation,test) adding up to at most "
            f"{total} (the examples), or three fractions adding up to at most 1; got {value!r}"
        )
    return sizes


def split_dataset(dataset, split_sizes: str | Sequence[int | float], seed: int = 42, argument: str = "--split_sizes"):
    """`dataset` as a `DatasetDict` train / validation / test: `Dataset.shuffle(seed=seed)`, cut into `split_sizes`.

    Raises:
        ValueError: as `parse_split_sizes`.
    """
    from datasets import DatasetDict

    sizes = parse_split_sizes(split_sizes, len(dataset), argument)
    shuffled = dataset.shuffle(seed=seed).flatten_indices()
    bounds = np.cumsum([0] + sizes)
    return DatasetDict(
        {
            name: shuffled.select(range(bounds[i], bounds[i + 1]))
            for i, name in enumerate(("train", "validation", "test"))
        }
    )


def load_label_files(
    directory: str | Path,
    split_sizes: str | Sequence[int | float] = DEFAULT_SPLIT,
    seed: int = 42,
    pattern: str = "*",
    argument: str = "--label_dir",
):
    """`read_label_files` as a `DatasetDict` (`split_dataset`) with columns text, label.

    Raises:
        FileNotFoundError, ValueError: as `read_label_files` and `parse_split_sizes`.
    """
    from datasets import Dataset

    texts, labels = read_label_files(directory, argument, pattern)
    return split_dataset(Dataset.from_dict({"text": texts, "label": labels}), split_sizes, seed)


def read_table(
    path: str | Path, text_column: str | None = None, label_column: str | None = "label", argument: str = "--file"
) -> tuple[list[str], list | None]:
    """`(texts, labels)` of one csv / tsv / json / jsonl file (`check_data_file`), as `dataset_columns`.

    Raises:
        FileNotFoundError, ValueError: as `check_data_file` and `dataset_columns`.
    """
    from datasets import load_dataset

    file = check_data_file(str(path), argument)
    builder, options = DATA_FILE_EXTENSIONS[file.suffix]
    dataset = load_dataset(builder, data_files=str(file), split="train", **options)
    return dataset_columns(dataset, text_column, label_column, f"{argument} {str(file)!r}")


def dataset_columns(
    dataset, text_column: str | None = None, label_column: str | None = "label", where: str = "the dataset"
) -> tuple[list[str], list | None]:
    """`(texts, labels)` from a `datasets.Dataset`'s columns: `text_column` (default: the first of
    `DEFAULT_TEXT_COLUMNS` it has) and `label_column` (None, or the default "label" absent: no labels).

    Raises:
        ValueError: naming the column, `where` and the columns there, when a named column does not exist.
    """
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
    folder saved by `datasets` (its `split`), a folder of label files (`read_label_files`) or a hub dataset name.

    Raises:
        FileNotFoundError, ValueError: as the reader used, naming `argument`.
    """
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


def is_saved_dataset(path: str | Path) -> bool:
    """Whether `path` is a folder written by `datasets`' `save_to_disk` (`load_from_disk` reads it)."""
    folder = Path(path)
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


# Byte-order marks of the encodings that UTF-8-else-Latin-1 would read as garbage (every other byte a NUL).
WIDE_BOMS = {b"\xff\xfe\x00\x00": "UTF-32", b"\x00\x00\xfe\xff": "UTF-32", b"\xff\xfe": "UTF-16", b"\xfe\xff": "UTF-16"}


def check_not_wide(head: bytes, name: str | Path) -> None:
    """Refuse text whose first bytes `head` are UTF-16 or UTF-32 (a byte-order mark, or NUL bytes).

    Raises:
        ValueError: "NAME is UTF-16 text (...): convert it, e.g. `iconv -f UTF-16 -t UTF-8 NAME`".
    """
    wide = next((encoding for bom, encoding in WIDE_BOMS.items() if head.startswith(bom)), None)
    if wide is None and b"\x00" in head:
        wide = "UTF-16 or UTF-32"
    if wide is not None:
        raise ValueError(
            f"{name} is {wide} text (a byte-order mark or NUL bytes at its start); the readers take UTF-8 (else "
            f"Latin-1): convert it, e.g. `iconv -f {wide.split()[0]} -t UTF-8 {name}`"
        )


def decode_text(data: bytes, name: str | Path = "the text") -> str:
    """`data` decoded as UTF-8, else as Latin-1 (every byte a character: nothing dropped).

    Raises:
        ValueError: UTF-16 or UTF-32 text (`check_not_wide`), naming `name`.
    """
    check_not_wide(data[:4096], name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def expand_paths(paths: Sequence[str | Path], pattern: str, argument: str) -> list[Path]:
    """The files of `paths` in order, each folder expanded to its files matching `pattern` (sorted by name).

    Raises:
        FileNotFoundError: a path that does not exist, a folder without a matching file (naming `argument`).
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
    return files


def read_text_documents(
    paths: Sequence[str | Path], pattern: str = "*.txt", argument: str = "--train_files"
) -> list[tuple[str, str]]:
    """`(file name, text)` for each file of `expand_paths(paths, pattern)`, decoded by `decode_text`.

    Raises:
        FileNotFoundError: as `expand_paths`.
        ValueError: if a file is blank.
    """
    files = expand_paths(paths, pattern, argument)
    documents = []
    for file in files:
        text = decode_text(file.read_bytes(), file)
        if not text.strip():
            raise ValueError(f"{argument}: text file {str(file)!r} is empty")
        documents.append((file.name, text))
    return documents
