"""Seeding modules by name (`hf_ffn.mlm.initialisation`): variants of one seed share every weight outside
the FFN; the FFN output rms at initialisation."""

import pytest
import torch

from hf_ffn.configuration_ffn_bert import FfnBertConfig
from hf_ffn.mlm.initialisation import ffn_output_rms, name_seed, seed_by_name
from hf_ffn.modeling_ffn_bert import FfnBertForMaskedLM


def build(ffn_type: str, placement: str = "post", seed: int = 0, width: int = 64) -> FfnBertForMaskedLM:
    torch.manual_seed(1234)  # the ordinary init draws differ from variant to variant; seed_by_name replaces them
    config = FfnBertConfig(
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=width,
        ffn_type=ffn_type,
        layer_norm_position=placement,
    )
    return seed_by_name(FfnBertForMaskedLM(config), seed)


def outside_ffn(model) -> dict:
    return {name: p for name, p in model.state_dict().items() if ".mlp." not in name}


def test_name_seed_is_stable_and_depends_on_seed_and_name():
    assert name_seed(0, "bert.embeddings.word_embeddings") == name_seed(0, "bert.embeddings.word_embeddings")
    assert len({name_seed(0, "a"), name_seed(1, "a"), name_seed(0, "b")}) == 3
    assert 0 <= name_seed(7, "x") < 2**63


def test_variants_of_a_seed_share_every_weight_outside_the_ffn():
    gelu, swiglu = build("gelu"), build("swiglu", width=40)
    shared = outside_ffn(gelu)
    assert shared.keys() == outside_ffn(swiglu).keys()
    assert all(torch.equal(shared[name], outside_ffn(swiglu)[name]) for name in shared)
    # ordinary construction (one RNG stream) shares no embedding between the two: the point of seeding by name
    torch.manual_seed(0)
    plain_gelu = FfnBertForMaskedLM(gelu.config)
    torch.manual_seed(0)
    plain_swiglu = FfnBertForMaskedLM(swiglu.config)
    assert not torch.equal(
        plain_gelu.cls.predictions.transform.dense.weight, plain_swiglu.cls.predictions.transform.dense.weight
    )
    # the init is BERT's: N(0, 0.02) weights, zero biases, unit LayerNorms; the decoder stays tied
    weight = gelu.bert.encoder.layer[0].attention.self.query.weight
    assert (
        abs(float(weight.detach().std()) - 0.02) < 0.003
        and float(gelu.bert.encoder.layer[0].attention.self.query.bias.abs().sum()) == 0
    )
    assert torch.equal(gelu.bert.embeddings.LayerNorm.weight, torch.ones(32))
    assert gelu.cls.predictions.decoder.weight.data_ptr() == gelu.bert.embeddings.word_embeddings.weight.data_ptr()
    # same FFN names and shapes (GELU and ReLU): the FFNs are equal too
    relu = build("relu")
    assert all(torch.equal(p, relu.state_dict()[name]) for name, p in gelu.state_dict().items())


def test_placements_share_their_common_modules_and_seeds_differ():
    post, pre = build("gelu", "post"), build("gelu", "pre")
    common = post.state_dict().keys() & pre.state_dict().keys()
    assert all(torch.equal(post.state_dict()[name], pre.state_dict()[name]) for name in common)
    other = build("gelu", seed=1)
    word = "bert.embeddings.word_embeddings.weight"
    assert not torch.equal(post.state_dict()[word], other.state_dict()[word])


def test_seed_by_name_leaves_the_global_rng_as_it_was():
    torch.manual_seed(5)
    model = FfnBertForMaskedLM(FfnBertConfig(vocab_size=20, hidden_size=8, num_attention_heads=2, intermediate_size=16))
    state = torch.get_rng_state()
    seed_by_name(model, 3)
    assert torch.equal(torch.get_rng_state(), state)


def test_ffn_output_rms_matches_a_hand_computation_and_gates_start_smaller():
    model = build("gelu")
    ids = torch.randint(5, 50, (2, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    rms = ffn_output_rms(model, ids, mask)
    # by hand for layer 0: its FFN's input is the attention sublayer's output (Post-LN)
    captured = []
    model.bert.encoder.layer[0].mlp.register_forward_pre_hook(lambda m, i: captured.append(i[0]))
    model.eval()
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask)
        out = model.bert.encoder.layer[0].mlp(captured[0])
    assert rms[0] == pytest.approx(float(out[mask.bool()].pow(2).mean().sqrt()), rel=1e-6) and len(rms) == 2
    # BERT's N(0, 0.02) init: the gated FFN's output is second order in the projections (module docstring)
    gated = ffn_output_rms(build("swiglu", width=40), ids, mask)
    assert max(gated) < min(rms) / 2
