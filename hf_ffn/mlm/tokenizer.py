"""The tokenizer of a pre-training run (`run_tokenizer`): the resumed checkpoint's, the one named, or a WordPiece
tokenizer trained from scratch (`train_tokenizer`), its vocabulary kept for pieces rather than rare characters
(`alphabet_limit`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from transformers import AutoTokenizer, BertTokenizer, PreTrainedTokenizerBase, TrainingArguments

from ..training.arguments import ModelArguments
from ..training.outputs import load_tokenizer

TOKENIZER_FOLDER = "tokenizer"  # where a trained tokenizer is saved in --output_dir as soon as it is trained

# SentencePiece's default `character_coverage` (Kudo & Richardson 2018): the share of the text's characters the kept
# alphabet must cover; the rarest characters, together at most 0.05% of the text, read as [UNK].
CHARACTER_COVERAGE = 0.9995


def _texts(documents):
    """The documents' texts: a list as it is, a `datasets.Dataset` (column `text`) in batches of 1,000."""
    if hasattr(documents, "iter"):
        return (batch["text"] for batch in documents.iter(batch_size=1000))
    return documents


def character_counts(documents) -> Counter:
    """How often each character occurs in `documents` after BERT's uncased normalisation, whitespace left out."""
    normalizer = BertTokenizer().backend_tokenizer.normalizer
    counts: Counter = Counter()
    for batch in _texts(documents):
        for text in [batch] if isinstance(batch, str) else batch:
            counts.update(normalizer.normalize_str(text))
    for space in [c for c in counts if c.isspace()]:
        del counts[space]
    return counts


def alphabet_limit(counts: Counter, vocab_size: int, coverage: float = CHARACTER_COVERAGE) -> int:
    """The `limit_alphabet` of a WordPiece vocabulary of `vocab_size`: the fewest most frequent characters covering
    `coverage` (in (0, 1]) of `counts`, at most (`vocab_size` − 5) / 2 (a character takes itself and its ## form)."""
    if not 0 < coverage <= 1:
        raise ValueError(f"coverage has value {coverage}; allowed: a share in (0, 1]")
    needed, covered, total = 0, 0, sum(counts.values())
    for _, count in counts.most_common():
        if covered >= coverage * total:
            break
        needed, covered = needed + 1, covered + count
    return max(1, min(needed, (vocab_size - 5) // 2))


def train_tokenizer(documents, vocab_size: int = 8192) -> PreTrainedTokenizerBase:
    """BERT's uncased WordPiece tokenizer (`BertTokenizer`) trained on `documents` (a list of texts, or a `Dataset`
    with a `text` column, read twice in batches) with at most `vocab_size` entries, pieces seen at least twice, the
    alphabet limited by `alphabet_limit` (without it every character of the text enters the vocabulary before any
    piece). Not deterministic: two trainings may number the pieces differently."""
    limit = alphabet_limit(character_counts(documents), vocab_size)
    return BertTokenizer().train_new_from_iterator(
        _texts(documents), vocab_size=vocab_size, length=len(documents), min_frequency=2, limit_alphabet=limit
    )


def scratch_positions(max_seq_length: int) -> int:
    """A from-scratch model's `max_position_embeddings` (and its trained tokenizer's `model_max_length`): BERT's 512,
    or the block length when longer."""
    return max(512, max_seq_length)


def run_tokenizer(
    args, train_documents, training_args: TrainingArguments, resume: str | None, max_seq_length: int
) -> tuple[PreTrainedTokenizerBase, str]:
    """The run's tokenizer and where it came from: the resumed checkpoint's, the one `args` names, or one trained on
    `train_documents` by process 0 and saved at once in `output_dir/tokenizer` (every process of a `torchrun` job
    loads it: one vocabulary)."""
    if resume is not None and (Path(resume) / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(resume), f"from the checkpoint {resume}"
    if args.tokenizer_name is not None or args.model_name_or_path is not None:
        named = ModelArguments(args.model_name_or_path, tokenizer_name=args.tokenizer_name)
        return load_tokenizer(named), args.tokenizer_name or args.model_name_or_path
    folder = Path(training_args.output_dir) / TOKENIZER_FOLDER
    with training_args.main_process_first(local=False, desc="training the tokenizer"):
        if training_args.process_index == 0:
            trained = train_tokenizer(train_documents, args.scratch("vocab_size"))
            trained.model_max_length = scratch_positions(max_seq_length)  # else 1e30: truncation=True never cuts
            trained.save_pretrained(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    return tokenizer, f"WordPiece trained on the training documents ({args.scratch('vocab_size')} asked)"
