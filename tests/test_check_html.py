"""The book checker (mfattn.companion.checkhtml) catches each fault it is meant to catch, on a small page made
to have exactly that fault, and passes a page that has none. Runs in headless Chromium; skipped
where Chromium or Playwright is missing (`.ci/run` installs Chromium)."""

import base64
import re
import shutil
import struct
import zlib
from pathlib import Path

import pytest

from mfattn.companion import checkhtml

playwright = pytest.importorskip("playwright")
if not any(Path(c).is_file() for c in checkhtml.CHROMIUM_CANDIDATES) and not shutil.which("chromium"):
    pytest.skip("no Chromium (apt-get install -y chromium)", allow_module_level=True)

# a 2 x 2 PNG
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEElEQVR4nGP4z8AARAwQCgAf7gP9i18U1AAAAABJRU5ErkJggg=="
)



def with_text_record(png: bytes, value: str) -> bytes:
    """``png`` with a tEXt chunk (PNG specification, section 11.3.4.3: keyword, a zero byte, the text;
    the CRC over the type and the data) that records its smallest text, placed after the header chunk."""
    data = checkhtml.TEXT_KEY.encode("latin-1") + b"\0" + value.encode("latin-1")
    chunk = struct.pack(">I", len(data)) + b"tEXt" + data + struct.pack(">I", zlib.crc32(b"tEXt" + data))
    end_of_header = 8 + 8 + 13 + 4  # the signature, then IHDR: length and type, 13 bytes, its CRC
    return png[:end_of_header] + chunk + png[end_of_header:]


# the figures of the pages: a.png records text 20 px high in its own pixels (shown at its own 2 px
# width: 20 px); small.png records 10 px and is shown at half its width (5 px); bare.png records nothing
FIGURES = {"a.png": with_text_record(PNG, "20.00"), "small.png": with_text_record(PNG, "10.00"), "bare.png": PNG,
           # text 0.04 px high in its own 2 px: 10 px at 500 px wide, under 8 px scaled to a 390 px phone's
           # column (under 400 px), 8.4 px at the phone width the book gives it (420 px, book/_ext/mfattn_book.py)
           "phone.png": with_text_record(PNG, "0.04")}
PHONE_FIGURE = ('<div class="cell_output"><figure><img src="phone.png" alt="a wide square" style="width:500px{}">'
                "<figcaption>c</figcaption></figure></div>")

# the book's own stylesheet, as every page of the built book has it (its phone rules shrink a player)
PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>t</title>
<link rel="icon" href="data:,"><link rel="stylesheet" href="mfattn.css"></head>
<body><article class="bd-article" style="max-width:600px;margin:0 auto">{body}</article></body></html>"""

CLEAN = """<h1>A page</h1><p>Plain text, no math.</p>
<div class="cell_output"><figure><img src="a.png" alt="a red square on white">
<figcaption>Figure 1: what to see.</figcaption></figure>
<pre>a short printed line</pre></div>
<div class="cell_output"><pre style="width:200px;white-space:pre-wrap;overflow-wrap:anywhere">slope -0.52 [-0.61, -0.43] at 16 steps, then -0.38 [-0.47, -0.29] at 64 steps</pre></div>
<table style="width:100%"><tr><td>a</td><td>b</td></tr></table>
<table style="width:300px;table-layout:fixed"><tr><td style="width:60px">a long-winded word</td><td>b</td></tr></table>
<p>a price of $5 and $6 is not math, nor is <code>$x$</code></p>
<figure><img src="a.png" alt="a red square"><figcaption>beta = 4.0, the run's value (<code>mfattn</code>)</figcaption></figure>
<div class="cell_output"><pre>verdicts: 2. flag = True, N = 16</pre></div>
<p>written for a reader: 5.5 × 10⁻⁴, with <code>eps = 1e-3</code> in code and a version v1.2e5</p>
<p>a chip that breaks: <code style="overflow-wrap:anywhere">mfattn.models.baseline.PractitionerAttentionWithAVeryLongName</code>,
a short one <code style="white-space:nowrap">fused.head_pass</code>, and a run of digits 2.5e-01.5</p>
<p>slopes \u22120.98 and \u22120.86 over N = 540-560, the x-1 axis, <code>-p seed -1</code></p>
<table><tr><td>\u22120.500</td><td>1.5e-04</td></tr></table>
<table style="width:100%;table-layout:fixed"><colgroup><col style="width:93%"><col style="width:7%"></colgroup>
<tr><td>a wide column of sentences, as many words as it likes</td><td>0.52</td></tr></table>
<div style="overflow-x:auto"><div style="width:500px;height:10px">wider than a phone, in a box that scrolls</div></div>
""" + PHONE_FIGURE.format("; --mfattn-phone-width: 420px")

def _player() -> str:
    """A real player from mfattn.companion.plotting.animation: a dot moving across three frames."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mfattn.companion import plotting

    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.set(xlim=(0, 1), ylim=(0, 1))
    (dot,) = ax.plot([0.1], [0.5], "o")
    return plotting.animation(fig, lambda i: dot.set_data([0.1 + 0.4 * i], [0.5]), 3, alt="a dot moving right",
                              interval=50).data


