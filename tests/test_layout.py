"""The package's layout rules (scripts/import_graph.py): no import cycle, no function-level import of the package's
own modules, no private name imported across modules, modules of one job (line limit), studies apart and not
installed."""

import ast
import importlib.util
import sys
from pathlib import Path

import pytest
from setuptools import find_packages

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("import_graph", REPO / "scripts" / "import_graph.py")
import_graph = importlib.util.module_from_spec(spec)
sys.modules["import_graph"] = import_graph
spec.loader.exec_module(import_graph)


def test_layout_rules_hold():
    graph, problems = import_graph.layout()
    assert problems == []
    # the checker sees the real package: the model core, its subpackages and the studies
    assert {
        "hf_ffn.modeling_ffn_bert",
        "hf_ffn.conversion.loader",
        "hf_ffn.parity.job",
        "hf_ffn.mlm.trainer",
        "studies.benchmark.run",
    } <= set(graph)
    # the model imports relatively only what ships beside a saved model (remote code), plus hf_ffn.conversion_warning's
    # check, in a try block (absent where the file runs as remote code without hf_ffn)
    assert graph["hf_ffn.modeling_ffn_bert"] == {
        "hf_ffn.activations",
        "hf_ffn.checkpoint_names",
        "hf_ffn.configuration_ffn_bert",
        "hf_ffn.sparse_prediction",
        "hf_ffn.unpadding",
        "hf_ffn.conversion_warning",
    }
    # each allowed deferred import is still deferred (a stale entry would hide nothing and should go)
    for name, imported in import_graph.DEFERRED_FOR_CYCLES:
        assert imported not in graph[name]


def test_checker_finds_a_function_level_import_and_a_private_name(tmp_path):
    module = tmp_path / "hf_ffn" / "bad.py"
    module.parent.mkdir()
    module.write_text("from .x import _helper\n\ndef f():\n    from . import y\n")
    modules = {"hf_ffn.bad": module, "hf_ffn.x": module, "hf_ffn.y": module}
    _, problems = import_graph.imports_of("hf_ffn.bad", module, modules)
    assert problems == [
        "hf_ffn.bad: imports the private name _helper from hf_ffn.x",
        "hf_ffn.bad: function-level import of hf_ffn.y",
    ]


def test_checker_finds_the_library_importing_a_study(tmp_path):
    for file, text in {
        "hf_ffn/__init__.py": "",
        "hf_ffn/cli.py": "import studies.bench\nfrom studies import plots\n",
        "studies/__init__.py": "",
        "studies/bench.py": "from hf_ffn import cli\n",
        "studies/plots.py": "",
    }.items():
        (tmp_path / file).parent.mkdir(exist_ok=True)
        (tmp_path / file).write_text(text)
    graph, problems = import_graph.layout((tmp_path / "hf_ffn", tmp_path / "studies"))
    assert graph["hf_ffn.cli"] == {"studies.bench", "studies.plots"}
    assert sorted(p for p in problems if "study" in p) == [
        "hf_ffn.cli: the library imports the study module studies.bench",
        "hf_ffn.cli: the library imports the study module studies.plots",
    ]
    assert "import cycle: hf_ffn.cli -> studies.bench -> hf_ffn.cli" in problems


def test_the_installed_package_holds_no_study_code():
    """What the wheel ships, found as setuptools finds it (pyproject's `packages.find`): exactly hf_ffn and its
    subpackages, none of them a study; the studies (top-level studies/) are found by the layout check."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    find = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"]
    shipped = set(find_packages(where=str(REPO), **find["find"]))
    assert shipped == {".".join(init.parent.relative_to(REPO).parts) for init in (REPO / "hf_ffn").rglob("__init__.py")}
    graph, problems = import_graph.layout()
    studies = {name for name in graph if name.split(".")[0] == import_graph.STUDIES}
    assert {"studies.benchmark", "studies.benchmark.unpadded_benchmark", "studies.common.comparison"} <= studies
    assert not any("studies" in package.split(".") for package in shipped)
    assert not any("the library imports the study module" in problem for problem in problems)


def test_the_library_never_imports_the_studies_at_any_level():
    """Not at module level (the layout check above) and not inside a function either: every `import` and
    `from ... import` of every module under hf_ffn/, read with ast."""
    imported = {}
    for path in sorted((REPO / "hf_ffn").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            if hits := [name for name in names if name.split(".")[0] == import_graph.STUDIES]:
                imported[str(path.relative_to(REPO))] = hits
    assert imported == {}
    assert len(list((REPO / "hf_ffn").rglob("*.py"))) > 20  # the scan sees the package


def test_no_study_runner_in_scripts():
    """scripts/ holds what a user runs as a script and developer tools: none of them imports the studies (a script
    that does is a study runner, and belongs in its study's folder under studies/)."""
    runners = [
        path.name
        for path in sorted((REPO / "scripts").glob("*.py"))
        if any(
            isinstance(node, (ast.Import, ast.ImportFrom))
            and any(
                (name or "").split(".")[0] == import_graph.STUDIES
                for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module])
            )
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )
    ]
    assert runners == []
    assert {"heal_study.py", "layerwise_study.py", "layerwise_scaling.py"} <= {
        path.name for path in (REPO / "studies" / "healing").glob("*.py")
    }


def test_only_the_task_table_names_the_tasks():
    """The task names live in `hf_ffn.finetune.tasks.TASKS` alone: `--task`'s help lists them from there (no copy in
    training/arguments.py), and the named variants and the conversion warning quote no task or corpus (what was
    measured on them is in the studies those modules link)."""
    names = ["cola", "stsb", "sts-b", "mrpc", "rt_polarity", "rt-polarity", "minilm"]
    for path in ("hf_ffn/variants.py", "hf_ffn/conversion_warning.py"):
        text = (REPO / path).read_text(encoding="utf-8").lower()
        assert [name for name in names if name in text] == [], path
    arguments = (REPO / "hf_ffn" / "training" / "arguments.py").read_text(encoding="utf-8").lower()
    assert [name for name in ("cola", "stsb", "mrpc") if name in arguments] == []  # rt_polarity: a renamed option
