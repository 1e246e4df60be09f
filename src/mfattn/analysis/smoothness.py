"""Growth of the derivatives of the head feature map with the parameter radius (Proposition 3.4).

Used by chapter 01. Proposition 3.4 says each ``sup ||D^m psi_l(X; omega)||`` over
``||omega|| <= M`` is finite; it does not say how it grows. Here it is estimated by directional
derivatives ``D^m psi_l(X; omega)[u, ..., u]`` (exact, by nested forward-mode AD), whose
supremum over unit ``u`` is the operator norm of the symmetric m-linear map.
:func:`feature_derivative_sup` samples points and directions; :func:`feature_derivative_max`
maximises over them by projected gradient ascent, and :func:`pad_heads` embeds heads of a smaller
model dimension ``d_x`` into a larger one (Remark 3.5).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .._checks import check_generator, check_positive, check_tensor
from .._progress import progress_bar
from ..models.model import HeadModel, require_heads
from ..models.particles import blocks


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
    >>> from mfattn.analysis.smoothness import DerivativeSup
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
    >>> from mfattn.analysis.smoothness import feature_derivative_sup
    >>> from mfattn.models.tasks import example
    >>> model, data, _, _ = example()
    >>> est = feature_derivative_sup(model, data.X, [1.0, 2.0], n_points=2,
    ...                              n_directions=2, max_order=2,
    ...                              generator=torch.Generator().manual_seed(0), progress=False)
    >>> est.sup.shape, est.sup.dtype
    (torch.Size([2, 3]), torch.float64)
    >>> bool(est.sup[1, 0] > est.sup[0, 0])  # the features grow with the radius
    True
    """
    require_heads(model, "this smoothness constant (mfattn.analysis.smoothness)")
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


class DerivativeMax(NamedTuple):
    r"""Points found by :func:`feature_derivative_max` and the derivative norms there, one per start.

    .. rubric:: Fields

    ``value`` : Tensor (K,), float64
        ``value[k]``: :math:`\max_l\|D^m\psi_l(X_k;\omega_k)[u_k]^m\|_2`, the largest found along
        the ascent from start ``k`` (it is the value at the returned point).
    ``omega`` : Tensor (K, d_omega)
        Heads, :math:`\|\omega_k\|\le M_\omega`.
    ``X`` : Tensor (K, L, d_x)
        Token matrices, :math:`\|X_k\|_F\le M_X`.
    ``u`` : Tensor (K, d_omega)
        Unit directions.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.smoothness import DerivativeMax
    >>> est = DerivativeMax(torch.ones(2), torch.zeros(2, 24), torch.zeros(2, 4, 3), torch.zeros(2, 24))
    >>> est.value.shape, est.X.shape
    (torch.Size([2]), torch.Size([2, 4, 3]))
    """

    value: torch.Tensor  # (K,) max over positions l of ||D^m psi_l(X_k; omega_k)[u_k]^m||_2
    omega: torch.Tensor  # (K, d_omega) heads in the ball of radius M_omega
    X: torch.Tensor  # (K, L, d_x) token matrices in the Frobenius ball of radius M_X
    u: torch.Tensor  # (K, d_omega) unit directions


