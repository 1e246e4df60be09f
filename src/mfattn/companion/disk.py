"""What ``runs/`` holds, and cleaning it: ``python -m mfattn runs`` and ``python -m mfattn clean``.

Everything the runner writes lies under the checkout's ``runs/`` (ignored by git):

* ``runs/CHAPTER/cache/KEY/``: finished sweep points of one configuration (a rerun resumes there);
* ``runs/CHAPTER/replicate/seed-S/``: the runs of ``python -m mfattn replicate`` (a rerun reuses them);
* ``runs/CHAPTER/TIMESTAMP/`` (or any other folder a ``--out`` named there): executed notebooks,
  with their HTML pages;
* ``runs/.html-static/DIGEST/``: the theme's assets that HTML pages share (``mfattn.companion.runner.write_html``).

Beside them, in the system's temporary folder, a run that names no ``cache_dir`` (nbval, a reader's
Jupyter) keeps its work in ``mfattn-NN-run-*`` (:func:`mfattn.companion.sweep.scratch_folder`); it goes
with its process, and a killed process's folder goes at the next run. Those of ended processes
that are still there, and the folders earlier versions left behind, are entries too (:func:`temporary`).

:func:`inventory` lists the entries with their sizes; :func:`clean` removes a selection, and only shows what
it would remove unless told ``yes``.
"""

from __future__ import annotations

import re
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

__all__ = ["KINDS", "LEFT_AFTER", "temporary", "inventory", "clean", "pack", "restore", "main_runs", "main_clean"]

#: What an entry is: of ``runs/``, or a temporary folder a run left (:func:`temporary`).
KINDS = ("cache", "replicate", "run", "html-assets", "temporary")

#: An earlier version's temporary folder (``mfattn-07-ab12cd34``): it holds no lock, so only its age
#: (:data:`LEFT_AFTER` seconds unchanged) says that its run has ended.
_EARLIER = re.compile(r"mfattn-\d\d-[a-z0-9_]{8}")
LEFT_AFTER = 3600.0


