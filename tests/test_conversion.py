"""Converting a pretrained BERT into FfnBert variants: exact where the math allows, bounded where it does not."""

import json

import pytest
import torch
from transformers import BertConfig, BertForPreTraining, BertModel, GPT2Config

from hf_ffn import FfnBertForPreTraining
from hf_ffn.conversion import bert_key, ffn_recipe, load_converted, measure_difference
from hf_ffn.modeling_ffn_bert import HEAD_CLASSES
from hf_ffn.parity import compare_outputs, example_batch, head_inputs

from .conftest import TINY, tiny_batch

# sup_z |GELU(z) − z·σ(1.702 z)| (Hendrycks & Gimpel 2016's sigmoid approximation), ≈ 0.02030 at |z| ≈ 2.27.
SIGMOID_GELU_MAX_ERROR = 0.0204


def _sigmoid_gelu_max_error() -> float:
    z = torch.linspace(-12, 12, 2_400_001, dtype=torch.float64)
    return (torch.nn.functional.gelu(z) - z * torch.sigmoid(1.702 * z)).abs().max().item()


def test_sigmoid_gelu_error_constant():
    assert 0.0202 < _sigmoid_gelu_max_error() < SIGMOID_GELU_MAX_ERROR


# ---------------------------------------------------------------------------------------------------------------
# Exact conversions
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("head", HEAD_CLASSES, ids=[head.ffn_bert.__name__ for head in HEAD_CLASSES])
def test_gelu_to_geglu_is_exact_on_real_checkpoint_every_head(bundled_checkpoint, bundled_head_folders, head):
    """Every head, from the folders the parity job prepares (upstream creates the heads the checkpoint lacks once,
    seeded, and saves them): the converted GeGLU model equals upstream on every output, attention maps included.
    Both sides load from disk: freshly initialised in-memory head weights can take another BLAS path (seen: 3e-9
    on the multiple-choice logits) than the same values loaded from a file."""
    folder = bundled_head_folders[head.bert]
    batch = example_batch(bundled_checkpoint, BertConfig.from_pretrained(bundled_checkpoint))
    reference = head.bert.from_pretrained(folder, attn_implementation="eager").eval()
    model, report = load_converted(folder, head.ffn_bert, ffn_type="geglu", attn_implementation="eager")
    assert report.exact and report.new == [] and report.dropped == []
    assert model.config.ffn_type == "geglu" and model.config.intermediate_size == 1536
    inputs = head_inputs(head.bert, batch)
    with torch.no_grad():
        ref_out = reference(**inputs, output_hidden_states=True, output_attentions=True)
        out = model(**inputs, output_hidden_states=True, output_attentions=True)
    rows = compare_outputs(head.ffn_bert.__name__, ref_out, out)
    assert rows and all(row.equal for row in rows), [r for r in rows if not r.equal]
    # 6 layers × (gate weight, gate bias, up weight, up bias) set by the recipe.
    assert len(report.mapped) == 24
    prefix = "" if head.bert is BertModel else "bert."
    first = {m["target"]: m for m in report.mapped if ".layer.0." in m["target"]}
    assert (
        first[f"{prefix}encoder.layer.0.mlp.gate_proj.weight"]["source"]
        == f"{prefix}encoder.layer.0.intermediate.dense.weight"
    )
    assert first[f"{prefix}encoder.layer.0.mlp.up_proj.bias"]["operation"] == "constant 1"
    json.loads(report.to_json())  # JSON-serialisable


