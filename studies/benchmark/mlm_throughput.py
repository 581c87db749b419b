"""MLM training throughput: `hf-ffn mlm`'s training step against transformers' own `BertForMaskedLM` trained the
`run_mlm.py` way, and with `torch.compile`, side by side in one process (issue 36).

    python -m studies.benchmark.mlm_throughput                      # the measurement, a few minutes on 2 cores
    python -m studies.benchmark.mlm_throughput --quick              # tiny sizes, no compile: a smoke test

Candidates, one model config (4 layers × hidden 128, 2 heads, FFN 512, vocabulary 4,096, GELU, Post-LN), one
batch shape (32 blocks × 128 tokens), the same random token blocks, AdamW (the Trainer's, `TrainingArguments`'
default optimizer), dropout on:

- *hf-ffn mlm*: `FfnBertForMaskedLM` with sparse prediction (the head decodes only the masked positions) through
  `hf_ffn.mlm.trainer.mlm_trainer`: its collator (BERT's dynamic 80/10/10 masking) and `Trainer.training_step`;
- *upstream run_mlm*: `BertForMaskedLM` (full decoder: every position through the vocabulary decoder) with
  `DataCollatorForLanguageModeling` in a plain `Trainer`, as `run_mlm.py` trains (its grouped texts are these
  fixed-length blocks);
- *hf-ffn mlm + compile*: the first, its model `torch.compile`d (what `--torch_compile` does).

A step = collate a batch (masking), `Trainer.training_step` (forward, loss, backward), `optimizer.step()`,
`optimizer.zero_grad()`. Steps run in interleaved rounds after warm-up (`studies.benchmark.time_interleaved`,
wall clock); tokens/s = 32 × 128 / the median step time; achieved GFLOP/s = `hf_ffn.params.mlm_flops`'
`training_flops` (3 × the forward matrix products: the encoder on every token, the head on the masked positions
or, upstream, on every position) / step time. The ratio to upstream is the median of per-round ratios of tokens/s.
The limit beside them, measured in the same run: fp32 matrix products at `torch.get_num_threads()` threads (the
FFN's (4096 × 128) @ (128 × 512) and a square 2048³). Then one step of each candidate under `torch.profiler`:
every aten op's self CPU time charged to its phase (collate, forward, backward, optimizer) and to its outermost op
(`aten::mm` inside `aten::linear` counts as the linear layer; backward ops under their autograd function), summed
by kind (linear layers, attention core, LayerNorm, GELU, dropout, loss, embeddings, masked-row gather, AdamW,
collate): where the time that is not matrix products goes. `uptime` (the load averages) is printed before and
after: read the numbers with it. Writes `mlm_throughput.json` and `mlm_throughput.md` to `--output-dir` (default
`out/benchmark`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from datasets import Dataset
from torch.profiler import record_function
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertTokenizerFast,
    DataCollatorForLanguageModeling,
    Trainer,
    TrainingArguments,
)
from transformers.utils import logging as hf_logging

from hf_ffn.configuration_ffn_bert import FfnBertConfig
from hf_ffn.mlm.trainer import mlm_trainer
from hf_ffn.modeling_ffn_bert import FfnBertForMaskedLM
from hf_ffn.params import mlm_flops
from studies.benchmark.timing import cpu_profiler, paired_ratio, time_interleaved
from studies.common.environment import environment, load_average

UPSTREAM = "upstream run_mlm (BertForMaskedLM, full decoder)"
OURS = "hf-ffn mlm (FfnBert, sparse prediction)"
COMPILED = "hf-ffn mlm + torch.compile"
PHASES = ("collate", "forward and backward", "optimizer")  # the step's parts (torch.profiler.record_function)
# An op's time is charged to its outermost op inside a phase (e.g. `aten::mm` under `aten::linear`, or under
# "autograd::engine::evaluate_function: AddmmBackward0" in the backward pass); that op's name → kind (first match).
KINDS = (
    ("optimizer (AdamW)", ("Optimizer.",)),
    ("linear layers (matmul + bias)", ("aten::linear", "AddmmBackward", "MmBackward", "aten::matmul", "aten::addmm")),
    ("attention core", ("scaled_dot_product", "ScaledDotProduct", "aten::bmm", "BmmBackward", "softmax", "Softmax")),
    ("LayerNorm", ("layer_norm", "LayerNorm")),
    ("GELU", ("gelu", "Gelu")),
    ("dropout", ("dropout", "Dropout", "bernoulli")),
    ("loss (log-softmax, NLL)", ("cross_entropy", "LogSoftmax", "NllLoss")),
    ("embeddings", ("embedding", "Embedding")),
    ("masked-row gather", ("aten::index", "IndexBackward", "aten::ne", "aten::nonzero")),
    ("gradient accumulation", ("AccumulateGrad",)),
)

MATMUL_KINDS = ("linear layers (matmul + bias)", "attention core")


@dataclass(frozen=True)
class Settings:
    layers: int = 4
    hidden: int = 128
    heads: int = 2
    ffn: int = 512
    vocab: int = 4096
    batch: int = 32
    seq: int = 128
    rounds: int = 8
    warmup: int = 3
    compile: bool = True
    mlm_probability: float = 0.15
    learning_rate: float = 1e-4
    seed: int = 0

    def config_sizes(self) -> dict[str, int]:
        """The model's sizes as config fields (`BertConfig` and `FfnBertConfig` alike)."""
        return dict(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            intermediate_size=self.ffn,
            max_position_embeddings=max(512, self.seq),
        )


