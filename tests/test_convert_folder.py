"""Folders: `hf-ffn convert` / scripts/convert_checkpoint.py, export back to BERT, remote code, model cards."""

import json
import os
import runpy
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from transformers import BertForMaskedLM, BertModel

from hf_ffn import AUTO_MAP, FfnBertConfig, FfnBertForMaskedLM, FfnBertForSequenceClassification, FfnBertModel
from hf_ffn.cli import main
from hf_ffn.conversion import REPORT_FILE, convert_checkpoint, export_to_bert, load_converted, write_converted_folder

from .conftest import TINY, tiny_batch

EXPECTED_FILES = {
    "config.json",
    "model.safetensors",
    "configuration_ffn_bert.py",
    "modeling_ffn_bert.py",
    "checkpoint_names.py",
    "conversion_report.json",
    "README.md",
}


def test_convert_writes_a_complete_folder(bundled_checkpoint, tmp_path):
    """The real checkpoint to GeGLU through the CLI: every file, the report's measured difference (exact: 0), the
    tokenizer, the card; the folder reloads with AutoModel to the same outputs."""
    out = tmp_path / "geglu"
    assert main(["convert", bundled_checkpoint, str(out), "--ffn_type", "geglu", "--json"]) == 0
    files = set(os.listdir(out))
    assert EXPECTED_FILES <= files and "tokenizer_config.json" in files
    report = json.loads((out / "conversion_report.json").read_text())
    assert report["exact"] and report["difference"]["last_hidden_state"]["equal"]
    assert report["difference"]["last_hidden_state"]["max_abs_diff"] == 0.0
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "ffn_bert" and config["ffn_type"] == "geglu"
    assert config["auto_map"]["AutoModelForMaskedLM"] == "modeling_ffn_bert.FfnBertForMaskedLM"
    card = ModelCard.load(out / "README.md")
    assert card.data.library_name == "transformers" and card.data.license == "apache-2.0"  # from the source card
    assert "geglu" in card.data.tags and "| `last_hidden_state` | 0 | 0 | yes |" in card.text
    reloaded = FfnBertModel.from_pretrained(out).eval()
    source = BertModel.from_pretrained(bundled_checkpoint).eval()
    batch = {"input_ids": torch.tensor([[101, 2051, 10029, 2066, 2019, 8612, 102]])}
    with torch.no_grad():
        assert torch.equal(reloaded(**batch).last_hidden_state, source(**batch).last_hidden_state)


