"""The machine and software a study ran on, as its reports state them (the comparison, the healing study)."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch
import transformers

from hf_ffn import __version__


def machine() -> dict[str, str | int]:
    """CPU model (from /proc/cpuinfo where it exists) and the number of logical cores."""
    model = platform.processor() or platform.machine() or "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpu": model, "cores": os.cpu_count() or 0}


def versions() -> str:
    """"torch X, transformers Y, hf_ffn Z, Python W"."""
    return (f"torch {torch.__version__}, transformers {transformers.__version__}, hf_ffn {__version__}, "
            f"Python {platform.python_version()}")


__all__ = ["machine", "versions"]
