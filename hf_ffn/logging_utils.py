"""Logging helpers shared by the parity job, the conversion loaders and the benchmark."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from transformers.utils import logging as hf_logging


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' per-load reports and progress bars inside the block; restored after."""
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()


__all__ = ["quiet_transformers"]
