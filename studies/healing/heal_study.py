#!/usr/bin/env python
"""Healing study: convert all-MiniLM-L6-v2 (or another BERT) into three drifting variants, heal each by distillation
with `hf-ffn heal`, and write the before/after table and the curves.

    python -m studies.healing.heal_study run --text-dir ../shared/data/state_union --eval-dir ../shared/data/rt_polarity
    # studies/healing/healing.md (+ figures/ with an end-to-end stage):
    python -m studies.healing.heal_study report --output-dir studies/healing

`run` works one variant at a time (each a separate `hf-ffn heal` process, its output in WORK/VARIANT/log.txt),
skips variants already healed and resumes an interrupted one from its last checkpoint: rerunning the same command
continues where it stopped. `report` reads WORK/VARIANT/healed/conversion_report.json and writes `healing.md` and
`figures/healing_curves.png` under `--output-dir` (default: WORK). Defaults: WORK = out/heal_study.

Variants (`VARIANTS`). Layer-wise (`*-lw`, the default; `hf-ffn heal --method layerwise`): GELU → SwiGLU approximate
(one closed-form down projection per layer), SwiGLU at the parameter-matched width 1024 from `init="pruned"` (FFN
fits), Post-LN → Pre-LN (whole layers on the student's inputs, the last through `final_norm`); goals (`GOALS`,
`TIME_GOALS`, issue 18): cosine ≥ 0.9995 in ≤ 3 min, and ≥ 0.99 with the probe within 0.5 points in ≤ 20 min.
End to end (`swiglu-approx`, `swiglu-fresh`, `pre-ln`; studies/healing/end_to_end): the approximate SwiGLU (init
preserving), a fresh matched-width SwiGLU and Pre-LN with the weights kept; goals cosine ≥ 0.999 / probe within
0.3 points, and ≥ 0.99 / within 1 point. `report --experiments LOG --scaling JSON --notes MD` adds the layer-wise
experiment log (studies/healing/layerwise_study.py), the bert-base check (studies/healing/layerwise_scaling.py) and
the analysis.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from hf_ffn.variants import get_variant

# Each experiment: a student (the named variant of hf_ffn.variants it converts, or "convert": switches of this study's
# own start) and the healing run measured on it ("heal": hf-ffn heal flags).
VARIANTS = {
    "swiglu-approx": {
        "title": "GELU → SwiGLU, approximate (init preserving)",
        "variant": "swiglu-approx",
        "heal": {"method": "end_to_end", "learning_rate": 1e-4, "layers": "all"},
    },
    "swiglu-fresh": {
        "title": "SwiGLU fresh, matched width 1024",
        # this study's own start (not a library variant): fresh weights at the matched width
        "convert": {"ffn_type": "swiglu", "init": "fresh", "width": "matched"},
        "heal": {"method": "end_to_end", "learning_rate": 5e-4, "layers": "all"},
    },
    "pre-ln": {
        "title": "Post-LN → Pre-LN (weights kept)",
        "variant": "pre-ln",
        # layers "last": "all" would compare unlike hidden states across LayerNorm placements
        "heal": {"method": "end_to_end", "learning_rate": 3e-4, "layers": "last"},
    },
}
# Layer-wise healing (hf-ffn heal --method layerwise, hf_ffn.healing.layerwise), the default since it measured best
# (studies/healing/healing.md, "Layer-wise healing experiments"). "heal" holds hf-ffn heal flags; "steps" the
# end-to-end stage.
# The approximate SwiGLU is one closed-form down projection per layer away (Adam steps only made it worse); the
# matched one measured best with its FFNs fitted alone (whole layers on the student's inputs: no better).
LAYERWISE = {"method": "layerwise", "layers": "last"}
VARIANTS |= {
    "swiglu-approx-lw": {
        "title": "GELU → SwiGLU, approximate, layer-wise",
        "variant": "swiglu-approx",
        "heal": {**LAYERWISE, "learning_rate": 1e-4, "layerwise_steps": 0, "layerwise_tokens": 65536},
        "steps": 0,
    },
    "swiglu-matched-lw": {
        "title": "SwiGLU matched width 1024 (init pruned), layer-wise",
        "variant": "swiglu-matched",
        "heal": {**LAYERWISE, "learning_rate": 1e-4, "layerwise_steps": 1000, "layerwise_tokens": 65536},
        "steps": 0,
    },
    "pre-ln-lw": {
        "title": "Post-LN → Pre-LN, layer-wise targets",
        "variant": "pre-ln",
        "heal": {
            **LAYERWISE,
            "learning_rate": 1e-4,
            "layerwise_steps": 1000,
            "layerwise_tokens": 65536,
            "layerwise_parts": "layer",
            "layerwise_inputs": "student",
            "layerwise_stream": "teacher",
        },
        "steps": 0,
    },
}
DEFAULT_VARIANTS = ["swiglu-approx-lw", "swiglu-matched-lw", "pre-ln-lw"]
END_TO_END_STEPS = 150  # --steps default of the end-to-end variants
DEFAULT_WORK_DIR = "out/heal_study"
GOALS = {
    "swiglu-approx": (0.999, 0.3),
    "swiglu-fresh": (0.99, 1.0),
    "pre-ln": (0.99, 1.0),  # cosine, probe points
    "swiglu-approx-lw": (0.9995, 0.5),
    "swiglu-matched-lw": (0.99, 0.5),
    "pre-ln-lw": (0.99, 0.5),
}
TIME_GOALS = {"swiglu-approx-lw": 3, "swiglu-matched-lw": 20, "pre-ln-lw": 20}  # minutes of training (issue 18)


def heal_command(variant: str, args: argparse.Namespace, student: Path, run_dir: Path, teacher: str) -> list[str]:
    """The `hf-ffn heal` arguments for one variant (the budget is the same for all but the learning rate)."""
    heal = dict(VARIANTS[variant]["heal"])
    steps = variant_steps(variant, args)
    extra = [f"--{k}={v}" for k, v in heal.items() if k not in ("layers", "learning_rate")]
    source = [] if args.model is None else ["--teacher", teacher]  # default: the student's conversion source
    return [
        "--student",
        str(student),
        *source,
        "--train_files",
        args.text_dir,
        "--eval_data",
        args.eval_dir,
        "--output_dir",
        str(run_dir),
        "--layers",
        heal["layers"],
        "--train_parts",
        args.train_parts,
        "--hidden_loss",
        args.hidden_loss,
        *extra,
        "--max_seq_length",
        str(args.block),
        "--per_device_train_batch_size",
        str(args.batch_size),
        "--max_steps",
        str(steps),
        "--learning_rate",
        str(heal["learning_rate"]),
        "--warmup_steps",
        str(max(1, steps // 10)),
        "--lr_scheduler_type",
        args.lr_scheduler,
        "--seed",
        "0",
        "--curve_steps",
        str(args.curve_steps),
        "--curve_snippets",
        str(args.curve_snippets),
        "--save_steps",
        str(args.curve_steps),
        "--save_total_limit",
        "1",
        "--logging_steps",
        "5",
        "--use_cpu",
        "true",
        "--report_to",
        "none",
        "--dataloader_num_workers",
        "0",
    ]


def variant_steps(variant: str, args: argparse.Namespace) -> int:
    """End-to-end steps: --steps if given, else the variant's own ("steps"; END_TO_END_STEPS for the old ones)."""
    return args.steps if args.steps is not None else VARIANTS[variant].get("steps", END_TO_END_STEPS)


