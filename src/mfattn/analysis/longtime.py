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
* Chapter 04's runs and what it reads off them, each a typed record with the printout the chapter
  shows: :func:`flow_records` and :func:`balance_order` (Theorem 6.1 to the integrator's order),
  :func:`profile_collapse` ((42)), :func:`long_run`, :func:`stationarity` (Theorem 6.6, Proposition
  6.9, Remark 6.7), :func:`kl_rate` and :func:`kl_analysis` (Theorem 6.10), :func:`pl_profile`
  (Section 8), :func:`certificate_record` and :func:`certificate_series` (Section 8's certificate).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
from scipy import optimize, stats

from .._checks import check_generator, check_positive
from ..flows.dynamics import as_profile, reference_flow
from ..flows.integrate import integrate, rescaled_time
from ..models.data import Dataset
from ..models.model import HeadModel, require_heads
from .fitting import LogLogFit, OrderFit, asymptotic_order, loglog_fit
from .static import Ball, certificate, check_ball

__all__ = [
    "EnergyBalance",
    "energy_balance",
    "resolved_until",
    "LocalBalance",
    "local_balance",
    "KLFit",
    "kl_fit",
    "local_exponents",
    "local_exponent_curve",
    "decay_power",
    "kl_constant",
    "kl_bound",
    "InwardCheck",
    "inward_products",
    "support_radius",
    "flow_records",
    "BalanceOrder",
    "balance_order",
    "Collapse",
    "profile_collapse",
    "LongRun",
    "Resolved",
    "long_run",
    "Doublings",
    "doublings",
    "KLRate",
    "kl_rate",
    "PLProfile",
    "pl_profile",
    "certificate_record",
    "Stationarity",
    "stationarity",
    "KLAnalysis",
    "kl_analysis",
    "CertificateSeries",
    "certificate_series",
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
    local = _local_balance(t, E, I, zeta)
    off = np.abs(local.rate - local.decrease) > rtol * local.rate
    off[0] = off[-1] = False
    return float(t[np.argmax(off) - 1]) if off.any() else float(t[-1])


class LocalBalance(NamedTuple):
    r"""The two sides of Theorem 6.1 in its local form at every record of a run.

    Returned by :func:`local_balance`.

    .. rubric:: Fields

    ``times`` : numpy.ndarray (R,)
        The recording times.
    ``decrease`` : numpy.ndarray (R,)
        :math:`-\tfrac{d}{dt}\mathcal E(\rho_t)` by second-order differences of the recorded risk
        (one-sided at the ends).
    ``rate`` : numpy.ndarray (R,)
        :math:`2\zeta(t)\,\mathcal I(\rho_t)`.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.longtime import local_balance
    >>> t = np.linspace(0.0, 1.0, 5)
    >>> b = local_balance(t, 2 - t, np.full(5, 0.5))  # dE/dt = -1 = -2 I
    >>> b.decrease.tolist(), b.rate.tolist()
    ([1.0, 1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0, 1.0])
    """

    times: np.ndarray
    decrease: np.ndarray  # -dE/dt by differences
    rate: np.ndarray  # 2 zeta(t) I(rho_t)


def _local_balance(t: np.ndarray, E: np.ndarray, I: np.ndarray, zeta) -> LocalBalance:
    zeta = as_profile(zeta)
    return LocalBalance(t, -np.gradient(E, t), 2.0 * np.array([zeta(float(s)) for s in t]) * I)


def local_balance(times, risk, dissipation, zeta=1.0) -> LocalBalance:
    r"""Both sides of Theorem 6.1 in its local form, :math:`-\tfrac{d}{dt}\mathcal E(\rho_t)` and
    :math:`2\zeta(t)\,\mathcal I(\rho_t)`, at every record of a run: they coincide along the flow
    (chapter 04 draws them; :func:`resolved_until` finds where a run stops following the flow).

    Parameters
    ----------
    times : array-like (R,)
        Increasing recording times, ``R >= 3``.
    risk : array-like (R,)
        :math:`\mathcal E(\rho_t)` at those times.
    dissipation : array-like (R,)
        :math:`\mathcal I(\rho_t)` (38) at those times.
    zeta : float, profile or callable, default 1.0
        The learning-rate profile of the run.

    Returns
    -------
    LocalBalance
        The times, the energy's rate of decrease by second-order differences and ``2 zeta I``.

    Raises
    ------
    ValueError
        Naming the argument when the shapes differ or the times are not increasing.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.longtime import local_balance
    >>> t = np.linspace(0.0, 2.0, 201)
    >>> b = local_balance(t, np.exp(-2 * t), np.exp(-2 * t))  # -dE/dt = 2 exp(-2t) = 2 I
    >>> bool(np.allclose(b.decrease[1:-1], b.rate[1:-1], rtol=1e-3))
    True
    """
    t, E, I = _vector(times, "times"), _vector(risk, "risk"), _vector(dissipation, "dissipation")
    if not (t.shape == E.shape == I.shape):
        raise ValueError(f"risk, dissipation: shapes {E.shape}, {I.shape} differ from times' {t.shape}")
    if t.size < 3 or np.any(np.diff(t) <= 0):
        raise ValueError("times: needs at least 3 increasing times")
    return _local_balance(t, E, I, zeta)


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


def local_exponent_curve(times, risk, dissipation, E_inf: float, *, max_points: int = 200):
    r"""The local KL exponents of :func:`local_exponents` as a curve in time: each placed at the geometric
    mean :math:`\sqrt{t_jt_{j+1}}` of its two records, and thinned to every ``k``-th value,
    ``k = max(1, (R - 1) // max_points)``, so that a long run plots as at most about ``max_points`` points.

    Parameters
    ----------
    times : array-like (R,)
        Recording times, all ``> 0``.
    risk : array-like (R,)
        Recorded energies, all above ``E_inf``.
    dissipation : array-like (R,)
        Recorded dissipations, all ``> 0``.
    E_inf : float
        The limit energy.
    max_points : int, default 200
        The number of points to thin towards, positive.

    Returns
    -------
    tuple of numpy.ndarray
        The times and the exponents, of equal length ``ceil((R - 1) / k)``.

    Raises
    ------
    ValueError
        Naming ``times`` (not positive, or not of the shape of ``risk``), ``max_points`` (not positive), or
        the argument of :func:`local_exponents` that is invalid.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.longtime import local_exponent_curve
    >>> t = np.arange(1.0, 11.0)
    >>> tm, theta = local_exponent_curve(t, 1.0 + 1 / t, 4 / t**1.5, E_inf=1.0, max_points=4)
    >>> tm.round(3).tolist(), theta.round(6).tolist()
    ([1.414, 3.464, 5.477, 7.483, 9.487], [0.75, 0.75, 0.75, 0.75, 0.75])
    """
    t = _vector(times, "times")
    if t.shape != np.shape(risk) or np.any(t <= 0):
        raise ValueError(f"times: expected {np.shape(risk)} positive values, got shape {t.shape}")
    check_positive(max_points, "max_points", integer=True)
    theta = local_exponents(risk, dissipation, E_inf)
    stride = max(1, theta.size // max_points)
    return np.sqrt(t[1:] * t[:-1])[::stride], theta[::stride]


def decay_power(times, values, t_a: float, t_b: float) -> float:
    r"""The power :math:`p` with :math:`v\propto t^p` between two times, the values read at the records
    nearest them: :math:`\log(v_b/v_a)/\log(t_b/t_a)`. Chapter 04 quotes the decay of the risk gap this way.

    Parameters
    ----------
    times : array-like (R,)
        Recording times.
    values : array-like (R,)
        The recorded quantity; positive at the two records read.
    t_a, t_b : float
        The two times, positive and distinct.

    Returns
    -------
    float
        The power.

    Raises
    ------
    ValueError
        Naming ``values`` (shape other than ``times``', or not positive at a record read), ``t_a`` or
        ``t_b`` (not positive, or equal).

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.longtime import decay_power
    >>> t = np.arange(1.0, 101.0)
    >>> round(decay_power(t, 3.0 * t**-1.5, 20.0, 80.0), 12)
    -1.5
    """
    t, v = _vector(times, "times"), _vector(values, "values")
    if t.shape != v.shape:
        raise ValueError(f"values: shape {v.shape} differs from times' {t.shape}")
    check_positive(t_a, "t_a")
    check_positive(t_b, "t_b")
    if t_a == t_b:
        raise ValueError(f"t_b: must differ from t_a, both {t_a}")
    v_a, v_b = v[np.argmin(np.abs(t - t_a))], v[np.argmin(np.abs(t - t_b))]
    if v_a <= 0 or v_b <= 0:
        raise ValueError(f"values: must be positive at the records read, got {v_a} and {v_b}")
    return math.log(v_b / v_a) / math.log(t_b / t_a)


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

    The property ``sd`` is the binomial standard deviation of ``fraction_inward`` for a share of 1/2,
    ``0.5 / sqrt(P)``: the share that the oddness of the product under the flip of ``W_V`` predicts.

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
    >>> round(chk.sd, 4)
    0.2041
    """

    points: torch.Tensor  # (P, d_omega) points on the sphere
    products: torch.Tensor  # (P,) the inward products (>= 0 where the field points inwards)
    fraction_inward: float  # share of points with product >= 0
    minimum: float  # most negative product (the strongest outward push)

    @property
    def sd(self) -> float:
        """The binomial standard deviation of ``fraction_inward`` at a share of 1/2: ``0.5 / sqrt(P)``."""
        return 0.5 / math.sqrt(self.points.shape[0])


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


# ------------------------------------------------------------- the runs chapter 04 measures
def support_radius(heads) -> float:
    r"""The support radius :math:`\max_i\|\omega_i\|` of an empirical measure (the statistic chapter 04
    records along its runs: a bounded radius is what Proposition 6.9 needs for precompactness).

    Parameters
    ----------
    heads : Tensor (N, d_omega)
        The atoms, ``N >= 1``.

    Returns
    -------
    float
        The largest Euclidean norm of an atom.

    Raises
    ------
    ValueError
        Naming ``heads`` when it is not a non-empty 2-d tensor.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.longtime import support_radius
    >>> support_radius(torch.tensor([[3.0, 4.0], [1.0, 0.0]]))
    5.0
    """
    if not isinstance(heads, torch.Tensor) or heads.ndim != 2 or heads.shape[0] < 1:
        raise ValueError(f"heads: expected a non-empty (N, d_omega) tensor, got {getattr(heads, 'shape', heads)!r}")
    return float(heads.norm(dim=1).max())


def flow_records(model: HeadModel, data: Dataset, heads, *, T: float, step: float, record_every: float,
                 zeta=1.0) -> dict:
    r"""The risk and dissipation along the flow (20) from the measure ``heads``, as JSON values (one
    point of a sweep that saves its results, :func:`mfattn.companion.sweep.run_sweep`): the
    Runge-Kutta characteristics of :func:`mfattn.flows.dynamics.reference_flow`, without their stages.

    Parameters
    ----------
    model : HeadModel
        The model.
    data : Dataset
        The dataset, in the model's dtype and device.
    heads : Tensor (N, d_omega)
        The atoms of :math:`\rho_0` (uniform weights).
    T : float
        The horizon, a multiple of ``step``.
    step : float
        The Runge-Kutta step.
    record_every : float
        The recording interval, a multiple of ``step``.
    zeta : float, profile or callable, default 1.0
        The learning-rate profile.

    Returns
    -------
    dict
        ``times``, ``risk`` and ``dissipation``: lists of floats, one entry per record.

    Raises
    ------
    ValueError
        From :func:`~mfattn.flows.dynamics.reference_flow`, naming the argument that is invalid.

    Examples
    --------
    >>> from mfattn.analysis.longtime import flow_records
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, _ = example()
    >>> r = flow_records(model, data, heads, T=0.5, step=0.25, record_every=0.25)
    >>> r["times"], len(r["risk"]), r["risk"][1] < r["risk"][0]
    ([0.0, 0.25, 0.5], 3, True)
    """
    f = reference_flow(model, data, heads, T=T, step=step, record_every=record_every, zeta=zeta, keep_stages=False,
                       progress=False)
    return dict(times=f.times.tolist(), risk=f.risk.tolist(), dissipation=f.dissipation.tolist())


class BalanceOrder(NamedTuple):
    """The integrated balance (39) of one flow run at several Runge-Kutta steps, and the order at
    which its residual shrinks.

    Returned by :func:`balance_order`.

    .. rubric:: Fields

    ``steps`` : numpy.ndarray (S,)
        The steps.
    ``balances`` : tuple of EnergyBalance (S,)
        The balance of the run at each step.
    ``fit`` : OrderFit
        :func:`mfattn.analysis.fitting.asymptotic_order` of ``|residual|`` against the step.

    The property ``residuals`` is the array of ``|residual|``.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.longtime import balance_order
    >>> runs = []
    >>> for h in (0.5, 0.25, 0.125, 0.0625):  # E = exp(-t), I = exp(-t) / 2: Simpson's error only
    ...     t = np.arange(0, 4 + h / 2, h)
    ...     runs.append(dict(times=t, risk=np.exp(-t), dissipation=np.exp(-t) / 2))
    >>> order = balance_order([0.5, 0.25, 0.125, 0.0625], runs)
    >>> round(float(order.fit.order))
    4
    >>> print(order.summary().splitlines()[0])
    h = 0.5000: drop 0.981684, int 2 zeta I dt 0.982015, residual -3.31e-04
    """

    steps: np.ndarray
    balances: tuple
    fit: OrderFit

    @property
    def residuals(self) -> np.ndarray:
        """``|residual|`` of the balance at each step."""
        return np.array([abs(b.residual) for b in self.balances])

    def summary(self) -> str:
        """One line per step (the drop, the dissipated energy, the residual), then the fitted order.

        Returns
        -------
        str
            The lines, joined by newlines.

        Examples
        --------
        >>> from mfattn.analysis.fitting import OrderFit
        >>> from mfattn.analysis.longtime import BalanceOrder, EnergyBalance
        >>> b = BalanceOrder([0.1], (EnergyBalance(0.5, 0.5, 1e-9),), OrderFit(4.01, 3.9, 4.1, 0.95, 2))
        >>> print(b.summary())
        h = 0.1000: drop 0.500000, int 2 zeta I dt 0.500000, residual +1.00e-09
        order of the residual: 4.01, interval [3.90, 4.10]
        """
        lines = [f"h = {h:.4f}: drop {b.drop:.6f}, int 2 zeta I dt {b.integral:.6f}, residual {b.residual:+.2e}"
                 for h, b in zip(self.steps, self.balances)]
        f = self.fit
        lines.append(f"order of the residual: {f.order:.2f}, interval [{f.order_lo:.2f}, {f.order_hi:.2f}]")
        return "\n".join(lines)


def balance_order(steps, runs, zeta=1.0) -> BalanceOrder:
    r"""Theorem 6.1 to the integrator's order: the integrated balance (39) (:func:`energy_balance`) of
    one flow recorded at every step, for several steps, and the order at which its residual shrinks
    (a Runge-Kutta run with Simpson's rule: 4).

    Parameters
    ----------
    steps : sequence of float (S,)
        At least 3 distinct positive steps, in the order of ``runs``.
    runs : sequence of mappings (S,)
        Each with ``times``, ``risk`` and ``dissipation`` recorded at every step of its run (as
        :func:`flow_records` returns them).
    zeta : float, profile or callable, default 1.0
        The learning-rate profile of the runs.

    Returns
    -------
    BalanceOrder
        The balances and the order fit.

    Raises
    ------
    ValueError
        Naming ``runs`` when their number differs from the steps', or the argument of
        :func:`energy_balance` or :func:`~mfattn.analysis.fitting.asymptotic_order` that is invalid.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.longtime import balance_order
    >>> t = np.linspace(0.0, 1.0, 5)
    >>> balance_order([0.5, 0.25], [dict(times=t, risk=1 - t, dissipation=t)])
    Traceback (most recent call last):
    ...
    ValueError: runs: 1 runs for 2 steps
    """
    steps = _vector(steps, "steps")
    if len(runs) != steps.size:
        raise ValueError(f"runs: {len(runs)} runs for {steps.size} steps")
    balances = tuple(energy_balance(r["times"], r["risk"], r["dissipation"], zeta) for r in runs)
    return BalanceOrder(steps, balances, asymptotic_order(steps, [abs(b.residual) for b in balances]))


class Collapse(NamedTuple):
    r"""Two learning-rate profiles compared at equal rescaled time (42), with the integrators' error as
    tolerance. Returned by :func:`profile_collapse`.

    .. rubric:: Fields

    ``s`` : numpy.ndarray (M,)
        The rescaled times compared.
    ``gap`` : numpy.ndarray (M,)
        :math:`|\mathcal E_a-\mathcal E_b|` at equal ``s``, on the finer runs.
    ``tolerance`` : numpy.ndarray (M,)
        Twice the sum of the two profiles' Richardson estimates of their own error.
    ``gap_t`` : numpy.ndarray (M,)
        The control: :math:`|\mathcal E_a-\mathcal E_b|` at equal *physical* time, the times at which
        profile ``a`` reaches ``s``.
    ``s_b`` : numpy.ndarray (M,)
        The rescaled time of profile ``b``'s compared records (equal to ``s``: a check of the grids).

    The properties ``worst`` and ``worst_t`` are the largest ``gap / tolerance`` and
    ``gap_t / tolerance``.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.longtime import Collapse
    >>> c = Collapse(np.array([2.0]), np.array([1e-9]), np.array([1e-8]), np.array([1e-3]), np.array([2.0]))
    >>> round(c.worst, 6), round(c.worst_t)
    (0.1, 100000)
    """

    s: np.ndarray
    gap: np.ndarray
    tolerance: np.ndarray
    gap_t: np.ndarray
    s_b: np.ndarray

    @property
    def worst(self) -> float:
        """The largest ``gap / tolerance``: at most 1 when the profiles collapse."""
        return float(np.max(self.gap / self.tolerance))

    @property
    def worst_t(self) -> float:
        """The largest ``gap_t / tolerance``: the control, compared at equal physical time."""
        return float(np.max(self.gap_t / self.tolerance))

    def summary(self, a: str = "a", b: str = "b", b_run: str = "b") -> str:
        """One line per compared ``s`` (the gap and its tolerance), then the rescaled times of ``b``'s
        compared records, as chapter 04 prints them.

        Parameters
        ----------
        a, b : str, optional
            Short names of the profiles, in ``|E_a - E_b|``.
        b_run : str, optional
            The name of ``b``'s run in the last line.

        Returns
        -------
        str
            The lines, joined by newlines.

        Examples
        --------
        >>> import numpy as np
        >>> from mfattn.analysis.longtime import Collapse
        >>> c = Collapse(np.array([16.0]), np.array([1e-9]), np.array([1e-8]), np.array([1e-3]), np.array([16.0]))
        >>> print(c.summary("const", "dec", "decaying"))
        s =  16: |E_const - E_dec| = 1.0e-09, tolerance 1.0e-08
        s of the decaying run at its checkpoints: [16.0]
        """
        lines = [f"s = {s:3.0f}: |E_{a} - E_{b}| = {g:.1e}, tolerance {e:.1e}"
                 for s, g, e in zip(self.s, self.gap, self.tolerance)]
        return "\n".join(lines + [f"s of the {b_run} run at its checkpoints: {[round(float(v), 6) for v in self.s_b]}"])


def _records_at(values: np.ndarray, targets: np.ndarray, name: str, what: str) -> np.ndarray:
    """Indices of the records whose ``values`` equal ``targets`` (to rounding), or ValueError."""
    idx = np.abs(values[None, :] - targets[:, None]).argmin(1)
    miss = np.abs(values[idx] - targets) > 1e-9 * np.maximum(1.0, np.abs(targets))
    if miss.any():
        raise ValueError(f"{name}: no record at {what} = {targets[miss][0]:g}")
    return idx


def profile_collapse(a, b, s, *, order: int = 4) -> Collapse:
    r"""Compare two learning-rate profiles at equal rescaled time :math:`\mathsf s(t)=2\int_0^t\zeta`
    (42): both trace the same curve :math:`\mathsf s\mapsto\rho_{\mathsf s}`, so their risks may differ
    by the integrators' error only. Each profile is run at a step ``h`` and at ``h / 2``; the change
    estimates the finer run's error (Richardson, :math:`|E_h-E_{h/2}|\,2^p/(2^p-1)` for a scheme of
    order ``p``), and twice the sum of the two profiles' estimates is the tolerance. The control
    compares the same finer runs at equal physical time ``t`` instead.

    Parameters
    ----------
    a, b : tuple (zeta, coarse, fine)
        A profile (anything :func:`mfattn.flows.integrate.as_profile` accepts) and its two runs, at
        steps ``h`` and ``h / 2``, each a mapping with ``times`` and ``risk`` on the same recording grid
        (as :func:`flow_records` returns them). Every ``s`` must be the rescaled time of a record of
        each, and ``b`` must have a record at each time where ``a`` reaches ``s``.
    s : array-like (M,)
        The rescaled times compared.
    order : int, default 4
        The integrator's order (classical Runge-Kutta: 4).

    Returns
    -------
    Collapse
        The gaps at equal ``s``, the tolerances and the control.

    Raises
    ------
    ValueError
        Naming ``a`` or ``b`` when a run lacks a record at some ``s`` (or at some time of the
        control), or its two runs differ in their recording times, and ``order`` when not a positive
        integer.

    Examples
    --------
    The constant profile 1 and the constant 1/2 reach ``s = 2`` at ``t = 1`` and ``t = 2``:

    >>> import numpy as np
    >>> from mfattn.analysis.longtime import profile_collapse
    >>> t = np.arange(0.0, 4.5, 0.5)
    >>> run = lambda zeta, err: dict(times=t, risk=np.exp(-2 * zeta * t) + err)
    >>> c = profile_collapse((1.0, run(1.0, 1e-6), run(1.0, 0)), (0.5, run(0.5, 2e-6), run(0.5, 0)), [2.0, 4.0])
    >>> c.gap.tolist(), bool(c.worst < 1 < c.worst_t)
    ([0.0, 0.0], True)
    """
    check_positive(order, "order", integer=True)
    s = _vector(s, "s")
    out = []
    for (zeta, coarse, fine), name in ((a, "a"), (b, "b")):
        t = _vector(fine["times"], name)
        if not np.array_equal(t, _vector(coarse["times"], name)):
            raise ValueError(f"{name}: its two runs must share their recording times")
        zeta = as_profile(zeta)
        s_rec = np.array([rescaled_time(zeta, float(u)) for u in t])
        idx = _records_at(s_rec, s, name, "s")
        E_h, E_h2 = _vector(coarse["risk"], name), _vector(fine["risk"], name)
        out.append((t, E_h2, idx, np.abs(E_h[idx] - E_h2[idx]) * 2.0**order / (2.0**order - 1), s_rec[idx]))
    (t_a, E_a, i_a, est_a, _), (t_b, E_b, i_b, est_b, s_b) = out
    j_b = _records_at(t_b, t_a[i_a], "b", "t")
    return Collapse(s, np.abs(E_a[i_a] - E_b[i_b]), 2 * (est_a + est_b), np.abs(E_a[i_a] - E_b[j_b]), s_b)


class LongRun(NamedTuple):
    r"""A long Runge-Kutta run of the flow (20), recorded at every step. Returned by :func:`long_run`.

    .. rubric:: Fields

    ``times``, ``risk``, ``dissipation``, ``radius`` : numpy.ndarray (R,)
        The recording times, :math:`\mathcal E(\rho_t)`, :math:`\mathcal I(\rho_t)` and the support
        radius :math:`\max_i\|\omega_i(t)\|`.
    ``ends`` : numpy.ndarray (K,)
        The geometrically spaced times at which the whole measure was kept.
    ``snapshots`` : list of Tensor (N, d_omega)
        The measure at those times.
    ``frames`` : dict of float to Tensor (N, d_omega)
        The measure at logarithmically spaced times (the frames of an animation), on the CPU.
    ``balance`` : EnergyBalance
        The integrated balance (39) over the whole run: its a posteriori accuracy check.

    Examples
    --------
    >>> from mfattn.analysis.longtime import long_run
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, _ = example()
    >>> r = long_run(model, data, heads, T=1.0, step=0.25, n_kept=2, n_frames=3)
    >>> r.ends.tolist(), sorted(r.frames), r.balance.drop > 0
    ([0.5, 1.0], [0.0, 0.25, 0.5, 1.0], True)
    """

    times: np.ndarray
    risk: np.ndarray
    dissipation: np.ndarray
    radius: np.ndarray
    ends: np.ndarray
    snapshots: list
    frames: dict
    balance: EnergyBalance

    def resolved(self, rtol: float = 1e-2) -> "Resolved":
        r"""How far the run follows the flow: :func:`resolved_until` on its records (:math:`\zeta\equiv1`).

        Parameters
        ----------
        rtol : float, default 1e-2
            The relative tolerance of the local identity.

        Returns
        -------
        Resolved
            The time, the index of its record and that of the last kept measure up to it.

        Examples
        --------
        >>> from mfattn.analysis.longtime import long_run
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, _ = example()
        >>> long_run(model, data, heads, T=0.5, step=1 / 64, n_kept=2).resolved()
        Resolved(time=0.5, record=32, kept=1)
        """
        time = resolved_until(self.times, self.risk, self.dissipation, rtol=rtol)
        return Resolved(time, int(np.searchsorted(self.times, time)),
                        int(np.searchsorted(self.ends, time, "right")) - 1)

    def summary_until(self, cut: "Resolved", name: str, bayes_risk: float | None = None) -> str:
        """The run up to where it follows the flow (:meth:`resolved`): the risk, the support radius at the
        start, half way and the end, and the dissipation there, as chapter 04 prints them.

        Parameters
        ----------
        cut : Resolved
            Where the run stops following the flow.
        name : str
            The task's name.
        bayes_risk : float, optional
            The Bayes risk of the task, printed beside the risk.

        Returns
        -------
        str
            Three lines, joined by newlines.

        Examples
        --------
        >>> from mfattn.analysis.longtime import long_run
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, _ = example()
        >>> run = long_run(model, data, heads, T=0.5, step=1 / 64, n_kept=2)
        >>> print(run.summary_until(run.resolved(), "example").splitlines()[0])
        example: the local form of (39) holds to 1% up to t = 0.5
        """
        k, r = cut.record, self.radius
        ref = (f"Bayes risk of the chain: {bayes_risk:.4f}" if bayes_risk is not None
               else f"no Bayes reference for {name}")
        return "\n".join([f"{name}: the local form of (39) holds to 1% up to t = {cut.time:g}",
                          f"   there E {self.risk[0]:.4f} -> {self.risk[k]:.4f} ({ref})",
                          f"   radius {r[0]:.2f} -> {r[k // 2]:.2f} -> {r[k]:.2f} (t = 0, half, end), "
                          f"I = {self.dissipation[k]:.1e}"])

    def summary(self, E_min: float, teacher_radius: float) -> str:
        """The risk gap, the dissipation and the support radius at the start and the end, and the balance
        (39) over the run, as chapter 04 prints them (``E_min`` written ``H``).

        Parameters
        ----------
        E_min : float
            The infimum of the risk.
        teacher_radius : float
            The largest norm of a teacher's head, printed beside the support radius.

        Returns
        -------
        str
            Four lines, joined by newlines.

        Examples
        --------
        >>> from mfattn.analysis.longtime import long_run
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, _ = example()
        >>> print(long_run(model, data, heads, T=1.0, step=0.125, n_kept=2).summary(0.0, 1.0).splitlines()[2])
        energy balance (39) over the run: drop 0.297344
        """
        G, I, r, b = self.risk - E_min, self.dissipation, self.radius, self.balance
        return "\n".join([
            f"T = {self.times[-1]:.0f}: E - H = {G[-1]:.2e} (from {G[0]:.2e}), I = {I[-1]:.2e} (from {I[0]:.2e})",
            f"  support radius {r[0]:.2f} -> {r[-1]:.2f} (largest teacher head {teacher_radius:.2f})",
            f"energy balance (39) over the run: drop {b.drop:.6f}",
            f"  |residual| {abs(b.residual):.1e} (relative {b.relative:.1e})"])


class Resolved(NamedTuple):
    """The part of a run that follows the flow (:meth:`LongRun.resolved`).

    .. rubric:: Fields

    ``time`` : float
        The last recording time up to which the local form of (39) holds.
    ``record`` : int
        The index of that record.
    ``kept`` : int
        The index of the last kept measure up to that time (``-1`` when none).

    Examples
    --------
    >>> from mfattn.analysis.longtime import Resolved
    >>> Resolved(50.65, 1013, 1).kept
    1
    """

    time: float
    record: int
    kept: int


def long_run(model: HeadModel, data: Dataset, heads, *, T: float, step: float, n_kept: int, n_frames: int = 0,
             checkpoint=None) -> LongRun:
    r"""The flow (20) from the measure ``heads`` up to ``T`` by classical Runge-Kutta on the whole
    dataset (:func:`mfattn.flows.integrate.integrate`), recording :math:`\mathcal E`, :math:`\mathcal I`
    and the support radius at every step, and keeping the whole measure at ``n_kept`` geometrically
    spaced times (``T / 2^(n_kept - 1)`` to ``T``, rounded to the step) and at ``n_frames``
    logarithmically spaced steps. With ``checkpoint`` an interrupted run resumes where it stopped
    (saved twenty times along the run).

    Parameters
    ----------
    model : HeadModel
        The model.
    data : Dataset
        The dataset, in the model's dtype and device.
    heads : Tensor (N, d_omega)
        The atoms of :math:`\rho_0`.
    T : float
        The horizon; ``T / step`` must be even (Simpson's rule for the balance).
    step : float
        The Runge-Kutta step.
    n_kept : int
        Number of geometrically spaced times at which the measure is kept.
    n_frames : int, default 0
        Number of logarithmically spaced steps (with step 0) at which the measure is kept for an
        animation; 0 for none.
    checkpoint : str or path, optional
        The checkpoint file of :func:`~mfattn.flows.integrate.integrate`.

    Returns
    -------
    LongRun
        The records, the kept measures and the balance (39) over the run.

    Raises
    ------
    ValueError
        Naming ``T``, ``step``, ``n_kept`` or ``n_frames`` when not positive (``n_frames``: negative),
        or the argument of :func:`~mfattn.flows.integrate.integrate` or :func:`energy_balance` that is
        invalid.

    Examples
    --------
    >>> from mfattn.analysis.longtime import long_run
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, _ = example()
    >>> r = long_run(model, data, heads, T=2.0, step=0.25, n_kept=3)
    >>> r.times.shape, r.ends.tolist(), len(r.snapshots), r.frames
    ((9,), [0.5, 1.0, 2.0], 3, {})
    >>> bool(r.risk[-1] < r.risk[0]), float(r.radius[0]) == support_radius(heads)
    (True, True)
    """
    check_positive(T, "T")
    check_positive(step, "step")
    check_positive(n_kept, "n_kept", integer=True)
    check_positive(n_frames, "n_frames", integer=True, allow_zero=True)
    ends = np.unique(np.round(np.geomspace(T / 2 ** (n_kept - 1), T, n_kept) / step) * step)
    at = sorted({0} | {int(v) for v in np.geomspace(1, T / step, n_frames).round()}) if n_frames else []
    f = integrate(model, data, heads, stepper="rk4", step=step, T=T, record_every=step, keep=0, batch_size=None,
                  dissipation=True, statistics={"radius": support_radius}, progress=False,
                  keep_at=[round(e / step) for e in ends] + at, checkpoint=checkpoint,
                  checkpoint_every=max(1, round(T / step) // 20))
    return LongRun(f.times.numpy(), f.risk.numpy(), f.dissipation.numpy(), f.stats["radius"].numpy(), ends,
                   [f.kept[round(e / step)] for e in ends], {a * step: f.kept[a].cpu() for a in at},
                   energy_balance(f.times, f.risk, f.dissipation))


class Doublings(NamedTuple):
    """A recorded quantity at the ends of the last doublings of a horizon, and its growth over each.

    Returned by :func:`doublings`.

    .. rubric:: Fields

    ``times`` : numpy.ndarray (n + 1,)
        ``T / 2^n, ..., T / 2, T``.
    ``values`` : numpy.ndarray (n + 1,)
        The quantity at the records nearest those times.
    ``increase`` : numpy.ndarray (n,)
        Its increase over each doubling.
    ``fit`` : LogLogFit or None
        The log-log fit of the increase against the time at the end of its doubling, when every
        increase is positive: a slope below 0 makes the increases geometric in the number of
        doublings and their sum finite.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.longtime import doublings
    >>> t = np.linspace(0.0, 64.0, 257)
    >>> d = doublings(t, 1 - 1 / (1 + t), T=64.0, n=4)
    >>> d.times.tolist(), round(float(d.fit.slope), 1)
    ([4.0, 8.0, 16.0, 32.0, 64.0], -1.0)
    """

    times: np.ndarray
    values: np.ndarray
    increase: np.ndarray
    fit: LogLogFit | None


def doublings(times, values, *, T: float, n: int) -> Doublings:
    r"""A quantity recorded along a run, read at the ends of the last ``n`` doublings of the horizon
    ``T`` (the records nearest ``T / 2^n, ..., T``), its increase over each doubling, and, when every
    increase is positive, the power of ``t`` at which the increases fall. Chapter 04 reads the support
    radius this way: increases falling geometrically in the number of doublings sum to a finite
    limit, a bounded radius (Proposition 6.9's hypothesis); constant increases make it creep like
    :math:`\log t`.

    Parameters
    ----------
    times : array-like (R,)
        Recording times.
    values : array-like (R,)
        The quantity at those times.
    T : float
        The horizon, positive.
    n : int
        Number of doublings, at least 2 (a fit needs 3 points when every increase is positive).

    Returns
    -------
    Doublings
        The times, the values, the increases and their fit (``None`` when some increase is not
        positive).

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    A quantity that creeps like ``log t`` grows by the same amount over each doubling:

    >>> import numpy as np
    >>> from mfattn.analysis.longtime import doublings
    >>> t = np.linspace(0.0, 64.0, 257)
    >>> d = doublings(t, np.log1p(t), T=64.0, n=3)
    >>> [round(float(v), 2) for v in d.increase], round(float(d.fit.slope), 2)
    ([0.64, 0.66, 0.68], 0.05)
    """
    t, v = _vector(times, "times"), _vector(values, "values")
    if t.shape != v.shape:
        raise ValueError(f"values: shape {v.shape} differs from times' {t.shape}")
    check_positive(T, "T")
    check_positive(n, "n", integer=True)
    if n < 2:
        raise ValueError(f"n: need at least 2 doublings, got {n}")
    t_dbl = T / 2.0 ** np.arange(n, -1, -1)
    vals = v[np.abs(t[None, :] - t_dbl[:, None]).argmin(1)]
    inc = np.diff(vals)
    return Doublings(t_dbl, vals, inc, loglog_fit(t_dbl[1:], inc) if np.all(inc > 0) else None)


class KLRate(NamedTuple):
    r"""Theorem 6.10's rate with the KL exponent, constant and limit fitted on records of a run, and
    the exponential rate of a Polyak-Lojasiewicz inequality fitted the same way, each tested on records
    of the same run. Returned by :func:`kl_rate`.

    .. rubric:: Fields

    ``fit`` : KLFit
        :func:`kl_fit` on the fitted records (``E_inf`` profiled).
    ``theta`` : float
        The exponent used: ``fit.theta`` clipped to ``[1/2, 0.999]``, where the theorem applies.
    ``c_kl`` : float
        :func:`kl_constant` on the fitted records with that ``theta``.
    ``fit_times`` : numpy.ndarray
        The times of the fitted records.
    ``ratio`` : numpy.ndarray
        :math:`\mathcal I/(\mathcal E-\mathcal E_\infty)` on the fitted records (NaN where
        :math:`\mathcal E\le\mathcal E_\infty`).
    ``pl_lambda`` : float
        Its minimum: the PL constant :math:`\lambda` valid on the fitted records (NaN when some
        energy lies below ``E_inf``).
    ``times`` : numpy.ndarray
        The times of the tested records.
    ``G`` : numpy.ndarray
        :math:`\mathcal E-\mathcal E_\infty` on them.
    ``bound``, ``pl_bound`` : numpy.ndarray or None
        The KL rate and the PL rate from the first tested record on (with :math:`\zeta\equiv1`);
        ``None`` where undefined (a gap that is not positive, or no positive :math:`\lambda`).
    ``worst``, ``worst_pl`` : float
        The largest ``G / bound`` and ``G / pl_bound``: at most 1 where the rate holds (``inf`` where
        the bound is undefined).

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.longtime import kl_rate
    >>> t = np.linspace(0.0, 10.0, 41)
    >>> G = (1 + t) ** -2.0  # the equality flow of theta = 3/4, c = 1: I = G^(3/2)
    >>> r = kl_rate(t, 0.5 + G, G**1.5, on=t >= 0)
    >>> round(r.theta, 3), round(r.worst, 3)
    (0.75, 1.0)
    """

    fit: KLFit
    theta: float
    c_kl: float
    fit_times: np.ndarray
    ratio: np.ndarray
    pl_lambda: float
    times: np.ndarray
    G: np.ndarray
    bound: np.ndarray | None
    pl_bound: np.ndarray | None
    worst: float
    worst_pl: float


def kl_rate(times, risk, dissipation, *, on, out_of_sample: bool = False) -> KLRate:
    r"""Theorem 6.10 (and Remark 6.12) on the records ``on`` of a run with :math:`\zeta\equiv1`: fit the KL
    exponent and limit (:func:`kl_fit`), take the largest :math:`c_{KL}` valid on the fitted records
    (:func:`kl_constant`) and compare :math:`G(t)=\mathcal E-\mathcal E_\infty` with the rate
    :func:`kl_bound` from the first tested record on. Beside it, the exponential rate of a PL inequality
    (:math:`\theta=1/2`) with :math:`\lambda=\min\mathcal I/G` on the fitted records.

    On the whole of ``on`` the rate holds by construction (Gronwall's argument with the largest valid
    constant); with ``out_of_sample`` everything is fitted on the first half of ``on`` and tested on the
    second, where it can fail.

    Parameters
    ----------
    times, risk, dissipation : array-like (R,)
        The run's records (:math:`\mathcal I>0` on ``on``).
    on : array-like of bool (R,) or of int
        The records used (the tail): a mask or indices, in increasing order, at least 5 (10 with
        ``out_of_sample``).
    out_of_sample : bool, default False
        Fit on the first half of ``on`` (``len // 2`` records), test on the rest.

    Returns
    -------
    KLRate
        The fit, the constants, the gaps and both rates with their worst ratios.

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    A power law with a drifting exponent: the rate fitted on the first half fails on the second.

    >>> import numpy as np
    >>> from mfattn.analysis.longtime import kl_rate
    >>> t = np.linspace(0.0, 100.0, 401)
    >>> G = 1 / (1 + t) + 1e-2 / (1 + t) ** 0.5
    >>> I = -np.gradient(G, t) / 2
    >>> r = kl_rate(t, G, I, on=t >= 10, out_of_sample=True)
    >>> float(r.fit_times[0]), float(r.times[0]), bool(r.worst > 1)
    (10.0, 55.0, True)
    """
    t, E, I = _vector(times, "times"), _vector(risk, "risk"), _vector(dissipation, "dissipation")
    if not (t.shape == E.shape == I.shape):
        raise ValueError(f"risk, dissipation: shapes {E.shape}, {I.shape} differ from times' {t.shape}")
    idx = np.asarray(on)
    if idx.dtype == bool and idx.shape != t.shape:
        raise ValueError(f"on: a mask must have the shape of times, {t.shape}, got {idx.shape}")
    idx = np.nonzero(idx)[0] if idx.dtype == bool else idx.astype(int)
    if idx.ndim != 1 or np.any(np.diff(idx) <= 0) or (idx.size and not 0 <= idx[0] <= idx[-1] < t.size):
        raise ValueError("on: expected a mask of the records or increasing indices of them")
    fit_i, test_i = (idx[: idx.size // 2], idx[idx.size // 2:]) if out_of_sample else (idx, idx)
    fit = kl_fit(E[fit_i], I[fit_i])
    theta = float(min(max(fit.theta, 0.5), 0.999))
    c_kl = kl_constant(E[fit_i], I[fit_i], fit.E_inf, theta)
    above = np.all(E[fit_i] > fit.E_inf)
    ratio = I[fit_i] / (E[fit_i] - fit.E_inf) if above else np.full(fit_i.size, math.nan)
    lam = float(np.min(ratio)) if above else math.nan
    G = E[test_i] - fit.E_inf
    bound = pl = None
    worst = worst_pl = math.inf
    if np.all(G > 0):  # else the fit puts E_inf above later energies: its rate cannot hold there
        Z = t[test_i] - t[test_i][0]  # int_{t0}^t zeta, zeta = 1
        bound = kl_bound(G[0], c_kl, theta, Z)
        worst = float(np.max(G / bound))
        if lam > 0:
            pl = kl_bound(G[0], math.sqrt(lam), 0.5, Z)
            worst_pl = float(np.max(G / pl))
    return KLRate(fit, theta, c_kl, t[fit_i], ratio, lam, t[test_i], G, bound, pl, worst, worst_pl)


class PLProfile(NamedTuple):
    r"""The Polyak-Lojasiewicz ratio :math:`\mathcal I/(2(\mathcal E-\mathcal E_{\min}))` along a run.

    Returned by :func:`pl_profile`.

    .. rubric:: Fields

    ``ratio`` : numpy.ndarray (R - 1,)
        The ratio at the records ``1 .. R - 1`` (the first record, at ``t = 0``, left out).
    ``running_min`` : numpy.ndarray (R - 1,)
        Its running minimum: the largest :math:`\lambda` of a PL inequality valid up to each record.
    ``fit`` : LogLogFit
        The log-log fit of the ratio against ``t`` on the tail: a slope whose interval reaches 0 is
        what a PL inequality allows.
    ``times``, ``G`` : numpy.ndarray (R,)
        The run's recording times and :math:`\mathcal E-\mathcal E_{\min}` at every record.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.longtime import pl_profile
    >>> t = np.linspace(0.0, 4.0, 9)
    >>> pl = pl_profile(t, 1 + np.exp(-t), np.exp(-t) / 2, 1.0, tail=t >= 1)  # PL with lambda = 1/4
    >>> pl.ratio.tolist()[:2], round(float(pl.fit.slope), 6), pl.last_record(0.3)
    ([0.25, 0.25], 0.0, 0)
    """

    ratio: np.ndarray
    running_min: np.ndarray
    fit: LogLogFit
    times: np.ndarray
    G: np.ndarray

    def summary(self, radius, lambdas=(1e-2, 3e-3, 1e-3)) -> str:
        r"""The ratio at the start and the end, its tail slope, and for each :math:`\lambda` the part of
        the run where PL holds with it, with the support radius there, as chapter 04 prints them
        (``E_min`` written ``H``).

        Parameters
        ----------
        radius : array-like (R,)
            The support radius at every record of the run.
        lambdas : sequence of float, default (1e-2, 3e-3, 1e-3)
            The PL constants.

        Returns
        -------
        str
            The lines, joined by newlines.

        Examples
        --------
        >>> import numpy as np
        >>> from mfattn.analysis.longtime import pl_profile
        >>> t = np.arange(6.0)
        >>> pl = pl_profile(t, 1 + np.exp(-t), np.exp(-t) / (1 + t), 1.0, tail=t >= 1)  # ratio 1/(2(1+t))
        >>> print(pl.summary(np.ones(6), lambdas=(0.2,)))
        PL ratio I / (2 (E - H)): 2.50e-01 at t = 1, 8.33e-02 at T
          tail slope in t -0.68 [-0.77, -0.59]
        lambda = 2e-01: PL holds while t <= 1, that is while E - H >= 3.68e-01
          support radius there 1.00
        """
        t, G = self.times, self.G
        lines = [f"PL ratio I / (2 (E - H)): {self.ratio[0]:.2e} at t = {t[1]:g}, {self.ratio[-1]:.2e} at T",
                 f"  tail slope in t {self.fit.text(2)}"]
        for lam in lambdas:
            j = self.last_record(lam)  # the records 1..j of the run satisfy PL with this lambda
            lines += ([f"lambda = {lam:.0e}: fails from the first record"] if j == 0 else
                      [f"lambda = {lam:.0e}: PL holds while t <= {t[j]:.3g}, that is while E - H >= {G[j]:.2e}",
                       f"  support radius there {radius[j]:.2f}"])
        return "\n".join(lines)

    def last_record(self, lam: float) -> int:
        r"""The last record up to which a PL inequality with constant ``lam`` holds along the run.

        Parameters
        ----------
        lam : float
            The PL constant :math:`\lambda`.

        Returns
        -------
        int
            The index, among the run's records, of the last record before the ratio first falls below
            ``lam`` (the records ``1 .. k`` satisfy it); 0 when it fails from the first record on.

        Examples
        --------
        >>> import numpy as np
        >>> from mfattn.analysis.longtime import pl_profile
        >>> t = np.arange(6.0)
        >>> pl = pl_profile(t, 1 + np.exp(-t), np.exp(-t) / (1 + t), 1.0, tail=t >= 1)  # ratio 1/(2(1+t))
        >>> pl.last_record(0.2), pl.last_record(0.01)
        (1, 5)
        """
        below = self.running_min < lam
        return int(np.argmax(below)) if np.any(below) else len(self.running_min)


def pl_profile(times, risk, dissipation, E_min: float, *, tail) -> PLProfile:
    r"""The Polyak-Lojasiewicz ratio :math:`\lambda(t)=\mathcal I(\rho_t)/(2(\mathcal E(\rho_t)-\mathcal E_{\min}))`
    along a run (Section 8, Remark 6.11): PL holds on the trajectory exactly when it stays above a
    positive constant. Its running minimum says on which part of the trajectory a given constant
    holds, and its tail slope in ``t`` whether one holds near the limit.

    Parameters
    ----------
    times, risk, dissipation : array-like (R,)
        The run's records, ``R >= 2``; on the tail the risk above ``E_min`` and the dissipation positive.
    E_min : float
        The infimum of the risk (soft labels: the mean label entropy ``H``).
    tail : array-like of bool (R,)
        The records of the tail fit (at least 3, at ``t > 0``).

    Returns
    -------
    PLProfile
        The ratio, its running minimum and the tail fit.

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    The ratio of an algebraic decay falls like a power of ``t``:

    >>> import numpy as np
    >>> from mfattn.analysis.longtime import pl_profile
    >>> t = np.linspace(0.0, 100.0, 101)
    >>> G = (1 + t) ** -2.0
    >>> pl = pl_profile(t, 0.5 + G, G**1.5, 0.5, tail=t >= 50)
    >>> round(float(pl.fit.slope), 2), pl.last_record(0.09)
    (-0.99, 4)
    """
    t, E, I = _vector(times, "times"), _vector(risk, "risk"), _vector(dissipation, "dissipation")
    if not (t.shape == E.shape == I.shape) or t.size < 2:
        raise ValueError(f"risk, dissipation: shapes {E.shape}, {I.shape} differ from times' {t.shape} or hold "
                         "fewer than 2 records")
    tail = np.asarray(tail)
    if tail.dtype != bool or tail.shape != t.shape:
        raise ValueError(f"tail: expected a boolean mask of shape {t.shape}")
    G = E - E_min
    if np.any(G[tail] <= 0) or np.any(I[tail] <= 0):
        raise ValueError("E_min: every energy of the tail must exceed it (and every dissipation there be > 0)")
    ratio = I[1:] / (2 * G[1:])
    return PLProfile(ratio, np.minimum.accumulate(ratio), loglog_fit(t[tail], I[tail] / (2 * G[tail])), t, G)


def certificate_record(model: HeadModel, data: Dataset, heads, ball: Ball, *, generator: torch.Generator,
                       n_starts: int) -> dict:
    r"""The Frank-Wolfe certificate (:func:`mfattn.analysis.static.certificate`) of the measure ``heads``
    (uniform weights) on ``ball``, as JSON values (one point of a sweep that saves its results): the
    gap, the risk, and how many starts of the inner search came within ``1e-3`` of the best value of
    :math:`\Phi` (on a large ball :math:`\Phi` has many local minima, and the gap is a lower estimate).

    Parameters
    ----------
    model : HeadModel
        The model.
    data : Dataset
        The dataset.
    heads : Tensor (N, d_omega)
        The measure's atoms.
    ball : Ball
        The set :math:`K`.
    generator : torch.Generator
        Draws the starts of the inner search.
    n_starts : int
        Random starts of the inner search.

    Returns
    -------
    dict
        ``gap``, ``upper`` (the risk of ``heads``), ``within`` and ``n_starts`` (the starts searched in
        all).

    Raises
    ------
    ValueError
        From :func:`~mfattn.analysis.static.certificate`, naming the argument that is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.longtime import certificate_record
    >>> from mfattn.analysis.static import Ball
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, _ = example()
    >>> c = certificate_record(model, data, heads, Ball(8.0), generator=torch.Generator().manual_seed(0),
    ...                        n_starts=4)
    >>> sorted(c), c["gap"] >= 0, c["upper"] == float(model.risk(data, heads))
    (['gap', 'n_starts', 'upper', 'within'], True, True)
    """
    c = certificate(model, data, heads, None, ball, generator=generator, n_starts=n_starts)
    return dict(gap=c.gap, upper=c.upper, within=c.minimum.count_within(1e-3), n_starts=c.minimum.n_starts)


class Stationarity(NamedTuple):
    r"""What a long run says about Theorem 6.6 and its hypothesis. Returned by :func:`stationarity`.

    .. rubric:: Fields

    ``tail`` : numpy.ndarray of bool (R,)
        The records of the tail, ``t >= tail_start``.
    ``tail_start`` : float
        Where the tail starts.
    ``tail_fit`` : LogLogFit
        :math:`\mathcal I\sim t^a` on the tail (item 2: a slope below -1 is an integrable dissipation).
    ``dissipation_ratio`` : float
        :math:`\mathcal I(T)/\mathcal I(0)`.
    ``speed``, ``speed0`` : float
        The largest particle speed :math:`\max_i\|\nabla\Phi(\omega_i;\rho)\|` at ``T`` and at 0: the
        stationarity residual of Theorem 6.3.
    ``rise`` : float
        The largest increase of :math:`\mathcal E` between consecutive records (item 1: at most the
        integrator's error).
    ``tolerance`` : float
        That error: ``|residual|`` of the balance (39) over the run.
    ``min_gap`` : float
        :math:`\min_t\mathcal E(\rho_t)-\mathcal E_{\min}`.
    ``doublings`` : Doublings
        The support radius over the last doublings of the horizon (precompactness).
    ``w1`` : numpy.ndarray (K - 1,)
        :math:`W_1` between consecutive kept measures.
    ``kept_times`` : numpy.ndarray (K,)
        The times of the kept measures.
    ``inward`` : InwardCheck
        Remark 6.7's criterion for the final measure on the sphere of its support radius
        (:func:`inward_products`).

    The property ``w1_factor`` is the factor by which ``w1`` shrinks per step on average.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.longtime import long_run, stationarity
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, _ = example()
    >>> run = long_run(model, data, heads, T=4.0, step=0.25, n_kept=3)
    >>> st = stationarity(model, data, run, heads, E_min=0.0, T=4.0, tail_from=0.25, n_doublings=3, n_sphere=8,
    ...                   generator=torch.Generator().manual_seed(0))
    >>> st.speed < st.speed0, st.rise <= st.tolerance, st.w1.shape
    (True, True, (2,))
    """

    tail: np.ndarray
    tail_start: float
    tail_fit: LogLogFit
    dissipation_ratio: float
    speed: float
    speed0: float
    rise: float
    tolerance: float
    min_gap: float
    doublings: Doublings
    w1: np.ndarray
    kept_times: np.ndarray
    inward: InwardCheck

    @property
    def w1_factor(self) -> float:
        """The geometric mean of the ratios of consecutive ``w1`` distances."""
        return float((self.w1[-1] / self.w1[0]) ** (1 / max(len(self.w1) - 1, 1)))

    def summary(self) -> str:
        """The measurements, one or two lines each, as chapter 04 prints them (``E_min`` written ``H``).

        Returns
        -------
        str
            The lines, joined by newlines.

        Examples
        --------
        >>> import numpy as np
        >>> from mfattn.analysis.fitting import loglog_fit
        >>> from mfattn.analysis.longtime import Doublings, Stationarity
        >>> fit = loglog_fit([1, 2, 4], [1, 0.25, 0.0625])
        >>> d = Doublings(np.array([1.0, 2.0]), np.array([1.0, 1.5]), np.array([0.5]), None)
        >>> st = Stationarity(None, 1.0, fit, 1e-3, 1e-4, 0.1, -1e-9, 1e-6, 0.01, d, np.array([0.5, 0.25]),
        ...                   np.array([1.0, 2.0, 4.0]), None)
        >>> print(st.summary().splitlines()[1])
        tail fit I ~ t^a on t >= 1: a = -2.00 [-2.00, -2.00]
        """
        d, f = self.doublings, self.tail_fit
        lines = [f"I(T) / I(0) = {self.dissipation_ratio:.1e}; largest particle speed {self.speed:.1e} "
                 f"(at t = 0: {self.speed0:.1e})",
                 f"tail fit I ~ t^a on t >= {self.tail_start:.0f}: a = {f.slope:.2f} "
                 f"[{f.slope_lo:.2f}, {f.slope_hi:.2f}]",
                 f"largest increase of E between consecutive records: {self.rise:.1e}",
                 f"  tolerance: the summed |residuals| of (39), {self.tolerance:.1e}",
                 f"min over the run of E - H = {self.min_gap:.2e}",
                 "support radius at t = " + ", ".join(f"{x:g}" for x in d.times) + ":",
                 "    " + ", ".join(f"{r:.2f}" for r in d.values),
                 "increase over each doubling of t: " + ", ".join(f"{x:.2f}" for x in d.increase)]
        if d.fit is not None:
            lines += [f"increase per doubling ~ t^a: a = {d.fit.text(2)}",
                      "  a < 0 makes the increases geometric in the number of doublings,",
                      "  so their sum, the radius, bounded"]
        lines += ["W1 between the measures kept at t = " + ", ".join(f"{x:g}" for x in self.kept_times) + ":",
                  "    " + ", ".join(f"{w:.2f}" for w in self.w1)]
        if self.inward is not None:
            c = self.inward
            lines += [f"Remark 6.7, rho = rho_T, on the sphere of the support radius at T, {d.values[-1]:.2f}:",
                      f"  {c.fraction_inward:.3f} of {c.points.shape[0]} points point inwards; most outward product "
                      f"{c.minimum:.2e}"]
        return "\n".join(lines)


def stationarity(model: HeadModel, data: Dataset, run: LongRun, heads0, *, E_min: float, T: float, tail_from: float,
                 n_doublings: int = 6, n_sphere: int, generator: torch.Generator) -> Stationarity:
    r"""Theorem 6.6 (with Theorem 6.3 and Proposition 6.9) measured on a long run: the tail slope of the
    dissipation, the particle speeds at the start and the end, the energy's largest rise between
    records against the integrator's error, its smallest gap to ``E_min``, the support radius over the
    last doublings of the horizon (:func:`doublings`), the :math:`W_1` distances between the kept
    measures (:func:`mfattn.analysis.transport.wasserstein`), and Remark 6.7's inward products for the
    final measure on the sphere of the final support radius (:func:`inward_products`).

    Parameters
    ----------
    model : HeadModel
        The model of the run.
    data : Dataset
        Its dataset.
    run : LongRun
        The run (:func:`long_run`), with at least two kept measures.
    heads0 : Tensor (N, d_omega)
        The measure it started from.
    E_min : float
        The infimum of the risk (soft labels: ``H``).
    T : float
        The run's horizon.
    tail_from : float
        The tail starts at ``tail_from * T``, in ``(0, 1)``.
    n_doublings : int, default 6
        Doublings of the horizon read for the support radius.
    n_sphere : int
        Points drawn on the sphere for Remark 6.7.
    generator : torch.Generator
        Draws them.

    Returns
    -------
    Stationarity
        The measurements.

    Raises
    ------
    ValueError
        Naming ``tail_from`` when not in ``(0, 1)``, ``run`` when it kept fewer than two measures, or the
        argument of :func:`doublings` that is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.longtime import long_run, stationarity
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, _ = example()
    >>> run = long_run(model, data, heads, T=4.0, step=0.25, n_kept=3)
    >>> st = stationarity(model, data, run, heads, E_min=0.0, T=4.0, tail_from=0.25, n_doublings=3, n_sphere=8,
    ...                   generator=torch.Generator().manual_seed(0))
    >>> st.tail_start, int(st.tail.sum()), st.doublings.times.tolist()
    (1.0, 13, [0.5, 1.0, 2.0, 4.0])
    """
    from .transport import wasserstein

    if not 0 < tail_from < 1:
        raise ValueError(f"tail_from: must lie in (0, 1), got {tail_from}")
    if len(run.snapshots) < 2:
        raise ValueError("run: needs at least two kept measures")
    t, E, I = run.times, run.risk, run.dissipation
    tail = t >= tail_from * T
    speed, speed0 = (float(model.grad_first_variation(data, W, W).norm(dim=1).max())
                     for W in (run.snapshots[-1], heads0))
    w1 = np.array([wasserstein(a, b, p=1) for a, b in zip(run.snapshots[:-1], run.snapshots[1:])])
    return Stationarity(tail, tail_from * T, loglog_fit(t[tail], I[tail]), I[-1] / I[0], speed, speed0,
                        float(np.max(np.diff(E))), abs(run.balance.residual), float(np.min(E - E_min)),
                        doublings(t, run.radius, T=T, n=n_doublings), w1, run.ends,
                        inward_products(model, data, run.snapshots[-1], None, Ball(float(run.radius[-1])),
                                        n_points=n_sphere, generator=generator))


class KLAnalysis(NamedTuple):
    r"""The Kurdyka-Lojasiewicz analysis of a run's tail (Theorem 6.10, Remarks 6.11, 6.12).

    Returned by :func:`kl_analysis`.

    .. rubric:: Fields

    ``whole`` : KLRate
        Exponent, constant and limit fitted on the whole tail, the rate tested on it (by construction).
    ``at_min`` : KLFit
        The fit with the limit set to ``E_min``.
    ``out_of_sample`` : KLRate
        Fitted on the first half of the tail, tested on the second.
    ``E_min`` : float
        The infimum of the risk.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.longtime import kl_analysis
    >>> t = np.linspace(0.0, 10.0, 41)
    >>> G = (1 + t) ** -2.0  # the equality flow of theta = 3/4, c = 1: I = G^(3/2)
    >>> kla = kl_analysis(t, 0.5 + G, G**1.5, tail=t >= 1, E_min=0.5)
    >>> round(float(kla.at_min.theta), 3), round(kla.whole.worst, 3)
    (0.75, 1.0)
    """

    whole: KLRate
    at_min: KLFit
    out_of_sample: KLRate
    E_min: float

    def summary(self) -> str:
        """The fits and rates, as chapter 04 prints them (``E_min`` written ``H``).

        Returns
        -------
        str
            Eight lines, joined by newlines.

        Examples
        --------
        >>> import numpy as np
        >>> from mfattn.analysis.longtime import kl_analysis
        >>> t = np.linspace(0.0, 10.0, 41)
        >>> G = (1 + t) ** -2.0
        >>> print(kl_analysis(t, 0.5 + G, G**1.5, tail=t >= 1, E_min=0.5).summary().splitlines()[2])
        theta = 0.750 [0.750, 0.750] with E_inf = H
        """
        w, o, kl, kl_H, H = self.whole, self.out_of_sample, self.whole.fit, self.at_min, self.E_min
        rate = ("exponential (theta = 1/2)" if w.theta == 0.5 else
                f"exponent 1/(2 theta - 1) = {1 / (2 * w.theta - 1):.2f}")
        return "\n".join([
            f"E_inf - H = {kl.E_inf - H:.2e} (range [{kl.E_inf_lo - H:.2e}, {kl.E_inf_hi - H:.2e}])",
            f"theta = {kl.theta:.3f} [{kl.theta_lo:.3f}, {kl.theta_hi:.3f}] with E_inf fitted",
            f"theta = {kl_H.theta:.3f} [{kl_H.theta_lo:.3f}, {kl_H.theta_hi:.3f}] with E_inf = H",
            f"c_KL = {w.c_kl:.3e} (fitted equality: {kl.c_kl:.3e})",
            f"PL ratio I/G along the tail: {w.ratio[0]:.2e} -> {w.ratio[-1]:.2e}; lambda = {w.pl_lambda:.2e}",
            f"rate {rate}; worst G / bound = {w.worst:.4f}",
            f"out of sample: theta = {o.fit.theta:.3f}, c_KL = {o.c_kl:.3e} from t in [{o.fit_times[0]:.0f}, "
            f"{o.fit_times[-1]:.0f}]",
            f"  on t in [{o.times[0]:.0f}, {o.times[-1]:.0f}] worst G / bound = {o.worst:.4f}"])


def kl_analysis(times, risk, dissipation, *, tail, E_min: float) -> KLAnalysis:
    r"""The KL analysis of chapter 04 on the tail of a run with :math:`\zeta\equiv1`: :func:`kl_rate` on
    the whole tail and out of sample, and :func:`kl_fit` with the limit set to ``E_min``.

    Parameters
    ----------
    times, risk, dissipation : array-like (R,)
        The run's records.
    tail : array-like of bool (R,)
        The records of the tail (at least 10).
    E_min : float
        The infimum of the risk, below every energy of the tail.

    Returns
    -------
    KLAnalysis
        The three fits and the two rates.

    Raises
    ------
    ValueError
        Naming the argument of :func:`kl_rate` or :func:`kl_fit` that is invalid.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.longtime import kl_analysis
    >>> t = np.linspace(0.0, 10.0, 41)
    >>> G = (1 + t) ** -2.0
    >>> kla = kl_analysis(t, 0.5 + G, G**1.5, tail=t >= 1, E_min=0.5)
    >>> float(kla.out_of_sample.fit_times[0]), float(kla.out_of_sample.times[0])
    (1.0, 5.5)
    """
    E, I = _vector(risk, "risk"), _vector(dissipation, "dissipation")
    tail = np.asarray(tail)
    if tail.dtype != bool or tail.shape != E.shape:
        raise ValueError(f"tail: expected a boolean mask of shape {E.shape}")
    return KLAnalysis(kl_rate(times, E, I, on=tail), kl_fit(E[tail], I[tail], E_inf=E_min),
                      kl_rate(times, E, I, on=tail, out_of_sample=True), E_min)


class CertificateSeries(NamedTuple):
    r"""Frank-Wolfe certificates at the kept measures of a run, against the risk gap.

    Returned by :func:`certificate_series`.

    .. rubric:: Fields

    ``times`` : numpy.ndarray (K,)
        The times of the kept measures.
    ``G`` : numpy.ndarray (K,)
        :math:`\mathcal E(\rho_t)-\mathcal E_{\min}` there.
    ``gaps`` : numpy.ndarray (K,)
        The certificate gaps.
    ``within``, ``n_starts`` : numpy.ndarray of int (K,)
        Starts of the inner search within ``1e-3`` of its best value, and all starts.
    ``fit`` : LogLogFit
        The gap against ``G`` in log-log coordinates (Section 8: a slope above 0, no floor).

    The property ``convex`` says whether ``G <= gap`` at every kept measure (convexity).

    Examples
    --------
    >>> from mfattn.analysis.longtime import certificate_series
    >>> recs = [dict(t=t, gap=4 * g**0.5, upper=1 + g, within=3, n_starts=8)
    ...         for t, g in ((1, 0.1), (2, 0.01), (4, 1e-3))]
    >>> cs = certificate_series(recs, 1.0)
    >>> round(float(cs.fit.slope), 6), cs.convex
    (0.5, True)
    """

    times: np.ndarray
    G: np.ndarray
    gaps: np.ndarray
    within: np.ndarray
    n_starts: np.ndarray
    fit: LogLogFit

    @property
    def convex(self) -> bool:
        """``G <= gap`` at every kept measure."""
        return bool(np.all(self.gaps >= self.G))

    def summary(self, radius: float, teacher_radius: float) -> str:
        """Two lines per kept measure, then the ball, the fit and whether convexity holds, as chapter 04
        prints them (``E_min`` written ``H``).

        Parameters
        ----------
        radius : float
            The radius of the ball :math:`K`.
        teacher_radius : float
            The largest norm of a teacher's head, printed beside it.

        Returns
        -------
        str
            The lines, joined by newlines.

        Examples
        --------
        >>> from mfattn.analysis.longtime import certificate_series
        >>> recs = [dict(t=t, gap=4 * g**0.5, upper=1 + g, within=3, n_starts=8)
        ...         for t, g in ((1, 0.25), (2, 0.01), (4, 1e-4))]
        >>> print(certificate_series(recs, 1.0).summary(3.0, 2.0))  # doctest: +ELLIPSIS
        t =    1: G = E - H = 2.50e-01, gap = 2.00e+00, gap / G^(1/2) = 4.00
          3 of 8 starts within 1e-3 of min Phi
        ...
        K: radius 3.00 (largest teacher head 2.00)
        gap ~ G^b with b = +0.50 [+0.50, +0.50]
        convexity, G <= gap: holds at every kept measure
        """
        lines = [f"t = {t:4.0f}: G = E - H = {G:.2e}, gap = {g:.2e}, gap / G^(1/2) = {g / math.sqrt(G):.2f}\n"
                 f"  {w} of {n} starts within 1e-3 of min Phi"
                 for t, G, g, w, n in zip(self.times, self.G, self.gaps, self.within, self.n_starts)]
        return "\n".join(lines + [f"K: radius {radius:.2f} (largest teacher head {teacher_radius:.2f})",
                                  f"gap ~ G^b with b = {self.fit.text(2)}",
                                  "convexity, G <= gap: " + ("holds at every kept measure" if self.convex
                                                             else "fails at some kept measure")])


def certificate_series(records, E_min: float) -> CertificateSeries:
    r"""Gather the certificates of :func:`certificate_record` at the kept measures of a run and fit the
    gap against the risk gap :math:`G=\mathcal E-\mathcal E_{\min}` (Section 8: the gap tends to zero
    exactly when :math:`G` does, at a positive power; a non-minimising stationary limit flattens it).

    Parameters
    ----------
    records : sequence of mappings (K,)
        Each with ``t`` (the time), ``gap``, ``upper`` (the risk), ``within`` and ``n_starts``; ``K >= 3``.
    E_min : float
        The infimum of the risk, below every ``upper``.

    Returns
    -------
    CertificateSeries
        The series and the fit.

    Raises
    ------
    ValueError
        Naming ``records`` when fewer than 3, and ``E_min`` when some risk is not above it.

    Examples
    --------
    >>> from mfattn.analysis.longtime import certificate_series
    >>> certificate_series([dict(t=1, gap=1.0, upper=2.0, within=1, n_starts=2)], 1.0)
    Traceback (most recent call last):
    ...
    ValueError: records: need at least 3 certificates for a fit, got 1
    """
    if len(records) < 3:
        raise ValueError(f"records: need at least 3 certificates for a fit, got {len(records)}")
    G = np.array([r["upper"] - E_min for r in records])
    if np.any(G <= 0):
        raise ValueError("E_min: every risk must lie above it")
    gaps = np.array([r["gap"] for r in records])
    return CertificateSeries(np.array([r["t"] for r in records], dtype=float), G, gaps,
                             np.array([r["within"] for r in records]), np.array([r["n_starts"] for r in records]),
                             loglog_fit(G, gaps))
