"""Section 6 measurements: the energy balance (39), the KL fit (44) and rate (Theorem 6.10), and the
inward-pointing products of Remark 6.7."""

import math

import numpy as np
import pytest
import torch

from mfattn.flows.dynamics import Decaying, reference_flow
from mfattn.analysis.fitting import asymptotic_order
from mfattn.analysis.longtime import (balance_order, certificate_series, decay_power, doublings, energy_balance,
                                      flow_records, inward_products, local_exponent_curve, kl_bound, kl_constant, kl_fit, kl_rate, local_balance,
                                      local_exponents, long_run, pl_profile, profile_collapse, resolved_until,
                                      stationarity, support_radius)
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


# ------------------------------------------------------------------- chapter 04's runs and records
def test_local_balance_of_a_quadratic_is_exact_inside_and_resolved_until_uses_it():
    """E = 1 - t^2, I = t: -dE/dt = 2t = 2I, and second-order differences are exact for a quadratic."""
    t = np.linspace(0.0, 2.0, 21)
    b = local_balance(t, 1 - t**2, t)
    np.testing.assert_allclose(b.decrease[1:-1], 2 * t[1:-1], rtol=1e-12)
    np.testing.assert_allclose(b.rate, 2 * t, rtol=0)
    half = local_balance(t, 1 - t**2, t, zeta=0.5)  # zeta = 1/2 halves the rate only
    np.testing.assert_allclose(half.rate, t, rtol=0)
    assert resolved_until(t, 1 - t**2, t) == 2.0
    with pytest.raises(ValueError, match="times"):
        local_balance([0.0, 1.0, 1.0], [1, 1, 1], [0, 0, 0])


def test_balance_order_of_a_closed_form_curve_is_simpsons_error_at_fourth_order():
    """E = exp(-t), I = exp(-t)/2 satisfies (39) exactly: the residual is Simpson's error of int_0^4 e^-t,
    -(h^4/180)(1 - e^-4) to leading order (the sign: Simpson overestimates a convex integrand)."""
    hs = [0.5, 0.25, 0.125, 0.0625]
    runs = [dict(times=np.arange(0, 4 + h / 2, h)) for h in hs]
    for r in runs:
        r.update(risk=np.exp(-r["times"]), dissipation=np.exp(-r["times"]) / 2)
    order = balance_order(hs, runs)
    assert order.fit.contains(4.0)
    np.testing.assert_allclose(order.residuals[-1], hs[-1] ** 4 / 180 * (1 - math.exp(-4)), rtol=1e-2)
    assert all(b.residual < 0 for b in order.balances)
    assert order.summary().splitlines()[-1].startswith("order of the residual: 4.0")
    with pytest.raises(ValueError, match="runs"):
        balance_order(hs, runs[:2])


def test_profile_collapse_finds_equal_rescaled_times_in_closed_form():
    """E(s) = exp(-s/16) along both profiles: zeta = 1 (s = 2t) and zeta = (1 + t/4)^(-1/2)
    (s = 16 (sqrt(1 + t/4) - 1)); s = 16 m falls at t = 8 m and t = 8 m + 4 m^2. The coarse runs carry a known
    error, so the Richardson estimates and the control at equal t are known in closed form."""
    f = lambda s: np.exp(-s / 16)  # noqa: E731
    z_dec = Decaying(1.0, 4.0, 0.5)
    ta, tb = np.arange(0.0, 33.0, 8.0), np.arange(0.0, 97.0, 4.0)
    sa, sb = 2 * ta, 16 * (np.sqrt(1 + tb / 4) - 1)
    a = (1.0, dict(times=ta, risk=f(sa) + 1.5e-6), dict(times=ta, risk=f(sa)))
    b = (z_dec, dict(times=tb, risk=f(sb) - 3e-6), dict(times=tb, risk=f(sb)))
    m = np.arange(1, 5)
    col = profile_collapse(a, b, 16.0 * m)
    np.testing.assert_allclose(col.gap, 0.0, atol=1e-15)
    np.testing.assert_allclose(col.tolerance, 2 * (1.5e-6 + 3e-6) * 16 / 15, rtol=1e-6)
    np.testing.assert_allclose(col.s_b, 16.0 * m, rtol=1e-12)
    # the control: at t = 8 m the decaying profile has only reached s = 16 (sqrt(1 + 2 m) - 1)
    np.testing.assert_allclose(col.gap_t, np.abs(f(16.0 * m) - f(16 * (np.sqrt(1 + 2 * m) - 1))), rtol=1e-9)
    assert col.worst < 1e-6 < 1 < col.worst_t
    with pytest.raises(ValueError, match="a: no record at s"):
        profile_collapse(a, b, [10.0])


