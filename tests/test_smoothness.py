"""feature_derivative_max and pad_heads (Remark 3.5, chapter 01)."""

import math

import pytest
import torch

from mfattn.models.model import HeadModel
from mfattn.analysis.smoothness import feature_derivative_max, feature_derivative_sup, pad_heads

F64 = torch.float64


def _model(d_x, d_v=3, d_k=2):
    return HeadModel(torch.eye(d_x, d_v, dtype=F64), d_k)


def _point(model, L, seed, M_X=1.5, M_om=2.0):
    g = torch.Generator().manual_seed(seed)
    om = torch.randn(1, model.d_omega, generator=g, dtype=F64)
    X = torch.randn(1, L, model.d_x, generator=g, dtype=F64)
    u = torch.randn(1, model.d_omega, generator=g, dtype=F64)
    return M_om * om / om.norm(), M_X * X / X.norm(), u / u.norm()


def _evaluate(model, m, om, X, u):
    """The engine's value at given points (no ascent)."""
    return feature_derivative_max(model, m, L=X.shape[1], x_norm=float(X.norm()) * (1 + 1e-12),
                                  radius=float(om.norm()) * (1 + 1e-12), n_starts=0, n_steps=0,
                                  init=(om, X, u), progress=False).value


def _brute_force(model, m, om, X, u):
    """max_l ||D^m psi_l(X; om)[u]^m|| from full derivative tensors (jacfwd / hessian), contracted with u."""
    def psi(w):
        return model.features(X, w[None])[0]  # (L, d_v)

    if m == 0:
        d = psi(om[0])
    elif m == 1:
        d = torch.func.jacfwd(psi)(om[0]) @ u[0]
    else:
        d = torch.func.hessian(psi)(om[0]) @ u[0] @ u[0]
    return float(d.norm(dim=-1).max())


@pytest.mark.parametrize("m", [0, 1, 2])
def test_value_matches_a_brute_force_evaluation(m):
    model = _model(3)
    om, X, u = _point(model, 4, seed=m)
    assert float(_evaluate(model, m, om, X, u)[0]) == pytest.approx(_brute_force(model, m, om, X, u), rel=1e-12)


@pytest.mark.parametrize("m", [0, 1, 2, 3])
def test_padding_keeps_features_norms_and_derivatives(m):
    small, big = _model(3), _model(7)
    om, X, u = _point(small, 5, seed=10 + m)
    OM, U = pad_heads(om, 2, 7), pad_heads(u, 2, 7)
    XX = torch.nn.functional.pad(X, (0, 4))
    assert torch.allclose(OM.norm(), om.norm(), rtol=1e-15) and torch.allclose(U.norm(), u.norm(), rtol=1e-15)
    assert torch.allclose(big.features(XX, OM), small.features(X, om), rtol=1e-13, atol=1e-14)
    a, b = _evaluate(small, m, om, X, u), _evaluate(big, m, OM, XX, U)
    assert float(b) == pytest.approx(float(a), rel=1e-12)
    # the padded coordinates carry no weight: psi ignores them, the layout puts them where unpack says
    W_Q, W_K, W_V, W_O = big.unpack(OM[0])
    assert float(W_Q[3:].abs().max() + W_K[3:].abs().max() + W_V[3:].abs().max() + W_O[:, 3:].abs().max()) == 0.0


def test_appending_zero_tokens_keeps_the_value():
    model = _model(4)
    om, X, u = _point(model, 3, seed=4)
    a = _evaluate(model, 2, om, X, u)
    b = feature_derivative_max(model, 2, L=6, x_norm=float(X.norm()) * (1 + 1e-12),
                               radius=float(om.norm()) * (1 + 1e-12), n_starts=0, n_steps=0, init=(om, X, u),
                               progress=False).value
    assert float(b) == pytest.approx(float(a), rel=1e-12)  # causal: positions 1..3 unchanged, new ones add


