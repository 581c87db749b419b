"""Contracts of transformers' own model test suite (`tests/test_modeling_common.py`'s `ModelTesterMixin`) that
FfnBert once failed or skipped, ported so a regression shows here (the installed transformers wheel does not ship
its tests): the reverse loading mapping, on every head class and three configs (default, SwiGLU Pre-LN, GeGLU), and
the `**kwargs` annotation the eager-vs-sdpa test reads. `ConfigTester.run_common_tests` is ported in test_config.py.
"""

import inspect
import re

import pytest
import torch
from safetensors.torch import load_file
from transformers.conversion_mapping import get_model_conversion_mapping
from transformers.core_model_loading import WeightRenaming

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
