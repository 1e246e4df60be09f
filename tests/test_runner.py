"""Re-running a chapter as a user (mfattn.companion.runner): checked parameters, a cache keyed by the whole
configuration that resumes an interrupted run, Ctrl-C, terminal progress, HTML, compare.

The chapter here is a small one written for the test, in a checkout of its own, so that each
execution takes a second or two; its sweep records every point it computes in a log file, which is
the oracle of what was computed and what was loaded.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]

TOY = '''---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
mfattn-parameters:
  n_points: {ci: 6, paper: 600, help: points of the sweep}
  scale: {ci: 2.0, paper: 2.0, help: "a factor of every point's result"}
  delay: {ci: 0.05, paper: 0.05, help: seconds each point takes}
---

# A small chapter for the command line's tests

```{code-cell} ipython3
:tags: [parameters]

profile = "ci"          # "ci": small; "paper": larger (a comment may hold "=", e.g. a = b)
seed = 0                # seeds every random draw
fail = False            # raise in the sweep's cell
log = "calls.log"       # file recording each computed point
shape = (1, 2)          # a tuple, printed as the kernel receives it
weights = [1.0, 0.5]    # a list, printed as the kernel receives it
offset = 1.0            # 1 + what is added to the claim's measurement (2: a claim that fails)
cache_dir = None        # folder keeping finished work (python -m mfattn run sets one per configuration)
```

```{code-cell} ipython3
import tempfile, time
from myst_nb import glue
from mfattn.companion.book import check_close, report, setup
from mfattn.companion.sweep import run_sweep

cfg = setup("01", globals())
folder = cfg.folder

def point(i):
    time.sleep(cfg.delay)
    with open(log, "a") as f:
        f.write(f"{i}\\n")
    return {"y": cfg.scale * i}

if fail:
    raise ValueError("the sweep was told to fail")
res = run_sweep(point, [{"i": i} for i in range(cfg.n_points)], folder, desc="toy sweep")
total = sum(r["y"] for r in res)
glue("toy-total", f"{total:g}", display=False)
```

The sweep's points add up to {glue:text}`toy-total`.

```{code-cell} ipython3
print("received:", type(shape).__name__, shape, type(weights).__name__, weights)
```

```{code-cell} ipython3
report([check_close("the sum of the sweep", total, 2.0 * cfg.n_points * (cfg.n_points - 1) / 2, 1e-12,
                    kind="check", ref=()),
        check_close("the mean of the sweep's points", total / cfg.n_points + offset - 1.0, cfg.scale * (cfg.n_points - 1) / 2,
                    1e-9, kind="claim", ref=())])
```
'''


@pytest.fixture()
def toy(tmp_path):
    root = tmp_path / "checkout"
    (root / "notebooks").mkdir(parents=True)
    (root / "_toc.yml").write_text("format: jb-book\nroot: notebooks/01-toy\n")
    (root / "notebooks" / "01-toy.md").write_text(TOY)
    return root


def cli(root, *args, tmp=None, **kw):
    env = dict(os.environ, TQDM_DISABLE="1")  # as under make test: the terminal bars of mfattn run still show
    if tmp is not None:
        env["TMPDIR"] = str(tmp)
    return subprocess.run([sys.executable, "-m", "mfattn", *args], cwd=root, capture_output=True, text=True,
                          timeout=300, env=env, **kw)


def calls(root):
    path = root / "notebooks" / "calls.log"
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def test_interrupted_run_resumes_from_the_cache_and_a_changed_parameter_recomputes(toy):
    args = [sys.executable, "-m", "mfattn", "run", "01", "-p", "n_points", "40", "-p", "delay", "0.25"]
    proc = subprocess.Popen(args + ["--out", str(toy / "first")], cwd=toy, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while len(calls(toy)) < 3 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    t_int = time.time()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    stopped_in = time.time() - t_int
    assert proc.returncode == 130, err  # the shell's status for Ctrl-C
    assert "interrupted; partial notebook:" in err and "rerun the same command to resume" in err
    assert "Traceback" not in err
    assert stopped_in < 10, f"the command took {stopped_in:.1f} s to stop"
    done = calls(toy)
    time.sleep(1.0)
    assert calls(toy) == done, "the kernel went on computing after Ctrl-C"
    assert 3 <= len(done) < 40 and done == list(range(len(done)))
    assert (toy / "first" / "01-toy.ipynb").exists()  # the partial notebook is kept

    res = cli(toy, "run", "01", "-p", "n_points", "40", "-p", "delay", "0.25", "--out", str(toy / "second"))
    assert res.returncode == 0, res.stderr
    assert "runs stopped before their end went into this cache" in res.stderr  # saved work is not paid again
    again = calls(toy)[len(done):]
    assert sorted(again) == [i for i in range(40) if i not in done]  # finished points loaded, not recomputed
    executed = nbformat.read(toy / "second" / "01-toy.ipynb", as_version=4)
    text = "".join(json.dumps(c.get("outputs", [])) for c in executed.cells)
    assert "[PASS]" in text and str(2 * 40 * 39 // 2) in text

    n = len(calls(toy))
    res = cli(toy, "run", "01", "-p", "n_points", "40", "-p", "delay", "0.25", "-p", "scale", "2.5",
              "--out", str(toy / "third"), "--quiet")
    assert res.returncode == 0, res.stderr
    assert sorted(calls(toy)[n:]) == list(range(40))  # a changed parameter: every point recomputed
    folders = [p for p in (toy / "runs" / "01-toy" / "cache").iterdir()]
    assert len(folders) == 2
    configs = [json.loads((p / "config.json").read_text()) for p in folders]
    assert sorted(c["scale"] for c in configs) == [2.0, 2.5]


def test_the_cache_key_covers_every_parameter_and_the_code(toy, tmp_path):
    from mfattn.companion.chapters import check_values
    from mfattn.companion.runner import cache_key

    src = toy / "notebooks" / "01-toy.md"
    base = check_values(src, {})
    keys = {cache_key(src, base)}
    for name, value in [("seed", 1), ("n_points", 7), ("scale", 2.5), ("delay", 0.06), ("fail", True),
                        ("log", "other.log"), ("profile", "paper")]:
        keys.add(cache_key(src, check_values(src, {name: value})))
    assert len(keys) == 8
    assert cache_key(src, dict(base, cache_dir="/elsewhere")) == cache_key(src, base)
    edited = tmp_path / "01-toy.md"
    edited.write_text(TOY.replace("time.sleep(cfg.delay)", "time.sleep(cfg.delay + 0)"))
    assert cache_key(edited, base) != cache_key(src, base)  # a changed code cell
    prose = tmp_path / "prose" / "01-toy.md"
    prose.parent.mkdir()
    prose.write_text(TOY.replace("The sweep's points add up", "The points add up"))
    assert cache_key(prose, base) == cache_key(src, base)  # prose does not invalidate


def test_progress_goes_to_the_terminal_and_never_into_the_notebook(toy):
    # without recorded cell times: an overall bar over the chapter's cells
    res = cli(toy, "run", "01", "--out", str(toy / "first"), "-p", "delay", "0.3")
    assert res.returncode == 0, res.stderr
    assert "01-toy (all cells)" in res.stderr and "cell" in res.stderr
    # an --inplace run records every code cell's time; later runs weight the overall bar by them
    assert cli(toy, "run", "01", "--inplace", "--quiet").returncode == 0
    source_cells = sum(c.cell_type == "code" for c in __import__("jupytext").read(toy / "notebooks" / "01-toy.md").cells)
    secs = json.loads((toy / "notebooks" / "01-toy.ipynb").read_text())["metadata"]["mfattn"]["cell_seconds"]
    assert len(secs) == source_cells and all(t >= 0 for t in secs) and max(secs) >= 0.25  # the sweep's 6 x 0.05 s
    res = cli(toy, "run", "01", "--out", str(toy / "run"))
    assert res.returncode == 0, res.stderr
    assert "toy sweep" in res.stderr and "/6 [" in res.stderr  # a bar with the sweep's points
    assert "01-toy (all cells)" in res.stderr and "s of the estimate" in res.stderr
    executed = nbformat.read(toy / "run" / "01-toy.ipynb", as_version=4)
    streams = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "stream"]
    assert not [o for o in streams if o.get("name") == "stderr"] and "toy sweep" not in json.dumps(streams)
    # the kernel's sockets and the command's side files are gone
    assert sorted(p.name for p in (toy / "notebooks").iterdir()) == ["01-toy.ipynb", "01-toy.md", "calls.log"]
    assert sorted(p.name for p in (toy / "run").iterdir()) == ["01-toy.ipynb"]


def test_failing_cell_ends_in_one_line_with_the_cell_and_the_partial_notebook(toy):
    res = cli(toy, "run", "01", "-p", "fail", "True", "--out", str(toy / "bad"), "--quiet")
    assert res.returncode == 1
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "failed in cell [" in lines[0] and "ValueError: the sweep was told to fail" in lines[0]
    assert str(toy / "bad" / "01-toy.ipynb") in lines[0] and (toy / "bad" / "01-toy.ipynb").exists()


def test_memory_ceiling_and_a_completed_cache(toy):
    """--inplace records the kernel's peak memory; a run whose estimated peak exceeds half the
    machine's is refused in one line (unless --yes); a configuration that ran to its end from its
    cache is said to cost what its rerun costs, not the cost model's estimate."""
    nb = toy / "notebooks" / "01-toy.ipynb"
    assert cli(toy, "run", "01", "--inplace", "--quiet").returncode == 0
    meta = json.loads(nb.read_text())
    assert 20 < meta["metadata"]["mfattn"]["peak_rss_mb"] < 4096  # a Python kernel's, in MB
    meta["metadata"]["mfattn"]["peak_rss_mb"] = 10**8            # as if the ci run had held 100 TB
    nb.write_text(json.dumps(meta))
    res = cli(toy, "run", "01", "-p", "n_points", "7", "--out", "m1", "--quiet")
    assert res.returncode == 2 and "peak memory" in res.stderr and "n_points 7 (ci: 6)" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and not (toy / "m1").exists()
    assert cli(toy, "run", "01", "-p", "n_points", "7", "--out", "m1", "--quiet", "--yes").returncode == 0
    # the same configuration again: it ran to its end from this cache, so no ceiling and no estimate
    res = cli(toy, "run", "01", "-p", "n_points", "7", "--out", "m2")
    assert res.returncode == 0, res.stderr
    assert "ran to its end before from this cache" in res.stderr and "estimate on this CPU" not in res.stderr


