"""The integrator's steppers against oracles they do not share code with: torch.optim's SGD, heavy-ball
and Adam on the same parameters (float64, to 1e-12), and closed forms on the linear model (explicit
Euler and Runge-Kutta are powers of a matrix polynomial there; the exact flow is a matrix exponential).
Then the checkpoint (an interrupted run resumes bit for bit), saving and loading, the registry and the
input checks."""

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from mfattn.flows.integrate import (GD, STEPPERS, Adam, Constant, Decaying, HeavyBall, Run, Stepper, integrate, make_stepper,
                              register)
from mfattn.models.linear import linear_regression

F64 = torch.float64


def torch_optim_run(model, data, h0, opt_factory, h, K, zeta, batch=None, seed=0):
    """The same particle system driven by a torch.optim optimiser: the gradient handed to it is
    2 zeta(t) grad Phi at the particles, on the step's minibatch (drawn exactly as the integrator does)."""
    p = h0.clone().requires_grad_(True)
    opt = opt_factory([p])
    w = torch.full((h0.shape[0],), 1.0 / h0.shape[0], dtype=F64)
    gen = torch.Generator().manual_seed(seed)
    for k in range(K):
        if batch is None:
            Xs, Ys = data.X, data.Y
        else:
            idx = torch.randint(data.n, (batch,), generator=gen)
            Xs, Ys = data.X[idx], data.Y[idx]
        opt.zero_grad()
        p.grad = 2 * zeta(k * h) * model.grad_phi(Xs, Ys, p.detach(), w)
        opt.step()
    return p.detach()


@pytest.mark.parametrize("name, hyper, factory", [
    ("gd", {}, lambda h: (lambda ps: torch.optim.SGD(ps, lr=h))),
    ("heavy-ball", {"momentum": 0.8}, lambda h: (lambda ps: torch.optim.SGD(ps, lr=h, momentum=0.8))),
    ("adam", {"beta1": 0.8, "beta2": 0.99, "eps": 1e-6},
     lambda h: (lambda ps: torch.optim.Adam(ps, lr=h, betas=(0.8, 0.99), eps=1e-6))),
])
@pytest.mark.parametrize("batch", [None, 2])
def test_steppers_match_torch_optim(heads_task, name, hyper, factory, batch):
    model, data, h0 = heads_task
    if name == "gd" and batch is not None:
        name = "sgd"
    h, K, zeta = 0.05, 40, Decaying(value=1.0, t0=0.5, power=0.5)
    run = integrate(model, data, h0, stepper=make_stepper(name, **hyper), step=h, T=h * K, record_every=h * K,
                    zeta=zeta, batch_size=batch, generator=torch.Generator().manual_seed(0), progress=False)
    ref = torch_optim_run(model, data, h0, factory(h), h, K, zeta, batch=batch)
    assert float((run.final - h0).abs().max()) > 1e-2  # the particles did move
    torch.testing.assert_close(run.final, ref, rtol=0, atol=1e-12)


def test_heavy_ball_with_no_momentum_is_sgd(heads_task):
    model, data, h0 = heads_task
    kw = dict(step=0.1, T=1.0, record_every=0.5, batch_size=1, progress=False)
    a = integrate(model, data, h0, stepper=HeavyBall(momentum=0.0), generator=torch.Generator().manual_seed(4), **kw)
    b = integrate(model, data, h0, stepper="sgd", generator=torch.Generator().manual_seed(4), **kw)
    torch.testing.assert_close(a.heads, b.heads, rtol=0, atol=1e-14)


@pytest.fixture(scope="module")
def linear():
    model, data, _ = linear_regression(d=4, n=30, generator=torch.Generator().manual_seed(2), noise=0.3)
    h0 = torch.randn(5, 4, generator=torch.Generator().manual_seed(3), dtype=F64)
    X, y = data.X, data.Y[:, 0]
    Sigma, b = X.T @ X / 30, X.T @ y / 30
    m_star = torch.linalg.solve(Sigma, b)
    return model, data, h0, Sigma, m_star


