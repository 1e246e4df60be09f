"""Verdicts: what a chapter measured, what the paper predicts, the tolerance, and the decision.

The science a chapter reports ends in verdicts. :func:`check_close`, :func:`check_at_most`,
:func:`check_within`, :func:`check_fit` and :func:`check_fit_at_most` each build a :class:`Verdict`
from a measurement and the paper's prediction with one decision rule (:func:`decide`), and, where
the verdict names one, a counterfactual (:func:`perturbed`, :func:`shifted`) that the same rule must
reject for the verdict to count as evidence (:attr:`Verdict.evidence`). :func:`fmt` prints numbers to
the precision a run determines. Rendering the verdicts for a page is :mod:`mfattn.companion.render`'s work;
chapters import both through :mod:`mfattn.companion.book`.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

__all__ = ["EVIDENCE", "FORMS", "KINDS", "MAX_MARGIN", "RULES", "Counterfactual", "Verdict", "all_passed", "assess",
           "check_at_most", "check_close", "check_fit", "check_fit_at_most", "check_within", "competitor", "decide",
           "constant_counterfactuals", "fmt", "perturbed", "resolution", "shifted", "summary"]

def fmt(x: float, sig: int = 3, floor: float = 0.0) -> str:
    """``x`` printed to the precision a run determines, the same on every machine.

    ``sig`` significant digits in scientific notation (the nbval sanitiser compares two of the
    default three); ``sig=0`` prints only the nearest power of ten, ``~1e-06``, for a figure whose
    digits depend on floating-point rounding (the floor of a local solve, a chaotic search) while
    its size does not. A value with ``|x| < floor`` prints as ``<FLOOR`` (``>-FLOOR`` when negative):
    rounding-level figures (float64 identities, a norm at 1e-16 on one CPU and 0 on another) and the
    floors of local solves then print alike everywhere.

    Parameters
    ----------
    x : float
        The value.
    sig : int
        Significant digits, ``>= 0``.
    floor : float
        Values of smaller magnitude print as ``<FLOOR`` (finite, ``>= 0``; 0 for none).

    Returns
    -------
    str
        The printed value (``str(x)`` for ``nan`` and infinities).

    Examples
    --------
    >>> from mfattn.companion.book import fmt
    >>> fmt(0.000123456), fmt(-2.0, sig=2)
    ('1.23e-04', '-2.0e+00')
    >>> fmt(123456.0, sig=0), fmt(3e-17, floor=1e-12), fmt(-3e-17, floor=1e-12)
    ('~1e+05', '<1e-12', '>-1e-12')
    """
    if not isinstance(sig, int) or sig < 0:
        raise ValueError(f"sig: expected a non-negative integer, got {sig!r}")
    if not math.isfinite(floor) or floor < 0:
        raise ValueError(f"floor: expected a finite non-negative number, got {floor!r}")
    if not math.isfinite(x):
        return str(x)
    if abs(x) < floor:
        return f">-{floor:.0e}" if x < 0 else f"<{floor:.0e}"
    if sig == 0:
        return "0" if x == 0 else f"{'-' if x < 0 else ''}~1e{round(math.log10(abs(x))):+03d}"
    return f"{x:.{sig - 1}e}"


KINDS = {
    "claim": "a statement of arXiv 2606.10469 (or of a companion text), tested where it could fail",
    "derived": "a result this book derives in the chapter, tested where it could fail",
    "hypothesis": "whether an assumption of the paper holds in this model (PASS: it holds)",
    "check": "an identity or consistency check that holds by construction: useful, not evidence",
    "external": "agreement with an independent implementation by other authors (their public code): evidence "
                "that the engine computes what they computed, not about the paper",
}
EVIDENCE = ("claim", "derived")  # the kinds that can count as evidence about the paper (see Verdict.evidence)

RULES = ("close", "at_most", "within", "fit", "fit_at_most")


def decide(decision: dict, prediction) -> bool:
    """The decision rule of a verdict applied to a prediction: the one place where PASS is decided.

    Every ``check_*`` function decides its prediction with it, and its counterfactual (a wrong
    prediction the same measurement must reject) the same way; the stored ``decision`` of a
    committed verdict lets the tests decide both again without re-running anything.

    Parameters
    ----------
    decision : dict
        ``{"rule": one of RULES, ...}`` with the measured numbers the rule needs: ``close``:
        ``value, tol``; ``at_most``: ``value, tol``; ``within``: ``value, a, b, lo_open, hi_open``
        (``[a, b]`` the measurement's interval, ``a = b = value`` for a point); ``fit``: ``lo, hi``
        (the interval of a fitted rate); ``fit_at_most``: ``lo``. A stored decision also holds
        its verdict's ``prediction``.
    prediction : float or tuple of float
        ``close``: the predicted value; ``at_most`` and ``fit_at_most``: the upper bound;
        ``within``: the range ``(lo, hi)``; ``fit``: the predicted rate.

    Returns
    -------
    bool
        PASS.

    Raises
    ------
    ValueError
        If the rule is unknown.

    Examples
    --------
    >>> from mfattn.companion.book import decide
    >>> d = {"rule": "fit", "lo": -0.58, "hi": -0.43}
    >>> decide(d, -0.5), decide(d, -0.25)
    (True, False)
    >>> decide({"rule": "at_most", "value": 0.02, "tol": 0.0}, 0.05)
    True
    """
    rule = decision.get("rule")
    # a stored decision holds non-finite numbers as strings ("inf", "-inf", "nan"): float() reads them
    d = {k: (float(v) if isinstance(v, str) and k != "rule" else v) for k, v in decision.items()}
    p = tuple(float(x) for x in prediction) if isinstance(prediction, (tuple, list)) else float(prediction)
    fin = lambda *keys: all(math.isfinite(d[k]) for k in keys)  # noqa: E731
    if rule == "close":
        return fin("value") and abs(d["value"] - p) <= d["tol"]
    if rule == "at_most":
        return fin("value") and d["value"] <= p + d["tol"]
    if rule == "within":
        return (fin("value", "a", "b") and (p[0] < d["a"] if d["lo_open"] else p[0] <= d["a"])
                and (d["b"] < p[1] if d["hi_open"] else d["b"] <= p[1]))
    if rule == "fit":
        return d["lo"] <= p <= d["hi"]
    if rule == "fit_at_most":
        return fin("lo") and d["lo"] <= p
    raise ValueError(f"decision: rule {rule!r} is not one of {RULES}")


#: A wrong prediction is a counterfactual that could have happened when it lies within MAX_MARGIN
#: resolutions of the verdict's own prediction. A resolution is what the decision rule resolves: the
#: half-width of a fitted rate's interval (``fit``), the distance from the rate to the lower end of
#: its interval (``fit_at_most``), the tolerance (``close``, ``at_most``), the half-width of the
#: measurement's interval (``within``). A 95% interval's half-width is about two standard errors, so
#: four half-widths are about eight: a prediction farther away than that is one no run of this
#: measurement could have confused with the verdict's own, and rejecting it shows nothing the PASS
#: did not. Farther counterfactuals are allowed only as a named competitor (:func:`competitor`) or a
#: measured control (:func:`perturbed` with its ``source``), and are labelled so.
MAX_MARGIN = 4.0

#: The forms a counterfactual takes, as the verdict tables and the evidence map label them.
FORMS = {
    "wrong": "a wrong prediction within MAX_MARGIN resolutions of the verdict's own (its margin recorded)",
    "competitor": "the value of a named competing theory or computation, at any distance (its source recorded)",
    "control": "the same measurement taken in a perturbed setting by the same run (its source recorded)",
}


def perturbed(measured, why: str, *, source: str = "", interval=None, sig: int = 3, floor: float = 0.0) -> dict:
    """A measured control: the same measurement taken where the theory's hypothesis is broken (a
    perturbed model, the wrong time variable, the hypothesis's quantity removed), which must fail the
    verdict's own prediction and tolerance.

    The value must be one the run computed, never a number typed in: ``source`` names the run and
    the quantity (``tests/test_counterfactuals.py`` refuses a chapter whose ``perturbed`` value is a
    constant expression). A control without a source is shown, and not counted as evidence.

    Parameters
    ----------
    measured : float or LogLogFit or OrderFit
        What the measurement gives in the perturbed setting: a value, or a fitted rate for
        :func:`check_fit` and :func:`check_fit_at_most`.
    why : str
        What was perturbed.
    source : str
        Which run of the chapter computed ``measured``, and which quantity it is (its provenance).
    interval : tuple of float or None
        For :func:`check_within` with an interval: the perturbed measurement's interval.
    sig, floor : int, float
        How the perturbed value is printed (see :func:`fmt`): the digits and the rounding floor that
        its run determines.

    Returns
    -------
    dict
        The counterfactual, to pass as ``counterfactual=`` to a ``check_*`` function.

    Examples
    --------
    >>> from mfattn.companion.book import check_at_most, perturbed
    >>> v = check_at_most("gap at equal rescaled time / tolerance", 0.3, 1.0, kind="claim",
    ...                   counterfactual=perturbed(40.0, "compared at equal physical time",
    ...                                            source="the same two runs, read at equal t"))
    >>> v.counterfactual.status, v.counterfactual.predicted, v.evidence
    ('FAIL', 'measured 4.00e+01', True)
    >>> check_at_most("gap", 0.3, 1.0, kind="claim", counterfactual=perturbed(40.0, "no source")).evidence
    False
    """
    if not isinstance(source, str):
        raise ValueError(f"source: expected the run and quantity as text, got {source!r}")
    return {"perturbed": measured, "why": why, "interval": interval, "sig": sig, "floor": floor,
            "form": "control", "source": source}


def competitor(prediction, why: str, *, source: str) -> dict:
    """A named competitor: the value a competing theory or computation gives, which the measurement
    must reject. Unlike a wrong prediction (``(prediction, why)``) it may lie any distance from the
    verdict's own prediction; its margin is recorded and the verdict is labelled as resting on a
    competitor, so a reader can judge how close it came.

    Parameters
    ----------
    prediction : float or tuple of float
        The competitor's prediction, in the form of the verdict's own (see :func:`decide`).
    why : str
        Which theory it is.
    source : str
        Where its value comes from: the formula or the computation of the run that gives it
        (required, non-empty).

    Returns
    -------
    dict
        The counterfactual, to pass as ``counterfactual=`` to a ``check_*`` function.

    Examples
    --------
    >>> from mfattn.companion.book import check_at_most, competitor
    >>> v = check_at_most("largest eigenvalue", 0.4999, 0.5, 1e-3, kind="claim",
    ...                   counterfactual=competitor(0.25, "the logistic constant", source="sigma' <= 1/4"))
    >>> v.evidence, v.counterfactual.form, round(v.counterfactual.margin)
    (True, 'competitor', 250)
    """
    if not isinstance(source, str) or not source.strip():
        raise ValueError("source: a competitor names the theory or computation its value comes from")
    return {"prediction": prediction, "why": why, "form": "competitor", "source": source}


def shifted(fit, rate: float, why: str) -> dict:
    """The counterfactual of a one-sided test of a fitted rate (:func:`check_fit_at_most`): the same
    measurement, with the same interval, had the true rate been ``rate`` (the interval moved to it).
    It must fail: the interval must be narrow enough to lie wholly above the bound were the rate
    ``rate``, or the test could not have failed, and it is a check. It is a wrong prediction: its
    margin is ``|rate - bound|`` over the distance from the fitted rate to the interval's lower end,
    and must be at most :data:`MAX_MARGIN`.

    Parameters
    ----------
    fit : LogLogFit or OrderFit
        The measured fit.
    rate : float
        The counterfactual rate, e.g. an exponent slower than the bound's.
    why : str
        Which wrong theory it stands for.

    Returns
    -------
    dict
        The counterfactual, to pass as ``counterfactual=`` to :func:`check_fit_at_most`.

    Examples
    --------
    >>> from mfattn.companion.book import check_fit_at_most, shifted
    >>> from mfattn.analysis.fitting import LogLogFit
    >>> fit = LogLogFit(slope=-0.52, intercept=0.0, slope_lo=-0.6, slope_hi=-0.44, level=0.95, n=8)
    >>> v = check_fit_at_most("decay", fit, -0.5, kind="claim", counterfactual=shifted(fit, -0.25, "N^-1/4"))
    >>> v.counterfactual.status, v.evidence, round(v.counterfactual.margin, 2)
    ('FAIL', True, 3.13)
    >>> wide = LogLogFit(slope=-0.52, intercept=0.0, slope_lo=-0.9, slope_hi=-0.14, level=0.95, n=8)
    >>> check_fit_at_most("decay", wide, -0.5, kind="claim", counterfactual=shifted(wide, -0.25, "N^-1/4")).evidence
    False
    >>> far = check_fit_at_most("decay", fit, -0.5, kind="claim", counterfactual=shifted(fit, 3.0, "N^3"))
    >>> far.evidence, far.counterfactual.problem.startswith("43.8 half-widths")
    (False, True)
    """
    d = rate - _rate(fit)[0]
    moved = fit._replace(**{k: getattr(fit, k) + d for k in _fields(fit)})
    return {"perturbed": moved, "why": f"{why} (the same interval about {rate:+.3f})", "interval": None, "sig": 3,
            "floor": 0.0, "form": "wrong", "shifted_to": float(rate)}


def _perturb(decision: dict, cf: dict) -> dict:
    """The verdict's decision with the perturbed measurement in place of the measured numbers."""
    m = cf["perturbed"]
    if decision["rule"] in ("fit", "fit_at_most"):
        new = dict(zip(("value", "lo", "hi"), _rate(m)))
    else:
        a, b = (m, m) if cf.get("interval") is None else cf["interval"]
        new = dict(value=float(m), a=float(a), b=float(b))
    return {k: new.get(k, v) for k, v in decision.items()}  # the numbers the rule reads, in place


#: Names a constant expression may use: a value built from these and literals alone is a number
#: typed in, not one the run computed (:func:`constant_counterfactuals`).
_CONSTANT_NAMES = {"math", "np", "numpy", "torch", "float", "int", "abs", "min", "max", "pow", "round", "sqrt", "log",
                   "exp", "pi", "e", "inf", "nan"}


def constant_counterfactuals(code: str) -> list[str]:
    """The calls of :func:`perturbed` in ``code`` whose value is a constant expression (literals, and
    ``math``/``numpy`` functions of them): a number no run measured, which a measured control may
    never be (a theory's number is a :func:`competitor`, labelled so). ``python -m mfattn run`` refuses such a chapter, and
    ``tests/test_counterfactuals.py`` checks every chapter.

    Parameters
    ----------
    code : str
        Python source, e.g. a chapter's code cells joined.

    Returns
    -------
    list of str
        The offending calls, as source text (empty when there are none).

    Examples
    --------
    >>> from mfattn.companion.verdicts import constant_counterfactuals
    >>> constant_counterfactuals("v = check(c, counterfactual=perturbed(math.sqrt(8), 'sqrt growth', source='x'))")
    ["perturbed(math.sqrt(8), 'sqrt growth', source='x')"]
    >>> constant_counterfactuals("v = check(c, counterfactual=perturbed(ratio_at_32, 'why', source='run B'))")
    []
    """
    import ast

    tree = ast.parse(code)
    aliases = {"perturbed"} | {a.asname for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                               for a in n.names if a.name == "perturbed" and a.asname}

    def constant(node):  # literals, and names of math functions, alone; no string
        nodes = list(ast.walk(node))
        values = [n.value for n in nodes if isinstance(n, ast.Constant)]
        return ({n.id for n in nodes if isinstance(n, ast.Name)} <= _CONSTANT_NAMES
                and not any(isinstance(v, str) for v in values)
                and any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values))

    # a competitor's value is a theory's number by design; its source says which
    return [ast.get_source_segment(code, n) or ast.dump(n) for n in ast.walk(tree)
            if isinstance(n, ast.Call) and n.args and constant(n.args[0])
            and getattr(n.func, "attr", getattr(n.func, "id", "")) in aliases]


