"""Model-level sections: FfnBert variants against upstream `BertModel` (inference and a training step), the default
model's scaling over sequence length and batch size, and `from_pretrained` time."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch
from torch import nn
from transformers import BertConfig, BertModel

from hf_ffn.configuration_ffn_bert import parameter_matched_glu_width
from hf_ffn.logging_utils import quiet_transformers
from hf_ffn.modeling_ffn_bert import FfnBertModel
from hf_ffn.parity.batches import padded_batch
from hf_ffn.parity.compare import tensor_difference

from .settings import BenchSettings
from .timing import aten_op_counts, log, measure, median_ms, paired_ratio, time_interleaved

UPSTREAM = "upstream BertModel"
DEFAULT_VARIANT = "default (gelu, Post-LN)"


def model_variants(intermediate_size: int) -> dict[str, dict | None]:
    """Variant name → `FfnBertModel.from_pretrained` overrides (`None` = upstream `BertModel`).

    GeGLU and SwiGLU use `parameter_matched_glu_width(intermediate_size)`: the FFN weight count of the GELU FFN.
    """
    width = parameter_matched_glu_width(intermediate_size)
    return {
        UPSTREAM: None,
        DEFAULT_VARIANT: {},
        f"geglu d={width}": {"ffn_type": "geglu", "intermediate_size": width},
        f"swiglu d={width}": {"ffn_type": "swiglu", "intermediate_size": width},
        "gelu, Pre-LN": {"layer_norm_position": "pre"},
    }


def load_variants(checkpoint: str, attn_implementation: str) -> dict[str, nn.Module]:
    """Upstream `BertModel` and each FfnBert variant of `model_variants`, all from `checkpoint`.

    Every weight whose shape the variant keeps is the checkpoint's; the FFN weights of the narrower GLU variants
    and Pre-LN's `final_norm` are initialised as BERT initialises weights (seeded), which does not change speed.
    """
    config = BertConfig.from_pretrained(checkpoint)
    models: dict[str, nn.Module] = {}
    with quiet_transformers():
        for name, overrides in model_variants(config.intermediate_size).items():
            torch.manual_seed(0)
            if overrides is None:
                models[name] = BertModel.from_pretrained(checkpoint, attn_implementation=attn_implementation)
            else:
                models[name] = FfnBertModel.from_pretrained(  # built on purpose: no "weights reused" warning
                    checkpoint,
                    attn_implementation=attn_implementation,
                    ignore_mismatched_sizes=True,
                    warn_reused_weights=False,
                    **overrides,
                )
    return models


def random_inputs(vocab_size: int, batch_size: int, seq_len: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Seeded random token ids (batch, seq) with an all-ones attention mask (every row full length, one segment):
    `parity.batches.padded_batch` without padding."""
    return padded_batch(vocab_size, [seq_len] * batch_size, seed=seed)


def inference_step(model: nn.Module, inputs: dict[str, torch.Tensor]) -> Callable[[], object]:
    """One eval-mode forward under `torch.no_grad` (returns the output)."""
    model.eval()

    def step():
        with torch.no_grad():
            return model(**inputs)

    return step


def training_step(model: nn.Module, inputs: dict[str, torch.Tensor]) -> Callable[[], object]:
    """One train-mode (dropout on) forward + backward of `mean(last_hidden_state²)`; gradients reset first, no
    optimizer step (its cost does not depend on the FFN variant beyond the parameter count)."""
    model.train()

    def step():
        model.zero_grad(set_to_none=True)
        loss = model(**inputs).last_hidden_state.square().mean()
        loss.backward()
        return loss

    return step


