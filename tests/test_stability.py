"""Section 7: the symmetry of a head, the Hessians H0 (50) and H_tr (59) at Dirac stationary points, the
closed form at omega = 0, and the initial rates of Theorem 7.8 and of the symmetric split."""

import math

import numpy as np
import pytest
import torch

from mfattn.analysis import stability as st
from mfattn.flows.dynamics import Constant
from mfattn.models.tasks import teacher_task


@pytest.fixture(scope="module")
def task():
    return teacher_task(n=12, L=4, d_x=3, d_k=2, d_v=4, seed=0)


@pytest.fixture(scope="module")
def star(task):
    """A single-head risk minimiser: a translation-stable Dirac stationary point."""
    w, risks = st.single_head_minimum(task.model, task.data, generator=torch.Generator().manual_seed(0),
                                      n_starts=2)
    return st.analyse_dirac(task.model, task.data, w)


def rand_heads(model, N, seed, scale=0.8):
    return scale * torch.randn(N, model.d_omega, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ------------------------------------------------------------------------------------ the group
def test_group_action_leaves_features_unchanged(task):
    m, X = task.model, task.data.X
    g = torch.Generator().manual_seed(1)
    w = rand_heads(m, 1, 2)[0]
    G = torch.eye(2, dtype=torch.float64) + 0.5 * torch.randn(2, 2, generator=g, dtype=torch.float64)
    M = torch.eye(2, dtype=torch.float64) + 0.5 * torch.randn(2, 2, generator=g, dtype=torch.float64)
    moved = st.group_action(m, w, G, M)
    assert (moved - w).norm() > 0.1  # a real move in parameter space
    f0, f1 = m.features(X, w[None]), m.features(X, moved[None])
    assert torch.allclose(f0, f1, rtol=1e-12, atol=1e-12)


def test_generators_leave_features_unchanged_to_first_order(task):
    """Forward differences of psi along every generator are O(s) (zero derivative): they drop 10x when s
    drops 10x (or vanish), while a generic direction gives an O(1) derivative."""
    m, X = task.model, task.data.X
    w = rand_heads(m, 1, 3)[0]
    gens = st.orbit_generators(m, w)
    assert gens.shape == (2 * m.d_k ** 2, m.d_omega)

    f0 = m.features(X, w[None])

    def deriv(v, s):
        return (m.features(X, (w + s * v)[None]) - f0) / s

    for v in gens:
        d1, d2 = deriv(v, 1e-3).abs().max(), deriv(v, 1e-4).abs().max()
        assert d1 < 1e-2 * v.norm() ** 2 and d2 < 0.12 * d1 + 1e-10
    generic = rand_heads(m, 1, 4)[0]
    assert deriv(generic, 1e-4).abs().max() > 1e-2


def test_tangent_dimension(task):
    m = task.model
    t = st.orbit_tangent(m, rand_heads(m, 1, 5)[0])
    assert t.dim == 2 * m.d_k ** 2
    # orthonormal bases of complementary subspaces
    B = torch.cat([t.basis, t.complement])
    assert torch.allclose(B @ B.T, torch.eye(m.d_omega, dtype=torch.float64), atol=1e-12)
    assert st.orbit_tangent(m, torch.zeros(m.d_omega, dtype=torch.float64)).dim == 0


def test_canonical_point_is_one_point_per_orbit(task):
    """Two points of one orbit (a random (G, M) apart) have the same canonical point; it has the same
    features, it is balanced with diagonal Gram matrices, and canonicalising again changes nothing."""
    m, X = task.model, task.data.X
    g = torch.Generator().manual_seed(11)
    w = rand_heads(m, 1, 12)[0]
    G, M = (torch.eye(2, dtype=torch.float64) + 0.5 * torch.randn(2, 2, generator=g, dtype=torch.float64)
            for _ in range(2))
    moved = st.group_action(m, w, G, M)
    c, c_moved = st.canonical_point(m, w), st.canonical_point(m, moved)
    assert (moved - w).norm() > 0.1
    assert torch.allclose(c, c_moved, rtol=0, atol=1e-10)
    assert torch.allclose(m.features(X, c[None]), m.features(X, w[None]), rtol=1e-12, atol=1e-12)
    Q, K, V, O = m.unpack(c)
    for A, B in ((Q.T @ Q, K.T @ K), (V.T @ V, O @ O.T)):
        assert torch.allclose(A, B, atol=1e-12)
        assert torch.allclose(A, torch.diag(torch.diagonal(A)), atol=1e-12)
    assert torch.allclose(st.canonical_point(m, c), c, atol=1e-12)
    # batched: each row canonicalised on its own
    both = st.canonical_point(m, torch.stack([w, moved]))
    assert torch.allclose(both[0], both[1], atol=1e-10)


def test_canonical_sign_and_named_tangent(task):
    v = torch.tensor([0.3, -2.0, 1.0], dtype=torch.float64)
    assert torch.equal(st.canonical_sign(v), -v) and torch.equal(st.canonical_sign(-v), -v)
    m = task.model
    w = rand_heads(m, 1, 13)[0]
    t = st.named_tangent(m, w, 1, 0)
    row = st.orbit_generators(m, w)[1 * m.d_k + 0]
    assert torch.allclose(t, row / row.norm()) and abs(float(t.norm()) - 1) < 1e-12
    assert float((st.orbit_tangent(m, w).complement @ t).norm()) < 1e-12  # in the tangent space
    with pytest.raises(ValueError, match="a, b"):
        st.named_tangent(m, w, 2, 0)


def test_Phi_is_linear_in_W_V_and_in_W_O(task):
    """The V-V and O-O blocks of the Hessian of Phi(.; rho) vanish at any omega and rho, so no Hessian of
    the first variation is positive definite: hypothesis (52) fails at every Dirac point."""
    m = task.model
    H = m.hessian_first_variation(task.data, rand_heads(m, 1, 6)[0], rand_heads(m, 5, 7))
    k = m.d_x * m.d_k
    V, O = slice(2 * k, 3 * k), slice(3 * k, 4 * k)
    scale = H.abs().max()
    assert scale > 1e-3
    assert H[V, V].abs().max() < 1e-13 * scale and H[O, O].abs().max() < 1e-13 * scale
    assert H[V, O].abs().max() > 1e-3 * scale


# ------------------------------------------------------------------------- a stationary point
def test_minimiser_is_stationary_with_orbit_in_both_null_spaces(task, star):
    m = task.model
    assert star.grad_norm < 1e-12
    gens = st.orbit_generators(m, star.omega)
    for H in (star.H0, star.H_tr):
        scale = H.abs().max()
        assert (gens @ H).norm(dim=1).max() < 1e-10 * scale * gens.norm(dim=1).max()
    assert star.tangent.dim == 2 * m.d_k ** 2
    # H_tr: null space exactly the orbit, positive on the complement (a strict local minimum modulo symmetry)
    assert star.null_dim("H_tr") == star.tangent.dim
    assert star.eig_H_tr_perp.min() > 1e-6 * star.eig_H_tr.max()
    # H0: the orbit plus the dilation of the features
    dil = st.dilation_direction(m, star.omega)
    assert (star.H0 @ dil).norm() < 1e-10 * star.H0.abs().max() * dil.norm()
    assert (star.H_tr @ dil).norm() > 1e-3 * star.H_tr.abs().max() * dil.norm()
    assert star.null_dim("H0") == star.tangent.dim + 1
    assert star.null_dim("H0_perp") == 1


def test_H0_has_a_negative_direction_bounded_by_its_VO_block(task, star):
    """Cauchy interlacing on the V-O coordinates, where H0 is [[0, B], [B^T, 0]]."""
    m = task.model
    k = m.d_x * m.d_k
    B = star.H0[2 * k:3 * k, 3 * k:]
    s1 = float(torch.linalg.matrix_norm(B, 2))
    assert s1 > 0
    assert float(star.eig_H0[0]) <= -s1 * (1 - 1e-12)


def test_H_tr_is_the_hessian_of_the_single_head_risk_by_finite_differences(task, star):
    m, data, w = task.model, task.data, star.omega
    g = torch.Generator().manual_seed(9)
    v = torch.randn(m.d_omega, generator=g, dtype=torch.float64)
    v /= v.norm()
    h = 1e-4
    E = lambda x: float(m.risk(data, x[None]))
    fd = (E(w + h * v) - 2 * E(w) + E(w - h * v)) / h ** 2
    assert math.isclose(fd, float(v @ star.H_tr @ v), rel_tol=1e-5)


# ------------------------------------------------------------------------------ omega = 0
def test_zero_is_stationary_for_every_measure_and_the_closed_form_spectrum(task):
    m, data = task.model, task.data
    zero = torch.zeros(m.d_omega, dtype=torch.float64)
    for seed in (11, 12):
        rho = rand_heads(m, 6, seed)
        assert m.grad_first_variation(data, zero[None], rho).abs().max() == 0
        z = st.zero_hessian(m, data, rho)
        H = m.hessian_first_variation(data, zero, rho)
        assert torch.allclose(torch.linalg.eigvalsh(H), z.eigenvalues, atol=1e-13)
    z = st.zero_hessian(m, data)
    H_tr = m.translation_hessian(data, zero)
    assert torch.allclose(torch.linalg.eigvalsh(H_tr), z.eigenvalues, atol=1e-13)
    assert math.isclose(float(z.v_min @ H_tr @ z.v_min), -float(z.sigma[0]), rel_tol=1e-12)
    assert math.isclose(float(z.v_min.norm()), 1.0, rel_tol=1e-14)
    # the multiplicities: d_k copies of +-sigma, 2 d_x d_k zeros
    assert int((z.eigenvalues == 0).sum()) >= 2 * m.d_x * m.d_k


# ------------------------------------------------------------------------------ initial rates
def rate(task, heads0, omega, zeta, dt=1e-3):
    run = st.perturbation_run(task.model, task.data, heads0, omega, T=6 * dt, step=dt, record_every=dt,
                              zeta=zeta, orbit=False)
    return st.initial_rate(run.times, run.w2 ** 2, points=5), run


@pytest.mark.parametrize("zeta", [1.0, 0.5])
def test_translation_instability_rate_at_zero(task, zeta):
    m = task.model
    zero = torch.zeros(m.d_omega, dtype=torch.float64)
    z = st.zero_hessian(m, task.data)
    eps = 1e-2
    measured, _ = rate(task, st.translate(m, zero, z.v_min, eps), zero, Constant(zeta))
    predicted = st.predicted_rate(m.translation_hessian(task.data, zero), z.v_min, eps, zeta)
    assert math.isclose(predicted, 4 * zeta * eps ** 2 * float(z.sigma[0]), rel_tol=1e-12)
    assert predicted > 0 and math.isclose(measured, predicted, rel_tol=eps)


def test_split_rate_is_governed_by_H0_and_translation_rate_by_H_tr(task, star):
    m = task.model
    e, U = torch.linalg.eigh(star.H0)
    v = U[:, 0]
    assert float(e[0]) < 0 and float(v @ star.H_tr @ v) > 0  # Remark 7.7: translation-stable, split-unstable
    eps = 1e-2
    split_rate, _ = rate(task, st.split(m, star.omega, v, eps), star.omega, 1.0)
    trans_rate, _ = rate(task, st.translate(m, star.omega, v, eps), star.omega, 1.0)
    assert split_rate > 0 and math.isclose(split_rate, st.predicted_rate(star.H0, v, eps), rel_tol=eps)
    assert trans_rate < 0 and math.isclose(trans_rate, st.predicted_rate(star.H_tr, v, eps), rel_tol=eps)


def test_monotonicity_ratio_gives_the_rate_and_theorem_7_1_bound(task, star):
    m = task.model
    v = star.tangent.complement[3]
    eps = 1e-2
    r, run = rate(task, st.translate(m, star.omega, v, eps), star.omega, 1.0)
    # d/dt W2^2 = -4 zeta kappa W2^2, and kappa -> v^T H_tr v as eps -> 0
    assert math.isclose(r, -4 * run.kappa[0] * run.w2[0] ** 2, rel_tol=1e-4)
    assert math.isclose(run.kappa[0], float(v @ star.H_tr @ v), rel_tol=10 * eps)
    assert np.all(run.w2 <= run.bound() * (1 + 1e-9))


def test_gronwall_equality_and_saved_runs(task, star):
    """For a Dirac target (46) is an equality with the path's kappa; the trapezoid error falls 4x when the
    recording interval halves. as_dict / from_dict round-trip exactly."""
    m = task.model
    e, U = torch.linalg.eigh(star.H0)
    run = st.perturbation_run(m, task.data, st.split(m, star.omega, U[:, 0], 0.05), star.omega, T=8.0, step=0.25,
                              record_every=0.25, orbit=False)
    errs = []
    for every in (4, 2, 1):
        t, g = run.gronwall(every)
        errs.append(np.max(np.abs(np.log(g / run.w2[::every]))))
    assert errs[-1] < 1e-4 and 3.0 < errs[0] / errs[1] < 5.0 and 3.0 < errs[1] / errs[2] < 5.0
    back = st.PerturbationRun.from_dict(run.as_dict())
    assert torch.equal(back.heads, run.heads)
    assert all(np.array_equal(getattr(back, f), getattr(run, f), equal_nan=True) for f in run._fields if f != "heads")
    with pytest.raises(ValueError, match="every"):
        run.gronwall(0)


# ----------------------------------------------------------------------------- orbit distance
def test_orbit_distance(task, star):
    m, w = task.model, star.omega
    g = torch.Generator().manual_seed(4)
    I = torch.eye(2, dtype=torch.float64)
    G = I + 0.3 * torch.randn(2, 2, generator=g, dtype=torch.float64)
    M = I + 0.3 * torch.randn(2, 2, generator=g, dtype=torch.float64)
    on = st.group_action(m, w, G, M)
    n = star.tangent.complement[0]
    pts = torch.stack([w, on, w + 1e-4 * n, w + 0.05 * star.tangent.basis[0]])
    d = st.orbit_distance(m, w, pts)
    assert d[0] < 1e-12 and d[1] < 1e-10
    assert math.isclose(float(d[2]), 1e-4, rel_tol=1e-3)  # normal offsets are distances to first order
    assert d[3] < 0.05 ** 2 * 10  # tangent offsets leave the orbit at second order
    # the orbit of the saddle omega = 0 is the point itself (its fitted starts are singular)
    zero = torch.zeros_like(w)
    assert torch.allclose(st.orbit_distance(m, zero, pts), pts.norm(dim=1), rtol=1e-12)


# ------------------------------------------------------------------------------ validation
def test_bad_inputs(task, star):
    m, w = task.model, star.omega
    with pytest.raises(ValueError, match="v: must be a nonzero"):
        st.split(m, w, torch.zeros_like(w), 0.1)
    with pytest.raises(ValueError, match="eps"):
        st.translate(m, w, w, -1.0)
    with pytest.raises(ValueError, match="G: expected trailing shape"):
        st.group_action(m, w, torch.eye(3, dtype=torch.float64), torch.eye(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="M: must be invertible"):
        st.group_action(m, w, torch.eye(2, dtype=torch.float64), torch.zeros(2, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="heads: the measure equals"):
        st.monotonicity_ratio(m, task.data, w[None], w)
    with pytest.raises(ValueError, match="points"):
        st.initial_rate([0, 1, 2], [0, 1, 2], points=5)
    with pytest.raises(ValueError, match="v: expected length"):
        st.translate(m, w, torch.ones(3, dtype=torch.float64), 0.1)


@pytest.fixture(scope="module")
def uniform(task):
    model, data = task.model, task.data
    w, _ = st.uniform_attention_point(model, data, generator=torch.Generator().manual_seed(3), n_starts=2)
    return w


def test_uniform_attention_point_is_a_stationary_saddle_with_nonzero_features(task, uniform):
    model, data = task.model, task.data
    W_Q, W_K, W_V, W_O = model.unpack(uniform)
    assert float(W_Q.abs().max()) == 0.0 and float(W_K.abs().max()) == 0.0
    assert float(model.features(data.X, uniform[None]).abs().max()) > 1e-3  # psi != 0
    # stationary in every coordinate, W_Q and W_K included (the bilinear scores), not only where it was minimised
    g = model.grad_first_variation(data, uniform[None], uniform[None])[0]
    assert float(g.norm()) < 1e-10
    # the (W_Q, W_K) block of H_tr is H0's there (J vanishes on it) and its spectrum is symmetric: +-sigma(B)
    kk = 2 * model.d_x * model.d_k
    D = st.analyse_dirac(model, data, uniform)
    assert torch.allclose(D.H_tr[:kk, :kk], D.H0[:kk, :kk], atol=1e-14)
    e = torch.linalg.eigvalsh(D.H_tr[:kk, :kk])
    assert torch.allclose(e, -e.flip(0), atol=1e-12) and float(e[0]) < 0
    # lower risk than any (W_V, W_O) nearby with W_Q = W_K = 0
    gen = torch.Generator().manual_seed(5)
    for _ in range(4):
        d = torch.randn(model.d_omega, generator=gen, dtype=torch.float64)
        d[:kk] = 0
        r = float(model.risk(data, (uniform + 1e-3 * d)[None]))
        assert r >= D.risk - 1e-12


def test_lifted_hessian_matches_finite_differences_and_splits_at_a_dirac_lift(task, star):
    star = star.omega
    """(49) at a Dirac lift: the mean of W_delta sees H_tr, its centred part H0 (N - 1 copies)."""
    model, data = task.model, task.data
    N = 3
    W = star[None].repeat(N, 1)
    HL = st.lifted_hessian(model, data, W)
    # second derivative of t -> E(law(W + t delta)) by central differences, against delta' HL delta / N
    gen = torch.Generator().manual_seed(11)
    delta = torch.randn(N, model.d_omega, generator=gen, dtype=torch.float64)
    E = lambda t: float(model.risk(data, W + t * delta))
    h = 1e-3
    fd = (E(h) - 2 * E(0.0) + E(-h)) / h**2
    quad = float(delta.reshape(-1) @ HL @ delta.reshape(-1)) / N
    assert abs(fd / quad - 1) < 1e-5
    H0 = model.hessian_first_variation(data, star, star[None])
    H_tr = model.translation_hessian(data, star)
    union = torch.sort(torch.cat([torch.linalg.eigvalsh(H_tr)] + [torch.linalg.eigvalsh(H0)] * (N - 1))).values
    assert torch.allclose(torch.linalg.eigvalsh(HL), union, atol=1e-12)


def test_lifted_monotonicity_is_the_secant_quotient_of_the_single_head_risk(task):
    model, data = task.model, task.data
    gen = torch.Generator().manual_seed(12)
    a = 0.5 * torch.randn(3, model.d_omega, generator=gen, dtype=torch.float64)
    b = 0.5 * torch.randn(3, model.d_omega, generator=gen, dtype=torch.float64)
    q = st.lifted_monotonicity(model, data, a, b)
    # <a - b, grad R(a) - grad R(b)> = int_0^1 (a-b)' H_tr(b + s(a-b)) (a-b) ds: Gauss-Legendre quadrature
    x, w = np.polynomial.legendre.leggauss(12)
    for j in range(3):
        d = a[j] - b[j]
        val = sum(wk / 2 * float(d @ model.translation_hessian(data, b[j] + (xk + 1) / 2 * d) @ d) for xk, wk in zip(x, w))
        assert abs(float(q[j]) - val / float(d @ d)) < 1e-8 * max(1.0, abs(val / float(d @ d)))
    with pytest.raises(ValueError, match="b"):
        st.lifted_monotonicity(model, data, a, a)
    with pytest.raises(ValueError, match="b"):
        st.lifted_monotonicity(model, data, a, b[:2])


def test_inertia_is_kept_by_a_congruence_and_lowest_direction_spans_the_lowest_eigenspace():
    """Sylvester's law: P H P^T has the inertia of H for an invertible P; the direction drawn in the
    lowest eigenspace (of multiplicity two here) is a unit vector whose Rayleigh quotient is the
    lowest eigenvalue, orthogonal to the other eigenvectors."""
    from mfattn.analysis.stability import inertia, lowest_direction

    g = torch.Generator().manual_seed(5)
    Q, _ = torch.linalg.qr(torch.randn(6, 6, generator=g, dtype=torch.float64))
    lam = torch.tensor([-2.0, -2.0, 0.0, 0.0, 1.0, 3.0], dtype=torch.float64)
    H = Q @ torch.diag(lam) @ Q.T
    P = torch.eye(6, dtype=torch.float64) + 0.3 * torch.randn(6, 6, generator=g, dtype=torch.float64)
    e, e2 = torch.linalg.eigvalsh(H), torch.linalg.eigvalsh(P @ H @ P.T)
    assert inertia(e, 3.0) == (2, 2, 2) == inertia(e2, float(e2.abs().max()))
    u, low = lowest_direction(H, generator=g)
    assert abs(low + 2.0) < 1e-12 and abs(float(u.norm()) - 1) < 1e-12
    assert abs(float(u @ H @ u) + 2.0) < 1e-12
    assert float((Q[:, 2:].T @ u).abs().max()) < 1e-12


# ------------------------------------------------------------ what chapter 05 measures with them
def _toy(times, w2, kappa=None):
    t = np.asarray(times, dtype=np.float64)
    k = np.zeros_like(t) if kappa is None else np.asarray(kappa, dtype=np.float64)
    return st.PerturbationRun(t, np.ones_like(t), t.copy(), torch.zeros(len(t), 1, 1, dtype=torch.float64),
                              np.zeros_like(t), np.asarray(w2, dtype=np.float64), np.zeros_like(t), k, np.zeros_like(t))


def test_compare_rate_on_a_run_whose_w2_squared_is_a_known_quadratic():
    t = np.linspace(0.0, 0.006, 7)
    run = _toy(t, np.sqrt(0.01 + 3e-4 * t - 2e-3 * t ** 2))  # d/dt W2^2 at 0 = 3e-4
    H = torch.diag(torch.tensor([-1.5, 2.0], dtype=torch.float64))
    H_ctl = torch.diag(torch.tensor([0.5, 2.0], dtype=torch.float64))
    v = torch.tensor([2.0, 0.0], dtype=torch.float64)
    r = st.compare_rate(run, v, 0.1, H, control=H_ctl, zeta0=0.5)
    assert math.isclose(r.measured, 3e-4, rel_tol=1e-9)
    assert math.isclose(r.predicted, -4 * 0.5 * 0.01 * -1.5, rel_tol=1e-14)  # -4 zeta eps^2 u'Hu, u = e_1
    assert math.isclose(r.control, -4 * 0.5 * 0.01 * 0.5, rel_tol=1e-14)
    assert math.isclose(r.relative, 3e-4 / 0.03 - 1, rel_tol=1e-9)
    assert math.isclose(r.control_relative, 3e-4 / -0.01 - 1, rel_tol=1e-9)
    assert math.isnan(st.compare_rate(run, v, 0.1, H).control)
    with pytest.raises(ValueError, match="run"):
        st.compare_rate({"w2": run.w2}, v, 0.1, H)
    with pytest.raises(ValueError, match="dt"):
        st.Perturbation.for_rate(torch.zeros(1, 2), torch.zeros(2), 0.1, dt=0.0)


def test_gronwall_deviation_is_the_trapezoid_error_of_a_quadratic_kappa():
    """kappa = t^2, zeta = 1: W2 = W2(0) exp(-2 t^3 / 3) exactly, and the trapezoid rule with step h gives
    t^3 / 3 + h^2 t / 6, so the deviation is h^2 T / 3 on the grid and h^2 T against the half grid."""
    h, T = 0.1, 1.0
    t = np.linspace(0.0, T, 11)
    run = _toy(t, 0.05 * np.exp(-2 * t ** 3 / 3), kappa=t ** 2)
    dev, dev_half = run.gronwall_deviation()
    assert math.isclose(dev, h ** 2 * T / 3, rel_tol=1e-9)
    assert math.isclose(dev_half, h ** 2 * T, rel_tol=1e-9)


def test_zero_saddle_is_stationary_for_random_measures_and_matches_the_closed_form(task):
    m, data = task.model, task.data
    z = st.zero_saddle(m, data, generators=[torch.Generator().manual_seed(k) for k in range(3)], n_heads=5)
    assert z.max_grad == 0.0  # exact: every term of (13) carries W_V, W_O or W_V W_O
    assert z.spectrum_error < 1e-13
    assert math.isclose(z.scale, float(z.closed_form.sigma[0]), rel_tol=1e-12)  # the spectrum is +-sigma(C)
    assert int((z.eigenvalues.abs() < 1e-12).sum()) >= 2 * m.d_x * m.d_k
    for kw, name in (({"generators": []}, "generators"), ({"generators": [1]}, "generator"),
                     ({"generators": [torch.Generator()], "n_heads": 0}, "n_heads")):
        with pytest.raises(ValueError, match=name):
            st.zero_saddle(m, data, **kw)


def test_symmetry_residuals_vanish_at_a_minimiser_and_not_away_from_one(task, star):
    m = task.model
    s = st.symmetry_residuals(m, star)
    assert s.generator_residual < 1e-10 and s.dilation_residual < 1e-10
    kk = m.d_x * m.d_k
    assert s.vo_diagonal <= 1e-12 * float(star.H0.abs().max())  # Phi is linear in W_V and in W_O
    # the (W_V, W_O) compression of H0 is [[0, B], [B', 0]]: its top eigenvalue is sigma_1(B)
    assert math.isclose(float(torch.linalg.eigvalsh(star.H0[2 * kk:, 2 * kk:])[-1]), s.sigma_B, rel_tol=1e-10)
    scale = max(abs(x) for x in star.eig_H0.tolist())
    assert s.n_negative == sum(1 for x in star.eig_H0_perp.tolist() if x < -1e-9 * scale) >= 1
    away = st.analyse_dirac(m, task.data, rand_heads(m, 1, 21)[0])
    assert st.symmetry_residuals(m, away).generator_residual > 1e-6  # not stationary: the orbit is not null
    with pytest.raises(ValueError, match="point"):
        st.symmetry_residuals(m, star.H0)


def test_random_group_element_keeps_the_features_and_the_inertia(task, star):
    m, data = task.model, task.data
    G, M = st.random_group_element(m, generator=torch.Generator().manual_seed(7))
    G2, _ = st.random_group_element(m, generator=torch.Generator().manual_seed(7))
    assert torch.equal(G, G2) and not torch.equal(G, M) and G.shape == (m.d_k, m.d_k)
    moved = st.group_action(m, star.omega, G, M)
    assert torch.allclose(m.features(data.X, moved[None]), m.features(data.X, star.omega[None]), atol=1e-12)
    D2 = st.analyse_dirac(m, data, moved)
    for a, b in ((star.eig_H0, D2.eig_H0), (star.eig_H_tr, D2.eig_H_tr)):
        in_a, in_b = st.common_inertia(a, b)
        sc = max(abs(x) for x in a.tolist() + b.tolist())
        loop = tuple(sum(1 for x in a.tolist() if f(x)) for f in
                     (lambda x: x < -1e-9 * sc, lambda x: abs(x) <= 1e-9 * sc, lambda x: x > 1e-9 * sc))
        assert in_a == loop == in_b  # Sylvester's law, and a plain count
    with pytest.raises(ValueError, match="a"):
        st.common_inertia(torch.zeros(3), torch.zeros(3))


def test_translation_directions_are_an_eigenvector_a_projection_and_a_tangent(task, star):
    d = st.translation_directions(task.model, star, generator=torch.Generator().manual_seed(8))
    Qc, Qt = star.tangent.complement, star.tangent.basis
    P = Qc.T @ Qc  # the projector on the orbit's complement
    assert abs(float(d.eigenvector.norm()) - 1) < 1e-12 and float((Qt @ d.eigenvector).norm()) < 1e-12
    assert torch.allclose(P @ star.H_tr @ P @ d.eigenvector, d.eigenvalue * d.eigenvector, atol=1e-12)
    perp = st.spectrum(star.H_tr, Qc)
    assert math.isclose(d.eigenvalue, float(perp[perp.numel() // 2]), rel_tol=1e-9)
    assert torch.allclose(P @ d.random, d.random, atol=1e-12) and float((Qt @ d.random).norm()) < 1e-12
    assert float((Qc @ d.tangent).norm()) < 1e-12 and abs(float(d.tangent.norm()) - 1) < 1e-12


def test_saddle_direction_meets_its_defining_identities(task, uniform):
    """v'H_tr v = lambda_QK / 2 by the choice of c; v'H0 v = c^2 lambda_QK + s^2 u'H0 u because J vanishes on
    the (W_Q, W_K) block (H_tr = H0 there) and the cross blocks vanish."""
    Du = st.analyse_dirac(task.model, task.data, uniform)
    sd = st.saddle_direction(task.model, Du, generator_qk=torch.Generator().manual_seed(1),
                             generator_vo=torch.Generator().manual_seed(2))
    assert math.isclose(sd.lam_qk, float(torch.linalg.eigvalsh(Du.H_tr)[0]), rel_tol=1e-10) and sd.lam_qk < 0
    assert math.isclose(float(sd.v @ Du.H_tr @ sd.v), sd.lam_qk / 2, rel_tol=1e-9)
    assert math.isclose(float(sd.v @ Du.H0 @ sd.v), sd.c ** 2 * sd.lam_qk + sd.s ** 2 * sd.mu_0, rel_tol=1e-9)
    assert abs(float(sd.v.norm()) - 1) < 1e-12 and abs(sd.qk_weight - 1) < 1e-12 and sd.jsj_qk < 1e-12
    with pytest.raises(ValueError, match="point"):
        st.saddle_direction(task.model, st.analyse_dirac(task.model, task.data, torch.zeros_like(uniform)),
                            generator_qk=torch.Generator(), generator_vo=torch.Generator())


def test_linearised_flow_against_a_plain_loop_and_a_diagonal_closed_form():
    g = torch.Generator().manual_seed(3)
    A = torch.randn(5, 5, generator=g, dtype=torch.float64)
    H, v, times = 0.3 * (A + A.T), torch.randn(5, generator=g, dtype=torch.float64), np.linspace(0.0, 4.0, 9)
    norm, rate = st.linearised_flow(H, v, times, zeta0=0.7)
    for j, t in enumerate(times):
        x = torch.linalg.matrix_exp(-2 * 0.7 * t * H) @ v
        assert math.isclose(norm[j], float(x.norm()), rel_tol=1e-12)
        assert math.isclose(rate[j], float(-4 * 0.7 * (x @ H @ x) / (x @ x)), rel_tol=1e-10, abs_tol=1e-14)
    lam = torch.tensor([-1.0, 0.5], dtype=torch.float64)
    n2, r2 = st.linearised_flow(torch.diag(lam), torch.tensor([1.0, 1.0], dtype=torch.float64), [1.0])
    assert math.isclose(n2[0], math.sqrt(math.exp(4.0) + math.exp(-2.0)), rel_tol=1e-12)
    with pytest.raises(ValueError, match="v"):
        st.linearised_flow(H, v[:3], times)


def test_lifted_spectrum_is_formula_49_and_not_without_its_interaction_term(task, star):
    ls = st.lifted_spectrum(task.model, task.data, star)
    assert ls.error < 1e-10 * ls.scale and ls.error_without_interaction > 1e-3 * ls.scale
    assert math.isclose(float(ls.eigenvalues[0]), float(star.eig_H0[0]), rel_tol=1e-9)  # lambda_min(H0) < 0
    assert st.lifted_spectrum(task.model, task.data, star, n=3).error < 1e-10 * ls.scale
    with pytest.raises(ValueError, match="n"):
        st.lifted_spectrum(task.model, task.data, star, n=1)


def test_lipschitz_in_measure_tends_to_the_norm_of_E_JSJ_at_rate_eps(task, star):
    errs = []
    for eps in (1e-2, 5e-3):
        gamma, norm = st.lipschitz_in_measure(task.model, task.data, star, eps)
        assert math.isclose(norm, float(torch.linalg.matrix_norm(star.H_tr - star.H0, 2)), rel_tol=1e-10)
        errs.append(abs(gamma / norm - 1))
    assert errs[0] < 0.05 and 1.6 < errs[0] / errs[1] < 2.4  # O(eps): halves with eps
    with pytest.raises(ValueError, match="eps"):
        st.lipschitz_in_measure(task.model, task.data, star, 0.0)


def test_run_perturbations_equals_the_direct_runs_and_reads_them_back(task, star, tmp_path, monkeypatch):
    from mfattn.companion.sweep import run_perturbations

    m, data, w = task.model, task.data, star.omega
    v = star.tangent.complement[0]
    specs = {"t": st.Perturbation.for_rate(st.translate(m, w, v, 0.01), w, 0.01, 1e-3),
             "s": st.Perturbation(st.split(m, w, v, 0.05), w, 1.0, 0.25, 0.5, True, 0.05)}
    runs = run_perturbations(m, data, specs, tmp_path, key={"seed": 0}, zeta=Constant(0.5), progress=False)
    for name, p in specs.items():
        direct = st.perturbation_run(m, data, p.heads0, p.centre, T=p.T, step=p.step, record_every=p.record_every,
                                     zeta=Constant(0.5), orbit=p.orbit)
        assert torch.equal(runs[name].heads, direct.heads)
        assert all(np.array_equal(getattr(runs[name], f), getattr(direct, f), equal_nan=True)
                   for f in direct._fields if f != "heads")

    def refuse(*a, **k):
        raise AssertionError("recomputed a finished run")

    monkeypatch.setattr(st, "perturbation_run", refuse)
    again = run_perturbations(m, data, specs, tmp_path, key={"seed": 0}, zeta=Constant(0.5), progress=False)
    assert np.array_equal(again["s"].w2, runs["s"].w2)
    with pytest.raises(ValueError, match="key"):
        run_perturbations(m, data, specs, tmp_path, key={"size": 1}, progress=False)
    with pytest.raises(ValueError, match="specs"):
        run_perturbations(m, data, {"x": (1, 2)}, tmp_path, key={}, progress=False)


# ------------------------------------------- the split direction, Rayleigh quotients, pair distances
def test_lowest_eigenpair_against_a_known_spectrum():
    g = torch.Generator().manual_seed(3)
    Q, _ = torch.linalg.qr(torch.randn(5, 5, generator=g, dtype=torch.float64))
    lams = torch.tensor([-2.5, -1.0, 0.0, 0.5, 4.0], dtype=torch.float64)
    H = Q @ torch.diag(lams) @ Q.T
    lam, v = st.lowest_eigenpair(H)
    assert lam == pytest.approx(-2.5, abs=1e-12)  # the closed form
    assert torch.allclose(H @ v, lam * v, atol=1e-12) and float(v.norm()) == pytest.approx(1.0, abs=1e-12)
    assert abs(float(v @ Q[:, 0])) == pytest.approx(1.0, abs=1e-12)  # the eigenvector of -2.5, up to sign
    assert float(v[int(v.abs().argmax())]) > 0
    with pytest.raises(ValueError, match="^H"):
        st.lowest_eigenpair(torch.zeros(2, 3, dtype=torch.float64))


def test_rayleigh_quotient_against_a_plain_loop():
    g = torch.Generator().manual_seed(4)
    H = torch.randn(4, 4, generator=g, dtype=torch.float64)
    v = torch.randn(4, generator=g, dtype=torch.float64)
    num = sum(float(v[i]) * float(H[i, j]) * float(v[j]) for i in range(4) for j in range(4))
    assert st.rayleigh_quotient(H, v) == pytest.approx(num / sum(float(x) ** 2 for x in v), rel=1e-13)
    with pytest.raises(ValueError, match="^v"):
        st.rayleigh_quotient(H, torch.zeros(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="^v"):
        st.rayleigh_quotient(H, torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="^H"):
        st.rayleigh_quotient(H[:3], v)


def test_pair_distance_against_a_plain_loop_over_the_blocks(task):
    m = task.model
    heads = rand_heads(m, 6, 5).reshape(3, 2, m.d_omega)  # three recordings of two heads
    size = m.d_x * m.d_k  # W_Q, W_K, W_V, W_O lie one after the other, d_x d_k entries each
    for k, block in enumerate((None, "W_Q", "W_K", "W_V", "W_O")):
        lo, hi = (0, m.d_omega) if block is None else ((k - 1) * size, k * size)
        want = [math.sqrt(sum((float(heads[t, 0, i]) - float(heads[t, 1, i])) ** 2 for i in range(lo, hi)))
                for t in range(3)]
        assert st.pair_distance(m, heads, block).tolist() == pytest.approx(want, rel=1e-13)
    with pytest.raises(ValueError, match="^block"):
        st.pair_distance(m, heads, "W_X")
    with pytest.raises(ValueError, match="^heads"):
        st.pair_distance(m, rand_heads(m, 3, 5))
