"""Seconds per training step of each pre-training variant, measured side by side (interleaved rounds, one process):
the exchange rate from steps to wall-clock time for the study's equal-time comparison.

    python -m studies.pretraining.withdrawn_2m.step_cost --threads 2  # a minute; out/pretraining/step_cost.json

One step = what `hf-ffn mlm` does per batch: forward with sparse prediction (the MLM head decodes the masked
positions only), backward, AdamW step, zero_grad, on one batch of random token ids with BERT's 15% masked. Rounds
rotate the order of the variants (`studies.benchmark.timing.time_interleaved`); the report gives each variant's
median and its ratio to GELU's median per round (the paired ratio, robust to a machine that slows down).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from hf_ffn.mlm.arguments import ffn_width
from hf_ffn.modeling_ffn_bert import FfnBertForMaskedLM
from studies.benchmark.timing import time_interleaved
from studies.pretraining.withdrawn_2m.settings import SIZES, STUDY_A_VARIANTS, model_config


def one_step(model: FfnBertForMaskedLM, optimizer: torch.optim.Optimizer, batch: dict) -> None:
    model(**batch).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def random_batch(vocab_size: int, batch_size: int, seq_len: int, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (batch_size, seq_len), generator=generator)
    masked = torch.rand(batch_size, seq_len, generator=generator) < 0.15
    labels = torch.where(masked, input_ids, torch.full_like(input_ids, -100))
    return {
        "input_ids": torch.where(masked, 4, input_ids),
        "attention_mask": torch.ones_like(input_ids),
        "labels": labels,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(STUDY_A_VARIANTS))
    parser.add_argument("--layer_norm_position", default="post")
    parser.add_argument("--batch_size", type=int, default=SIZES["batch_size"])
    parser.add_argument("--seq_len", type=int, default=SIZES["max_seq_length"])
    parser.add_argument("--hidden_size", type=int, default=SIZES["hidden_size"])
    parser.add_argument("--num_hidden_layers", type=int, default=SIZES["num_hidden_layers"])
    parser.add_argument("--num_attention_heads", type=int, default=SIZES["num_attention_heads"])
    parser.add_argument("--intermediate_size", type=int, default=SIZES["intermediate_size"])
    parser.add_argument("--vocab_size", type=int, default=SIZES["vocab_size"])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", default="out/pretraining/step_cost.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    steps = {}
    for variant in args.variants:
        torch.manual_seed(0)
        config = model_config(
            variant,
            args.layer_norm_position,
            vocab_size=args.vocab_size,
            hidden_size=args.hidden_size,
            num_hidden_layers=args.num_hidden_layers,
            num_attention_heads=args.num_attention_heads,
            intermediate_size=ffn_width(variant, args.intermediate_size),
            max_position_embeddings=max(512, args.seq_len),
        )
        config.sparse_prediction = True
        model = FfnBertForMaskedLM(config).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        batch = random_batch(args.vocab_size, args.batch_size, args.seq_len)
        steps[variant] = lambda m=model, o=optimizer, b=batch: one_step(m, o, b)
    start = time.perf_counter()
    times = time_interleaved(steps, args.repeats, args.warmup)
    reference = "gelu" if "gelu" in times else args.variants[0]
    report = {
        "machine": {
            "threads": args.threads,
            "cpu_count": os.cpu_count(),
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "torch": torch.__version__,
        },
        "sizes": {
            k: getattr(args, k)
            for k in (
                "batch_size",
                "seq_len",
                "hidden_size",
                "num_hidden_layers",
                "num_attention_heads",
                "intermediate_size",
                "vocab_size",
            )
        },
        "layer_norm_position": args.layer_norm_position,
        "repeats": args.repeats,
        "seconds_total": time.perf_counter() - start,
        "variants": {
            name: {
                "median_s": statistics.median(ts),
                "min_s": min(ts),
                "max_s": max(ts),
                "ratio_to_" + reference: statistics.median(t / r for t, r in zip(ts, times[reference], strict=True)),
            }
            for name, ts in times.items()
        },
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    print(f"load {load_before[0]:.2f} -> {report['machine']['load_after'][0]:.2f}")
    for name, row in report["variants"].items():
        print(
            f"{name:10s} {row['median_s']:.3f} s/step (min {row['min_s']:.3f}, max {row['max_s']:.3f}), "
            f"x{row['ratio_to_' + reference]:.3f} {reference}"
        )


if __name__ == "__main__":
    main()
