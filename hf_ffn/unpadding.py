"""Packed execution (`config.unpad_tokens=True`, docs/unpadded.md): the real tokens of a batch in one (n_real, ...)
tensor, and self-attention within each sequence. A padded batch (batch, seq) with a plain padding mask runs packed
with one sequence per row; a padding-free batch (`DataCollatorWithFlattening`: sequences concatenated along a row,
`position_ids` restarting at 0, no mask) runs packed, or with the switch off upstream's padded path with a
block-diagonal mask (`block_diagonal_forward`). Only attention needs the sequences (`packed_self_attention`: per
length, per group of lengths in training, or in one variable-length kernel call: `packed_attention_kernel`).

The model's modules are passed in; this module imports only torch, transformers and `grouped_attention`, so it ships
beside a saved model for `trust_remote_code` loading.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from torch import nn
from transformers.masking_utils import (
    ALL_MASK_ATTENTION_FUNCTIONS,
    create_bidirectional_mask,
    find_packed_sequence_indices,
    packed_sequence_mask_function,
)
from transformers.modeling_outputs import BaseModelOutputWithPoolingAndCrossAttentions
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.bert.modeling_bert import BertEmbeddings, BertModel, BertSelfAttention, eager_attention_forward
from transformers.utils.output_capturing import capture_outputs

from .grouped_attention import (
    AttentionLayout,
    PackedRows,
    PaddedBlocks,
    attention_blocks,
    attention_groups,
    call_cost_pairs,
)

# Sequence boundaries a collator may add (`DataCollatorWithFlattening`): the packed path derives its own.
COLLATOR_BOUNDARY_KWARGS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx")

logger = logging.getLogger(__name__)

# How packed attention runs (`packed_attention_kernel`): transformers' attention function per length or group of
# lengths; torch's flash kernel over all rows (`flash_varlen_attention`); transformers' flash function (`cu_seq_lens`).
PACKED_ATTENTION_KERNELS = ("buckets", "varlen", "flash")
HALF_DTYPES = (torch.bfloat16, torch.float16)  # the dtypes flash kernels compute in
# A fixed choice instead of the per-device one (None): for tests and benchmarks.
FORCE_PACKED_ATTENTION_KERNEL: str | None = None
_announced: set[tuple[str, str, torch.dtype, str | None]] = set()  # choices already logged


def flash_varlen_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    dropout: float,
    scale: float,
) -> torch.Tensor:
    """Self-attention of every packed sequence in one call of torch's flash kernel (the op behind `varlen_attn`,
    which takes no dropout): query, key, value (n_real, heads, head_dim) in bfloat16/float16 on CUDA, `cu_seqlens`
    (num_sequences + 1,) int32, `scale` 1/sqrt(head_dim) → (n_real, heads, head_dim). Differentiable."""
    return torch.ops.aten._flash_attention_forward(
        query, key, value, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout, False, False, scale=scale
    )[0]


def compute_dtype(parameter_dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype a model's matmuls run in: autocast's on `device` where it is on, else the parameters'."""
    try:
        if torch.is_autocast_enabled(device.type):
            return torch.get_autocast_dtype(device.type)
    except RuntimeError:  # no autocast for this device type
        pass
    return parameter_dtype


def packed_attention_kernel(config, device: torch.device, dtype: torch.dtype = torch.float32) -> str | None:
    """The kernel (`PACKED_ATTENTION_KERNELS`) that runs packed attention for `config._attn_implementation` on
    `device` in `dtype`, or `None` where none beats the padded batch, which then runs padded (docs/unpadded.md,
    "What runs where"): "flash" for a flash implementation; "buckets" on the CPU; "varlen" on CUDA with sdpa in
    bfloat16/float16; else `None`. `FORCE_PACKED_ATTENTION_KERNEL`, when set, instead. Logged once per choice.

    Raises:
        ValueError: `FORCE_PACKED_ATTENTION_KERNEL` is not one of `PACKED_ATTENTION_KERNELS` or None.
    """
    implementation = config._attn_implementation or "eager"
    if FORCE_PACKED_ATTENTION_KERNEL is not None:
        if FORCE_PACKED_ATTENTION_KERNEL not in PACKED_ATTENTION_KERNELS:
            raise ValueError(
                f"FORCE_PACKED_ATTENTION_KERNEL must be one of {', '.join(PACKED_ATTENTION_KERNELS)} or None, got "
                f"{FORCE_PACKED_ATTENTION_KERNEL!r}"
            )
        kernel = FORCE_PACKED_ATTENTION_KERNEL
    elif is_flash_attention(config):
        kernel = "flash"
    elif device.type == "cpu":
        kernel = "buckets"
    elif device.type == "cuda" and implementation == "sdpa" and dtype in HALF_DTYPES:
        kernel = "varlen"
    else:
        kernel = None
    if (device.type, implementation, dtype, kernel) not in _announced:
        _announced.add((device.type, implementation, dtype, kernel))
        where = f"{device.type}, attn_implementation={implementation!r}, {str(dtype).removeprefix('torch.')}"
        logger.info(
            f"unpad_tokens: packed attention by {kernel!r} ({where})"
            if kernel
            else f"unpad_tokens: no variable-length kernel for {where}; padded batches run the padded path"
        )
    return kernel


