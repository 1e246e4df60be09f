"""Running a chapter as a user: ``python -m mfattn run``, ``compare`` and ``list`` (all chapters).

``run`` checks every parameter against the chapter's profile before a kernel starts
(:func:`mfattn.companion.chapters.check_values`), executes the chapter with papermill in a kernel it owns (so
that Ctrl-C stops the kernel at once and keeps the partial notebook), caches the chapter's sweeps
under ``runs/CHAPTER/cache/KEY/`` where ``KEY`` hashes the whole effective configuration and the
code (:func:`cache_key`), shows the chapter's sweeps as terminal progress bars with remaining-time
estimates (the kernel writes them to a side file, :mod:`mfattn._progress`, never into the
notebook), and can write an HTML page of the executed run without executing it again.
``compare`` prints a run's verdicts beside the committed ones; ``list`` gives each chapter's
title and the measured run time of its committed ``ci`` notebook.

Every fault the user can fix ends the command with one line starting ``mfattn:`` and exit
status 2 (a bad parameter, no CUDA) or 1 (a failing cell, an interruption).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

# UserError: one line on stderr, exit status 2
from .chapters import (UserError, chapter_cells, check_values, estimate, growth, profiles, recorded, repo_root,
                       strip_papermill, title)
from .verdicts import EVIDENCE, KINDS, constant_counterfactuals

__all__ = ["cache_key", "code_version", "compare", "list_chapters", "provenance", "run_chapter", "step_table_estimate",
           "write_html"]


def code_cells(src: Path) -> str:
    """A chapter's code cells, joined: what the cache key hashes and the constant check reads."""
    return "\n\n".join(c.source for c in chapter_cells(src) if c.cell_type == "code")


# modules that compute nothing a chapter caches (the command line, the HTML checker, the benchmark)
_TOOLING = {"__main__.py", "cli.py", "runner.py", "checkhtml.py", "bench.py", "evidence.py", "results.py"}


def code_version(src) -> str:
    """A hash of the code a chapter's results depend on: every ``.py`` file of the installed
    ``mfattn`` package but the tooling (command line, HTML checker, benchmark, evidence map), and
    the code cells of the chapter (its prose is left out, so editing the text keeps the cache).

    Parameters
    ----------
    src : str or pathlib.Path
        The chapter's MyST source.

    Returns
    -------
    str
        40 hexadecimal digits (SHA-1).

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.companion.runner import code_version
    >>> chapter = pathlib.Path(mfattn.__file__).resolve().parents[2] / "notebooks" / "05-stability.md"
    >>> v = code_version(chapter)
    >>> len(v), v == code_version(chapter)
    (40, True)
    """
    h = hashlib.sha1()
    pkg = Path(__file__).resolve().parents[1]  # the whole package, every layer
    for f in sorted(f for f in pkg.rglob("*.py") if f.name not in _TOOLING):
        h.update(str(f.relative_to(pkg)).encode() + b"\0" + f.read_bytes() + b"\0")
    h.update(code_cells(Path(src)).encode())
    return h.hexdigest()


