"""What the training commands' arguments share: `ModelArguments` (parsed with `TrainingArguments`, as in
`run_glue.py`), the numeric options' checks, parsing with one-line errors, the default output folder and
`--resume_from_checkpoint`. A bad value raises `ValueError` naming the flag, the value and what is allowed.
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
EXIT_BAD_INPUT = 2  # argparse's status for a bad command line, and `hf-ffn`'s for bad input
RESUME_LAST = ("last", "true")  # `--resume_from_checkpoint` values for the newest checkpoint-N of --output_dir
# `load_converted`'s keywords → the options of `ModelArguments` that set them (errors name the option).
CONVERSION_OPTIONS = {
    "ffn_type": "--ffn_type",
    "layer_norm_position": "--layer_norm_position",
    "init": "--ffn_init",
    "width": "--ffn_width",
}
TRAINING_INITS = tuple(init for init in INITS if init != "pruned")  # "pruned" needs `hf-ffn convert`'s calibration


def option(default: Any, help: str, **metadata: Any) -> Any:
    """A dataclass field for `HfArgumentParser`: its default and its `--help` text (and e.g. `choices`)."""
    return field(default=default, metadata={"help": help, **metadata})


def check_choice(name: str, value: Any, allowed: Sequence[str]) -> None:
    """Refuse `value` (None passes) outside `allowed`: "--NAME has unknown value 'x'; allowed: a, b"."""
    if value is not None and value not in allowed:
        raise ValueError(f"--{name} has unknown value {value!r}; allowed: {', '.join(allowed)}")


def check_choices(arguments: Any) -> None:
    """`check_choice` of each field of the dataclass `arguments` with `choices` metadata (what argparse checks on a
    command line, for arguments built in Python)."""
    for spec in dataclasses.fields(arguments):
        if spec.metadata.get("choices"):
            check_choice(spec.name, getattr(arguments, spec.name), spec.metadata["choices"])


def check_training_init(value: str) -> None:
    """Refuse an `--ffn_init` a training run cannot make (`ValueError` listing `TRAINING_INITS`)."""
    if value not in TRAINING_INITS:
        raise ValueError(
            f"--ffn_init has unknown value {value!r}; allowed: {', '.join(TRAINING_INITS)} (pruned is made by "
            f"`hf-ffn convert --init pruned` (with calibration text): fine-tune its folder)"
        )


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
        check_choice("ffn_type", self.ffn_type, FFN_TYPES)
        check_choice("layer_norm_position", self.layer_norm_position, LAYER_NORM_POSITIONS)
        check_training_init(self.ffn_init)
        parse_width(self.ffn_width, "--ffn_width")

    @property
    def width(self) -> str | int:
        """`ffn_width` as `load_converted` takes it: "keep", "matched" or an int."""
        return parse_width(self.ffn_width, "--ffn_width")

    @property
    def is_variant(self) -> bool:
        """Whether the checkpoint is to be changed at all (else it loads as saved)."""
        changed = self.ffn_type is not None or self.layer_norm_position is not None
        return changed or self.width != "keep" or self.ffn_init != "preserving"


@dataclass(frozen=True)
class Allowed:
    """A numeric option's values: `minimum` ≤ value ≤ `maximum` (an end excluded where `above` / `below`; None: no
    bound), whole where `integer`, or one of `unset`. `str()` says it in words."""

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
        low = self.minimum is None or (value > self.minimum if self.above else value >= self.minimum)
        high = self.maximum is None or (value < self.maximum if self.below else value <= self.maximum)
        return not (self.integer and float(value) != int(value)) and low and high

    def __str__(self) -> str:
        ends = ((">" if self.above else ">=", self.minimum), ("<" if self.below else "<=", self.maximum))
        bounds = " and ".join(f"{sign} {_number(end)}" for sign, end in ends if end is not None)
        return " ".join(filter(None, ("an integer" if self.integer else "a number", bounds, self.note)))


def _number(value: float) -> str:
    """A bound as written: 4294967295, not 4.29497e+09."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


