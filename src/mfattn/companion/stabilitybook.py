r"""Book glue of chapter 05 (stability of Dirac stationary measures): the sentences the chapter glues
into its prose, each quoting the run and saying which way it went, and the two printouts of its Dirac
stationary points. The measurements they read are
:mod:`mfattn.analysis.stability`'s (:class:`~mfattn.analysis.stability.PerturbationRun`,
:class:`~mfattn.analysis.stability.DiracPoint`, :class:`~mfattn.analysis.stability.RateComparison`,
:class:`~mfattn.analysis.stability.LiftedSpectrum`). Every ``*_sentence`` function returns MyST Markdown.

The examples build small runs by hand with :func:`toy_run`.
"""

from __future__ import annotations

import numpy as np
import torch

from ..analysis.stability import (DiracPoint, DiracSymmetry, LiftedSpectrum, PerturbationRun, RateComparison,
                                  SaddleDirection)
from .verdicts import fmt

__all__ = ["cloud_sentence", "eig_floor_sentence", "equality_sentence", "escape_sentence", "h0_sentence",
           "htr_sentence", "kappa_negative_sentence", "kappa_transverse_sentence", "lift_sentence", "pairs_sentence",
           "print_minimiser", "print_saddle", "random_orbit_sentence", "saddle_end_sentence", "saddle_rates_sentence",
           "slow_mode_sentence", "split_end_sentence", "tangent_sentence", "toy_run"]

_STAR = "$\\E(\\delta_{\\omega_*})$"


def _run(run, name: str = "run") -> PerturbationRun:
    if not isinstance(run, PerturbationRun):
        raise ValueError(f"{name}: expected a PerturbationRun (mfattn.analysis.stability), got {type(run).__name__}")
    return run


def _point(point) -> DiracPoint:
    if not isinstance(point, DiracPoint):
        raise ValueError(f"point: expected a DiracPoint (mfattn.analysis.stability.analyse_dirac), "
                         f"got {type(point).__name__}")
    return point


def toy_run(times, w2, *, risk=None, orbit=None, kappa=None, spread=None) -> PerturbationRun:
    """A :class:`~mfattn.analysis.stability.PerturbationRun` from given recordings, one head at the origin,
    ``zeta = 1``: the examples' and tests' runs with known numbers.

    Parameters
    ----------
    times, w2 : array_like (R,)
        The recording times and :math:`W_2(\\rho_t,\\delta_{\\omega_*})`.
    risk, orbit, kappa, spread : array_like (R,) or None
        The other recordings; zeros when ``None``.

    Returns
    -------
    PerturbationRun
        The run (``heads`` zeros of shape ``(R, 1, 1)``).

    Raises
    ------
    ValueError
        If a recording does not have the shape of ``times`` (1-d).

    Examples
    --------
    >>> from mfattn.companion.stabilitybook import toy_run
    >>> run = toy_run([0.0, 1.0], [0.1, 0.2], kappa=[-1.0, -1.0])
    >>> run.zeta_integral.tolist(), run.kappa.tolist()
    ([0.0, 1.0], [-1.0, -1.0])
    """
    t = np.asarray(times, dtype=np.float64)
    if t.ndim != 1:
        raise ValueError(f"times: expected a 1-d array, got shape {t.shape}")
    arrays = {}
    for name, x in (("w2", w2), ("risk", risk), ("orbit", orbit), ("kappa", kappa), ("spread", spread)):
        a = np.zeros_like(t) if x is None else np.asarray(x, dtype=np.float64)
        if a.shape != t.shape:
            raise ValueError(f"{name}: expected the shape of times, {t.shape}, got {a.shape}")
        arrays[name] = a
    return PerturbationRun(t, np.ones_like(t), t.copy(), torch.zeros(len(t), 1, 1, dtype=torch.float64),
                           arrays["risk"], arrays["w2"], arrays["orbit"], arrays["kappa"], arrays["spread"])


