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


def ascent_chains(
    shapes,
    order: int,
    *,
    d_k: int,
    x_norm: float,
    radius: float,
    n_chains: int,
    base_starts: int,
    starts: int,
    n_steps: int,
    generator: torch.Generator,
    init=None,
    init_noise: float = 0.05,
    progress: bool = True,
):
    r"""Independent chains of :func:`feature_derivative_max` along a sweep of sizes (Remark 3.5).

    At every shape ``(d_x, d_v, L)`` the model is ``HeadModel(eye(d_x, d_v), d_k)`` (float64, CPU),
    so :math:`\|W_{out}\| = 1`. Without ``init``, a chain keeps the best of ``base_starts`` random
    starts at the first shape; at every later shape (or at the first one when ``init`` holds one
    point per chain) it keeps the best of its own zero-padded point, a copy moved by
    ``init_noise``, and ``starts`` fresh random starts. By the embedding argument of Remark 3.5 a
    chain's value can then only rise along a sweep of growing shapes. One call of
    :func:`feature_derivative_max` per shape draws all chains' starts from ``generator``.

    Parameters
    ----------
    shapes : sequence of (int, int, int)
        ``(d_x, d_v, L)`` per size, each at least the previous one in ``d_x`` and ``L``.
    order : int
        Derivative order ``m >= 0``.
    d_k : int
        Head dimension.
    x_norm : float
        :math:`M_X > 0`.
    radius : float
        :math:`M_\omega > 0`.
    n_chains : int
        Number of chains ``R``.
    base_starts : int
        Random starts per chain at the first shape (without ``init``).
    starts : int
        Further random starts per chain at every later shape (may be 0).
    n_steps : int
        Adam steps of every ascent.
    generator : torch.Generator
        Draws every start.
    init : tuple of Tensor, optional
        ``(omega (R, .), X (R, ., .), u (R, .))``: the chains' points at a smaller shape, to
        continue from.
    init_noise : float, default 0.05
        Relative size of the move of the padded point's copy.
    progress : bool, default True
        Show progress bars.

    Returns
    -------
    values : Tensor (len(shapes), R), float64
        ``values[s, c]``: the value of chain ``c`` at shape ``s``.
    points : list of (Tensor, Tensor, Tensor)
        Per shape, the chains' points ``(omega (R, d_omega), X (R, L, d_x), u (R, d_omega))``.

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.smoothness import ascent_chains
    >>> v, pts = ascent_chains([(3, 2, 3), (4, 2, 3)], 0, d_k=2, x_norm=2.0, radius=2.0, n_chains=2,
    ...                        base_starts=2, starts=1, n_steps=50,
    ...                        generator=torch.Generator().manual_seed(0), progress=False)
    >>> v.shape, pts[1][1].shape
    (torch.Size([2, 2]), torch.Size([2, 3, 4]))
    >>> bool((v[1] >= v[0]).all())  # a chain never loses its padded point
    True
    """
    shapes = [tuple(s) for s in shapes]
    if not shapes or any(len(s) != 3 for s in shapes):
        raise ValueError("shapes: expected a non-empty sequence of (d_x, d_v, L)")
    for k, v in dict(n_chains=n_chains, base_starts=base_starts).items():
        check_positive(v, k, integer=True)
    check_positive(starts, "starts", integer=True, allow_zero=True)
    R, vals, pts, out = n_chains, [], init, []
    if init is not None and (not isinstance(init, (tuple, list)) or len(init) != 3 or init[0].shape[0] != R):
        raise ValueError(f"init: expected a tuple (omega, X, u) of {R} points, one per chain")
    for d_x, d_v, L in shapes:
        per, K0 = (base_starts, 0) if pts is None else (starts, R)
        model = HeadModel(torch.eye(d_x, d_v, dtype=torch.float64), d_k)
        r = feature_derivative_max(model, order, L=L, x_norm=x_norm, radius=radius, n_starts=R * per,
                                   n_steps=n_steps, init=pts, init_noise=init_noise if K0 else 0.0,
                                   generator=generator, progress=progress)
        own = [([c, K0 + c] if K0 else []) + list(range(2 * K0 + c * per, 2 * K0 + (c + 1) * per))
               for c in range(R)]  # chain c: its padded point, its moved copy, its random starts
        best = [max(ix, key=lambda j: float(r.value[j])) for ix in own]
        vals.append(r.value[best])
        pts = tuple(t[best] for t in (r.omega, r.X, r.u))
        out.append(pts)
    return torch.stack(vals), out


