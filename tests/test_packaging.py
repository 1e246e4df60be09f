"""What a fresh install and `make book` rely on: the same pins on every path (pip, conda), book code
blocks within the text column, an API entry for every module a rendered docstring cites."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pins(lines):
    return sorted(l.strip().lstrip("- ").strip() for l in lines if "==" in l and not l.strip().startswith("#"))


def test_environment_yml_pins_equal_requirements_txt():
    req = pins((ROOT / "requirements.txt").read_text().splitlines())
    env = pins((ROOT / "environment.yml").read_text().split("- pip:")[1].splitlines())
    assert req and env == req


def test_constraints_agree_with_requirements():
    cons = {l.split("==")[0].lower(): l for l in pins((ROOT / "constraints.txt").read_text().splitlines())}
    for line in pins((ROOT / "requirements.txt").read_text().splitlines()):
        assert cons[line.split("==")[0].lower()] == line


# The book's text column is 686 px at 1280 px and a code line renders about 8.8 px a character (a
# 96-character line measured 841 px in make check-html), so a code block of a book page (not a
# chapter, whose inputs may scroll) keeps its lines within 76 characters or check-html flags it.
BOOK_CODE_COLUMNS = 76


def test_book_pages_code_lines_fit_the_column():
    too_wide = []
    for page in sorted((ROOT / "book").glob("*.md")):
        fence = None  # the opening line of the fence we are in; directives ({figure} ...) are not code
        for n, line in enumerate(page.read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                fence = None if fence is not None else line.strip()
            elif fence is not None and "{" not in fence and len(line) > BOOK_CODE_COLUMNS:
                too_wide.append(f"{page.name}:{n}: {len(line)} characters")
    assert not too_wide, too_wide


def test_modules_the_rendered_docstrings_cite_are_in_the_api_reference():
    # `make book` runs Sphinx nitpicky (-n -W, py:class and py:data ignored in _config.yml): a
    # function, method or module role in a docstring the API page renders that points into an
    # mfattn module without an entry there (":mod:`mfattn.models.fused`" before it had one) fails the build
    documented = {m for p in (ROOT / "book" / "api").glob("*.md")
                  for m in re.findall(r"automodule:: mfattn\.([\w.]+)", p.read_text())}
    pkg = ROOT / "src" / "mfattn"
    modules = {f"{py.parent.name}.{py.stem}" for py in pkg.glob("*/*.py") if py.stem != "__init__"}
    role = re.compile(r":(?:mod|func|meth|attr|obj|exc):`~?mfattn\.([a-z_]+\.[a-z_]+)")
    missing = sorted(
        f"{name}.py cites mfattn.{cited}"
        for name in documented
        for cited in set(role.findall((pkg / (name.replace(".", "/") + ".py")).read_text()))
        if cited in modules and cited not in documented
    )
    assert documented and documented <= modules and not missing, missing
