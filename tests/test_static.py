"""The static problem of section 4: the ball K, the Frank-Wolfe certificate, the solvers and the
constructions of Theorem 4.1's proof. Oracles: the teacher's exact optimum, convexity of (10),
closed forms of the i.i.d. construction, and the model's exact symmetries."""

import math

import pytest
import torch

from mfattn.analysis.static import (
    Ball,
    certificate,
    feature_sup,
    finite_head_optimum,
    finite_record,
    from_record,
    iid_construction,
    iid_summary,
    mean_field_optimum,
    minimize_first_variation,
    optimum_record,
    round_measure,
    rounding_gaps,
    sample_measure,
    to_record,
)
from mfattn.analysis.fitting import loglog_fit
from mfattn.models.tasks import teacher_task

from conftest import make_problem


@pytest.fixture(scope="module")
def teacher():
    T = teacher_task(n=8, L=4, d_x=3, d_k=1, d_v=3, n_teacher=2, seed=1)
    ball = Ball(1.25 * float(T.teacher_heads.norm(dim=1).max()))
    return T, ball


def scale_V(model, omega, c):
    W_Q, W_K, W_V, W_O = model.unpack(omega)
    return model.pack(W_Q, W_K, c * W_V, W_O)


def test_ball_projection_is_the_nearest_point_and_idempotent():
    g = torch.Generator().manual_seed(0)
    center = torch.randn(6, generator=g, dtype=torch.float64)
    ball = Ball(1.5, center)
    x = 3 * torch.randn(200, 6, generator=g, dtype=torch.float64)
    p = ball.project(x)
    assert bool(ball.contains(p).all())
    torch.testing.assert_close(ball.project(p), p, rtol=0, atol=1e-14)
    inside = ball.norm(x) <= 1.5
    assert bool(torch.equal(p[inside], x[inside]))
    # nearest point: no point of the ball (sampled) is closer to x than its projection
    cand = ball.project(center + 1.5 * torch.rand(5000, 1, generator=g, dtype=torch.float64)
                        * torch.nn.functional.normalize(torch.randn(5000, 6, generator=g, dtype=torch.float64), dim=1))
    d_proj = (x - p).norm(dim=1)
    d_cand = torch.cdist(x, cand).min(1).values
    assert bool((d_proj <= d_cand + 1e-12).all())
    s = ball.sample_sphere(50, 6, generator=g)
    torch.testing.assert_close(ball.norm(s), torch.full((50,), 1.5, dtype=torch.float64))


def test_phi_is_linear_along_W_V_and_odd_under_its_sign_flip(problem):
    """The two facts behind 'min_K Phi <= 0, on the boundary unless Phi = 0 on K'."""
    model, data, heads, w, g = problem
    q = torch.randn(5, model.d_omega, generator=g, dtype=torch.float64)
    phi = model.first_variation(data, q, heads, w)
    for c in (0.0, 0.3, 2.0, -1.0):
        torch.testing.assert_close(model.first_variation(data, scale_V(model, q, c), heads, w), c * phi,
                                   rtol=1e-12, atol=1e-14)
    flipped = scale_V(model, q, -1.0)
    torch.testing.assert_close(flipped.norm(dim=1), q.norm(dim=1), rtol=0, atol=0)


def test_certificate_is_zero_at_the_teacher_and_brackets_its_optimum(teacher):
    T, ball = teacher
    g = torch.Generator().manual_seed(0)
    c = certificate(T.model, T.data, T.teacher_heads, T.teacher_weights, ball, generator=g, n_starts=8, iters=30)
    assert c.gap <= 1e-12 and abs(c.phi_min) <= 1e-12  # residual zero: Phi vanishes on all of K
    assert math.isclose(c.upper, T.optimal_risk, rel_tol=1e-12)
    # a perturbed measure: positive gap, and the bracket still contains the exact optimum
    pert = T.teacher_heads + 0.3 * torch.randn(T.teacher_heads.shape, generator=g, dtype=torch.float64)
    c = certificate(T.model, T.data, ball.project(pert), T.teacher_weights, ball, generator=g, n_starts=32, iters=150)
    assert c.gap > 1e-4
    assert c.lower <= T.optimal_risk <= c.upper
    assert c.minimum.n_agree >= 2