def temporary(tmp=None) -> list[Path]:
    """The temporary folders runs left in ``tmp`` (the system's temporary folder by default): those of
    ended processes (:func:`mfattn.companion.sweep.ended_folders`) and those of earlier versions unchanged for
    :data:`LEFT_AFTER` seconds.

    Parameters
    ----------
    tmp : pathlib.Path or None

    Returns
    -------
    list of pathlib.Path
        Sorted by name.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from mfattn.companion.disk import temporary
    >>> tmp = pathlib.Path((tmp_dir := tempfile.TemporaryDirectory()).name)
    >>> for name in ("mfattn-07-run-ab12cd34", "mfattn-07-ab12cd34", "mfattn-kernel-ab12cd34"):
    ...     (tmp / name).mkdir()
    >>> _ = (tmp / "mfattn-07-run-ab12cd34" / ".alive").write_bytes(b"")   # unlocked: its process ended
    >>> [p.name for p in temporary(tmp)]                                    # the earlier one is too recent
    ['mfattn-07-run-ab12cd34']
    """
    from .sweep import ended_folders

    tmp, now = Path(tmp or tempfile.gettempdir()), time.time()
    earlier = [p for p in tmp.glob("mfattn-*") if _EARLIER.fullmatch(p.name) and p.is_dir()
               and now - _mtime(p) >= LEFT_AFTER]
    return sorted(ended_folders(tmp) + earlier)


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(f.lstat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _mtime(path: Path) -> float:
    inside = path.rglob("*") if path.is_dir() else []
    return max(f.lstat().st_mtime for f in [path, *inside])


def inventory(root: Path, tmp=None) -> list[dict]:
    """Every entry of ``root/runs``, and the temporary folders runs left (:func:`temporary`): its kind
    (:data:`KINDS`), chapter, path, bytes and last change.

    Parameters
    ----------
    root : pathlib.Path
        The checkout.
    tmp : pathlib.Path or None
        Where to look for temporary folders (default: the system's temporary folder).

    Returns
    -------
    list of dict
        ``{"kind", "chapter", "path", "bytes", "mtime"}``, one per cache configuration, replicate
        seed, run folder, shared asset set and temporary folder.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from mfattn.companion.disk import inventory
    >>> root = pathlib.Path((root_dir := tempfile.TemporaryDirectory()).name)
    >>> (root / "runs" / "05-stability" / "cache" / "abc").mkdir(parents=True)
    >>> _ = (root / "runs" / "05-stability" / "cache" / "abc" / "p.json").write_text("{}")
    >>> [(e["kind"], e["chapter"], e["bytes"]) for e in inventory(root, tmp=root)]
    [('cache', '05-stability', 2)]
    """
    runs = Path(root) / "runs"
    found = []  # (kind, chapter, path)
    for top in sorted(runs.iterdir()) if runs.is_dir() else []:
        if top.name == ".html-static":
            found += [("html-assets", "-", d) for d in sorted(top.iterdir())]
        elif not top.is_dir():
            found.append(("run", "-", top))
        else:
            for sub in sorted(top.iterdir()):
                if sub.name in ("cache", "replicate") and sub.is_dir():
                    found += [(sub.name, top.name, d) for d in sorted(sub.iterdir())]
                else:
                    found.append(("run", top.name, sub))
    found += [("temporary", "-", p) for p in temporary(tmp)]
    return [{"kind": k, "chapter": c, "path": p, "bytes": _size(p), "mtime": _mtime(p)} for k, c, p in found]


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def main_runs(root: Path) -> int:
    """``python -m mfattn runs``: what ``runs/`` holds, by chapter and kind, with sizes, and the temporary
    folders runs left; returns 0."""
    items = inventory(root)
    if not items:
        print(f"{Path(root) / 'runs'}: empty")
        return 0
    groups: dict = {}  # (chapter, kind): (entries, bytes, last change)
    for e in items:
        n, b, t = groups.get((e["chapter"], e["kind"]), (0, 0, 0.0))
        groups[e["chapter"], e["kind"]] = (n + 1, b + e["bytes"], max(t, e["mtime"]))
    w = max(len(c) for c, _ in groups)
    print(f"{'chapter'.ljust(w)}  {'kind'.ljust(11)}  {'items':>5}  {'size':>10}  last change")
    for (chapter, kind), (n, b, t) in sorted(groups.items()):
        print(f"{chapter.ljust(w)}  {kind.ljust(11)}  {n:>5}  {_mb(b):>10}  {time.strftime('%Y-%m-%d %H:%M', time.localtime(t))}")
    also = f" and {tempfile.gettempdir()} (temporary)" if any(e["kind"] == "temporary" for e in items) else ""
    print(f"total {_mb(sum(e['bytes'] for e in items))} in {Path(root) / 'runs'}{also}; "
          "python -m mfattn clean shows what it would remove")
    return 0


def clean(root: Path, kinds=KINDS, *, chapter: str | None = None, older_than_days: float | None = None,
          yes: bool = False, tmp=None) -> list[dict]:
    """Remove the entries (:func:`inventory`) of the given kinds (and chapter, and age); with ``yes=False``
    remove nothing and return what would go. Shared HTML assets go only when no page links to them.

    Parameters
    ----------
    root : pathlib.Path
        The checkout.
    kinds : sequence of str
        Among :data:`KINDS`.
    chapter : str or None
        Only this chapter's entries (its full name).
    older_than_days : float or None
        Only entries unchanged for at least this many days.
    yes : bool
        Remove them; otherwise only list.
    tmp : pathlib.Path or None
        Where to look for temporary folders (:func:`inventory`).

    Returns
    -------
    list of dict
        The entries removed (or that would be), as :func:`inventory` gives them.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from mfattn.companion.disk import clean
    >>> root = pathlib.Path((root_dir := tempfile.TemporaryDirectory()).name)
    >>> (root / "runs" / "05-stability" / "cache" / "abc").mkdir(parents=True)
    >>> [e["kind"] for e in clean(root, tmp=root)], (root / "runs" / "05-stability" / "cache" / "abc").exists()
    (['cache'], True)
    >>> [e["kind"] for e in clean(root, yes=True, tmp=root)], (root / "runs" / "05-stability" / "cache" / "abc").exists()
    (['cache'], False)
    """
    bad = sorted(set(kinds) - set(KINDS))
    if bad:
        raise ValueError(f"kinds: {bad} are not among {list(KINDS)}")
    if older_than_days is not None and not older_than_days >= 0:
        raise ValueError(f"older_than_days: expected a number >= 0, got {older_than_days!r}")
    items, now = inventory(root, tmp), time.time()
    old = lambda e: older_than_days is None or now - e["mtime"] >= 86400 * older_than_days  # noqa: E731
    chosen = [e for e in items if e["kind"] in kinds and e["kind"] != "html-assets" and old(e)
              and (chapter is None or e["chapter"] == chapter)]
    if "html-assets" in kinds:
        # assets stay while a page that is not being removed links to them
        going = {e["path"] for e in chosen}
        linked = {link.resolve() for link in (Path(root) / "runs").rglob("_static")
                  if link.is_symlink() and not any(p in going for p in link.parents)}
        # (shared by every chapter: the chapter filter does not apply, the age does)
        chosen += [e for e in items
                   if e["kind"] == "html-assets" and old(e) and e["path"].resolve() not in linked]
    if yes:
        for e in chosen:
            p = e["path"]
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)
            # folders the removal left empty (runs/CHAPTER/cache/, runs/CHAPTER/) go too
            for parent in p.parents if e["kind"] != "temporary" else ():
                if parent == Path(root) / "runs" or not parent.is_dir() or any(parent.iterdir()):
                    break
                parent.rmdir()
    return chosen


