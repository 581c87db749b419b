"""ELECTRA through FfnElectra: bit-exact parity with upstream's `Electra*` classes, every head.

Two tiny seeded random ELECTRA discriminators at odd sizes (head size 16, FFN width 37): one whose embeddings are
narrower than the encoder (embedding_size 19 → hidden 32 through `embeddings_project`, as electra-small's 128 → 256)
and one with equal sizes (electra-base's layout: no projection). Each is saved by upstream's class per head; each
cell loads upstream and FfnElectra from the same folder and asserts `torch.equal` on every output (each hidden state,
each attention map, each logit), eager and sdpa. Then: padding-free batches, `unpad_tokens=True` within
`UNPADDED_FP32_TOLERANCE`, variants that must differ (GeGLU, Pre-LN, another activation), folders both ways, the
parity job and `hf-ffn convert` on an ELECTRA folder, electra-small's and electra-base's real shapes, the real
checkpoint when cached, remote code without hf_ffn, one-line errors, and `finetune` on an ELECTRA discriminator.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import transformers
from huggingface_hub import try_to_load_from_cache
from safetensors.torch import load_file
from transformers import (
    AutoConfig,
    ElectraConfig,
    ElectraForPreTraining,
    GPT2Config,
    RobertaConfig,
)
from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING

import hf_ffn
from hf_ffn import (
    FfnBertConfig,
    FfnBertForNextSentencePrediction,
    FfnBertForSequenceClassification,
    FfnElectraConfig,
    FfnElectraForMaskedLM,
    FfnElectraForPreTraining,
    FfnElectraModel,
)
from hf_ffn.cli import main
from hf_ffn.conversion import load_converted
from hf_ffn.families import SUPPORTED_MODEL_TYPES, checkpoint_family
from hf_ffn.modeling_ffn_electra import AUTO_MAP, HEAD_CLASSES
from hf_ffn.parity import (
    FLATTENED,
    UNPADDED_FP32_TOLERANCE,
    UPSTREAM_MASKS_PACKED_SEQUENCES,
    compare_outputs,
    quiet_transformers,
    run_parity,
)

from .conftest import assert_equal_but_row_count

ATTENTIONS = ("eager", "sdpa")
HEAD_IDS = [head.ffn_bert.__name__ for head in HEAD_CLASSES]
# Odd sizes; `embedding_size` 19 is projected to hidden 32 ("projected"), or equal to it ("equal").
TINY_ELECTRA = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=37,
    max_position_embeddings=64,
)
SIZES = {"projected": dict(TINY_ELECTRA, embedding_size=19), "equal": dict(TINY_ELECTRA, embedding_size=32)}
LENGTHS = (7, 4, 2)
# The outputs that name each head's task, besides the hidden states and attention maps every head returns.
HEAD_OUTPUTS = {
    "FfnElectraModel": {"last_hidden_state"},
    "FfnElectraForPreTraining": {"logits"},
    "FfnElectraForMaskedLM": {"logits"},
    "FfnElectraForSequenceClassification": {"logits"},
    "FfnElectraForTokenClassification": {"logits"},
    "FfnElectraForQuestionAnswering": {"start_logits", "end_logits"},
    "FfnElectraForMultipleChoice": {"logits"},
}
# The heads whose outputs are per token (compared on a padding-free batch); the other two read one token per row.
PER_TOKEN_AUTO_CLASSES = (
    "AutoModel",
    "AutoModelForPreTraining",
    "AutoModelForMaskedLM",
    "AutoModelForTokenClassification",
    "AutoModelForQuestionAnswering",
)
NOT_CACHED = (
    "google/electra-small-discriminator is not in the local HF cache. To run this test, on a machine with network run "
    "`hf download google/electra-small-discriminator config.json pytorch_model.bin vocab.txt tokenizer_config.json` "
    "once, then rerun pytest (the suite itself stays offline)."
)


def upstream_class(head) -> type:
    """Upstream's ELECTRA class for `head`: its Auto class's entry for `ElectraConfig`."""
    return getattr(transformers, head.auto_class)._model_mapping[ElectraConfig]


def electra_batch(vocab_size: int = TINY_ELECTRA["vocab_size"], lengths=LENGTHS, seed: int = 0) -> dict:
    """A BERT-tokenizer-shaped padded batch (ELECTRA's tokenizer is BERT's): seeded ids in 1 .. vocab_size − 1, pads
    (0) after, a second segment from the middle of each row; `input_ids`, `token_type_ids`, `attention_mask`
    (len(lengths), max(lengths))."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    token_type_ids, attention_mask = torch.zeros_like(input_ids), torch.zeros_like(input_ids)
    for row, n in enumerate(lengths):
        input_ids[row, :n] = torch.randint(1, vocab_size, (n,), generator=generator)
        token_type_ids[row, n // 2 : n] = 1
        attention_mask[row, :n] = 1
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


def inputs_for(head, batch: dict) -> dict:
    """`batch` as `head` takes it: for multiple choice (batch, 2, seq), the batch and its rows reversed."""
    if head.auto_class == "AutoModelForMultipleChoice":
        return {k: torch.stack([v, v.flip(0)], dim=1) for k, v in batch.items()}
    return batch


def flattened(batch: dict) -> dict:
    """The real tokens of `batch` as one padding-free row (`DataCollatorWithFlattening`'s layout: positions restart
    at 0 per sequence, no mask)."""
    real = batch["attention_mask"].bool()
    positions = torch.cat([torch.arange(n) for n in real.sum(1).tolist()])[None]
    return {"input_ids": batch["input_ids"][real][None], "token_type_ids": batch["token_type_ids"][real][None]} | {
        "position_ids": positions
    }


def run(model, inputs: dict, attn: str = "sdpa"):
    with torch.no_grad():
        return model(**inputs, output_hidden_states=True, output_attentions=attn == "eager")


def perturb_constants(model):
    """Seeded noise on every parameter that initialisation leaves constant (LayerNorms' ones and zeros, linear
    biases), so that a LayerNorm or bias in the wrong place changes the outputs."""
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.min() == parameter.max():
                parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def assert_all_equal(rows) -> None:
    assert rows and all(r.equal for r in rows), [(r.head, r.output, r.max_abs_diff) for r in rows if not r.equal]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, dict[str, str]]:
    """size → Auto class name → a folder saved by upstream's ELECTRA class of that head (seeded)."""
    root = tmp_path_factory.mktemp("electra_family")
    saved = {}
    for s, (size, config) in enumerate(SIZES.items()):
        saved[size] = {}
        for h, head in enumerate(HEAD_CLASSES):
            torch.manual_seed(100 * s + h)
            model = perturb_constants(upstream_class(head)(ElectraConfig(**config)))
            folder = root / size / head.auto_class
            model.save_pretrained(folder)
            saved[size][head.auto_class] = str(folder)
    return saved


