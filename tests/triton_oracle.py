"""The Triton head pass (mfattn.models.fused_cuda) against independent oracles, as a plain script (no pytest),
so that the same checks run in CI through Triton's interpreter and on a GPU machine that has only
torch and triton.

    TRITON_INTERPRET=1 python tests/triton_oracle.py --device cpu     # CI: the interpreter, CPU tensors
    python tests/triton_oracle.py --device cuda                       # the compiled kernels on the GPU

Oracles:

* the float64 torch engine (``HeadModel(fused=False)``, itself checked against autograd, finite
  differences and SDPA in test_model.py): each head's output from ``forward`` gives the head sum
  and ``Phi``, ``grad_at`` the gradient, summed and per sequence, on every shape of a grid
  (N in {1, 3, 17}, n in {1, 4}, L in {1, 5, 8}, d_k in {1, 2}, d_x in {1, 3, 5}, and the benchmark's
  head shapes d_k = 4, 8, 16 at L = 16, 32, 64); the float32 kernels are fed
  the float32-rounded inputs, and compared with the float64 engine on those same numbers;
* a closed form: tokens ``(0, 1)``, ``d_x = d_k = 1``, ``W_Q = W_V = W_O = 1``, ``W_K = x``: row 1 of the
  attention is ``(1 - s, s)`` with ``s = sigmoid(x)``, so with ``G = X``, ``Phi = s`` and
  ``grad Phi = (x s (1 - s), s (1 - s), s, s)``, for ``|x|`` up to 1e4 (an unstable softmax overflows);
* large logits (heads of scale 32, 40 times the grid's: scores in the thousands) against the float64 engine.

Prints one JSON line per check as it is made (``name``, its relative error ``err``: the largest
difference over the largest reference entry, its tolerance ``tol``, ``ok``), so that a run stopped
half-way keeps what it checked, then a summary line: ``interpreted`` (whether the kernels ran in
Triton's interpreter), ``device``, ``checks`` (their number), ``failed`` (their names), ``seconds``.
Exit status 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time

#: Relative tolerances (largest difference over the largest reference entry).
TOL = {"float64": 1e-10, "float32": 1e-5}
#: float32 with scores in the thousands: each score's rounding (6e-8 of it) moves the softmax by as
#: much, up to about 1e-4 of the gradient; the float64 kernels keep their tolerance.
TOL_LARGE = {"float64": 1e-10, "float32": 1e-3}


def grid(quick: bool):
    """The shapes (N, n, L, d_x, d_k) and dtypes of the engine comparison."""
    out = []
    for i, (N, n, L) in enumerate(itertools.product((1, 3, 17), (1, 4), (1, 5, 8))):
        d_k = 1 + i % 2
        d_x = (3, 1, 5)[i % 3]
        out.append(("float64", N, n, L, d_x, d_k))
        if i % 3 != 1:  # float32 on two thirds of the shapes
            out.append(("float32", N, n, L, d_x, d_k))
    if quick:  # the device check's dry run: two shapes, one of them the single head, token and sequence
        return [c for c in out if (c[1], c[2], c[3]) in {(1, 1, 1), (3, 4, 5)}]
    # the benchmark's and the roofline's head shapes (d_k, L) = (4, 16), (8, 32), (16, 64) at d_x = 4,
    # which the device check times: a kernel must first be right where it will be timed (two blocks of
    # heads at 33)
    return out + [("float64", 3, 2, 16, 4, 4), ("float32", 33, 2, 32, 4, 8), ("float64", 2, 1, 64, 4, 16)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--quick", action="store_true", help="two shapes and the closed form only")
    a = p.parse_args(argv)

    import mfattn  # noqa: F401  (first: the thread policy)
    import torch

    from mfattn.models import fused_cuda
    from mfattn.models.model import HeadModel

    dev = torch.device(a.device)
    res = {"summary": True, "device": str(dev), "interpreted": fused_cuda.interpreted(),
           "available": fused_cuda.available(),
           "kernel_type": type(fused_cuda._pass_kernel).__name__ if fused_cuda.triton is not None else None}
    checks = []
    if not fused_cuda.available():
        res["error"] = "fused_cuda is not available here"
        print(json.dumps(res))
        return 1
    t_start = time.perf_counter()

    def rel(got, ref):
        got = got.detach().cpu().double()
        scale = float(ref.abs().max()) or 1.0
        finite = bool(torch.isfinite(got).all())
        return float((got - ref).abs().max()) / scale if finite else float("inf")

    def check(name, got, ref, tol):
        record(name, rel(got, ref), tol)

    def record(name, err, tol):
        checks.append({"name": name, "err": err, "tol": tol, "ok": bool(err <= tol)})
        print(json.dumps(checks[-1]), flush=True)

    def compare(tag, dtype, X, G, H, w, d_k, tol, *, per_sample=True, no_grad=True):
        """The four entry points on (X, G, H, w) rounded to dtype, against the float64 engine."""
        dt = getattr(torch, dtype)
        X, G, H, w = (t.to(dt).double() for t in (X, G, H, w))  # the numbers the kernels see
        ref = HeadModel(torch.zeros(X.shape[2], 2, dtype=torch.float64), d_k, fused=False)
        out, _ = ref.forward(X, H)  # (N, B, L, d_x)
        cu = lambda t: t.to(device=dev, dtype=dt)
        check(f"{tag} head_sum", fused_cuda.head_sum(cu(X), cu(H), cu(w), d_k), torch.einsum("c,cblx->blx", w, out),
              tol)
        g, p_ = fused_cuda.head_pass(cu(X), cu(G), cu(H), d_k)
        check(f"{tag} grad", g, ref.grad_at(X, G, H), tol)
        check(f"{tag} phi", p_, torch.einsum("cblx,blx->c", out, G), tol)
        if per_sample:
            g, p_ = fused_cuda.head_pass(cu(X), cu(G), cu(H), d_k, per_sample=True)
            check(f"{tag} per-sample grad", g, ref.grad_at(X, G, H, per_sample=True), tol)
            check(f"{tag} per-sample phi", p_, torch.einsum("cblx,blx->bc", out, G), tol)
        if no_grad:
            g, p_ = fused_cuda.head_pass(cu(X), cu(G), cu(H), d_k, grad=False)
            record(f"{tag} grad=False gives None", 0.0 if g is None else float("inf"), 0.0)
            check(f"{tag} phi (grad=False)", p_, torch.einsum("cblx,blx->c", out, G), tol)

    def problem(N, n, L, d_x, d_k, seed, scale=0.8):
        g = torch.Generator().manual_seed(seed)
        X = torch.randn(n, L, d_x, generator=g, dtype=torch.float64)
        G = torch.randn(n, L, d_x, generator=g, dtype=torch.float64) / (n * L)
        H = scale * torch.randn(N, 4 * d_x * d_k, generator=g, dtype=torch.float64)
        w = torch.rand(N, generator=g, dtype=torch.float64) + 0.1
        return X, G, H, w / w.sum()

    # the edge cases first (a run stopped by its time limit on a GPU has checked them)
    # 1. the closed form, up to scores of 1e4
    closed_form(dev, check)
    if not a.quick:
        # 2. large logits against the engine
        for dtype in ("float64", "float32"):
            compare(f"{dtype} large logits (heads of scale 32)", dtype, *problem(17, 4, 8, 3, 2, 7, scale=32.0), 2,
                    TOL_LARGE[dtype])
        # 3. the splits: small blocks (several per call, the last one padded), blocks grouped in the head
        # sum's buffer, several sequences per program in head_pass
        saved = fused_cuda.BLOCK, fused_cuda.PROGRAMS, fused_cuda.PARTIAL_CAP
        try:
            fused_cuda.BLOCK, fused_cuda.PROGRAMS, fused_cuda.PARTIAL_CAP = 4, 3, 2 * 5 * 3
            for dtype in ("float64", "float32"):
                compare(f"{dtype} split blocks (4 heads), grouped sums, 3 programs", dtype,
                        *problem(17, 5, 6, 3, 2, 99), 2, TOL[dtype])
        finally:
            fused_cuda.BLOCK, fused_cuda.PROGRAMS, fused_cuda.PARTIAL_CAP = saved
    # 4. the float64 torch engine on the grid of shapes
    for i, (dtype, N, n, L, d_x, d_k) in enumerate(grid(a.quick)):
        compare(f"{dtype} N={N} n={n} L={L} d_x={d_x} d_k={d_k}", dtype, *problem(N, n, L, d_x, d_k, i), d_k,
                TOL[dtype], per_sample=i % 2 == 0, no_grad=i % 4 == 1)
    return finish(res, checks, t_start)


def finish(res, checks, t_start) -> int:
    res["seconds"] = time.perf_counter() - t_start
    res["checks"] = len(checks)
    res["failed"] = [c["name"] for c in checks if not c["ok"]]
    print(json.dumps(res))
    return 0 if not res["failed"] else 1


def closed_form(dev, check):
    """Phi = sigmoid(x), grad Phi = (x s(1-s), s(1-s), s, s) for the head (W_Q, W_K, W_V, W_O) = (1, x, 1, 1)."""
    import torch

    from mfattn.models import fused_cuda

    x = torch.cat([torch.logspace(-3, 4, 57, dtype=torch.float64), torch.zeros(1)])
    x = torch.cat([-x.flip(0), x])
    for dtype in ("float64", "float32"):
        dt = getattr(torch, dtype)
        xs = x.to(dt).double()
        X = torch.tensor([[[0.0], [1.0]]], dtype=torch.float64)
        H = torch.ones(xs.shape[0], 4, dtype=torch.float64)
        H[:, 1] = xs
        s = torch.sigmoid(xs)
        ds = s * (1 - s)
        cu = lambda t: t.to(device=dev, dtype=dt)
        g, p_ = fused_cuda.head_pass(cu(X), cu(X), cu(H), 1)
        check(f"{dtype} closed form Phi = sigmoid(x), |x| <= 1e4", p_, s, TOL[dtype])
        check(f"{dtype} closed form grad Phi, |x| <= 1e4", g, torch.stack([xs * ds, ds, s, s], 1), TOL[dtype])
        check(f"{dtype} closed form head sum, |x| <= 1e4", fused_cuda.head_sum(cu(X), cu(H[-1:]), cu(torch.ones(1)), 1),
              torch.tensor([[[0.0], [float(s[-1])]]], dtype=torch.float64), TOL[dtype])  # x = 1e4: s = 1


if __name__ == "__main__":
    sys.exit(main())
