"""Training dynamics: finite-head SGD (19) and the limiting PDE (20) by its characteristics (21).

Used by chapter 02 (propagation of chaos, Theorem 5.2) and the long-time and stability chapters.

* :func:`sgd` runs (19) exactly, ``omega^{k+1} = omega^k + 2 eps zeta(k eps) G_i`` with ``G_i`` of
  (17) on a fresh uniformly drawn minibatch of sequences per step (one sequence is the theorem),
  or full-batch gradient descent (``batch_size=None``), where the martingale term vanishes.
* :func:`reference_flow` integrates the characteristics (21) of a reference population of
  particles with the classical Runge-Kutta scheme. A particle's drift depends on the measure
  only through the pulled-back residual ``G(t) = (softmax z^{rho_t} - Y) W_out^T``, an
  ``(n, L, d_x)`` tensor; the flow stores it at every Runge-Kutta stage, so that
  :meth:`ReferenceFlow.characteristics` moves any other points (the *tagged* characteristics
  started from an SGD run's own initial heads) with exactly the same scheme afterwards, at the
  cost of their own gradients only.

Both record what a chapter needs at the recording times ``t = j * record_every`` only, so memory
does not grow with the number of steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from ._checks import check_generator, check_positive
from ._progress import progress_bar
from .particles import ParticleModel

__all__ = [
    "Constant",
    "Decaying",
    "as_profile",
    "rescaled_time",
    "Trajectory",
    "sgd",
    "ReferenceFlow",
    "reference_flow",
    "err_bound",
    "chaos_errors",
    "uniform_ball",
]


# ----------------------------------------------------------------- learning-rate profiles
@dataclass(frozen=True)
class Constant:
    """``zeta(t) = value`` (Assumption 3.1 with ``zeta_- = value``).

    A learning-rate profile: calling it gives ``zeta(t)``, :meth:`integral` its integral from 0.

    Attributes
    ----------
    value : float, default 1.0
        The constant learning-rate factor, positive.

    Examples
    --------
    >>> from mfattn.dynamics import Constant
    >>> zeta = Constant(0.5)
    >>> zeta(3.0), zeta.integral(2.0)
    (0.5, 1.0)
    """

    value: float = 1.0

    def __post_init__(self):
        check_positive(self.value, "zeta")

    def __call__(self, t: float) -> float:
        return self.value

    def integral(self, t: float) -> float:
        """The integral of ``zeta`` over ``[0, t]``: ``value * t``.

        Parameters
        ----------
        t : float
            Upper end of the integral.

        Returns
        -------
        float
            ``value * t``.

        Examples
        --------
        >>> from mfattn.dynamics import Constant
        >>> Constant(2.0).integral(1.5)
        3.0
        """
        return self.value * t


@dataclass(frozen=True)
class Decaying:
    """zeta(t) = value / (1 + t / t0)^power with 0 < power <= 1: bounded, Lipschitz, and with an
    infinite integral, as Assumption 3.1 asks (no positive lower bound).

    Calling it gives ``zeta(t)``, :meth:`integral` its integral from 0 in closed form.

    Attributes
    ----------
    value : float, default 1.0
        ``zeta(0)``, positive.
    t0 : float, default 1.0
        Time scale of the decay, positive.
    power : float, default 0.5
        Decay exponent, in ``(0, 1]``.

    Examples
    --------
    >>> from mfattn.dynamics import Decaying
    >>> zeta = Decaying(value=1.0, t0=1.0, power=0.5)
    >>> zeta(3.0), zeta.integral(3.0)
    (0.5, 2.0)
    """

    value: float = 1.0
    t0: float = 1.0
    power: float = 0.5

    def __post_init__(self):
        check_positive(self.value, "zeta")
        check_positive(self.t0, "t0")
        if not 0 < self.power <= 1:
            raise ValueError(f"power: must lie in (0, 1] for an infinite integral, got {self.power}")

    def __call__(self, t: float) -> float:
        return self.value / (1 + t / self.t0) ** self.power

    def integral(self, t: float) -> float:
        """The integral of ``zeta`` over ``[0, t]``, in closed form.

        ``value t0 log(1 + t/t0)`` for ``power = 1``, else
        ``value t0 ((1 + t/t0)^(1-power) - 1) / (1 - power)``.

        Parameters
        ----------
        t : float
            Upper end of the integral, ``>= 0``.

        Returns
        -------
        float
            The integral, unbounded as ``t`` grows.

        Examples
        --------
        >>> import math
        >>> from mfattn.dynamics import Decaying
        >>> round(Decaying(power=1.0).integral(math.e - 1), 6)
        1.0
        """
        if self.power == 1:
            return self.value * self.t0 * math.log1p(t / self.t0)
        q = 1 - self.power
        return self.value * self.t0 * ((1 + t / self.t0) ** q - 1) / q


@dataclass(frozen=True)
class _Callable:
    fn: Callable[[float], float]

    def __call__(self, t: float) -> float:
        return float(self.fn(t))

    def integral(self, t: float) -> float:
        from scipy.integrate import quad

        return quad(self, 0.0, t, limit=200)[0]


def as_profile(zeta):
    """A learning-rate profile from a number (constant), a profile, or any callable of t.

    Parameters
    ----------
    zeta : float, Constant, Decaying or callable
        A positive number (a :class:`Constant`), a profile (returned as is), or a function
        ``t -> zeta(t)`` with a finite ``zeta(0) >= 0``, whose integral is then computed numerically
        (``scipy.integrate.quad``).

    Returns
    -------
    profile
        An object ``p`` with ``p(t)`` the learning-rate factor and ``p.integral(t)`` its integral over
        ``[0, t]``.

    Raises
    ------
    ValueError
        Naming ``zeta`` when it is none of these.

    Examples
    --------
    >>> from mfattn.dynamics import as_profile
    >>> as_profile(2.0)
    Constant(value=2.0)
    >>> round(as_profile(lambda t: 1 / (1 + t)).integral(1.0), 6)
    0.693147
    """
    if isinstance(zeta, (Constant, Decaying, _Callable)):
        return zeta
    if isinstance(zeta, (int, float)) and not isinstance(zeta, bool):
        return Constant(float(zeta))
    if callable(zeta):
        v = zeta(0.0)
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"zeta: zeta(0) must be a finite number >= 0, got {v!r}")
        return _Callable(zeta)
    raise ValueError(f"zeta: expected a number, a profile or a callable, got {type(zeta).__name__}")


def rescaled_time(zeta, t: float) -> float:
    r"""Rescaled time :math:`\mathsf s(t) = 2\int_0^t\zeta(r)\,dr`, eq. (42).

    Parameters
    ----------
    zeta : float, profile or callable
        The learning-rate profile, anything :func:`as_profile` accepts.
    t : float
        Time, ``>= 0``.

    Returns
    -------
    float
        :math:`\mathsf s(t)`.

    Examples
    --------
    >>> from mfattn.dynamics import Decaying, rescaled_time
    >>> rescaled_time(0.5, 3.0), rescaled_time(Decaying(power=0.5), 3.0)
    (3.0, 4.0)
    """
    return 2.0 * as_profile(zeta).integral(t)


# --------------------------------------------------------------------------- recording
@dataclass
class Trajectory:
    """What a run records at the recording times (memory independent of the step count).

    Returned by :func:`sgd`; ``R`` is the number of recording times, ``T / record_every + 1``.

    Attributes
    ----------
    times : Tensor (R,), float64
        Recording times ``t_j = j * record_every``.
    risk : Tensor (R,), float64
        Risk (10) of the run's measure on the whole dataset at each recording time.
    heads : Tensor (R, M, d_omega), model's dtype
        The first ``M = keep`` heads (all by default) at each recording time.
    dissipation : Tensor (R,), float64, or None
        Dissipation (38) of the measure on the whole dataset, when the run was asked for it.
    stats : dict of str to Tensor (R,), float64, or None
        The values of each requested statistic of all heads.

    Examples
    --------
    >>> import torch
    >>> from mfattn.dynamics import sgd
    >>> from mfattn.tasks import teacher_task
    >>> task = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)
    >>> h0 = torch.randn(5, task.model.d_omega, generator=torch.Generator().manual_seed(0),
    ...                  dtype=torch.float64)
    >>> run = sgd(task.model, task.data, h0, eps=0.1, T=1.0, record_every=0.5, keep=2,
    ...           generator=torch.Generator().manual_seed(1), dissipation=True, progress=False)
    >>> run.times.tolist(), run.heads.shape, run.dissipation.shape, run.stats
    ([0.0, 0.5, 1.0], torch.Size([3, 2, 24]), torch.Size([3]), None)
    """

    times: torch.Tensor  # (R,) recording times t_j = j * record_every
    risk: torch.Tensor  # (R,) E_N of the recorded measure, eq. (10)
    heads: torch.Tensor  # (R, M, d_omega) the first ``keep`` heads (all heads by default)
    dissipation: torch.Tensor | None = None  # (R,) I of the empirical measure, eq. (38), if asked
    stats: dict | None = None  # name -> (R,) values of the requested statistics of all heads


def _grid(T, record_every, step, name):
    check_positive(T, "T")
    check_positive(record_every, "record_every")
    check_positive(step, name)
    per_record = round(record_every / step)
    n_records = round(T / record_every)
    if per_record < 1 or abs(per_record * step - record_every) > 1e-9 * record_every:
        raise ValueError(f"{name}: record_every = {record_every} must be a whole number of steps of {step}")
    if abs(n_records * record_every - T) > 1e-9 * T:
        raise ValueError(f"T: must be a whole number of record_every = {record_every}, got {T}")
    return per_record, n_records


def _check_start(model: ParticleModel, data, heads0, weights):
    if not isinstance(model, ParticleModel):
        raise ValueError("model: expected a mfattn.HeadModel or another mfattn.particles.ParticleModel")
    data = model.check_data(data)
    heads0, weights = model.check_measure(heads0, weights, "heads0")
    return data, heads0, weights


# --------------------------------------------------------------------------------- SGD
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
) -> Trajectory:
    r"""Finite-head SGD, eq. (19): :math:`\omega_i^{k+1} = \omega_i^k + 2\varepsilon\zeta(k\varepsilon)G_i`.

    ``G_i`` is the stochastic gradient (17) on ``batch_size`` sequences drawn uniformly with
    replacement from ``data`` with ``generator`` at every step (``batch_size=1`` is the theorem;
    ``None`` uses the whole dataset, i.e. full-batch gradient descent with the exact drift).
    Runs ``T / eps`` steps and records at ``t = j * record_every``, ``j = 0..T/record_every``:
    the risk, the first ``keep`` heads, the dissipation (38) on the full dataset when
    ``dissipation``, and ``statistics``, a dict of functions ``heads (N, d_omega) -> float``.

    Parameters
    ----------
    model : ParticleModel
        The model, e.g. a :class:`~mfattn.model.HeadModel`.
    data : dataset object
        The model's dataset (:class:`mfattn.Dataset` for heads), in the model's dtype and device.
    heads0 : Tensor (N, d_omega)
        Initial heads :math:`\omega^0`, model's dtype and device.
    eps : float
        Step size :math:`\varepsilon`; ``record_every`` must be a whole number of steps.
    T : float
        Final time (``T / eps`` steps); a whole number of ``record_every``.
    record_every : float
        Time between two recordings.
    generator : torch.Generator
        Draws the minibatches (on the CPU).
    zeta : float, profile or callable, default 1.0
        Learning-rate profile :math:`\zeta`, anything :func:`as_profile` accepts.
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
    Trajectory
        The recordings at ``R = T / record_every + 1`` times.

    Raises
    ------
    ValueError
        Naming the argument that is invalid (e.g. ``eps`` when it does not divide ``record_every``).

    Examples
    --------
    >>> import torch
    >>> from mfattn.dynamics import sgd
    >>> from mfattn.tasks import teacher_task
    >>> task = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)
    >>> h0 = torch.randn(5, task.model.d_omega, generator=torch.Generator().manual_seed(0),
    ...                  dtype=torch.float64)
    >>> mean_norm = lambda h: float(h.norm(dim=1).mean())
    >>> run = sgd(task.model, task.data, h0, eps=0.1, T=1.0, record_every=0.5,
    ...           generator=torch.Generator().manual_seed(1), statistics={"norm": mean_norm},
    ...           progress=False)
    >>> run.times.tolist(), run.heads.shape, run.stats["norm"].shape
    ([0.0, 0.5, 1.0], torch.Size([3, 5, 24]), torch.Size([3]))
    >>> bool(run.risk[-1] < run.risk[0])
    True
    """
    data, heads, weights = _check_start(model, data, heads0, weights)
    per_record, n_records = _grid(T, record_every, eps, "eps")
    zeta = as_profile(zeta)
    if batch_size is not None:
        check_positive(batch_size, "batch_size", integer=True)
    check_generator(generator)
    keep = heads.shape[0] if keep is None else keep
    check_positive(keep, "keep", integer=True)
    statistics = dict(statistics or {})
    if not all(callable(f) for f in statistics.values()):
        raise ValueError("statistics: expected a dict of callables heads -> float")
    X, Y = data.X, data.Y
    rec_heads, rec_risk, rec_diss = [], [], []
    rec_stats = {name: [] for name in statistics}

    def record(heads):
        rec_heads.append(heads[:keep].clone())
        r, i = model.risk_and_dissipation(X, Y, heads, weights, dissipation=dissipation)
        rec_risk.append(float(r))
        if dissipation:
            rec_diss.append(float(i))
        for name, f in statistics.items():
            rec_stats[name].append(float(f(heads)))

    record(heads)
    bar = progress_bar(total=per_record * n_records, enabled=progress, desc="SGD steps", leave=False)
    k = 0
    for _ in range(n_records):
        for _ in range(per_record):
            if batch_size is None:
                Xs, Ys = X, Y
            else:
                idx = torch.randint(data.n, (batch_size,), generator=generator).to(X.device)
                Xs, Ys = X[idx], Y[idx]
            # G_i = -grad Phi(omega_i; rho_k) on the drawn sequences, eq. (17)
            heads = heads - (2 * eps * zeta(k * eps)) * model.grad_phi(Xs, Ys, heads, weights)
            k += 1
        bar.update(per_record)
        record(heads)
    bar.close()
    times = torch.arange(n_records + 1, dtype=torch.float64) * record_every
    f64 = lambda v: torch.tensor(v, dtype=torch.float64)
    return Trajectory(times, f64(rec_risk), torch.stack(rec_heads), f64(rec_diss) if dissipation else None,
                      {k: f64(v) for k, v in rec_stats.items()} if statistics else None)


# ------------------------------------------------------------------- reference flow (21)
@dataclass
class ReferenceFlow:
    r"""The limiting PDE (20) solved by the characteristics (21) of a reference population.

    Returned by :func:`reference_flow`; ``R`` is the number of recording times and ``K`` the
    number of Runge-Kutta steps.

    Attributes
    ----------
    model : ParticleModel
        The model the flow was run with.
    X : Tensor
        The dataset's inputs (``(n, L, d_x)`` for heads, ``(n, d)`` for the two-layer network): with
        the stage residuals, all the drift needs.
    zeta : profile
        The learning-rate profile (see :func:`as_profile`).
    step : float
        Runge-Kutta step ``h``.
    per_record : int
        Steps between two recordings.
    times : Tensor (R,), float64
        Recording times.
    risk : Tensor (R,), float64
        :math:`\mathcal E(\rho_t)` (10) of the reference population.
    dissipation : Tensor (R,), float64
        :math:`\mathcal I(\rho_t)` (38) of the reference population.
    population : Tensor (R, M, d_omega)
        The first ``M = keep`` particles (all by default) at the recording times.
    stage_residuals : Tensor (K, 4, ...) or None
        The residual ``G`` of every Runge-Kutta stage (``(K, 4, n, L, d_x)``, scaled by
        ``1/(n L)``, for heads); ``None`` when run with ``keep_stages=False``.
    final : Tensor (N_ref, d_omega) or None
        Every particle at time ``T``.
    stats : dict of str to Tensor (R,), float64, or None
        The values of each requested statistic of all particles.
    kept : dict of int to Tensor (N_ref, d_omega), or None
        Every particle after the steps asked for with ``keep_at`` (the key is the step index ``k``,
        the time ``k * step``; 0 is the start); ``None`` when none was asked for.

    Examples
    --------
    >>> import torch
    >>> from mfattn.dynamics import reference_flow
    >>> from mfattn.tasks import teacher_task
    >>> task = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)
    >>> w0 = torch.randn(6, task.model.d_omega, generator=torch.Generator().manual_seed(0),
    ...                  dtype=torch.float64)
    >>> flow = reference_flow(task.model, task.data, w0, T=1.0, step=0.25, record_every=0.5,
    ...                       progress=False)
    >>> flow.times.tolist(), flow.population.shape, flow.final.shape
    ([0.0, 0.5, 1.0], torch.Size([3, 6, 24]), torch.Size([6, 24]))
    >>> flow.stage_residuals.shape
    torch.Size([4, 4, 4, 3, 3])
    """

    model: ParticleModel
    X: torch.Tensor  # (n, L, d_x) for heads, (n, d) for the two-layer network the dataset's sequences (the drift needs only these and G)
    zeta: object
    step: float  # Runge-Kutta step h
    per_record: int  # steps between recordings
    times: torch.Tensor  # (R,)
    risk: torch.Tensor  # (R,) E(rho_t) of the reference population
    dissipation: torch.Tensor  # (R,) I(rho_t), eq. (38)
    population: torch.Tensor  # (R, M, d_omega) the first ``keep`` particles (all by default) at the recording times
    stage_residuals: torch.Tensor | None  # (K, 4, n, L, d_x) G at every Runge-Kutta stage, scaled by 1/(nL)
    final: torch.Tensor | None = None  # (N_ref, d_omega) every particle at time T
    stats: dict | None = None  # name -> (R,) values of the requested statistics of all particles
    kept: dict | None = None  # step index -> (N_ref, d_omega) every particle at the steps of ``keep_at``

    def characteristics(self, omega0: torch.Tensor, *, progress: bool = False) -> torch.Tensor:
        """Tagged characteristics: the points ``omega0 (M, d_omega)`` moved by the reference drift
        ``-2 zeta(t) grad Phi(.; rho_t)`` with the same Runge-Kutta scheme. Returns (R, M, d_omega).

        A point of the reference population's initial cloud is carried to that particle's path.
        Needs the flow's stage residuals (``reference_flow(..., keep_stages=True)``, the default).

        Parameters
        ----------
        omega0 : Tensor (M, d_omega)
            Starting points, model's dtype and device.
        progress : bool, default False
            Show a progress bar over the steps.

        Returns
        -------
        Tensor (R, M, d_omega)
            The points at the flow's recording times ``times``.

        Raises
        ------
        ValueError
            When the flow kept no stage residuals, or naming ``omega0`` when it is invalid.

        Examples
        --------
        >>> import torch
        >>> from mfattn.dynamics import reference_flow
        >>> from mfattn.tasks import teacher_task
        >>> task = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)
        >>> w0 = torch.randn(6, task.model.d_omega, generator=torch.Generator().manual_seed(0),
        ...                  dtype=torch.float64)
        >>> flow = reference_flow(task.model, task.data, w0, T=1.0, step=0.25, record_every=0.5,
        ...                       progress=False)
        >>> tags = flow.characteristics(w0[:2])
        >>> tags.shape
        torch.Size([3, 2, 24])
        >>> torch.allclose(tags, flow.population[:, :2])
        True
        """
        if self.stage_residuals is None:
            raise ValueError("characteristics: this flow was run with keep_stages=False and kept no residuals")
        w = self.model.check_heads(omega0, "omega0")
        out = [w.clone()]
        steps = self.stage_residuals.shape[0]
        for k in progress_bar(range(steps), enabled=progress, desc="characteristics", leave=False):
            w = _rk4_step(self.zeta, k * self.step, self.step, w,
                          lambda s, _w: self.model.grad_at(self.X, self.stage_residuals[k, s], _w))
            if (k + 1) % self.per_record == 0:
                out.append(w.clone())
        return torch.stack(out)


def _rk4_step(zeta, t, h, w, grad):
    """One classical Runge-Kutta step of dw/dt = -2 zeta(t) grad Phi(w; rho_t); ``grad(stage, w)``
    returns grad Phi at that stage's points."""
    c = (0.0, 0.5, 0.5, 1.0)
    ks = []
    for s in range(4):
        ws = w if s == 0 else w + (c[s] * h) * ks[-1]
        ks.append(-2 * zeta(t + c[s] * h) * grad(s, ws))
    return w + (h / 6) * (ks[0] + 2 * ks[1] + 2 * ks[2] + ks[3])


