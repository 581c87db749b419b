"""The named fine-tuning task presets (`--task NAME` with `--data_dir`), as data like `run_glue.py`'s
`task_to_keys`: how each folder is read, its columns, the split its metric is reported on, the metric (GLUE's, Wang
et al. 2018) and its training `Recipe`. Every reader returns the columns of the task's `datasets` hub copy
(`nyu-mll/glue`), so `--dataset_name` and `--task` train the same model. The files, splits and readers:
docs/tasks.md; the data: ../shared/README.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..training.readers import decode_text
from .readers import load_label_files

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
    """One STS Benchmark file (tab-separated despite its name; lines of 7 or 9 columns, which the csv builder
    refuses) as a `Dataset` with columns sentence1, sentence2 (str) and label (float, 0–5); `ValueError` naming the
    file and line on fewer than 7 columns or a score outside [0, 5], or no lines."""
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
    names = ["source", "label", "original_label", "sentence"]  # no header; quoting 3 (none): sentences hold quotes
    raw = load_dataset("csv", data_files=files, sep="\t", header=None, quoting=3, keep_default_na=False, names=names)
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
    """The `TrainingArguments` values a task preset sets when the user does not; the default is BERT's GLUE recipe
    (Devlin et al. 2019, Appendix A.3; the learning rate one of the paper's {5e-5, 4e-5, 3e-5, 2e-5})."""

    learning_rate: float = 2e-5
    per_device_train_batch_size: int = 32
    num_train_epochs: float = 3.0
    warmup_ratio: float = 0.1


GLUE_RECIPE = Recipe()


@dataclass(frozen=True)
class Task:
    """A named task: its reader, columns, the split its metrics are reported on, its metric names (keys of
    `classification_metrics` / `regression_metrics`; the first leads the model card) and its recipe."""

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
    """`TASKS[name]`; raises ValueError naming `--task`, the value and the allowed names."""
    if name not in TASKS:
        raise ValueError(f"--task has unknown value {name!r}; allowed: {', '.join(TASKS)}")
    return TASKS[name]


def task_score(task: str, metrics: Mapping[str, float], prefix: str = "") -> float:
    """The GLUE-style score of one run on `task`: the mean of the task's metrics (`prefix` + name), ×100."""
    names = get_task(task).metrics
    return 100 * sum(metrics[prefix + name] for name in names) / len(names)
