"""Which kernel runs packed attention on which device and dtype (`hf_ffn.unpadding.packed_attention_kernel`), and
the CUDA path's arrangement around torch's flash kernel ("varlen") checked on CPU tensors with a stand-in.

CI has no GPU. What can be checked without one is checked here: the per-device choice (a `torch.device("cuda")`
object needs no GPU), the packing's sequence boundaries and gather indices, the padded path where a device has no
kernel, and the "varlen" call contract: all packed rows in one call with `cu_seqlens`, the longest length, the
dropout and the scale, its output put back in place (a stand-in computes the same attention per sequence with
SDPA). On a GPU, `hf-ffn parity --device cuda` checks the real kernel's values and `python -m
studies.benchmark.gpu` measures it (studies/benchmark/gpu.json).
"""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn
from transformers.utils import logging as hf_logging

import hf_ffn.unpadding as unpadding
from hf_ffn import FfnBertForMaskedLM, FfnBertModel
from hf_ffn.parity.batches import flattened_batch
from hf_ffn.unpadding import TokenPacking, compute_dtype, packed_attention_kernel

from .conftest import assert_close_to_scale, tiny_batch, tiny_config

NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


@pytest.fixture(autouse=True)
def quiet_and_unforced(monkeypatch):
    hf_logging.set_verbosity_error()
    monkeypatch.setattr(unpadding, "FORCE_PACKED_ATTENTION_KERNEL", None)
    yield


def config_with(attn: str, **overrides):
    config = tiny_config(**overrides)
    config._attn_implementation = attn
    return config


@pytest.mark.parametrize(
    "device, attn, dtype, kernel",
    [
        ("cpu", "eager", torch.float32, "buckets"),
        ("cpu", "sdpa", torch.bfloat16, "buckets"),
        ("cpu", "flex_attention", torch.float32, "buckets"),
        ("cuda", "sdpa", torch.bfloat16, "varlen"),
        ("cuda", "sdpa", torch.float16, "varlen"),
        ("cuda", "sdpa", torch.float32, None),  # no flash kernel in fp32: the padded path, never slower
        ("cuda", "eager", torch.bfloat16, None),  # no variable-length eager kernel
        ("cuda", "flex_attention", torch.bfloat16, None),
        ("cuda", "flash_attention_2", torch.bfloat16, "flash"),
        ("mps", "sdpa", torch.float16, None),
    ],
)
def test_kernel_is_chosen_per_device(device, attn, dtype, kernel):
    assert packed_attention_kernel(config_with(attn), torch.device(device), dtype) == kernel


def test_compute_dtype_is_autocasts_where_it_is_on():
    cpu = torch.device("cpu")
    assert compute_dtype(torch.float32, cpu) == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compute_dtype(torch.float32, cpu) == torch.bfloat16
    assert compute_dtype(torch.bfloat16, cpu) == torch.bfloat16
    assert compute_dtype(torch.float16, torch.device("meta")) == torch.float16  # no autocast on meta: no error


def test_forced_kernel_wins_and_a_bad_one_names_the_setting(monkeypatch):
    monkeypatch.setattr(unpadding, "FORCE_PACKED_ATTENTION_KERNEL", "varlen")
    assert packed_attention_kernel(config_with("eager"), torch.device("cpu")) == "varlen"
    monkeypatch.setattr(unpadding, "FORCE_PACKED_ATTENTION_KERNEL", "nested")
    with pytest.raises(ValueError, match="must be one of buckets, varlen, flash or None, got 'nested'"):
        packed_attention_kernel(config_with("sdpa"), torch.device("cpu"))


def test_the_choice_is_logged_once_per_device_implementation_and_dtype(monkeypatch, caplog):
    monkeypatch.setattr(unpadding, "_announced", set())
    with caplog.at_level(logging.INFO, logger="hf_ffn.unpadding"):
        for _ in range(3):
            packed_attention_kernel(config_with("sdpa"), torch.device("cuda"), torch.bfloat16)
            packed_attention_kernel(config_with("sdpa"), torch.device("cuda"), torch.float32)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "unpad_tokens: packed attention by 'varlen' (cuda, attn_implementation='sdpa', bfloat16)",
        "unpad_tokens: no variable-length kernel for cuda, attn_implementation='sdpa', float32; padded batches run "
        "the padded path",
    ]


