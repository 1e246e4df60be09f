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
