"""Fine-tuning compatibility: Trainer, gradient checkpointing, PEFT LoRA, pipelines, the data loaders, bad input
and the classification script. Tiny models and tiny data written by the tests; a few optimizer steps each."""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import math
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from torch import nn
from transformers import AutoTokenizer, Trainer, TrainingArguments, pipeline
from transformers.utils import logging as hf_logging

from hf_ffn import FfnBertForMaskedLM, FfnBertForSequenceClassification, FfnBertModel, modeling_ffn_bert
from hf_ffn.checkpoints import check_checkpoint
from hf_ffn.finetune.arguments import ClassificationDataArguments
from hf_ffn.finetune.readers import load_label_files, parse_split_sizes, read_labelled_texts, read_table
from hf_ffn.training.arguments import ModelArguments, resume_checkpoint
from hf_ffn.training.blocks import masking_collator, mlm_blocks
from hf_ffn.training.outputs import STAGING_FOLDER, save_finished
from hf_ffn.training.readers import read_label_files, read_text_documents

from .conftest import tiny_config

REPO = Path(__file__).resolve().parents[1]
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
VARIANTS = [{}, {"ffn_type": "swiglu", "layer_norm_position": "pre"}]
VARIANT_IDS = ["gelu-post", "swiglu-pre"]
POSITIVE = ["good", "great", "fine", "nice", "happy"]
NEGATIVE = ["bad", "awful", "poor", "sad", "dull"]


@pytest.fixture(autouse=True)
def quiet_transformers():
    hf_logging.set_verbosity_error()
    yield
    hf_logging.set_verbosity_warning()


def training_args(output_dir: Path, **overrides) -> TrainingArguments:
    defaults = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=8,
        per_device_eval_batch_size=16,
        learning_rate=1e-2,
        max_steps=6,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        logging_steps=1,
        seed=0,
        use_cpu=True,
    )
    return TrainingArguments(**{**defaults, **overrides})