POSITIVE = Allowed(minimum=0, above=True)
AT_LEAST_ONE = Allowed(minimum=1, integer=True)
SEED = Allowed(minimum=0, maximum=2**32 - 1, integer=True)  # numpy's seed range (transformers.set_seed seeds it)
# The numeric options of a training run → what each accepts (`check_numeric_options`), before any data is read;
# transformers 5.25 does not check these (it refuses warmup_steps < 0 and logging_steps 0 itself).
NUMERIC_OPTIONS: dict[str, Allowed] = {
    "max_seq_length": Allowed(minimum=3, integer=True, note="([CLS] and [SEP] take two)"),
    **dict.fromkeys(("max_train_samples", "max_eval_samples", "max_test_samples"), AT_LEAST_ONE),
    "split_seed": SEED,
    "max_steps": Allowed(
        minimum=1, integer=True, unset=(-1,), note="or -1 (Trainer's unset: --num_train_epochs decides)"
    ),
    "num_train_epochs": POSITIVE,
    "learning_rate": POSITIVE,
    **dict.fromkeys(("per_device_train_batch_size", "per_device_eval_batch_size"), AT_LEAST_ONE),
    **dict.fromkeys(("gradient_accumulation_steps", "eval_accumulation_steps"), AT_LEAST_ONE),
    "weight_decay": Allowed(minimum=0),
    "max_grad_norm": Allowed(minimum=0, note="(0 turns clipping off)"),
    **dict.fromkeys(("adam_beta1", "adam_beta2"), Allowed(minimum=0, maximum=1, below=True)),
    "adam_epsilon": POSITIVE,
    "label_smoothing_factor": Allowed(minimum=0, maximum=1, below=True),
    **dict.fromkeys(("logging_steps", "eval_steps", "save_steps"), POSITIVE),
    "seed": SEED,
    "dataloader_num_workers": Allowed(minimum=0, integer=True),
}


def check_numeric_options(*arguments: Any, max_positions: int | None = None) -> None:
    """Refuse a numeric option of any of `arguments` (dataclasses) outside `NUMERIC_OPTIONS`; `max_positions` (the
    checkpoint's, `checkpoint_max_positions`) caps `--max_seq_length`.

    Raises:
        ValueError: "--max_steps has value 0; allowed: an integer >= 1 or -1 (...)".
    """
    for args in arguments:
        for name, allowed in NUMERIC_OPTIONS.items():
            if not hasattr(args, name):
                continue
            if name == "max_seq_length" and max_positions is not None:
                note = "([CLS] and [SEP] take two; the checkpoint's max_position_embeddings)"
                allowed = dataclasses.replace(allowed, maximum=max_positions, note=note)
            if not allowed.admits(getattr(args, name)):
                raise ValueError(f"--{name} has value {getattr(args, name)!r}; allowed: {allowed}")


def resolve_max_seq_length(value: int | None, max_positions: int | None) -> int:
    """`--max_seq_length` as given, else `DEFAULT_MAX_SEQ_LENGTH` capped at the checkpoint's `max_positions`."""
    if value is not None:
        return value
    return DEFAULT_MAX_SEQ_LENGTH if max_positions is None else min(DEFAULT_MAX_SEQ_LENGTH, max_positions)


def one_line_error(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    """`parser.error` without the ~130 lines of usage: `prog: error: message` on stderr, exit status 2."""
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_BAD_INPUT)


_TYPE_WORDS = {int: "an integer", float: "a number"}  # argparse's own: "invalid int value: 'x'"


def _typed(kind: type, option: str):
    """`kind` as the type of `option`, refusing a value with the whole message (an `ArgumentError` of no argument)."""

    def parse(text: str):
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentError(None, f"{option} has value {text!r}; expected {_TYPE_WORDS[kind]}") from None

    return parse


def _json_argv(argv: Sequence[str]) -> dict | None:
    """The options of `argv`'s one `.json` file (as transformers' example scripts take them), else None."""
    return json.loads(Path(argv[0]).read_text()) if len(argv) == 1 and argv[0].endswith(".json") else None


