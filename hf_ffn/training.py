"""Fine-tuning FfnBert variants with transformers' `Trainer`: argument dataclasses, data loading and validation,
metrics, variant loading, finished-output handling and model cards.

`scripts/finetune_classification.py`, `scripts/finetune_mlm.py` and `scripts/compare_variants.py` are thin
wrappers over `run_classification` and `run_mlm` (the pattern of transformers' `run_glue.py` / `run_mlm.py`:
`HfArgumentParser` over `ModelArguments`, a data-argument dataclass and `TrainingArguments`).

Everything that can be wrong with the input (a missing or empty data file, a column that does not exist, labels
that differ between splits, a checkpoint path that does not exist, a bad variant switch) raises before any
training starts, naming the file or field, the value and what is allowed.

Finished output. Trainer writes its resumable checkpoints to `output_dir/checkpoint-N/` as usual. The final
model, tokenizer, model card and results are written to a staging folder `output_dir/.staging-final/` and then
moved into `output_dir` with `os.replace`, `config.json` last. `from_pretrained` and `pipeline` need
`config.json`, so an `output_dir` whose final save was interrupted never loads as a model; a run that fails
removes its staging folder. An `output_dir` that already holds a finished model (a `config.json`) is refused.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import (
    AutoTokenizer,
    DataCollatorForLanguageModeling,
    EvalPrediction,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Trainer,
    TrainingArguments,
    default_data_collator,
)

from .configuration_ffn_bert import FFN_TYPES, LAYER_NORM_POSITIONS
from .conversion import load_converted
from .modeling_ffn_bert import FfnBertForMaskedLM, FfnBertForSequenceClassification

DATA_FILE_EXTENSIONS = {".csv": "csv", ".json": "json", ".jsonl": "json"}
FFN_INITS = ("preserving", "fresh")
FFN_WIDTHS = ("keep", "matched")
RT_POLARITY_SPLIT = (8000, 1000, 1662)  # train / validation / test of the 10,662 snippets
STAGING_FOLDER = ".staging-final"
DEFAULT_TEXT_COLUMNS = ("text", "sentence")


# ---------------------------------------------------------------------------------------------------------------
# Arguments (parsed by `HfArgumentParser` together with `TrainingArguments`)
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class ModelArguments:
    """Which checkpoint to start from and which FFN variant / LayerNorm placement to turn it into."""

    model_name_or_path: str = field(metadata={"help": "BERT or FfnBert checkpoint: a local folder or a hub name"})
    ffn_type: str | None = field(
        default=None, metadata={"help": "FFN variant, e.g. gelu (BERT), geglu, swiglu; default: the checkpoint's"}
    )
    layer_norm_position: str | None = field(
        default=None, metadata={"help": "post (BERT) or pre (Pre-LN); default: the checkpoint's"}
    )
    ffn_init: str = field(
        default="preserving",
        metadata={"help": "how a BERT FFN becomes a gated one: 'preserving' (copy BERT's weights so the FFN "
                          "computes the same or nearly the same function) or 'fresh' (new random FFN weights)"},
    )
    ffn_width: str = field(
        default="keep",
        metadata={"help": "gated FFN width: 'keep' (the checkpoint's intermediate_size), 'matched' (2/3 of it, "
                          "rounded up to 256: the same FFN weight count) or an integer"},
    )
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "tokenizer folder or name, default: the one saved with the checkpoint"}
    )

    def __post_init__(self) -> None:
        checks = (
            ("ffn_type", self.ffn_type, FFN_TYPES),
            ("layer_norm_position", self.layer_norm_position, LAYER_NORM_POSITIONS),
            ("ffn_init", self.ffn_init, FFN_INITS),
        )
        for name, value, allowed in checks:
            if value is not None and value not in allowed:
                raise ValueError(f"--{name} has unknown value {value!r}; allowed: {', '.join(allowed)}")
        if self.ffn_width not in FFN_WIDTHS and not (self.ffn_width.isdigit() and int(self.ffn_width) > 0):
            raise ValueError(f"--ffn_width has bad value {self.ffn_width!r}; allowed: keep, matched, a positive integer")

    @property
    def width(self) -> str | int:
        """`ffn_width` as `load_converted` takes it: "keep", "matched" or an int."""
        return int(self.ffn_width) if self.ffn_width.isdigit() else self.ffn_width

    @property
    def is_variant(self) -> bool:
        """Whether the checkpoint is to be changed at all (else it loads as saved)."""
        return (
            self.ffn_type is not None
            or self.layer_norm_position is not None
            or self.width != "keep"
            or self.ffn_init != "preserving"
        )


@dataclass
class ClassificationDataArguments:
    """Where the labelled text comes from: local csv/json/jsonl files, an rt_polarity-style folder, or the hub."""

    train_file: str | None = field(default=None, metadata={"help": "csv / json / jsonl file with the training data"})
    validation_file: str | None = field(default=None, metadata={"help": "csv / json / jsonl validation file"})
    test_file: str | None = field(default=None, metadata={"help": "csv / json / jsonl test file (labels optional)"})
    dataset_name: str | None = field(default=None, metadata={"help": "a dataset on the hub (needs hub access)"})
    dataset_config_name: str | None = field(default=None, metadata={"help": "the hub dataset's configuration"})
    rt_polarity_dir: str | None = field(
        default=None,
        metadata={"help": "folder in the rt_polarity layout: files rt-polarity.<label>, one snippet per line"},
    )
    rt_polarity_split: str = field(
        default=",".join(map(str, RT_POLARITY_SPLIT)), metadata={"help": "train,validation,test sizes"}
    )
    split_seed: int = field(default=42, metadata={"help": "seed of the rt_polarity split (fixed: same for all runs)"})
    text_column: str | None = field(default=None, metadata={"help": "text column; default: 'text' or 'sentence'"})
    label_column: str = field(default="label", metadata={"help": "label column"})
    max_seq_length: int = field(default=128, metadata={"help": "truncate to this many tokens ([CLS]/[SEP] included)"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use only the first N training rows"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "use only the first N validation rows"})
    max_test_samples: int | None = field(default=None, metadata={"help": "use only the first N test rows"})

    def __post_init__(self) -> None:
        sources = [
            name for name in ("train_file", "dataset_name", "rt_polarity_dir") if getattr(self, name) is not None
        ]
        if len(sources) != 1:
            raise ValueError(
                f"give exactly one data source: --train_file (with --validation_file), --rt_polarity_dir or "
                f"--dataset_name; got {sources or 'none'}"
            )
        if self.train_file is not None and self.validation_file is None:
            raise ValueError("--validation_file is required with --train_file (the label set is checked against it)")
        if self.max_seq_length <= 2:
            raise ValueError(f"--max_seq_length must be > 2 ([CLS] and [SEP] take two), got {self.max_seq_length}")


@dataclass
class MlmDataArguments:
    """Plain-text files (or folders of `*.txt`) for masked-language-model training."""

    train_files: list[str] = field(metadata={"help": "text files or folders of *.txt files"})
    validation_split_percentage: int = field(
        default=10, metadata={"help": "percentage of the documents held out (whole documents, seeded)"}
    )
    split_seed: int = field(default=42, metadata={"help": "seed of the document split and of the fixed eval masks"})
    max_seq_length: int = field(default=128, metadata={"help": "tokens per training block"})
    mlm_probability: float = field(default=0.15, metadata={"help": "fraction of tokens masked (BERT: 0.15)"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use only the first N training blocks"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "use only the first N validation blocks"})

    def __post_init__(self) -> None:
        if not 0 < self.validation_split_percentage < 100:
            raise ValueError(
                f"--validation_split_percentage must be in 1..99, got {self.validation_split_percentage}"
            )
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"--mlm_probability must be in (0, 1), got {self.mlm_probability}")
        if self.max_seq_length <= 2:
            raise ValueError(f"--max_seq_length must be > 2, got {self.max_seq_length}")


# ---------------------------------------------------------------------------------------------------------------
# Data: checks and loaders
# ---------------------------------------------------------------------------------------------------------------
def check_data_file(path: str, argument: str) -> Path:
    """`path` as a `Path` after checking it exists, is a csv/json/jsonl file and is not empty.

    Raises:
        FileNotFoundError: if `path` does not exist or is not a file.
        ValueError: on an unsupported extension or an empty (or whitespace-only) file.
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{argument}: data file {str(file)!r} does not exist (or is not a file)")
    if file.suffix not in DATA_FILE_EXTENSIONS:
        raise ValueError(
            f"{argument}: {str(file)!r} has extension {file.suffix!r}; allowed: {', '.join(DATA_FILE_EXTENSIONS)}"
        )
    with file.open("rb") as handle:
        if not handle.read(65536).strip():
            raise ValueError(f"{argument}: data file {str(file)!r} is empty")
    return file


