"""`hf-ffn mlm` at GPU speed (issue 41, item 3), measured side by side in one call on whatever device there is:

    python -m studies.benchmark.gpu_pretraining --work_dir out/gpu-pretraining \\
        --data_files ../shared/data/pretraining/wiki-00.txt.xz             # on the GPU machine: ~150 s
    python -m studies.benchmark.gpu_pretraining --quick --work_dir out/gpu-pretraining-quick \\
        --data_files SMALL_TEXT_FILE                                          # a smoke test on a CPU

1. The from-scratch study's model (`studies/pretraining/settings.py`: 4 × 128, the committed 4,096 tokenizer,
   batch 32 × 128, the pilot's recipe, fp32), trained through `run_pretraining` twice with the same seed and data:
   today's path (`--speed_defaults false`) and the new defaults (`hf_ffn.mlm.speed.device_speed_defaults`):
   training tokens/s in the steady state (after `STUDY_WARMUP` steps: compilation and warm-up excluded and
   reported separately, `warmup_seconds` and `compile_seconds`), and the held-out loss on [MASK] positions
   (`eval_mask_loss`) after `STUDY_STEPS` steps (4.1M tokens) for both, and their difference.
2. bert-base size (12 × 768, FFN 3072, vocabulary 30,522: the bundled BERT's tokenizer, batch 32 × 128, bf16 on a
   GPU): tokens/s of `FfnBertForMaskedLM` through `run_pretraining`'s defaults against transformers' `run_mlm.py`
   way (`BertForMaskedLM` + `DataCollatorForLanguageModeling` in a plain `Trainer`, `bf16`) on the same blocks,
   over `BERT_STEPS` steps after `BERT_WARMUP`.

Estimate on one H200 (torch 2.11): data ~15 s (one corpus part read and tokenized twice with 16 workers, then
cached); study model today 1,000 steps at ~25 ms ≈ 25 s, new ≈ 5 s plus ~30 s of compilation (training and
evaluation graphs); bert-base upstream 40 steps at ~50 ms ≈ 2 s plus the model ≈ 5 s, ours ≈ 60 s of
compilation plus 2 s; about 150 s in all. Not yet measured there: `studies/benchmark/gpu.py` runs it.

Each part runs under its own guard: a failure is recorded as `error` (the exception's line) in that part and the
others still run. Steady-state seconds are read with the device synchronised at the window's two ends only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
import traceback
from pathlib import Path

import torch
import transformers
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    DataCollatorForLanguageModeling,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from hf_ffn.mlm.arguments import PretrainingArguments, PretrainingDataArguments
from hf_ffn.mlm.run import run_pretraining
from hf_ffn.parity import bundled_checkpoint
from hf_ffn.training.blocks import documents_to_blocks
from hf_ffn.training.corpus import load_corpus
from studies.pretraining.settings import HELD_OUT_PERCENT, PILOT, RECIPE, SIZES, SPLIT_SEED

STUDY_TOKENIZER = Path(__file__).resolve().parents[1] / "pretraining" / "tokenizer"
STUDY_STEPS, STUDY_WARMUP = 1000, 50  # 1,000 × 4,096 = 4.1M tokens; the steady-state window is steps 51-1,000
BERT_STEPS, BERT_WARMUP = 30, 10
BATCH, BLOCK, EVAL_BLOCKS = SIZES["batch_size"], SIZES["max_seq_length"], 512
FULL = {
    "study_steps": STUDY_STEPS,
    "study_warmup": STUDY_WARMUP,
    "eval": EVAL_BLOCKS,
    "candidate_steps": 400,
    "profile_at": 300,
}
FULL |= {"bert_steps": BERT_STEPS, "bert_warmup": BERT_WARMUP, "bert_batch": BATCH}
QUICK = {"study_steps": 10, "study_warmup": 3, "eval": 32, "bert_steps": 2, "bert_warmup": 1, "bert_batch": 4}
QUICK |= {"candidate_steps": 6, "profile_at": 3}
BERT_BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072}
GOALS = {"study_model_speedup": 4.0, "mask_loss_difference": 0.02, "bert_base_vs_run_mlm": 1.3}


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class SteadyClock(TrainerCallback):
    """Wall-clock marks at the start of training, at the end of step `warmup` and at the end of the last step,
    the device synchronised at those marks only: `warmup_seconds` (compilation, workers starting, the first
    steps) and `steady_seconds` (steps `warmup` + 1 to the last)."""

    def __init__(self, warmup: int):
        self.warmup, self.marks = warmup, {}

    def on_train_begin(self, args, state, control, **kwargs):
        synchronize()
        self.marks["begin"] = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in (self.warmup, state.max_steps):
            synchronize()
            self.marks[state.global_step] = time.perf_counter()

    def timing(self, steps: int, tokens_per_step: int) -> dict:
        """`warmup_seconds`, `steady_seconds`, `steady_steps` and `tokens_per_second` over the steady window."""
        warmup = self.marks[self.warmup] - self.marks["begin"]
        steady = self.marks[steps] - self.marks[self.warmup]
        count = steps - self.warmup
        return {
            "warmup_seconds": warmup,
            "steady_seconds": steady,
            "steady_steps": count,
            "tokens_per_second": count * tokens_per_step / steady,
            "compile_seconds": max(0.0, warmup - self.warmup * steady / count),  # warm-up beyond steady steps
        }


class ProfileWindow(TrainerCallback):
    """torch.profiler (CPU and CUDA) over training steps `start` + 1 .. `start` + `steps`: where a step's time goes
    (`summary`: wall ms per step, the top ops by self CPU time, the labelled ranges torch records for the data
    loader, the optimizer and compiled regions, and how often the host waited for the device)."""

    SYNC_EVENTS = (
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "aten::_local_scalar_dense",
    )

    def __init__(self, start: int, steps: int = 20):
        self.start, self.steps, self.profiler, self.summary = start, steps, None, None

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.start:
            synchronize()
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self.profiler = torch.profiler.profile(activities=activities)
            self.profiler.__enter__()
            self.began = time.perf_counter()
        elif self.profiler is not None and state.global_step == self.start + self.steps:
            synchronize()
            wall = time.perf_counter() - self.began
            self.profiler.__exit__(None, None, None)
            events = self.profiler.key_averages()
            per_step = 1000 / self.steps

            def device_ms(e):
                return getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0)) / 1000

            labelled = [e for e in events if "#" in e.key or "ompiled" in e.key or e.key.startswith("Optimizer")]
            self.summary = {
                "steps": self.steps,
                "wall_ms_per_step": wall * per_step,
                "self_cpu_ms_per_step": sum(e.self_cpu_time_total for e in events) / 1000 / self.steps,
                "device_ms_per_step": sum(device_ms(e) for e in events) / self.steps,
                "syncs_per_step": {e.key: e.count / self.steps for e in events if e.key in self.SYNC_EVENTS},
                "labelled_cpu_ms_per_step": {
                    e.key[:80]: e.cpu_time_total / 1000 / self.steps
                    for e in sorted(labelled, key=lambda e: -e.cpu_time_total)[:12]
                },
                "top_self_cpu_ms_per_step": {
                    e.key[:80]: e.self_cpu_time_total / 1000 / self.steps
                    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:15]
                },
            }
            self.profiler = None


def _training_arguments(output_dir: Path, steps: int, batch: int, **options) -> TrainingArguments:
    return TrainingArguments(
        output_dir=str(output_dir),
        max_steps=steps,
        per_device_train_batch_size=batch,
        per_device_eval_batch_size=batch,  # one batch shape: no recompilation for evaluation's batch size
        save_strategy="no",
        logging_steps=max(1, steps // 4),
        report_to=[],
        disable_tqdm=True,
        seed=0,
        **options,
    )


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    return folder


def _data_arguments(data_files: list[Path], work_dir: Path, eval_blocks: int) -> PretrainingDataArguments:
    return PretrainingDataArguments(
        train_files=[str(path) for path in data_files],
        validation_split_percentage=HELD_OUT_PERCENT,
        split_seed=SPLIT_SEED,
        max_seq_length=BLOCK,
        max_eval_samples=eval_blocks,
        preprocessing_num_workers=min(16, os.cpu_count() or 1),
        cache_dir=str(work_dir / "cache"),
    )


def study_run(
    work_dir: Path,
    data_files: list[Path],
    speed_defaults: bool,
    steps: int,
    warmup: int,
    eval_blocks: int,
    profile_at: int | None = None,
    name: str | None = None,
    **extra,
):
    """One run of the study's model through `run_pretraining` (fp32), timed by `SteadyClock`; `profile_at`: a
    `ProfileWindow` of 20 steps after that step; `extra`: more `TrainingArguments` options (a candidate)."""
    args = PretrainingArguments(
        tokenizer_name=str(STUDY_TOKENIZER),
        hidden_act="gelu",
        ffn_type=PILOT["ffn_type"],
        layer_norm_position=PILOT["placement"],
        config_overrides=RECIPE["config_overrides"],
        seed_modules_by_name=True,
        bf16_where_available=False,
        speed_defaults=speed_defaults,
        **{key: SIZES[key] for key in ("hidden_size", "num_hidden_layers", "num_attention_heads")},
        intermediate_size=SIZES["intermediate_size"],
    )
    training_args = _training_arguments(
        _fresh(work_dir / (name or ("study-new" if speed_defaults else "study-today"))),
        steps,
        BATCH,
        learning_rate=PILOT["learning_rate"],
        warmup_steps=min(PILOT["warmup_steps"], steps // 2),
        **{key: value for key, value in RECIPE.items() if key != "config_overrides"},
        **extra,
    )
    clock = SteadyClock(warmup)
    window = ProfileWindow(profile_at, steps=min(20, steps - profile_at)) if profile_at else None
    callbacks = [clock] + ([window] if window else [])
    outcome = run_pretraining(args, _data_arguments(data_files, work_dir, eval_blocks), training_args, callbacks)
    return {
        **({"profile": window.summary} if window else {}),
        **({"extra": {k: str(v) for k, v in extra.items()}} if extra else {}),
        **clock.timing(steps, BATCH * BLOCK),
        "eval_mask_loss": outcome["results"]["eval_mask_loss"],
        "before_mask_loss": outcome["results"]["before_mask_loss"],
        "steps": outcome["steps"],
        "speed_defaults": outcome["speed_defaults"],
        "bf16": outcome["bf16"],
        "wall_seconds": outcome["wall_seconds"],
    }


def bert_ours(work_dir: Path, data_files: list[Path], tokenizer: str | None, steps: int, warmup: int, batch: int):
    """bert-base from scratch through `run_pretraining`'s defaults (on CUDA: bf16 and the speed defaults)."""
    args = PretrainingArguments(tokenizer_name=tokenizer or bundled_checkpoint(), hidden_act="gelu", **BERT_BASE)
    training_args = _training_arguments(_fresh(work_dir / "bert-ours"), steps, batch, learning_rate=1e-4)
    clock = SteadyClock(warmup)
    outcome = run_pretraining(args, _data_arguments(data_files, work_dir, batch), training_args, [clock])
    return {**clock.timing(steps, batch * BLOCK), "bf16": outcome["bf16"], "speed_defaults": outcome["speed_defaults"]}


