"""ONNX export (torch.export-based exporter) of FfnBert variants, run with onnxruntime against PyTorch."""

import pytest
import torch

from hf_ffn import FfnBertModel
from hf_ffn.export import example_inputs, export_onnx, onnx_max_abs_diff

from .conftest import ONNX_FP32_ATOL, tiny_config

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

# One graph with every layer kind: BERT's own (GELU, Post-LN), GeGLU (Post-LN), SwiGLU (Pre-LN) and GELU (Pre-LN,
# so the encoder ends with final_norm). Each torch.export-based export takes 10-30 s on 2 cores, so CI exports
# this one graph; scripts/export_onnx_check.py exports the default, GeGLU, SwiGLU and Pre-LN models one by one on
# real weights.
MIXED = dict(
    num_hidden_layers=4,
    ffn_type=["gelu", "geglu", "swiglu", "gelu"],
    layer_norm_position=["post", "post", "pre", "pre"],
)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(0)
    model = FfnBertModel(tiny_config(**MIXED)).eval()
    path = export_onnx(model, tmp_path_factory.mktemp("onnx") / "model.onnx")  # traced at batch 2, seq 8
    return model, path


def test_onnx_matches_pytorch_at_other_shapes(exported):
    model, path = exported
    for batch_size, seq_len in ((3, 11), (1, 5)):  # neither is the export shape: the axes are dynamic
        diffs = onnx_max_abs_diff(model, path, example_inputs(model.config.vocab_size, batch_size, seq_len, seed=1))
        print(f"ONNX vs PyTorch at batch {batch_size}, seq {seq_len}: max |Δ| {diffs}")
        assert set(diffs) == {"last_hidden_state", "pooler_output"}
        assert max(diffs.values()) <= ONNX_FP32_ATOL, diffs


def test_onnx_negative_control(exported):
    """The graph compared with a model whose first FFN's up_proj is negated must fail the tolerance."""
    model, path = exported
    with torch.no_grad():
        model.encoder.layer[0].mlp.up_proj.weight.mul_(-1)
    try:
        diffs = onnx_max_abs_diff(model, path, example_inputs(model.config.vocab_size, 3, 11, seed=1))
    finally:
        with torch.no_grad():
            model.encoder.layer[0].mlp.up_proj.weight.mul_(-1)
    assert diffs["last_hidden_state"] > 100 * ONNX_FP32_ATOL


@pytest.mark.parametrize(
    "change, kwargs, message",
    [
        ("train", {}, "training mode"),
        ("eager", {"opset_version": 17}, "opset_version=17"),
        ("eager", {"seq_len": 1}, "seq_len=1"),
        ("eager", {"seq_len": 65}, "max_position_embeddings"),
        ("half", {}, "float32"),
        ("hidden_states", {}, "output_hidden_states"),
        ("flex", {}, "attn_implementation='flex_attention'"),
    ],
)
def test_unsupported_export_options_raise(tmp_path, change, kwargs, message):
    model = FfnBertModel(tiny_config(ffn_type="swiglu", attn_implementation="eager")).eval()
    if change == "train":
        model.train()
    elif change == "half":
        model.half()
    elif change == "hidden_states":
        model.config.output_hidden_states = True
    elif change == "flex":
        model.config._attn_implementation = "flex_attention"
    with pytest.raises(ValueError, match=message):
        export_onnx(model, tmp_path / "m.onnx", **kwargs)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_export_rejects_non_ffn_bert_model(tmp_path):
    with pytest.raises(TypeError, match=r"model must be an hf_ffn model \(FfnBert, FfnRoberta or FfnElectra"):
        export_onnx(torch.nn.Linear(2, 2), tmp_path / "m.onnx")
