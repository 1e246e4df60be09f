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
import io
import json
import math
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Parameter", "chapters", "check_values", "declared", "find_chapter", "parameter_rows", "parameters",
           "profiles", "repo_root", "strip_papermill", "title"]


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


def _parsed(path, what: str, parse):
    """``parse(path)``, once per version of the file (its path, size and modification time): a run
    reads a chapter's cells and front matter from several places, and parses them once. A deep copy
    is returned, so that no caller changes another's."""
    import copy

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: {path} is not a chapter source")
    st = path.stat()
    key = (str(path.resolve()), what, st.st_mtime_ns, st.st_size)
    if key not in _PARSED:
        _PARSED[key] = parse(path)
    return copy.deepcopy(_PARSED[key])


def chapter_cells(path: Path):
    """The cells of the chapter's MyST source (jupytext), parsed once per version of the file."""
    import jupytext

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

    def front_matter(p):
        text = p.read_text()
        return (yaml.safe_load(text[4:text.index("\n---", 4)]) or {}) if text.startswith("---\n") else {}

    table = _parsed(path, "front matter", front_matter).get("mfattn-parameters")
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
    tokens = tokenize.generate_tokens(io.StringIO(src).readline)
    comments = {t.start[0]: t.string.lstrip("#").strip() for t in tokens if t.type == tokenize.COMMENT}
    out = [Parameter(node.targets[0].id, ast.literal_eval(node.value), comments.get(node.lineno, ""))
           for node in ast.parse(src).body
           if isinstance(node, ast.Assign) and [type(t) for t in node.targets] == [ast.Name]]
    # the run settings of the cell, then the chapter's own parameters, cache_dir last
    own = [Parameter(name, None, entry["help"]) for name, entry in (declared(path) or {}).items()
           if name not in {p.name for p in out}]
    return [p for p in out if p.name != "cache_dir"] + own + [p for p in out if p.name == "cache_dir"]


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
    def value(p, prof, values):
        if p.name == "profile":
            return prof
        return values.get(p.name) if p.default is None else p.default

    table = profiles(path)
    return [{"name": p.name, **{prof: value(p, prof, values) for prof, values in table.items()},
             "comment": p.comment} for p in parameters(path)]


# Keys of a front-matter entry that are not profiles.
_META = ("help", "range", "choices", "cost")
# What a value may be, beyond the type of the profile's value (see check_values): a chapter declares
# its own parameters' ranges and choices in its front matter (``range:``, ``choices:``); these are the
# run settings every chapter shares. Numbers with no range must be > 0.
# name: (low, high, low included, high included); None: unbounded on that side
RANGES = {
    "seed": (0, 2**63 - 1, True, True),
}
_DEFAULT_RANGE = (0, None, False, True)


def _interval(text) -> tuple:
    """``"[a, b)"`` -> ``(a, b, True, False)``; ``inf`` (or ``-inf``) leaves a side unbounded (None)."""
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
_WORDS = {bool: "True or False", int: "an integer", float: "a number", str: "a string", list: "a list"}


