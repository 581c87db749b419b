"""FfnBertConfig: BERT fields unchanged, the new fields, validation, serialisation, Auto registration."""

import dataclasses
import json
import logging

import pytest
import torch
from transformers import AutoConfig, AutoModel, BertConfig, BertModel
from transformers.activations import ACT2FN
from transformers.models.auto.modeling_auto import MODEL_MAPPING

from hf_ffn import (
    FfnBertConfig,
    FfnBertForMaskedLM,
    FfnBertGatedMLP,
    FfnBertMLP,
    FfnBertModel,
    parameter_matched_glu_width,
)

from .conftest import TINY, tiny_batch

BERT_FIELDS = [f.name for f in dataclasses.fields(BertConfig) if f.name != "transformers_version"]


def test_every_bert_field_keeps_name_and_default():
    ours, bert = FfnBertConfig(), BertConfig()
    for field in BERT_FIELDS:
        assert getattr(ours, field) == getattr(bert, field), field
    assert (ours.ffn_type, ours.layer_norm_position, ours.hidden_act) == ("gelu", "post", "gelu")
    assert ours.is_default_bert


def test_bert_config_converts_without_loss():
    bert = BertConfig(
        hidden_size=48,
        num_attention_heads=6,
        intermediate_size=100,
        hidden_act="gelu_new",
        layer_norm_eps=1e-7,
        type_vocab_size=3,
        classifier_dropout=0.3,
        num_labels=5,
    )
    ours = FfnBertConfig.from_dict(bert.to_dict())
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
    model = FfnBertForMaskedLM(config)
    assert isinstance(model.bert.encoder.layer[0].mlp.act_fn, torch.nn.ELU)
    assert model.bert.encoder.layer[0].mlp.act_fn.alpha == 0.5
    assert isinstance(model.cls.predictions.transform.transform_act_fn, type(ACT2FN["gelu"]))
    config = FfnBertConfig(**TINY, hidden_act="elu")  # constructs, as BertConfig(hidden_act="elu") does
    with pytest.raises(ValueError, match=r"hidden_act has unknown value 'elu'; allowed: .*gelu"):
        FfnBertForMaskedLM(config)


@pytest.mark.parametrize("ffn_type", ["relu", "gelu_new", "silu", "swiglu", "leaky_relu"])
def test_ffn_type_sets_the_ffn_alone(ffn_type):
    config = FfnBertConfig(ffn_type=ffn_type)
    assert (config.ffn_type, config.hidden_act) == (ffn_type, "gelu")
    assert not config.is_default_bert
    config = FfnBertConfig(ffn_type=ffn_type, hidden_act="relu")  # both given: each keeps its own value
    assert (config.ffn_type, config.hidden_act) == (ffn_type, "relu")


def test_hidden_act_alone_sets_bert_ffn_and_head():
    config = FfnBertConfig(hidden_act="gelu_new")
    assert (config.ffn_type, config.hidden_act) == ("gelu_new", "gelu_new")
    assert config.is_default_bert  # BERT with hidden_act="gelu_new": the FFN is upstream's


