"""Models in and out of a training run: loading, output-folder checks, the final evaluation, the model card and the
finished save (staged, `config.json` moved in last: an interrupted save never loads as a model). `unpad_tokens` is
the run's while it trains, the checkpoint's once saved (docs/unpadded.md).
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
    TrainerState,
    TrainingArguments,
)
from transformers.trainer import TRAINER_STATE_NAME

from ..checkpoints import CheckpointNotLoadedError, check_checkpoint, load_pretrained
from ..checkpoints import load_tokenizer as checked_tokenizer
from ..configuration_ffn_bert import ROBERTA_MODEL_TYPES
from ..conversion import load_converted
from ..conversion_warning import warn_if_not_function_preserving
from ..families import checkpoint_family
from ..files import give_ordinary_permissions, last_complete_checkpoint
from ..model_card import build_training_card
from ..options import options_named
from .arguments import CONVERSION_OPTIONS, ModelArguments

STAGING_FOLDER = ".staging-final"
CARD_HYPERPARAMETERS = ("learning_rate", "num_train_epochs", "max_steps", "per_device_train_batch_size", "seed")
CARD_HYPERPARAMETERS += ("weight_decay", "warmup_steps", "lr_scheduler_type")


def load_model(
    model_args: ModelArguments, model_class: type[PreTrainedModel], **kwargs
) -> tuple[PreTrainedModel, dict]:
    """`(model, report)`: the checkpoint as `model_class` of its family, as saved or as the variant `model_args` asks
    for (`load_converted`; warns if not function-preserving), `unpad_tokens` the run's. `kwargs`: to `from_pretrained`.

    Raises:
        FileNotFoundError: if the checkpoint looks local and is not a checkpoint folder.
        CheckpointNotLoadedError: an encoder weight the checkpoint lacks or names otherwise, a corrupt weights file.
    """
    check_checkpoint(model_args.model_name_or_path, "--model_name_or_path")
    model_class = checkpoint_family(model_args.model_name_or_path, "--model_name_or_path").same_head(model_class)
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
        warn_if_not_function_preserving(report)
    model.config.unpad_tokens = model_args.unpad_tokens  # read at every forward
    return model, report


# What a resumed run's model must share with its checkpoint (its weights and optimizer state are of that shape and FFN).
RESUMED_FIELDS = ("ffn_types", "layer_norm_positions", "intermediate_size", "hidden_size", "num_hidden_layers")


def check_resume_matches(config: PretrainedConfig, resume: str | None) -> None:
    """Refuse to resume from `resume` into a model whose `config` differs from the checkpoint's in `RESUMED_FIELDS`
    (`ValueError` naming the checkpoint, the field and both values)."""
    if resume is None or not (Path(resume) / "config.json").is_file():
        return
    saved = checkpoint_family(resume).config_class.from_pretrained(resume, warn_reused_weights=False)
    for name in RESUMED_FIELDS:
        if getattr(saved, name) != getattr(config, name):
            raise ValueError(
                f"--resume_from_checkpoint {resume} was trained with {name} {getattr(saved, name)!r}, and this run "
                f"builds {getattr(config, name)!r}; resume with the options of the run that saved it (or start a "
                f"new run in another --output_dir)"
            )


def checkpoint_unpad_tokens(name_or_path: str) -> bool:
    """The `unpad_tokens` saved in the checkpoint's `config.json`, `False` when absent (upstream BERT)."""
    config_dict, _ = PretrainedConfig.get_config_dict(name_or_path)
    return bool(config_dict.get("unpad_tokens", False))


def checkpoint_max_positions(name_or_path: str) -> int | None:
    """The most tokens one sequence of the checkpoint holds: its `max_position_embeddings`, less a RoBERTa-family
    model's offset `pad_token_id + 1` (roberta-base's 514 hold 512); None when absent."""
    config_dict, _ = PretrainedConfig.get_config_dict(name_or_path)
    positions = config_dict.get("max_position_embeddings")
    if positions is not None and config_dict.get("model_type") in ROBERTA_MODEL_TYPES:
        positions -= config_dict.get("pad_token_id", 1) + 1
    return positions