def test_certificate_lower_end_is_below_every_measure_in_K(problem):
    """Convexity of (10): E(nu) >= E(rho) + int Phi(.; rho) d(nu - rho) >= certificate lower end."""
    model, data, heads, w, g = problem
    ball = Ball(2.5)
    heads = ball.project(heads)
    c = certificate(model, data, heads, w, ball, generator=g, n_starts=32, iters=200)
    phi_rho = model.first_variation(data, heads, heads, w)
    for _ in range(20):
        nu = ball.project(2 * torch.randn(4, model.d_omega, generator=g, dtype=torch.float64))
        E_nu = float(model.risk(data, nu))
        linear = c.upper + float(model.first_variation(data, nu, heads, w).mean()) - float((w * phi_rho).sum())
        assert E_nu >= linear - 1e-12
        assert E_nu >= c.lower - 1e-12
    with pytest.raises(ValueError, match="heads"):
        certificate(model, data, 10 * heads, w, ball, generator=g)


def test_minimum_of_phi_is_on_the_sphere_and_not_above_sampled_values(problem):
    model, data, heads, w, g = problem
    ball = Ball(2.0)
    mn = minimize_first_variation(model, data, heads, w, ball, generator=g, n_starts=32, iters=200)
    assert mn.value < 0
    assert abs(float(ball.norm(mn.omega)) - 2.0) < 1e-9
    sample = ball.project(3 * torch.randn(2000, model.d_omega, generator=g, dtype=torch.float64))
    assert mn.value <= float(model.first_variation(data, sample, heads, w).min())
    assert 1 <= mn.n_agree <= mn.n_starts == 32


def test_mean_field_optimum_reaches_the_teacher_optimum(teacher):
    T, ball = teacher
    opt = mean_field_optimum(T.model, T.data, ball, generator=torch.Generator().manual_seed(2), n_atoms0=6,
                             outer=3, n_starts=16, iters=100, progress=False)
    lo, up = opt.bracket
    assert lo <= T.optimal_risk + 1e-12 and up >= T.optimal_risk - 1e-12
    assert up - T.optimal_risk < 1e-7 and up - lo < 1e-3
    assert bool(ball.contains(opt.heads).all()) and math.isclose(float(opt.weights.sum()), 1.0, rel_tol=1e-12)


def test_boundary_optimum_satisfies_the_support_condition():
    """With the teacher outside K, the optimum's atoms lie on the sphere, with equal Phi (Thm 4.3)."""
    T = teacher_task(n=6, L=4, d_x=3, d_k=1, d_v=3, n_teacher=2, seed=3)
    ball = Ball(0.4 * float(T.teacher_heads.norm(dim=1).max()))
    opt = mean_field_optimum(T.model, T.data, ball, generator=torch.Generator().manual_seed(0), n_atoms0=4,
                             outer=12, n_starts=16, iters=100, progress=False)
    c = opt.certificate
    assert c.gap < 1e-7, opt.gap
    assert c.lower > T.optimal_risk + 1e-3  # K excludes the teacher: strictly worse than the entropy
    torch.testing.assert_close(ball.norm(opt.heads), torch.full_like(opt.weights, ball.radius), rtol=1e-9, atol=0)
    assert float((c.phi_support - c.phi_min).abs().max()) < 1e-5 and c.phi_min < 0
    # the support is the same measure: logits within the dropped mass, every kept weight >= weight_tol
    sh, sw = opt.support_heads, opt.support_weights
    assert sh.shape[0] <= opt.heads.shape[0] and bool((sw >= 1e-6).all())
    assert abs(float(sw.sum()) - 1) < 1e-14
    dropped = float(opt.weights[opt.weights < 1e-6].sum())
    scale = float(T.model.features(T.data.X, opt.heads).flatten(1).norm(dim=1).max())
    err = float((T.model.logits(T.data.X, sh, sw) - T.model.logits(T.data.X, opt.heads, opt.weights)).abs().max())
    assert err <= 2 * (dropped + 1e-4) * scale + 1e-12


