r"""The fused head pass on CUDA: logits (8), ``Phi`` (11) and ``grad Phi`` (13) of every head in Triton
kernels, with the signatures and the meaning of :mod:`mfattn.models.fused` (the CPU pass).

The torch path of :class:`mfattn.models.model.HeadModel` materialises ``(heads, sequences, L, L)``
tiles (scores, ``A``, ``dA``, ``dS``) chunk by chunk, and with the model's tiny heads (``d_k = 2``,
``L = 8``) each of its batched kernels moves every tile through memory once more. The kernels here
keep one block of heads in registers for a whole sequence:

* one program per (block of :data:`BLOCK` heads, sequence) for :func:`head_sum`, and per (block of
  heads, slice of sequences) for :func:`head_pass`; a head's four matrices are loaded once per
  program, and its sequences are streamed through it;
* the causal softmax (6) is taken one row ``l`` at a time, stably (the row maximum is subtracted
  before the exponential, so scores of any size give no overflow): row ``l`` of ``A`` is built as a
  ``(heads, L)`` tile, used for row ``l`` of ``A V`` and, in the gradient pass, for row ``l`` of the
  softmax backward (4), then dropped; no ``(heads, sequences, L, L)`` tensor exists, in registers
  or in memory;
* the projections are never formed per token: the products with ``K = X W_K`` and ``V = X W_V``
  are reassociated through ``X`` (``q_l K^T = X (W_K q_l)``, ``A V = (A X) W_V``), so every tile is
  at most ``(heads, L, d_x)`` or ``(heads, d_x, d_k)``, three-dimensional, padded to powers of two.

Reductions across programs go through a buffer of partial sums and one ``torch.sum``, never
atomics: each program writes its own slot (the head sum of its block of heads on its sequence; the
gradient and ``Phi`` of its heads on its slice of sequences), and the slots are added in a fixed
order afterwards. The split is a function of the shapes alone, so a call gives the same bits every
time (floating-point atomics would add in the order the programs finish), and float64, which not
every atomic unit handles, needs nothing special. The buffers hold ``blocks x sequences x L x d_x``
numbers (at most :data:`PARTIAL_CAP`; blocks are grouped beyond it) for the head sum and
``heads x slices x d_omega`` for the gradient, with slices only when the blocks are too few to
fill the card.

Computes in the data's dtype, float32 or float64. ``HeadModel`` selects this path for CUDA tensors
when :func:`available` (``HeadModel(fused=False)`` forces the torch path, which stays this path's
oracle); the CPU keeps :mod:`mfattn.models.fused`. Triton's interpreter (``TRITON_INTERPRET=1`` set
before triton is imported) runs the same kernels on CPU tensors: ``tests/test_triton.py`` checks
them so against the float64 torch engine.
"""

from __future__ import annotations

import math
import os

import torch

from .._checks import check_dim, check_tensor, untraced

__all__ = ["BLOCK", "PROGRAMS", "PARTIAL_CAP", "available", "interpreted", "plain", "head_sum", "head_pass"]

#: Heads per program (a power of two): the vector axis of every tile.
BLOCK = 32
#: Programs aimed at for :func:`head_pass` (a fixed number, so that the split, and with it the order of
#: the sums, depends on the shapes only): sequences are sliced until the blocks times the slices reach it.
PROGRAMS = 1024
#: The most numbers the head sum's buffer of partial sums may hold; blocks of heads are grouped beyond.
PARTIAL_CAP = 1 << 24

try:  # triton is pinned, but the engine must still run (on its torch path) where it cannot be imported
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only without triton
    triton = None


def interpreted() -> bool:
    """Whether Triton runs its kernels in the interpreter (``TRITON_INTERPRET=1``, on CPU tensors).

    Returns
    -------
    bool
        True when the environment variable is set (triton reads it when it decorates the kernels,
        so it must be set before this module is first imported).

    Examples
    --------
    >>> import os
    >>> from mfattn.models import fused_cuda
    >>> fused_cuda.interpreted() == (os.environ.get("TRITON_INTERPRET") == "1")
    True
    """
    return os.environ.get("TRITON_INTERPRET") == "1"


