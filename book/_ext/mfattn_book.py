"""Sphinx tweaks for the mfattn book (a local extension, listed in ``_config.yml``).

* ``authoryear`` bibliography style: the reference list is sorted by first author (accents folded)
  and year, and each entry's label is the same "Huan and Yuan, 2026" that the text's author-year
  citations show (sphinxcontrib-bibtex's default ``alpha`` labels, "[HY26]", match nothing in the
  text).
* sphinx-thebe 0.3.1 adds its configuration script twice under Sphinx 7; the second copy
  redeclares a ``const`` and throws in every page's console. Drop exact duplicates of page scripts.
* Pages built from the committed chapters, with nothing executed: the intro's evidence count, the
  status page (``MFATTN_STATUS``, :func:`mfattn.companion.evidence.status_markdown`), the evidence page's
  download ``claims.json`` (written to ``book/_generated/`` before any page is read), and on every
  chapter, after its opening cell, its verdicts at a glance and its downloads (the executed notebook
  and its MyST source). These pages are re-read at every build, since they depend on files that
  Sphinx does not track.
* On every chapter page: each verdict row says how it replicated (from ``replications/``, in the
  evidence map's words, :func:`mfattn.companion.evidence.replication_short`); a code cell is folded
  when half its lines or more only build verdicts or glue values (:func:`bookkeeping_share`); each
  line of a code input carries its indent, so that a wrapped line goes on under it
  (:func:`code_lines`).
* On a phone, a figure as wide as keeps its smallest text legible, in a box that scrolls sideways
  (:func:`phone_widths`, after the build).
* Numbers in e-notation in the prose (glued values, docstrings: ``5.5e-04``) are written for a
  reader (``5.5 × 10⁻⁴``, ``0.0036``), as the verdict tables write theirs, and a number's sign is
  the minus sign of the math (``−0.98``, :func:`mfattn.companion.render.minus_signs`); code, math,
  outputs and raw HTML are left as they are.
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

from pybtex.plugin import register_plugin
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting import BaseSortingStyle


def _last(person) -> str:
    return " ".join(n.render_as("text") for n in person.rich_last_names)


def _fold(text: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)).lower()


def author_year(entry) -> str:
    """"A, 2026", "A and B, 2026" or "A et al., 2026", as sphinxcontrib-bibtex's author_year
    citations print in the text."""
    names = [_last(p) for p in entry.persons.get("author", [])]
    who = names[0] if len(names) == 1 else " and ".join(names) if len(names) == 2 else f"{names[0]} et al."
    return f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearLabels(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        for entry in sorted_entries:
            yield author_year(entry)


class AuthorYearSorting(BaseSortingStyle):
    def sorting_key(self, entry):
        names = [_fold(_last(p)) for p in entry.persons.get("author", [])]
        return (names, entry.fields.get("year", ""), _fold(entry.fields.get("title", "")))


class AuthorYearStyle(PlainStyle):
    default_label_style = AuthorYearLabels
    default_sorting_style = AuthorYearSorting


register_plugin("pybtex.style.formatting", "authoryear", AuthorYearStyle)


def _drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for s in scripts:
        # an inline script's file name is None in one copy and "" in the other
        key = (getattr(s, "filename", str(s)) or "", tuple(sorted(getattr(s, "attributes", {}).items())))
        if key in seen:
            continue
        seen.add(key)
        kept.append(s)
    scripts[:] = kept


_CODE_INPUT = re.compile(r'(<div class="cell_input[^"]*">\s*<div class="highlight[^"]*"><div class="highlight"><pre>)'
                         r'(.*?)(</pre>)', re.S)


def code_lines(html: str) -> str:
    """A chapter page's code inputs with each line in a block of its own that carries the line's
    indent (``--indent``, in characters): the stylesheet then starts a wrapped line's continuation
    under the line's own indent, four characters further in, instead of at the column's edge. Pygments
    closes its spans at every line end, so each line is whole HTML; the newline stays inside its
    line, so copied code keeps its lines (tests/test_book_ext.py).
    """
    import html as html_lib

    def lines(m):
        body = m.group(2)
        out = []
        for line in body.splitlines(keepends=True):
            text = html_lib.unescape(re.sub(r"<[^>]+>", "", line))
            indent = len(text) - len(text.lstrip(" "))
            out.append(f'<span class="mfattn-line" style="--indent:{indent}ch">{line}</span>')
        return m.group(1) + "".join(out) + m.group(3)

    return _CODE_INPUT.sub(lines, html)


def _code_lines(app, pagename, templatename, context, doctree):
    if pagename.startswith("notebooks/") and isinstance(context.get("body"), str):
        context["body"] = code_lines(context["body"])


# an <img> of a PNG under _images/ with its inline size (a retina output: half the PNG's pixels)
_IMG = re.compile(r'(<img [^>]*src="(?:\.\./)*_images/([^"/]+\.png)" style=")([^"]*)(")')


# an animation's picture (mfattn.companion.plotting.animation), its record in its frames' pixels, and
# the start of a frame of its player's script (the signature and the header: the width)
_PLAYER = re.compile(r'(<img [^>]*data-mfattn-text-px="([0-9.]+)" id="_anim_img[0-9a-f]+")(?=>)')
_FRAME = re.compile(r'frames\[0\] = "data:image/png;base64,([A-Za-z0-9+/]{32})')


def phone_widths(html: str, images: Path) -> str:
    """A page's figures, each that records the height of its smallest text (in a PNG text chunk,
    :func:`mfattn.companion.plotting.png_metadata`) given ``--mfattn-phone-width``: the width in CSS
    px that shows that text :data:`~mfattn.companion.plotting.TEXT_PX` high, ``ceil(TEXT_PX x PNG
    width / record)``. On a phone the stylesheet shows the figure at least that wide, in its output's
    own sideways-scrolling box; scaled to a 390 px phone's column the chapters' figures showed their
    text 4 to 7 px high. An animation's picture takes its record from its attribute and its width from
    its player's first frame. ``images``: the built site's ``_images`` folder.
    """
    import base64
    import math

    from PIL import Image

    from mfattn.companion.plotting import TEXT_KEY, TEXT_PX

    def add(m):
        if "--mfattn-phone-width" in m.group(3):  # a page an earlier build rewrote and this one did not write
            return m.group(0)
        try:
            with Image.open(images / m.group(2)) as im:
                width, record = im.width, float(im.text.get(TEXT_KEY, "none"))
        except (OSError, ValueError):  # no such file, not a PNG, no record or "none" (a figure without text)
            return m.group(0)
        if not record > 0:
            return m.group(0)
        style = m.group(3).rstrip().rstrip(";")
        return f"{m.group(1)}{style}; --mfattn-phone-width: {math.ceil(TEXT_PX * width / record)}px;{m.group(4)}"

    def add_player(m):  # the picture of an animation's player: its record and the first frame after it
        frame = _FRAME.search(m.string, m.end())
        if frame is None or not float(m.group(2)) > 0:
            return m.group(0)
        width = int.from_bytes(base64.b64decode(frame.group(1))[16:20], "big")  # the PNG header's width
        return f'{m.group(1)} style="--mfattn-phone-width: {math.ceil(TEXT_PX * width / float(m.group(2)))}px;"'

    return _PLAYER.sub(add_player, _IMG.sub(add, html))


def _phone_widths(app, exception):
    """After the build (the images are in ``_images`` then): :func:`phone_widths` on every page."""
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    for page in out.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        new = phone_widths(text, out / "_images")
        if new != text:
            page.write_text(new, encoding="utf-8")


def _records(app) -> list[dict]:
    """The committed chapters' verdict records (:func:`mfattn.companion.evidence.collect`), read once per build
    and shared by the intro, the status page and every chapter's box."""
    if getattr(app, "_mfattn_records", None) is None:
        from mfattn.companion.evidence import collect

        app._mfattn_records = collect(app.srcdir)
    return app._mfattn_records