@pytest.fixture(scope="module")
def pairs(folders):
    """(upstream, FfnElectra) for (size, head) from the same folder, each loaded once for the module (FfnElectra's
    loading info checked: nothing missing or unexpected), set to the attention asked for."""
    loaded = {}

    def pair(size, head, attn="eager"):
        if (size, head.auto_class) not in loaded:
            folder = folders[size][head.auto_class]
            with quiet_transformers():
                reference = upstream_class(head).from_pretrained(folder).eval()
                candidate, info = head.ffn_bert.from_pretrained(folder, output_loading_info=True)
            assert not info["missing_keys"] and not info["unexpected_keys"], info
            loaded[size, head.auto_class] = reference, candidate.eval()
        models = loaded[size, head.auto_class]
        for model in models:
            model.set_attn_implementation(attn)
            assert model.config._attn_implementation == attn
        return models

    return pair


def test_head_table_is_every_exported_electra_head():
    exported = {name for name in hf_ffn.__all__ if name.startswith("FfnElectraFor")} | {"FfnElectraModel"}
    assert set(HEAD_IDS) == exported == set(HEAD_OUTPUTS)
    assert [upstream_class(head) for head in HEAD_CLASSES] == [head.bert for head in HEAD_CLASSES]
    assert AUTO_MAP["AutoModelForPreTraining"] == "modeling_ffn_electra.FfnElectraForPreTraining"
    assert TOKENIZER_MAPPING[FfnElectraConfig] is TOKENIZER_MAPPING[ElectraConfig]  # BERT's WordPiece, as upstream
    assert {"electra", "ffn_electra"} <= set(SUPPORTED_MODEL_TYPES)