QUICK = Settings(layers=1, hidden=32, heads=2, ffn=64, vocab=256, batch=4, seq=32, rounds=2, warmup=1, compile=False)


def log(message: str) -> None:
    print(message, flush=True)


def uptime() -> str:
    """The `uptime` line (load averages), or the load averages alone where the command is missing."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"load average: {load_average()}"


def word_tokenizer(vocab: int, folder: str) -> BertTokenizerFast:
    """A BERT WordPiece tokenizer whose vocabulary is BERT's five special tokens and made-up words up to `vocab`."""
    path = Path(folder) / "vocab.txt"
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(vocab - 5)]
    path.write_text("\n".join(words) + "\n")
    return BertTokenizerFast(vocab_file=str(path))


def random_blocks(settings: Settings, tokenizer, batches: int = 8) -> Dataset:
    """`batches` × `batch` blocks of `seq` seeded random non-special token ids (the same for every candidate)."""
    generator = torch.Generator().manual_seed(settings.seed)
    ids = torch.randint(5, settings.vocab, (batches * settings.batch, settings.seq), generator=generator)
    return Dataset.from_dict({"input_ids": ids.tolist(), "special_tokens_mask": torch.zeros_like(ids).tolist()})


def training_step(trainer: Trainer, model: torch.nn.Module, blocks: Dataset, batch: int) -> Callable[[], int]:
    """One training step through `trainer`'s collator, `training_step` and optimizer over the next `batch` rows of
    `blocks` (cycling); returns the rows the MLM head decoded (the masked positions under sparse prediction, every
    position otherwise)."""
    optimizer = trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1  # what Trainer's loop sets before its training steps
    rows = [blocks[i] for i in range(len(blocks))]
    sparse = getattr(getattr(model, "config", None), "sparse_prediction", False)
    position = [0]

    def step() -> int:
        start = position[0] % len(rows)
        position[0] += batch
        with record_function(PHASES[0]):
            inputs = trainer.data_collator(rows[start : start + batch])
        with record_function(PHASES[1]):
            trainer.training_step(model, inputs)
        with record_function(PHASES[2]):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return int((inputs["labels"] != -100).sum()) if sparse else inputs["input_ids"].numel()

    return step


def candidates(settings: Settings, tokenizer, blocks: Dataset, folder: str) -> dict[str, Callable[[], int]]:
    """name → one training step (see the module docstring)."""
    sizes = settings.config_sizes()
    args = TrainingArguments(
        output_dir=folder,
        per_device_train_batch_size=settings.batch,
        learning_rate=settings.learning_rate,
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
    )
    steps = {}
    torch.manual_seed(settings.seed)
    upstream = BertForMaskedLM(BertConfig(**sizes))
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=settings.mlm_probability)
    trainer = Trainer(model=upstream, args=args, train_dataset=blocks, data_collator=collator)
    steps[UPSTREAM] = training_step(trainer, upstream, blocks, settings.batch)
    for name in (OURS, COMPILED) if settings.compile else (OURS,):
        torch.manual_seed(settings.seed)
        model = FfnBertForMaskedLM(FfnBertConfig(**sizes, sparse_prediction=True))
        trainer = mlm_trainer(
            model, tokenizer, blocks, blocks.select(range(1)), replace(args), settings.mlm_probability
        )
        run = torch.compile(model) if name == COMPILED else model
        steps[name] = training_step(trainer, run, blocks, settings.batch)
    return steps


