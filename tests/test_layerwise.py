"""Layer-wise healing and inherited width (init="pruned"): the closed-form down projection is least squares, an
exactly representable layer is recovered, pruning keeps the top-k units by the score, an interrupted layer-wise
run resumes to the same weights, the memory cap is honoured, and a Pre-LN student's final norm is fitted."""

import json
from dataclasses import asdict

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from transformers import BertConfig, BertModel

from hf_ffn import FfnBertModel
from hf_ffn.configuration_ffn_bert import FfnBertConfig
from hf_ffn.conversion import convert_checkpoint, load_converted, load_pruned, pruning
from hf_ffn.conversion.pruning import GramStatistics, ffn_features, importance_scores, solve_down, top_units
from hf_ffn.healing import HealArguments, healed_folder, layerwise, run_healing
from hf_ffn.healing import run as heal_run
from hf_ffn.healing.layerwise import (
    HELD_TENSORS,
    LayerwiseArguments,
    fit_ffn,
    fit_final_norm,
    heal_layerwise,
    relative_squared_error,
    set_down,
)
from hf_ffn.modeling_ffn_bert import FfnBertGatedMLP

from .conftest import TINY
from .test_healing import heal_args, setup, training_args  # noqa: F401  (setup is a fixture)

SEQ = 16


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    """A tiny upstream BERT with std-0.3 weights (so conversions drift as a trained BERT's do)."""
    folder = tmp_path_factory.mktemp("lw_teacher")
    torch.manual_seed(0)
    BertModel(BertConfig(**{**TINY, "intermediate_size": 48, "initializer_range": 0.3})).save_pretrained(folder)
    return str(folder)


def blocks(count=8, seed=0):
    return torch.randint(TINY["vocab_size"], (count, SEQ), generator=torch.Generator().manual_seed(seed))


def teacher_model(folder):
    return FfnBertModel.from_pretrained(folder, add_pooling_layer=False).eval()


def test_closed_form_down_equals_lstsq():
    g = torch.Generator().manual_seed(0)
    features, targets = torch.randn(300, 12, generator=g, dtype=torch.float64), torch.randn(300, 5, generator=g)
    stats = GramStatistics()
    stats.add(features[:100], targets[:100])
    stats.add(features[100:], targets[100:])  # accumulation in chunks is the same sum
    design = torch.cat([features, torch.ones(300, 1, dtype=torch.float64)], 1)
    reference = torch.linalg.lstsq(design, targets.double()).solution  # (13, 5)
    weight, bias = solve_down(stats, ridge=0.0)
    torch.testing.assert_close(weight, reference[:12].T, rtol=0, atol=1e-10)
    torch.testing.assert_close(bias, reference[12], rtol=0, atol=1e-10)
    # ridge on a subset of units: lstsq on the system augmented by sqrt(λ)·I rows (bias not penalised)
    keep = torch.tensor([1, 4, 5, 9])
    lam = 0.3 * features[:, keep].pow(2).sum() / 4
    augmented = torch.cat(
        [
            design[:, [1, 4, 5, 9, 12]],
            torch.cat([lam.sqrt() * torch.eye(4, dtype=torch.float64), torch.zeros(4, 1, dtype=torch.float64)], 1),
        ]
    )
    padded = torch.cat([targets.double(), torch.zeros(4, 5, dtype=torch.float64)])
    reference = torch.linalg.lstsq(augmented, padded).solution
    weight, bias = solve_down(stats, keep, ridge=0.3)
    torch.testing.assert_close(weight, reference[:4].T, rtol=0, atol=1e-10)
    torch.testing.assert_close(bias, reference[4], rtol=0, atol=1e-10)
    # the error computed from the statistics equals the direct one
    direct = relative_squared_error(design[:, [1, 4, 5, 9]] @ weight.T + bias, targets)
    assert pruning.relative_error(stats, weight, bias, keep) == pytest.approx(direct, rel=1e-9)
    with pytest.raises(ValueError, match="ridge must be >= 0"):
        solve_down(stats, ridge=-1.0)