_UNIT = {r: "tolerances" if r in ("close", "at_most") else "half-widths of its interval" for r in RULES}


def resolution(decision: dict) -> float:
    """What a decision resolves, the unit of a counterfactual's margin (see :data:`MAX_MARGIN`): the
    half-width of a fitted rate's interval, the distance from a rate to its interval's lower end for a
    one-sided test, the tolerance of ``close`` and ``at_most``, the half-width of a ``within``
    measurement's interval (0 for a point value).

    Parameters
    ----------
    decision : dict
        A verdict's decision (see :func:`decide`).

    Returns
    -------
    float
        The resolution, ``>= 0`` (``nan`` when the decision's numbers are not finite).

    Examples
    --------
    >>> from mfattn.companion.book import resolution
    >>> resolution({"rule": "fit", "lo": -0.6, "hi": -0.4}), resolution({"rule": "close", "tol": 0.1})
    (0.09999999999999998, 0.1)
    """
    g = lambda k: float(decision[k])  # noqa: E731 (stored decisions hold non-finite numbers as strings)
    rule = decision.get("rule")
    if rule not in RULES:
        raise ValueError(f"decision: rule {rule!r} is not one of {RULES}")
    return {"fit": lambda: (g("hi") - g("lo")) / 2, "fit_at_most": lambda: g("value") - g("lo"),
            "within": lambda: (g("b") - g("a")) / 2}.get(rule, lambda: abs(g("tol")))()


