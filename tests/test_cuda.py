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

from mfattn import bench
from mfattn.dynamics import reference_flow, sgd
from mfattn.static import Ball, certificate, feature_sup, minimize_first_variation
from mfattn.tasks import teacher_task

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


def test_model_functions(pair):
    (m, d, h, w, q), (M, D, H, W, Q) = pair
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
    small = type(M)(M.W_out, M.d_k, chunk_size=2, sample_chunk=3)
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
