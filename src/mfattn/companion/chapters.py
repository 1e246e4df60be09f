"""What a chapter takes: its parameters and its profiles, read from the chapter's source.

A chapter (``notebooks/NN-name.md``) has one code cell tagged ``parameters`` (papermill's
convention) with one ``name = value  # comment`` line per run setting (``profile``, ``device``,
``seed``, ``cache_dir``). Its own parameters are declared once, as data, in the source's front
matter, each with its value in every profile and what it means::

    mfattn-parameters:
      T: {ci: 1.0, paper: 2.0, help: horizon of the dynamics}

and :func:`mfattn.companion.book.setup` reads the same table when the chapter runs. This module
reads the cell (with ``ast`` and ``tokenize``) and the table without executing the chapter, for
``python -m mfattn params CHAPTER``, for the parameter table each chapter shows, and for
:func:`check_values`, which ``python -m mfattn run`` calls before it starts a kernel. It also finds
the checkout and its chapters (:func:`repo_root`, :func:`find_chapter`) for the command line, the
runner, the replication and the evidence map.
"""

from __future__ import annotations

import ast
import sys
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Parameter", "chapters", "check_values", "declared", "find_chapter", "parameter_rows", "parameters",
           "profiles", "repo_root", "size_ratio", "strip_papermill", "title"]


# ----------------------------------------------------------------------- the checkout's chapters
def repo_root() -> Path:
    """The checkout that holds ``notebooks/``: the current folder or an ancestor, else the
    checkout this package was installed from in editable mode.

    Returns
    -------
    pathlib.Path
        The checkout's root (it holds ``notebooks/`` and ``_toc.yml``).

    Raises
    ------
    SystemExit
        When there is none (the package was installed from elsewhere and run outside a checkout).

    Examples
    --------
    >>> from mfattn.companion.chapters import repo_root
    >>> (repo_root() / "_toc.yml").is_file()
    True
    """
    for base in [Path.cwd(), *Path.cwd().parents, Path(__file__).resolve().parents[3]]:
        if (base / "notebooks").is_dir() and (base / "_toc.yml").is_file():
            return base
    raise SystemExit("mfattn: no notebooks/ folder found (run from the companion's checkout)")


def chapters(root: Path) -> list[str]:
    """The chapters of the checkout ``root``: the stems of ``notebooks/*.md``, sorted.

    Parameters
    ----------
    root : pathlib.Path
        The checkout (:func:`repo_root`).

    Returns
    -------
    list of str
        The chapters' names, e.g. ``"07-two-layer-baseline"``.

    Examples
    --------
    >>> from mfattn.companion.chapters import chapters, repo_root
    >>> chapters(repo_root())[0]
    '01-preliminaries'
    """
    return sorted(p.stem for p in (root / "notebooks").glob("*.md"))


class UserError(SystemExit):
    """A fault of the command line the user can fix: one line on stderr, exit status 2."""

    def __init__(self, message: str):
        print(f"mfattn: {message}", file=sys.stderr)
        super().__init__(2)


def find_chapter(root: Path, name: str) -> Path:
    """The source of the one chapter whose name is ``name`` or starts with it.

    Parameters
    ----------
    root : pathlib.Path
        The checkout (:func:`repo_root`).
    name : str
        A chapter's name, a prefix of it (``"07"``) or a path to its source.

    Returns
    -------
    pathlib.Path
        ``root/notebooks/NAME.md``.

    Raises
    ------
    SystemExit
        With status 2 (:class:`UserError`) when no chapter or several match, naming the chapters.

    Examples
    --------
    >>> from mfattn.companion.chapters import find_chapter, repo_root
    >>> find_chapter(repo_root(), "07").name
    '07-two-layer-baseline.md'
    """
    stem = Path(name).stem
    names = chapters(root)
    match = [c for c in names if c == stem] or [c for c in names if c.startswith(stem)]
    if len(match) != 1:
        raise UserError(f"chapter {name!r} matches {match or 'nothing'}; chapters: {', '.join(names)}")
    return root / "notebooks" / f"{match[0]}.md"