def test_a_run_in_slices_through_cache_pack_and_restore(toy, tmp_path):
    """A configuration's finished work packed into an archive and restored on a fresh checkout of
    the same code is not computed again; an archive reaching outside runs/ is refused."""
    import shutil
    import tarfile

    assert cli(toy, "run", "01", "-p", "n_points", "5", "--out", "a", "--quiet").returncode == 0
    n = len(calls(toy))
    res = cli(toy, "cache", "pack", "01", "-p", "n_points", "5", "--out", str(tmp_path / "slice.tar.gz"))
    assert res.returncode == 0 and "packed" in res.stdout, res.stderr
    shutil.rmtree(toy / "runs")                      # a fresh machine: nothing finished
    res = cli(toy, "cache", "restore", str(tmp_path / "slice.tar.gz"))
    assert res.returncode == 0 and "restored" in res.stdout, res.stderr
    res = cli(toy, "run", "01", "-p", "n_points", "5", "--out", "b")
    assert res.returncode == 0 and len(calls(toy)) == n  # every point read back, none computed
    assert "ran to its end before from this cache" in res.stderr
    # nothing finished for another configuration; an archive with a path outside runs/CHAPTER/cache/
    assert cli(toy, "cache", "pack", "01", "-p", "n_points", "9", "--out", str(tmp_path / "x.tar.gz")).returncode == 2
    evil = tmp_path / "evil.tar.gz"
    (tmp_path / "payload").write_text("x")
    with tarfile.open(evil, "w:gz") as tar:
        tar.add(tmp_path / "payload", arcname="../outside.txt")
    res = cli(toy, "cache", "restore", str(evil))
    assert res.returncode == 2 and "outside runs/CHAPTER/cache/" in res.stderr and not (toy.parent / "outside.txt").exists()
    assert cli(toy, "cache", "restore", str(tmp_path / "none.tar.gz")).returncode == 2


