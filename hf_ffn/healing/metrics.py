"""How closely a student reproduces its teacher on held-out text (`compare_to_teacher`: cosine of mean-pooled
sentence embeddings, as sentence-transformers pools, and |Δ| of `last_hidden_state`), what its embeddings are worth
(`linear_probe`, on seeded folds shared by teacher and student), and the curve during training (`AgreementCallback`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase, TrainerCallback
from transformers.utils.logging import tqdm  # transformers' bars: off with disable_progress_bar()

from ..similarity import length_sorted_batches, mean_pool

PROBE_FOLDS = 5
PROBE_C = 1.0  # scikit-learn's default inverse L2 strength, on standardised features
PROBE_MAX_ITER = 2000  # lbfgs converges in a few hundred iterations on 384 standardised features; margin above


def measure_agreement(
    teacher: nn.Module,
    student: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    labels: Sequence[Any] | None = None,
    **kwargs,
) -> dict[str, Any]:
    """`compare_to_teacher` (`kwargs`: its keywords), plus with `labels` both `linear_probe`s and their per-fold
    difference (student − teacher)."""
    metrics, teacher_emb, student_emb = compare_to_teacher(teacher, student, tokenizer, texts, **kwargs)
    result: dict[str, Any] = {"agreement": metrics}
    if labels is not None:
        teacher_probe, student_probe = linear_probe(teacher_emb, labels), linear_probe(student_emb, labels)
        differences = np.subtract(student_probe["folds"], teacher_probe["folds"])
        result["probe"] = {
            "teacher": teacher_probe,
            "student": student_probe,
            "difference": float(differences.mean()),
            "difference_std": float(differences.std()),
        }
    return result


@torch.no_grad()
def compare_to_teacher(
    teacher: nn.Module,
    student: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    *,
    batch_size: int = 128,
    max_length: int = 128,
    teacher_cache: list | None = None,
    progress: str | None = None,
) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """Teacher–student agreement on `texts` (truncated to `max_length` tokens), both base models in eval mode
    (modes restored after). `teacher_cache`: an empty list is filled with the teacher's outputs (fp32 CPU, one per
    batch), a filled one replaces running the teacher. `progress`: a progress bar's description (None: no bar).

    Returns:
        `(metrics, teacher_embeddings, student_embeddings)`: metrics = {"cosine_mean", "cosine_min" (of the
        mean-pooled embeddings), "max_abs_diff", "mean_abs_diff" (`last_hidden_state` at real tokens), "texts",
        "tokens"}; embeddings (len(texts), hidden) float32.
    """
    modes = teacher.training, student.training
    teacher.eval(), student.eval()
    device = next(student.parameters()).device
    hidden = student.config.hidden_size
    teacher_emb = np.zeros((len(texts), hidden), dtype=np.float32)
    student_emb = np.zeros((len(texts), hidden), dtype=np.float32)
    cosines = np.zeros(len(texts), dtype=np.float64)
    max_diff, diff_sum, tokens = 0.0, 0.0, 0
    try:
        cached = teacher_cache is not None and len(teacher_cache) > 0
        batches = length_sorted_batches(tokenizer, texts, batch_size, max_length)
        if progress is not None:
            batches = tqdm(batches, desc=progress, total=math.ceil(len(texts) / batch_size), unit="batch")
        for number, (index, batch) in enumerate(batches):
            batch = {k: v.to(device) for k, v in batch.items()}
            if cached:
                t = teacher_cache[number].to(device)
            else:
                t = teacher(**batch).last_hidden_state.float()  # (batch, seq, hidden)
                if teacher_cache is not None:
                    teacher_cache.append(t.cpu())
            s = student(**batch).last_hidden_state.float()
            mask = batch["attention_mask"].bool()
            diff = (t - s).abs()[mask]  # (real tokens, hidden)
            max_diff = max(max_diff, diff.max().item())
            diff_sum += diff.double().sum().item()
            tokens += int(mask.sum())
            t_pooled, s_pooled = mean_pool(t, batch["attention_mask"]), mean_pool(s, batch["attention_mask"])
            cosines[index] = torch.nn.functional.cosine_similarity(t_pooled, s_pooled, dim=-1).double().cpu().numpy()
            teacher_emb[index], student_emb[index] = t_pooled.cpu().numpy(), s_pooled.cpu().numpy()
    finally:
        teacher.train(modes[0]), student.train(modes[1])
    metrics = {
        "cosine_mean": float(cosines.mean()),
        "cosine_min": float(cosines.min()),
        "max_abs_diff": max_diff,
        "mean_abs_diff": diff_sum / (tokens * hidden),
        "texts": len(texts),
        "tokens": tokens,
    }
    return metrics, teacher_emb, student_emb


def linear_probe(
    embeddings: np.ndarray,
    labels: Sequence[Any],
    *,
    folds: int = PROBE_FOLDS,
    seed: int = 0,
    C: float = PROBE_C,
    max_iter: int = PROBE_MAX_ITER,
) -> dict[str, Any]:
    """Linear-probe accuracy of `embeddings` (n, hidden) for `labels` (n,): stratified `folds`-fold cross-validation
    (shuffled with `seed`) of `StandardScaler` → `LogisticRegression(C, max_iter)`.

    Returns:
        {"accuracy": mean over folds, "std": their standard deviation, "folds": per-fold accuracies, "settings"}.

    Raises:
        ValueError: if the lengths differ or a class has fewer members than `folds`.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    labels = np.asarray(labels)
    if len(labels) != len(embeddings):
        raise ValueError(f"linear_probe: {len(embeddings)} embeddings but {len(labels)} labels")
    smallest = min(np.unique(labels, return_counts=True)[1])
    if smallest < folds:
        raise ValueError(f"linear_probe: a class has {smallest} examples, fewer than folds={folds}")
    probe = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=max_iter))
    split = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    scores = cross_val_score(probe, embeddings, labels, cv=split, scoring="accuracy")
    return {
        "accuracy": float(scores.mean()),
        "std": float(scores.std()),
        "folds": [float(s) for s in scores],
        "settings": {
            "folds": folds,
            "seed": seed,
            "C": C,
            "max_iter": max_iter,
            "features": "standardised",
            "classifier": "sklearn LogisticRegression (lbfgs, L2)",
        },
    }


