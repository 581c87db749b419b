"""Attention calls for groups of packed sequences: consecutive length buckets padded to a common length with a key
mask, so that a batch of many lengths needs a few attention calls instead of one per length.

`attention_groups` chooses the groups, `attention_blocks` describes each (`AttentionGroup`), `PaddedBlocks` and
`PackedRows` move rows between the packed layout (n_real, ...) and the padded blocks (count·length, ...). Used by
`hf_ffn.unpadding.packed_self_attention`; imports only torch, so it ships beside a saved model (`trust_remote_code`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

# What one more attention call costs, in query-key pairs per head of padded work: merging buckets into one masked
# call pays off when it pads fewer pairs than this. Measured on the CPU in training steps and in eval mode, where 0
# (one call per length) was as fast (docs/unpadded.md, "Why groups in training").
CALL_COST_PAIRS = 1000
EVAL_CALL_COST_PAIRS = 0


def call_cost_pairs(training: bool) -> float:
    """`CALL_COST_PAIRS` in training mode, else `EVAL_CALL_COST_PAIRS` (read when called: tests may set either)."""
    return CALL_COST_PAIRS if training else EVAL_CALL_COST_PAIRS


def attention_groups(buckets: tuple[tuple[int, int], ...], call_cost: float | None = None) -> list[int]:
    """Split `buckets` ((length, count), lengths ascending) into consecutive groups, each run as one attention call
    padded to its longest length: the split that minimises Σ_groups (count · length² + `call_cost`) (dynamic
    programming, O(m²) in the m buckets). Returns the index of each group's last bucket, ascending. `call_cost` 0
    gives one group per bucket; `None`: `CALL_COST_PAIRS`."""
    call_cost = CALL_COST_PAIRS if call_cost is None else call_cost
    best, last_start = [0.0], []  # best[j]: cost of buckets[:j]; last_start[j - 1]: where its last group starts
    sequences = [0]
    for _, count in buckets:
        sequences.append(sequences[-1] + count)
    for j, (length, _) in enumerate(buckets, start=1):
        cost, start = min((best[i] + (sequences[j] - sequences[i]) * length * length, i) for i in range(j))
        best.append(cost + call_cost)
        last_start.append(start)
    ends, j = [], len(buckets)
    while j:
        ends.append(j - 1)
        j = last_start[j - 1]
    return ends[::-1]


class AttentionGroup(NamedTuple):
    """One attention call of `packed_self_attention`: `count` sequences padded to `length` (the longest of them),
    read from the packed rows `start:stop` (their tokens, consecutive). With several lengths, `key_mask`
    (count, length) bool is True at real tokens, `real` (stop − start,) int64 is the position of each of the
    group's rows in its (count·length) block, `source` (count·length,) int64 the row each position copies (0 at
    pads) and `pads` the pad positions (int64); all four are `None` for a group of one length (no pads)."""

    length: int
    count: int
    start: int
    stop: int
    key_mask: torch.Tensor | None = None
    real: torch.Tensor | None = None
    source: torch.Tensor | None = None
    pads: torch.Tensor | None = None


def attention_blocks(
    buckets: tuple[tuple[int, int], ...], cu_seqlens: torch.Tensor, ends: list[int]
) -> tuple[AttentionGroup, ...]:
    """The `AttentionGroup`s of `buckets` ((length, count), in packed order) ending at the bucket indices `ends`
    (`attention_groups`); `cu_seqlens` (num_sequences + 1,) the packed sequences' boundaries."""
    groups, first_bucket, first_sequence = [], 0, 0
    for end in ends:
        length, count = buckets[end][0], sum(c for _, c in buckets[first_bucket : end + 1])
        bounds = cu_seqlens[first_sequence : first_sequence + count + 1].long()
        start, stop = bounds[0].item(), bounds[-1].item()
        group = AttentionGroup(length, count, start, stop)
        if end > first_bucket:  # several lengths: padded to the longest, masked
            key_mask = torch.arange(length, device=bounds.device) < bounds.diff()[:, None]  # (count, length)
            real = key_mask.flatten().nonzero().squeeze(1)
            source = torch.zeros(count * length, dtype=torch.long, device=real.device)
            source[real] = torch.arange(stop - start, device=real.device)
            group = group._replace(
                key_mask=key_mask, real=real, source=source, pads=(~key_mask).flatten().nonzero().squeeze(1)
            )
        groups.append(group)
        first_bucket, first_sequence = end + 1, first_sequence + count
    return tuple(groups)


def _blocks(rows: torch.Tensor, groups: tuple[AttentionGroup, ...]) -> tuple[torch.Tensor, ...]:
    """(n_real, *rest) → per group its (count·length, *rest) block, zeros at pads (a copy)."""
    return tuple(
        rows[g.start : g.stop].clone()
        if g.real is None
        else rows[g.start : g.stop].index_select(0, g.source).index_fill_(0, g.pads, 0)
        for g in groups
    )


def _rows(blocks: tuple[torch.Tensor, ...], groups: tuple[AttentionGroup, ...]) -> torch.Tensor:
    """The inverse of `_blocks`: each block's real rows, into one (n_real, *rest) tensor."""
    rows = blocks[0].new_empty(groups[-1].stop, *blocks[0].shape[1:])
    for block, g in zip(blocks, groups, strict=True):
        if g.real is None:
            rows[g.start : g.stop].copy_(block)
        else:
            torch.index_select(block, 0, g.real, out=rows[g.start : g.stop])
    return rows


class PaddedBlocks(torch.autograd.Function):
    """Packed rows → the groups' padded blocks (`_blocks`); its gradient is `_rows` of the blocks' gradients (a
    copy, where autograd's `index_select` backward would scatter-add into zeros)."""

    @staticmethod
    def forward(ctx, rows: torch.Tensor, groups: tuple[AttentionGroup, ...]) -> tuple[torch.Tensor, ...]:
        ctx.groups = groups
        return _blocks(rows, groups)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):
        return _rows(grads, ctx.groups), None


class PackedRows(torch.autograd.Function):
    """The groups' padded blocks → packed rows (`_rows`); its gradient is `_blocks` of the rows', zeros at pads."""

    @staticmethod
    def forward(ctx, groups: tuple[AttentionGroup, ...], *blocks: torch.Tensor) -> torch.Tensor:
        ctx.groups = groups
        return _rows(blocks, groups)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return None, *_blocks(grad, ctx.groups)


class AttentionLayout(NamedTuple):
    """The attention calls of one layer: an `AttentionGroup` per call and its mask (`None` for one length)."""

    groups: tuple[AttentionGroup, ...]
    masks: tuple


__all__ = [
    "CALL_COST_PAIRS",
    "EVAL_CALL_COST_PAIRS",
    "AttentionGroup",
    "AttentionLayout",
    "PackedRows",
    "PaddedBlocks",
    "attention_blocks",
    "attention_groups",
    "call_cost_pairs",
]
