"""The data path of masked-language-model training, one step per function: corpus → documents → blocks → masks.

    documents = load_corpus(["wiki-00.txt.xz"])                            # DatasetDict: train, validation (text)
    blocks = documents_to_blocks(documents, tokenizer, 128)                # DatasetDict of 128-token blocks
    evaluation = fixed_maskings(blocks["validation"], tokenizer, count=3)  # the held-out blocks masked 3 times

Everything goes through `datasets`: the files are read by its `text`, `json` and `parquet` builders (compressed
.xz, .gz, .bz2, .zst text is decompressed as it is read), every step is a `Dataset.map` written to memory-mapped
Arrow cache files (under `--cache_dir`, else `HF_DATASETS_CACHE`), so a corpus larger than memory is read once and
a second run with the same files, tokenizer and options loads its tokens from the cache instead of tokenizing
again. Nothing holds the whole corpus in a Python list (with `document_boundary` "file" or "regex" a file is one
row, so one file at a time is in memory).

- Documents (`load_documents`): a text file is cut at empty lines (`document_boundary="empty_line"`: BERT's
  pre-training format, datasets' `sample_by="paragraph"`), is one document (`"file"`), or is cut where
  `document_start_regex` matches (`"regex"`, e.g. WikiText's ` = Title = ` lines). A json / parquet row is one
  document (its `text_column`). Text is UTF-8; a byte sequence that is not UTF-8 reads as Latin-1, so nothing is
  dropped (`LATIN1_FALLBACK`). Documents that are blank after stripping are dropped.
- Held-out split (`held_out_split`): whole documents, a seeded percentage, or the documents of `validation_files`.
- Blocks (`documents_to_blocks`): [CLS] text [SEP] per document, concatenated and cut into blocks (`run_mlm.py`'s
  `group_texts`); with `attention_scope="document"`, `position_ids` restart at 0 where a document (or a block)
  starts, and FfnBert lets each document attend only to itself (its packed path, `hf_ffn.unpadding`).
- Masks: training batches are masked afresh by `masking_collator` (transformers' `DataCollatorForLanguageModeling`);
  the held-out blocks are masked once per seed (`fixed_maskings`), so every evaluation scores the same tokens.
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

# The decoding error handler of the text builder: bytes that are not UTF-8 are read as Latin-1 (which maps every
# byte to a character), the package's rule for text files (`hf_ffn.training.readers.decode_text`), byte sequence by
# byte sequence instead of file by file, so it works while a compressed file is decompressed as it is read.
LATIN1_FALLBACK = "hf_ffn_latin1_fallback"


def _latin1(error: UnicodeDecodeError) -> tuple[str, int]:
    return error.object[error.start : error.end].decode("latin-1"), error.end


codecs.register_error(LATIN1_FALLBACK, _latin1)


def corpus_files(paths: Sequence[str | Path], pattern: str = "*.txt", argument: str = "--train_files") -> list[Path]:
    """The files of `paths`, each folder expanded to its files matching `pattern` (sorted by name), all of one
    format (text, json or parquet, after any compression suffix).

    Raises:
        FileNotFoundError: a path that does not exist, a folder without a file matching `pattern` (naming
            `argument`).
        ValueError: an empty file; files of more than one format.
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
    """The format of `file`: "json", "parquet" or "text" (every other suffix), after a compression suffix
    (`COMPRESSIONS`)."""
    suffixes = [s for s in file.suffixes if s not in COMPRESSIONS]
    return TABLE_FORMATS.get(suffixes[-1] if suffixes else "", "text")


def split_documents(texts: Sequence[str], start_regex: str | None) -> list[str]:
    """Each text cut where `start_regex` (compiled with `re.MULTILINE`) matches: one document from each match to
    the next (text before the first match is a document of its own); blank pieces dropped. `None`: `texts` as they
    are. E.g. WikiText's articles start at a line ` = Title = `: `start_regex="^ = [^=]"`."""
    if start_regex is None:
        return list(texts)
    pattern = re.compile(start_regex, re.MULTILINE)
    documents = []
    for text in texts:
        bounds = sorted({0, len(text)} | {match.start() for match in pattern.finditer(text)})
        documents += [text[a:b] for a, b in itertools.pairwise(bounds) if text[a:b].strip()]
    return documents


