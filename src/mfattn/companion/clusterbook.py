"""Book glue of chapter 06 (tokens as particles): the table of the comparison with the companion paper's
public code, the sentences the chapter glues into its prose, each quoting the run, and two of its
figures (tokens moving on circles, clusters on the two hemispheres of :math:`S^2`). The measurements
they read are :mod:`mfattn.analysis.clusters`'s."""

from __future__ import annotations

import numpy as np

from ..analysis.clusters import Comparison, DescentMasses, SeedSpread
from .render import print_grid

__all__ = ["print_comparison", "disagreement_sentence", "masses_sentence", "spread_sentence", "by_n_sentence",
           "sphere_descent_sentence", "circle_animation", "sphere_clusters"]


def _check(cmp):
    if not isinstance(cmp, Comparison):
        raise ValueError("cmp: expected a Comparison (mfattn.analysis.clusters.compare_counts)")


def print_comparison(cmp: Comparison) -> None:
    """Print a comparison with the public code: the table of its entries (the public count, our range
    over seeds, ``!`` beyond one cluster), how many entries agree, and the disagreements by setting.

    Parameters
    ----------
    cmp : mfattn.analysis.clusters.Comparison
        The comparison; its settings are the table's rows, its betas the columns.

    Raises
    ------
    ValueError
        Naming ``cmp`` when it is not a Comparison.

    Examples
    --------
    >>> from mfattn.analysis.clusters import CountCell, compare_counts
    >>> from mfattn.companion.clusterbook import print_comparison
    >>> s = ("USA", "ascent", "gelu")
    >>> cells = {(s, b): CountCell("2", [dict(count=2, converged=True)]) for b in (1.0, 5.0)}
    >>> print_comparison(compare_counts(cells, {"counts": {"USA ascent gelu": [2, 5]}, "capped": []}, [1.0, 5.0]))
    setting                          1
    USA ascent gelu          2  2-2
    <BLANKLINE>
    setting                          5
    USA ascent gelu          5  2-2 !
    public count within our seed range +-1: 1/2 atomic settings
      where both codes' runs met the stopping rule; 1/2 over every entry
    disagreements, by setting:
      USA ascent gelu: beta 5
    """
    _check(cmp)
    settings = list(dict.fromkeys(k[0] for k in cmp.agree))
    betas = list(dict.fromkeys(k[1] for k in cmp.agree))
    print_grid(settings, betas, cmp.entry, width=11, label=" ".join)
    print(f"public count within our seed range +-1: {sum(cmp.agree[k] for k in cmp.both)}/{len(cmp.both)} "
          "atomic settings")
    print(f"  where both codes' runs met the stopping rule; {sum(cmp.agree.values())}/{len(cmp.agree)} over "
          "every entry")
    print("disagreements, by setting:")
    for s in settings:
        off = [f"{b:g}" for (s_, b) in cmp.disagreements() if s_ == s]
        if off:
            print(f"  {' '.join(s)}: beta {', '.join(off)}")
    if all(cmp.agree.values()):
        print("  none")


def disagreement_sentence(cmp: Comparison) -> str:
    """A sentence sorting the disagreements of a comparison with the public code by kind
    (:meth:`mfattn.analysis.clusters.Comparison.kinds`).

    Parameters
    ----------
    cmp : mfattn.analysis.clusters.Comparison

    Returns
    -------
    str

    Raises
    ------
    ValueError
        Naming ``cmp`` when it is not a Comparison.

    Examples
    --------
    >>> from mfattn.analysis.clusters import Comparison
    >>> from mfattn.companion.clusterbook import disagreement_sentence
    >>> a, b = (("SA", "descent", "none"), 5.0), (("USA", "ascent", "gelu"), 5.0)
    >>> disagreement_sentence(Comparison({}, {}, {a: False}, [], set(), {a: True}))
    'The one disagreement lies in descent without a perceptron.'
    >>> print(disagreement_sentence(Comparison({}, {}, {a: False, b: False}, [], set(), {a: True, b: True})))
    ... # doctest: +NORMALIZE_WHITESPACE
    Of the 2 disagreements, 1 lies in descent without a perceptron; and 1 in an atomic setting where both
    codes' runs met the stopping rule.
    """
    _check(cmp)
    off, kind = cmp.disagreements(), cmp.kinds()
    if not off:
        return "No entry disagrees."
    text = {"diffuse": "in descent without a perceptron", "relu": "in ReLU descent, with tokens left in the dead zone",
            "capped": "in an atomic setting where a run of either code hit the step cap",
            "converged": "in an atomic setting where both codes' runs met the stopping rule"}
    kinds = [f"{len(kind[k])} {text[k]}" for k in text if kind[k]]
    if len(off) == 1:
        return "The one disagreement lies in " + kinds[0].split(" in ", 1)[1] + "."
    kinds[0] = kinds[0].replace(" in ", " lies in " if kinds[0].startswith("1 ") else " lie in ", 1)
    return f"Of the {len(off)} disagreements, " + ("; ".join(kinds[:-1]) + "; and " if len(kinds) > 1 else "") \
        + kinds[-1] + "."