# ---------------------------------------------------------------------------------------------------------------
# The matrix: size × attention × head, every output torch.equal
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("head", HEAD_CLASSES, ids=HEAD_IDS)
@pytest.mark.parametrize("attn", ATTENTIONS)
@pytest.mark.parametrize("size", SIZES)
def test_every_output_bit_exact(pairs, size, attn, head):
    reference, candidate = pairs(size, head, attn)
    projected = SIZES[size]["embedding_size"] != SIZES[size]["hidden_size"]
    assert (
        hasattr(candidate.base_model, "embeddings_project")
        is projected
        is hasattr(reference.base_model, "embeddings_project")
    )
    inputs = inputs_for(head, electra_batch())
    ref, ours = run(reference, inputs, attn), run(candidate, inputs, attn)
    rows = compare_outputs(head.ffn_bert.__name__, ref, ours)
    assert_all_equal(rows)
    outputs = {r.output for r in rows}
    layers = TINY_ELECTRA["num_hidden_layers"]
    assert HEAD_OUTPUTS[head.ffn_bert.__name__] <= outputs
    assert {f"hidden_states[{i}]" for i in range(layers + 1)} <= outputs
    assert ours.hidden_states[0].shape[-1] == TINY_ELECTRA["hidden_size"]  # the projected embeddings
    assert {o for o in outputs if o.startswith("attentions")} == (
        {f"attentions[{i}]" for i in range(layers)} if attn == "eager" else set()
    )


def test_discriminator_logits_are_one_score_per_token(pairs):
    """What the pre-training head computes: `dense_prediction(hidden_act(dense(h)))` per token, (batch, seq)."""
    reference, candidate = pairs("projected", HEAD_CLASSES[1], "sdpa")
    batch = electra_batch()
    out = run(candidate, batch)
    head = candidate.discriminator_predictions
    by_hand = head.dense_prediction(torch.nn.functional.gelu(head.dense(out.hidden_states[-1]))).squeeze(-1)
    assert out.logits.shape == batch["input_ids"].shape
    assert torch.equal(out.logits, by_hand.detach())


# ---------------------------------------------------------------------------------------------------------------
# Padding-free batches and unpad_tokens=True
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("head", [h for h in HEAD_CLASSES if h.auto_class in PER_TOKEN_AUTO_CLASSES], ids=str)
@pytest.mark.parametrize("attn", ATTENTIONS)
def test_flattened_batch_bit_exact(pairs, attn, head):
    """A padding-free batch (positions restarting at 0, as BERT's): upstream masks the sequences apart from
    `position_ids` (transformers ≥ 5.25), FfnElectra the same; every per-token output `torch.equal`."""
    reference, candidate = pairs("projected", head, attn)
    flat = flattened(electra_batch())
    assert flat["position_ids"].tolist() == [[0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 0, 1]]
    ref, ours = run(reference, flat, attn), run(candidate, flat, attn)
    if UPSTREAM_MASKS_PACKED_SEQUENCES:
        assert_all_equal(compare_outputs("", ref, ours))
    # either way FfnElectra keeps the sequences apart: its first sequence is the padded batch's first row
    padded = run(candidate, electra_batch(), attn).hidden_states[-1][0]
    assert_equal_but_row_count(ours.hidden_states[-1][0, :7], padded, "first sequence")


PER_ROW_LOGITS = ("AutoModelForSequenceClassification", "AutoModelForMultipleChoice")


@pytest.mark.parametrize("head", HEAD_CLASSES, ids=HEAD_IDS)
def test_unpadded_within_tolerance(pairs, head):
    """`unpad_tokens=True`: the real tokens run packed (the embeddings, then `embeddings_project` on the packed rows),
    every per-token output at real tokens and every per-row output within `UNPADDED_FP32_TOLERANCE` · max |upstream|;
    pads are zeros in the hidden states (the packed path ran)."""
    reference, candidate = pairs("projected", head, "sdpa")
    batch = inputs_for(head, electra_batch())
    real = batch["attention_mask"].reshape(-1, batch["attention_mask"].shape[-1]).bool()  # (rows, seq)
    candidate.config.unpad_tokens = True
    try:
        ref, ours = run(reference, batch), run(candidate, batch)
    finally:
        candidate.config.unpad_tokens = False
    assert not ours.hidden_states[-1][~real].any() and not ours.hidden_states[0][~real].any()
    for name in ref.keys():
        pairs_of = (
            zip(ref[name], ours[name], strict=True) if isinstance(ref[name], tuple) else [(ref[name], ours[name])]
        )
        for i, (want, got) in enumerate(pairs_of):
            if head.auto_class not in PER_ROW_LOGITS or name != "logits":
                want, got = want[real], got[real]
            bound = UNPADDED_FP32_TOLERANCE * want.abs().max().item()
            assert (got - want).abs().max().item() <= bound, f"{name}[{i}]"