def convert_student(teacher: str, student: Path, variant: str, text_dir: str) -> None:
    """Convert the variant's student (init "pruned" scores units on the first `layerwise_tokens` of `text_dir`)."""
    from transformers import AutoTokenizer

    from hf_ffn.conversion import convert_checkpoint
    from hf_ffn.conversion.pruning import calibration_ids

    experiment = VARIANTS[variant]
    # the student is a named variant's conversion (hf_ffn.variants), or this study's own start ("convert")
    options = (
        get_variant(experiment["variant"]).conversion_options()
        if "variant" in experiment
        else dict(experiment["convert"])
    )
    if options.get("init") == "pruned":
        tokens = VARIANTS[variant]["heal"].get("layerwise_tokens", 65536)
        options["calibration_ids"] = calibration_ids([text_dir], AutoTokenizer.from_pretrained(teacher), 128, tokens)
    convert_checkpoint(teacher, student, **options)


def run(args: argparse.Namespace) -> None:
    from hf_ffn.parity import bundled_checkpoint

    teacher = args.model or bundled_checkpoint()
    work = Path(args.work_dir)
    for variant in args.variants:
        run_dir, student = work / variant, work / "students" / variant
        done = run_dir / "healed" / "conversion_report.json"
        if done.is_file():
            training = json.loads(done.read_text())["healing"]["training"]
            loss = json.loads(done.read_text())["healing"]["arguments"]["hidden_loss"]
            if (training["max_steps"], training["lr_scheduler_type"], loss) != (
                variant_steps(variant, args),
                args.lr_scheduler,
                args.hidden_loss,
            ):
                raise SystemExit(
                    f"{variant}: {run_dir / 'healed'} was healed with --steps {training['max_steps']} "
                    f"--lr-scheduler {training['lr_scheduler_type']} --hidden-loss {loss}, not --steps "
                    f"{variant_steps(variant, args)} --lr-scheduler {args.lr_scheduler} "
                    f"--hidden-loss {args.hidden_loss}; "
                    f"use another --work-dir"
                )
            print(f"{variant}: already healed ({run_dir / 'healed'})")
            continue
        if not (student / "config.json").is_file():
            convert_student(teacher, student, variant, args.text_dir)
        command = heal_command(variant, args, student, run_dir, teacher)
        resume = run_dir.is_dir() and any(run_dir.glob("checkpoint-*"))
        run_dir.mkdir(parents=True, exist_ok=True)
        print(f"{variant}: {'resuming' if resume else 'starting'}; log: {run_dir / 'log.txt'}", flush=True)
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        full = [
            sys.executable,
            "-m",
            "hf_ffn.cli",
            "heal",
            *command,
            *(["--resume_from_checkpoint", "last"] if resume else []),
        ]
        with open(run_dir / "log.txt", "a") as log:
            log.write(
                f"\n# {time.strftime('%Y-%m-%d %H:%M:%S')} OMP_NUM_THREADS={args.threads} "
                f"hf-ffn heal {shlex.join(full[4:])}\n"
            )
            log.flush()
            load_before = os.getloadavg()[0]
            code = subprocess.call(full, env=env, stdout=log, stderr=subprocess.STDOUT)
            log.write(f"# load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after\n")
        if code != 0:
            raise SystemExit(f"{variant}: hf-ffn heal exited with {code}; see {run_dir / 'log.txt'}")


