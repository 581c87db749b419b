"""The RoBERTa family through the commands and integrations beyond parity/convert/finetune/mlm: `hf-ffn compare`,
ONNX export, sentence-transformers and PEFT LoRA, each on tiny seeded random RoBERTa models written to tmp folders
(`roberta_checkpoint`: byte-level BPE tokenizer, padding_idx 1, 64 positions holding 62 tokens; from
tests/test_roberta_family.py). Where the ops are the same, `torch.equal`; ONNX within `ONNX_FP32_ATOL` (another
runtime's kernels; tests/conftest.py says why); merged LoRA within fp32 rounding (W + s·BA against Wx + s·B(Ax)).
"""

import json

import pytest
import torch
import transformers
from torch import nn
from transformers import RobertaForMaskedLM, RobertaForSequenceClassification

from hf_ffn import FfnRobertaConfig, FfnRobertaForSequenceClassification, FfnRobertaModel
from hf_ffn.cli import main
from hf_ffn.parity import quiet_transformers

from . import test_roberta_family
from .conftest import ONNX_FP32_ATOL
from .peft_checks import check_lora_adapter_loads_on_upstream, check_lora_trains_saves_and_loads
from .test_roberta_family import SENTENCES, TINY_ROBERTA, perturb_constants, roberta_batch
from .test_tasks import write_stsb

roberta_checkpoint = test_roberta_family.roberta_checkpoint  # its module fixture (a tokenizer's tiny RoBERTa), here

NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
TEXTS = [text for text, _ in SENTENCES]


def tokenized(folder) -> dict[str, torch.Tensor]:
    """`TEXTS` through the folder's own (RoBERTa) tokenizer, one padded batch."""
    return dict(transformers.AutoTokenizer.from_pretrained(folder)(TEXTS, padding=True, return_tensors="pt"))


# ---------------------------------------------------------------------------------------------------------------
# hf-ffn compare: converted, healed by hf-ffn heal against upstream's class, fine-tuned through `hf-ffn finetune`
# ---------------------------------------------------------------------------------------------------------------
def test_compare_on_a_roberta_checkpoint(roberta_checkpoint, tmp_path):
    data = tmp_path / "data"
    write_stsb(data / "stsb")
    output = tmp_path / "compare"
    argv = ["compare", "--model_name_or_path", roberta_checkpoint, "--data_dir", str(data), "--tasks", "stsb"]
    argv += ["--variants", "geglu", "swiglu-approx", "--seeds", "0", "--output_dir", str(output), "--smoke"]
    assert main([*argv, "--max_steps", "2"]) == 0
    # --smoke's 64 tokens capped at the 62 its positions hold (from padding_idx + 1): it ran instead of refusing
    assert json.loads((output / "settings.json").read_text())["finetuning"]["max_seq_length"] == 62
    runs = {r["variant"]: r for r in map(json.loads, (output / "runs.jsonl").read_text().splitlines())}
    assert list(runs) == ["gelu-post", "geglu", "swiglu-approx"]
    variants = output / "variants"
    assert runs["geglu"]["start"] == str(variants / "geglu" / "converted")  # exact: not healed
    assert runs["swiglu-approx"]["start"] == str(variants / "swiglu-approx" / "healed")
    batch = tokenized(roberta_checkpoint)
    with quiet_transformers(), torch.no_grad():
        expected = RobertaForMaskedLM.from_pretrained(roberta_checkpoint).eval()(**batch).logits
        for name in ("gelu-post", "geglu"):  # each exact start is FfnRoberta, upstream's function bit for bit
            report = json.loads((variants / name / "converted" / "conversion_report.json").read_text())
            assert report["exact"] is True and report["difference"]["reference"] == "transformers.RobertaForMaskedLM"
            start = transformers.AutoModelForMaskedLM.from_pretrained(runs[name]["start"]).eval()
            assert type(start).__name__ == "FfnRobertaForMaskedLM"
            assert torch.equal(start(**batch).logits, expected)
        healed = transformers.AutoModelForMaskedLM.from_pretrained(runs["swiglu-approx"]["start"]).eval()
        assert type(healed).__name__ == "FfnRobertaForMaskedLM" and healed.config.ffn_types == ["swiglu", "swiglu"]
    for r in runs.values():  # fine-tuned as hf-ffn finetune does a RoBERTa: RobertaClassificationHead, its tokenizer
        config = json.loads((output / "runs" / r["variant"] / "stsb" / "seed0" / "config.json").read_text())
        assert config["architectures"] == ["FfnRobertaForSequenceClassification"]
        assert r["score"] == pytest.approx(50 * (r["metrics"]["pearson"] + r["metrics"]["spearman"]))
    table = (output / "comparison.md").read_text()
    assert f"| stsb | gelu-post | 0 | {runs['gelu-post']['score']:.2f} | (baseline) |  |" in table


