"""The benchmark works (`python -m studies.benchmark --quick` as a smoke test) and its measuring helpers compute
what they say.

No test here asserts a speed: times on shared CI machines are noise. Structure, finiteness, exact FLOP counts,
the interleaving order and the memory accounting are asserted instead.
"""

import json
import math
import os

import pytest
import torch

from hf_ffn import FfnBertGatedMLP, parameter_matched_glu_width
from studies.benchmark import (
    QUICK,
    UPSTREAM,
    FusedGatedMLP,
    bench_compile,
    cpu_profiler,
    matmul_flops,
    paired_ratio,
    peak_memory_bytes,
    run_benchmark,
    time_interleaved,
)
from studies.benchmark import main as bench_main
from studies.benchmark import run as benchmark_run

from .conftest import tiny_config

VARIANTS = {UPSTREAM, "default (gelu, Post-LN)", "geglu d=256", "swiglu d=256", "gelu, Pre-LN"}


def _finite_positive(value) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory):
    """One `python -m studies.benchmark --quick` run (the CI smoke test, a few seconds): its JSON document and
    markdown."""
    out = tmp_path_factory.mktemp("bench")
    assert bench_main(["--quick", "--output-dir", str(out)]) == 0
    return json.loads((out / "benchmarks.json").read_text()), (out / "benchmarks.md").read_text()


def test_quick_models_section(quick_results):
    results, _ = quick_results
    rows = results["models"]
    hidden = QUICK.base_config["hidden_size"]
    # tiny (quick) checkpoint only; every attention × mode × variant once.
    assert {(r["checkpoint"], r["attn"], r["mode"], r["variant"]) for r in rows} == {
        ("tiny (quick)", attn, mode, variant)
        for attn in ("eager", "sdpa")
        for mode in ("inference", "training")
        for variant in VARIANTS
    }
    assert len(rows) == 20
    for r in rows:
        for key in ("median_ms", "tokens_per_s", "ratio", "ratio_min", "ratio_max"):
            assert _finite_positive(r[key]), (r["variant"], key, r[key])
        assert r["ratio_min"] <= r["ratio"] <= r["ratio_max"]
        assert len(r["times_ms"]) == QUICK.repeats
        if r["variant"] == UPSTREAM:
            assert r["ratio"] == 1.0 and r["memory_ratio"] == 1.0
        if r["mode"] == "training":
            # Gradients alone are 4 bytes per trained parameter (all but the pooler, outside the loss).
            pooler = hidden * hidden + hidden
            assert r["peak_memory_mb"] * 2**20 >= 4 * (r["parameters"] - pooler), r
    default_inference = [r for r in rows if r["variant"] == "default (gelu, Post-LN)" and r["mode"] == "inference"]
    assert [r["equal_to_upstream"] for r in default_inference] == [True, True]  # the benchmark's parity check


def test_quick_ffn_compile_scaling_load_sections(quick_results):
    results, _ = quick_results
    width = parameter_matched_glu_width(QUICK.base_config["intermediate_size"])
    rows = {r["ffn"]: r for r in results["ffn"]["rows"]}
    assert set(rows) == {
        "gelu d=96",
        f"geglu d={width}",
        f"swiglu d={width}",
        f"geglu d={width} fused gate+up (prototype)",
        f"swiglu d={width} fused gate+up (prototype)",
    }
    tokens, hidden = QUICK.ffn_tokens, QUICK.base_config["hidden_size"]
    assert rows["gelu d=96"]["matmul_gflop"] == 2 * tokens * hidden * 96 * 2 / 1e9
    assert rows[f"swiglu d={width}"]["matmul_gflop"] == 2 * tokens * hidden * width * 3 / 1e9
    for name, r in rows.items():
        for key in ("median_ms", "gflops", "matmul_gflops", "fraction"):
            assert _finite_positive(r[key]), (name, key)
        assert (r["ratio_to_gelu"] is None) == (name == "gelu d=96")
    assert set(results["ffn"]["fused_bitwise_equal"]["tiny (quick)"]) == {"geglu", "swiglu"}
    profile_ops = {p["op"] for p in results["ffn"]["profiles"]["tiny (quick)"][f"swiglu d={width}"]}
    assert "aten::addmm" in profile_ops

    assert results["compile"] == [{"status": "skipped", "error": "not run (--quick or --no-compile)"}]
    scaling = results["scaling"]
    assert [(r["axis"], r["batch_size"], r["seq_len"]) for r in scaling] == [
        ("seq_len", 2, 8),
        ("seq_len", 2, 16),
        ("batch_size", 1, 8),
        ("batch_size", 2, 8),
    ]
    assert scaling[0]["time_growth"] == 1.0 and scaling[2]["memory_growth"] == 1.0
    assert all(_finite_positive(r["median_ms"]) and r["peak_memory_mb"] > 0 for r in scaling)
    assert _finite_positive(results["load"]["ratio"])

    # 4 default-vs-upstream + 3 matmul fractions + 2 GLU-vs-GELU + 1 load (the fused prototype has no target).
    assert len(results["targets"]) == 10
    assert not any("prototype" in t["target"] for t in results["targets"])
    for t in results["targets"]:
        assert _finite_positive(t["measured"]) and t["min"] <= t["measured"] <= t["max"], t
        assert t["met"] == (t["measured"] <= t["limit"] if t["op"] == "≤" else t["measured"] >= t["limit"])
        assert t["limit_within_spread"] == (t["min"] <= t["limit"] <= t["max"])
    command = results["meta"]["command"]
    assert command == "python -m studies.benchmark --quick --output-dir " + command.split()[-1]