def assess(decision: dict, cf: dict, passed: bool = False) -> tuple[float | None, str]:
    """Whether a counterfactual could have happened: its margin and, where it cannot count, why.

    The one place the rules of :data:`FORMS` are applied, to a verdict being built and to a stored
    record alike (``tests/test_counterfactuals.py`` re-assesses every committed verdict).

    - **wrong** (a prediction, or :func:`shifted`): its margin, the distance from the verdict's own
      prediction in resolutions (:func:`resolution`), must be at most :data:`MAX_MARGIN`, unless the
      measurement accepts it (``passed``): what happened could happen, however far. A range
      that does not meet the prediction's range (the complement of a one-sided prediction, say)
      fails whenever the verdict passes and is refused with ``ValueError`` where a verdict is built.
    - **competitor**: any margin (recorded), with a source.
    - **control** (:func:`perturbed`): a source is required; no margin (the prediction is the
      verdict's own).

    Parameters
    ----------
    decision : dict
        The verdict's decision, with its ``prediction`` (as :func:`decide` stores it).
    cf : dict
        ``form`` (one of :data:`FORMS`), ``prediction`` (wrong, competitor), ``shifted_to`` (a
        :func:`shifted` one), ``source``.
    passed : bool
        Whether the verdict's decision accepts the counterfactual.

    Returns
    -------
    (float or None, str)
        The margin (``None`` for a control or a range), and the problem (``""`` when it can count).

    Examples
    --------
    >>> from mfattn.companion.book import assess
    >>> d = {"rule": "fit", "lo": -0.6, "hi": -0.4, "prediction": -0.5}
    >>> assess(d, {"form": "wrong", "prediction": -0.25})
    (2.5000000000000004, '')
    >>> assess(d, {"form": "wrong", "prediction": 0.5})[1]
    '10.0 half-widths of its interval from the prediction, beyond 4: name a competitor() or a measured control'
    >>> assess(d, {"form": "wrong", "prediction": 0.5}, passed=True)  # the measurement landed on it
    (10.0, '')
    >>> assess({"rule": "within", "value": -2.0, "a": -2.5, "b": -1.5, "prediction": ["-inf", -1.0],
    ...         "lo_open": False, "hi_open": False}, {"form": "wrong", "prediction": [-1.0, "inf"]})[1]
    "a range that does not meet the prediction's: it fails whenever the verdict passes"
    """
    form = cf.get("form", "wrong")
    if form not in FORMS:
        raise ValueError(f"counterfactual: form {form!r} is not one of {sorted(FORMS)}")
    unsourced = not str(cf.get("source") or "").strip()
    if form == "control":
        return None, ("a perturbed measurement without its source (perturbed(..., source=) names the run and "
                      "quantity)" if unsourced else "")
    p = decision["prediction"]
    q = cf["shifted_to"] if "shifted_to" in cf else cf["prediction"]
    if isinstance(p, (list, tuple)):  # a range: a counterfactual range must meet it
        (lo, hi), (qlo, qhi) = (tuple(float(x) for x in p), tuple(float(x) for x in q))
        if qhi < lo or hi < qlo or (qhi == lo and (decision.get("lo_open") or qlo < qhi)) or \
                (qlo == hi and (decision.get("hi_open") or qlo < qhi)):
            return None, "a range that does not meet the prediction's: it fails whenever the verdict passes"
        return 0.0, ""
    res = resolution(decision)
    dist = abs(float(q) - float(p))
    margin = dist / res if res > 0 else (0.0 if dist == 0 else math.inf)
    if form == "competitor":
        return margin, "a competitor without its source" if unsourced else ""
    if margin > MAX_MARGIN and not passed:
        far = f"{margin:.1f}" if math.isfinite(margin) else "infinitely many"
        unit = _UNIT[decision["rule"]] if res > 0 else f"{_UNIT[decision['rule']]} (it resolves none)"
        return margin, (f"{far} {unit} from the prediction, beyond {MAX_MARGIN:g}: name a competitor() or a "
                        f"measured control")
    return margin, ""


