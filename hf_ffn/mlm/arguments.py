"""The options of `hf-ffn mlm` beside `TrainingArguments`: the model (`PretrainingArguments`) and the text
(`PretrainingDataArguments`). A bad value raises `ValueError` naming the flag, the value and what is allowed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from transformers import PretrainedConfig

from ..configuration_ffn_bert import (
    FFN_TYPES,
    HIDDEN_ACTS,
    LAYER_NORM_POSITIONS,
    FfnBertConfig,
    is_gated,
    parameter_matched_glu_width,
)
from ..conversion.recipes import parse_width
from ..training.arguments import ModelArguments, check_choice, check_choices, check_training_init, option
from ..training.blocks import ATTENTION_SCOPES
from ..training.corpus import DOCUMENT_BOUNDARIES, resolve_boundary

# `--config_overrides` (run_mlm.py's): from scratch the fields without an option of their own, for a checkpoint only
# the dropout probabilities (the rest would change what the weights were trained for).
OVERRIDES = "--config_overrides"
CHECKPOINT_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob")
SCRATCH_KEYS = (*CHECKPOINT_KEYS, "initializer_range", "layer_norm_eps", "type_vocab_size", "embedding_layer_norm")
SCRATCH_KEYS += ("ffn_bias", "leaky_relu_negative_slope", "elu_alpha", "swish_beta")
OWN_OPTIONS = {  # config field → the option (or what) that sets it
    **{name: f"--{name}" for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")},
    "intermediate_size": "--intermediate_size and --ffn_width",
    **{name: f"--{name}" for name in ("hidden_act", "ffn_type", "layer_norm_position", "sparse_prediction")},
    "unpad_tokens": "--unpad_tokens",
    "max_position_embeddings": "--max_seq_length (512 or the block length, the larger)",
    "pad_token_id": "the tokenizer",
}
# (low, high, low included): checked here, so the error names the option
RANGES = {
    "hidden_dropout_prob": (0.0, 1.0, True),
    "attention_probs_dropout_prob": (0.0, 1.0, True),
    "initializer_range": (0.0, float("inf"), False),
    "layer_norm_eps": (0.0, float("inf"), False),
    "type_vocab_size": (1, float("inf"), True),
}


def parse_config_overrides(text: str | None, checkpoint: bool) -> dict:
    """The typed overrides of `text` (`"key=value,..."`, typed by `PretrainedConfig.update_from_string`), each
    checked: allowed, of the field's type, in range (`ValueError` naming --config_overrides and the key)."""
    if not text:
        return {}
    allowed = CHECKPOINT_KEYS if checkpoint else SCRATCH_KEYS
    template = FfnBertConfig()
    overrides = {}
    for piece in text.split(","):
        key, sep, value = piece.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value or "=" in value:
            raise ValueError(f"{OVERRIDES}: {piece!r} is not key=value (expected e.g. 'hidden_dropout_prob=0.0,...')")
        if key not in allowed:
            if key in OWN_OPTIONS and not checkpoint:
                why = f"it has its own option: {OWN_OPTIONS[key]}"
            elif checkpoint and hasattr(template, key):
                why = "with --model_name_or_path only dropout probabilities may change: the rest is the checkpoint's"
            else:
                why = "not a field that may be overridden"
            raise ValueError(f"{OVERRIDES}: {key!r} cannot be set ({why}); allowed: {', '.join(allowed)}")
        if key in overrides:
            raise ValueError(f"{OVERRIDES}: {key!r} is given twice")
        try:
            template.update_from_string(f"{key}={value}")
        except ValueError as error:
            kind = type(getattr(FfnBertConfig(), key)).__name__
            raise ValueError(f"{OVERRIDES}: {key}={value!r} is not a {kind} ({error})") from None
        overrides[key] = number = getattr(template, key)
        if key in RANGES:
            low, high, closed = RANGES[key]
            if not (low <= number if closed else low < number) or not number < high:
                interval = f"{'[' if closed else '('}{low:g}, {high:g})"
                raise ValueError(f"{OVERRIDES}: {key} must be in {interval}, got {value}")
    try:
        FfnBertConfig(**overrides)  # FfnBert's own checks of its fields (e.g. leaky_relu_negative_slope in [0, 1))
    except ValueError as error:
        raise ValueError(f"{OVERRIDES}: {error}") from None
    return overrides