def load_rt_polarity(directory: str, split_sizes: Sequence[int] = RT_POLARITY_SPLIT, seed: int = 42):
    """The rt_polarity layout as a `DatasetDict` with splits train / validation / test and columns text, label.

    The folder holds one file per class named `rt-polarity.<label>` (`rt-polarity.pos`, `rt-polarity.neg`), one
    snippet per line (Pang & Lee 2005, sentence polarity v1.0). Blank lines are skipped. The snippets are
    shuffled with `Dataset.shuffle(seed=seed)` and cut into `split_sizes` (train, validation, test): the same
    seed always gives the same split. Lines are read as UTF-8 with undecodable bytes replaced.

    Raises:
        FileNotFoundError: if `directory` does not exist or holds no `rt-polarity.*` files.
        ValueError: if a label file is empty, fewer than two labels are found, or the split sizes are not three
            positive integers adding up to at most the number of snippets.
    """
    from datasets import Dataset, DatasetDict

    folder = Path(directory)
    files = sorted(folder.glob("rt-polarity.*")) if folder.is_dir() else []
    if not files:
        raise FileNotFoundError(
            f"--rt_polarity_dir: {str(folder)!r} holds no rt-polarity.<label> files (expected e.g. rt-polarity.pos, "
            f"rt-polarity.neg)"
        )
    texts: list[str] = []
    labels: list[str] = []
    for file in files:
        lines = [line.strip() for line in file.read_text(encoding="utf-8", errors="replace").splitlines()]
        lines = [line for line in lines if line]
        if not lines:
            raise ValueError(f"--rt_polarity_dir: label file {str(file)!r} is empty")
        texts += lines
        labels += [file.suffix[1:]] * len(lines)
    if len(files) < 2:
        raise ValueError(f"--rt_polarity_dir: {str(folder)!r} has one label file ({files[0].name}); need two or more")
    sizes = list(split_sizes)
    if len(sizes) != 3 or any(size <= 0 for size in sizes) or sum(sizes) > len(texts):
        raise ValueError(
            f"--rt_polarity_split must be three positive sizes (train,validation,test) adding up to at most "
            f"{len(texts)} (the snippets in {str(folder)!r}), got {sizes}"
        )
    shuffled = Dataset.from_dict({"text": texts, "label": labels}).shuffle(seed=seed).flatten_indices()
    bounds = np.cumsum([0] + sizes)
    return DatasetDict(
        {
            name: shuffled.select(range(bounds[i], bounds[i + 1]))
            for i, name in enumerate(("train", "validation", "test"))
        }
    )