def strip_papermill(nb) -> None:
    """Remove the run-specific metadata papermill adds, so committed notebooks diff cleanly.

    Parameters
    ----------
    nb : nbformat.NotebookNode
        An executed notebook, changed in place.

    Examples
    --------
    >>> import nbformat
    >>> from mfattn.companion.chapters import strip_papermill
    >>> nb = nbformat.v4.new_notebook(metadata={"papermill": {"duration": 1.0}})
    >>> nb.cells.append(nbformat.v4.new_code_cell("1", metadata={"papermill": {}, "execution": {}, "tags": []}))
    >>> strip_papermill(nb)
    >>> dict(nb.metadata), dict(nb.cells[0].metadata)
    ({}, {'tags': []})
    """
    nb.metadata.pop("papermill", None)
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)


@dataclass(frozen=True)
class Parameter:
    """One line ``name = value  # comment`` of a chapter's parameters cell (see :func:`parameters`).

    Attributes
    ----------
    name : str
        The parameter's name.
    default : object
        The literal value in the parameters cell; ``None`` when the chapter's profile supplies it.
    comment : str
        The line's comment (what the parameter is), ``""`` when the line has none.

    Examples
    --------
    >>> from mfattn.companion.chapters import Parameter
    >>> p = Parameter("seed", 0, "seeds every random draw of the chapter")
    >>> p.name, p.default
    ('seed', 0)
    """

    name: str
    default: object  # the value in the parameters cell (None: taken from the profile)
    comment: str  # the line's comment: what the parameter is


_PARSED: dict = {}


def _parsed(path: Path, what: str, parse):
    """``parse(path)``, once per version of the file (its path, size and modification time): a run
    reads a chapter's cells and front matter from several places, and parses them once. A deep copy
    is returned, so that no caller changes another's."""
    import copy

    st = path.stat()
    key = (str(path.resolve()), what, st.st_mtime_ns, st.st_size)
    if key not in _PARSED:
        _PARSED[key] = parse(path)
    return copy.deepcopy(_PARSED[key])


def chapter_cells(path: Path):
    """The cells of the chapter's MyST source (jupytext), parsed once per version of the file."""
    import jupytext

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: {path} is not a chapter source")
    return _parsed(path, "cells", lambda p: jupytext.read(p).cells)


def declared(path) -> dict | None:
    """The parameters a chapter declares in its front matter (``mfattn-parameters:``), or ``None``
    when it declares none. (The executed notebook's
    ``mfattn`` metadata is the runner's provenance, a different key.)

    Parameters
    ----------
    path : str or pathlib.Path
        The chapter's MyST source.

    Returns
    -------
    dict or None
        ``{name: {profile: value, ..., "help": text}}`` in the order of the front matter; an entry
        may also give its values' ``range`` (an interval, ``"[0, 1)"``, ``"(0, inf)"``; numbers
        default to ``"(0, inf)"``) and ``choices`` (a list), which :func:`check_values` enforces.

    Raises
    ------
    ValueError
        If ``path`` is not a file, or an entry lacks its ``help`` or gives the profiles different
        names.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.companion.chapters import declared
    >>> root = pathlib.Path(mfattn.__file__).resolve().parents[2]
    >>> table = declared(root / "notebooks" / "07-two-layer-baseline.md")
    >>> sorted(table["T"])
    ['ci', 'cost', 'help', 'paper']
    """
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: {path} is not a chapter source")
    text = path.read_text()
    if not text.startswith("---\n"):
        return None
    head = _parsed(path, "front matter", lambda p: yaml.safe_load(text[4:text.index("\n---", 4)]) or {})
    table = head.get("mfattn-parameters")
    if not table:
        return None
    names = None
    for name, entry in table.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("help"), str):
            raise ValueError(f"path: {path}: parameter {name!r} needs a mapping with its profiles and a help text")
        if "range" in entry:
            try:
                _interval(entry["range"])
            except ValueError as e:
                raise ValueError(f"path: {path}: parameter {name!r}: {e}") from None
        if "choices" in entry and not (isinstance(entry["choices"], list) and entry["choices"]):
            raise ValueError(f"path: {path}: parameter {name!r}: choices must be a non-empty list")
        profs = sorted(k for k in entry if k not in _META)
        if names is not None and profs != names:
            raise ValueError(f"path: {path}: parameter {name!r} has profiles {profs}, the others {names}")
        names = profs
    return table