def test_gd_and_rk4_are_matrix_powers_on_the_linear_model(linear):
    """On the linear model the mean obeys dm/dt = -2 (Sigma m - b): one Euler step multiplies
    m - m* by I - 2h Sigma, one Runge-Kutta step by the degree-4 Taylor polynomial of exp(-2h Sigma);
    every particle moves with the mean."""
    model, data, h0, Sigma, m_star = linear
    h, K = 0.1, 30
    I = torch.eye(4, dtype=F64)
    A = -2 * h * Sigma
    P = {"gd": I + A, "rk4": I + A + A @ A / 2 + A @ A @ A / 6 + A @ A @ A @ A / 24}
    m0 = h0.mean(0)
    for name, M in P.items():
        run = integrate(model, data, h0, stepper=name, step=h, T=h * K, record_every=h * K, progress=False)
        m_K = m_star + torch.linalg.matrix_power(M, K) @ (m0 - m_star)
        torch.testing.assert_close(run.final, h0 + (m_K - m0), rtol=0, atol=1e-12)


def test_rk4_converges_at_fourth_order_to_the_exact_flow(linear):
    model, data, h0, _, _ = linear
    zeta = Decaying(value=1.0, t0=1.0, power=0.5)
    exact = model.exact_flow(data, h0, [1.0], zeta)[-1]
    errs = [float((integrate(model, data, h0, stepper="rk4", step=1 / k, T=1.0, record_every=1.0, zeta=zeta,
                             progress=False).final - exact).abs().max()) for k in (4, 8, 16)]
    rates = [math.log2(errs[i] / errs[i + 1]) for i in range(2)]
    assert all(3.7 < r < 4.3 for r in rates), (errs, rates)
    euler = [float((integrate(model, data, h0, stepper="gd", step=1 / k, T=1.0, record_every=1.0, zeta=zeta,
                              progress=False).final - exact).abs().max()) for k in (32, 64)]
    assert 0.9 < math.log2(euler[0] / euler[1]) < 1.1


def test_exact_flow_solves_the_equation_by_finite_differences(linear):
    """An oracle of the oracle: d/dt of the closed form equals -2 zeta(t) grad Phi at the same time."""
    model, data, h0, Sigma, m_star = linear
    zeta = Decaying(value=0.7, t0=0.5, power=1.0)
    t, dt = 0.6, 1e-5
    W = model.exact_flow(data, h0, [t - dt, t, t + dt], zeta)
    w = torch.full((5,), 0.2, dtype=F64)
    drift = -2 * zeta(t) * model.grad_phi(data.X, data.Y, W[1], w)
    torch.testing.assert_close((W[2] - W[0]) / (2 * dt), drift, rtol=0, atol=1e-8)


def test_characteristics_follow_any_full_batch_stepper(heads_task):
    model, data, h0 = heads_task
    for name in ("gd", "rk4", "adam"):
        run = integrate(model, data, h0, stepper=name, step=0.1, T=1.0, record_every=0.5, batch_size=None,
                        keep_stages=True, progress=False)
        torch.testing.assert_close(run.characteristics(h0[:2]), run.heads[:, :2], rtol=0, atol=1e-13)
        assert run.stage_residuals.shape[:2] == (10, make_stepper(name).stages)


class Stop(Exception):
    pass


