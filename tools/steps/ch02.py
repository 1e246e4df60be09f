"""Step inventory of chapter 02-propagation-of-chaos: the chapter's time is the chaos cell (`run_chaos` of
a `ChaosSetup`, once per initial law, compact and Gaussian), then the eps-sweep cell and the
clouds/animation cells. Per law, run_chaos computes two reference flows (21) of n_ref heads
(`reference_flow`: RK4 steps of `model.evaluate` at n_ref heads on the whole dataset, every stage's
residual and the whole population recorded), then for every (N, seed) of the grid one point
(`ChaosSetup.point`): full-batch GD of N heads at eps_small (`sgd(batch_size=None)`: one
`model.evaluate` per step), the tagged characteristics of its N initial heads under both references
(`Run.characteristics`: RK4 steps of four `model.grad_at` at the stored residuals), and at each of the
R = T / record_every + 1 recording times the run's risk, (24) against reference 1's test means
(`lipschitz_discrepancy`), its halves against the tags (`lipschitz_parts`) and the risks of both tags
(`model.risk`); the reference side of (24) (reference 1's `lipschitz_means` over its n_ref atoms, and
the floor: population 2 against them) once per law and recording time. The eps-sweep cell, per seed: an
own RK4 reference of N_eps heads at ref_step / 2, then for each eps an SGD (batch 1) and a GD run of
N_eps heads, measured per recording time (risk, two `lipschitz_discrepancy`). The clouds and animation
cells: GD and SGD runs of 128 heads at eps_small (twice), a 4096-atom reference flow, characteristics of
the 128 heads, three exact W2 (`wasserstein`, 128 vs 4096 atoms) and the 33-frame animation (matplotlib,
CPU; a step is `plotting.animation` of 4 frames). A step is one stepper step (or one recording time's
measurements), with a host sync at its end."""

import mfattn  # noqa: F401  first: the thread policy

import math

import torch

from mfattn.analysis.transport import lipschitz_discrepancy, lipschitz_means, lipschitz_parts, wasserstein
from mfattn.flows.dynamics import initial_measure
from mfattn.flows.integrate import as_profile, make_stepper
from mfattn.flows.seeds import stream
from mfattn.models.tasks import make_task

from stepkit import flow_step  # tools/steps/stepkit.py

LAWS = ("ball", "gauss")  # the chaos cell runs the experiment once per initial law
FRAMES_PER_STEP = 4  # frames of the animation drawn in one timed step
N_SHOW_HEADS = 128  # the clouds/animation cells' draw(128, "heads", 0)
N_SHOW_REF = 4096  # the animation's reference: min(n_ref, 4096) atoms


def _R(p):
    return round(p["T"] / p["record_every"]) + 1


def _steps(T, h):
    return round(T / h)


def _step_show(p):
    every = p["T"] / 32
    return every / max(1, math.ceil(every / p["ref_step"] - 1e-9))


def _setup(p, device):
    task = make_task(p["task"], n=p["n_data"], seed=p["seed"], device=device)
    return task.model, task.data


def _draw(model, p, n, *name, law="gauss"):
    return initial_measure(model, n, scale=p["init_scale"], generator=stream(p["seed"], ("rho_0", *name)), law=law)


def _tests(model, p):
    g = stream(p["seed"], "test functions")
    D = torch.randn(64, model.d_omega, generator=g, dtype=torch.float64).to(model.device)
    C = (p["init_scale"] * torch.randn(64, model.d_omega, generator=g, dtype=torch.float64)).to(model.device)
    return D, C


def _reference_step(p, device, n, h):
    """One RK4 step of reference_flow at n particles on the whole dataset, as integrate() does it with
    keep_stages and dissipation (stepkit.flow_step), the whole population cloned (the recording)."""
    def make():
        model, data = _setup(p, device)
        heads, weights = model.check_measure(_draw(model, p, n, "reference", 1), None)
        return flow_step(model, data.X, data.Y, heads, weights, h, copy=True)
    return make


def _descent_step(p, device, N, eps, batch):
    """One step of sgd(): gd on the whole dataset (batch None) or sgd on `batch` sequences drawn on the
    CPU and moved to the device; one model.evaluate at the N heads."""
    def make():
        model, data = _setup(p, device)
        X, Y = data.X, data.Y
        heads, weights = model.check_measure(_draw(model, p, N, "heads", 0), None)
        stepper = make_stepper("gd" if batch is None else "sgd")
        prof = as_profile(1.0)
        gen = stream(p["seed"], "batches")

        def step():
            if batch is None:
                Xs, Ys = X, Y
            else:
                idx = torch.randint(data.n, (batch,), generator=gen).to(X.device)
                Xs, Ys = X[idx], Y[idx]
            grad = lambda s, pts: model.evaluate(Xs, Ys, pts, weights, risk=False)[2]  # noqa: E731
            w = stepper.step(heads, 0.0, eps, prof, grad, {})
            float(w[0, 0])
        return step
    return make


