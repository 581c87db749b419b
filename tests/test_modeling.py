"""FFN variants against hand-written formulas, the two LayerNorm placements, loading, saving, heads."""

import pytest
import torch
from torch import nn
from transformers import AutoModel, AutoModelForMaskedLM, BertConfig, BertForPreTraining, BertModel
from transformers.activations import ACT2FN

from hf_ffn import (
    FfnBertConfig,
    FfnBertForMaskedLM,
    FfnBertForPreTraining,
    FfnBertGatedMLP,
    FfnBertMLP,
    FfnBertModel,
)
from hf_ffn.modeling_ffn_bert import Swish, get_activation

from .conftest import TINY, tiny_batch, tiny_config

# ---------------------------------------------------------------------------------------------------------------
# FFN variants vs hand-written formulas (hand-set weights: a gate/up swap must show)
# ---------------------------------------------------------------------------------------------------------------
GATE_FORMULAS = {
    "glu": torch.sigmoid,
    "bilinear": lambda z: z,
    "reglu": torch.relu,
    "geglu": lambda z: 0.5 * z * (1 + torch.erf(z / 2**0.5)),
    "swiglu": lambda z: z * torch.sigmoid(z),
}


def _set_weights(module: nn.Module, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g))


@pytest.mark.parametrize("ffn_type", sorted(GATE_FORMULAS))
def test_gated_ffn_matches_hand_formula_and_halves_matter(ffn_type):
    config = FfnBertConfig(hidden_size=4, num_attention_heads=1, intermediate_size=3, ffn_type=ffn_type)
    ffn = FfnBertGatedMLP(config, ffn_type)
    _set_weights(ffn)
    x = torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(1))  # (batch, seq, hidden)
    gate = x @ ffn.gate_proj.weight.T + ffn.gate_proj.bias
    up = x @ ffn.up_proj.weight.T + ffn.up_proj.bias
    expected = (GATE_FORMULAS[ffn_type](gate) * up) @ ffn.down_proj.weight.T + ffn.down_proj.bias
    torch.testing.assert_close(ffn(x), expected, rtol=1e-5, atol=1e-5)  # different op order: fp32 rounding
    swapped = (GATE_FORMULAS[ffn_type](up) * gate) @ ffn.down_proj.weight.T + ffn.down_proj.bias
    if ffn_type != "bilinear":  # bilinear is symmetric in its halves
        assert not torch.allclose(ffn(x), swapped, atol=1e-3)


@pytest.mark.parametrize("act", ["gelu", "relu", "gelu_new", "tanh", "silu"])
def test_standard_ffn_matches_hand_formula(act):
    config = FfnBertConfig(hidden_size=4, num_attention_heads=1, intermediate_size=3, ffn_type=act)
    ffn = FfnBertMLP(config, act)
    _set_weights(ffn)
    x = torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(1))
    expected = ACT2FN[act](x @ ffn.up_proj.weight.T + ffn.up_proj.bias) @ ffn.down_proj.weight.T + ffn.down_proj.bias
    torch.testing.assert_close(ffn(x), expected, rtol=1e-5, atol=1e-5)


def test_parametrised_activations_use_config_values():
    config = FfnBertConfig(leaky_relu_negative_slope=0.1, elu_alpha=2.0, swish_beta=3.0)
    x = torch.tensor([-2.0, -0.5, 0.0, 1.5])
    torch.testing.assert_close(get_activation("leaky_relu", config)(x), torch.where(x > 0, x, 0.1 * x))
    torch.testing.assert_close(get_activation("elu", config)(x), torch.where(x > 0, x, 2.0 * (torch.exp(x) - 1)))
    torch.testing.assert_close(get_activation("swish", config)(x), x * torch.sigmoid(3.0 * x))
    assert torch.equal(Swish(1.0)(x), ACT2FN["silu"](x))  # β = 1 is SiLU, bit for bit


def test_activation_modules_are_never_shared():
    model = FfnBertModel(tiny_config(ffn_type="swiglu"))
    acts = [layer.mlp.act_fn for layer in model.encoder.layer]
    assert acts[0] is not acts[1]


def test_ffn_bias_off():
    model = FfnBertModel(tiny_config(ffn_type="swiglu", ffn_bias=False))
    mlp = model.encoder.layer[0].mlp
    assert mlp.gate_proj.bias is None and mlp.up_proj.bias is None and mlp.down_proj.bias is None


