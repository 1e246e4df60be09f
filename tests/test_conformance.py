"""One conformance suite for every particle model the package ships: attention heads (HeadModel), the
sharded heads (ShardedHeadModel in a one-process group), the two-layer network and the linear model (the
worked example). Each check is an oracle that does not use the code it tests: the first variation is
the derivative of the risk along a mixture (finite differences on the weights), its gradient is the
derivative of Phi (finite differences, and autograd where the model's Phi is built from torch
operations), the risk through the features equals the hot path's, a step of SGD is recomputed by hand,
and the reference flow satisfies the energy identity dE/dt = -2 zeta I (38)."""

import pytest
import torch
import torch.distributed as dist

from mfattn.models.distributed import ShardedHeadModel
from mfattn.flows.integrate import integrate
from mfattn.models.linear import linear_regression
from mfattn.models.model import HeadModel
from mfattn.models.particles import ParticleModel
from mfattn.analysis.static import Ball, certificate, finite_head_optimum, iid_construction, iid_gap_coefficient, mean_field_optimum
from mfattn.models.twolayer import teacher_regression

from conftest import make_problem

F64 = torch.float64
MODELS = ["heads", "sharded", "two-layer", "linear"]


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path_factory.mktemp('pg') / 'store'}", rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture(params=MODELS)
def system(request, group):
    """(model, data, heads (N, d_omega), weights (N,), query (M, d_omega)) for each shipped model."""
    g = torch.Generator().manual_seed(7)
    name = request.param
    if name in ("heads", "sharded"):
        model, data, heads, w, g = make_problem(n=5, L=4, N=6, seed=1)
        if name == "sharded":
            model = ShardedHeadModel.from_model(model)
    elif name == "two-layer":
        model, data, _ = teacher_regression(3, 12, m_teacher=2, generator=g)
        heads = 0.7 * torch.randn(6, model.d_omega, generator=g, dtype=F64)
        w = torch.softmax(torch.randn(6, generator=g, dtype=F64), 0)
    else:
        model, data, _ = linear_regression(d=3, n=12, generator=g, noise=0.2)
        heads = torch.randn(6, 3, generator=g, dtype=F64)
        w = torch.softmax(torch.randn(6, generator=g, dtype=F64), 0)
    query = heads[:3] + 0.3 * torch.randn(3, model.d_omega, generator=g, dtype=F64)
    return name, model, data, heads, w, query


def test_is_a_particle_model(system):
    name, model, data, heads, w, _ = system
    assert isinstance(model, ParticleModel)
    assert model.check_data(data) is data and model.check_heads(heads) is heads
    with pytest.raises(ValueError, match="heads"):
        model.check_heads(heads[:, :-1])
    with pytest.raises(ValueError, match="heads"):
        model.check_heads(heads.float())


def test_first_variation_is_the_derivative_of_the_risk_along_a_mixture(system):
    """d/de E((1 - e) rho + e delta_q) at e = 0 equals Phi(q; rho) - int Phi d rho (11)."""
    _, model, data, heads, w, query = system
    phi_atoms = model.first_variation(data, heads, heads, w)
    phi_q = model.first_variation(data, query, heads, w)
    e = 1e-5
    for j in range(query.shape[0]):
        atoms = torch.cat([heads, query[j : j + 1]])
        risk = lambda s: float(model.evaluate(data.X, data.Y, atoms, torch.cat([(1 - s) * w, torch.tensor([s], dtype=F64)]))[0])
        fd = (risk(e) - risk(-e)) / (2 * e)
        assert abs(fd - float(phi_q[j] - w @ phi_atoms)) < 1e-8 * max(1.0, abs(fd))


def test_grad_phi_is_the_derivative_of_phi(system):
    name, model, data, heads, w, query = system
    _, G, _, _ = model.evaluate(data.X, data.Y, heads, w)
    grad = model.grad_at(data.X, G, query)
    h = 1e-6
    fd = torch.empty_like(grad)
    for c in range(model.d_omega):
        dq = torch.zeros_like(query)
        dq[:, c] = h
        fd[:, c] = (model.phi_at(data.X, G, query + dq) - model.phi_at(data.X, G, query - dq)) / (2 * h)
    torch.testing.assert_close(grad, fd, rtol=1e-7, atol=1e-8)
    if name in ("two-layer", "linear"):  # Phi built from torch operations: autograd too
        q = query.clone().requires_grad_(True)
        (auto,) = torch.autograd.grad(model.phi_at(data.X, G, q).sum(), q)
        torch.testing.assert_close(grad, auto, rtol=1e-12, atol=1e-13)


def test_evaluate_without_the_risk_changes_nothing_else(system):
    """risk=False (the integrator's steps between records, grad_phi) gives None for the risk and the very
    same residual, gradient and Phi, bit for bit; grad_phi is evaluate's gradient."""
    _, model, data, heads, w, _ = system
    full = model.evaluate(data.X, data.Y, heads, w, phi=True)
    bare = model.evaluate(data.X, data.Y, heads, w, phi=True, risk=False)
    assert full[0] is not None and bare[0] is None
    for a, b in zip(full[1:], bare[1:]):
        assert torch.equal(a, b)
    assert torch.equal(model.grad_phi(data.X, data.Y, heads, w), full[2])