def test_an_interrupted_run_resumes_bit_for_bit_from_its_checkpoint(heads_task, tmp_path):
    model, data, h0 = heads_task
    kw = dict(stepper="adam", step=0.05, T=1.0, record_every=0.1, batch_size=2, dissipation=True, progress=False)
    whole = integrate(model, data, h0, generator=torch.Generator().manual_seed(9), **kw)
    calls = []

    def bomb(heads):
        calls.append(1)
        if len(calls) == 6:  # at the sixth recording
            raise Stop
        return float(heads.norm())

    ck = tmp_path / "run.ckpt"
    with pytest.raises(Stop):
        integrate(model, data, h0, generator=torch.Generator().manual_seed(9), statistics={"n": bomb},
                  checkpoint=ck, **kw)
    assert ck.exists()
    gen = torch.Generator().manual_seed(12345)  # a fresh generator: the saved state replaces its own
    back = integrate(model, data, h0, generator=gen, statistics={"n": lambda h: float(h.norm())}, checkpoint=ck, **kw)
    for f in ("heads", "risk", "dissipation", "final"):
        assert torch.equal(getattr(back, f), getattr(whole, f)), f
    assert back.stats["n"].shape == whole.risk.shape
    # finished: the file now holds the run, returned without a step
    again = integrate(model, data, h0, generator=torch.Generator().manual_seed(9),
                      statistics={"n": lambda h: 1 / 0}, checkpoint=ck, **kw)
    assert torch.equal(again.final, whole.final)
    # another run's file is refused, by name
    with pytest.raises(ValueError, match="checkpoint"):
        integrate(model, data, h0 + 1, generator=torch.Generator().manual_seed(9),
                  statistics={"n": lambda h: 0.0}, checkpoint=ck, **kw)


def test_save_and_load_round_trip(heads_task, tmp_path):
    model, data, h0 = heads_task
    run = integrate(model, data, h0, stepper="rk4", step=0.25, T=1.0, record_every=0.5, keep_stages=True,
                    dissipation=True, keep_at=[1], zeta=Decaying(), progress=False)
    back = Run.load(run.save(tmp_path / "r.pt"), model=model, data=data)
    for f in ("times", "risk", "heads", "dissipation", "final", "stage_residuals"):
        assert torch.equal(getattr(back, f), getattr(run, f))
    assert torch.equal(back.kept[1], run.kept[1]) and back.zeta == Decaying()
    torch.testing.assert_close(back.characteristics(h0[:1]), run.heads[:, :1], rtol=0, atol=0)
    with pytest.raises(ValueError, match="path"):
        torch.save({"kind": "checkpoint"}, tmp_path / "c.pt")
        Run.load(tmp_path / "c.pt")


@dataclasses.dataclass(frozen=True)
class _OwnProfile:
    """A learning-rate profile of a class the engine does not know (module level, so it pickles)."""

    def __call__(self, t):
        return 1.0


def test_load_runs_no_code_unless_trusted(heads_task, tmp_path):
    """Run.load reads with torch.load(weights_only=True): a run under the engine's profiles loads, a run
    under a profile of another class is refused by name (unpickling it would run code) and loads with
    trusted=True, and an unfinished checkpoint (it holds a generator's state) is refused by name."""
    model, data, h0 = heads_task
    run = integrate(model, data, h0, stepper="gd", step=0.25, T=0.5, record_every=0.25, zeta=_OwnProfile(),
                    progress=False)
    path = run.save(tmp_path / "own.pt")
    with pytest.raises(ValueError, match="path"):
        Run.load(path)
    assert torch.equal(Run.load(path, trusted=True).final, run.final)
    calls = []

    def bomb(heads):
        calls.append(1)
        if len(calls) == 4:  # after two recordings past the start, each saved
            raise Stop
        return 0.0

    with pytest.raises(Stop):
        integrate(model, data, h0, stepper="sgd", step=0.25, T=1.0, record_every=0.25, batch_size=1,
                  generator=torch.Generator().manual_seed(0), statistics={"n": bomb}, checkpoint=tmp_path / "ck.pt",
                  progress=False)
    with pytest.raises(ValueError, match="path"):
        Run.load(tmp_path / "ck.pt")


