"""The evidence map: every verdict of the committed chapters has a kind and cites known results; the
generated page lists every result of the paper; its counts are the chapters' own counts."""

import json
import re
from pathlib import Path

import pytest

from mfattn.companion.book import KINDS
from mfattn.companion.evidence import BEYOND, COMPANION, RESULTS, collect, counts, markdown, table

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb") if not p.name.startswith("."))


@pytest.fixture(scope="module")
def records():
    return collect(ROOT)


def test_every_chapter_stores_its_verdict_records(records):
    assert {r["chapter"] for r in records} == set(CHAPTERS)
    for r in records:
        assert r["kind"] in KINDS and r["status"] in ("PASS", "FAIL")
        assert set(r) >= {"kind", "ref", "claim", "measured", "predicted", "tolerance", "status", "chapter"}


def test_counts_are_the_chapters_printed_counts(records):
    """Each chapter prints its own count from the same verdicts; the map's counts must agree."""
    c = counts(records)
    for ch in CHAPTERS:
        nb = json.loads((ROOT / "notebooks" / f"{ch}.ipynb").read_text())
        text = "".join("".join(o.get("data", {}).get("text/plain", "")) for cell in nb["cells"]
                       for o in cell.get("outputs", []) if "mfattn" in o.get("metadata", {}))
        m = re.search(r"Evidence \(claims and derived results with a counterfactual that could\s+have happened and "
                      r"is\s+rejected\): (\d+) PASS, (\d+) FAIL\.\s+Hypotheses \(PASS: it holds\): (\d+) PASS, "
                      r"(\d+) FAIL\.\s+Checks \(by construction,\s+or no counterfactual that could have happened and "
                      r"is\s+rejected\):\s+(\d+) PASS, (\d+) FAIL\.(?:\s+External \(agreement with other "
                      r"authors' code\): (\d+) PASS, (\d+) FAIL)?", text)
        assert m, ch
        ev_p, ev_f, hy_p, hy_f, ck_p, ck_f, ex_p, ex_f = (int(x or 0) for x in m.groups())
        k = c[ch]
        assert (k[("evidence", "PASS")], k[("evidence", "FAIL")]) == (ev_p, ev_f)
        assert (k[("hypothesis", "PASS")], k[("hypothesis", "FAIL")]) == (hy_p, hy_f)
        assert (k[("check", "PASS")], k[("check", "FAIL")]) == (ck_p, ck_f)
        assert (k[("external", "PASS")], k[("external", "FAIL")]) == (ex_p, ex_f)


def test_the_page_lists_every_result_with_verdicts_or_a_reason(records):
    page = markdown(records)
    for name, *_ in RESULTS + COMPANION + BEYOND:
        # each result's row, with the anchor its verdicts link back to
        from mfattn.companion.book import result_anchor

        from mfattn.companion.evidence import result_label

        shown = result_label(name).replace("*", "\\*")
        assert f'\n| <span id="{result_anchor(name)}"></span>{shown} |' in page, name
        assert "2026perceptrons" not in shown  # a citation key reads as author and year
    for row in table(records):
        assert row["verdicts"] or row["reason"], row["result"]
    # the results this book tests
    tested = {row["result"] for row in table(records) if row["verdicts"]}
    assert {"Lemma 2.1", "Thm 4.1", "Thm 4.3", "Thm 5.2", "Thm 7.8", "(15)", "(36)"} <= tested


def test_the_map_is_compact_and_its_math_is_not_escaped(records):
    """One short line per result, the verdicts behind it in collapsed details; a star inside math
    stays a star (an escaped one is a MathJax error)."""
    from mfattn.companion.evidence import STANDINGS, standing

    page = markdown(records)
    rows = [ln for ln in page.splitlines() if ln.startswith('| <span id="r-')]
    assert len(rows) == len(RESULTS) + len(COMPANION) + len(BEYOND)
    for ln in rows:
        summary = ln.rsplit(" | ", 1)[-1].split("<details>")[0]
        assert len(summary) < 400, summary  # the verdict texts are behind the details
    import re

    maths = re.findall(r"\$[^$]+\$", page)
    assert maths and not [m for m in maths if "\\*" in m]
    assert "$N^{*}=x^{*}/\\varepsilon$" in page
    for r in records:
        assert standing(r) in STANDINGS
    assert any(standing(r) == "replicated evidence" for r in records)


def test_collect_rejects_unknown_kinds_and_references(tmp_path):
    (tmp_path / "notebooks").mkdir()
    rec = dict(kind="claim", ref=["Thm 99.9"], claim="x", measured="1", predicted="1", tolerance="0", status="PASS")
    nb = {"cells": [{"cell_type": "code", "outputs": [{"output_type": "display_data", "data": {"text/plain": "v"},
                                                       "metadata": {"mfattn": {"verdicts": [rec]}}}]}]}
    (tmp_path / "notebooks" / "99-x.ipynb").write_text(json.dumps(nb))
    with pytest.raises(ValueError, match="Thm 99.9"):
        collect(tmp_path)
    rec.update(ref=["Thm 4.1"], kind="proof")
    (tmp_path / "notebooks" / "99-x.ipynb").write_text(json.dumps(nb))
    with pytest.raises(ValueError, match="proof"):
        collect(tmp_path)