def cache_key(src, config: dict) -> str:
    """The name of the cache folder of a run: a hash of the chapter's name, its whole effective
    configuration (:func:`mfattn.companion.chapters.check_values`, without ``cache_dir``) and
    :func:`code_version`. Any changed parameter, package file or code cell gives a new folder, so
    a cache never returns a result of another configuration or of older code.

    Parameters
    ----------
    src : str or pathlib.Path
        The chapter's MyST source.
    config : dict
        The effective configuration, ``{parameter: value}`` (JSON values).

    Returns
    -------
    str
        16 hexadecimal digits.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.companion.chapters import check_values
    >>> from mfattn.companion.runner import cache_key
    >>> chapter = pathlib.Path(mfattn.__file__).resolve().parents[2] / "notebooks" / "05-stability.md"
    >>> a = cache_key(chapter, check_values(chapter, {}))
    >>> b = cache_key(chapter, check_values(chapter, {"n_data": 63}))
    >>> len(a), a == b
    (16, False)
    """
    src = Path(src)
    text = json.dumps({"chapter": src.stem, "config": {k: v for k, v in config.items() if k != "cache_dir"},
                       "code": code_version(src)}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def fmt_seconds(s: float) -> str:
    """Seconds as the command line prints them (``42 s``, ``3m05``, ``2 h 05``)."""
    s = int(round(s))
    if s < 60:
        return f"{s} s"
    return f"{s // 60}m{s % 60:02d}" if s < 3600 else f"{s // 3600} h {s % 3600 // 60:02d} min"


def _cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        names = [ln.split(":", 1)[1] for ln in lines if ln.startswith("model name")]
    except OSError:
        names = []
    return " ".join(names[0].split()) if names else platform.processor() or platform.machine()


def _git(*args, cwd) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code_state(src) -> dict:
    """The commit of the checkout holding ``src`` and whether the engine (``src/mfattn``) or the
    chapter differ from it: ``{"commit": sha or None, "dirty": bool or None}`` (``None`` outside a
    git checkout). ``run CH --inplace`` takes it when the run starts, since the kernel loads the code
    then, and work on the checkout during a long run does not change what ran.

    Parameters
    ----------
    src : str or pathlib.Path
        The chapter's MyST source.

    Returns
    -------
    dict
        ``commit`` and ``dirty``.
    """
    src = Path(src).resolve()
    root = _git("rev-parse", "--show-toplevel", cwd=src.parent)
    commit = _git("rev-parse", "HEAD", cwd=src.parent) if root else None
    changed = _git("status", "--porcelain", "--", "src/mfattn", str(src), cwd=root) if commit else None
    return {"commit": commit, "dirty": None if commit is None else bool(changed)}


def provenance(src, seconds: float, profile: str, code: dict | None = None) -> dict:
    """What the book's status page says about a committed run (``book/status.md``): its wall time
    and profile, the machine (CPU model, cores, the instruction set torch's kernels used), the
    versions of Python and of the numerical libraries, the time it ran, and the commit of the code
    it ran, with ``dirty`` when the engine or the chapter differed from that commit. Stored in the
    executed notebook's metadata under ``mfattn`` by ``run CH --inplace``, so that the page is built
    without executing anything.

    Parameters
    ----------
    src : str or pathlib.Path
        The chapter's MyST source.
    seconds : float
        The run's wall time.
    profile : str
        The profile it ran (``ci`` for a committed run).
    code : dict, optional
        :func:`code_state` as the run started; taken now when omitted.

    Returns
    -------
    dict
        JSON-serialisable; ``ci_seconds`` is the key :func:`ci_seconds` reads.
    """
    from importlib.metadata import PackageNotFoundError, version

    import torch

    def ver(pkg):
        try:
            return version(pkg)
        except PackageNotFoundError:
            return None

    code = code if code is not None else code_state(src)
    return {"ci_seconds": round(seconds), "profile": profile,
            "machine": f"{os.cpu_count()} CPU cores, {platform.machine()}",
            "cpu": _cpu_model(), "cores": os.cpu_count(), "isa": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(),
            "python": platform.python_version(), "torch": torch.__version__, "numpy": ver("numpy"),
            "numba": ver("numba"), "executed": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": code["commit"], "dirty": code["dirty"]}


def ci_seconds(notebook) -> float | None:
    """The measured wall time of the committed ``ci`` run, from the notebook's metadata (written
    by ``python -m mfattn run CH --inplace``), or ``None``."""
    return recorded(notebook).get("ci_seconds")


def _completed_cells(notebook: Path) -> int | None:
    """How many code cells papermill has finished in the notebook it is writing (it saves after each)."""
    try:
        nb = json.loads(notebook.read_text())
    except (OSError, ValueError):
        return None
    return sum(c.get("metadata", {}).get("papermill", {}).get("status") == "completed"
               for c in nb.get("cells", []) if c.get("cell_type") == "code")


def _show_progress(path: Path, notebook: Path, weights: list[float], timed: bool, name: str,
                   stop: threading.Event) -> None:
    """Reads the JSON lines of :class:`mfattn._progress.FileBar` and draws them as tqdm bars on the
    terminal (stderr) until ``stop`` is set; tqdm estimates the remaining time of each sweep from its
    rate. Above them, one bar for the whole chapter ``name``: its code cells as papermill finishes them
    in ``notebook``, each weighted by ``weights`` (``timed``: the seconds it should take, from the
    committed run's ``cell_seconds``; else one per cell), so the estimate holds through a long cell
    whose inner bars restart many times."""
    from tqdm.std import tqdm

    def bar(**kw):
        return tqdm(leave=False, file=sys.stderr, dynamic_ncols=True, disable=False, **kw)

    fmt = "{l_bar}{bar}| {n_fmt}/{total_fmt} {unit} of the estimate [{elapsed}<{remaining}]"
    overall = bar(total=round(sum(weights)), desc=f"{name} (all cells)", position=0,
                  unit="s" if timed else "cell", bar_format=fmt if timed else None)
    bars, last_check, rest, stopping = {}, 0.0, "", False
    with open(path) as f:  # the kernel appends to it
        while not stopping:
            stopping = stop.is_set()  # one last read once the run has ended
            if time.monotonic() - last_check > 1.0:
                last_check = time.monotonic()
                done = _completed_cells(notebook)
                if done is not None and round(sum(weights[:done])) > overall.n:
                    overall.update(round(sum(weights[:done])) - overall.n)
            *lines, rest = (rest + f.read()).split("\n")  # the last line may be unfinished
            for line in lines:
                try:
                    e = json.loads(line)
                except ValueError:  # not a line of FileBar's
                    continue
                if e["id"] not in bars:
                    if e["done"]:
                        continue
                    bars[e["id"]] = bar(total=e["total"], desc=e["desc"], position=len(bars) + 1)
                b = bars[e["id"]]
                if e["n"] > b.n:
                    b.update(e["n"] - b.n)
                if e["done"]:
                    bars.pop(e["id"]).close()
            stop.wait(0.2)
    for b in [*bars.values(), overall]:
        b.close()


def _peak_mb(pid: int) -> float | None:
    """The high-water mark of a live process's resident memory (``VmHWM`` of ``/proc/PID/status``), in
    MB; ``None`` where it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(ln.split()[1]) / 1024 for ln in f if ln.startswith("VmHWM:")), None)
    except (OSError, ValueError, IndexError):
        return None


def _kill(km) -> float | None:
    """Kill the kernel's process group and wait for it (the run's end, or Ctrl-C). Returns the kernel's
    peak resident memory in MB, read just before (:func:`_peak_mb`), or ``None``. The peak used to be
    read only as the largest child this process waited for (``RUSAGE_CHILDREN``), which did not count
    the kernel on the machines of earlier runs: the ci runs committed before 2026-11-29 recorded 54 to
    69 MB, where a kernel that has imported torch holds more than 300 (:data:`KERNEL_BASE_MB`)."""
    proc = getattr(getattr(km, "provisioner", None), "process", None)
    peak = None
    if proc is not None and proc.poll() is None:
        peak = _peak_mb(proc.pid)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (OSError, AttributeError):
            proc.kill()
        # gone, and its locks with it (mfattn.companion.sweep.remove_ended); on a timeout the kill stands
        # and its folder goes at a later sweep
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    return peak


def cache_folder_of(root: Path, src: Path, config: dict, device: str) -> Path:
    """Where a run of ``config`` on ``device`` keeps its finished work: ``runs/CHAPTER/cache/KEY``, or
    ``cache_dir/KEY`` when the configuration names one (:func:`cache_key`).

    Parameters
    ----------
    root : pathlib.Path
        The checkout.
    src : pathlib.Path
        The chapter's MyST source.
    config : dict
        The run's checked values.
    device : str
        The resolved device (``"cpu"``, ``"cuda"``).

    Returns
    -------
    pathlib.Path

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.companion.chapters import check_values
    >>> from mfattn.companion.runner import cache_folder_of
    >>> root = pathlib.Path(mfattn.__file__).resolve().parents[2]
    >>> src = root / "notebooks" / "05-stability.md"
    >>> cache_folder_of(root, src, check_values(src, {}), "cpu").parent.relative_to(root).as_posix()
    'runs/05-stability/cache'
    """
    base = Path(config["cache_dir"]) if config.get("cache_dir") else Path(root) / "runs" / Path(src).stem / "cache"
    return base / cache_key(src, dict(config, device=device))


def resolve_device(device: str) -> str:
    """The device a run uses: ``"auto"`` is CUDA when this torch has a device, else the CPU.

    Parameters
    ----------
    device : str
        ``"cpu"``, ``"auto"`` or ``"cuda"`` (``"cuda:1"`` ...), a chapter's ``device`` parameter.

    Returns
    -------
    str

    Raises
    ------
    UserError
        When CUDA is asked for and this torch has no CUDA device.

    Examples
    --------
    >>> from mfattn.companion.runner import resolve_device
    >>> resolve_device("cpu")
    'cpu'
    """
    if device == "auto" or device.startswith("cuda"):
        import torch

        has = torch.cuda.is_available()
        if device.startswith("cuda") and not has:
            raise UserError(f"device = {device!r}: this torch has no CUDA device (use -p device cpu, or auto)")
        if device == "auto":
            return "cuda" if has else "cpu"
    return device


def _exact_translator():
    """Make papermill write every checked value as the Python literal it is. Its own translator knows
    JSON's types only and writes anything else (a tuple, ``inf``) as a string, so ``-p N_grid "(8, 16)"``
    passed the check as a tuple and reached the chapter as the text ``"(8, 16)"``."""
    from papermill.translators import PythonTranslator, papermill_translators

    class Exact(PythonTranslator):
        @classmethod
        def translate(cls, val):
            if isinstance(val, tuple):
                inner = ", ".join(cls.translate(v) for v in val)
                return f"({inner},)" if len(val) == 1 else f"({inner})"
            if isinstance(val, float) and not math.isfinite(val):
                return f"float({str(val)!r})"
            return super().translate(val)

    papermill_translators.register("python", Exact)


#: A run whose estimate on this CPU exceeds this many seconds, or this many times the committed ci
#: run, is refused unless ``--yes`` (``run_chapter(yes=True)``): a size with no ceiling must not take
#: the machine down.
CEILING_SECONDS = 12 * 3600
CEILING_RATIO = 100
#: A run whose estimated peak memory exceeds this share of the machine's is refused too (unless ``--yes``).
MEMORY_SHARE = 0.5
#: Resident memory of a chapter's kernel once its imports are done, in MB: the part of the peak that
#: does not grow with the sizes (measured: ``import mfattn, torch, numpy, scipy, ot, matplotlib.pyplot,
#: IPython`` holds 331 MB).
KERNEL_BASE_MB = 330


def machine_memory_mb() -> float:
    """This machine's physical memory in MB (``os.sysconf``), or ``inf`` where it cannot be read."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    except (ValueError, OSError, AttributeError):
        return math.inf


def peak_memory_estimate(src: Path, config: dict, committed: Path) -> tuple[float, str] | None:
    """The peak resident memory, in MB, a run with ``config`` should need: the committed ci run's
    peak (``peak_rss_mb``, recorded by ``--inplace``) above :data:`KERNEL_BASE_MB`, times the largest
    growth of a size against its ci value, plus that base. Returns ``(MB, parameter)``, or ``None``
    when the committed run recorded no peak.

    Parameters
    ----------
    src : pathlib.Path
        The chapter's MyST source.
    config : dict
        The run's checked values.
    committed : pathlib.Path
        The committed notebook.

    Returns
    -------
    tuple of (float, str) or None

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.companion.chapters import check_values
    >>> from mfattn.companion.runner import peak_memory_estimate
    >>> ch = pathlib.Path(mfattn.__file__).resolve().parents[2] / "notebooks" / "07-two-layer-baseline.md"
    >>> est = peak_memory_estimate(ch, check_values(ch, {"n_ref": 4096 * 64}), ch.with_suffix(".ipynb"))
    >>> est is None or est[1] == "n_ref"
    True
    """
    peak = recorded(committed).get("peak_rss_mb")
    if not peak:
        return None
    ratio, name, _, _ = growth(config, _sizes(check_values(src, {})))
    return KERNEL_BASE_MB + max(float(peak) - KERNEL_BASE_MB, 0.0) * ratio, name


def _seconds_in(folder: Path | None, name: str) -> float | None:
    """The seconds a cache ``folder`` records in ``name``: ``spent.json``, what runs stopped before
    their end spent on it (their finished work is saved there, so a rerun does not pay for it
    again); ``finished.json``, the last run from it that ran to its end. ``None`` when there are none."""
    try:
        return float(json.loads((folder / name).read_text())["seconds"]) if folder else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _keep_seconds(folder: Path | None, name: str, seconds: float) -> None:
    """Record ``seconds`` in the cache ``folder``'s ``name`` (written atomically)."""
    if folder is not None and folder.is_dir():
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"seconds": round(seconds, 2)}))
        os.replace(tmp, folder / name)