def test_long_run_records_match_its_kept_measures(task):
    """The records of risk and support radius at the kept times are those of the kept measures, evaluated
    afresh; the kept times are geometric, T / 2^(K - 1) .. T, and the balance (39) closes."""
    heads = cloud(task, 6, 7, scale=0.5)
    run = long_run(task.model, task.data, heads, T=2.0, step=1 / 16, n_kept=3, n_frames=4)
    assert run.ends.tolist() == [0.5, 1.0, 2.0]
    assert sorted(run.frames) == [0.0, 1 / 16, 3 / 16, 10 / 16, 2.0]  # geomspace(1, 32, 4) = 1, 3.17, 10.08, 32
    for e, W in zip(run.ends, run.snapshots):
        k = int(round(e * 16))
        assert math.isclose(run.risk[k], float(task.model.risk(task.data, W)), rel_tol=1e-12)
        assert math.isclose(run.radius[k], max(float(w.norm()) for w in W), rel_tol=1e-12)
    # (39) closes up to the integrator's fourth-order error: halving the step divides the residual by about 16
    finer = long_run(task.model, task.data, heads, T=2.0, step=1 / 32, n_kept=3)
    assert run.balance.relative < 1e-4 and 12 < run.balance.residual / finer.balance.residual < 20
    cut = run.resolved()
    assert cut.time == 2.0 and cut.record == 32 and cut.kept == 2
    with pytest.raises(ValueError, match="n_kept"):
        long_run(task.model, task.data, heads, T=2.0, step=1 / 16, n_kept=0)


