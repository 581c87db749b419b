"""ELECTRA through the commands (issue 57, item 3): the whole workflow convert → heal (a few steps, the teacher
upstream's `Electra*` class) → finetune (a few steps), `hf-ffn heal` end to end and padding-free, `hf-ffn compare`,
ONNX export, sentence-transformers, PEFT LoRA, `hf-ffn mlm` from a generator and the cards, on the tiny seeded ELECTRA
discriminator of tests/test_electra_family.py (`electra_checkpoint`: embedding_size 19 projected to hidden 32 by
`embeddings_project`, a WordPiece vocabulary of its sentences) and a generator of the same shapes. Where the ops are
the same, `torch.equal`; ONNX within `ONNX_FP32_ATOL` (another runtime's kernels; tests/conftest.py says why); merged
LoRA within fp32 rounding (W + s·BA against Wx + s·B(Ax)).
"""

import json
import random

import pytest
import torch
import transformers
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from torch import nn
from transformers import ElectraConfig, ElectraForMaskedLM, ElectraForPreTraining, ElectraForSequenceClassification

from hf_ffn import FfnElectraConfig, FfnElectraForSequenceClassification, FfnElectraModel
from hf_ffn.cli import main
from hf_ffn.conversion import convert_checkpoint
from hf_ffn.healing import HealArguments, LayerwiseArguments, run_healing
from hf_ffn.healing.layerwise import encoder_input
from hf_ffn.logging_utils import quiet_transformers

from . import test_electra_family
from .conftest import ONNX_FP32_ATOL
from .peft_checks import check_lora_adapter_loads_on_upstream, check_lora_trains_saves_and_loads
from .test_electra_family import SENTENCES, SIZES, electra_batch, perturb_constants
from .test_tasks import write_stsb
from .workflow_checks import finetune_three_steps

electra_checkpoint = test_electra_family.electra_checkpoint  # its module fixture (embedding 19 → hidden 32), here

TEXTS = [text for text, _ in SENTENCES]
PROJECTION = ("electra.embeddings_project.weight", "electra.embeddings_project.bias")


def texts(folder, words: int = 2000):
    """Seeded text of the checkpoint's words (a.txt) and held-out labelled snippets (one file per label)."""
    rng = random.Random(0)
    vocabulary = " ".join(TEXTS).split()
    folder.mkdir()
    (folder / "a.txt").write_text(" ".join(rng.choices(vocabulary, k=words)) + "\n")
    snippets = folder.parent / "snippets"
    snippets.mkdir()
    for label in ("pos", "neg"):
        (snippets / f"{label}.txt").write_text("\n".join(t for t, lab in SENTENCES * 3 if lab == label) + "\n")
    return folder, snippets


