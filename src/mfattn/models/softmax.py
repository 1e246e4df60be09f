"""Softmax, its Jacobian and the cross-entropy loss (paper eqs. (3), (4), (9); Lemma 2.1).

Used by every chapter through :mod:`mfattn.models.model`; chapter 01 plots the Jacobian's spectrum.
"""

from __future__ import annotations

import torch

from .._checks import check_tensor


def softmax_jacobian(z: torch.Tensor) -> torch.Tensor:
    r"""Jacobian of the softmax map, eq. (4): :math:`\operatorname{diag}(p) - p p^\top`.

    Parameters
    ----------
    z : Tensor (..., d)
        Logit vectors (batched over leading axes).

    Returns
    -------
    Tensor (..., d, d)
        Symmetric positive semidefinite; Lemma 2.1 bounds it by I/2.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.softmax import softmax_jacobian
    >>> J = softmax_jacobian(torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64))
    >>> J.shape
    torch.Size([1, 3, 3])
    >>> bool(torch.allclose(J, J.mT))
    True
    >>> bool(torch.allclose(J.sum(-1), torch.zeros(1, 3, dtype=torch.float64)))  # J 1 = 0
    True
    >>> bool(torch.linalg.eigvalsh(J).max() <= 0.5)
    True
    """
    check_tensor(z, "z")
    if z.ndim < 1:
        raise ValueError("z: needs at least one dimension (the logit axis)")
    p = torch.softmax(z, dim=-1)
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)


def softmax_jacobian_top_eigenvalue(z: torch.Tensor) -> torch.Tensor:
    r"""Largest eigenvalue of the softmax Jacobian :math:`S(z) = \operatorname{diag}(p) - pp^\top`, eq. (4).

    The Lipschitz constant of the softmax at ``z``; Lemma 2.1 bounds it by 1/2.

    Parameters
    ----------
    z : Tensor (..., d)
        Logit vectors (batched over leading axes).

    Returns
    -------
    Tensor (...)
        :math:`\lambda_{\max}(S(z))` per logit vector, by ``torch.linalg.eigvalsh``.

    Raises
    ------
    ValueError
        If ``z`` is not a floating tensor with a logit axis.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.softmax import softmax_jacobian_top_eigenvalue
    >>> float(softmax_jacobian_top_eigenvalue(torch.zeros(2, dtype=torch.float64)))  # Lemma 2.1, sharp
    0.5
    >>> softmax_jacobian_top_eigenvalue(torch.zeros(4, 3, dtype=torch.float64)).shape
    torch.Size([4])
    """
    return torch.linalg.eigvalsh(softmax_jacobian(z))[..., -1]


def cross_entropy(y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    r"""Cross-entropy loss (9), :math:`\ell(y,z)=\log\sum_j e^{z_j} - y^\top z`, per row.

    Stable through log-sum-exp; valid for any ``y`` on the simplex (soft labels included).
    Shapes ``(..., d)`` -> ``(...)``.

    Parameters
    ----------
    y : Tensor (..., d)
        Label distributions, each row on the probability simplex (one-hot or soft).
    z : Tensor (..., d)
        Logits, same shape and dtype as ``y``.

    Returns
    -------
    Tensor (...)
        The loss of each row, in nats; for soft labels it is
        :math:`H(y) + \mathrm{KL}(y\,\|\,\mathrm{softmax}(z))` :math:`{}\ge H(y)`.

    Examples
    --------
    >>> import math, torch
    >>> from mfattn.models.softmax import cross_entropy
    >>> y = torch.tensor([[1.0, 0.0, 0.0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    >>> z = torch.zeros(2, 3, dtype=torch.float64)
    >>> loss = cross_entropy(y, z)
    >>> loss.shape
    torch.Size([2])
    >>> [round(float(v), 4) for v in loss], round(math.log(3), 4)  # uniform logits: log 3 for any y
    ([1.0986, 1.0986], 1.0986)
    >>> round(float(cross_entropy(y, 1e4 * y)[0]), 4)  # large logits stay finite
    0.0
    """
    return torch.logsumexp(z, dim=-1) - (y * z).sum(-1)


def entropy(p: torch.Tensor) -> torch.Tensor:
    r"""Shannon entropy (nats) of probability rows ``(..., d)`` -> ``(...)``, with 0 log 0 = 0.

    Parameters
    ----------
    p : Tensor (..., d)
        Probability vectors along the last axis (nonnegative, summing to one; not checked).

    Returns
    -------
    Tensor (...)
        :math:`-\sum_j p_j \log p_j` of each row, between 0 and ``log d``. The mean entropy of
        labels ``Y`` bounds the risk (10) on them from below (equality when the softmax of the
        logits is ``Y``).

    Examples
    --------
    >>> import math, torch
    >>> from mfattn.models.softmax import entropy
    >>> p = torch.tensor([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    >>> [round(float(v), 4) for v in entropy(p)], round(math.log(4), 4)
    ([1.3863, 0.0], 1.3863)
    """
    return -(torch.special.xlogy(p, p)).sum(-1)
