"""Distances between clouds of heads (chapter 02): Wasserstein distances with POT and the
test-function discrepancy of Theorem 5.2 (24)."""

from __future__ import annotations

import numpy as np
import torch

from .._checks import check_positive, check_tensor


def _np(x, name):
    check_tensor(x, name, ndim=2)
    return x.detach().to("cpu", torch.float64).numpy()


def wasserstein(a: torch.Tensor, b: torch.Tensor, *, p: int = 2, exact_max: int = 2048,
                n_projections: int = 512, seed: int = 0) -> float:
    r"""p-Wasserstein distance between the uniform empirical measures of ``a (N, d)`` and ``b (M, d)``.

    Exact optimal transport (``ot.emd2``) when ``N * M <= exact_max**2``; beyond, the sliced
    Wasserstein distance (``ot.sliced_wasserstein_distance``, ``n_projections`` directions), a
    lower bound of :math:`W_p` up to a dimension factor.

    Parameters
    ----------
    a : Tensor (N, d)
        Atoms of the first measure, each of weight ``1/N`` (any float dtype and device).
    b : Tensor (M, d)
        Atoms of the second measure, each of weight ``1/M``.
    p : {1, 2}, default 2
        Order of the distance.
    exact_max : int, default 2048
        Exact transport when ``N * M <= exact_max**2``, else the sliced distance.
    n_projections : int, default 512
        Number of random directions of the sliced distance.
    seed : int, default 0
        Seed of those directions.

    Returns
    -------
    float
        :math:`W_p`, or the sliced distance beyond ``exact_max``.

    Raises
    ------
    ValueError
        Naming the argument that is invalid (e.g. ``b`` of another dimension).

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.transport import wasserstein
    >>> a = torch.zeros(4, 2, dtype=torch.float64)
    >>> b = a + torch.tensor([3.0, 4.0], dtype=torch.float64)
    >>> round(wasserstein(a, b), 6), round(wasserstein(a, b, p=1), 6)
    (5.0, 5.0)
    >>> wasserstein(a, b, exact_max=1) <= 5.0  # sliced
    True
    """
    A, B = _np(a, "a"), _np(b, "b")
    if A.shape[1] != B.shape[1]:
        raise ValueError(f"b: dimension {B.shape[1]} differs from a's {A.shape[1]}")
    if p not in (1, 2):
        raise ValueError(f"p: must be 1 or 2, got {p}")
    check_positive(exact_max, "exact_max", integer=True)
    # imported here, so that the discrepancy (24) and everything that imports this module (the chaos
    # experiments) run where POT is not installed: the device check's GPU image has no POT
    import ot

    if A.shape[0] * B.shape[0] <= exact_max**2:
        M = ot.dist(A, B, metric="sqeuclidean" if p == 2 else "euclidean")
        ua, ub = np.full(A.shape[0], 1 / A.shape[0]), np.full(B.shape[0], 1 / B.shape[0])
        cost = float(ot.emd2(ua, ub, M, numItermax=10**7))
        return cost ** (1 / p)
    return float(ot.sliced_wasserstein_distance(A, B, n_projections=n_projections, p=p, seed=seed))


def lipschitz_discrepancy(heads: torch.Tensor, reference: torch.Tensor, directions: torch.Tensor,
                          centers: torch.Tensor) -> float:
    r"""Largest :math:`|\frac1N\sum_i f(\omega_i) - \int f\,d\rho|` of (24) over a family of 1-Lipschitz
    test functions: the linear maps :math:`\omega\mapsto\langle v,\omega\rangle` for the unit rows of
    ``directions`` and the distances :math:`\omega\mapsto\|\omega - c\|` to the rows of ``centers``.
    ``rho`` is the uniform measure of ``reference``.

    Parameters
    ----------
    heads : Tensor (N, d)
        Atoms of the empirical measure, each of weight ``1/N``.
    reference : Tensor (M, d)
        Atoms of :math:`\rho`, each of weight ``1/M``.
    directions : Tensor (P, d)
        Directions ``v`` of the linear test functions (normalised here).
    centers : Tensor (Q, d)
        Centres ``c`` of the distance test functions.

    Returns
    -------
    float
        The largest discrepancy over the ``P + Q`` test functions.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.transport import lipschitz_discrepancy
    >>> heads = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    >>> reference = torch.zeros(3, 2)
    >>> lipschitz_discrepancy(heads, reference, directions=torch.eye(2), centers=torch.zeros(1, 2))
    1.0
    """
    return max(lipschitz_parts(heads, reference, directions, centers))


def lipschitz_parts(heads: torch.Tensor, reference: torch.Tensor, directions: torch.Tensor,
                    centers: torch.Tensor) -> tuple[float, float]:
    r"""The two halves of :func:`lipschitz_discrepancy`: its largest discrepancy over the linear test
    functions :math:`\langle v,\omega\rangle` and over the distances :math:`\|\omega-c\|`, as
    ``(linear, distance)``; their maximum is the discrepancy (24) over the whole family. Which half
    carries the maximum, and how each decays in ``N``, is read off a propagation-of-chaos
    experiment (chapter 02).

    Parameters
    ----------
    heads, reference, directions, centers : Tensor
        As for :func:`lipschitz_discrepancy`.

    Returns
    -------
    (float, float)
        The largest linear discrepancy, then the largest distance discrepancy.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.transport import lipschitz_parts
    >>> heads = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])  # the same mean as the reference: no linear part
    >>> lipschitz_parts(heads, torch.zeros(1, 2), directions=torch.eye(2), centers=torch.zeros(1, 2))
    (0.0, 1.0)
    """
    for x, name in ((heads, "heads"), (reference, "reference"), (directions, "directions"), (centers, "centers")):
        check_tensor(x, name, ndim=2)
    v = directions / directions.norm(dim=1, keepdim=True)
    lin = (heads @ v.T).mean(0) - (reference @ v.T).mean(0)
    dist = torch.cdist(heads, centers).mean(0) - torch.cdist(reference, centers).mean(0)
    return float(lin.abs().max()), float(dist.abs().max())