@dataclass(frozen=True)
class Counterfactual:
    """A wrong prediction that the verdict's measurement must reject for the verdict to be evidence:
    an exponent off by the margin the tolerance claims to resolve, a bound without its constant's
    growth, the value a perturbed model would give.

    Attributes
    ----------
    prediction : float or tuple of float
        The wrong prediction, in the form of the verdict's own prediction (see :func:`decide`); for
        a :func:`perturbed` counterfactual, the verdict's own prediction.
    predicted : str
        It, printed as the verdict prints its prediction; for a :func:`perturbed` one, the
        perturbed measurement.
    why : str
        Which wrong theory it stands for.
    passed : bool
        Whether the verdict's decision rule accepts it (then the measurement cannot tell the theory
        from the wrong one).
    form : str
        One of :data:`FORMS`: ``"wrong"``, ``"competitor"`` or ``"control"``.
    margin : float or None
        Its distance from the verdict's prediction in resolutions (:func:`resolution`); ``None`` for
        a control or a range.
    source : str
        Where a competitor's or a control's value comes from.
    problem : str
        Why it could not have happened (:func:`assess`), ``""`` when it can count; a verdict whose
        counterfactual has a problem is not evidence.

    Examples
    --------
    >>> from mfattn.companion.book import check_fit
    >>> from mfattn.analysis.fitting import LogLogFit
    >>> fit = LogLogFit(slope=-0.52, intercept=0.0, slope_lo=-0.6, slope_hi=-0.44, level=0.95, n=8)
    >>> v = check_fit("error vs N", fit, -0.5, kind="claim", counterfactual=(-0.25, "an N^-1/4 rate"))
    >>> v.counterfactual.passed, v.evidence
    (False, True)
    """

    prediction: object
    predicted: str
    why: str
    passed: bool
    decision: dict | None = None  # the perturbed measurement's numbers (perturbed), else None
    form: str = "wrong"
    margin: float | None = None
    source: str = ""
    problem: str = ""
    shifted_to: float | None = None  # the rate a shifted() counterfactual moved the fit to
    unit: str = "resolutions"  # what the margin counts: half-widths of an interval, or tolerances

    @property
    def status(self) -> str:
        return "PASS" if self.passed else "FAIL"

    @property
    def outcome(self) -> str:
        """``"rejected"`` when the measurement rejects it (what evidence needs), else ``"not rejected"``."""
        return "not rejected" if self.passed else "rejected"

    def label(self) -> str:
        """Its form in a few words, as the verdict tables print it.

        Returns
        -------
        str
            ``"2.3 half-widths of its interval from the prediction, at most 4"`` for a wrong
            prediction, ``"competitor: SOURCE, ..."``, ``"measured control: SOURCE"``.

        Examples
        --------
        >>> from mfattn.companion.book import check_close
        >>> check_close("c", 1.0, 1.0, 0.1, kind="claim", counterfactual=(1.25, "a quarter more")).counterfactual.label()
        '2.5 tolerances from the prediction, at most 4'
        """
        if self.form == "control":
            return f"measured control: {self.source}" if self.source else "measured control, no source"
        if self.form == "competitor":
            far = "" if self.margin is None else (f", {self.margin:.1f} {self.unit} away" if math.isfinite(self.margin)
                                                  else ", where the measurement resolves nothing")
            return f"competitor: {self.source}{far}"
        if self.margin is None:
            return ""
        return f"{self.margin:.1f} {self.unit} from the prediction, at most {MAX_MARGIN:g}"

    def description(self) -> str:
        """What a verdict's line and table row print after the counterfactual's value: why, its
        :meth:`label` and its outcome.

        Returns
        -------
        str
            ``"(WHY; LABEL): rejected"``, or ``"(WHY): ..."`` without a label.

        Examples
        --------
        >>> from mfattn.companion.book import check_close
        >>> v = check_close("c", 1.0, 1.0, 0.1, kind="claim", counterfactual=(1.25, "a quarter more"))
        >>> v.counterfactual.description()
        '(a quarter more; 2.5 tolerances from the prediction, at most 4): rejected'
        """
        label = self.label()
        return f"({self.why}{'; ' + label if label else ''}): {self.outcome}"


