#!/usr/bin/env python
"""Layer-wise healing experiments on all-MiniLM-L6-v2 (or another BERT): one recipe per call, each measured on
studies/healing/healing.md's protocol (all rt_polarity snippets held out, mean-pooled embeddings, 5-fold probe) and
appended to WORK/log.jsonl (command, seconds, load average, cosine, probe, per-layer errors).

    python -m studies.healing.layerwise_study NAME --variant swiglu-matched --prune-score magnitude -- \\
        --layerwise_steps 300 --max_steps 0

Everything after `--` goes to `hf-ffn heal` (`run_healing` in-process, `--method layerwise`, no before/after
measurement there: the teacher's embeddings and probe are computed once and cached in WORK/teacher.npz). The
student of a variant is converted once into WORK/students/VARIANT[-SCORE]; each run writes WORK/NAME/ (the
layer-wise checkpoints, so a rerun resumes) and WORK/NAME/healed. `python -m studies.healing.layerwise_study --list`
prints the log as a table. Defaults: WORK = out/layerwise_study, the bundled all-MiniLM-L6-v2,
../shared/data/state_union, ../shared/data/rt_polarity.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer, HfArgumentParser, TrainingArguments

from hf_ffn import FfnBertModel
from hf_ffn.conversion import convert_checkpoint
from hf_ffn.conversion.pruning import calibration_ids
from hf_ffn.healing import HealArguments, LayerwiseArguments, compare_to_teacher, linear_probe, run_healing
from hf_ffn.parity import bundled_checkpoint
from hf_ffn.training.readers import read_label_files
from hf_ffn.variants import get_variant

# The students: the named variants of hf_ffn.variants (their conversion switches; --prune_score may override the
# pruning score), and this study's own start, "swiglu-fresh" (fresh weights at the matched width).
VARIANTS = {name: get_variant(name).conversion_options() for name in ("swiglu-approx", "swiglu-matched", "pre-ln")}
VARIANTS["swiglu-fresh"] = {"ffn_type": "swiglu", "init": "fresh", "width": "matched"}


def student_folder(args, teacher: str) -> Path:
    name = args.variant + (f"-{args.prune_score}-{args.calibration_tokens}" if args.variant == "swiglu-matched" else "")
    folder = Path(args.work_dir) / "students" / name
    if not (folder / "config.json").is_file():
        options = dict(VARIANTS[args.variant])
        if options.get("init") == "pruned":
            tokenizer = AutoTokenizer.from_pretrained(teacher)
            options.update(
                calibration_ids=calibration_ids([args.text_dir], tokenizer, 128, args.calibration_tokens),
                prune_score=args.prune_score,
            )
        convert_checkpoint(teacher, folder, **options)
    return folder


def teacher_measurements(args, teacher: str, texts, labels) -> dict:
    cache = Path(args.work_dir) / "teacher.npz"
    if cache.is_file():
        data = np.load(cache, allow_pickle=True)
        return {"embeddings": data["embeddings"], "probe": json.loads(str(data["probe"]))}
    model = FfnBertModel.from_pretrained(teacher, add_pooling_layer=False)
    tokenizer = AutoTokenizer.from_pretrained(teacher)
    _, embeddings, _ = compare_to_teacher(model, model, tokenizer, texts)
    probe = linear_probe(embeddings, labels)
    np.savez(cache, embeddings=embeddings, probe=json.dumps(probe))
    return {"embeddings": embeddings, "probe": probe}


def measure(healed: Path, teacher: dict, texts, labels) -> dict:
    """Cosine of mean-pooled embeddings to the teacher's (in the order of `texts`) and the paired probe."""
    model = FfnBertModel.from_pretrained(healed, add_pooling_layer=False)
    tokenizer = AutoTokenizer.from_pretrained(healed)
    _, embeddings, _ = compare_to_teacher(model, model, tokenizer, texts)
    t = torch.from_numpy(teacher["embeddings"])
    cosine = torch.nn.functional.cosine_similarity(torch.from_numpy(embeddings), t, dim=-1).double()
    probe = linear_probe(embeddings, labels)
    difference = np.subtract(probe["folds"], teacher["probe"]["folds"])
    return {
        "cosine_mean": float(cosine.mean()),
        "cosine_min": float(cosine.min()),
        "probe_teacher": teacher["probe"]["accuracy"],
        "probe_student": probe["accuracy"],
        "probe_difference_points": 100 * float(difference.mean()),
        "probe_difference_std_points": 100 * float(difference.std()),
    }


