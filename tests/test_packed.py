"""Packed attention (each sequence attends to itself, from the packed (n_real, hidden) layout), padding-free
batches (`DataCollatorWithFlattening`), position ids that do not describe sequences, and `chunk_size_feed_forward`.

Tolerances. Token-wise ops give each row the same bits whatever the other rows (given enough rows: BLAS takes
other kernels for a few). Attention does not: packed, a sequence's softmax and its attention-weighted sum of values
run over its own l keys; padded, over all seq keys with exact zeros at the pads. The same terms, grouped
differently by the kernels' vectorised reductions: fp32 rounding, relative to the values' size, the same size as
upstream BertModel's own differences between batch compositions (docs/unpadded.md, "How close, and why not
bitwise": about 5e-7 of the output scale on the real all-MiniLM-L6-v2). `assert_close_to_scale` (conftest) bounds
max |actual − expected| by `SCALE_TOL` (1e-5) times max |expected| of the tensor; measured here ≤ 2.4e-7 (hidden
states) and ≤ 3e-6 (input gradients, which LayerNorm's backward amplifies). Against a sequence run alone (no
padding), in eval mode, every attention call has the same shape, batch aside, and the linear layers get the same rows
in calls of other sizes: hidden states of these tiny models are compared with `assert_equal_but_row_count` (conftest:
`torch.equal` where BLAS does not choose its kernel by the row count, as on the Intel Xeon of the first sessions;
within 16 float32 epsilons of the largest value where it does, as MKL on AMD EPYC: 1–2 ulp seen). The pooler and
heads run on one row alone and on several rows flattened, where BLAS picks other kernels for a single row: within
`SCALE_TOL`.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn
from transformers import (
    AttentionInterface,
    AttentionMaskInterface,
    AutoTokenizer,
    BertConfig,
    BertModel,
    DataCollatorWithFlattening,
)
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from hf_ffn import FfnBertForMaskedLM, FfnBertForSequenceClassification, FfnBertModel, grouped_attention, unpadding
from hf_ffn.grouped_attention import PackedRows, PaddedBlocks, attention_blocks, attention_groups
from hf_ffn.parity import UPSTREAM_MASKS_PACKED_SEQUENCES
from hf_ffn.training.collators import PaddingFreeCollator
from hf_ffn.unpadding import TokenPacking

from .conftest import TINY, assert_close_to_scale, assert_equal_but_row_count, packed_sequence_mask, tiny_config

NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
VARIANTS = {
    "post-standard": {},
    "pre-swiglu": {"layer_norm_position": "pre", "ffn_type": "swiglu"},
    "post-geglu": {"ffn_type": "geglu"},
    "pre-gelu": {"layer_norm_position": "pre"},
}
LENGTHS = [9, 3, 17, 9, 1, 12]  # two of length 9: a bucket of two sequences


def sequences(lengths=LENGTHS, seed: int = 0) -> list[list[int]]:
    """Token ids of unequal lengths, [CLS]=2 first."""
    g = torch.Generator().manual_seed(seed)
    return [[2] + torch.randint(5, TINY["vocab_size"], (n - 1,), generator=g).tolist() for n in lengths]


def padded(seqs: list[list[int]]) -> dict:
    """A right-padded batch (len(seqs), longest) with its attention mask."""
    width = max(map(len, seqs))
    ids = torch.tensor([s + [0] * (width - len(s)) for s in seqs])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
    return {"input_ids": ids, "attention_mask": mask}


def flattened(seqs: list[list[int]]) -> dict:
    """transformers' padding-free batch: one row, position_ids restarting at 0 (its `labels` dropped)."""
    batch = DataCollatorWithFlattening(return_tensors="pt")([{"input_ids": s} for s in seqs])
    return {"input_ids": batch["input_ids"], "position_ids": batch["position_ids"]}


def model_for(variant: str, attn: str, unpad: bool = False, model_class=FfnBertModel, **overrides) -> nn.Module:
    torch.manual_seed(0)
    model = model_class(tiny_config(**VARIANTS[variant], **NO_DROPOUT, unpad_tokens=unpad, **overrides))
    model.set_attn_implementation(attn)
    return model