def escape_sentence(run: PerturbationRun, single_head_risk: float) -> str:
    """Where the escape from ``omega = 0`` ends: how far the risk fell from :math:`\\log d_v`, whether it
    settled (moving by less than 5 % of its fall over the last quarter of the run), and how it compares
    with the single-head minimum.

    Parameters
    ----------
    run : PerturbationRun
        The escape.
    single_head_risk : float
        :math:`\\mathcal E(\\delta_{\\omega_*})`.

    Returns
    -------
    str
        The sentences.

    Raises
    ------
    ValueError
        If ``run`` is not a PerturbationRun.

    Examples
    --------
    >>> from mfattn.companion.stabilitybook import escape_sentence, toy_run
    >>> run = toy_run([0, 1, 2, 3, 4], [0.1] * 5, risk=[1.386, 1.0, 0.6, 0.5, 0.5])
    >>> s = escape_sentence(run, 0.4)
    >>> "to 0.5000 and has settled" in s, "does not find the best single head" in s
    (True, True)
    """
    esc = _run(run)
    q = int(0.75 * (len(esc.risk) - 1))
    drop, tail = esc.risk[0] - esc.risk[-1], abs(esc.risk[-1] - esc.risk[q])
    return (f"By $t={esc.times[-1]:g}$ the risk has fallen from $\\log d_v={esc.risk[0]:.4f}$ to {esc.risk[-1]:.4f}"
            + (f" and has settled: over the last quarter of the run it moves by {fmt(tail, 2)}, against a fall of "
               f"{drop:.4f} in all." if tail < 0.05 * drop else
               f", and it is still moving: by {fmt(tail, 2)} over the last quarter of the run.")
            + (f" This is above the single-head minimum $\\E(\\delta_{{\\omega_*}})={single_head_risk:.4f}$, so within "
               "this horizon the escape does not find the best single head." if esc.risk[-1] > single_head_risk + 1e-6
               else f" This is the single-head minimum $\\E(\\delta_{{\\omega_*}})={single_head_risk:.4f}$, or below it."))


def htr_sentence(point: DiracPoint, orbit_dim: int) -> str:
    """Whether :math:`H_{tr}` at the minimiser vanishes exactly on the orbit's tangent space and is positive
    on its complement (a strict local minimum of the single-head risk modulo the symmetry).

    Parameters
    ----------
    point : DiracPoint
        The single-head minimiser, from :func:`~mfattn.analysis.stability.analyse_dirac`.
    orbit_dim : int
        The orbit's dimension, ``2 d_k^2``.

    Returns
    -------
    str
        The sentences.

    Raises
    ------
    ValueError
        If ``point`` is not a DiracPoint.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import analyse_dirac
    >>> from mfattn.companion.stabilitybook import htr_sentence
    >>> model, data, heads, _ = example()
    >>> htr_sentence(analyse_dirac(model, data, torch.zeros(24, dtype=torch.float64)), 8)[:60]
    'In this run $H_{tr}$ has a null space of dimension 12, again'
    """
    D = _point(point)
    lam = float(D.eig_H_tr_perp[0])
    ok = D.null_dim("H_tr") == orbit_dim and lam > 1e-9 * float(D.eig_H_tr.max())
    return (f"$H_{{tr}}$ vanishes exactly on the orbit's tangent space (dimension {orbit_dim}) and is positive on its "
            f"complement (smallest eigenvalue {fmt(lam)}). So $\\omega_*$ is a strict local minimum "
            "of the single-head risk modulo the symmetry, and translations of $\\delta_{\\omega_*}$ are stable." if ok
            else f"In this run $H_{{tr}}$ has a null space of dimension {D.null_dim('H_tr')}, against {orbit_dim} for the "
            f"orbit, and its smallest eigenvalue on the orbit's complement is {fmt(lam)}: $\\omega_*$ is not "
            "shown to be a strict local minimum modulo the symmetry.")


def h0_sentence(point: DiracPoint, orbit_dim: int, n_negative: int) -> str:
    """How :math:`H_0` fails hypothesis (52): singular along the orbit and the dilation, and negative
    eigenvalues forced by its ``(W_V, W_O)`` compression.

    Parameters
    ----------
    point : DiracPoint
        The single-head minimiser.
    orbit_dim : int
        The orbit's dimension, ``2 d_k^2``.
    n_negative : int
        Negative eigenvalues of :math:`H_0` on the orbit's complement
        (:attr:`~mfattn.analysis.stability.DiracSymmetry.n_negative`).

    Returns
    -------
    str
        The sentences.

    Raises
    ------
    ValueError
        If ``point`` is not a DiracPoint.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import analyse_dirac
    >>> from mfattn.companion.stabilitybook import h0_sentence
    >>> model, data, heads, _ = example()
    >>> print(h0_sentence(analyse_dirac(model, data, torch.zeros(24, dtype=torch.float64)), 8, 3)[:60])
    $H_0$ has a null space of dimension 12 (the orbit and the di
    """
    D = _point(point)
    ok = D.null_dim("H0") == orbit_dim + 1 and n_negative > 0
    return ("$H_0$ fails hypothesis (52) in all three ways derived above. It is singular along the orbit. It is "
            "singular along the dilation. Its $(W_V,W_O)$ compression has zero diagonal blocks, which forces negative "
            f"eigenvalues here ({n_negative} of them on the orbit's complement), because the residual is nonzero."
            if ok else
            f"$H_0$ has a null space of dimension {D.null_dim('H0')} (the orbit and the dilation make {orbit_dim + 1}) "
            f"and {n_negative} negative eigenvalues on the orbit's complement.")


