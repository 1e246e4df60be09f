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


def test_animation_draws_each_frame_once_with_the_layout_of_frame_0(monkeypatch):
    """Every frame the player holds equals, pixel for pixel, a still of the figure drawn here without
    the animation machinery: a new figure, frame 0 drawn for its layout, the layout kept, then frame
    i drawn. FuncAnimation's own redraw after each update is skipped: the figure is drawn twice per
    frame (the writer's layout pass, which no longer moves anything, and its rendering) where it was
    drawn three times, and the layout is computed once or twice in all, not at every drawing, so the
    axes stay where frame 0 put them, whatever the clock says."""
    import io

    import numpy as np
    from matplotlib.layout_engine import ConstrainedLayoutEngine
    from PIL import Image

    def build():
        fig, ax = plt.subplots(figsize=(2.4, 1.6))
        ax.set(xlim=(0, 1), ylim=(0, 1))
        (dot,) = ax.plot([], [], "o")
        clock = ax.set_title("")

        def update(i):
            dot.set_data([0.1 + 0.2 * i], [0.5])
            clock.set_text(f"t = {10.0 ** i:g}")
        return fig, ax, update

    calls = {"layout": 0}

    def counted(name, real):
        def call(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        return call

    with matplotlib.rc_context(plotting.STYLE):
        fig, ax, update = build()
        boxes = []
        fig.canvas.mpl_connect("draw_event", lambda e: boxes.append(ax.get_position().bounds))
        with monkeypatch.context() as m:
            m.setattr(ConstrainedLayoutEngine, "execute", counted("layout", ConstrainedLayoutEngine.execute))
            frames = _frames(plotting.animation(fig, update, 4, alt="a dot").data)
        stills = []
        for i in range(4):
            f, _, u = build()
            u(0)
            f.canvas.draw()
            f.set_layout_engine("none")
            u(i)
            buf = io.BytesIO()
            f.savefig(buf, format="png", dpi=plotting.ANIMATION_DPI, bbox_inches=None)
            plt.close(f)
            stills.append(np.asarray(Image.open(buf)))
    assert len(frames) == 4
    assert calls["layout"] <= 2 and len(boxes) <= 2 * 4 + 2, (calls, len(boxes))
    assert len(set(boxes[1:])) == 1  # from frame 0's drawing on, the axes never moved
    for frame, still in zip(frames, stills):
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(frame))), still)


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


# ------------------------------------------------- helpers of chapter 06's figures
def test_mean_and_range_draws_each_columns_mean_and_its_band_against_a_plain_loop():
    """The line's heights are the columns' means and the band runs from each column's smallest to its
    largest sample, all computed here by a loop over the samples."""
    import numpy as np

    x, samples = [1.0, 2.0, 4.0], [[3, 1, 2], [5], [7, 9]]
    fig, ax = plotting.panels(1)
    line = plotting.mean_and_range(ax, x, samples, "s--", color="C3", label="c", ms=4)
    means, lows, highs = [], [], []
    for col in samples:
        total, lo, hi = 0, col[0], col[0]
        for v in col:
            total, lo, hi = total + v, min(lo, v), max(hi, v)
        means.append(total / len(col)), lows.append(lo), highs.append(hi)
    assert list(line.get_xdata()) == x and list(line.get_ydata()) == means
    assert line.get_color() == "C3" and line.get_linestyle() == "--" and line.get_marker() == "s"
    (band,) = ax.collections
    vertices = {tuple(v) for v in band.get_paths()[0].vertices}
    assert all((xi, lo) in vertices and (xi, hi) in vertices for xi, lo, hi in zip(x, lows, highs))
    assert np.allclose(band.get_facecolor()[0][:3], matplotlib.colors.to_rgb("C3")) and band.get_alpha() == 0.1
    with pytest.raises(ValueError, match="^samples"):
        plotting.mean_and_range(ax, x, samples[:2])
    with pytest.raises(ValueError, match="^samples"):
        plotting.mean_and_range(ax, x, [[1], [], [2]])
    plt.close(fig)


