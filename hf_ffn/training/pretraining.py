"""Masked-language-model pre-training of any FfnBert variant: from a config (no checkpoint), or continued from a
(converted) checkpoint, through the one MLM training path (`hf_ffn.training.mlm.mlm_trainer`: transformers' `Trainer`).

The recipe is BERT's (Devlin et al. 2019, sec. 3.1 and app. A.2), at a size one machine can run:

- a WordPiece tokenizer trained on the training documents with `tokenizers` (`train_tokenizer`; its vocabulary
  size is an option: at small model sizes the decoder over a 30k vocabulary costs more than the encoder), or an
  existing tokenizer (`--tokenizer_name`, or the checkpoint's);
- documents packed into fixed-length blocks (`mlm_blocks`: [CLS] text [SEP] per document, concatenated, cut);
- BERT's masking, dynamic: 15% of the tokens, of which 80% [MASK], 10% a random token, 10% kept
  (`DataCollatorForLanguageModeling`);
- the MLM decoder tied to the word embeddings (`tie_word_embeddings`, BERT's default);
- a held-out split of whole documents (fixed by `--split_seed`), evaluated on one fixed masking (`mask_once`), so
  every evaluation of every run scores the same masked tokens;
- sparse prediction (`FfnBertConfig.sparse_prediction`, on by default here): during training the MLM head decodes
  only the masked positions (MosaicBERT, ModernBERT); the loss is the same;
- learning-rate schedule, warm-up, bf16, `--resume_from_checkpoint` and `torchrun`: `TrainingArguments`' own.
- every evaluation reports the loss on [MASK] positions, the token-weighted loss and MLM accuracy
  (`hf_ffn.training.mlm_metrics`, through `mlm_trainer`); every training log line tokens per second and achieved
  GFLOP/s (`hf_ffn.training.throughput`); `--config_overrides` (`run_mlm.py`'s, `config_overrides`) and
  `--early_stopping_patience` (`early_stopping`).

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
import re
import time
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import (
    AutoTokenizer,
    BertTokenizer,
    HfArgumentParser,
    PreTrainedTokenizerBase,
    TrainerCallback,
    TrainingArguments,
    set_seed,
)
from transformers.utils import logging as hf_logging

from ..configuration_ffn_bert import FfnBertConfig, is_gated, parameter_matched_glu_width
from ..conversion.recipes import parse_width
from ..modeling_ffn_bert import FfnBertForMaskedLM
from ..params import config_row, mlm_flops
from .arguments import MlmDataArguments, ModelArguments, bad_input_exits, parse_arguments, resume_checkpoint
from .data import mlm_blocks, read_text_documents
from .early_stopping import early_stopping_callback
from .mlm import absent_head_warning_dropped, held_out_split, mlm_trainer, new_mlm_head_note
from .outputs import (
    check_checkpoint,
    check_output_dir,
    checkpoint_unpad_tokens,
    final_evaluation,
    load_model,
    load_tokenizer,
    model_card,
    save_outputs,
    training_seconds,
)
from .pretraining_arguments import GLU_MULTIPLE_OF, SCRATCH_DEFAULTS, PretrainingArguments, PretrainingDataArguments
from .throughput import ThroughputCallback

logger = hf_logging.get_logger(__name__)

TOKENIZER_FOLDER = "tokenizer"  # where a trained tokenizer is saved in --output_dir as soon as it is trained


def train_tokenizer(documents: list[str], vocab_size: int = 8192) -> PreTrainedTokenizerBase:
    """BERT's uncased WordPiece tokenizer (`BertTokenizer`: lower-casing, accent stripping, BERT's pre-tokenizer and
    special tokens [PAD] [UNK] [CLS] [SEP] [MASK]) trained from scratch on `documents` with `tokenizers`' WordPiece
    trainer (`train_new_from_iterator`). The vocabulary has `vocab_size` entries, special tokens included, or fewer
    when the text has fewer distinct pieces. Not deterministic: two trainings on the same text may number the
    pieces differently (`run_pretraining` trains on process 0 only and every other process loads its result)."""
    return BertTokenizer().train_new_from_iterator(documents, vocab_size=vocab_size)


def split_documents(texts: list[str], start_regex: str | None) -> list[str]:
    """Each text cut where `start_regex` (compiled with `re.MULTILINE`) matches: one document from each match to
    the next (text before the first match is a document of its own); blank pieces dropped. `None`: `texts` as they
    are. E.g. WikiText's articles start at a line ` = Title = `: `start_regex="^ = [^=]"`."""
    if start_regex is None:
        return list(texts)
    pattern = re.compile(start_regex, re.MULTILINE)
    documents = []
    for text in texts:
        bounds = sorted({0, len(text)} | {match.start() for match in pattern.finditer(text)})
        documents += [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if text[a:b].strip()]
    return documents


