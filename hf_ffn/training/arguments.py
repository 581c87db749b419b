"""What the training commands' arguments share: `ModelArguments` (an `HfArgumentParser` dataclass, parsed with
`TrainingArguments` as in `run_glue.py` / `run_mlm.py`), the numeric options' checks, parsing with one-line errors,
the default output folder and `--resume_from_checkpoint`. A bad value raises `ValueError` naming the flag, the value
and what is allowed, before anything is loaded.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import itertools
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from transformers import HfArgumentParser, TrainerState, TrainingArguments
from transformers.trainer import TRAINER_STATE_NAME

from ..configuration_ffn_bert import FFN_TYPES, LAYER_NORM_POSITIONS
from ..conversion.recipes import INITS, parse_width
from ..files import last_complete_checkpoint

DEFAULT_MAX_SEQ_LENGTH = 128  # tokens per fine-tuning input (run_glue.py's default), capped by the checkpoint

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


def option(default: Any, help: str, **metadata: Any) -> Any:
    """A dataclass field for `HfArgumentParser`: its default and its `--help` text (and e.g. `choices`)."""
    return field(default=default, metadata={"help": help, **metadata})


@dataclass
class ModelArguments:
    """Which checkpoint to start from, which FFN variant / LayerNorm placement to turn it into, and whether the run
    executes unpadded (`unpad_tokens`, on by default: an execution switch, not part of the variant)."""

    model_name_or_path: str = field(
        metadata={"help": "The BERT or FfnBert checkpoint to start from: a local folder or a hub name."}
    )
    ffn_type: str | None = option(
        None, "The FFN variant to convert to, e.g. gelu (BERT), geglu or swiglu. Default: the checkpoint's."
    )
    layer_norm_position: str | None = option(
        None, "The LayerNorm placement: post (BERT) or pre (Pre-LN). Default: the checkpoint's."
    )
    ffn_init: str = option(
        "preserving",
        "How a BERT FFN becomes a gated one: 'preserving' (copy BERT's weights so the FFN computes the same or nearly "
        "the same function) or 'fresh' (new random FFN weights). A pruned conversion is made by `hf-ffn convert "
        "--init pruned`; fine-tune its folder.",
    )
    ffn_width: str = option(
        "keep",
        "The gated FFN's width: 'keep' (the checkpoint's intermediate_size), 'matched' (2/3 of it, rounded up to 256: "
        "the same FFN weight count) or an integer.",
    )
    tokenizer_name: str | None = option(
        None, "The tokenizer folder or name. Default: the one saved with the checkpoint."
    )
    unpad_tokens: bool = option(
        True,
        "Unpadded execution during the run (FfnBertConfig.unpad_tokens): every token-wise part runs on the real "
        "tokens only. The losses ignore pad positions, so they are the same as with it off (to fp32 rounding of the "
        "weight gradients; with dropout, other random draws of the same masks). Turn off with --no_unpad_tokens (or "
        "--unpad_tokens false). The saved model keeps the checkpoint's value.",
    )
    padding_free: bool = option(
        False,
        "Padding-free batches (transformers' DataCollatorWithFlattening): each batch's sequences concatenated into "
        "one row, position_ids restarting at 0 for each, no padding; FfnBert computes each sequence as if alone and "
        "its pooler gives one output per sequence, so sequence classification works too (docs/unpadded.md).",
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


def check_choices(arguments: Any) -> None:
    """Refuse a field of the dataclass `arguments` outside its `choices` metadata (what argparse checks on a command
    line, for arguments built in Python); None passes.

    Raises:
        ValueError: "--NAME has unknown value 'x'; allowed: a, b".
    """
    for spec in dataclasses.fields(arguments):
        value, allowed = getattr(arguments, spec.name), spec.metadata.get("choices")
        if allowed and value is not None and value not in allowed:
            raise ValueError(f"--{spec.name} has unknown value {value!r}; allowed: {', '.join(allowed)}")


def check_training_init(value: str) -> None:
    """Refuse an `--ffn_init` a training run cannot make (`ValueError` listing `TRAINING_INITS`)."""
    if value not in TRAINING_INITS:
        raise ValueError(
            f"--ffn_init has unknown value {value!r}; allowed: {', '.join(TRAINING_INITS)} ({PRUNED_ELSEWHERE})"
        )


@dataclass(frozen=True)
class Allowed:
    """The values a numeric option accepts: `minimum` ≤ value ≤ `maximum` (an end excluded where `above` / `below`;
    None: no bound), a whole number where `integer`, or one of `unset` ("not set"). `str()` says it in words."""

    minimum: float | None = None
    maximum: float | None = None
    above: bool = False
    below: bool = False
    integer: bool = False
    unset: tuple = (None,)
    note: str = ""

    def admits(self, value: Any) -> bool:
        if value in self.unset and not isinstance(value, bool):
            return True
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:  # nan
            return False
        if self.integer and float(value) != int(value):
            return False
        low = self.minimum is None or (value > self.minimum if self.above else value >= self.minimum)
        high = self.maximum is None or (value < self.maximum if self.below else value <= self.maximum)
        return low and high

    def __str__(self) -> str:
        kind = "an integer" if self.integer else "a number"
        bounds = []
        if self.minimum is not None:
            bounds.append(f"{'>' if self.above else '>='} {_number(self.minimum)}")
        if self.maximum is not None:
            bounds.append(f"{'<' if self.below else '<='} {_number(self.maximum)}")
        text = f"{kind} {' and '.join(bounds)}" if bounds else kind
        return text + (f" {self.note}" if self.note else "")


def _number(value: float) -> str:
    """A bound as written: 4294967295, not 4.29497e+09."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


