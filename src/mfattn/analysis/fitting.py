"""Rate fits with confidence intervals (every chapter that reports a slope)."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy import stats

from .._checks import check_positive


class LogLogFit(NamedTuple):
    """Least-squares fit ``log y = intercept + slope * log x`` with a t-interval on the slope.

    A named tuple returned by :func:`loglog_fit`, with the fields below; its floats are NumPy
    ``float64`` scalars.

    Parameters
    ----------
    slope : float
        The least-squares slope in log-log coordinates (the fitted rate).
    intercept : float
        The intercept ``log c`` of the fit ``y ~ c x^slope``.
    slope_lo : float
        Lower end of the Student-t confidence interval on the slope.
    slope_hi : float
        Upper end of that interval.
    level : float
        Confidence level of the interval, in (0, 1).
    n : int
        Number of points fitted.

    Examples
    --------
    >>> from mfattn.analysis.fitting import loglog_fit
    >>> x = [1, 2, 4, 8, 16]
    >>> fit = loglog_fit(x, [3.1, 0.74, 0.19, 0.046, 0.0118])
    >>> round(float(fit.slope), 3), fit.n, fit.level
    (-2.008, 5, 0.95)
    >>> bool(fit.slope_lo < fit.slope < fit.slope_hi)
    True
    """

    slope: float
    intercept: float
    slope_lo: float  # lower end of the confidence interval
    slope_hi: float  # upper end
    level: float  # confidence level of the interval
    n: int  # number of points

    def predict(self, x):
        """The fitted power law ``exp(intercept) * x^slope`` at ``x``.

        Parameters
        ----------
        x : float or array-like of positive floats
            Where to evaluate the fit.

        Returns
        -------
        numpy.ndarray of float64, the shape of ``x``
            The fitted values.

        Examples
        --------
        >>> from mfattn.analysis.fitting import LogLogFit
        >>> fit = LogLogFit(slope=-2.0, intercept=0.0, slope_lo=-2.1,
        ...                 slope_hi=-1.9, level=0.95, n=5)
        >>> fit.predict([1.0, 2.0, 4.0]).tolist()
        [1.0, 0.25, 0.0625]
        """
        return np.exp(self.intercept) * np.asarray(x, dtype=float) ** self.slope

    def text(self, digits: int = 3) -> str:
        """The slope and its interval as a printout shows them, signed: ``-0.489 [-0.559, -0.418]``.

        Parameters
        ----------
        digits : int, default 3
            Decimals, ``>= 0``.

        Returns
        -------
        str

        Raises
        ------
        ValueError
            Naming ``digits`` when it is negative or not an integer.

        Examples
        --------
        >>> from mfattn.analysis.fitting import LogLogFit
        >>> LogLogFit(slope=-0.4891, intercept=0.0, slope_lo=-0.5594, slope_hi=0.0312, level=0.95, n=9).text()
        '-0.489 [-0.559, +0.031]'
        >>> LogLogFit(-0.4891, 0.0, -0.5594, 0.0312, 0.95, 9).text(digits=2)
        '-0.49 [-0.56, +0.03]'
        """
        check_positive(digits, "digits", integer=True, allow_zero=True)
        return f"{self.slope:+.{digits}f} [{self.slope_lo:+.{digits}f}, {self.slope_hi:+.{digits}f}]"

    def contains(self, slope: float) -> bool:
        """Whether ``slope`` lies in the confidence interval ``[slope_lo, slope_hi]``.

        Parameters
        ----------
        slope : float
            A rate to test, e.g. the one a theorem predicts.

        Returns
        -------
        bool
            ``slope_lo <= slope <= slope_hi``.

        Examples
        --------
        >>> from mfattn.analysis.fitting import LogLogFit
        >>> fit = LogLogFit(slope=-0.52, intercept=0.0, slope_lo=-0.6,
        ...                 slope_hi=-0.44, level=0.95, n=8)
        >>> bool(fit.contains(-0.5)), bool(fit.contains(-1.0))
        (True, False)
        """
        return self.slope_lo <= slope <= self.slope_hi


def _paired(x, y):
    # x and y as flat float arrays of one shape, the first check of loglog_fit and rms_fit
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"y: shape {y.shape} differs from x's {x.shape}")
    return x, y


def loglog_fit(x, y, *, level: float = 0.95) -> LogLogFit:
    """Fit a power law ``y ~ c x^slope`` by ordinary least squares in log-log coordinates.

    Repeated ``x`` values (several seeds per grid point) are allowed; the interval is the
    Student-t interval of the OLS slope, ``slope +- t_{n-2} * se``.

    Parameters
    ----------
    x : array-like of float (n,)
        Positive, finite abscissae, at least two of them distinct (any shape; flattened).
    y : array-like of float (n,)
        Positive, finite values, the shape of ``x``.
    level : float, optional
        Confidence level of the interval on the slope, in (0, 1); default 0.95.

    Returns
    -------
    LogLogFit
        The slope, the intercept and the interval, with ``level`` and ``n``.

    Raises
    ------
    ValueError
        If the shapes differ, there are fewer than 3 points, a value is not positive and finite,
        ``level`` is outside (0, 1), or all ``x`` are equal.

    Examples
    --------
    >>> from mfattn.analysis.fitting import loglog_fit
    >>> x = [1, 2, 4, 8, 16]
    >>> fit = loglog_fit(x, [3.1, 0.74, 0.19, 0.046, 0.0118])
    >>> lo, hi = float(fit.slope_lo), float(fit.slope_hi)
    >>> round(float(fit.slope), 3), round(lo, 3), round(hi, 3)
    (-2.008, -2.04, -1.977)
    >>> bool(fit.contains(-2.0))
    True
    """
    x, y = _paired(x, y)
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


def rms_fit(x, y, *, level: float = 0.95) -> LogLogFit:
    r"""Fit a power law to the root mean square over draws: ``(E y^2 | x)^{1/2} ~ c x^slope``.

    :func:`loglog_fit` fits every draw's ``log y``. That is efficient when ``log y`` scatters little
    and symmetrically, as for an average over many heads. It is not for the size of a signed
    quantity, such as a difference of two risks: ``|Z|`` of a centred normal ``Z`` has ``Var log|Z|
    = \pi^2/8 \approx 1.23``, and its values near zero throw the fit about. The mean of ``y^2`` over
    the ``n`` draws at one ``x`` has relative variance ``\kappa/n`` (``\kappa = 2`` for that normal),
    so its half logarithm has variance ``\kappa/(4n)``, ``0.5/n`` against ``1.23/n``: the same draws
    give an interval about 0.64 times as wide.

    The fit: at each distinct ``x``, ``l = \frac12\log\overline{y^2}``; ``\kappa`` is pooled over the
    groups, ``\sum (n_g-1)\,s_g^2/\overline{y^2}_g^{\,2} / \sum(n_g-1)`` (``s_g^2`` the sample variance of
    ``y^2``), which assumes that the law of ``y`` keeps its shape and only scales with ``x``; the
    slope is the weighted least-squares slope of ``l`` on ``\log x`` with weights ``n_g``, and its
    standard error ``(\kappa/4 / \sum n_g(\log x_g-\overline{\log x})^2)^{1/2}``. Where the group means
    scatter about the line more than that variance allows (reduced chi-square above 1: the law is
    not a power law over the range), the standard error is scaled by the square root of the reduced
    chi-square. The interval is Student-t with ``\sum(n_g-1)`` degrees of freedom.

    Parameters
    ----------
    x : array-like of float (n,)
        Positive, finite abscissae with at least 3 distinct values, each repeated at least twice
        (the draws at that ``x``).
    y : array-like of float (n,)
        Finite values ``>= 0``, the shape of ``x``, not all zero at any ``x``.
    level : float, optional
        Confidence level of the interval on the slope, in (0, 1); default 0.95.

    Returns
    -------
    LogLogFit
        The slope of the root mean square, its intercept (``predict`` gives the root mean square
        at ``x``) and interval; ``n`` the number of draws.

    Raises
    ------
    ValueError
        Naming the argument: shapes that differ, fewer than 3 distinct ``x`` or a single draw at one
        of them, values out of range, or ``level`` outside (0, 1).

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.fitting import rms_fit
    >>> x = np.repeat([16.0, 64.0, 256.0], 2)
    >>> y = np.array([1.0, 3.0, 0.5, 1.5, 0.25, 0.75])   # RMS sqrt(5), halved each time
    >>> fit = rms_fit(x, y)
    >>> round(float(fit.slope), 6), round(float(fit.predict(16.0)) ** 2, 6), fit.n
    (-0.5, 5.0, 6)
    """
    x, y = _paired(x, y)
    if not (np.all(np.isfinite(x)) and np.all(x > 0)):
        raise ValueError("x: values must be positive and finite")
    if not (np.all(np.isfinite(y)) and np.all(y >= 0)):
        raise ValueError("y: values must be finite and >= 0")
    if not 0 < level < 1:
        raise ValueError(f"level: must lie in (0, 1), got {level}")
    xs, counts = np.unique(x, return_counts=True)
    if xs.size < 3:
        raise ValueError("x: need at least 3 distinct values")
    if counts.min() < 2:
        raise ValueError("x: every distinct value needs at least 2 draws")
    sq = [y[x == v] ** 2 for v in xs]
    m = np.array([s.mean() for s in sq])
    if np.any(m <= 0):
        raise ValueError("y: all zero at some x")
    kappa = sum(s.var(ddof=1) / mi**2 * (s.size - 1) for s, mi in zip(sq, m)) / float((counts - 1).sum())
    X, ell, w = np.log(xs), 0.5 * np.log(m), counts.astype(float)
    xbar = np.sum(w * X) / w.sum()
    sxx = np.sum(w * (X - xbar) ** 2)
    slope = np.sum(w * (X - xbar) * ell) / sxx
    intercept = np.sum(w * ell) / w.sum() - slope * xbar
    var_ell = max(kappa, 1e-300) / 4.0  # variance of one group's l, times its n_g
    chi2_red = np.sum(w * (ell - intercept - slope * X) ** 2) / var_ell / (xs.size - 2)
    se = math.sqrt(var_ell / sxx * max(1.0, chi2_red))
    half = stats.t.ppf(0.5 + level / 2, int((counts - 1).sum())) * se
    return LogLogFit(slope, intercept, slope - half, slope + half, level, x.size)


def loglog_slopes(x, y) -> np.ndarray:
    r"""Slopes of consecutive points on log-log axes: :math:`(\log y_{k+1} - \log y_k)/(\log x_{k+1} - \log x_k)`.

    Parameters
    ----------
    x : array (n,)
        Positive, distinct abscissae.
    y : array (n, ...)
        Positive values; trailing axes are separate curves.

    Returns
    -------
    ndarray (n - 1, ...)
        ``slopes[k]``: the slope between points ``k`` and ``k + 1``.

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.fitting import loglog_slopes
    >>> x = np.array([1.0, 2.0, 4.0])
    >>> loglog_slopes(x, np.stack([x**2, 3 / x], axis=1)).round(12).tolist()
    [[2.0, -1.0], [2.0, -1.0]]
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.ndim != 1 or len(x) < 2 or not bool((x > 0).all()):
        raise ValueError("x: expected at least two positive abscissae")
    if y.shape[:1] != x.shape or not bool((y > 0).all()):
        raise ValueError(f"y: expected positive values with first axis {len(x)}, got shape {y.shape}")
    logx = np.log(x).reshape(-1, *[1] * (y.ndim - 1))
    logy = np.log(y)
    return (logy[1:] - logy[:-1]) / (logx[1:] - logx[:-1])


