"""Why a run sits on the plateau (issue 37's gate): where its attention looks, and what the neighbours alone give.

    python -m studies.pretraining.diagnostics attention out/pretraining/runs/NAME --data_dir ../shared/data/pretraining
    python -m studies.pretraining.diagnostics neighbours --data_dir ../shared/data/pretraining
    python -m studies.pretraining.diagnostics context out/pretraining/runs/NAME --data_dir ../shared/data/pretraining

`attention`: on held-out blocks of the study's corpus (unmasked), per layer, the attention's mean entropy against
the uniform distribution's log n, and the mean weight a token gives to the token before it, after it and itself,
against a uniform 1/n (n = the block's tokens). A model that has not learned to look at its neighbours gives them
1/n: its prediction at a [MASK] is a bag of the block's words.

`neighbours`: a count-based reference on the study's own held-out maskings: the loss on [MASK] positions of
P(w | l, r) = 0.6 · c(l, w, r)/c(l, ·, r) + 0.3 · ½ (c(l, w)/c(l, ·) + c(w, r)/c(·, r)) + 0.1 · q(w), where l and r are
the tokens shown left and right of the [MASK] (themselves masked 15% of the time: then their terms drop out and
the weights of the rest are renormalised), c are counts over the training blocks and q the add-one unigram of the
floors (`hf_ffn.mlm.floors`). The weights are fixed, not fitted on the held-out set. It is the loss a
model reaches that uses nothing but the two neighbours, each in one direction: what looking next door is worth.
`context`: a finished recipe unit (issue 42) on the plateau probe's held-out sets at blocks of 32 and of 128 (its
corpus parts: settings.py's `LAUNCH_PARTS`), each source's [MASK] loss below its floor and their mean
(`plateau.score_sources`): the two recipe arms compared on the same blocks, and whether a model trained on blocks
of 32 uses a context of 128 (its positions 32-127 never trained).

Each prints one line per measure (a few minutes: counting the training tokens); `--record FILE` appends it to FILE
as one JSON line (the study's: diagnostics.jsonl).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer

from hf_ffn.mlm.floors import never_chosen_ids, unigram_counts, unigram_distribution
from hf_ffn.modeling_ffn_bert import FfnBertForMaskedLM
from hf_ffn.training.blocks import documents_to_blocks, fixed_maskings
from hf_ffn.training.corpus import load_corpus
from studies.pretraining.plateau import PROBE_BATCH_TOKENS, attention_locality, probe_sets, score_sources
from studies.pretraining.run import STUDY, TOKENIZER, corpus_options, probe_folder
from studies.pretraining.settings import EVAL_MASKINGS, LAUNCH_PARTS, PREPROCESSING_WORKERS, SIZES, SPLIT_SEED

ATTENTION_BLOCKS = 64  # held-out blocks `attention` measures on
WEIGHTS = (0.6, 0.3, 0.1)  # trigram, the two bigrams, unigram (fixed; see the module docstring)


def study_blocks(data_dir: Path, cache_dir: Path):
    """(tokenizer, training blocks, held-out blocks) exactly as a study unit reads them (the same cache)."""
    tokenizer = AutoTokenizer.from_pretrained(STUDY / TOKENIZER)
    documents = load_corpus(**corpus_options(data_dir, cache_dir))
    blocks = documents_to_blocks(documents, tokenizer, SIZES["max_seq_length"], num_proc=PREPROCESSING_WORKERS)
    return tokenizer, blocks["train"], blocks["validation"]


def _counts(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values, counts = np.unique(keys, return_counts=True)
    return values, counts


def _lookup(table: tuple[np.ndarray, np.ndarray], keys: np.ndarray) -> np.ndarray:
    values, counts = table
    where = np.clip(np.searchsorted(values, keys), 0, len(values) - 1)
    return np.where(values[where] == keys, counts[where], 0).astype(np.float64)


def neighbour_reference(tokenizer, train, validation) -> dict:
    """The count-based left/right-neighbour model's mean loss on the [MASK] positions of the study's held-out
    maskings (module docstring), beside the unigram floor on the same positions."""
    vocab = len(tokenizer)
    tokens = np.asarray(train.with_format("numpy")["input_ids"], dtype=np.int64)  # (blocks, 128)
    left, middle, right = tokens[:, :-2].ravel(), tokens[:, 1:-1].ravel(), tokens[:, 2:].ravel()
    pairs = tokens[:, :-1].ravel() * vocab + tokens[:, 1:].ravel()
    trigrams = _counts((left * vocab + middle) * vocab + right)
    outer = _counts(left * vocab + right)
    bigrams = _counts(pairs)
    as_left = np.bincount(tokens[:, :-1].ravel(), minlength=vocab).astype(np.float64)
    as_right = np.bincount(tokens[:, 1:].ravel(), minlength=vocab).astype(np.float64)
    q = unigram_distribution(unigram_counts(train, vocab), never_chosen_ids(tokenizer))
    maskings = fixed_maskings(validation, tokenizer, EVAL_MASKINGS, SPLIT_SEED)
    mask, losses, unigram = tokenizer.mask_token_id, [], []
    for batch in maskings.select_columns(["input_ids", "labels"]).with_format("numpy").iter(1024):
        shown, labels = np.asarray(batch["input_ids"], np.int64), np.asarray(batch["labels"], np.int64)
        rows, columns = np.nonzero((shown == mask) & (labels >= 0))
        inside = (columns > 0) & (columns < shown.shape[1] - 1)
        rows, columns = rows[inside], columns[inside]
        word, shown_left, shown_right = labels[rows, columns], shown[rows, columns - 1], shown[rows, columns + 1]
        has_l, has_r = shown_left != mask, shown_right != mask
        c_lr = _lookup(outer, shown_left * vocab + shown_right)
        p_tri = np.where(
            has_l & has_r & (c_lr > 0),
            _lookup(trigrams, (shown_left * vocab + word) * vocab + shown_right) / np.maximum(c_lr, 1),
            0,
        )
        p_left = np.where(
            has_l & (as_left[shown_left] > 0),
            _lookup(bigrams, shown_left * vocab + word) / np.maximum(as_left[shown_left], 1),
            0,
        )
        p_right = np.where(
            has_r & (as_right[shown_right] > 0),
            _lookup(bigrams, word * vocab + shown_right) / np.maximum(as_right[shown_right], 1),
            0,
        )
        w_tri = WEIGHTS[0] * (has_l & has_r & (c_lr > 0))
        sides = has_l.astype(float) + has_r.astype(float)
        w_bi = WEIGHTS[1] * (sides > 0)
        p_bi = np.where(sides > 0, (p_left + p_right) / np.maximum(sides, 1), 0)
        mixture = (w_tri * p_tri + w_bi * p_bi + WEIGHTS[2] * q[word]) / (w_tri + w_bi + WEIGHTS[2])
        losses.append(-np.log(mixture))
        unigram.append(-np.log(q[word]))
    losses, unigram = np.concatenate(losses), np.concatenate(unigram)
    return {
        "neighbour_mask_loss": float(losses.mean()),
        "unigram_mask": float(unigram.mean()),
        "mask_positions": int(losses.size),
        "training_tokens": int(tokens.size),
        "weights": WEIGHTS,
    }


def context_scores(model_dir: Path, data_dir: Path, output_dir: Path, blocks: tuple[int, ...] = (32, 128)) -> dict:
    """{"parts", "blocks": {block: `score_sources`' entry}}: the run in `model_dir` on the plateau probe's sets of
    `LAUNCH_PARTS` at each block length of `blocks` (built under `output_dir` if missing)."""

    tokenizer = AutoTokenizer.from_pretrained(STUDY / TOKENIZER)
    corpus = corpus_options(data_dir, output_dir / "cache", LAUNCH_PARTS)
    model = FfnBertForMaskedLM.from_pretrained(model_dir).eval()
    scores = {}
    for block in blocks:
        sets, info = probe_sets(corpus, tokenizer, block, probe_folder(output_dir, LAUNCH_PARTS, block))
        with torch.no_grad():
            scores[block] = score_sources(model, sets, info, tokenizer.mask_token_id, PROBE_BATCH_TOKENS // block)
    return {"parts": list(LAUNCH_PARTS), "blocks": scores}


def record(path: Path | None, measure: dict) -> None:
    """Append `measure` to `path` as one JSON line (nothing without a path): the figures go into a record."""
    if path is not None:
        with path.open("a") as file:
            file.write(json.dumps(measure) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m studies.pretraining.diagnostics", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("measure", choices=("attention", "neighbours", "context"))
    parser.add_argument("model_dir", type=Path, nargs="?", help="attention, context: a run's folder (config.json)")
    parser.add_argument("--data_dir", type=Path, required=True, help="../shared/data/pretraining (the corpus)")
    parser.add_argument("--output_dir", type=Path, default=Path("out/pretraining"), help="where the cache is")
    parser.add_argument(
        "--record", type=Path, default=None, help="append the measure as one JSON line here (e.g. diagnostics.jsonl)"
    )
    args = parser.parse_args(argv)
    if args.measure == "context":
        if args.model_dir is None:
            parser.error("context needs a run's folder")
        result = {"measure": "context", "model": args.model_dir.name}
        result |= context_scores(args.model_dir, args.data_dir, args.output_dir)
        record(args.record, result)
        for block, entry in result["blocks"].items():
            sources = ", ".join(
                f"{s} {entry[s]['below_unigram_floor']:.3f}" for s in entry if isinstance(entry[s], dict)
            )
            print(f"blocks of {block}: {entry['below_unigram_floor']:.3f} nats below the floor ({sources})")
        return 0
    tokenizer, train, validation = study_blocks(args.data_dir, args.output_dir / "cache")
    if args.measure == "attention":
        if args.model_dir is None:
            parser.error("attention needs a run's folder")
        blocks = validation.select(range(min(ATTENTION_BLOCKS, len(validation))))["input_ids"]
        rows = attention_locality(args.model_dir, torch.tensor(blocks, dtype=torch.long))
        record(
            args.record, {"measure": "attention", "model": args.model_dir.name, "blocks": len(blocks), "layers": rows}
        )
        for row in rows:
            print(
                f"layer {row['layer']}: entropy {row['entropy']:.3f} (uniform {row['uniform_entropy']:.3f}); weight on "
                f"previous {row['previous']:.4f}, next {row['next']:.4f}, same {row['same']:.4f} "
                f"(uniform {row['uniform']:.4f})"
            )
        return 0
    result = neighbour_reference(tokenizer, train, validation)
    record(args.record, {"measure": "neighbours", **result})
    print(
        f"neighbour counts: [MASK] loss {result['neighbour_mask_loss']:.3f} vs unigram floor "
        f"{result['unigram_mask']:.3f} "
        f"({result['unigram_mask'] - result['neighbour_mask_loss']:.3f} below it) over {result['mask_positions']:,} "
        f"[MASK] positions; counts from {result['training_tokens']:,} training tokens"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