def parameters(path) -> list[Parameter]:
    """The parameters of the chapter at ``path``, in the order of its parameters cell.

    Parameters
    ----------
    path : str or pathlib.Path
        The chapter's MyST source, e.g. ``notebooks/05-stability.md``.

    Returns
    -------
    list of Parameter
        One per single-name assignment of the cell; the values are read with
        ``ast.literal_eval``, without running the cell.

    Raises
    ------
    ValueError
        If ``path`` is not a file or has not exactly one cell tagged ``parameters``.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> root = pathlib.Path(mfattn.__file__).resolve().parents[2]
    >>> chapter = root / "notebooks" / "05-stability.md"
    >>> from mfattn.companion.chapters import parameters
    >>> params = parameters(chapter)
    >>> params[0].name
    'profile'
    >>> all(isinstance(p.comment, str) for p in params)
    True
    """
    cells = [c for c in chapter_cells(path) if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"path: {path} has {len(cells)} cells tagged 'parameters', expected 1")
    src = cells[0].source
    comments = {}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    out = []
    for node in ast.parse(src).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out.append(Parameter(node.targets[0].id, ast.literal_eval(node.value), comments.get(node.lineno, "")))
    table = declared(path)
    if table:  # the run settings of the cell, then the chapter's own parameters, cache_dir last
        last = [p for p in out if p.name == "cache_dir"]
        out = [p for p in out if p.name != "cache_dir"]
        out += [Parameter(name, None, entry["help"]) for name, entry in table.items() if name not in {p.name for p in out}]
        out += last
    return out


def profiles(path) -> dict[str, dict]:
    """The chapter's profiles: ``{profile: {parameter: value}}``, from its front matter (:func:`declared`).

    Parameters
    ----------
    path : str or pathlib.Path
        The chapter's MyST source.

    Returns
    -------
    dict of str to dict
        For each profile (e.g. ``"ci"``, ``"paper"``), the values it gives the parameters left at
        ``None`` in the parameters cell.

    Raises
    ------
    ValueError
        If ``path`` is not a file, or declares no parameters in its front matter.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> root = pathlib.Path(mfattn.__file__).resolve().parents[2]
    >>> chapter = root / "notebooks" / "05-stability.md"
    >>> from mfattn.companion.chapters import profiles
    >>> table = profiles(chapter)
    >>> sorted(table)
    ['ci', 'paper']
    """
    table = declared(path)
    if not table:
        raise ValueError(f"path: {path} declares no parameters in its front matter (mfattn-parameters:)")
    profs = [k for k in next(iter(table.values())) if k not in _META]
    return {prof: {name: entry[prof] for name, entry in table.items()} for prof in profs}


def parameter_rows(path) -> list[dict]:
    """One row per parameter: name, the value each profile gives it (the cell's own value where the
    cell sets one), and its comment.

    Parameters
    ----------
    path : str or pathlib.Path
        The chapter's MyST source.

    Returns
    -------
    list of dict
        In the order of the parameters cell, rows ``{"name": ..., <profile>: value, ...,
        "comment": ...}`` with one key per profile of :func:`profiles`; the ``profile`` parameter's
        row gives each profile its own name.

    Raises
    ------
    ValueError
        As :func:`parameters` and :func:`profiles`.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> root = pathlib.Path(mfattn.__file__).resolve().parents[2]
    >>> chapter = root / "notebooks" / "05-stability.md"
    >>> from mfattn.companion.chapters import parameter_rows
    >>> rows = parameter_rows(chapter)
    >>> rows[0]["name"], rows[0]["ci"], rows[0]["paper"]
    ('profile', 'ci', 'paper')
    >>> list(rows[0])
    ['name', 'ci', 'paper', 'comment']
    """
    table = profiles(path)
    rows = []
    for p in parameters(path):
        row = {"name": p.name}
        for prof, values in table.items():
            row[prof] = values.get(p.name, p.default) if p.default is None else p.default
        if p.name == "profile":
            row.update({prof: prof for prof in table})
        row["comment"] = p.comment
        rows.append(row)
    return rows


