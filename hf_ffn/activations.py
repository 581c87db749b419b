"""FfnBert's activation modules beyond transformers' `ACT2FN` (`Swish`, `get_activation`); ships beside a saved model
for `trust_remote_code` loading."""

import torch
from torch import nn
from transformers.activations import ACT2FN

from .configuration_ffn_bert import FfnBertConfig


class Swish(nn.Module):
    """Swish_β(x) = x·σ(βx) (Ramachandran et al. 2017, arXiv 1710.05941). β = 1 is SiLU, computed with `F.silu`
    (bit for bit `ACT2FN["silu"]`)."""

    def __init__(self, beta: float = 1.0):
        super().__init__()
        self.beta = beta

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.beta == 1.0:
            return nn.functional.silu(x)
        return x * torch.sigmoid(self.beta * x)

    def extra_repr(self) -> str:
        return f"beta={self.beta}"


def get_activation(name: str, config: FfnBertConfig) -> nn.Module:
    """A fresh activation module for `name` (one per layer, for hooks); "leaky_relu", "elu" and "swish" take their
    parameter from `config`, every other name is `ACT2FN[name]`."""
    if name == "leaky_relu":
        return nn.LeakyReLU(config.leaky_relu_negative_slope)
    if name == "elu":
        return nn.ELU(config.elu_alpha)
    if name == "swish":
        return Swish(config.swish_beta)
    return ACT2FN[name]


__all__ = ["Swish", "get_activation"]
