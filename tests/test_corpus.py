"""The MLM data path (`hf_ffn.training.corpus`): corpus → documents → blocks → masks, on tiny corpora written here.

Compressed input (.xz, .gz, .bz2 written with the stdlib), documents at empty lines / per file / by a regex, json
and parquet rows, a validation file, the held-out split of whole documents, the one-document error, blocks and
their per-document `position_ids` hand-checked, a packed block with per-document attention against each document
alone, the masking options, fixed maskings, and the tokenization cache."""

import bz2
import gzip
import importlib.util
import json
import lzma
import random
from pathlib import Path

import pytest
import torch
from transformers.utils import logging as hf_logging

from hf_ffn.mlm.arguments import PretrainingDataArguments
from hf_ffn.mlm.tokenizer import train_tokenizer
from hf_ffn.modeling_ffn_bert import FfnBertForMaskedLM
from hf_ffn.training.blocks import documents_to_blocks, fixed_maskings, masking_collator
from hf_ffn.training.collators import PaddingFreeCollator
from hf_ffn.training.corpus import corpus_files, held_out_split, load_corpus

from .conftest import assert_equal_but_row_count, tiny_config

LETTERS = "abcdefghijklmnopqrstuvwxyz"
# Three documents, paragraphs on lines, separated by one empty line (the format of ../shared/data/pretraining)
TEXT = "a b c\nd e\n\nf g h i\n\nj k\nl m n\n"
DOCUMENTS = ["a b c\nd e", "f g h i", "j k\nl m n"]


@pytest.fixture(autouse=True)
def quiet():
    hf_logging.set_verbosity_error()
    yield
    hf_logging.set_verbosity_warning()


@pytest.fixture(scope="module")
def tokenizer():
    """WordPiece over single letters: each letter of these texts is one token (its alphabet is in every vocabulary)."""
    rng = random.Random(0)
    return train_tokenizer([" ".join(rng.choice(LETTERS) for _ in range(400))], vocab_size=60)


def corpus(tmp_path: Path, **options) -> dict:
    """`load_corpus` with a cache in `tmp_path`, as plain lists."""
    loaded = load_corpus(cache_dir=str(tmp_path / "cache"), **options)
    return {split: list(dataset["text"]) for split, dataset in loaded.items()}


def letters(tokenizer, text: str) -> list[int]:
    return tokenizer.convert_tokens_to_ids(text.split())


# ---------------------------------------------------------------------------------------------------------------
# Corpus → documents
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix, compress", [(".xz", lzma.compress), (".gz", gzip.compress), (".bz2", bz2.compress)])
def test_compressed_text_reads_as_the_plain_text(tmp_path, suffix, compress):
    (tmp_path / f"part.txt{suffix}").write_bytes(compress(TEXT.encode()))
    (tmp_path / "plain.txt").write_text(TEXT)
    files = {"train_files": [str(tmp_path / f"part.txt{suffix}")], "validation_files": [str(tmp_path / "plain.txt")]}
    assert corpus(tmp_path, **files) == {"train": DOCUMENTS, "validation": DOCUMENTS}


def test_damaged_empty_and_zstd_files_are_named(tmp_path):
    (tmp_path / "damaged.txt.xz").write_bytes(b"not xz data at all")
    with pytest.raises(ValueError, match=r"--train_files: .*damaged.txt.xz could not be read as text files: LZMAError"):
        corpus(tmp_path, train_files=[str(tmp_path / "damaged.txt.xz")])
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(ValueError, match=r"--validation_files: file .*empty.txt' is empty"):
        corpus(tmp_path, train_files=[str(tmp_path / "damaged.txt.xz")], validation_files=[str(tmp_path / "empty.txt")])
    (tmp_path / "blank.txt").write_text("\n \n\n")
    with pytest.raises(ValueError, match=r"--train_files: no document in .*blank.txt \(the text is blank\)"):
        corpus(tmp_path, train_files=[str(tmp_path / "blank.txt")])
    zstd = tmp_path / "part.txt.zst"
    zstd.write_bytes(b"(zstd frames)")
    if importlib.util.find_spec("zstandard") is None:  # the pinned environment has no zstandard
        with pytest.raises(ValueError, match=r"part.txt.zst' is zstd-compressed, .* pip install zstandard"):
            corpus_files([zstd])
    else:
        assert corpus_files([zstd]) == [zstd]


