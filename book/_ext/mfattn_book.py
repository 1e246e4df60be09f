"""Sphinx tweaks for the mfattn book (a local extension, listed in ``_config.yml``).

* ``authoryear`` bibliography style: the reference list is sorted by first author (accents folded)
  and year, and each entry's label is the same "Huan and Yuan, 2026" that the text's author-year
  citations show (sphinxcontrib-bibtex's default ``alpha`` labels, "[HY26]", match nothing in the
  text).
* sphinx-thebe 0.3.1 adds its configuration script twice under Sphinx 7; the second copy
  redeclares a ``const`` and throws in every page's console. Drop exact duplicates of page scripts.
"""

from __future__ import annotations

import unicodedata

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


def _evidence_headline(app, docname, source):
    """The intro's evidence count, computed from the committed chapters at build time (the same
    sentence that opens the evidence map)."""
    if "MFATTN_EVIDENCE_HEADLINE" not in source[0]:
        return
    from mfattn.evidence import collect, headline

    source[0] = source[0].replace("MFATTN_EVIDENCE_HEADLINE", headline(collect(app.srcdir)))


def setup(app):
    app.connect("html-page-context", _drop_duplicate_scripts)
    app.connect("source-read", _evidence_headline)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
