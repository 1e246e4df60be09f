"""Counterfactuals that could have happened: the library refuses each strawman the evidence issue
found, and every committed verdict is assessed again from its stored numbers.

Each planted strawman below is one a chapter used: a constant typed in as a perturbed measurement
(Remark 3.5's sqrt(8)), the complement of a one-sided prediction (a tail slope >= -1 against < -1),
a shifted fit far from the margin (shifted(fit, +3)), a wrong exponent a hundred tolerances away (a
Taylor exponent off by one at tolerance 0.01), a control without provenance. None may count as
evidence; the complement is refused outright.
"""

import json
import math
from pathlib import Path

import pytest

from mfattn.analysis.fitting import LogLogFit
from mfattn.companion.evidence import collect
from mfattn.companion.runner import code_cells
from mfattn.companion.verdicts import (MAX_MARGIN, assess, check_at_most, check_close, check_fit, check_fit_at_most,
                                       check_within, competitor, constant_counterfactuals, decide, perturbed, shifted)

ROOT = Path(__file__).resolve().parents[1]
FIT = LogLogFit(slope=-0.5, intercept=0.0, slope_lo=-0.6, slope_hi=-0.4, level=0.95, n=8)


def test_a_constant_typed_in_as_a_perturbed_measurement_is_found():
    planted = ('v = check_at_most("ratio", r, 1.1, kind="claim",\n'
               '                  counterfactual=perturbed(math.sqrt(8), "sqrt(d_x) growth", source="theory"))')
    assert constant_counterfactuals(planted) == ['perturbed(math.sqrt(8), "sqrt(d_x) growth", source="theory")']
    assert constant_counterfactuals("cf = perturbed(4, 'x')") == ["perturbed(4, 'x')"]
    aliased = "from mfattn.companion.book import perturbed as instead\ncf = instead(2.0, 'x')"
    assert constant_counterfactuals(aliased) == ["instead(2.0, 'x')"]
    assert constant_counterfactuals("cf = perturbed(2 ** 1.5 / np.sqrt(2), 'x')") != []
    # a value the run computed passes, whatever arithmetic surrounds it
    assert constant_counterfactuals("cf = perturbed(float(np.log2(ratio[-1])), 'x', source='run')") == []


@pytest.mark.parametrize("md", sorted((ROOT / "notebooks").glob("*.md")), ids=lambda p: p.stem[:2])
def test_no_chapter_types_in_a_measured_control(md):
    assert constant_counterfactuals(code_cells(md)) == [], md.stem


def test_the_complement_of_a_one_sided_prediction_is_refused():
    # a tail slope below -1 (integrable) against the complement, a slope >= -1
    with pytest.raises(ValueError, match="does not meet"):
        check_within("tail slope", -2.5, -math.inf, -1.0, interval=(-3.0, -2.0), kind="claim",
                     counterfactual=((-1.0, math.inf), "I not integrable"))
    with pytest.raises(ValueError, match="does not meet"):  # any range disjoint from the prediction's
        check_within("q", -0.02, -math.inf, 0.0, hi_open=True, kind="claim",
                     counterfactual=((0.0, math.inf), "convexity"))
    # a range that meets the prediction's can pass beside it: allowed
    v = check_within("w", 1.0, 0.5, 1.5, interval=(0.8, 1.2), kind="claim", counterfactual=((1.1, 2.0), "shifted"))
    assert v.evidence and v.counterfactual.margin == 0.0


def test_a_shifted_fit_far_from_the_margin_is_not_evidence():
    near = check_fit_at_most("decay", FIT, -0.5, kind="claim", counterfactual=shifted(FIT, -0.25, "N^-1/4"))
    assert near.evidence and near.counterfactual.margin == pytest.approx(2.5)
    far = check_fit_at_most("decay", FIT, -0.5, kind="claim", counterfactual=shifted(FIT, 3.0, "N^3"))
    assert not far.evidence and not far.counterfactual.passed  # rejected, and still not evidence
    assert far.counterfactual.margin == pytest.approx(35.0) and "beyond 4" in far.counterfactual.problem
    assert "could not have happened" in far.line() and far.counted_as == "check"