def _evidence_headline(app, docname, source):
    """The intro's evidence count, computed from the committed chapters at build time (the same
    sentence that opens the evidence map)."""
    if "MFATTN_EVIDENCE_HEADLINE" not in source[0]:
        return
    from mfattn.companion.evidence import headline

    source[0] = source[0].replace("MFATTN_EVIDENCE_HEADLINE", headline(_records(app)))


def _status(app, docname, source):
    if "MFATTN_STATUS" not in source[0]:
        return
    from mfattn.companion.evidence import status_markdown

    source[0] = source[0].replace("MFATTN_STATUS", status_markdown(app.srcdir, _records(app)))


def _claims(app):
    from mfattn.companion.evidence import claims_json

    if not Path(app.srcdir, "book", "evidence.md").exists():
        return  # a single page built with this extension (``python -m mfattn html``): no evidence page
    out = Path(app.srcdir, "book", "_generated")
    out.mkdir(exist_ok=True)
    (out / "claims.json").write_text(claims_json(app.srcdir, _records(app)) + "\n")


_GROUPS = [("evidence", "evidence"), ("hypothesis", "hypotheses"), ("check", "checks"), ("external", "external")]


def glance(chapter: str, records: list[dict], links: bool = True) -> str:
    """The box a chapter page opens with: its verdicts counted by group and status (replicated
    evidence apart), and its downloads; ``links``: link the evidence and status pages (a book
    without them, a new chapter's trial build, gets none)."""
    from collections import Counter

    from mfattn.companion.evidence import counts, group, outcome_replicated, standing

    mine = [r for r in records if r["chapter"] == chapter]
    c = counts(mine).get(chapter, Counter())
    parts = []
    for g, name in _GROUPS:
        n_pass, n_fail = c[(g, "PASS")], c[(g, "FAIL")]
        if n_pass or n_fail:
            parts.append(f"{name}: {n_pass} PASS, {n_fail} FAIL")
    st = Counter(standing(r) for r in mine)
    same = Counter(group(r) for r in mine if outcome_replicated(r))
    replicated = any("replication" in r for r in mine)
    old = any("replication" in r and "decisions" not in r["replication"] for r in mine)
    evidence_words = ", ".join(f"{st[w]} {w}" for w in ("replicated evidence", "fragile", "not yet replicated",
                                                        "evidence FAIL") if st[w])
    others = ", ".join(f"{same[g]} of {c[(g, 'PASS')] + c[(g, 'FAIL')]} {name.lower()}"
                       for g, name in _GROUPS if g != "evidence" and c[(g, "PASS")] + c[(g, "FAIL")])
    rep = (f"Under ten other seeds: {evidence_words or 'no evidence verdict'}"
           + (f"; the outcome replicates for {others}" if others else "")
           if replicated else "this chapter's replication is not recorded")
    if old:  # a format-1 record: counts only, under the rules before counterfactuals had to be able to happen
        rep += (" (its replication record predates the rule that a counterfactual must be able to happen, so "
                "none of it counts until the chapter is replicated again)")
    kinds = " ({ref}`the kinds <evidence>`)" if links else ""
    where = " When, where and with what it ran is on the {ref}`status` page." if links else ""
    return (":::{admonition} This chapter at a glance\n:class: tip\n"
            f"Verdicts of the committed run{kinds}: {'; '.join(parts)}. {rep}. "
            f"The verdicts close the chapter.{where}\n\n"
            f"Download: {{download}}`the executed notebook <{chapter}.ipynb>` and "
            f"{{download}}`its MyST source <{chapter}.md>` (what `python -m mfattn run` executes).\n:::\n")