# ---------------------------------------------------------------------------------------------------------------
# Packed attention equals padded attention per sequence, with gradients
# ---------------------------------------------------------------------------------------------------------------
# Training mode groups the buckets (`grouped_attention`): call cost 0 keeps one call per length, 300 groups LENGTHS'
# buckets into (length 9, 4 sequences) and (17, 2), and the default (1000) or more pads all six to 17 in one call.
GROUPINGS = {"per-length": 0, "two-groups": 300, "one-group": None}


@pytest.mark.parametrize("grouping", list(GROUPINGS))
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_packed_attention_equals_padded_with_gradient(variant, attn, grouping, monkeypatch):
    if GROUPINGS[grouping] is not None:
        monkeypatch.setattr(grouped_attention, "CALL_COST_PAIRS", GROUPINGS[grouping])
    model = model_for(variant, attn).train()  # train mode, dropout 0: the training path, deterministic
    batch = padded(sequences())
    real = batch["attention_mask"].bool()
    calls = spy_attention_calls(monkeypatch)

    def run(unpad: bool):
        model.config.unpad_tokens = unpad
        model.zero_grad()
        embeds = model.embeddings.word_embeddings(batch["input_ids"]).detach().requires_grad_()
        out = model(inputs_embeds=embeds, attention_mask=batch["attention_mask"])
        (out.last_hidden_state[real].square().sum() + out.pooler_output.sum()).backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        return out.last_hidden_state[real].detach(), out.pooler_output.detach(), embeds.grad[real], grads

    padded_run = run(False)
    calls.clear()
    packed_run = run(True)
    # the grouping chosen ran: per layer one call per length (5), per group (2), or one call for all six sequences
    calls_per_layer = {"per-length": 5, "two-groups": 2, "one-group": 1}[grouping]
    assert len(calls) == calls_per_layer * TINY["num_hidden_layers"]
    assert {mask is None for _, mask in calls} == {grouping == "per-length"}  # groups: padded, with a key mask
    for expected, actual, name in zip(padded_run[:3], packed_run[:3], ["hidden", "pooler", "input grad"], strict=True):
        assert_close_to_scale(actual, expected, name)
    assert padded_run[3].keys() == packed_run[3].keys() and len(packed_run[3]) > 10
    for name, grad in padded_run[3].items():  # key biases: 0 in exact arithmetic (softmax ignores a shift), ~1e-11
        assert_close_to_scale(packed_run[3][name], grad, name, floor=1e-6)


def test_packing_orders_sequences_by_length_and_attention_calls_once_per_length(monkeypatch):
    packing = TokenPacking.from_attention_mask(padded(sequences())["attention_mask"])
    assert packing.buckets == ((1, 1), (3, 1), (9, 2), (12, 1), (17, 1))
    assert packing.cu_seqlens.tolist() == [0, 1, 4, 13, 22, 34, 51] and packing.num_real == sum(LENGTHS)
    calls = []

    def counting(module, query, key, value, attention_mask, **kwargs):
        calls.append((tuple(query.shape), attention_mask))
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("counting_sdpa", counting)
    model = model_for("post-standard", "sdpa", unpad=True).eval()
    model.config._attn_implementation = "counting_sdpa"
    with torch.no_grad():
        model(**padded(sequences()))
    # (sequences, heads, length, head_dim) per bucket and layer, no mask: no pad is ever computed
    per_layer = [(1, 4, 1, 8), (1, 4, 3, 8), (2, 4, 9, 8), (1, 4, 12, 8), (1, 4, 17, 8)]
    assert calls == [(shape, None) for shape in per_layer] * TINY["num_hidden_layers"]


def test_attention_groups_minimise_pairs_plus_calls():
    buckets = ((1, 1), (3, 1), (9, 2), (12, 1), (17, 1))  # (length, count), LENGTHS'

    def cost(ends, call_cost):  # Σ over groups of (sequences · longest length² + call_cost)
        starts = [0] + [end + 1 for end in ends[:-1]]
        return sum(
            sum(c for _, c in buckets[a : b + 1]) * buckets[b][0] ** 2 + call_cost
            for a, b in zip(starts, ends, strict=False)
        )

    for call_cost in (0, 10, 100, 300, 1000, 1e9):
        every_split = [[*ends, 4] for k in range(5) for ends in itertools.combinations(range(4), k)]
        best = min(cost(ends, call_cost) for ends in every_split)
        assert cost(attention_groups(buckets, call_cost), call_cost) == best, call_cost
    assert attention_groups(buckets, 0) == [0, 1, 2, 3, 4] and attention_groups(buckets, 1e9) == [4]
    assert attention_groups(buckets, 300) == [2, 4]  # (9, 4) and (17, 2): 4·81 + 2·289 + 2·300 = 1502 < 6·289 + 300
    assert attention_groups(buckets) == [4]  # the default, 1000: 6·289 + 1000 = 2734 < 4·81 + 2·289 + 2·1000