@pytest.mark.parametrize(
    "kwargs, default",
    [
        ({}, True),
        ({"ffn_type": "gelu"}, True),  # written out, still BERT's FFN
        ({"ffn_type": ["gelu", "gelu"]}, True),
        ({"ffn_type": ["gelu", "relu"]}, False),
        ({"ffn_type": "relu"}, False),  # a ReLU FFN under a GELU checkpoint
        ({"ffn_type": "relu", "hidden_act": "relu"}, True),  # BERT with hidden_act="relu"
        ({"layer_norm_position": ["post", "pre"]}, False),
        ({"embedding_layer_norm": False}, False),
        ({"ffn_bias": False}, False),
        ({"hidden_act": "leaky_relu"}, False),  # FfnBert's leaky_relu takes its slope from the config
    ],
)
def test_is_default_bert_means_exactly_upstream_bert(kwargs, default, tmp_path):
    config = FfnBertConfig(**TINY, **kwargs)
    assert config.is_default_bert is default
    # the reasons name each non-default switch: exactly one here, or none for plain BERT
    reasons = config.non_default_fields()
    assert len(reasons) == (0 if default else 1)
    assert all(reason.startswith(next(iter(kwargs))) for reason in reasons)
    if default:  # then the FfnBert model is upstream BertModel, bit for bit, on the same weights
        torch.manual_seed(0)
        bert = BertModel(BertConfig(**TINY, hidden_act=config.hidden_act)).eval()
        bert.save_pretrained(tmp_path)
        ours = FfnBertModel.from_pretrained(tmp_path, **kwargs).eval()
        assert ours.config.is_default_bert
        with torch.no_grad():
            assert torch.equal(bert(**tiny_batch()).last_hidden_state, ours(**tiny_batch()).last_hidden_state)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"ffn_type": "swigluu"}, r"ffn_type has unknown value 'swigluu'; allowed: .*swiglu"),
        ({"layer_norm_position": "middle"}, r"layer_norm_position has unknown value 'middle'; allowed: post, pre"),
        ({"ffn_type": ["gelu", "swiglu", "gelu"]}, r"ffn_type has 3 entries but num_hidden_layers is 2"),
        ({"layer_norm_position": ["pre"]}, r"layer_norm_position has 1 entries but num_hidden_layers is 2"),
        (
            {"ffn_type": "leaky_relu", "leaky_relu_negative_slope": 1.5},
            r"leaky_relu_negative_slope must be a number in \[0, 1\), got 1.5",
        ),
        ({"elu_alpha": 0.0}, r"elu_alpha must be a number in \(0, inf\), got 0.0"),
        ({"swish_beta": -1.0}, r"swish_beta must be a number in \(0, inf\), got -1.0"),
        ({"swish_beta": float("inf")}, r"swish_beta must be a number in \(0, inf\), got inf"),
        ({"elu_alpha": "1"}, r"elu_alpha must be a number in \(0, inf\), got '1'"),
        ({"ffn_type": 3}, r"ffn_type must be a string or a list of 2 strings, got 3"),
        ({"layer_norm_position": None}, r"layer_norm_position must be a string or a list of 2 strings, got None"),
        ({"ffn_bias": "no"}, r"ffn_bias must be True or False, got 'no'"),
        ({"embedding_layer_norm": None}, r"embedding_layer_norm must be True or False, got None"),
        ({"ffn_type": "xielu"}, r"ffn_type has unknown value 'xielu'"),  # learnable: not offered
        ({"ffn_type": ["gelu", "gelu_typo"]}, r"ffn_type has unknown value 'gelu_typo'"),
    ],
)
def test_bad_ffn_bert_values_raise_value_error_naming_field_and_value(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        FfnBertConfig(**{**TINY, **kwargs})


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"intermediate_size": 0}, r"intermediate_size must be a positive integer, got 0"),
        ({"intermediate_size": -5}, r"intermediate_size must be a positive integer, got -5"),
        ({"hidden_dropout_prob": -0.1}, r"hidden_dropout_prob must be a probability in \[0, 1\], got -0.1"),
        ({"attention_probs_dropout_prob": 1.5}, r"attention_probs_dropout_prob must be .* got 1.5"),
        ({"classifier_dropout": 2}, r"classifier_dropout must be a probability in \[0, 1\], got 2"),
    ],
)
def test_sizes_and_dropouts_are_checked_at_construction(kwargs, pattern):
    # Issue 55: BertConfig accepts them and only the model build failed; a config that cannot build is refused at
    # once, naming the field (a config made by `hf-ffn mlm --intermediate_size 0` never reaches the data).
    BertConfig(**{**TINY, **kwargs})
    with pytest.raises(ValueError, match=pattern):
        FfnBertConfig(**{**TINY, **kwargs})
    assert FfnBertConfig(**{**TINY, "hidden_dropout_prob": 0.0, "classifier_dropout": None}).classifier_dropout is None


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"hidden_size": -32}, r"hidden_size must be a positive integer, got -32"),
        ({"num_attention_heads": 5}, r"hidden_size \(32\) must be divisible by num_attention_heads \(5\)"),
        ({"ffn_type": "xielu", "hidden_act": "xielu"}, r"hidden_act has unknown value 'xielu'"),
        ({"hidden_act": "gelu_typo"}, r"hidden_act has unknown value 'gelu_typo'"),  # and so the FFN's
        ({"hidden_act": "gelu_typo", "ffn_type": "gelu"}, r"hidden_act has unknown value 'gelu_typo'"),
        ({"ffn_type": ["gelu", "elu"], "hidden_act": "elu"}, r"hidden_act has unknown value 'elu'"),
        ({"is_decoder": True}, r"FfnBert is an encoder: is_decoder=True"),
        ({"add_cross_attention": True}, r"FfnBert is an encoder: .*add_cross_attention=True"),
    ],
)
def test_bert_fields_are_checked_at_model_build_as_upstream(kwargs, pattern):
    # BertConfig accepts these values and upstream BERT fails only when its modules are built: so do we, with
    # a ValueError naming the field.
    BertConfig(**{**TINY, **{k: v for k, v in kwargs.items() if k in BERT_FIELDS}})
    config = FfnBertConfig(**{**TINY, **kwargs})
    with pytest.raises(ValueError, match=pattern):
        FfnBertModel(config)