def ffn_width(
    ffn_type: str, intermediate_size: int, width: str | int = "matched", multiple_of: int = GLU_MULTIPLE_OF
) -> int:
    """The FFN width (`intermediate_size` of the config: what enters `down_proj`) of a from-scratch `ffn_type`
    compared with a standard FFN of width `intermediate_size`.

    `width`: "matched" (a gated FFN gets the multiple of `multiple_of` nearest to 2/3 of `intermediate_size`, the
    width with the standard FFN's weight count: 3·d·w = 2·d·I; a tie goes up, to
    `parameter_matched_glu_width(intermediate_size, multiple_of)`; a standard FFN keeps `intermediate_size`),
    "keep" (`intermediate_size` for every type) or an int (that width). Examples with `multiple_of=8`: 1024 → 680
    (2/3 is 682.7; 688 would be +0.8% weights, 680 is −0.4%), 3072 → 2048, 4096 → 2728.

    Raises:
        ValueError: on a `width` that is not "keep", "matched" or a positive int (naming --ffn_width).
    """
    width = parse_width(width, "--ffn_width")
    if isinstance(width, int):
        return width
    if width == "matched" and is_gated(ffn_type):
        upper = parameter_matched_glu_width(intermediate_size, multiple_of)  # rounded up
        lower, exact = upper - multiple_of, 2 * intermediate_size / 3
        return lower if lower > 0 and exact - lower < upper - exact else upper
    return intermediate_size


