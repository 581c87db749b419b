"""The command-line options the two fine-tuning comparisons share (`studies/variant_comparison/compare_variants.py`,
`studies/four_tasks/compare_tasks.py`): which students, which seeds, the optimiser and sequence settings, threads,
unpadding and where run folders go. Each script adds its own budget and data options beside them."""

from __future__ import annotations

import argparse


def add_finetune_options(parser: argparse.ArgumentParser, max_seq_length: int) -> None:
    """Add the shared options to `parser`; `max_seq_length` is the script's default (its data's lengths)."""
    parser.add_argument(
        "--healed",
        action="append",
        default=[],
        metavar="VARIANT=FOLDER",
        help="a healed student folder of VARIANT, fine-tuned as saved (repeatable)",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--warmup_fraction", type=float, default=0.1)
    parser.add_argument("--max_seq_length", type=int, default=max_seq_length)
    parser.add_argument("--max_test_samples", type=int, default=0, help="rt_polarity test rows (0: all 1,662)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0: torch's default)")
    parser.add_argument(
        "--no_unpad_tokens",
        dest="unpad_tokens",
        action="store_false",
        help="run the padded path (default: unpad_tokens on, the same losses at about half the work)",
    )
    parser.add_argument("--work_dir", help="where run folders go (default: a temporary folder, deleted per run)")