def main_clean(root: Path, args) -> int:
    """``python -m mfattn clean``: list what the selection would remove, or remove it with ``--yes``."""
    kinds = [k for k, flag in (("cache", args.caches), ("replicate", args.replicates), ("run", args.runs),
                               ("html-assets", args.runs or args.html_assets), ("temporary", args.temporary))
             if flag] or list(KINDS)
    chosen = clean(root, kinds, chapter=args.chapter, older_than_days=args.older_than, yes=args.yes)
    total = _mb(sum(e["bytes"] for e in chosen))
    for e in chosen:
        print(f"{'removed' if args.yes else 'would remove'}  {e['kind']:<11}  {_mb(e['bytes']):>10}  {e['path']}")
    if not chosen:
        print("nothing to remove")
    elif args.yes:
        print(f"removed {len(chosen)} entries, {total}")
    else:
        print(f"{len(chosen)} entries, {total}: nothing removed; add --yes to remove them")
    return 0


def pack(root: Path, src: Path, values: dict, out) -> tuple[Path, int]:
    """Pack the finished work of one configuration of a chapter (its cache folder, see
    ``mfattn.companion.runner.cache_folder_of``) into the archive ``out`` (``.tar.gz``), so that
    a long run can go on elsewhere: on a machine lent for a few minutes at a time, each slice
    restores the archive, runs until its time is up (every finished point is saved as it finishes)
    and packs again.

    Parameters
    ----------
    root : pathlib.Path
        The checkout.
    src : pathlib.Path
        The chapter's MyST source.
    values : dict
        The run's parameters, as ``run`` takes them (``profile``, ``device`` and ``-p`` values).
    out : str or pathlib.Path
        The archive to write.

    Returns
    -------
    (pathlib.Path, int)
        The archive and the number of files it holds.

    Raises
    ------
    ValueError
        Naming ``values`` when the configuration has no finished work here, or a parameter that is
        invalid.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> import mfattn
    >>> from mfattn.companion.chapters import check_values
    >>> from mfattn.companion.disk import pack, restore
    >>> from mfattn.companion.runner import cache_folder_of
    >>> src = pathlib.Path(mfattn.__file__).resolve().parents[2] / "notebooks" / "05-stability.md"
    >>> root = pathlib.Path((root_dir := tempfile.TemporaryDirectory()).name)
    >>> folder = cache_folder_of(root, src, check_values(src, {}), "cpu")
    >>> folder.mkdir(parents=True)
    >>> _ = (folder / "point.json").write_text("{}")
    >>> archive, n = pack(root, src, {}, root / "slice.tar.gz")
    >>> other = pathlib.Path((other_dir := tempfile.TemporaryDirectory()).name)          # another checkout of the same commit
    >>> n, [p.relative_to(other).as_posix() == folder.relative_to(root).as_posix() for p in restore(other, archive)]
    (1, [True])
    """
    from .chapters import check_values
    from .runner import cache_folder_of, resolve_device

    config = check_values(src, values)
    folder = cache_folder_of(root, src, config, resolve_device(config.get("device", "cpu")))
    files = sorted(f for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else []
    if not files:
        raise ValueError(f"values: no finished work of this configuration in {folder} (run it first)")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.partial")
    with tarfile.open(tmp, "w:gz") as tar:
        for f in files:
            tar.add(f, arcname=(Path("runs") / src.stem / "cache" / folder.name / f.relative_to(folder)).as_posix())
    tmp.replace(out)
    return out, len(files)


def restore(root: Path, archive) -> list[Path]:
    """Unpack an archive of :func:`pack` into the checkout's ``runs/`` (only there: any other path in
    it is refused), beside what is already finished. Returns the cache folders it filled.

    Parameters
    ----------
    root : pathlib.Path
        The checkout.
    archive : str or pathlib.Path
        A ``.tar.gz`` written by :func:`pack`.

    Returns
    -------
    list of pathlib.Path

    Raises
    ------
    ValueError
        Naming ``archive`` when it is missing, unreadable, or holds a path outside
        ``runs/CHAPTER/cache/``.

    Examples
    --------
    See :func:`pack`.
    """
    archive = Path(archive)
    try:
        tar = tarfile.open(archive, "r:gz")
    except (OSError, tarfile.TarError) as e:
        raise ValueError(f"archive: {archive} cannot be read ({e})") from None
    with tar:
        members = tar.getmembers()
        for m in members:
            parts = Path(m.name).parts
            if (m.issym() or m.islnk() or len(parts) < 5 or parts[0] != "runs" or parts[2] != "cache"
                    or ".." in parts or Path(m.name).is_absolute()):
                raise ValueError(f"archive: {archive} holds {m.name!r}, outside runs/CHAPTER/cache/")
        tar.extractall(Path(root), members=members, filter="data")
    return sorted({Path(root).joinpath(*Path(m.name).parts[:4]) for m in members})


def add_arguments(p) -> None:
    p.add_argument("--caches", action="store_true", help="finished sweep points (runs/CHAPTER/cache/)")
    p.add_argument("--replicates", action="store_true", help="replication runs (runs/CHAPTER/replicate/)")
    p.add_argument("--runs", action="store_true", help="executed notebooks and their pages (runs/CHAPTER/*/)")
    p.add_argument("--html-assets", action="store_true", help="shared page assets no page links to")
    p.add_argument("--temporary", action="store_true", help="temporary folders of ended runs that named no "
                   f"cache_dir, in {tempfile.gettempdir()}, and those earlier versions left")
    p.add_argument("--chapter", default=None, help="only this chapter (name or prefix), or a folder of runs/ "
                   "that `runs` lists")
    p.add_argument("--older-than", type=float, default=None, metavar="DAYS", help="only what is unchanged that long")
    p.add_argument("--yes", action="store_true", help="remove (without it, only list what would go)")
