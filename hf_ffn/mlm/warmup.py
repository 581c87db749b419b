"""A sequence-length warm-up (`--short_block_length L --short_block_steps K`; BERT's two phases, Devlin et al. 2019,
app. A.2; docs/pretraining.md, "Short blocks first"): two Trainer runs under one learning-rate schedule, the first K
steps on blocks of L tokens in `output_dir/short_blocks` (as many tokens a step, a checkpoint after step K), the rest
on blocks of `--max_seq_length` in `output_dir`, resumed from it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from transformers import TrainingArguments

from ..training.arguments import RESUME_LAST

FIRST_PHASE_FOLDER = "short_blocks"  # the first phase's run, inside --output_dir
MAX_SCRATCH_LENGTH = 512  # a from-scratch model's positions (`tokenizer.scratch_positions`) for any block up to it


def first_phase_arguments(args, data_args, training_args: TrainingArguments):
    """`(short_data, short_training, info)`, after refusing a warm-up the two phases cannot run: the first phase's data
    and training arguments (resumed from its own last checkpoint when the run resumes) and, when a resumed run finds
    its `checkpoint-K`, its `run_info.json` (`{}` when cut before its save); None when the phase is still to train.

    Raises:
        ValueError, FileExistsError: as `check_short_blocks`; a fresh run where a finished first phase is, or a
            resumed one whose L or K differ from the first phase's.
    """
    check_short_blocks(data_args, training_args, args.model_name_or_path is None, args.early_stopping_patience)
    length, steps = data_args.short_block_length, data_args.short_block_steps
    if args.stop_at_step is not None and args.stop_at_step <= steps:
        raise ValueError(
            f"--stop_at_step {args.stop_at_step} must be above --short_block_steps {steps} (the first phase runs its "
            f"steps whole)"
        )
    folder = Path(training_args.output_dir) / FIRST_PHASE_FOLDER
    short_data = _changed(data_args, max_seq_length=length, short_block_length=None, short_block_steps=None)
    batch = training_args.per_device_train_batch_size * data_args.max_seq_length // length
    resume = _last_checkpoint(folder, below=steps + 1) if training_args.resume_from_checkpoint else None
    short_training = _changed(
        training_args, output_dir=str(folder), per_device_train_batch_size=batch, resume_from_checkpoint=resume
    )
    finished = (folder / "run_info.json").is_file()
    if finished and training_args.resume_from_checkpoint is None:
        raise FileExistsError(
            f"--output_dir {training_args.output_dir!r}: its first phase ({folder}) is a finished earlier run; "
            f"give --resume_from_checkpoint last to go on from it, or choose another folder"
        )
    info = json.loads((folder / "run_info.json").read_text()) if finished else {}
    ran = (info["blocks"]["tokens_per_block"], info["steps"]) if finished else (length, steps)
    if ran != (length, steps):
        raise ValueError(
            f"--short_block_length {length} --short_block_steps {steps} with --resume_from_checkpoint: the first "
            f"phase in {folder} ran {ran[1]} steps on blocks of {ran[0]}; resume with --short_block_length {ran[0]} "
            f"--short_block_steps {ran[1]}, or start afresh in another folder"
        )
    done = training_args.resume_from_checkpoint is not None and (folder / f"checkpoint-{steps}").is_dir()
    return short_data, short_training, info if done else None


def check_short_blocks(
    data_args, training_args: TrainingArguments, from_scratch: bool, early_stopping_patience: int | None = None
) -> None:
    """Refuse a warm-up the two phases cannot run, before any work (`ValueError` naming the option)."""
    length, steps = data_args.short_block_length, data_args.short_block_steps
    option = f"--short_block_length {length} --short_block_steps {steps}"
    if early_stopping_patience is not None:
        raise ValueError(
            f"--early_stopping_patience {early_stopping_patience} with {option}: not supported (the first phase "
            f"must reach its checkpoint at step {steps}, and the second resumes from it without the early-stopping "
            f"state); drop one of them"
        )
    if training_args.max_steps <= 0:
        raise ValueError(f"{option}: give --max_steps (one learning-rate schedule spans both phases)")
    if steps >= training_args.max_steps:
        raise ValueError(
            f"--short_block_steps {steps} must be below --max_steps {training_args.max_steps} (the steps on blocks "
            f"of --max_seq_length {data_args.max_seq_length} follow it)"
        )
    tokens = training_args.per_device_train_batch_size * data_args.max_seq_length
    if tokens % length:
        allowed = [n for n in range(3, data_args.max_seq_length) if tokens % n == 0]
        raise ValueError(
            f"--short_block_length {length} must divide --per_device_train_batch_size × --max_seq_length = "
            f"{tokens} tokens a step (the first phase's batch is {tokens} / {length} blocks); allowed here: "
            f"{', '.join(map(str, allowed))}"
        )
    resume = training_args.resume_from_checkpoint
    if resume is not None and resume.lower() not in RESUME_LAST:
        raise ValueError(
            f"--resume_from_checkpoint {resume!r} with {option}: give 'last' (each phase resumes from its own "
            f"folder's last checkpoint); to go on in another --output_dir from a checkpoint after the warm-up (e.g. "
            f"of a run ended by --stop_at_step), drop --short_block_length and --short_block_steps"
        )
    output = Path(training_args.output_dir)
    first = output / FIRST_PHASE_FOLDER
    if resume is not None and _last_checkpoint(output) is None and _last_checkpoint(first) is None:
        raise ValueError(
            f"--resume_from_checkpoint {resume} with {option}: no checkpoint-N folder in --output_dir "
            f"{str(output)!r} nor in its first phase's {str(first)!r}"
        )
    if from_scratch and data_args.max_seq_length > MAX_SCRATCH_LENGTH:
        raise ValueError(
            f"{option} from scratch needs --max_seq_length <= {MAX_SCRATCH_LENGTH} (got {data_args.max_seq_length}): "
            f"the first phase's model would have fewer position embeddings than the second's"
        )


def second_phase_arguments(data_args, training_args: TrainingArguments):
    """The second phase's data and training arguments, resumed from its own last checkpoint, else the first phase's
    `checkpoint-K`."""
    resume = _last_checkpoint(Path(training_args.output_dir)) if training_args.resume_from_checkpoint else None
    if resume is None:
        resume = str(Path(training_args.output_dir) / FIRST_PHASE_FOLDER / f"checkpoint-{data_args.short_block_steps}")
    long_data = _changed(data_args, short_block_length=None, short_block_steps=None)
    return long_data, _changed(training_args, resume_from_checkpoint=resume)


def _changed(arguments, **changes):
    """A copy of an arguments dataclass with `changes` set (not `dataclasses.replace`: `__post_init__` would read its
    resolved defaults as given)."""
    arguments = copy.deepcopy(arguments)
    for name, value in changes.items():
        setattr(arguments, name, value)
    return arguments


def _last_checkpoint(folder: Path, below: int | None = None) -> str | None:
    """The newest `checkpoint-N` folder in `folder` (N < `below` when given), or None."""
    steps = [int(path.name[11:]) for path in folder.glob("checkpoint-*") if path.name[11:].isdigit()]
    steps = [step for step in steps if below is None or step < below]
    return str(folder / f"checkpoint-{max(steps)}") if steps else None
