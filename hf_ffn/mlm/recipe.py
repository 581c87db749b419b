"""The recipes of `hf-ffn mlm`: JSON objects of option values in `hf_ffn/mlm/recipes/` (`scratch-*-ln.json`: from
scratch, picked by `--recipe auto`; `cuda.json`: the speed defaults), or a copy given as `--recipe FILE`. Its values
become the parser's defaults (an option given wins); its `config_overrides` fill those `--config_overrides` leaves.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from transformers import HfArgumentParser

from .arguments import parse_config_overrides

RECIPES = Path(__file__).with_name("recipes")
AUTO, NONE = "auto", "none"
CONFIG_KEY = "config_overrides"


def recipe_names() -> list[str]:
    """The recipes shipped in `RECIPES` (file names without `.json`)."""
    return sorted(path.stem for path in RECIPES.glob("*.json"))


def read_recipe(name_or_file: str) -> dict:
    """The options of recipe `name_or_file` (a shipped name or a .json file), its description left out
    (`FileNotFoundError`: neither; `ValueError`: not a JSON object, or its `config_overrides` not one)."""
    path = RECIPES / f"{name_or_file}.json" if name_or_file in recipe_names() else Path(name_or_file)
    if not path.is_file():
        raise FileNotFoundError(
            f"--recipe {name_or_file!r}: no such recipe or file; allowed: {AUTO}, {NONE}, "
            f"{', '.join(recipe_names())} or a .json file of option values"
        )
    try:
        recipe = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"--recipe {str(path)!r} is not valid JSON: {error}") from error
    if not isinstance(recipe, dict) or not isinstance(recipe.get(CONFIG_KEY, {}), dict):
        raise ValueError(f"--recipe {str(path)!r}: a recipe is a JSON object of option values ({CONFIG_KEY}: one too)")
    recipe.pop("description", None)
    return recipe


def config_text(config: dict) -> str:
    """A recipe's `config_overrides` object as `--config_overrides` text ("key=value,..."; booleans true/false)."""
    return ",".join(f"{key}={json.dumps(value) if isinstance(value, bool) else value}" for key, value in config.items())


def _option_value(argv: Sequence[str], name: str) -> str | None:
    """The value `argv` gives option `name` (`--name V` or `--name=V`, or the key of its one .json file), else None."""
    if len(argv) == 1 and argv[0].endswith(".json"):
        value = json.loads(Path(argv[0]).read_text()).get(name)
        return None if value is None else str(value)
    spellings = {f"--{name}", f"--{name.replace('_', '-')}"}
    for index, arg in enumerate(argv):
        option, equals, value = arg.partition("=")
        if option in spellings:
            return value if equals else (argv[index + 1] if index + 1 < len(argv) else None)
    return None


def recipe_defaults(parser: HfArgumentParser, argv: Sequence[str]) -> tuple[str | None, dict]:
    """The recipe `argv` asks for (`auto`, the default: from scratch the one of its LayerNorm placement, none from a
    checkpoint) and its options, each checked to be an option of `parser` and its `config_overrides` by
    `parse_config_overrides`; `(None, {})` without a recipe (errors as `read_recipe`)."""
    checkpoint, name = _option_value(argv, "model_name_or_path"), _option_value(argv, "recipe")
    if name in (None, AUTO):
        name = None if checkpoint is not None else f"scratch-{_option_value(argv, 'layer_norm_position') or 'post'}-ln"
    if name in (None, NONE):
        return None, {}
    recipe = read_recipe(name)
    options = {action.dest for action in parser._actions}
    unknown = sorted(set(recipe) - options - {CONFIG_KEY})
    if unknown:
        raise ValueError(f"--recipe {name}: {', '.join(unknown)} is not an option of {parser.prog}")
    config = recipe.get(CONFIG_KEY, {})
    try:
        parse_config_overrides(config_text(config), checkpoint is not None)
    except ValueError as error:
        raise ValueError(f"--recipe {name}: {error}") from error
    return name, recipe
