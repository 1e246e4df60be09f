"""Oracle tests of the engine against independent implementations and identities of the paper."""

import math

import pytest
import torch
import torch.nn.functional as F

from mfattn import Dataset, HeadModel, softmax_jacobian

from conftest import make_problem

TIGHT = dict(rtol=1e-10, atol=1e-12)


def sdpa_features(model, X, heads):
    """psi by a per-head loop over torch's causal scaled_dot_product_attention."""
    out = []
    for omega in heads:
        W_Q, W_K, W_V, W_O = model.unpack(omega)
        a = F.scaled_dot_product_attention(X @ W_Q, X @ W_K, X @ W_V, is_causal=True)
        out.append(a @ W_O @ model.W_out)
    return torch.stack(out)


def test_unpack_layout_row_major(problem):
    model, *_ = problem
    m = model.d_x * model.d_k
    omega = torch.arange(model.d_omega, dtype=torch.float64)
    W_Q, W_K, W_V, W_O = model.unpack(omega)
    assert W_Q.shape == (model.d_x, model.d_k) and W_O.shape == (model.d_k, model.d_x)
    assert W_Q[0, 1] == 1 and W_Q[1, 0] == model.d_k  # row-major
    assert W_K[0, 0] == m and W_V[0, 0] == 2 * m and W_O[0, 0] == 3 * m
    assert W_O[1, 0] == 3 * m + model.d_x
    torch.testing.assert_close(model.pack(W_Q, W_K, W_V, W_O), omega)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_features_match_sdpa_loop(dtype):
    model, data, heads, *_ = make_problem(dtype)
    tol = TIGHT if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model.features(data.X, heads), sdpa_features(model, data.X, heads), **tol)


def test_causal_mask_ignores_future_tokens(problem):
    model, data, heads, *_ = problem
    X2 = data.X.clone()
    X2[:, -1] += 10.0  # change only the last token
    f1, f2 = model.features(data.X, heads), model.features(X2, heads)
    torch.testing.assert_close(f1[:, :, :-1], f2[:, :, :-1], **TIGHT)
    assert not torch.allclose(f1[:, :, -1], f2[:, :, -1])


def test_logits_are_weighted_feature_sums(problem):
    model, data, heads, w, _ = problem
    expect = torch.einsum("i,iblv->blv", w, sdpa_features(model, data.X, heads))
    torch.testing.assert_close(model.logits(data.X, heads, w), expect, **TIGHT)
    uniform = sdpa_features(model, data.X, heads).mean(0)
    torch.testing.assert_close(model.logits(data.X, heads), uniform, **TIGHT)


@pytest.mark.parametrize("one_hot", [False, True])
def test_risk_matches_torch_cross_entropy(one_hot):
    model, data, heads, w, _ = make_problem(one_hot=one_hot)
    z = torch.einsum("i,iblv->blv", w, sdpa_features(model, data.X, heads))
    expect = F.cross_entropy(z.reshape(-1, model.d_v), data.Y.reshape(-1, model.d_v))
    torch.testing.assert_close(model.risk(data, heads, w), expect, **TIGHT)


def test_first_variation_identity_12(problem):
    """d/deps E((1-eps) rho + eps nu) at 0 equals int Phi(.; rho) d(nu - rho), eq. (12)."""
    model, data, heads, w, g = problem
    nu = 1.3 * torch.randn(5, model.d_omega, generator=g, dtype=torch.float64)
    v = torch.softmax(torch.randn(5, generator=g, dtype=torch.float64), 0)
    rhs = model.first_variation(data, nu, heads, w) @ v - model.first_variation(data, heads, heads, w) @ w

    def E(eps):
        return model.risk(data, torch.cat([heads, nu]), torch.cat([(1 - eps) * w, eps * v]))

    eps = torch.zeros((), dtype=torch.float64, requires_grad=True)
    (autograd,) = torch.autograd.grad(E(eps), eps)
    torch.testing.assert_close(autograd, rhs, **TIGHT)
    h = 1e-4  # second-order one-sided difference (eps < 0 is not a measure)
    fd = (-3 * E(0.0) + 4 * E(h) - E(2 * h)) / (2 * h)
    assert abs(float(fd - rhs)) < 1e-6 * max(1.0, abs(float(rhs)))


def test_grad_first_variation_against_autograd_and_fd(problem):
    model, data, heads, w, g = problem
    query = torch.randn(9, model.d_omega, generator=g, dtype=torch.float64).requires_grad_()
    (auto,) = torch.autograd.grad(model.first_variation(data, query, heads, w).sum(), query)
    grad = model.grad_first_variation(data, query.detach(), heads, w)
    torch.testing.assert_close(grad, auto, **TIGHT)
    q = query.detach()
    d = torch.randn(q.shape, generator=g, dtype=torch.float64)
    h = 1e-5
    fd = (model.first_variation(data, q + h * d, heads, w) - model.first_variation(data, q - h * d, heads, w)) / (2 * h)
    torch.testing.assert_close((grad * d).sum(-1), fd, rtol=1e-7, atol=1e-9)


