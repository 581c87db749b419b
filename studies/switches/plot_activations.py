"""Activation values and derivatives on [-5, 5], computed with hf_ffn's own modules (autograd for f').

    python -m studies.switches.plot_activations [--output-dir out]

Writes `activations.png` (values) and `activation_derivatives.png` (derivatives) into `--output-dir` (default
`out`; `--output-dir studies/switches/figures` regenerates the published figures). Needs the `plots` extra.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from studies.switches.activation_curves import CURVE_PANELS, value_and_derivative  # noqa: E402

GELU_PANEL = "GELU: exact x·Φ(x) vs tanh approximation"


def plot(out_dir: Path, dpi: int = 100) -> list[Path]:
    """Draw both figures into `out_dir`; returns the written paths."""
    x = torch.linspace(-5, 5, 1001, dtype=torch.float64)
    curves = {
        panel: [(c.label, *value_and_derivative(c.module(), x)) for c in curves]
        for panel, curves in CURVE_PANELS.items()
    }
    written = []
    for which, (suffix, title) in enumerate([("", "f(x)"), ("_derivatives", "f'(x) by autograd")]):
        fig, axes = plt.subplots(2, 2, figsize=(11, 8), constrained_layout=True)
        for ax, (panel, rows) in zip(axes.flat, curves.items(), strict=True):
            for label, value, deriv in rows:
                ax.plot(x, (value, deriv)[which], label=label, lw=1.6)
            if panel == "Swish x·σ(βx)":  # the two limits, β → 0 and β → ∞
                ref = (0.5 * x, torch.relu(x)) if which == 0 else (0.5 * torch.ones_like(x), (x > 0).double())
                ax.plot(x, ref[0], "k:", lw=1, label="x/2" if which == 0 else "1/2")
                ax.plot(x, ref[1], "k--", lw=0.8, label="ReLU" if which == 0 else "ReLU'")
            if panel == GELU_PANEL:  # the difference is invisible at this scale: show it ×1000 on its own axis
                (_, v0, d0), (_, v1, d1) = rows
                twin = ax.twinx()
                twin.plot(x, 1e3 * ((v1 - v0), (d1 - d0))[which], color="tab:red", lw=1, ls="--")
                twin.set_ylabel("(tanh approx. − exact) × 10³", color="tab:red")
                twin.tick_params(axis="y", colors="tab:red")
            ax.set_title(panel)
            ax.axhline(0, color="grey", lw=0.5)
            ax.axvline(0, color="grey", lw=0.5)
            ax.grid(alpha=0.3)
            ax.set_xlabel("x")
            ax.legend(fontsize=8, loc="upper left")
        fig.suptitle(f"hf_ffn activations: {title}")
        path = out_dir / f"activation{'s' if which == 0 else ''}{suffix}.png"
        fig.savefig(path, dpi=dpi)
        plt.close(fig)
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--output-dir",
        "--out-dir",
        dest="output_dir",
        type=Path,
        default=Path("out"),
        help="where the PNGs go (default: out; studies/switches/figures for the published figures)",
    )
    args = parser.parse_args()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    for path in plot(args.output_dir):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