def test_paper_profile_on_a_cpu_warns_with_an_estimate(toy):
    nb = toy / "notebooks" / "01-toy.ipynb"
    res = cli(toy, "run", "01", "--inplace", "--quiet")
    assert res.returncode == 0, res.stderr
    assert json.loads(nb.read_text())["metadata"]["mfattn"]["ci_seconds"] >= 0
    meta = json.loads(nb.read_text())
    meta["metadata"]["mfattn"]["ci_seconds"] = 30
    nb.write_text(json.dumps(meta))
    res = cli(toy, "run", "01", "--profile", "paper", "-p", "n_points", "3", "--out", str(toy / "p"), "--quiet")
    assert res.returncode == 0, res.stderr
    # the ci run's 30 s times the largest size ratio of the profiles, n_points 600 vs 6
    assert "sized for a GPU" in res.stderr and "at least 50m00" in res.stderr and "n_points 600 vs 6" in res.stderr


def test_html_of_a_run_renders_its_outputs_and_glue_without_executing(toy):
    res = cli(toy, "run", "01", "--out", str(toy / "run"), "--quiet")
    assert res.returncode == 0, res.stderr
    n = len(calls(toy))
    res = cli(toy, "html", str(toy / "run" / "01-toy.ipynb"))
    assert res.returncode == 0, res.stderr
    page = Path(res.stdout.strip().splitlines()[-1]).read_text()
    assert "The sweep" in page and "add up to" in page and ">30<" in page  # the glued figure
    assert len(calls(toy)) == n  # nothing re-executed
    # outside a runs/ folder the shared assets go to the checkout's runs/, never beside the input
    assert not (toy / "run" / ".html-static").exists() and (toy / "runs" / ".html-static").is_dir()
    # a file that is not an executed notebook is refused in one line
    (toy / "README.md").write_text("# toy\n")
    (toy / "broken.ipynb").write_text("{not json")
    for bad in ("README.md", "broken.ipynb"):
        res = cli(toy, "html", bad)
        assert res.returncode == 2 and "not an executed notebook" in res.stderr and "Traceback" not in res.stderr
    assert not (toy / ".html-static").exists()
    # a citation resolves to the references page built beside the chapter (it rendered as "[]")
    nb = nbformat.read(toy / "run" / "01-toy.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("As {cite:t}`mei2018meanfield` showed."))
    nbformat.write(nb, toy / "run" / "cited.ipynb")
    res = cli(toy, "html", str(toy / "run" / "cited.ipynb"))
    assert res.returncode == 0, res.stderr
    page = Path(res.stdout.strip().splitlines()[-1]).read_text()
    assert "Mei" in page and "references.html#id" in page and "[]" not in page


def test_html_pages_share_one_copy_of_the_theme_assets(toy):
    pages = []
    for name in ("a", "b"):
        out = toy / "runs" / "01-toy" / name
        assert cli(toy, "run", "01", "--out", str(out), "--quiet").returncode == 0
        res = cli(toy, "html", str(out / "01-toy.ipynb"))
        assert res.returncode == 0, res.stderr
        pages.append(Path(res.stdout.strip().splitlines()[-1]))
    links = [p.parent / "_static" for p in pages]
    assert all(link.is_symlink() for link in links)
    shared = {link.resolve() for link in links}
    assert len(shared) == 1 and next(iter(shared)).parent == (toy / "runs" / ".html-static").resolve()
    # what the page links to is there, through the link
    css = [m for m in __import__("re").findall(r'href="(_static/[^"?]+\.css)', pages[0].read_text())]
    assert css and all((pages[0].parent / c).is_file() for c in css)
    page_bytes = sum(f.stat().st_size for f in pages[0].parent.rglob("*") if f.is_file() and not f.is_symlink()
                     and "_static" not in f.relative_to(pages[0].parent).parts)
    assert page_bytes < 5e6  # the page's own files, without the shared assets (about 30 MB)
    # `runs` lists what runs/ holds; `clean` lists first, and removes with --yes only
    res = cli(toy, "runs")
    assert res.returncode == 0
    listed = {tuple(ln.split()[:3]) for ln in res.stdout.splitlines()[1:-1]}
    assert ("01-toy", "run", "2") in listed and ("-", "html-assets", "1") in listed and ("01-toy", "cache", "1") in listed
    res = cli(toy, "clean", "--runs")
    assert res.returncode == 0 and "nothing removed; add --yes" in res.stdout
    assert all(p.exists() for p in pages)
    res = cli(toy, "clean", "--runs", "--chapter", "01", "--yes")
    assert res.returncode == 0 and "removed 3 entries" in res.stdout, res.stdout
    assert not (toy / "runs" / "01-toy" / "a").exists() and not list((toy / "runs" / ".html-static").glob("*"))
    assert (toy / "runs" / "01-toy" / "cache").is_dir()  # caches were not selected
    assert cli(toy, "clean", "--older-than", "-1").returncode == 2
    # a folder that --out made under runs/ is listed as a chapter by `runs`, and `clean` takes it
    assert cli(toy, "run", "01", "--out", str(toy / "runs" / "my-run"), "--quiet").returncode == 0
    assert "my-run " in cli(toy, "runs").stdout
    res = cli(toy, "clean", "--chapter", "my-run", "--yes")
    assert res.returncode == 0 and "removed 1 entries" in res.stdout and not (toy / "runs" / "my-run").exists()
    assert cli(toy, "clean", "--chapter", "no-such").returncode == 2


def test_clean_takes_the_temporary_folders_of_ended_runs_and_earlier_versions_only(toy, tmp_path):
    import fcntl
    import time

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    folders = {name: tmp / name for name in ("mfattn-07-run-ended000", "mfattn-07-run-alive000", "mfattn-03-k2j4x9q1",
                                              "mfattn-03-recent01", "mfattn-kernel-abc", "mfattn-05-run-nolock00")}
    for f in folders.values():
        f.mkdir()
        (f / "point.json").write_bytes(b"x" * 1000)
    (folders["mfattn-07-run-ended000"] / ".alive").write_bytes(b"")  # a lock file nobody holds: its run ended
    held = open(folders["mfattn-07-run-alive000"] / ".alive", "wb")  # this process holds it: alive
    fcntl.flock(held, fcntl.LOCK_EX)
    day_ago = time.time() - 86400  # an earlier version's folder (no lock), unchanged for a day
    for f in (folders["mfattn-03-k2j4x9q1"], folders["mfattn-03-k2j4x9q1"] / "point.json"):
        os.utime(f, (day_ago, day_ago))
    going = {"mfattn-07-run-ended000", "mfattn-03-k2j4x9q1"}

    res = cli(toy, "runs", tmp=tmp)
    assert res.returncode == 0 and ("-", "temporary", "2") in {tuple(ln.split()[:3]) for ln in res.stdout.splitlines()}
    assert f"and {tmp} (temporary)" in res.stdout
    res = cli(toy, "clean", "--temporary", tmp=tmp)
    assert res.returncode == 0 and "2 entries" in res.stdout and all(f.exists() for f in folders.values())
    assert {Path(ln.split()[-1]).name for ln in res.stdout.splitlines() if ln.startswith("would remove")} == going
    res = cli(toy, "clean", "--caches", "--yes", tmp=tmp)  # another kind: the folders stay
    assert all(f.exists() for f in folders.values())
    res = cli(toy, "clean", "--temporary", "--yes", tmp=tmp)
    assert res.returncode == 0 and "removed 2 entries" in res.stdout
    assert {f.name for f in tmp.iterdir()} == set(folders) - going
    held.close()


def test_a_run_leaves_nothing_in_the_temporary_folder(toy, tmp_path):
    # the kernel's sockets and connection file, and the work of a run that keeps none (--no-cache)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    res = cli(toy, "run", "01", "--no-cache", "--out", str(toy / "out"), "--quiet", tmp=tmp)
    assert res.returncode == 0, res.stderr
    assert "received:" in (toy / "out" / "01-toy.ipynb").read_text()  # it ran through
    assert sorted(p.name for p in tmp.iterdir()) == []


def test_compare_prints_a_run_beside_the_committed_verdicts(toy):
    res = cli(toy, "run", "01", "--inplace", "--quiet")
    assert res.returncode == 0, res.stderr
    run = toy / "run"
    res = cli(toy, "run", "01", "--out", str(run), "--quiet")
    assert res.returncode == 0, res.stderr
    res = cli(toy, "compare", str(run))
    assert res.returncode == 0 and "0 of 2 verdicts changed status" in res.stdout, res.stdout + res.stderr
    nb = json.loads((run / "01-toy.ipynb").read_text())
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            for v in o.get("metadata", {}).get("mfattn", {}).get("verdicts", []):
                v["status"], v["measured"] = "FAIL", "31"
    (run / "01-toy.ipynb").write_text(json.dumps(nb))
    res = cli(toy, "compare", str(run))
    assert "2 of 2 verdicts changed status" in res.stdout and "<- status changed" in res.stdout
    lines = res.stdout.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.endswith("the sum of the sweep"))
    assert "PASS" in lines[i + 1] and "FAIL" in lines[i + 1] and "31" in lines[i + 1]
    # every claim in full, however long: wrapped, not cut
    nb = json.loads((run / "01-toy.ipynb").read_text())
    long = "a claim whose first seventy characters are the same as those of another claim, " * 2
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            for v in o.get("metadata", {}).get("mfattn", {}).get("verdicts", []):
                v["claim"] = long + v["claim"]
    (run / "01-toy.ipynb").write_text(json.dumps(nb))
    res = cli(toy, "compare", str(run))
    text = " ".join(ln.strip() for ln in res.stdout.splitlines())
    assert (long + "the sum of the sweep").strip() in text and (long + "the mean of").strip() in text
    claim_lines = [ln for ln in res.stdout.splitlines()[1:-1] if not ln.lstrip().startswith("committed:")]
    assert len(claim_lines) >= 4 and max(len(ln) for ln in claim_lines) <= 100


