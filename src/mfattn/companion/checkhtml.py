"""Check the rendered book in a real browser: ``python -m mfattn check-html [_build/html]``
(``make check-html``).

Every page of the built site is served from a local HTTP server and opened in headless Chromium
(Debian's package, ``/usr/bin/chromium``, driven through Playwright) at 1280 x 900 px, then at a
phone's 390 px. After the page and MathJax have finished, the checker fails on

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
  attribute) times the width the page shows the picture at over its own width, at 1280 px and again
  at a phone's width (``figcheck.js``); or a chapter's output figure or animation that carries no such
  record;
* ``chip``: a code chip in the prose (``mfattn.models.baseline.PractitionerAttention``) whose longest
  piece without a break opportunity is wider than a phone's text column (:data:`PHONE_PX`), measured
  at 1280 px: on a phone it would leave the column;
* ``height``: a page taller than its budget (:data:`HEIGHT_BUDGET`, :data:`HEIGHT_BUDGETS`), so
  that a page meant to be scanned (the evidence map) stays scannable;
* ``phone``: at a phone's width (:data:`PHONE_VIEWPORT`, the same page narrowed after the checks
  above), a page wider than the screen, which the reader would scroll sideways as a whole; the
  elements that reach past its edge outside a box that scrolls on its own are named (a table or a
  printed output scrolling in its own box is the book's intent there).

It builds nothing: run ``make book`` first. This module is a tool for the book, not part of the
engine; it imports Playwright only when called.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from mfattn.companion.plotting import TEXT_KEY, TEXT_PX
from mfattn.companion.render import SIGN_PATTERN

VIEWPORT = {"width": 1280, "height": 900}
#: The phone every page is also looked at (the ``phone`` fault).
PHONE_VIEWPORT = {"width": 390, "height": 844}
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

# The in-page half of the checks (pagechecks.js beside this file): a function that returns a list of
# [kind, message], with the thresholds above written into its placeholders.
_PAGE_CHECKS = (Path(__file__).with_name("pagechecks.js").read_text()
                .replace("__CHARS__", str(COLUMN_CHARS)).replace("__PX__", str(COLUMN_PX))
                .replace("__SIGN__", SIGN_PATTERN)
                .replace("__PHONEPX__", str(PHONE_PX)))
_PHONE_CHECK = Path(__file__).with_name("phonecheck.js").read_text()
# the figures' text (figcheck.js), at both widths
_FIGURE_CHECK = (Path(__file__).with_name("figcheck.js").read_text()
                 .replace("__TEXTPX__", str(TEXT_PX)).replace("__TEXTKEY__", TEXT_KEY))


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
    server = _Server(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def find_chromium(explicit: str | None = None) -> str:
    """The Chromium executable: ``explicit``, else Debian's ``/usr/bin/chromium``, else one on PATH."""
    for c in (explicit, *CHROMIUM_CANDIDATES, shutil.which("chromium")):
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
                    elif int(message) > (budget := HEIGHT_BUDGETS.get(rel, HEIGHT_BUDGET)):
                        found.append(("height", f"{int(message):,} px tall at {VIEWPORT['width']} px, over its "
                                                f"budget of {budget:,} px"))
                found.extend(map(tuple, page.evaluate(_FIGURE_CHECK, "")))
                page.set_viewport_size(PHONE_VIEWPORT)
                page.wait_for_timeout(100)  # the layout and MathJax's reflow at the new width
                found.extend(map(tuple, page.evaluate(_PHONE_CHECK)))
                found.extend(map(tuple, page.evaluate(_FIGURE_CHECK, f"on a phone ({PHONE_VIEWPORT['width']} px): ")))
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


def run(args) -> int:
    """``python -m mfattn check-html``: every fault of the site at ``args.root``, and a summary by kind;
    returns the exit status (1 when a fault is not one of :data:`KNOWN`)."""
    root = Path(args.root)
    found = check_site(root, chromium=args.chromium)
    faults = [f for f in found if not known(f)]
    for f in found:
        print(f"{f} (known, pending a change of the chapter)" if known(f) else f)
    summary = ", ".join(f"{k} {v}" for k, v in sorted(Counter(f.kind for f in faults).items())) or "none"
    pending = len(found) - len(faults)
    print(f"check-html: {len(pages(root))} pages at {VIEWPORT['width']} and {PHONE_VIEWPORT['width']} px, faults: "
          f"{summary}" + (f"; {pending} known and pending (mfattn.companion.checkhtml.KNOWN)" if pending else ""))
    return 1 if faults else 0
