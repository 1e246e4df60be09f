"""The book's own Sphinx extension (book/_ext/mfattn_book.py): what it rewrites on a chapter's page,
checked on small inputs written here by hand."""

import importlib.util
import re
from pathlib import Path

import pytest

pytest.importorskip("pybtex")

_PATH = Path(__file__).resolve().parents[1] / "book" / "_ext" / "mfattn_book.py"
_spec = importlib.util.spec_from_file_location("mfattn_book", _PATH)
ext = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ext)


@pytest.mark.parametrize("text, expected", [
    ("the dissipation reaches 3.6e-03.", "the dissipation reaches 0.0036."),  # a full stop ends the sentence
    ("keeps falling, to 3.4e-05. Then", "keeps falling, to 3.4\u202f\u00d7\u202f10\u207b\u2075. Then"),
    ("at 1e-08, and", "at 10\u207b\u2078, and"),
    ("a gap of -2.5e-04;", "a gap of \u22122.5\u202f\u00d7\u202f10\u207b\u2074;"),
    ("a version v1.2e5 and a name x1e3", "a version v1.2e5 and a name x1e3"),  # inside a word: left alone
    ("the digits 2.5e-01.5", "the digits 2.5e-01.5"),  # a decimal point after it: not a number of ours
])
def test_e_notation_in_the_prose_is_written_for_a_reader(text, expected):
    assert ext._ENOTATION.sub(ext.prose_number, text) == expected


def test_cells_that_mostly_build_verdicts_or_glue_values_are_found():
    share = ext.bookkeeping_share
    assert share("verdicts.append(check_close('a', 1, 1, 0))\nglue('x', 1.0)") == 1.0
    assert share("verdicts += [\n    check_fit(a),\n    check_fit(b),\n]\nx = 1") == 0.8
    assert share("if ok:\n    glue('ch02-x', 1.0, display=False)\nelse:\n    glue('ch02-x', 2.0)") == 1.0
    # a measurement that ends with its verdict: one line in four
    assert share("fit = slope_fit(N, e)\nprint(fit)\n# a comment\n\nz = 2\nverdicts.append(v)") == 0.25
    assert share("x = [v for v in verdicts]\nothers.append(1)\nverdicts = []") == 0.0
    assert share("%timeit f()") == 0.0  # IPython syntax: not judged
    # inside a loop: the verdict's lines count, the measurement's do not
    assert share("for k in ks:\n    z = f(k)\n    verdicts.append(check(\n        z))") == 0.5


def test_each_verdict_row_says_how_it_replicated():
    from mfattn.companion.render import verdict_table_html
    from mfattn.companion.verdicts import check_close

    html = verdict_table_html([check_close("a", 1.0, 1.0, 0.1, kind="check"),
                               check_close("b", 1.0, 1.0, 0.1, kind="hypothesis")])
    rep = dict(n=10, passed=6, evidence=0, by_construction=False, kind="hypothesis", committed="PASS", decisions=[])
    records = [dict(chapter="07-x", claim="b", kind="hypothesis", status="PASS", replication=rep),
               dict(chapter="06-x", claim="a", kind="check", status="PASS", replication=dict(rep, kind="check"))]
    out = ext._row_replication("07-x", html, records)
    rows = out.split("<tr")[2:]  # the header row first
    assert "mfattn-rep" not in rows[0]  # "a" is another chapter's verdict
    claim_cell = rows[1].split("</td>")[1]
    note = '<br><small class="mfattn-rep"><strong>varies</strong>: PASS in 6 of 10 replicates</small>'
    assert claim_cell.endswith(note)
    assert out.replace(note, "") == html


def test_each_code_line_carries_its_indent_and_keeps_its_newline():
    html = ('<div class="cell_input docutils container">\n<div class="highlight-ipython3 notranslate">'
            '<div class="highlight"><pre><span></span><span class="k">for</span> i in x:\n'
            '    <span class="n">y</span> = &quot;a&quot;\n\n'
            '        <span class="c1"># deeper</span>\n</pre></div>')
    out = ext.code_lines(html)
    body = out.split("<pre>")[1].split("</pre>")[0]
    assert re.findall(r"--indent:(\d+)ch", body) == ["0", "4", "0", "8"]
    # the text, tags removed, is the code as it was: every newline kept, nothing added
    strip = lambda h: re.sub(r"<[^>]+>", "", h)
    assert strip(body) == strip(html.split("<pre>")[1].split("</pre>")[0])
    # pages other than a chapter's code inputs are left alone
    other = '<div class="cell_output"><pre>x\n  y\n</pre></div>'
    assert ext.code_lines(other) == other


def test_a_figure_gets_the_phone_width_that_shows_its_text_8_px_high(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mfattn.companion.plotting import TEXT_KEY

    # three PNGs drawn here: 300 px wide with text 5.00 px high recorded; the same without a record;
    # one recording "none" (a figure without text)
    fig = plt.figure(figsize=(3, 1), dpi=100)
    for name, meta in (("a.png", {TEXT_KEY: "5.00"}), ("bare.png", {}), ("none.png", {TEXT_KEY: "none"})):
        fig.savefig(tmp_path / name, dpi=100, metadata=meta)
    plt.close(fig)
    html = ('<p><img alt="x" src="../_images/{}" style="width: 150px; height: 50px;" /></p>\n' * 4).format(
        "a.png", "bare.png", "none.png", "missing.png")
    out = ext.phone_widths(html, tmp_path).splitlines()
    # 8 px of text needs the figure shown at 8 / 5 of its 300 PNG pixels: 480 CSS px
    assert out[0] == ('<p><img alt="x" src="../_images/a.png" style="width: 150px; height: 50px; '
                      '--mfattn-phone-width: 480px;" /></p>')
    assert out[1:] == html.splitlines()[1:]  # no record, no text, no file: left as they were
    # a page that an incremental build did not write again is rewritten once only
    assert ext.phone_widths("\n".join(out), tmp_path) == "\n".join(out)


def test_an_animation_gets_the_phone_width_of_its_frames(tmp_path):
    import base64
    import io
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    from mfattn.companion import plotting

    fig, ax = plt.subplots(figsize=(3, 1.5))
    ax.set_title("a dot", fontsize=6)
    (dot,) = ax.plot([0.1], [0.5], "o")
    html = plotting.animation(fig, lambda i: dot.set_data([0.1 + 0.4 * i], [0.5]), 2, alt="a dot").data
    plt.close(fig)
    record = float(re.search(r'data-mfattn-text-px="([0-9.]+)"', html)[1])
    frame = re.search(r'frames\[0\] = "data:image/png;base64,([^"]+)"', html)[1].replace("\\\n", "")
    width = Image.open(io.BytesIO(base64.b64decode(frame))).width  # the whole frame, read by PIL
    out = ext.phone_widths(html, tmp_path)
    assert f'style="--mfattn-phone-width: {math.ceil(8 * width / record)}px;"' in out
    assert out.replace(f' style="--mfattn-phone-width: {math.ceil(8 * width / record)}px;"', "", 1) == html
    assert ext.phone_widths(out, tmp_path) == out
