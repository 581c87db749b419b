#!/usr/bin/env python
"""The four-task comparison: fine-tune each variant of one BERT checkpoint on CoLA, STS-B, MRPC and rt_polarity for
several seeds with `hf_ffn.finetune.classification.run_classification` (`--task`: each task's reader, metric and split,
see `hf_ffn.finetune.tasks`), then write per task the metric over seeds and the paired difference from the baseline
(Student-t 95% interval over seeds), a GLUE-style average, the baseline's convergence check (last-fifth slope of
the validation curves) and the measured seconds per step with the cost of the full table
(`studies.four_tasks.task_comparison`).

A user's comparison is `hf-ffn compare` (`hf_ffn.comparing.run_comparison`: named variants, healing, one table and
figure); this study runner keeps the study's extras (curves, convergence check, start-weight fingerprints, cost).

    python -m studies.four_tasks.compare_tasks --data_root ../shared/data                   # baseline and GeGLU (exact)
    python -m studies.four_tasks.compare_tasks --data_root ../shared/data \
        --healed swiglu-approx=out/heal-swiglu/healed --healed swiglu-fresh-matched=out/heal-swiglu-matched/healed \\
        --healed pre-ln=out/heal-pre-ln/healed                    # the healed students too (`hf-ffn heal`'s healed/)
    python -m studies.four_tasks.compare_tasks --data_root ../shared/data --tasks mrpc --variants "gelu-post" \\
        --seeds 0 --max_steps 4 --max_train_samples 64 --max_eval_samples 32 --output_dir out/tasks-smoke  # smoke

Every run executes unpadded (`unpad_tokens` on: each token-wise part runs on the real tokens only, the same losses
at about half the work; `--no_unpad_tokens` turns it off). The budget is `--epochs` per task (the steps follow from
each training set's size; `--max_steps` overrides it for every task), validation `--evals_per_run` times per run
(the curves and the convergence check). A bigger budget is the same command with other numbers: more `--epochs`,
`--seeds`, `--threads`, or the same `--output_dir` on several machines each given other `--seeds` and the files'
lines concatenated.

Writes OUTPUT_DIR/task_runs.jsonl (one line per finished run) and OUTPUT_DIR/tasks.md. Finished runs are skipped,
so an interrupted comparison resumes where it stopped (the run in progress starts again); runs go seed by seed, then
task by task. Settings must match the file's (else ValueError: use another --output_dir), and so must each
variant's start weights (`weights_sha256`), unless the folder was re-made by the same recipe (`recipe_sha256`, e.g.
healed again on another CPU) and `--accept_remade_students` is given. `--report_only` only rewrites the table.
Several processes may share one --output_dir when each runs other units (`--variants` with no name runs only the
`--healed` ones, e.g. one variant and one `--seeds` per process); each rewrites tasks.md with its own command, so
rewrite it at the end with the full command and `--report_only`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainingArguments

from hf_ffn.comparing import read_runs  # the one copy (partial last lines left for the next read)
from hf_ffn.files import atomic_output_file
from hf_ffn.finetune.arguments import ClassificationDataArguments
from hf_ffn.finetune.classification import run_classification
from hf_ffn.finetune.tasks import TASKS, task_score
from hf_ffn.parity import bundled_checkpoint
from hf_ffn.training.arguments import ModelArguments, bad_input_exits
from studies.common.comparison import BASELINE, VARIANTS, parse_healed, variant_order
from studies.common.environment import machine, versions
from studies.common.finetune_options import add_finetune_options
from studies.common.start_weights import recipe_sha256, weights_sha256
from studies.four_tasks.task_comparison import report

RESULTS, TABLE = "task_runs.jsonl", "tasks.md"
BUNDLED_NAME = "bundled all-MiniLM-L6-v2"
DEFAULT_VARIANTS = [BASELINE, "geglu"]  # the healed ones come in with --healed
FULL_TABLE_VARIANTS = 5  # baseline, GeGLU exact, SwiGLU approximate, matched SwiGLU and Pre-LN, the last three healed
METRIC_KEYS = ("accuracy", "f1", "f1_binary", "matthews_correlation", "pearson", "spearman", "mse")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_name_or_path", help="BERT checkpoint (default: the bundled all-MiniLM-L6-v2)")
    parser.add_argument("--data_root", help="folder holding cola/, stsb/, mrpc/ and rt_polarity/ (../shared/data)")
    parser.add_argument("--output_dir", "--output-dir", dest="output_dir", default="out/tasks")
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument(
        "--variants",
        nargs="*",
        choices=list(VARIANTS),
        default=DEFAULT_VARIANTS,
        help="as-converted variants of the checkpoint (default: the baseline and GeGLU, exact; "
        "none named: only the --healed ones)",
    )
    add_finetune_options(parser, max_seq_length=128)
    parser.add_argument("--epochs", type=float, default=3.0, help="epochs per task (BERT's GLUE recipe: 3)")
    parser.add_argument("--max_steps", type=int, default=0, help="optimizer steps for every task (0: from --epochs)")
    parser.add_argument("--evals_per_run", type=int, default=10, help="validation points per run (the curves)")
    parser.add_argument("--max_train_samples", type=int, default=0, help="training rows per task (0: all)")
    parser.add_argument("--max_eval_samples", type=int, default=0, help="validation rows (0: all)")
    parser.add_argument("--report_only", action="store_true", help="only write the table")
    parser.add_argument(
        "--accept_remade_students",
        action="store_true",
        help="resume a variant whose folder's weights differ from those its runs started from when "
        "both were made by the same recipe (conversion, healing and layer-wise arguments, data "
        "sizes, source weights: studies.common.start_weights.recipe_sha256), e.g. re-made on another "
        "machine, where CPU arithmetic differs in the last bits; the report counts the weight "
        "sets per variant",
    )
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size", "evals_per_run"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}")
    if not args.variants and not args.healed and not args.report_only:
        parser.error(
            f"--variants names none and no --healed is given: nothing to run (variants: "
            f"{', '.join(VARIANTS)}; or --report_only)"
        )
    return args


def settings(args: argparse.Namespace, task: str) -> dict:
    """What must be equal for runs on `task` to be compared (stored with every run, checked on resume)."""
    return {
        key: getattr(args, key)
        for key in (
            "epochs",
            "max_steps",
            "batch_size",
            "learning_rate",
            "warmup_fraction",
            "max_seq_length",
            "evals_per_run",
            "max_train_samples",
            "max_eval_samples",
            "max_test_samples",
            "unpad_tokens",
        )
    } | {"task": task, "train_sampling_strategy": "group_by_length"}


def split_sizes(args: argparse.Namespace, task: str) -> dict[str, int]:
    """Rows of `task`'s training set (all, and used) and of the split its metric is reported on."""
    raw = TASKS[task].load(Path(args.data_root) / task)
    full = len(raw["train"])
    report_split = TASKS[task].report_split
    limit = args.max_test_samples if report_split == "test" else args.max_eval_samples
    return {
        "train_rows_full": full,
        "train_rows": min(full, args.max_train_samples or full),
        "report_rows": min(len(raw[report_split]), limit or len(raw[report_split])),
    }


