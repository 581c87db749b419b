"""Agreement with the field's references: LlamaMLP (SwiGLU), ModernBertMLP (GeGLU), MegatronBERT (Pre-LN)."""

import pytest
import torch
from safetensors import safe_open
from transformers import (
    LlamaConfig,
    MegatronBertConfig,
    MegatronBertForMaskedLM,
    MegatronBertForMultipleChoice,
    MegatronBertForNextSentencePrediction,
    MegatronBertForPreTraining,
    MegatronBertForQuestionAnswering,
    MegatronBertForSequenceClassification,
    MegatronBertForTokenClassification,
    MegatronBertModel,
    ModernBertConfig,
)
from transformers.models.llama.modeling_llama import LlamaMLP
from transformers.models.modernbert.modeling_modernbert import ModernBertMLP

from hf_ffn import (
    FfnBertConfig,
    FfnBertForMaskedLM,
    FfnBertForMultipleChoice,
    FfnBertForNextSentencePrediction,
    FfnBertForPreTraining,
    FfnBertForQuestionAnswering,
    FfnBertForSequenceClassification,
    FfnBertForTokenClassification,
    FfnBertGatedMLP,
    FfnBertModel,
)
from hf_ffn.conversion import (
    FFN_TO_LLAMA_MLP,
    FFN_TO_MODERNBERT_MLP,
    LLAMA_MLP_TO_FFN,
    MODERNBERT_MLP_TO_FFN,
    KeyMap,
    convert_state_dict,
    load_megatron_bert,
)
from hf_ffn.parity import compare_outputs

from .conftest import assert_close_to_scale, assert_equal_but_row_count, tiny_batch

HIDDEN, WIDTH = 32, 37  # odd width: a half-order or shape bug cannot hide


def _x(seed: int = 1) -> torch.Tensor:
    return torch.randn(3, 7, HIDDEN, generator=torch.Generator().manual_seed(seed))  # (batch, seq, hidden)


def _gated(ffn_type: str, bias: bool) -> FfnBertGatedMLP:
    config = FfnBertConfig(
        hidden_size=HIDDEN, num_attention_heads=4, intermediate_size=WIDTH, ffn_type=ffn_type, ffn_bias=bias
    )
    torch.manual_seed(0)
    return FfnBertGatedMLP(config, ffn_type)


def _randomise(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g))


# ---------------------------------------------------------------------------------------------------------------
# LlamaMLP = SwiGLU
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [False, True])
def test_swiglu_equals_llama_mlp_both_directions(bias):
    llama = LlamaMLP(LlamaConfig(hidden_size=HIDDEN, intermediate_size=WIDTH, hidden_act="silu", mlp_bias=bias))
    _randomise(llama, seed=2)
    ours = _gated("swiglu", bias)
    ours.load_state_dict(convert_state_dict(llama.state_dict(), LLAMA_MLP_TO_FFN), strict=True)
    assert torch.equal(ours(_x()), llama(_x()))
    _randomise(ours, seed=3)
    llama.load_state_dict(convert_state_dict(ours.state_dict(), FFN_TO_LLAMA_MLP), strict=True)
    assert torch.equal(llama(_x()), ours(_x()))


# ---------------------------------------------------------------------------------------------------------------
# ModernBertMLP = GeGLU through Chunk / Concatenate of the fused Wi
# ---------------------------------------------------------------------------------------------------------------
def _modernbert(bias: bool) -> ModernBertMLP:
    config = ModernBertConfig(
        hidden_size=HIDDEN, intermediate_size=WIDTH, mlp_bias=bias, hidden_activation="gelu", mlp_dropout=0.0
    )
    return ModernBertMLP(config).eval()


class Contiguous(torch.nn.Module):
    """`act(t.contiguous())`: the same arithmetic on a contiguous copy of its input."""

    def __init__(self, act: torch.nn.Module):
        super().__init__()
        self.act = act

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.act(t.contiguous())


