"""The named fine-tuning task presets (`--task NAME` with `--data_dir`), as data like `run_glue.py`'s
`task_to_keys`: how each folder is read, its columns, the split its metric is reported on, the metric itself
(GLUE's choice per task) and its training recipe (`Recipe`). `TASKS` is the one place in the package that names a
task or a corpus and its file names; every reader it uses is generic (`hf_ffn.training.readers`).

Every reader returns a `DatasetDict` with the columns of the `datasets` hub copy of the task (`nyu-mll/glue`):
`sentence`/`label` (CoLA), `sentence1`/`sentence2`/`label` (STS-B with a float score 0–5, MRPC with 0/1), and
rt_polarity's `text`/`label`. So `--dataset_name nyu-mll/glue --dataset_config_name mrpc --text_column sentence1
--text_pair_column sentence2` (hub access) and `--task mrpc --data_dir ../shared/data/mrpc` train the same model.

The folders (the public releases; see `../shared/README.md`):

- CoLA (Warstadt et al. 2018): `in_domain_train.tsv` → train, `in_domain_dev.tsv` → validation (the GLUE dev set;
  the GLUE test labels are not public). Tab-separated, no header: source, label, original mark, sentence. Read by
  `datasets`' csv builder: `load_dataset("csv", data_files=..., sep="\\t", header=None, names=[...], quoting=3,
  keep_default_na=False)` (quoting 3 = `csv.QUOTE_NONE`: sentences carry quote characters).
- STS-B (Cer et al. 2017): `sts-train.csv` → train, `sts-dev.csv` → validation, `sts-test.csv` → test (kept for the
  zero-shot measure, `hf_ffn.similarity`). Tab-separated despite the name: genre, file, year, id, score, sentence 1,
  sentence 2, and on some lines two more columns; the csv builder refuses the ragged lines, so `read_stsb` reads it.
- MRPC (Dolan & Brockett 2005), dataset-sts split: `msr-para-train.tsv` → train, `msr-para-val.tsv` → validation;
  `msr-para-test.tsv` is held out (not read). Tab-separated with a header, CRLF line ends and a UTF-8 byte-order
  mark: `load_dataset("csv", ..., sep="\\t", quoting=3, encoding="utf-8-sig")`, columns renamed.
- rt_polarity (Pang & Lee 2005): `rt-polarity.neg`, `rt-polarity.pos`, one snippet per line, read by the generic
  `hf_ffn.training.readers.load_label_files` (one file per label) with the seeded 8,000 / 1,000 / 1,662 split (seed 42;
  the same split as every earlier run).

Metrics (GLUE, Wang et al. 2018): CoLA Matthews correlation; STS-B Pearson and Spearman correlation; MRPC F1 of
the paraphrase class and accuracy; rt_polarity accuracy (as SST-2). `task_score` is the mean of a task's metrics
(GLUE's rule for tasks with two), ×100; the GLUE-style average is the mean of the task scores.

Recipes: every task's default is BERT's published GLUE fine-tuning recipe (Devlin et al. 2019, Appendix A.3:
batch 32, 3 epochs, learning rate chosen from {5e-5, 4e-5, 3e-5, 2e-5}; here 2e-5; linear decay after a 10%
warm-up). It is a preset, not a rule: a training argument the user sets (on the command line, in the .json file of
arguments, or as a keyword of `hf_ffn.finetune.run.finetune`) always wins; the preset fills only what the user left
unset (`hf_ffn.finetune.run.apply_recipe`). The repository's converged four-task study (docs/tasks.md) chose
learning rate 1e-4 with batch 32 and a 10% warm-up for its small model; that is that study's choice, given on its
command line, not a preset.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..training.readers import decode_text, load_label_files

STSB_COLUMNS = 7  # genre, file, year, id, score, sentence 1, sentence 2 (later columns ignored)


def _require(folder: Path, names: Mapping[str, str], task: str) -> dict[str, str]:
    """{split: path} of the files `names` in `folder`, after checking each exists."""
    if not folder.is_dir():
        raise FileNotFoundError(f"--data_dir: no such folder: {str(folder)!r} (--task {task})")
    paths = {split: folder / name for split, name in names.items()}
    for split, path in paths.items():
        if not path.is_file():
            nested = folder / task  # --data_dir given as the parent of the task folders (../shared/data)
            hint = f"; did you mean --data_dir {nested}?" if all((nested / n).is_file() for n in names.values()) else ""
            raise FileNotFoundError(
                f"--data_dir: {str(folder)!r} has no {path.name} (the {split} split of --task {task}){hint}"
            )
    return {split: str(path) for split, path in paths.items()}


def read_stsb(path: str | Path):
    """One STS Benchmark file as a `Dataset` with columns sentence1, sentence2 (str) and label (float, 0–5).

    Tab-separated lines: genre, file, year, id, score, sentence 1, sentence 2, sometimes two more columns (ignored).
    Decoded by `decode_text`; blank lines skipped.

    Raises:
        ValueError: naming the file and line when a line has fewer than 7 columns or a score that is not a number
            in [0, 5]; when the file has no lines.
    """
    from datasets import Dataset

    rows: dict[str, list] = {"sentence1": [], "sentence2": [], "label": []}
    for number, line in enumerate(decode_text(Path(path).read_bytes()).splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < STSB_COLUMNS:
            raise ValueError(
                f"{str(path)!r} line {number}: {len(fields)} tab-separated columns, STS-B has at least "
                f"{STSB_COLUMNS} (genre, file, year, id, score, sentence 1, sentence 2)"
            )
        try:
            score = float(fields[4])
        except ValueError:
            score = math.nan
        if not 0.0 <= score <= 5.0:
            raise ValueError(f"{str(path)!r} line {number}: score {fields[4]!r} is not a number in [0, 5]")
        rows["sentence1"].append(fields[5])
        rows["sentence2"].append(fields[6])
        rows["label"].append(score)
    if not rows["label"]:
        raise ValueError(f"{str(path)!r} holds no STS-B lines")
    return Dataset.from_dict(rows)


def load_cola(data_dir: str | Path):
    """CoLA's in-domain train / dev as train / validation, columns sentence, label (0/1)."""
    from datasets import load_dataset

    files = _require(Path(data_dir), {"train": "in_domain_train.tsv", "validation": "in_domain_dev.tsv"}, "cola")
    raw = load_dataset(
        "csv",
        data_files=files,
        sep="\t",
        header=None,
        quoting=3,
        keep_default_na=False,
        names=["source", "label", "original_label", "sentence"],
    )
    return raw.select_columns(["sentence", "label"])