def spy_attention_calls(monkeypatch) -> list[tuple]:
    """Record every attention call (`packed_self_attention`, like upstream `BertSelfAttention`, takes transformers'
    attention function from `ALL_ATTENTION_FUNCTIONS.get_interface` at each forward): (query shape, mask shape or
    None) per call, in order."""
    calls = []
    registry = unpadding.ALL_ATTENTION_FUNCTIONS
    get_interface = registry.get_interface

    def spying_get_interface(implementation, default):
        attention = get_interface(implementation, default)

        def recorded(module, query, key, value, attention_mask, **kwargs):
            calls.append((tuple(query.shape), None if attention_mask is None else tuple(attention_mask.shape)))
            return attention(module, query, key, value, attention_mask, **kwargs)

        return recorded

    monkeypatch.setattr(registry, "get_interface", spying_get_interface)
    return calls


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_eval_mode_groups_equal_padded(attn, monkeypatch):
    """Eval mode grouped (`EVAL_CALL_COST_PAIRS` 300: LENGTHS' buckets as (9, 4) and (17, 2), each padded with a
    key mask) equals the padded batch within fp32 rounding (`SCALE_TOL`, module docstring), as the default (one
    call per length, no mask) does; gated Pre-LN and standard Post-LN. That the groups ran is observed (the
    attention calls' shapes and masks), not inferred from the outputs' last bits, which on some CPUs are the same
    for both layouts."""
    batch = padded(sequences())
    real = batch["attention_mask"].bool()
    calls = spy_attention_calls(monkeypatch)
    per_length_calls = [
        ((1, 4, 1, 8), None),
        ((1, 4, 3, 8), None),
        ((2, 4, 9, 8), None),
        ((1, 4, 12, 8), None),
        ((1, 4, 17, 8), None),
    ]
    grouped_calls = [((4, 4, 9, 8), (4, 1, 9, 9)), ((2, 4, 17, 8), (2, 1, 17, 17))]  # (count, 1, length, length)
    for variant in ("post-standard", "pre-swiglu"):
        model = model_for(variant, attn).eval()
        with torch.no_grad():
            expected = model(**batch)
            assert calls == [((6, 4, 17, 8), (6, 1, 17, 17))] * TINY["num_hidden_layers"]  # upstream's padded path
            calls.clear()
            model.config.unpad_tokens = True
            per_length = model(**batch)
            assert calls == per_length_calls * TINY["num_hidden_layers"]
            calls.clear()
            monkeypatch.setattr(grouped_attention, "EVAL_CALL_COST_PAIRS", 300)
            grouped = model(**batch)
            assert calls == grouped_calls * TINY["num_hidden_layers"]  # the groups did run
            calls.clear()
            monkeypatch.setattr(grouped_attention, "EVAL_CALL_COST_PAIRS", 0)
        for actual in (per_length, grouped):
            assert_close_to_scale(actual.last_hidden_state[real], expected.last_hidden_state[real], "hidden")
            assert_close_to_scale(actual.pooler_output, expected.pooler_output, "pooler")


def test_padded_blocks_and_packed_rows_are_each_others_gradient():
    packing = TokenPacking.from_attention_mask(padded(sequences())["attention_mask"])
    groups = attention_blocks(packing.buckets, packing.cu_seqlens, [2, 4])
    assert [(g.length, g.count, g.start, g.stop) for g in groups] == [(9, 4, 0, 22), (17, 2, 22, 51)]
    assert groups[0].key_mask.sum(1).tolist() == [1, 3, 9, 9] and groups[1].key_mask.sum(1).tolist() == [12, 17]
    rows = torch.randn(packing.num_real, 2, 3, dtype=torch.float64, requires_grad=True)
    blocks = PaddedBlocks.apply(rows, groups)  # (count·length, 2, 3) each, zeros at pads
    assert [tuple(b.shape) for b in blocks] == [(36, 2, 3), (34, 2, 3)]
    assert torch.equal(blocks[0].view(4, 9, 6)[1, :3], rows[1:4].detach().view(3, 6))
    assert not blocks[0].view(4, 9, 6)[1, 3:].any() and not blocks[1].view(2, 17, 6)[0, 12:].any()
    assert torch.equal(PackedRows.apply(groups, *blocks), rows)
    assert torch.autograd.gradcheck(lambda x: PaddedBlocks.apply(x, groups), (rows,))
    assert torch.autograd.gradcheck(
        lambda *b: PackedRows.apply(groups, *b), tuple(b.detach().requires_grad_() for b in blocks)
    )