def matmul_limit(settings: Settings, repeats: int = 5) -> dict[str, float]:
    """GFLOP/s of fp32 matrix products at this process's threads: the FFN's up-projection shape (tokens ×
    hidden) @ (hidden × FFN) and a square 2048³; the median of `repeats` after one warm-up."""
    tokens = settings.batch * settings.seq
    shapes = {
        f"({tokens} x {settings.hidden}) @ ({settings.hidden} x {settings.ffn})": (
            tokens,
            settings.hidden,
            settings.ffn,
        ),
        "2048 x 2048 @ 2048 x 2048": (2048, 2048, 2048),
    }
    limits = {}
    for name, (m, k, n) in shapes.items():
        a, b = torch.randn(m, k), torch.randn(k, n)
        times = time_interleaved({name: lambda a=a, b=b: a @ b}, repeats, warmup=1)[name]
        limits[name] = 2 * m * k * n / statistics.median(times) / 1e9
    return limits


def outermost(event) -> tuple[str, str]:
    """`(phase, name)` of a profiler event: the `PHASES` entry it ran in (backward ops run under the autograd
    engine: "backward"; none found: "other") and its outermost op below the phase."""
    names = [event.name]
    while event.cpu_parent is not None and event.cpu_parent.name not in PHASES:
        event = event.cpu_parent
        names.append(event.name)
    phase = event.cpu_parent.name if event.cpu_parent is not None else "other"
    if names[-1].startswith("autograd::engine"):
        phase = "backward"
    elif phase == PHASES[1]:
        phase = "forward"
    return phase, names[-1]


def profile(step: Callable[[], int], top: int = 12) -> dict:
    """One profiled step (after one untimed): every aten op's self CPU time charged to its phase (collate,
    forward, backward, optimizer) and to its outermost op (`outermost`), that op's kind (`KINDS`, "other" for the
    rest); each sum with its share of the step's total self time, the `top` outermost ops listed."""
    step()
    with cpu_profiler() as prof:
        step()
    phases: dict[str, float] = {}
    kinds: dict[str, float] = {}
    ops: dict[str, float] = {}
    for event in prof.events():
        if not event.name.startswith("aten::"):
            continue
        phase, name = outermost(event)
        kind = next((kind for kind, parts in KINDS if any(part in name for part in parts)), "other")
        if phase == PHASES[0]:
            kind = "collate (masking)"
        for sums, key in ((phases, phase), (kinds, kind), (ops, name)):
            sums[key] = sums.get(key, 0.0) + event.self_cpu_time_total
    total = sum(phases.values()) or 1.0

    def table(sums: dict[str, float], rows: int | None = None) -> dict:
        ordered = sorted(sums.items(), key=lambda item: -item[1])[:rows]
        return {key: {"ms": value / 1e3, "share": value / total} for key, value in ordered}

    return {"total_ms": total / 1e3, "phases": table(phases), "kinds": table(kinds), "top_ops": table(ops, top)}


def run(settings: Settings, output_dir: str | None, command: str) -> dict:
    """Measure (module docstring), print the report, write it to `output_dir` (none: print only)."""
    hf_logging.set_verbosity_error()
    before = uptime()
    log(f"before: {before}")
    with tempfile.TemporaryDirectory() as folder:
        tokenizer = word_tokenizer(settings.vocab, folder)
        blocks = random_blocks(settings, tokenizer)
        steps = candidates(settings, tokenizer, blocks, folder)
        decoded = {name: [] for name in steps}
        counted = {name: (lambda name=name, fn=fn: decoded[name].append(fn())) for name, fn in steps.items()}
        log(f"timing {len(steps)} candidates: {settings.warmup} warm-up steps, {settings.rounds} interleaved rounds")
        times = time_interleaved(counted, settings.rounds, settings.warmup)
        limits = matmul_limit(settings)
        profiles = {name: profile(fn) for name, fn in steps.items()}
    after = uptime()
    log(f"after: {after}")
    tokens = settings.batch * settings.seq
    config = FfnBertConfig(**settings.config_sizes())
    flops = mlm_flops(config, settings.seq)
    rows = []
    for name, seconds in times.items():
        step_flops = flops.training_flops(tokens, statistics.mean(decoded[name]))
        median = statistics.median(seconds)
        rows.append(
            {
                "candidate": name,
                "step_ms": median * 1e3,
                "tokens_per_second": tokens / median,
                "gflop_per_step": step_flops / 1e9,
                "gflops_per_second": step_flops / median / 1e9,
                **{f"vs_upstream_{k}": v for k, v in paired_ratio(times[UPSTREAM], seconds).items()},
            }
        )
    results = {
        "command": command,
        "settings": asdict(settings),
        "environment": environment(),
        "uptime_before": before,
        "uptime_after": after,
        "rows": rows,
        "matmul_gflops_per_second": limits,
        "profiles": profiles,
    }
    text = format_markdown(results)
    log(text)
    if output_dir:
        folder = Path(output_dir)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "mlm_throughput.json").write_text(json.dumps(results, indent=2) + "\n")
        (folder / "mlm_throughput.md").write_text(text + "\n")
        log(f"wrote {folder / 'mlm_throughput.md'} and mlm_throughput.json")
    return results


