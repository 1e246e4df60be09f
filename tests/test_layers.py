"""The package's two layers: the science (``mfattn.models``, ``mfattn.flows``, ``mfattn.analysis``) never
imports the companion (``mfattn.companion``: chapters, runner, command line, verdicts and their
rendering, evidence map, HTML check, sweeps, plotting, benchmark), and no module imports, directly or
through others, one that imports it.

Imports are read from the source (``ast``), function-level imports included, so a lazy import counts
like any other; relative imports are resolved against the importing module's package.

Every module is imported by its path (``mfattn.flows.dynamics``): the short names the package once
served (``mfattn.<module>``) import nothing, and nothing in the source, the tests, the tools, the book
or the chapters uses one.
"""

import ast
import functools
import importlib
import json
import re
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


@functools.cache
def modules() -> frozenset[str]:
    """Every module and package below mfattn, dotted (``flows.dynamics``, ``flows``): read once."""
    return frozenset(dotted(p) for p in PKG.rglob("*.py"))


def imported_module(node: ast.ImportFrom, package: str) -> str | None:
    """The package module (dotted below mfattn, "" for the top) that ``from ... import`` reads from,
    relative imports resolved against ``package``; None for a module outside mfattn."""
    if node.level >= 1:
        base = package.split(".") if package else []
        base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
        return ".".join(base + ([node.module] if node.module else []))
    if (node.module or "").split(".")[0] == "mfattn":
        return ".".join(node.module.split(".")[1:])
    return None


def imports(path: Path, package: str = "") -> set[str]:
    """The package modules that the module at ``path`` (in the package ``package``, dotted below
    mfattn, "" for the top) imports, anywhere in its code."""
    known, found = modules(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            mod = imported_module(node, package)
            if mod is None:
                continue
            # ``from mfattn.flows import dynamics`` imports the module flows.dynamics, not only its package
            subs = {f"{mod}.{a.name}" if mod else a.name for a in node.names}
            found |= subs & known if subs & known else {mod}
        elif isinstance(node, ast.Import):
            found |= {".".join(a.name.split(".")[1:]) for a in node.names if a.name.startswith("mfattn.")}
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


def test_the_layout_lists_every_module_and_the_short_names_import_nothing():
    """:data:`mfattn.LAYOUT` lists every module once; ``mfattn.<module>`` without its layer is neither
    a module nor an attribute of the package."""
    assert set(mfattn.LAYOUT_OF.values()) == {m for m in graph() if "." in m and not m.endswith("__init__")} - {
        p for p in SCIENCE_PACKAGES + COMPANION_PACKAGES}
    for short, full in mfattn.LAYOUT_OF.items():
        assert importlib.import_module(f"mfattn.{full}").__name__ == f"mfattn.{full}"
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"mfattn.{short}")
        assert not hasattr(mfattn, short)


ROOT = PKG.parents[1]
# a short name in text: mfattn.<module> with <module> a key of the table (not a layer, not a longer name)
SHORT = re.compile(r"(?<![\w.])mfattn\.(" + "|".join(sorted(mfattn.LAYOUT_OF, key=len, reverse=True)) + r")(?![\w])")


def short_imports(code: str) -> list[str]:
    """The imports of short names in Python source: ``import mfattn.<module>``, ``from mfattn.<module>
    import ...`` and ``from mfattn import <module>``."""
    out = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names
                    if a.name.startswith("mfattn.") and a.name.split(".")[1] in mfattn.LAYOUT_OF]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("mfattn"):
            parts = node.module.split(".")
            if parts[0] != "mfattn":
                continue
            if len(parts) > 1 and parts[1] in mfattn.LAYOUT_OF:
                out.append(node.module)
            elif len(parts) == 1:
                out += [f"mfattn.{a.name}" for a in node.names if a.name in mfattn.LAYOUT_OF]
    return out


def short_names(text: str) -> list[str]:
    """The short names in any text: ``mfattn.<module>`` and ``from mfattn import <module>`` (in a
    doctest, a string of code, a Makefile recipe)."""
    out = [f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}" for m in SHORT.finditer(text)]
    for m in re.finditer(r"from mfattn import ([\w ,]+)", text):
        if {n.split()[0] for n in m.group(1).split(",") if n.strip()} & set(mfattn.LAYOUT_OF):
            out.append(f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}")
    return out


def chapter_code(md: Path) -> str:
    """The code cells of a MyST chapter, joined (IPython magics left out)."""
    from mfattn.companion.runner import code_cells

    return "\n".join(line for line in code_cells(md).splitlines() if not line.lstrip().startswith(("%", "!")))


