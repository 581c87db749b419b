"""`hf-ffn mlm`: masked-language-model pre-training of an FfnBert variant with transformers' `Trainer`, from scratch
or continued from a checkpoint, in the shape of `run_mlm.py`: check the options, the data (`hf_ffn.mlm.data`), the
model, the Trainer, train and evaluate, report, save (docs/pretraining.md).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import time
from pathlib import Path

import torch
from transformers import (
    HfArgumentParser,
    PreTrainedTokenizerBase,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    set_seed,
)
from transformers.utils import logging as hf_logging

from ..checkpoints import check_checkpoint
from ..configuration_ffn_bert import FfnBertConfig
from ..files import one_run_per_output_dir
from ..modeling_ffn_bert import FfnBertForMaskedLM
from ..params import mlm_flops
from ..sparse_prediction import SparsePredictionMixin
from ..training.arguments import (
    ModelArguments,
    bad_input_exits,
    check_numeric_options,
    folder_name,
    fresh_output_dir,
    given_options,
    parse_arguments,
    resume_checkpoint,
)
from ..training.outputs import (
    check_output_dir,
    check_resume_matches,
    checkpoint_step,
    checkpoint_unpad_tokens,
    final_evaluation,
    load_model,
    model_card,
    save_outputs,
    training_seconds,
)
from .arguments import PretrainingArguments, PretrainingDataArguments, ffn_width
from .data import pretraining_data
from .floors import plateau_verdict
from .initialisation import ffn_output_rms, seed_by_name
from .recipe import CONFIG_KEY, config_text, recipe_defaults
from .report import card_notes, run_report, summary_line
from .speed import apply_speed_defaults, options_given_by_value, use_bf16_where_available
from .trainer import (
    StopAtStep,
    ThroughputCallback,
    absent_head_warning_dropped,
    check_stop_at_step,
    early_stopping_callback,
    mlm_trainer,
    new_mlm_head_note,
)
from .warmup import first_phase_arguments, second_phase_arguments

logger = hf_logging.get_logger(__name__)

DEFAULT_OUTPUT_ROOT = Path("out") / "mlm"  # --output_dir left out: a fresh folder under it (`fresh_output_dir`)
INIT_RMS_BLOCKS = 8  # training blocks the FFN output rms at the start is measured on (`ffn_output_rms`)
# The saved config.json has an `auto_map` (remote code), so AutoTokenizer asks about remote code unless hf_ffn is
# imported or trust_remote_code is given (docs/conversion.md, "Without hf_ffn").
LOAD_HINT = (
    "load it: import hf_ffn, then AutoModelForMaskedLM.from_pretrained({folder!r}) and AutoTokenizer.from_pretrained"
    "({folder!r}); without hf_ffn: AutoModelForMaskedLM.from_pretrained({folder!r}, trust_remote_code=True) and "
    "AutoTokenizer.from_pretrained({folder!r}, trust_remote_code=False)"
)


def pretraining_config(
    args: PretrainingArguments,
    tokenizer: PreTrainedTokenizerBase,
    max_position_embeddings: int,
    recipe_config: dict | None = None,
) -> FfnBertConfig:
    """The from-scratch `FfnBertConfig` of `args` and the tokenizer, `--config_overrides` over the recipe's
    `recipe_config` (`ValueError` on sizes a model cannot be built with)."""
    hidden_act = args.scratch("hidden_act")
    ffn_type = args.ffn_type or hidden_act
    config = FfnBertConfig(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        hidden_size=args.scratch("hidden_size"),
        num_hidden_layers=args.scratch("num_hidden_layers"),
        num_attention_heads=args.scratch("num_attention_heads"),
        intermediate_size=ffn_width(
            ffn_type, args.scratch("intermediate_size"), args.scratch("ffn_width"), args.glu_multiple_of
        ),
        hidden_act=hidden_act,
        ffn_type=ffn_type,
        layer_norm_position=args.scratch("layer_norm_position"),
        max_position_embeddings=max_position_embeddings,
        **{**(recipe_config or {}), **args.config_updates()},
    )
    config.check_model_fields()
    return config


@one_run_per_output_dir(disposable=("tokenizer", "short_blocks/"))  # TOKENIZER_FOLDER, FIRST_PHASE_FOLDER
def run_pretraining(
    args: PretrainingArguments,
    data_args: PretrainingDataArguments,
    training_args: TrainingArguments,
    callbacks: list[TrainerCallback] | None = None,
    given: set[str] | None = None,
    recipe: dict | None = None,
) -> dict:
    """Pre-train an `FfnBertForMaskedLM` (from scratch, or continued from `args.model_name_or_path`) and save it,
    with its tokenizer, model card, `all_results.json` and `run_info.json`, in `output_dir`; a warm-up's first phase
    first (`hf_ffn.mlm.warmup`). `given`: the options the user gave (None: those not at their defaults), which the
    speed defaults and bf16 leave alone; `recipe`: its name and the values taken from it, for `run_info.json`.

    Returns `{"results", "log_history", "summary", "wall_seconds", **report}`; raises `FileNotFoundError`,
    `FileExistsError`, `ValueError` on bad input, before training starts.
    """
    start = time.perf_counter()
    first_phase = None
    if data_args.short_block_length is not None:
        check_output_dir(training_args.output_dir, training_args.resume_from_checkpoint)
        short = first_phase_arguments(args, data_args, training_args)
        long = second_phase_arguments(data_args, training_args)
        first_phase = _first_phase(args, data_args.short_block_steps, *short, callbacks, given, recipe)
        data_args, training_args = long
    outcome = _train(args, data_args, training_args, callbacks, given, recipe, first_phase)
    return {**outcome, "wall_seconds": time.perf_counter() - start}


def _train(args, data_args, training_args, callbacks, given, recipe, first_phase=None, stop_at=None) -> dict:
    """One Trainer run (the whole run, or a warm-up's phase, `stop_at` its last step)."""
    start = time.perf_counter()
    resume, stopping = _check_arguments(args, data_args, training_args)
    given = options_given_by_value(args, data_args, training_args) if given is None else given
    speed = apply_speed_defaults((args,), training_args, given) if args.speed_defaults else {}
    data = pretraining_data(args, data_args, training_args, resume, show=training_args.process_index == 0)
    data_seconds = time.perf_counter() - start
    model, card_args, built, saved_unpad = _model(args, training_args, data, recipe, resume)
    first = [block["input_ids"] for block in itertools.islice(data.train, INIT_RMS_BLOCKS)]
    init_rms = ffn_output_rms(model, torch.stack([torch.as_tensor(ids) for ids in first]).long())

    bf16 = use_bf16_where_available(training_args, given) if args.bf16_where_available else training_args.bf16
    flops = mlm_flops(model.config, data_args.max_seq_length)
    throughput = ThroughputCallback(flops, args.sparse_prediction, data.tokenizer.pad_token_id)
    trainer = mlm_trainer(
        model,
        data.tokenizer,
        data.train,
        data.evaluation,
        training_args,
        seed=data_args.split_seed,
        padding_free=args.padding_free,
        callbacks=[
            *([throughput] if args.log_throughput else []),
            *(callbacks or []),
            *([StopAtStep(stop_at or args.stop_at_step)] if stop_at or args.stop_at_step else []),
        ],
        **data.masking,
        fixed_prediction_rows=args.sparse_prediction and args.fixed_prediction_rows,
    )
    resumed_from_step = checkpoint_step(resume)  # before training: --save_total_limit may delete the checkpoint
    results, train_seconds = _train_and_evaluate(trainer, resume, stopping, resumed_from_step)

    report = run_report(args, data_args, training_args, trainer, built, data, train_seconds, resumed_from_step)
    stop = args.stop_at_step  # not reached in a warm-up's first phase, nor after an earlier early stop
    stopped = {"step": stop, "max_steps": training_args.max_steps, "reached": trainer.state.global_step == stop}
    from_scratch = args.model_name_or_path is None
    report |= {
        "tokenizer": {"source": data.tokenizer_source, "vocab_size": len(data.tokenizer)},
        "bf16": bool(bf16),
        "speed_defaults": speed,
        "floors": data.floors,
        "ffn_output_rms_at_start": init_rms,
        "data_seconds": data_seconds,
        "phase_seconds": data.phase_seconds,
        "recipe": recipe or {},
        "short_blocks": first_phase,
        "resumed_from": resume,
        "stop_at_step": None if stop is None else stopped,
        "plateau": plateau_verdict(results["eval_mask_loss"], data.floors["unigram_mask"]) if from_scratch else None,
    }
    report["summary"] = summary_line(report, model.config, built["standard_width"], results["eval_loss"], results)

    # the finished run in output_dir, its config with sparse_prediction off (upstream BertForMaskedLM's outputs)
    dataset = data_args.dataset_name or ", ".join(data_args.train_files)
    notes, conversion = card_notes(report), built["conversion"]
    card = model_card(
        card_args, training_args, "fill-mask", dataset, results, conversion, ("perplexity",), model, notes
    )
    model.config.sparse_prediction = False
    save_outputs(trainer, data.tokenizer, card, results, report, training_args.output_dir, unpad_tokens=saved_unpad)
    return {"results": results, "log_history": trainer.state.log_history, **report}


def _model(args, training_args, data, recipe, resume):
    """`(model, card_args, built, saved_unpad_tokens)`, seeded first (the same initial weights for the same seed):
    from scratch (`pretraining_config`), or the checkpoint as the variant asked for."""
    set_seed(training_args.seed)
    tokenizer = data.tokenizer
    if args.model_name_or_path is None:
        config = pretraining_config(args, tokenizer, data.positions, (recipe or {}).get(CONFIG_KEY))
        model = FfnBertForMaskedLM(config)
        if args.seed_modules_by_name:
            seed_by_name(model, training_args.seed)
        conversion, saved_unpad, head_note = {"conversion": "from scratch", "new_weights": "all"}, False, None
        # the card: "Pre-trained from scratch", with what was built
        card_args = ModelArguments(
            None, config.ffn_type, config.layer_norm_position, ffn_width=str(config.intermediate_size)
        )
    else:
        card_args = args.model_arguments()
        with absent_head_warning_dropped():
            model, conversion = load_model(card_args, FfnBertForMaskedLM, **args.config_updates())
        new_weights = conversion.get("new_weights", conversion.get("new", []))
        head_note = new_mlm_head_note(new_weights, args.model_name_or_path, model.config.vocab_size)
        if head_note and resume is None:  # logged at the run's start only
            logger.warning(head_note)
        saved_unpad = checkpoint_unpad_tokens(args.model_name_or_path)
        if len(tokenizer) > model.config.vocab_size:
            raise ValueError(
                f"--tokenizer_name {args.tokenizer_name!r} has {len(tokenizer)} tokens, more than the "
                f"checkpoint's vocab_size {model.config.vocab_size}"
            )
    if args.sparse_prediction and not isinstance(model, SparsePredictionMixin):  # e.g. FfnRobertaForMaskedLM
        logger.warning(f"--sparse_prediction: {type(model).__name__} decodes every position (no sparse prediction)")
        args.sparse_prediction = False  # so the throughput, the collator and run_info.json say what runs
    model.config.sparse_prediction = args.sparse_prediction  # read at every forward, like unpad_tokens
    model.config.unpad_tokens = args.unpad_tokens
    check_resume_matches(model.config, resume)
    standard_width = args.scratch("intermediate_size") if args.model_name_or_path is None else None
    built = {"conversion": conversion, "head_note": head_note, "standard_width": standard_width}
    return model, card_args, built, saved_unpad


def _check_arguments(args: PretrainingArguments, data_args: PretrainingDataArguments, training_args: TrainingArguments):
    """Refuse bad options before anything is read; returns the checkpoint to resume from and the early stopping."""
    check_output_dir(training_args.output_dir, training_args.resume_from_checkpoint)
    check_numeric_options(training_args)  # --max_steps 0, --learning_rate <= 0, --num_train_epochs 0, ...
    if data_args.streaming:
        if training_args.max_steps <= 0:
            raise ValueError(
                "--streaming needs --max_steps: a stream has no length, so Trainer cannot count the steps of "
                "--num_train_epochs (a count of passes needs the whole data set)"
            )
        if args.tokenizer_name is None and args.model_name_or_path is None:
            raise ValueError(
                "--streaming: training a tokenizer reads every training document (twice) before training, which "
                "needs the whole data set; give --tokenizer_name (or --model_name_or_path), or drop --streaming"
            )
    resume = resume_checkpoint(training_args)
    check_stop_at_step(args.stop_at_step, training_args, resume=resume, resumed_step=checkpoint_step(resume))
    stopping = early_stopping_callback(args.early_stopping_patience, args.early_stopping_threshold, training_args)
    if args.model_name_or_path is not None:
        check_checkpoint(args.model_name_or_path, "--model_name_or_path")
    return resume, stopping


def _train_and_evaluate(
    trainer: Trainer, resume: str | None, stopping: TrainerCallback | None, resumed_from_step: int = 0
) -> tuple[dict, float]:
    """Evaluate ("before"; not when resuming), train, evaluate again; returns the metrics with the perplexities and
    the training seconds."""
    before = {} if resume else trainer.evaluate(metric_key_prefix="before")
    if stopping is not None:  # after the "before" evaluation, which it would misread (no eval_ metrics)
        trainer.add_callback(stopping)
    train_output = trainer.train(resume_from_checkpoint=resume)
    train_seconds = training_seconds(
        trainer.state.log_history, train_output.metrics["train_runtime"], resumed_from_step
    )
    after = final_evaluation(trainer)
    results = {**before, **train_output.metrics, **after}  # the run's epoch, not the 'before' evaluation's 0
    if before:
        results["before_perplexity"] = math.exp(before["before_loss"])
    results["eval_perplexity"] = math.exp(after["eval_loss"])
    return results, train_seconds


def _first_phase(args, steps: int, short_data, short_training, info, callbacks, given, recipe) -> dict:
    """A warm-up's first phase, trained in `output_dir/short_blocks` up to its `checkpoint-K` (skipped when `info`
    says it is there); returns `run_info.json`'s `short_blocks`."""
    folder = Path(short_training.output_dir)
    if info is None:  # still to train
        _train(args, short_data, short_training, callbacks, given, recipe, stop_at=steps)
        info = json.loads((folder / "run_info.json").read_text())
    results = json.loads((folder / "all_results.json").read_text()) if (folder / "all_results.json").is_file() else {}
    if not info:  # cut after its checkpoint-K, before its final evaluation and save
        logger.warning(
            f"{folder}: the first phase has its checkpoint-{steps} but no final evaluation "
            f"(cut before its save); run_info.json's short_blocks has no loss or summary for it"
        )
    return {
        "short_block_length": short_data.max_seq_length,
        "short_block_steps": steps,
        "batch_size": short_training.per_device_train_batch_size,
        "output_dir": str(folder),
        "eval_mask_loss": results.get("eval_mask_loss"),
        "summary": info.get("summary"),
    }


def run_mlm(model_args: ModelArguments, data_args: PretrainingDataArguments, training_args: TrainingArguments) -> dict:
    """`run_pretraining` of the checkpoint `model_args` names, as the variant it asks for (scripts/finetune_mlm.py)."""
    return run_pretraining(PretrainingArguments(**dataclasses.asdict(model_args)), data_args, training_args)


def pretraining_parser(prog: str = "hf-ffn mlm") -> HfArgumentParser:
    """The parser of `hf-ffn mlm`: `PretrainingArguments`, `PretrainingDataArguments`, `TrainingArguments`."""
    parser = HfArgumentParser(
        (PretrainingArguments, PretrainingDataArguments, TrainingArguments),
        prog=prog,
        description="Masked-language-model pre-training of an FfnBert variant, from scratch or "
        "continued from a checkpoint, with transformers' Trainer.",
    )
    parser.short_usage = f"{prog} --train_files FILES | --dataset_name NAME [OPTIONS]"  # `hf-ffn mlm --help`
    parser._option_string_actions["--output_dir"].help = (  # Trainer's help names its ./trainer_output
        f"Where the model, tokenizer, card, all_results.json and run_info.json are saved. Default: "
        f"{DEFAULT_OUTPUT_ROOT}/<checkpoint name> (or {DEFAULT_OUTPUT_ROOT}/scratch), or the same with -2, -3, ... "
        "when that folder holds a finished model. A folder given here that holds a finished model is refused."
    )
    return parser


def pretraining_main(argv: list[str], prog: str = "hf-ffn mlm") -> int:
    """`hf-ffn mlm`: `argv` parsed over its recipe's defaults, pre-training, the report printed. Returns 0; bad input
    ends as `prog: error: ...`, exit status 2."""
    with bad_input_exits(prog):
        parser = pretraining_parser(prog)
        name, recipe = recipe_defaults(parser, argv)
        config = recipe.pop(CONFIG_KEY, {})
        args, data_args, training_args = parse_arguments(parser, argv, defaults=recipe)
        given = given_options(parser, argv)
        if "output_dir" not in given:  # not Trainer's ./trainer_output
            folder = folder_name(args.model_name_or_path) if args.model_name_or_path else "scratch"
            training_args.output_dir = str(fresh_output_dir(DEFAULT_OUTPUT_ROOT / folder))
        used = _recipe_used(prog, name, recipe, config, given, args, training_args)
        outcome = run_pretraining(
            args, data_args, training_args, given=given, recipe={"name": name, **used} if name else {}
        )
    if training_args.process_index == 0:  # one report per torchrun job
        _print_outcome(outcome, training_args.output_dir)
    return 0


def _recipe_used(prog, name, recipe: dict, config: dict, given: set[str], args, training_args) -> dict:
    """The recipe's values the run takes (the options not given, the config fields `--config_overrides` leaves),
    printed as one line."""
    used = {option: value for option, value in recipe.items() if option not in given}
    config = {key: value for key, value in config.items() if key not in args.config_updates()}
    if config:
        used[CONFIG_KEY] = config
    if used and training_args.process_index == 0:
        shown = {**used, **({CONFIG_KEY: config_text(used[CONFIG_KEY])} if CONFIG_KEY in used else {})}
        options = " ".join(f"--{option} {value}" for option, value in shown.items())
        print(f"{prog}: recipe {name} (give an option to change it; --recipe none: none): {options}")
        warmup, steps = training_args.warmup_steps, training_args.max_steps
        if "warmup_steps" in used and 0 < steps <= warmup:
            print(
                f"{prog}: note: --max_steps {steps} ends within the recipe's warm-up of {warmup} steps: the "
                f"learning rate never reaches its peak (give --warmup_steps to shorten it)"
            )
    return used


def _print_outcome(outcome: dict, output_dir: str) -> None:
    print(json.dumps(outcome["results"], indent=2))
    if outcome["short_blocks"] is not None:
        first = outcome["short_blocks"]
        summary = first["summary"] or "not evaluated (cut after its checkpoint, before its save)"
        print(f"first phase, in {first['output_dir']}: {summary}")
    print(outcome["summary"])
    print(f"saved to {output_dir} (report: run_info.json)")
    print(LOAD_HINT.format(folder=output_dir))
