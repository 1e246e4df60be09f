"""Step inventory of chapter 08-optimizers: heavy ball, kinetic and Adam steppers on the teacher task.

The chapter's time is the propagation-of-chaos cell (`run_chaos` for four optimizers, GD, kinetic heavy ball,
Adam at two eps, each over the horizon and after the first step; about two thirds of the ci run), then the
Adam crossover (`adam_point` over N_adam x draws, the reference population's gradients and the (8.7) root
and curve), the energy balance (kinetic runs over eta_grid) and the heavy-ball clock (`heavy_ball_clock`:
two RK4 flows and heavy-ball runs over lr_grid). A step is one pass of `integrate`'s loop body on the whole
dataset: `model.evaluate` at the population's heads (with the dissipation's two syncs the chapter's
`dissipation=True` records at every step), the stepper's update, and the kept heads' copy; a chaos step adds
the two tagged-characteristic steps (`model.grad_at` on a reference's stored residual, the same stepper).
Where one optimizer's step stands for all four, the step runs the four in turn.
"""
import mfattn  # noqa: F401  first: the thread policy

import torch

from mfattn.analysis.chaos import ChaosSetup
from mfattn.flows.dynamics import initial_measure
from mfattn.flows.integrate import Adam, HeavyBall, Kinetic, as_profile, integrate, make_stepper
from mfattn.flows.optimizers import adam_crossover, adam_on_risk, adam_speed, empirical_grad_phi
from mfattn.flows.seeds import stream
from mfattn.models.tasks import make_task

from stepkit import sync, uniform  # tools/steps/stepkit.py

ZETA = 0.5
RECORDS, SUBSTEPS = 8, 16  # heavy_ball_clock's defaults (the chapter keeps them)


def _runner(model, data, heads0, stepper, h, *, reuse=True, keep=None, keep_stages=False):
    """One pass of `integrate`'s loop body per call (whole dataset, a recording every step): the stepper's
    gradient passes through `model.evaluate`, the risk and dissipation read off the first pass (`reuse`,
    the chapter's `dissipation=True`), the stage residuals stacked (`keep_stages`), the kept heads copied."""
    X, Y = data.X, data.Y
    w = uniform(heads0)
    prof = as_profile(ZETA)
    st = {"heads": heads0.clone(), "state": stepper.init_state(heads0), "k": 0}

    def step():
        k, stages = st["k"], []

        def grad(s, pts):
            recording = s == 0 and reuse  # the risk only where it is recorded, as the integrator does
            r, G, g, _ = model.evaluate(X, Y, pts, w, risk=recording)
            if recording:
                float(r), float(model.weighted_sq_norm(w, g))
            if keep_stages:
                stages.append(G)
            return g

        heads = stepper.step(st["heads"], k * h, h, prof, grad, st["state"])
        if keep_stages:
            torch.stack(stages)
        heads[:keep].clone()
        st["heads"], st["k"] = heads, k + 1

    return step


def _tagger(model, data, ref, pts0):
    """One step of `Run.characteristics` per call: the points moved by the reference's stored residual."""
    stepper = make_stepper(ref.stepper, **ref.hyper)
    K = ref.stage_residuals.shape[0]
    st = {"w": pts0.clone(), "state": stepper.init_state(pts0), "k": 0}

    def step():
        k = st["k"]
        res = ref.stage_residuals[k % K]
        w = stepper.step(st["w"], k * ref.step, ref.step, ref.zeta,
                         lambda s, pts: model.grad_at(data.X, res[s], pts), st["state"])
        w.clone()
        st["w"], st["k"] = w, k + 1

    return step