def dimension_sweeps(
    order: int,
    *,
    sizes,
    L_sizes,
    L: int,
    d_k: int,
    d_v: int = 4,
    d_x_for_dv: int = 8,
    generator: torch.Generator,
    **chains,
) -> dict:
    r"""The three sweeps of Remark 3.5 for one derivative order: in ``d_x``, in ``d_v``, in ``L``.

    In turn, from one ``generator``: :func:`ascent_chains` over ``(d_x, d_v, L)`` for ``d_x`` in
    ``sizes``; over ``(d_x_for_dv, d, L)`` for ``d`` in ``sizes``, continuing from the first sweep's
    points at ``d_x = d_x_for_dv``; over ``(max(l, 2 d_k), d_v, l)`` for ``l`` in ``L_sizes``.

    Parameters
    ----------
    order : int
        Derivative order ``m >= 0``.
    sizes : sequence of int
        Increasing model dimensions (and vocabulary sizes); must contain ``d_x_for_dv``.
    L_sizes : sequence of int
        Increasing sequence lengths.
    L : int
        Sequence length of the ``d_x`` and ``d_v`` sweeps.
    d_k : int
        Head dimension.
    d_v : int, default 4
        Vocabulary size of the ``d_x`` and ``L`` sweeps.
    d_x_for_dv : int, default 8
        Model dimension of the ``d_v`` sweep.
    generator : torch.Generator
        Draws every start of the three sweeps.
    **chains
        ``x_norm``, ``radius``, ``n_chains``, ``base_starts``, ``starts``, ``n_steps`` (and
        optionally ``progress``) of :func:`ascent_chains`.

    Returns
    -------
    dict
        ``{"dx": (len(sizes), R), "dv": (len(sizes), R), "L": (len(L_sizes), R)}``, float64 tensors of
        the chains' values.

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.smoothness import dimension_sweeps
    >>> r = dimension_sweeps(0, sizes=[4, 6], L_sizes=[2, 3], L=2, d_k=1, d_x_for_dv=4, x_norm=2.0,
    ...                      radius=2.0, n_chains=2, base_starts=2, starts=0, n_steps=20,
    ...                      generator=torch.Generator().manual_seed(0), progress=False)
    >>> {k: tuple(v.shape) for k, v in r.items()}
    {'dx': (2, 2), 'dv': (2, 2), 'L': (2, 2)}
    """
    sizes, L_sizes = [int(s) for s in sizes], [int(s) for s in L_sizes]
    if d_x_for_dv not in sizes:
        raise ValueError(f"sizes: must contain d_x_for_dv = {d_x_for_dv}, got {sizes}")
    if not L_sizes:
        raise ValueError("L_sizes: expected at least one length")
    kw = dict(d_k=d_k, generator=generator, **chains)
    dx, pts = ascent_chains([(d, d_v, L) for d in sizes], order, **kw)
    dv, _ = ascent_chains([(d_x_for_dv, d, L) for d in sizes], order, init=pts[sizes.index(d_x_for_dv)], **kw)
    Ls, _ = ascent_chains([(max(l, 2 * d_k), d_v, l) for l in L_sizes], order, **kw)
    return {"dx": dx, "dv": dv, "L": Ls}