def test_doublings_of_closed_form_growths():
    """log2 t grows by exactly 1 over each doubling (slope 0: a creep); 1 - 1/t by 1/t (slope -1)."""
    t = np.arange(1.0, 65.0)
    d = doublings(t, np.log2(t), T=64.0, n=5)
    assert d.times.tolist() == [2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    np.testing.assert_allclose(d.increase, 1.0, rtol=1e-12)
    assert abs(d.fit.slope) < 1e-9
    d = doublings(t, 1 - 1 / t, T=64.0, n=5)
    np.testing.assert_allclose(d.increase, 1 / d.times[1:], rtol=1e-12)
    assert math.isclose(d.fit.slope, -1.0, rel_tol=1e-9)
    assert doublings(t, -t, T=64.0, n=3).fit is None  # a falling quantity: no fit
    with pytest.raises(ValueError, match="n"):
        doublings(t, t, T=64.0, n=1)


def test_kl_rate_on_the_equality_flow_holds_out_of_sample_and_beats_the_pl_rate():
    """The flow of f = a|x|^4 satisfies (44) with theta = 3/4 with equality: fitted on either half, the rate
    of Theorem 6.10 is G itself (worst ratio 1) on the other. The PL rate with lambda = min I/G of the first
    half is an exponential; computed here directly, it falls below G on the second half."""
    a, p = 0.7, 4
    t = np.linspace(0, 60, 241)
    G, I = power_flow(p, a, 1.5, t)
    s = t / 2  # the flow x' = -grad f runs at dG/dt = -I: in s = t/2, dG/ds = -2 I, the chapter's zeta = 1
    tail = t >= 10
    r = kl_rate(s, 1.0 + G, I, on=tail)
    assert abs(r.theta - 0.75) < 1e-6 and abs(r.worst - 1) < 1e-4
    oos = kl_rate(s, 1.0 + G, I, on=tail, out_of_sample=True)
    idx = np.nonzero(tail)[0]
    early, late = idx[: idx.size // 2], idx[idx.size // 2:]
    np.testing.assert_array_equal(oos.fit_times, s[early])
    np.testing.assert_array_equal(oos.times, s[late])
    assert abs(oos.worst - 1) < 1e-4
    lam = np.min(I[early] / G[early])
    pl_rate = G[late][0] * np.exp(-2 * lam * (s[late] - s[late][0]))
    assert math.isclose(oos.worst_pl, np.max(G[late] / pl_rate), rel_tol=1e-4) and oos.worst_pl > 1
    with pytest.raises(ValueError, match="on"):
        kl_rate(s, 1.0 + G, I, on=tail[:-1])


def test_pl_profile_against_a_plain_loop():
    rng = np.random.default_rng(3)
    t = np.linspace(0, 10, 41)
    G = np.exp(-t) * (1 + 0.3 * rng.random(t.size))
    I = G ** 1.4
    pl = pl_profile(t, 2.0 + G, I, 2.0, tail=t >= 2)
    G = (2.0 + G) - 2.0  # the gap as the profile sees it, rounding included
    lo, mins = math.inf, []
    for k in range(1, t.size):
        lo = min(lo, I[k] / (2 * G[k]))
        mins.append(lo)
    np.testing.assert_allclose(pl.running_min, mins, rtol=1e-12)
    for lam in (1.0, 0.1, 0.01, 1e-9):
        ok = [k for k in range(1, t.size) if all(I[j] / (2 * G[j]) >= lam for j in range(1, k + 1))]
        assert pl.last_record(lam) == (max(ok) if ok else 0)
    with pytest.raises(ValueError, match="E_min"):
        pl_profile(t, 2.0 + G, I, 3.0, tail=t >= 2)


def test_certificate_series_fits_a_known_power_and_checks_convexity():
    G = np.array([1e-1, 1e-2, 1e-3, 1e-4])
    recs = [dict(t=float(k), gap=3 * g**0.75, upper=1.5 + g, within=1, n_starts=4) for k, g in enumerate(G)]
    cs = certificate_series(recs, 1.5)
    assert math.isclose(cs.fit.slope, 0.75, rel_tol=1e-6) and cs.convex
    recs[0]["gap"] = 0.5 * G[0]  # below G: convexity fails there
    assert not certificate_series(recs, 1.5).convex
    with pytest.raises(ValueError, match="E_min"):
        certificate_series(recs, 2.0)


def test_stationarity_against_a_direct_reading_of_the_run(task):
    heads = cloud(task, 6, 11, scale=0.5)
    run = long_run(task.model, task.data, heads, T=8.0, step=1 / 8, n_kept=4)
    st = stationarity(task.model, task.data, run, heads, E_min=task.optimal_risk, T=8.0, tail_from=0.25,
                      n_doublings=3, n_sphere=10, generator=torch.Generator().manual_seed(0))
    t = run.times
    assert st.tail.tolist() == [x >= 2.0 for x in t]
    assert st.rise == max(run.risk[k + 1] - run.risk[k] for k in range(t.size - 1)) and st.rise <= st.tolerance
    assert st.min_gap == min(run.risk) - task.optimal_risk
    assert [float(run.radius[list(t).index(x)]) for x in (1.0, 2.0, 4.0, 8.0)] == st.doublings.values.tolist()
    g = task.model.grad_first_variation(task.data, run.snapshots[-1], run.snapshots[-1])
    assert math.isclose(st.speed, max(float(v.norm()) for v in g), rel_tol=1e-12)
    assert st.inward.points.shape[0] == 10
    np.testing.assert_allclose(st.inward.points.norm(dim=1).numpy(), run.radius[-1], rtol=1e-12)
    assert st.kept_times.tolist() == [1.0, 2.0, 4.0, 8.0] and st.w1.shape == (3,)
    with pytest.raises(ValueError, match="tail_from"):
        stationarity(task.model, task.data, run, heads, E_min=0.0, T=8.0, tail_from=1.0, n_sphere=4,
                     generator=torch.Generator())


def test_support_radius_and_flow_records(task):
    assert support_radius(torch.tensor([[3.0, 4.0], [0.0, 1.0]])) == 5.0
    with pytest.raises(ValueError, match="heads"):
        support_radius(torch.zeros(0, 3))
    heads = cloud(task, 5, 13, scale=0.5)
    r = flow_records(task.model, task.data, heads, T=0.5, step=0.125, record_every=0.25)
    assert r["times"] == [0.0, 0.25, 0.5]
    assert math.isclose(r["risk"][0], float(task.model.risk(task.data, heads)), rel_tol=1e-12)


# ------------------------------------------------------------- plotting and quoting helpers
def test_local_exponent_curve_against_a_plain_loop():
    """Geometric midpoints and 0.5 dlog I / dlog G between consecutive records, every k-th, by a plain loop."""
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.uniform(0.5, 1.5, 23))
    E = 2.0 + np.cumsum(rng.uniform(0.1, 1.0, 23)[::-1])[::-1]
    I = rng.uniform(0.1, 2.0, 23)
    tm, theta = local_exponent_curve(t, E, I, 2.0, max_points=5)
    k = (len(t) - 1) // 5
    want_t = [math.sqrt(t[j] * t[j + 1]) for j in range(0, len(t) - 1, k)]
    want = [0.5 * (math.log(I[j + 1]) - math.log(I[j])) / (math.log(E[j + 1] - 2.0) - math.log(E[j] - 2.0))
            for j in range(0, len(t) - 1, k)]
    assert np.allclose(tm, want_t, rtol=1e-14) and np.allclose(theta, want, rtol=1e-12)
    assert local_exponent_curve(t, E, I, 2.0)[0].size == len(t) - 1  # fewer records than max_points: all kept
    with pytest.raises(ValueError, match="times"):
        local_exponent_curve(-t, E, I, 2.0)
    with pytest.raises(ValueError, match="max_points"):
        local_exponent_curve(t, E, I, 2.0, max_points=0)


def test_decay_power_is_the_exponent_of_a_power_law_read_at_the_nearest_records():
    t = np.arange(0.0, 200.5, 0.5)
    assert math.isclose(decay_power(t, 7.0 * (t + 1e-300) ** -0.8, 10.0, 160.0), -0.8, rel_tol=1e-12)
    # off the grid the values are those of the nearest records, the times those asked for
    v = np.exp(-t)
    assert math.isclose(decay_power(t, v, 10.2, 20.1), -10.0 / math.log(20.1 / 10.2), rel_tol=1e-12)
    for bad, kw in (("t_a", dict(t_a=0.0, t_b=1.0)), ("t_b", dict(t_a=1.0, t_b=1.0)),
                    ("values", dict(t_a=1.0, t_b=2.0, values=-v)), ("values", dict(t_a=1.0, t_b=2.0, values=v[:3]))):
        with pytest.raises(ValueError, match=bad):
            decay_power(t, kw.pop("values", v), **kw)


def test_inward_check_sd_is_the_binomial_sd_at_one_half(task):
    chk = inward_products(task.model, task.data, cloud(task, 5, 0), None, Ball(2.0), n_points=64,
                          generator=torch.Generator().manual_seed(0))
    assert chk.sd == math.sqrt(0.5 * (1 - 0.5) / 64)
