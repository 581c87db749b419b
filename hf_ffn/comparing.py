"""Compare named variants of one BERT, RoBERTa-family or ELECTRA checkpoint on fine-tuning tasks: `run_comparison`
(`hf-ffn compare`). Each variant is converted, healed where the conversion is not function-preserving, and fine-tuned
on every task for every seed into one resumable folder; the table gives each variant's paired difference from the
baseline with its Student-t interval over seeds. Layout and how to read the table: docs/comparing.md.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import statistics
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .finetune.run import finetune
from .finetune.tasks import get_task
from .healing import HealArguments, LayerwiseArguments, run_healing
from .training.outputs import checkpoint_max_positions
from .variants import BASELINE, Variant, get_variant

SETTINGS, RUNS, TABLE, FIGURE = "settings.json", "runs.jsonl", "comparison.md", "comparison.png"
CONFIDENCE = 0.95

# --- statistics (the one copy: the studies import these) ---------------------------------------------------------


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """(mean, sample standard deviation with denominator n − 1; nan for n < 2)."""
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else math.nan


def paired_t_interval(differences: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(mean, low, high): the Student-t interval mean ± t_{(1+confidence)/2, n−1} · sd / √n of paired `differences`.

    Raises:
        ValueError: if fewer than two differences are given.
    """
    from scipy import stats

    n = len(differences)
    if n < 2:
        raise ValueError(f"paired_t_interval needs at least 2 paired differences, got {n}")
    interval = stats.ttest_1samp(differences, 0.0).confidence_interval(confidence)
    return statistics.mean(differences), float(interval.low), float(interval.high)


def paired_differences(runs: Sequence[Mapping], reference: Sequence[Mapping], key: str = "score") -> list[float]:
    """`key` of each run in `runs` minus `key` of the `reference` run with the same "seed" (seeds both have)."""
    by_seed = {run["seed"]: run[key] for run in reference}
    return [run[key] - by_seed[run["seed"]] for run in runs if run["seed"] in by_seed]


# --- settings ----------------------------------------------------------------------------------------------------

# Fine-tuning overrides of `smoke=True` (on top of each task's recipe): a run of seconds on 64 rows.
SMOKE_FINETUNING = {
    "max_steps": 8,
    "per_device_train_batch_size": 8,
    "max_train_samples": 64,
    "max_eval_samples": 64,
    "max_test_samples": 64,
    "max_seq_length": 64,
}
# Healing overrides of `smoke=True`: a layer-wise fit on a few thousand tokens, no end-to-end steps.
SMOKE_HEALING = {"layerwise_tokens": 2048, "layerwise_steps": 10, "max_steps": 0, "max_seq_length": 64}
SMOKE_VARIANTS = ("gelu-post", "swiglu-approx")
SMOKE_TASKS = ("stsb",)


def smoke_finetuning(checkpoint: str | Path) -> dict[str, Any]:
    """`SMOKE_FINETUNING`, its `max_seq_length` capped at the tokens `checkpoint`'s positions hold (a small model; a
    RoBERTa's count from `padding_idx + 1`: 64 hold 62). A checkpoint that cannot be read is left to the conversion,
    which says what is wrong."""
    try:
        positions = checkpoint_max_positions(str(checkpoint))
    except OSError:
        positions = None
    if positions is None:
        return dict(SMOKE_FINETUNING)
    return {**SMOKE_FINETUNING, "max_seq_length": min(SMOKE_FINETUNING["max_seq_length"], positions)}


def check_settings(output_dir: Path, settings: dict[str, Any]) -> None:
    """Write `settings` (what every run of the folder must share) to OUTPUT/settings.json, or check they equal the
    stored ones.

    Raises:
        ValueError: naming each differing setting with both values.
    """
    path = output_dir / SETTINGS
    if path.exists():
        stored = json.loads(path.read_text())
        differing = [
            f"{key}: {stored.get(key)!r} there, {settings.get(key)!r} now"
            for key in sorted(set(stored) | set(settings))
            if stored.get(key) != settings.get(key)
        ]
        if differing:
            raise ValueError(
                f"output_dir {str(output_dir)!r} holds a comparison with other settings ("
                f"{'; '.join(differing)}); give another output_dir to compare with these settings"
            )
        return
    output_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2) + "\n")


