"""Training dynamics: finite-head SGD (19) and the limiting PDE (20) by its characteristics (21).

Used by chapter 02 (propagation of chaos, Theorem 5.2) and the long-time and stability chapters.

* :func:`sgd` runs (19) exactly, ``omega^{k+1} = omega^k + 2 eps zeta(k eps) G_i`` with ``G_i`` of
  (17) on a fresh uniformly drawn minibatch of sequences per step (one sequence is the theorem),
  or full-batch gradient descent (``batch_size=None``), where the martingale term vanishes.
* :func:`reference_flow` integrates the characteristics (21) of a reference population of
  particles with the classical Runge-Kutta scheme. A particle's drift depends on the measure
  only through the pulled-back residual ``G(t) = (softmax z^{rho_t} - Y) W_out^T``, an
  ``(n, L, d_x)`` tensor; the flow stores it at every Runge-Kutta stage, so that
  :meth:`~mfattn.flows.integrate.Run.characteristics` moves any other points (the *tagged* characteristics
  started from an SGD run's own initial heads) with exactly the same scheme afterwards, at the
  cost of their own gradients only.

Both are :func:`mfattn.flows.integrate.integrate` with a named stepper (``sgd``/``gd`` and ``rk4``); they
record what a chapter needs at the recording times ``t = j * record_every`` only, so memory does not
grow with the number of steps. The learning-rate profiles (:class:`Constant`, :class:`Decaying`) live
in :mod:`mfattn.flows.integrate` and are importable from here.
"""

from __future__ import annotations

import math

import torch

from .._checks import check_generator, check_positive
from .integrate import (Constant, Decaying, Run, check_start, record_grid, as_profile, integrate,  # noqa: F401
                        rescaled_time)
from ..models.particles import ParticleModel

__all__ = [
    "Trajectory",
    "sgd",
    "ReferenceFlow",
    "reference_flow",
    "err_bound",
    "uniform_ball",
    "initial_measure",
]


# ------------------------------------------- SGD (19) and the reference flow (21): the integrator
#: What :func:`sgd` returns: the integrator's :class:`~mfattn.flows.integrate.Run`.
Trajectory = Run
#: What :func:`reference_flow` returns: the integrator's :class:`~mfattn.flows.integrate.Run` (``population``
#: is its ``heads``).
ReferenceFlow = Run