# Keys of a front-matter entry that are not profiles.
_META = ("help", "range", "choices", "cost")
# What a value may be, beyond the type of the profile's value (see check_values): a chapter declares
# its own parameters' ranges and choices in its front matter (``range:``, ``choices:``); these are the
# run settings every chapter shares. Numbers with no range must be > 0.
CHOICES: dict = {}
# name: (low, high, low included, high included); None: unbounded on that side
RANGES = {
    "seed": (0, 2**63 - 1, True, True),
}
_DEFAULT_RANGE = (0, None, False, True)


def _interval(text) -> tuple:
    """``"[a, b)"`` -> ``(a, b, True, False)``; ``inf`` (or ``-inf``) leaves a side unbounded (None)."""
    import re

    m = re.fullmatch(r"\s*([\[(])\s*([^,]+?)\s*,\s*([^,]+?)\s*([\])])\s*", str(text))
    if not m:
        raise ValueError(f"range {text!r}: write an interval, like '[0, 1)' or '(0, inf)'")
    def bound(x):
        if x.lstrip("+-") == "inf":
            return None
        try:
            return int(x) if re.fullmatch(r"[+-]?\d+", x) else float(x)
        except ValueError:
            raise ValueError(f"range {text!r}: {x!r} is not a number") from None
    lo, hi = bound(m.group(2)), bound(m.group(3))
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"range {text!r}: empty")
    return lo, hi, m.group(1) == "[", m.group(4) == "]"


_DEVICE = r"cpu|auto|cuda(:[0-9]+)?"


def _kind(ref) -> str:
    if isinstance(ref, bool):
        return "bool"
    if isinstance(ref, int):
        return "int"
    if isinstance(ref, float):
        return "float"
    if isinstance(ref, str):
        return "str"
    if isinstance(ref, (list, tuple)):
        return "list"
    return type(ref).__name__


_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "bool": "True or False",
          "list": "a list"}


def _check_scalar(name, value, ref, what, rules=None):
    """Why ``value`` (or an element of a list) is not allowed where ``ref`` is the profile's value;
    ``None`` when it is."""
    import math
    import re

    kind = _kind(ref)
    if kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = isinstance(value, type(ref))
    if not ok:
        return f"{what} must be {_WORDS.get(kind, kind)} (like {ref!r})"
    if kind == "str":
        if name == "device" and not re.fullmatch(_DEVICE, value):
            return "must be 'cpu', 'auto', 'cuda' or 'cuda:K'"
        choices = (rules or {}).get("choices") or CHOICES.get(name)
        if choices and value not in choices:
            return f"{what} must be one of {', '.join(repr(c) for c in choices)}"
        return None
    if kind in ("int", "float"):
        if not math.isfinite(value):
            return f"{what} must be finite"
        choices = (rules or {}).get("choices")
        if choices and value not in choices:
            return f"{what} must be one of {', '.join(repr(c) for c in choices)}"
        given = (rules or {}).get("range")
        lo, hi, lo_in, hi_in = _interval(given) if given is not None else RANGES.get(name, _DEFAULT_RANGE)
        if lo is not None and (value < lo or (value == lo and not lo_in)):
            return f"{what} must be {'>=' if lo_in else '>'} {lo}"
        if hi is not None and (value > hi or (value == hi and not hi_in)):
            return f"{what} must be {'<=' if hi_in else '<'} {hi}"
    return None


