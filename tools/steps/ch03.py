"""Step inventory of chapter 03-static-approximation: the chapter's time is solver iterations (ci: the
Markov optima, the boundary optimum and the inf E_N sweep are 79 % of the committed cell time). Entries: the
SLSQP local solves of `mean_field_optimum` (teacher task: the ball holding the teacher and the one excluding
it; Markov task: one optimum per radius) and the SLSQP polish of `finite_head_optimum` (N d_omega <= 256),
a step = SLOT iterations of `mfattn.analysis.static.local_solve` (SLSQP) on the engine's local-solve problem
(objective `risk_grad_phi`, ball and simplex constraints; QP work and set-up included, ~1 evaluation per
iteration), plus one entry per solve type for the further line-search evaluations of the objective (a step =
one evaluation); the projected-gradient descent of `finite_head_optimum`, one pair of entries per N of N_grid
(a step = one risk of E_N at a trial point, or one gradient of E_N, which follows accepted steps only); the
multistart descent of min_K Phi inside every certificate (a step = phi_at at all starts and grad_at at the
accepted ones); the ascent of `feature_sup`; the i.i.d. construction (a step = one batch of draws of the three
measures, per N of N_iid). Left out: imports and task building, figures, `rounding_gaps`, fits and printing.

SLSQP iteration and evaluation counts and the number of outer Frank-Wolfe iterations are data-dependent; the
counts use NOMINAL solver counts from the chapter's ci run (machine-independent counts of the solver, not
times): MF_ITERS SLSQP iterations per mean-field local solve at about MF_ATOMS atoms, FEV_MF / FEV_POLISH
evaluations per iteration, OUTER_IN, OUTER_OUT (of outer = 4, 15) and OUTER_MARKOV per Markov radius (of 6)
outer iterations, min(1000, 50 + 2 N d_omega) polish iterations per restart, and the acceptance ln 2 / ln 3
of the x1.5 / x0.5 step rule (its stationary fraction; the ci run has 191 gradients per 300 steps).
"""

import mfattn  # noqa: F401  first: the thread policy
import math
import numpy as np
import torch

from mfattn.analysis.static import Ball, local_solve
from mfattn.models.tasks import make_task

from stepkit import sync  # tools/steps/stepkit.py

SLOT = 25                    # SLSQP iterations per timed step
MF_ITERS = 450               # nominal SLSQP iterations per mean-field local solve (ci: 8502 over 19 solves)
MF_ATOMS = 10                # nominal atoms of a mean-field local solve (ci: 6 to 18, mostly 8 to 11)
OUTER_IN, OUTER_OUT, OUTER_MARKOV = 4, 6, 3   # outer iterations run (ci: 4 of 4, 6 of 15, 1/2/6 of 6)
MF_ITERS_PHI, TOP_ITERS_PHI = 100, 200        # iters of the certificates' descent (solver's, certificate default)
FH_ITERS = 300               # finite_head_optimum default iters
ACCEPT = math.log(2) / math.log(3)            # stationary acceptance of the x1.5 / x0.5 step rule
FEV_BLOCK = 1.04             # objective evaluations per iteration inside a timed block (SLOT + 1 per SLOT)
FEV_MF, FEV_POLISH = 1.55, 2.9   # per SLSQP iteration in the chapter's solves (ci: 13153 / 8502, 9214 / 3174)
SINGLE_RESTARTS = 4          # finite_head_optimum(..., 1, n_random=4) of the last section
POLISH_MAX = 256


def _polish_iters(N, d_omega):
    return min(1000, 50 + 2 * N * d_omega)


def _slsqp_block(model, data, ball, atoms, w, free_weights):
    """(step, evaluation): SLOT iterations of the engine's local solve (``static.local_solve``: SLSQP on the
    risk over atoms in K, and weights), and one evaluation of its objective (risk, gradient and Phi on
    the host), the unit of the line searches' extra evaluations."""
    X, Y = data.X, data.Y

    def step():
        return local_solve(model, X, Y, atoms, w, ball, free_weights=free_weights, maxiter=SLOT, ftol=1e-15)

    def evaluation():
        risk, grad, phi = model.risk_grad_phi(X, Y, atoms, w)
        g = (w[:, None] * grad).flatten()
        return float(risk), (torch.cat([g, phi]) if free_weights else g).detach().cpu().double().numpy()
    return step, evaluation


