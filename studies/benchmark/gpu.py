"""The one GPU check (issue 41): parity, unpadded execution and pre-training speed on one GPU, in one call.

    python -m studies.benchmark.gpu --output_dir out/benchmark --data_files PART.txt.xz   # ≤ 6 minutes on one H200
    python -m studies.benchmark.gpu --quick                     # tiny sizes on any device, about a minute on 2 CPUs

It writes `gpu.json` into `--output_dir` after every section (a call cut short keeps what was measured):

    {"device": torch.cuda.get_device_name(), "torch": ..., "transformers": ...,
     "parity": {"fp32_eager": bool, "fp32_sdpa": bool, "bf16_eager": bool, "bf16_sdpa": bool,
                "unpadded_within_tolerance": bool},
     "unpadded": {"train_32x512": r, "infer_32x512": r, "train_32x128": r, "infer_32x128": r,
                  "train_full": r, "infer_full": r},
     "pretraining": {"study_model_speedup": r, "bert_base_vs_run_mlm": r, "study_model_tokens_per_second": n},
     "goals": {...: bool}, "details": {...}}

Sections:

- parity: `hf_ffn.parity.run_parity` (the `hf-ffn parity --device cuda` job) on a small seeded BERT with the
  bert-base-uncased vocabulary, fp32 and bf16 × eager and sdpa; at bert-base shapes (seeded random weights, batch
  32 × 128 with about half the tokens real) upstream `BertModel` against default `FfnBertModel`, every hidden state
  `torch.equal`; and `hf_ffn.parity.unpadded_rows` (unpad_tokens=True on real tokens: fp32 within 1e-5 of each
  tensor's largest value, bf16 no further from upstream's fp32 output than upstream's own bf16 output) there too.
- unpadded: time ratio of `FfnBertModel(unpad_tokens=True)` to upstream `BertModel` (sdpa, the same weights,
  bert-base shapes, bf16 autocast), interleaved rounds, the median of per-round ratios, for an inference forward
  and a training step (forward, backward of mean(h²) over real tokens, no optimizer) on batches 32 × 512 and 32 × 128
  with about half the tokens real and 32 × 128 all real; the switch off beside them; one CUDA profile of an
  inference and a training step of each at 32 × 512 and 32 × 128 (top kernels and CPU ops, CPU and device time,
  host-device synchronisations).
- pretraining: `studies.benchmark.gpu_pretraining.measure` (the study model's tokens/s, today's path against the
  GPU defaults, and bert-base against transformers' run_mlm.py way).

Goals (issue 41): unpadded train/infer ≤ 0.65 at 32 × 512, ≤ 1.0 at 32 × 128, ≤ 1.05 all real; study model ≥ 4×
with |Δ [MASK] loss| ≤ 0.02 after ~4M tokens; bert-base ≥ 1.3× run_mlm.py's tokens/s.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
import transformers
from transformers import BertConfig, BertForPreTraining, BertModel

from hf_ffn import FfnBertConfig, FfnBertModel
from hf_ffn.parity import padded_batch, run_parity, unpadded_rows
from hf_ffn.parity.compare import ParityRow
from studies.benchmark.gpu_pretraining import ProfileWindow, measure
from studies.benchmark.timing import log, paired_ratio, time_interleaved

BERT_BASE = dict(
    vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072
)
SMALL_BERT = dict(vocab_size=30522, hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
TINY_BERT = dict(vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
# (name, batch, seq, all real): the three shapes
SHAPES = (("32x512", 32, 512, False), ("32x128", 32, 128, False), ("full", 32, 128, True))
QUICK_SHAPES = (("32x512", 4, 64, False), ("32x128", 4, 32, False), ("full", 4, 32, True))
GOALS = {"32x512": 0.65, "32x128": 1.0, "full": 1.05}
PARITY_CASES = (("fp32", "float32"), ("bf16", "bfloat16"))


def half_real_lengths(batch: int, seq: int, seed: int = 0) -> list[int]:
    """`batch` lengths drawn uniformly from seq/8 .. 7·seq/8 (seeded): about half the tokens real, as padded batches
    of shuffled sentences are."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(seq // 8, seq - seq // 8 + 1, (batch,), generator=generator).tolist()