def pad_heads(heads: torch.Tensor, d_k: int, d_x: int) -> torch.Tensor:
    r"""Embed heads of model dimension ``d_x0`` into model dimension ``d_x >= d_x0`` by zero padding.

    ``W_Q, W_K, W_V`` get ``d_x - d_x0`` zero rows and ``W_O`` as many zero columns. With the token
    matrix padded by zero columns and ``W_out`` extended by rows (``W_out[:d_x0]`` unchanged), the
    padded head has the same norm and the same features :math:`\psi_l(X;\omega)`, so the supremum
    :math:`C_m` of Proposition 3.4 cannot decrease with ``d_x`` (Remark 3.5, chapter 01). The same
    map embeds a direction ``u`` (it is linear).

    Parameters
    ----------
    heads : Tensor (..., 4 d_x0 d_k)
        Heads (or directions) laid out as in :class:`~mfattn.models.model.HeadModel`.
    d_k : int
        Head dimension.
    d_x : int
        Target model dimension, at least ``d_x0``.

    Returns
    -------
    Tensor (..., 4 d_x d_k)
        The padded heads, same dtype and device, same norms.

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.model import HeadModel
    >>> from mfattn.analysis.smoothness import pad_heads
    >>> from mfattn.models.tasks import example
    >>> small, data, h, _ = example()  # d_x0 = 3
    >>> big = HeadModel(torch.nn.functional.pad(small.W_out, (0, 0, 0, 2)), d_k=2)  # d_x = 5
    >>> H = pad_heads(h, d_k=2, d_x=5)
    >>> XX = torch.nn.functional.pad(data.X, (0, 2))
    >>> H.shape, bool(torch.allclose(H.norm(dim=1), h.norm(dim=1)))
    (torch.Size([5, 40]), True)
    >>> bool(torch.allclose(big.features(XX, H), small.features(data.X, h)))
    True
    """
    check_tensor(heads, "heads")
    check_positive(d_k, "d_k", integer=True)
    check_positive(d_x, "d_x", integer=True)
    if heads.ndim < 1 or heads.shape[-1] % (4 * d_k):
        raise ValueError(f"heads: last dimension must be a multiple of 4 d_k = {4 * d_k}, got {tuple(heads.shape)}")
    d_x0 = heads.shape[-1] // (4 * d_k)
    if d_x < d_x0:
        raise ValueError(f"d_x: must be at least the heads' model dimension {d_x0}, got {d_x}")
    lead = heads.shape[:-1]
    m = d_x0 * d_k
    qkv = heads[..., : 3 * m].reshape(*lead, 3, d_x0, d_k)
    qkv = torch.nn.functional.pad(qkv, (0, 0, 0, d_x - d_x0)).reshape(*lead, 3 * d_x * d_k)
    W_O = heads[..., 3 * m :].reshape(*lead, d_k, d_x0)
    W_O = torch.nn.functional.pad(W_O, (0, d_x - d_x0)).reshape(*lead, d_k * d_x)
    return torch.cat([qkv, W_O], dim=-1)


