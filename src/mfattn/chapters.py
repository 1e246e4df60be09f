"""What a chapter takes: its parameters cell and its profiles, read from the chapter's source.

A chapter (``notebooks/NN-name.md``) has one code cell tagged ``parameters`` (papermill's
convention) with one ``name = value  # comment`` line per parameter, and a ``PROFILES`` table that
fills the parameters left at ``None`` (:func:`mfattn.book.resolve_profile`). This module reads
both with Python's ``ast`` and ``tokenize``, without executing the chapter, for
``python -m mfattn params CHAPTER`` and for the parameter table each chapter shows.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Parameter", "parameter_rows", "parameters", "profiles"]


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
    >>> from mfattn.chapters import Parameter
    >>> p = Parameter("seed", 0, "seeds every random draw of the chapter")
    >>> p.name, p.default
    ('seed', 0)
    """

    name: str
    default: object  # the value in the parameters cell (None: taken from the profile)
    comment: str  # the line's comment: what the parameter is


def _cells(path: Path):
    import jupytext

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: {path} is not a chapter source")
    return jupytext.read(path).cells


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
    >>> from mfattn.chapters import parameters
    >>> params = parameters(chapter)
    >>> params[0].name
    'profile'
    >>> all(isinstance(p.comment, str) for p in params)
    True
    """
    cells = [c for c in _cells(path) if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]
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
    return out


def profiles(path) -> dict[str, dict]:
    """The chapter's ``PROFILES`` table: ``{profile: {parameter: value}}``. The assignment is evaluated
    on its own, with arithmetic and a few builtins (``dict``, ``range``, ``min``, ...), no names
    from the chapter.

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
        If ``path`` is not a file or has no ``PROFILES = ...`` assignment in a code cell.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> root = pathlib.Path(mfattn.__file__).resolve().parents[2]
    >>> chapter = root / "notebooks" / "05-stability.md"
    >>> from mfattn.chapters import profiles
    >>> table = profiles(chapter)
    >>> sorted(table)
    ['ci', 'paper']
    """
    for cell in _cells(path):
        if cell.cell_type != "code":
            continue
        for node in ast.parse(cell.source).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == "PROFILES"):
                expr = ast.Expression(node.value)
                safe = {f.__name__: f for f in (dict, list, tuple, range, len, min, max, abs, round, int, float, sum)}
                return eval(compile(expr, str(path), "eval"), {"__builtins__": safe})
    raise ValueError(f"path: {path} defines no PROFILES table")


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
    >>> from mfattn.chapters import parameter_rows
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