def test_evaluate_agrees_with_the_static_tools_path_and_with_itself(system):
    """The risk through features and loss (the path of mfattn.analysis.static) equals evaluate's; grad and Phi at
    the atoms equal grad_at and phi_at at the atoms; the dissipation is sum_i w_i |grad_i|^2 (38)."""
    _, model, data, heads, w, _ = system
    risk, G, grad, phi = model.evaluate(data.X, data.Y, heads, w, phi=True)
    z = torch.tensordot(w, model.features(data.X, heads), dims=1)
    torch.testing.assert_close(risk, model.loss(data.Y, z).mean(), rtol=1e-13, atol=0)
    torch.testing.assert_close(grad, model.grad_at(data.X, G, heads), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(phi, model.phi_at(data.X, G, heads), rtol=1e-12, atol=1e-14)
    r2, diss = model.risk_and_dissipation(data.X, data.Y, heads, w)
    torch.testing.assert_close(r2, risk, rtol=1e-13, atol=0)
    torch.testing.assert_close(diss, (w * (grad * grad).sum(1)).sum(), rtol=1e-12, atol=0)
    torch.testing.assert_close(model.risk(data, heads, w), risk, rtol=1e-13, atol=0)
    torch.testing.assert_close(model.dissipation(data, heads, w), diss, rtol=1e-12, atol=0)


def test_an_sgd_step_recomputed_by_hand(system):
    _, model, data, heads, w, _ = system
    eps, zeta = 0.05, 0.7
    run = integrate(model, data, heads, stepper="sgd", step=eps, T=eps, record_every=eps, zeta=zeta, batch_size=3,
                    weights=w, generator=torch.Generator().manual_seed(11), progress=False)
    idx = torch.randint(data.n, (3,), generator=torch.Generator().manual_seed(11))
    by_hand = heads - 2 * eps * zeta * model.grad_first_variation(type(data)(data.X[idx], data.Y[idx]), heads, heads, w)
    torch.testing.assert_close(run.final, by_hand, rtol=0, atol=1e-14)


def test_the_reference_flow_dissipates_as_the_energy_identity_says(system):
    """Along (21), dE/dt = -2 zeta I (38): the risk's drop equals 2 int I, by Simpson's rule on a fine
    Runge-Kutta run; and the tagged characteristics started at the particles are their paths."""
    _, model, data, heads, _, _ = system
    T, rec = 0.5, 1 / 64
    run = integrate(model, data, heads, stepper="rk4", step=rec, T=T, record_every=rec, dissipation=True,
                    keep_stages=True, progress=False)
    I = run.dissipation.numpy()
    simpson = rec / 3 * (I[0] + I[-1] + 4 * I[1:-1:2].sum() + 2 * I[2:-1:2].sum())
    drop = float(run.risk[0] - run.risk[-1])
    assert drop > 0 and (run.risk.diff() <= 0).all()
    assert abs(drop - 2 * simpson) < 1e-5 * drop, (drop, 2 * simpson)
    torch.testing.assert_close(run.characteristics(heads[:2]), run.heads[:, :2], rtol=0, atol=1e-13)


def test_iid_construction_gap_is_c_over_n_under_the_square_loss(system):
    """Under the square loss the mean gap of N i.i.d. draws from rho is exactly c / N (Theorem 4.1's
    construction); under cross-entropy (heads) the coefficient is still defined and nonnegative."""
    name, model, data, heads, w, _ = system
    c = iid_gap_coefficient(model, data, heads, w)
    assert c >= 0
    if name not in ("two-layer", "linear"):
        return
    out = iid_construction(model, data, heads, w, [4], n_draws=20000, generator=torch.Generator().manual_seed(3),
                           progress=False)
    gaps = torch.as_tensor(out["risk_gap"][0])
    se = float(gaps.std()) / len(gaps) ** 0.5
    assert abs(float(gaps.mean()) - c / 4) < 5 * se, (float(gaps.mean()), c / 4, se)


@pytest.mark.parametrize("tool", ["mean_field_optimum", "certificate", "finite_head_optimum", "analyse_dirac",
                                  "feature_derivative_sup"])
def test_head_specific_tools_say_so_on_another_model(system, tool):
    name, model, data, heads, w, _ = system
    if isinstance(model, HeadModel):
        return  # they run on heads: tests/test_static.py, test_stability.py and test_smoothness.py
    from mfattn.analysis import smoothness, stability

    g = torch.Generator().manual_seed(0)
    ball = Ball(radius=1.0)
    call = {
        "mean_field_optimum": lambda: mean_field_optimum(model, data, ball, generator=g),
        "certificate": lambda: certificate(model, data, heads, w, ball, generator=g),
        "finite_head_optimum": lambda: finite_head_optimum(model, data, 2, ball, generator=g),
        "analyse_dirac": lambda: stability.analyse_dirac(model, data, heads[0]),
        "feature_derivative_sup": lambda: smoothness.feature_derivative_sup(model, data.X, [1.0], generator=g),
    }[tool]
    with pytest.raises(ValueError, match="model: .* specific to attention heads"):
        call()
