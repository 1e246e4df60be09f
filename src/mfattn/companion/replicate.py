"""Replication of a chapter's verdicts under independent seeds (``python -m mfattn replicate``).

A verdict that passed once, for the committed seed, may pass by luck. :func:`replicate` re-runs a
chapter (ci profile) under ``K`` other seeds, each with the runner's cache, so an interrupted
replication resumes where it stopped, and :func:`aggregate` writes the replication record
``replications/CHAPTER.json``: for every verdict of the committed run, the number of replicates in
which it passed, in which it counted as evidence (its counterfactual failed beside it,
:attr:`mfattn.companion.verdicts.Verdict.evidence`), and the spread of its measured value.

Every draw of a chapter comes from its ``seed`` parameter, so another seed is another, independent
set of draws: the task's data, the initial heads, the minibatches. A verdict whose measured value
is the same, to the bit, in every replicate and in the committed run either does not depend on the
draw (an integer dimension, a closed form) or saturates (a count of violations that stays 0 in every
draw); the record says so. A check of that kind replicates by construction; a claim or derived result
still needs its counterfactual rejected in the replicates to count as replicated evidence.

The record is keyed (:func:`key`) by the hash of the chapter's code (its code cells, which decide
every number; its prose does not) and of the printed fields of its committed verdict records:
``tests/test_replicate.py`` fails when either changed since the replication, so the book never
shows the replication rate of an older chapter, while an engine change that leaves the committed
notebooks as they are (nbval proves their outputs unchanged) does not force a new replication, and
neither does a corrected sentence. The evidence map (:mod:`mfattn.companion.evidence`) shows the records.
"""

from __future__ import annotations

import configparser
import functools
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest.mock import patch

from .. import shared_machine_env
from .chapters import UserError, find_chapter, parameter_rows, repo_root
from .runner import EXIT_FAILED_CLAIM, code_cells, code_version, verdict_records
from .verdicts import EVIDENCE, assess, decide

__all__ = ["FOLDER", "FORMAT", "MIN_REPLICATES", "MIN_RATE", "key", "front_matter_hash", "engine", "seeds", "replicate",
           "aggregate", "rederive", "load", "status", "replicated"]

#: The folder of the replication records in the checkout.
FOLDER = "replications"
#: A verdict counts as replicated evidence when it passed, as evidence, in at least MIN_RATE of at
#: least MIN_REPLICATES replicates (9 of 10).
MIN_REPLICATES = 10
#: The share of the replicates in which a verdict must come out as committed (see MIN_REPLICATES).
MIN_RATE = 0.9
#: The record's format: 2 stores every replicate's decision (:func:`rederive` decides it again), the
#: engine's commit (:func:`engine`) and the front matter in the key; format-1 records (counts only,
#: under the counterfactual rules before MAX_MARGIN) are shown, and never counted as replicated evidence.
FORMAT = 2
#: The printed fields of a verdict record that the key hashes (the raw numbers beside them change
#: with the CPU's rounding; these are what nbval compares), after the checkout's nbval sanitiser.
PRINTED = ("kind", "ref", "claim", "measured", "predicted", "tolerance", "status")


