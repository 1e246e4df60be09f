"""notebooks/conftest.py: nbval collects the longest chapter first and keeps each notebook's cells in order."""

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

from mfattn.companion.runner import ci_seconds

ROOT = Path(__file__).resolve().parents[1]


def load_conftest():
    spec = importlib.util.spec_from_file_location("notebooks_conftest", ROOT / "notebooks" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def notebook(path, seconds):
    meta = {} if seconds is None else {"mfattn": {"ci_seconds": seconds}}
    path.write_text(json.dumps({"cells": [], "metadata": meta, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_longest_first_cells_in_order_unrecorded_last(tmp_path):
    a = notebook(tmp_path / "01-a.ipynb", 30)
    b = notebook(tmp_path / "02-b.ipynb", 400)
    c = notebook(tmp_path / "03-c.ipynb", None)  # no recorded time
    d = notebook(tmp_path / "04-d.ipynb", 120)
    items = [SimpleNamespace(path=p, cell=k) for p in (a, b, c, d) for k in range(3)]
    load_conftest().pytest_collection_modifyitems(items)
    assert [(i.path.name, i.cell) for i in items] == [
        (p.name, k) for p in (b, d, a, c) for k in range(3)]


def test_the_committed_chapters_all_recorded_a_time():
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb")):
        assert (ci_seconds(nb) or 0) > 0, nb.name
