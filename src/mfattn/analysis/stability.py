r"""Dirac stationary measures, their Hessians, and the symmetry of a head (paper §7).

A head's features :math:`\psi(X;\omega)` (7) depend on ``W_Q, W_K`` only through the score
matrix ``W_Q W_K^T`` and on ``W_V, W_O`` only through ``W_V W_O``. They are therefore invariant
under the group of pairs ``(G, M)`` of invertible ``d_k x d_k`` matrices acting by

    (W_Q, W_K, W_V, W_O) -> (W_Q G, W_K G^{-T}, W_V M, M^{-1} W_O).

Every function of a measure built from the features (the logits (8), the risk (10), the first
variation (11)) is constant along the orbits. At a Dirac stationary point
:math:`\delta_{\omega_*}` (51) the orbit's tangent space (dimension ``2 d_k^2`` when the four
blocks have rank ``d_k``) therefore lies in the null spaces of both :math:`H_0` (50) and
:math:`H_{tr}` (59), and the hypothesis :math:`H_0 \succeq \lambda_0 I` of Theorem 7.5 cannot hold.
The action is linear in ``omega`` but not orthogonal, so the Hessians at two points of one orbit
are congruent (``H(omega) = A^T H(g.omega) A``), not similar: their inertia is intrinsic, their
eigenvalues are not. This module computes what chapter 05 measures:

* the group action, the orbit's generators and an orthonormal basis of the tangent space and
  of its orthogonal complement; spectra on either (:func:`orbit_tangent`, :func:`spectrum`);
* the single-head risk minimiser (a translation-stable Dirac stationary point,
  :func:`single_head_minimum`) and the saddle ``omega = 0`` with its Hessian in closed form
  (:func:`zero_hessian`);
* perturbed starts (translation, symmetric split, cloud) and their runs under the reference
  flow (21), with the W2 distance to :math:`\delta_{\omega_*}`, the distance to the orbit and the
  strong-monotonicity ratio of (45) (:func:`perturbation_run`);
* the initial growth rates of Theorem 7.8 and of the symmetric split
  (:func:`predicted_rate`, :func:`initial_rate`, :func:`compare_rate`);
* what chapter 05 measures with them: the saddle ``0`` against autograd (:func:`zero_saddle`), the
  symmetry's residuals (:func:`symmetry_residuals`), the directions of translation
  (:func:`translation_directions`) and of the uniform-attention saddle (:func:`saddle_direction`),
  the linearised flow (:func:`linearised_flow`), formula (49) at a Dirac lift
  (:func:`lifted_spectrum`) and Remark 7.2's Lipschitz constant (:func:`lipschitz_in_measure`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from .._checks import check_generator, check_positive, check_tensor
from ..models.data import Dataset
from ..flows.dynamics import as_profile, reference_flow
from ..models.model import HeadModel, require_heads

__all__ = [
    "DiracPoint",
    "DiracSymmetry",
    "LiftedSpectrum",
    "OrbitTangent",
    "Perturbation",
    "PerturbationRun",
    "RateComparison",
    "SaddleDirection",
    "TranslationDirections",
    "ZeroHessian",
    "ZeroSaddle",
    "analyse_dirac",
    "canonical_point",
    "canonical_sign",
    "cloud",
    "common_inertia",
    "compare_rate",
    "dilation_direction",
    "group_action",
    "inertia",
    "initial_rate",
    "lifted_hessian",
    "lifted_monotonicity",
    "lifted_spectrum",
    "linearised_flow",
    "lipschitz_in_measure",
    "lowest_direction",
    "lowest_eigenpair",
    "monotonicity_ratio",
    "named_tangent",
    "orbit_distance",
    "orbit_generators",
    "orbit_tangent",
    "pair_distance",
    "perturbation_run",
    "predicted_rate",
    "random_group_element",
    "rayleigh_quotient",
    "saddle_direction",
    "single_head_minimum",
    "spectrum",
    "split",
    "symmetry_residuals",
    "translate",
    "translation_directions",
    "uniform_attention_point",
    "zero_hessian",
    "zero_saddle",
]


def _check_model(model) -> HeadModel:
    return require_heads(model, "this stability tool (mfattn.analysis.stability)")


def _vec(model: HeadModel, v, name: str) -> torch.Tensor:
    check_tensor(v, name, ndim=1, dtype=model.dtype, device=model.device)
    if v.shape[0] != model.d_omega:
        raise ValueError(f"{name}: expected length d_omega = {model.d_omega}, got {v.shape[0]}")
    return v


def _unit(model: HeadModel, v, name: str = "v") -> torch.Tensor:
    v = _vec(model, v, name)
    n = float(v.norm())
    if n == 0.0:
        raise ValueError(f"{name}: must be a nonzero direction")
    return v / n


# ---------------------------------------------------------------------------------- the group
def group_action(model: HeadModel, omega: torch.Tensor, G: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """``(W_Q G, W_K G^{-T}, W_V M, M^{-1} W_O)``: the head ``omega (..., d_omega)`` moved along its
    orbit by invertible ``G, M (..., d_k, d_k)``. The features (7) do not change.

    Parameters
    ----------
    model : HeadModel
        The head model (sets ``d_x``, ``d_k``, the dtype and the device).
    omega : Tensor (..., d_omega), the model's dtype
        Heads, batched over leading axes.
    G : Tensor (..., d_k, d_k), the model's dtype
        Invertible; acts on the query and key blocks.
    M : Tensor (..., d_k, d_k), the model's dtype
        Invertible; acts on the value and output blocks.

    Returns
    -------
    Tensor (..., d_omega)
        The moved heads (leading axes broadcast between ``omega``, ``G`` and ``M``).

    Raises
    ------
    ValueError
        If ``G`` or ``M`` is not ``(..., d_k, d_k)`` or is singular.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, _ = example()
    >>> omega = heads[0]
    >>> from mfattn.analysis.stability import group_action
    >>> G = torch.tensor([[2.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    >>> M = torch.tensor([[1.0, 0.0], [3.0, 0.5]], dtype=torch.float64)
    >>> moved = group_action(model, omega, G, M)
    >>> moved.shape
    torch.Size([24])
    >>> X = data.X
    >>> torch.allclose(model.features(X, moved[None]), model.features(X, omega[None]))
    True
    """
    model = _check_model(model)
    check_tensor(omega, "omega", dtype=model.dtype, device=model.device)
    model.unpack(omega)
    for X, name in ((G, "G"), (M, "M")):
        check_tensor(X, name, dtype=model.dtype, device=model.device)
        if X.ndim < 2 or X.shape[-2:] != (model.d_k, model.d_k):
            raise ValueError(f"{name}: expected trailing shape (d_k, d_k) = ({model.d_k}, {model.d_k}), "
                             f"got {tuple(X.shape)}")
        if bool((torch.linalg.inv_ex(X).info != 0).any()):
            raise ValueError(f"{name}: must be invertible")
    return _act(model, omega, G, M)


def _act(model: HeadModel, omega, G, M):
    W_Q, W_K, W_V, W_O = model.unpack(omega)
    return model.pack(W_Q @ G, W_K @ torch.linalg.inv(G).mT, W_V @ M, torch.linalg.solve(M, W_O))


def orbit_generators(model: HeadModel, omega: torch.Tensor) -> torch.Tensor:
    r"""The ``2 d_k^2`` infinitesimal generators of the orbit at ``omega``: (2 d_k^2, d_omega).

    Row ``a d_k + b`` is the derivative of :func:`group_action` at ``G = I + s E_ab``:
    ``(W_Q E_ab, -W_K E_ab^T, 0, 0)``; row ``d_k^2 + a d_k + b`` is that at ``M = I + s E_ab``:
    ``(0, 0, W_V E_ab, -E_ab W_O)``. They span the orbit's tangent space.

    Parameters
    ----------
    model : HeadModel
        The head model.
    omega : Tensor (d_omega,), the model's dtype
        The point of the orbit.

    Returns
    -------
    Tensor (2 d_k^2, d_omega)
        One generator per row, the ``G`` rows first, then the ``M`` rows.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> model, _, heads, _ = example()
    >>> omega = heads[0]
    >>> from mfattn.analysis.stability import orbit_generators
    >>> gens = orbit_generators(model, omega)
    >>> gens.shape
    torch.Size([8, 24])
    >>> int(torch.linalg.matrix_rank(gens))  # 2 d_k^2: the four blocks have rank d_k
    8
    """
    model = _check_model(model)
    omega = model.check_omega(omega)
    W_Q, W_K, W_V, W_O = model.unpack(omega)
    k = model.d_k
    E = torch.eye(k * k, dtype=omega.dtype, device=omega.device).reshape(k * k, k, k)
    zx = torch.zeros(k * k, model.d_x, k, dtype=omega.dtype, device=omega.device)
    zo = torch.zeros(k * k, k, model.d_x, dtype=omega.dtype, device=omega.device)
    qk = model.pack(W_Q @ E, -W_K @ E.mT, zx, zo)
    vo = model.pack(zx, zx, W_V @ E, -E @ W_O)
    return torch.cat([qk, vo])


def dilation_direction(model: HeadModel, omega: torch.Tensor) -> torch.Tensor:
    r"""``(0, 0, W_V, 0)``: the direction along which the features grow, :math:`\psi \to (1+s)\psi`.

    :math:`\Phi(\cdot;\rho)` (11) is linear in the features, hence in ``W_V``; at a point where
    :math:`\nabla\Phi(\omega;\rho)=0` it stays zero along this direction, which is therefore in the
    null space of :math:`\nabla^2_\omega\Phi(\omega;\rho)`, in particular of :math:`H_0` (50). It is not
    in that of :math:`H_{tr}` (59): a translation along it changes the logits.

    Parameters
    ----------
    model : HeadModel
        The head model.
    omega : Tensor (d_omega,), the model's dtype
        The head.

    Returns
    -------
    Tensor (d_omega,)
        ``omega`` with its ``W_Q``, ``W_K`` and ``W_O`` blocks set to zero (not normalised).

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, _ = example()
    >>> omega = heads[0]
    >>> from mfattn.analysis.stability import dilation_direction
    >>> d = dilation_direction(model, omega)
    >>> X = data.X
    >>> psi = model.features(X, omega[None])
    >>> torch.allclose(model.features(X, (omega + 0.5 * d)[None]), 1.5 * psi)
    True
    """
    model = _check_model(model)
    omega = model.check_omega(omega)
    W_Q, W_K, W_V, W_O = model.unpack(omega)
    return model.pack(torch.zeros_like(W_Q), torch.zeros_like(W_K), W_V, torch.zeros_like(W_O))


def canonical_point(model: HeadModel, omega: torch.Tensor) -> torch.Tensor:
    r"""The canonical representative of the orbit of ``omega``: (..., d_omega).

    With the singular value decompositions ``W_Q W_K^T = U S V^T`` and ``W_V W_O = P T R^T``
    (leading ``d_k`` triples, descending), the canonical head is
    ``(U S^{1/2}, V S^{1/2}, P T^{1/2}, T^{1/2} R^T)``: it has the same score and value-output
    products, hence the same features (7), so it lies on the orbit of ``omega`` when the four blocks
    have rank ``d_k``. It is *balanced* (``W_Q^T W_Q = W_K^T W_K = S``, ``W_V^T W_V = W_O W_O^T = T``,
    diagonal), and each singular pair's sign is fixed by making the largest entry of the ``U`` (resp.
    ``P``) column positive. It depends on ``omega`` only through the two products, so two points of
    one orbit have the same canonical point up to rounding (provided the singular values are
    distinct). The Hessians (50), (59) at two points of one orbit are congruent, not similar, so
    eigenvalues printed at a minimiser are reproducible only at a fixed point of its orbit: chapter
    05 reports them at this one.

    Parameters
    ----------
    model : HeadModel
        The head model.
    omega : Tensor (..., d_omega), the model's dtype
        Heads, batched over leading axes.

    Returns
    -------
    Tensor (..., d_omega)
        The canonical head of each orbit.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> model, _, heads, _ = example()
    >>> omega = heads[0]
    >>> from mfattn.analysis.stability import canonical_point, group_action
    >>> G = torch.tensor([[2.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    >>> M = torch.tensor([[1.0, 0.0], [3.0, 0.5]], dtype=torch.float64)
    >>> c = canonical_point(model, omega)
    >>> torch.allclose(c, canonical_point(model, group_action(model, omega, G, M)))
    True
    >>> W_Q, W_K, W_V, W_O = model.unpack(c)
    >>> torch.allclose(W_Q.T @ W_Q, W_K.T @ W_K), torch.allclose(W_V.T @ W_V, W_O @ W_O.T)
    (True, True)
    """
    model = _check_model(model)
    check_tensor(omega, "omega", dtype=model.dtype, device=model.device)
    W_Q, W_K, W_V, W_O = model.unpack(omega)
    k = model.d_k

    def factor(A):
        U, S, Vh = torch.linalg.svd(A)
        U, S, V = U[..., :k], S[..., :k], Vh[..., :k, :].mT
        idx = U.abs().argmax(dim=-2, keepdim=True)
        sign = torch.sign(torch.gather(U, -2, idx))
        sign = torch.where(sign == 0, torch.ones_like(sign), sign)
        r = S.sqrt()[..., None, :]
        return U * sign * r, V * sign * r

    Q, K = factor(W_Q @ W_K.mT)
    V, O = factor(W_V @ W_O)
    return model.pack(Q, K, V, O.mT)


def canonical_sign(v: torch.Tensor) -> torch.Tensor:
    """``v`` or ``-v``, whichever has its entry of largest magnitude positive: eigen- and singular vectors
    are defined up to sign, and which sign a LAPACK path returns is not reproducible.

    Parameters
    ----------
    v : Tensor (d,)
        A vector of any floating dtype.

    Returns
    -------
    Tensor (d,)
        ``v`` itself or ``-v`` (the first entry of largest magnitude decides on ties).

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.stability import canonical_sign
    >>> canonical_sign(torch.tensor([0.5, -2.0, 1.0]))
    tensor([-0.5000,  2.0000, -1.0000])
    """
    check_tensor(v, "v", ndim=1)
    i = int(v.abs().argmax())
    return -v if float(v[i]) < 0 else v


def named_tangent(model: HeadModel, omega: torch.Tensor, a: int = 0, b: int = 0) -> torch.Tensor:
    """The unit tangent vector of the orbit generated by ``G = I + s E_ab`` (row ``a d_k + b`` of
    :func:`orbit_generators`): a tangent direction that does not depend on a basis choice.

    Parameters
    ----------
    model : HeadModel
        The head model.
    omega : Tensor (d_omega,), the model's dtype
        The point of the orbit.
    a, b : int
        Row and column of ``E_ab``, in ``[0, d_k)``.

    Returns
    -------
    Tensor (d_omega,)
        The generator, of unit length.

    Raises
    ------
    ValueError
        If ``a`` or ``b`` is out of range, or the generator vanishes (e.g. at ``omega = 0``).

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> model, _, heads, _ = example()
    >>> omega = heads[0]
    >>> from mfattn.analysis.stability import named_tangent, orbit_tangent
    >>> t = named_tangent(model, omega, a=0, b=1)
    >>> t.shape, round(float(t.norm()), 6)
    (torch.Size([24]), 1.0)
    >>> round(float((orbit_tangent(model, omega).complement @ t).norm()), 6)  # tangent: no normal part
    0.0
    """
    model = _check_model(model)
    k = model.d_k
    if not (0 <= a < k and 0 <= b < k):
        raise ValueError(f"a, b: expected indices in [0, d_k) = [0, {k}), got ({a}, {b})")
    return _unit(model, orbit_generators(model, omega)[a * k + b], "generator")


class OrbitTangent(NamedTuple):
    """The tangent space of an orbit at a point and its orthogonal complement (:func:`orbit_tangent`).

    A named tuple with the fields below; its property ``dim`` is the dimension ``r`` of the tangent
    space.

    Parameters
    ----------
    basis : Tensor (r, d_omega)
        Orthonormal rows spanning the tangent space of the orbit; ``r`` is its dimension.
    complement : Tensor (d_omega - r, d_omega)
        Orthonormal rows spanning its orthogonal complement.
    singular_values : Tensor (min(2 d_k^2, d_omega),)
        Singular values of :func:`orbit_generators`, descending; ``r`` counts those above ``rtol``
        times the largest.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> model, _, heads, _ = example()
    >>> omega = heads[0]
    >>> from mfattn.analysis.stability import orbit_tangent
    >>> tangent = orbit_tangent(model, omega)
    >>> tangent.dim, tangent.basis.shape, tangent.complement.shape
    (8, torch.Size([8, 24]), torch.Size([16, 24]))
    """

    basis: torch.Tensor  # (r, d_omega) orthonormal rows spanning the tangent space of the orbit
    complement: torch.Tensor  # (d_omega - r, d_omega) orthonormal rows spanning its orthogonal complement
    singular_values: torch.Tensor  # (2 d_k^2,) of the generator matrix; the rank r counts those above rtol

    @property
    def dim(self) -> int:
        return self.basis.shape[0]


def _split_span(A: torch.Tensor, rtol: float):
    """Orthonormal bases of the row space of ``A`` and of its orthogonal complement."""
    U, S, Vh = torch.linalg.svd(A, full_matrices=True)
    top = float(S.max()) if S.numel() else 0.0
    r = int((S > rtol * top).sum()) if top > 0 else 0
    return Vh[:r], Vh[r:], S


def orbit_tangent(model: HeadModel, omega: torch.Tensor, *, rtol: float = 1e-10) -> OrbitTangent:
    """Orthonormal bases of the orbit's tangent space at ``omega`` and of its orthogonal complement.

    The dimension is the rank of :func:`orbit_generators` (singular values above ``rtol`` times the
    largest): ``2 d_k^2`` when ``W_Q, W_K, W_V, W_O`` all have rank ``d_k``, 0 at ``omega = 0``.

    Parameters
    ----------
    model : HeadModel
        The head model.
    omega : Tensor (d_omega,), the model's dtype
        The point of the orbit.
    rtol : float
        Relative threshold on the singular values of the generators that decides the rank.

    Returns
    -------
    OrbitTangent
        ``basis (r, d_omega)``, ``complement (d_omega - r, d_omega)`` and the singular values.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> model, _, heads, _ = example()
    >>> omega = heads[0]
    >>> from mfattn.analysis.stability import orbit_tangent
    >>> orbit_tangent(model, omega).dim  # 2 d_k^2
    8
    >>> orbit_tangent(model, torch.zeros_like(omega)).dim
    0
    """
    check_positive(rtol, "rtol")
    basis, comp, S = _split_span(orbit_generators(model, omega), rtol)
    return OrbitTangent(basis, comp, S)


def spectrum(H: torch.Tensor, complement: torch.Tensor | None = None) -> torch.Tensor:
    """Eigenvalues (ascending) of the symmetric ``H``, or of its compression ``Q H Q^T`` to the span of
    the orthonormal rows ``complement`` (e.g. :attr:`OrbitTangent.complement`).

    Parameters
    ----------
    H : Tensor (d, d)
        A square matrix; its symmetric part ``(H + H^T) / 2`` is used.
    complement : Tensor (m, d) or None
        Orthonormal rows ``Q`` of the dtype of ``H``; ``None`` for the whole space.

    Returns
    -------
    Tensor (d,) or (m,)
        The eigenvalues, ascending, in the dtype of ``H``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.stability import spectrum
    >>> H = torch.diag(torch.tensor([3.0, -1.0, 2.0], dtype=torch.float64))
    >>> spectrum(H)
    tensor([-1.,  2.,  3.], dtype=torch.float64)
    >>> Q = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    >>> spectrum(H, Q)
    tensor([2., 3.], dtype=torch.float64)
    """
    check_tensor(H, "H", ndim=2)
    if H.shape[0] != H.shape[1]:
        raise ValueError(f"H: expected a square matrix, got {tuple(H.shape)}")
    Hs = 0.5 * (H + H.T)
    if complement is not None:
        check_tensor(complement, "complement", ndim=2, dtype=H.dtype)
        if complement.shape[1] != H.shape[0]:
            raise ValueError(f"complement: rows must have length {H.shape[0]}, got {complement.shape[1]}")
        Hs = complement @ Hs @ complement.T
    return torch.linalg.eigvalsh(Hs)


def inertia(eigenvalues: torch.Tensor, scale: float, rtol: float = 1e-9) -> tuple[int, int, int]:
    """The inertia of a symmetric matrix from its eigenvalues: how many are negative, zero and positive,
    an eigenvalue counting as zero within ``rtol * scale`` (Sylvester's law: a congruence such as the
    move along a group orbit of chapter 05 keeps it).

    Parameters
    ----------
    eigenvalues : Tensor (d,)
        The eigenvalues, e.g. from :func:`spectrum`.
    scale : float
        The size of the spectrum the tolerance is relative to (> 0), e.g. the largest ``|eigenvalue|``.
    rtol : float, default 1e-9
        The relative tolerance of zero.

    Returns
    -------
    tuple of int
        ``(negative, zero, positive)``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.stability import inertia
    >>> inertia(torch.tensor([-2.0, 1e-14, 0.0, 3.0], dtype=torch.float64), 3.0)
    (1, 2, 1)
    """
    check_tensor(eigenvalues, "eigenvalues", ndim=1)
    check_positive(scale, "scale")
    tol = rtol * scale
    return (int((eigenvalues < -tol).sum()), int((eigenvalues.abs() <= tol).sum()), int((eigenvalues > tol).sum()))


def lowest_direction(H: torch.Tensor, *, generator: torch.Generator, rtol: float = 1e-9) -> tuple[torch.Tensor, float]:
    """A unit vector of the eigenspace of the lowest eigenvalue of the symmetric ``H``: the projection
    of a Gaussian vector on that eigenspace, so that it is well defined when the eigenvalue is
    repeated (an eigenvector solver's choice of basis is not); chapter 05's directions at the
    uniform-attention point.

    Parameters
    ----------
    H : Tensor (d, d)
        A symmetric matrix; its symmetric part is used.
    generator : torch.Generator
        Draws the Gaussian vector (on the CPU, float64).
    rtol : float, default 1e-9
        Eigenvalues within ``rtol * max |eigenvalue|`` of the lowest one span the eigenspace.

    Returns
    -------
    (Tensor (d,), float)
        The unit vector (dtype and device of ``H``) and the lowest eigenvalue.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.stability import lowest_direction
    >>> H = torch.diag(torch.tensor([-1.0, -1.0, 2.0], dtype=torch.float64))
    >>> u, lam = lowest_direction(H, generator=torch.Generator().manual_seed(0))
    >>> lam, round(float(u.norm()), 12), float(u[2])
    (-1.0, 1.0, 0.0)
    """
    check_tensor(H, "H", ndim=2)
    if H.shape[0] != H.shape[1]:
        raise ValueError(f"H: expected a square matrix, got {tuple(H.shape)}")
    check_generator(generator)
    e, U = torch.linalg.eigh(0.5 * (H + H.T))
    Uk = U[:, (e - e[0]).abs() <= rtol * float(e.abs().max())]
    x = Uk @ (Uk.T @ torch.randn(H.shape[0], generator=generator, dtype=torch.float64).to(H))
    return x / x.norm(), float(e[0])


def lowest_eigenpair(H: torch.Tensor) -> tuple[float, torch.Tensor]:
    """The lowest eigenvalue of the symmetric ``H`` and a unit eigenvector for it, its sign fixed by
    :func:`canonical_sign` so that a run started along it does not depend on the LAPACK path; chapter
    05's split direction, the most negative direction of ``H0``. Where the eigenvalue is repeated the
    eigenvector is the solver's choice (:func:`lowest_direction` projects a Gaussian vector instead).

    Parameters
    ----------
    H : Tensor (d, d)
        A symmetric matrix; ``torch.linalg.eigh`` reads its lower triangle.

    Returns
    -------
    (float, Tensor (d,))
        The lowest eigenvalue and its unit eigenvector (dtype and device of ``H``), the entry of largest
        magnitude positive.

    Raises
    ------
    ValueError
        If ``H`` is not a square floating matrix.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.stability import lowest_eigenpair
    >>> lam, v = lowest_eigenpair(torch.tensor([[2.0, 1.0], [1.0, 2.0]], dtype=torch.float64))
    >>> round(lam, 12), [round(float(x), 6) for x in v]
    (1.0, [0.707107, -0.707107])
    """
    check_tensor(H, "H", ndim=2)
    if H.shape[0] != H.shape[1]:
        raise ValueError(f"H: expected a square matrix, got {tuple(H.shape)}")
    e, U = torch.linalg.eigh(H)
    return float(e[0]), canonical_sign(U[:, 0])


def rayleigh_quotient(H: torch.Tensor, v: torch.Tensor) -> float:
    r"""The Rayleigh quotient :math:`v^\top Hv/|v|^2`: the curvature of the quadratic form ``H`` along
    ``v``, e.g. the initial monotonicity ratio :math:`\kappa(\rho_0)` that (45) and (59) predict for a
    translation along ``v``.

    Parameters
    ----------
    H : Tensor (d, d)
        A square matrix.
    v : Tensor (d,)
        A nonzero vector, the dtype and device of ``H``.

    Returns
    -------
    float
        ``v @ H @ v / |v|^2``.

    Raises
    ------
    ValueError
        If ``H`` is not square, or ``v`` is not a nonzero vector of its size.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.stability import rayleigh_quotient
    >>> H = torch.diag(torch.tensor([1.0, 3.0], dtype=torch.float64))
    >>> rayleigh_quotient(H, torch.tensor([2.0, 2.0], dtype=torch.float64))  # (4 + 12) / 8
    2.0
    """
    check_tensor(H, "H", ndim=2)
    if H.shape[0] != H.shape[1]:
        raise ValueError(f"H: expected a square matrix, got {tuple(H.shape)}")
    check_tensor(v, "v", ndim=1)
    if v.shape[0] != H.shape[0]:
        raise ValueError(f"v: expected {H.shape[0]} entries, got {v.shape[0]}")
    if float(v.norm()) == 0.0:
        raise ValueError("v: expected a nonzero vector")
    return float(v @ H @ v / v.norm() ** 2)


_BLOCKS = ("W_Q", "W_K", "W_V", "W_O")


def pair_distance(model: HeadModel, heads: torch.Tensor, block: str | None = None) -> torch.Tensor:
    """The distance between the two heads of a two-head measure, for each of its recordings: over the
    whole parameter vector, or over one block (Frobenius norm); how far a split has separated.

    Parameters
    ----------
    model : HeadModel
        The model the heads belong to.
    heads : Tensor (..., 2, d_omega)
        Two heads per recording (e.g. :attr:`PerturbationRun.heads` of a split).
    block : {None, "W_Q", "W_K", "W_V", "W_O"}, default None
        The block compared; ``None`` compares the whole heads.

    Returns
    -------
    Tensor (...,)
        ``|omega_1 - omega_2|``, or ``|W_1 - W_2|_F`` for the block.

    Raises
    ------
    ValueError
        If ``heads`` does not hold two heads of ``model`` per recording, or ``block`` is not a block name.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.stability import pair_distance
    >>> from mfattn.models.tasks import example
    >>> model = example().model  # d_x = 3, d_k = 2: blocks of 6 entries, d_omega = 24
    >>> heads = torch.zeros(1, 2, 24, dtype=torch.float64)
    >>> heads[0, 1, 12:18] = 1.0  # the second head's W_V is all ones
    >>> pair_distance(model, heads).tolist(), pair_distance(model, heads, "W_V").tolist()
    ([2.449489742783178], [2.449489742783178])
    >>> pair_distance(model, heads, "W_Q").tolist()
    [0.0]
    """
    _check_model(model)
    check_tensor(heads, "heads")
    if heads.ndim < 2 or heads.shape[-2] != 2 or heads.shape[-1] != model.d_omega:
        raise ValueError(f"heads: expected shape (..., 2, {model.d_omega}), got {tuple(heads.shape)}")
    if block is None:
        return (heads[..., 0, :] - heads[..., 1, :]).norm(dim=-1)
    if block not in _BLOCKS:
        raise ValueError(f"block: expected None or one of {_BLOCKS}, got {block!r}")
    W = model.unpack(heads)[_BLOCKS.index(block)]
    return (W[..., 0, :, :] - W[..., 1, :, :]).flatten(-2).norm(dim=-1)


def orbit_distance(model: HeadModel, omega_star: torch.Tensor, heads: torch.Tensor, *, iters: int = 40) -> torch.Tensor:
    r"""Euclidean distance of each head to the orbit of ``omega_star``: (N,).

    ``min over (G, M)`` of ``|omega_i - (G, M).omega_star|``, by a damped Gauss-Newton
    (Levenberg-Marquardt) iteration batched over the heads. The problem is not convex; the best of
    three starts is kept: the least-squares fits ``G_0 = W_Q*^+ W_Q``, ``M_0 = W_V*^+ W_V``, the fits
    from ``W_K`` and ``W_O``, and the identity. The W2 distance of a measure to the set of measures
    carried by the orbit is :math:`(\sum_i w_i d_i^2)^{1/2}` (each head moved to its nearest orbit point).
    A start whose G or M is singular (a rank-deficient ``omega_star``, e.g. the saddle 0, whose orbit
    is the point itself) counts as infinitely far. The orbit is not closed where G or M
    degenerates; near ``omega_star`` the starts agree, far from it (heads that have left the orbit
    by O(1)) different local minima can be returned, and the value is then an upper bound (CPU and CUDA agreed to 1e-4 relative on a split, to 1.4% on a 256-head cloud).

    Parameters
    ----------
    model : HeadModel
        The head model.
    omega_star : Tensor (d_omega,), the model's dtype
        The point whose orbit is measured to.
    heads : Tensor (N, d_omega), the model's dtype
        The heads whose distances are computed.
    iters : int
        Levenberg-Marquardt iterations.

    Returns
    -------
    Tensor (N,)
        The distance of each head to the orbit (the best of the three starts).

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> model, _, h, _ = example()
    >>> omega = h[0]
    >>> from mfattn.analysis.stability import group_action, orbit_distance
    >>> G = torch.tensor([[2.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    >>> M = torch.tensor([[1.0, 0.0], [3.0, 0.5]], dtype=torch.float64)
    >>> heads = torch.stack([group_action(model, omega, G, M), omega + 0.1])
    >>> d = orbit_distance(model, omega, heads, iters=5)
    >>> d.shape, round(float(d[0]), 6)
    (torch.Size([2]), 0.0)
    >>> bool(d[1] <= (heads[1] - omega).norm())  # at most the distance to omega_star itself
    True
    """
    model = _check_model(model)
    omega_star = model.check_omega(omega_star)
    heads = model.check_heads(heads)
    check_positive(iters, "iters", integer=True)
    k = model.d_k
    N = heads.shape[0]
    Qs, Ks, Vs, Os = model.unpack(omega_star)
    Q, K, V, O = model.unpack(heads)
    eye_k = torch.eye(k, dtype=heads.dtype, device=heads.device).expand(N, k, k)

    def inv_t(A):  # G from W_K = W_K* G^{-T}, M from W_O = M^{-1} W_O*; the identity where singular
        Ainv, info = torch.linalg.inv_ex(A)
        return torch.where((info == 0)[:, None, None], Ainv, eye_k)

    starts = [  # least-squares fits of G (from W_Q or W_K) and M (from W_V or W_O), and the identity
        (torch.linalg.pinv(Qs) @ Q, torch.linalg.pinv(Vs) @ V),
        (inv_t(torch.linalg.pinv(Ks) @ K).mT, inv_t(O @ torch.linalg.pinv(Os))),
        (eye_k, eye_k),
    ]
    p = torch.cat([torch.cat([G.flatten(1), M.flatten(1)], dim=1) for G, M in starts])  # (3N, 2 k^2)
    heads = heads.repeat(len(starts), 1)

    def residual(q, h):
        # inverses that do not raise: a singular G or M (a start fitted to a rank-deficient omega_star,
        # e.g. the saddle omega = 0) gives a non-finite residual, whose cost counts as +inf below
        G, M = q[: k * k].reshape(k, k), q[k * k:].reshape(k, k)
        W_Q, W_K, W_V, W_O = model.unpack(omega_star)
        G_inv = torch.linalg.inv_ex(G).inverse
        return h - model.pack(W_Q @ G, W_K @ G_inv.mT, W_V @ M, torch.linalg.solve_ex(M, W_O).result)

    res = torch.func.vmap(residual)
    jac = torch.func.vmap(torch.func.jacfwd(residual))
    r = res(p, heads)
    cost = torch.nan_to_num((r * r).sum(-1), nan=math.inf, posinf=math.inf)
    mu = torch.full_like(cost, 1e-3)
    eye = torch.eye(p.shape[1], dtype=p.dtype, device=p.device)
    for _ in range(iters):
        J = jac(p, heads)  # (N, d_omega, 2 k^2)
        JtJ = J.mT @ J
        A = JtJ + mu[:, None, None] * (eye + torch.diag_embed(torch.diagonal(JtJ, dim1=1, dim2=2)))
        step, info = torch.linalg.solve_ex(A, -(J.mT @ r[..., None]))
        p_new = p + step[..., 0]
        bad = (info != 0) | ~torch.isfinite(p_new).all(-1)
        p_new[bad] = p[bad]
        r_new = res(p_new, heads)
        c_new = torch.nan_to_num((r_new * r_new).sum(-1), nan=math.inf, posinf=math.inf)
        better = c_new < cost
        p = torch.where(better[:, None], p_new, p)
        r = torch.where(better[:, None], r_new, r)
        cost = torch.where(better, c_new, cost)
        mu = torch.where(better, (mu / 3).clamp_min(1e-12), mu * 4)
    return cost.reshape(len(starts), N).amin(0).clamp_min(0).sqrt()


# ------------------------------------------------------------------ Dirac stationary points
def _single_head(model: HeadModel, data: Dataset, w: torch.Tensor):
    """``E(delta_w)`` (10) and ``grad Phi(w; delta_w)`` (13), the single-head risk and its gradient, from
    one head pass."""
    r, _, g, _ = model.evaluate(data.X, data.Y, w[None], w.new_ones(1))
    return r, g[0]


class DiracPoint(NamedTuple):
    r"""A Dirac measure :math:`\delta_\omega` and what Theorems 7.5 and 7.8 ask of it.

    A named tuple returned by :func:`analyse_dirac`, with the fields below.

    Parameters
    ----------
    omega : Tensor (d_omega,)
        The head carrying the measure.
    risk : float
        :math:`\mathcal E(\delta_\omega)`, eq. (10).
    grad_norm : float
        :math:`|\nabla\Phi(\omega;\delta_\omega)|`, zero if and only if the measure is stationary (51).
    H0 : Tensor (d_omega, d_omega)
        :math:`H_0`, eq. (50).
    H_tr : Tensor (d_omega, d_omega)
        :math:`H_{tr}`, eq. (59).
    tangent : OrbitTangent
        The tangent space of the orbit of ``omega`` and its complement.
    eig_H0, eig_H_tr : Tensor (d_omega,)
        The eigenvalues of ``H0``, resp. ``H_tr``, on the whole space, ascending.
    eig_H0_perp, eig_H_tr_perp : Tensor (d_omega - r,)
        The eigenvalues of ``H0``, resp. ``H_tr``, on the orthogonal complement of the tangent
        space, ascending.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import analyse_dirac
    >>> model, data, _, _ = example()
    >>> point = analyse_dirac(model, data, torch.zeros(24, dtype=torch.float64))
    >>> point.grad_norm, round(point.risk, 4), point.tangent.dim  # omega = 0: stationary, risk log 4
    (0.0, 1.3863, 0)
    """

    omega: torch.Tensor  # (d_omega,)
    risk: float  # E(delta_omega), eq. (10)
    grad_norm: float  # |grad Phi(omega; delta_omega)|, zero iff stationary (51)
    H0: torch.Tensor  # eq. (50)
    H_tr: torch.Tensor  # eq. (59)
    tangent: OrbitTangent
    eig_H0: torch.Tensor  # ascending, whole space
    eig_H_tr: torch.Tensor
    eig_H0_perp: torch.Tensor  # ascending, on the orthogonal complement of the orbit's tangent space
    eig_H_tr_perp: torch.Tensor

    def null_dim(self, which: str = "H0", rtol: float = 1e-9) -> int:
        """Eigenvalues with ``|lambda| <= rtol * max|lambda|``: the numerical null-space dimension.

        The scale ``max|lambda|`` is the largest magnitude in both whole-space spectra,
        ``eig_H0`` and ``eig_H_tr``, whichever spectrum is counted.

        Parameters
        ----------
        which : str
            The spectrum counted: ``"H0"``, ``"H_tr"``, ``"H0_perp"`` or ``"H_tr_perp"``.
        rtol : float
            The relative threshold.

        Returns
        -------
        int
            The number of eigenvalues at most ``rtol`` times the scale in magnitude.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> from mfattn.analysis.stability import analyse_dirac
        >>> model, data, _, _ = example()
        >>> point = analyse_dirac(model, data, torch.zeros(24, dtype=torch.float64))
        >>> point.null_dim("H0"), point.null_dim("H_tr")  # at omega = 0: the W_Q, W_K block, 2 d_x d_k
        (12, 12)
        """
        e = {"H0": self.eig_H0, "H_tr": self.eig_H_tr, "H0_perp": self.eig_H0_perp,
             "H_tr_perp": self.eig_H_tr_perp}[which]
        scale = float(torch.cat([self.eig_H0.abs(), self.eig_H_tr.abs()]).max())
        return int((e.abs() <= rtol * scale).sum())


def analyse_dirac(model: HeadModel, data: Dataset, omega: torch.Tensor, *, rtol: float = 1e-10) -> DiracPoint:
    r"""Risk, stationarity residual, :math:`H_0` (50), :math:`H_{tr}` (59) and their spectra on the whole
    space and on the complement of the orbit's tangent space, at :math:`\delta_\omega`.

    Parameters
    ----------
    model : HeadModel
        The head model.
    data : Dataset
        The data over which the risk (10) and the Hessians are exact averages.
    omega : Tensor (d_omega,), the model's dtype
        The head carrying the Dirac measure.
    rtol : float
        Rank threshold of :func:`orbit_tangent`.

    Returns
    -------
    DiracPoint
        The risk, ``grad_norm``, both Hessians ``(d_omega, d_omega)``, the orbit's tangent space and
        the four spectra.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import analyse_dirac
    >>> model, data, _, _ = example()
    >>> point = analyse_dirac(model, data, torch.zeros(24, dtype=torch.float64))
    >>> point.H0.shape, point.eig_H0_perp.shape
    (torch.Size([24, 24]), torch.Size([24]))
    >>> torch.allclose(point.H0, point.H_tr)  # at omega = 0, H_tr = H_0
    True
    """
    model = _check_model(model)
    omega = model.check_omega(omega)
    H0 = model.hessian_first_variation(data, omega, omega[None])
    H_tr = model.translation_hessian(data, omega)
    tangent = orbit_tangent(model, omega, rtol=rtol)
    risk, grad = _single_head(model, data, omega)
    return DiracPoint(
        omega, float(risk), float(grad.norm()), H0, H_tr, tangent, spectrum(H0), spectrum(H_tr),
        spectrum(H0, tangent.complement), spectrum(H_tr, tangent.complement),
    )


def single_head_minimum(model: HeadModel, data: Dataset, *, generator: torch.Generator, n_starts: int = 4,
                        scale: float = 0.5, max_iter: int = 500, newton_steps: int = 8):
    r"""Minimise the single-head risk :math:`\omega\mapsto\mathcal E(\delta_\omega)` from ``n_starts``
    Gaussian starts (entries N(0, scale^2)); return ``(omega_best, risks)``.

    Its gradient is :math:`\nabla\Phi(\omega;\delta_\omega)` and its Hessian is :math:`H_{tr}` (59), so a
    minimiser is a Dirac stationary point (51) that is stable under translations. L-BFGS is followed
    by ``newton_steps`` Newton steps with the least-squares solve of ``H_tr`` (singular along the
    orbit), which bring the gradient to rounding level. ``risks`` lists the risk reached from every
    start: equal values from different starts suggest a single minimum modulo the symmetry. The
    returned minimiser is the :func:`canonical_point` of its orbit, so that its Hessians, and every
    rate measured at it, do not depend on where on the orbit the iterations ended.

    Parameters
    ----------
    model : HeadModel
        The head model.
    data : Dataset
        The data of the risk (10).
    generator : torch.Generator
        Seeds the starts (drawn in float64 on the CPU).
    n_starts : int
        Number of Gaussian starts.
    scale : float
        Standard deviation of the starts' entries.
    max_iter : int
        L-BFGS iterations per start.
    newton_steps : int
        Newton steps after L-BFGS (0 for none).

    Returns
    -------
    omega_best : Tensor (d_omega,), the model's dtype
        The canonical point of the first start whose risk is within rounding of the lowest.
    risks : list of float
        The risk reached from each start, in order.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import canonical_point, single_head_minimum
    >>> model, data, _, _ = example()
    >>> g = torch.Generator().manual_seed(0)
    >>> omega, risks = single_head_minimum(model, data, generator=g, n_starts=1, max_iter=5,
    ...                                    newton_steps=0)
    >>> omega.shape, len(risks)
    (torch.Size([24]), 1)
    >>> torch.allclose(canonical_point(model, omega), omega)
    True
    """
    return _minimise(model, data, generator=generator, n_starts=n_starts, scale=scale, max_iter=max_iter,
                     newton_steps=newton_steps, uniform=False)


def uniform_attention_point(model: HeadModel, data: Dataset, *, generator: torch.Generator, n_starts: int = 4,
                            scale: float = 0.5, max_iter: int = 500, newton_steps: int = 8):
    r"""A Dirac stationary point with :math:`\psi\neq0` that is a saddle: :math:`W_Q=W_K=0` (uniform causal
    attention) and :math:`(W_V,W_O)` minimising the single-head risk :math:`\mathcal E(\delta_\omega)` under
    that constraint; return ``(omega, risks)``.

    The scores :math:`XW_QW_K^\top X^\top/\sqrt{d_k}` are bilinear in :math:`(W_Q,W_K)`, so the gradient of the
    risk in :math:`W_Q` carries a factor :math:`W_K` and vice versa: both vanish at :math:`W_Q=W_K=0`, and a
    minimiser over :math:`(W_V,W_O)` there is a critical point of the whole single-head risk, that is a
    Dirac stationary point (51). Its features :math:`\psi=A_0XW_VW_OW_{out}` (:math:`A_0` the causal average)
    are nonzero, so the :math:`E[J^\top SJ]` term of :math:`H_{tr}` (59) is active in the
    :math:`(W_V,W_O)` directions; the :math:`(W_Q,W_K)` block of :math:`H_{tr}` is
    :math:`\left[\begin{smallmatrix}0&B\\B^\top&0\end{smallmatrix}\right]`, with eigenvalues :math:`\pm\sigma(B)`,
    so the point is a saddle as soon as :math:`B\neq0` (Theorem 7.8; chapter 05). The minimisation
    is that of :func:`single_head_minimum` restricted to :math:`(W_V,W_O)`; the result is the
    :func:`canonical_point` of its orbit.

    Parameters
    ----------
    model : HeadModel
        The head model.
    data : Dataset
        The data of the risk (10).
    generator : torch.Generator
        Seeds the starts of ``(W_V, W_O)`` (drawn in float64 on the CPU).
    n_starts : int
        Number of Gaussian starts.
    scale : float
        Standard deviation of the starts' entries.
    max_iter : int
        L-BFGS iterations per start.
    newton_steps : int
        Newton steps in ``(W_V, W_O)`` after L-BFGS (0 for none).

    Returns
    -------
    omega : Tensor (d_omega,), the model's dtype
        The canonical point, with ``W_Q = W_K = 0``, of the first start within rounding of the lowest risk.
    risks : list of float
        The risk reached from each start, in order.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import analyse_dirac, uniform_attention_point
    >>> model, data, _, _ = example()
    >>> omega, _ = uniform_attention_point(model, data, generator=torch.Generator().manual_seed(0),
    ...                                    n_starts=1)
    >>> W_Q, W_K, W_V, W_O = model.unpack(omega)
    >>> float(W_Q.abs().max()), float(W_K.abs().max()), float((W_V @ W_O).abs().max()) > 0
    (0.0, 0.0, True)
    >>> analyse_dirac(model, data, omega).grad_norm < 1e-12  # a Dirac stationary point (51)
    True
    """
    return _minimise(model, data, generator=generator, n_starts=n_starts, scale=scale, max_iter=max_iter,
                     newton_steps=newton_steps, uniform=True)


def _minimise(model, data, *, generator, n_starts, scale, max_iter, newton_steps, uniform):
    model = _check_model(model)
    data = model.check_data(data)
    check_positive(n_starts, "n_starts", integer=True)
    check_positive(scale, "scale")
    check_positive(max_iter, "max_iter", integer=True)
    check_positive(newton_steps, "newton_steps", integer=True, allow_zero=True)
    check_generator(generator)
    # the free coordinates: all of omega, or (W_V, W_O) with W_Q = W_K = 0 (layout W_Q, W_K, W_V, W_O)
    free = torch.ones(model.d_omega, dtype=torch.bool, device=model.device)
    if uniform:
        free[: 2 * model.d_x * model.d_k] = False

    def risk_grad(w):
        r, g = _single_head(model, data, w)
        return r, torch.where(free, g, torch.zeros_like(g))

    ends, risks = [], []
    for _ in range(n_starts):
        x = (scale * torch.randn(model.d_omega, generator=generator, dtype=torch.float64)).to(model.dtype)
        x = torch.where(free, x.to(model.device), torch.zeros_like(x, device=model.device)).requires_grad_(True)
        opt = torch.optim.LBFGS([x], lr=1.0, max_iter=max_iter, tolerance_grad=1e-12, tolerance_change=1e-16,
                                history_size=20, line_search_fn="strong_wolfe")

        def closure():
            r, g = risk_grad(x.detach())
            x.grad = g.clone()
            return r

        opt.step(closure)
        w = x.detach().clone()
        idx = free.nonzero()[:, 0]
        for _ in range(newton_steps):
            _, g = risk_grad(w)
            H = model.translation_hessian(data, w)[idx][:, idx]
            w[idx] = w[idx] - torch.linalg.lstsq(H, g[idx, None], rcond=1e-10).solution[:, 0]
        risks.append(float(risk_grad(w)[0]))
        ends.append(w)
    # the first start within rounding of the lowest risk (not the lowest by rounding), moved to the
    # canonical point of its orbit: which point of the orbit L-BFGS reaches depends on the CPU's kernels
    low = min(risks)
    best = next(w for r, w in zip(risks, ends) if r <= low + 1e-10 * max(1.0, abs(low)))
    return canonical_point(model, best), risks


def lifted_hessian(model: HeadModel, data: Dataset, heads: torch.Tensor) -> torch.Tensor:
    r"""The Hessian of the Lions lift :math:`\widetilde{\mathcal E}(W)=\mathcal E(\mathcal L(W))` of Remark 7.4 at
    the empirical lift of ``heads``, by automatic differentiation of the risk (10): ``(N d_omega, N d_omega)``.

    On the probability space of ``N`` equally likely states, :math:`W=(\omega_1,\dots,\omega_N)` has law
    :math:`\frac1N\sum_i\delta_{\omega_i}` and :math:`\mathbb E|W_\delta|^2=\frac1N\sum_i|\delta_i|^2`. The returned
    matrix is ``N`` times the Euclidean Hessian of :math:`(\omega_i)_i\mapsto\mathcal E(\frac1N\sum_i\delta_{\omega_i})`,
    so that its Rayleigh quotient is :math:`D^2\widetilde{\mathcal E}[W_\delta,W_\delta]/\mathbb E|W_\delta|^2`, the
    ratio that (48) bounds below by :math:`\kappa`. It uses the risk alone, not the engine's :math:`H_0` (50)
    or :math:`H_{tr}` (59), so it tests formula (49) independently: at a Dirac lift
    (all ``heads`` equal to :math:`\omega_*`), (49) splits :math:`W_\delta` into its mean, which sees
    :math:`H_{tr}`, and its centred part, which sees :math:`H_0`; for ``N >= 2`` the spectrum is that of
    :math:`H_{tr}` together with that of :math:`H_0` repeated ``N - 1`` times (chapter 05).

    Parameters
    ----------
    model : HeadModel
        The head model.
    data : Dataset
        The data of the risk (10).
    heads : Tensor (N, d_omega), the model's dtype
        The states of the lift, equally weighted.

    Returns
    -------
    Tensor (N * d_omega, N * d_omega)
        The lifted Hessian in the :math:`L^2` normalisation, symmetric; row ``i * d_omega + k`` is
        coordinate ``k`` of state ``i``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import lifted_hessian
    >>> model, data, heads, _ = example()
    >>> HL = lifted_hessian(model, data, heads[:1])  # one state: the Hessian of the single-head risk, H_tr
    >>> bool(torch.allclose(HL, model.translation_hessian(data, heads[0])))
    True
    >>> lifted_hessian(model, data, heads[:2]).shape
    torch.Size([48, 48])
    """
    model = _check_model(model)
    data = model.check_data(data)
    heads = model.check_heads(heads)
    N = heads.shape[0]
    weights = heads.new_full((N,), 1.0 / N)

    def risk(flat):
        return model.risk_and_dissipation(data.X, data.Y, flat.view(N, model.d_omega), weights, dissipation=False)[0]

    H = torch.autograd.functional.hessian(risk, heads.reshape(-1).detach())
    return N * 0.5 * (H + H.T)


def lifted_monotonicity(model: HeadModel, data: Dataset, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    r"""The monotonicity quotient of the lifted gradient between Dirac masses:
    :math:`\langle a-b,\nabla\Phi(a;\delta_a)-\nabla\Phi(b;\delta_b)\rangle/|a-b|^2`, one per pair ``(a_j, b_j)``.

    By Remark 7.4, :math:`D\widetilde{\mathcal E}(W)=\nabla\Phi(W;\mathcal L(W))`; for the deterministic lifts
    :math:`W\equiv a`, :math:`\bar W\equiv b` the left side of (47) divided by :math:`\mathbb E|W-\bar W|^2` is this
    quotient, which is also the quotient of (45) for :math:`\rho=\delta_a`, :math:`\bar\rho=\delta_b` (their only
    coupling). A negative value is a pair along which the risk is not displacement convex
    (Remark 7.3; chapter 05). One head pass per Dirac mass.

    Parameters
    ----------
    model : HeadModel
        The head model.
    data : Dataset
        The data of the risk (10).
    a, b : Tensor (P, d_omega), the model's dtype
        The pairs of heads, ``a[j] != b[j]``.

    Returns
    -------
    Tensor (P,)
        The quotients.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import lifted_monotonicity, zero_hessian
    >>> model, data, _, _ = example()
    >>> zh = zero_hessian(model, data)  # at the saddle 0, along its lowest direction: -sigma_1(C)
    >>> q = lifted_monotonicity(model, data, 1e-4 * zh.v_min[None], torch.zeros(1, model.d_omega, dtype=torch.float64))
    >>> bool(abs(q[0] / zh.eigenvalues[0] - 1) < 1e-6)
    True
    """
    model = _check_model(model)
    data = model.check_data(data)
    a = model.check_heads(a, "a")
    b = model.check_heads(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"b: expected the shape of a, {tuple(a.shape)}, got {tuple(b.shape)}")
    d = a - b
    dd = (d * d).sum(1)
    if not bool((dd > 0).all()):
        raise ValueError("b: every pair needs a[j] != b[j]")
    ga = torch.stack([_single_head(model, data, w)[1] for w in a])
    gb = torch.stack([_single_head(model, data, w)[1] for w in b])
    return (d * (ga - gb)).sum(1) / dd


class ZeroHessian(NamedTuple):
    r"""The closed-form Hessian of :math:`\Phi(\cdot;\rho)` at ``omega = 0`` (:func:`zero_hessian`).

    A named tuple with the fields below.

    Parameters
    ----------
    C : Tensor (d_x, d_x)
        The matrix of the bilinear form :math:`\Phi \approx \operatorname{tr}(W_V W_O C)` near ``omega = 0``.
    sigma : Tensor (d_x,)
        The singular values of ``C``, descending.
    eigenvalues : Tensor (d_omega,)
        The spectrum of :math:`H_0 = H_{tr}` at ``omega = 0``, ascending.
    v_min : Tensor (d_omega,)
        A unit eigenvector of the smallest eigenvalue, ``-sigma[0]``.

    Examples
    --------
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import zero_hessian
    >>> model, data, _, _ = example()
    >>> zh = zero_hessian(model, data)
    >>> zh.C.shape, zh.sigma.shape, zh.eigenvalues.shape, zh.v_min.shape
    (torch.Size([3, 3]), torch.Size([3]), torch.Size([24]), torch.Size([24]))
    """

    C: torch.Tensor  # (d_x, d_x) the matrix of the bilinear form Phi ~ tr(W_V W_O C) near omega = 0
    sigma: torch.Tensor  # (d_x,) singular values of C, descending
    eigenvalues: torch.Tensor  # (d_omega,) the closed-form spectrum of H0 = H_tr at omega = 0, ascending
    v_min: torch.Tensor  # (d_omega,) unit eigenvector of the smallest eigenvalue -sigma_1


def zero_hessian(model: HeadModel, data: Dataset, heads: torch.Tensor | None = None,
                 weights: torch.Tensor | None = None) -> ZeroHessian:
    r"""The Hessian of :math:`\Phi(\cdot;\rho)` at ``omega = 0`` in closed form, for the measure ``rho``
    of ``heads`` (default :math:`\delta_0`).

    At ``omega = 0`` every Jacobian :math:`\nabla\psi_l` vanishes (each block is multiplied by
    ``W_V W_O`` or by one of ``W_V, W_O``), so ``grad Phi(0; rho) = 0`` for every rho and
    :math:`H_{tr} = H_0`. The scores vanish to second order, the attention is the causal average
    :math:`\bar x_l = \frac1l\sum_{m\le l} x_m`, and

    .. math::

        \Phi(\omega;\rho) = \operatorname{tr}(W_V W_O C) + O(|\omega|^4),

        C = E_X\Big[\frac1L\sum_l W_{out}(\mathrm{softmax}(z^\rho_l)-Y_l)\,\bar x_l^{\top}\Big].

    Writing ``W_V W_O = sum_j v_j o_j^T`` splits the form into ``d_k`` copies of ``o^T C v``, whose
    Hessian ``[[0, C^T], [C, 0]]`` has eigenvalues ``+-sigma_m(C)``. The spectrum is therefore
    ``+-sigma_m(C)``, each ``d_k`` times, and ``2 d_x d_k`` zeros (the ``W_Q, W_K`` block).
    The most negative direction is ``W_V = q_1 e_1^T / sqrt 2``, ``W_O = -e_1 p_1^T / sqrt 2`` for
    the top singular pair ``C = sigma_1 p_1 q_1^T + ...``.

    Parameters
    ----------
    model : HeadModel
        The head model.
    data : Dataset
        The data over which ``C`` is an exact average.
    heads : Tensor (N, d_omega) or None
        The atoms of ``rho``, in the model's dtype; ``None`` for :math:`\delta_0`.
    weights : Tensor (N,) or None
        Their weights; ``None`` for uniform.

    Returns
    -------
    ZeroHessian
        ``C (d_x, d_x)``, its singular values ``sigma (d_x,)``, the spectrum ``(d_omega,)`` and the
        most negative direction ``v_min (d_omega,)``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import spectrum, zero_hessian
    >>> model, data, _, _ = example()
    >>> zh = zero_hessian(model, data)
    >>> zero = torch.zeros(24, dtype=torch.float64)
    >>> H = model.hessian_first_variation(data, zero, zero[None])  # numerical
    >>> torch.allclose(spectrum(H), zh.eigenvalues)
    True
    >>> bool(torch.isclose(zh.v_min @ H @ zh.v_min, -zh.sigma[0]))
    True
    """
    model = _check_model(model)
    data = model.check_data(data)
    if heads is None:
        heads = torch.zeros(1, model.d_omega, dtype=model.dtype, device=model.device)
    _, _, _, _, G = model.prepare(data, heads, weights)  # (softmax z - Y) W_out^T / (n L)
    steps = torch.arange(1, data.L + 1, dtype=model.dtype, device=model.device)
    xbar = data.X.cumsum(1) / steps[None, :, None]  # attention at zero scores, under the causal mask (5)
    C = torch.einsum("blx,bly->xy", G, xbar)
    P, S, Qh = torch.linalg.svd(C)
    zeros = torch.zeros(2 * model.d_x * model.d_k, dtype=model.dtype, device=model.device)
    eig = torch.cat([zeros, S.repeat(model.d_k), -S.repeat(model.d_k)]).sort().values
    k = model.d_k
    W_V = torch.zeros(model.d_x, k, dtype=model.dtype, device=model.device)
    W_O = torch.zeros(k, model.d_x, dtype=model.dtype, device=model.device)
    W_V[:, 0] = Qh[0] / 2 ** 0.5
    W_O[0, :] = -P[:, 0] / 2 ** 0.5
    v = model.pack(torch.zeros_like(W_V), torch.zeros_like(W_V), W_V, W_O)
    return ZeroHessian(C, S, eig, v)


# ----------------------------------------------------------------------- perturbed starts
def translate(model: HeadModel, omega: torch.Tensor, v: torch.Tensor, eps: float) -> torch.Tensor:
    r""":math:`\delta_{\omega+\varepsilon v}` for the unit vector along ``v``: heads (1, d_omega).

    Parameters
    ----------
    model : HeadModel
        The head model.
    omega : Tensor (d_omega,), the model's dtype
        The unperturbed head.
    v : Tensor (d_omega,), the model's dtype
        The direction (nonzero; normalised here).
    eps : float
        The distance moved, :math:`\varepsilon > 0`.

    Returns
    -------
    Tensor (1, d_omega)
        The single translated head.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> model, _, h, _ = example()
    >>> omega = h[0]
    >>> from mfattn.analysis.stability import dilation_direction, translate
    >>> heads = translate(model, omega, dilation_direction(model, omega), 0.1)
    >>> heads.shape, round(float((heads[0] - omega).norm()), 6)
    (torch.Size([1, 24]), 0.1)
    """
    omega = _check_model(model).check_omega(omega)
    check_positive(eps, "eps")
    return (omega + eps * _unit(model, v))[None]


def split(model: HeadModel, omega: torch.Tensor, v: torch.Tensor, eps: float) -> torch.Tensor:
    r""":math:`\frac12\delta_{\omega+\varepsilon v}+\frac12\delta_{\omega-\varepsilon v}` (unit ``v``): heads (2, d_omega),
    uniform weights.

    Parameters
    ----------
    model : HeadModel
        The head model.
    omega : Tensor (d_omega,), the model's dtype
        The unperturbed head.
    v : Tensor (d_omega,), the model's dtype
        The direction (nonzero; normalised here).
    eps : float
        The distance of each atom from ``omega``, :math:`\varepsilon > 0`.

    Returns
    -------
    Tensor (2, d_omega)
        The heads ``omega + eps u`` and ``omega - eps u``, ``u = v / |v|``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> model, _, h, _ = example()
    >>> omega = h[0]
    >>> from mfattn.analysis.stability import named_tangent, split
    >>> heads = split(model, omega, named_tangent(model, omega), 0.1)
    >>> heads.shape, torch.allclose(heads.mean(0), omega)
    (torch.Size([2, 24]), True)
    """
    omega = _check_model(model).check_omega(omega)
    check_positive(eps, "eps")
    u = _unit(model, v)
    return torch.stack([omega + eps * u, omega - eps * u])


def cloud(model: HeadModel, omega: torch.Tensor, r0: float, n: int, *, generator: torch.Generator) -> torch.Tensor:
    """``n`` heads drawn uniformly in the ball ``B(omega, r0)``: (n, d_omega), uniform weights.

    Parameters
    ----------
    model : HeadModel
        The head model.
    omega : Tensor (d_omega,), the model's dtype
        The centre of the ball.
    r0 : float
        The radius.
    n : int
        The number of heads.
    generator : torch.Generator
        Seeds the draw (made in float64 on the CPU, then moved to the dtype and device of ``omega``).

    Returns
    -------
    Tensor (n, d_omega)
        The heads.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> model, _, h, _ = example()
    >>> omega = h[0]
    >>> from mfattn.analysis.stability import cloud
    >>> heads = cloud(model, omega, 0.2, 5, generator=torch.Generator().manual_seed(1))
    >>> heads.shape, bool(((heads - omega).norm(dim=1) <= 0.2).all())
    (torch.Size([5, 24]), True)
    """
    omega = _check_model(model).check_omega(omega)
    check_positive(r0, "r0")
    check_positive(n, "n", integer=True)
    check_generator(generator)
    d = model.d_omega
    u = torch.randn(n, d, generator=generator, dtype=torch.float64)
    u = u / u.norm(dim=1, keepdim=True)
    rad = r0 * torch.rand(n, 1, generator=generator, dtype=torch.float64) ** (1.0 / d)
    return omega + (rad * u).to(dtype=omega.dtype, device=omega.device)


# ------------------------------------------------------------------------------ the runs
def monotonicity_ratio(model: HeadModel, data: Dataset, heads: torch.Tensor, omega_star: torch.Tensor,
                       weights: torch.Tensor | None = None) -> float:
    r"""The ratio of the two sides of (45) for the measure ``rho`` of ``heads`` and
    :math:`\bar\rho=\delta_{\omega_*}` (whose only coupling with rho is the product):

    .. math:: \kappa(\rho) = \frac{\int\langle\omega-\omega_*,\nabla\Phi(\omega;\rho)\rangle\rho(d\omega)}
                                  {\int|\omega-\omega_*|^2\rho(d\omega)},

    using :math:`\nabla\Phi(\omega_*;\delta_{\omega_*}) = 0`. Along the flow (21),
    :math:`\frac{d}{dt}W_2^2(\rho_t,\delta_{\omega_*}) = -4\zeta(t)\kappa(\rho_t)W_2^2`, so (45) on a
    stretch of the path is ``kappa(rho_t) >= kappa`` there.

    Parameters
    ----------
    model : HeadModel
        The head model.
    data : Dataset
        The data of the expectations in :math:`\nabla\Phi` (13).
    heads : Tensor (N, d_omega), the model's dtype
        The atoms of ``rho``.
    omega_star : Tensor (d_omega,), the model's dtype
        The Dirac stationary point (only its position enters; stationarity is assumed).
    weights : Tensor (N,) or None
        The weights of ``rho``; ``None`` for uniform.

    Returns
    -------
    float
        :math:`\kappa(\rho)`.

    Raises
    ------
    ValueError
        If every atom sits at ``omega_star`` (the denominator vanishes).

    Examples
    --------
    A small translation along :attr:`ZeroHessian.v_min` at the saddle ``omega = 0`` gives
    :math:`\kappa \approx v^\top H_{tr} v = -\sigma_1`:

    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import monotonicity_ratio, translate, zero_hessian
    >>> model, data, _, _ = example()
    >>> zh = zero_hessian(model, data)
    >>> zero = torch.zeros(24, dtype=torch.float64)
    >>> heads = translate(model, zero, zh.v_min, 1e-3)
    >>> kappa = monotonicity_ratio(model, data, heads, zero)
    >>> round(kappa / -float(zh.sigma[0]), 3)
    1.0
    """
    model = _check_model(model)
    omega_star = model.check_omega(omega_star)
    heads, weights = model.check_measure(heads, weights)
    g = model.grad_first_variation(data, heads, heads, weights)
    d = heads - omega_star
    den = float((weights * (d * d).sum(-1)).sum())
    if den == 0.0:
        raise ValueError("heads: the measure equals delta_{omega_star}; the ratio is undefined")
    return float((weights * (d * g).sum(-1)).sum()) / den


class PerturbationRun(NamedTuple):
    r"""A run of the reference flow (21) from a perturbed Dirac measure (:func:`perturbation_run`).

    A named tuple with the fields below, each with one entry per recording time, ``R`` in all.

    Parameters
    ----------
    times : ndarray (R,)
        The recording times.
    zeta : ndarray (R,)
        The learning rate :math:`\zeta(t)`.
    zeta_integral : ndarray (R,)
        :math:`\int_0^t\zeta`.
    heads : Tensor (R, N, d_omega)
        The heads (uniform weights).
    risk : ndarray (R,)
        :math:`\mathcal E(\rho_t)`.
    w2 : ndarray (R,)
        :math:`W_2(\rho_t, \delta_{\omega_*})`.
    orbit : ndarray (R,)
        The W2 distance of :math:`\rho_t` to the measures carried by the orbit of ``omega_star``
        (NaN when not computed).
    kappa : ndarray (R,)
        The monotonicity ratio of (45), :func:`monotonicity_ratio`.
    spread : ndarray (R,)
        The largest distance between two heads.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import perturbation_run, translate, zero_hessian
    >>> model, data, _, _ = example()
    >>> zero = torch.zeros(model.d_omega, dtype=torch.float64)
    >>> heads0 = translate(model, zero, zero_hessian(model, data).v_min, 0.01)
    >>> run = perturbation_run(model, data, heads0, zero, T=0.2, step=0.05, record_every=0.05, orbit=False)
    >>> run.heads.shape, run.w2.shape
    (torch.Size([5, 1, 24]), (5,))
    >>> bool(run.w2[-1] > run.w2[0])  # omega = 0 is a saddle: the head moves away
    True
    """

    times: np.ndarray  # (R,)
    zeta: np.ndarray  # (R,) zeta(t)
    zeta_integral: np.ndarray  # (R,) int_0^t zeta
    heads: torch.Tensor  # (R, N, d_omega)
    risk: np.ndarray  # (R,) E(rho_t)
    w2: np.ndarray  # (R,) W2(rho_t, delta_{omega*})
    orbit: np.ndarray  # (R,) W2 distance of rho_t to the measures carried by the orbit of omega*
    kappa: np.ndarray  # (R,) the monotonicity ratio of (45), :func:`monotonicity_ratio`
    spread: np.ndarray  # (R,) largest distance between two heads

    def as_dict(self) -> dict:
        """JSON values (for :func:`mfattn.companion.sweep.run_sweep`, which keeps finished runs on disk).

        Returns
        -------
        dict
            ``{field: nested list of floats}`` for every field.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> from mfattn.analysis.stability import perturbation_run, translate, zero_hessian
        >>> model, data, _, _ = example()
        >>> zero = torch.zeros(model.d_omega, dtype=torch.float64)
        >>> heads0 = translate(model, zero, zero_hessian(model, data).v_min, 0.01)
        >>> run = perturbation_run(model, data, heads0, zero, T=0.2, step=0.05, record_every=0.05, orbit=False)
        >>> d = run.as_dict()
        >>> list(d)[:3], d["times"]
        (['times', 'zeta', 'zeta_integral'], [0.0, 0.05, 0.1, 0.15, 0.2])
        """
        return {k: v.tolist() for k, v in self._asdict().items()}

    @classmethod
    def from_dict(cls, d: dict, *, dtype=torch.float64, device="cpu") -> "PerturbationRun":
        """Inverse of :meth:`as_dict`.

        Parameters
        ----------
        d : dict
            The output of :meth:`as_dict` (e.g. read back from JSON).
        dtype : torch.dtype
            The dtype of ``heads`` (the other fields are float64 arrays).
        device : str or torch.device
            The device of ``heads``.

        Returns
        -------
        PerturbationRun
            The run.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> from mfattn.analysis.stability import perturbation_run, translate, zero_hessian
        >>> model, data, _, _ = example()
        >>> zero = torch.zeros(model.d_omega, dtype=torch.float64)
        >>> heads0 = translate(model, zero, zero_hessian(model, data).v_min, 0.01)
        >>> run = perturbation_run(model, data, heads0, zero, T=0.2, step=0.05, record_every=0.05, orbit=False)
        >>> from mfattn.analysis.stability import PerturbationRun
        >>> back = PerturbationRun.from_dict(run.as_dict())
        >>> torch.equal(back.heads, run.heads), bool((back.w2 == run.w2).all())
        (True, True)
        """
        return cls(**{k: (torch.tensor(d[k], dtype=dtype, device=device) if k == "heads"
                          else np.asarray(d[k], dtype=np.float64)) for k in cls._fields})

    def gronwall(self, every: int = 1):
        r"""``(times, W2(0) exp(-2 int_0^t zeta kappa))`` on every ``every``-th recording, the integral by the
        trapezoidal rule on those recordings.

        For a Dirac target the coupling is the product, and (46) holds as an equality with the path's
        ratio :math:`\kappa(\rho_t)` in place of :math:`\kappa`:
        :math:`W_2(\rho_t)=W_2(\rho_0)e^{-2\int_0^t\zeta\kappa(\rho_s)ds}`. The difference between
        ``every = 1`` and ``every = 2`` estimates the quadrature error (three times it, by Richardson).

        Parameters
        ----------
        every : int
            Use every ``every``-th recording (a positive integer).

        Returns
        -------
        times : ndarray (R',)
            The recording times used, ``R' = ceil(R / every)``.
        w2 : ndarray (R',)
            The predicted W2 distance at those times.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> from mfattn.analysis.stability import perturbation_run, translate, zero_hessian
        >>> model, data, _, _ = example()
        >>> zero = torch.zeros(model.d_omega, dtype=torch.float64)
        >>> heads0 = translate(model, zero, zero_hessian(model, data).v_min, 0.01)
        >>> run = perturbation_run(model, data, heads0, zero, T=0.2, step=0.05, record_every=0.05, orbit=False)
        >>> import numpy as np
        >>> t, w2 = run.gronwall()
        >>> np.allclose(w2, run.w2, rtol=1e-6)  # an equality up to the quadrature error
        True
        >>> run.gronwall(every=2)[0].tolist()
        [0.0, 0.1, 0.2]
        """
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every: expected a positive integer, got {every!r}")
        t, f = self.times[::every], (self.zeta * self.kappa)[::every]
        integral = np.concatenate([[0.0], np.cumsum(0.5 * (f[1:] + f[:-1]) * np.diff(t))])
        return t, self.w2[0] * np.exp(-2.0 * integral)

    def bound(self) -> np.ndarray:
        """Theorem 7.1's bound ``W2(0) exp(-2 kappa_min(t) int_0^t zeta)`` with ``kappa_min(t)`` the smallest
        ratio met on ``[0, t]`` (the strong monotonicity (45) holds there with that constant).

        Returns
        -------
        ndarray (R,)
            The bound at every recording time.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> from mfattn.analysis.stability import perturbation_run, translate, zero_hessian
        >>> model, data, _, _ = example()
        >>> zero = torch.zeros(model.d_omega, dtype=torch.float64)
        >>> heads0 = translate(model, zero, zero_hessian(model, data).v_min, 0.01)
        >>> run = perturbation_run(model, data, heads0, zero, T=0.2, step=0.05, record_every=0.05, orbit=False)
        >>> b = run.bound()
        >>> b.shape, bool(b[0] == run.w2[0])
        ((5,), True)
        """
        kmin = np.minimum.accumulate(self.kappa)
        return self.w2[0] * np.exp(-2.0 * kmin * self.zeta_integral)


    def gronwall_deviation(self) -> tuple[float, float]:
        r"""How far the run is from the equality form of (46), and the quadrature error's estimate:
        ``max |log W2 - log gronwall(1)|`` and ``max |log gronwall(1) - log gronwall(2)|`` (on every
        second recording). Richardson: for a smooth path the first is a third of the second.

        Returns
        -------
        (float, float)
            The largest deviation on the recording grid and its change from the half grid.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> from mfattn.analysis.stability import perturbation_run, translate, zero_hessian
        >>> model, data, _, _ = example()
        >>> zero = torch.zeros(model.d_omega, dtype=torch.float64)
        >>> heads0 = translate(model, zero, zero_hessian(model, data).v_min, 0.01)
        >>> run = perturbation_run(model, data, heads0, zero, T=0.2, step=0.05, record_every=0.05, orbit=False)
        >>> dev, dev_half = run.gronwall_deviation()
        >>> dev < dev_half < 1e-4
        True
        """
        _, g1 = self.gronwall(1)
        _, g2 = self.gronwall(2)
        return float(np.max(np.abs(np.log(g1 / self.w2)))), float(np.max(np.abs(np.log(g1[::2] / g2))))

def perturbation_run(model: HeadModel, data: Dataset, heads0: torch.Tensor, omega_star: torch.Tensor, *,
                     T: float, step: float, record_every: float, zeta=1.0, orbit: bool = True,
                     progress: bool = False) -> PerturbationRun:
    r"""Run the reference flow (21) from the (uniform) perturbed measure ``heads0`` and measure, at every
    recording time, the W2 distance to :math:`\delta_{\omega_*}`, the distance to the orbit of
    ``omega_star`` (:func:`orbit_distance`; skipped with ``orbit=False``), the ratio of (45) and the
    spread of the heads.

    Parameters
    ----------
    model : HeadModel
        The head model.
    data : Dataset
        The data of the risk (10).
    heads0 : Tensor (N, d_omega), the model's dtype
        The initial heads, e.g. from :func:`translate`, :func:`split` or :func:`cloud`.
    omega_star : Tensor (d_omega,), the model's dtype
        The Dirac stationary point the distances are measured to.
    T : float
        The final time, a whole number of ``record_every``.
    step : float
        The integrator's step; ``record_every`` is a whole number of steps.
    record_every : float
        The interval between recordings.
    zeta : float, profile or callable
        The learning-rate profile :math:`\zeta(t)` (see :func:`mfattn.flows.integrate.as_profile`).
    orbit : bool
        Whether to compute the distance to the orbit (the costliest measurement).
    progress : bool
        Whether to show a progress bar.

    Returns
    -------
    PerturbationRun
        The heads and the measurements at the ``R = T / record_every + 1`` recording times.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import perturbation_run, translate, zero_hessian
    >>> model, data, _, _ = example()
    >>> zero = torch.zeros(model.d_omega, dtype=torch.float64)
    >>> heads0 = translate(model, zero, zero_hessian(model, data).v_min, 0.01)
    >>> run = perturbation_run(model, data, heads0, zero, T=0.2, step=0.05, record_every=0.05, orbit=False)
    >>> run.times.shape, run.heads.shape
    ((5,), torch.Size([5, 1, 24]))
    >>> bool((run.kappa < 0).all())  # along v_min the ratio of (45) is negative
    True
    """
    model = _check_model(model)
    omega_star = model.check_omega(omega_star)
    flow = reference_flow(model, data, heads0, T=T, step=step, record_every=record_every, zeta=zeta,
                          keep_stages=False, progress=progress)
    P = flow.population  # (R, N, d)
    prof = as_profile(zeta)
    times = flow.times.numpy()
    d2 = ((P - omega_star) ** 2).sum(-1).mean(-1)
    w2 = d2.sqrt().cpu().numpy()
    kappa = np.array([monotonicity_ratio(model, data, P[j], omega_star) for j in range(P.shape[0])])
    if orbit:
        R, N, d = P.shape
        dist = orbit_distance(model, omega_star, P.reshape(R * N, d)).reshape(R, N)
        orb = (dist ** 2).mean(-1).sqrt().cpu().numpy()
    else:
        orb = np.full(len(times), np.nan)
    spread = torch.cdist(P, P).amax(dim=(1, 2)).cpu().numpy()
    return PerturbationRun(times, np.array([prof(float(t)) for t in times]),
                           np.array([prof.integral(float(t)) for t in times]), P,
                           flow.risk.numpy(), w2, orb, kappa, spread)


def predicted_rate(H: torch.Tensor, v: torch.Tensor, eps: float, zeta0: float = 1.0) -> float:
    r"""``-4 zeta(0) eps^2 v^T H v`` for the unit vector along ``v``: the initial rate of change of
    :math:`W_2^2(\rho_t,\delta_{\omega_*})`.

    With ``H = H_tr`` this is the translation rate of Theorem 7.8 (start
    :math:`\delta_{\omega_*+\varepsilon v}`, remainder :math:`O(\varepsilon^3)`). With ``H = H_0`` it is the
    rate of the symmetric split :math:`\frac12\delta_{\omega_*+\varepsilon v}+\frac12\delta_{\omega_*-\varepsilon v}`:
    its logits move by :math:`O(\varepsilon^2)` only (the first-order terms cancel), the measure term of
    :math:`\nabla\Phi` enters at that order at both atoms alike and drops from the odd combination, and so
    does the even Taylor term, leaving :math:`\varepsilon H_0 v` and a remainder :math:`O(\varepsilon^4)`.

    Parameters
    ----------
    H : Tensor (d_omega, d_omega)
        The Hessian, :math:`H_{tr}` (59) or :math:`H_0` (50).
    v : Tensor (d_omega,), the dtype of ``H``
        The direction of the perturbation (normalised here).
    eps : float
        The size of the perturbation, :math:`\varepsilon > 0`.
    zeta0 : float
        The learning rate at ``t = 0``.

    Returns
    -------
    float
        The predicted :math:`\frac{d}{dt}W_2^2` at ``t = 0``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.stability import predicted_rate
    >>> H = torch.diag(torch.tensor([-1.0, 2.0], dtype=torch.float64))
    >>> v = torch.tensor([3.0, 0.0], dtype=torch.float64)
    >>> round(predicted_rate(H, v, 0.1), 6)  # -4 * 0.1**2 * (-1)
    0.04
    """
    check_tensor(H, "H", ndim=2)
    check_positive(eps, "eps")
    check_positive(zeta0, "zeta0")
    check_tensor(v, "v", ndim=1, dtype=H.dtype)
    u = v / v.norm()
    return float(-4.0 * zeta0 * eps ** 2 * (u @ H @ u))


def initial_rate(times, values, *, points: int = 5) -> float:
    """``d/dt values`` at ``t = times[0]``: the derivative of the quadratic least-squares fit through
    the first ``points`` recordings (error ``O(dt^2)`` in the recording interval ``dt``).

    Parameters
    ----------
    times : array_like (R,)
        The recording times.
    values : array_like (R,)
        The values recorded at those times.
    points : int
        The number of leading recordings fitted, in ``[3, R]``.

    Returns
    -------
    float
        The fitted derivative at ``times[0]``.

    Examples
    --------
    >>> from mfattn.analysis.stability import initial_rate
    >>> t = [0.0, 0.1, 0.2, 0.3, 0.4]
    >>> round(initial_rate(t, [1 + 2 * s + s * s for s in t]), 6)
    2.0

    A translation along :attr:`ZeroHessian.v_min` at the saddle ``omega = 0`` grows as
    :func:`predicted_rate` says:

    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import perturbation_run, predicted_rate, translate, zero_hessian
    >>> model, data, _, _ = example()
    >>> zh, zero = zero_hessian(model, data), torch.zeros(model.d_omega, dtype=torch.float64)
    >>> heads0 = translate(model, zero, zh.v_min, 0.01)
    >>> run = perturbation_run(model, data, heads0, zero, T=0.2, step=0.05, record_every=0.05, orbit=False)
    >>> H = model.translation_hessian(data, zero)
    >>> rate = initial_rate(run.times, run.w2 ** 2)
    >>> abs(rate / predicted_rate(H, zh.v_min, 0.01) - 1) < 0.01
    True
    """
    t = np.asarray(times, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    if t.ndim != 1 or y.shape != t.shape:
        raise ValueError("values: expected the same 1-d shape as times")
    if not isinstance(points, int) or points < 3 or points > len(t):
        raise ValueError(f"points: expected an integer in [3, {len(t)}], got {points!r}")
    c = np.polyfit(t[:points] - t[0], y[:points], 2)
    return float(c[1])


class Perturbation(NamedTuple):
    r"""A perturbed start and the run of the reference flow (21) to make from it: the arguments of
    :func:`perturbation_run` with the size of the perturbation (chapter 05 keys its saved runs by it).

    A named tuple with the fields below.

    Parameters
    ----------
    heads0 : Tensor (N, d_omega)
        The initial heads (:func:`translate`, :func:`split`, :func:`cloud`).
    centre : Tensor (d_omega,)
        The Dirac stationary point the distances are measured to.
    T : float
        The horizon.
    step : float
        The integrator's step.
    record_every : float
        The interval between recordings.
    orbit : bool
        Whether to measure the distance to the orbit.
    size : float
        The size of the perturbation (:math:`\varepsilon` or the radius of a cloud).

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.stability import Perturbation
    >>> zero = torch.zeros(24, dtype=torch.float64)
    >>> p = Perturbation.for_rate(zero[None] + 0.01, zero, 0.01, dt=1e-3)
    >>> p.T, p.step, p.record_every, p.orbit
    (0.006, 0.001, 0.001, False)
    """

    heads0: torch.Tensor
    centre: torch.Tensor
    T: float
    step: float
    record_every: float
    orbit: bool
    size: float

    @classmethod
    def for_rate(cls, heads0: torch.Tensor, centre: torch.Tensor, size: float, dt: float) -> "Perturbation":
        """The short run from which :func:`compare_rate` fits the initial rate of
        :math:`W_2^2(\\rho_t,\\delta_{\\mathrm{centre}})`: six steps of ``dt``, each recorded, no orbit distance.

        Parameters
        ----------
        heads0 : Tensor (N, d_omega)
            The initial heads.
        centre : Tensor (d_omega,)
            The Dirac stationary point.
        size : float
            The size of the perturbation.
        dt : float
            The step and recording interval, > 0.

        Returns
        -------
        Perturbation
            ``(heads0, centre, 6 dt, dt, dt, False, size)``.

        Raises
        ------
        ValueError
            If ``dt`` is not positive.

        Examples
        --------
        >>> import torch
        >>> from mfattn.analysis.stability import Perturbation
        >>> zero = torch.zeros(24, dtype=torch.float64)
        >>> Perturbation.for_rate(zero[None], zero, 0.1, dt=0.5).T
        3.0
        """
        check_positive(dt, "dt")
        return cls(heads0, centre, 6 * dt, dt, dt, False, size)


class RateComparison(NamedTuple):
    r"""The initial rate of :math:`W_2^2(\rho_t,\delta_{\omega_*})` measured on a run, against the
    prediction from one Hessian and from a control Hessian (:func:`compare_rate`).

    A named tuple with the fields below; ``relative`` and ``control_relative`` are
    ``measured / predicted - 1`` and ``measured / control - 1``.

    Parameters
    ----------
    measured : float
        The fitted :math:`\frac{d}{dt}W_2^2` at ``t = 0`` (:func:`initial_rate`).
    predicted : float
        :func:`predicted_rate` with the Hessian under test.
    control : float
        :func:`predicted_rate` with the control Hessian (NaN without one).

    Examples
    --------
    >>> from mfattn.analysis.stability import RateComparison
    >>> r = RateComparison(1.01, 1.0, 2.0)
    >>> round(r.relative, 6), round(r.control_relative, 6)
    (0.01, -0.495)
    """

    measured: float
    predicted: float
    control: float

    @property
    def relative(self) -> float:
        """``measured / predicted - 1``."""
        return self.measured / self.predicted - 1

    @property
    def control_relative(self) -> float:
        """``measured / control - 1``."""
        return self.measured / self.control - 1


def compare_rate(run: PerturbationRun, v: torch.Tensor, eps: float, H: torch.Tensor, *,
                 control: torch.Tensor | None = None, zeta0: float = 1.0, points: int = 5) -> RateComparison:
    r"""The initial rate of :math:`W_2^2(\rho_t,\delta_{\omega_*})` on ``run`` (a quadratic fit through its
    first ``points`` recordings, :func:`initial_rate`) against ``-4 zeta0 eps^2 v^T H v``
    (:func:`predicted_rate`), and against the same with a control Hessian: Theorem 7.8's rate with
    ``H = H_tr`` (59), the split's with ``H = H0`` (50), each the other's control.

    Parameters
    ----------
    run : PerturbationRun
        The run from the perturbed start (e.g. :meth:`Perturbation.for_rate`).
    v : Tensor (d_omega,)
        The direction of the perturbation.
    eps : float
        Its size, > 0.
    H : Tensor (d_omega, d_omega)
        The Hessian under test.
    control : Tensor (d_omega, d_omega) or None
        The control Hessian; ``None`` for none.
    zeta0 : float, default 1.0
        The learning rate at ``t = 0``.
    points : int, default 5
        The recordings fitted.

    Returns
    -------
    RateComparison
        The measured rate, the prediction and the control's prediction.

    Raises
    ------
    ValueError
        If ``run`` is not a :class:`PerturbationRun`, or as :func:`predicted_rate` and
        :func:`initial_rate` raise.

    Examples
    --------
    >>> import numpy as np, torch
    >>> from mfattn.analysis.stability import PerturbationRun, compare_rate
    >>> t = np.linspace(0.0, 0.4, 5)
    >>> w2 = np.sqrt(0.01 + 0.04 * t)  # d/dt W2^2 = 0.04
    >>> nan = np.full(5, np.nan)
    >>> run = PerturbationRun(t, nan, nan, torch.zeros(5, 1, 2), nan, w2, nan, nan, nan)
    >>> H, H_ctl = torch.diag(torch.tensor([-1.0, 1.0])), torch.eye(2)
    >>> r = compare_rate(run, torch.tensor([1.0, 0.0]), 0.1, H, control=H_ctl)
    >>> round(r.relative, 9), round(r.control_relative, 9)  # -4 eps^2 (-1) = 0.04; the control -0.04
    (0.0, -2.0)
    """
    if not isinstance(run, PerturbationRun):
        raise ValueError(f"run: expected a PerturbationRun, got {type(run).__name__}")
    measured = initial_rate(run.times, run.w2 ** 2, points=points)
    ctl = math.nan if control is None else predicted_rate(control, v, eps, zeta0)
    return RateComparison(measured, predicted_rate(H, v, eps, zeta0), ctl)


# --------------------------------------------------------------- what chapter 05 measures
class ZeroSaddle(NamedTuple):
    r"""The saddle ``omega = 0``: its closed-form Hessian against autograd, and its stationarity for
    random measures (:func:`zero_saddle`).

    A named tuple with the fields below.

    Parameters
    ----------
    closed_form : ZeroHessian
        :func:`zero_hessian` at :math:`\delta_0`: ``C``, its singular values, the spectrum
        :math:`\pm\sigma_m(C)` (each ``d_k`` times, with ``2 d_x d_k`` zeros) and ``v_min``.
    H_tr : Tensor (d_omega, d_omega)
        :math:`H_{tr}(0)` (59), from the engine's autograd; equal to :math:`H_0(0)` since :math:`\psi(X;0)=0`.
    eigenvalues : Tensor (d_omega,)
        Its eigenvalues, ascending.
    spectrum_error : float
        ``max |eigenvalues - closed_form.eigenvalues|``.
    scale : float
        ``max |eigenvalues|``, the size the error is measured against.
    max_grad : float
        :math:`\max|\nabla\Phi(0;\rho)|` over the random measures ``rho`` (zero: every term of (13)
        carries a factor ``W_V``, ``W_O`` or ``W_V W_O``).

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import zero_saddle
    >>> model, data, _, _ = example()
    >>> z = zero_saddle(model, data, generators=[torch.Generator().manual_seed(k) for k in range(2)])
    >>> z.max_grad, z.spectrum_error < 1e-12 * z.scale
    (0.0, True)
    """

    closed_form: ZeroHessian
    H_tr: torch.Tensor  # (d_omega, d_omega) autograd H_tr(0) = H0(0)
    eigenvalues: torch.Tensor  # (d_omega,) its spectrum, ascending
    spectrum_error: float  # max |autograd - closed form|
    scale: float  # max |eigenvalue|
    max_grad: float  # max |grad Phi(0; rho)| over the random measures


def zero_saddle(model: HeadModel, data: Dataset, *, generators, n_heads: int = 8, scale: float = 0.7) -> ZeroSaddle:
    r"""The closed form of :math:`H_{tr}(0)=H_0(0)` (:func:`zero_hessian`) against the engine's autograd
    Hessian (59), and :math:`\nabla\Phi(0;\rho)` (13) for one random measure ``rho`` per generator.

    Each measure has ``n_heads`` heads with independent :math:`N(0,\mathrm{scale}^2)` entries, drawn in
    float64 on the CPU from its generator (chapter 05 passes one named stream per measure).

    Parameters
    ----------
    model : HeadModel
        The head model.
    data : Dataset
        The data of the risk (10).
    generators : sequence of torch.Generator
        One per random measure, at least one.
    n_heads : int, default 8
        Heads of each random measure.
    scale : float, default 0.7
        Standard deviation of their entries.

    Returns
    -------
    ZeroSaddle
        The closed form, the autograd Hessian and spectrum, their largest difference, the spectrum's
        scale and the largest gradient entry over the measures.

    Raises
    ------
    ValueError
        If ``generators`` is empty or holds something else than generators, or ``n_heads`` or ``scale``
        is not positive.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import zero_saddle
    >>> model, data, _, _ = example()
    >>> z = zero_saddle(model, data, generators=[torch.Generator().manual_seed(0)], n_heads=3)
    >>> z.eigenvalues.shape, round(float(z.eigenvalues[0] + z.closed_form.sigma[0]), 12)
    (torch.Size([24]), 0.0)
    """
    model = _check_model(model)
    generators = list(generators)
    if not generators:
        raise ValueError("generators: expected at least one torch.Generator")
    for g in generators:
        check_generator(g)
    check_positive(n_heads, "n_heads", integer=True)
    check_positive(scale, "scale")
    zero = torch.zeros(model.d_omega, dtype=model.dtype, device=model.device)
    closed = zero_hessian(model, data)
    H_tr = model.translation_hessian(data, zero)
    eig = torch.linalg.eigvalsh(H_tr)
    grads = [float(model.grad_first_variation(
        data, zero[None], scale * torch.randn(n_heads, model.d_omega, generator=g, dtype=torch.float64)
        .to(model.device)).abs().max()) for g in generators]  # one pass per measure, batched over its heads
    return ZeroSaddle(closed, H_tr, eig, float((eig - closed.eigenvalues).abs().max()), float(eig.abs().max()),
                      max(grads))


class DiracSymmetry(NamedTuple):
    r"""What the symmetry of a head and the linearity of :math:`\Phi` in ``W_V`` and ``W_O`` do to the
    Hessians at a Dirac point (:func:`symmetry_residuals`).

    A named tuple with the fields below; "relative" divides by the largest entry of the Hessian and
    the norm of the vector.

    Parameters
    ----------
    generator_residual : float
        :math:`\max_g |Hg| / (\max|H| \max_g|g|)` over the generators ``g`` (:func:`orbit_generators`),
        the larger of ``H = H0`` and ``H = H_tr``: zero at a stationary point (the orbit is in both null
        spaces).
    dilation_residual : float
        ``|H0 d| / (max|H0| |d|)`` for the dilation ``d`` (:func:`dilation_direction`): zero at a
        stationary point.
    B : Tensor (d_x d_k, d_x d_k)
        The ``(W_V, W_O)`` block of :math:`H_0`.
    sigma_B : float
        Its largest singular value: by interlacing, :math:`\lambda_{\min}(H_0)\le-\sigma_1(B)`.
    vo_diagonal : float
        The largest entry of the ``W_V``-``W_V`` and ``W_O``-``W_O`` blocks of :math:`H_0`: zero, since
        :math:`\Phi` is linear in each.
    n_negative : int
        Eigenvalues of :math:`H_0` on the orbit's complement below ``-1e-9 max|eig H0|``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import analyse_dirac, symmetry_residuals
    >>> model, data, heads, _ = example()
    >>> s = symmetry_residuals(model, analyse_dirac(model, data, heads[0]))
    >>> s.B.shape, s.vo_diagonal < 1e-12
    (torch.Size([6, 6]), True)
    """

    generator_residual: float
    dilation_residual: float
    B: torch.Tensor  # (d_x d_k, d_x d_k) the (W_V, W_O) block of H0
    sigma_B: float
    vo_diagonal: float
    n_negative: int


def symmetry_residuals(model: HeadModel, point: DiracPoint) -> DiracSymmetry:
    r"""The three consequences of the symmetry at :math:`\delta_\omega` (chapter 05), measured: the
    orbit's generators and the dilation against :math:`H_0` (50) and :math:`H_{tr}` (59), the
    ``(W_V, W_O)`` block ``B`` of :math:`H_0` with its vanishing diagonal blocks, and the negative
    eigenvalues of :math:`H_0` on the orbit's complement.

    Parameters
    ----------
    model : HeadModel
        The head model.
    point : DiracPoint
        The Dirac point, from :func:`analyse_dirac` with this model.

    Returns
    -------
    DiracSymmetry
        The relative residuals, ``B``, its top singular value, the largest diagonal-block entry and the
        count of negative eigenvalues.

    Raises
    ------
    ValueError
        If ``point`` is not a :class:`DiracPoint` of this model's size.

    Examples
    --------
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import analyse_dirac, symmetry_residuals
    >>> model, data, heads, _ = example()
    >>> s = symmetry_residuals(model, analyse_dirac(model, data, heads[0]))
    >>> s.generator_residual > 1e-6  # heads[0] is not stationary: the orbit is not in the null spaces
    True
    """
    model = _check_model(model)
    point = _check_point(model, point)
    gens = orbit_generators(model, point.omega)
    gen_res = max(float((gens @ H).norm(dim=1).max() / (H.abs().max() * gens.norm(dim=1).max()))
                  for H in (point.H0, point.H_tr))
    dil = dilation_direction(model, point.omega)
    dil_res = float((point.H0 @ dil).norm() / (point.H0.abs().max() * dil.norm()))
    kk = model.d_x * model.d_k
    H0 = point.H0
    B = H0[2 * kk:3 * kk, 3 * kk:]
    diag = float(max(H0[2 * kk:3 * kk, 2 * kk:3 * kk].abs().max(), H0[3 * kk:, 3 * kk:].abs().max()))
    n_neg = int((point.eig_H0_perp < -1e-9 * float(point.eig_H0.abs().max())).sum())
    return DiracSymmetry(gen_res, dil_res, B, float(torch.linalg.matrix_norm(B, 2)), diag, n_neg)


def _check_point(model: HeadModel, point) -> DiracPoint:
    if not isinstance(point, DiracPoint):
        raise ValueError(f"point: expected a DiracPoint (analyse_dirac), got {type(point).__name__}")
    if point.H0.shape != (model.d_omega, model.d_omega):
        raise ValueError(f"point: its Hessians are {tuple(point.H0.shape)}, the model's d_omega is {model.d_omega}")
    return point


def random_group_element(model: HeadModel, *, generator: torch.Generator, scale: float = 0.5):
    """A random element ``(G, M)`` of the group acting on a head (:func:`group_action`): ``I + scale Z``
    for ``G`` then for ``M``, ``Z`` with independent standard normal entries, drawn in float64 on the CPU.

    Parameters
    ----------
    model : HeadModel
        The head model (sets ``d_k``, the dtype and the device).
    generator : torch.Generator
        Draws ``G`` first, then ``M``.
    scale : float, default 0.5
        The size of the random part.

    Returns
    -------
    (Tensor (d_k, d_k), Tensor (d_k, d_k))
        ``G`` and ``M``, in the model's dtype and on its device (invertible with probability one).

    Raises
    ------
    ValueError
        If ``generator`` is not a generator or ``scale`` is not positive.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import group_action, random_group_element
    >>> model, data, heads, _ = example()
    >>> G, M = random_group_element(model, generator=torch.Generator().manual_seed(0))
    >>> moved = group_action(model, heads[0], G, M)
    >>> torch.allclose(model.features(data.X, moved[None]), model.features(data.X, heads[:1]))
    True
    """
    model = _check_model(model)
    check_generator(generator)
    check_positive(scale, "scale")
    k = model.d_k
    G, M = (torch.eye(k, dtype=torch.float64) + scale * torch.randn(k, k, generator=generator, dtype=torch.float64)
            for _ in range(2))
    return G.to(dtype=model.dtype, device=model.device), M.to(dtype=model.dtype, device=model.device)


def common_inertia(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-9):
    """The inertias (:func:`inertia`) of two spectra, zero judged on their common scale
    ``max |eigenvalue|`` over both: Sylvester's law says that two congruent matrices (the Hessians at
    two points of one orbit) have the same.

    Parameters
    ----------
    a, b : Tensor (d,)
        The two spectra.
    rtol : float, default 1e-9
        The relative tolerance of zero.

    Returns
    -------
    (tuple of int, tuple of int)
        ``(negative, zero, positive)`` of ``a``, then of ``b``.

    Raises
    ------
    ValueError
        If both spectra are zero (no scale).

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.stability import common_inertia
    >>> common_inertia(torch.tensor([-1.0, 0.0, 2.0]), torch.tensor([-5.0, 1e-12, 9.0]))
    ((1, 1, 1), (1, 1, 1))
    """
    check_tensor(a, "a", ndim=1)
    check_tensor(b, "b", ndim=1)
    sc = float(torch.cat([a.abs(), b.abs()]).max())
    if sc == 0.0:
        raise ValueError("a: both spectra are zero; the scale of zero is undefined")
    return inertia(a, sc, rtol), inertia(b, sc, rtol)


class TranslationDirections(NamedTuple):
    r"""Three directions of translation at a Dirac point (:func:`translation_directions`).

    A named tuple with the fields below.

    Parameters
    ----------
    eigenvector : Tensor (d_omega,)
        The middle eigenvector (index ``m // 2`` of ``m``, ascending) of :math:`H_{tr}` compressed to the
        orbit's complement, mapped back to ``d_omega`` coordinates, of unit length, sign by
        :func:`canonical_sign`.
    eigenvalue : float
        Its eigenvalue.
    random : Tensor (d_omega,)
        A Gaussian vector projected on the orbit's complement (the projector, unlike a basis of the
        complement, is unique); not normalised.
    tangent : Tensor (d_omega,)
        :func:`named_tangent` ``(0, 0)``: the tangent vector generated by ``G = I + s E_11``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import analyse_dirac, translation_directions
    >>> model, data, heads, _ = example()
    >>> d = translation_directions(model, analyse_dirac(model, data, heads[0]),
    ...                            generator=torch.Generator().manual_seed(0))
    >>> round(float(d.eigenvector.norm()), 12), round(float(d.tangent.norm()), 12)
    (1.0, 1.0)
    """

    eigenvector: torch.Tensor
    eigenvalue: float
    random: torch.Tensor
    tangent: torch.Tensor


def translation_directions(model: HeadModel, point: DiracPoint, *, generator: torch.Generator) -> TranslationDirections:
    r"""An eigenvector of :math:`H_{tr}` (59) transverse to the orbit, a random transverse direction and a
    tangent direction at :math:`\delta_\omega`: the translations of chapter 05.

    Parameters
    ----------
    model : HeadModel
        The head model.
    point : DiracPoint
        The Dirac point, from :func:`analyse_dirac`.
    generator : torch.Generator
        Draws the Gaussian vector of the random direction (``d_omega`` entries, float64 on the CPU).

    Returns
    -------
    TranslationDirections
        The eigenvector and its eigenvalue, the random transverse direction and the tangent one.

    Raises
    ------
    ValueError
        If ``point`` is not a :class:`DiracPoint` of this model, or ``generator`` is not a generator.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import analyse_dirac, translation_directions
    >>> model, data, heads, _ = example()
    >>> p = analyse_dirac(model, data, heads[0])
    >>> d = translation_directions(model, p, generator=torch.Generator().manual_seed(0))
    >>> round(float((p.tangent.basis @ d.random).norm()), 12)  # transverse: no tangent part
    0.0
    """
    model = _check_model(model)
    point = _check_point(model, point)
    check_generator(generator)
    Qc = point.tangent.complement
    lam, U = torch.linalg.eigh(Qc @ point.H_tr @ Qc.T)
    j = lam.numel() // 2
    g = torch.randn(model.d_omega, generator=generator, dtype=torch.float64).to(model.device)
    return TranslationDirections(canonical_sign(U[:, j] @ Qc), float(lam[j]), Qc.T @ (Qc @ g),
                                 named_tangent(model, point.omega, 0, 0))


class SaddleDirection(NamedTuple):
    r"""The direction ``v = c u_QK + s u_VO`` at the uniform-attention point (:func:`saddle_direction`).

    A named tuple with the fields below.

    Parameters
    ----------
    v : Tensor (d_omega,)
        The direction, of unit length, with :math:`v^\top H_{tr}v=\lambda_{QK}/2`.
    u_qk : Tensor (d_omega,)
        A unit vector of the lowest eigenspace of :math:`H_{tr}` (:func:`lowest_direction`).
    u_vo : Tensor (d_omega,)
        A unit vector of the lowest eigenspace of :math:`H_0` compressed to the ``(W_V, W_O)``
        coordinates.
    lam_qk : float
        :math:`\lambda_{QK}=\lambda_{\min}(H_{tr})`.
    mu_tr, mu_0 : float
        :math:`u_{VO}^\top H_{tr}u_{VO}` and :math:`u_{VO}^\top H_0u_{VO}`.
    c, s : float
        The coefficients, :math:`c^2=(\lambda_{QK}/2-\mu_{tr})/(\lambda_{QK}-\mu_{tr})`, :math:`s^2=1-c^2`.
    qk_weight : float
        The norm of ``u_qk`` on the ``(W_Q, W_K)`` coordinates (one when it lies there).
    jsj_qk : float
        The largest entry of :math:`H_{tr}-H_0=E[J^\top SJ]` on the ``(W_Q, W_K)`` block (zero at
        ``W_Q = W_K = 0``, where the features do not move to first order).

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import analyse_dirac, saddle_direction, uniform_attention_point
    >>> model, data, _, _ = example()
    >>> w_u, _ = uniform_attention_point(model, data, generator=torch.Generator().manual_seed(0), n_starts=1)
    >>> sd = saddle_direction(model, analyse_dirac(model, data, w_u), generator_qk=torch.Generator().manual_seed(1),
    ...                       generator_vo=torch.Generator().manual_seed(2))
    >>> round(sd.c ** 2 + sd.s ** 2, 12), round(float(sd.v.norm()), 12)
    (1.0, 1.0)
    """

    v: torch.Tensor
    u_qk: torch.Tensor
    u_vo: torch.Tensor
    lam_qk: float
    mu_tr: float
    mu_0: float
    c: float
    s: float
    qk_weight: float
    jsj_qk: float


def saddle_direction(model: HeadModel, point: DiracPoint, *, generator_qk: torch.Generator,
                     generator_vo: torch.Generator) -> SaddleDirection:
    r"""At a Dirac stationary point with a negative eigenvalue :math:`\lambda_{QK}` of :math:`H_{tr}` (59)
    (the uniform-attention point, :func:`uniform_attention_point`), the direction
    ``v = c u_QK + s u_VO`` with :math:`v^\top H_{tr}v=\lambda_{QK}/2<0`: ``u_QK`` spans the lowest
    eigenspace of :math:`H_{tr}`, ``u_VO`` that of :math:`H_0` (50) compressed to the ``(W_V, W_O)``
    coordinates; both are projections of a Gaussian vector (:func:`lowest_direction`). Along ``v``
    Theorem 7.8's rate sees the :math:`E[J^\top SJ]` term, which :math:`H_0` alone leaves out.

    Parameters
    ----------
    model : HeadModel
        The head model.
    point : DiracPoint
        The Dirac point, from :func:`analyse_dirac`; :math:`\lambda_{\min}(H_{tr})` must be below
        :math:`u_{VO}^\top H_{tr}u_{VO}` and negative.
    generator_qk, generator_vo : torch.Generator
        Draw the Gaussian vectors of ``u_QK`` and ``u_VO``.

    Returns
    -------
    SaddleDirection
        ``v``, ``u_QK``, ``u_VO``, the quadratic forms, ``c``, ``s`` and two diagnostics.

    Raises
    ------
    ValueError
        If ``point`` is not a :class:`DiracPoint` of this model, or ``c^2`` falls outside ``[0, 1]``
        (no negative direction of :math:`H_{tr}` to mix with).

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import analyse_dirac, saddle_direction, uniform_attention_point
    >>> model, data, _, _ = example()
    >>> w_u, _ = uniform_attention_point(model, data, generator=torch.Generator().manual_seed(0), n_starts=1)
    >>> p = analyse_dirac(model, data, w_u)
    >>> sd = saddle_direction(model, p, generator_qk=torch.Generator().manual_seed(1),
    ...                       generator_vo=torch.Generator().manual_seed(2))
    >>> round(float(sd.v @ p.H_tr @ sd.v) / (sd.lam_qk / 2), 9), round(sd.qk_weight, 6)
    (1.0, 1.0)
    """
    model = _check_model(model)
    point = _check_point(model, point)
    qk = 2 * model.d_x * model.d_k  # the (W_Q, W_K) coordinates come first
    u_qk, lam_qk = lowest_direction(point.H_tr, generator=generator_qk)
    H0_vo = point.H0.clone()
    H0_vo[:qk, :] = 0
    H0_vo[:, :qk] = 0  # H0 compressed to the (W_V, W_O) coordinates
    u_vo, _ = lowest_direction(H0_vo, generator=generator_vo)
    mu_tr, mu_0 = float(u_vo @ point.H_tr @ u_vo), float(u_vo @ point.H0 @ u_vo)
    c2 = (lam_qk / 2 - mu_tr) / (lam_qk - mu_tr)
    if not 0.0 <= c2 <= 1.0:
        raise ValueError(f"point: c^2 = {c2:.3g} is outside [0, 1]; H_tr has no negative direction to mix with")
    c, s = np.sqrt(c2), np.sqrt(1 - c2)
    return SaddleDirection(c * u_qk + s * u_vo, u_qk, u_vo, lam_qk, mu_tr, mu_0, float(c), float(s),
                           float(u_qk[:qk].norm()), float((point.H_tr - point.H0)[:qk, :qk].abs().max()))


def linearised_flow(H: torch.Tensor, v: torch.Tensor, times, zeta0: float = 1.0):
    r"""The linearised flow :math:`x(t)=e^{-2\zeta tH}v` at each time, batched: its norm and its growth
    rate :math:`\frac{d}{dt}\log|x|^2=-4\zeta\,x^\top Hx/|x|^2` (Theorem 7.8 linearised, chapter 05).

    Parameters
    ----------
    H : Tensor (d, d)
        The Hessian, :math:`H_{tr}` (59) or :math:`H_0` (50).
    v : Tensor (d,), the dtype of ``H``
        The start.
    times : array_like (R,)
        The times.
    zeta0 : float, default 1.0
        The constant learning rate :math:`\zeta`.

    Returns
    -------
    (ndarray (R,), ndarray (R,))
        :math:`|x(t)|` and the growth rate.

    Raises
    ------
    ValueError
        If ``H`` is not square, ``v`` does not match it, or ``times`` is not 1-d.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.stability import linearised_flow
    >>> H = torch.diag(torch.tensor([-1.0, 2.0], dtype=torch.float64))
    >>> norm, rate = linearised_flow(H, torch.tensor([1.0, 0.0], dtype=torch.float64), [0.0, 0.5])
    >>> norm.round(6).tolist(), rate.tolist()  # e^{2t}, rate 4
    ([1.0, 2.718282], [4.0, 4.0])
    """
    check_tensor(H, "H", ndim=2)
    if H.shape[0] != H.shape[1]:
        raise ValueError(f"H: expected a square matrix, got {tuple(H.shape)}")
    check_tensor(v, "v", ndim=1, dtype=H.dtype)
    if v.shape[0] != H.shape[0]:
        raise ValueError(f"v: expected length {H.shape[0]}, got {v.shape[0]}")
    check_positive(zeta0, "zeta0")
    t = np.asarray(times, dtype=np.float64)
    if t.ndim != 1:
        raise ValueError(f"times: expected a 1-d array, got shape {t.shape}")
    s = torch.as_tensor(-2 * zeta0 * t, dtype=H.dtype, device=H.device)
    x = torch.linalg.matrix_exp(s[:, None, None] * H) @ v  # (R, d)
    xHx = ((x @ H) * x).sum(-1)
    return x.norm(dim=1).cpu().numpy(), (-4 * zeta0 * xHx / (x * x).sum(-1)).cpu().numpy()


class LiftedSpectrum(NamedTuple):
    r"""The spectrum of the lifted Hessian at a Dirac lift against formula (49) (:func:`lifted_spectrum`).

    A named tuple with the fields below.

    Parameters
    ----------
    eigenvalues : Tensor (n d_omega,)
        The eigenvalues of :func:`lifted_hessian` at the lift of ``n`` copies of :math:`\omega`, ascending.
    error : float
        Their largest difference with the spectrum (49) gives: :math:`H_{tr}`'s together with
        :math:`H_0`'s ``n - 1`` times.
    error_without_interaction : float
        The same with (49) lacking its interaction term: :math:`H_0`'s spectrum ``n`` times.
    scale : float
        ``max |eigenvalues|``.

    Examples
    --------
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import analyse_dirac, lifted_spectrum
    >>> model, data, heads, _ = example()
    >>> ls = lifted_spectrum(model, data, analyse_dirac(model, data, heads[0]))
    >>> ls.eigenvalues.shape, ls.error < 1e-10 * ls.scale
    (torch.Size([48]), True)
    """

    eigenvalues: torch.Tensor
    error: float
    error_without_interaction: float
    scale: float


def lifted_spectrum(model: HeadModel, data: Dataset, point: DiracPoint, n: int = 2) -> LiftedSpectrum:
    r"""Formula (49) at the Dirac lift of ``n`` copies of :math:`\omega` (Remark 7.4): the autograd
    Hessian of the lifted risk (:func:`lifted_hessian`, which uses neither engine formula for
    :math:`H_0` nor for :math:`H_{tr}`) against the spectrum of :math:`H_{tr}` (59), the means, together with
    that of :math:`H_0` (50) ``n - 1`` times, the centred parts.

    Parameters
    ----------
    model : HeadModel
        The head model.
    data : Dataset
        The data of the risk (10).
    point : DiracPoint
        The Dirac point, from :func:`analyse_dirac` with the same model and data.
    n : int, default 2
        The number of equally likely states of the lift, at least 2.

    Returns
    -------
    LiftedSpectrum
        The lifted spectrum, its errors against (49) with and without the interaction term, its scale.

    Raises
    ------
    ValueError
        If ``point`` is not a :class:`DiracPoint` of this model, or ``n`` is below 2.

    Examples
    --------
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import analyse_dirac, lifted_spectrum
    >>> model, data, heads, _ = example()
    >>> ls = lifted_spectrum(model, data, analyse_dirac(model, data, heads[0]))
    >>> ls.error_without_interaction > 1e3 * ls.error  # the interaction term matters
    True
    """
    model = _check_model(model)
    point = _check_point(model, point)
    check_positive(n, "n", integer=True)
    if n < 2:
        raise ValueError(f"n: expected at least 2 states, got {n}")
    eig = torch.linalg.eigvalsh(lifted_hessian(model, data, point.omega[None].repeat(n, 1)))
    union = torch.sort(torch.cat([point.eig_H_tr] + [point.eig_H0] * (n - 1))).values
    without = torch.sort(torch.cat([point.eig_H0] * n)).values
    return LiftedSpectrum(eig, float((eig - union).abs().max()), float((eig - without).abs().max()),
                          float(eig.abs().max()))


def lipschitz_in_measure(model: HeadModel, data: Dataset, point: DiracPoint, eps: float):
    r"""Remark 7.2's Lipschitz constant :math:`\gamma` along a small translation of the measure:
    :math:`|\nabla\Phi(\omega;\delta_{\omega+\varepsilon v})-\nabla\Phi(\omega;\delta_\omega)|/\varepsilon`
    along the top eigenvector ``v`` of :math:`H_{tr}-H_0=E[J^\top SJ]` (59), with that top eigenvalue
    :math:`\|H_{tr}-H_0\|_2`, which the quotient reaches as :math:`\varepsilon\to0`.

    Parameters
    ----------
    model : HeadModel
        The head model.
    data : Dataset
        The data of the expectations in (13).
    point : DiracPoint
        The Dirac point, from :func:`analyse_dirac`.
    eps : float
        The size of the translation, :math:`\varepsilon > 0`.

    Returns
    -------
    (float, float)
        The quotient :math:`\gamma` and :math:`\|H_{tr}-H_0\|_2`.

    Raises
    ------
    ValueError
        If ``point`` is not a :class:`DiracPoint` of this model, or ``eps`` is not positive.

    Examples
    --------
    >>> from mfattn.models.tasks import example
    >>> from mfattn.analysis.stability import analyse_dirac, lipschitz_in_measure
    >>> model, data, heads, _ = example()
    >>> gamma, norm = lipschitz_in_measure(model, data, analyse_dirac(model, data, heads[0]), 1e-6)
    >>> abs(gamma / norm - 1) < 1e-4
    True
    """
    model = _check_model(model)
    point = _check_point(model, point)
    check_positive(eps, "eps")
    w = point.omega
    eJ, UJ = torch.linalg.eigh(point.H_tr - point.H0)
    vJ = canonical_sign(UJ[:, -1])
    g_star = model.grad_first_variation(data, w[None], w[None])[0]
    shifted = translate(model, w, vJ, eps)
    return float((model.grad_first_variation(data, w[None], shifted)[0] - g_star).norm()) / eps, float(eJ[-1])
