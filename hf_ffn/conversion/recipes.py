"""Function-preserving recipes as a lookup table: how a standard BERT FFN becomes another FFN with (nearly) the
same function. A BERT FFN is `down(act(W x + b))`; write z = W x + b.

    exact     act → gated act':  gate_proj ← (W, b), up_proj ← (0, 1), down_proj ← down
              act(z) · (0·x + 1) = act(z), bit for bit (x·0 sums to 0, + 1 is exactly 1.0, ·1.0 is exact).
              GELU → GeGLU, ReLU → ReGLU, SiLU → SwiGLU (β = 1).
    sigmoid   GELU(z) ≈ z·σ(k z), k = 1.702 (Hendrycks & Gimpel 2016, arXiv 1606.08415, §2); SiLU is k = 1.
    form      → SwiGLU, Swish_β(u) = u·σ(β u):  with u = c z, c = k/β,
                  Swish_β(c z) / c = z·σ(β c z) = z·σ(k z),
                so gate_proj ← c·(W, b), up_proj ← (0, 1/c), down_proj ← down.
              → GLU, σ(gate)·up:  gate_proj ← k·(W, b), up_proj ← (W, b), so σ(k z)·z.
              The approximation error |GELU(z) − z·σ(1.702 z)| is at most 0.0203 for every z (at |z| ≈ 2.27; even in z),
              so one layer's FFN output moves by at most 0.0203·Σ_j |down_proj[i, j]| per coordinate i.
    kept      standard act → standard act' (and Post-LN → Pre-LN): weights kept as they are; no exact mapping
              exists, the report carries the measured drift.

Any other pair raises `ValueError`. Sources: Shazeer 2020 (GLU variants, arXiv 2002.05202), Hendrycks & Gimpel 2016.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..configuration_ffn_bert import is_gated

# BERT activation → the gated variant whose gate activation is the same op (exact conversion).
EXACT_GATED_TARGET: dict[str, str] = {"gelu": "geglu", "relu": "reglu", "silu": "swiglu", "swish": "swiglu"}
SIGMOID_SLOPE: dict[str, float] = {"gelu": 1.702, "silu": 1.0, "swish": 1.0}
SIGMOID_FORM_IS_EXACT: dict[str, bool] = {"gelu": False, "silu": True, "swish": True}
# (source activation, gated target) → method; an "exact" swiglu entry needs swish_beta = 1, else the sigmoid form.
PRESERVING_METHODS: dict[tuple[str, str], str] = {
    (source, target): "sigmoid" for source in SIGMOID_SLOPE for target in ("swiglu", "glu")
} | {(source, target): "exact" for source, target in EXACT_GATED_TARGET.items()}
INITS = ("preserving", "fresh", "pruned")  # "pruned": hf_ffn.conversion.pruning (needs calibration text)
WIDTHS = ("keep", "matched")


def parse_width(width: str | int, name: str = "width") -> str | int:
    """A width as `load_converted` takes it: "keep", "matched" or a positive int (a string of digits becomes one).

    Raises:
        ValueError: naming `name` (the argument or flag), the value and what is allowed.
    """
    if isinstance(width, str) and width.isdigit():
        width = int(width)
    if isinstance(width, bool) or not (width in WIDTHS or (isinstance(width, int) and width > 0)):
        raise ValueError(f"{name} has unknown value {width!r}; allowed: {', '.join(WIDTHS)} or a positive integer")
    return width


@dataclass(frozen=True)
class FfnRecipe:
    """How one layer's FFN is built from a standard FFN's first projection (W, b): gate_proj ← gate_scale·(W, b);
    up_proj ← (0, `up_bias`) ("constant") or (W, b) ("copy"). `kind`: "unchanged", "exact", "approximate",
    "approximate (float rounding only)", "kept" (standard → standard) or "fresh"."""

    kind: str
    gated: bool = False
    gate_scale: float = 1.0
    up: str = "constant"
    up_bias: float = 1.0
    note: str = ""


def allowed_preserving_targets(source_act: str) -> list[str]:
    """The `ffn_type`s a standard FFN with activation `source_act` can be converted to with init='preserving'."""
    gated = {target for source, target in PRESERVING_METHODS if source == source_act}
    return sorted(gated | {"any standard activation (weights kept, approximate)"})


def sigmoid_form_recipe(source_act: str, target: str, swish_beta: float) -> FfnRecipe:
    """The sigmoid-form recipe (module docstring) from a `source_act` FFN to "swiglu" or "glu"."""
    k = SIGMOID_SLOPE[source_act]
    kind = "approximate (float rounding only)" if SIGMOID_FORM_IS_EXACT[source_act] else "approximate"
    if target == "swiglu":
        c = k / swish_beta
        return FfnRecipe(
            kind,
            gated=True,
            gate_scale=c,
            up="constant",
            up_bias=1.0 / c,
            note=f"{source_act}(z) ≈ z·σ({k}z) = Swish_{swish_beta}({c:.6g}z)/{c:.6g}: gate ← {c:.6g}·(W, b), "
            f"up ← (0, 1/{c:.6g})",
        )
    return FfnRecipe(
        kind, gated=True, gate_scale=k, up="copy", note=f"{source_act}(z) ≈ σ({k}z)·z: gate ← {k}·(W, b), up ← (W, b)"
    )


def ffn_recipe(source_act: str, target: str, swish_beta: float = 1.0) -> FfnRecipe:
    """The function-preserving recipe from a standard `source_act` FFN to `target`.

    Raises:
        ValueError: if no exact or approximate mapping exists, naming the allowed targets.
    """
    if target == source_act:
        return FfnRecipe("unchanged")
    if not is_gated(target):
        return FfnRecipe("kept", note=f"standard FFN, activation {source_act} → {target}: weights kept (approximate)")
    method = PRESERVING_METHODS.get((source_act, target))
    if method == "exact" and target == "swiglu" and swish_beta != 1.0:
        method = "sigmoid"  # Swish_β with β ≠ 1 is SiLU only after rescaling
    if method == "exact":
        return FfnRecipe("exact", gated=True, note=f"{source_act}(z)·1 = {source_act}(z): gate ← (W, b), up ← (0, 1)")
    if method == "sigmoid":
        return sigmoid_form_recipe(source_act, target, swish_beta)
    raise ValueError(
        f"init='preserving' cannot convert a {source_act!r} FFN to ffn_type={target!r}: no exact or approximate "
        f"function-preserving mapping exists; allowed for {source_act!r}: "
        f"{', '.join(allowed_preserving_targets(source_act))}; or use init='fresh'"
    )


__all__ = [
    "EXACT_GATED_TARGET",
    "INITS",
    "PRESERVING_METHODS",
    "SIGMOID_FORM_IS_EXACT",
    "SIGMOID_SLOPE",
    "WIDTHS",
    "FfnRecipe",
    "allowed_preserving_targets",
    "ffn_recipe",
    "parse_width",
    "sigmoid_form_recipe",
]