POSITIVE = Allowed(minimum=0, above=True)
AT_LEAST_ONE = Allowed(minimum=1, integer=True)
SEED = Allowed(minimum=0, maximum=2**32 - 1, integer=True)  # numpy's seed range (transformers.set_seed seeds it)
# The numeric options of a training run → what each accepts (`check_numeric_options`), before any data is read; what
# `TrainingArguments` refuses itself is left to it (warmup_steps < 0, logging_steps 0).
NUMERIC_OPTIONS: dict[str, Allowed] = {
    "max_seq_length": Allowed(minimum=3, integer=True, note="([CLS] and [SEP] take two)"),
    "max_train_samples": AT_LEAST_ONE,
    "max_eval_samples": AT_LEAST_ONE,
    "max_test_samples": AT_LEAST_ONE,
    "split_seed": SEED,
    "max_steps": Allowed(
        minimum=1, integer=True, unset=(-1,), note="or -1 (Trainer's unset: --num_train_epochs decides)"
    ),
    "num_train_epochs": POSITIVE,
    "learning_rate": POSITIVE,
    "per_device_train_batch_size": AT_LEAST_ONE,
    "per_device_eval_batch_size": AT_LEAST_ONE,
    "gradient_accumulation_steps": AT_LEAST_ONE,
    "eval_accumulation_steps": AT_LEAST_ONE,
    "weight_decay": Allowed(minimum=0),
    "max_grad_norm": Allowed(minimum=0, note="(0 turns clipping off)"),
    "adam_beta1": Allowed(minimum=0, maximum=1, below=True),
    "adam_beta2": Allowed(minimum=0, maximum=1, below=True),
    "adam_epsilon": POSITIVE,
    "label_smoothing_factor": Allowed(minimum=0, maximum=1, below=True),
    "logging_steps": POSITIVE,
    "eval_steps": POSITIVE,
    "save_steps": POSITIVE,
    "seed": SEED,
    "dataloader_num_workers": Allowed(minimum=0, integer=True),
}


def check_numeric_options(*arguments: Any, max_positions: int | None = None) -> None:
    """Refuse a numeric option of any of `arguments` (dataclasses) outside what `NUMERIC_OPTIONS` allows;
    `max_positions`: the most tokens a sequence of the checkpoint holds (`checkpoint_max_positions`), the most
    `--max_seq_length` may ask for.

    Raises:
        ValueError: "--max_steps has value 0; allowed: an integer >= 1 or -1 (...)".
    """
    for args in arguments:
        for name, allowed in NUMERIC_OPTIONS.items():
            if not hasattr(args, name):
                continue
            value = getattr(args, name)
            if name == "max_seq_length" and max_positions is not None:
                allowed = dataclasses.replace(
                    allowed,
                    maximum=max_positions,
                    note="([CLS] and [SEP] take two; the checkpoint's max_position_embeddings)",
                )
            if not allowed.admits(value):
                raise ValueError(f"--{name} has value {value!r}; allowed: {allowed}")


def resolve_max_seq_length(value: int | None, max_positions: int | None) -> int:
    """`--max_seq_length` as given, else `DEFAULT_MAX_SEQ_LENGTH` capped at the checkpoint's `max_positions`."""
    if value is not None:
        return value
    return DEFAULT_MAX_SEQ_LENGTH if max_positions is None else min(DEFAULT_MAX_SEQ_LENGTH, max_positions)


# A value the type of its option refuses, in words (argparse's own: "argument --max_steps: invalid int value: 'x'").
_TYPE_WORDS = {int: "an integer", float: "a number"}


def one_line_error(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    """`parser.error` without the ~130 lines of usage: `prog: error: message` on stderr, exit status 2."""
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_BAD_INPUT)


def _typed(kind: type, option: str):
    """`kind` as the type of `option`, refusing a value with the whole message (an `ArgumentError` of no argument)."""

    def parse(text: str):
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentError(None, f"{option} has value {text!r}; expected {_TYPE_WORDS[kind]}") from None

    return parse


