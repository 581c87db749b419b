"""The pre-training study's report: Study A (the FFN variants at one recipe) and Study B (Post-LN vs Pre-LN over
learning rate and warm-up), tables and figures from the runs' records.

    python -m studies.pretraining.withdrawn_2m.report  # reads and writes out/pretraining
    python -m studies.pretraining.withdrawn_2m.report --output_dir out/pretraining-smoke --write_to /tmp/smoke-report

Reads OUTPUT_DIR/runs.jsonl and OUTPUT_DIR/corpus.json (`studies.pretraining.withdrawn_2m.run`) and, if it
exists, the step-cost file (`studies.pretraining.withdrawn_2m.step_cost`; default OUTPUT_DIR/step_cost.json).
Writes report.md, study_a_curves.png, study_b_lr.png and study_b_grad_norms.png into --write_to (default OUTPUT_DIR).
Partial data (a study still running, missing seeds) is reported as such.
Nothing depends on the time it runs: the same files give the same report.

Statistics. Paired by seed: d_s = loss(variant, s) − loss(GELU, s); the 95% interval is mean(d) ± t_{0.975,n−1} ·
sd(d)/√n (Student 1908; `hf_ffn.comparing.paired_t_interval`). Equal wall-clock time (ours): a variant whose step
costs r times GELU's gets max_steps / r steps in the time GELU takes for max_steps; its held-out loss there is read
off its eval curve by linear interpolation (capped at max_steps when r < 1). A run 'diverged' when any training or
held-out loss is non-finite; it 'failed' when its final held-out loss is above the unigram baseline (corpus.json).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from hf_ffn.comparing import paired_t_interval  # noqa: E402
from studies.pretraining.withdrawn_2m.records import longer_records, read_records, study_records  # noqa: E402
from studies.pretraining.withdrawn_2m.settings import RUN_DEFAULTS, SIZES, STUDY_A_VARIANTS  # noqa: E402

NAMES = {"relu": "ReLU", "gelu": "GELU", "geglu": "GeGLU", "swiglu": "SwiGLU", "reglu": "ReGLU"}
REFERENCE = "gelu"
STEP_COST_COMMAND = "python -m studies.pretraining.withdrawn_2m.step_cost --threads 2 --output {path}"
FIGURES = ("study_a_curves.png", "study_b_lr.png", "study_b_grad_norms.png")


def label(ffn: str) -> str:
    """The FFN's name as written in the tables ("swiglu" → "SwiGLU")."""
    return NAMES.get(ffn, ffn)


def diverged(record: dict) -> bool:
    """True when any training or held-out loss of the run is non-finite (NaN or ±inf)."""
    losses = [x for _, x in record["train"]] + [x for _, x in record["eval"]] + [record["final_loss"]]
    return not all(math.isfinite(x) for x in losses)


def status(runs: list[dict], unigram: float) -> str | None:
    """'diverged' (a run diverged), 'failed' (mean final held-out loss above `unigram`: no better than token
    frequencies), 'trained', or None without runs."""
    if not runs:
        return None
    if any(diverged(r) for r in runs):
        return "diverged"
    return "failed" if statistics.mean(r["final_loss"] for r in runs) > unigram else "trained"


def eval_curve(record: dict) -> tuple[np.ndarray, np.ndarray]:
    """(steps, held-out losses) of the run, one point per step (the last logged wins), step 0 first."""
    points = {int(step): loss for step, loss in record["eval"]}
    steps = sorted(points)
    return np.array(steps, dtype=float), np.array([points[s] for s in steps])