class _Marker:
    """Unpickling it would create the file it names."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def test_a_checkpoint_is_read_without_running_code(heads_task, tmp_path):
    """integrate reads its checkpoint weights-only: a finished run under a profile of a class the engine
    does not know still comes back from its checkpoint without a step (the caller's profile put back), and a
    file holding an object whose unpickling runs code is refused by name, the code not run."""
    model, data, h0 = heads_task
    kw = dict(stepper="gd", step=0.25, T=0.5, record_every=0.25, zeta=_OwnProfile(), progress=False)
    ck = tmp_path / "own.ckpt"
    run = integrate(model, data, h0, checkpoint=ck, **kw)
    with torch.serialization.safe_globals([Constant, Decaying]):
        assert torch.load(ck, weights_only=True)["kind"] == "run"
    again = integrate(model, data, h0, checkpoint=ck, **kw)
    assert torch.equal(again.final, run.final) and again.zeta is not None and again.zeta == run.zeta
    marker = tmp_path / "ran"
    torch.save({"kind": "checkpoint", "payload": _Marker(marker)}, tmp_path / "bad.ckpt")
    with pytest.raises(ValueError, match="checkpoint"):
        integrate(model, data, h0, checkpoint=tmp_path / "bad.ckpt", **kw)
    assert not marker.exists()


def test_a_registered_stepper_is_available_by_name(linear):
    model, data, h0, _, _ = linear

    @register
    class HalfGD(GD):
        name = "half-gd-test"

        def step(self, heads, t, h, zeta, grad, state):
            return super().step(heads, t, h / 2, zeta, grad, state)

    try:
        a = integrate(model, data, h0, stepper="half-gd-test", step=0.2, T=1.0, record_every=1.0, progress=False)
        b = integrate(model, data, h0, stepper="gd", step=0.1, T=0.5, record_every=0.5, progress=False)
        torch.testing.assert_close(a.final, b.final, rtol=0, atol=1e-14)
        with pytest.raises(ValueError, match="already registered"):
            register(type("Other", (GD,), {"name": "half-gd-test"}))
        with pytest.raises(ValueError, match="already registered"):
            register(type("GD", (GD,), {"name": "gd", "__module__": __name__}))  # a built-in's name
        # the cell that defines it run a second time: the same class again, which replaces the first
        again = register(type(HalfGD.__name__, (GD,), {"name": "half-gd-test", "__module__": HalfGD.__module__,
                                                        "__qualname__": HalfGD.__qualname__}))
        assert STEPPERS["half-gd-test"] is again is not HalfGD
    finally:
        STEPPERS.pop("half-gd-test")
    assert STEPPERS["gd"] is GD


@pytest.mark.parametrize("kwargs, match", [
    (dict(stepper="nope"), "stepper"),
    (dict(stepper="rk4", batch_size=2), "batch_size"),
    (dict(stepper="sgd"), "generator"),
    (dict(stepper="sgd", batch_size=1, generator=torch.Generator(), keep_stages=True), "keep_stages"),
    (dict(stepper="gd", step=0.3), "step"),
    (dict(stepper="gd", keep_at=[99]), "keep_at"),
    (dict(stepper="gd", checkpoint_every=0), "checkpoint_every"),
])
def test_bad_arguments_are_named(linear, kwargs, match):
    model, data, h0, _, _ = linear
    args = dict(step=0.25, T=1.0, record_every=0.5, progress=False) | kwargs
    with pytest.raises(ValueError, match=match):
        integrate(model, data, h0, **args)


@pytest.mark.parametrize("ctor, match", [(lambda: HeavyBall(momentum=1.0), "momentum"),
                                         (lambda: Adam(beta2=-0.1), "beta2"), (lambda: Adam(eps=0), "eps"),
                                         (lambda: make_stepper("adam", lr=1), "hyperparameters")])
def test_bad_hyperparameters_are_named(ctor, match):
    with pytest.raises(ValueError, match=match):
        ctor()


def test_the_base_stepper_is_abstract():
    with pytest.raises(NotImplementedError):
        Stepper().step(None, 0.0, 0.1, None, None, {})