def pretraining_config(
    args: PretrainingArguments, tokenizer: PreTrainedTokenizerBase, max_seq_length: int
) -> FfnBertConfig:
    """The from-scratch `FfnBertConfig` of `args`: its sizes (or `SCRATCH_DEFAULTS`), the FFN width from
    `ffn_width`, the tokenizer's vocabulary size and pad id, BERT's 512 positions (more if a block is longer), and
    `--config_overrides` (`args.config_updates()`).

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
        max_position_embeddings=max(512, max_seq_length),
        **args.config_updates(),
    )
    config.check_model_fields()
    return config


def ffn_report(config: FfnBertConfig, standard_width: int | None = None) -> dict:
    """The FFN of `config` counted (`hf_ffn.params.config_row`): type, width, weights and biases per layer, all
    layers' FFN parameters, forward FLOPs per token (matrix products, a multiply-add = 2) per layer and over all
    layers, and the encoder model's parameters. With `standard_width`, the same for the standard FFN
    (`config.hidden_act`) at that width under `"standard"`, and the ratio of FFN parameters."""
    row = asdict(config_row(config, "this model"))
    row.pop("model")
    row["ffn_flops_per_token_all_layers"] = row["ffn_flops_per_token"] * config.num_hidden_layers
    if standard_width is not None and (config.ffn_types[0], config.intermediate_size) != (
        config.hidden_act,
        standard_width,
    ):
        reference = config_row(
            FfnBertConfig.from_dict(
                {**config.to_dict(), "ffn_type": config.hidden_act, "intermediate_size": standard_width}
            ),
            "standard",
        )
        row["standard"] = {key: value for key, value in asdict(reference).items() if key != "model"}
        row["ffn_params_vs_standard"] = row["ffn_params_all_layers"] / reference.ffn_params_all_layers
    return row


def use_bf16_where_available(training_args: TrainingArguments) -> bool:
    """Switch `training_args` to bf16 mixed precision (`bf16`, and `mixed_precision`, which `TrainingArguments`
    derives from it at construction) when neither `bf16` nor `fp16` was asked for and a CUDA device supports bf16.
    Returns whether the run trains in bf16."""
    if (
        not (training_args.bf16 or training_args.fp16 or training_args.use_cpu)
        and torch.cuda.is_available()
        and torch.cuda.is_bf16_supported()
    ):
        training_args.bf16 = True
        training_args.mixed_precision = "bf16"
    return bool(training_args.bf16)


def _tokenizer(
    args: PretrainingArguments, train_docs: list[str], training_args: TrainingArguments, resume: str | None
) -> tuple[PreTrainedTokenizerBase, str]:
    """The run's tokenizer and where it came from. A resumed run takes the one Trainer saved with its checkpoint;
    a trained one is trained by process 0 (every other process waits, then loads it) and saved at once in
    `output_dir/tokenizer`, so every process of a `torchrun` job uses the same vocabulary."""
    if resume is not None and (Path(resume) / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(resume), f"from the checkpoint {resume}"
    if args.tokenizer_name is not None or args.model_name_or_path is not None:
        return load_tokenizer(args.model_arguments()), args.tokenizer_name or args.model_name_or_path
    folder = Path(training_args.output_dir) / TOKENIZER_FOLDER
    with training_args.main_process_first(local=False, desc="training the tokenizer"):
        if training_args.process_index == 0:
            train_tokenizer(train_docs, args.scratch("vocab_size")).save_pretrained(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    return tokenizer, f"WordPiece trained on the training documents ({args.scratch('vocab_size')} asked)"


def run_pretraining(
    args: PretrainingArguments,
    data_args: PretrainingDataArguments,
    training_args: TrainingArguments,
    callbacks: list[TrainerCallback] | None = None,
) -> dict:
    """Pre-train an `FfnBertForMaskedLM` (from scratch, or continued from `args.model_name_or_path`) on plain text.

    Whole documents are held out (`validation_split_percentage`, seeded by `split_seed`); the tokenizer is trained
    on the training documents only. Held-out loss = mean cross-entropy (nats) over the masked tokens of the
    held-out blocks masked once with `split_seed`; perplexity = exp(loss). Evaluated before training (not when
    resuming) and after. The finished model, tokenizer, model card, `all_results.json` and `run_info.json` (the
    report: model sizes, FFN parameters and FLOPs per token, tokenizer, documents, blocks, tokens seen and epochs)
    are written to `output_dir`; the model's `config.json` keeps `sparse_prediction` off (an execution choice).

    Resuming (`--resume_from_checkpoint`) restores weights, optimizer, scheduler, RNG states and the tokenizer. At
    an epoch boundary the resumed run repeats the uninterrupted one bit for bit; within an epoch the batch after
    the checkpoint gets other masks (training masks come from the global torch RNG as a batch is collated, and
    accelerate's data loader collates one batch ahead of the RNG state a checkpoint saves): same blocks, steps and
    schedule, other random masks.

    Two runs with the same seed and data see the same blocks in the same order with the same training masks,
    whatever their FFN type or LayerNorm placement: the global RNG is seeded again after the model is built
    (Trainer's `set_seed`), and every variant draws the same random numbers per step (dropout shapes do not depend
    on the FFN). `callbacks`: extra `TrainerCallback`s for the run's Trainer.

    Returns:
        `{"results": metrics, "log_history": [...], "summary": one line, **report}`.

    Raises:
        FileNotFoundError, FileExistsError, ValueError: on bad input, before training starts.
    """
    start = time.perf_counter()
    check_output_dir(training_args.output_dir)
    resume = resume_checkpoint(training_args)
    stopping = early_stopping_callback(args.early_stopping_patience, args.early_stopping_threshold, training_args)
    if args.model_name_or_path is not None:
        check_checkpoint(args.model_name_or_path, "--model_name_or_path")
    files = read_text_documents(data_args.train_files, data_args.file_pattern)
    documents = split_documents([text for _, text in files], data_args.document_start_regex)
    train_docs, eval_docs = held_out_split(documents, data_args.validation_split_percentage, data_args.split_seed)
    tokenizer, tokenizer_source = _tokenizer(args, train_docs, training_args, resume)
    train = mlm_blocks(train_docs, tokenizer, data_args.max_seq_length)
    evaluation = mlm_blocks(eval_docs, tokenizer, data_args.max_seq_length)
    if len(train) == 0 or len(evaluation) == 0:
        raise ValueError(
            f"--max_seq_length {data_args.max_seq_length}: the training or held-out text is shorter "
            f"than one block ({len(train)} and {len(evaluation)} blocks)"
        )
    if data_args.max_train_samples:
        train = train.select(range(min(data_args.max_train_samples, len(train))))
    if data_args.max_eval_samples:
        evaluation = evaluation.select(range(min(data_args.max_eval_samples, len(evaluation))))

    set_seed(training_args.seed)  # the same initial weights for the same seed
    if args.model_name_or_path is None:
        model = FfnBertForMaskedLM(pretraining_config(args, tokenizer, data_args.max_seq_length))
        conversion, saved_unpad, head_note = {"conversion": "from scratch", "new_weights": "all"}, False, None
        standard_width = args.scratch("intermediate_size")
    else:
        with absent_head_warning_dropped():
            model, conversion = load_model(args.model_arguments(), FfnBertForMaskedLM, **args.config_updates())
        head_note = new_mlm_head_note(
            conversion.get("new_weights", conversion.get("new", [])), args.model_name_or_path, model.config.vocab_size
        )
        if head_note:
            logger.warning(head_note)
        saved_unpad, standard_width = checkpoint_unpad_tokens(args.model_name_or_path), None
        if len(tokenizer) > model.config.vocab_size:
            raise ValueError(
                f"--tokenizer_name {args.tokenizer_name!r} has {len(tokenizer)} tokens, more than the "
                f"checkpoint's vocab_size {model.config.vocab_size}"
            )
    model.config.sparse_prediction = args.sparse_prediction  # read at every forward, like unpad_tokens
    model.config.unpad_tokens = args.unpad_tokens
    bf16 = use_bf16_where_available(training_args)
    throughput = ThroughputCallback(
        mlm_flops(model.config, data_args.max_seq_length), args.sparse_prediction, tokenizer.pad_token_id
    )
    trainer = mlm_trainer(
        model,
        tokenizer,
        train,
        evaluation,
        training_args,
        data_args.mlm_probability,
        data_args.split_seed,
        padding_free=args.padding_free,
        callbacks=[*([throughput] if args.log_throughput else []), *(callbacks or [])],
    )
    before = {} if resume else trainer.evaluate(metric_key_prefix="before")
    if stopping is not None:  # after the "before" evaluation, which it would misread (no eval_ metrics)
        trainer.add_callback(stopping)
    train_output = trainer.train(resume_from_checkpoint=resume)
    after = final_evaluation(trainer)
    results = {**train_output.metrics, **before, **after}
    if before:
        results["before_perplexity"] = math.exp(before["before_loss"])
    results["eval_perplexity"] = math.exp(after["eval_loss"])

    state, block = trainer.state, data_args.max_seq_length
    sequences = (
        state.global_step
        * training_args.per_device_train_batch_size
        * training_args.world_size
        * training_args.gradient_accumulation_steps
    )
    report = {
        "model": {
            "from": args.model_name_or_path or "scratch",
            "sizes": {
                key: getattr(model.config, key)
                for key in (
                    "vocab_size",
                    "hidden_size",
                    "num_hidden_layers",
                    "num_attention_heads",
                    "intermediate_size",
                    "hidden_act",
                    "ffn_type",
                    "layer_norm_position",
                )
            },
            "parameters": model.num_parameters(),  # the MLM model, tied decoder counted once
        },
        "mlm_head": "newly initialised" if head_note or args.model_name_or_path is None else "from the checkpoint",
        "ffn": ffn_report(model.config, standard_width),
        "conversion": conversion,
        "tokenizer": {"source": tokenizer_source, "vocab_size": len(tokenizer)},
        "documents": {"train": len(train_docs), "validation": len(eval_docs)},
        "blocks": {"train": len(train), "validation": len(evaluation), "tokens_per_block": block},
        "tokens_seen": sequences * block,
        "epochs": sequences / len(train),
        "sparse_prediction": args.sparse_prediction,  # how the run executed (neither is saved in config.json)
        "unpad_tokens": args.unpad_tokens,
        "bf16": bf16,
        "train_seconds": training_seconds(state.log_history, train_output.metrics["train_runtime"]),
    }
    ffn = report["ffn"]
    summary = (
        f"{report['model']['from']}: {ffn['ffn_type']} FFN width {ffn['intermediate_size']}, "
        f"{model.config.layer_norm_position}-LN, {ffn['ffn_params_all_layers']:,} FFN parameters "
        + (
            f"({ffn['ffn_params_vs_standard']:.3f}x the standard FFN at {standard_width}) "
            if "ffn_params_vs_standard" in ffn
            else ""
        )
        + f"and {ffn['ffn_flops_per_token_all_layers']:,} FFN FLOPs per token over {model.config.num_hidden_layers} "
        f"layers; held-out loss {after['eval_loss']:.4f} (perplexity {results['eval_perplexity']:.2f}), on [MASK] "
        f"positions {after['eval_mask_loss']:.4f} (accuracy {after['eval_mask_accuracy']:.3f}) after "
        f"{state.global_step} steps, {report['tokens_seen']:,} tokens ({report['epochs']:.3g} epochs)"
        + (
            f", {results['train_tokens_per_second']:,.0f} tokens/s ({results['train_gflops_per_second']:.3g} GFLOP/s)"
            if "train_gflops_per_second" in results
            else ""
        )
    )
    report["summary"] = summary
    model_args = args.model_arguments()
    if args.model_name_or_path is None:  # the card names what was built
        model_args = ModelArguments(
            model_name_or_path="none (pre-trained from scratch)",
            ffn_type=model.config.ffn_type,
            layer_norm_position=model.config.layer_norm_position,
            ffn_width=str(model.config.intermediate_size),
        )
    card = model_card(
        model_args,
        training_args,
        "fill-mask",
        ", ".join(data_args.train_files),
        results,
        conversion,
        ("perplexity",),
        model.config,
    )
    model.config.sparse_prediction = False  # the saved config: upstream BertForMaskedLM's outputs
    save_outputs(trainer, tokenizer, card, results, report, training_args.output_dir, unpad_tokens=saved_unpad)
    return {"results": results, "log_history": state.log_history, "wall_seconds": time.perf_counter() - start, **report}


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
    return run_pretraining(args, PretrainingDataArguments(**vars(data_args)), training_args)


def pretraining_parser(prog: str = "hf-ffn mlm") -> HfArgumentParser:
    """The `HfArgumentParser` of `pretraining_main`: `PretrainingArguments`, `PretrainingDataArguments`,
    `TrainingArguments` (defaults shown in `--help`)."""
    return HfArgumentParser(
        (PretrainingArguments, PretrainingDataArguments, TrainingArguments),
        prog=prog,
        description="Masked-language-model pre-training of an FfnBert variant, from scratch or "
        "continued from a checkpoint, with transformers' Trainer.",
    )


def pretraining_main(argv: list[str], prog: str = "hf-ffn mlm") -> int:
    """`hf-ffn mlm`: parse `argv` (or one `.json` file of arguments), pre-train (`run_pretraining`), print the
    report's line and where the model went. Returns 0; bad input ends as `prog: error: ...`, exit status 2."""
    with bad_input_exits(prog):
        args, data_args, training_args = parse_arguments(pretraining_parser(prog), argv)
        outcome = run_pretraining(args, data_args, training_args)
    if training_args.process_index == 0:  # one report per torchrun job
        print(json.dumps(outcome["results"], indent=2))
        print(outcome["summary"])
        print(f"saved to {training_args.output_dir} (report: run_info.json)")
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
    "split_documents",
    "train_tokenizer",
    "use_bf16_where_available",
]
