"""The data path of a pre-training run, one step after the other, each printing one line with its seconds
(`pretraining_data`): corpus → documents (`hf_ffn.training.corpus`) → tokenizer (`hf_ffn.mlm.tokenizer`) → blocks
and the held-out maskings (`hf_ffn.training.blocks`) → the context-free floors (`hf_ffn.mlm.floors`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from transformers import PreTrainedTokenizerBase, TrainingArguments

from ..training.blocks import fixed_maskings, tokenize_documents, tokens_to_blocks
from ..training.corpus import load_corpus, load_hub_corpus
from .arguments import PretrainingArguments, PretrainingDataArguments
from .floors import mlm_floors, never_chosen_ids
from .tokenizer import run_tokenizer, scratch_positions

if TYPE_CHECKING:
    from datasets import Dataset, IterableDataset

STREAM_FLOOR_BLOCKS = 10_000  # --streaming: the unigram of the floors is counted on the first this many blocks


class Phases:
    """A printed line per phase of the data path with its seconds (unless not `show`), kept in `seconds`."""

    def __init__(self, show: bool = True) -> None:
        self.show, self.seconds, self._last = show, {}, time.perf_counter()

    def done(self, name: str, what: str) -> None:
        now = time.perf_counter()
        self.seconds[name], self._last = now - self._last, now
        if self.show:
            print(f"hf-ffn mlm: {what} ({self.seconds[name]:.1f} s)", flush=True)


@dataclass
class PretrainingData:
    """What the data path hands the Trainer and the report."""

    documents: dict  # split → documents (`Dataset`, or `IterableDataset` when streamed)
    tokenizer: PreTrainedTokenizerBase
    tokenizer_source: str
    train: Dataset | IterableDataset  # blocks, masked afresh each batch
    evaluation: Dataset  # the held-out blocks masked --eval_maskings times
    floors: dict  # `mlm_floors`
    masking: dict  # `PretrainingDataArguments.masking_options`
    positions: int  # a from-scratch model's `max_position_embeddings` (`scratch_positions`)
    phase_seconds: dict = field(default_factory=dict)


def pretraining_data(
    args: PretrainingArguments,
    data_args: PretrainingDataArguments,
    training_args: TrainingArguments,
    resume: str | None,
    show: bool = True,
) -> PretrainingData:
    """Corpus → documents → tokenizer → blocks (cut to `--max_train_samples` / `--max_eval_samples`) → held-out
    maskings → floors; a stream's held-out blocks are read into memory, its floors counted on its first
    `STREAM_FLOOR_BLOCKS` blocks. Raises `ValueError` on text shorter than one block (and as the steps raise)."""
    from datasets import Dataset  # deferred: `hf-ffn mlm --help` answers without datasets

    phases = Phases(show)
    load = load_corpus if data_args.dataset_name is None else load_hub_corpus
    documents = load(**data_args.corpus_options())
    if data_args.streaming:
        phases.done("reading", f"opened {data_args.dataset_name} as a stream (read as training reads it)")
    else:
        counts = {split: len(docs) for split, docs in documents.items()}
        held_out = f"{counts['train']:,} train, {counts['validation']:,} held out"
        phases.done("reading", f"read {sum(counts.values()):,} documents: {held_out}")

    tokenizer, source = run_tokenizer(args, documents["train"], training_args, resume, data_args.max_seq_length)
    if args.tokenizer_name is None and args.model_name_or_path is None and resume is None:
        phases.done("tokenizer", f"trained a WordPiece tokenizer of {len(tokenizer):,} tokens")

    workers, block = data_args.preprocessing_num_workers, data_args.max_seq_length
    tokens = tokenize_documents(documents, tokenizer, workers)
    if not data_args.streaming:
        import pyarrow.compute as pc  # datasets' own dependency: the train extra, imported where it is needed

        count = pc.sum(pc.list_value_length(tokens["train"].data.column("input_ids"))).as_py() or 0
        phases.done("tokenizing", f"tokenized the documents: {count:,} training tokens")
    blocks = tokens_to_blocks(tokens, block, data_args.attention_scope, workers)
    train, evaluation, streamed = blocks["train"], blocks["validation"], data_args.streaming
    held_out, trained = data_args.max_eval_samples, data_args.max_train_samples
    if streamed:
        evaluation = Dataset.from_list(list(evaluation if held_out is None else evaluation.take(held_out)))
        train = train.take(trained) if trained else train
    else:
        evaluation = evaluation if held_out is None else evaluation.select(range(min(held_out, len(evaluation))))
        train = train.select(range(min(trained, len(train)))) if trained else train
    if len(evaluation) == 0 or (not streamed and len(train) == 0):
        raise ValueError(
            f"--max_seq_length {block}: the training or held-out text is shorter than one block "
            f"({'streamed' if streamed else len(train)} and {len(evaluation)} blocks)"
        )
    trained = "streamed" if streamed else f"{len(train):,}"
    phases.done("blocks", f"cut blocks of {block}: {trained} training, {len(evaluation):,} held out")
    masking = data_args.masking_options()
    masked = fixed_maskings(evaluation, tokenizer, data_args.eval_maskings, data_args.split_seed, **masking)
    phases.done("maskings", f"masked the held-out blocks {data_args.eval_maskings} time(s): {len(masked):,} rows")

    floors = mlm_floors(
        train.take(STREAM_FLOOR_BLOCKS) if streamed else train,  # a stream counted as it is read
        masked,
        len(tokenizer),
        tokenizer.mask_token_id,
        never_chosen_ids(tokenizer),
        masking["mask_replace_prob"],
        masking["random_replace_prob"],
    )
    phases.done("floors", f"context-free floors: unigram at [MASK] {floors['unigram_mask']:.4f} nats")
    positions = scratch_positions(block)
    return PretrainingData(documents, tokenizer, source, train, masked, floors, masking, positions, phases.seconds)