def load_classification_datasets(args: ClassificationDataArguments):
    """The raw splits (`DatasetDict` with train, validation and, if given, test) from the source `args` names.

    Local files are checked with `check_data_file` and read with `datasets.load_dataset("csv" | "json", ...)`.

    Raises:
        FileNotFoundError, ValueError: as `check_data_file` and `load_rt_polarity`; ValueError if the local files
            mix csv and json.
    """
    from datasets import load_dataset

    if args.rt_polarity_dir is not None:
        sizes = [int(part) for part in args.rt_polarity_split.split(",") if part.strip()]
        return load_rt_polarity(args.rt_polarity_dir, sizes, args.split_seed)
    if args.dataset_name is not None:
        return load_dataset(args.dataset_name, args.dataset_config_name)
    files = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
    checked = {split: check_data_file(path, f"--{split}_file") for split, path in files.items() if path is not None}
    builders = {DATA_FILE_EXTENSIONS[path.suffix] for path in checked.values()}
    if len(builders) != 1:
        raise ValueError(f"data files mix formats ({', '.join(map(str, checked.values()))}); use one of csv or json")
    raw = load_dataset(builders.pop(), data_files={split: str(path) for split, path in checked.items()})
    test = raw.get("test")
    if test is not None and args.label_column in test.column_names and set(test[args.label_column]) == {None}:
        # a test file without labels: `datasets` gives it the other files' columns, filled with None
        raw["test"] = test.remove_columns(args.label_column)
    return raw