def parse_arguments(parser: HfArgumentParser, argv: Sequence[str], defaults: dict | None = None) -> tuple:
    """`parser`'s dataclasses from `argv`, or from one `.json` file of arguments when `argv` is just its path (as
    transformers' example scripts), over `defaults` (option → value, e.g. a recipe's). A command line argparse refuses
    ends in one line naming the option and the value (`one_line_error`).

    Raises:
        ValueError: the dataclasses' own checks (`__post_init__`).
    """
    parser.error = functools.partial(one_line_error, parser)  # what argparse reports itself: a missing option
    parser.exit_on_error = False  # the rest it raises, as `ArgumentError`
    for action in parser._actions:
        if action.type in _TYPE_WORDS:
            action.type = _typed(action.type, action.option_strings[0])
    defaults = dict(defaults or {})
    if len(argv) == 1 and argv[0].endswith(".json"):
        return parser.parse_dict({**defaults, **json.loads(Path(argv[0]).read_text())})
    parser.set_defaults(**defaults)
    try:
        return parser.parse_args_into_dataclasses(args=list(argv))
    except argparse.ArgumentError as error:  # named by its first spelling: --max_steps, not --max_steps/--max-steps
        option = error.argument_name and error.argument_name.split("/")[0]
        one_line_error(parser, f"{option}: {error.message}" if option else error.message)


def given_options(parser: HfArgumentParser, argv: Sequence[str]) -> set[str]:
    """The argument names `argv` sets explicitly (options given, in any spelling, or its one .json file's keys)."""
    if len(argv) == 1 and argv[0].endswith(".json"):
        return set(json.loads(Path(argv[0]).read_text()))
    named = {arg.partition("=")[0] for arg in argv if arg.startswith("--")}
    return {action.dest for action in parser._actions if named & set(action.option_strings)}


def fresh_output_dir(base: str | Path, finished: str = "config.json") -> Path:
    """Where a run given no `--output_dir` saves: `base`, or the first of `base-2`, `base-3`, ... that holds no
    finished run (its file `finished`); an interrupted run's folder is used again (`--resume_from_checkpoint last`)."""
    base = Path(base)
    candidates = itertools.chain([base], (base.with_name(f"{base.name}-{n}") for n in itertools.count(2)))
    return next(folder for folder in candidates if not (folder / finished).exists())


def folder_name(name_or_path: str) -> str:
    """A checkpoint's folder name (or a hub name's last part), for a default output folder's name."""
    return Path(name_or_path.rstrip("/\\")).name


EXIT_BAD_INPUT = 2  # argparse's status for a bad command line, and `hf-ffn`'s for bad input


@contextlib.contextmanager
def bad_input_exits(prog: str) -> Iterator[None]:
    """Bad input inside (`ValueError`, `OSError`) ends as `prog: error: message` on stderr and exit status
    `EXIT_BAD_INPUT`, as argparse ends a bad command line, instead of a traceback; Ctrl-C as one line, status 130."""
    try:
        yield
    except (ValueError, OSError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None
    except KeyboardInterrupt as error:  # Ctrl-C: one line, as `hf-ffn` (a training run names its last checkpoint)
        print(f"{prog}: interrupted{f'; {error}' if str(error) else ''}", file=sys.stderr)
        raise SystemExit(130) from None


# `--resume_from_checkpoint` values that mean "the newest checkpoint-N folder in --output_dir".
RESUME_LAST = ("last", "true")


def resume_checkpoint(training_args: TrainingArguments) -> str | None:
    """`Trainer.train`'s `resume_from_checkpoint` for `--resume_from_checkpoint`: None, the path given, or for
    "last" / "true" (any case) the newest `checkpoint-N` of `--output_dir` saved completely
    (`hf_ffn.files.last_complete_checkpoint`). Call it before any work.

    Raises:
        ValueError: "last" with no checkpoint in `--output_dir`; a `--max_steps` other than the checkpoint's (the
            learning rate would jump at its step).
    """
    value, output_dir = training_args.resume_from_checkpoint, training_args.output_dir
    if value is None:
        return None
    checkpoint = value
    if value.lower() in RESUME_LAST:
        checkpoint = last_complete_checkpoint(output_dir)
        if checkpoint is None:
            raise ValueError(f"--resume_from_checkpoint {value}: no checkpoint-N folder in --output_dir {output_dir!r}")
    state = Path(checkpoint) / TRAINER_STATE_NAME  # Trainer's file in every checkpoint
    scheduled = TrainerState.load_from_json(str(state)).max_steps if state.is_file() else None
    if training_args.max_steps > 0 and scheduled and scheduled != training_args.max_steps:
        raise ValueError(
            f"--max_steps {training_args.max_steps} with --resume_from_checkpoint {value}: {checkpoint} was trained "
            f"under a schedule of {scheduled} steps (its trainer_state.json's max_steps); resumed under another, the "
            f"learning rate would jump at its step. Give --max_steps {scheduled}"
        )
    return checkpoint
