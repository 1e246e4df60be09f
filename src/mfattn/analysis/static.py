"""The static problem of paper section 4: the mean-field optimum over P(K) and the finite-head optimum.

Used by chapter 03 (Theorems 4.1 and 4.3) and by the long-time chapter (the support condition of the
limit measure).

The risk (10) is convex in the measure: the logits (8) are linear in rho and the cross-entropy (9) is
convex in the logits. Convexity gives, for every rho and every nu in P(K),
``E(nu) >= E(rho) + int Phi(.; rho) d(nu - rho)`` (the first variation (11) is the derivative (12)).
Minimising the right side over nu puts all of nu's mass at a minimiser of ``Phi(.; rho)`` over ``K``,
which brackets the infimum from both sides:

.. math::
    \\mathcal E(\\rho) - \\mathrm{gap}(\\rho) \\le \\inf_{\\mathcal P(K)}\\mathcal E \\le \\mathcal E(\\rho),
    \\qquad \\mathrm{gap}(\\rho) = \\int\\Phi(\\cdot;\\rho)\\,d\\rho - \\min_K\\Phi(\\cdot;\\rho) \\ge 0,

the conditional-gradient (Frank-Wolfe) certificate. ``gap(rho) = 0`` is exactly the support condition
(16) of Theorem 4.3. The minimum over ``K`` is computed by multistart projected gradient descent, so
it is an upper estimate of the true minimum and the lower end of the bracket is as good as that
search: :class:`PhiMinimum` reports how many starts reach the best value.

Here ``K`` is a Euclidean ball (:class:`Ball`). Two facts of the model shape the problem on it (both
are used by chapter 03 and checked in ``tests/test_static.py``):

* ``psi(X; omega)`` is linear in ``W_V`` (and in ``W_O``), so along the segment that scales ``W_V`` by
  ``c in [0, 1]`` the feature is ``c psi`` and ``Phi`` is ``c Phi``; ``Phi(omega) = 0`` when ``W_V = 0``;
* flipping the sign of ``W_V`` maps ``psi`` to ``-psi`` and keeps the norm, so ``Phi(.; rho)`` takes
  the values ``v`` and ``-v`` on ``K``.

Hence ``min_K Phi <= 0``, with equality only if ``Phi(.; rho)`` vanishes on all of ``K``; otherwise every
minimiser lies on the boundary sphere (a minimiser inside ``K`` with ``Phi < 0`` could be scaled out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import numpy as np
from threadpoolctl import threadpool_limits

from .._checks import check_generator, check_positive, check_tensor, check_weights
from .._progress import progress_bar
from ..models.data import Dataset
from ..models.model import HeadModel
from ..models.model import require_heads
from ..models.particles import ParticleModel
from .fitting import LogLogFit, OrderFit, asymptotic_order, loglog_fit

__all__ = [
    "Ball",
    "check_ball",
    "PhiMinimum",
    "Certificate",
    "MeanFieldOptimum",
    "FiniteOptimum",
    "minimize_first_variation",
    "certificate",
    "mean_field_optimum",
    "local_solve",
    "consolidate",
    "finite_head_optimum",
    "round_measure",
    "sample_measure",
    "iid_construction",
    "iid_gap_coefficient",
    "feature_sup",
    "optimum_record",
    "finite_record",
    "rounding_gaps",
    "best_values",
    "rounding_gap_bound",
    "FiniteGaps",
    "finite_gaps",
    "iid_record",
    "IIDSummary",
    "iid_summary",
    "to_record",
    "from_record",
    "MINIMIZERS",
    "minimize",
]


# ---------------------------------------------------------------------------------- the set K
@dataclass(frozen=True)
class Ball:
    """The compact parameter set ``K = {omega : ||omega - center|| <= radius}`` of Theorems 4.1, 4.3.

    ``center`` is the origin when omitted (the ball is then invariant under the sign flip of ``W_V``
    and under orthogonal changes of basis inside a head).

    Attributes
    ----------
    radius : float
        The radius, positive.
    center : Tensor (d_omega,) or None
        The centre (any dtype and device; it is cast to those of the points it meets), or ``None``
        for the origin.

    Raises
    ------
    ValueError
        If ``radius`` is not positive or ``center`` is not a 1-dimensional tensor.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.static import Ball
    >>> ball = Ball(2.5)
    >>> x = torch.tensor([[6.0, 8.0], [0.0, 1.0]], dtype=torch.float64)
    >>> ball.norm(x).tolist(), ball.contains(x).tolist()
    ([10.0, 1.0], [False, True])
    >>> ball.project(x).tolist()
    [[1.5, 2.0], [0.0, 1.0]]
    """

    radius: float
    center: torch.Tensor | None = None

    def __post_init__(self):
        check_positive(self.radius, "radius")
        if self.center is not None:
            check_tensor(self.center, "center", ndim=1)

    def centre_for(self, omega: torch.Tensor) -> torch.Tensor:
        """The ball's centre in ``omega``'s dtype and device (a 0-dim zero when the ball is centred at 0).

        Parameters
        ----------
        omega : Tensor (..., d_omega)
            Points whose dtype and device the centre takes; their last dimension must match the
            centre's length.

        Returns
        -------
        Tensor (d_omega,) or 0-dim Tensor
            The centre, or a scalar zero when ``center`` is ``None`` (it broadcasts either way).

        Raises
        ------
        ValueError
            If ``omega``'s last dimension differs from the centre's.

        Examples
        --------
        >>> import torch
        >>> from mfattn.analysis.static import Ball
        >>> Ball(1.0).centre_for(torch.zeros(4, 3)).shape
        torch.Size([])
        >>> ball = Ball(1.0, torch.ones(3, dtype=torch.float64))
        >>> c = ball.centre_for(torch.zeros(4, 3))
        >>> c.shape, c.dtype
        (torch.Size([3]), torch.float32)
        """
        if self.center is None:
            return torch.zeros((), dtype=omega.dtype, device=omega.device)
        if self.center.shape[0] != omega.shape[-1]:
            raise ValueError(f"omega: dimension {omega.shape[-1]} differs from the center's {self.center.shape[0]}")
        return self.center.to(dtype=omega.dtype, device=omega.device)

    def norm(self, omega: torch.Tensor) -> torch.Tensor:
        """``||omega - center||`` along the last axis.

        Parameters
        ----------
        omega : Tensor (..., d_omega)
            Points, one per row.

        Returns
        -------
        Tensor (...)
            Their Euclidean distances to the centre, in ``omega``'s dtype.

        Examples
        --------
        >>> import torch
        >>> from mfattn.analysis.static import Ball
        >>> ball = Ball(1.0, torch.tensor([1.0, 0.0]))
        >>> ball.norm(torch.tensor([[4.0, 4.0], [1.0, 0.0]])).tolist()
        [5.0, 0.0]
        """
        return (omega - self.centre_for(omega)).norm(dim=-1)

    def sphere_deviation(self, omega: torch.Tensor) -> float:
        """How far the points are from the boundary sphere: ``max | ||omega - center|| / radius - 1 |``.

        Parameters
        ----------
        omega : Tensor (..., d_omega)
            Points, one per row; at least one.

        Returns
        -------
        float
            The largest relative distance of a point's norm to the radius (0 when all lie on the sphere).

        Raises
        ------
        ValueError
            Naming ``omega`` when it holds no point.

        Examples
        --------
        >>> import torch
        >>> from mfattn.analysis.static import Ball
        >>> Ball(2.0).sphere_deviation(torch.tensor([[0.0, 2.0], [1.5, 0.0]]))
        0.25
        """
        if omega.numel() == 0:
            raise ValueError("omega: holds no point")
        return float((self.norm(omega) / self.radius - 1).abs().max())

    def project(self, omega: torch.Tensor) -> torch.Tensor:
        """Euclidean projection onto the ball, row by row (points inside are unchanged).

        Parameters
        ----------
        omega : Tensor (..., d_omega)
            Points, one per row.

        Returns
        -------
        Tensor (..., d_omega)
            The nearest points of the ball: a point outside is moved along the ray from the
            centre onto the sphere.

        Examples
        --------
        >>> import torch
        >>> from mfattn.analysis.static import Ball
        >>> ball = Ball(2.5)
        >>> ball.project(torch.tensor([[6.0, 8.0], [0.0, 1.0]])).tolist()
        [[1.5, 2.0], [0.0, 1.0]]
        """
        c = self.centre_for(omega)
        r = (omega - c).norm(dim=-1, keepdim=True)
        return c + (omega - c) * torch.clamp(self.radius / r.clamp_min(torch.finfo(omega.dtype).tiny), max=1.0)

    def contains(self, omega: torch.Tensor, rtol: float = 1e-12) -> torch.Tensor:
        """Whether each point lies in the ball, up to a relative tolerance on the radius.

        Parameters
        ----------
        omega : Tensor (..., d_omega)
            Points, one per row.
        rtol : float, optional
            Points with ``||omega - center|| <= radius * (1 + rtol)`` count as inside (a projected
            point may land a rounding error outside); default 1e-12.

        Returns
        -------
        Tensor of bool (...)
            ``True`` where the point lies in the ball.

        Examples
        --------
        >>> import torch
        >>> from mfattn.analysis.static import Ball
        >>> x = torch.tensor([[3.0, 4.0], [3.0, 4.1]])
        >>> Ball(5.0).contains(x).tolist()
        [True, False]
        """
        return self.norm(omega) <= self.radius * (1 + rtol)

    def sample_sphere(self, n: int, d: int, *, generator: torch.Generator, dtype=torch.float64, device="cpu"):
        """``n`` points uniform on the boundary sphere, drawn on the CPU in float64 with ``generator``.

        Parameters
        ----------
        n : int
            Number of points, positive.
        d : int
            Dimension of the space (``d_omega``; the centre's length when the ball has one).
        generator : torch.Generator
            A seeded CPU generator; the draw is the same on every device and dtype.
        dtype : torch.dtype, optional
            dtype of the result; default float64.
        device : str or torch.device, optional
            Device of the result; default ``"cpu"``.

        Returns
        -------
        Tensor (n, d)
            Points at distance ``radius`` from the centre, in ``dtype`` on ``device``.

        Examples
        --------
        >>> import torch
        >>> from mfattn.analysis.static import Ball
        >>> g = torch.Generator().manual_seed(0)
        >>> u = Ball(2.0).sample_sphere(5, 3, generator=g)
        >>> u.shape, u.dtype
        (torch.Size([5, 3]), torch.float64)
        >>> [round(r, 12) for r in u.norm(dim=1).tolist()]
        [2.0, 2.0, 2.0, 2.0, 2.0]
        """
        check_positive(n, "n", integer=True)
        u = torch.randn(n, d, generator=generator, dtype=torch.float64)
        u = self.radius * u / u.norm(dim=1, keepdim=True)
        if self.center is not None:
            u = u + self.center.detach().to("cpu", torch.float64)
        return u.to(device=device, dtype=dtype)


def check_ball(ball) -> Ball:
    """``ball`` if it is a :class:`Ball`, else ``ValueError`` naming the argument.

    Parameters
    ----------
    ball : object
        The value to check.

    Returns
    -------
    Ball
        ``ball`` itself.

    Raises
    ------
    ValueError
        If ``ball`` is not a :class:`Ball`.

    Examples
    --------
    >>> from mfattn.analysis.static import Ball, check_ball
    >>> check_ball(Ball(1.0)).radius
    1.0
    >>> check_ball(1.0)
    Traceback (most recent call last):
    ...
    ValueError: ball: expected a mfattn.analysis.static.Ball, got float
    """
    if not isinstance(ball, Ball):
        raise ValueError(f"ball: expected a mfattn.analysis.static.Ball, got {type(ball).__name__}")
    return ball


def _check_search(model, tool: str, ball, generator) -> Ball:
    """The checks that open the seeded searches over ``K`` of ``tool``, in this order: ``model`` a
    :class:`HeadModel`, ``ball`` a :class:`Ball` (returned), ``generator`` a ``torch.Generator``."""
    require_heads(model, tool)
    ball = check_ball(ball)
    check_generator(generator)
    return ball


# ------------------------------------------------------------- the inner problem: min_K Phi
class PhiMinimum(NamedTuple):
    """Result of the multistart minimisation of ``Phi(.; rho)`` over ``K``.

    A named tuple returned by :func:`minimize_first_variation`, with the fields below. ``S`` is
    the number of starts; tensors are in the model's dtype and device.

    Parameters
    ----------
    omega : Tensor (d_omega,)
        The best point found.
    value : float
        ``Phi`` at ``omega``: an upper estimate of ``min_K Phi``.
    points : Tensor (S, d_omega)
        Every start's final point.
    values : Tensor (S,)
        ``Phi`` at those points.
    n_agree : int
        Starts whose final value lies within ``agree_tol * max(1, |value|)`` of the best.
    n_starts : int
        Number of starts ``S``.
    residual : float
        Largest projected-gradient step ``||omega - P(omega - grad Phi)||`` over the agreeing
        starts (zero at a stationary point of ``Phi`` on ``K``).
    n_random : int
        The first ``n_random`` starts are the random points on the sphere, the rest the given ones.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.static import Ball, minimize_first_variation
    >>> model, data, heads, w = example()  # d_omega = 4 d_x d_k = 24
    >>> g = torch.Generator().manual_seed(0)
    >>> mn = minimize_first_variation(
    ...     model, data, heads, w, Ball(8.0), generator=g,
    ...     n_starts=4, iters=10)
    >>> mn.points.shape, mn.n_starts, mn.n_random
    (torch.Size([4, 24]), 4, 4)
    >>> bool(mn.value == mn.values.min()), 1 <= mn.n_agree <= mn.n_starts
    (True, True)
    """

    omega: torch.Tensor  # (d_omega,) the best point found
    value: float  # Phi at it: an upper estimate of min_K Phi
    points: torch.Tensor  # (S, d_omega) every start's final point
    values: torch.Tensor  # (S,) Phi at those points
    n_agree: int  # starts whose final value is within agree_tol (relative) of the best
    n_starts: int
    residual: float  # largest projected-gradient step |omega - P(omega - grad)| over the agreeing starts
    n_random: int  # the first n_random starts are the random points on the sphere; then the given ones

    def count_within(self, rel_tol: float, *, random_only: bool = False) -> int:
        """Starts whose final value lies within ``rel_tol * max(1, |best|)`` of the best; with
        ``random_only``, among the ``n_random`` random starts only (the given starts, such as the
        atoms of a solver's measure, vary in number with the solver's path).

        The descent stops after a fixed number of steps, so the starts in the best basin end at
        distances from the best value that spread continuously over several decades (about 1e-10
        to 1e-4 on chapter 03's problems); a count at a tolerance inside that spread depends on
        floating-point rounding. A tolerance above it (chapter 03 uses 1e-3) counts the basin.

        Parameters
        ----------
        rel_tol : float
            Relative tolerance, positive.
        random_only : bool, optional
            Count only among the first ``n_random`` starts (the random ones); default ``False``.

        Returns
        -------
        int
            The number of starts within the tolerance (at least 1 when the best start is counted).

        Raises
        ------
        ValueError
            If ``rel_tol`` is not positive.

        Examples
        --------
        >>> import torch
        >>> from mfattn.analysis.static import PhiMinimum
        >>> values = torch.tensor([-2.0, -1.9999, -1.5, -2.0])
        >>> mn = PhiMinimum(omega=torch.zeros(3), value=-2.0,
        ...                 points=torch.zeros(4, 3), values=values,
        ...                 n_agree=2, n_starts=4, residual=0.0, n_random=3)
        >>> mn.count_within(1e-3), mn.count_within(1e-6)
        (3, 2)
        >>> mn.count_within(1e-3, random_only=True)  # among the first 3
        2
        """
        check_positive(rel_tol, "rel_tol")
        values = self.values[: self.n_random] if random_only else self.values
        return int(((values - self.value) <= rel_tol * max(1.0, abs(self.value))).sum())


def _descend_phi(model: HeadModel, X, G, q, ball: Ball, iters: int, progress: bool):
    """Batched projected gradient descent of ``q -> Phi(q)`` (``G`` fixed), one adaptive step per point:
    a trial is accepted where it lowers Phi, and that point's step grows by 1.5, else halves."""
    phi = model.phi_at(X, G, q)
    g = model.grad_at(X, G, q)
    step = 0.1 * ball.radius / g.norm(dim=1).clamp_min(1e-30)
    for _ in progress_bar(range(iters), enabled=progress, desc="min Phi", leave=False):
        trial = ball.project(q - step[:, None] * g)
        phi_t = model.phi_at(X, G, trial)
        ok = phi_t < phi
        if bool(ok.any()):
            q = torch.where(ok[:, None], trial, q)
            phi = torch.where(ok, phi_t, phi)
            g[ok] = model.grad_at(X, G, q[ok])
        step = torch.where(ok, 1.5 * step, 0.5 * step)
        if bool((step * g.norm(dim=1) < 1e-14 * ball.radius).all()):
            break
    return q, phi, g


def minimize_first_variation(
    model: HeadModel,
    data: Dataset,
    heads: torch.Tensor,
    weights: torch.Tensor | None,
    ball: Ball,
    *,
    generator: torch.Generator,
    n_starts: int = 64,
    starts: torch.Tensor | None = None,
    iters: int = 200,
    agree_tol: float = 1e-6,
    progress: bool = False,
) -> PhiMinimum:
    r""":math:`\min_{\omega\in K}\Phi(\omega;\rho)` of (16) by multistart projected gradient descent.

    ``rho`` is the measure of ``heads`` with ``weights``. The starts are ``n_starts`` points uniform
    on the boundary sphere of ``K`` (drawn with ``generator``; the minimum lies there unless
    ``Phi`` vanishes on ``K``, see the module docstring) and the rows of ``starts``, if given (for
    instance the atoms of ``rho`` and earlier minimisers). All starts descend together, batched.

    Parameters
    ----------
    model : HeadModel
        The attention model.
    data : Dataset
        The dataset of the risk: ``X (n, L, d_x)``, ``Y (n, L, d_v)``, in the model's dtype and device.
    heads : Tensor (N, d_omega)
        Atoms of ``rho``.
    weights : Tensor (N,) or None
        Their weights on the simplex; ``None`` for ``1/N`` each.
    ball : Ball
        The set ``K``.
    generator : torch.Generator
        Seeded generator of the random starts.
    n_starts : int, optional
        Number of random starts on the sphere (0 allowed when ``starts`` is given); default 64.
    starts : Tensor (S', d_omega) or None, optional
        Further starts, projected onto ``K`` first; default ``None``.
    iters : int, optional
        Number of projected gradient steps (fewer when every step has become negligible);
        default 200.
    agree_tol : float, optional
        Relative tolerance of :attr:`PhiMinimum.n_agree`; default 1e-6.
    progress : bool, optional
        Show a progress bar; default ``False``.

    Returns
    -------
    PhiMinimum
        The best point and value, with every start's final point and value (``n_starts`` random
        starts first, then the rows of ``starts``).

    Raises
    ------
    ValueError
        If ``ball`` is not a :class:`Ball`, an argument is out of range, or there is no start.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.static import Ball, minimize_first_variation
    >>> model, data, heads, w = example()  # d_omega = 4 d_x d_k = 24
    >>> ball = Ball(8.0)
    >>> g = torch.Generator().manual_seed(0)
    >>> mn = minimize_first_variation(
    ...     model, data, heads, w, ball, generator=g,
    ...     n_starts=4, starts=heads, iters=10)
    >>> mn.points.shape, mn.n_random  # 4 random starts and the 5 atoms
    (torch.Size([9, 24]), 4)
    >>> mn.value < 0  # min_K Phi <= 0
    True
    >>> round(float(ball.norm(mn.omega)), 6)  # on the sphere
    8.0
    """
    ball = _check_search(model, "minimize_first_variation", ball, generator)
    check_positive(n_starts, "n_starts", integer=True, allow_zero=True)
    check_positive(iters, "iters", integer=True, allow_zero=True)
    check_positive(agree_tol, "agree_tol")
    data, _, heads, weights, G = model.prepare(data, heads, weights)
    parts = []
    if n_starts:
        parts.append(ball.sample_sphere(n_starts, model.d_omega, generator=generator, dtype=model.dtype,
                                        device=model.device))
    if starts is not None:
        parts.append(ball.project(model.check_heads(starts, "starts")))
    if not parts:
        raise ValueError("n_starts: needs at least one start (n_starts > 0 or starts)")
    q0 = torch.cat(parts)
    q, phi, g = _descend_phi(model, data.X, G, q0, ball, iters, progress)
    best = int(torch.argmin(phi))
    vbest = float(phi[best])
    agree = (phi - vbest) <= agree_tol * max(1.0, abs(vbest))
    res = (q - ball.project(q - g)).norm(dim=1)
    return PhiMinimum(q[best].clone(), vbest, q, phi, int(agree.sum()), q.shape[0], float(res[agree].max()),
                      n_starts)


# ---------------------------------------------------------------- the certificate (bracket)
class Certificate(NamedTuple):
    r"""The Frank-Wolfe bracket ``lower <= inf_{P(K)} E <= upper`` at a measure rho.

    A named tuple returned by :func:`certificate`, with the fields below.

    Parameters
    ----------
    upper : float
        ``E(rho)``, the risk (10) of the measure.
    lower : float
        ``E(rho) - gap``.
    gap : float
        ``int Phi d rho - min_K Phi``, nonnegative; zero if and only if the support condition (16)
        holds.
    phi_mean : float
        ``int Phi(.; rho) d rho``.
    phi_min : float
        ``min_K Phi(.; rho)``, an upper estimate by multistart.
    phi_support : Tensor (N,)
        ``Phi(omega_i; rho)`` at the atoms, in the model's dtype.
    minimum : PhiMinimum
        The inner minimisation that gave ``phi_min``.

    Examples
    --------
    At the teacher of a teacher task, ``Phi`` vanishes on ``K`` and the bracket closes on the
    optimal risk:

    >>> import torch
    >>> from mfattn.models.tasks import teacher_task
    >>> T = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)
    >>> from mfattn.analysis.static import Ball, certificate
    >>> g = torch.Generator().manual_seed(0)
    >>> c = certificate(
    ...     T.model, T.data, T.teacher_heads, T.teacher_weights, Ball(8.0),
    ...     generator=g, n_starts=4, iters=10)
    >>> c.gap < 1e-12, abs(c.upper - T.optimal_risk) < 1e-12
    (True, True)
    >>> c.phi_support.shape
    torch.Size([3])
    """

    upper: float  # E(rho), eq. (10)
    lower: float  # E(rho) - gap
    gap: float  # int Phi d rho - min_K Phi >= 0; zero iff the support condition (16) holds
    phi_mean: float  # int Phi(.; rho) d rho
    phi_min: float  # min_K Phi(.; rho) (upper estimate, by multistart)
    phi_support: torch.Tensor  # (N,) Phi(omega_i; rho) at the atoms
    minimum: PhiMinimum


def certificate(model: HeadModel, data: Dataset, heads, weights, ball: Ball, *, generator: torch.Generator,
                n_starts: int = 64, starts=None, iters: int = 200, agree_tol: float = 1e-6,
                progress: bool = False) -> Certificate:
    r"""Conditional-gradient certificate of a measure rho over ``P(K)`` (Theorem 4.3, convexity of (10)).

    .. math:: \mathcal E(\rho)-\inf_{\mathcal P(K)}\mathcal E \le \int\Phi(\cdot;\rho)\,d\rho-\min_K\Phi(\cdot;\rho).

    The atoms of rho join the starts of the inner minimisation, so the gap is never negative.
    The lower end is rigorous up to the inner search: if a better minimiser of Phi exists than the
    multistart found, the true gap is larger.

    Parameters
    ----------
    model : HeadModel
        The attention model.
    data : Dataset
        The dataset of the risk, in the model's dtype and device.
    heads : Tensor (N, d_omega)
        Atoms of rho, all in ``K``.
    weights : Tensor (N,) or None
        Their weights on the simplex; ``None`` for ``1/N`` each.
    ball : Ball
        The set ``K``.
    generator : torch.Generator
        Seeded generator of the random starts.
    n_starts : int, optional
        Random starts of the inner minimisation (:func:`minimize_first_variation`); default 64.
    starts : Tensor (S', d_omega) or None, optional
        Further starts, after the atoms; default ``None``.
    iters : int, optional
        Projected gradient steps of the inner minimisation; default 200.
    agree_tol : float, optional
        Relative tolerance of :attr:`PhiMinimum.n_agree`; default 1e-6.
    progress : bool, optional
        Show a progress bar; default ``False``.

    Returns
    -------
    Certificate
        The bracket ``(lower, upper)`` with its gap, the integrals of ``Phi`` and the inner minimum.

    Raises
    ------
    ValueError
        If an atom lies outside ``K`` or an argument is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.static import Ball, certificate
    >>> model, data, heads, w = example()
    >>> g = torch.Generator().manual_seed(0)
    >>> c = certificate(model, data, heads, w, Ball(8.0),
    ...                 generator=g, n_starts=4, iters=10)
    >>> c.gap > 0, c.lower < c.upper
    (True, True)
    >>> c.minimum.n_starts  # 4 random starts and the 5 atoms
    9
    """
    require_heads(model, "certificate")
    ball = check_ball(ball)
    heads, weights = model.check_measure(heads, weights)
    if not bool(ball.contains(heads, rtol=1e-9).all()):
        raise ValueError(f"heads: some atoms lie outside K (largest norm {float(ball.norm(heads).max()):.6g} > "
                         f"radius {ball.radius:.6g})")
    extra = heads if starts is None else torch.cat([heads, model.check_heads(starts, "starts")])
    mn = minimize_first_variation(model, data, heads, weights, ball, generator=generator, n_starts=n_starts,
                                  starts=extra, iters=iters, agree_tol=agree_tol, progress=progress)
    data, _, _, _, G = model.prepare(data, heads, weights)
    phi_sup = model.phi_at(data.X, G, heads)
    risk = float(model.risk_and_dissipation(data.X, data.Y, heads, weights, dissipation=False)[0])
    phi_mean = float((weights * phi_sup).sum())
    gap = max(0.0, phi_mean - mn.value)
    return Certificate(risk, risk - gap, gap, phi_mean, mn.value, phi_sup, mn)


# ------------------------------------------------------- local solve over atoms (and weights)
def local_solve(model: HeadModel, X, Y, atoms, w, ball: Ball, *, free_weights: bool, maxiter: int, ftol: float):
    """Minimise the risk (10) of ``sum_j w_j delta_{omega_j}`` over the atoms in ``K`` (and, with
    ``free_weights``, over the weights on the simplex) by SLSQP, which keeps the ball and simplex
    constraints exactly and converges superlinearly near a solution.

    The gradient is exact: ``w_j grad Phi(omega_j; rho)`` in ``omega_j`` (13) and ``Phi(omega_j; rho)``
    in ``w_j`` (11). The local step of :func:`mean_field_optimum` and the polish of
    :func:`finite_head_optimum`; no validation (their callers have checked). Also timed, a block of
    iterations at a time, by ``tools/steps/ch03.py``.

    Parameters
    ----------
    model : HeadModel
    X, Y : Tensor (B, L, d_x), (B, L, d_v)
        The data.
    atoms : Tensor (m, d_omega)
        The starting atoms, in ``ball``.
    w : Tensor (m,)
        Their weights (on the simplex).
    ball : Ball
        The compact set ``K``.
    free_weights : bool
        Optimise the weights too (else they stay ``w``).
    maxiter : int
        SLSQP's iteration cap.
    ftol : float
        SLSQP's tolerance on the risk.

    Returns
    -------
    atoms : Tensor (m, d_omega)
        The solution, projected onto ``ball``.
    weights : Tensor (m,)
        Its weights, clipped to the simplex (``w`` unless ``free_weights``).
    result : scipy.optimize.OptimizeResult
        SLSQP's own record (``nit``, ``nfev``, ``fun``, ...).

    Examples
    --------
    >>> from mfattn.analysis.static import Ball, local_solve
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, w = example()
    >>> ball = Ball(3.0)
    >>> A, ww, res = local_solve(model, data.X, data.Y, ball.project(heads), w, ball, free_weights=True,
    ...                          maxiter=30, ftol=1e-12)
    >>> bool(model.risk(data, A, ww) < model.risk(data, ball.project(heads), w))
    True
    >>> bool(ball.contains(A).all()), round(float(ww.sum()), 12), bool((ww >= 0).all())
    (True, 1.0, True)
    """
    import numpy as np
    from scipy.optimize import minimize

    m, D = atoms.shape
    c = ball.centre_for(atoms).expand(m, D).detach().cpu().numpy()
    t = lambda v: torch.from_numpy(v).to(device=atoms.device, dtype=atoms.dtype)
    w_fixed = w

    def split(x):
        A = t(x[: m * D]).reshape(m, D)
        return A, (t(x[m * D :]) if free_weights else w_fixed)

    def fun(x):
        A, ww = split(x)
        risk, grad, phi = model.risk_grad_phi(X, Y, A, ww)
        gA = (ww[:, None] * grad).flatten()
        if free_weights:
            gA = torch.cat([gA, phi])
        return float(risk), gA.detach().cpu().double().numpy()

    def ball_fun(x):
        A = x[: m * D].reshape(m, D) - c
        return ball.radius**2 - (A * A).sum(1)

    def ball_jac(x):
        A = x[: m * D].reshape(m, D) - c
        J = np.zeros((m, x.size))
        for j in range(m):  # sparse pattern of an (m, m*D) Jacobian; m is small
            J[j, j * D : (j + 1) * D] = -2 * A[j]
        return J

    cons = [dict(type="ineq", fun=ball_fun, jac=ball_jac)]
    x0 = atoms.detach().cpu().double().numpy().ravel()
    bounds = [(None, None)] * (m * D)
    if free_weights:
        x0 = np.r_[x0, w.detach().cpu().double().numpy()]
        bounds += [(0.0, 1.0)] * m
        cons.append(dict(type="eq", fun=lambda x: x[m * D :].sum() - 1.0,
                         jac=lambda x: np.r_[np.zeros(m * D), np.ones(m)][None]))
    # SLSQP calls LAPACK at every iteration; OpenBLAS's worker threads then spin against torch's
    # own thread pool (ten times slower on two cores), so BLAS runs on one thread here.
    with threadpool_limits(limits=1, user_api="blas"):
        res = minimize(fun, x0, jac=True, method="SLSQP", bounds=bounds, constraints=cons,
                       options=dict(maxiter=maxiter, ftol=ftol))
    A, ww = split(res.x)
    A = ball.project(A)
    if free_weights:
        ww = ww.clamp_min(0)
        ww = ww / ww.sum()
    return A, ww, res


# ------------------------------------------------------------ the mean-field optimum over P(K)
def _distinct_vertices(mn: PhiMinimum, below: float, radius: float, k: int) -> torch.Tensor:
    """Up to ``k`` of the multistart's final points with ``Phi < below``, best first, pairwise at least
    ``1e-3 * radius`` apart (the best point is always included)."""
    order = torch.argsort(mn.values)
    chosen = [int(order[0])]
    for i in order[1:].tolist():
        if len(chosen) >= k or float(mn.values[i]) >= below:
            break
        if bool(((mn.points[chosen] - mn.points[i]).norm(dim=1) > 1e-3 * radius).all()):
            chosen.append(i)
    return mn.points[chosen]


@dataclass
class MeanFieldOptimum:
    """A measure over ``K`` that (nearly) minimises (10), with its certificate and its history.

    Returned by :func:`mean_field_optimum`.

    Attributes
    ----------
    heads : Tensor (m, d_omega)
        The solver's atoms.
    weights : Tensor (m,)
        Their weights, on the simplex.
    certificate : Certificate
        The final certificate of the measure, with the final search's starts.
    upper : list of float
        ``E(rho)`` after each outer iteration (the last from the final certificate).
    gap : list of float
        The certificate's gap after each outer iteration (the last from the final certificate).
    support_heads : Tensor (m', d_omega)
        The atoms that carry weight, after :func:`consolidate`.
    support_weights : Tensor (m',)
        Their weights, summing to one.
    bracket : tuple of float
        ``(lower, upper)`` of the certificate (a property).

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.static import Ball, mean_field_optimum
    >>> model, data, _, _ = example()
    >>> g = torch.Generator().manual_seed(0)
    >>> opt = mean_field_optimum(
    ...     model, data, Ball(8.0), generator=g, n_atoms0=2,
    ...     outer=1, n_starts=4, iters=10, maxiter=10, final_starts=4,
    ...     progress=False)
    >>> lower, upper = opt.bracket
    >>> upper == opt.upper[-1], lower <= upper, len(opt.gap)
    (True, True, 1)
    """

    heads: torch.Tensor  # (m, d_omega) atoms
    weights: torch.Tensor  # (m,)
    certificate: Certificate
    upper: list  # E(rho) after each outer iteration
    gap: list  # the certificate's gap after each outer iteration
    support_heads: torch.Tensor  # (m', d_omega) the atoms that carry weight (see mean_field_optimum)
    support_weights: torch.Tensor  # (m',) their weights, summing to one

    @property
    def bracket(self) -> tuple[float, float]:
        return self.certificate.lower, self.certificate.upper


def mean_field_optimum(
    model: HeadModel,
    data: Dataset,
    ball: Ball,
    *,
    generator: torch.Generator,
    atoms0: torch.Tensor | None = None,
    n_atoms0: int = 8,
    init_scale: float = 0.5,
    outer: int = 6,
    n_starts: int = 64,
    iters: int = 150,
    maxiter: int = 3000,
    ftol: float = 1e-15,
    tol: float = 1e-9,
    stall: float = 0.9,
    vertices: int = 4,
    final_starts: int | None = None,
    weight_tol: float = 1e-6,
    merge_tol: float = 1e-4,
    progress: bool = True,
) -> MeanFieldOptimum:
    r"""A minimiser of the risk (10) over ``P(K)``, with the bracket of :func:`certificate`.

    Fully corrective Frank-Wolfe in which the corrective step also moves the atoms. The measure is
    a weighted dictionary of atoms (``atoms0``, or ``n_atoms0`` points at radius
    ``init_scale * radius``). Every outer iteration (i) minimises the risk jointly over the atoms in
    ``K`` and the weights on the simplex (a local solve, SLSQP), (ii) computes the certificate, and,
    unless its gap is below ``tol``, (iii) adds up to ``vertices`` distinct local minimisers of
    ``Phi(.; rho)`` below ``int Phi d rho`` (the best is the Frank-Wolfe vertex) to the dictionary with
    zero weight. Atoms whose weight falls to zero are dropped. It stops early when the gap fails to
    shrink by the factor ``stall`` while the risk drops by less than ``1e-3`` times the gap: the
    local solve has then reached its floor (an interior optimum has ``Phi = 0`` on ``K``, and its
    gap is of the order of the residual, not of its square). A gap below ``tol`` is confirmed with
    ``final_starts`` fresh starts (default ``4 * n_starts``) before the loop stops, and the returned
    certificate is recomputed with as many. Because the risk is convex in rho, a vanishing gap certifies a global
    minimiser over ``P(K)`` (Theorem 4.3), whatever local solve produced it.

    The measure found (``heads``, ``weights``) is the solver's: its certificate is exact, but its
    atoms are those of the path the solver took, which depends on floating-point rounding. Vertices
    added in a last iteration that the stopping rule runs on one CPU and not on another stay with
    weights near 1e-9, and one atom can be split between two points of a symmetry orbit. The result
    therefore also carries ``support_heads``, ``support_weights``: the same measure consolidated by
    :func:`consolidate` (atoms of weight below ``weight_tol`` dropped, atoms whose features agree to
    ``merge_tol`` merged), which is what the problem determines. Count atoms, and build
    constructions that must not depend on the path (rounding, i.i.d. draws), on the support; the
    dropped mass (at most ``weight_tol`` per atom) moves the risk by far less than the certificate.
    Consolidating inside the loop would be wrong: a vertex close to an atom, with a small weight, is
    how the corrective step moves that atom, and a local solve cannot restore what a drop of weight
    1e-8 costs the first-order certificate.

    Parameters
    ----------
    model : HeadModel
        The attention model.
    data : Dataset
        The dataset of the risk, in the model's dtype and device.
    ball : Ball
        The set ``K``.
    generator : torch.Generator
        Seeded generator of the initial atoms and of every search's random starts.
    atoms0 : Tensor (m0, d_omega) or None, optional
        Initial atoms (projected onto ``K``), with uniform weights; default ``None``: ``n_atoms0``
        random points.
    n_atoms0 : int, optional
        Number of random initial atoms when ``atoms0`` is ``None``; default 8.
    init_scale : float, optional
        Radius of the random initial atoms as a fraction of the ball's; default 0.5.
    outer : int, optional
        Largest number of outer iterations; default 6.
    n_starts : int, optional
        Random starts of each certificate's inner search; default 64.
    iters : int, optional
        Projected gradient steps of the inner search; default 150.
    maxiter : int, optional
        Largest number of SLSQP iterations of a local solve; default 3000.
    ftol : float, optional
        SLSQP's tolerance on the risk; default 1e-15.
    tol : float, optional
        Gap below which the loop stops (after confirmation); default 1e-9.
    stall : float, optional
        The gap must shrink at least by this factor per iteration, or the loop stops (see above);
        default 0.9.
    vertices : int, optional
        Largest number of local minimisers of ``Phi`` added per iteration; default 4.
    final_starts : int or None, optional
        Random starts of the confirming and final certificates; default ``None``: ``4 * n_starts``.
    weight_tol : float, optional
        :func:`consolidate`'s weight threshold for the support; default 1e-6.
    merge_tol : float, optional
        :func:`consolidate`'s feature tolerance for the support; default 1e-4.
    progress : bool, optional
        Show a progress bar with the risk, gap and atom count; default ``True``.

    Returns
    -------
    MeanFieldOptimum
        The measure, its consolidated support, the final certificate and the history of the risk
        and the gap.

    Raises
    ------
    ValueError
        If ``ball`` is not a :class:`Ball` or an argument is out of range.

    Examples
    --------
    One outer iteration with tiny searches (the chapters use the defaults):

    >>> import torch
    >>> from mfattn.models.tasks import teacher_task
    >>> T = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)
    >>> from mfattn.analysis.static import Ball, mean_field_optimum
    >>> g = torch.Generator().manual_seed(0)
    >>> opt = mean_field_optimum(
    ...     T.model, T.data, Ball(8.0), generator=g, n_atoms0=2,
    ...     outer=1, n_starts=4, iters=10, maxiter=10, final_starts=4,
    ...     progress=False)
    >>> lower, upper = opt.bracket
    >>> upper >= T.optimal_risk - 1e-12  # the teacher, in K, is optimal
    True
    >>> opt.heads.shape[1], round(float(opt.support_weights.sum()), 12)
    (24, 1.0)
    """
    ball = _check_search(model, "mean_field_optimum", ball, generator)
    data = model.check_data(data)
    for k, v in dict(n_atoms0=n_atoms0, outer=outer, n_starts=n_starts, iters=iters, maxiter=maxiter).items():
        check_positive(v, k, integer=True)
    check_positive(init_scale, "init_scale")
    check_positive(ftol, "ftol")
    check_positive(tol, "tol", allow_zero=True)
    check_positive(stall, "stall")
    check_positive(vertices, "vertices", integer=True)
    check_positive(weight_tol, "weight_tol", allow_zero=True)
    check_positive(merge_tol, "merge_tol", allow_zero=True)
    X, Y = data.X, data.Y
    if final_starts is not None:
        check_positive(final_starts, "final_starts", integer=True)
    n_final = final_starts if final_starts is not None else 4 * n_starts
    # the final search draws its starts from a seed fixed now, so that they do not depend on how many
    # iterations the loop runs (which can differ from one CPU to another in the last iteration)
    final_seed = int(torch.randint(2**62, (1,), generator=generator))
    final_gen = lambda: torch.Generator(device=generator.device).manual_seed(final_seed)
    if atoms0 is None:
        atoms = init_scale * ball.sample_sphere(n_atoms0, model.d_omega, generator=generator, dtype=model.dtype,
                                                device=model.device)
    else:
        atoms = model.check_heads(atoms0, "atoms0")
    atoms = ball.project(atoms)
    w = torch.full((atoms.shape[0],), 1.0 / atoms.shape[0], dtype=model.dtype, device=model.device)
    uppers, gaps = [], []
    warm = None
    bar = progress_bar(range(outer), enabled=progress, desc="Frank-Wolfe", leave=False)
    for _ in bar:
        atoms, w, _ = local_solve(model, X, Y, atoms, w, ball, free_weights=True, maxiter=maxiter, ftol=ftol)
        keep = w > 1e-12 * float(w.max())
        atoms, w = atoms[keep], w[keep] / w[keep].sum()
        cert = certificate(model, data, atoms, w, ball, generator=generator, n_starts=n_starts, starts=warm,
                           iters=iters)
        if cert.gap <= tol:
            # confirm with the final search before stopping: the smaller search can miss a vertex
            # by more than tol, and whether it does depends on rounding
            cert = certificate(model, data, atoms, w, ball, generator=final_gen(), n_starts=n_final, starts=warm,
                               iters=iters)
        uppers.append(cert.upper)
        gaps.append(cert.gap)
        bar.set_postfix(risk=f"{cert.upper:.8f}", gap=f"{cert.gap:.2e}", atoms=atoms.shape[0])
        stalled = len(gaps) > 1 and gaps[-1] > stall * gaps[-2] and uppers[-2] - uppers[-1] < 1e-3 * gaps[-1]
        if cert.gap <= tol or stalled:
            break
        new = _distinct_vertices(cert.minimum, cert.phi_mean, ball.radius, vertices)
        atoms = torch.cat([atoms, new])
        w = torch.cat([w, w.new_zeros(new.shape[0])])
        order = torch.argsort(cert.minimum.values)[: max(1, n_starts // 4)]
        warm = cert.minimum.points[order]  # the best local minima seed the next inner search
    keep = w > 0
    atoms, w = atoms[keep], w[keep]
    cert = certificate(model, data, atoms, w, ball, generator=final_gen(), n_starts=n_final, starts=warm, iters=iters)
    uppers[-1], gaps[-1] = cert.upper, cert.gap
    s_heads, s_weights = consolidate(model, X, atoms, w, weight_tol=weight_tol, merge_tol=merge_tol)
    return MeanFieldOptimum(atoms, w, cert, uppers, gaps, s_heads, s_weights)


def consolidate(model: HeadModel, X: torch.Tensor, heads: torch.Tensor, weights: torch.Tensor, *,
                weight_tol: float = 1e-6, merge_tol: float = 1e-3) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The same measure ``sum_j w_j delta_{omega_j}`` on fewer atoms: drop atoms of weight below
    ``weight_tol`` and merge atoms whose features ``psi(X; omega)`` (7) agree to ``merge_tol``.

    Two atoms are merged when ``||psi_i - psi_j|| <= merge_tol * max_k ||psi_k||`` (norms over every
    sequence, position and output). The logits (8), and so the risk (10) and ``Phi`` (11), depend on
    the atoms only through their features, so a merge moves them by at most ``merge_tol`` times the
    merged weight; the heavier atom stays, carrying both weights. Atoms are visited by decreasing
    weight. Two points of one orbit of the head's symmetry (an orthogonal change of basis inside
    ``W_Q, W_K`` or inside ``W_V, W_O`` keeps the norm) have equal features, so a solver can split one
    atom of an optimum between them, and how it does depends on rounding; after this step the count
    of atoms is the number of distinct features. Returns ``(heads, weights)``, the weights summing to one.

    Used by :func:`mean_field_optimum` for the support of the measure it returns (chapter 03).

    Parameters
    ----------
    model : HeadModel
        The attention model.
    X : Tensor (n, L, d_x)
        Sequences on which the features are compared, in the model's dtype and device.
    heads : Tensor (m, d_omega)
        Atoms of the measure.
    weights : Tensor (m,)
        Their weights on the simplex (``None`` is taken as ``1/m`` each).
    weight_tol : float, optional
        Atoms lighter than this are dropped (the heaviest is always kept); in [0, 1), default 1e-6.
    merge_tol : float, optional
        Relative feature tolerance of a merge, nonnegative; default 1e-3.

    Returns
    -------
    heads : Tensor (m', d_omega)
        The kept atoms, by decreasing weight before merging (``m' <= m``).
    weights : Tensor (m',)
        Their weights, summing to one.

    Raises
    ------
    ValueError
        If ``weight_tol`` is not in [0, 1), ``merge_tol`` is negative, or the measure is invalid.

    Examples
    --------
    A head and its twin with ``W_V`` and ``W_O`` negated (same features), and a negligible third
    atom, consolidate to one atom:

    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.static import consolidate
    >>> model, data, drawn, _ = example()
    >>> h = drawn[:1]
    >>> W_Q, W_K, W_V, W_O = model.unpack(h)
    >>> twin = model.pack(W_Q, W_K, -W_V, -W_O)
    >>> heads = torch.cat([h, twin, drawn[1:2]])
    >>> w = torch.tensor([0.6, 0.4 - 1e-9, 1e-9], dtype=torch.float64)
    >>> H, W = consolidate(model, data.X, heads, w)
    >>> H.shape, W.tolist(), bool(torch.equal(H[0], h[0]))
    (torch.Size([1, 24]), [1.0], True)
    """
    require_heads(model, "consolidate")
    heads, weights = model.check_measure(heads, weights)
    X = model.check_X(X)
    check_positive(weight_tol, "weight_tol", allow_zero=True)
    check_positive(merge_tol, "merge_tol", allow_zero=True)
    if weight_tol >= 1:
        raise ValueError(f"weight_tol: must be below 1, got {weight_tol}")
    keep = weights >= weight_tol
    keep[torch.argmax(weights)] = True
    heads, weights = heads[keep], weights[keep]
    order = torch.argsort(weights, descending=True, stable=True)
    heads, weights = heads[order], weights[order].clone()
    F = model.features(X, heads).reshape(heads.shape[0], -1)
    scale = float(F.norm(dim=1).max())
    D = torch.cdist(F, F)
    kept = []
    for j in range(heads.shape[0]):  # atoms of one measure, a handful: not a hot path
        near = [k for k in kept if float(D[j, k]) <= merge_tol * scale]
        if near:
            weights[near[0]] += weights[j]
        else:
            kept.append(j)
    idx = torch.tensor(kept, device=heads.device)
    w = weights[idx]
    return heads[idx], w / w.sum()


# --------------------------------------------------------------- the finite-head optimum inf E_N
class FiniteOptimum(NamedTuple):
    """Best of several projected-gradient runs on ``E_N(omega_1, ..., omega_N)`` over ``K^N``.

    A named tuple returned by :func:`finite_head_optimum`, with the fields below; ``R`` is the
    number of restarts.

    Parameters
    ----------
    heads : Tensor (N, d_omega)
        The best configuration found.
    value : float
        ``E_N`` there: an upper estimate of ``inf E_N``.
    values : Tensor (R,)
        The final value of every restart, float64.
    labels : tuple of str (R,)
        Where each restart started: ``"random"``, or the name given in ``inits``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.static import Ball, finite_head_optimum
    >>> model, data, heads, _ = example()
    >>> g = torch.Generator().manual_seed(0)
    >>> fo = finite_head_optimum(
    ...     model, data, 3, Ball(8.0), generator=g, n_random=1,
    ...     inits={"drawn": heads[:3]}, iters=10, polish_max=0)
    >>> fo.heads.shape, fo.values.shape, fo.labels
    (torch.Size([3, 24]), torch.Size([2]), ('random', 'drawn'))
    """

    heads: torch.Tensor  # (N, d_omega) the best configuration found
    value: float  # E_N there: an upper estimate of inf E_N
    values: torch.Tensor  # (R,) final value of every restart
    labels: tuple  # (R,) where each restart started ("random", or the names given with inits)


def _descend_risk(model, X, Y, heads, ball, iters: int):
    """Projected gradient descent of ``E_N`` with uniform weights; a common adaptive step (x1.5 on a
    decrease, /2 otherwise). The gradient of ``E_N`` in ``omega_i`` is ``grad Phi(omega_i; rho_N) / N``;
    the step uses ``grad Phi`` itself (the mean-field time scale of (19))."""
    w = torch.full((heads.shape[0],), 1.0 / heads.shape[0], dtype=heads.dtype, device=heads.device)
    scale = 1.0 / (X.shape[0] * X.shape[1])
    risk = lambda H: float(model.risk_and_dissipation(X, Y, H, w, dissipation=False)[0])
    grad = lambda H: model.grad_at(X, model.pullback(X, Y, H, w) * scale, H)
    f, g = risk(heads), grad(heads)
    step = 0.1 * ball.radius / float(g.norm(dim=1).max().clamp_min(1e-30))
    for _ in range(iters):
        trial = ball.project(heads - step * g)
        ft = risk(trial)
        if ft < f:
            heads, f = trial, ft
            g = grad(heads)
            step *= 1.5
        else:
            step *= 0.5
            if step * float(g.norm(dim=1).max()) < 1e-15 * ball.radius:
                break
    return heads, f


def finite_head_optimum(
    model: HeadModel,
    data: Dataset,
    N: int,
    ball: Ball,
    *,
    generator: torch.Generator,
    n_random: int = 4,
    inits: dict | None = None,
    iters: int = 300,
    init_scale: float = 1.0,
    polish_max: int = 256,
) -> FiniteOptimum:
    r""":math:`\inf_{\omega_1..\omega_N\in K}\mathcal E_N` of (14), estimated from above by restarts.

    Restarts: ``n_random`` configurations of ``N`` points uniform in direction at radius
    ``init_scale * radius`` (drawn with ``generator``), and every ``(N, d_omega)`` tensor of the dict
    ``inits`` (name -> configuration; e.g. :func:`round_measure` or :func:`sample_measure` of a
    near-optimal measure, the constructions of Theorem 4.1's proof). Each runs ``iters`` projected
    gradient steps and, when ``N * d_omega <= polish_max``, is polished by SLSQP (the local solve of
    :func:`mean_field_optimum` with the weights held at ``1/N``). The spread of the final values
    measures how rugged the landscape is.

    Parameters
    ----------
    model : HeadModel
        The attention model.
    data : Dataset
        The dataset of the risk, in the model's dtype and device.
    N : int
        Number of heads, positive.
    ball : Ball
        The set ``K``.
    generator : torch.Generator
        Seeded generator of the random restarts.
    n_random : int, optional
        Number of random restarts (0 allowed when ``inits`` is given); default 4.
    inits : dict of str to Tensor (N, d_omega), optional
        Named starting configurations, projected onto ``K^N``; default ``None``.
    iters : int, optional
        Projected gradient steps per restart; default 300.
    init_scale : float, optional
        Radius of the random restarts as a fraction of the ball's, in (0, 1]; default 1.0.
    polish_max : int, optional
        Polish by SLSQP when ``N * d_omega`` is at most this (0: never); default 256.

    Returns
    -------
    FiniteOptimum
        The best configuration and its risk, with every restart's final value and label (the
        random restarts first, then ``inits`` in order).

    Raises
    ------
    ValueError
        If an argument is out of range, a configuration of ``inits`` has not ``N`` heads, or
        there is no restart.

    Examples
    --------
    From the teacher's own heads, the best value is the optimal risk:

    >>> import torch
    >>> from mfattn.models.tasks import teacher_task
    >>> T = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)
    >>> from mfattn.analysis.static import Ball, finite_head_optimum
    >>> g = torch.Generator().manual_seed(0)
    >>> fo = finite_head_optimum(
    ...     T.model, T.data, 3, Ball(8.0), generator=g, n_random=1,
    ...     inits={"teacher": T.teacher_heads}, iters=10, polish_max=0)
    >>> abs(fo.value - T.optimal_risk) < 1e-12
    True
    >>> bool(fo.values[1] < fo.values[0])  # "teacher" beats "random"
    True
    """
    ball = _check_search(model, "finite_head_optimum", ball, generator)
    data = model.check_data(data)
    check_positive(N, "N", integer=True)
    check_positive(n_random, "n_random", integer=True, allow_zero=True)
    check_positive(iters, "iters", integer=True, allow_zero=True)
    check_positive(init_scale, "init_scale")
    check_positive(polish_max, "polish_max", integer=True, allow_zero=True)
    if init_scale > 1:
        raise ValueError(f"init_scale: must be at most 1 (a fraction of the radius), got {init_scale}")
    starts, labels = [], []
    for _ in range(n_random):
        starts.append(init_scale * ball.sample_sphere(N, model.d_omega, generator=generator, dtype=model.dtype,
                                                      device=model.device))
        labels.append("random")
    for name, h in (inits or {}).items():
        h = model.check_heads(h, f"inits[{name!r}]")
        if h.shape[0] != N:
            raise ValueError(f"inits[{name!r}]: has {h.shape[0]} heads, expected N = {N}")
        starts.append(ball.project(h))
        labels.append(str(name))
    if not starts:
        raise ValueError("n_random: needs at least one restart (n_random > 0 or inits)")
    finals, values = [], []
    w = torch.full((N,), 1.0 / N, dtype=model.dtype, device=model.device)
    for h in starts:  # a handful of independent problems; each run is batched over its N heads
        h, f = _descend_risk(model, data.X, data.Y, h, ball, iters)
        if N * model.d_omega <= polish_max:
            h, _, res = local_solve(model, data.X, data.Y, h, w, ball, free_weights=False, maxiter=1000,
                                    ftol=1e-15)
            f = float(model.risk_and_dissipation(data.X, data.Y, h, w, dissipation=False)[0])
        finals.append(h)
        values.append(f)
    best = min(range(len(values)), key=values.__getitem__)
    return FiniteOptimum(finals[best], values[best], torch.tensor(values, dtype=torch.float64), tuple(labels))


def round_measure(heads: torch.Tensor, weights: torch.Tensor, N: int) -> torch.Tensor:
    r"""``N`` equally weighted heads that round the measure ``sum_j w_j delta_{omega_j}``: atom ``j`` is
    repeated ``n_j`` times with ``n_j`` the largest-remainder rounding of ``N w_j`` (so
    ``|n_j / N - w_j| < 1/N`` and ``sum_j n_j = N``). The deterministic alternative to the i.i.d.
    draws of Theorem 4.1's proof, for a measure with finitely many atoms.

    Parameters
    ----------
    heads : Tensor (m, d_omega)
        Atoms of the measure.
    weights : Tensor (m,)
        Their weights on the simplex, in ``heads``' dtype and device (``None``: ``1/m`` each).
    N : int
        Number of heads, positive.

    Returns
    -------
    Tensor (N, d_omega)
        The atoms, atom ``j`` repeated ``n_j`` times, in the order of ``heads``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.static import round_measure
    >>> heads = torch.eye(3, dtype=torch.float64)
    >>> weights = torch.tensor([0.5, 0.35, 0.15], dtype=torch.float64)
    >>> H = round_measure(heads, weights, 4)  # N w = (2, 1.4, 0.6)
    >>> H.argmax(dim=1).tolist()
    [0, 0, 1, 2]
    """
    check_tensor(heads, "heads", ndim=2)
    check_positive(N, "N", integer=True)
    w = check_weights(weights, heads.shape[0], heads).detach().to("cpu", torch.float64)
    target = N * w
    n = torch.floor(target).long()
    short = N - int(n.sum())
    if short > 0:
        n[torch.argsort(target - n, descending=True)[:short]] += 1
    return heads.repeat_interleave(n.to(heads.device), dim=0)


def sample_measure(heads: torch.Tensor, weights: torch.Tensor | None, N: int, *,
                   generator: torch.Generator) -> torch.Tensor:
    """``N`` i.i.d. draws from ``sum_j w_j delta_{omega_j}`` (the construction of Theorem 4.1's proof).

    Parameters
    ----------
    heads : Tensor (m, d_omega)
        Atoms of the measure.
    weights : Tensor (m,) or None
        Their weights on the simplex, in ``heads``' dtype and device; ``None`` for ``1/m`` each.
    N : int
        Number of draws, positive.
    generator : torch.Generator
        Seeded CPU generator of the draws.

    Returns
    -------
    Tensor (N, d_omega)
        The drawn atoms, with repetitions.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.static import sample_measure
    >>> heads = torch.eye(3, dtype=torch.float64)
    >>> g = torch.Generator().manual_seed(0)
    >>> H = sample_measure(heads, None, 5, generator=g)
    >>> H.shape, bool((H.sum(dim=1) == 1).all())  # rows are atoms
    (torch.Size([5, 3]), True)
    """
    check_tensor(heads, "heads", ndim=2)
    check_positive(N, "N", integer=True)
    check_generator(generator)
    w = check_weights(weights, heads.shape[0], heads).detach().to("cpu", torch.float64)
    idx = torch.multinomial(w, N, replacement=True, generator=generator)
    return heads[idx.to(heads.device)]


# ------------------------------------------------- Theorem 4.1's proof: N i.i.d. heads from rho
def iid_construction(model: ParticleModel, data, heads, weights, N_grid, *, n_draws: int,
                     generator: torch.Generator, progress: bool = True) -> dict:
    r"""The construction in the proof of Theorem 4.1: ``N`` heads drawn i.i.d. from rho.

    For every ``N`` of ``N_grid`` and each of ``n_draws`` draws, returns (as ``(len(N_grid), n_draws)``
    arrays in a dict):

    * ``logit_error``: :math:`\mathbb E_X\frac1L\sum_l\|z_l^{\hat\rho^N}(X)-z_l^{\rho}(X)\|` , the left side of
      (15) averaged over the dataset's sequences and positions;
    * ``logit_error_max``: the same norm, maximised over sequences and positions (the bound (15) is
      uniform in them);
    * ``logit_mse``: :math:`\mathbb E_X\frac1L\sum_l\|z_l^{\hat\rho^N}-z_l^{\rho}\|^2`, whose mean over draws is
      :math:`\frac1N\mathbb E_X\frac1L\sum_l\int\|\psi_l-z_l^\rho\|^2d\rho` (the variance step of the proof);
    * ``risk_gap``: :math:`\mathcal E(\hat\rho^N)-\mathcal E(\rho)` (10);
    * ``first_order``: its first-order term :math:`\int\Phi(\cdot;\rho)\,d(\hat\rho^N-\rho)` (11), of mean
      zero. ``risk_gap - first_order`` is the second-order remainder: its mean is the gap's
      :math:`c/N+O(N^{-2})` (:func:`iid_gap_coefficient`), with a spread of order :math:`1/N` instead
      of :math:`N^{-1/2}` (a control variate).

    rho is the (weighted) measure of ``heads``. The atoms' features are computed once; a draw is a
    vector of counts, so its logits are a matrix product (vectorised over draws). Any
    :class:`~mfattn.models.particles.ParticleModel` works: for the two-layer network of chapter 07 the
    "logits" are the network's outputs and the risk is the square loss.

    Parameters
    ----------
    model : ParticleModel
        A :class:`~mfattn.models.model.HeadModel` or another particle model.
    data : Dataset
        The dataset, in the model's dtype and device.
    heads : Tensor (m, d_omega)
        Atoms of rho.
    weights : Tensor (m,) or None
        Their weights on the simplex; ``None`` for ``1/m`` each.
    N_grid : iterable of int
        The numbers of heads ``N``, each positive.
    n_draws : int
        Draws per ``N``, positive.
    generator : torch.Generator
        Seeded CPU generator of the draws.
    progress : bool, optional
        Show a progress bar over ``N_grid``; default ``True``.

    Returns
    -------
    dict
        ``"N"``: the list of ``N``; ``"risk"``: ``E(rho)`` as a float; and ``"logit_error"``,
        ``"logit_error_max"``, ``"logit_mse"``, ``"risk_gap"``, ``"first_order"``: NumPy float64
        arrays ``(len(N_grid), n_draws)``.

    Raises
    ------
    ValueError
        If ``model`` is not a particle model or an argument is out of range.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import teacher_task
    >>> T = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)
    >>> from mfattn.analysis.static import iid_construction
    >>> g = torch.Generator().manual_seed(0)
    >>> out = iid_construction(
    ...     T.model, T.data, T.teacher_heads, T.teacher_weights, [2, 4],
    ...     n_draws=3, generator=g, progress=False)
    >>> out["N"], out["risk_gap"].shape
    ([2, 4], (2, 3))
    >>> abs(out["risk"] - T.optimal_risk) < 1e-12
    True
    >>> bool((out["risk_gap"] >= 0).all())  # the teacher is optimal
    True
    """
    if not isinstance(model, ParticleModel):
        raise ValueError("model: expected a mfattn.HeadModel or another mfattn.models.particles.ParticleModel")
    data = model.check_data(data)
    heads, weights = model.check_measure(heads, weights)
    check_positive(n_draws, "n_draws", integer=True)
    check_generator(generator)
    N_grid = [int(N) for N in N_grid]
    for N in N_grid:
        check_positive(N, "N_grid", integer=True)
    Psi = model.features(data.X, heads)  # (m, *S, V): (m, n, L, d_v) for heads, (m, n, 1) for neurons
    z = torch.tensordot(weights, Psi, dims=1)
    E = float(model.loss(data.Y, z).mean())
    m = heads.shape[0]
    flat = Psi.reshape(m, -1)
    w_cpu = weights.detach().to("cpu", torch.float64)
    phi = model.first_variation(data, heads, heads, weights).detach().to("cpu", torch.float64)
    phi_mean = float(w_cpu @ phi)
    out = {k: torch.empty(len(N_grid), n_draws, dtype=torch.float64)
           for k in ("logit_error", "logit_error_max", "logit_mse", "risk_gap", "first_order")}
    batch = max(1, (1 << 26) // (Psi[0].numel() * Psi.element_size()))  # draws per matrix product
    for a, N in enumerate(progress_bar(N_grid, enabled=progress, desc="N grid", leave=False)):
        for s in range(0, n_draws, batch):
            k = min(batch, n_draws - s)
            idx = torch.multinomial(w_cpu.expand(k, m), N, replacement=True, generator=generator)
            counts = torch.zeros(k, m, dtype=torch.float64).scatter_add_(1, idx, torch.ones(k, N, dtype=torch.float64))
            zN = ((counts / N).to(Psi) @ flat).reshape(k, *Psi.shape[1:])
            err = (zN - z).norm(dim=-1).flatten(1)  # (k, n L) or (k, n)
            out["logit_error"][a, s : s + k] = err.mean(1).cpu()
            out["logit_error_max"][a, s : s + k] = err.amax(1).cpu()
            out["logit_mse"][a, s : s + k] = err.pow(2).mean(1).cpu()
            out["risk_gap"][a, s : s + k] = (model.loss(data.Y, zN).flatten(1).mean(1) - E).cpu()
            out["first_order"][a, s : s + k] = (counts / N) @ phi - phi_mean
    return {"N": N_grid, "risk": E, **{k: v.numpy() for k, v in out.items()}}


def iid_gap_coefficient(model: ParticleModel, data, heads, weights=None) -> float:
    r"""The coefficient :math:`c` of the mean i.i.d. risk gap, :math:`\mathbb E\,\mathcal E(\hat\rho^N)-\mathcal E(\rho)
    = c/N + O(N^{-2})`, in the construction of Theorem 4.1's proof (chapters 03 and 07).

    The first-order term of the expansion in :math:`\delta z=z^{\hat\rho^N}-z^\rho` has mean zero, and
    :math:`\mathbb E\,\delta z\,\delta z^\top=\frac1N\mathrm{Cov}_\rho(\psi)`, so

    .. math:: c=\tfrac12\,\mathbb E_X\tfrac1L\sum_l\int(\psi_l-z_l^\rho)^\top\nabla^2\ell(z_l^\rho)\,(\psi_l-z_l^\rho)\,d\rho .

    Under cross-entropy :math:`\nabla^2\ell` is the softmax Jacobian (4) and the remainder is
    :math:`O(N^{-2})`; under the square loss of chapter 07 it is the identity, the loss is exactly
    quadratic and the mean gap is exactly :math:`c/N` for every ``N``.

    Parameters
    ----------
    model : ParticleModel
        A :class:`~mfattn.models.model.HeadModel` or another particle model.
    data : Dataset
        The dataset, in the model's dtype and device.
    heads : Tensor (m, d_omega)
        Atoms of rho.
    weights : Tensor (m,) or None, optional
        Their weights on the simplex; default ``None``: ``1/m`` each.

    Returns
    -------
    float
        The coefficient :math:`c \ge 0`.

    Raises
    ------
    ValueError
        If ``model`` is not a particle model or the measure is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.static import iid_gap_coefficient
    >>> model, data, heads, w = example()
    >>> c = iid_gap_coefficient(model, data, heads, w)
    >>> isinstance(c, float), c > 0
    (True, True)
    """
    if not isinstance(model, ParticleModel):
        raise ValueError("model: expected a mfattn.HeadModel or another mfattn.models.particles.ParticleModel")
    data = model.check_data(data)
    heads, weights = model.check_measure(heads, weights)
    Psi = model.features(data.X, heads)
    z = torch.tensordot(weights, Psi, dims=1)
    H = model.loss_hessian(data.Y, z)  # (*S, V, V)
    D = Psi - z
    quad = torch.einsum("m...i,...ij,m...j->m...", D, H, D).flatten(1).mean(1)  # (m,)
    return 0.5 * float((weights * quad).sum())


def feature_sup(model: HeadModel, X: torch.Tensor, ball: Ball, *, generator: torch.Generator, n_starts: int = 32,
                iters: int = 200) -> float:
    r"""Estimate :math:`B_\psi=\sup_{X,l,\omega\in K}\|\psi_l(X;\omega)\|`, the bound used in (15).

    Multistart projected gradient ascent of :math:`\max_{b,l}\|\psi_l(X_b;\omega)\|^2` over ``K`` (by
    autograd of the head map; one small batch of starts, not a hot path). A lower estimate of the
    supremum over ``K`` for the sequences of ``X``.

    Parameters
    ----------
    model : HeadModel
        The attention model.
    X : Tensor (n, L, d_x)
        Sequences, in the model's dtype and device.
    ball : Ball
        The set ``K``.
    generator : torch.Generator
        Seeded generator of the starts (on the sphere).
    n_starts : int, optional
        Number of starts, positive; default 32.
    iters : int, optional
        Ascent steps per start; default 200.

    Returns
    -------
    float
        The largest ``||psi_l(X_b; omega)||`` found.

    Raises
    ------
    ValueError
        If an argument is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.static import Ball, feature_sup
    >>> model, data, heads, _ = example()
    >>> g = torch.Generator().manual_seed(0)
    >>> B = feature_sup(model, data.X, Ball(8.0), generator=g,
    ...                 n_starts=4, iters=10)
    >>> psi = model.features(data.X, heads)  # the heads have norms below 6.4: inside K
    >>> B >= float(psi.norm(dim=-1).max())
    True
    """
    require_heads(model, "feature_sup")
    ball = check_ball(ball)
    X = model.check_X(X)
    check_generator(generator)
    check_positive(n_starts, "n_starts", integer=True)
    check_positive(iters, "iters", integer=True, allow_zero=True)
    q = ball.sample_sphere(n_starts, model.d_omega, generator=generator, dtype=model.dtype, device=model.device)

    def value(q):
        psi = model.forward(X, q)[0] @ model.W_out  # (S, n, L, d_v)
        return psi.pow(2).sum(-1).flatten(1).amax(1)

    f = value(q)
    step = torch.full_like(f, 0.1 * ball.radius)
    for _ in range(iters):
        qq = q.detach().requires_grad_(True)
        g = torch.autograd.grad(value(qq).sum(), qq)[0]
        g = g / g.norm(dim=1, keepdim=True).clamp_min(1e-30)
        with torch.no_grad():
            trial = ball.project(q + step[:, None] * g)
            ft = value(trial)
            ok = ft > f
            q = torch.where(ok[:, None], trial, q)
            f = torch.where(ok, ft, f)
            step = torch.where(ok, 1.5 * step, 0.5 * step)
    return float(f.max().sqrt())


# --------------------------------------------- chapter 03's measurements as records and summaries
def optimum_record(model: HeadModel, data: Dataset, ball: Ball, *, generator: torch.Generator, **options) -> dict:
    """The mean-field optimum over ``K`` summarised as a JSON-ready record (one point of a sweep over ``K``).

    Runs :func:`mean_field_optimum` and keeps what chapter 03 prints and draws of it.

    Parameters
    ----------
    model : HeadModel
    data : Dataset
    ball : Ball
        The compact set ``K``.
    generator : torch.Generator
        Seeded CPU generator of the solver.
    **options
        Further keyword arguments of :func:`mean_field_optimum` (``n_atoms0``, ``outer``, ...).

    Returns
    -------
    dict
        ``lo``, ``up``: the bracket of ``inf E``; ``atoms``: the support's atom count;
        ``on_sphere``: :meth:`Ball.sphere_deviation` of the solver's atoms; ``phi_min``: the
        certificate's ``min_K Phi``; ``logit_rms``: the root mean square over the data of the
        optimum's logit norm ``||z_l||``.

    Raises
    ------
    ValueError
        Naming ``ball`` when it is not a :class:`Ball`, or the invalid option (from the solver).

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.static import Ball, optimum_record
    >>> from mfattn.models.tasks import example
    >>> model, data, _, _ = example()
    >>> r = optimum_record(model, data, Ball(8.0), generator=torch.Generator().manual_seed(0), n_atoms0=2,
    ...                    outer=1, n_starts=4, iters=10, maxiter=10, final_starts=4, progress=False)
    >>> sorted(r), r["lo"] <= r["up"]
    (['atoms', 'lo', 'logit_rms', 'on_sphere', 'phi_min', 'up'], True)
    """
    ball = check_ball(ball)
    o = mean_field_optimum(model, data, ball, generator=generator, **options)
    z = model.logits(data.X, o.heads, o.weights)
    return dict(lo=o.bracket[0], up=o.bracket[1], atoms=o.support_heads.shape[0],
                on_sphere=ball.sphere_deviation(o.heads), phi_min=o.certificate.phi_min,
                logit_rms=float(z.pow(2).sum(-1).mean().sqrt()))


def finite_record(model: HeadModel, data: Dataset, N: int, ball: Ball, heads, weights, *,
                  generator: torch.Generator, **options) -> dict:
    """``inf E_N`` estimated from above, with restarts from the rounding and an i.i.d. draw of a measure.

    :func:`finite_head_optimum` with its random restarts and two more: ``"rounded"``, the
    :func:`round_measure` of ``(heads, weights)`` to ``N`` heads, and ``"iid"``, a
    :func:`sample_measure` draw from it (drawn first from ``generator``, which then seeds the
    random restarts). The result is JSON-ready (one point of a sweep over ``N``).

    Parameters
    ----------
    model : HeadModel
    data : Dataset
    N : int
        Number of heads, positive.
    ball : Ball
        The compact set ``K``.
    heads : Tensor (m, d_omega)
        Atoms of the measure the two extra restarts start from (a mean-field optimum).
    weights : Tensor (m,)
        Their weights, on the simplex.
    generator : torch.Generator
        Seeded CPU generator.
    **options
        Further keyword arguments of :func:`finite_head_optimum` (``n_random``, ``iters``, ...).

    Returns
    -------
    dict
        ``best``: the best value, an upper estimate of ``inf E_N``; ``values``: every restart's final
        value (list of float); ``labels``: where each started (list of str).

    Raises
    ------
    ValueError
        Naming ``N`` when it is not a positive integer, or the invalid argument (from the solver).

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.static import Ball, finite_record
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, _ = example()
    >>> w = torch.full((heads.shape[0],), 1.0 / heads.shape[0], dtype=heads.dtype)
    >>> r = finite_record(model, data, 3, Ball(8.0), heads, w, generator=torch.Generator().manual_seed(0),
    ...                   n_random=1, iters=10, polish_max=0)
    >>> r["labels"], r["best"] == min(r["values"])
    (['random', 'rounded', 'iid'], True)
    """
    check_positive(N, "N", integer=True)
    inits = {"rounded": round_measure(heads, weights, N), "iid": sample_measure(heads, weights, N, generator=generator)}
    fo = finite_head_optimum(model, data, N, ball, generator=generator, inits=inits, **options)
    return dict(best=fo.value, values=fo.values.tolist(), labels=list(fo.labels))


def rounding_gaps(model: ParticleModel, data, heads, weights, N_grid, reference: float) -> np.ndarray:
    """``E(rounding of rho to N heads) - reference`` for every ``N`` of ``N_grid`` (:func:`round_measure`).

    Parameters
    ----------
    model : ParticleModel
    data : Dataset
    heads : Tensor (m, d_omega)
        Atoms of rho.
    weights : Tensor (m,)
        Their weights, on the simplex.
    N_grid : iterable of int
        Numbers of heads, each positive.
    reference : float
        The risk the gaps are measured from (``E(rho)``, or the upper end of a bracket of ``inf E``).

    Returns
    -------
    ndarray (len(N_grid),)
        The gaps, float64.

    Raises
    ------
    ValueError
        Naming ``N_grid`` when it holds a non-positive number, or ``reference`` when it is not finite.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.static import rounding_gaps
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, _ = example()
    >>> w = torch.full((heads.shape[0],), 1.0 / heads.shape[0], dtype=heads.dtype)
    >>> E = float(model.risk(data, heads, w))
    >>> bool(abs(rounding_gaps(model, data, heads, w, [heads.shape[0]], E)[0]) < 1e-12)  # exact at N = m
    True
    """
    N_grid = [int(N) for N in N_grid]
    if any(N < 1 for N in N_grid):
        raise ValueError(f"N_grid: every N must be positive, got {N_grid}")
    if not math.isfinite(reference):
        raise ValueError(f"reference: must be finite, got {reference}")
    return np.array([float(model.risk(data, round_measure(heads, weights, N))) - reference for N in N_grid])


def iid_record(model: ParticleModel, data, heads, weights, N_grid, *, n_draws: int, generator: torch.Generator,
               progress: bool = True) -> dict:
    """:func:`iid_construction` with its arrays as nested lists: a JSON-ready point of a sweep.

    Parameters
    ----------
    model, data, heads, weights, N_grid, n_draws, generator, progress
        As in :func:`iid_construction`.

    Returns
    -------
    dict
        The keys of :func:`iid_construction`, every array as a nested list of float.

    Raises
    ------
    ValueError
        As :func:`iid_construction`.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.static import iid_record
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, _ = example()
    >>> r = iid_record(model, data, heads, None, [1, 2], n_draws=3, generator=torch.Generator().manual_seed(0),
    ...                progress=False)
    >>> r["N"], len(r["risk_gap"]), len(r["risk_gap"][0])
    ([1, 2], 2, 3)
    """
    r = iid_construction(model, data, heads, weights, N_grid, n_draws=n_draws, generator=generator, progress=progress)
    return {name: v.tolist() if isinstance(v, np.ndarray) else v for name, v in r.items()}


class IIDSummary(NamedTuple):
    """The i.i.d. construction at one measure, with the fits chapter 03 reads off it (:func:`iid_summary`).

    Parameters
    ----------
    N : ndarray (n_N,)
        The numbers of heads.
    logit_error, logit_error_max, risk_gap : ndarray (n_N, n_draws)
        As in :func:`iid_construction`.
    mean_gap : ndarray (n_N,)
        The mean risk gap over draws.
    error : LogLogFit
        Log-log fit of the mean logit error (15) against ``N``.
    gap : LogLogFit or None
        Log-log fit of the mean risk gap; ``None`` unless it is positive at every ``N``.
    abs_gap : LogLogFit
        Log-log fit of the mean of ``|risk gap|``.
    order : OrderFit or None
        The mean gap's order in ``1/N`` as ``1/N -> 0`` (:func:`~mfattn.analysis.fitting.asymptotic_order`);
        ``None`` unless the mean gap is positive at every ``N``.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.static import iid_summary
    >>> N = [1, 2, 4, 8]
    >>> s = iid_summary({"N": N, "logit_error": [[n ** -0.5] * 2 for n in N],
    ...                  "logit_error_max": [[n ** -0.5] * 2 for n in N], "risk_gap": [[1 / n] * 2 for n in N]})
    >>> round(float(s.error.slope), 6), round(float(s.gap.slope), 6)
    (-0.5, -1.0)
    """

    N: np.ndarray
    logit_error: np.ndarray
    logit_error_max: np.ndarray
    risk_gap: np.ndarray
    mean_gap: np.ndarray
    error: LogLogFit
    gap: LogLogFit | None
    abs_gap: LogLogFit
    order: OrderFit | None


def iid_summary(record: dict) -> IIDSummary:
    """Fit the i.i.d. construction's logit error and risk gap against ``N`` (chapter 03, (15) and Theorem 4.1).

    The mean gap of a non-optimal measure is ``1/N`` under a noise of ``N^-1/2 / sqrt(n_draws)``: it can
    come out negative at large ``N``, where no power law can be fitted, so its fits are then ``None``.
    The mean gap is ``a/N + b/N^2 + ...``: its order as ``1/N -> 0`` is estimated by Richardson
    extrapolation of the local slopes (:func:`~mfattn.analysis.fitting.asymptotic_order`).

    Parameters
    ----------
    record : dict
        What :func:`iid_construction` or :func:`iid_record` returns (other keys are ignored): ``"N"``,
        ``"logit_error"``, ``"logit_error_max"`` and ``"risk_gap"``, arrays or nested lists
        ``(len(N), n_draws)``.

    Returns
    -------
    IIDSummary

    Raises
    ------
    ValueError
        Naming ``record`` when a key is missing or an array's shape does not match ``N``.

    Examples
    --------
    >>> from mfattn.analysis.static import iid_summary
    >>> s = iid_summary({"N": [1, 2, 4], "logit_error": [[1.0], [0.7], [0.5]],
    ...                  "logit_error_max": [[2.0], [1.4], [1.0]], "risk_gap": [[0.1], [-0.01], [0.02]]})
    >>> s.gap is None, s.order is None, s.mean_gap.tolist()
    (True, True, [0.1, -0.01, 0.02])
    """
    keys = ("N", "logit_error", "logit_error_max", "risk_gap")
    if not isinstance(record, dict) or any(k not in record for k in keys):
        raise ValueError(f"record: expected a dict with the keys {list(keys)}")
    N = np.array(record["N"])
    err, err_max, gap = (np.array(record[k], dtype=np.float64) for k in keys[1:])
    if any(a.ndim != 2 or a.shape[0] != N.size for a in (err, err_max, gap)):
        raise ValueError(f"record: arrays must be (len(N), n_draws) = ({N.size}, n_draws)")
    mean_gap = gap.mean(1)
    positive = bool(np.all(mean_gap > 0))
    return IIDSummary(N, err, err_max, gap, mean_gap, loglog_fit(N, err.mean(1)),
                      loglog_fit(N, mean_gap) if positive else None, loglog_fit(N, np.abs(gap).mean(1)),
                      asymptotic_order(1.0 / N, mean_gap) if positive else None)


def to_record(result) -> dict:
    """A result of this module as a dict of tensors, numbers and strings (saved and read back without unpickling).

    Parameters
    ----------
    result : Certificate, MeanFieldOptimum, FiniteOptimum or any value
        A :class:`Certificate`, :class:`MeanFieldOptimum` or :class:`FiniteOptimum`; anything else
        (a number) is kept as it is.

    Returns
    -------
    dict
        One key, the result's kind (``"value"`` for anything else), mapping to its fields.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.static import FiniteOptimum, from_record, to_record
    >>> fo = FiniteOptimum(torch.zeros(2, 3), 0.5, torch.tensor([0.5, 0.7]), ("random", "rounded"))
    >>> rec = to_record(fo)
    >>> list(rec), from_record(rec).value, to_record(1.5)
    (['FiniteOptimum'], 0.5, {'value': 1.5})
    """
    if isinstance(result, Certificate):
        return {"Certificate": dict(result._asdict(), minimum=result.minimum._asdict())}
    if isinstance(result, MeanFieldOptimum):
        return {"MeanFieldOptimum": dict(vars(result), certificate=to_record(result.certificate))}
    if isinstance(result, FiniteOptimum):
        return {"FiniteOptimum": result._asdict()}
    return {"value": result}


def from_record(record: dict):
    """The result :func:`to_record` wrote, rebuilt.

    Parameters
    ----------
    record : dict
        What :func:`to_record` returned (or its saved copy).

    Returns
    -------
    Certificate, MeanFieldOptimum, FiniteOptimum or the value

    Raises
    ------
    ValueError
        Naming ``record`` when it is not a one-key dict of a known kind.

    Examples
    --------
    >>> from mfattn.analysis.static import from_record
    >>> from_record({"value": 2.0})
    2.0
    >>> from_record({"Run": {}})
    Traceback (most recent call last):
    ...
    ValueError: record: expected one key among ['Certificate', 'FiniteOptimum', 'MeanFieldOptimum', 'value']
    """
    kinds = ["Certificate", "FiniteOptimum", "MeanFieldOptimum", "value"]
    if not isinstance(record, dict) or len(record) != 1 or next(iter(record)) not in kinds:
        raise ValueError(f"record: expected one key among {kinds}")
    (kind, v), = record.items()
    if kind == "Certificate":
        return Certificate(**dict(v, minimum=PhiMinimum(**v["minimum"])))
    if kind == "MeanFieldOptimum":
        return MeanFieldOptimum(**dict(v, certificate=from_record(v["certificate"])))
    return FiniteOptimum(**v) if kind == "FiniteOptimum" else v


# ------------------------------------------------------------------- one entry to the minimisers
#: The static minimisers by name, for :func:`minimize`.
MINIMIZERS = {
    "mean-field": mean_field_optimum,
    "finite-heads": finite_head_optimum,
    "first-variation": minimize_first_variation,
}


def minimize(model: HeadModel, data: Dataset, ball: Ball, *, method: str, **options):
    r"""One entry to the static minimisers of chapter 03, by ``method``.

    ======================= =================================================== =====================
    ``method``              minimises                                           returns
    ======================= =================================================== =====================
    ``"mean-field"``        the risk (10) over :math:`\mathcal P(K)` (16)        :class:`MeanFieldOptimum`
    ``"finite-heads"``      :math:`\mathcal E_N` over ``N`` heads in ``K`` (14)   :class:`FiniteOptimum`
    ``"first-variation"``   :math:`\Phi(\cdot;\rho)` over ``K``                 :class:`PhiMinimum`
    ======================= =================================================== =====================

    ``options`` are the keyword arguments of :func:`mean_field_optimum`, :func:`finite_head_optimum`
    (``N`` among them) and :func:`minimize_first_variation` (``heads``, ``weights``) respectively.

    Parameters
    ----------
    model : HeadModel
    data : Dataset
    ball : Ball
        The compact set ``K``.
    method : str
        A key of :data:`MINIMIZERS`.
    **options
        The chosen minimiser's keyword arguments (``generator`` for all three).

    Returns
    -------
    MeanFieldOptimum, FiniteOptimum or PhiMinimum

    Raises
    ------
    ValueError
        Naming ``method`` when it is unknown, the missing or unexpected option, or, from the minimiser,
        the argument that is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.static import Ball, minimize
    >>> from mfattn.models.tasks import example
    >>> model, data, _, _ = example()
    >>> best = minimize(model, data, Ball(1.0), method="finite-heads", N=2,
    ...                 generator=torch.Generator().manual_seed(0), n_random=1, iters=20)
    >>> type(best).__name__, tuple(best.heads.shape)
    ('FiniteOptimum', (2, 24))
    >>> minimize(model, data, Ball(1.0), method="newton")
    Traceback (most recent call last):
    ...
    ValueError: method: expected one of ['finite-heads', 'first-variation', 'mean-field'], got 'newton'
    """
    if method not in MINIMIZERS:
        raise ValueError(f"method: expected one of {sorted(MINIMIZERS)}, got {method!r}")
    fn = MINIMIZERS[method]
    import inspect

    params = inspect.signature(fn).parameters
    unknown = sorted(set(options) - set(params))
    if unknown:
        raise ValueError(f"{unknown[0]}: not an option of method {method!r} ({fn.__name__})")
    missing = [p.name for p in params.values() if p.default is inspect.Parameter.empty
               and p.name not in ("model", "data", "ball") and p.name not in options]
    if missing:
        raise ValueError(f"{missing[0]}: method {method!r} ({fn.__name__}) needs it")
    return fn(model, data, ball=ball, **options)



# ------------------------------------------------ finite-head sweeps: best restarts and the rounding bound
def best_values(records, *, exclude=()) -> np.ndarray:
    """The best (lowest) final value of each :func:`finite_record` record over its restarts, leaving out
    the restarts started from ``exclude``.

    With nothing left out this is each record's ``"best"``; leaving out ``"rounded"`` gives what the
    ``N``-head search finds without the rounding of a known optimum (which would make a fast rate hold
    by construction).

    Parameters
    ----------
    records : list of dict
        Records with ``"values"`` (list of float) and ``"labels"`` (list of str, where each restart
        started), as :func:`finite_record` returns them (e.g. the points of a sweep over ``N``).
    exclude : str or iterable of str, default ()
        Labels of the restarts to leave out.

    Returns
    -------
    ndarray (len(records),)
        The best remaining value of each record, float64.

    Raises
    ------
    ValueError
        Naming ``records`` when one lacks ``"values"`` or ``"labels"`` or they differ in length, or
        ``exclude`` when it leaves a record with no restart.

    Examples
    --------
    >>> from mfattn.analysis.static import best_values
    >>> recs = [{"values": [0.3, 0.1, 0.2], "labels": ["random", "rounded", "iid"]},
    ...         {"values": [0.5, 0.4], "labels": ["random", "rounded"]}]
    >>> best_values(recs).tolist(), best_values(recs, exclude="rounded").tolist()
    ([0.1, 0.4], [0.2, 0.5])
    """
    exclude = {exclude} if isinstance(exclude, str) else set(exclude)
    out = []
    for i, r in enumerate(records):
        if not isinstance(r, dict) or "values" not in r or "labels" not in r or len(r["values"]) != len(r["labels"]):
            raise ValueError(f"records: record {i} needs 'values' and 'labels' of the same length")
        kept = [float(v) for v, label in zip(r["values"], r["labels"]) if label not in exclude]
        if not kept:
            raise ValueError(f"exclude: {sorted(exclude)} leaves record {i} with no restart")
        out.append(min(kept))
    return np.array(out, dtype=np.float64)


def rounding_gap_bound(feature_bound: float, n_atoms: int, N) -> np.ndarray:
    r"""The bound :math:`\frac14(B_\psi m/N)^2` on the risk gap of the rounding of an optimum with ``m``
    atoms to ``N`` equally weighted heads (:func:`round_measure`).

    At an optimum ``Phi`` is constant on the support (16) and the rounding's weight changes sum to zero,
    so the first-order change of the risk vanishes and the gap is the quadratic term, at most
    ``(1/4) ||delta z||^2`` (Lemma 2.1) with ``||delta z|| <= B_psi sum_j |n_j/N - w_j| <= B_psi m / N``
    (each weight moves by less than ``1/N``).

    Parameters
    ----------
    feature_bound : float
        ``B_psi``, a bound on the feature norm over ``K`` (:func:`feature_sup`), ``>= 0``.
    n_atoms : int
        ``m``, the number of atoms of the optimum, positive.
    N : int or array_like of int
        Numbers of heads, each positive.

    Returns
    -------
    ndarray
        The bound at each ``N`` (the shape of ``N``), float64.

    Raises
    ------
    ValueError
        Naming the argument that is negative, not finite, not a positive integer or holds a
        non-positive ``N``.

    Examples
    --------
    >>> from mfattn.analysis.static import rounding_gap_bound
    >>> rounding_gap_bound(2.0, 3, [6, 12]).tolist()  # (2 * 3 / 6)^2 / 4, (2 * 3 / 12)^2 / 4
    [0.25, 0.0625]
    """
    if not (math.isfinite(feature_bound) and feature_bound >= 0):
        raise ValueError(f"feature_bound: must be finite and >= 0, got {feature_bound}")
    check_positive(n_atoms, "n_atoms", integer=True)
    N = np.asarray(N)
    if N.size == 0 or not np.issubdtype(N.dtype, np.integer) or np.any(N < 1):
        raise ValueError(f"N: expected positive integers, got {N.tolist()}")
    return 0.25 * (feature_bound * n_atoms / N) ** 2


class FiniteGaps(NamedTuple):
    """``inf E_N - inf E`` from a sweep over ``N`` and a bracket of ``inf E``, with its fits (:func:`finite_gaps`).

    Parameters
    ----------
    N : ndarray (n_N,)
        The numbers of heads of the sweep, in its order.
    lower : ndarray (n_N,)
        ``best_N - upper``: the lower end of each gap (``inf E`` at the bracket's upper end).
    upper : ndarray (n_N,)
        ``lower + width``: the upper end (``inf E`` at the bracket's lower end).
    fit : LogLogFit
        Log-log fit of ``upper`` against ``N`` over ``N >= min_N``.
    fit_without : LogLogFit
        The same with the excluded restarts left out of each ``best_N``.
    constant : float
        ``max_N sqrt(N) * upper``: the smallest ``C`` with ``upper <= C / sqrt(N)`` on the whole sweep.

    Examples
    --------
    >>> from mfattn.analysis.static import finite_gaps
    >>> recs = [{"N": n, "values": [1 + 1 / n**2, 1 + 1 / n], "labels": ["rounded", "random"]} for n in (1, 2, 4, 8)]
    >>> g = finite_gaps(recs, 1.0, 0.0)
    >>> round(float(g.fit.slope), 6), round(float(g.fit_without.slope), 6), g.constant
    (-2.0, -1.0, 1.0)
    """

    N: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    fit: LogLogFit
    fit_without: LogLogFit
    constant: float


def finite_gaps(records, upper: float, width: float, *, min_N: int = 1, exclude="rounded") -> FiniteGaps:
    """``inf E_N - inf E`` bracketed from upper estimates of ``inf E_N`` and a bracket
    ``[upper - width, upper]`` of ``inf E``, with the log-log fits of its rate in ``N``.

    Each ``inf E_N`` is estimated from above by the best restart of a :func:`finite_record`
    (:func:`best_values`), so ``best_N - upper`` and ``best_N - upper + width`` bound the gap up to the
    ``N``-head search. The fits use the upper end over ``N >= min_N``, once with every restart and
    once without those started from ``exclude`` (the rounding of a known optimum, whose gap falls
    like ``N^-2`` by construction).

    Parameters
    ----------
    records : list of dict
        The sweep's records, each with ``"N"``, ``"values"`` and ``"labels"`` (a sweep over ``N`` of
        :func:`finite_record`).
    upper : float
        The upper end of the bracket of ``inf E`` (the risk of the mean-field optimum).
    width : float
        The bracket's width (or a bound on it), ``>= 0``.
    min_N : int, default 1
        The smallest ``N`` of the fits (e.g. the optimum's atom count); at least two ``N`` of the sweep
        must reach it.
    exclude : str or iterable of str, default "rounded"
        The labels of the restarts that ``fit_without`` leaves out.

    Returns
    -------
    FiniteGaps

    Raises
    ------
    ValueError
        Naming ``records`` when a record lacks ``"N"`` (or as :func:`best_values`), ``upper`` or
        ``width`` when not finite (``width`` negative), ``min_N`` when fewer than two ``N`` reach it, or
        ``exclude`` as :func:`best_values`.

    Examples
    --------
    >>> from mfattn.analysis.static import finite_gaps
    >>> recs = [{"N": n, "values": [2.0 + 1 / n], "labels": ["random"]} for n in (1, 2, 4)]
    >>> g = finite_gaps(recs, 2.0, 1e-3, exclude=())
    >>> g.lower.tolist(), round(float(g.fit.slope), 2)
    ([1.0, 0.5, 0.25], -1.0)
    """
    if not all(isinstance(r, dict) and "N" in r for r in records):
        raise ValueError("records: every record needs its 'N'")
    if not math.isfinite(upper):
        raise ValueError(f"upper: must be finite, got {upper}")
    if not (math.isfinite(width) and width >= 0):
        raise ValueError(f"width: must be finite and >= 0, got {width}")
    N = np.array([r["N"] for r in records])
    big = N >= min_N
    if big.sum() < 2:
        raise ValueError(f"min_N: fewer than two N of the sweep reach {min_N}")
    lower = best_values(records) - upper
    hi = lower + width
    without = best_values(records, exclude=exclude) - upper + width
    return FiniteGaps(N, lower, hi, loglog_fit(N[big], hi[big]), loglog_fit(N[big], without[big]),
                      float(np.max(hi * np.sqrt(N))))
