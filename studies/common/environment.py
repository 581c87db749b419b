"""The machine and software a study ran on, and the paths and commands it ran with, as every report states them
(the benchmarks, the comparison, the healing study): one place that collects them.

Reports are published under docs/ and read on other machines: a path is written the way a reader runs it from
the repository root (`portable_path`: relative, `../shared/data/...`; the bundled checkpoint by name), never as
this machine's absolute path (tests/test_docs_paths.py checks docs/, README.md and model_cards/)."""

from __future__ import annotations

import os
import platform
import shlex
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

import torch

from hf_ffn.parity import bundled_checkpoint

PACKAGES = ("hf_ffn", "torch", "transformers")  # installed distributions whose versions a report names
REPO = Path(__file__).resolve().parents[2]  # the repository root, where the docs' commands run
BUNDLED = "the bundled all-MiniLM-L6-v2"  # how prose names `bundled_checkpoint()`
# ... and how a command does: the shell substitutes the path on the reader's machine.
BUNDLED_IN_COMMAND = "\"$(python -c 'from hf_ffn.parity import bundled_checkpoint as b; print(b())')\""


def portable_path(path: str | os.PathLike, bundled: str = BUNDLED) -> str:
    """`path` as a reader writes it from the repository root: the bundled checkpoint as `bundled`, an absolute
    path relative to the repository root (`/…/shared/data/x` → `../shared/data/x`), a relative path as given."""
    text = str(path)
    if not os.path.isabs(text):
        return text
    if Path(text).resolve() == Path(bundled_checkpoint()).resolve():
        return bundled
    return os.path.relpath(text, REPO)


def portable_command(argv: Sequence[str]) -> str:
    """A command line (`argv`, program first) with every absolute path argument made portable (`portable_path`;
    also the value of `--flag=PATH` and `NAME=PATH`), the bundled checkpoint as a shell substitution."""
    words = []
    for word in argv:
        prefix, _, value = word.rpartition("=") if "=" in word else ("", "", word)
        portable = portable_path(value, BUNDLED_IN_COMMAND) if os.path.isabs(value) else value
        if portable == BUNDLED_IN_COMMAND:
            words.append((shlex.quote(prefix + "=") if prefix else "") + portable)
        else:
            words.append(shlex.quote(f"{prefix}={portable}" if prefix else portable))
    return " ".join(words)


def cpu_model() -> str:
    """The CPU model (from /proc/cpuinfo where it exists, else `platform`'s processor or machine name)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def environment() -> dict[str, str | int]:
    """Versions (`importlib.metadata.version` of `PACKAGES`; Python), the machine (architecture, CPU model, logical
    CPUs) and torch's intra-op threads, for a results document."""
    return {
        **{name: version(name) for name in PACKAGES},
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cpus": os.cpu_count() or 0,
        "torch_threads": torch.get_num_threads(),
    }


def machine() -> dict[str, str | int]:
    """CPU model and the number of logical cores (the comparison's and the healing study's records)."""
    return {"cpu": cpu_model(), "cores": os.cpu_count() or 0}


def versions() -> str:
    """ "torch X, transformers Y, hf_ffn Z, Python W"."""
    env = environment()
    return f"torch {env['torch']}, transformers {env['transformers']}, hf_ffn {env['hf_ffn']}, Python {env['python']}"


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (`os.getloadavg`), None where the platform has none."""
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


__all__ = [
    "BUNDLED",
    "BUNDLED_IN_COMMAND",
    "PACKAGES",
    "REPO",
    "cpu_model",
    "environment",
    "load_average",
    "machine",
    "portable_command",
    "portable_path",
    "versions",
]


def busy(load_before: float, load_after: float, threads: int, cpus: int) -> bool:
    """Whether other work loaded the machine: the 1-minute load average before the run, or after it less the
    benchmark's own `threads` (its runnable threads are in the load it leaves), above the CPU count."""
    return max(load_before, load_after - threads) > cpus
