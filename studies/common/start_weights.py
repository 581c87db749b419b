"""What a fine-tuning run starts from: `weights_sha256` (the weights, bit for bit) and `recipe_sha256` (how the
folder was made). The comparisons store both with every run and resume only from the same start; a folder re-made
by the same recipe on another CPU has other bits but the same recipe (studies/four_tasks/compare_tasks.py,
`--accept_remade_students`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

# What a healing run read from paths (they differ between machines), left out of its recipe; the data enters by its
# sizes (documents, blocks, block tokens) and the teacher by the SHA-256 of its weights.
RECIPE_PATH_KEYS = ("student", "teacher", "healed_dir", "eval_dir", "eval_data", "train_files")


def recipe_sha256(folder: str) -> str | None:
    """SHA-256 of how a converted or healed folder was made, from its `conversion_report.json`: the conversion (model
    class, init, config changes), the healing arguments without paths (`RECIPE_PATH_KEYS`), its training arguments,
    the layer-wise arguments, the sizes of its data, and the source checkpoint's `weights_sha256`. Two folders made by
    the same command from the same source and data share it even where CPU arithmetic made their weights differ in
    the last bits (another machine). None when the folder has no report or its source folder is not here.

    Raises:
        ValueError: if `conversion_report.json` is not valid JSON.
    """
    path = Path(folder) / "conversion_report.json"
    if not path.is_file():
        return None
    try:
        report = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from error
    source = report.get("source")
    if not source or not Path(source).is_dir():
        return None
    healing = report.get("healing") or {}
    recipe = {
        "source_weights": weights_sha256(source),
        "conversion": {key: report.get(key) for key in ("model_class", "init", "config_changes")},
        "healing": {
            key: value for key, value in (healing.get("arguments") or {}).items() if key not in RECIPE_PATH_KEYS
        },
        "training": healing.get("training"),
        "layerwise": (healing.get("layerwise") or {}).get("arguments"),
        "data": {key: (healing.get("data") or {}).get(key) for key in ("documents", "blocks", "block_tokens")},
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def weights_sha256(folder: str) -> str:
    """SHA-256 over the weight files of a checkpoint folder (`*.safetensors`, else `*.bin`, sorted by name): the
    identity of the weights a run started from, the same wherever the folder lies.

    Raises:
        FileNotFoundError: if `folder` holds no weight file.
    """
    files = sorted(Path(folder).glob("*.safetensors")) or sorted(Path(folder).glob("*.bin"))
    if not files:
        raise FileNotFoundError(f"{folder!r} holds no *.safetensors or *.bin weight file")
    digest = hashlib.sha256()
    for file in files:  # one digest over the files in order: file_digest updates the object it is handed
        with file.open("rb") as handle:
            hashlib.file_digest(handle, lambda: digest)
    return digest.hexdigest()


__all__ = ["RECIPE_PATH_KEYS", "recipe_sha256", "weights_sha256"]
