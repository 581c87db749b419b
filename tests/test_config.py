"""FfnBertConfig: BERT fields unchanged, the new fields, validation, serialisation, Auto registration."""

import dataclasses

import pytest
import torch
from transformers import AutoConfig, AutoModel, BertConfig, BertModel
from transformers.models.auto.modeling_auto import MODEL_MAPPING

from hf_ffn import FfnBertConfig, FfnBertGatedMLP, FfnBertMLP, FfnBertModel, parameter_matched_glu_width

from .conftest import TINY

BERT_FIELDS = [f.name for f in dataclasses.fields(BertConfig) if f.name != "transformers_version"]


def test_every_bert_field_keeps_name_and_default():
    ours, bert = FfnBertConfig(), BertConfig()
    for field in BERT_FIELDS:
        assert getattr(ours, field) == getattr(bert, field), field
    assert (ours.ffn_type, ours.layer_norm_position, ours.hidden_act) == ("gelu", "post", "gelu")
    assert ours.is_default_bert


def test_bert_config_converts_without_loss():
    bert = BertConfig(hidden_size=48, num_attention_heads=6, intermediate_size=100, hidden_act="gelu_new",
                      layer_norm_eps=1e-7, type_vocab_size=3, classifier_dropout=0.3, num_labels=5)
    ours, _ = FfnBertConfig.from_bert_dict(bert.to_dict())
    for field in BERT_FIELDS:
        assert getattr(ours, field) == getattr(bert, field), field
    assert ours.num_labels == 5
    assert ours.ffn_type == "gelu_new"  # BERT's hidden_act carries over as the FFN's activation
    assert ours.is_default_bert


@pytest.mark.parametrize("ffn_type", ["swiglu", "geglu", "gelu", "reglu", "glu", "bilinear"])
def test_ffn_type_as_written(ffn_type):
    config = FfnBertConfig(ffn_type=ffn_type)
    assert config.ffn_type == ffn_type
    assert config.hidden_act == "gelu"  # gated: hidden_act keeps its MLM-head role, BERT's default


def test_elu_ffn_keeps_gelu_mlm_head():
    # ELU is not in ACT2FN, so BERT's MLM head cannot use it: hidden_act keeps its head role.
    config = FfnBertConfig(**TINY, ffn_type="elu", elu_alpha=0.5)
    assert config.hidden_act == "gelu"
    from hf_ffn import FfnBertForMaskedLM

    model = FfnBertForMaskedLM(config)
    assert isinstance(model.bert.encoder.layer[0].mlp.act_fn, torch.nn.ELU)
    assert model.bert.encoder.layer[0].mlp.act_fn.alpha == 0.5
    with pytest.raises(ValueError, match=r"hidden_act has unknown value 'elu'; allowed: .*gelu"):
        FfnBertConfig(**TINY, hidden_act="elu")


