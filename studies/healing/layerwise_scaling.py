#!/usr/bin/env python
"""Time and memory of layer-wise healing at bert-base size (12 layers, hidden 768, FFN 3072 → SwiGLU 2048), on a
seeded random bert-base architecture (`BertConfig()` defaults, the weights drawn with seed 1234) and random token
ids: the cost does not depend on the weights' values, only on the shapes.

    python -m studies.healing.layerwise_scaling --tokens 4096 8192 --steps 20      # writes out/layerwise_scaling.json

For each token count: the recorded activations (bytes, as `heal_layerwise` reports them), the process's peak RSS
growth, and seconds split into the per-layer fits; then the extrapolation to 10⁵ tokens (activations are linear in
tokens: HELD_TENSORS × tokens × hidden × 4 bytes; the closed-form Gram pass is linear in tokens; Adam steps are
independent of the token count).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

import torch
from transformers import BertConfig, BertModel

from hf_ffn.conversion import load_converted
from hf_ffn.healing.layerwise import HELD_TENSORS, LayerwiseArguments, heal_layerwise
from hf_ffn.modeling_ffn_bert import FfnBertModel


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--steps", type=int, default=20, help="Adam steps per layer")
    parser.add_argument("--output", default="out/layerwise_scaling.json")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(1234)
        BertModel(BertConfig()).save_pretrained(Path(tmp) / "bert-base")
        teacher = FfnBertModel.from_pretrained(Path(tmp) / "bert-base", add_pooling_layer=False).eval()
        for tokens in args.tokens:
            student, _ = load_converted(
                str(Path(tmp) / "bert-base"), FfnBertModel, ffn_type="swiglu", init="fresh", width="matched"
            )
            ids = torch.randint(1000, 30000, (tokens // 128, 128), generator=torch.Generator().manual_seed(0))
            rss = peak_rss_bytes()
            load = os.getloadavg()[0]
            start = time.perf_counter()
            record = heal_layerwise(
                student,
                teacher,
                ids,
                LayerwiseArguments(
                    layerwise_steps=args.steps,
                    layerwise_tokens=tokens,
                    layerwise_batch_tokens=512,
                    layerwise_memory_mb=1e6,
                ),
                Path(tmp) / f"run-{tokens}",
            )
            results.append(
                {
                    "tokens": record["tokens"],
                    "activation_bytes": record["activation_bytes"],
                    "peak_rss_growth_bytes": peak_rss_bytes() - rss,
                    "seconds": time.perf_counter() - start,
                    "layer_seconds": [r["seconds"] for r in record["layers"]],
                    "steps_per_layer": args.steps,
                    "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],
                    "threads": torch.get_num_threads(),
                }
            )
            print(json.dumps(results[-1]), flush=True)
    per_token = results[-1]["activation_bytes"] / results[-1]["tokens"]
    extrapolation = {
        "tokens": 100_000,
        "activation_bytes": HELD_TENSORS * 100_000 * 768 * 4,
        "activation_bytes_from_measured_per_token": per_token * 100_000,
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps({"runs": results, "extrapolation_1e5_tokens": extrapolation}, indent=2))
    print(json.dumps(extrapolation))


if __name__ == "__main__":
    main()