def _sizes(config: dict) -> dict:
    """The values of ``config`` that size a run: all but the run settings (``seed``, ``cache_dir``,
    ``device``)."""
    return {k: v for k, v in config.items() if k not in ("seed", "cache_dir", "device")}


def step_table_estimate(src, config: dict) -> tuple[float, bool, str] | None:
    """A measured estimate of a profile's own sizes on the CPU: when ``config`` is the values of a
    profile other than ci (any seed), the chapter's row of the committed step table
    ``book/benchmarks/steps-PROFILE-cpu.json`` (``tools/chapter_steps.py``: one step of each kind the
    chapter repeats, timed at these sizes on the CPU of the committed runs, times how many it takes).
    A table timed with some values changed (``chapter_steps.py -p NAME VALUE``) stands for those values.

    Returns
    -------
    tuple or None
        ``(seconds, complete, file name)``; ``complete`` is False where some steps were not timed (the
        seconds are then a lower bound). ``None`` for the ci profile, other values than a profile's,
        or no table.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.companion.chapters import check_values
    >>> from mfattn.companion.runner import step_table_estimate
    >>> ch = pathlib.Path(mfattn.__file__).resolve().parents[2] / "notebooks" / "03-static-approximation.md"
    >>> step_table_estimate(ch, check_values(ch, {})) is None   # the ci profile: its run is committed
    True
    """
    src, profile = Path(src), config.get("profile")
    if profile in (None, "ci"):
        return None
    path = src.parent.parent / "book" / "benchmarks" / f"steps-{profile}-cpu.json"
    try:
        table = json.loads(path.read_text())
        own = check_values(src, {**table.get("values", {}), "profile": profile})  # the values it timed
    except (OSError, ValueError):
        return None
    row = next((c for c in table.get("chapters", {}).values() if c.get("name") == src.stem), None)
    if row is None or _sizes(config) != _sizes(own):  # sizes: what changes a run's work
        return None
    return row["estimate_s"], not (row["skipped"] or row.get("pending")), path.name