def inventory(p: dict, device) -> list[dict]:
    seed = p.get("seed", 0)
    cache = {}

    def task(name):
        if name not in cache:
            cache[name] = make_task(name, n=p["n_data"], seed=seed, device=device)
        return cache[name]

    def balls():
        Tk = task("teacher")
        r = float(Tk.teacher_heads.norm(dim=1).max())
        return Ball(p["inside"] * r), Ball(p["outside"] * r)

    def gen(k):
        return torch.Generator().manual_seed(1000 * seed + k)

    n_starts, radii, n_random = p["n_starts"], p["markov_radii"], p["n_random"]
    out = []

    # ---- mean_field_optimum: SLSQP local solves (joint atoms and weights)
    def make_mf(name, ball_of, which):
        def make():
            T = task(name)
            ball = ball_of()
            atoms = 0.5 * ball.sample_sphere(MF_ATOMS, T.model.d_omega, generator=gen(1), dtype=T.model.dtype,
                                             device=T.model.device)
            w = torch.full((MF_ATOMS,), 1.0 / MF_ATOMS, dtype=T.model.dtype, device=T.model.device)
            return _slsqp_block(T.model, T.data, ball, atoms, w, free_weights=True)[which]
        return make
    for name, n_solves, ball_of in (("teacher", OUTER_IN + OUTER_OUT, lambda: balls()[1]),
                                    ("markov", OUTER_MARKOV * len(radii), lambda: Ball(float(np.median(radii))))):
        out.append(dict(what=f"mean_field_optimum, {name}: {SLOT} SLSQP iterations at {MF_ATOMS} atoms",
                        count=n_solves * MF_ITERS / SLOT, make=make_mf(name, ball_of, 0)))
        out.append(dict(what=f"mean_field_optimum, {name}: further line-search evaluation of the objective",
                        count=n_solves * MF_ITERS * (FEV_MF - FEV_BLOCK), make=make_mf(name, ball_of, 1)))

    # ---- certificates: descent steps of min_K Phi (phi_at at S points, grad_at at the accepted ones)
    def make_phi(S, n_atoms=MF_ATOMS):
        def make():
            T = task("teacher")
            model, data = T.model, T.data
            ball = balls()[1]
            heads = 0.5 * ball.sample_sphere(n_atoms, model.d_omega, generator=gen(2), dtype=model.dtype,
                                             device=model.device)
            _, _, _, _, G = model.prepare(data, heads, None)
            q0 = ball.sample_sphere(S, model.d_omega, generator=gen(3), dtype=model.dtype, device=model.device)
            g0 = model.grad_at(data.X, G, q0)
            k = max(1, round(ACCEPT * S))
            st = {"q": q0, "phi": model.phi_at(data.X, G, q0), "g": g0,
                  "step": 0.1 * ball.radius / g0.norm(dim=1).clamp_min(1e-30)}

            def step():
                trial = ball.project(st["q"] - st["step"][:, None] * st["g"])
                phi_t = model.phi_at(data.X, G, trial)
                ok = phi_t < st["phi"]
                bool(ok.any())
                st["g"][:k] = model.grad_at(data.X, G, trial[:k])
                st["step"] = torch.where(ok, 1.5 * st["step"], 0.5 * st["step"])
                bool((st["step"] * st["g"].norm(dim=1) < 1e-14 * ball.radius).all())
            return step
        return make
    S_reg = n_starts + n_starts // 4 + MF_ATOMS
    S_fin = 4 * n_starts + n_starts // 4 + MF_ATOMS
    n_reg = OUTER_IN + OUTER_OUT + OUTER_MARKOV * len(radii)
    n_fin = (2 + len(radii)) + 2          # one final certificate per optimum, two confirmations (ci: 2)
    out.append(dict(what=f"certificate min_K Phi step, {S_reg} starts (every outer iteration)",
                    count=MF_ITERS_PHI * n_reg, make=make_phi(S_reg)))
    out.append(dict(what=f"certificate min_K Phi step, {S_fin} starts (final and confirming)",
                    count=MF_ITERS_PHI * n_fin, make=make_phi(S_fin)))
    out.append(dict(what=f"certificate min_K Phi step, {n_starts + 1} starts (delta_0, single head)",
                    count=2 * TOP_ITERS_PHI, make=make_phi(n_starts + 1, 1)))

    # ---- feature_sup: projected ascent of max ||psi||^2, n_starts starts, 200 iterations
    def make_sup():
        T = task("teacher")
        model, X = T.model, T.data.X
        ball = balls()[1]
        st = {"q": ball.sample_sphere(n_starts, model.d_omega, generator=gen(4), dtype=model.dtype,
                                      device=model.device)}

        def value(q):
            return (model.forward(X, q)[0] @ model.W_out).pow(2).sum(-1).flatten(1).amax(1)
        st["f"] = value(st["q"])
        st["step"] = torch.full_like(st["f"], 0.1 * ball.radius)

        def step():
            qq = st["q"].detach().requires_grad_(True)
            g = torch.autograd.grad(value(qq).sum(), qq)[0]
            g = g / g.norm(dim=1, keepdim=True).clamp_min(1e-30)
            with torch.no_grad():
                trial = ball.project(st["q"] + st["step"][:, None] * g)
                ft = value(trial)
                ok = ft > st["f"]
                st["q"] = torch.where(ok[:, None], trial, st["q"])
                st["f"] = torch.where(ok, ft, st["f"])
                st["step"] = torch.where(ok, 1.5 * st["step"], 0.5 * st["step"])
            sync(device)
        return step
    out.append(dict(what=f"feature_sup ascent step, {n_starts} starts", count=200, make=make_sup))

    # ---- i.i.d. construction: one batch of draws per measure and N (three measures)
    def make_iid(N):
        def make():
            T = task("teacher")
            model, data = T.model, T.data
            ball = balls()[1]
            g = gen(5)
            star = ball.sample_sphere(MF_ATOMS, model.d_omega, generator=g, dtype=model.dtype, device=model.device)
            diffuse = ball.project(0.5 * ball.radius / math.sqrt(model.d_omega) * torch.randn(
                512, model.d_omega, generator=g, dtype=torch.float64)).to(device)
            ms = []
            for heads, w in ((T.teacher_heads, T.teacher_weights),
                             (star, torch.full((MF_ATOMS,), 1.0 / MF_ATOMS, dtype=model.dtype, device=device)),
                             (diffuse, torch.full((512,), 1.0 / 512, dtype=model.dtype, device=device))):
                Psi = model.features(data.X, heads)
                z = torch.tensordot(w, Psi, dims=1)
                E = float(model.loss(data.Y, z).mean())
                phi = model.first_variation(data, heads, heads, w).detach().to("cpu", torch.float64)
                w_cpu = w.detach().to("cpu", torch.float64)
                batch = max(1, (1 << 26) // (Psi[0].numel() * Psi.element_size()))
                ms.append((Psi, Psi.reshape(heads.shape[0], -1), z, E, phi, w_cpu, min(batch, p["n_draws"])))

            def step():
                for Psi, flat, z, E, phi, w_cpu, k in ms:
                    m = w_cpu.shape[0]
                    idx = torch.multinomial(w_cpu.expand(k, m), N, replacement=True, generator=g)
                    counts = torch.zeros(k, m, dtype=torch.float64).scatter_add_(
                        1, idx, torch.ones(k, N, dtype=torch.float64))
                    zN = ((counts / N).to(Psi) @ flat).reshape(k, *Psi.shape[1:])
                    err = (zN - z).norm(dim=-1).flatten(1)
                    err.mean(1).cpu(), err.amax(1).cpu(), err.pow(2).mean(1).cpu()
                    (model.loss(data.Y, zN).flatten(1).mean(1) - E).cpu()
                    (counts / N) @ phi
            return step
        return make
    T0 = task("teacher")
    for N in p["N_iid"]:  # draws per batch: Psi[0] is (n, L, d_v) float64 of the teacher task
        batch = max(1, (1 << 26) // (p["n_data"] * T0.data.L * T0.model.d_v * 8))
        out.append(dict(what=f"i.i.d. construction: one batch of draws, 3 measures, N = {N}",
                        count=math.ceil(p["n_draws"] / min(batch, p["n_draws"])), make=make_iid(N)))

    # ---- finite_head_optimum per N: projected gradient descent of E_N (risk every step, grad when accepted)
    def make_risk(N):
        def make():
            T = task("teacher")
            model, data = T.model, T.data
            H = balls()[1].sample_sphere(N, model.d_omega, generator=gen(6), dtype=model.dtype, device=model.device)
            w = torch.full((N,), 1.0 / N, dtype=model.dtype, device=model.device)
            return lambda: float(model.risk_and_dissipation(data.X, data.Y, H, w, dissipation=False)[0])
        return make

    def make_grad(N):
        def make():
            T = task("teacher")
            model, data = T.model, T.data
            ball = balls()[1]
            H = ball.sample_sphere(N, model.d_omega, generator=gen(7), dtype=model.dtype, device=model.device)
            w = torch.full((N,), 1.0 / N, dtype=model.dtype, device=model.device)
            scale = 1.0 / (data.X.shape[0] * data.X.shape[1])

            def step():
                g = model.grad_at(data.X, model.pullback(data.X, data.Y, H, w) * scale, H)
                ball.project(H - 0.01 * g)
                sync(device)
            return step
        return make

    def make_polish(N, which):
        def make():
            T = task("teacher")
            ball = balls()[1]
            H = ball.sample_sphere(N, T.model.d_omega, generator=gen(8), dtype=T.model.dtype, device=T.model.device)
            w = torch.full((N,), 1.0 / N, dtype=T.model.dtype, device=T.model.device)
            return _slsqp_block(T.model, T.data, ball, H, w, free_weights=False)[which]
        return make

    d_omega = task("teacher").model.d_omega  # 4 d_x d_k = 32 with the teacher task's defaults
    for N in p["N_grid"]:
        restarts = (n_random + 2) + (SINGLE_RESTARTS if N == 1 else 0)  # random + rounded + iid; single head
        out.append(dict(what=f"finite_head_optimum N = {N}: risk of E_N", count=restarts * (FH_ITERS + 1),
                        make=make_risk(N)))
        out.append(dict(what=f"finite_head_optimum N = {N}: gradient of E_N (accepted steps)",
                        count=restarts * (1 + ACCEPT * FH_ITERS), make=make_grad(N)))
        if N * d_omega <= POLISH_MAX:
            nit = _polish_iters(N, d_omega)
            out.append(dict(what=f"finite_head_optimum N = {N}: SLSQP polish, {SLOT} iterations",
                            count=restarts * nit / SLOT, make=make_polish(N, 0)))
            # the single head's polish starts near its optimum: about one evaluation per iteration (ci)
            out.append(dict(what=f"finite_head_optimum N = {N}: polish, further line-search evaluation",
                            count=(n_random + 2) * nit * (FEV_POLISH - FEV_BLOCK), make=make_polish(N, 1)))
    if 1 not in p["N_grid"]:  # the single-head optimum of the last section
        out.append(dict(what="single-head optimum: risk", count=SINGLE_RESTARTS * (FH_ITERS + 1), make=make_risk(1)))
        out.append(dict(what="single-head optimum: gradient", count=SINGLE_RESTARTS * (1 + ACCEPT * FH_ITERS),
                        make=make_grad(1)))
        out.append(dict(what=f"single-head optimum: SLSQP polish, {SLOT} iterations",
                        count=SINGLE_RESTARTS * _polish_iters(1, d_omega) / SLOT, make=make_polish(1, 0)))
    return out