# ---------------------------------------------------------------------------------------------------------------
# ONNX export
# ---------------------------------------------------------------------------------------------------------------
def test_onnx_export_of_an_ffn_roberta(tmp_path):
    """One graph with a GELU Post-LN and a SwiGLU Pre-LN layer (so final_norm too): its inputs are RoBERTa's
    tokenizer's, and it matches PyTorch within `ONNX_FP32_ATOL` at shapes other than the traced one, pads included
    (measured: ~1e-6). Negative control: BERT's positions (0, 1, ...) in PyTorch move the outputs by far more, so the
    graph counts them from padding_idx + 1 as RoBERTa does."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from hf_ffn.export import export_onnx, model_example_inputs, onnx_max_abs_diff

    torch.manual_seed(0)
    config = FfnRobertaConfig(**TINY_ROBERTA, ffn_type=["gelu", "swiglu"], layer_norm_position=["post", "pre"])
    model = perturb_constants(FfnRobertaModel(config)).eval()
    path = export_onnx(model, tmp_path / "model.onnx")  # traced at batch 2, seq 8, through FfnRobertaModel.forward
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask"]
    for batch_size, seq_len in ((3, 11), (1, 5), (2, 62)):  # 62: every position the model has
        inputs = model_example_inputs(model, batch_size, seq_len, seed=1)
        assert inputs["input_ids"][-1, -1] == config.pad_token_id or batch_size == 1
        diffs = onnx_max_abs_diff(model, path, inputs)
        assert set(diffs) == {"last_hidden_state", "pooler_output"}
        assert max(diffs.values()) <= ONNX_FP32_ATOL, (batch_size, seq_len, diffs)
    inputs = model_example_inputs(model, 3, 11, seed=1)
    graph = session.run(["last_hidden_state"], {k: v.numpy() for k, v in inputs.items()})[0]
    zero_based = torch.arange(11).expand(3, 11)
    with torch.no_grad():
        shifted = model(**inputs, position_ids=zero_based).last_hidden_state
    assert (shifted - torch.from_numpy(graph)).abs().max().item() > 100 * ONNX_FP32_ATOL
    with pytest.raises(ValueError, match=r"seq_len=63 .* seq_len <= 62 \(max_position_embeddings, less padding_idx"):
        export_onnx(model, tmp_path / "long.onnx", seq_len=63)
    assert not (tmp_path / "long.onnx").exists()


# ---------------------------------------------------------------------------------------------------------------
# sentence-transformers
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def roberta_sentence_transformer(roberta_checkpoint, tmp_path_factory):
    """A sentence-transformers model over the tiny RoBERTa (Transformer + mean Pooling), saved; its embeddings."""
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.models import Pooling, Transformer

    folder = tmp_path_factory.mktemp("roberta_st") / "model"
    with quiet_transformers():
        backbone = Transformer(roberta_checkpoint)
        model = st.SentenceTransformer(modules=[backbone, Pooling(TINY_ROBERTA["hidden_size"], "mean")], device="cpu")
    model.save(str(folder))
    reloaded = st.SentenceTransformer(str(folder), device="cpu")
    assert type(reloaded[0].model).__name__ == "RobertaModel"
    return str(folder), reloaded.encode(TEXTS, convert_to_tensor=True, batch_size=len(TEXTS))


@pytest.mark.parametrize("conversion", [{}, {"ffn_type": "geglu"}], ids=["default", "geglu"])
def test_sentence_transformer_with_a_roberta_backbone_converts(roberta_sentence_transformer, tmp_path, conversion):
    """Default settings and GeGLU (an exact conversion): FfnRobertaModel behind the original Pooling, embeddings
    `torch.equal` to the upstream RobertaModel model's; the folder carries the conversion report."""
    import sentence_transformers as st

    from hf_ffn.sentence_transformers import convert_sentence_transformer

    source, expected = roberta_sentence_transformer
    report = convert_sentence_transformer(source, tmp_path / "out", **conversion)
    assert report.exact and report.difference["reference"] == "transformers.RobertaModel"
    converted = st.SentenceTransformer(str(tmp_path / "out"), device="cpu")
    assert type(converted[0].model) is FfnRobertaModel
    assert converted[0].model.config.ffn_types == [conversion.get("ffn_type", "gelu")] * 2
    assert [type(m).__name__ for m in converted] == ["Transformer", "Pooling"]
    assert json.loads((tmp_path / "out" / "conversion_report.json").read_text())["exact"] is True
    embeddings = converted.encode(TEXTS, convert_to_tensor=True, batch_size=len(TEXTS))
    assert torch.equal(embeddings, expected)