@dataclass(frozen=True)
class Verdict:
    """One verdict of a chapter: what was measured, what the paper (or the chapter) predicts, the
    tolerance and where it comes from, PASS or FAIL, and what kind of evidence it is (:data:`KINDS`).

    ``ref`` names the results it bears on, as the evidence map (:mod:`mfattn.companion.evidence`) lists them:
    ``"Thm 4.3"``, ``"Prop. 3.4"``, ``"Remark 6.7"``, ``"(15)"``, ``"Thm 6.6.2"`` (item 2), or a
    companion text's result as ``"alvarezlopez2026perceptrons Thm 3.5"``.

    Chapters build verdicts with :func:`check_close`, :func:`check_at_most`, :func:`check_within`,
    :func:`check_fit` and :func:`check_fit_at_most`, and show them with :func:`~mfattn.companion.render.report`.

    Attributes
    ----------
    claim : str
        What is checked, in words.
    measured : float
        The measured value.
    predicted : str
        The prediction, as text (a value, a bound, an interval).
    tolerance : str
        The tolerance and where it comes from.
    passed : bool
        The decision.
    kind : str
        One of :data:`KINDS`; required (``ValueError`` otherwise).
    ref : tuple of str
        The results it bears on (a single string is accepted and wrapped in a tuple).
    sig : int
        Significant digits of ``measured`` that the run determines (see :func:`fmt`).
    floor : float
        Measured values of smaller magnitude are rounding and print as ``<floor``.
    status : str
        ``"PASS"`` or ``"FAIL"`` (a property).

    Examples
    --------
    >>> from mfattn.companion.book import Verdict
    >>> v = Verdict("slope of the error", -0.51, "-0.500", "+-0.05", True, kind="claim", ref="Thm 4.1")
    >>> v.status, v.ref
    ('PASS', ('Thm 4.1',))
    """

    claim: str  # what is checked, in words
    measured: float
    predicted: str  # the prediction, as text (a value, a bound, an interval)
    tolerance: str  # the tolerance and where it comes from
    passed: bool
    kind: str = ""  # one of KINDS
    ref: tuple = ()  # the results it bears on
    sig: int = 3  # significant digits of the measured value the run determines (see fmt)
    floor: float = 0.0  # measured values below this in size are rounding and print as <floor
    decision: dict | None = None  # the rule and measured numbers that decided it (see decide)
    counterfactual: Counterfactual | None = None  # a wrong prediction the measurement must reject

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind: every verdict needs a kind, one of {sorted(KINDS)}; got {self.kind!r}")
        ref = (self.ref,) if isinstance(self.ref, str) else tuple(self.ref)
        if not all(isinstance(r, str) and r for r in ref):
            raise ValueError(f"ref: expected result names such as 'Thm 4.3', got {self.ref!r}")
        object.__setattr__(self, "ref", ref)

    @property
    def status(self) -> str:
        return "PASS" if self.passed else "FAIL"

    @property
    def evidence(self) -> bool:
        """Whether the verdict counts as evidence about the paper: a claim or derived result that
        names a counterfactual, where the measurement does not accept both the prediction and the
        counterfactual. A claim without one, or whose counterfactual passes beside it, is a check."""
        return (self.kind in EVIDENCE and self.counterfactual is not None and not self.counterfactual.problem
                and not (self.passed and self.counterfactual.passed))

    @property
    def counted_as(self) -> str:
        """The group the chapter's count puts it in: ``"evidence"``, ``"hypothesis"``, ``"external"`` or
        ``"check"``."""
        if self.evidence:
            return "evidence"
        return self.kind if self.kind in ("hypothesis", "external") else "check"

    @property
    def check_reason(self) -> str:
        """Why a claim or derived result counts as a check (no counterfactual, one that could not
        have happened, one not rejected); ``""`` for a verdict that is not so counted."""
        if self.kind not in EVIDENCE or self.evidence:
            return ""
        c = self.counterfactual
        return ("no counterfactual named" if c is None else
                f"its counterfactual could not have happened ({c.problem})" if c.problem else
                "its counterfactual is not rejected either")

    def line(self) -> str:
        """The verdict as two lines of plain text, as :func:`~mfattn.companion.render.report` prints it outside a notebook.

        Returns
        -------
        str
            Status, kind, results and claim on the first line; measured value (through :func:`fmt`),
            prediction and tolerance on the second; the counterfactual and its outcome on a third,
            when there is one. A claim or derived result that is not :attr:`evidence` says why.

        Examples
        --------
        >>> from mfattn.companion.book import Verdict, check_close
        >>> v = Verdict("slope of the error", -0.51, "-0.500", "+-0.05", True, kind="claim", ref="Thm 4.1")
        >>> print(v.line())
        [PASS] (claim, counted as a check: no counterfactual named; Thm 4.1) slope of the error
               measured -5.10e-01 | predicted -0.500 | tolerance +-0.05
        >>> v = check_close("slope of the error", -0.51, -0.5, 0.05, kind="claim", ref="Thm 4.1",
        ...                 counterfactual=(-0.35, "an N^-0.35 rate"))
        >>> print(v.line())
        [PASS] (claim; Thm 4.1) slope of the error
               measured -5.10e-01 | predicted -5.00e-01 | tolerance +-5.00e-02
               counterfactual -3.50e-01 (an N^-0.35 rate; 3.0 tolerances from the prediction, at most 4): rejected
        """
        kind = f"{self.kind}, counted as a check: {self.check_reason}" if self.check_reason else self.kind
        refs = f"; {', '.join(self.ref)}" if self.ref else ""
        c = self.counterfactual
        cf = f"\n       counterfactual {c.predicted} {c.description()}" if c is not None else ""
        return (f"[{self.status}] ({kind}{refs}) {self.claim}\n"
                f"       measured {fmt(self.measured, self.sig, self.floor)} | predicted {self.predicted} | "
                f"tolerance {self.tolerance}{cf}")

    def record(self) -> dict:
        """The machine-readable form that :func:`~mfattn.companion.render.report` stores with the executed notebook.

        Returns
        -------
        dict
            ``kind``, ``ref`` (a list), ``claim``, ``measured`` (printed by :func:`fmt`),
            ``predicted``, ``tolerance`` and ``status``, all JSON values.

        Examples
        --------
        >>> from mfattn.companion.book import Verdict
        >>> v = Verdict("slope of the error", -0.51, "-0.500", "+-0.05", True, kind="claim", ref="Thm 4.1")
        >>> v.record()
        {'kind': 'claim', 'ref': ['Thm 4.1'], 'claim': 'slope of the error', 'measured': '-5.10e-01',
         'predicted': '-0.500', 'tolerance': '+-0.05', 'status': 'PASS'}
        """
        rec = dict(kind=self.kind, ref=list(self.ref), claim=self.claim,
                   measured=fmt(self.measured, self.sig, self.floor), predicted=self.predicted,
                   tolerance=self.tolerance, status=self.status)
        if self.decision is not None:  # what the tests and the replication read (not printed)
            c = self.counterfactual
            rec.update(evidence=self.evidence, value=_num(self.measured), decision=dict(self.decision),
                       counterfactual=None if c is None else dict(
                           prediction=_num(c.prediction), predicted=c.predicted, why=c.why, status=c.status,
                           form=c.form, margin=None if c.margin is None else _num(c.margin), source=c.source,
                           problem=c.problem, **({} if c.shifted_to is None else {"shifted_to": c.shifted_to}),
                           **({} if c.decision is None else {"decision": dict(c.decision)})))
        return rec