def check_values(path, values: dict) -> dict:
    """The run's effective configuration: every parameter of the chapter at ``path`` with the value
    ``values`` gives it, else the chosen profile's, else the parameters cell's; each value checked.

    A value must have the type of the profile's value (an integer where the profile has one, a
    number, a string, a list of such), be finite, and lie in the range and among the choices its
    chapter declares beside it in the front matter (:func:`declared`); numbers without a declared
    range must be > 0 (``seed`` >= 0), ``profile`` names a profile of the chapter's table,
    ``device`` is ``cpu``, ``auto``, ``cuda`` or ``cuda:K``, and ``cache_dir`` is a string or None.
    ``None`` keeps the profile's value where the cell's default is ``None``.

    Parameters
    ----------
    path : str or pathlib.Path
        The chapter's MyST source.
    values : dict
        The values to set, by parameter name (as ``python -m mfattn run -p NAME VALUE`` gives them).

    Returns
    -------
    dict
        ``{name: value}`` for every parameter, in the order of the parameters cell.

    Raises
    ------
    ValueError
        On the first fault, in one line naming the parameter, the value and what is allowed.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.companion.chapters import check_values
    >>> chapter = pathlib.Path(mfattn.__file__).resolve().parents[2] / "notebooks" / "05-stability.md"
    >>> cfg = check_values(chapter, {"n_data": 8})
    >>> cfg["profile"], cfg["n_data"], cfg["n_starts"]
    ('ci', 8, 4)
    >>> check_values(chapter, {"n_data": 2.5})
    Traceback (most recent call last):
    ...
    ValueError: n_data = 2.5: must be an integer (like 64)
    >>> check_values(chapter, {"n_data": -3})
    Traceback (most recent call last):
    ...
    ValueError: n_data = -3: must be > 0
    """
    params = parameters(path)
    table = profiles(path)
    rules = {name: {k: e[k] for k in ("range", "choices") if k in e} for name, e in (declared(path) or {}).items()}
    names = [p.name for p in params]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ValueError(f"unknown parameter(s) {', '.join(unknown)}; {Path(path).stem} takes: {', '.join(names)}")
    defaults = {p.name: p.default for p in params}
    profile = values.get("profile", defaults.get("profile"))
    if profile not in table:
        raise ValueError(f"profile = {profile!r}: must be one of {', '.join(repr(k) for k in table)}")
    out = {}
    for name in names:
        ref = table[profile].get(name, defaults[name]) if defaults[name] is None else defaults[name]
        value = values.get(name, defaults[name])
        if value is None and (defaults[name] is None or name == "cache_dir"):
            value = None if name == "cache_dir" else ref
        if name == "profile":
            out[name] = profile
            continue
        if name == "cache_dir":
            if value is not None and not isinstance(value, str):
                raise ValueError(f"cache_dir = {value!r}: must be a folder's path (a string) or None")
            out[name] = value
            continue
        why = None
        if ref is None:
            why = None
        elif _kind(ref) == "list":
            if not isinstance(value, (list, tuple)) or not value:
                why = f"must be a non-empty list (like {list(ref)!r})"
            else:
                why = next((w for w in (_check_scalar(name, v, ref[0], "every element", rules.get(name))
                                        for v in value) if w), None)
        else:
            why = _check_scalar(name, value, ref, "it", rules.get(name))
            if why and why.startswith("it "):
                why = why[3:]
        if why:
            raise ValueError(f"{name} = {value!r}: {why}")
        out[name] = list(value) if isinstance(value, tuple) else value
    return out


def _cost_value(v, c) -> float:
    """The work a value stands for under the cost exponent ``c``: ``v**c`` for a number, the sum over
    a list's elements (its length for ``c = 0`` or a list of strings), 1 for anything else."""
    if isinstance(v, (list, tuple)):
        return float(sum(_cost_value(x, c) for x in v)) if v else 0.0
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
        return float(v) ** c
    return 1.0