def test_empty_line_file_and_regex_documents(tmp_path):
    plain = tmp_path / "a.txt"
    plain.write_text("\n\n" + TEXT.replace("\n\nj", "\n\n\n\nj") + "\n \n")  # leading, doubled, blank-tail lines
    (tmp_path / "b.txt").write_text(" = T1 = \nx y\n = T2 = \nz\n")
    split = {"validation_files": [str(tmp_path / "b.txt")]}
    assert corpus(tmp_path, train_files=[str(plain)], **split)["train"] == DOCUMENTS  # empty_line: the default
    by_file = corpus(tmp_path, train_files=[str(tmp_path)], document_boundary="file", **split)["train"]
    assert by_file == [TEXT.replace("\n\nj", "\n\n\n\nj").strip(), "= T1 = \nx y\n = T2 = \nz"]
    by_regex = corpus(tmp_path, train_files=[str(tmp_path / "b.txt")], document_start_regex=r"^ = [^=]", **split)
    assert by_regex["train"] == ["= T1 = \nx y", "= T2 = \nz"]


def test_non_utf8_bytes_read_as_latin1(tmp_path):
    (tmp_path / "latin.txt").write_bytes("café au lait\n\nna\u00efve\n".encode("latin-1"))
    (tmp_path / "utf8.txt").write_bytes("café\n".encode())
    loaded = corpus(tmp_path, train_files=[str(tmp_path / "latin.txt")], validation_files=[str(tmp_path / "utf8.txt")])
    assert loaded == {"train": ["café au lait", "naïve"], "validation": ["café"]}


def test_json_and_parquet_rows_are_documents(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"id": i, "body": text} for i, text in enumerate(DOCUMENTS)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "docs.parquet")
    for name in ("docs.jsonl", "docs.parquet"):
        files = {"train_files": [str(tmp_path / name)], "validation_files": [str(tmp_path / name)]}
        assert corpus(tmp_path, text_column="body", **files) == {"train": DOCUMENTS, "validation": DOCUMENTS}
        with pytest.raises(ValueError, match=r"--text_column 'text': no such column .* columns: id, body"):
            corpus(tmp_path, **files)
    with pytest.raises(ValueError, match=r"--train_files: the files mix formats \(json, parquet\)"):
        corpus_files([tmp_path / "docs.jsonl", tmp_path / "docs.parquet"])


def test_held_out_split_is_whole_documents_seeded(tmp_path):
    texts = [f"document {i} " + " ".join(LETTERS[i % 26] * (i + 1)) for i in range(40)]
    (tmp_path / "c.txt.xz").write_bytes(lzma.compress("\n\n".join(texts).encode()))
    loaded = corpus(tmp_path, train_files=[str(tmp_path / "c.txt.xz")], validation_split_percentage=10, split_seed=3)
    assert len(loaded["validation"]) == 4 and len(loaded["train"]) == 36
    assert sorted(loaded["train"] + loaded["validation"]) == sorted(texts)  # every document whole, in one split
    assert (loaded["train"], loaded["validation"]) == held_out_split(texts, 10, seed=3)  # the list helper's split
    again = corpus(tmp_path, train_files=[str(tmp_path / "c.txt.xz")], validation_split_percentage=10, split_seed=3)
    assert again == loaded
    other = corpus(tmp_path, train_files=[str(tmp_path / "c.txt.xz")], validation_split_percentage=10, split_seed=4)
    assert other["validation"] != loaded["validation"]


def test_one_document_error_names_the_options_that_fix_it(tmp_path):
    (tmp_path / "one.txt").write_text("a single document\nof two lines\n")
    with pytest.raises(ValueError) as error:
        load_corpus([str(tmp_path / "one.txt")], cache_dir=str(tmp_path / "cache"))
    message = str(error.value)
    assert message.startswith("--train_files: need at least two documents")
    assert "got 1" in message
    for option in ("--document_boundary empty_line", "--document_start_regex", "--validation_files"):
        assert option in message
    (tmp_path / "held.txt").write_text("held-out text\n")  # the fix: a validation file
    assert corpus(tmp_path, train_files=[str(tmp_path / "one.txt")], validation_files=[str(tmp_path / "held.txt")])


def test_data_argument_errors():
    for options, message in (
        ({"document_boundary": "regex"}, r"--document_boundary regex and --document_start_regex None"),
        ({"document_boundary": "file", "document_start_regex": "^x"}, r"--document_boundary file and"),
        ({"document_boundary": "lines"}, r"--document_boundary has unknown value 'lines'; allowed: empty_line"),
        ({"attention_scope": "row"}, r"--attention_scope has unknown value 'row'; allowed: block, document"),
        ({"mask_replace_prob": 0.9, "random_replace_prob": 0.2}, r"must be at most 1"),
        ({"random_replace_prob": -0.1}, r"--random_replace_prob must be in \[0, 1\], got -0.1"),
        ({"eval_maskings": 0}, r"--eval_maskings must be a positive integer, got 0"),
    ):
        with pytest.raises(ValueError, match=message):
            PretrainingDataArguments(train_files=["x"], **options)
    assert PretrainingDataArguments(train_files=["x"], document_start_regex="^x").document_boundary == "regex"
    assert PretrainingDataArguments(train_files=["x"]).document_boundary == "empty_line"


