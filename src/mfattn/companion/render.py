"""Verdicts and settings rendered for a chapter's page: the verdict table (HTML, with coloured
kind and status tags, numbers written for a reader and an anchor per verdict), :func:`report`,
which shows it and stores every verdict's record in the notebook for the evidence map, and
:func:`show_config`, the table of the settings a run used. The verdicts themselves are
:mod:`mfattn.companion.verdicts`; chapters import both through :mod:`mfattn.companion.book`.
"""

from __future__ import annotations

import hashlib
import html
import math
import re

from .verdicts import EVIDENCE, Verdict, fmt, summary  # noqa: F401  (fmt: the numbers the table shows)

__all__ = ["SIGN_PATTERN", "comment_html", "minus_signs", "minus_signs_html", "number_html", "report", "show_config", "value_html", "verdict_anchor", "verdict_table_html", "print_grid",
           "print_table"]

_PASS_STYLE = "background:#e3f2e6;color:#14532d"
_FAIL_STYLE = "background:#fde2e1;color:#8b1111"
# a hypothesis that fails is a finding about the model, not a failed prediction: amber, not red
_HYP_FAIL_STYLE = "background:#fff3cd;color:#7a4d00"
_KIND_STYLE = {"claim": "background:#dbeafe;color:#1e3a8a", "derived": "background:#ede9fe;color:#4c1d95",
               "hypothesis": "background:#fef3c7;color:#78350f", "check": "background:#e5e7eb;color:#374151",
               "external": "background:#ccfbf1;color:#134e4a"}
_TAG = "font-weight:700;padding:1px 5px;border-radius:3px;white-space:nowrap"
_CELL = "padding:4px 6px;vertical-align:top;overflow-wrap:break-word;border-top:1px solid #d0d7de"
ENOTATION = re.compile(r"(-?)(~?)(\d(?:\.\d+)?)e([-+]\d+)")
# a hyphen-minus that is a number's sign: not after a letter, digit, point or dash ("2-3", "x-1" stay)
#: A hyphen that is a number's sign: before a digit (or a point and a digit), and not after a letter,
#: a digit, a point or a dash (ranges, names, exponents). Python's and JavaScript's regular expressions
#: read it alike; the book checker (:mod:`mfattn.companion.checkhtml`) finds the same hyphens with it.
SIGN_PATTERN = r"(?<![\w.\-\u2212])-(?=\.?\d)"
_SIGN = re.compile(SIGN_PATTERN)
_PLUS_MINUS = re.compile(r"\+-(?=\.?\d)")
_TAG_OR_TEXT = re.compile(r"(<[^>]*>)|([^<]+)")


def minus_signs(text: str) -> str:
    """``text`` with every number's sign written as the minus sign U+2212, as the math and the
    verdict tables print it, and ``+-`` before a number as ``±``. A hyphen after a letter, digit,
    point or dash is a hyphen, not a sign: ranges (``540-560``), names (``x-1``) and e-notation
    exponents stay as they are.

    Parameters
    ----------
    text : str
        Plain text (a sentence of prose, a table cell).

    Returns
    -------
    str

    Examples
    --------
    >>> from mfattn.companion.render import minus_signs
    >>> minus_signs("slope -0.98 in [-1.10, -.86]; N^-1/2; 540-560; x-1; 1.5e-04; range +-1")
    'slope \u22120.98 in [\u22121.10, \u2212.86]; N^\u22121/2; 540-560; x-1; 1.5e-04; range \xb11'
    """
    return _SIGN.sub("\u2212", _PLUS_MINUS.sub("\u00b1", text))


def minus_signs_html(markup: str) -> str:
    """:func:`minus_signs` on the text of the HTML ``markup``, its tags (and their attributes) untouched.

    Parameters
    ----------
    markup : str
        HTML whose text is escaped (a ``<`` in the text would read as a tag's start).

    Returns
    -------
    str

    Examples
    --------
    >>> from mfattn.companion.render import minus_signs_html
    >>> minus_signs_html('<span data-v="-5.1e-01">-0.510</span> and -1')
    '<span data-v="-5.1e-01">\u22120.510</span> and \u22121'
    """
    return _TAG_OR_TEXT.sub(lambda m: m.group(1) or minus_signs(m.group(2)), markup)


def _esc(text: str) -> str:
    return html.escape(str(text), quote=True)


