"""Helpers every chapter uses: profiles, device choice, verdicts.

A chapter's ``parameters`` cell sets ``profile`` and leaves each size at ``None``;
:func:`resolve_profile` fills the ``None`` entries from the profile table, so papermill can
still override any single parameter. A chapter ends with :func:`report`, which prints each
verdict (measured value, the paper's prediction, tolerance, PASS/FAIL) with figures rounded so
that nbval compares them exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import torch


def resolve_profile(profiles: dict, profile: str, **overrides) -> SimpleNamespace:
    """Settings of ``profile`` with every non-``None`` override applied.

    Raises ``ValueError`` for an unknown profile or an override the profile does not define.
    """
    if profile not in profiles:
        raise ValueError(f"profile: {profile!r} is not one of {sorted(profiles)}")
    cfg = dict(profiles[profile])
    for k, v in overrides.items():
        if k not in cfg:
            raise ValueError(f"{k}: not a setting of profile {profile!r}")
        if v is not None:
            cfg[k] = v
    return SimpleNamespace(profile=profile, **cfg)


def pick_device(device: str = "auto") -> torch.device:
    """``"auto"`` is CUDA when present, else CPU; anything else is passed to ``torch.device``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device: {device!r} is not a device ({e})") from None


def fmt(x: float, sig: int = 3, floor: float = 0.0) -> str:
    """``x`` printed to the precision a run determines, the same on every machine.

    ``sig`` significant digits in scientific notation (the nbval sanitiser compares two of the
    default three); ``sig=0`` prints only the nearest power of ten, ``~1e-06``, for a figure whose
    digits depend on floating-point rounding (the floor of a local solve, a chaotic search) while
    its size does not. A value with ``|x| < floor`` prints as ``<FLOOR`` (``>-FLOOR`` when negative):
    rounding-level figures (float64 identities, a norm at 1e-16 on one CPU and 0 on another) and the
    floors of local solves then print alike everywhere.
    """
    if not isinstance(sig, int) or sig < 0:
        raise ValueError(f"sig: expected a non-negative integer, got {sig!r}")
    if not math.isfinite(floor) or floor < 0:
        raise ValueError(f"floor: expected a finite non-negative number, got {floor!r}")
    if not math.isfinite(x):
        return str(x)
    if abs(x) < floor:
        return f">-{floor:.0e}" if x < 0 else f"<{floor:.0e}"
    if sig == 0:
        if x == 0:
            return "0"
        return f"{'-' if x < 0 else ''}~1e{round(math.log10(abs(x))):+03d}"
    return f"{x:.{sig - 1}e}"


@dataclass(frozen=True)
class Verdict:
    claim: str  # what is checked, with the paper's reference
    measured: float
    predicted: str  # the paper's prediction, as text (a value, a bound, an interval)
    tolerance: str  # the tolerance and where it comes from
    passed: bool
    sig: int = 3  # significant digits of the measured value the run determines (see fmt)
    floor: float = 0.0  # measured values below this in size are rounding and print as <floor

    def line(self) -> str:
        return (
            f"[{'PASS' if self.passed else 'FAIL'}] {self.claim}\n"
            f"       measured {fmt(self.measured, self.sig, self.floor)} | predicted {self.predicted} | "
            f"tolerance {self.tolerance}"
        )


def check_close(claim: str, measured: float, predicted: float, tol: float, why: str = "", *, sig: int = 3,
                floor: float = 0.0) -> Verdict:
    """PASS when ``|measured - predicted| <= tol``. ``sig`` and ``floor`` say how precisely the run
    determines ``measured`` (see :func:`fmt`); they change the printout, never the decision."""
    ok = math.isfinite(measured) and abs(measured - predicted) <= tol
    return Verdict(claim, measured, fmt(predicted), f"+-{fmt(tol)}" + (f" ({why})" if why else ""), ok, sig, floor)


def check_at_most(claim: str, measured: float, bound: float, tol: float = 0.0, why: str = "", *, sig: int = 3,
                  floor: float = 0.0) -> Verdict:
    """PASS when ``measured <= bound + tol`` (``sig``, ``floor``: as for :func:`check_close`)."""
    ok = math.isfinite(measured) and measured <= bound + tol
    return Verdict(claim, measured, f"<= {fmt(bound)}", f"+{fmt(tol)}" + (f" ({why})" if why else ""), ok, sig,
                   floor)


def check_within(claim: str, measured: float, lo: float, hi: float, *, interval=None, hi_open: bool = False,
                 why: str = "") -> Verdict:
    """PASS when ``lo <= measured <= hi`` (``< hi`` with ``hi_open``); with ``interval = (a, b)``, a
    confidence interval of the measurement, the whole interval must lie in the range."""
    a, b = (measured, measured) if interval is None else interval
    ok = all(math.isfinite(x) for x in (measured, a, b)) and lo <= a and (b < hi if hi_open else b <= hi)
    rng = f"[{fmt(lo)}, {fmt(hi)}{')' if hi_open else ']'}"
    tol = "point value" if interval is None else f"interval [{fmt(a)}, {fmt(b)}]"
    return Verdict(claim, measured, f"in {rng}", tol + (f" ({why})" if why else ""), ok)


def check_fit(claim: str, fit, predicted: float, why: str = "") -> Verdict:
    """PASS when the interval of a fitted rate contains ``predicted``: the slope of a
    :class:`~mfattn.fitting.LogLogFit` or the order of an :class:`~mfattn.fitting.OrderFit`."""
    if hasattr(fit, "slope"):
        value, lo, hi = fit.slope, fit.slope_lo, fit.slope_hi
    else:
        value, lo, hi = fit.order, fit.order_lo, fit.order_hi
    tol = f"{fit.level:.0%} CI [{lo:+.3f}, {hi:+.3f}]" + (f" ({why})" if why else "")
    return Verdict(claim, value, f"{predicted:+.3f}", tol, fit.contains(predicted))


def report(verdicts) -> bool:
    """Print every verdict and a closing count; return True when all passed."""
    verdicts = list(verdicts)
    for v in verdicts:
        print(v.line())
    n_fail = sum(not v.passed for v in verdicts)
    print(f"verdicts: {len(verdicts) - n_fail} PASS, {n_fail} FAIL")
    return n_fail == 0
