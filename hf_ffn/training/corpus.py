"""Corpus → documents, the first half of the MLM data path (the second: `hf_ffn.training.blocks`): text, json or
parquet files (`load_corpus`) or a `datasets` data set (`load_hub_corpus`), each step a cached `Dataset.map`; the
held-out documents chosen whole (docs/pretraining.md, "The data path").
"""

from __future__ import annotations

import codecs
import importlib.util
import itertools
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .readers import check_not_wide, expand_paths, is_saved_dataset

COMPRESSIONS = (".xz", ".gz", ".bz2", ".zst")
TABLE_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}  # anything else is read as text
DOCUMENT_BOUNDARIES = ("empty_line", "file", "regex")
SAMPLE_BY = {"empty_line": "paragraph", "file": "document", "regex": "document"}  # datasets' text builder

# The text builder's decoding error handler: bytes that are not UTF-8 read as Latin-1 (`readers.decode_text`'s rule),
# per byte sequence, so it works on a file decompressed as it is read.
LATIN1_FALLBACK = "hf_ffn_latin1_fallback"
codecs.register_error(
    LATIN1_FALLBACK, lambda error: (error.object[error.start : error.end].decode("latin-1"), error.end)
)


def corpus_files(paths: Sequence[str | Path], pattern: str = "*.txt", argument: str = "--train_files") -> list[Path]:
    """`expand_paths(paths, pattern)`, checked: all of one format (`file_format`), none empty.

    Raises:
        FileNotFoundError: as `expand_paths`.
        ValueError: an empty file, a .zst file without zstandard, files of more than one format.
    """
    files = expand_paths(paths, pattern, argument)
    for file in files:
        if file.stat().st_size == 0:
            raise ValueError(f"{argument}: file {str(file)!r} is empty")
        if file.suffix == ".zst" and importlib.util.find_spec("zstandard") is None:
            raise ValueError(
                f"{argument}: {str(file)!r} is zstd-compressed, which datasets reads with the zstandard package: "
                f"pip install zstandard (or give the file decompressed, or compressed with xz, gzip or bzip2)"
            )
    formats = {file_format(file) for file in files}
    if len(formats) > 1:
        raise ValueError(f"{argument}: the files mix formats ({', '.join(sorted(formats))}); give files of one format")
    return files


def file_format(file: Path) -> str:
    """ "json", "parquet" or "text" (any other suffix), a compression suffix skipped."""
    suffixes = [s for s in file.suffixes if s not in COMPRESSIONS]
    return TABLE_FORMATS.get(suffixes[-1] if suffixes else "", "text")


def split_documents(texts: Sequence[str], start_regex: str | None) -> list[str]:
    """Each text cut where `start_regex` (multi-line) matches, e.g. WikiText's `"^ = [^=]"` (text before the first
    match is a document of its own); blank pieces dropped. `None`: `texts` as they are."""
    if start_regex is None:
        return list(texts)
    pattern = re.compile(start_regex, re.MULTILINE)
    documents = []
    for text in texts:
        bounds = sorted({0, len(text)} | {match.start() for match in pattern.finditer(text)})
        documents += [text[a:b] for a, b in itertools.pairwise(bounds) if text[a:b].strip()]
    return documents


# A whitespace-only line separates documents like an empty line (datasets' paragraph reader splits at "\n\n" only;
# WikiText separates paragraphs with lines of one space).
BLANK_LINE = re.compile(r"\n[^\S\n]*\n")


def _documents_batch(batch: dict, start_regex: str | None, blank_lines: bool = False) -> dict:
    """One `map` batch of rows → its documents, cut by `start_regex` and (`blank_lines`) at `BLANK_LINE`s."""
    texts = split_documents(batch["text"], start_regex)
    if blank_lines:
        texts = [piece for text in texts for piece in BLANK_LINE.split(text)]
    return {"text": [text.strip() for text in texts if text.strip()]}


def resolve_boundary(document_boundary: str | None, document_start_regex: str | None) -> str:
    """`document_boundary` as given, else "regex" with a `document_start_regex`, else "empty_line" (`ValueError`: an
    unknown boundary; "regex" without a regex, or a regex with another boundary)."""
    if document_boundary is None:
        return "empty_line" if document_start_regex is None else "regex"
    if document_boundary not in DOCUMENT_BOUNDARIES:
        raise ValueError(
            f"--document_boundary has unknown value {document_boundary!r}; allowed: {', '.join(DOCUMENT_BOUNDARIES)}"
        )
    if (document_boundary == "regex") != (document_start_regex is not None):
        raise ValueError(
            f"--document_boundary {document_boundary} and --document_start_regex {document_start_regex!r} do not "
            f"go together: documents start at the regex's matches with --document_boundary regex (the default when "
            f"--document_start_regex is given), and only then"
        )
    return document_boundary


