"""Healing (distillation of a converted FfnBert from its source): it reduces the distance, leaves an exact student
untouched, refuses bad input before training, resumes exactly, and 2 processes match 1."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, BertModel, PretrainedConfig, PreTrainedModel, TrainerCallback, TrainingArguments

import hf_ffn
from hf_ffn import FfnBertModel, modeling_ffn_bert
from hf_ffn.conversion import convert_checkpoint
from hf_ffn.healing import (
    DistillationLoss,
    DistillationTrainer,
    HealArguments,
    LayerwiseArguments,
    compare_to_teacher,
    dropout_off,
    linear_probe,
    run_healing,
)
from hf_ffn.healing import distill as distill_module
from hf_ffn.healing import run as run_module
from hf_ffn.healing.run import healing_summary
from hf_ffn.parity import UPSTREAM_MASKS_PACKED_SEQUENCES, bundled_checkpoint
from hf_ffn.training.collators import PaddingFreeCollator
from hf_ffn.training.readers import read_label_files

from .conftest import TINY

BLOCK = 16
WORDS = (
    "the nation budget people congress war peace economy year tax school health work world freedom "
    "america jobs energy future families children security law states government"
).split()


def write_texts(folder: Path, documents: int = 3, words: int = 300, seed: int = 0) -> Path:
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    for i in range(documents):
        (folder / f"{i}.txt").write_text(" ".join(rng.choices(WORDS, k=words)) + "\n")
    return folder


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny upstream BERT teacher with the bundled BERT tokenizer (dropout 0.1, as BERT), text, snippets.

    Weights are drawn with std 0.3 instead of BERT's 0.02: at 0.02 a tiny random model's layers barely change
    their input and a Post → Pre-LN conversion drifts by ~2e-5 (mean |Δ|); at 0.3 it drifts by ~0.6, like a
    trained BERT's."""
    root = tmp_path_factory.mktemp("heal")
    tokenizer = AutoTokenizer.from_pretrained(bundled_checkpoint())
    torch.manual_seed(0)
    from transformers import BertConfig

    teacher = BertModel(
        BertConfig(
            **{**TINY, "vocab_size": tokenizer.vocab_size, "max_position_embeddings": 128, "initializer_range": 0.3}
        )
    )
    teacher.save_pretrained(root / "teacher")
    tokenizer.save_pretrained(root / "teacher")
    write_texts(root / "text")
    snippets = root / "snippets"
    snippets.mkdir()
    rng = random.Random(1)
    for label, extra in (("pos", "good great"), ("neg", "bad awful")):
        lines = [" ".join(rng.choices(WORDS + extra.split() * 6, k=rng.randint(3, 9))) for _ in range(20)]
        (snippets / f"{label}.txt").write_text("\n".join(lines) + "\n")
    return root


def heal_args(setup, student, **overrides) -> HealArguments:
    kwargs = dict(
        student=str(student),
        train_files=[str(setup / "text")],
        teacher=str(setup / "teacher"),
        eval_data=str(setup / "snippets"),
        max_seq_length=BLOCK,
        curve_snippets=40,
        probe=False,
        method="end_to_end",
    )
    return HealArguments(**{**kwargs, **overrides})