# ---------------------------------------------------------------------------------------------------------------
# Documents → blocks
# ---------------------------------------------------------------------------------------------------------------
def test_blocks_and_per_document_positions_hand_checked(tokenizer):
    from datasets import Dataset

    # [CLS] a b c [SEP] = 5 tokens, [CLS] d e [SEP] = 4, [CLS] f g h i j [SEP] = 7: 16 tokens → 3 blocks of 5
    documents = Dataset.from_dict({"text": ["a b c", "d e", "f g h i j"]})
    blocks = documents_to_blocks(documents, tokenizer, 5, attention_scope="document")
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    stream = [cls, *letters(tokenizer, "a b c"), sep, cls, *letters(tokenizer, "d e"), sep]
    stream += [cls, *letters(tokenizer, "f g h i j"), sep]
    assert blocks["input_ids"] == [stream[0:5], stream[5:10], stream[10:15]]  # the 16th token dropped
    assert blocks["special_tokens_mask"] == [[1, 0, 0, 0, 1], [1, 0, 0, 1, 1], [0, 0, 0, 0, 0]]
    # each document and each block start counts from 0; block 3 starts inside document 3
    assert blocks["position_ids"] == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 0], [0, 1, 2, 3, 4]]
    whole = documents_to_blocks(documents, tokenizer, 5)
    assert whole.column_names == ["input_ids", "special_tokens_mask"]
    assert whole["input_ids"] == blocks["input_ids"]


def test_a_packed_block_attends_per_document_like_each_document_alone(tokenizer):
    """Two documents in one block with `attention_scope="document"` give each document's hidden states and logits
    as that document run alone (`assert_equal_but_row_count`: `torch.equal` where BLAS does not pick its kernel by
    the number of rows; within 16 float32 epsilons of the largest value where it does), in eval mode; the
    same block with one position sequence (every token attends to the whole block) does not."""
    from datasets import Dataset

    texts = ["a b c d e f", "g h i j k l m n o"]  # 8 + 11 tokens = one block of 19
    blocks = documents_to_blocks(Dataset.from_dict({"text": texts}), tokenizer, 19, attention_scope="document")
    block = {key: torch.tensor(blocks[key]) for key in ("input_ids", "position_ids")}
    assert block["position_ids"].tolist() == [list(range(8)) + list(range(11))]
    torch.manual_seed(0)
    model = FfnBertForMaskedLM(tiny_config(vocab_size=len(tokenizer), hidden_dropout_prob=0.0)).eval()
    with torch.no_grad():
        packed = model(**block, output_hidden_states=True)
        whole = model(input_ids=block["input_ids"]).logits
        for document, (start, end) in zip(texts, [(0, 8), (8, 19)], strict=True):
            alone = model(**tokenizer(document, return_tensors="pt"), output_hidden_states=True)
            assert_equal_but_row_count(packed.logits[:, start:end], alone.logits, document)
            for packed_layer, alone_layer in zip(packed.hidden_states, alone.hidden_states, strict=True):
                assert_equal_but_row_count(packed_layer[:, start:end], alone_layer, document)
            # attending across the block: other logits, by far more than the bound above (16 eps x max |logit| < 1e-5)
            assert (whole[:, start:end] - alone.logits).abs().max() > 1e-4