@pytest.mark.parametrize("mode", ["training", "eval"])
@pytest.mark.parametrize("registered_mask", [True, False], ids=["mask-function", "no-mask-function"])
def test_attention_called_once_per_group_with_a_key_mask(registered_mask, mode, monkeypatch):
    """Training mode groups with `CALL_COST_PAIRS`, eval mode with `EVAL_CALL_COST_PAIRS` (0 by default: one call
    per length, `test_packing_orders_sequences_by_length_and_attention_calls_once_per_length`); the other mode's
    cost is set to 0 here, so the groups show that each mode reads its own."""
    monkeypatch.setattr(grouped_attention, "CALL_COST_PAIRS", 300 if mode == "training" else 0)
    monkeypatch.setattr(grouped_attention, "EVAL_CALL_COST_PAIRS", 300 if mode == "eval" else 0)
    calls = []

    def counting(module, query, key, value, attention_mask, **kwargs):
        calls.append((tuple(query.shape), None if attention_mask is None else tuple(attention_mask.shape)))
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    name = "grouping_sdpa" if registered_mask else "grouping_custom"
    AttentionInterface.register(name, counting)
    if registered_mask:
        AttentionMaskInterface.register(name, AttentionMaskInterface._global_mapping["sdpa"])
    model = model_for("post-standard", "sdpa", unpad=True).train(mode == "training")
    model.config._attn_implementation = name
    with torch.set_grad_enabled(mode == "training"):
        model(**padded(sequences()))
    if registered_mask:  # (9, 4) and (17, 2), each with its (count, 1, length, length) mask
        per_layer = [((4, 4, 9, 8), (4, 1, 9, 9)), ((2, 4, 17, 8), (2, 1, 17, 17))]
    else:  # a function without mask creation gets no mask: one call per length
        per_layer = [
            ((1, 4, 1, 8), None),
            ((1, 4, 3, 8), None),
            ((2, 4, 9, 8), None),
            ((1, 4, 12, 8), None),
            ((1, 4, 17, 8), None),
        ]
    assert calls == per_layer * TINY["num_hidden_layers"]


def test_flash_attention_gets_the_sequence_boundaries():
    """Flash attention (a name containing "flash") gets one call on all packed rows with `cu_seq_lens_q/k` and
    `max_length_q/k`, as transformers' variable-length kernel takes them. A stand-in on the CPU computes each
    sequence from those boundaries with sdpa, so the outputs show whether the boundaries are right."""
    seen = []

    def flash_stand_in(
        module, query, key, value, attention_mask, cu_seq_lens_q, cu_seq_lens_k, max_length_q, max_length_k, **kwargs
    ):
        seen.append((query.shape[0], cu_seq_lens_q.tolist(), max_length_q, attention_mask))
        assert torch.equal(cu_seq_lens_q, cu_seq_lens_k) and max_length_q == max_length_k
        bounds = cu_seq_lens_q.tolist()
        parts = [
            sdpa_attention_forward(module, *(x[:, :, a:b] for x in (query, key, value)), None, **kwargs)[0]
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]
        return torch.cat(parts, dim=1), None

    AttentionInterface.register("flash_stand_in", flash_stand_in)
    model = model_for("pre-swiglu", "sdpa").eval()
    batch = flattened(sequences())
    with torch.no_grad():
        expected = model(**batch).last_hidden_state
        model.config._attn_implementation = "flash_stand_in"
        actual = model(**batch).last_hidden_state
    assert seen[0] == (1, [0, 1, 4, 13, 22, 34, 51], 17, None) and len(seen) == TINY["num_hidden_layers"]
    assert_close_to_scale(actual, expected, "hidden")