def test_ascent_never_loses_its_start_and_beats_the_sampled_estimate():
    model = _model(3)
    X = torch.randn(1, 4, 3, generator=torch.Generator().manual_seed(0), dtype=F64)
    X = 1.5 * X / X.norm()
    # the point and direction feature_derivative_sup draws with this generator
    g = torch.Generator().manual_seed(7)
    ds = feature_derivative_sup(model, X, [2.0], n_points=1, n_directions=1, max_order=2, generator=g,
                                progress=False)
    g = torch.Generator().manual_seed(7)
    p = torch.randn(1, model.d_omega, generator=g, dtype=F64)
    u = torch.randn(1, model.d_omega, generator=g, dtype=F64)
    om, u = 2.0 * p / p.norm(), u / u.norm()
    for m in range(3):
        start = float(_evaluate(model, m, om, X, u)[0])
        assert start == pytest.approx(float(ds.sup[0, m]), rel=1e-12)  # the two engines agree at a point
        best = feature_derivative_max(model, m, L=4, x_norm=1.5, radius=2.0, n_starts=0, n_steps=100, init=(om, X, u),
                                      progress=False)
        assert float(best.value[0]) >= start
        if m > 0:
            assert float(best.value[0]) > 1.05 * start  # it climbs
        # the returned point is feasible and its value is the returned value
        assert float(best.omega.norm()) <= 2.0 * (1 + 1e-12) and float(best.X.norm()) <= 1.5 * (1 + 1e-12)
        assert float(best.u.norm()) == pytest.approx(1.0, abs=1e-12)
        assert float(_evaluate(model, m, best.omega, best.X, best.u)[0]) == pytest.approx(float(best.value[0]),
                                                                                         rel=1e-12)


def test_m0_reaches_the_closed_form_and_never_exceeds_it():
    # C_0 = M_X M_omega^2 / 2: position 1 attends to itself; ||x_1 W_V W_O|| <= M_X ||W_V|| ||W_O||
    for d_x in (2, 3):
        best = feature_derivative_max(_model(d_x), 0, L=3, x_norm=1.5, radius=2.0, n_starts=8, n_steps=300,
                                      generator=torch.Generator().manual_seed(d_x), progress=False)
        assert float(best.value.max()) == pytest.approx(1.5 * 2.0**2 / 2, rel=1e-3)
        assert float(best.value.max()) <= 1.5 * 2.0**2 / 2 * (1 + 1e-12)


def test_init_noise_adds_moved_copies_in_order():
    model = _model(4)
    om, X, u = _point(model, 3, seed=1)
    best = feature_derivative_max(model, 1, L=3, x_norm=1.5, radius=2.0, n_starts=2, n_steps=0, init=(om, X, u),
                                  init_noise=0.05, generator=torch.Generator().manual_seed(0), progress=False)
    assert best.value.shape == (4,)
    assert torch.equal(best.omega[0], om[0]) and not torch.equal(best.omega[1], om[0])
    assert float((best.omega[1] - om[0]).norm()) < 0.2


def test_invalid_arguments_name_the_argument():
    model = _model(3)
    g = torch.Generator().manual_seed(0)
    kw = dict(L=3, x_norm=1.0, radius=1.0, n_steps=1, progress=False)
    with pytest.raises(ValueError, match="^model"):
        feature_derivative_max("not a model", 1, generator=g, **kw)
    with pytest.raises(ValueError, match="^model"):
        feature_derivative_max(model.to(dtype=torch.float32), 1, generator=g, **kw)
    with pytest.raises(ValueError, match="^order"):
        feature_derivative_max(model, -1, generator=g, **kw)
    with pytest.raises(ValueError, match="^x_norm"):
        feature_derivative_max(model, 1, generator=g, **{**kw, "x_norm": 0.0})
    with pytest.raises(ValueError, match="^radius"):
        feature_derivative_max(model, 1, generator=g, **{**kw, "radius": float("inf")})
    with pytest.raises(ValueError, match="^L"):
        feature_derivative_max(model, 1, generator=g, **{**kw, "L": 0})
    with pytest.raises(ValueError, match="^generator"):
        feature_derivative_max(model, 1, **kw)
    with pytest.raises(ValueError, match="^n_starts"):
        feature_derivative_max(model, 1, n_starts=0, **kw)
    om, X, u = _point(_model(5), 3, seed=0)
    with pytest.raises(ValueError, match="^init"):
        feature_derivative_max(model, 1, n_starts=0, init=(om, X, u), **kw)  # d_x0 = 5 > 3
    with pytest.raises(ValueError, match="^d_x"):
        pad_heads(om, 2, 3)
    with pytest.raises(ValueError, match="^heads"):
        pad_heads(torch.zeros(2, 10, dtype=F64), 2, 3)