def test_gradient_of_finite_head_risk_is_weighted_grad_phi(problem):
    """d E_N / d omega_i = w_i grad Phi(omega_i; rho): autograd of the risk as the oracle."""
    model, data, heads, w, _ = problem
    h = heads.clone().requires_grad_()
    (auto,) = torch.autograd.grad(model.risk(data, h, w), h)
    torch.testing.assert_close(auto, w[:, None] * model.grad_first_variation(data, heads, heads, w), **TIGHT)


def test_sgd_gradient_is_unbiased_18(problem):
    """The mean over the dataset of G_i (17) on each single sequence equals -grad Phi (18)."""
    model, data, heads, w, _ = problem
    per = torch.stack([model.stochastic_gradient(data.subset([b]), heads, w) for b in range(data.n)])
    full = model.grad_first_variation(data, heads, heads, w)
    torch.testing.assert_close(per.mean(0), -full, **TIGHT)
    torch.testing.assert_close(model.per_sample_grad_first_variation(data, heads, heads, w), -per, **TIGHT)


def test_dissipation_38_against_autograd_of_risk(problem):
    model, data, heads, w, _ = problem
    h = heads.clone().requires_grad_()
    (auto,) = torch.autograd.grad(model.risk(data, h, w), h)
    expect = ((auto * auto).sum(-1) / w).sum()  # |w_i grad Phi_i|^2 / w_i summed
    torch.testing.assert_close(model.dissipation(data, heads, w), expect, **TIGHT)


