"""One plotting style for every chapter's figures.

A chapter's output area is 672 px wide at a 1280 px window (measured in Chromium). A figure made by
:func:`panels` is :data:`COLUMN_WIDTH` inches wide at :data:`DPI` dots per inch, 660 px, and the
tight bounding box adds about 12 px of margin, so it is shown at its own size, not shrunk, and its
fonts (:data:`STYLE`) read like the body text's small print. At
most two panels share a row; more panels wrap onto further rows, and an odd last panel takes a
whole row. Chapters call :func:`use` once
and draw every figure through :func:`panels`. :func:`animation` turns a figure and a frame
function into a moving picture that plays in the page with nothing fetched from another machine.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["ANIMATION_DPI", "COLUMN_WIDTH", "DPI", "STYLE", "TEXT_KEY", "angle_heatmap", "animation",
           "circle_animation", "colorbar_below", "flow_animation", "hemispheres", "label_125", "legend_entries",
           "max_errorbar", "mean_and_range", "mean_errorbar", "panels", "png_metadata", "smallest_text_pt",
           "spectrum_panel", "style_handles", "ticks_at", "twin_y", "use"]

COLUMN_WIDTH = 6.6  # inches: the book's output area at DPI, less the tight bounding box's margin
DPI = 100
#: Dots per inch of an animation's frames: every frame is a PNG inside the page, so frames are
#: drawn coarser than still figures to keep a chapter page within a few megabytes.
ANIMATION_DPI = 80

#: The keyword of the PNG text chunk in which a figure records the height of its smallest text, in the
#: PNG's own pixels (font size in points times the drawing's dots per inch over 72). The book checker
#: (``python -m mfattn check-html``) reads it and scales it by the size the page shows the figure at.
TEXT_KEY = "mfattn smallest text px"
#: The smallest a figure's text may be shown, in CSS px (the body text is 16 px, a figure's tick labels
#: about 13 on a desktop): the book checker holds every page to it at 1280 px and on a phone, and on a
#: phone the book widens a figure to keep it (book/_ext/mfattn_book.py, ``phone_widths``).
TEXT_PX = 8
#: The angles at which a drawn circle is sampled (the unit circles of :func:`circle_animation`, :func:`hemispheres`).
_TURN = np.linspace(0, 2 * np.pi, 200)

STYLE = {
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "figure.figsize": (COLUMN_WIDTH, 3.4),
    "figure.constrained_layout.use": True,
    "font.size": 10.5,
    "axes.titlesize": 10.5,
    "axes.labelsize": 10.5,
    "xtick.labelsize": 9.5,
    "ytick.labelsize": 9.5,
    "legend.fontsize": 9,
    "legend.framealpha": 0.85,
    "legend.borderaxespad": 0.3,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "lines.linewidth": 1.5,
    "lines.markersize": 5,
}


def use() -> None:
    """Apply :data:`STYLE` to matplotlib's defaults (the chapters call it once, after their imports).

    Updates ``matplotlib.rcParams`` in place, for every figure made afterwards. Inside IPython (a
    chapter's kernel) figures are also shown as "retina" PNGs: drawn at twice :data:`DPI`, with
    output metadata that halves their displayed size, so a page lays them out as before and a
    high-density screen (a phone, a laptop's) shows them sharp.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from mfattn.companion import plotting
    >>> rc = matplotlib.rcParams
    >>> with matplotlib.rc_context():  # restores the defaults on leaving
    ...     plotting.use()
    ...     rc["font.size"], rc["figure.dpi"] == plotting.DPI
    (10.5, True)
    """
    import matplotlib as mpl

    mpl.rcParams.update(STYLE)
    try:
        from IPython import get_ipython
    except ImportError:  # matplotlib alone: the style is all there is to apply
        return
    if (shell := get_ipython()) is not None:
        from matplotlib.figure import Figure
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("retina")
        shell.display_formatter.formatters["image/png"].for_type(Figure, _retina_png)


def _retina_png(fig):
    """IPython's retina PNG of ``fig`` (drawn at twice its dpi), with :func:`png_metadata` inside."""
    from IPython.core.pylabtools import retina_figure

    return retina_figure(fig, base64=True, metadata=png_metadata(fig, 2 * fig.dpi))


def smallest_text_pt(fig) -> float:
    """The font size, in points, of the smallest non-empty visible text of ``fig`` (titles, labels,
    tick labels, legends, annotations); ``inf`` for a figure without text. The figure is drawn once
    (without rendering), as saving it would, so that its tick labels have their text.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.

    Returns
    -------
    float
        The smallest font size in points.

    Raises
    ------
    ValueError
        If ``fig`` is not a matplotlib figure.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from mfattn.companion.plotting import smallest_text_pt
    >>> fig, ax = plt.subplots()
    >>> ax.tick_params(labelsize=9)
    >>> _ = ax.set_title("a title", fontsize=12)
    >>> _ = ax.plot([0, 1], label="a line")
    >>> legend = ax.legend(fontsize=6.5)
    >>> smallest_text_pt(fig)
    6.5
    >>> legend.set_visible(False)
    >>> smallest_text_pt(fig)
    9.0
    >>> plt.close(fig)
    """
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    if not isinstance(fig, Figure):
        raise ValueError(f"fig: expected a matplotlib Figure, got {type(fig).__name__}")

    def sizes(artist):  # an invisible artist hides everything under it (a legend, an axes)
        if artist.get_visible():
            if isinstance(artist, Text) and artist.get_text().strip():
                yield artist.get_fontsize()
            for child in artist.get_children():
                yield from sizes(child)

    fig.draw_without_rendering()  # tick labels get their text when drawn
    return float(min(sizes(fig), default=math.inf))


def png_metadata(fig, dpi: float) -> dict:
    """The PNG text chunk a figure carries when drawn at ``dpi``: ``{TEXT_KEY: height}``, the height
    of its smallest text (:func:`smallest_text_pt`) in the PNG's own pixels, ``pt * dpi / 72``.
    Passed as ``metadata=`` to ``savefig`` (PNG); chapters' figures carry it through :func:`use`.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    dpi : float
        The dots per inch it is drawn at (twice :data:`DPI` for a chapter's retina PNG).

    Returns
    -------
    dict
        ``{TEXT_KEY: "12.50"}``, the height in pixels with two decimals, or ``"none"`` for a figure
        without text.

    Raises
    ------
    ValueError
        If ``fig`` is not a figure or ``dpi`` is not positive.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from mfattn.companion.plotting import png_metadata
    >>> fig, ax = plt.subplots()
    >>> _ = ax.set_title("t", fontsize=9)
    >>> ax.tick_params(labelsize=10)
    >>> png_metadata(fig, 200)
    {'mfattn smallest text px': '25.00'}
    >>> plt.close(fig)
    """
    if not dpi > 0:
        raise ValueError(f"dpi: expected a positive number of dots per inch, got {dpi!r}")
    pt = smallest_text_pt(fig)
    return {TEXT_KEY: "none" if math.isinf(pt) else f"{pt * dpi / 72:.2f}"}


def panels(n: int = 1, *, height: float = 3.2, width: float = COLUMN_WIDTH, sharex: bool = False,
           sharey: bool = False):
    """A figure of ``n`` panels at the column's width, at most two a row, each row ``height``
    inches high: ``(fig, axes)`` with ``axes`` a flat array of ``n`` axes in reading order (a single
    axes when ``n == 1``). With an odd ``n > 1`` the last panel takes the whole last row.

    Parameters
    ----------
    n : int, optional
        Number of panels, at least 1; default 1.
    height : float, optional
        Height of each row in inches; default 3.2.
    width : float, optional
        Width of the figure in inches; default :data:`COLUMN_WIDTH`.
    sharex, sharey : bool, optional
        Whether every panel shares its x (y) axis with the first; default ``False``.

    Returns
    -------
    fig : matplotlib.figure.Figure
        The figure, ``width`` by ``height * ceil(n / 2)`` inches.
    axes : matplotlib.axes.Axes or numpy.ndarray of Axes (n,)
        A single axes when ``n == 1``, else the ``n`` axes in reading order.

    Raises
    ------
    ValueError
        If ``n`` is not a positive integer or a size is not positive.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from mfattn.companion.plotting import panels
    >>> fig, axes = panels(3, height=2.5)
    >>> axes.shape, [round(float(v), 2) for v in fig.get_size_inches()]
    ((3,), [6.6, 5.0])
    >>> plt.close(fig)
    """
    import matplotlib.pyplot as plt

    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected a positive number of panels, got {n!r}")
    if not (height > 0 and width > 0):
        raise ValueError(f"height, width: expected positive sizes in inches, got {height!r}, {width!r}")
    if n == 1:
        return plt.subplots(figsize=(width, height))
    rows = math.ceil(n / 2)
    fig = plt.figure(figsize=(width, height * rows))
    grid = fig.add_gridspec(rows, 2)
    axes = []
    for i in range(n):
        first = axes[0] if axes else None
        axes.append(fig.add_subplot(grid[i // 2, :] if (i == n - 1 and n % 2) else grid[divmod(i, 2)],
                                    sharex=first if sharex else None, sharey=first if sharey else None))
    return fig, np.array(axes)


def spectrum_panel(ax, whole, part, *, linthresh: float, title: str, labels=(None, None)) -> None:
    """Two spectra in increasing order on one panel, on a scale that is logarithmic away from zero and
    linear within ``linthresh`` of it: ``whole`` as circles, ``part`` (e.g. a restriction to a subspace,
    fewer eigenvalues) as crosses centred under it. Zero and every other decade are labelled, so that
    the labels do not crowd (chapter 05's spectra of the Hessians).

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The panel.
    whole, part : array_like or Tensor (n,) and (m,)
        The two spectra, ascending, ``m <= n``.
    linthresh : float
        The half-width of the linear range around zero, > 0.
    title : str
        The panel's title.
    labels : (str or None, str or None)
        The legend labels of the circles and the crosses.

    Returns
    -------
    None

    Raises
    ------
    ValueError
        If ``linthresh`` is not positive or ``part`` is longer than ``whole``.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from mfattn.companion.plotting import panels, spectrum_panel
    >>> fig, ax = panels(1)
    >>> spectrum_panel(ax, [-1.0, 0.0, 0.0, 10.0], [-1.0, 10.0], linthresh=1e-4, title="H")
    >>> ax.get_yscale(), [float(y) for y in ax.get_yticks()]
    ('symlog', [-0.1, -0.001, 0.0, 0.001, 0.1, 10.0])
    >>> plt.close(fig)
    """
    e, ep = (np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=np.float64) for x in (whole, part))
    if not linthresh > 0:
        raise ValueError(f"linthresh: expected a positive width, got {linthresh!r}")
    if ep.size > e.size:
        raise ValueError(f"part: expected at most {e.size} eigenvalues, got {ep.size}")
    ax.plot(np.arange(e.size), e, "o", mfc="none", label=labels[0])
    ax.plot(np.arange(ep.size) + (e.size - ep.size) / 2, ep, "x", label=labels[1])
    ax.axhline(0, color="k", lw=0.6)
    ax.set_yscale("symlog", linthresh=linthresh)
    top, bottom = float(max(e.max(), ep.max())), float(min(e.min(), ep.min()))
    ax.set_ylim(3 * bottom if bottom < -linthresh else -linthresh, 3 * top)
    # label 0 and every other decade outside the linear range
    decades = [10.0 ** k for k in range(int(np.floor(np.log10(3 * max(top, -bottom)))),
                                        int(np.ceil(np.log10(linthresh))) - 1, -2)]
    ax.set_yticks(sorted([0.0] + [y for y in decades if y < 3 * top] + [-y for y in decades if -y > 3 * bottom]))
    ax.minorticks_off()
    ax.set(xlabel="index", ylabel="eigenvalue", title=title)

def animation(fig, update, frames: int, *, alt: str, interval: int = 120):
    """A moving picture that plays in the page: ``update(i)`` redraws ``fig`` for frame ``i`` (``0 <=
    i < frames``), and matplotlib's ``FuncAnimation.to_jshtml`` embeds every frame as a PNG in one
    piece of HTML with its own player (play, pause, step, a slider), so the page plays it offline.

    The frames are drawn at :data:`ANIMATION_DPI`; the figure is closed afterwards, so the chapter
    shows the animation only. The layout (constrained layout's placing of the axes) is computed once,
    on frame 0, and kept for every frame: ``update`` moves data and texts of one line (a clock), not
    what the layout depends on (limits, tick labels, the number of a title's lines), and the axes
    then stay still from frame to frame. The player's picture carries the height of the figure's
    smallest text (before the first frame is drawn) in a frame's own pixels (``data-mfattn-text-px``, as
    :func:`png_metadata` computes it), which the book checker reads as it reads a figure's PNG. A
    chapter glues the result (``myst_nb.glue(name, ..., display=False)``) and shows it with a
    ``{glue:figure}`` directive, which numbers and captions it like a figure. Used by chapters 02,
    04 and 06.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure to animate.
    update : callable
        ``update(i)`` draws frame ``i`` on ``fig`` (its return value is ignored).
    frames : int
        The number of frames, at least 2.
    alt : str
        Text describing the picture for readers who cannot see it (the player's image's ``alt``).
    interval : int, optional
        Milliseconds between frames when playing; default 120.

    Returns
    -------
    IPython.display.HTML
        The player, with the frames inside.

    Raises
    ------
    ValueError
        If ``frames`` is not an integer of at least 2, ``alt`` is empty, or ``interval`` is not a
        positive integer.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from mfattn.companion.plotting import animation
    >>> fig, ax = plt.subplots(figsize=(2, 2))
    >>> (dot,) = ax.plot([0.0], [0.0], "o")
    >>> html = animation(fig, lambda i: dot.set_data([i / 3], [i / 3]), 4, alt="a dot moving up")
    >>> html.data.count("data:image/png;base64,"), 'alt="a dot moving up"' in html.data
    (4, True)
    """
    import html as html_escape
    import re

    import matplotlib as mpl
    import matplotlib.pyplot as plt
    from IPython.display import HTML
    from matplotlib.animation import FuncAnimation

    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 2:
        raise ValueError(f"frames: expected an integer number of frames of at least 2, got {frames!r}")
    if not isinstance(alt, str) or not alt.strip():
        raise ValueError("alt: expected a non-empty description of the animation")
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
        raise ValueError(f"interval: expected a positive number of milliseconds, got {interval!r}")
    anim = FuncAnimation(fig, update, frames=frames, interval=interval, blit=False, repeat=False)
    # the height of the figure's smallest text in a frame's own pixels, as a chapter's figures record it
    # in their PNG (png_metadata); the book checker reads it from the player's picture. Taken before the
    # first frame is drawn: a text that only the frames fill in (a clock) is not judged
    text_px = png_metadata(fig, ANIMATION_DPI)[TEXT_KEY]
    try:
        with mpl.rc_context({"savefig.dpi": ANIMATION_DPI}):  # the writer saves at savefig.dpi
            # FuncAnimation.save redraws the canvas after each update (draw_idle), then the writer draws
            # the frame again to save it, each time with a new constrained layout: three passes over
            # the figure per frame, two layouts, and axes that shifted by a pixel from frame to frame.
            # The canvas's own redraw is skipped, and the layout is computed on frame 0 and kept:
            # chapter 04's 43 frames took about 7 s instead of 15 (book/benchmark.md, "Each chapter's
            # paper profile")
            update(0)
            fig.canvas.draw()
            fig.set_layout_engine("none")
            fig.canvas.draw_idle = lambda *args, **kwargs: None
            text = anim.to_jshtml(fps=1000 / interval, default_mode="once")
    finally:
        plt.close(fig)
    # the player links its icon font from a CDN: the book's theme ships Font Awesome, which names
    # the same icons, so the page fetches nothing from another machine
    text = re.sub(r'<link rel="stylesheet"\s+href="https?://[^"]*"\s*>', "", text)
    # the player's <img> has no alt text of its own
    text = text.replace('<img id="_anim_img', f'<img alt="{html_escape.escape(alt.strip())}" '
                        f'data-mfattn-text-px="{text_px}" id="_anim_img', 1)
    return HTML(text)


def label_125(axis) -> None:
    """Label a logarithmic axis that spans little more than a decade at 1, 2 and 5 times each power
    of ten, in scientific notation, and leave its minor ticks unlabelled (a narrow log range otherwise
    shows one label or none). Used by chapter 04.

    Parameters
    ----------
    axis : matplotlib.axis.Axis
        ``ax.xaxis`` or ``ax.yaxis`` of an axes on a log scale.

    Raises
    ------
    ValueError
        If ``axis`` is not a matplotlib axis.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from mfattn.companion.plotting import label_125
    >>> fig, ax = plt.subplots()
    >>> _ = ax.loglog([1e-3, 4e-3], [1.0, 2.0])
    >>> label_125(ax.xaxis)
    >>> fig.canvas.draw()
    >>> [round(float(v), 4) for v in ax.get_xticks() if 1e-3 <= v <= 4e-3]
    [0.001, 0.002]
    >>> plt.close(fig)
    """
    from matplotlib.axis import Axis
    from matplotlib.ticker import LogFormatterSciNotation, LogLocator, NullFormatter

    if not isinstance(axis, Axis):
        raise ValueError(f"axis: expected a matplotlib axis (ax.xaxis, ax.yaxis), got {type(axis).__name__}")
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(LogFormatterSciNotation(labelOnlyBase=False, minor_thresholds=(np.inf, np.inf)))
    axis.set_minor_formatter(NullFormatter())


def flow_animation(frames: dict, times, curves: dict, *, marks=None, mark_label: str = "", alt: str,
                   interval: int = 150):
    r"""A flow of heads, played (:func:`animation`): on the left the atoms of each frame, projected on
    the plane in which the last frame's atoms and the ``marks`` together spread most (their two leading
    principal directions), with the marks as stars; on the right the ``curves`` against ``times`` on
    log-log axes (from the second record on), with a dot at the current time on each, and a clock.
    Used by chapter 04.

    Parameters
    ----------
    frames : dict of float to Tensor (N, d_omega)
        The atoms at each frame's time, at least two frames.
    times : array-like (R,)
        The recording times of the curves, increasing from 0.
    curves : dict of str to array-like (R,)
        Positive curves by their legend labels.
    marks : Tensor (M, d_omega), optional
        Fixed points drawn as stars (a teacher's heads).
    mark_label : str, optional
        Their legend label.
    alt : str
        Text describing the animation (see :func:`animation`).
    interval : int, optional
        Milliseconds between frames; default 150.

    Returns
    -------
    IPython.display.HTML
        The player, with the frames inside.

    Raises
    ------
    ValueError
        If ``frames`` holds fewer than two frames, a curve's length differs from ``times``', or from
        :func:`animation`.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import numpy as np
    >>> import torch
    >>> from mfattn.companion.plotting import flow_animation
    >>> g = torch.Generator().manual_seed(0)
    >>> frames = {t: (1 + t) * torch.randn(5, 4, generator=g, dtype=torch.float64) for t in (0.0, 1.0, 2.0)}
    >>> t = np.linspace(0.0, 2.0, 5)
    >>> html = flow_animation(frames, t, {"risk": np.exp(-t)}, marks=torch.zeros(1, 4, dtype=torch.float64),
    ...                       mark_label="origin", alt="five dots spreading out")
    >>> html.data.count("data:image/png;base64,")
    3
    """
    import matplotlib.pyplot as plt
    import torch

    if not isinstance(frames, dict) or len(frames) < 2:
        raise ValueError("frames: expected a dict of at least two frames, time -> (N, d_omega) tensor")
    t = np.asarray(times, dtype=float)
    if any(np.shape(c) != t.shape for c in curves.values()):
        raise ValueError(f"curves: each curve must have the shape of times, {t.shape}")
    ft = sorted(frames)
    marks = marks if marks is not None else frames[ft[-1]][:0]
    pts = torch.cat([frames[ft[-1]], marks])
    _, _, V = torch.linalg.svd(pts - pts.mean(0), full_matrices=False)
    proj = lambda W: ((W - pts.mean(0)) @ V[:2].T).numpy()  # noqa: E731
    xy = [proj(frames[u]) for u in ft]
    lim = 1.1 * max(np.abs(np.concatenate(xy)).max(), np.abs(proj(marks)).max(initial=0.0))
    fig, ax = plt.subplots(1, 2, figsize=(COLUMN_WIDTH, 3.0), width_ratios=[1, 1.25])
    if len(marks):
        ax[0].scatter(*proj(marks).T, marker="*", s=140, color="C3", label=mark_label)
    (atoms,) = ax[0].plot([], [], "o", ms=5, color="C0", alpha=0.7, mec="none", label="atoms of $\\rho_t$")
    ax[0].set(xlim=(-lim, lim), ylim=(-lim, lim), aspect="equal", xlabel="direction 1", ylabel="direction 2")
    ax[0].legend(loc="lower left", fontsize=8)
    dots = []
    for k, (label, c) in enumerate(curves.items()):
        c = np.asarray(c, dtype=float)
        ax[1].loglog(t[1:], c[1:], color=f"C{k}", label=label)
        dots.append((ax[1].plot([], [], "o", color=f"C{k}")[0], c))
    ax[1].set(xlabel="t")
    ax[1].legend(loc="lower left", fontsize=8)
    clock = ax[0].set_title("")

    def draw(i):
        atoms.set_data(xy[i][:, 0], xy[i][:, 1])
        j = int(np.argmin(np.abs(t - ft[i])))
        for dot, c in dots:
            dot.set_data([max(t[j], t[1])], [c[max(j, 1)]])
        clock.set_text(f"t = {ft[i]:.4g}")

    return animation(fig, draw, len(ft), interval=interval, alt=alt)


def ticks_at(axis, values, labels=None) -> None:
    """Tick an axis at exactly ``values`` and at nothing else (no minor ticks): every point of a short
    grid on a log axis, rather than the one or two powers of ten it spans. Set the axis's scale first
    (changing it resets the ticks).

    Parameters
    ----------
    axis : matplotlib.axis.Axis
        ``ax.xaxis`` or ``ax.yaxis``.
    values : sequence of float
        Where the ticks go; at least one.
    labels : sequence of str, optional
        Their labels, one per value; default ``f"{v:g}"``.

    Raises
    ------
    ValueError
        Naming ``axis`` when it is not a matplotlib axis, ``values`` when it is empty, or ``labels`` when
        their number differs from that of ``values``.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from mfattn.companion.plotting import ticks_at
    >>> fig, ax = plt.subplots()
    >>> _ = ax.loglog([1, 2, 4], [1, 2, 3])
    >>> ticks_at(ax.xaxis, [1, 2, 4])
    >>> [t.get_text() for t in ax.get_xticklabels()], len(ax.get_xticks(minor=True))
    (['1', '2', '4'], 0)
    >>> plt.close(fig)
    """
    from matplotlib.axis import Axis
    from matplotlib.ticker import NullLocator

    if not isinstance(axis, Axis):
        raise ValueError(f"axis: expected a matplotlib axis (ax.xaxis, ax.yaxis), got {type(axis).__name__}")
    values = list(values)
    if not values:
        raise ValueError("values: expected at least one tick")
    labels = [f"{v:g}" for v in values] if labels is None else list(labels)
    if len(labels) != len(values):
        raise ValueError(f"labels: expected {len(values)} labels, one per value, got {len(labels)}")
    axis.set_ticks(values, labels)
    axis.set_minor_locator(NullLocator())


def twin_y(ax, ylabel: str, *, color=None):
    """A second y axis on the right of ``ax``, labelled ``ylabel`` (in ``color``), without a grid of its
    own, so that the grid lines are those of ``ax`` alone.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The panel.
    ylabel : str
        The label of the right axis.
    color : color, optional
        The label's colour (that of the curves the axis carries); default the style's.

    Returns
    -------
    matplotlib.axes.Axes
        The twin axes; draw the right axis's curves on it.

    Raises
    ------
    ValueError
        Naming ``ax`` when it is not a matplotlib axes.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from mfattn.companion.plotting import twin_y
    >>> fig, ax = plt.subplots()
    >>> twin = twin_y(ax, "logit", color="C3")
    >>> twin.get_ylabel(), twin.yaxis.get_label_position(), twin.get_shared_x_axes().joined(ax, twin)
    ('logit', 'right', True)
    >>> plt.close(fig)
    """
    from matplotlib.axes import Axes

    if not isinstance(ax, Axes):
        raise ValueError(f"ax: expected a matplotlib axes, got {type(ax).__name__}")
    twin = ax.twinx()
    twin.grid(False)
    twin.set_ylabel(ylabel, **({} if color is None else {"color": color}))
    return twin


def legend_entries(*axes) -> tuple[list, list]:
    """The legend handles and labels of several axes, in their order: one legend for a panel and its
    twin (:func:`twin_y`), or for several panels.

    Parameters
    ----------
    *axes : matplotlib.axes.Axes
        At least one.

    Returns
    -------
    handles : list of matplotlib.artist.Artist
    labels : list of str
        Those of ``axes[0]``, then those of ``axes[1]``, ...

    Raises
    ------
    ValueError
        Naming ``axes`` when none is given or one is not a matplotlib axes.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from mfattn.companion.plotting import legend_entries
    >>> fig, ax = plt.subplots()
    >>> _ = ax.plot([0, 1], label="risk")
    >>> twin = ax.twinx()
    >>> _ = twin.plot([1, 0], label="logit (right axis)")
    >>> legend_entries(ax, twin)[1]
    ['risk', 'logit (right axis)']
    >>> plt.close(fig)
    """
    from matplotlib.axes import Axes

    if not axes or not all(isinstance(a, Axes) for a in axes):
        raise ValueError("axes: expected one or more matplotlib axes")
    pairs = [a.get_legend_handles_labels() for a in axes]
    return [h for hs, _ in pairs for h in hs], [lab for _, labs in pairs for lab in labs]


def mean_errorbar(ax, x, samples, *, positive: bool = False, ddof: int = 0, **kwargs):
    """The mean of ``samples`` over its second axis at each ``x``, with bars of one standard error
    (``std / sqrt(n)``).

    With ``positive=True`` (a log axis) only the positive means are drawn, and each bar is cut to
    0.99 of its mean on both sides, so that it stays above zero.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The panel.
    x : array_like (n_x,)
        Abscissae.
    samples : array_like (n_x, n)
        ``n >= 1`` samples at each ``x``.
    positive : bool, default False
        Draw the positive means only, with bars cut as above.
    ddof : int, default 0
        Delta degrees of freedom of the standard deviation (``0``: the plain mean square); ``n > ddof``.
    **kwargs
        Passed to ``ax.errorbar`` (``fmt``, ``color``, ``ms``, ``label``, ...).

    Returns
    -------
    matplotlib.container.ErrorbarContainer

    Raises
    ------
    ValueError
        Naming ``samples`` when it is not two-dimensional with one row per ``x`` and more than ``ddof``
        columns, or ``ddof`` when it is negative.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from mfattn.companion.plotting import mean_errorbar
    >>> fig, ax = plt.subplots()
    >>> bars = mean_errorbar(ax, [1, 2, 3], [[1.0, 3.0], [-1.0, 0.0], [2.0, 2.0]], positive=True)
    >>> bars.lines[0].get_xydata().tolist()  # the negative mean at x = 2 is left out
    [[1.0, 2.0], [3.0, 2.0]]
    >>> plt.close(fig)
    """
    if not (isinstance(ddof, int) and ddof >= 0):
        raise ValueError(f"ddof: expected a non-negative integer, got {ddof!r}")
    x, samples = _rows_per_x(x, samples, ddof, f"n > ddof = {ddof}")
    mean, se = samples.mean(1), samples.std(1, ddof=ddof) / np.sqrt(samples.shape[1])
    if positive:
        keep = mean > 0
        x, mean, se = x[keep], mean[keep], np.minimum(se[keep], 0.99 * mean[keep])
    return ax.errorbar(x, mean, yerr=se, **kwargs)


def mean_and_range(ax, x, samples, fmt: str = "o-", *, color=None, label=None, alpha: float = 0.1, **kwargs):
    """The mean of each column of samples as a line with markers, and their range (smallest to largest)
    as a shaded band of the same colour behind it: a quantity over seeds against a parameter.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The panel.
    x : array_like (K,)
        The parameter.
    samples : sequence of K sequences of numbers
        The samples at each ``x`` (any number at each, at least one).
    fmt : str, optional
        The line's format (``"o-"``, ``"s--"``); default ``"o-"``.
    color : color, optional
        The line's and the band's colour (default: the next of the cycle).
    label : str, optional
        The line's legend label.
    alpha : float, optional
        The band's opacity; default 0.1.
    **kwargs
        Passed on to ``Axes.plot`` (``ms=4``).

    Returns
    -------
    matplotlib.lines.Line2D
        The line of the means.

    Raises
    ------
    ValueError
        If ``samples`` does not have one non-empty sequence per ``x``.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from mfattn.companion.plotting import mean_and_range, panels
    >>> fig, ax = panels(1)
    >>> line = mean_and_range(ax, [1.0, 2.0], [[1, 3], [4]], color="C0", label="counts")
    >>> line.get_ydata().tolist(), ax.get_legend_handles_labels()[1]
    ([2.0, 4.0], ['counts'])
    >>> plt.close(fig)
    """
    x = np.asarray(x, dtype=float)
    samples = [np.asarray(c, dtype=float).ravel() for c in samples]
    if len(samples) != x.size or any(c.size == 0 for c in samples):
        raise ValueError(f"samples: expected {x.size} non-empty sequences, one per x")
    (line,) = ax.plot(x, [np.mean(c) for c in samples], fmt, color=color, label=label, **kwargs)
    ax.fill_between(x, [c.min() for c in samples], [c.max() for c in samples], color=line.get_color(), alpha=alpha)
    return line


def angle_heatmap(ax, edges, counts, *, norm=None, cmap: str = "magma_r", between=(), labels=None,
                  labels_right: bool = False):
    r"""Counts over bins of the angle on the circle, one row per system, as a heat map: rows from the
    top down, empty bins blank, thin grey lines between groups of rows, and the angle ticked at
    :math:`0, \pm\pi/2` (the ends :math:`\pm\pi` are one point of the circle and stay unlabelled, so that
    they do not touch a neighbouring panel's labels).

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The panel.
    edges : array_like (K + 1,)
        The bin edges, from ``-pi`` to ``pi``.
    counts : array_like (R, K)
        The counts of each row's bins (``clusters.angle_histograms``).
    norm : matplotlib.colors.Normalize, optional
        The colour scale (share one across panels, e.g. a ``LogNorm``).
    cmap : str, optional
        The colour map; default ``"magma_r"``.
    between : iterable of int, optional
        Rows before which a separating line is drawn.
    labels : list of str, optional
        The rows' tick labels (``[]`` for none); default: matplotlib's ticks.
    labels_right : bool, optional
        Whether the row labels go on the right; default ``False``.

    Returns
    -------
    matplotlib.collections.QuadMesh
        The heat map (for a colour bar: :func:`colorbar_below`).

    Raises
    ------
    ValueError
        If ``counts`` is not (R, K) with ``K + 1`` edges, or ``labels`` is not one per row.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> import numpy as np
    >>> from mfattn.companion.plotting import angle_heatmap, panels
    >>> fig, ax = panels(1)
    >>> mesh = angle_heatmap(ax, np.linspace(-np.pi, np.pi, 5), [[0, 1, 2, 0], [3, 0, 0, 1]], between=[1],
    ...                      labels=["first", "second"])
    >>> int(mesh.get_array().count()), [float(y) for y in ax.get_ylim()], [t.get_text() for t in ax.get_yticklabels()]
    (4, [1.5, -0.5], ['first', 'second'])
    >>> plt.close(fig)
    """
    edges, counts = np.asarray(edges, dtype=float), np.asarray(counts)
    if counts.ndim != 2 or counts.shape[1] + 1 != edges.size:
        raise ValueError(f"counts: expected (R, {edges.size - 1}) for {edges.size} edges, got {counts.shape}")
    rows = counts.shape[0]
    if labels is not None and len(labels) not in (0, rows):
        raise ValueError(f"labels: expected {rows} labels (or none), got {len(labels)}")
    mesh = ax.pcolormesh(edges, np.arange(rows + 1) - 0.5, np.ma.masked_equal(counts, 0), norm=norm, cmap=cmap)
    ax.grid(False)
    for k in between:
        ax.axhline(k - 0.5, color="0.6", lw=0.6)
    ax.set_ylim(rows - 0.5, -0.5)
    ax.set_xticks([-np.pi, -np.pi / 2, 0, np.pi / 2, np.pi], ["", r"$-\pi/2$", "0", r"$\pi/2$", ""])
    if labels_right:
        ax.yaxis.tick_right()
    if labels is not None:
        ax.set_yticks(range(rows), labels)
    return mesh


def colorbar_below(fig, mappable, ax, *, label: str, ticks=(1, 3, 10, 30, 100)):
    """A colour bar under the panels ``ax``, half their width, ticked as plain numbers at those of
    ``ticks`` that do not exceed the colour scale's top, without minor ticks (a log scale of counts).

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    mappable : matplotlib.cm.ScalarMappable
        What the bar explains (a heat map: :func:`angle_heatmap`).
    ax : matplotlib.axes.Axes or array of Axes
        The panels it sits under.
    label : str
        The bar's label.
    ticks : iterable of float, optional
        Candidate ticks; default 1, 3, 10, 30, 100.

    Returns
    -------
    matplotlib.colorbar.Colorbar

    Raises
    ------
    ValueError
        If ``mappable`` has no colour scale.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from matplotlib.colors import LogNorm
    >>> from mfattn.companion.plotting import colorbar_below, panels
    >>> fig, ax = panels(2)
    >>> mesh = ax[0].pcolormesh([[1.0, 20.0]], norm=LogNorm(0.5, 20.0))
    >>> cb = colorbar_below(fig, mesh, ax, label="tokens per bin")
    >>> [t.get_text() for t in cb.ax.get_xticklabels()], cb.ax.get_xlabel()
    (['1', '3', '10'], 'tokens per bin')
    >>> plt.close(fig)
    """
    if getattr(mappable, "norm", None) is None:
        raise ValueError(f"mappable: expected an artist with a colour scale, got {type(mappable).__name__}")
    cb = fig.colorbar(mappable, ax=ax, location="bottom", shrink=0.5, aspect=30, label=label)
    shown = [t for t in ticks if t <= mappable.norm.vmax]
    cb.set_ticks(shown, labels=[f"{t}" for t in shown])
    cb.ax.minorticks_off()
    return cb


def circle_animation(frames, titles, *, colors, clock, alt: str, interval: int = 150, height: float = 2.3):
    """Particles on the unit circle, played (:func:`animation`): one panel per system, side by side, each
    with the circle and the system's particles as translucent dots (darker where several coincide), and
    a clock above.

    Parameters
    ----------
    frames : array_like (F, B, n, 2)
        The particles of the ``B`` systems at each of ``F`` frames (at least two).
    titles : list of str
        The panels' titles, one per system.
    colors : list of color
        The dots' colour in each panel.
    clock : list of str
        The text above the panels at each frame.
    alt : str
        Text describing the animation (see :func:`animation`).
    interval : int, optional
        Milliseconds between frames; default 150.
    height : float, optional
        The figure's height in inches; default 2.3.

    Returns
    -------
    IPython.display.HTML
        The player, with the frames inside.

    Raises
    ------
    ValueError
        If ``frames`` is not (F, B, n, 2), or ``titles``, ``colors`` or ``clock`` do not match it, or from
        :func:`animation`.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import numpy as np
    >>> from mfattn.companion.plotting import circle_animation
    >>> a = np.linspace(0.0, 1.0, 3)[:, None, None] + np.arange(4)[None, None, :]  # (3 frames, 1 system, 4)
    >>> frames = np.stack([np.cos(a), np.sin(a)], axis=-1)
    >>> html = circle_animation(frames, ["one system"], colors=["C0"], clock=["t = 0", "t = 1", "t = 2"],
    ...                         alt="four dots turning")
    >>> html.data.count("data:image/png;base64,")
    3
    """
    import matplotlib.pyplot as plt

    frames = np.asarray(frames, dtype=float)
    if frames.ndim != 4 or frames.shape[3] != 2:
        raise ValueError(f"frames: expected (F, B, n, 2), got {frames.shape}")
    n_frames, systems = frames.shape[:2]
    if len(titles) != systems or len(colors) != systems:
        raise ValueError(f"titles, colors: expected {systems} of each, one per system")
    if len(clock) != n_frames:
        raise ValueError(f"clock: expected {n_frames} texts, one per frame, got {len(clock)}")
    fig, ax = plt.subplots(1, systems, figsize=(COLUMN_WIDTH, height), squeeze=False)
    dots = []
    for a_, title, color in zip(ax[0], titles, colors):
        a_.plot(np.cos(_TURN), np.sin(_TURN), color="0.8", lw=0.8)
        dots += a_.plot([], [], "o", ms=4, alpha=0.35, color=color, mec="none")
        a_.set(xlim=(-1.15, 1.15), ylim=(-1.15, 1.15), aspect="equal", xticks=[], yticks=[], title=title)
        a_.title.set_fontsize(9)
        a_.grid(False)
    text = fig.suptitle("")

    def draw(i):
        for j, dot in enumerate(dots):
            dot.set_data(frames[i, j, :, 0], frames[i, j, :, 1])
        text.set_text(clock[i])

    return animation(fig, draw, n_frames, interval=interval, alt=alt)


def hemispheres(ax, centres, masses, *, directions=None, gap: float = 1.1) -> None:
    """Points of the sphere :math:`S^2` with masses, in orthographic projection on two discs: the upper
    hemisphere (``z > 0``) seen from above on the left, the lower one seen from below (so its ``x`` is
    mirrored) on the right. Each point is a disc whose area grows with its mass, written beside it;
    ``directions`` are marked by crosses, black at ``+a`` and grey at ``-a``. The panel is set to equal
    aspect, without axes.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The panel.
    centres : array_like (k, 3)
        Unit vectors (cluster centres: ``clusters.cluster_centres``).
    masses : array_like (k,)
        Their masses, in [0, 1].
    directions : array_like (m, 3), optional
        Unit vectors marked with their antipodes (a perceptron's directions).
    gap : float, optional
        The discs' centres lie at ``-gap`` and ``+gap``; default 1.1.

    Returns
    -------
    None

    Raises
    ------
    ValueError
        If ``centres`` or ``directions`` is not (., 3), or ``masses`` is not one per centre.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from mfattn.companion.plotting import hemispheres, panels
    >>> fig, ax = panels(1)
    >>> hemispheres(ax, [[0.6, 0.0, 0.8], [0.6, 0.0, -0.8]], [0.25, 0.75], directions=[[0.0, 0.0, 1.0]])
    >>> notes = [t for t in ax.texts if hasattr(t, "xy")]  # the masses, beside their points
    >>> [t.get_text() for t in notes], [round(float(t.xy[0]), 12) for t in notes]
    (['0.25', '0.75'], [-0.5, 0.5])
    >>> plt.close(fig)
    """
    centres, masses = np.asarray(centres, dtype=float), np.asarray(masses, dtype=float)
    marks = np.asarray(directions if directions is not None else np.zeros((0, 3)), dtype=float)
    if centres.ndim != 2 or centres.shape[1] != 3:
        raise ValueError(f"centres: expected (k, 3), got {centres.shape}")
    if masses.shape != centres.shape[:1]:
        raise ValueError(f"masses: expected one per centre, {centres.shape[0]}, got {masses.shape}")
    if marks.ndim != 2 or marks.shape[1] != 3:
        raise ValueError(f"directions: expected (m, 3), got {marks.shape}")
    for off, up in ((-gap, True), (gap, False)):
        ax.plot(off + np.cos(_TURN), np.sin(_TURN), color="0.6", lw=0.8)
        ax.text(off, -1.22, "z > 0, from above" if up else "z < 0, from below", ha="center", va="top", fontsize=8)
        for v, col in [(v, col) for am in marks for v, col in ((am, "k"), (-am, "0.6")) if (v[2] > 0) == up]:
            ax.plot(off + (v[0] if up else -v[0]), v[1], "x", color=col, ms=5, mew=1)
        side = centres[:, 2] > 0 if up else centres[:, 2] <= 0
        xs = centres[side, 0] if up else -centres[side, 0]
        ax.scatter(off + xs, centres[side, 1], s=30 + 500 * masses[side], color="C0", alpha=0.6, edgecolor="k",
                   lw=0.5)
        for x_, y_, m_ in zip(off + xs, centres[side, 1], masses[side]):
            ax.annotate(f"{m_:.2f}", (x_, y_), xytext=(7, 7), textcoords="offset points", fontsize=8)
    ax.set(aspect="equal", xlim=(-2 * gap, 2 * gap), ylim=(-1.45, 1.1))
    ax.axis("off")


def max_errorbar(ax, x, samples, **kwargs):
    """The largest of ``samples`` over its second axis at each ``x`` (the best of several runs), with a bar
    down to the smallest (the worst run) and none above.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The panel.
    x : array_like (n_x,)
        Abscissae.
    samples : array_like (n_x, n)
        ``n >= 1`` values at each ``x`` (one per run).
    **kwargs
        Passed to ``ax.errorbar`` (``fmt``, ``marker``, ``color``, ``ms``, ``capsize``, ``label``, ...).

    Returns
    -------
    matplotlib.container.ErrorbarContainer

    Raises
    ------
    ValueError
        Naming ``samples`` when it is not two-dimensional with one row per ``x`` and at least one column.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from mfattn.companion.plotting import max_errorbar
    >>> fig, ax = plt.subplots()
    >>> bars = max_errorbar(ax, [1, 2], [[1.0, 3.0, 2.0], [4.0, 4.0, 0.5]], marker="o")
    >>> bars.lines[0].get_ydata().tolist(), [s[:, 1].tolist() for s in bars.lines[2][0].get_segments()]
    ([3.0, 4.0], [[1.0, 3.0], [0.5, 4.0]])
    >>> plt.close(fig)
    """
    x, samples = _rows_per_x(x, samples, 0, "n >= 1")
    best = samples.max(1)
    return ax.errorbar(x, best, yerr=np.stack([best - samples.min(1), np.zeros(len(best))]), **kwargs)


def style_handles(styles: dict) -> list:
    """Legend handles that explain line styles rather than curves: one short line per entry, drawn with
    the entry's style (``"measured"`` as open circles, ``"closed form"`` as a thin black line), for a panel
    whose curves are told apart by colour elsewhere. Pass them as ``ax.legend(handles=...)``.

    Parameters
    ----------
    styles : dict of str to dict
        Each legend label, in order, with the ``Line2D`` keywords of its style (``color``, ``marker``,
        ``ls``, ``lw``, ``mfc``, ...).

    Returns
    -------
    list of matplotlib.lines.Line2D
        One handle per entry, labelled.

    Raises
    ------
    ValueError
        Naming ``styles`` when it is not a non-empty dict of label to keyword dict.

    Examples
    --------
    >>> from mfattn.companion.plotting import style_handles
    >>> h = style_handles({"measured": dict(marker="o", ls="none"), "closed form": dict(color="k", lw=0.8)})
    >>> [x.get_label() for x in h], h[0].get_marker(), h[1].get_linewidth()
    (['measured', 'closed form'], 'o', 0.8)
    """
    from matplotlib.lines import Line2D

    if not (isinstance(styles, dict) and styles and all(isinstance(v, dict) for v in styles.values())):
        raise ValueError("styles: expected a non-empty dict of legend label to a dict of Line2D keywords")
    return [Line2D([], [], label=label, **style) for label, style in styles.items()]


def _rows_per_x(x, samples, more_than: int, need: str):
    """``x`` and ``samples`` as arrays (float64 samples), checked to hold one row of more than
    ``more_than`` samples per ``x``; ``need`` says so in the error naming ``samples``."""
    x = np.asarray(x)
    samples = np.asarray(samples, dtype=np.float64)
    if samples.ndim != 2 or samples.shape[0] != x.shape[0] or samples.shape[1] <= more_than:
        raise ValueError(f"samples: expected ({x.shape[0]}, n) with {need}, got {samples.shape}")
    return x, samples
