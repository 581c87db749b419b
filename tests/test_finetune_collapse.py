"""studies/finetune_collapse/finetune_collapse.py: the spread measure against hand-computed values, and the command end
to end on a tiny checkpoint and a tiny STS-B folder written by the test."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer
from transformers.utils import logging as hf_logging

from hf_ffn import FfnBertForMaskedLM, FfnBertModel
from hf_ffn.finetune.tasks import read_stsb

from .conftest import tiny_config
from .test_tasks import write_stsb

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def collapse():
    spec = importlib.util.spec_from_file_location(
        "finetune_collapse", REPO / "studies" / "finetune_collapse" / "finetune_collapse.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_spread_hand_computed(collapse):
    assert collapse.spread(torch.ones(5, 3)) == 0.0  # every input the same vector
    # dimension 0: 1, -1 (unbiased std √2), dimension 1: 0, 0 → mean std √2 / 2; both norms 1
    assert collapse.spread(torch.tensor([[1.0, 0.0], [-1.0, 0.0]])) == pytest.approx(2**0.5 / 2)


def test_weight_change_hand_computed(collapse, tmp_path):
    """‖ΔW‖ / ‖W‖ over a group's tensors together, keys matched across a head's prefix; a head's own weights and a
    weight only one folder has are left out."""
    from safetensors.torch import save_file

    start = {
        "encoder.layer.0.intermediate.dense.weight": torch.tensor([[3.0, 0.0]]),
        "pooler.dense.bias": torch.ones(2),
    }
    start["encoder.layer.0.output.dense.weight"] = torch.tensor([[0.0, 4.0]])  # group ffn 0: ‖W‖ = 5
    start["encoder.final_norm.weight"] = torch.ones(4)  # only in the start
    tuned = {f"bert.{k}": v.clone() for k, v in start.items() if "final_norm" not in k}
    tuned["bert.encoder.layer.0.output.dense.weight"] += torch.tensor([[0.0, 1.0]])  # ‖ΔW‖ = 1
    tuned["classifier.weight"] = torch.ones(1, 2)
    for name, weights in (("start", start), ("tuned", tuned)):
        (tmp_path / name).mkdir()
        save_file(weights, tmp_path / name / "model.safetensors")
    assert collapse.weight_change(tmp_path / "start", tmp_path / "tuned") == {"ffn 0": 0.2, "pooler": 0.0}
    assert collapse.weight_group("roberta.encoder.layer.11.attention.output.LayerNorm.bias") == "attention norm 11"
    assert collapse.weight_group("encoder.layer.2.mlp.gate_proj.weight") == "ffn 2"
    assert collapse.weight_group("encoder.layer.2.output.LayerNorm.weight") == "ffn norm 2"


def test_mean_pooled_head_reads_the_mean_over_real_tokens(collapse):
    from hf_ffn import FfnBertModel

    torch.manual_seed(0)
    model = FfnBertModel(tiny_config(unpad_tokens=False)).eval()
    ids, mask = torch.tensor([[2, 5, 7, 3], [2, 9, 3, 0]]), torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    plain = model(input_ids=ids, attention_mask=mask)
    with collapse.mean_pooled_head():
        pooled = model(input_ids=ids, attention_mask=mask)
    mean = (plain.last_hidden_state * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)  # row 2: its 3 real tokens
    assert torch.equal(pooled.last_hidden_state, plain.last_hidden_state)
    torch.testing.assert_close(pooled.pooler_output, torch.tanh(model.pooler.dense(mean)))  # summation order aside
    assert torch.equal(plain.pooler_output, torch.tanh(model.pooler.dense(plain.last_hidden_state[:, 0])))
    assert torch.equal(model(input_ids=ids, attention_mask=mask).pooler_output, plain.pooler_output)  # restored


def test_measure_reads_cls_from_padded_outputs_whatever_the_saved_switch(collapse, bundled_checkpoint, tmp_path):
    """A folder saved with `unpad_tokens=True` is measured as the same weights saved with it off: the hooks read
    [CLS] from (pairs, seq, hidden) outputs, never from packed (n_real, hidden) ones."""
    hf_logging.set_verbosity_error()
    tokenizer = AutoTokenizer.from_pretrained(bundled_checkpoint)
    for unpad in (False, True):
        torch.manual_seed(0)
        FfnBertForMaskedLM(
            tiny_config(vocab_size=tokenizer.vocab_size, max_position_embeddings=128, unpad_tokens=unpad)
        ).save_pretrained(tmp_path / str(unpad))
    hf_logging.set_verbosity_warning()
    pairs = {
        "sentence1": ["a cat", "the old grey cat sat on the mat today", "dogs"],  # lengths differ: padding
        "sentence2": ["a dog", "it rained", "the dog ran far away from the house"],
    }
    off, on = (collapse.measure(str(tmp_path / str(unpad)), tokenizer, pairs) for unpad in (False, True))
    assert on == off  # the same (padded) ops on the same weights
    assert sorted(on["cls_norms"]) == ["attention 0", "attention 1", "ffn 0", "ffn 1"]


@pytest.mark.parametrize(
    "pooling, freeze",
    [("cls", None), ("mean", None), ("cls", "ffn"), ("cls", "attention"), ("cls", "norms"), ("cls", "encoder")],
)
def test_finetune_collapse_end_to_end(collapse, bundled_checkpoint, tmp_path, pooling, freeze):
    hf_logging.set_verbosity_error()
    tokenizer = AutoTokenizer.from_pretrained(bundled_checkpoint)
    folders = {}
    for name, position in (("post", "post"), ("pre", "pre")):
        torch.manual_seed(0)
        folders[name] = tmp_path / name
        FfnBertForMaskedLM(
            tiny_config(vocab_size=tokenizer.vocab_size, max_position_embeddings=128, layer_norm_position=position)
        ).save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
    data = write_stsb(tmp_path / "stsb")
    output = tmp_path / "out"
    argv = [
        "--baseline",
        str(folders["post"]),
        "--model",
        f"pre-ln={folders['pre']}",
        "--data_dir",
        str(data),
        "--steps",
        "2",
        "--pairs",
        "6",
        "--threads",
        "1",
        "--output_dir",
        str(output),
        "--pooling",
        pooling,
        *(["--freeze", freeze] if freeze else []),
    ]
    try:
        assert collapse.main(argv) == 0
    finally:
        hf_logging.set_verbosity_warning()
    results = json.loads((output / "collapse.json").read_text())
    assert list(results["models"]) == ["baseline", "pre-ln"]
    # "before" is the saved folder itself, measured again here
    pairs = read_stsb(data / "sts-dev.csv")[:6]
    assert results["models"]["pre-ln"]["before"] == collapse.measure(str(folders["pre"]), tokenizer, pairs)  # same ops
    after = results["models"]["baseline"]["after"]
    assert sorted(after["cls_norms"]) == ["attention 0", "attention 1", "ffn 0", "ffn 1"]
    assert 0 < after["spread_cls"] < 1 and 0 < after["spread_mean"] < 1 and 0 < after["dropout_cosine"] < 1
    # two optimizer steps changed the encoder, unless it was frozen: then it measures exactly as before
    assert (after == results["models"]["baseline"]["before"]) == (freeze == "encoder")
    assert -100 <= results["models"]["pre-ln"]["pearson"] <= 100
    change = results["models"]["pre-ln"]["weight_change"]  # the tiny model: 2 layers, a Pre-LN final norm
    groups = {f"{part} {i}" for part in ("attention", "attention norm", "ffn", "ffn norm") for i in (0, 1)}
    assert set(change) == groups | {"embeddings", "final norm"}  # no pooler: an MLM folder has none, so it is new
    norms = {f"{part} norm {i}" for part in ("attention", "ffn") for i in (0, 1)} | {"final norm"}
    still = {g for g in change if g[:-2] == freeze} if freeze in ("ffn", "attention") else norms if freeze else set()
    still = set(change) if freeze == "encoder" else still  # the tiny MLM folder has no pooler: nothing else moved
    assert all(0 < value < 1 for group, value in change.items() if group not in still)  # two Adam steps moved them
    assert [change[group] for group in still] == [0.0] * len(still)  # the frozen groups never moved
    if freeze in ("ffn", "attention"):  # their LayerNorms did
        assert change[f"{freeze} norm 0"] > 0
    report = (output / "collapse.md").read_text()
    assert (
        "| pre-ln |" in report
        and f"pooler reading {pooling}{collapse.FROZEN_TEXT.get(freeze, '')}," in report
        and "Command: `python -m studies.finetune_collapse.finetune_collapse --baseline" in report
    )
    assert not (output / "baseline").exists()  # fine-tuned weights are not kept


def test_finetune_collapse_bad_model_flag(collapse, tmp_path):
    with pytest.raises(ValueError, match=r"--model 'x=.*': '.*' is not a checkpoint folder \(no config.json\)"):
        collapse.main(["--model", f"x={tmp_path}", "--output_dir", str(tmp_path / "out")])
    with pytest.raises(ValueError, match=r"--model 'nonsense': expected NAME=FOLDER"):
        collapse.main(["--model", "nonsense"])
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"--model 'baseline=.*': the name 'baseline' is already taken \(baseline\)"):
        collapse.main(["--model", f"baseline={tmp_path}"])
    with pytest.raises(ValueError, match=r"--steps must be at least 1, got 0"):
        collapse.main(["--steps", "0"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--pairs", "1"], r"--pairs must be at least 2, got 1"),  # spread of one input: NaN
        (["--threads", "-1"], r"--threads must be at least 0, got -1"),  # torch.set_num_threads: RuntimeError
        (["--baseline", "{tmp}/none"], r"--baseline '.*none': expected a checkpoint folder"),
        (["--data_dir", "{tmp}/none"], r"--data_dir: no such folder: '.*none'"),
    ],
)
def test_finetune_collapse_bad_flags_name_the_flag(collapse, tmp_path, argv, message):
    output = tmp_path / "out"
    # a missing --data_dir after the flag under test: a regression fails fast instead of fine-tuning
    argv = [a.format(tmp=tmp_path) for a in argv] + ["--output_dir", str(output), "--data_dir", str(tmp_path / "none")]
    with pytest.raises((ValueError, OSError), match=message):
        collapse.main(argv)
    assert not output.exists()  # rejected before any work


def test_finetune_collapse_report_is_portable(collapse, bundled_checkpoint):
    """The report's command and settings are written as a reader runs them: the bundled checkpoint by name, other
    absolute paths relative to the repository root (`tests/test_docs_paths.py` checks published reports)."""
    data = REPO.parent / "shared" / "data" / "stsb"
    argv = ["--baseline", bundled_checkpoint, "--data_dir", str(data), "--model", f"copy={bundled_checkpoint}"]
    results = {
        "settings": vars(collapse.parse_args(argv)),
        "machine": {"cpu": "cpu", "cores": 2},
        "versions": "versions",
        "load_before": 0.0,
        "load_after": 0.0,
    }
    measured = {"spread_cls": 0.1, "spread_mean": 0.1, "dropout_cosine": 0.9, "cls_norms": {"ffn 0": 1.0}}
    results["models"] = {"baseline": {"before": measured, "after": measured, "pearson": 50.0}}
    line = [x for x in collapse.report(results, argv).splitlines() if x.startswith("Command:")][0]
    assert str(REPO.parent) not in line and "site-packages" not in line
    assert "--data_dir ../shared/data/stsb" in line


def test_finetune_collapse_report_models_of_other_depths(collapse):
    """The norm table has a column per sublayer of every model (layer order), empty where a model has none."""

    def measured(layers):
        norms = {f"{kind} {i}": float(i + 1) for i in range(layers) for kind in ("attention", "ffn")}
        return {"spread_cls": 0.1, "spread_mean": 0.1, "dropout_cosine": 0.9, "cls_norms": norms}

    results = {
        "settings": vars(collapse.parse_args([])),
        "machine": {"cpu": "cpu", "cores": 2},
        "versions": "v",
        "load_before": 0.0,
        "load_after": 0.0,
        "models": {
            "one": {"before": measured(1), "after": measured(1), "pearson": 1.0},
            "two": {"before": measured(2), "after": measured(2), "pearson": 2.0},
        },
    }
    lines = collapse.report(results, []).splitlines()
    header = lines.index("| model | attention 0 | ffn 0 | attention 1 | ffn 1 |")
    assert lines[header + 2] == "| one | 1.0 → 1.0 | 1.0 → 1.0 |  |  |"
    assert lines[header + 3] == "| two | 1.0 → 1.0 | 1.0 → 1.0 | 2.0 → 2.0 | 2.0 → 2.0 |"


@pytest.fixture(scope="module")
def probes():
    spec = importlib.util.spec_from_file_location("probes", REPO / "studies" / "finetune_collapse" / "probes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_probes_of_the_teacher_against_itself(probes, bundled_checkpoint, tmp_path):
    """The teacher given as a student: every segment cosine 1, the same perturbation and stream as the teacher's row
    (same weights, same seeds); the perturbation grows with ε and leaves the weights as they were."""
    data = write_stsb(tmp_path / "stsb")
    output = tmp_path / "probes.md"
    argv = ["--model", f"copy={bundled_checkpoint}", "--data_dir", str(data), "--pairs", "6", "--output", str(output)]
    assert probes.main(argv) == 0
    results = json.loads(output.with_suffix(".json").read_text())
    teacher, copy = results["models"]["teacher"], results["models"]["copy"]
    assert set(copy["segments"]) == {"A", "B", "[CLS]", "A types 0", "B types 0", "[CLS] types 0"}
    assert all(value == pytest.approx(1.0, abs=1e-6) for value in copy["segments"].values())
    assert copy["perturbation"] == teacher["perturbation"] and copy["stream"] == teacher["stream"]
    small, medium, large = teacher["perturbation"].values()
    assert 0 < small < medium < large < 0.1
    stream = teacher["stream"]
    assert 0 < stream["top 1 share"] < stream["top 5 share"] <= 1 and stream["norm [CLS]"] > 0
    assert "| copy | 1.0000 | 1.0000 |" in output.read_text()


def test_perturbation_restores_the_weights_and_reads_the_final_norm_input(probes):
    torch.manual_seed(0)
    model = FfnBertModel(tiny_config(layer_norm_position="pre", unpad_tokens=False)).eval()
    batch = {"input_ids": torch.tensor([[2, 5, 7, 3]]), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    batch["token_type_ids"] = torch.tensor([[0, 0, 1, 1]])
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        assert probes.perturbation(model, batch, 0.0) == pytest.approx(0.0, abs=1e-6)
        assert 0 < probes.perturbation(model, batch, 0.05) < probes.perturbation(model, batch, 0.5)
        assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
        stream = probes.stream(model, batch)
        inputs = []
        model.encoder.final_norm.register_forward_pre_hook(lambda module, args: inputs.append(args[0]))
        model(**batch)
    assert stream["norm [CLS]"] == pytest.approx(inputs[0][0, 0].norm().item())
    assert stream["norm other"] == pytest.approx(inputs[0][0, 1:].norm(dim=-1).mean().item())


def test_rescale_stream_keeps_the_function_and_scales_the_stream(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "rescale_stream", REPO / "studies" / "finetune_collapse" / "rescale_stream.py"
    )
    rescale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rescale)
    torch.manual_seed(0)
    model = FfnBertModel(tiny_config(layer_norm_position="pre", unpad_tokens=False)).eval()
    model.save_pretrained(tmp_path / "pre")
    # 2 layers: embeddings' LayerNorm (2) + per layer attention output and FFN down projection (2 x 2 x 2)
    assert rescale.rescale_stream(tmp_path / "pre", 0.1, tmp_path / "small") == 10
    small = FfnBertModel.from_pretrained(tmp_path / "small").eval()
    ids = torch.tensor([[2, 5, 7, 3, 9]])
    streams = []
    for m in (model, small):
        m.encoder.final_norm.register_forward_pre_hook(lambda module, args: streams.append(args[0]))
    with torch.no_grad():
        before, after = model(input_ids=ids).last_hidden_state, small(input_ids=ids).last_hidden_state
    torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5)  # LayerNorm is scale-invariant: rounding only
    torch.testing.assert_close(streams[1], 0.1 * streams[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="exists"):
        rescale.rescale_stream(tmp_path / "pre", 0.1, tmp_path / "small")
    FfnBertModel(tiny_config()).save_pretrained(tmp_path / "post")
    with pytest.raises(ValueError, match="layer_norm_position 'post'"):
        rescale.rescale_stream(tmp_path / "post", 0.1, tmp_path / "other")