def test_hessian_first_variation_against_fd_of_manual_gradient(problem):
    model, data, heads, w, g = problem
    omega = torch.randn(model.d_omega, generator=g, dtype=torch.float64)
    H = model.hessian_first_variation(data, omega, heads, w)
    torch.testing.assert_close(H, H.T, **TIGHT)
    h = 1e-5
    eye = torch.eye(model.d_omega, dtype=torch.float64)
    cols = (
        model.grad_first_variation(data, omega + h * eye, heads, w)
        - model.grad_first_variation(data, omega - h * eye, heads, w)
    ) / (2 * h)
    torch.testing.assert_close(H, cols, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("one_hot", [False, True])
def test_translation_hessian_is_hessian_of_single_head_risk(one_hot):
    model, data, _, _, g = make_problem(one_hot=one_hot)
    omega = torch.randn(model.d_omega, generator=g, dtype=torch.float64)
    H = model.translation_hessian(data, omega)
    auto = torch.autograd.functional.hessian(lambda w: model.risk(data, w[None]), omega)
    torch.testing.assert_close(H, auto, **TIGHT)
    # and H_tr - H0 is the positive semidefinite Gauss-Newton term of (59)
    gn = H - model.hessian_first_variation(data, omega, omega[None])
    assert float(torch.linalg.eigvalsh(gn).min()) > -1e-12


def closed_form_spectrum_at_zero(model, data):
    """Spectrum of H_tr(0) = H_0(0) derived by hand.

    At omega = 0 the scores vanish, A is the uniform causal average (row l averages
    x_1..x_l into xbar_l), psi_l = xbar_l^T W_V W_O W_out is bilinear in (W_V, W_O), so J = 0 and
    only the (W_V, W_O) cross block survives: d^2 psi / dV_ab dO_b'c = delta_bb' xbar_a W_out[c].
    With r_l = 1/d_v - Y_l and C = E[(1/L) sum_l xbar_l (W_out r_l)^T] (d_x x d_x), each b in
    1..d_k contributes [[0, C], [C^T, 0]]: eigenvalues +-sigma_i(C); the W_Q, W_K blocks are 0.
    """
    L = data.L
    xbar = data.X.cumsum(1) / torch.arange(1, L + 1, dtype=data.X.dtype)[None, :, None]
    r = 1.0 / model.d_v - data.Y
    C = torch.einsum("bla,blc->ac", xbar, r @ model.W_out.T) / (data.n * L)
    s = torch.linalg.svdvals(C)
    zeros = torch.zeros(2 * model.d_x * model.d_k, dtype=C.dtype)
    return torch.sort(torch.cat([s.repeat(model.d_k), -s.repeat(model.d_k), zeros])).values


@pytest.mark.parametrize("one_hot", [False, True])
def test_translation_hessian_closed_form_spectrum_at_zero(one_hot):
    model, data, *_ = make_problem(one_hot=one_hot, d_x=4, d_k=3)
    zero = torch.zeros(model.d_omega, dtype=torch.float64)
    H = model.translation_hessian(data, zero)
    torch.testing.assert_close(torch.linalg.eigvalsh(H), closed_form_spectrum_at_zero(model, data), **TIGHT)
    torch.testing.assert_close(H, model.hessian_first_variation(data, zero, zero[None]), **TIGHT)
    # omega = 0 is stationary for every measure: grad Phi(0; rho) = 0
    _, _, heads, w, _ = make_problem(one_hot=one_hot, d_x=4, d_k=3)
    assert float(model.grad_first_variation(data, zero[None], heads, w).abs().max()) == 0.0


def test_results_do_not_depend_on_chunk_sizes(problem):
    model, data, heads, w, g = problem
    small = HeadModel(model.W_out, model.d_k, chunk_size=2, sample_chunk=1, fused=False)
    one = HeadModel(model.W_out, model.d_k, chunk_size=1, sample_chunk=4, fused=False)
    q = torch.randn(5, model.d_omega, generator=g, dtype=torch.float64)
    for m in (small, one):
        torch.testing.assert_close(m.features(data.X, heads), model.features(data.X, heads), **TIGHT)
        torch.testing.assert_close(m.logits(data.X, heads, w), model.logits(data.X, heads, w), **TIGHT)
        torch.testing.assert_close(m.risk(data, heads, w), model.risk(data, heads, w), **TIGHT)
        torch.testing.assert_close(m.first_variation(data, q, heads, w), model.first_variation(data, q, heads, w), **TIGHT)
        torch.testing.assert_close(
            m.grad_first_variation(data, q, heads, w), model.grad_first_variation(data, q, heads, w), **TIGHT
        )
        torch.testing.assert_close(
            m.per_sample_grad_first_variation(data, q, heads, w),
            model.per_sample_grad_first_variation(data, q, heads, w),
            **TIGHT,
        )
        torch.testing.assert_close(m.dissipation(data, heads, w), model.dissipation(data, heads, w), **TIGHT)
        torch.testing.assert_close(m.translation_hessian(data, q[0]), model.translation_hessian(data, q[0]), **TIGHT)


def test_chunks_bound_the_work_per_kernel_call(problem, monkeypatch):
    model, data, heads, w, _ = problem
    m = HeadModel(model.W_out, model.d_k, chunk_size=3, sample_chunk=2, fused=False)  # the torch path's chunks
    seen = []
    orig = HeadModel._attend

    def spy(self, X, h):
        seen.append((h.shape[0], X.shape[0]))
        return orig(self, X, h)

    monkeypatch.setattr(HeadModel, "_attend", spy)
    m.grad_first_variation(data, heads, heads, w)
    assert max(c for c, _ in seen) <= 3 and max(b for _, b in seen) <= 2
    assert sum(c * b for c, b in seen) == 2 * heads.shape[0] * data.n  # logits pass + gradient pass


def test_float32_agrees_with_float64():
    m64, d64, h64, w64, g = make_problem(torch.float64)
    m32, d32, h32, w32, _ = make_problem(torch.float32)
    q64 = torch.randn(4, m64.d_omega, generator=g, dtype=torch.float64)
    q32 = q64.float()
    pairs = [
        (m32.risk(d32, h32, w32), m64.risk(d64, h64, w64)),
        (m32.first_variation(d32, q32, h32, w32), m64.first_variation(d64, q64, h64, w64)),
        (m32.grad_first_variation(d32, q32, h32, w32), m64.grad_first_variation(d64, q64, h64, w64)),
        (m32.dissipation(d32, h32, w32), m64.dissipation(d64, h64, w64)),
        (m32.translation_hessian(d32, q32[0]), m64.translation_hessian(d64, q64[0])),
    ]
    for a, b in pairs:
        assert a.dtype == torch.float32
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-5)


def test_softmax_jacobian_against_autograd_and_lemma_2_1():
    g = torch.Generator().manual_seed(1)
    z = 3 * torch.randn(50, 6, generator=g, dtype=torch.float64)
    J = softmax_jacobian(z)
    auto = torch.stack([torch.autograd.functional.jacobian(lambda t: torch.softmax(t, -1), zi) for zi in z])
    torch.testing.assert_close(J, auto, **TIGHT)
    ev = torch.linalg.eigvalsh(J)
    assert float(ev.min()) > -1e-15 and float(ev.max()) <= 0.5 + 1e-15
    # the bound is attained: d = 2, z = 0 gives p = (1/2, 1/2) and eigenvalue exactly 1/2
    assert float(torch.linalg.eigvalsh(softmax_jacobian(torch.zeros(2, dtype=torch.float64))).max()) == 0.5



