r"""Tokens as particles on the sphere: attention with a perceptron as an interacting particle system
(chapter 06; the companion paper on perceptrons, arXiv 2601.21366, sections 2 and 4).

``B`` independent systems of ``n`` tokens on :math:`S^{d-1}` are held in one tensor ``X (B, n, d)``; each
system has its own inverse temperature :math:`\beta`, sign (ascent or descent), normalisation (USA or
SA) and perceptron switch, so a whole sweep (all betas, several settings, several seeds) advances in
one batched step. With the kernel :math:`g_\beta(x,y)=e^{\beta(\langle x,y\rangle-1)}` and a perceptron
potential :math:`V(x)=\sum_m s_m\Sigma(\langle a_m,x\rangle)` (:math:`\Sigma'=\sigma`, eq. (2.6)), token
:math:`i` moves with

.. math::

    \dot x_i=\pm P_{x_i}\Big(A_i+\sum_m s_m\sigma(\langle a_m,x_i\rangle)\,a_m\Big),

    A_i=\frac1n\sum_j g_\beta(x_i,x_j)\,x_j\ \text{(USA)},\quad
    A_i=\frac{\sum_j g_\beta(x_i,x_j)\,x_j}{\sum_j g_\beta(x_i,x_j)}\ \text{(SA, (2.8))},

``+`` for ascent and ``-`` for descent (eq. (2.5)), :math:`P_x=I-xx^\top`. USA is the Wasserstein
gradient flow of the energy

.. math:: \mathsf F(\mu)=\frac1{2\beta}\iint g_\beta\,d\mu\,d\mu+\int V\,d\mu ,

(ascent raises it, descent lowers it: :math:`\dot x_i=\pm n\nabla^{S}_{x_i}\mathsf F`). SA divides the
attention field by its normaliser and leaves the perceptron as it is; pure SA is then a weighted
gradient flow of the same energy, SA with a perceptron is not a gradient flow of it.

These are the equations of the companion paper's public simulation code (checked beside it in
chapter 06): the kernel carries the factor :math:`e^{-\beta}` (the paper's :math:`e^{\beta\langle x,y\rangle}`
up to a time change by :math:`e^\beta`), the perceptron has unit directions :math:`a_m` and scales
:math:`s_m\sim N(0,1)`, and clusters are groups within geodesic distance
:math:`\min(c/\sqrt\beta,\pi/(2d))`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .._checks import check_generator, check_positive, check_tensor
from .._progress import progress_bar
from . import fused
from .activations import get_activation

__all__ = ["Perceptron", "TokenSystem", "uniform_sphere", "velocity", "energy", "step", "cluster_threshold",
           "cluster_labels", "anchored_counts", "cluster_masses", "arc_mass", "theorem35_weight", "mass_bound", "TokenRun",
           "simulate", "summarize", "SETTINGS"]


# ----------------------------------------------------------------------------- perceptron
@dataclass(frozen=True)
class Perceptron:
    """A fixed perceptron ``x -> sum_m s_m sigma(<a_m, x>) a_m``, the gradient of ``V = sum_m s_m Sigma(<a_m, x>)``.

    ``directions (K, d)`` are unit vectors ``a_m``, ``scales (K,)`` the ``s_m``; no bias (as in the paper).

    Attributes
    ----------
    directions : Tensor (K, d)
        The unit directions ``a_m``, one per row.
    scales : Tensor (K,)
        The scales ``s_m``, of the dtype and device of ``directions``.
    activation : str
        The name of ``sigma``: ``"relu"`` (default), ``"gelu"`` or ``"tanh"``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tokens import Perceptron
    >>> a = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    >>> p = Perceptron(a, torch.tensor([2.0, -1.0], dtype=torch.float64))
    >>> x = torch.tensor([0.6, 0.8], dtype=torch.float64)
    >>> p.drift(x).tolist()  # 2 relu(0.6) a_1 - relu(0.8) a_2
    [1.2, -0.8]
    """

    directions: torch.Tensor
    scales: torch.Tensor
    activation: str = "relu"

    def __post_init__(self):
        check_tensor(self.directions, "directions", ndim=2)
        check_tensor(self.scales, "scales", ndim=1, dtype=self.directions.dtype, device=self.directions.device)
        if self.scales.shape[0] != self.directions.shape[0]:
            raise ValueError(f"scales: {self.scales.shape[0]} scales for {self.directions.shape[0]} directions")
        norms = self.directions.norm(dim=1)
        if float((norms - 1).abs().max()) > 1e-10:
            raise ValueError("directions: rows must be unit vectors")
        get_activation(self.activation)

    @classmethod
    def sample(cls, d: int, *, generator: torch.Generator, units: int | None = None, scale: float = 1.0,
               activation: str = "relu", dtype=torch.float64) -> "Perceptron":
        """``units`` (default ``d``) directions uniform on the sphere, then scales ``s_m ~ N(0, scale^2)``.

        Parameters
        ----------
        d : int
            Dimension of the ambient space.
        generator : torch.Generator
            The source of every draw (made in float64 on the CPU, then cast).
        units : int, optional
            Number of neurons ``K``; default ``d``.
        scale : float
            Standard deviation of the scales (> 0).
        activation : str
            ``"relu"`` (default), ``"gelu"`` or ``"tanh"``.
        dtype : torch.dtype
            Dtype of ``directions`` and ``scales``.

        Returns
        -------
        Perceptron
            With ``directions (K, d)`` and ``scales (K,)``.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tokens import Perceptron
        >>> p = Perceptron.sample(3, units=4, generator=torch.Generator().manual_seed(0))
        >>> tuple(p.directions.shape), tuple(p.scales.shape), p.activation
        ((4, 3), (4,), 'relu')
        >>> bool(torch.allclose(p.directions.norm(dim=1), torch.ones(4, dtype=torch.float64)))
        True
        """
        check_positive(d, "d", integer=True)
        check_generator(generator)
        units = d if units is None else units
        check_positive(units, "units", integer=True)
        check_positive(scale, "scale")
        g = torch.randn(units, d, generator=generator, dtype=torch.float64)
        s = scale * torch.randn(units, generator=generator, dtype=torch.float64)
        return cls((g / g.norm(dim=1, keepdim=True)).to(dtype), s.to(dtype), activation)

    def to(self, device=None, *, activation: str | None = None) -> "Perceptron":
        """The same perceptron on ``device``, with another activation if one is given.

        Parameters
        ----------
        device : str or torch.device, optional
            Where the directions and scales go (default: where they are).
        activation : str, optional
            A new ``sigma`` (default: this one's).

        Returns
        -------
        Perceptron
            With the same directions and scales.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tokens import Perceptron
        >>> p = Perceptron.sample(2, generator=torch.Generator().manual_seed(0)).to("cpu", activation="gelu")
        >>> p.activation, p.directions.device.type
        ('gelu', 'cpu')
        """
        return Perceptron(self.directions.to(device), self.scales.to(device), activation or self.activation)

    def potential(self, X: torch.Tensor) -> torch.Tensor:
        """``V(x)`` at every row: ``(..., d) -> (...)``.

        Parameters
        ----------
        X : Tensor (..., d)
            Points (any leading shape), of the perceptron's dtype and device.

        Returns
        -------
        Tensor (...)
            ``V(x) = sum_m s_m Sigma(<a_m, x>)`` at every point, with ``Sigma`` the primitive of
            the activation that vanishes at 0.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tokens import Perceptron
        >>> a = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
        >>> p = Perceptron(a, torch.tensor([2.0, -1.0], dtype=torch.float64))
        >>> X = torch.tensor([[0.6, 0.8], [-1.0, 0.0]], dtype=torch.float64)
        >>> [round(v, 4) for v in p.potential(X).tolist()]  # Sigma(u) = relu(u)^2 / 2
        [0.04, 0.0]
        """
        return get_activation(self.activation).primitive(X @ self.directions.T) @ self.scales

    def drift(self, X: torch.Tensor) -> torch.Tensor:
        """The ambient gradient ``sum_m s_m sigma(<a_m, x>) a_m``: ``(..., d) -> (..., d)``.

        Parameters
        ----------
        X : Tensor (..., d)
            Points (any leading shape), of the perceptron's dtype and device.

        Returns
        -------
        Tensor (..., d)
            The gradient of :meth:`potential` in the ambient space at every point (not
            projected on the tangent space of the sphere).

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tokens import Perceptron
        >>> p = Perceptron.sample(3, generator=torch.Generator().manual_seed(0))
        >>> x = torch.tensor([-0.6, 0.0, -0.8], dtype=torch.float64, requires_grad=True)
        >>> p.potential(x).backward()
        >>> bool(torch.allclose(x.grad, p.drift(x.detach())))
        True
        """
        return (get_activation(self.activation).f(X @ self.directions.T) * self.scales) @ self.directions


# --------------------------------------------------------------------------------- systems
@dataclass(frozen=True)
class TokenSystem:
    """Per-system settings of a batch of ``B`` systems.

    ``beta (B,)`` > 0; ``sign (B,)`` +1 (ascent) or -1 (descent); ``normalized (B,)`` bool, True for SA;
    ``mlp (B,)`` >= 0, the weight of the perceptron in that system (0: off, 1: as given; ``exp(-beta)``
    puts a system in the regime of the companion paper's Theorem 3.5, see :func:`theorem35_weight`);
    ``perceptron`` shared by all.

    Attributes
    ----------
    beta : Tensor (B,)
        Inverse temperatures, all > 0.
    sign : Tensor (B,)
        +1 (ascent) or -1 (descent).
    normalized : Tensor (B,), bool
        True for SA (the attention field divided by its normaliser), False for USA.
    mlp : Tensor (B,)
        The weight of the perceptron's drift and potential in each system, >= 0 (1 where it acts as
        given, 0 where it is off).
    perceptron : Perceptron or None
        The perceptron shared by the systems; required when some ``mlp`` is 1.

    Examples
    --------
    >>> from mfattn.models.tokens import TokenSystem
    >>> s = TokenSystem.grid([1.0, 4.0], sign=-1, normalized=True)
    >>> s.B, s.beta.tolist(), s.sign.tolist(), s.normalized.tolist(), s.mlp.tolist()
    (2, [1.0, 4.0], [-1.0, -1.0], [True, True], [0.0, 0.0])
    """

    beta: torch.Tensor
    sign: torch.Tensor
    normalized: torch.Tensor
    mlp: torch.Tensor
    perceptron: Perceptron | None = None

    def __post_init__(self):
        check_tensor(self.beta, "beta", ndim=1)
        B = self.beta.shape[0]
        if B < 1 or bool((self.beta <= 0).any()):
            raise ValueError("beta: needs at least one system and every beta > 0")
        for name in ("sign", "normalized", "mlp"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.shape != (B,):
                raise ValueError(f"{name}: expected a tensor of shape ({B},)")
        if not bool(((self.sign == 1) | (self.sign == -1)).all()):
            raise ValueError("sign: entries must be +1 (ascent) or -1 (descent)")
        if self.normalized.dtype != torch.bool:
            raise ValueError("normalized: expected a bool tensor")
        if not bool(torch.isfinite(self.mlp).all()) or bool((self.mlp < 0).any()):
            raise ValueError("mlp: entries must be finite and >= 0 (the perceptron's weight)")
        if bool((self.mlp > 0).any()) and self.perceptron is None:
            raise ValueError("perceptron: some systems have mlp > 0 but no perceptron is given")

    @classmethod
    def grid(cls, betas, *, sign: int = 1, normalized: bool = False, mlp: bool = False,
             perceptron: Perceptron | None = None, dtype=torch.float64) -> "TokenSystem":
        """One system per beta, all with the same sign, normalisation and perceptron switch.

        Parameters
        ----------
        betas : iterable of float
            The inverse temperatures, one system each (> 0).
        sign : int
            +1 (ascent, default) or -1 (descent).
        normalized : bool
            True for SA, False (default) for USA.
        mlp : bool
            Whether the perceptron acts (then ``perceptron`` is required).
        perceptron : Perceptron, optional
            The perceptron of the systems.
        dtype : torch.dtype
            Dtype of ``beta``, ``sign`` and ``mlp``.

        Returns
        -------
        TokenSystem
            ``B = len(betas)`` systems.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tokens import Perceptron, TokenSystem
        >>> p = Perceptron.sample(3, generator=torch.Generator().manual_seed(0))
        >>> s = TokenSystem.grid([0.5, 1.0, 2.0], mlp=True, perceptron=p)
        >>> s.B, s.mlp.tolist()
        (3, [1.0, 1.0, 1.0])
        """
        beta = torch.as_tensor([float(b) for b in betas], dtype=dtype)
        B = beta.shape[0]
        return cls(beta, torch.full((B,), float(sign), dtype=dtype), torch.full((B,), bool(normalized)),
                   torch.full((B,), float(mlp), dtype=dtype), perceptron)

    @classmethod
    def concat(cls, systems) -> "TokenSystem":
        """The systems of several batches in one batch, in order.

        Parameters
        ----------
        systems : iterable of TokenSystem
            Batches with the same dtypes and devices; those with a perceptron must all share
            the same one.

        Returns
        -------
        TokenSystem
            All their systems (``B`` is the sum of theirs), with the shared perceptron (or none).

        Examples
        --------
        >>> from mfattn.models.tokens import TokenSystem
        >>> s = TokenSystem.concat([TokenSystem.grid([1.0, 2.0]), TokenSystem.grid([1.0], normalized=True)])
        >>> s.B, s.normalized.tolist()
        (3, [False, False, True])
        """
        systems = list(systems)
        per = {s.perceptron for s in systems if s.perceptron is not None}
        if len(per) > 1:
            raise ValueError("systems: all systems of a batch must share one perceptron")
        return cls(*(torch.cat([getattr(s, k) for s in systems]) for k in ("beta", "sign", "normalized", "mlp")),
                   per.pop() if per else None)

    @classmethod
    def settings(cls, settings, betas, perceptron: Perceptron | None = None, *, weight=None) -> "TokenSystem":
        """One system for every pair of a setting and a beta, setting-major, on the perceptron's device.

        Parameters
        ----------
        settings : iterable of (str, str, str)
            ``(mode, direction, perceptron)`` triples as in :data:`SETTINGS`: mode ``"USA"`` or ``"SA"``,
            direction ``"ascent"`` or ``"descent"``, perceptron ``"none"`` or the name of an activation
            (which must be ``perceptron``'s: the systems share it).
        betas : iterable of float
            The inverse temperatures (> 0), one system each per setting.
        perceptron : Perceptron, optional
            Required when a setting has a perceptron.
        weight : array-like (len(betas),), optional
            The perceptron's weight per beta in the settings that have one (default 1; see
            :func:`theorem35_weight`).

        Returns
        -------
        TokenSystem
            ``B = len(settings) * len(betas)`` systems; system ``i * len(betas) + j`` is setting ``i``
            at ``betas[j]``.

        Raises
        ------
        ValueError
            Naming ``settings`` for an unknown mode, direction or a perceptron other than
            ``perceptron``'s activation.

        Examples
        --------
        >>> from mfattn.models.tokens import TokenSystem
        >>> s = TokenSystem.settings([("USA", "ascent", "none"), ("SA", "descent", "none")], [1.0, 4.0])
        >>> s.B, s.sign.tolist(), s.normalized.tolist()
        (4, [1.0, 1.0, -1.0, -1.0], [False, False, True, True])
        """
        betas, settings = [float(b) for b in betas], list(settings)
        if not settings or not betas:
            raise ValueError("settings, betas: need at least one setting and one beta")
        w = torch.ones(len(betas), dtype=torch.float64) if weight is None else \
            torch.as_tensor(np.asarray(weight, dtype=float), dtype=torch.float64)
        if w.shape != (len(betas),) or not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
            raise ValueError(f"weight: expected {len(betas)} finite values >= 0, one per beta")
        parts = []
        for setting in settings:
            if not isinstance(setting, (tuple, list)) or len(setting) != 3:
                raise ValueError(f"settings: expected (mode, direction, perceptron) triples, got {setting!r}")
            mode, direction, mlp = setting
            if mode not in ("USA", "SA") or direction not in ("ascent", "descent"):
                raise ValueError(f"settings: expected (USA|SA, ascent|descent, perceptron), got {setting!r}")
            if mlp != "none" and (perceptron is None or perceptron.activation != mlp):
                raise ValueError(f"settings: {setting!r} needs a perceptron with activation {mlp!r}")
            g = cls.grid(betas, sign=1 if direction == "ascent" else -1, normalized=mode == "SA",
                         mlp=mlp != "none", perceptron=perceptron if mlp != "none" else None)
            parts.append(cls(g.beta, g.sign, g.normalized, g.mlp * w, g.perceptron))
        system = cls.concat(parts)
        return system.to(perceptron.directions.device) if perceptron is not None else system

    def to(self, device) -> "TokenSystem":
        """The same systems with their tensors on ``device`` (the perceptron as it is).

        Parameters
        ----------
        device : str or torch.device

        Returns
        -------
        TokenSystem

        Examples
        --------
        >>> from mfattn.models.tokens import TokenSystem
        >>> TokenSystem.grid([1.0]).to("cpu").beta.device.type
        'cpu'
        """
        return TokenSystem(self.beta.to(device), self.sign.to(device), self.normalized.to(device),
                           self.mlp.to(device), self.perceptron)

    @property
    def B(self) -> int:
        return self.beta.shape[0]


#: The twelve settings of chapter 06, ``(mode, direction, perceptron)``: USA or SA, ascent or descent,
#: without a perceptron or with a ReLU or GeLU one.
SETTINGS = tuple((m, d, p) for m in ("USA", "SA") for d in ("ascent", "descent") for p in ("none", "relu", "gelu"))


def _check_X(X, system: TokenSystem) -> torch.Tensor:
    check_tensor(X, "X", ndim=3)
    if X.shape[0] != system.B:
        raise ValueError(f"X: {X.shape[0]} systems, the TokenSystem has {system.B}")
    if X.shape[1] < 1 or X.shape[2] < 2:
        raise ValueError(f"X: needs at least one token and d >= 2, got {tuple(X.shape)}")
    if float((X.detach().norm(dim=-1) - 1).abs().max()) > 1e-6:
        raise ValueError("X: tokens must lie on the unit sphere")
    if system.perceptron is not None and system.perceptron.directions.shape[1] != X.shape[2]:
        raise ValueError(f"perceptron: dimension {system.perceptron.directions.shape[1]} differs from d = {X.shape[2]}")
    return X


def uniform_sphere(B: int, n: int, d: int, *, generator: torch.Generator, dtype=torch.float64) -> torch.Tensor:
    """``B`` systems of ``n`` i.i.d. uniform points on :math:`S^{d-1}` (normalised Gaussians): (B, n, d).

    Parameters
    ----------
    B : int
        Number of systems.
    n : int
        Tokens per system.
    d : int
        Ambient dimension.
    generator : torch.Generator
        The source of the draws (made in float64 on the CPU, then cast).
    dtype : torch.dtype
        Dtype of the result.

    Returns
    -------
    Tensor (B, n, d)
        Unit vectors.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tokens import uniform_sphere
    >>> X = uniform_sphere(2, 5, 3, generator=torch.Generator().manual_seed(0))
    >>> tuple(X.shape), X.dtype
    ((2, 5, 3), torch.float64)
    >>> bool(torch.allclose(X.norm(dim=-1), torch.ones(2, 5, dtype=torch.float64)))
    True
    """
    for v, name in ((B, "B"), (n, "n"), (d, "d")):
        check_positive(v, name, integer=True)
    check_generator(generator)
    g = torch.randn(B, n, d, generator=generator, dtype=torch.float64)
    return (g / g.norm(dim=-1, keepdim=True)).to(dtype)


def interaction_kernel(X, beta):
    """The tokens' interaction kernel ``exp(beta (<x_i, x_j> - 1))`` (B, n, n), inner products clamped
    at 1 (unit tokens), for tokens ``X`` (B, n, d) and one ``beta`` (B,) per system."""
    G = (X @ X.transpose(1, 2)).clamp(max=1.0)
    return torch.exp(beta.to(X)[:, None, None] * (G - 1.0))


def _sums(X, s: TokenSystem):
    """``S_i = sum_j g_ij x_j`` (B, n, d) and ``Z_i = sum_j g_ij`` (B, n): the fused kernel
    (:func:`mfattn.models.fused.token_sums`) on plain CPU tensors, the torch path (which stores the
    ``(n, n)`` kernel) elsewhere and as its oracle."""
    if fused.available() and fused.plain(X):
        return fused.token_sums(X, s.beta)
    W = interaction_kernel(X, s.beta)
    return W @ X, W.sum(-1)


def _velocity_and_Z(X, s: TokenSystem):
    """The velocity (B, n, d) and the sums ``Z`` (B, n): the fused pass
    (:func:`mfattn.models.fused.token_velocity`) on plain CPU tensors with a ReLU or GeLU perceptron or
    none, the torch path elsewhere and as its oracle."""
    p = s.perceptron
    if fused.available() and fused.plain(X) and (p is None or p.activation in fused.TOKEN_ACTIVATIONS):
        a = p.directions if p is not None else X.new_zeros(0, X.shape[2])
        return fused.token_velocity(X, s.beta, s.normalized, s.mlp if p is not None else torch.zeros_like(s.mlp),
                                    s.sign, a, p.scales if p is not None else X.new_zeros(0),
                                    p.activation if p is not None else "relu")
    S, Z = _sums(X, s)
    Zn = torch.where(s.normalized.to(X.device)[:, None], Z, torch.full_like(Z, float(X.shape[1])))
    amb = S / Zn[..., None]
    if p is not None:
        amb = amb + s.mlp.to(X)[:, None, None] * p.drift(X)
    v = amb - (amb * X).sum(-1, keepdim=True) * X  # P_x
    return s.sign.to(X)[:, None, None] * v, Z


def _velocity(X, s: TokenSystem):
    return _velocity_and_Z(X, s)[0]


def _energy(X, s: TokenSystem, Z):
    n = X.shape[1]
    E = Z.sum(1) / (2 * s.beta.to(X) * n * n)
    if s.perceptron is not None:
        E = E + s.mlp.to(X) * s.perceptron.potential(X).mean(1)
    return E


def velocity(X: torch.Tensor, system: TokenSystem) -> torch.Tensor:
    r"""The tangent velocity :math:`\dot x_i` of every token of every system, eqs. (2.5) and (2.8): (B, n, d).

    Parameters
    ----------
    X : Tensor (B, n, d)
        Tokens on the unit sphere (``d >= 2``), one batch row per system.
    system : TokenSystem
        The settings of the ``B`` systems.

    Returns
    -------
    Tensor (B, n, d)
        The velocities, tangent to the sphere at each token.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tokens import TokenSystem, uniform_sphere, velocity
    >>> X = uniform_sphere(2, 5, 3, generator=torch.Generator().manual_seed(0))
    >>> v = velocity(X, TokenSystem.grid([1.0, 4.0]))
    >>> tuple(v.shape), float((v * X).sum(-1).abs().max()) < 1e-12  # tangent
    ((2, 5, 3), True)
    """
    return _velocity(_check_X(X, system), system)


def energy(X: torch.Tensor, system: TokenSystem) -> torch.Tensor:
    r"""The energy :math:`\mathsf F=\frac1{2\beta n^2}\sum_{i,j}g_\beta(x_i,x_j)+\frac1n\sum_iV(x_i)` of every
    system (the perceptron term only where ``mlp = 1``): (B,).

    Parameters
    ----------
    X : Tensor (B, n, d)
        Tokens on the unit sphere, one batch row per system.
    system : TokenSystem
        The settings of the ``B`` systems.

    Returns
    -------
    Tensor (B,)
        The energy of every system, of the dtype of ``X``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tokens import TokenSystem, energy
    >>> X = torch.tensor([[[1.0, 0.0], [1.0, 0.0]]], dtype=torch.float64)  # one cluster
    >>> energy(X, TokenSystem.grid([2.0])).tolist()  # 1 / (2 beta)
    [0.25]
    """
    X = _check_X(X, system)
    return _energy(X, system, _sums(X, system)[1])


def _project(X):
    return X / X.norm(dim=-1, keepdim=True)


_METHODS = ("euler", "heun", "rk4")


def _step(X, s, dt, method, k1=None):
    # k1: the velocity at X when the caller has it already (a snapshot of simulate computes it)
    k1 = _velocity(X, s) if k1 is None else k1
    if method == "euler":
        return _project(X + dt * k1)
    if method == "heun":
        k2 = _velocity(_project(X + dt * k1), s)
        return _project(X + 0.5 * dt * (k1 + k2))
    k2 = _velocity(_project(X + 0.5 * dt * k1), s)
    k3 = _velocity(_project(X + 0.5 * dt * k2), s)
    k4 = _velocity(_project(X + dt * k3), s)
    return _project(X + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4))


def step(X: torch.Tensor, system: TokenSystem, dt: float, method: str = "euler") -> torch.Tensor:
    """One step of size ``dt``: explicit Euler followed by the projection back to the sphere (the paper's
    scheme), or Heun / classical Runge-Kutta whose stages are projected likewise (second and fourth order).

    Parameters
    ----------
    X : Tensor (B, n, d)
        Tokens on the unit sphere, one batch row per system.
    system : TokenSystem
        The settings of the ``B`` systems.
    dt : float
        Step size (> 0).
    method : str
        ``"euler"`` (default), ``"heun"`` or ``"rk4"``.

    Returns
    -------
    Tensor (B, n, d)
        The tokens after the step, on the sphere.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tokens import TokenSystem, energy, step, uniform_sphere
    >>> X = uniform_sphere(1, 6, 3, generator=torch.Generator().manual_seed(0))
    >>> s = TokenSystem.grid([1.0])  # ascent of the energy
    >>> Y = step(X, s, 0.1, "rk4")
    >>> tuple(Y.shape), bool(energy(Y, s) > energy(X, s))
    ((1, 6, 3), True)
    """
    X = _check_X(X, system)
    check_positive(dt, "dt")
    if method not in _METHODS:
        raise ValueError(f"method: expected one of {_METHODS}, got {method!r}")
    return _step(X, system, dt, method)


# ---------------------------------------------------------------------------------- clusters
def cluster_threshold(beta, d: int, c: float = 0.5) -> np.ndarray:
    r"""Geodesic grouping radius :math:`\min(c/\sqrt\beta,\pi/(2d))` (the interaction scale of Lemma 5.3,
    :math:`r_\beta\sim1/\sqrt\beta`; the cap keeps small betas from merging the whole sphere).

    Parameters
    ----------
    beta : float or array_like
        Inverse temperature(s), > 0.
    d : int
        Ambient dimension (the sphere is :math:`S^{d-1}`).
    c : float
        The constant of :math:`c/\sqrt\beta` (> 0).

    Returns
    -------
    numpy.ndarray, float64
        The radius, of the shape of ``beta`` (a NumPy scalar for a scalar ``beta``).

    Examples
    --------
    >>> from mfattn.models.tokens import cluster_threshold
    >>> cluster_threshold([1.0, 4.0, 100.0], 3).tolist()  # the first is capped at pi / 6
    [0.5, 0.25, 0.05]
    """
    b = np.asarray(beta, dtype=float)
    if np.any(b <= 0):
        raise ValueError("beta: must be > 0")
    check_positive(d, "d", integer=True)
    check_positive(c, "c")
    return np.minimum(c / np.sqrt(b), math.pi / (2 * d))


def cluster_labels(X: torch.Tensor, threshold) -> tuple[torch.Tensor, torch.Tensor]:
    """Single-linkage clusters: tokens joined when their geodesic distance is at most ``threshold`` (per
    system), then closed transitively. Returns ``(labels (B, n) int64, counts (B,) int64)``.

    On the circle the components are the arcs between consecutive gaps wider than the threshold
    (sorting, vectorised over systems); for ``d >= 3`` the connected components of the graph, found
    for all systems at once by scipy's graph search on their block-diagonal union (no loop over systems).

    Parameters
    ----------
    X : Tensor (B, n, d)
        Tokens on the unit sphere, one batch row per system.
    threshold : float or array_like (B,)
        The geodesic radius, one for all systems or one per system.

    Returns
    -------
    labels : Tensor (B, n), int64
        The cluster of every token, numbered ``0 .. k - 1`` within each system (on the CPU).
    counts : Tensor (B,), int64
        The number of clusters ``k`` of every system (on the CPU).

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tokens import cluster_labels
    >>> a = torch.tensor([[4.0, 0.0, 2.0, 0.1, 2.05, 6.2]], dtype=torch.float64)
    >>> X = torch.stack([a.cos(), a.sin()], -1)  # angles on the circle
    >>> labels, counts = cluster_labels(X, 0.3)  # 6.2 and 0.0 are 0.083 apart
    >>> labels.tolist(), counts.tolist()
    ([[0, 1, 2, 1, 2, 1]], [3])
    """
    check_tensor(X, "X", ndim=3)
    B, n, d = X.shape
    thr = torch.as_tensor(np.broadcast_to(np.asarray(threshold, dtype=float), (B,)).copy(), dtype=torch.float64)
    if d == 2:
        ang = torch.atan2(X[..., 1], X[..., 0]).to(torch.float64)
        a, order = torch.sort(ang, dim=1)
        gaps = torch.diff(a, dim=1, append=a[:, :1] + 2 * math.pi)  # gap after each sorted token
        cut = gaps > thr[:, None]
        counts = cut.sum(1).clamp(min=1)
        # labels: a new cluster starts after every cut; the arc wrapping past the last cut joins the first
        start = torch.cumsum(torch.cat([torch.zeros(B, 1, dtype=torch.long), cut[:, :-1].long()], 1), 1)
        wrap = ~cut[:, -1]
        start = torch.where(wrap[:, None] & (start == start[:, -1:]), torch.zeros_like(start), start)
        start = torch.where(cut.any(1)[:, None], start, torch.zeros_like(start))
        # relabel to 0..k-1 (torch.unique: in angular order from -pi, not in order of first appearance)
        labels = torch.empty(B, n, dtype=torch.long)
        labels.scatter_(1, order.cpu(), start.cpu())
        return _compact(labels), counts.cpu()
    cosines = (X @ X.transpose(1, 2)).clamp(-1, 1).to(torch.float64)
    adj = torch.arccos(cosines) <= thr.to(cosines.device)[:, None, None]
    labels = _components(adj)
    return labels.cpu(), (labels.amax(1) + 1).cpu()


def _components(adj: torch.Tensor) -> torch.Tensor:
    """Connected components of B graphs at once (adjacency (B, n, n), reflexive and symmetric): scipy's
    graph search on the block-diagonal graph of all B systems (one call, no loop over systems); every
    vertex is labelled by the smallest index in its component, and the labels are renumbered
    ``0 .. k - 1`` in order of those smallest indices."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    B, n, _ = adj.shape
    if adj.device.type != "cpu":  # on a GPU the graph stays there
        return _components_on_device(adj)
    b, i, j = adj.nonzero(as_tuple=True)
    graph = coo_matrix((np.ones(len(b), dtype=np.int8), ((b * n + i).numpy(), (b * n + j).numpy())),
                       shape=(B * n, B * n))
    k, comp = connected_components(graph, directed=False)
    comp = torch.from_numpy(comp.astype(np.int64))
    node = torch.arange(B * n)
    smallest = torch.full((k,), B * n, dtype=torch.long).scatter_reduce_(0, comp, node, "amin")
    idx = torch.arange(n)
    lab = (smallest[comp] - (node // n) * n).reshape(B, n)  # the smallest vertex of the component
    roots = lab == idx  # the smallest vertex of each component labels it
    rank = torch.cumsum(roots.long(), 1) - 1
    return torch.gather(rank, 1, lab)


def _components_on_device(adj: torch.Tensor) -> torch.Tensor:
    """:func:`_components` by batched tensor operations, for graphs on a GPU (copying ``B n^2``
    booleans to the CPU at every snapshot would cost more): every vertex takes the smallest label
    among its neighbours, then its label's label (pointer jumping), until nothing changes."""
    B, n, _ = adj.shape
    idx = torch.arange(n, device=adj.device)
    lab = idx.expand(B, n).clone()
    big = torch.full((B, n, n), n, dtype=lab.dtype, device=adj.device)
    while True:
        nb = torch.where(adj, lab[:, None, :].expand(B, n, n), big).amin(2)  # smallest label among neighbours
        new = torch.gather(torch.minimum(lab, nb), 1, torch.minimum(lab, nb))
        if torch.equal(new, lab):
            break
        lab = new
    roots = lab == idx  # the smallest vertex of each component labels it
    return torch.gather(torch.cumsum(roots.long(), 1) - 1, 1, lab)


def anchored_counts(X: torch.Tensor, threshold) -> np.ndarray:
    """Cluster counts on the circle by anchored chaining, the rule of the companion paper's public code:
    cut the circle at its widest gap, walk the sorted angles, and start a new cluster whenever a token is
    farther than ``threshold`` from the *first* token of the current one. Unlike single linkage it chops a
    diffuse arc into pieces of length ``threshold``; on atomic configurations the two agree. (B,) counts.

    Parameters
    ----------
    X : Tensor (B, n, 2)
        Tokens on the unit circle, one batch row per system.
    threshold : float or array_like (B,)
        The chaining radius (an angle), one for all systems or one per system.

    Returns
    -------
    numpy.ndarray (B,), int
        The number of clusters of every system.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tokens import anchored_counts, cluster_labels
    >>> a = torch.tensor([[0.0, 0.2, 0.4, 0.6, 0.8, 3.0]], dtype=torch.float64)
    >>> X = torch.stack([a.cos(), a.sin()], -1)  # a diffuse arc and one far token
    >>> anchored_counts(X, 0.3).tolist(), cluster_labels(X, 0.3)[1].tolist()
    ([4], [2])
    """
    check_tensor(X, "X", ndim=3)
    if X.shape[2] != 2:
        raise ValueError("X: anchored chaining is defined on the circle (d = 2) only")
    B = X.shape[0]
    thr = np.broadcast_to(np.asarray(threshold, dtype=float), (B,))
    ang = np.sort(np.arctan2(X[..., 1].cpu().numpy(), X[..., 0].cpu().numpy()), axis=1)
    out = np.empty(B, dtype=int)
    for b in range(B):  # once per system, at the end of a run
        a = ang[b]
        gaps = np.diff(np.append(a, a[0] + 2 * np.pi))
        a = np.roll(a, -(int(np.argmax(gaps)) + 1))
        a = np.unwrap(a)
        k, first = 1, a[0]
        for x in a[1:]:
            if x - first > thr[b]:
                k, first = k + 1, x
        out[b] = k
    return out


def _compact(labels):
    """Renumber the labels of every row to ``0 .. k - 1`` in increasing order of the old labels (batched)."""
    B, n = labels.shape
    present = torch.zeros(B, n, dtype=torch.long).scatter_(1, labels, 1)  # old labels lie in 0 .. n - 1
    return torch.gather(torch.cumsum(present, 1) - 1, 1, labels)


def arc_mass(X: torch.Tensor, width) -> np.ndarray:
    r"""The largest fraction of tokens in a closed arc of length ``width``, per system, on the circle: the
    heaviest set of diameter at most ``width``, the clusters of the companion paper's Theorem 3.5, whose
    condition (3.2) bounds the distance between every two atoms of a cluster (chapter 06).

    Unlike single linkage, which chains a diffuse arc of any length into one cluster, this counts only
    tokens within ``width`` of one another. Sorted angles and one batched ``searchsorted``: no loop over
    systems.

    Parameters
    ----------
    X : Tensor (B, n, 2)
        Tokens on the unit circle, one batch row per system.
    width : float or array_like (B,)
        The arc length (an angle in ``[0, 2 pi)``), one for all systems or one per system.

    Returns
    -------
    numpy.ndarray (B,)
        The largest mass (fraction of the ``n`` tokens) in an arc of that length.

    Examples
    --------
    >>> import math, torch
    >>> from mfattn.models.tokens import arc_mass
    >>> ang = torch.tensor([[0.0, 0.1, 0.15, 2.0, 3.1, -3.1]], dtype=torch.float64)
    >>> X = torch.stack([torch.cos(ang), torch.sin(ang)], -1)
    >>> arc_mass(X, 0.2).tolist()  # {0, 0.1, 0.15}; the pair at +-3.1 is 2 pi - 6.2 = 0.083 apart
    [0.5]
    >>> arc_mass(X, 0.05).tolist()  # the wrapped pair
    [0.3333333333333333]
    """
    check_tensor(X, "X", ndim=3)
    B, n, d = X.shape
    if d != 2:
        raise ValueError("X: arcs are defined on the circle (d = 2) only")
    w = torch.as_tensor(np.broadcast_to(np.asarray(width, dtype=float), (B,)).copy(), dtype=torch.float64)
    if bool((w < 0).any()) or bool((w >= 2 * math.pi).any()):
        raise ValueError("width: expected angles in [0, 2 pi)")
    a, _ = torch.sort(torch.atan2(X[..., 1], X[..., 0]).to(torch.float64).cpu(), dim=1)
    ext = torch.cat([a, a + 2 * math.pi], 1).contiguous()  # the circle unrolled twice
    ends = torch.searchsorted(ext, (a + w[:, None] + 1e-12).contiguous(), right=True)  # first angle past each arc
    return ((ends - torch.arange(n)).amax(1).double() / n).numpy()


def cluster_masses(labels: torch.Tensor) -> list[np.ndarray]:
    """The masses (fractions of tokens) of every cluster of every system, largest first.

    Parameters
    ----------
    labels : Tensor (B, n), int64, on the CPU
        Cluster labels ``0 .. k - 1``, as from :func:`cluster_labels`.

    Returns
    -------
    list of numpy.ndarray
        ``B`` arrays; array ``b`` holds the ``k_b`` masses of system ``b`` (summing to one),
        in decreasing order.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tokens import cluster_masses
    >>> labels = torch.tensor([[0, 1, 2, 1, 2, 1], [0, 0, 0, 0, 0, 0]])
    >>> [m.round(3).tolist() for m in cluster_masses(labels)]
    [[0.5, 0.333, 0.167], [1.0]]
    """
    n = labels.shape[1]
    return [np.sort(np.bincount(l.numpy()) / n)[::-1] for l in labels]


# ------------------------------------------------------------------ Theorem 3.5's regime and bound
_LIPSCHITZ = {"relu": 1.0, "tanh": 1.0,
              # GeLU' = Phi(z) + z phi(z) peaks at z = sqrt 2: Phi(sqrt 2) + sqrt(2) e^{-1} / sqrt(2 pi)
              "gelu": 0.5 * (1 + math.erf(1.0)) + math.sqrt(2.0) * math.exp(-1.0) / math.sqrt(2 * math.pi)}


def theorem35_weight(beta) -> np.ndarray:
    r"""The perceptron weight ``exp(-beta)`` under which the engine's dynamics is the companion paper's, up
    to a change of time (chapter 06).

    The paper's interaction kernel is :math:`e^{\beta\langle x,y\rangle}`; the engine's (and the public
    code's) is :math:`g_\beta=e^{\beta(\langle x,y\rangle-1)}`, smaller by :math:`e^{-\beta}`. The paper's
    velocity :math:`\pm P_x(\int e^{\beta\langle x,y\rangle}y\,d\mu+\nabla V)` equals
    :math:`e^{\beta}\cdot(\pm P_x(\int g_\beta\,y\,d\mu+e^{-\beta}\nabla V))`: the engine's velocity with the
    perceptron weighted by :math:`e^{-\beta}`, run :math:`e^{\beta}` times faster. The paths, the stationary
    points and their stability are the same, so Theorem 3.5 applies to the engine's systems with
    ``mlp = theorem35_weight(beta)``.

    Parameters
    ----------
    beta : float or array_like
        Inverse temperature(s), > 0.

    Returns
    -------
    numpy.ndarray
        ``exp(-beta)``, of the shape of ``beta``.

    Examples
    --------
    >>> from mfattn.models.tokens import theorem35_weight
    >>> [round(float(w), 4) for w in theorem35_weight([0.1, 1.0, 5.0])]
    [0.9048, 0.3679, 0.0067]
    """
    b = np.asarray(beta, dtype=float)
    if np.any(~np.isfinite(b)) or np.any(b <= 0):
        raise ValueError("beta: must be finite and > 0")
    return np.exp(-b)


def mass_bound(beta, perceptron: Perceptron) -> np.ndarray:
    r"""The bound (3.3) of the companion paper's Theorem 3.5 on the mass of a cluster at the interaction
    scale of an atomic, stable (SOPD) stationary measure of descent with a perceptron, on the circle:
    :math:`(4+2e^{3/2}C_\theta e^{-\beta})/(4+\frac34e^{11/8})` (chapter 06).

    .. math:: C_\theta=\sum_m\|\omega_m\|\big(\mathrm{Lip}(\sigma)\|a_m\|^2+(|\sigma(0)|+\mathrm{Lip}(\sigma)\|a_m\|)\|a_m\|\big)

    with :math:`\omega_m=s_ma_m` and :math:`\|a_m\|=1`, so :math:`C_\theta=(2\,\mathrm{Lip}(\sigma)+|\sigma(0)|)\sum_m|s_m|`;
    this is the constant as the paper's public code evaluates it for its figure of cluster masses, with
    the exact Lipschitz constant of GeLU (1.1289; the public code uses 1.085). The bound is below one only
    for :math:`\beta` large enough, and tends to :math:`4/(4+\frac34e^{11/8})\approx0.574`. It is stated for the
    paper's kernel :math:`e^{\beta\langle x,y\rangle}`, that is for the engine's systems with the perceptron
    weighted by :func:`theorem35_weight`.

    Parameters
    ----------
    beta : float or array_like
        Inverse temperature(s), > 0.
    perceptron : Perceptron
        The perceptron (its activation gives :math:`\mathrm{Lip}(\sigma)`; :math:`\sigma(0)=0` for all three).

    Returns
    -------
    numpy.ndarray
        The bound, of the shape of ``beta``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tokens import Perceptron, mass_bound
    >>> per = Perceptron(torch.eye(2, dtype=torch.float64), torch.tensor([0.5, -0.5], dtype=torch.float64))
    >>> [round(float(m), 3) for m in mass_bound([1.0, 5.0, 50.0], per)]  # C_theta = 2 * (0.5 + 0.5) = 2
    [1.521, 0.592, 0.574]
    """
    if not isinstance(perceptron, Perceptron):
        raise ValueError("perceptron: expected a Perceptron")
    b = np.asarray(beta, dtype=float)
    if np.any(~np.isfinite(b)) or np.any(b <= 0):
        raise ValueError("beta: must be finite and > 0")
    c_theta = 2.0 * _LIPSCHITZ[perceptron.activation] * float(perceptron.scales.abs().sum())
    return (4.0 + 2.0 * math.exp(1.5) * c_theta * np.exp(-b)) / (4.0 + 0.75 * math.exp(11.0 / 8.0))


# ----------------------------------------------------------------------------------- runs
@dataclass
class TokenRun:
    """A batched run: histories at every snapshot (every ``snapshot_every`` steps) and the stopping record.

    Returned by :func:`simulate`; ``S`` is the number of snapshots (the initial state included).
    A stopped system is frozen, and its later snapshots repeat its final state.

    Attributes
    ----------
    X : Tensor (B, n, d)
        The final tokens (each system as it was when it stopped).
    steps : numpy.ndarray (S,), int
        The step index of every snapshot.
    energy : numpy.ndarray (S, B)
        The energy (:func:`energy`) of every system at every snapshot.
    counts : numpy.ndarray (S, B), int
        The number of clusters (:func:`cluster_labels` at ``threshold``).
    speed : numpy.ndarray (S, B)
        The largest token speed ``max_i |x_i'|``.
    stop_step : numpy.ndarray (B,), int
        The step at which each system met the stopping rule (``max_steps`` if never).
    converged : numpy.ndarray (B,), bool
        Whether it met it.
    kept : dict of int to Tensor (B, n, d)
        The tokens at the requested steps (``keep_at`` of :func:`simulate`).
    threshold : numpy.ndarray (B,)
        The grouping radius of every system (:func:`cluster_threshold`).

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tokens import TokenSystem, simulate, uniform_sphere
    >>> X0 = uniform_sphere(1, 4, 2, generator=torch.Generator().manual_seed(0))
    >>> run = simulate(X0, TokenSystem.grid([1.0]), dt=0.1, max_steps=30, snapshot_every=10,
    ...                keep_at=(0, 20), progress=False)
    >>> run.steps.tolist(), run.energy.shape, sorted(run.kept), run.threshold.tolist()
    ([0, 10, 20, 30], (4, 1), [0, 20], [0.5])
    """

    X: torch.Tensor  # (B, n, d) final tokens (each system frozen at its stop)
    steps: np.ndarray  # (S,) step index of every snapshot
    energy: np.ndarray  # (S, B)
    counts: np.ndarray  # (S, B) number of clusters
    speed: np.ndarray  # (S, B) max_i |x_i'|
    stop_step: np.ndarray  # (B,) step at which each system met the stopping rule (max_steps if never)
    converged: np.ndarray  # (B,) whether it met it
    kept: dict  # step -> (B, n, d) tokens at the requested steps
    threshold: np.ndarray  # (B,) grouping radius


def simulate(X0: torch.Tensor, system: TokenSystem, *, dt: float, max_steps: int, snapshot_every: int = 10,
             window: int = 5, drift_tol: float = 1e-4, c: float = 0.5, method: str = "euler", keep_at=(),
             progress: bool = True) -> TokenRun:
    """Run every system until the stopping rule of the companion paper's section 4 holds, or ``max_steps``.

    Every ``snapshot_every`` steps the clusters are counted at :func:`cluster_threshold`; a system stops
    (and is frozen) once its count has been the same over the last ``window`` snapshots and its largest
    token speed is at most ``drift_tol``. The energy, counts and speeds of all systems are recorded at
    every snapshot, and the tokens at the steps of ``keep_at``.

    Parameters
    ----------
    X0 : Tensor (B, n, d)
        Initial tokens on the unit sphere, one batch row per system (not modified).
    system : TokenSystem
        The settings of the ``B`` systems.
    dt : float
        Step size (> 0).
    max_steps : int
        The largest number of steps.
    snapshot_every : int
        Steps between snapshots (the last step is always one).
    window : int
        Number of consecutive snapshots whose cluster counts must agree for a system to stop.
    drift_tol : float
        The largest token speed allowed at a stop (> 0).
    c : float
        The constant of :func:`cluster_threshold`.
    method : str
        ``"euler"`` (default), ``"heun"`` or ``"rk4"``, as in :func:`step`.
    keep_at : iterable of int
        Steps at which the tokens are kept (only steps that are reached).
    progress : bool
        Whether to show a progress bar.

    Returns
    -------
    TokenRun
        The final tokens, the histories and the stopping record.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tokens import TokenSystem, simulate, uniform_sphere
    >>> X0 = uniform_sphere(2, 8, 2, generator=torch.Generator().manual_seed(0))
    >>> run = simulate(X0, TokenSystem.grid([1.0, 25.0]), dt=0.1, max_steps=300, snapshot_every=20,
    ...                window=3, drift_tol=1e-3, progress=False)
    >>> run.stop_step.tolist(), run.converged.tolist(), run.counts[-1].tolist()
    ([160, 300], [True, False], [1, 5])
    """
    X = _check_X(X0, system).clone()
    check_positive(dt, "dt")
    check_positive(max_steps, "max_steps", integer=True)
    check_positive(snapshot_every, "snapshot_every", integer=True)
    check_positive(window, "window", integer=True)
    check_positive(drift_tol, "drift_tol")
    if method not in _METHODS:
        raise ValueError(f"method: expected one of {_METHODS}, got {method!r}")
    B, n, d = X.shape
    thr = cluster_threshold(system.beta.cpu().numpy(), d, c)
    keep_at = sorted({int(k) for k in keep_at})
    active = torch.ones(B, dtype=torch.bool, device=X.device)
    stop = np.full(B, max_steps)
    conv = np.zeros(B, dtype=bool)
    rec = {"steps": [], "energy": [], "counts": [], "speed": []}
    kept = {}

    # Only the systems still running are stepped: ``Xa`` holds their rows (``idx`` of ``X``) and ``sub``
    # their settings, and both shrink when a system stops. Every kernel works system by system, so a
    # system's path does not depend on which others run beside it. A frozen system's record repeats.
    idx, Xa, sub = torch.arange(B, device=X.device), X, system
    last = {}

    def merged():  # every system's tokens: the running ones' from Xa, the frozen ones' as they stopped
        return X.index_copy(0, idx, Xa) if len(idx) < B else Xa

    def snapshot(k):
        # the clusters, energy and largest speed of the running systems; the velocity is kept for
        # the next step, which starts from the same tokens
        v, Z = _velocity_and_Z(Xa, sub)
        rows = idx.cpu().numpy()
        _, cnt = cluster_labels(Xa, thr[rows])
        for key, val in (("energy", _energy(Xa, sub, Z)), ("counts", cnt), ("speed", v.norm(dim=-1).amax(1))):
            full = last[key].copy() if key in last else np.zeros(B, dtype=val.cpu().numpy().dtype)
            full[rows] = val.cpu().numpy()
            last[key] = full
            rec[key].append(full)
        rec["steps"].append(k)
        return v

    v = snapshot(0)
    if 0 in keep_at:
        kept[0] = X.clone()
    bar = progress_bar(total=max_steps, enabled=progress, desc="token steps", leave=False)
    for k in range(1, max_steps + 1):
        Xa = _step(Xa, sub, dt, method, v)
        v = None
        if k in keep_at:
            X = merged()
            kept[k] = X.clone()
        if k % snapshot_every == 0 or k == max_steps:
            v = snapshot(k)
            if len(rec["counts"]) >= window:
                recent = np.stack(rec["counts"][-window:])
                done = (recent == recent[-1]).all(0) & (rec["speed"][-1] <= drift_tol) & active.cpu().numpy()
                stop[done] = k
                conv |= done
                if done.any():
                    X = merged()
                    active &= ~torch.as_tensor(done, device=X.device)
                    still = active[idx]
                    idx, Xa, v = idx[still], Xa[still], v[still]
                    if len(idx):
                        sub = TokenSystem(*(getattr(system, f)[idx] for f in ("beta", "sign", "normalized", "mlp")),
                                          system.perceptron)
            bar.update(snapshot_every)
            if not len(idx):
                break
    bar.close()
    if len(idx):
        X = merged()
    return TokenRun(X, np.array(rec["steps"]), np.stack(rec["energy"]), np.stack(rec["counts"]),
                    np.stack(rec["speed"]), stop, conv, kept, thr)


def summarize(run: TokenRun, system: TokenSystem, *, dt: float, paths: bool = False) -> dict:
    """What chapter 06 reads off a batched run, system by system, as JSON-ready lists.

    Parameters
    ----------
    run : TokenRun
        The run of ``system`` (:func:`simulate`).
    system : TokenSystem
        Its systems.
    dt : float
        The step of the run (> 0), to turn steps into times.
    paths : bool, default False
        Whether to add the energy and the cluster count at every snapshot.

    Returns
    -------
    dict
        Lists of length ``B``: ``beta``; ``count`` (clusters at the stop, :func:`cluster_labels`);
        ``anchored`` (:func:`anchored_counts`, the public code's rule on the circle; ``None`` for
        ``d > 2``); ``converged``;
        ``stop_t`` (time of the stop); ``masses`` (every cluster's mass, heaviest first,
        :func:`cluster_masses`); ``heaviest``; ``against`` (the largest decrease of the energy from
        one snapshot to the next under ascent, of increase under descent: 0 for a gradient flow
        of ``F`` up to the integrator's error); ``sphere_error`` (one number: the largest
        ``| |x_i| - 1 |``). With ``paths``: ``t (S,)``, ``energy`` and ``count_path``, each ``B`` lists of
        ``S``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tokens import TokenSystem, simulate, summarize, uniform_sphere
    >>> s = TokenSystem.grid([1.0, 25.0])
    >>> run = simulate(uniform_sphere(2, 8, 2, generator=torch.Generator().manual_seed(0)), s, dt=0.1,
    ...                max_steps=300, snapshot_every=20, window=3, drift_tol=1e-3, progress=False)
    >>> out = summarize(run, s, dt=0.1)
    >>> out["count"], out["converged"], out["stop_t"], out["against"]
    ([1, 5], [True, False], [16.0, 30.0], [0.0, 0.0])
    """
    check_positive(dt, "dt")
    labels, _ = cluster_labels(run.X, run.threshold)
    masses = cluster_masses(labels)
    sign = system.sign.cpu().numpy()
    # + 0.0 turns the -0.0 of a flat energy into 0.0
    against = np.maximum(0.0, -(sign * np.diff(run.energy, axis=0)).min(0)) + 0.0 if len(run.steps) > 1 else \
        np.zeros(system.B)
    circle = run.X.shape[2] == 2
    out = {"beta": system.beta.tolist(), "count": run.counts[-1].tolist(),
           "anchored": anchored_counts(run.X, run.threshold).tolist() if circle else None,
           "converged": run.converged.tolist(),
           "stop_t": (run.stop_step * dt).tolist(), "masses": [m.tolist() for m in masses],
           "heaviest": [float(m[0]) for m in masses], "against": against.tolist(),
           "sphere_error": float((run.X.norm(dim=-1) - 1).abs().max())}
    if paths:
        out |= {"t": (run.steps * dt).tolist(), "energy": run.energy.T.tolist(), "count_path": run.counts.T.tolist()}
    return out