def chain_spread(values) -> float:
    r"""Largest relative spread between chains over a sweep: :math:`\max_s (\max_c v - \min_c v)/\max_c v`.

    Parameters
    ----------
    values : array or Tensor (S, R)
        Positive values of ``R`` chains at ``S`` sizes (as from :func:`ascent_chains`).

    Returns
    -------
    float
        The largest relative spread, in ``[0, 1)``.

    Raises
    ------
    ValueError
        If ``values`` is not 2-D with positive entries.

    Examples
    --------
    >>> from mfattn.analysis.smoothness import chain_spread
    >>> chain_spread([[4.0, 3.0], [2.0, 2.0]])
    0.25
    """
    v = torch.as_tensor(values, dtype=torch.float64)
    if v.ndim != 2 or v.numel() == 0 or not bool((v > 0).all()):
        raise ValueError(f"values: expected a non-empty 2-D array of positive values, got shape {tuple(v.shape)}")
    hi, lo = v.max(1).values, v.min(1).values
    return float(((hi - lo) / hi).max())


def mixture_derivative(model: HeadModel, data, rho: torch.Tensor, nu: torch.Tensor, steps):
    r"""Both sides of the first-variation identity (12) for :math:`\rho_\varepsilon = (1-\varepsilon)\rho + \varepsilon\nu`.

    The left side :math:`\frac{d}{d\varepsilon}\mathcal E(\rho_\varepsilon)|_0` by the second-order
    one-sided difference :math:`(-3f(0) + 4f(h) - f(2h))/(2h)` at each step ``h`` (a negative
    :math:`\varepsilon` would not give a measure); the right side
    :math:`\int\Phi(\omega;\rho)\,(\nu-\rho)(d\omega)` from :meth:`~mfattn.models.model.HeadModel.first_variation`.
    ``rho`` and ``nu`` are uniform empirical measures.

    Parameters
    ----------
    model : HeadModel
        The model.
    data : Dataset
        The data of the risk.
    rho, nu : Tensor (N, d_omega), (N', d_omega)
        Atoms of the two measures.
    steps : sequence of float
        Positive steps ``h``.

    Returns
    -------
    lhs : ndarray (len(steps),), float64
        The difference quotient at each step.
    rhs : float
        The right side of (12).

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    >>> from mfattn.analysis.smoothness import mixture_derivative
    >>> from mfattn.models.tasks import example
    >>> model, data, rho, _ = example()
    >>> lhs, rhs = mixture_derivative(model, data, rho, 1.5 * rho.flip(0), [1e-3, 1e-4])
    >>> bool(abs(lhs[1] - rhs) < 1e-6 * abs(rhs))
    True
    """
    import numpy as np

    rho, nu = model.check_heads(rho, "rho"), model.check_heads(nu, "nu")
    hs = np.asarray(steps, dtype=np.float64)
    if hs.ndim != 1 or not bool((hs > 0).all()) or not bool(np.isfinite(hs).all()):
        raise ValueError("steps: expected a 1-D sequence of positive finite steps")
    kw = dict(dtype=rho.dtype, device=rho.device)
    w_rho, w_nu = torch.full((len(rho),), 1.0 / len(rho), **kw), torch.full((len(nu),), 1.0 / len(nu), **kw)
    both = torch.cat([rho, nu])

    def E_mix(eps):
        return float(model.risk(data, both, torch.cat([(1 - eps) * w_rho, eps * w_nu])))

    rhs = float(model.first_variation(data, nu, rho).mean() - model.first_variation(data, rho, rho).mean())
    f0 = E_mix(0.0)
    return np.array([(-3 * f0 + 4 * E_mix(h) - E_mix(2 * h)) / (2 * h) for h in hs]), rhs


