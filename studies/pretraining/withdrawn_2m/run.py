"""Pre-training from scratch, every variant the same way: the runs of Study A (the FFN table) and Study B (Post-LN
vs Pre-LN over learning rate and warm-up), each one `hf_ffn.mlm.run.run_pretraining` (what `hf-ffn mlm` runs).

    python -m studies.pretraining.withdrawn_2m.run --study a --data_dir ../shared/data  # 15 runs, about 55 min
    python -m studies.pretraining.withdrawn_2m.run --study b --data_dir ../shared/data  # 24 runs, about 27 min
    python -m studies.pretraining.withdrawn_2m.run --study a --seeds 0 --max_steps 20 --output_dir out/pretraining-smoke

Writes to `--output_dir` (default out/pretraining): `tokenizer/` (one WordPiece vocabulary, trained once on the
training documents, shared by every run so that all runs see the same token ids), `corpus.json` (documents,
blocks, tokens, the unigram and uniform baselines of the held-out loss), `runs/<run>/` (each trained model) and
`runs.jsonl` (one record per finished run: settings, held-out loss curve, training loss and gradient-norm curves,
per-layer gradient norms, the `run_info.json` report). Resumable: a run whose record is in runs.jsonl is skipped;
an interrupted run starts again from its beginning. `python -m studies.pretraining.withdrawn_2m.report` makes the
tables and figures from runs.jsonl (`studies.pretraining.withdrawn_2m.records` reads it).

Every run of a seed sees the same blocks in the same order with the same masks (the library's guarantee, tested in
tests/test_pretraining.py); the held-out split (10% of the documents, `split_seed` 42) and its masks are the same
for all runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import time
from collections import Counter
from pathlib import Path

import torch
from transformers import TrainerCallback, TrainingArguments
from transformers.utils import logging as hf_logging

from hf_ffn.mlm.arguments import PretrainingArguments, PretrainingDataArguments
from hf_ffn.mlm.run import run_pretraining
from hf_ffn.mlm.tokenizer import train_tokenizer
from hf_ffn.training.blocks import fixed_maskings, mlm_blocks
from hf_ffn.training.corpus import held_out_split, split_documents
from hf_ffn.training.readers import read_text_documents
from studies.pretraining.withdrawn_2m.records import read_records
from studies.pretraining.withdrawn_2m.settings import (
    CORPUS,
    DOCUMENT_START,
    RUN_DEFAULTS,
    SIZES,
    SPLIT_SEED,
    VALIDATION_PERCENT,
    Run,
    study_runs,
)


class LayerGradientNorms(TrainerCallback):
    """Records, every `every` optimizer steps, the L2 norm of each encoder layer's gradient (all its parameters)
    and of the whole model's, as the optimizer receives them (after Trainer's clipping to `max_grad_norm`; the
    Trainer's own log has the norm before clipping, `grad_norm`, at the same steps)."""

    def __init__(self, every: int):
        self.every, self.trace = every, []

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        step = state.global_step + 1  # the step this update completes
        if step % self.every:
            return
        with torch.no_grad():
            layers = [
                math.sqrt(sum(p.grad.pow(2).sum().item() for p in layer.parameters() if p.grad is not None))
                for layer in model.bert.encoder.layer
            ]
            total = math.sqrt(sum(p.grad.pow(2).sum().item() for p in model.parameters() if p.grad is not None))
        self.trace.append({"step": step, "layers": layers, "total_clipped": total})


def corpus_documents(data_dir: Path) -> tuple[list[str], list[str]]:
    """The study's training and held-out documents: `CORPUS` under `data_dir`, WikiText cut into articles at
    `DOCUMENT_START`, `VALIDATION_PERCENT` of the documents held out with `SPLIT_SEED` (as `run_pretraining`)."""
    files = read_text_documents([str(data_dir / path) for path in CORPUS], "*.txt")
    documents = split_documents([text for _, text in files], DOCUMENT_START)
    return held_out_split(documents, VALIDATION_PERCENT, SPLIT_SEED)


def prepare_corpus(data_dir: Path, output_dir: Path) -> dict:
    """Train the shared tokenizer once (saved in `output_dir/tokenizer`) and describe the corpus in
    `output_dir/corpus.json`: documents, blocks and tokens of each split; the held-out loss of two context-free
    predictors on the fixed held-out masks (`uniform`: ln V; `unigram`: the training tokens' frequencies, add-one
    smoothed), the floor a run must beat to have learnt anything from context."""
    path = output_dir / "corpus.json"
    if path.is_file():
        return json.loads(path.read_text())
    train_docs, eval_docs = corpus_documents(data_dir)
    tokenizer = train_tokenizer(train_docs, SIZES["vocab_size"])
    tokenizer.save_pretrained(output_dir / "tokenizer")
    train = mlm_blocks(train_docs, tokenizer, SIZES["max_seq_length"])
    held_out = mlm_blocks(eval_docs, tokenizer, SIZES["max_seq_length"])
    counts = Counter(i for block in train["input_ids"] for i in block)
    total, vocab = sum(counts.values()), len(tokenizer)
    labels = [label for row in fixed_maskings(held_out, tokenizer, 1, SPLIT_SEED)["labels"] for label in row]
    masked = [label for label in labels if label != -100]
    unigram = -sum(math.log((counts[i] + 1) / (total + vocab)) for i in masked) / len(masked)
    corpus = {
        "files": list(CORPUS),
        "document_start_regex": DOCUMENT_START,
        "documents": {"train": len(train_docs), "held_out": len(eval_docs)},
        "blocks": {"train": len(train), "held_out": len(held_out), "tokens_per_block": SIZES["max_seq_length"]},
        "tokens": {"train": len(train) * SIZES["max_seq_length"], "held_out": len(held_out) * SIZES["max_seq_length"]},
        "held_out_masked_tokens": len(masked),
        "vocab_size": vocab,
        "baselines_nats": {"uniform": math.log(vocab), "unigram": unigram},
    }
    path.write_text(json.dumps(corpus, indent=2) + "\n")
    return corpus


