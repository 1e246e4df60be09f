"""Chapter 08's optimisers against oracles they share no code with.

* the ``kinetic`` stepper is ``torch.optim.SGD(lr=h^2, momentum=1-gamma h)`` fed 2 zeta(t) grad Phi
  (float64, to 1e-12), and its velocity (omega_k - omega_{k-1})/h is -h times torch's momentum buffer;
* :func:`kinetic_balance`: the identity it discretises is checked on the continuous N-particle ODE
  integrated by scipy's ``solve_ivp``; along ``kinetic`` runs its residual, recomputed here from the
  heads, vanishes at first order in h, while a wrong friction factor leaves a residual that does not;
* :func:`heavy_ball_time`: heavy ball on the linear model follows the closed-form gradient flow at the
  rescaled clock with an O(h) error, and not at the unrescaled one;
* :func:`adam_on_risk`: the engine's Adam equals ``torch.optim.Adam`` on the risk's autograd gradient;
* :func:`adam_speed`, :func:`adam_crossover`, :func:`crossing`: closed forms (one or two gradient
  magnitudes; power laws, on which log-linear interpolation is exact);
* :func:`rms_distance`: a plain loop over heads and coordinates; :func:`empirical_grad_phi`: N times the
  risk's autograd gradient; :func:`heavy_ball_clock`: ``torch.optim.SGD`` with momentum in a plain loop
  against the linear model's closed-form gradient flow.
"""

import math

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

from mfattn.flows.integrate import Adam, Constant, Decaying, HeavyBall, Kinetic, integrate
from mfattn.models.linear import linear_regression
from mfattn.flows.optimizers import (adam_crossover, adam_on_risk, adam_speed, crossing, empirical_grad_phi,
                                     heavy_ball_clock, heavy_ball_time, kinetic_balance, rms_distance)
from mfattn.models.tasks import teacher_task

F64 = torch.float64


def torch_sgd_run(model, data, h0, h, K, zeta, gamma, batch=None, seed=0):
    """torch.optim.SGD(lr=h^2, momentum=1-gamma h) on 2 zeta(t) grad Phi, minibatches drawn as the
    integrator draws them; returns the parameters and the momentum buffer after every step."""
    p = h0.clone().requires_grad_(True)
    opt = torch.optim.SGD([p], lr=h**2, momentum=1 - gamma * h)
    w = torch.full((h0.shape[0],), 1.0 / h0.shape[0], dtype=F64)
    gen = torch.Generator().manual_seed(seed)
    params, bufs = [h0.clone()], [torch.zeros_like(h0)]
    for k in range(K):
        if batch is None:
            Xs, Ys = data.X, data.Y
        else:
            idx = torch.randint(data.n, (batch,), generator=gen)
            Xs, Ys = data.X[idx], data.Y[idx]
        opt.zero_grad()
        p.grad = 2 * zeta(k * h) * model.grad_phi(Xs, Ys, p.detach(), w)
        opt.step()
        params.append(p.detach().clone())
        bufs.append(opt.state[p]["momentum_buffer"].clone())
    return torch.stack(params), torch.stack(bufs)


# ------------------------------------------------------------------------------ kinetic
@pytest.mark.parametrize("batch", [None, 2])
def test_kinetic_is_torch_sgd_with_momentum(heads_task, batch):
    model, data, h0 = heads_task
    h, K, gamma, zeta = 0.05, 40, 2.0, Decaying(value=1.0, t0=0.5, power=0.5)
    run = integrate(model, data, h0, stepper=Kinetic(friction=gamma), step=h, T=h * K, record_every=h,
                    zeta=zeta, batch_size=batch, generator=torch.Generator().manual_seed(0), progress=False)
    params, bufs = torch_sgd_run(model, data, h0, h, K, zeta, gamma, batch=batch)
    assert float((run.final - h0).abs().max()) > 1e-2  # the heads did move
    torch.testing.assert_close(run.heads, params, rtol=0, atol=1e-12)
    torch.testing.assert_close(run.final, params[-1], rtol=0, atol=1e-12)
    # the velocity after each step is -h times torch's buffer
    p = (run.heads[1:] - run.heads[:-1]) / h
    torch.testing.assert_close(p, -h * bufs[1:], rtol=0, atol=1e-12)


