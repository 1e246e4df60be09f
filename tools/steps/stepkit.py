"""What several chapters' step inventories share: the device's sync, uniform weights, and one pass of
``integrate``'s loop body with its recording (the reference flow's step in chapters 02 and 07)."""

import torch

from mfattn.flows.integrate import as_profile, make_stepper


def sync(device) -> None:
    """Wait for the device's queued work (CUDA); nothing on the CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def uniform(heads):
    """The uniform weights ``1 / n`` of ``n`` heads, in their dtype and on their device."""
    n = heads.shape[0]
    return torch.full((n,), 1.0 / n, dtype=heads.dtype, device=heads.device)


def flow_step(model, X, Y, heads, weights, h, *, stepper: str = "rk4", zeta: float = 1.0, copy: bool = False):
    """One step of ``integrate`` on the whole dataset as the reference flow takes it (``keep_stages``,
    ``dissipation``): every stage's ``model.evaluate``, the first one's risk and dissipation read on the
    host (the recording), the stage residuals stacked; ``copy``: the population copied too (a run that
    keeps its heads at every record). Returns the step, a function of no argument ending with a host read."""
    st, prof = make_stepper(stepper), as_profile(zeta)

    def step():
        stages = []

        def grad(s, points):
            recording = s == 0  # the risk only where it is recorded, as the integrator does
            r, G, g, _ = model.evaluate(X, Y, points, weights, risk=recording)
            if recording:
                float(r), float(model.weighted_sq_norm(weights, g))
            stages.append(G)
            return g
        w = st.step(heads, 0.0, h, prof, grad, {})
        torch.stack(stages)
        if copy:
            w.clone()
        float(w[0, 0])
    return step