def _bookkeeping(stmt) -> bool:
    """Whether a statement only builds verdicts (``verdicts.append(...)``, ``verdicts += [...]``) or
    glues a value into the prose (``glue(...)``), possibly under an ``if`` or a ``for``."""
    import ast

    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        f = stmt.value.func
        return (isinstance(f, ast.Name) and f.id == "glue") or (
            isinstance(f, ast.Attribute) and f.attr in ("append", "extend")
            and isinstance(f.value, ast.Name) and f.value.id == "verdicts")
    if isinstance(stmt, ast.AugAssign):
        return isinstance(stmt.target, ast.Name) and stmt.target.id == "verdicts"
    if isinstance(stmt, (ast.If, ast.For)):
        return all(_bookkeeping(s) for s in stmt.body + stmt.orelse)
    return False


def bookkeeping_share(code: str) -> float:
    """The share of a code cell's lines (blank lines and comments aside) in statements that only build
    verdicts or glue values (:func:`_bookkeeping`), at any depth; 0 for code that does not parse."""
    import ast

    try:
        tree = ast.parse(code)
    except SyntaxError:
        return 0.0
    code_lines = {i for i, line in enumerate(code.splitlines(), 1) if line.strip() and not line.strip().startswith("#")}
    kept = set()

    def visit(body):  # nested too: a loop that builds one verdict per model counts its verdict lines
        for stmt in body:
            if _bookkeeping(stmt):
                kept.update(range(stmt.lineno, stmt.end_lineno + 1))
            else:
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(stmt, field, []) or [])
                for handler in getattr(stmt, "handlers", []) or []:
                    visit(handler.body)

    visit(tree.body)
    return len(kept & code_lines) / len(code_lines) if code_lines else 0.0


