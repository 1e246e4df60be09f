"""Growth of the derivatives of the head feature map with the parameter radius (Proposition 3.4).

Used by chapter 01. Proposition 3.4 says each ``sup ||D^m psi_l(X; omega)||`` over
``||omega|| <= M`` is finite; it does not say how it grows. Here it is estimated by directional
derivatives ``D^m psi_l(X; omega)[u, ..., u]`` (exact, by nested forward-mode AD), whose
supremum over unit ``u`` is the operator norm of the symmetric m-linear map.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._checks import check_generator, check_positive
from ._progress import progress_bar
from .model import HeadModel
from .particles import blocks


class DerivativeSup(NamedTuple):
    r"""Estimated suprema of directional derivatives of psi, per radius and order.

    Returned by :func:`feature_derivative_sup`.

    .. rubric:: Fields

    ``radii`` : Tensor (R,), float64
        Radii ``M`` of the parameter sphere.
    ``sup`` : Tensor (R, max_order + 1), float64
        ``sup[r, m]``: the largest :math:`\|D^m\psi_l(X;\omega)[u]^m\|_2` found over the points
        :math:`\|\omega\|=M_r`, the unit directions ``u``, the sequences and the positions ``l``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.smoothness import DerivativeSup
    >>> est = DerivativeSup(torch.tensor([1.0, 2.0]), torch.zeros(2, 4))
    >>> est.radii.shape, est.sup.shape
    (torch.Size([2]), torch.Size([2, 4]))
    """

    radii: torch.Tensor  # (R,) radii M of the parameter sphere
    sup: torch.Tensor  # (R, max_order + 1): max over points, directions, sequences, positions
    #: of ||D^m psi_l(X; omega)[u]^m||_2 with ||omega|| = M, ||u|| = 1


def _directional(f, order: int):
    """Functions h -> D^m f(h)[u]^m for m = 0..order, by nested torch.func.jvp."""
    fns = [lambda h, u: f(h)]
    for _ in range(order):
        prev = fns[-1]
        fns.append(lambda h, u, prev=prev: torch.func.jvp(lambda x: prev(x, u), (h,), (u,))[1])
    return fns


def feature_derivative_sup(
    model: HeadModel,
    X: torch.Tensor,
    radii,
    *,
    n_points: int = 16,
    n_directions: int = 8,
    max_order: int = 3,
    generator: torch.Generator,
    progress: bool = True,
) -> DerivativeSup:
    r"""Estimate :math:`C_m(M)=\sup\|\nabla^m_\omega\psi_l(X;\omega)\|` of Proposition 3.4.

    ``n_points`` unit vectors ``p`` and, for each, ``n_directions`` unit directions ``u`` are
    drawn once; at every radius ``M`` the heads ``M p`` are used, so that the estimates at
    different radii compare the same points. The result is a lower estimate of the
    supremum over the ball (sampled on its boundary sphere, over the sequences of ``X``).
    ``progress`` shows a bar over the radii (silenced by ``TQDM_DISABLE=1``).

    Parameters
    ----------
    model : HeadModel
        The attention model; :math:`\psi` is its per-head logit feature map.
    X : Tensor (n, L, d_x)
        Sequences, model's dtype and device.
    radii : sequence of float (R,)
        Positive radii ``M`` (a list, an array or a tensor).
    n_points : int, default 16
        Number of unit vectors ``p`` (directions of the heads).
    n_directions : int, default 8
        Number of unit directions ``u`` per point.
    max_order : int, default 3
        Highest derivative order ``m`` (0: the features themselves).
    generator : torch.Generator
        Draws the points and directions (on the CPU, in float64).
    progress : bool, default True
        Show a progress bar over the radii.

    Returns
    -------
    DerivativeSup
        ``radii (R,)`` and ``sup (R, max_order + 1)``, both float64.

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.smoothness import feature_derivative_sup
    >>> from mfattn.tasks import teacher_task
    >>> task = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)
    >>> est = feature_derivative_sup(task.model, task.data.X, [1.0, 2.0], n_points=2,
    ...                              n_directions=2, max_order=2,
    ...                              generator=torch.Generator().manual_seed(0), progress=False)
    >>> est.sup.shape, est.sup.dtype
    (torch.Size([2, 3]), torch.float64)
    >>> bool(est.sup[1, 0] > est.sup[0, 0])  # the features grow with the radius
    True
    """
    if not isinstance(model, HeadModel):
        raise ValueError("model: expected a HeadModel")
    X = model.check_X(X)
    radii = torch.as_tensor(radii, dtype=torch.float64)
    if radii.ndim != 1 or radii.numel() < 1 or not bool((radii > 0).all()) or not bool(torch.isfinite(radii).all()):
        raise ValueError("radii: expected a 1-D sequence of positive finite radii")
    for k, v in dict(n_points=n_points, n_directions=n_directions).items():
        check_positive(v, k, integer=True)
    check_positive(max_order, "max_order", integer=True, allow_zero=True)
    check_generator(generator)

    def unit(k):
        v = torch.randn(k, model.d_omega, generator=generator, dtype=torch.float64)
        return v / v.norm(dim=1, keepdim=True)

    P = unit(n_points).repeat_interleave(n_directions, 0).to(model.dtype).to(model.device)
    U = unit(n_points * n_directions).to(model.dtype).to(model.device)

    def psi(h):
        return model.forward(X, h)[0] @ model.W_out

    fns = _directional(psi, max_order)
    sup = torch.zeros(radii.numel(), max_order + 1, dtype=torch.float64)
    _, hb = model.chunks(X.shape[0], P.shape[0], X.shape[1])
    hb = max(1, hb // (2**max_order))  # nested jvp holds ~2^m copies of the intermediates
    for r, M in enumerate(progress_bar(radii.tolist(), enabled=progress, desc="radii")):
        for s in blocks(P.shape[0], hb):
            for m, fn in enumerate(fns):
                d = fn(M * P[s], U[s])  # (c, B, L, d_v)
                sup[r, m] = max(sup[r, m], float(d.norm(dim=-1).max()))
    return DerivativeSup(radii, sup)