def _check_scalar(name, value, ref, rules: dict):
    """Why ``value`` (or an element of a list) is not allowed where ``ref`` is the profile's value;
    ``None`` when it is."""
    kind = type(ref)
    number = kind in (int, float)
    allowed = (int, float) if kind is float else kind
    if isinstance(value, bool) and kind is not bool or not isinstance(value, allowed):
        return f"must be {_WORDS.get(kind, kind.__name__)} (like {ref!r})"
    if kind is str and name == "device" and not re.fullmatch(_DEVICE, value):
        return "must be 'cpu', 'auto', 'cuda' or 'cuda:K'"
    if number and not math.isfinite(value):
        return "must be finite"
    if rules.get("choices") and value not in rules["choices"]:
        return f"must be one of {', '.join(repr(c) for c in rules['choices'])}"
    if number:
        lo, hi, lo_in, hi_in = _interval(rules["range"]) if "range" in rules else RANGES.get(name, _DEFAULT_RANGE)
        if lo is not None and (value < lo or (value == lo and not lo_in)):
            return f"must be {'>=' if lo_in else '>'} {lo}"
        if hi is not None and (value > hi or (value == hi and not hi_in)):
            return f"must be {'<=' if hi_in else '<'} {hi}"
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
    defaults = {p.name: p.default for p in parameters(path)}
    table = profiles(path)
    rules = declared(path) or {}
    unknown = sorted(set(values) - set(defaults))
    if unknown:
        raise ValueError(f"unknown parameter(s) {', '.join(unknown)}; {Path(path).stem} takes: {', '.join(defaults)}")
    profile = values.get("profile", defaults.get("profile"))
    if profile not in table:
        raise ValueError(f"profile = {profile!r}: must be one of {', '.join(repr(k) for k in table)}")
    out = {}
    for name, default in defaults.items():
        ref = table[profile].get(name) if default is None else default
        value = values.get(name, default)
        value = ref if value is None and default is None else value
        rule = rules.get(name, {})
        if name == "profile":
            value, why = profile, None
        elif name == "cache_dir":
            why = None if value is None or isinstance(value, str) else "must be a folder's path (a string) or None"
        elif isinstance(ref, (list, tuple)):
            if not isinstance(value, (list, tuple)) or not value:
                why = f"must be a non-empty list (like {list(ref)!r})"
            else:
                why = next((f"every element {w}" for v in value if (w := _check_scalar(name, v, ref[0], rule))), None)
        else:
            why = None if ref is None else _check_scalar(name, value, ref, rule)
        if why:
            raise ValueError(f"{name} = {value!r}: {why}")
        out[name] = list(value) if isinstance(value, tuple) else value
    return out


def _cost_value(v, c) -> float:
    """The work a value stands for under the cost exponent ``c``: ``v**c`` for a number, the sum over
    a list's elements (its length for ``c = 0`` or a list of strings), 1 for anything else."""
    if isinstance(v, (list, tuple)):
        return float(sum(_cost_value(x, c) for x in v))
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
        return float(v) ** c
    return 1.0


def _reads(node, names: set, fns: dict) -> set:
    """The parameters of ``names`` that ``node`` reads (``cfg.NAME`` or the bare name), with those of
    every function of ``fns`` (defined before) that it calls or hands on."""
    got = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "cfg":
            got.add(n.attr)
        elif isinstance(n, ast.Name):
            got |= fns.get(n.id, {n.id})
    return got & names


_BODIES = ("body", "orelse", "handlers", "finalbody")


def _work(stmts: list, factor: dict, fns: dict) -> float:
    """How much the work of the statements ``stmts`` grows, ``factor[name]`` being the growth of one
    parameter. A statement grows as the product of the growths of the parameters it reads
    (:func:`_reads`); a loop (or any compound statement) as those its head reads times its body;
    statements one after the other as the fastest-growing of them (the committed time does not say
    how they shared it). A function's definition costs nothing: ``fns`` keeps what it reads, for
    the statements that call it."""
    works = []
    for node in stmts:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fns[node.name] = _reads(node, set(factor), fns)
            continue
        inner = [s for f in _BODIES for s in getattr(node, f, [])]
        head = [v for f, v in ast.iter_fields(node) if f not in _BODIES and isinstance(v, ast.AST)]
        read = set().union(*(_reads(v, set(factor), fns) for v in (head if inner else [node])))
        works.append(math.prod(factor[n] for n in read) * _work(inner, factor, fns))
    return max(works, default=1.0)


def recorded(notebook) -> dict:
    """What ``run CH --inplace`` recorded in the notebook's metadata (``mfattn``), or ``{}``: the run's
    provenance, its time per code cell (``cell_seconds``, which :func:`estimate` reads) and peak memory."""
    try:
        return json.loads(Path(notebook).read_text())["metadata"].get("mfattn", {})
    except (OSError, ValueError, KeyError):
        return {}


