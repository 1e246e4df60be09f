"""The two-layer mean-field baseline (mfattn.models.twolayer): first variation against autograd, the shared
dynamics and i.i.d. construction on neurons, and the exact 1/N law of the square loss."""

import numpy as np
import pytest
import torch

from mfattn.models.activations import ACTIVATIONS, get_activation
from mfattn.flows.dynamics import reference_flow, sgd
from mfattn.analysis.static import iid_construction, iid_gap_coefficient
from mfattn.models.twolayer import RegressionData, TwoLayerModel, teacher_regression


def _task(activation="tanh", n=24, d=3, N=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    model, data, teacher = teacher_regression(d, n, m_teacher=3, activation=activation, generator=g)
    heads = torch.randn(N, d + 2, generator=g, dtype=torch.float64)
    w = torch.rand(N, generator=g, dtype=torch.float64) + 0.1
    return model, data, heads, w / w.sum()


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_derivative_and_primitive(name):
    act = get_activation(name)
    u = torch.linspace(-3, 3, 61, dtype=torch.float64).requires_grad_()
    (d1,) = torch.autograd.grad(act.f(u).sum(), u)
    (dP,) = torch.autograd.grad(act.primitive(u).sum(), u)
    keep = u.detach().abs() > 1e-9  # relu's kink
    assert torch.allclose(act.df(u.detach())[keep], d1[keep], atol=1e-12)
    assert torch.allclose(dP, act.f(u.detach()), atol=1e-12)
    assert abs(float(act.primitive(torch.zeros((), dtype=torch.float64)))) < 1e-15
    if name == "gelu":  # against torch's exact GeLU
        assert torch.allclose(act.f(u.detach()), torch.nn.functional.gelu(u.detach()), atol=1e-14)


@pytest.mark.parametrize("activation", ["tanh", "gelu", "relu"])
def test_first_variation_against_autograd(activation):
    """Phi is the derivative of R along the weights, grad Phi the heads' gradient divided by their weight."""
    model, data, heads, w = _task(activation)
    h = heads.clone().requires_grad_()
    wt = w.clone().requires_grad_()
    R = model.risk(data, h, wt)
    gh, gw = torch.autograd.grad(R, (h, wt))
    phi = model.first_variation(data, heads, heads, w)
    grad = model.grad_first_variation(data, heads, heads, w)
    # R(rho) depends on the weights linearly through f: dR/dp_i = Phi(omega_i; rho)
    assert torch.allclose(gw, phi, rtol=1e-12, atol=1e-14)
    assert torch.allclose(gh, w[:, None] * grad, rtol=1e-12, atol=1e-14)
    # at query points away from the atoms: the derivative of Phi(.; rho frozen) by autograd
    q = torch.randn(5, model.d_omega, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    qq = q.clone().requires_grad_()
    G = (model.output(data.X, heads, w) - data.Y)[:, 0] / data.n
    phi_q = (G[:, None] * model.features(data.X, qq)[..., 0].T).sum(0)
    (gq,) = torch.autograd.grad(phi_q.sum(), qq)
    assert torch.allclose(model.first_variation(data, q, heads, w), phi_q.detach(), rtol=1e-12, atol=1e-15)
    assert torch.allclose(model.grad_first_variation(data, q, heads, w), gq, rtol=1e-12, atol=1e-15)


def test_output_is_the_mean_field_average_and_chunks_agree():
    model, data, heads, w = _task()
    a, W, b = heads[:, 0], heads[:, 1:-1], heads[:, -1]
    f = (torch.tanh(data.X @ W.T + b) * (w * a)).sum(1, keepdim=True)
    assert torch.allclose(model.output(data.X, heads, w), f, rtol=1e-14)
    small = TwoLayerModel(model.d, chunk_size=2)
    assert torch.allclose(small.grad_first_variation(data, heads, heads, w),
                          model.grad_first_variation(data, heads, heads, w), rtol=1e-13)
    assert torch.allclose(small.dissipation(data, heads, w), model.dissipation(data, heads, w), rtol=1e-13)


def test_teacher_has_zero_risk_and_is_stationary():
    model, data, teacher = teacher_regression(4, 30, m_teacher=3, generator=torch.Generator().manual_seed(1))
    assert float(model.risk(data, teacher)) == 0.0
    assert float(model.grad_first_variation(data, teacher, teacher).abs().max()) == 0.0


def test_sgd_and_flow_run_on_neurons_and_dissipate():
    """The shared dynamics: full-batch GD with a small step lowers R at the dissipation rate."""
    model, data, heads, _ = _task(N=16)
    eps = 1e-3
    run = sgd(model, data, heads, eps=eps, T=0.01, record_every=0.01, batch_size=None,
              generator=torch.Generator().manual_seed(0), dissipation=True, progress=False)
    # one recording interval of 10 steps: dR = -2 * I * dt + O(dt^2)
    dR = float(run.risk[1] - run.risk[0])
    assert dR < 0
    assert dR == pytest.approx(-2 * 0.01 * float(run.dissipation[0]), rel=0.05)
    flow = reference_flow(model, data, heads, T=0.01, step=eps, record_every=0.01, progress=False)
    # GD from the same cloud at step eps vs RK4: the Euler error is O(eps)
    assert float((flow.final - run.heads[-1]).abs().max()) < 1e-3 * float(heads.abs().max())
    tags = flow.characteristics(heads)
    assert torch.allclose(tags[-1], flow.final, rtol=1e-12, atol=1e-13)


def test_square_loss_mean_gap_is_exactly_c_over_N():
    """E R(rho_hat^N) - R(rho) = c / N with c = (1/2) E_x Var_rho(a sigma): checked by Monte Carlo at
    every N, with a 4-standard-error tolerance."""
    model, data, heads, w = _task(N=9, n=16)
    c = iid_gap_coefficient(model, data, heads, w)
    psi = model.features(data.X, heads)[..., 0]  # (m, n)
    f = (w[:, None] * psi).sum(0)
    c_direct = 0.5 * float((w[:, None] * (psi - f) ** 2).sum(0).mean())
    assert c == pytest.approx(c_direct, rel=1e-12)
    out = iid_construction(model, data, heads, w, [1, 4, 16], n_draws=20000,
                           generator=torch.Generator().manual_seed(2), progress=False)
    # R(rho_hat) - R(rho) - int Phi d(rho_hat - rho) = (1/2n) sum_k (f_hat - f)^2 exactly, draw by draw
    assert np.allclose(out["risk_gap"] - out["first_order"], 0.5 * out["logit_mse"], rtol=1e-9, atol=1e-15)
    for a, N in enumerate(out["N"]):
        gaps = out["risk_gap"][a]
        se = gaps.std(ddof=1) / np.sqrt(gaps.size)
        assert abs(gaps.mean() - c / N) < 4 * se, (N, gaps.mean(), c / N, se)


def test_bad_inputs():
    model, data, heads, w = _task()
    with pytest.raises(ValueError, match="data"):
        model.risk((data.X, data.Y), heads)
    with pytest.raises(ValueError, match="heads"):
        model.risk(data, heads[:, :-1])
    with pytest.raises(ValueError, match="Y"):
        RegressionData(data.X, data.Y[:-1])
    with pytest.raises(ValueError, match="activation"):
        TwoLayerModel(3, activation="sigmoid")
    with pytest.raises(ValueError, match="weights"):
        model.risk(data, heads, -w)
    with pytest.raises(ValueError, match="data.X"):
        model.risk(RegressionData(data.X[:, :2], data.Y), heads)
