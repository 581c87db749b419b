"""Export FfnBertModel variants of a real checkpoint to ONNX and compare onnxruntime with PyTorch.

    HF_HUB_OFFLINE=1 python scripts/export_onnx_check.py [--model PATH] [--out DIR] [--variants default geglu ...]

For each variant: load the checkpoint into FfnBertModel with that variant's overrides (weights a variant adds are
initialised as `from_pretrained` reports, seeded), export with `hf_ffn.export.export_onnx` (traced at batch 2, seq 8),
then run a tokenised batch of 3 sentences of different lengths (another batch size and sequence length) through
onnxruntime and PyTorch and print max |Δ| per output, the outputs' largest magnitude and the export time.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer

from hf_ffn import FfnBertModel
from hf_ffn.export import export_onnx, onnx_max_abs_diff
from hf_ffn.parity import bundled_checkpoint

VARIANTS: dict[str, dict] = {
    "default": {},
    "geglu": {"ffn_type": "geglu"},
    "swiglu": {"ffn_type": "swiglu"},
    "pre_ln": {"layer_norm_position": "pre"},
}
SENTENCES = [
    "A short one.",
    "The encoder is exported once and then served with onnxruntime at any batch size and length.",
    "Three sentences of different lengths make a padded batch.",
]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="BERT checkpoint (default: the bundled all-MiniLM-L6-v2)")
    parser.add_argument("--out", default=None, help="folder for the .onnx files (default: a temporary folder)")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args(argv)
    checkpoint = args.model or bundled_checkpoint()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    inputs = tokenizer(SENTENCES, padding=True, return_tensors="pt", return_token_type_ids=True)
    inputs = {k: inputs[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        for name in args.variants:
            torch.manual_seed(0)  # the variant's new weights (gate_proj, final_norm)
            model = FfnBertModel.from_pretrained(checkpoint, **VARIANTS[name]).eval()
            start = time.perf_counter()
            path = export_onnx(model, out / f"{name}.onnx")
            seconds = time.perf_counter() - start
            diffs = onnx_max_abs_diff(model, path, inputs)
            with torch.no_grad():
                scale = {f"max_abs_{k}": v.abs().max().item() for k, v in model(**inputs).items()}
            row = {"variant": name, "batch_shape": list(inputs["input_ids"].shape), "export_s": round(seconds, 1)}
            print(json.dumps(row | {f"max_abs_diff_{k}": v for k, v in diffs.items()} | scale), flush=True)


if __name__ == "__main__":
    main()
