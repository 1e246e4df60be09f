"""No untraceable number in a chapter's prose.

Every number the book prints must be traceable: a result of the run reaches the prose only glued
(``{glue:text}``, ``{glue:md}``), so a rerun with other parameters cannot leave a stale figure in a
sentence. A numeric literal written into a chapter's prose (its Markdown and its figure captions)
is allowed only when it is

* a reference: a theorem, proposition, lemma, remark, assumption, section, figure or equation
  number (``Theorem 7.5``, ``(24)``, ``(47)–(49)``), an arXiv number or a year;
* an input of the run: a value written in the chapter's code (a parameter's default, a profile's
  value, a constant such as a tolerance), powers of ten (``$10^{-8}$``) included;
* an integer below 10 (a dimension, a count of panels, "two"), which is structure, not a finding,
  or a subscript (the index of :math:`E_{11}`);
* listed in :data:`ALLOWED`, with the reason it is neither glued nor an input.

``ALLOWED`` must stay exact: an entry that no longer matches a number of the prose fails too.
"""

import ast
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.md"))

# (chapter stem, the text around the number as the failure prints it, inner part) -> reason
ALLOWED = {
    ("01-preliminaries", "$\\sqrt8 \\approx 2.8$"):
        "arithmetic of the sentence: the square root of the 8 it names",
    ("02-propagation-of-chaos", "with the 95% intervals"):
        "the confidence level of an interval, a convention",
    ("02-propagation-of-chaos", "about 1 h 45 min there"):
        "a timing measured on a lent H100 (the paper profile's steps, one by one), not a figure of this run",
    ("02-propagation-of-chaos", "probability about $0.37$"):
        "a closed form quoted by the sentence: the chi-square tail it names, P(chi2_32 > 34)",
    ("02-propagation-of-chaos", "$\\chi^2_{32} > 34$"):
        "the chi-square quantile of the closed form the sentence states",
    ("03-static-approximation", "tested by the 95% interval"):
        "the confidence level of an interval, a convention",
    ("06-token-particles", "particle seed 42"):
        "a setting of the public code the chapter compares with, not of this engine",
    ("06-token-particles", "perceptron seed 777"):
        "a setting of the public code the chapter compares with, not of this engine",
    ("06-token-particles", "with seed 111"):
        "a setting of the public code the chapter compares with, not of this engine",
    ("06-token-particles", "perceptron seed 111"):
        "a setting of the public code the chapter compares with, not of this engine",
    ("07-two-layer-baseline", "must contain $- $ in its 95%"):
        "the confidence level of an interval, a convention",
    ("09-real-text", "slope's 95% interval"):
        "the confidence level of an interval, a convention",
    ("09-real-text", "fits' 95% intervals"):
        "the confidence level of an interval, a convention",
    ("09-real-text", "with its 95% interval"):
        "the confidence level of an interval, a convention",
    ("08-optimizers", "come from the fits' 95% intervals"):
        "the confidence level of an interval, a convention",
    ("08-optimizers", "within its 95% interval"):
        "the confidence level of an interval, a convention",
}

REFERENCE = (r"(?:Theorems?|Thm\.?|Propositions?|Prop\.?|Lemmas?|Corollar(?:y|ies)|Remarks?|Assumptions?"
             r"|Definitions?|[Ss]ections?|§|[Ff]igures?|[Ff]igs?\.|Examples?|[Ee]quations?|[Ee]qs?\.|Tables?"
             r"|[Cc]hapters?|Appendix|Algorithm)")
NUMBER = re.compile(r"(?<![\w.\\])\d+(?:\.\d+)?(?![\w])")


def inputs(src: str) -> set[float]:
    """Every numeric constant written in the chapter's code cells (parameters, profiles, constants)
    and in the parameters its front matter declares (``mfattn-parameters``: each profile's value)."""
    values = set()
    head = re.match(r"\A---\n(.*?)\n---\n", src, re.S)
    declared = (yaml.safe_load(head.group(1)) or {}).get("mfattn-parameters") or {} if head else {}

    def numbers(v):
        if isinstance(v, (list, tuple)):
            for x in v:
                numbers(x)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            values.add(float(v))

    for entry in declared.values():
        for prof, v in entry.items():
            if prof != "help":
                numbers(v)
    for cell in re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", src, re.S):
        lines = cell.split("\n")
        if lines and lines[0] == "---":  # cell options in a YAML block
            lines = lines[lines.index("---", 1) + 1:]
        code = "\n".join(x for x in lines if not x.startswith(":tags:"))
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                    and not isinstance(node.value, bool):
                values.add(float(node.value))
    return values


def prose(src: str) -> str:
    """The chapter's prose: Markdown outside code cells and the figure captions, with roles (glued
    values, references, citations), labels, inline code and addresses removed."""
    text = re.sub(r"```\{code-cell\}.*?```", "", src, flags=re.S)
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)  # the file's front matter
    text += "\n" + "\n".join(re.findall(r"caption: \|\n((?:      .*\n)+)", src))
    text = re.sub(r"\{[a-z:]+\}`[^`]*`", " ", text)
    text = re.sub(r"^\([^)]*\)=$|^:name: .*$", " ", text, flags=re.M)
    text = re.sub(r"`[^`]*`", " ", text)
    return re.sub(r"https?://\S+|\b[\w-]+/[\w.-]+\b", " ", text)