def test_standard_ffn_type_sets_hidden_act_and_conflicts_raise():
    assert FfnBertConfig(ffn_type="relu").hidden_act == "relu"
    assert FfnBertConfig(ffn_type="relu", hidden_act="relu").ffn_type == "relu"
    with pytest.raises(ValueError, match=r"ffn_type='relu' disagrees with hidden_act='gelu'"):
        FfnBertConfig(ffn_type="relu", hidden_act="gelu")


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"ffn_type": "swigluu"}, r"ffn_type has unknown value 'swigluu'; allowed: .*swiglu"),
        ({"layer_norm_position": "middle"}, r"layer_norm_position has unknown value 'middle'; allowed: post, pre"),
        ({"ffn_type": ["gelu", "swiglu", "gelu"]}, r"ffn_type has 3 entries but num_hidden_layers is 2"),
        ({"layer_norm_position": ["pre"]}, r"layer_norm_position has 1 entries but num_hidden_layers is 2"),
        ({"intermediate_size": 0}, r"intermediate_size must be a positive integer, got 0"),
        ({"hidden_size": -32}, r"hidden_size must be a positive integer, got -32"),
        ({"num_attention_heads": 5}, r"hidden_size \(32\) must be divisible by num_attention_heads \(5\)"),
        ({"ffn_type": "leaky_relu", "leaky_relu_negative_slope": 1.5},
         r"leaky_relu_negative_slope must be a number in \[0, 1\), got 1.5"),
        ({"elu_alpha": 0.0}, r"elu_alpha must be a number in \(0, inf\), got 0.0"),
        ({"swish_beta": -1.0}, r"swish_beta must be a number in \(0, inf\), got -1.0"),
        ({"swish_beta": float("inf")}, r"swish_beta must be a number in \(0, inf\), got inf"),
        ({"elu_alpha": "1"}, r"elu_alpha must be a number in \(0, inf\), got '1'"),
        ({"ffn_type": 3}, r"ffn_type must be a string or a list of 2 strings, got 3"),
        ({"layer_norm_position": None}, r"layer_norm_position must be a string or a list of 2 strings, got None"),
        ({"ffn_bias": "no"}, r"ffn_bias must be True or False, got 'no'"),
        ({"embedding_layer_norm": None}, r"embedding_layer_norm must be True or False, got None"),
        ({"ffn_type": "xielu", "hidden_act": "xielu"}, r"hidden_act has unknown value 'xielu'"),
        ({"hidden_act": "gelu_typo"}, r"hidden_act has unknown value 'gelu_typo'"),
        ({"is_decoder": True}, r"FfnBert is an encoder"),
    ],
)
def test_bad_values_raise_value_error_naming_field_and_value(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        FfnBertConfig(**{**TINY, **kwargs})


def test_per_layer_lists():
    config = FfnBertConfig(**TINY, ffn_type=["gelu", "swiglu"], layer_norm_position=["post", "pre"])
    assert config.ffn_types == ["gelu", "swiglu"]
    assert config.layer_norm_positions == ["post", "pre"]
    model = FfnBertModel(config)
    assert isinstance(model.encoder.layer[0].mlp, FfnBertMLP)
    assert isinstance(model.encoder.layer[1].mlp, FfnBertGatedMLP)
    assert [layer.layer_norm_position for layer in model.encoder.layer] == ["post", "pre"]
    assert model.encoder.final_norm is not None  # the last layer is Pre-LN


def test_save_and_load_keep_every_field_including_defaults(tmp_path):
    config = FfnBertConfig(**TINY, ffn_type=["geglu", "relu"], hidden_act="relu", layer_norm_position="pre",
                           embedding_layer_norm=False, ffn_bias=False, swish_beta=2.0)
    config.save_pretrained(tmp_path)
    for loaded in (FfnBertConfig.from_pretrained(tmp_path), AutoConfig.from_pretrained(tmp_path)):
        assert type(loaded) is FfnBertConfig
        for field in dataclasses.fields(FfnBertConfig):
            if field.name != "transformers_version":  # stamped at save time
                assert getattr(loaded, field.name) == getattr(config, field.name), field.name
    # values equal to the defaults are written too, so the file alone says what the model is
    saved = (tmp_path / "config.json").read_text()
    for key in ("layer_norm_position", "leaky_relu_negative_slope", "elu_alpha", "hidden_act", "layer_norm_eps"):
        assert f'"{key}"' in saved


def test_from_pretrained_takes_bert_folder_and_overrides(tiny_bert_checkpoint):
    config = FfnBertConfig.from_pretrained(tiny_bert_checkpoint, ffn_type="swiglu", layer_norm_position="pre",
                                           intermediate_size=24)
    assert (config.ffn_type, config.layer_norm_position, config.intermediate_size) == ("swiglu", "pre", 24)
    assert config.hidden_size == TINY["hidden_size"]
    with pytest.raises(ValueError, match="ffn_type='relu' disagrees with hidden_act='gelu'"):
        FfnBertConfig.from_pretrained(tiny_bert_checkpoint, ffn_type="relu")
    assert FfnBertConfig.from_pretrained(tiny_bert_checkpoint, ffn_type="relu", hidden_act="relu").ffn_type == "relu"


def test_auto_config_overrides_are_validated_and_coupled(tmp_path):
    # Regression: upstream `from_dict` set overrides after construction, unchecked (found by a user test).
    FfnBertConfig(**TINY).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="layer_norm_position has unknown value 'middle'"):
        AutoConfig.from_pretrained(tmp_path, layer_norm_position="middle")
    with pytest.raises(ValueError, match="ffn_type has unknown value 'bogus'"):
        AutoModel.from_pretrained(tmp_path, ffn_type="bogus")
    with pytest.raises(ValueError, match="ffn_type='silu' disagrees with hidden_act='gelu'"):
        AutoConfig.from_pretrained(tmp_path, ffn_type="silu")
    with pytest.raises(ValueError, match="ffn_type has 2 entries but num_hidden_layers is 3"):
        AutoConfig.from_pretrained(tmp_path, ffn_type=["gelu", "geglu"], num_hidden_layers=3)
    assert AutoConfig.from_pretrained(tmp_path, ffn_type="swiglu").ffn_type == "swiglu"


