"""The chapter pipeline: source/notebook sync, parameters cells, and the `run` command."""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "notebooks").glob("*.md"))
TOC = (ROOT / "_toc.yml").read_text()


def test_there_are_chapters():
    assert SOURCES, "no notebooks/*.md"


@pytest.mark.parametrize("md", SOURCES, ids=lambda p: p.stem)
def test_committed_notebook_is_in_sync_with_its_source(md):
    """The committed .ipynb must be the executed form of the current .md (run `make execute`)."""
    nb_path = md.with_suffix(".ipynb")
    assert nb_path.exists(), f"{nb_path.name} missing: run make execute"
    # cell by cell: type, source and metadata (tags, figure captions); jupytext writes the YAML of a
    # cell's metadata in its own style, so the comparison is of the parsed content, not of the text
    source, executed = jupytext.read(md), jupytext.read(nb_path)

    def content(nb):
        skip = {"execution", "papermill", "ExecuteTime", "scrolled", "collapsed"}
        return [(c.cell_type, c.source, {k: v for k, v in c.metadata.items() if k not in skip and v != []})
                for c in nb.cells]

    assert content(executed) == content(source), f"{nb_path.name} is out of sync with {md.name}: run make execute"
    nb = nbformat.read(nb_path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code), "notebook has unexecuted cells"


@pytest.mark.parametrize("md", SOURCES, ids=lambda p: p.stem)
def test_chapter_has_parameters_profile_verdict_and_toc_entry(md):
    nb = jupytext.read(md)
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and 'profile = "ci"' in params[0].source
    assert "report(" in nb.cells[-1].source, "a chapter ends with its verdict cell"
    assert f"notebooks/{md.stem}" in TOC


def run_cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "mfattn", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_run_executes_with_overrides_and_writes_to_the_chosen_folder(tmp_path):
    tiny = dict(n_logits=20, n_points=2, n_directions=2, n_radii=3, n_smooth_seqs=4, n_heads=6, n_replicates=12,
                dim_max_order=1, dim_chains=2, dim_base_starts=1, dim_starts=0, dim_steps=3, seed=4)
    args = [x for k, v in tiny.items() for x in ("-p", k, str(v))]
    res = run_cli("run", "01", *args, "--out", str(tmp_path), "--quiet")
    # 3: the run finished and a claim failed (these sizes are far below the ci profile's)
    assert res.returncode in (0, 3), res.stderr[-3000:]
    assert res.stdout.splitlines()[-1].startswith("verdicts: ")
    out = nbformat.read(tmp_path / "01-preliminaries.ipynb", as_version=4)
    injected = [c for c in out.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and "n_heads = 6" in injected[0].source
    text = "".join(o.get("text", "") + "".join(o.get("data", {}).get("text/plain", ""))
                   for c in out.cells if c.cell_type == "code" for o in c.outputs)
    assert "n_heads = 6" in text and "n_replicates = 12" in text  # the overrides reached the run
    assert "verdicts:" in text


def test_run_rejects_unknown_parameters_and_protects_committed_notebooks(tmp_path):
    res = run_cli("run", "01-preliminaries", "-p", "no_such_parameter", "1", "--out", str(tmp_path))
    assert res.returncode != 0 and "unknown parameter" in res.stderr
    res = run_cli("run", "01-preliminaries", "--out", str(ROOT / "notebooks"))
    assert res.returncode != 0 and "--inplace" in res.stderr
    res = run_cli("run", "01-preliminaries", "--inplace", "-p", "seed", "1")
    assert res.returncode != 0 and "takes no" in res.stderr
    res = run_cli("run", "99-nothing")
    assert res.returncode == 2 and "chapters:" in res.stderr


def test_bad_values_end_in_one_line_before_a_kernel_starts(tmp_path):
    """A value of the wrong type or out of range, an unknown profile, CUDA where there is none: one
    line naming the parameter, the value and what is allowed; exit status 2; nothing executed."""
    import torch

    cases = [("n_heads", '"abc"', "n_heads = 'abc': must be an integer"), ("n_heads", "2.5", "n_heads = 2.5: must be an integer"),
             ("n_heads", "-3", "n_heads = -3: must be > 0"), ("profile", "nope", "profile = 'nope': must be one of 'ci', 'paper'"),
             ("seed", "-1", "seed = -1: must be >= 0"), ("task", "markow", "task = 'markow': must be one of"),
             ("n_logits", "nan", "n_logits = 'nan': must be an integer")]
    if not torch.cuda.is_available():
        cases.append(("device", "cuda", "device = 'cuda': this torch has no CUDA device"))
    for name, value, message in cases:
        res = run_cli("run", "01", "-p", name, value, "--out", str(tmp_path), "--quiet")
        assert res.returncode == 2, (name, value, res.stderr)
        assert res.stderr.strip() == "mfattn: " + res.stderr.strip()[8:] and len(res.stderr.strip().splitlines()) == 1
        assert message in res.stderr, (message, res.stderr)
    assert not list(tmp_path.glob("*.ipynb")), "a bad value must stop the command before anything runs"


@pytest.mark.parametrize("md", SOURCES, ids=lambda p: p.stem)
def test_parameters_read_without_running_agree_with_the_cell_executed(md):
    """mfattn.companion.chapters reads names and defaults with ast as Python itself does when it executes the
    parameters cell (any comment allowed, e.g. one containing "="), every parameter has a comment, and
    every parameter left at None is set by every profile and accepted by check_values. A chapter that
    declares its parameters in its front matter has them after the cell's run settings, each with its
    help, and no PROFILES table in its code."""
    from mfattn.companion.chapters import check_values, declared, parameter_rows, parameters, profiles

    ours = parameters(md)
    cell = next(c for c in jupytext.read(md).cells if "parameters" in c.metadata.get("tags", []))
    scope = {}
    exec(cell.source, {}, scope)
    front = declared(md) or {}
    assert [p.name for p in ours if p.name not in front] == list(scope)
    assert not set(front) & set(scope), "a parameter is declared twice"
    if front:
        assert "PROFILES" not in "".join(c.source for c in jupytext.read(md).cells if c.cell_type == "code")
    for p in ours:
        assert p.default == scope.get(p.name), p.name
        assert p.comment, f"{p.name}: no comment says what it is"
    table = profiles(md)
    assert set(table) == {"ci", "paper"}
    for p in ours:
        if p.default is None and p.name != "cache_dir":
            assert all(p.name in v for v in table.values()), f"{p.name} is None and no profile sets it"
    for prof, values in table.items():
        cfg = check_values(md, {"profile": prof, **{k: v for k, v in values.items() if k in scope}})
        assert cfg == check_values(md, {"profile": prof})
    rows = parameter_rows(md)
    assert [r["name"] for r in rows] == [p.name for p in ours]


def test_params_command_prints_each_profile_value():
    res = run_cli("params", "05")
    assert res.returncode == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("n_data "))
    assert line.split()[1:3] == ["64", "256"] and "sequences of the teacher task" in line


