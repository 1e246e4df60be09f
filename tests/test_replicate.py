"""Replication records and counterfactuals (the evidence issue): what the book may call evidence.

* Every committed verdict that stores its decision is decided again from the stored numbers by
  the one decision rule (mfattn.companion.book.decide): its committed status must come out, and a claim or
  derived result counted as evidence must have a counterfactual that the same numbers reject.
* A replication record is keyed by the chapter's code and its committed verdicts: a record whose
  key no longer matches is stale and fails here, so the book never shows an older chapter's rates.
"""

import json
import math
from pathlib import Path

import pytest

from mfattn.companion import replicate as rp
from mfattn.companion.book import EVIDENCE, check_at_most, check_close, check_fit, check_fit_at_most, check_within, decide
from mfattn.companion.evidence import collect, flag
from mfattn.analysis.fitting import LogLogFit

ROOT = Path(__file__).resolve().parents[1]
RECORDS = collect(ROOT)



@pytest.mark.parametrize("r", [r for r in RECORDS if "decision" in r],
                         ids=lambda r: f"{r['chapter'][:2]}-{r['claim'][:40]}")
def test_a_counted_verdicts_counterfactual_fails_on_the_committed_numbers(r):
    cf = r["counterfactual"]
    # the stored numbers reproduce the committed decision
    assert decide(r["decision"], r["decision"]["prediction"]) == (r["status"] == "PASS")
    if cf is not None:
        # a wrong prediction on the measured numbers, or the prediction on the perturbed measurement
        cf_passed = decide(cf.get("decision", r["decision"]), cf["prediction"])
        assert cf["status"] == ("PASS" if cf_passed else "FAIL")
    if r.get("evidence"):
        assert r["kind"] in EVIDENCE and cf is not None
        # evidence: the measurement does not accept both the theory and its counterfactual
        assert not (r["status"] == "PASS" and cf_passed), r["claim"]
    else:
        # not evidence: no counterfactual, one that passes beside a PASS, or one that could not happen
        assert (r["kind"] not in EVIDENCE or cf is None or (r["status"] == "PASS" and cf["status"] == "PASS")
                or cf.get("problem"))


@pytest.mark.parametrize("make", [
    lambda cf: check_close("c", 1.0, 1.0, 0.1, kind="claim", counterfactual=cf),
    lambda cf: check_at_most("a", 1.0, 1.2, 0.1, kind="claim", counterfactual=cf),
    lambda cf: check_within("w", 1.0, 0.5, 1.5, interval=(0.8, 1.2), kind="claim", counterfactual=cf),
    lambda cf: check_fit("f", LogLogFit(-0.5, 0.0, -0.6, -0.4, 0.95, 8), -0.5, kind="claim", counterfactual=cf),
    lambda cf: check_fit_at_most("m", LogLogFit(-0.5, 0.0, -0.6, -0.4, 0.95, 8), -0.5, kind="claim",
                                 counterfactual=cf)], ids=["close", "at_most", "within", "fit", "fit_at_most"])
def test_the_stored_decision_reproduces_every_rule(make):
    # the same verdict with a counterfactual its numbers reject, and one they accept
    # each wrong prediction within MAX_MARGIN resolutions of the prediction (an at_most with a tolerance)
    wrong = {"close": 1.3, "at_most": 0.85, "within": (1.1, 2.0), "fit": -0.25, "fit_at_most": -0.7}
    right = {"close": 1.05, "at_most": 1.5, "within": (0.0, 2.0), "fit": -0.45, "fit_at_most": -0.3}
    name = make(None).claim
    rule = {"c": "close", "a": "at_most", "w": "within", "f": "fit", "m": "fit_at_most"}[name]
    v = make((wrong[rule], "wrong"))
    assert v.passed and v.counterfactual.status == "FAIL" and v.evidence and v.counted_as == "evidence"
    rec = json.loads(json.dumps(v.record()))  # as the notebook stores it
    assert decide(rec["decision"], rec["decision"]["prediction"]) is True
    assert decide(rec["decision"], rec["counterfactual"]["prediction"]) is False
    u = make((right[rule], "indistinguishable"))
    assert u.passed and u.counterfactual.passed and not u.evidence and u.counted_as == "check"
    assert not make(None).evidence


def test_a_perturbed_measurement_is_decided_by_the_verdicts_own_prediction():
    from mfattn.companion.book import perturbed

    fit = LogLogFit(-0.5, 0.0, -0.6, -0.4, 0.95, 8)
    v = check_fit("f", fit, -0.5, kind="claim",
                  counterfactual=perturbed(LogLogFit(0.0, 0.0, -0.1, 0.1, 0.95, 8), "no noise",
                                           source="the same fit on noise-free data"))
    rec = json.loads(json.dumps(v.record()))
    cf = rec["counterfactual"]
    assert v.evidence and cf["status"] == "FAIL" and cf["prediction"] == -0.5
    assert decide(cf["decision"], cf["prediction"]) is False and cf["decision"]["lo"] == -0.1
    same = check_fit("f", fit, -0.5, kind="claim", counterfactual=perturbed(fit, "nothing changed", source="x"))
    assert same.counterfactual.passed and not same.evidence