def benchmark_batch(batch: int, seq: int, full: bool, device: torch.device, seed: int = 0) -> dict[str, torch.Tensor]:
    """A seeded batch (batch, seq) on `device`: every row `seq` long (`full`), else `half_real_lengths`, padded."""
    lengths = [seq] * batch if full else half_real_lengths(batch, seq, seed)
    return {k: v.to(device) for k, v in padded_batch(BERT_BASE["vocab_size"], lengths, seed=seed, seq_len=seq).items()}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def autocast(device: torch.device):
    """bf16 autocast on `device` (the issue's setting for the timings)."""
    return torch.autocast(device.type, dtype=torch.bfloat16)


# ---------------------------------------------------------------------------------------------------------------
# Parity
# ---------------------------------------------------------------------------------------------------------------
def parity_section(device: torch.device, work: Path, quick: bool) -> tuple[dict, dict]:
    """The parity booleans and their details (rows that failed, the unpadded rows' differences and bars)."""
    small = work / "small_bert"
    torch.manual_seed(0)
    BertForPreTraining(BertConfig(**(TINY_BERT if quick else SMALL_BERT))).save_pretrained(small)
    large = work / "bert_base_shapes"
    torch.manual_seed(0)
    BertModel(BertConfig(**(TINY_BERT if quick else BERT_BASE))).save_pretrained(large)
    name, batch_size, seq, _ = (QUICK_SHAPES if quick else SHAPES)[1]
    batch = benchmark_batch(batch_size, seq, False, device)
    results, details = {}, {"job": {}, "bert_base_shapes": {}, "unpadded_rows": {}}
    unpadded_ok = []
    for label, dtype in PARITY_CASES:
        for attn in ("eager", "sdpa"):
            rows = run_parity(str(small), attn_implementation=attn, device=device, dtype=dtype)
            bitwise = [r for r in rows if r.tolerance is None]
            unpadded = [r for r in rows if r.tolerance is not None]
            same = equal_hidden_states(large, batch, attn, device, dtype)
            results[f"{label}_{attn}"] = all(r.equal for r in bitwise) and same["equal"]
            unpadded_ok += [r.holds for r in unpadded]
            details["job"][f"{label}_{attn}"] = {
                "rows": len(bitwise),
                "not_equal": [f"{r.head} {r.output} {r.max_abs_diff:.3g}" for r in bitwise if not r.equal],
                "unpadded": row_summary(unpadded),
            }
            details["bert_base_shapes"][f"{label}_{attn}"] = same
            log(f"parity {label} {attn}: job exact {all(r.equal for r in bitwise)}, bert-base shapes {same['equal']}")
        rows = unpadded_rows(str(large), batch, "sdpa", device, dtype)
        unpadded_ok += [r.holds for r in rows]
        details["unpadded_rows"][f"{label}_sdpa_{name}"] = row_summary(rows)
        log(f"unpadded rows {label} sdpa {name}: {all(r.holds for r in rows)}")
    results["unpadded_within_tolerance"] = all(unpadded_ok)
    return results, details


def equal_hidden_states(folder: Path, batch: dict, attn: str, device: torch.device, dtype: str) -> dict:
    """Upstream `BertModel` and default `FfnBertModel` from `folder` on `batch`: is every hidden state equal?"""
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    load = dict(attn_implementation=attn, dtype=torch_dtype)
    upstream = BertModel.from_pretrained(folder, **load).to(device).eval()
    ours = FfnBertModel.from_pretrained(folder, **load).to(device).eval()
    with torch.no_grad():
        want, got = (m(**batch, output_hidden_states=True).hidden_states for m in (upstream, ours))
    diffs = [(a.float() - b.float()).abs().max().item() for a, b in zip(want, got, strict=True)]
    return {"equal": all(torch.equal(a, b) for a, b in zip(want, got, strict=True)), "max_abs_diff": max(diffs)}


def row_summary(rows: list[ParityRow]) -> list[dict]:
    return [
        {"output": r.output, "max_abs_diff": r.max_abs_diff, "tolerance": r.tolerance, "holds": r.holds} for r in rows
    ]