# ---------------------------------------------------------------------------------------------------------------
# Variants run and differ; negative controls
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides, new_keys",
    [
        (
            {"ffn_type": "geglu"},
            {f"electra.encoder.layer.{i}.mlp.gate_proj.{p}" for i in (0, 1) for p in ("weight", "bias")},
        ),
        ({"layer_norm_position": "pre"}, {"electra.encoder.final_norm.weight", "electra.encoder.final_norm.bias"}),
        ({"hidden_act": "gelu_new"}, set()),
    ],
    ids=["geglu", "pre-ln", "gelu_new-for-gelu"],
)
def test_variants_run_and_differ(folders, overrides, new_keys):
    """An ELECTRA discriminator loaded as a variant: only the variant's own weights are new, the embeddings (and
    their projection) are upstream's, the discriminator's logits are not."""
    head = HEAD_CLASSES[1]
    folder = folders["projected"][head.auto_class]
    with quiet_transformers():
        reference = upstream_class(head).from_pretrained(folder).eval()
        candidate, info = FfnElectraForPreTraining.from_pretrained(
            folder, output_loading_info=True, warn_reused_weights=False, **overrides
        )
    assert set(info["missing_keys"]) == new_keys and not info["unexpected_keys"], info
    batch = electra_batch()
    ref, ours = run(reference, batch), run(candidate.eval(), batch)
    assert torch.equal(ref.hidden_states[0], ours.hidden_states[0])
    assert ours.logits.shape == ref.logits.shape and torch.isfinite(ours.logits).all()
    assert not torch.equal(ref.logits, ours.logits)


def test_a_fresh_swiglu_pre_ln_electra_builds_and_trains():
    torch.manual_seed(0)
    config = FfnElectraConfig(**SIZES["projected"], ffn_type="swiglu", layer_norm_position="pre", ffn_bias=False)
    model = FfnElectraForPreTraining(config)
    layer = model.electra.encoder.layer[1]
    assert type(layer.mlp).__name__ == "FfnBertGatedMLP" and layer.mlp.gate_proj.bias is None
    assert model.electra.encoder.final_norm is not None and model.electra.embeddings_project.in_features == 19
    batch = electra_batch()
    labels = torch.randint(0, 2, batch["input_ids"].shape)
    out = model(**batch, labels=labels)
    out.loss.backward()
    assert out.loss.item() > 0 and model.electra.embeddings_project.weight.grad.abs().sum() > 0


def test_sparse_prediction_is_refused_not_ignored():
    with pytest.raises(ValueError, match="sparse_prediction=True is supported by FfnBertForMaskedLM only"):
        FfnElectraForMaskedLM(FfnElectraConfig(**SIZES["projected"], sparse_prediction=True))


# ---------------------------------------------------------------------------------------------------------------
# Folders both ways
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("head", HEAD_CLASSES, ids=HEAD_IDS)
def test_default_ffn_electra_folder_loads_in_upstream_class(tmp_path, head):
    """A default-config FfnElectra folder: ELECTRA's names on disk, so upstream's class loads it with no missing or
    unexpected keys, to the same outputs; the Auto class gives FfnElectra back."""
    torch.manual_seed(7)
    model = head.ffn_bert(FfnElectraConfig(**SIZES["projected"])).eval()
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "ffn_electra" and config["auto_map"] == AUTO_MAP
    keys = {k.removeprefix("electra.") for k in load_file(tmp_path / "model.safetensors")}
    assert not any(".mlp" in k for k in keys)
    assert {
        "embeddings_project.weight",
        "encoder.layer.1.output.LayerNorm.bias",
        "encoder.layer.0.intermediate.dense.weight",
    } <= keys
    inputs = inputs_for(head, electra_batch())
    with quiet_transformers():
        expected = run(head.ffn_bert.from_pretrained(tmp_path).eval(), inputs)
        upstream, info = upstream_class(head).from_pretrained(tmp_path, output_loading_info=True)
        auto = getattr(transformers, head.auto_class).from_pretrained(tmp_path)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert_all_equal(compare_outputs(head.ffn_bert.__name__, expected, run(upstream.eval(), inputs)))
    assert type(auto) is head.ffn_bert


@pytest.mark.parametrize("size", SIZES)
def test_upstream_folder_to_ffn_electra_and_back(pairs, tmp_path, size):
    """Upstream folder → FfnElectra (no missing or unexpected keys: `pairs`) → saved → upstream again, equal."""
    head = HEAD_CLASSES[1]  # the discriminator
    reference, candidate = pairs(size, head, "sdpa")
    candidate.save_pretrained(tmp_path)
    keys = set(load_file(tmp_path / "model.safetensors"))
    assert ("electra.embeddings_project.weight" in keys) is (size == "projected")
    assert "discriminator_predictions.dense_prediction.weight" in keys
    with quiet_transformers():
        upstream, info = upstream_class(head).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    batch = electra_batch()
    assert torch.equal(run(upstream.eval(), batch).logits, run(reference, batch).logits)


