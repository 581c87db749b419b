"""The helpers behind studies/switches/grad_norms.py and studies/switches/mlm_ln_demo.py, on tiny fixtures."""

import math

import pytest
import torch

from hf_ffn.modeling_ffn_bert import FfnBertForMaskedLM
from hf_ffn.training.blocks import mlm_blocks
from hf_ffn.training.readers import read_text_documents
from studies.switches.layer_norm_study import (
    ffn_gradient_norms,
    mask_once,
    masked_batches,
    mlm_config,
    split_documents,
    train_mlm,
    train_tokenizer,
    unigram_entropy,
    xavier_init_,
)

SMALL = dict(
    hidden_size=16, num_attention_heads=2, intermediate_size=24, num_hidden_layers=3, max_position_embeddings=16
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("speeches")
    words = "the union is strong and the state of our nation is sound we shall act now".split()
    g = torch.Generator().manual_seed(0)
    for i in range(3):
        text = " ".join(words[j] for j in torch.randint(len(words), (400,), generator=g).tolist())
        (folder / f"{2000 + i}-Speaker.txt").write_text(text + ".\n", encoding="utf-8")
    (folder / "1999-Latin1.txt").write_bytes("caf\xe9 society is strong.".encode("latin-1"))  # not UTF-8
    (folder / "SOURCE.txt").write_text("provenance, not a document")
    named = read_text_documents([folder], "[0-9]*.txt")  # the library's reader, as the scripts call it
    documents = [text for _, text in named]
    tokenizer = train_tokenizer(documents, vocab_size=120)
    return folder, named, documents, tokenizer


def test_documents_sorted_pattern_only_and_latin1_decoded(corpus):
    _, named, documents, _ = corpus
    assert [name for name, _ in named] == [
        "1999-Latin1.txt",
        "2000-Speaker.txt",
        "2001-Speaker.txt",
        "2002-Speaker.txt",
    ]  # SOURCE.txt is not a document
    assert documents[0] == "caf\xe9 society is strong."  # the Latin-1 file decoded as Latin-1, é kept


def test_unigram_entropy_and_split():
    assert unigram_entropy([[0, 5, 6, 1], [0, 5, 6, 1]], special_ids={0, 1}) == pytest.approx(math.log(2))
    assert split_documents(["a", "b", "c"], 1) == (["a", "b"], ["c"])
    with pytest.raises(ValueError, match="eval_documents must be in 1..2, got 3"):
        split_documents(["a", "b", "c"], 3)


def test_gradient_norms_are_those_of_down_proj(corpus):
    _, _, documents, tokenizer = corpus
    blocks = mlm_blocks(documents, tokenizer, 16)
    batches = masked_batches(blocks, tokenizer, batch_size=2, num_batches=2)
    # the library's fixed masks, cut into batches: the same masked tokens for every model compared
    masked = mask_once(blocks.select(range(4)), tokenizer, mlm_probability=0.15, seed=0)
    assert torch.equal(torch.cat([b["labels"] for b in batches]), masked["labels"])
    assert all(b["input_ids"].shape == (2, 16) and (b["labels"] != -100).any() for b in batches)
    with pytest.raises(ValueError, match="only 4 blocks of text, need batch_size \\* num_batches = 6"):
        masked_batches(blocks.select(range(4)), tokenizer, batch_size=2, num_batches=3)
    torch.manual_seed(0)
    model = xavier_init_(FfnBertForMaskedLM(mlm_config(tokenizer.vocab_size, "pre", **SMALL)))
    norms = ffn_gradient_norms(model, batches)
    expected = []
    for batch in batches:
        model.zero_grad()
        model(**batch).loss.backward()
        expected.append([layer.mlp.down_proj.weight.grad.norm().item() for layer in model.bert.encoder.layer])
    assert norms == pytest.approx([sum(col) / 2 for col in zip(*expected, strict=False)], rel=1e-6)
    assert len(set(norms)) == 3  # one distinct value per layer


def test_train_mlm_uses_a_constant_learning_rate_and_learns(corpus):
    _, _, documents, tokenizer = corpus
    train_docs, eval_docs = split_documents(documents, 1)
    history = train_mlm(
        mlm_config(tokenizer.vocab_size, "post", **SMALL),
        tokenizer,
        mlm_blocks(train_docs, tokenizer, 16),
        mlm_blocks(eval_docs, tokenizer, 16).select(range(8)),
        max_steps=6,
        learning_rate=3e-3,
        batch_size=8,
        eval_steps=3,
    )
    assert history["learning_rate"] == [(step, 3e-3) for step in range(1, 7)]  # logged each step: no warm-up, no decay
    assert [step for step, _ in history["eval"]] == [0, 3, 6]
    assert history["eval"][-1][1] < history["eval"][0][1] - 0.2  # 16 distinct words: it learns within 6 steps