@pytest.fixture(scope="module")
def tiny_relu_checkpoint(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("tiny_relu_bert")
    torch.manual_seed(0)
    BertForPreTraining(BertConfig(**TINY, hidden_act="relu")).save_pretrained(folder)
    return str(folder)


def test_relu_to_reglu_is_exact(tiny_relu_checkpoint):
    reference = BertForPreTraining.from_pretrained(tiny_relu_checkpoint).eval()
    model, report = load_converted(tiny_relu_checkpoint, FfnBertForPreTraining, ffn_type="reglu")
    assert report.exact and report.new == [] and [layer["recipe"] for layer in report.layers] == ["exact", "exact"]
    assert model.config.hidden_act == "relu"  # the MLM head transform keeps its activation
    batch = tiny_batch()
    with torch.no_grad():
        rows = compare_outputs(
            "pt", reference(**batch, output_hidden_states=True), model(**batch, output_hidden_states=True)
        )
    assert all(r.equal for r in rows)
    # Negative control: the same weights with gate and up swapped (relu(1)·z = z) is a different function.
    mlp = model.bert.encoder.layer[0].mlp
    with torch.no_grad():
        for name in ("weight", "bias"):
            gate, up = getattr(mlp.gate_proj, name).clone(), getattr(mlp.up_proj, name).clone()
            getattr(mlp.gate_proj, name).copy_(up)
            getattr(mlp.up_proj, name).copy_(gate)
        swapped = model(**batch).prediction_logits
    assert not torch.allclose(swapped, reference(**batch).prediction_logits, atol=1e-3)


# ---------------------------------------------------------------------------------------------------------------
# Approximate conversions: GELU → SwiGLU / GLU via GELU(z) ≈ z·σ(1.702 z)
# ---------------------------------------------------------------------------------------------------------------
def test_gelu_to_sigmoid_gated_is_within_the_approximation_bound(bundled_checkpoint):
    """Per layer, on the same input, |Δ FFN(x)_i| ≤ ε·Σ_j |down_proj[i, j]| with ε = sup|GELU − z·σ(1.702 z)|
    (plus 1e-4 for fp32 rounding of the scaled weights and the two accumulation orders). End to end the layers
    compound; the measured drift is reported and must stay far below the activations' own scale."""
    source = BertModel.from_pretrained(bundled_checkpoint).eval()
    batch = example_batch(bundled_checkpoint, source.config)
    mask = batch["attention_mask"].bool()
    with torch.no_grad():
        source_out = source(**batch, output_hidden_states=True)
    h_source = source_out.last_hidden_state
    for target in ("swiglu", "glu"):
        model, report = load_converted(bundled_checkpoint, ffn_type=target)
        assert not report.exact and {entry["recipe"] for entry in report.layers} == {"approximate"}
        with torch.no_grad():
            for i, (src_layer, layer) in enumerate(zip(source.encoder.layer, model.encoder.layer, strict=False)):
                # The FFN input of layer i is the attention block's output on hidden_states[i].
                x = src_layer.attention(source_out.hidden_states[i])[0]  # (batch, seq, hidden)
                expected = src_layer.output.dense(src_layer.intermediate(x))
                delta = (layer.mlp(x) - expected).abs()
                bound = SIGMOID_GELU_MAX_ERROR * src_layer.output.dense.weight.abs().sum(dim=1) + 1e-4  # (hidden,)
                assert (delta <= bound).all(), f"{target} layer {i}: {(delta - bound).max().item()}"
                assert delta.max() > 1e-4  # an approximation, not silently exact
            h = model(**batch).last_hidden_state
        diff = measure_difference(bundled_checkpoint, model, report, inputs=batch)["last_hidden_state"]
        # Measured on all-MiniLM-L6-v2: max 0.25, mean 0.0276 for both targets, against mean |h| = 0.34: the drift
        # must stay under 10 % of the activations' scale, and the model's use (mean-pooled sentence embeddings)
        # must keep its direction (cosine ≥ 0.99; measured ≥ 0.9957; a fresh FFN gives ≈ 0.49).
        assert 0 < diff["mean_abs_diff"] < 0.1 * h_source[mask].abs().mean().item()
        m = mask.unsqueeze(-1).float()
        cosine = torch.cosine_similarity((h_source * m).sum(1) / m.sum(1), (h * m).sum(1) / m.sum(1), dim=-1)
        assert (cosine >= 0.99).all(), cosine


def test_recipe_scaling_for_swiglu():
    recipe = ffn_recipe("gelu", "swiglu", swish_beta=1.0)
    assert (recipe.gate_scale, recipe.up, recipe.up_bias) == (1.702, "constant", 1 / 1.702)
    recipe = ffn_recipe("gelu", "swiglu", swish_beta=1.702)  # Swish_1.702 is exactly z·σ(1.702 z): no scaling
    assert (recipe.gate_scale, recipe.up_bias) == (1.0, 1.0)
    assert ffn_recipe("silu", "swiglu").kind == "exact"
    assert ffn_recipe("gelu", "glu").up == "copy"


# ---------------------------------------------------------------------------------------------------------------
# Fresh initialisation and Post-LN → Pre-LN
# ---------------------------------------------------------------------------------------------------------------
def test_fresh_matched_width_lists_exactly_the_new_keys(bundled_checkpoint):
    source = BertModel.from_pretrained(bundled_checkpoint)
    torch.manual_seed(0)
    model, report = load_converted(bundled_checkpoint, ffn_type="geglu", init="fresh", width="matched")
    assert model.config.intermediate_size == 1024  # parameter_matched_glu_width(1536)
    expected_new = sorted(
        f"encoder.layer.{i}.mlp.{proj}.{p}"
        for i in range(6)
        for proj in ("gate_proj", "up_proj", "down_proj")
        for p in ("weight", "bias")
    )
    assert report.new == expected_new and report.mapped == []
    assert report.dropped == sorted(
        f"encoder.layer.{i}.{m}.{p}"
        for i in range(6)
        for m in ("intermediate.dense", "output.dense")
        for p in ("weight", "bias")
    )
    source_state, state = source.state_dict(), model.state_dict()
    for key in report.copied:
        assert torch.equal(state[key], source_state[bert_key(key)]), key
    assert set(report.copied) | set(report.new) == set(state)
    for key in report.new:  # BERT's init: normal(0, 0.02) weights (≥ 384·1024 samples), zero biases
        if key.endswith("bias"):
            assert not state[key].any(), key
        else:
            assert abs(state[key].std().item() - 0.02) < 0.001 and abs(state[key].mean().item()) < 0.001, key


def test_fresh_same_width_reinitialises_the_loaded_ffn(tiny_bert_checkpoint):
    source = BertForPreTraining.from_pretrained(tiny_bert_checkpoint)
    model, report = load_converted(
        tiny_bert_checkpoint, FfnBertForPreTraining, ffn_type=["gelu", "swiglu"], init="fresh"
    )
    assert [layer["recipe"] for layer in report.layers] == ["unchanged", "fresh"]
    assert report.new == sorted(
        f"bert.encoder.layer.1.mlp.{p}.{w}" for p in ("gate_proj", "up_proj", "down_proj") for w in ("weight", "bias")
    )
    layer1 = model.bert.encoder.layer[1].mlp
    assert not torch.equal(layer1.up_proj.weight, source.bert.encoder.layer[1].intermediate.dense.weight)
    assert torch.equal(
        model.bert.encoder.layer[0].mlp.up_proj.weight, source.bert.encoder.layer[0].intermediate.dense.weight
    )


def test_post_to_pre_keeps_weights_and_reports_drift(tiny_bert_checkpoint):
    model, report = load_converted(tiny_bert_checkpoint, layer_norm_position="pre")
    assert not report.exact and report.new == ["encoder.final_norm.bias", "encoder.final_norm.weight"]
    assert report.config_changes == {"layer_norm_position": ["post", "pre"]}
    diff = measure_difference(tiny_bert_checkpoint, model, report)
    # Tiny random weights (std 0.02) make sublayer outputs small, so the drift is small but must be there.
    assert diff["last_hidden_state"]["max_abs_diff"] > 1e-6 and not diff["last_hidden_state"]["equal"]


def test_standard_ffn_type_sets_the_ffn_alone(tiny_bert_checkpoint):
    """An explicit standard ffn_type changes the FFN only: hidden_act (the MLM head transform's) stays GELU."""
    model, report = load_converted(tiny_bert_checkpoint, FfnBertForPreTraining, ffn_type="relu")
    assert model.config.hidden_act == "gelu" and model.config.ffn_types == ["relu", "relu"]
    assert [layer["recipe"] for layer in report.layers] == ["kept", "kept"] and not report.exact
    assert report.config_changes == {"ffn_type": ["gelu", "relu"]}
    assert report.new == [] and report.dropped == [] and report.mapped == []
    assert isinstance(model.bert.encoder.layer[0].mlp.act_fn, torch.nn.ReLU)
    assert not isinstance(model.cls.predictions.transform.transform_act_fn, torch.nn.ReLU)
    diff = measure_difference(tiny_bert_checkpoint, model, report)
    assert diff["reference"] == "transformers.BertForPreTraining" and not diff["prediction_logits"]["equal"]


def test_measure_difference_from_an_ffn_bert_variant_source_keeps_its_weights(tiny_bert_checkpoint, tmp_path):
    """A variant source (e.g. a healed teacher) is the reference as itself: an upstream class would drop its
    gate_proj weights and re-initialise them, so the same model would differ from its own folder."""
    variant, _ = load_converted(tiny_bert_checkpoint, FfnBertForPreTraining, ffn_type="swiglu", init="fresh")
    variant.save_pretrained(tmp_path / "variant")
    model = FfnBertForPreTraining.from_pretrained(tmp_path / "variant")
    diff = measure_difference(str(tmp_path / "variant"), model)
    assert diff["reference"] == "hf_ffn.FfnBertModel"  # no report: the base models are compared
    assert diff["last_hidden_state"]["equal"] and diff["last_hidden_state"]["max_abs_diff"] == 0.0


# ---------------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------------
def test_bad_input_names_what_is_wrong(tiny_bert_checkpoint, tiny_relu_checkpoint, tmp_path):
    # a RoBERTa-family checkpoint converts (tests/test_roberta_family.py); another family does not
    GPT2Config(n_layer=1, n_embd=32, n_head=2).save_pretrained(tmp_path / "gpt2")
    cases = [
        (dict(checkpoint=str(tmp_path / "gpt2")), "model_type='gpt2'; hf_ffn loads checkpoints of the families"),
        (dict(checkpoint=tiny_relu_checkpoint, ffn_type="swiglu"), "allowed for 'relu': any standard activation"),
        (
            dict(checkpoint=tiny_bert_checkpoint, ffn_type="bilinear"),
            "cannot convert a 'gelu' FFN to ffn_type='bilinear'",
        ),
        (
            dict(checkpoint=tiny_bert_checkpoint, ffn_type="geglu", width="matched"),
            "width='matched' gives intermediate_size=256",
        ),
        (
            dict(checkpoint=tiny_bert_checkpoint, ffn_type="geglu", width=40),
            "copies the source FFN weights of width 37",
        ),
        (dict(checkpoint=tiny_bert_checkpoint, init="random"), "init has unknown value 'random'"),
        (dict(checkpoint=tiny_bert_checkpoint, width="half"), "width has unknown value 'half'"),
        (dict(checkpoint=tiny_bert_checkpoint, ffn_type="gegelu"), "ffn_type has unknown value 'gegelu'"),
        (dict(checkpoint=tiny_bert_checkpoint, layer_norm_position="middle"), "layer_norm_position has unknown value"),
        (dict(checkpoint=tiny_bert_checkpoint, init="fresh"), "none does"),
        (dict(checkpoint=tiny_bert_checkpoint, width="matched"), "no layer is gated"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            load_converted(**kwargs)
