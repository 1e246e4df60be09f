"""The propagation-of-chaos experiment (mfattn.analysis.chaos) against oracles it does not use:

* the linear model, where every particle moves with the population's mean: gradient descent moves a
  cloud by (A^k - I)(m_0 - m*) with A = I - 2 zeta h Sigma, so a run's pathwise error against a
  reference's characteristics is (A^k - I)(m_run - m_ref), the same for every head, in closed form;
* the attention heads at small N, where the tagged characteristics are computed a second way: the
  run's heads carried inside the reference population with weight zero (they move in its field and
  do not change it), by one call of the integrator, without stage residuals;
* the two halves of (24)'s test family (linear maps, distances), for the linear model, on clouds
  built in closed form;
* the floor's rule, on values built from known errors and floors;
* the rate itself: for the linear model the error is a Gaussian mean's, exactly N^-1/2 in law.
"""

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch

from mfattn.analysis.chaos import DOMINATED_BELOW, FIRST, ChaosResult, ChaosSetup, expected_floor_ratio, floor_corrected
from mfattn.companion.sweep import run_chaos
from mfattn.flows.integrate import integrate
from mfattn.flows.seeds import stream
from mfattn.models.linear import linear_regression
from mfattn.models.tasks import example

H, T, EVERY, ZETA = 0.05, 1.0, 0.25, 0.7


@pytest.fixture(scope="module")
def linear():
    model, data, _ = linear_regression(d=4, n=30, generator=torch.Generator().manual_seed(3), noise=0.1)

    def draw(n, *name):
        return 0.8 * torch.randn(n, 4, generator=stream(11, name), dtype=torch.float64)

    def train(h0, **kw):
        return integrate(model, data, h0, stepper="gd", step=H, T=T, record_every=EVERY, zeta=ZETA,
                         batch_size=None, progress=False, **kw)

    return model, data, ChaosSetup(model, data, draw=draw, train=train)


def test_linear_model_errors_equal_the_closed_form(linear):
    model, data, setup = linear
    refs = [setup.reference(w, 300) for w in (1, 2)]
    out = setup.point(refs, 7, 2)
    X = data.X.numpy()
    A = np.eye(4) - 2 * ZETA * H * X.T @ X / X.shape[0]
    m_run = setup.draw(7, "heads", 2).numpy().mean(0)
    m_a, m_b = (setup.draw(300, "reference", w).numpy().mean(0) for w in (1, 2))
    per_record = round(EVERY / H)
    for j in range(round(T / EVERY) + 1):
        move = np.linalg.matrix_power(A, j * per_record) - np.eye(4)
        e, fl = np.linalg.norm(move @ (m_run - m_a)), np.linalg.norm(move @ (m_b - m_a))
        # every head has the same error: max and RMS agree with the closed form
        assert out["e_max"][j] == pytest.approx(e, rel=1e-9, abs=1e-13)
        assert out["e_rms"][j] == pytest.approx(e, rel=1e-9, abs=1e-13)
        assert out["floor_e_max"][j] == pytest.approx(fl, rel=1e-9, abs=1e-13)
    assert out["norm0"] == pytest.approx(np.linalg.norm(setup.draw(7, "heads", 2).numpy(), axis=1).max())
    # every head travels by (A^K - I)(m_run - m*), m* the least-squares minimiser
    m_star = np.linalg.solve(X.T @ X, X.T @ data.Y.numpy().reshape(-1))
    travel = np.linalg.norm((np.linalg.matrix_power(A, round(T / H)) - np.eye(4)) @ (m_run - m_star))
    assert out["travel"] == pytest.approx(travel, rel=1e-9)


