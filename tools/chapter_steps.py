"""One step of each kind of work every chapter repeats, timed, and the chapter's time estimated from it.

A chapter repeats a few kinds of step: an SGD or GD step of N heads, a Runge-Kutta step of the reference
flow, an Euler step of the token systems, a risk evaluation... ``tools/steps/chNN.py`` lists them for one
chapter: ``inventory(p, device)`` gives, for the parameter values ``p`` of a profile, each kind's
description, how many such steps the chapter takes under ``p`` (a formula of ``p``), and how to build one
(built untimed, then timed as one call). The chapter's time is then ``sum(count x time of one step)``,
without running it. On a lent GPU machine the device check times the ``paper`` profile's steps at
their own sizes (``make device-check``); on the CPU the same command with the ``ci`` profile puts each
estimate beside the committed ci run's measured time, the check that the inventories cover what the
chapters spend (what they leave out, plots, fits, small solvers, shows as the gap)::

    PYTHONPATH=src python tools/chapter_steps.py --profile ci --device cpu             # the CPU check
    PYTHONPATH=src python tools/chapter_steps.py --profile paper --device cuda --out DIR

Writes ``steps.json`` into ``--out`` before every step (so a run stopped at its deadline, or killed, keeps
what it measured and names the steps not reached as ``pending``), ``steps.md`` (the chapters' table) at
the end, and prints one line per step and per chapter.
``--merge A/steps.json B/steps.json --out DIR`` times nothing: it joins slices (and reruns) into one table.
``-p NAME VALUE`` (one chapter) times the steps of the profile's values with that parameter changed, as
``python -m mfattn run CH --profile P -p NAME VALUE`` would run them: a measured estimate of your own values,
where the runner has only the chapter's cost model::

    PYTHONPATH=src python tools/chapter_steps.py --profile paper --chapters 02 -p n_ref 16384 --reps 1
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = Path(__file__).resolve().parent / "steps"


def _steps_on_path() -> None:
    """tools/steps on the import path, for the inventories' shared pieces (tools/steps/stepkit.py)."""
    if str(STEPS) not in sys.path:
        sys.path.insert(0, str(STEPS))


def inventories() -> dict:
    """``{chapter number: inventory function}`` from ``tools/steps/chNN.py``."""
    _steps_on_path()
    out = {}
    for f in sorted(STEPS.glob("ch[0-9][0-9].py")):
        spec = importlib.util.spec_from_file_location(f"chapter_steps_{f.stem}", f)
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
            out[f.stem[2:]] = mod.inventory
        except Exception as e:  # noqa: BLE001  a module missing where it runs (a bare GPU image): reported by run()
            out[f.stem[2:]] = functools.partial(_unavailable, e)
    return out


def _unavailable(error, p, device):
    raise error


def time_step(fn, device, reps: int) -> float:
    """The median time of ``reps`` calls of ``fn`` after one untimed call (compilation, caches)."""
    _steps_on_path()
    from stepkit import sync  # the inventories' own (tools/steps/stepkit.py)

    fn()
    sync(device)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def fmt(s: float) -> str:
    """Seconds as ``12 s``, ``3m05`` or ``1h42``."""
    if s < 60:
        return f"{s:.3g} s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}"