def test_run_ends_with_a_summary_and_exits_3_when_a_claim_fails(toy):
    res = cli(toy, "run", "01", "--out", str(toy / "ok"), "--quiet")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == "verdicts: 2 (claim 1 PASS; check 1 PASS)"
    res = cli(toy, "run", "01", "-p", "offset", "2.0", "--out", str(toy / "bad"), "--quiet")
    assert res.returncode == 3, res.stderr
    assert res.stdout.splitlines()[-1] == ("verdicts: 2 (claim 0 PASS, 1 FAIL; check 1 PASS); "
                                           "FAIL: [claim] the mean of the sweep's points")
    assert (toy / "bad" / "01-toy.ipynb").exists()  # the run is kept: a failed claim is a result
    # --fail-on new: a failure the committed notebook does not have exits 3, one it has exits 0
    committed = toy / "notebooks" / "01-toy.ipynb"
    shutil.copy(toy / "ok" / "01-toy.ipynb", committed)
    new = cli(toy, "run", "01", "-p", "offset", "2.0", "--out", str(toy / "bad2"), "--quiet", "--fail-on", "new")
    assert new.returncode == 3 and "new failures against the committed notebook" in new.stderr, new.stderr
    shutil.copy(toy / "bad" / "01-toy.ipynb", committed)
    same = cli(toy, "run", "01", "-p", "offset", "2.0", "--out", str(toy / "bad3"), "--quiet", "--fail-on", "new")
    assert same.returncode == 0, same.stderr


