"""The benchmark's verdicts and documents: the performance targets checked on one run's numbers, the markdown
report and the files `benchmarks.json` / `benchmarks.md`."""

from __future__ import annotations

import json
import os

from hf_ffn.files import atomic_output_file

from .ffn import FUSED_SUFFIX
from .models import DEFAULT_VARIANT
from .unpadded_report import JSON_NAME as UNPADDED_JSON
from .unpadded_report import benchmarks_section

# The project's performance targets, checked on the numbers of one run.
TARGET_DEFAULT_RATIO = 1.01  # default FfnBert time / upstream BertModel time, inference and training
TARGET_MATMUL_FRACTION = 0.9  # each FFN module's throughput / its bare matmuls' throughput
TARGET_GLU_RATIO = 1.0  # parameter-matched GeGLU/SwiGLU forward time / GELU FFN forward time
TARGET_LOAD_RATIO = 1.1  # FfnBertModel.from_pretrained time / BertModel.from_pretrained time
JSON_NAME, MARKDOWN_NAME = "benchmarks.json", "benchmarks.md"


def evaluate_targets(results: dict) -> list[dict]:
    """Each performance target (the `TARGET_*` limits) with the measured ratio, its per-round [min, max] spread and
    whether it is met.

    `met` judges the median; `limit_within_spread` says the limit lies inside the spread, i.e. the rounds of this
    run disagree about the verdict (noise from other processes, or a difference smaller than the noise). The
    fused-gate+up prototype is not part of the model and has no target.
    """
    targets: list[dict] = []

    def add(name: str, row: dict, key: str, limit: float, lower_is_better: bool = True) -> None:
        measured, low, high = row[key], row[f"{key}_min"], row[f"{key}_max"]
        targets.append(
            {
                "target": name,
                "measured": measured,
                "min": low,
                "max": high,
                "limit": limit,
                "op": "≤" if lower_is_better else "≥",
                "met": measured <= limit if lower_is_better else measured >= limit,
                "limit_within_spread": low <= limit <= high,
            }
        )

    for row in results["models"]:
        if row["variant"] == DEFAULT_VARIANT:
            add(
                f"default / upstream time, {row['checkpoint']}, {row['attn']}, {row['mode']}",
                row,
                "ratio",
                TARGET_DEFAULT_RATIO,
            )
    model_ffns = [row for row in results["ffn"]["rows"] if not row["ffn"].endswith(FUSED_SUFFIX)]
    for row in model_ffns:
        add(
            f"{row['ffn']} ({row['shapes']}) / bare matmuls throughput",
            row,
            "fraction",
            TARGET_MATMUL_FRACTION,
            lower_is_better=False,
        )
    for row in model_ffns:
        if row["ratio_to_gelu"] is not None:
            add(f"{row['ffn']} / gelu FFN forward time ({row['shapes']})", row, "ratio_to_gelu", TARGET_GLU_RATIO)
    add("FfnBertModel / BertModel from_pretrained time", results["load"], "ratio", TARGET_LOAD_RATIO)
    return targets


def write_results(results: dict, output_dir: str) -> None:
    """Write `benchmarks.json` and `benchmarks.md` into `output_dir` (created if missing), each atomically. An
    unpadded benchmark's `unpadded_benchmark.json` in the same folder puts its targets into `benchmarks.md`."""
    os.makedirs(output_dir, exist_ok=True)
    unpadded_file = os.path.join(output_dir, UNPADDED_JSON)
    unpadded = json.load(open(unpadded_file, encoding="utf-8")) if os.path.isfile(unpadded_file) else None
    markdown = format_markdown(results, unpadded)
    for name, text in ((JSON_NAME, json.dumps(results, indent=2) + "\n"), (MARKDOWN_NAME, markdown)):
        with atomic_output_file(os.path.join(output_dir, name)) as tmp:
            tmp.write_text(text, encoding="utf-8")


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
    """One line per target: MET or MISS, the measured value with its spread, the limit."""
    return "\n".join(
        f"{'MET ' if t['met'] else 'MISS'}  {t['target']}: {t['measured']:.3f} [{t['min']:.3f}–{t['max']:.3f}] "
        f"(target {t['op']} {t['limit']}{'; limit within the spread' if t['limit_within_spread'] else ''})"
        for t in targets
    )


