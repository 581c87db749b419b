"""Unpadded execution: the real tokens of a padded batch, packed, and self-attention around them.

A padded batch (batch, seq, ...) holds n_real real tokens; packed, they are one tensor (n_real, ...) in row-major
order (row 0's tokens first, each row in order). Every token-wise op (linear layers, LayerNorm, activations,
dropout, residual adds) gives the same values on the packed rows as on those rows of the padded batch, so only the
attention core, which mixes tokens, needs the padded layout: `packed_self_attention` re-pads Q/K/V (zeros at pad
positions) for transformers' attention function and packs its output again. Pad tokens enter attention only as
keys the mask removes (softmax weight exactly 0), so real tokens see the same attention as in the padded batch.

Reads bottom-up from the token positions to the whole model: `TokenPadding` (where the real tokens are) →
`packed_embeddings` → `packed_self_attention` → `packed_layer_forward` (one `FfnBertLayer`, both LayerNorm
placements) → `unpadded_model_forward` (`FfnBertModel.forward` when `config.unpad_tokens` applies). The modules
they run are the model's own (upstream BERT's embeddings and attention, FfnBert's FFN and norms): the layer and
the model are passed in, never imported, so `modeling_ffn_bert` imports this module and not the reverse.

This module imports only torch and transformers, so it can be shipped beside a saved model for
`trust_remote_code` loading.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPoolingAndCrossAttentions
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.bert.modeling_bert import BertEmbeddings, BertModel, BertSelfAttention, eager_attention_forward
from transformers.utils.output_capturing import capture_outputs


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


def packed_layer_forward(
    layer: nn.Module, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, padding: TokenPadding, **kwargs
) -> torch.Tensor:
    """`FfnBertLayer.forward` for packed tokens: (n_real, hidden) → (n_real, hidden).

    `layer` is an `FfnBertLayer` (its `layer_norm_position`, `attention` (upstream `BertAttention`), `mlp`,
    `mlp_dropout`, `mlp_norm`); both placements run op for op as in its padded `forward`, with
    `packed_self_attention` for `attention.self`. A padded input (batch, seq, hidden), as the model passes while
    hidden states are recorded, is packed first and the output re-padded (zeros at pad positions).
    """
    padded = hidden_states.dim() == 3
    x = padding.unpad(hidden_states) if padded else hidden_states  # (n_real, hidden)
    attention = layer.attention
    if layer.layer_norm_position == "post":
        attn_output = packed_self_attention(attention.self, x, attention_mask, padding, **kwargs)
        x = attention.output(attn_output, x)  # BertSelfOutput: LN_a(x + drop(dense(attn)))
        x = layer.mlp_norm(x + layer.mlp_dropout(layer.mlp(x)))
    else:
        normed = attention.output.LayerNorm(x)
        attn_output = packed_self_attention(attention.self, normed, attention_mask, padding, **kwargs)
        x = x + attention.output.dropout(attention.output.dense(attn_output))
        x = x + layer.mlp_dropout(layer.mlp(layer.mlp_norm(x)))
    return padding.pad(x) if padded else x


@capture_outputs
def unpadded_model_forward(
    model: BertModel,
    input_ids: torch.Tensor | None,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None,
    padding: TokenPadding,
    **kwargs,
) -> BaseModelOutputWithPoolingAndCrossAttentions:
    """Upstream `BertModel.forward` (an encoder: no cache, no cross-attention) with packed tokens, for an
    `FfnBertModel` whose encoder takes `padding` (its layers then run `packed_layer_forward`).

    Inputs as `BertModel.forward`'s (batch, seq); `attention_mask` is the plain padding mask `padding` was built
    from. Returns `last_hidden_state` (batch, seq, hidden) with zeros at pad positions and `pooler_output`
    (batch, hidden) when the model has a pooler; `capture_outputs` (the decorator of upstream's `forward`) adds
    the recorded `hidden_states`.

    Raises:
        ValueError: unless exactly one of `input_ids` and `inputs_embeds` is given (upstream's check).
    """
    if (input_ids is None) ^ (inputs_embeds is not None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
    embedding_output = packed_embeddings(  # (n_real, hidden)
        model.embeddings, padding, input_ids, token_type_ids, position_ids, inputs_embeds
    )
    # Upstream's mask from the 2-D mask (`BertModel`'s own builder); it reads only the shape, dtype and device of
    # the embeddings, so a zero-stride stand-in (batch, seq, hidden) does.
    stand_in = embedding_output.new_zeros(()).expand(padding.batch_size, padding.seq_len, model.config.hidden_size)
    attention_mask, _ = model._create_attention_masks(attention_mask, None, stand_in, None, None)
    # Hidden states are recorded by hooks on each layer's input and output: they travel padded while recorded.
    recording = kwargs.get("output_hidden_states", model.config.output_hidden_states)
    hidden_states = padding.pad(embedding_output) if recording else embedding_output
    hidden_states = model.encoder(
        hidden_states, attention_mask=attention_mask, position_ids=position_ids, padding=padding, **kwargs
    ).last_hidden_state
    if hidden_states.dim() == 3:  # recorded: padded, and the final norm may have written the pads
        hidden_states = padding.unpad(hidden_states)
    sequence_output = padding.pad(hidden_states)  # (batch, seq, hidden), zeros at pad positions
    pooled_output = model.pooler(sequence_output) if model.pooler is not None else None
    return BaseModelOutputWithPoolingAndCrossAttentions(last_hidden_state=sequence_output, pooler_output=pooled_output)


__all__ = [
    "TokenPadding",
    "packed_embeddings",
    "packed_layer_forward",
    "packed_self_attention",
    "unpadded_model_forward",
]