def test_packing_carries_the_kernel_and_boundaries_hand_checked():
    batch = tiny_batch()  # lengths 7, 4, 2 of 7
    packing = TokenPacking.for_batch(
        config_with("sdpa", unpad_tokens=True), batch["input_ids"], batch["attention_mask"], None, None, None
    )
    assert packing.kernel == "buckets"
    # packed order: shortest first; row 2's two tokens, row 1's four, row 0's seven (flattened positions)
    assert packing.indices.tolist() == [14, 15, 7, 8, 9, 10, 0, 1, 2, 3, 4, 5, 6]
    assert packing.cu_seqlens.tolist() == [0, 2, 6, 13] and packing.cu_seqlens.dtype == torch.int32
    assert packing.buckets == ((2, 1), (4, 1), (7, 1))
    assert packing.first_tokens.tolist() == [0, 7, 14]


def test_packing_of_a_mask_with_holes_and_ties_hand_checked():
    """A plain mask may have holes after the first token; rows of equal length keep their input order."""
    mask = torch.tensor([[1, 1, 0, 1], [1, 0, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]])
    packing = TokenPacking.from_attention_mask(mask)
    assert packing.indices.tolist() == [4, 12, 0, 1, 3, 8, 9, 10]  # rows 1, 3 (one token), then 0 (holes kept), 2
    assert packing.buckets == ((1, 2), (3, 2)) and packing.cu_seqlens.tolist() == [0, 1, 2, 5, 8]
    assert packing.first_tokens.tolist() == [0, 4, 8, 12]
    assert TokenPacking.from_attention_mask(torch.ones(2, 3, dtype=torch.long)) is None  # no padding
    assert TokenPacking.from_attention_mask(torch.tensor([[0, 1], [1, 1]])) is None  # left padding


def test_no_kernel_means_no_packing_for_padded_batches(monkeypatch):
    monkeypatch.setattr(unpadding, "packed_attention_kernel", lambda config, device, dtype=None: None)
    batch = tiny_batch()
    assert (
        TokenPacking.for_batch(
            config_with("eager", unpad_tokens=True), batch["input_ids"], batch["attention_mask"], None, None, None
        )
        is None
    )
    # a padding-free batch is still found (its sequences must stay apart), with no kernel: the block-diagonal path
    flat = flattened_batch(batch)
    packing = TokenPacking.for_batch(
        config_with("eager", unpad_tokens=True), flat["input_ids"], None, None, flat["position_ids"], None
    )
    assert packing is not None and packing.padding_free and packing.kernel is None


def test_switch_on_without_a_kernel_is_upstream_bit_for_bit(monkeypatch):
    """Where the device has no packed kernel (CUDA with eager attention), `unpad_tokens=True` runs the padded path:
    the switch off's outputs exactly, padded and padding-free batches alike."""
    torch.manual_seed(0)
    model = FfnBertModel(tiny_config()).eval()
    model.set_attn_implementation("eager")
    batch = tiny_batch()
    flat = flattened_batch(batch)
    with torch.no_grad():
        expected = [model(**inputs, output_hidden_states=True) for inputs in (batch, flat)]
        monkeypatch.setattr(unpadding, "packed_attention_kernel", lambda config, device, dtype=None: None)
        model.config.unpad_tokens = True
        actual = [model(**inputs, output_hidden_states=True) for inputs in (batch, flat)]
    for want, got in zip(expected, actual, strict=True):
        assert torch.equal(want.last_hidden_state, got.last_hidden_state)
        assert torch.equal(want.pooler_output, got.pooler_output)
        assert all(torch.equal(a, b) for a, b in zip(want.hidden_states, got.hidden_states, strict=True))


def attention_per_sequence(query, key, value, cu_seqlens, max_seqlen, dropout, scale):
    """A stand-in for `flash_varlen_attention` on the CPU: SDPA per sequence, (n_real, heads, head_dim) in and out."""
    bounds = cu_seqlens.tolist()
    return torch.cat(
        [
            nn.functional.scaled_dot_product_attention(
                *(x[a:b].transpose(0, 1) for x in (query, key, value)), dropout_p=dropout, scale=scale
            ).transpose(0, 1)
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]
    )


