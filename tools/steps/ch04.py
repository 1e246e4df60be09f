"""Step inventory of chapter 04-long-time: the chapter's time is Runge-Kutta steps of the reference flow
(21) of n_particles atoms on the whole dataset (`mfattn.flows.integrate.integrate` with the rk4 stepper,
as `flow_records` / `long_run` call it): the integrator-order study (order_T / h steps per h), the
profile collapse (two profiles x two steps), the long soft-label run (T_long / step_long steps, recorded
at every step) and the one-hot runs (T_onehot / step_onehot steps per task). A step is one RK4 step: four
`model.evaluate` passes at the atoms, with the recording's host syncs (risk, dissipation, support
radius). Besides: the Frank-Wolfe certificates (one `certificate_record` per kept measure), Remark 6.7's
inward products (one `inward_products` of n_sphere points per run), and the animation of the long run
(matplotlib, CPU only: a step is `plotting.flow_animation` of 4 frames; count = frames / 4)."""

import mfattn  # noqa: F401  first: the thread policy

import numpy as np
import torch

from mfattn.analysis.longtime import certificate_record, inward_products, support_radius
from mfattn.analysis.static import Ball
from mfattn.flows.dynamics import Constant, Decaying, initial_measure
from mfattn.flows.integrate import as_profile, make_stepper
from mfattn.flows.seeds import stream
from mfattn.models.tasks import make_task

FRAMES_PER_STEP = 4  # frames of the animation drawn in one timed step


def _task(name, p, device):
    return make_task(name, n=p["n_data"], seed=p["seed"], device=device)


def _atoms(task, p):
    # the chapter's draw(task, n): N(0, init_scale^2 I) atoms on the stream ("rho_0", task name)
    return initial_measure(task.model, p["n_particles"], scale=p["init_scale"],
                           generator=stream(p["seed"], ("rho_0", task.name)))


def _rk4(task_name, p, device, h, zeta, record):
    """One classical Runge-Kutta step of the characteristics (21) on the whole dataset, as integrate() does
    it inside reference_flow / long_run: four model.evaluate passes; with ``record`` the step's first pass
    gives the risk and dissipation (host syncs) and the support radius is recorded after the step."""
    def make():
        task = _task(task_name, p, device)
        model, X, Y = task.model, task.data.X, task.data.Y
        heads, weights = model.check_measure(_atoms(task, p), None)
        stepper, prof = make_stepper("rk4"), as_profile(zeta)

        def grad(s, points):
            recording = s == 0 and record  # the risk only where it is recorded, as the integrator does
            r, _, g, _ = model.evaluate(X, Y, points, weights, risk=recording)
            if recording:
                float(r), float(model.weighted_sq_norm(weights, g))
            return g

        def step():
            w = stepper.step(heads, 0.0, h, prof, grad, {})
            if record:
                support_radius(w)
            else:
                float(w[0, 0])  # the step's end on the host (a CUDA step is asynchronous)
        return step
    return make


def _certificate(p, device):
    def make():
        task = _task("teacher", p, device)
        heads = _atoms(task, p)
        ball = Ball(1.5 * support_radius(heads))
        return lambda: certificate_record(task.model, task.data, heads, ball, n_starts=p["n_starts"],
                                          generator=stream(p["seed"], ("certificate", 0)))
    return make


def _inward(task_name, p, device):
    def make():
        task = _task(task_name, p, device)
        heads = _atoms(task, p)
        ball = Ball(support_radius(heads))
        return lambda: inward_products(task.model, task.data, heads, None, ball, n_points=p["n_sphere"],
                                       generator=stream(p["seed"], ("inward products", task_name)))
    return make


def _frame_steps(p):
    """The animation's frames: long_run's n_frames=48 logarithmically spaced steps, with step 0, deduplicated."""
    n = round(p["T_long"] / p["step_long"])
    return sorted({0} | {int(v) for v in np.geomspace(1, n, 48).round()})


def _animation(p, device):
    def make():
        import matplotlib
        matplotlib.use("Agg")
        from mfattn.companion import plotting

        task = _task("teacher", p, device)
        atoms = _atoms(task, p).cpu()
        g = torch.Generator().manual_seed(0)
        frames = {a * p["step_long"]: atoms + 0.1 * k * torch.randn(atoms.shape, generator=g, dtype=atoms.dtype)
                  for k, a in enumerate(_frame_steps(p)[-FRAMES_PER_STEP:])}
        t = np.arange(round(p["T_long"] / p["step_long"]) + 1) * p["step_long"]
        curves = {r"$\mathcal{E}(\rho_t)-H$": 1 / (1 + t), r"$\mathcal{I}(\rho_t)$": 1 / (1 + t) ** 2}
        marks = task.teacher_heads.cpu().double()

        def step():
            with matplotlib.rc_context(plotting.STYLE):  # the chapter's style (setup -> plotting.use())
                plotting.flow_animation(frames, t, curves, marks=marks, mark_label="teacher's heads",
                                        interval=150, alt="atoms moving")
        return step
    return make


def _n_kept(p):
    T, h, n = p["T_long"], p["step_long"], p["n_certificates"]
    return len(np.unique(np.round(np.geomspace(T / 2 ** (n - 1), T, n) / h) * h))


def inventory(p: dict, device) -> list[dict]:
    z_dec = Decaying(1.0, 4.0, 0.5)
    m, h1 = p["collapse_m"], p["collapse_step"]
    T_const, T_dec = 8.0 * m, 8.0 * m + 4.0 * m ** 2
    finest = min(p["order_steps"])
    out = [
        dict(what=f"order study: RK4 step, N={p['n_particles']}, recorded every step (decaying zeta)",
             count=sum(round(p["order_T"] / h) for h in p["order_steps"]),
             make=_rk4("teacher", p, device, finest, z_dec, True)),
        dict(what=f"profile collapse: RK4 step, N={p['n_particles']}, 2 profiles x steps h, h/2",
             count=round(T_const / h1) + round(T_const / (h1 / 2)) + round(T_dec / h1) + round(T_dec / (h1 / 2)),
             make=_rk4("teacher", p, device, h1, Constant(1.0), False)),
        dict(what=f"long soft-label run: RK4 step, N={p['n_particles']}, recorded every step",
             count=round(p["T_long"] / p["step_long"]),
             make=_rk4("teacher", p, device, p["step_long"], 1.0, True)),
        dict(what=f"animation of the long run: {FRAMES_PER_STEP} frames (matplotlib, CPU)",
             count=len(_frame_steps(p)) / FRAMES_PER_STEP, make=_animation(p, device)),
        dict(what=f"Remark 6.7 inward products, {p['n_sphere']} points (teacher)", count=1,
             make=_inward("teacher", p, device)),
        dict(what=f"Frank-Wolfe certificate, n_starts={p['n_starts']} + N atoms, 200 iterations",
             count=_n_kept(p), make=_certificate(p, device)),
    ]
    for name in p["onehot_tasks"]:
        out.append(dict(what=f"one-hot long run ({name}): RK4 step, N={p['n_particles']}, recorded every step",
                        count=round(p["T_onehot"] / p["step_onehot"]),
                        make=_rk4(name, p, device, p["step_onehot"], 1.0, True)))
        out.append(dict(what=f"Remark 6.7 inward products, {p['n_sphere']} points ({name})", count=1,
                        make=_inward(name, p, device)))
    return out
