"""Step inventory of chapter 09-real-text: gradient descent of the heads on English characters.

The chapter's time is the two propagation-of-chaos sweeps (`run_chaos` from the Gaussian and from the compact
rho_0: each two references of n_ref heads trained `steps` GD steps with their stage residuals and a
`tail_share` record, then N_grid x n_seeds runs of `steps` GD steps with two tagged characteristics each and,
for the Gaussian sweep, `measure`: about 85% of the ci run), then the comparison with
`torch.nn.MultiheadAttention` (Adam steps of `PractitionerAttention` and GD steps of the heads on n_cmp
windows) and the coordinate check. A GD step is one pass of `integrate`'s loop body (`model.evaluate` at the
heads on the whole training set, the stage residuals stacked for a reference); a record (every `record`
steps) is the kept heads' copy and the risk (`risk_and_dissipation(dissipation=False)`), plus `tail_share`
for a reference; a characteristic step is `model.grad_at` on a reference's stored residual, as
`Run.characteristics` does. The practitioner's step is one `torch.optim.Adam` step of the cross-entropy on the
comparison's windows; its record is the cross-entropy on its three sets.
"""
import mfattn  # noqa: F401  first: the thread policy

import math

import torch

from mfattn.analysis.scaling import coordinate_check, tail_share
from mfattn.analysis.static import iid_gap_coefficient
from mfattn.flows.dynamics import initial_measure, uniform_ball
from mfattn.flows.integrate import as_profile, integrate, make_stepper
from mfattn.flows.seeds import stream, stream_seed
from mfattn.models.baseline import PractitionerAttention
from mfattn.models.tasks import text_task

from stepkit import sync, uniform  # tools/steps/stepkit.py

ZETA = 0.5