def _sanitiser(root: Path):
    """The substitutions of the checkout's ``nbval-sanitize.cfg``, in order, as one function on
    strings: the key sees a printed field as nbval compares it, so that a rerun whose outputs nbval
    accepts as the same (a last digit of rounding, a float64 residual of 1e-16 against 9e-17) keeps
    its replication record."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(Path(root, "nbval-sanitize.cfg"))  # none there: no substitution
    subs = [(re.compile(cfg[sec]["regex"]), cfg[sec]["replace"]) for sec in cfg.sections()
            if "regex" in cfg[sec] and "replace" in cfg[sec]]

    def clean(x):
        if isinstance(x, list):
            return [clean(v) for v in x]
        return functools.reduce(lambda t, sub: sub[0].sub(sub[1], t), subs, x) if isinstance(x, str) else x

    return clean


def key(src: Path) -> dict:
    """The hashes a replication record is keyed by: the chapter's code cells, its front matter's ci
    values (what every replicate ran with, seed aside), and the printed fields (:data:`PRINTED`, and
    the counterfactual's) of its committed verdict records, as the checkout's nbval sanitiser
    (``nbval-sanitize.cfg``) leaves them.

    Parameters
    ----------
    src : pathlib.Path
        The chapter's ``.md``; its committed ``.ipynb`` lies beside it.

    Returns
    -------
    dict
        ``{"source": sha256 hex of the code cells, "front_matter": sha256 hex of the ci values,
        "verdicts": sha256 hex}``.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.companion.replicate import key
    >>> root = pathlib.Path(mfattn.__file__).resolve().parents[2]
    >>> sorted(key(root / "notebooks" / "07-two-layer-baseline.md"))
    ['front_matter', 'source', 'verdicts']
    """
    src = Path(src)
    clean = _sanitiser(src.resolve().parent.parent)
    printed = [{k: clean(r.get(k)) for k in PRINTED}
               | {"counterfactual": clean((r.get("counterfactual") or {}).get("predicted"))}
               for r in verdict_records(src.with_suffix(".ipynb"))]
    return {"source": hashlib.sha256(code_cells(src).encode()).hexdigest(),
            "front_matter": front_matter_hash(src),
            "verdicts": hashlib.sha256(json.dumps(printed, sort_keys=True).encode()).hexdigest()}


def front_matter_hash(src: Path) -> str:
    """The sha256 of a chapter's front-matter ci values, ``{name: ci value}`` (help texts and the
    paper profile aside): a replicate runs the ci profile with another seed, so these are its
    parameters.

    Parameters
    ----------
    src : pathlib.Path
        The chapter's ``.md``.

    Returns
    -------
    str
        64 hexadecimal digits.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.companion.replicate import front_matter_hash
    >>> root = pathlib.Path(mfattn.__file__).resolve().parents[2]
    >>> len(front_matter_hash(root / "notebooks" / "07-two-layer-baseline.md"))
    64
    """
    try:
        ci = {r["name"]: r.get("ci") for r in parameter_rows(Path(src))}
    except ValueError:  # a file with no parameters (a test's stand-in): nothing to key
        ci = {}
    return hashlib.sha256(json.dumps(ci, sort_keys=True, default=repr).encode()).hexdigest()


def engine() -> dict:
    """The checkout a replication ran on, stored in the record so that anyone can check out what ran
    (the commit when the record is written; ``dirty`` lists what differed from it).

    Returns
    -------
    dict
        ``{"commit": git HEAD, or "" outside a checkout, "dirty": changed paths under src/ and
        notebooks/}``.

    Examples
    --------
    >>> from mfattn.companion.replicate import engine
    >>> sorted(engine())
    ['commit', 'dirty']
    """
    def git(*args):
        return subprocess.run(["git", *args], cwd=Path(__file__).resolve().parents[3], capture_output=True,
                              text=True, timeout=30).stdout

    try:
        head, dirty = git("rev-parse", "HEAD").strip(), git("status", "--porcelain", "--", "src", "notebooks")
    except (OSError, subprocess.SubprocessError):
        return {"commit": "", "dirty": []}
    return {"commit": head, "dirty": sorted(line[3:] for line in dirty.splitlines())}


def _decision(r: dict) -> dict:
    """What decided one replicate's verdict, as the record stores it: its status, whether it counted
    as evidence, its decision (see :func:`mfattn.companion.verdicts.decide`) and its counterfactual's."""
    cf = r.get("counterfactual")
    keep = ("status", "prediction", "form", "margin", "source", "problem", "shifted_to", "decision")
    return dict(status=r["status"], evidence=bool(r.get("evidence")), decision=r.get("decision"),
                counterfactual=None if cf is None else {k: cf[k] for k in keep if k in cf})