PLAYER = _player()
CLEAN += f"<figure>{PLAYER}<figcaption>Figure 2: a dot moving right.</figcaption></figure>"

FAULTS = {
    "console": "<p>text</p><script>console.error('boom')</script>",
    "uncaught": "<p>text</p><script>undefinedFunction()</script>",
    "request": '<p>text</p><img src="http://example.invalid/x.png" alt="remote picture">',
    "math": '<div class="math notranslate nohighlight">\\[x^2\\]</div>',
    "tex_in_text": "<p>the energy $$E = mc^2$$ left as TeX</p>",
    "alt": '<div class="cell_output"><figure><img src="a.png"><figcaption>c</figcaption></figure></div>',
    "alt_is_path": '<div class="cell_output"><figure><img src="a.png" alt="a.png"><figcaption>c</figcaption>'
                   "</figure></div>",
    "caption": '<div class="cell_output"><img src="a.png" alt="a red square"></div>',
    "wide": '<div style="width:900px;height:10px"></div>',
    "cut_output": '<div class="cell_output"><pre style="overflow-x:auto;white-space:pre">' + "x" * 400 + "</pre></div>",
    "dollar_tex": r"<p>a rate of $10^{-10}$ left as TeX</p>",
    "broken_number": '<table style="width:120px;table-layout:fixed"><tr><td style="width:40px;overflow-wrap:anywhere">'
                     "2.5000e-01</td><td>b</td></tr></table>",
    "caption_name": '<figure><img src="a.png" alt="a red square"><figcaption>a cloud of <code>n_cloud</code> heads'
                    "</figcaption></figure>",
    "bare_true": '<div class="cell_output"><pre>some text\nTrue</pre></div>',
    "true_in_sentence": '<div class="cell_output"><pre>same risk from every start: True</pre></div>',
    "float_dump": '<div class="cell_output"><pre>risk reached: 1.3590807287</pre></div>',
    # a code input a reader would have to scroll sideways
    "scrolled_code": '<div class="cell_input"><pre style="overflow-x:auto;white-space:pre">' + "y" * 400 + "</pre></div>",
    # a player whose play button does nothing: its frames never advance
    "frozen_animation": "<figure>" + PLAYER.replace(".play_animation()", ".toString()")
                        + "<figcaption>Figure 3: a dot.</figcaption></figure>",
    "animation_caption": f"<div>{PLAYER}</div>",
    # an animation whose text a frame shows 4 px high, and one without a record
    "small_animation_text": "<figure>" + re.sub(r'data-mfattn-text-px="[^"]*"', 'data-mfattn-text-px="4.00"', PLAYER)
                            + "<figcaption>Figure 4: a dot.</figcaption></figure>",
    "animation_no_record": "<figure>" + re.sub(r' data-mfattn-text-px="[^"]*"', "", PLAYER)
                           + "<figcaption>Figure 5: a dot.</figcaption></figure>",
    # glued Markdown parsed as CommonMark: its math role reaches the reader as "{math}" before code
    "myst_role": '<p>from {math}<code class="docutils literal notranslate">t=200</code> on</p>',
    "enotation": "<p>the gap falls to 5.5e-04 at the largest N</p>",
    # e-notation that ends a sentence
    "enotation_end": "<p>the dissipation reaches 3.6e-03. It then levels off.</p>",
    # a code chip that cannot break, wider than a phone's column
    "chip": '<p>the baseline <code style="white-space:nowrap">mfattn.models.baseline.PractitionerAttention'
            'WithAVeryLongName</code> here</p>',
    # MathJax's own error mark
    "mathjax_error": '<p>a formula <mjx-container><mjx-merror>Missing argument</mjx-merror></mjx-container></p>',
    # a sign printed as a hyphen, in a sentence and in a table
    "minus": "<p>the linear maps fall with slope -0.98</p>",
    "minus_table": "<table><tr><td>predicted</td><td>-0.500</td></tr></table>",
    # a column of sentences squeezed to 100 px beside a wide one
    "narrow_column": '<table style="width:100%;table-layout:fixed"><colgroup><col style="width:83%">'
                     '<col style="width:17%"></colgroup><tr><td>a</td><td>' + "a sentence of several words " * 3
                     + "</td></tr></table>",
    "too_tall": '<div style="height:46000px"></div>',
    # a figure whose smallest text the page shows 5 px high; an output figure with no record of its text
    "small_text": '<div class="cell_output"><figure><img src="small.png" alt="a square" style="width:1px">'
                  "<figcaption>c</figcaption></figure></div>",
    "no_text_record": '<div class="cell_output"><figure><img src="bare.png" alt="a square">'
                      "<figcaption>c</figcaption></figure></div>",
    # a printout wider than the column, wrapped by the stylesheet inside a number
    # fits the column at 1280 px, but pushes the page sideways on a phone
    "phone_wide": '<div style="width:500px;height:10px"></div>',
    # a figure whose text is 10 px high at 1280 px, and under 8 px scaled to a phone's column
    "phone_small_text": PHONE_FIGURE.format(""),
    "split_number": '<div class="cell_output"><pre style="width:24ch;white-space:pre-wrap;overflow-wrap:anywhere">'
                    "slope at the end: 1.96e-02, floor 3.1e-03</pre></div>",
}
EXPECTED_KIND = {"console": "console", "uncaught": "console", "request": "request", "math": "math",
                 "tex_in_text": "math", "alt": "alt", "alt_is_path": "alt", "caption": "caption", "wide": "width",
                 "cut_output": "width", "dollar_tex": "math", "broken_number": "table", "caption_name": "caption",
                 "bare_true": "repr", "true_in_sentence": "repr", "float_dump": "repr",
                 "frozen_animation": "animation", "animation_caption": "caption", "scrolled_code": "width",
                 "myst_role": "myst", "enotation": "enotation", "too_tall": "height",
                 "minus": "minus", "minus_table": "minus", "narrow_column": "column",
                 "split_number": "split", "small_text": "figtext",
                 "enotation_end": "enotation", "chip": "chip", "mathjax_error": "math",
                 "small_animation_text": "figtext", "animation_no_record": "figtext", "no_text_record": "figtext",
                 "phone_wide": "phone", "phone_small_text": "figtext"}
