"""How the benchmark measures: interleaved timing, paired ratios, peak memory from the profiler's allocator events,
per-op profiles and aten op counts (the method is described in `studies.benchmark`)."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import torch

JSON_NAME, MARKDOWN_NAME = "benchmarks.json", "benchmarks.md"
# "wall": elapsed time, what a user waits. "cpu": CPU seconds of all the process's threads, which leaves out the
# time spent waiting for a core while other processes run (use with --threads 1: OpenMP threads that spin while
# waiting for each other burn CPU time too).
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


def log(message: str) -> None:
    """Print one progress line now (flushed: the run takes minutes)."""
    print(message, flush=True)


# ---------------------------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------------------------
def time_interleaved(
    fns: Mapping[str, Callable[[], object]], repeats: int, warmup: int, clock: str = "wall"
) -> dict[str, list[float]]:
    """Seconds of each call on `clock`, candidates interleaved.

    Every fn is called `warmup` times first (untimed: allocator, MKL and kernel-selection warm-up), then in
    `repeats` rounds, each calling every fn once; round r starts at the r-th fn (rotation), so no candidate always
    runs right after the same other one. `clock` is one of `CLOCKS`.

    Returns:
        name → list of `repeats` seconds, index = round.
    """
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
    now = CLOCKS[clock]
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    times: dict[str, list[float]] = {name: [0.0] * repeats for name in names}
    for r in range(repeats):
        for k in range(len(names)):
            name = names[(r + k) % len(names)]
            start = now()
            fns[name]()
            times[name][r] = now() - start
    return times


def paired_ratio(numerator: list[float], denominator: list[float]) -> dict[str, float]:
    """Median, min and max over rounds of `numerator[r] / denominator[r]` (times of the same rounds)."""
    ratios = [a / b for a, b in zip(numerator, denominator, strict=True)]
    return {"ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}


CPU_DEVICE = 0  # `Device Type` of a CPU allocation in the profiler's trace (c10::DeviceType::CPU)
# Lines that torch's profiler back end (kineto) writes straight to file descriptor 2 on every start and stop.
PROFILER_BANNER_PREFIXES = ("USDT:", "STAGE:")


@contextlib.contextmanager
def cpu_profiler(**kwargs) -> Iterator[torch.profiler.profile]:
    """`torch.profiler.profile` over CPU activities, without kineto's `USDT: ... profiler_start/stop` lines.

    Kineto prints them from C++ to file descriptor 2 (no log level turns them off), dozens per benchmark run,
    where they read like failures. Standard error is sent to a temporary file for the profiled block and
    everything but those lines is written back afterwards, so real warnings and errors still show.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], **kwargs) as prof:
                yield prof
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [
                line
                for line in captured.read().decode(errors="replace").splitlines(keepends=True)
                if not line.startswith(PROFILER_BANNER_PREFIXES)
            ]
            sys.stderr.write("".join(kept))


def peak_memory_bytes(fn: Callable[[], object], setup: Callable[[], object] | None = None) -> int:
    """Peak live CPU tensor bytes during one call of `fn`, above what was live before it (see module docstring).

    Uses the allocation/free events that `torch.profiler` records with `profile_memory=True`, read through its
    public trace export (`export_chrome_trace`: "[memory]" instant events, `args.Bytes` in bytes, frees negative,
    `args["Device Type"]` 0 for the CPU), summed in time order; the result is the largest partial sum (0 if
    nothing was allocated). `setup` runs first, outside the measurement: e.g. freeing a training step's
    gradients, which the step would otherwise free itself (as a negative event) before allocating new ones.
    """
    if setup is not None:
        setup()
    with cpu_profiler(profile_memory=True) as prof:
        fn()
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    memory = sorted(
        (e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == CPU_DEVICE),
        key=lambda e: e["ts"],
    )  # stable: events of one timestamp keep the trace's order
    live = peak = 0
    for event in memory:
        live += event["args"]["Bytes"]
        peak = max(peak, live)
    return peak


def op_profile(fn: Callable[[], object], calls: int = 3, top: int = 6) -> list[dict]:
    """Where the time of `fn` goes: the `top` aten ops by self CPU time over `calls` profiled calls.

    Returns rows `{"op", "calls_per_run", "self_ms_per_run", "share"}`; share = the op's fraction of the total
    self time of all ops.
    """
    fn()  # warm
    with cpu_profiler() as prof:
        for _ in range(calls):
            fn()
    averages = [a for a in prof.key_averages() if a.key.startswith("aten::")]
    total = sum(a.self_cpu_time_total for a in averages) or 1.0
    averages.sort(key=lambda a: a.self_cpu_time_total, reverse=True)
    return [
        {
            "op": a.key,
            "calls_per_run": a.count // calls,
            "self_ms_per_run": a.self_cpu_time_total / calls / 1e3,
            "share": a.self_cpu_time_total / total,
        }
        for a in averages[:top]
    ]


def measure(
    fns: Mapping[str, Callable[[], object]],
    repeats: int,
    warmup: int,
    clock: str = "wall",
    setups: Mapping[str, Callable[[], object]] | None = None,
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Peak memory, then interleaved times, of each fn: `(times, peak_bytes)`.

    The first call of each fn runs under the memory profiler (`peak_memory_bytes`, after `setups[name]` if given)
    and doubles as its first warm-up call (the profiler's overhead never enters a timed call); then
    `time_interleaved` with the remaining `warmup - 1` warm-up calls.
    """
    setups = setups or {}
    memory = {name: peak_memory_bytes(fn, setups.get(name)) for name, fn in fns.items()}
    return time_interleaved(fns, repeats, max(warmup - 1, 0), clock), memory


def aten_op_counts(fn: Callable[[], object]) -> dict[str, int]:
    """How many times each aten op runs in one call of `fn` (torch.profiler): two callables with equal counts
    launch the same kernels, so any time difference between them is Python overhead or noise."""
    with cpu_profiler() as prof:
        fn()
    return {a.key: a.count for a in prof.key_averages() if a.key.startswith("aten::")}


def median_ms(seconds: list[float]) -> float:
    """The median of `seconds`, in milliseconds."""
    return statistics.median(seconds) * 1e3


__all__ = [
    "cpu_profiler",
    "CLOCKS",
    "aten_op_counts",
    "log",
    "measure",
    "median_ms",
    "op_profile",
    "paired_ratio",
    "peak_memory_bytes",
    "time_interleaved",
]