class OrderFit(NamedTuple):
    """Asymptotic order of ``err ~ c h^order`` as ``h -> 0`` (see :func:`asymptotic_order`).

    A named tuple with the fields below; its floats are NumPy ``float64`` scalars.

    Parameters
    ----------
    order : float
        The local slopes extrapolated to ``h = 0``: the estimated order.
    order_lo : float
        Lower end of the interval on the order.
    order_hi : float
        Upper end of that interval.
    level : float
        Confidence level of the interval, in (0, 1).
    n : int
        Number of local slopes used (over every run).

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.fitting import asymptotic_order
    >>> h = np.array([0.1, 0.05, 0.025, 0.0125])
    >>> fit = asymptotic_order(h, h**2 * (1 + h))
    >>> round(float(fit.order), 3), fit.n
    (2.002, 3)
    """

    order: float  # extrapolated local slope at h = 0
    order_lo: float
    order_hi: float
    level: float
    n: int  # number of local slopes used

    def contains(self, order: float) -> bool:
        """Whether ``order`` lies in the interval ``[order_lo, order_hi]``.

        Parameters
        ----------
        order : float
            An order to test, e.g. an integrator's nominal order.

        Returns
        -------
        bool
            ``order_lo <= order <= order_hi``.

        Examples
        --------
        >>> from mfattn.analysis.fitting import OrderFit
        >>> fit = OrderFit(order=1.02, order_lo=0.95, order_hi=1.09,
        ...                level=0.95, n=6)
        >>> bool(fit.contains(1.0)), bool(fit.contains(2.0))
        (True, False)
        """
        return self.order_lo <= order <= self.order_hi

    def text(self, digits: int = 3) -> str:
        """The order and its interval as a printout shows them, signed: ``+1.012  [+0.981, +1.043]``.

        Parameters
        ----------
        digits : int, default 3
            Decimals, ``>= 0``.

        Returns
        -------
        str

        Raises
        ------
        ValueError
            Naming ``digits`` when it is negative or not an integer.

        Examples
        --------
        >>> from mfattn.analysis.fitting import OrderFit
        >>> OrderFit(order=1.0123, order_lo=0.9811, order_hi=1.0432, level=0.95, n=6).text()
        '+1.012  [+0.981, +1.043]'
        >>> OrderFit(-0.5, -0.75, 0.25, 0.95, 4).text(digits=1)
        '-0.5  [-0.8, +0.2]'
        """
        check_positive(digits, "digits", integer=True, allow_zero=True)
        return f"{self.order:+.{digits}f}  [{self.order_lo:+.{digits}f}, {self.order_hi:+.{digits}f}]"


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

    Parameters
    ----------
    h : array-like of float (S,)
        At least 3 distinct positive steps (any shape; flattened), in the order of ``err``'s columns.
    err : array-like of float (R, S) or (S,)
        Positive, finite errors: one row per run, one column per step.
    level : float, optional
        Confidence level of the Student-t interval on the intercept; default 0.95.

    Returns
    -------
    OrderFit
        The extrapolated order with its interval, ``level`` and the number of local slopes.

    Raises
    ------
    ValueError
        If ``err`` does not have one column per step, the steps are fewer than 3, not positive or
        not distinct, an error is not positive and finite, or there are fewer than 3 local slopes.

    Examples
    --------
    Errors of a second-order method with a third-order correction, two runs on three steps:

    >>> import numpy as np
    >>> from mfattn.analysis.fitting import asymptotic_order
    >>> h = np.array([0.1, 0.05, 0.025])
    >>> err = np.vstack([h**2 * (1 + h), 2 * h**2 * (1 - h)])
    >>> fit = asymptotic_order(h, err)
    >>> fit.n, bool(fit.contains(2.0))
    (4, True)
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


