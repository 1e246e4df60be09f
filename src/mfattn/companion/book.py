"""What every chapter imports: profiles, device choice, and the verdicts with their rendering.

A chapter's ``parameters`` cell sets ``profile`` and leaves each size at ``None``;
:func:`resolve_profile` fills the ``None`` entries from the profile table, so papermill can
still override any single parameter. :func:`pick_device` chooses where it runs. The verdicts
(:mod:`mfattn.companion.verdicts`: measured value, the paper's prediction, tolerance, PASS/FAIL, the
counterfactual) and their page (:mod:`mfattn.companion.render`: :func:`~mfattn.companion.render.report` prints each
verdict with figures rounded so that nbval compares them exactly) are separate modules; this one
gathers their names, so a chapter has one import.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from .render import _slug, number_html, report, show_config, verdict_anchor, verdict_table_html  # noqa: F401
from .verdicts import (EVIDENCE, KINDS, RULES, Counterfactual, Verdict, all_passed, check_at_most,  # noqa: F401
                       check_close, check_fit, check_fit_at_most, check_within, decide, fmt, perturbed, shifted,
                       summary)

__all__ = ["pick_device", "resolve_profile"]


def resolve_profile(profiles: dict, profile: str, **overrides) -> SimpleNamespace:
    """Settings of ``profile`` with every non-``None`` override applied.

    Raises ``ValueError`` for an unknown profile or an override the profile does not define.

    Parameters
    ----------
    profiles : dict
        ``{profile name: {setting: value}}``, the chapter's profile table.
    profile : str
        The profile to use, a key of ``profiles``.
    **overrides
        Settings of the profile; a ``None`` value keeps the profile's value.

    Returns
    -------
    types.SimpleNamespace
        The settings as attributes, with ``profile`` first.

    Examples
    --------
    >>> from mfattn.book import resolve_profile
    >>> profiles = {"ci": {"n": 64, "T": 1.0}, "paper": {"n": 4096, "T": 20.0}}
    >>> resolve_profile(profiles, "ci", n=None, T=2.0)
    namespace(profile='ci', n=64, T=2.0)
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
    """``"auto"`` is CUDA when present, else CPU; anything else is passed to ``torch.device``.

    Parameters
    ----------
    device : str or torch.device
        ``"auto"``, or a device such as ``"cpu"`` or ``"cuda:0"``.

    Returns
    -------
    torch.device
        The device.

    Raises
    ------
    ValueError
        If ``device`` is not a valid device.

    Examples
    --------
    >>> from mfattn.book import pick_device
    >>> pick_device("cpu")
    device(type='cpu')
    >>> pick_device().type in ("cpu", "cuda")
    True
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device: {device!r} is not a device ({e})") from None