ELECTRA_BASE_DISCRIMINATOR = {  # google/electra-base-discriminator's config.json
    "architectures": ["ElectraForPreTraining"],
    "attention_probs_dropout_prob": 0.1,
    "embedding_size": 768,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 768,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 512,
    "model_type": "electra",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "pad_token_id": 0,
    "type_vocab_size": 2,
    "vocab_size": 30522,
}


def test_an_electra_config_json_loads_into_ffn_electra_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(ELECTRA_BASE_DISCRIMINATOR))
    config = FfnElectraConfig.from_pretrained(tmp_path)
    upstream = ElectraConfig.from_pretrained(tmp_path)
    assert config.model_type == "ffn_electra" and config.is_default_bert
    for name in (
        *ELECTRA_BASE_DISCRIMINATOR.keys() - {"architectures", "model_type"},
        "summary_type",
        "summary_use_proj",
    ):
        assert getattr(config, name) == getattr(upstream, name), name
    assert (config.ffn_type, config.layer_norm_position) == ("gelu", "post")
    assert type(AutoConfig.from_pretrained(tmp_path)) is ElectraConfig  # upstream's registration untouched
    assert checkpoint_family(str(tmp_path)).upstream_class(HEAD_CLASSES[1]) is ElectraForPreTraining
    assert FfnElectraConfig().embedding_size == ElectraConfig().embedding_size == 128  # ELECTRA's defaults
    with pytest.raises(ValueError) as error:
        FfnBertConfig.from_pretrained(tmp_path)
    message = str(error.value)
    assert "model_type='electra'; FfnBert loads BERT-shaped checkpoints only" in message and "\n" not in message
    assert "an ELECTRA checkpoint loads into FfnElectraConfig / FfnElectra*" in message


@pytest.mark.parametrize(
    "field, value, allowed",
    [
        ("embedding_size", 0, "must be a positive integer, got 0"),
        ("summary_type", "attn", "summary_type has unknown value 'attn'; allowed: first, last, mean, cls_index"),
        ("summary_activation", "nope", "summary_activation has unknown value 'nope'; allowed: None or one of"),
        ("summary_last_dropout", 1.5, "summary_last_dropout must be a probability in [0, 1], got 1.5"),
    ],
)
def test_a_bad_electra_field_is_a_one_line_error_at_build(field, value, allowed):
    config = FfnElectraConfig(**SIZES["projected"])
    setattr(config, field, value)
    with pytest.raises(ValueError) as error:
        FfnElectraModel(config)
    assert field in str(error.value) and allowed in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("config", [GPT2Config(n_layer=1), RobertaConfig()], ids=lambda c: c.model_type)
def test_another_family_is_a_value_error_naming_it(tmp_path, config):
    config.save_pretrained(tmp_path)
    for load in (FfnElectraConfig.from_pretrained, FfnElectraModel.from_pretrained):
        with pytest.raises(ValueError) as error:
            load(tmp_path)
        message = str(error.value)
        assert f"model_type={config.model_type!r}" in message and "\n" not in message
        assert "FfnElectraConfig loads only checkpoints of model_type electra, ffn_electra" in message


# ---------------------------------------------------------------------------------------------------------------
# The parity job and conversion on an ELECTRA folder
# ---------------------------------------------------------------------------------------------------------------
def test_parity_job_holds_on_an_electra_folder_and_a_wrong_eps_breaks_it(folders, capsys):
    folder = folders["projected"]["AutoModelForPreTraining"]  # the job seeds the heads the checkpoint lacks
    assert checkpoint_family(folder).upstream_type == "electra"
    rows = run_parity(folder, attn_implementation="sdpa")
    assert {row.head for row in rows} == {*HEAD_IDS, "FFN", "FfnElectraModel (unpad_tokens)"}
    assert all(row.holds for row in rows), [row for row in rows if not row.holds]
    bitwise = [row for row in rows if row.tolerance is None]
    assert bitwise and all(row.equal for row in bitwise)
    assert bool([row for row in rows if row.output.endswith(FLATTENED)]) == UPSTREAM_MASKS_PACKED_SEQUENCES
    assert not any(row.output == "pooler_output" for row in rows)  # ELECTRA has no pooler
    broken = run_parity(folder, attn_implementation="sdpa", layer_norm_eps=1e-7)  # the negative control
    assert not all(row.equal for row in broken if row.tolerance is None)
    assert main(["parity", "--model_name_or_path", folder, "--attn", "sdpa"]) == 0
    out = capsys.readouterr().out
    assert "EXACT: every output equals upstream ElectraModel bit for bit" in out
    assert "FfnElectraForMultipleChoice" in out and "OK" in out.splitlines()[-1]