def _estimate(src: Path, config: dict, committed: Path) -> tuple[tuple | None, float, str]:
    """What a run should take on this CPU: the committed step table's figure for a profile's own sizes
    (:func:`step_table_estimate`), else the chapter's cost model (:func:`mfattn.companion.chapters.estimate`,
    computed once per run); the seconds (0 when nothing says) and the line that says why. Where the step
    table is incomplete the larger of its lower bound and the cost model counts. Without the cost model,
    the committed ci run's time times the largest ratio of a size of the run's profile to the ci one's."""
    est, steps = estimate(src, config, committed), step_table_estimate(src, config)
    if steps is not None:
        seconds, complete, name = steps
        model = est[0] if est is not None else 0.0
        seconds = seconds if complete else max(seconds, model)
        if model > 0:
            est = (seconds, est[1], [c * seconds / model for c in est[2]])  # the progress bar's cells, rescaled
        return est, seconds, (f"{'about' if complete else 'at least'} {fmt_seconds(steps[0])} from one step of "
                              f"each kind, timed at these sizes on the CPU of the committed runs "
                              f"(book/benchmarks/{name})" + (f"; the chapter's cost model says {fmt_seconds(model)}"
                                                             if model > 0 else ""))
    if est is not None:
        top = "; ".join(b for _, b in est[1][:3])
        ci = fmt_seconds(sum(recorded(committed)["cell_seconds"]))
        return est, est[0], (f"about {fmt_seconds(est[0])} (the committed ci run's {ci} by cell, each times "
                             f"the growth of its work under the chapter's cost model; the largest: {top})")
    base_time = ci_seconds(committed)
    if not base_time:
        return None, 0.0, ""
    table = profiles(src)
    ratio, name, a, b = growth(table[config["profile"]], table["ci"])
    which = f"{name} {a:g} vs {b:g}" if name else ""
    seconds = base_time * ratio
    return None, seconds, (f"at least {fmt_seconds(seconds)} (the ci run's {fmt_seconds(base_time)} times "
                           f"{ratio:g}, its largest size ratio: {which}; the committed run recorded no cell "
                           "times for the cost model)")


def _over_the_ceiling(src: Path, config: dict, committed: Path, seconds: float, line: str = "") -> None:
    """Refuse, with one line naming the parameter that grew most, a run whose estimated peak memory
    exceeds :data:`MEMORY_SHARE` of this machine's, or whose estimate on this CPU (``seconds``)
    exceeds the ceiling (:data:`CEILING_SECONDS`, or :data:`CEILING_RATIO` times the committed ci run); ``line``,
    :func:`_estimate`'s, says whether ``seconds`` is a lower bound ("at least ...")."""
    ci = check_values(src, {})

    def why(name):
        return f"{name} {config[name]!r} (ci: {ci[name]!r})" if name else "the chapter's sizes"

    mem = peak_memory_estimate(src, config, committed)
    if mem is not None and mem[0] > MEMORY_SHARE * machine_memory_mb():
        raise UserError(f"{src.stem}: estimated peak memory {mem[0] / 1024:.1f} GB ({why(mem[1])}), over "
                        f"{MEMORY_SHARE:.0%} of this machine's {machine_memory_mb() / 1024:.1f} GB; smaller values, "
                        "or --yes to run it anyway")
    base_time = ci_seconds(committed)
    if seconds > CEILING_SECONDS or (base_time and seconds > CEILING_RATIO * base_time):
        bound = "at least " if line.startswith("at least") else ""
        raise UserError(f"{src.stem}: estimated {bound}{fmt_seconds(seconds)} on this CPU "
                        f"({why(growth(config, _sizes(ci), shrink=True)[1])}), over the ceiling of "
                        f"{CEILING_SECONDS // 3600} h or {CEILING_RATIO}x the ci run; smaller values, or --yes to "
                        "run it anyway")


def run_chapter(root: Path, src: Path, values: dict, *, out: str | None = None, inplace: bool = False,
                quiet: bool = False, timeout: int | None = None, cache: bool = True, html: bool = False,
                yes: bool = False) -> Path:
    """Execute the chapter ``src`` with the parameters ``values`` (``python -m mfattn run``).

    Parameters
    ----------
    root : pathlib.Path
        The checkout (holds ``notebooks/`` and ``runs/``).
    src : pathlib.Path
        The chapter's MyST source.
    values : dict
        Parameters to set (checked by :func:`mfattn.companion.chapters.check_values` before anything runs).
    out : str or None
        Folder of the executed notebook; default ``runs/CHAPTER/YYYYmmdd-HHMMSS``.
    inplace : bool
        Replace the committed ``notebooks/CHAPTER.ipynb`` (no parameters allowed; no cache, so that
        the committed outputs are a fresh computation, as nbval's); records the run time in its
        metadata.
    quiet : bool
        No terminal progress.
    timeout : int or None
        Per-cell timeout in seconds.
    cache : bool
        Keep finished sweep points under ``runs/CHAPTER/cache/KEY`` (or ``cache_dir/KEY`` when the
        parameter is given) and load them on a rerun.
    html : bool
        Also write ``CHAPTER.html`` of the executed notebook beside it (:func:`write_html`).
    yes : bool
        Run even when the estimate on this CPU exceeds :data:`CEILING_SECONDS` or
        :data:`CEILING_RATIO` times the committed ci run (otherwise a ``UserError`` names the size).

    Returns
    -------
    pathlib.Path
        The executed notebook.

    Raises
    ------
    SystemExit
        With status 2 and one line for a fault of the arguments; status 1 and one line for a
        failing cell or an interruption (both name the partial notebook).

    Examples
    --------
    >>> from mfattn.companion.runner import run_chapter  # doctest: +SKIP
    >>> run_chapter(root, root / "notebooks" / "05-stability.md", {"n_data": 32})  # doctest: +SKIP
    """
    plan = _plan(root, src, values, out=out, inplace=inplace, timeout=timeout, cache=cache, yes=yes)
    params = _parameters(plan, values)
    _announce(src, plan, params, quiet=quiet)
    # a failed or interrupted run must not replace the committed notebook: run beside it, move on success
    target = plan.out_dir / f".{src.stem}.partial.ipynb" if inplace else plan.target
    code = code_state(src) if inplace else None  # the code the kernel loads, before the run
    seconds, peak = _execute(src, plan, params, target, quiet=quiet, timeout=timeout)
    _keep_seconds(plan.cache_folder, "finished.json", seconds)  # (none kept without a cache folder)
    if inplace:
        _replace_committed(root, src, plan, target, seconds, code, peak)
        target = plan.target
    print(f"executed {src.name} -> {target} in {fmt_seconds(seconds)}")
    print(verdict_summary(target)[0])
    if html:
        print(f"html: {write_html(target)}")
    return target


