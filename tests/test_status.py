"""The book as the validated record: it renders the committed chapters without executing them, and
its status page, per-chapter box and claims download are built from what the runs recorded."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mfattn.companion.evidence import claims_json, collect, status_markdown
from mfattn.companion.runner import code_state, provenance

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb") if not p.name.startswith("."))


def test_the_book_renders_committed_notebooks_and_executes_none_of_them():
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    # the MyST sources are excluded, so each chapter's document is its executed .ipynb ...
    assert "notebooks/*.md" in cfg["exclude_patterns"] and "notebooks/*.ipynb" not in cfg["exclude_patterns"]
    # ... and no chapter is executed by the book (its own pages, one cell each, may be)
    assert "notebooks/*" in cfg["execute"]["exclude_patterns"]
    toc = (ROOT / "_toc.yml").read_text()
    assert "book/status" in toc and all(f"notebooks/{ch}" in toc for ch in CHAPTERS)


def _git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_provenance_names_the_commit_and_whether_the_code_differed(tmp_path):
    (tmp_path / "src" / "mfattn").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "src" / "mfattn" / "a.py").write_text("x = 1\n")
    (tmp_path / "notebooks" / "01-x.md").write_text("# x\n")
    (tmp_path / "README.md").write_text("r\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = _git(tmp_path, "rev-parse", "HEAD")
    src = tmp_path / "notebooks" / "01-x.md"
    p = provenance(src, 12.4, "ci")
    assert p["commit"] == head and p["dirty"] is False
    assert p["ci_seconds"] == 12 and p["profile"] == "ci"
    assert p["python"] == ".".join(map(str, sys.version_info[:3]))
    import numpy
    import torch

    assert p["torch"] == torch.__version__ and p["numpy"] == numpy.__version__
    assert p["isa"] == torch.backends.cpu.get_cpu_capability()
    json.dumps(p)  # stored in notebook metadata
    # a change elsewhere in the checkout is not a change of the code the chapter ran
    (tmp_path / "README.md").write_text("changed\n")
    assert provenance(src, 1, "ci")["dirty"] is False
    (tmp_path / "src" / "mfattn" / "a.py").write_text("x = 2\n")
    assert provenance(src, 1, "ci")["dirty"] is True
    _git(tmp_path, "checkout", "-q", "--", "src")
    src.write_text("# y\n")
    assert provenance(src, 1, "ci")["dirty"] is True
    # the state taken as a run started is what the record says, whatever the checkout holds at its end
    _git(tmp_path, "checkout", "-q", "--", "notebooks")
    start = code_state(src)
    (tmp_path / "src" / "mfattn" / "a.py").write_text("x = 3\n")
    assert provenance(src, 1, "ci", start)["dirty"] is False and provenance(src, 1, "ci")["dirty"] is True
    # outside a checkout: no commit, and no claim about it
    (tmp_path / "lone").mkdir()
    lone = tmp_path / "lone" / "02-y.md"
    lone.write_text("# y\n")
    q = provenance(lone, 1, "ci")
    if _git_root(lone.parent) is None:
        assert q["commit"] is None and q["dirty"] is None


def _git_root(path):
    r = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path, capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


@pytest.fixture(scope="module")
def records():
    return collect(ROOT)


def test_status_page_has_every_chapter_with_its_recorded_time_and_counts(records):
    page = status_markdown(ROOT, records)
    for ch in CHAPTERS:
        meta = json.loads((ROOT / "notebooks" / f"{ch}.ipynb").read_text())["metadata"]["mfattn"]
        s = int(meta["ci_seconds"])
        shown = f"{s} s" if s < 60 else f"{s // 60} min {s % 60:02d} s"
        row = next(line for line in page.splitlines() if line.startswith(f"| [{ch}]("))
        assert f"| {shown} |" in row, (ch, row)
        if meta.get("commit"):
            assert meta["commit"][:10] in row
        # the verdict counts, from the notebook's own records rather than through collect
        from mfattn.companion.runner import verdict_records

        mine = verdict_records(ROOT / "notebooks" / f"{ch}.ipynb")
        hyp = [v for v in mine if v["kind"] == "hypothesis"]
        counts_row = next(line for line in page.splitlines() if line.startswith(f"| {ch[:2]} |"))
        n_pass = sum(v["status"] == "PASS" for v in hyp)
        n_fail = len(hyp) - n_pass
        want = "none" if not hyp else f"{n_pass} PASS" + (f", {n_fail} FAIL" if n_fail else "")
        assert f"| {want} |" in counts_row, (want, counts_row)


def test_claims_download_holds_every_verdict_with_its_commit(records):
    doc = json.loads(claims_json(ROOT, records))
    assert doc["paper"] == "arXiv 2606.10469"
    from mfattn.companion.runner import verdict_records

    total = sum(len(verdict_records(ROOT / "notebooks" / f"{ch}.ipynb")) for ch in CHAPTERS)
    assert len(doc["verdicts"]) == total
    for v in doc["verdicts"]:
        meta = json.loads((ROOT / "notebooks" / f"{v['chapter']}.ipynb").read_text())["metadata"]["mfattn"]
        assert v["commit"] == meta.get("commit")
        assert {"kind", "claim", "measured", "predicted", "tolerance", "status", "ref"} <= set(v)


def test_chapter_box_counts_the_chapters_verdicts(records):
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    try:
        from mfattn_book import glance
    finally:
        sys.path.pop(0)
    for ch in CHAPTERS:
        box = glance(ch, records)
        mine = [r for r in records if r["chapter"] == ch]
        checks = [r for r in mine if r["group"] == "check"]
        n_pass = sum(r["status"] == "PASS" for r in checks)
        if checks:
            assert f"checks: {n_pass} PASS, {len(checks) - n_pass} FAIL" in box
        else:  # a group without verdicts is left out of the box (chapter 08 has no checks)
            assert "checks:" not in box
        assert f"<{ch}.ipynb>" in box and f"<{ch}.md>" in box
        assert (ROOT / "notebooks" / f"{ch}.md").exists()