def number_html(text: str, trim: bool = False) -> str:
    """``text`` (HTML-escaped) with every number in e-notation (as :func:`~mfattn.companion.verdicts.fmt` prints them) written
    for a reader: a plain decimal when its exponent is between -3 and 3 (``2.00e+00`` is ``2.00``,
    ``-5.10e-01`` is ``−0.510``), else a power of ten (``1.23 × 10⁻⁵``); ``~1e-06`` is ``~10⁻⁶``.
    Every sign is the minus sign (:func:`minus_signs_html`).
    The significant digits stay those printed; ``trim`` drops trailing zeros (for predictions and
    tolerances, which are exact). Each number keeps its printed form in ``data-v``, which the nbval
    sanitiser (``nbval-sanitize.cfg``) compares instead of the display.

    Parameters
    ----------
    text : str
        Plain text, e.g. a measured value or ``"<= 1.00e+00"``.
    trim : bool
        Drop trailing zeros of the mantissa.

    Returns
    -------
    str
        HTML; ``+-``, ``<=`` and ``>=`` become ``±``, ``≤`` and ``≥``, a sign ``−``.

    Examples
    --------
    >>> from mfattn.companion.book import number_html
    >>> import re
    >>> import html
    >>> strip = lambda h: html.unescape(re.sub(r"<[^>]+>", "", h.replace("<sup>", "^"))).replace("\u202f", " ") \\
    ...     .replace("\u2212", "-")
    >>> strip(number_html("2.00e+00")), strip(number_html("-5.10e-01")), strip(number_html("1.23e-05"))
    ('2.00', '-0.510', '1.23 × 10^-5')
    >>> strip(number_html("+-5.00e-02", trim=True)), strip(number_html("<= 1.00e+00", trim=True))
    ('±0.05', '≤ 1')
    >>> strip(number_html("~1e-06")), strip(number_html("<1e-12")), strip(number_html("-2.0e+04", trim=True))
    ('~10^-6', '<10^-12', '-2 × 10^4')
    """
    cut = lambda s: s.rstrip("0").rstrip(".") if trim and "." in s else s  # noqa: E731  (trailing zeros)

    def one(m):
        sign, approx, mant, exp = m.groups()
        minus, exp = "\u2212" if sign else "", int(exp)
        pw = f"10<sup>{chr(0x2212) if exp < 0 else ''}{abs(exp)}</sup>"
        if approx:
            shown = f"{minus}~{pw}"
        elif -3 <= exp <= 3:
            places = max(0, len(mant.partition(".")[2]) - exp)
            shown = cut(f"{float(sign + mant) * 10.0 ** exp:.{places}f}".replace("-", minus))
        else:
            m_txt = cut(mant)
            shown = f"{minus}{pw}" if m_txt == "1" else f"{minus}{m_txt}\u202f×\u202f{pw}"
        return f'<span class="mfattn-num" data-v="{m.group(0)}">{shown}</span>'

    out = _esc(text).replace("+-", "±").replace("&lt;=", "≤").replace("&gt;=", "≥")
    return minus_signs_html(ENOTATION.sub(one, out))


def result_anchor(ref: str) -> str:
    """The anchor of a result's row on the evidence map (:func:`mfattn.companion.evidence.markdown`)."""
    return "r-" + re.sub(r"[^a-z0-9]+", "-", ref.lower()).strip("-")


def verdict_anchor(claim: str) -> str:
    """The anchor of a verdict's row in its chapter: stable under reordering, the same wherever the
    claim is named (the evidence map links to it).

    Parameters
    ----------
    claim : str
        The verdict's claim, as its record stores it.

    Returns
    -------
    str
        ``"v-"`` and ten hexadecimal digits of the claim's SHA-1.

    Examples
    --------
    >>> from mfattn.companion.book import verdict_anchor
    >>> a = verdict_anchor("Thm 5.2: slope in N")
    >>> a.startswith("v-"), len(a), a == verdict_anchor("Thm 5.2: slope in N") != verdict_anchor("other")
    (True, 12, True)
    """
    return "v-" + hashlib.sha1(claim.encode()).hexdigest()[:10]


