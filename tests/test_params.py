"""`hf-ffn params`: counts read off the real modules, compared with the published numbers."""

import json
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertModel

from hf_ffn.cli import main
from hf_ffn.params import PRESETS, format_markdown, param_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "switches.md"


@pytest.fixture(scope="module")
def bert_base():
    return param_table("bert-base")


def test_bert_base_ffn_and_parameter_matched_glu(bert_base):
    standard, gated_same_width, gated_matched = bert_base
    assert (standard.ffn_type, standard.intermediate_size) == ("gelu", 3072)
    assert standard.ffn_weights == 4_718_592  # 2 · 768 · 3072
    assert standard.ffn_biases == 3072 + 768
    assert (gated_matched.ffn_type, gated_matched.intermediate_size) == ("geglu", 2048)
    assert gated_matched.ffn_weights == standard.ffn_weights  # 3 · 768 · 2048: the parameter-matched GLU
    assert gated_same_width.ffn_weights == 7_077_888  # a third projection at the same width: 1.5×
    # one matmul multiply-add per weight and token, counted as 2 FLOPs
    assert [r.ffn_flops_per_token for r in bert_base] == [2 * r.ffn_weights for r in bert_base]


def test_bert_base_model_total_is_upstream_bert(bert_base):
    with torch.device("meta"):
        upstream = sum(p.numel() for p in BertModel(BertConfig()).parameters())
    assert bert_base[0].model_params == upstream == 109_482_240  # bert-base-uncased's BertModel
    assert bert_base[0].ffn_params_all_layers == 12 * (4_718_592 + 3_840)
    assert bert_base[0].ffn_share == pytest.approx(56_669_184 / 109_482_240, rel=1e-12)


def test_llama_2_7b_width_and_mlp_size():
    standard, _, matched = param_table("llama-2-7b")
    assert standard.intermediate_size == 16384
    assert (matched.ffn_type, matched.intermediate_size) == ("swiglu", 11008)
    assert matched.ffn_weights == 135_266_304  # LLaMA-2-7B's per-layer MLP: 3 · 4096 · 11008, no biases
    assert matched.ffn_biases == 0


def test_bert_large_rounds_up_to_multiple_of_256():
    standard, _, matched = param_table("bert-large")
    assert standard.ffn_weights == 8_388_608 and matched.intermediate_size == 2816  # 2/3 · 4096 = 2730.7 → 2816
    assert matched.ffn_weights >= standard.ffn_weights


def test_unknown_preset_is_named():
    with pytest.raises(ValueError, match="'bert-huge'.*allowed: bert-base, bert-large, llama-2-7b"):
        param_table("bert-huge")


def test_cli_prints_table_and_json(capsys):
    assert main(["params", "--preset", "bert-base"]) == 0
    table = capsys.readouterr().out
    assert "| BERT-base | geglu | 2,048 | 4,718,592 |" in table and table.count("\n| BERT-base") == 3
    assert main(["params", "--preset", "llama-2-7b", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["intermediate_size"] for r in rows] == [16384, 16384, 11008]


def test_docs_table_is_current():
    rows = [row for preset in PRESETS for row in param_table(preset)]
    assert format_markdown(rows) in DOC.read_text(encoding="utf-8"), "regenerate it with `hf-ffn params`"
