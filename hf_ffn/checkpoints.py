"""Reading a checkpoint argument: `check_checkpoint` (a name that looks local must be a checkpoint folder; a hub name
offline must be cached), `load_pretrained` and `load_tokenizer` (a load that did not load is an error), and what BERT
would not load of a saved FfnBert folder (`weights_bert_ignores`).

transformers' `from_pretrained` initialises at random every weight it does not find and only logs it, and builds an
empty 5-token tokenizer for a folder without tokenizer files; here those raise `CheckpointNotLoadedError` (the CLI's
one-line error, exit 2). What may be new stays a report: a head or pooler, and the weights a variant adds.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from huggingface_hub import constants, try_to_load_from_cache
from safetensors import SafetensorError

from .checkpoint_names import FINAL_NORM, GATE_PROJ
from .configuration_ffn_bert import FfnBertConfig, is_gated

# Written by `hf-ffn convert` beside the weights: what the conversion did, with its `source` checkpoint.
REPORT_FILE = "conversion_report.json"


def looks_local(name_or_path: str | os.PathLike) -> bool:
    """Whether `name_or_path` can only mean a local path: it exists, is absolute, starts with `./`, `../` or `~`,
    has more than one `/`, or its parent folder exists; else it may be a hub name."""
    text = os.fspath(name_or_path)
    if text in (".", "..") or text.startswith(("./", "../", "~")) or os.path.isabs(text) or text.count("/") > 1:
        return True
    path = Path(text).expanduser()
    return path.exists() or ("/" in text and path.parent.is_dir())


def check_checkpoint(
    name_or_path: str | os.PathLike, argument: str = "checkpoint", marker: str = "config.json"
) -> None:
    """Raise `FileNotFoundError` if `name_or_path` looks local (`looks_local`) but is not a checkpoint folder.

    `argument`: how the user names it (`CHECKPOINT`, `--teacher`), first in the message; `marker`: the file the
    folder must hold.

    Raises:
        FileNotFoundError: no such folder, a file, a folder without `marker`, or (a hub name, offline, not cached)
            `hub_name_unreachable`.
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
    """The message for a hub name that cannot be fetched, with the way out."""
    offline = "HF_HUB_OFFLINE=1 is set" if constants.HF_HUB_OFFLINE else "the hub cannot be reached"
    return (
        f"{argument}: {os.fspath(name)!r} is not a local folder, so it is a Hugging Face hub name, and it cannot be "
        f"loaded: {offline} and it is not in the local cache ({constants.HF_HUB_CACHE}). Give a local checkpoint "
        f"folder, or download it once where the hub is reachable (unset HF_HUB_OFFLINE; "
        f"`hf download {os.fspath(name)}`)"
    )


# An encoder weight under any base-model prefix: what a checkpoint must supply (heads and the pooler may be new);
# `embeddings_project` is ELECTRA's projection of its embeddings to hidden_size.
ENCODER_KEY = re.compile(r"(^|\.)(embeddings|embeddings_project|encoder)\.")
# The files one of which a folder's tokenizer vocabulary is read from.
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "sentencepiece.bpe.model", "spiece.model")


class CheckpointNotLoadedError(ValueError):
    """A checkpoint that did not load: encoder weights missing or renamed, a weights file that cannot be read or
    does not fit the config, or no tokenizer (one line; the CLI prints it and exits 2)."""


def is_encoder_key(key: str) -> bool:
    """Whether a model key is an encoder weight (embeddings, attention, FFN, LayerNorms), not a head's or pooler's."""
    return ENCODER_KEY.search(key) is not None


def check_loaded(
    name_or_path: str | os.PathLike,
    info: dict[str, Any],
    model: Any,
    argument: str = "checkpoint",
    may_be_new: Callable[[str], bool] = lambda key: False,
) -> None:
    """Raise if an encoder weight of `model` did not come from the checkpoint (`info`: `from_pretrained`'s loading
    info; `may_be_new`: which missing encoder keys are new by design).

    Raises:
        CheckpointNotLoadedError: "ARGUMENT PATH did not load: 103 of 103 encoder weights missing, 103 unexpected
            (first: roberta.embeddings.LayerNorm.bias)", naming what the checkpoint holds instead.
    """
    mismatched = sorted(str(k[0]) if isinstance(k, tuple) else str(k) for k in info.get("mismatched_keys", []))
    resized = [k for k in mismatched if is_encoder_key(k) and not may_be_new(k)]
    if resized:
        raise CheckpointNotLoadedError(
            f"{argument} {os.fspath(name_or_path)} did not load: the shapes of {len(resized)} of its encoder weights "
            f"differ from its config.json's (first: {resized[0]}; hidden_size, intermediate_size, vocab_size, ...)"
        )
    missing = [k for k in info["missing_keys"] if is_encoder_key(k) and not may_be_new(k)]
    unexpected = sorted(info["unexpected_keys"])
    # encoder weights the file holds and the model has no place for (a config with fewer layers than the weights);
    # `position_ids` is a buffer old checkpoints saved
    extra = [k for k in unexpected if is_encoder_key(k) and not k.endswith("position_ids")]
    if not missing and not extra:
        return
    where = f"{argument} {os.fspath(name_or_path)} did not load: "
    if not missing:
        raise CheckpointNotLoadedError(
            f"{where}it holds {len(extra)} encoder weights the model of its config.json has no place for (first: "
            f"{extra[0]}); does config.json (num_hidden_layers, ...) describe these weights?"
        )
    total = sum(is_encoder_key(k) and not may_be_new(k) for k, _ in model.named_parameters())
    found = f", {len(unexpected)} unexpected (first: {unexpected[0]})" if unexpected else " (the file lacks them)"
    raise CheckpointNotLoadedError(
        f"{where}{len(missing)} of {total} encoder weights missing (first: {sorted(missing)[0]}){found}; a checkpoint "
        f"must hold every weight of BERT's embeddings and encoder under BERT's names"
    )