def verdict_table_html(verdicts) -> str:
    """The verdicts as an HTML table (status and kind as coloured tags, claim, measured, predicted,
    tolerance) that wraps at spaces to any column width. A failed hypothesis (a finding about the
    model) is amber, a failed claim red. Each row has an anchor (:func:`verdict_anchor`) and links
    the results it bears on to their rows on the evidence map.

    The table is followed by the :func:`~mfattn.companion.verdicts.summary` line.

    Parameters
    ----------
    verdicts : iterable of Verdict
        The verdicts, one row each.

    Returns
    -------
    str
        The HTML.

    Examples
    --------
    >>> from mfattn.companion.book import check_at_most, check_close, verdict_table_html, verdict_anchor
    >>> vs = [check_close("a", 1.0, 1.0, 0.1, kind="claim"), check_at_most("b", 2.0, 1.0, kind="check")]
    >>> html = verdict_table_html(vs)
    >>> html.startswith('<table class="mfattn-verdicts"'), html.count('<tr class="mfattn-fail')
    (True, 1)
    >>> f'id="{verdict_anchor("b")}"' in html
    True
    >>> ev = check_close("c", 1.0, 1.0, 0.1, kind="derived", counterfactual=(1.3, "30% more"))
    >>> "derived → check" in verdict_table_html([ev]), "claim → check" in html
    (False, True)
    """
    rows = []
    for v in verdicts:
        style = _PASS_STYLE if v.passed else _HYP_FAIL_STYLE if v.kind == "hypothesis" else _FAIL_STYLE
        kind = f"{v.kind} → check" if v.check_reason else v.kind
        why = f'<br><small>(counted as a check: {_esc(v.check_reason)})</small>' if v.check_reason else ""
        refs = ", ".join(f'<a href="../book/evidence.html#{result_anchor(r)}">{_esc(r)}</a>' for r in v.ref)
        refs = f"<br><small>bears on {refs}</small>" if refs else ""
        c = v.counterfactual
        cf = "" if c is None else (f"<br><small>counterfactual {number_html(c.predicted, trim=True)} "
                                   f"{minus_signs_html(_esc(c.description()))}</small>")
        rows.append(
            f'<tr class="mfattn-{v.status.lower()} mfattn-kind-{v.kind}" id="{verdict_anchor(v.claim)}">'
            f'<td style="{_CELL}"><span class="mfattn-status" style="{style};{_TAG}">{v.status}</span><br>'
            f'<span class="mfattn-kind" style="{_KIND_STYLE[v.kind]};{_TAG};font-weight:400;font-size:0.9em">'
            f'{_esc(kind)}</span></td>'
            f'<td style="{_CELL}">{minus_signs_html(_esc(v.claim) + why)}{refs}</td>'
            f'<td style="{_CELL}">{number_html(fmt(v.measured, v.sig, v.floor))}</td>'
            f'<td style="{_CELL}">{number_html(v.predicted, trim=True)}</td>'
            f'<td style="{_CELL}"><small>{number_html(v.tolerance, trim=True)}</small>{cf}</td></tr>')
    head = "".join(f'<th style="{_CELL};text-align:left">{h}</th>'
                   for h in ("status", "claim", "measured", "predicted", "tolerance"))
    cols = "".join(f'<col style="width:{w}%">' for w in (14, 36, 15, 14, 21))
    return (f'<table class="mfattn-verdicts" style="width:100%;table-layout:fixed;border-collapse:collapse;'
            f'font-size:0.85em"><colgroup>{cols}</colgroup><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>'
            f'<p class="mfattn-summary"><strong>{_esc(summary(verdicts))}</strong></p>')


def value_html(value) -> str:
    """A parameter's value written for a reader of the parameter table (HTML), not as Python's repr.

    A string without quotes, as code; ``None`` as "none"; a float that is 1/2^k, 1/8 or below, as
    that fraction (``0.00390625`` is 1/256); a float outside [10^-3, 10^4) with at most three
    significant digits as a power of ten (:func:`number_html`); any other number exactly as Python
    prints it; a list or tuple item by item, separated by commas (in parentheses when nested).

    Parameters
    ----------
    value : object
        A chapter parameter's value (a Python literal).

    Returns
    -------
    str
        HTML.

    Examples
    --------
    >>> from mfattn.companion.render import value_html
    >>> value_html([0.125, 0.0625, 0.00390625, 0.025]), value_html(["markov"]), value_html([(1, 2), 3])
    ('1/8, 1/16, 1/256, 0.025', '<code>markov</code>', '(1, 2), 3')
    >>> value_html("ci"), value_html(None), value_html(16384)
    ('<code>ci</code>', 'none', '16384')
    >>> value_html(1e-8)
    '<span class="mfattn-num" data-v="1.00e-08">10<sup>−8</sup></span>'
    """
    if isinstance(value, (list, tuple)):  # a nested list or tuple in parentheses
        return ", ".join(f"({value_html(v)})" if isinstance(v, (list, tuple)) else value_html(v)
                         for v in value)
    if value is None:
        return "none"
    if isinstance(value, str):
        return f"<code>{_esc(value)}</code>"
    if isinstance(value, float) and math.isfinite(value) and value != 0:
        inv = 1 / value
        if 0 < value <= 0.125 and inv.is_integer() and int(inv) & (int(inv) - 1) == 0:
            return f"1/{int(inv)}"
        short = f"{value:.2e}"
        if not 1e-3 <= abs(value) < 1e4 and float(short) == value:
            return number_html(short, trim=True)
    return _esc(repr(value))


