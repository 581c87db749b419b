"""FFN-level sections: each FFN module against the bare matrix multiplications it performs (with a benchmark-only
fused gate+up prototype and per-op profiles), and `torch.compile` on/off for the FFN modules."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from hf_ffn.configuration_ffn_bert import FfnBertConfig, parameter_matched_glu_width
from hf_ffn.modeling_ffn_bert import build_ffn
from hf_ffn.parity.compare import tensor_difference

from .settings import BenchSettings
from .timing import log, median_ms, op_profile, paired_ratio, time_interleaved

FUSED_SUFFIX = " fused gate+up (prototype)"


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
        fns[name] = no_grad_call(module, x)
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
            row.update(
                ratio_to_gelu=glu_ratio["ratio"],
                ratio_to_gelu_min=glu_ratio["ratio_min"],
                ratio_to_gelu_max=glu_ratio["ratio_max"],
            )
        rows.append(row)
        vs_gelu = f"  ×{row['ratio_to_gelu']:.3f} vs gelu" if row["ratio_to_gelu"] is not None else ""
        log(
            f"  {label:<12} {name:<38} {row['median_ms']:8.2f} ms {row['gflops']:7.1f} GFLOP/s "
            f"(matmuls {row['matmul_gflops']:7.1f}) fraction {row['fraction']:.3f}{vs_gelu}"
        )
    profiles = {name: op_profile(fns[name]) for name in candidates if not name.endswith(FUSED_SUFFIX)}
    return {"rows": rows, "fused_bitwise_equal": fused_equal, "profiles": profiles}


def no_grad_call(module: nn.Module, x: torch.Tensor) -> Callable[[], object]:
    """A callable running `module(x)` under `torch.no_grad`."""

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
                {"eager": no_grad_call(module, x), "compiled": no_grad_call(compiled, x)},
                settings.compile_repeats,
                settings.warmup,
                settings.clock,
            )
            row.update(
                status="ok",
                eager_ms=median_ms(times["eager"]),
                compiled_ms=median_ms(times["compiled"]),
                **paired_ratio(times["compiled"], times["eager"]),
            )
            log(
                f"  {name:<16} compile {row['compile_s']:6.1f} s  eager {row['eager_ms']:8.2f} ms  compiled "
                f"{row['compiled_ms']:8.2f} ms  ×{row['ratio']:.3f}  max|Δ| {row['max_abs_diff_vs_eager']:.2g}"
            )
        except Exception as error:  # noqa: BLE001  (any backend failure is a result to record, not a crash)
            row.update(status="failed", error=f"{type(error).__name__}: {error}"[:2000])
            log(f"  {name:<16} torch.compile FAILED: {row['error'][:300]}")
        rows.append(row)
    torch._dynamo.reset()
    return rows


__all__ = [
    "FUSED_SUFFIX",
    "FusedGatedMLP",
    "bare_matmuls",
    "bench_compile",
    "bench_ffn",
    "ffn_candidates",
    "matmul_flops",
    "no_grad_call",
]