def test_a_failed_claim_stays_evidence_when_its_counterfactual_passes():
    # the data favour the wrong theory: a FAIL that counts
    v = check_fit("f", LogLogFit(-0.25, 0.0, -0.4, -0.1, 0.95, 8), -0.5, kind="claim", counterfactual=(-0.25, "x"))
    assert not v.passed and v.counterfactual.passed and v.evidence


@pytest.mark.parametrize("path", sorted((ROOT / rp.FOLDER).glob("*.json")), ids=lambda p: p.stem)
def test_a_replication_record_is_of_the_committed_chapter(path):
    record = json.loads(path.read_text())
    src = ROOT / "notebooks" / f"{path.stem}.md"
    assert record["key"] == rp.key(src), (
        f"{path.stem} changed since its replication: python -m mfattn replicate {path.stem[:2]}")
    committed = rp.verdict_records(src.with_suffix(".ipynb"))
    assert [e["claim"] for e in record["verdicts"]] == [r["claim"] for r in committed]
    for e in record["verdicts"]:
        assert 0 <= e["evidence"] <= e["passed"] <= e["n"] <= len(record["seeds"])
        if record.get("format", 1) >= 2:
            # every count decided again from the stored decisions: a hand-edited rate fails here
            failed = e["n"] - len(e["decisions"])
            assert rp.rederive(e) == (e["passed"], e["evidence"]), e["claim"]
            assert failed == len(record["failed_seeds"]) and len(e["values"]) == len(e["decisions"])


def test_the_key_changes_with_the_source_and_with_a_committed_verdict(tmp_path):
    nb = json.loads((ROOT / "notebooks" / "07-two-layer-baseline.ipynb").read_text())
    md = (ROOT / "notebooks" / "07-two-layer-baseline.md").read_text()
    (tmp_path / "c.md").write_text(md)
    (tmp_path / "c.ipynb").write_text(json.dumps(nb))
    k0 = rp.key(tmp_path / "c.md")
    (tmp_path / "c.md").write_text(md + "\nA corrected sentence of prose.\n")
    assert rp.key(tmp_path / "c.md") == k0  # prose decides no number
    (tmp_path / "c.md").write_text(md.replace("n_scores = len(Ns)", "n_scores = len(Ns) + 0"))
    assert rp.key(tmp_path / "c.md")["source"] != k0["source"]
    (tmp_path / "c.md").write_text(md)
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            recs = o.get("metadata", {}).get("mfattn", {}).get("verdicts")
            if recs:
                recs[0]["measured"] = "9.99e+99"
    (tmp_path / "c.ipynb").write_text(json.dumps(nb))
    k1 = rp.key(tmp_path / "c.md")
    assert k1["source"] == k0["source"] and k1["verdicts"] != k0["verdicts"]


@pytest.mark.parametrize("old, new, same", [
    ("1.15e-16", "9.07e-17", True),   # float64 rounding: nbval reads both as <1e-8
    ("2.01e-01", "2.04e-01", True),  # a third digit: nbval compares two
    ("2.00e-01", "2.10e-01", False),  # a change nbval sees
    ("1.00e-02", "1.00e-03", False),
])
def test_the_key_sees_a_printed_value_as_nbval_compares_it(tmp_path, old, new, same):
    """A rerun whose outputs nbval accepts as the committed ones keeps the replication's key; a
    change nbval would report does not."""
    import shutil

    (tmp_path / "notebooks").mkdir()
    shutil.copy(ROOT / "nbval-sanitize.cfg", tmp_path / "nbval-sanitize.cfg")
    md = tmp_path / "notebooks" / "01-x.md"
    md.write_text((ROOT / "notebooks" / "07-two-layer-baseline.md").read_text())

    def key_with(measured):
        rec = dict(kind="check", ref=["(15)"], claim="a residual", measured=measured, predicted="0",
                   tolerance="+-1e-10", status="PASS")
        nb = {"cells": [{"cell_type": "code", "outputs": [{"output_type": "display_data", "data": {},
                                                          "metadata": {"mfattn": {"verdicts": [rec]}}}]}]}
        md.with_suffix(".ipynb").write_text(json.dumps(nb))
        return rp.key(md)

    assert (key_with(old) == key_with(new)) is same


def _rec(claim, value, status, evidence=True):
    return dict(claim=claim, kind="claim", ref=["Thm 4.1"], measured=f"{value:.2e}", value=value,
                predicted="-0.500", tolerance="", status=status, evidence=evidence)


