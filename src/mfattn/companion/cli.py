"""Command line: ``python -m mfattn run CHAPTER ...`` executes a chapter through papermill;
``torchrun ... -m mfattn shard ...`` runs the engine with heads sharded over processes
(``mfattn.companion.shard``); ``python -m mfattn bench`` measures the engine (:mod:`mfattn.companion.bench`);
``python -m mfattn check-html`` checks the built book in headless Chromium (:mod:`mfattn.companion.checkhtml`);
``python -m mfattn params CHAPTER`` lists a chapter's parameters (:mod:`mfattn.companion.chapters`);
``python -m mfattn new NAME`` starts a chapter from the template ``mfattn/companion/templates/chapter.md``;
``python -m mfattn compare RUN`` and ``list`` (:mod:`mfattn.companion.runner`).

The chapter's jupytext MyST source ``notebooks/CHAPTER.md`` is converted to a notebook and
executed with the given parameters. The executed copy goes to a fresh run folder
(``runs/CHAPTER/YYYYmmdd-HHMMSS``) or ``--out``; the committed ``notebooks/CHAPTER.ipynb`` is
replaced only with ``--inplace``, which refuses overrides (committed notebooks are the ``ci``
profile at its defaults).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import sys
from pathlib import Path

from . import disk, replicate
from .chapters import UserError, chapters, declared, find_chapter, parameter_rows, repo_root
from .runner import (EXIT_FAILED_CLAIM, compare, fmt_seconds, list_chapters, new_failures, run_chapter, verdict_summary,
                     write_html)


def parse_value(text: str):
    """A Python literal when the text is one (``3``, ``1e-3``, ``[1, 2]``, ``None``), else the string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def new_chapter(root: Path, name: str, title: str | None = None) -> Path:
    """``python -m mfattn new NAME``: ``notebooks/NN-NAME.md`` from the chapter template (the next free
    number). It enters ``_toc.yml`` when ``run NN --inplace`` writes its notebook (the book renders
    chapters from their executed notebooks, so a listed chapter without one would break ``make book``).
    Returns the new source's path."""
    import re

    if not re.fullmatch(r"[a-z][a-z0-9-]*", name):
        raise UserError(f"name {name!r}: use lowercase letters, digits and hyphens, e.g. my-experiment")
    existing = chapters(root)
    if any(c.split("-", 1)[-1] == name for c in existing):
        raise UserError(f"name {name!r}: a chapter of that name exists")
    numbers = [int(c[:2]) for c in existing if c[:2].isdigit()]
    stem = f"{max(numbers, default=0) + 1:02d}-{name}"
    target = root / "notebooks" / f"{stem}.md"
    template = (Path(__file__).parent / "templates" / "chapter.md").read_text()
    text = (template.replace("@@SLUG@@", name).replace("@@FILENAME@@", target.name)
            .replace("@@TITLE@@", title or name.replace("-", " ").capitalize()))
    target.write_text(text)
    print(f"created {target.relative_to(root)}. Try it with: python -m mfattn run {stem[:2]} (the notebook goes "
          f"under runs/, which git ignores); when it is ready, python -m mfattn run {stem[:2]} --inplace writes "
          f"notebooks/{stem}.ipynb and lists the chapter in _toc.yml, and make book shows it. A verdict's ref "
          "names a result declared in src/mfattn/companion/results.py.")
    return target


def print_params(src: Path) -> None:
    """``python -m mfattn params CHAPTER``: each parameter, its value per profile, its meaning."""
    rows = parameter_rows(src)
    rules = declared(src) or {}
    profs = [k for k in rows[0] if k not in ("name", "comment")]
    head = ["parameter", *profs, "meaning"]

    def meaning(r):
        e = rules.get(r["name"], {})
        return r["comment"] + (f" (one of {', '.join(map(str, e['choices']))})" if "choices" in e else
                               f" (in {e['range']})" if "range" in e else "")
    body = [[r["name"], *(repr(r[p]) for p in profs), meaning(r)] for r in rows]
    widths = [max(len(str(x[i])) for x in [head] + body) for i in range(len(head) - 1)]
    print(f"{src.stem}: set one with  python -m mfattn run {src.stem[:2]} -p NAME VALUE  (or --profile NAME)")
    for line in [head] + body:
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)) + "  " + str(line[-1]))


def _values(args) -> dict:
    """The ``-p NAME VALUE`` pairs and ``--profile`` of ``run`` and ``cache pack``, as parameter values."""
    values = {name: parse_value(value) for name, value in args.param}
    return values if args.profile is None else dict(values, profile=args.profile)


