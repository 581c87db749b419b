"""Pre-training from scratch (`hf_ffn.mlm.run`) and sparse prediction (`FfnBertConfig.sparse_prediction`):
packing, masking, the trained tokenizer, the parameter-matched width in the report, 3-step runs per placement,
resume, continued pre-training of a converted checkpoint. Tiny models on a tiny corpus written here."""

import gzip
import json
import lzma
import math
import re
import shutil
from pathlib import Path

import pytest
import torch
from transformers import (
    AutoModelForMaskedLM,
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    BertModel,
    TrainerCallback,
    TrainingArguments,
)
from transformers.testing_utils import CaptureLogger
from transformers.utils import logging as hf_logging

from hf_ffn.configuration_ffn_bert import FfnBertConfig
from hf_ffn.mlm import run as pretraining_module
from hf_ffn.mlm.arguments import PretrainingArguments, PretrainingDataArguments, ffn_width
from hf_ffn.mlm.report import ffn_report
from hf_ffn.mlm.run import pretraining_main, pretraining_parser, run_pretraining
from hf_ffn.mlm.speed import use_bf16_where_available
from hf_ffn.mlm.trainer import StopAtStep, check_stop_at_step
from hf_ffn.modeling_ffn_bert import FfnBertForMaskedLM
from hf_ffn.training.blocks import masking_collator, mlm_blocks
from hf_ffn.training.corpus import held_out_split, split_documents
from hf_ffn.training.outputs import training_seconds

from .conftest import SMALL, TINY, assert_equal_but_row_count, tiny_config


@pytest.fixture(autouse=True)
def quiet_transformers():
    hf_logging.set_verbosity_error()
    yield
    hf_logging.set_verbosity_warning()


def pretrain(corpus: Path, output_dir: Path, *extra: str, steps: int = 3, callbacks=None) -> dict:
    """`run_pretraining` from an argv, as `hf-ffn mlm` parses it: a tiny model, blocks of 32, batch 4, datasets'
    cache beside `output_dir`."""
    argv = [
        "--train_files",
        str(corpus),
        "--max_seq_length",
        "32",
        "--max_steps",
        str(steps),
        "--per_device_train_batch_size",
        "4",
        "--per_device_eval_batch_size",
        "8",
        "--learning_rate",
        "1e-3",
        "--output_dir",
        str(output_dir),
        "--report_to",
        "none",
        "--use_cpu",
        "true",
        "--disable_tqdm",
        "true",
        "--logging_steps",
        "1",
        "--seed",
        "0",
        *extra,
    ]
    if "--cache_dir" not in extra:  # datasets' cache beside the run, not in the user's HF_DATASETS_CACHE
        argv += ["--cache_dir", str(Path(output_dir).parent / "datasets-cache")]
    if "--model_name_or_path" not in extra:
        argv += SMALL if "--tokenizer_name" in extra else ["--vocab_size", "100", *SMALL]
    args, data_args, training_args = pretraining_parser().parse_args_into_dataclasses(args=argv)
    return run_pretraining(args, data_args, training_args, callbacks=callbacks)


# ---------------------------------------------------------------------------------------------------------------
# Data: tokenizer, packing, masking, the held-out split
# ---------------------------------------------------------------------------------------------------------------
def test_train_tokenizer_vocab_size_special_tokens_and_round_trip(corpus, tokenizer):
    assert len(tokenizer) == 100
    special = {
        tokenizer.pad_token: "[PAD]",
        tokenizer.unk_token: "[UNK]",
        tokenizer.cls_token: "[CLS]",
        tokenizer.sep_token: "[SEP]",
        tokenizer.mask_token: "[MASK]",
    }
    assert list(special) == list(special.values())
    assert all(tokenizer.convert_tokens_to_ids(token) < 5 for token in special)  # the first ids
    text = "The Government of the people by the people for the people"
    encoded = tokenizer(text)["input_ids"]
    assert encoded[0] == tokenizer.cls_token_id and encoded[-1] == tokenizer.sep_token_id
    assert tokenizer.unk_token_id not in encoded
    assert tokenizer.decode(encoded, skip_special_tokens=True) == text.lower()  # uncased WordPiece
    # a word absent from the corpus is cut into pieces of the vocabulary, and comes back whole
    pieces = tokenizer.tokenize("worldpeace")
    assert len(pieces) > 1 and pieces[1].startswith("##")
    assert tokenizer.convert_tokens_to_string(pieces) == "worldpeace"


def test_alphabet_limit_covers_the_text_hand_checked():
    from collections import Counter

    from hf_ffn.mlm.tokenizer import alphabet_limit, character_counts

    counts = Counter({"a": 9000, "b": 900, "c": 99, "d": 1})  # cumulative shares 0.9, 0.99, 0.9999, 1
    assert alphabet_limit(counts, 4096) == 3  # 99.95% needs a, b and c; d (0.01%) reads as [UNK]
    assert alphabet_limit(counts, 4096, coverage=0.9) == 1 and alphabet_limit(counts, 4096, coverage=1.0) == 4
    assert alphabet_limit(counts, 10) == 2  # (10 - 5 special tokens) // 2: each character and its ## form
    with pytest.raises(ValueError, match=r"coverage has value 1.5; allowed: a share in \(0, 1\]"):
        alphabet_limit(counts, 4096, coverage=1.5)
    # BERT's normalisation first: case and accents folded, whitespace not counted
    assert character_counts(["Ab é\n", "a"]) == Counter({"a": 2, "b": 1, "e": 1})


def test_train_tokenizer_keeps_its_vocabulary_for_pieces_in_a_text_of_many_characters():
    """A real corpus holds thousands of rare characters (CJK, symbols): WordPiece's trainer puts every character it
    sees into the vocabulary before any piece, so a 4,096 vocabulary trained on the study's 40M words was 3,760
    single characters and read "next" as ne ##x ##t. `train_tokenizer` keeps the characters covering 99.95%."""
    from transformers import BertTokenizer

    from hf_ffn.mlm.tokenizer import train_tokenizer

    english = "the next year the new bridge would open to traffic in the spring of the year . " * 1000
    rare = [chr(0x4E00 + i) for i in range(150)]  # each once: 150 of 400k characters, 0.04% together
    documents = [english] * 5 + rare

    def single_characters(tokenizer) -> int:
        return sum(len(token.removeprefix("##")) == 1 for token in tokenizer.get_vocab())

    trained = train_tokenizer(documents, vocab_size=200)
    assert len(trained) <= 200 and single_characters(trained) <= 2 * 21  # the sentence's 21 distinct characters
    assert trained.tokenize("the next year") == ["the", "next", "year"]
    assert trained.tokenize(chr(0x4E00)) == ["[UNK]"]
    # negative control: the trainer without the limit fills the vocabulary with the characters
    unlimited = BertTokenizer().train_new_from_iterator(documents, vocab_size=200)
    assert single_characters(unlimited) >= 150
    assert unlimited.tokenize("the next year") != ["the", "next", "year"]