def bert_run_mlm(
    work_dir: Path, data_files: list[Path], tokenizer_name: str | None, steps: int, warmup: int, batch: int
):
    """bert-base the `run_mlm.py` way: `BertForMaskedLM` (full decoder), `DataCollatorForLanguageModeling`, a plain
    `Trainer` with `bf16` on a GPU, on the blocks `run_pretraining` reads (the same cache)."""
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_name or bundled_checkpoint())
    data_args = _data_arguments(data_files, work_dir, batch)
    blocks = documents_to_blocks(
        load_corpus(**data_args.corpus_options()), tokenizer, BLOCK, "block", data_args.preprocessing_num_workers
    )["train"]
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), **BERT_BASE))
    on_gpu = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    training_args = _training_arguments(
        _fresh(work_dir / "bert-run-mlm"), steps, batch, learning_rate=1e-4, bf16=on_gpu
    )
    clock = SteadyClock(warmup)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=blocks,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15),
        callbacks=[clock],
    )
    trainer.train()
    return {**clock.timing(steps, batch * BLOCK), "bf16": on_gpu}


def _guarded(part, *arguments, **options) -> dict:
    try:
        return part(*arguments, **options)
    except Exception as error:  # one part's failure must not lose the others' numbers
        return {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-2000:]}


def measure(work_dir: Path, data_files: list[Path], quick: bool = False, bert_tokenizer: str | None = None) -> dict:
    """Today's `hf-ffn mlm` against its new device defaults on the study's model, and bert-base through
    `run_pretraining` against the `run_mlm.py` way, on this machine's device (the module docstring).

    Args:
        work_dir: a folder for the runs and the datasets cache (its `study-*`, `bert-*` folders are replaced).
        data_files: the training text (e.g. one part of ../shared/data/pretraining; 1% of its documents held out).
        quick: `QUICK`'s few steps and small bert-base batch (a smoke test, e.g. on a CPU).
        bert_tokenizer: a bert-base-uncased tokenizer folder (30,522 entries); default: the bundled BERT's.

    Returns:
        `{"study_model_speedup": new / today tokens/s, "bert_base_vs_run_mlm": ours / run_mlm tokens/s,
        "study_model_tokens_per_second": new tokens/s, "mask_loss_difference": new − today eval_mask_loss (nats),
        "study_model": {"today": ..., "new": ...}, "bert_base": {"ours": ..., "run_mlm": ...}, "goals", "settings",
        "device", "torch", "transformers", "seconds"}`; a ratio is None where a part failed (its `error` says why).
    """
    start = time.perf_counter()
    work_dir.mkdir(parents=True, exist_ok=True)
    plan = QUICK if quick else FULL
    study = (plan["study_steps"], plan["study_warmup"], plan["eval"])
    bert = (plan["bert_warmup"] + plan["bert_steps"], plan["bert_warmup"], plan["bert_batch"])
    today = _guarded(study_run, work_dir, data_files, False, *study)
    new = _guarded(study_run, work_dir, data_files, True, *study, plan["profile_at"])
    # candidates beside the defaults (tokens/s only, shorter): each without one of the two defaults the run of
    # 2026-12-04 (studies/benchmark/gpu.json) chose them by: CUDA graphs, and host-to-device copies that do not wait
    short = (plan["candidate_steps"], plan["study_warmup"], plan["eval"])
    candidates = {
        "blocking_copies": {"accelerator_config": {"non_blocking": False}},
        "without_cudagraphs": {"torch_compile_mode": "default"},
    }
    tried = {
        label: _guarded(study_run, work_dir, data_files, True, *short, None, f"study-{label}", **extra)
        for label, extra in candidates.items()
        if torch.cuda.is_available() or (quick and label == "blocking_copies")  # compiling is for CUDA
    }
    ours = _guarded(bert_ours, work_dir, data_files, bert_tokenizer, *bert)
    run_mlm = _guarded(bert_run_mlm, work_dir, data_files, bert_tokenizer, *bert)

    def ratio(a: dict, b: dict, key: str = "tokens_per_second"):
        return a[key] / b[key] if key in a and key in b else None

    loss_difference = (
        new["eval_mask_loss"] - today["eval_mask_loss"]
        if "eval_mask_loss" in new and "eval_mask_loss" in today
        else None
    )
    return {
        "study_model_speedup": ratio(new, today),
        "bert_base_vs_run_mlm": ratio(ours, run_mlm),
        "study_model_tokens_per_second": new.get("tokens_per_second"),
        "mask_loss_difference": loss_difference,
        "study_model": {"today": today, "new": new, "candidates": tried},
        "bert_base": {"ours": ours, "run_mlm": run_mlm},
        "goals": GOALS,
        "settings": {
            "quick": quick,
            **plan,
            "study_sizes": SIZES,
            "bert_sizes": BERT_BASE,
            "block": BLOCK,
            "data_files": [Path(path).name for path in data_files],
        },
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "seconds": time.perf_counter() - start,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work_dir", type=Path, default=Path("out") / "gpu-pretraining")
    parser.add_argument("--data_files", type=Path, nargs="+", required=True)
    parser.add_argument("--quick", action="store_true", help="a few steps, small bert-base batch: a smoke test")
    parser.add_argument("--bert_tokenizer", default=None, help="default: the bundled BERT's (bert-base-uncased's)")
    parser.add_argument("--output", type=Path, default=None, help="also write the result here (JSON)")
    options = parser.parse_args(argv)
    result = measure(options.work_dir, options.data_files, options.quick, options.bert_tokenizer)
    text = json.dumps(result, indent=2, default=str)
    if options.output is not None:
        options.output.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
