"""Training throughput of the comparison's variants, measured side by side in one process.

The fine-tuning runs of `studies/variant_comparison/compare_variants.py` each record their own tokens/s, but the runs
take hours and happen at different loads (and, when resumed, thread counts), so those numbers compare the machine's
moments, not the variants. This measurement builds every variant's classification model exactly as the runs do
(`hf_ffn.training.outputs.load_model`, the same switches and `unpad_tokens`), and times training steps of all of them
interleaved, on the same real batches:

- **batches**: k batches of `batch_size` rt_polarity snippets in `LengthGroupedSampler` order (what the runs'
  `train_sampling_strategy="group_by_length"` feeds Trainer), truncated at `max_seq_length` and padded to the
  longest in the batch (`studies.benchmark.unpadded_benchmark.make_batches`, its "length-grouped" kind).
- **step**: train mode (dropout on), forward + backward of the classification loss, no optimizer step
  (`unpadded_benchmark.cycling_step`). The optimizer's cost scales with the parameter count, which the matched
  variants keep equal.
- **timing**: `studies.benchmark.time_interleaved` (order rotated every round; round r gives every variant
  batch r mod k, so per-round ratios are paired); `paired_ratio` against the baseline (median of the per-round
  ratios, [min–max] their spread). Real tokens/s: the median over rounds of the round's non-padding tokens / its
  time (a median, like the ratio, so one slow round moves neither).

A healed variant has its converted variant's architecture (healing trains weights, it changes no switch), so it
runs at the same speed; the report gives it that row.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Mapping

import torch

from hf_ffn.modeling_ffn_bert import FfnBertForSequenceClassification
from hf_ffn.parity import quiet_transformers
from hf_ffn.training.arguments import ModelArguments
from hf_ffn.training.outputs import load_model, load_tokenizer
from studies.benchmark import paired_ratio, time_interleaved
from studies.benchmark.unpadded_benchmark import UnpadSettings, cycling_step, make_batches, read_sentences


def measure_throughput(
    starts: Mapping[str, ModelArguments],
    baseline: str,
    rt_polarity_dir: str,
    *,
    batch_size: int = 32,
    max_seq_length: int = 64,
    batches: int = 6,
    repeats: int = 30,
    warmup: int = 1,
) -> dict:
    """Training-step throughput of every variant in `starts` (name → how the runs build it), side by side.

    Args:
        starts: the variants to time; must contain `baseline`.
        baseline: the name the ratios are taken against.
        rt_polarity_dir: folder with rt-polarity.neg / rt-polarity.pos.
        batch_size, max_seq_length: as in the fine-tuning runs.
        batches: k, the number of distinct batches (spread over the epoch); repeats: timed rounds; warmup: untimed
            calls of each variant first.

    Returns:
        {"variants": {name: {"real_tokens_per_s", "median_ms", "ratio", "ratio_min", "ratio_max", "times_ms" (per
        round)}}, "real_tokens" (per round, the same batch for every variant), "settings", "load_before",
        "load_after", "threads"}; "ratio" is time per step of the variant / the baseline's (below 1: faster).

    Raises:
        ValueError: if `baseline` is not in `starts`. FileNotFoundError: a missing rt_polarity file or checkpoint.
    """
    if baseline not in starts:
        raise ValueError(f"baseline {baseline!r} is not among the variants to time: {', '.join(starts)}")
    load_before = os.getloadavg()[0]
    texts, labels = read_sentences(rt_polarity_dir, "--rt_polarity_dir")
    tokenizer = load_tokenizer(starts[baseline])
    tokenizer.model_max_length = max_seq_length  # make_batches truncates at the tokenizer's maximum
    settings = UnpadSettings(quick=False, batch_size=batch_size, batches=batches)
    grouped = make_batches(tokenizer, texts, labels, settings)["length-grouped"]
    steps = {}
    for name, model_args in starts.items():
        torch.manual_seed(0)
        with quiet_transformers():
            model, _ = load_model(model_args, FfnBertForSequenceClassification, num_labels=2)
        steps[name] = cycling_step(model, grouped, "training")
    times = time_interleaved(steps, repeats, warmup)
    real = [int(grouped[(warmup + r) % batches]["attention_mask"].sum()) for r in range(repeats)]
    variants = {
        name: {
            "real_tokens_per_s": statistics.median(n / t for n, t in zip(real, times[name], strict=True)),
            "median_ms": statistics.median(times[name]) * 1e3,
            **paired_ratio(times[name], times[baseline]),
            "times_ms": [t * 1e3 for t in times[name]],
        }
        for name in starts
    }
    return {
        "variants": variants,
        "settings": {
            "batch_size": batch_size,
            "max_seq_length": max_seq_length,
            "batches": batches,
            "repeats": repeats,
            "warmup": warmup,
        },
        "real_tokens": real,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "threads": torch.get_num_threads(),
    }


__all__ = ["measure_throughput"]
