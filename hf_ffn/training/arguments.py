"""The command-line arguments of the fine-tuning scripts, as dataclasses for `HfArgumentParser` (parsed together
with transformers' `TrainingArguments`, the pattern of `run_glue.py` / `run_mlm.py`).

Each dataclass checks its values in `__post_init__`: a bad value raises `ValueError` naming the flag, the value and
what is allowed, before anything is loaded.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from ..configuration_ffn_bert import FFN_TYPES, LAYER_NORM_POSITIONS
from ..conversion.recipes import INITS, parse_width

# `load_converted`'s keywords → the options of `ModelArguments` that set them (errors name the option).
CONVERSION_OPTIONS = {
    "ffn_type": "--ffn_type",
    "layer_norm_position": "--layer_norm_position",
    "init": "--ffn_init",
    "width": "--ffn_width",
}
# The `--ffn_init` values a training run takes: "pruned" needs calibration text, which only `hf-ffn convert` reads.
TRAINING_INITS = tuple(init for init in INITS if init != "pruned")
PRUNED_ELSEWHERE = "pruned is made by `hf-ffn convert --init pruned` (with calibration text): fine-tune its folder"
# The names of `hf_ffn.training.tasks.TASKS` (which imports this module), for --task's help.
TASK_NAMES = ("cola", "stsb", "mrpc", "rt_polarity")
DEFAULT_SPLIT = "0.8,0.1,0.1"  # train / validation / test fractions of a --label_dir folder


@dataclass
class ModelArguments:
    """Which checkpoint to start from, which FFN variant / LayerNorm placement to turn it into, and whether the run
    executes unpadded (`unpad_tokens`, on by default: an execution switch, not part of the variant)."""

    model_name_or_path: str = field(
        metadata={"help": "The BERT or FfnBert checkpoint to start from: a local folder or a hub name."}
    )
    ffn_type: str | None = field(
        default=None,
        metadata={
            "help": "The FFN variant to convert to, e.g. gelu (BERT), geglu or swiglu. Default: the checkpoint's."
        },
    )
    layer_norm_position: str | None = field(
        default=None,
        metadata={"help": "The LayerNorm placement: post (BERT) or pre (Pre-LN). Default: the checkpoint's."},
    )
    ffn_init: str = field(
        default="preserving",
        metadata={
            "help": "How a BERT FFN becomes a gated one: 'preserving' (copy BERT's weights so the FFN "
            "computes the same or nearly the same function) or 'fresh' (new random FFN weights). A pruned "
            "conversion is made by `hf-ffn convert --init pruned`; fine-tune its folder."
        },
    )
    ffn_width: str = field(
        default="keep",
        metadata={
            "help": "The gated FFN's width: 'keep' (the checkpoint's intermediate_size), 'matched' (2/3 of it, "
            "rounded up to 256: the same FFN weight count) or an integer."
        },
    )
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "The tokenizer folder or name. Default: the one saved with the checkpoint."}
    )
    unpad_tokens: bool = field(
        default=True,
        metadata={
            "help": "Unpadded execution during the run (FfnBertConfig.unpad_tokens): every token-wise part "
            "runs on the real tokens only. The losses ignore pad positions, so they are the same as "
            "with it off (to fp32 rounding of the weight gradients; with dropout, other random "
            "draws of the same masks). Turn off with --no_unpad_tokens (or --unpad_tokens false). "
            "The saved model keeps the checkpoint's value."
        },
    )
    padding_free: bool = field(
        default=False,
        metadata={
            "help": "Padding-free batches (transformers' DataCollatorWithFlattening): each batch's sequences "
            "concatenated into one row, position_ids restarting at 0 for each, no padding; FfnBert "
            "computes each sequence as if alone and its pooler gives one output per sequence, so "
            "sequence classification works too (docs/unpadded.md)."
        },
    )

    def __post_init__(self) -> None:
        checks = (
            ("ffn_type", self.ffn_type, FFN_TYPES),
            ("layer_norm_position", self.layer_norm_position, LAYER_NORM_POSITIONS),
        )
        for name, value, allowed in checks:
            if value is not None and value not in allowed:
                raise ValueError(f"--{name} has unknown value {value!r}; allowed: {', '.join(allowed)}")
        check_training_init(self.ffn_init)
        parse_width(self.ffn_width, "--ffn_width")

    @property
    def width(self) -> str | int:
        """`ffn_width` as `load_converted` takes it: "keep", "matched" or an int."""
        return parse_width(self.ffn_width, "--ffn_width")

    @property
    def is_variant(self) -> bool:
        """Whether the checkpoint is to be changed at all (else it loads as saved)."""
        return (
            self.ffn_type is not None
            or self.layer_norm_position is not None
            or self.width != "keep"
            or self.ffn_init != "preserving"
        )


def check_training_init(value: str) -> None:
    """Refuse an `--ffn_init` a training run cannot make: `ValueError` listing `TRAINING_INITS` and saying where a
    pruned conversion is made."""
    if value not in TRAINING_INITS:
        raise ValueError(
            f"--ffn_init has unknown value {value!r}; allowed: {', '.join(TRAINING_INITS)} ({PRUNED_ELSEWHERE})"
        )


def check_task_columns(args: ClassificationDataArguments) -> None:
    """`--task` reads its own columns: refuse column flags it would ignore (`ValueError` naming them)."""
    columns = {"text_column": None, "text_pair_column": None, "label_column": "label"}  # the defaults
    changed = [
        f"--{name} {getattr(args, name)!r}" for name, default in columns.items() if getattr(args, name) != default
    ]
    if args.task is not None and changed:
        raise ValueError(
            f"--task {args.task} reads its own columns; drop {', '.join(changed)} (column flags apply "
            f"to --train_file and --dataset_name data)"
        )


@dataclass
class ClassificationDataArguments:
    """Where the labelled text comes from: one of the named tasks (`--task` with `--data_dir`, see
    `hf_ffn.training.tasks`), local csv/tsv/json/jsonl files, a folder with one text file per label (`--label_dir`,
    split by `--split_sizes` and `--split_seed`), or a `datasets` dataset.
    A second text column (`--text_pair_column`) makes the inputs BERT sentence pairs; real-number labels make the
    run a regression (`num_labels=1`, MSE), as in transformers' `run_glue.py`."""

    task: str | None = field(
        default=None,
        metadata={
            "help": f"A named task: {', '.join(TASK_NAMES)}. It is read from --data_dir with its own columns, "
            "splits and metric, and trained with its recipe (BERT's GLUE recipe) for every training option "
            "not given (hf_ffn.training.tasks.TASKS)."
        },
    )
    data_dir: str | None = field(
        default=None, metadata={"help": "The folder holding --task's files (e.g. data/mrpc for --task mrpc)."}
    )
    train_file: str | None = field(
        default=None, metadata={"help": "A csv, tsv, json or jsonl file with the training data."}
    )
    validation_file: str | None = field(
        default=None, metadata={"help": "The validation file, in the same format (required with --train_file)."}
    )
    test_file: str | None = field(
        default=None, metadata={"help": "The test file, in the same format; labels are optional."}
    )
    dataset_name: str | None = field(default=None, metadata={"help": "A dataset on the hub (needs hub access)."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "The hub dataset's configuration."})
    label_dir: str | None = field(
        default=None,
        metadata={
            "help": "A folder with one text file per label, one example per line (pos.txt, neg.txt: the label "
            "is the file's stem, or its extension when all files share a stem); split seeded into "
            "train, validation and test by --split_sizes."
        },
    )
    split_sizes: str = field(
        default=DEFAULT_SPLIT,
        metadata={
            "help": "The train,validation,test sizes of --label_dir's split: three row counts or three fractions."
        },
    )
    split_seed: int = field(
        default=42,
        metadata={"help": "The seed of the --label_dir split (fixed: the same split for every run on the same files)."},
    )
    text_column: str | None = field(default=None, metadata={"help": "The text column. Default: 'text' or 'sentence'."})
    text_pair_column: str | None = field(
        default=None,
        metadata={"help": "A second text column: the inputs become BERT pairs ([SEP] between, token_type_ids)."},
    )
    label_column: str = field(default="label", metadata={"help": "The label column."})
    max_seq_length: int = field(
        default=128, metadata={"help": "Inputs are truncated to this many tokens ([CLS] and [SEP] included)."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N validation rows."})
    max_test_samples: int | None = field(default=None, metadata={"help": "Use only the first N test rows."})

    def __post_init__(self) -> None:
        sources = [
            name for name in ("task", "train_file", "dataset_name", "label_dir") if getattr(self, name) is not None
        ]
        if len(sources) != 1:
            raise ValueError(
                f"give exactly one data source: --task (with --data_dir), --train_file (with --validation_file), "
                f"--label_dir or --dataset_name; got {sources or 'none'}"
            )
        if (self.task is None) != (self.data_dir is None):
            raise ValueError(
                f"--task and --data_dir go together; got --task {self.task!r}, --data_dir {self.data_dir!r}"
            )
        if self.train_file is not None and self.validation_file is None:
            raise ValueError("--validation_file is required with --train_file (the label set is checked against it)")
        if self.max_seq_length <= 2:
            raise ValueError(f"--max_seq_length must be > 2 ([CLS] and [SEP] take two), got {self.max_seq_length}")


@dataclass
class MlmDataArguments:
    """Text files or folders for masked-language-model training (`PretrainingDataArguments` adds the rest of the
    data path's options: formats, document boundaries, a validation file, masking, the cache)."""

    train_files: list[str] = field(
        metadata={
            "help": "text files (plain, or .xz/.gz/.bz2/.zst-compressed), json or parquet files, or folders of "
            "them (the files matching --file_pattern)"
        }
    )
    validation_split_percentage: int = field(
        default=10, metadata={"help": "percentage of the documents held out (whole documents, seeded)"}
    )
    split_seed: int = field(default=42, metadata={"help": "seed of the document split and of the fixed eval maskings"})
    max_seq_length: int = field(default=128, metadata={"help": "tokens per training block"})
    mlm_probability: float = field(default=0.15, metadata={"help": "fraction of tokens masked (BERT: 0.15)"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use only the first N training blocks"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "use only the first N validation blocks"})

    def __post_init__(self) -> None:
        if not 0 < self.validation_split_percentage < 100:
            raise ValueError(f"--validation_split_percentage must be in 1..99, got {self.validation_split_percentage}")
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"--mlm_probability must be in (0, 1), got {self.mlm_probability}")
        if self.max_seq_length <= 2:
            raise ValueError(f"--max_seq_length must be > 2, got {self.max_seq_length}")


# Options of earlier releases → what replaces them: the one table both `hf-ffn finetune` and `hf-ffn heal` check
# (`parse_arguments`), so an old command line fails naming the new spelling instead of "arguments are not used".
RENAMED_OPTIONS = {
    "--rt_polarity_dir": "use --task rt_polarity --data_dir DIR (the same split) or --label_dir DIR",
    "--rt_polarity_split": "use --split_sizes (with --label_dir)",
    "--eval_dir": "--eval_data",
}


def check_renamed_options(parser: HfArgumentParser, names: Sequence[str]) -> None:
    """Refuse an option of `RENAMED_OPTIONS` that `parser` does not define, naming its replacement.

    Args:
        parser: the command's parser (an option it still defines is left to it).
        names: the options given: command-line tokens (`--name` or `--name=value`; `-` and `_` alike) or the keys
            of a .json file of arguments.

    Raises:
        ValueError: "--rt_polarity_dir was renamed: use --task rt_polarity --data_dir DIR ...".
    """
    for name in names:
        option = "--" + name.split("=", 1)[0].lstrip("-").replace("-", "_")
        if option in RENAMED_OPTIONS and option not in parser._option_string_actions:
            raise ValueError(f"{option} was renamed: {RENAMED_OPTIONS[option]}")


def parse_arguments(parser: HfArgumentParser, argv: Sequence[str]) -> tuple:
    """`parser`'s dataclasses from `argv`, or from one `.json` file of arguments when `argv` is just its path (the
    convention of transformers' example scripts: `parse_json_file`, else `parse_args_into_dataclasses`).

    Raises:
        ValueError: an option of an earlier release (`RENAMED_OPTIONS`), naming what replaces it; the dataclasses'
            own checks (`__post_init__`).
    """
    if len(argv) == 1 and argv[0].endswith(".json"):
        check_renamed_options(parser, list(json.loads(Path(argv[0]).read_text())))
        return parser.parse_json_file(argv[0])
    check_renamed_options(parser, [arg for arg in argv if arg.startswith("--")])
    return parser.parse_args_into_dataclasses(args=list(argv))


EXIT_BAD_INPUT = 2  # argparse's status for a bad command line, and `hf-ffn`'s for bad input


@contextlib.contextmanager
def bad_input_exits(prog: str) -> Iterator[None]:
    """Run a script's `main` so that bad input (`ValueError` or `OSError` from inside: a missing column, file or
    folder, a bad flag value; their messages name the flag and the value) ends in one line, `prog: error: message`
    on stderr, and exit status `EXIT_BAD_INPUT`, as argparse ends a bad command line, instead of a traceback."""
    try:
        yield
    except (ValueError, OSError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None


# `--resume_from_checkpoint` values that mean "the newest checkpoint-N folder in --output_dir".
RESUME_LAST = ("last", "true")


def resume_checkpoint(training_args: TrainingArguments) -> str | None:
    """What to pass as `Trainer.train(resume_from_checkpoint=...)` for `--resume_from_checkpoint`: None (start
    afresh), a checkpoint path as given, or for "last" (or "true", any case) the newest `checkpoint-N` folder in
    `--output_dir` (`transformers.trainer_utils.get_last_checkpoint`). Trainer alone would read "last" as a path.
    Call it before any work: the fine-tuning scripts and `hf-ffn heal` all do.

    Raises:
        ValueError: "last" when `--output_dir` holds no `checkpoint-N` folder, naming the flag and the folder.
    """
    value, output_dir = training_args.resume_from_checkpoint, training_args.output_dir
    if value is None or value.lower() not in RESUME_LAST:
        return value
    last = get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None
    if last is None:
        raise ValueError(f"--resume_from_checkpoint {value}: no checkpoint-N folder in --output_dir {output_dir!r}")
    return last


__all__ = [
    "CONVERSION_OPTIONS",
    "DEFAULT_SPLIT",
    "EXIT_BAD_INPUT",
    "RENAMED_OPTIONS",
    "RESUME_LAST",
    "TASK_NAMES",
    "TRAINING_INITS",
    "ClassificationDataArguments",
    "MlmDataArguments",
    "ModelArguments",
    "bad_input_exits",
    "check_renamed_options",
    "check_training_init",
    "parse_arguments",
    "resume_checkpoint",
]