def token_dataset(n: int = 32, seed: int = 0) -> Dataset:
    """Label 1 iff the first token after [CLS] is below 50: learnable in a few steps by a tiny model."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 99, (n, 6), generator=g)
    ids[:, 0] = 2  # a [CLS]-like first token
    labels = (ids[:, 1] < 50).long()
    return Dataset.from_dict(
        {"input_ids": ids.tolist(), "attention_mask": torch.ones_like(ids).tolist(), "labels": labels.tolist()}
    )


# ---------------------------------------------------------------------------------------------------------------
# Trainer
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_IDS)
def test_trainer_eval_loss_and_loss_decreases(variant, tmp_path):
    torch.manual_seed(0)
    model = FfnBertForSequenceClassification(tiny_config(num_labels=2, **NO_DROPOUT, **variant))
    data = token_dataset()
    # one batch = the whole dataset, so every step sees the same examples and the loss can only go down
    args = training_args(tmp_path, max_steps=10, per_device_train_batch_size=len(data))
    trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=data)
    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    # `labels` is in the forward signature, so Trainer computes the loss on evaluation
    assert "eval_loss" in before and "eval_loss" in after
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 10
    assert losses[0] == pytest.approx(before["eval_loss"], rel=1e-5)  # no dropout: train loss = eval loss
    assert losses[-1] < 0.85 * losses[0] and after["eval_loss"] < 0.85 * before["eval_loss"], losses


def test_resume_from_checkpoint_folder_matches_uninterrupted_run(tmp_path):
    def make_trainer(output_dir: Path) -> Trainer:
        torch.manual_seed(0)
        model = FfnBertForSequenceClassification(tiny_config(num_labels=2, ffn_type="geglu", **NO_DROPOUT))
        args = training_args(output_dir, max_steps=4, save_strategy="steps", save_steps=2)
        return Trainer(model=model, args=args, train_dataset=token_dataset())

    straight = make_trainer(tmp_path / "straight")
    straight.train()
    resumed = make_trainer(tmp_path / "resumed")  # a fresh model: everything must come from the folder
    checkpoint = tmp_path / "straight" / "checkpoint-2"
    assert json.loads((checkpoint / "config.json").read_text())["model_type"] == "ffn_bert"
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.state.global_step == 4
    for (name, p_straight), p_resumed in zip(
        straight.model.named_parameters(), resumed.model.parameters(), strict=False
    ):
        # the same ops on the same data in the same order, weights and optimizer state restored exactly from disk
        assert torch.equal(p_straight, p_resumed), name


# ---------------------------------------------------------------------------------------------------------------
# Gradient checkpointing
# ---------------------------------------------------------------------------------------------------------------
def loss_and_grads(model: nn.Module, batch: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    loss = model(**batch).loss
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


@pytest.mark.parametrize("use_reentrant", [False, True])
@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_IDS)
def test_gradient_checkpointing_same_loss_and_grads(variant, use_reentrant):
    torch.manual_seed(0)
    model = FfnBertForSequenceClassification(tiny_config(num_labels=2, **NO_DROPOUT, **variant)).train()
    batch = token_dataset(n=8)[:]
    batch = {key: torch.tensor(value) for key, value in batch.items()}
    loss_off, grads_off = loss_and_grads(model, batch)
    # what Trainer enables for `gradient_checkpointing=True`
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": use_reentrant})
    loss_on, grads_on = loss_and_grads(model, batch)
    # Recomputation repeats the forward ops exactly (no dropout), so the loss is equal; gradients go through the
    # same ops but autograd may sum contributions in another order: fp32 reassociation, |Δ| ≲ 1e-6 at these sizes.
    assert torch.equal(loss_on, loss_off)
    assert grads_on.keys() == grads_off.keys()
    assert len(grads_off) == sum(1 for _ in model.parameters())
    for name in grads_off:
        torch.testing.assert_close(grads_on[name], grads_off[name], rtol=1e-5, atol=1e-6, msg=name)


# ---------------------------------------------------------------------------------------------------------------
# PEFT LoRA
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ffn_type, targets", [("swiglu", ["gate_proj", "up_proj", "down_proj"]), ("gelu", ["up_proj", "down_proj"])]
)
def test_lora_on_ffn_projections(ffn_type, targets):
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import Linear as LoraLinear

    torch.manual_seed(0)
    base = FfnBertForSequenceClassification(tiny_config(num_labels=2, ffn_type=ffn_type, **NO_DROPOUT))
    batch = {key: torch.tensor(value) for key, value in token_dataset(n=8)[:].items()}
    base.eval()
    with torch.no_grad():
        base_logits = base(**batch).logits
    config = LoraConfig(r=4, lora_alpha=8, target_modules=targets, task_type="SEQ_CLS")
    model = get_peft_model(base, config)
    # LoRA starts with B = 0 (no change, and no gradient for A); a random B makes the adapter change the output
    # and gives A gradients, so both can be checked
    for name, p in model.named_parameters():
        if "lora_B" in name:
            nn.init.normal_(p, std=0.5)

    wrapped = {name: module for name, module in model.named_modules() if isinstance(module, LoraLinear)}
    layers = base.config.num_hidden_layers
    assert sorted(wrapped) == sorted(
        f"base_model.model.bert.encoder.layer.{i}.mlp.{target}" for i in range(layers) for target in targets
    )
    assert all(type(module.base_layer) is nn.Linear for module in wrapped.values())  # only Linear leaves

    model.train()
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": True})
    model.enable_input_require_grads()  # reentrant checkpointing needs an input that requires grad
    model(**batch).loss.backward()
    lora_params = {name: p for name, p in model.named_parameters() if "lora_" in name}
    assert len(lora_params) == 2 * len(wrapped)
    for name, p in lora_params.items():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    frozen = [name for name, p in model.named_parameters() if "mlp" in name and "lora_" not in name]
    assert frozen and all(model.get_parameter(name).grad is None for name in frozen)

    model.eval()
    weights_before = {name: module.base_layer.weight.detach().clone() for name, module in wrapped.items()}
    with torch.no_grad():
        adapted = model(**batch).logits
        model.merge_adapter()
        merged = model(**batch).logits
        model.unmerge_adapter()
        unmerged = model(**batch).logits
    assert (adapted - base_logits).abs().max() > 1e-2  # the adapter is active
    # merged W + s·BA against W x + s·B(A x): same maths, different fp32 rounding
    torch.testing.assert_close(merged, adapted, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(unmerged, adapted, rtol=1e-5, atol=1e-5)
    for name, module in wrapped.items():  # unmerge subtracts what merge added: back to W up to fp32 rounding
        torch.testing.assert_close(module.base_layer.weight, weights_before[name], rtol=0, atol=1e-6)
    plain = model.merge_and_unload()
    assert type(plain) is FfnBertForSequenceClassification
    assert type(plain.bert.encoder.layer[0].mlp.up_proj) is nn.Linear
    with torch.no_grad():
        torch.testing.assert_close(plain(**batch).logits, adapted, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# Pipelines and the script work on saved FfnBert folders with a real (bundled) BERT tokenizer
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer(bundled_checkpoint):
    return AutoTokenizer.from_pretrained(bundled_checkpoint)


def real_vocab_config(tokenizer, **overrides):
    return tiny_config(vocab_size=tokenizer.vocab_size, max_position_embeddings=128, **NO_DROPOUT, **overrides)


def test_fill_mask_pipeline_on_saved_model(tokenizer, tmp_path):
    torch.manual_seed(0)
    model = FfnBertForMaskedLM(real_vocab_config(tokenizer, ffn_type="geglu", layer_norm_position="pre"))
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    fill = pipeline("fill-mask", model=str(tmp_path), device="cpu")
    assert type(fill.model) is FfnBertForMaskedLM
    text = f"the movie was {tokenizer.mask_token} ."
    predictions = fill(text, top_k=3)
    encoded = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        logits = model.eval()(**encoded).logits[0, encoded["input_ids"][0].tolist().index(tokenizer.mask_token_id)]
    expected = logits.softmax(-1).topk(3)
    assert [p["token"] for p in predictions] == expected.indices.tolist()
    torch.testing.assert_close(torch.tensor([p["score"] for p in predictions]), expected.values, rtol=1e-5, atol=1e-7)


def test_text_classification_pipeline_on_saved_model(tokenizer, tmp_path):
    torch.manual_seed(0)
    config = real_vocab_config(
        tokenizer, ffn_type="swiglu", num_labels=2, id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1}
    )
    model = FfnBertForSequenceClassification(config)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    classify = pipeline("text-classification", model=str(tmp_path), device="cpu")
    assert type(classify.model) is FfnBertForSequenceClassification
    texts = ["a great film", "dull and bad"]
    outputs = classify(texts)
    with torch.no_grad():
        probs = model.eval()(**tokenizer(texts, return_tensors="pt", padding=True)).logits.softmax(-1)
    for output, row in zip(outputs, probs, strict=False):
        assert output["label"] == config.id2label[int(row.argmax())]
        assert output["score"] == pytest.approx(float(row.max()), rel=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# Data loaders
# ---------------------------------------------------------------------------------------------------------------
def write_label_files(folder: Path, n: int = 10, names=("reviews.pos", "reviews.neg")) -> Path:
    """One file per label, n lines each (a blank last line in the first), plus a README that is not a label file."""
    folder.mkdir()
    (folder / names[0]).write_text("".join(f"{POSITIVE[i % 5]} movie {i}\n" for i in range(n)) + "\n")
    (folder / names[1]).write_text("".join(f"{NEGATIVE[i % 5]} movie {i}\n" for i in range(n)))
    (folder / "README.txt").write_text("not a label file\n")
    return folder


@pytest.mark.parametrize("names", [("reviews.pos", "reviews.neg"), ("pos.txt", "neg.txt")])
def test_read_label_files_labels_from_file_names_and_names_the_flag_on_bad_folders(names, tmp_path):
    folder = write_label_files(tmp_path / "rt", n=3, names=names)
    texts, labels = read_label_files(folder)
    assert labels == ["neg"] * 3 + ["pos"] * 3  # files by name (README skipped), the blank last line skipped
    assert texts[0] == f"{NEGATIVE[0]} movie 0" and texts[-1] == f"{POSITIVE[2]} movie 2"
    assert read_labelled_texts(folder) == (texts, labels)  # a plain folder reads as label files
    with pytest.raises(FileNotFoundError, match=r"^--eval_data: no such folder: '/nowhere'$"):
        read_label_files("/nowhere", "--eval_data")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"--label_dir: .*empty' holds no label files matching '\*'"):
        read_label_files(tmp_path / "empty")
    (folder / names[1]).unlink()
    with pytest.raises(ValueError, match=rf"has one label file \({names[0]}\); need two or more"):
        read_label_files(folder)
    (folder / names[1]).write_text("\n\n")
    with pytest.raises(ValueError, match=rf"label file .*{names[1]}' is empty"):
        read_label_files(folder)


def test_read_label_files_pattern_and_a_label_given_twice(tmp_path):
    folder = write_label_files(tmp_path / "rt", n=2)
    (folder / "notes.md").write_text("other\n")
    with pytest.raises(ValueError, match="give the same label twice"):  # stems: notes, reviews, reviews
        read_label_files(folder)
    texts, labels = read_label_files(folder, pattern="reviews.*")
    assert labels == ["neg", "neg", "pos", "pos"] and len(texts) == 4


def test_label_files_fixed_seeded_split_counts_and_fractions(tmp_path):
    folder = write_label_files(tmp_path / "rt")
    splits = load_label_files(str(folder), (12, 4, 3), seed=7)
    assert {name: len(split) for name, split in splits.items()} == {"train": 12, "validation": 4, "test": 3}
    rows = [(row["text"], row["label"]) for split in splits.values() for row in split]
    assert len(set(rows)) == 19  # disjoint splits; the blank line was skipped
    for text, label in rows:
        assert label == ("pos" if text.split()[0] in POSITIVE else "neg")
    again = load_label_files(str(folder), "12,4,3", seed=7)
    assert again["test"]["text"] == splits["test"]["text"]
    # the split is Dataset.shuffle(seed) of the rows in file order, cut in order: the split of every earlier run
    texts, labels = read_label_files(folder)
    shuffled = Dataset.from_dict({"text": texts, "label": labels}).shuffle(seed=7)
    assert splits["train"]["text"] == shuffled["text"][:12] and splits["test"]["text"] == shuffled["text"][16:19]
    other = load_label_files(str(folder), (12, 4, 3), seed=8)
    assert other["train"]["text"] != splits["train"]["text"]
    fractions = load_label_files(str(folder), "0.8,0.1,0.1", seed=7)  # 20 rows: 16 / 2 / 2
    assert {name: len(split) for name, split in fractions.items()} == {"train": 16, "validation": 2, "test": 2}
    with pytest.raises(ValueError, match=r"--split_sizes must be three positive sizes .* at most 20"):
        load_label_files(str(folder), (12, 4, 5))
    with pytest.raises(ValueError, match=r"--split_sizes .* got '0.8,0.2'"):
        parse_split_sizes("0.8,0.2", 20)


def test_read_table_and_datasets_columns(tmp_path):
    (tmp_path / "eval.tsv").write_text("review\tstars\ngood movie\t5\nbad movie\t1\nfine movie\t4\n")
    texts, labels = read_table(tmp_path / "eval.tsv", "review", "stars")
    assert texts == ["good movie", "bad movie", "fine movie"] and labels == [5, 1, 4]
    assert read_labelled_texts(tmp_path / "eval.tsv", text_column="review", label_column="stars") == (texts, labels)
    (tmp_path / "plain.csv").write_text("sentence\nno label here\nnor here\n")
    assert read_table(tmp_path / "plain.csv") == (["no label here", "nor here"], None)  # default columns
    with pytest.raises(ValueError, match=r"column 'stars' does not exist in --file .*plain.csv'; columns: sentence"):
        read_table(tmp_path / "plain.csv", label_column="stars")
    saved = tmp_path / "saved"
    Dataset.from_dict({"text": ["a", "b", "c"], "label": [0, 1, 0]}).save_to_disk(str(saved))
    assert read_labelled_texts(saved) == (["a", "b", "c"], [0, 1, 0])
    with pytest.raises(FileNotFoundError, match=r"--data: './nowhere' is no file or folder"):
        read_labelled_texts("./nowhere")


def test_text_documents_sorted_latin1_fallback_and_bad_paths(tmp_path):
    folder = tmp_path / "speeches"
    folder.mkdir()
    (folder / "2001-b.txt").write_text("naïve union\n", encoding="utf-8")
    (folder / "1999-a.txt").write_bytes("caf\xe9 society".encode("latin-1"))  # not UTF-8: decoded as Latin-1
    (folder / "SOURCE.txt").write_text("provenance")
    (folder / "notes.md").write_text("not a .txt file")
    documents = read_text_documents([folder])
    assert documents == [("1999-a.txt", "café society"), ("2001-b.txt", "naïve union\n"), ("SOURCE.txt", "provenance")]
    assert [name for name, _ in read_text_documents([folder], "[0-9]*.txt")] == ["1999-a.txt", "2001-b.txt"]
    with pytest.raises(FileNotFoundError, match=r"--data: folder .* holds no file matching '\*\.csv'"):
        read_text_documents([folder], "*.csv", argument="--data")
    with pytest.raises(FileNotFoundError, match=r"--train_files: .*nowhere.txt' does not exist"):
        read_text_documents([folder / "nowhere.txt"])
    (folder / "blank.txt").write_text(" \n")
    with pytest.raises(ValueError, match=r"--train_files: text file .*blank\.txt' is empty"):
        read_text_documents([folder])


def test_mlm_blocks_cut_the_document_stream_and_fixed_masks_repeat(tokenizer):
    documents = ["the state of the union is strong . " * 3, "we shall act now ."]
    blocks = mlm_blocks(documents, tokenizer, block_size=8)
    stream = [i for text in documents for i in tokenizer(text)["input_ids"]]  # [CLS] text [SEP] per document
    assert blocks["input_ids"] == [stream[i * 8 : (i + 1) * 8] for i in range(len(stream) // 8)]  # remainder dropped
    special = {tokenizer.cls_token_id, tokenizer.sep_token_id}
    assert blocks["special_tokens_mask"] == [[int(i in special) for i in row] for row in blocks["input_ids"]]
    rows = [
        {"input_ids": i, "special_tokens_mask": s}
        for i, s in zip(blocks["input_ids"], blocks["special_tokens_mask"], strict=True)
    ]
    first, again = (masking_collator(tokenizer, mlm_probability=0.5, seed=3)(rows) for _ in range(2))
    other = masking_collator(tokenizer, mlm_probability=0.5, seed=4)(rows)
    assert torch.equal(first["labels"], again["labels"]) and not torch.equal(first["labels"], other["labels"])
    masked = first["labels"] != -100
    assert masked.any() and not masked[torch.tensor(blocks["special_tokens_mask"]).bool()].any()
    assert torch.equal(first["labels"][masked], torch.tensor(blocks["input_ids"])[masked])


# ---------------------------------------------------------------------------------------------------------------
# The classification script, good and bad input
# ---------------------------------------------------------------------------------------------------------------
def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_checkpoint(tokenizer, tmp_path_factory) -> str:
    """A tiny upstream-layout BERT checkpoint (FfnBert defaults) with the bundled BERT tokenizer next to it."""
    folder = tmp_path_factory.mktemp("tiny_real_vocab")
    torch.manual_seed(0)
    FfnBertForMaskedLM(real_vocab_config(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def write_csv(path: Path, rows: list[tuple[str, str]], header: str = "sentence,label") -> str:
    path.write_text(header + "\n" + "".join(f"{text},{label}\n" for text, label in rows))
    return str(path)


@pytest.fixture
def csv_files(tmp_path) -> dict[str, str]:
    rows = [(f"{word} movie", "pos") for word in POSITIVE] + [(f"{word} movie", "neg") for word in NEGATIVE]
    return {
        "train": write_csv(tmp_path / "train.csv", rows * 2),
        "validation": write_csv(tmp_path / "validation.csv", rows),
        "test": write_csv(tmp_path / "test.csv", rows[::2]),
    }


def script_argv(checkpoint: str, files: dict[str, str], output_dir: Path, *extra: str) -> list[str]:
    return [
        "--model_name_or_path",
        checkpoint,
        "--train_file",
        files["train"],
        "--validation_file",
        files["validation"],
        "--test_file",
        files["test"],
        "--output_dir",
        str(output_dir),
        "--max_steps",
        "2",
        "--per_device_train_batch_size",
        "4",
        "--max_seq_length",
        "16",
        "--report_to",
        "none",
        "--save_strategy",
        "no",
        "--disable_tqdm",
        "true",
        *extra,
    ]


def test_classification_script_trains_saves_and_loads(tiny_checkpoint, csv_files, tmp_path):
    main = load_script("finetune_classification").main
    output_dir = tmp_path / "out"
    unlabelled = ["good movie", "awful movie", "fine movie"]
    (tmp_path / "test.csv").write_text("sentence\n" + "".join(f"{text}\n" for text in unlabelled))
    outcome = main(script_argv(tiny_checkpoint, csv_files, output_dir, "--layer_norm_position", "pre"))
    results = outcome["results"]
    assert 0 <= results["eval_accuracy"] <= 1 and "eval_loss" in results and "eval_f1_macro" in results
    # an unlabelled test split gives predictions (in file order), no metrics
    assert "test_accuracy" not in results
    assert len(outcome["test_predictions"]) == 3 and set(outcome["test_predictions"]) <= {"neg", "pos"}
    assert outcome["train_tokens"] == 2 * 4 * 4  # 2 steps of 4 rows of [CLS] word movie [SEP]
    # Post-LN → Pre-LN goes through hf_ffn.conversion.load_converted, which reports the one new norm
    assert outcome["conversion"]["config_changes"]["layer_norm_position"] == ["post", "pre"]
    assert {"bert.encoder.final_norm.weight", "bert.encoder.final_norm.bias"} <= set(outcome["conversion"]["new"])
    saved = json.loads((output_dir / "all_results.json").read_text())
    assert saved["eval_accuracy"] == results["eval_accuracy"]
    card = (output_dir / "README.md").read_text()
    assert f"{results['eval_accuracy']:.4f}" in card and "layer_norm_position: `pre`" in card
    assert not (output_dir / ".staging-final").exists()
    classify = pipeline("text-classification", model=str(output_dir), device="cpu")
    assert classify.model.config.layer_norm_position == "pre"
    assert classify("great movie")[0]["label"] in {"neg", "pos"}


def test_test_predictions_in_split_order_under_group_by_length(tiny_checkpoint, tokenizer, tmp_path):
    # Trainer evaluates through a seeded LengthGroupedSampler under group_by_length: rows of equal length (here all
    # "word movie") would come back shuffled. The predicted / label ids must follow the length-sorted test split.
    main = load_script("finetune_classification").main
    rows = [(f"{word} movie", "pos") for word in POSITIVE] + [(f"{word} movie", "neg") for word in NEGATIVE]
    files = {
        "train": write_csv(tmp_path / "train.csv", rows * 2),
        "validation": write_csv(tmp_path / "v.csv", rows),
        "test": write_csv(tmp_path / "test.csv", rows),
    }
    outcome = main(
        script_argv(
            tiny_checkpoint,
            files,
            tmp_path / "out",
            "--train_sampling_strategy",
            "group_by_length",
            "--per_device_eval_batch_size",
            "4",
        )
    )
    lengths = [len(tokenizer(text)["input_ids"]) for text, _ in rows]
    expected = [{"neg": 0, "pos": 1}[rows[i][1]] for i in sorted(range(len(rows)), key=lengths.__getitem__)]
    assert outcome["test_label_ids"] == expected
    assert len(outcome["test_predicted_ids"]) == len(rows)


def assert_fails_before_training(argv: list[str], output_dir: Path, error: type, match: str) -> None:
    main = load_script("finetune_classification").main
    with pytest.raises(error, match=match):
        main(argv)
    assert not output_dir.exists()  # nothing written, nothing that could pass for a model


@pytest.mark.parametrize("broken", ["missing", "empty"])
def test_missing_or_empty_data_file(broken, tiny_checkpoint, csv_files, tmp_path):
    files = dict(csv_files)
    files["validation"] = str(tmp_path / "nowhere.csv")
    if broken == "empty":
        Path(files["validation"]).write_text("")
    error, match = (FileNotFoundError, "does not exist") if broken == "missing" else (ValueError, "is empty")
    out = tmp_path / "out"
    assert_fails_before_training(
        script_argv(tiny_checkpoint, files, out), out, error, rf"--validation_file.*nowhere\.csv.*{match}"
    )


def test_label_column_that_does_not_exist(tiny_checkpoint, csv_files, tmp_path):
    out = tmp_path / "out"
    assert_fails_before_training(
        script_argv(tiny_checkpoint, csv_files, out, "--label_column", "stars"),
        out,
        ValueError,
        r"--label_column: column 'stars' does not exist in the train split "
        r"\(.*train\.csv\); columns: sentence, label",
    )


def test_label_sets_differ_between_train_and_validation(tiny_checkpoint, csv_files, tmp_path):
    write_csv(Path(csv_files["validation"]), [("good movie", "pos"), ("so so movie", "neutral")])
    out = tmp_path / "out"
    assert_fails_before_training(
        script_argv(tiny_checkpoint, csv_files, out),
        out,
        ValueError,
        r"validation split \(.*validation\.csv\) differs .* only in validation: "
        r"\['neutral'\], only in train: \['neg'\]",
    )


def test_checkpoint_path_that_does_not_exist(csv_files, tmp_path):
    out = tmp_path / "out"
    missing = str(tmp_path / "no" / "such" / "checkpoint")
    assert_fails_before_training(
        script_argv(missing, csv_files, out),
        out,
        FileNotFoundError,
        r"--model_name_or_path: no such folder: .*no/such/checkpoint$",
    )
    for name in ("./nope", "org/name/extra"):
        with pytest.raises(FileNotFoundError, match=f"no such folder: {name}$"):
            check_checkpoint(name)


def test_bad_switch_values_name_the_argument():
    with pytest.raises(ValueError, match=r"--ffn_init has unknown value 'random'; allowed: preserving, fresh \("):
        ModelArguments(model_name_or_path="x", ffn_init="random")
    # pruned needs calibration text, which only `hf-ffn convert` reads: not listed, and the error says where it is
    with pytest.raises(
        ValueError,
        match=r"--ffn_init has unknown value 'pruned'; allowed: preserving, fresh \(pruned is made by "
        r"`hf-ffn convert --init pruned` \(with calibration text\): fine-tune its folder\)$",
    ):
        ModelArguments(model_name_or_path="x", ffn_type="swiglu", ffn_init="pruned")
    with pytest.raises(ValueError, match=r"--ffn_width has unknown value 'wide'; allowed: keep, matched"):
        ModelArguments(model_name_or_path="x", ffn_width="wide")
    with pytest.raises(ValueError, match=r"exactly one data source"):
        ClassificationDataArguments(train_file="a.csv", validation_file="b.csv", label_dir="rt")


def test_mlm_script_reports_perplexity_before_and_after(tiny_checkpoint, tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(4):
        (docs / f"speech{i}.txt").write_text("the state of the union is strong . " * 40)
    (docs / "latin1.txt").write_bytes("the café of the union is strong . ".encode("latin-1") * 40)
    output_dir = tmp_path / "mlm"
    outcome = load_script("finetune_mlm").main(
        [
            "--model_name_or_path",
            tiny_checkpoint,
            "--train_files",
            str(docs),
            "--validation_split_percentage",
            "20",
            "--max_seq_length",
            "32",
            "--max_steps",
            "6",
            "--learning_rate",
            "1e-2",
            "--per_device_train_batch_size",
            "8",
            "--output_dir",
            str(output_dir),
            "--report_to",
            "none",
            "--save_strategy",
            "no",
            "--disable_tqdm",
            "true",
        ]
    )
    results = outcome["results"]
    assert outcome["documents"] == {"train": 4, "validation": 1}
    assert results["before_perplexity"] == pytest.approx(math.exp(results["before_loss"]))
    assert results["eval_perplexity"] == pytest.approx(math.exp(results["eval_loss"]))
    # a random tiny model starts near uniform over the 30,522-token vocabulary; 6 steps on one repeated sentence
    # must bring it well down
    assert results["before_perplexity"] > 10000 and results["eval_perplexity"] < results["before_perplexity"] / 4
    assert (output_dir / "config.json").exists() and "perplexity" in (output_dir / "README.md").read_text()


def test_mlm_on_a_checkpoint_without_mlm_head_says_the_head_is_new(tokenizer, tmp_path, caplog):
    # A sentence-embedding BERT (a bare BertModel, like all-MiniLM-L6-v2) has no cls.predictions.* weights: the run
    # names the new head and what "before" perplexity then means, instead of transformers' "checkpoint seem
    # corrupted" warning.
    checkpoint = tmp_path / "bare"
    torch.manual_seed(0)
    FfnBertModel(real_vocab_config(tokenizer)).save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"speech{i}.txt").write_text("the state of the union is strong . " * 20)
    hf_logging.set_verbosity_warning()  # this module's autouse fixture silences transformers; this test listens
    transformers_records: list[logging.LogRecord] = []
    recorder = logging.Handler()
    recorder.emit = transformers_records.append  # sees what passes transformers' loading logger's filters
    modeling_logger = logging.getLogger("transformers.modeling_utils")
    modeling_logger.addHandler(recorder)
    with caplog.at_level("WARNING"):
        outcome = load_script("finetune_mlm").main(
            [
                "--model_name_or_path",
                str(checkpoint),
                "--train_files",
                str(docs),
                "--max_seq_length",
                "32",
                "--max_steps",
                "1",
                "--per_device_train_batch_size",
                "4",
                "--output_dir",
                str(tmp_path / "mlm"),
                "--report_to",
                "none",
                "--save_strategy",
                "no",
                "--disable_tqdm",
                "true",
            ]
        )
    modeling_logger.removeHandler(recorder)
    head = [
        "cls.predictions.bias",
        "cls.predictions.transform.LayerNorm.bias",
        "cls.predictions.transform.LayerNorm.weight",
        "cls.predictions.transform.dense.bias",
        "cls.predictions.transform.dense.weight",
    ]
    assert outcome["mlm_head"] == "newly initialised"
    assert set(head) <= set(outcome["conversion"]["new_weights"])
    notes = [r.getMessage() for r in caplog.records if "has no MLM head" in r.getMessage()]
    assert len(notes) == 1 and all(name in notes[0] for name in head) and "random head" in notes[0]
    assert transformers_records and not [r for r in transformers_records if "seem corrupted" in r.getMessage()]


def test_interrupted_final_save_leaves_no_model(tmp_path):
    output_dir = tmp_path / "out"
    output_dir.mkdir()

    def save(folder: Path) -> None:
        (folder / "model.safetensors").write_bytes(b"partial")
        raise KeyboardInterrupt  # dies before config.json is written

    with pytest.raises(KeyboardInterrupt):
        save_finished(str(output_dir), save)
    assert sorted(p.name for p in output_dir.iterdir()) == []  # staging removed, nothing moved in

    def save_all(folder: Path) -> None:
        for name in ("model.safetensors", "config.json", "README.md"):
            (folder / name).write_text(name)

    save_finished(str(output_dir), save_all)
    assert sorted(p.name for p in output_dir.iterdir()) == ["README.md", "config.json", "model.safetensors"]


def test_save_finished_only_main_process_touches_staging(tmp_path):
    # Regression: every process used to prepare, move and delete the shared staging folder, so a 2-process run
    # could crash at its end (FileNotFoundError). Now a non-main process only calls `save` between barriers.
    staging = tmp_path / STAGING_FOLDER
    staging.mkdir()
    (staging / "being-written-by-rank-0").write_text("x")
    calls = []
    save_finished(
        str(tmp_path), save=lambda folder: calls.append(folder), main=False, barrier=lambda: calls.append("barrier")
    )
    assert (staging / "being-written-by-rank-0").read_text() == "x"  # untouched by the non-main process
    assert calls == ["barrier", staging, "barrier", "barrier"]
    assert not (tmp_path / "being-written-by-rank-0").exists()  # nothing moved by it either

    save_finished(str(tmp_path), save=lambda folder: (folder / "config.json").write_text("{}"), main=True)
    assert (tmp_path / "config.json").read_text() == "{}" and not staging.exists()


# ---------------------------------------------------------------------------------------------------------------
# Unpadded execution in the scripts: `--unpad_tokens` on by default, `--no_unpad_tokens` turns it off
# ---------------------------------------------------------------------------------------------------------------
def count_unpadded_forwards(monkeypatch) -> list[int]:
    """Count the forwards that took the unpadded path (`FfnBertModel` calls `unpadded_model_forward`)."""
    calls: list[int] = []
    unpadded = modeling_ffn_bert.unpadded_model_forward

    def counted(*args, **kwargs):
        calls.append(1)
        return unpadded(*args, **kwargs)

    monkeypatch.setattr(modeling_ffn_bert, "unpadded_model_forward", counted)
    return calls


def logged_losses(outcome: dict) -> list[float]:
    return [entry["loss"] for entry in outcome["log_history"] if "loss" in entry]


def test_classification_script_unpadded_by_default_same_losses_saved_switch_off(tiny_checkpoint, tmp_path, monkeypatch):
    # `tiny_checkpoint` has no dropout: with dropout, on and off runs draw their masks for other shapes ((n_real,
    # hidden) packed rows on, (batch, seq, hidden) off) and compute different random draws of the same loss.
    # Sentences of 1 to 7 words: every batch of 4 is padded. DataCollatorWithPadding gives sequence labels only,
    # so the loss reads the pooler (token 0, real) and the switch changes no loss.
    words = POSITIVE + NEGATIVE
    rows = [(" ".join(words[i : i + 1 + i % 7]) + " movie", "pos" if i % 2 else "neg") for i in range(10)]
    files = {split: write_csv(tmp_path / f"{split}.csv", rows) for split in ("train", "validation", "test")}
    main = load_script("finetune_classification").main
    extra = ("--max_steps", "3", "--logging_steps", "1", "--optim", "sgd", "--learning_rate", "0.5")
    unpadded = count_unpadded_forwards(monkeypatch)
    on = main(script_argv(tiny_checkpoint, files, tmp_path / "on", *extra))
    forwards_on = len(unpadded)
    off = main(script_argv(tiny_checkpoint, files, tmp_path / "off", *extra, "--no_unpad_tokens"))
    assert forwards_on >= 3 and len(unpadded) == forwards_on  # on: every training step unpadded; off: none
    assert (on["unpad_tokens"], off["unpad_tokens"]) == (True, False)
    losses_on, losses_off = logged_losses(on), logged_losses(off)
    assert len(losses_on) == 3
    # The tolerance of tests/test_unpadded.py: step 1 within the packed path's fp32 rounding (same weights, same
    # batch, other row counts and attention shapes); later steps start from weights that differ by the learning
    # rate times the fp32 rounding of the weight gradients (summed over n_real rows on, batch·seq rows off), which
    # SGD keeps proportional.
    assert losses_on == pytest.approx(losses_off, rel=1e-5)
    assert on["results"]["eval_loss"] == pytest.approx(off["results"]["eval_loss"], rel=1e-5)
    # The saved model keeps the checkpoint's value (off): the switch was how the run executed, not the model.
    for run in ("on", "off"):
        assert json.loads((tmp_path / run / "config.json").read_text())["unpad_tokens"] is False


def test_mlm_script_switch_falls_back_exactly_and_saved_switch_is_the_checkpoints(tokenizer, tmp_path, monkeypatch):
    # MLM blocks are cut from the token stream, all full (no padding): with the switch on every forward falls
    # back to the padded path, so the losses are the same bits. Labels are -100 wherever a token is not masked,
    # pads included (DataCollatorForLanguageModeling never masks a pad), so with padding the loss would not read
    # the pads either. The checkpoint is saved with the switch on: both runs save that value, the one run with
    # --no_unpad_tokens too.
    checkpoint = tmp_path / "checkpoint"
    torch.manual_seed(0)
    FfnBertForMaskedLM(real_vocab_config(tokenizer, unpad_tokens=True)).save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"speech{i}.txt").write_text(f"the state of the union {i} is strong . " * 20)
    main = load_script("finetune_mlm").main

    def run(name: str, *extra: str) -> dict:
        return main(
            [
                "--model_name_or_path",
                str(checkpoint),
                "--train_files",
                str(docs),
                "--max_seq_length",
                "32",
                "--max_steps",
                "3",
                "--logging_steps",
                "1",
                "--per_device_train_batch_size",
                "4",
                "--output_dir",
                str(tmp_path / name),
                "--report_to",
                "none",
                "--save_strategy",
                "no",
                "--disable_tqdm",
                "true",
                *extra,
            ]
        )

    unpadded = count_unpadded_forwards(monkeypatch)
    on, off = run("on"), run("off", "--no_unpad_tokens")
    assert (on["unpad_tokens"], off["unpad_tokens"]) == (True, False)
    assert unpadded == []  # no padding: the padded path ran every time
    assert len(logged_losses(on)) == 3 and logged_losses(on) == logged_losses(off)
    assert on["results"]["eval_loss"] == off["results"]["eval_loss"]
    for name in ("on", "off"):
        assert json.loads((tmp_path / name / "config.json").read_text())["unpad_tokens"] is True
    # --padding_free: the 4 blocks of a batch in one row, masked by the same collator (the same draws: as many
    # tokens, in the same order), each block computed as if alone; the losses within the fp32 rounding of packed
    # attention (the blocks run alone, a bucket of 4 sequences, instead of as 4 rows)
    flat = run("flat", "--padding_free")
    assert logged_losses(flat) == pytest.approx(logged_losses(on), rel=1e-5)
    assert flat["results"]["eval_loss"] == pytest.approx(on["results"]["eval_loss"], rel=1e-5)


def test_classification_script_padding_free_same_losses_one_row_per_batch(tiny_checkpoint, tmp_path, monkeypatch):
    """--padding_free: every batch is one row (`PaddingFreeCollator`, position_ids restarting at 0), the pooler gives
    one output per sentence, and the losses are the padded run's (switch on) to fp32 rounding of packed attention
    against padded attention (tests/test_packed.py) and of the weight gradients (above)."""
    words = POSITIVE + NEGATIVE
    rows = [(" ".join(words[i : i + 1 + i % 7]) + " movie", "pos" if i % 2 else "neg") for i in range(10)]
    files = {split: write_csv(tmp_path / f"{split}.csv", rows) for split in ("train", "validation", "test")}
    main = load_script("finetune_classification").main
    extra = ("--max_steps", "3", "--logging_steps", "1", "--optim", "sgd", "--learning_rate", "0.5")
    shapes = []
    forward = FfnBertForSequenceClassification.forward

    @functools.wraps(forward)  # the same signature: Trainer keeps the columns the forward takes
    def recorded(self, *args, **kwargs):
        shapes.append((tuple(kwargs["input_ids"].shape), kwargs.get("position_ids") is not None))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(FfnBertForSequenceClassification, "forward", recorded)
    flat = main(script_argv(tiny_checkpoint, files, tmp_path / "flat", *extra, "--padding_free"))
    assert shapes and all(shape[0] == 1 and has_positions for shape, has_positions in shapes)
    padded = main(script_argv(tiny_checkpoint, files, tmp_path / "padded", *extra))
    assert len(logged_losses(flat)) == 3
    assert logged_losses(flat) == pytest.approx(logged_losses(padded), rel=1e-5)
    assert flat["results"]["test_accuracy"] == padded["results"]["test_accuracy"]  # one prediction per sentence


# ---------------------------------------------------------------------------------------------------------------
# --resume_from_checkpoint last: one resolver (resume_checkpoint) for both fine-tuning scripts and hf-ffn heal
# ---------------------------------------------------------------------------------------------------------------
def test_resume_checkpoint_resolves_last_to_the_newest_checkpoint(tmp_path):
    def resolved(value):
        return resume_checkpoint(
            TrainingArguments(output_dir=str(tmp_path / "run"), resume_from_checkpoint=value, report_to="none")
        )

    assert resolved(None) is None
    assert resolved("some/checkpoint-7") == "some/checkpoint-7"  # a path is Trainer's business, passed as given
    with pytest.raises(ValueError, match=r"--resume_from_checkpoint last: no checkpoint-N folder in --output_dir "):
        resolved("last")  # no output folder yet
    for step in (2, 10, 9):
        (tmp_path / "run" / f"checkpoint-{step}").mkdir(parents=True)
        (tmp_path / "run" / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")  # saved completely
    (tmp_path / "run" / "checkpoint-99.txt").write_text("a file, not a checkpoint")
    assert resolved("last") == resolved("True") == str(tmp_path / "run" / "checkpoint-10")  # numeric, not lexical


class TrainCalled(Exception):
    pass


@pytest.mark.parametrize("script", ["finetune_classification", "finetune_mlm"])
def test_fine_tuning_scripts_resume_from_the_last_checkpoint(script, tiny_checkpoint, csv_files, tmp_path, monkeypatch):
    """Trainer alone would read "last" as a path: the scripts hand it the newest checkpoint-N folder, and refuse
    "last" without one before any training."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(2):
        (docs / f"speech{i}.txt").write_text("the state of the union is strong . " * 40)
    output_dir = tmp_path / "out"
    data = (
        script_argv(tiny_checkpoint, csv_files, output_dir)
        if script == "finetune_classification"
        else [
            "--model_name_or_path",
            tiny_checkpoint,
            "--train_files",
            str(docs),
            "--max_seq_length",
            "16",
            "--output_dir",
            str(output_dir),
            "--report_to",
            "none",
            "--max_steps",
            "1",
        ]
    )
    main = load_script(script).main
    passed = []

    def train(self, resume_from_checkpoint=None, **kwargs):
        passed.append(resume_from_checkpoint)
        raise TrainCalled

    monkeypatch.setattr(Trainer, "train", train)
    with pytest.raises(ValueError, match="--resume_from_checkpoint last: no checkpoint-N folder"):
        main([*data, "--resume_from_checkpoint", "last"])
    assert passed == []
    for step in (3, 12):  # as Trainer saves them: hf-ffn mlm reads the step it resumes from before training
        (output_dir / f"checkpoint-{step}").mkdir(parents=True, exist_ok=True)
        (output_dir / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    with pytest.raises(TrainCalled):
        main([*data, "--resume_from_checkpoint", "last"])
    assert passed == [str(output_dir / "checkpoint-12")]
