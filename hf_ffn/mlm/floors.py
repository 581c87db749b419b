"""Context-free floors of masked-language-model losses: what a model that reads no context scores on the same fixed
maskings as the evaluation (`hf_ffn.training.blocks.fixed_maskings`). A model has learned something from context
only where its loss is below these.

Notation. The masking rule (BERT's, `masking_collator`): each non-special token is chosen (scored) with
probability `mlm_probability`; a chosen token is shown as [MASK] with probability `p_mask`
(`mask_replace_prob`), replaced by a token drawn uniformly from the whole vocabulary of `V` ids (special tokens
included, as transformers' `DataCollatorForLanguageModeling` draws) with probability `p_random`
(`random_replace_prob`), and kept with `p_keep = 1 − p_mask − p_random`. `q(y)`: the unigram distribution of the
training tokens that can be chosen (non-special), estimated with add-one (Laplace) smoothing over the `V_n`
ids that can be chosen: `q(y) = (c(y) + 1) / (N + V_n)` for such an id with count `c(y)` among the `N` training
tokens that can be chosen, `q(y) = 0` for the ids never chosen (`never_chosen`: the tokenizer's special ids but
[UNK], which stands in the text and can be a label: `never_chosen_ids`).

1. **The [MASK]-position unigram floor** (`unigram_mask`): mean over the [MASK] positions of −log q(label).
2. **The copy-aware context-free floor** (`copy_aware`, over all scored positions). A predictor that sees only the
   token `v` shown at a scored position (no context) does best with the posterior of the label `y` given `v`
   (the Bayes-optimal predictor under log loss). By the masking rule, for the label `y` (a non-special token):

       P(v = [MASK] | y) = p_mask + p_random / V
       P(v = t | y)      = p_keep · 1{t = y} + p_random / V          (t ≠ [MASK])

   so with Bayes' rule (P(y) = q(y)):

       v = [MASK]:  P(y | v) = q(y)                                  (the factor does not depend on y)
       v = t:       P(y | v) = q(y) · (p_keep · 1{y = t} + p_random / V) / (p_keep · q(t) + p_random / V)

   since Σ_y q(y) (p_keep 1{y = t} + p_random / V) = p_keep q(t) + p_random / V. Its loss at each kind of position
   (the kinds of `hf_ffn.mlm.metrics`):

       [MASK] (v = [MASK]):        −log q(y)
       kept   (v = y):             −log [q(y) (p_keep + p_random/V) / (p_keep q(y) + p_random/V)]
       random (v = t ≠ y):         −log [q(y) (p_random/V) / (p_keep q(t) + p_random/V)]

   With `p_random = 0` a kept token is certain (loss 0); with `p_keep = 0` every shown token is ignored (the
   unigram). A shown token is trusted more the more frequent it is: a random draw shows every id with the same
   probability p_random/V, the true token is shown with p_keep·q(t); where q(t) ≪ p_random/(p_keep·V) the shown
   token is more likely a random replacement than the label. `copy_aware` is the mean over every
   scored position, each weighing the same (as `mlm_scores`' `token_loss`); `copy_aware_mask`, `copy_aware_kept`
   and `copy_aware_random` are its means over each kind (`copy_aware_mask` = `unigram_mask`).

The floors are estimates: q comes from the training tokens and is scored on held-out ones (a model trained on the
same tokens could learn q exactly, and no better without context). Sources: Devlin et al. 2019, sec. 3.1 (the
80/10/10 rule); the posterior is Bayes' rule on that rule.
"""

from __future__ import annotations

import numpy as np

from .metrics import IGNORE_INDEX

COUNT_BATCH = 10_000  # blocks read per batch (memory-mapped Arrow → numpy): the corpus is never in memory at once
STREAM_COUNT_BATCH = 1_000  # blocks per batch from a stream (`IterableDataset`: rows decoded into memory)


def unigram_counts(blocks, vocab_size: int) -> np.ndarray:
    """The count of each token id among the non-special tokens of `blocks` (rows of
    `hf_ffn.training.blocks.documents_to_blocks`: `input_ids` and `special_tokens_mask`, the tokens that can be
    chosen for masking; a `Dataset` or a streamed `IterableDataset`), read `COUNT_BATCH` blocks at a time
    (`STREAM_COUNT_BATCH` from a stream) (`Dataset.iter`, numpy format; `np.bincount` per
    batch).

    Returns:
        int64 array of shape (vocab_size,).

    Raises:
        ValueError: a token id ≥ `vocab_size`.
    """
    counts = np.zeros(vocab_size, dtype=np.int64)
    size = COUNT_BATCH if hasattr(blocks, "__len__") else STREAM_COUNT_BATCH
    for batch in blocks.select_columns(["input_ids", "special_tokens_mask"]).with_format("numpy").iter(size):
        ids = np.asarray(batch["input_ids"]).reshape(-1)[np.asarray(batch["special_tokens_mask"]).reshape(-1) == 0]
        if ids.size and int(ids.max()) >= vocab_size:
            raise ValueError(f"token id {int(ids.max())} in the blocks is outside the vocabulary of {vocab_size} ids")
        counts += np.bincount(ids, minlength=vocab_size)
    return counts


