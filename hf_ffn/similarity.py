"""Zero-shot sentence similarity (`hf-ffn sts`): how well a model's frozen sentence embeddings rank STS-B sentence
pairs, with no training; a second measure of what a conversion or healing keeps (docs/tasks.md, "Zero-shot STS-B").

The measure (Reimers & Gurevych 2019, arXiv 1908.10084, sec. 4.1; sentence-transformers'
`EmbeddingSimilarityEvaluator`): Spearman's rank correlation, ×1, of the cosine similarities of mean-pooled
embeddings (`mean_pool`, the pooling all-MiniLM-L6-v2 was trained with) with the gold scores (0–5).
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
    """Yield `(index, batch)`: tokenized batches of `batch_size` texts, shortest first, truncated to `max_length`;
    `index` (numpy int array) gives their texts' positions."""
    lengths = [len(ids) for ids in tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]]
    order = np.argsort(lengths, kind="stable")
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size]
        batch = [texts[i] for i in index]
        yield index, tokenizer(batch, truncation=True, max_length=max_length, padding=True, return_tensors="pt")


@torch.no_grad()
def sentence_embeddings(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    batch_size: int = 64,
    max_length: int = STS_MAX_LENGTH,
) -> np.ndarray:
    """(len(texts), hidden) float32: the `mean_pool` embedding of each text, in the order of `texts`, from a base
    model returning `last_hidden_state`, run in eval mode (its mode restored after) on length-sorted batches."""
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
    """The zero-shot STS-B measure of the checkpoint folder `model_path` (anything `AutoModel` loads, with its
    tokenizer) on STS-B `split` (test, validation or train) read from `data_dir`.

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
    model, _ = load_pretrained(AutoModel, model_path, "--model_name_or_path")  # BertModel / FfnBertModel / ...
    model.to(device or "cpu")
    # no longer than the model has positions for (RoBERTa's count from padding_idx + 1)
    offset = getattr(model.base_model.embeddings, "padding_idx", -1) + 1
    max_length = min(max_length, model.config.max_position_embeddings - offset)
    texts = list(pairs["sentence1"]) + list(pairs["sentence2"])
    embeddings = sentence_embeddings(model, tokenizer, texts, batch_size=batch_size, max_length=max_length)
    result = cosine_spearman(embeddings[: len(pairs)], embeddings[len(pairs) :], pairs["label"])
    seconds = time.perf_counter() - start
    return {**result, "pairs": len(pairs), "split": split, "model": str(Path(model_path)), "seconds": seconds}
