"""Models in and out of a fine-tuning run: checkpoint and tokenizer loading (a variant through
`hf_ffn.conversion.load_converted`; the checkpoint argument is checked by `hf_ffn.checkpoints.check_checkpoint`,
re-exported here), output-folder checks, the finished save, the final evaluation and the model card.

Finished output. Trainer writes its resumable checkpoints to `output_dir/checkpoint-N/` as usual. The final
model, tokenizer, model card and results are written to a staging folder `output_dir/.staging-final/` and then
moved into `output_dir` with `os.replace`, `config.json` last. `from_pretrained` and `pipeline` need
`config.json`, so an `output_dir` whose final save was interrupted never loads as a model; a run that fails
removes its staging folder. An `output_dir` that already holds a finished model (a `config.json`) is refused.

Unpadded execution. `load_model` sets `config.unpad_tokens` to the run's `--unpad_tokens` (on by default: the
classification and MLM losses ignore pad positions, so it changes no loss), and `save_outputs` writes the
checkpoint's own value back into the finished model's `config.json`. The switch is a choice of how this run
executes, not a property of the trained weights: a saved `True` would silently give everyone who loads the model
zeros at pad positions (a different question-answering span loss, an ONNX export whose shapes depend on the
mask), and would break the package's promise that a default-config model is upstream BERT, pad positions
included. Trainer's resumable `checkpoint-N/` folders are this run's state and keep the run's value.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from huggingface_hub import ModelCard
from transformers import (
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Trainer,
    TrainingArguments,
)

from ..checkpoints import CheckpointNotLoadedError, check_checkpoint, load_pretrained
from ..checkpoints import load_tokenizer as checked_tokenizer
from ..configuration_ffn_bert import FfnBertConfig
from ..conversion import load_converted
from ..conversion_warning import warn_if_not_function_preserving
from ..files import give_ordinary_permissions, last_complete_checkpoint
from ..model_card import build_training_card
from ..options import options_named
from .arguments import CONVERSION_OPTIONS, ModelArguments

STAGING_FOLDER = ".staging-final"
CARD_HYPERPARAMETERS = (
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "seed",
    "weight_decay",
    "warmup_steps",
    "lr_scheduler_type",
)


def load_model(
    model_args: ModelArguments, model_class: type[PreTrainedModel], **kwargs
) -> tuple[PreTrainedModel, dict]:
    """`(model, report)`: the checkpoint as `model_class`, turned into the variant `model_args` asks for.

    A variant is built by `hf_ffn.conversion.load_converted` (function-preserving GELU→GeGLU, approximate
    GELU→SwiGLU, or fresh weights at a kept / parameter-matched / given width); otherwise the checkpoint loads as
    saved. `kwargs` (e.g. `num_labels`, `id2label`) go to `from_pretrained`. `report` is a JSON-able dict. A
    variant whose conversion is not function-preserving logs a warning once
    (`hf_ffn.conversion_warning.warn_if_not_function_preserving`); so does a converted folder loaded as saved.
    `config.unpad_tokens` is then set to `model_args.unpad_tokens` (after loading, so the conversion report lists
    only what the conversion changed; `save_outputs` saves the checkpoint's value, see the module docstring).

    Raises:
        FileNotFoundError: if the checkpoint looks local and is not a checkpoint folder
            (`hf_ffn.checkpoints.check_checkpoint`).
        CheckpointNotLoadedError: an encoder weight the checkpoint lacks or names otherwise, a corrupt weights file
            (`hf_ffn.checkpoints.load_pretrained`).
    """
    check_checkpoint(model_args.model_name_or_path, "--model_name_or_path")
    if not model_args.is_variant:
        model, info = load_pretrained(model_class, model_args.model_name_or_path, "--model_name_or_path", **kwargs)
        resized = [str(k[0]) if isinstance(k, tuple) else str(k) for k in info["mismatched_keys"]]  # a head
        report = {"conversion": "none", "new_weights": sorted([*info["missing_keys"], *resized])}
    else:
        with options_named(CONVERSION_OPTIONS):  # an error names --ffn_type, --ffn_init, ..., as typed
            model, conversion = load_converted(
                model_args.model_name_or_path,
                model_class,
                ffn_type=model_args.ffn_type,
                layer_norm_position=model_args.layer_norm_position,
                init=model_args.ffn_init,
                width=model_args.width,
                **kwargs,
            )
        report = json.loads(conversion.to_json())
        # fine-tuning a conversion that is not function-preserving: the measured difference and the next step, once
        warn_if_not_function_preserving(report)
    model.config.unpad_tokens = model_args.unpad_tokens  # read at every forward
    return model, report


# What a resumed run's model must share with its checkpoint (the optimizer state and the weights are its shapes' and
# its FFN's): a run resumed with another --ffn_type trained silently on as the new variant from the old weights.
RESUMED_FIELDS = ("ffn_types", "layer_norm_positions", "intermediate_size", "hidden_size", "num_hidden_layers")


def check_resume_matches(config: PretrainedConfig, resume: str | None) -> None:
    """Refuse to resume from the checkpoint `resume` into a model whose `config` differs from the checkpoint's in a
    `RESUMED_FIELDS` field (e.g. `--ffn_type relu` given on resuming a GELU run).

    Raises:
        ValueError: naming the checkpoint, the field, both values and the way out (the run's own options).
    """
    if resume is None or not (Path(resume) / "config.json").is_file():
        return
    saved = FfnBertConfig.from_pretrained(resume, warn_reused_weights=False)
    for name in RESUMED_FIELDS:
        if getattr(saved, name) != getattr(config, name):
            raise ValueError(
                f"--resume_from_checkpoint {resume} was trained with {name} {getattr(saved, name)!r}, and this run "
                f"builds {getattr(config, name)!r}; resume with the options of the run that saved it (or start a "
                f"new run in another --output_dir)"
            )


def checkpoint_unpad_tokens(name_or_path: str) -> bool:
    """The `unpad_tokens` saved in the checkpoint's `config.json`: `False` when absent (upstream BERT has no such
    field, FfnBert's default is off)."""
    config_dict, _ = PretrainedConfig.get_config_dict(name_or_path)
    return bool(config_dict.get("unpad_tokens", False))


def checkpoint_max_positions(name_or_path: str) -> int | None:
    """The `max_position_embeddings` saved in the checkpoint's `config.json` (the most tokens one input may have),
    None when absent."""
    config_dict, _ = PretrainedConfig.get_config_dict(name_or_path)
    return config_dict.get("max_position_embeddings")


def load_tokenizer(model_args: ModelArguments) -> PreTrainedTokenizerBase:
    """The tokenizer named by `--tokenizer_name`, else the one saved with the checkpoint
    (`hf_ffn.checkpoints.load_tokenizer`).

    Raises:
        CheckpointNotLoadedError: the folder holds no tokenizer (the message names `--tokenizer_name` as the way out
            when the checkpoint's own was read).
    """
    if model_args.tokenizer_name:
        return checked_tokenizer(model_args.tokenizer_name, "--tokenizer_name")
    try:
        return checked_tokenizer(model_args.model_name_or_path, "--model_name_or_path")
    except CheckpointNotLoadedError as error:
        raise CheckpointNotLoadedError(f"{error}, or pass --tokenizer_name with a tokenizer folder") from None


def check_output_dir(output_dir: str, resume: str | None = None) -> None:
    """Refuse an `output_dir` that already holds a finished model (a `config.json`), or, when `resume`
    (`--resume_from_checkpoint`) is not given, the checkpoints of an interrupted run (Trainer would start again at
    step 0 and overwrite them).

    Raises:
        FileExistsError: naming the folder (and, when `resume` is given, how to go on from one of its checkpoints: in
            another folder); for checkpoints, naming the last one and `--resume_from_checkpoint last`.
    """
    if (Path(output_dir) / "config.json").exists():
        go_on = (
            f"; to go on from one of its checkpoints, run in another --output_dir with --resume_from_checkpoint "
            f"{output_dir}/checkpoint-N"
            if resume is not None
            else ""
        )
        raise FileExistsError(
            f"--output_dir {output_dir!r} already holds a finished model (config.json); choose another folder or "
            f"delete it{go_on}"
        )
    check_not_started(output_dir, resume)


def check_not_started(output_dir: str | os.PathLike, resume: str | None, argument: str = "--output_dir") -> None:
    """Refuse to start afresh (`resume` None) in a folder that holds `checkpoint-N` folders of an earlier run.

    Raises:
        FileExistsError: "--output_dir PATH holds the checkpoints of an earlier run (the last: PATH/checkpoint-N); go
            on with --resume_from_checkpoint last, or choose another --output_dir".
    """
    if resume is not None or not Path(output_dir).is_dir() or not any(Path(output_dir).glob("checkpoint-*")):
        return
    last = last_complete_checkpoint(output_dir)
    if last is None:
        raise FileExistsError(
            f"{argument} {os.fspath(output_dir)!r} holds the checkpoint folders of an earlier run, none of them saved "
            f"completely (no trainer_state.json); delete them, or choose another {argument}, to start again"
        )
    raise FileExistsError(
        f"{argument} {os.fspath(output_dir)!r} holds the checkpoints of an earlier run (the last: {last}); go on "
        f"with --resume_from_checkpoint last, or choose another {argument} (or delete it) to start again"
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
            give_ordinary_permissions(staging)  # safetensors writes model.safetensors owner-only (0600)
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
    """The validation metrics of the model the trainer holds after training: the last step's, or with
    `load_best_model_at_end` (early stopping) the best checkpoint's, which Trainer loads at the end. Those logged at
    that step when `eval_strategy` already evaluated there (no second pass over the same data), else a new
    `trainer.evaluate()`. (The last step's were once returned for a loaded best model.)"""
    state = trainer.state
    step = state.global_step
    if trainer.args.load_best_model_at_end and state.best_model_checkpoint is not None:
        step = checkpoint_step(state.best_model_checkpoint)
    evaluations = [entry for entry in state.log_history if "eval_loss" in entry and entry["step"] == step]
    if evaluations:
        return {key: value for key, value in evaluations[-1].items() if key.startswith("eval_")}
    return trainer.evaluate()


def training_seconds(log_history: list[dict], train_runtime: float, resumed_from_step: int = 0) -> float:
    """Seconds spent training: `train_runtime` (this process's `Trainer.train`) minus the evaluations run inside it.
    A run resumed from the checkpoint of step `resumed_from_step` inherits the log history before it: those
    evaluations (at steps ≤ `resumed_from_step`) ran in an earlier process and are not subtracted."""
    return train_runtime - sum(
        entry.get("eval_runtime", 0.0) for entry in log_history if entry.get("step", 0) > resumed_from_step
    )


def checkpoint_step(checkpoint: str | Path | None) -> int:
    """The step a `Trainer` checkpoint was saved at (its `trainer_state.json`'s `global_step`); 0 for None."""
    if checkpoint is None:
        return 0
    return int(json.loads((Path(checkpoint) / TRAINER_STATE).read_text())["global_step"])


def model_card(
    model_args: ModelArguments,
    training_args: TrainingArguments,
    task: str,
    dataset: str,
    results: dict[str, float],
    conversion: dict,
    metric_names: Sequence[str],
    config: PretrainedConfig | None = None,
    notes: Sequence[str] = (),
) -> ModelCard:
    """The fine-tuned folder's `ModelCard` (`hf_ffn.model_card.build_training_card`), from the run's arguments:
    the variant, the data, the hyperparameters and the measured `results`; named after `output_dir`. `config`, the
    trained model's: the FFN type and LayerNorm placement not given on the command line are read from it
    (`ffn_type`, else BERT's `hidden_act`; `layer_norm_position`), so the card names what was trained. `notes`: lines
    on the training the hyperparameters do not tell (a pre-training run's blocks, warm-up and stop)."""
    ffn_type = model_args.ffn_type or getattr(config, "ffn_type", None) or getattr(config, "hidden_act", None)
    layer_norm_position = model_args.layer_norm_position or getattr(config, "layer_norm_position", None)
    return build_training_card(
        name=Path(training_args.output_dir).name,
        task=task,
        base_model=model_args.model_name_or_path,
        dataset=dataset,
        variant={
            "ffn_type": ffn_type,
            "layer_norm_position": layer_norm_position,
            "ffn_init": model_args.ffn_init,
            "ffn_width": model_args.ffn_width,
        },
        conversion=conversion,
        results=results,
        metric_names=metric_names,
        hyperparameters={key: getattr(training_args, key) for key in CARD_HYPERPARAMETERS},
        notes=notes,
    )


TRAINER_STATE = "trainer_state.json"  # Trainer's name, in each checkpoint and (save_outputs) in the finished folder


def save_outputs(
    trainer: Trainer,
    tokenizer: PreTrainedTokenizerBase,
    card: ModelCard,
    results: dict,
    extra: dict,
    output_dir: str,
    unpad_tokens: bool,
) -> None:
    """The finished save of a run (`save_finished`): model (`trainer.save_model`, every process), tokenizer, model
    card `README.md`, `all_results.json` (`results`), `run_info.json` (`extra`) and `trainer_state.json` (the
    Trainer's state with its log history, as in a checkpoint), written on process 0.

    `unpad_tokens`: the value the saved `config.json` gets (the checkpoint's, `checkpoint_unpad_tokens`; the run's
    own switch is an execution choice, see the module docstring); it is set on the model's config before saving.
    """
    trainer.model.config.unpad_tokens = unpad_tokens
    main = trainer.is_world_process_zero()

    def save(folder: Path) -> None:
        trainer.save_model(str(folder))  # every process (collective under FSDP / ZeRO-3); writes on process 0
        if not main:
            return
        tokenizer.save_pretrained(folder)
        card.save(folder / "README.md")
        (folder / "all_results.json").write_text(json.dumps(results, indent=2) + "\n")
        (folder / "run_info.json").write_text(json.dumps(extra, indent=2, default=str) + "\n")
        trainer.state.save_to_json(str(folder / TRAINER_STATE))  # the log history: every evaluation of the run

    save_finished(output_dir, save, main=main, barrier=trainer.accelerator.wait_for_everyone)


__all__ = [
    "STAGING_FOLDER",
    "check_checkpoint",
    "checkpoint_max_positions",
    "checkpoint_unpad_tokens",
    "check_not_started",
    "check_resume_matches",
    "check_output_dir",
    "checkpoint_step",
    "final_evaluation",
    "load_model",
    "load_tokenizer",
    "model_card",
    "save_finished",
    "save_outputs",
    "training_seconds",
]