def load_documents(
    files: Sequence[Path],
    document_boundary: str | None = None,
    document_start_regex: str | None = None,
    text_column: str = "text",
    cache_dir: str | None = None,
    num_proc: int | None = None,
    argument: str = "--train_files",
):
    """The documents of `files` (of one format, `corpus_files`) as a `Dataset` (column `text`), in file order: text
    cut by `document_boundary`, a json / parquet row of `text_column` each (cut by `document_start_regex`, if given).

    Raises:
        ValueError: a file that cannot be read, `text_column` missing, no document at all.
    """
    from datasets import load_dataset
    from datasets.exceptions import DatasetGenerationError

    kind, document_boundary = file_format(files[0]), resolve_boundary(document_boundary, document_start_regex)
    workers = min(num_proc, len(files)) if num_proc and num_proc > 1 else None
    options = {"data_files": {"train": [str(file) for file in files]}, "cache_dir": cache_dir, "num_proc": workers}
    text = {"sample_by": SAMPLE_BY[document_boundary], "encoding_errors": LATIN1_FALLBACK} if kind == "text" else {}
    if kind == "text":  # UTF-16 would read as one NUL-spaced document (compressed files: not checked)
        for file in files:
            if Path(file).suffix not in COMPRESSIONS:
                with open(file, "rb") as stream:
                    check_not_wide(stream.read(4096), file)
    try:
        dataset = load_dataset(kind, **text, **options)["train"]
    except DatasetGenerationError as error:  # e.g. a damaged compressed file, a json file that is not json
        cause = error.__cause__ or error
        raise ValueError(
            f"{argument}: {', '.join(map(str, files))} could not be read as {kind} files: "
            f"{type(cause).__name__}: {cause}"
        ) from error
    if kind == "text":
        regex = document_start_regex if document_boundary == "regex" else None
        fn_kwargs = {"start_regex": regex, "blank_lines": document_boundary == "empty_line"}
        documents = dataset.map(
            _documents_batch, batched=True, fn_kwargs=fn_kwargs, num_proc=num_proc, desc="documents"
        )
    else:
        where = f"{argument} ({', '.join(map(str, files))})"
        documents = _row_documents(dataset, text_column, document_start_regex, num_proc, where)
    if len(documents) == 0:
        raise ValueError(f"{argument}: no document in {', '.join(map(str, files))} (the text is blank)")
    return documents


def held_out_split(documents, percentage: float, seed: int, argument: str = "--train_files"):
    """`(train, held_out)`: `percentage` of the whole documents (at least one, rounded) held out, chosen by a
    `numpy.random.default_rng(seed)` permutation. `documents`: a list (lists returned) or a `Dataset` (`select`).
    Raises `ValueError` with fewer than two documents."""
    if len(documents) < 2:
        raise ValueError(
            f"{argument}: need at least two documents (whole documents are held out for validation), got "
            f"{len(documents)}. Cut the text into documents (--document_boundary empty_line: documents separated "
            f"by an empty line; --document_start_regex REGEX: a document starts at each match), or give held-out "
            f"text with --validation_files"
        )
    order = np.random.default_rng(seed).permutation(len(documents))
    count = min(len(documents) - 1, max(1, round(len(documents) * percentage / 100)))
    if isinstance(documents, list):
        return [documents[i] for i in order[count:]], [documents[i] for i in order[:count]]
    return documents.select(order[count:]), documents.select(order[:count])


def load_corpus(
    train_files: Sequence[str | Path],
    validation_files: Sequence[str | Path] | None = None,
    validation_split_percentage: float = 10,
    split_seed: int = 42,
    file_pattern: str = "*.txt",
    document_boundary: str | None = None,
    document_start_regex: str | None = None,
    text_column: str = "text",
    cache_dir: str | None = None,
    num_proc: int | None = None,
):
    """Corpus → `DatasetDict` of `train` and `validation` documents (column `text`), held out by `validation_files`,
    else `held_out_split(validation_split_percentage, split_seed)`."""
    from datasets import DatasetDict

    files = {"--train_files": corpus_files(train_files, file_pattern, "--train_files")}
    if validation_files:  # every file checked before any is read
        files["--validation_files"] = corpus_files(validation_files, file_pattern, "--validation_files")
    options = (document_boundary, document_start_regex, text_column, cache_dir, num_proc)
    documents = {argument: load_documents(paths, *options, argument) for argument, paths in files.items()}
    train = documents["--train_files"]
    if validation_files:
        return DatasetDict(train=train, validation=documents["--validation_files"])
    train, validation = held_out_split(train, validation_split_percentage, split_seed)
    return DatasetDict(train=train, validation=validation)


