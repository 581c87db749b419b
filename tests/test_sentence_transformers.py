"""hf_ffn backbones in sentence-transformers, proven on the real all-MiniLM-L6-v2 sentence-embedding model."""

import json
import logging

import pytest
import torch
import torch.nn.functional as F

from hf_ffn import FfnBertModel
from hf_ffn.sentence_transformers import backbone_folder, convert_sentence_transformer

st = pytest.importorskip("sentence_transformers")

# Different lengths (3 to ~30 tokens), so the batch is padded and the mean pooling sees the attention mask.
SENTENCES = [
    "Hi.",
    "A sentence embedding model maps text to a vector.",
    "The quick brown fox jumps over the lazy dog near the river bank on a sunny afternoon in late September.",
    "Pre-LN puts the LayerNorm before each sublayer.",
    "GeGLU gates the FFN with GELU.",
]


def encode(model) -> torch.Tensor:
    return model.encode(SENTENCES, convert_to_tensor=True, batch_size=len(SENTENCES))


@pytest.fixture(scope="module")
def original(bundled_checkpoint):
    return st.SentenceTransformer(bundled_checkpoint, device="cpu")


@pytest.fixture(scope="module")
def original_embeddings(original) -> torch.Tensor:
    return encode(original)


def test_default_conversion_keeps_modules_and_embeddings(bundled_checkpoint, original_embeddings, tmp_path):
    report = convert_sentence_transformer(bundled_checkpoint, tmp_path / "default")
    assert report.exact and report.new == []
    model = st.SentenceTransformer(str(tmp_path / "default"), device="cpu")
    assert type(model[0].model) is FfnBertModel
    assert [type(m).__name__ for m in model] == ["Transformer", "Pooling", "Normalize"]
    assert model.max_seq_length == 256  # the original's sentence_bert_config.json
    assert torch.equal(encode(model), original_embeddings)


def test_geglu_function_preserving_equals_original(bundled_checkpoint, original_embeddings, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="hf_ffn.conversion_warning"):
        report = convert_sentence_transformer(bundled_checkpoint, tmp_path / "geglu", ffn_type="geglu")
    assert report.exact and report.new == []
    assert [r for r in caplog.records if r.name == "hf_ffn.conversion_warning"] == []  # exact: nothing to warn about
    model = st.SentenceTransformer(str(tmp_path / "geglu"), device="cpu")
    assert model[0].model.config.ffn_types == ["geglu"] * 6
    assert model[0].model.encoder.layer[0].mlp.gate_proj.weight.shape == (1536, 384)
    assert torch.equal(encode(model), original_embeddings)


def test_swiglu_approximate_cosine_similarity(bundled_checkpoint, original_embeddings, tmp_path, caplog):
    # GELU(z) ≈ z·σ(1.702 z) (Hendrycks & Gimpel 2016), |error| ≤ 0.0203 per FFN unit: close, not equal.
    out = tmp_path / "swiglu"
    with caplog.at_level(logging.WARNING, logger="hf_ffn.conversion_warning"):
        report = convert_sentence_transformer(bundled_checkpoint, out, ffn_type="swiglu")
    assert not report.exact
    # warns once as convert_checkpoint does: the measured difference and the next step
    (message,) = [r.getMessage() for r in caplog.records if r.name == "hf_ffn.conversion_warning"]
    max_diff = report.difference["last_hidden_state"]["max_abs_diff"]
    assert f"{out} (init=preserving, ffn_type 'gelu' → 'swiglu') is not function-preserving" in message
    assert f"differs from the source's by up to {max_diff:.3g}" in message
    assert f"`hf-ffn heal --student {out} --train_files TEXT --output_dir OUTPUT`" in message
    embeddings = encode(st.SentenceTransformer(str(tmp_path / "swiglu"), device="cpu"))
    cosine = F.cosine_similarity(embeddings, original_embeddings, dim=-1)
    print(f"SwiGLU (approximate) vs original: cosine similarity per sentence {cosine.tolist()}")
    assert not torch.equal(embeddings, original_embeddings)
    assert cosine.min().item() > 0.99, cosine


def test_variant_folder_alone_and_with_original_modules(bundled_checkpoint, original, tmp_path):
    """An hf_ffn-saved variant folder (no modules.json) loads alone (Transformer + mean pooling) and as the backbone
    in front of the original Pooling and Normalize modules; both give the same normalised embeddings."""
    torch.manual_seed(0)  # gate_proj and encoder.final_norm are new: seeded
    variant = FfnBertModel.from_pretrained(bundled_checkpoint, ffn_type="swiglu", layer_norm_position="pre")
    variant.save_pretrained(tmp_path)
    original.tokenizer.save_pretrained(tmp_path)
    alone = st.SentenceTransformer(str(tmp_path), device="cpu")
    assert [type(m).__name__ for m in alone] == ["Transformer", "Pooling"]
    backbone = alone[0].model
    assert type(backbone) is FfnBertModel and backbone.config.layer_norm_positions == ["pre"] * 6
    loaded, saved = backbone.state_dict(), variant.state_dict()
    assert loaded.keys() == saved.keys() and all(torch.equal(loaded[k], saved[k]) for k in saved)

    stacked = st.SentenceTransformer(modules=[st.models.Transformer(str(tmp_path)), original[1], original[2]])
    stacked_embeddings = encode(stacked)
    assert torch.equal(F.normalize(encode(alone), p=2, dim=-1), stacked_embeddings)  # Normalize is F.normalize
    assert torch.allclose(stacked_embeddings.norm(dim=-1), torch.ones(len(SENTENCES)))


# ------------------------------------------------------------------------------------------------ bad input
def _write_st_folder(folder, model_type="bert", first_type="sentence_transformers.models.Transformer"):
    folder.mkdir(parents=True, exist_ok=True)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": first_type},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    return folder


def test_backbone_of_another_family_raises(tmp_path):
    """An MPNet backbone (all-mpnet-base-v2's): of no family hf_ffn loads (RoBERTa's converts: its tests are in
    tests/test_roberta_commands.py)."""
    folder = _write_st_folder(tmp_path / "mpnet", model_type="mpnet")
    with pytest.raises(
        ValueError,
        match=r"model_type='mpnet', of no family hf_ffn loads; allowed: bert, ffn_bert, roberta, .*ffn_roberta",
    ):
        convert_sentence_transformer(folder, tmp_path / "out", ffn_type="geglu")
    assert not (tmp_path / "out").exists()


def test_not_a_sentence_transformers_folder_raises(tmp_path, bundled_checkpoint):
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match="no modules.json"):
        backbone_folder(tmp_path / "plain")
    folder = _write_st_folder(tmp_path / "clip", first_type="sentence_transformers.models.CLIPModel")
    with pytest.raises(ValueError, match="first module has type 'sentence_transformers.models.CLIPModel'"):
        backbone_folder(folder)
    assert backbone_folder(bundled_checkpoint).samefile(bundled_checkpoint)


def test_existing_output_and_bad_conversion_options_raise(tmp_path, bundled_checkpoint):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file.txt").write_text("x")
    with pytest.raises(FileExistsError, match="not empty"):
        convert_sentence_transformer(bundled_checkpoint, tmp_path / "taken")
    with pytest.raises(ValueError, match="ffn_type"):
        convert_sentence_transformer(bundled_checkpoint, tmp_path / "bad", ffn_type="nope")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # nothing half-written