def test_train_tokenizer_keeps_every_character_a_text_needs_and_its_vocab_size():
    from hf_ffn.mlm.tokenizer import train_tokenizer

    chinese = ["".join(chr(0x4E00 + (7 * i + j) % 300) for j in range(600)) for i in range(20)]  # 300, evenly
    trained = train_tokenizer(chinese, vocab_size=1024)
    assert trained.tokenize(chr(0x4E00) + chr(0x4E00 + 299)) == [chr(0x4E00), chr(0x4E00 + 299)]  # no [UNK]
    small = train_tokenizer(["the next year, the new bridge would open to traffic in the spring."] * 50, 30)
    assert len(small) <= 30  # 12 characters fit: (30 - 5) // 2


def test_packing_counts_hand_checked(tokenizer):
    # single letters are in every WordPiece alphabet, so each word is one token: a document of n words is n + 2
    # tokens ([CLS] ... [SEP]); 5 + 2 and 8 + 2 = 17 tokens → 4 blocks of 4, the last token dropped
    documents = ["a b c d e", "f g h i j k l m"]
    blocks = mlm_blocks(documents, tokenizer, 4)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    letter = {c: tokenizer.convert_tokens_to_ids(c) for c in "abcdefghijklm"}
    assert len(blocks) == 4
    assert blocks["input_ids"] == [
        [cls, letter["a"], letter["b"], letter["c"]],
        [letter["d"], letter["e"], sep, cls],
        [letter["f"], letter["g"], letter["h"], letter["i"]],
        [letter["j"], letter["k"], letter["l"], letter["m"]],
    ]  # the last [SEP] is the remainder
    assert blocks["special_tokens_mask"] == [[1, 0, 0, 0], [0, 0, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]]