class _Plan(NamedTuple):
    """What :func:`run_chapter` decided before anything runs."""

    config: dict  # the checked parameters
    device: str  # resolved ("auto" made concrete)
    committed: Path  # the committed notebook of the chapter
    est: tuple | None  # the cost model's estimate on the CPU
    estimate: str  # what the run should take on the CPU, and why ("" when nothing says)
    cache_folder: Path | None  # where finished work is kept, or None
    done: float | None  # seconds of an earlier run of this configuration that ran to its end
    out_dir: Path
    target: Path  # the executed notebook


def _plan(root: Path, src: Path, values: dict, *, out, inplace, timeout, cache, yes) -> _Plan:
    """The arguments checked, the chapter's parameters checked, the estimate weighed against the
    ceiling and the output folder made writable; a ``UserError`` for any fault, before anything runs."""
    if inplace and values:
        raise UserError("--inplace writes the committed ci-profile notebook; it takes no -p/--profile")
    if timeout is not None and not timeout > 0:
        raise UserError(f"--timeout {timeout}: must be a positive number of seconds")
    if out and Path(out).exists() and not Path(out).is_dir():
        raise UserError(f"--out {out}: is a file, not a folder")
    try:
        config = check_values(src, values)
    except ValueError as e:
        raise UserError(str(e)) from None
    typed = constant_counterfactuals(code_cells(src))
    if typed:
        raise UserError(f"{src.stem}: a measured control must be a value the run computed, not a constant: "
                        f"{typed[0]} (name a theory's number with competitor(..., source=))")
    device = resolve_device(config.get("device", "cpu"))
    committed = (src.parent / f"{src.stem}.ipynb").resolve()
    est, seconds, line = _estimate(src, config, committed) if device == "cpu" else (None, 0.0, "")
    cache_folder = cache_folder_of(root, src, config, device) if cache and not inplace else None
    done = _seconds_in(cache_folder, "finished.json")  # a run of this configuration ran to its end before
    if not yes and device == "cpu" and done is None:
        _over_the_ceiling(src, config, committed, seconds, line)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = src.parent if inplace else Path(out) if out else root / "runs" / src.stem / stamp
    target = out_dir / f"{src.stem}.ipynb"
    if target.resolve() == committed and not inplace:
        raise UserError(f"{target} is the committed notebook; use --inplace to replace it")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out_dir).close()  # can a file be written there?
    except OSError as e:
        raise UserError(f"{out_dir}: cannot write the executed notebook there ({e.strerror or e})") from None
    return _Plan(config, device, committed, est, line, cache_folder, done, out_dir, target)


def _parameters(plan: _Plan, values: dict) -> dict:
    """The values papermill injects: the user's, with the cache folder made and named (or none: an
    ``--inplace`` or ``--no-cache`` run has no cache folder)."""
    folder = plan.cache_folder
    if folder is None:
        return {k: v for k, v in values.items() if k != "cache_dir"}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(dict(plan.config, device=plan.device, cache_dir=None), indent=1))
    except OSError as e:
        where = "-p cache_dir" if plan.config.get("cache_dir") else "runs/"
        raise UserError(f"{folder.parent}: cannot keep finished work there ({e.strerror or e}); name a writable "
                        f"folder with -p cache_dir DIR, or run with --no-cache (was: {where})") from None
    return dict(values, cache_dir=str(folder.resolve()))


def _announce(src: Path, plan: _Plan, params: dict, *, quiet: bool) -> None:
    """What the run is and where its work is kept (unless ``quiet``), and what it should cost, on stderr."""
    config, done = plan.config, plan.done
    if not quiet:
        base_time = ci_seconds(plan.committed)
        took = f"; its ci run took {fmt_seconds(base_time)} when committed" if base_time else ""
        print(f"mfattn: running {src.stem} (profile {config['profile']}, device {plan.device}){took}",
              file=sys.stderr)
        if "cache_dir" in params:
            print(f"mfattn: finished work is kept in {params['cache_dir']} (a rerun resumes there)", file=sys.stderr)
        spent = _seconds_in(plan.cache_folder, "spent.json")
        if spent and done is None:  # finished work of stopped runs is read back, not paid for again
            print(f"mfattn: {fmt_seconds(spent)} of runs stopped before their end went into this cache; what "
                  "they finished is read back, so this run costs that much less than an estimate below says",
                  file=sys.stderr)
        if done is not None:
            print("mfattn: this configuration ran to its end before from this cache; its saved work is read "
                  f"back, not recomputed (the last run from it took {fmt_seconds(done)})", file=sys.stderr)
    if done is None and plan.device == "cpu" and _sizes(config) != _sizes(check_values(src, {})):
        if plan.estimate:
            print(f"mfattn: estimate on this CPU: {plan.estimate}", file=sys.stderr)
        if config["profile"] != "ci":
            print(f"mfattn: warning: profile {config['profile']!r} is sized for a GPU", file=sys.stderr)