def test_round_measure_and_sample_measure():
    g = torch.Generator().manual_seed(0)
    heads = torch.randn(5, 3, generator=g, dtype=torch.float64)
    w = torch.tensor([0.05, 0.4, 0.25, 0.17, 0.13], dtype=torch.float64)
    for N in (1, 3, 7, 100, 1001):
        r = round_measure(heads, w, N)
        assert r.shape == (N, 3)
        counts = torch.stack([(r == h).all(1).sum() for h in heads]).double()
        assert int(counts.sum()) == N and bool(((counts / N - w).abs() < 1 / N).all())
    draws = sample_measure(heads, w, 200_000, generator=g)
    freq = torch.stack([(draws == h).all(1).double().mean() for h in heads])
    assert bool(((freq - w).abs() < 5 * (w * (1 - w) / 200_000).sqrt()).all())
    with pytest.raises(ValueError, match="N"):
        round_measure(heads, w, 0)
    with pytest.raises(ValueError, match="weights"):
        sample_measure(heads, w * 2, 3, generator=g)


def test_iid_construction_matches_closed_forms(problem):
    model, data, heads, w, g = problem
    out = iid_construction(model, data, heads, w, [1, 4, 16], n_draws=4000, generator=g, progress=False)
    psi = model.features(data.X, heads)
    z = torch.einsum("m,mblv->blv", w, psi)
    # E ||z_N - z||^2 = (1/N) sum_j w_j ||psi_j - z||^2, averaged over sequences and positions
    var = float(torch.einsum("m,mbl->bl", w, (psi - z).pow(2).sum(-1)).mean())
    for a, N in enumerate(out["N"]):
        mse = out["logit_mse"][a]
        assert abs(mse.mean() - var / N) < 5 * mse.std() / math.sqrt(mse.size)
    # N = 1: a draw is one atom, so its risk gap is one of E(delta_j) - E(rho)
    E = float(model.risk(data, heads, w))
    atoms = torch.tensor([float(model.risk(data, heads[j : j + 1])) - E for j in range(heads.shape[0])], dtype=torch.float64)
    gaps1 = torch.from_numpy(out["risk_gap"][0])
    assert bool((gaps1[:, None] - atoms[None]).abs().min(1).values.max() < 1e-12)
    # Jensen: the mean risk gap is nonnegative (logits are unbiased, the loss convex)
    for a in range(3):
        gap = out["risk_gap"][a]
        assert gap.mean() > -3 * gap.std() / math.sqrt(gap.size)


def test_finite_head_optimum_attains_the_teacher_with_n_teacher_heads(teacher):
    T, ball = teacher
    g = torch.Generator().manual_seed(0)
    N = T.teacher_heads.shape[0]
    start = ball.project(T.teacher_heads + 0.05 * torch.randn(T.teacher_heads.shape, generator=g, dtype=torch.float64))
    fo = finite_head_optimum(T.model, T.data, N, ball, generator=g, n_random=1, inits={"near": start}, iters=50)
    assert fo.value - T.optimal_risk < 1e-9
    assert bool((fo.values >= T.optimal_risk - 1e-12).all())  # inf E_N >= inf E (Theorem 4.1, left side)
    assert fo.labels == ("random", "near")
    with pytest.raises(ValueError, match="inits"):
        finite_head_optimum(T.model, T.data, N + 1, ball, generator=g, inits={"near": start})


def test_feature_sup_lies_between_sampled_values_and_a_closed_form_bound(problem):
    model, data, *_ = problem
    g = torch.Generator().manual_seed(1)
    ball = Ball(1.7)
    B = feature_sup(model, data.X, ball, generator=g, n_starts=16, iters=150)
    sample = ball.sample_sphere(500, model.d_omega, generator=g)
    sampled = float(model.features(data.X, sample).norm(dim=-1).max())
    # ||psi_l|| <= max_s ||x_s|| ||W_V|| ||W_O|| ||W_out|| <= max_s ||x_s|| (R^2 / 2) ||W_out||_op
    bound = float(data.X.norm(dim=-1).max()) * 1.7**2 / 2 * float(torch.linalg.matrix_norm(model.W_out, 2))
    assert sampled <= B <= bound * (1 + 1e-12)


