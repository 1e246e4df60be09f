"""The shared figure style: panels at the column's width, at most two a row."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from mfattn import plotting  # noqa: E402


def test_panels_two_a_row_and_an_odd_last_panel_takes_the_row():
    with matplotlib.rc_context(plotting.STYLE):
        fig, ax = plotting.panels(1)
        assert isinstance(ax, matplotlib.axes.Axes)
        assert fig.get_size_inches()[0] == pytest.approx(plotting.COLUMN_WIDTH)
        plt.close(fig)
        fig, axes = plotting.panels(3, height=2.5)
        assert len(axes) == 3 and fig.get_size_inches()[1] == pytest.approx(5.0)
        fig.canvas.draw()
        boxes = [a.get_position() for a in axes]
        assert boxes[0].y0 == pytest.approx(boxes[1].y0)  # first row: two panels side by side
        assert boxes[0].x1 < boxes[1].x0
        assert boxes[2].y1 < boxes[0].y0  # second row
        assert boxes[2].width > 1.8 * boxes[0].width  # the odd last panel spans the row
        plt.close(fig)
        fig, axes = plotting.panels(4, sharex=True)
        assert axes[3].get_shared_x_axes().joined(axes[0], axes[3])
        plt.close(fig)


def test_panels_bad_input():
    with pytest.raises(ValueError, match="^n:"):
        plotting.panels(0)
    with pytest.raises(ValueError, match="height"):
        plotting.panels(2, height=-1)
