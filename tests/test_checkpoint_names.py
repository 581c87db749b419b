"""The naming module: FfnBert's on-disk layout is BERT's (legacy gamma/beta included), the renames are derived from
one table and registered under FfnBert's own model type, and the inverse maps are exact inverses."""

import re

import torch
from safetensors.torch import load_file, save_file
from transformers import BertConfig, BertForPreTraining, BertModel, MegatronBertConfig, MegatronBertModel
from transformers.conversion_mapping import get_checkpoint_conversion_mapping

from hf_ffn import FfnBertForPreTraining, FfnBertForSequenceClassification, FfnBertModel
from hf_ffn.checkpoint_names import (
    BERT_FFN_NAMES,
    MEGATRON_KEY_MAPPING,
    bert_key,
    megatron_key,
    memory_key,
)

from .conftest import TINY, tiny_batch, tiny_config


def saved_keys(folder) -> set[str]:
    return set(load_file(f"{folder}/model.safetensors"))


def test_fresh_default_model_saves_exactly_bert_names(tmp_path):
    torch.manual_seed(0)
    FfnBertForPreTraining(tiny_config()).save_pretrained(tmp_path / "ours")
    BertForPreTraining(BertConfig(**TINY)).save_pretrained(tmp_path / "bert")
    assert saved_keys(tmp_path / "ours") == saved_keys(tmp_path / "bert")
    assert not any("gamma" in k or "beta" in k for k in saved_keys(tmp_path / "ours"))


def test_legacy_checkpoint_loads_and_resaves_as_upstream_does(tiny_bert_checkpoint, tmp_path):
    """A checkpoint with TF-era `LayerNorm.gamma/beta` names and a stale `position_ids` buffer: FfnBert loads it
    as upstream BERT does (every weight, the buffer dropped, the same outputs) and re-saves upstream's layout."""
    state = load_file(f"{tiny_bert_checkpoint}/model.safetensors")
    legacy = {
        k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
        for k, v in state.items()
    }
    legacy["bert.embeddings.position_ids"] = torch.arange(TINY["max_position_embeddings"])[None]
    (tmp_path / "legacy").mkdir()
    save_file(legacy, tmp_path / "legacy" / "model.safetensors", metadata={"format": "pt"})
    (tmp_path / "legacy" / "config.json").write_text(open(f"{tiny_bert_checkpoint}/config.json").read())
    ours, info = FfnBertModel.from_pretrained(tmp_path / "legacy", output_loading_info=True)
    upstream, upstream_info = BertModel.from_pretrained(tmp_path / "legacy", output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    # A base model leaves the checkpoint's `cls.*` head out, as BertModel does; nothing else is left over.
    assert {k for k in info["unexpected_keys"] if not k.startswith("cls.")} == set()
    assert info["unexpected_keys"] == upstream_info["unexpected_keys"]
    assert all(
        torch.equal(ours.encoder.layer[i].mlp_norm.weight, state[f"bert.encoder.layer.{i}.output.LayerNorm.weight"])
        for i in range(TINY["num_hidden_layers"])
    )
    original = BertModel.from_pretrained(tiny_bert_checkpoint).eval()  # the same weights under today's names
    with torch.no_grad():
        assert torch.equal(original(**tiny_batch()).last_hidden_state, ours.eval()(**tiny_batch()).last_hidden_state)
    ours.save_pretrained(tmp_path / "ours")
    upstream.save_pretrained(tmp_path / "upstream")
    assert saved_keys(tmp_path / "ours") == saved_keys(
        tmp_path / "upstream"
    )  # the source's layout, as upstream keeps it
    reloaded = FfnBertModel.from_pretrained(tmp_path / "ours").eval()
    with torch.no_grad():
        assert torch.equal(reloaded(**tiny_batch()).last_hidden_state, ours(**tiny_batch()).last_hidden_state)


def test_transformers_legacy_mapping_is_left_alone():
    legacy = get_checkpoint_conversion_mapping("legacy")
    assert not any("mlp_norm" in pattern for r in legacy for pattern in r.source_patterns + r.target_patterns)
    ffn_bert = get_checkpoint_conversion_mapping("ffn_bert")
    assert any("mlp_norm.weight" in r.target_patterns for r in ffn_bert)


def test_state_dict_in_disk_names_loads_strictly_through_the_pre_hook(tmp_path):
    # Trainer's resume_from_checkpoint calls `model.load_state_dict(<model.safetensors>)`: no weight conversion runs.
    config = tiny_config(ffn_type="geglu", layer_norm_position="pre", num_labels=2)
    torch.manual_seed(0)
    model = FfnBertForSequenceClassification(config)
    model.save_pretrained(tmp_path)
    on_disk = load_file(tmp_path / "model.safetensors")
    assert "bert.encoder.layer.0.intermediate.dense.weight" in on_disk  # BERT's name on disk
    torch.manual_seed(1)
    fresh = FfnBertForSequenceClassification(config)
    fresh.load_state_dict(on_disk, strict=True)
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_bert_and_memory_names_are_inverse():
    model = FfnBertForPreTraining(tiny_config(ffn_type="swiglu", layer_norm_position="pre"))
    for key in model.state_dict():
        assert memory_key(bert_key(key)) == key
    bert_keys = BertForPreTraining(BertConfig(**TINY)).state_dict().keys()
    for key in bert_keys:
        assert bert_key(memory_key(key)) == key
    renamed = {memory_key(k) for k in bert_keys}
    assert all(any(f".{ours}." in k for k in renamed) for ours in BERT_FFN_NAMES.values())
    assert memory_key("bert.encoder.layer.0.attention.output.LayerNorm.weight").endswith(
        "attention.output.LayerNorm.weight"
    )


def test_megatron_names_map_onto_ffn_bert_and_back():
    megatron = MegatronBertModel(MegatronBertConfig(**TINY)).state_dict().keys()
    ours = FfnBertModel(tiny_config(layer_norm_position="pre", embedding_layer_norm=False)).state_dict().keys()
    renamed = {}
    for key in megatron:
        new = key
        for pattern, replacement in MEGATRON_KEY_MAPPING.items():
            new = re.sub(pattern, replacement, new)
        renamed[memory_key(new)] = key
    assert set(renamed) == set(ours)
    assert all(megatron_key(k) == source for k, source in renamed.items())
