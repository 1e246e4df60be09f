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
]


# ----------------------------------------------------------------- learning-rate profiles
@dataclass(frozen=True)
class Constant:
    """``zeta(t) = value`` (Assumption 3.1 with ``zeta_- = value``)."""

    value: float = 1.0

    def __post_init__(self):
        check_positive(self.value, "zeta")

    def __call__(self, t: float) -> float:
        return self.value

    def integral(self, t: float) -> float:
        return self.value * t


@dataclass(frozen=True)
class Decaying:
    """zeta(t) = value / (1 + t / t0)^power with 0 < power <= 1: bounded, Lipschitz, and with an
    infinite integral, as Assumption 3.1 asks (no positive lower bound)."""

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
    """A learning-rate profile from a number (constant), a profile, or any callable of t."""
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
    r"""Rescaled time :math:`\mathsf s(t) = 2\int_0^t\zeta(r)\,dr`, eq. (42)."""
    return 2.0 * as_profile(zeta).integral(t)


# --------------------------------------------------------------------------- recording
@dataclass
class Trajectory:
    """What a run records at the recording times (memory independent of the step count)."""

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
    """The limiting PDE (20) solved by the characteristics (21) of a reference population."""

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

    def characteristics(self, omega0: torch.Tensor, *, progress: bool = False) -> torch.Tensor:
        """Tagged characteristics: the points ``omega0 (M, d_omega)`` moved by the reference drift
        ``-2 zeta(t) grad Phi(.; rho_t)`` with the same Runge-Kutta scheme. Returns (R, M, d_omega).

        A point of the reference population's initial cloud is carried to that particle's path.
        Needs the flow's stage residuals (``reference_flow(..., keep_stages=True)``, the default).
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
    recording time; the last population is always returned whole, as ``final``.
    """
    data, W, weights = _check_start(model, data, particles0, None)
    per_record, n_records = _grid(T, record_every, step, "step")
    zeta = as_profile(zeta)
    keep = W.shape[0] if keep is None else keep
    check_positive(keep, "keep", integer=True, allow_zero=True)
    statistics = dict(statistics or {})
    if not all(callable(f) for f in statistics.values()):
        raise ValueError("statistics: expected a dict of callables particles -> float")
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

    bar = progress_bar(range(per_record * n_records), enabled=progress, desc="reference flow", leave=False)
    for k in bar:
        stages.append([])
        W = _rk4_step(zeta, k * step, step, W, grad)
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
    )


# -------------------------------------------------------------- Theorem 5.2 measurements
def err_bound(N: int, eps: float, T: float, d_omega: int, L: int, z: float = 1.0) -> float:
    r"""The error profile :math:`\mathrm{Err}_{N,\varepsilon,T}(z)` of eq. (23): Euler term
    :math:`\varepsilon`, martingale term :math:`\sqrt\varepsilon(\sqrt{d_\omega}+\sqrt{\log N}+z)`,
    empirical-measure term :math:`N^{-1/2}(\sqrt L+\sqrt{\log(\lfloor T/\varepsilon\rfloor+1)}+z)`."""
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
