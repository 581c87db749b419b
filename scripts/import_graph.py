"""Print the import graph of the hf_ffn package and of the studies beside it (studies/, package `studies`):
module → the modules of either it imports at module level. Check the layout rules: no import cycle, no
function-level import of the packages' own modules (but in `DEFERRED_IMPORTS`), no private (`_x`) name imported
across modules, no module over `MAX_LINES`, the library never imports the studies (they are not installed). Exits 1
if a rule is broken. Imports under `if TYPE_CHECKING:` are annotations only and are left out of the graph. Run from
the repository root: `python scripts/import_graph.py`.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "hf_ffn"  # the installed library
STUDIES_DIR = (
    REPO / "studies"
)  # the studies: runners, their code and reports; importable from the repository root, never installed
STUDIES = "studies"
ROOTS = ("hf_ffn", STUDIES)
# Modules whose imports of the package wait for the function that needs them: `hf-ffn --help` must answer without
# importing torch or transformers (the command's parser, its subcommands, and the package's Auto registration, which
# waits inside the command).
DEFERRED_IMPORTS = {"hf_ffn", "hf_ffn.cli", "hf_ffn.commands"}
# (module, the module it imports inside a function) → why it must wait: an import cycle that is the design. None
# today: the warning for a conversion that is not function-preserving lives in `hf_ffn.conversion_warning` (which
# imports nothing above `checkpoints`), so the model and the conversion stack import it from below and
# `hf_ffn.variants` imports the conversion stack at module level.
DEFERRED_FOR_CYCLES: dict[tuple[str, str], str] = {}


def module_names(packages: tuple[Path, ...] = (PACKAGE, STUDIES_DIR)) -> dict[str, Path]:
    """Dotted module name → file, for every module of `packages` (each a package folder). A study's own folder
    (studies/healing/, no `__init__.py`) holds its runners, scripts run with `python -m`: they are not modules of
    the package and are left out, as scripts/ is."""
    names = {}
    for package in packages:
        for path in sorted(package.rglob("*.py")):
            if not (path.parent / "__init__.py").is_file():
                continue
            parts = path.relative_to(package.parent).with_suffix("").parts
            names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def deferred_allowed(name: str, imported: str) -> bool:
    """Whether module `name` may import `imported` inside a function (`DEFERRED_IMPORTS`, `DEFERRED_FOR_CYCLES`)."""
    return name in DEFERRED_IMPORTS or (name, imported) in DEFERRED_FOR_CYCLES


def is_ours(module: str) -> bool:
    return module.split(".")[0] in ROOTS


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> tuple[set[str], list[str]]:
    """(package modules imported at module level, rule violations) of one module."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    deps: set[str] = set()
    problems: list[str] = []

    def visit(node: ast.AST, in_function: bool, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            child_type_only = type_only or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
            if isinstance(child, ast.Import):  # `import studies.x` / `import hf_ffn.x`
                for alias in child.names:
                    if is_ours(alias.name):
                        if in_function and not deferred_allowed(name, alias.name):
                            problems.append(f"{name}: function-level import of {alias.name}")
                        elif not child_type_only and (name, alias.name) not in DEFERRED_FOR_CYCLES:
                            deps.add(alias.name)
            if isinstance(child, ast.ImportFrom) and (child.level or is_ours(child.module or "")):
                base = package[: len(package) - child.level + 1] if child.level else []
                target = ".".join(base + ([child.module] if child.module else [])) if child.level else child.module
                for alias in child.names:
                    full = f"{target}.{alias.name}"
                    imported = full if full in modules else target
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        problems.append(f"{name}: imports the private name {alias.name} from {target}")
                    if in_function and not deferred_allowed(name, imported):
                        problems.append(f"{name}: function-level import of {imported}")
                    elif not child_type_only and imported != name and (name, imported) not in DEFERRED_FOR_CYCLES:
                        deps.add(imported)
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)), child_type_only)

    visit(ast.parse(path.read_text(encoding="utf-8")), False, False)
    return deps, problems


def with_parents(deps: set[str], name: str, modules: dict[str, Path]) -> set[str]:
    """Importing `a.b.c` first imports `a.b` (its `__init__`): those edges count for cycles too."""
    out = set(deps)
    for dep in deps:
        parts = dep.split(".")
        for i in range(2, len(parts)):
            parent = ".".join(parts[:i])
            if parent in modules and not name.startswith(parent + ".") and parent != name:
                out.add(parent)
    return out


# A module of the package is one job; past this many lines it has usually grown a second one. Counted as `ruff format`
# writes the code (one argument per line once a call wraps), which runs about a quarter longer than the hand-wrapped
# style the earlier 450 was set on.
MAX_LINES = 600
# The studies and benchmarks import the library, never the reverse; the CLI is the one front door to both.
STUDIES = "studies"
FRONT_DOORS = ("hf_ffn.cli",)


def layout(packages: tuple[Path, ...] = (PACKAGE, STUDIES_DIR)) -> tuple[dict[str, set[str]], list[str]]:
    """(module → package modules it imports at module level, every broken layout rule as a sentence)."""
    modules = module_names(packages)
    graph, problems = {}, []
    for name, path in modules.items():
        graph[name], found = imports_of(name, path, modules)
        problems += found
    edges = {name: with_parents(deps, name, modules) for name, deps in graph.items()}
    state: dict[str, int] = {}

    def dfs(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1:
                problems.append("import cycle: " + " -> ".join(stack[stack.index(dep) :] + [dep]))
            elif dep not in state:
                dfs(dep, stack + [dep])
        state[node] = 2

    for name in graph:
        if name not in state:
            dfs(name, [name])
    for name, deps in graph.items():
        lines = len(modules[name].read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES:
            problems.append(f"{name}: {lines} lines (more than {MAX_LINES}: split it)")
        # The studies and benchmarks import the library, never the reverse.
        for dep in deps:
            if name.split(".")[0] == "hf_ffn" and dep.split(".")[0] == STUDIES:
                problems.append(f"{name}: the library imports the study module {dep}")
    return graph, problems


def main() -> int:
    modules = module_names()
    graph, problems = layout()
    for name, deps in graph.items():
        lines = len(modules[name].read_text(encoding="utf-8").splitlines())
        short = sorted(d.removeprefix("hf_ffn.") for d in deps)
        print(f"{name:34} {lines:4}  -> {', '.join(short) or '-'}")
    for problem in problems:
        print(f"PROBLEM {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