# ---------------------------------------------------------------------------------------------------------------
# Unpadded execution: time ratios against upstream
# ---------------------------------------------------------------------------------------------------------------
def step(model: torch.nn.Module, batch: dict, training: bool, device: torch.device):
    """One inference forward or training step (forward, backward of the mean of h² over real tokens) under bf16
    autocast, synchronised at its end."""
    real = batch["attention_mask"][..., None]  # (batch, seq, 1): the loss reads real tokens, without a read-back
    model.train(training)

    def run():
        with autocast(device), nullcontext() if training else torch.no_grad():
            hidden = model(**batch).last_hidden_state
            if training:
                model.zero_grad(set_to_none=True)
                (hidden.float().square() * real).mean().backward()
        synchronize(device)

    return run


def unpadded_section(device: torch.device, quick: bool, rounds: int) -> tuple[dict, dict]:
    """The six ratios (unpadded / upstream, median over rounds) and their details."""
    torch.manual_seed(0)
    config = BertConfig(**(TINY_BERT if quick else BERT_BASE))
    upstream = BertModel(config, add_pooling_layer=True).to(device)
    upstream.set_attn_implementation("sdpa")
    ours = {}
    for switch in (False, True):
        model = FfnBertModel(FfnBertConfig(**config.to_dict(), unpad_tokens=switch))
        model.load_state_dict(upstream.state_dict())
        model.set_attn_implementation("sdpa")
        ours[switch] = model.to(device)
    ratios, details = {}, {}
    for name, batch_size, seq, full in QUICK_SHAPES if quick else SHAPES:
        batch = benchmark_batch(batch_size, seq, full, device)
        real = batch["attention_mask"].float().mean().item()
        for mode in ("train", "infer"):
            training = mode == "train"
            fns: dict[str, Callable] = {
                "upstream": step(upstream, batch, training, device),
                "switch_off": step(ours[False], batch, training, device),
                "unpadded": step(ours[True], batch, training, device),
            }
            times = time_interleaved(fns, repeats=rounds, warmup=3)
            row = {
                "batch": [batch_size, seq],  # the shape names, at --quick's tiny sizes too
                "real_token_fraction": real,
                "ms": {k: 1000 * statistics.median(v) for k, v in times.items()},
                **{f"{k}_vs_upstream": paired_ratio(v, times["upstream"]) for k, v in times.items() if k != "upstream"},
            }
            ratios[f"{mode}_{name}"] = row["unpadded_vs_upstream"]["ratio"]
            details[f"{mode}_{name}"] = row
            log(
                f"{mode} {name} ({batch_size}x{seq}, real {real:.2f}): unpadded/upstream "
                f"{ratios[f'{mode}_{name}']:.3f}; ms {json.dumps({k: round(v, 2) for k, v in row['ms'].items()})}"
            )
    if device.type == "cuda":  # where the time goes: one step of each, profiled
        for name, batch_size, seq, _ in SHAPES[:2]:
            batch = benchmark_batch(batch_size, seq, False, device)
            for mode in ("train", "infer"):
                details[f"profile_{mode}_{name}"] = {
                    label: profile(step(model, batch, mode == "train", device))
                    for label, model in (("upstream", upstream), ("unpadded", ours[True]))
                }
    return ratios, details


def profile(fn: Callable[[], object], top: int = 12) -> dict:
    """One call of `fn` under torch.profiler (CPU and CUDA): wall ms, total self CPU ms and self device ms, and the
    `top` ops by self device time."""
    fn()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    start = time.perf_counter()
    with torch.profiler.profile(activities=activities) as prof:
        fn()
    wall = time.perf_counter() - start
    events = prof.key_averages()
    device_time = [getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0)) for e in events]
    ranked = sorted(zip(events, device_time, strict=True), key=lambda pair: -pair[1])[:top]
    syncs = ProfileWindow.SYNC_EVENTS  # the waits for the device, as the pre-training profile counts them
    return {
        "wall_ms_profiled": 1000 * wall,
        "self_cpu_ms": sum(e.self_cpu_time_total for e in events) / 1000,
        "self_device_ms": sum(device_time) / 1000,
        "syncs": {e.key: e.count for e in events if e.key in syncs},
        "top_device": [{"op": e.key[:80], "count": e.count, "device_ms": t / 1000} for e, t in ranked],
        "top_cpu": [
            {"op": e.key[:80], "count": e.count, "self_cpu_ms": e.self_cpu_time_total / 1000}
            for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:top]
        ],
    }


