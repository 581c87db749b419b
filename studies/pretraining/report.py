"""The from-scratch study's summary and report, from its records with one command:

    python -m studies.pretraining.report   # studies/pretraining/{runs,finetune}.jsonl → summary.json, report.md

`summary.json` (issue 37's schema):
- `training_tokens_per_main_run`, `heldout_tokens` (held-out tokens, one masking; the evaluation masks them
  `EVAL_MASKINGS` times), `floors` {`unigram_mask`, `copy_aware`} (`hf_ffn.training.floors`, on the evaluation's
  maskings);
- `ffn_table`: one row per FFN variant of the FFN table (`kind` "ffn"): `variant`, `placement`, `learning_rate`,
  `seeds`, `mask_loss` (mean over seeds of the final loss on [MASK] positions), `delta_vs_gelu` (mean of the paired
  differences variant − GELU, by seed), `interval` ([low, high] of that difference);
- `placement_table`: one row per Post/Pre-LN cell (`kind` "placement"; the same fields, `warmup_steps` added since
  a cell is also a warm-up): `delta_vs_gelu` against GELU of the same placement, rate and warm-up;
- `gate` (beside the issue's fields): the last full pilot (`kind` "pilot" in pilots.jsonl): `unit`, `tokens_seen`,
  `mask_loss`, `unigram_mask`, `below_unigram_floor`, `required` (`GATE_NATS`), `passed`; `null` without one. With
  no main run yet, `training_tokens_per_main_run`, `heldout_tokens` and `floors` are the pilot's (the main budget,
  the same held-out maskings);
- `finetune`: one row per checkpoint variant and task: `checkpoint` (the variant, or "untrained"), `task`, `score`
  (mean over checkpoint seeds × fine-tuning seeds), `delta_vs_untrained` (paired by fine-tuning seed, the checkpoint
  seeds averaged first), `interval`.

Intervals: paired Student-t (`hf_ffn.comparing.paired_t_interval`) at family-wise 95% with a **Bonferroni**
correction: each interval of a table of m comparisons is a 1 − 0.05/m interval (m = the table's rows with an
interval). `null` where fewer than two pairs exist. Loss differences in nats (negative: the variant is lower);
scores ×100 (positive: the checkpoint is better).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from hf_ffn.comparing import paired_t_interval, read_runs
from studies.pretraining.settings import GATE_NATS

STUDY = Path(__file__).parent
FAMILY_CONFIDENCE = 0.95
FFN_ORDER = ("gelu", "swiglu", "geglu", "relu")


def bonferroni_intervals(differences: list[list[float]]) -> list[list[float] | None]:
    """The paired intervals of a table's comparisons (each a list of paired differences) at family-wise
    `FAMILY_CONFIDENCE`: each at 1 − (1 − FAMILY_CONFIDENCE)/m, m = the comparisons with ≥ 2 pairs."""
    m = sum(len(d) >= 2 for d in differences)
    confidence = 1 - (1 - FAMILY_CONFIDENCE) / max(m, 1)
    return [list(paired_t_interval(d, confidence)[1:]) if len(d) >= 2 else None for d in differences]


def _paired(rows: dict[int, float], reference: dict[int, float]) -> list[float]:
    return [rows[seed] - reference[seed] for seed in sorted(rows) if seed in reference]


def loss_table(records: list[dict], kind: str) -> list[dict]:
    """The rows of `ffn_table` (kind "ffn") or `placement_table` (kind "placement")."""
    cells: dict[tuple, dict[int, float]] = defaultdict(dict)
    for record in records:
        if record["kind"] == kind:
            key = (record["ffn_type"], record["placement"], record["learning_rate"], record["warmup_steps"])
            cells[key][record["seed"]] = record["mask_loss"]
    order = sorted(cells, key=lambda k: (k[1], k[2], k[3], FFN_ORDER.index(k[0]) if k[0] in FFN_ORDER else 9))
    if kind == "ffn":
        gelu = {(k[1],): cells[k] for k in cells if k[0] == "gelu"}
        reference = [gelu.get((k[1],)) for k in order]
    else:
        reference = [cells.get(("gelu", *k[1:])) for k in order]
    differences = [
        _paired(cells[k], ref) if ref is not None and k[0] != "gelu" else []
        for k, ref in zip(order, reference, strict=True)
    ]
    intervals = bonferroni_intervals(differences)
    rows = []
    for key, diffs, interval in zip(order, differences, intervals, strict=True):
        ffn, placement, rate, warmup = key
        row = {
            "variant": ffn,
            "placement": placement,
            "learning_rate": rate,
            "seeds": sorted(cells[key]),
            "mask_loss": statistics.mean(cells[key].values()),
            "delta_vs_gelu": statistics.mean(diffs) if diffs else None,
            "interval": interval,
        }
        if kind == "placement":
            row["warmup_steps"] = warmup
        rows.append(row)
    return rows


def finetune_table(finetuned: list[dict], records: list[dict]) -> list[dict]:
    """The rows of `finetune`: per variant (the checkpoint's FFN; "untrained" the control) and task."""
    variant = {r["name"]: r["ffn_type"] for r in records}
    scores: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run in finetuned:
        label = run["checkpoint"] if run["checkpoint"] == "untrained" else variant.get(run["checkpoint"], "?")
        scores[(label, run["task"])][run["seed"]].append(run["score"])
    means = {key: {seed: statistics.mean(v) for seed, v in by_seed.items()} for key, by_seed in scores.items()}
    order = sorted(means, key=lambda k: (k[1], k[0] != "untrained", FFN_ORDER.index(k[0]) if k[0] in FFN_ORDER else 9))
    differences = [
        _paired(means[k], means[("untrained", k[1])]) if k[0] != "untrained" and ("untrained", k[1]) in means else []
        for k in order
    ]
    intervals = bonferroni_intervals(differences)
    return [
        {
            "checkpoint": label,
            "task": task,
            "score": statistics.mean(s for v in scores[(label, task)].values() for s in v),
            "delta_vs_untrained": statistics.mean(d) if d else None,
            "interval": interval,
        }
        for (label, task), d, interval in zip(order, differences, intervals, strict=True)
    ]


def gate(pilots: list[dict]) -> dict | None:
    """The gate's reading: the last full pilot (`kind` "pilot"; the slice pilots are "pilot-slice")."""
    full = [p for p in pilots if p["kind"] == "pilot"]
    if not full:
        return None
    pilot = full[-1]
    return {
        "unit": pilot["name"],
        "tokens_seen": pilot["tokens_seen"],
        "mask_loss": pilot["mask_loss"],
        "unigram_mask": pilot["floors"]["unigram_mask"],
        "below_unigram_floor": pilot["below_unigram_floor"],
        "required": GATE_NATS,
        "passed": pilot["below_unigram_floor"] >= GATE_NATS,
    }


def summary(records: list[dict], finetuned: list[dict], pilots: list[dict] = ()) -> dict:
    main = [r for r in records if r["kind"] == "ffn"] or records or [p for p in pilots if p["kind"] == "pilot"][-1:]
    first = main[0] if main else {}
    return {
        "training_tokens_per_main_run": max((r["tokens_seen"] for r in main), default=None),
        "heldout_tokens": first.get("heldout_tokens"),
        "floors": {key: first["floors"][key] for key in ("unigram_mask", "copy_aware")} if first else None,
        "gate": gate(list(pilots)),
        "ffn_table": loss_table(records, "ffn"),
        "placement_table": loss_table(records, "placement"),
        "finetune": finetune_table(finetuned, records),
    }


def _number(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _signed(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:+.{digits}f}"


def _interval(interval) -> str:
    return "–" if interval is None else f"[{interval[0]:+.3f}, {interval[1]:+.3f}]"


def report_markdown(result: dict, records: list[dict], pilots: list[dict]) -> str:
    floors = result["floors"] or {}
    lines = [
        "# Pre-training study (issue 37): report",
        "",
        "Generated by `python -m studies.pretraining.report` from runs.jsonl, finetune.jsonl and pilots.jsonl.",
        "Intervals: paired 95% family-wise per table (Bonferroni; `null`: fewer than two paired seeds).",
        "",
        f"Training tokens per main run: {result['training_tokens_per_main_run']}; held-out tokens: "
        f"{result['heldout_tokens']}; floors: [MASK]-position unigram {_number(floors.get('unigram_mask'))}, "
        f"copy-aware context-free {_number(floors.get('copy_aware'))} nats.",
        "",
        "## Pilots",
        "",
        "| unit | tokens | [MASK] loss | unigram floor | below floor | gate |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for pilot in pilots:
        lines.append(
            f"| {pilot['name']} | {pilot['tokens_seen']:,} | {pilot['mask_loss']:.3f} | "
            f"{pilot['floors']['unigram_mask']:.3f} | {pilot['below_unigram_floor']:.3f} | "
            f"{'passed' if pilot.get('gate_passed') else 'not passed'} |"
        )
    for title, table, extra in (
        ("FFN table", result["ffn_table"], False),
        ("Post-LN vs Pre-LN", result["placement_table"], True),
    ):
        lines += [
            "",
            f"## {title}",
            "",
            "| variant | placement | lr | warm-up | seeds | [MASK] loss | Δ vs GELU | interval |",
        ]
        lines.append("|---|---|---:|---:|---|---:|---:|---|")
        for row in table:
            warmup = row.get("warmup_steps", "–") if extra else "–"
            lines.append(
                f"| {row['variant']} | {row['placement']} | {row['learning_rate']:g} | {warmup} | "
                f"{','.join(map(str, row['seeds']))} | {row['mask_loss']:.3f} | {_signed(row['delta_vs_gelu'])} | "
                f"{_interval(row['interval'])} |"
            )
    lines += [
        "",
        "## Fine-tuning",
        "",
        "| checkpoint | task | score | Δ vs untrained | interval |",
        "|---|---|---:|---:|---|",
    ]
    for row in result["finetune"]:
        lines.append(
            f"| {row['checkpoint']} | {row['task']} | {row['score']:.2f} | {_signed(row['delta_vs_untrained'], 2)} | "
            f"{_interval(row['interval'])} |"
        )
    sweep = [r for r in records if r["kind"] == "sweep"]
    if sweep:
        lines += ["", "## Learning-rate sweep", "", "| unit | [MASK] loss | below unigram floor |", "|---|---:|---:|"]
        lines += [f"| {r['name']} | {r['mask_loss']:.3f} | {r['below_unigram_floor']:.3f} |" for r in sweep]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m studies.pretraining.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records_dir", type=Path, default=STUDY, help="where runs.jsonl etc. are")
    parser.add_argument("--write_to", type=Path, default=None, help="default: --records_dir")
    args = parser.parse_args(argv)

    def read(name: str) -> list[dict]:
        path = args.records_dir / name
        return read_runs(path) if path.is_file() else []

    records, finetuned, pilots = read("runs.jsonl"), read("finetune.jsonl"), read("pilots.jsonl")
    result = summary(records, finetuned, pilots)
    out = args.write_to or args.records_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "report.md").write_text(report_markdown(result, records, pilots))
    print(f"wrote {out / 'summary.json'} and {out / 'report.md'}")


if __name__ == "__main__":
    main()
