"""One integrator for particle systems, eqs. (19)-(21), with a registry of named steppers.

Every training run of the book moves a population of particles (heads, neurons) by the velocity
field ``-2 zeta(t) grad Phi(omega; rho)`` of the paper (eq. (13) for the gradient, (19) for SGD, (21)
for the characteristics of the limiting PDE (20)). :func:`integrate` owns what all of them share: the
validation, the clock (steps of size ``h``, recordings every ``record_every``), the minibatch draws, the
recorders (risk (10), dissipation (38), kept particles, statistics), a checkpoint to resume from, and
one result type, :class:`Run`, that saves and loads. What differs, the update rule, is a
:class:`Stepper` registered by name in :data:`STEPPERS`:

================ ================================================================ ====================
name             update (``g = grad Phi`` on the step's samples)                  paper
================ ================================================================ ====================
``sgd``          ``omega - 2 h zeta(t) g`` on ``batch_size`` sequences             eq. (19)
``gd``           the same on the whole dataset (the martingale term vanishes)      eqs. (19), (21)
``rk4``          classical Runge-Kutta for ``dW/dt = -2 zeta(t) g(W, t)``          eq. (21)
``heavy-ball``   ``b = mu b + 2 zeta g``, ``omega - h b`` (``torch.optim.SGD``)    chapter 08
``kinetic``      heavy ball with ``mu = 1 - gamma h``, learning rate ``h^2``        chapter 08
``adam``         ``torch.optim.Adam``'s rule on ``2 zeta g``, per particle         chapter 08
================ ================================================================ ====================

:func:`mfattn.flows.dynamics.sgd` and :func:`mfattn.flows.dynamics.reference_flow`, which chapters 02-07 call,
are this integrator with ``sgd``/``gd`` and ``rk4``. A new rule is a small class::

    @register
    class Nesterov(Stepper):
        name = "nesterov"
        ...

and is then available to every tool as ``integrate(..., stepper="nesterov")``.

The model is anything honouring :class:`mfattn.models.particles.ParticleModel`: the integrator calls only
``check_data``, ``check_measure``, ``evaluate``, ``risk_and_dissipation``, ``weighted_sq_norm`` and,
for :meth:`Run.characteristics`, ``grad_at`` and ``check_heads``.
"""

from __future__ import annotations

import math
import os
import pickle
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, ClassVar

import torch

from .._checks import check_generator, check_positive
from .._progress import progress_bar
from ..models.particles import ParticleModel