def test_bert_masking_15_percent_and_80_10_10(tokenizer):
    """One seeded batch of N = 64 × 128 tokens, [CLS] at the start of each row. Each rate is checked within 4
    binomial standard deviations (a false alarm about 1 in 16,000 seeds; the seed is fixed, so the test is
    deterministic): selected p = 0.15 of the N' non-special tokens, sd √(p(1−p)/N') ≈ 0.0040; of the n ≈ 1,200
    selected, [MASK] 0.8 (sd √(0.8·0.2/n) ≈ 0.012), a random token 0.1 and the token kept 0.1 (sd ≈ 0.0087). A random
    replacement that draws the original token (probability 1/100) counts as kept: +0.001, inside the tolerance."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, len(tokenizer), (64, 128), generator=generator)
    ids[:, 0] = tokenizer.cls_token_id
    special = torch.zeros_like(ids)
    special[:, 0] = 1
    rows = [{"input_ids": i, "special_tokens_mask": s} for i, s in zip(ids.tolist(), special.tolist(), strict=True)]
    masked = masking_collator(tokenizer, mlm_probability=0.15, seed=0)(rows)  # one call, its own seeded generator
    selected = masked["labels"] != -100
    assert not selected[:, 0].any()  # special tokens are never chosen
    assert torch.equal(masked["labels"][selected], ids[selected])  # labels are the original tokens
    n_candidates, n = ids.numel() - 64, selected.sum().item()
    assert abs(n / n_candidates - 0.15) < 4 * math.sqrt(0.15 * 0.85 / n_candidates)
    inputs = masked["input_ids"][selected]
    is_mask = inputs == tokenizer.mask_token_id
    kept = inputs == ids[selected]
    random_token = ~is_mask & ~kept
    for observed, p in ((is_mask, 0.8), (random_token, 0.1), (kept, 0.1)):
        rate = observed.float().mean().item()
        assert abs(rate - p) < 4 * math.sqrt(p * (1 - p) / n), (rate, p, n)
    assert torch.equal(masked["input_ids"][~selected], ids[~selected])  # the other 85% untouched


def test_held_out_split_whole_documents_fixed_by_seed():
    documents = [f"document {i}" for i in range(20)]
    train, held_out = held_out_split(documents, 10, seed=3)
    assert len(held_out) == 2 and len(train) == 18 and sorted(train + held_out) == sorted(documents)
    assert held_out_split(documents, 10, seed=3) == (train, held_out)
    assert held_out_split(documents, 10, seed=4) != (train, held_out)
    with pytest.raises(ValueError, match="--train_files: need at least two documents"):
        held_out_split(["one"], 10, seed=0)


# ---------------------------------------------------------------------------------------------------------------
# Sizes: the parameter-matched width and the report's counts
# ---------------------------------------------------------------------------------------------------------------
def test_matched_glu_width_rounding_and_counts():
    # 2/3 · 1024 = 682.7 → 680, the nearest multiple of 8 (−0.4% FFN weights; 688 would be +0.8%), not LLaMA's
    # multiple of 256 rounded up (768, +12.5%); 2/3 · 4096 = 2730.7 → 2728; a tie goes up: 2/3 · 12 = 8 → 8
    assert ffn_width("swiglu", 1024) == 680 and ffn_width("geglu", 3072) == 2048
    assert ffn_width("reglu", 4096) == 2728 and ffn_width("reglu", 12, multiple_of=8) == 8
    assert ffn_width("reglu", 18, multiple_of=4) == 12 and ffn_width("reglu", 30, multiple_of=8) == 24  # 20 → 24
    assert ffn_width("gelu", 1024) == 1024 and ffn_width("relu", 1024, "matched") == 1024
    assert ffn_width("swiglu", 1024, "keep") == 1024 and ffn_width("swiglu", 1024, "700") == 700
    assert ffn_width("swiglu", 1024, multiple_of=64) == 704
    with pytest.raises(ValueError, match="--ffn_width has unknown value 'wide'"):
        ffn_width("swiglu", 1024, "wide")
    config = FfnBertConfig(
        vocab_size=8192,
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=680,
        ffn_type="swiglu",
    )
    report = ffn_report(config, standard_width=1024)
    # weights: gate_proj and up_proj 256×680 each, down_proj 680×256; the standard FFN 256×1024 and 1024×256
    assert report["ffn_weights"] == 3 * 256 * 680 == 522_240
    assert report["standard"]["ffn_weights"] == 2 * 256 * 1024 == 524_288
    assert report["ffn_flops_per_token"] == 2 * 522_240  # a multiply-add = 2 FLOPs
    assert report["ffn_flops_per_token_all_layers"] == 4 * 2 * 522_240
    biases = 2 * 680 + 256  # gate_proj, up_proj and down_proj biases
    assert report["ffn_params_all_layers"] == 4 * (522_240 + biases)
    assert report["ffn_params_vs_standard"] == pytest.approx((522_240 + biases) / (524_288 + 1024 + 256))


# ---------------------------------------------------------------------------------------------------------------
# Sparse prediction
# ---------------------------------------------------------------------------------------------------------------
def masked_batch(seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, TINY["vocab_size"], (3, 17), generator=generator)
    labels = torch.full_like(ids, -100)
    chosen = torch.rand(ids.shape, generator=generator) < 0.15
    chosen[0, 1] = True  # at least one
    labels[chosen] = ids[chosen]
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


@pytest.mark.parametrize(
    "variant", [{}, {"ffn_type": "swiglu", "layer_norm_position": "pre"}], ids=["bert", "swiglu-pre"]
)
def test_sparse_prediction_same_loss_logits_of_masked_rows_only(variant):
    """The loss is the same cross-entropy over the same rows: the head's matmuls run on n_masked rows instead of
    batch × seq (BLAS may sum in another order for another row count: `assert_equal_but_row_count`), and the mean is
    taken over the same terms, possibly in another order; fp32, so |Δloss| ≤ 1e-6 · loss (about n · ε for the
    n ≤ 10 terms' sum, ε = 1.2e-7)."""
    torch.manual_seed(0)
    model = FfnBertForMaskedLM(tiny_config(**variant)).eval()
    batch = masked_batch()
    selected = batch["labels"] != -100
    full = model(**batch)
    model.config.sparse_prediction = True
    sparse = model(**batch)
    assert sparse.logits.shape == (selected.sum().item(), TINY["vocab_size"])  # masked rows only
    assert_equal_but_row_count(sparse.logits, full.logits[selected], "logits of the masked positions")
    assert sparse.loss.item() == pytest.approx(full.loss.item(), rel=1e-6)
    # without labels the head decodes every position (the fill-mask pipeline's case), as upstream
    assert torch.equal(model(input_ids=batch["input_ids"]).logits, full.logits.detach())
    # negative control: the rows next to the masked ones are other rows
    assert not torch.allclose(sparse.logits, full.logits[selected.roll(1, dims=1)], atol=1e-3)


def test_sparse_prediction_off_is_upstream_bert_bit_for_bit(tmp_path):
    torch.manual_seed(0)
    model = FfnBertForMaskedLM(tiny_config()).eval()
    model.save_pretrained(tmp_path)
    upstream = BertForMaskedLM.from_pretrained(tmp_path).eval()  # the same weights under BERT's names
    batch = masked_batch(1)
    ours, theirs = model(**batch), upstream(**batch)
    assert torch.equal(ours.logits, theirs.logits) and torch.equal(ours.loss, theirs.loss)
    assert model(**batch, return_dict=False)[1].shape == (3, 17, TINY["vocab_size"])


def test_sparse_prediction_field_validated():
    with pytest.raises(ValueError, match="sparse_prediction must be True or False, got 'yes'"):
        tiny_config(sparse_prediction="yes")


# ---------------------------------------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("placement, ffn_type", [("post", "swiglu"), ("pre", "gelu")])
def test_three_step_run_from_scratch(corpus, tmp_path, placement, ffn_type):
    outcome = pretrain(corpus, tmp_path / "run", "--layer_norm_position", placement, "--ffn_type", ffn_type)
    results = outcome["results"]
    assert [entry["step"] for entry in outcome["log_history"] if "loss" in entry] == [1, 2, 3]
    # a new model's loss is near a uniform guess over the 100-token vocabulary, ln 100 = 4.61
    assert abs(results["before_loss"] - math.log(100)) < 0.5
    assert math.isfinite(results["eval_loss"]) and results["eval_perplexity"] == pytest.approx(
        math.exp(results["eval_loss"])
    )
    width = ffn_width(ffn_type, 64)  # swiglu: 2/3 · 64 = 42.7 → 40; gelu: 64
    assert outcome["ffn"]["intermediate_size"] == width == (40 if ffn_type == "swiglu" else 64)
    weights = (3 if ffn_type == "swiglu" else 2) * 32 * width
    assert outcome["ffn"]["ffn_weights"] == weights and outcome["ffn"]["ffn_flops_per_token"] == 2 * weights
    assert ("standard" in outcome["ffn"]) == (ffn_type == "swiglu")
    assert outcome["tokens_seen"] == 3 * 4 * 32 and outcome["epochs"] == 12 / outcome["blocks"]["train"]
    # no evaluation inside training: the training seconds are Trainer's train_runtime (the final evaluation, after
    # training, was once subtracted from it)
    assert outcome["train_seconds"] == results["train_runtime"] > 0
    assert 0 < outcome["data_seconds"] < outcome["wall_seconds"]
    assert (
        f"FFN width {width}" in outcome["summary"]
        and f"{outcome['ffn']['ffn_params_all_layers']:,}" in outcome["summary"]
    )
    saved = json.loads((tmp_path / "run" / "run_info.json").read_text())
    assert saved["ffn"] == outcome["ffn"] and saved["tokenizer"]["vocab_size"] == 100
    # the context-free floors of the same maskings (hand-checked in tests/test_floors.py) in the report and line
    floors = saved["floors"]
    assert floors["copy_aware_mask"] == pytest.approx(floors["unigram_mask"]) and floors["smoothing"] == "add-one"
    assert floors["training_tokens_counted"] > 0 and math.isfinite(floors["copy_aware"])
    assert f"vs unigram floor {floors['unigram_mask']:.4f}" in outcome["summary"]
    assert f"vs copy-aware context-free floor {floors['copy_aware']:.4f}" in outcome["summary"]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["layer_norm_position"], config["ffn_type"], config["intermediate_size"]) == (
        placement,
        ffn_type,
        width,
    )
    assert config["sparse_prediction"] is False  # an execution switch of the run, not saved
    # the model card says every weight is new (it once listed the letters of "all": "newly initialised: 3 (a, l, l)")
    card = (tmp_path / "run" / "README.md").read_text()
    assert "built from scratch: every weight newly initialised (seeded by --seed), then pre-trained" in card
    assert "(a, l, l)" not in card
    assert "Pre-trained from scratch with hf_ffn (`fill-mask`) on " in card and "Fine-tuned" not in card
    model = AutoModelForMaskedLM.from_pretrained(tmp_path / "run")
    assert type(model).__name__ == "FfnBertForMaskedLM"
    # the trained tokenizer truncates to the model's 512 positions (it once kept 1e30: a long text then crashed the
    # model at its position embeddings)
    trained = AutoTokenizer.from_pretrained(tmp_path / "run")
    assert trained.model_max_length == config["max_position_embeddings"] == 512
    long = trained(["the"] * 600, is_split_into_words=True, truncation=True, return_tensors="pt")
    assert long["input_ids"].shape == (1, 512)
    model(**long)  # fits the position embeddings
    # the MLM decoder is tied to the word embeddings
    assert model.cls.predictions.decoder.weight.data_ptr() == model.bert.embeddings.word_embeddings.weight.data_ptr()


