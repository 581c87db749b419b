"""Zero-shot sentence similarity: how well a model's frozen sentence embeddings rank STS-B sentence pairs, with no
training. A second measure of what a conversion or healing keeps, beside the linear probe (`hf_ffn.healing`).

The measure (Reimers & Gurevych 2019, arXiv 1908.10084, sec. 4.1; the `EmbeddingSimilarityEvaluator` of
sentence-transformers): embed each sentence by the mean of the last hidden states over its real tokens
(`mean_pool`, sentence-transformers' `Pooling` with `pooling_mode_mean_tokens`, the pooling all-MiniLM-L6-v2 was
trained with), take the cosine similarity of the two embeddings of each pair, and report Spearman's rank
correlation of the cosines with the gold scores (0–5) over the pairs of STS-B test (1,379), ×1 (not ×100).
all-MiniLM-L6-v2's own model card and the sentence-transformers results table give about 0.82 for it.

    hf-ffn sts --model_name_or_path FOLDER --data_dir ../shared/data/stsb
    python -c 'from hf_ffn.similarity import sts_spearman; print(sts_spearman("FOLDER", "../shared/data/stsb"))'
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers import AutoModel, PreTrainedTokenizerBase

from .checkpoints import check_checkpoint, load_pretrained, load_tokenizer
from .finetune.tasks import load_stsb

STS_MAX_LENGTH = 128  # tokens per sentence: the longest STS-B test sentence is under 100 tokens, so none is cut


def mean_pool(last_hidden_state: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(batch, seq, hidden), (batch, seq) → (batch, hidden): the mean over real tokens (attention_mask 1)."""
    mask = attention_mask.unsqueeze(-1).to(last_hidden_state.dtype)
    return (last_hidden_state * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def length_sorted_batches(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], batch_size: int, max_length: int):
    """Yield `(index, batch)`: tokenized batches of `batch_size` texts, shortest first (less padding), truncated to
    `max_length` tokens and padded to the batch's longest; `index` (numpy int array) gives their texts' positions."""
    lengths = [len(ids) for ids in tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]]
    order = np.argsort(lengths, kind="stable")
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size]
        yield (
            index,
            tokenizer(
                [texts[i] for i in index], truncation=True, max_length=max_length, padding=True, return_tensors="pt"
            ),
        )


@torch.no_grad()
def sentence_embeddings(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    batch_size: int = 64,
    max_length: int = STS_MAX_LENGTH,
) -> np.ndarray:
    """(len(texts), hidden) float32: the `mean_pool` embedding of each text, in the order of `texts`.

    `model`: a base model (BERT / FfnBert `...Model`) returning `last_hidden_state`; run in eval mode (its mode is
    restored after), fp32, batches of `batch_size` texts sorted by length (less padding: the padded positions are
    masked out of attention and of the mean, so the order changes no embedding beyond float rounding).
    """
    training = model.training
    model.eval()
    device = next(model.parameters()).device
    embeddings = np.zeros((len(texts), model.config.hidden_size), dtype=np.float32)
    try:
        for index, batch in length_sorted_batches(tokenizer, texts, batch_size, max_length):
            batch = batch.to(device)
            hidden = model(**batch).last_hidden_state.float()  # (batch, seq, hidden)
            embeddings[index] = mean_pool(hidden, batch["attention_mask"]).cpu().numpy()
    finally:
        model.train(training)
    return embeddings


def cosine_spearman(first: np.ndarray, second: np.ndarray, scores: Sequence[float]) -> dict[str, float]:
    """Spearman and Pearson correlation (scipy.stats) of the row-wise cosine similarities of `first` and `second`
    (pairs, hidden) with the gold `scores` (pairs,)."""
    from scipy.stats import pearsonr, spearmanr

    first, second = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    cosines = (first * second).sum(1) / (np.linalg.norm(first, axis=1) * np.linalg.norm(second, axis=1))
    return {
        "spearman": float(spearmanr(cosines, scores).statistic),
        "pearson": float(pearsonr(cosines, scores).statistic),
    }


def sts_spearman(
    model_path: str,
    data_dir: str,
    *,
    split: str = "test",
    batch_size: int = 64,
    max_length: int = STS_MAX_LENGTH,
    device: str | None = None,
) -> dict:
    """The zero-shot STS-B measure of the checkpoint folder `model_path` (a BERT teacher, a converted or a healed
    FfnBert folder: anything `AutoModel` loads, with its tokenizer): Spearman (and Pearson) correlation of the
    cosine similarities of `mean_pool` embeddings with the gold scores of STS-B `split` (test, validation or train;
    read by `hf_ffn.finetune.tasks.load_stsb` from `data_dir`).

    Returns:
        {"spearman", "pearson", "pairs", "split", "model", "seconds"}.

    Raises:
        FileNotFoundError: naming `--model_name_or_path` or `--data_dir` when a folder or an STS-B file is missing.
        ValueError: when `split` is not one of test, validation, train, or an STS-B line is malformed.
    """
    if split not in ("test", "validation", "train"):
        raise ValueError(f"--split has unknown value {split!r}; allowed: test, validation, train")
    check_checkpoint(model_path, "--model_name_or_path")
    pairs = load_stsb(data_dir, (split,))[split]
    start = time.perf_counter()
    tokenizer = load_tokenizer(model_path, "--model_name_or_path")
    # the base model: BertModel / FfnBertModel
    model, _ = load_pretrained(AutoModel, model_path, "--model_name_or_path")
    model.to(device or "cpu")
    texts = list(pairs["sentence1"]) + list(pairs["sentence2"])
    embeddings = sentence_embeddings(model, tokenizer, texts, batch_size=batch_size, max_length=max_length)
    result = cosine_spearman(embeddings[: len(pairs)], embeddings[len(pairs) :], pairs["label"])
    return {
        **result,
        "pairs": len(pairs),
        "split": split,
        "model": str(Path(model_path)),
        "seconds": time.perf_counter() - start,
    }


__all__ = [
    "STS_MAX_LENGTH",
    "cosine_spearman",
    "length_sorted_batches",
    "mean_pool",
    "sentence_embeddings",
    "sts_spearman",
]
