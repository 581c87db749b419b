"""Errors in the user's terms: a library error's keyword or config field (`init`) replaced by the option that set it
(`--ffn_init`)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager


def name_options(message: str, options: Mapping[str, str]) -> str:
    """`message` with every whole-word occurrence of a key of `options` replaced by its value (the option); a name
    inside a longer name or an option (`ffn_types`, `--ffn_type`, `re-init`) is left."""
    for name, option in options.items():
        message = re.sub(rf"(?<![\w.-]){re.escape(name)}(?!\w)", option, message)
    return message


@contextmanager
def options_named(options: Mapping[str, str]) -> Iterator[None]:
    """Inside the block, a `ValueError` whose message names a key of `options` is re-raised (chained) with
    `name_options(message, options)`."""
    try:
        yield
    except ValueError as error:
        renamed = name_options(str(error), options)
        if renamed == str(error):
            raise
        raise ValueError(renamed) from error


__all__ = ["name_options", "options_named"]