@pytest.mark.parametrize("bias", [False, True])
def test_geglu_equals_modernbert_mlp_both_directions(bias):
    """Within a few ulp once ModernBERT's GELU sees a contiguous tensor; unmodified, within 1e-5 relative.

    Why: ModernBertMLP applies GELU to a `chunk` of the fused Wi output, a non-contiguous view of the
    (batch, seq, 2·width) tensor, and PyTorch's CPU GELU then runs its scalar erf loop instead of the vectorised
    one; the two differ in the last bits (seen: 4.8e-7 on values of order 1). With a contiguous GELU the ops are
    the same but for the fused matmul, one (hidden → 2·width) product where ours are two (hidden → width): BLAS
    may block them differently (the same bits on the Intel Xeon of the first sessions), so they are compared
    with `assert_equal_but_row_count` (16 float32 epsilons of the largest value), the Wi halves with `torch.equal`.
    """
    modern = _modernbert(bias)
    _randomise(modern, seed=4)
    ours = _gated("geglu", bias)
    ours.load_state_dict(convert_state_dict(modern.state_dict(), MODERNBERT_MLP_TO_FFN), strict=True)
    x = _x()
    with torch.no_grad():
        # Unmodified ModernBertMLP: outputs reach ~300 (std-1 weights), a last-bit GELU difference becomes ~1e-5.
        torch.testing.assert_close(ours(x), modern(x), rtol=1e-5, atol=1e-4)
        modern.act = Contiguous(modern.act)
        assert_equal_but_row_count(ours(x), modern(x), "contiguous GELU")
        assert torch.equal(modern.Wi.weight[:WIDTH], ours.gate_proj.weight)  # first half = activated half
        _randomise(ours, seed=5)
        modern.load_state_dict(convert_state_dict(ours.state_dict(), FFN_TO_MODERNBERT_MLP), strict=True)
        assert_equal_but_row_count(modern(_x(seed=6)), ours(_x(seed=6)), "back to ModernBERT")


def test_modernbert_half_order_by_hand():
    """hidden 1, width 1: Wi = [a; b] (no bias), Wo = 1. ModernBERT computes gelu(a·x)·(b·x); so must we, and the
    swapped mapping (second half as gate) computes gelu(b·x)·(a·x), a different number."""
    a, b, x = 2.0, -0.5, torch.tensor([[[1.5]]])
    modern = ModernBertMLP(
        ModernBertConfig(hidden_size=1, intermediate_size=1, mlp_bias=False, hidden_activation="gelu")
    )
    with torch.no_grad():
        modern.Wi.weight.copy_(torch.tensor([[a], [b]]))
        modern.Wo.weight.fill_(1.0)
    gelu = lambda z: 0.5 * z * (1 + torch.erf(torch.tensor(z) / 2**0.5))  # noqa: E731
    expected = gelu(a * 1.5) * (b * 1.5)  # ≈ 2.99595 · (−0.75) ≈ −2.247
    assert modern(x).item() == pytest.approx(expected.item(), rel=1e-6)
    config = FfnBertConfig(hidden_size=1, num_attention_heads=1, intermediate_size=1, ffn_type="geglu", ffn_bias=False)
    ours = FfnBertGatedMLP(config, "geglu")
    ours.load_state_dict(convert_state_dict(modern.state_dict(), MODERNBERT_MLP_TO_FFN))
    assert ours(x).item() == pytest.approx(expected.item(), rel=1e-6)
    swapped_map = tuple(
        KeyMap(m.source, tuple(reversed(m.target)), m.op) if len(m.target) == 2 else m for m in MODERNBERT_MLP_TO_FFN
    )
    ours.load_state_dict(convert_state_dict(modern.state_dict(), swapped_map))
    assert ours(x).item() == pytest.approx((gelu(b * 1.5) * (a * 1.5)).item(), rel=1e-6)
    assert abs(ours(x).item() - expected.item()) > 1.0


def test_convert_state_dict_is_strict():
    with pytest.raises(ValueError, match="keys not covered by the mapping: \\['extra'\\]"):
        convert_state_dict({"Wo.weight": torch.zeros(1), "extra": torch.zeros(1)}, MODERNBERT_MLP_TO_FFN)


# ---------------------------------------------------------------------------------------------------------------
# MegatronBERT = Pre-LN without embedding LayerNorm
# ---------------------------------------------------------------------------------------------------------------
MEGATRON_PAIRS = {
    MegatronBertModel: FfnBertModel,
    MegatronBertForPreTraining: FfnBertForPreTraining,
    MegatronBertForMaskedLM: FfnBertForMaskedLM,
    MegatronBertForNextSentencePrediction: FfnBertForNextSentencePrediction,
    MegatronBertForSequenceClassification: FfnBertForSequenceClassification,
    MegatronBertForTokenClassification: FfnBertForTokenClassification,
    MegatronBertForQuestionAnswering: FfnBertForQuestionAnswering,
    MegatronBertForMultipleChoice: FfnBertForMultipleChoice,
}


