"""The unpadded-execution benchmark's report: the targets judged (or not, in a quick run), the markdown and the
files (`unpadded_benchmark.json`, `unpadded_benchmark.md`); the run itself is `studies.benchmark.unpadded_benchmark`.

`studies/benchmark/benchmarks.md` (the main benchmark's report) links to `studies/benchmark/unpadded_benchmark.md`
and names the command that writes it, `UNPADDED_COMMAND`.
"""

from __future__ import annotations

import json
from pathlib import Path

from studies.common.environment import busy

JSON_NAME, MARKDOWN_NAME = "unpadded_benchmark.json", "unpadded_benchmark.md"
UNPADDED_COMMAND = "python -m studies.benchmark.unpadded_benchmark --output-dir studies/benchmark"
NOT_JUDGED = "not judged (--quick)"
QUICK_NOTE = (
    " A `--quick` run times a tiny model for seconds: it shows that the benchmark runs and judges no target; "
    f"the targets are for `{UNPADDED_COMMAND}` on a quiet machine."
)


def benchmarks_section(unpadded: dict | None = None) -> list[str]:
    """The section of `studies/benchmark/benchmarks.md` (the main benchmark's report) that points at this report and its
    command: the unpadded benchmark is a run of its own (minutes of real batches), not a section of that run.
    With `unpadded` (the results of a run, `unpadded_benchmark.json` beside `benchmarks.json`) it also gives that
    run's command, load and targets."""
    lines = [
        "## Unpadded execution (`unpad_tokens`)",
        "",
        "Measured by a run of its own: upstream `BertForSequenceClassification` against FfnBert with `unpad_tokens` "
        "off and on, on batches of 32 real rt_polarity sentences (shuffled, length-grouped as "
        '`TrainingArguments(train_sampling_strategy="group_by_length")` batches them, and without padding), '
        "all-MiniLM-L6-v2 and bert-base shapes, "
        "eager and sdpa, inference and training step: time ratios with their spread, real tokens/s, peak memory "
        "and the targets (inference and training ≤ 0.5× upstream on shuffled batches, ≤ 1.02× without padding, "
        "training peak memory below upstream's; sentence embeddings in sentence-transformers' order at least as "
        f"fast as sentence-transformers with upstream BERT and faster than ONNX Runtime). `{UNPADDED_COMMAND}` "
        f"writes [{MARKDOWN_NAME}]({MARKDOWN_NAME}) and `{JSON_NAME}`.",
        "",
    ]
    if unpadded is None:
        return lines
    load = ", ".join(f"{x:.2f}" for x in unpadded["load_average_before"])
    load_after = ", ".join(f"{x:.2f}" for x in unpadded["load_average_after"])
    lines += [
        f"Latest run: `{unpadded['command']}`, started {unpadded['started_utc']} UTC, {unpadded['wall_s']:.0f} s "
        f"wall, {unpadded['environment']['torch_threads']} torch threads, {unpadded['settings']['clock']} clock; "
        f"load average (1, 5, 15 min) before {load}, after {load_after}. Shuffled batches: real-token fraction "
        f"{1 - unpadded['data']['shuffled']['pad_fraction']:.3f} (the token-wise parts' share of upstream's rows).",
        "",
        "| checkpoint | attn | mode | ratio | measured [min–max] | limit | met |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {t['checkpoint']} | {t['attn']} | {t['mode']} | {t['ratio_of']} | {t['measured']} | {t['limit']} | "
        f"{verdict(t['met'])} |"
        for t in target_rows(unpadded)
    ]
    return lines + [""]


def judge(value: float, limit: float | None, judged: bool, strict: bool = False) -> bool | None:
    """Whether `value` meets the upper bound `limit` (≤, or < if `strict`); None without a limit or when the run
    is not judged (a `--quick` smoke test: a tiny model's times say nothing about the targets)."""
    if limit is None or not judged:
        return None
    return value < limit if strict else value <= limit