# ---------------------------------------------------------------------------------------------------------------
# Padding-free batches: each sequence exactly as if alone, switch on or off, every head
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("unpad", [False, True], ids=["switch-off", "switch-on"])
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("variant", ["post-standard", "pre-swiglu"])
def test_flattened_batch_equals_each_sequence_alone(variant, attn, unpad, monkeypatch):
    """Switch on: the packed path, each sequence's attention call of its own shape (`assert_equal_but_row_count`).
    Switch off: upstream's padded path with the block-diagonal mask (one call per layer over the whole row), as
    upstream BertModel from transformers 5.25 (tests/test_parity.py): the softmax runs over the row's keys with the
    other sequences' masked to zero, so fp32 rounding (`assert_close_to_scale`)."""
    model = model_for(variant, attn, unpad).eval()
    seqs = sequences()
    calls = spy_attention_calls(monkeypatch)
    with torch.no_grad():
        out = model(**flattened(seqs))
        row_calls = calls[:]
        alone = [model(input_ids=torch.tensor([s])) for s in seqs]
    n = sum(LENGTHS)
    if unpad:  # one call per length, no mask
        assert len(row_calls) == 5 * TINY["num_hidden_layers"] and {mask for _, mask in row_calls} == {None}
    else:
        assert row_calls == [((1, 4, n, 8), (1, 1, n, n))] * TINY["num_hidden_layers"]
    assert out.last_hidden_state.shape == (1, n, TINY["hidden_size"])
    assert out.pooler_output.shape == (len(seqs), TINY["hidden_size"])  # one per sequence
    rows = out.last_hidden_state[0].split(LENGTHS)
    for i, single in enumerate(alone):
        if LENGTHS[i] > 1 and unpad:
            assert_equal_but_row_count(rows[i], single.last_hidden_state[0], f"sequence {i}")
        else:  # masked keys of the row (switch off); one token alone: BLAS picks another kernel for a single row
            assert_close_to_scale(rows[i], single.last_hidden_state[0], f"hidden {i}")
        assert_close_to_scale(out.pooler_output[i], single.pooler_output[0], f"pooler {i}")


def test_flattened_batch_with_output_attentions_is_block_diagonal():
    # output_attentions: the padded path with a block-diagonal mask; within SCALE_TOL of each sequence alone
    model = model_for("post-standard", "eager").eval()
    seqs = sequences()
    with torch.no_grad():
        out = model(**flattened(seqs), output_attentions=True, output_hidden_states=True)
        alone = [model(input_ids=torch.tensor([s]), output_attentions=True) for s in seqs]
    bounds = torch.tensor([0, *LENGTHS]).cumsum(0).tolist()
    for layer, maps in enumerate(out.attentions):  # (1, heads, n, n)
        for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            assert_close_to_scale(maps[0, :, a:b, a:b], alone[i].attentions[layer][0], "map")
            assert (maps[0, :, a:b, :a] == 0).all() and (maps[0, :, a:b, b:] == 0).all()  # no other sequence
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        assert_close_to_scale(out.last_hidden_state[0, a:b], alone[i].last_hidden_state[0], "hidden")
        assert_close_to_scale(out.pooler_output[i], alone[i].pooler_output[0], "pooler")
    assert len(out.hidden_states) == TINY["num_hidden_layers"] + 1