def test_chain_spread_against_a_plain_loop():
    import numpy as np
    from mfattn.analysis.smoothness import chain_spread

    v = np.random.default_rng(0).uniform(1, 5, size=(4, 3))
    loop = max((max(row) - min(row)) / max(row) for row in v.tolist())
    assert abs(chain_spread(v) - loop) < 1e-15
    with pytest.raises(ValueError, match="^values"):
        chain_spread([[1.0, -1.0]])


def test_ascent_chains_keep_their_best_start_and_never_fall_along_a_sweep():
    from mfattn.analysis.smoothness import ascent_chains

    kw = dict(d_k=2, x_norm=2.0, radius=2.0, n_chains=2, base_starts=2, starts=1, n_steps=30, progress=False)
    v, pts = ascent_chains([(3, 3, 3), (4, 3, 3), (5, 3, 3)], 1, generator=torch.Generator().manual_seed(4), **kw)
    # oracle at the first size: the same draws by a direct call, chain c = best of starts 2c, 2c + 1
    direct = feature_derivative_max(_model(3), 1, L=3, x_norm=2.0, radius=2.0, n_starts=4, n_steps=30,
                                    generator=torch.Generator().manual_seed(4), progress=False).value
    torch.testing.assert_close(v[0], torch.stack([direct[:2].max(), direct[2:].max()]), rtol=0, atol=0)
    assert bool((v[1:] >= v[:-1]).all())  # embedding: a padded point keeps its value (Remark 3.5)
    for (om, X, u), d_x in zip(pts, (3, 4, 5)):  # the points carry the values reported
        torch.testing.assert_close(_evaluate(_model(d_x), 1, om, X, u), v[(3, 4, 5).index(d_x)], rtol=1e-9, atol=0)
    with pytest.raises(ValueError, match="^shapes"):
        ascent_chains([], 0, generator=torch.Generator(), **kw)


def test_mixture_derivative_and_gradient_errors_against_finite_differences():
    from mfattn.analysis.smoothness import directional_derivative_errors, mixture_derivative
    from mfattn.models.tasks import example

    model, data, rho, _ = example()
    nu = 1.5 * rho.flip(0)
    lhs, rhs = mixture_derivative(model, data, rho, nu, [1e-2, 1e-3])
    # oracle: an independent first-order forward difference of E along the mixture, from the risk only
    w = torch.full((len(rho),), 1.0 / len(rho), dtype=F64)
    E = lambda e: float(model.risk(data, torch.cat([rho, nu]), torch.cat([(1 - e) * w, e * w])))
    h = 1e-6
    assert abs(rhs - (E(h) - E(0.0)) / h) < 1e-4 * abs(rhs)
    assert abs(lhs[1] - rhs) < abs(lhs[0] - rhs)  # second-order stencil: smaller step, smaller error
    u = torch.nn.functional.normalize(torch.ones_like(rho), dim=1)
    err = directional_derivative_errors(model, data, rho, rho, u, [1e-2, 1e-3])
    assert 50 < err[0] / err[1] < 200  # central difference: error ~ h^2
    with pytest.raises(ValueError, match="^steps"):
        mixture_derivative(model, data, rho, nu, [0.0])
    with pytest.raises(ValueError, match="^u"):
        directional_derivative_errors(model, data, rho, rho, u[:1], [1e-3])


def test_minibatch_mse_against_a_plain_loop_and_tr_sigma_over_s():
    from mfattn.analysis.smoothness import minibatch_mse

    per = torch.randn(6, 2, 3, generator=torch.Generator().manual_seed(0), dtype=F64)
    full = per.mean(0)
    mse = minibatch_mse(per, full, [1, 3], 4, torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(1)  # oracle: the same draws, summed element by element
    for k, S in enumerate([1, 3]):
        idx = torch.randint(6, (4, S), generator=g)
        for r in range(4):
            loop = sum(float((sum(per[int(i)][a, b] for i in idx[r]) / S - full[a, b]) ** 2)
                       for a in range(2) for b in range(3))
            assert abs(mse[k, r] - loop) < 1e-12
    # identity: with replacement, E mse = tr Sigma / S
    many = minibatch_mse(per, full, [2], 20000, torch.Generator().manual_seed(2))
    tr = float(((per - full) ** 2).sum((1, 2)).mean())
    assert abs(many.mean() - tr / 2) < 4 * many.std() / math.sqrt(20000)
    with pytest.raises(ValueError, match="^full"):
        minibatch_mse(per, full[:1], [1], 2, torch.Generator())