class TrainingBatches(TrainerCallback):
    """Records the input ids and labels of every training forward (a forward pre-hook set at `on_train_begin`)."""

    def __init__(self):
        self.batches = []

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        def record(module, _args, inputs):
            if module.training:
                self.batches.append((inputs["input_ids"].clone(), inputs["labels"].clone()))

        model.register_forward_pre_hook(record, with_kwargs=True)


def test_every_variant_of_a_seed_trains_on_the_same_blocks_and_masks(corpus, tokenizer, tmp_path):
    """The pre-training study's paired design: with one seed and one tokenizer, runs that differ only in the FFN or
    the LayerNorm placement see the same blocks in the same order with the same masks (dropout on, as in training:
    its draws have the same shapes for every variant). Another seed gives other masks (the control)."""
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    shared = ("--tokenizer_name", str(tmp_path / "tokenizer"))
    seen = {}
    for name, variant in {
        "gelu": ("--ffn_type", "gelu"),
        "swiglu": ("--ffn_type", "swiglu"),
        "relu pre-ln": ("--ffn_type", "relu", "--layer_norm_position", "pre"),
        "gelu seed 1": ("--ffn_type", "gelu", "--seed", "1"),
    }.items():
        recorder = TrainingBatches()
        pretrain(corpus, tmp_path / name, *shared, *variant, callbacks=[recorder])
        seen[name] = recorder.batches
    assert len(seen["gelu"]) == 3 and seen["gelu"][0][0].shape == (4, 32)
    for name in ("swiglu", "relu pre-ln"):
        assert all(
            torch.equal(ids, other_ids) and torch.equal(labels, other_labels)
            for (ids, labels), (other_ids, other_labels) in zip(seen["gelu"], seen[name], strict=True)
        ), name
    assert not torch.equal(seen["gelu"][0][1], seen["gelu seed 1"][0][1])


class StartWeights(TrainerCallback):
    """Records the model's weights as training begins."""

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.weights = {name: value.clone() for name, value in model.state_dict().items()}


def test_seed_modules_by_name_shares_the_weights_outside_the_ffn(corpus, tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    shared = ("--tokenizer_name", str(tmp_path / "tokenizer"), "--seed_modules_by_name", "true")
    start = {}
    for name in ("gelu", "swiglu"):
        recorder = StartWeights()
        outcome = pretrain(corpus, tmp_path / name, *shared, "--ffn_type", name, steps=1, callbacks=[recorder])
        start[name] = recorder.weights
        assert len(outcome["ffn_output_rms_at_start"]) == outcome["model"]["sizes"]["num_hidden_layers"]
    outside = [name for name in start["gelu"] if ".mlp." not in name]
    assert outside and all(torch.equal(start["gelu"][name], start["swiglu"][name]) for name in outside)
    with pytest.raises(ValueError, match="--seed_modules_by_name .* --model_name_or_path"):
        PretrainingArguments(seed_modules_by_name=True, model_name_or_path="some/checkpoint")


class Forwards(TrainerCallback):
    """Records the inputs of every forward, training and evaluation (a forward pre-hook set at `on_train_begin`, so
    the "before" evaluation is not seen: it runs first)."""

    def __init__(self):
        self.inputs = []

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        def record(module, _args, inputs):
            self.inputs.append(
                (module.training, {key: value.clone() for key, value in inputs.items() if value is not None})
            )

        model.register_forward_pre_hook(record, with_kwargs=True)


def test_compressed_corpus_validation_file_per_document_attention_and_fixed_maskings(corpus, tmp_path):
    """`hf-ffn mlm` on an .xz part of documents separated by empty lines, a .gz validation file, per-document
    attention, two fixed maskings and only-[MASK] replacement: the report counts them, every forward gets
    `position_ids` that restart at each document, every chosen training token shows [MASK], and the evaluation after
    training scores both maskings of the held-out blocks, which differ."""
    texts = [file.read_text().strip() for file in sorted(corpus.glob("*.txt"))]
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "part-0.txt.xz").write_bytes(lzma.compress("\n\n".join(texts[:5]).encode()))
    (folder / "ignored.txt").write_text("not read: --file_pattern '*.txt.xz'")
    (tmp_path / "held-out.txt.gz").write_bytes(gzip.compress(texts[5].encode()))
    recorder = Forwards()
    outcome = pretrain(
        folder,
        tmp_path / "run",
        *("--file_pattern", "*.txt.xz", "--validation_files", str(tmp_path / "held-out.txt.gz")),
        *("--attention_scope", "document", "--eval_maskings", "2", "--cache_dir", str(tmp_path / "cache")),
        *("--mlm_probability", "0.3", "--mask_replace_prob", "1", "--random_replace_prob", "0"),
        callbacks=[recorder],
    )
    assert outcome["documents"] == {"train": 5, "validation": 1}
    blocks = outcome["blocks"]
    assert (blocks["validation_maskings"], blocks["attention_scope"]) == (2, "document")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "run")
    training = [inputs for is_training, inputs in recorder.inputs if is_training]
    evaluation = [inputs for is_training, inputs in recorder.inputs if not is_training]
    labels = torch.cat([inputs["labels"] for inputs in evaluation])
    assert len(training) == 3 and len(labels) == 2 * blocks["validation"] > 0
    for inputs in training + evaluation:
        positions, ids = inputs["position_ids"], inputs["input_ids"]
        starts = positions == 0
        assert starts[:, 0].all() and torch.equal(
            positions[:, 1:][~starts[:, 1:]], positions[:, :-1][~starts[:, 1:]] + 1
        )
        chosen = inputs["labels"] != -100
        assert (ids[chosen] == tokenizer.mask_token_id).all()
    assert any((inputs["position_ids"][:, 1:] == 0).any() for inputs in training)  # a document starts within a block
    assert not torch.equal(labels[: blocks["validation"]], labels[blocks["validation"] :])  # two maskings