def test_usage_errors_exit_2_and_say_so_in_one_line(toy):
    (toy / "a-file").write_text("")
    for args in (["run", "99"], ["params", "99"], ["new", "Bad_Name"], ["run", "01", "-p", "n_points", "0"],
                 ["run", "01", "--timeout", "-1"], ["run", "01", "--timeout", "0"], ["run", "01", "--out", "a-file"],
                 ["run", "01", "--out", "a-file/below"], ["compare", "notebooks/01-toy.md"]):
        res = cli(toy, *args)
        assert res.returncode == 2, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("mfattn: "), res.stderr
    # a cache folder that cannot be written (a file in the way; a runs/ that is no folder): one line, exit 2
    (toy / "runs").write_text("")
    for args in (["run", "01", "-p", "cache_dir", "a-file/below", "--out", "o1"], ["run", "01", "--out", "o2"],
                 ["run", "01"]):
        res = cli(toy, *args, "--quiet")
        assert res.returncode == 2, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("mfattn: "), res.stderr
        assert "Traceback" not in res.stderr
    assert "cache_dir" in cli(toy, "run", "01", "--out", "o2", "--quiet").stderr
    (toy / "runs").unlink()
    res = cli(toy, "--help")
    assert "exit status:" in res.stdout and "130" in res.stdout and "3 " in res.stdout


