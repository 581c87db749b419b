"""The from-scratch study's runner (issue 37): one self-contained, resumable unit per run. Issue 42's units (the
recipe's arms and the grid, placement stage included) are launched by `studies.pretraining.launch`, which calls
`train_unit` here; the stages below are issue 37's plan at blocks of 128, except `finetune`, which fine-tunes the
FFN table of either.

    python -m studies.pretraining.run --pilot --data_dir ../shared/data/pretraining             # the gate first
    python -m studies.pretraining.run --stage sweep --data_dir ../shared/data/pretraining --commit
    python -m studies.pretraining.run --stage ffn --data_dir ../shared/data/pretraining --commit
    python -m studies.pretraining.run --stage placement --data_dir ../shared/data/pretraining --commit
    python -m studies.pretraining.run --stage finetune --data_dir ../shared/data/pretraining \\
        --tasks_dir ../shared/data --commit
    python -m studies.pretraining.report                                 # summary.json and report.md

A unit pre-trains one model through `hf_ffn.mlm.run.run_pretraining` (the study's corpus, held-out
documents, shared tokenizer and recipe: settings.py; every module seeded by name, so the variants of a seed share
all weights outside the FFN), evaluates it on the fixed maskings (loss on [MASK] positions beside the context-free
floors, `hf_ffn.mlm.floors`), and appends one line to `studies/pretraining/runs.jsonl` (`--commit`: committed
at once). Rerun the same command after an interruption: recorded units are skipped, and an interrupted one
resumes from its last checkpoint (every `SAVE_STEPS`) under `--output_dir`/runs/NAME. A fine-tuning unit
(checkpoint × task × seed, `hf_ffn.comparing.finetune_run`) appends to finetune.jsonl the same way; a grid model
that --output_dir lacks (a session's machine starts bare) is first trained again from its unit, and each record
carries the [MASK] loss of the model it fine-tuned (`checkpoint_mask_loss`, beside runs.jsonl's). With
`--learning_rate R` (and `--only CHECKPOINT ...`, `--tasks TASK ...` to choose) it fine-tunes at another rate than
the study's, a check of the recipe whose records go to finetune_rates.jsonl (the report's `finetune_rate_check`).

`--pilot` trains one GELU model of the main recipe (`PILOT`, `--max_steps` to shorten it) and checks the gate: its
loss on [MASK] positions must end ≥ `GATE_NATS` below the [MASK]-position unigram floor; the record goes to
pilots.jsonl and the exit status is 1 when the gate is not passed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import torch
from transformers import AutoTokenizer, TrainingArguments, set_seed
from transformers.utils import logging as hf_logging

from hf_ffn.comparing import finetune_run, read_runs
from hf_ffn.configuration_ffn_bert import FfnBertConfig
from hf_ffn.mlm.arguments import PretrainingArguments, PretrainingDataArguments
from hf_ffn.mlm.initialisation import seed_by_name
from hf_ffn.mlm.run import run_pretraining
from hf_ffn.mlm.tokenizer import train_tokenizer
from hf_ffn.modeling_ffn_bert import FfnBertForMaskedLM
from hf_ffn.training.corpus import load_corpus
from studies.pretraining.plateau import PlateauProbe, StopAt, plateau_curve, plateau_exit_tokens, probe_sets
from studies.pretraining.settings import (
    DATA_FILES,
    EVAL_MASKINGS,
    EVAL_STEPS,
    FINETUNE_CHECKPOINT_SEEDS,
    FINETUNE_LEARNING_RATE,
    FINETUNE_SEEDS,
    FINETUNE_TASKS,
    GATE_NATS,
    GRID_ARM,
    HELD_OUT_PERCENT,
    LAUNCH_PARTS,
    LOGGING_STEPS,
    PREPROCESSING_WORKERS,
    RECIPE,
    SAVE_STEPS,
    SIZES,
    SPEED_DEFAULTS,
    SPLIT_SEED,
    Unit,
    ffn_units,
    grid_cells,
    grid_units,
    pilot_units,
    placement_units,
    sweep_units,
    untrained_name,
    untrained_seed,
)

STUDY = Path(__file__).parent  # the records: runs.jsonl, finetune.jsonl, pilots.jsonl, tokenizer/ (--records_dir)
RUNS, FINETUNE, PILOTS, TOKENIZER = "runs.jsonl", "finetune.jsonl", "pilots.jsonl", "tokenizer"
FINETUNE_RATES = "finetune_rates.jsonl"  # fine-tuning at rates other than FINETUNE_LEARNING_RATE (a check, README)
DEVICES = ("cpu", "cuda")


def shared_tokenizer(data_dir: Path, cache_dir: Path, records: Path) -> Path:
    """`records`/tokenizer: WordPiece of `SIZES["vocab_size"]` trained on the training documents (the held-out ones
    excluded), trained once and committed; every unit loads it (and so reads the same cached tokens)."""
    folder = records / TOKENIZER
    if not (folder / "tokenizer.json").is_file():
        documents = load_corpus(**corpus_options(data_dir, cache_dir))
        train_tokenizer(documents["train"], SIZES["vocab_size"]).save_pretrained(folder)
    return folder


def corpus_options(data_dir: Path, cache_dir: Path, parts: tuple[str, ...] = DATA_FILES) -> dict:
    """`load_corpus`'s options for the study's corpus (`parts`: the files of `data_dir` read, by default all)."""
    return {
        "train_files": [str(data_dir / name) for name in parts],
        "validation_split_percentage": HELD_OUT_PERCENT,
        "split_seed": SPLIT_SEED,
        "cache_dir": str(cache_dir),
        "num_proc": PREPROCESSING_WORKERS,
    }


def unit_arguments(
    unit: Unit,
    data_dir: Path,
    output_dir: Path,
    records: Path,
    device: str = "cpu",
    parts: tuple[str, ...] = DATA_FILES,
    evaluate_every: int | None = EVAL_STEPS,
):
    """The three argument objects of `run_pretraining` for `unit` (resuming from the folder's last checkpoint):
    on `device` ("cpu" or "cuda", fp32 on both; `SPEED_DEFAULTS`: the CUDA speed defaults or today's path),
    reading `parts` of `data_dir` with `PREPROCESSING_WORKERS` processes, the Trainer evaluating every
    `evaluate_every` steps (None: at the end only)."""
    if device not in DEVICES:
        raise ValueError(f"--device {device!r} is not one of {', '.join(DEVICES)}")
    folder = output_dir / "runs" / unit.name
    checkpoints = sorted(folder.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    args = PretrainingArguments(
        tokenizer_name=str(records / TOKENIZER),
        hidden_act="gelu",
        ffn_type=unit.ffn_type,
        layer_norm_position=unit.placement,
        config_overrides=RECIPE["config_overrides"],
        seed_modules_by_name=True,
        **unit.model_sizes(),
        bf16_where_available=False,  # fp32 on every device, as the CPU runs
        speed_defaults=SPEED_DEFAULTS,
    )
    data_args = PretrainingDataArguments(
        train_files=corpus_options(data_dir, output_dir / "cache", parts)["train_files"],
        validation_split_percentage=HELD_OUT_PERCENT,
        split_seed=SPLIT_SEED,
        max_seq_length=unit.max_seq_length,
        eval_maskings=EVAL_MASKINGS,
        preprocessing_num_workers=PREPROCESSING_WORKERS,
        cache_dir=str(output_dir / "cache"),
    )
    schedule = {}  # RECIPE's linear decay, or warm-up, constant, then linear decay to 0 (transformers' WSD schedule)
    if unit.cooldown_steps is not None:
        schedule = {
            "lr_scheduler_type": "warmup_stable_decay",
            "lr_scheduler_kwargs": {"num_decay_steps": unit.cooldown_steps, "decay_type": "linear"},
        }
    training_args = TrainingArguments(
        output_dir=str(folder),
        max_steps=unit.max_steps,
        per_device_train_batch_size=unit.batch_size,
        per_device_eval_batch_size=128,
        learning_rate=unit.learning_rate,
        warmup_steps=unit.warmup_steps,
        eval_strategy="steps" if evaluate_every else "no",
        eval_steps=evaluate_every,
        logging_steps=LOGGING_STEPS,
        save_strategy="steps",
        save_steps=SAVE_STEPS,
        save_total_limit=1,
        report_to=[],
        seed=unit.seed,
        use_cpu=device == "cpu",
        disable_tqdm=True,
        dataloader_num_workers=0,
        resume_from_checkpoint=str(checkpoints[-1]) if checkpoints else None,
        **{key: value for key, value in RECIPE.items() if key != "config_overrides"} | schedule,
    )

    return args, data_args, training_args


def finished(unit: Unit, folder: Path) -> bool:
    """Whether `folder` holds `unit`'s model saved at its last step (`stop_step`, else `max_steps`): a model saved
    when a time limit cut the unit (its `trainer_state.json` at an earlier step) is not finished. A folder saved
    before `trainer_state.json` was written counts as finished."""
    if not (folder / "config.json").is_file():
        return False
    state = folder / "trainer_state.json"
    if not state.is_file():
        return True
    return json.loads(state.read_text())["global_step"] >= (unit.stop_step or unit.max_steps)


def train_unit(
    unit: Unit,
    data_dir: Path,
    output_dir: Path,
    records: Path,
    device: str = "cpu",
    parts: tuple[str, ...] = DATA_FILES,
    deadline: float | None = None,
) -> dict:
    """Pre-train and evaluate `unit` on `device` from `parts` of the corpus; its record (one line of runs.jsonl).
    Every unit carries the plateau probe (`studies.pretraining.plateau`) and stops at its `stop_step` or once
    `time.time()` passes `deadline` (then evaluated and saved as at its end, its record `cut_by_time_limit`); the
    Trainer evaluates every `EVAL_STEPS` (a recipe unit: at its end only, the probe evaluating in between). A unit
    whose folder already holds its finished model (saved, then interrupted before its record was written) is
    recorded from the folder; one saved when a time limit cut it resumes from its last checkpoint (`finished`)."""
    folder, probes = output_dir / "runs" / unit.name, probe_folder(output_dir, parts, unit.max_seq_length)
    if finished(unit, folder):
        info = json.loads((probes / "probe.json").read_text()) if (probes / "probe.json").is_file() else None
        return unit_record(unit, saved_outcome(folder), device, parts, info)
    tokenizer, corpus = (
        AutoTokenizer.from_pretrained(records / TOKENIZER),
        corpus_options(data_dir, output_dir / "cache", parts),
    )
    sets, info = probe_sets(corpus, tokenizer, unit.max_seq_length, probes)
    continued_from = continue_earlier(unit, data_dir, output_dir, records, device, parts, deadline)
    every = None if unit.kind == "recipe" else EVAL_STEPS
    arguments = unit_arguments(unit, data_dir, output_dir, records, device, parts, every)
    probe = PlateauProbe(sets, info, tokenizer.mask_token_id, unit.max_seq_length * unit.batch_size)
    outcome = run_pretraining(*arguments, callbacks=[probe, StopAt(unit.stop_step, deadline)])
    return {**unit_record(unit, outcome, device, parts, info), "continued_from": continued_from}


def continue_earlier(
    unit: Unit,
    data_dir: Path,
    output_dir: Path,
    records: Path,
    device: str = "cpu",
    parts: tuple[str, ...] = DATA_FILES,
    deadline: float | None = None,
) -> str | None:
    """Start `unit` from the checkpoint of an earlier unit whose steps are the first steps of its own, copied into
    `unit`'s folder (a resume then carries on from it: the weights, optimiser, schedule, random state and log
    history, plateau probe included); the earlier unit's name, or None when `unit` starts from scratch or its
    folder already has a checkpoint.

    The earlier unit: the same unit stopped sooner (`stop_step` k < `unit`'s, the largest k whose folder keeps
    `checkpoint-k`), else a sequence-length warm-up's `first_phase()` (trained here first when it has no checkpoint
    at its stop step)."""
    folder = output_dir / "runs" / unit.name
    if any(folder.glob("checkpoint-*")):
        return None
    stem = replace(unit, stop_step=None).name.removesuffix(f"-seed{unit.seed}")
    found = []
    for path in (output_dir / "runs").glob(f"{stem}-stop*-seed{unit.seed}"):
        step = path.name.removeprefix(f"{stem}-stop").removesuffix(f"-seed{unit.seed}")
        if step.isdigit() and int(step) < (unit.stop_step or unit.max_steps) and (path / f"checkpoint-{step}").is_dir():
            found.append(int(step))
    if found:
        earlier = replace(unit, stop_step=max(found))
    elif unit.short_block is not None:
        earlier = unit.first_phase()
        if not (output_dir / "runs" / earlier.name / f"checkpoint-{earlier.stop_step}").is_dir():
            train_unit(earlier, data_dir, output_dir, records, device, parts, deadline)
    else:
        return None
    source = output_dir / "runs" / earlier.name / f"checkpoint-{earlier.stop_step}"
    if not source.is_dir():
        raise FileNotFoundError(f"{source}: {unit.name} continues {earlier.name}, whose checkpoint is missing")
    shutil.copytree(source, folder / source.name)
    return earlier.name


def probe_folder(output_dir: Path, parts: tuple[str, ...], block: int) -> Path:
    """Where the plateau probe's held-out sets of `parts` at blocks of `block` are kept (`probe_sets`)."""
    return output_dir / "probes" / f"{'+'.join(part.split('.')[0] for part in parts)}-block{block}"