def _cell_factors(sources: list[str], factor: dict) -> list[float]:
    """For each code cell, how much its work grows: ``factor[name]`` is the growth of one parameter.

    The work of a statement is the product of the growths of the parameters that size it (``cfg.NAME``
    or the bare name, read in a loop's or comprehension's iterator or in the arguments of a call that
    computes, not of one that builds a value such as ``dict`` or ``len``), and of the functions it
    calls or passes on (which may have been defined in an earlier cell): nested work multiplies, except that a function whose result is
    kept on disk (it calls ``memo``) runs once and adds its work. A loop multiplies its body by what its
    iterator reads. Work done one after the other adds, and the committed time does not say how it
    was shared, so a body of several statements (a cell, a function, a loop's body) grows as its
    fastest-growing statement: an upper bound when each statement's growth is right."""
    import ast as _ast

    fns: dict = {}
    cached: set = set()

    # calls that build values, not work: a size handed to them (a cache key, a label) costs nothing
    plain = {"dict", "list", "tuple", "set", "len", "print", "float", "int", "str", "bool", "repr", "format",
             "sorted", "min", "max", "abs", "round", "isinstance", "getattr", "Markdown", "glue"}

    def param(n):
        if isinstance(n, _ast.Attribute) and isinstance(n.value, _ast.Name) and n.value.id == "cfg":
            return n.attr if n.attr in factor else None
        return n.id if isinstance(n, _ast.Name) and n.id in factor else None

    def reads(node, counted=False) -> set:
        """The parameters that size work: read in a loop's iterator, or in the arguments of a call
        to anything but a value builder (:data:`plain`)."""
        got = set()
        name = param(node)
        if name is not None:
            return {name} if counted else set()
        if isinstance(node, _ast.comprehension):
            return reads(node.iter, True) | set().union(*(reads(c, counted) for c in node.ifs))
        if isinstance(node, _ast.Call):
            f = node.func
            builder = isinstance(f, _ast.Name) and f.id in plain or isinstance(f, _ast.Attribute) and f.attr in (
                "format", "append", "join", "items", "keys", "values", "tolist", "numpy", "cpu", "item")
            inner = counted if builder else True
            for a in [*node.args, *(k.value for k in node.keywords)]:
                got |= reads(a, inner)
            return got | reads(f, counted)
        for child in _ast.iter_child_nodes(node):
            got |= reads(child, counted)
        return got

    def prod(names) -> float:
        out = 1.0
        for n in names:
            out *= factor[n]
        return out

    def expr_work(node) -> float:
        # the parameters it reads, times the work of any function it calls or hands on (the largest);
        # a function whose result is kept (it calls memo) runs once: its work adds, it does not multiply
        names = [n.id for n in _ast.walk(node) if isinstance(n, _ast.Name) and n.id in fns]
        fresh = [fns[n] for n in names if n not in cached]
        kept = [fns[n] for n in names if n in cached]
        return max(prod(reads(node)) * max(fresh, default=1.0), max(kept, default=1.0))

    def body_work(stmts) -> float:
        return max((stmt_work(s) for s in stmts), default=1.0)

    def stmt_work(node) -> float:
        if isinstance(node, (_ast.FunctionDef, _ast.AsyncFunctionDef)):
            fns[node.name] = body_work(node.body)
            if any(isinstance(n, _ast.Call) and isinstance(n.func, _ast.Name) and n.func.id == "memo"
                   for n in _ast.walk(node)):
                cached.add(node.name)
            return 1.0
        if isinstance(node, (_ast.For, _ast.AsyncFor)):
            return prod(reads(node.iter, True)) * max(expr_work(node.iter), 1.0) * body_work(node.body)
        if isinstance(node, _ast.While):
            return body_work(node.body)
        if isinstance(node, _ast.If):
            return max(body_work(node.body), body_work(node.orelse))
        if isinstance(node, (_ast.With, _ast.AsyncWith)):
            return body_work(node.body)
        if isinstance(node, _ast.Try):
            return max(body_work(node.body), body_work(node.handlers and node.handlers[0].body or []))
        if isinstance(node, (_ast.Import, _ast.ImportFrom)):
            return 1.0
        return expr_work(node)

    out = []
    for src in sources:
        try:
            tree = _ast.parse(src)
        except SyntaxError:
            out.append(1.0)
            continue
        out.append(body_work(tree.body))
    return out