def sgd(
    model: ParticleModel,
    data,
    heads0: torch.Tensor,
    *,
    eps: float,
    T: float,
    record_every: float,
    generator: torch.Generator,
    zeta=1.0,
    batch_size: int | None = 1,
    weights: torch.Tensor | None = None,
    keep: int | None = None,
    dissipation: bool = False,
    statistics: dict | None = None,
    progress: bool = True,
) -> Run:
    r"""Finite-head SGD, eq. (19): :math:`\omega_i^{k+1} = \omega_i^k + 2\varepsilon\zeta(k\varepsilon)G_i`.

    ``G_i`` is the stochastic gradient (17) on ``batch_size`` sequences drawn uniformly with
    replacement from ``data`` with ``generator`` at every step (``batch_size=1`` is the theorem;
    ``None`` uses the whole dataset, i.e. full-batch gradient descent with the exact drift).
    Runs ``T / eps`` steps and records at ``t = j * record_every``, ``j = 0..T/record_every``:
    the risk, the first ``keep`` heads, the dissipation (38) on the full dataset when
    ``dissipation``, and ``statistics``, a dict of functions ``heads (N, d_omega) -> float``.

    This is :func:`mfattn.flows.integrate.integrate` with the ``sgd`` stepper (``gd`` for
    ``batch_size=None``), under the paper's names.

    Parameters
    ----------
    model : ParticleModel
        The model, e.g. a :class:`~mfattn.models.model.HeadModel`.
    data : dataset object
        The model's dataset (:class:`mfattn.Dataset` for heads), in the model's dtype and device.
    heads0 : Tensor (N, d_omega)
        Initial heads :math:`\omega^0`, model's dtype and device.
    eps : float
        Step size :math:`\varepsilon`; ``record_every`` must be a whole number of steps. It keeps the
        paper's symbol of (19), where :math:`\varepsilon` is both the step and the time a step
        stands for; :func:`~mfattn.flows.integrate.integrate`, which serves every stepper, calls
        the same number ``step``.
    T : float
        Final time (``T / eps`` steps); a whole number of ``record_every``.
    record_every : float
        Time between two recordings.
    generator : torch.Generator
        Draws the minibatches (on the CPU).
    zeta : float, profile or callable, default 1.0
        Learning-rate profile :math:`\zeta`, anything :func:`~mfattn.flows.integrate.as_profile` accepts.
    batch_size : int or None, default 1
        Sequences per step, drawn with replacement; ``None`` for full-batch gradient descent.
    weights : Tensor (N,) or None
        Fixed weights of the heads, on the simplex; uniform when ``None``.
    keep : int or None
        Number of heads recorded (the first ones); all when ``None``.
    dissipation : bool, default False
        Also record the dissipation (38).
    statistics : dict of str to callable, optional
        Functions of all the heads ``(N, d_omega) -> float``, recorded under their names.
    progress : bool, default True
        Show a progress bar over the steps.

    Returns
    -------
    Run
        The recordings at ``R = T / record_every + 1`` times (``heads``, ``risk``, ``dissipation``,
        ``stats``) and the final heads.

    Raises
    ------
    ValueError
        Naming the argument that is invalid (e.g. ``eps`` when it does not divide ``record_every``).

    Examples
    --------
    >>> import torch
    >>> from mfattn.flows.dynamics import sgd
    >>> from mfattn.models.tasks import example
    >>> model, data, h0, _ = example()
    >>> mean_norm = lambda h: float(h.norm(dim=1).mean())
    >>> run = sgd(model, data, h0, eps=0.1, T=1.0, record_every=0.5,
    ...           generator=torch.Generator().manual_seed(1), statistics={"norm": mean_norm},
    ...           progress=False)
    >>> run.times.tolist(), run.heads.shape, run.stats["norm"].shape
    ([0.0, 0.5, 1.0], torch.Size([3, 5, 24]), torch.Size([3]))
    >>> bool(run.risk[-1] < run.risk[0])
    True
    """
    check_start(model, data, heads0, weights)
    record_grid(T, record_every, eps, "eps")
    check_generator(generator)
    if keep is not None:
        check_positive(keep, "keep", integer=True)
    return integrate(model, data, heads0, stepper="sgd" if batch_size is not None else "gd", step=eps, T=T,
                     record_every=record_every, zeta=zeta, batch_size=batch_size, generator=generator,
                     weights=weights, keep=keep, dissipation=dissipation, statistics=statistics,
                     progress=progress, desc="SGD steps")


