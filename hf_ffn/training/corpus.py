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
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase

from .readers import check_not_wide, expand_paths, is_saved_dataset

COMPRESSIONS = (".xz", ".gz", ".bz2", ".zst")
TABLE_FORMATS = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}  # anything else is read as text
DOCUMENT_BOUNDARIES = ("empty_line", "file", "regex")
ATTENTION_SCOPES = ("block", "document")
SAMPLE_BY = {"empty_line": "paragraph", "file": "document", "regex": "document"}  # datasets' text builder
TOKENIZE_DOCUMENTS = 100  # documents per `map` batch when tokenizing (a book is ~100k tokens)
GROUP_DOCUMENTS = 1000  # documents per `map` batch when blocks are cut: the remainder is dropped once per batch
MASK_BATCH = 1000  # blocks masked per call of the collator in `fixed_maskings`

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
    return _map(dataset, _documents_batch, num_proc, "documents", fn_kwargs={"start_regex": start_regex})


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


def _tokens_batch(batch: dict, tokenizer: PreTrainedTokenizerBase) -> dict:
    """One `map` batch of documents → [CLS] text [SEP] token ids and their special-token mask, per document."""
    encoded = tokenizer(
        batch["text"],
        return_special_tokens_mask=True,
        return_attention_mask=False,
        return_token_type_ids=False,
        verbose=False,
    )
    return {"input_ids": encoded["input_ids"], "special_tokens_mask": encoded["special_tokens_mask"]}


def _blocks_batch(batch: dict, block: int, per_document: bool) -> dict:
    """One `map` batch of tokenized documents → its blocks of `block` tokens (the documents concatenated and cut;
    the remainder shorter than a block dropped), with `position_ids` restarting at each document and block start
    when `per_document`."""
    lengths = np.array([len(ids) for ids in batch["input_ids"]], dtype=np.int64)
    total = int(lengths.sum())
    count = total // block

    def cut(column: str) -> list[np.ndarray]:
        values = np.concatenate([np.asarray(row) for row in batch[column]]) if total else np.zeros(0, np.int64)
        return list(values[: count * block].reshape(count, block))

    blocks = {"input_ids": cut("input_ids"), "special_tokens_mask": cut("special_tokens_mask")}
    if per_document:
        index = np.arange(count * block)
        starts = np.zeros(count * block, dtype=bool)
        document_starts = np.cumsum(lengths) - lengths
        starts[document_starts[document_starts < count * block]] = True
        starts[::block] = True
        positions = index - np.maximum.accumulate(np.where(starts, index, 0))
        blocks["position_ids"] = list(positions.reshape(count, block))
    return blocks


def is_streamed(dataset) -> bool:
    """Whether `dataset` is a `datasets.IterableDataset` (streamed: no length, read as it is iterated)."""
    from datasets import IterableDataset

    return isinstance(dataset, IterableDataset)


def _map(dataset, function, num_proc: int | None, desc: str, **options):
    """`dataset.map(function, batched=True, **options)`; a `Dataset` with `num_proc` and a progress `desc`, an
    `IterableDataset` lazily (applied as it is read; it takes neither)."""
    if is_streamed(dataset):
        return dataset.map(function, batched=True, **options)
    return dataset.map(function, batched=True, num_proc=num_proc, desc=desc, **options)


def _per_split(documents, function, *args):
    """`function(dataset, *args)` on a `Dataset`, or on each split of a `DatasetDict` / `IterableDatasetDict`
    (returned as the same kind)."""
    if isinstance(documents, dict):
        return type(documents)({split: function(dataset, *args) for split, dataset in documents.items()})
    return function(documents, *args)


def tokenize_documents(documents, tokenizer: PreTrainedTokenizerBase, num_proc: int | None = None):
    """Documents → tokens: each document (column `text`) tokenized as [CLS] text [SEP]; columns `input_ids` (int32)
    and `special_tokens_mask` (int8), one row per document. `documents`: a `Dataset`, an `IterableDataset`
    (tokenized as it is read) or a dict of them (each split alike). A `Dataset.map` cached by `datasets`."""
    from datasets import Features, Sequence, Value

    def tokenize(dataset):
        return _map(
            dataset,
            _tokens_batch,
            num_proc,
            "tokenizing",
            batch_size=TOKENIZE_DOCUMENTS,
            fn_kwargs={"tokenizer": tokenizer},
            remove_columns=["text"],
            features=Features(input_ids=Sequence(Value("int32")), special_tokens_mask=Sequence(Value("int8"))),
        )

    return _per_split(documents, tokenize)


def tokens_to_blocks(tokens, max_seq_length: int = 128, attention_scope: str = "block", num_proc: int | None = None):
    """Tokens (rows of `tokenize_documents`) → blocks of `max_seq_length` tokens: the documents concatenated in
    order and cut (`run_mlm.py`'s `group_texts`; the remainder shorter than a block is dropped once per
    `GROUP_DOCUMENTS` documents, and per worker with `num_proc`); with `attention_scope="document"` also
    `position_ids` (`documents_to_blocks`). A `Dataset`, `IterableDataset` (cut as it is read) or a dict of them.

    Raises:
        ValueError: an unknown `attention_scope` (naming --attention_scope).
    """
    from datasets import Features, Sequence, Value

    if attention_scope not in ATTENTION_SCOPES:
        raise ValueError(
            f"--attention_scope has unknown value {attention_scope!r}; allowed: {', '.join(ATTENTION_SCOPES)}"
        )
    ids, mask = Sequence(Value("int32")), Sequence(Value("int8"))
    per_document = attention_scope == "document"
    columns = {"input_ids": ids, "special_tokens_mask": mask} | ({"position_ids": ids} if per_document else {})

    def cut(dataset):
        blocks = _map(
            dataset.with_format("numpy"),  # numpy rows: a batch of long documents is not a list of ints
            _blocks_batch,
            num_proc,
            f"blocks of {max_seq_length}",
            batch_size=GROUP_DOCUMENTS,
            fn_kwargs={"block": max_seq_length, "per_document": per_document},
            features=Features(columns),
        )
        return blocks.with_format(None)

    return _per_split(tokens, cut)