def test_config_changed_by_assignment_is_checked_when_a_model_is_built():
    config = FfnBertConfig(**TINY)
    config.ffn_type = "relu"  # hidden_act is still "gelu"
    with pytest.raises(ValueError, match="ffn_type='relu' disagrees with hidden_act='gelu'"):
        FfnBertModel(config)


def test_bert_config_dict_keeps_ffn_bert_model_type(tmp_path):
    # Regression: `FfnBertConfig(**BertConfig().to_dict())` used to keep model_type "bert" as an instance
    # attribute, which switched off the BERT key mapping: saved FFN weights had in-memory names on disk.
    config = FfnBertConfig(**BertConfig(**TINY).to_dict())
    assert config.model_type == "ffn_bert"
    FfnBertModel(config).save_pretrained(tmp_path)
    _, info = BertModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    from transformers import GPT2Config

    with pytest.raises(ValueError, match="model_type='gpt2'"):
        FfnBertConfig.from_dict(GPT2Config().to_dict())


def test_non_bert_checkpoint_is_refused(tmp_path):
    from transformers import GPT2Config

    GPT2Config(n_layer=1).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"model_type='gpt2'; FfnBert loads BERT-shaped checkpoints only"):
        FfnBertModel.from_pretrained(tmp_path)


def test_parameter_matched_width():
    assert parameter_matched_glu_width(3072) == 2048
    assert parameter_matched_glu_width(4 * 4096) == 11008  # LLaMA-2-7B
    assert parameter_matched_glu_width(4096) == 2816  # BERT-large: ceil(2730.67 / 256) * 256
    with pytest.raises(ValueError, match="intermediate_size must be a positive integer, got 0"):
        parameter_matched_glu_width(0)
    # counted on the real modules: the matched GLU FFN has exactly BERT-base's FFN weights
    with torch.device("meta"):
        standard = FfnBertMLP(FfnBertConfig(), "gelu")
        gated = FfnBertGatedMLP(FfnBertConfig(ffn_type="swiglu", intermediate_size=2048), "swiglu")
    weights = lambda m: sum(p.numel() for n, p in m.named_parameters() if n.endswith("weight"))  # noqa: E731
    assert weights(standard) == weights(gated) == 4_718_592


def test_registration_does_not_touch_bert():
    assert type(AutoConfig.for_model("bert")) is BertConfig
    assert type(AutoConfig.for_model("ffn_bert")) is FfnBertConfig
    assert MODEL_MAPPING[BertConfig] is BertModel
    assert MODEL_MAPPING[FfnBertConfig] is FfnBertModel
    assert type(AutoModel.from_config(BertConfig(**TINY))) is BertModel
