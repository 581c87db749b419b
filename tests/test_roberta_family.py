"""The RoBERTa family through FfnRoberta: bit-exact parity with upstream, every head, four families.

Families: RoBERTa, XLM-RoBERTa, CamemBERT (upstream's `XLMRoberta*` and `Camembert*` are `Roberta*` under other
names) and RoBERTa-PreLayerNorm (Pre-LN; loaded with `layer_norm_position="pre"`). Each is a tiny seeded random
model at odd sizes (head size 16, FFN width 37, padding_idx 1 so positions count from 2) saved by upstream's class
per head; each cell loads upstream and FfnRoberta from the same folder and asserts `torch.equal` on every output
(each hidden state, each attention map, each logit), eager and sdpa. Then: folders both ways, negative controls,
padding-free batches (`DataCollatorWithFlattening(position_ids_start=2)`), `unpad_tokens=True` within
`UNPADDED_FP32_TOLERANCE`, roberta-base's and xlm-roberta-base's real shapes, the real roberta-base when cached,
remote code without hf_ffn, and the one-line error for another family.
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
    AutoModelForMaskedLM,
    CamembertConfig,
    DataCollatorWithFlattening,
    DebertaConfig,
    DistilBertConfig,
    GPT2Config,
    ModernBertConfig,
    RobertaConfig,
    RobertaForMaskedLM,
    RobertaModel,
    RobertaPreLayerNormConfig,
    RobertaTokenizer,
    T5Config,
    XLMRobertaConfig,
    XLMRobertaModel,
)
from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING

import hf_ffn
from hf_ffn import FfnRobertaConfig, FfnRobertaForMaskedLM, FfnRobertaModel
from hf_ffn.checkpoint_names import PRELAYERNORM_KEY_MAPPING
from hf_ffn.cli import main
from hf_ffn.configuration_ffn_roberta import ROBERTA_MODEL_TYPES
from hf_ffn.families import checkpoint_family
from hf_ffn.modeling_ffn_roberta import AUTO_MAP, HEAD_CLASSES
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
FAMILIES = {
    "roberta": RobertaConfig,
    "xlm-roberta": XLMRobertaConfig,
    "camembert": CamembertConfig,
    "roberta-prelayernorm": RobertaPreLayerNormConfig,
}
HEAD_IDS = [head.ffn_bert.__name__ for head in HEAD_CLASSES]
# Odd sizes; type_vocab_size 1 and layer_norm_eps 1e-5 as roberta-base's config.
TINY_ROBERTA = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=37,
    max_position_embeddings=64,
    type_vocab_size=1,
    layer_norm_eps=1e-5,
    pad_token_id=1,
)
LENGTHS = (7, 4, 2)
# The outputs that name each head's task, besides the hidden states and attention maps every head returns.
HEAD_OUTPUTS = {
    "FfnRobertaModel": {"last_hidden_state", "pooler_output"},
    "FfnRobertaForMaskedLM": {"logits"},
    "FfnRobertaForSequenceClassification": {"logits"},
    "FfnRobertaForTokenClassification": {"logits"},
    "FfnRobertaForQuestionAnswering": {"start_logits", "end_logits"},
    "FfnRobertaForMultipleChoice": {"logits"},
}
NOT_CACHED = (
    "roberta-base is not in the local HF cache. To run this test, on a machine with network run "
    "`hf download FacebookAI/roberta-base config.json model.safetensors vocab.json merges.txt tokenizer.json` once, "
    "then rerun pytest (the suite itself stays offline)."
)


def upstream_class(family: str, head) -> type:
    """Upstream's class of `family` for `head`: its Auto class's entry for the family's config class."""
    return getattr(transformers, head.auto_class)._model_mapping[FAMILIES[family]]


def roberta_batch(vocab_size: int = TINY_ROBERTA["vocab_size"], lengths=LENGTHS, seed: int = 0) -> dict:
    """A RoBERTa-tokenizer-shaped padded batch: `<s>` (0), seeded ids in 3 .. vocab_size − 1, `</s>` (2), pads (1)
    after; `input_ids`, `attention_mask` (len(lengths), max(lengths)), no token types (RoBERTa's tokenizer gives
    none)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.ones(len(lengths), max(lengths), dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, n in enumerate(lengths):
        input_ids[row, :n] = torch.randint(3, vocab_size, (n,), generator=generator)
        input_ids[row, 0], input_ids[row, n - 1] = 0, 2
        attention_mask[row, :n] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def inputs_for(head, batch: dict) -> dict:
    """`batch` as `head` takes it: for multiple choice (batch, 2, seq), the batch and its rows reversed."""
    if head.auto_class == "AutoModelForMultipleChoice":
        return {k: torch.stack([v, v.flip(0)], dim=1) for k, v in batch.items()}
    return batch


def flattened(batch: dict, position_ids_start: int) -> dict:
    """The real tokens of `batch` as one padding-free row, by transformers' own `DataCollatorWithFlattening`."""
    features = [
        {"input_ids": row[m.bool()].tolist()}
        for row, m in zip(batch["input_ids"], batch["attention_mask"], strict=True)
    ]
    flat = DataCollatorWithFlattening(return_tensors="pt", position_ids_start=position_ids_start)(features)
    return {"input_ids": flat["input_ids"], "position_ids": flat["position_ids"]}


def load_pair(family_folders, family, head, attn="eager", **overrides):
    """(upstream, FfnRoberta) for `head` from the family's folder, in eval mode; FfnRoberta's loading info checked."""
    folder = family_folders[family][head.auto_class]
    with quiet_transformers():
        reference = upstream_class(family, head).from_pretrained(folder, attn_implementation=attn).eval()
        candidate, info = head.ffn_bert.from_pretrained(
            folder, attn_implementation=attn, output_loading_info=True, **overrides
        )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    return reference, candidate.eval()