def available() -> bool:
    """Whether the Triton path can run here: triton imports, and a CUDA device is present or the
    interpreter is on (:func:`interpreted`).

    Returns
    -------
    bool

    Examples
    --------
    >>> from mfattn.models import fused_cuda
    >>> isinstance(fused_cuda.available(), bool)
    True
    """
    return triton is not None and (interpreted() or torch.cuda.is_available())


def plain(*tensors) -> bool:
    """Whether the tensors can go through the Triton kernels: CUDA float32/float64 tensors that no
    autograd, ``torch.func`` transform or forward-mode dual level is tracing (a traced call takes
    the torch path, which is differentiable). The CUDA counterpart of :func:`mfattn.models.fused.plain`.

    Parameters
    ----------
    *tensors : Tensor
        The inputs of one call.

    Returns
    -------
    bool
        True when every tensor is plain and on a CUDA device.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models import fused_cuda
    >>> fused_cuda.plain(torch.zeros(2, dtype=torch.float64))  # a CPU tensor
    False
    """
    return untraced(tensors, "cuda")


if triton is not None:
    # The reductions are tl.reduce with triton's own combine functions, what tl.sum and tl.max compile to
    # for float32 and float64: called so, Triton's interpreter (the CI's check) maps them to numpy at
    # once, where tl.sum, a jit function itself, costs a millisecond per call there. Where a triton
    # release has renamed them, the same functions are defined here (the interpreter is then slower).
    _add = getattr(tl.standard, "_sum_combine", None)
    _max = getattr(tl.standard, "_elementwise_max", None)
    if _add is None or _max is None:  # pragma: no cover - other triton releases
        @triton.jit
        def _add(a, b):
            return a + b

        @triton.jit
        def _max(a, b):
            return tl.maximum(a, b)

    @triton.jit
    def _weights(Hd, hs, hm, xs, xm, ks, km, D_X, D_K):  # pragma: no cover - compiled
        # the block's W_Q, W_K, W_V (BH, XP, KP) and W_O transposed (BH, XP, KP: [h, x, k] = W_O[h][k, x])
        m = D_X * D_K
        base = Hd + hs.to(tl.int64)[:, None, None] * (4 * m)
        mask = hm[:, None, None] & xm[None, :, None] & km[None, None, :]
        xk = xs[None, :, None] * D_K + ks[None, None, :]
        WQ = tl.load(base + xk, mask=mask, other=0.0)
        WK = tl.load(base + m + xk, mask=mask, other=0.0)
        WV = tl.load(base + 2 * m + xk, mask=mask, other=0.0)
        WO = tl.load(base + 3 * m + ks[None, None, :] * D_X + xs[None, :, None], mask=mask, other=0.0)
        return WQ, WK, WV, WO

    @triton.jit
    def _sum_kernel(X, Hd, W, S, P, N, L, D_X, D_K, n_blocks, groups,
                    BH: tl.constexpr, LP: tl.constexpr, XP: tl.constexpr, KP: tl.constexpr):  # pragma: no cover
        # P[g, b] (L, d_x) = sum over the heads h of the blocks g, g + groups, ... of w_h (A_h X W_V,h W_O,h)[b]
        g = tl.program_id(0)
        b = tl.program_id(1)
        B = tl.num_programs(1)
        scale = tl.load(S)
        hh, js, xs, ks = tl.arange(0, BH), tl.arange(0, LP), tl.arange(0, XP), tl.arange(0, KP)
        jm, xm, km = js < L, xs < D_X, ks < D_K
        row0 = X + b.to(tl.int64) * L * D_X
        Xb = tl.load(row0 + js[:, None] * D_X + xs[None, :], mask=jm[:, None] & xm[None, :], other=0.0)
        acc = tl.zeros([LP, XP], dtype=X.dtype.element_ty)
        for blk in range(g, n_blocks, groups):
            hs = blk * BH + hh
            hm = hs < N
            w = tl.load(W + hs, mask=hm, other=0.0)
            WQ, WK, WV, WO = _weights(Hd, hs, hm, xs, xm, ks, km, D_X, D_K)
            for l in range(L):
                xl = tl.load(row0 + l * D_X + xs, mask=xm, other=0.0)
                # row l of the causal softmax (6) of scale Q K^T, stable: the row's maximum is subtracted
                # before the exponential; j > l (and the padding j >= L) get weight 0. Written out, not
                # a helper: Triton's interpreter (the CI's check) pays milliseconds per helper call
                q = tl.reduce(xl[None, :, None] * WQ, 1, _add)  # q_l = X_l W_Q (BH, KP)
                qk = tl.reduce(WK * q[:, None, :], 2, _add)  # W_K q_l (BH, XP)
                s = tl.reduce(qk[:, None, :] * Xb[None, :, :], 2, _add)  # q_l . K_j = X_j . (W_K q_l) (BH, LP)
                s = tl.where((js <= l)[None, :], s, float("-inf"))
                p = tl.where((js <= l)[None, :], tl.exp((s - tl.reduce(s, 1, _max)[:, None]) * scale), 0.0)
                A = p / tl.reduce(p, 1, _add)[:, None]
                u = tl.reduce(A[:, :, None] * Xb[None, :, :], 1, _add)  # (A X)_l (BH, XP)
                av = tl.reduce(u[:, :, None] * WV, 1, _add)  # (A V)_l = (A X)_l W_V (BH, KP)
                o = tl.reduce(WO * av[:, None, :], 2, _add)  # (A V W_O)_l (BH, XP)
                r = tl.reduce(w[:, None] * o, 0, _add)  # the weighted head sum (XP,)
                acc = tl.where(js[:, None] == l, acc + r[None, :], acc)
        out = P + (g.to(tl.int64) * B + b) * L * D_X
        tl.store(out + js[:, None] * D_X + xs[None, :], acc, mask=jm[:, None] & xm[None, :])

    @triton.jit
    def _pass_kernel(X, G, Hd, S, OUT, PHI, N, B, L, D_X, D_K, per,
                     BH: tl.constexpr, LP: tl.constexpr, XP: tl.constexpr, KP: tl.constexpr,
                     GRAD: tl.constexpr):  # pragma: no cover - compiled
        # OUT[blk, s] (BH, d_omega) = gradient in omega of sum_{b in slice s, l, x} G[b,l,x] out_omega(X)[b,l,x]
        # and PHI[blk, s] (BH,) = that sum (eq. (11) restricted to the slice), for the heads of block blk
        blk = tl.program_id(0)
        sl = tl.program_id(1)
        n_sl = tl.num_programs(1)
        dt = X.dtype.element_ty
        scale = tl.load(S)
        hh, js, xs, ks = tl.arange(0, BH), tl.arange(0, LP), tl.arange(0, XP), tl.arange(0, KP)
        jm, xm, km = js < L, xs < D_X, ks < D_K
        hs = blk * BH + hh
        hm = hs < N
        WQ, WK, WV, WO = _weights(Hd, hs, hm, xs, xm, ks, km, D_X, D_K)
        phi = tl.zeros([BH], dtype=dt)
        gQ = tl.zeros([BH, XP, KP], dtype=dt)  # dW_Q, dW_K, dW_V at [h, x, k]; dW_O at [h, x, k] = d W_O[k, x]
        gK = tl.zeros([BH, XP, KP], dtype=dt)
        gV = tl.zeros([BH, XP, KP], dtype=dt)
        gO = tl.zeros([BH, XP, KP], dtype=dt)
        b0 = sl * per
        b1 = tl.minimum(B, b0 + per)
        row0 = X + b0.to(tl.int64) * L * D_X  # sequence b's first token, advanced with b
        grow0 = G + b0.to(tl.int64) * L * D_X
        for b in range(b0, b1):
            Xb = tl.load(row0 + js[:, None] * D_X + xs[None, :], mask=jm[:, None] & xm[None, :], other=0.0)
            for l in range(L):
                xl = tl.load(row0 + l * D_X + xs, mask=xm, other=0.0)
                gl = tl.load(grow0 + l * D_X + xs, mask=xm, other=0.0)
                # row l of the softmax, as in _sum_kernel
                q = tl.reduce(xl[None, :, None] * WQ, 1, _add)
                qk = tl.reduce(WK * q[:, None, :], 2, _add)
                s = tl.reduce(qk[:, None, :] * Xb[None, :, :], 2, _add)
                s = tl.where((js <= l)[None, :], s, float("-inf"))
                p = tl.where((js <= l)[None, :], tl.exp((s - tl.reduce(s, 1, _max)[:, None]) * scale), 0.0)
                A = p / tl.reduce(p, 1, _add)[:, None]
                u = tl.reduce(A[:, :, None] * Xb[None, :, :], 1, _add)  # (A X)_l (BH, XP)
                av = tl.reduce(u[:, :, None] * WV, 1, _add)  # (A V)_l (BH, KP)
                dav = tl.reduce(WO * gl[None, :, None], 1, _add)  # dAV_l = G_l W_O^T (BH, KP)
                phi += tl.reduce(av * dav, 1, _add)
                if GRAD:
                    gO += gl[None, :, None] * av[:, None, :]  # dW_O[k, x] += AV_l[k] G_l[x]
                    # softmax backward (4) on row l: dS_j = A_lj (dA_lj - sum_i A_li dA_li), dA_lj = <dAV_l, V_j>
                    vd = tl.reduce(WV * dav[:, None, :], 2, _add)  # W_V dAV_l (BH, XP)
                    dA = tl.reduce(vd[:, None, :] * Xb[None, :, :], 2, _add)  # (BH, LP)
                    r = tl.reduce(dA * A, 1, _add)
                    dS = A * (dA - r[:, None])
                    t = tl.reduce(dS[:, :, None] * Xb[None, :, :], 1, _add)  # sum_j dS_j X_j (BH, XP)
                    dq = tl.reduce(t[:, :, None] * WK, 1, _add)  # dQ_l = sum_j dS_j K_j (BH, KP)
                    gQ += xl[None, :, None] * (scale * dq)[:, None, :]  # dW_Q += X_l^T scale dQ_l
                    gK += (scale * t)[:, :, None] * q[:, None, :]  # dW_K += sum_j X_j^T scale dS_j q_l
                    gV += u[:, :, None] * dav[:, None, :]  # dW_V += sum_j X_j^T A_lj dAV_l
            row0 += L * D_X
            grow0 += L * D_X
        slot = blk.to(tl.int64) * n_sl + sl
        tl.store(PHI + slot * BH + hh, phi)
        if GRAD:
            m = D_X * D_K
            base = OUT + (slot * BH + hh.to(tl.int64))[:, None, None] * (4 * m)
            mask = xm[None, :, None] & km[None, None, :]
            xk = xs[None, :, None] * D_K + ks[None, None, :]
            tl.store(base + xk, gQ, mask=mask)
            tl.store(base + m + xk, gK, mask=mask)
            tl.store(base + 2 * m + xk, gV, mask=mask)
            tl.store(base + 3 * m + ks[None, None, :] * D_X + xs[None, :, None], gO, mask=mask)


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def _block(N: int) -> int:
    """Heads per program: :data:`BLOCK`, or fewer (a power of two) when the heads are fewer."""
    return min(_pow2(BLOCK), _pow2(N))


