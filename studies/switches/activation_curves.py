"""Activation curves computed with hf_ffn's own activation modules (`get_activation`, hence `Swish`).

`studies/switches/plot_activations.py` draws `CURVE_PANELS` on [-5, 5]; `tests/test_activations.py` checks the formulas
through the same `activation` builder. Derivatives come from autograd through the module, so the plotted slope
is the one training sees.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from hf_ffn.configuration_ffn_bert import FfnBertConfig
from hf_ffn.modeling_ffn_bert import get_activation

# The config fields that parametrise `get_activation`'s "leaky_relu", "elu" and "swish".
ACTIVATION_PARAMETERS = ("leaky_relu_negative_slope", "elu_alpha", "swish_beta")


def activation(name: str, **params: float) -> nn.Module:
    """A fresh activation module, exactly as an FfnBert layer builds it: `get_activation(name, config)`.

    `params` are the config's activation fields (`leaky_relu_negative_slope`, `elu_alpha`, `swish_beta`); any
    other name is an `ACT2FN` activation (`"gelu"`, `"gelu_pytorch_tanh"`, `"sigmoid"`, ...).

    Raises:
        ValueError: on a parameter that is not one of those fields, or a value `FfnBertConfig` rejects.
    """
    unknown = sorted(set(params) - set(ACTIVATION_PARAMETERS))
    if unknown:
        raise ValueError(f"unknown activation parameter(s) {unknown}; allowed: {', '.join(ACTIVATION_PARAMETERS)}")
    return get_activation(name, FfnBertConfig(**params))


def value_and_derivative(module: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(f(x), f'(x))` for an elementwise activation `f`, the derivative by autograd through `module`.

    Shapes: x (n,) → two tensors (n,). Because `f` is elementwise, d(Σf(x))/dx_i = f'(x_i).
    """
    x = x.detach().clone().requires_grad_(True)
    y = module(x)
    (dy,) = torch.autograd.grad(y.sum(), x)
    return y.detach(), dy


@dataclass(frozen=True)
class Curve:
    """One plotted activation: a legend label, the `get_activation` name and its config parameters."""

    label: str
    name: str
    params: dict[str, float] = field(default_factory=dict)

    def module(self) -> nn.Module:
        return activation(self.name, **self.params)


# Panel title → curves. Swish β = 0.1 and β = 10 show the two limits, x/2 and ReLU (bounds in the tests).
CURVE_PANELS: dict[str, list[Curve]] = {
    "ReLU family": [
        Curve("ReLU", "relu"),
        Curve("LeakyReLU α=0.01", "leaky_relu", {"leaky_relu_negative_slope": 0.01}),
        Curve("LeakyReLU α=0.1", "leaky_relu", {"leaky_relu_negative_slope": 0.1}),
        Curve("ELU α=1", "elu", {"elu_alpha": 1.0}),
    ],
    "GELU: exact x·Φ(x) vs tanh approximation": [
        Curve("GELU (erf)", "gelu"),
        Curve("GELU tanh approx. (gelu_pytorch_tanh)", "gelu_pytorch_tanh"),
    ],
    "Swish x·σ(βx)": [
        Curve("β=0.1 (β → 0: x/2)", "swish", {"swish_beta": 0.1}),
        Curve("β=0.5", "swish", {"swish_beta": 0.5}),
        Curve("β=1 (SiLU)", "swish", {"swish_beta": 1.0}),
        Curve("β=3", "swish", {"swish_beta": 3.0}),
        Curve("β=10 (β → ∞: ReLU)", "swish", {"swish_beta": 10.0}),
    ],
    "Squashing": [Curve("sigmoid", "sigmoid"), Curve("tanh", "tanh")],
}

__all__ = ["ACTIVATION_PARAMETERS", "CURVE_PANELS", "Curve", "activation", "value_and_derivative"]