def comment_html(comment: str) -> str:
    """A parameter's comment (its meaning, from the parameters cell or the front matter) for the
    parameter table: a quoted value as code, as the value columns show it; a number in e-notation
    written for a reader (:func:`number_html`); a sign as the minus sign.

    Parameters
    ----------
    comment : str
        The comment, plain text.

    Returns
    -------
    str
        HTML.

    Examples
    --------
    >>> from mfattn.companion.render import comment_html
    >>> comment_html('"ci": 2 CPU cores; "paper": larger sizes')
    '<code>ci</code>: 2 CPU cores; <code>paper</code>: larger sizes'
    >>> comment_html("step sizes in [1e-3, 10^1.5]")
    'step sizes in [<span class="mfattn-num" data-v="1e-3">0.001</span>, 10^1.5]'
    """
    parts = re.split(r'"([^"]+?)"', comment)  # odd parts were quoted
    return "".join(f"<code>{_esc(x)}</code>" if i % 2 else number_html(x) for i, x in enumerate(parts))


def _display(text: str, html_text: str, metadata: dict | None = None) -> None:
    """A rich output in a notebook (plain text and HTML), the plain text elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover - IPython is a dependency of the notebooks
        get_ipython = lambda: None
    if get_ipython() is None:
        print(text)
        return
    display({"text/plain": text, "text/html": html_text}, raw=True, metadata=metadata or {})


def report(verdicts) -> None:
    """Show every verdict and the chapter's count (:func:`~mfattn.companion.verdicts.summary`): a table in the book
    (:func:`verdict_table_html`), the same lines as plain text elsewhere. Inside a notebook the output
    carries every verdict's :meth:`~mfattn.companion.verdicts.Verdict.record` in its metadata under ``"mfattn"``;
    :mod:`mfattn.companion.evidence` reads them from the committed notebooks (nbval compares the text and the
    table, never the metadata).

    Parameters
    ----------
    verdicts : iterable of Verdict
        The chapter's verdicts.

    Raises
    ------
    ValueError
        If an item is not a :class:`Verdict`, or cites a result the evidence map does not list
        (:data:`mfattn.companion.results.KNOWN`): the one line names the file where results are declared.

    Examples
    --------
    Outside IPython the report is printed as plain text:

    >>> from mfattn.companion.book import check_at_most, check_close, report
    >>> vs = [check_close("a", 1.0, 1.0, 0.1, kind="claim", counterfactual=(1.3, "30% more")),
    ...       check_at_most("b", 2.0, 1.0, kind="check")]
    >>> report(vs)
    [PASS] (claim) a
           measured 1.00e+00 | predicted 1.00e+00 | tolerance +-1.00e-01
           counterfactual 1.30e+00 (30% more; 3.0 tolerances from the prediction, at most 4): rejected
    [FAIL] (check) b
           measured 2.00e+00 | predicted <= 1.00e+00 | tolerance +0.00e+00
    verdicts: 2. Evidence (claims and derived results with a counterfactual that could have happened and
    is rejected): 1 PASS, 0 FAIL. Hypotheses (PASS: it holds): 0 PASS, 0 FAIL. Checks (by construction, or
    no counterfactual that could have happened and is rejected): 0 PASS, 1 FAIL.
    """
    from .results import KNOWN  # the results the evidence map lists

    verdicts = list(verdicts)
    for v in verdicts:
        if not isinstance(v, Verdict):
            raise ValueError(f"verdicts: expected Verdict objects, got {type(v).__name__}")
        if unknown := [r for r in v.ref if r not in KNOWN]:
            raise ValueError(f"verdicts: {v.claim!r} cites {unknown[0]!r}, which the evidence map does not list; "
                             "declare a new result in mfattn/companion/results.py (RESULTS for the paper, "
                             "COMPANION for a companion text, BEYOND for one a chapter derives)")
    text = "\n".join([v.line() for v in verdicts] + [summary(verdicts)])
    _display(text, verdict_table_html(verdicts), {"mfattn": {"verdicts": [v.record() for v in verdicts]}})


def show_config(cfg, source=None, values=None) -> None:
    """The effective parameters of a run (a :func:`~mfattn.companion.book.resolve_profile` namespace) as a small table:
    every setting after the profile's defaults and the caller's overrides were applied.

    With ``source`` (the chapter's ``.md``, e.g. ``"05-stability.md"``; chapters run in their own
    folder) the table lists every parameter of the chapter's parameters cell with its value in this
    run (from ``cfg``, else from ``values``, e.g. the notebook's ``globals()``), its value in each
    profile and its comment (:func:`mfattn.companion.chapters.parameter_rows`), as ``python -m mfattn params``
    prints it.

    Parameters
    ----------
    cfg : types.SimpleNamespace
        The run's settings, from :func:`~mfattn.companion.book.resolve_profile` (at least one).
    source : str or pathlib.Path or None
        The chapter's MyST source; ``None`` for the settings of ``cfg`` alone.
    values : dict or None
        Values of parameters that ``cfg`` does not hold (e.g. ``globals()``); ``cfg`` wins.

    Raises
    ------
    ValueError
        If ``cfg`` holds no settings.

    Examples
    --------
    Outside IPython the table is printed as plain text:

    >>> from mfattn.companion.book import resolve_profile, show_config
    >>> cfg = resolve_profile({"ci": {"n": 64, "T": 1.0}}, "ci")
    >>> show_config(cfg)
    effective parameters: profile='ci', n=64, T=1.0

    and with the chapter's source, one line per parameter:

    >>> import pathlib
    >>> import mfattn
    >>> from mfattn.companion.chapters import profiles
    >>> chapter = pathlib.Path(mfattn.__file__).resolve().parents[2] / "notebooks" / "05-stability.md"
    >>> show_config(resolve_profile(profiles(chapter), "ci"), chapter, values={"device": "cpu"})
    parameters (this run, then each profile's value):
      profile = 'ci'  [ci: 'ci', paper: 'paper']
      device = 'cpu'  [ci: 'cpu', paper: 'cpu']
    ...
    """
    items = list(vars(cfg).items())
    if not items:
        raise ValueError("cfg: no settings to show")
    profile = f'<code>{_esc(getattr(cfg, "profile", ""))}</code>'
    if source is None:
        text = "effective parameters: " + ", ".join(f"{k}={v!r}" for k, v in items)
        cells = [f'<td style="padding:2px 8px"><code>{_esc(k)}</code></td>'
                 f'<td style="padding:2px 8px">{_esc(repr(v))}</td>' for k, v in items]
        cells += ["<td></td><td></td>"] * (len(cells) % 2)
        rows = "".join(f"<tr>{a}{b}</tr>" for a, b in zip(cells[::2], cells[1::2]))
        return _display(text, f'<table class="mfattn-config" style="font-size:0.85em;'
                        f'border-collapse:collapse;table-layout:fixed;width:100%"><caption style="text-align:'
                        f'left">effective parameters of this run (profile {profile})</caption><tbody>{rows}'
                        f'</tbody></table>')
    from .chapters import parameter_rows

    run = {**(values or {}), **vars(cfg)}
    table = parameter_rows(source)
    profs = [k for k in table[0] if k not in ("name", "comment")] if table else []
    head = ["parameter", "this run", *profs, "meaning"]
    # the table shows values for a reader (value_html); the plain text keeps Python's literals
    body = lambda show: [[r["name"], show(run[r["name"]]) if r["name"] in run else "",  # noqa: E731
                          *(show(r[p]) for p in profs), r["comment"]] for r in table]
    text = "\n".join(["parameters (this run, then each profile's value):"]
                     + [f"  {b[0]} = {b[1]}  [{', '.join(f'{p}: {v}' for p, v in zip(profs, b[2:-1]))}]"
                        for b in body(repr)])
    # automatic layout: each column as wide as its longest word needs, values wrap at spaces
    cell = "padding:2px 6px;vertical-align:top;border-top:1px solid #d0d7de"
    ths = "".join(f'<th style="{cell};text-align:left">{_esc(h)}</th>' for h in head)
    # each value cell names its column (data-label): on a phone the rows stack and show it (_static/mfattn.css)
    trs = "".join(f'<tr><td style="{cell}"><code>{_esc(b[0])}</code></td>'
                  + "".join(f'<td style="{cell}" data-label="{_esc(h)}">{x}</td>' for h, x in zip(head[1:-1], b[1:-1]))
                  + f'<td style="{cell}"><small>{comment_html(b[-1])}</small></td></tr>'
                  for b in body(value_html))
    _display(text, f'<table class="mfattn-config" style="font-size:0.8em;border-collapse:collapse;'
             f'width:100%"><caption style="text-align:left">parameters of this chapter: this run (profile '
             f'{profile}) and each profile\'s values; <code>python -m mfattn run CHAPTER -p NAME VALUE'
             f'</code> sets one</caption><thead><tr>{ths}</tr></thead><tbody>{trs}</tbody></table>')


def print_grid(rows, cols, entry, *, width: int = 8, corner: str = "setting", label=str, parts: int = 2) -> None:
    """Print a table of ``rows`` against ``cols`` in ``parts`` blocks of columns, one under the other,
    so that a line fits the book's column (chapter 06's tables of counts by setting and beta).

    Parameters
    ----------
    rows : iterable
        The row keys, in order.
    cols : sequence of float
        The column keys (printed with ``g``), split into ``parts`` blocks of about equal length.
    entry : callable
        ``entry(row, col) -> str``, the text of a cell (right-aligned to ``width``), or ``None`` to
        leave the cell out.
    width : int, default 8
        The width of a column.
    corner : str, default "setting"
        The head of the label column (22 characters wide).
    label : callable, default str
        The text of a row's label.
    parts : int, default 2
        The number of blocks, separated by an empty line.

    Examples
    --------
    >>> from mfattn.companion.render import print_grid
    >>> print_grid(["a", "b"], [1, 2, 3], lambda r, c: f"{r}{c}", width=4, parts=2)
    setting                  1   2
    a                       a1  a2
    b                       b1  b2
    <BLANKLINE>
    setting                  3
    a                       a3
    b                       b3
    """
    cols, rows = list(cols), list(rows)
    size = -(-len(cols) // max(1, parts))
    for k in range(0, len(cols), max(1, size)):
        part = cols[k:k + size]
        print(("\n" if k else "") + f"{corner:22s}" + "".join(f"{c:>{width}g}" for c in part))  # blocks apart
        for r in rows:
            cells = [entry(r, c) for c in part]
            print(f"{label(r):22s}" + "".join(f"{e:>{width}s}" for e in cells if e is not None))


def print_table(corner: str, headers, labels, rows, *, label_fmt: str = "", fmt: str = "11.3e") -> None:
    """Print a table with one labelled line per row: a head line (``corner``, then ``headers``), then each
    label and its row's values, every column right-aligned to its widest entry (give ``fmt`` and
    ``label_fmt`` a width to space the columns).

    Parameters
    ----------
    corner : str
        The head of the label column.
    headers : sequence of str
        One head per column.
    labels : sequence
        One label per row, formatted with ``label_fmt``.
    rows : sequence of sequences of float (n_rows, n_columns)
        The values, formatted with ``fmt``.
    label_fmt : str, default ""
        Format spec of the labels (``"14.3e"``, ``"4d"``).
    fmt : str, default "11.3e"
        Format spec of the values.

    Raises
    ------
    ValueError
        Naming ``labels`` when they are not one per row, or ``rows`` when a row does not have one value
        per header.

    Examples
    --------
    >>> from mfattn.companion.render import print_table
    >>> print_table("n", ["x", "x^2"], [1, 10], [[1.0, 1.0], [10.0, 100.0]], label_fmt="3d", fmt="6.1f")
      n     x   x^2
      1   1.0   1.0
     10  10.0 100.0
    """
    headers, labels, rows = list(headers), list(labels), [list(r) for r in rows]
    if len(labels) != len(rows):
        raise ValueError(f"labels: expected one per row ({len(rows)}), got {len(labels)}")
    if any(len(r) != len(headers) for r in rows):
        raise ValueError(f"rows: expected {len(headers)} values in every row, one per header")
    # the head line, then one line per row: a label and its row's cells
    lines = [(corner, headers)] + [(format(x, label_fmt), [format(v, fmt) for v in r]) for x, r in zip(labels, rows)]
    lw = max(len(name) for name, _ in lines)
    widths = [max(len(r[j]) for _, r in lines) for j in range(len(headers))]
    for name, r in lines:
        print(name.rjust(lw) + "".join(c.rjust(w) for c, w in zip(r, widths)))