# ---------------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------------
def goals(results: dict) -> dict | None:
    """Each goal of issue 41 that was measured: met or not; `None` for a `--quick` run (tiny sizes judge nothing)."""
    if results.get("quick"):
        return None
    met = {}
    for key, ratio in results.get("unpadded", {}).items():
        met[f"unpadded_{key}"] = ratio <= GOALS[key.split("_", 1)[1]]
    pretraining = results.get("pretraining", {})
    if "study_model_speedup" in pretraining:
        met["study_model_speedup_4x"] = pretraining["study_model_speedup"] >= 4
    if "mask_loss_difference" in pretraining:
        met["study_model_loss_within_0.02"] = abs(pretraining["mask_loss_difference"]) <= 0.02
    if "bert_base_vs_run_mlm" in pretraining:
        met["bert_base_1.3x_run_mlm"] = pretraining["bert_base_vs_run_mlm"] >= 1.3
    met.update({f"parity_{k}": v for k, v in results.get("parity", {}).items()})
    return met


def environment(device: torch.device) -> dict:
    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.machine()})",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
    }


def public(text: str) -> str:
    """`text` without this machine's paths (gpu.json is published): the working directory and Python's library
    folders are left out, so a traceback names `hf_ffn/...` and `SITE_PACKAGES/torch/...`."""
    for folder in sorted({*sys.path, str(Path.cwd())}, key=len, reverse=True):
        if folder and Path(folder).is_absolute():
            label = "SITE_PACKAGES/" if folder.endswith(("site-packages", "dist-packages")) else ""
            text = text.replace(folder.rstrip("/") + "/", label)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.benchmark.gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default="out/benchmark", help="where gpu.json goes (default: out/benchmark)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: shows that it runs, judges nothing")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved timing rounds per comparison")
    parser.add_argument(
        "--sections",
        nargs="+",
        choices=["parity", "unpadded", "pretraining"],
        default=["parity", "unpadded", "pretraining"],
    )
    parser.add_argument("--data_files", nargs="*", default=[], help="corpus files for the pre-training section")
    parser.add_argument(
        "--bert_tokenizer", default=None, help="a bert-base-uncased tokenizer folder (default: the bundled BERT's)"
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    results: dict = {
        **environment(device),
        "command": public("python -m studies.benchmark.gpu " + " ".join(argv or sys.argv[1:])),
    }
    results["quick"] = args.quick
    results["details"], results["errors"], results["seconds"] = {}, {}, {}

    def write() -> None:
        results["goals"] = goals(results)
        (output / "gpu.json").write_text(json.dumps(results, indent=2) + "\n")

    log(f"{results['device']}: torch {results['torch']}, transformers {results['transformers']}")
    with tempfile.TemporaryDirectory() as tmp:
        for section in args.sections:
            start = time.perf_counter()
            try:
                if section == "parity":
                    results["parity"], results["details"]["parity"] = parity_section(device, Path(tmp), args.quick)
                elif section == "unpadded":
                    results["unpadded"], results["details"]["unpadded"] = unpadded_section(
                        device, args.quick, 3 if args.quick else args.rounds
                    )
                else:
                    measured = measure(
                        Path(tmp) / "pretraining",
                        [Path(f) for f in args.data_files],
                        quick=args.quick,
                        bert_tokenizer=args.bert_tokenizer,
                    )
                    keys = ("study_model_speedup", "bert_base_vs_run_mlm", "study_model_tokens_per_second")
                    results["pretraining"] = {k: measured[k] for k in keys if k in measured}
                    if "mask_loss_difference" in measured:
                        results["pretraining"]["mask_loss_difference"] = measured["mask_loss_difference"]
                    results["details"]["pretraining"] = measured
            except Exception as error:  # one section's failure keeps the others' results
                results["errors"][section] = public("".join(traceback.format_exception(error)))[-4000:]
                log(f"{section} failed: {error!r}")
            results["seconds"][section] = time.perf_counter() - start
            log(f"{section}: {results['seconds'][section]:.0f} s")
            write()
    log(json.dumps({k: results.get(k) for k in ("parity", "unpadded", "pretraining", "goals")}, indent=1))
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