def reference_gap_fit(N, gaps, n_ref: int, *, level: float = 0.95) -> LogLogFit:
    r"""Fit the rate of a mean gap measured against a finite reference: ``E gap(N) = a (N^p - n_ref^p)``.

    A quantity of ``N`` heads whose mean approaches its large-``N`` limit like ``a N^p`` (``p < 0``),
    measured against a reference population of ``n_ref`` heads instead of the limit itself, has the
    mean ``a N^p - a n_ref^p``: the reference's own gap shifts every point by the same amount and a
    plain log-log fit would steepen the slope. This fits ``a`` and ``p`` by weighted least squares on the
    means over draws at each ``N`` (weights: their standard errors; chapter 09's risk gap), with a
    Student-t interval on ``p`` from the fit's covariance, ``n_N - 2`` degrees of freedom.

    Parameters
    ----------
    N : array-like of float (n_N,)
        Distinct numbers of heads, all below ``n_ref``.
    gaps : array-like of float (n_N, n_draws)
        The gap of each draw at each ``N`` (at least 2 draws, at least 3 values of ``N``).
    n_ref : int
        Size of the reference population.
    level : float, optional
        Confidence level of the interval on ``p``; default 0.95.

    Returns
    -------
    LogLogFit
        ``slope`` is ``p`` and ``intercept`` is ``log a`` (so ``predict`` is the limit-relative law
        ``a N^p``), ``n`` the number of values of ``N``.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.fitting import reference_gap_fit
    >>> N = np.array([16, 64, 256, 1024])
    >>> gaps = 2.0 * (N[:, None] ** -1.0 - 4096.0 ** -1.0) * np.array([0.99, 1.0, 1.01])
    >>> fit = reference_gap_fit(N, gaps, 4096)
    >>> round(float(fit.slope), 6), round(float(np.exp(fit.intercept)), 6)
    (-1.0, 2.0)
    """
    from scipy.optimize import curve_fit

    N = np.asarray(N, dtype=float).ravel()
    gaps = np.asarray(gaps, dtype=float)
    if gaps.ndim != 2 or gaps.shape[0] != N.size or gaps.shape[1] < 2:
        raise ValueError(f"gaps: expected shape ({N.size}, n_draws >= 2), got {gaps.shape}")
    if N.size < 3 or np.unique(N).size != N.size:
        raise ValueError("N: need at least 3 distinct values")
    if not (np.all(np.isfinite(N)) and np.all(N > 0)):
        raise ValueError("N: values must be positive and finite")
    if not np.all(np.isfinite(gaps)):
        raise ValueError("gaps: values must be finite")
    if not (isinstance(n_ref, (int, np.integer)) and n_ref > N.max()):
        raise ValueError(f"n_ref: expected an integer above every N, got {n_ref!r}")
    if not 0 < level < 1:
        raise ValueError(f"level: must lie in (0, 1), got {level}")
    mean = gaps.mean(1)
    se = gaps.std(1, ddof=1) / np.sqrt(gaps.shape[1])
    se = np.maximum(se, 1e-12 * np.abs(mean).max() + 1e-300)  # a noiseless draw set still fits

    def law(n, log_a, p):
        return np.exp(log_a) * (n**p - float(n_ref) ** p)

    start = loglog_fit(N, np.abs(mean) + 1e-300) if np.all(mean > 0) else None
    p0 = (float(start.intercept), float(min(start.slope, -0.05))) if start else (0.0, -0.5)
    (log_a, p), cov = curve_fit(law, N, mean, p0=p0, sigma=se, absolute_sigma=False, maxfev=20000)
    half = stats.t.ppf(0.5 + level / 2, N.size - 2) * math.sqrt(max(cov[1, 1], 0.0))
    return LogLogFit(p, log_a, p - half, p + half, level, N.size)


