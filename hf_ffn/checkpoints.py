"""What a checkpoint argument is: a local folder that must exist (`check_checkpoint`, the one check every command,
script and loading function runs first), and what BERT would not load of a saved FfnBert folder
(`weights_bert_ignores`; why its config is not plain BERT is `FfnBertConfig.non_default_fields`).

A name that looks local (absolute, `./`, `../`, `~`, more than one `/`, or whose parent folder exists) and does not
exist gets "no such folder: PATH" here, instead of the hub client's repo-id or connection error. A hub name
(`name`, `org/name`) passes through to transformers, unless the hub is off (`HF_HUB_OFFLINE=1`) and the name is not
in the local Hugging Face cache: then it gets an error saying so (`hub_name_unreachable`), instead of transformers'
"couldn't connect" message.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from huggingface_hub import constants, try_to_load_from_cache

from .checkpoint_names import FINAL_NORM, GATE_PROJ
from .configuration_ffn_bert import FfnBertConfig, is_gated

# Written by `hf-ffn convert` beside the weights: what the conversion did, with its `source` checkpoint.
REPORT_FILE = "conversion_report.json"


def looks_local(name_or_path: str | os.PathLike) -> bool:
    """Whether `name_or_path` can only mean a local path: it exists, is absolute, starts with `./`, `../` or `~`,
    has more than one `/` (a hub id has at most one), or its parent folder exists (`out/missing` when `out/` is
    there). A bare `name` or `org/name` whose `org/` is not a local folder may be a hub name."""
    text = os.fspath(name_or_path)
    if text in (".", "..") or text.startswith(("./", "../", "~")) or os.path.isabs(text) or text.count("/") > 1:
        return True
    path = Path(text).expanduser()
    return path.exists() or ("/" in text and path.parent.is_dir())


def check_checkpoint(
    name_or_path: str | os.PathLike, argument: str = "checkpoint", marker: str = "config.json"
) -> None:
    """Raise `FileNotFoundError` if `name_or_path` looks local (`looks_local`) but is not a checkpoint folder.

    Args:
        name_or_path: a local folder or a hub name.
        argument: how the caller's user names it (`--model`, `CHECKPOINT`, `--model_name_or_path`), put first in
            the message.
        marker: the file the folder must hold (`config.json`; `modules.json` for a sentence-transformers model).

    Raises:
        FileNotFoundError: "ARGUMENT: no such folder: PATH", "ARGUMENT: PATH is a file, not a checkpoint folder",
            "ARGUMENT: PATH is a folder without MARKER", or (a hub name, offline, not cached) `hub_name_unreachable`.
    """
    if not looks_local(name_or_path):  # a hub name: transformers resolves it, from the cache when offline
        if constants.HF_HUB_OFFLINE and not isinstance(try_to_load_from_cache(os.fspath(name_or_path), marker), str):
            raise FileNotFoundError(hub_name_unreachable(name_or_path, argument))
        return
    path = Path(name_or_path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"{argument}: no such folder: {os.fspath(name_or_path)}")
    if not path.is_dir():
        raise FileNotFoundError(f"{argument}: {os.fspath(name_or_path)} is a file, not a checkpoint folder")
    if not (path / marker).is_file():
        raise FileNotFoundError(f"{argument}: {os.fspath(name_or_path)} is a folder without {marker}")


def hub_name_unreachable(name: str | os.PathLike, argument: str = "checkpoint") -> str:
    """The message for a hub name that cannot be fetched: it names the offline switch and the way out."""
    offline = "HF_HUB_OFFLINE=1 is set" if constants.HF_HUB_OFFLINE else "the hub cannot be reached"
    return (
        f"{argument}: {os.fspath(name)!r} is not a local folder, so it is a Hugging Face hub name, and it cannot be "
        f"loaded: {offline} and it is not in the local cache ({constants.HF_HUB_CACHE}). Give a local checkpoint "
        f"folder, or download it once where the hub is reachable (unset HF_HUB_OFFLINE; "
        f"`hf download {os.fspath(name)}`)"
    )


def weights_bert_ignores(config: FfnBertConfig) -> list[str]:
    """The weights (base-model names, as on disk) a model of `config` has and upstream `BertModel` has no place
    for, so that loading the folder into `BertModel` would drop them: each gated layer's `mlp.gate_proj` and the
    Pre-LN `encoder.final_norm`."""
    params = ("weight", "bias") if config.ffn_bias else ("weight",)
    names = [
        f"encoder.layer.{i}.{GATE_PROJ}.{p}"
        for i, ffn_type in enumerate(config.ffn_types)
        if is_gated(ffn_type)
        for p in params
    ]
    if config.layer_norm_positions[-1] == "pre":
        names += [f"{FINAL_NORM}.weight", f"{FINAL_NORM}.bias"]
    return names


def group_layer_keys(keys: list[str]) -> list[str]:
    """Keys with the same name in several layers written once: `encoder.layer.{0, 1, 2}.mlp.gate_proj.weight`
    (the notation of transformers' loading report), in first-seen order."""
    layers: dict[str, list[str]] = {}
    for key in keys:
        match = re.search(r"\.layer\.(\d+)\.", key)
        template = key if match is None else key[: match.start(1)] + "{}" + key[match.end(1) :]
        layers.setdefault(template, []).append(match.group(1) if match else "")
    return [t.format("{" + ", ".join(ids) + "}" if len(ids) > 1 else ids[0]) for t, ids in layers.items()]


def conversion_source(folder: str | os.PathLike) -> str | None:
    """The checkpoint a folder written by `hf-ffn convert` was converted from (its `REPORT_FILE`), else None."""
    report = Path(folder) / REPORT_FILE
    try:
        return json.loads(report.read_text(encoding="utf-8")).get("source")
    except (OSError, ValueError):
        return None


__all__ = [
    "REPORT_FILE",
    "check_checkpoint",
    "conversion_source",
    "group_layer_keys",
    "hub_name_unreachable",
    "looks_local",
    "weights_bert_ignores",
]
