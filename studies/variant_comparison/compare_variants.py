#!/usr/bin/env python
"""The variant comparison: fine-tune each FFN / LayerNorm variant of one BERT checkpoint on rt_polarity for several
seeds with `hf_ffn.finetune.classification.run_classification`, then write the table (mean ± std, paired differences
from the baseline with a t interval over seeds and a bootstrap interval over test snippets, linear probes, throughput)
and the validation-curve plot (statistics and rendering: `studies.common.comparison`). Throughput is measured after the
runs, every variant side by side in one process (`studies.variant_comparison.variant_throughput`): the runs' own
tokens/s depend on the load of their hour.

    python -m studies.variant_comparison.compare_variants --rt_polarity_dir ../shared/data/rt_polarity --threads 1
    python -m studies.variant_comparison.compare_variants --rt_polarity_dir ../shared/data/rt_polarity --threads 1 \
        --healed swiglu-approx=out/heal-swiglu --healed pre-ln=out/heal-pre-ln        # add healed variants
    # publish under docs/:
    python -m studies.variant_comparison.compare_variants --output-dir studies/variant_comparison ...

Writes OUTPUT_DIR/comparison_runs.jsonl (one line per finished run; per-snippet test predictions as digit strings),
OUTPUT_DIR/comparison_throughput.json (kept once measured; `--remeasure_throughput` measures again),
OUTPUT_DIR/comparison.md, OUTPUT_DIR/comparison_sources.json (the command and the linear probes, for
`--report_only`) and OUTPUT_DIR/figures/comparison_curves.png. Finished runs in the JSONL are skipped, so an
interrupted comparison resumes; runs go seed by seed (every variant for seed 0, then seed 1, ...), so a partial
comparison has the same seeds for every variant. Settings must match the file's (else ValueError: use another
--output-dir). `--report_only` only rewrites the table and plot, from the committed files alone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainingArguments

from hf_ffn.conversion import REPORT_FILE
from hf_ffn.finetune.arguments import ClassificationDataArguments
from hf_ffn.finetune.classification import run_classification
from hf_ffn.parity import bundled_checkpoint
from hf_ffn.training.arguments import ModelArguments, bad_input_exits
from studies.common.comparison import (
    BASELINE,
    HEAL_STUDY_NAMES,
    VARIANTS,
    encode_ids,
    last_fifth_change,
    parse_healed,
    plot_curves,
    probes_from_healing,
    report,
    variant_order,
)
from studies.common.environment import machine, portable_command, portable_path, versions
from studies.common.finetune_options import add_finetune_options
from studies.common.start_weights import weights_sha256
from studies.variant_comparison.variant_throughput import measure_throughput

RESULTS, TABLE, PLOT = "comparison_runs.jsonl", "comparison.md", "figures/comparison_curves.png"
THROUGHPUT = "comparison_throughput.json"
# The report's sources beyond the runs: the command that made them and the linear probes (from --heal-dir), kept so
# that `--report_only` rewrites the report from committed files alone.
SOURCES = "comparison_sources.json"
LR_NOTE = (
    "Learning rate 1e-4: all-MiniLM-L6-v2 is a compact BERT (6 layers, hidden 384); for compact BERTs Turc et al. "
    "2019 (arXiv 1908.08962) fine-tune over {1e-4, 5e-5, 3e-5}, and with one epoch the largest value of that grid "
    "leaves the fewest steps wasted; linear decay to 0 after a 10% warm-up. Batches are grouped by length "
    '(`train_sampling_strategy="group_by_length"`): less padding, so faster on CPU; it changes which snippets share '
    "a batch, not what is learned in expectation, and with the same seed every variant sees the same batches."
)


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (do not measure) or more rounds, got {value}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_name_or_path", help="BERT checkpoint (default: the bundled all-MiniLM-L6-v2)")
    parser.add_argument("--rt_polarity_dir", help="rt_polarity folder (rt-polarity.pos / rt-polarity.neg)")
    parser.add_argument("--output-dir", "--output_dir", dest="output_dir", default="out")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    add_finetune_options(parser, max_seq_length=64)
    parser.add_argument("--max_steps", type=int, default=250, help="optimizer steps (250 = one epoch at batch 32)")
    parser.add_argument("--eval_steps", type=int, default=50, help="validation every N steps (the curves)")
    parser.add_argument("--max_eval_samples", type=int, default=0, help="validation rows (0: all 1,000)")
    parser.add_argument("--report_only", action="store_true", help="only write the table and plot")
    parser.add_argument(
        "--longer_dir",
        help="an output folder of the same comparison at a larger --max_steps (e.g. the baseline at "
        "two epochs): the table gets a convergence check against it",
    )
    parser.add_argument(
        "--throughput_rounds",
        type=non_negative,
        default=30,
        help="interleaved rounds of the side-by-side throughput measurement (0: do not measure)",
    )
    parser.add_argument(
        "--remeasure_throughput",
        action="store_true",
        help="measure the side-by-side throughput again (else a measured OUTPUT_DIR/"
        f"{THROUGHPUT} is kept while it covers every variant at these threads and sizes)",
    )
    parser.add_argument(
        "--notes",
        help="a markdown file inserted after the table (the reading of the results, "
        "written by hand; <!-- comment --> lines are dropped)",
    )
    parser.add_argument(
        "--heal-dir",
        "--heal_dir",
        dest="heal_dir",
        help="the healing study's work folder (studies/healing/heal_study.py): the starting points' linear "
        "probes, measured there on all 10,662 snippets, go into the table",
    )
    return parser.parse_args(argv)


def settings(args: argparse.Namespace) -> dict:
    """What must be equal for runs to be compared (stored with every run, checked on resume)."""
    return {
        key: getattr(args, key)
        for key in (
            "max_steps",
            "batch_size",
            "learning_rate",
            "warmup_fraction",
            "max_seq_length",
            "eval_steps",
            "max_eval_samples",
            "max_test_samples",
            "unpad_tokens",
        )
    } | {"train_sampling_strategy": "group_by_length", "split_seed": 42}


def run_one(
    args: argparse.Namespace, name: str, model_args: ModelArguments, seed: int, output_dir: Path, fingerprint: str
) -> dict:
    """One fine-tuning run; returns its JSON line."""
    data_args = ClassificationDataArguments(
        label_dir=args.rt_polarity_dir,
        split_sizes="8000,1000,1662",
        max_seq_length=args.max_seq_length,
        max_eval_samples=args.max_eval_samples or None,
        max_test_samples=args.max_test_samples or None,
    )
    training_args = TrainingArguments(
        output_dir=str(output_dir),
        seed=seed,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=64,
        train_sampling_strategy="group_by_length",
        learning_rate=args.learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=round(args.max_steps * args.warmup_fraction),
        eval_strategy="steps",
        eval_steps=args.eval_steps,
        eval_on_start=True,
        logging_steps=args.eval_steps,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    load_before = os.getloadavg()[0]
    outcome = run_classification(model_args, data_args, training_args)
    results = outcome["results"]
    curve = [
        {
            "step": entry["step"],
            "eval_loss": entry["eval_loss"],
            "eval_accuracy": entry["eval_accuracy"],
            "eval_f1": entry["eval_f1_macro"],
        }
        for entry in outcome["log_history"]
        if "eval_accuracy" in entry
    ]
    return {
        "variant": name,
        "seed": seed,
        "checkpoint": portable_path(model_args.model_name_or_path),
        "checkpoint_sha256": fingerprint,
        "switches": {k: v for k, v in vars(model_args).items() if k != "model_name_or_path" and v is not None},
        "settings": settings(args),
        "test_accuracy": results["test_accuracy"],
        "test_f1": results["test_f1_macro"],  # macro F1 (the records' key predates the library's f1_macro)
        "eval_accuracy": results["eval_accuracy"],
        "eval_f1": results["eval_f1_macro"],
        "test_predicted": encode_ids(outcome["test_predicted_ids"]),
        "test_labels": encode_ids(outcome["test_label_ids"]),
        "wall_seconds": outcome["wall_seconds"],
        "train_seconds": outcome["train_seconds"],
        "train_tokens": outcome["train_tokens"],
        "train_tokens_per_second": results["train_tokens_per_second"],
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "threads": torch.get_num_threads(),
        "machine": machine(),
        "versions": versions(),
        "curve": curve,
    }


def throughput_stale(path: Path, variants: dict, args: argparse.Namespace) -> bool:
    """Whether the side-by-side throughput at `path` must be measured (again): none yet, `--remeasure_throughput`,
    a variant of this comparison missing from it, or other threads, batch size or sequence length."""
    if args.remeasure_throughput or not path.is_file():
        return True
    measured = json.loads(path.read_text())
    return (
        not set(variants) <= set(measured["variants"])
        or measured["threads"] != torch.get_num_threads()
        or measured["settings"]["batch_size"] != args.batch_size
        or measured["settings"]["max_seq_length"] != args.max_seq_length
    )


def read_runs(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_report(args: argparse.Namespace, runs: list[dict], argv: list[str] | None) -> None:
    output = Path(args.output_dir)
    run_settings = runs[0]["settings"]
    validation = run_settings["max_eval_samples"] or 1000
    test = run_settings["max_test_samples"] or 1662
    header = {
        "title": "# Variant comparison: rt_polarity fine-tuning from all-MiniLM-L6-v2",
        "intro": (
            f"{run_settings['max_steps']} steps at batch {run_settings['batch_size']} (8,000 training "
            f"snippets), max_seq_length {run_settings['max_seq_length']}, validation ({validation:,} snippets) "
            f"every {run_settings['eval_steps']} steps, {test:,} test snippets (the split has 1,662); the "
            f"same seeds for every variant. Δ columns: variant − baseline in accuracy points, mean "
            f"[95% interval]. {LR_NOTE}"
        ),
        "machine": runs[-1]["machine"],
        "versions": runs[-1]["versions"],
    }
    sources_file = output / SOURCES
    if args.report_only and sources_file.is_file():  # the runs' command and probes, as written with them
        sources = json.loads(sources_file.read_text())
    else:
        reports = {}
        for name in HEAL_STUDY_NAMES if args.heal_dir else ():
            file = Path(args.heal_dir) / name / "healed" / REPORT_FILE
            if file.is_file():
                reports[name] = json.loads(file.read_text())
        # A converted variant is fixed by VARIANTS: its probe, once measured, is kept when this heal-dir's students
        # do not measure it (e.g. the fresh matched SwiGLU, healed now from a pruned start).
        earlier = json.loads(sources_file.read_text())["probes"] if sources_file.is_file() else {}
        command = [
            "python",
            "-m",
            "studies.variant_comparison.compare_variants",
            *(sys.argv[1:] if argv is None else argv),
        ]
        probes = {name: probe for name, probe in earlier.items() if name in VARIANTS} | probes_from_healing(reports)
        sources = {"command": portable_command(command), "probes": probes}
        sources_file.write_text(json.dumps(sources, indent=1) + "\n")
    header["command"] = sources["command"]
    if args.notes:
        text = Path(args.notes).read_text()
        header["notes"] = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("<!--"))
    throughput_file = output / THROUGHPUT
    throughput = json.loads(throughput_file.read_text()) if throughput_file.is_file() else None
    longer = read_runs(Path(args.longer_dir) / RESULTS) if args.longer_dir else []
    (output / TABLE).write_text(report(runs, sources["probes"], header, throughput, longer))
    plot_curves(runs, output / PLOT, "rt_polarity fine-tuning from all-MiniLM-L6-v2: validation (mean over seeds)")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.notes and not Path(args.notes).is_file():
        raise ValueError(f"--notes {args.notes!r}: no such file")
    if args.longer_dir and not read_runs(Path(args.longer_dir) / RESULTS):
        raise ValueError(f"--longer_dir {args.longer_dir!r} holds no {RESULTS} with runs")
    output = Path(args.output_dir)
    results = output / RESULTS
    base_checkpoint = args.model_name_or_path or bundled_checkpoint()
    starts = {
        name: ModelArguments(model_name_or_path=base_checkpoint, unpad_tokens=args.unpad_tokens, **VARIANTS[name])
        for name in args.variants
    }
    starts |= {
        name: ModelArguments(model_name_or_path=path, unpad_tokens=args.unpad_tokens)
        for name, path in parse_healed(args.healed).items()
    }
    paths = {start.model_name_or_path for start in starts.values()} if not args.report_only else set()
    sha = {path: weights_sha256(path) for path in paths}  # one hash per folder (the variants share the base)
    fingerprints = {name: sha.get(start.model_name_or_path) for name, start in starts.items()}
    for run in read_runs(results) if not args.report_only else ():  # a report is made from the file as it is
        if run["settings"] != settings(args):
            raise ValueError(
                f"{results} holds runs with settings {run['settings']}, not {settings(args)}; "
                f"use another --output-dir (or --report_only)"
            )
        if run["variant"] in starts and run.get("checkpoint_sha256") != fingerprints[run["variant"]]:
            raise ValueError(
                f"{results}: {run['variant']!r} was run from other weights ({run['checkpoint']!r}, "
                f"sha256 {run.get('checkpoint_sha256')}) than {starts[run['variant']].model_name_or_path!r}"
                f" (sha256 {fingerprints[run['variant']]}); use another --output-dir"
            )
    if not args.report_only:
        if args.rt_polarity_dir is None:
            raise ValueError("--rt_polarity_dir is required to run the comparison (or give --report_only)")
        output.mkdir(parents=True, exist_ok=True)  # after every check: a refused command leaves no folder
        for seed in args.seeds:
            for name in variant_order(list(starts)):
                if (name, seed) in {(run["variant"], run["seed"]) for run in read_runs(results)}:
                    continue
                print(f"=== {name}, seed {seed} ({time.strftime('%H:%M:%S')}) ===", flush=True)
                work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="compare_variants_"))
                run_dir = work_dir / f"{name.replace(' ', '-')}-seed{seed}"
                shutil.rmtree(run_dir, ignore_errors=True)
                line = run_one(args, name, starts[name], seed, run_dir, fingerprints[name])
                shutil.rmtree(run_dir if args.work_dir else work_dir, ignore_errors=True)
                with results.open("a") as handle:
                    handle.write(json.dumps(line) + "\n")
                print(
                    f"=== {name}, seed {seed}: test accuracy {line['test_accuracy']:.4f}, "
                    f"{line['wall_seconds']:.0f} s, {line['train_tokens_per_second']:.0f} real tokens/s ===",
                    flush=True,
                )
                write_report(args, read_runs(results), argv)
    runs = read_runs(results)
    if not runs:
        raise ValueError(f"{results} holds no runs yet")
    unhealed = {name: start for name, start in starts.items() if name in VARIANTS}
    unhealed.setdefault(BASELINE, ModelArguments(model_name_or_path=base_checkpoint, unpad_tokens=args.unpad_tokens))
    if not args.report_only and args.throughput_rounds and throughput_stale(output / THROUGHPUT, unhealed, args):
        print(f"=== throughput, {len(unhealed)} variants side by side ({time.strftime('%H:%M:%S')}) ===", flush=True)
        measured = measure_throughput(
            unhealed,
            BASELINE,
            args.rt_polarity_dir,
            batch_size=args.batch_size,
            max_seq_length=args.max_seq_length,
            repeats=args.throughput_rounds,
        )
        measured |= {"unpad_tokens": args.unpad_tokens, "machine": machine(), "versions": versions()}
        (output / THROUGHPUT).write_text(json.dumps(measured, indent=1) + "\n")
    for run in (r for r in runs if r["variant"] == BASELINE):
        change = last_fifth_change(run["curve"])
        print(
            f"baseline seed {run['seed']}: validation loss over the last fifth: slope "
            f"{change['slope_per_step']:.2e}/step, relative change {100 * change['relative_change']:+.2f}%"
        )
    write_report(args, runs, argv)
    print((output / TABLE).read_text())
    return 0


if __name__ == "__main__":
    with bad_input_exits("compare_variants.py"):  # a one-line message, not a traceback
        sys.exit(main())
