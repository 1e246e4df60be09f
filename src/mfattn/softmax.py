"""Softmax, its Jacobian and the cross-entropy loss (paper eqs. (3), (4), (9); Lemma 2.1).

Used by every chapter through :mod:`mfattn.model`; chapter 01 plots the Jacobian's spectrum.
"""

from __future__ import annotations

import torch

from ._checks import check_tensor


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
    """
    check_tensor(z, "z")
    if z.ndim < 1:
        raise ValueError("z: needs at least one dimension (the logit axis)")
    p = torch.softmax(z, dim=-1)
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)


def cross_entropy(y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    r"""Cross-entropy loss (9), :math:`\ell(y,z)=\log\sum_j e^{z_j} - y^\top z`, per row.

    Stable through log-sum-exp; valid for any ``y`` on the simplex (soft labels included).
    Shapes ``(..., d)`` -> ``(...)``.
    """
    return torch.logsumexp(z, dim=-1) - (y * z).sum(-1)


def entropy(p: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of probability rows ``(..., d)`` -> ``(...)``, with 0 log 0 = 0."""
    return -(torch.special.xlogy(p, p)).sum(-1)
