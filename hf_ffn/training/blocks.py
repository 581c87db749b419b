"""Documents → blocks → masks, the second half of the MLM data path (the first: `hf_ffn.training.corpus`), each step a
batched `Dataset.map` cached as memory-mapped Arrow (or applied lazily to a stream):

    blocks = documents_to_blocks(documents, tokenizer, 128)                # DatasetDict of 128-token blocks
    evaluation = fixed_maskings(blocks["validation"], tokenizer, count=3)  # the held-out blocks masked 3 times
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase

ATTENTION_SCOPES = ("block", "document")
TOKENIZE_DOCUMENTS = 100  # documents per `map` batch when tokenizing (a book is ~100k tokens)
GROUP_DOCUMENTS = 1000  # documents per `map` batch when blocks are cut: the remainder is dropped once per batch
MASK_BATCH = 1000  # blocks masked per call of the collator in `fixed_maskings`


def mlm_blocks(documents: Sequence[str], tokenizer: PreTrainedTokenizerBase, block_size: int):
    """`documents_to_blocks` of a list of texts: a `Dataset` of `block_size`-token blocks."""
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
    """One `map` batch of tokenized documents → its blocks of `block` tokens (the remainder dropped), with
    `position_ids` restarting at each document and block start when `per_document`."""
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


def _map(dataset, function, num_proc: int | None, desc: str, **options):
    """`dataset.map(function, batched=True, **options)`, with `num_proc` and `desc` unless a stream (mapped lazily)."""
    workers = {"num_proc": num_proc, "desc": desc} if hasattr(dataset, "__len__") else {}
    return dataset.map(function, batched=True, **workers, **options)


def _per_split(documents, function):
    """`function(dataset)` on a dataset, or on each split of a dict of them (returned as the same kind)."""
    if isinstance(documents, dict):
        return type(documents)({split: function(dataset) for split, dataset in documents.items()})
    return function(documents)


def tokenize_documents(documents, tokenizer: PreTrainedTokenizerBase, num_proc: int | None = None):
    """Documents (column `text`) → [CLS] text [SEP] tokens: columns `input_ids` (int32), `special_tokens_mask` (int8).
    `documents`: a `Dataset`, an `IterableDataset` or a dict of them."""
    from datasets import Features, Sequence, Value

    features = Features(input_ids=Sequence(Value("int32")), special_tokens_mask=Sequence(Value("int8")))
    options = {"fn_kwargs": {"tokenizer": tokenizer}, "remove_columns": ["text"], "features": features}
    return _per_split(
        documents,
        lambda split: _map(split, _tokens_batch, num_proc, "tokenizing", batch_size=TOKENIZE_DOCUMENTS, **options),
    )


def tokens_to_blocks(tokens, max_seq_length: int = 128, attention_scope: str = "block", num_proc: int | None = None):
    """Tokens (rows of `tokenize_documents`) → blocks of `max_seq_length` tokens (`documents_to_blocks`).

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
    options = {"fn_kwargs": {"block": max_seq_length, "per_document": per_document}, "features": Features(columns)}

    def cut(dataset):  # numpy rows: a batch of long documents is not a list of ints
        desc = f"blocks of {max_seq_length}"
        blocks = _map(
            dataset.with_format("numpy"), _blocks_batch, num_proc, desc, batch_size=GROUP_DOCUMENTS, **options
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
    """Documents → blocks: each document tokenized as [CLS] text [SEP], concatenated in order and cut into blocks of
    `max_seq_length` tokens (`run_mlm.py`'s `group_texts`; the remainder is dropped once per `GROUP_DOCUMENTS`
    documents and per `num_proc` worker). `documents`: a `Dataset` (column `text`), an `IterableDataset` or a dict
    of them; returns the same kind, columns `input_ids` and `special_tokens_mask`, and with
    `attention_scope="document"` `position_ids` restarting at each document and block start (FfnBert then computes
    each document as if alone, docs/unpadded.md); "block" (BERT): every token attends to the whole block.
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
    """BERT's masking (Devlin et al. 2019, sec. 3.1) with these rates; `seed`: its own generator, None: torch's."""
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
    """Blocks → masks, fixed: `blocks` masked `count` times by `masking_collator` with seeds `seed`, `seed + 1`, ...,
    concatenated (masking 0 first); columns `input_ids`, `labels` (-100 where not chosen) and `position_ids` if
    `blocks` has them. The same blocks, tokenizer and options give the same masks (cached under their fingerprint).
    """
    from datasets import concatenate_datasets
    from datasets.fingerprint import Hasher

    rates = (mlm_probability, mask_replace_prob, random_replace_prob)
    maskings = [
        blocks.map(
            _masked_batch,
            batched=True,
            batch_size=MASK_BATCH,
            fn_kwargs={"collator": masking_collator(tokenizer, *rates, seed + k)},
            remove_columns=[column for column in blocks.column_names if column != "position_ids"],
            new_fingerprint=Hasher.hash(
                (blocks._fingerprint, seed + k, *rates, MASK_BATCH)
                + (len(tokenizer), tokenizer.mask_token_id, tuple(tokenizer.all_special_ids))
            ),
            desc=f"masking {k + 1} of {count}",
        )
        for k in range(count)
    ]
    return concatenate_datasets(maskings) if count > 1 else maskings[0]