def test_angle_heatmap_leaves_empty_bins_blank_and_rows_top_down():
    """Every zero count is masked (blank) and every other one shown with its value; row 0 is at the top;
    the separating lines lie between the rows named; the angle ticks are the multiples of pi/2 with the
    two ends (one point of the circle) unlabelled; the colour bar under it keeps the ticks within its scale."""
    import numpy as np
    from matplotlib.colors import LogNorm

    g = np.random.default_rng(1)
    counts = g.integers(0, 4, size=(5, 8))
    edges = np.linspace(-np.pi, np.pi, 9)
    fig, ax = plotting.panels(2)
    mesh = plotting.angle_heatmap(ax[0], edges, counts, norm=LogNorm(0.5, 40.0), between=(2, 4),
                                  labels=list("abcde"), labels_right=True)
    shown = mesh.get_array()
    for r in range(5):
        for c in range(8):
            assert bool(np.ma.getmaskarray(shown)[r, c]) == (counts[r, c] == 0)
            assert counts[r, c] == 0 or shown[r, c] == counts[r, c]
    assert ax[0].get_ylim() == (4.5, -0.5)
    assert sorted(line.get_ydata()[0] for line in ax[0].get_lines()) == [1.5, 3.5]
    assert [float(t) for t in ax[0].get_xticks()] == [-np.pi, -np.pi / 2, 0.0, np.pi / 2, np.pi]
    assert [t.get_text() for t in ax[0].get_xticklabels()][::4] == ["", ""]
    assert [t.get_text() for t in ax[0].get_yticklabels()] == list("abcde")
    assert ax[0].yaxis.get_ticks_position() == "right"
    cb = plotting.colorbar_below(fig, mesh, ax, label="per bin")
    assert [t.get_text() for t in cb.ax.get_xticklabels()] == ["1", "3", "10", "30"]  # 100 > 40
    assert isinstance(cb.ax.xaxis.get_minor_locator(), matplotlib.ticker.NullLocator)  # no minor ticks
    with pytest.raises(ValueError, match="^counts"):
        plotting.angle_heatmap(ax[1], edges[:-1], counts)
    with pytest.raises(ValueError, match="^labels"):
        plotting.angle_heatmap(ax[1], edges, counts, labels=["a"])
    with pytest.raises(ValueError, match="^mappable"):
        plotting.colorbar_below(fig, ax[1].plot([0, 1])[0], ax, label="x")
    plt.close(fig)


def test_circle_animation_draws_each_frames_particles_and_clock(monkeypatch):
    """The frame function puts every system's dots exactly at its particles of that frame and writes
    that frame's clock (the identity: what is drawn is what was given); the player holds every frame."""
    import numpy as np

    g = np.random.default_rng(2)
    a = g.uniform(-np.pi, np.pi, size=(4, 3, 7))
    frames = np.stack([np.cos(a), np.sin(a)], axis=-1)
    clock = [f"t = {k}" for k in range(4)]
    seen = {}
    real = plotting.animation

    def spy(fig, update, n, **kw):
        seen.update(fig=fig, update=update, n=n)
        return real(fig, update, n, **kw)

    monkeypatch.setattr(plotting, "animation", spy)
    html = plotting.circle_animation(frames, ["a", "b", "c"], colors=["C0", "C3", "C0"], clock=clock, alt="dots")
    assert html.data.count("data:image/png;base64,") == 4 and seen["n"] == 4
    axes = seen["fig"].axes
    assert [ax.get_title() for ax in axes] == ["a", "b", "c"]
    for i in (0, 3, 1):
        seen["update"](i)
        for j, ax in enumerate(axes):
            dots = ax.get_lines()[1]
            assert np.array_equal(dots.get_xdata(), frames[i, j, :, 0])
            assert np.array_equal(dots.get_ydata(), frames[i, j, :, 1])
        assert seen["fig"]._suptitle.get_text() == clock[i]
    for bad, name in ((dict(frames=frames[..., :1]), "frames"), (dict(clock=clock[:3]), "clock"),
                      (dict(colors=["C0"]), "titles, colors")):
        kw = dict(frames=frames, clock=clock, colors=["C0"] * 3) | bad
        with pytest.raises(ValueError, match=f"^{name}"):
            plotting.circle_animation(kw.pop("frames"), ["a", "b", "c"], alt="x", **kw)