@pytest.fixture(scope="module")
def pairs(family_folders):
    """`load_pair`, each (family, head) loaded once for the module, set to the attention asked for
    (`set_attn_implementation`: both models read it from their config at each forward)."""
    loaded = {}

    def pair(family, head, attn="eager"):
        if (family, head.auto_class) not in loaded:
            loaded[family, head.auto_class] = load_pair(family_folders, family, head)
        models = loaded[family, head.auto_class]
        for model in models:
            model.set_attn_implementation(attn)
            assert model.config._attn_implementation == attn
        return models

    return pair


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


@pytest.fixture(scope="module")
def family_folders(tmp_path_factory) -> dict[str, dict[str, str]]:
    """family → Auto class name → a folder saved by upstream's class of that family and head (seeded)."""
    root = tmp_path_factory.mktemp("roberta_family")
    folders = {}
    for f, family in enumerate(FAMILIES):
        folders[family] = {}
        for h, head in enumerate(HEAD_CLASSES):
            torch.manual_seed(100 * f + h)
            model = perturb_constants(upstream_class(family, head)(FAMILIES[family](**TINY_ROBERTA)))
            folder = root / family / head.auto_class
            model.save_pretrained(folder)
            folders[family][head.auto_class] = str(folder)
    return folders


def test_head_table_is_every_exported_roberta_head():
    exported = {name for name in hf_ffn.__all__ if name.startswith("FfnRobertaFor")} | {"FfnRobertaModel"}
    assert set(HEAD_IDS) == exported == set(HEAD_OUTPUTS)
    assert AUTO_MAP["AutoModelForMaskedLM"] == "modeling_ffn_roberta.FfnRobertaForMaskedLM"
    assert TOKENIZER_MAPPING[FfnRobertaConfig] is RobertaTokenizer is TOKENIZER_MAPPING[RobertaConfig]  # as upstream


# ---------------------------------------------------------------------------------------------------------------
# The matrix: family × attention × head, every output torch.equal
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("head", HEAD_CLASSES, ids=HEAD_IDS)
@pytest.mark.parametrize("attn", ATTENTIONS)
@pytest.mark.parametrize("family", FAMILIES)
def test_every_output_bit_exact(pairs, family, attn, head):
    reference, candidate = pairs(family, head, attn)
    assert candidate.config.layer_norm_position == ("pre" if family == "roberta-prelayernorm" else "post")
    inputs = inputs_for(head, roberta_batch())
    rows = compare_outputs(head.ffn_bert.__name__, run(reference, inputs, attn), run(candidate, inputs, attn))
    assert all(r.equal for r in rows), [(r.output, r.max_abs_diff) for r in rows if not r.equal]
    outputs = {r.output for r in rows}
    layers = TINY_ROBERTA["num_hidden_layers"]
    assert HEAD_OUTPUTS[head.ffn_bert.__name__] <= outputs
    assert {f"hidden_states[{i}]" for i in range(layers + 1)} <= outputs
    assert {o for o in outputs if o.startswith("attentions")} == (
        {f"attentions[{i}]" for i in range(layers)} if attn == "eager" else set()
    )


def test_positions_count_from_padding_idx_and_pads_stay_there(pairs):
    """What the matrix rests on: upstream's positions (2, 3, ... after `padding_idx` 1; pads at 1), here by the
    embeddings FfnRoberta reuses; an explicit `position_ids` with a padding mask is read as positions only."""
    reference, candidate = pairs("roberta", HEAD_CLASSES[0], "sdpa")
    batch = roberta_batch()
    positions = candidate.embeddings.create_position_ids_from_input_ids(batch["input_ids"], 1)
    assert positions[2].tolist() == [2, 3, 1, 1, 1, 1, 1]
    assert torch.equal(run(reference, batch).last_hidden_state, run(candidate, batch).last_hidden_state)
    explicit = run(candidate, {**batch, "position_ids": positions}).last_hidden_state
    assert torch.equal(explicit, run(reference, {**batch, "position_ids": positions}).last_hidden_state)


# ---------------------------------------------------------------------------------------------------------------
# Folders both ways
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("head", HEAD_CLASSES, ids=HEAD_IDS)
def test_default_ffn_roberta_folder_loads_in_upstream_classes(tmp_path, head):
    """A default-config FfnRoberta folder: RoBERTa's names on disk, so upstream's RoBERTa, XLM-RoBERTa and CamemBERT
    classes load it with no missing or unexpected keys, to the same outputs; AutoModel gives FfnRoberta back."""
    torch.manual_seed(7)
    model = head.ffn_bert(FfnRobertaConfig(**TINY_ROBERTA)).eval()
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "ffn_roberta" and config["auto_map"] == AUTO_MAP
    keys = set(load_file(tmp_path / "model.safetensors"))
    assert not any(".mlp" in k for k in keys) and "encoder.layer.1.output.LayerNorm.bias" in {
        k.removeprefix("roberta.") for k in keys
    }
    inputs = inputs_for(head, roberta_batch())
    with quiet_transformers():  # as upstream loads it (a fresh model's tied decoder may round 1 ulp otherwise: BLAS)
        expected = run(head.ffn_bert.from_pretrained(tmp_path, attn_implementation="sdpa").eval(), inputs)
    for family in ("roberta", "xlm-roberta", "camembert"):
        with quiet_transformers():
            upstream, info = upstream_class(family, head).from_pretrained(
                tmp_path, attn_implementation="sdpa", output_loading_info=True
            )
        assert not info["missing_keys"] and not info["unexpected_keys"], (family, info)
        rows = compare_outputs(family, expected, run(upstream.eval(), inputs))
        assert all(r.equal for r in rows), [(r.head, r.output, r.max_abs_diff) for r in rows if not r.equal]
    with quiet_transformers():
        auto = getattr(transformers, head.auto_class).from_pretrained(tmp_path)
    assert type(auto) is head.ffn_bert