def _characteristic_step(p, device, N, h):
    """One RK4 step of Run.characteristics for N tagged points: four model.grad_at at the reference's
    stored stage residuals (here the residuals of a draw of N heads: same shape (n, L, d_x))."""
    def make():
        model, data = _setup(p, device)
        X, Y = data.X, data.Y
        h0 = model.check_heads(_draw(model, p, N, "heads", 0), "omega0")
        _, weights = model.check_measure(h0, None)
        G = model.evaluate(X, Y, h0, weights)[1]
        res = torch.stack([G, G, G, G])
        stepper, prof = make_stepper("rk4"), as_profile(1.0)

        def step():
            w = stepper.step(h0, 0.0, h, prof, lambda s, pts: model.grad_at(X, res[s], pts), {})
            w.clone()
            float(w[0, 0])
        return step
    return make


def _chaos_record(p, device, N):
    """ChaosSetup.point's work at one recording time of an N-grid run: the run's risk (integrate's
    record), (24) of the run against reference 1's test means (ChaosSetup._reference_side, once per
    grid), the two halves of (24) of the run and of tags 2 against tags 1, and the risks of both tags."""
    def make():
        model, data = _setup(p, device)
        X, Y = data.X, data.Y
        D, C = _tests(model, p)
        run = _draw(model, p, N, "heads", 0)
        _, weights = model.check_measure(run, None)
        ta, tb = run + 0.01, run - 0.01
        means = lipschitz_means(_draw(model, p, p["n_ref"], "reference", 1), D, C)

        def step():
            float(model.risk_and_dissipation(X, Y, run, weights, dissipation=False)[0])
            lipschitz_discrepancy(run, means, D, C)
            lipschitz_parts(run, ta, D, C)
            lipschitz_parts(tb, ta, D, C)
            float(model.risk(data, ta)), float(model.risk(data, tb))
        return step
    return make


def _reference_side(p, device):
    """ChaosSetup._reference_side at one recording time: reference 1's lipschitz_means over its n_ref
    atoms, and the floor of (24), reference 2's population against those means."""
    def make():
        model, _ = _setup(p, device)
        D, C = _tests(model, p)
        pop_a = _draw(model, p, p["n_ref"], "reference", 1)
        pop_b = _draw(model, p, p["n_ref"], "reference", 2)

        def step():
            lipschitz_discrepancy(pop_b, lipschitz_means(pop_a, D, C), D, C)
        return step
    return make


def _eps_record(p, device, N):
    """chaos_errors' work at one recording time of an eps-grid run, with the run's own risk record:
    (24) of the run against the own reference's population and against the tags (the same N_eps atoms)."""
    def make():
        model, data = _setup(p, device)
        X, Y = data.X, data.Y
        D, C = _tests(model, p)
        run = _draw(model, p, N, "eps", 0)
        _, weights = model.check_measure(run, None)
        own = run + 0.01

        def step():
            float(model.risk_and_dissipation(X, Y, run, weights, dissipation=False)[0])
            lipschitz_discrepancy(run, own, D, C)
            lipschitz_discrepancy(run, own, D, C)
            (run - own).norm(dim=-1).max().item()
        return step
    return make


def _risk_record(p, device, N):
    """integrate()'s record of a run of N heads on the whole dataset: the risk, on the host."""
    def make():
        model, data = _setup(p, device)
        run = _draw(model, p, N, "heads", 0)
        _, weights = model.check_measure(run, None)
        return lambda: float(model.risk_and_dissipation(data.X, data.Y, run, weights, dissipation=False)[0])
    return make


def _wasserstein(p, device):
    """The clouds cell's W2 between the 128 GD heads and 4096 atoms of the reference (exact EMD)."""
    def make():
        model, _ = _setup(p, device)
        a = _draw(model, p, N_SHOW_HEADS, "heads", 0)
        b = _draw(model, p, min(p["n_ref"], N_SHOW_REF), "reference", 1)
        return lambda: wasserstein(a, b)
    return make