def bench_models(checkpoint: str, label: str, settings: BenchSettings) -> list[dict]:
    """Model-level rows for `checkpoint` (named `label`): every attention implementation × {inference, training}
    × variant, with time, tokens/s, peak memory and the paired ratios to upstream `BertModel`.

    The default variant's inference output is also compared with upstream's (`torch.equal`), so a speed-up can
    never come from computing something else, and so are the aten ops both run (`aten_op_counts`).
    """
    rows: list[dict] = []
    vocab_size = BertConfig.from_pretrained(checkpoint).vocab_size
    for attn in settings.attn_implementations:
        models = load_variants(checkpoint, attn)
        for mode, make_step, batch_size in (
            ("inference", inference_step, settings.batch_size),
            ("training", training_step, settings.train_batch_size),
        ):
            inputs = random_inputs(vocab_size, batch_size, settings.seq_len)
            steps = {name: make_step(model, inputs) for name, model in models.items()}
            equal = same_ops = None
            if mode == "inference":
                default = steps[DEFAULT_VARIANT]
                equal = tensor_difference(steps[UPSTREAM]().last_hidden_state, default().last_hidden_state)["equal"]
                same_ops = aten_op_counts(steps[UPSTREAM]) == aten_op_counts(default)
            # Training: free the gradients before the memory measurement, so its peak includes new ones.
            setups = {name: (lambda m=model: m.zero_grad(set_to_none=True)) for name, model in models.items()}
            times, memories = measure(steps, settings.repeats, settings.warmup, settings.clock, setups)
            tokens = batch_size * settings.seq_len
            upstream_memory = memories[UPSTREAM]
            for name in steps:
                memory = memories[name]
                rows.append(
                    {
                        "checkpoint": label,
                        "attn": attn,
                        "mode": mode,
                        "variant": name,
                        "batch_size": batch_size,
                        "seq_len": settings.seq_len,
                        "parameters": sum(p.numel() for p in models[name].parameters()),
                        "median_ms": median_ms(times[name]),
                        "times_ms": [t * 1e3 for t in times[name]],
                        "tokens_per_s": tokens / statistics.median(times[name]),
                        "peak_memory_mb": memory / 2**20,
                        "memory_ratio": memory / upstream_memory if upstream_memory else float("nan"),
                        **paired_ratio(times[name], times[UPSTREAM]),
                        "equal_to_upstream": equal if name == DEFAULT_VARIANT else None,
                        "same_aten_ops_as_upstream": same_ops if name == DEFAULT_VARIANT else None,
                    }
                )
                row = rows[-1]
                log(
                    f"  {label:<22} {attn:<5} {mode:<9} {name:<24} {row['median_ms']:9.1f} ms "
                    f"{row['tokens_per_s']:8.0f} tok/s {row['peak_memory_mb']:8.1f} MB  "
                    f"×{row['ratio']:.3f} [{row['ratio_min']:.3f}, {row['ratio_max']:.3f}] vs upstream"
                )
        del models
    return rows


def bench_scaling(checkpoint: str, settings: BenchSettings) -> list[dict]:
    """Inference time and peak memory of the default FfnBert model (sdpa) over sequence lengths (at
    `scaling_batch_for_seq`) and batch sizes (at `scaling_seq_for_batch`). `time_growth` / `memory_growth` are
    relative to the first point of the same sweep; `time_per_token_us` shows the attention's quadratic term."""
    with quiet_transformers():
        model = FfnBertModel.from_pretrained(checkpoint, attn_implementation="sdpa")
    points = [("seq_len", settings.scaling_batch_for_seq, s) for s in settings.scaling_seq_lens]
    points += [("batch_size", b, settings.scaling_seq_for_batch) for b in settings.scaling_batch_sizes]
    rows: list[dict] = []
    for axis, batch_size, seq_len in points:
        step = inference_step(model, random_inputs(model.config.vocab_size, batch_size, seq_len))
        times, memories = measure({"step": step}, settings.scaling_repeats, settings.warmup, settings.clock)
        median, memory = statistics.median(times["step"]), memories["step"]
        first = next((r for r in rows if r["axis"] == axis), None)
        row = {
            "axis": axis,
            "batch_size": batch_size,
            "seq_len": seq_len,
            "median_ms": median * 1e3,
            "tokens_per_s": batch_size * seq_len / median,
            "time_per_token_us": median / (batch_size * seq_len) * 1e6,
            "peak_memory_mb": memory / 2**20,
        }
        row["time_growth"] = row["median_ms"] / first["median_ms"] if first else 1.0
        row["memory_growth"] = row["peak_memory_mb"] / first["peak_memory_mb"] if first else 1.0
        rows.append(row)
        log(
            f"  batch {batch_size:>3} × seq {seq_len:>4}: {row['median_ms']:9.1f} ms (×{row['time_growth']:.2f}) "
            f"{row['peak_memory_mb']:8.1f} MB (×{row['memory_growth']:.2f})"
        )
    return rows


def bench_load(checkpoint: str, settings: BenchSettings) -> dict:
    """`from_pretrained` wall time of `checkpoint` into upstream `BertModel` and into `FfnBertModel`
    (interleaved, files already in the page cache after the warm-up), and the paired ratio."""

    def load(model_class: type) -> Callable[[], object]:
        def run():
            with quiet_transformers():
                return model_class.from_pretrained(checkpoint)

        return run

    times = time_interleaved(
        {UPSTREAM: load(BertModel), "FfnBertModel": load(FfnBertModel)},
        settings.load_repeats,
        settings.warmup,
        settings.clock,
    )
    result = {
        "upstream_ms": median_ms(times[UPSTREAM]),
        "ffn_bert_ms": median_ms(times["FfnBertModel"]),
        **paired_ratio(times["FfnBertModel"], times[UPSTREAM]),
    }
    log(
        f"  BertModel {result['upstream_ms']:.1f} ms, FfnBertModel {result['ffn_bert_ms']:.1f} ms: "
        f"×{result['ratio']:.3f}"
    )
    return result


__all__ = [
    "DEFAULT_VARIANT",
    "UPSTREAM",
    "bench_load",
    "bench_models",
    "bench_scaling",
    "inference_step",
    "load_variants",
    "model_variants",
    "random_inputs",
    "training_step",
]