def feature_derivative_max(
    model: HeadModel,
    order: int,
    *,
    L: int,
    x_norm: float,
    radius: float,
    n_starts: int = 4,
    n_steps: int = 300,
    lr: float = 0.05,
    init=None,
    init_noise: float = 0.0,
    generator: torch.Generator | None = None,
    progress: bool = True,
) -> DerivativeMax:
    r"""Maximise :math:`\|D^m\psi_l(X;\omega)[u]^m\|` over :math:`\|X\|_F\le M_X`, :math:`\|\omega\|\le M_\omega`, :math:`\|u\|=1`.

    A lower estimate of :math:`C_m(M_X, M_\omega, \|W_{out}\|, d_k, L)` of Proposition 3.4 that,
    unlike the sampled :func:`feature_derivative_sup`, does not weaken as the dimensions grow: it
    is used to test Remark 3.5 (no separate dependence on ``d_x`` or ``d_v``) in chapter 01.
    From each start, Adam ascends the largest norm over the positions ``l`` (computed by the
    same nested forward-mode derivatives as :func:`feature_derivative_sup`) jointly in
    ``(omega, X, u)``, with step sizes ``lr * radius``, ``lr * x_norm`` and ``lr``; after every
    step ``omega`` and ``X`` are projected back onto their balls and ``u`` onto the unit sphere.
    The best point met along each ascent is returned, so the value at a start (for instance a
    padded optimiser of a smaller model, ``init``) is never lost. Float64 throughout, a fixed
    number of steps.

    Parameters
    ----------
    model : HeadModel
        The model; fixes ``d_x``, ``d_k``, ``d_v`` and ``W_out`` (dtype float64).
    order : int
        Derivative order ``m >= 0`` (0: the features themselves; ``u`` then plays no role).
    L : int
        Sequence length.
    x_norm : float
        :math:`M_X > 0`, bound on the Frobenius norm of the token matrix ``X (L, d_x)``.
    radius : float
        :math:`M_\omega > 0`, bound on the Euclidean norm of a head.
    n_starts : int, default 4
        Random starts (``omega`` and ``X`` uniform on their spheres, ``u`` on the unit sphere).
    n_steps : int, default 300
        Adam steps (0: just evaluate the starts).
    lr : float, default 0.05
        Relative step size.
    init : tuple of Tensor, optional
        Further starts ``(omega (K0, 4 d_x0 d_k), X (K0, L0, d_x0), u (K0, 4 d_x0 d_k))`` with
        ``d_x0 <= d_x`` and ``L0 <= L``, embedded by :func:`pad_heads`, zero columns of ``X`` and
        zero tokens appended to ``X`` (the mask is causal, so positions ``l <= L0`` keep their
        features); they are first projected onto the constraint sets.
    init_noise : float, default 0.0
        When positive, each ``init`` start also enters a second time, moved by a random vector of
        norm ``init_noise * radius`` in ``omega``, ``init_noise * x_norm`` in ``X`` and
        ``init_noise`` in ``u``. A zero-padded start has zero gradient in the padded coordinates
        (they are odd under a reflection that leaves the norm unchanged), so without this the
        ascent cannot leave the smaller model.
    generator : torch.Generator, optional
        Draws the random starts and the ``init_noise`` moves (CPU, float64); required when
        ``n_starts > 0`` or ``init_noise > 0``.
    progress : bool, default True
        Show a progress bar over the steps.

    Returns
    -------
    DerivativeMax
        ``value (K,)``, ``omega (K, d_omega)``, ``X (K, L, d_x)``, ``u (K, d_omega)``, detached, with
        ``K = K0 + n_starts`` (``K = 2 K0 + n_starts`` with ``init_noise > 0``), in the order: the
        ``init`` starts, their moved copies, the random starts.

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.model import HeadModel
    >>> from mfattn.analysis.smoothness import feature_derivative_max
    >>> model = HeadModel(torch.eye(3, 4, dtype=torch.float64), d_k=2)
    >>> best = feature_derivative_max(model, 0, L=3, x_norm=2.0, radius=2.0, n_starts=2, n_steps=200,
    ...                               generator=torch.Generator().manual_seed(0), progress=False)
    >>> best.value.shape, best.X.shape
    (torch.Size([2]), torch.Size([2, 3, 3]))
    >>> round(float(best.value.max()), 2)  # the supremum M_X M_omega^2 / 2 for m = 0
    4.0
    """
    require_heads(model, "this smoothness constant (mfattn.analysis.smoothness)")
    if model.dtype != torch.float64:
        raise ValueError(f"model: expected float64, got {model.dtype}")
    check_positive(order, "order", integer=True, allow_zero=True)
    check_positive(L, "L", integer=True)
    check_positive(x_norm, "x_norm")
    check_positive(radius, "radius")
    check_positive(n_starts, "n_starts", integer=True, allow_zero=True)
    check_positive(n_steps, "n_steps", integer=True, allow_zero=True)
    check_positive(lr, "lr")
    check_positive(init_noise, "init_noise", allow_zero=True)
    if n_starts > 0 or (init is not None and init_noise > 0):
        check_generator(generator)
    dev, f64 = model.device, torch.float64
    omega, X, u = (torch.empty(0, model.d_omega, dtype=f64, device=dev),
                   torch.empty(0, L, model.d_x, dtype=f64, device=dev),
                   torch.empty(0, model.d_omega, dtype=f64, device=dev))
    if init is not None:
        if not isinstance(init, (tuple, list)) or len(init) != 3:
            raise ValueError("init: expected a tuple (omega, X, u)")
        o0, X0, u0 = init
        for name, t, nd in (("init omega", o0, 2), ("init X", X0, 3), ("init u", u0, 2)):
            check_tensor(t, name, ndim=nd, dtype=f64, device=dev)
        K0, L0, d_x0 = X0.shape
        if (L0 > L or d_x0 > model.d_x or tuple(o0.shape) != (K0, 4 * d_x0 * model.d_k)
                or u0.shape != o0.shape):
            raise ValueError(f"init: expected omega, u (K0, 4 d_x0 d_k) and X (K0, L0, d_x0) with L0 <= {L}, "
                             f"d_x0 <= {model.d_x}, d_k = {model.d_k}; got {tuple(o0.shape)}, {tuple(X0.shape)}, "
                             f"{tuple(u0.shape)}")
        omega = pad_heads(o0, model.d_k, model.d_x)
        X = torch.nn.functional.pad(X0, (0, model.d_x - d_x0, 0, L - L0))
        u = pad_heads(u0, model.d_k, model.d_x)

    def sphere(k, *shape, r):
        v = torch.randn(k, *shape, generator=generator, dtype=f64)
        return (r * v / v.flatten(1).norm(dim=1).reshape(-1, *[1] * len(shape))).to(dev)

    if init is not None and init_noise > 0:
        K0 = X.shape[0]
        omega = torch.cat([omega, omega + sphere(K0, model.d_omega, r=init_noise * radius)])
        X = torch.cat([X, X + sphere(K0, L, model.d_x, r=init_noise * x_norm)])
        u = torch.cat([u, u + sphere(K0, model.d_omega, r=init_noise)])
    if n_starts > 0:
        omega = torch.cat([omega, sphere(n_starts, model.d_omega, r=radius)])
        X = torch.cat([X, sphere(n_starts, L, model.d_x, r=x_norm)])
        u = torch.cat([u, sphere(n_starts, model.d_omega, r=1.0)])
    K = X.shape[0]
    if K == 0:
        raise ValueError("n_starts: no start (n_starts = 0 and no init)")
    if model.W_out.requires_grad:
        raise ValueError("model: W_out must not require grad")

    def project():
        with torch.no_grad():
            omega.mul_(torch.clamp(radius / omega.norm(dim=1, keepdim=True), max=1.0))
            X.mul_(torch.clamp(x_norm / X.flatten(1).norm(dim=1), max=1.0).reshape(K, 1, 1))
            u.div_(u.norm(dim=1, keepdim=True))

    omega, X, u = (t.detach().clone().requires_grad_() for t in (omega, X, u))
    project()
    diag = torch.arange(K, device=dev)

    def psi(h):  # (K, L, d_v): head k on sequence k; the (K, K) pairs are cheap for a few starts
        return model.forward(X, h)[0][diag, diag] @ model.W_out

    fn = _directional(psi, order)[order]
    model.causal_bias(L)  # built outside the transforms, so the cached mask holds no AD level
    opt = torch.optim.Adam([dict(params=[omega], lr=lr * radius), dict(params=[X], lr=lr * x_norm),
                            dict(params=[u], lr=lr)])
    best = DerivativeMax(torch.full((K,), -1.0, dtype=f64), omega.detach().clone(), X.detach().clone(),
                         u.detach().clone())
    for step in progress_bar(range(n_steps + 1), enabled=progress, desc=f"ascent m={order}"):
        value = fn(omega, u).norm(dim=-1).amax(dim=-1)  # (K,)
        with torch.no_grad():
            better = value.detach().cpu() > best.value
            best.value[better] = value.detach().cpu()[better]
            b = better.to(dev)
            best.omega[b], best.X[b], best.u[b] = omega[b], X[b], u[b]
        if step == n_steps:
            break
        opt.zero_grad()
        (-value.sum()).backward()
        opt.step()
        project()
    return best