def eig_floor_sentence(run: PerturbationRun, eps: float, zeta: float, lam: float) -> str:
    """Where the translation along a transverse eigenvector of :math:`H_{tr}` ends: against its linear
    prediction :math:`\\varepsilon e^{-2\\zeta\\lambda t}` (a floor of order :math:`\\varepsilon^2` when it ends
    ten times above), and whether its distance to the orbit keeps falling.

    Parameters
    ----------
    run : PerturbationRun
        The translation.
    eps : float
        Its size :math:`\\varepsilon`.
    zeta : float
        The constant learning rate.
    lam : float
        The eigenvalue :math:`\\lambda`.

    Returns
    -------
    str
        The sentences.

    Raises
    ------
    ValueError
        If ``run`` is not a PerturbationRun.

    Examples
    --------
    >>> from mfattn.companion.stabilitybook import eig_floor_sentence, toy_run
    >>> run = toy_run([0, 50, 100], [0.05, 0.01, 0.0025], orbit=[0.05, 1e-3, 1e-4])
    >>> s = eig_floor_sentence(run, 0.05, 1.0, 0.1)  # the prediction at t = 100: 0.05 e^{-20}
    >>> "far above the linear prediction" in s, s.endswith("keeps falling, to 1.0e-04.")
    (True, True)
    """
    r = _run(run)
    eps2 = eps ** 2
    return (f"The eigenvector's $W_2$ follows $\\varepsilon e^{{-2\\zeta\\lambda t}}$ at first and ends at "
            f"{fmt(r.w2[-1], 2)}, {r.w2[-1] / eps2:.2f}$\\,\\varepsilon^2$, "
            + ("far above the linear prediction: a floor of order $\\varepsilon^2$. There the second-order terms have "
               "moved the mass along the orbit. Its distance to the orbit "
               if r.w2[-1] > 10 * eps * np.exp(-2 * zeta * lam * r.times[-1]) else
               "close to the linear prediction. Its distance to the orbit ")
            + (f"keeps falling, to {fmt(r.orbit[-1], 2)}." if r.orbit[-1] < r.orbit[len(r.orbit) // 2] else
               f"ends at {fmt(r.orbit[-1], 2)}."))


def slow_mode_sentence(zeta: float, lam_min: float, T: float) -> str:
    """The time scale :math:`1/(2\\zeta\\lambda_{\\min})` of the slowest transverse mode against the horizon.

    Parameters
    ----------
    zeta : float
        The constant learning rate, > 0.
    lam_min : float
        :math:`\\lambda_{\\min}` of :math:`H_{tr}` on the orbit's complement, > 0.
    T : float
        The horizon of the runs.

    Returns
    -------
    str
        The sentence.

    Raises
    ------
    ValueError
        If ``zeta`` or ``lam_min`` is not positive.

    Examples
    --------
    >>> from mfattn.companion.stabilitybook import slow_mode_sentence
    >>> slow_mode_sentence(1.0, 0.001, 200.0)
    'Its slowest mode decays over a time of order $1/(2\\\\zeta\\\\lambda_{\\\\min})=500$, longer than the horizon $T=200$.'
    """
    if not zeta > 0:
        raise ValueError(f"zeta: expected a positive learning rate, got {zeta!r}")
    if not lam_min > 0:
        raise ValueError(f"lam_min: expected a positive eigenvalue, got {lam_min!r}")
    t_slow = 1 / (2 * zeta * lam_min)
    return (f"Its slowest mode decays over a time of order $1/(2\\zeta\\lambda_{{\\min}})={t_slow:.0f}$, "
            + (f"longer than the horizon $T={T:g}$." if t_slow > T else f"shorter than the horizon $T={T:g}$."))


def tangent_sentence(run: PerturbationRun) -> str:
    """The tangent translation: the relative change of its :math:`W_2` and where its distance to the orbit
    goes.

    Parameters
    ----------
    run : PerturbationRun
        The tangent translation.

    Returns
    -------
    str
        The sentence.

    Raises
    ------
    ValueError
        If ``run`` is not a PerturbationRun.

    Examples
    --------
    >>> from mfattn.companion.stabilitybook import tangent_sentence, toy_run
    >>> tangent_sentence(toy_run([0, 1], [0.05, 0.0501], orbit=[2e-4, 1e-4])).endswith("shrinks to 1.0e-04.")
    True
    """
    tg = _run(run)
    drift = abs(tg.w2[-1] / tg.w2[0] - 1)
    return (f"The tangent translation keeps $W_2=\\varepsilon$, up to a relative change of {fmt(drift, 2)}, and its "
            "distance to the orbit "
            f"({fmt(tg.orbit[0], 2)}, $O(\\varepsilon^2)$, at the start) "
            + (f"shrinks to {fmt(tg.orbit[-1], 2)}." if tg.orbit[-1] < tg.orbit[0] else
               f"grows to {fmt(tg.orbit[-1], 2)}."))


def random_orbit_sentence(run: PerturbationRun, eps: float) -> str:
    """The random transverse translation's distance to the orbit at the horizon, in units of
    :math:`\\varepsilon^2` (below ten of them, the second-order terms are as large as the linear prediction).

    Parameters
    ----------
    run : PerturbationRun
        The random transverse translation.
    eps : float
        Its size :math:`\\varepsilon`.

    Returns
    -------
    str
        The clause (it continues a sentence of the prose).

    Raises
    ------
    ValueError
        If ``run`` is not a PerturbationRun.

    Examples
    --------
    >>> from mfattn.companion.stabilitybook import random_orbit_sentence, toy_run
    >>> s = random_orbit_sentence(toy_run([0, 1], [0.05, 0.01], orbit=[0.05, 0.01]), 0.05)
    >>> "is 1.0e-02, 4.0" in s, "as large as what it predicts" in s
    (True, True)
    """
    rt = _run(run)
    eps2 = eps ** 2
    return (f"the orbit distance at $T$ is {fmt(rt.orbit[-1], 2)}, {rt.orbit[-1] / eps2:.1f}$\\,\\varepsilon^2$"
            + (", where the second-order terms this linear prediction leaves out are as large as what it predicts."
               if rt.orbit[-1] < 10 * eps2 else
               ", well above $\\varepsilon^2$: here the sharper test would be within reach."))


def split_end_sentence(run: PerturbationRun, single_head_risk: float) -> str:
    """Where the symmetric split ends: how far apart the heads are, and its risk against the single-head
    minimum.

    Parameters
    ----------
    run : PerturbationRun
        The split.
    single_head_risk : float
        :math:`\\mathcal E(\\delta_{\\omega_*})`.

    Returns
    -------
    str
        The sentence.

    Raises
    ------
    ValueError
        If ``run`` is not a PerturbationRun.

    Examples
    --------
    >>> from mfattn.companion.stabilitybook import split_end_sentence, toy_run
    >>> s = split_end_sentence(toy_run([0, 9], [0.05, 1.0], risk=[1.36, 1.2], spread=[0.1, 2.0]), 1.36)
    >>> "the heads are 2.000 apart" in s, "1.6e-01 below" in s
    (True, True)
    """
    sp = _run(run)
    return (f"By $t={sp.times[-1]:g}$ the heads are {sp.spread[-1]:.3f} apart (from $2\\varepsilon={sp.spread[0]:.3f}$) "
            + (f"and the risk is {fmt(single_head_risk - sp.risk[-1], 2)} below {_STAR}: the two heads have "
               "become different heads, and together they fit the three-head teacher better than any single head can."
               if sp.risk[-1] < single_head_risk else
               f"and the risk is {fmt(sp.risk[-1] - single_head_risk, 2)} above {_STAR}."))


def kappa_transverse_sentence(eigenvector_run: PerturbationRun, random_run: PerturbationRun) -> str:
    """How low :math:`\\kappa` falls along the two transverse translations.

    Parameters
    ----------
    eigenvector_run, random_run : PerturbationRun
        The translations along the eigenvector and along the random transverse direction.

    Returns
    -------
    str
        The clause.

    Raises
    ------
    ValueError
        If either is not a PerturbationRun.

    Examples
    --------
    >>> from mfattn.companion.stabilitybook import kappa_transverse_sentence, toy_run
    >>> a, b = toy_run([0, 1], [1, 1], kappa=[0.1, 0.01]), toy_run([0, 1], [1, 1], kappa=[0.2, 0.002])
    >>> kappa_transverse_sentence(a, b)
    'It falls towards zero, to 1.0e-02 for the eigenvector and 2.0e-03 for the random direction,'
    """
    re_, rr = _run(eigenvector_run, "eigenvector_run"), _run(random_run, "random_run")
    return (f"It falls towards zero, to {fmt(re_.kappa.min(), 2)} for the eigenvector and {fmt(rr.kappa.min(), 2)} "
            "for the random direction,")


def kappa_negative_sentence(split_run: PerturbationRun, cloud_run: PerturbationRun) -> str:
    """When :math:`\\kappa` turns negative along the split and the cloud, and whether their :math:`W_2` grows.

    Parameters
    ----------
    split_run, cloud_run : PerturbationRun
        The split and the cloud.

    Returns
    -------
    str
        The sentences.

    Raises
    ------
    ValueError
        If either is not a PerturbationRun.

    Examples
    --------
    >>> from mfattn.companion.stabilitybook import kappa_negative_sentence, toy_run
    >>> sp = toy_run([0, 1, 2], [0.1, 0.2, 0.4], kappa=[-1, -1, -1])
    >>> cl = toy_run([0, 1, 2], [0.1, 0.1, 0.3], kappa=[1, -1, -1])
    >>> s = kappa_negative_sentence(sp, cl)
    >>> "the split, $\\\\kappa$ is negative from the start" in s, "the cloud, $\\\\kappa$ is negative from $t=1$" in s
    (True, True)
    """
    sp, cl = _run(split_run, "split_run"), _run(cloud_run, "cloud_run")
    pairs = (("split", sp), ("cloud", cl))
    text = " ".join(f"For the {name}, $\\kappa$ is negative from "
                    + ("the start" if r.kappa[0] < 0 else f"$t={r.times[np.argmax(r.kappa < 0)]:g}$") + "."
                    for name, r in pairs if (r.kappa < 0).any())
    text += "".join(f" For the {name}, $\\kappa$ stays nonnegative." for name, r in pairs if not (r.kappa < 0).any())
    grow = sp.w2[-1] > sp.w2[0] and cl.w2[-1] > cl.w2[0]
    return text + (" That is the negative curvature of $H_0$, and neither run converges: $W_2$ grows from "
                   f"{sp.w2[0]:.3f} to {sp.w2[-1]:.3f} for the split and from {cl.w2[0]:.3f} to {cl.w2[-1]:.3f} for "
                   "the cloud." if grow else
                   f" $W_2$ goes from {sp.w2[0]:.3f} to {sp.w2[-1]:.3f} for the split and from {cl.w2[0]:.3f} to "
                   f"{cl.w2[-1]:.3f} for the cloud.")


def cloud_sentence(run: PerturbationRun, single_head_risk: float) -> str:
    """How long the cloud keeps :math:`\\kappa>0`, and where its risk ends against the single-head minimum.

    Parameters
    ----------
    run : PerturbationRun
        The cloud.
    single_head_risk : float
        :math:`\\mathcal E(\\delta_{\\omega_*})`.

    Returns
    -------
    str
        The sentences.

    Raises
    ------
    ValueError
        If ``run`` is not a PerturbationRun.

    Examples
    --------
    >>> from mfattn.companion.stabilitybook import cloud_sentence, toy_run
    >>> s = cloud_sentence(toy_run([0, 1, 2], [0.1] * 3, kappa=[1, -1, -1], risk=[1.4, 1.3, 1.3]), 1.36)
    >>> "only until $t=1$" in s, "with a risk 6.0e-02 below" in s
    (True, True)
    """
    cl = _run(run)
    pos = cl.kappa > 0
    return ((f"The cloud has $\\kappa>0$ only until $t={cl.times[np.argmin(pos)]:g}$, while its fast stable "
             "components decay. It then spreads along the unstable directions. " if pos[0] and not pos.all() else "")
            + ("It ends far from $\\delta_{\\omega_*}$, with a risk "
               f"{fmt(abs(cl.risk[-1] - single_head_risk), 2)} {'below' if cl.risk[-1] < single_head_risk else 'above'} "
               f"{_STAR}."))


def equality_sentence(worst: float) -> str:
    """The equality form of (46) against the quadrature error: ``worst`` is the largest, over the runs, of
    :meth:`~mfattn.analysis.stability.PerturbationRun.gronwall_deviation`'s ratio.

    Parameters
    ----------
    worst : float
        The largest deviation over its change from the half grid, >= 0.

    Returns
    -------
    str
        The sentence.

    Raises
    ------
    ValueError
        If ``worst`` is negative or not finite.

    Examples
    --------
    >>> from mfattn.companion.stabilitybook import equality_sentence
    >>> equality_sentence(0.34).startswith("The equality form of (46) holds"), "0.34 times" in equality_sentence(0.34)
    (True, True)
    """
    if not (np.isfinite(worst) and worst >= 0):
        raise ValueError(f"worst: expected a finite ratio >= 0, got {worst!r}")
    return ("The equality form of (46) holds on every run to the quadrature error: the largest deviation is "
            f"{worst:.2f} times its change from the half grid (Richardson expects $1/3$)." if worst <= 1 else
            f"The equality form of (46) misses on some run by {worst:.2f} times the quadrature error's estimate.")


def saddle_rates_sentence(rate: RateComparison, rate_half: RateComparison) -> str:
    """Theorem 7.8's rate at the uniform-attention saddle at :math:`\\varepsilon` and :math:`\\varepsilon/2`:
    whether the relative error against :math:`H_{tr}` halves (a factor in ``[1.5, 2.5]``), and the miss of
    :math:`H_0` alone (a fixed fraction when the two agree to 10 %).

    Parameters
    ----------
    rate, rate_half : RateComparison
        At :math:`\\varepsilon` and at half of it, each with :math:`H_{tr}` as the prediction and :math:`H_0` as
        the control (:func:`~mfattn.analysis.stability.compare_rate`).

    Returns
    -------
    str
        The sentences.

    Raises
    ------
    ValueError
        If either is not a RateComparison.

    Examples
    --------
    >>> from mfattn.analysis.stability import RateComparison
    >>> from mfattn.companion.stabilitybook import saddle_rates_sentence
    >>> print(saddle_rates_sentence(RateComparison(1.02, 1.0, 1.5), RateComparison(1.01, 1.0, 1.5)))
    ... # doctest: +NORMALIZE_WHITESPACE
    The measured rate agrees with $H_{tr}$ to a relative +2.0e-02 at $\\varepsilon=$ `eps` and +1.0e-02 at half
    of it: the relative error halves with $\\varepsilon$, as a remainder $O(\\varepsilon)$ should. The prediction
    from $H_0$ alone misses by -0.320 and -0.327, a fixed fraction at every $\\varepsilon$.
    """
    for x, name in ((rate, "rate"), (rate_half, "rate_half")):
        if not isinstance(x, RateComparison):
            raise ValueError(f"{name}: expected a RateComparison, got {type(x).__name__}")
    (m1, p1, q1), (m2, p2, q2) = rate, rate_half
    halving = abs(m1 / p1 - 1) / max(abs(m2 / p2 - 1), 1e-300)
    return (f"The measured rate agrees with $H_{{tr}}$ to a relative {m1 / p1 - 1:+.1e} at $\\varepsilon=$ `eps` and "
            f"{m2 / p2 - 1:+.1e} at half of it"
            + (": the relative error halves with $\\varepsilon$, as a remainder $O(\\varepsilon)$ should. "
               if 1.5 <= halving <= 2.5 else
               f": the relative error changes by a factor {halving:.1f} when $\\varepsilon$ halves. ")
            + f"The prediction from $H_0$ alone misses by {m1 / q1 - 1:+.3f} and {m2 / q2 - 1:+.3f}"
            + (", a fixed fraction at every $\\varepsilon$." if abs((m1 / q1 - 1) - (m2 / q2 - 1)) < 0.1 * abs(m1 / q1 - 1)
               else "."))


def saddle_end_sentence(run: PerturbationRun, saddle_risk: float, single_head_risk: float) -> str:
    """Where the translated Dirac mass from the uniform-attention saddle ends: its distance, and the share of
    the risk gap to the single-head minimiser it has covered.

    Parameters
    ----------
    run : PerturbationRun
        The long run from the saddle.
    saddle_risk : float
        :math:`\\mathcal E(\\delta_{\\omega_u})`.
    single_head_risk : float
        :math:`\\mathcal E(\\delta_{\\omega_*})`.

    Returns
    -------
    str
        The sentence.

    Raises
    ------
    ValueError
        If ``run`` is not a PerturbationRun.

    Examples
    --------
    >>> from mfattn.companion.stabilitybook import saddle_end_sentence, toy_run
    >>> s = saddle_end_sentence(toy_run([0, 60], [0.05, 1.2], risk=[1.40, 1.38]), 1.40, 1.36)
    >>> "fallen by 0.0200, a share 0.50 of the way" in s
    True
    """
    sad = _run(run)
    gap, fall = saddle_risk - single_head_risk, saddle_risk - sad.risk[-1]
    return (f"By $t={sad.times[-1]:g}$ the head is at $W_2={sad.w2[-1]:.3f}$ from $\\delta_{{\\omega_u}}$"
            + (f": it has left uniform attention, and the risk has fallen by {fall:.4f}, a share {fall / gap:.2f} "
               "of the way down to that of the single-head minimiser." if fall > 0 and gap > 0 else
               f", and the risk has changed by {-fall:+.4f}."))


def lift_sentence(lift: LiftedSpectrum) -> str:
    """Formula (49) at the Dirac lift (to rounding when the relative error is at most ``1e-10``), and what
    the lowest eigenvalue says about (47) and (48).

    Parameters
    ----------
    lift : LiftedSpectrum
        From :func:`~mfattn.analysis.stability.lifted_spectrum`.

    Returns
    -------
    str
        The sentences.

    Raises
    ------
    ValueError
        If ``lift`` is not a LiftedSpectrum.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.stability import LiftedSpectrum
    >>> from mfattn.companion.stabilitybook import lift_sentence
    >>> lift_sentence(LiftedSpectrum(torch.tensor([-0.02, 0.5]), 1e-16, 0.5, 0.5))[:70]
    'The autograd Hessian of the lifted risk has exactly the spectrum that '
    """
    if not isinstance(lift, LiftedSpectrum):
        raise ValueError(f"lift: expected a LiftedSpectrum, got {type(lift).__name__}")
    low = float(lift.eigenvalues[0])
    return (("The autograd Hessian of the lifted risk has exactly the spectrum that (49) gives at a Dirac lift, to "
             "rounding." if lift.error / lift.scale <= 1e-10 else
             f"The autograd Hessian of the lifted risk differs from the spectrum that (49) gives by a relative "
             f"{fmt(lift.error / lift.scale, 2)}.")
            + (f" Its lowest eigenvalue, {low:.4e}, is that of $H_0$: along a split the lifted risk curves down, "
               "so (48) fails with any $\\kappa>0$, and so does (47)." if low < 0 else
               f" Its lowest eigenvalue is {low:.4e}."))


def pairs_sentence(quotients) -> str:
    """Remark 7.3 on the sample: how many random pairs of Dirac masses have a negative monotonicity quotient
    (:func:`~mfattn.analysis.stability.lifted_monotonicity`).

    Parameters
    ----------
    quotients : array_like (P,)
        The quotients, one per pair.

    Returns
    -------
    str
        The sentence.

    Raises
    ------
    ValueError
        If ``quotients`` is empty or not 1-d.

    Examples
    --------
    >>> from mfattn.companion.stabilitybook import pairs_sentence
    >>> pairs_sentence([0.1, -0.2, 0.3])[:70]
    'Globally, the lifted gradient is not monotone: 1 of 3 random pairs of '
    """
    q = np.asarray(quotients, dtype=np.float64)
    if q.ndim != 1 or q.size == 0:
        raise ValueError(f"quotients: expected a non-empty 1-d array, got shape {q.shape}")
    n_neg = int((q < 0).sum())
    return (f"Globally, the lifted gradient is not monotone: {n_neg} of {q.size} random pairs of heads have a "
            "negative quotient, as Remark 7.3 expects of a neural-network parametrisation." if n_neg else
            f"None of the {q.size} random pairs of heads has a negative quotient: this sample does not show the lack "
            "of global monotonicity that Remark 7.3 expects.")


def print_minimiser(point: DiracPoint, symmetry: DiracSymmetry, start_risks, optimal_risk: float,
                    orbit_dim: int) -> None:
    """Print what chapter 05 measures at the single-head minimiser: the risk from each start, against the
    teacher's optimum, the stationarity residual, the orbit's tangent space, the null spaces, the symmetry's
    residuals and the two spectra on the orbit's complement.

    Parameters
    ----------
    point : DiracPoint
        The minimiser, from :func:`~mfattn.analysis.stability.analyse_dirac`.
    symmetry : DiracSymmetry
        Its residuals, from :func:`~mfattn.analysis.stability.symmetry_residuals`.
    start_risks : sequence of float
        The risk reached from each start of the minimisation.
    optimal_risk : float
        The teacher's optimum.
    orbit_dim : int
        ``2 d_k^2``.

    Raises
    ------
    ValueError
        If ``point`` or ``symmetry`` is not of its type.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import analyse_dirac, symmetry_residuals
    >>> from mfattn.companion.stabilitybook import print_minimiser
    >>> model, data, heads, _ = example()
    >>> p = analyse_dirac(model, data, heads[0])
    >>> print_minimiser(p, symmetry_residuals(model, p), [1.5, 1.4], 1.3, 8)  # doctest: +ELLIPSIS
    risk reached from each start: 1.500000, 1.400000
    ...
    orbit tangent: dim 8 (2 d_k^2 = 8); generator singular values ...
    """
    D = _point(point)
    if not isinstance(symmetry, DiracSymmetry):
        raise ValueError(f"symmetry: expected a DiracSymmetry, got {type(symmetry).__name__}")
    S = symmetry
    print("risk reached from each start:", ", ".join(f"{x:.6f}" for x in start_risks))
    print(f"E(delta_w*) = {D.risk:.6f} (teacher optimum H = {optimal_risk:.6f})")
    print(f"|grad Phi(w*; delta_w*)| = {D.grad_norm:.1e}")
    print(f"orbit tangent: dim {D.tangent.dim} (2 d_k^2 = {orbit_dim}); generator singular values "
          f"{float(D.tangent.singular_values.min()):.3f}..{float(D.tangent.singular_values.max()):.3f}")
    print(f"null space dimensions: H_tr {D.null_dim('H_tr')}, H0 {D.null_dim('H0')}")
    print(f"  on the orbit's complement: H_tr {D.null_dim('H_tr_perp')}, H0 {D.null_dim('H0_perp')}")
    print(f"max |H g| / (|H| |g|) over the generators g: {S.generator_residual:.1e}")
    print(f"dilation: |H0 d| / (|H0| |d|) = {S.dilation_residual:.1e}")
    print(f"H_tr on the complement: lambda_min = {float(D.eig_H_tr_perp[0]):.3e}, lambda_max = "
          f"{float(D.eig_H_tr_perp[-1]):.3e}")
    print(f"H0 on the complement: {S.n_negative} negative eigenvalues of {D.eig_H0_perp.numel()}, lambda_min = "
          f"{float(D.eig_H0_perp[0]):.3e}")
    print(f"  the V-V and O-O blocks: max |entry| = {S.vo_diagonal:.1e}; sigma_1(B) = {S.sigma_B:.3e}")


def print_saddle(point: DiracPoint, direction: SaddleDirection, start_risks, rms_feature: float) -> None:
    """Print what chapter 05 measures at the uniform-attention saddle: its risk (the same from every start to
    ``1e-9`` or not), its stationarity residual and feature size, the lowest eigenvalue of :math:`H_{tr}` and
    its direction, and the direction ``v`` with its two quadratic forms.

    Parameters
    ----------
    point : DiracPoint
        The saddle, from :func:`~mfattn.analysis.stability.analyse_dirac`.
    direction : SaddleDirection
        From :func:`~mfattn.analysis.stability.saddle_direction`.
    start_risks : sequence of float
        The risk reached from each start.
    rms_feature : float
        The root mean square of :math:`|\\psi_l|` at the saddle.

    Raises
    ------
    ValueError
        If ``point`` or ``direction`` is not of its type.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import analyse_dirac, saddle_direction, uniform_attention_point
    >>> from mfattn.companion.stabilitybook import print_saddle
    >>> model, data, _, _ = example()
    >>> w_u, risks = uniform_attention_point(model, data, generator=torch.Generator().manual_seed(0), n_starts=2)
    >>> p = analyse_dirac(model, data, w_u)
    >>> sd = saddle_direction(model, p, generator_qk=torch.Generator().manual_seed(1),
    ...                       generator_vo=torch.Generator().manual_seed(2))
    >>> print_saddle(p, sd, risks, 1.0)  # doctest: +ELLIPSIS
    omega_u: E(delta) = ..., the same from every start to 1e-9
    ...
    """
    D = _point(point)
    if not isinstance(direction, SaddleDirection):
        raise ValueError(f"direction: expected a SaddleDirection, got {type(direction).__name__}")
    sd, v = direction, direction.v
    print(f"omega_u: E(delta) = {D.risk:.6f}, "
          + ("the same from every start to 1e-9" if max(start_risks) - min(start_risks) < 1e-9 else
             "not the same from every start"))
    print(f"  |grad Phi(w_u; delta_w_u)| = {D.grad_norm:.1e}; RMS |psi_l| = {rms_feature:.3f}")
    print(f"lambda_min(H_tr) = {sd.lam_qk:.4e}, its direction in (W_Q, W_K): {sd.qk_weight:.6f}")
    print(f"  |J'SJ| on the (W_Q, W_K) block: {sd.jsj_qk:.1e}")
    print(f"u_VO: u'H0 u = {sd.mu_0:.4e}, u'H_tr u = {sd.mu_tr:.4e}")
    print(f"v = {sd.c:.3f} u_QK + {sd.s:.3f} u_VO")
    print(f"v'H_tr v = {float(v @ D.H_tr @ v):.4e}, v'H0 v = {float(v @ D.H0 @ v):.4e}")