# ---------------------------------------------------------------------------------------------------------------
# LayerNorm placement
# ---------------------------------------------------------------------------------------------------------------
def _reference_pre_ln_block(layer, x, mask):
    """Ten lines of Pre-LN (Xiong et al. 2020, fig. 1b), eval mode, written from the paper, not from our layer."""
    a = layer.attention
    h = a.output.LayerNorm(x)
    heads, d = a.self.num_attention_heads, a.self.attention_head_size
    split = lambda t: t.view(*t.shape[:2], heads, d).transpose(1, 2)  # (batch, heads, seq, d)  # noqa: E731
    q, k, v = split(a.self.query(h)), split(a.self.key(h)), split(a.self.value(h))
    scores = q @ k.transpose(-1, -2) / d**0.5 + (1.0 - mask[:, None, None, :]) * torch.finfo(x.dtype).min
    ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(x.shape)
    x = x + a.output.dense(ctx)
    return x + layer.mlp(layer.mlp_norm(x))


def test_pre_ln_layer_matches_reference_block():
    model = FfnBertModel(tiny_config(layer_norm_position="pre", ffn_type="geglu")).eval()
    x = torch.randn(3, 7, TINY["hidden_size"], generator=torch.Generator().manual_seed(0))
    mask = tiny_batch()["attention_mask"].float()
    layer = model.encoder.layer[0]
    extended = (1.0 - mask[:, None, None, :]) * torch.finfo(torch.float32).min  # (batch, 1, 1, seq) additive
    with torch.no_grad():
        ours = layer(x, extended)
        expected = _reference_pre_ln_block(layer, x, mask)
    valid = mask.bool()  # padded query rows are irrelevant
    torch.testing.assert_close(ours[valid], expected[valid], rtol=1e-5, atol=1e-5)  # fp32, different op order


def _layer_norms(model):
    return [name for name, m in model.named_modules() if isinstance(m, nn.LayerNorm)]


def test_post_ln_has_no_final_norm_pre_ln_exactly_one():
    post = FfnBertModel(tiny_config())
    pre = FfnBertModel(tiny_config(layer_norm_position="pre"))
    assert post.encoder.final_norm is None
    assert [n for n in _layer_norms(pre) if not n.startswith("encoder.layer")] == [
        "embeddings.LayerNorm",
        "encoder.final_norm",
    ]
    assert len(_layer_norms(pre)) == len(_layer_norms(post)) + 1
    no_emb = FfnBertModel(tiny_config(layer_norm_position="pre", embedding_layer_norm=False))
    assert isinstance(no_emb.embeddings.LayerNorm, nn.Identity)
    assert "embeddings.LayerNorm" not in _layer_norms(no_emb)


def test_pre_ln_hidden_states_last_is_final_normed_output():
    model = FfnBertModel(tiny_config(layer_norm_position="pre")).eval()
    with torch.no_grad():
        out = model(**tiny_batch(), output_hidden_states=True)
    assert len(out.hidden_states) == TINY["num_hidden_layers"] + 1
    assert torch.equal(out.hidden_states[-1], out.last_hidden_state)


# ---------------------------------------------------------------------------------------------------------------
# Modes and tied weights (BERT parity, tiny odd sizes included, is the matrix in test_parity.py)
# ---------------------------------------------------------------------------------------------------------------
def test_dropout_only_in_train_mode(tiny_bert_checkpoint):
    model = FfnBertModel.from_pretrained(tiny_bert_checkpoint)
    batch = tiny_batch()
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(**batch).last_hidden_state, model(**batch).last_hidden_state)
    model.train()
    torch.manual_seed(0)
    first = model(**batch).last_hidden_state
    second = model(**batch).last_hidden_state
    assert not torch.equal(first, second)


def test_mlm_decoder_tied_to_word_embeddings(tmp_path):
    model = FfnBertForMaskedLM(tiny_config())
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    model.save_pretrained(tmp_path)
    loaded = AutoModelForMaskedLM.from_pretrained(tmp_path)
    assert type(loaded) is FfnBertForMaskedLM
    assert loaded.cls.predictions.decoder.weight.data_ptr() == loaded.bert.embeddings.word_embeddings.weight.data_ptr()


# ---------------------------------------------------------------------------------------------------------------
# Loading and saving
# ---------------------------------------------------------------------------------------------------------------
def _no_missing_no_unexpected(info) -> bool:
    # The fixture is a BertForPreTraining checkpoint: a base model leaves its `cls.*` head out, as BertModel does.
    unexpected = {k for k in info["unexpected_keys"] if not k.startswith("cls.")}
    return not info["missing_keys"] and not unexpected and not info["mismatched_keys"]


def test_default_checkpoint_round_trips_with_upstream_bert(tiny_bert_checkpoint, tmp_path):
    ours, info = FfnBertModel.from_pretrained(tiny_bert_checkpoint, output_loading_info=True)
    _, upstream_info = BertModel.from_pretrained(tiny_bert_checkpoint, output_loading_info=True)
    assert info == upstream_info
    assert _no_missing_no_unexpected(info)
    ours.save_pretrained(tmp_path)
    assert type(AutoModel.from_pretrained(tmp_path)) is FfnBertModel
    bert, info = BertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert _no_missing_no_unexpected(info) and not info["unexpected_keys"]
    with torch.no_grad():
        assert torch.equal(bert.eval()(**tiny_batch()).last_hidden_state, ours.eval()(**tiny_batch()).last_hidden_state)