def reference_flow(
    model: ParticleModel,
    data,
    particles0: torch.Tensor,
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
) -> ReferenceFlow:
    r"""Integrate the characteristics (21), :math:`\dot W = -2\zeta(t)\nabla\Phi(W;\rho_t)`, of the
    reference population ``particles0`` (uniform weights) with step ``step`` up to ``T``.

    The population's empirical measure stands for :math:`\rho_t`; its own sampling error is of
    order ``N_ref^{-1/2}`` and sets the floor of any comparison with it. (Started from an empirical
    measure, the PDE (20) stays empirical: this is then its exact solution, up to the integrator.)

    The risk and the dissipation at a recording time come with the first Runge-Kutta stage of the
    next step, at no extra cost. ``keep_stages=False`` keeps no stage residuals (long runs, whose
    residuals would fill the memory); :meth:`ReferenceFlow.characteristics` then cannot be called.
    ``keep`` records only the first ``keep`` particles (0: none; all by default) and ``statistics``, a
    dict of functions ``particles (N, d_omega) -> float``, is evaluated on all of them at every
    recording time; the last population is always returned whole, as ``final``. ``keep_at`` keeps
    the whole population at a few chosen steps between the recordings (the frames of chapter 04's
    animation of a long run, whose recordings keep no particles).

    Parameters
    ----------
    model : ParticleModel
        The model, e.g. a :class:`~mfattn.model.HeadModel`.
    data : dataset object
        The model's dataset, in the model's dtype and device.
    particles0 : Tensor (N_ref, d_omega)
        The reference population at ``t = 0`` (uniform weights).
    T : float
        Final time; a whole number of ``record_every``.
    step : float
        Runge-Kutta step ``h``; ``record_every`` must be a whole number of steps.
    record_every : float
        Time between two recordings.
    zeta : float, profile or callable, default 1.0
        Learning-rate profile, anything :func:`as_profile` accepts.
    keep_stages : bool, default True
        Keep the residual of every stage, for :meth:`ReferenceFlow.characteristics`.
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
    ReferenceFlow
        The recordings at ``R = T / record_every + 1`` times, the final population, the stage
        residuals and the populations kept at ``keep_at``.

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.dynamics import reference_flow
    >>> from mfattn.tasks import teacher_task
    >>> task = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)
    >>> w0 = torch.randn(6, task.model.d_omega, generator=torch.Generator().manual_seed(0),
    ...                  dtype=torch.float64)
    >>> flow = reference_flow(task.model, task.data, w0, T=1.0, step=0.25, record_every=0.5,
    ...                       keep=0, keep_stages=False, progress=False)
    >>> flow.population.shape, flow.stage_residuals, flow.final.shape
    (torch.Size([3, 0, 24]), None, torch.Size([6, 24]))
    >>> bool((flow.risk.diff() < 0).all()), bool((flow.dissipation >= 0).all())
    (True, True)
    """
    data, W, weights = _check_start(model, data, particles0, None)
    per_record, n_records = _grid(T, record_every, step, "step")
    zeta = as_profile(zeta)
    keep = W.shape[0] if keep is None else keep
    check_positive(keep, "keep", integer=True, allow_zero=True)
    statistics = dict(statistics or {})
    if not all(callable(f) for f in statistics.values()):
        raise ValueError("statistics: expected a dict of callables particles -> float")
    n_steps = per_record * n_records
    keep_at = list(keep_at)
    if not all(isinstance(k, int) and not isinstance(k, bool) and 0 <= k <= n_steps for k in keep_at):
        raise ValueError(f"keep_at: expected step indices from 0 to T / step = {n_steps}, got {keep_at!r}")
    keep_at = set(keep_at)
    kept = {0: W.clone()} if 0 in keep_at else {}
    X, Y = data.X, data.Y
    stages = []
    pop, risk, diss = [W[:keep].clone()], [], []
    rec_stats = {name: [float(f(W))] for name, f in statistics.items()}
    at_point = {}

    def grad(s, Ws):
        r, G, g, _ = model.evaluate(X, Y, Ws, weights)
        if s == 0:
            at_point["risk"], at_point["diss"] = float(r), float(model.weighted_sq_norm(weights, g))
        if keep_stages:
            stages[-1].append(G)
        return g

    bar = progress_bar(range(n_steps), enabled=progress, desc="reference flow", leave=False)
    for k in bar:
        stages.append([])
        W = _rk4_step(zeta, k * step, step, W, grad)
        if k + 1 in keep_at:
            kept[k + 1] = W.clone()
        if keep_stages:
            stages[-1] = torch.stack(stages[-1])
        else:
            stages.pop()
        if k % per_record == 0:
            risk.append(at_point["risk"])
            diss.append(at_point["diss"])
        if (k + 1) % per_record == 0:
            pop.append(W[:keep].clone())
            for name, f in statistics.items():
                rec_stats[name].append(float(f(W)))
    r, i = model.risk_and_dissipation(X, Y, W, weights)
    risk.append(float(r))
    diss.append(float(i))
    times = torch.arange(n_records + 1, dtype=torch.float64) * record_every
    return ReferenceFlow(
        model, X, zeta, step, per_record, times, torch.tensor(risk, dtype=torch.float64),
        torch.tensor(diss, dtype=torch.float64), torch.stack(pop),
        torch.stack(stages) if keep_stages else None, W,
        {k: torch.tensor(v, dtype=torch.float64) for k, v in rec_stats.items()} if statistics else None,
        kept if keep_at else None,
    )


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
    >>> from mfattn.dynamics import uniform_ball
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
    >>> from mfattn.dynamics import err_bound
    >>> round(err_bound(N=100, eps=0.01, T=1.0, d_omega=24, L=3), 4)
    1.3025
    """
    return (eps + math.sqrt(eps) * (math.sqrt(d_omega) + math.sqrt(math.log(N)) + z)
            + (math.sqrt(L) + math.sqrt(math.log(math.floor(T / eps) + 1)) + z) / math.sqrt(N))


def chaos_errors(run: Trajectory, tags: torch.Tensor, reference_population: torch.Tensor,
                 reference_risk: torch.Tensor, directions: torch.Tensor, centers: torch.Tensor, *,
                 model: ParticleModel | None = None, data=None) -> dict:
    r"""The quantities of Theorem 5.2 at every recording time, as lists (JSON-ready).

    * ``e_max``: :math:`\max_i\|e_i^k\|` with :math:`e_i^k=\omega_i^k-\bar\omega_i(t_k)` (36), ``tags`` being the
      tagged characteristics ``(R, N, d_omega)`` of the run's initial heads;
    * ``e_rms``: :math:`(\frac1N\sum_i\|e_i^k\|^2)^{1/2}`;
    * ``d24``: the test-function discrepancy (24) over the family of
      :func:`mfattn.transport.lipschitz_discrepancy`, against the reference population;
    * ``d25``: :math:`|\mathcal E_N(\omega^k)-\mathcal E(\rho_{t_k})|` (25), against the reference risk.

    ``d24`` and ``d25`` include the sampling error of the initial draw, which is of order
    :math:`N^{-1/2}` at ``t = 0`` already and often dominates their supremum over time. What the
    theorem adds to that draw is measured against the empirical measure :math:`\bar\mu^N_t` of the
    run's own tagged characteristics (the flow (21) of the same initial heads), which equals the run
    at ``t = 0``:

    * ``d24_tags``: the discrepancy (24) between :math:`\mu^N_t` and :math:`\bar\mu^N_t`;
    * ``d25_tags`` (when ``model`` and ``data`` are given): :math:`|\mathcal E_N(\omega^k)-\mathcal E(\bar\mu^N_{t_k})|`.

    Used by chapters 02 and 07.

    Parameters
    ----------
    run : Trajectory
        An :func:`sgd` run; its recorded heads ``(R, N, d_omega)`` are the ones compared.
    tags : Tensor (R, N, d_omega)
        The tagged characteristics of the run's recorded initial heads at the same recording times
        (:meth:`ReferenceFlow.characteristics`).
    reference_population : Tensor (R, M, d_omega)
        The reference population at the same recording times (:attr:`ReferenceFlow.population`).
    reference_risk : Tensor (R,)
        :math:`\mathcal E(\rho_t)` at the same times (:attr:`ReferenceFlow.risk`).
    directions : Tensor (P, d_omega)
        Directions of the linear test functions (normalised here).
    centers : Tensor (Q, d_omega)
        Centres of the distance test functions.
    model : ParticleModel, optional
        With ``data``, adds ``d25_tags`` (the risk of ``tags`` with uniform weights).
    data : dataset object, optional
        The model's dataset, for ``d25_tags``.

    Returns
    -------
    dict of str to list of float
        ``e_max``, ``e_rms``, ``d24``, ``d25``, ``d24_tags`` and, with ``model`` and ``data``,
        ``d25_tags``, each a list of ``R`` values.

    Raises
    ------
    ValueError
        Naming ``tags`` when its shape differs from ``run.heads``'.

    Examples
    --------
    >>> import torch
    >>> from mfattn.dynamics import chaos_errors, reference_flow, sgd
    >>> from mfattn.tasks import teacher_task
    >>> task = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)
    >>> model, data = task.model, task.data
    >>> g = torch.Generator().manual_seed(0)
    >>> cloud = torch.randn(12, model.d_omega, generator=g, dtype=torch.float64)
    >>> h0 = torch.randn(4, model.d_omega, generator=g, dtype=torch.float64)
    >>> ref = reference_flow(model, data, cloud, T=0.4, step=0.1, record_every=0.2, progress=False)
    >>> run = sgd(model, data, h0, eps=0.1, T=0.4, record_every=0.2, batch_size=None,
    ...           generator=g, progress=False)
    >>> out = chaos_errors(run, ref.characteristics(h0), ref.population, ref.risk,
    ...                    directions=torch.eye(model.d_omega, dtype=torch.float64),
    ...                    centers=cloud[:2], model=model, data=data)
    >>> sorted(out)
    ['d24', 'd24_tags', 'd25', 'd25_tags', 'e_max', 'e_rms']
    >>> len(out["e_max"]), out["e_max"][0], out["d24_tags"][0]
    (3, 0.0, 0.0)
    """
    from .transport import lipschitz_discrepancy

    if run.heads.shape != tags.shape:
        raise ValueError(f"tags: shape {tuple(tags.shape)} differs from the run's heads {tuple(run.heads.shape)}")
    e = (run.heads - tags).norm(dim=-1)
    return {
        "e_max": e.max(1).values.tolist(),
        "e_rms": e.pow(2).mean(1).sqrt().tolist(),
        "d24": [lipschitz_discrepancy(run.heads[j], reference_population[j], directions, centers)
                for j in range(run.heads.shape[0])],
        "d25": (run.risk - reference_risk).abs().tolist(),
        "d24_tags": [lipschitz_discrepancy(run.heads[j], tags[j], directions, centers)
                     for j in range(run.heads.shape[0])],
        **({} if model is None else {"d25_tags": [abs(float(run.risk[j]) - float(model.risk(data, tags[j])))
                                                  for j in range(run.heads.shape[0])]}),
    }