@dataclass(frozen=True)
class TokenPacking:
    """Where the real tokens of a batch are and which sequence each belongs to: built once per forward.

    Attributes:
        indices: (n_real,) int64 positions of the real tokens in the flattened (batch·seq) batch, in packed order:
            sequences by ascending length (ties in input order), each sequence's tokens consecutive and in order.
        batch_size, seq_len: the input's shape (batch, seq).
        buckets: (length, number of sequences) per distinct length, in packed order: the first length·count packed
            rows are that many sequences of that length, and so on.
        first_tokens: (num_sequences,) int64 flattened positions of each sequence's first token, in input order.
        cu_seqlens: (num_sequences + 1,) int32 cumulative sequence lengths in packed order.
        kernel: how packed attention runs (`packed_attention_kernel`).
    """

    indices: torch.Tensor
    batch_size: int
    seq_len: int
    buckets: tuple[tuple[int, int], ...]
    first_tokens: torch.Tensor
    cu_seqlens: torch.Tensor
    kernel: str = "buckets"
    # `attention_layout`'s results, one per (attention implementation, dtype, call cost)
    mask_cache: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_attention_mask(cls, attention_mask: torch.Tensor | None) -> TokenPacking | None:
        """The real tokens of `attention_mask` (batch, seq), one sequence per row, if it is a plain padding mask
        (2-D, only 0 and 1, at least one 0, a 1 in column 0 of every row), else `None` (the padded path)."""
        if attention_mask is None or attention_mask.dim() != 2:
            return None
        real = attention_mask == 1
        plain = (real | (attention_mask == 0)).all() & real[:, 0].all()
        # the one read-back from the device: whether the mask is plain, and each row's length
        plain, *lengths = torch.cat((plain[None].long(), real.sum(1))).tolist()
        batch_size, seq_len = attention_mask.shape
        if not plain or sum(lengths) == batch_size * seq_len:
            return None
        device = attention_mask.device
        rows = sorted(range(batch_size), key=lengths.__getitem__)  # by length, ties in input order (stable)
        rank = torch.empty(batch_size, dtype=torch.long)
        rank[rows] = torch.arange(batch_size)
        # real tokens by (row's rank, position), pads after them: the first n_real of the order are the packing
        position = torch.arange(batch_size * seq_len, device=device)
        # host → device copies without waiting for the device (non_blocking: the host values are staged at once)
        key = rank.to(device, non_blocking=True).repeat_interleave(seq_len) * (batch_size * seq_len) + position
        key = key.masked_fill(~real.flatten(), 2 * (batch_size * seq_len) ** 2)
        sorted_lengths = [lengths[row] for row in rows]
        cu_seqlens = torch.tensor([0, *itertools.accumulate(sorted_lengths)], dtype=torch.int32)
        return cls(
            indices=key.argsort()[: sum(lengths)],
            batch_size=batch_size,
            seq_len=seq_len,
            buckets=tuple((length, len(list(group))) for length, group in itertools.groupby(sorted_lengths)),
            first_tokens=torch.arange(batch_size, device=device) * seq_len,
            cu_seqlens=cu_seqlens.to(device, non_blocking=True),
        )

    @classmethod
    def from_position_ids(
        cls,
        position_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        batch_size: int,
        seq_len: int,
        sequence_start: int = 0,
    ) -> TokenPacking | None:
        """The sequences of a padding-free batch (`position_ids` (batch or 1, seq) counting `sequence_start`, +1,
        +2, ... within each: 0 for BERT, RoBERTa's `padding_idx + 1`, the collator's `position_ids_start`; found by
        `find_packed_sequence_indices`), or `None` when every row holds one sequence.

        Raises:
            ValueError: `position_ids` not int64/int32 of shape (batch, seq) or (1, seq); restarting within a row
                but not at `sequence_start`; or beside an `attention_mask` that marks padding or is 4-D (ambiguous).
        """
        if position_ids is None:
            return None
        if position_ids.dtype not in (torch.int64, torch.int32):
            raise ValueError(
                f"position_ids must be integer positions (torch.int64 or torch.int32), got dtype {position_ids.dtype}."
            )
        if position_ids.dim() != 2 or position_ids.shape[0] not in (1, batch_size) or position_ids.shape[1] != seq_len:
            raise ValueError(
                f"position_ids must have shape (batch, seq) = ({batch_size}, {seq_len}) or (1, {seq_len}) (one row "
                f"for every row), as the input ids; got shape {tuple(position_ids.shape)}."
                + (" Add the batch dimension: position_ids[None]." if position_ids.dim() == 1 else "")
            )
        positions = position_ids.expand(batch_size, seq_len)
        sequence_in_row = find_packed_sequence_indices(positions)  # (batch, seq) or None: one sequence per row
        if sequence_in_row is None:
            return None
        starts = torch.ones_like(positions, dtype=torch.bool)  # (batch, seq): the first token of a sequence
        starts[:, 1:] = sequence_in_row[:, 1:] != sequence_in_row[:, :-1]
        bad = (starts & (positions != sequence_start)).nonzero()
        if len(bad):
            row, column = bad[0].tolist()
            came = f"after {positions[row, column - 1].item()} " if column else ""
            hint = f" (DataCollatorWithFlattening(position_ids_start={sequence_start}))" if sequence_start else ""
            raise ValueError(
                f"position_ids restart within a row, as in a padding-free batch (DataCollatorWithFlattening), but "
                f"do not describe separable sequences: row {row}, column {column} has position "
                f"{positions[row, column].item()} {came}where a sequence must count up by 1 from {sequence_start} "
                f"and a new one start at {sequence_start}. Pass position_ids that restart at {sequence_start} for "
                f"every sequence{hint}, or padded rows with an attention_mask and no position_ids."
            )
        if attention_mask is not None and (attention_mask.dim() != 2 or not (attention_mask == 1).all()):
            raise ValueError(
                f"position_ids describe several sequences per row (a padding-free batch, DataCollatorWithFlattening) "
                f"and attention_mask (shape {tuple(attention_mask.shape)}) is not all ones: which tokens attend to "
                f"which is ambiguous. Pass one or the other: a padding-free batch without attention_mask, or a "
                f"padded batch with attention_mask and no position_ids."
            )
        positions = torch.arange(batch_size * seq_len, device=position_ids.device)
        sequence_ids = starts.flatten().cumsum(0) - 1  # (batch·seq,) 0, 1, ..., non-decreasing
        lengths = torch.bincount(sequence_ids)  # (num_sequences,)
        # by (length, position): positions ascend within a sequence and sequences do not interleave
        order = (lengths[sequence_ids] * (batch_size * seq_len) + positions).argsort()
        sorted_lengths = lengths.sort(stable=True).values
        values, counts = torch.unique_consecutive(sorted_lengths, return_counts=True)
        return cls(
            indices=positions[order],
            batch_size=batch_size,
            seq_len=seq_len,
            buckets=tuple(zip(values.tolist(), counts.tolist(), strict=True)),
            first_tokens=positions[lengths.cumsum(0) - lengths],  # each sequence's first token
            cu_seqlens=nn.functional.pad(sorted_lengths.cumsum(0), (1, 0)).to(torch.int32),
        )

    @classmethod
    def for_batch(
        cls,
        config,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
        output_attentions: bool = False,
        dtype: torch.dtype = torch.float32,
        sequence_start: int = 0,
    ) -> TokenPacking | None:
        """The packing `FfnBertModel.forward` runs for `BertModel.forward`'s inputs: a padding-free batch's
        (`from_position_ids`, whatever the config), else, with `config.unpad_tokens`, without `output_attentions`
        and where `packed_attention_kernel` has a kernel, a padded batch's; `None` for the padded path.
        `sequence_start`: as `from_position_ids`.

        Raises:
            ValueError: as `from_position_ids`.
        """
        if (input_ids is None) == (inputs_embeds is None):
            return None  # upstream's forward raises its error
        inputs = input_ids if input_ids is not None else inputs_embeds
        packing = cls.from_position_ids(position_ids, attention_mask, *inputs.shape[:2], sequence_start=sequence_start)
        unpad = config.unpad_tokens and not output_attentions
        # a kernel where the batch may run packed: the switch on, or a flash kernel (which takes no mask)
        kernel = packed_attention_kernel(config, inputs.device, dtype) if unpad or is_flash_attention(config) else None
        if packing is None and kernel is not None and unpad:
            packing = cls.from_attention_mask(attention_mask)
        if packing is None:
            return None
        # `kernel` None: a padding-free batch runs the block-diagonal padded path (`FfnBertModel.forward`)
        return replace(packing, kernel=kernel)

    @property
    def padding_free(self) -> bool:
        """Whether some row holds several sequences (`from_position_ids`)."""
        return self.first_tokens.numel() > self.batch_size

    @property
    def num_real(self) -> int:
        """n_real, the number of real tokens."""
        return self.indices.numel()

    def unpad(self, padded: torch.Tensor) -> torch.Tensor:
        """(batch, seq, *rest) → (n_real, *rest): the rows of the real tokens, in packed order."""
        return padded.reshape(self.batch_size * self.seq_len, *padded.shape[2:]).index_select(0, self.indices)

    def pad(self, packed: torch.Tensor) -> torch.Tensor:
        """(n_real, *rest) → (batch, seq, *rest), with zeros at the pad positions (inverse of `unpad`)."""
        rest = packed.shape[1:]
        flat = packed.new_zeros(self.batch_size * self.seq_len, *rest)
        return flat.index_copy_(0, self.indices, packed).view(self.batch_size, self.seq_len, *rest)

    def attention_layout(self, config, dtype: torch.dtype, call_cost: float) -> AttentionLayout:
        """How `packed_self_attention` calls `config._attn_implementation`: one call per bucket, or with `call_cost`
        > 0 one per group of buckets (`attention_groups`) padded to its longest length, with the mask upstream builds
        for that key mask (`create_bidirectional_mask`). An implementation without a registered mask function gets
        the buckets. Built once per (implementation, `dtype`, `call_cost`)."""
        key = (config._attn_implementation, dtype, call_cost)
        if key not in self.mask_cache:
            ends = list(range(len(self.buckets)))
            if call_cost and config._attn_implementation in ALL_MASK_ATTENTION_FUNCTIONS:
                ends = attention_groups(self.buckets, call_cost)
            groups = attention_blocks(self.buckets, self.cu_seqlens, ends)
            masks = tuple(
                None
                if g.key_mask is None
                else create_bidirectional_mask(
                    config=config,
                    inputs_embeds=torch.empty(g.count, g.length, 0, dtype=dtype, device=g.key_mask.device),
                    attention_mask=g.key_mask,
                )
                for g in groups
            )
            self.mask_cache[key] = AttentionLayout(groups, masks)
        return self.mask_cache[key]

    def first_token_states(self, padded: torch.Tensor) -> torch.Tensor:
        """(batch, seq, hidden) → (num_sequences, 1, hidden): each sequence's first token (what `BertPooler` reads)."""
        return padded.reshape(-1, padded.shape[-1]).index_select(0, self.first_tokens)[:, None]


