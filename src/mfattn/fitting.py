"""Rate fits with confidence intervals (every chapter that reports a slope)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import stats


class LogLogFit(NamedTuple):
    """Least-squares fit ``log y = intercept + slope * log x`` with a t-interval on the slope."""

    slope: float
    intercept: float
    slope_lo: float  # lower end of the confidence interval
    slope_hi: float  # upper end
    level: float  # confidence level of the interval
    n: int  # number of points

    def predict(self, x):
        return np.exp(self.intercept) * np.asarray(x, dtype=float) ** self.slope

    def contains(self, slope: float) -> bool:
        return self.slope_lo <= slope <= self.slope_hi


def loglog_fit(x, y, *, level: float = 0.95) -> LogLogFit:
    """Fit a power law ``y ~ c x^slope`` by ordinary least squares in log-log coordinates.

    Repeated ``x`` values (several seeds per grid point) are allowed; the interval is the
    Student-t interval of the OLS slope, ``slope +- t_{n-2} * se``.
    """
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"y: shape {y.shape} differs from x's {x.shape}")
    if x.size < 3:
        raise ValueError("x: need at least 3 points for a slope with a confidence interval")
    if not (np.all(np.isfinite(x)) and np.all(x > 0)):
        raise ValueError("x: values must be positive and finite")
    if not (np.all(np.isfinite(y)) and np.all(y > 0)):
        raise ValueError("y: values must be positive and finite")
    if not 0 < level < 1:
        raise ValueError(f"level: must lie in (0, 1), got {level}")
    if np.ptp(np.log(x)) == 0:
        raise ValueError("x: needs at least two distinct values")
    res = stats.linregress(np.log(x), np.log(y))
    half = stats.t.ppf(0.5 + level / 2, x.size - 2) * res.stderr
    return LogLogFit(res.slope, res.intercept, res.slope - half, res.slope + half, level, x.size)


class OrderFit(NamedTuple):
    """Asymptotic order of ``err ~ c h^order`` as ``h -> 0`` (see :func:`asymptotic_order`)."""

    order: float  # extrapolated local slope at h = 0
    order_lo: float
    order_hi: float
    level: float
    n: int  # number of local slopes used

    def contains(self, order: float) -> bool:
        return self.order_lo <= order <= self.order_hi


def asymptotic_order(h, err, *, level: float = 0.95) -> OrderFit:
    r"""Order of convergence from errors on a geometric grid of steps, corrections included.

    ``h (S,)`` are steps of one or several runs and ``err (R, S)`` their errors (one row per run).
    Consecutive steps give local slopes :math:`s_j = \log(e_j/e_{j+1})/\log(h_j/h_{j+1})`. With
    :math:`e = c_1h^p + c_2h^{p+1} + \dots`, :math:`s_j = p + a\,\bar h_j + O(h^2)`, so a straight
    line through the pooled local slopes against the step ``h_j`` extrapolated to ``h = 0`` estimates
    ``p``, with a Student-t interval on the intercept. With four or more steps a quadratic is
    used instead, and the half-width is at least the change from the linear extrapolation
    (Richardson's error estimate), so that noise-free errors get an honest interval too. A
    plain log-log fit would instead report the slope biased by the higher-order terms.
    """
    h = np.asarray(h, dtype=float).ravel()
    e = np.atleast_2d(np.asarray(err, dtype=float))
    if e.shape[1] != h.size:
        raise ValueError(f"err: expected {h.size} columns (one per step), got shape {e.shape}")
    if h.size < 3 or np.any(h <= 0) or np.any(np.diff(h) == 0):
        raise ValueError("h: need at least 3 distinct positive steps")
    if not (np.all(np.isfinite(e)) and np.all(e > 0)):
        raise ValueError("err: values must be positive and finite")
    s = np.log(e[:, :-1] / e[:, 1:]) / np.log(h[:-1] / h[1:])  # (R, S-1)
    hm = np.broadcast_to(np.sqrt(h[:-1] * h[1:]), s.shape)
    x, y = hm.ravel(), s.ravel()
    if x.size < 3:
        raise ValueError("h: need at least 3 local slopes (more steps or more runs)")
    lin = stats.linregress(x, y)
    half = stats.t.ppf(0.5 + level / 2, x.size - 2) * lin.intercept_stderr
    order = lin.intercept
    if h.size >= 4 and x.size >= 4:
        # one more term of the expansion; the change it makes is the truncation uncertainty of
        # the extrapolation (deterministic errors, e.g. of an integrator, have no noise at all)
        quad = np.polynomial.polynomial.polyfit(x, y, 2)[0]
        half = max(half, abs(quad - lin.intercept))
        order = quad
    return OrderFit(order, order - half, order + half, level, x.size)