def test_flattened_batch_heads_and_gradients_per_sequence():
    """Sequence classification: logits and loss per sequence (labels (num_sequences,)); masked LM: token logits.
    Gradients of the flattened batch equal those of the same sequences padded (switch on), within SCALE_TOL."""
    seqs = sequences()
    labels = torch.tensor([0, 1, 2, 1, 0, 2])
    model = model_for("pre-swiglu", "sdpa", model_class=FfnBertForSequenceClassification, num_labels=3).train()

    def loss_and_grads(batch):
        model.zero_grad()
        out = model(**batch, labels=labels)
        out.loss.backward()
        return out, {name: p.grad.clone() for name, p in model.named_parameters()}

    flat, flat_grads = loss_and_grads(flattened(seqs))
    model.config.unpad_tokens = True
    pad, pad_grads = loss_and_grads(padded(seqs))
    assert flat.logits.shape == (len(seqs), 3)
    assert_close_to_scale(flat.logits, pad.logits, "logits")
    assert_close_to_scale(flat.loss, pad.loss, "loss")
    for name, grad in pad_grads.items():
        assert_close_to_scale(flat_grads[name], grad, name, floor=1e-6)
    mlm = model_for("post-geglu", "sdpa", model_class=FfnBertForMaskedLM).eval()
    with torch.no_grad():
        logits = mlm(**flattened(seqs)).logits[0].split(LENGTHS)
        for row, s in zip(logits, seqs, strict=True):
            assert_close_to_scale(row, mlm(input_ids=torch.tensor([s])).logits[0], "logits")


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_time_flies_like_an_arrow(bundled_checkpoint, attn):
    """The issue's example, "time flies like an arrow" flattened with "fruit flies like a banana". FfnBertModel,
    switch on or off, gives the sentence's values as if alone. Upstream BertModel depends on the release
    (`UPSTREAM_MASKS_PACKED_SEQUENCES`): before transformers 5.25 it lets the two sentences attend to each other (a
    negative control, about 1.0 off); from 5.25 it builds the block-diagonal mask from `position_ids` and FfnBert's
    default path gives its outputs bit for bit. Given an all-ones `attention_mask` beside the restarting
    `position_ids` (as `PaddingFreeCollator` passes a tokenizer's mask on), upstream builds no such mask on any
    release and mixes them; FfnBert reads the batch the same way with or without it."""
    tokenizer = AutoTokenizer.from_pretrained(bundled_checkpoint)
    first, second = (tokenizer(text)["input_ids"] for text in ("time flies like an arrow", "fruit flies like a banana"))
    batch = flattened([first, second])
    with_mask = {**batch, "attention_mask": torch.ones_like(batch["input_ids"])}
    alone = {"input_ids": torch.tensor([first])}
    upstream = BertModel.from_pretrained(bundled_checkpoint, attn_implementation=attn).eval()
    with torch.no_grad():
        flat = upstream(**batch).last_hidden_state
        reference = upstream(**alone).last_hidden_state[0]
        mixed = upstream(**with_mask).last_hidden_state[0, : len(first)]
        assert (mixed - reference).abs().max() > 0.5  # an all-ones mask: upstream mixes, every release
        if not UPSTREAM_MASKS_PACKED_SEQUENCES:  # transformers < 5.25: upstream mixes (negative control)
            assert (flat[0, : len(first)] - reference).abs().max() > 0.5
        for unpad in (False, True):
            ours = FfnBertModel.from_pretrained(bundled_checkpoint, attn_implementation=attn, unpad_tokens=unpad)
            out = ours.eval()(**batch).last_hidden_state
            assert torch.equal(ours(**alone).last_hidden_state[0], reference)  # alone: upstream, bit for bit
            assert_close_to_scale(out[0, : len(first)], reference, "time flies")
            assert torch.equal(ours(**with_mask).last_hidden_state, out)  # the all-ones mask changes nothing
            if UPSTREAM_MASKS_PACKED_SEQUENCES and not unpad:  # transformers >= 5.25: upstream, bit for bit
                assert torch.equal(out, flat)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_flattened_batch_switch_on_within_rounding_of_upstream(bundled_checkpoint, attn):
    """Switch on, a padding-free batch runs the packed path: each sequence's attention over its own keys, where
    upstream (transformers >= 5.25, or any release given the mask 5.25 builds: `packed_sequence_mask`) runs one
    call over the whole row with the other sequences' keys masked to zero. The same terms summed in another
    grouping: fp32 rounding, within `SCALE_TOL` of each tensor's largest value, on every hidden state of the real
    checkpoint (the switch off is upstream bit for bit there: tests/test_parity.py)."""
    tokenizer = AutoTokenizer.from_pretrained(bundled_checkpoint)
    texts = ["time flies like an arrow", "fruit flies like a banana", "a third and rather longer sentence", "x"]
    batch = flattened([tokenizer(text)["input_ids"] for text in texts])
    upstream = BertModel.from_pretrained(bundled_checkpoint, attn_implementation=attn).eval()
    ours = FfnBertModel.from_pretrained(bundled_checkpoint, attn_implementation=attn, unpad_tokens=True).eval()
    mask = None if UPSTREAM_MASKS_PACKED_SEQUENCES else packed_sequence_mask(upstream, batch)
    with torch.no_grad():
        expected = upstream(**batch, attention_mask=mask, output_hidden_states=True).hidden_states
        actual = ours(**batch, output_hidden_states=True).hidden_states
    assert len(actual) == len(expected) == 7
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        assert_close_to_scale(a, e, f"hidden_states[{i}]")
    assert not all(torch.equal(a, e) for a, e in zip(actual, expected, strict=True))  # another path, not a copy