def test_collators_keep_per_document_positions(tokenizer):
    from datasets import Dataset

    blocks = documents_to_blocks(Dataset.from_dict({"text": ["a b", "c d e f g"]}), tokenizer, 4, "document")
    rows = [blocks[i] for i in range(len(blocks))]
    assert [row["position_ids"] for row in rows] == [[0, 1, 2, 3], [0, 1, 2, 3]]  # [CLS] a b [SEP] | [CLS] c d e
    batch = masking_collator(tokenizer, seed=0)(rows)
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3], [0, 1, 2, 3]]
    flat = PaddingFreeCollator(then=masking_collator(tokenizer, seed=0))(rows)
    assert flat["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1, 2, 3]]


def test_tokenization_is_cached_and_reused(tmp_path, tokenizer):
    (tmp_path / "c.txt.gz").write_bytes(gzip.compress(("\n\n".join(["a b c d e f g"] * 30)).encode()))

    def blocks():
        documents = load_corpus([str(tmp_path / "c.txt.gz")], cache_dir=str(tmp_path / "cache"))
        return documents_to_blocks(documents, tokenizer, 8)

    first = blocks()
    arrow = {path: path.stat().st_mtime_ns for path in (tmp_path / "cache").rglob("*.arrow")}
    cache_files = [entry["filename"] for entry in first["train"].cache_files]
    assert all(name.startswith(str(tmp_path / "cache")) for name in cache_files) and cache_files
    second = blocks()
    assert [entry["filename"] for entry in second["train"].cache_files] == cache_files  # the same Arrow files
    assert {path: path.stat().st_mtime_ns for path in (tmp_path / "cache").rglob("*.arrow")} == arrow  # unwritten
    assert second["train"]["input_ids"] == first["train"]["input_ids"]


# ---------------------------------------------------------------------------------------------------------------
# Blocks → masks
# ---------------------------------------------------------------------------------------------------------------
def letter_blocks(tokenizer, count: int = 400, length: int = 64, seed: int = 0):
    from datasets import Dataset

    rng = random.Random(seed)
    texts = [" ".join(rng.choice(LETTERS) for _ in range(length - 2)) for _ in range(count)]
    return documents_to_blocks(Dataset.from_dict({"text": texts}), tokenizer, length)


def kinds(masked, blocks, tokenizer) -> dict[str, int]:
    """Counts of labelled positions by what the input shows: [MASK], the original token (kept), another token."""
    inputs, labels = torch.tensor(masked["input_ids"]), torch.tensor(masked["labels"])
    original = torch.tensor(blocks["input_ids"]).repeat(len(inputs) // len(blocks), 1)
    chosen = labels != -100
    assert torch.equal(labels[chosen], original[chosen])  # labels are the original tokens
    assert torch.equal(inputs[~chosen], original[~chosen])  # nothing else changed
    assert not chosen[torch.tensor(blocks["special_tokens_mask"]).repeat(len(inputs) // len(blocks), 1).bool()].any()
    shown = inputs[chosen]
    mask = int((shown == tokenizer.mask_token_id).sum())
    kept = int((shown == labels[chosen]).sum())
    return {"chosen": int(chosen.sum()), "mask": mask, "kept": kept, "random": int(chosen.sum()) - mask - kept}


def test_masking_options_split_the_chosen_tokens(tokenizer):
    blocks = letter_blocks(tokenizer)  # 400 blocks of 62 letters between [CLS] and [SEP]: 24,800 maskable tokens
    maskable = 400 * 62
    counts = kinds(fixed_maskings(blocks, tokenizer, seed=0, mlm_probability=0.3), blocks, tokenizer)
    # Binomial counts: within 4 standard deviations of the expected value (a seeded draw: it fails for a wrong rule)
    chosen = counts["chosen"]
    assert abs(chosen - 0.3 * maskable) < 4 * (maskable * 0.3 * 0.7) ** 0.5
    # a random token is drawn from the whole vocabulary (60): it is the original 1/60, [MASK] 1/60 of the time
    expected = {"mask": 0.8 + 0.1 / 60, "kept": 0.1 + 0.1 / 60, "random": 0.1 - 0.2 / 60}
    for kind, p in expected.items():
        assert abs(counts[kind] - p * chosen) < 4 * (chosen * p * (1 - p)) ** 0.5, (kind, counts)
    only_mask = kinds(
        fixed_maskings(blocks, tokenizer, mask_replace_prob=1.0, random_replace_prob=0.0), blocks, tokenizer
    )
    assert only_mask["mask"] == only_mask["chosen"] > 0
    only_kept = kinds(
        fixed_maskings(blocks, tokenizer, mask_replace_prob=0.0, random_replace_prob=0.0), blocks, tokenizer
    )
    assert only_kept["kept"] == only_kept["chosen"] > 0


def test_fixed_maskings_repeat_across_calls_and_differ_by_seed(tokenizer):
    blocks = letter_blocks(tokenizer, count=30, length=16)
    three = fixed_maskings(blocks, tokenizer, count=3, seed=5)
    assert len(three) == 90 and three.column_names == ["input_ids", "labels"]
    assert fixed_maskings(blocks, tokenizer, count=3, seed=5)["labels"] == three["labels"]  # the same every call
    parts = [three.select(range(30 * k, 30 * (k + 1))) for k in range(3)]
    assert parts[0]["input_ids"] == fixed_maskings(blocks, tokenizer, seed=5)["input_ids"]  # masking 0: seed 5
    assert parts[1]["labels"] == fixed_maskings(blocks, tokenizer, seed=6)["labels"]  # masking 1: seed 6
    assert len({str(part["labels"]) for part in parts}) == 3  # three different maskings
