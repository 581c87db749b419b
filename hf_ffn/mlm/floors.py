"""Context-free floors of masked-language-model losses: what a model that reads no context scores on the evaluation's
fixed maskings; a model has learned from context only where its loss is below them (docs/pretraining.md, "Did the
model learn anything?").

Masking rule (Devlin et al. 2019, sec. 3.1): a chosen token is shown as [MASK] with probability `p_mask`, as a
token drawn uniformly from all `V` ids with `p_random`, kept with `p_keep = 1 − p_mask − p_random`. `q`: the
training tokens' unigram with add-one smoothing over the ids that can be chosen (0 at `never_chosen_ids`).

1. `unigram_mask`: the mean over [MASK] positions of −log q(label).
2. `copy_aware`: the loss of the Bayes-optimal predictor that sees only the shown token v. For a label y,
   P(v = [MASK] | y) = p_mask + p_random / V and P(v = t | y) = p_keep · 1{t = y} + p_random / V (t ≠ [MASK]);
   Bayes' rule with P(y) = q(y), since Σ_y q(y) P(v = t | y) = p_keep · q(t) + p_random / V:

       v = [MASK]:      P(y | v) = q(y)
       v = t:           P(y | v) = q(y) · (p_keep · 1{y = t} + p_random / V) / (p_keep · q(t) + p_random / V)

   averaged over every scored position (`copy_aware_mask`, `_kept`, `_random`: over each kind).
"""

from __future__ import annotations

import numpy as np

from .metrics import IGNORE_INDEX

COUNT_BATCH = 10_000  # blocks read per batch (memory-mapped Arrow → numpy): the corpus is never in memory at once
STREAM_COUNT_BATCH = 1_000  # blocks per batch from a stream (`IterableDataset`: rows decoded into memory)


