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
    """The parameters of the chapter at ``path``, in the order of its parameters cell."""
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
    from the chapter."""
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
    cell sets one), and its comment."""
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