@pytest.mark.parametrize("family", FAMILIES)
def test_upstream_folder_to_ffn_roberta_and_back(family_folders, tmp_path, family):
    """Upstream folder → FfnRoberta (no missing or unexpected keys: the matrix) → saved → reloaded, equal to
    upstream. RoBERTa, XLM-RoBERTa, CamemBERT: the saved folder loads in upstream's class again. RoBERTa-PreLayerNorm:
    FfnRoberta's own Pre-LN layout (final norm `encoder.final_norm`), reloaded without a key mapping."""
    head = HEAD_CLASSES[1]  # masked LM: the encoder and RoBERTa's LM head
    reference, candidate = load_pair(family_folders, family, head)
    candidate.save_pretrained(tmp_path)
    keys = set(load_file(tmp_path / "model.safetensors"))
    batch = roberta_batch()
    expected = run(reference, batch).logits
    with quiet_transformers():
        again, info = FfnRobertaForMaskedLM.from_pretrained(
            tmp_path, attn_implementation="eager", output_loading_info=True
        )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert torch.equal(run(again.eval(), batch).logits, expected)
    if family == "roberta-prelayernorm":
        assert again.config.layer_norm_position == "pre" and "roberta.encoder.final_norm.weight" in keys
        assert not any("prelayernorm" in k for k in keys)
        return
    assert "roberta.encoder.layer.0.output.LayerNorm.weight" in keys
    with quiet_transformers():
        upstream, info = upstream_class(family, head).from_pretrained(
            tmp_path, attn_implementation="eager", output_loading_info=True
        )
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert torch.equal(run(upstream.eval(), batch).logits, expected)


def test_prelayernorm_base_checkpoint_into_a_head(family_folders):
    """A RoBERTa-PreLayerNorm base-model folder (no `roberta_prelayernorm.` prefix; the final norm `LayerNorm`)
    into FfnRoberta's masked LM: every encoder weight found (only the LM head is new, the pooler unused)."""
    folder = family_folders["roberta-prelayernorm"]["AutoModel"]
    with quiet_transformers():
        model, info = FfnRobertaForMaskedLM.from_pretrained(folder, output_loading_info=True)
    assert all(k.startswith("lm_head.") for k in info["missing_keys"]), info
    assert all(k.startswith("pooler.") for k in info["unexpected_keys"]), info
    upstream = upstream_class("roberta-prelayernorm", HEAD_CLASSES[0]).from_pretrained(folder).eval()
    batch = roberta_batch()
    assert torch.equal(run(model.roberta.eval(), batch).last_hidden_state, run(upstream, batch).last_hidden_state)


# ---------------------------------------------------------------------------------------------------------------
# Negative controls: the comparison can fail
# ---------------------------------------------------------------------------------------------------------------
SWAPPED_NORMS = {  # RoBERTa-PreLayerNorm's two layer norms exchanged: every name found, the wrong weights
    **{k: v for k, v in PRELAYERNORM_KEY_MAPPING.items() if "LayerNorm" not in k or k.startswith("^")},
    r"(?<![^.])attention\.LayerNorm\.": "mlp_norm.",
    r"(?<![^.])intermediate\.LayerNorm\.": "attention.output.LayerNorm.",
}


@pytest.mark.parametrize(
    "family, overrides",
    [
        ("roberta", {"layer_norm_position": "pre"}),
        ("roberta-prelayernorm", {"layer_norm_position": "post"}),
        ("roberta-prelayernorm", {"key_mapping": SWAPPED_NORMS}),
        ("roberta", {"hidden_act": "gelu_new"}),
    ],
    ids=["pre-ln-for-post-ln", "post-ln-for-pre-ln", "swapped-layer-norms", "gelu_new-for-gelu"],
)
def test_negative_controls_break_equality(family_folders, family, overrides):
    head = HEAD_CLASSES[0]
    folder = family_folders[family][head.auto_class]
    with quiet_transformers():
        reference = upstream_class(family, head).from_pretrained(folder).eval()
        candidate, info = FfnRobertaModel.from_pretrained(folder, output_loading_info=True, **overrides)
    final_norm = {"encoder.final_norm.weight", "encoder.final_norm.bias"}  # Pre-LN's only weights
    placement = overrides.get("layer_norm_position")
    assert set(info["missing_keys"]) == (final_norm if placement == "pre" else set()), info
    assert set(info["unexpected_keys"]) == (final_norm if placement == "post" else set()), info
    batch = roberta_batch()
    ref, cand = run(reference, batch), run(candidate.eval(), batch)
    assert torch.equal(ref.hidden_states[0], cand.hidden_states[0])  # the embeddings are the same
    assert not torch.equal(ref.last_hidden_state, cand.last_hidden_state)


def test_positions_counted_from_zero_change_the_outputs(pairs):
    """BERT's positions (0, 1, ...) on a RoBERTa model: not upstream's outputs (the trap of transformers #47496)."""
    reference, candidate = pairs("roberta", HEAD_CLASSES[0], "sdpa")
    batch = roberta_batch()
    zero_based = torch.arange(batch["input_ids"].shape[1])[None].expand_as(batch["input_ids"])
    ours = run(candidate, {**batch, "position_ids": zero_based}).last_hidden_state
    assert not torch.equal(ours, run(reference, batch).last_hidden_state)