def _num(x):
    """A float, or a list of floats, as JSON holds it (non-finite values as strings)."""
    if isinstance(x, (tuple, list)):
        return [_num(y) for y in x]
    x = float(x)
    return x if math.isfinite(x) else str(x)


def _floats(d: dict) -> dict:
    return {k: float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
            for k, v in d.items()}


def _verdict(claim, measured, predicted, tolerance, why, decision, prediction, kind, ref, sig=3, floor=0.0,
             counterfactual=None, show=None) -> Verdict:
    """A verdict decided by :func:`decide`, with its counterfactual (a wrong prediction ``(prediction,
    why)``, :func:`competitor` or :func:`perturbed`) decided the same way (``show`` prints a
    prediction as the verdict prints its own); ``why`` is appended to the tolerance."""
    decision = dict(_floats(decision), prediction=_num(prediction))  # kept, so that it can be taken again
    c, cf = counterfactual, None
    if isinstance(c, tuple) and len(c) == 2 and isinstance(c[1], str):
        c = {"prediction": c[0], "why": c[1], "form": "wrong"}
    elif c is not None and not (isinstance(c, dict) and c.get("form") in FORMS):
        raise ValueError(f"counterfactual: expected (prediction, why), competitor(...) or perturbed(...), "
                         f"got {c!r}")
    if c is not None:
        # the decision with the perturbed measurement's numbers, for a control or a shifted fit
        d = _floats(_perturb(decision, c)) if "perturbed" in c else None
        p = prediction if d else c["prediction"]
        passed = bool(decide(d or decision, p))
        margin, problem = assess(decision, {**c, "prediction": _num(p)}, passed=passed)
        if "perturbed" not in c and c["form"] == "wrong" and problem.startswith("a range that does not meet"):
            raise ValueError(f"counterfactual: {show(p)} ({c['why']}) is {problem}; a counterfactual must be "
                             f"able to pass beside the prediction (see mfattn.companion.verdicts.assess)")
        shown = f"measured {fmt(d['value'], c['sig'], c['floor'])}" if d else show(p)
        cf = Counterfactual(p, shown, c["why"], passed, d, c["form"], margin, c.get("source", ""), problem,
                            c.get("shifted_to"), _UNIT[decision["rule"]])
    return Verdict(claim, measured, predicted, tolerance + (f" ({why})" if why else ""),
                   bool(decide(decision, prediction)), kind or "", ref, sig, floor, decision, cf)


def check_close(claim: str, measured: float, predicted: float, tol: float, why: str = "", *, kind: str = None,
                ref=(), sig: int = 3, floor: float = 0.0, counterfactual=None) -> Verdict:
    """PASS when ``|measured - predicted| <= tol``. ``kind`` (required) and ``ref``: see
    :class:`Verdict`. ``sig`` and ``floor`` say how precisely the run determines ``measured`` (see
    :func:`fmt`); they change the printout, never the decision.

    Parameters
    ----------
    claim : str
        What is checked, in words.
    measured : float
        The measured value (a non-finite value fails).
    predicted : float
        The predicted value.
    tol : float
        The tolerance.
    why : str
        Where the tolerance comes from, appended to it in parentheses.
    kind : str
        One of :data:`KINDS` (required).
    ref : str or tuple of str
        The results the verdict bears on (see :class:`Verdict`).
    sig : int
        Significant digits of ``measured`` in the printout (see :func:`fmt`).
    floor : float
        Measured values of smaller magnitude print as ``<floor``.
    counterfactual : tuple or dict or None
        ``(prediction, why)``: a wrong prediction, of the same form as the verdict's own, that the
        measurement must reject for a claim or derived result to count as evidence
        (:attr:`Verdict.evidence`); or :func:`perturbed`: the measurement in a perturbed setting,
        which the verdict's own prediction must reject. Decided by the same rule (:func:`decide`).

    Returns
    -------
    Verdict
        The verdict, with ``predicted`` and ``tolerance`` printed by :func:`fmt`.

    Examples
    --------
    >>> from mfattn.companion.book import check_close
    >>> v = check_close("risk at the teacher", 0.6931, 0.6932, 1e-3, "float64 rounding", kind="check")
    >>> v.passed, v.predicted, v.tolerance
    (True, '6.93e-01', '+-1.00e-03 (float64 rounding)')
    """
    return _verdict(claim, measured, fmt(predicted), f"+-{fmt(tol)}", why,
                    dict(rule="close", value=measured, tol=tol), predicted, kind, ref, sig, floor, counterfactual, fmt)