# A line holding only whitespace (spaces, tabs, a carriage return): under `document_boundary="empty_line"` it
# separates documents like an empty line (datasets' paragraph reader splits at "\n\n" only; WikiText's files
# separate paragraphs with lines of one space).
BLANK_LINE = re.compile(r"\n[^\S\n]*\n")


def _documents_batch(batch: dict, start_regex: str | None, blank_lines: bool = False) -> dict:
    """One `map` batch of rows → its documents: cut by `start_regex` (if given) and, with `blank_lines`, at every
    whitespace-only line (`BLANK_LINE`), stripped, blank ones dropped."""
    texts = split_documents(batch["text"], start_regex)
    if blank_lines:
        texts = [piece for text in texts for piece in BLANK_LINE.split(text)]
    return {"text": [text.strip() for text in texts if text.strip()]}


def resolve_boundary(document_boundary: str | None, document_start_regex: str | None) -> str:
    """The document boundary of a text file: `document_boundary` as given, else "regex" when a
    `document_start_regex` is given, else "empty_line".

    Raises:
        ValueError: an unknown boundary; "regex" without a regex; a regex with another boundary (naming the options).
    """
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
    """The documents of `files` (all of one format, `corpus_files`) as a `Dataset` with one column `text`, one row
    per document, in file order, memory-mapped from `datasets`' cache.

    Text files are read by the `text` builder (`sample_by` from `SAMPLE_BY[document_boundary]`; UTF-8, non-UTF-8
    bytes as Latin-1), cut by `document_start_regex` when `document_boundary="regex"`; json / parquet files by their
    builders, one document per row of `text_column` (`document_start_regex`, if given, cuts rows further).

    Raises:
        ValueError: `text_column` missing from a json / parquet file (naming --text_column and the columns found);
            no document at all (naming `argument`).
    """
    from datasets import load_dataset
    from datasets.exceptions import DatasetGenerationError

    kind, document_boundary = file_format(files[0]), resolve_boundary(document_boundary, document_start_regex)
    workers = min(num_proc, len(files)) if num_proc and num_proc > 1 else None
    options = {"data_files": {"train": [str(file) for file in files]}, "cache_dir": cache_dir, "num_proc": workers}
    text = {"sample_by": SAMPLE_BY[document_boundary], "encoding_errors": LATIN1_FALLBACK} if kind == "text" else {}
    if kind == "text":  # UTF-16 text would read as one NUL-spaced document (compressed files: not checked)
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
    """`(train, held_out)`: whole documents, `percentage` of them (at least one, rounded) held out, chosen by a
    permutation from `numpy.random.default_rng(seed)`: the same documents and seed always give the same split.
    `documents`: a list (lists returned) or a `Dataset` (`Dataset.select`: index mappings, nothing copied).

    Raises:
        ValueError: with fewer than two documents, naming `argument` and the options that give more documents or a
            held-out set of its own.
    """
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
    """Corpus → documents: a `DatasetDict` with `train` and `validation` splits of documents (column `text`).

    The validation documents are those of `validation_files` (then every document of `train_files` trains), else
    `validation_split_percentage` of the `train_files` documents, whole, chosen with `split_seed`
    (`held_out_split`). Files and folders as `corpus_files`, documents as `load_documents`.

    Raises:
        FileNotFoundError, ValueError: as `corpus_files`, `load_documents` and `held_out_split`.
    """
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
    """The rows of a table (json / parquet files, a `datasets` data set) as documents: column `text_column` renamed
    `text`, each row one document (cut further by `start_regex` if given), stripped, blank ones dropped. A
    `Dataset` or an `IterableDataset` (whose columns may be unknown until read: then not checked).

    Raises:
        ValueError: `text_column` missing (naming --text_column, `where` and the columns found).
    """
    columns = dataset.column_names
    if columns is not None and text_column not in columns:
        raise ValueError(f"--text_column {text_column!r}: no such column in {where}; columns: {', '.join(columns)}")
    dataset = dataset.select_columns([text_column])
    if text_column != "text":
        dataset = dataset.rename_column(text_column, "text")
    return map_batched(dataset, _documents_batch, num_proc, "documents", fn_kwargs={"start_regex": start_regex})