def training_args(output_dir, **overrides) -> TrainingArguments:
    kwargs = dict(
        output_dir=str(output_dir),
        per_device_train_batch_size=4,
        max_steps=4,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    return TrainingArguments(**{**kwargs, **overrides})


def weights(folder) -> dict[str, torch.Tensor]:
    return load_file(Path(folder) / "model.safetensors")


def test_healing_reduces_the_distance_and_writes_a_converted_folder(setup, tmp_path, capsys):
    """A Post-LN → Pre-LN student (drift from moving the LayerNorms) gets measurably closer to its teacher."""
    student = tmp_path / "pre"
    convert_checkpoint(str(setup / "teacher"), student, layer_norm_position="pre")
    args = heal_args(setup, student, probe=True, curve_steps=5)
    healing = run_healing(args, training_args(tmp_path / "run", max_steps=15, learning_rate=1e-2), command="heal x")
    before, after = healing["before"]["agreement"], healing["after"]["agreement"]
    # one summary line, last: cosine before → after, probe Δ before → after, time; the record in healing.json
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == healing_summary(healing)
    assert last.startswith(
        f"healed: cosine {before['cosine_mean']:.4f} → {after['cosine_mean']:.4f}, probe Δ "
        f"{healing['before']['probe']['difference']:+.4f} → "
        f"{healing['after']['probe']['difference']:+.4f}, "
    )
    assert json.loads((tmp_path / "run" / "healing.json").read_text())["after"] == json.loads(
        json.dumps(healing["after"])
    )
    print({k: (before[k], after[k]) for k in ("cosine_mean", "cosine_min", "max_abs_diff", "mean_abs_diff")})
    # measured: mean |Δ| 0.657 → 0.384, cosine 0.690 → 0.896 in 15 steps
    assert after["mean_abs_diff"] < 0.7 * before["mean_abs_diff"]
    assert after["max_abs_diff"] < before["max_abs_diff"]
    assert 1 - after["cosine_mean"] < 0.5 * (1 - before["cosine_mean"])
    assert [point["step"] for point in healing["curve"]] == [0, 5, 10, 15]
    assert healing["curve"][0]["mean_abs_diff"] > healing["curve"][-1]["mean_abs_diff"]
    losses = [entry["loss"] for entry in healing["losses"]]
    assert len(losses) == 15 and losses[-1] < losses[0]

    healed = tmp_path / "run" / "healed"
    for name in (
        "config.json",
        "model.safetensors",
        "modeling_ffn_bert.py",
        "configuration_ffn_bert.py",
        "tokenizer.json",
        "conversion_report.json",
        "README.md",
    ):
        assert (healed / name).is_file(), name
    report = json.loads((healed / "conversion_report.json").read_text())
    assert report["healing"]["after"] == json.loads(json.dumps(healing["after"]))
    assert report["layers"] and report["source"] == str(setup / "teacher")
    # The card's fixed-input difference is re-measured on the healed weights, smaller than the converted one's.
    assert (
        report["difference"]["last_hidden_state"]["mean_abs_diff"]
        < report["healing"]["fixed_input_difference_before"]["last_hidden_state"]["mean_abs_diff"]
    )
    card = (healed / "README.md").read_text()
    assert "## Healing" in card and "heal x" in card and f"{after['cosine_mean']:.6f}" in card
    # What was saved is what was measured: re-measuring the reloaded folder gives the reported numbers.
    tokenizer = AutoTokenizer.from_pretrained(healed)
    texts, labels = read_label_files(setup / "snippets")
    reloaded = FfnBertModel.from_pretrained(healed)
    metrics, teacher_emb, student_emb = compare_to_teacher(
        BertModel.from_pretrained(setup / "teacher"), reloaded, tokenizer, texts, max_length=BLOCK
    )
    assert metrics == healing["after"]["agreement"]
    assert linear_probe(student_emb, labels)["accuracy"] == healing["after"]["probe"]["student"]["accuracy"]
    assert reloaded.config.hidden_dropout_prob == 0.1  # dropout was off for distillation only


def test_default_config_student_stays_equal_to_the_teacher(setup, tmp_path):
    """Nothing to heal: loss exactly 0 at every step, weights bit for bit the teacher's, outputs torch.equal."""
    student = tmp_path / "default"
    FfnBertModel.from_pretrained(setup / "teacher").save_pretrained(student)
    AutoTokenizer.from_pretrained(setup / "teacher").save_pretrained(student)
    healing = run_healing(heal_args(setup, student, eval_data=None), training_args(tmp_path / "run", max_steps=3))
    assert [entry["loss"] for entry in healing["losses"]] == [0.0, 0.0, 0.0]
    healed = weights(tmp_path / "run" / "healed")
    original = weights(setup / "teacher")
    assert healed.keys() == original.keys() and all(torch.equal(healed[k], original[k]) for k in original)
    batch = AutoTokenizer.from_pretrained(student)(
        ["the nation", "peace and war in the world"], padding=True, return_tensors="pt"
    )
    upstream = BertModel.from_pretrained(setup / "teacher").eval()
    ours = FfnBertModel.from_pretrained(tmp_path / "run" / "healed").eval()
    assert torch.equal(upstream(**batch).last_hidden_state, ours(**batch).last_hidden_state)


def test_max_eval_snippets_measures_a_seeded_subset(setup, tmp_path):
    """A quick run measures before/after and the probe on exactly N held-out snippets (the same N both times)."""
    student = tmp_path / "pre"
    convert_checkpoint(str(setup / "teacher"), student, layer_norm_position="pre")
    args = heal_args(setup, student, probe=True, max_eval_snippets=20, curve_snippets=0)
    healing = run_healing(args, training_args(tmp_path / "run", max_steps=1))
    assert healing["before"]["agreement"]["texts"] == healing["after"]["agreement"]["texts"] == 20
    with pytest.raises(ValueError, match="--max_eval_snippets must be at least 2"):
        heal_args(setup, student, max_eval_snippets=1)
    # A seeded subset of 6 can hold fewer than 5 snippets of a label: the 5-fold probe cannot run on it.
    with pytest.raises(ValueError, match=r"--max_eval_snippets 6: the seeded subset has .* needs at least 5 of each"):
        run_healing(heal_args(setup, student, probe=True, max_eval_snippets=6), training_args(tmp_path / "r2"))


def test_dropout_is_what_would_move_an_exact_student(setup, tmp_path):
    """Negative control for the test above: in train mode with BERT's dropout (0.1) the loss of an exact student
    is not 0; `dropout_off` makes it exactly 0."""
    student = FfnBertModel.from_pretrained(setup / "teacher")
    teacher = BertModel.from_pretrained(setup / "teacher")
    trainer = DistillationTrainer(
        model=student, args=training_args(tmp_path / "run"), teacher=teacher, distillation_loss=DistillationLoss()
    )
    ids = torch.randint(1000, 2000, (2, 8), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    student.train()
    assert trainer.compute_loss(student, inputs).item() > 1e-4
    with dropout_off(student):
        assert trainer.compute_loss(student, inputs).item() == 0.0
    assert {m.p for m in student.modules() if isinstance(m, torch.nn.Dropout)} == {0.1}  # restored


def _student_with_other_tokenizer(setup, folder):
    FfnBertModel.from_pretrained(setup / "teacher").save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(setup / "teacher")
    tokenizer.add_tokens(["hfffnnewtoken"])
    tokenizer.save_pretrained(folder)


def _student_with_config(setup, folder, **overrides):
    tokenizer = AutoTokenizer.from_pretrained(setup / "teacher")
    config = {
        **TINY,
        "vocab_size": tokenizer.vocab_size,
        "max_position_embeddings": 128,
        "initializer_range": 0.3,
        **overrides,
    }
    FfnBertModel(hf_ffn.FfnBertConfig(**config)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


BAD_INPUTS = {
    "hidden size": (
        lambda s, f: _student_with_config(s, f, hidden_size=48, num_attention_heads=4),
        {},
        ValueError,
        "hidden_size",
    ),
    "vocab size": (lambda s, f: _student_with_config(s, f, vocab_size=30600), {}, ValueError, "vocab_size"),
    "tokenizer vocabulary": (_student_with_other_tokenizer, {}, ValueError, "tokenizers differ"),
    "missing text": (None, {"train_files": ["/nonexistent/speeches"]}, FileNotFoundError, "does not exist"),
    "folder without txt": (
        None,
        {"train_files": ["EMPTY_FOLDER"]},
        FileNotFoundError,
        r"holds no file matching '\*\.txt'",
    ),
    "blank text": (
        None,
        {"train_files": ["EMPTY_FILE"]},
        ValueError,
        r"no document in .*empty.txt \(the text is blank\)",
    ),
    "text shorter than a block": (None, {"train_files": ["SHORT_FILE"]}, ValueError, "shorter than one block"),
    "missing eval data": (
        None,
        {"eval_data": "/nonexistent/rt"},
        FileNotFoundError,
        "--eval_data: '/nonexistent/rt' is no file or folder",
    ),
    "layers all across LN placements": (
        lambda s, f: convert_checkpoint(str(s / "teacher"), f, layer_norm_position="pre"),
        {"layers": "all"},
        ValueError,
        "LayerNorm placement",
    ),
    "KL without an MLM head": (None, {"mlm_kl_weight": 1.0}, ValueError, "MLM head"),
    "unknown train_parts": (None, {"train_parts": "attention"}, ValueError, "ffn, ffn_norms, encoder, all"),
    "missing student": (lambda s, f: None, {}, FileNotFoundError, "--student: no such folder: "),
    "missing teacher": (
        None,
        {"teacher": "/nonexistent/bert"},
        FileNotFoundError,
        "--teacher: no such folder: /nonexistent/bert",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_fails_before_training(setup, tmp_path, monkeypatch, case):
    make_student, overrides, error, message = BAD_INPUTS[case]
    student = tmp_path / "student"
    if make_student is None:
        FfnBertModel.from_pretrained(setup / "teacher").save_pretrained(student)
        AutoTokenizer.from_pretrained(setup / "teacher").save_pretrained(student)
    else:
        make_student(setup, student)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty.txt").write_text("  \n")
    (tmp_path / "short.txt").write_text("peace\n")
    files = {
        "EMPTY_FOLDER": tmp_path / "empty",
        "EMPTY_FILE": tmp_path / "empty.txt",
        "SHORT_FILE": tmp_path / "short.txt",
    }
    if "train_files" in overrides:
        overrides = {**overrides, "train_files": [str(files.get(p, p)) for p in overrides["train_files"]]}

    def no_training(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(distill_module, "DistillationTrainer", no_training)
    with pytest.raises(error, match=message):
        run_healing(heal_args(setup, student, **overrides), training_args(tmp_path / "run"))
    assert not (tmp_path / "run" / "healed").exists()


def test_non_empty_healed_dir_is_refused_before_training(setup, tmp_path, monkeypatch):
    student = tmp_path / "student"
    FfnBertModel.from_pretrained(setup / "teacher").save_pretrained(student)
    AutoTokenizer.from_pretrained(setup / "teacher").save_pretrained(student)
    (tmp_path / "run" / "healed").mkdir(parents=True)
    (tmp_path / "run" / "healed" / "keep.txt").write_text("x")
    monkeypatch.setattr(distill_module, "DistillationTrainer", None)
    with pytest.raises(FileExistsError, match=r"--healed_dir .*healed. exists and is not empty"):
        run_healing(heal_args(setup, student), training_args(tmp_path / "run"))


class StopAt(TrainerCallback):
    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


def test_resume_gives_the_weights_of_an_uninterrupted_run(setup, tmp_path):
    """4 steps in one go = 2 steps, stop, resume from checkpoint-2, 2 more: torch.equal weights and losses
    (Trainer restores model, optimizer, scheduler and RNG states and skips the batches already seen)."""
    student = tmp_path / "fresh"
    convert_checkpoint(str(setup / "teacher"), student, ffn_type="swiglu", init="fresh", width="matched")
    args = heal_args(setup, student, eval_data=None)
    common = dict(max_steps=4, save_strategy="steps", save_steps=2)
    whole = run_healing(args, training_args(tmp_path / "whole", **common))
    run_healing(args, training_args(tmp_path / "parts", **common), callbacks=[StopAt(2)])
    assert (tmp_path / "parts" / "checkpoint-2").is_dir() and not (tmp_path / "parts" / "checkpoint-4").exists()
    resumed = run_healing(
        heal_args(setup, student, eval_data=None, healed_dir=str(tmp_path / "resumed")),
        training_args(tmp_path / "parts", resume_from_checkpoint="last", **common),
    )
    assert resumed["steps"] == whole["steps"] == 4
    assert [e["loss"] for e in resumed["losses"]] == [e["loss"] for e in whole["losses"]]
    a, b = weights(tmp_path / "whole" / "healed"), weights(tmp_path / "resumed")
    assert all(torch.equal(a[k], b[k]) for k in a)
    initial = weights(student)
    assert any(not torch.equal(a[k], initial[k]) for k in a)  # the steps really trained


# 2 processes (torchrun, gloo on CPU) × 2 blocks vs 1 process × 4 blocks: same global batch and data order (accelerate
# deals consecutive per-device batches of one sampler permutation to the ranks). Every block is full (no padding),
# so the mean of the two ranks' per-token means is the global mean; the runs differ only in float summation order
# (DDP all-reduces two half-batch gradients). Measured: losses agree to ~1e-7 relative; Adam's scale-free update
# turns rounding-level gradient differences into weight differences bounded by lr, so weights are compared at
# 1e-3·lr (as in tests/test_distributed.py); measured ≤ 6e-8. Except the attention key biases: softmax is invariant
# to them (q·(k + b) adds q·b to every score of a row), so their true gradient is 0 and what each run computes is
# rounding noise, which Adam normalises into steps of up to lr in an arbitrary direction (measured 2e-4 apart):
# they are only checked to stay within Adam's bound, steps·lr, of each other.
LEARNING_RATE = 1e-3


def test_torchrun_two_processes_match_one_process(setup, tmp_path):
    student = tmp_path / "pre"
    convert_checkpoint(str(setup / "teacher"), student, layer_norm_position="pre")
    argv = [
        "--student",
        str(student),
        "--teacher",
        str(setup / "teacher"),
        "--train_files",
        str(setup / "text"),
        "--method",
        "end_to_end",
        "--max_seq_length",
        str(BLOCK),
        "--max_steps",
        "3",
        "--learning_rate",
        str(LEARNING_RATE),
        "--logging_steps",
        "1",
        "--seed",
        "0",
        "--use_cpu",
        "true",
        "--report_to",
        "none",
        "--save_strategy",
        "no",
        "--disable_tqdm",
        "true",
    ]
    script = Path(hf_ffn.__file__).parents[1] / "scripts" / "heal.py"
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_OFFLINE="1",
        PYTHONPATH=os.pathsep.join([str(Path(hf_ffn.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
    )
    one = run_healing(*_parse(argv + ["--output_dir", str(tmp_path / "one"), "--per_device_train_batch_size", "4"]))
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(script),
        *argv,
        "--output_dir",
        str(tmp_path / "two"),
        "--per_device_train_batch_size",
        "2",
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    two = json.loads((tmp_path / "two" / "healed" / "conversion_report.json").read_text())["healing"]
    assert two["training"]["world_size"] == 2 and one["training"]["world_size"] == 1
    torch.testing.assert_close(
        torch.tensor([e["loss"] for e in two["losses"]]),
        torch.tensor([e["loss"] for e in one["losses"]]),
        rtol=1e-5,
        atol=0,
    )
    a, b = weights(tmp_path / "one" / "healed"), weights(tmp_path / "two" / "healed")
    initial = weights(student)
    moved = max((a[k] - initial[k]).abs().max().item() for k in a)
    differ = max((a[k] - b[k]).abs().max().item() for k in a if not k.endswith("attention.self.key.bias"))
    print(f"2 processes vs 1: weights moved up to {moved:.3g}, max |Δ| between the runs {differ:.3g}")
    assert moved > LEARNING_RATE / 2 and differ <= 1e-3 * LEARNING_RATE
    assert all((a[k] - b[k]).abs().max() <= 3 * LEARNING_RATE for k in a if k.endswith("key.bias"))


def _parse(argv):
    from transformers import HfArgumentParser

    return HfArgumentParser((HealArguments, TrainingArguments)).parse_args_into_dataclasses(args=argv)


def test_padding_free_batches_keep_an_exact_student_exact(setup, tmp_path, monkeypatch):
    """--padding_free: each batch's blocks in one row (`PaddingFreeCollator`), the teacher loaded as FfnBert, which
    keeps the blocks apart. A default-config student is the teacher's function: loss exactly 0 at every step. An
    upstream `BertModel` teacher would let the blocks of the run's batches attend to each other (the negative
    control): they carry an all-ones `attention_mask` (the blocks' column), beside which upstream builds no
    per-sequence mask on any release. Without that mask upstream keeps them apart from transformers 5.25 on
    (`UPSTREAM_MASKS_PACKED_SEQUENCES`: then equal to the FfnBert teacher bit for bit) and mixes them before.
    Teacher and student run packed during training (`unpadded`: each block's attention over its own keys), and the
    saved student keeps its config's `unpad_tokens`."""
    packed = []
    forward = modeling_ffn_bert.unpadded_model_forward
    monkeypatch.setattr(
        modeling_ffn_bert,
        "unpadded_model_forward",
        lambda model, *a, **k: packed.append(model) or forward(model, *a, **k),
    )
    student = tmp_path / "default"
    FfnBertModel.from_pretrained(setup / "teacher").save_pretrained(student)
    AutoTokenizer.from_pretrained(setup / "teacher").save_pretrained(student)
    assert type(run_module.load_teacher(str(setup / "teacher"), with_head=False, padding_free=True)) is FfnBertModel
    args = heal_args(setup, student, eval_data=None, padding_free=True)
    healing = run_healing(args, training_args(tmp_path / "run", max_steps=2))
    assert [entry["loss"] for entry in healing["losses"]] == [0.0, 0.0]
    assert len(packed) == 2 * 2  # teacher and student, 2 steps
    assert json.loads((tmp_path / "run" / "healed" / "config.json").read_text()).get("unpad_tokens", False) is False
    blocks = [{"input_ids": list(range(start, start + BLOCK)), "attention_mask": [1] * BLOCK} for start in (5, 9)]
    batch = PaddingFreeCollator()(blocks)  # as the run collates its blocks
    without_mask = {key: value for key, value in batch.items() if key != "attention_mask"}
    upstream = BertModel.from_pretrained(setup / "teacher").eval()
    teacher = run_module.load_teacher(str(setup / "teacher"), with_head=False, padding_free=True)
    with torch.no_grad():
        kept = teacher(**batch).last_hidden_state
        assert torch.equal(teacher(**without_mask).last_hidden_state, kept)
        assert (upstream(**batch).last_hidden_state - kept).abs().max() > 1e-3  # mixed, on every release
        upstream_flat = upstream(**without_mask).last_hidden_state
    if UPSTREAM_MASKS_PACKED_SEQUENCES:
        assert torch.equal(upstream_flat, kept)
    else:
        assert (upstream_flat - kept).abs().max() > 1e-3


def test_one_run_reads_the_student_config_and_tokenizer_and_loads_the_teacher_once(setup, tmp_path, monkeypatch):
    student = tmp_path / "swiglu"
    convert_checkpoint(str(setup / "teacher"), student, ffn_type="swiglu")
    reads = []
    get_config_dict = PretrainedConfig._get_config_dict.__func__
    tokenizer_from_pretrained = AutoTokenizer.from_pretrained.__func__
    model_from_pretrained = PreTrainedModel.from_pretrained.__func__

    def config_read(cls, name, **kwargs):
        reads.append(("config", str(name)))
        return get_config_dict(cls, name, **kwargs)

    def tokenizer_read(cls, name, *args, **kwargs):
        reads.append(("tokenizer", str(name)))
        return tokenizer_from_pretrained(cls, name, *args, **kwargs)

    def model_read(cls, name, *args, **kwargs):
        reads.append(("model", str(name)))
        return model_from_pretrained(cls, name, *args, **kwargs)

    monkeypatch.setattr(PretrainedConfig, "_get_config_dict", classmethod(config_read))
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", classmethod(tokenizer_read))
    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(model_read))
    run_healing(heal_args(setup, student, eval_data=None), training_args(tmp_path / "run", max_steps=1))
    teacher = str(setup / "teacher")
    assert reads.count(("config", str(student))) == 1
    assert reads.count(("tokenizer", str(student))) == 1
    assert reads.count(("model", str(student))) == 1
    assert reads.count(("model", teacher)) == 1  # trained against and re-measured against


def test_healed_folder_keeps_the_sentence_transformers_modules_of_its_student(setup, tmp_path, capsys):
    """A converted sentence-transformers folder (backbone at the root, modules.json, 1_Pooling/, settings) healed:
    the healed folder has every one of those files, unchanged; a stray weight file of the student is not copied."""
    student = tmp_path / "st"
    convert_checkpoint(str(setup / "teacher"), student, layer_norm_position="pre")
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (student / "modules.json").write_text(json.dumps(modules))
    (student / "1_Pooling").mkdir()
    (student / "1_Pooling" / "config.json").write_text(
        '{"word_embedding_dimension": 32, "pooling_mode_mean_tokens": true}'
    )
    (student / "sentence_bert_config.json").write_text('{"max_seq_length": 16, "do_lower_case": false}')
    (student / "pytorch_model.bin").write_bytes(b"stale")
    run_healing(heal_args(setup, student, eval_data=None), training_args(tmp_path / "run", max_steps=1))
    healed = tmp_path / "run" / "healed"
    for name in ("modules.json", "1_Pooling/config.json", "sentence_bert_config.json"):
        assert (healed / name).read_bytes() == (student / name).read_bytes(), name
    assert not (healed / "pytorch_model.bin").exists()
    assert (healed / "model.safetensors").is_file() and (healed / "conversion_report.json").is_file()
    assert "cosine not measured (no --eval_data), no probe" in capsys.readouterr().out.strip().splitlines()[-1]


def _pre_ln_student(setup, folder):
    convert_checkpoint(str(setup / "teacher"), folder, layer_norm_position="pre")
    return folder


def test_compressed_files_heal_exactly_as_the_plain_files(setup, tmp_path):
    """--train_files reads compressed text through datasets (hf-ffn mlm's reader): an .xz copy of the text gives the
    same blocks, so the same healed weights (torch.equal)."""
    import lzma

    student = _pre_ln_student(setup, tmp_path / "pre")
    packed = tmp_path / "packed"
    packed.mkdir()
    for file in sorted((setup / "text").glob("*.txt")):
        (packed / f"{file.name}.xz").write_bytes(lzma.compress(file.read_bytes()))
    plain = run_healing(heal_args(setup, student), training_args(tmp_path / "plain", max_steps=2))
    xz = sorted(str(p) for p in packed.iterdir())
    compressed = run_healing(heal_args(setup, student, train_files=xz), training_args(tmp_path / "xz", max_steps=2))
    assert compressed["data"]["documents"] == plain["data"]["documents"] == 3
    assert compressed["data"]["blocks"] == plain["data"]["blocks"] > 0
    healed_plain, healed_xz = weights(plain["healed_dir"]), weights(compressed["healed_dir"])
    assert healed_plain.keys() == healed_xz.keys()
    assert all(torch.equal(healed_plain[k], healed_xz[k]) for k in healed_plain)
    # one large file of paragraphs: --document_boundary empty_line makes each paragraph a document
    joined = tmp_path / "joined.txt"
    joined.write_text("\n\n".join(file.read_text().strip() for file in sorted((setup / "text").glob("*.txt"))))
    paragraphs = heal_args(setup, student, train_files=[str(joined)], document_boundary="empty_line")
    assert run_healing(paragraphs, training_args(tmp_path / "p", max_steps=1))["data"]["documents"] == 3


def test_a_token_budget_sets_the_steps_and_a_stream_heals(setup, tmp_path):
    """--max_train_tokens N runs ceil(N / (block × batch)) steps; --dataset_name (a save_to_disk folder) with
    --streaming feeds the same end-to-end stage from a stream, and the layer-wise calibration from its first blocks."""
    from datasets import Dataset

    student = _pre_ln_student(setup, tmp_path / "pre")
    tokens = 2 * BLOCK * 4 + 1  # just over 2 steps of 4 blocks: 3 steps
    healing = run_healing(
        heal_args(setup, student, max_train_tokens=tokens), training_args(tmp_path / "t", max_steps=-1)
    )
    assert healing["steps"] == 3 and healing["training"]["max_steps"] == 3
    assert healing["data"]["end_to_end_tokens"] == 3 * BLOCK * 4
    saved = tmp_path / "saved"
    texts = [p.read_text() for p in sorted((setup / "text").glob("*.txt"))]
    Dataset.from_dict({"text": texts}).save_to_disk(saved)
    streamed = run_healing(
        heal_args(setup, student, train_files=None, dataset_name=str(saved), streaming=True, method="layerwise"),
        training_args(tmp_path / "s", max_steps=2),
        layerwise_args=LayerwiseArguments(layerwise_tokens=4 * BLOCK, layerwise_steps=2),
    )
    assert streamed["data"]["documents"] == streamed["data"]["blocks"] == "streamed"
    assert streamed["steps"] == 2 and streamed["layerwise"]["tokens"] == 4 * BLOCK
    assert streamed["after"]["agreement"]["cosine_mean"] > streamed["before"]["agreement"]["cosine_mean"]


def test_a_time_budget_stops_the_end_to_end_stage_and_saves(setup, tmp_path):
    """--max_train_minutes: the run stops at the first step past the budget, saves that checkpoint and says so."""
    student = _pre_ln_student(setup, tmp_path / "pre")
    healing = run_healing(
        heal_args(setup, student, max_train_minutes=1e-9), training_args(tmp_path / "run", max_steps=50)
    )
    assert healing["steps"] == 1 and healing["data"]["stopped_by_time_budget"] is True
    assert (tmp_path / "run" / "checkpoint-1" / "trainer_state.json").is_file()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"train_files": None}, "--train_files FILES_OR_FOLDERS or --dataset_name NAME"),
        ({"dataset_name": "x"}, "--train_files FILES_OR_FOLDERS or --dataset_name NAME"),
        ({"streaming": True}, "--streaming reads a --dataset_name"),
        ({"max_train_tokens": 0}, "--max_train_tokens must be > 0, got 0"),
        ({"document_boundary": "regex"}, "--document_boundary has unknown value 'regex'; allowed: file, empty_line"),
        ({"max_train_minutes": -1.0}, "--max_train_minutes must be > 0, got -1.0"),
    ],
)
def test_bad_data_or_budget_options_are_refused(setup, overrides, message):
    with pytest.raises(ValueError, match=message):
        heal_args(setup, "student", **overrides)


def test_budget_options_that_contradict_the_run_are_refused(setup, tmp_path):
    student = _pre_ln_student(setup, tmp_path / "pre")
    with pytest.raises(ValueError, match="--max_train_tokens 100 and --max_steps 4 both set"):
        run_healing(heal_args(setup, student, max_train_tokens=100), training_args(tmp_path / "a"))
    saved = tmp_path / "saved"
    from datasets import Dataset

    Dataset.from_dict({"text": ["a b c"] * 2}).save_to_disk(saved)
    args = heal_args(setup, student, train_files=None, dataset_name=str(saved), streaming=True)
    with pytest.raises(ValueError, match="needs --max_steps or --max_train_tokens"):
        run_healing(args, training_args(tmp_path / "b", max_steps=-1))


# ---------------------------------------------------------------------------------------------------------------
# --train_parts: the trainable set is what the distillation loss reaches, in every family and head
# ---------------------------------------------------------------------------------------------------------------
STUDENTS = [
    ("FfnBertForMaskedLM", "FfnBertConfig"),
    ("FfnBertForPreTraining", "FfnBertConfig"),
    ("FfnBertForSequenceClassification", "FfnBertConfig"),
    ("FfnRobertaForMaskedLM", "FfnRobertaConfig"),
    ("FfnRobertaForSequenceClassification", "FfnRobertaConfig"),
    ("FfnElectraForPreTraining", "FfnElectraConfig"),
    ("FfnElectraForMaskedLM", "FfnElectraConfig"),
]


def reached_by_the_loss(student, teacher, with_head: bool) -> set[str]:
    """The parameters of `student` that one distillation loss (MSE on the last hidden state, plus the KL on MLM
    logits with `with_head`) against `teacher` gives a nonzero gradient, on a padded batch."""
    from hf_ffn.healing.distill import encoder_outputs

    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, 99, (3, 9), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 6:] = attention_mask[2, 3:] = 0
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    student.requires_grad_(True).zero_grad()
    with torch.no_grad():
        target = encoder_outputs(teacher, teacher.base_model, inputs, hidden_states=False)
    ours = encoder_outputs(student, student.base_model, inputs, hidden_states=False)
    DistillationLoss(mlm_kl_weight=1.0 if with_head else 0.0)(ours, target, attention_mask).backward()
    return {n for n, p in student.named_parameters() if p.grad is not None and bool(p.grad.abs().max() > 0)}


@pytest.mark.parametrize("model_class, config_class", STUDENTS, ids=[s[0] for s in STUDENTS])
def test_trainable_parts_are_what_the_loss_reaches(model_class, config_class):
    """`select_trainable(model, "all")` is exactly the set of parameters the loss gives a gradient: never a head
    outside the base model (RoBERTa's lm_head, ELECTRA's discriminator and generator heads, a classifier, BERT's
    next-sentence head: they once counted as trainable), the MLM head only with the KL term; "ffn_norms" and "ffn"
    select only reached parameters too (the FFNs among them)."""
    from hf_ffn.healing.distill import select_trainable

    config = getattr(hf_ffn, config_class)(**TINY, ffn_type="swiglu", layer_norm_position="pre", num_labels=2)
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    torch.manual_seed(0)
    student = getattr(hf_ffn, model_class)(config).eval()
    teacher = getattr(hf_ffn, model_class)(config).eval()  # another seeded draw: a nonzero loss
    mlm = model_class.endswith(("MaskedLM", "BertForPreTraining"))
    for with_head in (False, True) if mlm else (False,):
        reached = reached_by_the_loss(student, teacher, with_head)
        selected = set(select_trainable(student, "all", with_head))
        assert selected == reached, (with_head, selected - reached, reached - selected)
        assert {n for n, p in student.named_parameters() if p.requires_grad} == reached
        heads = {n for n in reached if not n.startswith(f"{student.base_model_prefix}.")}
        assert bool(heads) == with_head, heads  # the MLM head is reached by the KL term only
        for parts in ("ffn", "ffn_norms"):
            selected = set(select_trainable(student, parts, with_head))
            assert selected <= reached and any(".mlp." in n for n in selected), (parts, selected - reached)
        student.zero_grad()


def test_short_blocks_are_bert_short_sequences_seeded_by_index():
    """--short_seq_probability p: a block is cut with probability p to a length uniform in [2, its length], the
    rest padded (mask 0); the draw depends only on (seed, index), so a resumed run cuts the same blocks."""
    from hf_ffn.healing.data import short_block

    row = {"input_ids": list(range(101, 101 + BLOCK))}
    cuts = [short_block(row, index, 0.5, 0, seed=3) for index in range(2000)]
    lengths = [sum(cut["attention_mask"]) for cut in cuts]
    shortened = [n for n in lengths if n < BLOCK]
    expected = 0.5 * (BLOCK - 2) / (BLOCK - 1)  # p times the chance the drawn length is not the block's own
    assert abs(len(shortened) / 2000 - expected) < 0.04  # ~3.5 binomial standard deviations
    assert min(lengths) == 2 and set(lengths) == set(range(2, BLOCK + 1))
    for cut, n in zip(cuts, lengths, strict=True):
        assert cut["input_ids"] == row["input_ids"][:n] + [0] * (BLOCK - n)
        assert cut["attention_mask"] == [1] * n + [0] * (BLOCK - n)
    assert [short_block(row, index, 0.5, 0, seed=3) for index in range(2000)] == cuts
    assert [short_block(row, index, 0.5, 0, seed=4) for index in range(2000)] != cuts
    assert all(short_block(row, index, 0.0, 0, seed=3)["attention_mask"] == [1] * BLOCK for index in range(50))


def test_framed_blocks_are_cls_text_sep():
    """--frame_blocks: every block is [CLS] + its first text tokens + [SEP] at the kept length (a leading [CLS] of a
    document not repeated), cut or whole; with probability 0 every block keeps its length."""
    from hf_ffn.healing.data import short_block

    cls, sep = 101, 102
    row = {"input_ids": list(range(1000, 1000 + BLOCK))}
    whole = short_block(row, 0, 0.0, 0, seed=3, frame=(cls, sep))
    assert whole["input_ids"] == [cls, *range(1000, 1000 + BLOCK - 2), sep]
    assert whole["attention_mask"] == [1] * BLOCK
    starts = {"input_ids": [cls, *range(1000, 1000 + BLOCK - 1)]}  # a block where a document starts
    assert short_block(starts, 0, 0.0, 0, seed=3, frame=(cls, sep))["input_ids"] == whole["input_ids"]
    for index in range(300):
        plain = short_block(row, index, 0.5, 0, seed=3)
        framed = short_block(row, index, 0.5, 0, seed=3, frame=(cls, sep))
        n = sum(plain["attention_mask"])
        assert framed["attention_mask"] == plain["attention_mask"]  # the same draw
        assert framed["input_ids"] == [cls, *range(1000, 1000 + n - 2), sep] + [0] * (BLOCK - n)


def _batches_the_loss_sees(setup, tmp_path, monkeypatch, **options) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(input_ids, attention_mask) of each batch `compute_loss` gets in a 2-step end-to-end heal of a Pre-LN student
    with the `HealArguments` `options` (two batches, checked)."""
    student = _pre_ln_student(setup, tmp_path / "pre")
    seen = []
    compute_loss = DistillationTrainer.compute_loss

    def recording(self, model, inputs, *args, **kwargs):
        seen.append((inputs["input_ids"].clone(), inputs["attention_mask"].clone()))
        return compute_loss(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(DistillationTrainer, "compute_loss", recording)
    run_healing(heal_args(setup, student, **options), training_args(tmp_path / "run", max_steps=2))
    assert len(seen) == 2
    return seen


def test_framed_blocks_reach_the_end_to_end_stage(setup, tmp_path, monkeypatch):
    """With --frame_blocks every training row the loss sees starts with [CLS] and ends its real tokens with [SEP]."""
    seen = _batches_the_loss_sees(setup, tmp_path, monkeypatch, short_seq_probability=0.5, frame_blocks=True)
    for input_ids, mask in seen:
        lengths = mask.sum(1)
        assert bool((input_ids[:, 0] == 101).all())  # bert-base-uncased's [CLS]
        assert bool((input_ids[torch.arange(len(lengths)), lengths - 1] == 102).all())  # [SEP]


def test_framed_blocks_need_cls_and_sep_tokens(setup, tmp_path):
    """--frame_blocks with a tokenizer that has no cls_token is refused before any text is read, naming the option."""
    from transformers import AutoTokenizer

    from hf_ffn.healing.run import check_models

    student = _pre_ln_student(setup, tmp_path / "pre")
    tokenizer = AutoTokenizer.from_pretrained(student)
    tokenizer.cls_token = None
    tokenizer.save_pretrained(student)
    assert AutoTokenizer.from_pretrained(student).cls_token_id is None
    check_models(heal_args(setup, student))  # without the option the same folder is accepted
    with pytest.raises(ValueError, match=r"--frame_blocks: the tokenizer of --student .* has no cls_token"):
        check_models(heal_args(setup, student, frame_blocks=True))


def test_short_blocks_reach_the_end_to_end_stage_padded(setup, tmp_path, monkeypatch):
    """With --short_seq_probability 1 every training batch the loss sees holds cut blocks whose pads are masked."""
    seen = _batches_the_loss_sees(setup, tmp_path, monkeypatch, short_seq_probability=1.0)
    for input_ids, mask in seen:
        lengths = mask.sum(1)
        assert input_ids.shape[1] == BLOCK and bool((lengths < BLOCK).any()) and bool((lengths >= 2).all())
        assert torch.equal(mask, (torch.arange(BLOCK) < lengths[:, None]).long())  # a prefix each
        assert bool((input_ids[mask == 0] == 0).all())  # the pad id of BERT's vocabulary


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"short_seq_probability": 1.5}, r"--short_seq_probability must be in \[0, 1\], got 1.5"),
        ({"short_seq_probability": 0.1, "padding_free": True}, "--padding_free would train on those pads"),
    ],
)
def test_bad_short_block_options_are_refused(setup, overrides, message):
    with pytest.raises(ValueError, match=message):
        heal_args(setup, "student", **overrides)
