"""Packed attention with one call per length against grouped calls: whole steps, side by side.

    python -m studies.benchmark.bench_grouped_attention [--attn sdpa] [--mode training] [--call-costs 0 1000] \
        [--rounds 10]

all-MiniLM-L6-v2 sequence classification (`studies.benchmark.unpadded_benchmark.load_models`) on the unpadded
benchmark's 4 shuffled rt_polarity batches, switch on, with `hf_ffn.grouped_attention.CALL_COST_PAIRS` (training) or
`EVAL_CALL_COST_PAIRS` (inference) set to each of `--call-costs` (0: one attention call per length), against upstream
on the benchmark's no-padding batches of about the same real-token count. Interleaved rounds (order rotated),
each candidate running the 4 batches; prints the median time per batch and the median per-round ratio to upstream
without padding. Process CPU clock by default (`--clock wall` for wall time); 1 thread unless `--threads`.
About 2 minutes with the defaults.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace

import torch
from transformers import AutoTokenizer

from hf_ffn import grouped_attention
from hf_ffn.parity import bundled_checkpoint
from studies.benchmark.unpadded_benchmark import FULL, cycling_step, load_models, make_batches, read_sentences


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attn", choices=["eager", "sdpa"], default="sdpa")
    parser.add_argument("--mode", choices=["inference", "training"], default="training")
    parser.add_argument("--call-costs", type=float, nargs="+", default=[0, 1000])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    parser.add_argument("--rt-polarity-dir", default="../shared/data/rt_polarity")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    tokenizer = AutoTokenizer.from_pretrained(bundled_checkpoint())
    texts, labels = read_sentences(args.rt_polarity_dir)
    batches = make_batches(tokenizer, texts, labels, replace(FULL, batches=4))
    with tempfile.TemporaryDirectory() as folder:
        models = load_models("all-MiniLM-L6-v2", args.attn, tokenizer.vocab_size, folder)
    steps = {"upstream, no padding": (None, cycling_step(models["upstream"], batches["no padding"], args.mode))}
    setting = "CALL_COST_PAIRS" if args.mode == "training" else "EVAL_CALL_COST_PAIRS"
    for cost in args.call_costs:
        steps[f"switch on, {setting}={cost:g}"] = (cost, cycling_step(models["on"], batches["shuffled"], args.mode))
    names, times = list(steps), {name: [] for name in steps}
    for r in range(args.rounds + 1):  # round 0 warms up
        for name in names[r % len(names) :] + names[: r % len(names)]:
            cost, step = steps[name]
            if cost is not None:
                setattr(grouped_attention, setting, cost)
            start = clock()
            for _ in range(4):
                step()
            if r:
                times[name].append((clock() - start) / 4)
    reference = times["upstream, no padding"]
    print(f"{args.attn} {args.mode}, {torch.get_num_threads()} threads, {args.clock} clock, {args.rounds} rounds")
    for name, t in times.items():
        ratio = statistics.median(a / b for a, b in zip(t, reference, strict=True))
        print(f"  {name:<34} {statistics.median(t) * 1e3:8.1f} ms/batch  ×{ratio:.3f} upstream, no padding")
    return 0


if __name__ == "__main__":
    sys.exit(main())
