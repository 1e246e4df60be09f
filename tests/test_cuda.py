"""The CUDA path: float32 on the GPU agrees with float64 on the CPU for every engine function.

Skipped without a CUDA device (CI has none; run on a GPU machine with ``pytest -m cuda``). The oracle
is the float64 CPU engine, itself checked against autograd, finite differences and SDPA in
``test_model.py``. Tolerance: relative to the largest entry of the reference, 2e-4 for values and
first derivatives (float32 rounding through a few hundred operations, with the condition of the
softmax), 2e-3 for second derivatives and for a few dozen steps of the dynamics (round-off grows
with the steps and the Hessian's products).
"""

import pytest
import torch

from mfattn.companion import bench
from mfattn.models import fused_cuda
from mfattn.models.model import HeadModel
from mfattn.flows.dynamics import reference_flow, sgd
from mfattn.analysis.static import Ball, certificate, feature_sup, minimize_first_variation
from mfattn.models.tasks import teacher_task

from conftest import make_problem

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


def close(gpu, cpu, tol):
    gpu = gpu.detach().cpu().double() if isinstance(gpu, torch.Tensor) else torch.tensor(float(gpu))
    cpu = cpu.detach().double() if isinstance(cpu, torch.Tensor) else torch.tensor(float(cpu))
    assert gpu.shape == cpu.shape
    scale = float(cpu.abs().max()) or 1.0
    err = float((gpu - cpu).abs().max()) / scale
    assert err <= tol, f"relative error {err:.2e} > {tol:.0e}"


@pytest.fixture(params=[6, 12], ids=["L6-broadcast-products", "L12-batched-gemms"])
def pair(request):
    # L <= TINY_L takes the broadcast products of HeadModel._prod on CUDA, L = 12 the batched GEMMs
    m64, d64, h64, w64, g = make_problem(torch.float64, n=8, L=request.param, N=9)
    m32 = m64.to(device="cuda", dtype=torch.float32)
    d32 = d64.to(device="cuda", dtype=torch.float32)
    q64 = 0.8 * torch.randn(5, m64.d_omega, generator=g, dtype=torch.float64)
    cu = lambda t: t.to(device="cuda", dtype=torch.float32)
    return (m64, d64, h64, w64, q64), (m32, d32, cu(h64), cu(w64), cu(q64))


@pytest.mark.parametrize("fused", [False, None], ids=["torch-path", "default-path"])
def test_model_functions(pair, fused):
    (m, d, h, w, q), (M, D, H, W, Q) = pair
    M = HeadModel(M.W_out, M.d_k, fused=fused)  # the default is the Triton pass where triton imports
    assert M.device.type == "cuda" and M.dtype == torch.float32 and M._tiny
    close(M.logits(D.X, H, W), m.logits(d.X, h, w), 2e-4)
    close(M.features(D.X, Q), m.features(d.X, q), 2e-4)
    close(M.risk(D, H, W), m.risk(d, h, w), 2e-4)
    close(M.first_variation(D, Q, H, W), m.first_variation(d, q, h, w), 2e-4)
    close(M.grad_first_variation(D, Q, H, W), m.grad_first_variation(d, q, h, w), 2e-4)
    close(M.per_sample_grad_first_variation(D, Q, H, W), m.per_sample_grad_first_variation(d, q, h, w), 2e-4)
    close(M.stochastic_gradient(D, H, W), m.stochastic_gradient(d, h, w), 2e-4)
    close(M.dissipation(D, H, W), m.dissipation(d, h, w), 2e-4)
    close(M.hessian_first_variation(D, Q[0], H, W), m.hessian_first_variation(d, q[0], h, w), 2e-3)
    close(M.translation_hessian(D, Q[0]), m.translation_hessian(d, q[0]), 2e-3)


def test_streamed_chunks_on_cuda(pair):
    (m, d, h, w, q), (M, D, H, W, Q) = pair
    small = type(M)(M.W_out, M.d_k, chunk_size=2, sample_chunk=3, fused=False)  # the torch path's chunks
    close(small.grad_first_variation(D, Q, H, W), m.grad_first_variation(d, q, h, w), 2e-4)
    close(small.evaluate(D.X, D.Y, H, W)[2], m.grad_first_variation(d, h, h, w), 2e-4)


def test_dynamics(pair):
    (m, d, h, w, q), (M, D, H, W, Q) = pair
    kw = dict(eps=0.05, T=1.0, record_every=0.25, batch_size=2, progress=False)
    a = sgd(M, D, H, generator=torch.Generator().manual_seed(3), **kw)
    b = sgd(m, d, h, generator=torch.Generator().manual_seed(3), **kw)  # same minibatch draws (CPU generator)
    close(a.heads, b.heads, 2e-3)
    close(a.risk, b.risk, 2e-3)
    kw = dict(T=1.0, step=0.1, record_every=0.5, progress=False)
    fa, fb = reference_flow(M, D, H, **kw), reference_flow(m, d, h, **kw)
    close(fa.population, fb.population, 2e-3)
    close(fa.dissipation, fb.dissipation, 2e-3)
    close(fa.characteristics(Q), fb.characteristics(q), 2e-3)