def rederive(entry: dict) -> tuple[int, int]:
    """The pass and evidence counts of one verdict's entry, decided again from the decisions the
    record stores (format 2): the same rule (:func:`mfattn.companion.verdicts.decide`) and the same
    counterfactual rules (:func:`mfattn.companion.verdicts.assess`) as the chapter. A record whose
    counts were edited by hand no longer matches (``tests/test_replicate.py``).

    Parameters
    ----------
    entry : dict
        One entry of a record's ``verdicts``, with ``decisions``.

    Returns
    -------
    (int, int)
        Replicates in which it passed, and in which it passed as evidence.

    Examples
    --------
    >>> from mfattn.companion.replicate import rederive
    >>> dec = {"rule": "fit", "value": -0.5, "lo": -0.6, "hi": -0.4, "prediction": -0.5}
    >>> one = {"decision": dec, "counterfactual": {"form": "wrong", "prediction": -0.3}}
    >>> wide = {"decision": dict(dec, lo=-0.9, hi=-0.1), "counterfactual": {"form": "wrong", "prediction": -0.3}}
    >>> rederive({"kind": "claim", "decisions": [one, one, wide]})  # the wide interval accepts -0.3 too
    (3, 2)
    """
    passed = evidence = 0
    for d in entry["decisions"]:
        dec = d["decision"]
        ok = dec is not None and decide(dec, dec["prediction"])
        passed += bool(ok)
        cf = d.get("counterfactual")
        if not (ok and entry["kind"] in EVIDENCE and cf is not None):
            continue
        form = cf.get("form", "wrong")
        # a control (or a shifted fit) stores its own decision of the verdict's prediction
        cf_passed = (decide(cf["decision"], dec["prediction"]) if form == "control" or "decision" in cf
                     else decide(dec, cf["prediction"]))
        _, problem = assess(dec, {**cf, "form": form, "prediction": cf.get("prediction")}, passed=cf_passed)
        evidence += not problem and not cf_passed
    return passed, evidence


def seeds(committed: int, k: int) -> list[int]:
    """``k`` seeds other than the committed one: ``committed + 1, ..., committed + k``.

    Every chapter derives each of its streams from ``seed`` by an offset below 1000 per stream
    (``1000 * seed + j``) or by ``seed + j`` with ``j`` small, so neighbouring seeds give disjoint
    draws for the streams a verdict rests on.

    Parameters
    ----------
    committed : int
        The seed of the committed run.
    k : int
        The number of replicates, ``>= 1``.

    Returns
    -------
    list of int
        The seeds.

    Examples
    --------
    >>> from mfattn.companion.replicate import seeds
    >>> seeds(0, 3)
    [1, 2, 3]
    """
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"seeds: expected a positive number of replicates, got {k!r}")
    return [committed + 1 + i for i in range(k)]


def _strip_numbers(text: str) -> str:
    return re.sub(r"[-+]?\d[\d.eE+-]*", "#", text)