def estimate(path, config: dict, notebook=None) -> tuple[float, list[tuple[float, str]], list[float]] | None:
    """The chapter's own cost model: the seconds a run with ``config`` should take on the machine of
    the committed ci run, from that run's time per code cell.

    Each parameter of the front matter may declare ``cost: c``, the exponent of its work (1: work
    grows as the value, as for a number of heads or seeds; -1: as its inverse, as for a step; 2:
    as its square, as for pairs of tokens; 0 or absent: no effect; a list counts as the sum over its
    elements). With ``g(new) / g(ci)`` (:func:`_cost_value`) the growth of one parameter, a code
    cell's work grows as the product of the growths of the parameters it reads (``cfg.NAME`` or the
    bare name, in its own statements or in the functions it calls, defined in an earlier cell; a
    function's definition costs nothing), times the largest growth among the sizes the prologue
    reads (the data every later cell computes on, counted once); the estimate adds the cells'
    committed times (the notebook's ``mfattn.cell_seconds``) times their growth.

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
        progress bar). ``None`` when the committed run recorded no cell times, or the chapter
        declares no cost.

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
    path = Path(path)
    secs = recorded(notebook or path.with_suffix(".ipynb")).get("cell_seconds")
    if not secs:
        return None
    sources = [c.source for c in chapter_cells(path) if c.cell_type == "code"]
    table = declared(path) or {}
    if len(secs) != len(sources) or not any("cost" in e for e in table.values()):
        return None  # no time per cell, or the chapter declares no cost model
    base, factor = check_values(path, {}), {}
    for name, entry in table.items():
        c = entry.get("cost", 0)
        b = _cost_value(base[name], c)
        factor[name] = _cost_value(config.get(name, base[name]), c) / b if c and b > 0 else 1.0
    # the data the prologue builds (the sizes it reads) weigh on every later cell, once; a chapter with
    # several datasets uses one at a time, so the largest growth among them
    pro = next((i for i, src in enumerate(sources) if "setup(" in src), None)
    sizes = _reads(ast.parse(sources[pro]), set(factor), {}) if pro is not None else set()
    data = max([factor[n] for n in sizes], default=1.0)
    rest = {n: 1.0 if n in sizes else g for n, g in factor.items()}
    fns, basis, cells = {}, [], []
    for i, (t, src) in enumerate(zip(secs, sources)):
        try:
            body = ast.parse(src).body
        except SyntaxError:
            body = []
        g = _work(body, rest, fns)
        f = data if i == pro else g * (data if pro is not None and i > pro else 1.0)
        cells.append(t * f)
        first = next((ln.strip() for ln in src.splitlines() if ln.strip() and not ln.lstrip().startswith(("#", ":"))), "")
        basis.append((t * f, f"cell {i + 1} ({first[:48]}): {t:g} s x {f:.3g}"))
    return sum(cells), sorted(basis, key=lambda x: -x[0]), cells


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
        return max((x for x in (v if isinstance(v, (list, tuple)) else [v])
                    if isinstance(x, (int, float)) and not isinstance(x, bool)), default=None)

    sizes = [(name, big(values.get(name)), big(b)) for name, b in base.items()]
    ratios = [(max(a / b, b / a) if shrink else a / b, name, a, b) for name, a, b in sizes
              if a is not None and b is not None and a > 0 and b > 0]
    # the first of the largest ratios above 1
    return max((r for r in ratios if r[0] > 1.0), key=lambda r: r[0], default=(1.0, "", 0.0, 0.0))


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
    headings = (line[2:].strip() for cell in chapter_cells(path) if cell.cell_type == "markdown"
                for line in cell.source.splitlines() if line.startswith("# "))
    return next(headings, Path(path).stem)
