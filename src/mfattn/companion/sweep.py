"""Parameter sweeps and long computations that survive interruption (every chapter).

Each grid point is a dict of JSON values; its result, a dict of JSON values, is written to
``folder/<key>.json`` as soon as the point finishes (atomically: a temporary file, then a
rename). Running the same sweep again loads the finished points and computes only the others,
so an interrupted sweep resumes without recomputing or losing anything. :func:`memo` does the
same for one call whose result holds tensors (a reference flow, a minimisation).

The folder must stand for one configuration: ``python -m mfattn run`` passes each chapter a
``cache_dir`` under ``runs/CHAPTER/cache/`` named by a hash of the chapter's whole effective
configuration and of the code (``mfattn.companion.runner.cache_key``), so a changed parameter or a
changed function never returns a stale result. Notebooks executed otherwise (nbval, the book)
leave ``cache_dir`` at ``None`` and compute everything in a temporary folder (:func:`scratch_folder`), which
goes with their process.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Callable

from .._progress import progress_bar

#: The file in a scratch folder (:func:`scratch_folder`) that its process keeps locked (``flock``) while it lives.
LOCK = ".alive"
_HELD = []  # the open lock files of this process's scratch folders: a lock lasts as long as its file is open


def scratch_folder(tag: str) -> str:
    """A temporary folder for the finished work of a run that names no ``cache_dir`` (nbval, a reader's
    Jupyter, a test), ``mfattn-TAG-run-*`` in the system's temporary folder.

    It goes when the process exits. A process that is killed (nbval stops its kernels with SIGKILL)
    runs no exit handler, so the folder holds a lock file (:data:`LOCK`), locked for as long as its
    process lives, and each call first removes the folders whose lock it can take
    (:func:`remove_ended`), as ``python -m mfattn run`` does after its kernel. A chapter's sweeps fill
    hundreds of megabytes, and they were left behind run after run.

    Parameters
    ----------
    tag : str
        Part of the name, e.g. the chapter's number.

    Returns
    -------
    str
        The folder's path.

    Examples
    --------
    >>> import os
    >>> from mfattn.companion.sweep import LOCK, ended, scratch_folder
    >>> folder = scratch_folder("00")
    >>> os.path.basename(folder).startswith("mfattn-00-run-"), ended(folder)   # locked: this process lives
    (True, False)
    """
    import atexit
    import shutil
    import tempfile

    remove_ended()
    # made under a name the sweep does not match, locked, then renamed: no sweep sees it unlocked
    start = Path(tempfile.mkdtemp(prefix=".mfattn-starting-"))
    try:
        import fcntl
    except ImportError:  # not POSIX: removed at exit only
        pass
    else:
        _HELD.append(open(start / LOCK, "wb"))
        fcntl.flock(_HELD[-1], fcntl.LOCK_EX)
    folder = start.parent / f"mfattn-{tag}-run-{start.name.rsplit('-', 1)[1]}"
    start.rename(folder)
    owner = os.getpid()  # a forked child that exits normally runs the handler too: it leaves the folder be
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(folder, ignore_errors=True))
    return str(folder)


def ended(folder) -> bool | None:
    """Whether the process that made a scratch folder (:func:`scratch_folder`) has ended: its lock
    (:data:`LOCK`) can be taken, which the system allows once the process is gone, however it ended.

    Parameters
    ----------
    folder : str or pathlib.Path

    Returns
    -------
    bool or None
        None when the folder holds no lock file (or the system has no ``flock``).

    Examples
    --------
    >>> import fcntl, tempfile, pathlib
    >>> from mfattn.companion.sweep import LOCK, ended
    >>> d = pathlib.Path((d_dir := tempfile.TemporaryDirectory()).name)
    >>> ended(d)                                       # no lock file
    >>> held = open(d / LOCK, "wb"); fcntl.flock(held, fcntl.LOCK_EX)
    >>> ended(d)                                       # locked: its process lives
    False
    >>> held.close(); ended(d)                         # the lock went with the file
    True
    """
    try:
        import fcntl

        with open(Path(folder) / LOCK, "rb") as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
    except (ImportError, FileNotFoundError):  # no flock (not POSIX), or no lock file
        return None
    except OSError:  # held (BlockingIOError), or not ours to read
        return False


def ended_folders(tmp=None) -> list[Path]:
    """The scratch folders (:func:`scratch_folder`) in ``tmp`` (the system's temporary folder by
    default) whose process has ended (:func:`ended`).

    Parameters
    ----------
    tmp : str or pathlib.Path or None

    Returns
    -------
    list of pathlib.Path
        Sorted by name.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from mfattn.companion.sweep import LOCK, ended_folders
    >>> tmp = pathlib.Path((tmp_dir := tempfile.TemporaryDirectory()).name)
    >>> for name in ("mfattn-07-run-ab12cd34", "mfattn-07-run-ef56gh78", "mfattn-07-ab12cd34"):
    ...     (tmp / name).mkdir()
    >>> _ = (tmp / "mfattn-07-run-ab12cd34" / LOCK).write_bytes(b"")   # unlocked: its process ended
    >>> [p.name for p in ended_folders(tmp)]                             # no lock file: not known to have ended
    ['mfattn-07-run-ab12cd34']
    """
    import tempfile

    return [p for p in sorted(Path(tmp or tempfile.gettempdir()).glob("mfattn-*-run-*")) if ended(p)]


def remove_ended(tmp=None) -> None:
    """Remove the scratch folders whose process has ended (:func:`ended_folders`) from ``tmp`` (the
    system's temporary folder by default).

    Parameters
    ----------
    tmp : str or pathlib.Path or None

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from mfattn.companion.sweep import LOCK, remove_ended
    >>> tmp = pathlib.Path((tmp_dir := tempfile.TemporaryDirectory()).name)
    >>> for name in ("mfattn-07-run-ab12cd34", "mfattn-07-ab12cd34"):
    ...     (tmp / name).mkdir()
    >>> _ = (tmp / "mfattn-07-run-ab12cd34" / LOCK).write_bytes(b"")   # unlocked: its process ended
    >>> remove_ended(tmp); sorted(p.name for p in tmp.iterdir())
    ['mfattn-07-ab12cd34']
    """
    import shutil

    for old in ended_folders(tmp):
        shutil.rmtree(old, ignore_errors=True)


def point_key(point: dict) -> str:
    """A stable file name for a grid point (hash of its canonical JSON).

    Parameters
    ----------
    point : dict
        A grid point with JSON-serialisable values; the order of its keys does not matter.

    Returns
    -------
    str
        The first 16 hexadecimal digits of the SHA-1 of ``json.dumps(point, sort_keys=True)``.

    Examples
    --------
    >>> from mfattn.companion.sweep import point_key
    >>> point_key({"a": 1, "b": 2})
    '1744f53e00fc23bd'
    >>> point_key({"b": 2, "a": 1}) == point_key({"a": 1, "b": 2})
    True
    """
    return hashlib.sha1(json.dumps(point, sort_keys=True).encode()).hexdigest()[:16]


def _read_damaged_or(path: Path, read):
    """``read(path)``, or ``None`` after naming and removing ``path`` when it cannot be read. Cache
    files are written atomically, so only damage from outside (a disk error, a hand edit, a copy cut
    short) makes one unreadable; the point is then computed again, and the message says which file
    went."""
    try:
        return read(path)
    except Exception as e:  # noqa: BLE001  any reader's error: JSON, zip, pickle, a missing key
        print(f"mfattn: {path} is damaged ({type(e).__name__}: {str(e)[:80]}); removed, computing it again",
              file=sys.stderr)
        path.unlink(missing_ok=True)
        return None


def _check_point(point, name: str) -> None:
    """A ValueError naming ``name`` unless ``point`` is a JSON-serialisable dict."""
    if not isinstance(point, dict):
        raise ValueError(f"{name}: a point must be a dict, got {type(point).__name__}")
    try:
        json.dumps(point)
    except TypeError as e:
        raise ValueError(f"{name}: {point!r} is not JSON-serialisable ({e})") from None


def run_sweep(fn: Callable[..., dict], points: list[dict], folder, *, progress: bool = True,
              desc: str = "sweep points") -> list[dict]:
    """Call ``fn(**point)`` for every point not already finished in ``folder``; return, in the
    order of ``points``, one dict per point with the point's entries and the result's entries.

    Parameters
    ----------
    fn : callable
        Called as ``fn(**point)``; returns a dict of JSON-serialisable values.
    points : list of dict
        The grid points, each a dict of JSON-serialisable values (the keyword arguments of ``fn``).
    folder : str or path
        Folder of the results, one ``<point_key(point)>.json`` per finished point; created if missing.
    progress : bool, default True
        Show a progress bar over the points (in the terminal under ``python -m mfattn run``).
    desc : str, default "sweep points"
        The bar's label.

    Returns
    -------
    list of dict
        ``{**point, **result}`` for each point, in the order of ``points`` (an entry of the result
        overrides an entry of the point with the same name).

    Raises
    ------
    ValueError
        Naming ``points`` when a point is not a JSON-serialisable dict, or ``fn`` when it returns
        something other than a dict.

    Examples
    --------
    >>> import tempfile
    >>> from mfattn.companion.sweep import run_sweep
    >>> calls = []
    >>> def square(x):
    ...     calls.append(x)
    ...     return {"y": x * x}
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     first = run_sweep(square, [{"x": 1}, {"x": 2}], folder, progress=False)
    ...     again = run_sweep(square, [{"x": 2}, {"x": 3}], folder, progress=False)
    >>> first
    [{'x': 1, 'y': 1}, {'x': 2, 'y': 4}]
    >>> again, calls  # x = 2 was loaded, not recomputed
    ([{'x': 2, 'y': 4}, {'x': 3, 'y': 9}], [1, 2, 3])
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for p in points:
        _check_point(p, "points")
    out = []
    for p in progress_bar(points, enabled=progress, desc=desc):
        path = folder / f"{point_key(p)}.json"
        result = _read_damaged_or(path, lambda q: json.loads(q.read_text())["result"]) if path.exists() else None
        if result is None:
            result = fn(**p)
            if not isinstance(result, dict):
                raise ValueError(f"fn: must return a dict, got {type(result).__name__}")
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"point": p, "result": result}))
            os.replace(tmp, path)
        out.append({**p, **result})
    return out


