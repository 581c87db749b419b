"""`hf-ffn finetune`: fine-tune a BERT or FfnBert checkpoint for sequence classification or regression on a task
preset or your own data, as transformers' `run_glue.py` does (docs/finetuning.md). The task's `Recipe` (BERT's GLUE
recipe by default) fills the training arguments the user did not set (`apply_recipe`); the run ends with where it
saved and one summary line: the task score beside that of a predictor that ignores its input (`summarize`).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from transformers import HfArgumentParser, TrainingArguments

from ..training.arguments import ModelArguments, folder_name, fresh_output_dir, given_options, parse_arguments
from .arguments import ClassificationDataArguments
from .classification import BASELINE_PREFIX, run_classification
from .tasks import GLUE_RECIPE, Recipe, get_task

ARGUMENT_CLASSES = (ModelArguments, ClassificationDataArguments, TrainingArguments)
CLASS_METRICS = ("accuracy",)
REGRESSION_METRICS = ("pearson", "spearman")
DEFAULT_OUTPUT_ROOT = Path("out") / "finetune"  # --output_dir left out: `default_output_dir` under it


def finetune_parser(prog: str = "hf-ffn finetune") -> HfArgumentParser:
    """The `HfArgumentParser` of model, data and `TrainingArguments` (its --help shows every default)."""
    recipe = GLUE_RECIPE
    parser = HfArgumentParser(
        ARGUMENT_CLASSES,
        prog=prog,
        description="Fine-tune a BERT or FfnBert checkpoint, optionally converted first to another FFN variant or "
        "LayerNorm placement, for sequence classification or regression with transformers' Trainer, and save the "
        "model, its card and all_results.json in --output_dir. The data comes from one source: --task with "
        "--data_dir, --train_file, --label_dir or --dataset_name. With --task, the task's recipe (BERT's GLUE "
        f"recipe: lr {recipe.learning_rate:g}, ".replace("e-0", "e-")
        + f"batch {recipe.per_device_train_batch_size}, {recipe.num_train_epochs:g} epochs, "
        f"{recipe.warmup_ratio:.0%} warm-up) replaces Trainer's defaults for any option you do not give. The last "
        "line gives the score beside its baseline (the majority class; the mean label for a regression); "
        "all_results.json: f1_macro is the mean of the classes' F1, f1_binary the F1 of class id 1.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser._option_string_actions["--output_dir"].help = (  # Trainer's help names its ./trainer_output
        f"Where the model, its card and all_results.json are saved. Default: {DEFAULT_OUTPUT_ROOT}/<task or data "
        "name>-<checkpoint name>, or the same with -2, -3, ... when that folder holds a finished model. A folder "
        "given here that holds a finished model is refused."
    )
    return parser


def finetune_given_options(argv: Sequence[str]) -> set[str]:
    """The argument names `argv` sets explicitly."""
    return given_options(finetune_parser(), argv)


def apply_recipe(training_args: TrainingArguments, recipe: Recipe, given: set[str]) -> dict[str, Any]:
    """Set on `training_args` each `recipe` value whose argument is not in `given` (the user's explicit ones);
    returns what was set. A warm-up given as `warmup_steps` or `warmup_ratio` counts as the recipe's; the epochs
    are set beside a given `max_steps` too (which overrides them: Trainer's rule)."""
    applied = {}
    for name, value in dataclasses.asdict(recipe).items():
        target = "warmup_steps" if name == "warmup_ratio" else name  # a float below 1: a fraction of the steps
        if name == "warmup_ratio" and given & {"warmup_ratio", "warmup_steps"}:
            continue
        if name not in given and target not in given:
            setattr(training_args, target, value)
            applied[target] = value
    return applied


def summarize(
    name: str, metrics: Sequence[str], results: Mapping[str, float], split: str, regression: bool = False
) -> tuple[float, str]:
    """`(score, line)`: the mean of `metrics` in `results` under `split`'s prefix ×100 (GLUE's rule), and the line
    `task=<name> score=<x.xx> (<metric>=<v>, ...) on <split>`, followed by `; baseline=<x.xx> (majority class)`
    when `results` holds the split's `baseline_metrics`. Raises `KeyError` naming a missing metric."""
    prefix = "eval_" if split == "validation" else f"{split}_"
    missing = [prefix + metric for metric in metrics if prefix + metric not in results]
    if missing:
        raise KeyError(f"no {', '.join(missing)} in the results of the {split} split")
    values = [results[prefix + metric] for metric in metrics]
    score = 100 * sum(values) / len(values)
    shown = ", ".join(f"{metric}={value:.4f}" for metric, value in zip(metrics, values, strict=True))
    line = f"task={name} score={score:.2f} ({shown}) on {split}"
    baseline = [results.get(f"{prefix}{BASELINE_PREFIX}{metric}") for metric in metrics]
    if None not in baseline:
        chance = 100 * sum(baseline) / len(baseline)
        line += f"; baseline={chance:.2f} ({'constant prediction' if regression else 'majority class'})"
    return score, line


def _data_name(data_args: ClassificationDataArguments) -> str:
    if data_args.task is not None:
        return data_args.task
    if data_args.dataset_name is not None:
        return "/".join(filter(None, (data_args.dataset_name, data_args.dataset_config_name)))
    return Path(data_args.label_dir).name if data_args.label_dir else Path(data_args.train_file).stem


def default_output_dir(
    model_args: ModelArguments, data_args: ClassificationDataArguments, root: str | Path = DEFAULT_OUTPUT_ROOT
) -> Path:
    """Where a run without `--output_dir` saves: `root/<task or data name>-<checkpoint folder or hub name>`
    (e.g. `out/finetune/mrpc-bert-base-uncased`), or its first free `-2`, `-3`, ... (`fresh_output_dir`)."""
    name = f"{_data_name(data_args)}-{folder_name(model_args.model_name_or_path)}".replace("/", "_")
    return fresh_output_dir(Path(root) / name)


def run_finetuning(
    model_args: ModelArguments,
    data_args: ClassificationDataArguments,
    training_args: TrainingArguments,
    given: set[str],
    *,
    quiet: bool = False,
) -> dict[str, Any]:
    """`run_classification` with the task's recipe filling what `given` leaves unset, then the score and the
    summary line (printed unless `quiet`). Returns `run_classification`'s outcome plus `task`, `task_score`,
    `score_split`, `summary` and `recipe` (the values the preset set)."""
    task = get_task(data_args.task) if data_args.task is not None else None
    applied = apply_recipe(training_args, task.recipe if task else GLUE_RECIPE, given)
    outcome = run_classification(model_args, data_args, training_args)
    results, regression = outcome["results"], outcome["regression"]
    if task is not None:
        metrics, split = task.metrics, task.report_split
    else:  # the test split when it has labels
        metrics = REGRESSION_METRICS if regression else CLASS_METRICS
        split = "test" if all(f"test_{metric}" in results for metric in metrics) else "validation"
    name = _data_name(data_args)
    score, line = summarize(name, metrics, results, split, regression=regression)
    if not quiet and training_args.process_index == 0:  # from the main process only; the summary line last
        print(f"saved to {training_args.output_dir} (model, tokenizer, model card README.md, all_results.json)")
        print(line, flush=True)
    return {**outcome, "task": name, "task_score": score, "score_split": split, "summary": line, "recipe": applied}


def finetune(
    model_name_or_path: str,
    output_dir: str,
    *,
    task: str | None = None,
    seed: int = 42,
    quiet: bool = False,
    **arguments: Any,
) -> dict[str, Any]:
    """Fine-tune `model_name_or_path` for sequence classification or regression, print where it saved and the
    summary line. Data: `task` (with `data_dir=`), `train_file=` and `validation_file=`, `label_dir=` or
    `dataset_name=` (docs/finetuning.md); `arguments`: any fields of `ModelArguments` (e.g. `ffn_type="geglu"`),
    `ClassificationDataArguments` and `TrainingArguments`; the task's recipe fills only the training ones not given.

    Example:
        >>> finetune("bert-base-uncased", "out/mrpc", task="mrpc", data_dir="data/mrpc")  # doctest: +SKIP
        saved to out/mrpc (model, tokenizer, model card README.md, all_results.json)
        task=mrpc score=84.51 (f1_binary=0.8812, accuracy=0.8090) on validation; baseline=75.50 (majority class)

    Returns `run_finetuning`'s outcome; raises `ValueError` on an argument no dataclass has, and on bad input.
    """
    arguments = dict(model_name_or_path=model_name_or_path, output_dir=output_dir, task=task, seed=seed, **arguments)
    names = [{field.name for field in dataclasses.fields(cls) if field.init} for cls in ARGUMENT_CLASSES]
    unknown = sorted(set(arguments) - set().union(*names))
    if unknown:
        raise ValueError(
            f"finetune has no argument {', '.join(unknown)}: allowed are the fields of ModelArguments, "
            f"ClassificationDataArguments and transformers.TrainingArguments"
        )
    built = [
        cls(**{key: value for key, value in arguments.items() if key in fields})
        for cls, fields in zip(ARGUMENT_CLASSES, names, strict=True)
    ]
    given = set(arguments) - {"task", "model_name_or_path", "output_dir"}
    return run_finetuning(*built, given, quiet=quiet)


def finetune_argv(argv: Sequence[str], prog: str = "hf-ffn finetune") -> dict[str, Any]:
    """`finetune` from a command line (or one .json file of its flags); `--output_dir` defaults to
    `default_output_dir`. Returns `run_finetuning`'s outcome."""
    parser = finetune_parser(prog)
    model_args, data_args, training_args = parse_arguments(parser, argv)
    given = given_options(parser, argv)
    if "output_dir" not in given:  # not Trainer's ./trainer_output: a fresh folder under out/finetune/
        training_args.output_dir = str(default_output_dir(model_args, data_args))
    return run_finetuning(model_args, data_args, training_args, given)


def finetune_main(argv: Sequence[str], prog: str = "hf-ffn finetune") -> int:
    """`finetune_argv` for a console entry point: returns 0 (bad input raises `ValueError` / `OSError`)."""
    finetune_argv(argv, prog)
    return 0
