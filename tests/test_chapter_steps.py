"""The chapters' step inventories (tools/chapter_steps.py, tools/steps/chNN.py), from which the device check
estimates each chapter's paper profile: every chapter has one, and at both profiles each entry is a
step the chapter takes a positive, finite number of times. The entries are built and timed in
tests/test_triton.py::test_device_check_dry_run (chapter 04 at its ci sizes) and by the command itself."""

import importlib.util
import math

import pytest
import torch

from mfattn.companion.chapters import chapters, find_chapter, profiles, repo_root

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
    their sum; a step not started by the deadline is listed, not timed."""
    tool = _tool()
    calls = []

    def inventory(p, device):
        return [{"what": "a", "count": 3.0, "make": lambda: (lambda: calls.append("a"))},
                {"what": "b", "count": 5.0, "make": lambda: (lambda: calls.append("b"))}]

    monkeypatch.setattr(tool, "inventories", lambda: {"04": inventory})
    times = iter([0.1, 0.3, 0.2])
    monkeypatch.setattr(tool, "time_step", lambda fn, device, reps: (fn(), next(times))[1])
    res = tool.run(["04"], "ci", torch.device("cpu"), reps=3)
    e = res["chapters"]["04"]
    assert [r["seconds"] for r in e["rows"]] == pytest.approx([0.3, 1.5])
    assert e["estimate_s"] == pytest.approx(1.8) and e["skipped"] == [] and calls == ["a", "b"]
    res = tool.run(["04"], "ci", torch.device("cpu"), deadline=0.0)
    assert res["chapters"]["04"]["rows"] == [] and len(res["chapters"]["04"]["skipped"]) == 2
    assert tool.table(res).splitlines()[-2].endswith("| 0 | 0 s | 25 s | 0.00 | 2 |")