def load_stsb(data_dir: str | Path, splits: tuple[str, ...] = ("train", "validation")):
    """STS-B's `splits` (train, validation = sts-dev, test) read by `read_stsb`."""
    from datasets import DatasetDict

    names = {"train": "sts-train.csv", "validation": "sts-dev.csv", "test": "sts-test.csv"}
    files = _require(Path(data_dir), {split: names[split] for split in splits}, "stsb")
    return DatasetDict({split: read_stsb(path) for split, path in files.items()})


def load_mrpc(data_dir: str | Path):
    """MRPC's train / validation (the test file held out), columns sentence1, sentence2, label (1 = paraphrase)."""
    from datasets import load_dataset

    files = _require(Path(data_dir), {"train": "msr-para-train.tsv", "validation": "msr-para-val.tsv"}, "mrpc")
    raw = load_dataset("csv", data_files=files, sep="\t", quoting=3, encoding="utf-8-sig", keep_default_na=False)
    raw = raw.rename_columns({"Quality": "label", "#1 String": "sentence1", "#2 String": "sentence2"})
    return raw.select_columns(["sentence1", "sentence2", "label"])


def _load_rt_polarity(data_dir: str | Path):
    folder, pattern = Path(data_dir), "rt-polarity.*"
    nested = folder / "rt_polarity"  # --data_dir given as the parent of the task folders
    if folder.is_dir() and not any(folder.glob(pattern)) and any(nested.glob(pattern)):
        raise FileNotFoundError(
            f"--data_dir: {str(folder)!r} has no {pattern} files (--task rt_polarity); "
            f"did you mean --data_dir {nested}?"
        )
    return load_label_files(data_dir, "8000,1000,1662", seed=42, pattern=pattern, argument="--data_dir")


@dataclass(frozen=True)
class Recipe:
    """A fine-tuning recipe: the `TrainingArguments` values a task preset sets when the user does not. The default
    is BERT's published GLUE recipe (Devlin et al. 2019, Appendix A.3): batch 32, 3 epochs, learning rate 2e-5
    (one of the paper's {5e-5, 4e-5, 3e-5, 2e-5}), linear decay after a warm-up over 10% of the steps
    (`warmup_ratio`, a fraction of the optimizer steps)."""

    learning_rate: float = 2e-5
    per_device_train_batch_size: int = 32
    num_train_epochs: float = 3.0
    warmup_ratio: float = 0.1


GLUE_RECIPE = Recipe()


@dataclass(frozen=True)
class Task:
    """A named task: its reader, its columns, the split its metric is reported on, its metric names (keys of
    `classification_metrics` / `regression_metrics`; the first is the one a model card leads with; the task score
    is their mean ×100) and its training recipe."""

    name: str
    load: Callable
    text_column: str
    text_pair_column: str | None
    metrics: tuple[str, ...]
    report_split: str
    regression: bool = False
    recipe: Recipe = GLUE_RECIPE


TASKS: dict[str, Task] = {
    "cola": Task("cola", load_cola, "sentence", None, ("matthews_correlation",), "validation"),
    "stsb": Task("stsb", load_stsb, "sentence1", "sentence2", ("pearson", "spearman"), "validation", regression=True),
    "mrpc": Task("mrpc", load_mrpc, "sentence1", "sentence2", ("f1_binary", "accuracy"), "validation"),
    "rt_polarity": Task("rt_polarity", _load_rt_polarity, "text", None, ("accuracy",), "test"),
}


def get_task(name: str) -> Task:
    """`TASKS[name]`.

    Raises:
        ValueError: naming `--task`, the value and the allowed names.
    """
    if name not in TASKS:
        raise ValueError(f"--task has unknown value {name!r}; allowed: {', '.join(TASKS)}")
    return TASKS[name]


def task_score(task: str, metrics: Mapping[str, float], prefix: str = "") -> float:
    """The GLUE-style score of one run on `task`: the mean of the task's metrics (`prefix` + name in `metrics`,
    e.g. prefix "eval_"), ×100."""
    names = get_task(task).metrics
    return 100 * sum(metrics[prefix + name] for name in names) / len(names)


__all__ = [
    "GLUE_RECIPE",
    "STSB_COLUMNS",
    "TASKS",
    "Recipe",
    "Task",
    "get_task",
    "load_cola",
    "load_mrpc",
    "load_stsb",
    "read_stsb",
    "task_score",
]