def _check(X, heads, d_k, *, G=None, weights=None, flags=()) -> None:
    """Raise ValueError, naming the argument, unless the inputs fit the kernels."""
    check_tensor(X, "X", ndim=3, finite=False)
    if min(X.shape) < 1:
        raise ValueError(f"X: expected a non-empty (B, L, d_x) tensor, got shape {tuple(X.shape)}")
    if not isinstance(d_k, int) or isinstance(d_k, bool) or d_k < 1:
        raise ValueError(f"d_k: expected a positive integer, got {d_k!r}")
    check_tensor(heads, "heads", ndim=2, dtype=X.dtype, device=X.device, finite=False)
    check_dim(heads, "heads", 1, 4 * X.shape[2] * d_k, "d_omega = 4 d_x d_k")
    if heads.shape[0] < 1:
        raise ValueError("heads: needs at least one head")
    if G is not None:
        check_tensor(G, "G", ndim=3, dtype=X.dtype, device=X.device, finite=False)
        if G.shape != X.shape:
            raise ValueError(f"G: shape {tuple(G.shape)} does not match X's {tuple(X.shape)}")
    if weights is not None:
        check_tensor(weights, "weights", ndim=1, dtype=X.dtype, device=X.device, finite=False)
        check_dim(weights, "weights", 0, heads.shape[0], "the number of heads")
    for name, v in flags:
        if not isinstance(v, bool):
            raise ValueError(f"{name}: expected True or False, got {v!r}")
    if X.device.type != "cuda" and not (interpreted() and X.device.type == "cpu"):  # last: the shapes are told first
        raise ValueError(f"X: on device {X.device}; the Triton pass needs CUDA tensors (CPU tensors only under "
                         "TRITON_INTERPRET=1)")


