"""The shared figure style: panels at the column's width, at most two a row."""

import base64
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from mfattn.companion import plotting  # noqa: E402


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


def _shown_in_ipython(draw):
    """The PNG bytes and the output metadata a chapter's kernel shows for a figure: ``draw(ax)`` on a
    one-panel figure, after ``plotting.use()``, formatted by an IPython shell."""
    pytest.importorskip("matplotlib_inline")
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        with matplotlib.rc_context():
            plotting.use()
            fig, ax = plotting.panels(1, height=2.0)
            draw(ax)
            data, meta = shell.display_formatter.format(fig)
            plt.close(fig)
    finally:
        InteractiveShell.clear_instance()
    png = data["image/png"]
    return (base64.b64decode(png) if isinstance(png, str) else png), meta  # IPython 8+ gives base64 text


def test_inside_ipython_figures_are_shown_at_twice_the_pixels_and_the_same_size():
    """A chapter's figures are retina PNGs: the PNG's own size (read from its header) is twice the
    size the output's metadata asks the page to show (rounded down), and that is the figure's width
    at DPI."""
    png, meta = _shown_in_ipython(lambda ax: ax.plot([0, 1], [0, 1]))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width // 2, height // 2) == (meta["image/png"]["width"], meta["image/png"]["height"])
    # shown at about the figure's own size (the tight bounding box trims a few pixels)
    assert meta["image/png"]["width"] == pytest.approx(plotting.COLUMN_WIDTH * plotting.DPI, rel=0.05)


def test_panels_bad_input():
    with pytest.raises(ValueError, match="^n:"):
        plotting.panels(0)
    with pytest.raises(ValueError, match="height"):
        plotting.panels(2, height=-1)


def _frames(html: str) -> list[bytes]:
    """The PNG frames the player embeds, decoded."""
    import base64
    import re

    return [base64.b64decode(m.replace("\\", "").replace("\n", "")) for m in re.findall(r'data:image/png;base64,([A-Za-z0-9+/=\\\n]+)"', html)]


def test_animation_embeds_every_frame_as_drawn_at_the_animation_dpi():
    import io
    import re

    from PIL import Image

    with matplotlib.rc_context(plotting.STYLE):  # savefig.dpi 100 there: the frames must not use it
        fig, ax = plt.subplots(figsize=(2.0, 1.5))
        ax.set(xlim=(0, 1), ylim=(0, 1))
        (dot,) = ax.plot([0.1], [0.1], "o")
        moved = []
        html = plotting.animation(fig, lambda i: moved.append(i) or dot.set_data([0.1 + 0.2 * i], [0.5]), 5,
                                  alt='a dot "moving" right').data
    frames = _frames(html)
    assert len(frames) == 5 and sorted(set(moved)) == [0, 1, 2, 3, 4]
    assert len(set(frames)) == 5  # every frame differs: update() drew each one
    size = Image.open(io.BytesIO(frames[0])).size
    assert size == (round(2.0 * plotting.ANIMATION_DPI), round(1.5 * plotting.ANIMATION_DPI))
    assert re.search(r'alt="a dot &quot;moving&quot; right" [^>]*id="_anim_img', html)  # escaped, on the player's image
    assert "http://" not in html and "https://" not in html  # nothing fetched from another machine
    assert not plt.fignum_exists(fig.number)  # closed: the chapter shows the player only


@pytest.mark.parametrize("kw, name", [(dict(frames=1), "frames"), (dict(frames=2.0), "frames"),
                                      (dict(alt=" "), "alt"), (dict(interval=0), "interval")])
def test_animation_refuses_bad_arguments(kw, name):
    fig, ax = plt.subplots()
    args = dict(frames=3, alt="a picture") | kw
    with pytest.raises(ValueError, match=name):
        plotting.animation(fig, lambda i: None, args.pop("frames"), **args)
    plt.close(fig)