def test_the_halves_of_24_equal_the_closed_form(linear):
    """The two halves of (24)'s test family against the tagged characteristics. For the linear model a
    run and its tags are the same cloud translated: h0 + (A^k - I)(m - m*), with m the run's own mean
    or the reference's. Both clouds are built here in closed form; the linear half is then
    max_v |<v, (A^k - I)(m_run - m_a)>| and the distance half the largest change of the mean distance
    to a centre, and (24) itself is the larger of the two."""
    model, data, setup = linear
    g = torch.Generator().manual_seed(5)
    D = torch.randn(6, 4, generator=g, dtype=torch.float64)
    C = torch.randn(3, 4, generator=g, dtype=torch.float64)
    tested = dataclasses.replace(setup, tests=(D, C))
    out = tested.point([tested.reference(w, 300) for w in (1, 2)], 7, 2)
    X = data.X.numpy()
    A = np.eye(4) - 2 * ZETA * H * X.T @ X / X.shape[0]
    m_star = np.linalg.solve(X.T @ X, X.T @ data.Y.numpy().reshape(-1))
    h0 = setup.draw(7, "heads", 2).numpy()
    m_a, m_b = (setup.draw(300, "reference", w).numpy().mean(0) for w in (1, 2))
    V = D.numpy() / np.linalg.norm(D.numpy(), axis=1, keepdims=True)

    def halves(cloud, other):
        lin = np.abs(V @ (cloud.mean(0) - other.mean(0))).max()
        dist = max(abs(np.linalg.norm(cloud - c, axis=1).mean() - np.linalg.norm(other - c, axis=1).mean())
                   for c in C.numpy())
        return lin, dist

    per_record = round(EVERY / H)
    for j in range(round(T / EVERY) + 1):
        move = np.linalg.matrix_power(A, j * per_record) - np.eye(4)
        run, tag_a, tag_b = (h0 + move @ (m - m_star) for m in (h0.mean(0), m_a, m_b))
        for key, (lin, dist) in (("", halves(run, tag_a)), ("floor_", halves(tag_b, tag_a))):
            assert out[f"{key}d24_tags_lin"][j] == pytest.approx(lin, rel=1e-9, abs=1e-13)
            assert out[f"{key}d24_tags_dist"][j] == pytest.approx(dist, rel=1e-9, abs=1e-13)
            assert out[f"{key}d24_tags"][j] == max(out[f"{key}d24_tags_lin"][j], out[f"{key}d24_tags_dist"][j])
    assert out["d24_tags_lin"][0] == out["d24_tags_dist"][0] == 0.0  # the same start
    assert max(out["d24_tags_lin"]) > 0 and max(out["d24_tags_dist"]) > 0


def test_24_against_the_reference_populations_equals_the_closed_form(linear):
    """(24) of the run against reference 1's population, and its floor (reference 2's population
    against reference 1's), which a grid computes once per pair of references and reuses: for the
    linear model each population is its initial draw translated by (A^k - I)(m - m*), so both are
    built here in closed form. Checked for two runs with one pair, then with the pair swapped (the
    run is then compared with reference 2's population), then with a new pair after the first is
    dropped."""
    model, data, setup = linear
    g = torch.Generator().manual_seed(6)
    D = torch.randn(5, 4, generator=g, dtype=torch.float64)
    C = torch.randn(4, 4, generator=g, dtype=torch.float64)
    tested = dataclasses.replace(setup, tests=(D, C))
    X = data.X.numpy()
    A = np.eye(4) - 2 * ZETA * H * X.T @ X / X.shape[0]
    m_star = np.linalg.solve(X.T @ X, X.T @ data.Y.numpy().reshape(-1))
    V = D.numpy() / np.linalg.norm(D.numpy(), axis=1, keepdims=True)

    def d24(cloud, other):
        lin = np.abs(V @ (cloud.mean(0) - other.mean(0))).max()
        dist = max(abs(np.linalg.norm(cloud - c, axis=1).mean() - np.linalg.norm(other - c, axis=1).mean())
                   for c in C.numpy())
        return max(lin, dist)

    def at(cloud0, j):  # a cloud moved by j records of gradient descent, all of it with its own mean
        move = np.linalg.matrix_power(A, j * round(EVERY / H)) - np.eye(4)
        return cloud0 + move @ (cloud0.mean(0) - m_star)

    def check(refs, n_ref, which, s):
        out = tested.point(refs, 7, s)
        h0 = setup.draw(7, "heads", s).numpy()
        pa, pb = (setup.draw(n_ref, "reference", w).numpy() for w in which)
        for j in range(round(T / EVERY) + 1):
            assert out["d24"][j] == pytest.approx(d24(at(h0, j), at(pa, j)), rel=1e-9, abs=1e-13)
            assert out["floor_d24"][j] == pytest.approx(d24(at(pb, j), at(pa, j)), rel=1e-9, abs=1e-13)
        return out

    refs = [tested.reference(w, 300) for w in (1, 2)]
    first = check(refs, 300, (1, 2), 2)
    assert check(refs, 300, (1, 2), 3)["floor_d24"] == first["floor_d24"]
    swapped = check(refs[::-1], 300, (2, 1), 2)  # the run against reference 2: not the first pair's means
    assert swapped["d24"][1:] != first["d24"][1:]
    del refs
    check([tested.reference(w, 200) for w in (1, 2)], 200, (1, 2), 2)