def _execute(src: Path, plan: _Plan, params: dict, target: Path, *, quiet: bool, timeout) -> tuple[float, float | None]:
    """Execute the chapter into ``target`` through papermill in a kernel of its own; returns the seconds
    and the kernel's peak resident memory in MB (``None`` where it cannot be read).

    Progress goes to a side file that a view thread draws (or nowhere), never into the notebook;
    Ctrl-C stops the kernel at once; a failing cell, an interruption or any other stop exits with one
    line naming the partial notebook (status 1, or 130 for Ctrl-C). The environment is restored.
    """
    import logging
    import warnings
    from unittest.mock import patch

    import jupytext
    import nbformat
    import papermill as pm
    from jupyter_client.manager import AsyncKernelManager

    nb = jupytext.read(src)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source_nb = plan.out_dir / f".{src.stem}.source.ipynb"
    nbformat.write(nb, source_nb)

    # the kernel inherits this environment: progress goes to a side file (or nowhere), never into
    # the notebook; tqdm bars of other libraries are silenced
    env = patch.dict(os.environ, TQDM_DISABLE="1")  # restored as it was when the run ends
    env.start()
    os.environ.pop("MFATTN_PROGRESS", None)
    view, stop = None, threading.Event()
    if not quiet:
        progress_file = plan.out_dir / f".{src.stem}.progress.jsonl"
        progress_file.write_text("")
        os.environ["MFATTN_PROGRESS"] = str(progress_file.resolve())
        n_code = sum(c.cell_type == "code" for c in nb.cells) + bool(params)  # papermill's injected cell
        weights = plan.est[2] if plan.est is not None else recorded(plan.committed).get("cell_seconds")
        weights = [0.0] * bool(params) + list(weights or [])
        timed = len(weights) == n_code
        # one second of weight at least, so a cell of no recorded time still moves the bar
        weights = [max(1.0, w) for w in weights] if timed else [1.0] * n_code
        view = threading.Thread(target=_show_progress, daemon=True,
                                args=(progress_file, target, weights, timed, src.stem, stop))
        view.start()

    sockets = tempfile.mkdtemp(prefix="mfattn-kernel-")
    # IPC sockets (local only, and no warning about unencrypted TCP on every run), in a folder of
    # their own: with a relative prefix they would land in the chapter's folder; the connection file
    # beside them (jupyter_client would write it to the temporary folder and leave it there)
    km = AsyncKernelManager(kernel_name="python3", transport="ipc", ip=str(Path(sockets) / "kernel"),
                            connection_file=str(Path(sockets) / "kernel.json"))
    interrupted = []

    def on_sigint(signum, frame):
        if not interrupted:
            interrupted.append(True)
            _kill(km)  # stop the computation now, not after the kernel's shutdown grace period
            raise KeyboardInterrupt

    old_handler = signal.signal(signal.SIGINT, on_sigint)
    # the parameters were checked before (mfattn.companion.chapters reads the cell with ast); papermill's
    # own reader cannot parse some comments and would warn about parameters it missed
    logging.getLogger("papermill").setLevel(logging.ERROR)
    _exact_translator()
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pm.execute_notebook(str(source_nb), str(target), parameters=params, kernel_name="python3",
                                cwd=str(src.parent), progress_bar=False, execution_timeout=timeout, km=km)
    except (KeyboardInterrupt, Exception) as e:
        spent = (_seconds_in(plan.cache_folder, "spent.json") or 0.0) + time.perf_counter() - t0
        _keep_seconds(plan.cache_folder, "spent.json", spent)
        if isinstance(e, pm.PapermillExecutionError):
            lines = (e.source or "").splitlines()
            first = next((ln for ln in lines if ln.strip() and not ln.startswith(("#", ":"))), "")
            raise SystemExit(f"mfattn: {src.stem} failed in cell [{e.exec_count}] ({first.strip()[:60]}): "
                             f"{e.ename}: {e.evalue}; partial notebook: {target}") from None
        if interrupted or isinstance(e, KeyboardInterrupt):
            where = (f"; finished work is kept in {params['cache_dir']}, rerun the same command to resume"
                     if "cache_dir" in params else "")
            print(f"mfattn: interrupted; partial notebook: {target}{where}", file=sys.stderr)
            raise SystemExit(130) from None  # the shell's status for Ctrl-C, so callers can tell it apart
        raise SystemExit(f"mfattn: {src.stem} stopped: {type(e).__name__}: {e}; partial notebook: {target}") from None
    finally:
        signal.signal(signal.SIGINT, old_handler)
        peak = _kill(km)
        from .sweep import remove_ended

        remove_ended()  # the kernel's scratch folder, when the run named no cache_dir (it had no exit)
        shutil.rmtree(sockets, ignore_errors=True)
        source_nb.unlink(missing_ok=True)
        if view is not None:
            stop.set()
            view.join(timeout=2)
            progress_file.unlink(missing_ok=True)
        env.stop()
    return time.perf_counter() - t0, peak


def _replace_committed(root: Path, src: Path, plan: _Plan, partial: Path, seconds: float, code,
                       peak: float | None = None) -> None:
    """The finished run becomes the committed notebook: papermill's metadata stripped, the run's
    provenance, cell times and peak memory recorded, the chapter listed in ``_toc.yml``."""
    import resource

    import nbformat

    executed = nbformat.read(partial, as_version=4)
    per_cell = [round(float(c.metadata.get("papermill", {}).get("duration") or 0.0), 2)
                for c in executed.cells if c.cell_type == "code"]
    strip_papermill(executed)
    # the cell times are read by the runner's overall progress bar; the kernel's peak resident memory
    # (read from the kernel before it was stopped, or else the largest child this process waited for)
    # by the memory ceiling
    waited = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    executed.metadata["mfattn"] = dict(provenance(src, seconds, plan.config["profile"], code), cell_seconds=per_cell,
                                       peak_rss_mb=round(max(peak or 0.0, waited)))
    nbformat.write(executed, plan.target)
    partial.unlink()
    if list_in_toc(root, plan.target.stem):
        print(f"listed notebooks/{plan.target.stem} in _toc.yml")