@pytest.mark.parametrize("dist, counts", [(0.03, True), (0.0399, True), (0.041, False), (1.0, False)])
def test_a_wrong_prediction_counts_only_within_the_margin(dist, counts):
    # a Taylor exponent at tolerance 0.01: off by one is 100 tolerances away
    v = check_close("exponent", 2.0, 2.0, 0.01, kind="derived", counterfactual=(2.0 + dist, "off"))
    assert v.counterfactual.margin == pytest.approx(dist / 0.01) and v.evidence is counts
    assert MAX_MARGIN == 4.0


def test_a_wrong_prediction_against_a_point_decision_resolves_nothing():
    v = check_at_most("eigenvalue", 0.49999, 0.5, 0.0, kind="claim", counterfactual=(0.25, "logistic 1/4"))
    assert not v.evidence and "resolves none" in v.counterfactual.problem
    # the same number as a named competitor counts, labelled with its source and its distance
    c = check_at_most("eigenvalue", 0.49999, 0.5, 1e-3, kind="claim",
                      counterfactual=competitor(0.25, "logistic 1/4", source="sigma' <= 1/4"))
    assert c.evidence and c.counterfactual.form == "competitor" and "competitor: sigma' <= 1/4" in c.line()
    with pytest.raises(ValueError, match="source"):
        competitor(0.25, "no source", source=" ")


def test_a_control_without_its_source_is_not_evidence():
    fit0 = LogLogFit(0.0, 0.0, -0.1, 0.1, 0.95, 8)
    bare = check_fit("f", FIT, -0.5, kind="claim", counterfactual=perturbed(fit0, "no noise"))
    assert not bare.evidence and "without its source" in bare.counterfactual.problem
    sourced = check_fit("f", FIT, -0.5, kind="claim", counterfactual=perturbed(fit0, "no noise", source="run B"))
    assert sourced.evidence and sourced.counterfactual.label() == "measured control: run B"


RECORDS = [r for r in collect(ROOT) if r.get("decision") and r.get("counterfactual")]


@pytest.mark.parametrize("r", RECORDS, ids=lambda r: f"{r['chapter'][:2]}-{r['claim'][:40]}")
def test_every_committed_counterfactual_is_assessed_again(r):
    """The stored margin and problem come out again from the stored numbers, and so does the
    evidence flag the map counts: a record edited by hand, or written under other rules, fails."""
    cf, dec = r["counterfactual"], r["decision"]
    form = cf.get("form", "wrong")
    passed = decide(dec, dec["prediction"])
    cf_passed = decide(cf["decision"], dec["prediction"]) if "decision" in cf else decide(dec, cf["prediction"])
    margin, problem = assess(dec, {**cf, "form": form}, passed=cf_passed)
    assert (cf.get("problem", ""), cf.get("margin")) == (problem, None if margin is None else
                                                          (margin if math.isfinite(margin) else str(margin)))
    expected = r["kind"] in ("claim", "derived") and not problem and not (passed and cf_passed)
    assert bool(r.get("evidence")) is expected


def test_a_hand_edited_counterfactual_fails_the_reassessment():
    v = check_fit("f", FIT, -0.5, kind="claim", counterfactual=(-0.25, "N^-1/4"))
    rec = json.loads(json.dumps(v.record()))
    rec["counterfactual"]["prediction"] = 3.0  # moved far away, margin and evidence left as they were
    margin, problem = assess(rec["decision"], rec["counterfactual"])
    assert problem and rec["counterfactual"]["problem"] == "" and margin != rec["counterfactual"]["margin"]


def test_a_far_counterfactual_the_measurement_lands_on_has_happened():
    # the interval excludes the prediction -1 and holds -1/2, 7.5 half-widths away: the data favour
    # the wrong theory, which therefore could happen; the FAIL counts as evidence
    fit = LogLogFit(slope=-0.534, intercept=0.0, slope_lo=-0.600, slope_hi=-0.467, level=0.95, n=28)
    v = check_fit("rate of the mean gap", fit, -1.0, kind="derived", counterfactual=(-0.5, "a single draw's N^-1/2"))
    assert not v.passed and v.counterfactual.passed and v.counterfactual.problem == "" and v.evidence