__all__ = [
    "Constant",
    "Decaying",
    "as_profile",
    "rescaled_time",
    "Run",
    "Stepper",
    "SGD",
    "GD",
    "RK4",
    "HeavyBall",
    "Kinetic",
    "Adam",
    "STEPPERS",
    "register",
    "make_stepper",
    "integrate",
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
    >>> from mfattn.flows.integrate import Constant
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
        >>> from mfattn.flows.integrate import Constant
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
    >>> from mfattn.flows.integrate import Decaying
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
        >>> from mfattn.flows.integrate import Decaying
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
    >>> from mfattn.flows.integrate import as_profile
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
    >>> from mfattn.flows.integrate import Decaying, rescaled_time
    >>> rescaled_time(0.5, 3.0), rescaled_time(Decaying(power=0.5), 3.0)
    (3.0, 4.0)
    """
    return 2.0 * as_profile(zeta).integral(t)


# ------------------------------------------------------------------------------- result
@dataclass(repr=False)
class Run:
    r"""What a run of :func:`integrate` records, at the recording times only (memory does not grow with
    the number of steps), and what it needs to move other points the same way afterwards.

    ``R = T / record_every + 1`` is the number of recording times and ``K = T / step`` the number of
    steps. :meth:`save` writes it to one file and :meth:`load` reads it back (the model and the data
    are not saved: pass them to :meth:`load` to call :meth:`characteristics`).

    Attributes
    ----------
    times : Tensor (R,), float64
        Recording times ``t_j = j * record_every``.
    risk : Tensor (R,), float64
        Risk (10) of the population's measure on the whole dataset at each recording time.
    heads : Tensor (R, M, d_omega), model's dtype
        The first ``M = keep`` particles (all by default) at each recording time; ``population`` is
        the same tensor (the name chapters use for a reference flow).
    dissipation : Tensor (R,), float64, or None
        Dissipation (38) on the whole dataset, when the run was asked for it.
    stats : dict of str to Tensor (R,), float64, or None
        The values of each requested statistic of all particles.
    final : Tensor (N, d_omega) or None
        Every particle at time ``T``.
    kept : dict of int to Tensor (N, d_omega), or None
        Every particle after the steps asked for with ``keep_at`` (key: step index ``k``, time
        ``k * step``; 0 is the start).
    stage_residuals : Tensor (K, S, ...) or None
        The residual ``G`` of every stage of every step (``S`` stages: 1 for ``gd``, 4 for ``rk4``;
        ``(K, S, n, L, d_x)`` scaled by ``1/(n L)`` for heads), kept with ``keep_stages``.
    stepper : str
        Name of the stepper in :data:`STEPPERS`.
    hyper : dict
        The stepper's hyperparameters (e.g. ``momentum``).
    step : float
        Step ``h`` (``eps`` of (19)).
    per_record : int
        Steps between two recordings.
    batch_size : int or None
        Sequences per step; ``None`` for the whole dataset.
    zeta : profile or None
        The learning-rate profile (``None`` after :meth:`load` when it could not be saved, e.g. a lambda).
    model : ParticleModel or None
        The model (not saved).
    X : Tensor or None
        The dataset's inputs, for :meth:`characteristics` (not saved).

    Examples
    --------
    >>> import torch
    >>> from mfattn.flows.integrate import integrate
    >>> from mfattn.models.tasks import example
    >>> model, data, h0, _ = example()
    >>> run = integrate(model, data, h0, stepper="adam", step=0.1, T=1.0, record_every=0.5,
    ...                 progress=False)
    >>> run
    Run(stepper='adam', steps=10, times=[0.0, 0.5, 1.0], heads=(3, 5, 24))
    >>> bool(run.risk[-1] < run.risk[0])
    True
    """

    times: torch.Tensor
    risk: torch.Tensor
    heads: torch.Tensor
    dissipation: torch.Tensor | None = None
    stats: dict | None = None
    final: torch.Tensor | None = None
    kept: dict | None = None
    stage_residuals: torch.Tensor | None = None
    stepper: str = "sgd"
    hyper: dict = field(default_factory=dict)
    step: float | None = None
    per_record: int | None = None
    batch_size: int | None = None
    zeta: object = None
    model: ParticleModel | None = None
    X: torch.Tensor | None = None

    @property
    def population(self) -> torch.Tensor:
        """The recorded particles ``(R, M, d_omega)``: :attr:`heads` under the name flows use."""
        return self.heads

    def __repr__(self):
        steps = None if self.per_record is None else self.per_record * (len(self.times) - 1)
        return (f"Run(stepper={self.stepper!r}, steps={steps}, times={self.times.tolist() if len(self.times) <= 6 else '...'}, "
                f"heads={tuple(self.heads.shape)})")

    def characteristics(self, omega0: torch.Tensor, *, progress: bool = False) -> torch.Tensor:
        """Tagged characteristics: the points ``omega0 (M, d_omega)`` moved by the run's own drift,
        ``-2 zeta(t) grad Phi(.; rho_t)`` with ``rho_t`` the run's population, by the same stepper.
        Returns (R, M, d_omega).

        A point of the population's initial cloud is carried to that particle's path (a stepper with a
        state, momentum or Adam, starts the tagged points from a fresh state, as the population was).
        Needs the run's stage residuals (``keep_stages=True``; :func:`mfattn.flows.dynamics.reference_flow`
        keeps them by default).

        Parameters
        ----------
        omega0 : Tensor (M, d_omega)
            Starting points, model's dtype and device.
        progress : bool, default False
            Show a progress bar over the steps.

        Returns
        -------
        Tensor (R, M, d_omega)
            The points at the run's recording times ``times``.

        Raises
        ------
        ValueError
            When the run kept no stage residuals or has no model, or naming ``omega0`` when it is
            invalid.

        Examples
        --------
        >>> import torch
        >>> from mfattn.flows.dynamics import reference_flow
        >>> from mfattn.models.tasks import example
        >>> model, data, _, _ = example()
        >>> w0 = torch.randn(6, model.d_omega, generator=torch.Generator().manual_seed(0),
        ...                  dtype=torch.float64)
        >>> flow = reference_flow(model, data, w0, T=1.0, step=0.25, record_every=0.5,
        ...                       progress=False)
        >>> tags = flow.characteristics(w0[:2])
        >>> tags.shape
        torch.Size([3, 2, 24])
        >>> torch.allclose(tags, flow.population[:, :2])
        True
        """
        if self.stage_residuals is None:
            raise ValueError("characteristics: this run was made with keep_stages=False and kept no residuals")
        if self.model is None or self.X is None or self.zeta is None:
            raise ValueError("characteristics: this run has no model, data or zeta (pass them to Run.load)")
        stepper = make_stepper(self.stepper, **self.hyper)
        w = self.model.check_heads(omega0, "omega0")
        state = stepper.init_state(w)
        out = [w.clone()]
        for k in progress_bar(range(self.stage_residuals.shape[0]), enabled=progress, desc="characteristics",
                              leave=False):
            res = self.stage_residuals[k]
            w = stepper.step(w, k * self.step, self.step, self.zeta,
                             lambda s, pts: self.model.grad_at(self.X, res[s], pts), state)
            if (k + 1) % self.per_record == 0:
                out.append(w.clone())
        return torch.stack(out)

    # ------------------------------------------------------------------ saving and loading
    def _payload(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("model", "X", "zeta")}
        try:
            pickle.dumps(self.zeta)
            out["zeta"] = self.zeta
        except Exception:  # a lambda: the recordings are still worth keeping
            out["zeta"] = None
        return out

    def bind(self, model: ParticleModel, data) -> "Run":
        """Attach the model and the data a run was made with, as :func:`integrate` does, so that a run
        read from a file (:meth:`load`, :func:`mfattn.companion.sweep.memo`) follows characteristics.

        Parameters
        ----------
        model : ParticleModel
            The run's model.
        data : dataset object
            Its dataset.

        Returns
        -------
        Run
            This run.

        Examples
        --------
        >>> import tempfile
        >>> from mfattn.flows.integrate import Run
        >>> from mfattn.flows.dynamics import reference_flow
        >>> from mfattn.models.tasks import example
        >>> model, data, h0, _ = example()
        >>> flow = reference_flow(model, data, h0, T=0.5, step=0.25, record_every=0.25, progress=False)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     back = Run.load(flow.save(f"{d}/f.pt")).bind(model, data)
        >>> bool((back.characteristics(h0[:2]) == flow.characteristics(h0[:2])).all())
        True
        """
        self.model, self.X = model, data.X
        return self

    def save(self, path) -> Path:
        """Write the run to ``path`` (``torch.save``, written to a temporary file and renamed, so a
        reader never sees half a file). The model and the data are not saved.

        Parameters
        ----------
        path : str or Path
            Target file.

        Returns
        -------
        Path
            ``path``.

        Examples
        --------
        >>> import tempfile, torch
        >>> from mfattn.flows.integrate import Run, integrate
        >>> from mfattn.models.tasks import example
        >>> model, data, h0, _ = example()
        >>> run = integrate(model, data, h0, stepper="gd", step=0.25, T=1.0, record_every=0.5,
        ...                 progress=False)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     back = Run.load(run.save(f"{d}/run.pt"))
        >>> torch.equal(back.heads, run.heads), back.stepper, back.model is None
        (True, 'gd', True)
        """
        path = Path(path)
        _atomic_save({"kind": "run", "run": self._payload()}, path)
        return path

    @classmethod
    def load(cls, path, *, model: ParticleModel | None = None, data=None, map_location=None,
             trusted: bool = False) -> "Run":
        """Read a run written by :meth:`save` (or the checkpoint of a finished :func:`integrate`).

        Parameters
        ----------
        path : str or Path
            The file.
        model : ParticleModel, optional
            The model, for :meth:`characteristics`.
        data : dataset object, optional
            Its dataset, for :meth:`characteristics`.
        map_location : optional
            Passed to ``torch.load`` (e.g. ``"cpu"``).
        trusted : bool, default False
            The file is read with ``torch.load(weights_only=True)``, which runs no code: tensors,
            numbers, strings and the engine's profiles (:class:`Constant`, :class:`Decaying`). A run
            made with a profile of another class needs ``trusted=True`` (unpickling runs code: only
            for a file one wrote).

        Returns
        -------
        Run

        Raises
        ------
        ValueError
            Naming ``path`` when the file holds no finished run, or objects a weights-only load
            refuses.

        Examples
        --------
        >>> import tempfile, torch
        >>> from mfattn.flows.integrate import Run, integrate
        >>> from mfattn.models.linear import linear_regression
        >>> model, data, _ = linear_regression(d=2, n=6, generator=torch.Generator().manual_seed(0))
        >>> run = integrate(model, data, torch.zeros(3, 2, dtype=torch.float64), stepper="rk4", step=0.5, T=1.0,
        ...                 record_every=0.5, keep_stages=True, progress=False)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     back = Run.load(run.save(f"{d}/run.pt"), model=model, data=data)
        >>> torch.equal(back.characteristics(torch.ones(1, 2, dtype=torch.float64)),
        ...             run.characteristics(torch.ones(1, 2, dtype=torch.float64)))
        True
        """
        try:
            with torch.serialization.safe_globals([Constant, Decaying]):
                payload = torch.load(Path(path), map_location=map_location, weights_only=not trusted)
        except pickle.UnpicklingError as e:
            raise ValueError(f"path: {path} holds objects a weights-only load refuses (a profile of another class, "
                             "or an unfinished checkpoint); pass trusted=True for a file you wrote") from e
        if not isinstance(payload, dict) or payload.get("kind") != "run":
            raise ValueError(f"path: {path} holds no finished run (an unfinished checkpoint or another file)")
        run = cls(**payload["run"])
        run.model, run.X = model, (None if data is None else data.X)
        return run


def _atomic_save(obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    torch.save(obj, tmp)
    os.replace(tmp, path)


# ------------------------------------------------------------------------------ steppers
#: The registered steppers, by name: ``integrate(..., stepper=name)``.
STEPPERS: dict[str, type] = {}


def register(cls):
    """Class decorator: add a :class:`Stepper` subclass to :data:`STEPPERS` under its ``name``.

    Parameters
    ----------
    cls : type
        A subclass of :class:`Stepper` with a new, non-empty ``name``.

    Returns
    -------
    type
        ``cls``.

    Raises
    ------
    ValueError
        When ``cls`` is not a stepper or its name is empty or taken by another class (the same
        class defined again, as by a notebook cell run twice, replaces its first definition).

    Examples
    --------
    >>> from dataclasses import dataclass
    >>> from mfattn.flows.integrate import STEPPERS, SGD, register, make_stepper
    >>> @register
    ... @dataclass(frozen=True)
    ... class Damped(SGD):
    ...     name = "damped-example"
    ...     factor: float = 0.5
    ...     def step(self, heads, t, h, zeta, grad, state):
    ...         return super().step(heads, t, self.factor * h, zeta, grad, state)
    >>> make_stepper("damped-example", factor=0.25)
    Damped(factor=0.25)
    >>> del STEPPERS["damped-example"]
    """
    if not (isinstance(cls, type) and issubclass(cls, Stepper)) or not cls.name:
        raise ValueError("cls: expected a subclass of mfattn.flows.integrate.Stepper with a name")
    old = STEPPERS.get(cls.name)
    # the same class defined again (a notebook cell run twice: same module, same qualified name)
    # replaces itself; another class may not take a name
    if old is not None and old is not cls and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(f"cls: a stepper named {cls.name!r} is already registered ({old.__module__}.{old.__qualname__})")
    STEPPERS[cls.name] = cls
    return cls


def make_stepper(stepper, **hyper) -> "Stepper":
    """A stepper from its name (and hyperparameters), or a :class:`Stepper` instance as is.

    Parameters
    ----------
    stepper : str or Stepper
        A name of :data:`STEPPERS` or an instance.
    **hyper
        Hyperparameters of a named stepper (e.g. ``momentum=0.9``).

    Returns
    -------
    Stepper

    Raises
    ------
    ValueError
        Naming ``stepper`` when it is unknown, or the hyperparameter that is invalid.

    Examples
    --------
    >>> from mfattn.flows.integrate import make_stepper
    >>> make_stepper("heavy-ball", momentum=0.5)
    HeavyBall(momentum=0.5)
    >>> sorted(__import__("mfattn.flows.integrate").flows.integrate.STEPPERS)
    ['adam', 'gd', 'heavy-ball', 'kinetic', 'rk4', 'sgd']
    """
    if isinstance(stepper, Stepper):
        if hyper:
            raise ValueError("stepper: hyperparameters go to the constructor of a stepper instance")
        return stepper
    if not isinstance(stepper, str) or stepper not in STEPPERS:
        raise ValueError(f"stepper: expected one of {sorted(STEPPERS)} or a Stepper, got {stepper!r}")
    try:
        return STEPPERS[stepper](**hyper)
    except TypeError as e:
        raise ValueError(f"stepper: {stepper!r} does not take these hyperparameters: {e}") from None


class Stepper:
    r"""One step of a particle system moved by ``-2 zeta(t) grad Phi``: the base of the registry.

    A subclass sets ``name`` (its key in :data:`STEPPERS`), ``stages`` (evaluations of the gradient per
    step), ``full_batch`` (True when it needs the whole dataset at every stage) and ``default_batch``
    (sequences per step when the caller gives none), and implements :meth:`step`, with
    :meth:`init_state` when it carries per-particle state (momentum, moments).

    Examples
    --------
    >>> from mfattn.flows.integrate import STEPPERS
    >>> [(n, c.stages, c.full_batch, c.default_batch) for n, c in sorted(STEPPERS.items())]
    [('adam', 1, False, None), ('gd', 1, True, None), ('heavy-ball', 1, False, None), ('kinetic', 1, False, None), ('rk4', 4, True, None), ('sgd', 1, False, 1)]
    """

    name: ClassVar[str] = ""
    stages: ClassVar[int] = 1
    full_batch: ClassVar[bool] = False
    default_batch: ClassVar[int | None] = None

    def init_state(self, heads: torch.Tensor) -> dict:
        """The stepper's state for the particles ``heads``: a dict of tensors and numbers, saved in
        checkpoints. Empty for a stateless stepper.

        Parameters
        ----------
        heads : Tensor (N, d_omega)
            The particles at the start.

        Returns
        -------
        dict
            Per-particle state (e.g. Adam's moments ``m``, ``v`` of ``heads``' shape, and a step count).

        Examples
        --------
        >>> import torch
        >>> from mfattn.flows.integrate import make_stepper
        >>> make_stepper("sgd").init_state(torch.zeros(2, 3)), sorted(make_stepper("adam").init_state(torch.zeros(2, 3)))
        ({}, ['count', 'm', 'v'])
        """
        return {}

    def step(self, heads: torch.Tensor, t: float, h: float, zeta, grad: Callable, state: dict) -> torch.Tensor:
        r"""The particles after one step of size ``h`` from time ``t``.

        Parameters
        ----------
        heads : Tensor (N, d_omega)
            The particles now.
        t : float
            The time now, ``k h``.
        h : float
            The step.
        zeta : profile
            The learning-rate profile: ``zeta(t)``.
        grad : callable
            ``grad(stage, points)``: :math:`\nabla_\omega\Phi(\text{points};\rho)` (13), with
            :math:`\rho` the population at that stage (for a multi-stage scheme the integrator moves
            the population to the stage's points); stage 0 is always called first, with ``heads``.
        state : dict
            From :meth:`Stepper.init_state`, updated in place.

        Returns
        -------
        Tensor (N, d_omega)
            The particles at ``t + h``.

        Examples
        --------
        >>> import torch
        >>> from mfattn.flows.integrate import as_profile, make_stepper
        >>> grad = lambda stage, w: w          # Phi = |w|^2 / 2: the flow is dw/dt = -2 w
        >>> w0 = torch.ones(1, 2, dtype=torch.float64)
        >>> [round(float(make_stepper(n).step(w0, 0.0, 0.1, as_profile(1.0), grad, make_stepper(n).init_state(w0))[0, 0]), 4)
        ...  for n in ("gd", "rk4", "heavy-ball")]
        [0.8, 0.8187, 0.8]
        """
        raise NotImplementedError

    def hyper(self) -> dict:
        """The hyperparameters, as keyword arguments of the constructor.

        Returns
        -------
        dict

        Examples
        --------
        >>> from mfattn.flows.integrate import HeavyBall
        >>> HeavyBall(momentum=0.5).hyper()
        {'momentum': 0.5}
        """
        return asdict(self) if hasattr(self, "__dataclass_fields__") else {}


@register
@dataclass(frozen=True)
class SGD(Stepper):
    r"""Eq. (19): :math:`\omega^{k+1} = \omega^k - 2h\zeta(kh)\nabla\Phi(\omega^k;\rho_k)` on a fresh
    minibatch (one sequence by default, as in the theorem).

    Examples
    --------
    >>> import torch
    >>> from mfattn.flows.integrate import SGD, as_profile
    >>> SGD().step(torch.ones(2, 3), 0.0, 0.25, as_profile(1.0), lambda s, w: w, {})
    tensor([[0.5000, 0.5000, 0.5000],
            [0.5000, 0.5000, 0.5000]])
    """

    name: ClassVar[str] = "sgd"
    default_batch: ClassVar[int | None] = 1

    def step(self, heads, t, h, zeta, grad, state):
        return heads - (2 * h * zeta(t)) * grad(0, heads)


@register
@dataclass(frozen=True)
class GD(SGD):
    r"""Full-batch gradient descent: (19) with the exact drift, i.e. the explicit Euler scheme for the
    characteristics (21) of the empirical measure.

    Examples
    --------
    >>> import torch
    >>> from mfattn.flows.integrate import GD, as_profile
    >>> GD().step(torch.ones(1, 2), 0.0, 0.25, as_profile(2.0), lambda s, w: w, {})   # 1 - 2 h zeta
    tensor([[0., 0.]])
    """

    name: ClassVar[str] = "gd"
    full_batch: ClassVar[bool] = True
    default_batch: ClassVar[int | None] = None


def _rk4_step(zeta, t, h, w, grad):
    """One classical Runge-Kutta step of dw/dt = -2 zeta(t) grad Phi(w; rho_t); ``grad(stage, w)``
    returns grad Phi at that stage's points."""
    c = (0.0, 0.5, 0.5, 1.0)
    ks = []
    for s in range(4):
        ws = w if s == 0 else w + (c[s] * h) * ks[-1]
        ks.append(-2 * zeta(t + c[s] * h) * grad(s, ws))
    return w + (h / 6) * (ks[0] + 2 * ks[1] + 2 * ks[2] + ks[3])


@register
@dataclass(frozen=True)
class RK4(Stepper):
    r"""The classical Runge-Kutta scheme for the characteristics (21),
    :math:`\dot W = -2\zeta(t)\nabla\Phi(W;\rho_t)`, on the whole dataset; error :math:`O(h^4)`.

    Examples
    --------
    >>> import math, torch
    >>> from mfattn.flows.integrate import RK4, as_profile
    >>> w = RK4().step(torch.ones(1, 1, dtype=torch.float64), 0.0, 0.1, as_profile(0.5), lambda s, w: w, {})
    >>> abs(float(w) - math.exp(-0.1)) < 1e-7   # dw/dt = -w
    True
    """

    name: ClassVar[str] = "rk4"
    stages: ClassVar[int] = 4
    full_batch: ClassVar[bool] = True

    def step(self, heads, t, h, zeta, grad, state):
        return _rk4_step(zeta, t, h, heads, grad)


@register
@dataclass(frozen=True)
class HeavyBall(Stepper):
    r"""Heavy-ball momentum on each particle, the rule of ``torch.optim.SGD(lr=h, momentum=mu)``:
    :math:`b \leftarrow \mu b + 2\zeta(t)\nabla\Phi`, :math:`\omega \leftarrow \omega - h b` (the first step
    takes ``b = 2 zeta grad Phi``). ``momentum = 0`` is :class:`SGD`.

    Attributes
    ----------
    momentum : float, default 0.9
        :math:`\mu \in [0, 1)`.

    Examples
    --------
    >>> import torch
    >>> from mfattn.flows.integrate import HeavyBall, as_profile
    >>> hb, w = HeavyBall(momentum=0.5), torch.ones(1, 1)
    >>> state = hb.init_state(w)
    >>> for k in range(2):                                  # b = 2, then 0.5 * 2 + 2 = 3
    ...     w = hb.step(w, 0.0, 0.1, as_profile(1.0), lambda s, x: torch.ones_like(x), state)
    >>> round(float(w), 6)                                  # 1 - 0.1 * 2 - 0.1 * 3
    0.5
    """

    name: ClassVar[str] = "heavy-ball"
    momentum: float = 0.9

    def __post_init__(self):
        if not (isinstance(self.momentum, (int, float)) and 0 <= self.momentum < 1):
            raise ValueError(f"momentum: expected a number in [0, 1), got {self.momentum!r}")

    def init_state(self, heads):
        return {"buf": None}

    def step(self, heads, t, h, zeta, grad, state):
        g = (2 * zeta(t)) * grad(0, heads)
        buf = state["buf"]
        buf = g.clone() if buf is None else buf * self.momentum + g
        state["buf"] = buf
        return heads - h * buf


@register
@dataclass(frozen=True)
class Kinetic(Stepper):
    r"""Heavy-ball momentum in the kinetic scaling (chapter 08): with friction :math:`\gamma` and
    step :math:`h`, each particle carries a velocity :math:`p` and moves by

    .. math:: p \leftarrow (1-\gamma h)\,p - 2h\zeta(t)\nabla\Phi(\omega;\rho),\qquad
              \omega \leftarrow \omega + h\,p,

    starting at rest. This is :class:`HeavyBall`'s rule (``torch.optim.SGD``) with momentum
    :math:`\mu = 1-\gamma h` and learning rate :math:`h^2`, its buffer being :math:`b = -p/h`; the
    clock ``t = k h`` is then the time of the damped second-order flow
    :math:`\ddot\omega = -\gamma\dot\omega - 2\zeta\nabla\Phi` (chapter 08's (8.1)), of which this is the
    semi-implicit Euler scheme, first order in :math:`h`. After a step, :math:`p` is exactly
    ``(omega_new - omega_old) / h``.

    Attributes
    ----------
    friction : float, default 2.0
        :math:`\gamma > 0`; every step must have :math:`\gamma h < 1` (a momentum in ``(0, 1)``).

    Examples
    --------
    >>> import torch
    >>> from mfattn.flows.integrate import Kinetic, as_profile
    >>> kin, w = Kinetic(friction=2.0), torch.ones(1, 1, dtype=torch.float64)
    >>> state = kin.init_state(w)
    >>> for k in range(2):          # grad Phi = 1, 2 zeta = 1: p = -0.1, then 0.8 * (-0.1) - 0.1
    ...     w = kin.step(w, 0.0, 0.1, as_profile(0.5), lambda s, x: torch.ones_like(x), state)
    >>> round(float(w), 6), round(float(state["p"]), 6)     # 1 - 0.1 * 0.1 - 0.1 * 0.18
    (0.972, -0.18)
    """

    name: ClassVar[str] = "kinetic"
    friction: float = 2.0

    def __post_init__(self):
        check_positive(self.friction, "friction")

    def init_state(self, heads):
        return {"p": torch.zeros_like(heads)}

    def step(self, heads, t, h, zeta, grad, state):
        if self.friction * h >= 1:
            raise ValueError(f"step: friction * step must be below 1 (a momentum 1 - friction * step in (0, 1)), "
                             f"got {self.friction} * {h}")
        p = state["p"] * (1 - self.friction * h) - (2 * h * zeta(t)) * grad(0, heads)
        state["p"] = p
        return heads + h * p


@register
@dataclass(frozen=True)
class Adam(Stepper):
    r"""Adam on each particle, the rule of ``torch.optim.Adam(lr=h, betas, eps)`` on the gradient
    :math:`g = 2\zeta(t)\nabla\Phi`: first and second moments per coordinate, bias-corrected.

    Attributes
    ----------
    beta1 : float, default 0.9
    beta2 : float, default 0.999
    eps : float, default 1e-8

    Examples
    --------
    >>> import torch
    >>> from mfattn.flows.integrate import Adam, as_profile
    >>> adam, w = Adam(eps=1e-12), torch.zeros(1, 2, dtype=torch.float64)
    >>> w = adam.step(w, 0.0, 0.1, as_profile(1.0), lambda s, x: torch.tensor([[3.0, -0.5]]).double(), adam.init_state(w))
    >>> w.tolist()                  # the first step moves every coordinate by h, against the gradient's sign
    [[-0.1, 0.1]]
    """

    name: ClassVar[str] = "adam"
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    def __post_init__(self):
        for b in ("beta1", "beta2"):
            v = getattr(self, b)
            if not (isinstance(v, (int, float)) and 0 <= v < 1):
                raise ValueError(f"{b}: expected a number in [0, 1), got {v!r}")
        check_positive(self.eps, "eps")

    def init_state(self, heads):
        return {"m": torch.zeros_like(heads), "v": torch.zeros_like(heads), "count": 0}

    def step(self, heads, t, h, zeta, grad, state):
        g = (2 * zeta(t)) * grad(0, heads)
        state["count"] += 1
        n = state["count"]
        m = state["m"].lerp(g, 1 - self.beta1)
        v = state["v"] * self.beta2 + (1 - self.beta2) * g * g
        state["m"], state["v"] = m, v
        denom = v.sqrt() / math.sqrt(1 - self.beta2**n) + self.eps
        return heads - (h / (1 - self.beta1**n)) * m / denom


# ---------------------------------------------------------------------------- integrator
def record_grid(T, record_every, step, name):
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


def check_start(model: ParticleModel, data, heads0, weights):
    if not isinstance(model, ParticleModel):
        raise ValueError("model: expected a mfattn.HeadModel or another mfattn.models.particles.ParticleModel")
    data = model.check_data(data)
    heads0, weights = model.check_measure(heads0, weights, "heads0")
    return data, heads0, weights


def _fingerprint(*tensors) -> str:
    import hashlib

    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


_DEFAULT = object()


def integrate(
    model: ParticleModel,
    data,
    heads0: torch.Tensor,
    *,
    step: float,
    T: float,
    record_every: float,
    stepper="sgd",
    zeta=1.0,
    batch_size=_DEFAULT,
    generator: torch.Generator | None = None,
    weights: torch.Tensor | None = None,
    keep: int | None = None,
    dissipation: bool = False,
    statistics: dict | None = None,
    keep_stages: bool = False,
    keep_at=(),
    checkpoint=None,
    checkpoint_every: int = 1,
    progress: bool = True,
    desc: str | None = None,
) -> Run:
    r"""Move the particles ``heads0`` by ``stepper`` for ``T / step`` steps of size ``step``, recording
    at ``t = j * record_every``.

    Every stepper follows the velocity field :math:`-2\zeta(t)\nabla\Phi(\omega;\rho_t)` of (19)-(21)
    (:math:`\rho_t` the population's own measure with ``weights``) on the step's samples: a fresh
    minibatch of ``batch_size`` sequences drawn uniformly with replacement with ``generator`` at every
    step, or the whole dataset (``batch_size=None``; the default of every stepper but ``sgd``).

    At each recording time the run records the risk (10) on the whole dataset, the first ``keep``
    particles, the dissipation (38) with ``dissipation``, and ``statistics``, a dict of functions
    ``particles (N, d_omega) -> float``. With the whole dataset and the dissipation asked for, the
    step's first gradient pass gives them at no extra cost. ``keep_stages`` keeps every stage's residual
    (for :meth:`Run.characteristics`), ``keep_at`` the whole population after chosen steps.

    With ``checkpoint`` (a file path), the run saves its state every ``checkpoint_every`` recordings
    and, when finished, the :class:`Run` itself; a call with the same arguments finds the file and
    resumes where the last one stopped (bit for bit: the generator's state is saved too) or returns the
    finished run. A file from a different run (other initial particles, data, stepper, clock or
    profile) is refused with a ``ValueError`` naming ``checkpoint``.

    Parameters
    ----------
    model : ParticleModel
        The model, e.g. a :class:`~mfattn.models.model.HeadModel`.
    data : dataset object
        The model's dataset (:class:`mfattn.Dataset` for heads), in the model's dtype and device.
    heads0 : Tensor (N, d_omega)
        Initial particles, model's dtype and device.
    step : float
        Step ``h`` (``eps`` in (19)); ``record_every`` must be a whole number of steps.
    T : float
        Final time; a whole number of ``record_every``.
    record_every : float
        Time between two recordings.
    stepper : str or Stepper, default ``"sgd"``
        A name in :data:`STEPPERS` (``sgd``, ``gd``, ``rk4``, ``heavy-ball``, ``kinetic``, ``adam``) or an instance
        (for hyperparameters: ``HeavyBall(momentum=0.5)``).
    zeta : float, profile or callable, default 1.0
        Learning-rate profile :math:`\zeta`, anything :func:`as_profile` accepts.
    batch_size : int or None
        Sequences per step; ``None`` for the whole dataset. Default: the stepper's (1 for ``sgd``).
    generator : torch.Generator, optional
        Draws the minibatches (on the CPU); required when ``batch_size`` is an integer.
    weights : Tensor (N,) or None
        Fixed weights of the particles, on the simplex; uniform when ``None``.
    keep : int or None
        Number of particles recorded (the first ones, possibly 0); all when ``None``.
    dissipation : bool, default False
        Also record the dissipation (38).
    statistics : dict of str to callable, optional
        Functions of all the particles ``(N, d_omega) -> float``, recorded under their names.
    keep_stages : bool, default False
        Keep the residual of every stage (needs the whole dataset), for :meth:`Run.characteristics`.
    keep_at : iterable of int, optional
        Step indices ``k`` (``0 <= k <= T / step``) after which every particle is kept, in
        ``Run.kept[k]``.
    checkpoint : str or Path, optional
        File to save the state to and resume from.
    checkpoint_every : int, default 1
        Recordings between two saves of the state.
    progress : bool, default True
        Show a progress bar over the steps.
    desc : str, optional
        The progress bar's label; default ``"<stepper> steps"``.

    Returns
    -------
    Run
        The recordings at ``R = T / record_every + 1`` times and the final population.

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.flows.integrate import integrate
    >>> from mfattn.models.tasks import example
    >>> model, data, h0, _ = example()
    >>> runs = {name: integrate(model, data, h0, stepper=name, step=0.125, T=1.0,
    ...                         record_every=0.5, batch_size=None, progress=False)
    ...         for name in ("gd", "rk4", "heavy-ball", "adam")}
    >>> [bool(r.risk[-1] < r.risk[0]) for r in runs.values()]
    [True, True, True, True]
    >>> round(float((runs["rk4"].final - h0).norm()), 2)              # how far the heads move
    1.55
    >>> round(float((runs["gd"].final - runs["rk4"].final).norm()), 3)  # Euler's O(h) error
    0.068
    """
    stepper = make_stepper(stepper)
    data, heads, weights = check_start(model, data, heads0, weights)
    per_record, n_records = record_grid(T, record_every, step, "step")
    zeta = as_profile(zeta)
    n_steps = per_record * n_records
    batch_size, keep, statistics, keep_at = _check_options(stepper, heads.shape[0], n_steps, batch_size, generator,
                                                           keep, statistics, keep_stages, keep_at, checkpoint_every)
    X, Y = data.X, data.Y
    full = batch_size is None
    reuse = full and dissipation  # the step's first pass is the recording's: one pass saved

    signature = None if checkpoint is None else dict(
        stepper=stepper.name, hyper=stepper.hyper(), step=step, T=T, record_every=record_every,
        batch_size=batch_size, keep=keep, dissipation=dissipation, statistics=sorted(statistics),
        keep_stages=keep_stages, keep_at=sorted(keep_at),
        zeta=[zeta(t) for t in (0.0, T / 3, T)] + [zeta.integral(T)],
        start=_fingerprint(heads, weights), data=_fingerprint(X, Y),
    )
    rec = dict(heads=[], risk=[], diss=[], stats={name: [] for name in statistics}, stages=[],
               kept={0: heads.clone()} if 0 in keep_at else {})
    state = stepper.init_state(heads)
    k = 0
    path = None if checkpoint is None else Path(checkpoint)
    saved = _saved(path, signature, heads.device)
    if saved is not None:
        if saved["kind"] == "run":
            run = Run(**saved["run"])
            run.model, run.X = model, X
            run.zeta = zeta
            return run
        k, heads, state, rec = saved["k"], saved["heads"], saved["state"], saved["rec"]
        if saved["generator"] is not None:
            generator.set_state(saved["generator"])

    def record(heads):
        rec["heads"].append(heads[:keep].clone())
        if not reuse:  # otherwise the next step's first stage (or the end) gives them
            r, i = model.risk_and_dissipation(X, Y, heads, weights, dissipation=dissipation)
            rec["risk"].append(float(r))
            if dissipation:
                rec["diss"].append(float(i))
        for name, f in statistics.items():
            rec["stats"][name].append(float(f(heads)))

    def save_state():
        if path is not None:
            _atomic_save(dict(kind="checkpoint", signature=signature, k=k, heads=heads, state=state, rec=rec,
                              generator=None if full else generator.get_state()), path)

    if k == 0:
        record(heads)
    bar = progress_bar(total=n_steps, initial=k, enabled=progress, desc=desc or f"{stepper.name} steps", leave=False)
    while k < n_steps:
        if full:
            Xs, Ys = X, Y
        else:
            idx = torch.randint(data.n, (batch_size,), generator=generator).to(X.device)
            Xs, Ys = X[idx], Y[idx]
        stages = []

        def grad(s, points):
            recording = s == 0 and reuse and k % per_record == 0  # the risk only where it is recorded
            r, G, g, _ = model.evaluate(Xs, Ys, points, weights, risk=recording)
            if recording:
                rec["risk"].append(float(r))
                rec["diss"].append(float(model.weighted_sq_norm(weights, g)))
            if keep_stages:
                stages.append(G)
            return g

        heads = stepper.step(heads, k * step, step, zeta, grad, state)
        k += 1
        if keep_stages:
            rec["stages"].append(torch.stack(stages))
        if k in keep_at:
            rec["kept"][k] = heads.clone()
        bar.update(1)
        if k % per_record == 0:
            record(heads)
            if (k // per_record) % checkpoint_every == 0 and k < n_steps:
                save_state()
    bar.close()
    if reuse:
        r, i = model.risk_and_dissipation(X, Y, heads, weights)
        rec["risk"].append(float(r))
        rec["diss"].append(float(i))
    f64 = lambda v: torch.tensor(v, dtype=torch.float64)
    run = Run(
        times=torch.arange(n_records + 1, dtype=torch.float64) * record_every,
        risk=f64(rec["risk"]), heads=torch.stack(rec["heads"]),
        dissipation=f64(rec["diss"]) if dissipation else None,
        stats={name: f64(v) for name, v in rec["stats"].items()} if statistics else None,
        final=heads, kept=rec["kept"] if keep_at else None,
        stage_residuals=torch.stack(rec["stages"]) if keep_stages else None,
        stepper=stepper.name, hyper=stepper.hyper(), step=step, per_record=per_record, batch_size=batch_size,
        zeta=zeta, model=model, X=X,
    )
    if path is not None:
        payload = run._payload()
        if not isinstance(payload["zeta"], (Constant, Decaying)):
            payload["zeta"] = None  # so the file reads back weights-only; the caller's profile is put back then
        _atomic_save(dict(kind="run", signature=signature, run=payload), path)
    return run


def _check_options(stepper, n_heads, n_steps, batch_size, generator, keep, statistics, keep_stages, keep_at,
                   checkpoint_every):
    """:func:`integrate`'s checks of its options, in this order, with their defaults made concrete: returns
    ``batch_size`` (the stepper's default for ``_DEFAULT``), ``keep`` (all heads for None), ``statistics`` (a
    dict) and ``keep_at`` (a set of step indices)."""
    if batch_size is _DEFAULT:
        batch_size = stepper.default_batch
    if batch_size is not None:
        check_positive(batch_size, "batch_size", integer=True)
        if stepper.full_batch:
            raise ValueError(f"batch_size: the {stepper.name!r} stepper uses the whole dataset; pass None")
        check_generator(generator)
    keep = n_heads if keep is None else keep
    check_positive(keep, "keep", integer=True, allow_zero=True)
    statistics = dict(statistics or {})
    if not all(callable(f) for f in statistics.values()):
        raise ValueError("statistics: expected a dict of callables particles -> float")
    if keep_stages and batch_size is not None:
        raise ValueError("keep_stages: needs the whole dataset at every step (batch_size=None)")
    keep_at = list(keep_at)
    if not all(isinstance(k, int) and not isinstance(k, bool) and 0 <= k <= n_steps for k in keep_at):
        raise ValueError(f"keep_at: expected step indices from 0 to T / step = {n_steps}, got {keep_at!r}")
    check_positive(checkpoint_every, "checkpoint_every", integer=True)
    return batch_size, keep, statistics, set(keep_at)


def _saved(path, signature, device):
    """What :func:`integrate`'s checkpoint file ``path`` holds (a dict: a finished run or the state of an
    unfinished one), or None when there is no file (or no checkpoint); a file of another run (``signature``)
    is refused. It is read weights-only, so reading it runs no code."""
    if path is None or not path.exists():
        return None
    try:
        with torch.serialization.safe_globals([Constant, Decaying]):
            saved = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as e:
        raise ValueError(f"checkpoint: {path} holds objects a weights-only load refuses (not a file integrate "
                         "wrote, or one from an older version); delete it to start afresh") from e
    if not isinstance(saved, dict) or saved.get("signature") != signature:
        raise ValueError(f"checkpoint: {path} belongs to a different run (delete it to start afresh)")
    return saved
