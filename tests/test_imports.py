"""The package's import graph, read from the code: no cycle, no hidden (function-level) edge."""

import ast
import pathlib
import random
import subprocess
import sys

import pytest

import keras_fourier
from keras_fourier.cli import COMMANDS

pytestmark = pytest.mark.single_backend

PACKAGE = pathlib.Path(keras_fourier.__file__).parent
# Modules whose functions may import other keras_fourier modules: the backend-specific FFT
# calls (they import the backend's own library, never the package).
FUNCTION_IMPORTS_ALLOWED = {"keras_fourier.layers.spectral"}
# The function-level imports of the package's own code: in each subcommand's run(), and only
# there. The command parses its arguments, and answers --help and argument errors, without
# loading TensorFlow; a subcommand imports the library, which loads it, only when it runs.
# (`keras_fourier.__getattr__` loads the API with importlib, which no import statement shows.)
SUBCOMMANDS = {f"keras_fourier.cli.{command.NAME}" for command in COMMANDS}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, ast.Module]:
    return {_module_name(path): ast.parse(path.read_text()) for path in PACKAGE.rglob("*.py")}


def _targets(node: ast.Import | ast.ImportFrom, modules) -> set[str]:
    """The keras_fourier modules an import statement loads."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        names = [f"{base}.{alias.name}" for alias in node.names]
        names = [name if name in modules else base for name in names]
    return {name for name in names if name.split(".")[0] == "keras_fourier"}


def _function_imports(tree: ast.Module, modules) -> set[tuple[str, int, str]]:
    """(function, line, imported module) of each import of the package inside a function."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    found |= {(node.name, inner.lineno, name) for name in _targets(inner, modules)}
    return found


def test_no_function_level_import_of_the_package_but_the_subcommands_run():
    modules = _modules()
    found = {
        (name, function, line, target)
        for name, tree in modules.items()
        if name not in FUNCTION_IMPORTS_ALLOWED
        for function, line, target in _function_imports(tree, modules)
    }
    sanctioned = {row for row in found if row[0] in SUBCOMMANDS and row[1] == "run"}
    assert {row[0] for row in sanctioned} == SUBCOMMANDS, "each run() imports the library"
    hidden = {f"{name}:{line} imports {target}" for name, _, line, target in found - sanctioned}
    assert not hidden, sorted(hidden)


def test_no_import_cycle_among_modules():
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, tree in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and node.col_offset == 0:
                graph[name] |= {target for target in _targets(node, modules) if target != name}
        # A module loads its package first: keras_fourier.a.b needs keras_fourier.a.
        parent = name.rpartition(".")[0]
        if parent and parent in modules:
            graph[name].add(parent)
    # A package importing its own submodules is how packages are built, not a cycle.
    edges = {
        name: {t for t in targets if not t.startswith(name + ".")}
        for name, targets in graph.items()
    }
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[node] = 2

    for name in sorted(edges):
        if name not in state:
            visit(name, [name])
    assert not cycles, cycles


def test_every_module_imports_first_in_a_fresh_process():
    names = sorted(_modules())
    random.Random(0).shuffle(names)
    script = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    # Each module first, alone, in its own interpreter would take minutes; instead one process
    # per shuffled order, and the first module of each is imported before anything else.
    for order in (names, names[::-1]):
        completed = subprocess.run(
            [sys.executable, "-c", script, *order], capture_output=True, text=True, timeout=600
        )
        assert completed.returncode == 0, completed.stderr[-2000:]