def check_at_most(claim: str, measured: float, bound: float, tol: float = 0.0, why: str = "", *, kind: str = None,
                  ref=(), sig: int = 3, floor: float = 0.0, counterfactual=None) -> Verdict:
    """PASS when ``measured <= bound + tol`` (keywords: as for :func:`check_close`).

    Parameters
    ----------
    claim : str
        What is checked, in words.
    measured : float
        The measured value (a non-finite value fails).
    bound : float
        The upper bound.
    tol : float
        The tolerance added to the bound.
    why : str
        Where the tolerance comes from, appended to it in parentheses.
    kind : str
        One of :data:`KINDS` (required).
    ref : str or tuple of str
        The results the verdict bears on (see :class:`Verdict`).
    sig : int
        Significant digits of ``measured`` in the printout (see :func:`fmt`).
    floor : float
        Measured values of smaller magnitude print as ``<floor``.
    counterfactual : tuple or dict or None
        ``(prediction, why)``: a wrong prediction, of the same form as the verdict's own, that the
        measurement must reject for a claim or derived result to count as evidence
        (:attr:`Verdict.evidence`); or :func:`perturbed`: the measurement in a perturbed setting,
        which the verdict's own prediction must reject. Decided by the same rule (:func:`decide`).

    Returns
    -------
    Verdict
        The verdict.

    Examples
    --------
    >>> from mfattn.companion.book import check_at_most
    >>> v = check_at_most("logit error", 0.02, 0.05, kind="claim", ref="(15)")
    >>> v.passed, v.predicted, v.tolerance
    (True, '<= 5.00e-02', '+0.00e+00')
    """
    return _verdict(claim, measured, f"<= {fmt(bound)}", f"+{fmt(tol)}", why,
                    dict(rule="at_most", value=measured, tol=tol), bound, kind, ref, sig, floor, counterfactual,
                    lambda b: f"<= {fmt(b)}")


def check_within(claim: str, measured: float, lo: float, hi: float, *, interval=None, hi_open: bool = False,
                 lo_open: bool = False, why: str = "", kind: str = None, ref=(), sig: int = 3,
                 counterfactual=None) -> Verdict:
    """PASS when ``lo <= measured <= hi`` (``lo <``, ``< hi`` with ``lo_open``, ``hi_open``); with
    ``interval = (a, b)``, a confidence interval of the measurement, the whole interval must lie in
    the range.

    Parameters
    ----------
    claim : str
        What is checked, in words.
    measured : float
        The measured value (a non-finite value fails).
    lo, hi : float
        The ends of the range.
    interval : tuple of float or None
        ``(a, b)``, a confidence interval of ``measured``; ``None`` to test the value itself.
    hi_open, lo_open : bool
        Whether the range excludes ``hi``, resp. ``lo``.
    why : str
        Where the tolerance comes from, appended to it in parentheses.
    kind : str
        One of :data:`KINDS` (required).
    ref : str or tuple of str
        The results the verdict bears on (see :class:`Verdict`).
    sig : int
        Significant digits of ``measured`` and of the interval in the printout (see :func:`fmt`).
    counterfactual : tuple or dict or None
        ``(prediction, why)``: a wrong prediction, of the same form as the verdict's own, that the
        measurement must reject for a claim or derived result to count as evidence
        (:attr:`Verdict.evidence`); or :func:`perturbed`: the measurement in a perturbed setting,
        which the verdict's own prediction must reject. Decided by the same rule (:func:`decide`).

    Returns
    -------
    Verdict
        The verdict; its tolerance names the interval, or ``point value``.

    Examples
    --------
    >>> from mfattn.companion.book import check_within
    >>> v = check_within("fraction of heads", 0.4, 0.0, 1.0, kind="hypothesis")
    >>> v.passed, v.predicted, v.tolerance
    (True, 'in [0.00e+00, 1.00e+00]', 'point value')
    >>> check_within("rate", 0.95, 0.0, 1.0, interval=(0.9, 1.3), kind="claim").passed
    False
    """
    a, b = (measured, measured) if interval is None else interval
    rng = lambda r: f"in {'(' if lo_open else '['}{fmt(r[0])}, {fmt(r[1])}{')' if hi_open else ']'}"  # noqa: E731
    tol = "point value" if interval is None else f"interval [{fmt(a, sig)}, {fmt(b, sig)}]"
    return _verdict(claim, measured, rng((lo, hi)), tol, why, dict(rule="within", value=measured, a=a, b=b,
                    lo_open=lo_open, hi_open=hi_open), (lo, hi), kind, ref, sig, 0.0, counterfactual, rng)


def _fields(fit) -> tuple[str, str, str]:
    """The fields of a fitted rate and its interval: a LogLogFit's slope, an OrderFit's order."""
    return ("slope", "slope_lo", "slope_hi") if hasattr(fit, "slope") else ("order", "order_lo", "order_hi")


def _rate(fit) -> tuple[float, float, float]:
    """(rate, lower, upper): the slope of a LogLogFit or the order of an OrderFit, with its interval."""
    return tuple(getattr(fit, k) for k in _fields(fit))