def test_quick_markdown(quick_results):
    results, markdown = quick_results
    for heading in (
        "## Targets",
        "## Models",
        "## FFN modules",
        "## torch.compile",
        "## Scaling",
        "## from_pretrained",
    ):
        assert heading in markdown
    for target in results["targets"]:
        assert f"| {target['target']} | {target['measured']:.3f} [{target['min']:.3f}–" in markdown
    assert markdown.count("| tiny (quick) | ") == 20 + 5 + sum(
        len(p) for p in results["ffn"]["profiles"]["tiny (quick)"].values()
    )


def test_failed_run_writes_nothing(tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(benchmark_run, "bench_models", fail)  # the name `run_benchmark` calls
    with pytest.raises(RuntimeError, match="boom"):
        run_benchmark(QUICK, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_compile_failure_is_recorded(monkeypatch):
    def broken_compile(*args, **kwargs):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(torch, "compile", broken_compile)
    rows = bench_compile(32, 96, QUICK)
    assert [r["ffn"] for r in rows] == ["gelu d=96", "geglu d=256", "swiglu d=256"]
    assert all(r["status"] == "failed" and r["error"] == "RuntimeError: no C++ compiler" for r in rows)


def test_time_interleaved_rotates_order():
    calls = []
    fns = {name: (lambda n=name: calls.append(n)) for name in "abc"}
    times = time_interleaved(fns, repeats=3, warmup=1)
    assert "".join(calls) == "abc" + "abc" + "bca" + "cab"
    assert all(len(t) == 3 and all(s >= 0 for s in t) for t in times.values())
    with pytest.raises(ValueError, match="clock must be one of wall, cpu, got 'gpu'"):
        time_interleaved(fns, repeats=1, warmup=0, clock="gpu")


def test_paired_ratio():
    assert paired_ratio([2.0, 4.0, 9.0], [1.0, 2.0, 3.0]) == {"ratio": 2.0, "ratio_min": 2.0, "ratio_max": 3.0}


def test_peak_memory_bytes_counts_live_tensors():
    def fn():
        a = torch.empty(2**18)  # 1 MiB of float32
        b = torch.empty(2**19)  # 2 MiB, while `a` is alive: peak 3 MiB
        del a, b
        c = torch.empty(2**19)  # 2 MiB after both were freed: not a new peak
        return c.shape

    assert peak_memory_bytes(fn) == 3 * 2**20


def test_matmul_flops():
    assert matmul_flops(10, [(4, 6), (6, 4)]) == 2 * 10 * 4 * 6 * 2


def test_fused_prototype_matches_separate_projections():
    config = tiny_config(ffn_type="swiglu", intermediate_size=37)
    torch.manual_seed(0)
    gated = FfnBertGatedMLP(config, "swiglu").eval()
    fused = FusedGatedMLP(gated).eval()
    x = torch.randn(3, 5, config.hidden_size)
    # One (hidden → 2·37) matmul instead of two (hidden → 37): float32 sums may be blocked differently, hence
    # a tolerance; gate rows first is checked by swapping the halves, which must change the output.
    torch.testing.assert_close(fused(x), gated(x), rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        fused.gate_up.weight.copy_(fused.gate_up.weight.roll(37, dims=0))
        fused.gate_up.bias.copy_(fused.gate_up.bias.roll(37, dims=0))
    assert not torch.allclose(fused(x), gated(x), atol=1e-3)


def test_bad_repeats_is_rejected(capsys):
    with pytest.raises(SystemExit):
        bench_main(["--quick", "--repeats", "0"])
    assert "--repeats must be a positive integer, got 0" in capsys.readouterr().err


def test_quick_mode_does_not_judge_targets(quick_results):
    # Tiny sizes measure overheads: the quick document lists each target's number but no MET/MISS verdict.
    results, markdown = quick_results
    assert markdown.count("| not judged (--quick) |") == len(results["targets"]) == 10
    assert "**no**" not in markdown


def test_profiler_banner_lines_are_dropped_and_real_stderr_kept(capfd):
    # Kineto writes "USDT: ... profiler_start/stop" to fd 2 on every profile; anything else written there stays.
    with cpu_profiler() as prof:
        torch.ones(4).add_(1)
        os.write(2, b"a real warning\n")
    err = capfd.readouterr().err
    assert "a real warning" in err
    assert not [line for line in err.splitlines() if line.startswith(("USDT:", "STAGE:"))], err
    assert any(a.key.startswith("aten::add") for a in prof.key_averages())
