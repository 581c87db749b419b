"""studies/healing/heal_study.py's analysis: the power-law extrapolation of a healing curve, on curves with known
answers."""

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("heal_study", REPO / "studies" / "healing" / "heal_study.py")
heal_study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(heal_study)


def curve(distances: dict[int, float]) -> list[dict]:
    return [{"step": step, "cosine_mean": 1 - distance} for step, distance in distances.items()]


def test_power_law_projection_solves_an_exact_power_law():
    # 1 − cosine = 0.4 · (step / 40)^−0.5 at steps 0, 40, ..., 320; the fit uses steps ≥ 160 (4 points) and the
    # goal 1 − 0.99 = 0.01 is met at 40 · (0.4 / 0.01)^2 = 64,000 steps.
    points = {0: 0.9} | {s: 0.4 * (s / 40) ** -0.5 for s in range(40, 321, 40)}
    projection = heal_study.power_law_projection(curve(points), 0.99)
    assert projection["exponent"] == pytest.approx(-0.5)
    assert projection["steps"] == pytest.approx(64_000, rel=1e-6)


def test_power_law_projection_no_approach_and_too_few_points():
    flat_then_worse = curve({0: 0.5, 40: 0.3, 80: 0.3, 120: 0.31, 160: 0.32})
    projection = heal_study.power_law_projection(flat_then_worse, 0.99)
    assert projection["exponent"] > 0 and projection["steps"] is None
    assert heal_study.power_law_projection(curve({0: 0.5, 20: 0.4, 40: 0.3}), 0.99) is None  # 2 points ≥ half
    # exactly three points at step ≥ half the last (20, 30, 40) are enough: 1 − cosine = 8 / step → 800 steps
    three = heal_study.power_law_projection(curve({10: 0.9, 20: 0.4, 30: 8 / 30, 40: 0.2}), 0.99)
    assert three["exponent"] == pytest.approx(-1) and three["steps"] == pytest.approx(800)


def test_layer_table_attributes_the_propagated_error_to_layers():
    # propagated error after layers 0, 1, 2: 0.1, 0.08, 0.4 → added +0.1 (25%), −0.02 (−5%), +0.32 (80%)
    layers = [
        {"layer": i, "layer_rel_error_before": 1.0, "layer_rel_error": 0.5, "propagated_rel_error": p}
        for i, p in enumerate((0.1, 0.08, 0.4))
    ]
    table = heal_study.layer_table("t", {"tokens": 64, "activation_bytes": 1e6, "seconds": 1.0, "layers": layers})
    assert "| 0 | - → - | 1.00e+00 → 5.00e-01 | 1.00e-01 | +1.00e-01 (25%) | 0 |" in table
    assert "| 1 | - → - | 1.00e+00 → 5.00e-01 | 8.00e-02 | -2.00e-02 (-5%) | 0 |" in table
    assert "Largest share: layer 2 adds 80% of the propagated error after the last layer (4.00e-01)." in table


def test_the_published_report_holds_its_notes_and_method_text():
    """studies/healing/healing.md is `heal_study.py report --notes studies/healing/healing_notes.md`'s output: the
    analysis added to the report by hand must be in the notes too (a section of studies/healing/healing.md was once not,
    and a rerun of the report would have dropped it), and the method paragraph is the template's."""
    report = (REPO / "studies" / "healing" / "healing.md").read_text(encoding="utf-8")
    notes = "\n".join(
        line
        for line in (REPO / "studies" / "healing" / "healing_notes.md").read_text(encoding="utf-8").strip().splitlines()
        if not line.startswith("<!--")
    )
    assert "Pre-LN with a free residual stream" in notes and notes in report
    method = heal_study.TEMPLATE[heal_study.TEMPLATE.index("Layer-wise healing (`--method layerwise`") :]
    method = method[: method.index("\n\n")]
    assert "{" not in method and method in report