@pytest.fixture
def varlen_calls(monkeypatch) -> list[tuple]:
    """The "varlen" kernel forced, its CUDA call replaced by `attention_per_sequence`; each call's arguments
    (query shape, cu_seqlens, their dtype, max_seqlen, dropout, scale) recorded in the returned list."""
    calls = []

    def stand_in(query, key, value, cu_seqlens, max_seqlen, dropout, scale):
        calls.append((tuple(query.shape), cu_seqlens.tolist(), cu_seqlens.dtype, max_seqlen, dropout, scale))
        return attention_per_sequence(query, key, value, cu_seqlens, max_seqlen, dropout, scale)

    monkeypatch.setattr(unpadding, "flash_varlen_attention", stand_in)
    monkeypatch.setattr(unpadding, "FORCE_PACKED_ATTENTION_KERNEL", "varlen")
    return calls


@pytest.mark.parametrize(
    "variant", [{}, {"ffn_type": "swiglu", "layer_norm_position": "pre"}], ids=["bert", "swiglu-pre"]
)
def test_varlen_call_contract_with_a_stand_in(varlen_calls, variant):
    """The "varlen" kernel's call: all packed rows (n_real, heads, head_dim) at once, `cu_seqlens` int32 in packed
    order, the longest length, no dropout in eval, BERT's scale; outputs within fp32 rounding of the switch off."""
    calls = varlen_calls
    torch.manual_seed(0)
    model = FfnBertModel(tiny_config(**variant)).eval()
    model.set_attn_implementation("sdpa")
    batch = tiny_batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = model(**batch)
        model.config.unpad_tokens = True
        actual = model(**batch)
    heads, head_dim = model.config.num_attention_heads, model.config.hidden_size // model.config.num_attention_heads
    call = ((13, heads, head_dim), [0, 2, 6, 13], torch.int32, 7, 0.0, head_dim**-0.5)
    assert calls == [call] * model.config.num_hidden_layers
    assert_close_to_scale(actual.last_hidden_state[real], expected.last_hidden_state[real], "last_hidden_state")
    assert not actual.last_hidden_state[~real].any()  # pads are zeros
    assert_close_to_scale(actual.pooler_output, expected.pooler_output, "pooler_output")


def test_varlen_path_trains_like_the_switch_off(varlen_calls):
    """Loss and every gradient of a masked-LM step within fp32 rounding of the switch off (no dropout: the draws
    would differ by design), through the stand-in; in training the call carries the attention dropout."""
    torch.manual_seed(0)
    model = FfnBertForMaskedLM(tiny_config(**NO_DROPOUT)).train()
    model.set_attn_implementation("sdpa")
    batch = tiny_batch()
    batch["labels"] = (batch["input_ids"] % 5).masked_fill(batch["attention_mask"] == 0, -100)

    def loss_and_grads():
        model.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    loss_off, grads_off = loss_and_grads()
    model.config.unpad_tokens = True
    loss_on, grads_on = loss_and_grads()
    assert [call[4] for call in varlen_calls] == [0.0] * model.config.num_hidden_layers
    assert_close_to_scale(loss_on, loss_off, "loss")
    assert grads_on.keys() == grads_off.keys() and len(grads_off) > 10
    for name in grads_off:  # floor 1e-6: the key biases' gradients are 0 in exact arithmetic (tests/test_unpadded.py)
        assert_close_to_scale(grads_on[name], grads_off[name], name, floor=1e-6)
    query = "bert.encoder.layer.0.attention.self.query.weight"  # attention's own weights, without the floor
    assert grads_off[query].abs().max() > 1e-5
    assert_close_to_scale(grads_on[query], grads_off[query], query)
    model.config.attention_probs_dropout_prob = 0.1
    model.bert.encoder.layer[0].attention.self.dropout.p = 0.1
    model(**batch)
    assert varlen_calls[-model.config.num_hidden_layers][4] == 0.1  # training draws upstream's attention dropout