def test_kinetic_rejects_bad_friction_and_step(heads_task):
    model, data, h0 = heads_task
    for gamma in (0.0, -1.0):
        with pytest.raises(ValueError, match="^friction"):
            Kinetic(friction=gamma)
    with pytest.raises(ValueError, match="^step"):  # friction * h = 1
        integrate(model, data, h0, stepper=Kinetic(friction=2.0), step=0.5, T=1.0, record_every=0.5,
                  batch_size=None, progress=False)


# ---------------------------------------------------------------------- kinetic_balance
def test_energy_identity_holds_on_the_continuous_flow():
    """d/dt [2 zeta E + K] = -2 gamma K for omega'' = -gamma omega' - 2 zeta grad Phi, K = |p|^2/(2N),
    by a high-accuracy ODE solve (the integral of K is carried as an extra state)."""
    task = teacher_task(n=4, L=3, d_x=2, d_k=1, d_v=3, seed=0)
    model, data = task.model, task.data
    N, D = 3, model.d_omega
    w0 = torch.randn(N, D, generator=torch.Generator().manual_seed(5), dtype=F64)
    wts = torch.full((N,), 1.0 / N, dtype=F64)
    gamma, zeta = 1.5, 0.7

    def rhs(t, y):
        W, P = torch.from_numpy(y[:N * D].reshape(N, D)), y[N * D:2 * N * D].reshape(N, D)
        g = model.grad_phi(data.X, data.Y, W, wts).numpy()
        return np.concatenate([P.ravel(), (-gamma * P - 2 * zeta * g).ravel(), [0.5 * (P**2).sum() / N]])

    ts = np.linspace(0.0, 3.0, 31)
    y0 = np.concatenate([w0.numpy().ravel(), np.zeros(N * D), [0.0]])
    sol = solve_ivp(rhs, (0.0, 3.0), y0, method="DOP853", rtol=1e-10, atol=1e-12, t_eval=ts)
    assert sol.success
    E = np.array([float(model.risk(data, torch.from_numpy(sol.y[:N * D, j].reshape(N, D).copy())))
                  for j in range(len(ts))])
    P = sol.y[N * D:2 * N * D]
    K, intK = 0.5 * (P**2).sum(0) / N, sol.y[-1]
    assert E[0] - E[-1] > 1e-2 and K.max() > 1e-3  # a real motion
    H0 = 2 * zeta * E[0]
    assert np.abs(2 * zeta * E + K - H0 + 2 * gamma * intK).max() < 1e-7
    assert np.abs(2 * zeta * E + K - H0 + gamma * intK).max() > 1e-2  # the factor 2 is needed


def kinetic_runs(model, data, h0, gamma, steps):
    return [integrate(model, data, h0, stepper=Kinetic(friction=gamma), step=h, T=2.0, record_every=h,
                      zeta=0.5, batch_size=None, progress=False) for h in steps]


def test_kinetic_balance_residual_is_first_order(heads_task):
    model, data, h0 = heads_task
    gamma, steps = 2.0, (1 / 16, 1 / 32, 1 / 64)
    worst, wrong = [], []
    for h, run in zip(steps, kinetic_runs(model, data, h0, gamma, steps)):
        bal = kinetic_balance(run)
        # the residual recomputed from the heads and the risk, independently
        W = run.heads
        E = np.array([float(model.risk(data, W[j])) for j in range(W.shape[0])])
        K = np.array([0.0] + [0.5 * float(((W[j] - W[j - 1]) / h).pow(2).sum()) / W.shape[1]
                              for j in range(1, W.shape[0])])
        H = 2 * 0.5 * E + K
        r = H - H[0] + 2 * gamma * h * np.cumsum(K)
        np.testing.assert_allclose(bal["residual"], r, rtol=0, atol=1e-12)
        worst.append(np.abs(bal["residual"]).max())
        # falsification: a wrong friction factor in the dissipated energy
        wrong.append(np.abs(bal["hamiltonian"] - bal["hamiltonian"][0] + 1.5 * bal["dissipated"]).max())
    ratios = [worst[i] / worst[i + 1] for i in range(2)]
    assert all(1.7 <= q <= 2.3 for q in ratios), (worst, ratios)
    assert wrong[-1] > 0.8 * wrong[0], wrong  # does not shrink with h
    assert wrong[-1] > 20 * worst[-1], (wrong, worst)