#: The exit statuses of every command (shown by ``--help`` and in the README).
EXIT_STATUSES = """exit status:
  0    done (for run: every claim and derived verdict passed; a failed hypothesis or check is reported)
  1    a chapter's cell, or a command, failed (one line names it, and the partial notebook)
  2    usage: a bad argument or value, an unknown chapter, parameter or name (one line, nothing runs)
  3    run: the chapter ran to its end and a claim or derived verdict failed (the summary names it)
  130  interrupted (Ctrl-C); a rerun of the same command resumes"""


def main(argv=None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("mfattn: interrupted", file=sys.stderr)
        return 130


def _main(argv=None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="python -m mfattn", description=__doc__.splitlines()[0],
                                     formatter_class=raw, epilog=EXIT_STATUSES)
    sub = parser.add_subparsers(dest="command", required=True)
    values = argparse.ArgumentParser(add_help=False)  # the parameters of run and cache pack
    values.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    values.add_argument("--profile", help="profile of sizes: ci (default) or paper")
    p = {}
    for name, (_, text) in COMMANDS.items():
        extra = dict(parents=[values], epilog=EXIT_STATUSES, formatter_class=raw) if name == "run" else {}
        p[name] = sub.add_parser(name, help=text, **extra)
    p["run"].add_argument("chapter", help="chapter name or prefix, e.g. 01-preliminaries or 01")
    p["run"].add_argument("--out", help="folder for the executed notebook (default: a new runs/ folder)")
    p["run"].add_argument("--inplace", action="store_true",
                          help="replace the committed notebooks/CHAPTER.ipynb")
    p["run"].add_argument("--timeout", type=int, default=None, help="per-cell timeout in seconds")
    p["run"].add_argument("--quiet", action="store_true", help="no progress bars")
    p["run"].add_argument("--no-cache", action="store_true",
                          help="compute everything afresh (default: finished work is kept under "
                          "runs/CHAPTER/cache/ per configuration, and a rerun resumes)")
    p["run"].add_argument("--html", action="store_true",
                          help="also write an HTML page of the executed run beside it")
    p["run"].add_argument("--yes", action="store_true",
                          help="run even when the estimate exceeds the ceiling (12 h, or 100x the committed "
                          "ci run)")
    p["run"].add_argument("--fail-on", choices=("any", "new"), default="any",
                          help="exit 3 when a claim or derived verdict fails (any, the default), or only "
                          "when one fails that passed in the committed notebook (new: a script can tell 'as "
                          "committed' from a new failure)")
    disk.add_arguments(p["clean"])
    cache_sub = p["cache"].add_subparsers(dest="action", required=True)
    p_pack = cache_sub.add_parser("pack", help="runs/CHAPTER/cache/KEY of this configuration -> a .tar.gz",
                                  parents=[values])
    p_pack.add_argument("chapter", help="chapter name or prefix, e.g. 02")
    p_pack.add_argument("--out", required=True, help="the archive to write (.tar.gz)")
    p_restore = cache_sub.add_parser("restore", help="a .tar.gz of cache pack -> runs/ (beside what is there)")
    p_restore.add_argument("archive")
    p["compare"].add_argument("run", help="an executed chapter notebook or its run folder (runs/CHAPTER/...)")
    p["html"].add_argument("notebook", help="an executed chapter notebook")
    p["new"].add_argument("name", help="lowercase words joined by hyphens, e.g. my-experiment")
    p["new"].add_argument("--title", default=None, help="the chapter's title")
    p["params"].add_argument("chapter", help="chapter name or prefix, e.g. 05")
    replicate.add_arguments(p["replicate"])
    # bench, shard and check-html load torch or numpy for their options: only when one of them is the
    # command, so that the other commands, their help and their usage errors start without them
    command = next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), None)
    if command in _MODULES:
        importlib.import_module(f".{_MODULES[command]}", __package__).add_arguments(p[command])
    args = parser.parse_args(argv)
    return COMMANDS[args.command][0](args)


# ------------------------------------------------------------------ one function per subcommand
def _cmd_run(args) -> int:
    root = repo_root()
    path = run_chapter(root, find_chapter(root, args.chapter), _values(args), out=args.out,
                       inplace=args.inplace, quiet=args.quiet, timeout=args.timeout, cache=not args.no_cache,
                       html=args.html, yes=args.yes)
    if args.fail_on == "new":
        fresh = new_failures(path, root / "notebooks" / path.name)
        if fresh:
            print("new failures against the committed notebook: " + " | ".join(fresh), file=sys.stderr)
        return EXIT_FAILED_CLAIM if fresh else 0
    return EXIT_FAILED_CLAIM if verdict_summary(path)[1] else 0