def test_variant_reports_exactly_the_new_weights_and_initialises_them(tiny_bert_checkpoint):
    torch.manual_seed(0)
    model, info = FfnBertModel.from_pretrained(
        tiny_bert_checkpoint, ffn_type="swiglu", layer_norm_position="pre", output_loading_info=True
    )
    layers = range(TINY["num_hidden_layers"])
    expected = {f"encoder.layer.{i}.mlp.gate_proj.{p}" for i in layers for p in ("weight", "bias")}
    expected |= {"encoder.final_norm.weight", "encoder.final_norm.bias"}
    assert info["missing_keys"] == expected
    assert _no_missing_no_unexpected({**info, "missing_keys": set()})
    gate = model.encoder.layer[0].mlp.gate_proj.weight
    assert abs(gate.std().item() - 0.02) < 0.005  # normal(0, initializer_range), as BERT initialises linears
    assert torch.all(model.encoder.layer[0].mlp.gate_proj.bias == 0)
    bert = BertModel.from_pretrained(tiny_bert_checkpoint)  # the copied weights are BERT's
    assert torch.equal(model.encoder.layer[1].mlp.up_proj.weight, bert.encoder.layer[1].intermediate.dense.weight)
    assert torch.equal(model.encoder.layer[1].mlp_norm.bias, bert.encoder.layer[1].output.LayerNorm.bias)


@pytest.mark.parametrize("ffn_type, act", [("relu", torch.relu), ("gelu_new", ACT2FN["gelu_new"])])
def test_other_standard_ffn_on_a_bert_checkpoint_keeps_hidden_act(tmp_path, ffn_type, act):
    # An explicit ffn_type sets the FFN alone: BERT's weights load unchanged, the MLM head keeps hidden_act.
    # Weights of std 1 (not 0.02) put the FFN pre-activations in the range where gelu_new and relu visibly differ
    # from gelu (max |Δ logits| 0.81 for relu, 9e-3 for gelu_new); at std 0.02 they are near 0, where gelu_new -
    # gelu is below 1e-7 on the logits.
    torch.manual_seed(0)
    BertForPreTraining(BertConfig(**TINY, initializer_range=1.0)).save_pretrained(tmp_path / "bert")
    model, info = FfnBertForPreTraining.from_pretrained(tmp_path / "bert", ffn_type=ffn_type, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert (model.config.ffn_type, model.config.hidden_act) == (ffn_type, "gelu")
    bert = BertForPreTraining.from_pretrained(tmp_path / "bert").eval()
    model.eval()
    head_act = model.cls.predictions.transform.transform_act_fn
    assert type(head_act) is type(bert.cls.predictions.transform.transform_act_fn) is type(ACT2FN["gelu"])
    for ours, theirs in zip(model.state_dict().values(), bert.state_dict().values(), strict=True):
        assert torch.equal(ours, theirs)  # the same weights, in the same order: only the FFN activation differs
    mlp = model.bert.encoder.layer[0].mlp
    x = torch.randn(3, 7, TINY["hidden_size"], generator=torch.Generator().manual_seed(1))  # (batch, seq, hidden)
    with torch.no_grad():
        assert torch.equal(mlp(x), mlp.down_proj(act(mlp.up_proj(x))))
        ours, theirs = model(**tiny_batch()), bert(**tiny_batch())
    mask = tiny_batch()["attention_mask"].bool()
    assert (ours.prediction_logits[mask] - theirs.prediction_logits[mask]).abs().max() > 1e-3
    model.save_pretrained(tmp_path / "ours")  # the round trip keeps both fields
    loaded = FfnBertForPreTraining.from_pretrained(tmp_path / "ours")
    assert (loaded.config.ffn_type, loaded.config.hidden_act) == (ffn_type, "gelu")


def test_gated_checkpoint_round_trip(tmp_path):
    model = FfnBertForMaskedLM(tiny_config(ffn_type=["geglu", "relu"], hidden_act="relu", layer_norm_position="pre"))
    model.save_pretrained(tmp_path)
    loaded, info = FfnBertForMaskedLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_learnable_activation_initialised_when_loading_a_checkpoint(tiny_bert_checkpoint):
    # Regression: PReLU's weight was left uninitialised (garbage) when loading a BERT checkpoint.
    model = FfnBertModel.from_pretrained(tiny_bert_checkpoint, ffn_type="prelu")
    for layer in model.encoder.layer:
        assert torch.equal(layer.mlp.act_fn.weight, torch.full((1,), 0.25))
