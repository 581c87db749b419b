"""The variant comparison: statistics over seeds and test snippets, the starting points' linear probe, the markdown
table and the validation-curve plot (`studies/variant_comparison/compare_variants.py` runs the fine-tunings and calls
these).

Two kinds of noise, two intervals, both paired against the baseline:

- `paired_t_interval`: seed noise. For each seed s the difference d_s = metric(variant, s) − metric(baseline, s);
  mean(d) ± t_{0.975, n−1} · sd(d) / √n (Student's t with n − 1 degrees of freedom; sd with denominator n − 1).
  It says how much the difference moves when training is rerun with another seed, on this test set.
- `paired_bootstrap`: test-set noise. Per test snippet i, the seed-averaged correctness difference
  d_i = mean_s(correct(variant, s, i) − correct(baseline, s, i)); its mean is the accuracy difference. The snippets
  are resampled with replacement (the same indices for both, hence paired) and the 2.5 / 97.5 percentiles of the
  resampled means form the interval (Efron & Tibshirani 1993, percentile interval). It says how much the difference
  moves on another test set of the same size.

A difference is called outside the noise only when both intervals exclude zero.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy import stats

from hf_ffn.comparing import mean_std, paired_t_interval  # the one copy (re-exported here)
from hf_ffn.variants import BASELINE, Variant
from hf_ffn.variants import VARIANTS as NAMED_VARIANTS

VERDICT_NOTE = (
    "How to read the Δ columns: the t interval (over seeds) says how much a difference moves when training is rerun "
    "with other seeds; the bootstrap interval (over the test snippets) how much it moves on another test set of the "
    "same size. A difference is called outside the noise only when both exclude 0. Inside the noise means no "
    "difference was detected at this number of seeds, not that the variants are equal: the interval's width is "
    "the size of a difference this comparison could have missed. Wall time per run depends on the load and threads "
    "of its hour; the speed columns come from one side-by-side measurement (below)."
)
# This study's one variant that is not a library preset: SwiGLU at the parameter-matched width with fresh weights
# (fine-tuned as it is). Its healed row is the library's `swiglu-matched` (pruned, then healed: the healing study's
# swiglu-matched-lw), passed with `--healed swiglu-fresh-matched=FOLDER`.
FRESH_MATCHED = "swiglu-fresh-matched"


def model_switches(variant: Variant) -> dict[str, str]:
    """The `ModelArguments` switches that build `variant` from a GELU Post-LN checkpoint when fine-tuning."""
    switches = {"ffn_type": variant.ffn_type, "ffn_init": variant.init} if variant.ffn_type else {}
    if variant.width != "keep":
        switches["ffn_width"] = str(variant.width)
    if variant.layer_norm_position:
        switches["layer_norm_position"] = variant.layer_norm_position
    return switches


# name → `ModelArguments` switches, in `hf_ffn.variants.VARIANTS` order (the one list); every variant starts from the
# same checkpoint (GELU, Post-LN). The pruned variant needs calibration text, which fine-tuning does not take: this
# study compared `FRESH_MATCHED` in its place.
VARIANTS: dict[str, dict[str, str]] = {
    (FRESH_MATCHED if v.init == "pruned" else name): (
        model_switches(replace(v, init="fresh")) if v.init == "pruned" else model_switches(v)
    )
    for name, v in NAMED_VARIANTS.items()
}
HEALABLE = tuple(FRESH_MATCHED if v.init == "pruned" else name for name, v in NAMED_VARIANTS.items() if not v.exact)
HEALED_SUFFIX = " healed"
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_BATCH = 1_000  # resamples drawn at once (memory: batch × snippets indices)


def healed_name(variant: str) -> str:
    """The table name of `variant` healed by distillation, e.g. "swiglu-approx healed"."""
    return variant + HEALED_SUFFIX


def variant_order(names: Sequence[str]) -> list[str]:
    """`names` in table order: each converted variant, then its healed form."""
    order = [name for variant in VARIANTS for name in (variant, healed_name(variant))]
    return sorted(names, key=lambda name: order.index(name) if name in order else len(order))


def parse_healed(items: Sequence[str], check_folders: bool = True) -> dict[str, str]:
    """`["swiglu-approx=PATH", ...]` → {"swiglu-approx healed": PATH}. `check_folders=False` checks only the
    names (a report rewritten from recorded runs needs no student folder).

    Raises:
        ValueError: naming `--healed` and the item when it is not VARIANT=FOLDER with VARIANT in `HEALABLE`, the
            folder has no config.json, or its `ffn_type` / `layer_norm_position` are not the variant's.
    """
    healed = {}
    for item in items:
        variant, _, path = item.partition("=")
        if variant not in HEALABLE or not path:
            raise ValueError(f"--healed {item!r}: expected VARIANT=FOLDER with VARIANT one of {', '.join(HEALABLE)}")
        if check_folders:
            check_healed_folder(item, variant, Path(path))
        healed[healed_name(variant)] = path
    return healed


def check_healed_folder(item: str, variant: str, path: Path) -> None:
    """Raise a ValueError naming `--healed ITEM` unless `path` is a checkpoint folder of `variant`'s `ffn_type` and
    `layer_norm_position`."""
    if not (path / "config.json").is_file():
        raise ValueError(f"--healed {item!r}: {str(path)!r} is not a checkpoint folder (no config.json)")
    config = json.loads((path / "config.json").read_text())
    for field, default in (("ffn_type", "gelu"), ("layer_norm_position", "post")):
        want, have = VARIANTS[variant].get(field, default), config.get(field, default)
        if ({have} if isinstance(have, str) else set(have)) != {want}:  # one name, or one per layer
            raise ValueError(f"--healed {item!r}: {str(path)!r} has {field}={have!r}, but {variant} has {want!r}")


# The healing study's folder names (studies/healing/heal_study.py) → the comparison's variants: the end-to-end study's,
# then the layer-wise study's (a later name wins where a --heal-dir holds both).
HEAL_STUDY_NAMES = {
    "swiglu-approx": "swiglu-approx",
    "swiglu-fresh": "swiglu-fresh-matched",
    "pre-ln": "pre-ln",
    "swiglu-approx-lw": "swiglu-approx",
    "swiglu-matched-lw": "swiglu-fresh-matched",
    "pre-ln-lw": "pre-ln",
}


def probes_from_healing(reports: dict[str, dict]) -> dict[str, dict]:
    """The linear probes of the starting points, from the healing study's records (its folder name → a healed
    folder's conversion_report.json, whose `healing` entry has `before`/`after` measured on all snippets): the
    baseline is the teacher, each healed variant its student after healing, and each converted variant its student
    before healing where that student is the variant as the comparison builds it (the report's `init` is the
    variant's `ffn_init`, default "preserving"; a study student converted otherwise, e.g. `init="pruned"` for the
    matched-width SwiGLU, gives only its healed row).

    Returns:
        {comparison variant name: {"accuracy", "std", "snippets"}}; variants without a record are left out.
    """
    probes: dict[str, dict] = {}
    for study_name, report in reports.items():
        variant, healing = HEAL_STUDY_NAMES[study_name], report["healing"]
        snippets = healing["before"]["agreement"]["texts"]
        teacher = healing["before"]["probe"]["teacher"]
        probes[BASELINE] = {"accuracy": teacher["accuracy"], "std": teacher["std"], "snippets": snippets}
        sides = [(healed_name(variant), "after")]
        if report.get("init") == VARIANTS[variant].get("ffn_init", "preserving"):
            sides.append((variant, "before"))
        for name, side in sides:
            student = healing[side]["probe"]["student"]
            probes[name] = {"accuracy": student["accuracy"], "std": student["std"], "snippets": snippets}
    return probes


def paired_bootstrap(
    correct: np.ndarray,
    baseline_correct: np.ndarray,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float, float]:
    """(mean, low, high): the accuracy difference variant − baseline and its paired percentile-bootstrap interval
    over test snippets (`scipy.stats.bootstrap`, `paired=True`, `method="percentile"`).

    `correct`, `baseline_correct`: (seeds, snippets) 0/1 arrays, row s of both from the same seed. Each resample
    draws snippet indices with replacement (the same indices for both: paired; numpy generator seeded by `seed`)
    and takes the difference of the seed-averaged accuracies at those indices. Resamples are drawn in batches of
    `BOOTSTRAP_BATCH`, so memory stays at batch × snippets.

    Raises:
        ValueError: if the shapes differ.
    """
    correct, baseline_correct = np.asarray(correct, dtype=float), np.asarray(baseline_correct, dtype=float)
    if correct.shape != baseline_correct.shape:
        raise ValueError(f"paired_bootstrap: shapes differ: {correct.shape} vs baseline {baseline_correct.shape}")
    variant, baseline = correct.mean(axis=0), baseline_correct.mean(axis=0)  # (snippets,) each
    mean = float((variant - baseline).mean())
    if np.array_equal(variant, baseline):  # every resample gives 0 (scipy would warn of degenerate data)
        return mean, 0.0, 0.0

    def difference(v: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        return v.mean(axis=axis) - b.mean(axis=axis)

    result = stats.bootstrap(
        (variant, baseline),
        difference,
        paired=True,
        vectorized=True,
        n_resamples=resamples,
        batch=BOOTSTRAP_BATCH,
        confidence_level=confidence,
        method="percentile",
        random_state=np.random.default_rng(seed),
    )
    return mean, float(result.confidence_interval.low), float(result.confidence_interval.high)


def last_fifth_change(
    curve: Sequence[dict], key: str = "eval_loss", start: float = 0.8, end: float = 1.0
) -> dict[str, float]:
    """How flat `key` is over the last fifth of training (or the window [start, end] of the run, as fractions of
    the last step), from the eval points (dicts with "step" and `key`) at start · last ≤ step ≤ end · last: the
    least-squares slope per step, and the change over the window relative to the mean value there
    (slope · (end − start) · last / mean, so −0.01 means the loss fell 1% over the window)."""
    last = max(point["step"] for point in curve)
    window = [point for point in curve if start * last <= point["step"] <= end * last]
    steps = np.array([point["step"] for point in window], dtype=float)
    values = np.array([point[key] for point in window], dtype=float)
    slope = float(np.polyfit(steps, values, 1)[0]) if len(window) > 1 else math.nan
    relative = float(slope * (end - start) * last / values.mean())
    return {"points": len(window), "slope_per_step": slope, "relative_change": relative}


def encode_ids(ids: Sequence[int]) -> str:
    """Class ids 0–9 as a string of digits (one character per snippet: compact in JSON).

    Raises:
        ValueError: for an id outside 0–9.
    """
    if any(not 0 <= i <= 9 for i in ids):
        raise ValueError("encode_ids: class ids must be 0-9 (one digit each)")
    return "".join(map(str, ids))


def correctness(runs: Sequence[dict]) -> np.ndarray:
    """(runs, snippets) 0/1: whether each run's test prediction (`encode_ids` strings "test_predicted" /
    "test_labels") is right.

    Raises:
        ValueError: if the runs' label strings differ (the test snippets would not line up).
    """
    labels = {run["test_labels"] for run in runs}
    if len(labels) != 1:
        raise ValueError("the runs' test labels differ: their test snippets are not in the same order")
    truth = np.frombuffer(labels.pop().encode(), dtype=np.uint8)
    return np.stack([np.frombuffer(run["test_predicted"].encode(), dtype=np.uint8) == truth for run in runs])


def _cell(values: Sequence[float], digits: int = 4) -> str:
    mean, sd = mean_std(values)
    return f"{mean:.{digits}f} ± {sd:.{digits}f}" if len(values) > 1 else f"{mean:.{digits}f}"


def _interval(mean: float, low: float, high: float) -> str:
    return f"{100 * mean:+.2f} [{100 * low:+.2f}, {100 * high:+.2f}]"


def paired_difference(runs: Sequence[dict], reference: Sequence[dict]) -> dict[str, str] | None:
    """`runs` − `reference` on the seeds both have, formatted: "accuracy" and "f1" (`paired_t_interval` over
    seeds), "bootstrap" (`paired_bootstrap` of accuracy over test snippets), each "mean [low, high]" in points, and
    "verdict" ("**outside the noise**" when both accuracy intervals exclude 0, else "inside the noise"). None with
    fewer than 2 paired seeds."""
    by_seed = {run["seed"]: run for run in reference}
    paired = [run for run in runs if run["seed"] in by_seed]
    if len(paired) < 2:
        return None
    accuracy = paired_t_interval([r["test_accuracy"] - by_seed[r["seed"]]["test_accuracy"] for r in paired])
    f1 = paired_t_interval([r["test_f1"] - by_seed[r["seed"]]["test_f1"] for r in paired])
    bootstrap = paired_bootstrap(correctness(paired), correctness([by_seed[r["seed"]] for r in paired]))
    outside = all(low > 0 or high < 0 for _, low, high in (accuracy, bootstrap))
    return {
        "accuracy": _interval(*accuracy),
        "f1": _interval(*f1),
        "bootstrap": _interval(*bootstrap),
        "verdict": "**outside the noise**" if outside else "inside the noise",
    }


def base_variant(name: str) -> str:
    """The converted variant a table row was built from: "pre-ln healed" → "pre-ln" (same architecture)."""
    return name.removesuffix(HEALED_SUFFIX)


def report(
    runs: Sequence[dict],
    probes: dict[str, dict],
    header: dict,
    throughput: dict | None = None,
    longer: Sequence[dict] = (),
) -> str:
    """The markdown report: settings and machine (`header`; its optional "notes", markdown, follow the table), the
    table (one row per variant), the paired
    differences from the baseline, the probes, the baseline's convergence check and the side-by-side training
    throughput (`throughput`, from `studies.variant_comparison.variant_throughput.measure_throughput`; a healed
    variant gets its converted variant's row, the same architecture) and, given `longer` runs,
    `longer_budget_lines`."""
    speeds = (throughput or {}).get("variants", {})
    names = variant_order({run["variant"] for run in runs})
    by_variant = {name: sorted((r for r in runs if r["variant"] == name), key=lambda r: r["seed"]) for name in names}
    lines = [
        "| variant | seeds | test accuracy | test F1 (macro) | Δ accuracy vs baseline, points: t 95% CI (seeds) | "
        "Δ accuracy: bootstrap 95% CI (snippets) | Δ F1, points: t 95% CI | verdict | linear probe of the start | "
        "training real tokens/s (side by side) | time per step ÷ baseline's [min–max] | wall s / run (torch threads) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        rows = by_variant[name]
        t_acc = t_f1 = boot = "–"
        verdict = (
            "baseline"
            if name == BASELINE
            else "no baseline runs"
            if BASELINE not in by_variant
            else "fewer than 2 paired seeds"
        )
        if name != BASELINE and (paired := paired_difference(rows, by_variant.get(BASELINE, []))):
            t_acc, t_f1, boot, verdict = paired["accuracy"], paired["f1"], paired["bootstrap"], paired["verdict"]
        probe = probes.get(name)
        probe_cell = f"{probe['accuracy']:.4f}" if probe else "–"
        speed = speeds.get(base_variant(name))
        speed_cells = (
            f"{speed['real_tokens_per_s']:.0f} | {speed['ratio']:.3f} [{speed['ratio_min']:.3f}–"
            f"{speed['ratio_max']:.3f}]"
            if speed
            else "– | –"
        )
        lines.append(
            f"| {name} | {', '.join(str(r['seed']) for r in rows)} | {_cell([r['test_accuracy'] for r in rows])} | "
            f"{_cell([r['test_f1'] for r in rows])} | {t_acc} | {boot} | {t_f1} | {verdict} | {probe_cell} | "
            f"{speed_cells} | {statistics.mean(r['wall_seconds'] for r in rows):.0f} "
            f"({', '.join(str(t) for t in sorted({r['threads'] for r in rows}))}) |"
        )
    loads = [run["load_before"] for run in runs] + [run["load_after"] for run in runs]
    text = [header["title"], "", header["intro"], "", "\n".join(lines), "", VERDICT_NOTE, ""]
    if header.get("notes"):  # the reading of this table, written by hand (compare_variants.py --notes)
        text += [header["notes"].strip(), ""]
    if BASELINE in by_variant:
        text += [
            "Baseline convergence, validation loss over the last fifth of training (least-squares slope; "
            "relative change over the fifth):",
            "",
        ]
        for run in by_variant[BASELINE]:
            change = last_fifth_change(run["curve"])
            before = last_fifth_change(run["curve"], start=0.6, end=0.8)
            if change["points"] < 2 or before["points"] < 2:
                text.append(
                    f"- seed {run['seed']}: fewer than 2 eval points in a fifth of training: no slope "
                    f"(evaluate more often, --eval_steps)"
                )
                continue
            text.append(
                f"- seed {run['seed']}: {change['points']} eval points, slope {change['slope_per_step']:.2e}"
                f" / step, relative change {100 * change['relative_change']:+.2f}% (the fifth before: "
                f"{100 * before['relative_change']:+.2f}%)"
            )
        text.append("")
    text += longer_budget_lines(runs, longer)
    healing_rows = [
        (name, paired_difference(by_variant[name], by_variant[base_variant(name)]))
        for name in names
        if name.endswith(HEALED_SUFFIX) and base_variant(name) in by_variant
    ]
    if healing_rows:
        text += [
            "What healing changes in fine-tuning: healed − as converted, accuracy points, paired by seed (t 95% "
            "CI) and by test snippet (bootstrap 95% CI):",
            "",
        ]
        text += [
            f"- {name}: "
            + (
                f"{paired['accuracy']} (seeds), {paired['bootstrap']} (snippets): {paired['verdict']}"
                if paired
                else "fewer than 2 paired seeds"
            )
            for name, paired in healing_rows
        ]
        text.append("")
    if probes:
        text += [
            "Linear probe (5-fold logistic regression on frozen mean-pooled embeddings of "
            f"{next(iter(probes.values()))['snippets']} rt_polarity snippets) of each starting point:",
            "",
        ]
        text += [
            f"- {name}: {probes[name]['accuracy']:.4f} ± {probes[name]['std']:.4f} (folds)"
            for name in variant_order(probes)
        ]
        text.append("")
    if throughput:
        settings = throughput["settings"]
        text += [
            f"Throughput ({', '.join(variant_order(throughput['variants']))}): each classification model built "
            f"as the runs build it (unpad_tokens "
            f"{'on' if throughput['unpad_tokens'] else 'off'}), timed side by side in one process: "
            f"{settings['repeats']} interleaved rounds of one training step (forward + backward, no optimizer "
            f"step) on {settings['batches']} length-grouped batches of {settings['batch_size']} rt_polarity "
            f"snippets (max_seq_length {settings['max_seq_length']}); real tokens/s: median over rounds of the "
            f"round's real tokens / its time; ratio: median of the per-round time ratios. "
            f"{throughput['threads']} torch thread(s), load average (1 min) "
            f"{throughput['load_before']:.2f} before, {throughput['load_after']:.2f} after; "
            f"{throughput['versions']}. A healed variant has its converted variant's architecture and speed.",
            "",
        ]
    thread_counts = sorted({run["threads"] for run in runs})
    per_threads = ", ".join(f"{count} ({sum(run['threads'] == count for run in runs)} runs)" for count in thread_counts)
    # runs resumed or added later may have run on another machine: each one named, with its number of runs
    machines = {f"{r['machine']['cpu']}, {r['machine']['cores']} logical cores": 0 for r in runs if "machine" in r}
    for run in (r for r in runs if "machine" in r):
        machines[f"{run['machine']['cpu']}, {run['machine']['cores']} logical cores"] += 1
    machine_text = (
        "; ".join(f"{name} ({count} runs)" for name, count in machines.items())
        if len(machines) > 1
        else f"{header['machine']['cpu']}, {header['machine']['cores']} logical cores"
    )
    text += [
        f"Machine: {machine_text}; "
        f"torch threads per run: {per_threads}; load average (1 min) before/after each run: "
        f"{min(loads):.2f}–{max(loads):.2f}. Versions: {header['versions']}. Run time: "
        f"{sum(r['wall_seconds'] for r in runs) / 3600:.2f} h summed over {len(runs)} runs.",
        "",
        f"Command: `{header['command']}`",
        "",
    ]
    return "\n".join(text)


def longer_budget_lines(runs: Sequence[dict], longer: Sequence[dict]) -> list[str]:
    """Markdown lines comparing each variant of `longer` (the same runs at a larger `max_steps`, e.g. two epochs)
    with its runs in `runs`: test accuracy mean ± std at both budgets and the paired difference longer − shorter
    (`paired_difference`: seeds and test snippets). Says whether the shorter budget had converged in accuracy."""
    if not longer:
        return []
    steps = longer[0]["settings"]["max_steps"]
    lines = [
        f"Convergence check: the same runs at {steps} steps instead of {runs[0]['settings']['max_steps']} "
        "(the learning-rate schedule stretched to the longer run), test accuracy, paired by seed and snippet:",
        "",
    ]
    for name in variant_order({run["variant"] for run in longer}):
        long_rows = sorted((r for r in longer if r["variant"] == name), key=lambda r: r["seed"])
        seeds = {r["seed"] for r in long_rows}
        short_rows = [r for r in runs if r["variant"] == name and r["seed"] in seeds]  # the same seeds
        paired = paired_difference(long_rows, short_rows)
        change = (
            f"; longer − shorter {paired['accuracy']} points (seeds), {paired['bootstrap']} (snippets): "
            f"{paired['verdict']}"
            if paired
            else ""
        )
        lines.append(
            f"- {name}: {_cell([r['test_accuracy'] for r in long_rows])} at {steps} steps (seeds "
            f"{', '.join(str(r['seed']) for r in long_rows)}) against "
            f"{_cell([r['test_accuracy'] for r in short_rows])}{change}"
        )
    return lines + [""]


def plot_curves(runs: Sequence[dict], path: Path, title: str) -> None:
    """Validation loss and accuracy against the step, the mean over seeds per variant (PNG at `path`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for index, name in enumerate(variant_order({run["variant"] for run in runs})):
        rows = [run for run in runs if run["variant"] == name]
        steps = [point["step"] for point in rows[0]["curve"]]
        style = "--" if name.endswith(HEALED_SUFFIX) else "-"
        for metric, axis in zip(("eval_loss", "eval_accuracy"), axes, strict=False):
            means = [statistics.mean(run["curve"][i][metric] for run in rows) for i in range(len(steps))]
            axis.plot(steps, means, style, color=f"C{index}", linewidth=1.8, label=f"{name} (n={len(rows)})")
    for axis, label in zip(axes, ("validation loss", "validation accuracy"), strict=False):
        axis.set_xlabel(f"optimizer step (batch {runs[0]['settings']['batch_size']})")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    axes[1].legend(fontsize=8, loc="lower right")
    figure.suptitle(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


__all__ = [
    "BASELINE",
    "BOOTSTRAP_RESAMPLES",
    "FRESH_MATCHED",
    "HEALABLE",
    "HEAL_STUDY_NAMES",
    "VARIANTS",
    "base_variant",
    "correctness",
    "model_switches",
    "encode_ids",
    "healed_name",
    "longer_budget_lines",
    "paired_difference",
    "probes_from_healing",
    "last_fifth_change",
    "mean_std",
    "paired_bootstrap",
    "paired_t_interval",
    "parse_healed",
    "plot_curves",
    "report",
    "variant_order",
]