def test_a_chapter_figure_records_its_smallest_text_in_the_png():
    """The PNG a chapter's kernel shows carries the height of the figure's smallest text in its own
    pixels: the font size set here (7 pt, a legend's) at the retina PNG's dpi (twice DPI), over 72
    points an inch; read back by Pillow's PNG reader, not by the code that wrote it."""
    import io

    from PIL import Image

    def draw(ax):
        ax.plot([0, 1], [0, 1], label="a line")
        ax.legend(fontsize=7)

    png, _ = _shown_in_ipython(draw)
    image = Image.open(io.BytesIO(png))
    assert float(image.text[plotting.TEXT_KEY]) == pytest.approx(7 * 2 * plotting.DPI / 72, abs=0.006)


def test_smallest_text_bad_input():
    with pytest.raises(ValueError, match="^fig:"):
        plotting.smallest_text_pt("not a figure")
    fig, _ = plt.subplots()
    with pytest.raises(ValueError, match="^dpi:"):
        plotting.png_metadata(fig, 0)
    plt.close(fig)


def test_an_animation_records_its_smallest_text_on_its_picture():
    """The player's picture carries the height of the figure's smallest text in a frame's pixels: the
    tick labels set here to 6 points, at ANIMATION_DPI, over 72 points an inch."""
    import re

    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.tick_params(labelsize=6)
    ax.set_title("a dot", fontsize=11)
    (dot,) = ax.plot([0.1], [0.5], "o")
    html = plotting.animation(fig, lambda i: dot.set_data([0.1 + 0.4 * i], [0.5]), 2, alt="a dot").data
    found = re.findall(r'<img alt="a dot" data-mfattn-text-px="([0-9.]+)"', html)
    assert len(found) == 1 and float(found[0]) == pytest.approx(6 * plotting.ANIMATION_DPI / 72, abs=0.006)


def test_flow_animation_plays_one_frame_per_kept_measure_and_refuses_a_single_one():
    import numpy as np
    import torch

    g = torch.Generator().manual_seed(0)
    frames = {t: torch.randn(4, 6, generator=g, dtype=torch.float64) for t in (0.0, 0.5, 1.0, 2.0)}
    t = np.linspace(0.0, 2.0, 9)
    html = plotting.flow_animation(frames, t, {"a": np.exp(-t), "b": np.exp(-2 * t)}, marks=torch.ones(2, 6,
                                   dtype=torch.float64), mark_label="marks", alt="four dots moving")
    assert html.data.count("data:image/png;base64,") == 4 and 'alt="four dots moving"' in html.data
    with pytest.raises(ValueError, match="frames"):
        plotting.flow_animation({0.0: frames[0.0]}, t, {"a": np.exp(-t)}, alt="x")
    with pytest.raises(ValueError, match="curves"):
        plotting.flow_animation(frames, t, {"a": np.exp(-t)[:3]}, alt="x")


def test_label_125_labels_one_two_and_five_times_each_power():
    fig, ax = plt.subplots()
    ax.loglog([1e-3, 6e-3], [1.0, 2.0])
    plotting.label_125(ax.xaxis)
    fig.canvas.draw()
    shown = [lab.get_text() for lab in ax.xaxis.get_ticklabels() if lab.get_text()]
    assert any("2" in s and "10" in s for s in shown) and any("5" in s and "10" in s for s in shown)
    plt.close(fig)
    with pytest.raises(ValueError, match="axis"):
        plotting.label_125(ax)


