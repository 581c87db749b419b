"""Contracts of transformers' own model and config test suites (`tests/test_modeling_common.py`'s `ModelTesterMixin`,
`tests/test_configuration_common.py`'s `ConfigTester`), ported for FfnBert so a regression shows here.

The installed transformers wheel does not ship its tests; these ports keep the checks the upstream tests make that
FfnBert once failed or skipped (reverse loading mapping, the `**kwargs` annotation read by the eager-vs-sdpa test)
and the config common tests, on every head class and three configs (default, SwiGLU Pre-LN, GeGLU).
"""

import copy
import inspect
import json
import re

import pytest
import torch
from safetensors.torch import load_file
from transformers.conversion_mapping import get_model_conversion_mapping
from transformers.core_model_loading import WeightRenaming

from hf_ffn.configuration_ffn_bert import FfnBertConfig
from hf_ffn.modeling_ffn_bert import HEAD_CLASSES

from .conftest import tiny_config

CONFIGS = {
    "default": {},
    "swiglu_pre_ln": {"ffn_type": "swiglu", "layer_norm_position": "pre", "ffn_bias": False},
    "geglu": {"ffn_type": "geglu"},
}
CLASSES = [head.ffn_bert for head in HEAD_CLASSES]


def _state_dicts_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("variant", CONFIGS)
def test_reverse_loading_mapping(variant, tmp_path):
    """`ModelTesterMixin.test_reverse_loading_mapping`: saving reverses the weight-conversion mapping, every source
    pattern of the model's own mapping (transformers' global "legacy" list excluded) matches a saved key, and a
    model saved from `__init__` and the same model saved after `from_pretrained` write identical files."""
    for model_class in CLASSES:
        torch.manual_seed(0)
        model = model_class(tiny_config(**CONFIGS[variant]))
        conversions = get_model_conversion_mapping(model, add_legacy=False)
        assert conversions, model_class.__name__
        model_keys = set(model.state_dict())
        model.save_pretrained(tmp_path / "init")
        saved = load_file(tmp_path / "init" / "model.safetensors")
        assert set(saved) != model_keys, "no key mapping was performed"
        tied = getattr(model, "all_tied_weights_keys", {}) or {}
        for conversion in conversions:
            for source_pattern in conversion.source_patterns:
                if isinstance(conversion, WeightRenaming) and any(
                    re.search(conversion.target_patterns[0], k) for k in tied
                ):
                    continue
                assert any(re.search(source_pattern, key) for key in saved), (
                    f"{model_class.__name__}: `{source_pattern}` in {conversion} matches no saved key"
                )
        reloaded = model_class.from_pretrained(tmp_path / "init")
        assert _state_dicts_equal(reloaded.state_dict(), model.state_dict())
        reloaded.save_pretrained(tmp_path / "reloaded")
        assert _state_dicts_equal(saved, load_file(tmp_path / "reloaded" / "model.safetensors"))
        assert not any(k.endswith((".gamma", ".beta")) for k in saved)  # new checkpoints never say gamma/beta


@pytest.mark.parametrize("model_class", CLASSES, ids=lambda c: c.__name__)
def test_forward_kwargs_are_transformers_kwargs(model_class):
    """The eager-vs-sdpa test runs `output_attentions=True` only for a model whose `forward` names it, directly or in
    its `**kwargs: Unpack[TransformersKwargs]` annotation (read at run time: it must be an object, not a string)."""
    model = model_class(tiny_config())
    kwargs = inspect.signature(model.forward).parameters["kwargs"]
    typed_dict = kwargs.annotation.__args__[0]
    assert "output_attentions" in typed_dict.__annotations__
    assert "output_hidden_states" in typed_dict.__annotations__


# transformers' `config_common_kwargs` (tests/test_configuration_common.py): PretrainedConfig's common fields, each
# set away from its default; every config must store them as given. FfnBert is an encoder, so the decoder fields
# are accepted by the config (as by BertConfig) and rejected when a model is built.
CONFIG_COMMON_KWARGS = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "tie_word_embeddings": False,
    "is_decoder": True,
    "add_cross_attention": True,
    "chunk_size_feed_forward": 5,
    "architectures": ["BertModel"],
    "finetuning_task": "translation",
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "tokenizer_class": "BertTokenizerFast",
    "prefix": "prefix",
    "bos_token_id": 6,
    "pad_token_id": 7,
    "eos_token_id": 8,
    "sep_token_id": 9,
    "task_specific_params": {"translation": "some_params"},
    "problem_type": "regression",
}


@pytest.mark.parametrize("variant", CONFIGS)
def test_config_common_tests(variant, tmp_path):
    """`ConfigTester.run_common_tests` (upstream BERT's config test, `hidden_size=37`), for each variant."""
    inputs = {"hidden_size": 37, **CONFIGS[variant]}
    config = FfnBertConfig(**inputs)
    # common properties: getters, setters, constructor arguments
    for idx, name in enumerate(["hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"]):
        assert hasattr(config, name)
        setattr(config, name, idx)
        assert getattr(config, name) == idx
    for idx, name in enumerate(["hidden_size", "num_attention_heads", "vocab_size"]):
        assert getattr(FfnBertConfig(**{name: idx}), name) == idx
    # to_json_string, to_json_file, save/from_pretrained (also from a subfolder), a missing folder
    first = FfnBertConfig(**inputs)
    obj = json.loads(first.to_json_string())
    assert all(obj[key] == value for key, value in inputs.items())
    first.to_json_file(tmp_path / "config.json")
    assert FfnBertConfig.from_json_file(tmp_path / "config.json").to_dict() == first.to_dict()
    first.save_pretrained(tmp_path / "saved")
    assert FfnBertConfig.from_pretrained(tmp_path / "saved").to_dict() == first.to_dict()
    first.save_pretrained(tmp_path / "parent" / "test")
    assert FfnBertConfig.from_pretrained(tmp_path / "parent", subfolder="test").to_dict() == first.to_dict()
    with pytest.raises(OSError):
        FfnBertConfig.from_pretrained(f".{tmp_path / 'saved'}")
    # num_labels
    labelled = FfnBertConfig(**inputs, num_labels=5)
    assert len(labelled.id2label) == len(labelled.label2id) == 5
    labelled.num_labels = 3
    assert len(labelled.id2label) == len(labelled.label2id) == 3
    # init without parameters; the common arguments stored as given
    assert FfnBertConfig() is not None
    common = FfnBertConfig(**copy.deepcopy(CONFIG_COMMON_KWARGS), dtype="float16")
    wrong = [(k, getattr(common, k), v) for k, v in CONFIG_COMMON_KWARGS.items() if getattr(common, k) != v]
    assert not wrong and common.dtype == torch.float16, wrong

