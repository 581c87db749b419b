#!/usr/bin/env python
"""How long `hf-ffn --help` takes, against an empty Python start (`python -c pass`), and what a subcommand's own
`--help` costs (`hf-ffn compare --help`: argparse only; `hf-ffn heal --help`: HfArgumentParser, which imports
transformers). The issue's budget for `hf-ffn --help` is 2 s; this measures it, no test asserts it.

    python scripts/bench_cli_help.py            # median of 5 runs each, with the load average at the start

Each command runs in a fresh process (`subprocess.run`, output discarded); the `hf-ffn` console command is the one
installed beside this Python (its bin folder), else `python -c "import sys; sys.argv[0] = 'hf-ffn'; ..."`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def command_line() -> list[str]:
    """`hf-ffn` beside this interpreter, else the same entry point run by this interpreter."""
    script = Path(sys.executable).with_name("hf-ffn")
    if script.exists() or shutil.which("hf-ffn"):
        return [str(script) if script.exists() else shutil.which("hf-ffn")]
    code = "import sys; sys.argv[0] = 'hf-ffn'; from hf_ffn.cli import main; sys.exit(main())"
    return [sys.executable, "-c", code]


def seconds(argv: list[str], repeats: int) -> float:
    """Median wall-clock seconds of `argv` over `repeats` fresh processes."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5, help="Fresh processes per command (the median is shown).")
    args = parser.parse_args(argv)
    hf_ffn = command_line()
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} logical cores)")
    rows = [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("hf-ffn --help", [*hf_ffn, "--help"]),
        ("hf-ffn compare --help", [*hf_ffn, "compare", "--help"]),
        ("hf-ffn heal --help", [*hf_ffn, "heal", "--help"]),
    ]
    baseline = None
    for name, command in rows:
        median = seconds(command, args.repeats)
        baseline = baseline or median
        print(f"{name:24s} {median:7.3f} s  ({median / baseline:5.1f}x python -c pass)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