def unigram_counts(blocks, vocab_size: int) -> np.ndarray:
    """The count of each token id among the non-special tokens of `blocks` (`documents_to_blocks` rows, streamed or
    not), read a batch at a time: int64 (vocab_size,); `ValueError` on a token id ≥ `vocab_size`."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    size = COUNT_BATCH if hasattr(blocks, "__len__") else STREAM_COUNT_BATCH
    for batch in blocks.select_columns(["input_ids", "special_tokens_mask"]).with_format("numpy").iter(size):
        ids = np.asarray(batch["input_ids"]).reshape(-1)[np.asarray(batch["special_tokens_mask"]).reshape(-1) == 0]
        if ids.size and int(ids.max()) >= vocab_size:
            raise ValueError(f"token id {int(ids.max())} in the blocks is outside the vocabulary of {vocab_size} ids")
        counts += np.bincount(ids, minlength=vocab_size)
    return counts


def never_chosen_ids(tokenizer) -> list[int]:
    """The ids masking never chooses: the special ids but [UNK], which stands in the text like a word."""
    return [i for i in tokenizer.all_special_ids if i != tokenizer.unk_token_id]


def unigram_distribution(counts: np.ndarray, never_chosen) -> np.ndarray:
    """q: `counts` (V,) with add-one smoothing, 0 at `never_chosen`; float64, sums to 1."""
    q = counts.astype(np.float64) + 1.0
    q[list(never_chosen)] = 0.0
    return q / q.sum()


def context_free_losses(
    input_ids: np.ndarray,
    labels: np.ndarray,
    q: np.ndarray,
    mask_token_id: int,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
) -> tuple[np.ndarray, np.ndarray]:
    """`(unigram, copy_aware)`: float64 losses (nats) at the scored positions (row-major) of `input_ids` and `labels`
    (one shape, `IGNORE_INDEX` where not scored), −log q(label) and −log P(label | shown token); `q`: (V,)."""
    scored = labels != IGNORE_INDEX
    y, v = labels[scored].astype(np.int64), input_ids[scored].astype(np.int64)
    p_keep, uniform = 1.0 - mask_replace_prob - random_replace_prob, random_replace_prob / len(q)
    unigram = -np.log(q[y])
    shown = v != mask_token_id
    likelihood = np.where(y == v, p_keep + uniform, uniform)  # P(v | y) for v ≠ [MASK]
    evidence = p_keep * q[v] + uniform  # P(v) / ... for v ≠ [MASK]
    with np.errstate(divide="ignore", invalid="ignore"):
        copy = -np.log(q[y] * likelihood / evidence)
    return unigram, np.where(shown, copy, unigram)


def mlm_floors(
    train_blocks,
    maskings,
    vocab_size: int,
    mask_token_id: int,
    never_chosen,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
) -> dict:
    """The context-free floors of an MLM evaluation, q from `train_blocks` (`vocab_size`: `len(tokenizer)`), scored
    on `maskings`: `unigram_mask`, `copy_aware`, `copy_aware_mask`, `copy_aware_kept`, `copy_aware_random` (nats;
    `nan` where a kind has no position), `smoothing` and `training_tokens_counted`."""
    counts = unigram_counts(train_blocks, vocab_size)
    q = unigram_distribution(counts, never_chosen)
    kinds = {"unigram_mask": "mask", "copy_aware": "all", "copy_aware_mask": "mask"}
    kinds |= {"copy_aware_kept": "kept", "copy_aware_random": "random"}
    sums, totals = dict.fromkeys(kinds, 0.0), dict.fromkeys(("mask", "all", "kept", "random"), 0)
    for batch in maskings.select_columns(["input_ids", "labels"]).with_format("numpy").iter(COUNT_BATCH):
        input_ids, labels = np.asarray(batch["input_ids"]), np.asarray(batch["labels"])
        unigram, copy = context_free_losses(input_ids, labels, q, mask_token_id, mask_replace_prob, random_replace_prob)
        scored = labels != IGNORE_INDEX
        y, v = labels[scored], input_ids[scored]
        masked, kept = v == mask_token_id, v == y
        where = {"mask": masked, "all": np.ones_like(masked), "kept": kept, "random": ~masked & ~kept}
        for key, kind in kinds.items():
            sums[key] += (unigram if key == "unigram_mask" else copy)[where[kind]].sum()
        totals = {kind: total + int(where[kind].sum()) for kind, total in totals.items()}
    floors = {key: float(sums[key] / totals[kind]) if totals[kind] else float("nan") for key, kind in kinds.items()}
    return floors | {"smoothing": "add-one", "training_tokens_counted": int(counts.sum())}


# A from-scratch model whose held-out [MASK] loss is less than this many nats below the unigram floor has not
# learned to use context yet: it still predicts the frequent tokens (docs/pretraining.md, "The plateau").
PLATEAU_MARGIN = 0.3
PLATEAU_DOCS = "docs/pretraining.md#the-plateau-a-model-that-has-not-learned-to-use-context"


def plateau_verdict(mask_loss: float, unigram_mask: float, margin: float = PLATEAU_MARGIN) -> dict:
    """Whether a model has learned to use context (its held-out [MASK] loss at least `margin` nats below the unigram
    floor): `learned`, `mask_loss`, `unigram_mask`, `below_floor` (nats), `margin`, `message` (printed, else "")."""
    below = unigram_mask - mask_loss
    learned = bool(below >= margin)
    message = (
        ""
        if learned
        else f"NOT LEARNED YET: held-out [MASK] loss {mask_loss:.4f} is {abs(below):.2f} nats "
        f"{'below' if below >= 0 else 'above'} the unigram floor {unigram_mask:.4f} (learned: {margin:g} or more "
        f"below): the model has not learned to use context yet and predicts "
        f"frequent tokens; train longer or raise the learning rate ({PLATEAU_DOCS})"
    )
    verdict = {"learned": learned, "mask_loss": mask_loss, "unigram_mask": unigram_mask, "below_floor": below}
    return verdict | {"margin": margin, "message": message}