def format_markdown(results: dict, unpadded: dict | None = None) -> str:
    """The results document as markdown: targets, then one table per section; last, the unpadded benchmark's
    section (with `unpadded`, the results of its latest run, their targets)."""
    meta = results["meta"]
    out = [
        "# hf_ffn benchmark results",
        "",
        f"Command: `{meta['command']}` — started {meta['started_utc']} UTC, {meta['wall_s']:.0f} s wall. "
        f"torch {meta['torch']}, transformers {meta['transformers']}, Python {meta['python']}, {_machine(meta)}, "
        f"{meta['torch_threads']} torch threads, {meta['dtype']}, {meta['settings']['clock']} clock. "
        f"Load average (1, 5, 15 min) at start {_fmt_load(meta['load_average_start'])}, "
        f"at end {_fmt_load(meta['load_average_end'])}.",
        "",
        _load_caveat(meta),
        "",
        "Times are medians over interleaved rounds after warm-up; a ratio is the median of per-round ratios, "
        "with the smallest and largest in brackets. Peak memory: peak live tensor bytes during one call above "
        "what was live before (torch.profiler allocator events). See `studies/benchmark/` for the method.",
        "",
        "## Targets",
        "",
        _table(
            ["target", "measured [min–max over rounds]", "limit", "met"],
            [
                [
                    t["target"],
                    f"{t['measured']:.3f} [{t['min']:.3f}–{t['max']:.3f}]",
                    f"{t['op']} {t['limit']}",
                    "not judged (--quick)" if meta["settings"]["quick"] else _verdict(t),
                ]
                for t in results["targets"]
            ],
        ),
        "",
        "## Models: FfnBert variants vs upstream BertModel (same checkpoint)",
        "",
        _table(
            [
                "checkpoint",
                "attn",
                "mode",
                "batch×seq",
                "variant",
                "ms",
                "tokens/s",
                "peak MB",
                "time ratio",
                "memory ratio",
            ],
            [
                [
                    r["checkpoint"],
                    r["attn"],
                    r["mode"],
                    f"{r['batch_size']}×{r['seq_len']}",
                    r["variant"] + _parity_note(r),
                    f"{r['median_ms']:.1f}",
                    f"{r['tokens_per_s']:.0f}",
                    f"{r['peak_memory_mb']:.1f}",
                    _spread(r),
                    f"{r['memory_ratio']:.3f}",
                ]
                for r in results["models"]
            ],
        ),
        "",
        "## FFN modules vs their bare matmuls (forward, no grad)",
        "",
        _table(
            [
                "shapes",
                "FFN",
                "tokens",
                "matmul GFLOP",
                "ms",
                "GFLOP/s",
                "matmuls ms",
                "matmuls GFLOP/s",
                "fraction of limit",
                "time / gelu FFN",
            ],
            [
                [
                    r["shapes"],
                    r["ffn"],
                    r["tokens"],
                    f"{r['matmul_gflop']:.3f}",
                    f"{r['median_ms']:.2f}",
                    f"{r['gflops']:.1f}",
                    f"{r['matmul_median_ms']:.2f}",
                    f"{r['matmul_gflops']:.1f}",
                    _spread(r, "fraction"),
                    _spread(r, "ratio_to_gelu") if r["ratio_to_gelu"] is not None else "—",
                ]
                for r in results["ffn"]["rows"]
            ],
        ),
        "",
        "Fused gate+up prototype output bitwise equal (`torch.equal`) to the model's separate projections: "
        + ", ".join(f"{label}: {equal}" for label, equal in results["ffn"]["fused_bitwise_equal"].items())
        + ".",
        "",
        "Where the time goes (torch.profiler, aten ops by self CPU time per forward):",
        "",
        _table(
            ["shapes", "FFN", "op", "calls", "self ms", "share"],
            [
                [label, name, p["op"], p["calls_per_run"], f"{p['self_ms_per_run']:.2f}", f"{p['share']:.1%}"]
                for label, profiles in results["ffn"]["profiles"].items()
                for name, ops in profiles.items()
                for p in ops
            ],
        ),
        "",
        "## torch.compile on/off (FFN modules, forward, no grad)",
        "",
        _table(
            [
                "FFN",
                "status",
                "compile s (wall)",
                "inductor cache hit",
                "eager ms",
                "compiled ms",
                "compiled / eager",
                "max |Δ| vs eager",
            ],
            [
                [
                    r.get("ffn", "—"),
                    r["status"] if r["status"] != "failed" else f"failed: {r['error'][:200]}",
                    f"{r['compile_s']:.1f}" if "compile_s" in r else "—",
                    r.get("inductor_cache_hit", "—"),
                    f"{r['eager_ms']:.2f}" if "eager_ms" in r else "—",
                    f"{r['compiled_ms']:.2f}" if "compiled_ms" in r else "—",
                    _spread(r) if "ratio" in r else "—",
                    f"{r['max_abs_diff_vs_eager']:.2g}" if "max_abs_diff_vs_eager" in r else "—",
                ]
                for r in results["compile"]
            ],
        ),
        "",
        "## Scaling (default FfnBert, sdpa, inference)",
        "",
        _table(
            ["sweep", "batch", "seq", "ms", "tokens/s", "µs/token", "peak MB", "time growth", "memory growth"],
            [
                [
                    r["axis"],
                    r["batch_size"],
                    r["seq_len"],
                    f"{r['median_ms']:.1f}",
                    f"{r['tokens_per_s']:.0f}",
                    f"{r['time_per_token_us']:.1f}",
                    f"{r['peak_memory_mb']:.1f}",
                    f"×{r['time_growth']:.2f}",
                    f"×{r['memory_growth']:.2f}",
                ]
                for r in results["scaling"]
            ],
        ),
        "",
        "## from_pretrained",
        "",
        _table(
            ["BertModel ms", "FfnBertModel ms", "ratio"],
            [
                [
                    f"{results['load']['upstream_ms']:.1f}",
                    f"{results['load']['ffn_bert_ms']:.1f}",
                    _spread(results["load"]),
                ]
            ],
        ),
        "",
        *benchmarks_section(unpadded),
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
    cores = meta.get("cpus") or os.cpu_count() or 1  # the run's machine (documents before `environment()`: this one)
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


def _machine(meta: dict) -> str:
    # `studies.common.environment.environment()` keys; documents written before it have "machine" = "arch, N logical
    # CPUs"
    return f"{meta['machine']}, {meta['cpus']} logical CPUs ({meta['cpu']})" if "cpus" in meta else meta["machine"]


__all__ = [
    "JSON_NAME",
    "MARKDOWN_NAME",
    "TARGET_DEFAULT_RATIO",
    "TARGET_GLU_RATIO",
    "TARGET_LOAD_RATIO",
    "TARGET_MATMUL_FRACTION",
    "evaluate_targets",
    "format_markdown",
    "format_targets",
    "write_results",
]