# The from-scratch model when no size is given: BERT-mini's shape (Turc et al. 2019), an 8,192-token vocabulary.
SCRATCH_DEFAULTS = {
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 1024,
    "hidden_act": "gelu",
    "layer_norm_position": "post",
    "ffn_width": "matched",
    "vocab_size": 8192,
}
GLU_MULTIPLE_OF = 8


def ffn_width(
    ffn_type: str, intermediate_size: int, width: str | int = "matched", multiple_of: int = GLU_MULTIPLE_OF
) -> int:
    """The FFN width of `ffn_type` against a standard FFN of `intermediate_size`: `width` "keep", an int, or
    "matched": a gated FFN gets the multiple of `multiple_of` nearest to 2/3 of it (3·d·w = 2·d·I, a tie goes up; at
    8: 1024 → 680, 3072 → 2048), a standard FFN keeps it. Raises `ValueError` naming --ffn_width on a bad `width`."""
    width = parse_width(width, "--ffn_width")
    if isinstance(width, int):
        return width
    if width == "matched" and is_gated(ffn_type):
        upper = parameter_matched_glu_width(intermediate_size, multiple_of)  # rounded up
        lower, exact = upper - multiple_of, 2 * intermediate_size / 3
        return lower if lower > 0 and exact - lower < upper - exact else upper
    return intermediate_size


