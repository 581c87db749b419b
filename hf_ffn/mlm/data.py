"""The data phases of a pre-training run, each printing one line with its seconds (`Phases`): corpus → documents
(`corpus_documents`), tokens, blocks and held-out maskings (`blocks_and_maskings`), the floors (`context_free_floors`).
"""

from __future__ import annotations

import time

from transformers import PreTrainedTokenizerBase

from ..training.blocks import fixed_maskings, tokenize_documents, tokens_to_blocks
from ..training.corpus import is_streamed, load_corpus, load_hub_corpus
from .arguments import PretrainingDataArguments
from .floors import mlm_floors, never_chosen_ids

STREAM_FLOOR_BLOCKS = 10_000  # --streaming: the unigram of the floors is counted on the first this many blocks


class Phases:
    """One printed line per phase of the data path with its seconds (`done`; silent unless `show`), kept by name in
    `seconds`."""

    def __init__(self, show: bool = True, prog: str = "hf-ffn mlm") -> None:
        self.show, self.prog, self.seconds = show, prog, {}
        self._last = time.perf_counter()

    def done(self, name: str, what: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = now - self._last
        self._last = now
        if self.show:
            print(f"{self.prog}: {what} ({self.seconds[name]:.1f} s)", flush=True)


def materialise(dataset, count: int | None):
    """The first `count` rows (None: all) of `dataset`, a stream read into an in-memory `Dataset`."""
    from datasets import Dataset

    if not is_streamed(dataset):
        return dataset if count is None else dataset.select(range(min(count, len(dataset))))
    return Dataset.from_list(list(dataset if count is None else dataset.take(count)))


def corpus_documents(data_args: PretrainingDataArguments, phases: Phases):
    """Corpus → documents (`load_corpus`, or `load_hub_corpus` with --dataset_name), its line printed."""
    load = load_corpus if data_args.dataset_name is None else load_hub_corpus
    documents = load(**data_args.corpus_options())
    if data_args.streaming:
        phases.done("reading", f"opened {data_args.dataset_name} as a stream (read as training reads it)")
    else:
        counts = {split: len(docs) for split, docs in documents.items()}
        phases.done(
            "reading",
            f"read {sum(counts.values()):,} documents: {counts['train']:,} train, {counts['validation']:,} held out",
        )
    return documents


def blocks_and_maskings(
    documents, tokenizer: PreTrainedTokenizerBase, data_args: PretrainingDataArguments, phases: Phases | None = None
):
    """Documents → blocks → masks: `(training blocks, held-out blocks masked --eval_maskings times)`, cut to
    `--max_train_samples` / `--max_eval_samples`; a stream's held-out blocks are read into memory.

    Raises:
        ValueError: when the training or held-out text is shorter than one block.
    """
    phases = phases or Phases(show=False)
    workers, block = data_args.preprocessing_num_workers, data_args.max_seq_length
    tokens = tokenize_documents(documents, tokenizer, workers)
    if not data_args.streaming:
        import pyarrow.compute as pc  # datasets' own dependency: the train extra, imported where it is needed

        count = pc.sum(pc.list_value_length(tokens["train"].data.column("input_ids"))).as_py() or 0
        phases.done("tokenizing", f"tokenized the documents: {count:,} training tokens")
    blocks = tokens_to_blocks(tokens, block, data_args.attention_scope, workers)
    train, evaluation = blocks["train"], materialise(blocks["validation"], data_args.max_eval_samples)
    if not is_streamed(train) and data_args.max_train_samples:
        train = train.select(range(min(data_args.max_train_samples, len(train))))
    elif data_args.max_train_samples:
        train = train.take(data_args.max_train_samples)
    if len(evaluation) == 0 or (not is_streamed(train) and len(train) == 0):
        raise ValueError(
            f"--max_seq_length {block}: the training or held-out text is shorter than one block "
            f"({'streamed' if is_streamed(train) else len(train)} and {len(evaluation)} blocks)"
        )
    trained = "streamed" if is_streamed(train) else f"{len(train):,}"
    phases.done("blocks", f"cut blocks of {block}: {trained} training, {len(evaluation):,} held out")
    masked = fixed_maskings(
        evaluation, tokenizer, data_args.eval_maskings, data_args.split_seed, **data_args.masking_options()
    )
    phases.done("maskings", f"masked the held-out blocks {data_args.eval_maskings} time(s): {len(masked):,} rows")
    return train, masked


def context_free_floors(
    train, evaluation, tokenizer: PreTrainedTokenizerBase, data_args: PretrainingDataArguments
) -> dict:
    """`mlm_floors` of the training blocks (a stream's first `STREAM_FLOOR_BLOCKS`) on the held-out maskings."""
    masking = data_args.masking_options()
    return mlm_floors(
        train.take(STREAM_FLOOR_BLOCKS) if is_streamed(train) else train,  # a stream counted as it is read
        evaluation,
        len(tokenizer),
        tokenizer.mask_token_id,
        never_chosen_ids(tokenizer),
        masking["mask_replace_prob"],
        masking["random_replace_prob"],
    )


__all__ = [
    "STREAM_FLOOR_BLOCKS",
    "Phases",
    "blocks_and_maskings",
    "context_free_floors",
    "corpus_documents",
    "materialise",
]
