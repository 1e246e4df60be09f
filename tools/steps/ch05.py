"""Step inventory of chapter 05-stability: the chapter's time is the perturbed runs of the reference flow
(21) (`mfattn.companion.sweep.run_perturbations` -> `mfattn.analysis.stability.perturbation_run` ->
`reference_flow`, rk4 on the whole dataset) from Dirac masses of 1 head (runs from 0, translations, saddle),
2 heads (split) and n_cloud heads (cloud), and what `perturbation_run` measures on them afterwards: the
ratio kappa of (45) at every record (`monotonicity_ratio`, one grad pass) and, for the long runs with
orbit=True, the distance to the orbit of every recorded head (`orbit_distance`, 40 batched
Levenberg-Marquardt iterations over R x N heads x 3 starts; one call per run). A flow step is one RK4
step (four `model.evaluate` passes) at N heads. Besides: the two L-BFGS minimisations (a step is one start
of `single_head_minimum` / `uniform_attention_point`; count n_starts), `zero_saddle`, `analyse_dirac`
(three points), `lifted_spectrum`, and Remark 7.3's `lifted_monotonicity` (a step is one pair; count
n_pairs)."""

import mfattn  # noqa: F401  first: the thread policy

import torch

from mfattn.analysis import stability as st
from mfattn.flows.integrate import as_profile, make_stepper
from mfattn.flows.seeds import stream
from mfattn.models.tasks import make_task

STEP_ESCAPE, RECORD_ESCAPE = 0.05, 0.5  # the escape from 0: the chapter's fixed step and recording interval
RATE_STEPS = 6  # Perturbation.for_rate: six steps of rate_dt, each recorded


def _setup(p, device):
    task = make_task("teacher", n=p["n_data"], seed=p["seed"], device=device)
    model = task.model
    g = torch.Generator().manual_seed(p["seed"])
    omega = (0.5 * torch.randn(model.d_omega, generator=g, dtype=torch.float64)).to(model.device, model.dtype)
    return task, model, task.data, omega, g


def _heads(model, omega, n, g):
    return omega + 0.05 * torch.randn(n, model.d_omega, generator=g, dtype=torch.float64).to(model.device, model.dtype)


def _rk4(p, device, n):
    """One RK4 step of reference_flow at n heads, as integrate() takes it (four model.evaluate passes), with
    a recording's host syncs (risk and dissipation from the first pass)."""
    def make():
        _, model, data, omega, g = _setup(p, device)
        heads, weights = model.check_measure(_heads(model, omega, n, g), None)
        X, Y = data.X, data.Y
        stepper, prof = make_stepper("rk4"), as_profile(1.0)

        def grad(s, points):
            recording = s == 0  # the risk only where it is recorded, as the integrator does
            r, _, gr, _ = model.evaluate(X, Y, points, weights, risk=recording)
            if recording:
                float(r), float(model.weighted_sq_norm(weights, gr))
            return gr

        def step():
            w = stepper.step(heads, 0.0, p["step_long"], prof, grad, {})
            float(w[0, 0])
        return step
    return make


def _kappa(p, device, n):
    def make():
        _, model, data, omega, g = _setup(p, device)
        heads = _heads(model, omega, n, g)
        return lambda: st.monotonicity_ratio(model, data, heads, omega)
    return make


def _orbit(p, device, n):
    def make():
        _, model, data, omega, g = _setup(p, device)
        heads = _heads(model, omega, n, g)
        return lambda: float(st.orbit_distance(model, omega, heads).sum())
    return make


def _minimiser(p, device, find, name):
    def make():
        _, model, data, _, _ = _setup(p, device)
        return lambda: find(model, data, generator=stream(p["seed"], (name,)), n_starts=1)
    return make


def _zero_saddle(p, device):
    def make():
        _, model, data, _, _ = _setup(p, device)
        return lambda: st.zero_saddle(model, data, generators=[stream(p["seed"], ("random measures", k))
                                                               for k in range(8)])
    return make


def _analyse(p, device):
    def make():
        _, model, data, omega, _ = _setup(p, device)
        return lambda: st.analyse_dirac(model, data, omega)
    return make


def _lifted(p, device):
    def make():
        _, model, data, omega, _ = _setup(p, device)
        D = st.analyse_dirac(model, data, omega)
        return lambda: st.lifted_spectrum(model, data, D)
    return make


def _pair(p, device):
    def make():
        _, model, data, omega, g = _setup(p, device)
        a, b = _heads(model, omega, 1, g), _heads(model, omega, 1, g)
        return lambda: float(st.lifted_monotonicity(model, data, a, b)[0])
    return make


def inventory(p: dict, device) -> list[dict]:
    n_long = round(p["T_long"] / p["step_long"])  # steps of a long run
    R_long = round(p["T_long"] / p["record_long"]) + 1  # its records
    n_escape, R_escape = round(p["T_escape"] / STEP_ESCAPE), round(p["T_escape"] / RECORD_ESCAPE) + 1
    n_saddle, R_saddle = round(p["T_saddle"] / p["step_long"]), round(p["T_saddle"] / p["record_long"]) + 1
    R_rate = RATE_STEPS + 1
    # one-head runs: zero-rate, zero-escape, 3 translations, translation-rate, 2 saddle-rate, saddle-long
    steps_1 = RATE_STEPS + n_escape + 3 * n_long + RATE_STEPS + 2 * RATE_STEPS + n_saddle
    records_1 = R_rate + R_escape + 3 * R_long + R_rate + 2 * R_rate + R_saddle
    nc = p["n_cloud"]
    return [
        dict(what="zero_saddle (closed form, autograd H_tr(0), 8 random measures)", count=1,
             make=_zero_saddle(p, device)),
        dict(what="single_head_minimum: one L-BFGS start + 8 Newton steps", count=p["n_starts"],
             make=_minimiser(p, device, st.single_head_minimum, "single-head-minimum")),
        dict(what="uniform_attention_point: one L-BFGS start + 8 Newton steps", count=p["n_starts"],
             make=_minimiser(p, device, st.uniform_attention_point, "uniform-attention-point")),
        dict(what="analyse_dirac (H0, H_tr, orbit, spectra)", count=3, make=_analyse(p, device)),
        dict(what="RK4 step, N=1 (runs from 0, translations, rate runs, saddle)", count=steps_1,
             make=_rk4(p, device, 1)),
        dict(what="RK4 step, N=2 (split)", count=RATE_STEPS + n_long, make=_rk4(p, device, 2)),
        dict(what=f"RK4 step, N={nc} (cloud)", count=n_long, make=_rk4(p, device, nc)),
        dict(what="kappa of (45) at a record, N=1", count=records_1, make=_kappa(p, device, 1)),
        dict(what="kappa of (45) at a record, N=2", count=R_rate + R_long, make=_kappa(p, device, 2)),
        dict(what=f"kappa of (45) at a record, N={nc}", count=R_long, make=_kappa(p, device, nc)),
        dict(what=f"orbit_distance of a translation run ({R_long} heads)", count=3,
             make=_orbit(p, device, R_long)),
        dict(what=f"orbit_distance of the split run ({2 * R_long} heads)", count=1,
             make=_orbit(p, device, 2 * R_long)),
        dict(what=f"orbit_distance of the cloud run ({nc * R_long} heads)", count=1,
             make=_orbit(p, device, nc * R_long)),
        dict(what="lifted_spectrum (autograd Hessian of the N=2 lift)", count=1, make=_lifted(p, device)),
        dict(what="lifted_monotonicity, one pair of Dirac masses", count=p["n_pairs"], make=_pair(p, device)),
    ]
