"""Several study units at once on one device, within a hard time limit (issue 42, item 1).

    # one GPU call (≈ 200 s): the recipe's six units at once, corpus parts carried in DIR, records in OUT
    python -m studies.pretraining.launch --data_dir DIR --out OUT --time_limit 200 --device cuda
    # CPU, across sessions: one unit at a time, each record appended to the study's runs.jsonl and committed
    python -m studies.pretraining.launch --data_dir ../shared/data/pretraining --out studies/pretraining \\
        --device cpu --parallel 1 --commit

The units are those of `--stage` (`units`): "recipe", item 3's three arms (`settings.recipe_units()`: GELU and
SwiGLU, seeds 0-2, 5,000 steps of 4,096 tokens = 20.5M); "rates", "grid" and "placement", item 4's grid at
`settings.GRID_ARM` (`grid_rate_units`, `grid_units`, `placement_stage_units`: the rate units, the FFN table's
seeds, Post-LN vs Pre-LN at 41.0M tokens); with `--hidden_size 256`, "rates" then "grid" run item 5's second size
(4 × 256: `settings.SECOND_SIZE`, GELU and SwiGLU). They read `--parts` of the corpus (default `LAUNCH_PARTS`: wiki-00,
wiki-01, books-00, books-01, 39.5M training tokens an epoch; the records name the parts and the epochs). Each
unit is `run.train_unit` in a process of its own (the study's normal path: `unit_arguments` + `run_pretraining`,
with the plateau probe), fp32, its preprocessing workers fixed (`PREPROCESSING_WORKERS`, on every device: the
blocks depend on it).

Time. `--time_limit` seconds from this command's start bound everything: first the data is prepared once in this
process (tokenizing the parts, blocks, the probe's held-out sets: ~20 s with 16 workers on the GPU machine; from the
cache after), then up to `--parallel` units run at once; each stops training `--reserve` seconds before the limit
(Trainer's `should_training_stop` from a callback), then evaluates, saves and writes its record (marked
`cut_by_time_limit`, with the tokens it reached); a unit still running at the limit minus `KILL_MARGIN` is killed
and named in launch.log. Records are appended to `--out`/runs.jsonl as units end; `--out`/launch.log gets the
timings and the tail of each unit's log (two files, both small).

The arithmetic for one H200 and 200 s (measured there: four units at once, blocks of 128, 131-142k tokens/s each;
tokenizing four parts with 16 workers 20 s). Start-up and data ≈ 10 s imports + 20 s tokenizing + 8 s counting each
part's documents (2 s a part here) + 7 s maskings and probe sets (the floors count the training tokens); each unit
then ≈ 15 s of its own start (imports, the cached data, the floors) and the before-training evaluation; reserve 25 s
for the final evaluation and save: ≈ 200 − 45 − 15 − 25 = 115 s of training. Six units at once at ~100k tokens/s
each (more processes than the four measured, blocks of 32: a guess) reach ≈ 11.5M tokens, about the 10.2M a unit
asks; four units at 135k would reach 15M. Six is the fewest that gives 3 seeds each of GELU and SwiGLU, so the
launch runs all six at once (`--parallel 6`) and leaves the sequence-length warm-up arm for the next call; a unit
the limit cuts still ends with a record of the tokens it reached. Fp32 and without `hf-ffn mlm`'s CUDA speed
defaults (`settings.SPEED_DEFAULTS`: no compile in this budget), as the measurements above. Run as
`studies/gpu_call.sh`'s step 3 the limit is what its first two steps leave (less than 200 s: units cut sooner).

`--smoke` checks the path in a few minutes on a CPU: the first two units, stopped at step `SMOKE_STEPS`, on the
start of each part (`smoke_corpus`, under `--work_dir`).

Resuming (CPU): `--work_dir` keeps the cache, checkpoints (every `SAVE_STEPS`) and finished models; rerun the same
command after an interruption: units recorded in `--out`/runs.jsonl are skipped and an interrupted one resumes
from its last checkpoint. A unit at blocks of 32 is ~10-15 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import lzma
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch
from transformers import AutoTokenizer
from transformers.utils import logging as hf_logging

from hf_ffn.comparing import read_runs
from hf_ffn.training.blocks import documents_to_blocks, fixed_maskings
from hf_ffn.training.corpus import load_corpus
from studies.pretraining.plateau import probe_sets
from studies.pretraining.run import DEVICES, RUNS, STUDY, TOKENIZER, append, corpus_options, probe_folder, train_unit
from studies.pretraining.settings import (
    DATA_FILES,
    EVAL_MASKINGS,
    GRID_ARM,
    HIDDEN_SIZES,
    LAUNCH_PARTS,
    PREPROCESSING_WORKERS,
    SIZES,
    SPLIT_SEED,
    grid_rate_units,
    grid_units,
    placement_stage_units,
    recipe_units,
)

DEFAULT_HIDDEN = SIZES["hidden_size"]
KILL_MARGIN = 5  # seconds before --time_limit at which a unit still running is killed
LOG_TAIL = 1500  # characters of each unit's log kept in launch.log


SMOKE_STEPS, SMOKE_DOCUMENTS, SMOKE_CHARACTERS = 8, 200, 2_000_000  # --smoke: steps a unit, text kept a part


STAGES = ("recipe", "rates", "grid", "placement")


def units(smoke: bool = False, stage: str = "recipe", records: list[dict] = (), hidden_size: int = DEFAULT_HIDDEN):
    """The units this launcher runs, in order: the stage's (`recipe_units()`; at `GRID_ARM`, `grid_rate_units`,
    `grid_units` of the rates chosen in `records`, or `placement_stage_units`), the models `hidden_size` wide (the
    grid's stages: `settings.HIDDEN_SIZES`; the second size runs "rates", then "grid"); with `smoke`, seed 0's GELU
    units of the recipe's first two arms at `hidden_size`, stopped at `SMOKE_STEPS` (the sequence-length warm-up's
    long blocks from half way).

    Raises:
        ValueError: a grid stage before `settings.GRID_ARM` is set, naming the stage; `hidden_size` not one of the
            study's sizes, or a size other than the first for a stage that runs only the first (recipe, placement)."""
    if hidden_size not in HIDDEN_SIZES:
        allowed = ", ".join(map(str, HIDDEN_SIZES))
        raise ValueError(f"--hidden_size {hidden_size}: not one of the study's sizes ({allowed})")
    if hidden_size != DEFAULT_HIDDEN and stage not in ("rates", "grid") and not smoke:
        raise ValueError(
            f"--hidden_size {hidden_size} with --stage {stage}: the second size runs --stage rates, then grid"
        )
    if stage != "recipe" and not smoke:
        if GRID_ARM is None:
            raise ValueError(
                f"--stage {stage}: the grid's arm is not chosen yet (settings.GRID_ARM is None; README.md, "
                '"The recipe\'s three arms")'
            )
        if stage == "placement":
            return placement_stage_units(GRID_ARM, list(records))
        if stage == "rates":
            return grid_rate_units(GRID_ARM, list(records), hidden_size)
        return grid_units(GRID_ARM, list(records), hidden_size)
    if smoke:  # the warm-up first: it trains its first phase itself, which the blocks-of-32 unit then continues
        first, warmup = recipe_units()[:2]
        return [
            dataclasses.replace(
                warmup, stop_step=SMOKE_STEPS, short_block_steps=SMOKE_STEPS // 2, hidden_size=hidden_size
            ),
            dataclasses.replace(first, stop_step=SMOKE_STEPS, hidden_size=hidden_size),
        ]
    return recipe_units()


