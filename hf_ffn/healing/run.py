"""`run_healing` (`hf-ffn heal`): check the input, read the text, heal the student (layer-wise,
`hf_ffn.healing.layerwise`, and/or end to end, `hf_ffn.healing.distill`), measure it against the teacher before and
after on held-out text, and write the healed folder (default `output_dir/healed`) and the run's record
(`output_dir/healing.json`). Every input error raises before training. docs/healing.md.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from dataclasses import MISSING, asdict, dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    PretrainedConfig,
    PreTrainedTokenizerBase,
    TrainingArguments,
)

from ..checkpoints import check_checkpoint, conversion_source, load_pretrained, load_tokenizer
from ..configuration_ffn_bert import FfnBertConfig
from ..configuration_ffn_roberta import FfnRobertaConfig
from ..conversion import REPORT_FILE, ffn_class_for
from ..conversion.measure import usable_positions
from ..families import Family, checkpoint_family
from ..files import check_new_folder, one_run_per_output_dir
from ..logging_utils import quiet_transformers
from ..modeling_ffn_bert import FfnBertPreTrainedModel
from ..training.arguments import option, resume_checkpoint
from ..training.outputs import check_not_started
from .data import end_to_end_blocks, read_data
from .distill import DistillationLoss, distill, select_trainable
from .healed_folder import save_healed
from .layerwise import METHODS, LayerwiseArguments, heal_layerwise, prepare_layerwise
from .metrics import AgreementCallback, measure_agreement

MLM_CLASSES = ("FfnBertForMaskedLM", "FfnBertForPreTraining", "FfnRobertaForMaskedLM", "FfnElectraForMaskedLM")
HEALING_FILE = "healing.json"  # the run's whole record, in --output_dir
TRAINING_KEYS = (  # the TrainingArguments the record keeps
    "learning_rate max_steps num_train_epochs per_device_train_batch_size gradient_accumulation_steps world_size "
    "warmup_steps lr_scheduler_type weight_decay seed bf16"
).split()


@dataclass
class HealArguments:
    """What to heal, from which teacher, on which text, with which loss; parsed with `TrainingArguments`."""

    student: str = option(
        MISSING, "converted folder (hf-ffn convert's output: FfnBert, FfnRoberta or FfnElectra) to heal"
    )
    train_files: list[str] | None = option(
        None,
        "text to distil on: text files (a document each; compressed .xz/.gz/.bz2/.zst too), json/jsonl/"
        "parquet files (a document per row of --text_column), or folders of *.txt files; or --dataset_name",
    )
    dataset_name: str | None = option(
        None, "a datasets data set to distil on instead (hub name, or a save_to_disk folder)"
    )
    dataset_config_name: str | None = option(None, "its configuration")
    text_column: str = option("text", "text column of --dataset_name or json/parquet files")
    document_boundary: str = option(
        "file",
        "where a document of a --train_files text file ends: file (the whole file) or empty_line (an "
        "empty line; for a large corpus in few files, so a file is not tokenized as one document)",
    )
    streaming: bool = option(
        False,
        "read --dataset_name as a stream (as training reads it; needs --max_steps or --max_train_tokens): "
        "the layer-wise calibration is then its first blocks, not blocks evenly spaced over the whole text",
    )
    max_train_tokens: int | None = option(
        None,
        "budget of the end-to-end stage in training tokens: sets --max_steps to ceil(N / (max_seq_length "
        "× batch size × gradient accumulation × processes))",
    )
    max_train_minutes: float | None = option(
        None,
        "stop the end-to-end stage after N minutes of this process's training (a checkpoint is saved; "
        "the learning-rate schedule stays that of --max_steps); the healed model is the one it stopped at",
    )
    teacher: str | None = option(
        None,
        "the source checkpoint (BERT, RoBERTa-family or ELECTRA, or its hf_ffn twin); default: the "
        "student's conversion_report.json source",
    )
    healed_dir: str | None = option(
        None, "folder for the healed model (default: OUTPUT_DIR/healed); must not exist or be empty"
    )
    eval_data: str | None = option(
        None,
        "held-out labelled text, never trained on, for the before/after agreement and the linear probe: a "
        "folder with one text file per label (one example per line), a csv/tsv/json/jsonl file, or a datasets "
        "dataset (saved folder or hub name)",
        metavar="PATH",
    )
    eval_text_column: str | None = option(
        None, "text column of a file or dataset --eval_data; default: text or sentence"
    )
    eval_label_column: str = option("label", "label column of a file or dataset --eval_data (none there: no probe)")
    eval_split: str = option("validation", "split of a datasets --eval_data")
    probe: bool = option(True, "linear probe on all --eval_data examples before and after")
    max_eval_snippets: int | None = option(
        None,
        "measure before/after (and probe) on a seeded subset of N held-out snippets "
        "instead of all of them (a quick run; published numbers use all)",
    )
    curve_snippets: int = option(1000, "snippets (seeded subset) measured during training")
    curve_steps: int = option(0, "measure the subset every N steps (0: at the end only)")
    max_seq_length: int = option(128, "tokens per training block")
    max_train_samples: int | None = option(None, "use only the first N blocks")
    short_seq_probability: float = option(
        0.0,
        "the fraction of blocks cut to a length drawn uniformly from 2 to --max_seq_length (padded; "
        "BERT's short_seq_prob), so the end-to-end stage also fits short inputs (0: every block whole)",
    )
    frame_blocks: bool = option(
        False,
        "each end-to-end block as [CLS] text [SEP] (BERT's pre-training instances; with --short_seq_probability the "
        "cut ones too), so position 0 is [CLS] as in the inputs the student is used on; false: blocks cut from the "
        "token stream (run_mlm.py's), [CLS] only where a document starts",
    )
    hidden_loss: str = option("mse", "mse or cosine, on hidden states at real tokens")
    layers: str = option("last", "last (last_hidden_state) or all (every hidden state)")
    mlm_kl_weight: float = option(0.0, "weight of KL on MLM logits (needs both heads)")
    temperature: float = option(1.0, "softmax temperature of the KL term")
    train_parts: str = option("encoder", "ffn, ffn_norms, encoder or all")
    method: str = option(
        "layerwise",
        "layerwise (the default, the best measured in docs/healing.md: fit each layer to its teacher "
        "layer, hf_ffn.healing.layerwise; an end-to-end stage follows only with --max_steps > 0) or end_to_end "
        "(distil the whole model alone, for --max_steps or --num_train_epochs)",
    )
    padding_free: bool = option(
        False,
        "padding-free batches (DataCollatorWithFlattening): each batch's blocks concatenated into one row, "
        "position_ids restarting at 0 per block, run packed (unpad_tokens during training: each block's attention "
        "over its own keys); the teacher then runs as hf_ffn's class of its family, FfnBert or FfnElectra "
        "(upstream's would mix the blocks: they carry an all-ones attention_mask); not for the RoBERTa family, "
        "whose positions count from pad_token_id + 1",
    )

    def __post_init__(self) -> None:
        self.loss = DistillationLoss(self.hidden_loss, self.layers, self.mlm_kl_weight, self.temperature)
        if (self.train_files is None) == (self.dataset_name is None):
            raise ValueError(
                "give the text to distil on as --train_files FILES_OR_FOLDERS or --dataset_name NAME (one of them)"
            )
        if self.document_boundary not in ("file", "empty_line"):
            raise ValueError(
                f"--document_boundary has unknown value {self.document_boundary!r}; allowed: file, empty_line"
            )
        if self.streaming and self.dataset_name is None:
            raise ValueError("--streaming reads a --dataset_name as a stream; --train_files are read whole")
        for name in ("max_train_tokens", "max_train_minutes"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ValueError(f"--{name} must be > 0, got {getattr(self, name)}")
        if self.max_eval_snippets is not None and self.max_eval_snippets < 2:
            raise ValueError(f"--max_eval_snippets must be at least 2, got {self.max_eval_snippets}")
        for name in ("curve_snippets", "curve_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name} must be >= 0, got {getattr(self, name)}")
        if self.method not in METHODS:
            raise ValueError(f"--method has unknown value {self.method!r}; allowed: {', '.join(METHODS)}")
        if self.max_seq_length <= 2:
            raise ValueError(f"--max_seq_length must be > 2, got {self.max_seq_length}")
        if not 0 <= self.short_seq_probability <= 1:
            raise ValueError(f"--short_seq_probability must be in [0, 1], got {self.short_seq_probability}")
        if self.short_seq_probability and self.padding_free:
            raise ValueError(
                "--short_seq_probability pads the blocks it cuts; --padding_free would train on those pads "
                "(its collator ignores attention_mask): give one of them"
            )


@one_run_per_output_dir
def run_healing(
    heal_args: HealArguments,
    training_args: TrainingArguments,
    *,
    callbacks: list | None = None,
    command: str | None = None,
    layerwise_args: LayerwiseArguments | None = None,
) -> dict[str, Any]:
    """Heal `heal_args.student`; returns the `healing` record written to `HEALING_FILE` (with "healed_dir").

    Raises:
        FileNotFoundError, FileExistsError, ValueError: on bad input, before training.
    """
    start = time.perf_counter()
    command = command or shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])
    layerwise_args, per_step = check_arguments(heal_args, training_args, layerwise_args)
    models = check_models(heal_args)
    healed_dir = Path(heal_args.healed_dir or Path(training_args.output_dir) / "healed")
    check_new_folder(healed_dir, "--healed_dir")
    check_not_started(training_args.output_dir, training_args.resume_from_checkpoint)
    resume = resume_checkpoint(training_args)
    layerwise = heal_args.method == "layerwise"
    data = read_data(heal_args, models.tokenizer, layerwise_args.layerwise_tokens if layerwise else None)
    layerwise_dir, seed = Path(training_args.output_dir) / "layerwise", training_args.seed
    if layerwise:  # refuse a mismatched resume before loading or measuring a model
        config = models.student_config, models.teacher_config
        prepared = prepare_layerwise(*config, data.calibration, layerwise_args, layerwise_dir, seed)
    teacher, student, teacher_layers, trainable = load_models(heal_args, models, layerwise)
    main = training_args.process_index == 0
    measure = partial(  # measure(student base model, progress=...); the teacher's outputs computed once
        measure_agreement,
        teacher.base_model,
        tokenizer=models.tokenizer,
        texts=data.texts,
        labels=data.labels if heal_args.probe else None,
        max_length=heal_args.max_seq_length,
        teacher_cache=[],
    )
    before = measure(student.base_model, progress="held-out agreement before") if main and data.texts else None
    callbacks = list(callbacks or [])
    if data.curve_texts and heal_args.curve_snippets:
        callbacks.append(
            AgreementCallback(
                teacher.base_model, models.tokenizer, data.curve_texts, heal_args.curve_steps, heal_args.max_seq_length
            )
        )
    layerwise_record = None
    if layerwise:
        layerwise_record = heal_layerwise(
            student.base_model, teacher_layers, data.calibration, layerwise_args, layerwise_dir, seed, prepared
        )
        del teacher_layers
    history, steps, train_seconds, stopped = [], 0, 0.0, False
    if heal_args.method == "end_to_end" or training_args.max_steps > 0:
        tokenizer = models.tokenizer
        frame = (tokenizer.cls_token_id, tokenizer.sep_token_id) if heal_args.frame_blocks else None
        blocks = end_to_end_blocks(data.blocks, heal_args.short_seq_probability, tokenizer.pad_token_id, seed, frame)
        student, history, steps, train_seconds, stopped = distill(
            student, teacher, blocks, heal_args, training_args, callbacks, resume
        )
    if not main:
        return {}
    healing = {
        "student": heal_args.student,
        "teacher": models.teacher,
        "command": command,
        "arguments": asdict(heal_args),
        "training": {k: getattr(getattr(training_args, k), "value", getattr(training_args, k)) for k in TRAINING_KEYS},
        "trainable_parameters": sum(p.numel() for n, p in student.named_parameters() if n in trainable),
        "train_parts": heal_args.train_parts,
        "data": {**data.summary, "end_to_end_tokens": steps * per_step, "stopped_by_time_budget": stopped},
        "heldout": {
            "eval_data": heal_args.eval_data,
            "snippets": len(data.texts or []),
            "curve_snippets": len(data.curve_texts),
        },
        "before": before,
        "after": measure(student.base_model, progress="held-out agreement after") if data.texts else None,
        "curve": [
            {"step": e["step"], **{k[len("heldout_") :]: v for k, v in e.items() if k.startswith("heldout_")}}
            for e in history
            if "heldout_cosine_mean" in e
        ],
        "losses": [{"step": e["step"], "loss": e["loss"]} for e in history if "loss" in e],
        "steps": steps,
        "train_seconds": train_seconds,
        "layerwise": layerwise_record,
        "wall_seconds": time.perf_counter() - start,
        "healed_dir": str(healed_dir),
    }
    save_healed(healed_dir, student.cpu(), models.tokenizer, teacher.cpu(), healing)
    record = Path(training_args.output_dir) / HEALING_FILE
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(healing, indent=2, default=str) + "\n", encoding="utf-8")
    print(healing_summary(healing), flush=True)
    return healing


def check_arguments(
    heal_args: HealArguments, training_args: TrainingArguments, layerwise_args: LayerwiseArguments | None
) -> tuple[LayerwiseArguments, int]:
    """The options that only make sense together: layer-wise ones only with --method layerwise; --max_train_tokens
    sets --max_steps; a stream needs --max_steps. Returns `layerwise_args` (the defaults for None) and the training
    tokens per optimizer step.

    Raises:
        ValueError: a layer-wise option with --method end_to_end; --max_train_tokens with --max_steps; --streaming
            without --max_steps or --max_train_tokens.
    """
    if heal_args.method == "end_to_end" and layerwise_args is not None:  # options the run would silently ignore
        ignored = [f"--{f.name}" for f in fields(LayerwiseArguments) if getattr(layerwise_args, f.name) != f.default]
        if ignored:
            raise ValueError(
                f"{', '.join(ignored)} set the layer-wise stage, which --method end_to_end does not "
                f"run; remove them, or use --method layerwise"
            )
    per_step = (
        heal_args.max_seq_length
        * training_args.train_batch_size
        * training_args.gradient_accumulation_steps
        * training_args.world_size
    )
    if heal_args.max_train_tokens is not None:  # ceil(N / tokens per optimizer step)
        if training_args.max_steps > 0:
            raise ValueError(
                f"--max_train_tokens {heal_args.max_train_tokens} and --max_steps {training_args.max_steps} both set "
                f"the end-to-end stage's length; give one"
            )
        training_args.max_steps = -(-heal_args.max_train_tokens // per_step)
    if heal_args.streaming and training_args.max_steps <= 0:
        raise ValueError(
            "--streaming: a stream has no length, so the end-to-end stage needs --max_steps or --max_train_tokens"
        )
    return layerwise_args or LayerwiseArguments(), per_step


@dataclass
class HealModels:
    """What `check_models` read, each once (the teacher's tokenizer is only compared)."""

    teacher: str
    teacher_family: Family
    teacher_config: PretrainedConfig
    student_config: FfnBertConfig
    student_class: type[FfnBertPreTrainedModel]
    tokenizer: PreTrainedTokenizerBase


def check_models(heal_args: HealArguments) -> HealModels:
    """Check that teacher and student fit, reading each config and tokenizer once.

    Raises:
        FileNotFoundError: student or teacher folder missing.
        ValueError: no teacher given or recorded; families, vocabularies, hidden sizes or (`--layers all`) LayerNorm
            placements differ; --max_seq_length too long; the KL term without an MLM head; --frame_blocks without
            [CLS] / [SEP] tokens.
    """
    check_checkpoint(heal_args.student, "--student")
    student = Path(heal_args.student)
    if not student.is_dir():
        raise FileNotFoundError(f"--student: no such folder: {heal_args.student} (the student is a local folder)")
    teacher = heal_args.teacher if heal_args.teacher is not None else conversion_source(student)
    if teacher is None:
        raise ValueError(f"--teacher not given and --student {str(student)!r} has no {REPORT_FILE} naming its source")
    check_checkpoint(teacher, "--teacher")
    s_config = AutoConfig.from_pretrained(student)  # FfnBertConfig, FfnRobertaConfig (converted folders)
    if not isinstance(s_config, FfnBertConfig):  # a plain upstream folder, or one of no supported family (raises)
        s_config = checkpoint_family(str(student), "--student").config_class.from_pretrained(student)
    t_family = checkpoint_family(teacher, "--teacher")
    if type(s_config) is not t_family.config_class:
        raise ValueError(
            f"--student {str(student)!r} is a {s_config.model_type} folder, --teacher {teacher!r} of the "
            f"{t_family.upstream_type} family; distillation pairs a conversion with its own source"
        )
    if heal_args.padding_free and isinstance(s_config, FfnRobertaConfig):
        raise ValueError(
            f"--padding_free: --student {str(student)!r} is a {s_config.model_type} folder, whose positions count "
            f"from pad_token_id + 1, which the padding-free collator does not give; allowed: BERT and ELECTRA "
            f"checkpoints (positions from 0)"
        )
    try:
        t_config = AutoConfig.from_pretrained(teacher)
    except OSError as error:
        raise FileNotFoundError(f"--teacher: cannot load a config from {teacher!r} ({error})") from error
    for name in ("vocab_size", "hidden_size"):
        if getattr(t_config, name) != getattr(s_config, name):
            raise ValueError(
                f"teacher and student differ in {name}: teacher {teacher!r} has {getattr(t_config, name)}, student "
                f"{str(student)!r} has {getattr(s_config, name)}; distillation compares hidden states token by "
                f"token, so both must be equal"
            )
    if heal_args.layers == "all":
        t_lns = getattr(t_config, "layer_norm_positions", ["post"] * t_config.num_hidden_layers)
        if t_lns != s_config.layer_norm_positions:
            raise ValueError(
                f"--layers all compares every hidden state, but the LayerNorm placement differs (teacher {t_lns}, "
                f"student {s_config.layer_norm_positions}): a Pre-LN layer's output is the un-normalised residual "
                f"stream, a Post-LN one's is normalised; use --layers last"
            )
    if heal_args.max_seq_length > usable_positions(s_config):
        raise ValueError(
            f"--max_seq_length {heal_args.max_seq_length}: a sequence of --student {str(student)!r} holds at most "
            f"{usable_positions(s_config)} tokens (max_position_embeddings {s_config.max_position_embeddings}); "
            f"give at most that"
        )
    student_class = ffn_class_for(s_config)
    if heal_args.mlm_kl_weight > 0 and student_class.__name__ not in MLM_CLASSES:
        raise ValueError(
            f"--mlm_kl_weight > 0 needs an MLM head on the student; {str(student)!r} is a "
            f"{student_class.__name__} (allowed: {', '.join(MLM_CLASSES)})"
        )
    tokenizer = load_tokenizer(student, "--student", config=s_config)
    t_tokenizer = load_tokenizer(teacher, "--teacher", config=t_config)
    t_vocab, s_vocab = t_tokenizer.get_vocab(), tokenizer.get_vocab()
    if t_vocab != s_vocab:
        only = sorted(set(s_vocab.items()) ^ set(t_vocab.items()))[:5]
        raise ValueError(
            f"teacher {teacher!r} and student {str(student)!r} tokenizers differ ({len(t_vocab)} vs "
            f"{len(s_vocab)} tokens; e.g. {only}); distillation needs the same vocabulary"
        )
    if heal_args.frame_blocks and None in (tokenizer.cls_token_id, tokenizer.sep_token_id):
        raise ValueError(f"--frame_blocks: the tokenizer of --student {str(student)!r} has no cls_token or sep_token")
    return HealModels(teacher, t_family, t_config, s_config, student_class, tokenizer)


def load_models(
    heal_args: HealArguments, models: HealModels, layerwise: bool
) -> tuple[torch.nn.Module, torch.nn.Module, torch.nn.Module | None, set[str]]:
    """The teacher (`load_teacher`), the student with its trainable parameters selected (`select_trainable`, before
    either stage), and for the layer-wise stage the teacher as hf_ffn's base model of its family (FfnBert layers)."""
    with_head = heal_args.mlm_kl_weight > 0
    teacher = load_teacher(models.teacher, with_head, models.teacher_config, heal_args.padding_free)
    # no "not function-preserving: heal it" warning: this is the healing
    student, _ = load_pretrained(
        models.student_class,
        heal_args.student,
        "--student",
        config=models.student_config,
        warn_not_function_preserving=False,
    )
    teacher_layers = None
    if layerwise:
        with quiet_transformers():
            family = models.teacher_family
            no_pooler = {"add_pooling_layer": False} if family.has_pooler else {}  # ELECTRA has none
            teacher_layers, _ = load_pretrained(family.heads[0].ffn_bert, models.teacher, "--teacher", **no_pooler)
    return teacher, student, teacher_layers, set(select_trainable(student, heal_args.train_parts, with_head))


def load_teacher(
    teacher: str, with_head: bool, config: PretrainedConfig | None = None, padding_free: bool = False
) -> torch.nn.Module:
    """The teacher, eval mode, frozen: the checkpoint's class (upstream's or hf_ffn's); with `padding_free` hf_ffn's
    class of its family, which keeps the sequences of a padding-free batch apart where upstream's may not.

    Raises:
        CheckpointNotLoadedError: as `hf_ffn.checkpoints.load_pretrained`.
        ValueError: if the MLM head would be newly initialised.
    """
    auto = AutoModelForMaskedLM if with_head else AutoModel
    if padding_free:
        family = checkpoint_family(teacher, "--teacher")
        auto = family.ffn_class("AutoModelForMaskedLM" if with_head else "AutoModel")
        if config is not None and not isinstance(config, family.config_class):  # an upstream checkpoint's config
            config = family.config_class.from_dict(config.to_dict())
    model, info = load_pretrained(auto, teacher, "--teacher", config=config)
    if with_head and info["missing_keys"]:
        raise ValueError(
            f"--mlm_kl_weight > 0 needs the teacher's MLM head, but {teacher!r} lacks {sorted(info['missing_keys'])}"
        )
    return model.eval().requires_grad_(False)


def healing_summary(healing: dict) -> str:
    """The one line a healing run ends with: cosine to the teacher and probe difference before → after, time, folder."""
    before, after = healing.get("before") or {}, healing.get("after") or {}
    b, a = before.get("agreement"), after.get("agreement")
    cosine = (
        f"cosine {b['cosine_mean']:.4f} → {a['cosine_mean']:.4f}" if b and a else "cosine not measured (no --eval_data)"
    )
    b, a = before.get("probe"), after.get("probe")
    probe = f"probe Δ {b['difference']:+.4f} → {a['difference']:+.4f}" if b and a else "no probe"
    return (
        f"healed: {cosine}, {probe}, {healing['wall_seconds']:.0f} s; saved to {healing['healed_dir']} "
        f"(record: {HEALING_FILE})"
    )
