"""Documents → blocks → masks, the second half of the MLM data path (the first: `hf_ffn.training.corpus`), one step
per function, each a batched `Dataset.map` cached as memory-mapped Arrow (or applied lazily to a stream):

    blocks = documents_to_blocks(documents, tokenizer, 128)                # DatasetDict of 128-token blocks
    evaluation = fixed_maskings(blocks["validation"], tokenizer, count=3)  # the held-out blocks masked 3 times

- Blocks (`documents_to_blocks`): [CLS] text [SEP] per document, concatenated and cut into blocks (`run_mlm.py`'s
  `group_texts`); with `attention_scope="document"`, `position_ids` restart at 0 where a document (or a block)
  starts, and FfnBert lets each document attend only to itself (its packed path, `hf_ffn.unpadding`).
- Masks: training batches are masked afresh by `masking_collator` (transformers' `DataCollatorForLanguageModeling`);
  the held-out blocks are masked once per seed (`fixed_maskings`), so every evaluation scores the same tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase

from .corpus import map_batched

ATTENTION_SCOPES = ("block", "document")
TOKENIZE_DOCUMENTS = 100  # documents per `map` batch when tokenizing (a book is ~100k tokens)
GROUP_DOCUMENTS = 1000  # documents per `map` batch when blocks are cut: the remainder is dropped once per batch
MASK_BATCH = 1000  # blocks masked per call of the collator in `fixed_maskings`


def mlm_blocks(documents: Sequence[str], tokenizer: PreTrainedTokenizerBase, block_size: int):
    """`documents_to_blocks` of a list of texts (an in-memory `Dataset`): a `Dataset` of `block_size`-token blocks
    with columns `input_ids` and `special_tokens_mask` (each a list of `block_size` ints per row): the documents
    tokenized ([CLS] text [SEP] each), concatenated and cut (`run_mlm.py`'s `group_texts`; the remainder shorter
    than a block is dropped, so a block starts with [CLS] only where a document starts)."""
    from datasets import Dataset

    return documents_to_blocks(Dataset.from_dict({"text": list(documents)}), tokenizer, block_size)


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
        return map_batched(
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
        blocks = map_batched(
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