def test_resumed_run_ends_with_the_uninterrupted_runs_weights(corpus, tmp_path):
    """A 4-step run over 8 blocks (2 steps an epoch), and the same run resumed from its step-2 checkpoint (copied
    into a fresh output folder, as after a crash). Trainer restores weights, optimizer, scheduler and RNG states and
    the tokenizer comes from the checkpoint, so the same ops run on the same data, masks and dropout draws.
    Asserted: the same steps, the same logged losses and bit-identical final weights (CPU ops are deterministic).

    The checkpoint is at an epoch boundary on purpose: the training masks are drawn from the global torch RNG when a
    batch is collated, and accelerate's data loader collates one batch ahead, so within an epoch the batch after a
    checkpoint is masked before the RNG state the checkpoint saved; a run resumed mid-epoch trains on other masks of
    the same blocks (same steps and schedule, not the same losses)."""
    run = ("--save_steps", "2", "--max_train_samples", "8")
    straight = pretrain(corpus, tmp_path / "straight", *run, steps=4)
    interrupted = tmp_path / "resumed"
    interrupted.mkdir()
    shutil.copytree(tmp_path / "straight" / "checkpoint-2", interrupted / "checkpoint-2")
    resumed = pretrain(corpus, interrupted, *run, "--resume_from_checkpoint", "last", steps=4)

    def losses(outcome):
        return [(e["step"], e["loss"]) for e in outcome["log_history"] if "loss" in e]

    assert losses(resumed) == losses(straight) and [step for step, _ in losses(resumed)] == [1, 2, 3, 4]
    assert "before_loss" not in resumed["results"]  # a resumed run does not score its fresh initial weights
    # issue 42: the resumed run's time is its own 2 steps' (a checkpoint's evaluations are not subtracted again), and
    # the finished folder keeps the whole log history (the study records a saved run from it)
    assert (straight["resumed_from_step"], resumed["resumed_from_step"]) == (0, 2)
    saved_state = json.loads((interrupted / "trainer_state.json").read_text())
    assert saved_state["global_step"] == 4 and saved_state["log_history"] == json.loads(
        json.dumps(resumed["log_history"])
    )
    assert resumed["results"]["eval_loss"] == straight["results"]["eval_loss"]
    a = FfnBertForMaskedLM.from_pretrained(tmp_path / "straight").state_dict()
    b = FfnBertForMaskedLM.from_pretrained(interrupted).state_dict()
    assert a.keys() == b.keys() and [key for key in a if not torch.equal(a[key], b[key])] == []
    c = FfnBertForMaskedLM.from_pretrained(interrupted / "checkpoint-2").state_dict()
    assert not torch.equal(a["bert.embeddings.word_embeddings.weight"], c["bert.embeddings.word_embeddings.weight"])


def weights(folder: Path) -> dict:
    return FfnBertForMaskedLM.from_pretrained(folder).state_dict()


def test_short_blocks_first_is_two_trainer_runs_under_one_schedule(corpus, tokenizer, tmp_path):
    """The sequence-length warm-up (`--short_block_length 8 --short_block_steps 2` of a 4-step run at blocks of 32,
    batch 4): its first phase trains 2 steps on blocks of 8, 16 a batch (the same 128 tokens a step), in
    output_dir/short_blocks; the run resumes from its checkpoint-2 at blocks of 32. Asserted against the two runs
    written out by hand (a run at blocks of 8 stopped at step 2, then a run at blocks of 32 resumed from its
    checkpoint): bit-identical final weights; the learning rate of each step is the plain 4-step run's (one linear
    schedule over --max_steps, not one per phase); the batches' shapes; the report names the phases. One tokenizer
    for all (WordPiece training can break ties between equally frequent pairs differently from run to run)."""
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    shared = ("--tokenizer_name", str(tmp_path / "tokenizer"))
    recorder = TrainingBatches()
    warm_options = ("--short_block_length", "8", "--short_block_steps", "2")
    warm = pretrain(corpus, tmp_path / "warm", *shared, *warm_options, steps=4, callbacks=[recorder])
    assert [tuple(ids.shape) for ids, _ in recorder.batches] == [(16, 8), (16, 8), (4, 32), (4, 32)]
    first = tmp_path / "warm" / "short_blocks"
    first_info = json.loads((first / "run_info.json").read_text())
    first_results = json.loads((first / "all_results.json").read_text())
    assert (first_info["steps"], first_info["blocks"]["tokens_per_block"], first_info["tokens_seen"]) == (2, 8, 256)
    assert json.loads((first / "trainer_state.json").read_text())["train_batch_size"] == 16
    assert (first / "checkpoint-2").is_dir()
    assert (warm["steps"], warm["resumed_from_step"], warm["tokens_seen"]) == (4, 2, 4 * 4 * 32)
    assert warm["blocks"]["tokens_per_block"] == 32
    summary = warm["short_blocks"]
    assert (summary["short_block_length"], summary["short_block_steps"], summary["batch_size"]) == (8, 2, 16)
    assert summary["output_dir"] == str(first) and summary["eval_mask_loss"] == first_results["eval_mask_loss"] > 0
    assert json.loads((tmp_path / "warm" / "run_info.json").read_text())["short_blocks"] == summary
    card = (tmp_path / "warm" / "README.md").read_text()
    assert "- pre-trained on blocks of 32 tokens, 512 tokens in 4 steps" in card
    assert "- sequence-length warm-up: steps 1-2 on blocks of 8 tokens (16 a batch, as many tokens a step" in card

    by_hand = tmp_path / "by_hand"
    short = ("--max_seq_length", "8", "--per_device_train_batch_size", "16")  # after pretrain()'s 32 and 4
    pretrain(corpus, by_hand / "short", *shared, *short, steps=4, callbacks=[StopAtStep(2)])
    pretrain(corpus, by_hand, *shared, "--resume_from_checkpoint", str(by_hand / "short" / "checkpoint-2"), steps=4)
    a, b = weights(tmp_path / "warm"), weights(by_hand)
    assert a.keys() == b.keys() and [key for key in a if not torch.equal(a[key], b[key])] == []

    plain = pretrain(corpus, tmp_path / "plain", *shared, steps=4)

    def rates(*outcomes):
        return {e["step"]: e["learning_rate"] for o in outcomes for e in o["log_history"] if "learning_rate" in e}

    first_log = {"log_history": json.loads((first / "trainer_state.json").read_text())["log_history"]}
    assert rates(first_log, warm) == rates(plain) and sorted(rates(plain)) == [1, 2, 3, 4]
    assert not torch.equal(
        a["bert.embeddings.word_embeddings.weight"],
        weights(tmp_path / "plain")["bert.embeddings.word_embeddings.weight"],
    )  # the warm-up trained on other blocks


def test_short_blocks_resumed_skips_the_finished_first_phase(corpus, tmp_path):
    """A warm-up interrupted after its first phase (its folder copied into a fresh output folder) resumes with
    --resume_from_checkpoint last: the first phase is not trained again and the run ends with the uninterrupted
    run's weights, bit for bit."""
    warm = ("--short_block_length", "8", "--short_block_steps", "2")
    pretrain(corpus, tmp_path / "straight", *warm, steps=4)
    (tmp_path / "resumed").mkdir()
    shutil.copytree(tmp_path / "straight" / "short_blocks", tmp_path / "resumed" / "short_blocks")
    stamp = (tmp_path / "resumed" / "short_blocks" / "model.safetensors").stat().st_mtime_ns
    # resumed with another K than the first phase ran: refused (it was once recorded as run, 2 steps trained as 3)
    other = ("--short_block_length", "8", "--short_block_steps", "3", "--resume_from_checkpoint", "last")
    with pytest.raises(ValueError, match=re.escape("ran 2 steps on blocks of 8; resume with --short_block_length 8")):
        pretrain(corpus, tmp_path / "resumed", *other, steps=4)
    resumed = pretrain(corpus, tmp_path / "resumed", *warm, "--resume_from_checkpoint", "last", steps=4)
    assert (tmp_path / "resumed" / "short_blocks" / "model.safetensors").stat().st_mtime_ns == stamp
    assert resumed["resumed_from_step"] == 2 and resumed["short_blocks"]["short_block_length"] == 8
    a, b = weights(tmp_path / "straight"), weights(tmp_path / "resumed")
    assert [key for key in a if not torch.equal(a[key], b[key])] == []


