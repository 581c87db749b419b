#!/usr/bin/env python
"""Run README.md's code blocks in order, as a new user would, and stop at the first that fails.

Every ```bash and ```python block runs, top to bottom, in one bash session at the repository root (so a variable
set in one block, e.g. `BUNDLED=...`, is seen by the next), with the project's environment active (`.venv/bin`
first on PATH, as README asks) and `HF_HUB_OFFLINE=1`. A python block runs as `python <block file>`.

A block right after a line `<!-- readme-check: skip (REASON) -->` is not run; the reason must say why (the
set-up block, which `.ci/run` itself runs first; a long command whose short variant follows it).

    python scripts/check_readme.py            # from a fresh clone after README's set-up command, ~5 min here
    python scripts/check_readme.py --list     # only print the blocks and whether each runs

Exit status: 0 when every block ran and no committed file changed (`git status`), 1 when a block failed (its line
number and output are printed) or a committed file changed, 2 on a README without blocks or a skip marker without
a reason.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(bash|python)\s*$")
SKIP = re.compile(r"^<!--\s*readme-check:\s*skip\s*(\((?P<reason>[^)]*)\))?\s*-->\s*$")


@dataclass
class Block:
    language: str  # "bash" or "python"
    line: int  # 1-based line of the opening fence
    code: str
    skip_reason: str | None


def read_blocks(readme: Path) -> list[Block]:
    """The fenced bash/python blocks of `readme`, in order, each with the skip reason of a marker right above it.

    Raises:
        ValueError: a skip marker without a reason, or an unclosed fence.
    """
    lines = readme.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        if j == len(lines):
            raise ValueError(f"{readme}:{start + 1}: unclosed ``` fence")
        above = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        skip = SKIP.match(above.strip())
        if skip and not (skip.group("reason") or "").strip():
            raise ValueError(f"{readme}:{start}: a readme-check skip marker needs a reason: skip (REASON)")
        reason = skip.group("reason").strip() if skip else None
        blocks.append(Block(match.group(1), start + 1, "\n".join(lines[start + 1 : j]) + "\n", reason))
        i = j + 1
    return blocks


def session_script(blocks: list[Block], folder: Path) -> str:
    """One bash script running the blocks in order; python blocks are written to files in `folder`."""
    parts = ["set -euo pipefail"]
    for n, block in enumerate(blocks):
        if block.skip_reason is not None:
            continue
        parts.append(f"echo '=== README.md:{block.line} ({block.language})' >&2")
        if block.language == "python":
            path = folder / f"block_{n}_line_{block.line}.py"
            path.write_text(block.code)
            parts.append(f"python {path}")
        else:
            parts.append(block.code)
        parts.append(f"echo '--- README.md:{block.line} ok' >&2")
    return "\n".join(parts) + "\n"


def changed_tracked_files(folder: Path) -> list[str]:
    """Committed files that differ from the checkout's HEAD (`git status`), [] outside a git checkout."""
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=folder, capture_output=True, text=True
    )
    return [line[3:] for line in status.stdout.splitlines()] if status.returncode == 0 else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", default=str(REPO / "README.md"))
    parser.add_argument("--list", action="store_true", help="print the blocks and whether each runs, run nothing")
    args = parser.parse_args(argv)
    try:
        blocks = read_blocks(Path(args.readme))
    except ValueError as error:
        print(f"check_readme: {error}", file=sys.stderr)
        return 2
    if not blocks:
        print(f"check_readme: {args.readme} has no bash/python blocks", file=sys.stderr)
        return 2
    for block in blocks:
        status = f"skip ({block.skip_reason})" if block.skip_reason is not None else "run"
        print(f"README.md:{block.line:<4} {block.language:<6} {status}")
    if args.list:
        return 0
    root = Path(args.readme).resolve().parent  # the blocks run where the README is, with that checkout's .venv
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        VIRTUAL_ENV=str(root / ".venv"),
        PATH=f"{root / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "readme.sh"
        script.write_text(session_script(blocks, Path(tmp)))
        result = subprocess.run(["bash", str(script)], cwd=root, env=env, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        print(
            f"check_readme: a README block failed (exit {result.returncode}); see the last '===' line above",
            file=sys.stderr,
        )
        return 1
    changed = changed_tracked_files(root)
    if changed:
        print(
            f"check_readme: the README blocks changed committed files (scripts must write to out/): "
            f"{', '.join(changed)}",
            file=sys.stderr,
        )
        return 1
    print("check_readme: every README block ran", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