def format_markdown(results: dict) -> str:
    """The report: command, machine and load, the candidates' table, the matmul limit, the profiles."""
    env, settings = results["environment"], results["settings"]
    lines = [
        "# MLM training throughput: hf-ffn mlm against upstream run_mlm",
        "",
        f"Command: `{results['command']}`",
        "",
        f"Machine: {env['cpu']}, {env['cpus']} logical CPUs, {env['torch_threads']} torch threads; torch "
        f"{env['torch']}, transformers {env['transformers']}. Load: before `{results['uptime_before']}`; after "
        f"`{results['uptime_after']}`.",
        "",
        f"Model: {settings['layers']} layers x {settings['hidden']}, {settings['heads']} heads, FFN {settings['ffn']}, "
        f"vocabulary {settings['vocab']}; batch {settings['batch']} x {settings['seq']}; AdamW; "
        f"{settings['warmup']} warm-up steps, {settings['rounds']} interleaved rounds (medians).",
        "",
        "| candidate | ms / step | tokens/s | GFLOP / step | GFLOP/s | tokens/s vs upstream [min-max] |",
        "|---|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        lines.append(
            f"| {row['candidate']} | {row['step_ms']:.1f} | {row['tokens_per_second']:,.0f} | "
            f"{row['gflop_per_step']:.3g} | {row['gflops_per_second']:.3g} | {row['vs_upstream_ratio']:.3f} "
            f"[{row['vs_upstream_ratio_min']:.3f}-{row['vs_upstream_ratio_max']:.3f}] |"
        )
    lines += ["", "fp32 matrix-product limit at these threads (GFLOP/s):", ""]
    lines += [f"- {name}: {value:.1f}" for name, value in results["matmul_gflops_per_second"].items()]
    for name, prof in results["profiles"].items():
        row = next(row for row in results["rows"] if row["candidate"] == name)
        matmul = sum(prof["kinds"].get(kind, {"ms": 0.0})["ms"] for kind in MATMUL_KINDS)
        lines += ["", f"## One step of {name}: {prof['total_ms']:.1f} ms of aten self CPU time", ""]
        if matmul > 0:
            lines += [
                f"Linear layers and attention core: {matmul / prof['total_ms']:.1%} of the profiled step; the step's "
                f"{row['gflop_per_step']:.3g} GFLOP over their {matmul:.1f} ms: "
                f"{row['gflop_per_step'] / matmul * 1e3:.3g} GFLOP/s (beside the matrix-product limit above).",
                "",
            ]
        else:  # a compiled graph: its kernels are not under the modules' ops, so nothing is charged to the kinds
            lines += ["No time charged to linear layers or the attention core (a compiled graph's kernels).", ""]
        lines += ["| kind | ms | share |", "|---|---|---|"]
        lines += [f"| {kind} | {v['ms']:.1f} | {v['share']:.1%} |" for kind, v in prof["kinds"].items()]
        lines += ["", "| phase | ms | share |", "|---|---|---|"]
        lines += [f"| {phase} | {v['ms']:.1f} | {v['share']:.1%} |" for phase, v in prof["phases"].items()]
        lines += ["", "| outermost op | ms | share |", "|---|---|---|"]
        lines += [f"| {op} | {v['ms']:.1f} | {v['share']:.1%} |" for op, v in prof["top_ops"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m studies.benchmark.mlm_throughput", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 2 rounds, no compile: a smoke test")
    parser.add_argument("--rounds", type=int, help="interleaved timed rounds (default 8)")
    parser.add_argument("--warmup", type=int, help="untimed warm-up steps per candidate (default 3)")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--no-compile", action="store_true", help="leave out the torch.compile candidate")
    parser.add_argument("--output-dir", default="out/benchmark", help="where the report goes ('' : print only)")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else Settings()
    for name in ("rounds", "warmup"):
        if getattr(args, name) is not None:
            if getattr(args, name) < (1 if name == "rounds" else 0):
                parser.error(f"--{name} must be {'>= 1' if name == 'rounds' else '>= 0'}, got {getattr(args, name)}")
            settings = replace(settings, **{name: getattr(args, name)})
    if args.no_compile:
        settings = replace(settings, compile=False)
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    command = " ".join(["python -m studies.benchmark.mlm_throughput", *(argv if argv is not None else sys.argv[1:])])
    run(settings, args.output_dir or None, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