def saved_outcome(folder: Path) -> dict:
    """What `run_pretraining` returned for the finished run saved in `folder`: its `run_info.json` (the report),
    `all_results.json` (`results`) and the log history of its `trainer_state.json` (a folder saved before that file
    was written: of its last checkpoint, which lacks only what came after it)."""
    state = folder / "trainer_state.json"
    if not state.is_file():
        checkpoints = sorted(folder.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
        if not checkpoints:
            raise FileNotFoundError(f"{folder}: a finished model without trainer_state.json or a checkpoint")
        state = checkpoints[-1] / "trainer_state.json"
    return {
        **json.loads((folder / "run_info.json").read_text()),
        "results": json.loads((folder / "all_results.json").read_text()),
        "log_history": json.loads(state.read_text())["log_history"],
    }


def device_name(device: str) -> str:
    """The device a record names: the CUDA device's name, or "cpu" with its threads."""
    return torch.cuda.get_device_name() if device == "cuda" else f"cpu ({torch.get_num_threads()} threads)"


def unit_record(
    unit: Unit, outcome: dict, device: str = "cpu", parts: tuple[str, ...] = DATA_FILES, probe: dict | None = None
) -> dict:
    """`unit`'s record from `run_pretraining`'s outcome (or `saved_outcome`'s): the final held-out scores beside the
    floors, the Trainer's evaluations (`curve`: step, [MASK] loss, token loss), the plateau probe's evaluations
    (`plateau_curve`, `plateau_exit_tokens`: `studies.pretraining.plateau`), the budget reached (`tokens_seen`,
    `epochs`, `stopped_at_step`, `cut_by_time_limit`), what it ran on (`device`, `corpus_parts`,
    `preprocessing_workers`), the probe's held-out sets (`probe_sets`: per source, documents, blocks, [MASK]
    positions and unigram floor) and its speed (`seconds_per_step` over the steps this process trained)."""
    results, history, floors = outcome["results"], outcome["log_history"], outcome["floors"]
    curve = plateau_curve(history)
    steps_here = outcome["steps"] - outcome.get("resumed_from_step", 0)
    return {
        "name": unit.name,
        **unit.settings(),
        "mask_loss": results["eval_mask_loss"],
        "token_loss": results["eval_token_loss"],
        "mask_accuracy": results["eval_mask_accuracy"],
        "below_unigram_floor": floors["unigram_mask"] - results["eval_mask_loss"],
        "floors": floors,
        "curve": [
            [entry["step"], entry["eval_mask_loss"], entry["eval_token_loss"]]
            for entry in history
            if "eval_mask_loss" in entry
        ],
        "probe_sets": probe,
        "plateau_curve": curve,
        "plateau_exit_tokens": plateau_exit_tokens(curve),
        "before_mask_loss": results.get("before_mask_loss"),
        "tokens_seen": outcome["tokens_seen"],
        "epochs": outcome["epochs"],
        "stopped_at_step": outcome["steps"] if outcome["steps"] < unit.max_steps else None,
        "cut_by_time_limit": any(entry.get("cut_by_time_limit") for entry in history),
        "heldout_tokens": outcome["blocks"]["validation"] * outcome["blocks"]["tokens_per_block"],
        "heldout_maskings": outcome["blocks"]["validation_maskings"],
        "ffn_output_rms_at_start": outcome["ffn_output_rms_at_start"],
        "ffn": outcome["ffn"],
        "parameters": outcome["model"]["parameters"],
        "device": device_name(device),
        "corpus_parts": list(parts),
        "preprocessing_workers": PREPROCESSING_WORKERS,
        "train_seconds": outcome["train_seconds"],
        "resumed_from_step": outcome.get("resumed_from_step", 0),
        "seconds_per_step": outcome["train_seconds"] / max(steps_here, 1),
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
    }


def untrained_checkpoint(output_dir: Path, reference: str, tokenizer: Path, seed: int) -> Path:
    """The control of pre-training seed `seed` (`untrained_name`): the FFN table's GELU model as initialised with
    that seed (`seed_by_name`), never trained; its config is that of `reference`, a GELU run of the FFN table in
    `output_dir`/runs (the config of a unit does not depend on its seed: the controls of seeds 0-2 took seed 0's,
    later ones take their own seed's, trained for that seed's fine-tuning anyway)."""
    folder = output_dir / "runs" / untrained_name(seed)
    if not (folder / "config.json").is_file():
        config = FfnBertConfig.from_pretrained(output_dir / "runs" / reference)
        set_seed(seed)
        seed_by_name(FfnBertForMaskedLM(config), seed).save_pretrained(folder)
        AutoTokenizer.from_pretrained(tokenizer).save_pretrained(folder)
    return folder


def pretrained_checkpoint(name: str, records: list[dict], args: argparse.Namespace, where: Path) -> dict:
    """The record of the grid's model `name` (a unit of `grid_units` at `GRID_ARM`) as `args.output_dir`/runs/NAME
    holds it: read from its finished folder, else trained there again (`train_unit`: the unit's own steps and seed on
    the CPU, from the corpus parts its record names, `corpus_parts`, else the launcher's `LAUNCH_PARTS`; a session's
    machine keeps no models from an earlier session). A model trained again is trained whole, from step 0, resumed
    only where its record's run was (the warm-up's switch at its first phase's stop step): the unit's unfinished
    folder and its first phase's folder are removed first, since a run resumed at another step is another model
    (Trainer masks the first batch after a mid-epoch resume from an RNG state that is not the checkpoint's:
    transformers#39215; README.md: SwiGLU seed 0, its first phase cut at step 1,000 and resumed, ended 0.042 nats
    from the table's model; trained whole, GELU seed 0 ended equal to it bit for bit). Its `mask_loss` is the
    model's own, which fine-tuning records beside the table's (runs.jsonl) as `checkpoint_mask_loss`.

    Raises:
        KeyError: `name` is not a grid unit (then nothing here can train it)."""
    units = {unit.name: unit for unit in grid_units(GRID_ARM, records)} if GRID_ARM is not None else {}
    if name not in units:
        raise KeyError(f"{name}: not a unit of the grid at {GRID_ARM!r}, so its model cannot be trained again here")
    unit, runs = units[name], args.output_dir / "runs"
    if not finished(unit, runs / name):  # trained again whole, from step 0: a resumed unit is another model
        for stale in [runs / name] + ([runs / unit.first_phase().name] if unit.short_block is not None else []):
            shutil.rmtree(stale, ignore_errors=True)
    parts = next((tuple(r["corpus_parts"]) for r in records if r["name"] == name and "corpus_parts" in r), None)
    return train_unit(unit, args.data_dir, args.output_dir, where, "cpu", parts or LAUNCH_PARTS)


def main_records(records: list[dict]) -> list[dict]:
    """`records` and the grid's main cells among them (`grid_cells` at `GRID_ARM`: the Pre-LN cells as kind "ffn")."""
    return [*records, *grid_cells(GRID_ARM, records)]


def finetune_units(main: list[dict]) -> list[tuple[str, str, int]]:
    """(checkpoint, task, seed): the FFN table's checkpoints of each variant for the pre-training seeds of
    `FINETUNE_CHECKPOINT_SEEDS` (`main`'s kind "ffn" records: issue 37's main runs or the grid's Pre-LN cells,
    `main_records`) and the untrained control of each of those seeds, every task of `FINETUNE_TASKS`, every seed of
    `FINETUNE_SEEDS`; pre-training seed-major, its control first (stopping early leaves whole seeds: each variant
    and its control at the same pre-training seeds, which the paired intervals need); no control for a seed without
    a checkpoint."""
    checkpoints = []
    for seed in FINETUNE_CHECKPOINT_SEEDS:
        of_seed = [r["name"] for r in main if r["kind"] == "ffn" and r["seed"] == seed]
        checkpoints += [untrained_name(seed), *of_seed] if of_seed else []
    return [(name, task, seed) for name in checkpoints for task in FINETUNE_TASKS for seed in FINETUNE_SEEDS]


def append(path: Path, record: dict, commit: bool) -> None:
    with path.open("a") as file:
        file.write(json.dumps(record) + "\n")
    if commit:
        subprocess.run(["git", "add", str(path)], check=True)
        subprocess.run(
            ["git", "commit", "-q", "-m", f"pretraining study: {record['name']}", "--", str(path)], check=True
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.pretraining.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", type=Path, required=True, help="../shared/data/pretraining (the corpus)")
    parser.add_argument("--stage", choices=("sweep", "ffn", "placement", "finetune"))
    parser.add_argument("--pilot", action="store_true", help="train the pilot and check the gate")
    parser.add_argument("--max_steps", type=int, default=None, help="--pilot only: a pilot of another length")
    parser.add_argument("--tasks_dir", type=Path, default=Path("../shared/data"), help="the task folders")
    parser.add_argument("--output_dir", type=Path, default=Path("out/pretraining"), help="models, checkpoints, cache")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="only these seeds")
    parser.add_argument("--only", nargs="+", default=None, help="only these unit names (finetune: checkpoints)")
    parser.add_argument("--tasks", nargs="+", default=None, help="finetune only: only these tasks")
    parser.add_argument(
        "--learning_rate",
        type=float,
        default=FINETUNE_LEARNING_RATE,
        help=f"finetune only: another fine-tuning rate than the study's {FINETUNE_LEARNING_RATE:g}, a check whose "
        f"records go to {FINETUNE_RATES}",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--records_dir", type=Path, default=STUDY, help="where the records go (a smoke run: out/)")
    parser.add_argument("--commit", action="store_true", help="commit each record as it is appended")
    args = parser.parse_args(argv)
    if args.pilot == (args.stage is not None):
        parser.error("give --pilot or --stage (one of the two)")
    missing = [name for name in DATA_FILES if not (args.data_dir / name).is_file()]
    if missing:
        parser.error(f"--data_dir {str(args.data_dir)!r} lacks {', '.join(missing)} (the study's corpus)")
    torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_warning()
    where = args.records_dir
    where.mkdir(parents=True, exist_ok=True)
    shared_tokenizer(args.data_dir, args.output_dir / "cache", where)
    records = read_runs(where / RUNS) if (where / RUNS).is_file() else []
    if args.pilot:
        unit = pilot_units(args.max_steps or pilot_units()[0].max_steps)[0]
        record = train_unit(unit, args.data_dir, args.output_dir, where)
        record["gate_passed"] = record["below_unigram_floor"] >= GATE_NATS
        append(where / PILOTS, record, args.commit)
        print(
            f"{unit.name}: [MASK] loss {record['mask_loss']:.3f} vs unigram floor "
            f"{record['floors']['unigram_mask']:.3f}"
            f" ({record['below_unigram_floor']:+.3f} nats below it; the gate asks ≥ {GATE_NATS}: "
            f"{'passed' if record['gate_passed'] else 'NOT passed'})"
        )
        return 0 if record["gate_passed"] else 1
    if args.stage == "finetune":
        rate = args.learning_rate
        into = where / (FINETUNE if rate == FINETUNE_LEARNING_RATE else FINETUNE_RATES)
        finetuned = read_runs(into) if into.is_file() else []
        done = {
            (r["checkpoint"], r["task"], r["seed"])
            for r in finetuned
            if r.get("learning_rate", FINETUNE_LEARNING_RATE) == rate
        }
        main = main_records(records)
        gelu = [r["name"] for r in main if r["kind"] == "ffn" and r["ffn_type"] == "gelu" and r["seed"] == 0]
        if not gelu:
            parser.error(
                "--stage finetune: nothing to fine-tune yet: the FFN table's GELU seed 0 has not reported (its config "
                "is the untrained controls'; runs.jsonl)"
            )
        gelu_of_seed = {r["seed"]: r["name"] for r in main if r["kind"] == "ffn" and r["ffn_type"] == "gelu"}
        for checkpoint, task, seed in finetune_units(main):
            if (checkpoint, task, seed) in done or (args.seeds and seed not in args.seeds):
                continue
            if (args.only and checkpoint not in args.only) or (args.tasks and task not in args.tasks):
                continue
            control = untrained_seed(checkpoint)
            reference = gelu_of_seed.get(control, gelu[0])  # a control's config: its seed's GELU run (else seed 0's)
            # the machine keeps no model from an earlier session: each is trained again here where it is missing
            trained = pretrained_checkpoint(reference if control is not None else checkpoint, records, args, where)
            start, measured = args.output_dir / "runs" / checkpoint, {"checkpoint_mask_loss": trained["mask_loss"]}
            if control is not None:
                start, measured = untrained_checkpoint(args.output_dir, reference, where / TOKENIZER, control), {}
            run_dir = args.output_dir / "finetune" / checkpoint / task / f"seed{seed}"
            other_rate = f"-lr{rate:g}" if rate != FINETUNE_LEARNING_RATE else ""
            run_dir = run_dir.with_name(run_dir.name + other_rate)
            outcome = finetune_run(str(start), task, args.tasks_dir, seed, run_dir, {"learning_rate": rate})
            name = f"finetune-{checkpoint}-{task}-seed{seed}{other_rate}"
            record = {"name": name, "checkpoint": checkpoint, "task": task, "seed": seed, **outcome, **measured}
            append(into, record | ({"learning_rate": rate} if other_rate else {}), args.commit)
        return 0
    units = {
        "sweep": sweep_units,
        "ffn": lambda: ffn_units(records, tuple(args.seeds) if args.seeds else None),
        "placement": lambda: placement_units(tuple(args.seeds) if args.seeds else None),
    }[args.stage]()
    if not units:
        parser.error(f"--stage {args.stage}: no unit to run yet (the FFN table needs the sweep's records first)")
    done = {r["name"] for r in records}
    for unit in units:
        if unit.name in done or (args.only and unit.name not in args.only):
            continue
        append(where / RUNS, train_unit(unit, args.data_dir, args.output_dir, where), args.commit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