def inventory(p: dict, device) -> list[dict]:
    """p: the chapter's parameter values for one profile (plus 'seed', 'device', 'profile'); device: a
    torch.device. Returns entries {"what", "count", "make"}: make() builds the inputs and returns a function
    of no argument that performs ONE step; count is how many such steps the chapter performs under p."""
    seed = p["seed"]
    cache = {}

    def task():
        if "task" not in cache:
            Tk = make_task("teacher", n=p["n_data"], seed=seed, device=device)
            cache["task"] = (Tk.model, Tk.data)
        return cache["task"]

    def draw(model, n, *name, law="gauss"):
        return initial_measure(model, n, scale=p["init_scale"], generator=stream(seed, ("rho_0", *name)), law=law)

    def opts():  # the chapter's OPT: name -> (stepper, step)
        return {"GD": (make_stepper("gd"), p["gd_step"]),
                "heavy ball": (Kinetic(friction=p["friction"]), p["kin_step"]),
                "Adam": (Adam(eps=p["eps_small"]), p["adam_lr"]),
                "Adam, large eps": (Adam(eps=p["eps_large"]), p["adam_lr"])}

    def train(model, data, h0, opt, steps, **kw):  # the chapter's train()
        stepper, h = opt
        return integrate(model, data, h0, stepper=stepper, step=h, T=steps * h, record_every=h, zeta=ZETA,
                         batch_size=None, dissipation=True, progress=False, **kw)

    def small_ref(model, data, opt, steps=2):  # a reference's stored residuals: (K, S, n, L, d_x), any size
        return train(model, data, draw(model, 64, "chaos", "reference", 1, law="ball"), opt, steps,
                     keep=0, keep_stages=True)

    out = []
    steps = p["steps"]

    # --- energy balance (8.4): n_seeds x eta_grid kinetic runs of N_energy heads, T_energy / eta steps each,
    # recorded every step, plus the final risk_and_dissipation (counted as one more step)
    def make_energy():
        model, data = task()
        return _runner(model, data, draw(model, p["N_energy"], "energy", 0),
                       Kinetic(friction=p["friction"]), p["eta_grid"][0])
    n_energy = p["n_seeds"] * sum(round(p["T_energy"] / eta) + 1 for eta in p["eta_grid"])
    out.append({"what": f"energy balance: kinetic step, N_energy={p['N_energy']}", "count": n_energy,
                "make": make_energy})

    # --- heavy-ball clock (8.5): per draw two RK4 reference flows of RECORDS * SUBSTEPS steps (T_flow and
    # T_flow (1 - mu)), heavy-ball runs of T_flow (1 - mu) / lr steps, and RECORDS + 1 risk records per run
    def make_rk4():
        model, data = task()
        h0 = draw(model, p["N_energy"], "clock", 0)
        return _runner(model, data, h0, make_stepper("rk4"), p["T_flow"] / (RECORDS * SUBSTEPS), keep=0)
    out.append({"what": f"heavy-ball clock: RK4 flow step (4 evaluates), N={p['N_energy']}",
                "count": p["n_seeds"] * 2 * RECORDS * SUBSTEPS, "make": make_rk4})
    T_hb = p["T_flow"] * (1 - p["momentum"])

    def make_hb():
        model, data = task()
        return _runner(model, data, draw(model, p["N_energy"], "clock", 0), HeavyBall(momentum=p["momentum"]),
                       p["lr_grid"][0], reuse=False)
    out.append({"what": f"heavy-ball clock: heavy-ball step, N={p['N_energy']}",
                "count": p["n_seeds"] * sum(round(T_hb / a) for a in p["lr_grid"]), "make": make_hb})

    def make_hb_risk():
        model, data = task()
        h0 = draw(model, p["N_energy"], "clock", 0)
        w = uniform(h0)

        def step():
            float(model.risk_and_dissipation(data.X, data.Y, h0, w, dissipation=False)[0])
        return step
    out.append({"what": f"heavy-ball clock: risk record, N={p['N_energy']}",
                "count": p["n_seeds"] * len(p["lr_grid"]) * (RECORDS + 1), "make": make_hb_risk})

    # --- propagation of chaos, horizon: per optimizer two references of n_ref heads, `steps` steps each
    # (stage residuals kept, + the final risk_and_dissipation counted as one more step)
    def make_ref():
        model, data = task()
        h0 = draw(model, p["n_ref"], "chaos", "reference", 1, law="ball")
        fns = [_runner(model, data, h0, st, h, keep=0, keep_stages=True) for st, h in opts().values()]

        def step():
            for f in fns:
                f()
            sync(device)
        return step
    out.append({"what": f"chaos references: one step of each of 4 optimizers, n_ref={p['n_ref']}",
                "count": 2 * (steps + 1), "make": make_ref})

    # --- first step: per optimizer two references of n_first heads, one step each: the whole
    # ChaosSetup.reference (draw, one step, final risk) is the step
    def make_first_ref():
        model, data = task()
        setups = [ChaosSetup(model, data, risks=False,
                             draw=lambda n, *name: draw(model, n, "chaos", *name, law="ball"),
                             train=lambda h0, opt=opt, **kw: train(model, data, h0, opt, 1, **kw))
                  for opt in opts().values()]

        def step():
            for s in setups:
                s.reference(1, p["n_first"])
            sync(device)
        return step
    out.append({"what": f"first-step references: ChaosSetup.reference of 4 optimizers, n_first={p['n_first']}",
                "count": 2, "make": make_first_ref})

    # --- the N-grid over the horizon: per (N, draw) and optimizer, `steps` steps of N heads and two
    # tagged-characteristic steps each (the run's final risk, 1/(3 steps) of a step, left out)
    for N in p["N_grid"]:
        def make_point(N=N):
            model, data = task()
            h0 = draw(model, N, "chaos", "heads", 0, law="ball")
            fns = []
            for opt in opts().values():
                ref = small_ref(model, data, opt)
                fns += [_runner(model, data, h0, opt[0], opt[1]), _tagger(model, data, ref, h0),
                        _tagger(model, data, ref, h0)]

            def step():
                for f in fns:
                    f()
                sync(device)
            return step
        out.append({"what": f"chaos run step, N={N}: 4 optimizers x (step + 2 characteristic steps)",
                    "count": p["n_chaos"] * steps, "make": make_point})

    # --- the N-grid after the first step: the whole ChaosSetup.point (a one-step run and its two one-step
    # characteristics) of each optimizer is the step
    for N in p["N_grid"]:
        def make_first(N=N):
            model, data = task()
            pairs = []
            for opt in opts().values():
                setup = ChaosSetup(model, data, risks=False,
                                   draw=lambda n, *name: draw(model, n, "chaos", *name, law="ball"),
                                   train=lambda h0, opt=opt, **kw: train(model, data, h0, opt, 1, **kw))
                pairs.append((setup, [small_ref(model, data, opt, steps=1) for _ in range(2)]))

            def step():
                for setup, refs in pairs:
                    setup.point(refs, N, 0)
                sync(device)
            return step
        out.append({"what": f"first-step point, N={N}: ChaosSetup.point of 4 optimizers",
                    "count": p["n_chaos"], "make": make_first})

    # --- Adam crossover (8.7): grad Phi of two n_ref populations, one mean-field Adam run of n_ref heads
    # (steps + final risk), the root x* (twice) and the curve of (8.7) on 200 points (twice, in the figure)
    def make_grad():
        model, data = task()
        h0 = draw(model, p["n_ref"], "crossover")

        def step():
            empirical_grad_phi(model, data, h0)
            sync(device)
        return step
    out.append({"what": f"crossover: empirical_grad_phi, n_ref={p['n_ref']}", "count": 2, "make": make_grad})

    def make_adam_ref():
        model, data = task()
        return _runner(model, data, draw(model, p["n_ref"], "reference", 1), Adam(eps=p["eps_small"]),
                       p["adam_lr"], keep=0)
    out.append({"what": f"crossover: mean-field Adam step, n_ref={p['n_ref']}", "count": steps + 1,
                "make": make_adam_ref})

    # The root and the curve are numpy work on the n_ref x d_omega gradient coordinates, linear in their
    # number: they are timed on at most 16384 heads' coordinates and counted n_ref / 16384 times as often.
    sub = min(p["n_ref"], 16384)
    scale = p["n_ref"] / sub

    def make_root():
        model, data = task()
        g = empirical_grad_phi(model, data, draw(model, sub, "crossover"))
        return lambda: adam_crossover(g)
    out.append({"what": f"crossover: adam_crossover root of (8.7), {sub} heads' gradient (x n_ref/{sub})",
                "count": 2 * scale, "make": make_root})

    def make_curve():
        import numpy as np
        model, data = task()
        g = empirical_grad_phi(model, data, draw(model, sub, "crossover"))
        NA = p["N_adam"]
        xx = np.geomspace(NA[0] * min(p["risk_eps"]), NA[-1] * max(p["risk_eps"]), 200)
        return lambda: adam_speed(g, xx)
    out.append({"what": f"crossover figure: adam_speed (8.7) on 200 points, {sub} heads (x n_ref/{sub})",
                "count": 2 * scale, "make": make_curve})

    # --- adam_point: per (N, draw) three Adam runs of `steps` steps (mean-field, and on the risk's gradient
    # at each risk_eps), each + its final risk (counted as one more step)
    for N in p["N_adam"]:
        def make_adam(N=N):
            model, data = task()
            h0 = draw(model, N, "adam", 0)
            steppers = [Adam(eps=p["eps_small"])] + [adam_on_risk(N, eps=e, zeta=ZETA) for e in p["risk_eps"]]
            fns = [_runner(model, data, h0, st, p["adam_lr"]) for st in steppers]

            def step():
                for f in fns:
                    f()
                sync(device)
            return step
        out.append({"what": f"adam_point step, N={N}: {1 + len(p['risk_eps'])} Adam runs",
                    "count": p["n_seeds_adam"] * (steps + 1), "make": make_adam})
    return out
