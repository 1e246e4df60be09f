"""One plotting style for every chapter's figures.

The book's text column is about 690 px wide at a 1280 px window. A figure made by
:func:`panels` is :data:`COLUMN_WIDTH` inches wide at :data:`DPI` dots per inch, so it is shown at
nearly its own size, and its fonts (:data:`STYLE`) read like the body text's small print. At
most two panels share a row; more panels wrap onto further rows, and an odd last panel takes a
whole row. Chapters call :func:`use` once
and draw every figure through :func:`panels`.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["COLUMN_WIDTH", "DPI", "STYLE", "panels", "use"]

COLUMN_WIDTH = 6.9  # inches: the book's column at DPI
DPI = 100

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

    Updates ``matplotlib.rcParams`` in place, for every figure made afterwards.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from mfattn import plotting
    >>> rc = matplotlib.rcParams
    >>> with matplotlib.rc_context():  # restores the defaults on leaving
    ...     plotting.use()
    ...     rc["font.size"], rc["figure.dpi"] == plotting.DPI
    (10.5, True)
    """
    import matplotlib as mpl

    mpl.rcParams.update(STYLE)


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
    >>> from mfattn.plotting import panels
    >>> fig, axes = panels(3, height=2.5)
    >>> axes.shape, [round(float(v), 2) for v in fig.get_size_inches()]
    ((3,), [6.9, 5.0])
    >>> plt.close(fig)
    """
    import matplotlib.pyplot as plt

    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected a positive number of panels, got {n!r}")
    if not (height > 0 and width > 0):
        raise ValueError(f"height, width: expected positive sizes in inches, got {height!r}, {width!r}")
    if n == 1:
        fig, ax = plt.subplots(figsize=(width, height))
        return fig, ax
    rows = math.ceil(n / 2)
    fig = plt.figure(figsize=(width, height * rows))
    grid = fig.add_gridspec(rows, 2)
    axes = []
    for i in range(n):
        r, c = divmod(i, 2)
        spec = grid[r, :] if (i == n - 1 and n % 2) else grid[r, c]
        share = {}
        if axes and sharex:
            share["sharex"] = axes[0]
        if axes and sharey:
            share["sharey"] = axes[0]
        axes.append(fig.add_subplot(spec, **share))
    return fig, np.array(axes)