def masses_sentence(masses: DescentMasses, betas) -> str:
    """What the descent runs with a perceptron on the circle say about Theorem 3.5: whether any ends in
    a single cluster (its second part), and how the heaviest cluster's mass moves with beta.

    Parameters
    ----------
    masses : mfattn.analysis.clusters.DescentMasses
        The runs (:func:`mfattn.analysis.clusters.descent_masses`).
    betas : sequence of float
        The betas of ``masses.by_beta``.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        Naming ``masses`` when it is not a DescentMasses with one mass per beta.

    Examples
    --------
    >>> from mfattn.analysis.clusters import DescentMasses
    >>> from mfattn.companion.clusterbook import masses_sentence
    >>> print(masses_sentence(DescentMasses([{}, {}], 0, [0.5, 0.8]), [1, 50]))  # doctest: +NORMALIZE_WHITESPACE
    No run of descent with a perceptron ends in a single cluster: the second part of Theorem 3.5 holds in
    every run. Its first part, the bound on the mass, does not describe these runs. The heaviest
    cluster's mass *grows* with $\\beta$, from 0.50 at $\\beta=1$ to 0.80 at $\\beta=50$ (printed above).
    """
    if not isinstance(masses, DescentMasses) or len(masses.by_beta) != len(betas):
        raise ValueError("masses: expected a DescentMasses with one mass per beta")
    single, h = masses.single, masses.by_beta
    return (("No run of descent with a perceptron ends in a single cluster: the second part of Theorem 3.5 holds "
             "in every run. " if single == 0 else
             f"{single} of {len(masses.systems)} descent runs with a perceptron end in a single cluster, against "
             "the second part of Theorem 3.5. ")
            + "Its first part, the bound on the mass, does not describe these runs. The heaviest cluster's mass "
            + ("*grows* with $\\beta$, from " if h[-1] > h[0] else "goes from ")
            + f"{h[0]:.2f} at $\\beta={betas[0]:g}$ to {h[-1]:.2f} at $\\beta={betas[-1]:g}$ (printed above).")


def spread_sentence(spread: SeedSpread) -> str:
    """How much the count varies over the initial configurations, in the atomic settings and in ReLU
    descent.

    Parameters
    ----------
    spread : mfattn.analysis.clusters.SeedSpread

    Returns
    -------
    str

    Raises
    ------
    ValueError
        Naming ``spread`` when it is not a SeedSpread.

    Examples
    --------
    >>> from mfattn.analysis.clusters import SeedSpread
    >>> from mfattn.companion.clusterbook import spread_sentence
    >>> spread_sentence(SeedSpread({}, 1, 1, 4))  # doctest: +NORMALIZE_WHITESPACE
    'Over the seeds, the count of an atomic setting (ascent, and descent with GeLU) varies by at most 1
    cluster where every run met the stopping rule. At the stopping rule the perceptron fixes the basins.
    The ReLU descent counts vary by up to 4, because tokens in the dead zone stay where the repulsion
    leaves them.'
    """
    if not isinstance(spread, SeedSpread):
        raise ValueError("spread: expected a SeedSpread (mfattn.analysis.clusters.seed_spread)")
    conv, cap, relu = spread.converged, spread.capped, spread.relu_descent
    return (f"Over the seeds, the count of an atomic setting (ascent, and descent with GeLU) varies by at most {conv} "
            f"cluster{'' if conv == 1 else 's'} where every run met the stopping rule"
            + (f", and by up to {cap} where a run hit the step cap. " if cap > conv else ". ")
            + ("At the stopping rule the perceptron fixes the basins. " if conv <= 1 else "")
            + f"The ReLU descent counts vary by up to {relu}"
            + (", because tokens in the dead zone stay where the repulsion leaves them." if relu > conv else "."))


