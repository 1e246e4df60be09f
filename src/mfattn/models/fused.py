r"""The fused CPU head pass: logits (8), ``Phi`` (11) and ``grad Phi`` (13) of every head in one
sweep over each ``(L, L)`` attention tile, compiled with numba.

On a CPU the torch path of :class:`mfattn.models.model.HeadModel` is bound by memory traffic, not by
arithmetic: with the model's tiny heads (``d_k = 2``, ``L = 8``) each of its twenty-odd batched
kernels (projections, scores, softmax, ``A V``, the backward products, the permutations between
them) reads and writes every ``(head, sequence, L, L)`` tile once more. The kernels here keep one
block of heads' tiles in registers and L1 for the whole forward and backward pass:

* heads are processed in blocks (:func:`block_width`: 64 heads, or 128 float32 ones; 32 for the
  float64 head sum) laid out innermost (``(block, d_omega, heads)``), so that every arithmetic loop
  runs over contiguous heads and the compiler vectorises it; the kernels of the full widths are compiled with
  the width a constant, so that each loop over the heads is a fixed number of vector operations, and
  at the package's task shapes (:data:`SHAPES`) with ``L``, ``d_x``, ``d_k`` constants too and their
  scratch rows on the stack, so that the compiler may keep rows in registers; no
  loop reduces along the vector axis (but the weighted head sum of the logits, in a fixed order),
  so a head's result does not depend on the vector width, the block size or the number of threads;
* the causal softmax is taken one row at a time: row ``l`` of ``A`` is built, used for row ``l``
  of ``A V`` and, in the gradient pass, for row ``l`` of the softmax backward (4) and its
  contributions to ``dQ``, ``dK``, ``dV``, then dropped, so no ``(L, L)`` tile is ever stored;
* the tasks of the parallel loop are (block of heads, slice of sequences), a split fixed by the
  shapes alone, and the slices' partial sums are added in a fixed order afterwards: the result is
  the same bits for any thread count.

``HeadModel`` selects this path on the CPU when numba is importable (``HeadModel(fused=...)``
forces either path); the torch path stays the CUDA path and this path's oracle
(``tests/test_fused.py``: equal to 1e-12 relative in float64). Used by every chapter through
``HeadModel.logits``, ``evaluate``, ``grad_at`` and ``phi_at``; measured by ``python -m mfattn bench``.

The same module holds the fused pass of chapter 06's token systems (:func:`token_velocity`,
:func:`token_sums`; :mod:`mfattn.models.tokens` selects it on the CPU): tokens in blocks of
:data:`BLOCK` lanes, one sweep over the other tokens for the attention sums, then the perceptron's
drift and the tangent projection, with the same exponential and the same fixed order of sums.

The kernels are compiled on first use for each dtype (float32, float64) and cached on disk
(numba's ``cache=True``: beside this file, or under ``NUMBA_CACHE_DIR``), so a later process
loads them instead of compiling; :func:`compile_seconds` reports both, for every kernel but those
of :data:`SHAPES`, which compile at the first call at their shape (about 6 s each).
"""

from __future__ import annotations

import math
import os
import time

import numpy as np
import torch

from .. import kernel_threads
from .._checks import untraced

__all__ = ["BLOCK", "BLOCK_FLOAT32", "WIDE_FROM", "ROW_BYTES", "COMPILED_WIDTHS", "SHAPES", "STACK_BYTES", "block_width", "available", "plain", "head_sum", "head_pass", "head_energy", "token_sums", "token_velocity",
           "compile_seconds"]

#: The number of float64 heads per block of the weighted head sum (:func:`head_sum`), whose order of
#: summation follows the blocks, and the block of chapter 06's token kernels.
BLOCK = 32
#: The number of heads per block of every other head kernel, and of the float32 head sum: the wider
#: loop measured faster (``python -m mfattn bench --roofline``, its table of block widths). From
#: :data:`WIDE_FROM` heads on, blocks of twice as many (:func:`block_width`).
BLOCK_FLOAT32 = 64
#: The head count from which blocks are wider, up to ``2 * BLOCK_FLOAT32`` heads and
#: :data:`ROW_BYTES`: below it the last block's padding costs more than the wider loop gains
#: (measured on 2 cores, full gradient, d_k 2-8, L 8-32: 128 lanes 1.2-1.6x faster than 32 at 1024
#: and 4096 heads, 64 lanes 1.1-1.4x at 48 to 4096 heads, 128 lanes no faster than 32 at 160 heads).
WIDE_FROM = 512
#: The widest row of a block, in bytes: 128 float32 heads, 64 float64 ones. float64 blocks of 128
#: heads (rows of 1 KB, a task's scratch twice float32's) took 1.09-1.22x the time of blocks of 64 at
#: d_k, L = 8, 32 and 16, 64 (full gradient at 1024 heads, two cores), and about the same at the
#: smaller shapes; float32 blocks of 128 stay 1.05-1.10x faster than 64 at d_k <= 8
#: (book/benchmark.md, "Against the machine's own ceilings").
ROW_BYTES = 512
#: The block widths whose head kernels are compiled with the width a constant (``_head_kernels``);
#: a block of another width takes the kernels that read it at run time.
COMPILED_WIDTHS = (BLOCK_FLOAT32, 2 * BLOCK_FLOAT32)
#: The shapes (L, d_x, d_k) whose head kernels, at the widths of :data:`COMPILED_WIDTHS`, are compiled
#: with the shape a constant too: those of the package's tasks (:mod:`mfattn.models.tasks`: teacher and
#: markov, text). Their scratch rows then lie on the stack and every loop has a fixed length, which
#: lets the compiler keep rows in registers: at 1024 heads and 16 sequences, 1.3-1.6x less time for
#: the float32 gradient pass at (8, 4, 2), 1.2-1.45x in float64, the same bits (``tests/test_fused.py``).
#: Each such kernel compiles on its first call (about 6 s, then loaded from numba's cache).
SHAPES = ((8, 4, 2), (16, 8, 2))
#: The most scratch a task of the kernels of :data:`SHAPES` keeps on its thread's stack, in bytes,
#: counted as float64 numbers (the shapes above: at most 217 KB so counted, 110 KB in fact; a thread's
#: stack holds 2 MB or more unless OMP_STACKSIZE says less).
STACK_BYTES = 1 << 18
#: Parallel tasks aimed at per call, whatever the thread count (a fixed split keeps results
#: independent of it): enough to keep 16 cores busy when blocks are few.
_TASKS = 64

try:  # numba is a pinned dependency, but the engine must still run where it cannot be imported
    import numba
    from numba import njit, prange, types
    from numba.core import cgutils
    from numba.core.imputils import impl_ret_new_ref
    from numba.extending import intrinsic, overload
    from numba.np.arrayobj import _empty_nd_impl

    # OpenMP first: measured on 2 cores beside torch (whose own OpenMP threads spin for a while
    # after each operation), numba's workqueue pool waited on those spinning threads, about 250 us
    # per call however small, against 40-65 us with OpenMP (one head, 16 sequences). workqueue
    # remains the fallback where no OpenMP runtime is found; NUMBA_THREADING_LAYER, when set,
    # still decides.
    if "NUMBA_THREADING_LAYER" not in os.environ:
        numba.config.THREADING_LAYER_PRIORITY = ["omp", "tbb", "workqueue"]
