"""The evidence map: every numbered result of arXiv 2606.10469 beside the verdicts that bear on it.

:func:`mfattn.book.report` stores every verdict's record (kind, the results it bears on, measured,
predicted, tolerance, status) in the metadata of the chapter's executed notebook.
:func:`collect` reads them back from the committed ``notebooks/*.ipynb``; :func:`table` lists, for
every result in :data:`RESULTS`, the verdicts whose ``ref`` names it, or "not tested" with the
reason. The book's page ``book/evidence.md`` is that table, built when the book is built; a test
checks that every result appears on it and that its counts are the chapters' counts.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from .book import EVIDENCE, KINDS

__all__ = ["RESULTS", "COMPANION", "collect", "table", "counts", "markdown"]

# (name as verdicts cite it, what it says in a few words, why it has no verdict when none names it
#  [, a note shown beside its verdicts])
RESULTS = [
    ("Lemma 2.1", "the softmax is 1/2-Lipschitz", ""),
    ("Prop. 3.4", "attention features are smooth, with polynomial constants, on balls", ""),
    ("Assumption 3.2", "every measure is supported in one compact K (smoothness on invariant compact sets)",
     "no experiment yet"),
    ("Remark 3.5", "C_m depends on L and on norm bounds only: no separate dependence on d_x or d_v",
     "no experiment yet; chapter 01 measures the growth of the constants, which is what the remark is about"),
    ("Thm 4.1", "inf E_N - inf E <= C / sqrt(N) (14)", ""),
    ("Remark 4.2", "comparison with the classical (square-loss) mean-field rate", ""),
    ("Thm 4.3", "a measure is optimal iff its support minimises Phi over K (16)", ""),
    ("Thm 5.2", "SGD heads follow the mean-field flow: N^-1/2, eps^1/2 and eps terms", ""),
    ("Thm 6.1", "energy dissipation dE/dt = -I (38), (39)", ""),
    ("Thm 6.3", "stationary solutions have grad Phi = 0 on their support", ""),
    ("Thm 6.6 hyp.", "the trajectory is precompact in W1 (the hypothesis of Theorem 6.6)", "no experiment yet"),
    ("Thm 6.6.1", "E(rho_t) converges", ""),
    ("Thm 6.6.2", "I(rho_t) -> 0", ""),
    ("Thm 6.6.3", "every W1 limit point is stationary",
     "cannot be tested on a finite horizon: a run up to T has no sequences t_n -> infinity; chapter 04, "
     "'What a finite horizon cannot test', derives why, and measures the hypothesis (Thm 6.6 hyp.) and item 2 "
     "that the proof uses"),
    ("Thm 6.6.4", "the omega-limit set is nonempty, compact, connected, stationary",
     "cannot be tested on a finite horizon: every finite set of measures is compact; chapter 04, 'What a finite "
     "horizon cannot test'"),
    ("Thm 6.6.5", "convergence to a single stationary solution when the stationary set is totally disconnected",
     "its hypothesis concerns the limit set itself, which a finite run cannot see, and the checkable route "
     "through the stationary set is closed: every stationary measure with a nonzero atom lies on a continuous "
     "orbit of the head symmetry (chapters 04 and 05)"),
    ("Remark 6.7", "an inward-pointing field on a sphere confines the flow (precompactness)", ""),
    ("Prop. 6.9", "compactly supported trajectories are precompact", "no experiment yet",
     "the conclusion is Prokhorov's theorem and holds for every family supported in K; only the hypothesis "
     "supp rho_t in K says something about the flow, and that is what the verdict measures (chapter 04)"),
    ("Thm 6.10", "Kurdyka-Lojasiewicz rates for E(rho_t) - E_inf", ""),
    ("Remark 6.11", "sources of KL: a finite-atomic analytic reduction (some theta < 1), a local PL estimate "
     "(theta = 1/2)", "no experiment yet"),
    ("Remark 6.12", "with zeta >= zeta_- the KL rates hold in physical time: algebraic, t^(-1/(2 theta - 1))",
     "no experiment yet"),
    ("Remark 6.13", "comparison with finite-dimensional Lojasiewicz theory",
     "no quantitative statement: the remark says that the paper does not claim the KL inequality; whether it "
     "holds is measured under Thm 6.10 and Remark 6.11 (chapter 04, 'What a finite horizon cannot test')"),
    ("Section 8", "convergence to minimisers: the stationary limit satisfies the support condition", ""),
    ("Section 8 PL", "a PL inequality I >= 2 lambda (E - E_min) where the flow goes: exponential rate, global limits",
     ""),
    ("Thm 7.1", "local Wasserstein exponential stability under strong monotonicity (45), (46)", ""),
    ("Remark 7.2", "a checkable sufficient condition for strong monotonicity", "no experiment yet"),
    ("Remark 7.3", "relation to contractivity of Wasserstein gradient flows", "no experiment yet"),
    ("Remark 7.4", "Lions-lift interpretation of strong monotonicity", "no experiment yet"),
    ("Thm 7.5", "Dirac stationarity and local stability under (52)", ""),
    ("Remark 7.7", "H0 > 0 is sufficient, not necessary: translations feel H_tr = H0 + E[J'SJ] (59)", ""),
    ("Thm 7.8", "translation instability when H_tr has a negative direction", ""),
    ("(12)", "Phi is the first variation of E", ""),
    ("(13)", "grad Phi, the drift of the flow", ""),
    ("(15)", "the i.i.d. logit error is O(N^-1/2)", ""),
    ("(17)", "the stochastic gradient G_i of one sequence", ""),
    ("(18)", "G_i is unbiased, with variance O(1/S)", ""),
    ("(24)", "test-function discrepancy between SGD and the flow", ""),
    ("(25)", "risk discrepancy between SGD and the flow", ""),
    ("(36)", "the pathwise error e_i of the tagged characteristics", ""),
    ("(39)", "the integrated energy identity", ""),
    ("(42)", "the time change between learning-rate profiles", ""),
    ("(45)", "strong monotonicity kappa", ""),
    ("(46)", "the Gronwall bound on W2 under (45)", ""),
    ("(47)", "strong monotonicity of the lifted gradient D E~(W) = grad Phi(W; L(W))", ""),
    ("(48)", "the lifted risk's second derivative is at least kappa E|W_delta|^2", ""),
    ("(49)", "the second derivative of the lifted risk: particle term plus interaction term", ""),
    ("(50)", "H0, the Hessian of Phi at a Dirac stationary point", ""),
    ("(51)", "Dirac stationarity", ""),
    ("(52)", "H0 positive definite (Theorem 7.5's hypothesis)", ""),
    ("(59)", "H_tr, the translation Hessian", ""),
]

# results of the companion texts that chapters test (not listed as results of 2606.10469)
COMPANION = [
    ("alvarezlopez2026perceptrons Thm 3.5", "with a perceptron, descent does not end in a single cluster"),
    ("alvarezlopez2026perceptrons energy", "the token dynamics are gradient flows of the interaction energy"),
    ("alvarezlopez2026perceptrons clustering", "without a perceptron, small beta ends in one cluster"),
]

KNOWN = {name for name, *_ in RESULTS} | {name for name, _ in COMPANION}


def collect(root: Path | str | None = None) -> list[dict]:
    """Every verdict record stored in the committed ``notebooks/*.ipynb`` under ``root`` (the
    checkout; found from the current folder when omitted), each with its ``chapter``.

    Parameters
    ----------
    root : str or pathlib.Path or None
        The checkout that holds ``notebooks/``. ``None``: the current folder or one of its
        ancestors, else the checkout the package was installed from in editable mode
        (``mfattn.cli.repo_root``).

    Returns
    -------
    list of dict
        The records of :meth:`mfattn.book.Verdict.record` in notebook order (notebooks sorted by
        name), each with ``chapter``, the notebook's stem, added.

    Raises
    ------
    ValueError
        If a record has a kind not in :data:`mfattn.book.KINDS` or cites a result that is in neither
        :data:`RESULTS` nor :data:`COMPANION`.

    Examples
    --------
    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.book import KINDS
    >>> from mfattn.evidence import collect
    >>> records = collect(pathlib.Path(mfattn.__file__).resolve().parents[2])
    >>> all(r["kind"] in KINDS and r["status"] in ("PASS", "FAIL") for r in records)
    True
    >>> sorted(records[0])
    ['chapter', 'claim', 'kind', 'measured', 'predicted', 'ref', 'status', 'tolerance']
    """
    if root is None:
        from .cli import repo_root

        root = repo_root()
    out = []
    for nb_path in sorted(Path(root, "notebooks").glob("*.ipynb")):
        nb = json.loads(nb_path.read_text())
        for cell in nb["cells"]:
            for o in cell.get("outputs", []):
                rec = o.get("metadata", {}).get("mfattn", {}).get("verdicts")
                if rec is not None:
                    out += [dict(r, chapter=nb_path.stem) for r in rec]
    for r in out:
        if r["kind"] not in KINDS:
            raise ValueError(f"{r['chapter']}: verdict {r['claim']!r} has kind {r['kind']!r}")
        unknown = [x for x in r["ref"] if x not in KNOWN]
        if unknown:
            raise ValueError(f"{r['chapter']}: verdict {r['claim']!r} cites {unknown}, not in mfattn.evidence.RESULTS")
    return out


def table(records: list[dict]) -> list[dict]:
    """One row per result of :data:`RESULTS` and :data:`COMPANION`: its verdicts, or the reason it has none.

    Parameters
    ----------
    records : list of dict
        Verdict records, as :func:`collect` returns them.

    Returns
    -------
    list of dict
        In the order of :data:`RESULTS`, then :data:`COMPANION`, rows with keys ``result`` (the
        name), ``what`` (what it says), ``verdicts`` (the records whose ``ref`` names it),
        ``reason`` (why it has none; empty when it has some) and ``note`` (what the verdicts do and
        do not show, where the result needs it; else empty).

    Examples
    --------
    >>> from mfattn.evidence import COMPANION, RESULTS, table
    >>> rec = [dict(kind="claim", ref=["Thm 4.1"], claim="error vs N", measured="-5.10e-01",
    ...             predicted="-0.500", tolerance="+-0.05", status="PASS", chapter="02-finite-n")]
    >>> rows = table(rec)
    >>> len(rows) == len(RESULTS) + len(COMPANION)
    True
    >>> row = next(r for r in rows if r["result"] == "Thm 4.1")
    >>> row["what"], [v["claim"] for v in row["verdicts"]], row["reason"]
    ('inf E_N - inf E <= C / sqrt(N) (14)', ['error vs N'], '')
    >>> rows[0]["result"], rows[0]["verdicts"], rows[0]["reason"]
    ('Lemma 2.1', [], 'no verdict names it yet')
    """
    rows = []
    for name, what, *why in RESULTS + COMPANION:
        vs = [r for r in records if name in r["ref"]]
        rows.append(dict(result=name, what=what, verdicts=vs,
                         reason=(why[0] if why and why[0] else "no verdict names it yet") if not vs else "",
                         note=why[1] if len(why) > 1 else ""))
    return rows


def counts(records: list[dict]) -> dict:
    """``{chapter: Counter((kind, status))}``.

    Parameters
    ----------
    records : list of dict
        Verdict records, as :func:`collect` returns them.

    Returns
    -------
    dict
        For every chapter, in order of first appearance, a :class:`collections.Counter` of its
        ``(kind, status)`` pairs.

    Examples
    --------
    >>> from mfattn.evidence import counts
    >>> rec = [dict(kind="claim", ref=["Thm 4.1"], claim="error vs N", measured="-5.10e-01",
    ...             predicted="-0.500", tolerance="+-0.05", status="PASS", chapter="02-finite-n")]
    >>> counts(rec)
    {'02-finite-n': Counter({('claim', 'PASS'): 1})}
    """
    out: dict = {}
    for r in records:
        out.setdefault(r["chapter"], Counter())[(r["kind"], r["status"])] += 1
    return out


def _esc(s: str) -> str:
    return s.replace("|", "\\|").replace("*", "\\*")


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
    >>> from mfattn.evidence import markdown
    >>> rec = [dict(kind="claim", ref=["Thm 4.1"], claim="error vs N", measured="-5.10e-01",
    ...             predicted="-0.500", tolerance="+-0.05", status="PASS", chapter="02-finite-n")]
    >>> lines = markdown(rec).splitlines()
    >>> print(lines[2])
    | [02-finite-n](../notebooks/02-finite-n.md) | 1 PASS, 0 FAIL | 0 PASS, 0 FAIL | 0 PASS, 0 FAIL |
    >>> print(next(line for line in lines if line.startswith("| Thm 4.1 ")))
    | Thm 4.1 | inf E_N - inf E <= C / sqrt(N) (14) | **PASS** claim: error vs N (02) |
    """
    lines = ["| chapter | claims and derived | hypotheses | checks |", "|---|---|---|---|"]
    for ch, c in counts(records).items():
        def cell(kinds):
            p = sum(c[(k, "PASS")] for k in kinds)
            f = sum(c[(k, "FAIL")] for k in kinds)
            return f"{p} PASS, {f} FAIL"

        lines.append(f"| [{ch}](../notebooks/{ch}.md) | {cell(EVIDENCE)} | {cell(('hypothesis',))} | "
                     f"{cell(('check',))} |")
    lines += ["", "| result | what it says | verdicts (kind, status, chapter) |", "|---|---|---|"]
    for row in table(records):
        if row["verdicts"]:
            v = "<br>".join(f"**{r['status']}** {r['kind']}: {_esc(r['claim'])} ({r['chapter'][:2]})"
                            for r in row["verdicts"])
            if row["note"]:
                v += f"<br>*note*: {_esc(row['note'])}"
        else:
            v = f"*not tested*: {_esc(row['reason'])}"
        lines.append(f"| {row['result']} | {_esc(row['what'])} | {v} |")
    return "\n".join(lines)