def test_the_means_of_a_reference_stand_for_it():
    """lipschitz_means against sums written out, and the discrepancy (24) and its halves from a
    population's means equal those from the population itself, bit for bit."""
    from mfattn.analysis.transport import LipschitzMeans, lipschitz_discrepancy, lipschitz_means, lipschitz_parts

    g = torch.Generator().manual_seed(7)
    heads = torch.randn(9, 3, generator=g, dtype=torch.float64)
    pop = torch.randn(400, 3, generator=g, dtype=torch.float64)
    D, C = torch.randn(5, 3, generator=g, dtype=torch.float64), torch.randn(2, 3, generator=g, dtype=torch.float64)
    m = lipschitz_means(pop, D, C)
    P, Dn, Cn = pop.numpy(), D.numpy(), C.numpy()
    for i, v in enumerate(Dn):
        assert float(m.linear[i]) == pytest.approx(sum(p @ v for p in P) / len(P) / math.sqrt(v @ v), rel=1e-12)
    for i, c in enumerate(Cn):
        assert float(m.distance[i]) == pytest.approx(sum(math.dist(p, c) for p in P) / len(P), rel=1e-12)
    assert lipschitz_parts(heads, m, D, C) == lipschitz_parts(heads, pop, D, C)
    assert lipschitz_discrepancy(heads, m, D, C) == lipschitz_discrepancy(heads, pop, D, C)
    with pytest.raises(ValueError, match="reference"):
        lipschitz_parts(heads, LipschitzMeans(m.linear[:4], m.distance), D, C)
    with pytest.raises(ValueError, match="atoms"):
        lipschitz_means(pop[0], D, C)


def test_a_chapters_own_measurements_join_the_record(linear):
    """``measure`` sees the trained run and both references; here the run's mean head at the end,
    against the closed form m* + A^K (m_run - m*), and the references' risks at the start, against
    the risk of their own draws."""
    model, data, setup = linear
    seen = {}

    def measure(run, refs):
        seen["refs"] = len(refs)
        return {"mean_final": run.final.mean(0).tolist(), "ref_risk0": [float(r.risk[0]) for r in refs]}

    s2 = ChaosSetup(model, data, draw=setup.draw, train=setup.train, measure=measure)
    refs = [s2.reference(w, 50) for w in (1, 2)]
    out = s2.point(refs, 6, 1)
    X = data.X.numpy()
    A = np.eye(4) - 2 * ZETA * H * X.T @ X / X.shape[0]
    m_star = np.linalg.solve(X.T @ X, X.T @ data.Y.numpy().reshape(-1))
    m_run = setup.draw(6, "heads", 1).numpy().mean(0)
    expected = m_star + np.linalg.matrix_power(A, round(T / H)) @ (m_run - m_star)
    np.testing.assert_allclose(out["mean_final"], expected, rtol=1e-9, atol=1e-12)
    for w, r0 in zip((1, 2), out["ref_risk0"]):
        assert r0 == pytest.approx(float(model.risk(data, setup.draw(50, "reference", w))), rel=1e-12)
    assert seen["refs"] == 2 and "e_rms" in out
    clash = ChaosSetup(model, data, draw=setup.draw, train=setup.train, measure=lambda run, refs: {"e_rms": 0.0})
    with pytest.raises(ValueError, match="^measure: returned 'e_rms'"):
        clash.point(refs, 6, 1)


