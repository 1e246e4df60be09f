"""Step inventory of chapter 01-preliminaries: the Remark 3.5 ascents dominate (about 73 % of the committed
ci run): `dimension_sweeps` runs, for every derivative order m = 0..dim_max_order, three sweeps of
`ascent_chains` (14 shapes (d_x, d_v, L) in all), each an ascent of `feature_derivative_max` of dim_steps Adam
steps on K = dim_chains * dim_base_starts starts (first shape of a sweep) or K = dim_chains * (2 + dim_starts)
(later shapes); a step is one loop body of that ascent (nested-jvp evaluation of D^m psi at the K (X, omega, u)
triples, backward, Adam step, projection), one entry per distinct (m, shape, K), always on the CPU because
`ascent_chains` builds its model there. Then Proposition 3.4 (`feature_derivative_sup`, one step = all point
blocks and orders 0..3 at one radius, count n_radii, on the chapter's device), Lemma 2.1 (eigvalsh of the
softmax Jacobian of (9, n_logits, d) random logits, on the CPU as in the chapter), and the first-variation
and SGD cells (risk of the mixture, first_variation, grad_first_variation, per-sample gradients, one
minibatch mean per replicate and size S) at n_heads heads on the chapter's device.
"""

import mfattn  # noqa: F401  first: the thread policy
import torch
from collections import Counter

from mfattn.analysis.smoothness import feature_derivative_sup
from mfattn.flows.seeds import stream
from mfattn.models.model import HeadModel
from mfattn.models.softmax import softmax_jacobian_top_eigenvalue
from mfattn.models.tasks import make_task

from stepkit import sync  # tools/steps/stepkit.py

# constants of the chapter's cells
DIMS = [2, 3, 5, 10, 50]                 # Lemma 2.1
N_SCALES = 9                             # torch.logspace(-2, 2, 9)
SIZES, L_SIZES = [2, 4, 8, 16, 32], [2, 4, 8, 16]   # Remark 3.5
M_X, M_OM, DIM_DK, DIM_L = 2.0, 2.0, 2, 4
D_V, D_X_FOR_DV = 4, 8                   # dimension_sweeps defaults
N_HS = 17                                # hs = np.logspace(-1, -9, 17)
N_H13 = 5                                # h13
S_GRID = [2**k for k in range(0, 11)]    # (18)


def _remark35_ascents(p):
    """Counter {(m, d_x, d_v, L, K): number of ascents} of dimension_sweeps for every order m."""
    R = p["dim_chains"]
    K_first, K_later = R * p["dim_base_starts"], R * (2 + p["dim_starts"])
    sweeps = [[(d, D_V, DIM_L) for d in SIZES],
              [(D_X_FOR_DV, d, DIM_L) for d in SIZES],          # continues from the d_x sweep: no first shape
              [(max(l, 2 * DIM_DK), D_V, l) for l in L_SIZES]]
    c = Counter()
    for m in range(p["dim_max_order"] + 1):
        for i, sw in enumerate(sweeps):
            for j, shape in enumerate(sw):
                K = K_first if (j == 0 and i != 1) else K_later
                c[(m, *shape, K)] += 1
    return c


def _nested(f, order):
    """h, u -> D^order f(h)[u]^order by nested torch.func.jvp (as feature_derivative_max does)."""
    fn = lambda h, u: f(h)
    for _ in range(order):
        fn = (lambda prev: (lambda h, u: torch.func.jvp(lambda x: prev(x, u), (h,), (u,))[1]))(fn)
    return fn


def _ascent_step(m, d_x, d_v, L, K, seed):
    """One loop body of feature_derivative_max at order m, model HeadModel(eye(d_x, d_v), d_k) on the CPU."""
    def make():
        f64 = torch.float64
        model = HeadModel(torch.eye(d_x, d_v, dtype=f64), DIM_DK)
        g = torch.Generator().manual_seed(seed)

        def sphere(k, *shape, r):
            v = torch.randn(k, *shape, generator=g, dtype=f64)
            return r * v / v.flatten(1).norm(dim=1).reshape(-1, *[1] * len(shape))

        omega = sphere(K, model.d_omega, r=M_OM).requires_grad_()
        X = sphere(K, L, d_x, r=M_X).requires_grad_()
        u = sphere(K, model.d_omega, r=1.0).requires_grad_()
        diag = torch.arange(K)
        fn = _nested(lambda h: model.forward(X, h)[0][diag, diag] @ model.W_out, m)
        model.causal_bias(L)
        lr = 0.05
        opt = torch.optim.Adam([dict(params=[omega], lr=lr * M_OM), dict(params=[X], lr=lr * M_X),
                                dict(params=[u], lr=lr)])
        best_v = torch.full((K,), -1.0, dtype=f64)
        best = [omega.detach().clone(), X.detach().clone(), u.detach().clone()]

        def step():
            value = fn(omega, u).norm(dim=-1).amax(dim=-1)
            with torch.no_grad():
                better = value.detach().cpu() > best_v
                best_v[better] = value.detach().cpu()[better]
                best[0][better], best[1][better], best[2][better] = omega[better], X[better], u[better]
            opt.zero_grad()
            (-value.sum()).backward()
            opt.step()
            with torch.no_grad():
                omega.mul_(torch.clamp(M_OM / omega.norm(dim=1, keepdim=True), max=1.0))
                X.mul_(torch.clamp(M_X / X.flatten(1).norm(dim=1), max=1.0).reshape(K, 1, 1))
                u.div_(u.norm(dim=1, keepdim=True))
        return step
    return make


