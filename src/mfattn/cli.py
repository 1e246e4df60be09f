"""Command line: ``python -m mfattn run CHAPTER ...`` executes a chapter through papermill;
``torchrun ... -m mfattn shard ...`` runs the engine with heads sharded over processes
(:mod:`mfattn.distributed`); ``python -m mfattn bench`` measures the engine (:mod:`mfattn.bench`);
``python -m mfattn check-html`` checks the built book in headless Chromium (:mod:`mfattn.checkhtml`);
``python -m mfattn params CHAPTER`` lists a chapter's parameters (:mod:`mfattn.chapters`);
``python -m mfattn new NAME`` starts a chapter from the template ``mfattn/templates/chapter.md``.

The chapter's jupytext MyST source ``notebooks/CHAPTER.md`` is converted to a notebook and
executed with the given parameters. The executed copy goes to a fresh run folder
(``runs/CHAPTER/YYYYmmdd-HHMMSS``) or ``--out``; the committed ``notebooks/CHAPTER.ipynb`` is
replaced only with ``--inplace``, which refuses overrides (committed notebooks are the ``ci``
profile at its defaults).
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import os
import sys
from pathlib import Path


def repo_root() -> Path:
    """The checkout that holds ``notebooks/``: the current folder or an ancestor, else the
    checkout this package was installed from in editable mode."""
    for base in [Path.cwd(), *Path.cwd().parents, Path(__file__).resolve().parents[2]]:
        if (base / "notebooks").is_dir() and (base / "_toc.yml").is_file():
            return base
    raise SystemExit("mfattn: no notebooks/ folder found (run from the companion's checkout)")


def chapters(root: Path) -> list[str]:
    return sorted(p.stem for p in (root / "notebooks").glob("*.md"))


def find_chapter(root: Path, name: str) -> Path:
    stem = Path(name).stem
    names = chapters(root)
    match = [c for c in names if c == stem] or [c for c in names if c.startswith(stem)]
    if len(match) != 1:
        raise SystemExit(f"mfattn: chapter {name!r} matches {match or 'nothing'}; chapters: {', '.join(names)}")
    return root / "notebooks" / f"{match[0]}.md"


def parse_value(text: str):
    """A Python literal when the text is one (``3``, ``1e-3``, ``[1, 2]``, ``None``), else the string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def strip_papermill(nb) -> None:
    """Remove the run-specific metadata papermill adds, so committed notebooks diff cleanly."""
    nb.metadata.pop("papermill", None)
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)


def new_chapter(root: Path, name: str, title: str | None = None) -> Path:
    """``python -m mfattn new NAME``: ``notebooks/NN-NAME.md`` from the chapter template (the next free
    number), listed in ``_toc.yml`` after the last chapter. Returns the new source's path."""
    import re

    if not re.fullmatch(r"[a-z][a-z0-9-]*", name):
        raise SystemExit(f"mfattn: name {name!r}: use lowercase letters, digits and hyphens, e.g. my-experiment")
    existing = chapters(root)
    if any(c.split("-", 1)[-1] == name for c in existing):
        raise SystemExit(f"mfattn: name {name!r}: a chapter of that name exists")
    numbers = [int(c[:2]) for c in existing if c[:2].isdigit()]
    stem = f"{max(numbers, default=0) + 1:02d}-{name}"
    target = root / "notebooks" / f"{stem}.md"
    template = (Path(__file__).parent / "templates" / "chapter.md").read_text()
    text = (template.replace("@@SLUG@@", name).replace("@@FILENAME@@", target.name)
            .replace("@@TITLE@@", title or name.replace("-", " ").capitalize()))
    target.write_text(text)
    toc = root / "_toc.yml"
    lines = toc.read_text().splitlines()
    last = max((i for i, ln in enumerate(lines) if ln.strip().startswith("- file: notebooks/")), default=None)
    if last is None:
        raise SystemExit(f"mfattn: {toc} lists no chapter under notebooks/; add {stem} by hand")
    indent = lines[last][: len(lines[last]) - len(lines[last].lstrip())]
    lines.insert(last + 1, f"{indent}- file: notebooks/{stem}")
    toc.write_text("\n".join(lines) + "\n")
    print(f"created {target.relative_to(root)} and listed it in _toc.yml; run it with: "
          f"python -m mfattn run {stem[:2]} --out my-run/, then make execute to commit its notebook")
    return target


def print_params(src: Path) -> None:
    """``python -m mfattn params CHAPTER``: each parameter, its value per profile, its meaning."""
    from .chapters import parameter_rows

    rows = parameter_rows(src)
    profs = [k for k in rows[0] if k not in ("name", "comment")]
    head = ["parameter", *profs, "meaning"]
    body = [[r["name"], *(repr(r[p]) for p in profs), r["comment"]] for r in rows]
    widths = [max(len(str(x[i])) for x in [head] + body) for i in range(len(head) - 1)]
    print(f"{src.stem}: set one with  python -m mfattn run {src.stem[:2]} -p NAME VALUE  (or --profile NAME)")
    for line in [head] + body:
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)) + "  " + str(line[-1]))