def is_flash_attention(config) -> bool:
    """Whether `config._attn_implementation` is a flash kernel (takes `cu_seq_lens_q/k`, no mask)."""
    return "flash" in (config._attn_implementation or "")


def block_diagonal_forward(
    model: BertModel,
    padded_forward: Callable,
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    token_type_ids: torch.Tensor | None,
    position_ids: torch.Tensor,
    inputs_embeds: torch.Tensor | None,
    packing: TokenPacking,
    **kwargs,
) -> BaseModelOutputWithPoolingAndCrossAttentions:
    """The padded path (`padded_forward`, upstream `BertModel.forward`) for a padding-free batch, with the switch
    off or `output_attentions`: each token attends to its own sequence through the block-diagonal mask
    (`packed_sequence_mask_function`) that upstream builds from `position_ids` itself from transformers 5.25 on (bit
    for bit there). `pooler_output` is (num_sequences, hidden), one per sequence, as on the packed path."""
    batch_size, seq_len = packing.batch_size, packing.seq_len
    stand_in = model.embeddings.word_embeddings.weight.new_zeros(()).expand(batch_size, seq_len, 1)  # shape, dtype
    sequence_in_row = find_packed_sequence_indices(position_ids.expand(batch_size, seq_len))
    attention_mask = create_bidirectional_mask(
        config=model.config,
        inputs_embeds=stand_in,
        attention_mask=None,
        and_mask_function=packed_sequence_mask_function(sequence_in_row),
    )
    outputs = padded_forward(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
    if getattr(model, "pooler", None) is not None:  # ELECTRA has none
        outputs.pooler_output = model.pooler(packing.first_token_states(outputs.last_hidden_state))
    return outputs


def packed_embeddings(
    embeddings: BertEmbeddings,
    packing: TokenPacking,
    input_ids: torch.Tensor | None = None,
    token_type_ids: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    inputs_embeds: torch.Tensor | None = None,
) -> torch.Tensor:
    """Upstream `BertEmbeddings.forward` for the real tokens only, run on one packed row (1, n_real): inputs
    (batch, seq) (`inputs_embeds` (batch, seq, hidden); `token_type_ids`/`position_ids` may be (1, seq)) →
    (n_real, hidden). Positions default to upstream's 0..seq-1 in every row."""
    if position_ids is None:
        position_ids = embeddings.position_ids[:, : packing.seq_len]

    def packed_row(x: torch.Tensor | None) -> torch.Tensor | None:  # (batch or 1, seq, ...) → (1, n_real, ...)
        return None if x is None else packing.unpad(x.expand(packing.batch_size, *x.shape[1:]))[None]

    packed = embeddings(
        input_ids=packed_row(input_ids),
        token_type_ids=packed_row(token_type_ids),
        position_ids=packed_row(position_ids),
        inputs_embeds=packed_row(inputs_embeds),
    )
    return packed[0]


def packed_self_attention(
    attention: BertSelfAttention, hidden_states: torch.Tensor, packing: TokenPacking, **kwargs
) -> torch.Tensor:
    """Upstream `BertSelfAttention.forward` for packed tokens, each sequence attending to itself only:
    (n_real, hidden) → (n_real, all_head_size).

    transformers' attention function is called as upstream calls it, on (sequences, heads, length, head_dim)
    blocks (`TokenPacking.attention_layout`): in eval mode one view per length bucket, no mask; in training mode
    one padded, masked block per group of buckets (`PaddedBlocks` / `PackedRows`). Kernels "flash" and "varlen"
    run once on all rows with the sequence boundaries. The softmax sums run over fewer (zero) terms than the padded
    batch's: equal within fp32 rounding, not bit for bit (docs/unpadded.md).
    """
    num_real, head_dim = hidden_states.shape[0], attention.attention_head_size

    def heads(projection: nn.Module) -> torch.Tensor:  # (n_real, hidden) → (n_real, heads, head_dim)
        return projection(hidden_states).view(num_real, -1, head_dim)

    query, key, value = heads(attention.query), heads(attention.key), heads(attention.value)
    implementation = attention.config._attn_implementation or "eager"
    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
    settings = dict(dropout=0.0 if not attention.training else attention.dropout.p, scaling=attention.scaling)
    longest = packing.buckets[-1][0]
    if packing.kernel == "varlen":  # torch's flash kernel, all sequences in one call: (n_real, heads, head_dim)
        attn_output = flash_varlen_attention(
            query, key, value, packing.cu_seqlens, longest, settings["dropout"], settings["scaling"]
        )
        return attn_output.reshape(num_real, -1)
    if packing.kernel == "flash":
        attn_output, _ = attention_interface(  # (1, heads, n_real, head_dim) in, (1, n_real, heads, head_dim) out
            attention,
            *(x.transpose(0, 1)[None] for x in (query, key, value)),
            None,
            **settings,
            cu_seq_lens_q=packing.cu_seqlens,
            cu_seq_lens_k=packing.cu_seqlens,
            max_length_q=longest,
            max_length_k=longest,
            **kwargs,
        )
        return attn_output.reshape(num_real, -1)
    layout = packing.attention_layout(attention.config, query.dtype, call_cost_pairs(attention.training))
    padded = any(g.real is not None for g in layout.groups)
    if padded:  # per group (count·length, heads, head_dim), zeros at pads
        query, key, value = (PaddedBlocks.apply(x, layout.groups) for x in (query, key, value))
    else:  # views. `split` (not slicing): its backward is one `cat`, where each slice's is a full-size zero gradient
        sizes = [g.count * g.length for g in layout.groups]
        query, key, value = (x.split(sizes) for x in (query, key, value))
    outputs = []
    for g, mask, *qkv in zip(layout.groups, layout.masks, query, key, value, strict=True):
        # (count·length, heads, head_dim) → (count, heads, length, head_dim)
        q, k, v = (x.view(g.count, g.length, -1, head_dim).transpose(1, 2) for x in qkv)
        attn_output, _ = attention_interface(attention, q, k, v, mask, **settings, **kwargs)
        outputs.append(attn_output.reshape(g.count * g.length, -1))  # (count, length, heads, head_dim) → rows
    if padded:
        return PackedRows.apply(layout.groups, *outputs)
    return torch.cat(outputs) if len(outputs) > 1 else outputs[0]


@capture_outputs
def unpadded_model_forward(
    model: BertModel,
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    token_type_ids: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None,
    packing: TokenPacking,
    **kwargs,
) -> BaseModelOutputWithPoolingAndCrossAttentions:
    """Upstream `BertModel.forward` (no cache, no cross-attention) on packed tokens, for an `FfnBertModel` whose
    layers take `packing` (`attention_mask` was read into it); an ELECTRA's `embeddings_project` follows the
    embeddings, as in `ElectraModel.forward`. Returns `last_hidden_state` (batch, seq, hidden), zeros at pads, and
    `pooler_output` (num_sequences, hidden) when the model has a pooler; `capture_outputs` adds the recorded
    `hidden_states`.

    Raises:
        ValueError: unless exactly one of `input_ids` and `inputs_embeds` is given (upstream's check).
    """
    if (input_ids is None) ^ (inputs_embeds is not None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
    for name in COLLATOR_BOUNDARY_KWARGS:
        kwargs.pop(name, None)
    hidden_states = packed_embeddings(  # (n_real, embedding_size)
        model.embeddings, packing, input_ids, token_type_ids, position_ids, inputs_embeds
    )
    projection = getattr(model, "embeddings_project", None)  # ELECTRA's, when embedding_size != hidden_size
    if projection is not None:
        hidden_states = projection(hidden_states)  # (n_real, hidden)
    # Hidden states are recorded by hooks on each layer's input and output: they travel padded while recorded.
    if kwargs.get("output_hidden_states", model.config.output_hidden_states):
        hidden_states = packing.pad(hidden_states)
    hidden_states = model.encoder(hidden_states, packing=packing, **kwargs).last_hidden_state
    if hidden_states.dim() == 3:  # recorded: padded, and the final norm may have written the pads
        hidden_states = packing.unpad(hidden_states)
    sequence_output = packing.pad(hidden_states)  # (batch, seq, hidden), zeros at pad positions
    pooler = getattr(model, "pooler", None)  # ELECTRA has none
    pooled_output = pooler(packing.first_token_states(sequence_output)) if pooler is not None else None
    return BaseModelOutputWithPoolingAndCrossAttentions(last_hidden_state=sequence_output, pooler_output=pooled_output)


__all__ = [
    "COLLATOR_BOUNDARY_KWARGS",
    "TokenPacking",
    "block_diagonal_forward",
    "FORCE_PACKED_ATTENTION_KERNEL",
    "HALF_DTYPES",
    "PACKED_ATTENTION_KERNELS",
    "compute_dtype",
    "flash_varlen_attention",
    "is_flash_attention",
    "packed_attention_kernel",
    "packed_embeddings",
    "packed_self_attention",
    "unpadded_model_forward",
]