def load_tokenizer(model_args: ModelArguments) -> PreTrainedTokenizerBase:
    """The tokenizer named by `--tokenizer_name`, else the checkpoint's (`CheckpointNotLoadedError`: none there)."""
    if model_args.tokenizer_name:
        return checked_tokenizer(model_args.tokenizer_name, "--tokenizer_name")
    try:
        return checked_tokenizer(model_args.model_name_or_path, "--model_name_or_path")
    except CheckpointNotLoadedError as error:
        raise CheckpointNotLoadedError(f"{error}, or pass --tokenizer_name with a tokenizer folder") from None


def check_output_dir(output_dir: str, resume: str | None = None) -> None:
    """Refuse (`FileExistsError`) an `output_dir` that holds a finished model (a `config.json`), or, unless resuming
    (`resume`), the checkpoints of an earlier run (`check_not_started`)."""
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
    """Refuse (`FileExistsError`) to start afresh (`resume` None) in a folder holding an earlier run's checkpoints."""
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
    """`save(staging_folder)`, then each file moved into `output_dir` (`os.replace`), `config.json` last. Every
    process calls it (`save` may be collective); only `main` touches the staging folder; `barrier` orders the steps."""
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
    """The validation metrics of the trained model (the last step's, or the best checkpoint's with
    `load_best_model_at_end`): those logged at that step, else `trainer.evaluate()`."""
    state = trainer.state
    step = state.global_step
    if trainer.args.load_best_model_at_end and state.best_model_checkpoint is not None:
        step = checkpoint_step(state.best_model_checkpoint)
    evaluations = [entry for entry in state.log_history if "eval_loss" in entry and entry["step"] == step]
    if evaluations:
        return {key: value for key, value in evaluations[-1].items() if key.startswith("eval_")}
    return trainer.evaluate()


def training_seconds(log_history: list[dict], train_runtime: float, resumed_from_step: int = 0) -> float:
    """Seconds spent training: `train_runtime` minus the evaluations this process ran in it (those after
    `resumed_from_step`: a resumed run's log history holds an earlier process's)."""
    return train_runtime - sum(
        entry.get("eval_runtime", 0.0) for entry in log_history if entry.get("step", 0) > resumed_from_step
    )


def checkpoint_step(checkpoint: str | Path | None) -> int:
    """The step a `Trainer` checkpoint was saved at (its `trainer_state.json`'s `global_step`); 0 for None."""
    if checkpoint is None:
        return 0
    return TrainerState.load_from_json(str(Path(checkpoint) / TRAINER_STATE_NAME)).global_step


def model_card(
    model_args: ModelArguments,
    training_args: TrainingArguments,
    task: str,
    dataset: str,
    results: dict[str, float],
    conversion: dict,
    metric_names: Sequence[str],
    model: PreTrainedModel,
    notes: Sequence[str] = (),
) -> ModelCard:
    """The trained folder's `ModelCard` (`build_training_card`): the model's family and upstream class, the variant
    (what `model_args` leaves out read from `model.config`), the data, the hyperparameters, `results` and `notes`."""
    config = model.config
    ffn_type = model_args.ffn_type or getattr(config, "ffn_type", None) or getattr(config, "hidden_act", None)
    layer_norm_position = model_args.layer_norm_position or getattr(config, "layer_norm_position", None)
    return build_training_card(
        model=model,
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


def save_outputs(
    trainer: Trainer,
    tokenizer: PreTrainedTokenizerBase,
    card: ModelCard,
    results: dict,
    extra: dict,
    output_dir: str,
    unpad_tokens: bool,
) -> None:
    """The finished save (`save_finished`): model (config with `unpad_tokens`), tokenizer, card `README.md`,
    `all_results.json` (`results`), `run_info.json` (`extra`), `trainer_state.json`."""
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
        trainer.state.save_to_json(str(folder / TRAINER_STATE_NAME))  # the log history: every evaluation of the run

    save_finished(output_dir, save, main=main, barrier=trainer.accelerator.wait_for_everyone)