def estimate(path, config: dict, notebook=None) -> tuple[float, list[tuple[float, str]], list[float]] | None:
    """The chapter's own cost model: the seconds a run with ``config`` should take on the machine of
    the committed ci run, from that run's time per code cell.

    Each parameter of the front matter may declare ``cost: c``, the exponent of its work (1: work
    grows as the value, as for a number of heads or seeds; -1: as its inverse, as for a step; 2:
    as its square, as for pairs of tokens; 0 or absent: no effect; a list counts as the sum over its
    elements). With ``g(new) / g(ci)`` (:func:`_cost_value`) the growth of one parameter, a code
    cell's work grows as :func:`_cell_factors` reads it off the cell's code (nested work multiplies,
    work one after the other takes the largest growth), times the largest growth among the sizes the
    prologue reads (the data every later cell computes on); the estimate adds the cells' committed
    times (the notebook's ``mfattn.cell_seconds``) times their growth.

    Parameters
    ----------
    path : str or pathlib.Path
        The chapter's MyST source.
    config : dict
        The run's checked values (:func:`check_values`).
    notebook : str or pathlib.Path or None
        The committed notebook (default: beside ``path``).

    Returns
    -------
    tuple or None
        ``(seconds, basis, cells)``: the estimate; for every cell ``(seconds, description)`` of its
        share, largest first; and every code cell's estimated seconds in order (the runner's overall
        progress bar). ``None`` when the committed run recorded no cell times.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.companion.chapters import check_values, estimate, profiles
    >>> chapter = pathlib.Path(mfattn.__file__).resolve().parents[2] / "notebooks" / "07-two-layer-baseline.md"
    >>> ci = estimate(chapter, check_values(chapter, {}))
    >>> n_seeds = profiles(chapter)["ci"]["n_seeds"]          # the committed run's draws per N
    >>> twice = estimate(chapter, check_values(chapter, {"n_seeds": 2 * n_seeds}))
    >>> ci is None or twice[0] > ci[0]
    True
    """
    import json as _json

    import jupytext

    path = Path(path)
    nb_path = Path(notebook) if notebook else path.with_suffix(".ipynb")
    try:
        meta = _json.loads(nb_path.read_text())["metadata"].get("mfattn", {})
    except (OSError, ValueError, KeyError):
        return None
    secs = meta.get("cell_seconds")
    sources = [c.source for c in chapter_cells(path) if c.cell_type == "code"]
    if not secs or len(secs) != len(sources):
        return None
    table = declared(path) or {}
    if not any("cost" in e for e in table.values()):
        return None  # the chapter declares no cost model
    base = check_values(path, {})
    factor = {}
    for name, entry in table.items():
        c = entry.get("cost", 0)
        if c and name in config:
            b = _cost_value(base[name], c)
            factor[name] = _cost_value(config[name], c) / b if b > 0 else 1.0
    factor = {name: factor.get(name, 1.0) for name in table}
    # the data the prologue builds (sizes it reads) weigh on every later cell, once: a later cell that
    # reads the same size (a cache key, say) does not count it again; a chapter with several datasets
    # uses one at a time, so the largest growth among them
    pro = next((i for i, src in enumerate(sources) if "setup(" in src), None)
    data, read = 1.0, set()
    if pro is not None:
        import ast as _ast

        tree = _ast.parse(sources[pro])
        read = {n.attr for n in _ast.walk(tree) if isinstance(n, _ast.Attribute) and isinstance(n.value, _ast.Name)
                and n.value.id == "cfg"} & set(table)
        data = max([factor[n] for n in read], default=1.0)
    grows = _cell_factors(sources, {n: (1.0 if n in read else f) for n, f in factor.items()})
    if pro is not None:
        grows[pro] = data
    total, basis, cells = 0.0, [], []
    for i, (t, g, src) in enumerate(zip(secs, grows, sources)):
        f = g * (data if pro is not None and i > pro else 1.0)
        total += t * f
        cells.append(t * f)
        first = next((ln.strip() for ln in src.splitlines() if ln.strip() and not ln.lstrip().startswith(("#", ":"))), "")
        basis.append((t * f, f"cell {i + 1} ({first[:48]}): {t:g} s x {f:.3g}"))
    basis.sort(key=lambda x: -x[0])
    return total, basis, cells