def test_kinetic_balance_rejects_other_runs(heads_task):
    model, data, h0 = heads_task
    kw = dict(T=0.5, batch_size=None, progress=False)
    bad = [
        integrate(model, data, h0, stepper="gd", step=0.1, record_every=0.1, **kw),
        integrate(model, data, h0, stepper=Kinetic(friction=2.0), step=0.1, record_every=0.5, **kw),
        integrate(model, data, h0, stepper=Kinetic(friction=2.0), step=0.1, record_every=0.1, keep=3, **kw),
        integrate(model, data, h0, stepper=Kinetic(friction=2.0), step=0.1, record_every=0.1,
                  zeta=Decaying(value=0.5), **kw),
    ]
    for run in bad:
        with pytest.raises(ValueError, match="^run"):
            kinetic_balance(run)
    with pytest.raises(ValueError, match="^run"):
        kinetic_balance("not a run")


# ---------------------------------------------------------------------- heavy_ball_time
def test_heavy_ball_follows_the_flow_on_the_rescaled_clock():
    model, data, _ = linear_regression(d=4, n=30, generator=torch.Generator().manual_seed(2), noise=0.3)
    h0 = torch.randn(5, 4, generator=torch.Generator().manual_seed(3), dtype=F64)
    mu, T = 0.5, 1.0
    assert heavy_ball_time(T, mu) == pytest.approx(T / (1 - mu), rel=1e-15)
    rescaled, raw = [], []
    for h in (1 / 20, 1 / 40, 1 / 80):
        run = integrate(model, data, h0, stepper=HeavyBall(momentum=mu), step=h, T=T, record_every=T,
                        batch_size=None, progress=False)
        exact = model.exact_flow(data, h0, [heavy_ball_time(T, mu), T])
        rescaled.append(float((run.final - exact[0]).abs().max()))
        raw.append(float((run.final - exact[1]).abs().max()))
    ratios = [rescaled[i] / rescaled[i + 1] for i in range(2)]
    assert all(1.6 <= q <= 2.4 for q in ratios), (rescaled, ratios)
    assert raw[-1] > 0.8 * raw[0] and raw[-1] > 20 * rescaled[-1], (raw, rescaled)
    np.testing.assert_allclose(heavy_ball_time(np.array([0.0, 0.2, 1.0]), 0.9), [0.0, 2.0, 10.0], rtol=1e-14)
    for mu in (1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="^momentum"):
            heavy_ball_time(1.0, mu)


# ------------------------------------------------------------------------- adam_on_risk
def test_adam_on_risk_is_torch_adam_on_the_autograd_gradient(heads_task):
    model, data, h0 = heads_task
    N, h, K, zeta, eps, betas = h0.shape[0], 0.05, 40, 0.5, 1e-3, (0.8, 0.99)
    # the oracle's premise: model.risk is differentiable, with d E / d omega_i = grad Phi(omega_i) / N
    W = h0.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(model.risk(data, W), W)
    wts = torch.full((N,), 1.0 / N, dtype=F64)
    torch.testing.assert_close(g, model.grad_phi(data.X, data.Y, h0, wts) / N, rtol=0, atol=1e-14)

    W = h0.clone().requires_grad_(True)
    opt = torch.optim.Adam([W], lr=h, betas=betas, eps=eps)
    sizes = []
    for _ in range(K):
        opt.zero_grad()
        model.risk(data, W).backward()
        sizes.append(float(W.grad.abs().median()))
        opt.step()
    assert np.median(sizes) < 10 * eps  # eps is not negligible against the gradient's coordinates
    kw = dict(step=h, T=h * K, record_every=h * K, zeta=zeta, batch_size=None, progress=False)
    run = integrate(model, data, h0, stepper=adam_on_risk(N, eps=eps, beta1=betas[0], beta2=betas[1],
                                                          zeta=Constant(zeta)), **kw)
    assert float((run.final - h0).abs().max()) > 1e-1
    torch.testing.assert_close(run.final, W.detach(), rtol=0, atol=1e-10)
    # the same eps without the 2 zeta N rescaling is another optimiser
    naive = integrate(model, data, h0, stepper=Adam(beta1=betas[0], beta2=betas[1], eps=eps), **kw)
    assert float((naive.final - W.detach()).abs().max()) > 1e-6