def parse_arguments(parser: HfArgumentParser, argv: Sequence[str], defaults: dict | None = None) -> tuple:
    """`parser`'s dataclasses from `argv` (or its one `.json` file) over `defaults` (option → value, e.g. a
    recipe's); a command line argparse refuses ends in one line naming the option and the value.

    Raises:
        ValueError: the dataclasses' own checks (`__post_init__`).
    """
    parser.error = functools.partial(one_line_error, parser)  # what argparse reports itself: a missing option
    parser.exit_on_error = False  # the rest it raises, as `ArgumentError`
    for action in parser._actions:
        if action.type in _TYPE_WORDS:
            action.type = _typed(action.type, action.option_strings[0])
    from_file = _json_argv(argv)
    if from_file is not None:
        return parser.parse_dict({**(defaults or {}), **from_file})
    parser.set_defaults(**(defaults or {}))
    try:
        return parser.parse_args_into_dataclasses(args=list(argv))
    except argparse.ArgumentError as error:  # named by its first spelling: --max_steps, not --max_steps/--max-steps
        option = error.argument_name and error.argument_name.split("/")[0]
        one_line_error(parser, f"{option}: {error.message}" if option else error.message)


def given_options(parser: HfArgumentParser, argv: Sequence[str]) -> set[str]:
    """The argument names `argv` sets explicitly (options given, in any spelling, or its one .json file's keys)."""
    from_file = _json_argv(argv)
    if from_file is not None:
        return set(from_file)
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


def end_process_group() -> None:
    """Destroy the process group a launcher's run started (torchrun, `accelerate launch`; Trainer initialises it), as
    torch's "Shutdown" guide asks at the end of each process's work. Left to interpreter exit, Gloo's worker threads
    can outlive the interpreter and abort the process (SIGABRT, "terminate called without an active exception")
    after the run finished and saved: a failed exit status for a run that succeeded. Called on success only (after
    an error the other processes may still wait in a collective, and destroying would hang); a no-op in one process."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def bad_input_exits(prog: str) -> Iterator[None]:
    """Bad input inside (`ValueError`, `OSError`) ends as `prog: error: message` on stderr and exit status
    `EXIT_BAD_INPUT`, as argparse ends a bad command line; Ctrl-C as one line, status 130. A run that ends without
    error ends its process group (`end_process_group`)."""
    try:
        yield
        end_process_group()
    except (ValueError, OSError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT) from None
    except KeyboardInterrupt as error:  # a training run's names its last checkpoint
        print(f"{prog}: interrupted{f'; {error}' if str(error) else ''}", file=sys.stderr)
        raise SystemExit(130) from None


def resume_checkpoint(training_args: TrainingArguments) -> str | None:
    """`Trainer.train`'s `resume_from_checkpoint`: None, the path given, or for "last" / "true" (any case) the newest
    `checkpoint-N` of `--output_dir` saved completely (`last_complete_checkpoint`).

    Raises:
        ValueError: "last" with no checkpoint in `--output_dir`; a `--max_steps` other than the checkpoint's (the
            learning rate would jump at its step).
    """
    value, output_dir = training_args.resume_from_checkpoint, training_args.output_dir
    if value is None:
        return None
    checkpoint = last_complete_checkpoint(output_dir) if value.lower() in RESUME_LAST else value
    if checkpoint is None:
        raise ValueError(f"--resume_from_checkpoint {value}: no checkpoint-N folder in --output_dir {output_dir!r}")
    state = Path(checkpoint) / TRAINER_STATE_NAME
    scheduled = TrainerState.load_from_json(str(state)).max_steps if state.is_file() else None
    if training_args.max_steps > 0 and scheduled and scheduled != training_args.max_steps:
        raise ValueError(
            f"--max_steps {training_args.max_steps} with --resume_from_checkpoint {value}: {checkpoint} was trained "
            f"under a schedule of {scheduled} steps (its trainer_state.json's max_steps); resumed under another, the "
            f"learning rate would jump at its step. Give --max_steps {scheduled}"
        )
    return checkpoint