def test_the_unsupported_model_type_error_lists_electra(tmp_path):
    GPT2Config(n_layer=1, n_embd=32, n_head=2).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"model_type='gpt2'; hf_ffn loads checkpoints of the families .*, electra, "):
        run_parity(str(tmp_path))


def test_convert_an_electra_checkpoint(folders, tmp_path, capsys):
    """`hf-ffn convert` on an ELECTRA discriminator: GeGLU exact (the converted discriminator's logits `torch.equal`
    to upstream's on the source), Pre-LN not function-preserving (reported as such); the converted folder is a
    variant, which `hf-ffn parity` refuses (exit 3) naming ElectraModel."""
    source = folders["projected"]["AutoModelForPreTraining"]
    assert main(["convert", source, str(tmp_path / "geglu"), "--ffn_type", "geglu"]) == 0
    report = json.loads((tmp_path / "geglu" / "conversion_report.json").read_text())
    assert report["exact"] is True and report["model_class"] == "FfnElectraForPreTraining"
    assert report["difference"]["reference"] == "transformers.ElectraForPreTraining"
    assert report["difference"]["logits"]["equal"] is True
    batch = electra_batch()
    with quiet_transformers():
        converted = transformers.AutoModelForPreTraining.from_pretrained(tmp_path / "geglu").eval()
        reference = ElectraForPreTraining.from_pretrained(source).eval()
    assert type(converted) is FfnElectraForPreTraining and converted.config.ffn_type == "geglu"
    assert converted.electra.encoder.layer[0].mlp.gate_proj.weight.shape == (37, 32)
    assert torch.equal(run(converted, batch).logits, run(reference, batch).logits)
    assert main(["convert", source, str(tmp_path / "pre"), "--layer_norm_position", "pre"]) == 0
    report = json.loads((tmp_path / "pre" / "conversion_report.json").read_text())
    assert report["exact"] is False and report["difference"]["logits"]["equal"] is False
    assert "not function-preserving" in capsys.readouterr().out
    assert main(["parity", "--model_name_or_path", str(tmp_path / "geglu")]) == 3
    error = capsys.readouterr().err
    assert "is not a plain-Electra checkpoint: ffn_type" in error and "Upstream ElectraModel cannot" in error


def test_load_converted_picks_the_electra_head_of_a_bert_class(folders):
    """The conversion API takes any family's class and loads the ELECTRA head with its Auto class; BERT's
    next-sentence head, which ELECTRA lacks, is a one-line error."""
    source = folders["equal"]["AutoModelForSequenceClassification"]
    model, report = load_converted(source, FfnBertForSequenceClassification, ffn_type="geglu")
    assert type(model).__name__ == "FfnElectraForSequenceClassification" and report.exact
    with quiet_transformers():
        reference = upstream_class(HEAD_CLASSES[3]).from_pretrained(source).eval()
    batch = electra_batch()
    assert torch.equal(run(model, batch).logits, run(reference, batch).logits)
    with pytest.raises(ValueError, match="the electra family has no AutoModelForNextSentencePrediction head"):
        load_converted(source, FfnBertForNextSentencePrediction, ffn_type="geglu")


# ---------------------------------------------------------------------------------------------------------------
# Real shapes (seeded random weights) and the real checkpoint
# ---------------------------------------------------------------------------------------------------------------
def seeded_weights(model: torch.nn.Module, seed: int = 0) -> dict[str, torch.Tensor]:
    """Seeded weights for every parameter of `model` (on the meta device): N(0, 0.02), LayerNorm weights
    1 + N(0, 0.02)."""
    generator = torch.Generator().manual_seed(seed)
    return {
        name: torch.randn(*p.shape, generator=generator) * 0.02 + ("LayerNorm.weight" in name)
        for name, p in model.named_parameters()
    }