def test_adam_on_risk_rejects_bad_arguments():
    with pytest.raises(ValueError, match="^zeta"):
        adam_on_risk(4, eps=1e-3, zeta=Decaying(value=0.5))
    with pytest.raises(ValueError, match="^N"):
        adam_on_risk(0, eps=1e-3)
    with pytest.raises(ValueError, match="^eps"):
        adam_on_risk(4, eps=0.0)


# -------------------------------------------------------------- adam_speed, adam_crossover
def test_adam_speed_and_crossover_with_one_magnitude():
    c = 0.3
    g = c * np.where(np.arange(20).reshape(4, 5) % 3 == 0, -1.0, 1.0)
    x = np.array([0.0, 0.1, 0.3, 1.0, 10.0])
    np.testing.assert_allclose(adam_speed(g, x), c / (c + x), rtol=1e-14)
    np.testing.assert_allclose(adam_speed(torch.tensor(g), x), c / (c + x), rtol=1e-14)
    for level in (0.5, 0.2, 0.9):
        assert adam_crossover(g, level) == pytest.approx(c * (1 - level) / level, rel=1e-10)
    assert adam_crossover(g) == pytest.approx(c, rel=1e-10)


def test_adam_speed_and_crossover_with_two_magnitudes_and_zeros():
    a, b = 0.02, 1.5
    g = np.array([a, -a, a, b, -b, -b, 0.0, 0.0, 0.0])  # zeros do not count in the mean

    def closed(x):
        return np.sqrt(((a / (a + x)) ** 2 + (b / (b + x)) ** 2) / 2)

    x = np.array([0.0, 0.005, 0.02, 0.3, 1.5, 40.0])
    np.testing.assert_allclose(adam_speed(g, x), closed(x), rtol=1e-14)
    np.testing.assert_allclose(adam_speed([1.0, -1.0, 0.0], [0.0, 1.0]), [1.0, 0.5], rtol=1e-15)
    for level in (0.5, 0.75, 0.3):
        xs = adam_crossover(g, level)
        assert abs(closed(xs) - level) < 1e-10
        assert abs(float(adam_speed(g, xs)) - level) < 1e-10
        assert xs == pytest.approx(brentq(lambda u: closed(u) - level, 0.0, 1e6, xtol=1e-15), rel=1e-9)


def test_adam_speed_and_crossover_reject_bad_input():
    for g in ([0.0, 0.0], [1.0, np.nan], [np.inf, 1.0], []):
        with pytest.raises(ValueError, match="^grad"):
            adam_speed(g, 1.0)
        with pytest.raises(ValueError, match="^grad"):
            adam_crossover(g)
    with pytest.raises(ValueError, match="^x"):
        adam_speed([1.0], [0.5, -0.1])
    for level in (1.0, 0.0, 1.5):
        with pytest.raises(ValueError, match="^level"):
            adam_crossover([1.0, 2.0], level)


# ------------------------------------------------------------------------------ crossing
def test_crossing_is_exact_on_power_laws():
    x = 2.0 ** np.arange(7)  # 1 .. 64
    for level in (0.7, 0.3, 0.25, 0.1, 0.02):  # 0.25 is a grid value
        assert crossing(x, 1 / x, level) == pytest.approx(1 / level, rel=1e-12)
    for level in (2.5, 0.4, 0.01):
        assert crossing(x, 3 * x**-2.0, level) == pytest.approx(math.sqrt(3 / level), rel=1e-12)
    # the first crossing of a curve that rises again
    assert crossing([1, 2, 4, 8], [1.0, 0.25, 1.0, 0.1], 0.5) == pytest.approx(math.sqrt(2), rel=1e-12)


def test_crossing_is_nan_without_a_crossing_and_checks_input():
    x = 2.0 ** np.arange(5)
    assert math.isnan(crossing(x, 1 / x, 0.01))  # never falls below
    assert math.isnan(crossing(x, 1 / x, 2.0))  # starts below
    for bad in ([1, 2, 2, 4], [1, 4, 2, 8], [0, 1, 2, 3]):
        with pytest.raises(ValueError, match="^x"):
            crossing(bad, [1.0, 0.5, 0.3, 0.1], 0.4)
    for bad in ([1.0, 0.5, 0.0, 0.1], [1.0, -0.5, 0.3, 0.1]):
        with pytest.raises(ValueError, match="^y"):
            crossing([1, 2, 4, 8], bad, 0.4)