def _megatron_config(hidden: int, heads: int) -> MegatronBertConfig:
    return MegatronBertConfig(
        vocab_size=99,
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=heads,
        intermediate_size=WIDTH,
        max_position_embeddings=64,
        type_vocab_size=2,
    )


def _inputs(upstream_class: type) -> dict:
    batch = tiny_batch()
    if upstream_class is MegatronBertForMultipleChoice:  # (batch, choices=2, seq)
        return {k: torch.stack([v, v.flip(0)], dim=1) for k, v in batch.items()}
    return batch


def test_megatron_bert_loads_exactly_every_shared_head(tmp_path):
    """Head size 64 (hidden 128, 2 heads): √64 = 8, so MegatronBERT's /√d and BERT's ·d^-1/2 are the same op."""
    config = _megatron_config(hidden=128, heads=2)
    for upstream_class, ffn_class in MEGATRON_PAIRS.items():
        folder = tmp_path / upstream_class.__name__
        torch.manual_seed(0)
        upstream_class(config).save_pretrained(folder)  # safetensors
        reference = upstream_class.from_pretrained(folder, attn_implementation="eager").eval()
        model, report = load_megatron_bert(str(folder), ffn_class, attn_implementation="eager")
        assert report.new == [] and report.dropped == [], (report.new, report.dropped)
        assert model.config.layer_norm_position == "pre" and not model.config.embedding_layer_norm
        inputs = _inputs(upstream_class)
        with torch.no_grad():
            rows = compare_outputs(
                ffn_class.__name__,
                reference(**inputs, output_hidden_states=True, output_attentions=True),
                model(**inputs, output_hidden_states=True, output_attentions=True),
            )
        assert rows and all(r.equal for r in rows), [r for r in rows if not r.equal]
    mapped = {m["source"] for m in report.mapped}
    assert {
        "bert.encoder.ln.weight",
        "bert.encoder.layer.0.attention.ln.bias",
        "bert.encoder.layer.1.ln.weight",
        "bert.encoder.layer.0.intermediate.dense.weight",
        "bert.encoder.layer.0.output.dense.bias",
    } <= mapped


def test_megatron_bert_saves_in_ffn_bert_layout(tmp_path):
    torch.manual_seed(0)
    MegatronBertForMaskedLM(_megatron_config(hidden=128, heads=2)).save_pretrained(tmp_path / "megatron")
    model, _ = load_megatron_bert(str(tmp_path / "megatron"), FfnBertForMaskedLM)
    model.save_pretrained(tmp_path / "ffn")
    with safe_open(str(tmp_path / "ffn" / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert not any(".ln." in k for k in keys)
    assert {
        "bert.encoder.final_norm.weight",
        "bert.encoder.layer.0.attention.output.LayerNorm.weight",
        "bert.encoder.layer.0.output.LayerNorm.weight",
        "bert.encoder.layer.0.intermediate.dense.weight",
    } <= keys
    reloaded, info = FfnBertForMaskedLM.from_pretrained(tmp_path / "ffn", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    batch = tiny_batch()
    with torch.no_grad():
        assert torch.equal(reloaded.eval()(**batch).logits, model(**batch).logits)


@pytest.mark.parametrize("hidden,heads,attn", [(32, 4, "eager"), (128, 2, "sdpa")])
def test_megatron_bert_other_head_sizes_and_sdpa_within_tolerance(tmp_path, hidden, heads, attn):
    """Head size 8 (√8 irrational: /√d and ·d^-1/2 round differently in the last bit) or sdpa (a fused kernel
    with its own summation order): fp32 rounding differences only, within `SCALE_TOL` (1e-5) of the largest output
    (`assert_close_to_scale`; outputs of order 1)."""
    torch.manual_seed(0)
    MegatronBertModel(_megatron_config(hidden, heads)).save_pretrained(tmp_path / "m")
    reference = MegatronBertModel.from_pretrained(tmp_path / "m", attn_implementation="eager").eval()
    model, _ = load_megatron_bert(str(tmp_path / "m"), attn_implementation=attn)
    batch = tiny_batch()
    with torch.no_grad():
        ref, out = reference(**batch).last_hidden_state, model(**batch).last_hidden_state
    assert_close_to_scale(out, ref, "last_hidden_state")


def test_megatron_loader_rejects_other_checkpoints(tiny_bert_checkpoint):
    with pytest.raises(ValueError, match="model_type must be 'megatron-bert', got 'bert'"):
        load_megatron_bert(tiny_bert_checkpoint)