def test_nothing_imports_or_names_a_short_name():
    """The Python files (their code through ``ast``), the chapters' code cells, and the text of the
    source, tests, tools, book pages and chapters (docstrings, comments, prose, Sphinx roles) name
    every module by its path."""
    files = sorted({*ROOT.glob("src/**/*.py"), *ROOT.glob("tests/*.py"), *ROOT.glob("tools/*.py"),
                    *ROOT.glob("book/**/*.py"), *ROOT.glob("book/**/*.md"), *ROOT.glob("notebooks/*.md"),
                    *ROOT.glob("src/**/templates/*.md"), ROOT / "README.md", ROOT / "Makefile"})
    found = []
    for f in files:
        text = f.read_text()
        if f.suffix == ".py":
            found += [f"{f.relative_to(ROOT)}: imports {m}" for m in short_imports(text)]
        elif f.parent.name == "notebooks":
            found += [f"{f.relative_to(ROOT)}: imports {m}" for m in short_imports(chapter_code(f))]
        found += [f"{f.relative_to(ROOT)}: {hit}" for hit in short_names(text)]
    for nb in sorted(ROOT.glob("notebooks/*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            found += [f"{nb.relative_to(ROOT)}: {hit}" for hit in short_names("".join(cell["source"]))]
    assert len(files) > 100 and found == [], found


def test_the_short_name_check_sees_every_form(tmp_path):
    """The oracle for the test above: each form of a short name is found, the real paths are not."""
    mod = "dyn" + "amics"  # spelled apart, so that this file passes the check it tests
    code = (f"import mfattn.{mod}\nfrom mfattn.{mod} import sgd\nfrom mfattn import {mod}, Dataset\n"
            f"def f():\n    import mfattn.{mod} as d\n")
    assert short_imports(code) == [f"mfattn.{mod}", f"mfattn.{mod}", f"mfattn.{mod}", f"mfattn.{mod}"]
    real = f"import mfattn.flows.{mod}\nfrom mfattn.flows.{mod} import sgd\nfrom mfattn.flows import {mod}\n"
    assert short_imports(real) == []
    text = f":func:`~mfattn.{mod}.sgd`, `mfattn.{mod}`; mfattn.flows.{mod}, mfattn.models, python -m mfattn run"
    assert [m.group(0) for m in SHORT.finditer(text)] == [f"mfattn.{mod}", f"mfattn.{mod}"]
    assert len(short_names(f'python -c "from mfattn import {mod}; {mod}.sgd"\n{text}')) == 3
    assert short_names("from mfattn import Dataset, HeadModel\nfrom mfattn.flows import dynamics") == []
    md = tmp_path / "01-x.md"
    md.write_text(f"# x\n\n```{{code-cell}} ipython3\n%matplotlib inline\nfrom mfattn import {mod}\n```\n")
    assert short_imports(chapter_code(md)) == [f"mfattn.{mod}"]


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


def test_the_checker_sees_lazy_imports_and_cycles(tmp_path):
    """The oracle for the tests above: function-level, relative (one and two levels) and absolute
    imports, of a module or from a package, are all found and resolved; a cycle is reported."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from .runner import run_chapter\n    from mfattn.companion.cli import main\n"
                 "    import mfattn.companion.book\n    from ..models.model import HeadModel\n    from mfattn.flows import dynamics\n")
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


def private_reaches(path: Path, package: str = "") -> list[str]:
    """Where the module at ``path`` uses another package module's private name (``_name``, not a
    dunder): imported from it (``from .runner import _resolve``), or read as an attribute of a name
    bound to it (``fused._threads``). The private module ``_checks`` is the package's own glue and
    is imported by name; what it defines is public to the package."""
    known, found = modules(), []
    own = dotted(path) if PKG in path.resolve().parents else ""
    tree = ast.parse(path.read_text())
    bound = {}  # local name -> the package module it stands for
    private = lambda n: n.startswith("_") and not n.startswith("__")  # noqa: E731
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = imported_module(node, package)
            if mod is None:
                continue
            for a in node.names:
                sub = f"{mod}.{a.name}" if mod else a.name
                if sub in known:
                    bound[a.asname or a.name] = sub
                elif private(a.name) and mod != own:
                    found.append(f"from {mod} import {a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("mfattn.") and a.asname:
                    bound[a.asname] = ".".join(a.name.split(".")[1:])
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                and private(node.attr) and bound[node.value.id] != own):
            found.append(f"{node.value.id}.{node.attr} ({bound[node.value.id]})")
    return found


def test_no_module_reaches_into_another_modules_private_names():
    reaches = {}
    for p in sorted(PKG.rglob("*.py")):
        name = dotted(p)
        package = name if p.stem == "__init__" else name.rpartition(".")[0]
        if private_reaches(p, package):
            reaches[name] = private_reaches(p, package)
    assert reaches == {}


def test_the_private_name_check_sees_every_form(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from .runner import _resolve, cache_folder_of\nfrom ..models import fused as _fused\n"
                 "def g():\n    return _fused._threads() + _fused.head_sum + _fused.__name__\n")
    assert private_reaches(f, "companion") == ["from companion.runner import _resolve", "_fused._threads (models.fused)"]