def reference_flow(
    model: ParticleModel,
    data,
    heads0: torch.Tensor,
    *,
    T: float,
    step: float,
    record_every: float,
    zeta=1.0,
    keep_stages: bool = True,
    keep: int | None = None,
    statistics: dict | None = None,
    keep_at=(),
    progress: bool = True,
) -> Run:
    r"""Integrate the characteristics (21), :math:`\dot W = -2\zeta(t)\nabla\Phi(W;\rho_t)`, of the
    reference population ``heads0`` (uniform weights) with step ``step`` up to ``T``.

    The population's empirical measure stands for :math:`\rho_t`; its own sampling error is of
    order ``N_ref^{-1/2}`` and sets the floor of any comparison with it. (Started from an empirical
    measure, the PDE (20) stays empirical: this is then its exact solution, up to the integrator.)

    This is :func:`mfattn.flows.integrate.integrate` with the ``rk4`` stepper on the whole dataset,
    recording the dissipation (which the first Runge-Kutta stage of each step gives at no extra
    cost). ``keep_stages=False`` keeps no stage residuals (long runs, whose residuals would fill the
    memory); :meth:`~mfattn.flows.integrate.Run.characteristics` then cannot be called. ``keep`` records
    only the first ``keep`` particles (0: none; all by default) and ``statistics``, a dict of functions
    ``particles (N, d_omega) -> float``, is evaluated on all of them at every recording time; the last
    population is always returned whole, as ``final``. ``keep_at`` keeps the whole population at a
    few chosen steps between the recordings (the frames of chapter 04's animation of a long run,
    whose recordings keep no particles).

    Parameters
    ----------
    model : ParticleModel
        The model, e.g. a :class:`~mfattn.models.model.HeadModel`.
    data : dataset object
        The model's dataset, in the model's dtype and device.
    heads0 : Tensor (N_ref, d_omega)
        The reference population at ``t = 0`` (uniform weights); the name is :func:`sgd`'s and
        :func:`~mfattn.flows.integrate.integrate`'s.
    T : float
        Final time; a whole number of ``record_every``.
    step : float
        Runge-Kutta step ``h``; ``record_every`` must be a whole number of steps.
    record_every : float
        Time between two recordings.
    zeta : float, profile or callable, default 1.0
        Learning-rate profile, anything :func:`~mfattn.flows.integrate.as_profile` accepts.
    keep_stages : bool, default True
        Keep the residual of every stage, for :meth:`~mfattn.flows.integrate.Run.characteristics`.
    keep : int or None
        Number of particles recorded (the first ones, possibly 0); all when ``None``.
    statistics : dict of str to callable, optional
        Functions of all the particles ``(N_ref, d_omega) -> float``, recorded under their names.
    keep_at : iterable of int, optional
        Step indices ``k`` (``0 <= k <= T / step``) after which every particle is kept, in
        ``kept[k]`` (time ``k * step``).
    progress : bool, default True
        Show a progress bar over the steps.

    Returns
    -------
    Run
        The recordings at ``R = T / record_every + 1`` times (``population``, ``risk``,
        ``dissipation``, ``stats``), the final population, the stage residuals and the populations
        kept at ``keep_at``.

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.flows.dynamics import reference_flow
    >>> from mfattn.models.tasks import example
    >>> model, data, _, _ = example()
    >>> w0 = torch.randn(6, model.d_omega, generator=torch.Generator().manual_seed(0),
    ...                  dtype=torch.float64)
    >>> flow = reference_flow(model, data, w0, T=1.0, step=0.25, record_every=0.5,
    ...                       keep=0, keep_stages=False, progress=False)
    >>> flow.population.shape, flow.stage_residuals, flow.final.shape
    (torch.Size([3, 0, 24]), None, torch.Size([6, 24]))
    >>> bool((flow.risk.diff() < 0).all()), bool((flow.dissipation >= 0).all())
    (True, True)
    >>> tags = reference_flow(model, data, w0, T=1.0, step=0.25, record_every=0.5,
    ...                       progress=False).stage_residuals
    >>> tags.shape   # (steps, Runge-Kutta stages, n, L, d_x)
    torch.Size([4, 4, 4, 3, 3])
    """
    check_start(model, data, heads0, None)
    return integrate(model, data, heads0, stepper="rk4", step=step, T=T, record_every=record_every, zeta=zeta,
                     batch_size=None, keep=keep, dissipation=True, statistics=statistics, keep_stages=keep_stages,
                     keep_at=keep_at, progress=progress, desc="reference flow")


# ------------------------------------------------------- a compactly supported rho_0
def uniform_ball(n: int, d: int, radius: float, *, generator: torch.Generator,
                 dtype: torch.dtype = torch.float64) -> torch.Tensor:
    r"""``n`` i.i.d. points uniform on the ball :math:`\{w\in\mathbb R^d : \|w\| \le R\}`.

    A compactly supported :math:`\rho_0`, as Assumption 3.2 requires, for chapter 02. Each point is a
    Gaussian direction :math:`g/\|g\|` times the radius :math:`R\,U^{1/d}`, ``U`` uniform on
    ``[0, 1]``: the radius has density :math:`d\,r^{d-1}/R^d`, that of the uniform measure. Then
    :math:`\mathbb E\|w\|^2 = d R^2/(d+2)`, so ``R = s * sqrt(d + 2)`` matches the second moment
    :math:`d s^2` of :math:`N(0, s^2 I)`.

    Parameters
    ----------
    n : int
        Number of points, positive.
    d : int
        Dimension, positive.
    radius : float
        Radius ``R`` of the ball, positive.
    generator : torch.Generator
        Seeded CPU generator of the draws (the directions first, then the radii).
    dtype : torch.dtype, default torch.float64
        Floating-point type of the points (the draws are made in float64 and cast).

    Returns
    -------
    Tensor (n, d)
        The points, on the CPU; every norm is at most ``radius``.

    Raises
    ------
    ValueError
        Naming ``n``, ``d``, ``radius`` or ``generator`` when it is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.flows.dynamics import uniform_ball
    >>> w = uniform_ball(1000, 32, 2.0, generator=torch.Generator().manual_seed(0))
    >>> w.shape, w.dtype, bool((w.norm(dim=1) <= 2.0).all())
    (torch.Size([1000, 32]), torch.float64, True)
    >>> round(float(w.pow(2).sum(1).mean()), 1), round(32 * 2.0**2 / 34, 1)  # E||w||^2 = d R^2/(d+2)
    (3.8, 3.8)
    """
    check_positive(n, "n", integer=True)
    check_positive(d, "d", integer=True)
    check_positive(radius, "radius")
    check_generator(generator)
    g = torch.randn(n, d, generator=generator, dtype=torch.float64)
    u = torch.rand(n, generator=generator, dtype=torch.float64)
    r = float(radius) * u.pow(1.0 / d)
    return (g / g.norm(dim=1, keepdim=True) * r[:, None]).to(dtype)