def training(output_dir, steps: int = 3) -> transformers.TrainingArguments:
    return transformers.TrainingArguments(
        output_dir=str(output_dir), max_steps=steps, per_device_train_batch_size=4, learning_rate=1e-3,
        save_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# convert → heal → finetune
# ---------------------------------------------------------------------------------------------------------------
def test_convert_heal_finetune_an_electra_checkpoint(electra_checkpoint, tmp_path):
    text, snippets = texts(tmp_path / "text")
    student = tmp_path / "pre"
    report = convert_checkpoint(electra_checkpoint, student, layer_norm_position="pre")
    assert report.difference["reference"] == "transformers.ElectraForPreTraining"
    args = HealArguments(
        student=str(student), train_files=[str(text)], eval_data=str(snippets), max_seq_length=32, probe=False
    )
    layerwise = LayerwiseArguments(layerwise_tokens=2048, layerwise_steps=20)
    healing = run_healing(args, training(tmp_path / "heal"), layerwise_args=layerwise)
    before, after = healing["before"]["agreement"], healing["after"]["agreement"]
    # measured: cosine 0.803 → 0.998 (layer-wise fits of both layers, then 3 end-to-end steps)
    assert 1 - after["cosine_mean"] < 0.1 * (1 - before["cosine_mean"]), (before, after)
    assert healing["teacher"] == electra_checkpoint and healing["steps"] == 3
    fits = healing["layerwise"]["layers"]  # each layer fitted from the projected embeddings (hidden 32, not 19)
    # measured: relative squared error 0.184 → 0.014 (layer 0), 0.277 → 0.028 (layer 1, through final_norm)
    assert len(fits) == 2 and all(f["layer_rel_error"] < 0.2 * f["layer_rel_error_before"] for f in fits), fits
    with quiet_transformers():
        healed, info = transformers.AutoModelForPreTraining.from_pretrained(
            healing["healed_dir"], output_loading_info=True
        )
    assert type(healed).__name__ == "FfnElectraForPreTraining" and healed.config.layer_norm_positions == ["pre"] * 2
    assert not info["missing_keys"] and not info["unexpected_keys"]
    source = load_file(f"{electra_checkpoint}/model.safetensors")
    saved = load_file(f"{healing['healed_dir']}/model.safetensors")
    for name in PROJECTION:  # the embeddings (and their projection) stay the teacher's: --train_parts encoder
        assert torch.equal(saved[name], source[name]), name
    card = ModelCard.load(f"{healing['healed_dir']}/README.md")
    assert {"ffn_electra", "electra"} <= set(card.data.tags) and "bert" not in card.data.tags
    assert "into an ELECTRA with" in card.text and "`transformers.ElectraForPreTraining`" in card.text

    tuned = finetune_three_steps(healing["healed_dir"], tmp_path / "tuned", SENTENCES)
    assert type(tuned).__name__ == "FfnElectraForSequenceClassification"
    assert tuned.config.layer_norm_positions == ["pre", "pre"] and tuned.config.embedding_size == 19
    encoder = healed.electra.state_dict()
    changed = [k for k, v in tuned.electra.state_dict().items() if k in encoder and not torch.equal(v, encoder[k])]
    assert changed, "fine-tuning started from the healed encoder and trained it"
    card = ModelCard.load(tmp_path / "tuned" / "README.md")  # the fine-tuned card names ELECTRA too, not BERT
    assert card.data.tags[:3] == ["hf_ffn", "ffn_electra", "electra"] and "ffn_bert" not in card.data.tags
    text = card.text
    assert f"from `{healing['healed_dir']}` (an ELECTRA checkpoint)" in text
    assert "upstream ELECTRA's: embeddings, `embeddings_project`, self-attention and heads\n  (`transformers" in text
    assert "this head's upstream class: `transformers.ElectraForSequenceClassification`" in text
    assert "registers the `ffn_electra` model type" in text
    assert "the tokenizer is ELECTRA's own\n(`BertTokenizer`)" in text  # transformers maps ELECTRA to BERT's tokenizer
    assert "BERT" not in text


def test_the_layerwise_fit_starts_from_the_projected_embeddings():
    """`encoder_input` is what the encoder reads: `hidden_states[0]`, bit for bit, (batch, seq, hidden) after
    `embeddings_project`; the embeddings alone are 19 wide and would not enter a 32-wide layer."""
    torch.manual_seed(0)
    model = perturb_constants(FfnElectraModel(FfnElectraConfig(**SIZES["projected"]))).eval()
    ids = electra_batch()["input_ids"]
    with torch.no_grad():
        expected = model(input_ids=ids, output_hidden_states=True).hidden_states[0]
        got = encoder_input(model, ids)
        assert torch.equal(got, expected) and got.shape == (3, 7, 32)
        assert model.embeddings(input_ids=ids).shape == (3, 7, 19)  # the negative control: unprojected


def test_heal_an_electra_end_to_end_and_padding_free(electra_checkpoint, tmp_path):
    """`--method end_to_end` with padding-free batches (ELECTRA's positions count from 0, as the collator gives them;
    the teacher runs as FfnElectra, which keeps the blocks apart): 3 steps move the student towards the teacher."""
    text, snippets = texts(tmp_path / "text")
    convert_checkpoint(electra_checkpoint, tmp_path / "pre", layer_norm_position="pre")
    args = HealArguments(
        student=str(tmp_path / "pre"), train_files=[str(text)], eval_data=str(snippets), max_seq_length=32,
        probe=False, method="end_to_end", padding_free=True,
    )  # fmt: skip
    healing = run_healing(args, training(tmp_path / "heal"))
    before, after = healing["before"]["agreement"], healing["after"]["agreement"]
    # measured: cosine 0.803 → 0.893 in 3 steps
    assert 1 - after["cosine_mean"] < 0.7 * (1 - before["cosine_mean"]), (before, after)
    assert healing["steps"] == 3 and healing["layerwise"] is None


def test_heal_train_parts_all_counts_only_what_the_loss_reaches(electra_checkpoint, tmp_path):
    """`--train_parts all` on an ELECTRA discriminator: `trainable_parameters` is the base model's (embeddings,
    `embeddings_project`, encoder), not the discriminator head the hidden-state loss never reaches (it once counted
    it); that head is saved as it was, while the embeddings trained."""
    text, snippets = texts(tmp_path / "text")
    convert_checkpoint(electra_checkpoint, tmp_path / "pre", layer_norm_position="pre")
    args = HealArguments(
        student=str(tmp_path / "pre"), train_files=[str(text)], eval_data=str(snippets), max_seq_length=32,
        probe=False, method="end_to_end", train_parts="all",
    )  # fmt: skip
    healing = run_healing(args, training(tmp_path / "heal", steps=2))
    with quiet_transformers():
        student = transformers.AutoModelForPreTraining.from_pretrained(tmp_path / "pre")
    base = sum(p.numel() for n, p in student.named_parameters() if n.startswith("electra."))
    head = sum(p.numel() for n, p in student.named_parameters() if n.startswith("discriminator_predictions."))
    assert head == 32 * 32 + 32 + 32 + 1 and healing["trainable_parameters"] == base, (healing, base, head)
    source, saved = (
        load_file(f"{tmp_path}/pre/model.safetensors"),
        load_file(f"{healing['healed_dir']}/model.safetensors"),
    )
    for name in ("discriminator_predictions.dense.weight", "discriminator_predictions.dense_prediction.weight"):
        assert torch.equal(saved[name], source[name]), name
    for name in (*PROJECTION, "electra.embeddings.word_embeddings.weight"):
        assert not torch.equal(saved[name], source[name]), name


def test_heal_refuses_what_an_electra_student_cannot_do(electra_checkpoint, tmp_path):
    from hf_ffn.parity import bundled_checkpoint

    text, _ = texts(tmp_path / "text")
    convert_checkpoint(electra_checkpoint, tmp_path / "pre", layer_norm_position="pre")
    train = training(tmp_path / "heal")
    other = HealArguments(student=str(tmp_path / "pre"), teacher=bundled_checkpoint(), train_files=[str(text)])
    with pytest.raises(ValueError, match=r"is a ffn_electra folder, --teacher .* of the bert family; distillation"):
        run_healing(other, train)
    kl = HealArguments(student=str(tmp_path / "pre"), train_files=[str(text)], mlm_kl_weight=1.0, max_seq_length=32)
    with pytest.raises(ValueError, match=r"needs an MLM head on the student; .* is a FfnElectraForPreTraining \(all"):
        run_healing(kl, train)  # a discriminator has no MLM head (ELECTRA's generator has: FfnElectraForMaskedLM)
    long = HealArguments(student=str(tmp_path / "pre"), train_files=[str(text)], max_seq_length=65)
    with pytest.raises(ValueError, match=r"--max_seq_length 65: a sequence of --student .* holds at most 64 tokens"):
        run_healing(long, train)  # positions from 0: all 64 hold a token


def test_to_bert_of_an_electra_folder_says_which_commands_take_it(electra_checkpoint, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", electra_checkpoint, str(tmp_path / "bert"), "--to_bert"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "model_type='electra'; FfnBert loads BERT-shaped checkpoints only (allowed: bert, ffn_bert)" in error
    assert "an ELECTRA checkpoint loads into FfnElectraConfig / FfnElectra*, which every hf-ffn command takes" in error
    assert not (tmp_path / "bert").exists()


# ---------------------------------------------------------------------------------------------------------------
# hf-ffn compare: converted, healed by hf-ffn heal against ElectraForPreTraining, fine-tuned as hf-ffn finetune does
# ---------------------------------------------------------------------------------------------------------------
def test_compare_on_an_electra_checkpoint(electra_checkpoint, tmp_path):
    data = tmp_path / "data"
    write_stsb(data / "stsb")
    output = tmp_path / "compare"
    argv = ["compare", "--model_name_or_path", electra_checkpoint, "--data_dir", str(data), "--tasks", "stsb"]
    argv += ["--variants", "geglu", "swiglu-approx", "--seeds", "0", "--output_dir", str(output), "--smoke"]
    assert main([*argv, "--max_steps", "2"]) == 0
    # positions from 0: --smoke's 64 tokens fit the 64 positions
    assert json.loads((output / "settings.json").read_text())["finetuning"]["max_seq_length"] == 64
    runs = {r["variant"]: r for r in map(json.loads, (output / "runs.jsonl").read_text().splitlines())}
    assert list(runs) == ["gelu-post", "geglu", "swiglu-approx"]
    variants = output / "variants"
    assert runs["geglu"]["start"] == str(variants / "geglu" / "converted")  # exact: not healed
    assert runs["swiglu-approx"]["start"] == str(variants / "swiglu-approx" / "healed")
    tokenizer = transformers.AutoTokenizer.from_pretrained(electra_checkpoint)
    batch = dict(tokenizer(TEXTS, padding=True, return_tensors="pt"))
    with quiet_transformers(), torch.no_grad():
        expected = ElectraForPreTraining.from_pretrained(electra_checkpoint).eval()(**batch).logits
        for name in ("gelu-post", "geglu"):  # each exact start is FfnElectra, upstream's function bit for bit
            report = json.loads((variants / name / "converted" / "conversion_report.json").read_text())
            assert report["exact"] is True
            assert report["difference"]["reference"] == "transformers.ElectraForPreTraining"
            start = transformers.AutoModelForPreTraining.from_pretrained(runs[name]["start"]).eval()
            assert type(start).__name__ == "FfnElectraForPreTraining"
            assert torch.equal(start(**batch).logits, expected)
        healed = transformers.AutoModelForPreTraining.from_pretrained(runs["swiglu-approx"]["start"]).eval()
        assert type(healed).__name__ == "FfnElectraForPreTraining" and healed.config.ffn_types == ["swiglu"] * 2
        healing = json.loads((variants / "swiglu-approx" / "healing" / "healing.json").read_text())
        fits = healing["layerwise"]["layers"]  # the layer-wise fit ran on the ELECTRA (teacher ElectraForPreTraining)
        assert healing["teacher"] == electra_checkpoint and len(fits) == 2
        assert all(f["ffn_rel_error"] < f["ffn_rel_error_before"] for f in fits), fits
    for r in runs.values():  # fine-tuned as hf-ffn finetune does an ELECTRA: ElectraClassificationHead
        config = json.loads((output / "runs" / r["variant"] / "stsb" / "seed0" / "config.json").read_text())
        assert config["architectures"] == ["FfnElectraForSequenceClassification"]
        assert r["score"] == pytest.approx(50 * (r["metrics"]["pearson"] + r["metrics"]["spearman"]))


# ---------------------------------------------------------------------------------------------------------------
# ONNX export
# ---------------------------------------------------------------------------------------------------------------
def test_onnx_export_of_an_ffn_electra(tmp_path):
    """One graph with a GELU Post-LN and a SwiGLU Pre-LN layer over projected embeddings (19 → 32): BERT's three
    inputs (ELECTRA's tokenizer is BERT's), within `ONNX_FP32_ATOL` of PyTorch at shapes other than the traced one,
    pads included. Negative control: the graph reads `token_type_ids` (zeroing them moves the outputs by far more)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    import onnxruntime

    from hf_ffn.export import export_onnx, model_example_inputs, onnx_max_abs_diff

    torch.manual_seed(0)
    config = FfnElectraConfig(**SIZES["projected"], ffn_type=["gelu", "swiglu"], layer_norm_position=["post", "pre"])
    model = perturb_constants(FfnElectraModel(config)).eval()
    path = export_onnx(model, tmp_path / "model.onnx")  # traced at batch 2, seq 8
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask", "token_type_ids"]
    for batch_size, seq_len in ((3, 11), (1, 5), (2, 64)):  # 64: every position the model has
        inputs = model_example_inputs(model, batch_size, seq_len, seed=1)
        diffs = onnx_max_abs_diff(model, path, inputs)
        assert set(diffs) == {"last_hidden_state"}  # no pooler
        assert max(diffs.values()) <= ONNX_FP32_ATOL, (batch_size, seq_len, diffs)
    inputs = model_example_inputs(model, 3, 11, seed=1)
    graph = session.run(["last_hidden_state"], {k: v.numpy() for k, v in inputs.items()})[0]
    assert graph.shape == (3, 11, 32)
    with torch.no_grad():
        one_segment = model(**{**inputs, "token_type_ids": torch.zeros_like(inputs["token_type_ids"])})
    assert (one_segment.last_hidden_state - torch.from_numpy(graph)).abs().max().item() > 100 * ONNX_FP32_ATOL
    with pytest.raises(ValueError, match=r"seq_len=65 .* seq_len <= 64 \(max_position_embeddings\)"):
        export_onnx(model, tmp_path / "long.onnx", seq_len=65)


# ---------------------------------------------------------------------------------------------------------------
# sentence-transformers
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def electra_sentence_transformer(electra_checkpoint, tmp_path_factory):
    """A sentence-transformers model over the tiny ELECTRA (Transformer + mean Pooling), saved; its embeddings."""
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.models import Pooling, Transformer

    folder = tmp_path_factory.mktemp("electra_st") / "model"
    with quiet_transformers():
        backbone = Transformer(electra_checkpoint)
        model = st.SentenceTransformer(modules=[backbone, Pooling(SIZES["projected"]["hidden_size"], "mean")])
    model.save(str(folder))
    reloaded = st.SentenceTransformer(str(folder), device="cpu")
    assert type(reloaded[0].model).__name__ == "ElectraModel"
    return str(folder), reloaded.encode(TEXTS, convert_to_tensor=True, batch_size=len(TEXTS))


@pytest.mark.parametrize("conversion", [{}, {"ffn_type": "geglu"}], ids=["default", "geglu"])
def test_sentence_transformer_with_an_electra_backbone_converts(electra_sentence_transformer, tmp_path, conversion):
    """Default settings and GeGLU (exact): FfnElectraModel (with its embeddings_project) behind the original Pooling,
    embeddings `torch.equal` to the upstream ElectraModel model's; the folder carries the report and a card naming
    ELECTRA."""
    import sentence_transformers as st

    from hf_ffn.sentence_transformers import convert_sentence_transformer

    source, expected = electra_sentence_transformer
    report = convert_sentence_transformer(source, tmp_path / "out", **conversion)
    assert report.exact and report.difference["reference"] == "transformers.ElectraModel"
    converted = st.SentenceTransformer(str(tmp_path / "out"), device="cpu")
    assert type(converted[0].model) is FfnElectraModel
    assert converted[0].model.embeddings_project.in_features == 19
    assert converted[0].model.config.ffn_types == [conversion.get("ffn_type", "gelu")] * 2
    assert [type(m).__name__ for m in converted] == ["Transformer", "Pooling"]
    assert "electra" in ModelCard.load(tmp_path / "out" / "README.md").data.tags
    embeddings = converted.encode(TEXTS, convert_to_tensor=True, batch_size=len(TEXTS))
    assert torch.equal(embeddings, expected)


def test_sentence_transformer_electra_swiglu_is_approximate(electra_sentence_transformer, tmp_path, capsys):
    """`hf-ffn convert` on the folder (modules.json): SwiGLU ≈ GELU, not equal, close."""
    import sentence_transformers as st

    source, expected = electra_sentence_transformer
    assert main(["convert", source, str(tmp_path / "swiglu"), "--ffn_type", "swiglu"]) == 0
    assert "sentence-transformers model: converted the backbone" in capsys.readouterr().out
    embeddings = st.SentenceTransformer(str(tmp_path / "swiglu"), device="cpu").encode(
        TEXTS, convert_to_tensor=True, batch_size=len(TEXTS)
    )
    cosine = nn.functional.cosine_similarity(embeddings, expected, dim=-1)
    assert not torch.equal(embeddings, expected) and cosine.min().item() > 0.99, cosine


# ---------------------------------------------------------------------------------------------------------------
# The converted folder's card names its family
# ---------------------------------------------------------------------------------------------------------------
def test_a_converted_electra_folder_card_names_electra(electra_checkpoint, tmp_path):
    assert main(["convert", electra_checkpoint, str(tmp_path / "geglu"), "--ffn_type", "geglu"]) == 0
    card = ModelCard.load(tmp_path / "geglu" / "README.md")
    assert card.data.tags[:3] == ["hf_ffn", "ffn_electra", "electra"] and "bert" not in card.data.tags
    text = card.text
    assert "converted with hf_ffn into an ELECTRA whose feed-forward network is **gated**" in text
    assert "Everything else is upstream ELECTRA's:\nembeddings, `embeddings_project`, self-attention and heads" in text
    assert "(`transformers.models.electra`; this head's upstream class: `transformers.ElectraForPreTraining`)" in text
    assert "registers the `ffn_electra` model type" in text and "`modeling_ffn_electra.py`" in text
    assert "from transformers import AutoModelForPreTraining" in text and "BERT" not in text
    assert ElectraConfig.from_pretrained(electra_checkpoint).embedding_size == 19


# ---------------------------------------------------------------------------------------------------------------
# PEFT LoRA on an FfnElectra model: BERT's target names (query/value, the FFN's projections)
# ---------------------------------------------------------------------------------------------------------------
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def test_lora_on_ffn_electra_trains_saves_and_loads(tmp_path):
    """A SwiGLU FfnElectra classifier over projected embeddings (19 → 32): LoRA wraps exactly the attention's query /
    value and the FFN's three projections (not `embeddings_project`, not the classifier), trains only the adapters,
    and the saved adapter reloads on the base folder to the same logits, bit for bit."""
    torch.manual_seed(0)
    config = FfnElectraConfig(**SIZES["projected"], **NO_DROPOUT, ffn_type="swiglu", num_labels=2)
    perturb_constants(FfnElectraForSequenceClassification(config)).save_pretrained(tmp_path / "base")
    model = check_lora_trains_saves_and_loads(
        FfnElectraForSequenceClassification, tmp_path / "base", electra_batch(), "electra", tmp_path
    )
    assert not model.get_parameter("base_model.model.electra.embeddings_project.weight").requires_grad


def test_lora_adapter_of_a_default_ffn_electra_loads_on_upstream_electra(tmp_path):
    """query/value adapters are named as upstream's: an adapter trained on a default-config FfnElectra loads on
    upstream ElectraForSequenceClassification (same base folder) to the same logits, bit for bit."""
    torch.manual_seed(1)
    config = FfnElectraConfig(**SIZES["projected"], **NO_DROPOUT, num_labels=2)
    perturb_constants(FfnElectraForSequenceClassification(config)).save_pretrained(tmp_path / "base")
    check_lora_adapter_loads_on_upstream(
        FfnElectraForSequenceClassification, ElectraForSequenceClassification, tmp_path / "base", electra_batch(),
        tmp_path,
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# hf-ffn mlm: continued pre-training from an ELECTRA generator (ElectraForMaskedLM)
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def electra_generator(tmp_path_factory) -> str:
    """A tiny ELECTRA generator folder (upstream ElectraForMaskedLM: embedding 19 → hidden 32, the generator head back
    to 19 and `generator_lm_head` tied to the word embeddings) with the discriminator's WordPiece vocabulary."""
    folder = tmp_path_factory.mktemp("electra_generator")
    words = sorted({word for text, _ in SENTENCES for word in text.split()})
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tokenizer = transformers.BertTokenizer(vocab=str(folder / "vocab.txt"))
    torch.manual_seed(0)
    config = ElectraConfig(**{**SIZES["projected"], "vocab_size": len(tokenizer)})
    perturb_constants(ElectraForMaskedLM(config)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_mlm_continues_pretraining_an_electra_generator(electra_generator, tmp_path):
    """`hf-ffn mlm --model_name_or_path GENERATOR`: FfnElectraForMaskedLM with the generator's own head and WordPiece
    tokenizer trains 2 steps; the saved folder is FfnElectra's, loads in upstream's ElectraForMaskedLM (no weight
    missing or unexpected) to the same logits, which moved; its card names ELECTRA."""
    texts = [" ".join(text for text, _ in SENTENCES[i:] + SENTENCES[:i]) for i in range(len(SENTENCES))] * 3
    (tmp_path / "train.txt").write_text("\n\n".join(texts) + "\n")
    argv = ["mlm", "--model_name_or_path", electra_generator, "--train_files", str(tmp_path / "train.txt")]
    argv += ["--max_steps", "2", "--max_seq_length", "16", "--per_device_train_batch_size", "4", "--report_to", "none"]
    assert main([*argv, "--output_dir", str(tmp_path / "out"), "--use_cpu", "true"]) == 0
    run_info = json.loads((tmp_path / "out" / "run_info.json").read_text())
    # the generator's head decodes every position; it was loaded, not newly initialised
    assert run_info["sparse_prediction"] is False and run_info["mlm_head"] == "from the checkpoint"
    assert run_info["conversion"]["new_weights"] == []
    with quiet_transformers():
        ours = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "out").eval()
        theirs, info = ElectraForMaskedLM.from_pretrained(tmp_path / "out", output_loading_info=True)
        before = ElectraForMaskedLM.from_pretrained(electra_generator).eval()
    assert type(ours).__name__ == "FfnElectraForMaskedLM" and ours.config.embedding_size == 19
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    batch = tokenizer(["a fine warm film", "too dull"], padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = ours(**batch).logits
        assert logits.shape == (2, batch["input_ids"].shape[1], len(tokenizer))
        assert torch.equal(logits, theirs.eval()(**batch).logits)
        assert not torch.equal(logits, before(**batch).logits)  # it trained
    card = ModelCard.load(tmp_path / "out" / "README.md")
    assert card.data.tags == ["hf_ffn", "ffn_electra", "electra", "gelu", "fill-mask"]
    assert f"from `{electra_generator}` (an ELECTRA checkpoint)" in card.text
    assert "this head's upstream class: `transformers.ElectraForMaskedLM`" in card.text