def check_columns_and_labels(raw, args: ClassificationDataArguments) -> tuple[str, list]:
    """`(text_column, labels)`: the text column and the sorted label set, after checking every split.

    Each split must have the text and label columns and at least one row; the label set of validation (and of a
    labelled test split) must equal the training set's. Unlabelled test splits are allowed (predictions only).

    Raises:
        ValueError: naming the split (and its file) on a missing column, an empty split or a differing label set.
    """
    sources = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}

    def where(split: str) -> str:
        return f"{split} split ({sources[split]})" if sources.get(split) else f"{split} split"

    for split in ("train", "validation"):
        if split not in raw:
            raise ValueError(f"the data has no {split} split; splits found: {', '.join(raw)}")
    text_column = args.text_column
    if text_column is None:
        found = [name for name in DEFAULT_TEXT_COLUMNS if name in raw["train"].column_names]
        if not found:
            raise ValueError(
                f"--text_column not given and the {where('train')} has none of {DEFAULT_TEXT_COLUMNS}; columns: "
                f"{', '.join(raw['train'].column_names)}"
            )
        text_column = found[0]
    for split, dataset in raw.items():
        if len(dataset) == 0:
            raise ValueError(f"the {where(split)} has no rows")
        columns = dataset.column_names
        needed = [text_column] + ([args.label_column] if split != "test" else [])
        for column in needed:
            if column not in columns:
                option = "--text_column" if column == text_column else "--label_column"
                raise ValueError(
                    f"{option}: column {column!r} does not exist in the {where(split)}; columns: {', '.join(columns)}"
                )
    train_labels = set(raw["train"][args.label_column])
    for split in ("validation", "test"):
        if split not in raw or args.label_column not in raw[split].column_names:
            continue
        labels = set(raw[split][args.label_column])
        if labels != train_labels:
            raise ValueError(
                f"--label_column {args.label_column!r}: the label set of the {where(split)} differs from the training "
                f"split's: only in {split}: {sorted(labels - train_labels, key=str)}, only in train: "
                f"{sorted(train_labels - labels, key=str)}"
            )
    if len(train_labels) < 2:
        raise ValueError(f"--label_column {args.label_column!r} has one label in the {where('train')}: {train_labels}")
    return text_column, sorted(train_labels, key=str)


def classification_metrics(prediction: EvalPrediction) -> dict[str, float]:
    """Accuracy and macro-averaged F1 (the unweighted mean of each class's F1; scikit-learn) of argmax logits.

    `prediction.predictions`: logits (examples, num_labels); `prediction.label_ids`: (examples,) class ids.
    """
    from sklearn.metrics import accuracy_score, f1_score

    logits = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
    predicted = np.asarray(logits).argmax(axis=-1)
    labels = np.asarray(prediction.label_ids)
    return {"accuracy": float(accuracy_score(labels, predicted)), "f1": float(f1_score(labels, predicted, average="macro"))}


