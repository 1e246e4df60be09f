"""Check the rendered book in a real browser: ``python -m mfattn check-html [_build/html]``
(``make check-html``).

Every page of the built site is served from a local HTTP server and opened in headless Chromium
(Debian's package, ``/usr/bin/chromium``, driven through Playwright) at 1280 x 900 px. After the
page and MathJax have finished, the checker fails on

* ``console``: an error printed to the browser console, or an uncaught exception;
* ``request``: a request to a URL that is not on this machine (the book must render offline);
* ``math``: math left unrendered (a ``.math`` element without MathJax output, a MathJax error,
  or ``$$``, ``\\(``, ``\\[`` or a ``$...$`` pair around TeX left in the text);
* ``alt``: an image without alt text (missing, empty, or the image's file name);
* ``caption``: an output image that is not in a ``<figure>`` with a non-empty caption, or a
  caption that shows a parameter's name in code (``n_cloud``) where its value belongs;
* ``table``: a word or a number broken across lines in a table cell (a cell narrower than its
  longest word);
* ``split``: a number broken across two lines in an output or in the prose (a printed line
  longer than the column, wrapped at the ``-`` of ``1.96e-02``): the reader sees two numbers;
* ``repr``: an output line that is a bare Python value (``True``, ``None``, ``tensor(...)``, an
  object's address, a float printed to eight or more decimals, ``True`` in a sentence);
* ``animation``: an animation (matplotlib's ``to_jshtml`` player) whose frames do not advance when
  its play button is pressed, or that has no picture, slider or play button (it needs a caption,
  like a figure);
* ``width``: an element wider than the text column, or cut by its own scroll box (an output, a
  table, an equation or a code input a reader would have to scroll sideways; the book's stylesheet
  wraps long code lines at the column);
* ``enotation``: a number in e-notation in the prose (``5.5e-04`` in a sentence, a caption or a
  heading; code, math, tables and outputs aside): the book writes it ``5.5 × 10⁻⁴``;
* ``minus``: a number whose sign is a hyphen-minus (``-0.98``) in the prose or a table, beside the
  math's minus sign (``−0.98``); code and printed outputs aside;
* ``column``: a table column of sentences (:data:`COLUMN_CHARS` characters a cell or more, on
  average) narrower than :data:`COLUMN_PX`, squeezed by its neighbours into lines of a word or two;
* ``figtext``: a figure whose smallest text the page shows below :data:`TEXT_PX` px high: the height
  the PNG records of its smallest text (:data:`mfattn.companion.plotting.TEXT_KEY`, in the PNG's
  own pixels, written by the chapters' figure style; an animation's player carries it as an
  attribute) times the width the page shows the picture at over its own width; or a chapter's
  output figure or animation that carries no such record;
* ``chip``: a code chip in the prose (``mfattn.models.baseline.PractitionerAttention``) whose longest
  piece without a break opportunity is wider than a phone's text column (:data:`PHONE_PX`), measured
  at 1280 px: on a phone it would leave the column;
* ``height``: a page taller than its budget (:data:`HEIGHT_BUDGET`, :data:`HEIGHT_BUDGETS`), so
  that a page meant to be scanned (the evidence map) stays scannable.

It builds nothing: run ``make book`` first. This module is a tool for the book, not part of the
engine; it imports Playwright only when called.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import sys
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from mfattn.companion.plotting import TEXT_KEY
from mfattn.companion.render import SIGN_PATTERN

VIEWPORT = {"width": 1280, "height": 900}
#: The tallest a page may be at :data:`VIEWPORT`, in px (50 screens; the longest chapter is about 37,000).
HEIGHT_BUDGET = 45_000
#: Pages with a budget of their own: the evidence map is read as a map (about 10 screens of 900 px; 11 at most).
HEIGHT_BUDGETS = {"book/evidence.html": 11_000}
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")

#: A table column whose cells hold at least this many characters on average (sentences, not numbers)
#: must be at least :data:`COLUMN_PX` wide at :data:`VIEWPORT`: about five words a line.
COLUMN_CHARS = 60
COLUMN_PX = 160
#: The text column of a phone (390 px wide), in CSS px: a code chip in the prose wider than this
#: without a place to break would leave the column there.
PHONE_PX = 350
#: The smallest a figure's text may be shown at :data:`VIEWPORT`, in CSS px (the body text is 16 px,
#: a figure's tick labels about 13).
TEXT_PX = 8

# The in-page half of the checks. It returns a list of [kind, message].
_PAGE_CHECKS = r"""
async () => {
  const faults = [];
  const COLUMN_CHARS = __CHARS__, COLUMN_PX = __PX__, TEXT_PX = __TEXTPX__, TEXT_KEY = '__TEXTKEY__',
        PHONE_PX = __PHONEPX__;
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await Promise.race([MathJax.startup.promise, new Promise(r => setTimeout(r, 10000))]);
  }
  const col = document.querySelector('article.bd-article') || document.querySelector('article')
              || document.querySelector('main') || document.body;
  if (!col) return faults;
  const colRect = col.getBoundingClientRect();
  const describe = el => {
    let s = el.tagName.toLowerCase();
    if (el.id) s += '#' + el.id;
    if (el.classList.length) s += '.' + Array.from(el.classList).slice(0, 2).join('.');
    const text = Array.from((el.innerText || el.textContent || '').trim().replace(/\s+/g, ' ')).slice(0, 60).join('');
    return text ? `${s} "${text}"` : s;
  };
  // an element's own text, without that of its children (math, code, links are judged on their own)
  const ownText = el => Array.from(el.childNodes).filter(n => n.nodeType === Node.TEXT_NODE)
                               .map(n => n.textContent).join('');
  // the rounded tops of the lines that the characters [a, b) of the text node n are drawn on, in order
  const lineTops = (n, a, b) => {
    const r = document.createRange();
    r.setStart(n, a);
    r.setEnd(n, b);
    return new Set(Array.from(r.getClientRects()).filter(x => x.width > 0).map(x => Math.round(x.top)));
  };
  // whether an element lies in a <figure> with a non-empty caption
  const captioned = el => Boolean(el.closest('figure')?.querySelector('figcaption')?.innerText.trim());
  // math
  for (const m of col.querySelectorAll('.math')) {
    if (!m.querySelector('mjx-container')) faults.push(['math', 'unrendered: ' + describe(m)]);
  }
  for (const e of col.querySelectorAll('mjx-merror, merror')) faults.push(['math', 'MathJax error: ' + describe(e)]);
  for (const p of col.querySelectorAll('p, li, td, dd, h1, h2, h3, h4, figcaption')) {
    if (p.closest('pre, code, .cell_input, .cell_output, .highlight')) continue;
    const text = ownText(p);
    if (/\$\$|\\\(|\\\[/.test(text)) faults.push(['math', 'TeX left in the text: ' + describe(p)]);
    // a single $...$ pair around TeX (a backslash, ^, _ or a brace inside) that MathJax never saw
    else if (/\$[^$\s][^$]*[\\^_{}][^$]*\$/.test(text)) faults.push(['math', 'TeX left in the text: ' + describe(p)]);
    // a MyST role that reached the page as text (glued Markdown parsed as CommonMark shows "{math}" before code)
    if (/\{(math|glue:\w+|ref|numref|cite|eq)\}/.test(text)) faults.push(['myst', 'a MyST role left in the text: ' + describe(p)]);
  }
  // e-notation in the prose: code, math and outputs aside
  for (const p of col.querySelectorAll('p, li, dd, h1, h2, h3, h4, figcaption, summary')) {
    if (p.closest('pre, code, table, .cell_input, .cell_output, .output, .highlight, mjx-container')) continue;
    const text = ownText(p);
    const m = text.match(/(^|[^\w.])(\d(?:\.\d+)?e[-+]?\d+)(?!\w|\.\d)/);
    if (m) faults.push(['enotation', `"${m[2]}" in the prose: ` + describe(p)]);
  }
  // a number's sign printed as a hyphen-minus in the prose or a table (the math and the tables write
  // U+2212): code and printed outputs aside; a hyphen after a letter, digit, point or dash is a hyphen
  for (const p of col.querySelectorAll('p, li, dd, td, th, h1, h2, h3, h4, figcaption, summary')) {
    if (p.closest('pre, code, kbd, samp, .cell_input, .highlight, mjx-container')) continue;
    const text = ownText(p);
    // TeX left in the text is the math check's fault, not this one's
    const m = text.replace(/\$[^$]*\$/g, '').match(/__SIGN__[\d.]*/);
    if (m) faults.push(['minus', `"${m[0]}" with a hyphen for its sign: ` + describe(p)]);
  }
  // a column of sentences squeezed by its neighbours: its cells hold COLUMN_CHARS characters or more on
  // average and it is narrower than COLUMN_PX (a column of short numbers may be as narrow as it likes)
  for (const t of col.querySelectorAll('table')) {
    if (t.closest('pre, .cell_input, .highlight')) continue;
    const rows = Array.from(t.rows);
    const widest = rows.reduce((a, r) => (!a || r.cells.length > a.cells.length) ? r : a, null);
    if (!widest) continue;
    for (let j = 0; j < widest.cells.length; j++) {
      const cells = rows.map(r => r.cells[j]).filter(c => c && c.tagName === 'TD');
      if (!cells.length) continue;
      const chars = cells.reduce((a, c) => a + c.innerText.trim().length, 0) / cells.length;
      const w = widest.cells[j].getBoundingClientRect().width;
      if (chars >= COLUMN_CHARS && w < COLUMN_PX)
        faults.push(['column', `column ${j + 1} is ${Math.round(w)} px wide for ${Math.round(chars)} characters a cell: `
                     + describe(t)]);
    }
  }
  faults.push(['__height', String(document.documentElement.scrollHeight)]);
  // tables: a word or a number broken across lines inside a cell (the cell is narrower than it)
  for (const cell of col.querySelectorAll('td, th')) {
    if (cell.closest('.cell_input, pre')) continue;
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let broken = null;
    for (let n = walker.nextNode(); n && !broken; n = walker.nextNode()) {
      if (n.parentElement.closest('mjx-container')) continue;
      const re = /\S{2,}/g;
      let m;
      while ((m = re.exec(n.textContent)) && !broken) {
        if (lineTops(n, m.index, m.index + m[0].length).size < 2) continue;
        // where the line breaks: after a hyphen that joins two words is ordinary typesetting
        let first = null, at = -1;
        for (let i = 0; i < m[0].length; i++) {
          const [top] = lineTops(n, m.index + i, m.index + i + 1);
          if (top === undefined) continue;
          if (first === null) first = top;
          else if (Math.abs(top - first) > 2) { at = i; break; }
        }
        // a break after a hyphen is typesetting, unless it splits a number: a minus sign ("-2.50") or
        // an exponent ("2.50e-01") or a range of numbers ("540-560")
        const w = m[0];
        const splitsNumber = /[0-9]/.test(w[at]) && (at === 1 || /[0-9]/.test(w[at - 2])
                             || (w[at - 2] === 'e' && at >= 3 && /[0-9]/.test(w[at - 3])));
        if (at > 0 && w[at - 1] === '-' && !splitsNumber) continue;
        broken = m[0];
      }
    }
    if (broken) faults.push(['table', `"${broken}" broken across lines in a table cell: ` + describe(cell)]);
  }
  // captions: a parameter's name in code where its value belongs
  for (const c of col.querySelectorAll('figcaption code, .caption code')) {
    const t = c.innerText.trim();
    if (/^[a-z][a-z0-9]*_[a-z0-9_]+$/.test(t)) faults.push(['caption', `parameter name "${t}" in a caption: ` + describe(c.closest('figcaption, .caption'))]);
  }
  // outputs: a bare Python repr printed for a reader
  for (const pre of col.querySelectorAll('.cell_output pre, .output pre')) {
    for (const line of (pre.innerText || '').split('\n')) {
      const t = line.trim();
      if (/^(True|False|None)$/.test(t) || /^<[\w.]+ object at /.test(t) || /^(tensor|array)\(/.test(t)
          || /\b(True|False)\b/.test(t) && /[a-z]{3}/.test(t.replace(/\b(True|False)\b/g, ''))
             && !/=\s*(True|False)\b/.test(t)
          || /\d\.\d{8,}/.test(t)) {
        faults.push(['repr', 'a bare Python value in an output: ' + JSON.stringify(t.slice(0, 80))]);
        break;
      }
    }
  }
  // outputs and prose: a number that the page breaks across two lines ("1.96e-" / "02"), which a
  // reader then reads as two numbers (tables have their own check above)
  const NUMBER = /[-\u2212+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?/gi;
  const splitIn = (root) => {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (n.parentElement.closest('mjx-container, td, th')) continue;
      // code in the prose (a docstring's example, a code chip) wraps by the stylesheet's design
      if (root.tagName !== 'PRE' && n.parentElement.closest('pre, code')) continue;
      for (const m of n.textContent.matchAll(NUMBER)) {
        if (m[0].length < 3) continue;
        if (lineTops(n, m.index, m.index + m[0].length).size > 1) return m[0];
      }
    }
    return null;
  };
  for (const el of col.querySelectorAll('.cell_output pre, .output pre, p, li, dd, figcaption')) {
    if (el.closest('.cell_input') || (el.tagName !== 'PRE' && el.closest('pre'))) continue;
    const broken = splitIn(el);
    if (broken) faults.push(['split', `"${broken}" broken across lines: ` + describe(el)]);
  }
  // images
  for (const img of col.querySelectorAll('img')) {
    const alt = (img.getAttribute('alt') || '').trim();
    const src = img.getAttribute('src') || '';
    const file = src.split('/').pop();
    if (!alt || alt === src || alt === file || /\.(png|jpe?g|svg|gif)$/i.test(alt)) {
      faults.push(['alt', `image without alt text: ${src} (alt "${alt}")`]);
    }
    if (img.closest('.cell_output, .output') && !captioned(img)) {
      faults.push(['caption', 'output figure without a caption: ' + src]);
    }
  }
  // width: the outermost element that leaves the column, or that its own scroll box cuts
  const flagged = [];
  for (const el of col.querySelectorAll('*')) {
    if (el.closest('script, style, noscript')) continue;
    // MathJax's own parts (stretchy extenders clip by design): judge the equation as a whole
    if (el.tagName.toLowerCase() !== 'mjx-container' && el.closest('mjx-container')) continue;
    if (flagged.some(f => f.contains(el))) continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    const st = getComputedStyle(el);
    if (st.visibility === 'hidden' || st.position === 'fixed') continue;
    if (r.right > colRect.right + 1 || r.left < colRect.left - 1) {
      faults.push(['width', `${Math.round(r.width)} px wide, the column ${Math.round(colRect.width)} px: ` + describe(el)]);
      flagged.push(el);
      continue;
    }
    const clips = ['auto', 'scroll', 'hidden', 'clip'].includes(st.overflowX);
    // an inline box has no client width of its own (0): only block-level scroll boxes can cut
    if (clips && st.display !== 'inline' && el.scrollWidth > el.clientWidth + 1) {
      faults.push(['width', `content ${el.scrollWidth} px cut to ${el.clientWidth} px: ` + describe(el)]);
      flagged.push(el);
    }
  }
  // animations (matplotlib's to_jshtml player): press play; the slider and the picture must move on,
  // and the player, like a figure, needs a caption
  for (const [k, div] of Array.from(col.querySelectorAll('div.animation')).entries()) {
    const img = div.querySelector('img');
    const slider = div.querySelector('input[type=range]');
    const play = div.querySelector('button[title="Play"]');
    const name = `animation ${k + 1} of the page`;
    if (!img || !slider || !play) { faults.push(['animation', `${name}: no picture, slider or play button`]); continue; }
    if (!captioned(div)) faults.push(['caption', `${name} without a caption`]);
    const v0 = Number(slider.value), src0 = img.getAttribute('src');
    play.click();
    await new Promise(r => setTimeout(r, 1500));
    const v1 = Number(slider.value), src1 = img.getAttribute('src');
    div.querySelector('button[title="Pause"]')?.click();
    if (!(v1 > v0) || src1 === src0) {
      faults.push(['animation', `${name}: the frames did not advance after play (frame ${v0} to ${v1}` +
                                 (src1 === src0 ? ', the same picture)' : ')')]);
    }
  }
  // a code chip in the prose that cannot break and would leave a phone's column: its longest piece
  // without a break opportunity (a space, where white-space lets it wrap; any character, where
  // overflow-wrap or word-break allow it) wider than PHONE_PX
  for (const c of col.querySelectorAll('p code, li code, dd code, figcaption code, summary code')) {
    if (c.closest('pre, .cell_input, .cell_output, .highlight, table')) continue;
    const parts = [c, ...c.querySelectorAll('*')].map(e => getComputedStyle(e));
    if (parts.every(st => st.overflowWrap === 'anywhere' || st.overflowWrap === 'break-word'
                          || st.wordBreak === 'break-all')) continue;
    const text = c.textContent;
    const nowrap = parts.some(st => /^(nowrap|pre)$/.test(st.whiteSpace));
    const longest = nowrap ? text.length : Math.max(...text.split(/\s+/).map(t => t.length));
    const w = c.getBoundingClientRect().width * longest / Math.max(1, text.length);
    if (w > PHONE_PX) faults.push(['chip', `a code chip ${Math.round(w)} px wide without a break, wider than a phone's ` +
                                           `column (${PHONE_PX} px): ` + describe(c)]);
  }
  // figures: the smallest text as the page shows it, from the record in the PNG (a tEXt chunk)
  const pngText = async (src) => {
    try {
      const buf = new Uint8Array(await (await fetch(src)).arrayBuffer());
      const dv = new DataView(buf.buffer);
      if (buf.length < 8 || dv.getUint32(0) !== 0x89504e47) return null;
      const latin1 = new TextDecoder('latin1');
      for (let at = 8; at + 8 <= buf.length;) {
        const n = dv.getUint32(at), type = latin1.decode(buf.slice(at + 4, at + 8));
        if (type === 'IEND') break;
        if (type === 'tEXt') {
          const data = buf.slice(at + 8, at + 8 + n), z = data.indexOf(0);
          if (z > 0 && latin1.decode(data.slice(0, z)) === TEXT_KEY) return latin1.decode(data.slice(z + 1));
        }
        at += 12 + n;
      }
    } catch (e) { /* an image that cannot be read has no record */ }
    return null;
  };
  for (const img of col.querySelectorAll('div.animation img')) {
    // the animation player's picture: its record is an attribute (plotting.animation), in the frame's pixels
    const rec = img.getAttribute('data-mfattn-text-px');
    const w = img.getBoundingClientRect().width;
    if (rec === null) { faults.push(['figtext', 'an animation without a record of its smallest text']); continue; }
    if (!img.naturalWidth || !w || rec === 'none') continue;
    const px = Number(rec) * w / img.naturalWidth;
    if (!(px >= TEXT_PX)) faults.push(['figtext', `an animation's smallest text ${px.toFixed(2)} px high as shown, under ${TEXT_PX} px`]);
  }
  for (const img of col.querySelectorAll('img')) {
    if (img.closest('div.animation')) continue;  // the player's picture: above
    const src = img.currentSrc || img.src;
    if (!/\.png([?#]|$)/i.test(src) && !src.startsWith('data:image/png')) continue;
    const w = img.getBoundingClientRect().width;
    if (!img.naturalWidth || !w) continue;
    const rec = await pngText(src);
    const name = (img.getAttribute('src') || '').slice(0, 80);
    if (rec === null) {
      if (img.closest('.cell_output, .output')) faults.push(['figtext', 'an output figure without a record of its smallest text: ' + name]);
      continue;
    }
    const px = Number(rec) * w / img.naturalWidth;
    if (rec !== 'none' && !(px >= TEXT_PX)) {
      faults.push(['figtext', `smallest text ${px.toFixed(2)} px high as shown (${Math.round(w)} px of the PNG's ` +
                              `${img.naturalWidth}), under ${TEXT_PX} px: ` + name]);
    }
  }
  return faults;
}
"""
_PAGE_CHECKS = (_PAGE_CHECKS.replace("__CHARS__", str(COLUMN_CHARS)).replace("__PX__", str(COLUMN_PX))
                .replace("__TEXTPX__", str(TEXT_PX)).replace("__TEXTKEY__", TEXT_KEY)
                .replace("__SIGN__", SIGN_PATTERN)
                .replace("__PHONEPX__", str(PHONE_PX)))


@dataclass(frozen=True)
class Fault:
    page: str
    kind: str
    message: str

    def __str__(self) -> str:
        return f"{self.page}: [{self.kind}] {self.message}"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # no access log on stderr
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):  # a page closed mid-transfer is not a fault
        pass


def _serve(root: Path):
    handler = functools.partial(_Quiet, directory=str(root))
    server = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def find_chromium(explicit: str | None = None) -> str:
    """The Chromium executable: ``explicit``, else Debian's ``/usr/bin/chromium``, else one on PATH."""
    for c in ([explicit] if explicit else []) + list(CHROMIUM_CANDIDATES) + [shutil.which("chromium") or ""]:
        if c and Path(c).is_file():
            return c
    raise SystemExit("check-html: no Chromium found; install Debian's package: apt-get install -y chromium")


def pages(root: Path) -> list[Path]:
    """Every HTML page of the built site (not the copies of sources and static assets)."""
    skip = {"_static", "_sources", "_images", "_downloads", ".doctrees", "_panels_static"}
    return sorted(p for p in root.rglob("*.html") if not (set(p.relative_to(root).parts[:-1]) & skip))


def _on_console(found, aborted):
    def handler(msg):
        url = (msg.location or {}).get("url", "")
        # not an error, or the browser's echo of a request this checker blocked (reported as "request")
        if msg.type != "error" or url in aborted and (msg.text or "").startswith("Failed to load resource"):
            return
        text = (msg.text or "").strip().splitlines()
        found.append(("console", (text[0] if text else "(empty console error)")[:200]))
    return handler


def _on_route(found, aborted):
    """Let local requests through; record and abort every other one (the book must render offline)."""
    def handler(route, *_):
        url = route.request.url
        u = urlparse(url)
        if u.scheme in ("data", "blob", "about") or u.hostname in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            found.append(("request", url[:200]))
            aborted.add(url)
            route.abort()
    return handler


def check_site(root: str | Path, *, chromium: str | None = None, settle_ms: int = 300) -> list[Fault]:
    """Open every page under ``root`` in headless Chromium and return the faults found (see the module
    docstring); an empty list means every page passed."""
    from playwright.sync_api import sync_playwright

    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"root: {root} is not a folder (run `make book` first)")
    files = pages(root)
    if not files:
        raise ValueError(f"root: no HTML pages under {root}")
    server = _serve(root)
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    faults: list[Fault] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=find_chromium(chromium),
                                         args=["--no-sandbox", "--disable-gpu"])
            context = browser.new_context(viewport=VIEWPORT)
            for f in files:
                rel = f.relative_to(root).as_posix()
                page = context.new_page()
                found: list[tuple[str, str]] = []

                aborted: set[str] = set()
                page.on("console", _on_console(found, aborted))
                page.on("pageerror", lambda exc: found.append(("console", f"uncaught: {exc}"[:200])))
                page.route("**/*", _on_route(found, aborted))
                page.goto(base + rel, wait_until="load")
                page.wait_for_timeout(settle_ms)
                page.wait_for_load_state("load")  # a redirect page (index.html) has moved on by now
                for kind, message in page.evaluate(_PAGE_CHECKS):
                    if kind != "__height":
                        found.append((kind, message))
                    elif int(message) > HEIGHT_BUDGETS.get(rel, HEIGHT_BUDGET):
                        found.append(("height", f"{int(message):,} px tall at {VIEWPORT['width']} px, over its "
                                                f"budget of {HEIGHT_BUDGETS.get(rel, HEIGHT_BUDGET):,} px"))
                page.close()
                faults.extend(Fault(rel, k, m.encode('utf-8', 'replace').decode('utf-8'))
                              for k, m in dict.fromkeys(found))
            browser.close()
    finally:
        server.shutdown()
    return faults


# Bare values that chapters still print, each pending a change of the chapter's code (which needs a
# new replication run of that chapter): reported as known, not counted as faults. Any other page or
# line is a fault. Remove an entry when its chapter prints the value through mfattn.companion.verdicts.fmt.
KNOWN: set[tuple[str, str, str]] = set()  # none pending now


def known(fault: Fault) -> bool:
    """Whether a fault is one of :data:`KNOWN` (page, kind, and the start of the quoted line)."""
    return any(fault.page == page and fault.kind == kind and f'"{start}' in fault.message
               for page, kind, start in KNOWN)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("root", nargs="?", default="_build/html", help="the built site (default _build/html)")
    p.add_argument("--chromium", default=None, help="the Chromium executable (default /usr/bin/chromium)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mfattn check-html", description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    return run(ap.parse_args(argv))


def run(args) -> int:
    """``python -m mfattn check-html``: every fault of the site at ``args.root``, and a summary by kind;
    returns the exit status (1 when a fault is not one of :data:`KNOWN`)."""
    root = Path(args.root)
    found = check_site(root, chromium=args.chromium)
    n = len(pages(root))
    faults = [f for f in found if not known(f)]
    for f in found:
        print(f"{f} (known, pending a change of the chapter)" if known(f) else f)
    by_kind = Counter(f.kind for f in faults)
    summary = ", ".join(f"{k} {v}" for k, v in sorted(by_kind.items())) or "none"
    pending = len(found) - len(faults)
    print(f"check-html: {n} pages at {VIEWPORT['width']} px, faults: {summary}"
          + (f"; {pending} known and pending (mfattn.companion.checkhtml.KNOWN)" if pending else ""))
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