def _animation(p):
    """The clouds animation's rendering: the chapter's figure (1500 grey atoms, 128 tags, GD and SGD
    heads), FRAMES_PER_STEP frames through plotting.animation (to_jshtml). CPU only."""
    def make():
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from mfattn.companion import plotting

        g = torch.Generator().manual_seed(0)
        grey = [0.1 * (j + 1) * torch.randn(1500, 2, generator=g, dtype=torch.float64).numpy()
                for j in range(FRAMES_PER_STEP)]
        pts = [0.1 * (j + 1) * torch.randn(N_SHOW_HEADS, 2, generator=g, dtype=torch.float64).numpy()
               for j in range(FRAMES_PER_STEP)]

        def step():
            with matplotlib.rc_context(plotting.STYLE):
                fig, ax = plt.subplots(figsize=(plotting.COLUMN_WIDTH, 3.6))
                (cloud,) = ax.plot([], [], ".", ms=2, color="gray", alpha=0.3, label="reference population")
                (tag,) = ax.plot([], [], "o", ms=6, mfc="none", mec="k", mew=0.6, label="tagged characteristics")
                (gd,) = ax.plot([], [], "o", ms=3, color="C0", label="GD")
                (sg,) = ax.plot([], [], "x", ms=4, color="C1", label="SGD, batch 1")
                ax.set(xlim=(-1, 1), ylim=(-1, 1), xlabel="projection 1", ylabel="projection 2")
                fig.legend(loc="outside right center", markerscale=1.5)

                def draw(j):
                    cloud.set_data(*grey[j].T)
                    tag.set_data(*pts[j].T)
                    gd.set_data(*pts[j].T)
                    sg.set_data(*(pts[j] + 0.01).T)
                    ax.set_title(f"displacement at t = {j / 32:.3f}")
                plotting.animation(fig, draw, FRAMES_PER_STEP, interval=200, alt="clouds")
        return step
    return make


def inventory(p: dict, device) -> list[dict]:
    T, R, S = p["T"], _R(p), p["n_seeds"]
    K_ref = _steps(T, p["ref_step"])
    K_gd = _steps(T, p["eps_small"])
    n_laws = len(LAWS)
    out = [dict(what=f"chaos: reference flow RK4 step, n_ref={p['n_ref']} (2 laws x 2 references)",
                count=n_laws * 2 * K_ref, make=_reference_step(p, device, p["n_ref"], p["ref_step"])),
           dict(what=f"chaos: reference side of (24) at a record, n_ref={p['n_ref']} (2 laws, once per grid)",
                count=n_laws * R, make=_reference_side(p, device))]
    for N in p["N_grid"]:
        out += [
            dict(what=f"chaos: GD step, N={N} (2 laws x n_seeds)", count=n_laws * S * K_gd,
                 make=_descent_step(p, device, N, p["eps_small"], None)),
            dict(what=f"chaos: characteristic RK4 step, N={N} (2 laws x n_seeds x 2 refs)",
                 count=n_laws * S * 2 * K_ref, make=_characteristic_step(p, device, N, p["ref_step"])),
            dict(what=f"chaos: point's record (risk, (24) vs reference means, parts, tag risks), N={N}",
                 count=n_laws * S * R, make=_chaos_record(p, device, N)),
        ]
    Ne, Se = p["N_eps"], p["n_seeds_eps"]
    K_eps = sum(_steps(T, e) for e in p["eps_grid"])
    out += [
        dict(what=f"eps sweep: own reference RK4 step, N_eps={Ne}, step ref_step/2",
             count=Se * _steps(T, p["ref_step"] / 2), make=_reference_step(p, device, Ne, p["ref_step"] / 2)),
        dict(what=f"eps sweep: SGD batch-1 step, N_eps={Ne}", count=Se * K_eps,
             make=_descent_step(p, device, Ne, min(p["eps_grid"]), 1)),
        dict(what=f"eps sweep: GD step, N_eps={Ne}", count=Se * K_eps,
             make=_descent_step(p, device, Ne, min(p["eps_grid"]), None)),
        dict(what=f"eps sweep: record (risk, 2 x (24)), N_eps={Ne}", count=Se * len(p["eps_grid"]) * 2 * R,
             make=_eps_record(p, device, Ne)),
    ]
    Nh, n_show, h_show = N_SHOW_HEADS, min(p["n_ref"], N_SHOW_REF), _step_show(p)
    frames = round(T / (T / 32)) + 1
    out += [
        dict(what=f"clouds+animation: GD step, N={Nh} (2 runs)", count=2 * K_gd,
             make=_descent_step(p, device, Nh, p["eps_small"], None)),
        dict(what=f"clouds+animation: SGD batch-1 step, N={Nh} (2 runs)", count=2 * K_gd,
             make=_descent_step(p, device, Nh, p["eps_small"], 1)),
        dict(what=f"clouds+animation: risk record, N={Nh} (4 runs)", count=2 * R + 2 * frames,
             make=_risk_record(p, device, Nh)),
        dict(what=f"clouds+animation: characteristic RK4 step, N={Nh}", count=K_ref + _steps(T, h_show),
             make=_characteristic_step(p, device, Nh, p["ref_step"])),
        dict(what=f"animation: reference flow RK4 step, n={n_show}", count=_steps(T, h_show),
             make=_reference_step(p, device, n_show, h_show)),
        dict(what=f"clouds: exact W2, {Nh} vs {n_show} atoms", count=3, make=_wasserstein(p, device)),
        dict(what=f"animation: {FRAMES_PER_STEP} frames (matplotlib, CPU)", count=frames / FRAMES_PER_STEP,
             make=_animation(p)),
    ]
    return out