def test_the_book_has_the_page():
    assert "book/evidence" in (ROOT / "_toc.yml").read_text()
    page = (ROOT / "book" / "evidence.md").read_text()
    assert "records = collect()" in page and "markdown(records)" in page and "headline(records)" in page


def test_every_untested_result_says_why_with_a_derivation(records):
    """A result without a verdict carries the reason it cannot be tested here, not a placeholder."""
    for row in table(records):
        if not row["verdicts"]:
            assert not row["reason"].startswith(("no experiment yet", "no verdict names it yet")), row["result"]
            assert "chapter" in row["reason"], row["result"]  # where the derivation is


def test_notes_are_shown_beside_verdicts():
    rec = [dict(kind="hypothesis", ref=["Prop. 6.9"], claim="radius bounded", measured="-0.5", predicted="<0",
                tolerance="CI", status="PASS", chapter="04-long-time")]
    line = next(x for x in markdown(rec).splitlines() if "</span>Prop. 6.9 |" in x)
    assert "radius bounded" in line and "*note*: the conclusion is Prokhorov" in line


def test_the_map_and_the_verdicts_link_both_ways(records):
    """Each verdict on the map links to its row in the chapter, and each verdict row in a chapter
    links to the map's row of every result it bears on: the anchors on both sides exist."""
    from mfattn.companion.book import result_anchor, verdict_anchor

    page = markdown(records)
    anchors = set(re.findall(r'<span id="(r-[^"]+)"></span>', page))
    for ch in CHAPTERS:
        nb = json.loads((ROOT / "notebooks" / f"{ch}.ipynb").read_text())
        html = "".join("".join(o.get("data", {}).get("text/html", "")) for cell in nb["cells"]
                       for o in cell.get("outputs", []) if "mfattn" in o.get("metadata", {}))
        for r in (x for x in records if x["chapter"] == ch):
            if r["ref"]:  # a verdict that bears on no result of the paper is not on the map
                assert f'href="../notebooks/{ch}.html#{verdict_anchor(r["claim"])}"' in page
            assert f'id="{verdict_anchor(r["claim"])}"' in html, (ch, r["claim"])
            for ref in r["ref"]:
                assert result_anchor(ref) in anchors, ref
                assert f'href="../book/evidence.html#{result_anchor(ref)}"' in html


def test_a_verdict_citing_an_unknown_result_is_refused_where_the_chapter_reports():
    from mfattn.companion.render import report
    from mfattn.companion.verdicts import check_close

    with pytest.raises(ValueError, match=r"cites 'Thm 99\.9'.*mfattn/companion/results\.py"):
        report([check_close("x", 1.0, 1.0, 0.1, kind="claim", ref="Thm 99.9")])


def test_the_strip_places_this_run_among_its_replicates():
    """An atypical committed run lies outside the replicates' ticks, a typical one among them; the
    prediction has its own tick (x positions read back from the SVG)."""
    import re

    from mfattn.companion.evidence import strip_svg

    def xs(svg, colour):
        return [float(x) for x in re.findall(rf'<line x1="([\d.]+)"[^>]*stroke="{colour}"', svg)]

    out = strip_svg([0.0, 1.0, 2.0, "nan"], 5.0, 1.0)
    grey, black, blue = xs(out, "#8c959f"), xs(out, "#000"), xs(out, "#1f6feb")
    assert len(grey) == 3 and black[0] > max(grey) and min(grey) < blue[0] < max(grey)
    inside = strip_svg([0.0, 1.0, 2.0], 1.5)
    assert min(xs(inside, "#8c959f")) < xs(inside, "#000")[0] < max(xs(inside, "#8c959f"))
    assert strip_svg([], 1.0) == "" and strip_svg(["nan"], None) == ""


def test_a_fail_that_replicates_is_never_called_replicated_evidence():
    """(9.1) at the end of chapter 09's run fails in this run and in every replicate: the map and the
    tables call it an evidence FAIL, not replicated evidence."""
    from mfattn.companion.evidence import flag, standing

    rep = dict(n=10, passed=0, evidence=0, by_construction=False, kind="derived", committed="FAIL",
               q05=-0.6, q50=-0.55, q95=-0.5, values=[-0.55] * 10, decisions=[])
    rec = dict(kind="derived", status="FAIL", evidence=True, replication=rep, counterfactual={"form": "wrong"})
    assert standing(rec) == "evidence FAIL"
    assert flag(rec).startswith("evidence FAIL; FAIL in 10 of 10") and "replicated evidence" not in flag(rec)
