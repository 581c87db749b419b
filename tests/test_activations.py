"""The activation formulas behind the curves in docs/switches.md, checked numerically through hf_ffn's own modules.

Everything runs in float64 so that the tolerances below measure the formulas, not float32 rounding.
"""

import math
from statistics import NormalDist

import pytest
import torch
from torch import nn
from transformers.models.bert.modeling_bert import eager_attention_forward

from hf_ffn.modeling_ffn_bert import Swish
from studies.switches.activation_curves import CURVE_PANELS, activation, value_and_derivative

POINTS = torch.tensor([-4, -2.7, -1, -0.3, -1e-3, 0, 1e-3, 0.3, 1, 2.7, 4], dtype=torch.float64)
GRID = torch.linspace(-10, 10, 200_001, dtype=torch.float64)  # step 1e-4

# max |0.5x(1 + tanh(√(2/π)(x + 0.044715x³))) − x·Φ(x)| over all x is 4.7324e-4 (float64), reached at |x| ≈ 2.70.
# Source: PaddlePaddle PR #22426 ("Maximum absolute error between 2 implementations: 0.00047326", float32) and
# apache/tvm PR #14814 ("The largest difference is 5e-4"); it is the x-weighted error of Page's (1977) tanh
# approximation of Φ, which Hendrycks & Gimpel (2016, arXiv 1606.08415, sec. 2) use. The test below measures it.
GELU_TANH_MAX_ERROR = 4.733e-4


def test_every_plotted_curve_builds_through_get_activation():
    for curves in CURVE_PANELS.values():
        for curve in curves:
            value, deriv = value_and_derivative(curve.module(), POINTS)
            assert value.shape == deriv.shape == POINTS.shape and torch.isfinite(deriv).all(), curve.label
    assert isinstance(activation("swish", swish_beta=3.0), Swish) and activation("swish", swish_beta=3.0).beta == 3.0


def test_unknown_activation_parameter_is_named():
    with pytest.raises(ValueError, match="swish_bta.*allowed: leaky_relu_negative_slope, elu_alpha, swish_beta"):
        activation("swish", swish_bta=2.0)


def test_gelu_is_x_times_normal_cdf():
    phi = torch.tensor([NormalDist().cdf(float(x)) for x in POINTS], dtype=torch.float64)  # stdlib, not torch.erf
    torch.testing.assert_close(activation("gelu")(POINTS), POINTS * phi, rtol=0, atol=1e-15)


@pytest.mark.parametrize("name", ["gelu_pytorch_tanh", "gelu_new"])
def test_gelu_tanh_approximation_within_its_known_error(name):
    exact, approx = activation("gelu")(GRID), activation(name)(GRID)
    error = (approx - exact).abs()
    assert error.max() <= GELU_TANH_MAX_ERROR  # grid step 1e-4: the sampled max cannot exceed the true one
    assert error.max() >= 4.73e-4  # and the bound is tight: it is reached near |x| = 2.70
    assert abs(abs(GRID[error.argmax()]) - 2.70) < 0.01
    expected = 0.5 * POINTS * (1 + torch.tanh(math.sqrt(2 / math.pi) * (POINTS + 0.044715 * POINTS**3)))
    torch.testing.assert_close(activation(name)(POINTS), expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize("beta", [1e-1, 1e-2, 1e-3])
def test_swish_tends_to_half_x_as_beta_goes_to_zero(beta):
    # |x·σ(βx) − x/2| = |x|·|σ(βx) − 1/2| ≤ |x|·β|x|/4, since σ is 1/4-Lipschitz with σ(0) = 1/2.
    x = GRID[GRID.abs() <= 5]
    deviation = (activation("swish", swish_beta=beta)(x) - x / 2).abs()
    assert (deviation <= beta * x**2 / 4 + 1e-15).all()
    assert deviation.max() > 0.9 * beta * 25 / 4  # the bound is the true rate: the deviation shrinks ∝ β


@pytest.mark.parametrize("beta", [10.0, 100.0, 1000.0])
def test_swish_tends_to_relu_as_beta_goes_to_infinity(beta):
    # |x·σ(βx) − ReLU(x)| = |x|·σ(−β|x|) ≤ |x|·e^(−β|x|) ≤ 1/(eβ) (max of t·e^(−βt) at t = 1/β).
    deviation = (activation("swish", swish_beta=beta)(GRID) - torch.relu(GRID)).abs()
    assert deviation.max() <= 1 / (math.e * beta)
    assert deviation.max() > 0.5 / (math.e * beta)  # and it is of that order, not zero


@pytest.mark.parametrize("alpha", [1.0, 2.0])
def test_elu_is_continuous_at_zero(alpha):
    elu = activation("elu", elu_alpha=alpha)
    eps = torch.tensor([-1e-9, 0.0, 1e-9], dtype=torch.float64)
    value, deriv = value_and_derivative(elu, eps)
    assert value[1] == 0 and (value.abs() <= alpha * 1e-9).all()  # both one-sided limits are f(0) = 0
    # the slope is α on the left and 1 on the right: continuous (C¹) only for α = 1
    torch.testing.assert_close(deriv[[0, 2]], torch.tensor([alpha, 1.0], dtype=torch.float64), rtol=0, atol=1e-8)


@pytest.mark.parametrize("alpha", [0.01, 0.1, 0.3])
def test_leaky_relu_slope(alpha):
    leaky = activation("leaky_relu", leaky_relu_negative_slope=alpha)
    _, deriv = value_and_derivative(leaky, POINTS)
    assert torch.equal(deriv, torch.where(POINTS > 0, torch.ones_like(POINTS), torch.full_like(POINTS, alpha)))
    secant = (leaky(torch.tensor(-1.0)) - leaky(torch.tensor(-3.0))) / 2
    assert secant.item() == pytest.approx(alpha, rel=1e-6)


def test_sigmoid_derivative_is_sigma_times_one_minus_sigma():
    value, deriv = value_and_derivative(activation("sigmoid"), GRID)
    torch.testing.assert_close(deriv, value * (1 - value), rtol=0, atol=1e-15)
    assert deriv.max() == 0.25  # at x = 0


def test_attention_softmax_sums_to_one_and_is_shift_invariant():
    """Through the softmax BERT's self-attention uses (`eager_attention_forward`, additive mask)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64) for _ in range(3))  # (batch, heads, seq, d)
    module = nn.Module().eval()
    _, weights = eager_attention_forward(module, q, k, v, attention_mask=None)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5, dtype=torch.float64), rtol=0, atol=1e-15)
    shift = torch.full((2, 1, 1, 5), 100.0, dtype=torch.float64)  # the same constant added to every score
    _, shifted = eager_attention_forward(module, q, k, v, attention_mask=shift)
    torch.testing.assert_close(shifted, weights, rtol=0, atol=1e-13)  # rounding of (score + 100) in float64
    per_key = torch.arange(5, dtype=torch.float64).view(1, 1, 1, 5)  # not a shift: must change the weights
    _, changed = eager_attention_forward(module, q, k, v, attention_mask=per_key)
    assert (changed - weights).abs().max() > 0.1