def run(chapters, profile: str, device, *, reps: int = 3, deadline: float = float("inf"), save=None,
        values: dict | None = None) -> dict:
    """Time every step of ``chapters`` (numbers, e.g. ``["02"]``) under ``profile`` on ``device``, its values
    changed by ``values`` (checked as ``python -m mfattn run`` checks them); the result's ``chapters[NN]``
    holds the rows, the estimate, the committed ci time and what was skipped."""
    import mfattn  # noqa: F401  (first: the thread policy)
    import torch

    from mfattn.companion.chapters import check_values, find_chapter, profiles, recorded

    inv = inventories()
    res = {"profile": profile, "device": str(device), "threads": torch.get_num_threads(), "reps": reps, "chapters": {}}
    if values:
        res["values"] = dict(values)
    if device.type == "cuda":
        res["gpu"] = torch.cuda.get_device_name(device)
    for ch in chapters:
        src = find_chapter(ROOT, ch)
        rec = recorded(src.with_suffix(".ipynb"))
        entry = res["chapters"][ch] = {"name": src.stem, "ci_seconds": rec.get("ci_seconds"), "rows": [],
                                       "skipped": [], "estimate_s": 0.0}
        if ch not in inv:
            entry["skipped"].append("no inventory (tools/steps)")
            continue
        # changed values checked as the runner checks them (a ValueError names a bad one); a profile's own
        # read from the front matter alone (a GPU image has no jupytext to read the parameter cell)
        p = dict(check_values(src, {**values, "profile": profile}) if values else profiles(src)[profile],
                 seed=0, device=str(device), profile=profile)
        try:
            entries = inv[ch](p, device)
        except Exception as err:  # noqa: BLE001  reported, and the next chapter goes on
            entry["skipped"].append(f"the inventory: {type(err).__name__}: {err}")
            continue
        # not done yet: a run stopped from outside (a time limit) leaves these, the step it was in first
        entry["pending"] = [e["what"] for e in entries]
        for e in entries:
            if time.monotonic() > deadline:
                entry["skipped"].append(f"{e['what']}: out of time")
            else:
                if save:
                    save(res)
                try:
                    t0 = time.perf_counter()
                    fn = e["make"]()
                    build = time.perf_counter() - t0
                    step = time_step(fn, device, reps)
                    row = {"what": e["what"], "count": float(e["count"]), "step_s": step,
                           "seconds": e["count"] * step, "build_s": build}
                    entry["rows"].append(row)
                    entry["estimate_s"] += row["seconds"]
                    print(f"{ch} {e['what'][:64]:64s} {row['count']:>9.4g} x {1e3 * step:9.3f} ms = "
                          f"{fmt(row['seconds'])}", flush=True)
                except Exception as err:  # noqa: BLE001  a step too large for the device, a missing module...
                    entry["skipped"].append(f"{e['what']}: {type(err).__name__}: {str(err)[:200]}")
                fn = None
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            entry["pending"].remove(e["what"])
        del entry["pending"]
        if save:
            save(res)
    return res


def cost_model_estimate(name: str, profile: str, values: dict | None = None) -> float | None:
    """Chapter ``name``'s cost model under ``profile`` (its values changed by ``values``): the committed ci
    run's time per cell grown by the front matter's ``cost:`` exponents
    (:func:`mfattn.companion.chapters.estimate`), what ``python -m mfattn run`` estimates for values other
    than a profile's own; ``None`` where the chapter has none."""
    from mfattn.companion.chapters import check_values, estimate, find_chapter

    src = find_chapter(ROOT, name)
    got = estimate(src, check_values(src, {**(values or {}), "profile": profile}))
    return got[0] if got else None