def test_the_kernels_peak_is_read_before_it_is_stopped():
    """_kill reads a live process's high-water mark before it kills the process group: a child that
    has touched 150 MB reports at least that much, and is gone afterwards."""
    import subprocess
    import sys
    from types import SimpleNamespace

    from mfattn.companion.runner import _kill

    child = subprocess.Popen([sys.executable, "-c", "import sys, time; b = bytearray(150 << 20); "
                              "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        peak = _kill(SimpleNamespace(provisioner=SimpleNamespace(process=child)))
    finally:
        child.kill()
        child.wait()
    assert peak is not None and 150 <= peak < 1024, peak
    assert child.returncode is not None and child.returncode < 0  # killed, not left running
    assert _kill(SimpleNamespace(provisioner=SimpleNamespace(process=child))) is None  # already gone


def test_a_size_over_the_ceiling_is_refused_before_anything_runs(tmp_path):
    """A count with no ceiling (a billion draws) is refused at once, naming the parameter, before
    any folder is made or any kernel starts; the chapter's cost model gives the estimate."""
    root = Path(__file__).resolve().parents[1]
    t0 = time.perf_counter()
    res = cli(root, "run", "07", "-p", "n_draws", "1000000000", "--out", str(tmp_path / "out"), "--quiet")
    assert res.returncode == 2, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    # the memory ceiling or the time ceiling, whichever the committed run's records reach first
    assert ("ceiling" in last or "peak memory" in last) and "n_draws 1000000000 (ci: 400)" in last, last
    assert "--yes" in last, last
    assert not (tmp_path / "out").exists() and time.perf_counter() - t0 < 60


def test_import_mfattn_lists_its_modules_by_their_paths():
    code = ("import mfattn, pathlib; "
            "names = [f'{p.parent.name}.{p.stem}' for p in pathlib.Path(mfattn.__file__).parent.glob('*/*.py') "
            "if not p.stem.startswith('_')]; "
            "assert sorted(names) == sorted(mfattn.LAYOUT_OF.values()), names; "
            "import mfattn.flows.dynamics; print(mfattn.flows.dynamics.__name__)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == "mfattn.flows.dynamics", res.stderr


def test_the_run_receives_the_checked_values_with_their_types(toy):
    # papermill's own translator writes a tuple as a string; the run must get the tuple the check accepted
    proc = cli(toy, "run", "01", "-p", "shape", "(8, 16)", "-p", "weights", "[0.25, 2]", "--out", str(toy / "t"),
               "--quiet")
    assert proc.returncode == 0, proc.stderr
    nb = nbformat.read(toy / "t" / "01-toy.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "received: tuple (8, 16) list [0.25, 2]" in printed


def test_a_profile_s_own_sizes_are_estimated_from_the_committed_step_table(tmp_path, capsys):
    """step_table_estimate / the runner's estimate: a profile's own values (any seed) take the committed step
    table's figure, and the per-cell weights of the progress bar are scaled to it; other values, the ci
    profile or no table fall back to the cost model; a table with steps not timed is a lower bound, so the
    larger of it and the cost model counts."""
    from mfattn.companion import runner
    from mfattn.companion.chapters import check_values, estimate

    name = "03-static-approximation"
    (tmp_path / "notebooks").mkdir()
    for ext in (".md", ".ipynb"):
        shutil.copy(ROOT / "notebooks" / f"{name}{ext}", tmp_path / "notebooks" / f"{name}{ext}")
    src, committed = tmp_path / "notebooks" / f"{name}.md", tmp_path / "notebooks" / f"{name}.ipynb"
    paper = check_values(src, {"profile": "paper"})
    model = estimate(src, paper, committed)[0]
    assert runner.step_table_estimate(src, paper) is None  # no table
    table = tmp_path / "book" / "benchmarks" / "steps-paper-cpu.json"
    table.parent.mkdir(parents=True)

    def write(seconds, skipped=(), values=None, **extra):
        row = {"name": name, "rows": [], "skipped": list(skipped), "estimate_s": seconds, **extra}
        table.write_text(json.dumps({"profile": "paper", "device": "cpu", "chapters": {"03": row}}
                                    | ({"values": values} if values else {})))

    write(model / 7)
    assert runner.step_table_estimate(src, paper) == (model / 7, True, "steps-paper-cpu.json")
    assert runner.step_table_estimate(src, check_values(src, {"profile": "paper", "seed": 5}))[0] == model / 7
    assert runner.step_table_estimate(src, check_values(src, {"profile": "paper", "n_data": 63})) is None
    assert runner.step_table_estimate(src, check_values(src, {})) is None  # ci
    est, seconds, line = runner._estimate(src, paper, committed)
    assert seconds == pytest.approx(model / 7) and sum(est[2]) == pytest.approx(model / 7)
    assert line.startswith("about ") and "steps-paper-cpu.json" in line
    write(model / 7, skipped=["a step: out of time"])  # a lower bound below the cost model: the model counts
    est, seconds, line = runner._estimate(src, paper, committed)
    assert seconds == pytest.approx(model) and line.startswith("at least ")
    write(model * 3, pending=["a step"])  # a run stopped during a step: a lower bound above the model
    assert runner.step_table_estimate(src, paper)[1] is False
    est, seconds, line = runner._estimate(src, paper, committed)
    assert seconds == pytest.approx(model * 3)
    write(1e7, skipped=["a step: out of time"])  # over the ceiling: the refusal says it is a lower bound
    with pytest.raises(runner.UserError):
        runner._over_the_ceiling(src, paper, committed, *runner._estimate(src, paper, committed)[1:])
    assert "estimated at least 2777 h" in capsys.readouterr().err
    # another configuration: the cost model alone, as before
    other = check_values(src, {"profile": "paper", "n_data": 63})
    assert runner._estimate(src, other, committed)[1] == pytest.approx(estimate(src, other, committed)[0])
    # a table timed at changed values (tools/chapter_steps.py -p) stands for those values, not the profile's
    write(model / 5, values={"n_data": 63})
    assert runner.step_table_estimate(src, other) == (model / 5, True, "steps-paper-cpu.json")
    assert runner.step_table_estimate(src, paper) is None
