"""The evidence map: every numbered result of arXiv 2606.10469 beside the verdicts that bear on it.

:func:`mfattn.companion.render.report` stores every verdict's record (kind, the results it bears on, measured,
predicted, tolerance, status) in the metadata of the chapter's executed notebook.
:func:`collect` reads them back from the committed ``notebooks/*.ipynb``; :func:`table` lists, for
every result in :data:`RESULTS`, the verdicts whose ``ref`` names it, or "not tested" with the
reason. The book's page ``book/evidence.md`` is that table, built when the book is built; a test
checks that every result appears on it and that its counts are the chapters' counts.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections import Counter
from pathlib import Path

from . import replicate as rp
from .chapters import repo_root
from .render import ENOTATION, minus_signs_html, result_anchor, number_html, verdict_anchor
from .replicate import MIN_REPLICATES, replicated, status
from .verdicts import KINDS

from .results import BEYOND, COMPANION, KNOWN, RESULTS  # noqa: F401  (re-exported: the map's rows)

__all__ = ["RESULTS", "COMPANION", "BEYOND", "STANDINGS", "collect", "group", "flag", "standing", "table", "counts",
           "replicated_evidence", "outcome_replicated", "headline", "replication_table", "strip_svg", "markdown", "result_label", "provenance",
           "status_markdown", "claims_json", "replication_short"]


def _notebooks(root) -> list[Path]:
    """The committed chapters' notebooks: ``notebooks/*.ipynb`` without the hidden files a run in
    progress writes there (``.NAME.partial.ipynb``)."""
    return [p for p in sorted(Path(root, "notebooks").glob("*.ipynb")) if not p.name.startswith(".")]


def collect(root: Path | str | None = None) -> list[dict]:
    """Every verdict record stored in the committed ``notebooks/*.ipynb`` under ``root`` (the
    checkout; found from the current folder when omitted), each with its ``chapter``.

    Parameters
    ----------
    root : str or pathlib.Path or None
        The checkout that holds ``notebooks/``. ``None``: the current folder or one of its
        ancestors, else the checkout the package was installed from in editable mode
        (``mfattn.companion.chapters.repo_root``).

    Returns
    -------
    list of dict
        The records of :meth:`mfattn.companion.verdicts.Verdict.record` in notebook order (notebooks sorted by
        name), each with ``chapter``, the notebook's stem, added.

    Raises
    ------
    ValueError
        If a record has a kind not in :data:`mfattn.companion.verdicts.KINDS` or cites a result that is in none
        of :data:`RESULTS`, :data:`COMPANION` and :data:`BEYOND`.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.companion.book import KINDS
    >>> from mfattn.companion.evidence import collect
    >>> records = collect(pathlib.Path(mfattn.__file__).resolve().parents[2])
    >>> all(r["kind"] in KINDS and r["status"] in ("PASS", "FAIL") for r in records)
    True
    >>> {'chapter', 'claim', 'group', 'kind', 'measured', 'predicted', 'ref', 'status', 'tolerance'} <= set(records[0])
    True
    """
    root = repo_root() if root is None else root
    loaded, out = rp.load(root), []
    for nb_path in _notebooks(root):
        src, reps = nb_path.with_suffix(".md"), loaded.get(nb_path.stem)
        # the replication of this chapter's code and committed verdicts, if any (else stale: not shown)
        done = reps["verdicts"] if reps is not None and src.exists() and reps["key"] == rp.key(src) else []
        recs = [dict(r, chapter=nb_path.stem, group=group(r)) for r in rp.verdict_records(nb_path)]
        for r, entry in zip(recs, done):  # matched by position in the chapter's report
            r["replication"] = entry
        out += recs
    for r in out:
        if r["kind"] not in KINDS:
            raise ValueError(f"{r['chapter']}: verdict {r['claim']!r} has kind {r['kind']!r}")
        if unknown := [x for x in r["ref"] if x not in KNOWN]:
            raise ValueError(f"{r['chapter']}: verdict {r['claim']!r} cites {unknown}, not in mfattn.companion.evidence.RESULTS")
    return out


def group(record: dict) -> str:
    """The group a verdict record counts in: ``"evidence"`` (a claim or derived result whose
    counterfactual its measurement rejects, :attr:`mfattn.companion.verdicts.Verdict.evidence`), ``"hypothesis"``
    or ``"check"`` (by construction, or no counterfactual that fails); ``"external"`` for agreement
    with other authors' code.

    Parameters
    ----------
    record : dict
        A verdict record (:meth:`mfattn.companion.verdicts.Verdict.record`).

    Returns
    -------
    str
        The group.

    Examples
    --------
    >>> from mfattn.companion.evidence import group
    >>> group(dict(kind="claim", evidence=True)), group(dict(kind="claim")), group(dict(kind="hypothesis"))
    ('evidence', 'check', 'hypothesis')
    """
    if record.get("evidence"):
        return "evidence"
    return record["kind"] if record["kind"] in ("hypothesis", "external") else "check"


def _counted(record: dict) -> dict:
    """A record's replication entry as the group it counts in replicates: a claim counted as a check
    replicates as a check (its outcome, not its counterfactual)."""
    rep = record["replication"]
    return rep if group(record) == "evidence" else dict(rep, kind=group(record))


def outcome_replicated(record: dict) -> bool:
    """Whether a verdict's committed outcome, as the group it counts in, came out again in at least 9
    of at least 10 replicates (for evidence: passed as evidence; for the others: the same PASS or FAIL).

    Parameters
    ----------
    record : dict
        A verdict record as :func:`collect` returns it.

    Returns
    -------
    bool

    Examples
    --------
    >>> from mfattn.companion.evidence import outcome_replicated
    >>> rep = dict(n=10, passed=0, evidence=0, by_construction=False, kind="hypothesis", committed="FAIL",
    ...            decisions=[])
    >>> outcome_replicated(dict(kind="hypothesis", status="FAIL", replication=rep))
    True
    >>> outcome_replicated(dict(kind="hypothesis", status="FAIL"))
    False
    """
    return bool(record.get("replication")) and replicated(_counted(record))


def flag(record: dict) -> str:
    """What a verdict record is worth as evidence, in a few words: ``replicated evidence``, or why
    it is weaker (a check, no counterfactual, fragile, not replicated).

    Parameters
    ----------
    record : dict
        A verdict record as :func:`collect` returns it (with its ``replication`` where there is one).

    Returns
    -------
    str
        A few words, with the replication's rate and spread (:func:`mfattn.companion.replicate.status`).

    Examples
    --------
    >>> from mfattn.companion.evidence import flag
    >>> flag(dict(kind="claim", status="PASS"))
    'check: no counterfactual named'
    >>> flag(dict(kind="claim", status="PASS", evidence=True))
    'not replicated yet'
    """
    kind, rep, cf = record["kind"], record.get("replication"), record.get("counterfactual")
    if kind in ("check", "hypothesis", "external"):
        head = "external: agreement with other authors' code" if kind == "external" else kind
        return f"{head}; {status(rep)}" if rep is not None else f"{head}, not replicated yet"
    if not record.get("evidence"):
        # counted as a check, so replicated as a check: its outcome, not its counterfactual
        why = ("no counterfactual named" if cf is None else
               f"its counterfactual could not have happened ({cf['problem']})" if cf.get("problem") else
               "its counterfactual is not rejected either")
        return f"check: {why}" + (f"; {status(_counted(record))}" if rep is not None else "")
    cf = cf or {}
    against = {"competitor": f"; against a competitor ({cf.get('source', '')})",
               "control": f"; against a measured control ({cf.get('source', '')})"}.get(cf.get("form"), "")
    if rep is None:
        return "not replicated yet" + against
    # the standing's word where status() does not already say it (a replicated FAIL is no evidence for)
    prefix = {"replicated evidence": "replicated evidence; ", "evidence FAIL": "evidence FAIL; "}.get(standing(record), "")
    return prefix + status(rep) + against


def table(records: list[dict]) -> list[dict]:
    """One row per result of :data:`RESULTS`, :data:`COMPANION` and :data:`BEYOND`: its verdicts, or the reason
    it has none.

    Parameters
    ----------
    records : list of dict
        Verdict records, as :func:`collect` returns them.

    Returns
    -------
    list of dict
        In the order of :data:`RESULTS`, then :data:`COMPANION` and :data:`BEYOND`, rows with keys ``result`` (the
        name), ``what`` (what it says), ``verdicts`` (the records whose ``ref`` names it),
        ``reason`` (why it has none; empty when it has some) and ``note`` (what the verdicts do and
        do not show, where the result needs it; else empty).

    Examples
    --------
    >>> from mfattn.companion.evidence import BEYOND, COMPANION, RESULTS, table
    >>> rec = [dict(kind="claim", ref=["Thm 4.1"], claim="error vs N", measured="-5.10e-01",
    ...             predicted="-0.500", tolerance="+-0.05", status="PASS", chapter="02-finite-n")]
    >>> rows = table(rec)
    >>> len(rows) == len(RESULTS) + len(COMPANION) + len(BEYOND)
    True
    >>> row = next(r for r in rows if r["result"] == "Thm 4.1")
    >>> row["what"], [v["claim"] for v in row["verdicts"]], row["reason"]
    ('$\\\\inf\\\\mathcal E_N-\\\\inf\\\\mathcal E\\\\le C/\\\\sqrt N$ (14)', ['error vs N'], '')
    >>> rows[0]["result"], rows[0]["verdicts"], rows[0]["reason"]
    ('Lemma 2.1', [], 'no verdict names it yet')
    """

    def row(name, what, reason="", note=""):
        vs = [r for r in records if name in r["ref"]]
        reason = "" if vs else reason or "no verdict names it yet"
        return dict(result=name, what=what, verdicts=vs, reason=reason, note=note)

    return [row(*result) for result in RESULTS + COMPANION + BEYOND]


def counts(records: list[dict]) -> dict:
    """``{chapter: Counter((group, status))}``, the group of :func:`group`.

    Parameters
    ----------
    records : list of dict
        Verdict records, as :func:`collect` returns them.

    Returns
    -------
    dict
        For every chapter, in order of first appearance, a :class:`collections.Counter` of its
        ``(group, status)`` pairs.

    Examples
    --------
    >>> from mfattn.companion.evidence import counts
    >>> rec = [dict(kind="claim", ref=["Thm 4.1"], claim="error vs N", measured="-5.10e-01",
    ...             predicted="-0.500", tolerance="+-0.05", status="PASS", chapter="02-finite-n")]
    >>> counts(rec)
    {'02-finite-n': Counter({('check', 'PASS'): 1})}
    """
    out: dict = {}
    for r in records:
        out.setdefault(r["chapter"], Counter())[(group(r), r["status"])] += 1
    return out


def replicated_evidence(records: list[dict]) -> list[dict]:
    """The records that are replicated evidence: claims and derived results whose counterfactual
    fails and that passed, as evidence, in at least 9 of at least 10 replicates (or use no random draw).

    Parameters
    ----------
    records : list of dict
        Verdict records, as :func:`collect` returns them.

    Returns
    -------
    list of dict
        Those that are replicated evidence.

    Examples
    --------
    >>> from mfattn.companion.evidence import replicated_evidence
    >>> rep = dict(n=10, passed=10, evidence=10, by_construction=False, kind="claim", decisions=[])
    >>> len(replicated_evidence([dict(kind="claim", status="PASS", evidence=True, replication=rep),
    ...                          dict(kind="claim", status="PASS", evidence=True)]))
    1
    """
    return [r for r in records if standing(r) == "replicated evidence"]


def _number(x) -> float | None:
    try:
        v = float(str(x).replace("\u2212", "-").lstrip("~"))
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def strip_svg(values, this_run: float | None, predicted: float | None = None, *, width: int = 120,
              height: int = 14) -> str:
    """A strip of the replicates' measured values (grey ticks) beside this run's (a black tick) and the
    prediction (a blue tick): where the committed run lies among its replicates, at a glance.

    Parameters
    ----------
    values : sequence of float
        The replicates' measured values (non-finite ones are left out).
    this_run : float or None
        The committed run's measured value.
    predicted : float or None
        The prediction, where it is one number.
    width, height : int
        The strip's size in px.

    Returns
    -------
    str
        Inline SVG (``""`` when there is no finite value), with a title a screen reader and a
        mouse-over read.

    Examples
    --------
    >>> from mfattn.companion.evidence import strip_svg
    >>> svg = strip_svg([-0.55, -0.5, -0.45], -0.62, -0.5)
    >>> svg.startswith("<svg") and svg.count("<line") == 6 and "this run -0.62" in svg  # axis, 3 + 2 ticks
    True
    """
    vals = [v for v in (_number(x) for x in values) if v is not None]
    if not vals:
        return ""
    pts = vals + [v for v in (this_run, predicted) if v is not None]
    lo, hi = min(pts), max(pts)
    pad = (hi - lo) * 0.06 or max(abs(hi), 1e-12) * 0.05
    lo, hi = lo - pad, hi + pad


    def tick(v, y0, y1, stroke):
        x = round(2 + (width - 4) * (v - lo) / (hi - lo), 1)
        return f'<line x1="{x}" y1="{y0}" x2="{x}" y2="{y1}" stroke={stroke}/>'

    parts = [f'<line x1="2" y1="{height / 2}" x2="{width - 2}" y2="{height / 2}" stroke="#d0d7de"/>']
    parts += [tick(v, 3, height - 3, '"#8c959f"') for v in vals]
    parts += [tick(predicted, 0, height, '"#1f6feb" stroke-dasharray="2,1"')] if predicted is not None else []
    parts += [tick(this_run, 0, height, '"#000" stroke-width="2"')] if this_run is not None else []
    title = f"the {len(vals)} replicates from {min(vals):.3g} to {max(vals):.3g}" + "".join(
        f"; {what} {v:.3g}" for what, v in (("this run", this_run), ("predicted", predicted))
        if v is not None)
    return (f'<svg class="mfattn-strip" width="{width}" height="{height}" role="img" aria-label="{title}">'
            f"<title>{title}</title>{''.join(parts)}</svg>")


def replication_table(chapter: str, records: list[dict]) -> str:
    """The table a chapter page shows under its verdicts: for each verdict, this run's status, what it
    counts as, and how it replicated under other seeds (:func:`flag`), so that a row that passed
    once but replicates rarely, or failed once but passes in the replicates, reads as what it is.

    Parameters
    ----------
    chapter : str
        The chapter's stem.
    records : list of dict
        Verdict records as :func:`collect` returns them.

    Returns
    -------
    str
        A MyST Markdown section, or ``""`` when the chapter has no verdicts.

    Examples
    --------
    >>> from mfattn.companion.evidence import replication_table
    >>> rep = dict(n=10, passed=9, evidence=9, by_construction=False, kind="claim", committed="FAIL",
    ...            q05=-0.6, q50=-0.5, q95=-0.4, values=[-0.6, -0.5, -0.4], decisions=[])
    >>> rec = dict(chapter="02-x", kind="claim", claim="slope of the error", status="FAIL", evidence=True,
    ...            replication=rep, counterfactual={"form": "wrong"})
    >>> print(replication_table("02-x", [rec]).splitlines()[-1])  # doctest: +ELLIPSIS
    | <a href="#v-...">slope of the error</a> | FAIL | evidence | fragile: FAIL in this run; PASS in 9 of 10 replicates (...
    """
    mine = [r for r in records if r["chapter"] == chapter]
    if not mine:
        return ""
    lines = ["## How each verdict replicated", "",
             "Each verdict of the table above, rerun under ten other seeds (`python -m mfattn replicate "
             f"{chapter[:2]}`): what this run gives, what the verdict counts as, and how it came out in the "
             "replicates, with the median and the range of their measured values. The strip shows the ten "
             "values (grey) beside this run's (black) and the prediction (blue, dashed): a committed run that "
             "lies apart from its replicates is atypical. The words are defined on the evidence map.", "",
             "| verdict | this run | counted as | replicates | spread |", "|---|---|---|---|---|"]
    for r in mine:
        strip = strip_svg((r.get("replication") or {}).get("values", []), _number(r.get("measured")),
                          _number(r.get("predicted")))
        lines.append(f"| <a href=\"#{verdict_anchor(r['claim'])}\">{_esc(r['claim'])}</a> | {r['status']} | "
                     f"{group(r)} | {_esc(flag(r))} | {strip} |")
    return "\n".join(lines)


def headline(records: list[dict]) -> str:
    """The evidence count that the evidence map and the intro open with: replicated claims that can
    fail, then what else the committed runs hold.

    Parameters
    ----------
    records : list of dict
        Verdict records, as :func:`collect` returns them.

    Returns
    -------
    str
        One paragraph of Markdown.

    Examples
    --------
    >>> from mfattn.companion.evidence import headline
    >>> rep = dict(n=10, passed=10, evidence=10, by_construction=False, kind="claim", decisions=[])
    >>> print(headline([dict(kind="claim", status="PASS", evidence=True, replication=rep, chapter="02-x"),
    ...                 dict(kind="claim", status="PASS", chapter="02-x")]))
    **1 verdict is replicated evidence**: a claim or derived result that names a counterfactual that could
    have happened and its measurement rejects, and that passed so in at least 9 of at least 10
    independent replicates. Beside it the committed runs hold 0 fragile, 0 not yet replicated, 0
    evidence FAILs, 0 hypotheses (0 with their outcome replicated), 1 checks (0 replicated) and 0
    comparisons with other authors' code (0 replicated); each word as the evidence map defines it.
    """
    rep = replicated_evidence(records)
    st = Counter(standing(r) for r in records)
    c = Counter(group(r) for r in records)
    same = Counter(group(r) for r in records if outcome_replicated(r))
    one = len(rep) == 1
    return (f"**{len(rep)} verdict{'' if one else 's'} {'is' if one else 'are'} replicated evidence**: "
            f"{'a claim or derived result that names' if one else 'claims and derived results that name'} a "
            f"counterfactual that could have happened and {'its' if one else 'their'}\nmeasurement rejects, and "
            f"that passed so in at least 9 of at least 10 independent replicates. Beside {'it' if one else 'them'}"
            f"\nthe committed runs hold {st['fragile']} fragile, {st['not yet replicated']} not yet replicated, "
            f"{st['evidence FAIL']}\nevidence FAILs, {c['hypothesis']} hypotheses ({same['hypothesis']} with their "
            f"outcome replicated), {c['check']} checks ({same['check']} replicated) and {c['external']}\ncomparisons "
            f"with other authors' code ({same['external']} replicated); each word as the evidence map defines it.")


def _esc(s: str) -> str:
    """Markdown-safe text for a table cell, its e-notation numbers written for a reader and never
    broken across lines (:func:`mfattn.companion.render.number_html`), a sign as a minus sign. Math (``$...$``) is left as
    it is but for its pipes: an escaped star inside it is a MathJax error."""

    def text(part):
        part = part.replace("*", "\\*").replace("->", "→")
        return minus_signs_html(ENOTATION.sub(lambda m: number_html(m.group(0)), part))

    parts = re.split(r"(\$[^$]+\$)", s.replace("|", "\\|"))  # odd parts are math
    return "".join(p if i % 2 else text(p) for i, p in enumerate(parts))


def _bib_authors(root: Path | None = None) -> dict:
    """``{key: "Surname et al. YEAR"}`` from the book's ``references.bib`` (the first author's
    surname, LaTeX accents made letters), for citation keys a reader can read."""
    try:
        text = Path(root or Path(__file__).resolve().parents[3], "book", "references.bib").read_text()
    except OSError:
        return {}
    out = {}
    for m in re.finditer(r"@\w+\{([^,]+),(.*?)\n\}", text, re.S):
        key, body = m.group(1).strip(), m.group(2)
        a = re.search(r"author\s*=\s*\{(.*?)\},?\s*\n", body, re.S)
        y = re.search(r"year\s*=\s*\{?(\d{4})", body)
        if not a:
            continue
        names = [n.strip() for n in re.split(r"\s+and\s+", a.group(1))]
        first = names[0].split(",")[0] if "," in names[0] else names[0].split()[-1]
        accent = {"'": "\u0301", "`": "\u0300"}  # acute, grave
        first = re.sub(r"\\(['`])\s*\{?(\w)\}?", lambda q: q.group(2) + accent[q.group(1)], first)
        first = unicodedata.normalize("NFC", re.sub(r"[{}\\]", "", first))
        out[key] = f"{first}{' et al.' if len(names) > 2 else ''} {y.group(1) if y else ''}".strip()
    return out


def result_label(name: str, authors: dict | None = None) -> str:
    """A result's name as the map shows it: a citation key made short author-year text
    (``alvarezlopez2026perceptrons Thm 3.5`` -> ``Álvarez-López et al. 2026, Thm 3.5``).

    Parameters
    ----------
    name : str
        The result's name in :mod:`mfattn.companion.results`.
    authors : dict, optional
        ``{key: text}``; the book's bibliography by default.

    Returns
    -------
    str

    Examples
    --------
    >>> from mfattn.companion.evidence import result_label
    >>> result_label("alvarezlopez2026perceptrons Thm 3.5")
    'Álvarez-López et al. 2026, Thm 3.5'
    >>> result_label("Thm 5.2")
    'Thm 5.2'
    """
    authors = _bib_authors() if authors is None else authors
    key, _, rest = name.partition(" ")
    return f"{authors[key]}, {rest}" if key in authors and rest else authors.get(name, name)


#: The order in which a result's verdicts are shown, strongest first (:func:`standing`).
STANDINGS = ("replicated evidence", "fragile", "not yet replicated", "evidence FAIL", "hypothesis", "external",
             "check")


def standing(record: dict) -> str:
    """What a verdict is worth, in one of the map's words (defined on the evidence map):
    ``replicated evidence``; ``fragile`` (counted as evidence, but not so in 9 of 10 replicates);
    ``not yet replicated``; ``evidence FAIL`` (counted as evidence and failed in this run, and not
    replicated as a PASS); ``hypothesis``; ``external``; ``check``.

    Parameters
    ----------
    record : dict
        A verdict record as :func:`collect` returns it.

    Returns
    -------
    str
        One of :data:`STANDINGS`.

    Examples
    --------
    >>> from mfattn.companion.evidence import standing
    >>> standing(dict(kind="claim", status="PASS", evidence=True)), standing(dict(kind="claim", status="PASS"))
    ('not yet replicated', 'check')
    """
    if (g := group(record)) != "evidence":
        return g
    rep = record.get("replication")
    if rep is None or rep.get("n", 0) < 10:
        return "evidence FAIL" if record["status"] == "FAIL" else "not yet replicated"
    if record["status"] == "PASS" and replicated(rep):
        return "replicated evidence"
    return "fragile" if rep.get("evidence", 0) > 0 or record["status"] == "PASS" else "evidence FAIL"


def replication_short(record: dict) -> str:
    """How a verdict replicated, in the map's words and one short line: the verdict row of a chapter's
    table and the result's row on the map print it (the replication table beside the verdicts gives
    the median and the range too).

    Parameters
    ----------
    record : dict
        A verdict record as :func:`collect` returns it.

    Returns
    -------
    str
        The standing for evidence (``replicated evidence``, ``fragile``, ``evidence FAIL``), else
        ``replicates`` or ``varies``, then :func:`mfattn.companion.replicate.status` without the
        spread of values; ``not replicated yet`` without ten replicates on record.

    Examples
    --------
    >>> from mfattn.companion.evidence import replication_short
    >>> rep = dict(n=10, passed=10, evidence=8, by_construction=False, kind="claim", committed="PASS",
    ...            decisions=[])
    >>> replication_short(dict(kind="claim", status="PASS", evidence=True, replication=rep))
    'fragile: PASS in 10 of 10 replicates, counterfactual rejected in 8'
    >>> replication_short(dict(kind="hypothesis", status="FAIL", replication=dict(rep, kind="hypothesis",
    ...                        committed="FAIL", passed=3)))
    'varies: FAIL in 7 of 10 replicates'
    >>> replication_short(dict(kind="check", status="PASS"))
    'not replicated yet'
    """
    rep = record.get("replication")
    if not rep or rep.get("n", 0) < MIN_REPLICATES:
        return "not replicated yet"
    entry = _counted(record)
    # status() marks only a verdict that did not replicate; here every row names its standing
    text = status(entry, spread=False).removeprefix("fragile: ").removeprefix("varies: ")
    word = standing(record) if group(record) == "evidence" else ("replicates" if replicated(entry) else "varies")
    return f"{word}: {text}"


def _tag(r: dict) -> str:
    """A verdict's status as a coloured tag (``_static/mfattn.css``): green PASS, red FAIL, amber for
    a hypothesis that fails (a finding about the model); replicated evidence is marked."""
    cls = "pass" if r["status"] == "PASS" else ("hypfail" if r["kind"] == "hypothesis" else "fail")
    strong = " mfattn-replicated" if standing(r) == "replicated evidence" else ""
    return f'<span class="mfattn-tag mfattn-{cls}{strong}">{r["status"]}</span>'


def _link(r: dict) -> str:
    """The chapter number, linked to the verdict's row in the chapter (its anchor)."""
    return f'<a href="../notebooks/{r["chapter"]}.html#{verdict_anchor(r["claim"])}">{r["chapter"][:2]}</a>'


def markdown(records: list[dict]) -> str:
    """The evidence page's body (MyST markdown): the per-chapter counts and the map.

    Parameters
    ----------
    records : list of dict
        Verdict records, as :func:`collect` returns them.

    Returns
    -------
    str
        Two Markdown tables: the PASS and FAIL counts per chapter (evidence, hypotheses, checks),
        then one row per result of :func:`table`.

    Examples
    --------
    >>> from mfattn.companion.evidence import markdown
    >>> rec = [dict(kind="claim", ref=["Thm 4.1"], claim="error vs N", measured="-5.10e-01",
    ...             predicted="-0.500", tolerance="+-0.05", status="PASS", chapter="02-finite-n")]
    >>> lines = markdown(rec).splitlines()
    >>> print(lines[2])
    | [02-finite-n](../notebooks/02-finite-n.ipynb) | 0 PASS, 0 FAIL | not replicated yet | 0 PASS, 0 FAIL | 1 PASS, 0 FAIL | 0 PASS, 0 FAIL |
    >>> print(next(line for line in lines if "Thm 4.1 |" in line))  # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
    | <span id="r-thm-4-1"></span>Thm 4.1 | $\\inf\\mathcal E_N-\\inf\\mathcal E\\le C/\\sqrt N$ (14) | <span class="mfattn-tag
    mfattn-pass">PASS</span> **check** (claim, chapter <a href="../notebooks/02-finite-n.html#v-...">02</a>; not
    replicated yet)<details><summary>1
    verdict, chapter 02</summary><span class="mfattn-tag mfattn-pass">PASS</span> claim: error vs N (<a
    href="../notebooks/02-finite-n.html#v-...">02</a>; *check: no counterfactual named*)</details> |
    """
    rep = replicated_evidence(records)
    lines = ["| chapter | evidence | of it replicated | hypotheses | checks | external |", "|---|---|---|---|---|---|"]
    for ch, c in counts(records).items():
        same = Counter(group(r) for r in records if r["chapter"] == ch and outcome_replicated(r))
        has_rep = any(r["chapter"] == ch and "replication" in r for r in records)

        def cell(g):
            n = c[(g, "PASS")] + c[(g, "FAIL")]
            # a hypothesis, check or comparison replicates when its outcome comes out again
            return (f"{c[(g, 'PASS')]} PASS, {c[(g, 'FAIL')]} FAIL"
                    + (f"; {same[g]} of {n} replicate" if g != "evidence" and n and has_rep else ""))

        n_rep = sum(r["chapter"] == ch for r in rep) if has_rep else "not replicated yet"
        lines.append(f"| [{ch}](../notebooks/{ch}.ipynb) | {cell('evidence')} | {n_rep} | "
                     + " | ".join(cell(g) for g in ("hypothesis", "check", "external")) + " |")
    lines += ["", "| result | what it says | strongest verdict (all of them one click away) |", "|---|---|---|"]
    authors = _bib_authors()
    for row in table(records):
        vs = sorted(row["verdicts"], key=lambda r: STANDINGS.index(standing(r)))
        if vs:
            best = vs[0]
            chapters = sorted({r["chapter"][:2] for r in vs})
            kind = "" if best["kind"] == standing(best) else f"{best['kind']}, "
            # the rate behind the standing; replicated evidence has its counterfactual rejected by definition
            short = replication_short(best)
            rate = short.partition(": ")[2] or short
            if standing(best) == "replicated evidence":  # "PASS in 10 of 10 replicates, ..." -> "10 of 10"
                rate = re.sub(r"^PASS in (\d+ of \d+) replicates.*", r"\1", rate)
            v = (f"{_tag(best)} **{standing(best)}** ({kind}chapter {_link(best)}; {_esc(rate)})"
                 f"<details><summary>{len(vs)} verdict{'s' if len(vs) > 1 else ''}, chapter"
                 f"{'s' if len(chapters) > 1 else ''} {', '.join(chapters)}</summary>"
                 + "<br>".join(f"{_tag(r)} {r['kind']}: {_esc(r['claim'])} ({_link(r)}; *{_esc(flag(r))}*)"
                               for r in vs)
                 + (f"<br>*note*: {_esc(row['note'])}" if row["note"] else "") + "</details>")
        else:
            head, sep, rest = row["reason"].partition(": ")
            v = (f"*not tested*: {_esc(head)}<details><summary>why</summary>{_esc(rest)}</details>"
                 if sep and len(head) <= 40 else f"*not tested*: {_esc(row['reason'])}")
        lines.append(f'| <span id="{result_anchor(row["result"])}"></span>{_esc(result_label(row["result"], authors))} | '
                     f'{_esc(row["what"])} | {v} |')
    return "\n".join(lines)


def provenance(root: Path | str) -> dict:
    """``{chapter: metadata}``: what each committed chapter's run recorded about itself
    (``mfattn.companion.runner.provenance``; older runs hold only ``ci_seconds`` and ``machine``).

    Parameters
    ----------
    root : str or pathlib.Path
        The checkout that holds ``notebooks/``.

    Returns
    -------
    dict
        One entry per ``notebooks/*.ipynb``, sorted by name.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.companion.evidence import provenance
    >>> prov = provenance(pathlib.Path(mfattn.__file__).resolve().parents[2])
    >>> all(m["ci_seconds"] >= 0 for m in prov.values())
    True
    """
    return {p.stem: json.loads(p.read_text())["metadata"].get("mfattn", {}) for p in _notebooks(root)}


def _duration(s) -> str:
    if s is None:
        return "not recorded"
    s = int(s)
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60:02d} s"


def status_markdown(root: Path | str, records: list[dict] | None = None) -> str:
    """The status page's body (``book/status.md``, built with the book, nothing executed): per
    chapter, the committed run's time, profile, date and the commit of the code it ran; the machines
    and library versions the runs used; the verdicts counted by group and status, with the
    replication's seeds and run time.

    Parameters
    ----------
    root : str or pathlib.Path
        The checkout.
    records : list of dict or None
        Verdict records (:func:`collect`); read from ``root`` when omitted.

    Returns
    -------
    str
        MyST Markdown: two tables and a list of environments.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.companion.evidence import status_markdown
    >>> text = status_markdown(pathlib.Path(mfattn.__file__).resolve().parents[2])
    >>> text.splitlines()[0]
    '| chapter | run time | profile | ran (UTC) | code |'
    """
    root = Path(root)
    records = collect(root) if records is None else records
    reps = rp.load(root)
    lines = ["| chapter | run time | profile | ran (UTC) | code |", "|---|---|---|---|---|"]
    envs: dict = {}
    for ch, m in provenance(root).items():
        commit = m.get("commit")
        code = (f"`{commit[:10]}`" + (" with uncommitted changes" if m.get("dirty") else "") if commit
                else "not recorded")
        when = m.get("executed", "not recorded").replace("T", " ").replace("Z", "")
        lines.append(f"| [{ch}](../notebooks/{ch}.ipynb) | {_duration(m.get('ci_seconds'))} | "
                     f"{m.get('profile', 'ci')} | {when} | {code} |")
        key = (("not recorded", m.get("machine", "not recorded")) if "cpu" not in m else
               (m["cpu"], m["cores"], m.get("threads"), m["isa"], m["python"], m["torch"], m["numpy"],
                m["numba"]))
        envs.setdefault(key, []).append(ch[:2])
    lines += ["", "The machines and libraries of these runs:", ""]
    for key, chs in envs.items():
        which = ("Chapter " if len(chs) == 1 else "Chapters ") + ", ".join(chs)
        lines.append(f"- {which}: {key[1]} (the CPU model and library versions were not recorded)."
                     if len(key) == 2 else "- {}: {}, {} cores, {} torch threads, torch kernels for {}; "
                     "Python {}, torch {}, numpy {}, numba {}.".format(which, *key))
    lines += ["", "| chapter | evidence | replicated | hypotheses | checks | external |",
              "|---|---|---|---|---|---|"]
    rep_lines = ["", "| chapter | replication |", "|---|---|"]
    rep_ev = replicated_evidence(records)
    for ch, c in counts(records).items():
        def cell(g):
            n_pass, n_fail = c[(g, "PASS")], c[(g, "FAIL")]
            return f"{n_pass} PASS" + (f", {n_fail} FAIL" if n_fail else "") if n_pass or n_fail else "none"

        r = reps.get(ch)
        fresh = any(x["chapter"] == ch and "replication" in x for x in records)
        rep = ("not run" if r is None else "stale: the chapter changed since" if not fresh
               else f"{len(r['seeds'])} seeds, {_duration(r.get('seconds'))}")
        n_rep = sum(x["chapter"] == ch for x in rep_ev)
        lines.append(f"| {ch[:2]} | {cell('evidence')} | {n_rep if fresh else '-'} | {cell('hypothesis')} | "
                     f"{cell('check')} | {cell('external')} |")
        rep_lines.append(f"| {ch[:2]} | {rep} |")
    return "\n".join(lines + rep_lines)


def claims_json(root: Path | str, records: list[dict] | None = None) -> str:
    """Every verdict's record as JSON, for the evidence page's download: kind, group, the claim,
    measured, predicted, tolerance, status, the results it bears on, its counterfactual and its
    replication where there is one, the chapter and the commit of the code the chapter's run used.

    Parameters
    ----------
    root : str or pathlib.Path
        The checkout.
    records : list of dict or None
        Verdict records (:func:`collect`); read from ``root`` when omitted.

    Returns
    -------
    str
        A JSON document ``{"paper": ..., "verdicts": [...]}``.

    Examples
    --------
    >>> import json, pathlib
    >>> import mfattn
    >>> from mfattn.companion.evidence import claims_json
    >>> doc = json.loads(claims_json(pathlib.Path(mfattn.__file__).resolve().parents[2]))
    >>> {"chapter", "claim", "kind", "status", "ref", "commit"} <= set(doc["verdicts"][0])
    True
    """
    records = collect(root) if records is None else records
    prov = provenance(root)
    out = [dict(r, commit=prov.get(r["chapter"], {}).get("commit")) for r in records]
    return json.dumps({"paper": "arXiv 2606.10469", "verdicts": out}, indent=1, default=str)