def target_rows(results: dict) -> list[dict]:
    """Every target of the run: the time ratios that have a limit and the training peak-memory ratio of each case.

    Rows: `checkpoint`, `attn`, `mode`, `ratio_of`, `measured` ("0.512 [0.480–0.560]"), `limit` ("≤ 0.6"),
    `met` (True / False / None when not judged).
    """
    rows = []
    for case in results["cases"]:
        where = {key: case[key] for key in ("checkpoint", "attn", "mode")}
        for r in case["ratios"]:
            if r["target"] is not None:
                rows.append(
                    {
                        **where,
                        "ratio_of": r["ratio_of"],
                        "limit": f"≤ {r['target']}",
                        "met": r["met"],
                        "measured": f"{r['ratio']:.3f} [{r['ratio_min']:.3f}–{r['ratio_max']:.3f}]",
                    }
                )
        memory = case["peak_memory"]
        if memory["target"] is not None:
            rows.append(
                {
                    **where,
                    "ratio_of": f"peak memory, {memory['ratio_of']}",
                    "limit": f"< {memory['target']}",
                    "measured": f"{memory['ratio']:.3f}",
                    "met": memory["met"],
                }
            )
    for t in (results.get("sentence_order") or {}).get("targets", []):
        rows.append(
            {
                "checkpoint": "all-MiniLM-L6-v2",
                "attn": "sdpa",
                "mode": "inference, sentence-transformers order",
                "ratio_of": t["ratio_of"],
                "limit": t["limit"],
                "met": t["met"],
                "measured": f"{t['ratio']:.3f} [{t['ratio_min']:.3f}–{t['ratio_max']:.3f}]",
            }
        )
    return rows


def verdict(met: bool | None) -> str:
    return NOT_JUDGED if met is None else ("yes" if met else "**no**")


