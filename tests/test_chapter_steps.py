"""The chapters' step inventories (tools/chapter_steps.py, tools/steps/chNN.py), from which the device check
estimates each chapter's paper profile: every chapter has one, and at both profiles each entry is a
step the chapter takes a positive, finite number of times. The entries are built and timed in
tests/test_triton.py::test_device_check_dry_run (chapter 04 at its ci sizes) and by the command itself."""

import importlib.util
import json
import math

import pytest
import torch

from mfattn.companion.chapters import chapters, find_chapter, profiles, recorded, repo_root

ROOT = repo_root()


def _tool():
    spec = importlib.util.spec_from_file_location("chapter_steps", ROOT / "tools" / "chapter_steps.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_chapter_has_an_inventory():
    assert sorted(_tool().inventories()) == sorted(name[:2] for name in chapters(ROOT))


@pytest.mark.parametrize("profile", ["ci", "paper"])
def test_entries_count_steps_the_chapter_takes(profile):
    tool = _tool()
    for ch, inventory in tool.inventories().items():
        src = find_chapter(ROOT, ch)
        p = dict(profiles(src)[profile], seed=0, device="cpu", profile=profile)
        entries = inventory(p, torch.device("cpu"))
        assert entries, ch
        whats = [e["what"] for e in entries]
        assert len(set(whats)) == len(whats), (ch, whats)
        for e in entries:
            assert callable(e["make"]), (ch, e["what"])
            assert math.isfinite(e["count"]) and e["count"] > 0, (ch, e["what"], e["count"])


def test_the_estimate_adds_count_times_step(monkeypatch):
    """run(): each row's seconds is its count times the median of its timed calls, the chapter's estimate
    their sum; a step not started by the deadline, or one that fails, is listed, not timed."""
    tool = _tool()
    calls = []

    def inventory(p, device):
        return [{"what": "a", "count": 3.0, "make": lambda: (lambda: calls.append("a"))},
                {"what": "b", "count": 5.0, "make": lambda: (lambda: calls.append("b"))}]

    monkeypatch.setattr(tool, "inventories", lambda: {"04": inventory})
    times = iter([0.1, 0.3, 0.2, 0.2, 0.2])
    monkeypatch.setattr(tool, "time_step", lambda fn, device, reps: (fn(), next(times))[1])
    res = tool.run(["04"], "ci", torch.device("cpu"), reps=3)
    e = res["chapters"]["04"]
    assert [r["seconds"] for r in e["rows"]] == pytest.approx([0.3, 1.5])
    assert e["estimate_s"] == pytest.approx(1.8) and e["skipped"] == [] and calls == ["a", "b"]
    res = tool.run(["04"], "ci", torch.device("cpu"), deadline=0.0)
    assert res["chapters"]["04"]["rows"] == [] and len(res["chapters"]["04"]["skipped"]) == 2
    committed = tool.fmt(recorded(find_chapter(ROOT, "04").with_suffix(".ipynb"))["ci_seconds"])
    assert tool.table(res).splitlines()[-2].endswith(f"| 0 | >= 0 s | {committed} | 0.00 | 2 |")
    # a step that cannot be built (a module missing on the device, a size too large for it) is listed with its
    # error and the next one runs; so is an inventory that cannot load
    broken = [{"what": "c", "count": 1.0, "make": lambda: 1 / 0}, *inventory(None, None)]
    monkeypatch.setattr(tool, "inventories", lambda: {"04": lambda p, device: broken,
                                                       "05": tool.functools.partial(tool._unavailable, ImportError("ot"))})
    res = tool.run(["04", "05"], "ci", torch.device("cpu"))
    assert res["chapters"]["04"]["skipped"] == ["c: ZeroDivisionError: division by zero"]
    assert [r["what"] for r in res["chapters"]["04"]["rows"]] == ["a", "b"]
    assert res["chapters"]["05"]["skipped"] == ["the inventory: ImportError: ot"]


def test_slices_merge_and_untimed_steps_make_a_lower_bound(monkeypatch):
    """merge(): the chapters of several runs, a chapter run again taken from the later run; runs of another
    device refused. A chapter with steps not timed (out of time, failed, or pending in a run that was
    stopped from outside) shows its sum as a lower bound, and so does the total."""
    tool = _tool()

    def result(device, **chapters):
        return {"profile": "paper", "device": device, "threads": 2, "reps": 1,
                "chapters": {ch: {"name": name, "ci_seconds": None, "rows": [{}] * len(rows), "skipped": skipped,
                                  "estimate_s": float(sum(rows))} for ch, (name, rows, skipped) in chapters.items()}}

    a = result("cuda", **{"05": ("05-stability", [3, 2], ["x: out of time"]), "04": ("04-long-time", [10], [])})
    b = result("cuda", **{"04": ("04-long-time", [20, 30], [])})
    m = tool.merge([a, b])
    assert list(m["chapters"]) == ["04", "05"] and m["chapters"]["04"]["estimate_s"] == 50.0
    lines = tool.table(m).splitlines()
    assert lines[-3] == f"| 04-long-time | 2 | {tool.fmt(50.0)} | 0 |"
    assert lines[-2] == f"| 05-stability | 2 | >= {tool.fmt(5.0)} | 1 |"
    assert lines[-1] == f"| all | 4 | >= {tool.fmt(55.0)} | 1 |"
    assert "cost model" not in tool.table(m)  # a GPU's steps: the cost model's CPU figure is no match
    with pytest.raises(ValueError, match="results"):
        tool.merge([a, result("cpu")])
    with pytest.raises(ValueError, match="results"):
        tool.merge([])
    # a run stopped during a step (the device check's time limit) leaves that step and the rest pending
    snapshots = []

    def inventory(p, device):
        return [{"what": w, "count": 1.0, "make": lambda: (lambda: None)} for w in ("a", "b")]

    monkeypatch.setattr(tool, "inventories", lambda: {"04": inventory})
    monkeypatch.setattr(tool, "time_step", lambda fn, device, reps: 2.0)
    res = tool.run(["04"], "paper", torch.device("cpu"), save=lambda r: snapshots.append(json.loads(json.dumps(r))))
    assert [s["chapters"]["04"].get("pending") for s in snapshots] == [["a", "b"], ["b"], None]
    assert "pending" not in res["chapters"]["04"] and res["chapters"]["04"]["estimate_s"] == 4.0
    stopped = dict(snapshots[1], device="cuda")  # killed while timing b: a timed, b pending
    assert tool.table(stopped).splitlines()[-2] == f"| 04-long-time | 1 | >= {tool.fmt(2.0)} | 1 |"


def test_a_parameter_changed_from_the_profile_is_timed_and_named(monkeypatch, capsys):
    """-p NAME VALUE: the inventory gets the profile's values with that one changed (checked as the runner
    checks it), the table says which, and runs of other values do not merge; a bad value or name, or
    several chapters, stop the command before anything is timed."""
    tool = _tool()
    seen = []

    def inventory(p, device):
        seen.append(p)
        return [{"what": "a", "count": 2.0, "make": lambda: (lambda: None)}]

    monkeypatch.setattr(tool, "inventories", lambda: {"04": inventory})
    monkeypatch.setattr(tool, "time_step", lambda fn, device, reps: 1.5)
    paper = profiles(find_chapter(ROOT, "04"))["paper"]
    res = tool.run(["04"], "paper", torch.device("cpu"), values={"n_data": 2 * paper["n_data"]})
    assert seen[0]["n_data"] == 2 * paper["n_data"] and seen[0]["n_particles"] == paper["n_particles"]
    assert res["values"] == {"n_data": 2 * paper["n_data"]} and res["chapters"]["04"]["estimate_s"] == 3.0
    assert f"(paper profile, n_data = {2 * paper['n_data']}, cpu" in tool.table(res)
    own = tool.run(["04"], "paper", torch.device("cpu"))
    assert seen[1] == dict(paper, seed=0, device="cpu", profile="paper") and "values" not in own
    with pytest.raises(ValueError, match="results"):
        tool.merge([res, own])
    assert tool.merge([res, res])["values"] == res["values"]
    for argv, says in [(["--chapters", "04", "-p", "n_data", "-3"], "n_data = -3"),
                       (["--chapters", "04", "-p", "n_dataa", "3"], "unknown parameter"),
                       (["--chapters", "04,05", "-p", "n_data", "3"], "one chapter")]:
        with pytest.raises(SystemExit) as stop:
            tool.main(["--profile", "paper", *argv])
        assert stop.value.code == 2 and says in capsys.readouterr().err
    assert len(seen) == 2  # nothing was timed


def test_inventories_load_without_the_book_s_packages():
    """The GPU image the device check runs on has torch, triton, numpy, scipy, matplotlib, numba and
    PyYAML, but not POT, jupytext, nbformat or papermill: every inventory, and each chapter's profiles,
    must load without them (POT is imported only by the Wasserstein distance that needs it)."""
    code = (
        "import sys\n"
        "for m in ('ot', 'jupytext', 'nbformat', 'papermill'): sys.modules[m] = None\n"
        "import importlib.util, functools\n"
        f"spec = importlib.util.spec_from_file_location('cs', {str(ROOT / 'tools' / 'chapter_steps.py')!r})\n"
        "cs = importlib.util.module_from_spec(spec); spec.loader.exec_module(cs)\n"
        "from mfattn.companion.chapters import find_chapter, profiles\n"
        "inv = cs.inventories()\n"
        "bad = [c for c, f in inv.items() if isinstance(f, functools.partial)]\n"
        "[profiles(find_chapter(cs.ROOT, c)) for c in inv]\n"
        "print(len(inv), bad)\n")
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == [str(len(chapters(ROOT))), "[]"], out.stdout
