"""FfnBert's activation modules beyond transformers' `ACT2FN`: `Swish` (a β parameter) and `get_activation`, which
builds a fresh module per layer. Imported relatively by `modeling_ffn_bert` (so it ships beside a saved model for
`trust_remote_code` loading).
"""

import torch
from torch import nn
from transformers.activations import ACT2FN

from .configuration_ffn_bert import FfnBertConfig


class Swish(nn.Module):
    """Swish_β(x) = x·σ(βx) (Ramachandran et al. 2017, arXiv 1710.05941). Shape-preserving.

    β = 1 is SiLU (Elfwing et al. 2018) and is computed with `F.silu`, so it equals `ACT2FN["silu"]` bit for bit;
    β → 0 tends to x/2, β → ∞ to ReLU.
    """

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
    """A fresh activation module for `name` (never a shared instance: hooks must see one module per layer).

    `"leaky_relu"`, `"elu"` and `"swish"` take their parameter from `config`; every other name is `ACT2FN[name]`.
    """
    if name == "leaky_relu":
        return nn.LeakyReLU(config.leaky_relu_negative_slope)
    if name == "elu":
        return nn.ELU(config.elu_alpha)
    if name == "swish":
        return Swish(config.swish_beta)
    return ACT2FN[name]


__all__ = ["Swish", "get_activation"]
