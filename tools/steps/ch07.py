"""Step inventory of chapter 07-two-layer-baseline: the chapter's time is the propagation-of-chaos
experiment of both models, heads (the teacher task, n_seq sequences) and neurons (`TwoLayerModel`, n_reg
samples), through `mfattn.companion.sweep.run_chaos` -> `ChaosSetup.point`. Per model: two references
(`reference_flow`, rk4 at n_ref_chaos particles, law "ball", whole population recorded, stage residuals
kept); per run of the N-grid (len(N_grid) x n_seeds): full-batch GD of N particles (`integrate` with the
gd stepper, T / eps steps, one `model.evaluate` each), the two tagged characteristics
(`Run.characteristics`: T / ref_step RK4 steps each, four `model.grad_at` on the stored residuals) and,
at each of the R = T / record_every + 1 records, the record's risk, (24) against the reference
population's test means (`lipschitz_discrepancy`), the two `lipschitz_parts` and the risks of both
characteristics; the reference side of (24), reference 1's `lipschitz_means` and the floor (population 2
against 1), once per pair of references and record. Besides (the static section): one reference flow per
model at n_ref (rk4) and four constructions (`iid_construction` over N_static with n_draws draws,
`iid_gap_coefficient`, Phi's spread; a step is the whole construction of one (model, rho), count 1)."""

import mfattn  # noqa: F401  first: the thread policy

import torch

from mfattn.analysis.static import iid_construction, iid_gap_coefficient
from mfattn.analysis.transport import lipschitz_discrepancy, lipschitz_means, lipschitz_parts
from mfattn.flows.dynamics import initial_measure
from mfattn.flows.integrate import as_profile, make_stepper
from mfattn.flows.seeds import stream
from mfattn.models.tasks import make_task
from mfattn.models.twolayer import teacher_regression

from stepkit import flow_step  # tools/steps/stepkit.py

KINDS = ("heads", "neurons")
N_TESTS = 64  # the chapter's test family of (24): 64 directions and 64 centres


def _model(kind, p, device):
    if kind == "heads":
        task = make_task("teacher", n=p["n_seq"], seed=p["seed"], device=device)
        return task.model, task.data
    model, data, _ = teacher_regression(p["d"], p["n_reg"], m_teacher=4, activation="tanh",
                                        generator=stream(p["seed"], "regression teacher"), device=device)
    return model, data


def _draw(model, p, n, law, *name):
    return initial_measure(model, n, scale=p["init_scale"], law=law, generator=stream(p["seed"], ("rho_0",) + name))


def _rk4_flow(kind, p, device, n, law):
    """One RK4 step of `reference_flow` at n particles as `integrate` takes it (stepkit.flow_step: four
    `model.evaluate` passes, the first one's risk and dissipation synced to the host, the stage residuals
    stacked)."""
    def make():
        model, data = _model(kind, p, device)
        heads, weights = model.check_measure(_draw(model, p, n, law, kind, "ref"), None)
        return flow_step(model, data.X, data.Y, heads, weights, p["ref_step"])
    return make


def _gd(kind, p, device, N):
    """One full-batch GD step of N particles (`integrate`, stepper gd): one `model.evaluate`."""
    def make():
        model, data = _model(kind, p, device)
        heads, weights = model.check_measure(_draw(model, p, N, "ball", kind, "chaos", N), None)
        X, Y = data.X, data.Y
        stepper, prof = make_stepper("gd"), as_profile(1.0)

        def step():
            grad = lambda s, pts: model.evaluate(X, Y, pts, weights, risk=False)[2]  # noqa: E731
            w = stepper.step(heads, 0.0, p["eps"], prof, grad, {})
            float(w[0, 0])
        return step
    return make


def _characteristic(kind, p, device, N):
    """One step of `Run.characteristics` for N tagged points: an RK4 step whose four stages are
    `model.grad_at` on a stored residual."""
    def make():
        model, data = _model(kind, p, device)
        pop, wp = model.check_measure(_draw(model, p, 256, "ball", kind, "residual"), None)
        G = model.evaluate(data.X, data.Y, pop, wp)[1]
        res = torch.stack([G] * 4)
        w0 = model.check_heads(_draw(model, p, N, "ball", kind, "tags", N))
        stepper, prof = make_stepper("rk4"), as_profile(1.0)

        def step():
            w = stepper.step(w0, 0.0, p["ref_step"], prof, lambda s, pts: model.grad_at(data.X, res[s], pts), {})
            float(w[0, 0])
        return step
    return make


