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