# ---------------------------------------------------------------------------------------------------------------
# Models, tokenizer, output folder
# ---------------------------------------------------------------------------------------------------------------
def check_checkpoint(name_or_path: str) -> None:
    """Raise `FileNotFoundError` if `name_or_path` looks like a local path but is not a checkpoint folder.

    Anything that is a folder must hold `config.json`; anything that is not a folder and is not a hub name
    (`name` or `org/name`) is a path that does not exist.
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"--model_name_or_path: {name_or_path!r} is a folder without config.json")
        return
    looks_like_hub_name = name_or_path.count("/") <= 1 and not name_or_path.startswith((".", "/", "~"))
    if not looks_like_hub_name or path.exists():
        raise FileNotFoundError(f"--model_name_or_path: checkpoint folder {name_or_path!r} does not exist")


def load_model(model_args: ModelArguments, model_class: type[PreTrainedModel], **kwargs) -> tuple[PreTrainedModel, dict]:
    """`(model, report)`: the checkpoint as `model_class`, turned into the variant `model_args` asks for.

    A variant is built by `hf_ffn.conversion.load_converted` (function-preserving GELU→GeGLU, approximate
    GELU→SwiGLU, or fresh weights at a kept / parameter-matched / given width); otherwise the checkpoint loads as
    saved. `kwargs` (e.g. `num_labels`, `id2label`) go to `from_pretrained`. `report` is a JSON-able dict.

    Raises:
        FileNotFoundError: if the checkpoint path does not exist (see `check_checkpoint`).
    """
    check_checkpoint(model_args.model_name_or_path)
    if not model_args.is_variant:
        model, info = model_class.from_pretrained(model_args.model_name_or_path, output_loading_info=True, **kwargs)
        return model, {"conversion": "none", "new_weights": sorted(info["missing_keys"])}
    model, report = load_converted(
        model_args.model_name_or_path,
        model_class,
        ffn_type=model_args.ffn_type,
        layer_norm_position=model_args.layer_norm_position,
        init=model_args.ffn_init,
        width=model_args.width,
        **kwargs,
    )
    return model, json.loads(report.to_json())


def load_tokenizer(model_args: ModelArguments) -> PreTrainedTokenizerBase:
    """The tokenizer named by `--tokenizer_name`, else the one saved with the checkpoint.

    Raises:
        FileNotFoundError: if the checkpoint folder holds no tokenizer and `--tokenizer_name` is not given.
    """
    name = model_args.tokenizer_name or model_args.model_name_or_path
    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as error:
        raise FileNotFoundError(
            f"no tokenizer found in {name!r} ({error}); pass --tokenizer_name with a BERT tokenizer folder"
        ) from error


def check_output_dir(output_dir: str) -> None:
    """Refuse an `output_dir` that already holds a finished model (a `config.json`).

    Raises:
        FileExistsError: naming the folder.
    """
    if (Path(output_dir) / "config.json").exists():
        raise FileExistsError(
            f"--output_dir {output_dir!r} already holds a finished model (config.json); choose another folder or "
            f"delete it"
        )


def save_finished(
    output_dir: str, save: Callable[[Path], None], main: bool = True, barrier: Callable[[], None] = lambda: None
) -> None:
    """Write the final output with `save(staging_folder)`, then move it into `output_dir`, `config.json` last.

    Each `os.replace` is atomic on one filesystem; `config.json` (which `from_pretrained` needs) arrives only after
    every other file, so an interrupted save never leaves a folder that loads as a model. The staging folder is
    removed if `save` fails. Multi-process: every process calls this (`save` may be collective, e.g. FSDP's state
    dict gather); only `main` prepares, moves and removes the staging folder, `barrier` orders the steps.
    """
    output = Path(output_dir)
    staging = output / STAGING_FOLDER
    if main:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    barrier()
    try:
        save(staging)
        barrier()
        if main:
            names = sorted(os.listdir(staging), key=lambda name: name == "config.json")  # config.json last
            for name in names:
                target = output / name
                if target.is_dir():
                    shutil.rmtree(target)
                os.replace(staging / name, target)
    finally:
        if main:
            shutil.rmtree(staging, ignore_errors=True)
    barrier()


def final_evaluation(trainer: Trainer) -> dict[str, float]:
    """The validation metrics of the trained model: those logged at the last step if `eval_strategy` already
    evaluated there (no second pass over the same data), else a new `trainer.evaluate()`."""
    evaluations = [entry for entry in trainer.state.log_history if "eval_loss" in entry]
    if evaluations and evaluations[-1]["step"] == trainer.state.global_step:
        return {key: value for key, value in evaluations[-1].items() if key.startswith("eval_")}
    return trainer.evaluate()


def sort_by_length(dataset):
    """`dataset` sorted by the length of `input_ids` (stable, so ties keep their order)."""
    lengths = [len(ids) for ids in dataset["input_ids"]]
    return dataset.select(np.argsort(lengths, kind="stable"))


def training_seconds(log_history: list[dict], train_runtime: float) -> float:
    """Seconds spent training: `train_runtime` minus the evaluations run inside `Trainer.train`."""
    return train_runtime - sum(entry.get("eval_runtime", 0.0) for entry in log_history)


def conversion_summary(conversion: dict) -> str:
    """One line for the model card: what loading the variant changed (the full report is in `run_info.json`)."""

    def listed(keys: list[str]) -> str:
        return f"{len(keys)} ({', '.join(keys)})" if 0 < len(keys) <= 6 else str(len(keys))

    if "config_changes" not in conversion:  # loaded as saved
        return f"loaded as saved; newly initialised: {listed(conversion.get('new_weights', []))}"
    changes = {k: v for k, v in conversion["config_changes"].items() if k not in ("id2label", "label2id")}
    return (
        f"init={conversion.get('init')}, exact={conversion.get('exact')}, config changes {json.dumps(changes)}; "
        f"tensors copied {len(conversion.get('copied', []))}, mapped {len(conversion.get('mapped', []))}, "
        f"newly initialised {listed(conversion.get('new', []))}, dropped {listed(conversion.get('dropped', []))}"
    )


def model_card(
    model_args: ModelArguments,
    training_args: TrainingArguments,
    task: str,
    dataset: str,
    results: dict[str, float],
    conversion: dict,
    metric_names: Sequence[str],
):
    """A `huggingface_hub.ModelCard` with the variant, the data, the hyperparameters and the measured results."""
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    name = Path(training_args.output_dir).name
    eval_results = [
        EvalResult(task_type=task, dataset_type=dataset, dataset_name=dataset, dataset_split=split,
                   metric_type=metric, metric_value=round(results[f"{split}_{metric}"], 4))
        for split in ("eval", "test")
        for metric in metric_names
        if f"{split}_{metric}" in results
    ]
    data = ModelCardData(
        library_name="transformers",
        tags=["hf_ffn", "ffn_bert", model_args.ffn_type or "checkpoint-ffn", task],
        model_name=name,
        eval_results=eval_results or None,
    )
    hyper = {
        key: getattr(training_args, key)
        for key in ("learning_rate", "num_train_epochs", "max_steps", "per_device_train_batch_size", "seed",
                    "weight_decay", "warmup_steps", "lr_scheduler_type")
    }
    rows = "\n".join(f"| {key} | {value:.4f} |" if isinstance(value, float) else f"| {key} | {value} |"
                     for key, value in sorted(results.items()))
    template = """---
{{ card_data }}
---

