"""A WordPiece tokenizer trained from scratch for `hf-ffn mlm` (`train_tokenizer`), its vocabulary kept for pieces
rather than rare characters (`alphabet_limit`: the characters that cover `CHARACTER_COVERAGE` of the text)."""

from __future__ import annotations

from collections import Counter

from transformers import BertTokenizer, PreTrainedTokenizerBase

# SentencePiece's default `character_coverage` (Kudo & Richardson 2018): the share of the text's characters the kept
# alphabet must cover; the rarest characters, together at most 0.05% of the text, read as [UNK].
CHARACTER_COVERAGE = 0.9995


def _texts(documents):
    """The documents' texts: a list as it is, a `datasets.Dataset` (column `text`) in batches of 1,000."""
    if hasattr(documents, "iter"):
        return (batch["text"] for batch in documents.iter(batch_size=1000))
    return documents


def character_counts(documents) -> Counter:
    """How often each character occurs in `documents` after BERT's uncased normalisation (lower-casing, accents
    stripped, CJK characters and punctuation spaced out), whitespace left out: the alphabet WordPiece's trainer sees.
    """
    normalizer = BertTokenizer().backend_tokenizer.normalizer
    counts: Counter = Counter()
    for batch in _texts(documents):
        for text in [batch] if isinstance(batch, str) else batch:
            counts.update(normalizer.normalize_str(text))
    for space in [c for c in counts if c.isspace()]:
        del counts[space]
    return counts


def alphabet_limit(counts: Counter, vocab_size: int, coverage: float = CHARACTER_COVERAGE) -> int:
    """How many characters a WordPiece vocabulary of `vocab_size` trained on text of these character `counts` keeps
    (`limit_alphabet` of `tokenizers`' trainer, which keeps the most frequent): the fewest whose occurrences cover
    `coverage` of all characters (SentencePiece's `character_coverage`), and at most (`vocab_size` − 5) / 2, since a
    kept character takes up to two entries (itself and its ## form) beside the 5 special tokens.

    Examples: English prose needs about a hundred characters whatever its size, a Chinese text thousands.

    Raises:
        ValueError: `coverage` outside (0, 1].
    """
    if not 0 < coverage <= 1:
        raise ValueError(f"coverage has value {coverage}; allowed: a share in (0, 1]")
    needed, covered, total = 0, 0, sum(counts.values())
    for _, count in counts.most_common():
        if covered >= coverage * total:
            break
        needed, covered = needed + 1, covered + count
    return max(1, min(needed, (vocab_size - 5) // 2))


def train_tokenizer(documents, vocab_size: int = 8192) -> PreTrainedTokenizerBase:
    """BERT's uncased WordPiece tokenizer (`BertTokenizer`: lower-casing, accent stripping, BERT's pre-tokenizer and
    special tokens [PAD] [UNK] [CLS] [SEP] [MASK]) trained from scratch on `documents` with `tokenizers`' WordPiece
    trainer (`train_new_from_iterator`). `documents`: a list of texts, or a `datasets.Dataset` with a `text` column
    (read 1,000 documents at a time, never all in memory at once; read twice: once to count the characters). The
    vocabulary has at most `vocab_size` entries, special tokens included (fewer when the text has fewer distinct
    pieces). Not deterministic: two trainings on the same text may number the pieces differently (`run_pretraining`
    trains on process 0 only and every other process loads its result).

    Pieces must be seen at least twice (`min_frequency=2`, as in `tokenizers`' `BertWordPieceTokenizer.train`), and
    the alphabet is the `alphabet_limit` most frequent characters, those covering 99.95% of the text. A word holding
    a character outside it reads as [UNK] (a CJK character alone, since BERT's pre-tokenizer splits those). Without
    the limit every character of the text enters the vocabulary before any piece: on 40M words of Wikipedia and
    books, 3,760 of 4,096 entries were single characters or their ## forms (3,656 non-ASCII) and "next" read as
    ne ##x ##t."""
    limit = alphabet_limit(character_counts(documents), vocab_size)
    return BertTokenizer().train_new_from_iterator(
        _texts(documents), vocab_size=vocab_size, length=len(documents), min_frequency=2, limit_alphabet=limit
    )