def read_runs(path: str | Path) -> list[dict]:
    """The finished runs in a runs file or a folder's runs.jsonl (one JSON object a line); a last line without its
    newline (being appended) is left for the next read."""
    path = Path(path)
    path = path / RUNS if path.is_dir() else path
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line.strip()]


# --- messages ----------------------------------------------------------------------------------------------------

LAYERWISE_LOGGER, CONVERSION_WARNING_LOGGER = "hf_ffn.healing.layerwise", "hf_ffn.conversion_warning"


@contextmanager
def warnings_once(logger: str = LAYERWISE_LOGGER, replace=None) -> Iterator[None]:
    """Inside the block, each warning of `logger` is shown once; `replace(record)`, when given, returns the record to
    show it, a string to print instead, or None to drop it."""
    seen: set[str] = set()

    def show(record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.levelno >= logging.WARNING and message in seen:
            return False
        seen.add(message)
        replaced = replace(record) if replace else record
        if isinstance(replaced, str):
            print(replaced, flush=True)
        return replaced is record

    handle = logging.getLogger(logger)
    handle.addFilter(show)
    try:
        yield
    finally:
        handle.removeFilter(show)


def _few_tokens_in_compare(name: str, smoke: bool):
    """The layer-wise "use --layerwise_tokens >= N" warning in `hf-ffn compare`'s terms (its option is --heal_text)."""

    def replace(record: logging.LogRecord):
        if "--layerwise_tokens >=" not in record.getMessage() or len(record.args or ()) < 4:
            return record
        tokens, units, _, recommended = record.args[:4]
        why = (
            "a smoke run heals on few tokens on purpose"
            if smoke
            else f"give more healing text (--heal_text) for at least {recommended:,} tokens"
        )
        return (
            f"[compare] {name}: healing on {tokens:,} tokens for {units:,} FFN units; the fit may match its healing "
            f"text only ({why})"
        )

    return replace


def _no_next_step(record: logging.LogRecord):  # the converter's "Next step: heal it": compare heals by itself
    return None if "Next step: heal it" in record.getMessage() else record


# --- the steps ---------------------------------------------------------------------------------------------------


def write_heal_text(tasks: Sequence[str], data_dir: Path, folder: Path) -> list[str]:
    """The default healing text: every training sentence of `tasks`, one per line, in `folder/<task>.txt` (paths)."""
    paths = []
    for name in tasks:
        path = folder / f"{name}.txt"
        if not path.exists():
            task = get_task(name)
            train = task.load(data_dir / name)["train"]
            columns = [c for c in (task.text_column, task.text_pair_column) if c]
            lines = [row[c] for row in train for c in columns if row[c]]
            folder.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text("\n".join(lines) + "\n")
            tmp.replace(path)
        paths.append(str(path))
    return paths


def prepare_variant(
    variant: Variant, checkpoint: str, folder: Path, heal_text: Sequence[str], smoke: bool = False
) -> str:
    """Convert `checkpoint` into `folder/converted`, then, unless both the variant and this conversion are exact,
    heal it into `folder/healed` by its recipe (`variant.heal`; `SMOKE_HEALING` on top when `smoke`). A folder
    already there is kept (resume). Returns the folder the fine-tunings start from."""
    converted, healed = folder / "converted", folder / "healed"
    if not (converted / "config.json").exists():
        shutil.rmtree(converted, ignore_errors=True)
        print(f"[compare] {variant.name}: converting into {converted}", flush=True)
        # a pruned variant scores its units on the healing text
        with warnings_once(CONVERSION_WARNING_LOGGER, _no_next_step):
            variant.convert(
                checkpoint, converted, **({"calibration_files": list(heal_text)} if variant.init == "pruned" else {})
            )
    report = converted / "conversion_report.json"
    exact = json.loads(report.read_text()).get("exact", variant.exact) if report.exists() else variant.exact
    if variant.exact and exact:  # the conversion report is the truth for this checkpoint (e.g. a ReLU BERT)
        return str(converted)
    if not (healed / "config.json").exists():
        from transformers import TrainingArguments

        recipe = {**(variant.heal or {}), **(SMOKE_HEALING if smoke else {})}
        if smoke:  # blocks no longer than a sequence of the checkpoint can be
            recipe["max_seq_length"] = smoke_finetuning(checkpoint)["max_seq_length"]
        classes = (HealArguments, LayerwiseArguments, TrainingArguments)
        names = [{f.name for f in dataclasses.fields(cls) if f.init} for cls in classes]
        unknown = sorted(set(recipe) - set().union(*names))
        if unknown:
            raise ValueError(f"variant {variant.name!r}: heal recipe has unknown field(s) {unknown}")
        pick = [{k: v for k, v in recipe.items() if k in n} for n in names]
        work = folder / "healing"
        for stale in (healed, work):
            shutil.rmtree(stale, ignore_errors=True)
        heal_args = HealArguments(
            student=str(converted), train_files=list(heal_text), teacher=checkpoint, healed_dir=str(healed), **pick[0]
        )
        training_args = TrainingArguments(
            output_dir=str(work), report_to="none", save_strategy="no", disable_tqdm=True, **{"max_steps": 0, **pick[2]}
        )
        print(
            f"[compare] {variant.name}: healing into {healed} (its conversion is not function-preserving)", flush=True
        )
        with warnings_once(LAYERWISE_LOGGER, _few_tokens_in_compare(variant.name, smoke)):
            run_healing(
                heal_args,
                training_args,
                command=f"hf_ffn.comparing.prepare_variant({variant.name!r})",
                layerwise_args=LayerwiseArguments(**pick[1]),
            )
    return str(healed)


def finetune_run(
    start: str, task: str, data_dir: Path, seed: int, run_dir: Path, finetuning: Mapping[str, Any]
) -> dict[str, Any]:
    """Fine-tune `start` on `task` with `seed` into `run_dir` (`finetuning` overriding the task's recipe); returns
    the run's score (×100), metrics, split and seconds."""
    fixed = dict(report_to="none", save_strategy="no", eval_strategy="no", disable_tqdm=True, quiet=True)
    outcome = finetune(start, str(run_dir), task=task, seed=seed, data_dir=str(data_dir / task), **fixed, **finetuning)
    split = outcome["score_split"]
    prefix = "eval_" if split == "validation" else f"{split}_"
    return {
        "score": outcome["task_score"],
        "metrics": {name: outcome["results"][prefix + name] for name in get_task(task).metrics},
        "split": split,
        "train_seconds": outcome.get("train_seconds"),
        "wall_seconds": outcome["wall_seconds"],
    }


# --- the report --------------------------------------------------------------------------------------------------


def _runs(runs: Sequence[Mapping], task: str, variant: str) -> list[Mapping]:
    return [r for r in runs if r["task"] == task and r["variant"] == variant]


def _interval_cell(differences: list[float]) -> tuple[str, str]:
    if not differences:
        return "–", "no paired seed"
    if len(differences) < 2:
        return f"{differences[0]:+.2f}", "1 paired seed: no interval"
    mean, low, high = paired_t_interval(differences)
    verdict = "**outside the noise**" if low > 0 or high < 0 else "inside the noise"
    return f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]", verdict