def test_heads_characteristics_agree_with_zero_weight_passengers():
    model, data, _, _ = example()
    ref_cloud = {w: torch.randn(40, model.d_omega, generator=stream(5, ("reference", w)), dtype=torch.float64)
                 for w in (1, 2)}

    def draw(n, *name):
        return ref_cloud[name[1]][:n] if name[0] == "reference" else \
            torch.randn(n, model.d_omega, generator=stream(5, name), dtype=torch.float64)

    def train(h0, **kw):
        return integrate(model, data, h0, stepper="rk4", step=0.1, T=0.6, record_every=0.2, batch_size=None,
                         progress=False, **kw)

    setup = ChaosSetup(model, data, draw=draw, train=train)
    refs = [setup.reference(w, 40) for w in (1, 2)]
    n = FIRST + 4  # more heads than the fixed-size maximum takes
    out = setup.point(refs, n, 0)
    h0 = draw(n, "heads", 0)
    run = train(h0)

    def carried(w):  # the reference with h0 as passengers of weight zero
        cloud = torch.cat([ref_cloud[w], h0])
        weights = torch.cat([torch.full((40,), 1 / 40, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)])
        return integrate(model, data, cloud, stepper="rk4", step=0.1, T=0.6, record_every=0.2, batch_size=None,
                         weights=weights, progress=False).heads[:, 40:]

    ta, tb = carried(1), carried(2)
    e = (run.heads - ta).norm(dim=-1)
    np.testing.assert_allclose(out["e_max"], e.max(1).values.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(out["e_max_first"], e[:, :FIRST].max(1).values.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(out["floor_e_max_first"], (tb - ta)[:, :FIRST].norm(dim=-1).max(1).values.numpy(),
                               rtol=1e-9, atol=1e-12)
    assert all(a <= b for a, b in zip(out["e_max_first"], out["e_max"]))
    np.testing.assert_allclose(out["e_heads"], e.max(0).values.numpy(), rtol=1e-9, atol=1e-12)  # each head's sup
    np.testing.assert_allclose(out["e_rms"], e.pow(2).mean(1).sqrt().numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(out["floor_e_rms"], (tb - ta).norm(dim=-1).pow(2).mean(1).sqrt().numpy(),
                               rtol=1e-9, atol=1e-12)
    risk_a = [float(model.risk(data, ta[j])) for j in range(ta.shape[0])]
    np.testing.assert_allclose(out["d25_tags"], np.abs(run.risk.numpy() - risk_a), rtol=1e-9, atol=1e-13)
    assert out["e_max"][0] == 0.0 and out["floor_e_max"][0] == 0.0  # one start for run and tags


def test_extreme_value_subsets_against_every_subset():
    """The prediction at n heads: the mean over all C(K, n) subsets of a larger run, enumerated."""
    big = [0.5, 1.0, 1.0, 3.0, 2.0, 0.2]
    rows = [{"N": 6, "e_heads": big}, {"N": 6, "e_heads": [2 * x for x in big]},  # a common factor cancels
            {"N": 2, "e_heads": [1.0, 2.0]}, {"N": 3, "e_heads": [1.0, 2.0, 2.0]}]
    ev = ChaosResult(rows).extreme_value(stream(0, "subsets"), subsets=20000)
    assert ev.grid.tolist() == [2, 3]
    for g, p in zip(ev.grid, ev.predicted):  # every run with more than g heads, each with the same weight
        larger = [r["e_heads"] for r in rows if r["N"] > g]
        exact = np.mean([np.mean([max(c) / math.sqrt(np.mean(np.square(c))) for c in itertools.combinations(v, int(g))])
                         for v in larger])
        assert p == pytest.approx(exact, rel=0.01)  # 20000 subsets per run: a standard error of about 0.3 %
    assert ev.ratio.tolist() == pytest.approx([3 / math.sqrt(np.mean(np.square(big)))] * 2
                                              + [2 / math.sqrt(2.5), 2 / math.sqrt(3)])


def test_extreme_value_of_heads_with_a_known_law():
    """Runs whose heads' errors are a common size (random per run, falling like N^-1/2) times i.i.d.
    draws of one law: the ratio at N and its prediction from larger runs agree in law, and climb
    like the maximum of N exponential draws."""
    rng = np.random.default_rng(3)
    grid, seeds = (8, 32, 128), 40
    rows = [{"N": N, "e_heads": list(rng.uniform(1, 2) * N ** -0.5 * rng.exponential(size=N))}
            for N in grid for _ in range(seeds)]
    ev = ChaosResult(rows).extreme_value(stream(0, "subsets"))
    assert ev.grid.tolist() == [8, 32]
    for g, p in zip(ev.grid, ev.predicted):
        measured = ev.ratio[ev.N == g]
        assert abs(np.mean(measured) - p) < 3 * np.std(measured) / math.sqrt(seeds)
    assert ev.predicted[1] > ev.predicted[0] + 0.5  # the maximum of 32 draws against 8: H_32 - H_8 is 1.34
    for bad, msg in (([{"N": 4, "e_rms": [0.0]}], "records: the runs did not record e_heads"),
                     ([{"N": 4, "e_heads": [1.0, 2.0]}], "records: the runs have a single number"),
                     ([{"N": 4, "e_heads": [0.0, 0.0]}, {"N": 2, "e_heads": [1.0]}], "records: a run has zero")):
        with pytest.raises(ValueError, match=f"^{msg}"):
            ChaosResult(bad).extreme_value(stream(0, "subsets"))
    with pytest.raises(ValueError, match="^subsets"):
        ChaosResult(rows).extreme_value(stream(0, "subsets"), subsets=0)


def test_the_floor_rule_recovers_a_known_error():
    e = np.array([0.5, 0.2, 0.05, 0.01])      # the run's own errors
    delta = 0.02                              # each reference's error; two references differ by sqrt(2) delta
    raw, floor = np.sqrt(e**2 + delta**2), np.full(4, math.sqrt(2) * delta)
    c = floor_corrected(raw, floor)
    np.testing.assert_allclose(c.values, e, rtol=1e-12)
    assert c.dominated.tolist() == (raw < DOMINATED_BELOW * floor).tolist() == [False, False, True, True]
    kept = c.values[~c.dominated] / raw[~c.dominated]
    assert np.all(kept >= math.sqrt(7 / 8) - 1e-12)  # a kept point moves by at most 6.5 %
    for bad, name in (([-1.0], "raw"), ([math.nan], "raw")):
        with pytest.raises(ValueError, match=name):
            floor_corrected(bad, [0.0])
    with pytest.raises(ValueError, match="floor"):
        floor_corrected([1.0], [-0.1])


def test_fit_leaves_out_dominated_runs_and_says_when_too_few_remain():
    Ns = [8, 32, 128, 512]
    rows = [{"N": N, "e_rms": [0.0, N ** -0.5], "floor_e_rms": [0.0, 0.04]} for N in Ns]
    res = ChaosResult(rows)
    dom = res.corrected("e_rms").dominated           # 512^-1/2 = 0.044 < 0.08 <= 128^-1/2
    assert dom.tolist() == [False, False, False, True]
    fit = res.fit("e_rms")
    assert fit.n == 3                                # the undominated runs
    net = np.sqrt(np.array(Ns[:3], dtype=float) ** -1 - 0.04**2 / 2)
    assert fit.slope == pytest.approx(np.polyfit(np.log(Ns[:3]), np.log(net), 1)[0])
    assert res.dominated_share("e_rms") == 0.25
    raw = res.fit("e_rms", corrected=False)
    assert raw.n == 4 and raw.slope == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="quantity: the floor dominates"):
        ChaosResult(rows[2:] * 2).fit("e_rms")
    with pytest.raises(ValueError, match="quantity: 'd24' was not measured"):
        res.sup("d24")
    assert res.sup("e_rms", upto=0).tolist() == [0.0] * 4
    with pytest.raises(ValueError, match="records"):
        ChaosResult([])
    with pytest.raises(ValueError, match="records"):
        ChaosResult([{"e_rms": [1.0]}])


def test_the_linear_rate_is_one_half(linear):
    """The run's error is (A^k - I) times the mean of N Gaussian draws minus the reference's: exactly
    of order N^-1/2 in law, so the fitted rate (floor removed) must contain -1/2 and exclude -1/4."""
    model, data, setup = linear
    refs = [setup.reference(w, 1 << 16) for w in (1, 2)]
    rows = [{"N": N, "s": s, **setup.point(refs, N, s)} for N in (8, 32, 128, 512) for s in range(12)]
    fit = ChaosResult(rows).fit("e_rms")
    assert fit.slope_lo < -0.5 < fit.slope_hi
    assert fit.slope_hi < -0.25
    assert expected_floor_ratio(1 << 16, 512) == pytest.approx(8.0)


def test_point_refuses_bad_input(linear):
    model, data, setup = linear
    refs = [setup.reference(w, 16) for w in (1, 2)]
    with pytest.raises(ValueError, match="^N:"):
        setup.point(refs, 0, 0)
    with pytest.raises(ValueError, match="^s:"):
        setup.point(refs, 4, -1)
    with pytest.raises(ValueError, match="^refs:"):
        setup.point(refs[:1], 4, 0)
    other = ChaosSetup(model, data, draw=setup.draw,
                       train=lambda h0, **kw: integrate(model, data, h0, stepper="gd", step=H, T=T, record_every=0.5,
                                                        zeta=ZETA, batch_size=None, progress=False, **kw))
    with pytest.raises(ValueError, match="recording times"):
        other.point(refs, 4, 0)
    with pytest.raises(ValueError, match="n_ref"):
        setup.reference(1, 0)


def test_run_chaos_saves_and_resumes(linear, tmp_path):
    model, data, setup = linear
    calls = []

    def counted(h0, **kw):
        calls.append(h0.shape[0])
        return setup.train(h0, **kw)

    s2 = ChaosSetup(model, data, draw=setup.draw, train=counted)
    first = run_chaos(s2, [4, 8], 2, 64, tmp_path, key={"law": "gauss"}, progress=False)
    assert sorted(calls) == [4, 4, 8, 8, 64, 64]
    calls.clear()
    again = run_chaos(s2, [4, 8, 16], 2, 64, tmp_path, key={"law": "gauss"}, progress=False)
    assert calls == [16, 16]                     # the references and the finished runs were read back
    assert again.records[:4] == first.records
    np.testing.assert_array_equal(again.N, [4, 4, 8, 8, 16, 16])
    calls.clear()
    run_chaos(s2, [4], 1, 64, tmp_path, key={"law": "ball"}, progress=False)
    assert sorted(calls) == [4, 64, 64]          # another key: its own references and runs
    for bad, name in (([], "N_grid"), ([0], "N_grid"), ((4.0,), "N_grid")):
        with pytest.raises(ValueError, match=name):
            run_chaos(s2, bad, 1, 64, tmp_path, progress=False)
    with pytest.raises(ValueError, match="n_seeds"):
        run_chaos(s2, [4], 0, 64, tmp_path, progress=False)
    with pytest.raises(ValueError, match="n_ref"):
        run_chaos(s2, [4], 1, True, tmp_path, progress=False)
    with pytest.raises(ValueError, match="key: kind name the experiment's own fields"):
        run_chaos(s2, [4], 1, 64, tmp_path, key={"kind": "heads"}, progress=False)


def test_the_floor_dominates_whole_grid_points_never_single_runs():
    # errors N^-1/2 times a spread across draws; at N = 512 half the draws lie below twice the floor
    rng = np.random.default_rng(5)
    Ns = [16, 64, 128, 512]
    spread = np.exp(rng.normal(0.0, 0.5, size=(len(Ns), 40)))
    floor = 0.03    # twice the floor, 0.06: above the median error at N = 512 (0.044), below it at 128 (0.088)
    rows = [{"N": N, "e_rms": [0.0, N ** -0.5 * x], "floor_e_rms": [0.0, floor]}
            for N, xs in zip(Ns, spread) for x in xs]
    res = ChaosResult(rows)
    dom = res.corrected("e_rms").dominated
    N = res.N
    for n in Ns:                                     # one decision per N
        assert len(set(dom[N == n].tolist())) == 1
    assert dom[N == 512].all() and not dom[N < 512].any()
    assert res.left_out("e_rms") == [512]
    # the margin is the median over the median floor: 0.044/0.03 at 512 (below 2), 0.088/0.03 at 128
    margin = res.margin("e_rms")
    assert list(margin) == Ns
    for n in Ns:
        assert margin[n] == pytest.approx(np.median(n ** -0.5 * spread[Ns.index(n)]) / floor, rel=1e-12)
    assert margin[512] < DOMINATED_BELOW < margin[128]
    # one factor per N, from the medians: a run far below the floor is scaled, never corrected to zero
    tiny = ChaosResult(rows + [{"N": 16, "e_rms": [0.0, 1e-3], "floor_e_rms": [0.0, floor]}]).corrected("e_rms")
    assert tiny.values[-1] > 0
    ratio = res.corrected("e_rms").values / res.sup("e_rms")
    for n in Ns:
        assert np.ptp(ratio[N == n]) < 1e-12
        if n < 512:
            assert math.sqrt(7 / 8) - 1e-12 <= ratio[N == n][0] <= 1
    fit = res.fit("e_rms")
    assert fit.n == 120 and fit.slope_lo <= -0.5 <= fit.slope_hi
    # the per-run rule it replaces keeps only the large draws at N = 512: a flatter slope
    per_run = (res.sup("e_rms") < 2 * res.floor("e_rms"))
    keep = ~per_run
    biased = np.polyfit(np.log(N[keep]), np.log(res.corrected("e_rms").values[keep]), 1)[0]
    assert biased > fit.slope + 0.02


def test_run_chaos_returns_its_references(tmp_path):
    import torch
    from mfattn.analysis.chaos import ChaosSetup
    from mfattn.companion.sweep import run_chaos
    from mfattn.flows.integrate import integrate
    from mfattn.flows.seeds import stream
    from mfattn.models.linear import linear_regression
    model, data, _ = linear_regression(d=3, n=20, generator=torch.Generator().manual_seed(0))
    setup = ChaosSetup(model, data,
                       draw=lambda n, *name: torch.randn(n, 3, generator=stream(0, name), dtype=torch.float64),
                       train=lambda h0, **kw: integrate(model, data, h0, stepper="gd", step=0.1, T=0.5,
                                                        record_every=0.5, batch_size=None, progress=False, **kw))
    res = run_chaos(setup, (4, 8), 2, 32, tmp_path, progress=False)
    h0 = setup.draw(4, "heads", 0)
    ref = setup.reference(1, 32)
    torch.testing.assert_close(res.references[0].characteristics(h0), ref.characteristics(h0))