def test_hidden_size_32_constructs_and_the_model_build_rejects_it():
    config = FfnBertConfig(hidden_size=32)  # as BertConfig(hidden_size=32): 12 heads, checked at model build
    assert (config.hidden_size, config.num_attention_heads) == (32, 12)
    with pytest.raises(ValueError, match=r"The hidden size \(32\) is not a multiple of the number of attention"):
        BertModel(BertConfig(hidden_size=32))
    with pytest.raises(ValueError, match=r"hidden_size \(32\) must be divisible by num_attention_heads \(12\)"):
        FfnBertModel(config)


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
    config = FfnBertConfig(
        **TINY,
        ffn_type=["geglu", "relu"],
        hidden_act="relu",
        layer_norm_position="pre",
        embedding_layer_norm=False,
        ffn_bias=False,
        swish_beta=2.0,
    )
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
    config = FfnBertConfig.from_pretrained(
        tiny_bert_checkpoint, ffn_type="swiglu", layer_norm_position="pre", intermediate_size=24
    )
    assert (config.ffn_type, config.layer_norm_position, config.intermediate_size) == ("swiglu", "pre", 24)
    assert config.hidden_size == TINY["hidden_size"]
    config = FfnBertConfig.from_pretrained(tiny_bert_checkpoint, ffn_type="relu")
    assert (config.ffn_type, config.hidden_act) == ("relu", "gelu")


def test_bert_folder_loads_without_transformers_model_type_warning(tiny_bert_checkpoint):
    """A BERT checkpoint's config is FfnBert's to read: `get_config_dict` hands `from_dict` the dict in FfnBert's terms,
    so transformers' "model of type bert to instantiate a model of type ffn_bert" warning does not fire."""
    from transformers.configuration_utils import logger as config_logger

    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    config_logger.addHandler(handler)
    try:
        config = FfnBertConfig.from_pretrained(tiny_bert_checkpoint)
    finally:
        config_logger.removeHandler(handler)
    assert config.model_type == "ffn_bert" and config.is_default_bert
    assert not [r for r in records if "You are using a model of type" in r.getMessage()]


def test_auto_config_overrides_are_validated(tmp_path):
    # Regression: upstream `from_dict` set overrides after construction, unchecked (found by a user test).
    FfnBertConfig(**TINY).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="layer_norm_position has unknown value 'middle'"):
        AutoConfig.from_pretrained(tmp_path, layer_norm_position="middle")
    with pytest.raises(ValueError, match="ffn_type has unknown value 'bogus'"):
        AutoModel.from_pretrained(tmp_path, ffn_type="bogus")
    assert AutoConfig.from_pretrained(tmp_path, ffn_type="silu").hidden_act == "gelu"
    with pytest.raises(ValueError, match="ffn_type has 2 entries but num_hidden_layers is 3"):
        AutoConfig.from_pretrained(tmp_path, ffn_type=["gelu", "geglu"], num_hidden_layers=3)
    assert AutoConfig.from_pretrained(tmp_path, ffn_type="swiglu").ffn_type == "swiglu"


def test_config_changed_by_assignment_is_checked_when_a_model_is_built():
    config = FfnBertConfig(**TINY)
    config.ffn_type = "swigluu"
    with pytest.raises(ValueError, match="ffn_type has unknown value 'swigluu'"):
        FfnBertModel(config)
    config = FfnBertConfig(**TINY)
    config.num_attention_heads = 5
    with pytest.raises(ValueError, match=r"hidden_size \(32\) must be divisible by num_attention_heads \(5\)"):
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