def mean_curve(runs: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(steps, mean, min, max) of the held-out loss over `runs`, at the eval steps every run has."""
    curves = [dict(zip(*eval_curve(r), strict=True)) for r in runs]
    steps = sorted(set.intersection(*(set(c) for c in curves)))
    values = np.array([[c[s] for s in steps] for c in curves])
    return np.array(steps), values.mean(0), values.min(0), values.max(0)


def loss_at_equal_time(record: dict, ratio: float) -> tuple[float, float, bool]:
    """(steps, held-out loss, capped) of the run in the time GELU takes for max_steps (ours): a step costing `ratio`
    times GELU's leaves max_steps / ratio steps, capped at max_steps (what was run) when ratio < 1; the loss is
    linearly interpolated between the eval points."""
    steps, losses = eval_curve(record)
    target = record["max_steps"] / ratio
    capped = target > record["max_steps"]
    target = min(target, record["max_steps"])
    return target, float(np.interp(target, steps, losses)), capped


def paired(runs: list[dict], reference: list[dict], value=None, reference_value=None) -> tuple[list, tuple | None]:
    """(differences, interval): value(run) − reference_value(reference run of the same seed) (default: final_loss),
    seed by seed, and their (mean, low, high) Student-t 95% interval (`paired_t_interval`), None below 2 pairs."""
    value = value or (lambda r: r["final_loss"])
    by_seed = {r["seed"]: (reference_value or value)(r) for r in reference}
    differences = [value(r) - by_seed[r["seed"]] for r in runs if r["seed"] in by_seed]
    return differences, (paired_t_interval(differences) if len(differences) >= 2 else None)


def interval_text(differences: list[float], interval: tuple | None) -> tuple[str, str]:
    """(the difference with its interval, the verdict with the interval's half-width) for a table."""
    if interval is None:
        return (f"{differences[0]:+.4f}" if differences else "no pair"), f"n={len(differences)}, no interval"
    mean, low, high = interval
    verdict = "separated" if low > 0 or high < 0 else "not separated"
    return f"{mean:+.4f} [{low:+.4f}, {high:+.4f}]", f"{verdict}, half-width {high - mean:.4f}"


def groups_by(runs: list[dict], key, order=()) -> dict:
    """`runs` grouped by key(run), the keys in `order` first, then the others sorted."""
    keys = sorted({key(r) for r in runs}, key=lambda k: (order.index(k) if k in order else len(order), k))
    return {k: [r for r in runs if key(r) == k] for k in keys}


def header_lines(corpus: dict, runs_a: list[dict], runs_b: list[dict], groups: dict) -> list[str]:
    """The corpus, the baselines, the model size and the FFN table."""
    docs, blocks, tokens, base = corpus["documents"], corpus["blocks"], corpus["tokens"], corpus["baselines_nats"]
    lines = [
        f"Corpus: {docs['train']} training / {docs['held_out']} held-out documents, {blocks['train']:,} / "
        f"{blocks['held_out']:,} blocks of {blocks['tokens_per_block']} tokens ({tokens['train']:,} / "
        f"{tokens['held_out']:,} tokens), vocabulary {corpus['vocab_size']:,}.",
    ]
    for name, runs in (("Study A", runs_a), ("Study B", runs_b)):
        if runs:
            r = runs[0]
            lines.append(
                f"{name}: {r['max_steps']} steps per run, {r['tokens_seen']:,} tokens seen, {r['epochs']:.2f} epochs."
            )
    lines += [
        f"Baselines of the held-out loss ({corpus['held_out_masked_tokens']:,} masked tokens): uniform ln V = "
        f"{base['uniform']:.3f} nats, unigram (training-token frequencies, add-one) = {base['unigram']:.3f} nats.",
        "",
        f"Model (settings.py): {SIZES['num_hidden_layers']} layers × hidden {SIZES['hidden_size']}, "
        f"{SIZES['num_attention_heads']} heads, standard FFN {SIZES['intermediate_size']}, "
        f"batch {SIZES['batch_size']}.",
        "",
        "| FFN | width | FFN params (all layers) | vs standard | FFN FLOPs/token (all layers) | MLM model parameters |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for ffn, runs in groups.items():
        f = runs[0]["ffn"]
        ratio = f"{f['ffn_params_vs_standard']:.3f}" if "ffn_params_vs_standard" in f else "1 (standard)"
        lines.append(
            f"| {label(ffn)} | {f['intermediate_size']} | {f['ffn_params_all_layers']:,} | {ratio} | "
            f"{f['ffn_flops_per_token_all_layers']:,} | {runs[0]['parameters']:,} |"
        )
    return lines


def study_a_lines(groups: dict, unigram: float) -> list[str]:
    """Study A at equal steps: loss per variant over seeds and the paired difference from GELU; a run marked †
    diverged, ‡ failed (its final loss above `unigram`)."""
    seeds = sorted({r["seed"] for runs in groups.values() for r in runs})
    reference = groups.get(REFERENCE, [])
    lines = [
        "| FFN | n | held-out loss (mean ± sd) | perplexity | Δ vs GELU, 95% interval | verdict | per seed |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    notes = []
    for ffn, runs in groups.items():
        losses = [r["final_loss"] for r in runs]
        mean = statistics.mean(losses)
        sd = f" ± {statistics.stdev(losses):.4f}" if len(losses) > 1 else ""
        missing = sorted(set(seeds) - {r["seed"] for r in runs})
        per_seed = ", ".join(
            f"s{r['seed']} {r['final_loss']:.4f}" + (" †" if diverged(r) else " ‡" if r["final_loss"] > unigram else "")
            for r in runs
        )
        per_seed += f" (missing: seed {', '.join(map(str, missing))})" if missing else ""
        if ffn == REFERENCE:
            delta, verdict = "reference", f"n={len(runs)}" + (", no interval" if len(runs) < 2 else "")
        elif not reference:
            delta, verdict = "no GELU runs", ""
        else:
            differences, interval = paired(runs, reference)
            delta, verdict = interval_text(differences, interval)
            if interval:
                notes.append(
                    f"- {label(ffn)}: an interval half-width of {interval[2] - interval[0]:.4f} nats: "
                    "differences smaller than that cannot be told apart."
                )
        lines.append(
            f"| {label(ffn)} | {len(runs)} | {mean:.4f}{sd} | {math.exp(mean):.1f} | {delta} | {verdict} | {per_seed} |"
        )
    lines += ["", "The smallest difference the paired seeds could detect, t_{0.975,n−1} · sd(d)/√n (Student):"]
    return lines + (notes or ["- none: fewer than 2 paired seeds."])


def equal_time_lines(groups: dict, step_cost: dict | None, step_cost_path: Path) -> list[str]:
    """Study A at equal wall-clock time (ours), from the step-cost ratios to GELU."""
    if step_cost is None:
        command = STEP_COST_COMMAND.format(path=step_cost_path)
        return [f"No step-cost file ({step_cost_path}); `{command}` writes it."]
    costs, sizes = step_cost["variants"], step_cost.get("sizes", {})
    if REFERENCE not in costs or REFERENCE not in groups:
        return ["The step-cost file or the runs have no GELU: no equal-time comparison."]
    study = {**SIZES, "seq_len": SIZES["max_seq_length"]}
    other = [f"{k} {v} (study: {study[k]})" for k, v in sizes.items() if k in study and v != study[k]]
    lines = [
        f"Seconds per step measured side by side in one process (`studies.pretraining.withdrawn_2m.step_cost`, "
        f"{step_cost['machine']['threads']} threads)"
        + (f", at other sizes than the study's: {', '.join(other)}." if other else "")
        + ("" if other else ", at the study's sizes." if sizes else ", sizes not recorded.")
        + f" A variant's loss in the time GELU takes for {groups[REFERENCE][0]['max_steps']} steps is read off its "
        "eval curves at max_steps / r (linear interpolation). The learning-rate schedule is the equal-step one: a run "
        "budgeted for a shorter time would decay earlier.",
        "",
        "| FFN | s/step (median) | r vs GELU | s/step in the runs | steps in GELU's time | held-out loss | "
        "Δ vs GELU, 95% interval | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    reference = costs[REFERENCE]["ratio_to_gelu"]
    for ffn, runs in groups.items():
        if ffn not in costs:
            lines.append(f"| {label(ffn)} | not measured | | | | | | |")
            continue
        ratio = costs[ffn]["ratio_to_gelu"]
        steps, _, capped = loss_at_equal_time(runs[0], ratio)
        loss = statistics.mean(loss_at_equal_time(r, ratio)[1] for r in runs)
        differences, interval = paired(
            runs,
            groups[REFERENCE],
            lambda r, q=ratio: loss_at_equal_time(r, q)[1],
            lambda r: loss_at_equal_time(r, reference)[1],
        )
        delta, verdict = ("reference", "") if ffn == REFERENCE else interval_text(differences, interval)
        own = statistics.median(r["train_seconds"] / r["max_steps"] for r in runs)
        lines.append(
            f"| {label(ffn)} | {costs[ffn]['median_s']:.3f} | {ratio:.3f} | {own:.3f} | {steps:.1f}"
            f"{' (capped)' if capped else ''} | {loss:.4f} | {delta} | {verdict} |"
        )
    return lines + ["", "'s/step in the runs': train_seconds / max_steps, evaluations included, runs not interleaved."]


def study_b_lines(cells: dict, unigram: float) -> list[str]:
    """Study B: final held-out loss per (FFN, placement, warm-up) × learning rate, the best rates, Xiong's claim."""
    rows, lrs = sorted({k[:3] for k in cells}), sorted({k[3] for k in cells})
    lines = ["| FFN | LayerNorm | warm-up | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " |", "|---|---|---:|"]
    lines[-1] += "---:|" * len(lrs)
    best = []
    for row in rows:
        texts, finite = [], {}
        for lr in lrs:
            runs = cells.get((*row, lr), [])
            losses = [r["final_loss"] for r in runs if math.isfinite(r["final_loss"])]
            state = status(runs, unigram)
            text = "not run" if not runs else (f"{statistics.mean(losses):.4f}" if losses else "nan")
            text += f" (n={len(runs)})" if len(runs) > 1 else ""
            text += {"diverged": " †", "failed": " ‡"}.get(state, "")
            texts.append(text)
            if state == "trained":
                finite[lr] = statistics.mean(losses)
        lines.append(f"| {label(row[0])} | {row[1]}-LN | {row[2]:g} | " + " | ".join(texts) + " |")
        top = min(finite, key=finite.get) if finite else None
        best.append(
            f"- {label(row[0])}, {row[1]}-LN, warm-up {row[2]:g}: "
            + (f"lr {top:g} ({finite[top]:.4f})" if top else "no learning rate trained")
        )
    lines += [
        "",
        "† diverged: a training or held-out loss is non-finite (NaN/inf). ‡ failed: the final held-out loss is above "
        f"the unigram baseline ({unigram:.3f} nats): it predicts no better than token frequencies, the context unused.",
        "",
        "Best learning rate (lowest final held-out loss among the runs that trained):",
        *best,
        "",
        "Xiong et al. (2020): Post-LN needs warm-up where Pre-LN does not.",
    ]
    return lines + xiong_readout(cells, unigram)


def cell_outcome(cells: dict, unigram: float, key: tuple) -> str | None:
    """`status` of the runs of one Study B cell (ffn, placement, warm-up, lr)."""
    return status(cells.get(key, []), unigram)


def loss_gaps(cells: dict, ffn: str, warmup: float) -> str:
    """Post-LN's minus Pre-LN's mean final held-out loss at each learning rate both have, as text."""
    out = []
    for lr in sorted({k[3] for k in cells if k[0] == ffn}):
        post, pre = cells.get((ffn, "post", warmup, lr), []), cells.get((ffn, "pre", warmup, lr), [])
        if post and pre:
            gap = statistics.mean(r["final_loss"] for r in post) - statistics.mean(r["final_loss"] for r in pre)
            out.append(f"lr {lr:g} {gap:+.3f}")
    return ", ".join(out) or "no pairs"


def xiong_readout(cells: dict, unigram: float) -> list[str]:
    """Per FFN, from the data: the rates where Post-LN without warm-up diverged or failed while Pre-LN without
    warm-up trained, with Post-LN's outcome with warm-up there; else the Post − Pre loss gaps without/with warm-up."""
    lines = []
    for ffn in sorted({k[0] for k in cells}, key=lambda f: (f != REFERENCE, f)):
        lrs = sorted({k[3] for k in cells if k[0] == ffn})
        warmups = sorted({k[2] for k in cells if k[0] == ffn and k[2] > 0})
        post = {lr: cell_outcome(cells, unigram, (ffn, "post", 0.0, lr)) for lr in lrs}
        pre = {lr: cell_outcome(cells, unigram, (ffn, "pre", 0.0, lr)) for lr in lrs}
        if not any(post.values()) or not any(pre.values()):
            lines.append(f"- {label(ffn)}: not both placements without warm-up run yet.")
            continue
        hits = [lr for lr in lrs if post[lr] in ("diverged", "failed") and pre[lr] == "trained"]
        if hits:
            where = ", ".join(f"{post[lr]} at lr {lr:g}" for lr in hits)
            warmed = {(lr, w): cell_outcome(cells, unigram, (ffn, "post", w, lr)) for lr in hits for w in warmups}
            rescued = [key for key, outcome in warmed.items() if outcome == "trained"]
            tried = "; ".join(
                f"with warm-up {w:g}, {outcome or 'not run'} at lr {lr:g}" for (lr, w), outcome in warmed.items()
            )
            verdict = (
                "yes: warm-up rescues Post-LN where Pre-LN needs none"
                if rescued
                else "in part: Pre-LN trains without warm-up at a rate where Post-LN does not, but the warm-up "
                "tried does not rescue Post-LN there (Pre-LN tolerates a larger learning rate)"
            )
            lines.append(
                f"- {label(ffn)}: {verdict}. Post-LN without warm-up {where}, where Pre-LN without warm-up "
                f"trained; Post-LN {tried}."
            )
        else:
            lines.append(
                f"- {label(ffn)}: not seen in these runs: at no learning rate did Post-LN without warm-up diverge or "
                f"fail where Pre-LN without warm-up trained. Post − Pre held-out loss without warm-up: "
                f"{loss_gaps(cells, ffn, 0.0)}"
                + "".join(f"; with warm-up {w:g}: {loss_gaps(cells, ffn, w)}" for w in warmups)
                + "."
            )
    return lines


def save_figure(fig, path: Path) -> None:
    """Lay out, write (120 dpi) and close `fig`."""
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_study_a(groups: dict, step_cost: dict | None, unigram: float, path: Path) -> None:
    """Held-out loss against step (and against estimated seconds when step costs exist): mean over seeds, shaded
    min–max, the unigram baseline dashed."""
    costs = (step_cost or {}).get("variants", {})
    timed = REFERENCE in costs
    fig, axes = plt.subplots(1, 2 if timed else 1, figsize=(11 if timed else 6, 4), squeeze=False)
    bottom, top = (
        unigram - 0.1,
        unigram + 0.5,
    )  # the top clipped: the first steps fall from ln V, not the interesting part
    for ffn, runs in groups.items():
        steps, mean, low, high = mean_curve(runs)
        finite = np.isfinite(low) & np.isfinite(high)
        bottom, top = min(bottom, low[finite].min() - 0.1), max(top, mean[finite][-1] + 0.2)
        xs = [("step", steps)]
        if timed and ffn in costs:
            xs.append(("seconds", steps * costs[REFERENCE]["median_s"] * costs[ffn]["ratio_to_gelu"]))
        for ax, (_, x) in zip(axes[0], xs, strict=False):
            (line,) = ax.plot(x, mean, label=f"{label(ffn)} (n={len(runs)})")
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    for ax, xlabel in zip(axes[0], ("step", "estimated seconds (step × GELU s/step × r)"), strict=False):
        ax.axhline(unigram, color="grey", linestyle="--", linewidth=1, label="unigram baseline")
        ax.set(xlabel=xlabel, ylabel="held-out MLM loss (nats)", ylim=(bottom, top))
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    axes[0][0].set_title("Study A: equal steps")
    if timed:
        axes[0][1].set_title("Study A: against estimated time")
    save_figure(fig, path)


def plot_study_b(cells: dict, unigram: float, path: Path) -> None:
    """Final held-out loss against learning rate per FFN, one line per (placement, warm-up); diverged runs as 'x'
    (at the unigram baseline when their loss is non-finite)."""
    ffns = sorted({k[0] for k in cells}, key=lambda f: (f != REFERENCE, f))
    fig, axes = plt.subplots(1, len(ffns), figsize=(5.5 * len(ffns), 4), squeeze=False, sharey=True)
    for ax, ffn in zip(axes[0], ffns, strict=True):
        for position, warmup in sorted({k[1:3] for k in cells if k[0] == ffn}):
            lrs = sorted(k[3] for k in cells if k[:3] == (ffn, position, warmup))
            runs = [cells[(ffn, position, warmup, lr)] for lr in lrs]
            ys = [statistics.mean(r["final_loss"] for r in rs) for rs in runs]
            ys = [y if math.isfinite(y) else unigram for y in ys]
            (line,) = ax.plot(lrs, ys, "o-", label=f"{position}-LN, warm-up {warmup:g}")
            bad = [(lr, y) for lr, y, rs in zip(lrs, ys, runs, strict=True) if any(diverged(r) for r in rs)]
            if bad:
                ax.plot(*zip(*bad, strict=True), "x", color=line.get_color(), markersize=12, mew=2)
        ax.axhline(unigram, color="grey", linestyle="--", linewidth=1, label="unigram baseline")
        ax.set(xscale="log", xlabel="peak learning rate", title=f"Study B: {label(ffn)}")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("final held-out MLM loss (nats)")
    axes[0][0].legend(fontsize=8)
    save_figure(fig, path)


def grad_norm_runs(runs_b: list[dict]) -> tuple[float, dict]:
    """(lr, {(warm-up, placement): run}) for the gradient-norm figure: GELU's first seed at lr 3e-3, or the middle
    learning rate of the data."""
    gelu = [r for r in runs_b if r["ffn_type"] == REFERENCE and r["seed"] == min(x["seed"] for x in runs_b)]
    lrs = sorted({r["lr"] for r in gelu})
    if not lrs:
        return math.nan, {}
    lr = 3e-3 if 3e-3 in lrs else lrs[len(lrs) // 2]
    return lr, {(r["warmup_ratio"], r["layer_norm_position"]): r for r in gelu if r["lr"] == lr}


def plot_grad_norms(lr: float, chosen: dict, path: Path) -> None:
    """Per-layer gradient norms before clipping (the logged clipped norms × max(1, g / max_grad_norm), g the total
    pre-clip norm logged at the same step) and g itself in black; panels warm-up × placement, log y."""
    warmups = sorted({k[0] for k in chosen})
    fig, axes = plt.subplots(len(warmups), 2, figsize=(10, 3.3 * len(warmups)), squeeze=False, sharey=True)
    clip = RUN_DEFAULTS["max_grad_norm"]
    for row, warmup in enumerate(warmups):
        for col, position in enumerate(("post", "pre")):
            ax, run = axes[row][col], chosen.get((warmup, position))
            ax.set(title=f"GELU, {position}-LN, lr {lr:g}, warm-up {warmup:g}", yscale="log", xlabel="step")
            if run is None:
                ax.text(0.5, 0.5, "not run", transform=ax.transAxes, ha="center")
                continue
            total = {int(s): g for s, g in run["grad_norm"]}
            steps = [e["step"] for e in run["layer_grad_norms"]]
            pre_clip = [total.get(s, math.nan) for s in steps]  # no total logged at the step: the clipped values
            scale = [max(1.0, g / clip) if math.isfinite(g) else 1.0 for g in pre_clip]
            layers = np.array([e["layers"] for e in run["layer_grad_norms"]]) * np.array(scale)[:, None]
            for layer in range(layers.shape[1]):
                ax.plot(steps, layers[:, layer], label=f"layer {layer}", linewidth=1)
            ax.plot(sorted(total), [total[s] for s in sorted(total)], color="black", label="total (pre-clip)")
            ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("gradient norm")
    axes[0][0].legend(fontsize=7)
    save_figure(fig, path)


def longer_lines(runs: list[dict], unigram: float, grid: list[dict]) -> list[str]:
    """A table of Study B runs longer than the grid: their held-out loss every 100 steps (and at the grid's last
    step), and their status at the end (trained, failed: above `unigram`, diverged)."""
    grid_steps = grid[0]["max_steps"] if grid else None
    steps = sorted({s for r in runs for s, _ in r["eval"] if s % 100 == 0 or s == grid_steps} - {0})
    lines = [
        "| FFN | placement | lr | warm-up | seed | " + " | ".join(f"step {s}" for s in steps) + " | status |",
        "|---|---|---:|---:|---:|" + "---:|" * len(steps) + "---|",
    ]
    for r in runs:
        curve = {int(step): loss for step, loss in r["eval"]}
        cells = " | ".join(f"{curve[s]:.4f}" if s in curve else "" for s in steps)
        lines.append(
            f"| {label(r['ffn_type'])} | {r['layer_norm_position']}-LN | {r['lr']:g} | {r['warmup_ratio']:g} | "
            f"{r['seed']} | {cells} | {status([r], unigram)} |"
        )
    return lines


def write_report(output_dir: Path, step_cost_path: Path, write_to: Path) -> str:
    """Write report.md and the figures into `write_to` from the files of `output_dir`; return the report's text."""
    corpus = json.loads((output_dir / "corpus.json").read_text())
    unigram = corpus["baselines_nats"]["unigram"]
    step_cost = json.loads(step_cost_path.read_text()) if step_cost_path.is_file() else None
    records = read_records(output_dir / "runs.jsonl")
    runs_a, runs_b = study_records(records, "a"), study_records(records, "b")
    groups = groups_by(runs_a, lambda r: r["ffn_type"], STUDY_A_VARIANTS)
    cells = groups_by(runs_b, lambda r: (r["ffn_type"], r["layer_norm_position"], r["warmup_ratio"], r["lr"]))
    write_to.mkdir(parents=True, exist_ok=True)
    lines = ["# Pre-training from scratch: FFN variants (Study A) and LayerNorm placement (Study B)", ""]
    lines += [f"From {output_dir}/runs.jsonl (records: {len(records)}) and {output_dir}/corpus.json.", ""]
    lines += header_lines(corpus, runs_a, runs_b, groups) + ["", "## Study A at equal steps", ""]
    if groups:
        r = runs_a[0]
        lines += [
            f"Post-LN, lr {r['lr']:g}, warm-up {r['warmup_ratio']:g}, {r['max_steps']} steps; final held-out "
            "loss (nats), Δ = variant − GELU paired by seed.",
            "",
        ]
        lines += study_a_lines(groups, unigram) + ["", "## Study A at equal wall-clock time", ""]
        lines += equal_time_lines(groups, step_cost, step_cost_path)
        plot_study_a(groups, step_cost, unigram, write_to / FIGURES[0])
        lines += ["", f"![Study A held-out loss curves]({FIGURES[0]})"]
    else:
        lines.append("No Study A runs yet.")
    lines += ["", "## Study B: Post-LN vs Pre-LN over learning rate and warm-up", ""]
    if cells:
        seeds = sorted({r["seed"] for r in runs_b})
        lines += [
            f"{runs_b[0]['max_steps']} steps, seeds {', '.join(map(str, seeds))}; final held-out loss (nats).",
            "",
        ]
        lines += study_b_lines(cells, unigram)
        plot_study_b(cells, unigram, write_to / FIGURES[1])
        lines += ["", f"![Study B final loss against learning rate]({FIGURES[1]})"]
        lr, chosen = grad_norm_runs(runs_b)
        if chosen:
            plot_grad_norms(lr, chosen, write_to / FIGURES[2])
            lines += [
                "",
                f"Per-layer gradient norms, GELU at lr {lr:g}, seed {min(r['seed'] for r in runs_b)}, before "
                "clipping (logged after clipping, rescaled by the step's total pre-clip norm); black: the "
                "total pre-clip norm.",
                "",
                f"![Study B gradient norms]({FIGURES[2]})",
            ]
    else:
        lines.append("No Study B runs yet.")
    longer = longer_records(records, "b")
    if longer:
        lines += ["", "## Study B: longer runs beside the grid", ""] + longer_lines(longer, unigram, runs_b)
    text = "\n".join(lines) + "\n"
    (write_to / "report.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m studies.pretraining.withdrawn_2m.report", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--output_dir", type=Path, default=Path("out/pretraining"), help="runs.jsonl, corpus.json")
    parser.add_argument("--step_cost", type=Path, default=None, help="default: OUTPUT_DIR/step_cost.json")
    parser.add_argument("--write_to", type=Path, default=None, help="default: OUTPUT_DIR")
    args = parser.parse_args(argv)
    write_to = args.write_to or args.output_dir
    write_report(args.output_dir, args.step_cost or args.output_dir / "step_cost.json", write_to)
    print(f"wrote {write_to / 'report.md'}")


if __name__ == "__main__":
    main()