def write_html(notebook) -> Path:
    """An HTML page of an executed notebook, built by Jupyter Book with execution off (the notebook
    is rendered as it is, outputs and glued figures included; nothing runs again). The page and
    its images go to ``NOTEBOOK-html/``; the theme's assets (about 30 MB) are kept once under
    ``runs/.html-static/`` (the ``runs`` folder the notebook lies in, or the checkout's) and linked
    from ``NOTEBOOK-html/_static``, so every page of a checkout shares one copy. The book's
    references page is built beside it, so that the page's citations resolve (to
    ``NOTEBOOK-html/references.html``). Returns the page.

    Parameters
    ----------
    notebook : str or pathlib.Path
        An executed chapter notebook (e.g. ``runs/05-stability/.../05-stability.ipynb``).

    Returns
    -------
    pathlib.Path
        ``NOTEBOOK-html/NAME.html``.

    Raises
    ------
    SystemExit
        With one line when the notebook is missing, is not an executed notebook (``.ipynb`` with
        cells), or the build fails.

    Examples
    --------
    >>> from mfattn.companion.runner import write_html  # doctest: +SKIP
    >>> write_html("runs/05-stability/20261123-120000/05-stability.ipynb")  # doctest: +SKIP
    """
    notebook = Path(notebook).resolve()
    if not notebook.is_file():
        raise UserError(f"{notebook}: no such notebook")
    try:
        cells = json.loads(notebook.read_text()).get("cells") if notebook.suffix == ".ipynb" else None
    except (ValueError, UnicodeDecodeError, AttributeError):
        cells = None
    if not isinstance(cells, list):
        raise UserError(f"{notebook}: not an executed notebook (html renders a chapter's .ipynb; "
                        "`python -m mfattn run CHAPTER` makes one)")
    import yaml

    book = Path(__file__).resolve().parents[3]  # the checkout of this package: the book's own settings
    dest = notebook.parent / f"{notebook.stem}-html"
    with tempfile.TemporaryDirectory(prefix="mfattn-html-") as tmp:
        tmp = Path(tmp)
        shutil.copy(notebook, tmp / notebook.name)
        cfg = yaml.safe_load((book / "_config.yml").read_text()) if (book / "_config.yml").is_file() else {}
        cfg = {k: v for k, v in cfg.items() if k not in ("only_build_toc_files", "exclude_patterns")}
        cfg.setdefault("title", notebook.stem)
        cfg["execute"] = {"execute_notebooks": "off"}
        cfg["bibtex_bibfiles"] = [str((book / b).resolve()) for b in cfg.get("bibtex_bibfiles", [])
                                  if (book / b).is_file()]
        sphinx = cfg.setdefault("sphinx", {})
        sphinx["local_extensions"] = {k: str((book / v).resolve()) for k, v in (sphinx.get("local_extensions") or {}).items()
                                      if (book / v).is_dir()}
        (tmp / "_config.yml").write_text(yaml.safe_dump(cfg))
        toc = f"format: jb-book\nroot: {notebook.stem}\n"
        if cfg["bibtex_bibfiles"] and notebook.stem != "references":
            # sphinxcontrib-bibtex resolves a citation only to a bibliography in the same build
            (tmp / "references.md").write_text("# References\n\n```{bibliography}\n```\n")
            toc += "chapters:\n- file: references\n"
        (tmp / "_toc.yml").write_text(toc)
        jb = Path(sys.executable).with_name("jupyter-book")
        res = subprocess.run([str(jb), "build", str(tmp), "--path-output", str(tmp / "out")],
                             capture_output=True, text=True)
        built = tmp / "out" / "_build" / "html"
        if res.returncode != 0 or not (built / f"{notebook.stem}.html").is_file():
            tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
            raise SystemExit(f"mfattn: the HTML build of {notebook} failed: {tail[0]}")
        # the theme's assets (about 30 MB, MathJax most of it) are the same for every page of this
        # install: kept once per content under runs/.html-static/, and linked from each page's folder
        static = built / "_static"  # Sphinx writes it for every page
        runs = next((q for q in notebook.parents if q.name == "runs"), repo_root() / "runs")
        shared = runs / ".html-static" / _tree_digest(static)
        if not shared.is_dir():
            part = shared.with_name(shared.name + ".partial")
            shutil.rmtree(part, ignore_errors=True)
            shutil.copytree(static, part)
            part.rename(shared)
        shutil.rmtree(static)
        if dest.is_symlink() or dest.is_file():
            dest.unlink()
        elif dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(built, dest)
        (dest / "_static").symlink_to(os.path.relpath(shared, dest), target_is_directory=True)
    return dest / f"{notebook.stem}.html"


def list_in_toc(root: Path, stem: str) -> bool:
    r"""List ``notebooks/STEM`` in the checkout's ``_toc.yml`` after the last chapter, unless it is
    there: a new chapter enters the book when its executed notebook exists. Returns whether it was
    added.

    Parameters
    ----------
    root : pathlib.Path
        The checkout (it holds ``_toc.yml``).
    stem : str
        The chapter's file name without suffix, e.g. ``10-my-experiment``.

    Returns
    -------
    bool

    Raises
    ------
    SystemExit
        With one line when ``_toc.yml`` lists no chapter to add it after.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from mfattn.companion.runner import list_in_toc
    >>> with tempfile.TemporaryDirectory() as d:
    ...     toc = Path(d) / "_toc.yml"
    ...     _ = toc.write_text("root: intro\nchapters:\n  - file: notebooks/01-a\n  - file: book/references\n")
    ...     list_in_toc(Path(d), "02-b"), list_in_toc(Path(d), "02-b"), toc.read_text().split()[-6:-2]
    (True, False, ['-', 'file:', 'notebooks/02-b', '-'])
    """
    toc = root / "_toc.yml"
    lines = toc.read_text().splitlines()
    if any(ln.strip() in (f"- file: notebooks/{stem}", f"root: notebooks/{stem}") for ln in lines):
        return False
    last = max((i for i, ln in enumerate(lines) if ln.strip().startswith("- file: notebooks/")), default=None)
    if last is None:
        raise SystemExit(f"mfattn: {toc} lists no chapter under notebooks/; add notebooks/{stem} by hand")
    indent = lines[last][: len(lines[last]) - len(lines[last].lstrip())]
    lines.insert(last + 1, f"{indent}- file: notebooks/{stem}")
    toc.write_text("\n".join(lines) + "\n")
    return True