@pytest.mark.parametrize(
    "name, sizes",
    [
        ("electra-small-discriminator", {}),  # ElectraConfig's defaults: embedding 128 → hidden 256, 4 heads
        (
            "electra-base-discriminator",
            dict(embedding_size=768, hidden_size=768, num_attention_heads=12, intermediate_size=3072),
        ),
    ],
)
def test_real_shapes_bit_exact(name, sizes):
    """electra-small's and electra-base's discriminators (12 layers, vocabulary 30,522, 512 positions) with seeded
    weights: upstream's state dict loads into FfnElectra with every key matched (`load_state_dict(strict=True)`
    through FfnElectra's pre-hook: the names on disk) and the logits and every hidden state are equal (sdpa). Both
    models are built on the meta device and given the same tensors: no initialisation, no disk."""
    config = ElectraConfig(**sizes)
    with torch.device("meta"):
        reference = ElectraForPreTraining(config)
        candidate = FfnElectraForPreTraining(FfnElectraConfig.from_dict(config.to_dict()))
    weights = seeded_weights(reference)
    reference.load_state_dict(weights, strict=True, assign=True)
    candidate.load_state_dict(dict(weights), strict=True, assign=True)  # renamed by the pre-hook
    for model in (reference, candidate):  # the non-persistent buffers, as ElectraEmbeddings builds them
        model.electra.embeddings.position_ids = torch.arange(config.max_position_embeddings)[None]
        model.electra.embeddings.token_type_ids = torch.zeros(1, config.max_position_embeddings, dtype=torch.long)
    up_proj = candidate.electra.encoder.layer[11].mlp.up_proj.weight  # BERT's name on disk, the role name in memory
    assert up_proj.data_ptr() == weights["electra.encoder.layer.11.intermediate.dense.weight"].data_ptr()
    assert hasattr(candidate.electra, "embeddings_project") is (config.embedding_size != config.hidden_size)
    batch = electra_batch(config.vocab_size, lengths=(9, 5))
    rows = compare_outputs(name, run(reference.eval(), batch), run(candidate.eval(), batch))
    assert len(rows) == 1 + 13
    assert_all_equal(rows)


def cached_electra_small() -> str | None:
    repo = "google/electra-small-discriminator"
    config = try_to_load_from_cache(repo, "config.json")
    weights = [try_to_load_from_cache(repo, f) for f in ("model.safetensors", "pytorch_model.bin")]
    found = isinstance(config, str) and any(isinstance(w, str) for w in weights)
    return os.path.dirname(config) if found else None


def test_real_electra_small_discriminator_bit_exact():
    folder = cached_electra_small()
    if folder is None:
        pytest.skip(NOT_CACHED)
    with quiet_transformers():
        reference = ElectraForPreTraining.from_pretrained(folder).eval()
        candidate, info = FfnElectraForPreTraining.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(
        ["the quick brown fox jumps", "the quick brown fox fake over the lazy dog"], padding=True, return_tensors="pt"
    )
    assert_all_equal(compare_outputs("electra-small", run(reference, dict(batch)), run(candidate.eval(), dict(batch))))


# ---------------------------------------------------------------------------------------------------------------
# Remote code without hf_ffn
# ---------------------------------------------------------------------------------------------------------------
REMOTE_SCRIPT = textwrap.dedent(
    """
    import importlib.util, os, sys
    sys.path = [p for p in sys.path if not os.path.isdir(os.path.join(p or os.getcwd(), "hf_ffn"))]
    sys.meta_path = [f for f in sys.meta_path if "editable" not in getattr(f, "__name__", type(f).__name__).lower()]
    assert importlib.util.find_spec("hf_ffn") is None
    import torch
    from transformers import AutoModel, AutoModelForPreTraining
    folder, expected = sys.argv[1], torch.load(sys.argv[2])
    torch.set_num_threads(int(sys.argv[3]))  # the parent's: BLAS may sum in another order on another thread count
    model = AutoModelForPreTraining.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(model).__name__ == "FfnElectraForPreTraining" and not type(model).__module__.startswith("hf_ffn")
    assert model.config.ffn_type == "swiglu" and model.config.layer_norm_position == "pre"
    with torch.no_grad():
        out = model(**expected["inputs"]).logits
    assert torch.equal(out, expected["logits"]), (out - expected["logits"]).abs().max()
    base = AutoModel.from_pretrained(folder, trust_remote_code=True)
    assert type(base).__name__ == "FfnElectraModel", type(base)
    print("REMOTE_OK", type(model).__module__)
    """
)