def memo(fn: Callable[..., object], point: dict, folder, *, name: str = "memo", trusted: bool = False):
    """``fn(**point)``, saved to ``folder/<name>-<point_key(point)>.pt`` when it finishes and loaded
    from there on a later call with the same ``point`` instead of being recomputed.

    For results that hold tensors (a reference flow, a minimiser): anything ``torch.save``
    writes and ``torch.load(weights_only=True)`` reads back, i.e. tensors, numbers, strings,
    ``None`` and lists, tuples and dicts of them. A :class:`~mfattn.flows.integrate.Run` (a
    reference flow, an SGD run) is written by :meth:`~mfattn.flows.integrate.Run.save` to
    ``<name>-<key>.run.pt`` and read back by :meth:`~mfattn.flows.integrate.Run.load`, which
    unpickles no code. The file is written atomically (a temporary file, then a rename), so an
    interruption never leaves a partial result behind.

    Parameters
    ----------
    fn : callable
        Called as ``fn(**point)``.
    point : dict
        Its keyword arguments, JSON-serialisable; with ``name`` they name the saved result.
    folder : str or path
        Folder of the saved results; created if missing.
    name : str, default "memo"
        A prefix of the file name, so that different functions with the same arguments do not
        share a file.
    trusted : bool, default False
        Load with ``torch.load(weights_only=False)``: any picklable result (a solver's result
        object, a dataclass). Unpickling runs code, so use it only for a folder this computation
        wrote itself, as the chapters' caches under ``runs/`` are.

    Returns
    -------
    object
        What ``fn(**point)`` returned (on a later call: its saved copy).

    Raises
    ------
    ValueError
        Naming ``point`` when it is not a JSON-serialisable dict, or ``name`` when it is not a
        plain word (letters, digits, ``-``, ``_``).

    Examples
    --------
    >>> import tempfile, torch
    >>> from mfattn.companion.sweep import memo
    >>> calls = []
    >>> def flow(n):
    ...     calls.append(n)
    ...     return {"path": torch.arange(n, dtype=torch.float64)}
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     a = memo(flow, {"n": 3}, folder, name="flow")
    ...     b = memo(flow, {"n": 3}, folder, name="flow")
    >>> b["path"].tolist(), calls  # the second call loaded the first one's result
    ([0.0, 1.0, 2.0], [3])
    >>> from types import SimpleNamespace
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     for _ in range(2):
    ...         r = memo(lambda n: SimpleNamespace(n=n), {"n": 4}, folder, name="obj", trusted=True)
    >>> r.n
    4

    A run comes back as a run, read without unpickling:

    >>> from mfattn.flows.dynamics import reference_flow
    >>> from mfattn.models.tasks import example
    >>> model, data, h0, _ = example()
    >>> ref = lambda T: reference_flow(model, data, h0, T=T, step=0.25, record_every=0.25, progress=False)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     first, again = (memo(ref, {"T": 0.5}, folder, name="ref") for _ in range(2))
    >>> type(again).__name__, torch.equal(again.risk, first.risk)
    ('Run', True)
    """
    import re

    import torch

    _check_point(point, "point")
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        raise ValueError(f"name: {name!r} is not a plain word (letters, digits, - and _)")
    from ..flows.integrate import Run

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{point_key(point)}.pt"
    run_path = path.with_suffix(".run.pt")  # a Run, in its own format (Run.save), read without unpickling
    run = _read_damaged_or(run_path, lambda q: Run.load(q, trusted=trusted)) if run_path.exists() else None
    if run is not None:
        return run
    saved = _read_damaged_or(path, lambda q: torch.load(q, weights_only=not trusted)) if path.exists() else None
    if saved is not None:
        return saved["result"]
    result = fn(**point)
    if isinstance(result, Run):
        result.save(run_path)
        return result
    tmp = path.with_suffix(".tmp")
    torch.save({"point": point, "result": result}, tmp)
    os.replace(tmp, path)
    return result