def _first_line(error: BaseException) -> str:
    """`error` as one line: its type and message, the message's lines joined."""
    return f"{type(error).__name__}: " + " ".join(line.strip() for line in str(error).splitlines() if line.strip())


def load_hub_corpus(
    dataset_name: str,
    dataset_config_name: str | None = None,
    streaming: bool = False,
    validation_files: Sequence[str | Path] | None = None,
    validation_split_percentage: float = 10,
    split_seed: int = 42,
    text_column: str = "text",
    document_start_regex: str | None = None,
    cache_dir: str | None = None,
    num_proc: int | None = None,
    file_pattern: str = "*.txt",
    document_boundary: str | None = None,
):
    """Corpus → documents from a `datasets` data set, as `run_mlm.py`'s `--dataset_name`, `--dataset_config_name`
    and `--streaming`: a hub name or a local loading script / folder (`load_dataset`), or a folder written by
    `save_to_disk` (`load_from_disk`). Each row of its `train` split is one document (`text_column`; cut further by
    `document_start_regex`; blank rows dropped): a `DatasetDict` (an `IterableDatasetDict` when `streaming`: rows
    read as training reads them, nothing written to disk) with `train` and `validation` splits of documents.

    The validation documents: those of `validation_files` (read as `load_corpus` reads them), else the data set's
    own `validation` split, else (not streaming) `validation_split_percentage` of the train rows, whole, chosen
    with `split_seed` (`held_out_split`).

    Raises:
        ValueError: a data set that cannot be loaded (e.g. offline and not in the cache; naming --dataset_name and
            the cause), a configuration it lacks (naming --dataset_config_name), no `train` split, a missing
            `text_column`, streaming without a held-out split (naming the options that give one).
    """
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
        raise ValueError(f"{where} cannot be loaded{offline if unreachable else ''}: {_first_line(error)}") from error
    if not isinstance(splits, dict) or "train" not in splits:
        found = ", ".join(splits) if isinstance(splits, dict) else type(splits).__name__
        raise ValueError(f"{where}: no 'train' split to train on; splits: {found}")
    documents = {
        name: _row_documents(splits[name], text_column, document_start_regex, num_proc, where)
        for name in ("train", "validation")
        if name in splits
    }
    train = documents["train"]
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
    kind = IterableDatasetDict if streaming else DatasetDict
    return kind(train=train, validation=validation)


def is_streamed(dataset) -> bool:
    """Whether `dataset` is a `datasets.IterableDataset` (streamed: no length, read as it is iterated)."""
    from datasets import IterableDataset

    return isinstance(dataset, IterableDataset)


def map_batched(dataset, function, num_proc: int | None, desc: str, **options):
    """`dataset.map(function, batched=True, **options)`; a `Dataset` with `num_proc` and a progress `desc`, an
    `IterableDataset` lazily (applied as it is read; it takes neither)."""
    if is_streamed(dataset):
        return dataset.map(function, batched=True, **options)
    return dataset.map(function, batched=True, num_proc=num_proc, desc=desc, **options)


__all__ = [
    "COMPRESSIONS",
    "DOCUMENT_BOUNDARIES",
    "corpus_files",
    "file_format",
    "held_out_split",
    "load_corpus",
    "load_documents",
    "load_hub_corpus",
    "is_streamed",
    "resolve_boundary",
    "split_documents",
]