# ---------------------------------------------------------------------------------------------------------------
# Padding-free batches
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("head", HEAD_CLASSES[:5], ids=HEAD_IDS[:5])  # multiple choice takes padded choices
@pytest.mark.parametrize("attn", ATTENTIONS)
@pytest.mark.parametrize("family", ["roberta", "roberta-prelayernorm"])
def test_flattened_batch_bit_exact(pairs, family, attn, head):
    """`DataCollatorWithFlattening(position_ids_start=2)`'s batch (RoBERTa counts from `padding_idx + 1`): upstream
    builds the block-diagonal mask from `position_ids` (transformers ≥ 5.25), FfnRoberta the same; every per-token
    output `torch.equal`. The pooler: one per sequence in FfnRoberta (upstream: the row's first), equal to upstream's
    for the first. Sequence classification reads the row's `<s>` in both (upstream's head, unchanged)."""
    reference, candidate = pairs(family, head, attn)
    flat = flattened(roberta_batch(), position_ids_start=2)
    assert flat["position_ids"].tolist() == [[2, 3, 4, 5, 6, 7, 8, 2, 3, 4, 5, 2, 3]]
    ref, ours = run(reference, flat, attn), run(candidate, flat, attn)
    rows = [r for r in compare_outputs("", ref, ours) if r.output != "pooler_output"]
    assert rows and all(r.equal for r in rows), [(r.output, r.max_abs_diff) for r in rows if not r.equal]
    if "pooler_output" in ref:
        assert ours.pooler_output.shape[0] == len(LENGTHS)
        assert_equal_but_row_count(ours.pooler_output[:1], ref.pooler_output, "pooler_output")


def test_flattened_batch_is_the_padded_batch_only_from_padding_idx(pairs):
    """Upstream on the flattened batch from 2 gives its padded batch's real tokens (within fp32 rounding: other row
    counts); from 0 (the collator's default) it does not (positions shifted), and FfnRoberta refuses that batch,
    naming the collator option."""
    reference, candidate = pairs("roberta", HEAD_CLASSES[0], "sdpa")
    batch = roberta_batch()
    padded = run(reference, batch).last_hidden_state[batch["attention_mask"].bool()]
    from_two = run(reference, flattened(batch, 2)).last_hidden_state[0]
    from_zero = run(reference, flattened(batch, 0)).last_hidden_state[0]
    bound = 16 * torch.finfo(torch.float32).eps * padded.abs().max().item()
    assert (from_two - padded).abs().max().item() <= bound
    assert (from_zero - padded).abs().max().item() > 1e-2
    with pytest.raises(ValueError, match=r"start at 2.*position_ids_start=2"):
        candidate(**flattened(batch, 0))


# ---------------------------------------------------------------------------------------------------------------
# unpad_tokens=True: within UNPADDED_FP32_TOLERANCE of upstream at real tokens (tests/test_unpadded.py says why)
# ---------------------------------------------------------------------------------------------------------------
PER_ROW_LOGITS = ("AutoModelForSequenceClassification", "AutoModelForMultipleChoice")


def assert_within_unpadded_tolerance(expected: torch.Tensor, actual: torch.Tensor, name: str) -> None:
    bound = UNPADDED_FP32_TOLERANCE * expected.abs().max().item()
    assert actual.shape == expected.shape, name
    assert (actual - expected).abs().max().item() <= bound, (
        f"{name}: {(actual - expected).abs().max().item()} > {bound}"
    )


@pytest.mark.parametrize("head", HEAD_CLASSES, ids=HEAD_IDS)
@pytest.mark.parametrize("family", ["roberta", "roberta-prelayernorm"])
def test_unpadded_within_tolerance(pairs, family, head):
    """Packed real tokens at upstream's positions (computed from the padded `input_ids`): every per-token output at
    real tokens, every per-row output whole, within `UNPADDED_FP32_TOLERANCE` · max |upstream|; pads are zeros in
    the hidden states (the packed path ran). Also the padding-free batch with the switch on. (The switch is an
    execution switch: set on the loaded model's config for this test.)"""
    reference, candidate = pairs(family, head, "sdpa")
    candidate.config.unpad_tokens = True
    try:
        check_unpadded(reference, candidate, head)
    finally:
        candidate.config.unpad_tokens = False


def check_unpadded(reference, candidate, head) -> None:
    batch = roberta_batch()
    inputs = inputs_for(head, batch)
    real = inputs["attention_mask"].reshape(-1, inputs["attention_mask"].shape[-1]).bool()  # (rows, seq)
    ref, ours = run(reference, inputs), run(candidate, inputs)
    per_row = {"pooler_output"} | ({"logits"} if head.auto_class in PER_ROW_LOGITS else set())
    for name in ref.keys():
        tensors = zip(ref[name], ours[name], strict=True) if isinstance(ref[name], tuple) else [(ref[name], ours[name])]
        for i, (want, got) in enumerate(tensors):
            if name not in per_row:  # (rows, seq, ...): real tokens only
                if name in ("hidden_states", "last_hidden_state"):
                    assert not got[~real].any(), f"{name}[{i}] at pads"
                want, got = want[real], got[real]
            assert_within_unpadded_tolerance(want, got, f"{name}[{i}]")
    if head.auto_class in ("AutoModel", "AutoModelForMaskedLM"):  # padding-free, switch on: packed too
        flat = flattened(batch, 2)
        reference_flat, ours_flat = run(reference, flat), run(candidate, flat)
        key = "last_hidden_state" if head.auto_class == "AutoModel" else "logits"
        assert_within_unpadded_tolerance(reference_flat[key], ours_flat[key], f"{key} (flattened)")


# ---------------------------------------------------------------------------------------------------------------
# Real shapes (seeded random weights) and the real checkpoint
# ---------------------------------------------------------------------------------------------------------------
ROBERTA_BASE = dict(max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5)  # its config.json's
VOCABULARY = "embeddings.word_embeddings.weight"