# a verdict row of a chapter's table, up to the end of its second cell (the claim)
_VERDICT_ROW = re.compile(r'(<tr class="mfattn-[^"]*" id="(v-[0-9a-f]{10})"><td[^>]*>.*?</td><td[^>]*>)(.*?)(</td>)',
                          re.S)


def _row_replication(chapter: str, html: str, records: list[dict]) -> str:
    """A chapter's verdict table with each row's replication under its claim
    (:func:`mfattn.companion.evidence.replication_short`), found by the row's anchor."""
    from mfattn.companion.evidence import replication_short
    from mfattn.companion.render import number_html, verdict_anchor

    by_anchor = {verdict_anchor(r["claim"]): r for r in records if r["chapter"] == chapter}

    def add(m):
        r = by_anchor.get(m.group(2))
        if r is None:
            return m.group(0)
        word, sep, rest = replication_short(r).partition(": ")
        note = f"<strong>{word}</strong>{sep}{number_html(rest)}"  # 7.22e-16 as a reader reads it
        return f'{m.group(1)}{m.group(3)}<br><small class="mfattn-rep">{note}</small>{m.group(4)}'

    return _VERDICT_ROW.sub(add, html)


_MD_MIMES = ("text/markdown", "application/papermill.record/text/markdown")
_INLINE_MATH = re.compile(r"(?<![\\$])\$([^$\n]+?)\$(?!\$)")
# an inline {glue:md} role without a format: MyST-NB parses it as CommonMark, where roles are code
_GLUE_MD = re.compile(r"(\{glue:md\}`[^`:]+)`")


def _math_roles(text: str) -> str:
    """Markdown that a chapter glues inline (``{glue:md}``) with its ``$...$`` math written as
    ``{math}`` roles: MyST-NB parses glued inline Markdown without the dollar-math extension, so the
    dollars would reach the reader as raw TeX."""
    return _INLINE_MATH.sub(lambda m: "{math}`" + m.group(1).replace("`", "\\`") + "`", text)


def _run_values(cells) -> dict:
    """``{name: value as printed}`` from the parameter table that ``show_config`` printed in the
    run (``  name = value  [ci: ..., paper: ...]``)."""
    out = {}
    for cl in cells:
        for o in cl.get("outputs", []):
            text = "".join(o.get("data", {}).get("text/plain", ""))
            if text.startswith("parameters (this run"):
                for line in text.splitlines()[1:]:
                    m = re.match(r"\s+([A-Za-z_]\w*) = (.*?)  \[", line)
                    if m:
                        out[m.group(1)] = m.group(2).strip("'")
    return out


