"""The printed tables of the chapters (mfattn.companion.render.print_table)."""

import pytest

from mfattn.companion.render import print_table


def test_print_table_aligns_each_column_to_its_widest_entry(capsys):
    print_table("L", ["C_0(L)", "C_1(L)"], [2, 16], [[4.0, 3.25], [4.0, 123.5]], label_fmt="4d", fmt="11.2g")
    lines = capsys.readouterr().out.splitlines()
    # oracle: the same lines written out by hand, 4 + 11 + 11 characters
    assert lines == ["   L     C_0(L)     C_1(L)",
                     "   2          4        3.2",
                     "  16          4    1.2e+02"]
    with pytest.raises(ValueError, match="^labels"):
        print_table("L", ["a"], [1, 2], [[1.0]])
    with pytest.raises(ValueError, match="^rows"):
        print_table("L", ["a"], [1], [[1.0, 2.0]])