def render_markdown(results: dict) -> str:
    """The report: header (command, versions, load before and after), data, the targets, ratios, candidates."""
    env = results["environment"]
    lines = [
        "# Unpadded execution benchmark",
        "",
        f"Command: `{results['command']}` — started {results['started_utc']} UTC, {results['wall_s']:.0f} s wall. "
        f"hf_ffn {env['hf_ffn']}, torch {env['torch']}, transformers {env['transformers']}, "
        f"Python {env['python']}, {env['machine']}, {env['cpus']} logical CPUs, {env['torch_threads']} torch "
        f"threads, float32, {results['settings']['clock']} clock. Load average (1, 5, 15 min) before "
        f"{', '.join(f'{x:.2f}' for x in results['load_average_before'])}, after "
        f"{', '.join(f'{x:.2f}' for x in results['load_average_after'])}.",
        "",
    ]
    if busy(results["load_average_before"][0], results["load_average_after"][0], env["torch_threads"], env["cpus"]):
        lines += [
            "**Caveat: the machine was busy** (other work's load average above its CPU count): read every "
            "ratio with its [min–max] spread.",
            "",
        ]
    lines += [
        "Batches of rt_polarity sentences (see `studies/benchmark/unpadded_benchmark.py` for the method):",
        "",
        "| batches | count | pad fraction | real-token fraction | shapes (batch × seq) |",
        "|---|---|---|---|---|",
    ]
    for kind, info in results["data"].items():
        shapes = ", ".join("×".join(map(str, s)) for s in info["shapes"])
        lines.append(
            f"| {kind} | {info['batches']} | {info['pad_fraction']:.3f} | {1 - info['pad_fraction']:.3f} | {shapes} |"
        )
    real = 1 - results["data"]["shuffled"]["pad_fraction"]
    lines += [
        "",
        "## Targets",
        "",
        f"The time of the token-wise parts scales with the real tokens (real-token fraction of the shuffled "
        f"batches: {real:.3f}) and packed attention costs Σ lᵢ² instead of batch·seq², below that fraction; "
        f"so *switch on / upstream* can go below {real:.3f} where attention is a large share of the time. "
        f"Per real token (Ratios below), *switch on / upstream, no padding* is the packed path's cost against "
        f"upstream on dense batches (1: no overhead) and *upstream, no padding / upstream* what *switch on / "
        f"upstream* would be at that cost: upstream's GEMMs over the padded rows run faster per row, so it can "
        f"lie above {real:.3f}." + (QUICK_NOTE if results["settings"]["quick"] else ""),
        "",
        "| checkpoint | attn | mode | ratio | measured [min–max] | limit | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in target_rows(results):
        lines.append(
            f"| {t['checkpoint']} | {t['attn']} | {t['mode']} | {t['ratio_of']} | {t['measured']} | "
            f"{t['limit']} | {verdict(t['met'])} |"
        )
    lines += [
        "",
        "## Ratios",
        "",
        "| checkpoint | attn | mode | ratio | per real token | median [min–max] |",
        "|---|---|---|---|---|---|",
    ]
    for case in results["cases"]:
        for r in case["ratios"]:
            lines.append(
                f"| {case['checkpoint']} | {case['attn']} | {case['mode']} | {r['ratio_of']} | "
                f"{'yes' if r['per_real_token'] else 'no'} | "
                f"{r['ratio']:.3f} [{r['ratio_min']:.3f}–{r['ratio_max']:.3f}] |"
            )
    lines += [
        "",
        "## Candidates",
        "",
        "| checkpoint | attn | mode | candidate | batches | median ms | real tokens/s | peak MB | max \\|Δ\\| |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for case in results["cases"]:
        for name, c in case["candidates"].items():
            lines.append(
                f"| {case['checkpoint']} | {case['attn']} | {case['mode']} | {name} | {c['batches']} | "
                f"{c['median_ms']:.1f} | {c['real_tokens_per_s']:.0f} | {c['peak_memory_mb']:.1f} | "
                f"{differences(case) if name == 'switch on' else ''} |"
            )
    lines += [
        "",
        "*real tokens/s*: real (non-pad) tokens of the candidate's batches over its time. *peak MB*: peak "
        "live tensor memory of one step above what was live before (`peak_memory_bytes`). *max |Δ|*: switch on "
        "against upstream on shuffled batch 0 (eval), logits and last hidden state at real tokens: packed "
        "attention sums fewer (zero) terms than padded attention, fp32 rounding (docs/unpadded.md). *upstream "
        "vs itself*: upstream's last hidden state at real tokens for the same batch with each sentence run "
        "alone or padded 16 columns longer, the largest max |Δ|: the fp32 floor of batch composition.",
    ]
    return "\n".join(lines + sentence_order_section(results.get("sentence_order"))) + "\n"


def differences(case: dict) -> str:
    d = case["max_abs_diff"]
    floor = f" (upstream vs itself: hidden {d['upstream_vs_itself']:.1e})" if "upstream_vs_itself" in d else ""
    return f"logits {d['logits']:.1e}, hidden {d['last_hidden_state']:.1e}{floor}"


def sentence_order_section(order: dict | None) -> list[str]:
    """Sentence embeddings in sentence-transformers' order (`studies.benchmark.sentence_order`), if the run measured
    them."""
    if order is None:
        return []
    lines = [
        "",
        "## Sentence embeddings in sentence-transformers' order",
        "",
        f"{order['sentences']} sentences (the first of the shuffled order), `encode` with batch size "
        f"{order['batch_size']} (it sorts by length, longest first), max_seq_length {order['max_seq_length']}; "
        "each time includes tokenization, pooling and normalisation. Method: `studies/benchmark/sentence_order.py`.",
        "",
        "| candidate | median ms | max \\|Δ\\| vs upstream |",
        "|---|---|---|",
    ]
    for name, c in order["candidates"].items():
        lines.append(f"| {name} | {c['median_ms']:.1f} | {c['max_abs_diff_vs_upstream']:.1e} |")
    lines += ["", "| ratio | measured [min–max] | limit | met |", "|---|---|---|---|"]
    lines += [
        f"| {t['ratio_of']} | {t['ratio']:.3f} [{t['ratio_min']:.3f}–{t['ratio_max']:.3f}] | {t['limit']} | "
        f"{verdict(t['met'])} |"
        for t in order["targets"]
    ]
    return lines


def write_reports(results: dict, output_dir: str) -> tuple[Path, Path]:
    """`unpadded_benchmark.json` and `unpadded_benchmark.md` in `output_dir` (created)."""
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    json_path, markdown_path = folder / JSON_NAME, folder / MARKDOWN_NAME
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    markdown_path.write_text(render_markdown(results))
    return json_path, markdown_path


__all__ = [
    "JSON_NAME",
    "MARKDOWN_NAME",
    "NOT_JUDGED",
    "UNPADDED_COMMAND",
    "benchmarks_section",
    "judge",
    "render_markdown",
    "target_rows",
    "verdict",
    "write_reports",
]