def run_one(
    args: argparse.Namespace,
    task: str,
    name: str,
    model_args: ModelArguments,
    seed: int,
    output_dir: Path,
    start: tuple[str, str | None],
    sizes: dict[str, int],
) -> dict:
    """One fine-tuning run from `model_args` (whose weights' SHA-256 and recipe SHA-256 are `start`); returns its JSON
    line."""
    max_steps = args.max_steps or math.ceil(args.epochs * sizes["train_rows"] / args.batch_size)
    eval_steps = max(1, max_steps // args.evals_per_run)
    data_args = ClassificationDataArguments(
        task=task,
        data_dir=str(Path(args.data_root) / task),
        max_seq_length=args.max_seq_length,
        max_train_samples=args.max_train_samples or None,
        max_eval_samples=args.max_eval_samples or None,
        max_test_samples=args.max_test_samples or None,
    )
    training_args = TrainingArguments(
        output_dir=str(output_dir),
        seed=seed,
        max_steps=max_steps,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=64,
        train_sampling_strategy="group_by_length",
        learning_rate=args.learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=round(max_steps * args.warmup_fraction),
        eval_strategy="steps",
        eval_steps=eval_steps,
        eval_on_start=True,
        logging_steps=eval_steps,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    load_before = os.getloadavg()[0]
    outcome = run_classification(model_args, data_args, training_args)
    results = outcome["results"]
    prefix = "test_" if TASKS[task].report_split == "test" else "eval_"
    curve = [
        {"step": entry["step"], "eval_loss": entry["eval_loss"], "score": task_score(task, entry, "eval_")}
        for entry in outcome["log_history"]
        if "eval_loss" in entry
    ]
    checkpoint = model_args.model_name_or_path
    return {
        "task": task,
        "variant": name,
        "seed": seed,
        "checkpoint": BUNDLED_NAME if checkpoint == bundled_checkpoint() else checkpoint,  # no machine path
        "checkpoint_sha256": start[0],
        "recipe_sha256": start[1],
        "settings": settings(args, task),
        "max_steps": max_steps,
        **sizes,
        "metrics": {key: results[prefix + key] for key in METRIC_KEYS if prefix + key in results},
        "score": task_score(task, results, prefix),
        "split": prefix.rstrip("_"),
        "wall_seconds": outcome["wall_seconds"],
        "train_seconds": outcome["train_seconds"],
        "train_seconds_exclude": "evaluations during training",  # (issue 55: earlier records, see train_seconds_range)
        "train_tokens": outcome["train_tokens"],
        "unpad_tokens": outcome["unpad_tokens"],
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "threads": torch.get_num_threads(),
        "finished": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "machine": machine(),
        "versions": versions(),
        "curve": curve,
    }


def write_report(args: argparse.Namespace, runs: list[dict], argv: list[str] | None) -> None:
    first = runs[0]["settings"]
    budget = f"{first['max_steps']} steps per task" if first["max_steps"] else f"{first['epochs']:g} epochs per task"
    header = {
        "title": "# Four-task comparison: CoLA, STS-B, MRPC, rt_polarity fine-tuning from all-MiniLM-L6-v2",
        "intro": (
            f"{budget} at batch {first['batch_size']}, learning rate {first['learning_rate']:g} (linear decay after "
            f"a {100 * first['warmup_fraction']:.0f}% warm-up), max_seq_length {first['max_seq_length']}, "
            f"validation {first['evals_per_run']} times per run; batches grouped by length; unpadded execution "
            f"(`unpad_tokens` {'on' if first['unpad_tokens'] else 'off'}: the same losses, about half the work). "
            f"Metrics, GLUE's per task (×100): CoLA Matthews correlation on in_domain_dev; STS-B Pearson and Spearman "
            f"on sts-dev (test is kept for the zero-shot measure); MRPC F1 of the paraphrase class and accuracy on "
            f"the validation file (the test file held out); rt_polarity accuracy on the seeded test split. Task score: "
            f"the mean of the task's metrics; GLUE-style average: the mean of the task scores. The metric is reported "
            f"after a fixed budget, with no choice of checkpoint on the validation split. Δ: variant − baseline, "
            f"paired by seed, mean [95% t interval]; 'inside the noise' means no difference was detected at this "
            f"number of seeds, and the interval's width is the difference that could have been missed."
            + (
                f" Smoke settings: {first['max_train_samples']} training rows, {first['max_eval_samples']} "
                f"validation rows per task: the numbers show that the command works, not the variants' quality."
                if first["max_train_samples"] or first["max_eval_samples"]
                else ""
            )
        ),
        "versions": runs[-1]["versions"],
        "command": "python -m studies.four_tasks.compare_tasks "
        + shlex.join(  # what runs the table (--report_only does not)
            arg for arg in (sys.argv[1:] if argv is None else argv) if arg != "--report_only"
        ),
        "full_variants": FULL_TABLE_VARIANTS,
        "full_seeds": 3,
        "epochs": first["epochs"],
        "batch_size": first["batch_size"],
        "first": min(r["finished"] for r in runs),
        "last": max(r["finished"] for r in runs),
    }
    with atomic_output_file(Path(args.output_dir) / TABLE) as tmp:  # other processes may read or write it too
        Path(tmp).write_text(report(runs, header))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    output = Path(args.output_dir)
    results = output / RESULTS
    base_checkpoint = args.model_name_or_path or bundled_checkpoint()
    starts = {
        name: ModelArguments(model_name_or_path=base_checkpoint, unpad_tokens=args.unpad_tokens, **VARIANTS[name])
        for name in args.variants
    }
    starts |= {
        name: ModelArguments(model_name_or_path=path, unpad_tokens=args.unpad_tokens)
        for name, path in parse_healed(args.healed, check_folders=not args.report_only).items()
    }
    if not args.report_only:
        if args.data_root is None:
            raise ValueError("--data_root is required to run the comparison (or give --report_only)")
        sha = {path: weights_sha256(path) for path in {start.model_name_or_path for start in starts.values()}}
        fingerprints = {name: sha[start.model_name_or_path] for name, start in starts.items()}
        recipes = {name: recipe_sha256(start.model_name_or_path) for name, start in starts.items()}
        for run in read_runs(results):
            if run["task"] in args.tasks and run["settings"] != settings(args, run["task"]):
                raise ValueError(
                    f"{results} holds {run['task']} runs with settings {run['settings']}, not "
                    f"{settings(args, run['task'])}; use another --output_dir (or --report_only)"
                )
            if run["variant"] in starts and run["checkpoint_sha256"] != fingerprints[run["variant"]]:
                same_recipe = run.get("recipe_sha256") is not None and run["recipe_sha256"] == recipes[run["variant"]]
                if not (same_recipe and args.accept_remade_students):
                    raise ValueError(
                        f"{results}: {run['variant']!r} was run from other weights ({run['checkpoint']!r}) than "
                        f"{starts[run['variant']].model_name_or_path!r}, "
                        + (
                            "made by the same recipe: --accept_remade_students resumes it"
                            if same_recipe
                            else "made by another (or an unrecorded) recipe; use another --output_dir"
                        )
                    )
        sizes = {task: split_sizes(args, task) for task in args.tasks}  # also checks every folder before a run
        output.mkdir(parents=True, exist_ok=True)  # after every check: a refused command leaves no folder
        for seed in args.seeds:
            for task in args.tasks:
                for name in variant_order(list(starts)):
                    if (task, name, seed) in {(r["task"], r["variant"], r["seed"]) for r in read_runs(results)}:
                        continue
                    print(f"=== {task}, {name}, seed {seed} ({time.strftime('%H:%M:%S')}) ===", flush=True)
                    work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="compare_tasks_"))
                    run_dir = work_dir / f"{task}-{name.replace(' ', '-')}-seed{seed}"
                    shutil.rmtree(run_dir, ignore_errors=True)
                    line = run_one(
                        args, task, name, starts[name], seed, run_dir, (fingerprints[name], recipes[name]), sizes[task]
                    )
                    shutil.rmtree(run_dir if args.work_dir else work_dir, ignore_errors=True)
                    with results.open("a") as handle:
                        handle.write(json.dumps(line) + "\n")
                    print(
                        f"=== {task}, {name}, seed {seed}: score {line['score']:.2f}, {line['wall_seconds']:.0f} s, "
                        f"{line['train_seconds'] / line['max_steps']:.3f} s/step ===",
                        flush=True,
                    )
                    write_report(args, read_runs(results), argv)
    runs = read_runs(results)
    if not runs:
        raise ValueError(f"{results} holds no runs yet")
    write_report(args, runs, argv)
    print((output / TABLE).read_text())
    return 0


if __name__ == "__main__":
    with bad_input_exits("compare_tasks.py"):  # a one-line message, not a traceback
        sys.exit(main())
