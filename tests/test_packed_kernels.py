"""Which kernel runs packed attention on which device (`hf_ffn.unpadding.packed_attention_kernel`), and the CUDA
path's tensor arrangement ("jagged": torch's SDPA over nested jagged tensors) run on CPU tensors.

CI has no GPU. What can be checked without one is checked here: the per-device choice (a `torch.device("cuda")`
object needs no GPU), the sequence boundaries and offsets the jagged views are cut at, and the jagged path itself,
forced on the CPU (`FORCE_PACKED_ATTENTION_KERNEL`), where torch runs the same nested-tensor SDPA through its math
kernel: outputs and gradients against the switch off, within fp32 rounding (`assert_close_to_scale`, as every packed
path: attention sums a sequence's own keys, not its padded row's). On a GPU the flash / memory-efficient kernels run
instead; `python -m studies.benchmark.gpu` checks that path's values there (parity rows of `hf-ffn parity --device
cuda`).
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
from hf_ffn.unpadding import TokenPacking, packed_attention_kernel

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
    "device, attn, kernel",
    [
        ("cpu", "eager", "buckets"),
        ("cpu", "sdpa", "buckets"),
        ("cpu", "flex_attention", "buckets"),
        ("cuda", "sdpa", "varlen"),
        ("cuda", "eager", None),  # no variable-length eager kernel: the padded path, never slower than the switch off
        ("cuda", "flex_attention", None),
        ("cuda", "flash_attention_2", "flash"),
        ("mps", "sdpa", None),
    ],
)
def test_kernel_is_chosen_per_device(device, attn, kernel):
    assert packed_attention_kernel(config_with(attn), torch.device(device)) == kernel


def test_forced_kernel_wins_and_a_bad_one_names_the_setting(monkeypatch):
    monkeypatch.setattr(unpadding, "FORCE_PACKED_ATTENTION_KERNEL", "jagged")
    assert packed_attention_kernel(config_with("eager"), torch.device("cpu")) == "jagged"
    monkeypatch.setattr(unpadding, "FORCE_PACKED_ATTENTION_KERNEL", "nested")
    with pytest.raises(ValueError, match="must be one of buckets, varlen, jagged, flash or None, got 'nested'"):
        packed_attention_kernel(config_with("sdpa"), torch.device("cpu"))


def test_the_choice_is_logged_once_per_device_and_implementation(monkeypatch, caplog):
    monkeypatch.setattr(unpadding, "_announced", set())
    with caplog.at_level(logging.INFO, logger="hf_ffn.unpadding"):
        for _ in range(3):
            packed_attention_kernel(config_with("sdpa"), torch.device("cuda"))
            packed_attention_kernel(config_with("eager"), torch.device("cuda"))
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "unpad_tokens: packed attention by 'varlen' (cuda, attn_implementation='sdpa')",
        "unpad_tokens: no variable-length kernel for cuda, attn_implementation='eager'; padded batches run the "
        "padded path",
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
    rows = torch.arange(13 * 2 * 3, dtype=torch.float32).view(13, 2, 3)  # (n_real, heads, head_dim)
    nested = packing.jagged(rows)  # (sequences, heads, j, head_dim)
    assert nested.is_nested and nested.shape[0] == 3 and nested.shape[1] == 2
    sequences = nested.transpose(1, 2).unbind()
    assert [s.shape[0] for s in sequences] == [2, 4, 7]
    assert torch.equal(torch.cat(sequences), rows)  # a view split at cu_seqlens, nothing reordered
    assert packing.mask_cache["jagged_offsets"].tolist() == [0, 2, 6, 13]


def test_no_kernel_means_no_packing_for_padded_batches(monkeypatch):
    monkeypatch.setattr(unpadding, "packed_attention_kernel", lambda config, device: None)
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
        monkeypatch.setattr(unpadding, "packed_attention_kernel", lambda config, device: None)
        model.config.unpad_tokens = True
        actual = [model(**inputs, output_hidden_states=True) for inputs in (batch, flat)]
    for want, got in zip(expected, actual, strict=True):
        assert torch.equal(want.last_hidden_state, got.last_hidden_state)
        assert torch.equal(want.pooler_output, got.pooler_output)
        assert all(torch.equal(a, b) for a, b in zip(want.hidden_states, got.hidden_states, strict=True))


@pytest.mark.parametrize(
    "variant",
    [{}, {"ffn_type": "swiglu", "layer_norm_position": "pre"}],
    ids=["bert", "swiglu-pre"],
)
@pytest.mark.parametrize("inputs", ["padded", "padding-free"])
def test_jagged_path_equals_switch_off(monkeypatch, variant, inputs):
    torch.manual_seed(0)
    model = FfnBertModel(tiny_config(**variant)).eval()
    model.set_attn_implementation("sdpa")
    batch = tiny_batch()
    real = batch["attention_mask"].bool()
    feed = batch if inputs == "padded" else flattened_batch(batch)
    with torch.no_grad():
        expected = model(**feed)
        model.config.unpad_tokens = True
        monkeypatch.setattr(unpadding, "FORCE_PACKED_ATTENTION_KERNEL", "jagged")
        actual = model(**feed)
    if inputs == "padded":
        assert_close_to_scale(actual.last_hidden_state[real], expected.last_hidden_state[real], "last_hidden_state")
        assert not actual.last_hidden_state[~real].any()  # pads are zeros
    else:
        assert_close_to_scale(actual.last_hidden_state, expected.last_hidden_state, "last_hidden_state")
    assert_close_to_scale(actual.pooler_output, expected.pooler_output, "pooler_output")


def test_jagged_path_trains_like_the_switch_off(monkeypatch):
    """Loss and every gradient of a masked-LM step within fp32 rounding of the switch off (no dropout: the draws
    would differ by design); the jagged views carry the gradient back to the packed rows."""
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
    monkeypatch.setattr(unpadding, "FORCE_PACKED_ATTENTION_KERNEL", "jagged")
    loss_on, grads_on = loss_and_grads()
    assert_close_to_scale(loss_on, loss_off, "loss")
    assert grads_on.keys() == grads_off.keys() and len(grads_off) > 10
    for name in grads_off:  # floor 1e-6: the key biases' gradients are 0 in exact arithmetic (tests/test_unpadded.py)
        assert_close_to_scale(grads_on[name], grads_off[name], name, floor=1e-6)
    # attention's own weights, without the floor: the gradient flowed back through the jagged views
    query = "bert.encoder.layer.0.attention.self.query.weight"
    assert grads_off[query].abs().max() > 1e-5
    assert_close_to_scale(grads_on[query], grads_off[query], query)


def test_varlen_call_contract_with_a_stand_in(monkeypatch):
    """The "varlen" kernel's call of torch's `varlen_attn` (CUDA only: a stand-in here, the same function per
    sequence by SDPA): all packed rows (n_real, heads, head_dim) at once, `cu_seqlens` int32 in packed order, the
    longest length as both maxima; outputs within fp32 rounding of the switch off."""
    calls = []

    def stand_in(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k):
        calls.append((query.shape, cu_seq_q.tolist(), cu_seq_k.dtype, max_q, max_k))
        bounds = cu_seq_q.tolist()
        return torch.cat(
            [
                nn.functional.scaled_dot_product_attention(
                    *(x[a:b].transpose(0, 1) for x in (query, key, value))
                ).transpose(0, 1)
                for a, b in zip(bounds[:-1], bounds[1:], strict=True)
            ]
        )

    monkeypatch.setattr(unpadding, "varlen_attn", stand_in)
    monkeypatch.setattr(unpadding, "varlen_applies", lambda query, dropout: True)
    monkeypatch.setattr(unpadding, "FORCE_PACKED_ATTENTION_KERNEL", "varlen")
    torch.manual_seed(0)
    model = FfnBertModel(tiny_config()).eval()
    model.set_attn_implementation("sdpa")
    batch = tiny_batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = model(**batch).last_hidden_state
        model.config.unpad_tokens = True
        actual = model(**batch).last_hidden_state
    heads, head_dim = model.config.num_attention_heads, model.config.hidden_size // model.config.num_attention_heads
    assert calls == [((13, heads, head_dim), [0, 2, 6, 13], torch.int32, 7, 7)] * model.config.num_hidden_layers
    assert_close_to_scale(actual[real], expected[real], "last_hidden_state")


@pytest.mark.parametrize(
    "dtype, dropout, applies",
    [(torch.bfloat16, 0.0, False), (torch.float32, 0.0, False), (torch.bfloat16, 0.1, False)],
)
def test_varlen_does_not_apply_on_the_cpu_in_fp32_or_with_dropout(dtype, dropout, applies):
    # on a CPU tensor never (CUDA only); the fp32 and dropout cases would not apply on CUDA either
    assert unpadding.varlen_applies(torch.zeros(2, 2, 8, dtype=dtype), dropout) is applies