def _require() -> None:
    if not available():
        raise RuntimeError("the Triton pass needs triton installed and a CUDA device (or TRITON_INTERPRET=1 set "
                           "before triton is imported)")


def _prep(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous()


def _scale(X: torch.Tensor, d_k: int) -> torch.Tensor:
    # a tensor in the data's dtype: a Python float argument would reach the kernel as a float32 scalar
    return torch.full((1,), 1.0 / math.sqrt(d_k), dtype=X.dtype, device=X.device)


def head_sum(X: torch.Tensor, heads: torch.Tensor, weights: torch.Tensor, d_k: int) -> torch.Tensor:
    r"""``sum_i w_i A_i(X) X W_V,i W_O,i`` (B, L, d_x): the weighted head sum of eq. (8) before ``W_out``,
    in Triton kernels; :func:`mfattn.models.fused.head_sum` on CUDA.

    One program per (group of blocks of heads, sequence) writes its partial head sum; the groups'
    sums are added by one ``torch.sum`` (see the module docstring).

    Parameters
    ----------
    X : Tensor (B, L, d_x), float32 or float64, on a CUDA device
        Token sequences (CPU tensors under ``TRITON_INTERPRET=1``).
    heads : Tensor (N, 4 d_x d_k)
        Heads in the model's layout (``W_Q, W_K, W_V, W_O`` row-major), the dtype and device of ``X``.
    weights : Tensor (N,)
        Their weights.
    d_k : int
        Head dimension.

    Returns
    -------
    Tensor (B, L, d_x)
        The weighted head sum, in model space.

    Raises
    ------
    ValueError
        Naming the argument whose shape, dtype or device does not fit.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models import fused_cuda
    >>> from mfattn.models.model import HeadModel
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, w = example()
    >>> fused_cuda.head_sum(data.X, heads[:, :20], w, 2)
    Traceback (most recent call last):
        ...
    ValueError: heads: dimension 1 has size 20, expected d_omega = 4 d_x d_k = 24
    >>> cu = lambda t: t.cuda().float()
    >>> z = fused_cuda.head_sum(cu(data.X), cu(heads), cu(w), 2) @ cu(model.W_out)  # doctest: +SKIP
    >>> torch_path = HeadModel(model.W_out, d_k=2, fused=False)
    >>> bool(torch.allclose(z.cpu().double(), torch_path.logits(data.X, heads, w), rtol=1e-5))  # doctest: +SKIP
    True
    """
    _check(X, heads, d_k, weights=weights)
    _require()
    X, heads, weights = _prep(X), _prep(heads), _prep(weights)
    B, L, d_x = X.shape
    N = heads.shape[0]
    BH = _block(N)
    nb = -(-N // BH)
    groups = max(1, min(nb, PARTIAL_CAP // (B * L * d_x)))
    partial = torch.empty((groups, B, L, d_x), dtype=X.dtype, device=X.device)
    _sum_kernel[(groups, B)](X, heads, weights, _scale(X, d_k), partial, N, L, d_x, d_k, nb, groups,
                             BH=BH, LP=_pow2(L), XP=_pow2(d_x), KP=_pow2(d_k))
    return partial.sum(0) if groups > 1 else partial[0]


def head_pass(X: torch.Tensor, G: torch.Tensor, heads: torch.Tensor, d_k: int, *, grad: bool = True,
              per_sample: bool = False):
    r"""``grad Phi`` (13) and ``Phi`` (11) of each head for a frozen residual ``G``, in Triton kernels;
    :func:`mfattn.models.fused.head_pass` on CUDA.

    ``Phi(omega) = sum_{b,l,x} G[b,l,x] out_omega(X)[b,l,x]`` with ``out`` the head output
    ``A X W_V W_O`` and ``G`` the scaled pulled-back residual; the gradient is the hand-written
    backward pass of the head, softmax backward (4) included. One program per (block of heads,
    slice of sequences) writes its partial gradient and ``Phi``; the slices are added by one
    ``torch.sum`` (with ``per_sample`` every slice is one sequence, and nothing is added).

    Parameters
    ----------
    X : Tensor (B, L, d_x), float32 or float64, on a CUDA device
        Token sequences (CPU tensors under ``TRITON_INTERPRET=1``).
    G : Tensor (B, L, d_x)
        The scaled pulled-back residual.
    heads : Tensor (M, 4 d_x d_k)
        The heads (queries) to differentiate at.
    d_k : int
        Head dimension.
    grad : bool, optional
        Compute the gradient (else only ``Phi``). Default: True.
    per_sample : bool, optional
        Keep one gradient and one ``Phi`` per sequence instead of their sums. Default: False.

    Returns
    -------
    grad : Tensor (M, d_omega), (B, M, d_omega) with ``per_sample``, or None
        :math:`\nabla_\omega\Phi` of each head (None when ``grad`` is False).
    phi : Tensor (M,), or (B, M) with ``per_sample``
        :math:`\Phi` of each head.

    Raises
    ------
    ValueError
        Naming the argument whose shape, dtype, device or type does not fit.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models import fused_cuda
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, w = example()
    >>> G = model.evaluate(data.X, data.Y, heads, w)[1]
    >>> fused_cuda.head_pass(data.X, G[:2], heads, 2)
    Traceback (most recent call last):
        ...
    ValueError: G: shape (2, 3, 3) does not match X's (4, 3, 3)
    >>> cu = lambda t: t.cuda().float()
    >>> grad, phi = fused_cuda.head_pass(cu(data.X), cu(G), cu(heads), 2)  # doctest: +SKIP
    >>> ref = model.grad_first_variation(data, heads, heads, w)  # doctest: +SKIP
    >>> bool(torch.allclose(grad.cpu().double(), ref, rtol=1e-4, atol=1e-6))  # doctest: +SKIP
    True
    """
    _check(X, heads, d_k, G=G, flags=(("grad", grad), ("per_sample", per_sample)))
    _require()
    X, G, heads = _prep(X), _prep(G), _prep(heads)
    B, L, d_x = X.shape
    M, D = heads.shape
    BH = _block(M)
    nb = -(-M // BH)
    per = 1 if per_sample else -(-B // max(1, min(B, -(-PROGRAMS // nb))))
    splits = -(-B // per)
    out = torch.empty((nb, splits, BH, D if grad else 1), dtype=X.dtype, device=X.device)
    phi = torch.empty((nb, splits, BH), dtype=X.dtype, device=X.device)
    _pass_kernel[(nb, splits)](X, G, heads, _scale(X, d_k), out, phi, M, B, L, d_x, d_k, per,
                               BH=BH, LP=_pow2(L), XP=_pow2(d_x), KP=_pow2(d_k), GRAD=grad)
    if per_sample:  # (nb, B, BH, D) -> (B, M, D)
        g = out.transpose(0, 1).reshape(B, nb * BH, D)[:, :M] if grad else None
        return g, phi.transpose(0, 1).reshape(B, nb * BH)[:, :M]
    g = (out.sum(1) if splits > 1 else out[:, 0]).reshape(nb * BH, D)[:M] if grad else None
    return g, (phi.sum(1) if splits > 1 else phi[:, 0]).reshape(nb * BH)[:M]