def never_chosen_ids(tokenizer) -> list[int]:
    """The ids masking never chooses: the tokenizer's special ids ([CLS], [SEP], [PAD], [MASK]) but [UNK], which
    stands in the text like a word (the collator's `special_tokens_mask` marks only the added special tokens)."""
    return [i for i in tokenizer.all_special_ids if i != tokenizer.unk_token_id]


def unigram_distribution(counts: np.ndarray, never_chosen) -> np.ndarray:
    """q: `counts` (shape (V,)) with add-one smoothing over the ids that can be chosen, 0 at `never_chosen`;
    float64, sums to 1."""
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
    """The losses (nats) of the unigram and of the copy-aware context-free predictor (module docstring) at the
    scored positions of `labels`.

    Args:
        input_ids, labels: integer arrays of one shape (e.g. (blocks, seq)); `labels` is `IGNORE_INDEX` where a
            position is not scored.
        q: the unigram distribution, shape (V,), V = the vocabulary the random replacements are drawn from.

    Returns:
        `(unigram, copy_aware)`: float64 arrays of the scored positions (row-major order), −log q(label) and
        −log P(label | shown token).
    """
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
    """The context-free floors of an MLM evaluation: q from the non-special tokens of `train_blocks`
    (`unigram_counts`, add-one smoothing), scored on `maskings` (the fixed maskings the model is evaluated on:
    columns `input_ids` and `labels`, `fixed_maskings`).

    Args:
        vocab_size: the ids random replacements are drawn from (`len(tokenizer)`).
        never_chosen: ids never chosen for masking (`never_chosen_ids(tokenizer)`).

    Returns:
        `unigram_mask` (mean −log q at [MASK] positions), `copy_aware` (mean copy-aware loss over all scored
        positions), `copy_aware_mask`, `copy_aware_kept`, `copy_aware_random` (its means over each kind: shown
        [MASK], shown the true token, shown another token; `nan` where a kind has no position), the smoothing
        (`"add-one"`) and the training tokens counted.
    """
    counts = unigram_counts(train_blocks, vocab_size)
    q = unigram_distribution(counts, never_chosen)
    sums = dict.fromkeys(("unigram_mask", "copy_aware", "copy_aware_mask", "copy_aware_kept", "copy_aware_random"), 0.0)
    totals = dict.fromkeys(("mask", "all", "kept", "random"), 0)
    for batch in maskings.select_columns(["input_ids", "labels"]).with_format("numpy").iter(COUNT_BATCH):
        input_ids, labels = np.asarray(batch["input_ids"]), np.asarray(batch["labels"])
        unigram, copy = context_free_losses(input_ids, labels, q, mask_token_id, mask_replace_prob, random_replace_prob)
        scored = labels != IGNORE_INDEX
        y, v = labels[scored], input_ids[scored]
        masked, kept = v == mask_token_id, v == y
        replaced = ~masked & ~kept
        sums["unigram_mask"] += unigram[masked].sum()
        sums["copy_aware"] += copy.sum()
        sums["copy_aware_mask"] += copy[masked].sum()
        sums["copy_aware_kept"] += copy[kept].sum()
        sums["copy_aware_random"] += copy[replaced].sum()
        totals["mask"] += int(masked.sum())
        totals["all"] += int(scored.sum())
        totals["kept"] += int(kept.sum())
        totals["random"] += int(replaced.sum())
    per = {"unigram_mask": "mask", "copy_aware": "all", "copy_aware_mask": "mask"}
    per |= {"copy_aware_kept": "kept", "copy_aware_random": "random"}
    floors = {key: float(sums[key] / totals[kind]) if totals[kind] else float("nan") for key, kind in per.items()}
    return floors | {"smoothing": "add-one", "training_tokens_counted": int(counts.sum())}


# A from-scratch model whose held-out [MASK] loss is less than this many nats below the unigram floor has not
# learned to use context yet (issue 43): it still predicts the frequent tokens (docs/pretraining.md, "The plateau").
PLATEAU_MARGIN = 0.3
PLATEAU_DOCS = "docs/pretraining.md#the-plateau-a-model-that-has-not-learned-to-use-context"


def plateau_verdict(mask_loss: float, unigram_mask: float, margin: float = PLATEAU_MARGIN) -> dict:
    """Whether a model has learned to use context: its held-out [MASK] loss (nats) at least `margin` nats below the
    [MASK]-position unigram floor (`mlm_floors`' `unigram_mask`).

    Returns:
        `{"learned": bool, "mask_loss", "unigram_mask", "below_floor" (unigram_mask − mask_loss, nats), "margin",
        "message"}`; `message` is the one plain line a run prints when it has not learned, else "".
    """
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
    return {
        "learned": learned,
        "mask_loss": mask_loss,
        "unigram_mask": unigram_mask,
        "below_floor": below,
        "margin": margin,
        "message": message,
    }


__all__ = [
    "PLATEAU_MARGIN",
    "plateau_verdict",
    "context_free_losses",
    "mlm_floors",
    "never_chosen_ids",
    "unigram_counts",
    "unigram_distribution",
]