def _tree_digest(folder: Path) -> str:
    """A short hash of a folder's files (relative paths and contents)."""
    h = hashlib.sha256()
    for f in sorted(q for q in folder.rglob("*") if q.is_file()):
        h.update(str(f.relative_to(folder)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


#: Exit status of ``python -m mfattn run`` when the chapter ran to its end and a claim or derived
#: verdict failed (1: a cell failed; 2: a usage error; 130: interrupted). A hypothesis that fails is
#: a result about the model, and a failed check is reported, but neither changes the status.
EXIT_FAILED_CLAIM = 3


def new_failures(notebook, committed) -> list[str]:
    """The claims and derived results that fail in ``notebook`` but not in the ``committed`` one
    (``run --fail-on new``): a verdict is matched by its claim, numbers in the claim's text aside,
    and one the committed notebook does not have counts as new.

    Parameters
    ----------
    notebook, committed : str or pathlib.Path
        An executed chapter notebook, and the committed one of the same chapter.

    Returns
    -------
    list of str
        The new failures' claims (empty when the run fails only where the committed run does).

    Examples
    --------
    >>> import pathlib, mfattn
    >>> from mfattn.companion.runner import new_failures
    >>> nb = pathlib.Path(mfattn.__file__).resolve().parents[2] / "notebooks" / "07-two-layer-baseline.ipynb"
    >>> new_failures(nb, nb)
    []
    """
    strip = lambda t: re.sub(r"[-+]?\d[\d.eE+-]*", "#", t)  # noqa: E731
    before = {strip(r.get("claim", "")) for r in verdict_records(Path(committed)) if r.get("status") != "PASS"} \
        if Path(committed).is_file() else set()
    return [r["claim"] for r in verdict_records(Path(notebook)) if r.get("kind") in EVIDENCE and r.get("status") != "PASS"
            and strip(r.get("claim", "")) not in before]


def verdict_summary(notebook) -> tuple[str, bool]:
    """One line on the verdicts an executed chapter stored: the count by kind and status, and every
    FAIL by its claim, in full; and whether a claim or derived verdict failed.

    Parameters
    ----------
    notebook : str or pathlib.Path
        An executed chapter notebook.

    Returns
    -------
    tuple
        ``(line, failed)``: the line, and True when a verdict of kind ``claim`` or ``derived`` failed.

    Examples
    --------
    >>> import pathlib, mfattn
    >>> from mfattn.companion.runner import verdict_summary
    >>> root = pathlib.Path(mfattn.__file__).resolve().parents[2]
    >>> line, failed = verdict_summary(root / "notebooks" / "07-two-layer-baseline.ipynb")
    >>> line.startswith("verdicts: ")
    True
    """
    records = verdict_records(Path(notebook))
    if not records:
        return "verdicts: none recorded", False
    kinds = [*KINDS, *sorted({r.get("kind") for r in records} - set(KINDS), key=str)]
    passed = {k: [r.get("status") == "PASS" for r in records if r.get("kind") == k] for k in kinds}
    parts = [f"{k} {sum(p)} PASS" + (f", {len(p) - sum(p)} FAIL" if not all(p) else "") for k, p in passed.items() if p]
    fails = [r for r in records if r.get("status") != "PASS"]
    line = f"verdicts: {len(records)} ({'; '.join(parts)})"
    if fails:
        line += "; FAIL: " + " | ".join(f"[{r.get('kind')}] {r.get('claim')}" for r in fails)
    return line, any(r.get("kind") in EVIDENCE for r in fails)


def verdict_records(notebook: Path) -> list[dict]:
    """The verdict records that :func:`mfattn.companion.render.report` stored in an executed notebook, in order."""
    return [rec for cell in json.loads(Path(notebook).read_text())["cells"] for o in cell.get("outputs", [])
            for rec in o.get("metadata", {}).get("mfattn", {}).get("verdicts") or []]


def compare(run) -> int:
    """``python -m mfattn compare RUN``: each verdict of an executed run beside the committed
    notebook's verdict of the same claim (measured value and status), flagging the changes.

    Parameters
    ----------
    run : str or pathlib.Path
        An executed chapter notebook, or the run folder that holds one (its chapter's committed
        notebook is the checkout's, found from the current folder).

    Returns
    -------
    int
        The number of verdicts whose status differs from the committed one.

    Raises
    ------
    SystemExit
        With one line when ``run`` holds no chapter notebook.

    Examples
    --------
    >>> from mfattn.companion.runner import compare  # doctest: +SKIP
    >>> compare("runs/05-stability/20261123-120000")  # doctest: +SKIP
    """
    root, path = repo_root(), Path(run)
    if path.is_dir():
        found = sorted(p for p in path.glob("*.ipynb") if not p.name.startswith("."))
        if len(found) != 1:
            raise UserError(f"{path}: expected one executed chapter notebook, found {len(found)}")
        path = found[0]
    if not path.is_file():
        raise UserError(f"{path}: no such notebook or run folder")
    if path.suffix != ".ipynb":
        raise UserError(f"{path}: not an executed notebook (.ipynb); compare takes a run's notebook or its folder")
    committed = root / "notebooks" / path.name
    if not committed.is_file():
        raise UserError(f"{path.name}: no committed notebook of that name under {root / 'notebooks'}")
    mine, theirs = verdict_records(path), {v["claim"]: v for v in verdict_records(committed)}
    if not mine:
        raise UserError(f"{path}: holds no verdicts (did the run finish?)")
    import textwrap

    rows, changed = [], 0
    for v in mine:
        c = theirs.pop(v["claim"], {"measured": "-", "status": "new"})
        flag = "" if c["status"] in ("new", v["status"]) else "  <- status changed"
        changed += bool(flag)
        rows.append((v["claim"], c["measured"], c["status"], v["measured"], v["status"], flag))
    rows += [(claim, c["measured"], c["status"], "-", "absent", "") for claim, c in theirs.items()]
    print(f"{path.stem}: {path} against {committed.relative_to(root)}")
    for i, (claim, cm, cs, m, s, flag) in enumerate(rows, 1):
        # every claim in full, wrapped: claims that share their first words stay told apart
        print(textwrap.fill(claim, 96, initial_indent=f"{i:>3}. ", subsequent_indent="     "))
        print(f"     committed: {cm} {cs}   this run: {m} {s}{flag}")
    print(f"{changed} of {len(mine)} verdicts changed status")
    return changed


def list_chapters(root: Path) -> list[tuple[str, str, float | None]]:
    """``python -m mfattn list``: each chapter's name, title and the measured run time of its
    committed ``ci`` notebook (``None`` where the notebook records none).

    Parameters
    ----------
    root : pathlib.Path
        The checkout.

    Returns
    -------
    list of (str, str, float or None)
        ``(stem, title, seconds)`` per chapter, in order.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.companion.runner import list_chapters
    >>> rows = list_chapters(pathlib.Path(mfattn.__file__).resolve().parents[2])
    >>> rows[0][0], rows[0][1].startswith("Preliminaries")
    ('01-preliminaries', True)
    """
    return [(md.stem, title(md), ci_seconds(md.with_suffix(".ipynb")))
            for md in sorted((root / "notebooks").glob("*.md"))]