def _float(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def aggregate(src: Path, runs: dict, seconds: float) -> dict:
    """The replication record of a chapter from its replicate runs.

    Verdicts are matched by position in the chapter's report and must make the same claim (numbers
    in the claim's text aside); a replicate whose verdict at that position differs is not counted
    for it.

    Parameters
    ----------
    src : pathlib.Path
        The chapter's ``.md`` (its committed ``.ipynb`` beside it).
    runs : dict
        ``{seed: list of verdict records}`` of the replicates; a seed under which the chapter itself
        failed maps to the error's text, and counts for every verdict as a replicate that did not
        pass.
    seconds : float
        The replication's wall time, recorded.

    Returns
    -------
    dict
        ``format`` (:data:`FORMAT`), ``chapter``, ``key`` (:func:`key`), ``engine`` (:func:`engine`),
        ``seeds``, ``seconds``, ``failed_seeds`` (seed: error) and ``verdicts``: one entry per committed verdict with ``claim``, ``kind``, ``ref``,
        ``committed`` (its committed status), ``n``
        (replicates that produced it, or in which the chapter failed),
        ``passed``, ``evidence`` (passed with its counterfactual failing), ``values`` (measured, one
        per replicate, in seed order), ``q05``, ``q50``, ``q95``, ``by_construction`` (the same
        value in every replicate and in the committed run: no random draw) and ``decisions`` (each
        replicate's status, evidence, decision and counterfactual, in seed order; see :func:`rederive`).

    Examples
    --------
    >>> import json, pathlib, tempfile
    >>> from mfattn.companion.replicate import aggregate
    >>> d = pathlib.Path((d_dir := tempfile.TemporaryDirectory()).name)
    >>> rec = lambda v, s: dict(claim="slope", kind="claim", ref=["(15)"], measured=f"{v:.2e}", value=v,
    ...                         predicted="-0.500", tolerance="", status=s, evidence=True)
    >>> nb = {"cells": [{"outputs": [{"metadata": {"mfattn": {"verdicts": [rec(-0.5, "PASS")]}}}]}]}
    >>> _ = (d / "c.ipynb").write_text(json.dumps(nb)); _ = (d / "c.md").write_text("x")
    >>> r = aggregate(d / "c.md", {1: [rec(-0.48, "PASS")], 2: [rec(-0.1, "FAIL")], 3: "ValueError"}, 9.0)
    >>> e = r["verdicts"][0]
    >>> e["n"], e["passed"], e["evidence"], e["values"], r["failed_seeds"]
    (3, 1, 1, [-0.48, -0.1], {'3': 'ValueError'})
    """
    failed = {s: runs[s] for s in sorted(runs) if isinstance(runs[s], str)}
    out = []
    for i, c in enumerate(verdict_records(Path(src).with_suffix(".ipynb"))):  # the committed verdicts
        got = [runs[s][i] for s in sorted(runs) if s not in failed
               and i < len(runs[s]) and _strip_numbers(runs[s][i]["claim"]) == _strip_numbers(c["claim"])]
        vals = [_float(r.get("value", r["measured"])) for r in got]
        finite = sorted(v for v in vals if math.isfinite(v))
        q = lambda p: finite[min(len(finite) - 1, int(p * len(finite)))] if finite else math.nan  # noqa: E731
        cval = _float(c.get("value", c["measured"]))
        out.append(dict(
            claim=c["claim"], kind=c["kind"], ref=c["ref"], committed=c["status"], n=len(got) + len(failed),
            passed=sum(r["status"] == "PASS" for r in got),
            evidence=sum(r["status"] == "PASS" and bool(r.get("evidence")) for r in got),
            values=[v if math.isfinite(v) else str(v) for v in vals],
            q05=q(0.05), q50=q(0.5), q95=q(0.95),
            by_construction=bool(got) and all(v == cval for v in vals) and math.isfinite(cval),
            decisions=[_decision(r) for r in got]))
    return dict(format=FORMAT, chapter=Path(src).stem, key=key(src), engine=engine(), seeds=sorted(runs),
                seconds=round(seconds, 1), failed_seeds={str(s): e for s, e in failed.items()}, verdicts=out)


def status(entry: dict, *, spread: bool = True) -> str:
    """How a verdict replicated, in a few words, as the evidence map prints it.

    Parameters
    ----------
    entry : dict
        One entry of a record's ``verdicts`` (:func:`aggregate`).
    spread : bool, optional
        Add the median and the range of the replicates' values (default); without them, the line a
        verdict row of a chapter prints (:func:`mfattn.companion.evidence.replication_short`).

    Returns
    -------
    str
        ``"the same value in every replicate"`` for a verdict whose value no draw changed (with, for
        a claim or derived result, how often its counterfactual was rejected), or
        the committed status's rate (``"PASS in P of N replicates"``, and for a claim or derived
        result how often its counterfactual was rejected beside it) with the median and the range of
        the replicates' measured values; a committed FAIL that passes in the replicates says both;
        marked when the committed outcome did not replicate (:func:`replicated`): ``fragile`` for a
        claim or derived result (evidence), ``varies`` for a hypothesis, check or comparison.

    Examples
    --------
    >>> from mfattn.companion.replicate import status
    >>> e = dict(n=10, passed=10, evidence=10, q05=-0.58, q50=-0.5, q95=-0.43, by_construction=False,
    ...          kind="claim", committed="PASS")
    >>> e = dict(n=10, passed=10, evidence=10, q05=-0.58, q50=-0.5, q95=-0.43, by_construction=False,
    ...          kind="claim", committed="PASS", values=[-0.58, -0.5, -0.43], decisions=[])
    >>> status(e)
    'PASS in 10 of 10 replicates, counterfactual rejected in 10; median -0.5, range of the 3 replicates [-0.58, -0.43]'
    >>> status(dict(e, evidence=6))[:60]
    'fragile: PASS in 10 of 10 replicates, counterfactual rejecte'
    >>> status(dict(e, kind="hypothesis", committed="FAIL", passed=0))[:30]
    'FAIL in 10 of 10 replicates; m'
    >>> status(dict(e, committed="FAIL"))[:80]
    'fragile: FAIL in this run; PASS in 10 of 10 replicates (the committed run is aty'
    >>> status(dict(e, kind="hypothesis", passed=6))[:31]
    'varies: PASS in 6 of 10 replica'
    >>> status(dict(e, kind="hypothesis", passed=6), spread=False)
    'varies: PASS in 6 of 10 replicates'
    """
    claim, committed = entry["kind"] in ("claim", "derived"), entry.get("committed", "PASS")
    n, p = entry["n"], entry["passed"]
    if entry["by_construction"]:
        text = f"the same value, {entry['q50']:.3g}, in every replicate"
        if claim and committed == "PASS":
            text += f"; PASS in {p} of {n}, counterfactual rejected in {entry['evidence']}"
    else:
        text = f"{committed} in {p if committed == 'PASS' else n - p} of {n} replicates"
        if committed == "FAIL" and p >= MIN_RATE * n and n >= MIN_REPLICATES:
            # both outcomes, plainly: the committed run failed, the replicates pass
            text = f"FAIL in this run; PASS in {p} of {n} replicates (the committed run is atypical)"
        if claim and (committed == "PASS" or p >= MIN_RATE * n):
            text += f", counterfactual rejected in {entry['evidence']}"
            if "decisions" not in entry:
                text += " (counted before the counterfactual rules of MAX_MARGIN; to be replicated again)"
        finite = [v for v in map(_float, entry.get("values", [])) if math.isfinite(v)]
        if spread and math.isfinite(entry["q50"]) and finite:
            text += (f"; median {entry['q50']:.3g}, range of the {len(entry.get('values', [])) or n} "
                     f"replicates [{min(finite):.3g}, {max(finite):.3g}]")
        if n < MIN_REPLICATES:  # too few replicates to call it either way
            return f"not yet replicated ({n} of the {MIN_REPLICATES} replicates the rule needs): {text}"
    return text if replicated(entry) else f"{'fragile' if claim else 'varies'}: {text}"


def replicated(entry: dict) -> bool:
    """Whether a verdict replicated: the same value in every replicate, or its committed outcome in
    at least :data:`MIN_RATE` of at least :data:`MIN_REPLICATES` replicates; for a claim or derived
    result that passed, as evidence (passed with its counterfactual rejected).

    Parameters
    ----------
    entry : dict
        One entry of a record's ``verdicts`` (:func:`aggregate`).

    Returns
    -------
    bool
        Whether it replicated.

    Examples
    --------
    >>> from mfattn.companion.replicate import replicated
    >>> replicated(dict(n=10, passed=9, evidence=9, by_construction=False, kind="claim", committed="PASS",
    ...                 decisions=[]))
    True
    >>> replicated(dict(n=10, passed=9, evidence=9, by_construction=False, kind="claim", committed="PASS"))
    False
    >>> replicated(dict(n=10, passed=9, evidence=8, by_construction=False, kind="claim", committed="PASS"))
    False
    >>> replicated(dict(n=10, passed=0, evidence=0, by_construction=False, kind="hypothesis", committed="FAIL"))
    True
    """
    claim, failed = entry["kind"] in ("claim", "derived"), entry.get("committed", "PASS") == "FAIL"
    if entry["by_construction"] and not claim:
        return True  # a check whose value no draw changes
    if claim and not failed and "decisions" not in entry:
        return False  # a format-1 record: counted under the counterfactual rules before MAX_MARGIN
    n, p = entry["n"], entry["passed"]
    same = n - p if failed else entry["evidence"] if claim else p
    return n >= MIN_REPLICATES and same >= MIN_RATE * n


def load(root: Path) -> dict:
    """``{chapter stem: replication record}`` of the records under ``root/replications``.

    Parameters
    ----------
    root : pathlib.Path
        The checkout.

    Returns
    -------
    dict
        The records, by chapter.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from mfattn.companion.replicate import load
    >>> with tempfile.TemporaryDirectory() as d:
    ...     load(pathlib.Path(d))
    {}
    """
    return {p.stem: json.loads(p.read_text()) for p in sorted(Path(root, FOLDER).glob("*.json"))}


def _run_one(root: Path, src: Path, seed: int, quiet: bool) -> tuple[int, list[dict], float]:
    """One replicate: the chapter under ``seed``, in ``runs/CHAPTER/replicate/seed-S``, as a child
    ``python -m mfattn run`` so that several run at once. A seed that finished before is reused only
    when it ran the same code (``mfattn.companion.runner.code_version``: the package and the
    chapter's code cells); after any change it runs again."""
    out = root / "runs" / src.stem / "replicate" / f"seed-{seed}"
    nb = out / f"{src.stem}.ipynb"
    done = out / "done.json"
    version = code_version(src)
    if done.exists():
        d = json.loads(done.read_text())
        if d.get("code") == version and ("error" in d or nb.exists()):
            return seed, d["error"] if "error" in d else verdict_records(nb), d["seconds"]
        done.unlink()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "mfattn", "run", src.stem, "-p", "seed", str(seed), "--out", str(out), "--quiet"]
    r = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    secs = time.perf_counter() - t0
    error = None
    # a run that ended with a failed claim (EXIT_FAILED_CLAIM) finished: its verdicts are the replicate
    if r.returncode not in (0, EXIT_FAILED_CLAIM) or not nb.exists():
        if r.returncode in (130, 137, 143) or r.returncode < 0:
            # interrupted or killed (Ctrl-C, a signal): not the chapter's fault; nothing to record,
            # a rerun resumes
            raise SystemExit(f"mfattn replicate: seed {seed} was interrupted (exit status {r.returncode}); "
                             "rerun the same command to resume")
        # the chapter itself failed under this seed: a replicate in which no verdict passed, kept as
        # such (with the error) rather than dropped, since it is what a user running that seed meets
        error = (r.stderr.strip().splitlines() or ["no output"])[-1]
    done.write_text(json.dumps({"seconds": round(secs, 1), **({} if error is None else {"error": error}),
                                "code": version}))
    if not quiet:
        outcome = f"done in {secs:.0f} s" if error is None else f"FAILED in {secs:.0f} s: {error}"
        print(f"mfattn replicate: {src.stem} seed {seed} {outcome}", file=sys.stderr)
    return seed, verdict_records(nb) if error is None else error, secs