def test_failed_conversion_writes_nothing(tiny_bert_checkpoint, tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:  # the CLI turns bad input into a one-line error, exit code 2
        main(["convert", tiny_bert_checkpoint, str(out), "--ffn_type", "bilinear"])
    assert exit_info.value.code == 2
    assert "hf-ffn convert: error:" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []  # neither the folder nor its temporary sibling
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep me")
    with pytest.raises(SystemExit):
        main(["convert", tiny_bert_checkpoint, str(tmp_path / "full"), "--ffn_type", "geglu"])
    assert "exists and is not empty" in capsys.readouterr().err
    assert os.listdir(tmp_path / "full") == ["x"]


def test_script_fresh_matched_per_layer(tiny_bert_checkpoint, tmp_path, monkeypatch):
    """The thin script runs the same command; per-layer lists and an explicit width reach `load_converted`."""
    out = tmp_path / "fresh"
    script = os.path.join(os.path.dirname(__file__), "..", "scripts", "convert_checkpoint.py")
    argv = [
        script,
        tiny_bert_checkpoint,
        str(out),
        "--ffn_type",
        "gelu,swiglu",
        "--layer_norm_position",
        "pre",
        "--init",
        "fresh",
        "--width",
        "48",
    ]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(script, run_name="__main__")  # in-process: a subprocess would re-import torch (slow)
    assert exit_info.value.code == 0
    report = json.loads((out / "conversion_report.json").read_text())
    assert [layer["recipe"] for layer in report["layers"]] == ["fresh", "fresh"]  # the width changes both layers
    assert report["config_changes"]["intermediate_size"] == [37, 48]
    assert "bert.encoder.final_norm.weight" in report["new"]  # BertForPreTraining checkpoint → FfnBertForPreTraining
    # Every head weight came from the checkpoint (only encoder weights are new): compared head to head.
    assert report["difference"]["reference"] == "transformers.BertForPreTraining"
    assert report["difference"]["prediction_logits"]["max_abs_diff"] > 0
    weights = load_file(out / "model.safetensors")
    assert weights["bert.encoder.layer.1.mlp.gate_proj.weight"].shape == (48, 32)


# ---------------------------------------------------------------------------------------------------------------
# Export back to plain BERT
# ---------------------------------------------------------------------------------------------------------------
def test_export_default_ffn_bert_to_bert(tmp_path):
    torch.manual_seed(0)
    model = FfnBertForMaskedLM(FfnBertConfig(**TINY)).eval()
    model.save_pretrained(tmp_path / "ffn")
    export_to_bert(tmp_path / "ffn", tmp_path / "bert")
    config = json.loads((tmp_path / "bert" / "config.json").read_text())
    assert config["model_type"] == "bert" and config["architectures"] == ["BertForMaskedLM"]
    assert "auto_map" not in config and "ffn_type" not in config
    assert not (tmp_path / "bert" / "modeling_ffn_bert.py").exists()
    upstream, info = BertForMaskedLM.from_pretrained(tmp_path / "bert", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    batch = tiny_batch()
    with torch.no_grad():
        assert torch.equal(upstream.eval()(**batch).logits, model(**batch).logits)


def test_export_refuses_non_default(tmp_path):
    FfnBertModel(FfnBertConfig(**TINY, ffn_type="swiglu", layer_norm_position="pre")).save_pretrained(tmp_path / "ffn")
    with pytest.raises(ValueError, match=r"ffn_type='swiglu' .*; layer_norm_position='pre'"):
        export_to_bert(tmp_path / "ffn", tmp_path / "bert")
    assert not (tmp_path / "bert").exists()


# ---------------------------------------------------------------------------------------------------------------
# trust_remote_code without hf_ffn
# ---------------------------------------------------------------------------------------------------------------
REMOTE_SCRIPT = textwrap.dedent(
    """
    import importlib.util, os, sys
    # Take every path that holds an hf_ffn package (the editable install's .pth entry, PYTHONPATH, cwd) off sys.path.
    sys.path = [p for p in sys.path if not os.path.isdir(os.path.join(p or os.getcwd(), "hf_ffn"))]
    # ... and setuptools' editable-install finder (a top-level package is found through it, not through sys.path).
    sys.meta_path = [f for f in sys.meta_path if "editable" not in getattr(f, "__name__", type(f).__name__).lower()]
    assert importlib.util.find_spec("hf_ffn") is None
    try:
        import hf_ffn
    except ImportError:
        pass
    else:
        raise SystemExit("hf_ffn is importable")
    import torch
    from transformers import AutoModel
    folder, expected = sys.argv[1], torch.load(sys.argv[2])
    model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(model).__name__ == "FfnBertModel" and not type(model).__module__.startswith("hf_ffn"), type(model)
    assert model.config.ffn_type == "swiglu" and model.config.layer_norm_position == "pre"
    with torch.no_grad():
        out = model(**expected["inputs"]).last_hidden_state
    assert torch.equal(out, expected["last_hidden_state"]), (out - expected["last_hidden_state"]).abs().max()
    print("REMOTE_OK", type(model).__module__)
    """
)


@pytest.mark.slow
def test_trust_remote_code_without_hf_ffn(tmp_path):
    torch.manual_seed(0)
    model = FfnBertModel(FfnBertConfig(**TINY, ffn_type="swiglu", layer_norm_position="pre")).eval()
    folder = tmp_path / "swiglu_pre"
    model.save_pretrained(folder)
    assert {"configuration_ffn_bert.py", "modeling_ffn_bert.py", "checkpoint_names.py"} <= set(os.listdir(folder))
    batch = tiny_batch()
    with torch.no_grad():
        torch.save({"inputs": batch, "last_hidden_state": model(**batch).last_hidden_state}, tmp_path / "expected.pt")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {"PATH": os.environ.get("PATH", ""), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home")}
    result = subprocess.run(
        [sys.executable, "-c", REMOTE_SCRIPT, str(folder), str(tmp_path / "expected.pt")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "REMOTE_OK transformers_modules" in result.stdout


def test_model_card_standard_family(tiny_bert_checkpoint):
    from hf_ffn.conversion import build_model_card, load_converted, measure_difference

    model, report = load_converted(tiny_bert_checkpoint, layer_norm_position="pre")
    measure_difference(tiny_bert_checkpoint, model, report)
    card = build_model_card(model, report, base_model="google-bert/bert-base-uncased")
    assert card.data.base_model == "google-bert/bert-base-uncased" and card.data.license == "unknown"
    assert {"gelu", "pre-ln"} <= set(card.data.tags)
    assert "**standard**" in card.text and "The conversion is **not exact**" in card.text
    diff = report.difference["last_hidden_state"]
    assert f"| `last_hidden_state` | {diff['max_abs_diff']:.4g} | {diff['mean_abs_diff']:.4g} | no |" in card.text
    assert "2× final_norm" in card.text  # the new weights, summarised


def test_a_folder_saved_from_a_head_names_every_auto_class(tmp_path):
    # transformers writes only the saving class's entry; without the others, AutoModel.from_pretrained(folder,
    # trust_remote_code=True) fails where hf_ffn is not installed ("Unrecognized configuration class").
    FfnBertForSequenceClassification(FfnBertConfig(**TINY, ffn_type="swiglu")).save_pretrained(tmp_path)
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map == AUTO_MAP
    assert auto_map["AutoModel"] == "modeling_ffn_bert.FfnBertModel"


def test_a_source_with_its_own_auto_map_converts_to_ffn_berts(tiny_bert_checkpoint, tmp_path):
    # A BERT checkpoint that ships remote code (`auto_map` naming its own classes): the converted folder is
    # FfnBert's, so every Auto class must name FfnBert's classes, the foreign ones included.
    source = tmp_path / "remote_code_bert"
    shutil.copytree(tiny_bert_checkpoint, source)
    config = json.loads((source / "config.json").read_text())
    config["auto_map"] = {
        "AutoConfig": "their_code.TheirConfig",
        "AutoModel": "their_code.TheirModel",
        "AutoModelForMaskedLM": "their_code.TheirMaskedLM",
    }
    (source / "config.json").write_text(json.dumps(config))
    report = convert_checkpoint(str(source), tmp_path / "swiglu", ffn_type="swiglu")
    assert json.loads((tmp_path / "swiglu" / "config.json").read_text())["auto_map"] == AUTO_MAP
    assert "auto_map" not in report.config_changes  # where the code lives, not what the model computes


def test_the_one_folder_writer_writes_report_extras_and_card_section_beside_given_weights(
    tiny_bert_checkpoint, tmp_path
):
    model, report = load_converted(tiny_bert_checkpoint, FfnBertModel, ffn_type="geglu")
    write_converted_folder(
        tmp_path / "plain",
        model,
        report,
        report_extra={"healing": {"steps": 3}},
        card_section="\n## Extra section\n",
        model_name="tiny-geglu",
    )
    assert EXPECTED_FILES <= set(os.listdir(tmp_path / "plain"))
    written = json.loads((tmp_path / "plain" / REPORT_FILE).read_text())
    assert written == {**report.to_dict(), "healing": {"steps": 3}}
    card = (tmp_path / "plain" / "README.md").read_text()
    assert "# tiny-geglu" in card and card.rstrip().endswith("## Extra section")
    # weights already written by someone else (a sentence-transformers backbone folder): report beside them
    backbone = tmp_path / "st" / "0_Transformer"
    backbone.mkdir(parents=True)
    write_converted_folder(tmp_path / "st", model, report, model_dir=backbone)
    assert sorted(os.listdir(tmp_path / "st")) == ["0_Transformer", "README.md"]
    assert os.listdir(backbone) == [REPORT_FILE]
