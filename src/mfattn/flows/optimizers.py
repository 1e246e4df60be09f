r"""Momentum and Adam on the heads: what their mean-field limits predict (chapter 08).

The steppers themselves live in :mod:`mfattn.flows.integrate` (``heavy-ball``, ``kinetic``,
``adam``); this module holds the quantities chapter 08 derives about them:

* :func:`kinetic_balance`: the energy identity of the damped second-order flow
  :math:`\ddot\omega = -\gamma\dot\omega - 2\zeta\nabla\Phi(\omega;\mu_t)` (chapter 08, (8.3)):
  :math:`\frac{d}{dt}\big[2\zeta\,\mathcal E(\mu_t) + \tfrac12\int|p|^2\,df_t\big]` :math:`{}= -\gamma\int|p|^2\,df_t`,
  evaluated along a finite-:math:`N` run of the ``kinetic`` stepper;
* :func:`heavy_ball_time`: the clock on which heavy ball at a fixed momentum follows the gradient flow
  (chapter 08, (8.5));
* :func:`adam_on_risk`: the engine's Adam that is ``torch.optim.Adam`` applied to the risk's own
  gradient :math:`\partial_{\omega_i}\mathcal E_N = \frac1N\nabla\Phi(\omega_i)`, the scaling a
  practitioner trains with;
* :func:`adam_speed` and :func:`adam_crossover`: the speed of Adam's heads relative to
  :math:`\varepsilon = 0` once :math:`\varepsilon` meets the gradient's coordinates, and the number of
  heads :math:`N^*` at which it halves (chapter 08, (8.7));
* :func:`crossing`: where a measured decreasing curve crosses a level, on log axes;
* :func:`rms_distance`: the RMS over heads of the distance between two populations (a pathwise error,
  a displacement);
* :func:`empirical_grad_phi`: :math:`\nabla\Phi` of every head of a population under its own
  empirical measure;
* :func:`heavy_ball_clock`: heavy ball at a fixed momentum against the gradient flow of the same heads,
  on the clock :func:`heavy_ball_time` and on the unrescaled one (chapter 08, (8.5)).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .._checks import check_positive
from .dynamics import reference_flow
from .integrate import Adam, Constant, HeavyBall, Run, as_profile, integrate

__all__ = ["kinetic_balance", "heavy_ball_time", "adam_on_risk", "adam_speed", "adam_crossover", "crossing",
           "rms_distance", "empirical_grad_phi", "heavy_ball_clock"]


def kinetic_balance(run: Run) -> dict:
    r"""The energy balance (8.3) of chapter 08 along a run of the ``kinetic`` stepper.

    For :math:`N` heads with uniform weights moved by
    :math:`\ddot\omega_i = -\gamma\dot\omega_i - 2\zeta\nabla\Phi(\omega_i;\rho^N_t)` (constant
    :math:`\zeta`), the Hamiltonian :math:`H = 2\zeta\,\mathcal E(\rho^N) + K`, with the kinetic energy
    :math:`K = \frac1{2N}\sum_i|p_i|^2`, obeys :math:`\dot H = -2\gamma K`, since
    :math:`\partial_{\omega_i}\mathcal E(\rho^N) = \frac1N\nabla\Phi(\omega_i)`. The scheme's velocity
    after step :math:`k` is :math:`p_k = (\omega_k - \omega_{k-1})/h`, and the discrete balance

    .. math:: r_k = H_k - H_0 + 2\gamma h\sum_{j=1}^k K_j

    vanishes like :math:`h` (the scheme is first order), which chapter 08 measures. The run must start
    at rest (the stepper does), record every step (``record_every = step``), keep every head and
    record the risk (as every run does).

    Parameters
    ----------
    run : Run
        A :func:`~mfattn.flows.integrate.integrate` run with ``stepper="kinetic"`` (or a
        :class:`~mfattn.flows.integrate.Kinetic`), a constant ``zeta``, recorded at every step with all
        heads kept.

    Returns
    -------
    dict of str to numpy.ndarray (R,)
        ``times``, ``risk`` (:math:`\mathcal E`), ``kinetic`` (:math:`K`), ``hamiltonian``
        (:math:`H`), ``dissipated`` (:math:`2\gamma h\sum_{j\le k}K_j`) and ``residual`` (:math:`r_k`).

    Raises
    ------
    ValueError
        Naming ``run`` when it is not such a run.

    Examples
    --------
    >>> import torch
    >>> from mfattn.flows.integrate import Kinetic, integrate
    >>> from mfattn.flows.optimizers import kinetic_balance
    >>> from mfattn.models.tasks import example
    >>> model, data, h0, _ = example()
    >>> def worst(h):
    ...     run = integrate(model, data, h0, stepper=Kinetic(friction=2.0), step=h, T=1.0,
    ...                     record_every=h, zeta=0.5, batch_size=None, progress=False)
    ...     return abs(kinetic_balance(run)["residual"]).max()
    >>> bool(worst(1 / 16) > 1.6 * worst(1 / 32) > 0)       # first order: halves with h
    True
    """
    if not isinstance(run, Run) or run.stepper != "kinetic":
        raise ValueError("run: expected a Run of the 'kinetic' stepper")
    if run.per_record != 1:
        raise ValueError(f"run: must record every step (record_every = step), got {run.per_record} steps per record")
    if run.final is None or run.heads.shape[1] != run.final.shape[0]:
        raise ValueError("run: must keep every head (keep=None)")
    if not isinstance(run.zeta, Constant):
        raise ValueError("run: the balance (8.3) needs a constant zeta")
    gamma, h, two_zeta = float(run.hyper["friction"]), float(run.step), 2 * run.zeta.value
    W = run.heads.detach().to(torch.float64)
    p = (W[1:] - W[:-1]) / h
    K = np.concatenate([[0.0], 0.5 * p.pow(2).sum(-1).mean(-1).cpu().numpy()])
    E = run.risk.cpu().numpy()
    H = two_zeta * E + K
    dissipated = 2 * gamma * h * np.cumsum(K)
    return {"times": run.times.cpu().numpy(), "risk": E, "kinetic": K, "hamiltonian": H,
            "dissipated": dissipated, "residual": H - H[0] + dissipated}


def heavy_ball_time(t, momentum: float):
    r"""The time of the gradient flow that heavy ball follows: :math:`\tau = t/(1-\mu)` (chapter 08,
    (8.5)), for a run of the ``heavy-ball`` stepper at clock ``t = k h`` with momentum :math:`\mu`.

    Summing the buffer :math:`b_{k+1} = \mu b_k + g_k` over a stretch where :math:`g` barely changes
    gives :math:`b \approx g/(1-\mu)`, so :math:`k` steps of size :math:`h` move a head by
    :math:`k h/(1-\mu)` times the gradient step: gradient descent with step :math:`h/(1-\mu)`, up to
    an error :math:`O(h)` at fixed :math:`\mu`.

    Parameters
    ----------
    t : float or array-like
        The heavy-ball run's clock ``k * step``.
    momentum : float
        :math:`\mu \in [0, 1)`.

    Returns
    -------
    float or numpy.ndarray
        :math:`t/(1-\mu)`.

    Raises
    ------
    ValueError
        Naming ``momentum`` outside ``[0, 1)``.

    Examples
    --------
    >>> from mfattn.flows.optimizers import heavy_ball_time
    >>> heavy_ball_time(0.2, 0.9)
    2.0000000000000004
    """
    if not (isinstance(momentum, (int, float)) and 0 <= momentum < 1):
        raise ValueError(f"momentum: expected a number in [0, 1), got {momentum!r}")
    return np.asarray(t, dtype=float) / (1 - momentum) if np.ndim(t) else float(t) / (1 - momentum)


def adam_on_risk(N: int, *, eps: float, beta1: float = 0.9, beta2: float = 0.999, zeta=1.0) -> Adam:
    r"""The engine's :class:`~mfattn.flows.integrate.Adam` equal to ``torch.optim.Adam(lr=h, betas,
    eps)`` applied to the risk's own gradient, :math:`\partial_{\omega_i}\mathcal E_N = \frac1N\nabla\Phi(\omega_i)`.

    The engine hands Adam :math:`2\zeta\nabla\Phi`, which is :math:`c = 2\zeta N` times the risk's
    gradient. Adam's update :math:`\hat m/(\sqrt{\hat v}+\varepsilon)` is unchanged when the gradient
    and :math:`\varepsilon` are multiplied by the same factor, so the rule on the risk's gradient with
    :math:`\varepsilon` is the engine's rule with :math:`2\zeta N\varepsilon` (chapter 08, (8.6)).

    Parameters
    ----------
    N : int
        The number of heads.
    eps : float
        ``torch.optim.Adam``'s ``eps``, positive.
    beta1, beta2 : float
        The moments' decay rates, in ``[0, 1)``.
    zeta : float or Constant
        The run's constant learning-rate profile.

    Returns
    -------
    Adam
        The stepper, with ``eps = 2 zeta N eps``.

    Raises
    ------
    ValueError
        Naming the argument that is invalid (``zeta`` when it is not constant).

    Examples
    --------
    >>> from mfattn.flows.optimizers import adam_on_risk
    >>> adam_on_risk(64, eps=1e-8, zeta=0.5)
    Adam(beta1=0.9, beta2=0.999, eps=6.4e-07)
    """
    check_positive(N, "N", integer=True)
    check_positive(eps, "eps")
    zeta = as_profile(zeta)
    if not isinstance(zeta, Constant):
        raise ValueError("zeta: Adam on the risk's gradient is a fixed rescaling of eps only for a constant zeta")
    return Adam(beta1=beta1, beta2=beta2, eps=2 * zeta.value * N * eps)


def _abs_coordinates(grad, name) -> np.ndarray:
    g = grad.detach().abs().reshape(-1).cpu().double().numpy() if isinstance(grad, torch.Tensor) \
        else np.abs(np.asarray(grad, dtype=float)).ravel()
    if g.size == 0 or not np.isfinite(g).all() or not (g > 0).any():
        raise ValueError(f"{name}: expected finite gradient coordinates, not all zero")
    return g[g > 0]  # a zero coordinate never moves: (8.7) averages over the others


def adam_speed(grad, x) -> np.ndarray:
    r"""Chapter 08's (8.7): the RMS displacement of Adam's heads with :math:`\varepsilon = x`,
    relative to :math:`\varepsilon = 0`, when every coordinate keeps the size of ``grad``.

    With a gradient that changes slowly, Adam's moments settle at :math:`\hat m \approx g` and
    :math:`\sqrt{\hat v} \approx |g|`, so each coordinate moves at the speed
    :math:`|g|/(|g| + x)` of the step, against 1 at :math:`x = 0`:

    .. math:: s(x) = \Big(\frac{\sum_j \big(|g_j|/(|g_j|+x)\big)^2}{\#\{j: g_j \ne 0\}}\Big)^{1/2}.

    Parameters
    ----------
    grad : Tensor or array-like
        Gradient coordinates (e.g. :math:`\nabla\Phi` of every head, ``(N, d_omega)``), on the scale
        of ``x``.
    x : float or array-like
        Values of :math:`\varepsilon`, ``>= 0``.

    Returns
    -------
    numpy.ndarray
        :math:`s(x)`, the shape of ``x``, decreasing from 1.

    Raises
    ------
    ValueError
        Naming ``grad`` or ``x`` when invalid.

    Examples
    --------
    >>> from mfattn.flows.optimizers import adam_speed
    >>> adam_speed([1.0, -1.0, 0.0], [0.0, 1.0]).tolist()         # zeros do not move at all
    [1.0, 0.5]
    """
    g = _abs_coordinates(grad, "grad")
    x = np.asarray(x, dtype=float)
    if not np.isfinite(x).all() or (x < 0).any():
        raise ValueError("x: expected finite values >= 0")
    s = (g[:, None] / (g[:, None] + x.ravel()[None, :])) ** 2
    return np.sqrt(s.mean(0)).reshape(x.shape)


def adam_crossover(grad, level: float = 0.5) -> float:
    r"""The :math:`x^*` at which :func:`adam_speed` falls to ``level``: Adam on the risk's gradient with
    ``eps`` slows its :math:`N` heads to half speed at :math:`N^* = x^*/\varepsilon`, with ``grad`` the
    coordinates of :math:`\nabla\Phi` (chapter 08, (8.7)).

    Parameters
    ----------
    grad : Tensor or array-like
        Gradient coordinates of :math:`\nabla\Phi`.
    level : float, default 0.5
        The relative speed, in ``(0, 1)``.

    Returns
    -------
    float
        :math:`x^*`.

    Raises
    ------
    ValueError
        Naming ``grad`` or ``level`` when invalid.

    Examples
    --------
    >>> from mfattn.flows.optimizers import adam_crossover
    >>> round(adam_crossover([2.0, 2.0]), 12)                  # 2 / (2 + x) = 1/2
    2.0
    """
    from scipy.optimize import brentq

    if not (isinstance(level, (int, float)) and 0 < level < 1):
        raise ValueError(f"level: expected a number in (0, 1), got {level!r}")
    g = _abs_coordinates(grad, "grad")
    f = lambda u: float(adam_speed(g, math.exp(u))) - level  # noqa: E731
    lo, hi = math.log(g.min()) - 40, math.log(g.max()) + 40
    return math.exp(brentq(f, lo, hi, xtol=1e-12))


def crossing(x, y, level: float) -> float:
    r"""Where the measured curve ``y(x)`` first falls below ``level``, interpolated linearly in
    :math:`(\log x, \log y)` between the two grid points around it; ``nan`` when it never does (or
    starts below).

    Parameters
    ----------
    x : array-like
        Increasing positive abscissae.
    y : array-like
        Positive values at ``x``.
    level : float
        The level, positive.

    Returns
    -------
    float
        The crossing point, or ``nan``.

    Raises
    ------
    ValueError
        Naming ``x`` or ``y`` when invalid.

    Examples
    --------
    >>> from mfattn.flows.optimizers import crossing
    >>> crossing([1, 4, 16], [1.0, 0.8, 0.2], 0.4)                # between 4 and 16, log-linear
    8.0
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.ndim != 1 or x.shape != y.shape or (x <= 0).any() or (np.diff(x) <= 0).any():
        raise ValueError("x: expected increasing positive abscissae, one per value of y")
    if (y <= 0).any() or not np.isfinite(y).all():
        raise ValueError("y: expected finite positive values")
    check_positive(level, "level")
    below = np.nonzero(y < level)[0]
    if below.size == 0 or below[0] == 0:
        return float("nan")
    i = below[0]
    lx, ly = np.log(x[i - 1:i + 1]), np.log(y[i - 1:i + 1])
    u = (math.log(level) - ly[0]) / (ly[1] - ly[0])
    return float(math.exp(lx[0] + u * (lx[1] - lx[0])))


def rms_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    r"""The RMS over heads of the distance between two populations, :math:`\big(\frac1N\sum_i
    |a_i - b_i|^2\big)^{1/2}`, over the last two axes (heads, coordinates): a pathwise error (36)
    between a run and its characteristics, or the displacement of heads from their start.

    Parameters
    ----------
    a : Tensor (..., N, d)
        Heads, possibly recorded at several times (``Run.heads``, ``(R, N, d)``).
    b : Tensor
        Heads of a shape that broadcasts against ``a`` (the same records, or one population ``(N, d)``).

    Returns
    -------
    Tensor (...)
        One distance per leading index of the broadcast shape (0-dim for two populations).

    Raises
    ------
    ValueError
        Naming ``a`` when it is not a tensor of at least two axes, or ``b`` when it is not a tensor
        that broadcasts against ``a``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.flows.optimizers import rms_distance
    >>> a = torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=torch.float64)
    >>> float(rms_distance(a, torch.zeros(2, 2, dtype=torch.float64)))   # sqrt((25 + 0) / 2)
    3.5355339059327378
    >>> rms_distance(torch.stack([a, 2 * a]), a).tolist()     # one per record
    [0.0, 3.535533905932738]
    """
    if not isinstance(a, torch.Tensor) or a.ndim < 2:
        raise ValueError("a: expected a tensor of heads (..., N, d)")
    if not isinstance(b, torch.Tensor) or b.ndim < 2:
        raise ValueError("b: expected a tensor of heads (..., N, d)")
    try:
        torch.broadcast_shapes(a.shape, b.shape)
    except RuntimeError:
        raise ValueError(f"b: shape {tuple(b.shape)} does not broadcast against a's {tuple(a.shape)}") from None
    return (a - b).norm(dim=-1).pow(2).mean(-1).sqrt()


def empirical_grad_phi(model, data, heads: torch.Tensor) -> torch.Tensor:
    r""":math:`\nabla\Phi(\omega_i;\rho^N)` of every head of ``heads`` under their own empirical
    measure :math:`\rho^N = \frac1N\sum_i\delta_{\omega_i}`, averaged over the whole dataset: the
    gradient the mean-field scaling hands each head, :math:`N` times the risk's own gradient
    :math:`\partial_{\omega_i}\mathcal E(\rho^N)`.

    Parameters
    ----------
    model : ParticleModel
        The model (``grad_phi`` and ``d_omega``).
    data : Dataset
        The sequences ``X`` and labels ``Y``.
    heads : Tensor (N, d_omega)
        The population, in the model's dtype and on its device.

    Returns
    -------
    Tensor (N, d_omega)

    Raises
    ------
    ValueError
        Naming ``heads`` when it is not a non-empty ``(N, d_omega)`` tensor.

    Examples
    --------
    >>> from mfattn.flows.optimizers import empirical_grad_phi
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, w = example()
    >>> g = empirical_grad_phi(model, data, heads)
    >>> tuple(g.shape), bool(g.equal(model.grad_phi(data.X, data.Y, heads, w)))
    ((5, 24), True)
    """
    if not isinstance(heads, torch.Tensor) or heads.ndim != 2 or heads.shape[0] == 0 \
            or heads.shape[1] != model.d_omega:
        raise ValueError(f"heads: expected a non-empty tensor (N, {model.d_omega})")
    n = heads.shape[0]
    return model.grad_phi(data.X, data.Y, heads, torch.full((n,), 1.0 / n, dtype=heads.dtype, device=heads.device))


def heavy_ball_clock(model, data, heads: torch.Tensor, *, momentum: float, learning_rates, T: float,
                     zeta: float = 1.0, records: int = 8, substeps: int = 16) -> dict:
    r"""Heavy ball at a fixed momentum :math:`\mu` against the gradient flow of the same heads, on the
    clock (8.5) of chapter 08 and on the unrescaled one.

    For each learning rate :math:`\alpha`, the heads run by the ``heavy-ball`` stepper (whole dataset)
    up to the clock :math:`k\alpha = T(1-\mu)`, which :func:`heavy_ball_time` maps to the flow's time
    :math:`T`. At ``records`` equally spaced recordings, the RMS distance over heads
    (:func:`rms_distance`) is taken to the gradient flow :math:`\dot W = -2\zeta\nabla\Phi(W;\rho_t)`
    (:func:`~mfattn.flows.dynamics.reference_flow`, Runge-Kutta with ``substeps`` steps per recording)
    at the rescaled time :math:`\tau = k\alpha/(1-\mu)`, and at the unrescaled time :math:`k\alpha`;
    the maximum over the recordings is returned. The first should fall like :math:`\alpha`, the second
    should not fall.

    Parameters
    ----------
    model : ParticleModel
        The model.
    data : Dataset
        The whole dataset (no minibatches).
    heads : Tensor (N, d_omega)
        The heads at the start (heavy ball starts at rest).
    momentum : float
        :math:`\mu \in [0, 1)`.
    learning_rates : sequence of float
        The :math:`\alpha`, positive; each must fit a whole number of steps into a recording
        interval :math:`T(1-\mu)/` ``records``.
    T : float
        The gradient flow's horizon, positive.
    zeta : float, default 1.0
        The constant learning-rate profile of both dynamics.
    records, substeps : int
        Recordings over the horizon (the start not counted); Runge-Kutta steps per recording.

    Returns
    -------
    dict
        ``rescaled`` and ``unrescaled``: lists of float, one per learning rate, the largest RMS
        distance over the recordings.

    Raises
    ------
    ValueError
        Naming ``momentum``, ``learning_rates``, ``T``, ``records`` or ``substeps`` when invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.flows.optimizers import heavy_ball_clock
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, _ = example()
    >>> d = heavy_ball_clock(model, data, heads, momentum=0.5, learning_rates=[1 / 16, 1 / 32], T=1.0,
    ...                      records=2, substeps=4)
    >>> bool(1.5 < d["rescaled"][0] / d["rescaled"][1] < 2.5)    # O(alpha) on the clock (8.5)
    True
    >>> bool(d["unrescaled"][1] > 5 * d["rescaled"][1])         # but not on the clock k alpha
    True
    """
    if not (isinstance(momentum, (int, float)) and 0 <= momentum < 1):
        raise ValueError(f"momentum: expected a number in [0, 1), got {momentum!r}")
    check_positive(T, "T")
    check_positive(records, "records", integer=True)
    check_positive(substeps, "substeps", integer=True)
    lrs = np.asarray(learning_rates, dtype=float)
    if lrs.ndim != 1 or lrs.size == 0 or not np.isfinite(lrs).all() or (lrs <= 0).any():
        raise ValueError("learning_rates: expected a non-empty sequence of positive numbers")
    every = T / records
    flow = reference_flow(model, data, heads, T=T, step=every / substeps, record_every=every, zeta=zeta,
                          keep_stages=False, progress=False)
    T_hb = T * (1 - momentum)  # the heavy-ball clock k alpha that (8.5) maps to T
    early = reference_flow(model, data, heads, T=T_hb, step=T_hb / (records * substeps), record_every=T_hb / records,
                           zeta=zeta, keep_stages=False, progress=False)  # the flow at the clock's own times
    out = {"rescaled": [], "unrescaled": []}
    for a in learning_rates:
        try:
            run = integrate(model, data, heads, stepper=HeavyBall(momentum=momentum), step=a, T=T_hb,
                            record_every=T_hb / records, zeta=zeta, batch_size=None, progress=False)
        except ValueError as e:
            raise ValueError(f"learning_rates: {a!r} does not fit the recordings ({e})") from None
        if not np.allclose(heavy_ball_time(run.times.cpu().numpy(), momentum), flow.times.cpu().numpy()):
            raise ValueError(f"learning_rates: {a!r} does not fit the recordings")
        out["rescaled"].append(float(rms_distance(run.heads, flow.population).max()))
        out["unrescaled"].append(float(rms_distance(run.heads, early.population).max()))
    return out