def _points(probe: dict) -> tuple[float, float, float]:
    return 100 * probe["teacher"]["accuracy"], 100 * probe["student"]["accuracy"], 100 * probe["difference"]


def run_load(run_dir: Path) -> str:
    """The load averages `run` wrote into the variant's log after its last heal ("before → after"), or "unknown"."""
    log = run_dir / "log.txt"
    found = (
        re.findall(r"^# load average ([\d.]+) before, ([\d.]+) after", log.read_text(errors="replace"), re.M)
        if log.is_file()
        else []
    )
    return f"{found[-1][0]} → {found[-1][1]}" if found else "unknown"


def run_threads(work: Path, records: dict) -> str:
    """OMP_NUM_THREADS the heal runs had, read from the header lines `run` writes into each variant's log."""
    found = set()
    for variant in records:
        log = work / variant / "log.txt"
        if log.is_file():
            found |= set(re.findall(r"^# .* OMP_NUM_THREADS=(\d+) ", log.read_text(errors="replace"), re.M))
    return "/".join(sorted(found)) or "unknown"


def power_law_projection(curve: list[dict], cosine_goal: float) -> dict | None:
    """Fit log(1 − cosine) = a + b·log(step) by least squares over the curve points at step ≥ half the last step
    (at least 3 points) and solve for the step where 1 − cosine = 1 − `cosine_goal`: {"exponent": b, "steps": the
    step, or None when b ≥ 0 (no approach)}. None with fewer than 3 points. Only meaningful for a curve at a constant
    learning rate: a decaying one flattens because of the schedule."""
    import numpy as np

    if not curve:
        return None
    last = curve[-1]["step"]
    points = [(p["step"], 1 - p["cosine_mean"]) for p in curve if p["step"] >= last / 2 and p["step"] > 0]
    if len(points) < 3:
        return None
    b, a = np.polyfit(np.log([s for s, _ in points]), np.log([c for _, c in points]), 1)
    steps = float(np.exp((np.log(1 - cosine_goal) - a) / b)) if b < 0 else None
    return {"exponent": float(b), "steps": steps}