def documents_to_blocks(
    documents,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int = 128,
    attention_scope: str = "block",
    num_proc: int | None = None,
):
    """Documents → blocks: each document tokenized as [CLS] text [SEP], the documents concatenated in order and cut
    into blocks of `max_seq_length` tokens (`run_mlm.py`'s `group_texts`: a block starts with [CLS] only where a
    document starts; the remainder shorter than a block is dropped once per `GROUP_DOCUMENTS` documents, and at the
    end of each worker's share with `num_proc`: another `num_proc` can give a few other blocks).

    `documents`: a `Dataset` (column `text`), an `IterableDataset` (streamed: tokenized and cut as training reads
    it) or a dict of them (each split cut alike). Returns the same kind, with columns `input_ids` and
    `special_tokens_mask` (int32 and int8 lists of `max_seq_length` per row), and with
    `attention_scope="document"` also `position_ids` (0, 1, ... restarting where a document starts and at each
    block start): FfnBert then computes each document of a block as if it were alone (a padding-free batch,
    docs/unpadded.md); "block" (BERT, `run_mlm.py`): every token attends to the whole block.

    The two steps are `tokenize_documents` and `tokens_to_blocks`, `Dataset.map` calls cached by `datasets`
    (`num_proc` workers): the same documents and tokenizer are tokenized once.

    Raises:
        ValueError: an unknown `attention_scope` (naming --attention_scope).
    """
    if attention_scope not in ATTENTION_SCOPES:
        raise ValueError(
            f"--attention_scope has unknown value {attention_scope!r}; allowed: {', '.join(ATTENTION_SCOPES)}"
        )
    return tokens_to_blocks(
        tokenize_documents(documents, tokenizer, num_proc), max_seq_length, attention_scope, num_proc
    )


def masking_collator(
    tokenizer: PreTrainedTokenizerBase,
    mlm_probability: float = 0.15,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    seed: int | None = None,
) -> DataCollatorForLanguageModeling:
    """BERT's masking (Devlin et al. 2019, sec. 3.1), transformers' `DataCollatorForLanguageModeling`:
    `mlm_probability` of the non-special tokens chosen; of those, `mask_replace_prob` become [MASK],
    `random_replace_prob` a token drawn uniformly from the whole vocabulary (special tokens included, so a random
    token may be [MASK] itself), the rest are kept. `labels` = the original token at chosen positions, -100
    elsewhere. `seed`: its own generator (the same masks whatever else used the global RNG); `None`: torch's global
    RNG (training batches)."""
    return DataCollatorForLanguageModeling(
        tokenizer,
        mlm_probability=mlm_probability,
        mask_replace_prob=mask_replace_prob,
        random_replace_prob=random_replace_prob,
        seed=seed,
    )


def _masked_batch(batch: dict, collator: DataCollatorForLanguageModeling) -> dict:
    rows = [dict(zip(batch, values, strict=True)) for values in zip(*batch.values(), strict=True)]
    masked = collator(rows)
    return {key: masked[key].tolist() for key in ("input_ids", "labels")}


def fixed_maskings(
    blocks,
    tokenizer: PreTrainedTokenizerBase,
    count: int = 1,
    seed: int = 42,
    mlm_probability: float = 0.15,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
):
    """Blocks → masks, fixed: `blocks` (rows of `documents_to_blocks`) masked `count` times by `masking_collator`
    with seeds `seed`, `seed + 1`, ..., the maskings concatenated (`count` × len(blocks) rows, masking 0 first).
    Columns `input_ids`, `labels` (-100 where not chosen) and `position_ids` if `blocks` has them; a chosen position
    shows [MASK] where `input_ids == tokenizer.mask_token_id`, the original token where `input_ids == labels`
    (kept), another token otherwise (random). The same blocks, tokenizer and options give the same masks, so every
    evaluation scores the same tokens (cached by `datasets` under a fingerprint of all of them).
    """
    from datasets import concatenate_datasets
    from datasets.fingerprint import Hasher

    maskings = []
    for k in range(count):
        collator = masking_collator(tokenizer, mlm_probability, mask_replace_prob, random_replace_prob, seed + k)
        fingerprint = Hasher.hash(
            (blocks._fingerprint, seed + k, mlm_probability, mask_replace_prob, random_replace_prob, MASK_BATCH)
            + (len(tokenizer), tokenizer.mask_token_id, tuple(tokenizer.all_special_ids))
        )
        masked = blocks.map(
            _masked_batch,
            batched=True,
            batch_size=MASK_BATCH,
            fn_kwargs={"collator": collator},
            remove_columns=[column for column in blocks.column_names if column != "position_ids"],
            new_fingerprint=fingerprint,
            desc=f"masking {k + 1} of {count}",
        )
        maskings.append(masked)
    return concatenate_datasets(maskings) if count > 1 else maskings[0]


__all__ = [
    "ATTENTION_SCOPES",
    "COMPRESSIONS",
    "DOCUMENT_BOUNDARIES",
    "corpus_files",
    "documents_to_blocks",
    "file_format",
    "fixed_maskings",
    "held_out_split",
    "load_corpus",
    "load_documents",
    "load_hub_corpus",
    "is_streamed",
    "tokenize_documents",
    "tokens_to_blocks",
    "masking_collator",
    "resolve_boundary",
    "split_documents",
]