def _row_documents(dataset, text_column: str, start_regex: str | None, num_proc: int | None, where: str):
    """A table's rows (`Dataset` or `IterableDataset`) as documents: `text_column` as `text`, cut by `start_regex`
    (`ValueError`: `text_column` missing, where the columns are known)."""
    columns = dataset.column_names
    if columns is not None and text_column not in columns:
        raise ValueError(f"--text_column {text_column!r}: no such column in {where}; columns: {', '.join(columns)}")
    dataset = dataset.select_columns([text_column])
    if text_column != "text":
        dataset = dataset.rename_column(text_column, "text")
    return map_batched(dataset, _documents_batch, num_proc, "documents", fn_kwargs={"start_regex": start_regex})


def load_hub_corpus(
    dataset_name: str,
    dataset_config_name: str | None = None,
    streaming: bool = False,
    validation_files: Sequence[str | Path] | None = None,
    validation_split_percentage: float | None = 10,
    split_seed: int = 42,
    text_column: str = "text",
    document_start_regex: str | None = None,
    cache_dir: str | None = None,
    num_proc: int | None = None,
    file_pattern: str = "*.txt",
    document_boundary: str | None = None,
):
    """Corpus → documents from a `datasets` data set (`run_mlm.py`'s `--dataset_name`; `load_from_disk` for a
    `save_to_disk` folder): a `DatasetDict` (streaming: `IterableDatasetDict`) of `train` and `validation`, a document
    per row. Held out: `validation_files`, else its `validation` split, else (not streaming) `held_out_split`;
    `validation_split_percentage` None: `train` only. Raises `ValueError` on a data set that cannot be loaded or
    held out."""
    from datasets import DatasetDict, IterableDatasetDict, load_dataset, load_from_disk

    where = f"--dataset_name {dataset_name!r}"
    if dataset_config_name is not None:
        where += f" --dataset_config_name {dataset_config_name!r}"
    try:
        if is_saved_dataset(dataset_name):
            if dataset_config_name is not None:
                raise ValueError(
                    f"{where}: a folder written by save_to_disk has no configurations (drop --dataset_config_name)"
                )
            splits = load_from_disk(dataset_name)
            splits = splits if isinstance(splits, DatasetDict) else DatasetDict(train=splits)
            if streaming:  # read from its Arrow files as training reads them
                splits = IterableDatasetDict({name: split.to_iterable_dataset() for name, split in splits.items()})
        else:
            splits = load_dataset(dataset_name, dataset_config_name, cache_dir=cache_dir, streaming=streaming)
    except Exception as error:  # datasets raises many kinds: not found, offline, a bad configuration, a bad script
        if isinstance(error, ValueError) and str(error).startswith(where):
            raise
        offline = " (offline: only a local folder, a loading script or a data set already in the cache loads)"
        from datasets import config

        unreachable = isinstance(error, (ConnectionError, FileNotFoundError)) and config.HF_HUB_OFFLINE
        message = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
        raise ValueError(
            f"{where} cannot be loaded{offline if unreachable else ''}: {type(error).__name__}: {message}"
        ) from error
    if not isinstance(splits, dict) or "train" not in splits:
        found = ", ".join(splits) if isinstance(splits, dict) else type(splits).__name__
        raise ValueError(f"{where}: no 'train' split to train on; splits: {found}")
    documents = {
        name: _row_documents(splits[name], text_column, document_start_regex, num_proc, where)
        for name in ("train", "validation")
        if name in splits
    }
    train = documents["train"]
    kind = IterableDatasetDict if streaming else DatasetDict
    if validation_split_percentage is None and not validation_files:
        return kind(train=train)
    if validation_files:
        files = corpus_files(validation_files, file_pattern, "--validation_files")
        options = (document_boundary, document_start_regex, text_column, cache_dir, num_proc, "--validation_files")
        validation = load_documents(files, *options)
        if streaming:
            validation = validation.to_iterable_dataset()
    elif "validation" in documents:
        validation = documents["validation"]
    elif streaming:
        raise ValueError(
            f"--streaming: {where} has no 'validation' split, and holding out --validation_split_percentage of its "
            f"documents needs the whole data set (a seeded choice among all of them): give --validation_files, or "
            f"a data set with a validation split, or drop --streaming"
        )
    else:
        train, validation = held_out_split(train, validation_split_percentage, split_seed, "--dataset_name")
    return kind(train=train, validation=validation)


def is_streamed(dataset) -> bool:
    """Whether `dataset` is a `datasets.IterableDataset` (no length)."""
    from datasets import IterableDataset

    return isinstance(dataset, IterableDataset)


def map_batched(dataset, function, num_proc: int | None, desc: str, **options):
    """`dataset.map(function, batched=True, **options)`, with `num_proc` and `desc` unless streamed (lazy)."""
    if is_streamed(dataset):
        return dataset.map(function, batched=True, **options)
    return dataset.map(function, batched=True, num_proc=num_proc, desc=desc, **options)