def test_hemispheres_projects_each_point_onto_its_hemispheres_disc():
    """Orthographic projection written out: a point with z > 0 lands at (x - gap, y), one with z <= 0 at
    (gap - x, y) (seen from below); each lies within its unit disc; the disc areas grow with the masses
    as 30 + 500 m; the crosses are the directions and their antipodes, split by the sign of z."""
    import numpy as np

    g = np.random.default_rng(3)
    c = g.normal(size=(9, 3))
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    m = g.dirichlet(np.ones(9))
    dirs = g.normal(size=(2, 3))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    fig, ax = plotting.panels(1)
    plotting.hemispheres(ax, c, m, directions=dirs, gap=1.1)
    upper, lower = ax.collections
    expect_up = [(x - 1.1, y) for x, y, z in c if z > 0]
    expect_down = [(1.1 - x, y) for x, y, z in c if z <= 0]
    assert np.allclose(upper.get_offsets(), expect_up, atol=1e-15)
    assert np.allclose(lower.get_offsets(), expect_down, atol=1e-15)
    for (px, py), centre in [(p, -1.1) for p in expect_up] + [(p, 1.1) for p in expect_down]:
        assert (px - centre) ** 2 + py ** 2 <= 1 + 1e-12
    assert np.allclose(np.concatenate([upper.get_sizes(), lower.get_sizes()]),
                       [30 + 500 * w for w, z in zip(m, c[:, 2]) if z > 0] + [30 + 500 * w for w, z in zip(m, c[:, 2])
                                                                             if z <= 0])
    crosses = [line for line in ax.get_lines() if line.get_marker() == "x"]
    assert len(crosses) == 4  # every direction and its antipode, once
    pts = sorted((float(line.get_xdata()[0]), float(line.get_ydata()[0])) for line in crosses)
    want = sorted([(v[0] - 1.1, v[1]) if v[2] > 0 else (1.1 - v[0], v[1]) for v in np.concatenate([dirs, -dirs])])
    assert np.allclose(pts, want, atol=1e-15)
    with pytest.raises(ValueError, match="^centres"):
        plotting.hemispheres(ax, c[:, :2], m)
    with pytest.raises(ValueError, match="^masses"):
        plotting.hemispheres(ax, c, m[:3])
    with pytest.raises(ValueError, match="^directions"):
        plotting.hemispheres(ax, c, m, directions=dirs[:, :2])
    plt.close(fig)


# ------------------------------------------------- helpers of chapter 01's figures
def test_max_errorbar_draws_the_best_run_with_a_bar_down_to_the_worst_against_a_plain_loop():
    import numpy as np

    rng = np.random.default_rng(1)
    x = np.array([2.0, 4.0, 8.0])
    s = rng.uniform(1.0, 5.0, size=(3, 4))
    fig, ax = plt.subplots()
    bars = plotting.max_errorbar(ax, x, s, marker="o", capsize=2)
    best = [max(row) for row in s.tolist()]  # oracle: plain loops over the runs
    worst = [min(row) for row in s.tolist()]
    assert bars.lines[0].get_ydata().tolist() == best
    seg = bars.lines[2][0].get_segments()
    assert [b[1, 1] for b in seg] == pytest.approx(best, rel=1e-15)  # nothing above the best
    assert [b[0, 1] for b in seg] == pytest.approx(worst, rel=1e-15)
    with pytest.raises(ValueError, match="^samples"):
        plotting.max_errorbar(ax, x, s[:2])
    plt.close(fig)


def test_style_handles_label_one_line_per_style_in_order():
    h = plotting.style_handles({"measured": dict(color="0.4", marker="o", mfc="none", ls="none"),
                                "closed form": dict(color="k", lw=0.8)})
    assert [x.get_label() for x in h] == ["measured", "closed form"]
    assert (h[0].get_marker(), h[0].get_linestyle(), h[0].get_markerfacecolor()) == ("o", "None", "none")
    assert (h[1].get_color(), h[1].get_linewidth()) == ("k", 0.8)
    for bad in ({}, {"measured": "o"}, [("measured", {})]):
        with pytest.raises(ValueError, match="^styles"):
            plotting.style_handles(bad)
