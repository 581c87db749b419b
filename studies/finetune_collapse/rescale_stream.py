"""A copy of a Pre-LN FfnBert folder whose residual stream is scaled by C, the function kept: the embedding
LayerNorm's weight and bias and every sublayer's output projection (attention `output.dense`, FFN `down_proj`)
multiplied by C. Every other LayerNorm reads the stream and is invariant to its scale (up to `layer_norm_eps`,
1e-12 here against variances of order 1), so the last hidden state is the same up to float rounding; what
changes is the scale at which fine-tuning's updates meet the stream.

    python -m studies.finetune_collapse.rescale_stream SOURCE C DESTINATION

Raises ValueError for a folder that is not all Pre-LN, a C <= 0 or an existing DESTINATION.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file

from hf_ffn.training.arguments import bad_input_exits


def scaled(key: str) -> bool:
    """Whether a checkpoint key (BERT's on-disk names) writes into the stream: embeddings' LayerNorm, each layer's
    attention output projection and FFN down projection."""
    if key.startswith("embeddings.LayerNorm."):
        return True
    return ".attention.output.dense." in key or (".output.dense." in key and ".attention." not in key)


def rescale_stream(source: str | Path, scale: float, destination: str | Path) -> int:
    """Write the rescaled copy (module docstring); returns the number of tensors scaled."""
    source, destination = Path(source), Path(destination)
    config = json.loads((source / "config.json").read_text())
    positions = config.get("layer_norm_position")
    if positions != "pre" and not (isinstance(positions, list) and set(positions) == {"pre"}):
        raise ValueError(f"{source}: layer_norm_position {positions!r}; the stream is only free in a Pre-LN model")
    if not scale > 0:
        raise ValueError(f"C must be > 0, got {scale}")
    if destination.exists():
        raise ValueError(f"{destination} exists; give a new folder")
    weights = load_file(source / "model.safetensors")
    keys = [key for key in weights if scaled(key)]
    for key in keys:
        weights[key] = weights[key] * scale
    shutil.copytree(source, destination)
    save_file(weights, destination / "model.safetensors", metadata={"format": "pt"})
    return len(keys)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source")
    parser.add_argument("scale", type=float, metavar="C")
    parser.add_argument("destination")
    args = parser.parse_args(argv)
    count = rescale_stream(args.source, args.scale, args.destination)
    print(f"{args.destination}: {count} tensors scaled by {args.scale}")
    return 0


if __name__ == "__main__":
    with bad_input_exits("rescale_stream.py"):
        sys.exit(main())