def test_short_blocks_fresh_run_trains_its_first_phase_again(corpus, tokenizer, tmp_path):
    """A fresh run (no --resume_from_checkpoint) never takes a first phase it finds: where an earlier run's
    first phase is finished it is refused (it once went on silently from that phase, whatever its seed); where only
    that phase's checkpoint-K is (cut before its save), it is refused too, naming --resume_from_checkpoint last (it
    once trained the phase again over those checkpoints); with that folder deleted it trains the phase again and ends
    with the weights of the same run in an empty folder, bit for bit. One tokenizer for all (WordPiece training
    breaks ties variously)."""
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    warm = ("--tokenizer_name", str(tmp_path / "tokenizer"), "--short_block_length", "8", "--short_block_steps", "2")
    pretrain(corpus, tmp_path / "other_seed", *warm, "--seed", "1", steps=4)
    (tmp_path / "again").mkdir()
    shutil.copytree(tmp_path / "other_seed" / "short_blocks", tmp_path / "again" / "short_blocks")
    with pytest.raises(FileExistsError, match=re.escape("is a finished earlier run; give --resume_from_checkpoint")):
        pretrain(corpus, tmp_path / "again", *warm, steps=4)
    for name in ("config.json", "run_info.json", "all_results.json"):  # as if cut after checkpoint-2
        (tmp_path / "again" / "short_blocks" / name).unlink()
    # issue 55: a fresh run never silently trains over an interrupted run's checkpoints: it says how to go on
    with pytest.raises(FileExistsError, match=r"short_blocks/checkpoint-2\); go on with --resume_from_checkpoint last"):
        pretrain(corpus, tmp_path / "again", *warm, steps=4)
    shutil.rmtree(tmp_path / "again" / "short_blocks")  # the user's choice to start again
    pretrain(corpus, tmp_path / "again", *warm, steps=4)
    pretrain(corpus, tmp_path / "clean", *warm, steps=4)
    a, b = weights(tmp_path / "again"), weights(tmp_path / "clean")
    assert [key for key in a if not torch.equal(a[key], b[key])] == []
    c = weights(tmp_path / "other_seed")
    assert not torch.equal(a["bert.embeddings.word_embeddings.weight"], c["bert.embeddings.word_embeddings.weight"])


def test_short_blocks_resumed_after_a_first_phase_cut_before_its_save_says_so(corpus, tmp_path):
    """Resumed where the first phase has its checkpoint-K but not its final evaluation: the phase is not trained
    again, the run goes on, and the missing evaluation is said (a warning, `eval_mask_loss`/`summary` None)."""
    warm = ("--short_block_length", "8", "--short_block_steps", "2")
    pretrain(corpus, tmp_path / "straight", *warm, steps=4)
    (tmp_path / "cut").mkdir()
    shutil.copytree(
        tmp_path / "straight" / "short_blocks" / "checkpoint-2", tmp_path / "cut" / "short_blocks" / "checkpoint-2"
    )
    hf_logging.set_verbosity_warning()
    with CaptureLogger(pretraining_module.logger) as captured:
        resumed = pretrain(corpus, tmp_path / "cut", *warm, "--resume_from_checkpoint", "last", steps=4)
    assert "checkpoint-2 but no final evaluation (cut before its save)" in captured.out
    assert resumed["short_blocks"]["summary"] is None and resumed["short_blocks"]["eval_mask_loss"] is None
    assert not (tmp_path / "cut" / "short_blocks" / "config.json").exists()
    a, b = weights(tmp_path / "straight"), weights(tmp_path / "cut")
    assert [key for key in a if not torch.equal(a[key], b[key])] == []


def test_stop_at_step_ends_the_schedule_there_and_resumes_under_it(corpus, tokenizer, tmp_path):
    """`--stop_at_step 2` of a 4-step schedule: the saved model is the plain 4-step run's checkpoint-2, bit for bit;
    the learning rates of steps 1-2 are the plain run's (not a 2-step schedule's, which decays to 0 at step 2); the
    report, the summary line and the model card say where it stopped. Resumed from its checkpoint-2 (in another
    --output_dir: the stopped one holds a finished model) it trains steps 3-4 at the plain run's rates; resumed with
    a --stop_at_step it has reached it is refused."""
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    shared = ("--tokenizer_name", str(tmp_path / "tokenizer"))
    plain = pretrain(corpus, tmp_path / "plain", *shared, "--save_steps", "2", steps=4)
    stopped = pretrain(corpus, tmp_path / "stopped", *shared, "--stop_at_step", "2", steps=4)
    a, b = weights(tmp_path / "stopped"), weights(tmp_path / "plain" / "checkpoint-2")
    assert a.keys() == b.keys() and [key for key in a if not torch.equal(a[key], b[key])] == []
    assert (tmp_path / "stopped" / "checkpoint-2").is_dir()
    assert (stopped["steps"], stopped["stop_at_step"]) == (2, {"step": 2, "max_steps": 4, "reached": True})
    summary = stopped["summary"]
    assert re.search(
        r"after 2 steps, 256 tokens \([0-9.]+ epochs\), stopped there: --stop_at_step 2 of a --max_steps 4 ", summary
    )
    card = (tmp_path / "stopped" / "README.md").read_text()
    assert "- stopped after step 2: --stop_at_step 2 of a --max_steps 4 schedule (the learning rate not decayed" in card

    def rates(outcome):
        return {e["step"]: e["learning_rate"] for e in outcome["log_history"] if "learning_rate" in e}

    assert rates(stopped) == {step: rate for step, rate in rates(plain).items() if step <= 2}
    assert rates(stopped)[2] > 0  # 1e-3 linearly decayed over 4 steps: 5e-4 after step 2
    checkpoint = str(tmp_path / "stopped" / "checkpoint-2")
    with pytest.raises(ValueError, match=re.escape(f"--stop_at_step 2: the checkpoint resumed from ({checkpoint})")):
        pretrain(
            corpus, tmp_path / "on", *shared, "--stop_at_step", "2", "--resume_from_checkpoint", checkpoint, steps=4
        )
    # under another schedule the rate would jump at step 3 (a review found 5.28e-4 -> 9.57e-4): refused
    with pytest.raises(ValueError, match=re.escape(f"--max_steps 5 with --resume_from_checkpoint {checkpoint}: ")):
        pretrain(corpus, tmp_path / "on", *shared, "--resume_from_checkpoint", checkpoint, steps=5)
    with pytest.raises(FileExistsError, match=re.escape("run in another --output_dir with --resume_from_checkpoint")):
        pretrain(corpus, tmp_path / "stopped", *shared, "--resume_from_checkpoint", "last", steps=4)
    resumed = pretrain(corpus, tmp_path / "on", *shared, "--resume_from_checkpoint", checkpoint, steps=4)
    assert f"- resumed from `{checkpoint}` at step 2" in (tmp_path / "on" / "README.md").read_text()
    assert (resumed["steps"], resumed["resumed_from_step"], resumed["stop_at_step"]) == (4, 2, None)
    assert rates(resumed) == rates(plain) and sorted(rates(plain)) == [1, 2, 3, 4]