def relative_to_floor(below: float) -> str:
    """A record's `below_unigram_floor` (nats; negative: above the floor) in words, for launch.log."""
    return f"{abs(below):.3f} nats {'below' if below >= 0 else 'above'} the floor"


def smoke_corpus(data_dir: Path, parts: tuple[str, ...], folder: Path) -> Path:
    """`folder` holding the start of each part of `data_dir` (its first `SMOKE_DOCUMENTS` documents, at most
    `SMOKE_CHARACTERS` characters once two are kept), xz-compressed as the parts are: --smoke's corpus."""
    folder.mkdir(parents=True, exist_ok=True)
    for part in parts:
        if (folder / part).is_file():
            continue
        kept, lines = [], []
        with lzma.open(data_dir / part, "rt", encoding="utf-8", errors="replace") as file:
            for line in file:
                if line.strip():
                    lines.append(line)
                elif lines:
                    kept.append("".join(lines))
                    lines = []
                    size = sum(map(len, kept))
                    if len(kept) >= SMOKE_DOCUMENTS or (len(kept) >= 2 and size >= SMOKE_CHARACTERS):
                        break
        kept += ["".join(lines)] if lines else []
        with lzma.open(folder / part, "wt", encoding="utf-8") as file:
            file.write("\n".join(kept))
    return folder