def run_chaos(setup, N_grid, n_seeds: int, n_ref: int, folder, *, key: dict | None = None,
              progress: bool = True, desc: str = "runs of the N-grid"):
    """The propagation-of-chaos experiment of :class:`mfattn.analysis.chaos.ChaosSetup` over a grid,
    through the chapters' cache: the two references saved by :func:`memo`, every run by
    :func:`run_sweep` as it finishes, so an interrupted grid resumes where it stopped.

    Parameters
    ----------
    setup : ChaosSetup
        The model, data, draws and dynamics.
    N_grid : sequence of int
        The numbers of heads.
    n_seeds : int
        Runs per ``N`` (seed indices ``0 .. n_seeds - 1``).
    n_ref : int
        Heads of each reference.
    folder : str or path
        The cache folder (a chapter's ``cfg.folder``).
    key : dict, optional
        JSON values that tell this experiment apart from the chapter's others in the same folder
        (e.g. the optimizer, the initial law); part of every saved file's name.
    progress : bool, default True
        A progress bar over the runs.
    desc : str
        The bar's label.

    Returns
    -------
    ChaosResult
        The runs, in the order of ``N_grid`` then the seeds, with the two references bound to the
        setup's model and data (``references``).

    Raises
    ------
    ValueError
        Naming ``N_grid``, ``n_seeds`` or ``n_ref`` when invalid, or ``key`` when one of its names is
        one the experiment uses itself (``kind``, ``N``, ``s``, ``n_ref``, ``which``).

    Examples
    --------
    >>> import tempfile, torch
    >>> from mfattn.analysis.chaos import ChaosSetup
    >>> from mfattn.companion.sweep import run_chaos
    >>> from mfattn.flows.integrate import integrate
    >>> from mfattn.flows.seeds import stream
    >>> from mfattn.models.linear import linear_regression
    >>> model, data, _ = linear_regression(d=3, n=20, generator=torch.Generator().manual_seed(0))
    >>> setup = ChaosSetup(
    ...     model, data,
    ...     draw=lambda n, *name: torch.randn(n, 3, generator=stream(0, name), dtype=torch.float64),
    ...     train=lambda h0, **kw: integrate(model, data, h0, stepper="gd", step=0.1, T=1.0,
    ...                                      record_every=0.5, batch_size=None, progress=False, **kw))
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     res = run_chaos(setup, (4, 16), 2, 64, folder, key={"law": "gauss"}, progress=False)
    >>> res.N.tolist()
    [4.0, 4.0, 16.0, 16.0]
    """
    from ..analysis.chaos import ChaosResult

    if (not isinstance(N_grid, (list, tuple)) or not N_grid
            or any(not isinstance(N, int) or isinstance(N, bool) or N < 1 for N in N_grid)):
        raise ValueError(f"N_grid: expected a non-empty sequence of positive integers, got {N_grid!r}")
    for value, name in ((n_seeds, "n_seeds"), (n_ref, "n_ref")):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    key = dict(key or {})
    taken = sorted(set(key) & {"kind", "N", "s", "n_ref", "which"})
    if taken:
        raise ValueError(f"key: {', '.join(taken)} name the experiment's own fields; choose other names")
    refs = [memo(lambda which, n_ref, **_: setup.reference(which, n_ref), dict(which=w, n_ref=n_ref, **key), folder,
                 name="chaos-reference").bind(setup.model, setup.data) for w in (1, 2)]
    points = [dict(kind="chaos", N=N, s=s, n_ref=n_ref, **key) for N in N_grid for s in range(n_seeds)]
    rows = run_sweep(lambda N, s, **_: setup.point(refs, N, s), points, folder, progress=progress, desc=desc)
    return ChaosResult(rows, references=refs)