def test_softmax_top_eigenvalue_matches_the_closed_form_along_z_t():
    from mfattn.models.softmax import softmax_jacobian_top_eigenvalue
    # oracle: along z_t = (t, t, 0, ..., 0) the top eigenvalue is p_1 = e^t / (2 e^t + d - 2) (chapter 01)
    t = torch.linspace(0, 20, 21, dtype=torch.float64)
    for d in (3, 7):
        z = torch.zeros(len(t), d, dtype=torch.float64)
        z[:, :2] = t[:, None]
        torch.testing.assert_close(softmax_jacobian_top_eigenvalue(z), torch.exp(t) / (2 * torch.exp(t) + d - 2),
                                   rtol=0, atol=1e-14)
    # uniform logits: S = I/d - 11^T/d^2 has top eigenvalue 1/d
    assert abs(float(softmax_jacobian_top_eigenvalue(torch.zeros(5, dtype=torch.float64))) - 0.2) < 1e-15
    with pytest.raises(ValueError, match="^z"):
        softmax_jacobian_top_eigenvalue(torch.tensor(1.0))

# ------------------------------------------------------------------ ValueError paths
def negative_weights(n):
    w = torch.full((n,), 1.0 / n, dtype=torch.float64)
    w[0], w[1] = -1.0 / n, 3.0 / n  # still sums to one
    return w


def negative_labels(Y):
    Y = Y.clone()
    Y[..., 0] -= 1.0
    Y[..., 1] += 1.0  # rows still sum to one
    return Y


def bad_calls():
    model, data, heads, w, _ = make_problem()
    f32 = make_problem(torch.float32)[1]
    nanh = heads.clone()
    nanh[0, 0] = float("nan")
    X, Y = data.X, data.Y
    return [
        ("W_out", lambda: HeadModel(torch.ones(3), 2)),
        ("d_k", lambda: HeadModel(model.W_out, 0)),
        ("chunk_size", lambda: HeadModel(model.W_out, 2, chunk_size=-1)),
        ("heads", lambda: model.logits(X, heads[:, :-1])),
        ("heads", lambda: model.logits(X, heads[0])),
        ("heads", lambda: model.logits(X, heads[:0])),
        ("heads", lambda: model.logits(X, nanh)),
        ("heads", lambda: model.logits(X, heads.float())),
        ("heads", lambda: model.logits(X, heads.long())),
        ("X", lambda: model.logits(X[..., :-1], heads)),
        ("X", lambda: model.logits(X[0], heads)),
        ("weights", lambda: model.logits(X, heads, w[:-1])),
        ("weights", lambda: model.logits(X, heads, 2 * w)),
        ("weights", lambda: model.logits(X, heads, negative_weights(len(w)))),
        ("query", lambda: model.first_variation(data, heads[:, :3], heads)),
        ("omega", lambda: model.translation_hessian(data, heads)),
        ("omega", lambda: model.hessian_first_variation(data, heads[0, :-1], heads)),
        ("data", lambda: model.risk((X, Y), heads)),
        ("data", lambda: model.risk(f32, heads)),
        ("Y", lambda: Dataset(X, Y * 2)),
        ("Y", lambda: Dataset(X, negative_labels(Y))),
        ("Y", lambda: Dataset(X, Y[:-1])),
        ("Y", lambda: Dataset(X, Y[:, :-1])),
        ("Y", lambda: Dataset(X, Y.float())),
        ("X", lambda: Dataset(X.clone().fill_(float("inf")), Y)),
        ("X", lambda: Dataset(X[0], Y)),
        ("z", lambda: softmax_jacobian(torch.tensor([1, 2]))),
    ]


@pytest.mark.parametrize("case", range(len(bad_calls())))
def test_bad_input_raises_value_error_naming_argument(case):
    name, call = bad_calls()[case]
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        call()


@pytest.mark.parametrize("L", [5, 8])
def test_broadcast_products_equal_the_batched_gemms(L):
    # the CUDA path for tiny heads (HeadModel._prod with _tiny) forced on the CPU, against the GEMM path
    model, data, heads, w, _ = make_problem(n=4, L=L, d_k=3)
    ref = (model.grad_first_variation(data, heads, heads, w), model.per_sample_grad_first_variation(data, heads, heads, w),
           model.first_variation(data, heads, heads, w), model.translation_hessian(data, heads[0]))
    model._tiny = True
    got = (model.grad_first_variation(data, heads, heads, w), model.per_sample_grad_first_variation(data, heads, heads, w),
           model.first_variation(data, heads, heads, w), model.translation_hessian(data, heads[0]))
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
