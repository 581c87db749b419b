"""The context-free floors of an MLM evaluation (`hf_ffn.mlm.floors`), hand-computed on a tiny vocabulary."""

import math

import numpy as np
import pytest
from datasets import Dataset
from transformers import BertTokenizerFast

from hf_ffn.mlm.floors import context_free_losses, mlm_floors, never_chosen_ids, unigram_counts, unigram_distribution

# ids: 0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP], 4 [MASK] (special), 5 and 6 (words): V = 7
SPECIAL, MASK, V = (0, 1, 2, 3, 4), 4, 7
TRAIN = Dataset.from_dict({"input_ids": [[2, 5, 5, 3]], "special_tokens_mask": [[1, 0, 0, 1]]})
TRAIN_UNK = Dataset.from_dict({"input_ids": [[2, 5, 1, 3]], "special_tokens_mask": [[1, 0, 0, 1]]})


def test_unigram_counts_skip_special_tokens_and_smooth_add_one():
    counts = unigram_counts(TRAIN, V)
    assert counts.tolist() == [0, 0, 0, 0, 0, 2, 0]
    # add-one over the two word ids: q(5) = 3/4, q(6) = 1/4, specials 0
    assert unigram_distribution(counts, SPECIAL).tolist() == [0, 0, 0, 0, 0, 0.75, 0.25]


@pytest.fixture
def tokenizer(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\nb\n")
    return BertTokenizerFast(str(tmp_path / "vocab.txt"))


def test_unknown_token_in_the_text_is_smoothed_like_a_word(tokenizer):
    # [UNK] (id 1) is special but stands in the text and can be masked: q ∝ (0, 1 + 1, 0, 0, 0, 1 + 1, 0 + 1)
    q = unigram_distribution(unigram_counts(TRAIN_UNK, V), (0, 2, 3, 4))
    assert q.tolist() == [0, 0.4, 0, 0, 0, 0.4, 0.2]
    assert tokenizer.unk_token_id not in never_chosen_ids(tokenizer)
    assert {tokenizer.mask_token_id, tokenizer.cls_token_id} <= set(never_chosen_ids(tokenizer))


def test_unigram_counts_reject_ids_outside_the_vocabulary():
    with pytest.raises(ValueError, match="token id 5 .* vocabulary of 5 ids"):
        unigram_counts(TRAIN, 5)


def test_floors_by_hand():
    # p_keep = 0.1, uniform draw 0.1/7 = 1/70; shown token 6: P(v=6) ∝ 0.1·q(6) + 1/70 = 1/40 + 1/70 = 11/280.
    # kept (label 6 shown 6): q(6)(0.1 + 1/70)/(11/280) = (1/4)(8/70)/(11/280) = 8/11
    # random (label 5 shown 6): q(5)(1/70)/(11/280) = (3/4)(1/70)/(11/280) = 3/11
    maskings = Dataset.from_dict(
        {
            "input_ids": [[2, 4, 6, 6, 4, 3]],
            "labels": [[-100, 5, 6, 5, 6, -100]],  # [MASK] of 5, kept 6, 5 replaced by 6, [MASK] of 6
        }
    )
    floors = mlm_floors(TRAIN, maskings, V, MASK, SPECIAL, 0.8, 0.1)
    mask = (math.log(4 / 3) + math.log(4)) / 2
    assert floors["unigram_mask"] == pytest.approx(mask, rel=1e-12)
    assert floors["copy_aware_mask"] == pytest.approx(mask, rel=1e-12)
    assert floors["copy_aware_kept"] == pytest.approx(math.log(11 / 8), rel=1e-12)
    assert floors["copy_aware_random"] == pytest.approx(math.log(11 / 3), rel=1e-12)
    overall = (math.log(4 / 3) + math.log(4) + math.log(11 / 8) + math.log(11 / 3)) / 4
    assert floors["copy_aware"] == pytest.approx(overall, rel=1e-12)
    assert floors["training_tokens_counted"] == 2 and floors["smoothing"] == "add-one"


def test_copy_aware_posterior_sums_to_one_for_every_shown_token():
    rng = np.random.default_rng(0)
    q = np.r_[np.zeros(5), rng.dirichlet(np.ones(20))]  # 5 special ids, 20 words
    words = np.arange(5, 25)
    for shown in range(25):  # a random draw may show any id, special ones included
        inputs = np.full((1, len(words)), shown)
        _, copy = context_free_losses(inputs, words[None, :], q, MASK, 0.8, 0.1)
        assert np.exp(-copy).sum() == pytest.approx(1.0, rel=1e-12)


def test_copy_aware_without_random_replacement_copies_with_certainty():
    q = np.array([0, 0, 0, 0, 0, 0.75, 0.25])
    unigram, copy = context_free_losses(np.array([[6, 4]]), np.array([[6, 6]]), q, MASK, 0.9, 0.0)
    assert copy.tolist() == [0.0, -math.log(0.25)] and unigram.tolist() == [-math.log(0.25)] * 2
