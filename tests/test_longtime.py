"""Section 6 measurements: the energy balance (39), the KL fit (44) and rate (Theorem 6.10), and the
inward-pointing products of Remark 6.7."""

import math

import numpy as np
import pytest
import torch

from mfattn.flows.dynamics import Decaying, reference_flow
from mfattn.analysis.fitting import asymptotic_order
from mfattn.analysis.longtime import energy_balance, inward_products, kl_bound, kl_constant, kl_fit, local_exponents
from mfattn.analysis.static import Ball
from mfattn.models.tasks import teacher_task


@pytest.fixture(scope="module")
def task():
    return teacher_task(n=12, L=4, d_x=3, d_k=2, d_v=4, seed=0)


def cloud(task, N, seed, scale=1.0):
    return scale * torch.randn(N, task.model.d_omega, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ------------------------------------------------------------------------------- energy balance
def test_energy_balance_of_a_closed_form_curve_is_simpson_accurate():
    """E = exp(-t), zeta = 1, I = exp(-t)/2 satisfies (39) exactly; the residual is Simpson's error,
    -(b-a) h^4 f''''/180 to leading order, and it shrinks at fourth order."""
    errs, hs = [], [0.5, 0.25, 0.125, 0.0625]
    for h in hs:
        t = np.arange(0, 4 + h / 2, h)
        b = energy_balance(t, np.exp(-t), np.exp(-t) / 2)
        assert math.isclose(b.drop, 1 - math.exp(-4), rel_tol=1e-14)
        errs.append(abs(b.residual))
    # Simpson's error of int_0^4 e^{-t} dt is (h^4/180) (e^{-0} - e^{-4}) + O(h^6)
    assert math.isclose(errs[-1], hs[-1] ** 4 / 180 * (1 - math.exp(-4)), rel_tol=1e-2)
    assert asymptotic_order(hs, errs).contains(4.0)


def test_dissipation_identity_holds_to_the_integrator_order_along_the_flow(task):
    """Theorem 6.1 along the Runge-Kutta characteristics: the balance residual is O(h^4)."""
    P0 = cloud(task, 16, 3)
    z = Decaying(0.9, 2.0, 0.5)
    hs = [1 / 4, 1 / 8, 1 / 16, 1 / 32]
    res = []
    for h in hs:
        f = reference_flow(task.model, task.data, P0, T=2.0, step=h, record_every=h, zeta=z, keep_stages=False,
                           progress=False)
        b = energy_balance(f.times, f.risk, f.dissipation, z)
        assert b.drop > 0.05
        res.append(abs(b.residual))
    assert res[-1] < 1e-6 * res[0] * 16**3 and res[-1] > 0
    fit = asymptotic_order(hs, res)
    assert fit.contains(4.0), fit


def test_energy_balance_rejects_bad_grids():
    t = np.linspace(0, 1, 4)  # three intervals
    with pytest.raises(ValueError, match="even number"):
        energy_balance(t, t, t)
    with pytest.raises(ValueError, match="uniformly"):
        energy_balance([0, 0.1, 0.3], [1, 1, 1], [0, 0, 0])
    with pytest.raises(ValueError, match="dissipation"):
        energy_balance([0, 1, 2], [1, 1, 1], [0, -1, 0])


# ------------------------------------------------------------- KL exponent on a known gradient flow
def power_flow(p, a, r0, t):
    """Gradient flow of f(x) = a |x|^p in closed form (radial): r' = -a p r^(p-1).
    Along it G = f and I = |grad f|^2 = p^2 a^(2/p) G^(2 - 2/p): theta = 1 - 1/p, c_KL = p a^(1/p)."""
    if p == 2:
        r = r0 * np.exp(-2 * a * t)
    else:
        r = (r0 ** (2 - p) + a * p * (p - 2) * t) ** (-1 / (p - 2))
    return a * r**p, (a * p * r ** (p - 1)) ** 2


@pytest.mark.parametrize("p", [2, 3, 4])
def test_kl_fit_recovers_theta_and_E_inf_of_a_known_flow(p):
    a, E_inf = 0.7, 1.3
    t = np.linspace(0.5, 5 if p == 2 else 40, 60)  # G falls over five decades, well above rounding
    G, I = power_flow(p, a, 2.0, t)
    fit = kl_fit(E_inf + G, I)  # E_inf unknown to the estimator
    theta = 1 - 1 / p
    # noise-free: only the rounding of E_inf + G (1e-16 / G_min relative) limits the estimate
    assert fit.fitted and abs(fit.theta - theta) < 1e-7
    assert abs(fit.E_inf - E_inf) < 1e-6 * G.min() + 1e-12
    assert math.isclose(fit.c_kl, p * a ** (1 / p), rel_tol=1e-4)
    known = kl_fit(E_inf + G, I, E_inf=E_inf)
    assert not known.fitted and math.isclose(known.theta, theta, rel_tol=1e-9)
    np.testing.assert_allclose(local_exponents(E_inf + G, I, E_inf), theta, rtol=1e-7)


def test_kl_fit_interval_covers_a_noisy_relation():
    rng = np.random.default_rng(0)
    G = np.geomspace(1e-1, 1e-5, 40)
    I = 0.5 * G ** 1.5 * np.exp(0.05 * rng.standard_normal(G.size))
    fit = kl_fit(2.0 + G, I)
    assert fit.contains(0.75) and fit.theta_hi - fit.theta_lo < 0.1
    assert fit.E_inf_lo <= 2.0 <= fit.E_inf_hi


@pytest.mark.parametrize("p", [2, 4])
def test_the_rate_of_theorem_6_10_is_attained_by_the_equality_flow(p):
    """For f = a|x|^p, (44) holds with equality, so c_KL is exact and the bound of Theorem 6.10 is G itself."""
    a = 0.7
    t = np.linspace(0, 30, 31)
    G, I = power_flow(p, a, 1.5, t)
    theta = 1 - 1 / p
    c = kl_constant(G, I, 0.0, theta)
    assert math.isclose(c, p * a ** (1 / p), rel_tol=1e-10)
    # zeta = 1/2 makes 2 int zeta = t, the time of the flow x' = -grad f
    np.testing.assert_allclose(kl_bound(G[0], c, theta, 0.5 * t), G, rtol=1e-9)
    # a smaller constant gives a bound that lies above
    assert np.all(kl_bound(G[0], 0.9 * c, theta, 0.5 * t)[1:] > G[1:])


def test_kl_functions_reject_bad_input():
    E, I = np.linspace(2, 1, 6), np.linspace(1, 0.1, 6)
    with pytest.raises(ValueError, match="E_inf"):
        kl_fit(E, I, E_inf=1.5)
    with pytest.raises(ValueError, match="dissipation"):
        kl_fit(E, np.zeros(6))
    with pytest.raises(ValueError, match="theta"):
        kl_constant(E, I, 0.0, 1.0)
    with pytest.raises(ValueError, match="G0"):
        kl_bound(-1.0, 1.0, 0.5, [0.0])


# ----------------------------------------------------------------------------- Remark 6.7
def test_inward_products_are_radial_derivatives_and_odd_under_the_value_flip(task):
    model, data = task.model, task.data
    heads, ball = cloud(task, 7, 5), Ball(3.0)
    chk = inward_products(model, data, heads, None, ball, n_points=40, generator=torch.Generator().manual_seed(2))
    P = chk.points
    # <omega, grad Phi(omega)> = d/dl Phi(l omega) at l = 1 (centre 0), by central differences
    d = 1e-5
    fd = (model.first_variation(data, (1 + d) * P, heads) - model.first_variation(data, (1 - d) * P, heads)) / (2 * d)
    torch.testing.assert_close(chk.products, fd, rtol=1e-7, atol=1e-10)
    # flipping W_V negates Phi and fixes the centre: the product is odd, so half the sphere points outwards
    m = model.d_x * model.d_k
    flipped = P.clone()
    flipped[:, 2 * m : 3 * m] *= -1
    chk2 = inward_products(model, data, heads, None, ball, n_points=1, generator=torch.Generator().manual_seed(2),
                           points=flipped)
    torch.testing.assert_close(chk2.products[1:], -chk.products, rtol=1e-10, atol=1e-12)
    assert 0 < chk.fraction_inward < 1 and chk.minimum < 0


# -------------------------------------------------------------- reference_flow's free recordings
def test_reference_flow_records_the_risk_and_dissipation_of_its_population(task):
    P0 = cloud(task, 9, 8, scale=0.8)
    f = reference_flow(task.model, task.data, P0, T=0.6, step=0.1, record_every=0.3, progress=False)
    g = reference_flow(task.model, task.data, P0, T=0.6, step=0.1, record_every=0.3, progress=False, keep_stages=False)
    assert torch.equal(f.population, g.population) and g.stage_residuals is None
    for j in range(3):
        torch.testing.assert_close(f.risk[j], task.model.risk(task.data, f.population[j]), rtol=1e-13, atol=0)
        torch.testing.assert_close(f.dissipation[j], task.model.dissipation(task.data, f.population[j]),
                                   rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="keep_stages"):
        g.characteristics(P0)
    radius = lambda W: float(W.norm(dim=1).max())
    k = reference_flow(task.model, task.data, P0, T=0.6, step=0.1, record_every=0.3, progress=False, keep=2,
                       statistics={"radius": radius})
    assert torch.equal(k.population, f.population[:, :2]) and torch.equal(k.final, f.population[-1])
    assert k.stats["radius"].tolist() == [radius(W) for W in f.population]


def test_resolved_until_finds_where_a_run_leaves_the_flow():
    """A Runge-Kutta run at a small step satisfies -dE/dt = 2 I at every record, so it is resolved to
    its end; the same records with the risk's fall slowed by a factor 2 after a time t0 (what an
    integrator oscillating across a stiff valley shows) are resolved up to the record before t0."""
    from mfattn.flows.dynamics import reference_flow
    from mfattn.analysis.longtime import resolved_until
    from mfattn.models.tasks import example

    model, data, h0, _ = example()
    f = reference_flow(model, data, h0, T=2.0, step=0.01, record_every=0.01, progress=False)
    t, E, I = f.times.numpy(), f.risk.numpy(), f.dissipation.numpy()
    assert resolved_until(t, E, I) == t[-1]
    k0 = 120
    slow = np.concatenate([E[:k0], E[k0 - 1] + 0.5 * (E[k0:] - E[k0 - 1])])
    assert resolved_until(t, slow, I) == t[k0 - 2]  # the record before the first one judged off
    with pytest.raises(ValueError, match="rtol"):
        resolved_until(t, E, I, rtol=0.0)


def test_kl_fit_on_a_tail_that_rises_then_falls_and_on_a_flat_one():
    """Found by a user: a dissipation that rises then falls steeply gave math's OverflowError (the
    constant c = exp(intercept / 2) beyond float64), and a flat one a fit with NaN bounds."""
    from mfattn.analysis.longtime import kl_fit

    rng = np.random.default_rng(0)
    for _ in range(200):  # tails of every shape: a fit or a ValueError, never another exception, never NaN
        n = int(rng.integers(5, 30))
        E = np.sort(rng.random(n) * 10 ** rng.uniform(-6, 2))[::-1] + rng.uniform(0, 2)
        k = int(rng.integers(1, n))
        I = np.concatenate([np.geomspace(10 ** rng.uniform(-5, 0), 10 ** rng.uniform(0, 5), k),
                            np.geomspace(10 ** rng.uniform(0, 5), 10 ** rng.uniform(-8, 0), n - k)])
        try:
            fit = kl_fit(E, I)
        except ValueError:
            continue
        assert not np.isnan([fit.theta, fit.theta_lo, fit.theta_hi, fit.c_kl, fit.E_inf]).any()
        assert fit.theta_lo <= fit.theta <= fit.theta_hi
    E = 0.5 + np.geomspace(1.0, 1e-3, 20)
    with pytest.raises(ValueError, match="dissipation: constant"):
        kl_fit(E, np.ones(20))
    flat = kl_fit(E, np.ones(20), E_inf=0.5)  # with E_inf given the flat tail is theta = 0 exactly
    assert flat.theta == 0 and flat.theta_lo == flat.theta_hi == 0


def test_kl_fit_profiles_to_the_least_squares_limit_energy():
    """The E_inf that kl_fit profiles is the least-squares one: no candidate on a dense grid of its own,
    each fitted by numpy's polyfit (an implementation kl_fit does not use), leaves a smaller residual."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(8, 30))
        G = np.geomspace(1.0, 10 ** rng.uniform(-4, -1), n)
        E = 0.7 + G
        I = 3.0 * G ** rng.uniform(1.0, 2.0) * np.exp(0.05 * rng.standard_normal(n))
        fit = kl_fit(E, I)
        e_min, spread = E.min(), np.ptp(E)
        best = np.inf
        for u in np.linspace(np.log(spread * 1e-8), np.log(spread * 1e3), 4000):
            x = np.log(E - e_min + np.exp(u))
            best = min(best, float(np.sum((np.log(I) - np.polyval(np.polyfit(x, np.log(I), 1), x)) ** 2)))
        assert fit.rss <= best * (1 + 1e-9) + 1e-12
