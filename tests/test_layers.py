"""The package's two layers: the science (``mfattn.models``, ``mfattn.flows``, ``mfattn.analysis``) never
imports the companion (``mfattn.companion``: chapters, runner, command line, verdicts and their
rendering, evidence map, HTML check, sweeps, plotting, benchmark), and no module imports, directly or
through others, one that imports it.

Imports are read from the source (``ast``), function-level imports included, so a lazy import counts
like any other; relative imports are resolved against the importing module's package, and the short
names (``mfattn.dynamics`` for ``mfattn.flows.dynamics``) through the package's own table.
"""

import ast
from pathlib import Path

import pytest

import mfattn

PKG = Path(mfattn.__file__).resolve().parent
SCIENCE_PACKAGES = ("models", "flows", "analysis")
COMPANION_PACKAGES = ("companion",)
TOP = {"__init__", "__main__", "_checks", "_progress"}  # the package's own glue, in the science layer but __main__


def dotted(path: Path) -> str:
    """``flows.dynamics`` for src/mfattn/flows/dynamics.py; a package's ``__init__`` is the package."""
    parts = list(path.relative_to(PKG).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def canonical(name: str) -> str:
    """A module path below mfattn, its short name resolved (``dynamics`` -> ``flows.dynamics``)."""
    head = name.split(".")[0]
    return mfattn.LAYOUT_OF.get(head, name) if "." not in name else name


def imports(path: Path, package: str = "") -> set[str]:
    """The package modules that the module at ``path`` (in the package ``package``, dotted below
    mfattn, "" for the top) imports, anywhere in its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level >= 1:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                mod = ".".join(base + ([node.module] if node.module else []))
                if node.module:
                    found.add(canonical(mod))
                else:
                    found |= {canonical(".".join(base + [a.name])) for a in node.names}
            elif (node.module or "").split(".")[0] == "mfattn":
                rest = node.module.split(".")[1:]
                if rest:
                    found.add(canonical(".".join(rest)))
                else:
                    found |= {canonical(a.name) for a in node.names if a.name in mfattn.LAYOUT_OF}
        elif isinstance(node, ast.Import):
            found |= {canonical(".".join(a.name.split(".")[1:])) for a in node.names if a.name.startswith("mfattn.")}
    return {f for f in found if f}


def graph() -> dict[str, set[str]]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        name = dotted(p)
        package = name if p.stem == "__init__" else name.rpartition(".")[0]
        out[name] = imports(p, package) - {name}
    return out


def layer(module: str) -> str:
    head = module.split(".")[0]
    if head in SCIENCE_PACKAGES or module in TOP - {"__main__"}:
        return "science"
    if head in COMPANION_PACKAGES or module == "__main__":
        return "companion"
    return "none"


def test_every_module_is_in_one_layer():
    loose = [m for m in graph() if layer(m) == "none"]
    assert loose == [], "place the new module in a science package (models, flows, analysis) or in companion"


def test_the_short_names_are_the_modules():
    """``mfattn.dynamics`` (what the docs' examples and the chapters import) is ``mfattn.flows.dynamics``."""
    import importlib

    for short, full in mfattn.LAYOUT_OF.items():
        assert importlib.import_module(f"mfattn.{short}") is importlib.import_module(f"mfattn.{full}")
        assert getattr(mfattn, short) is importlib.import_module(f"mfattn.{full}")
    assert set(mfattn.LAYOUT_OF.values()) == {m for m in graph() if "." in m and not m.endswith("__init__")} - {
        p for p in SCIENCE_PACKAGES + COMPANION_PACKAGES}


SCIENCE = sorted(m for m in graph() if layer(m) == "science")


@pytest.mark.parametrize("module", SCIENCE)
def test_the_science_never_imports_the_companion(module):
    assert {d for d in graph()[module] if layer(d) == "companion"} == set()


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
    g = graph()
    # a package's __init__ only names its modules; the top one imports nothing of the layers at import time
    assert cycles({m: {d for d in ds if d in g and not d in SCIENCE_PACKAGES + COMPANION_PACKAGES}
                   for m, ds in g.items() if m not in SCIENCE_PACKAGES + COMPANION_PACKAGES}) == [], "import cycles"


def test_the_checker_sees_lazy_imports_short_names_and_cycles(tmp_path):
    """The oracle for the tests above: function-level, relative (one and two levels), absolute and
    short-name imports are all found and resolved; a cycle is reported."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from .runner import run_chapter\n    from mfattn.cli import main\n"
                 "    import mfattn.book\n    from ..models.model import HeadModel\n    from mfattn import dynamics\n")
    assert imports(f, "companion") == {"companion.runner", "companion.cli", "companion.book", "models.model",
                                       "flows.dynamics"}
    assert cycles({"cli": {"runner"}, "runner": {"chapters", "cli"}, "chapters": set()}) == [["cli", "runner", "cli"]]
    assert cycles({"cli": {"runner"}, "runner": {"chapters"}, "chapters": set()}) == []


#: The science's folders, lowest first: a module may import its own folder and those below it.
FOLDERS = ("models", "flows", "analysis")
#: Known exceptions, each with its reason and the change that removes it.
ALLOWED_UPWARD = set()  # no folder of the science imports one above it


def test_the_science_folders_are_layered():
    """models below flows below analysis: no module imports a folder above its own (function-level
    imports count), so a folder can be read and tested with only those below it."""
    upward = set()
    for m, deps in graph().items():
        here = m.split(".")[0]
        if here not in FOLDERS:
            continue
        for d in deps:
            there = d.split(".")[0]
            if there in FOLDERS and FOLDERS.index(there) > FOLDERS.index(here):
                upward.add((m, d))
    assert upward <= ALLOWED_UPWARD, sorted(upward - ALLOWED_UPWARD)