def seeded_weights(model: torch.nn.Module, seed: int = 0) -> dict[str, torch.Tensor]:
    """Seeded weights for every parameter of `model` (which may live on the meta device): N(0, 0.02), LayerNorm
    weights 1 + N(0, 0.02); the vocabulary embedding a seeded block of 4,096 rows repeated (250,002 rows cost a
    copy, not 192M draws)."""
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for name, parameter in model.named_parameters():
        shape = parameter.shape
        if name == VOCABULARY:
            block = torch.randn(4096, shape[1], generator=generator) * 0.02
            weights[name] = block.repeat(-(-shape[0] // 4096), 1)[: shape[0]].contiguous()
        else:
            weights[name] = torch.randn(*shape, generator=generator) * 0.02 + ("LayerNorm.weight" in name)
    return weights


@pytest.fixture(scope="module")
def roberta_base_weights() -> dict[str, torch.Tensor]:
    """`seeded_weights` of roberta-base's architecture (shared by both real-shape cells; XLM-R's vocabulary apart)."""
    with torch.device("meta"):
        model = RobertaModel(RobertaConfig(**ROBERTA_BASE))
    return seeded_weights(model)


@pytest.mark.parametrize(
    "name, config_class, upstream, vocab_size",
    [
        ("roberta-base", RobertaConfig, RobertaModel, 50265),
        ("xlm-roberta-base", XLMRobertaConfig, XLMRobertaModel, 250002),
    ],
)
def test_real_shapes_bit_exact(roberta_base_weights, name, config_class, upstream, vocab_size):
    """roberta-base's and xlm-roberta-base's architectures (12 layers, hidden 768, FFN 3072, vocabularies of 50,265
    and 250,002, 514 positions) with seeded weights: upstream's state dict loads into FfnRoberta with every key
    matched (`load_state_dict(strict=True)` through FfnRoberta's pre-hook: the names on disk) and every hidden state
    and the pooler are equal (sdpa). Both models are built on the meta device and given the same tensors: no
    initialisation of 125M / 278M parameters, no disk."""
    config = config_class(vocab_size=vocab_size, **ROBERTA_BASE)
    with torch.device("meta"):
        reference = upstream(config)
        candidate = FfnRobertaModel(FfnRobertaConfig.from_dict(config.to_dict()))
    weights = dict(roberta_base_weights)
    if vocab_size != weights[VOCABULARY].shape[0]:
        weights[VOCABULARY] = weights[VOCABULARY][:4096].repeat(-(-vocab_size // 4096), 1)[:vocab_size].contiguous()
    reference.load_state_dict(weights, strict=True, assign=True)
    candidate.load_state_dict(dict(weights), strict=True, assign=True)  # renamed by the pre-hook
    for model in (reference, candidate):  # the non-persistent buffers, as RobertaEmbeddings builds them
        model.embeddings.position_ids = torch.arange(config.max_position_embeddings)[None]
        model.embeddings.token_type_ids = torch.zeros(1, config.max_position_embeddings, dtype=torch.long)
    up_proj = candidate.encoder.layer[11].mlp.up_proj.weight  # BERT's name on disk, the role name in memory
    assert up_proj.data_ptr() == weights["encoder.layer.11.intermediate.dense.weight"].data_ptr()
    assert candidate.embeddings.word_embeddings.weight.shape == (vocab_size, 768)
    batch = roberta_batch(vocab_size, lengths=(9, 5))
    rows = compare_outputs(name, run(reference.eval(), batch), run(candidate.eval(), batch))
    assert len(rows) == 2 + 13 and all(r.equal for r in rows), [(r.output, r.max_abs_diff) for r in rows if not r.equal]


def cached_roberta_base() -> str | None:
    config = try_to_load_from_cache("FacebookAI/roberta-base", "config.json")
    weights = try_to_load_from_cache("FacebookAI/roberta-base", "model.safetensors")
    return os.path.dirname(config) if isinstance(config, str) and isinstance(weights, str) else None


def test_real_roberta_base_bit_exact():
    folder = cached_roberta_base()
    if folder is None:
        pytest.skip(NOT_CACHED)
    with quiet_transformers():
        reference = AutoModelForMaskedLM.from_pretrained(folder).eval()
        candidate, info = FfnRobertaForMaskedLM.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    tokenizer = RobertaTokenizer.from_pretrained(folder)
    batch = tokenizer(["time flies like an arrow", "fruit flies like a <mask>."], padding=True, return_tensors="pt")
    rows = compare_outputs("roberta-base", run(reference, dict(batch)), run(candidate.eval(), dict(batch)))
    assert all(r.equal for r in rows), [(r.output, r.max_abs_diff) for r in rows if not r.equal]


# ---------------------------------------------------------------------------------------------------------------
# Remote code without hf_ffn; a checkpoint of another family
# ---------------------------------------------------------------------------------------------------------------
REMOTE_SCRIPT = textwrap.dedent(
    """
    import importlib.util, os, sys
    sys.path = [p for p in sys.path if not os.path.isdir(os.path.join(p or os.getcwd(), "hf_ffn"))]
    sys.meta_path = [f for f in sys.meta_path if "editable" not in getattr(f, "__name__", type(f).__name__).lower()]
    assert importlib.util.find_spec("hf_ffn") is None
    import torch
    from transformers import AutoModel, AutoModelForMaskedLM
    folder, expected = sys.argv[1], torch.load(sys.argv[2])
    model = AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(model).__name__ == "FfnRobertaForMaskedLM" and not type(model).__module__.startswith("hf_ffn")
    assert model.config.ffn_type == "swiglu" and model.config.layer_norm_position == "pre"
    with torch.no_grad():
        out = model(**expected["inputs"]).logits
    assert torch.equal(out, expected["logits"]), (out - expected["logits"]).abs().max()
    base = AutoModel.from_pretrained(folder, trust_remote_code=True)
    assert type(base).__name__ == "FfnRobertaModel", type(base)
    print("REMOTE_OK", type(model).__module__)
    """
)


@pytest.mark.slow
def test_trust_remote_code_without_hf_ffn(tmp_path):
    torch.manual_seed(0)
    config = FfnRobertaConfig(**TINY_ROBERTA, ffn_type="swiglu", layer_norm_position="pre")
    model = FfnRobertaForMaskedLM(config).eval()
    folder = tmp_path / "swiglu_pre"
    model.save_pretrained(folder)
    assert {"configuration_ffn_roberta.py", "modeling_ffn_roberta.py", "modeling_ffn_bert.py"} <= set(
        os.listdir(folder)
    )
    batch = roberta_batch()
    with torch.no_grad():
        torch.save({"inputs": batch, "logits": model(**batch).logits}, tmp_path / "expected.pt")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {"PATH": os.environ.get("PATH", ""), "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home")}
    result = subprocess.run(
        [sys.executable, "-c", REMOTE_SCRIPT, str(folder), str(tmp_path / "expected.pt")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "REMOTE_OK transformers_modules" in result.stdout


def test_sparse_prediction_is_refused_not_ignored():
    """FfnBertForMaskedLM's switch, not implemented for RoBERTa's LM head yet: an error, not a silent dense head."""
    with pytest.raises(ValueError, match="sparse_prediction=True is supported by FfnBertForMaskedLM only"):
        FfnRobertaForMaskedLM(FfnRobertaConfig(**TINY_ROBERTA, sparse_prediction=True))


@pytest.mark.parametrize(
    "config",
    [GPT2Config(n_layer=1), T5Config(num_layers=1), DebertaConfig(), ModernBertConfig(), DistilBertConfig()],
    ids=lambda c: c.model_type,
)
def test_another_family_is_a_value_error_naming_it(tmp_path, config):
    config.save_pretrained(tmp_path)
    for load in (FfnRobertaConfig.from_pretrained, FfnRobertaModel.from_pretrained):
        with pytest.raises(ValueError) as error:
            load(tmp_path)
        message = str(error.value)
        assert f"model_type={config.model_type!r}" in message and "\n" not in message
        assert all(model_type in message for model_type in ROBERTA_MODEL_TYPES + ("bert", "ffn_bert"))


# ---------------------------------------------------------------------------------------------------------------
# The parity job (`hf-ffn parity`) on each family, against the family's own upstream classes
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_parity_job_holds_for_every_family_and_a_wrong_eps_breaks_it(family_folders, family):
    folder = family_folders[family]["AutoModelForMaskedLM"]  # the job seeds the heads a checkpoint lacks
    assert checkpoint_family(folder).upstream_type == family
    rows = run_parity(folder, attn_implementation="eager")
    heads = {row.head for row in rows}
    assert heads == {*HEAD_IDS, "FFN", "FfnRobertaModel (unpad_tokens)"}
    assert all(row.holds for row in rows), [row for row in rows if not row.holds]
    bitwise = [row for row in rows if row.tolerance is None]
    assert bitwise and all(row.equal for row in bitwise)
    flattened = [row for row in rows if row.output.endswith(FLATTENED)]
    assert bool(flattened) == UPSTREAM_MASKS_PACKED_SEQUENCES
    assert not any(r.output.startswith("pooler_output") for r in flattened)
    assert not any("time flies" in row.output for row in rows)  # BERT's ids mean nothing in this vocabulary
    broken = run_parity(folder, attn_implementation="sdpa", layer_norm_eps=1e-7)  # the negative control
    assert not all(row.equal for row in broken if row.tolerance is None)


def test_parity_job_names_the_families_for_another_model_type(tmp_path):
    GPT2Config(n_layer=1, n_embd=32, n_head=2).save_pretrained(tmp_path)
    with pytest.raises(
        ValueError, match=r"model_type='gpt2'; hf_ffn loads checkpoints of the families .*bert.*roberta-prelayernorm"
    ):
        run_parity(str(tmp_path))


def test_parity_command_on_an_xlm_roberta_folder_and_another_family(family_folders, tmp_path, capsys):
    folder = family_folders["xlm-roberta"]["AutoModel"]
    assert main(["parity", "--model_name_or_path", folder, "--attn", "sdpa"]) == 0
    out = capsys.readouterr().out
    assert "EXACT: every output equals upstream XLMRobertaModel bit for bit" in out
    assert "FfnRobertaForMultipleChoice" in out and "OK" in out.splitlines()[-1]
    GPT2Config(n_layer=1, n_embd=32, n_head=2).save_pretrained(tmp_path / "gpt2")
    with pytest.raises(SystemExit) as exit_info:
        main(["parity", "--model_name_or_path", str(tmp_path / "gpt2")])
    assert exit_info.value.code == 2
    assert "model_type='gpt2'; hf_ffn loads checkpoints of the families" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# hf-ffn finetune on a RoBERTa checkpoint (its tokenizer, RobertaClassificationHead on <s>)
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
def roberta_checkpoint(tmp_path_factory) -> str:
    """A tiny RoBERTa folder with a byte-level BPE tokenizer trained on `SENTENCES` (vocabulary ~300)."""
    from tokenizers import ByteLevelBPETokenizer

    folder = tmp_path_factory.mktemp("roberta_checkpoint")
    bpe = ByteLevelBPETokenizer()
    texts = [text for text, _ in SENTENCES]
    bpe.train_from_iterator(
        texts, vocab_size=300, min_frequency=1, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    )
    bpe.save_model(str(folder))
    tokenizer = RobertaTokenizer(vocab=str(folder / "vocab.json"), merges=str(folder / "merges.txt"))
    torch.manual_seed(0)
    model = perturb_constants(RobertaForMaskedLM(RobertaConfig(**{**TINY_ROBERTA, "vocab_size": len(tokenizer)})))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_finetune_a_roberta_checkpoint(roberta_checkpoint, tmp_path):
    from hf_ffn.finetune import finetune

    files = {}
    for split in ("train", "validation"):
        files[f"{split}_file"] = str(tmp_path / f"{split}.csv")
        lines = ["sentence,label", *(f"{text},{label}" for text, label in SENTENCES)]
        (tmp_path / f"{split}.csv").write_text("\n".join(lines) + "\n")
    options = dict(max_steps=3, logging_steps=1, optim="sgd", learning_rate=0.5, per_device_train_batch_size=3)
    options |= dict(report_to="none", use_cpu=True, save_strategy="no", quiet=True, **files)
    padded = finetune(roberta_checkpoint, str(tmp_path / "padded"), **options)
    losses = [e["loss"] for e in padded["log_history"] if "loss" in e]
    assert len(losses) == 3 and losses[-1] != losses[0]
    # the classification head reads each row's <s>: a padding-free row of several sequences would give one output
    with pytest.raises(ValueError, match=r"--padding_free: .* is a roberta checkpoint, whose classification head"):
        finetune(roberta_checkpoint, str(tmp_path / "flat"), padding_free=True, **options)
    # the saved model is FfnRoberta's, and upstream's RobertaForSequenceClassification reads it bit for bit
    with quiet_transformers():
        ours = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "padded").eval()
        theirs, info = transformers.RobertaForSequenceClassification.from_pretrained(
            tmp_path / "padded", output_loading_info=True
        )
    assert type(ours).__name__ == "FfnRobertaForSequenceClassification"
    assert not info["missing_keys"] and not info["unexpected_keys"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "padded")
    batch = tokenizer([text for text, _ in SENTENCES], padding=True, return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(ours(**batch).logits, theirs.eval()(**batch).logits)


def test_finetune_converts_a_roberta_checkpoint_to_geglu_exactly(roberta_checkpoint, tmp_path):
    from hf_ffn.finetune import finetune

    (tmp_path / "train.csv").write_text("sentence,label\n" + "\n".join(f"{t},{lab}" for t, lab in SENTENCES) + "\n")
    files = dict(train_file=str(tmp_path / "train.csv"), validation_file=str(tmp_path / "train.csv"))
    outcome = finetune(
        roberta_checkpoint,
        str(tmp_path / "out"),
        ffn_type="geglu",
        max_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        quiet=True,
        **files,
    )
    assert outcome["conversion"]["exact"] is True and outcome["conversion"]["model_class"] == (
        "FfnRobertaForSequenceClassification"
    )
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (saved["model_type"], saved["ffn_type"]) == ("ffn_roberta", "geglu")


def test_mlm_continues_pretraining_a_roberta_checkpoint(roberta_checkpoint, tmp_path):
    """`hf-ffn mlm --model_name_or_path ROBERTA`: its own tokenizer (<s> … </s> blocks) and RobertaLMHead; the saved
    folder is FfnRoberta's and loads in upstream's RobertaForMaskedLM, no weight missing, the same logits."""
    texts = [" ".join(text for text, _ in SENTENCES[i:] + SENTENCES[:i]) for i in range(len(SENTENCES))] * 3
    (tmp_path / "train.txt").write_text("\n\n".join(texts) + "\n")
    argv = ["mlm", "--model_name_or_path", roberta_checkpoint, "--train_files", str(tmp_path / "train.txt")]
    argv += ["--max_steps", "2", "--max_seq_length", "16", "--per_device_train_batch_size", "4", "--report_to", "none"]
    assert main([*argv, "--output_dir", str(tmp_path / "out"), "--use_cpu", "true"]) == 0
    # RobertaLMHead decodes every position: the run says so rather than report --sparse_prediction's default
    assert json.loads((tmp_path / "out" / "run_info.json").read_text())["sparse_prediction"] is False
    with quiet_transformers():
        ours = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "out").eval()
        theirs, info = transformers.RobertaForMaskedLM.from_pretrained(tmp_path / "out", output_loading_info=True)
        before = transformers.RobertaForMaskedLM.from_pretrained(roberta_checkpoint)
    assert type(ours).__name__ == "FfnRobertaForMaskedLM"
    assert not info["missing_keys"] and not info["unexpected_keys"]
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    batch = tokenizer(["a fine warm film", "too dull"], padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = ours(**batch).logits
        assert torch.equal(logits, theirs.eval()(**batch).logits)
        assert not torch.equal(logits, before.eval()(**batch).logits)  # it trained


@pytest.mark.parametrize("family", ["roberta", "xlm-roberta", "camembert"])
def test_convert_a_roberta_family_checkpoint(family_folders, tmp_path, capsys, family):
    """`hf-ffn convert` on a Post-LN RoBERTa-family folder: GeGLU exact (the converted MaskedLM's logits
    `torch.equal` to upstream's on the source), Pre-LN not function-preserving (reported as such)."""
    source = family_folders[family]["AutoModelForMaskedLM"]
    assert main(["convert", source, str(tmp_path / "geglu"), "--ffn_type", "geglu"]) == 0
    report = json.loads((tmp_path / "geglu" / "conversion_report.json").read_text())
    assert report["exact"] is True and report["model_class"] == "FfnRobertaForMaskedLM"
    assert report["difference"]["reference"] == f"transformers.{upstream_class(family, HEAD_CLASSES[1]).__name__}"
    batch = roberta_batch()
    with quiet_transformers():
        converted = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "geglu").eval()
        reference = upstream_class(family, HEAD_CLASSES[1]).from_pretrained(source).eval()
    assert type(converted).__name__ == "FfnRobertaForMaskedLM" and converted.config.ffn_type == "geglu"
    with torch.no_grad():
        assert torch.equal(converted(**batch).logits, reference(**batch).logits)
    assert main(["convert", source, str(tmp_path / "pre"), "--layer_norm_position", "pre"]) == 0
    report = json.loads((tmp_path / "pre" / "conversion_report.json").read_text())
    assert report["exact"] is False and report["difference"]["logits"]["equal"] is False
    assert "not function-preserving" in capsys.readouterr().out


def test_convert_of_a_pre_layer_norm_roberta_is_refused(family_folders, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "convert",
                family_folders["roberta-prelayernorm"]["AutoModel"],
                str(tmp_path / "out"),
                "--ffn_type",
                "geglu",
            ]
        )
    assert exit_info.value.code == 2 and "conversion starts from plain BERT" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_heal_of_a_roberta_student_through_the_cli(roberta_checkpoint, tmp_path):
    """`hf-ffn heal` takes a converted RoBERTa (it used to refuse it): the run ends (exit 0) with its layer-wise
    fits on the 512 calibration tokens asked, the teacher recorded, and the healed folder FfnRoberta's."""
    assert main(["convert", roberta_checkpoint, str(tmp_path / "geglu"), "--ffn_type", "geglu"]) == 0
    text = " ".join(t for t, _ in SENTENCES * 40)
    (tmp_path / "text.txt").write_text(text + "\n")
    argv = ["heal", "--student", str(tmp_path / "geglu"), "--train_files", str(tmp_path / "text.txt")]
    argv += ["--output_dir", str(tmp_path / "heal"), "--max_seq_length", "32", "--layerwise_tokens", "512"]
    argv += ["--layerwise_steps", "0", "--report_to", "none", "--use_cpu", "true"]
    assert main(argv) == 0
    healing = json.loads((tmp_path / "heal" / "healing.json").read_text())
    assert healing["teacher"] == roberta_checkpoint and healing["layerwise"]["tokens"] == 512
    config = json.loads((tmp_path / "heal" / "healed" / "config.json").read_text())
    assert config["model_type"] == "ffn_roberta" and config["architectures"] == ["FfnRobertaForMaskedLM"]


def test_to_bert_of_a_roberta_folder_says_which_commands_take_it(family_folders, tmp_path, capsys):
    """`convert --to_bert` writes plain BERT folders: a RoBERTa one is refused in one line saying every other command
    takes it (heal, compare, ... take the family since issue 57)."""
    source = family_folders["roberta"]["AutoModelForMaskedLM"]
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", source, str(tmp_path / "bert"), "--to_bert"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "model_type='roberta'; FfnBert loads BERT-shaped checkpoints only (allowed: bert, ffn_bert)" in error
    assert "which every hf-ffn command takes but convert --to_bert (it writes plain BERT folders" in error
    assert not (tmp_path / "bert").exists()


def test_sts_on_a_roberta_checkpoint_truncates_to_its_positions(roberta_checkpoint, tmp_path):
    """`hf-ffn sts` on a RoBERTa with 64 positions (62 usable: they count from padding_idx + 1) and sentences longer
    than that: truncated to 62 tokens (at 128, `STS_MAX_LENGTH`, the position embedding was indexed out of range)."""
    from hf_ffn.similarity import sts_spearman

    from .test_tasks import write_stsb

    folder = write_stsb(tmp_path / "stsb")
    long_pair = " ".join(["a fine warm funny film"] * 20)
    with (folder / "sts-test.csv").open("a") as f:
        f.write(f"main-captions\tMSRvid\t2012test\t9999\t2.5\t{long_pair}\t{long_pair} too dull\n")
    result = sts_spearman(roberta_checkpoint, str(folder))
    assert result["pairs"] >= 2 and -1 <= result["spearman"] <= 1


def test_parity_on_a_roberta_variant_is_a_report_against_roberta(family_folders, tmp_path, capsys):
    """A converted RoBERTa (GeGLU) is not plain RoBERTa: `hf-ffn parity` exits 3 naming RobertaModel, and the report
    it points to (`--ffn_type geglu` on the source) runs against upstream RobertaModel."""
    source = family_folders["roberta"]["AutoModelForMaskedLM"]
    assert main(["convert", source, str(tmp_path / "geglu"), "--ffn_type", "geglu"]) == 0
    capsys.readouterr()
    assert main(["parity", "--model_name_or_path", str(tmp_path / "geglu")]) == 3
    error = capsys.readouterr().err
    assert (
        "is not a plain-Roberta checkpoint: ffn_type" in error and "Upstream RobertaModel cannot represent it" in error
    )
    assert f"run `hf-ffn parity --model_name_or_path {source} --ffn_type geglu`" in error
    assert main(["parity", "--model_name_or_path", source, "--ffn_type", "geglu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["config"]["ffn_type"] == "geglu" and report["new_weights"]  # gate_proj: new (a report, not a copy)
    assert report["parameters"]["variant"] > report["parameters"]["bert"]
    assert report["last_hidden_state"]["equal"] is False


def test_finetune_max_seq_length_is_capped_at_a_robertas_usable_positions(roberta_checkpoint, tmp_path):
    """A RoBERTa's positions count from padding_idx + 1: 64 position embeddings hold 62 tokens (roberta-base's 514
    hold 512), so --max_seq_length 64 is refused before training (it indexed the position table out of range)."""
    from hf_ffn.finetune import finetune
    from hf_ffn.training.outputs import checkpoint_max_positions

    assert checkpoint_max_positions(roberta_checkpoint) == TINY_ROBERTA["max_position_embeddings"] - 2
    (tmp_path / "train.csv").write_text("sentence,label\n" + "\n".join(f"{t},{lab}" for t, lab in SENTENCES) + "\n")
    files = dict(train_file=str(tmp_path / "train.csv"), validation_file=str(tmp_path / "train.csv"))
    with pytest.raises(ValueError, match=r"--max_seq_length has value 64; allowed: .*62"):
        finetune(roberta_checkpoint, str(tmp_path / "out"), max_seq_length=64, report_to="none", quiet=True, **files)