# {{ name }}

Fine-tuned with hf_ffn (`{{ task }}`) from `{{ base }}` on {{ dataset }}.

## Variant

- ffn_type: `{{ ffn_type }}`; layer_norm_position: `{{ ln }}`; FFN init: `{{ init }}`; FFN width: `{{ width }}`
- conversion: {{ conversion }} (full report: `run_info.json`)

## Results (measured by the training script)

| metric | value |
|---|---|
{{ rows }}

## Training hyperparameters

`{{ hyper }}`
"""
    return ModelCard.from_template(
        data, template_str=template, name=name, task=task, base=model_args.model_name_or_path, dataset=dataset,
        ffn_type=model_args.ffn_type or "(checkpoint's)", ln=model_args.layer_norm_position or "(checkpoint's)",
        init=model_args.ffn_init, width=model_args.ffn_width, conversion=conversion_summary(conversion),
        rows=rows, hyper=json.dumps(hyper),
    )


def _save_outputs(trainer: Trainer, tokenizer, card, results: dict, extra: dict, output_dir: str) -> None:
    main = trainer.is_world_process_zero()

    def save(folder: Path) -> None:
        trainer.save_model(str(folder))  # every process (collective under FSDP / ZeRO-3); writes on process 0
        if not main:
            return
        tokenizer.save_pretrained(folder)
        card.save(folder / "README.md")
        (folder / "all_results.json").write_text(json.dumps(results, indent=2) + "\n")
        (folder / "run_info.json").write_text(json.dumps(extra, indent=2, default=str) + "\n")

    save_finished(output_dir, save, main=main, barrier=trainer.accelerator.wait_for_everyone)


# ---------------------------------------------------------------------------------------------------------------
# Classification
# ---------------------------------------------------------------------------------------------------------------
def run_classification(
    model_args: ModelArguments, data_args: ClassificationDataArguments, training_args: TrainingArguments
) -> dict[str, Any]:
    """Fine-tune `FfnBertForSequenceClassification` with `Trainer`; evaluate on validation and test; save.

    Order: every input check (data files, columns, labels, checkpoint, output folder), then loading, training,
    evaluation, and last the finished save (see the module docstring). Returns a dict with `results` (eval_* and
    test_* accuracy/F1/loss, train metrics), `log_history` (Trainer's, for eval curves), `train_tokens`
    (non-padding training tokens seen), `train_seconds` (training time without in-training evaluation),
    `wall_seconds` and `conversion` (what the variant load changed).

    Raises:
        FileNotFoundError, FileExistsError, ValueError: on bad input, before training starts.
    """
    start = time.perf_counter()
    check_output_dir(training_args.output_dir)
    raw = load_classification_datasets(data_args)
    text_column, labels = check_columns_and_labels(raw, data_args)
    check_checkpoint(model_args.model_name_or_path)
    tokenizer = load_tokenizer(model_args)

    label2id = {label: i for i, label in enumerate(labels)}

    def encode(batch: dict) -> dict:
        encoded = tokenizer(batch[text_column], truncation=True, max_length=data_args.max_seq_length)
        if data_args.label_column in batch:
            encoded["labels"] = [label2id[label] for label in batch[data_args.label_column]]
        return encoded

    splits = {}
    for split, limit in (("train", data_args.max_train_samples), ("validation", data_args.max_eval_samples),
                         ("test", data_args.max_test_samples)):
        if split in raw:
            dataset = raw[split] if limit is None else raw[split].select(range(min(limit, len(raw[split]))))
            splits[split] = dataset.map(encode, batched=True, remove_columns=dataset.column_names)
    for split in ("validation", "test"):
        # shortest first: less padding per batch; accuracy and F1 do not depend on the order. An unlabelled test
        # split keeps its order, so its predictions line up with the file.
        if split in splits and "labels" in splits[split].column_names:
            splits[split] = sort_by_length(splits[split])

    # Seed before the model is built: the new weights (classifier, fresh FFNs) depend on it, as in run_glue.
    torch.manual_seed(training_args.seed)
    model, conversion = load_model(
        model_args, FfnBertForSequenceClassification, num_labels=len(labels),
        id2label={i: str(label) for i, label in enumerate(labels)},
        label2id={str(label): i for i, label in enumerate(labels)},
    )
    # Count the non-padding tokens trained on (for tokens/s); the attribute is read when `train` starts.
    training_args.include_num_input_tokens_seen = "non_padding"
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=splits["train"],
        eval_dataset=splits["validation"],
        processing_class=tokenizer,  # also gives DataCollatorWithPadding (dynamic padding)
        compute_metrics=classification_metrics,
    )
    train_output = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    results = dict(train_output.metrics)
    results.update(final_evaluation(trainer))
    predictions = None
    if "test" in splits:
        test_output = trainer.predict(splits["test"], metric_key_prefix="test")
        results.update(test_output.metrics)  # accuracy/F1 only when the test split has labels
        if "labels" not in splits["test"].column_names:
            predictions = [str(labels[i]) for i in test_output.predictions.argmax(-1)]
    train_seconds = training_seconds(trainer.state.log_history, train_output.metrics["train_runtime"])
    extra = {
        "conversion": conversion,
        "labels": [str(label) for label in labels],
        "train_tokens": trainer.state.num_input_tokens_seen,
        "train_seconds": train_seconds,
        "test_predictions": predictions,
    }
    results["train_tokens_per_second"] = extra["train_tokens"] / train_seconds
    dataset_name = data_args.dataset_name or (
        f"rt_polarity (split {data_args.rt_polarity_split}, seed {data_args.split_seed})"
        if data_args.rt_polarity_dir else Path(data_args.train_file).name
    )
    card = model_card(model_args, training_args, "text-classification", dataset_name, results, conversion,
                      ("accuracy", "f1"))
    _save_outputs(trainer, tokenizer, card, results, extra, training_args.output_dir)
    return {
        "results": results,
        "log_history": trainer.state.log_history,
        "wall_seconds": time.perf_counter() - start,
        **extra,
    }


# ---------------------------------------------------------------------------------------------------------------
# Masked language modelling
# ---------------------------------------------------------------------------------------------------------------
def read_text_documents(paths: Sequence[str]) -> list[tuple[str, str]]:
    """`(file name, text)` for each file in `paths`, folders expanded to their sorted `*.txt` files.

    Files are decoded as UTF-8, or as Latin-1 when that fails (a few State of the Union files are Latin-1;
    Latin-1 maps every byte, so nothing is replaced or dropped).

    Raises:
        FileNotFoundError: if a path does not exist or a folder holds no `*.txt` file.
        ValueError: if a file is empty (or whitespace only).
    """
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(path.glob("*.txt"))
            if not found:
                raise FileNotFoundError(f"--train_files: folder {str(path)!r} holds no *.txt files")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"--train_files: {str(path)!r} does not exist")
    documents = []
    for file in files:
        data = file.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("latin-1")
        if not text.strip():
            raise ValueError(f"--train_files: text file {str(file)!r} is empty")
        documents.append((file.name, text))
    return documents


class FixedOrRandomMaskCollator:
    """Masks training batches afresh each time (BERT's dynamic masking, `DataCollatorForLanguageModeling`) but
    passes batches that already carry `labels` through unchanged: the evaluation set is masked once, with a seed,
    so perplexity before and after training is measured on the same masked tokens."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, mlm_probability: float):
        self.mlm = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability)

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        if "labels" in features[0]:
            return default_data_collator(features)
        return self.mlm(features)


def mlm_blocks(documents: list[str], tokenizer: PreTrainedTokenizerBase, block_size: int):
    """A `Dataset` of `block_size`-token blocks: the documents tokenized ([CLS] text [SEP] each), concatenated
    and cut (`run_mlm.py`'s `group_texts`; the remainder shorter than a block is dropped)."""
    from datasets import Dataset

    ids: list[int] = []
    special: list[int] = []
    for text in documents:
        encoded = tokenizer(text, return_special_tokens_mask=True, verbose=False)
        ids += encoded["input_ids"]
        special += encoded["special_tokens_mask"]
    count = len(ids) // block_size
    cut = lambda values: [values[i * block_size:(i + 1) * block_size] for i in range(count)]  # noqa: E731
    return Dataset.from_dict({"input_ids": cut(ids), "special_tokens_mask": cut(special)})


def run_mlm(model_args: ModelArguments, data_args: MlmDataArguments, training_args: TrainingArguments) -> dict:
    """Masked-language-model training of `FfnBertForMaskedLM` on plain text; perplexity before and after.

    Whole documents are held out for validation (seeded). Perplexity = exp(mean masked-token cross-entropy) on
    the validation blocks masked once with `split_seed` (15% of tokens, BERT's 80/10/10 rule), so the two
    numbers are comparable. A checkpoint without an MLM head (e.g. a sentence-embedding BERT) gets a newly
    initialised head, listed in the returned `conversion["new_weights"]`, and a very high perplexity before.

    Raises:
        FileNotFoundError, FileExistsError, ValueError: on bad input, before training starts.
    """
    from datasets import Dataset

    start = time.perf_counter()
    check_output_dir(training_args.output_dir)
    documents = read_text_documents(data_args.train_files)
    if len(documents) < 2:
        raise ValueError("--train_files: need at least two documents (whole documents are held out for validation)")
    check_checkpoint(model_args.model_name_or_path)
    tokenizer = load_tokenizer(model_args)

    order = np.random.default_rng(data_args.split_seed).permutation(len(documents))
    held_out = max(1, round(len(documents) * data_args.validation_split_percentage / 100))
    eval_docs = [documents[i][1] for i in order[:held_out]]
    train_docs = [documents[i][1] for i in order[held_out:]]
    train = mlm_blocks(train_docs, tokenizer, data_args.max_seq_length)
    evaluation = mlm_blocks(eval_docs, tokenizer, data_args.max_seq_length)
    if len(train) == 0 or len(evaluation) == 0:
        raise ValueError(f"--max_seq_length {data_args.max_seq_length}: the text is shorter than one block")
    if data_args.max_train_samples:
        train = train.select(range(min(data_args.max_train_samples, len(train))))
    if data_args.max_eval_samples:
        evaluation = evaluation.select(range(min(data_args.max_eval_samples, len(evaluation))))
    fixed = DataCollatorForLanguageModeling(tokenizer, mlm_probability=data_args.mlm_probability,
                                            seed=data_args.split_seed)
    masked = fixed([{"input_ids": ids, "special_tokens_mask": special}
                    for ids, special in zip(evaluation["input_ids"], evaluation["special_tokens_mask"])])
    evaluation = Dataset.from_dict({key: masked[key].tolist() for key in ("input_ids", "labels")})

    torch.manual_seed(training_args.seed)
    model, conversion = load_model(model_args, FfnBertForMaskedLM)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train,
        eval_dataset=evaluation,
        processing_class=tokenizer,
        data_collator=FixedOrRandomMaskCollator(tokenizer, data_args.mlm_probability),
    )
    before = trainer.evaluate(metric_key_prefix="before")
    train_output = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    after = trainer.evaluate()
    results = dict(train_output.metrics)
    results.update(before)
    results.update(after)
    results["before_perplexity"] = math.exp(before["before_loss"])
    results["eval_perplexity"] = math.exp(after["eval_loss"])
    train_seconds = training_seconds(trainer.state.log_history, train_output.metrics["train_runtime"])
    extra = {
        "conversion": conversion,
        "documents": {"train": len(train_docs), "validation": len(eval_docs)},
        "blocks": {"train": len(train), "validation": len(evaluation)},
        "train_seconds": train_seconds,
    }
    card = model_card(model_args, training_args, "fill-mask", ", ".join(data_args.train_files), results,
                      conversion, ("perplexity",))
    _save_outputs(trainer, tokenizer, card, results, extra, training_args.output_dir)
    return {"results": results, "log_history": trainer.state.log_history,
            "wall_seconds": time.perf_counter() - start, **extra}


__all__ = [
    "ClassificationDataArguments",
    "FixedOrRandomMaskCollator",
    "MlmDataArguments",
    "ModelArguments",
    "check_checkpoint",
    "check_columns_and_labels",
    "check_data_file",
    "check_output_dir",
    "classification_metrics",
    "load_classification_datasets",
    "load_model",
    "load_rt_polarity",
    "read_text_documents",
    "run_classification",
    "run_mlm",
    "save_finished",
]
