"""A WordPiece tokenizer trained from scratch for `hf-ffn mlm` (`train_tokenizer`), with the vocabulary kept for
pieces rather than rare characters (`alphabet_limit`)."""

from __future__ import annotations

from transformers import BertTokenizer, PreTrainedTokenizerBase


def alphabet_limit(vocab_size: int) -> int:
    """The most characters a trained WordPiece vocabulary of `vocab_size` keeps (`train_tokenizer`): `vocab_size` // 16,
    at least 100 (English letters, digits and punctuation with room to spare) and at most 1,000 (the `tokenizers`
    library's `BertWordPieceTokenizer.train` default, made for BERT's 30,522). A kept character costs up to two
    entries (itself and its ## form), so a small vocabulary keeps most of its entries for pieces: 4,096 → 256
    characters, 8,192 → 512, 30,522 → 1,000."""
    return min(1000, max(100, vocab_size // 16))


def train_tokenizer(documents, vocab_size: int = 8192) -> PreTrainedTokenizerBase:
    """BERT's uncased WordPiece tokenizer (`BertTokenizer`: lower-casing, accent stripping, BERT's pre-tokenizer and
    special tokens [PAD] [UNK] [CLS] [SEP] [MASK]) trained from scratch on `documents` with `tokenizers`' WordPiece
    trainer (`train_new_from_iterator`). `documents`: a list of texts, or a `datasets.Dataset` with a `text` column
    (read 1,000 documents at a time, never all in memory at once). The vocabulary has `vocab_size` entries, special
    tokens included, or fewer when the text has fewer distinct pieces. Not deterministic: two trainings on the
    same text may number the pieces differently (`run_pretraining` trains on process 0 only and every other
    process loads its result).

    The trainer's settings are `BertWordPieceTokenizer.train`'s (`tokenizers`): pieces seen at least twice
    (`min_frequency=2`) and the `alphabet_limit(vocab_size)` most frequent characters (`limit_alphabet`); rarer
    characters read as [UNK]. Without the limit every character of the text enters the vocabulary first: on 40M
    words of Wikipedia and books, 3,760 of 4,096 entries were single characters (3,656 of them non-ASCII) and
    "next" read as ne ##x ##t."""
    texts = documents
    if hasattr(documents, "iter"):  # a Dataset: batches of texts, which tokenizers' trainer takes as they are
        texts = (batch["text"] for batch in documents.iter(batch_size=1000))
    return BertTokenizer().train_new_from_iterator(
        texts,
        vocab_size=vocab_size,
        length=len(documents),
        min_frequency=2,
        limit_alphabet=alphabet_limit(vocab_size),
    )