def z_scores(samples, expected, *, ddof: int = 1) -> np.ndarray:
    r"""How far the mean of each row of ``samples`` lies from ``expected``, in standard errors:
    :math:`z_k = (\bar s_k - e_k)/(\hat\sigma_k/\sqrt n)`, with :math:`\hat\sigma_k` the standard
    deviation of row ``k`` (``ddof`` delta degrees of freedom) and ``n`` its number of samples.

    Parameters
    ----------
    samples : array-like of float (K, n)
        ``n`` samples of each of ``K`` quantities (Monte-Carlo replicates at each of ``K`` settings).
    expected : float or array-like of float (K,)
        The exact mean of each row.
    ddof : int, default 1
        Delta degrees of freedom of the standard deviation, ``0 <= ddof < n``.

    Returns
    -------
    numpy.ndarray of float64 (K,)
        The signed deviations in standard errors (``abs(...).max()`` is the worst row).

    Raises
    ------
    ValueError
        Naming ``samples`` when it is not two-dimensional with more than ``ddof`` columns, or has a row
        of equal values (no spread), ``expected`` when it is not one value per row, or ``ddof`` when it is
        negative or not an integer.

    Examples
    --------
    >>> from mfattn.analysis.fitting import z_scores
    >>> z_scores([[1.0, 3.0], [0.0, 4.0]], [1.0, 1.0]).tolist()   # standard errors 1 and 2
    [1.0, 0.5]
    """
    check_positive(ddof, "ddof", integer=True, allow_zero=True)
    s = np.asarray(samples, dtype=np.float64)
    if s.ndim != 2 or s.shape[1] <= ddof:
        raise ValueError(f"samples: expected a 2-D array (K, n) with n > ddof = {ddof}, got shape {s.shape}")
    e = np.asarray(expected, dtype=np.float64)
    if e.ndim == 0:
        e = np.full(s.shape[0], e)
    if e.shape != s.shape[:1]:
        raise ValueError(f"expected: expected a number or one per row ({s.shape[0]}), got shape {e.shape}")
    se = s.std(1, ddof=ddof) / np.sqrt(s.shape[1])
    if np.any(se == 0):
        raise ValueError("samples: a row has no spread, so no standard error")
    return (s.mean(1) - e) / se


def max_relative_deviation(a, b) -> float:
    """The largest deviation of ``a`` from ``b``, relative to the largest entry of ``b``:
    ``max |a - b| / max |b|`` (a computed array against its reference, in one number).

    Parameters
    ----------
    a : array-like or Tensor
        The computed values.
    b : array-like or Tensor
        The reference, the shape of ``a``, not all zero. Tensors may live on any device.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        Naming ``b`` when its shape differs from ``a``'s or it is all zero.

    Examples
    --------
    >>> from mfattn.analysis.fitting import max_relative_deviation
    >>> max_relative_deviation([1.0, 2.5, -4.0], [1.0, 2.0, -4.0])
    0.125
    """
    def values(x):
        return np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=np.float64)

    a, b = values(a), values(b)
    if a.shape != b.shape:
        raise ValueError(f"b: shape {b.shape} differs from a's {a.shape}")
    top = np.abs(b).max(initial=0.0)
    if not top > 0:
        raise ValueError("b: expected a reference that is not all zero")
    return float(np.abs(a - b).max() / top)