def _cmd_list(args) -> int:
    rows = list_chapters(repo_root())
    w = max(len(r[0]) for r in rows)
    print(f"{'chapter'.ljust(w)}  ci run  title")
    for stem, ttl, sec in rows:
        print(f"{stem.ljust(w)}  {(fmt_seconds(sec) if sec else '-').rjust(6)}  {ttl}")
    print("re-execute one into its committed notebook: python -m mfattn run CH --inplace; "
          "with other values: python -m mfattn run CH -p NAME VALUE (python -m mfattn params CH lists them)")
    return 0


def _cmd_runs(args) -> int:
    return disk.main_runs(repo_root())


def _cmd_clean(args) -> int:
    if args.chapter:
        # a folder of runs/ that `runs` lists (e.g. one an --out named) is taken as it is;
        # otherwise a chapter's name or prefix
        listed = {e["chapter"] for e in disk.inventory(repo_root())} - {"-"}
        if args.chapter not in listed:
            args.chapter = find_chapter(repo_root(), args.chapter).stem
    if args.older_than is not None and args.older_than < 0:
        raise UserError(f"--older-than {args.older_than:g}: must be >= 0 days")
    return disk.main_clean(repo_root(), args)


def _cmd_cache(args) -> int:
    root = repo_root()
    try:
        if args.action == "pack":
            src = find_chapter(root, args.chapter)
            out, n = disk.pack(root, src, _values(args), args.out)
            print(f"packed {n} finished files of {src.stem} into {out}; on another checkout of the same commit: "
                  f"python -m mfattn cache restore {out}, then the same run command resumes from them")
        else:
            for folder in disk.restore(root, args.archive):
                print(f"restored {sum(1 for f in folder.rglob('*') if f.is_file())} files into {folder.relative_to(root)}")
    except ValueError as e:
        raise UserError(str(e)) from None
    return 0


def _cmd_compare(args) -> int:
    compare(args.run)
    return 0


def _cmd_html(args) -> int:
    print(write_html(args.notebook))
    return 0


def _cmd_new(args) -> int:
    new_chapter(repo_root(), args.name, args.title)
    return 0


def _cmd_params(args) -> int:
    print_params(find_chapter(repo_root(), args.chapter))
    return 0


#: The subcommands whose options their own module adds (``add_arguments``), only when one is the command.
_MODULES = {"bench": "bench", "shard": "shard", "check-html": "checkhtml"}


def _delegate(module: str, function: str, *, status: bool):
    """A subcommand that ``module.function(args)`` carries out, imported when it runs; the exit status is
    what the function returns (``status``), else 0."""
    def command(args) -> int:
        result = getattr(importlib.import_module(f".{module}", __package__), function)(args)
        return result if status else 0
    return command


#: Each subcommand, in the order ``--help`` lists them: its function (``args -> exit status``) and its help.
COMMANDS = {
    "run": (_cmd_run, "execute a chapter with parameters (papermill)"),
    "list": (_cmd_list, "the chapters: name, title, measured run time of the committed ci notebook"),
    "runs": (_cmd_runs, "what runs/ holds (caches, replicates, runs, page assets), by chapter, with sizes, "
             "and the temporary folders runs left"),
    "clean": (_cmd_clean, "remove caches, replicates or runs from runs/, or temporary folders runs left "
              "(lists them first: nothing goes without --yes)"),
    "cache": (_cmd_cache, "pack one configuration's finished work into an archive, or restore one (a long "
              "run in slices on machines lent for minutes)"),
    "compare": (_cmd_compare, "a run's verdicts beside the committed notebook's"),
    "html": (_cmd_html, "an HTML page of an executed chapter notebook (nothing is re-executed)"),
    "new": (_cmd_new, "create notebooks/NN-NAME.md from the chapter template (run NN --inplace lists it in "
            "_toc.yml)"),
    "params": (_cmd_params, "a chapter's parameters: default per profile and meaning"),
    "replicate": (_delegate("replicate", "main", status=True), "re-run a chapter under other seeds and write "
                  "its replication record (replications/CHAPTER.json): each verdict's pass rate and spread"),
    "bench": (_delegate("bench", "main", status=False),
              "time and memory of the engine against a per-head loop and a naive batch"),
    "shard": (_delegate("shard", "run", status=False),
              "SGD or the reference flow with heads sharded over torchrun processes"),
    "check-html": (_delegate("checkhtml", "run", status=True), "open every page of the built book in headless "
                   "Chromium and report faults (mfattn.companion.checkhtml)"),
}
