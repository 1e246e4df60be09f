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

from .render import result_anchor, number_html, print_grid, report, show_config, verdict_anchor, verdict_table_html  # noqa: F401
from .verdicts import (EVIDENCE, FORMS, KINDS, MAX_MARGIN, RULES, Counterfactual, Verdict, all_passed,  # noqa: F401
                       assess, check_at_most, check_close, check_fit, check_fit_at_most, check_within, competitor,
                       decide, fmt, perturbed, resolution, shifted, summary)

__all__ = ["pick_device", "resolve_profile", "setup"]


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
    >>> from mfattn.companion.book import resolve_profile
    >>> profiles = {"ci": {"n": 64, "T": 1.0}, "paper": {"n": 4096, "T": 20.0}}
    >>> resolve_profile(profiles, "ci", n=None, T=2.0)
    namespace(profile='ci', n=64, T=2.0)
    """
    if profile not in profiles:
        raise ValueError(f"profile: {profile!r} is not one of {sorted(profiles)}")
    for k in overrides:
        if k not in profiles[profile]:
            raise ValueError(f"{k}: not a setting of profile {profile!r}")
    given = {k: v for k, v in overrides.items() if v is not None}
    return SimpleNamespace(profile=profile, **(dict(profiles[profile]) | given))


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
    >>> from mfattn.companion.book import pick_device
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


def setup(chapter: str, namespace: dict) -> SimpleNamespace:
    """A chapter's prologue in one call: its parameters, device, figures' style and cache folder.

    Reads the parameters the chapter declares in its front matter
    (:func:`mfattn.companion.chapters.declared`), takes the profile named by ``namespace["profile"]``,
    applies every declared parameter that ``namespace`` sets (papermill injects ``-p NAME VALUE`` as a
    global of the notebook; each is checked as ``python -m mfattn run`` checks it), picks the device
    (``namespace["device"]``), sets the figures' style (:func:`mfattn.companion.plotting.use`) and shows the
    parameter table (:func:`~mfattn.companion.render.show_config`).

    Parameters
    ----------
    chapter : str
        The chapter's name or number (``"07"``), found in the checkout (the working directory's or the
        package's).
    namespace : dict
        The notebook's ``globals()``: ``profile``, ``device``, ``seed``, ``cache_dir`` from its
        parameters cell, and any declared parameter papermill injected.

    Returns
    -------
    types.SimpleNamespace
        ``profile`` and every declared parameter, then ``seed``, ``device`` (a ``torch.device``) and
        ``folder`` (``cache_dir``, or a new temporary folder that goes with the process,
        :func:`mfattn.companion.sweep.scratch_folder`: finished work of :mod:`mfattn.companion.sweep`).

    Raises
    ------
    ValueError
        Naming the parameter whose value is invalid, or the chapter when it declares no parameters.

    Examples
    --------
    >>> from mfattn.companion.book import setup
    >>> cfg = setup("07", {"profile": "ci", "device": "cpu", "seed": 3, "n_seeds": 2})  # doctest: +ELLIPSIS
    parameters (this run, then each profile's value):
    ...
    >>> cfg.profile, cfg.seed, cfg.n_seeds, cfg.T, str(cfg.device)
    ('ci', 3, 2, 1.0, 'cpu')
    >>> setup("07", {"profile": "ci", "n_seeds": -1})
    Traceback (most recent call last):
    ...
    ValueError: n_seeds = -1: must be > 0
    """
    from . import plotting
    from .chapters import check_values, declared, find_chapter, repo_root
    from .sweep import scratch_folder

    src = find_chapter(repo_root(), chapter)
    if not (table := declared(src)):
        raise ValueError(f"chapter: {src.name} declares no parameters in its front matter")
    given = {name: namespace[name] for name in [*table, "profile", "device", "seed", "cache_dir"]
             if namespace.get(name) is not None}
    values = check_values(src, given)  # every declared parameter, the profile's value where none is given
    cfg = SimpleNamespace(profile=values["profile"], **{name: values[name] for name in table},
                          seed=values.get("seed", 0), device=values.get("device", "auto"))
    plotting.use()
    show_config(cfg, src, namespace)  # the device as the reader set it; cfg.device is then what it picks
    cfg.device = pick_device(cfg.device)
    cfg.folder = values.get("cache_dir") or scratch_folder(src.stem[:2])
    return cfg