def _synced(fn, device):
    def step():
        r = fn()
        sync(device)
        return r
    return step


def inventory(p: dict, device) -> list[dict]:
    seed = p.get("seed", 0)
    out = []
    cache = {}

    def task():
        if "T" not in cache:
            cache["T"] = make_task(p["task"], seed=seed, device=device)
        return cache["T"]

    def heads(name, N, scale=1.0):
        key = (name, N)
        if key not in cache:
            T = task()
            g = stream(seed, name)
            cache[key] = scale * torch.randn(N, T.model.d_omega, generator=g, dtype=torch.float64).to(device)
        return cache[key]

    # Lemma 2.1 (cell 3): on the CPU, as in the chapter; one batch per dimension d
    for d in DIMS:
        def make(d=d):
            g = stream(seed, "logits")
            scales = torch.logspace(-2, 2, N_SCALES, dtype=torch.float64)
            return lambda: softmax_jacobian_top_eigenvalue(
                scales[:, None, None] * torch.randn(N_SCALES, p["n_logits"], d, generator=g, dtype=torch.float64))
        out.append(dict(what=f"Lemma 2.1: top eigenvalue of S(z), {N_SCALES} x n_logits logits, d = {d} (CPU)",
                        count=1, make=make))

    # Proposition 3.4 (cell 6): feature_derivative_sup, one radius per step (all point blocks, orders 0..3)
    def make_sup():
        T = task()
        X = T.data.X[: p["n_smooth_seqs"]]
        g = stream(seed, "derivative sup")
        return lambda: feature_derivative_sup(T.model, X, [1.0], n_points=p["n_points"],
                                              n_directions=p["n_directions"], max_order=3, generator=g,
                                              progress=False)
    out.append(dict(what="Prop. 3.4: feature_derivative_sup at one radius (orders 0..3)", count=p["n_radii"],
                    make=make_sup))

    # Remark 3.5 (cell 9): one Adam step of feature_derivative_max per (order, shape, starts)
    for (m, d_x, d_v, L, K), n_asc in sorted(_remark35_ascents(p).items()):
        out.append(dict(what=f"Rem. 3.5: ascent step m={m} (d_x,d_v,L)=({d_x},{d_v},{L}) K={K} (CPU)",
                        count=n_asc * p["dim_steps"], make=_ascent_step(m, d_x, d_v, L, K, seed + m)))

    N = p["n_heads"]

    # (12) (cell 12): mixture_derivative: 1 + 2 len(hs) risks of the 2N-atom mixture, 2 first variations
    def make_risk():
        T = task()
        rho, nu = heads("first variation", N), heads("nu", N, 1.5)
        both = torch.cat([rho, nu])
        w = torch.cat([torch.full((N,), 0.999 / N, dtype=torch.float64),
                       torch.full((N,), 0.001 / N, dtype=torch.float64)]).to(rho)
        return lambda: float(T.model.risk(T.data, both, w))
    out.append(dict(what="(12): risk of the mixture (1-eps) rho + eps nu, 2 n_heads atoms",
                    count=1 + 2 * N_HS, make=make_risk))

    def make_fv():
        T = task()
        rho, q = heads("first variation", N), heads("query", N)
        return _synced(lambda: T.model.first_variation(T.data, q, rho), device)
    out.append(dict(what="(12)/(13): first_variation, n_heads queries against n_heads atoms",
                    count=2 + 2 * N_H13, make=make_fv))

    def make_gfv():
        T = task()
        rho, q = heads("first variation", N), heads("query", N)
        return _synced(lambda: T.model.grad_first_variation(T.data, q, rho), device)
    out.append(dict(what="(13)/(18): grad_first_variation, n_heads queries against n_heads atoms",
                    count=2, make=make_gfv))

    def make_per():
        T = task()
        rho = heads("first variation", N)
        return _synced(lambda: T.model.per_sample_grad_first_variation(T.data, rho, rho), device)
    out.append(dict(what="(18): per_sample_grad_first_variation (n, n_heads, d_omega)", count=1, make=make_per))

    # (18) (cell 16): minibatch_mse, one gather-and-mean of S per-sequence gradients per replicate
    for S in S_GRID:
        def make_mb(S=S):
            T = task()
            per = torch.randn(T.data.n, N, T.model.d_omega, dtype=torch.float64, device=device)
            full = per.mean(0)
            g = torch.Generator().manual_seed(seed)

            def step():
                i = torch.randint(per.shape[0], (S,), generator=g).to(device)
                return float(((per[i].mean(0) - full) ** 2).sum())
            return step
        out.append(dict(what=f"(18): minibatch mean of S = {S} per-sequence gradients", count=p["n_replicates"],
                        make=make_mb))
    return out
