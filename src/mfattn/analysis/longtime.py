"""Long-time behaviour of the limiting PDE (20): paper section 6 and the discussion of section 8.

Used by chapter 04. The trajectories themselves come from :func:`mfattn.flows.dynamics.reference_flow`
(started from an empirical measure, the PDE stays empirical and the characteristics are its exact
solution up to the integrator); this module measures them.

* :func:`energy_balance`: the dissipation identity (39) in integrated form,
  ``E(rho_T) - E(rho_0) + int_0^T 2 zeta(t) I(rho_t) dt = 0``, with the integral by composite Simpson.
  On a Runge-Kutta trajectory recorded at every step both the integrator and the quadrature err at
  fourth order, so the residual shrinks like ``h^4``.
* :func:`kl_fit`: the Kurdyka-Lojasiewicz exponent ``theta`` and the limit ``E_inf`` from the relation
  ``I = c^2 (E - E_inf)^(2 theta)`` between the recorded dissipation and energy along the tail of a run
  (the equality case of (44)); :func:`kl_constant` is the largest ``c_KL`` for which (44) holds at every
  recorded point, and :func:`kl_bound` is the rate of Theorem 6.10.
* :func:`inward_products`: the inward-pointing condition of Remark 6.7 on a boundary sphere.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
from scipy import optimize, stats

from .._checks import check_generator, check_positive
from ..models.data import Dataset
from ..flows.dynamics import as_profile
from ..models.model import HeadModel
from ..models.model import require_heads
from .static import Ball, check_ball

__all__ = [
    "EnergyBalance",
    "energy_balance",
    "resolved_until",
    "KLFit",
    "kl_fit",
    "local_exponents",
    "kl_constant",
    "kl_bound",
    "InwardCheck",
    "inward_products",
]


def _vector(x, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().double().numpy()
    a = np.asarray(x, dtype=float)
    if a.ndim != 1 or a.size < 1:
        raise ValueError(f"{name}: expected a non-empty 1-d sequence, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: values must be finite")
    return a


# ------------------------------------------------------------------------ energy dissipation (39)
class EnergyBalance(NamedTuple):
    r"""The integrated dissipation identity (39) over a recorded run.

    Returned by :func:`energy_balance`.

    .. rubric:: Fields

    ``drop`` : float
        :math:`\mathcal E(\rho_{t_0})-\mathcal E(\rho_{t_R})`.
    ``integral`` : float
        :math:`\int_{t_0}^{t_R}2\zeta(t)\,\mathcal I(\rho_t)\,dt` by composite Simpson.
    ``residual`` : float
        ``drop - integral``: zero for the exact flow and quadrature.

    The property ``relative`` is ``|residual| / |drop|``, the residual relative to the drop.

    Examples
    --------
    >>> from mfattn.analysis.longtime import EnergyBalance
    >>> b = EnergyBalance(drop=0.5, integral=0.49, residual=0.01)
    >>> round(b.relative, 6)
    0.02
    """

    drop: float  # E(rho_0) - E(rho_T)
    integral: float  # int_0^T 2 zeta(t) I(rho_t) dt by composite Simpson
    residual: float  # drop - integral: zero for the exact flow

    @property
    def relative(self) -> float:
        """``|residual| / drop``.

        The absolute value of ``drop`` is taken, and the ratio is infinite when ``drop`` is 0.
        """
        return abs(self.residual) / abs(self.drop) if self.drop else math.inf


def energy_balance(times, risk, dissipation, zeta=1.0) -> EnergyBalance:
    r"""Compare the energy drop with the dissipated energy, Theorem 6.1 integrated over ``[t_0, t_R]``:

    .. math:: \mathcal E(\rho_{t_0})-\mathcal E(\rho_{t_R}) = \int_{t_0}^{t_R} 2\zeta(t)\,\mathcal I(\rho_t)\,dt .

    ``times`` must be uniform with an even number of intervals (composite Simpson, error
    ``O(dt^4)``); ``risk`` and ``dissipation`` are the values recorded at those times.

    Parameters
    ----------
    times : array-like (R,)
        Increasing, uniformly spaced recording times, ``R - 1`` even and ``R >= 3`` (a sequence, a
        NumPy array or a tensor).
    risk : array-like (R,)
        :math:`\mathcal E(\rho_t)` at those times.
    dissipation : array-like (R,)
        :math:`\mathcal I(\rho_t)` (38) at those times, ``>= 0``.
    zeta : float, profile or callable, default 1.0
        The learning-rate profile of the run, anything :func:`mfattn.flows.integrate.as_profile` accepts.

    Returns
    -------
    EnergyBalance
        The drop, the dissipated energy and their difference.

    Raises
    ------
    ValueError
        Naming the argument when the shapes differ, the grid is not uniform with an even number of
        intervals, or a value is not finite or a dissipation negative.

    Examples
    --------
    >>> import torch
    >>> from mfattn.flows.dynamics import reference_flow
    >>> from mfattn.analysis.longtime import energy_balance
    >>> from mfattn.models.tasks import example
    >>> model, data, _, _ = example()
    >>> w0 = torch.randn(5, model.d_omega, generator=torch.Generator().manual_seed(0),
    ...                  dtype=torch.float64)
    >>> def balance(h):  # a Runge-Kutta run recorded at every step h
    ...     flow = reference_flow(model, data, w0, T=0.4, step=h, record_every=h,
    ...                           progress=False)
    ...     return energy_balance(flow.times, flow.risk, flow.dissipation)
    >>> coarse, fine = balance(0.1), balance(0.05)
    >>> round(coarse.drop, 3), coarse.relative < 1e-3
    (0.221, True)
    >>> 12 < coarse.residual / fine.residual < 20  # fourth order: about 2^4
    True
    """
    t, E, I = _vector(times, "times"), _vector(risk, "risk"), _vector(dissipation, "dissipation")
    if not (t.shape == E.shape == I.shape):
        raise ValueError(f"risk, dissipation: shapes {E.shape}, {I.shape} differ from times' {t.shape}")
    if t.size < 3 or (t.size - 1) % 2:
        raise ValueError(f"times: composite Simpson needs an even number of intervals, got {t.size - 1}")
    dt = np.diff(t)
    if np.any(dt <= 0) or np.ptp(dt) > 1e-9 * dt.mean():
        raise ValueError("times: must be increasing and uniformly spaced")
    if np.any(I < 0):
        raise ValueError("dissipation: values must be >= 0")
    zeta = as_profile(zeta)
    f = 2.0 * np.array([zeta(float(s)) for s in t]) * I
    integral = dt.mean() / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
    drop = float(E[0] - E[-1])
    return EnergyBalance(drop, float(integral), drop - float(integral))


def resolved_until(times, risk, dissipation, zeta=1.0, rtol: float = 1e-2) -> float:
    r"""The last recording time up to which a run follows the flow: Theorem 6.1 in its local form,
    :math:`-\tfrac{d}{dt}\mathcal E(\rho_t) = 2\zeta(t)\,\mathcal I(\rho_t)`, holds at every record
    to the relative tolerance ``rtol``, with the derivative taken by second-order differences of
    the recorded risk (one-sided at the ends, which are not judged).

    An explicit integrator at a fixed step can lose a stiff flow (chapter 04's one-hot runs): the
    iterates then oscillate across a narrow valley, the risk falls far more slowly than
    :math:`2\zeta\mathcal I`, and the integrated balance of :func:`energy_balance` fails without
    saying where. This says where.

    Parameters
    ----------
    times : array-like (R,)
        Increasing recording times, ``R >= 3``, finely spaced against the flow's time scale.
    risk : array-like (R,)
        :math:`\mathcal E(\rho_t)` at those times.
    dissipation : array-like (R,)
        :math:`\mathcal I(\rho_t)` (38) at those times, ``>= 0``.
    zeta : float, profile or callable, default 1.0
        The learning-rate profile of the run.
    rtol : float, default 1e-2
        The relative tolerance of the local identity, in ``(0, 1)``.

    Returns
    -------
    float
        The recording time before the first interior record that breaks the identity, or the last
        time when none does.

    Raises
    ------
    ValueError
        Naming the argument when the shapes differ, the times are not increasing, or ``rtol`` is
        not in ``(0, 1)``.

    Examples
    --------
    A run that follows the flow is resolved to its end; a risk that falls half as fast as the
    dissipation says is not:

    >>> import numpy as np
    >>> from mfattn.analysis.longtime import resolved_until
    >>> t = np.linspace(0.0, 4.0, 401)
    >>> E, I = 1 + np.exp(-2 * t), np.exp(-2 * t)  # -dE/dt = 2 exp(-2t) = 2 I
    >>> resolved_until(t, E, I)
    4.0
    >>> E_lost = np.where(t < 1, E, E[100] + 0.5 * (E - E[100]))
    >>> round(resolved_until(t, E_lost, I), 2)
    0.99
    """
    t, E, I = _vector(times, "times"), _vector(risk, "risk"), _vector(dissipation, "dissipation")
    if not (t.shape == E.shape == I.shape):
        raise ValueError(f"risk, dissipation: shapes {E.shape}, {I.shape} differ from times' {t.shape}")
    if t.size < 3 or np.any(np.diff(t) <= 0):
        raise ValueError("times: needs at least 3 increasing times")
    if not 0 < rtol < 1:
        raise ValueError(f"rtol: must lie in (0, 1), got {rtol}")
    zeta = as_profile(zeta)
    rate = 2.0 * np.array([zeta(float(s)) for s in t]) * I
    off = np.abs(np.gradient(E, t) + rate) > rtol * rate
    off[0] = off[-1] = False
    return float(t[np.argmax(off) - 1]) if off.any() else float(t[-1])


# ------------------------------------------------------------- Kurdyka-Lojasiewicz exponent (44)
class KLFit(NamedTuple):
    r"""Fit of ``log I = log c^2 + 2 theta log(E - E_inf)`` over the tail of a run.

    Returned by :func:`kl_fit`.

    .. rubric:: Fields

    ``theta`` : float
        Estimated KL exponent :math:`\theta` (half the fitted slope).
    ``theta_lo``, ``theta_hi`` : float
        Confidence interval of ``theta`` at ``level`` (it includes the uncertainty of ``E_inf``
        when that was fitted).
    ``c_kl`` : float
        ``exp(intercept / 2)``: the ``c`` of the fitted equality, not a lower bound (see
        :func:`kl_constant`); ``inf`` when it lies beyond float64 (a fitted exponent far from the data).
    ``E_inf`` : float
        The limit energy, given or estimated.
    ``E_inf_lo``, ``E_inf_hi`` : float
        Range of ``E_inf`` compatible with the fit (both equal to ``E_inf`` when it was given).
    ``fitted`` : bool
        ``E_inf`` was estimated (True) or given (False).
    ``level`` : float
        Confidence level of the intervals.
    ``n`` : int
        Number of points in the fit.
    ``rss`` : float
        Residual sum of squares of the log-log fit at ``E_inf``.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.longtime import kl_fit
    >>> G = np.geomspace(1.0, 1e-3, 20)
    >>> fit = kl_fit(0.5 + G, 4.0 * G**1.2, E_inf=0.5)
    >>> round(float(fit.theta), 6), round(fit.c_kl, 6), fit.fitted, fit.n
    (0.6, 2.0, False, 20)
    """

    theta: float
    theta_lo: float  # confidence interval of theta (includes the uncertainty of E_inf when fitted)
    theta_hi: float
    c_kl: float  # exp(intercept / 2): the c of the fitted equality, not a lower bound (see kl_constant)
    E_inf: float
    E_inf_lo: float  # range of E_inf compatible with the fit (equal to E_inf when it was given)
    E_inf_hi: float
    fitted: bool  # E_inf was estimated (True) or given (False)
    level: float
    n: int  # points in the fit
    rss: float  # residual sum of squares of the log fit at E_inf

    def contains(self, theta: float) -> bool:
        """Whether ``theta`` lies in the confidence interval ``[theta_lo, theta_hi]``.

        Parameters
        ----------
        theta : float
            A candidate exponent.

        Returns
        -------
        bool
            ``theta_lo <= theta <= theta_hi``.

        Examples
        --------
        >>> import numpy as np
        >>> import torch
        >>> from mfattn.analysis.longtime import kl_fit
        >>> G = np.geomspace(1.0, 1e-3, 20)
        >>> noise = torch.randn(20, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        >>> fit = kl_fit(0.5 + G, 4.0 * G**1.2 * np.exp(0.01 * noise.numpy()), E_inf=0.5)
        >>> bool(fit.contains(0.6)), bool(fit.contains(0.5))
        (True, False)
        """
        return self.theta_lo <= theta <= self.theta_hi


class _Line(NamedTuple):
    slope: float
    intercept: float
    stderr: float


def _regress(logG, logI):
    res = stats.linregress(logG, logI)
    rss = float(np.sum((logI - res.intercept - res.slope * logG) ** 2))
    # an exact line has no error (scipy leaves that of a constant y undefined)
    stderr = 0.0 if rss == 0 and np.isnan(res.stderr) else res.stderr
    return _Line(res.slope, res.intercept, stderr), rss


def _rss_rows(X, y):
    """Residual sums of squares of the least-squares lines of ``y`` on each row of ``X``."""
    xc = X - X.mean(axis=1, keepdims=True)
    yc = y - y.mean()
    sxx = np.einsum("ij,ij->i", xc, xc)
    slope = np.divide(xc @ yc, sxx, out=np.zeros(len(X)), where=sxx > 0)
    return np.sum((yc - slope[:, None] * xc) ** 2, axis=1)


def _exp(x: float) -> float:
    """exp(x), ``inf`` beyond float64's range (a constant ``c`` of a tail whose fitted exponent is far
    from the data's scale), instead of math's OverflowError."""
    return math.exp(x) if x < 709.0 else math.inf


def kl_fit(risk, dissipation, *, E_inf: float | None = None, level: float = 0.95, grid: int = 400) -> KLFit:
    r"""Estimate the KL exponent :math:`\theta` of (44) (and :math:`\mathcal E_\infty` when not given) from
    pairs :math:`(\mathcal E(\rho_t), \mathcal I(\rho_t))` recorded along the tail of a trajectory.

    Along a flow that satisfies (44) with equality, :math:`\mathcal I = c^2 G^{2\theta}` with
    :math:`G = \mathcal E-\mathcal E_\infty`, a straight line in log-log coordinates. With ``E_inf`` given,
    this is one least-squares line and the interval is its Student-t interval on the slope ``2 theta``.
    Without it, ``E_inf`` is profiled: for each candidate below the smallest recorded energy the line is
    fitted, and the candidate with the smallest residual wins. Its range (``E_inf_lo``, ``E_inf_hi``) is
    the set of candidates whose residual is within the F-test bound of the best, and the interval on
    ``theta`` is the union of the slope intervals over that set.

    The points of one trajectory are not independent noisy draws: the interval measures how well
    one power law describes the tail, not sampling noise. Pass the tail only (after the transient).

    Parameters
    ----------
    risk : array-like (R,)
        Energies :math:`\mathcal E(\rho_t)` along the tail, ``R >= 5``.
    dissipation : array-like (R,)
        Dissipations :math:`\mathcal I(\rho_t)` at the same times, all ``> 0``.
    E_inf : float, optional
        The limit energy, below every recorded energy; estimated when ``None``.
    level : float, default 0.95
        Confidence level of the intervals, in ``(0, 1)``.
    grid : int, default 400
        Number of candidates of the first, coarse scan of ``E_inf`` (when it is estimated).

    Returns
    -------
    KLFit
        The exponent with its interval, the constant of the fitted equality, and ``E_inf`` with its
        range.

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    >>> import numpy as np
    >>> import torch
    >>> from mfattn.analysis.longtime import kl_fit
    >>> G = np.geomspace(1.0, 1e-3, 20)
    >>> noise = torch.randn(20, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    >>> fit = kl_fit(0.5 + G, 4.0 * G**1.2 * np.exp(0.01 * noise.numpy()))
    >>> fit.fitted, round(float(fit.theta), 2), round(fit.E_inf, 3)
    (True, 0.6, 0.5)
    >>> fit.E_inf_lo <= 0.5 <= fit.E_inf_hi, bool(fit.contains(0.6))
    (True, True)
    """
    E, I = _vector(risk, "risk"), _vector(dissipation, "dissipation")
    if E.shape != I.shape:
        raise ValueError(f"dissipation: shape {I.shape} differs from risk's {E.shape}")
    if E.size < 5:
        raise ValueError("risk: need at least 5 points for a fit with an interval")
    if np.any(I <= 0):
        raise ValueError("dissipation: values must be > 0 (drop the points where the flow has stopped)")
    if not 0 < level < 1:
        raise ValueError(f"level: must lie in (0, 1), got {level}")
    logI = np.log(I)
    if E_inf is not None:
        if not math.isfinite(E_inf) or np.any(E <= E_inf):
            raise ValueError(f"E_inf: must be finite and below every recorded energy (min {E.min():.6g})")
        res, rss = _regress(np.log(E - E_inf), logI)
        half = stats.t.ppf(0.5 + level / 2, E.size - 2) * res.stderr
        return KLFit(res.slope / 2, (res.slope - half) / 2, (res.slope + half) / 2, _exp(res.intercept / 2),
                     E_inf, E_inf, E_inf, False, level, E.size, rss)
    # profile over u = log(min E - E_inf), from far below the tail's spread to just under its end
    spread = float(E.max() - E.min())
    if spread <= 0:
        raise ValueError("risk: the energy does not change along the tail")
    if np.ptp(logI) == 0:
        raise ValueError("dissipation: constant along the tail, so every E_inf fits it exactly and none can be "
                         "estimated (pass E_inf)")
    e_min = float(E.min())
    u_lo, u_hi = math.log(spread * 1e-8), math.log(spread * 1e3)

    def rss_of(u):
        return _regress(np.log(E - e_min + math.exp(u)), logI)[1]

    us = np.linspace(u_lo, u_hi, grid)
    rs = _rss_rows(np.log(E - e_min + np.exp(us)[:, None]), logI)  # the whole grid at once
    j = int(np.argmin(rs))
    rs[j] = rss_of(us[j])  # the grid's best on the same arithmetic as every later evaluation
    a, b = us[max(j - 1, 0)], us[min(j + 1, grid - 1)]
    u_best = optimize.minimize_scalar(rss_of, bounds=(a, b), method="bounded",
                                      options={"xatol": 1e-10}).x if b > a else us[j]
    rss_best = min(rss_of(u_best), rs[j])
    if rss_of(u_best) > rs[j]:
        u_best = us[j]
    dof = E.size - 3
    bound = rss_best * (1 + stats.f.ppf(level, 1, dof) / dof)
    # the profile region {u : rss(u) <= bound}: its ends by root finding on each side of the best
    excess = lambda u: rss_of(u) - bound
    left = u_lo if excess(u_lo) <= 0 else optimize.brentq(excess, u_lo, u_best, xtol=1e-12)
    right = u_hi if excess(u_hi) <= 0 else optimize.brentq(excess, u_best, u_hi, xtol=1e-12)
    tq = stats.t.ppf(0.5 + level / 2, E.size - 3)
    los, his = [], []
    for u in np.append(np.linspace(left, right, 41), u_best):
        res, _ = _regress(np.log(E - e_min + math.exp(u)), logI)
        los.append((res.slope - tq * res.stderr) / 2)
        his.append((res.slope + tq * res.stderr) / 2)
    res, rss = _regress(np.log(E - e_min + math.exp(u_best)), logI)
    return KLFit(res.slope / 2, min(los), max(his), _exp(res.intercept / 2), e_min - math.exp(u_best),
                 e_min - math.exp(right), e_min - math.exp(left), True, level, E.size, rss)


def local_exponents(risk, dissipation, E_inf: float) -> np.ndarray:
    r"""Local KL exponents between consecutive records, :math:`\theta_j = \tfrac12\,\Delta\log\mathcal I/\Delta\log G`:
    constant along a flow with an exact power law, drifting where the tail is not yet asymptotic.

    Parameters
    ----------
    risk : array-like (R,)
        Recorded energies, all above ``E_inf``.
    dissipation : array-like (R,)
        Recorded dissipations, all ``> 0``.
    E_inf : float
        The limit energy, :math:`G=\mathcal E-\mathcal E_\infty`.

    Returns
    -------
    numpy.ndarray (R - 1,)
        :math:`\theta_j` between the records ``j`` and ``j + 1``.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.longtime import local_exponents
    >>> G = np.geomspace(1.0, 1e-3, 20)
    >>> theta = local_exponents(0.5 + G, 4.0 * G**1.2, E_inf=0.5)
    >>> theta.shape, bool(np.allclose(theta, 0.6))
    ((19,), True)
    """
    E, I = _vector(risk, "risk"), _vector(dissipation, "dissipation")
    G = E - E_inf
    if np.any(G <= 0) or np.any(I <= 0):
        raise ValueError("E_inf: every recorded energy must exceed it, and every dissipation must be > 0")
    return 0.5 * np.diff(np.log(I)) / np.diff(np.log(G))


def kl_constant(risk, dissipation, E_inf: float, theta: float) -> float:
    r"""The largest :math:`c_{KL}` for which (44), :math:`\mathcal I^{1/2}\ge c_{KL}\,G^\theta`, holds at every
    recorded point: :math:`\min_j \mathcal I_j^{1/2}/G_j^\theta`. With ``theta = 1/2`` its square is the
    Polyak-Lojasiewicz constant :math:`\lambda` of Remark 6.11.

    Parameters
    ----------
    risk : array-like (R,)
        Recorded energies, all above ``E_inf``.
    dissipation : array-like (R,)
        Recorded dissipations, ``>= 0``.
    E_inf : float
        The limit energy.
    theta : float
        The KL exponent, in ``[1/2, 1)``.

    Returns
    -------
    float
        :math:`\min_j \mathcal I_j^{1/2}/G_j^\theta`.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.longtime import kl_constant
    >>> G = np.geomspace(1.0, 1e-3, 20)
    >>> round(kl_constant(0.5 + G, 4.0 * G**1.2, E_inf=0.5, theta=0.6), 6)
    2.0
    """
    E, I = _vector(risk, "risk"), _vector(dissipation, "dissipation")
    G = E - E_inf
    if np.any(G <= 0):
        raise ValueError("E_inf: every recorded energy must exceed it")
    if not 0.5 <= theta < 1:
        raise ValueError(f"theta: Theorem 6.10 needs theta in [1/2, 1), got {theta}")
    return float(np.min(np.sqrt(np.maximum(I, 0)) / G**theta))


def kl_bound(G0: float, c_kl: float, theta: float, zeta_integral) -> np.ndarray:
    r"""The rate of Theorem 6.10 for :math:`G(t)=\mathcal E(\rho_t)-\mathcal E(\bar\rho)` given
    :math:`G(t_0)=` ``G0`` and ``zeta_integral`` :math:`=\int_{t_0}^t\zeta(r)\,dr` (an array):
    :math:`G_0\exp(-2c^2 Z)` for :math:`\theta=1/2`, else
    :math:`[G_0^{1-2\theta}+2c^2(2\theta-1)Z]^{-1/(2\theta-1)}`.

    Parameters
    ----------
    G0 : float
        The gap at :math:`t_0`, positive.
    c_kl : float
        The KL constant :math:`c`, positive.
    theta : float
        The KL exponent, in ``[1/2, 1)``.
    zeta_integral : array-like
        Values of :math:`Z=\int_{t_0}^t\zeta(r)\,dr`, finite and ``>= 0``.

    Returns
    -------
    numpy.ndarray
        The bound on :math:`G(t)`, of ``zeta_integral``'s shape.

    Examples
    --------
    >>> from mfattn.analysis.longtime import kl_bound
    >>> kl_bound(1.0, 1.0, 0.75, [0.0, 1.0, 3.0]).tolist()
    [1.0, 0.25, 0.0625]
    >>> [round(float(v), 4) for v in kl_bound(1.0, 1.0, 0.5, [0.0, 1.0])]
    [1.0, 0.1353]
    """
    check_positive(G0, "G0")
    check_positive(c_kl, "c_kl")
    if not 0.5 <= theta < 1:
        raise ValueError(f"theta: Theorem 6.10 needs theta in [1/2, 1), got {theta}")
    Z = np.asarray(zeta_integral, dtype=float)
    if np.any(Z < 0) or not np.all(np.isfinite(Z)):
        raise ValueError("zeta_integral: values must be finite and >= 0")
    if theta == 0.5:
        return G0 * np.exp(-2 * c_kl**2 * Z)
    q = 2 * theta - 1
    return (G0 ** (-q) + 2 * c_kl**2 * q * Z) ** (-1 / q)


# --------------------------------------------------------------- Remark 6.7: an invariant ball
class InwardCheck(NamedTuple):
    """The products ``<omega - omega_c, grad Phi(omega; rho)>`` on the boundary sphere of a ball.

    Returned by :func:`inward_products`.

    .. rubric:: Fields

    ``points`` : Tensor (P, d_omega)
        Points on the sphere, model's dtype and device.
    ``products`` : Tensor (P,)
        The inward products (``>= 0`` where the field points inwards).
    ``fraction_inward`` : float
        Share of points with product ``>= 0``.
    ``minimum`` : float
        The most negative product (the strongest outward push).

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.longtime import inward_products
    >>> from mfattn.analysis.static import Ball
    >>> from mfattn.models.tasks import example
    >>> model, data, _, _ = example()
    >>> heads = torch.randn(5, model.d_omega, generator=torch.Generator().manual_seed(0),
    ...                     dtype=torch.float64)
    >>> chk = inward_products(model, data, heads, None, Ball(3.0), n_points=6,
    ...                       generator=torch.Generator().manual_seed(1))
    >>> chk.points.shape, chk.products.shape, 0 <= chk.fraction_inward <= 1
    (torch.Size([6, 24]), torch.Size([6]), True)
    """

    points: torch.Tensor  # (P, d_omega) points on the sphere
    products: torch.Tensor  # (P,) the inward products (>= 0 where the field points inwards)
    fraction_inward: float  # share of points with product >= 0
    minimum: float  # most negative product (the strongest outward push)


def inward_products(model: HeadModel, data: Dataset, heads, weights, ball: Ball, *, n_points: int,
                    generator: torch.Generator, points=None) -> InwardCheck:
    r"""Remark 6.7's criterion for an invariant ball :math:`K_R`: the flow cannot leave it if
    :math:`\langle\omega-\omega_c,\nabla\Phi(\omega;\rho)\rangle\ge0` on :math:`\partial K_R`. Evaluates the
    product at ``n_points`` uniform points of the sphere (and at ``points``, projected radially onto it)
    for the measure ``heads`` (weights ``weights``).

    In this model the criterion fails whenever the ball's centre has zero ``W_V`` block (the origin,
    for instance): ``Phi`` is odd under the sign flip of ``W_V``, a linear isometry that fixes such a
    centre, so the product is odd under it too and is negative at the flip of every point where it
    is positive.

    Parameters
    ----------
    model : HeadModel
        The model.
    data : Dataset
        The dataset, in the model's dtype and device.
    heads : Tensor (N, d_omega)
        Atoms of the measure :math:`\rho`.
    weights : Tensor (N,) or None
        Their weights on the simplex; uniform when ``None``.
    ball : Ball
        The ball :math:`K_R` (:class:`mfattn.analysis.static.Ball`).
    n_points : int
        Number of uniform points drawn on the sphere.
    generator : torch.Generator
        Draws those points (on the CPU, in float64).
    points : Tensor (Q, d_omega), optional
        Further points, projected radially onto the sphere and appended after the drawn ones.

    Returns
    -------
    InwardCheck
        The ``P = n_points + Q`` points, their products, the share of inward ones and the minimum.

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    The product is odd under the sign flip of the ``W_V`` block, for a ball centred at the origin:

    >>> import torch
    >>> from mfattn.analysis.longtime import inward_products
    >>> from mfattn.analysis.static import Ball
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, _ = example()
    >>> chk = inward_products(model, data, heads, None, Ball(3.0), n_points=4,
    ...                       generator=torch.Generator().manual_seed(1))
    >>> W_Q, W_K, W_V, W_O = model.unpack(chk.points)
    >>> flipped = model.pack(W_Q, W_K, -W_V, W_O)
    >>> chk2 = inward_products(model, data, heads, None, Ball(3.0), n_points=1,
    ...                        generator=torch.Generator().manual_seed(1), points=flipped)
    >>> chk2.points.shape
    torch.Size([5, 24])
    >>> torch.allclose(chk2.products[1:], -chk.products)
    True
    """
    require_heads(model, "inward_products")
    ball = check_ball(ball)
    generator = check_generator(generator)
    check_positive(n_points, "n_points", integer=True)
    heads, weights = model.check_measure(heads, weights)
    P = ball.sample_sphere(n_points, model.d_omega, generator=generator, dtype=model.dtype, device=model.device)
    if points is not None:
        q = model.check_heads(points, "points")
        c = ball.centre_for(q)
        P = torch.cat([P, c + ball.radius * (q - c) / (q - c).norm(dim=1, keepdim=True).clamp_min(1e-300)])
    g = model.grad_first_variation(data, P, heads, weights)
    prod = ((P - ball.centre_for(P)) * g).sum(1)
    return InwardCheck(P, prod, float((prod >= 0).double().mean()), float(prod.min()))
