"""Do the from-scratch models fine-tune? Each Study A variant's seed-0 checkpoint, Study B's best Post-LN and
best Pre-LN GELU checkpoints and, as the control, Study A's GELU model untrained (as initialised), fine-tuned on a
task preset with three fine-tuning seeds (`hf_ffn.comparing.finetune_run`: `hf_ffn.finetune.run.finetune`, the task's
recipe with this study's learning rate).

    python -m studies.pretraining.withdrawn_2m.finetune --data_dir ../shared/data      # 24 runs, about 42 minutes here

Reads `--output_dir`/runs.jsonl and the models in runs/ (from `studies.pretraining.withdrawn_2m.run`); appends to
`finetune.jsonl` (resumable: a recorded run is skipped) and writes `finetune.md`: per model the score (mean ± sd
over seeds), the paired difference from the GELU checkpoint with a 95% Student-t interval
(`hf_ffn.comparing.format_table`), and the chance level of the task (the majority class of its scored split).

Learning rate 1e-4, not the preset's 2e-5: BERT's 2e-5 is for a 110M-parameter model pre-trained for a million
steps; for BERT's small models Turc et al. (2019) searched {1e-4, 5e-5, 3e-5} and the repository's four-task study
used 1e-4 for its 22M-parameter model. Batch 32, 3 epochs and the 10% warm-up stay the preset's.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import torch
from transformers import AutoTokenizer, set_seed
from transformers.utils import logging as hf_logging

from hf_ffn.comparing import finetune_run, format_table, paired_score_difference, read_runs
from hf_ffn.configuration_ffn_bert import FfnBertConfig
from hf_ffn.finetune.tasks import get_task
from hf_ffn.modeling_ffn_bert import FfnBertForMaskedLM
from studies.pretraining.withdrawn_2m.records import read_records, study_records
from studies.pretraining.withdrawn_2m.settings import STUDY_A_VARIANTS

LEARNING_RATE = 1e-4
UNTRAINED = "untrained"  # the control: Study A's GELU model as initialised, never pre-trained
FINETUNE_SEEDS = (0, 1, 2)


def order(ffn: str) -> int:
    """Study A's order of FFNs (`STUDY_A_VARIANTS`), others after."""
    return STUDY_A_VARIANTS.index(ffn) if ffn in STUDY_A_VARIANTS else len(STUDY_A_VARIANTS)


def chosen_models(records: list[dict]) -> dict[str, str]:
    """{label: run name}: each Study A FFN's seed-0 run ("<ffn>-post"), and for Study B the GELU run of each
    placement with the lowest final held-out loss at seed 0 ("gelu-post-B", "gelu-pre-B"); of each study the runs
    at its longest `max_steps` (`study_records`: a smoke run in the same folder is left out)."""
    seed0 = {r["ffn_type"]: r["name"] for r in study_records(records, "a") if r["seed"] == 0}
    chosen = {f"{ffn}-post": seed0[ffn] for ffn in sorted(seed0, key=order)}
    for position in ("post", "pre"):
        cells = [
            r
            for r in study_records(records, "b")
            if r["seed"] == 0 and r["ffn_type"] == "gelu" and r["layer_norm_position"] == position
        ]
        finite = [r for r in cells if r["final_loss"] == r["final_loss"]]  # NaN != NaN
        if finite:
            chosen[f"gelu-{position}-B"] = min(finite, key=lambda r: r["final_loss"])["name"]
    if "gelu-post" in chosen:
        chosen["gelu-untrained"] = UNTRAINED
    return chosen


def untrained_checkpoint(runs_dir: Path, like: str) -> Path:
    """`runs_dir/untrained`: the model of run `like` as initialised with seed 0 (its config and tokenizer, weights
    never trained), saved once: what fine-tuning reaches without pre-training."""
    folder = runs_dir / UNTRAINED
    if not (folder / "config.json").is_file():
        set_seed(0)
        model = FfnBertForMaskedLM(FfnBertConfig.from_pretrained(runs_dir / like))
        model.save_pretrained(folder)
        AutoTokenizer.from_pretrained(runs_dir / like).save_pretrained(folder)
    return folder


def majority_share(task: str, data_dir: Path) -> float:
    """The share (×100) of the most frequent label in the split the task is scored on: a classifier's chance
    level."""
    preset = get_task(task)
    labels = preset.load(data_dir / task)[preset.report_split]["label"]
    return 100 * max(Counter(labels).values()) / len(labels)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m studies.pretraining.withdrawn_2m.finetune", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--data_dir", type=Path, required=True, help="the folder holding the task folders")
    parser.add_argument("--output_dir", type=Path, default=Path("out/pretraining"))
    parser.add_argument("--task", default="rt_polarity")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(FINETUNE_SEEDS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max_steps", type=int, default=None, help="a smoke run: stop each fine-tuning here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    models = chosen_models(read_records(args.output_dir / "runs.jsonl"))
    records_file = args.output_dir / "finetune.jsonl"
    done = {(r["variant"], r["task"], r["seed"]) for r in read_runs(records_file)}
    for label, run_name in models.items():
        for seed in args.seeds:
            if (label, args.task, seed) in done:
                continue
            run_dir = args.output_dir / "finetune" / label / args.task / f"seed{seed}"
            runs_dir = args.output_dir / "runs"
            if run_name == UNTRAINED:
                start = untrained_checkpoint(runs_dir, models["gelu-post"])
            else:
                start = runs_dir / run_name
            outcome = finetune_run(
                str(start),
                args.task,
                args.data_dir,
                seed,
                run_dir,
                {"learning_rate": LEARNING_RATE, **({"max_steps": args.max_steps} if args.max_steps else {})},
            )
            record = {"variant": label, "checkpoint": run_name, "task": args.task, "seed": seed, **outcome}
            with records_file.open("a") as handle:
                handle.write(json.dumps(record) + "\n")
            print(
                f"{label} {args.task} seed {seed}: {outcome['score']:.2f} ({outcome['wall_seconds']:.0f} s)", flush=True
            )
    write_report(args.output_dir, args.task, args.data_dir, models)


def write_report(output_dir: Path, task: str, data_dir: Path, models: dict[str, str]) -> None:
    """finetune.md from finetune.jsonl: the table (`format_table`, baseline gelu-post) and the chance level."""
    records = read_runs(output_dir / "finetune.jsonl")
    labels = [label for label in models if any(r["variant"] == label for r in records)]
    table = format_table(records, labels, [task])
    pair = [[r for r in records if r["variant"] == label] for label in ("gelu-pre-B", "gelu-post-B")]
    if all(pair) and (interval := paired_score_difference(*pair)):
        mean, low, high = interval
        table += (
            f"\nStudy B's pair, Pre-LN − Post-LN (both GELU, 150 steps), paired by fine-tuning seed: "
            f"{mean:+.2f} [{low:+.2f}, {high:+.2f}].\n"
        )
    chance = majority_share(task, data_dir)
    lines = [
        f"# Fine-tuning the from-scratch checkpoints on {task}",
        "",
        f"Learning rate {LEARNING_RATE}, otherwise the `{task}` preset's recipe (batch 32, 3 epochs, 10% warm-up); "
        f"fine-tuning seeds {sorted({r['seed'] for r in records})}; score ×100 on the preset's split. Chance (the "
        f"majority class of that split): {chance:.1f}. Δ: paired by fine-tuning seed against gelu-post (Study A's "
        "GELU, seed 0), 95% Student-t interval.",
        "",
        "Checkpoints: " + ", ".join(f"{label} = `runs/{name}`" for label, name in models.items()),
        "",
        table,
    ]
    (output_dir / "finetune.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