def test_stop_at_step_after_a_warm_up_is_the_second_phases(corpus, tokenizer, tmp_path):
    """With a sequence-length warm-up (first phase 2 steps) and --stop_at_step 3 of 4: the first phase runs its 2 steps
    and its report says the stop was not reached there; the run stops after step 3, and its card says both."""
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    warm = ("--tokenizer_name", str(tmp_path / "tokenizer"), "--short_block_length", "8", "--short_block_steps", "2")
    outcome = pretrain(corpus, tmp_path / "run", *warm, "--stop_at_step", "3", steps=4)
    first = json.loads((tmp_path / "run" / "short_blocks" / "run_info.json").read_text())
    assert (first["steps"], first["stop_at_step"]["reached"]) == (2, False) and "stopped there" not in first["summary"]
    assert (outcome["steps"], outcome["stop_at_step"]) == (3, {"step": 3, "max_steps": 4, "reached": True})
    card = (tmp_path / "run" / "README.md").read_text()
    assert "- sequence-length warm-up: steps 1-2 on blocks of 8 tokens" in card
    assert "- stopped after step 3: --stop_at_step 3 of a --max_steps 4 schedule" in card


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--stop_at_step", "0"), "--stop_at_step must be a positive integer, got 0"),
        (("--stop_at_step", "4"), "--stop_at_step 4 must be below --max_steps 4 (the schedule's last step"),
        (
            ("--stop_at_step", "2", "--short_block_length", "8", "--short_block_steps", "2"),
            "--stop_at_step 2 must be above --short_block_steps 2 (the first phase runs its steps whole)",
        ),
    ],
)
def test_stop_at_step_bad_values_name_the_option(corpus, tmp_path, extra, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        pretrain(corpus, tmp_path / "run", *extra, steps=4)
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())  # refused before any work
    with pytest.raises(ValueError, match=re.escape("--stop_at_step 2: give --max_steps (the run stops at a step")):
        check_stop_at_step(2, TrainingArguments(output_dir=str(tmp_path), num_train_epochs=1))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--short_block_length", "8"), "--short_block_length needs --short_block_steps"),
        (("--short_block_steps", "2"), "--short_block_steps needs --short_block_length"),
        (("--short_block_length", "32", "--short_block_steps", "2"), "below --max_seq_length 32, got 32"),
        (("--short_block_length", "8", "--short_block_steps", "0"), "--short_block_steps must be a positive"),
        (("--short_block_length", "8", "--short_block_steps", "4"), "--short_block_steps 4 must be below --max_s"),
        (
            ("--short_block_length", "7", "--short_block_steps", "2"),
            "--short_block_length 7 must divide --per_device_train_batch_size × --max_seq_length = 128 tokens a step "
            "(the first phase's batch is 128 / 7 blocks); allowed here: 4, 8, 16",
        ),
        (
            ("--short_block_length", "8", "--short_block_steps", "2", "--resume_from_checkpoint", "x/checkpoint-2"),
            "give 'last'",
        ),
        (
            ("--short_block_length", "8", "--short_block_steps", "2", "--resume_from_checkpoint", "last"),
            "--resume_from_checkpoint last with --short_block_length 8 --short_block_steps 2: no checkpoint-N folder",
        ),
        (
            ("--short_block_length", "8", "--short_block_steps", "2", "--early_stopping_patience", "2"),
            "--early_stopping_patience 2 with --short_block_length 8 --short_block_steps 2: not supported",
        ),
    ],
)
def test_short_blocks_bad_values_name_the_option(corpus, tmp_path, extra, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        pretrain(corpus, tmp_path / "run", *extra, steps=4)
    assert not (tmp_path / "run" / "short_blocks").exists()  # refused before any work


def test_continued_pretraining_of_a_converted_checkpoint_reports_the_new_head(corpus, tokenizer, tmp_path):
    source = tmp_path / "bert"
    BertModel(BertConfig(**{**TINY, "vocab_size": len(tokenizer)})).save_pretrained(source)  # no MLM head
    tokenizer.save_pretrained(source)
    outcome = pretrain(corpus, tmp_path / "run", "--model_name_or_path", str(source), "--ffn_type", "geglu", steps=1)
    new = outcome["conversion"].get("new_weights", outcome["conversion"].get("new", []))
    assert any(key.startswith("cls.predictions.") for key in new), new
    assert outcome["mlm_head"] == "newly initialised" and outcome["model"]["from"] == str(source)
    assert outcome["ffn"]["ffn_type"] == "geglu" and outcome["ffn"]["intermediate_size"] == TINY["intermediate_size"]
    assert "standard" not in outcome["ffn"]  # a checkpoint keeps its width unless --ffn_width says otherwise


def test_short_blocks_from_a_headless_checkpoint_note_the_new_head_once(corpus, tokenizer, tmp_path):
    """A warm-up from a checkpoint without an MLM head: the note that its head is newly initialised is logged once
    (by the first phase; the second resumes the head trained since, and once logged the note again), and the report
    still says the run's head was new."""
    source = tmp_path / "bert"
    BertModel(BertConfig(**{**TINY, "vocab_size": len(tokenizer)})).save_pretrained(source)  # no MLM head
    tokenizer.save_pretrained(source)
    warm = ("--short_block_length", "8", "--short_block_steps", "1")
    hf_logging.set_verbosity_warning()
    with CaptureLogger(pretraining_module.logger) as captured:
        outcome = pretrain(corpus, tmp_path / "run", "--model_name_or_path", str(source), *warm, steps=2)
    assert captured.out.count("has no MLM head") == 1
    assert outcome["mlm_head"] == "newly initialised" and outcome["resumed_from_step"] == 1


def test_bad_arguments_name_the_flag(corpus, tmp_path, capsys):
    with pytest.raises(ValueError, match="--hidden_size apply to a model from scratch"):
        PretrainingArguments(model_name_or_path="some/bert", hidden_size=64)
    with pytest.raises(ValueError, match="--ffn_type has unknown value 'swish-glu'"):
        PretrainingArguments(ffn_type="swish-glu")
    with pytest.raises(ValueError, match="--vocab_size applies to a trained tokenizer"):
        PretrainingArguments(tokenizer_name="bert-base-uncased", vocab_size=100)
    with pytest.raises(SystemExit) as exit_info:
        pretraining_main(
            [
                "--train_files",
                str(corpus),
                "--output_dir",
                str(tmp_path),
                "--num_attention_heads",
                "5",
                "--hidden_size",
                "32",
                "--vocab_size",
                "100",
                "--use_cpu",
                "true",
            ]
        )
    assert exit_info.value.code == 2
    assert "hidden_size (32) must be divisible by num_attention_heads (5)" in capsys.readouterr().err
    # one file of one document: the message names the options that fix it, exit status 2
    (tmp_path / "one.txt").write_text("one document\nof two paragraphs\n")
    with pytest.raises(SystemExit) as exit_info:
        pretraining_main(["--train_files", str(tmp_path / "one.txt"), "--output_dir", str(tmp_path / "one")])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "hf-ffn mlm: error: --train_files: need at least two documents" in error and "got 1" in error
    assert all(option in error for option in ("--document_boundary", "--document_start_regex", "--validation_files"))


def test_help_shows_defaults():
    text = pretraining_parser().format_help()
    assert "--glu_multiple_of GLU_MULTIPLE_OF" in text and "(default: 8)" in text
    assert "--sparse_prediction" in text and "--file_pattern" in text and "(default: *.txt)" in text
    assert isinstance(PretrainingDataArguments(train_files=["x"]).validation_split_percentage, int)
    assert TrainingArguments  # parsed together with Trainer's own arguments


def test_bf16_where_a_cuda_device_supports_it(tmp_path, monkeypatch):
    plain, on_cpu = (
        TrainingArguments(output_dir=str(tmp_path / name), report_to="none", use_cpu=cpu)
        for name, cpu in (("plain", False), ("cpu", True))
    )
    assert use_bf16_where_available(plain) is bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    plain.bf16, plain.mixed_precision = False, "no"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # after the arguments chose their device
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert use_bf16_where_available(plain) is False  # e.g. a V100
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert use_bf16_where_available(on_cpu) is False and on_cpu.mixed_precision == "no"  # --use_cpu wins
    assert use_bf16_where_available(plain) is True and (plain.bf16, plain.mixed_precision) == (True, "bf16")


def test_a_resume_from_a_checkpoint_that_save_total_limit_deletes_reports_its_step(corpus, tmp_path):
    """Issue 42's continued units found it: with --save_total_limit 1 the Trainer deletes the checkpoint it resumed
    from once it saves the next one, and the run read that checkpoint's step after training (FileNotFoundError).
    Now the step is read before training."""
    run = ("--save_steps", "2", "--max_train_samples", "8", "--save_total_limit", "1")
    pretrain(corpus, tmp_path / "first", *run, "--stop_at_step", "2", steps=4)  # the same 4-step schedule
    folder = tmp_path / "continued"
    folder.mkdir()
    shutil.copytree(tmp_path / "first" / "checkpoint-2", folder / "checkpoint-2")
    continued = pretrain(corpus, folder, *run, "--resume_from_checkpoint", "last", steps=4)
    assert continued["resumed_from_step"] == 2 and continued["steps"] == 4
    assert not (folder / "checkpoint-2").exists() and (folder / "checkpoint-4").is_dir()  # the Trainer's rotation


def test_training_seconds_after_a_resume_subtract_only_this_processs_evaluations():
    history = [{"step": 2, "eval_runtime": 5.0}, {"step": 2, "loss": 1.0}, {"step": 4, "eval_runtime": 1.5}]
    assert training_seconds(history, 10.0) == 3.5  # a run from step 0: both evaluations ran inside its train()
    assert training_seconds(history, 10.0, resumed_from_step=2) == 8.5  # the step-2 one ran before the resume


def test_documents_start_where_the_regex_matches():
    wiki = " = Lobster = \n text one \n = = Biology = = \n more \n = Crab = \n text two \n"
    assert split_documents([wiki, "plain"], r"^ = [^=]") == [
        " = Lobster = \n text one \n = = Biology = = \n more \n",
        " = Crab = \n text two \n",
        "plain",
    ]
    assert split_documents(["intro\n = A = \nbody"], r"^ = [^=]") == ["intro\n", " = A = \nbody"]
    assert split_documents(["a", "b"], None) == ["a", "b"]
    with pytest.raises(ValueError, match=r"--document_start_regex '\(' is not a regular expression"):
        PretrainingDataArguments(train_files=["x"], document_start_regex="(")


def test_mlm_without_output_dir_saves_under_out_mlm_and_runs_again(corpus, tmp_path, monkeypatch, capsys):
    """Without --output_dir, `hf-ffn mlm` saves to out/mlm/scratch (not Trainer's ./trainer_output), says so, and
    the same command run again saves beside it in out/mlm/scratch-2 instead of being refused."""
    monkeypatch.chdir(tmp_path)
    argv = ["--train_files", str(corpus), "--max_seq_length", "32", "--max_steps", "1"]
    argv += ["--per_device_train_batch_size", "4", "--report_to", "none", "--use_cpu", "true"]
    argv += ["--disable_tqdm", "true", "--cache_dir", str(tmp_path / "cache"), "--vocab_size", "100", *SMALL]
    for expected in ("scratch", "scratch-2"):
        assert pretraining_main(argv) == 0
        assert f"saved to {Path('out') / 'mlm' / expected} (report: run_info.json)" in capsys.readouterr().out
        assert (tmp_path / "out" / "mlm" / expected / "config.json").is_file()
    assert not (tmp_path / "trainer_output").exists()


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("--max_steps", "0", "an integer >= 1 or -1"),
        ("--learning_rate", "-1", "a number > 0"),
        ("--num_train_epochs", "0", "a number > 0"),
    ],
)
def test_mlm_refuses_numeric_options_before_reading_data(option, value, allowed, tmp_path, capsys):
    """`hf-ffn mlm --max_steps 0` (and lr <= 0, 0 epochs) is refused before any data is read (the train file does
    not even exist), naming the option, the value and what is allowed, exit status 2."""
    argv = ["--train_files", str(tmp_path / "missing.txt"), "--output_dir", str(tmp_path / "run"), option, value]
    with pytest.raises(SystemExit) as exit_info:
        pretraining_main(argv)
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"{option} has value " in error and f"allowed: {allowed}" in error