class AgreementCallback(TrainerCallback):
    """At the start, every `every` optimizer steps and at the last, `compare_to_teacher` on `texts` (main process
    only), appended to `state.log_history` as {"step", "heldout_cosine_mean", ...} so it survives resuming."""

    def __init__(
        self,
        teacher: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        texts: Sequence[str],
        every: int,
        max_length: int = 128,
    ):
        self.teacher, self.tokenizer, self.texts = teacher, tokenizer, list(texts)
        self.every, self.max_length = every, max_length
        self.teacher_cache: list = []  # the teacher's outputs on `texts`, computed once

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if state.global_step == 0:  # the starting point (a resumed run has it in its restored log_history)
            self.record(state, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        last = state.global_step == state.max_steps
        if last or (self.every and state.global_step % self.every == 0):
            self.record(state, model)

    def record(self, state, model) -> None:
        done = any(e.get("step") == state.global_step and "heldout_cosine_mean" in e for e in state.log_history)
        if done or not state.is_world_process_zero:
            return
        metrics, _, _ = compare_to_teacher(
            self.teacher,
            model.base_model,
            self.tokenizer,
            self.texts,
            max_length=self.max_length,
            teacher_cache=self.teacher_cache,
        )
        kept = ("cosine_mean", "cosine_min", "max_abs_diff", "mean_abs_diff")
        state.log_history.append({"step": state.global_step, **{f"heldout_{k}": metrics[k] for k in kept}})