def test_aggregate_counts_spreads_and_detects_draw_free_verdicts(tmp_path):
    committed = [_rec("slope at N = 128", -0.5, "PASS"), _rec("identity", 1.0, "PASS")]
    nb = {"cells": [{"cell_type": "code", "outputs": [{"metadata": {"mfattn": {"verdicts": committed}}}]}]}
    (tmp_path / "c.ipynb").write_text(json.dumps(nb))
    (tmp_path / "c.md").write_text("x")
    vals = [-0.5 + 0.01 * k for k in range(10)]
    runs = {s: [_rec("slope at N = 256", vals[s - 1], "PASS" if s <= 8 else "FAIL", s <= 7),
                _rec("identity", 1.0, "PASS")] for s in range(1, 11)}
    runs[10][1] = _rec("another claim", 1.0, "PASS")  # not the same verdict: not counted
    rec = rp.aggregate(tmp_path / "c.md", runs, 12.0)
    slope, ident = rec["verdicts"]
    assert (slope["n"], slope["passed"], slope["evidence"]) == (10, 8, 7)
    assert slope["values"] == vals and slope["q50"] == vals[5] and slope["q05"] == vals[0] and slope["q95"] == vals[9]
    assert not slope["by_construction"] and not rp.replicated(slope)
    assert "fragile" in rp.status(slope) and slope["committed"] == "PASS"
    # the same value in every replicate: a check of that kind replicates by construction; a claim still
    # needs its counterfactual rejected in at least 9 of at least 10 replicates (here only 9 matched)
    assert ident["n"] == 9 and ident["by_construction"] and not rp.replicated(ident)
    assert rp.status(ident) == "fragile: the same value, 1, in every replicate; PASS in 9 of 9, counterfactual rejected in 9"
    assert rp.replicated(dict(ident, kind="check")) and rp.status(dict(ident, kind="check")) == \
        "the same value, 1, in every replicate"
    assert rp.replicated(dict(ident, n=10, passed=10, evidence=10))
    assert not rp.replicated(dict(ident, n=10, passed=10, evidence=0))  # saturated, but its counterfactual holds


def test_flag_names_what_a_record_is_worth():
    rep = dict(n=10, passed=10, evidence=10, by_construction=False, kind="claim", q05=-0.6, q50=-0.5, q95=-0.4,
               committed="PASS", values=[-0.6, -0.5, -0.4], decisions=[])
    assert flag(dict(kind="claim", status="PASS", evidence=True, replication=rep)).startswith("replicated evidence")
    assert flag(dict(kind="claim", status="PASS", evidence=True, replication=dict(rep, evidence=8))).startswith(
        "fragile")
    assert flag(dict(kind="check", status="PASS")) == "check, not replicated yet"
    assert flag(dict(kind="check", status="PASS", replication=dict(rep, kind="check", passed=7))).startswith(
        "check; varies: PASS in 7 of 10")
    assert "not rejected either" in flag(dict(kind="claim", status="PASS", counterfactual={"status": "PASS"}))
    assert "could not have happened" in flag(dict(kind="claim", status="PASS", counterfactual={
        "status": "FAIL", "problem": "a range that does not meet the prediction's"}))
    assert math.isfinite(rep["q50"])


TOY = '''---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
mfattn-parameters:
  n: {ci: 400, help: draws of the mean}
---

# A small chapter for the replication's test

```{code-cell} ipython3
:tags: [parameters]

profile = "ci"          # "ci" only
seed = 0                # seeds every random draw
cache_dir = None        # folder keeping finished work
```

```{code-cell} ipython3
import torch
from mfattn.companion.book import check_close, report, setup

cfg = setup("01", globals())
with open("runs.log", "a") as f:
    f.write(f"{seed}\\n")
x = torch.randn(cfg.n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
report([check_close("mean of the draw is 0", float(x.mean()), 0.0, 4 / cfg.n ** 0.5, "4 standard errors",
                    kind="claim", ref="(15)", counterfactual=(0.6, "a mean of 0.6")),
        check_close("a sum without a draw", float(sum(range(10))), 45.0, 0.0, kind="check")])
```
'''