def part_names(values: list[str]) -> tuple[str, ...]:
    """--parts as file names (wiki-00 → wiki-00.txt.xz).

    Raises:
        ValueError: a part that is not one of the study's corpus files, naming --parts, the value and those allowed.
    """
    names = tuple(value if value.endswith(".txt.xz") else f"{value}.txt.xz" for value in values)
    for value, name in zip(values, names, strict=True):
        if name not in DATA_FILES:
            allowed = ", ".join(n.removesuffix(".txt.xz") for n in DATA_FILES)
            raise ValueError(f"--parts: {value!r} is not a part of the study's corpus; allowed: {allowed}")
    return names


def prepare(data_dir: Path, work_dir: Path, parts: tuple[str, ...], blocks: set[int]) -> None:
    """Tokenize `parts` once into `work_dir`/cache (the cache every unit then reads: tokens, blocks, the held-out
    maskings) and build the probe's held-out sets for each block length in `blocks`."""
    tokenizer = AutoTokenizer.from_pretrained(STUDY / TOKENIZER)
    corpus = corpus_options(data_dir, work_dir / "cache", parts)
    documents = load_corpus(**corpus)
    for block in sorted(blocks):
        held_out = documents_to_blocks(documents, tokenizer, block, num_proc=PREPROCESSING_WORKERS)["validation"]
        fixed_maskings(held_out, tokenizer, EVAL_MASKINGS, SPLIT_SEED)  # the Trainer's evaluation set, cached once
        probe_sets(corpus, tokenizer, block, probe_folder(work_dir, parts, block))


def recorded(out: Path) -> list[dict]:
    """The records of `out`/runs.jsonl (none before the first)."""
    return read_runs(out / RUNS) if (out / RUNS).is_file() else []


