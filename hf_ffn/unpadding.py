"""Unpadded execution: the real tokens of a padded batch, packed, and self-attention around them.

A padded batch (batch, seq, ...) holds n_real real tokens; packed, they are one tensor (n_real, ...) in row-major
order (row 0's tokens first, each row in order). Every token-wise op (linear layers, LayerNorm, activations,
dropout, residual adds) gives the same values on the packed rows as on those rows of the padded batch, so only the
attention core, which mixes tokens, needs the padded layout: `packed_self_attention` re-pads Q/K/V (zeros at pad
positions) for transformers' attention function and packs its output again. Pad tokens enter attention only as
keys the mask removes (softmax weight exactly 0), so real tokens see the same attention as in the padded batch.

This module imports only torch and transformers, so it can be shipped beside a saved model for
`trust_remote_code` loading.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.bert.modeling_bert import BertEmbeddings, BertSelfAttention, eager_attention_forward


@dataclass(frozen=True)
class TokenPadding:
    """Where the real tokens of a padded batch are: built once per forward, used by every layer.

    Attributes:
        indices: (n_real,) int64 positions of the real tokens in the flattened (batch·seq) batch, ascending.
        batch_size, seq_len: the padded shape.
    """

    indices: torch.Tensor
    batch_size: int
    seq_len: int

    @classmethod
    def from_attention_mask(cls, attention_mask: torch.Tensor | None) -> TokenPadding | None:
        """The real tokens of `attention_mask` (batch, seq) if it is a plain padding mask with padding, else `None`.

        A plain padding mask is 2-D, holds only 0 and 1, has at least one 0, and has a 1 in column 0 of every row
        (right padding, or holes after the first token: every row has a real token and the pooler's token 0 is
        real). `None` (so the caller runs the padded path) for `None`, an all-ones mask, a 4-D or custom mask, a
        float mask with other values, left padding, or a row without real tokens.
        """
        if attention_mask is None or attention_mask.dim() != 2:
            return None
        real = attention_mask == 1
        if not ((real | (attention_mask == 0)).all() and real[:, 0].all()) or real.all():
            return None
        batch_size, seq_len = attention_mask.shape
        return cls(real.flatten().nonzero().squeeze(1), batch_size, seq_len)

    @property
    def num_real(self) -> int:
        """n_real, the number of real tokens."""
        return self.indices.numel()

    def unpad(self, padded: torch.Tensor) -> torch.Tensor:
        """(batch, seq, *rest) → (n_real, *rest): the rows of the real tokens, in order."""
        return padded.reshape(self.batch_size * self.seq_len, *padded.shape[2:]).index_select(0, self.indices)

    def pad(self, packed: torch.Tensor) -> torch.Tensor:
        """(n_real, *rest) → (batch, seq, *rest), with zeros at the pad positions (inverse of `unpad`)."""
        rest = packed.shape[1:]
        flat = packed.new_zeros(self.batch_size * self.seq_len, *rest)
        return flat.index_copy_(0, self.indices, packed).view(self.batch_size, self.seq_len, *rest)


def packed_embeddings(
    embeddings: BertEmbeddings,
    padding: TokenPadding,
    input_ids: torch.Tensor | None = None,
    token_type_ids: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    inputs_embeds: torch.Tensor | None = None,
) -> torch.Tensor:
    """Upstream `BertEmbeddings.forward` for the real tokens only: padded inputs (batch, seq) (`inputs_embeds`
    (batch, seq, hidden); `token_type_ids`/`position_ids` may be (1, seq)) → (n_real, hidden).

    Word, token-type and position embeddings are per token, so the embeddings module runs on one packed row
    (1, n_real) of the gathered inputs: its sum equals the real rows of the padded sum, and its LayerNorm and
    dropout see real rows only. Positions default to upstream's 0..seq-1 in every row.
    """
    if position_ids is None:
        position_ids = embeddings.position_ids[:, : padding.seq_len]

    def packed_row(x: torch.Tensor | None) -> torch.Tensor | None:  # (batch or 1, seq, ...) → (1, n_real, ...)
        return None if x is None else padding.unpad(x.expand(padding.batch_size, *x.shape[1:]))[None]

    packed = embeddings(
        input_ids=packed_row(input_ids),
        token_type_ids=packed_row(token_type_ids),
        position_ids=packed_row(position_ids),
        inputs_embeds=packed_row(inputs_embeds),
    )
    return packed[0]


def packed_self_attention(
    attention: BertSelfAttention,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None,
    padding: TokenPadding,
    **kwargs,
) -> torch.Tensor:
    """Upstream `BertSelfAttention.forward` for packed tokens: (n_real, hidden) → (n_real, all_head_size).

    The Q/K/V projections (`attention.query/key/value`, upstream's modules and weights) run on the n_real rows;
    Q/K/V are then re-padded to (batch, heads, seq, head_dim), zeros at pad positions, for the attention function
    of `config._attn_implementation` (eager, sdpa, flex, flash: transformers' `ALL_ATTENTION_FUNCTIONS`, called
    exactly as upstream calls it, with upstream's mask `attention_mask`), and its output (batch, seq, heads,
    head_dim) is packed again. Rows of real tokens equal upstream's bit for bit: a masked key's score is the
    mask's value whatever the key (|q·k| is far below the mask value's rounding step), so zero pads and pad
    embeddings give the same softmax, with weight 0 on every pad.
    """
    batch_size, seq_len, head_dim = padding.batch_size, padding.seq_len, attention.attention_head_size

    def heads(projection: torch.nn.Module) -> torch.Tensor:  # (n_real, hidden) → (batch, heads, seq, head_dim)
        return padding.pad(projection(hidden_states)).view(batch_size, seq_len, -1, head_dim).transpose(1, 2)

    attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
        attention.config._attn_implementation, eager_attention_forward
    )
    attn_output, _ = attention_interface(
        attention,
        heads(attention.query),
        heads(attention.key),
        heads(attention.value),
        attention_mask,
        dropout=0.0 if not attention.training else attention.dropout.p,
        scaling=attention.scaling,
        **kwargs,
    )
    return padding.unpad(attn_output.reshape(batch_size, seq_len, -1))  # (batch, seq, heads, head_dim) → packed


__all__ = ["TokenPadding", "packed_embeddings", "packed_self_attention"]