# ------------------------------------------------- rms_distance, empirical_grad_phi, heavy_ball_clock
def test_rms_distance_is_a_plain_loop_over_heads():
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(3, 7, 4, generator=g, dtype=F64), torch.randn(3, 7, 4, generator=g, dtype=F64)
    for r in range(3):
        loop = math.sqrt(sum(sum((float(a[r, i, j]) - float(b[r, i, j])) ** 2 for j in range(4)) for i in range(7)) / 7)
        assert float(rms_distance(a, b)[r]) == pytest.approx(loop, rel=1e-13)
        assert float(rms_distance(a[r], b[r])) == pytest.approx(loop, rel=1e-13)
    np.testing.assert_allclose(rms_distance(a, b[0]).numpy(), [float(rms_distance(a[r], b[0])) for r in range(3)])
    with pytest.raises(ValueError, match="^a"):
        rms_distance(torch.zeros(4), torch.zeros(4))
    with pytest.raises(ValueError, match="^b"):
        rms_distance(a, torch.zeros(7, 5, dtype=F64))


def test_empirical_grad_phi_is_n_times_the_risks_autograd_gradient(heads_task):
    model, data, h0 = heads_task
    W = h0.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(model.risk(data, W), W)  # d E(rho^N) / d omega_i = grad Phi(omega_i) / N
    torch.testing.assert_close(empirical_grad_phi(model, data, h0), h0.shape[0] * g, rtol=0, atol=1e-13)
    for bad in (h0[:, :-1], h0[0], h0[:0]):
        with pytest.raises(ValueError, match="^heads"):
            empirical_grad_phi(model, data, bad)


def test_heavy_ball_clock_against_torch_sgd_and_the_closed_form_flow():
    """Oracle: torch.optim.SGD(momentum) on 2 zeta grad Phi in a plain loop, against the linear model's
    closed-form gradient flow at tau = k alpha / (1 - mu) and at k alpha."""
    model, data, _ = linear_regression(d=3, n=25, generator=torch.Generator().manual_seed(4), noise=0.3)
    h0 = torch.randn(6, 3, generator=torch.Generator().manual_seed(6), dtype=F64)
    mu, T, zeta, records, lrs = 0.5, 1.0, 0.5, 4, [1 / 16, 1 / 32]
    got = heavy_ball_clock(model, data, h0, momentum=mu, learning_rates=lrs, T=T, zeta=zeta, records=records,
                           substeps=32)
    w = torch.full((6,), 1 / 6, dtype=F64)
    for i, a in enumerate(lrs):
        p = h0.clone().requires_grad_(True)
        opt = torch.optim.SGD([p], lr=a, momentum=mu)
        per = round(T * (1 - mu) / records / a)
        res, un = [0.0], [0.0]
        for k in range(1, records * per + 1):
            opt.zero_grad()
            p.grad = 2 * zeta * model.grad_phi(data.X, data.Y, p.detach(), w)
            opt.step()
            if k % per == 0:
                t = k * a
                flow = model.exact_flow(data, h0, [t / (1 - mu), t], zeta=zeta)
                res.append(math.sqrt(float(((p.detach() - flow[0]) ** 2).sum(-1).mean())))
                un.append(math.sqrt(float(((p.detach() - flow[1]) ** 2).sum(-1).mean())))
        assert got["rescaled"][i] == pytest.approx(max(res), rel=1e-6)
        assert got["unrescaled"][i] == pytest.approx(max(un), rel=1e-6)
    assert got["unrescaled"][1] > 3 * got["rescaled"][1]
    for kw, name in ((dict(momentum=1.0), "momentum"), (dict(learning_rates=[0.0]), "learning_rates"),
                     (dict(learning_rates=[0.3]), "learning_rates"), (dict(T=0.0), "T")):
        args = dict(momentum=mu, learning_rates=lrs, T=T, records=records) | kw
        with pytest.raises(ValueError, match=f"^{name}"):
            heavy_ball_clock(model, data, h0, **args)