def show(work: Path) -> None:
    print("| run | variant | cosine | min | probe Δ (points) | layer-wise s | end-to-end steps | total s | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for line in (work / "log.jsonl").read_text().splitlines():
        r = json.loads(line)
        m = r["measured"]
        print(
            f"| {r['name']} | {r['variant']} | {m['cosine_mean']:.5f} | {m['cosine_min']:.4f} | "
            f"{m['probe_difference_points']:+.2f} | {r['layerwise_seconds']:.0f} | {r['steps']} | "
            f"{r['train_seconds_total']:.0f} | {r['load_before']} → {r['load_after']} |"
        )


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    heal_argv = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?")
    parser.add_argument("--variant", choices=list(VARIANTS), default="swiglu-matched")
    parser.add_argument("--prune-score", default="magnitude")
    parser.add_argument("--calibration-tokens", type=int, default=65536)
    parser.add_argument("--work-dir", default="out/layerwise_study")
    parser.add_argument("--model", help="default: the bundled all-MiniLM-L6-v2")
    parser.add_argument("--text-dir", default="../shared/data/state_union")
    parser.add_argument("--eval-dir", default="../shared/data/rt_polarity")
    parser.add_argument("--list", action="store_true", help="print the log as a table")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("hf_ffn").setLevel(logging.INFO)
    work = Path(args.work_dir)
    if args.list:
        return show(work)
    teacher = args.model or bundled_checkpoint()
    work.mkdir(parents=True, exist_ok=True)
    texts, labels = read_label_files(args.eval_dir, "--eval-dir", pattern="rt-polarity.*")
    teacher_data = teacher_measurements(args, teacher, texts, labels)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    student = student_folder(args, teacher)
    convert_seconds = time.perf_counter() - start
    run_dir = work / args.name
    defaults = [
        "--method",
        "layerwise",
        "--max_steps",
        "0",
        "--use_cpu",
        "true",
        "--report_to",
        "none",
        "--per_device_train_batch_size",
        "16",
        "--learning_rate",
        "1e-4",
        "--warmup_steps",
        "0",
        "--layers",
        "last",
        "--save_strategy",
        "no",
        "--logging_steps",
        "10",
        "--seed",
        "0",
    ]
    full = [
        "--student",
        str(student),
        "--teacher",
        teacher,
        "--train_files",
        args.text_dir,
        "--output_dir",
        str(run_dir),
        "--healed_dir",
        str(run_dir / "healed"),
        *defaults,
        *heal_argv,
    ]
    heal_args, layerwise_args, training_args = HfArgumentParser(
        (HealArguments, LayerwiseArguments, TrainingArguments)
    ).parse_args_into_dataclasses(args=full)
    if (run_dir / "healed").is_dir():
        healing = json.loads((run_dir / "healed" / "conversion_report.json").read_text())["healing"]
    else:
        healing = run_healing(
            heal_args, training_args, layerwise_args=layerwise_args, command="hf-ffn heal " + shlex.join(full)
        )
    train_seconds = time.perf_counter() - start
    measured = measure(run_dir / "healed", teacher_data, texts, labels)
    layerwise = healing.get("layerwise") or {}
    record = {
        "name": args.name,
        "variant": args.variant,
        "prune_score": args.prune_score,
        "command": "python -m studies.healing.layerwise_study " + shlex.join(sys.argv[1:]),
        "threads": torch.get_num_threads(),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "convert_seconds": convert_seconds,
        "layerwise_seconds": layerwise.get("seconds", 0.0),
        "steps": healing["steps"],
        "end_to_end_seconds": healing["train_seconds"],
        "train_seconds_total": train_seconds,
        "measured": measured,
        "layers": layerwise.get("layers"),
        "final_norm": layerwise.get("final_norm"),
        "tokens": layerwise.get("tokens"),
    }
    with open(work / "log.jsonl", "a") as log:
        log.write(json.dumps(record) + "\n")
    print(
        json.dumps({k: record[k] for k in ("name", "measured", "layerwise_seconds", "train_seconds_total")}, indent=1)
    )


if __name__ == "__main__":
    main()