# -------------------------------------------------------------- Theorem 5.2 measurements
def err_bound(N: int, eps: float, T: float, d_omega: int, L: int, z: float = 1.0) -> float:
    r"""The error profile :math:`\mathrm{Err}_{N,\varepsilon,T}(z)` of eq. (23): Euler term
    :math:`\varepsilon`, martingale term :math:`\sqrt\varepsilon(\sqrt{d_\omega}+\sqrt{\log N}+z)`,
    empirical-measure term :math:`N^{-1/2}(\sqrt L+\sqrt{\log(\lfloor T/\varepsilon\rfloor+1)}+z)`.

    Parameters
    ----------
    N : int
        Number of heads.
    eps : float
        SGD step size :math:`\varepsilon`.
    T : float
        Time horizon.
    d_omega : int
        Dimension of a head.
    L : int
        Sequence length.
    z : float, default 1.0
        Confidence parameter of the high-probability bound.

    Returns
    -------
    float
        The sum of the three terms (the theorem's constant omitted).

    Examples
    --------
    >>> from mfattn.flows.dynamics import err_bound
    >>> round(err_bound(N=100, eps=0.01, T=1.0, d_omega=24, L=3), 4)
    1.3025
    """
    return (eps + math.sqrt(eps) * (math.sqrt(d_omega) + math.sqrt(math.log(N)) + z)
            + (math.sqrt(L) + math.sqrt(math.log(math.floor(T / eps) + 1)) + z) / math.sqrt(N))


def initial_measure(model: ParticleModel, n: int, *, scale: float, generator: torch.Generator,
                    law: str = "gauss") -> torch.Tensor:
    r"""``n`` i.i.d. particles of the initial measure :math:`\rho_0`, in the model's dtype and device.

    ``law="gauss"``: :math:`N(0, s^2 I)` with :math:`s` = ``scale`` (the book's default :math:`\rho_0`);
    ``law="ball"``: uniform on the ball of radius :math:`R = s\sqrt{d_\omega + 2}`
    (:func:`uniform_ball`), compactly supported as Assumption 3.2 asks and with the Gaussian's second
    moment :math:`d_\omega s^2`. The ball's sampler draws the same Gaussian directions first, so the two
    laws under one generator state differ only in the particles' norms. Draws are made on the CPU in
    float64, so a seed gives the same particles on every device.

    Parameters
    ----------
    model : ParticleModel
        Gives ``d_omega``, the dtype and the device.
    n : int
        Number of particles.
    scale : float
        The Gaussian's standard deviation :math:`s`, positive.
    generator : torch.Generator
        A CPU generator (e.g. :func:`mfattn.flows.seeds.stream`).
    law : str, default ``"gauss"``
        ``"gauss"`` or ``"ball"``.

    Returns
    -------
    Tensor (n, d_omega)

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.flows.dynamics import initial_measure
    >>> from mfattn.flows.seeds import stream
    >>> from mfattn.models.tasks import example
    >>> model = example().model
    >>> w = initial_measure(model, 4096, scale=0.5, generator=stream(0, "rho_0"))
    >>> w.shape, round(float((w ** 2).sum(1).mean() / (24 * 0.25)), 1)   # E|w|^2 = d s^2
    (torch.Size([4096, 24]), 1.0)
    >>> b = initial_measure(model, 4096, scale=0.5, generator=stream(0, "rho_0"), law="ball")
    >>> bool(b.norm(dim=1).max() <= 0.5 * 26 ** 0.5), round(float((b ** 2).sum(1).mean() / (24 * 0.25)), 1)
    (True, 1.0)
    """
    check_positive(n, "n", integer=True)
    check_positive(scale, "scale")
    check_generator(generator)
    if law == "gauss":
        w = scale * torch.randn(n, model.d_omega, generator=generator, dtype=torch.float64)
    elif law == "ball":
        w = uniform_ball(n, model.d_omega, scale * math.sqrt(model.d_omega + 2), generator=generator)
    else:
        raise ValueError(f"law: expected 'gauss' or 'ball', got {law!r}")
    return w.to(device=model.device, dtype=model.dtype)
