"""The from-scratch study's summary and report, from its records with one command:

    python -m studies.pretraining.report   # studies/pretraining/{runs,finetune,...}.jsonl → summary.json, report.md

`summary.json` (issue 37's schema, with issue 42's fields):
- `grid_arm` (issue 42: the recipe arm the grid runs at, `settings.GRID_ARM`; its main cells fill the FFN and
  placement tables, `settings.grid_cells`), `training_tokens_per_main_run` (the main runs' (kind "ffn") tokens;
  `null` before any), `planned_tokens_per_main_run` (`RECIPE_STOP` × 4,096 with a grid arm, else issue 37's
  `MAIN_STEPS` × 4,096), `epochs_per_main_run`, `heldout_tokens` (held-out tokens, one masking; the evaluation masks
  them `EVAL_MASKINGS` times), `floors` {`unigram_mask`, `copy_aware`} (`hf_ffn.mlm.floors`,
  on the evaluation's maskings; before any main run, those of the first record or the last pilot), `device` and
  `corpus_parts` (those the records name);
- `plateau_exit`: per (variant, placement, recipe) of the runs with a plateau probe: `seeds`, `tokens_to_exit`
  (`null`: never left within the run), `tokens_seen`, `never_left`, `cut_by_time_limit` (README.md, "The plateau
  exit"), `final_block`, `below_floor_at_end`, `passed_gate`, `ffn_output_rms_at_start` (`plateau_exits`);
- `ffn_table`: one row per FFN variant of the FFN table (`kind` "ffn"): `variant`, `placement`, `learning_rate`,
  `seeds`, `mask_loss` (mean over seeds of the final loss on [MASK] positions), `delta_vs_gelu` (mean of the paired
  differences variant − GELU, by seed), `interval` ([low, high] of that difference), `confidence` (its level);
- `ffn_table_second_size` (issue 42, item 5): the same rows for the grid at `settings.SECOND_SIZE` (4 × 256: GELU
  and SwiGLU, Pre-LN, each at its rate chosen at full length; `grid_cells`' kind `SECOND_SIZE_KIND`); `[]` before
  its units have run;
- `placement_table`: per FFN (`kind` "placement"; issue 42: the placement stage's units, 41.0M tokens), Pre-LN
  and Post-LN each at its best rate and warm-up (`pre`, `post`: `learning_rate`, `warmup_steps`, `seeds`,
  `mask_loss`), `delta_pre_minus_post` paired by seed, `interval`, `confidence`;
- `gate` (beside the issue's fields): the best main run once there is one; before, the best unit of the grid's
  recipe arm; else the last full pilot (`kind` "pilot" in pilots.jsonl): `from`, `unit`, `tokens_seen`,
  `mask_loss`, `unigram_mask`, `below_unigram_floor`, `required` (`GATE_NATS`), `passed`; `null` without any;
- `finetune`: one row per checkpoint variant and task: `checkpoint` (the variant, or "untrained"), `task`,
  `pretraining_seeds`, `score` (mean over pre-training seeds × fine-tuning seeds), `delta_vs_untrained` (paired by
  pre-training seed with the untrained control of that seed, each side's fine-tuning seeds averaged first: the
  pre-training seeds' variance is inside the interval), `interval`, `confidence`, `checkpoint_gap` (nats: the
  largest |[MASK] loss of the model fine-tuned − runs.jsonl's| over the row's runs, 0 when each model fine-tuned is
  the table's, as a model trained again in a later session should be; `null` for the control or runs without it);
- `finetune_rate_check`: fine-tuning at other rates than the study's (finetune_rates.jsonl, `run.py --stage
  finetune --learning_rate R`): per checkpoint (its name) and task, per rate (the study's rate from finetune.jsonl
  beside) `seeds` (fine-tuning seeds) and `score` (their mean), and `delta_vs_untrained` (the score − that of the
  control of the checkpoint's pre-training seed at the same rate, `null` where the control has none); a check of
  one recipe choice, no interval (one pre-training seed). `[]` without such records.

`report.md` adds, where `bag_of_words.json` is (`python -m studies.pretraining.bag_of_words`), rt_polarity's
bag-of-words baselines on the fine-tuning's split beside the fine-tuned models' scores (not in summary.json).

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
from studies.pretraining.settings import (
    DATA_FILES,
    FINETUNE_LEARNING_RATE,
    GATE_NATS,
    GRID_ARM,
    MAIN_STEPS,
    RECIPE_STOP,
    SECOND_SIZE,
    SECOND_SIZE_KIND,
    SIZES,
    UNTRAINED,
    grid_cells,
    untrained_name,
    untrained_seed,
)

STUDY = Path(__file__).parent
FAMILY_CONFIDENCE = 0.95
FFN_ORDER = ("gelu", "swiglu", "geglu", "relu")
BAG_OF_WORDS = "bag_of_words.json"  # studies.pretraining.bag_of_words's record
BAG_OF_WORDS_MODELS = {"binary_word_pieces": "binary word pieces", "tfidf_1_2_grams": "TF-IDF of 1–2-grams"}


def family_confidence(differences: list[list[float]]) -> float:
    """The level of each interval of a table (Bonferroni): 1 − (1 − FAMILY_CONFIDENCE)/m, m = the comparisons
    with ≥ 2 pairs."""
    return 1 - (1 - FAMILY_CONFIDENCE) / max(sum(len(d) >= 2 for d in differences), 1)


def bonferroni_intervals(differences: list[list[float]]) -> list[list[float] | None]:
    """The paired intervals of a table's comparisons (each a list of paired differences) at family-wise
    `FAMILY_CONFIDENCE`: each at 1 − (1 − FAMILY_CONFIDENCE)/m, m = the comparisons with ≥ 2 pairs."""
    confidence = family_confidence(differences)
    return [list(paired_t_interval(d, confidence)[1:]) if len(d) >= 2 else None for d in differences]


def _paired(rows: dict[int, float], reference: dict[int, float]) -> list[float]:
    return [rows[seed] - reference[seed] for seed in sorted(rows) if seed in reference]


def _cells(records: list[dict], kind: str) -> dict[tuple, dict[int, float]]:
    """{(ffn_type, placement, learning_rate, warmup_steps): {seed: final [MASK] loss}} of the records of `kind`."""
    cells: dict[tuple, dict[int, float]] = defaultdict(dict)
    for record in records:
        if record["kind"] == kind:
            key = (record["ffn_type"], record["placement"], record["learning_rate"], record["warmup_steps"])
            cells[key][record["seed"]] = record["mask_loss"]
    return cells


def _ffn_rank(ffn: str) -> int:
    return FFN_ORDER.index(ffn) if ffn in FFN_ORDER else len(FFN_ORDER)


def loss_table(records: list[dict], kind: str = "ffn") -> list[dict]:
    """The rows of `ffn_table` (records of `kind`: "ffn"; `SECOND_SIZE_KIND` for `ffn_table_second_size`): each
    variant's cell, `delta_vs_gelu` paired by seed with GELU of the same placement, its Bonferroni interval
    (`confidence`: each interval's level)."""
    cells = _cells(records, kind)
    order = sorted(cells, key=lambda k: (k[1], k[2], k[3], _ffn_rank(k[0])))
    gelu = {k[1]: cells[k] for k in cells if k[0] == "gelu"}
    differences = [_paired(cells[k], gelu[k[1]]) if k[1] in gelu and k[0] != "gelu" else [] for k in order]
    intervals, confidence = bonferroni_intervals(differences), family_confidence(differences)
    return [
        {
            "variant": ffn,
            "placement": placement,
            "learning_rate": rate,
            "seeds": sorted(cells[key]),
            "mask_loss": statistics.mean(cells[key].values()),
            "delta_vs_gelu": statistics.mean(diffs) if diffs else None,
            "interval": interval,
            "confidence": confidence if interval is not None else None,
        }
        for key, diffs, interval in zip(order, differences, intervals, strict=True)
        for ffn, placement, rate, _ in [key]
    ]


def placement_table(records: list[dict]) -> list[dict]:
    """The rows of `placement_table` (records of kind "placement"): per FFN, Pre-LN at its best (rate, warm-up)
    against Post-LN at its best (the lowest mean final [MASK] loss of each placement's cells), `delta_pre_minus_post`
    paired by seed, its Bonferroni interval; `null` for an FFN without both placements."""
    cells = _cells(records, "placement")
    best = {}
    for key, losses in cells.items():
        ffn, placement = key[:2]
        if (ffn, placement) not in best or statistics.mean(losses.values()) < statistics.mean(
            cells[best[(ffn, placement)]].values()
        ):
            best[(ffn, placement)] = key
    ffns = sorted({ffn for ffn, _ in best}, key=_ffn_rank)
    differences = [
        _paired(cells[best[(f, "pre")]], cells[best[(f, "post")]]) if {(f, "pre"), (f, "post")} <= set(best) else []
        for f in ffns
    ]
    intervals, confidence = bonferroni_intervals(differences), family_confidence(differences)

    def cell(ffn: str, placement: str) -> dict | None:
        if (ffn, placement) not in best:
            return None
        key = best[(ffn, placement)]
        losses = cells[key]
        return {
            "learning_rate": key[2],
            "warmup_steps": key[3],
            "seeds": sorted(losses),
            "mask_loss": statistics.mean(losses.values()),
        }

    return [
        {
            "variant": ffn,
            "pre": cell(ffn, "pre"),
            "post": cell(ffn, "post"),
            "delta_pre_minus_post": statistics.mean(diffs) if diffs else None,
            "interval": interval,
            "confidence": confidence if interval is not None else None,
        }
        for ffn, diffs, interval in zip(ffns, differences, intervals, strict=True)
    ]


def recipe_label(record: dict) -> str:
    """What a record's training recipe was, beside its FFN and placement: kind, blocks (a sequence-length warm-up's
    two), rate, warm-up, schedule (linear decay, or constant then a linear cool-down), where it stopped."""
    shape = f"{record.get('max_seq_length', 128)}x{record.get('batch_size', 32)}"
    if record.get("short_block"):
        tokens = record["max_seq_length"] * record["batch_size"]
        short = f"{record['short_block']}x{tokens // record['short_block']}"
        shape = f"{short}, then {shape} from step {record['short_block_steps']}"
    schedule = f"{record['max_steps']}-step schedule"
    if record.get("cooldown_steps"):
        schedule = f"constant, cool-down over the last {record['cooldown_steps']} of {record['max_steps']} steps"
    stop = f" stopped at {record['stop_step']}" if record.get("stop_step") else ""
    hidden = record.get("hidden_size", SIZES["hidden_size"])
    size = "" if hidden == SIZES["hidden_size"] else f"{SIZES['num_hidden_layers']} × {hidden} model, "
    return (
        f"{record['kind']}: {size}blocks {shape}, lr {record['learning_rate']:g}, warm-up {record['warmup_steps']}, "
        f"{schedule}{stop}"
    )


def _neighbour_weight_at_exit(record: dict) -> float | None:
    """The cross-check at a run's exit: the probe's `neighbour_weight_vs_uniform` at the exit's evaluation."""
    at = [e for e in record["plateau_curve"] if e.get("tokens") == record["plateau_exit_tokens"]]
    return at[0].get("neighbour_weight_vs_uniform") if at and record["plateau_exit_tokens"] is not None else None


def _mean_rms(record: dict) -> float | None:
    """A record's FFN output rms before training, averaged over its layers (`ffn_output_rms_at_start`)."""
    values = record.get("ffn_output_rms_at_start")
    return statistics.mean(values) if values else None


def plateau_exits(records: list[dict]) -> list[dict]:
    """`plateau_exit`: per (variant, placement, recipe) of the records with a plateau probe (`plateau_curve`), the
    seeds, the tokens at each seed's exit (`tokens_to_exit`, in the seeds' order; `null`: never left within its
    run), the cross-check there (`neighbour_weight_at_exit`: the largest weight on the previous or next token over
    the layers ÷ the uniform 1/n), the tokens each run reached (`tokens_seen`), `never_left` (the runs without an
    exit), `cut_by_time_limit` (the runs a time limit cut), and at the end: `final_block` (tokens a block of the
    final evaluation), `below_floor_at_end` (its [MASK] loss below that block length's unigram floor, each seed),
    `passed_gate` (the runs ≥ `GATE_NATS` below it); `ffn_output_rms_at_start` (each seed's FFN output rms before
    training, mean over the layers: the gated FFNs' is smaller at one init, issue 42 item 3)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for record in records:
        if record.get("plateau_curve"):
            groups[(record["ffn_type"], record["placement"], recipe_label(record))].append(record)
    rows = []
    for (ffn, placement, recipe), runs in sorted(groups.items(), key=lambda g: (g[0][2], g[0][1], _ffn_rank(g[0][0]))):
        runs = sorted(runs, key=lambda r: r["seed"])
        rows.append(
            {
                "variant": ffn,
                "placement": placement,
                "recipe": recipe,
                "seeds": [r["seed"] for r in runs],
                "tokens_to_exit": [r["plateau_exit_tokens"] for r in runs],
                "tokens_seen": [r["tokens_seen"] for r in runs],
                "neighbour_weight_at_exit": [_neighbour_weight_at_exit(r) for r in runs],
                "never_left": sum(r["plateau_exit_tokens"] is None for r in runs),
                "cut_by_time_limit": sum(bool(r.get("cut_by_time_limit")) for r in runs),
                "final_block": runs[0].get("max_seq_length", SIZES["max_seq_length"]),
                "below_floor_at_end": [r["below_unigram_floor"] for r in runs],
                "passed_gate": sum(r["below_unigram_floor"] >= GATE_NATS for r in runs),
                "ffn_output_rms_at_start": [_mean_rms(r) for r in runs],
            }
        )
    return rows


def finetune_table(finetuned: list[dict], records: list[dict]) -> list[dict]:
    """The rows of `finetune`: per variant (the checkpoint's FFN; "untrained" the controls) and task. Each
    checkpoint's scores are averaged over its fine-tuning seeds, then paired by pre-training seed with the control of
    that seed (`settings.untrained_seed`): the interval's spread is the pre-training seeds' (their init and data
    order), the fine-tuning seeds' noise averaged within each."""
    checkpoint = {r["name"]: (r["ffn_type"], r["seed"]) for r in records if r["kind"] == "ffn"}  # the FFN table's
    table_loss = {r["name"]: r["mask_loss"] for r in records if r["kind"] == "ffn"}
    scores: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    gaps: dict[tuple[str, str], list[float]] = defaultdict(list)
    for run in finetuned:
        seed = untrained_seed(run["checkpoint"])
        if seed is None and run["checkpoint"] not in checkpoint:
            continue  # not a checkpoint of the FFN table (another placement, an earlier study's)
        label, seed = (UNTRAINED, seed) if seed is not None else checkpoint[run["checkpoint"]]
        scores[(label, run["task"])][seed].append(run["score"])
        if "checkpoint_mask_loss" in run:
            gaps[(label, run["task"])].append(abs(run["checkpoint_mask_loss"] - table_loss[run["checkpoint"]]))
    means = {key: {seed: statistics.mean(v) for seed, v in by_seed.items()} for key, by_seed in scores.items()}
    order = sorted(means, key=lambda k: (k[1], k[0] != UNTRAINED, _ffn_rank(k[0])))
    differences = [
        _paired(means[k], means[(UNTRAINED, k[1])]) if k[0] != UNTRAINED and (UNTRAINED, k[1]) in means else []
        for k in order
    ]
    intervals, confidence = bonferroni_intervals(differences), family_confidence(differences)
    return [
        {
            "checkpoint": label,
            "task": task,
            "pretraining_seeds": sorted(means[(label, task)]),
            "score": statistics.mean(s for v in scores[(label, task)].values() for s in v),
            "delta_vs_untrained": statistics.mean(d) if d else None,
            "interval": interval,
            "confidence": confidence if interval is not None else None,
            "checkpoint_gap": max(gaps[(label, task)]) if gaps[(label, task)] else None,
        }
        for (label, task), d, interval in zip(order, differences, intervals, strict=True)
    ]


def finetune_rate_check(finetuned: list[dict], at_rates: list[dict], records: list[dict]) -> list[dict]:
    """The rows of `finetune_rate_check` (the module docstring): each checkpoint and task of `at_rates`, at each of
    their rates and the study's (`settings.FINETUNE_LEARNING_RATE`, `finetuned`'s runs of them)."""
    seed_of = {r["name"]: r["seed"] for r in records if r["kind"] == "ffn"}
    runs = [r | {"learning_rate": FINETUNE_LEARNING_RATE} for r in finetuned] + at_rates
    scores: dict[tuple[str, str, float], dict[int, float]] = defaultdict(dict)
    for run in runs:
        scores[(run["checkpoint"], run["task"], run["learning_rate"])][run["seed"]] = run["score"]
    checked = sorted({(r["checkpoint"], r["task"]) for r in at_rates}, key=lambda k: (k[1], k[0]))
    rows = []
    for checkpoint, task in checked:
        pretraining_seed = untrained_seed(checkpoint)
        pretraining_seed = seed_of.get(checkpoint) if pretraining_seed is None else pretraining_seed
        control = None if pretraining_seed is None else untrained_name(pretraining_seed)
        rates = sorted({rate for (name, t, rate) in scores if (name, t) == (checkpoint, task)})
        cells = []
        for rate in rates:
            own, base = scores[(checkpoint, task, rate)], scores.get((control, task, rate))
            score = statistics.mean(own.values())
            delta = None if not base or control == checkpoint else score - statistics.mean(base.values())
            cells.append({"learning_rate": rate, "seeds": sorted(own), "score": score, "delta_vs_untrained": delta})
        rows.append({"checkpoint": checkpoint, "task": task, "rates": cells})
    return rows


def gate(pilots: list[dict], records: list[dict] = (), arm: str | None = None) -> dict | None:
    """The gate's reading: the best main run (`kind` "ffn": the most nats below its [MASK]-position unigram floor)
    once there is one; before, the best unit of the grid's recipe arm `arm` (issue 42); else the last full pilot
    (`kind` "pilot"; the slice pilots are "pilot-slice")."""
    main = [r for r in records if r["kind"] == "ffn"]
    of_arm = [  # the first size's (a second size's units are of the arm too)
        r
        for r in records
        if arm is not None
        and r["kind"] == "recipe"
        and r.get("arm") == arm
        and r.get("hidden_size", SIZES["hidden_size"]) == SIZES["hidden_size"]
    ]
    full = [p for p in pilots if p["kind"] == "pilot"]
    if main or of_arm:
        source, run = (
            ("best main run", main) if main else (f"best unit of the grid's arm ({arm}); no main run yet", of_arm)
        )
        run = max(run, key=lambda r: r["below_unigram_floor"])
    elif full:
        source, run = "last pilot", full[-1]
    else:
        return None
    return {
        "from": source,
        "unit": run["name"],
        "tokens_seen": run["tokens_seen"],
        "mask_loss": run["mask_loss"],
        "unigram_mask": run["floors"]["unigram_mask"],
        "below_unigram_floor": run["below_unigram_floor"],
        "required": GATE_NATS,
        "passed": run["below_unigram_floor"] >= GATE_NATS,
    }


def _device(record: dict) -> str | None:
    """A record's device; before issue 42 every study unit ran on the CPU (`threads` recorded), slice pilots aside."""
    if "device" in record:
        return record["device"]
    return f"cpu ({record['threads']} threads)" if record.get("threads") else None


def _parts(record: dict) -> tuple[str, ...] | None:
    """A record's corpus parts; before issue 42 every study unit read all of `DATA_FILES` (slice pilots aside)."""
    if "corpus_parts" in record:
        return tuple(record["corpus_parts"])
    return DATA_FILES if record["kind"] in ("pilot", "sweep", "ffn", "placement") else None


def summary(
    records: list[dict],
    finetuned: list[dict],
    pilots: list[dict] = (),
    arm: str | None = GRID_ARM,
    finetuned_at_rates: list[dict] = (),
) -> dict:
    """summary.json (the module docstring); `arm`: the recipe arm the grid runs at (`settings.GRID_ARM`);
    `finetuned_at_rates`: finetune_rates.jsonl's records."""
    grid = grid_cells(arm, records)
    records = [*records, *grid]
    in_grid = {id(r) for r in grid}  # the grid's copies of records (another kind): each run in plateau_exit once
    main = [r for r in records if r["kind"] == "ffn"]
    reference = main or records or [p for p in pilots if p["kind"] == "pilot"][-1:]
    first = reference[0] if reference else {}
    every = [*pilots, *records]
    return {
        "training_tokens_per_main_run": max((r["tokens_seen"] for r in main), default=None),
        "planned_tokens_per_main_run": (RECIPE_STOP if arm else MAIN_STEPS)
        * SIZES["batch_size"]
        * SIZES["max_seq_length"],
        "grid_arm": arm,
        "epochs_per_main_run": max((r["epochs"] for r in main), default=None),
        "heldout_tokens": first.get("heldout_tokens"),
        "floors": {key: first["floors"][key] for key in ("unigram_mask", "copy_aware")} if first else None,
        "device": sorted({_device(r) for r in every} - {None}),
        "corpus_parts": [list(parts) for parts in sorted({_parts(r) for r in every} - {None})],
        "gate": gate(list(pilots), records, arm),
        "plateau_exit": plateau_exits([r for r in records if id(r) not in in_grid]),
        "ffn_table": loss_table(records),
        "ffn_table_second_size": loss_table(records, SECOND_SIZE_KIND),
        "placement_table": placement_table(records),
        "finetune": finetune_table(finetuned, records),
        "finetune_rate_check": finetune_rate_check(finetuned, list(finetuned_at_rates), records),
    }


def _number(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _signed(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:+.{digits}f}"


def _interval(interval) -> str:
    return "–" if interval is None else f"[{interval[0]:+.3f}, {interval[1]:+.3f}]"


def _ffn_table_lines(title: str, rows: list[dict]) -> list[str]:
    """report.md's section of an FFN table (`loss_table`'s rows)."""
    lines = [
        "",
        f"## {title}",
        "",
        "| variant | placement | lr | seeds | [MASK] loss | Δ vs GELU | interval |",
        "|---|---|---:|---|---:|---:|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['variant']} | {row['placement']} | {row['learning_rate']:g} | "
            f"{','.join(map(str, row['seeds']))} | {row['mask_loss']:.3f} | {_signed(row['delta_vs_gelu'])} | "
            f"{_interval(row['interval'])} |"
        )
    return lines


def bag_of_words_lines(baselines: dict, result: dict) -> list[str]:
    """report.md's section on `baselines` (bag_of_words.json): each logistic regression's accuracy beside the range
    of the fine-tuned models' mean scores on the same task (the fine-tuning table's and the rate check's)."""
    task, split = baselines["task"], baselines["split"]
    lines = [
        "",
        f"## {task} against bag-of-words baselines ({BAG_OF_WORDS}: `python -m studies.pretraining.bag_of_words`)",
        "",
        f"Logistic regressions fitted on the fine-tuning's {split['train']:,} training snippets, scored on its "
        f"{split['validation']:,} validation and {split['test']:,} test snippets (the fine-tuning reports "
        f"{baselines['reported_split']}); word pieces of the study's tokenizer; always answering the training "
        f"split's majority class scores {100 * baselines['majority_share']['test']:.1f}% on test.",
        "",
        "| baseline | features | C | validation accuracy | test accuracy |",
        "|---|---:|---|---:|---:|",
    ]
    tests = []
    for key, label in BAG_OF_WORDS_MODELS.items():
        for which, note in (("default_C", "default"), ("C_chosen_on_validation", "chosen on validation")):
            cell, grid = baselines[key][which], [row["C"] for row in baselines[key]["C_grid"]]
            note += ", the grid's largest" if which != "default_C" and cell["C"] == max(grid) else ""
            tests.append(100 * cell["test_accuracy"])
            lines.append(
                f"| {label} | {baselines[key]['features']:,} | {cell['C']:g} ({note}) | "
                f"{100 * cell['validation_accuracy']:.1f} | {tests[-1]:.2f} |"
            )
    at_rate = [row["score"] for row in result["finetune"] if row["task"] == task]
    every = at_rate + [c["score"] for row in result["finetune_rate_check"] if row["task"] == task for c in row["rates"]]
    if at_rate:
        lines += [
            "",
            f"The fine-tuned models' mean {task} scores (the tables above): {min(at_rate):.2f}–{max(at_rate):.2f} at "
            f"the study's rate "
            f"{FINETUNE_LEARNING_RATE:g} (the fine-tuning table), {min(every):.2f}–{max(every):.2f} at every rate "
            f"tried; the baselines' {min(tests):.2f}–{max(tests):.2f}.",
        ]
        if max(every) <= max(tests):
            lines[-1] += (
                " No fine-tuned model, the untrained control included, beats the best of them: at this pre-training "
                "budget the fine-tuning table has little power to show a benefit of pre-training on this task."
            )
    return lines


def report_markdown(result: dict, records: list[dict], pilots: list[dict], baselines: dict | None = None) -> str:
    """report.md from `summary`'s `result`; `baselines`: bag_of_words.json's record, or None (no such section)."""
    floors = result["floors"] or {}
    lines = [
        "# Pre-training study (issue 37): report",
        "",
        "Generated by `python -m studies.pretraining.report` from runs.jsonl, finetune.jsonl and pilots.jsonl.",
        "Intervals: paired 95% family-wise per table (Bonferroni; `null`: fewer than two paired seeds).",
        "",
        f"Training tokens per main run: {result['training_tokens_per_main_run']} (planned: "
        f"{result['planned_tokens_per_main_run']:,}); held-out tokens: "
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
    lines += ["", "## Plateau exit (README.md: the first evaluation ≥ 0.3 nats below the floor)", ""]
    lines += [
        "| variant | placement | recipe | seeds | tokens to exit | neighbour weight ÷ uniform there | tokens reached |"
    ]
    lines[-1] += " never left | below the floor at the end (blocks of) | past the gate | FFN output rms at start |"
    lines.append("|---|---|---|---|---|---|---|---:|---|---:|---|")
    for row in result["plateau_exit"]:
        exits = ", ".join("–" if t is None else f"{t / 1e6:.1f}M" for t in row["tokens_to_exit"])
        reached = ", ".join(f"{t / 1e6:.1f}M" for t in row["tokens_seen"])
        weights = ", ".join(_number(w, 1) for w in row["neighbour_weight_at_exit"])
        lines.append(
            f"| {row['variant']} | {row['placement']} | {row['recipe']} | {','.join(map(str, row['seeds']))} | "
            f"{exits} | {weights} | {reached} | {row['never_left']} | "
            f"{', '.join(_number(b) for b in row['below_floor_at_end'])} ({row['final_block']}) | "
            f"{row['passed_gate']} of {len(row['seeds'])} | "
            f"{', '.join(_number(v, 2) for v in row['ffn_output_rms_at_start'])} |"
        )
    lines += _ffn_table_lines("FFN table", result["ffn_table"])
    second = f"FFN table, second size ({SIZES['num_hidden_layers']} × {SECOND_SIZE}, issue 42 item 5)"
    lines += _ffn_table_lines(second, result["ffn_table_second_size"])
    lines += [
        "",
        "## Post-LN vs Pre-LN (one FFN at a time, each placement at its best rate and warm-up)",
        "",
        "| variant | Pre-LN: lr, warm-up, [MASK] loss | Post-LN: lr, warm-up, [MASK] loss | Pre − Post | interval |",
        "|---|---|---|---:|---|",
    ]

    def cell(c) -> str:
        return "–" if c is None else f"{c['learning_rate']:g}, {c['warmup_steps']}, {c['mask_loss']:.3f}"

    for row in result["placement_table"]:
        lines.append(
            f"| {row['variant']} | {cell(row['pre'])} | {cell(row['post'])} | "
            f"{_signed(row['delta_pre_minus_post'])} | {_interval(row['interval'])} |"
        )
    lines += [
        "",
        "## Fine-tuning",
        "",
        "| checkpoint | task | pre-training seeds | score | Δ vs untrained | interval | checkpoint gap (nats) |",
        "|---|---|---|---:|---:|---|---:|",
    ]
    for row in result["finetune"]:
        gap = "–" if row.get("checkpoint_gap") is None else f"{row['checkpoint_gap']:.4f}"
        lines.append(
            f"| {row['checkpoint']} | {row['task']} | {','.join(map(str, row['pretraining_seeds']))} | "
            f"{row['score']:.2f} | {_signed(row['delta_vs_untrained'], 2)} | {_interval(row['interval'])} | {gap} |"
        )
    if result["finetune_rate_check"]:
        lines += [
            "",
            "## Fine-tuning at other rates (a check of the recipe's rate)",
            "",
            "| checkpoint | task | rate | fine-tuning seeds | score | Δ vs its untrained control |",
            "|---|---|---:|---|---:|---:|",
        ]
        for row in result["finetune_rate_check"]:
            for cell in row["rates"]:
                lines.append(
                    f"| {row['checkpoint']} | {row['task']} | {cell['learning_rate']:g} | "
                    f"{','.join(map(str, cell['seeds']))} | {cell['score']:.2f} | "
                    f"{_signed(cell['delta_vs_untrained'], 2)} |"
                )
    if baselines:
        lines += bag_of_words_lines(baselines, result)
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
    result = summary(records, finetuned, pilots, finetuned_at_rates=read("finetune_rates.jsonl"))
    out = args.write_to or args.records_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(result, indent=1) + "\n")
    baselines = args.records_dir / BAG_OF_WORDS
    baselines = json.loads(baselines.read_text()) if baselines.is_file() else None
    (out / "report.md").write_text(report_markdown(result, records, pilots, baselines))
    print(f"wrote {out / 'summary.json'} and {out / 'report.md'}")


if __name__ == "__main__":
    main()
