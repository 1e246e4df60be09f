"""The pins a user installs are the same on every path (pip, conda)."""

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