def layer_table(title: str, layerwise: dict) -> str:
    """Per-layer attribution of a layer-wise run: each layer's fit (teacher-forced), the propagated error and what
    each layer adds to it (propagated after it − before it, as a share of the last layer's propagated error)."""

    def fmt(record: dict, key: str) -> str:
        return f"{record[key]:.2e}" if key in record else "-"

    propagated = [r["propagated_rel_error"] for r in layerwise["layers"]]
    added = [b - a for a, b in zip([0.0, *propagated[:-1]], propagated, strict=False)]
    rows = [
        f"| {r['layer']} | {fmt(r, 'ffn_rel_error_before')} → {fmt(r, 'ffn_rel_error')} | "
        f"{fmt(r, 'layer_rel_error_before')} → {fmt(r, 'layer_rel_error')} | {fmt(r, 'propagated_rel_error')} | "
        f"{d:+.2e} ({100 * d / propagated[-1]:.0f}%) | {r.get('seconds', 0):.0f} |"
        for r, d in zip(layerwise["layers"], added, strict=False)
    ]
    top = max(range(len(added)), key=added.__getitem__)
    final = layerwise.get("final_norm")
    norm = (
        f" `final_norm` (closed form): {final['final_norm_rel_error_before']:.2e} → "
        f"{final['final_norm_rel_error']:.2e}."
        if final
        else ""
    )
    return (
        f"**{title}** ({layerwise['tokens']:,} calibration tokens, recorded activations "
        f"{layerwise['activation_bytes'] / 1e6:.0f} MB, {layerwise['seconds']:.0f} s):\n\n"
        "| layer | FFN output (teacher input) | layer output (fit input) | propagated hidden state | added by the "
        "layer (share of the last) | s |\n"
        "|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + f"\n\nLargest share: layer {top} adds {100 * added[top] / propagated[-1]:.0f}% of the propagated error "
        f"after the last layer ({propagated[-1]:.2e}).{norm}"
    )