def growth(values: dict, base: dict, *, shrink: bool = False) -> tuple[float, str, float, float]:
    """The parameter of ``values`` that grew most against ``base``: the largest ratio of a number to
    the same parameter's number in ``base`` (of a list, its largest element); with ``shrink``, a
    number that fell counts by the inverse ratio (a smaller step is more work too).

    Parameters
    ----------
    values, base : dict
        ``{parameter: value}``; non-numbers and parameters missing from ``base`` are skipped.
    shrink : bool
        Count a fall as well as a rise.

    Returns
    -------
    (float, str, float, float)
        The ratio (1.0 when nothing grew), the parameter's name ("" then), its number in ``values``
        and in ``base``.

    Examples
    --------
    >>> from mfattn.companion.chapters import growth
    >>> growth({"n": 400, "grid": [8, 128], "eps": 0.01}, {"n": 100, "grid": [8, 16], "eps": 0.1})
    (8.0, 'grid', 128, 16)
    >>> growth({"eps": 0.01}, {"eps": 0.1}, shrink=True)[:2]
    (10.0, 'eps')
    """
    def big(v):
        if isinstance(v, (list, tuple)):
            v = [x for x in v if isinstance(x, (int, float)) and not isinstance(x, bool)]
            return max(v) if v else None
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    best, which, va, vb = 1.0, "", 0.0, 0.0
    for name, b in base.items():
        a, b = big(values.get(name)), big(b)
        if a is None or b is None or a <= 0 or b <= 0:
            continue
        r = max(a / b, b / a) if shrink else a / b
        if r > best:
            best, which, va, vb = r, name, a, b
    return best, which, va, vb


def size_ratio(path, profile: str, base: str = "ci") -> tuple[float, str]:
    """The largest ratio of a size of ``profile`` to the same size of ``base``: over the numbers
    (and the largest element of lists) that grow from ``base`` to ``profile``. The work of a
    chapter grows at least linearly in each of its sizes, so ``ratio x (base's run time)`` is a
    lower estimate of ``profile``'s run time on the same machine.

    Parameters
    ----------
    path : str or pathlib.Path
        The chapter's MyST source.
    profile, base : str
        Profiles of the chapter's table.

    Returns
    -------
    (float, str)
        The ratio (1.0 when nothing grows) and the parameter that has it, e.g. ``"n_ref 262144 vs
        4096"``.

    Raises
    ------
    ValueError
        If a profile is not in the chapter's table.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.companion.chapters import size_ratio
    >>> chapter = pathlib.Path(mfattn.__file__).resolve().parents[2] / "notebooks" / "05-stability.md"
    >>> size_ratio(chapter, "paper")
    (16.0, 'n_pairs 1024 vs 64')
    """
    table = profiles(path)
    for p in (profile, base):
        if p not in table:
            raise ValueError(f"profile: {p!r} is not one of {sorted(table)}")
    best, name, a, b = growth(table[profile], table[base])
    return best, (f"{name} {a:g} vs {b:g}" if name else "")


def title(path) -> str:
    """The chapter's title: the text of its first Markdown heading.

    Parameters
    ----------
    path : str or pathlib.Path
        The chapter's MyST source.

    Returns
    -------
    str
        The first ``# ...`` heading without the ``#``, or the file's stem when there is none.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.companion.chapters import title
    >>> root = pathlib.Path(mfattn.__file__).resolve().parents[2]
    >>> title(root / "notebooks" / "05-stability.md").startswith("Stability of Dirac")
    True
    """
    for cell in chapter_cells(path):
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return Path(path).stem