# ---------------------------------------------------------------------------------------------------------------
# Position ids that do not describe separable sequences
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "position_ids, mask, message",
    [
        ([[0, 1, 2, 5, 6]], None, r"row 0, column 3 has position 5 after 2 "),  # jumps, not restarting at 0
        ([[0, 1, 2, 1, 2]], None, r"row 0, column 3 has position 1 after 2 "),  # falls within a sequence
        ([[3, 4, 0, 1, 2]], None, r"row 0, column 0 has position 3 where"),  # the first sequence not at 0
        ([[0, 1, 2, 0, 1]], [[1, 1, 1, 1, 0]], r"attention_mask \(shape \(1, 5\)\) is not all ones"),
    ],
    ids=["jump", "falls", "first-not-0", "with-padding"],
)
def test_mixed_up_position_ids_are_rejected(position_ids, mask, message):
    model = model_for("post-standard", "sdpa").eval()
    position_ids = torch.tensor(position_ids)
    batch = {"input_ids": torch.randint(5, 99, position_ids.shape), "position_ids": position_ids}
    if mask is not None:
        batch["attention_mask"] = torch.tensor(mask)
    with pytest.raises(ValueError, match=message):
        model(**batch)


FLATTENED_POSITIONS = [[0, 1, 2, 0, 1, 2, 3, 4]]  # two sequences in one row
SHAPE = r"position_ids must have shape \(batch, seq\) = \(1, 8\) or \(1, 8\) .*; got shape "
DTYPE = r"position_ids must be integer positions \(torch.int64 or torch.int32\), got dtype torch.float32"


@pytest.mark.parametrize(
    "position_ids, message",
    [
        (torch.tensor(FLATTENED_POSITIONS)[0], SHAPE + r"\(8,\)\. Add the batch dimension: position_ids\[None\]"),
        (torch.tensor(FLATTENED_POSITIONS).float(), DTYPE),
        (torch.tensor(FLATTENED_POSITIONS)[0].float(), DTYPE),
        (torch.tensor(FLATTENED_POSITIONS)[None], SHAPE + r"\(1, 1, 8\)\.$"),
        (torch.tensor(FLATTENED_POSITIONS)[:, :6], SHAPE + r"\(1, 6\)\.$"),
        (torch.tensor(FLATTENED_POSITIONS).expand(3, 8), SHAPE + r"\(3, 8\)\.$"),
    ],
    ids=["1-D", "float", "float-1-D", "3-D", "short", "more-rows"],
)
@pytest.mark.parametrize("unpad", [False, True], ids=["switch-off", "switch-on"])
def test_position_ids_of_wrong_dtype_or_shape_are_rejected(position_ids, message, unpad):
    model = model_for("post-standard", "sdpa", unpad=unpad).eval()
    with pytest.raises(ValueError, match=message):
        model(input_ids=torch.randint(5, 99, (1, 8)), position_ids=position_ids)


def test_int32_position_ids_are_accepted():
    model = model_for("post-standard", "sdpa").eval()
    batch = {"input_ids": torch.randint(5, 99, (1, 8)), "position_ids": torch.tensor(FLATTENED_POSITIONS)}
    with torch.no_grad():
        expected = model(**batch).last_hidden_state
        actual = model(**{**batch, "position_ids": batch["position_ids"].int()}).last_hidden_state
    assert torch.equal(actual, expected)


def test_rows_of_packed_sequences():
    """Several rows, each a padding-free row (one with two sequences, one with one): three sequences, each as if
    alone."""
    model = model_for("post-standard", "sdpa").eval()
    ids = torch.randint(5, 99, (2, 4))
    with torch.no_grad():
        out = model(input_ids=ids, position_ids=torch.tensor([[0, 1, 0, 1], [0, 1, 2, 3]]))
        alone = [model(input_ids=x[None]) for x in (ids[0, :2], ids[0, 2:], ids[1])]
    assert_equal_but_row_count(out.last_hidden_state[0, 2:], alone[1].last_hidden_state[0], "row 0, sequence 2")
    assert_close_to_scale(out.pooler_output, torch.cat([a.pooler_output for a in alone]), "pooler")