def format_table(runs: Sequence[Mapping], variants: Sequence[str], tasks: Sequence[str]) -> str:
    """The comparison as markdown: per task and variant the seeds, the score (mean ± sd) and the paired difference
    from the baseline with its 95% interval and verdict."""
    lines = [
        "| task | variant | seeds | score | Δ vs baseline [95% t interval] | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for task in tasks:
        base = _runs(runs, task, BASELINE)
        for name in variants:
            rows = sorted(_runs(runs, task, name), key=lambda r: r["seed"])
            if not rows:
                continue
            mean, sd = mean_std([r["score"] for r in rows])
            score = f"{mean:.2f}" + (f" ± {sd:.2f}" if len(rows) > 1 else "")
            delta, verdict = ("(baseline)", "") if name == BASELINE else _interval_cell(paired_differences(rows, base))
            seeds = ", ".join(str(r["seed"]) for r in rows)
            lines.append(f"| {task} | {name} | {seeds} | {score} | {delta} | {verdict} |")
    return "\n".join(lines) + "\n"


def write_report(
    output_dir: Path,
    runs: Sequence[Mapping],
    variants: Sequence[str],
    tasks: Sequence[str],
    settings: Mapping[str, Any],
) -> None:
    """Write OUTPUT/comparison.md (`format_table` with the settings and how to read it)."""
    descriptions = "\n".join(f"- `{name}`: {get_variant(name).description}" for name in variants)
    text = (
        f"# Variant comparison\n\nCheckpoint: `{settings['checkpoint']}`. Score: the task's metric(s) ×100 "
        f"(`hf_ffn.finetune.tasks.task_score`). Δ: variant − baseline (`{BASELINE}`), paired by seed, mean and "
        f"Student-t {100 * CONFIDENCE:.0f}% interval over seeds. 'Inside the noise' means no difference was "
        f"detected at this number of seeds; the interval's width is the difference that could have been missed."
        + (
            " Smoke settings: a few steps on a few rows; the numbers show that the command works, not the "
            "variants' quality."
            if settings["smoke"]
            else ""
        )
        + f"\n\n{format_table(runs, variants, tasks)}\nVariants:\n\n{descriptions}\n\n"
        f"Fine-tuning overrides of the tasks' recipes: `{json.dumps(settings['finetuning'])}`.\n"
    )
    tmp = output_dir / (TABLE + ".tmp")
    tmp.write_text(text)
    tmp.replace(output_dir / TABLE)


SINGLE_SEED_NOTE = "1 seed: no interval"
SMOKE_NOTE = "smoke run: says nothing about the variants"


def plot_comparison(
    runs: Sequence[Mapping], variants: Sequence[str], tasks: Sequence[str], path: Path, smoke: bool = False
) -> bool:
    """Draw each variant's Δ vs the baseline with its 95% t interval, one panel per task, into `path`; returns False
    (and prints why) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"[compare] {path.name} skipped: matplotlib is not installed (pip install 'hf_ffn[plots]')", flush=True)
        return False
    others = [name for name in variants if name != BASELINE]
    fig, axes = plt.subplots(
        1, len(tasks), figsize=(4 * len(tasks), 0.6 * len(others) + 1.6), squeeze=False, sharey=True
    )
    for ax, task in zip(axes[0], tasks, strict=True):
        base = _runs(runs, task, BASELINE)
        for y, name in enumerate(others):
            differences = paired_differences(_runs(runs, task, name), base)
            if not differences:
                continue
            if len(differences) >= 2:
                mean, low, high = paired_t_interval(differences)
                ax.errorbar(mean, y, xerr=[[mean - low], [high - mean]], fmt="o", capsize=4)
            else:
                ax.plot(differences[0], y, "o")
                ax.annotate(
                    SINGLE_SEED_NOTE, (differences[0], y), textcoords="offset points", xytext=(0, 7), ha="center"
                )
        ax.axvline(0.0, color="grey", linewidth=1)
        ax.set_title(task)
        ax.set_xlabel(f"Δ score vs {BASELINE} (points)")
        ax.set_yticks(range(len(others)), others)
        ax.set_ylim(-0.6, len(others) - 0.4)
    if smoke:
        fig.suptitle(SMOKE_NOTE, color="tab:red")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# --- the whole comparison ----------------------------------------------------------------------------------------


def run_comparison(
    checkpoint: str,
    variants: Sequence[str],
    tasks: Sequence[str],
    data_dir: str | Path,
    seeds: Sequence[int],
    output_dir: str | Path,
    heal_text: Sequence[str | Path] | None = None,
    smoke: bool = False,
    **finetuning: Any,
) -> Path:
    """Compare `variants` (names of `hf_ffn.variants.VARIANTS`; `BASELINE` added) of `checkpoint` on `tasks` (read
    from `data_dir/<task>`) over `seeds` (paired across variants) into `output_dir` (resumed when it exists), healing
    on `heal_text` (default: the tasks' training sentences); `smoke`: `SMOKE_FINETUNING` and `SMOKE_HEALING`;
    `finetuning`: fields overriding the tasks' recipes. Returns `output_dir` (layout: docs/comparing.md).

    Raises:
        ValueError: an unknown variant or task name, no seed, a variant that needs healing for a family heal does
            not take, or `output_dir` holding a comparison with other settings, before any work.
        FileNotFoundError: a task's folder or file missing under `data_dir`.
    """
    output, data = Path(output_dir), Path(data_dir)
    names = [BASELINE, *[name for name in dict.fromkeys(variants) if name != BASELINE]]
    chosen = {name: get_variant(name) for name in names}
    for task in tasks:
        get_task(task)
    if not tasks:
        raise ValueError("tasks: give at least one task")
    if not seeds:
        raise ValueError("seeds: give at least one seed")
    finetuning = {**(smoke_finetuning(checkpoint) if smoke else {}), **finetuning}
    settings = {
        "checkpoint": str(checkpoint),
        "heal_text": None if heal_text is None else [str(p) for p in heal_text],
        "smoke": smoke,
        "finetuning": dict(sorted(finetuning.items())),
    }
    for task in tasks:  # every task folder exists before any work (the readers check their files)
        get_task(task).load(data / task)
    check_settings(output, settings)
    texts = [str(p) for p in heal_text] if heal_text is not None else write_heal_text(tasks, data, output / "heal_text")
    starts = {
        name: prepare_variant(variant, checkpoint, output / "variants" / name, texts, smoke=smoke)
        for name, variant in chosen.items()
    }
    runs_path = output / RUNS
    for seed in seeds:
        for task in tasks:
            for name in names:
                if any((r["variant"], r["task"], r["seed"]) == (name, task, seed) for r in read_runs(runs_path)):
                    print(f"[compare] {name} / {task} / seed {seed}: finished before, skipped", flush=True)
                    continue
                run_dir = output / "runs" / name / task / f"seed{seed}"
                shutil.rmtree(run_dir, ignore_errors=True)  # an interrupted run starts again
                print(f"[compare] {name} / {task} / seed {seed}: fine-tuning into {run_dir}", flush=True)
                result = finetune_run(starts[name], task, data, seed, run_dir, finetuning)
                for weights in run_dir.glob("*.safetensors"):  # the scores are kept; the weights would fill the disk
                    weights.unlink()
                line = {"variant": name, "task": task, "seed": seed, **result, "start": starts[name]}
                line |= {"run_dir": str(run_dir), "finished": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
                with runs_path.open("a") as handle:
                    handle.write(json.dumps(line) + "\n")
                print(f"[compare] {name} / {task} / seed {seed}: score {result['score']:.2f}", flush=True)
    runs = [r for r in read_runs(runs_path) if r["variant"] in names and r["task"] in tasks]
    write_report(output, runs, names, list(tasks), settings)
    plot_comparison(runs, names, list(tasks), output / FIGURE, smoke=smoke)
    print(f"[compare] wrote {output / TABLE}", flush=True)
    return output