@dataclass
class PretrainingArguments:
    """The model of a pre-training run: from scratch (sizes, FFN variant, tokenizer) or a checkpoint to continue."""

    model_name_or_path: str | None = option(
        None,
        "BERT or FfnBert checkpoint to continue pre-training (a fresh MLM head if it has none, reported as new "
        "weights); not given: a new model from the size options below",
    )
    tokenizer_name: str | None = option(
        None,
        "an existing tokenizer folder or name; not given: the checkpoint's, or (from scratch) a WordPiece tokenizer "
        "trained on the training documents with --vocab_size entries",
    )
    vocab_size: int | None = option(None, "size of the trained WordPiece vocabulary (from scratch; not given: 8192)")
    hidden_size: int | None = option(None, "from scratch: hidden size (not given: 256)")
    num_hidden_layers: int | None = option(None, "from scratch: layers (not given: 4)")
    num_attention_heads: int | None = option(None, "from scratch: heads (not given: 4)")
    intermediate_size: int | None = option(
        None,
        "from scratch: the standard FFN width (not given: 4 x --hidden_size, 1024 at 256); a gated --ffn_type gets "
        "the parameter-matched width (see --ffn_width)",
    )
    hidden_act: str | None = option(
        None,
        "from scratch: BERT's hidden_act, the MLM head's activation and the standard FFN's when --ffn_type is not "
        "given; not given: gelu",
    )
    ffn_type: str | None = option(
        None,
        "FFN variant, e.g. gelu (BERT), relu, geglu, swiglu, reglu, bilinear; default: --hidden_act's standard FFN "
        "(from scratch) or the checkpoint's",
    )
    layer_norm_position: str | None = option(
        None, "post (BERT) or pre (Pre-LN); not given: post (from scratch) or the checkpoint's"
    )
    ffn_width: str | None = option(
        None,
        "FFN width: 'matched' (a gated FFN at the standard FFN's weight count: the multiple of --glu_multiple_of "
        "nearest to 2/3 of --intermediate_size, or of a checkpoint's; a standard FFN keeps its width), 'keep' (the "
        "standard width) or an integer; not given: 'matched' from scratch, 'keep' for a checkpoint",
    )
    glu_multiple_of: int = option(
        GLU_MULTIPLE_OF,
        "a matched gated width is the multiple of this nearest to 2/3 of the standard width (8: 1024 -> 680, -0.4%% "
        "FFN weights; LLaMA's rounding up to 256 would give 768, +12.5%%)",
    )
    ffn_init: str = option("preserving", "checkpoint only: how a BERT FFN becomes a gated one, 'preserving' or 'fresh'")
    seed_modules_by_name: bool = option(
        False,
        "from scratch: initialise each module from (--seed, its name) (hf_ffn.mlm.initialisation.seed_by_name), so "
        "the variants of one seed share every weight outside the FFN",
    )
    sparse_prediction: bool = option(
        True,
        "during training decode only the masked positions (MosaicBERT / ModernBERT; the loss is the same, the decoder "
        "runs on ~15%% of the rows); not saved in config.json",
    )
    unpad_tokens: bool = option(
        True,
        "unpadded execution during the run (FfnBertConfig.unpad_tokens; packed blocks have no padding, so it changes "
        "nothing here); the saved model keeps the checkpoint's value",
    )
    padding_free: bool = option(
        False,
        "padding-free batches: each batch's blocks concatenated into one row, position_ids restarting at 0 for each "
        "(DataCollatorWithFlattening), each block computed as if alone",
    )
    bf16_where_available: bool = option(
        True,
        "train in bf16 mixed precision on a CUDA device that supports it, unless --bf16 or --fp16 is given (CPU runs "
        "stay fp32); fp32 on a GPU: --bf16 false (or --bf16_where_available false)",
    )
    recipe: str = option(
        "auto",
        "the training options a run takes unless given: a recipe of hf_ffn/mlm/recipes (scratch-post-ln, "
        "scratch-pre-ln) or a .json file of option values (copy one to start); auto: from scratch the one of "
        "--layer_norm_position, none from a checkpoint; none: Trainer's defaults. Printed and saved in run_info.json",
    )
    speed_defaults: bool = option(
        True,
        "on a CUDA device, set the speed options not given (hf_ffn/mlm/recipes/cuda.json: --torch_compile, "
        "--logging_nan_inf_filter false, data loader workers, --unpad_tokens false, --fixed_prediction_rows), printed "
        "at the start; false: none of them (CPU runs get none either way)",
    )
    fixed_prediction_rows: bool = option(
        False,
        "with --sparse_prediction: decode a fixed number of positions per batch (the masked ones, then unmasked ones "
        "the loss ignores; hf_ffn.mlm.speed.prediction_rows), so shapes are static for --torch_compile and the masked "
        "count is never read back from the GPU; the loss is the same",
    )

    # Monitoring and stopping (hf_ffn.mlm.trainer)
    config_overrides: str | None = option(
        None,
        "config fields to override, as run_mlm.py's: 'hidden_dropout_prob=0.0,initializer_range=0.01' "
        f"(typed by PretrainedConfig.update_from_string). From scratch: {', '.join(SCRATCH_KEYS)}; with "
        f"--model_name_or_path only the dropout probabilities ({', '.join(CHECKPOINT_KEYS)})",
    )
    log_throughput: bool = option(
        True,
        "add train_tokens_per_second and achieved train_gflops_per_second (3 x the forward matmul FLOPs, "
        "hf_ffn.params.mlm_flops) to every training log line and the final one",
    )
    early_stopping_patience: int | None = option(
        None,
        "stop when the held-out --metric_for_best_model (default: mask_loss, the loss on [MASK] positions) has not "
        "improved for this many evaluations in a row (transformers' EarlyStoppingCallback); needs --eval_strategy "
        "steps or epoch, loads the best checkpoint at the end",
    )
    early_stopping_threshold: float = option(
        0.0, "with --early_stopping_patience: the least change that counts as an improvement"
    )
    stop_at_step: int | None = option(
        None,
        "end training after this step of the --max_steps schedule, with a checkpoint there (the learning rate not yet "
        "decayed; to go on, a run in another --output_dir with --resume_from_checkpoint OUTPUT_DIR/checkpoint-N and a "
        "later step, or none); not given: the schedule's end",
    )

    def __post_init__(self) -> None:
        check_choice("ffn_type", self.ffn_type, FFN_TYPES)
        check_choice("layer_norm_position", self.layer_norm_position, LAYER_NORM_POSITIONS)
        check_choice("hidden_act", self.hidden_act, HIDDEN_ACTS)
        check_training_init(self.ffn_init)
        if self.seed_modules_by_name and self.model_name_or_path is not None:
            raise ValueError(
                f"--seed_modules_by_name initialises a model built from scratch; --model_name_or_path "
                f"{self.model_name_or_path!r} loads one: give one of the two"
            )
        if self.ffn_width is not None:
            parse_width(self.ffn_width, "--ffn_width")
        sizes = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
        for name in (*sizes, "glu_multiple_of"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"--{name} must be a positive integer, got {value}")
        if self.model_name_or_path is not None:
            scratch_only = [f"--{name}" for name in (*sizes, "hidden_act") if getattr(self, name) is not None]
            if scratch_only:
                raise ValueError(
                    f"{', '.join(scratch_only)} apply to a model from scratch; with --model_name_or_path "
                    f"{self.model_name_or_path!r} the checkpoint's sizes are used (drop them)"
                )
        elif self.ffn_init != "preserving":
            raise ValueError(
                f"--ffn_init {self.ffn_init!r} applies to a checkpoint (--model_name_or_path); a model "
                f"from scratch is newly initialised"
            )
        self.config_updates()  # checked now, before anything is loaded
        for name in ("early_stopping_patience", "stop_at_step"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be a positive integer, got {getattr(self, name)}")
        threshold = self.early_stopping_threshold
        if threshold < 0 or (threshold and self.early_stopping_patience is None):
            raise ValueError(
                f"--early_stopping_threshold {self.early_stopping_threshold} must be >= 0 and applies with "
                f"--early_stopping_patience"
            )
        if self.tokenizer_name is not None and self.vocab_size is not None:
            raise ValueError(
                f"--vocab_size applies to a trained tokenizer; --tokenizer_name {self.tokenizer_name!r} "
                f"brings its own vocabulary (drop one)"
            )

    def config_updates(self) -> dict:
        """`--config_overrides` as typed config fields (`parse_config_overrides`)."""
        return parse_config_overrides(self.config_overrides, self.model_name_or_path is not None)

    def scratch(self, name: str):
        """A from-scratch option's value: the one given, else `SCRATCH_DEFAULTS[name]` (the FFN width: 4 × hidden)."""
        value = getattr(self, name)
        if value is None and name == "intermediate_size":
            return 4 * self.scratch("hidden_size")
        return SCRATCH_DEFAULTS[name] if value is None else value

    def model_arguments(self) -> ModelArguments:
        """The checkpoint, variant and tokenizer as `ModelArguments`, `--ffn_width matched` resolved by `ffn_width`
        (not the conversion's rounding up to 256)."""
        width = self.ffn_width or "keep"
        if width == "matched" and self.model_name_or_path is not None:
            config, _ = PretrainedConfig.get_config_dict(self.model_name_or_path)
            target = self.ffn_type or config.get("ffn_type") or config.get("hidden_act", "gelu")
            target = target[0] if isinstance(target, list) else target
            width = str(ffn_width(target, config["intermediate_size"], "matched", self.glu_multiple_of))
        return ModelArguments(
            model_name_or_path=self.model_name_or_path,
            ffn_type=self.ffn_type,
            layer_norm_position=self.layer_norm_position,
            ffn_init=self.ffn_init,
            ffn_width=width,
            tokenizer_name=self.tokenizer_name,
            unpad_tokens=self.unpad_tokens,
            padding_free=self.padding_free,
        )


@dataclass
class PretrainingDataArguments:
    """Text files or folders (held-out percentage, split seed, block length, masking rate) and the rest of the data
    path (`hf_ffn.training.corpus`): file formats and compression, where documents start, a held-out file, the
    attention scope of a block, the masking split, the fixed maskings, the cache."""

    train_files: list[str] | None = option(
        None,
        "text files (plain, or .xz/.gz/.bz2/.zst-compressed), json or parquet files, or folders of them (the files "
        "matching --file_pattern); or give --dataset_name",
    )
    validation_split_percentage: int | None = option(
        None,
        "percentage of the documents held out (whole documents, seeded by --split_seed); not given: 10 (not used with "
        "--validation_files or a --dataset_name with a validation split)",
    )
    split_seed: int = option(42, "seed of the document split and of the fixed eval maskings")
    max_seq_length: int = option(128, "tokens per training block")
    mlm_probability: float = option(0.15, "fraction of tokens masked (BERT: 0.15)")
    max_train_samples: int | None = option(None, "use only the first N training blocks")
    max_eval_samples: int | None = option(None, "use only the first N validation blocks")

    dataset_name: str | None = option(
        None,
        "a datasets data set instead of --train_files (run_mlm.py's): a hub name, a local loading script or folder, "
        "or a folder written by save_to_disk; each row of its train split (--text_column) is a document; held out: "
        "its validation split, else --validation_split_percentage of its rows",
    )
    dataset_config_name: str | None = option(None, "with --dataset_name: its configuration, e.g. wikitext-103-raw-v1")
    streaming: bool = option(
        False,
        "with --dataset_name: read the data set as training reads it (datasets' streaming), never whole on disk or in "
        "memory; needs --max_steps, a held-out split of its own or --validation_files, and --tokenizer_name or "
        "--model_name_or_path",
    )
    validation_files: list[str] | None = option(
        None,
        "held-out text files or folders (as --train_files; run_mlm.py's --validation_file): then every --train_files "
        "document trains and --validation_split_percentage is not used",
    )
    file_pattern: str = option("*.txt", "the files of a folder that are read (a glob, e.g. '*.txt.xz' or '*.parquet')")
    text_column: str = option("text", "json / parquet files: the column holding a document per row")
    document_boundary: str | None = option(
        None,
        "where documents start in a text file: empty_line (documents separated by an empty line, BERT's format), file "
        "(one document per file) or regex (at each --document_start_regex match); not given: regex with "
        "--document_start_regex, else empty_line",
        choices=DOCUMENT_BOUNDARIES,
    )
    document_start_regex: str | None = option(
        None,
        "a regular expression (multi-line) matching where each document starts inside a file, e.g. '^ = [^=]' for "
        "WikiText's article titles (implies --document_boundary regex)",
    )
    attention_scope: str = option(
        "block",
        "block: every token of a packed block attends to the whole block (BERT, run_mlm.py); document: only to its "
        "own document (position_ids restart at each document; FfnBert computes each document as if alone)",
        choices=ATTENTION_SCOPES,
    )
    short_block_length: int | None = option(
        None,
        "a sequence-length warm-up: the first --short_block_steps steps train on blocks of this many tokens "
        "(per_device_train_batch_size x max_seq_length / this many blocks a step: as many tokens), then on blocks of "
        "--max_seq_length, one learning-rate schedule over --max_steps (the first phase is saved in "
        "OUTPUT_DIR/short_blocks; hf_ffn.mlm.warmup; resumed with --resume_from_checkpoint last; not with "
        "--early_stopping_patience)",
    )
    short_block_steps: int | None = option(None, "with --short_block_length: the steps on the short blocks")
    mask_replace_prob: float = option(0.8, "of the chosen tokens, the fraction shown as [MASK] (BERT: 0.8)")
    random_replace_prob: float = option(
        0.1, "of the chosen tokens, the fraction replaced by a random token (BERT: 0.1; the rest kept)"
    )
    eval_maskings: int = option(
        1,
        "the held-out blocks are masked this many times (seeds --split_seed, +1, ...), concatenated: every evaluation "
        "scores the same tokens",
    )
    preprocessing_num_workers: int | None = option(
        None, "processes reading and tokenizing the text (datasets' num_proc)"
    )
    cache_dir: str | None = option(
        None,
        "where datasets keeps the documents, tokens and blocks (memory-mapped Arrow; a second run with the same "
        "files, tokenizer and options reuses them); not given: HF_DATASETS_CACHE",
    )

    def __post_init__(self) -> None:
        check_choices(self)  # --document_boundary, --attention_scope
        self._split_given = self.validation_split_percentage is not None
        if self.validation_split_percentage is None:
            self.validation_split_percentage = 10
        if not 0 < self.validation_split_percentage < 100:
            raise ValueError(f"--validation_split_percentage must be in 1..99, got {self.validation_split_percentage}")
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"--mlm_probability must be in (0, 1), got {self.mlm_probability}")
        if self.max_seq_length <= 2:
            raise ValueError(f"--max_seq_length must be > 2, got {self.max_seq_length}")
        self._check_source()
        try:
            re.compile(self.document_start_regex or "", re.MULTILINE)
        except re.error as error:
            raise ValueError(
                f"--document_start_regex {self.document_start_regex!r} is not a regular expression: {error}"
            ) from None
        self.document_boundary = resolve_boundary(self.document_boundary, self.document_start_regex)
        self._check_short_blocks()
        for name in ("mask_replace_prob", "random_replace_prob"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"--{name} must be in [0, 1], got {getattr(self, name)}")
        if self.mask_replace_prob + self.random_replace_prob > 1:
            raise ValueError(
                f"--mask_replace_prob {self.mask_replace_prob} + --random_replace_prob {self.random_replace_prob} "
                f"must be at most 1 (the rest of the chosen tokens are kept)"
            )
        for name in ("eval_maskings", "preprocessing_num_workers"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"--{name} must be a positive integer, got {getattr(self, name)}")

    def _check_short_blocks(self) -> None:
        """Both or neither, 3 <= length < --max_seq_length, steps >= 1 (the rest: `warmup.check_short_blocks`)."""
        length, steps = self.short_block_length, self.short_block_steps
        if (length is None) != (steps is None):
            given, missing = ("length", "steps") if steps is None else ("steps", "length")
            raise ValueError(f"--short_block_{given} needs --short_block_{missing} (the sequence-length warm-up)")
        if length is None:
            return
        if not 3 <= length < self.max_seq_length:
            raise ValueError(
                f"--short_block_length must be at least 3 ([CLS] and [SEP] take two) and below --max_seq_length "
                f"{self.max_seq_length}, got {length}"
            )
        if steps < 1:
            raise ValueError(f"--short_block_steps must be a positive integer, got {steps}")

    def _check_source(self) -> None:
        """One corpus; --dataset_config_name and --streaming with --dataset_name; nothing streaming cannot do."""
        if (self.train_files is None) == (self.dataset_name is None):
            raise ValueError(
                "give one corpus: --train_files (text, json or parquet files or folders) or --dataset_name (a "
                f"datasets data set); got {'both' if self.train_files else 'neither'}"
            )
        for name in ("dataset_config_name", "streaming"):
            if getattr(self, name) and self.dataset_name is None:
                raise ValueError(f"--{name} {getattr(self, name)} applies to --dataset_name, which is not given")
        if not self.streaming:
            return
        whole = {
            "--validation_split_percentage": self._split_given,  # a seeded choice among all documents
            "--preprocessing_num_workers": self.preprocessing_num_workers is not None,  # shards of a whole data set
        }
        if any(whole.values()):
            named = ", ".join(option for option, given in whole.items() if given)
            raise ValueError(
                f"--streaming reads the data set as training reads it; {named} needs the whole data set "
                f"(drop it, or drop --streaming)"
            )

    def corpus_options(self) -> dict:
        """The keyword arguments of `load_corpus` (with --dataset_name: `load_hub_corpus`)."""
        names = ("validation_files", "validation_split_percentage", "split_seed", "file_pattern")
        names += ("document_boundary", "document_start_regex", "text_column", "cache_dir")
        if self.dataset_name is not None:
            names += ("dataset_name", "dataset_config_name", "streaming")
        else:
            names += ("train_files",)
        return {name: getattr(self, name) for name in names} | {"num_proc": self.preprocessing_num_workers}

    def masking_options(self) -> dict:
        """The masking rule as `fixed_maskings` and `mlm_trainer` take it."""
        names = ("mlm_probability", "mask_replace_prob", "random_replace_prob")
        return {name: getattr(self, name) for name in names}
