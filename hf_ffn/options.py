"""Errors in the user's terms: a library error names a keyword argument or config field (`ffn_type`, `init`); a
command-line user typed an option (`--ffn-type`, `--ffn_init`). `options_named` re-raises the error with each name
replaced by the option that set it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


def name_options(message: str, options: Mapping[str, str]) -> str:
    """`message` with every whole-word occurrence of a key of `options` (a keyword or field name) replaced by its
    value (the option). A name inside a longer name or an option (`ffn_types`, `--ffn_type`, `re-init`) is left.

    Example: `name_options("init='preserving' cannot convert ... to ffn_type='relu'", {"init": "--ffn_init",
    "ffn_type": "--ffn_type"})` → `"--ffn_init='preserving' cannot convert ... to --ffn_type='relu'"`.
    """
    for name, option in options.items():
        message = re.sub(rf"(?<![\w.-]){re.escape(name)}(?!\w)", option, message)
    return message


@contextmanager
def options_named(options: Mapping[str, str]) -> Iterator[None]:
    """Inside the block, a `ValueError` whose message names a key of `options` is re-raised as a `ValueError`
    (chained) with `name_options(message, options)`.

    Raises:
        ValueError: the block's, in the user's terms.
    """
    try:
        yield
    except ValueError as error:
        renamed = name_options(str(error), options)
        if renamed == str(error):
            raise
        raise ValueError(renamed) from error


__all__ = ["name_options", "options_named"]