def experiments_table(log: Path) -> str:
    """The layer-wise experiment log (studies/healing/layerwise_study.py) as a table."""
    if not log.is_file():
        return "(no experiment log given)"
    lines = [
        "| run | variant | mean cosine | probe Δ (points) | layer-wise s | end-to-end steps | wall s | load |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for line in log.read_text().splitlines():
        r = json.loads(line)
        m = r["measured"]
        lines.append(
            f"| {r['name']} | {r['variant']} | {m['cosine_mean']:.5f} | {m['probe_difference_points']:+.2f} | "
            f"{r['layerwise_seconds']:.0f} | {r['steps']} | {r['train_seconds_total']:.0f} | "
            f"{r['load_before']}→{r['load_after']} |"
        )
    commands = sorted({json.loads(line)["command"] for line in log.read_text().splitlines()})
    return (
        "\n".join(lines)
        + "\n\nCommands (each appends one line to the log):\n\n```bash\n"
        + "\n".join(commands)
        + "\n```"
    )


def scaling_section(path: str | None) -> str:
    """The bert-base time/memory check (studies/healing/layerwise_scaling.py's JSON) as a table and its
    extrapolation."""
    if not path or not Path(path).is_file():
        return (
            "(not included: run `python -m studies.healing.layerwise_scaling` and give "
            "--scaling out/layerwise_scaling.json)"
        )
    data = json.loads(Path(path).read_text())
    rows = [
        f"| {r['tokens']:,} | {r['activation_bytes'] / 1e6:.0f} MB | {r['peak_rss_growth_bytes'] / 1e6:.0f} MB | "
        f"{r['seconds']:.0f} s ({r['steps_per_layer']} Adam steps per layer) | {r['load_average'][0]} → "
        f"{r['load_average'][1]} |"
        for r in data["runs"]
    ]
    e = data["extrapolation_1e5_tokens"]
    first, last = data["runs"][0], data["runs"][-1]
    per_token = (last["seconds"] - first["seconds"]) / max(1, last["tokens"] - first["tokens"])
    return (
        "Seeded random bert-base architecture (`BertConfig()`: 12 layers, hidden 768, FFN 3072 → SwiGLU 2048, "
        "init fresh), random token ids, `--layerwise_parts ffn`, 512 tokens per Adam step, "
        f"{last['threads']} threads (`python -m studies.healing.layerwise_scaling --tokens "
        f"{' '.join(str(r['tokens']) for r in data['runs'])} --steps {last['steps_per_layer']}`):\n\n"
        "| calibration tokens | recorded activations | peak RSS growth | time | load average |\n|---|---|---|---|---|\n"
        + "\n".join(rows)
        + f"\n\nPeak RSS growth is over the process's peak before the run (the first run's includes "
        f"the student, its optimizer state and the first allocation of every buffer). Extrapolation to 10⁵ tokens: "
        f"the recorded activations are linear in the tokens "
        f"(`HELD_TENSORS` = 6 × tokens × 768 × 4 bytes = {e['activation_bytes'] / 1e9:.2f} GB; from the measured "
        f"bytes per token {e['activation_bytes_from_measured_per_token'] / 1e9:.2f} GB), under the default "
        f"2 GB cap (`--layerwise_memory_mb 2048`: above it fewer tokens are used), plus one 2049² float64 Gram "
        f"matrix (34 MB) per fit. Time: the token-proportional part (teacher and student passes, Gram "
        f"matrices) grew by {per_token * 1e3:.2f} ms per token between the two runs, so 10⁵ tokens add about "
        f"{per_token * 1e5 / 60:.0f} min to the run; the Adam steps cost the same at any token count."
    )


def report(args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from studies.common.environment import machine, portable_command, portable_path, versions

    work, output = Path(args.work_dir), Path(args.output_dir or args.work_dir)
    records = {}
    for variant in VARIANTS:
        file = work / variant / "healed" / "conversion_report.json"
        if file.is_file():
            records[variant] = json.loads(file.read_text())["healing"]
    if not records:
        raise SystemExit(f"no healed variant under {work}; run `python -m studies.healing.heal_study run` first")
    rows, verdicts, layer_tables = [], [], []
    for variant, h in records.items():
        b, a = h["before"], h["after"]
        tb, sb, db = _points(b["probe"])
        ta, sa, da = _points(a["probe"])
        layerwise = h.get("layerwise") or {}
        minutes = (h["train_seconds"] + layerwise.get("seconds", 0.0)) / 60
        budget = f"layer-wise + {h['steps']}" if layerwise else str(h["steps"])
        rows.append(
            f"| {VARIANTS[variant]['title']} "
            f"| {b['agreement']['cosine_mean']:.5f} → **{a['agreement']['cosine_mean']:.5f}** "
            f"| {b['agreement']['cosine_min']:.4f} → {a['agreement']['cosine_min']:.4f} "
            f"| {b['agreement']['max_abs_diff']:.3g} → {a['agreement']['max_abs_diff']:.3g} "
            f"| {b['agreement']['mean_abs_diff']:.3g} → {a['agreement']['mean_abs_diff']:.3g} "
            f"| {tb:.2f} | {sb:.2f} ({db:+.2f}) → **{sa:.2f} ({da:+.2f})** | {budget} | {minutes:.1f} min |"
        )
        cos_goal, probe_goal = GOALS[variant]
        reached = a["agreement"]["cosine_mean"] >= cos_goal, abs(da) <= probe_goal
        time_goal = TIME_GOALS.get(variant)
        h["load_average"] = run_load(work / variant)
        timing = (
            f" Time goal ≤ {time_goal} min {'reached' if minutes <= time_goal else 'not reached'} "
            f"({minutes:.1f} min at load average {h.get('load_average', 'unknown')})."
            if time_goal
            else ""
        )
        if layerwise:
            budget_text = (
                f"layer-wise ({layerwise['tokens']:,} tokens, {layerwise['arguments']['layerwise_steps']} "
                f"Adam steps per fit) + {h['steps']} end-to-end steps"
            )
        else:
            budget_text = (
                f"{h['steps']} steps × {h['training']['per_device_train_batch_size']} blocks of "
                f"{h['data']['block_tokens']} tokens"
            )
        curve = h["curve"]
        crossed = next((p["step"] for p in curve if p["cosine_mean"] >= cos_goal), None)
        len_curve = h["heldout"]["curve_snippets"]
        tail = ""
        if len(curve) >= 3:
            (s0, c0), (s1, c1) = (
                (curve[-2]["step"], 1 - curve[-2]["cosine_mean"]),
                (curve[-1]["step"], 1 - curve[-1]["cosine_mean"]),
            )
            tail = f" Over the last {s1 - s0} steps of the curve, 1 − cosine went {c0:.2e} → {c1:.2e} (×{c1 / c0:.2f})."
        projection = power_law_projection(curve, cos_goal)
        if projection and h["training"]["lr_scheduler_type"] != "linear" and not reached[0]:
            tail += (
                f" A power law fitted to 1 − cosine over the second half of the curve (exponent "
                f"{projection['exponent']:.2f}) reaches the goal at about "
                f"{projection['steps']:,.0f} steps"
                if projection["steps"]
                else f" A power law fitted to 1 − cosine over the second half of the curve has exponent "
                f"{projection['exponent']:.2f}: no approach to the goal"
            ) + " (an extrapolation, not a measurement)."
        verdicts.append(
            f"- **{VARIANTS[variant]['title']}**: goal cosine ≥ {cos_goal} "
            f"{'reached' if reached[0] else 'not reached'} ({a['agreement']['cosine_mean']:.5f}"
            f"{f', first at step {crossed} on the {len_curve:,}-snippet curve' if crossed is not None else ''}); "
            f"probe within {probe_goal} points {'reached' if reached[1] else 'not reached'} ({da:+.2f} points, "
            f"fold std of the paired difference {100 * a['probe']['difference_std']:.2f}); {budget_text}, "
            f"{minutes:.1f} min of training.{timing}{tail}"
        )
        if layerwise:
            layer_tables.append(layer_table(VARIANTS[variant]["title"], layerwise))
    first = next(iter(records.values()))
    figure = output / "figures" / "healing_curves.png"
    if any(h["curve"] for h in records.values()):  # a layer-wise-only report has no curve to plot
        figure.parent.mkdir(parents=True, exist_ok=True)
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for variant, h in records.items():
            steps = [p["step"] for p in h["curve"]]
            title = VARIANTS[variant]["title"]
            axes[0].plot(steps, [1 - p["cosine_mean"] for p in h["curve"]], marker="o", label=title)
            axes[1].plot(steps, [p["mean_abs_diff"] for p in h["curve"]], marker="o", label=title)
        for variant, (cos_goal, _) in GOALS.items():
            if variant in records:
                axes[0].axhline(1 - cos_goal, color="grey", linestyle=":", linewidth=1)
        axes[0].set(
            yscale="log",
            xlabel="optimizer step",
            ylabel="1 − mean cosine to the teacher",
            title=f"sentence embeddings ({first['heldout']['curve_snippets']:,} held-out snippets)",
        )
        axes[1].set(
            yscale="log",
            xlabel="optimizer step",
            ylabel="mean |Δ| last_hidden_state",
            title="real tokens (same snippets)",
        )
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(figure, dpi=120)
    settings = first["after"]["probe"]["student"]["settings"]
    threads = run_threads(work, records)
    where = "" if args.work_dir == DEFAULT_WORK_DIR else f" --work-dir {portable_path(args.work_dir)}"
    variants = "" if list(records) == DEFAULT_VARIANTS else " --variants " + " ".join(records)
    schedule = first["training"]["lr_scheduler_type"]
    scheduler = "" if schedule == "linear" else f" --lr-scheduler {schedule}"
    hidden_loss = first["arguments"]["hidden_loss"]
    teacher = portable_path(first["teacher"], bundled="")  # "" for the bundled checkpoint
    scheduler += "" if hidden_loss == "mse" else f" --hidden-loss {hidden_loss}"
    default_steps = all(h["steps"] == VARIANTS[v].get("steps", END_TO_END_STEPS) for v, h in records.items())
    steps_flag = "" if default_steps else f" --steps {first['steps']}"
    curve_text = (
        f"![held-out agreement vs optimizer steps]({os.path.relpath(figure, output)})\n\n"
        + textwrap.fill("Dotted lines: the cosine goals (0.999, 0.99). " + SCHEDULE_NOTES[schedule], 115)
        if any(h["curve"] for h in records.values())
        else "No variant of this report ran an end-to-end stage, so there is no curve over optimizer steps."
    )
    text = TEMPLATE.format(
        layer_tables="\n\n".join(layer_tables) or "(no layer-wise variant in this report)",
        scaling=scaling_section(args.scaling),
        notes="\n".join(
            line for line in Path(args.notes).read_text().strip().splitlines() if not line.startswith("<!--")
        )
        if args.notes
        else "",
        experiments=experiments_table(Path(args.experiments))
        if args.experiments
        else "(not included: give --experiments out/layerwise_study/log.jsonl)",
        experiments_log=args.experiments or "out/layerwise_study/log.jsonl",
        rows="\n".join(rows),
        verdicts="\n".join(verdicts),
        commands="\n".join(f"# {v}\n{portable_command(shlex.split(h['command']))}" for v, h in records.items()),
        snippets=first["heldout"]["snippets"],
        curve_snippets=first["heldout"]["curve_snippets"],
        probe=f"{settings['folds']}-fold stratified CV (seed {settings['seed']}), standardised features, "
        f"LogisticRegression(C={settings['C']}, max_iter={settings['max_iter']})",
        machine=f"{machine()['cpu']}, {machine()['cores']} logical cores shared with other jobs "
        f"(load average {os.getloadavg()[0]:.1f} when this report was written), "
        f"OMP_NUM_THREADS={threads}",
        run_command=(
            f"python -m studies.healing.heal_study run{where} --text-dir ../shared/data/state_union --eval-dir "
            f"../shared/data/rt_polarity{variants}{steps_flag} --curve-steps "
            f"{first['arguments']['curve_steps']} --threads {threads}{scheduler}"
        ),
        report_command=(
            f"python -m studies.healing.heal_study report{where} --output-dir "
            f"{portable_path(args.output_dir or args.work_dir)}"
            + "".join(
                f" --{name} {getattr(args, name)}"
                for name in ("experiments", "scaling", "notes")
                if getattr(args, name)
            )
        ),
        versions=versions(),
        teacher=f"`{teacher}`" if teacher else "the bundled all-MiniLM-L6-v2",
        train_files=", ".join(map(portable_path, first["data"]["train_files"])),
        blocks=first["data"]["blocks"],
        block=first["data"]["block_tokens"],
        title_note=("" if schedule == "linear" else f": {first['steps']} steps at a constant learning rate")
        + ("" if hidden_loss == "mse" else f", {hidden_loss} loss"),
        loss=LOSSES[hidden_loss][0],
        loss_source=LOSSES[hidden_loss][1],
        curve_text=curve_text,
    )
    (output / "healing.md").write_text(text)
    print(f"wrote {output / 'healing.md'}" + (f" and {figure}" if figure.is_file() else ""))


LOSSES = {  # hf-ffn heal --hidden_loss → (what the text calls it, its source)
    "mse": ("MSE", "TinyBERT's hidden-state loss, Jiao et al. 2020"),
    "cosine": ("1 − cosine similarity per token", "DistilBERT's cosine embedding loss, Sanh et al. 2019"),
}
SCHEDULE_NOTES = {
    "linear": (
        "The learning rate decays linearly to 0 over the run, so the flattening at the end is partly the schedule: "
        "these curves show the direction, not how far a longer run would go. The approximate SwiGLU start is "
        "already close (one conversion recipe away); a fresh FFN has to relearn a function from random weights, and "
        "a Post→Pre-LN student moves every LayerNorm: their distance to the teacher falls fast at first and slowly "
        "at the end (where the rate is near 0), and a closer embedding does not always mean a better probe (see the "
        "table). A run at a constant learning rate (`--lr-scheduler constant_with_warmup`) gives a curve to "
        "extrapolate from."
    ),
    "constant_with_warmup": (
        "The learning rate is constant after the warm-up, so the flattening of these curves is the student's, not "
        "the schedule's; the goals above extrapolate them with a power law in the step count."
    ),
}

TEMPLATE = """# Healing converted BERTs by distillation{title_note}

A conversion that does not preserve the function (GELU → SwiGLU approximately, a fresh FFN, Post-LN → Pre-LN)
leaves a model that drifts from its source. `hf-ffn heal` distils the converted model (student) from the source
(teacher, frozen, eval mode) on plain text: {loss} between the students' and the teacher's hidden states at real
tokens ({loss_source}; the last hidden state only for Pre-LN, whose
intermediate hidden states are the un-normalised residual stream), dropout off in the student, the encoder trained
(attention, FFNs, LayerNorms; embeddings and pooler frozen), `transformers.Trainer` doing the training. The result
is a normal converted folder whose `conversion_report.json` and model card carry the numbers below and the command.

Teacher: {teacher} (6 layers, hidden 384, FFN 1536). Training text: {train_files}
({blocks} blocks of {block} tokens). Held-out text, never trained on: all {snippets} rt_polarity snippets
(Pang & Lee 2005); embeddings are mean-pooled `last_hidden_state` (all-MiniLM-L6-v2's own pooling). The linear
probe: {probe}, the same folds for teacher and student (the difference is paired). The curve uses a seeded subset
of {curve_snippets} snippets.

Layer-wise healing (`--method layerwise`, `hf_ffn.healing.layerwise`; the default of `hf-ffn heal` and of this
study since it measured best, an end-to-end stage after it only with `--max_steps > 0`): each converted layer is
first fitted to its own teacher layer on calibration tokens (Kwon et al. 2022; MOHAWK's hidden-state alignment):
the FFN on the teacher FFN's input and output, its down projection in closed form (ridge least squares), gate/up
(and down) by Adam, down solved again; for Pre-LN the whole layer (attention,
LayerNorms, FFN) so that its residual stream reproduces the teacher's hidden state after that layer
(`--layerwise_stream teacher`, pinned in this study; `hf-ffn heal`'s default, `free`, fits only the stream's
normalised form: "Pre-LN with a free residual stream" below), on the student's own input (sequential), and
`final_norm` in closed form. The matched-width SwiGLU starts from
`init="pruned"` (the full-width approximate SwiGLU conversion, the 1,024 of 1,536 units with the largest
mean |activation| × ‖down column‖ kept, down projection refitted). The end-to-end study (the variants healed by
distillation alone) is studies/healing/end_to_end/healing.md.

## Before → after

| variant | mean cosine | min cosine | max abs diff | mean abs diff | probe, teacher (%) | probe, student (%) (Δ points) | steps | training time |
|---|---|---|---|---|---|---|---|---|
{rows}

## Goals

{verdicts}

## Per-layer attribution

Relative squared error ‖Δ‖²/‖target‖² on the calibration tokens, before → after each layer's fit; "propagated" is
the student's own hidden state after that layer against the teacher's (all earlier errors included); "added" is
its increase over the layer before (a layer can also shrink the error it receives): where it jumps, that layer
(its own fit, and how much it amplifies the error of its input) dominates the end-to-end error. For Pre-LN the
last layer is measured through `final_norm`, as fitted with it.

{layer_tables}

## Layer-wise healing experiments

Each recipe tried, in order, on the same protocol (`studies/healing/layerwise_study.py`, log `{experiments_log}`; wall
seconds include loading and conversion; the load average is the machine's, shared with other jobs, so times are
inflated by it):

{experiments}

## Analysis and next steps

{notes}

## bert-base: time and memory

{scaling}

## Curves

{curve_text}

## How this was made

Machine: {machine}. Versions: {versions}.

```bash
{run_command}
{report_command}
```

which ran, one after the other (each resumable with `--resume_from_checkpoint last`):

```bash
{commands}
```
"""  # noqa: E501  (the before → after table's header row cannot wrap)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["run", "report"])
    parser.add_argument("--work-dir", default=DEFAULT_WORK_DIR, help="students, runs and checkpoints")
    parser.add_argument("--output-dir", help="report: where healing.md and figures/ go (default: the work dir)")
    parser.add_argument(
        "--scaling", help="report: studies/healing/layerwise_scaling.py's JSON (out/layerwise_scaling.json)"
    )
    parser.add_argument(
        "--notes", help="report: a markdown file inserted as the analysis (studies/healing/healing_notes.md)"
    )
    parser.add_argument(
        "--experiments",
        help="report: the layer-wise experiment log (studies/healing/layerwise_study.py) to "
        "summarise, e.g. out/layerwise_study/log.jsonl",
    )
    parser.add_argument("--model", help="the BERT to convert and heal (default: the bundled all-MiniLM-L6-v2)")
    parser.add_argument("--text-dir", default="../shared/data/state_union", help="training text (*.txt files)")
    parser.add_argument("--eval-dir", default="../shared/data/rt_polarity", help="held-out rt_polarity folder")
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        default=DEFAULT_VARIANTS,
        help="default: the layer-wise ones (*-lw); swiglu-approx, swiglu-fresh, pre-ln: end to end",
    )
    parser.add_argument(
        "--steps",
        type=int,
        help="end-to-end optimizer steps per variant (default: the variant's "
        f"own; {END_TO_END_STEPS} for the end-to-end variants, 0 for the layer-wise ones)",
    )
    parser.add_argument("--batch-size", type=int, default=16, help="blocks per step")
    parser.add_argument("--block", type=int, default=128, help="tokens per block")
    parser.add_argument("--train-parts", default="encoder", help="ffn, ffn_norms, encoder or all")
    parser.add_argument("--curve-steps", type=int, default=25, help="measure the curve subset (and save) every N")
    parser.add_argument("--curve-snippets", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of each run")
    parser.add_argument(
        "--hidden-loss",
        default="mse",
        choices=list(LOSSES),
        help="the distillation loss on hidden states (hf-ffn heal --hidden_loss)",
    )
    parser.add_argument(
        "--lr-scheduler",
        default="linear",
        choices=["linear", "constant_with_warmup"],
        help="linear: decay to 0 (the published study); constant_with_warmup: a curve that the "
        "schedule does not flatten, to extrapolate how far a longer run goes",
    )
    args = parser.parse_args(argv)
    (run if args.action == "run" else report)(args)


if __name__ == "__main__":
    main()