def test_fused_risk_grad_phi_equals_the_streamed_routines():
    model, data, heads, w, _ = make_problem(N=9)
    risk, grad, phi = model.risk_grad_phi(data.X, data.Y, heads, w)
    small = type(model)(model.W_out, model.d_k, chunk_size=2, sample_chunk=2)
    r2, g2, p2 = small.risk_grad_phi(data.X, data.Y, heads, w)
    torch.testing.assert_close(risk, model.risk(data, heads, w), rtol=1e-13, atol=0)
    torch.testing.assert_close(grad, model.grad_first_variation(data, heads, heads, w), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(phi, model.first_variation(data, heads, heads, w), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close((r2, g2, p2), (risk, grad, phi), rtol=1e-12, atol=1e-14)


def test_bad_arguments_name_themselves(problem):
    model, data, heads, w, g = problem
    with pytest.raises(ValueError, match="radius"):
        Ball(-1.0)
    with pytest.raises(ValueError, match="ball"):
        minimize_first_variation(model, data, heads, w, 3.0, generator=g)
    with pytest.raises(ValueError, match="generator"):
        minimize_first_variation(model, data, heads, w, Ball(1.0), generator=0)
    with pytest.raises(ValueError, match="init_scale"):
        finite_head_optimum(model, data, 2, Ball(1.0), generator=g, init_scale=2.0)
    with pytest.raises(ValueError, match="N_grid"):
        iid_construction(model, data, heads, w, [0, 2], n_draws=3, generator=g)


def test_consolidate_merges_orbit_twins_and_drops_negligible_atoms():
    """Oracle: the head's symmetry (stability.group_action) moves an atom along its orbit without changing
    its feature, so a measure that splits one atom's weight between two orbit points is the same measure.
    consolidate must merge them, drop atoms of negligible weight, and leave the logits (8) unchanged."""
    from mfattn.analysis.stability import group_action
    from mfattn.analysis.static import consolidate

    model, data, heads, w, g = make_problem(N=4)
    d_k = model.d_k
    G = torch.linalg.qr(torch.randn(d_k, d_k, generator=g, dtype=torch.float64))[0] * 1.7  # not orthogonal
    M = torch.randn(d_k, d_k, generator=g, dtype=torch.float64) + 3 * torch.eye(d_k, dtype=torch.float64)
    twin = group_action(model, heads[1], G, M)
    assert float((twin - heads[1]).norm()) > 0.1 * float(heads[1].norm())  # a different point of the orbit
    stray = torch.randn(1, model.d_omega, generator=g, dtype=torch.float64)
    split = torch.cat([heads, twin[None], stray])
    ws = torch.cat([w, torch.zeros(2, dtype=torch.float64)])
    ws[1], ws[4], ws[5] = 0.4 * w[1], 0.6 * w[1], 1e-9
    ws = ws / ws.sum()
    h2, w2 = consolidate(model, data.X, split, ws, weight_tol=1e-6, merge_tol=1e-6)
    assert h2.shape[0] == 4 and abs(float(w2.sum()) - 1) < 1e-15
    # the merged measure is the original one: same weights per distinct feature, same logits
    F = model.features(data.X, heads).flatten(1)
    F2 = model.features(data.X, h2).flatten(1)
    match = torch.cdist(F2, F).argmin(1)
    assert sorted(match.tolist()) == [0, 1, 2, 3]
    torch.testing.assert_close(w2, w[match], rtol=2e-9, atol=0)
    torch.testing.assert_close(model.logits(data.X, h2, w2), model.logits(data.X, heads, w), rtol=1e-8, atol=1e-12)
    # distinct features stay distinct, and nothing is dropped at weight_tol = 0
    h3, w3 = consolidate(model, data.X, split, ws, weight_tol=0.0, merge_tol=1e-6)
    assert h3.shape[0] == 5
    with pytest.raises(ValueError, match="weight_tol"):
        consolidate(model, data.X, split, ws, weight_tol=1.0)
    with pytest.raises(ValueError, match="merge_tol"):
        consolidate(model, data.X, split, ws, merge_tol=-1.0)


def test_count_within_counts_starts_by_their_distance_to_the_best(teacher):
    T, ball = teacher
    extra = 0.5 * ball.sample_sphere(5, T.model.d_omega, generator=torch.Generator().manual_seed(1))
    mn = minimize_first_variation(T.model, T.data, T.teacher_heads[:1], None, ball,
                                  generator=torch.Generator().manual_seed(0), n_starts=16, starts=extra, iters=50)
    assert (mn.n_random, mn.n_starts) == (16, 21)
    d = (mn.values - mn.value) / max(1.0, abs(mn.value))
    for tol in (1e-12, 1e-6, 1e-3, 1.0):
        assert mn.count_within(tol) == int((d <= tol).sum())
        assert mn.count_within(tol, random_only=True) == int((d[:16] <= tol).sum())
    assert mn.count_within(1e-6) == mn.n_agree  # the default agree_tol
    with pytest.raises(ValueError, match="rel_tol"):
        mn.count_within(0.0)


def test_minimize_is_the_named_minimiser():
    """minimize(method=...) calls the minimiser it names with the same arguments: the same result for
    the same generator seed; unknown methods, unknown and missing options are named."""
    from mfattn.analysis.static import minimize

    T = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)
    ball = Ball(1.0)
    a = minimize(T.model, T.data, ball, method="finite-heads", N=2, generator=torch.Generator().manual_seed(5),
                 n_random=1, iters=20)
    b = finite_head_optimum(T.model, T.data, 2, ball, generator=torch.Generator().manual_seed(5), n_random=1, iters=20)
    assert torch.equal(a.heads, b.heads)
    h = torch.randn(3, T.model.d_omega, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    p = minimize(T.model, T.data, ball, method="first-variation", heads=h, weights=None,
                 generator=torch.Generator().manual_seed(2), n_starts=4, iters=10)
    q = minimize_first_variation(T.model, T.data, h, None, ball, generator=torch.Generator().manual_seed(2),
                                 n_starts=4, iters=10)
    assert p.value == q.value
    with pytest.raises(ValueError, match="method"):
        minimize(T.model, T.data, ball, method="newton")
    with pytest.raises(ValueError, match="N: method 'finite-heads'"):
        minimize(T.model, T.data, ball, method="finite-heads", generator=torch.Generator())
    with pytest.raises(ValueError, match="heads: not an option"):
        minimize(T.model, T.data, ball, method="mean-field", heads=h, generator=torch.Generator())


def test_sphere_deviation_is_a_plain_loop_over_the_points():
    g = torch.Generator().manual_seed(3)
    center = torch.randn(4, generator=g, dtype=torch.float64)
    pts = torch.randn(6, 4, generator=g, dtype=torch.float64)
    ball = Ball(1.3, center)
    loop = max(abs(math.sqrt(sum((float(p[i]) - float(center[i])) ** 2 for i in range(4))) / 1.3 - 1) for p in pts)
    assert abs(ball.sphere_deviation(pts) - loop) < 1e-14
    assert ball.sphere_deviation(ball.project(10 * pts)) < 1e-14  # projected from outside: on the sphere
    with pytest.raises(ValueError, match="omega"):
        ball.sphere_deviation(torch.zeros(0, 4, dtype=torch.float64))


def test_rounding_gaps_vanish_where_the_rounding_is_exact_and_match_a_plain_loop(problem):
    model, data, heads, _, _ = problem
    heads = heads[:3]
    w = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    E = float(model.risk(data, heads, w))
    gaps = rounding_gaps(model, data, heads, w, [4, 8, 3], E)
    assert abs(gaps[0]) < 1e-12 and abs(gaps[1]) < 1e-12  # N w_j are integers: the rounding is rho itself
    # N = 3: largest remainders of (1.5, 0.75, 0.75) give counts (1, 1, 1) after the floors (1, 0, 0)
    assert abs(gaps[2] - (float(model.risk(data, heads)) - E)) < 1e-12
    with pytest.raises(ValueError, match="N_grid"):
        rounding_gaps(model, data, heads, w, [0], E)


def test_iid_summary_recovers_known_power_laws_and_fits_the_plain_means():
    N = [1, 2, 4, 8, 16]
    rec = {"N": N, "logit_error": [[3 * n ** -0.5, 3 * n ** -0.5] for n in N],
           "logit_error_max": [[5 * n ** -0.5] * 2 for n in N], "risk_gap": [[2 / n, 2 / n] for n in N]}
    s = iid_summary(rec)
    assert abs(s.error.slope + 0.5) < 1e-12 and abs(s.gap.slope + 1) < 1e-12 and abs(s.abs_gap.slope + 1) < 1e-12
    assert abs(s.order.order - 1) < 1e-9  # the gap is exactly 2 (1/N): order one in 1/N
    # with noise: the fits are those of the plain per-N means
    g = torch.Generator().manual_seed(0)
    gap = [[1 / n + 0.01 * float(torch.randn(1, generator=g)) for _ in range(5)] for n in N]
    s = iid_summary(dict(rec, risk_gap=gap))
    means = [sum(row) / len(row) for row in gap]
    assert max(abs(float(a) - b) for a, b in zip(s.mean_gap, means)) < 1e-15
    if all(m > 0 for m in means):
        assert abs(s.gap.slope - loglog_fit(N, means).slope) < 1e-12
    neg = iid_summary(dict(rec, risk_gap=[[1 / n - 0.1] * 2 for n in N]))  # negative at N >= 16
    assert neg.gap is None and neg.order is None
    with pytest.raises(ValueError, match="record"):
        iid_summary({"N": N})


def test_optimum_and_finite_records_are_the_solvers_results(teacher):
    T, ball = teacher
    opts = dict(n_atoms0=2, outer=1, n_starts=4, iters=10, maxiter=10, final_starts=4, progress=False)
    r = optimum_record(T.model, T.data, ball, generator=torch.Generator().manual_seed(0), **opts)
    o = mean_field_optimum(T.model, T.data, ball, generator=torch.Generator().manual_seed(0), **opts)
    assert (r["lo"], r["up"], r["atoms"], r["phi_min"]) == (*o.bracket, o.support_heads.shape[0], o.certificate.phi_min)
    z = T.model.logits(T.data.X, o.heads, o.weights)
    sq = [float(z[b, l].pow(2).sum()) for b in range(z.shape[0]) for l in range(z.shape[1])]
    assert abs(r["logit_rms"] - math.sqrt(sum(sq) / len(sq))) < 1e-12
    h, w = T.teacher_heads, T.teacher_weights
    f = finite_record(T.model, T.data, 4, ball, h, w, generator=torch.Generator().manual_seed(1), n_random=1, iters=10)
    g = torch.Generator().manual_seed(1)
    inits = {"rounded": round_measure(h, w, 4), "iid": sample_measure(h, w, 4, generator=g)}
    fo = finite_head_optimum(T.model, T.data, 4, ball, generator=g, n_random=1, iters=10, inits=inits)
    assert (f["best"], f["values"], f["labels"]) == (fo.value, fo.values.tolist(), list(fo.labels))
    with pytest.raises(ValueError, match="N"):
        finite_record(T.model, T.data, 0, ball, h, w, generator=g)


def test_records_of_results_read_back_as_the_same_results(teacher):
    T, ball = teacher
    c = certificate(T.model, T.data, T.teacher_heads, T.teacher_weights, ball, generator=torch.Generator().manual_seed(0),
                    n_starts=4)
    o = mean_field_optimum(T.model, T.data, ball, generator=torch.Generator().manual_seed(0), n_atoms0=2, outer=1,
                           n_starts=4, iters=10, maxiter=10, final_starts=4, progress=False)
    fo = finite_head_optimum(T.model, T.data, 2, ball, generator=torch.Generator().manual_seed(0), n_random=1, iters=5)
    c2, o2, fo2 = (from_record(to_record(x)) for x in (c, o, fo))
    assert type(c2) is type(c) and c2.gap == c.gap and torch.equal(c2.minimum.values, c.minimum.values)
    assert type(o2) is type(o) and o2.bracket == o.bracket and torch.equal(o2.support_heads, o.support_heads)
    assert fo2.value == fo.value and fo2.labels == fo.labels and torch.equal(fo2.heads, fo.heads)
    assert from_record(to_record(0.25)) == 0.25
    with pytest.raises(ValueError, match="record"):
        from_record({"a": 1, "b": 2})


# ------------------------------------------------------------- best restarts, the rounding bound, finite gaps
def _records(seed=0, n=6):
    g = torch.Generator().manual_seed(seed)
    labels = ["random", "random", "rounded", "iid"]
    return [{"N": 2 ** i, "values": (1.0 + torch.rand(4, generator=g, dtype=torch.float64)).tolist(),
             "labels": labels} for i in range(n)]


def test_best_values_match_a_plain_loop_over_restarts():
    from mfattn.analysis.static import best_values

    recs = _records()
    for exclude in ((), "rounded", ("rounded", "iid")):
        drop = {exclude} if isinstance(exclude, str) else set(exclude)
        expected = []
        for r in recs:  # oracle: a plain loop
            b = math.inf
            for v, lab in zip(r["values"], r["labels"]):
                if lab not in drop and v < b:
                    b = v
            expected.append(b)
        assert best_values(recs, exclude=exclude).tolist() == expected
    with pytest.raises(ValueError, match="^exclude"):
        best_values(recs, exclude=("random", "rounded", "iid"))
    with pytest.raises(ValueError, match="^records"):
        best_values([{"values": [1.0]}])


def test_rounding_gap_bound_dominates_the_rounding_weight_change_of_a_plain_count():
    """(B sum_j |n_j/N - w_j|)^2 / 4, with n_j counted head by head in a loop, never exceeds the bound."""
    from mfattn.analysis.static import rounding_gap_bound

    g = torch.Generator().manual_seed(3)
    for m in (1, 3, 7):
        heads = torch.eye(m, dtype=torch.float64)  # distinct atoms: each rounded head names its atom
        w = torch.rand(m, generator=g, dtype=torch.float64) + 0.05
        w = w / w.sum()
        for N in (1, 2, 5, 13, 64):
            rounded = round_measure(heads, w, N)
            counts = [0] * m
            for h in rounded:  # plain loop
                counts[int(torch.argmax(h))] += 1
            l1 = sum(abs(counts[j] / N - float(w[j])) for j in range(m))
            assert 0.25 * (2.0 * l1) ** 2 <= rounding_gap_bound(2.0, m, N) + 1e-15
    assert rounding_gap_bound(2.0, 3, [6, 12]).tolist() == [0.25, 0.0625]  # (2*3/6)^2/4 by hand
    for kw, name in ((dict(feature_bound=-1.0), "feature_bound"), (dict(n_atoms=0), "n_atoms"), (dict(N=[0]), "N")):
        args = dict(feature_bound=1.0, n_atoms=2, N=[1]) | kw
        with pytest.raises(ValueError, match=f"^{name}"):
            rounding_gap_bound(**args)


def test_finite_gaps_bracket_and_rates_on_known_power_laws():
    """Records whose best restart is exactly upper + 1/N^2 (rounded) or upper + 1/N (random): the fits
    recover the two powers and the constant is max sqrt(N) (gap + width), computed in a loop."""
    from mfattn.analysis.static import finite_gaps

    up, width = 0.75, 1e-3
    Ns = [1, 2, 4, 8, 16, 32]
    recs = [{"N": n, "values": [up + 1.0 / n ** 2, up + 1.0 / n], "labels": ["rounded", "random"]} for n in Ns]
    g = finite_gaps(recs, up, 0.0, min_N=2)
    assert g.fit.slope == pytest.approx(-2.0, abs=1e-9) and g.fit_without.slope == pytest.approx(-1.0, abs=1e-9)
    g = finite_gaps(recs, up, width)
    for n, lo, hi in zip(Ns, g.lower, g.upper):
        assert lo == pytest.approx(1.0 / n ** 2, rel=1e-12) and hi - lo == pytest.approx(width, rel=1e-9)
    assert g.constant == pytest.approx(max(math.sqrt(n) * (1.0 / n ** 2 + width) for n in Ns), rel=1e-12)
    with pytest.raises(ValueError, match="^min_N"):
        finite_gaps(recs, up, width, min_N=32)
    with pytest.raises(ValueError, match="^width"):
        finite_gaps(recs, up, -1.0)
    with pytest.raises(ValueError, match="^records"):
        finite_gaps([{"values": [1.0], "labels": ["random"]}], up, width)