def _tests(model, kind, p):
    """The chapter's test family of (24): N_TESTS directions and N_TESTS centres."""
    D = initial_measure(model, N_TESTS, scale=1.0, generator=stream(p["seed"], ("test directions", kind)))
    return D, _draw(model, p, N_TESTS, "gauss", "test centres", kind)


def _record(kind, p, device, N):
    """What `ChaosSetup.point` (and `integrate`'s recording) measures at one recording time of a run of N:
    the run's risk, (24) against reference 1's test means (`ChaosSetup._reference_side`, computed once per
    grid), the two `lipschitz_parts` (run and characteristics 2 against characteristics 1) and the risks
    of both characteristics."""
    def make():
        model, data = _model(kind, p, device)
        run = _draw(model, p, N, "ball", kind, "run", N)
        ta, tb = (_draw(model, p, N, "ball", kind, "tag", N, w) for w in (1, 2))
        weights = model.check_measure(run, None)[1]
        D, C = _tests(model, kind, p)
        means = lipschitz_means(_draw(model, p, p["n_ref_chaos"], "ball", kind, "pop", 1), D, C)

        def step():
            float(model.risk_and_dissipation(data.X, data.Y, run, weights, dissipation=False)[0])
            lipschitz_discrepancy(run, means, D, C)
            lipschitz_parts(run, ta, D, C), lipschitz_parts(tb, ta, D, C)
            float(model.risk(data, ta)), float(model.risk(data, tb))
        return step
    return make


def _reference_side(kind, p, device):
    """The reference side of (24) at one recording time (`ChaosSetup._reference_side`): reference 1's
    `lipschitz_means` and the floor, population 2 against those means."""
    def make():
        model, _ = _model(kind, p, device)
        pa, pb = (_draw(model, p, p["n_ref_chaos"], "ball", kind, "pop", w) for w in (1, 2))
        D, C = _tests(model, kind, p)

        def step():
            lipschitz_discrepancy(pb, lipschitz_means(pa, D, C), D, C)
        return step
    return make


def _construction(kind, p, device, m):
    """The chapter's `construction` of one (model, rho) with m atoms: `iid_construction` over N_static
    with n_draws draws, `iid_gap_coefficient`, and the spread of Phi on the atoms."""
    def make():
        model, data = _model(kind, p, device)
        atoms = _draw(model, p, m, "gauss", kind, "atoms", m)

        def step():
            iid_construction(model, data, atoms, None, p["N_static"], n_draws=p["n_draws"],
                             generator=stream(p["seed"], ("construction", kind, m)), progress=False)
            iid_gap_coefficient(model, data, atoms)
            float(model.first_variation(data, atoms, atoms).std())
        return step
    return make


def inventory(p: dict, device) -> list[dict]:
    n_gd = round(p["T"] / p["eps"])  # GD steps of a run
    n_rk = round(p["T"] / p["ref_step"])  # RK4 steps of a reference flow, and of a characteristic
    R = round(p["T"] / p["record_every"]) + 1  # recording times
    S = p["n_seeds"]
    out = []
    for kind in KINDS:
        out += [
            dict(what=f"{kind}: RK4 step of the static reference, n_ref = {p['n_ref']}", count=n_rk,
                 make=_rk4_flow(kind, p, device, p["n_ref"], "gauss")),
            dict(what=f"{kind}: construction at rho_0, M_atoms = {p['M_atoms']}", count=1,
                 make=_construction(kind, p, device, p["M_atoms"])),
            dict(what=f"{kind}: construction at rho_T, n_ref = {p['n_ref']}", count=1,
                 make=_construction(kind, p, device, p["n_ref"])),
            dict(what=f"{kind}: RK4 step of a chaos reference, n_ref_chaos = {p['n_ref_chaos']}", count=2 * n_rk,
                 make=_rk4_flow(kind, p, device, p["n_ref_chaos"], "ball")),
            dict(what=f"{kind}: reference side of (24) at a record (once per grid), n_ref_chaos = {p['n_ref_chaos']}",
                 count=R, make=_reference_side(kind, p, device)),
        ]
        for N in p["N_grid"]:
            out += [
                dict(what=f"{kind}: GD step, N = {N}", count=S * n_gd, make=_gd(kind, p, device, N)),
                dict(what=f"{kind}: characteristic RK4 step, N = {N}", count=2 * S * n_rk,
                     make=_characteristic(kind, p, device, N)),
                dict(what=f"{kind}: a record's measurements, N = {N}", count=S * R, make=_record(kind, p, device, N)),
            ]
    return out