def by_n_sentence(by_n: dict, public_count: int, failed: bool) -> str:
    """What the counts of SA descent with GeLU at the largest beta do as the number of tokens grows
    (:meth:`mfattn.analysis.clusters.TokenSweep.count_at_n`), against the public code's count at
    ``n = 200``.

    The count grows with ``n`` when the lower median over the configurations rises strictly from each
    ``n`` to the next.

    Parameters
    ----------
    by_n : dict
        ``n -> counts`` over the initial configurations; must hold ``n = 200``.
    public_count : int
        The public code's count at ``n = 200``.
    failed : bool
        Whether the comparison of the atomic settings failed.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        Naming ``by_n`` when it lacks ``n = 200``.

    Examples
    --------
    >>> from mfattn.companion.clusterbook import by_n_sentence
    >>> by_n_sentence({96: [5, 6, 7], 200: [9, 11, 12], 400: [20, 21, 22]}, 10, False)  # doctest: +NORMALIZE_WHITESPACE
    "The count grows with $n$, and at the public code's $n=200$ the two agree within one cluster. So at
    large $\\\\beta$ SA descent with GeLU settles into a configuration whose number of clusters grows with the
    number of tokens, and a count at one $n$ is no prediction for another."
    """
    if 200 not in by_n:
        raise ValueError("by_n: needs the counts at n = 200, the public code's")
    med = [sorted(c)[(len(c) - 1) // 2] for _, c in sorted(by_n.items())]  # the lower median of each n
    grows = all(a < b for a, b in zip(med, med[1:]))
    at200 = min(by_n[200]) - 1 <= public_count <= max(by_n[200]) + 1
    return (("The count grows with $n$" if grows else "The count changes with $n$")
            + (", and at the public code's $n=200$ the two agree within one cluster." if at200 else
               ", and at the public code's $n=200$ the two still differ by more than one cluster.")
            + (" The failed comparison of the atomic settings below is kept: it shows that" if failed else " So")
            + " at large $\\beta$ SA descent with GeLU settles into a configuration whose number of clusters "
            + ("grows with the number of tokens" if grows else "depends on the number of tokens")
            + ", and a count at one $n$ is no prediction for another.")


def sphere_descent_sentence(masses: DescentMasses, circle_top: float, bound: dict) -> str:
    """What the descent runs with a perceptron on the spheres end in: single clusters, the step cap, the
    heaviest cluster's mass against the circle's at the largest beta and against Theorem 3.5's bound.

    Parameters
    ----------
    masses : mfattn.analysis.clusters.DescentMasses
        The runs on the spheres (:func:`mfattn.analysis.clusters.descent_masses`).
    circle_top : float
        The heaviest cluster's mass on the circle at the largest beta.
    bound : dict
        ``beta -> bound`` (:func:`mfattn.models.tokens.mass_bound`); a run counts where it is below one.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        Naming ``masses`` when it is not a DescentMasses with runs.

    Examples
    --------
    >>> from mfattn.analysis.clusters import DescentMasses
    >>> from mfattn.companion.clusterbook import sphere_descent_sentence
    >>> runs = [dict(beta=1.0, count=3, converged=True, heaviest=0.5),
    ...         dict(beta=50.0, count=2, converged=True, heaviest=0.6)]
    >>> print(sphere_descent_sentence(DescentMasses(runs, 0, [0.5, 0.6]), 0.9, {1.0: 1.5, 50.0: 0.57}))
    ... # doctest: +NORMALIZE_WHITESPACE
    Descent with a perceptron never ends in a single cluster on the spheres. Its runs end in at most 3
    atoms. Over these runs the heaviest cluster carries between 0.50 and 0.60 of the mass. On the circle
    it is heavier at the largest $\\beta$ (0.90, against at most 0.60 here), for the reason given in the
    previous section: there the public code's scaling lets the perceptron dominate the interaction. In 1
    of the 1 runs at a $\\beta$ where the bound of Theorem 3.5 for the circle's ReLU perceptron is below
    one, the heaviest mass lies above it.
    """
    if not isinstance(masses, DescentMasses) or not masses.systems:
        raise ValueError("masses: expected a DescentMasses with runs")
    desc, single, top = masses.systems, masses.single, masses.by_beta[-1]
    heavy = [r["heaviest"] for r in desc]
    informative = [(r["heaviest"], bound[r["beta"]]) for r in desc if bound[r["beta"]] < 1]
    above = sum(h > bd for h, bd in informative)
    capped = [r for r in desc if not r["converged"]]  # a count at the cap is the budget's, not an end state
    return (("Descent with a perceptron never ends in a single cluster on the spheres. " if single == 0
             else f"Descent with a perceptron ends in a single cluster in {single} runs on the spheres. ")
            + (f"Of its {len(desc)} runs, {len(capped)} hit the step cap, with up to "
               f"{max(r['count'] for r in capped)} clusters still apart; the others end in at most "
               f"{max([r['count'] for r in desc if r['converged']], default=0)} atoms. " if capped else
               f"Its runs end in at most {max(r['count'] for r in desc)} atoms. ")
            + f"Over these runs the heaviest cluster carries between {min(heavy):.2f} and {max(heavy):.2f} of the "
            "mass. "
            + (f"On the circle it is heavier at the largest $\\beta$ ({circle_top:.2f}, against at most {top:.2f} "
               "here), "
               "for the reason given in the previous section: there the public code's scaling lets the perceptron "
               "dominate the interaction. " if circle_top > top else
               f"On the circle it reaches {circle_top:.2f} at the largest $\\beta$, against at most {top:.2f} here. ")
            + (f"In {above} of the {len(informative)} runs at a $\\beta$ where the bound of Theorem 3.5 for the "
               "circle's ReLU perceptron is below one, the heaviest mass lies above it." if above else
               f"In none of the {len(informative)} runs at a $\\beta$ where the bound of Theorem 3.5 for the circle's "
               "ReLU perceptron is below one does the heaviest mass lie above it."))


def circle_animation(tokens, *, titles, colors, clock, alt: str, interval: int = 150, height: float = 2.3):
    """Tokens moving on the unit circle, one panel per system, as a moving picture that plays in the page
    (:func:`mfattn.companion.plotting.animation`).

    Parameters
    ----------
    tokens : array_like (F, B, n, 2)
        The tokens of the ``B`` systems at each of the ``F`` frames.
    titles : list of str
        The panels' titles, one per system.
    colors : list of str
        The dots' colours, one per system.
    clock : callable
        ``clock(i)``: the figure's title at frame ``i``.
    alt : str
        The picture's description for readers who cannot see it.
    interval : int, default 150
        Milliseconds between frames.
    height : float, default 2.3
        The figure's height in inches (its width is the column's).

    Returns
    -------
    IPython.display.HTML
        The player.

    Raises
    ------
    ValueError
        Naming ``tokens`` when it is not (F, B, n, 2), or ``titles`` or ``colors`` when they do not
        give one entry per system.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import numpy as np
    >>> from mfattn.companion.clusterbook import circle_animation
    >>> a = np.linspace(0, 1, 3)[:, None, None] + np.linspace(0, 3, 4)  # (3 frames, 1 system, 4 tokens)
    >>> X = np.stack([np.cos(a), np.sin(a)], -1)
    >>> html = circle_animation(X, titles=["drift"], colors=["C0"], clock=lambda i: f"frame {i}",
    ...                         alt="four dots turning")
    >>> html.data.count("data:image/png;base64,")
    3
    """
    import matplotlib.pyplot as plt

    from .plotting import COLUMN_WIDTH, animation

    tokens = np.asarray(tokens)
    if tokens.ndim != 4 or tokens.shape[3] != 2:
        raise ValueError(f"tokens: expected (frames, systems, n, 2), got {tokens.shape}")
    B = tokens.shape[1]
    if len(titles) != B or len(colors) != B:
        raise ValueError(f"titles, colors: expected one per system ({B})")
    fig, ax = plt.subplots(1, B, figsize=(COLUMN_WIDTH, height), squeeze=False)
    dots = []
    for a_, title, col in zip(ax[0], titles, colors):
        a_.plot(np.cos(np.linspace(0, 2 * np.pi, 200)), np.sin(np.linspace(0, 2 * np.pi, 200)), color="0.8", lw=0.8)
        (dot,) = a_.plot([], [], "o", ms=4, alpha=0.35, color=col, mec="none")
        dots.append(dot)
        a_.set(xlim=(-1.15, 1.15), ylim=(-1.15, 1.15), aspect="equal", xticks=[], yticks=[], title=title)
        a_.title.set_fontsize(9)
        a_.grid(False)
    title = fig.suptitle("")

    def draw(i):
        for j, dot in enumerate(dots):
            dot.set_data(tokens[i][j, :, 0], tokens[i][j, :, 1])
        title.set_text(clock(i))

    return animation(fig, draw, len(tokens), interval=interval, alt=alt)


def sphere_clusters(ax, masses, centres, directions) -> None:
    """Clusters on :math:`S^2` in one panel: the upper hemisphere seen from above (left disc) and the lower
    one seen from below (right disc, so mirrored), in orthographic projection. Every cluster is a disc at
    its centre, with area growing with its mass, which is written beside it; crosses mark the
    perceptron's directions, black for ``+a_m`` and grey for ``-a_m``.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The panel.
    masses : array_like (k,)
        The clusters' masses.
    centres : array_like (k, 3)
        Their centres, unit vectors (:func:`mfattn.analysis.clusters.cluster_centres`).
    directions : array_like (K, 3)
        The perceptron's unit directions.

    Raises
    ------
    ValueError
        Naming ``centres`` or ``directions`` when they are not points of :math:`\\mathbb R^3`, or ``masses``
        when it does not give one mass per centre.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> from mfattn.companion.clusterbook import sphere_clusters
    >>> fig, ax = plt.subplots()
    >>> sphere_clusters(ax, [0.75, 0.25], [[0, 0, 1.0], [0, 0.6, -0.8]], [[1.0, 0, 0]])
    >>> sorted(t.get_text() for t in ax.texts)
    ['0.25', '0.75', 'z < 0, from below', 'z > 0, from above']
    >>> plt.close(fig)
    """
    masses, cen, a3 = np.asarray(masses, dtype=float), np.asarray(centres, dtype=float), np.asarray(directions, float)
    for name, v in (("centres", cen), ("directions", a3)):
        if v.ndim != 2 or v.shape[1] != 3:
            raise ValueError(f"{name}: expected (k, 3) points, got {v.shape}")
    if masses.shape != (len(cen),):
        raise ValueError(f"masses: expected one per centre ({len(cen)}), got {masses.shape}")
    tt = np.linspace(0, 2 * np.pi, 200)
    for off, up in ((-1.1, True), (1.1, False)):
        ax.plot(off + np.cos(tt), np.sin(tt), color="0.6", lw=0.8)
        ax.text(off, -1.22, "z > 0, from above" if up else "z < 0, from below", ha="center", va="top", fontsize=8)
        for am in a3:
            for sgn, col in ((1, "k"), (-1, "0.6")):
                v = sgn * am
                if (v[2] > 0) == up:
                    ax.plot(off + (v[0] if up else -v[0]), v[1], "x", color=col, ms=5, mew=1)
        side = cen[:, 2] > 0 if up else cen[:, 2] <= 0
        xs = cen[side, 0] if up else -cen[side, 0]  # the lower hemisphere seen from below: x mirrored
        ax.scatter(off + xs, cen[side, 1], s=30 + 500 * masses[side], color="C0", alpha=0.6, edgecolor="k", lw=0.5)
        for x_, y_, m_ in zip(off + xs, cen[side, 1], masses[side]):
            ax.annotate(f"{m_:.2f}", (x_, y_), xytext=(7, 7), textcoords="offset points", fontsize=8)
    ax.set_aspect("equal")
    ax.set_xlim(-2.2, 2.2)
    ax.set_ylim(-1.45, 1.1)
    ax.axis("off")