def untraceable(src: str) -> list[tuple[str, str]]:
    """``(number, context)`` for every numeric literal of the prose that the rules of the module
    docstring do not allow; the context is the 30 characters before it and 12 after."""
    known, text, found = inputs(src), prose(src), []
    for m in NUMBER.finditer(text):
        n = m.group()
        before, after = text[max(0, m.start() - 40):m.start()], text[m.end():m.end() + 12]
        value = float(n)
        if "." not in n and value < 10:
            continue
        if re.search(REFERENCE + r"[\s~]*(?:[\d.]+[\s,–-]*(?:and|or|to)?\s*)*$", before):
            continue
        if re.search(r"\((?:[\d.]+\)?\s*[–,-]\s*\(?)*$", before) and after.startswith(")"):
            continue  # an equation number: (24), (3.2), (47)–(49)
        if re.search(r"\\tag\{$", before) and after.startswith("}"):
            continue  # an equation's own number, \tag{8.3}
        if re.fullmatch(r"(19|20)\d\d", n) or re.search(r"arXiv[: ]*$", before) or re.match(r"\.\d{4,5}", after):
            continue
        if re.search(r"_\{?$", before):
            continue  # a subscript: an index (E_{11}), not a quantity
        if re.search(r"10\^\{?-?$", before):
            continue  # the exponent of a power of ten: judged with its base below
        power = re.match(r"\^\{?(-?\d+)\}?", after)
        if n == "10" and power:
            if 10.0 ** int(power.group(1)) in known:
                continue  # a power of ten written in the code (1e-8)
            n = f"10^{power.group(1)}"
        if value in known:
            continue
        found.append((n, (before[-30:] + n + after).replace("\n", " ")))
    return found


def _allowed(stem: str, context: str) -> bool:
    return any(s == stem and part in context for s, part in ALLOWED)


@pytest.mark.parametrize("src", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_number_in_the_prose_is_glued_an_input_or_a_reference(src):
    bad = [f"{n}: ...{c}..." for n, c in untraceable(src.read_text()) if not _allowed(src.stem, c)]
    assert not bad, ("numbers in the prose that are neither glued from the run, nor a reference, nor an input "
                     "of the run (glue them, or list them in ALLOWED with a reason):\n" + "\n".join(bad))


def test_every_allowed_entry_still_matches():
    found = {p.stem: untraceable(p.read_text()) for p in CHAPTERS}
    stale = [k for k in ALLOWED if not any(k[1] in c for _, c in found.get(k[0], []))]
    assert not stale, f"ALLOWED entries that match no number of the prose any more: {stale}"


def test_the_rules_flag_a_result_written_by_hand_and_nothing_else():
    src = """---
jupytext: {}
---
# A chapter

```{code-cell} ipython3
tol = 1e-8
N_grid = [8, 16, 32]
```

Theorem 5.2 and (24) and (47)–(49), arXiv 2606.10469, in 2024: the slope is {glue:text}`ch-slope`
with $N=32$ heads and a tolerance $10^{-8}$ in two dimensions, 3 panels.
The measured slope is 0.49, over 64 heads, within $10^{-6}$.
"""
    flagged = [n for n, _ in untraceable(src)]
    assert flagged == ["0.49", "64", "10^-6"]


# Replication counts are never written into a chapter's prose: the record (replications/CHAPTER.json)
# is made after the chapter is executed and changes with every replication, so a count in a sentence
# would go stale unseen. The evidence map and the verdict rows show them; the prose may say how a
# verdict replicated in words that carry no count ("in most replicates", "in every replicate").
_NUM = r"(?:one|two|three|four|five|six|seven|eight|nine|\d+)"
REPLICATION_COUNT = re.compile(
    rf"\b{_NUM}\s+(?:of\s+)?(?:the\s+)?(?:ten|10)\b(?!\s+other\s+seeds)"
    rf"|\b(?:{_NUM}|ten)\s+(?:of\s+the\s+)?(?:other\s+)?replicates?\b"
    rf"|\ball\s+but\s+{_NUM}\b|\breplicates?\s+of\s+ten\b|\b{_NUM}\s+(?:claims?|results?|verdicts?)\s+replicate\b",
    re.I)


def replication_counts(src: str) -> list[str]:
    """The replication counts written in a chapter's prose (see REPLICATION_COUNT)."""
    return [m.group() for m in REPLICATION_COUNT.finditer(re.sub(r"\s+", " ", prose(src)))]


def test_a_replication_count_in_prose_is_found():
    planted = "It passes, as evidence, in eight replicates of ten; the PL test in three of the ten, all but one."
    assert replication_counts(planted) == ["eight replicates", "three of the ten", "all but one"]
    assert replication_counts("Rerun under ten other seeds, it passes in most replicates and in every one.") == []


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.stem)
def test_no_replication_count_in_prose(md):
    assert replication_counts(md.read_text()) == [], (
        f"{md.name}: a replication count in the prose goes stale with the next replication; say it without "
        "the count and let the evidence map show the rates")