def _chapter_head(app, docname, source):
    if not docname.startswith("notebooks/"):
        return
    nb = json.loads(source[0])
    cells = nb["cells"]
    first = next((i for i, cl in enumerate(cells) if cl["cell_type"] == "markdown"), None)
    if first is None:
        return
    found = app.env.found_docs
    text = glance(Path(docname).name, _records(app), links="book/evidence" in found and "book/status" in found)
    cells.insert(first + 1, {"cell_type": "markdown", "id": "mfattn-at-a-glance", "metadata": {}, "source": text})
    # under the verdict table, how each verdict replicated (the record is made after the run, so the
    # page adds it at build time rather than the notebook)
    from mfattn.companion.evidence import replication_table

    last = max((i for i, cl in enumerate(cells) for o in cl.get("outputs", [])
                if o.get("metadata", {}).get("mfattn", {}).get("verdicts") is not None), default=None)
    table = replication_table(Path(docname).name, _records(app)) if last is not None else ""
    # each verdict row says how it replicated, under its claim (the same words as the table below)
    if last is not None:
        for out in cells[last].get("outputs", []):
            if "text/html" in out.get("data", {}):
                out["data"]["text/html"] = _row_replication(Path(docname).name, "".join(out["data"]["text/html"]),
                                                            _records(app))
    if table:
        cells.insert(last + 1, {"cell_type": "markdown", "id": "mfattn-replication", "metadata": {},
                                "source": table})
    for cl in cells:
        for out in cl.get("outputs", []):
            for mime in _MD_MIMES:
                if mime in out.get("data", {}):
                    out["data"][mime] = _math_roles("".join(out["data"][mime]))
        if cl["cell_type"] == "markdown":  # glued Markdown parsed as MyST, so that its {math} roles render
            cl["source"] = _GLUE_MD.sub(r"\1:myst`", "".join(cl["source"]))
    # a caption names a parameter in code (`eps_long`) so that the source reads for every profile; the
    # page shows the run's value, from the parameter table the run printed
    values = _run_values(cells)
    for cl in cells:
        fig = cl.get("metadata", {}).get("mystnb", {}).get("figure", {})
        if isinstance(fig.get("caption"), str):
            fig["caption"] = re.sub(r"`([A-Za-z_][A-Za-z0-9_]*)`",
                                    lambda m: values.get(m.group(1), m.group(0)), fig["caption"])
    # machinery a reader unfolds on demand: the parameters cell (its values are in the table below it),
    # and the cells that mostly build verdicts or glue values into the prose (their results are on the
    # page); a measurement that ends with its verdict stays open
    for cl in cells:
        tags = cl.get("metadata", {}).get("tags", [])
        if cl["cell_type"] != "code" or {"hide-input", "remove-input", "remove-cell"} & set(tags):
            continue
        if "parameters" in tags or bookkeeping_share("".join(cl["source"])) >= 0.5:
            cl["metadata"]["tags"] = [*tags, "hide-input"]
    source[0] = json.dumps(nb)


def _always_reread(app, env, added, changed, removed):
    """The pages made from the committed chapters' records: rebuilt whenever the book is."""
    return [d for d in env.found_docs if d in ("book/intro", "book/evidence", "book/status")
            or d.startswith("notebooks/")]


# a number in e-notation; a full stop may end the sentence after it, a decimal point may not follow
_ENOTATION = re.compile(r"(?<![\w.])(-?)(\d(?:\.\d+)?)e([-+]?\d+)(?!\w|\.\d)")
_SUPER = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079")


def prose_number(m: re.Match) -> str:
    """An e-notation number as prose shows it: a decimal for exponents -3 to 3 (its significant
    digits kept), else ``m × 10ⁿ`` joined by narrow no-break spaces (``10ⁿ`` alone for ``m = 1``)."""
    sign, mant, exp = m.group(1), m.group(2), int(m.group(3))
    digits = len(mant.split(".")[1]) if "." in mant else 0
    minus = "\u2212" if sign else ""
    if -3 <= exp <= 3:
        return minus + f"{float(mant) * 10.0 ** exp:.{max(digits - exp, 0)}f}"
    power = "10" + str(exp).translate(_SUPER)
    return minus + (power if mant == "1" else f"{mant}\u202f\u00d7\u202f{power}")


def _prose_numbers(app, doctree, docname):
    """Rewrite e-notation and a number's hyphen-minus sign (as U+2212, the math's minus) in the page's
    text nodes (not in code, math, outputs or raw HTML)."""
    from docutils import nodes

    skip = (nodes.literal, nodes.literal_block, nodes.math, nodes.math_block, nodes.raw, nodes.comment,
            nodes.doctest_block)
    from mfattn.companion.render import minus_signs

    for text in list(doctree.findall(nodes.Text)):
        new = minus_signs(_ENOTATION.sub(prose_number, text.astext()))
        if new == text.astext():
            continue
        parent, inside = text.parent, False
        while parent is not None:
            if isinstance(parent, skip) or "cell_output" in (parent.get("classes", []) if hasattr(parent, "get") else []):
                inside = True
                break
            parent = parent.parent
        if not inside:
            text.parent.replace(text, nodes.Text(new))


def setup(app):
    app.connect("doctree-resolved", _prose_numbers)
    app.connect("html-page-context", _drop_duplicate_scripts)
    app.connect("html-page-context", _code_lines)
    app.connect("source-read", _evidence_headline)
    app.connect("source-read", _status)
    app.connect("source-read", _chapter_head)
    app.connect("builder-inited", _claims)
    app.connect("env-get-outdated", _always_reread)
    app.connect("build-finished", _phone_widths)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