# The checks of transformers' own `ConfigTester.run_common_tests` (tests/test_configuration_common.py, not shipped in
# the wheel), written out for FfnBertConfig with the inputs upstream's BERT model test uses (hidden_size=37 with the
# default 12 heads: the config must not check divisibility, the model build does).
COMMON_INPUTS = dict(hidden_size=37)
# Values different from the defaults for fields every config has (upstream's `config_common_kwargs`, those that
# transformers 5 configs still take), including BERT's decoder switches, which the config accepts as BertConfig does.
COMMON_KWARGS = dict(
    return_dict=False,
    output_hidden_states=True,
    tie_word_embeddings=False,
    is_decoder=True,
    add_cross_attention=True,
    chunk_size_feed_forward=5,
    architectures=["BertModel"],
    finetuning_task="translation",
    id2label={0: "label"},
    label2id={"label": "0"},
    tokenizer_class="BertTokenizerFast",
    bos_token_id=6,
    pad_token_id=7,
    eos_token_id=8,
    sep_token_id=9,
    problem_type="regression",
    dtype="float16",
)


def test_common_properties_get_set_and_construct():
    config = FfnBertConfig(**COMMON_INPUTS)
    names = ["hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"]
    for idx, name in enumerate(names):
        setattr(config, name, idx)
        assert getattr(config, name) == idx, name
    for idx, name in enumerate(names):  # e.g. hidden_size=0: constructs, as BertConfig(hidden_size=0) does
        assert getattr(FfnBertConfig(**{name: idx}), name) == idx, name
        assert getattr(BertConfig(**{name: idx}), name) == idx, name


def test_common_to_json_string_and_file(tmp_path):
    config = FfnBertConfig(**COMMON_INPUTS)
    written = json.loads(config.to_json_string())
    for key, value in COMMON_INPUTS.items():
        assert written[key] == value
    assert (written["ffn_type"], written["hidden_act"]) == ("gelu", "gelu")
    config.to_json_file(tmp_path / "config.json")
    assert FfnBertConfig.from_json_file(tmp_path / "config.json").to_dict() == config.to_dict()


def test_common_from_and_save_pretrained_with_subfolder(tmp_path):
    config = FfnBertConfig(**COMMON_INPUTS, ffn_type="relu")
    config.save_pretrained(tmp_path / "plain")
    assert FfnBertConfig.from_pretrained(tmp_path / "plain").to_dict() == config.to_dict()
    with pytest.raises(OSError):
        FfnBertConfig.from_pretrained(tmp_path / "missing")
    config.save_pretrained(tmp_path / "repo" / "sub")
    assert FfnBertConfig.from_pretrained(tmp_path / "repo", subfolder="sub").to_dict() == config.to_dict()


def test_common_num_labels_and_init_without_params():
    config = FfnBertConfig(**COMMON_INPUTS, num_labels=5)
    assert len(config.id2label) == len(config.label2id) == 5
    config.num_labels = 3
    assert len(config.id2label) == len(config.label2id) == 3
    assert FfnBertConfig() is not None


def test_common_arguments_init():
    config = FfnBertConfig(**COMMON_KWARGS)
    wrong = {}
    for key, value in COMMON_KWARGS.items():
        got = getattr(config, key)
        if key == "dtype":
            value = torch.float16
        if got != value:
            wrong[key] = (got, value)
    assert not wrong


def test_ffn_roberta_is_built_only_on_the_transformers_it_is_proven_on():
    """FfnRoberta's parity is proven from transformers 5.25 (tests/test_roberta_family.py); on an older release (CI's
    floor environment, 5.6, where XLMRobertaForMultipleChoice has no pooler) building one is refused, not silently
    different."""
    import transformers
    from packaging.version import Version

    from hf_ffn import FfnRobertaConfig, FfnRobertaModel
    from hf_ffn.modeling_ffn_roberta import MIN_TRANSFORMERS

    sizes = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37)
    config = FfnRobertaConfig(vocab_size=99, max_position_embeddings=16, **sizes)
    if Version(transformers.__version__).release >= MIN_TRANSFORMERS:
        assert FfnRobertaModel(config).embeddings.padding_idx == 1
    else:
        with pytest.raises(ValueError, match=r"FfnRoberta needs transformers >= 5\.25 \(installed: 5\."):
            FfnRobertaModel(config)
