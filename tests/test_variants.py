"""The named variants (`hf_ffn.variants`): each converts as it says (the exact ones to the source's function bit for
bit, the others with a real measured difference), a wrong name is refused naming the allowed ones, each healing
recipe is a set of real `hf-ffn heal` arguments, and a conversion that is not function-preserving warns once, with
the measured difference and the next step, when converted and when loaded, and says so on its model card."""

import dataclasses
import json
import logging
import shutil

import pytest
import torch
from transformers import AutoModel, AutoTokenizer, BertConfig, BertModel, TrainingArguments

from hf_ffn import BASELINE, VARIANTS, FfnBertModel, get_variant
from hf_ffn.conversion import REPORT_FILE, convert_checkpoint, example_batch
from hf_ffn.conversion_warning import (
    COLLAPSE_STUDY,
    HEALING_GUIDE,
    not_function_preserving_message,
    warn_if_not_function_preserving,
)
from hf_ffn.healing import HealArguments, LayerwiseArguments
from hf_ffn.variants import variant_of_report

from .conftest import TINY, find_bundled_checkpoint

LOGGER = "hf_ffn.conversion_warning"
COLLAPSE = "fine-tuning it collapsed on three of the four tasks tried, healed or not"


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A tiny upstream BERT (std-0.3 weights, so conversions drift as a trained BERT's do) with the bundled BERT
    tokenizer, FFN width 384 (its parameter-matched SwiGLU width is 256), and a text file for calibration."""
    root = tmp_path_factory.mktemp("variants")
    tokenizer = AutoTokenizer.from_pretrained(find_bundled_checkpoint())
    torch.manual_seed(0)
    config = BertConfig(
        **{
            **TINY,
            "vocab_size": tokenizer.vocab_size,
            "max_position_embeddings": 128,
            "intermediate_size": 384,
            "initializer_range": 0.3,
        }
    )
    BertModel(config).save_pretrained(root / "bert")
    tokenizer.save_pretrained(root / "bert")
    text = root / "calibration.txt"
    text.write_text(
        " ".join(f"sentence number {i} says something about the weather and the river." for i in range(200)),
        encoding="utf-8",
    )
    return root


def outputs(model, folder):
    batch = example_batch(str(folder), model.config)
    with torch.no_grad():
        return model.eval()(**batch).last_hidden_state


def test_the_list_names_the_agreed_variants_and_the_baseline():
    assert list(VARIANTS) == ["gelu-post", "geglu", "swiglu-approx", "swiglu-matched", "pre-ln"]
    assert BASELINE == "gelu-post" and VARIANTS[BASELINE].ffn_type is None and VARIANTS[BASELINE].exact
    for name, variant in VARIANTS.items():
        assert variant.name == name and get_variant(name) is variant
        assert (variant.heal is None) == variant.exact, name  # what is not exact carries its healing recipe


def test_unknown_variant_names_the_value_and_the_allowed_names():
    with pytest.raises(ValueError, match=r"'swiglu'.*allowed: gelu-post, geglu, swiglu-approx, swiglu-matched, pre-ln"):
        get_variant("swiglu")
    with pytest.raises(ValueError, match="allowed"):
        get_variant(None)


def test_each_healing_recipe_is_made_of_real_heal_arguments():
    """Every key is a field `hf-ffn heal` parses (HealArguments, LayerwiseArguments or TrainingArguments), and the
    layer-wise ones build valid `LayerwiseArguments`."""
    known = {f.name for cls in (HealArguments, LayerwiseArguments, TrainingArguments) for f in dataclasses.fields(cls)}
    layerwise_fields = {f.name for f in dataclasses.fields(LayerwiseArguments)}
    for variant in VARIANTS.values():
        for key in variant.heal or {}:
            assert key in known, (variant.name, key)
        LayerwiseArguments(**{k: v for k, v in (variant.heal or {}).items() if k in layerwise_fields})
    assert VARIANTS["pre-ln"].heal["layerwise_stream"] == "free"  # the best Pre-LN probe of docs/healing.md


@pytest.mark.parametrize("name", list(VARIANTS))
def test_convert_each_variant_exact_as_it_says(source, tmp_path, name):
    variant = get_variant(name)
    out = tmp_path / name
    report = variant.convert(
        str(source / "bert"), out, calibration_files=[str(source / "calibration.txt")], calibration_tokens=2048
    )
    assert report.exact == variant.exact
    model = FfnBertModel.from_pretrained(out, warn_not_function_preserving=False)
    config = model.config
    assert set(config.ffn_types) == {variant.ffn_type or "gelu"}
    assert set(config.layer_norm_positions) == {variant.layer_norm_position or "post"}
    upstream = BertModel.from_pretrained(source / "bert")
    expected, actual = outputs(upstream, source / "bert"), outputs(model, source / "bert")
    difference = report.difference["last_hidden_state"]
    if variant.exact:
        assert torch.equal(expected, actual) and difference["equal"] and difference["max_abs_diff"] == 0.0
    else:
        assert not torch.equal(expected, actual) and not difference["equal"]
        assert difference["max_abs_diff"] > 1e-4  # a real drift, not rounding
    if name == "swiglu-matched":  # pruned to the parameter-matched width
        assert config.intermediate_size == 256 and report.init == "pruned"


def test_convert_refuses_overriding_a_switch_and_pruning_without_text(source, tmp_path):
    with pytest.raises(ValueError, match="sets ffn_type itself"):
        get_variant("geglu").convert(str(source / "bert"), tmp_path / "a", ffn_type="swiglu")
    with pytest.raises(ValueError, match="needs calibration_files"):
        get_variant("swiglu-matched").convert(str(source / "bert"), tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def records(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_convert_and_load_warn_once_with_the_difference_and_the_next_step(source, tmp_path, caplog):
    out = tmp_path / "approx"
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        report = convert_checkpoint(str(source / "bert"), out, ffn_type="swiglu")
    (message,) = records(caplog)
    max_diff = report.difference["last_hidden_state"]["max_abs_diff"]
    assert f"{out} (init=preserving, ffn_type 'gelu' → 'swiglu') is not function-preserving" in message
    assert f"differs from the source's by up to {max_diff:.3g}" in message
    assert f"`hf-ffn heal --student {out} --train_files TEXT --output_dir OUTPUT`" in message
    assert HEALING_GUIDE in message
    assert "(init=preserving, not function-preserving)" in report.summary().splitlines()[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        AutoModel.from_pretrained(out)  # the same text in the same process: said once already
    assert records(caplog) == []
    copy = shutil.copytree(out, tmp_path / "copied")  # a folder not seen yet in this process
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        AutoModel.from_pretrained(copy)
        FfnBertModel.from_pretrained(copy)  # a second load: no second warning
    assert records(caplog) == [message.replace(str(out), str(copy))]
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "**Warning.**" in card and "This model (init=preserving" in card
    assert "`hf-ffn heal --student path/to/this/folder --train_files TEXT --output_dir OUTPUT`" in card


def test_pre_ln_warns_what_healing_measured_and_points_to_the_guide(source, tmp_path, caplog):
    out = tmp_path / "pre"
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        report = convert_checkpoint(str(source / "bert"), out, layer_norm_position="pre")
    (message,) = records(caplog)
    assert "is not function-preserving" in message and "hf-ffn heal" in message
    assert COLLAPSE in message
    assert f"({COLLAPSE_STUDY})" in message and "docs/tasks.md" not in message and f"read {HEALING_GUIDE}" in message
    assert "not function-preserving" in report.summary().splitlines()[0]
    card = (out / "README.md").read_text(encoding="utf-8")
    assert COLLAPSE in card
    # healed since: no request to heal, but what fine-tuning measured stays
    healed = {**json.loads((out / REPORT_FILE).read_text()), "healing": {"method": "layerwise"}}
    text = not_function_preserving_message(healed, "healed")
    assert COLLAPSE in text and "hf-ffn heal" not in text


def test_exact_and_healed_conversions_do_not_warn(source, tmp_path, caplog):
    exact = tmp_path / "geglu"
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        convert_checkpoint(str(source / "bert"), exact, ffn_type="geglu")
        FfnBertModel.from_pretrained(exact)
        FfnBertModel.from_pretrained(source / "bert")  # a plain BERT folder: no report, nothing to say
    assert records(caplog) == []
    assert "**Warning.**" not in (exact / "README.md").read_text(encoding="utf-8")
    approx = tmp_path / "approx"
    report = convert_checkpoint(str(source / "bert"), approx, ffn_type="swiglu").to_dict()
    assert warn_if_not_function_preserving({**report, "healing": {}}) is None  # healed SwiGLU: nothing to say
    assert variant_of_report(report) is VARIANTS["swiglu-approx"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        FfnBertModel.from_pretrained(approx, warn_not_function_preserving=False)
    assert records(caplog) == []


def test_fine_tuning_hook_takes_the_in_memory_report(source):
    """What training's `load_model` returns for a variant (the report as a dict, no measured difference)."""
    from hf_ffn.conversion import load_converted

    _, report = load_converted(str(source / "bert"), FfnBertModel, layer_norm_position="pre")
    message = warn_if_not_function_preserving(json.loads(report.to_json()))
    assert "output difference from the source was not measured" in message
    assert "CONVERTED_FOLDER" in message and COLLAPSE in message
    with pytest.raises(TypeError, match="source must be"):
        warn_if_not_function_preserving(3)


def test_fine_tuning_a_variant_that_is_not_function_preserving_warns_once(source, caplog):
    """`hf_ffn.training.outputs.load_model` (every fine-tuning entry point) converting on the fly: warned once, with the
    next step; an exact conversion says nothing."""
    from transformers.utils import logging as hf_logging

    from hf_ffn import FfnBertForSequenceClassification
    from hf_ffn.training.arguments import ModelArguments
    from hf_ffn.training.outputs import load_model

    hf_logging.get_logger(LOGGER).warning_once.cache_clear()  # whatever an earlier test said, it may be said again
    approx = ModelArguments(model_name_or_path=str(source / "bert"), ffn_type="swiglu")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        load_model(approx, FfnBertForSequenceClassification, num_labels=2)
        load_model(approx, FfnBertForSequenceClassification, num_labels=2)  # once, not per load
    (message,) = records(caplog)
    assert "this conversion (init=preserving, ffn_type 'gelu' → 'swiglu') is not function-preserving" in message
    assert "`hf-ffn heal --student CONVERTED_FOLDER --train_files TEXT --output_dir OUTPUT`" in message
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        load_model(
            ModelArguments(model_name_or_path=str(source / "bert"), ffn_type="geglu"),
            FfnBertForSequenceClassification,
            num_labels=2,
        )
    assert records(caplog) == []


def test_a_checkpoint_with_heads_is_warned_with_its_heads_measured_difference(source, tmp_path):
    """A `BertForPreTraining` source is compared on its heads' outputs (no last_hidden_state in the report): the
    warning quotes the first of them rather than saying nothing was measured."""
    from transformers import BertForPreTraining

    torch.manual_seed(0)
    config = BertConfig.from_pretrained(source / "bert")
    BertForPreTraining(config).save_pretrained(tmp_path / "pretraining")
    AutoTokenizer.from_pretrained(source / "bert").save_pretrained(tmp_path / "pretraining")
    report = convert_checkpoint(str(tmp_path / "pretraining"), tmp_path / "approx", ffn_type="swiglu").to_dict()
    assert "last_hidden_state" not in report["difference"]
    d = report["difference"]["prediction_logits"]
    message = not_function_preserving_message(report, tmp_path / "approx")
    assert f"its output prediction_logits differs from the source's by up to {d['max_abs_diff']:.3g}" in message
    assert "not measured" not in message