def run(args) -> Path:
    import jupytext
    import nbformat
    import papermill as pm

    root = repo_root()
    src = find_chapter(root, args.chapter)
    params = {name: parse_value(value) for name, value in args.param}
    if args.profile is not None:
        params["profile"] = args.profile
    if args.inplace and params:
        raise SystemExit("mfattn: --inplace writes the committed ci-profile notebook; it takes no -p/--profile")
    if args.inplace:
        out_dir = src.parent
    elif args.out:
        out_dir = Path(args.out)
    else:
        out_dir = root / "runs" / src.stem / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{src.stem}.ipynb"
    committed = (src.parent / f"{src.stem}.ipynb").resolve()
    if target.resolve() == committed and not args.inplace:
        raise SystemExit(f"mfattn: {target} is the committed notebook; use --inplace to replace it")

    if str(params.get("device", "")).startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise SystemExit(f"mfattn: device {params['device']!r}: no CUDA device is available here "
                             "(use -p device cpu, or auto)")
    if args.inplace:
        # committed outputs are compared exactly by nbval: no progress bars (they write rates)
        os.environ["TQDM_DISABLE"] = "1"
        # a failed or interrupted run must not replace the committed notebook: run beside it, move on success
        final, target = target, out_dir / f".{src.stem}.partial.ipynb"
    nb = jupytext.read(src)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    source_nb = out_dir / f".{src.stem}.source.ipynb"
    nbformat.write(nb, source_nb)
    try:
        known = pm.inspect_notebook(str(source_nb))
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise SystemExit(f"mfattn: unknown parameter(s) {unknown}; {src.stem} takes {sorted(known)}")
        try:
            pm.execute_notebook(
                str(source_nb),
                str(target),
                parameters=params,
                kernel_name="python3",
                cwd=str(src.parent),
                progress_bar=not args.quiet,
                execution_timeout=args.timeout,
            )
        except pm.PapermillExecutionError as e:
            first = next((ln for ln in (e.source or "").splitlines() if ln.strip() and not ln.startswith(("#", ":"))),
                         "")
            raise SystemExit(f"mfattn: {src.stem} failed in cell [{e.exec_count}] ({first.strip()[:60]}): "
                             f"{e.ename}: {e.evalue}; partial notebook: {target}") from None
        except KeyboardInterrupt:
            raise SystemExit(f"mfattn: interrupted; partial notebook: {target}") from None
    finally:
        source_nb.unlink(missing_ok=True)
    if args.inplace:
        executed = nbformat.read(target, as_version=4)
        strip_papermill(executed)
        nbformat.write(executed, final)
        target.unlink()
        target = final
    print(f"executed {src.name} -> {target}")
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mfattn", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="execute a chapter with parameters (papermill)")
    p_run.add_argument("chapter", help="chapter name or prefix, e.g. 01-preliminaries or 01")
    p_run.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    p_run.add_argument("--profile", help="profile of sizes: ci (default) or paper")
    p_run.add_argument("--out", help="folder for the executed notebook (default: a new runs/ folder)")
    p_run.add_argument("--inplace", action="store_true", help="replace the committed notebooks/CHAPTER.ipynb")
    p_run.add_argument("--timeout", type=int, default=None, help="per-cell timeout in seconds")
    p_run.add_argument("--quiet", action="store_true", help="no progress bar")
    sub.add_parser("list", help="list the chapters")
    p_new = sub.add_parser("new", help="create notebooks/NN-NAME.md from the chapter template, listed in _toc.yml")
    p_new.add_argument("name", help="lowercase words joined by hyphens, e.g. my-experiment")
    p_new.add_argument("--title", default=None, help="the chapter's title")
    p_params = sub.add_parser("params", help="a chapter's parameters: default per profile and meaning")
    p_params.add_argument("chapter", help="chapter name or prefix, e.g. 05")
    from . import bench, distributed

    p_bench = sub.add_parser("bench", help="time and memory of the engine against a per-head loop and a naive batch")
    bench.add_arguments(p_bench)

    p_shard = sub.add_parser("shard", help="SGD or the reference flow with heads sharded over torchrun processes")
    distributed.add_arguments(p_shard)
    p_html = sub.add_parser("check-html", help="open every page of the built book in headless Chromium and "
                            "report faults (mfattn.checkhtml)")
    p_html.add_argument("root", nargs="?", default="_build/html", help="the built site (default _build/html)")
    p_html.add_argument("--chromium", default=None, help="the Chromium executable (default /usr/bin/chromium)")
    args = parser.parse_args(argv)
    if args.command == "check-html":
        from . import checkhtml

        return checkhtml.main([args.root] + (["--chromium", args.chromium] if args.chromium else []))
    if args.command == "bench":
        bench.main(args)
        return 0
    if args.command == "shard":
        distributed.run(args)
        return 0
    if args.command == "new":
        new_chapter(repo_root(), args.name, args.title)
        return 0
    if args.command == "params":
        print_params(find_chapter(repo_root(), args.chapter))
        return 0
    if args.command == "list":
        print("\n".join(chapters(repo_root())))
        return 0
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