def train_one(run: Run, data_dir: Path, output_dir: Path) -> dict:
    """Pre-train `run` through `run_pretraining` and return its record for runs.jsonl."""
    folder = output_dir / "runs" / run.name
    if folder.exists():  # an interrupted run starts again
        shutil.rmtree(folder)
    args = PretrainingArguments(
        tokenizer_name=str(output_dir / "tokenizer"),
        hidden_size=SIZES["hidden_size"],
        num_hidden_layers=SIZES["num_hidden_layers"],
        num_attention_heads=SIZES["num_attention_heads"],
        intermediate_size=SIZES["intermediate_size"],
        hidden_act="gelu",
        ffn_type=run.ffn_type,
        layer_norm_position=run.layer_norm_position,
    )
    data_args = PretrainingDataArguments(
        train_files=[str(data_dir / path) for path in CORPUS],
        document_start_regex=DOCUMENT_START,
        validation_split_percentage=VALIDATION_PERCENT,
        split_seed=SPLIT_SEED,
        max_seq_length=SIZES["max_seq_length"],
    )
    training_args = TrainingArguments(
        output_dir=str(folder),
        max_steps=run.max_steps,
        per_device_train_batch_size=SIZES["batch_size"],
        per_device_eval_batch_size=64,
        learning_rate=run.learning_rate,
        warmup_steps=round(run.warmup_ratio * run.max_steps),
        lr_scheduler_type="linear",
        eval_strategy="steps",
        eval_steps=run.eval_steps,
        logging_steps=RUN_DEFAULTS["logging_steps"],
        save_strategy="no",
        report_to=[],
        seed=run.seed,
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        **{key: RUN_DEFAULTS[key] for key in ("weight_decay", "adam_epsilon", "max_grad_norm")},
    )
    gradients = LayerGradientNorms(RUN_DEFAULTS["logging_steps"])
    outcome = run_pretraining(args, data_args, training_args, callbacks=[gradients])
    history = outcome["log_history"]
    before = outcome["results"]["before_loss"]
    evals = [(0, before)] + [(h["step"], h["eval_loss"]) for h in history if "eval_loss" in h]
    return {
        "name": run.name,
        **run.settings(),
        "final_loss": outcome["results"]["eval_loss"],
        "perplexity": outcome["results"]["eval_perplexity"],
        "eval": evals,
        "train": [(h["step"], h["loss"]) for h in history if "loss" in h],
        "grad_norm": [(h["step"], h["grad_norm"]) for h in history if "grad_norm" in h],
        "learning_rate_schedule": [(h["step"], h["learning_rate"]) for h in history if "learning_rate" in h],
        "layer_grad_norms": gradients.trace,
        "train_seconds": outcome["train_seconds"],
        "wall_seconds": outcome["wall_seconds"],
        "tokens_seen": outcome["tokens_seen"],
        "epochs": outcome["epochs"],
        "parameters": outcome["model"]["parameters"],
        "ffn": outcome["ffn"],
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m studies.pretraining.withdrawn_2m.run", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--study", choices=("a", "b"), required=True)
    parser.add_argument("--data_dir", type=Path, required=True, help="the folder holding state_union/ and wikitext2/")
    parser.add_argument("--output_dir", type=Path, default=Path("out/pretraining"))
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default: the study's (settings.py)")
    parser.add_argument("--max_steps", type=int, default=None, help="default: the study's (settings.py)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", nargs="+", default=None, help="run only these run names")
    args = parser.parse_args(argv)
    missing = [path for path in CORPUS if not (args.data_dir / path).exists()]
    if missing:
        parser.error(f"--data_dir {str(args.data_dir)!r} lacks {', '.join(missing)}: it must hold {', '.join(CORPUS)}")
    runs = study_runs(args.study, seeds=args.seeds, max_steps=args.max_steps)
    if args.only:
        unknown = sorted(set(args.only) - {run.name for run in runs})
        if unknown:
            parser.error(f"--only: no run of study {args.study} is named {', '.join(unknown)} (e.g. {runs[0].name})")
        runs = [run for run in runs if run.name in args.only]
    torch.set_num_threads(args.threads)
    hf_logging.set_verbosity_error()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    corpus = prepare_corpus(args.data_dir, args.output_dir)
    print(f"corpus: {json.dumps(corpus)}", flush=True)
    runs_file = args.output_dir / "runs.jsonl"
    done = {record["name"] for record in read_records(runs_file)}
    todo = [run for run in runs if run.name not in done]
    print(f"study {args.study}: {len(runs)} runs, {len(runs) - len(todo)} already in {runs_file}", flush=True)
    for k, run in enumerate(todo, 1):
        start = time.perf_counter()
        record = train_one(run, args.data_dir, args.output_dir)
        with runs_file.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        print(
            f"[{k}/{len(todo)}] {run.name}: held-out loss {record['final_loss']:.4f} "
            f"({time.perf_counter() - start:.0f} s, load {os.getloadavg()[0]:.2f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