def test_sentence_transformer_roberta_swiglu_is_approximate_and_convert_command_takes_it(
    roberta_sentence_transformer, tmp_path, capsys
):
    """`hf-ffn convert` on the folder (modules.json): SwiGLU ≈ GELU (GELU(z) ≈ z·σ(1.702 z)), not equal, close."""
    import sentence_transformers as st

    source, expected = roberta_sentence_transformer
    assert main(["convert", source, str(tmp_path / "swiglu"), "--ffn_type", "swiglu"]) == 0
    assert "sentence-transformers model: converted the backbone" in capsys.readouterr().out
    embeddings = st.SentenceTransformer(str(tmp_path / "swiglu"), device="cpu").encode(
        TEXTS, convert_to_tensor=True, batch_size=len(TEXTS)
    )
    cosine = nn.functional.cosine_similarity(embeddings, expected, dim=-1)
    assert not torch.equal(embeddings, expected) and cosine.min().item() > 0.99, cosine


def test_sentence_transformer_roberta_pruned_conversion(roberta_sentence_transformer, tmp_path):
    """`--init pruned` (its teacher is the source's family's base model: it loaded as FfnBert and failed): SwiGLU at
    24 of 37 units, each layer's down projection refitted on the calibration text."""
    import sentence_transformers as st

    source, expected = roberta_sentence_transformer
    (tmp_path / "calibration.txt").write_text("\n".join(TEXTS * 10) + "\n")
    argv = ["convert", source, str(tmp_path / "pruned"), "--ffn_type", "swiglu", "--init", "pruned", "--width", "24"]
    argv += ["--calibration_files", str(tmp_path / "calibration.txt"), "--calibration_block", "16"]
    assert main(argv) == 0
    report = json.loads((tmp_path / "pruned" / "conversion_report.json").read_text())
    assert report["init"] == "pruned" and report["config_changes"]["intermediate_size"] == [37, 24]
    model = st.SentenceTransformer(str(tmp_path / "pruned"), device="cpu")
    assert type(model[0].model) is FfnRobertaModel
    assert model[0].model.encoder.layer[1].mlp.gate_proj.weight.shape == (24, TINY_ROBERTA["hidden_size"])
    embeddings = model.encode(TEXTS, convert_to_tensor=True, batch_size=len(TEXTS))
    cosine = nn.functional.cosine_similarity(embeddings, expected, dim=-1)
    assert not torch.equal(embeddings, expected) and cosine.min().item() > 0.9, cosine


# ---------------------------------------------------------------------------------------------------------------
# PEFT LoRA on an FfnRoberta model: BERT's target names (query/value, the FFN's projections)
# ---------------------------------------------------------------------------------------------------------------
def test_lora_on_ffn_roberta_trains_saves_and_loads(tmp_path):
    torch.manual_seed(0)
    config = FfnRobertaConfig(**TINY_ROBERTA, **NO_DROPOUT, ffn_type="swiglu", num_labels=2)
    perturb_constants(FfnRobertaForSequenceClassification(config)).save_pretrained(tmp_path / "base")
    check_lora_trains_saves_and_loads(
        FfnRobertaForSequenceClassification, tmp_path / "base", roberta_batch(), "roberta", tmp_path
    )


def test_lora_adapter_of_a_default_ffn_roberta_loads_on_upstream_roberta(tmp_path):
    """query/value adapters are named as upstream's: an adapter trained on a default-config FfnRoberta loads on
    upstream RobertaForSequenceClassification (same base folder) to the same logits, bit for bit."""
    torch.manual_seed(1)
    config = FfnRobertaConfig(**TINY_ROBERTA, **NO_DROPOUT, num_labels=2)
    perturb_constants(FfnRobertaForSequenceClassification(config)).save_pretrained(tmp_path / "base")
    check_lora_adapter_loads_on_upstream(
        FfnRobertaForSequenceClassification, RobertaForSequenceClassification, tmp_path / "base", roberta_batch(),
        tmp_path,
    )  # fmt: skip