def test_static_solvers():
    t64 = teacher_task(n=8, seed=1)
    t32 = teacher_task(n=8, seed=1, dtype=torch.float32, device="cuda")
    ball = Ball(1.5 * float(t64.teacher_heads.norm(dim=1).max()))  # K holds the teacher
    args64 = (t64.model, t64.data, t64.teacher_heads, t64.teacher_weights, ball)
    args32 = (t32.model, t32.data, t32.teacher_heads, t32.teacher_weights, ball)
    a = minimize_first_variation(*args32, generator=torch.Generator().manual_seed(0), n_starts=16, iters=100)
    b = minimize_first_variation(*args64, generator=torch.Generator().manual_seed(0), n_starts=16, iters=100)
    close(a.values, b.values, 2e-3)  # the same starts descend to the same values
    c32 = certificate(*args32, generator=torch.Generator().manual_seed(0), n_starts=16, iters=100)
    c64 = certificate(*args64, generator=torch.Generator().manual_seed(0), n_starts=16, iters=100)
    close(c32.phi_support, c64.phi_support, 2e-4)
    assert abs(c32.upper - c64.upper) <= 2e-4 * abs(c64.upper)
    f32 = feature_sup(t32.model, t32.data.X, ball, generator=torch.Generator().manual_seed(0), n_starts=4, iters=20)
    f64 = feature_sup(t64.model, t64.data.X, ball, generator=torch.Generator().manual_seed(0), n_starts=4, iters=20)
    assert abs(f32 - f64) <= 2e-3 * f64


def test_benchmark_baselines_agree_on_cuda(pair):
    _, (M, D, H, W, Q) = pair
    ref = bench.engine_grad(M, D.X, D.Y, H, W).cpu()
    for impl in ("naive", "loop"):
        close(bench.GRADS[impl](M, D.X, D.Y, H, W), ref, 2e-4)


# ------------------------------------------------------------------ the Triton pass (mfattn.models.fused_cuda)
needs_triton = pytest.mark.skipif(not fused_cuda.available(), reason="triton not installed")


@needs_triton
def test_cuda_models_take_the_triton_pass(pair, monkeypatch):
    """HeadModel on CUDA calls the Triton kernels by default (fused=False opts out), and the calls agree
    with the float64 CPU engine."""
    (m, d, h, w, q), (M, D, H, W, Q) = pair
    assert M._fused and M._kernels is fused_cuda and M._fast(D.X, H, W)
    assert not HeadModel(M.W_out, M.d_k, fused=False)._fast(D.X, H, W)
    assert HeadModel(M.W_out, M.d_k, fused=True)._kernels is fused_cuda
    calls = []
    for name in ("head_sum", "head_pass"):
        orig = getattr(fused_cuda, name)
        monkeypatch.setattr(fused_cuda, name, lambda *a, _o=orig, _n=name, **k: calls.append(_n) or _o(*a, **k))
    close(M.grad_first_variation(D, Q, H, W), m.grad_first_variation(d, q, h, w), 2e-4)
    r, G, g, p = M.evaluate(D.X, D.Y, H, W, phi=True)
    monkeypatch.undo()
    assert calls == ["head_sum", "head_pass", "head_sum", "head_pass"]
    r0, G0, g0, p0 = m.evaluate(d.X, d.Y, h, w, phi=True)
    for a, b in ((r, r0), (G, G0), (g, g0), (p, p0)):
        close(a, b, 2e-4)


@needs_triton
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)], ids=["float64", "float32"])
def test_triton_kernels_against_the_float64_engine(dtype, tol):
    """The kernels alone, with several blocks of heads, slices of sequences and a padded last block
    (N = 3000, 40 sequences), against the float64 torch path on the CPU; every entry point."""
    m, d, h, w, g = make_problem(torch.float64, n=40, L=7, d_x=5, d_k=3, N=3000, fused=False)
    G = m.evaluate(d.X, d.Y, h, w)[1]
    cu = lambda t: t.to(device="cuda", dtype=dtype)
    X, Gc, H, W = (t.to(dtype).double() for t in (d.X, G, h, w))  # the numbers the kernels see
    out, _ = m.forward(X, H)
    close(fused_cuda.head_sum(cu(X), cu(H), cu(W), 3), torch.einsum("c,cblx->blx", W, out), tol)
    grad, phi = fused_cuda.head_pass(cu(X), cu(Gc), cu(H), 3)
    close(grad, m.grad_at(X, Gc, H), tol)
    close(phi, torch.einsum("cblx,blx->c", out, Gc), tol)
    grad, phi = fused_cuda.head_pass(cu(X[:6]), cu(Gc[:6]), cu(H[:50]), 3, per_sample=True)
    close(grad, m.grad_at(X[:6], Gc[:6], H[:50], per_sample=True), tol)
    none, phi = fused_cuda.head_pass(cu(X), cu(Gc), cu(H), 3, grad=False)
    assert none is None
    close(phi, torch.einsum("cblx,blx->c", out, Gc), tol)


@needs_triton
def test_triton_pass_is_stable_and_deterministic():
    """Scores in the thousands (an unstable softmax overflows) stay finite and match the float64 engine;
    two calls give the same bits (partial sums added in a fixed order, no atomics)."""
    m, d, h, w, _ = make_problem(torch.float64, n=16, L=8, N=500, fused=False)
    big = 40.0 * h
    M = m.to(device="cuda")
    D = d.to(device="cuda")
    assert M._kernels is fused_cuda
    a = M.evaluate(D.X, D.Y, big.cuda(), w.cuda(), phi=True)
    b = M.evaluate(D.X, D.Y, big.cuda(), w.cuda(), phi=True)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    ref = m.evaluate(d.X, d.Y, big, w, phi=True)
    for x, y in zip(a, ref):
        assert bool(torch.isfinite(x).all())
        close(x, y, 1e-10)


@needs_triton
def test_triton_validation_on_cuda():
    X = torch.zeros(2, 3, 4, device="cuda")
    with pytest.raises(ValueError, match="^heads: on device cpu"):
        fused_cuda.head_sum(X, torch.zeros(5, 32), torch.ones(5, device="cuda"), 2)
    with pytest.raises(ValueError, match="^X: on device cpu"):
        fused_cuda.head_pass(X.cpu(), X.cpu(), torch.zeros(5, 32), 2)
