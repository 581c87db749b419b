"""The four-task comparison's statistics and report (`studies/four_tasks/compare_tasks.py` runs the fine-tunings and
calls these): per task and variant the task's metric over seeds, the paired difference from the baseline with a
Student-t 95% interval over seeds (`studies.common.comparison.paired_t_interval`), a GLUE-style average (the mean of
the task scores, `hf_ffn.finetune.tasks.task_score`) with the same paired interval, the baseline's convergence check
(the last-fifth slope of the validation curves, `studies.common.comparison.last_fifth_change`) and the measured
seconds per step with the cost of a full table.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence

from hf_ffn.comparing import paired_differences
from hf_ffn.finetune.tasks import TASKS
from studies.common.comparison import BASELINE, last_fifth_change, mean_std, paired_t_interval, variant_order

FLAT = 0.01  # |relative change of the validation loss over the last fifth| below this (1% of the mean): flat
FLAT_POINTS = 1.0  # |change of the task score over the last fifth| below this (metric points ×100): flat


def paired_score_difference(runs: Sequence[Mapping], reference: Sequence[Mapping], key: str = "score") -> tuple | None:
    """(mean, low, high) of `key` in `runs` − `reference`, paired by seed (`paired_t_interval`); None with fewer than
    2 seeds in common."""
    differences = paired_differences(runs, reference, key)
    return paired_t_interval(differences) if len(differences) >= 2 else None


def glue_average(runs: Sequence[dict], tasks: Sequence[str]) -> list[dict]:
    """One {"variant", "seed", "score"} per variant and seed that has a run on every one of `tasks`: the mean of its
    task scores (GLUE's average over tasks)."""
    cells: dict[tuple[str, int], dict[str, float]] = {}
    for run in runs:
        cells.setdefault((run["variant"], run["seed"]), {})[run["task"]] = run["score"]
    return [
        {"variant": variant, "seed": seed, "score": statistics.mean(scores[task] for task in tasks)}
        for (variant, seed), scores in sorted(cells.items())
        if set(tasks) <= set(scores)
    ]


def _cell(values: Sequence[float], scale: float = 1.0, digits: int = 2) -> str:
    mean, sd = mean_std([scale * value for value in values])
    return f"{mean:.{digits}f} ± {sd:.{digits}f}" if len(values) > 1 else f"{mean:.{digits}f}"


def _interval(interval: tuple | None) -> str:
    return "–" if interval is None else f"{interval[0]:+.2f} [{interval[1]:+.2f}, {interval[2]:+.2f}]"


def _verdict(interval: tuple | None) -> str:
    if interval is None:
        return "fewer than 2 paired seeds"
    return "**outside the noise**" if interval[1] > 0 or interval[2] < 0 else "inside the noise"


def run_trend(run: dict) -> tuple[dict, float, str] | None:
    """One baseline run's last fifth: (the loss's `last_fifth_change`, the task score's change over the fifth in
    points, the label), None with fewer than 2 validation points there. The label, in this order: "nan in the
    curve" (a diverged loss, or a correlation of constant predictions), "score still rising" (the score gains
    `FLAT_POINTS` or more), "past its best" (the score loses `FLAT_POINTS` or more, or the validation loss rises more
    than `FLAT`: over-fitting, which more steps do not cure), "loss still falling" (it falls more than `FLAT`), else
    "flat". A score can sit at 0 (a Matthews correlation before anything is learned), where a relative change has
    no meaning, hence points."""
    loss, score = last_fifth_change(run["curve"]), last_fifth_change(run["curve"], key="score")
    if loss["points"] < 2:
        return None
    points = score["slope_per_step"] * 0.2 * run["max_steps"]  # the score's change over the fifth
    if math.isnan(points) or math.isnan(loss["relative_change"]):
        label = "nan in the curve"
    elif points >= FLAT_POINTS:
        label = "score still rising"
    elif points <= -FLAT_POINTS or loss["relative_change"] > FLAT:
        label = "past its best"
    elif loss["relative_change"] < -FLAT:
        label = "loss still falling"
    else:
        label = "flat"
    return loss, points, label


def counted(count: int, noun: str) -> str:
    """`counted(1, "run")` → "1 run", `counted(3, "run")` → "3 runs"."""
    return f"{count} {noun}{'s' if count != 1 else ''}"


def seeds_verdict(changes: Sequence[float]) -> str:
    """The verdict on a task's last-fifth score changes over its seeds (points, nan left out): "still improving"
    when the Student-t 95% interval lies above 0, "falling" when it lies below (past its best), "no change on any
    seed" when every change is 0 (e.g. a score stuck at 0: nothing learned, not convergence), else no rise or fall
    detected, with the largest change the interval still admits: converged within the noise only as far as that
    bound is small against the differences the table reads."""
    finite = [change for change in changes if not math.isnan(change)]
    if len(finite) < 2:
        return "fewer than 2 seeds with a finite change: no interval"
    if all(change == 0 for change in finite):
        return "no change on any seed (a score stuck where it is: look at its value)"
    mean, low, high = paired_t_interval(finite)
    verdict = (
        "**still improving**: not converged at this budget"
        if low > 0
        else "**falling**: past its best"
        if high < 0
        else f"no rise or fall detected; these seeds leave a change of up to {max(-low, high):.2f} points possible"
    )
    return f"task score {mean:+.2f} [{low:+.2f}, {high:+.2f}] points over the last fifth: {verdict}"


def convergence_lines(runs: Sequence[dict]) -> list[str]:
    """The baseline's validation curves over the last fifth of each run (`run_trend`: least-squares slopes of the
    loss and the task score), then per task over its seeds the mean change of the score with its Student-t 95%
    interval (`seeds_verdict`). Three validation points per fifth scatter, so a single run's label is weak
    evidence; a longer run that does not move the result is the stronger check."""
    lines, changes = [], {}
    for run in sorted((r for r in runs if r["variant"] == BASELINE), key=lambda r: (r["task"], r["seed"])):
        trend = run_trend(run)
        if trend is None:
            lines.append(
                f"- {run['task']}, seed {run['seed']}: fewer than 2 validation points in the last fifth: no "
                f"slope (evaluate more often, --evals_per_run)"
            )
            continue
        loss, points, label = trend
        changes.setdefault(run["task"], []).append((points, label))
        lines.append(
            f"- {run['task']}, seed {run['seed']} ({run['max_steps']} steps, {loss['points']} points): validation "
            f"loss {100 * loss['relative_change']:+.2f}% (slope {loss['slope_per_step']:.2e}/step), task score "
            f"{points:+.2f} points: {label}"
        )
    for task, rows in changes.items():
        labels = ", ".join(
            f"{sum(label == name for _, label in rows)} {name}" for name in sorted({label for _, label in rows})
        )
        lines.append(
            f"- **{task}**, {counted(len(rows), 'seed')} ({labels}): " + seeds_verdict([points for points, _ in rows])
        )
    return lines


def train_seconds_range(run: dict) -> tuple[float, float]:
    """`(low, high)` training seconds of a run. Records without `train_seconds_exclude` were made before issue 55's
    fix: when the last step was not an evaluation step (`max_steps` not a multiple of `max_steps // evals_per_run`),
    the final evaluation, run after training, was subtracted from `train_runtime` as well. Its time, one evaluation
    of the same validation set, is at most (wall − recorded train seconds) / (evaluations in training + 2), since
    the wall time holds every evaluation once and the recorded time lacks the final one; `high` restores that bound,
    `low` is the record. Fixed records: `(train_seconds, train_seconds)`."""
    recorded = run["train_seconds"]
    evals = run["settings"].get("evals_per_run") or 0
    eval_steps = max(1, run["max_steps"] // evals) if evals else 0
    if "train_seconds_exclude" in run or not eval_steps or run["max_steps"] % eval_steps == 0:
        return recorded, recorded
    inside = run["max_steps"] // eval_steps
    return recorded, recorded + (run["wall_seconds"] - recorded) / (inside + 2)


def cost_lines(runs: Sequence[dict], variants: int, seeds: int, epochs: float, batch_size: int) -> list[str]:
    """The measured seconds per optimizer step per task (training only, median over runs; and wall seconds per step
    with evaluation and loading) and what a full table of `variants` × the tasks × `seeds` at `epochs` costs."""
    lines, total, ranged = [], 0.0, False
    for task in TASKS:
        rows = [run for run in runs if run["task"] == task]
        if not rows:
            continue
        low, high = (statistics.median(train_seconds_range(run)[i] / run["max_steps"] for run in rows) for i in (0, 1))
        wall_step = statistics.median(run["wall_seconds"] / run["max_steps"] for run in rows)
        ranged = ranged or high > low
        full_steps = math.ceil(epochs * rows[0]["train_rows_full"] / batch_size)
        hours = full_steps * wall_step * variants * seeds / 3600
        total += hours
        lines.append(
            f"- {task}: {low:.3f}{f'–{high:.3f}' if high > low else ''} s/step training, {wall_step:.3f} s/step "
            f"wall (median of "
            f"{len(rows)} runs); {full_steps} steps for {epochs:g} epochs → {hours:.1f} h for {variants} "
            f"variants × {seeds} seeds"
        )
    if ranged:
        lines.append(
            "- a range of training rates: runs recorded before issue 55's fix, whose final evaluation was subtracted "
            "from the training time; the upper end restores its bound (`train_seconds_range`)"
        )
    if lines:
        lines.append(
            f"- full table at these rates: **{total:.1f} h** of one process (runs are independent: N "
            f"processes or machines divide it by about N)"
        )
    return lines


def report(runs: Sequence[dict], header: dict) -> str:
    """The markdown report: settings (`header`), one table per task, the GLUE-style average, the convergence check,
    the cost, the machine and the command."""
    tasks = [task for task in TASKS if any(run["task"] == task for run in runs)]
    text = [header["title"], "", header["intro"], ""]
    for task in tasks:
        spec = TASKS[task]
        task_runs = [run for run in runs if run["task"] == task]
        by_variant = {
            name: sorted((r for r in task_runs if r["variant"] == name), key=lambda r: r["seed"])
            for name in variant_order({r["variant"] for r in task_runs})
        }
        split = "test" if spec.report_split == "test" else "validation"
        text += [
            f"## {task} ({split}: {task_runs[0]['report_rows']:,} examples, {task_runs[0]['max_steps']} steps)",
            "",
            "| variant | seeds | " + " | ".join(spec.metrics) + " | task score | Δ score vs baseline: t 95% "
            "CI (seeds) | verdict |",
            "|---|---|" + "---|" * len(spec.metrics) + "---|---|---|",
        ]
        for name, rows in by_variant.items():
            interval = None if name == BASELINE else paired_score_difference(rows, by_variant.get(BASELINE, []))
            text.append(
                f"| {name} | {', '.join(str(r['seed']) for r in rows)} | "
                + " | ".join(_cell([r["metrics"][m] for r in rows], 100) for m in spec.metrics)
                + f" | {_cell([r['score'] for r in rows])} | {_interval(interval)} | "
                + ("baseline" if name == BASELINE else _verdict(interval))
                + " |"
            )
        text.append("")
    averages = glue_average(runs, tasks)
    if averages:
        text += [
            f"## GLUE-style average over {', '.join(tasks)}",
            "",
            "| variant | seeds | average score | Δ vs baseline: t 95% CI (seeds) | verdict |",
            "|---|---|---|---|---|",
        ]
        by_variant = {
            name: [a for a in averages if a["variant"] == name]
            for name in variant_order({a["variant"] for a in averages})
        }
        for name, rows in by_variant.items():
            interval = None if name == BASELINE else paired_score_difference(rows, by_variant.get(BASELINE, []))
            text.append(
                f"| {name} | {', '.join(str(r['seed']) for r in rows)} | {_cell([r['score'] for r in rows])} "
                f"| {_interval(interval)} | " + ("baseline" if name == BASELINE else _verdict(interval)) + " |"
            )
        text.append("")
    text += [
        "## Baseline convergence (validation, last fifth of each run; then per task over seeds)",
        "",
        *convergence_lines(runs),
        "",
    ]
    text += (
        ["## Cost", ""]
        + cost_lines(runs, header["full_variants"], header["full_seeds"], header["epochs"], header["batch_size"])
        + [""]
    )
    loads = [value for run in runs for value in (run["load_before"], run["load_after"])]
    machines = Counter(f"{run['machine']['cpu']}, {run['machine']['cores']} logical cores" for run in runs)
    text += [
        ("Machine: " if len(machines) == 1 else "Machines (fp32 results differ in the last bits between CPUs): ")
        + "; ".join(f"{name} ({counted(count, 'run')})" for name, count in machines.items())
        + ", "
        f"{sorted({run['threads'] for run in runs})} torch thread(s) per run, load average (1 min) "
        f"{min(loads):.2f}–{max(loads):.2f} around the runs. Versions: {header['versions']}. "
        f"Run time: {sum(run['wall_seconds'] for run in runs) / 3600:.2f} h summed over {counted(len(runs), 'run')} "
        f"({header['first']} – {header['last']} UTC).",
        "",
    ]
    weights = {
        name: {run["checkpoint_sha256"] for run in runs if run["variant"] == name}
        for name in variant_order({run["variant"] for run in runs})
    }
    if any(len(shas) > 1 for shas in weights.values()):  # resumed with --accept_remade_students
        text += [
            "Start weights: "
            + "; ".join(
                f"{name}: {len(shas)} weight sets made by one recipe (re-made on another machine)"
                for name, shas in weights.items()
                if len(shas) > 1
            )
            + "; every other variant: one.",
            "",
        ]
    text += [f"Command: `{header['command']}`", ""]
    return "\n".join(text)


__all__ = [
    "FLAT",
    "FLAT_POINTS",
    "convergence_lines",
    "cost_lines",
    "train_seconds_range",
    "glue_average",
    "paired_score_difference",
    "report",
    "run_trend",
    "seeds_verdict",
]
