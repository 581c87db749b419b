#!/usr/bin/env python
"""The measured variant comparison: fine-tune each FFN / LayerNorm variant of one BERT checkpoint on rt_polarity
for several seeds with `hf_ffn.training.run_classification` (the code behind `finetune_classification.py`), then
write a markdown table (test accuracy and macro-F1 mean ± std, wall time, training tokens/s) and a plot of the
validation curves.

    python scripts/compare_variants.py --rt_polarity_dir ../shared/data/rt_polarity \
        --results docs/finetuning_runs.jsonl --seeds 0 1 2
    python scripts/compare_variants.py --results docs/finetuning_runs.jsonl --report_only \
        --table docs/finetuning_table.md --plot docs/finetuning_eval_curves.png

Each finished run appends one JSON line to `--results`; runs already there are skipped, so an interrupted
comparison resumes where it stopped. Runs go seed by seed (every variant for seed 0, then seed 1, ...), so a
partial comparison has the same seeds for every variant. The fine-tuned models are deleted after each run
(`--keep_models` keeps them).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from transformers import TrainingArguments

from hf_ffn.parity import bundled_checkpoint
from hf_ffn.training import ClassificationDataArguments, ModelArguments, run_classification

# name → ModelArguments switches. Every variant starts from the same checkpoint (GELU, Post-LN).
VARIANTS: dict[str, dict[str, str]] = {
    "gelu-post (baseline)": {},
    "geglu-preserving": {"ffn_type": "geglu", "ffn_init": "preserving"},
    "swiglu-approx": {"ffn_type": "swiglu", "ffn_init": "preserving"},
    "swiglu-fresh-matched": {"ffn_type": "swiglu", "ffn_init": "fresh", "ffn_width": "matched"},
    "gelu-pre-ln": {"layer_norm_position": "pre"},
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_name_or_path", help="BERT checkpoint (default: the bundled all-MiniLM-L6-v2)")
    parser.add_argument("--rt_polarity_dir", help="rt_polarity folder (rt-polarity.pos / rt-polarity.neg)")
    parser.add_argument("--results", required=True, help="JSON-lines file the runs are appended to")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--max_steps", type=int, default=60, help="optimizer steps per run")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--max_seq_length", type=int, default=64)
    parser.add_argument("--eval_steps", type=int, default=20, help="validation every N steps (the curves)")
    parser.add_argument("--max_eval_samples", type=int, default=200, help="validation rows used for the curves")
    parser.add_argument("--max_test_samples", type=int, default=500, help="test rows (the first N of the split)")
    parser.add_argument("--work_dir", help="where run folders go (default: a temporary folder)")
    parser.add_argument("--keep_models", action="store_true")
    parser.add_argument("--report_only", action="store_true", help="only write the table and plot")
    parser.add_argument("--table", help="write the markdown table here")
    parser.add_argument("--plot", help="write the eval-curve plot (PNG) here")
    return parser.parse_args(argv)


def run_one(args: argparse.Namespace, variant: str, seed: int, output_dir: Path) -> dict:
    """One fine-tuning run; returns the JSON line stored in `--results`."""
    model_args = ModelArguments(model_name_or_path=args.model_name_or_path or bundled_checkpoint(), **VARIANTS[variant])
    data_args = ClassificationDataArguments(
        rt_polarity_dir=args.rt_polarity_dir, max_seq_length=args.max_seq_length, max_eval_samples=args.max_eval_samples,
        max_test_samples=args.max_test_samples,
    )
    training_args = TrainingArguments(
        output_dir=str(output_dir),
        seed=seed,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=64,
        train_sampling_strategy="group_by_length",  # batches of similar length: less padding, faster on CPU
        learning_rate=args.learning_rate,
        warmup_steps=args.max_steps // 10,
        eval_strategy="steps",
        eval_steps=args.eval_steps,
        eval_on_start=True,
        logging_steps=args.eval_steps,
        save_strategy="no",
        report_to="none",
    )
    outcome = run_classification(model_args, data_args, training_args)
    results = outcome["results"]
    curve = [
        {"step": entry["step"], "eval_accuracy": entry["eval_accuracy"], "eval_loss": entry["eval_loss"]}
        for entry in outcome["log_history"]
        if "eval_accuracy" in entry
    ]
    return {
        "variant": variant,
        "seed": seed,
        "switches": VARIANTS[variant],
        "checkpoint": model_args.model_name_or_path,
        "max_steps": args.max_steps,
        "batch_size": args.batch_size,
        "learning_rate": args.learning_rate,
        "max_eval_samples": args.max_eval_samples,
        "max_test_samples": args.max_test_samples,
        "test_accuracy": results["test_accuracy"],
        "test_f1": results["test_f1"],
        "eval_accuracy": results["eval_accuracy"],
        "eval_f1": results["eval_f1"],
        "wall_seconds": outcome["wall_seconds"],
        "train_seconds": outcome["train_seconds"],
        "train_tokens": outcome["train_tokens"],
        "train_tokens_per_second": results["train_tokens_per_second"],
        "curve": curve,
        "conversion": outcome["conversion"],
    }


def read_runs(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def mean_std(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.4f}" if values else "–"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def table(runs: list[dict]) -> str:
    """Markdown table, one row per variant in `VARIANTS` order: mean ± sample std over seeds."""
    lines = [
        "| variant | seeds | test accuracy | test F1 (macro) | wall time / run (s) | training tokens/s |",
        "|---|---|---|---|---|---|",
    ]
    for variant in VARIANTS:
        rows = [run for run in runs if run["variant"] == variant]
        if not rows:
            lines.append(f"| {variant} | 0 (not run) | – | – | – | – |")
            continue
        seeds = ", ".join(str(run["seed"]) for run in sorted(rows, key=lambda run: run["seed"]))
        wall = statistics.mean(run["wall_seconds"] for run in rows)
        speed = statistics.mean(run["train_tokens_per_second"] for run in rows)
        lines.append(
            f"| {variant} | {seeds} | {mean_std([r['test_accuracy'] for r in rows])} | "
            f"{mean_std([r['test_f1'] for r in rows])} | {wall:.0f} | {speed:.0f} |"
        )
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], path: Path) -> None:
    """Validation accuracy and loss against the step: one colour per variant, one thin line per seed, the mean
    over seeds thick."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for index, variant in enumerate(VARIANTS):
        rows = [run for run in runs if run["variant"] == variant]
        if not rows:
            continue
        colour = f"C{index}"
        for metric, axis in zip(("eval_accuracy", "eval_loss"), axes):
            for run in rows:
                axis.plot([p["step"] for p in run["curve"]], [p[metric] for p in run["curve"]],
                          color=colour, alpha=0.3, linewidth=0.8)
            steps = [p["step"] for p in rows[0]["curve"]]
            means = [statistics.mean(run["curve"][i][metric] for run in rows) for i in range(len(steps))]
            axis.plot(steps, means, color=colour, linewidth=2, label=f"{variant} (n={len(rows)})")
    for axis, label in zip(axes, ("validation accuracy", "validation loss")):
        axis.set_xlabel(f"optimizer step (batch {runs[0]['batch_size']})")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="lower right")
    figure.suptitle("rt_polarity fine-tuning from all-MiniLM-L6-v2: validation curves (thin: seeds, thick: mean)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = Path(args.results)
    if not args.report_only:
        if args.rt_polarity_dir is None:
            sys.exit("--rt_polarity_dir is required to run the comparison")
        work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="compare_variants_"))
        for seed in args.seeds:
            for variant in args.variants:
                done = {(run["variant"], run["seed"]) for run in read_runs(results)}
                if (variant, seed) in done:
                    continue
                print(f"=== {variant}, seed {seed} ===", flush=True)
                output_dir = work_dir / f"{variant.split()[0]}-seed{seed}"
                shutil.rmtree(output_dir, ignore_errors=True)
                line = run_one(args, variant, seed, output_dir)
                with results.open("a") as handle:
                    handle.write(json.dumps(line) + "\n")
                print(f"=== {variant}, seed {seed}: test accuracy {line['test_accuracy']:.4f}, "
                      f"{line['wall_seconds']:.0f} s ===", flush=True)
                if not args.keep_models:
                    shutil.rmtree(output_dir, ignore_errors=True)
    runs = read_runs(results)
    text = table(runs)
    print(text)
    if args.table:
        Path(args.table).write_text(text)
    if args.plot and runs:
        plot(runs, Path(args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