def test_exactly_representable_layer_is_recovered():
    """Student gate/up equal to the teacher GLU's, down perturbed: the closed form gives the teacher's down back."""
    torch.manual_seed(0)
    config = FfnBertConfig(**{**TINY, "intermediate_size": 24})
    teacher = FfnBertGatedMLP(config, "swiglu")
    student = FfnBertGatedMLP(config, "swiglu")
    student.load_state_dict(teacher.state_dict())
    with torch.no_grad():
        student.down_proj.weight.add_(torch.randn_like(student.down_proj.weight))
        student.down_proj.bias.add_(1.0)
        x = torch.randn(4000, TINY["hidden_size"])
        y = teacher(x)
    assert relative_squared_error(student(x), y) > 0.1
    error = set_down(student, pruning.accumulate(student, x, y), ridge=0.0)
    assert error < 1e-10
    torch.testing.assert_close(student.down_proj.weight, teacher.down_proj.weight, rtol=0, atol=1e-5)
    torch.testing.assert_close(student.down_proj.bias, teacher.down_proj.bias, rtol=0, atol=1e-5)
    # the full FFN fit (closed form, Adam, closed form) keeps it there
    record = fit_ffn(student, x, y, LayerwiseArguments(layerwise_steps=0, layerwise_ridge=0.0), seed=0)
    assert record["ffn_rel_error"] < 1e-10
    # Adam at a destructive rate: the steps leave a larger error, so the closed form is kept
    exact = {k: v.clone() for k, v in student.state_dict().items()}
    record = fit_ffn(student, x, y, LayerwiseArguments(layerwise_steps=3, layerwise_lr=1.0, layerwise_ridge=0.0), 0)
    assert record["ffn_kept"] == "closed_form" and record["ffn_rel_error"] < 1e-10
    torch.testing.assert_close(student.down_proj.weight, exact["down_proj.weight"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("score", sorted(pruning.IMPORTANCE_SCORES))
def test_pruning_keeps_the_top_units_by_the_score(teacher_dir, score):
    ids = blocks()
    full, _ = load_converted(teacher_dir, FfnBertModel, ffn_type="swiglu")
    teacher = teacher_model(teacher_dir)
    # the score recomputed directly from the recorded teacher FFN inputs
    inputs = []
    handle = teacher.encoder.layer[1].mlp.register_forward_hook(lambda m, a, o: inputs.append(a[0].reshape(-1, 32)))
    with torch.no_grad():
        teacher(input_ids=ids)
        handle.remove()
        f = ffn_features(full.encoder.layer[1].mlp, torch.cat(inputs)).double()
    d = full.encoder.layer[1].mlp.down_proj.weight.double()
    expected = {
        "magnitude": f.abs().mean(0) * d.norm(dim=0),
        "energy": f.pow(2).mean(0).sqrt() * d.norm(dim=0),
        "wanda": f.norm(dim=0) * d.abs().sum(0),
    }[score]
    keep = torch.topk(expected, 20).indices.sort().values
    gate = full.encoder.layer[1].mlp.gate_proj.weight.clone()
    model, report = load_pruned(teacher_dir, FfnBertModel, input_ids=ids, ffn_type="swiglu", width=20, score=score)
    assert model.config.intermediate_size == 20 and model.encoder.layer[1].mlp.gate_proj.weight.shape == (20, 32)
    assert torch.equal(model.encoder.layer[1].mlp.gate_proj.weight, gate[keep])
    assert report.init == "pruned" and report.layers[1]["pruning"]["kept"] == 20
    stats = pruning.teacher_ffn_statistics(full, teacher, ids)[1]
    torch.testing.assert_close(importance_scores(stats, d.float(), score), expected, rtol=1e-9, atol=0)
    # the refitted down projection beats the kept columns as they were
    assert report.layers[1]["pruning"]["ffn_rel_error"] < pruning.relative_error(
        stats, d[:, keep], full.encoder.layer[1].mlp.down_proj.bias, keep
    )


def test_top_units_and_bad_input(teacher_dir):
    assert top_units(torch.tensor([0.5, 3.0, 1.0, 2.0]), 2).tolist() == [1, 3]
    with pytest.raises(ValueError, match="width 5 must be between 1 and the source width 4"):
        top_units(torch.zeros(4), 5)
    with pytest.raises(ValueError, match="allowed: energy, magnitude, wanda|allowed: magnitude, energy, wanda"):
        load_pruned(teacher_dir, FfnBertModel, input_ids=blocks(), ffn_type="swiglu", score="random")
    with pytest.raises(ValueError, match="integer in 1..47"):
        load_pruned(teacher_dir, FfnBertModel, input_ids=blocks(), ffn_type="swiglu", width=48)
    with pytest.raises(ValueError, match="init='pruned' needs calibration text"):
        load_converted(teacher_dir, FfnBertModel, ffn_type="swiglu", init="pruned", width="matched")


def test_convert_pruned_folder(teacher_dir, tmp_path):
    report = convert_checkpoint(
        teacher_dir,
        tmp_path / "pruned",
        ffn_type="swiglu",
        init="pruned",
        width=32,
        calibration_ids=blocks(),
        prune_score="energy",
    )
    model = FfnBertModel.from_pretrained(tmp_path / "pruned")
    assert model.config.intermediate_size == 32 and model.config.ffn_type == "swiglu"
    assert report.init == "pruned" and report.config_changes["intermediate_size"] == [48, 32]


def run_layerwise(teacher_dir, work, **overrides):
    torch.manual_seed(0)
    student, _ = load_converted(teacher_dir, FfnBertModel, ffn_type="swiglu", init="fresh", width=32)
    args = LayerwiseArguments(**{"layerwise_steps": 5, "layerwise_batch_tokens": 32, **overrides})
    return student, heal_layerwise(student, teacher_model(teacher_dir), blocks(), args, work)


def test_layerwise_fits_and_resumes(teacher_dir, tmp_path, monkeypatch):
    student, result = run_layerwise(teacher_dir, tmp_path / "a")
    # "auto": the LayerNorms sit as the teacher's, so FFN fits on the teacher's own FFN inputs
    assert (result["arguments"]["layerwise_parts"], result["arguments"]["layerwise_inputs"]) == ("ffn", "teacher")
    for record in result["layers"]:
        assert record["ffn_rel_error"] < record["ffn_rel_error_before"]
        assert record["layer_rel_error"] < record["layer_rel_error_before"]
    calls = []
    original = layerwise.fit_ffn

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("interrupted in layer 1")
        return original(*args, **kwargs)

    monkeypatch.setattr(layerwise, "fit_ffn", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_layerwise(teacher_dir, tmp_path / "b")
    assert (tmp_path / "b" / "layer-0.safetensors").is_file() and not (tmp_path / "b" / "layer-1.json").exists()
    monkeypatch.setattr(layerwise, "fit_ffn", original)
    resumed, record = run_layerwise(teacher_dir, tmp_path / "b")
    assert record["layers"][0]["resumed"] and "resumed" not in record["layers"][1]
    for (name, a), b in zip(student.state_dict().items(), resumed.state_dict().values(), strict=False):
        assert torch.equal(a, b), name


def test_memory_cap_is_honoured(teacher_dir, tmp_path):
    cap_blocks = 4  # 64 tokens: more than the 48 + 1 coefficients of a down projection
    cap_mb = cap_blocks * HELD_TENSORS * SEQ * TINY["hidden_size"] * 4 / 1e6
    _, result = run_layerwise(teacher_dir, tmp_path, layerwise_memory_mb=cap_mb, layerwise_steps=0)
    assert result["blocks"] == cap_blocks and result["tokens"] == cap_blocks * SEQ
    assert 0 < result["activation_bytes"] <= cap_mb * 1e6
    with pytest.raises(ValueError, match="--layerwise_memory_mb 0.001: one block of 16 tokens needs"):
        run_layerwise(teacher_dir, tmp_path / "x", layerwise_memory_mb=0.001)
    _, result = run_layerwise(teacher_dir, tmp_path / "tokens", layerwise_tokens=5 * SEQ + 3, layerwise_steps=0)
    assert result["tokens"] == 5 * SEQ


def test_final_norm_closed_form():
    g = torch.Generator().manual_seed(0)
    stream = torch.randn(500, 32, generator=g) * 3 + 1
    reference = nn.LayerNorm(32)
    with torch.no_grad():
        reference.weight.copy_(torch.randn(32, generator=g))
        reference.bias.copy_(torch.randn(32, generator=g))
        target = reference(stream)
        record = fit_final_norm(norm := nn.LayerNorm(32), stream, target)
    assert record["final_norm_rel_error"] < 1e-10 < record["final_norm_rel_error_before"]
    torch.testing.assert_close(norm.weight, reference.weight, rtol=0, atol=1e-5)


def test_pre_ln_by_layer_targets(teacher_dir, tmp_path):
    torch.manual_seed(0)
    student, _ = load_converted(teacher_dir, FfnBertModel, layer_norm_position="pre")
    teacher = teacher_model(teacher_dir)
    with pytest.raises(ValueError, match="use --layerwise_parts layer"):
        heal_layerwise(student, teacher, blocks(), LayerwiseArguments(layerwise_parts="ffn"), tmp_path / "ffn")
    with pytest.raises(ValueError, match="--layerwise_inputs student applies to the whole-layer fit"):
        LayerwiseArguments(layerwise_parts="ffn", layerwise_inputs="student")
    ids = blocks()
    with torch.no_grad():
        before = relative_squared_error(
            student(input_ids=ids).last_hidden_state, teacher(input_ids=ids).last_hidden_state
        )
    # the default parts/inputs ("auto") resolve to whole layers on the student's own inputs for a Pre-LN student
    args = LayerwiseArguments(layerwise_steps=30, layerwise_batch_tokens=64, layerwise_lr=3e-3)
    result = heal_layerwise(student, teacher, ids, args, tmp_path / "pre")
    assert (result["arguments"]["layerwise_parts"], result["arguments"]["layerwise_inputs"]) == ("layer", "student")
    with torch.no_grad():
        after = relative_squared_error(
            student(input_ids=ids).last_hidden_state, teacher(input_ids=ids).last_hidden_state
        )
    assert "final_norm" in result and after < before / 2
    assert result["layers"][-1]["through_final_norm"] and not result["layers"][0]["through_final_norm"]
    # the last layer's saved state holds the final norm fitted with it (a resumed run restores both)
    assert any(key.startswith("norm.") for key in load_file(str(tmp_path / "pre" / "layer-1.safetensors")))
    assert all(r["layer_rel_error"] < r["layer_rel_error_before"] for r in result["layers"])


def test_pre_ln_free_stream_fits_the_normalised_stream(teacher_dir, tmp_path):
    """`--layerwise_stream free`: layers before the last are fitted and measured on the normalised stream (the
    recorded error is recomputed here by hand); the last goes through final_norm as before."""
    torch.manual_seed(0)
    student, _ = load_converted(teacher_dir, FfnBertModel, layer_norm_position="pre")
    teacher, ids = teacher_model(teacher_dir), blocks()
    args = LayerwiseArguments(layerwise_steps=30, layerwise_batch_tokens=64, layerwise_lr=3e-3)  # default: free
    result = heal_layerwise(student, teacher, ids, args, tmp_path / "free")
    first, last = result["layers"]
    assert (first["free_stream"], last["free_stream"], last["through_final_norm"]) == (True, False, True)
    assert first["layer_rel_error"] < first["layer_rel_error_before"]
    with torch.no_grad():
        s0 = student.encoder.layer[0](student.embeddings(input_ids=ids))
        t0 = teacher.encoder.layer[0](teacher.embeddings(input_ids=ids))
    by_hand = relative_squared_error(layerwise.normalized(s0), layerwise.normalized(t0))
    assert first["propagated_rel_error"] == pytest.approx(by_hand, rel=1e-5)
    assert first["stream_norm"] == pytest.approx(float(s0.norm(dim=-1).mean()), rel=1e-5)
    # the normalised view ignores each token's scale and mean: only the direction of the centred vector counts
    assert relative_squared_error(layerwise.normalized(3 * s0 + 2), layerwise.normalized(s0)) < 1e-10
    with pytest.raises(ValueError, match="--layerwise_stream has unknown value 'loose'; allowed: free, teacher"):
        LayerwiseArguments(layerwise_stream="loose")
    # a rerun into the folder resumes only with the same arguments (else the layers would be another fit's)
    other = LayerwiseArguments(
        layerwise_steps=30, layerwise_batch_tokens=64, layerwise_lr=3e-3, layerwise_stream="teacher"
    )
    with pytest.raises(ValueError, match="--layerwise_stream 'free' there, 'teacher' now"):
        heal_layerwise(student, teacher, ids, other, tmp_path / "free")
    # a folder from before arguments.json was written: the layer records still tell the stream apart
    (tmp_path / "free" / "arguments.json").unlink()
    with pytest.raises(ValueError, match="layer 0 was fitted with --layerwise_stream free, this run asks for teacher"):
        heal_layerwise(student, teacher, ids, other, tmp_path / "free")
    # ... and the refused run recorded nothing there: a rerun with the layers' own stream resumes them (it was refused
    # as "--layerwise_stream 'teacher' there" when the refused run wrote its arguments.json)
    resumed = heal_layerwise(student, teacher, ids, args, tmp_path / "free")
    assert [r.get("resumed") for r in resumed["layers"]] == [True, True] and resumed["final_norm"]["resumed"]
    assert not (tmp_path / "free" / "arguments.json").exists()


def test_a_folder_without_finished_fits_takes_new_arguments(teacher_dir, tmp_path, monkeypatch):
    """A run stopped before its first fit leaves `arguments.json` but no layer: a rerun with other arguments fits
    and records them (it was refused as one with other layer-wise arguments, as was the rerun after a refused
    --layerwise_tokens). Once a layer is finished, another seed or other calibration tokens are refused too."""
    with pytest.raises(ValueError, match="--layerwise_tokens: 16 calibration tokens cannot determine"):
        run_layerwise(teacher_dir, tmp_path / "w", layerwise_tokens=SEQ)
    assert not (tmp_path / "w" / "arguments.json").exists()

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt("stopped in layer 0")

    with monkeypatch.context() as patch:
        patch.setattr(layerwise, "fit_ffn", stopped)
        with pytest.raises(KeyboardInterrupt):
            run_layerwise(teacher_dir, tmp_path / "w")
    assert json.loads((tmp_path / "w" / "arguments.json").read_text())["layerwise_steps"] == 5
    _, result = run_layerwise(teacher_dir, tmp_path / "w", layerwise_steps=0)
    assert result["tokens"] == 8 * SEQ and not any(r.get("resumed") for r in result["layers"])
    saved = json.loads((tmp_path / "w" / "arguments.json").read_text())
    assert saved == {**result["arguments"], "seed": 0, "calibration_sha256": layerwise.calibration_digest(blocks())}
    assert (saved["layerwise_tokens"], saved["layerwise_steps"]) == (65536, 0)
    with pytest.raises(
        ValueError,
        match=r"w holds layers fitted with other layer-wise arguments \(--layerwise_steps "
        r"0 there, 5 now\); use another --output_dir, or the same arguments",
    ):
        run_layerwise(teacher_dir, tmp_path / "w")
    student, _ = load_converted(teacher_dir, FfnBertModel, ffn_type="swiglu", init="fresh", width=32)
    args = LayerwiseArguments(layerwise_steps=0, layerwise_batch_tokens=32)
    with pytest.raises(ValueError, match=r"\(--seed 0 there, 1 now\)"):
        heal_layerwise(student, teacher_model(teacher_dir), blocks(), args, tmp_path / "w", seed=1)
    with pytest.raises(ValueError, match=r"\(other calibration tokens \(--train_files, --max_seq_length"):
        heal_layerwise(student, teacher_model(teacher_dir), blocks(seed=1), args, tmp_path / "w")
    with pytest.raises(ValueError, match="other calibration tokens"):  # the same tokens in blocks of another length
        heal_layerwise(student, teacher_model(teacher_dir), blocks().reshape(16, SEQ // 2), args, tmp_path / "w")
    resumed = heal_layerwise(student, teacher_model(teacher_dir), blocks(), args, tmp_path / "w")
    assert all(r["resumed"] for r in resumed["layers"])


def test_card_section_names_the_free_stream_layers():
    """The model card's layer-wise section: the stream note names the layers fitted `free` (a SwiGLU student, whose
    LayerNorms sit as the teacher's, has none even under the default `free`), and the last column is each layer's
    stream norm."""
    arguments = {**asdict(LayerwiseArguments()), "layerwise_parts": "layer", "layerwise_inputs": "student"}
    layers = [
        {
            "layer": 0,
            "free_stream": True,
            "layer_rel_error_before": 1.217,
            "layer_rel_error": 0.002,
            "propagated_rel_error": 0.002,
            "stream_norm": 16.1,
        },
        {
            "layer": 1,
            "free_stream": False,
            "through_final_norm": True,
            "layer_rel_error_before": 13.29,
            "layer_rel_error": 0.133,
            "propagated_rel_error": 0.133,
            "stream_norm": 191.5,
        },
    ]
    record = {
        "arguments": arguments,
        "tokens": 65536,
        "blocks": 512,
        "activation_bytes": 6e8,
        "seconds": 395.0,
        "layers": layers,
    }
    card = healed_folder.layerwise_section(record)
    assert "residual stream `free` (layers 0): " in card
    assert "| 0 | - → - | 1.217 → 0.002 | 0.002 | 16.1 |" in card
    assert "| 1 | - → - | 13.29 → 0.133 | 0.133 | 191.5 |" in card
    same_norms = {**record, "layers": [{**r, "free_stream": False} for r in layers]}
    assert "hidden states compared as they are." in healed_folder.layerwise_section(same_norms)
    assert "`free`" not in healed_folder.layerwise_section(same_norms)


def test_heal_method_layerwise_writes_per_layer_errors(
    setup,  # noqa: F811  (the fixture imported from test_healing, requested by name)
    tmp_path,
    monkeypatch,
):
    """`run_healing --method layerwise` without the end-to-end stage (max_steps 0): the healed folder's report and
    card carry the per-layer errors, and the agreement with the teacher improves."""
    convert_checkpoint(str(setup / "teacher"), tmp_path / "student", ffn_type="swiglu", init="fresh", width=24)
    args = heal_args(setup, tmp_path / "student", method="layerwise")
    healing = run_healing(
        args,
        training_args(tmp_path / "run", max_steps=0),
        layerwise_args=LayerwiseArguments(layerwise_steps=20, layerwise_batch_tokens=64),
    )
    assert healing["steps"] == 0 and len(healing["layerwise"]["layers"]) == TINY["num_hidden_layers"]
    assert healing["after"]["agreement"]["cosine_mean"] > healing["before"]["agreement"]["cosine_mean"]
    report = json.loads((tmp_path / "run" / "healed" / "conversion_report.json").read_text())
    assert report["healing"]["layerwise"]["layers"][1]["ffn_rel_error"] < 1
    card = (tmp_path / "run" / "healed" / "README.md").read_text()
    assert "## Layer-wise healing" in card and "| 1 |" in card
    # the end-to-end stage follows when --max_steps > 0 (resuming the finished layer-wise fits from output_dir)
    healing = run_healing(
        heal_args(setup, tmp_path / "student", method="layerwise", healed_dir=str(tmp_path / "healed2")),
        training_args(tmp_path / "run", max_steps=2),
        layerwise_args=LayerwiseArguments(layerwise_steps=20, layerwise_batch_tokens=64),
    )
    assert healing["steps"] == 2 and all(r["resumed"] for r in healing["layerwise"]["layers"])

    # a rerun with other layer-wise arguments is refused before a model is loaded (or measured)
    def no_loading(*args, **kwargs):
        raise AssertionError("the teacher was loaded before the layer-wise arguments were checked")

    monkeypatch.setattr(heal_run, "load_teacher", no_loading)
    with pytest.raises(
        ValueError,
        match=r"holds layers fitted with other layer-wise arguments \(--layerwise_steps "
        r"20 there, 30 now\)",
    ):
        run_healing(
            heal_args(setup, tmp_path / "student", method="layerwise", healed_dir=str(tmp_path / "healed3")),
            training_args(tmp_path / "run", max_steps=0),
            layerwise_args=LayerwiseArguments(layerwise_steps=30, layerwise_batch_tokens=64),
        )
    monkeypatch.undo()
    # layer-wise is the command's default method (the best measured, studies/healing/healing.md)
    assert HealArguments(student="s", train_files=["t"]).method == "layerwise"
    with pytest.raises(ValueError, match="--method has unknown value 'greedy'; allowed: end_to_end, layerwise"):
        heal_args(setup, tmp_path / "student", method="greedy")
    # layer-wise options given to an end-to-end run are refused, not silently ignored (names each one)
    with pytest.raises(
        ValueError,
        match=r"^--layerwise_steps, --layerwise_parts set the layer-wise stage, which "
        r"--method end_to_end does not run",
    ):
        run_healing(
            heal_args(setup, tmp_path / "student", method="end_to_end"),
            training_args(tmp_path / "e2e"),
            layerwise_args=LayerwiseArguments(layerwise_parts="layer", layerwise_steps=5),
        )
    assert not (tmp_path / "e2e").exists()


def test_adam_fit_calls_back_every_n_steps():
    """`--layerwise_refit_every 3` over 7 steps: down_proj re-solved after steps 3 and 6 (the final solve follows)."""
    parameter, calls = nn.Parameter(torch.zeros(3)), []
    losses = layerwise.adam_fit(
        [parameter],
        lambda index: (parameter - 1).pow(2).sum(),
        10,
        2,
        7,
        0.1,
        0,
        every=3,
        callback=lambda: calls.append(len(calls)),
    )
    assert len(losses) == 7 and calls == [0, 1] and losses[-1] < losses[0]


def test_too_few_calibration_tokens_are_refused_or_warned(caplog):
    from hf_ffn.healing.layerwise import MIN_TOKENS_PER_UNIT, check_calibration_tokens

    with pytest.raises(
        ValueError,
        match=r"--layerwise_tokens: 1024 calibration tokens cannot determine a down "
        r"projection of 1536 units \(needs more than 1537",
    ):
        check_calibration_tokens(1024, 1536)
    with caplog.at_level("WARNING", logger="hf_ffn.healing.layerwise"):
        check_calibration_tokens(4096, 1024)
    assert "4096 calibration tokens for 1024 FFN units" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="hf_ffn.healing.layerwise"):
        check_calibration_tokens(MIN_TOKENS_PER_UNIT * 1024, 1024)
    assert caplog.text == ""


def test_layerwise_fits_show_progress(teacher_dir, tmp_path, capsys):
    """A tqdm bar (transformers') over the layers, ending at every layer done, and one over each fit's Adam steps."""
    run_layerwise(teacher_dir, tmp_path / "progress")
    err = capsys.readouterr().err
    layers = BertConfig.from_pretrained(teacher_dir).num_hidden_layers
    assert "layer-wise healing: 100%" in err and f"{layers}/{layers}" in err
    assert "FFN fit" in err