def table(res: dict) -> str:
    """A Markdown table, one row per chapter: the estimate from its steps (a lower bound, ">=", where steps were
    not timed); with the ci profile the committed ci run's measured time beside it; with the paper profile on the
    CPU the chapter's cost model (:func:`cost_model_estimate`), made for the machine of the committed ci runs."""
    where = res.get("gpu") or f"{res['device']}, {res.get('threads')} threads"
    ci, model = res["profile"] == "ci", res["profile"] != "ci" and res["device"] == "cpu"
    changed = "".join(f", {k} = {v!r}" for k, v in res.get("values", {}).items())
    lines = [f"Each chapter's time estimated from one step of each kind ({res['profile']} profile{changed}, {where}; "
             f"each step the median of {res['reps']} calls after an untimed one).", "",
             "| chapter | kinds of step timed | estimate |" + (" committed ci run | estimate / committed |" if ci else "")
             + (" the cost model's estimate |" if model else "") + " not timed |",
             "|---|---:|---:|" + ("---:|---:|" if ci else "") + ("---:|" if model else "") + "---:|"]
    untimed = lambda e: len(e["skipped"]) + len(e.get("pending", ()))  # noqa: E731  (pending: the run was stopped)
    at_least = lambda e: ">= " if untimed(e) else ""  # noqa: E731  untimed steps: the sum is a lower bound
    for e in res["chapters"].values():
        row = f"| {e['name']} | {len(e['rows'])} | {at_least(e)}{fmt(e['estimate_s'])} |"
        if ci:
            c = e["ci_seconds"]
            row += f" {fmt(c)} | {e['estimate_s'] / c:.2f} |" if c else " | |"
        if model:
            r = cost_model_estimate(e["name"], res["profile"], res.get("values"))
            row += f" {fmt(r)} |" if r else " |"
        lines.append(row + f" {untimed(e)} |")
    total = sum(e["estimate_s"] for e in res["chapters"].values())
    rows, skipped = sum(len(e["rows"]) for e in res["chapters"].values()), sum(map(untimed, res["chapters"].values()))
    total_s = (">= " if skipped else "") + fmt(total)
    if ci:
        c = sum(e["ci_seconds"] or 0 for e in res["chapters"].values())
        lines.append(f"| all | {rows} | {total_s} | {fmt(c)} | {total / c:.2f} | {skipped} |")
    else:
        lines.append(f"| all | {rows} | {total_s} |" + (" |" if model else "") + f" {skipped} |")
    return "\n".join(lines) + "\n"


def merge(results: list) -> dict:
    """One result from several runs of the command (slices of chapters, or a chapter run again with more
    time): the chapters of all, a chapter given twice taken from the later run. The runs must share
    profile, changed values, device, threads and repeats."""
    if not results:
        raise ValueError("results: expected at least one steps.json")
    keys = ("profile", "values", "device", "threads", "reps", "gpu")
    first = {k: results[0].get(k) for k in keys}
    for r in results[1:]:
        if {k: r.get(k) for k in keys} != first:
            raise ValueError(f"results: expected runs of one profile, device, thread count and repeats, got "
                             f"{first} and {({k: r.get(k) for k in keys})}")
    out = {k: v for k, v in first.items() if k not in ("gpu", "values") or v is not None} | {"chapters": {}}
    for r in results:
        out["chapters"].update(r["chapters"])
    out["chapters"] = dict(sorted(out["chapters"].items()))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="ci", help="the chapters' profile whose steps are timed (ci or paper)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--chapters", default="", help="comma-separated numbers (default: every chapter with an inventory)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", default=None, help="folder for steps.json")
    p.add_argument("--deadline", type=float, default=None, help="time.monotonic() after which no step starts")
    p.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="one chapter only: a parameter's value in place of the profile's (as for mfattn run)")
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                   help="time nothing: join these steps.json files (slices, reruns) into --out's steps.json and steps.md")
    a = p.parse_args(argv)
    save = None
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        save = lambda res: (Path(a.out) / "steps.json").write_text(json.dumps(res, indent=1))  # noqa: E731
    if a.merge:
        res = merge([json.loads(Path(f).read_text()) for f in a.merge])
    else:
        import mfattn  # noqa: F401  (before torch: the thread policy)
        import torch

        from mfattn.companion.chapters import check_values, find_chapter
        from mfattn.companion.cli import parse_value

        chapters = [c.zfill(2) for c in a.chapters.split(",") if c] or sorted(inventories())
        if a.param and len(chapters) != 1:
            p.error("-p/--param: name one chapter with --chapters (parameters are a chapter's own)")
        values = {name: parse_value(v) for name, v in a.param}
        if values:
            try:
                check_values(find_chapter(ROOT, chapters[0]), {**values, "profile": a.profile})
            except ValueError as e:  # (an unknown chapter is a UserError: reported, exit status 2)
                p.error(str(e))
        res = run(chapters, a.profile, torch.device(a.device), reps=a.reps,
                  deadline=a.deadline if a.deadline is not None else float("inf"), save=save, values=values)
    if save:
        save(res)
        (Path(a.out) / "steps.md").write_text(table(res))
    print(table(res))
    return 0

if __name__ == "__main__":
    sys.exit(main())