def test_replicate_runs_other_seeds_resumes_and_records_rates(tmp_path):
    import os
    import subprocess
    import sys

    root = tmp_path / "checkout"
    (root / "notebooks").mkdir(parents=True)
    (root / "_toc.yml").write_text("format: jb-book\nroot: notebooks/01-toy\n")
    (root / "notebooks" / "01-toy.md").write_text(TOY)
    env = dict(os.environ, TQDM_DISABLE="1")
    run = lambda *a: subprocess.run([sys.executable, "-m", "mfattn", *a], cwd=root, capture_output=True,  # noqa: E731
                                    text=True, timeout=600, env=env)
    assert run("run", "01", "--inplace", "--quiet").returncode == 0
    r = run("replicate", "01", "--seeds", "3", "--jobs", "2")
    assert r.returncode == 0, r.stderr
    rec = json.loads((root / rp.FOLDER / "01-toy.json").read_text())
    assert rec["seeds"] == [1, 2, 3] and rec["key"] == rp.key(root / "notebooks" / "01-toy.md")
    mean, plain = rec["verdicts"]
    assert mean["n"] == 3 and len(set(mean["values"])) == 3 and not mean["by_construction"]
    assert mean["passed"] == mean["evidence"] == 3  # 4 standard errors: every seed passes, and rejects 0.6
    assert rec["format"] == rp.FORMAT and rp.rederive(mean) == (3, 3) and len(mean["decisions"]) == 3
    assert plain["by_construction"] and plain["values"] == [45.0] * 3
    log = lambda: sorted(int(x) for x in (root / "notebooks" / "runs.log").read_text().split())  # noqa: E731
    assert log() == [0, 1, 2, 3]
    # a second call resumes: no seed runs again
    assert run("replicate", "01", "--seeds", "3").returncode == 0
    assert log() == [0, 1, 2, 3]
    # after a change of the chapter's code every seed runs again: a record never mixes in runs of old code
    md = root / "notebooks" / "01-toy.md"
    md.write_text(md.read_text().replace('cfg = setup("01", globals())', 'cfg = setup("01", globals())  # changed'))
    assert run("run", "01", "--inplace", "--quiet").returncode == 0
    assert run("replicate", "01", "--seeds", "3").returncode == 0
    assert log() == [0, 0, 1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize("code", [-15, 143, 137, 130])
def test_a_killed_replicate_is_not_recorded_as_a_failed_seed(tmp_path, monkeypatch, code):
    """A replicate whose child was interrupted or killed (a signal, Ctrl-C) stops the command and
    leaves no record, so that a rerun runs that seed again instead of counting it as a seed under
    which the chapter failed."""
    import subprocess

    src = tmp_path / "notebooks" / "01-toy.md"
    src.parent.mkdir()
    src.write_text(TOY)
    monkeypatch.setattr(rp.subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, code, "", "Terminated"))
    with pytest.raises(SystemExit, match="seed 4 was interrupted"):
        rp._run_one(tmp_path, src, 4, True)
    assert not (tmp_path / "runs" / "01-toy" / "replicate" / "seed-4" / "done.json").exists()
    # a chapter that fails by itself is recorded as such
    monkeypatch.setattr(rp.subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "mfattn: 01-toy failed in cell"))
    seed, error, _ = rp._run_one(tmp_path, src, 4, True)
    assert seed == 4 and "failed in cell" in error
    assert "error" in json.loads((tmp_path / "runs" / "01-toy" / "replicate" / "seed-4" / "done.json").read_text())


@pytest.mark.parametrize("args", [("--seeds", "0"), ("--seeds", "-1"), ("--jobs", "0")])
def test_a_bad_count_is_a_usage_error(args):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "mfattn", "replicate", "07", *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and args[0] in r.stderr, r.stderr


def test_a_smaller_replication_never_replaces_the_committed_record(tmp_path, monkeypatch):
    """Nothing a command writes may silently lower what the book shows: a record of the same key with
    fewer seeds goes to runs/, not over replications/CHAPTER.json (unless forced)."""
    src = tmp_path / "notebooks" / "01-x.md"
    src.parent.mkdir()
    nb = {"cells": [{"cell_type": "code", "outputs": [{"metadata": {"mfattn": {"verdicts": [_rec("s", -0.5, "PASS")]}}}]}]}
    src.with_suffix(".ipynb").write_text(json.dumps(nb))
    src.write_text((ROOT / "notebooks" / "07-two-layer-baseline.md").read_text())
    monkeypatch.setattr(rp, "seeds", lambda committed, k: list(range(1, k + 1)))
    monkeypatch.setattr(rp, "_run_one", lambda root, s, seed, quiet: (seed, [_rec("s", -0.5, "PASS")], 1.0))
    committed = rp.replicate(tmp_path, src, 3, quiet=True)
    assert committed == tmp_path / rp.FOLDER / "01-x.json" and len(json.loads(committed.read_text())["seeds"]) == 3
    smaller = rp.replicate(tmp_path, src, 2, quiet=True)
    assert smaller != committed and len(json.loads(committed.read_text())["seeds"]) == 3
    assert len(json.loads(smaller.read_text())["seeds"]) == 2
    assert rp.replicate(tmp_path, src, 2, quiet=True, force=True) == committed
    assert len(json.loads(committed.read_text())["seeds"]) == 2