def test_new_chapter_from_the_template_runs_and_builds(tmp_path):
    """`mfattn new` makes a chapter that lists itself in the table of contents, has a parameters cell,
    parameters declared in its front matter and a verdict, executes with `mfattn run`, and builds as a page of the book."""
    import shutil

    root = tmp_path / "book"
    (root / "notebooks").mkdir(parents=True)
    shutil.copy(ROOT / "_toc.yml", root / "_toc.yml")
    res = subprocess.run([sys.executable, "-m", "mfattn", "new", "demo-check", "--title", "A demo"], cwd=root,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    md = root / "notebooks" / "01-demo-check.md"
    # not listed yet: a chapter without its executed notebook would break `make book`
    assert md.exists() and "notebooks/01-demo-check" not in (root / "_toc.yml").read_text()
    assert "runs/" in res.stdout and "--inplace" in res.stdout and "make execute" not in res.stdout
    nb = jupytext.read(md)
    assert [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert "mfattn-parameters:" in md.read_text() and "setup(" in md.read_text() and "report(" in nb.cells[-1].source
    res = subprocess.run([sys.executable, "-m", "mfattn", "new", "demo-check"], cwd=root, capture_output=True, text=True)
    assert res.returncode != 0 and "exists" in res.stderr
    # executed into its committed notebook, which is what the book renders (it executes no chapter)
    res = subprocess.run([sys.executable, "-m", "mfattn", "run", "01", "--inplace", "--quiet"], cwd=root,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    executed = nbformat.read(root / "notebooks" / "01-demo-check.ipynb", as_version=4)
    assert executed.metadata["mfattn"]["profile"] == "ci" and executed.metadata["mfattn"]["ci_seconds"] >= 0
    toc = (root / "_toc.yml").read_text()
    assert toc.count("- file: notebooks/01-demo-check\n") == 1 and "listed notebooks/01-demo-check" in res.stdout
    text = "".join(o.get("text", "") + "".join(o.get("data", {}).get("text/plain", ""))
                   for c in executed.cells if c.cell_type == "code" for o in c.outputs)
    assert "[PASS] (claim; Thm 6.1)" in text
    # the page builds with the book's configuration (its own execution, references, figure number)
    for name in ("_config.yml", "_static"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / name)
    shutil.copytree(ROOT / "book", root / "book", ignore=shutil.ignore_patterns("benchmarks"))
    (root / "_toc.yml").write_text("format: jb-book\nroot: notebooks/01-demo-check\nchapters:\n"
                                   "  - file: book/references\n")
    jb = Path(sys.executable).parent / "jupyter-book"
    res = subprocess.run([str(jb), "build", str(root), "-W", "-n", "--keep-going"], capture_output=True, text=True)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    page = (root / "_build" / "html" / "notebooks" / "01-demo-check.html").read_text()
    assert "A demo" in page and "Fig. 1" in page


def test_list_names_the_chapters_with_titles_and_run_times():
    from mfattn.companion.runner import fmt_seconds, ci_seconds

    res = run_cli("list")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    for md in SOURCES:
        line = next(ln for ln in lines if ln.startswith(md.stem + " "))
        title = next(ln[2:] for ln in md.read_text().splitlines() if ln.startswith("# "))
        assert line.endswith(title)
        sec = ci_seconds(md.with_suffix(".ipynb"))
        assert line.split()[1] == "-" if sec is None else f" {fmt_seconds(sec)} " in line
    assert "run CH --inplace" in res.stdout


@pytest.mark.parametrize("md", SOURCES, ids=lambda p: p.stem)
def test_cache_key_changes_with_every_parameter_of_the_chapter(md):
    """A cache folder stands for one configuration: changing any single parameter of the chapter
    (ch02's ref_step once was left out of its keys) gives another folder."""
    from mfattn.companion.chapters import check_values, declared
    from mfattn.companion.runner import cache_key

    base = check_values(md, {})
    keys = {cache_key(md, base): "defaults"}
    for name, value in base.items():
        if name in ("cache_dir", "profile"):
            continue
        if name == "device":
            other = "cuda" if value == "cpu" else "cpu"
        elif isinstance(value, bool):
            other = not value
        elif isinstance(value, (int, float)):
            other = value + 1 if isinstance(value, int) else value * 0.75
        elif isinstance(value, list):
            other = value[:-1] if len(value) > 1 else value * 2
        else:
            choices = (declared(md) or {}).get(name, {}).get("choices") or [value + "x"]
            other = next(c for c in choices if c != value)
        key = cache_key(md, dict(base, **{name: other}))
        assert key not in keys, f"{name} = {other!r} gives the cache folder of {keys.get(key)}"
        keys[key] = name
    other_profile = check_values(md, {"profile": "paper"})
    assert cache_key(md, other_profile) not in keys


@pytest.mark.parametrize("md", SOURCES, ids=lambda p: p.stem)
def test_prose_quotes_only_glued_figures_the_run_recorded(md):
    """Every {glue:...}`key` in a chapter's prose is a figure its committed run glued (myst-nb renders an
    unknown key as a warning, which fails make book only after a rebuild), and the run holds no progress
    bar: those go to the terminal of `mfattn run`, never into the notebook. A chapter keeps its finished
    work under the `cache_dir` parameter."""
    import re

    source = md.read_text()
    used = set(re.findall(r"\{glue(?::\w+)?\}`([^`<]+)`", source))
    nb = nbformat.read(md.with_suffix(".ipynb"), as_version=4)
    glued, bars = set(), []
    for c in nb.cells:
        for o in c.get("outputs", []):
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                glued.add(name)
            text = o.get("text", "") + "".join(o.get("data", {}).get("text/plain", ""))
            if re.search(r"\d+%\|", text) or "application/vnd.jupyter.widget-view+json" in o.get("data", {}):
                bars.append(text[:80])
    assert used <= glued, f"prose quotes figures the run never glued: {sorted(used - glued)}"
    assert all(k.startswith(md.stem[:2].join(("ch", "-"))) for k in glued), "glue keys carry the chapter's prefix"
    assert not bars, f"progress output in the committed notebook: {bars[:3]}"
    params = next(c for c in jupytext.read(md).cells if "parameters" in c.metadata.get("tags", []))
    assert re.search(r"^cache_dir = None", params.source, re.M), "no cache_dir parameter"


def test_front_matter_parameters_are_checked(tmp_path):
    """A declared parameter needs its help and the same profiles as the others; a chapter without the
    front-matter table declares none, and has no profiles."""
    from mfattn.companion.chapters import declared, profiles

    md = tmp_path / "x.md"
    md.write_text("---\nmfattn-parameters:\n  T: {ci: 1.0, paper: 2.0}\n---\n")
    with pytest.raises(ValueError, match="help"):
        declared(md)
    md.write_text("---\nmfattn-parameters:\n  T: {ci: 1.0, paper: 2.0, help: h}\n  N: {ci: 1, help: n}\n---\n")
    with pytest.raises(ValueError, match="profiles"):
        declared(md)
    md.write_text("---\njupytext: {}\n---\n# a chapter\n")
    assert declared(md) is None
    with pytest.raises(ValueError, match="declares no parameters"):
        profiles(md)
    md.write_text("---\nmfattn-parameters:\n  T: {ci: 1.0, paper: 2.0, help: horizon}\n---\n")
    assert declared(md) == {"T": {"ci": 1.0, "paper": 2.0, "help": "horizon"}}


@pytest.mark.parametrize("chapter,name,bad,good,message", [
    ("04", "tail_from", 1.0, 0.5, "must be < 1"),
    ("04", "onehot_tasks", ["teacher"], ["text"], "must be one of 'markov', 'text'"),
    ("06", "sphere_dims", [2, 3], [3, 4], "must be >= 3"),
    ("01", "dim_starts", -1, 0, "must be >= 0"),
    ("01", "task", "markow", "markov", "must be one of 'teacher', 'markov', 'text'"),
])
def test_a_chapter_declares_its_own_ranges_and_choices(chapter, name, bad, good, message):
    """The check enforces what the chapter's front matter declares beside the defaults (``range:``,
    ``choices:``), not a list shared by every chapter: dim_starts may be 0 in chapter 01 alone."""
    from mfattn.companion.chapters import check_values, find_chapter

    md = find_chapter(ROOT, chapter)
    with pytest.raises(ValueError, match=f"{name} = .*{re.escape(message)}"):
        check_values(md, {name: bad})
    assert check_values(md, {name: good})[name] == good
    # elsewhere a number without a declared range stays > 0
    with pytest.raises(ValueError, match="must be > 0"):
        check_values(find_chapter(ROOT, "07"), {"n_seeds": 0})


def test_a_malformed_range_is_refused_by_name(tmp_path):
    from mfattn.companion.chapters import declared

    md = tmp_path / "01-x.md"
    md.write_text("---\nmfattn-parameters:\n  a: {ci: 1, paper: 2, help: x, range: '[2, 1]'}\n---\n")
    with pytest.raises(ValueError, match="parameter 'a': range '\\[2, 1\\]': empty"):
        declared(md)


COSTED = """---
mfattn-parameters:
  n: {ci: 4, paper: 8, help: heads, cost: 1}
  step: {ci: 0.1, paper: 0.05, help: a step, cost: -1}
  grid: {ci: [1, 2], paper: [1, 2, 5], help: a grid, cost: 1}
  m: {ci: 10, paper: 30, help: data (read by the prologue), cost: 1}
  scale: {ci: 1.0, paper: 3.0, help: no effect on the work}
---

```{code-cell} ipython3
:tags: [parameters]

profile = "ci"
seed = 0
cache_dir = None
```

```{code-cell} ipython3
cfg = setup("01", globals())
data = list(range(cfg.m))
```

```{code-cell} ipython3
def run(k):
    return [compute(cfg.scale * k, step=cfg.step) for _ in range(cfg.n)]
```

```{code-cell} ipython3
out = [run(k) for k in cfg.grid]
```

```{code-cell} ipython3
print(len(out))
```

```{code-cell} ipython3
x = [cfg.scale for _ in range(cfg.n)]
y = [run(1) for _ in range(cfg.n)]
keys = [dict(k=k, step=cfg.step, n=cfg.n) for k in cfg.grid]
for k in cfg.grid:
    z = run(k)
```
"""


def test_the_cost_model_scales_each_cell_by_the_work_it_reads(tmp_path):
    """A cell's committed time grows by the product of its parameters' work ratios: those it reads,
    those of the functions it calls (defined in an earlier cell), and those the prologue reads."""
    from mfattn.companion.chapters import check_values, estimate

    md = tmp_path / "01-costed.md"
    md.write_text(COSTED)
    nb = nbformat.v4.new_notebook(metadata={"mfattn": {"cell_seconds": [0.0, 2.0, 0.5, 10.0, 1.0, 4.0]}})
    nbformat.write(nb, tmp_path / "01-costed.ipynb")
    ci = estimate(md, check_values(md, {}))
    assert ci[0] == pytest.approx(17.5) and ci[2] == pytest.approx([0.0, 2.0, 0.5, 10.0, 1.0, 4.0])
    seconds, basis, cells = estimate(md, check_values(md, {"profile": "paper"}))
    m = 3.0  # the prologue's data (m) weighs on every later cell; the prologue itself reads it
    # defining run() costs nothing; cell 4 calls run(), which reads n (x2) and step (x2, cost -1), for
    # every element of grid (sum 8 / 3); scale has no cost; cell 6 runs four statements one after the
    # other: the largest growth counts (the loop over grid calling run, and the keys, which read grid,
    # step and n: 8 / 3 x 4; each parameter counts once in a statement)
    expected = [0.0, 2.0 * m, 0.5 * m, 10.0 * m * 2 * 2 * 8 / 3, 1.0 * m, 4.0 * m * 2 * 2 * 8 / 3]
    assert cells == pytest.approx(expected) and seconds == pytest.approx(sum(expected))
    assert basis[0][1].startswith("cell 4 (out = [run(k) for k in cfg.grid])")
    # a chapter that declares no cost has no model
    md.write_text(COSTED.replace(", cost: 1}", "}").replace(", cost: -1}", "}"))
    assert estimate(md, check_values(md, {})) is None


def test_a_run_without_cache_dir_leaves_no_folder_behind(tmp_path):
    """setup's temporary folder goes with its process: at exit, or, for a process killed as nbval kills its
    kernels, at the next setup; a live process's folder and a named cache_dir stay."""
    import os
    import signal
    import time

    env = dict(os.environ, TMPDIR=str(tmp_path))
    run = ("import os, pathlib, signal, sys; from mfattn.companion.book import setup\n"
           "cfg = setup('07', {'profile': 'ci', 'device': 'cpu', 'cache_dir': sys.argv[2] or None})\n"
           "(pathlib.Path(cfg.folder) / 'work.json').write_text('{}')\n"
           "print('folder:', cfg.folder, flush=True)\n"
           "if sys.argv[1] == 'kill': os.kill(os.getpid(), signal.SIGKILL)\n"
           "if sys.argv[1] == 'fork' and os.fork() == 0: sys.exit(0)  # a child that exits normally\n"
           "if sys.argv[1] == 'fork': os.wait(); print('child gone, folder kept:', os.path.isdir(cfg.folder))\n"
           "if sys.argv[1] == 'wait': sys.stdin.readline()\n")

    def folder(out):  # the line the run printed after setup's parameter table
        return Path(next(ln for ln in out.splitlines() if ln.startswith("folder: "))[len("folder: "):])

    def start(how, cache_dir=""):
        return subprocess.Popen([sys.executable, "-c", run, how, cache_dir], env=env, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    done = start("exit")
    exited = folder(done.communicate()[0])
    assert done.returncode == 0 and exited.parent == tmp_path and not exited.exists()

    forked = start("fork")
    out = forked.communicate()[0]
    assert "child gone, folder kept: True" in out and not folder(out).exists()

    killed = start("kill")
    left = folder(killed.communicate()[0])
    assert killed.returncode == -signal.SIGKILL and (left / "work.json").exists()  # no exit handler ran

    alive = start("wait")
    alive_folder = folder(_until_folder(alive))
    named = tmp_path / "named"  # the runner makes the folder it names
    named.mkdir()
    kept = start("exit", str(named))
    assert folder(kept.communicate()[0]) == named and (named / "work.json").exists()

    later = start("wait")
    later_folder = folder(_until_folder(later))
    assert not left.exists()  # the killed process's folder went at the next setup
    assert (alive_folder / "work.json").exists() and (later_folder / "work.json").exists()
    for p in (alive, later):
        p.communicate("\n")
    time.sleep(0.1)
    assert sorted(q.name for q in tmp_path.iterdir()) == ["named"]


def _until_folder(proc):
    """The output of a running process up to its folder line."""
    lines = []
    while not (lines and lines[-1].startswith("folder: ")):
        lines.append(proc.stdout.readline())
        assert lines[-1], "the process ended before it printed its folder"
    return "".join(lines)
