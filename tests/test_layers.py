"""The package's two layers: the science (models, flows, analyses) never imports the companion
(chapters, runner, command line, verdicts and their rendering, evidence map, HTML check, sweeps,
plotting, benchmark), and no module imports, directly or through others, one that imports it.

Imports are read from the source (``ast``), function-level imports included, so a lazy import
counts like any other. Every module of the package must be placed in one layer: a new module that is
in neither fails here until it is.
"""

import ast
from pathlib import Path

import pytest

import mfattn

PKG = Path(mfattn.__file__).resolve().parent

SCIENCE = {"particles", "integrate", "model", "fused", "data", "softmax", "activations", "dynamics", "static", "stability",
           "longtime", "smoothness", "fitting", "tasks", "tokens", "twolayer", "transport", "distributed",
           "seeds", "linear", "_checks", "_progress", "__init__"}
COMPANION = {"book", "verdicts", "render", "chapters", "runner", "cli", "__main__", "evidence", "replicate",
             "checkhtml", "sweep", "plotting", "bench"}


def imports(path: Path) -> set[str]:
    """The package modules that the module at ``path`` imports, anywhere in its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            inside = node.level >= 1 or (node.module or "").split(".")[0] == "mfattn"
            if not inside:
                continue
            parts = (node.module or "").split(".")
            if node.level == 0:
                parts = parts[1:]
            if parts and parts[0]:
                found.add(parts[0])
            else:  # from . import a, b  /  from mfattn import a
                found |= {a.name for a in node.names if (PKG / f"{a.name}.py").is_file()}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("mfattn.")}
    return found


def graph() -> dict[str, set[str]]:
    return {p.stem: imports(p) - {p.stem} for p in sorted(PKG.glob("*.py"))}


def test_every_module_is_in_one_layer():
    names = set(graph())
    assert not SCIENCE & COMPANION
    assert names - SCIENCE - COMPANION == set(), "place the new module in SCIENCE or COMPANION"
    assert (SCIENCE | COMPANION) - names == set(), "a module listed here no longer exists"


@pytest.mark.parametrize("module", sorted(SCIENCE))
def test_the_science_never_imports_the_companion(module):
    assert graph()[module] & COMPANION == set()


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of the graph ``g`` (module -> modules it imports), each as a path that
    returns to its start; empty when there is none."""
    state, found = {}, []

    def visit(m, path):
        state[m] = "open"
        for d in sorted(g.get(m, ())):
            if state.get(d) == "open":
                found.append(path[path.index(d):] + [d])
            elif d not in state:
                visit(d, path + [d])
        state[m] = "done"

    for m in sorted(g):
        if m not in state:
            visit(m, [m])
    return found


def test_no_import_cycle():
    assert cycles(graph()) == [], "import cycles"


def test_the_checker_sees_lazy_imports_and_cycles(tmp_path):
    """The oracle for the two tests above: a function-level import is found, and a cycle is reported."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from .runner import run_chapter\n    from mfattn.cli import main\n"
                 "    import mfattn.book\n")
    assert imports(f) == {"runner", "cli", "book"}
    assert cycles({"cli": {"runner"}, "runner": {"chapters", "cli"}, "chapters": set()}) == [["cli", "runner", "cli"]]
    assert cycles({"cli": {"runner"}, "runner": {"chapters"}, "chapters": set()}) == []