def inventory(p: dict, device) -> list[dict]:
    """p: the chapter's parameter values for one profile (plus 'seed', 'device', 'profile'); device: a
    torch.device. Returns entries {"what", "count", "make"}: make() builds the inputs and returns a function
    of no argument that performs ONE step; count is how many such steps the chapter performs under p."""
    seed = p["seed"]
    h = p["step"]
    steps, record = p["steps"], p["record"]
    n_rec = steps // record + 1  # recordings of a run of the N-sweep (the start included)
    dims = dict(L=p["seq_len"], d_x=8, d_k=2, seed=seed, device=device)
    cache = {}

    def tasks():
        if "tasks" not in cache:
            Tk = text_task(n=p["n_data"], split="train", **dims)
            Th = text_task(n=p["n_heldout"], split="heldout", **dims)
            cache["tasks"] = (Tk, Th)
        return cache["tasks"]

    def draw(model, n, *name, law="gauss"):  # the chapter's draw()
        g = stream(seed, ("rho_0", *name))
        if law == "ball":
            R = p["init_scale"] * math.sqrt(model.d_omega + 2)
            return uniform_ball(n, model.d_omega, R, generator=g).to(device)
        return initial_measure(model, n, scale=p["init_scale"], generator=g)

    def gd_step(model, data, heads0, *, keep_stages=False):
        """One pass of integrate's loop body, stepper "gd", whole dataset, no dissipation recorded."""
        X, Y = data.X, data.Y
        w, prof, stepper = uniform(heads0), as_profile(ZETA), make_stepper("gd")
        st = {"heads": heads0.clone(), "k": 0}

        def step():
            stages = []

            def grad(s, pts):
                _, G, g, _ = model.evaluate(X, Y, pts, w, risk=False)
                if keep_stages:
                    stages.append(G)
                return g

            st["heads"] = stepper.step(st["heads"], st["k"] * h, h, prof, grad, {})
            if keep_stages:
                torch.stack(stages)
            st["k"] += 1
            sync(device)
        return step

    def record_step(model, data, heads, *, keep=None, tail_X=None):
        """One recording of integrate: the kept heads' copy, the risk, and the tail share of a reference."""
        w = uniform(heads)

        def step():
            heads[:keep].clone()
            float(model.risk_and_dissipation(data.X, data.Y, heads, w, dissipation=False)[0])
            if tail_X is not None:
                tail_share(model, tail_X, heads)
            sync(device)
        return step

    out = []

    # --- references: two sweeps (Gaussian, compact) x two references of n_ref heads, `steps` GD steps each
    # with the stage residuals kept; a record every `record` steps: risk and tail_share on X_tail
    def make_ref_step():
        Tk, _ = tasks()
        return gd_step(Tk.model, Tk.data, draw(Tk.model, p["n_ref"], "reference", 1), keep_stages=True)
    out.append({"what": f"reference GD step (stage residuals kept), n_ref={p['n_ref']}", "count": 2 * 2 * steps,
                "make": make_ref_step})

    def make_ref_record():
        Tk, _ = tasks()
        return record_step(Tk.model, Tk.data, draw(Tk.model, p["n_ref"], "reference", 1), keep=0,
                           tail_X=Tk.data.X[:16])
    out.append({"what": f"reference record: risk + tail_share, n_ref={p['n_ref']}", "count": 2 * 2 * n_rec,
                "make": make_ref_record})

    # the references' own measures: attention on X_attn (2 horizons x 2 references) and the risks R_ref
    def make_ref_measure():
        Tk, Th = tasks()
        W = draw(Tk.model, p["n_ref"], "reference", 1)

        def step():
            Tk.model.mean_attention(Th.data.X[:32], W)
            float(Tk.model.risk(Tk.data, W)), float(Tk.model.risk(Th.data, W))
            sync(device)
        return step
    out.append({"what": f"reference measures: mean_attention + train and held-out risk, n_ref={p['n_ref']}",
                "count": 2 * 2, "make": make_ref_measure})

    def make_iid():
        Tk, _ = tasks()
        W = draw(Tk.model, 1024, "iid")

        def step():
            iid_gap_coefficient(Tk.model, Tk.data, W)
            sync(device)
        return step
    out.append({"what": "risk gap: iid_gap_coefficient at 1024 heads", "count": 3, "make": make_iid})

    # --- the N-grid of both sweeps: per (N, draw) a run of `steps` GD steps with n_rec records and two
    # tagged characteristics; the Gaussian sweep's `measure`; the attention figure's two extra runs
    shown = (p["N_grid"][0], p["N_grid"][-1])
    for N in p["N_grid"]:
        fig = shown.count(N)

        def make_run(N=N):
            Tk, _ = tasks()
            return gd_step(Tk.model, Tk.data, draw(Tk.model, N, "heads", 0))
        out.append({"what": f"run GD step, N={N}", "count": (2 * p["n_seeds"] + fig) * steps, "make": make_run})

        def make_run_record(N=N):
            Tk, _ = tasks()
            return record_step(Tk.model, Tk.data, draw(Tk.model, N, "heads", 0))
        out.append({"what": f"run record (risk), N={N}", "count": (2 * p["n_seeds"] + fig) * n_rec,
                    "make": make_run_record})

        def make_char(N=N):
            Tk, _ = tasks()
            model, data = Tk.model, Tk.data
            ref = integrate(model, data, draw(model, 64, "reference", 1), stepper="gd", step=h, T=record * h,
                            record_every=record * h, zeta=ZETA, batch_size=None, keep=0, keep_stages=True,
                            progress=False)
            K = ref.stage_residuals.shape[0]
            stepper = make_stepper(ref.stepper, **ref.hyper)
            st = {"w": draw(model, N, "heads", 0), "k": 0}

            def step():
                res = ref.stage_residuals[st["k"] % K]
                st["w"] = stepper.step(st["w"], st["k"] * ref.step, ref.step, ref.zeta,
                                       lambda s, pts: model.grad_at(data.X, res[s], pts), {})
                if (st["k"] + 1) % record == 0:
                    st["w"].clone()
                st["k"] += 1
                sync(device)
            return step
        out.append({"what": f"characteristic step, N={N}", "count": 2 * 2 * p["n_seeds"] * steps, "make": make_char})

        def make_measure(N=N):
            Tk, Th = tasks()
            model, data, held = Tk.model, Tk.data, Th.data
            W = draw(model, N, "heads", 0)
            A = model.mean_attention(held.X[:32], draw(model, 64, "reference", 1))

            def step():
                float(W.norm(dim=-1).max())
                for _ in range(2):  # the two horizons
                    float(model.risk(data, W)), float(model.risk(held, W))
                    float((model.mean_attention(held.X[:32], W) - A).pow(2).mean().sqrt())
                sync(device)
            return step
        out.append({"what": f"measure (2 horizons: risks, attention), N={N}", "count": p["n_seeds"],
                    "make": make_measure})

    # --- coordinate check: per (N, draw) one coordinate_check in each parametrisation
    for N in p["N_coord"]:
        def make_coord(N=N):
            Tk, _ = tasks()
            W = draw(Tk.model, N, "coordinate", 0)

            def step():
                for param in ("mean-field", "standard"):
                    coordinate_check(Tk.model, Tk.data, W, step=h, steps=p["coord_steps"], parametrisation=param)
                sync(device)
            return step
        out.append({"what": f"coordinate_check, both parametrisations, N={N}", "count": p["n_seeds_coord"],
                    "make": make_coord})

    # --- comparison with torch.nn.MultiheadAttention: per (N, draw) cmp_steps Adam steps of the practitioner's
    # layer (a record every cmp_steps // 20 steps on three sets) and cmp_steps GD steps of N heads on the
    # comparison's windows (a risk record every cmp_steps // 20 steps, the held-out risk at the end)
    every = p["cmp_steps"] // 20
    n_pr_rec = 1 + sum(1 for k in range(1, p["cmp_steps"] + 1) if k % every == 0 or k == p["cmp_steps"])
    n_mf_rec = p["cmp_steps"] // every + 1

    def cmp_tasks():
        if "cmp" not in cache:
            Tc = text_task(n=p["n_cmp"], split="train", **dims)
            Tv = text_task(n=p["n_cmp"], split="train", **dict(dims, seed=stream_seed(seed, "validation")))
            cache["cmp"] = (Tc, Tv)
        return cache["cmp"]

    def ce(net, x, y):
        z = net(x)
        return torch.nn.functional.cross_entropy(z.reshape(-1, z.shape[-1]), y.reshape(-1))

    for N in p["N_cmp"]:
        def make_pr(N=N):
            Tk, _ = tasks()
            Tc, _ = cmp_tasks()
            net = PractitionerAttention(Tk.model.d_v, N, 2, generator=stream(seed, ("practitioner", N, 0))).to(device)
            x, y = Tc.tokens.to(device), Tc.data.Y.argmax(-1)
            opt = torch.optim.Adam(net.parameters(), lr=p["mha_lr"])

            def step():
                opt.zero_grad()
                ce(net, x, y).backward()
                opt.step()
                sync(device)
            return step
        out.append({"what": f"practitioner Adam step, N={N}", "count": p["n_seeds_cmp"] * p["cmp_steps"],
                    "make": make_pr})

        def make_pr_record(N=N):
            Tk, Th = tasks()
            Tc, Tv = cmp_tasks()
            net = PractitionerAttention(Tk.model.d_v, N, 2, generator=stream(seed, ("practitioner", N, 0))).to(device)
            sets = [(T.tokens.to(device), T.data.Y.argmax(-1)) for T in (Tc, Th, Tv)]

            def step():
                with torch.no_grad():
                    for x, y in sets:
                        float(ce(net, x, y))
            return step
        out.append({"what": f"practitioner record (3 sets), N={N}", "count": p["n_seeds_cmp"] * n_pr_rec,
                    "make": make_pr_record})

        def make_mf(N=N):
            Tk, _ = tasks()
            Tc, _ = cmp_tasks()
            return gd_step(Tk.model, Tc.data, draw(Tk.model, N, "compare", 0))
        out.append({"what": f"comparison GD step on n_cmp windows, N={N}", "count": p["n_seeds_cmp"] * p["cmp_steps"],
                    "make": make_mf})

        def make_mf_record(N=N):
            Tk, Th = tasks()
            Tc, _ = cmp_tasks()
            W = draw(Tk.model, N, "compare", 0)
            rec = record_step(Tk.model, Tc.data, W, keep=0)

            def step():  # the records of one run on n_cmp windows, and its held-out risk at the end
                for _ in range(n_mf_rec):
                    rec()
                float(Tk.model.risk(Th.data, W))
                sync(device)
            return step
        out.append({"what": f"comparison records of one run ({n_mf_rec} risks + held-out risk), N={N}",
                    "count": p["n_seeds_cmp"], "make": make_mf_record})
    return out
