"""Masked-language-model pre-training of any FfnBert variant: from a config (no checkpoint), or continued from a
(converted) checkpoint, through the one MLM training path (`hf_ffn.mlm.trainer.mlm_trainer`: transformers' `Trainer`).

The recipe is BERT's (Devlin et al. 2019, sec. 3.1 and app. A.2), at a size one machine can run:

- a WordPiece tokenizer trained on the training documents with `tokenizers` (`train_tokenizer`; its vocabulary
  size is an option: at small model sizes the decoder over a 30k vocabulary costs more than the encoder), or an
  existing tokenizer (`--tokenizer_name`, or the checkpoint's);
- the data path of `hf_ffn.training.corpus`, through `datasets` (text, json or parquet files, compressed or not,
  tokenized once into a cache): corpus → documents (cut at empty lines, per file or by a regex) → blocks
  ([CLS] text [SEP] per document, concatenated, cut; optionally each document attending only to itself) → masks;
- BERT's masking, dynamic: 15% of the tokens, of which 80% [MASK], 10% a random token, 10% kept
  (`DataCollatorForLanguageModeling`; the three rates are options, e.g. ModernBERT's 30%);
- the MLM decoder tied to the word embeddings (`tie_word_embeddings`, BERT's default);
- a held-out split of whole documents (fixed by `--split_seed`) or `--validation_files`, evaluated on fixed
  maskings (`fixed_maskings`, `--eval_maskings` of them), so every evaluation of every run scores the same tokens;
- sparse prediction (`FfnBertConfig.sparse_prediction`, on by default here): during training the MLM head decodes
  only the masked positions (MosaicBERT, ModernBERT); the loss is the same;
- learning-rate schedule, warm-up, bf16, `--resume_from_checkpoint` and `torchrun`: `TrainingArguments`' own.
- every evaluation reports the loss on [MASK] positions, the token-weighted loss and MLM accuracy
  (`hf_ffn.mlm.metrics`, through `mlm_trainer`); every training log line tokens per second and achieved
  GFLOP/s (`hf_ffn.mlm.throughput`); `--config_overrides` (`run_mlm.py`'s, `config_overrides`) and
  `--early_stopping_patience` and `--stop_at_step` (`early_stopping`).

FFN width. Asked for a gated FFN (GeGLU, SwiGLU, ...) at a standard FFN width `--intermediate_size` I, the model
gets the parameter-matched width 2I/3 (Shazeer 2020, sec. 2: d_ff 3072 → 2048) by default, as the multiple of
`--glu_multiple_of` (8 by default) nearest to 2I/3 (`ffn_width`). `parameter_matched_glu_width`'s default, LLaMA's
rounding up to a multiple of 256, is made for widths in the thousands: at I = 1024 it gives 768 (+12.5% FFN
weights, which would favour the gated variants); the nearest multiple of 8 is 680 (−0.4%), of 64 it is 704
(+3.1%); 3072 → 2048 exactly. The run's report (`run_info.json` in the output folder, and one printed line) gives
the FFN's parameter count and FLOPs per token (`hf_ffn.params.config_row`) beside the standard FFN's at I.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch
from transformers import (
    AutoTokenizer,
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
    load_tokenizer,
    model_card,
    save_outputs,
    training_seconds,
)
from .arguments import (
    GLU_MULTIPLE_OF,
    SCRATCH_DEFAULTS,
    MlmDataArguments,
    PretrainingArguments,
    PretrainingDataArguments,
    ffn_width,
)
from .data import Phases, blocks_and_maskings, context_free_floors, corpus_documents, materialise
from .early_stopping import StopAtStep, check_stop_at_step, early_stopping_callback
from .floors import plateau_verdict
from .initialisation import ffn_output_rms, seed_by_name
from .recipe import CONFIG_KEY, config_text, recipe_defaults
from .report import card_notes, ffn_report, run_report, summary_line
from .speed import apply_speed_defaults, options_given_by_value, use_bf16_where_available
from .throughput import ThroughputCallback
from .tokenizer import train_tokenizer
from .trainer import absent_head_warning_dropped, mlm_trainer, new_mlm_head_note
from .warmup import (
    check_first_phase_folder,
    check_short_blocks,
    first_phase_arguments,
    first_phase_done,
    second_phase_arguments,
)

logger = hf_logging.get_logger(__name__)

DEFAULT_OUTPUT_ROOT = Path("out") / "mlm"  # --output_dir left out: a fresh folder under it (`fresh_output_dir`)
INIT_RMS_BLOCKS = 8  # training blocks the FFN output rms at the start is measured on (`ffn_output_rms`)
TOKENIZER_FOLDER = "tokenizer"  # where a trained tokenizer is saved in --output_dir as soon as it is trained
# How to load the saved folder. Its config.json has an `auto_map` (remote code: it loads without hf_ffn with
# trust_remote_code=True), so transformers' AutoTokenizer, which resolves the folder's config first, asks about
# remote code unless hf_ffn is imported or trust_remote_code is given (docs/conversion.md, "Without hf_ffn").
LOAD_HINT = (
    "load it: import hf_ffn, then AutoModelForMaskedLM.from_pretrained({folder!r}) and AutoTokenizer.from_pretrained"
    "({folder!r}); without hf_ffn: AutoModelForMaskedLM.from_pretrained({folder!r}, trust_remote_code=True) and "
    "AutoTokenizer.from_pretrained({folder!r}, trust_remote_code=False)"
)


def pretraining_config(
    args: PretrainingArguments,
    tokenizer: PreTrainedTokenizerBase,
    max_seq_length: int,
    recipe_config: dict | None = None,
) -> FfnBertConfig:
    """The from-scratch `FfnBertConfig` of `args`: its sizes (or `SCRATCH_DEFAULTS`), the FFN width from
    `ffn_width`, the tokenizer's vocabulary size and pad id, BERT's 512 positions (more if a block is longer), and
    `--config_overrides` (`args.config_updates()`) over the recipe's config fields (`recipe_config`).

    Raises:
        ValueError: on sizes a model cannot be built with (e.g. hidden size not divisible by the heads).
    """
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
        max_position_embeddings=scratch_positions(max_seq_length),
        **{**(recipe_config or {}), **args.config_updates()},
    )
    config.check_model_fields()
    return config


def scratch_positions(max_seq_length: int) -> int:
    """A from-scratch model's `max_position_embeddings`: BERT's 512, or the block length when it is longer. The
    tokenizer trained with it truncates to the same length (its `model_max_length`)."""
    return max(512, max_seq_length)


def _tokenizer(
    args: PretrainingArguments,
    train_docs,
    training_args: TrainingArguments,
    resume: str | None,
    max_seq_length: int,
) -> tuple[PreTrainedTokenizerBase, str]:
    """The run's tokenizer and where it came from. A resumed run takes the one Trainer saved with its checkpoint;
    a trained one is trained by process 0 (every other process waits, then loads it) and saved at once in
    `output_dir/tokenizer`, so every process of a `torchrun` job uses the same vocabulary; it truncates to the
    model's positions (`scratch_positions(max_seq_length)`)."""
    if resume is not None and (Path(resume) / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(resume), f"from the checkpoint {resume}"
    if args.tokenizer_name is not None or args.model_name_or_path is not None:
        return load_tokenizer(args.model_arguments()), args.tokenizer_name or args.model_name_or_path
    folder = Path(training_args.output_dir) / TOKENIZER_FOLDER
    with training_args.main_process_first(local=False, desc="training the tokenizer"):
        if training_args.process_index == 0:
            trained = train_tokenizer(train_docs, args.scratch("vocab_size"))
            trained.model_max_length = scratch_positions(max_seq_length)  # else 1e30: truncation=True never cuts
            trained.save_pretrained(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    return tokenizer, f"WordPiece trained on the training documents ({args.scratch('vocab_size')} asked)"


@one_run_per_output_dir(disposable=("tokenizer", "short_blocks/"))  # TOKENIZER_FOLDER, FIRST_PHASE_FOLDER
def run_pretraining(
    args: PretrainingArguments,
    data_args: PretrainingDataArguments,
    training_args: TrainingArguments,
    callbacks: list[TrainerCallback] | None = None,
    given: set[str] | None = None,
    recipe: dict | None = None,
) -> dict:
    """Pre-train an `FfnBertForMaskedLM` (from scratch, or continued from `args.model_name_or_path`) on plain text.

    The data path is `hf_ffn.training.corpus`'s: corpus → documents (`load_corpus`: whole documents held out,
    `validation_split_percentage` seeded by `split_seed`, or `validation_files`) → blocks (`documents_to_blocks`)
    → masks (`fixed_maskings` for the held-out blocks; training batches masked afresh). The tokenizer is trained on
    the training documents only. Held-out loss = mean cross-entropy (nats) over the masked tokens of the held-out
    blocks masked `eval_maskings` times (seeds `split_seed`, +1, ...); perplexity = exp(loss). Evaluated before
    training (not when resuming) and after. The finished model, tokenizer, model card, `all_results.json` and
    `run_info.json` (the report: model sizes, FFN parameters and FLOPs per token, tokenizer, documents, blocks,
    tokens seen and epochs) are written to `output_dir`; the model's `config.json` keeps `sparse_prediction` off (an
    execution choice).

    Resuming (`--resume_from_checkpoint`) restores weights, optimizer, scheduler, RNG states and the tokenizer. At
    an epoch boundary the resumed run repeats the uninterrupted one bit for bit; within an epoch the batch after
    the checkpoint gets other masks (training masks come from the global torch RNG as a batch is collated, and
    accelerate's data loader collates one batch ahead of the RNG state a checkpoint saves): same blocks, steps and
    schedule, other random masks.

    Two runs with the same seed and data see the same blocks in the same order with the same training masks,
    whatever their FFN type or LayerNorm placement: the global RNG is seeded again after the model is built
    (Trainer's `set_seed`), and every variant draws the same random numbers per step (dropout shapes do not depend
    on the FFN). `callbacks`: extra `TrainerCallback`s for the run's Trainer. `recipe`: the recipe's name and
    the values the run took from it (`pretraining_main`: `hf_ffn.mlm.recipe`), recorded in `run_info.json`; its
    `config_overrides` fill the config fields `--config_overrides` leaves out. Each phase of the data path prints one
    line with its seconds (`Phases`; `phase_seconds` in the report). A run from scratch whose held-out [MASK] loss ends
    less than `PLATEAU_MARGIN` nats below the unigram floor says so on its summary line (`plateau` in the report).

    With `data_args.short_block_length` (a sequence-length warm-up, `hf_ffn.mlm.warmup`) the first
    `short_block_steps` steps run first as a run of their own on blocks of that length in `output_dir/short_blocks`,
    and this run resumes from its checkpoint at blocks of `max_seq_length`; the report's `short_blocks` says so.

    With `data_args.dataset_name` the corpus is a `datasets` data set (`load_hub_corpus`); with `streaming` it is
    read as training reads it: training blocks tokenized and cut on the fly and trained on in the data set's order
    (as `run_mlm.py`; datasets' `IterableDataset.shuffle` grew with the files of the data set, 11 → 54 MB of traced
    memory for 1 → 8 files measured here, so a stream is not shuffled: shuffle it beforehand), the
    held-out blocks kept in memory, the floors' unigram counted on the first `STREAM_FLOOR_BLOCKS` training blocks
    (`hf_ffn.mlm.data`).

    `given`: the option names the user gave (`given_options` of the command line); None: those whose values
    differ from their defaults. On a CUDA device, with `args.speed_defaults`, the options of
    `hf_ffn.mlm.speed.device_speed_defaults` that are not given are set (and logged once); bf16 where the
    device supports it (`args.bf16_where_available`) unless `--bf16` was given (`--bf16 false`: fp32).

    Returns:
        `{"results": metrics, "log_history": [...], "summary": one line, **report}`.

    Raises:
        FileNotFoundError, FileExistsError, ValueError: on bad input, before training starts.
    """
    start = time.perf_counter()
    first_phase = None
    if data_args.short_block_length is not None:  # a sequence-length warm-up: its first phase, then the run
        first_phase = _first_phase(args, data_args, training_args, callbacks, given, recipe)
        data_args, training_args = second_phase_arguments(data_args, training_args)
    outcome = _train(args, data_args, training_args, callbacks, given, recipe, first_phase)
    return {**outcome, "wall_seconds": time.perf_counter() - start}


def _train(args, data_args, training_args, callbacks, given, recipe, first_phase: dict | None = None) -> dict:
    """One Trainer run of `run_pretraining` (the whole run, or one phase of a warm-up): check, read, build, train,
    evaluate, save; `first_phase`: what the warm-up's first phase reported (`_first_phase`)."""
    start = time.perf_counter()
    resume, stopping = _check_arguments(args, data_args, training_args)
    given = options_given_by_value(args, data_args, training_args) if given is None else given
    speed = apply_speed_defaults((args,), training_args, given) if args.speed_defaults else {}
    phases = Phases(show=training_args.process_index == 0)
    documents = corpus_documents(data_args, phases)
    tokenizer, tokenizer_source = _tokenizer(args, documents["train"], training_args, resume, data_args.max_seq_length)
    if args.tokenizer_name is None and args.model_name_or_path is None and resume is None:
        phases.done("tokenizer", f"trained a WordPiece tokenizer of {len(tokenizer):,} tokens")
    train, evaluation = blocks_and_maskings(documents, tokenizer, data_args, phases)
    floors = context_free_floors(train, evaluation, tokenizer, data_args)
    phases.done("floors", f"context-free floors: unigram at [MASK] {floors['unigram_mask']:.4f} nats")
    data_seconds = time.perf_counter() - start  # reading, the tokenizer, tokenizing, blocks, maskings (or the cache)
    model, built = _model(args, tokenizer, data_args, training_args, resume, (recipe or {}).get(CONFIG_KEY))
    check_resume_matches(model.config, resume)
    first = materialise(train, INIT_RMS_BLOCKS)
    init_rms = ffn_output_rms(model, torch.tensor(first[:INIT_RMS_BLOCKS]["input_ids"], dtype=torch.long))
    bf16 = use_bf16_where_available(training_args, given) if args.bf16_where_available else training_args.bf16
    throughput = ThroughputCallback(
        mlm_flops(model.config, data_args.max_seq_length), args.sparse_prediction, tokenizer.pad_token_id
    )
    trainer = mlm_trainer(
        model,
        tokenizer,
        train,
        evaluation,
        training_args,
        seed=data_args.split_seed,
        padding_free=args.padding_free,
        callbacks=[
            *([throughput] if args.log_throughput else []),
            *(callbacks or []),
            *([StopAtStep(args.stop_at_step)] if args.stop_at_step else []),
        ],
        **data_args.masking_options(),
        fixed_prediction_rows=args.sparse_prediction and args.fixed_prediction_rows,
    )
    # read before training: the Trainer may delete the checkpoint it resumed from (--save_total_limit)
    resumed_from_step = checkpoint_step(resume)
    results, train_seconds = _train_and_evaluate(trainer, resume, stopping, resumed_from_step)
    report = run_report(
        args, data_args, training_args, trainer, built, documents, (train, evaluation), train_seconds, resumed_from_step
    )
    report |= {"tokenizer": {"source": tokenizer_source, "vocab_size": len(tokenizer)}, "bf16": bool(bf16)}
    report["speed_defaults"] = speed
    report["floors"] = floors
    report["ffn_output_rms_at_start"] = init_rms
    report["data_seconds"] = data_seconds
    report["phase_seconds"] = phases.seconds
    report["recipe"] = recipe or {}
    report["short_blocks"] = first_phase
    report["resumed_from"] = resume
    stop = args.stop_at_step  # not reached in a warm-up's first phase, nor after an earlier early stop
    reached = trainer.state.global_step == stop
    report["stop_at_step"] = (
        None if stop is None else {"step": stop, "max_steps": training_args.max_steps, "reached": reached}
    )
    from_scratch = args.model_name_or_path is None
    report["plateau"] = plateau_verdict(results["eval_mask_loss"], floors["unigram_mask"]) if from_scratch else None
    report["summary"] = summary_line(report, model.config, built["standard_width"], results["eval_loss"], results)
    _save(args, data_args, training_args, trainer, tokenizer, results, report, built)
    return {"results": results, "log_history": trainer.state.log_history, **report}


def _first_phase(args, data_args, training_args, callbacks, given, recipe) -> dict:
    """A sequence-length warm-up's first phase (`hf_ffn.mlm.warmup`): trained in
    `output_dir/short_blocks` up to its `checkpoint-K` (skipped when a resumed run finds it there); what
    `run_info.json` keeps of it (`short_blocks`: block length, steps, batch, folder, its held-out [MASK] loss on
    blocks of that length and its summary line)."""
    check_output_dir(training_args.output_dir, training_args.resume_from_checkpoint)
    from_scratch = args.model_name_or_path is None
    check_short_blocks(data_args, training_args, from_scratch, args.early_stopping_patience)
    check_stop_at_step(args.stop_at_step, training_args, data_args.short_block_steps)
    short_data, short_training = first_phase_arguments(data_args, training_args)
    folder = Path(short_training.output_dir)
    info = check_first_phase_folder(data_args, training_args)
    if not first_phase_done(data_args, training_args):
        stop = StopAtStep(data_args.short_block_steps)
        _train(args, short_data, short_training, [*(callbacks or []), stop], given, recipe)
        info = json.loads((folder / "run_info.json").read_text())
    results = json.loads((folder / "all_results.json").read_text()) if (folder / "all_results.json").is_file() else {}
    if not info:  # cut after its checkpoint-K, before its final evaluation and save
        logger.warning(
            f"{folder}: the first phase has its checkpoint-{data_args.short_block_steps} but no final evaluation "
            f"(cut before its save); run_info.json's short_blocks has no loss or summary for it"
        )
    return {
        "short_block_length": short_data.max_seq_length,
        "short_block_steps": data_args.short_block_steps,
        "batch_size": short_training.per_device_train_batch_size,
        "output_dir": str(folder),
        "eval_mask_loss": results.get("eval_mask_loss"),
        "summary": info.get("summary"),
    }


def _check_arguments(args: PretrainingArguments, data_args: PretrainingDataArguments, training_args: TrainingArguments):
    """Check the output folder, the numeric training options (`check_numeric_options`), the early-stopping options
    and the checkpoint before anything is read; returns the checkpoint to resume from and the
    `EarlyStoppingCallback` (None without `--early_stopping_patience`)."""
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


def _model(
    args: PretrainingArguments,
    tokenizer: PreTrainedTokenizerBase,
    data_args: PretrainingDataArguments,
    training_args: TrainingArguments,
    resume: str | None = None,
    recipe_config: dict | None = None,
) -> tuple[FfnBertForMaskedLM, dict]:
    """The model to train, built from scratch or loaded from the checkpoint (after seeding the global RNG with
    `training_args.seed`: the same initial weights for the same seed), and what was built: `conversion`,
    `saved_unpad` (the `unpad_tokens` the saved config gets), `head_note`, `standard_width`. The note on a new MLM
    head is logged unless the run resumes from `resume` (Trainer then loads the head trained since; the note was
    logged at the run's start, and the report still says the head was newly initialised).

    Raises:
        ValueError: a `--tokenizer_name` with more tokens than the checkpoint's vocabulary.
    """
    set_seed(training_args.seed)
    if args.model_name_or_path is None:
        model = FfnBertForMaskedLM(pretraining_config(args, tokenizer, data_args.max_seq_length, recipe_config))
        if args.seed_modules_by_name:
            seed_by_name(model, training_args.seed)
        built = {"conversion": {"conversion": "from scratch", "new_weights": "all"}, "saved_unpad": False}
        built |= {"head_note": None, "standard_width": args.scratch("intermediate_size")}
    else:
        with absent_head_warning_dropped():
            model, conversion = load_model(args.model_arguments(), FfnBertForMaskedLM, **args.config_updates())
        head_note = new_mlm_head_note(
            conversion.get("new_weights", conversion.get("new", [])), args.model_name_or_path, model.config.vocab_size
        )
        if head_note and resume is None:
            logger.warning(head_note)
        built = {"conversion": conversion, "saved_unpad": checkpoint_unpad_tokens(args.model_name_or_path)}
        built |= {"head_note": head_note, "standard_width": None}
        if len(tokenizer) > model.config.vocab_size:
            raise ValueError(
                f"--tokenizer_name {args.tokenizer_name!r} has {len(tokenizer)} tokens, more than the "
                f"checkpoint's vocab_size {model.config.vocab_size}"
            )
    model.config.sparse_prediction = args.sparse_prediction  # read at every forward, like unpad_tokens
    model.config.unpad_tokens = args.unpad_tokens
    return model, built


def _train_and_evaluate(
    trainer: Trainer, resume: str | None, stopping: TrainerCallback | None, resumed_from_step: int = 0
) -> tuple[dict, float]:
    """Evaluate (not when resuming: "before" metrics), train (with the early-stopping callback `stopping`, if any),
    evaluate again; returns the metrics with the perplexities (exp of the losses) and the training seconds (without
    the evaluations)."""
    before = {} if resume else trainer.evaluate(metric_key_prefix="before")
    if stopping is not None:  # after the "before" evaluation, which it would misread (no eval_ metrics)
        trainer.add_callback(stopping)
    train_output = trainer.train(resume_from_checkpoint=resume)
    # before the final evaluation, whose runtime is not training (it joins the log history); a resumed run's time is
    # this process's only, over its steps after the checkpoint (`resumed_from_step` in the report)
    train_seconds = training_seconds(
        trainer.state.log_history, train_output.metrics["train_runtime"], resumed_from_step
    )
    after = final_evaluation(trainer)
    results = {**before, **train_output.metrics, **after}  # the run's epoch, not the 'before' evaluation's 0
    if before:
        results["before_perplexity"] = math.exp(before["before_loss"])
    results["eval_perplexity"] = math.exp(after["eval_loss"])
    return results, train_seconds


def _save(args, data_args, training_args, trainer, tokenizer, results: dict, report: dict, built: dict) -> None:
    """The finished run in `output_dir` (`save_outputs`): model (its config with `sparse_prediction` off: upstream
    `BertForMaskedLM`'s outputs), tokenizer, model card, `all_results.json`, `run_info.json`."""
    model = trainer.model
    card = model_card(
        _card_arguments(args, model.config),
        training_args,
        "fill-mask",
        data_args.dataset_name or ", ".join(data_args.train_files),
        results,
        built["conversion"],
        ("perplexity",),
        model.config,
        notes=card_notes(report),
    )
    model.config.sparse_prediction = False
    save_outputs(trainer, tokenizer, card, results, report, training_args.output_dir, unpad_tokens=built["saved_unpad"])


def _card_arguments(args: PretrainingArguments, config: FfnBertConfig) -> ModelArguments:
    """The model arguments the model card names: the checkpoint's, or (from scratch) what was built."""
    if args.model_name_or_path is not None:
        return args.model_arguments()
    return ModelArguments(
        model_name_or_path=None,  # the card: "Pre-trained from scratch"
        ffn_type=config.ffn_type,
        layer_norm_position=config.layer_norm_position,
        ffn_width=str(config.intermediate_size),
    )


def run_mlm(model_args: ModelArguments, data_args: MlmDataArguments, training_args: TrainingArguments) -> dict:
    """Masked-language-model training of a checkpoint (as any variant) on plain text; perplexity before and after:
    `run_pretraining` with `--model_name_or_path` (the one MLM run; `hf-ffn mlm`).

    Whole documents are held out for validation (seeded). Perplexity = exp(mean masked-token cross-entropy) on
    the validation blocks masked once with `split_seed` (15% of tokens, BERT's 80/10/10 rule), so the two
    numbers are comparable. A checkpoint without an MLM head (e.g. a sentence-embedding BERT) gets a newly
    initialised head, listed in the returned `conversion["new_weights"]`, and a very high perplexity before.

    Raises:
        FileNotFoundError, FileExistsError, ValueError: on bad input, before training starts.
    """
    args = PretrainingArguments(
        model_name_or_path=model_args.model_name_or_path,
        tokenizer_name=model_args.tokenizer_name,
        ffn_type=model_args.ffn_type,
        layer_norm_position=model_args.layer_norm_position,
        ffn_width=model_args.ffn_width,
        ffn_init=model_args.ffn_init,
        unpad_tokens=model_args.unpad_tokens,
        padding_free=model_args.padding_free,
    )
    if not isinstance(data_args, PretrainingDataArguments):  # the text options' defaults for the rest
        data_args = PretrainingDataArguments(**vars(data_args))
    return run_pretraining(args, data_args, training_args)


def pretraining_parser(prog: str = "hf-ffn mlm") -> HfArgumentParser:
    """The `HfArgumentParser` of `pretraining_main`: `PretrainingArguments`, `PretrainingDataArguments`,
    `TrainingArguments` (defaults shown in `--help`)."""
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
    """`hf-ffn mlm`: the recipe `argv` asks for (`recipe_defaults`: from scratch, `--recipe auto` picks one) as the
    parser's defaults, `argv` (or one `.json` file of arguments) parsed over them, the recipe's values the run takes
    printed as one line, pre-training (`run_pretraining`), the report's line and where the model went. Returns 0;
    bad input ends as `prog: error: ...`, exit status 2."""
    with bad_input_exits(prog):
        parser = pretraining_parser(prog)
        name, recipe = recipe_defaults(parser, argv)
        config = recipe.pop(CONFIG_KEY, {})
        args, data_args, training_args = parse_arguments(parser, argv, defaults=recipe)
        given = given_options(parser, argv)
        if "output_dir" not in given:  # not Trainer's ./trainer_output
            folder = folder_name(args.model_name_or_path) if args.model_name_or_path else "scratch"
            training_args.output_dir = str(fresh_output_dir(DEFAULT_OUTPUT_ROOT / folder))
        used = {option: value for option, value in recipe.items() if option not in given}
        if {key: value for key, value in config.items() if key not in args.config_updates()}:
            used[CONFIG_KEY] = {key: value for key, value in config.items() if key not in args.config_updates()}
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
        recipe_used = {"name": name, **used} if name else {}
        outcome = run_pretraining(args, data_args, training_args, given=given, recipe=recipe_used)
    if training_args.process_index == 0:  # one report per torchrun job
        print(json.dumps(outcome["results"], indent=2))
        if outcome["short_blocks"] is not None:
            first = outcome["short_blocks"]
            summary = first["summary"] or "not evaluated (cut after its checkpoint, before its save)"
            print(f"first phase, in {first['output_dir']}: {summary}")
        print(outcome["summary"])
        print(f"saved to {training_args.output_dir} (report: run_info.json)")
        print(LOAD_HINT.format(folder=training_args.output_dir))
    return 0


__all__ = [
    "GLU_MULTIPLE_OF",
    "SCRATCH_DEFAULTS",
    "PretrainingArguments",
    "PretrainingDataArguments",
    "ffn_report",
    "ffn_width",
    "pretraining_config",
    "pretraining_main",
    "pretraining_parser",
    "run_mlm",
    "run_pretraining",
    "train_tokenizer",
    "use_bf16_where_available",
]
