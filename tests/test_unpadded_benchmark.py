"""The unpadded-execution benchmark runs (`--quick`, in-process) and writes a complete report. No speed is
asserted (times on shared CI machines are noise): the batches, the document's structure and the exactness check."""

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from studies.benchmark.unpadded_benchmark import CANDIDATES, KINDS, QUICK, RATIOS, main, make_batches, read_sentences
from studies.benchmark.unpadded_report import NOT_JUDGED, UNPADDED_COMMAND, benchmarks_section, judge, target_rows
from studies.common.environment import busy

WORDS = "the film is a long and oddly moving story about two friends who never quite say what they mean".split()


@pytest.fixture(scope="module")
def rt_polarity_dir(tmp_path_factory):
    """A tiny rt_polarity folder: 30 snippets per label, 1 to 17 words."""
    folder = tmp_path_factory.mktemp("rt_polarity")
    for label, offset in (("neg", 0), ("pos", 5)):
        lines = [" ".join(WORDS[: (7 * i + offset) % 17 + 1]) for i in range(30)]
        (folder / f"rt-polarity.{label}").write_text("\n".join(lines) + "\n\n")  # a blank line is skipped
    return str(folder)


def test_batches_have_the_kinds_and_sizes(rt_polarity_dir, bundled_checkpoint):
    texts, labels = read_sentences(rt_polarity_dir)
    assert len(texts) == 60 and labels == [0] * 30 + [1] * 30
    batches = make_batches(AutoTokenizer.from_pretrained(bundled_checkpoint), texts, labels, QUICK)
    assert set(batches) == set(KINDS)
    for kind, kind_batches in batches.items():
        assert len(kind_batches) == QUICK.batches
        for batch in kind_batches:
            assert batch["input_ids"].shape[0] == QUICK.batch_size == batch["labels"].shape[0]
            assert (batch["attention_mask"] == 0).any() != (kind == "no padding")


def test_read_sentences_names_the_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no label files matching \'rt-polarity\.\*\'"):
        read_sentences(str(tmp_path))


def test_quick_run_writes_a_complete_report(rt_polarity_dir, tmp_path):
    assert main(["--quick", "--rt-polarity-dir", rt_polarity_dir, "--output-dir", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "unpadded_benchmark.json").read_text())
    markdown = (tmp_path / "unpadded_benchmark.md").read_text()
    assert results["data"]["no padding"]["pad_fraction"] == 0.0 < results["data"]["shuffled"]["pad_fraction"]
    assert len(results["load_average_before"]) == len(results["load_average_after"]) == 3
    assert {"torch", "transformers", "python"} <= set(results["environment"])
    cases = results["cases"]
    assert [(c["attn"], c["mode"]) for c in cases] == [
        (attn, mode) for attn in ("eager", "sdpa") for mode in ("inference", "training")
    ]
    for case in cases:
        assert max(case["max_abs_diff"].values()) < 1e-5  # packed attention: fp32 rounding (tiny: 0 here)
        assert set(case["max_abs_diff"]) == {"logits", "last_hidden_state", "upstream_vs_itself"}
        assert set(case["candidates"]) == set(CANDIDATES)
        for candidate in case["candidates"].values():
            assert len(candidate["times_ms"]) == QUICK.repeats and candidate["real_tokens_per_s"] > 0
            assert candidate["peak_memory_mb"] > 0
        assert len(case["ratios"]) == len(RATIOS)
        for ratio in case["ratios"]:
            assert 0 < ratio["ratio_min"] <= ratio["ratio"] <= ratio["ratio_max"]
            assert ratio["met"] is None  # a quick run judges no target
        assert case["peak_memory"]["met"] is None
        assert (case["peak_memory"]["target"] is None) == (case["mode"] == "inference")
    for heading in ("# Unpadded execution benchmark", "## Targets", "## Ratios", "## Candidates", "Load average"):
        assert heading in markdown
    # one row per target (and the training memory target of each attention), per ratio, per candidate
    targets = sum(r["target"] is not None for c in cases for r in c["ratios"]) + 2
    assert targets == 10
    assert markdown.count("| tiny (quick) |") == targets + len(cases) * (len(RATIOS) + len(CANDIDATES))
    target_table = markdown.split("## Targets")[1].split("## Ratios")[0]
    assert target_table.count(f"| {NOT_JUDGED} |") == targets and "| yes |" not in target_table
    assert "**no**" not in markdown
    assert markdown.count("(upstream vs itself: hidden ") == len(cases)  # the fp32 floor beside switch on's Δ


def test_targets_judged_only_in_a_full_run():
    assert judge(0.59, 0.6, judged=True) is True and judge(0.61, 0.6, judged=True) is False
    assert judge(1.0, 1.0, judged=True) is True and judge(1.0, 1.0, judged=True, strict=True) is False
    assert judge(0.1, 0.6, judged=False) is None and judge(0.1, None, judged=True) is None


def test_benchmarks_md_links_the_report_with_its_command():
    # studies/benchmark/benchmarks.md is written by the main benchmark (`format_markdown` ends with this section, and
    # lists the targets of the unpadded run whose JSON lies beside its own)
    docs = Path(__file__).resolve().parents[1] / "studies" / "benchmark"  # the performance study's reports
    link = "\n".join(benchmarks_section())
    assert UNPADDED_COMMAND in link and "(unpadded_benchmark.md)" in link
    unpadded = json.loads((docs / "unpadded_benchmark.json").read_text())
    section = "\n".join(benchmarks_section(unpadded))
    assert section.startswith(link) and unpadded["command"] in section
    rows = target_rows(unpadded)  # one table row per target of the published run, whatever its settings
    table_rows = section.count("\n| all-MiniLM-L6-v2 |") + section.count("\n| bert-base-shapes |")
    assert len(rows) >= 5 and table_rows == len(rows)
    assert section in (docs / "benchmarks.md").read_text()


def test_busy_counts_other_work_not_the_benchmarks_own_threads():
    # the published quiet run: 1.69 before, 2.06 after with its own 2 threads on 2 CPUs -> not busy
    assert not busy(1.69, 2.06, threads=2, cpus=2)
    assert busy(3.2, 3.2, threads=1, cpus=2)  # other jobs running before and during
    assert busy(0.5, 4.5, threads=2, cpus=2)  # other work started during the run