def replicate(root: Path, src: Path, k: int = MIN_REPLICATES, *, jobs: int = 1, quiet: bool = False,
              force: bool = False) -> Path:
    """Re-run the chapter ``src`` under ``k`` seeds (:func:`seeds`) and write its replication record.

    Parameters
    ----------
    root : pathlib.Path
        The checkout.
    src : pathlib.Path
        The chapter's MyST source.
    k : int
        The number of replicates (:data:`MIN_REPLICATES` for a verdict to count as replicated).
    jobs : int
        Replicates run at once (each is a kernel of its own; on 2 cores 2 jobs finish about 1.4x
        sooner than 1, since a chapter rarely keeps both cores busy).
    quiet : bool
        No line per finished replicate.
    force : bool
        Replace a committed record of the same key that holds more seeds (otherwise the new record goes
        to ``runs/CHAPTER/replicate/``).

    Returns
    -------
    pathlib.Path
        ``replications/CHAPTER.json``, or where the record went instead.

    Examples
    --------
    >>> from mfattn.companion.replicate import replicate  # doctest: +SKIP
    >>> replicate(root, root / "notebooks" / "07-two-layer-baseline.md", 10, jobs=2)  # doctest: +SKIP
    """
    rows = {r["name"]: r for r in parameter_rows(src)}
    if "seed" not in rows:
        raise SystemExit(f"mfattn replicate: {src.stem} has no seed parameter")
    committed = rows["seed"].get("ci", 0)
    todo = seeds(int(committed) if isinstance(committed, int) else 0, k)
    if not isinstance(jobs, int) or jobs < 1:
        raise SystemExit(f"mfattn replicate: --jobs must be a positive integer, got {jobs!r}")
    # kernels side by side: their waiting threads sleep (mfattn.shared_machine_env), whatever this
    # process chose for itself alone; the environment is restored after
    shared = shared_machine_env() if jobs > 1 else {}
    with patch.dict(os.environ, {k: v for k, v in shared.items() if v is not None}):
        for name in (k for k, v in shared.items() if v is None):
            os.environ.pop(name, None)
        with ThreadPoolExecutor(max_workers=jobs) as ex:
            done = list(ex.map(lambda s: _run_one(root, src, s, quiet), todo))
    secs = sum((s for *_, s in done), 0.0)  # the replicates' run times, summed (resumed ones as recorded)
    # recs: the records, or the error of a failed run
    record = aggregate(src, {seed: recs for seed, recs, _ in done}, secs)
    path = Path(root, FOLDER, f"{src.stem}.json")
    if path.exists() and not force:
        old = json.loads(path.read_text())
        if old.get("key") == record["key"] and len(old.get("seeds", [])) > len(record["seeds"]):
            # nothing a command writes may silently lower what the book shows: a smaller replication of
            # the same chapter goes beside the committed record, not over it
            path = root / "runs" / src.stem / "replicate" / f"{src.stem}.json"
            if not quiet:
                print(f"mfattn replicate: {FOLDER}/{src.stem}.json holds {len(old['seeds'])} seeds of the same "
                      f"chapter; this {len(record['seeds'])}-seed record goes to {path} (--force replaces it)",
                      file=sys.stderr)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    if not quiet:
        n_rep = sum(replicated(e) for e in record["verdicts"])
        print(f"mfattn replicate: {src.stem}: {n_rep} of {len(record['verdicts'])} verdicts replicated "
              f"({k} seeds, {secs:.0f} s of runs) -> {path}", file=sys.stderr)
    return path


def main(args) -> int:
    """``python -m mfattn replicate CHAPTER --seeds K [--jobs J]``."""
    for opt in ("seeds", "jobs"):
        if getattr(args, opt) < 1:
            raise UserError(f"replicate --{opt} {getattr(args, opt)}: must be a positive integer")
    root = repo_root()
    replicate(root, find_chapter(root, args.chapter), args.seeds, jobs=args.jobs, quiet=args.quiet,
              force=args.force)
    return 0


def add_arguments(p) -> None:
    p.add_argument("chapter", help="chapter name or prefix, e.g. 07")
    p.add_argument("--seeds", type=int, default=MIN_REPLICATES,
                   help=f"number of replicates, each under its own seed (default {MIN_REPLICATES})")
    p.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)),
                   help="replicates run at once (default: 2 where there are 2 cores)")
    p.add_argument("--quiet", action="store_true", help="no line per finished replicate")
    p.add_argument("--force", action="store_true",
                   help="replace a committed record of the same chapter that holds more seeds")