def load_pretrained(
    model_class: Any,
    name_or_path: str | os.PathLike,
    argument: str = "checkpoint",
    may_be_new: Callable[[str], bool] = lambda key: False,
    **kwargs,
) -> tuple[Any, dict[str, Any]]:
    """`(model, info)`: `model_class.from_pretrained(name_or_path, output_loading_info=True, **kwargs)`, checked
    (`check_checkpoint`, a readable weights file, `check_loaded`). A head of another shape is re-initialised.

    Raises:
        FileNotFoundError: as `check_checkpoint`.
        CheckpointNotLoadedError: an encoder weight missing, renamed or of another shape than the config's, or one
            the config has no place for; a truncated or corrupt weights file.
    """
    check_checkpoint(name_or_path, argument)
    # a head of another shape is re-initialised; an encoder weight of another shape is refused by `check_loaded`
    kwargs.setdefault("ignore_mismatched_sizes", True)
    try:
        model, info = model_class.from_pretrained(name_or_path, output_loading_info=True, **kwargs)
    except (SafetensorError, EOFError, pickle.UnpicklingError) as error:  # the last two: pytorch_model.bin's
        raise CheckpointNotLoadedError(
            f"{argument} {os.fspath(name_or_path)} did not load: its weights file cannot be read ({error}); it is "
            f"truncated or corrupt: copy or download it again"
        ) from None
    except (RuntimeError, OSError) as error:
        damaged_bin = isinstance(error, OSError) and error.errno == errno.EINVAL  # torch.load of a cut zip file
        if damaged_bin or "PytorchStreamReader" in str(error):  # a damaged pytorch_model.bin
            raise CheckpointNotLoadedError(
                f"{argument} {os.fspath(name_or_path)} did not load: its weights file cannot be read "
                f"({str(error).splitlines()[0]}); it is truncated or corrupt: copy or download it again"
            ) from None
        if isinstance(error, OSError) or "ignore_mismatched_sizes" not in str(error):
            raise
        raise CheckpointNotLoadedError(
            f"{argument} {os.fspath(name_or_path)} did not load: the shapes of its weights differ from its "
            f"config.json's (hidden_size, intermediate_size, vocab_size, ...)"
        ) from None
    check_loaded(name_or_path, info, model, argument, may_be_new)
    return model, info


def load_tokenizer(name_or_path: str | os.PathLike, argument: str = "checkpoint", **kwargs) -> Any:
    """`AutoTokenizer.from_pretrained(name_or_path, **kwargs)`, checked: the folder exists (no config.json needed),
    holds one of `TOKENIZER_FILES`, and the tokenizer has more entries than its special tokens.

    Raises:
        FileNotFoundError: as `check_checkpoint`.
        CheckpointNotLoadedError: "ARGUMENT PATH has no tokenizer (none of tokenizer.json, vocab.txt, ...)".
    """
    from transformers import AutoTokenizer

    path = Path(name_or_path).expanduser()
    if not path.is_dir():  # a tokenizer folder needs no config.json; a hub name: its tokenizer_config.json cached
        check_checkpoint(name_or_path, argument, marker="tokenizer_config.json")
    empty = path.is_dir() and not any((path / name).is_file() for name in TOKENIZER_FILES)
    tokenizer = None if empty else AutoTokenizer.from_pretrained(name_or_path, **kwargs)
    if tokenizer is None or len(tokenizer) <= len(set(tokenizer.all_special_tokens)):
        raise CheckpointNotLoadedError(
            f"{argument} {os.fspath(name_or_path)} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); copy the "
            f"tokenizer files of the checkpoint it came from into it"
        )
    return tokenizer


def weights_bert_ignores(config: FfnBertConfig) -> list[str]:
    """The weights (base-model names) of a model of `config` that upstream `BertModel` would drop: each gated
    layer's `mlp.gate_proj` and the Pre-LN `encoder.final_norm`."""
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
    """Keys with the same name in several layers written once: `encoder.layer.{0, 1, 2}.mlp.gate_proj.weight`."""
    layers: dict[str, list[str]] = {}
    for key in keys:
        match = re.search(r"\.layer\.(\d+)\.", key)
        template = key if match is None else key[: match.start(1)] + "{}" + key[match.end(1) :]
        layers.setdefault(template, []).append(match.group(1) if match else "")
    return [t.format("{" + ", ".join(ids) + "}" if len(ids) > 1 else ids[0]) for t, ids in layers.items()]


def read_conversion_report(folder: str | os.PathLike) -> dict[str, Any] | None:
    """A local folder's `REPORT_FILE` as a dict; None if it has none (or it is unreadable)."""
    try:
        return json.loads((Path(folder) / REPORT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def conversion_source(folder: str | os.PathLike) -> str | None:
    """The checkpoint a converted folder came from (its `REPORT_FILE`), else None: the resolved `source_path` while
    it exists, else `source` as given."""
    written = read_conversion_report(folder) or {}
    path = written.get("source_path")
    return path if path and Path(path).is_dir() else written.get("source")


__all__ = [
    "ENCODER_KEY",
    "REPORT_FILE",
    "TOKENIZER_FILES",
    "CheckpointNotLoadedError",
    "check_checkpoint",
    "check_loaded",
    "conversion_source",
    "group_layer_keys",
    "hub_name_unreachable",
    "is_encoder_key",
    "load_pretrained",
    "load_tokenizer",
    "looks_local",
    "read_conversion_report",
    "weights_bert_ignores",
]