def test_one_sequence_per_row_is_upstream_bit_for_bit():
    """Position ids counting up by 1 (from any start) are not a padding-free batch: the padded path, which with
    the switch off is upstream `BertModel` bit for bit, padding mask or not."""
    torch.manual_seed(0)
    upstream = BertModel(BertConfig(**TINY)).eval()
    ours = FfnBertModel(tiny_config()).eval()
    ours.load_state_dict(upstream.state_dict())
    batch = padded(sequences())
    for positions in (torch.arange(17)[None], torch.arange(3, 20).expand(6, 17)):
        assert TokenPacking.from_position_ids(positions, batch["attention_mask"], 6, 17) is None
        with torch.no_grad():
            expected, actual = upstream(**batch, position_ids=positions), ours(**batch, position_ids=positions)
        assert torch.equal(expected.last_hidden_state, actual.last_hidden_state)
        assert torch.equal(expected.pooler_output, actual.pooler_output)


# ---------------------------------------------------------------------------------------------------------------
# chunk_size_feed_forward: honoured as BertLayer does
# ---------------------------------------------------------------------------------------------------------------
def test_chunk_size_feed_forward_as_bert_layer():
    torch.manual_seed(0)
    upstream = BertModel(BertConfig(**TINY, chunk_size_feed_forward=4)).eval()
    ours = FfnBertModel(tiny_config(chunk_size_feed_forward=4)).eval()
    ours.load_state_dict(upstream.state_dict())
    batch = padded(sequences([16, 9, 5]))  # seq 16: four chunks
    calls = []
    ours.encoder.layer[0].mlp.register_forward_hook(lambda module, args, out: calls.append(args[0].shape))
    with torch.no_grad():
        expected = upstream(**batch).last_hidden_state
        assert torch.equal(ours(**batch).last_hidden_state, expected)  # upstream, chunked the same way
        assert calls == [(3, 4, 32)] * 4
        ours.config.chunk_size_feed_forward = 0  # the layers keep the value they were built with
        unchunked = FfnBertModel(tiny_config()).eval()
        unchunked.load_state_dict(upstream.state_dict())
        # chunks give the same values: the same ops on the same rows, in calls of 12 rows instead of 48
        assert_equal_but_row_count(unchunked(**batch).last_hidden_state, expected, "unchunked")
        calls.clear()
        ours.config.unpad_tokens = True  # packed: chunks of 4 real tokens, the last one shorter (30 = 7·4 + 2)
        packed = ours(**batch).last_hidden_state
        unchunked.config.unpad_tokens = True
        assert_equal_but_row_count(packed, unchunked(**batch).last_hidden_state, "packed chunks")  # 4 rows vs 30
        assert calls == [(4, 32)] * 7 + [(2, 32)]
        with pytest.raises(ValueError, match="has to be a multiple of the chunk size 4"):
            ours.config.unpad_tokens = False
            ours(**padded(sequences([15, 9])))  # as upstream BertLayer: seq 15 is not a multiple of 4


# ---------------------------------------------------------------------------------------------------------------
# The collator of the scripts' --padding_free
# ---------------------------------------------------------------------------------------------------------------
def test_padding_free_collator_keeps_token_columns_and_sequence_labels():
    features = [
        {"input_ids": [2, 7, 8], "token_type_ids": [0, 0, 1], "attention_mask": [1, 1, 1], "labels": 1},
        {"input_ids": [2, 9], "token_type_ids": [0, 0], "attention_mask": [1, 1], "labels": 0},
    ]
    batch = PaddingFreeCollator()(features)
    assert batch["input_ids"].tolist() == [[2, 7, 8, 2, 9]] and batch["position_ids"].tolist() == [[0, 1, 2, 0, 1]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 1, 0, 0]] and batch["attention_mask"].tolist() == [[1] * 5]
    assert batch["labels"].tolist() == [1, 0]  # one per sequence, as the pooler's outputs
    model = model_for("post-standard", "sdpa", model_class=FfnBertForSequenceClassification, num_labels=2).eval()
    with torch.no_grad():
        out = model(**batch)
    assert out.logits.shape == (2, 2) and out.loss.isfinite()
    masked = PaddingFreeCollator(
        then=lambda rows: {
            "input_ids": torch.tensor([rows[0]["input_ids"]]),
            "labels": torch.tensor([rows[0]["input_ids"]]),
        }
    )
    assert masked([{"input_ids": [2, 7]}, {"input_ids": [2]}])["labels"].tolist() == [[2, 7, 2]]  # token labels