except ImportError:  # pragma: no cover - exercised only without numba
    numba = None


def available() -> bool:
    """Whether the fused path can run here (numba imports).

    Returns
    -------
    bool
        True when numba is importable.

    Examples
    --------
    >>> from mfattn.models import fused
    >>> fused.available()
    True
    """
    return numba is not None


def _stack_sizes(width: int, shape) -> tuple:
    """The scratch sizes, in numbers, of the head kernels of blocks of ``width`` heads compiled for
    ``shape`` (L, d_x, d_k): those of ``_head_task``'s rows (L d_k H, L H, H, d_k H, H + 2) and of the
    output row o (d_x H); all zeros where the shape is read at run time (``(0, 0, 0)``: on the heap)."""
    L, d_x, d_k = shape
    on = 1 if L else 0
    return (on * L * d_k * width, on * L * width, on * width, on * d_k * width, on * (width + 2)), on * d_x * width


if numba is not None:
    @njit(inline="always", cache=True, error_model="numpy")
    def _project(X, Wb, blk, b, d_x, Q, K, V):  # pragma: no cover - compiled
        # Q, K, V (L, d_k, H) = X[b] (L, d_x) @ W_Q, W_K, W_V (d_x, d_k) of every head of the block
        L, d_k, H = Q.shape
        m = d_x * d_k
        for l in range(L):
            for k in range(d_k):
                for h in range(H):
                    Q[l, k, h] = 0.0
                    K[l, k, h] = 0.0
                    V[l, k, h] = 0.0
                for x in range(d_x):
                    xv = X[b, l, x]
                    i = x * d_k + k
                    for h in range(H):
                        Q[l, k, h] += xv * Wb[blk, i, h]
                        K[l, k, h] += xv * Wb[blk, m + i, h]
                        V[l, k, h] += xv * Wb[blk, 2 * m + i, h]

    def _exp_poly(r, C):  # pragma: no cover - its compiled forms, one per dtype, are the overload below
        # e^r for |r| <= ln 2 / 2 by Horner's rule: the Taylor polynomial whose remainder lies below half a
        # unit in the last place of r's dtype (C[5:] holds 1/13!, ..., 1/0!)
        degree = 7 if C.dtype == np.float32 else 13
        p = C[18 - degree]
        for c in C[19 - degree:]:
            p = p * r + c
        return p

    @overload(_exp_poly, inline="always")
    def _exp_poly_compiled(r, C):  # pragma: no cover - compiled
        if r == numba.types.float32:
            # degree 7: remainder (ln 2 / 2)^8 / 8! / e^(-ln 2 / 2) = 7e-9 relative, under float32's half
            # unit 6e-8 (degree 6 would leave 1.7e-7); six multiply-adds fewer than float64's per exponential
            def poly7(r, C):
                return ((((((C[11] * r + C[12]) * r + C[13]) * r + C[14]) * r + C[15]) * r + C[16]) * r
                        + C[17]) * r + C[18]
            return poly7

        def poly13(r, C):
            c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13 = (
                C[5], C[6], C[7], C[8], C[9], C[10], C[11], C[12], C[13], C[14], C[15], C[16], C[17], C[18])
            p = ((((((c0 * r + c1) * r + c2) * r + c3) * r + c4) * r + c5) * r + c6) * r + c7
            return (((((p * r + c8) * r + c9) * r + c10) * r + c11) * r + c12) * r + c13
        return poly13

    @njit(inline="always", cache=True, error_model="numpy")
    def exp_parts(x, C):  # pragma: no cover - compiled
        # e^x for x <= 0 as (p, k) with e^x = p 2^-k, written out so that a loop over heads
        # vectorises (a call to libm's exp does not): x = r - k ln 2 with |r| <= ln 2 / 2 (Cody-Waite,
        # ln 2 in two parts), p = e^r by its Taylor polynomial (_exp_poly: degree 13 in float64,
        # remainder 6e-18 relative, degree 12 would leave 2.4e-16; degree 7 in float32); the caller
        # builds 2^-k in the exponent bits of an integer view. Below the
        # smallest normal number e^x is taken as 0 (torch gives a subnormal: a difference below
        # 1e-308 in float64, 1e-38 in float32). The roofline's exponential kernel
        # (mfattn.companion.roofline) runs this same code.
        xmin, inv_ln2, half, ln2_hi, ln2_lo = C[0], C[1], C[2], C[3], C[4]
        zero = xmin - xmin  # in the dtype (a literal 0.0 is float64)
        keep = x >= xmin
        x = x if keep else xmin
        kf = np.floor(half - x * inv_ln2)  # stays in the dtype (math.floor would give an int64)
        r = (x + kf * ln2_hi) + kf * ln2_lo
        p = _exp_poly(r, C)
        return (p if keep else zero), kf

    @intrinsic(prefer_literal=True)
    def _stack(typingctx, n, dtype):  # pragma: no cover - compiled
        # a pointer to n numbers of dtype in the calling function's stack frame (n a constant of the code)
        def codegen(context, builder, sig, args):
            ptr = cgutils.alloca_once(builder, context.get_data_type(dtype.dtype), size=max(n.literal_value, 1))
            ptr.align = 64  # a cache line: no vector load of a row straddles two
            return ptr
        return types.CPointer(dtype.dtype)(n, dtype), codegen

    def _scratch(n, shape, dtype):  # pragma: no cover - its compiled forms are the overload below
        # an uninitialised array of `shape`, starting on a cache line (64 bytes: no vector load of a row
        # straddles two where rows are whole lines): on the stack where n, its size, is a constant of
        # the code, so that the compiler may keep its rows in registers; on the heap where n is 0
        # (shapes read at run time)
        raise NotImplementedError

    @overload(_scratch, inline="always", prefer_literal=True)
    def _scratch_compiled(n, shape, dtype):  # pragma: no cover - compiled
        if isinstance(n, types.IntegerLiteral) and n.literal_value:  # one form compiled per call site
            def on_stack(n, shape, dtype):
                return numba.carray(_stack(n, dtype), shape)
            return on_stack

        def on_heap(n, shape, dtype):
            return _empty_lines(shape, dtype)
        return on_heap

    class _Lines:
        # numba's target context, but for arrays aligned to a cache line (its own np.empty aligns to 32 bytes)
        def __init__(self, context):
            self._context = context

        def __getattr__(self, name):
            return getattr(self._context, name)

        def get_preferred_array_alignment(self, ty):
            return 64

    @intrinsic
    def _empty_lines(typingctx, shape, dtype):  # pragma: no cover - compiled
        # np.empty(shape, dtype), its data starting on a 64-byte line: numba's own allocation
        # (numba.np.arrayobj._empty_nd_impl; environment.yml pins numba) with the alignment raised
        arrtype = types.Array(dtype.dtype, len(shape), "C")

        def codegen(context, builder, sig, args):
            dims = [context.cast(builder, v, t, types.intp)
                    for v, t in zip(cgutils.unpack_tuple(builder, args[0]), shape.types)]
            ary = _empty_nd_impl(_Lines(context), builder, arrtype, dims)
            return impl_ret_new_ref(context, builder, arrtype, ary._getvalue())
        return arrtype(shape, dtype), codegen

    @njit(inline="always", cache=True, error_model="numpy")
    def _exp_bits(H, P, n):  # pragma: no cover - compiled
        # the integer scratch pw of _softmax_row and _token_block: the exponent's bias and position, then H
        # lanes (n: its size where a constant of the code, see _scratch)
        pw = _scratch(n, (H + 2,), P.dtype)
        pw[0], pw[1] = P[0], P[1]
        return pw

    @njit(inline="always", cache=True, error_model="numpy")
    def _exp_scratch(pw, like):  # pragma: no cover - compiled
        # the parts of the integer scratch pw (see _exp_bits): the exponent's bias and position, the lanes
        # whose exponent bits hold 2^-k, and the same lanes seen as numbers of like's dtype
        bits = pw[2:]
        return pw[0], pw[1], bits, bits.view(like.dtype)

    @njit(inline="always", cache=True, error_model="numpy")
    def _softmax_row(Q, K, l, scale, s, mx, den, C, pw):  # pragma: no cover - compiled
        # s[j] = row l of the causal row softmax (6) of scale Q K^T, j <= l (stable: max subtracted),
        # its exponentials by exp_parts, 2^-k in the exponent bits of pw (an integer view of the
        # same memory as `two`).
        d_k, H = Q.shape[1], Q.shape[2]
        bias, shift, bits, two = _exp_scratch(pw, s)  # the exponent's bias and position, set by the caller
        for j in range(l + 1):
            for h in range(H):
                s[j, h] = 0.0
            for k in range(d_k):
                for h in range(H):
                    s[j, h] += Q[l, k, h] * K[j, k, h]
        for h in range(H):
            mx[h] = s[0, h]
            den[h] = 0.0
        for j in range(1, l + 1):
            for h in range(H):
                mx[h] = max(mx[h], s[j, h])
        for j in range(l + 1):
            for h in range(H):
                p, kf = exp_parts(scale * (s[j, h] - mx[h]), C)
                s[j, h] = p
                bits[h] = (bias - int(kf)) << shift
            for h in range(H):
                s[j, h] *= two[h]
                den[h] += s[j, h]
        for j in range(l + 1):
            for h in range(H):
                s[j, h] /= den[h]


    @njit(inline="always", cache=True, error_model="numpy")
    def _row_output(Q, K, V, Wb, blk, l, scale, s, mx, den, av, o, C, pw):  # pragma: no cover - compiled
        # o[x, h] = row l of the head's output A X W_V W_O: the softmax row s (j <= l) by _softmax_row,
        # then av = sum_j s[j] V[j] (d_k, H) and o = av W_O (d_x, H)
        d_k, H = av.shape
        d_x = o.shape[0]
        m = d_x * d_k
        _softmax_row(Q, K, l, scale, s, mx, den, C, pw)
        for k in range(d_k):
            for h in range(H):
                av[k, h] = 0.0
            for j in range(l + 1):
                for h in range(H):
                    av[k, h] += s[j, h] * V[j, k, h]
        for x in range(d_x):
            for h in range(H):
                o[x, h] = 0.0
            for k in range(d_k):
                for h in range(H):
                    o[x, h] += av[k, h] * Wb[blk, 3 * m + k * d_x + x, h]

    @njit(inline="always", cache=True, error_model="numpy")
    def _head_task(X, H, L, d_k, t, splits, P, n):  # pragma: no cover - compiled
        # task t of a head kernel: its block (or group of blocks) of heads, its slice sl of the sequences,
        # the slice's sequences b0 .. b1 - 1, and its scratch for _project and _row_output
        # (Q, K, V, s, mx, den, av, pw), of H lanes; n: the sizes (L d_k H, L H, H, d_k H, H + 2) where
        # they are constants of the code, else zeros (see _scratch)
        B, dt = X.shape[0], X.dtype
        per = (B + splits - 1) // splits
        sl = t % splits
        b0 = sl * per
        return (t // splits, sl, b0, min(B, b0 + per),
                _scratch(n[0], (L, d_k, H), dt), _scratch(n[0], (L, d_k, H), dt), _scratch(n[0], (L, d_k, H), dt),
                _scratch(n[1], (L, H), dt), _scratch(n[2], (H,), dt), _scratch(n[2], (H,), dt),
                _scratch(n[3], (d_k, H), dt), _exp_bits(H, P, n[4]))

    def _head_kernels(width, shape=(0, 0, 0)):
        # the three head kernels (weighted head sum, gradient and Phi, feature energy) for blocks of
        # `width` heads, a constant of the compiled code (0: the blocks' own width, read at run time).
        # With the width constant, the compiler turns each loop over a block's heads into a fixed
        # number of vector operations and keeps more operands in registers: the full gradient at
        # 1024 heads took 1.17-1.40x less time in float32 (d_k 2-8, L 8-32, 2 cores), and with
        # float64's passes widened from 32 heads per block to 128, 1.40-1.45x less in float64
        # (book/benchmark.md; float64 blocks are now 64 heads wide, ROW_BYTES). At 32 heads the
        # constant width was slower (the loop ran at the scalar rate), so only the widths 64 and 128
        # are compiled so. Each head's arithmetic is the
        # same statement by statement, so all give the same bits (tests/test_fused.py).
        # With `shape` (L, d_x, d_k) constants too (SHAPES, _kernels), every scratch row lies on the
        # stack (_scratch) and every loop has a fixed length.
        LC, DXC, DKC = shape
        n, n_o = _stack_sizes(width, shape)
        @njit(parallel=True, cache=True, nogil=True, error_model="numpy")
        def sum_kernel(X, Wb, w, scale, d_k, run, n_runs, groups, splits, partial, C, P):  # pragma: no cover - compiled
            # partial[g, b, l, x] = sum over the runs i = g, g + groups, ... < n_runs, in order, of the sum
            # over the run's heads, in order, of w_h (A_h X W_V,h W_O,h)[b, l, x]; run i holds heads
            # i run .. (i + 1) run - 1. A block holds H / run runs; with more than one, a task takes every
            # block of its slice of the sequences in order, so that each partial sum meets its runs in order
            nb, H = Wb.shape[0], width if width else Wb.shape[2]
            L, d_x, d_k = (LC, DXC, DKC) if LC else (X.shape[1], X.shape[2], d_k)
            per = H // run
            tgroups = groups if per == 1 else 1
            for t in prange(tgroups * splits):
                g, sl, b0, b1, Q, K, V, s, mx, den, av, pw = _head_task(X, H, L, d_k, t, splits, P, n)
                o = _scratch(n_o, (d_x, H), X.dtype)
                for blk in range(g, nb, tgroups):
                    for b in range(b0, b1):
                        _project(X, Wb, blk, b, d_x, Q, K, V)
                        for l in range(L):
                            _row_output(Q, K, V, Wb, blk, l, scale, s, mx, den, av, o, C, pw)
                            for r in range(per):
                                i = blk * per + r
                                if i < n_runs:
                                    h0 = r * run
                                    pg = partial[i % groups, b, l]
                                    x = 0
                                    while x + 4 <= d_x:
                                        # four coordinates' sums side by side, in registers: four independent
                                        # chains of additions, each in head order as before, so the bits are
                                        # too. One chain at a time waited on each addition: the float32 head
                                        # sum (runs of 128 heads) took 1.2-1.35x longer at N = 1024, d_x = 4;
                                        # float64's runs of 32 gain nothing measurable
                                        w0 = w[blk, h0]
                                        a0, a1 = w0 * o[x, h0], w0 * o[x + 1, h0]
                                        a2, a3 = w0 * o[x + 2, h0], w0 * o[x + 3, h0]
                                        for h in range(h0 + 1, h0 + run):
                                            wh = w[blk, h]
                                            a0 += wh * o[x, h]
                                            a1 += wh * o[x + 1, h]
                                            a2 += wh * o[x + 2, h]
                                            a3 += wh * o[x + 3, h]
                                        pg[x] += a0
                                        pg[x + 1] += a1
                                        pg[x + 2] += a2
                                        pg[x + 3] += a3
                                        x += 4
                                    for x in range(x, d_x):
                                        acc = w[blk, h0] * o[x, h0]  # typed as the data (a literal 0.0 would be float64)
                                        for h in range(h0 + 1, h0 + run):
                                            acc += w[blk, h] * o[x, h]
                                        pg[x] += acc

        @njit(parallel=True, cache=True, nogil=True, error_model="numpy")
        def grad_kernel(X, G, Wb, scale, d_k, splits, want_grad, out, phi, C, P):  # pragma: no cover - compiled
            # out[blk, s] = gradient in omega of sum_{b in slice s, l, x} G[b,l,x] out_omega(X)[b,l,x],
            # phi[blk, s] = that sum itself (eq. (11) restricted to the slice), for the heads of block blk
            nb, H = Wb.shape[0], width if width else Wb.shape[2]
            L, d_x, d_k = (LC, DXC, DKC) if LC else (X.shape[1], X.shape[2], d_k)
            m = d_x * d_k
            for t in prange(nb * splits):
                blk, sl, b0, b1, Q, K, V, s, mx, den, av, pw = _head_task(X, H, L, d_k, t, splits, P, n)
                dK = _scratch(n[0], (L, d_k, H), X.dtype)
                dV = _scratch(n[0], (L, d_k, H), X.dtype)
                dA = _scratch(n[1], (L, H), X.dtype)
                dav = _scratch(n[3], (d_k, H), X.dtype)
                dq = _scratch(n[3], (d_k, H), X.dtype)
                r = _scratch(n[2], (H,), X.dtype)
                gw = out[blk, sl]
                ph = phi[blk, sl]
                for b in range(b0, b1):
                    _project(X, Wb, blk, b, d_x, Q, K, V)
                    for j in range(L):
                        for k in range(d_k):
                            for h in range(H):
                                dK[j, k, h] = 0.0
                                dV[j, k, h] = 0.0
                    for l in range(L):
                        _softmax_row(Q, K, l, scale, s, mx, den, C, pw)
                        for k in range(d_k):
                            for h in range(H):
                                av[k, h] = 0.0
                                dav[k, h] = 0.0
                            for j in range(l + 1):
                                for h in range(H):
                                    av[k, h] += s[j, h] * V[j, k, h]
                            # dAV[l, k] = sum_x G[b, l, x] W_O[k, x]
                            for x in range(d_x):
                                gx = G[b, l, x]
                                for h in range(H):
                                    dav[k, h] += gx * Wb[blk, 3 * m + k * d_x + x, h]
                            for h in range(H):
                                ph[h] += av[k, h] * dav[k, h]
                        if not want_grad:
                            continue
                        # dW_O[k, x] += AV[l, k] G[b, l, x]
                        for k in range(d_k):
                            for x in range(d_x):
                                gx = G[b, l, x]
                                for h in range(H):
                                    gw[3 * m + k * d_x + x, h] += av[k, h] * gx
                        # softmax backward (4) on row l: dS_j = A_lj (dA_lj - sum_i A_li dA_li), dA_lj = <dAV_l, V_j>
                        for h in range(H):
                            r[h] = 0.0
                        for j in range(l + 1):
                            for h in range(H):
                                dA[j, h] = 0.0
                            for k in range(d_k):
                                for h in range(H):
                                    dA[j, h] += dav[k, h] * V[j, k, h]
                            for h in range(H):
                                r[h] += dA[j, h] * s[j, h]
                        for k in range(d_k):
                            for h in range(H):
                                dq[k, h] = 0.0
                        for j in range(l + 1):
                            for h in range(H):
                                dA[j, h] = s[j, h] * (dA[j, h] - r[h])  # now dS_lj
                            for k in range(d_k):
                                for h in range(H):
                                    dq[k, h] += dA[j, h] * K[j, k, h]
                                    dK[j, k, h] += dA[j, h] * Q[l, k, h]
                                    dV[j, k, h] += s[j, h] * dav[k, h]
                        # dW_Q[x, k] += X[b, l, x] scale dQ[l, k]
                        for x in range(d_x):
                            xv = X[b, l, x]
                            for k in range(d_k):
                                for h in range(H):
                                    gw[x * d_k + k, h] += xv * (scale * dq[k, h])
                    if not want_grad:
                        continue
                    for j in range(L):
                        for x in range(d_x):
                            xv = X[b, j, x]
                            for k in range(d_k):
                                for h in range(H):
                                    gw[m + x * d_k + k, h] += xv * (scale * dK[j, k, h])
                                    gw[2 * m + x * d_k + k, h] += xv * dV[j, k, h]

        @njit(parallel=True, cache=True, nogil=True, error_model="numpy")
        def energy_kernel(X, Wb, Mq, scale, d_k, splits, out, C, P):  # pragma: no cover - compiled
            # out[blk, s, h] = sum over the sequences b of slice s and positions l of o^T Mq o, with
            # o = (A_h X W_V,h W_O,h)[b, l] (d_x,) the head's own output: its feature energy before the mean
            nb, H = Wb.shape[0], width if width else Wb.shape[2]
            L, d_x, d_k = (LC, DXC, DKC) if LC else (X.shape[1], X.shape[2], d_k)
            for t in prange(nb * splits):
                blk, sl, b0, b1, Q, K, V, s, mx, den, av, pw = _head_task(X, H, L, d_k, t, splits, P, n)
                o = _scratch(n_o, (d_x, H), X.dtype)
                q = _scratch(n[2], (H,), X.dtype)
                e = out[blk, sl]
                for b in range(b0, b1):
                    _project(X, Wb, blk, b, d_x, Q, K, V)
                    for l in range(L):
                        _row_output(Q, K, V, Wb, blk, l, scale, s, mx, den, av, o, C, pw)
                        for x in range(d_x):
                            for h in range(H):
                                q[h] = 0.0
                            for y in range(d_x):
                                mxy = Mq[x, y]
                                for h in range(H):
                                    q[h] += mxy * o[y, h]
                            for h in range(H):
                                e[h] += o[x, h] * q[h]

        return sum_kernel, grad_kernel, energy_kernel

    # the kernels for blocks of any width (the last block of fewer heads than a full one), and those
    # of the full widths of block_width, compiled on first use; those of SHAPES join them (_kernels)
    _sum_kernel, _grad_kernel, _energy_kernel = _head_kernels(0)
    _KERNELS = {0: (_sum_kernel, _grad_kernel, _energy_kernel)}
    _KERNELS.update((w, _head_kernels(w)) for w in COMPILED_WIDTHS)
    _SHAPED = {}

    @njit(inline="always", cache=True, error_model="numpy")
    def _token_block(XT, b, i0, w, bt, g, acc, C, pw):  # pragma: no cover - compiled
        # acc[k, h] = sum_j g_ij XT[b, k, j] (k < d) and acc[d, h] = sum_j g_ij for the tokens
        # i = i0 + h, h < w, with g_ij = exp(bt (min(<x_i, x_j>, 1) - 1)). The tokens i are the vector
        # axis (contiguous in XT (B, d, n)); j runs in order 0 .. n - 1 for each of them, so a token's
        # sums do not depend on the block, the vector width or the thread count.
        d, n = XT.shape[1], XT.shape[2]
        one = C[2] + C[2]  # 1 in the dtype
        bias, shift, bits, two = _exp_scratch(pw, XT)
        for k in range(d + 1):
            for h in range(w):
                acc[k, h] = 0.0
        for j in range(n):
            x0 = XT[b, 0, j]
            for h in range(w):
                g[h] = XT[b, 0, i0 + h] * x0
            for k in range(1, d):
                xk = XT[b, k, j]
                for h in range(w):
                    g[h] += XT[b, k, i0 + h] * xk
            for h in range(w):
                c = g[h] if g[h] < one else one
                p, kf = exp_parts(bt * (c - one), C)
                g[h] = p
                bits[h] = (bias - int(kf)) << shift
            for h in range(w):
                g[h] *= two[h]
                acc[d, h] += g[h]
            for k in range(d):
                xk = XT[b, k, j]
                for h in range(w):
                    acc[k, h] += g[h] * xk

    @njit(inline="always", cache=True, error_model="numpy")
    def _token_task(XT, beta, t, nc, H, C, P):  # pragma: no cover - compiled
        # task t of the token kernels (tokens in nc blocks of H): its system b, its tokens
        # i0 .. i0 + w - 1, and their sums acc (d + 1, H) by _token_block
        d, n = XT.shape[1], XT.shape[2]
        b = t // nc
        i0 = (t % nc) * H
        w = min(H, n - i0)
        acc = _scratch(0, (d + 1, H), XT.dtype)
        _token_block(XT, b, i0, w, beta[b], _scratch(0, (H,), XT.dtype), acc, C, _exp_bits(H, P, 0))
        return b, i0, w, acc

    @njit(parallel=True, cache=True, nogil=True, error_model="numpy")
    def _token_kernel(XT, beta, A, C, P):  # pragma: no cover - compiled
        # A[b, :d, i] = sum_j g_ij x_j and A[b, d, i] = sum_j g_ij of every token of every system
        B, d, n = XT.shape
        H = min(n, BLOCK)
        nc = (n + H - 1) // H
        for t in prange(B * nc):
            b, i0, w, acc = _token_task(XT, beta, t, nc, H, C, P)
            for k in range(d + 1):
                for h in range(w):
                    A[b, k, i0 + h] = acc[k, h]

    @njit(parallel=True, cache=True, nogil=True, error_model="numpy")
    def _velocity_kernel(XT, beta, fixed, mlp, sign, Ad, sc, act, V, Z, C, P):  # pragma: no cover - compiled
        # V[b, :, i] = sign_b P_x (S_i / D_i + mlp_b sum_m s_m sigma(<a_m, x_i>) a_m), Z[b, i] = Z_i: the
        # velocity of the token systems, with D_i = Z_i where fixed[b] = 0 (SA) and D_i = fixed[b] = n
        # elsewhere (USA), and the perceptron's drift (act 1: ReLU, 2: GeLU)
        B, d, n = XT.shape
        M = Ad.shape[0]
        H = min(n, BLOCK)
        nc = (n + H - 1) // H
        half = C[2]
        one = half + half
        r2 = one / np.sqrt(one + one)  # 1 / sqrt(2) in the dtype
        for t in prange(B * nc):
            b, i0, w, acc = _token_task(XT, beta, t, nc, H, C, P)
            u = _scratch(0, (H,), XT.dtype)
            dot = _scratch(0, (H,), XT.dtype)
            for h in range(w):
                Z[b, i0 + h] = acc[d, h]
                den = acc[d, h] if fixed[b] == 0 else fixed[b]
                for k in range(d):
                    acc[k, h] = acc[k, h] / den
            if mlp[b] != 0:
                for m in range(M):
                    for h in range(w):
                        u[h] = 0.0
                    for k in range(d):
                        a = Ad[m, k]
                        for h in range(w):
                            u[h] += a * XT[b, k, i0 + h]
                    for h in range(w):
                        x = u[h]
                        if act == 1:
                            u[h] = x if x > 0 else x - x
                        else:
                            u[h] = x * (half * (one + math.erf(x * r2)))
                    for k in range(d):
                        f = mlp[b] * sc[m]
                        a = Ad[m, k]
                        for h in range(w):
                            acc[k, h] += f * u[h] * a
            for h in range(w):
                dot[h] = 0.0
            for k in range(d):
                for h in range(w):
                    dot[h] += acc[k, h] * XT[b, k, i0 + h]
            for k in range(d):
                for h in range(w):
                    V[b, k, i0 + h] = sign[b] * (acc[k, h] - dot[h] * XT[b, k, i0 + h])