def test_spectrum_panel_draws_both_spectra_centred_with_every_other_decade_labelled():
    fig, ax = plotting.panels(1)
    whole, part = [-2e-3, 0.0, 0.0, 0.5, 30.0], [-2e-3, 0.5, 30.0]
    plotting.spectrum_panel(ax, whole, part, linthresh=1e-4, title="H", labels=("a", "b"))
    circles, crosses = ax.get_lines()[:2]
    assert list(circles.get_xdata()) == [0, 1, 2, 3, 4] and list(circles.get_ydata()) == whole
    assert list(crosses.get_xdata()) == [1.0, 2.0, 3.0] and list(crosses.get_ydata()) == part  # centred: (5 - 3) / 2
    assert ax.get_yscale() == "symlog" and ax.get_ylim() == (3 * -2e-3, 3 * 30.0)
    # decades from 10^floor(log10 90) = 10 down by two: 10, 0.1, 1e-3 (then 1e-5, inside the linear range)
    assert [float(y) for y in ax.get_yticks()] == [-1e-3, 0.0, 1e-3, 0.1, 10.0]
    with pytest.raises(ValueError, match="linthresh"):
        plotting.spectrum_panel(ax, whole, part, linthresh=0.0, title="H")
    with pytest.raises(ValueError, match="part"):
        plotting.spectrum_panel(ax, part, whole, linthresh=1e-4, title="H")
    plt.close(fig)


def test_ticks_at_puts_exactly_the_given_ticks_and_no_minor_ones():
    fig, ax = plt.subplots()
    ax.loglog([0.5, 8.0], [1.0, 2.0])
    plotting.ticks_at(ax.xaxis, [0.5, 1.0, 4.0])
    fig.canvas.draw()
    assert list(ax.get_xticks()) == [0.5, 1.0, 4.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.5", "1", "4"]
    assert len(ax.xaxis.get_minorticklocs()) == 0
    with pytest.raises(ValueError, match="^labels"):
        plotting.ticks_at(ax.xaxis, [1.0], ["a", "b"])
    with pytest.raises(ValueError, match="^axis"):
        plotting.ticks_at(ax, [1.0])
    plt.close(fig)


def test_twin_y_and_legend_entries_join_a_panel_and_its_twin():
    fig, ax = plt.subplots()
    ax.plot([0, 1], label="a")
    twin = plotting.twin_y(ax, "right", color="C3")
    twin.plot([1, 0], label="b")
    assert not any(line.get_visible() for line in twin.get_ygridlines())
    assert twin.yaxis.label.get_color() == "C3" and twin.yaxis.get_label_position() == "right"
    handles, labels = plotting.legend_entries(ax, twin)
    assert labels == ["a", "b"] and [h.get_label() for h in handles] == labels
    with pytest.raises(ValueError, match="^axes"):
        plotting.legend_entries()
    with pytest.raises(ValueError, match="^ax"):
        plotting.twin_y("x", "right")
    plt.close(fig)


def test_mean_errorbar_draws_means_and_standard_errors_of_a_plain_loop():
    import numpy as np

    rng = np.random.default_rng(0)
    x = np.array([1.0, 2.0, 4.0, 8.0])
    s = rng.normal(0.1, 1.0, size=(4, 7))
    s[1] -= 5.0  # a negative mean, left out on a log axis
    fig, ax = plt.subplots()
    bars = plotting.mean_errorbar(ax, x, s, positive=True)
    drawn = bars.lines[0].get_xydata()
    expected = []
    for i in range(4):  # oracle: plain loops for the mean and the standard error
        m = sum(s[i]) / 7
        se = math.sqrt(sum((v - m) ** 2 for v in s[i]) / 7) / math.sqrt(7)
        if m > 0:
            expected.append((x[i], m, min(se, 0.99 * m)))
    assert drawn[:, 0].tolist() == [e[0] for e in expected]
    assert drawn[:, 1] == pytest.approx([e[1] for e in expected], rel=1e-12)
    seg = bars.lines[2][0].get_segments()  # the vertical bars: from mean - err to mean + err
    assert [b[1, 1] - b[0, 1] for b in seg] == pytest.approx([2 * e[2] for e in expected], rel=1e-12)
    with pytest.raises(ValueError, match="^samples"):
        plotting.mean_errorbar(ax, x, s[:2])
    with pytest.raises(ValueError, match="^ddof"):
        plotting.mean_errorbar(ax, x, s, ddof=-1)
    plt.close(fig)
