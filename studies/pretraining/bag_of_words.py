"""Bag-of-words baselines for the study's rt_polarity fine-tuning: what a model that ignores word order scores on
the same split, to read the fine-tuning table against (README.md, "Fine-tuning so far"; report.md).

    python -m studies.pretraining.bag_of_words   # ../shared/data/rt_polarity → studies/pretraining/bag_of_words.json

The split is the fine-tuning's own: `hf_ffn.finetune.tasks.get_task("rt_polarity").load` (the seeded 8,000 /
1,000 / 1,662 split, seed 42), fitted on train, scored on test (the split the study reports for rt_polarity:
finetune.jsonl's `split`). Two logistic regressions (scikit-learn, `liblinear`, deterministic):

- **binary word pieces**: one 0/1 feature per word piece of the study's tokenizer (`tokenizer/`, the WordPiece
  vocabulary of 4,096 that every model of the study reads; the whole snippet, the fine-tuning truncates at 128
  tokens, which no test snippet reaches), `C` = 1 (scikit-learn's default);
- **TF-IDF of 1–2-grams**: `TfidfVectorizer(ngram_range=(1, 2))` on the raw text (its own lower-cased word
  tokens, not the word pieces), `C` = 1.

Beside each, the same model at each `C` of `C_GRID` and at the one chosen on the validation split (the highest
validation accuracy, the smaller `C` on a tie), a check that the default does not understate the baseline (for
TF-IDF it does: validation picks the grid's largest `C`, and test accuracy is 80.3–81.1% from `C` = 10 up). The
record keeps the split's sizes, the majority class (train's) and its share of each split, and each model's
validation and test accuracy.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from transformers import AutoTokenizer

from hf_ffn.finetune.tasks import get_task
from studies.common.environment import portable_path

STUDY = Path(__file__).parent
TASK = "rt_polarity"
C_GRID = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0)
DEFAULT_C = 1.0
FINETUNE_MAX_TOKENS = 128  # the fine-tuning's truncation ([CLS] and [SEP] included)


def accuracy(model, features, labels) -> float:
    return float((model.predict(features) == labels).mean())


def fit(features: dict, labels: dict, c: float) -> dict:
    """A logistic regression at `c` fitted on train; its validation and test accuracy."""
    model = LogisticRegression(C=c, solver="liblinear", max_iter=1000).fit(features["train"], labels["train"])
    return {
        "C": c,
        "validation_accuracy": accuracy(model, features["validation"], labels["validation"]),
        "test_accuracy": accuracy(model, features["test"], labels["test"]),
    }


def baseline(vectorizer, texts: dict, labels: dict) -> dict:
    """The vectorizer fitted on train; the model at each `C` of `C_GRID`, at `DEFAULT_C` and at the `C` chosen on
    validation."""
    train = vectorizer.fit_transform(texts["train"])
    features = {"train": train, **{split: vectorizer.transform(texts[split]) for split in ("validation", "test")}}
    grid = [fit(features, labels, c) for c in C_GRID]
    chosen = max(grid, key=lambda row: (row["validation_accuracy"], -row["C"]))
    return {
        "features": train.shape[1],
        "default_C": next(row for row in grid if row["C"] == DEFAULT_C),
        "C_chosen_on_validation": chosen,
        "C_grid": grid,
    }


def measure(data_dir: Path, tokenizer_dir: Path) -> dict:
    splits = get_task(TASK).load(data_dir)
    texts = {name: list(splits[name]["text"]) for name in ("train", "validation", "test")}
    labels = {name: np.asarray(splits[name]["label"]) for name in texts}
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    longest = max(len(tokenizer.tokenize(text)) + 2 for text in texts["test"])
    names, counts = np.unique(labels["train"], return_counts=True)
    majority = names[counts.argmax()]
    word_pieces = CountVectorizer(analyzer=tokenizer.tokenize, binary=True, lowercase=False)
    return {
        "task": TASK,
        "split": {name: len(texts[name]) for name in texts},
        "split_seed": 42,
        "majority_class": str(majority),
        "majority_share": {name: float((labels[name] == majority).mean()) for name in texts},
        "fitted_on": "train",
        "reported_split": get_task(TASK).report_split,
        "longest_test_snippet_tokens": longest,
        "finetune_max_tokens": FINETUNE_MAX_TOKENS,
        "data_dir": portable_path(data_dir),
        "binary_word_pieces": {"tokenizer": portable_path(tokenizer_dir), **baseline(word_pieces, texts, labels)},
        "tfidf_1_2_grams": {"ngram_range": [1, 2], **baseline(TfidfVectorizer(ngram_range=(1, 2)), texts, labels)},
        "model": "sklearn LogisticRegression(solver='liblinear', max_iter=1000)",
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m studies.pretraining.bag_of_words", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--data_dir", type=Path, default=Path("../shared/data/rt_polarity"))
    parser.add_argument("--tokenizer", type=Path, default=Path("studies/pretraining/tokenizer"))
    parser.add_argument("--write_to", type=Path, default=STUDY / "bag_of_words.json")
    args = parser.parse_args(argv)
    record = measure(args.data_dir, args.tokenizer)
    args.write_to.write_text(json.dumps(record, indent=1) + "\n")
    for name in ("binary_word_pieces", "tfidf_1_2_grams"):
        row = record[name]
        print(
            f"{name}: test accuracy {100 * row['default_C']['test_accuracy']:.2f}% at C=1; "
            f"{100 * row['C_chosen_on_validation']['test_accuracy']:.2f}% at C={row['C_chosen_on_validation']['C']:g} "
            f"(chosen on validation)"
        )
    print(f"wrote {args.write_to}")


if __name__ == "__main__":
    main()