def run_one(args: argparse.Namespace) -> int:
    """The child: train the unit `args.one` and write its record to `work_dir`/records/NAME.json."""
    unit = next(u for u in units(args.smoke, args.stage, recorded(args.out), args.hidden_size) if u.name == args.one)
    parts = part_names(args.parts)
    record = train_unit(unit, args.data_dir, args.work_dir, STUDY, args.device, parts, args.stop_training_at)
    folder = args.work_dir / "records"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{unit.name}.json").write_text(json.dumps(record) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    started = time.time()
    parser = argparse.ArgumentParser(prog="python -m studies.pretraining.launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", type=Path, required=True, help="a folder with the corpus parts of --parts")
    parser.add_argument("--out", type=Path, required=True, help="runs.jsonl and launch.log go here")
    parser.add_argument("--time_limit", type=float, default=None, help="seconds from the start for everything")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=DEVICES)
    parser.add_argument("--parallel", type=int, default=6, help="units at once")
    parser.add_argument("--parts", nargs="+", default=[p.removesuffix(".txt.xz") for p in LAUNCH_PARTS])
    parser.add_argument("--work_dir", type=Path, default=Path("out/pretraining"), help="cache, checkpoints, models")
    parser.add_argument("--reserve", type=float, default=25.0, help="seconds kept for the final evaluation and save")
    parser.add_argument("--threads", type=int, default=None, help="torch threads a unit (CPU; default: cores/units)")
    parser.add_argument("--only", nargs="+", default=None, help="only these unit names")
    parser.add_argument("--commit", action="store_true", help="commit each record as it is appended (CPU sessions)")
    parser.add_argument("--smoke", action="store_true", help="two units of a few steps on the parts' first text")
    parser.add_argument(
        "--stage",
        choices=STAGES,
        default="recipe",
        help="the recipe's arms, the grid's rates, its seeds (Pre-LN), or the placement table's units (41M tokens)",
    )
    parser.add_argument(
        "--hidden_size",
        type=int,
        default=DEFAULT_HIDDEN,
        help=f"the models' width: {DEFAULT_HIDDEN}, or {HIDDEN_SIZES[-1]} (the second size: --stage rates, then grid)",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child: one unit
    parser.add_argument("--stop_training_at", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        parts = part_names(args.parts)
    except ValueError as error:
        parser.error(str(error))
    missing = [name for name in parts if not (args.data_dir / name).is_file()]
    if missing:
        parser.error(f"--data_dir {str(args.data_dir)!r} lacks {', '.join(missing)} (the parts of --parts)")
    for name in ("time_limit", "reserve"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            parser.error(f"--{name} {value:g}: must be a positive number of seconds")
    if args.parallel < 1:
        parser.error(f"--parallel {args.parallel}: must be a positive number of units")
    try:
        planned = units(args.smoke, args.stage, recorded(args.out), args.hidden_size)
    except ValueError as error:
        parser.error(str(error))
    known = {u.name for u in planned}
    unknown = sorted(set(args.only or ()) - known)
    if unknown:
        parser.error(f"--only {' '.join(unknown)}: no such unit; the units: {', '.join(sorted(known))}")
    hf_logging.set_verbosity_warning()
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.parallel)
    torch.set_num_threads(threads)
    if args.one:
        return run_one(args)

    args.out.mkdir(parents=True, exist_ok=True)
    log = (args.out / "launch.log").open("a")

    def note(text: str) -> None:
        log.write(f"[{time.time() - started:7.1f} s] {text}\n")
        log.flush()
        print(text, flush=True)

    done = {r["name"] for r in recorded(args.out)}
    todo = [u for u in planned if u.name not in done and (args.only is None or u.name in args.only)]
    if not todo:
        note(f"--stage {args.stage}: nothing to run ({len(done)} recorded; a grid stage waits for its rates)")
        return 0
    if args.smoke:
        args.data_dir = smoke_corpus(args.data_dir, parts, args.work_dir / "smoke-corpus")
    note(
        f"device {args.device}, parts {', '.join(parts)}, {len(todo)} units to run ({len(done)} recorded), "
        f"{args.parallel} at once, {threads} threads each, time limit {args.time_limit} s"
    )
    try:
        prepare(args.data_dir, args.work_dir, parts, {u.max_seq_length for u in todo})
    except Exception:
        note(f"preparing the data failed:\n{traceback.format_exc()[-LOG_TAIL:]}")
        raise
    note("data prepared (tokens, blocks, probe sets)")
    limit = None if args.time_limit is None else started + args.time_limit
    running: dict[str, tuple[subprocess.Popen, Path, float]] = {}
    queue = list(todo)
    (args.work_dir / "logs").mkdir(parents=True, exist_ok=True)
    while queue or running:
        while queue and len(running) < args.parallel:
            if limit is not None and time.time() > limit - args.reserve - 30:
                note(f"not started for lack of time: {', '.join(u.name for u in queue)}")
                queue = []
                break
            unit = queue.pop(0)
            log_path = args.work_dir / "logs" / f"{unit.name}.log"
            command = [sys.executable, "-m", "studies.pretraining.launch", "--one", unit.name]
            command += ["--data_dir", str(args.data_dir), "--out", str(args.out), "--device", args.device]
            command += ["--work_dir", str(args.work_dir), "--threads", str(threads), "--parts", *args.parts]
            command += ["--stage", args.stage, "--hidden_size", str(args.hidden_size)]
            if limit is not None:
                command += ["--stop_training_at", str(limit - args.reserve)]
            command += ["--smoke"] if args.smoke else []
            with log_path.open("w") as output:
                process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
            running[unit.name] = (process, log_path, time.time())
            note(f"started {unit.name} (pid {process.pid})")
        time.sleep(1)
        for name, (process, log_path, since) in list(running.items()):
            overdue = limit is not None and time.time() > limit - KILL_MARGIN
            if process.poll() is None and not overdue:
                continue
            if process.poll() is None:
                process.kill()  # the one process this launcher started for this unit
                process.wait()
                note(f"killed {name} at the time limit")
            del running[name]
            record_path = args.work_dir / "records" / f"{name}.json"
            if record_path.is_file() and process.returncode == 0:
                record = json.loads(record_path.read_text())
                append(args.out / RUNS, record, args.commit)
                rate = record["max_seq_length"] * record["batch_size"] / max(record["seconds_per_step"], 1e-9)
                note(
                    f"recorded {name}: {time.time() - since:.0f} s, {record['tokens_seen']:,} tokens "
                    f"({rate:,.0f} a second "
                    "over this process's steps), [MASK] loss "
                    f"{record['mask_loss']:.3f} ({relative_to_floor(record['below_unigram_floor'])}), plateau "
                    f"exit at {record['plateau_exit_tokens']} tokens"
                    + (", cut by the time limit" if record["cut_by_time_limit"] else "")
                )
            else:
                note(f"{name} ended without a record (exit status {process.returncode})")
            note(f"log of {name} (tail):\n{log_path.read_text()[-LOG_TAIL:]}")
    note("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
