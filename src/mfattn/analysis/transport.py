"""Distances between clouds of heads (chapter 02): Wasserstein distances with POT and the
test-function discrepancy of Theorem 5.2 (24)."""

from __future__ import annotations

from typing import NamedTuple

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


class LipschitzMeans(NamedTuple):
    r"""The means over a measure's atoms of the test functions of (24) (:func:`lipschitz_means`): the
    side of :func:`lipschitz_parts` that belongs to the reference measure alone; a named tuple with
    the fields below.

    Parameters
    ----------
    linear : Tensor (P,)
        :math:`\int\langle v,\omega\rangle\,d\rho` for each unit direction ``v``.
    distance : Tensor (Q,)
        :math:`\int\|\omega-c\|\,d\rho` for each centre ``c``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.transport import lipschitz_means
    >>> atoms = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
    >>> lipschitz_means(atoms, directions=torch.eye(2), centers=torch.zeros(1, 2))
    LipschitzMeans(linear=tensor([1., 0.]), distance=tensor([1.]))
    """

    linear: torch.Tensor
    distance: torch.Tensor


def lipschitz_means(atoms: torch.Tensor, directions: torch.Tensor, centers: torch.Tensor) -> LipschitzMeans:
    r"""The means of the test functions of (24) under the uniform measure of ``atoms``.

    A grid of runs compared with one reference population (chapter 02's propagation of chaos) asks
    for the reference's side of the discrepancy once per recording time, not once per run: passed as
    ``reference`` to :func:`lipschitz_parts` or :func:`lipschitz_discrepancy`, these means give the
    same numbers, bit for bit, as the population itself, in a time that does not grow with its size.

    Parameters
    ----------
    atoms : Tensor (M, d)
        Atoms of the measure, each of weight ``1/M``.
    directions : Tensor (P, d)
        Directions of the linear test functions (normalised here).
    centers : Tensor (Q, d)
        Centres of the distance test functions.

    Returns
    -------
    LipschitzMeans
        ``linear (P,)`` and ``distance (Q,)``.

    Raises
    ------
    ValueError
        Naming the argument that is not a 2-d tensor.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.transport import lipschitz_discrepancy, lipschitz_means
    >>> g = torch.Generator().manual_seed(0)
    >>> heads, population = torch.randn(8, 3, generator=g), torch.randn(500, 3, generator=g)
    >>> dirs, centers = torch.randn(4, 3, generator=g), torch.randn(2, 3, generator=g)
    >>> means = lipschitz_means(population, dirs, centers)
    >>> means.linear.shape, means.distance.shape
    (torch.Size([4]), torch.Size([2]))
    >>> lipschitz_discrepancy(heads, means, dirs, centers) == lipschitz_discrepancy(heads, population, dirs, centers)
    True
    """
    for x, name in ((atoms, "atoms"), (directions, "directions"), (centers, "centers")):
        check_tensor(x, name, ndim=2)
    v = directions / directions.norm(dim=1, keepdim=True)
    return LipschitzMeans((atoms @ v.T).mean(0), torch.cdist(atoms, centers).mean(0))


def lipschitz_discrepancy(heads: torch.Tensor, reference, directions: torch.Tensor,
                          centers: torch.Tensor) -> float:
    r"""Largest :math:`|\frac1N\sum_i f(\omega_i) - \int f\,d\rho|` of (24) over a family of 1-Lipschitz
    test functions: the linear maps :math:`\omega\mapsto\langle v,\omega\rangle` for the unit rows of
    ``directions`` and the distances :math:`\omega\mapsto\|\omega - c\|` to the rows of ``centers``.
    ``rho`` is the uniform measure of ``reference``.

    Parameters
    ----------
    heads : Tensor (N, d)
        Atoms of the empirical measure, each of weight ``1/N``.
    reference : Tensor (M, d) or LipschitzMeans
        Atoms of :math:`\rho`, each of weight ``1/M``; or their :func:`lipschitz_means` under the same
        ``directions`` and ``centers`` (the same result, computed once for many ``heads``).
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


def lipschitz_parts(heads: torch.Tensor, reference, directions: torch.Tensor,
                    centers: torch.Tensor) -> tuple[float, float]:
    r"""The two halves of :func:`lipschitz_discrepancy`: its largest discrepancy over the linear test
    functions :math:`\langle v,\omega\rangle` and over the distances :math:`\|\omega-c\|`, as
    ``(linear, distance)``; their maximum is the discrepancy (24) over the whole family. Which half
    carries the maximum, and how each decays in ``N``, is read off a propagation-of-chaos
    experiment (chapter 02).

    Parameters
    ----------
    heads, reference, directions, centers
        As for :func:`lipschitz_discrepancy` (``reference`` a population or its :func:`lipschitz_means`).

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
    for x, name in ((heads, "heads"), (directions, "directions"), (centers, "centers")):
        check_tensor(x, name, ndim=2)
    h = lipschitz_means(heads, directions, centers)
    if isinstance(reference, LipschitzMeans):
        if reference.linear.shape != h.linear.shape or reference.distance.shape != h.distance.shape:
            raise ValueError(f"reference: means of {reference.linear.shape[0]} directions and "
                             f"{reference.distance.shape[0]} centres, where {h.linear.shape[0]} and "
                             f"{h.distance.shape[0]} are given")
        r = reference
    else:
        check_tensor(reference, "reference", ndim=2)
        r = lipschitz_means(reference, directions, centers)
    lin, dist = h.linear - r.linear, h.distance - r.distance
    return float(lin.abs().max()), float(dist.abs().max())