def _kernels(H: int, X: torch.Tensor, d_k: int):
    """The head kernels (sum, gradient, energy) for blocks of H heads over sequences X: those of X's
    shape where it is one of :data:`SHAPES`, H a compiled width and the scratch of a task on the stack
    at most :data:`STACK_BYTES` (made on first use), else those of the width alone."""
    key = (H, X.shape[1], X.shape[2], d_k)
    if H in COMPILED_WIDTHS and key[1:] in SHAPES:
        n, n_o = _stack_sizes(H, key[1:])
        # bytes in float64, every kernel's rows together (an upper bound on any one kernel's):
        # Q, K, V, dK, dV; s, dA; mx, den, r, q; av, dav, dq; pw; o
        if 8 * (5 * n[0] + 2 * n[1] + 4 * n[2] + 3 * n[3] + n[4] + n_o) <= STACK_BYTES:
            if key not in _SHAPED:
                _SHAPED[key] = _head_kernels(H, key[1:])
            return _SHAPED[key]
    return _KERNELS.get(H, _KERNELS[0])


def plain(*tensors) -> bool:
    """Whether the tensors can go through the fused kernels: CPU float32/float64 tensors that no
    autograd, ``torch.func`` transform (vmap, jacfwd, ...) or forward-mode dual level is tracing.
    The kernels see numbers, not a graph; a traced call takes the torch path, which is differentiable.

    Parameters
    ----------
    *tensors : Tensor
        The inputs of one call.

    Returns
    -------
    bool
        True when every tensor is plain.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models import fused
    >>> x = torch.zeros(2, dtype=torch.float64)
    >>> fused.plain(x), fused.plain(x.requires_grad_()), fused.plain(x.detach().to(torch.float16))
    (True, False, False)
    """
    return untraced(tensors, "cpu")