def run_perturbations(model, data, specs: dict, folder, *, key: dict, zeta=1.0, progress: bool = True,
                      desc: str = "perturbed runs") -> dict:
    """The runs of the reference flow (21) from perturbed Dirac measures
    (:func:`mfattn.analysis.stability.perturbation_run`), through the chapters' cache: each saved by
    :func:`run_sweep` as it finishes and read back as a
    :class:`~mfattn.analysis.stability.PerturbationRun`.

    A run is keyed by its name, its sizes (``T``, ``step``, ``record_every``, ``orbit``, ``size``, the
    number of heads) and ``key``, not by the bits of its start: a minimiser's last bits vary from one
    process to the next, and the configuration in ``key`` fixes the start.

    Parameters
    ----------
    model : HeadModel
        The head model.
    data : Dataset
        The data of the risk (10).
    specs : dict
        ``{name: Perturbation}`` (:class:`mfattn.analysis.stability.Perturbation`), names unique words.
    folder : str or path
        The cache folder (a chapter's ``cfg.folder``).
    key : dict
        JSON values that fix the starts (seed, data size, ...); part of every saved file's name. They may
        not reuse a field of the run's own key.
    zeta : float, profile or callable
        The learning-rate profile of the flow.
    progress : bool, default True
        A progress bar over the runs.
    desc : str
        The bar's label.

    Returns
    -------
    dict
        ``{name: PerturbationRun}``, in the order of ``specs``; heads in the model's dtype and device.

    Raises
    ------
    ValueError
        Naming ``specs`` when it is empty or holds something else than ``Perturbation`` records, or
        ``key`` when one of its names is one of the run's own fields.

    Examples
    --------
    >>> import tempfile, torch
    >>> from mfattn.analysis.stability import Perturbation, translate, zero_hessian
    >>> from mfattn.companion.sweep import run_perturbations
    >>> from mfattn.models.tasks import example
    >>> model, data, _, _ = example()
    >>> zero = torch.zeros(model.d_omega, dtype=torch.float64)
    >>> start = translate(model, zero, zero_hessian(model, data).v_min, 0.01)
    >>> specs = {"rate": Perturbation.for_rate(start, zero, 0.01, dt=0.05)}
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     runs = [run_perturbations(model, data, specs, folder, key={"seed": 0}, progress=False)
    ...             for _ in range(2)]  # the second call reads the first one's run
    >>> runs[1]["rate"].heads.shape, bool((runs[0]["rate"].w2 == runs[1]["rate"].w2).all())
    (torch.Size([7, 1, 24]), True)
    """
    from ..analysis.stability import Perturbation, PerturbationRun, perturbation_run

    if not isinstance(specs, dict) or not specs or not all(isinstance(p, Perturbation) for p in specs.values()):
        raise ValueError("specs: expected a non-empty dict {name: Perturbation}")
    taken = sorted(set(key) & {"name", "T", "step", "record_every", "orbit", "size", "n_heads"})
    if taken:
        raise ValueError(f"key: {', '.join(taken)} name the run's own fields; choose other names")

    def go(name, **_):
        p = specs[name]
        return perturbation_run(model, data, p.heads0, p.centre, T=p.T, step=p.step, record_every=p.record_every,
                                zeta=zeta, orbit=p.orbit).as_dict()

    points = [dict(name=name, T=p.T, step=p.step, record_every=p.record_every, orbit=p.orbit, size=p.size,
                   n_heads=int(p.heads0.shape[0]), **key) for name, p in specs.items()]
    return {row["name"]: PerturbationRun.from_dict(row, dtype=model.dtype, device=model.device)
            for row in run_sweep(go, points, folder, progress=progress, desc=desc)}