@pytest.mark.slow
def test_trust_remote_code_without_hf_ffn(tmp_path):
    torch.manual_seed(0)
    config = FfnElectraConfig(**SIZES["projected"], ffn_type="swiglu", layer_norm_position="pre")
    model = FfnElectraForPreTraining(config).eval()
    folder = tmp_path / "swiglu_pre"
    model.save_pretrained(folder)
    assert {"configuration_ffn_electra.py", "modeling_ffn_electra.py", "modeling_ffn_bert.py"} <= set(
        os.listdir(folder)
    )
    batch = electra_batch()
    # hf_ffn's outputs as loaded from the folder, as the remote code loads it (a fresh model's tensors lie elsewhere in
    # memory, aligned otherwise: BLAS then picks another kernel for the 1-column `dense_prediction`, 1 ulp apart)
    with quiet_transformers(), torch.no_grad():
        loaded = FfnElectraForPreTraining.from_pretrained(folder).eval()
        torch.save({"inputs": batch, "logits": loaded(**batch).logits}, tmp_path / "expected.pt")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {"PATH": os.environ.get("PATH", ""), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home")}
    result = subprocess.run(
        [sys.executable, "-c", REMOTE_SCRIPT, str(folder), str(tmp_path / "expected.pt"), str(torch.get_num_threads())],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "REMOTE_OK transformers_modules" in result.stdout


# ---------------------------------------------------------------------------------------------------------------
# hf-ffn finetune on an ELECTRA discriminator (its WordPiece tokenizer, ElectraClassificationHead on [CLS])
# ---------------------------------------------------------------------------------------------------------------
SENTENCES = [
    ("a fine warm funny film", "pos"),
    ("dull and far too long", "neg"),
    ("warm funny and kind", "pos"),
    ("a long dull mess", "neg"),
    ("kind and fine", "pos"),
    ("too dull", "neg"),
]


@pytest.fixture(scope="module")
def electra_checkpoint(tmp_path_factory) -> str:
    """A tiny ELECTRA discriminator folder (embedding 19 → hidden 32) with a WordPiece vocabulary of `SENTENCES`."""
    folder = tmp_path_factory.mktemp("electra_checkpoint")
    words = sorted({word for text, _ in SENTENCES for word in text.split()})
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tokenizer = transformers.BertTokenizer(vocab=str(folder / "vocab.txt"))
    torch.manual_seed(0)
    config = ElectraConfig(**{**SIZES["projected"], "vocab_size": len(tokenizer)})
    perturb_constants(ElectraForPreTraining(config)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_finetune_an_electra_checkpoint(electra_checkpoint, tmp_path):
    """`finetune` on an ELECTRA discriminator trains FfnElectraForSequenceClassification; upstream's
    ElectraForSequenceClassification reads the saved folder (no weight missing) to the same logits; the padding-free
    option is refused (the classification head reads each row's first token)."""
    from hf_ffn.finetune import finetune

    files = {}
    for split in ("train", "validation"):
        files[f"{split}_file"] = str(tmp_path / f"{split}.csv")
        lines = ["sentence,label", *(f"{text},{label}" for text, label in SENTENCES)]
        (tmp_path / f"{split}.csv").write_text("\n".join(lines) + "\n")
    options = dict(max_steps=3, logging_steps=1, optim="sgd", learning_rate=0.5, per_device_train_batch_size=3)
    options |= dict(report_to="none", use_cpu=True, save_strategy="no", quiet=True, **files)
    outcome = finetune(electra_checkpoint, str(tmp_path / "out"), **options)
    losses = [e["loss"] for e in outcome["log_history"] if "loss" in e]
    assert len(losses) == 3 and losses[-1] != losses[0]
    with pytest.raises(ValueError, match=r"--padding_free: .* is a electra checkpoint, whose classification head"):
        finetune(electra_checkpoint, str(tmp_path / "flat"), padding_free=True, **options)
    with quiet_transformers():
        ours = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "out").eval()
        theirs, info = transformers.ElectraForSequenceClassification.from_pretrained(
            tmp_path / "out", output_loading_info=True
        )
    assert type(ours).__name__ == "FfnElectraForSequenceClassification"
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    batch = tokenizer([text for text, _ in SENTENCES], padding=True, return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(ours(**batch).logits, theirs.eval()(**batch).logits)


def test_finetune_converts_an_electra_checkpoint_to_geglu_exactly(electra_checkpoint, tmp_path):
    from hf_ffn.finetune import finetune

    (tmp_path / "train.csv").write_text("sentence,label\n" + "\n".join(f"{t},{lab}" for t, lab in SENTENCES) + "\n")
    files = dict(train_file=str(tmp_path / "train.csv"), validation_file=str(tmp_path / "train.csv"))
    options = dict(max_steps=1, report_to="none", use_cpu=True, save_strategy="no", quiet=True, **files)
    outcome = finetune(electra_checkpoint, str(tmp_path / "out"), ffn_type="geglu", **options)
    assert outcome["conversion"]["exact"] is True
    assert outcome["conversion"]["model_class"] == "FfnElectraForSequenceClassification"
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (saved["model_type"], saved["ffn_type"], saved["embedding_size"]) == ("ffn_electra", "geglu", 19)