def check_fit(claim: str, fit, predicted: float, why: str = "", *, kind: str = None, ref=(),
              counterfactual=None) -> Verdict:
    """PASS when the interval of a fitted rate contains ``predicted``: the slope of a
    :class:`~mfattn.analysis.fitting.LogLogFit` or the order of an :class:`~mfattn.analysis.fitting.OrderFit`.
    The measured value printed is the fitted rate itself, the interval goes in the tolerance.

    Parameters
    ----------
    claim : str
        What is checked, in words.
    fit : LogLogFit or OrderFit
        The fit, with its confidence interval.
    predicted : float
        The predicted rate.
    why : str
        Appended to the tolerance in parentheses.
    kind : str
        One of :data:`KINDS` (required).
    ref : str or tuple of str
        The results the verdict bears on (see :class:`Verdict`).
    counterfactual : tuple or dict or None
        ``(prediction, why)``: a wrong prediction, of the same form as the verdict's own, that the
        measurement must reject for a claim or derived result to count as evidence
        (:attr:`Verdict.evidence`); or :func:`perturbed`: the measurement in a perturbed setting,
        which the verdict's own prediction must reject. Decided by the same rule (:func:`decide`).

    Returns
    -------
    Verdict
        The verdict.

    Examples
    --------
    >>> from mfattn.companion.book import check_fit
    >>> from mfattn.analysis.fitting import LogLogFit
    >>> fit = LogLogFit(slope=-0.52, intercept=0.0, slope_lo=-0.6, slope_hi=-0.44, level=0.95, n=8)
    >>> v = check_fit("error vs N", fit, -0.5, kind="claim", ref="Thm 4.1")
    >>> v.passed, v.predicted, v.tolerance
    (True, '-0.500', '95% CI [-0.600, -0.440]')
    """
    value, lo, hi = _rate(fit)
    return _verdict(claim, value, f"{predicted:+.3f}", f"{fit.level:.0%} CI [{lo:+.3f}, {hi:+.3f}]", why,
                    dict(rule="fit", value=value, lo=lo, hi=hi), predicted, kind, ref,
                    counterfactual=counterfactual, show=lambda p: f"{p:+.3f}")


def check_fit_at_most(claim: str, fit, bound: float, why: str = "", *, kind: str = None, ref=(),
                      counterfactual=None) -> Verdict:
    """One-sided test of a fitted rate against an upper *bound* of the paper: PASS unless the whole
    interval lies above ``bound``, i.e. unless the data show a decay significantly slower than the
    bound allows (a bound allows any faster decay). The measured value printed is the fitted rate.

    Parameters
    ----------
    claim : str
        What is checked, in words.
    fit : LogLogFit or OrderFit
        The fit, with its confidence interval.
    bound : float
        The upper bound on the rate.
    why : str
        Appended to the tolerance in parentheses.
    kind : str
        One of :data:`KINDS` (required).
    ref : str or tuple of str
        The results the verdict bears on (see :class:`Verdict`).
    counterfactual : tuple or dict or None
        ``(prediction, why)``: a wrong prediction, of the same form as the verdict's own, that the
        measurement must reject for a claim or derived result to count as evidence
        (:attr:`Verdict.evidence`); or :func:`perturbed`: the measurement in a perturbed setting,
        which the verdict's own prediction must reject. Decided by the same rule (:func:`decide`).

    Returns
    -------
    Verdict
        The verdict.

    Examples
    --------
    >>> from mfattn.companion.book import check_fit_at_most
    >>> from mfattn.analysis.fitting import LogLogFit
    >>> fit = LogLogFit(slope=-0.52, intercept=0.0, slope_lo=-0.6, slope_hi=-0.44, level=0.95, n=8)
    >>> check_fit_at_most("decay of the error", fit, -0.5, kind="claim").passed  # lower end below
    True
    >>> check_fit_at_most("decay of the error", fit, -0.7, kind="claim").passed  # whole CI above
    False
    """
    value, lo, hi = _rate(fit)
    tol = f"{fit.level:.0%} CI [{lo:+.3f}, {hi:+.3f}]; PASS unless the whole CI lies above the bound"
    return _verdict(claim, value, f"<= {bound:+.3f}", tol, why, dict(rule="fit_at_most", value=value, lo=lo),
                    bound, kind, ref, counterfactual=counterfactual, show=lambda b: f"<= {b:+.3f}")


def summary(verdicts) -> str:
    """The closing count of a chapter: evidence (claims and derived results that name a
    counterfactual their measurement rejects, :attr:`Verdict.evidence`) apart from hypotheses and
    checks.

    Parameters
    ----------
    verdicts : iterable of Verdict
        The chapter's verdicts.

    Returns
    -------
    str
        One line: the number of verdicts and the PASS and FAIL counts of each group.

    Examples
    --------
    >>> from mfattn.companion.book import check_at_most, check_close, summary
    >>> vs = [check_close("a", 1.0, 1.0, 0.1, kind="claim", counterfactual=(1.3, "30% more")),
    ...       check_at_most("b", 2.0, 1.0, kind="check"), check_close("c", 1.0, 1.0, 0.1, kind="claim")]
    >>> print(summary(vs))
    verdicts: 3. Evidence (claims and derived results with a counterfactual that could have happened and
    is rejected): 1 PASS, 0 FAIL. Hypotheses (PASS: it holds): 0 PASS, 0 FAIL. Checks (by construction, or
    no counterfactual that could have happened and is rejected): 1 PASS, 1 FAIL.
    """
    n = Counter((v.counted_as, v.passed) for v in verdicts)
    count = lambda g: f"{n[g, True]} PASS, {n[g, False]} FAIL"  # noqa: E731
    external = (f" External (agreement with other authors' code): {count('external')}."
                if n["external", True] + n["external", False] else "")
    return (f"verdicts: {n.total()}. Evidence (claims and derived results with a counterfactual that could "
            f"have happened and is rejected): {count('evidence')}. Hypotheses (PASS: it holds): "
            f"{count('hypothesis')}. Checks (by construction, or no counterfactual that could have happened and is "
            f"rejected): {count('check')}.{external}")


def all_passed(verdicts) -> bool:
    """Whether every verdict passed (hypotheses and checks included).

    Parameters
    ----------
    verdicts : iterable of Verdict
        The verdicts.

    Returns
    -------
    bool
        ``True`` when none failed (also for no verdicts).

    Examples
    --------
    >>> from mfattn.companion.book import all_passed, check_at_most, check_close
    >>> vs = [check_close("a", 1.0, 1.0, 0.1, kind="claim"), check_at_most("b", 2.0, 1.0, kind="check")]
    >>> all_passed(vs), all_passed(vs[:1])
    (False, True)
    """
    return all(v.passed for v in verdicts)