# pages whose fault also shows on a phone: wider than the screen there too
ALSO_ON_A_PHONE = {"wide", "chip"}


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    shutil.copy(Path(__file__).resolve().parents[1] / "_static" / "mfattn.css", site / "mfattn.css")
    for name, png in FIGURES.items():
        (site / name).write_bytes(png)
    (site / "clean.html").write_text(PAGE.format(body=CLEAN))
    # a code input whose long lines wrap at the column (the book's stylesheet) passes
    (site / "code_input.html").write_text(PAGE.format(
        body='<div class="cell_input"><pre style="overflow-x:auto;white-space:pre-wrap;overflow-wrap:anywhere">'
             + "y = f(x) " * 60 + "</pre></div>"))
    for name, body in FAULTS.items():
        (site / f"{name}.html").write_text(PAGE.format(body=body))
    found = checkhtml.check_site(site)
    by_page = {}
    for f in found:
        by_page.setdefault(f.page, set()).add(f.kind)
    by_page["messages"] = {(f.page, f.message) for f in found}
    return by_page


def test_a_clean_page_passes(faults):
    assert "clean.html" not in faults
    assert "code_input.html" not in faults


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_each_fault_is_caught_and_named(faults, name):
    assert faults.get(f"{name}.html") == {EXPECTED_KIND[name]} | ({"phone"} if name in ALSO_ON_A_PHONE else set())


def test_a_figure_is_held_to_its_text_on_a_phone_too(faults):
    said = [m for page, m in faults["messages"] if page == "phone_small_text.html"]
    assert said and all(m.startswith("on a phone (390 px): smallest text ") and "under 8 px" in m for m in said), said
    # at both widths: 5 px at 1280 px, and on a phone
    small = [m for page, m in faults["messages"] if page == "small_text.html"]
    assert len(small) == 2 and sum(m.startswith("on a phone") for m in small) == 1, small


def test_bad_root(tmp_path):
    with pytest.raises(ValueError, match="root"):
        checkhtml.check_site(tmp_path / "missing")
    with pytest.raises(ValueError, match="root: no HTML pages"):
        checkhtml.check_site(tmp_path)


def test_known_pending_faults_are_named_and_only_they_pass(monkeypatch):
    monkeypatch.setattr(checkhtml, "KNOWN", {("notebooks/05-stability.html", "repr", "risk reached from each start")})
    f = checkhtml.Fault("notebooks/05-stability.html", "repr", 'a bare Python value in an output: "risk reached from each start: 1.359')
    assert checkhtml.known(f)
    assert not checkhtml.known(checkhtml.Fault("notebooks/02-propagation-of-chaos.html", "repr", f.message))
    assert not checkhtml.known(checkhtml.Fault(f.page, "table", f.message))