def set_threads():
    """Use the torch thread count (OMP_NUM_THREADS, torch.set_num_threads), at most numba's pool, less
    the cores other processes keep busy (:func:`mfattn.kernel_threads`; the kernels' bits do not
    depend on it).

    numba starts its OpenMP pool on first use, and starting it sets the process's OpenMP thread
    count to the pool's size (every core). torch reads its own count from there, so after that
    first call an ``OMP_NUM_THREADS=1`` run would go on with all cores, in torch and in these
    kernels alike. The count torch had is put back.
    """
    want = torch.get_num_threads()
    numba.set_num_threads(max(1, min(kernel_threads(want), numba.config.NUMBA_NUM_THREADS)))
    if torch.get_num_threads() != want:
        torch.set_num_threads(want)


def block_width(dtype, n_heads: int = 0, *, head_sum: bool = False) -> int:
    """The heads per block of the head kernels: :data:`BLOCK_FLOAT32`, from :data:`WIDE_FROM` heads on
    twice that or rows of :data:`ROW_BYTES` if fewer (float64: 64); :data:`BLOCK` for the float64 head
    sum (``head_sum``). A function of the dtype and the head count only, so the order of every sum is too.

    A head's gradient, ``Phi`` and energy do not depend on the block it is in; the head sum adds the
    heads block by block, so its width sets the order of that sum. float64 head sums keep the
    width that every committed chapter was computed with.

    Parameters
    ----------
    dtype : torch.dtype or numpy dtype
        The heads' dtype.
    n_heads : int, optional
        The number of heads of the call; default 0.
    head_sum : bool, optional
        The width of :func:`head_sum`'s blocks. Default: False.

    Returns
    -------
    int

    Examples
    --------
    >>> import torch
    >>> from mfattn.models import fused
    >>> fused.block_width(torch.float64, 4096), fused.block_width(torch.float32, 100), fused.block_width(torch.float32, 4096)
    (64, 64, 128)
    >>> fused.block_width(torch.float64, 4096, head_sum=True), fused.block_width(torch.float32, 4096, head_sum=True)
    (32, 128)
    """
    f32 = dtype in (torch.float32, np.float32, np.dtype(np.float32))
    if head_sum and not f32:
        return BLOCK
    return max(BLOCK_FLOAT32, min(2 * BLOCK_FLOAT32, ROW_BYTES // (4 if f32 else 8))) if n_heads >= WIDE_FROM \
        else BLOCK_FLOAT32


def _blocks(heads: torch.Tensor, width: int):
    """Heads (M, D) -> numpy (nb, D, H): blocks of H heads (``width``, or M when fewer), heads innermost,
    the last block zero-padded."""
    M, D = heads.shape
    H = width if M >= width else max(1, M)
    nb = -(-M // H)
    pad = nb * H - M
    h = torch.nn.functional.pad(heads, (0, 0, 0, pad)) if pad else heads
    return h.reshape(nb, H, D).transpose(1, 2).contiguous().numpy(), nb, H


def _pass_width(heads: torch.Tensor, per_sample: bool = False) -> int:
    """The blocks of :func:`head_pass`: :func:`block_width`, unless its results would come back in
    another memory layout than in blocks of the head sum's width (:func:`block_width` with
    ``head_sum``), as every committed run had them: a transposed view where the heads fit in one such
    block, a copy otherwise, and per sequence a row of the padded heads' length. torch sums a tensor
    in an order that follows its layout, so the layout is part of what makes the bits of a run."""
    M = heads.shape[0]
    old, wide = block_width(heads.dtype, M, head_sum=True), block_width(heads.dtype, M)
    same = M <= old or (M > wide and (not per_sample or -(-M // wide) * wide == -(-M // old) * old))
    return wide if same else old


def _splits(heads: torch.Tensor, B: int) -> int:
    """Sequence slices per block of :func:`head_pass` and :func:`head_energy`: a function of the shapes
    only, so the order of the sums over slices is too. Counted from the head sum's blocks, whatever the
    pass's own width, so that wider blocks leave every head's sums, and their bits, as they were."""
    M = heads.shape[0]
    return max(1, min(B, -(-_TASKS // -(-M // block_width(heads.dtype, M, head_sum=True)))))


def _np(t: torch.Tensor):
    return t.detach().contiguous().numpy()


_CONST = {}


def exp_constants(dtype):
    """The exponential's constants (see ``_softmax_row``) in the data's dtype, so that a float32 kernel
    computes in float32 throughout, and the exponent's bias and bit position for its integer type."""
    if dtype not in _CONST:
        f64 = dtype == np.float64
        # x below the smallest normal's logarithm gives 0; ln 2 split so that k * ln2_hi is exact
        xmin, hi, lo = (-708.0, 6.93147180369123816490e-01, 1.90821492927058770002e-10) if f64 else \
            (-87.0, 0.693359375, -2.12194440e-4)
        taylor = [1.0 / math.factorial(i) for i in range(13, -1, -1)]
        C = np.array([xmin, 1.0 / math.log(2.0), 0.5, hi, lo] + taylor, dtype=dtype)
        P = np.array([1023, 52] if f64 else [127, 23], dtype=np.int64 if f64 else np.int32)
        _CONST[dtype] = (C, P)
    return _CONST[dtype]


def head_sum(X: torch.Tensor, heads: torch.Tensor, weights: torch.Tensor, d_k: int) -> torch.Tensor:
    r"""``sum_i w_i A_i(X) X W_V,i W_O,i`` (B, L, d_x): the weighted head sum of eq. (8) before ``W_out``.

    No validation (the caller, :class:`mfattn.models.model.HeadModel`, has checked shapes, dtypes and
    device). Used by ``HeadModel.logits`` and every risk evaluation on the CPU.

    Parameters
    ----------
    X : Tensor (B, L, d_x), float32 or float64, on the CPU
        Token sequences.
    heads : Tensor (N, 4 d_x d_k)
        Heads in the model's layout (``W_Q, W_K, W_V, W_O`` row-major).
    weights : Tensor (N,)
        Their weights.
    d_k : int
        Head dimension.

    Returns
    -------
    Tensor (B, L, d_x)
        The weighted head sum, in model space.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models import fused
    >>> from mfattn.models.model import HeadModel
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, w = example()
    >>> torch_path = HeadModel(model.W_out, d_k=2, fused=False)
    >>> z = fused.head_sum(data.X, heads, w, 2) @ model.W_out
    >>> bool(torch.allclose(z, torch_path.logits(data.X, heads, w), rtol=1e-12, atol=0))
    True
    """
    set_threads()
    M, B = heads.shape[0], X.shape[0]
    # the order of the sum: runs of `run` heads (the head sum's blocks), each summed in order, the runs
    # added into `groups` partial sums in turn. Sequences split first (each slice writes its own
    # rows); runs grouped only when the sequences are few, so the partial sums (groups, B, L, d_x)
    # stay a few times the output
    run = min(M, block_width(heads.dtype, M, head_sum=True))
    n_runs = -(-M // run)
    splits = min(B, _TASKS)
    groups = max(1, min(n_runs, _TASKS // splits))
    # computed in the wider blocks of the other passes, several runs to a block, when the slices alone
    # keep every thread busy (one task then takes all the blocks of its slice): the same sums, in the
    # same order
    wide = block_width(heads.dtype, M)
    if not (wide > run and M >= wide and splits >= 2 * numba.get_num_threads()):
        wide = run
    Wb, nb, H = _blocks(heads, wide)
    wb = _np(torch.nn.functional.pad(weights, (0, nb * H - M)).reshape(nb, H))
    partial = np.zeros((groups, B, X.shape[1], X.shape[2]), dtype=Wb.dtype)
    _kernels(H, X, d_k)[0](_np(X), Wb, wb, Wb.dtype.type(1.0 / math.sqrt(d_k)), d_k, run, n_runs, groups,
                                    splits, partial, *exp_constants(Wb.dtype.type))
    return torch.from_numpy(partial.sum(0) if groups > 1 else partial[0])


def head_pass(X: torch.Tensor, G: torch.Tensor, heads: torch.Tensor, d_k: int, *, grad: bool = True,
              per_sample: bool = False):
    r"""``grad Phi`` (13) and ``Phi`` (11) of each head for a frozen residual ``G``, in one fused pass.

    ``Phi(omega) = sum_{b,l,x} G[b,l,x] out_omega(X)[b,l,x]`` with ``out`` the head output
    ``A X W_V W_O`` (eqs. (5)-(7) before ``W_out``) and ``G`` the residual pulled back through
    ``W_out`` and scaled (:meth:`mfattn.models.model.HeadModel.evaluate`); the gradient is the hand-written
    backward pass of the head, softmax backward (4) included. No validation. Used by
    ``HeadModel.evaluate``, ``grad_at`` and ``phi_at`` on the CPU: the hot path of SGD (19), of the
    characteristics (21) and of the local solvers of every chapter.

    Parameters
    ----------
    X : Tensor (B, L, d_x), float32 or float64, on the CPU
        Token sequences.
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

    Examples
    --------
    >>> import torch
    >>> from mfattn.models import fused
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, w = example()
    >>> G = model.evaluate(data.X, data.Y, heads, w)[1]
    >>> grad, phi = fused.head_pass(data.X, G, heads, 2)
    >>> grad.shape, phi.shape
    (torch.Size([5, 24]), torch.Size([5]))
    >>> bool(torch.allclose(grad, model.grad_first_variation(data, heads, heads, w), rtol=1e-12, atol=1e-15))
    True
    """
    set_threads()
    Wb, nb, H = _blocks(heads, _pass_width(heads, per_sample))
    M, D = heads.shape
    B = X.shape[0]
    splits = B if per_sample else _splits(heads, B)
    out = np.zeros((nb, splits, D if grad else 0, H), dtype=Wb.dtype)
    phi = np.zeros((nb, splits, H), dtype=Wb.dtype)
    _kernels(H, X, d_k)[1](_np(X), _np(G), Wb, Wb.dtype.type(1.0 / math.sqrt(d_k)), d_k, splits, grad, out, phi,
                 *exp_constants(Wb.dtype.type))
    if per_sample:  # (nb, B, D, H) -> (B, M, D)
        g = torch.from_numpy(out).permute(1, 0, 3, 2).reshape(B, nb * H, D)[:, :M] if grad else None
        return g, torch.from_numpy(phi).permute(1, 0, 2).reshape(B, nb * H)[:, :M]
    g = torch.from_numpy(out.sum(1) if splits > 1 else out[:, 0]).transpose(1, 2).reshape(nb * H, D)[:M] \
        if grad else None
    return g, torch.from_numpy(phi.sum(1)).reshape(nb * H)[:M]


def head_energy(X: torch.Tensor, heads: torch.Tensor, M: torch.Tensor, d_k: int) -> torch.Tensor:
    r"""``sum_{b,l} o_i[b,l]^T M o_i[b,l]`` of each head (M,), with ``o_i = A_i X W_V,i W_O,i`` its output.

    With ``M = W_out W_out^T`` this is the sum of the squared features :math:`\psi(X;\omega_i)^2`
    (7) over sequences, positions and tokens: a head's feature energy, computed without the
    (N, B, L, d_v) feature maps. No validation (the caller, ``HeadModel.feature_energy``, has
    checked). Used by chapter 09's tail statistic (``mfattn.analysis.scaling.tail_share``).

    Parameters
    ----------
    X : Tensor (B, L, d_x), float32 or float64, on the CPU
        Token sequences.
    heads : Tensor (N, 4 d_x d_k)
        Heads in the model's layout.
    M : Tensor (d_x, d_x)
        The quadratic form (symmetric).
    d_k : int
        Head dimension.

    Returns
    -------
    Tensor (N,)

    Examples
    --------
    >>> import torch
    >>> from mfattn.models import fused
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, _ = example()
    >>> e = fused.head_energy(data.X, heads, model.W_out @ model.W_out.T, 2)
    >>> F = model.features(data.X, heads)  # (N, B, L, d_v), materialised
    >>> bool(torch.allclose(e, F.pow(2).sum((1, 2, 3)), rtol=1e-12, atol=0))
    True
    """
    set_threads()
    Wb, nb, H = _blocks(heads, block_width(heads.dtype, heads.shape[0]))
    N = heads.shape[0]
    splits = _splits(heads, X.shape[0])
    out = np.zeros((nb, splits, H), dtype=Wb.dtype)
    _kernels(H, X, d_k)[2](_np(X), Wb, _np(M.to(heads.dtype)), Wb.dtype.type(1.0 / math.sqrt(d_k)), d_k, splits, out,
                   *exp_constants(Wb.dtype.type))
    return torch.from_numpy(out.sum(1) if splits > 1 else out[:, 0]).reshape(nb * H)[:N]


def token_sums(X: torch.Tensor, beta: torch.Tensor):
    r"""The attention sums of the token systems of chapter 06 in one fused pass: with
    :math:`g_{ij}=e^{\beta(\min(\langle x_i,x_j\rangle,1)-1)}` (the kernel of
    :mod:`mfattn.models.tokens`, the companion paper's eqs. (2.5) and (2.8)), returns
    ``S (B, n, d)``, :math:`S_i=\sum_j g_{ij}x_j`, and ``Z (B, n)``, :math:`Z_i=\sum_j g_{ij}`.

    No ``(n, n)`` kernel matrix is stored: each block of tokens runs over all ``j`` in order, with the
    exponential of :func:`head_sum`'s kernels. No validation (the caller,
    :func:`mfattn.models.tokens.velocity` and its simulation, has checked shapes and dtypes); the
    torch path there stays this path's oracle (``tests/test_tokens.py``).

    Parameters
    ----------
    X : Tensor (B, n, d), float32 or float64, on the CPU
        Tokens, one batch row per system.
    beta : Tensor (B,)
        Inverse temperatures.

    Returns
    -------
    S : Tensor (B, n, d)
    Z : Tensor (B, n)

    Examples
    --------
    >>> import torch
    >>> from mfattn.models import fused
    >>> X = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]], dtype=torch.float64)
    >>> S, Z = fused.token_sums(X, torch.tensor([2.0], dtype=torch.float64))
    >>> bool(torch.allclose(Z, torch.full((1, 2), 1 + torch.e ** -2, dtype=torch.float64)))
    True
    """
    set_threads()
    XT = X.detach().transpose(1, 2).contiguous().numpy()
    B, d, n = XT.shape
    A = np.empty((B, d + 1, n), dtype=XT.dtype)
    _token_kernel(XT, beta.detach().to(X.dtype).contiguous().numpy(), A, *exp_constants(XT.dtype.type))
    A = torch.from_numpy(A)
    return A[:, :d].transpose(1, 2), A[:, d]


#: The perceptron activations the fused velocity computes (others take the torch path).
TOKEN_ACTIVATIONS = {"relu": 1, "gelu": 2}


def token_velocity(X: torch.Tensor, beta: torch.Tensor, normalized: torch.Tensor, mlp: torch.Tensor,
                   sign: torch.Tensor, directions: torch.Tensor, scales: torch.Tensor, activation: str):
    r"""The velocity of chapter 06's token systems in one fused pass, the companion paper's eqs. (2.5)
    and (2.8): ``V (B, n, d)`` with :math:`V_i =` :math:`\pm P_{x_i}(S_i/D_i + m\sum_k s_k\sigma(\langle a_k,x_i\rangle)a_k)`,
    :math:`D_i=Z_i` for SA and :math:`n` for USA, and ``Z (B, n)`` (the sums of :func:`token_sums`).

    No validation (the caller, :mod:`mfattn.models.tokens`, has checked shapes and dtypes; the
    activation is one of :data:`TOKEN_ACTIVATIONS`); its torch path is this path's oracle
    (``tests/test_tokens.py``).

    Parameters
    ----------
    X : Tensor (B, n, d), float32 or float64, on the CPU
        Tokens, one batch row per system.
    beta, normalized, mlp, sign : Tensor (B,)
        The settings of :class:`mfattn.models.tokens.TokenSystem`.
    directions : Tensor (M, d)
        The perceptron's unit directions :math:`a_k`.
    scales : Tensor (M,)
        Its scales :math:`s_k`.
    activation : str
        ``"relu"`` or ``"gelu"``.

    Returns
    -------
    V : Tensor (B, n, d)
    Z : Tensor (B, n)

    Examples
    --------
    >>> import torch
    >>> from mfattn.models import fused
    >>> X = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]], dtype=torch.float64)
    >>> one, a = torch.ones(1, dtype=torch.float64), torch.eye(2, dtype=torch.float64)
    >>> V, Z = fused.token_velocity(X, one, torch.tensor([False]), 0 * one, one, a, one.expand(2), "relu")
    >>> e = torch.e ** -1  # g between two orthogonal tokens at beta = 1; USA divides by n = 2
    >>> bool(torch.allclose(V[0], torch.tensor([[0.0, e / 2], [e / 2, 0.0]], dtype=torch.float64)))
    True
    """
    set_threads()
    dt = X.dtype
    XT = X.detach().transpose(1, 2).contiguous().numpy()
    B, d, n = XT.shape
    V = np.empty((B, d, n), dtype=XT.dtype)
    Z = np.empty((B, n), dtype=XT.dtype)
    fixed = torch.where(normalized.cpu(), 0.0, float(n)).to(dt)
    _velocity_kernel(XT, *(_np(t.detach().cpu().to(dt)) for t in (beta, fixed, mlp, sign, directions, scales)),
                     TOKEN_ACTIVATIONS[activation], V, Z, *exp_constants(XT.dtype.type))
    return torch.from_numpy(V).transpose(1, 2), torch.from_numpy(Z)


def compile_seconds() -> dict:
    """Time to make the kernels ready for both dtypes in this process (load from numba's disk cache,
    or compile on the very first use), by calling them on tiny problems: the head kernels that read
    their width at run time and those of each width compiled in (:data:`COMPILED_WIDTHS`), and the
    token kernels. Not those of :data:`SHAPES`: a process compiles (or loads) them at its first call at
    such a shape.

    Returns
    -------
    dict
        ``{"seconds": float, "cache_dir": str}``: the wall time, and where numba keeps its cache.

    Examples
    --------
    >>> from mfattn.models import fused
    >>> r = fused.compile_seconds()
    >>> r["seconds"] >= 0
    True
    """
    t0 = time.perf_counter()
    for dt in (torch.float32, torch.float64):
        X = torch.zeros(_TASKS, 2, 1, dtype=dt)  # sequences enough for the float64 head sum's wide blocks
        for M in (1, 2 * BLOCK_FLOAT32, WIDE_FROM):  # blocks of one head, of BLOCK_FLOAT32, of twice that
            h = torch.zeros(M, 4, dtype=dt)
            head_sum(X, h, torch.ones(M, dtype=dt), 1)
            head_pass(X, X, h, 1)
            head_energy(X, h, torch.ones(1, 1, dtype=dt), 1)
        one = torch.ones(1, dtype=dt)
        token_sums(torch.ones(1, 1, 2, dtype=dt), one)
        token_velocity(torch.ones(1, 1, 2, dtype=dt), one, one > 0, one, one, one.expand(1, 2), one, "gelu")
    where = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(os.path.dirname(__file__), "__pycache__")
    return {"seconds": time.perf_counter() - t0, "cache_dir": where}
