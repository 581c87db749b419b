"""Sentence embeddings in sentence-transformers' own order: hf_ffn's sentence-transformers model against
sentence-transformers with upstream BERT and against ONNX Runtime on the project's own export.

`SentenceTransformer.encode` sorts its input by length (longest first, by characters) and cuts batches from that
order, so its batches hold little padding: the case where unpadding gains least. Three candidates embed the same
sentences, interleaved (`time_interleaved`, CPU or wall clock as the run says), each call the whole list:

- *sentence-transformers, upstream BERT*: `SentenceTransformer(all-MiniLM-L6-v2).encode(sentences)`;
- *sentence-transformers, hf_ffn*: the same folder converted by `hf_ffn.sentence_transformers.
  convert_sentence_transformer` (plain FfnBert, same weights, same Pooling/Normalize), `unpad_tokens=True`;
- *ONNX Runtime, hf_ffn export*: the backbone exported by `hf_ffn.export.export_onnx` (padded, dynamic shapes) and
  run by onnxruntime's CPU provider with as many threads as torch, on the batches `encode` makes (same order,
  same tokenizer call), then mean pooling and L2 normalisation in numpy, as the model's modules do.

Each time includes tokenization, as `encode`'s does. Embeddings are compared with upstream's (max |Δ|).
Targets (issue 21): hf_ffn / upstream ≤ 1.0 and hf_ffn / ONNX Runtime < 1.0.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import torch

from hf_ffn.export import export_onnx
from hf_ffn.modeling_ffn_bert import FfnBertModel
from hf_ffn.parity import bundled_checkpoint, quiet_transformers
from hf_ffn.sentence_transformers import convert_sentence_transformer

from .timing import paired_ratio, time_interleaved

CANDIDATES = ("sentence-transformers, upstream BERT", "sentence-transformers, hf_ffn", "ONNX Runtime, hf_ffn export")
# (numerator, denominator, upper bound, strict)
TARGETS = [(CANDIDATES[1], CANDIDATES[0], 1.0, False), (CANDIDATES[1], CANDIDATES[2], 1.0, True)]


def onnx_encoder(model, tokenizer, path: Path, batch_size: int, max_length: int):
    """A function sentences → (n, hidden) L2-normalised mean-pooled embeddings with onnxruntime, batched in
    `encode`'s order (longest first) and returned in input order."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def encode(sentences: list[str]) -> np.ndarray:
        order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
        out = np.empty((len(sentences), model.config.hidden_size), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            batch = tokenizer(
                [sentences[i] for i in rows], padding=True, truncation=True, max_length=max_length, return_tensors="np"
            )
            feeds = {name: batch[name].astype(np.int64) for name in ("input_ids", "attention_mask", "token_type_ids")}
            hidden = session.run(["last_hidden_state"], feeds)[0]  # (batch, seq, hidden)
            mask = feeds["attention_mask"][..., None].astype(np.float32)
            pooled = (hidden * mask).sum(1) / np.clip(mask.sum(1), 1e-9, None)
            out[rows] = pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return out

    return encode


def run_sentence_order(
    sentences: list[str], work_dir: str, repeats: int, warmup: int, clock: str, batch_size: int = 32
) -> dict:
    """Times, ratios, targets and differences of the three candidates on `sentences` (see the module docstring).
    `work_dir` receives the converted folder and the ONNX file."""
    from sentence_transformers import SentenceTransformer

    source = str(Path(bundled_checkpoint()))
    converted, onnx_path = Path(work_dir) / "st_hf_ffn", Path(work_dir) / "backbone.onnx"
    with quiet_transformers():
        upstream = SentenceTransformer(source, device="cpu")
        if not converted.is_dir():
            convert_sentence_transformer(source, converted)
        ours = SentenceTransformer(str(converted), device="cpu")
        ours[0].auto_model.config.unpad_tokens = True
        backbone = FfnBertModel.from_pretrained(source).eval()
        if not onnx_path.is_file():
            export_onnx(backbone, onnx_path)
    assert type(ours[0].auto_model) is FfnBertModel and type(upstream[0].auto_model).__name__ == "BertModel"
    max_length = upstream.max_seq_length
    onnx = onnx_encoder(backbone, upstream.tokenizer, onnx_path, batch_size, max_length)

    def st_encode(model):
        return lambda: model.encode(sentences, batch_size=batch_size, convert_to_numpy=True)

    fns = dict(zip(CANDIDATES, (st_encode(upstream), st_encode(ours), lambda: onnx(sentences)), strict=True))
    reference = fns[CANDIDATES[0]]()
    differences = {name: float(np.abs(fns[name]() - reference).max()) for name in CANDIDATES[1:]}
    times = time_interleaved(fns, repeats, warmup, clock)
    targets = []
    for numerator, denominator, limit, strict in TARGETS:
        ratio = paired_ratio(times[numerator], times[denominator])
        met = ratio["ratio"] < limit if strict else ratio["ratio"] <= limit
        targets.append(
            {
                "ratio_of": f"{numerator} / {denominator}",
                **ratio,
                "limit": f"{'<' if strict else '≤'} {limit}",
                "met": met,
            }
        )
    return {
        "sentences": len(sentences),
        "batch_size": batch_size,
        "max_seq_length": max_length,
        "candidates": {
            name: {
                "median_ms": statistics.median(t) * 1e3,
                "times_ms": [x * 1e3 for x in t],
                "max_abs_diff_vs_upstream": differences.get(name, 0.0),
            }
            for name, t in times.items()
        },
        "targets": targets,
    }


__all__ = ["CANDIDATES", "TARGETS", "onnx_encoder", "run_sentence_order"]