def directional_derivative_errors(model: HeadModel, data, query: torch.Tensor, heads: torch.Tensor,
                                  u: torch.Tensor, steps):
    r"""Errors of the gradient formula (13) against central differences of :math:`\Phi`, per step.

    At each step ``h``,

    .. math:: \max_i \frac{|(\Phi(q_i + hu_i) - \Phi(q_i - hu_i))/(2h) - \langle\nabla\Phi(q_i), u_i\rangle|}
              {\|\nabla\Phi(q_i)\|},

    with :math:`\Phi = \Phi(\cdot;\rho)` for the uniform measure on ``heads``.

    Parameters
    ----------
    model : HeadModel
        The model.
    data : Dataset
        The data.
    query : Tensor (M, d_omega)
        Query heads.
    heads : Tensor (N, d_omega)
        Atoms of the measure :math:`\rho`.
    u : Tensor (M, d_omega)
        Directions, one per query head.
    steps : sequence of float
        Positive steps ``h``.

    Returns
    -------
    ndarray (len(steps),), float64
        The largest relative error over the query heads, per step.

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.smoothness import directional_derivative_errors
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, _ = example()
    >>> err = directional_derivative_errors(model, data, heads, heads, torch.ones_like(heads), [1e-2, 1e-5])
    >>> bool(err[1] < err[0] < 1e-2)
    True
    """
    import numpy as np

    query, heads = model.check_heads(query, "query"), model.check_heads(heads, "heads")
    if not isinstance(u, torch.Tensor) or u.shape != query.shape:
        raise ValueError(f"u: expected a tensor of the query's shape {tuple(query.shape)}")
    hs = [float(h) for h in steps]
    if not hs or any(not (h > 0 and np.isfinite(h)) for h in hs):
        raise ValueError("steps: expected a non-empty sequence of positive finite steps")
    grad = model.grad_first_variation(data, query, heads)
    dirderiv = (grad * u).sum(1)
    out = []
    for h in hs:
        fd = (model.first_variation(data, query + h * u, heads) - model.first_variation(data, query - h * u, heads)) / (2 * h)
        out.append(float(((fd - dirderiv).abs() / grad.norm(dim=1)).max()))
    return np.array(out)


def minibatch_mse(per: torch.Tensor, full: torch.Tensor, sizes, n_replicates: int, generator: torch.Generator):
    r"""Squared errors of minibatch means of per-sequence gradients against the full gradient (18).

    For each size ``S``, ``n_replicates`` minibatches of ``S`` sequences drawn with replacement
    (``torch.randint`` from ``generator``, one ``(n_replicates, S)`` draw per size, in order); each
    minibatch mean of ``per`` is compared with ``full`` in the squared Frobenius norm. Its
    expectation is :math:`\operatorname{tr}\Sigma/S`.

    Parameters
    ----------
    per : Tensor (n, N, d_omega)
        Per-sequence gradients (:meth:`~mfattn.models.model.HeadModel.per_sample_grad_first_variation`).
    full : Tensor (N, d_omega)
        Their mean over the ``n`` sequences.
    sizes : sequence of int
        Minibatch sizes ``S``.
    n_replicates : int
        Minibatches per size.
    generator : torch.Generator
        Draws the indices (CPU).

    Returns
    -------
    ndarray (len(sizes), n_replicates), float64
        The squared errors.

    Raises
    ------
    ValueError
        Naming the argument that is invalid.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.smoothness import minibatch_mse
    >>> per = torch.randn(8, 2, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    >>> mse = minibatch_mse(per, per.mean(0), [1, 4], 5, torch.Generator().manual_seed(1))
    >>> mse.shape
    (2, 5)
    """
    import numpy as np

    check_tensor(per, "per", ndim=3)
    check_tensor(full, "full", ndim=2)
    if tuple(full.shape) != tuple(per.shape[1:]):
        raise ValueError(f"full: expected shape {tuple(per.shape[1:])}, got {tuple(full.shape)}")
    check_positive(n_replicates, "n_replicates", integer=True)
    sizes = list(sizes)
    if not sizes:
        raise ValueError("sizes: expected at least one size")
    for S in sizes:
        check_positive(S, "sizes", integer=True)
    check_generator(generator)
    mse = []
    for S in sizes:
        idx = torch.randint(per.shape[0], (n_replicates, S), generator=generator).to(per.device)
        est = torch.stack([per[i].mean(0) for i in idx])  # one gather per replicate: (S, N, d) at a time
        mse.append(((est - full) ** 2).sum((1, 2)).cpu().numpy())
    return np.array(mse)
