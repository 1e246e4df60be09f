"""SGD (19), the characteristics (21), profiles (42), sweeps, and distances between clouds."""

import json
import math

import pytest
import torch

from mfattn.flows.dynamics import Constant, Decaying, as_profile, reference_flow, rescaled_time, sgd, uniform_ball
from mfattn.companion.sweep import run_sweep
from mfattn.models.tasks import teacher_task
from mfattn.analysis.transport import lipschitz_discrepancy, wasserstein


@pytest.fixture(scope="module")
def task():
    return teacher_task(n=12, L=4, d_x=3, d_k=2, d_v=4, seed=0)


def cloud(task, N, seed, scale=0.6):
    return scale * torch.randn(N, task.model.d_omega, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_one_sgd_step_is_eq_19(task):
    h0 = cloud(task, 5, 1)
    eps, z = 0.1, Decaying(0.7, 2.0, 0.5)
    tr = sgd(task.model, task.data, h0, eps=eps, T=eps, record_every=eps, zeta=z, batch_size=3,
             generator=torch.Generator().manual_seed(9), progress=False)
    idx = torch.randint(task.data.n, (3,), generator=torch.Generator().manual_seed(9))
    G = task.model.stochastic_gradient(task.data.subset(idx), h0)
    torch.testing.assert_close(tr.heads[1], h0 + 2 * eps * z(0.0) * G, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(tr.risk[0], task.model.risk(task.data, h0))


@pytest.mark.parametrize("batch_size", [1, None])
def test_sgd_started_at_a_dirac_stays_a_dirac(task, batch_size):
    h0 = cloud(task, 1, 2).expand(6, -1).clone()
    tr = sgd(task.model, task.data, h0, eps=0.05, T=0.5, record_every=0.25, batch_size=batch_size,
             generator=torch.Generator().manual_seed(0), progress=False)
    assert float((tr.heads - tr.heads[:, :1]).abs().max()) == 0.0
    assert float((tr.heads[-1] - h0).abs().max()) > 1e-3  # and it did move


def test_sgd_is_reproducible_for_a_seed(task):
    h0 = cloud(task, 4, 3)
    run = lambda: sgd(task.model, task.data, h0, eps=0.05, T=0.2, record_every=0.1,
                      generator=torch.Generator().manual_seed(5), progress=False)
    a, b = run(), run()
    assert torch.equal(a.heads, b.heads) and torch.equal(a.risk, b.risk)


def test_tagged_characteristic_of_a_reference_particle_is_that_particle(task):
    P0 = cloud(task, 16, 4)
    ref = reference_flow(task.model, task.data, P0, T=0.5, step=0.05, record_every=0.25, progress=False)
    tags = ref.characteristics(P0[[3, 7, 11]])
    torch.testing.assert_close(tags, ref.population[:, [3, 7, 11]], rtol=0, atol=1e-13)
    assert float((ref.population[-1] - P0).abs().max()) > 1e-3


def test_reference_flow_keeps_the_population_at_the_steps_asked_for(task):
    """keep_at between recordings: the population kept after step k is the flow's own state there,
    as a flow recording at every step (an independent path through the recordings) has it."""
    P0 = cloud(task, 8, 6)
    every = reference_flow(task.model, task.data, P0, T=0.5, step=0.05, record_every=0.05, progress=False,
                           keep_stages=False)
    sparse = reference_flow(task.model, task.data, P0, T=0.5, step=0.05, record_every=0.5, keep=0,
                            keep_stages=False, keep_at=[0, 3, 7, 10], progress=False)
    assert sorted(sparse.kept) == [0, 3, 7, 10] and sparse.population.shape[1] == 0
    for k, W in sparse.kept.items():
        torch.testing.assert_close(W, every.population[k], rtol=0, atol=0)
    assert float((sparse.kept[7] - sparse.kept[3]).abs().max()) > 1e-4  # they moved in between
    assert every.kept is None
    for bad in ([11], [-1], [2.0], [True]):
        with pytest.raises(ValueError, match="keep_at"):
            reference_flow(task.model, task.data, P0, T=0.5, step=0.05, record_every=0.5, keep_at=bad,
                           progress=False)


def test_full_batch_gd_error_halves_when_eps_halves(task):
    """GD has no martingale term: its distance to the N-particle flow is the Euler error O(eps)."""
    h0 = cloud(task, 8, 5)
    ref = reference_flow(task.model, task.data, h0, T=1.0, step=1 / 64, record_every=0.25, progress=False)
    errs = []
    for eps in (1 / 8, 1 / 16, 1 / 32):
        tr = sgd(task.model, task.data, h0, eps=eps, T=1.0, record_every=0.25, batch_size=None,
                 generator=torch.Generator(), progress=False)
        errs.append(float((tr.heads - ref.population).norm(dim=-1).max()))
    assert errs[0] > 1e-4
    for a, b in zip(errs, errs[1:]):
        assert 1.8 < a / b < 2.2, errs


def test_reference_flow_is_fourth_order(task):
    P0 = cloud(task, 6, 6, scale=1.2)
    fine = reference_flow(task.model, task.data, P0, T=1.0, step=1 / 512, record_every=1.0, progress=False)
    errs = [float((reference_flow(task.model, task.data, P0, T=1.0, step=h, record_every=1.0,
                                  progress=False).population[-1] - fine.population[-1]).norm())
            for h in (1 / 16, 1 / 32)]
    assert 13 < errs[0] / errs[1] < 19, errs  # 2^4 = 16 (17.6 measured: still slightly pre-asymptotic)


def test_reference_flow_dissipates_energy_at_rate_2_zeta_I(task):
    """Theorem 6.1, dE/dt = -2 zeta I: integrate the recorded dissipation by Simpson's rule."""
    P0 = cloud(task, 32, 7, scale=1.0)
    z = Constant(0.8)
    ref = reference_flow(task.model, task.data, P0, T=1.0, step=1 / 32, record_every=1 / 32, zeta=z, progress=False)
    I, dt = ref.dissipation.numpy(), 1 / 32
    simpson = dt / 3 * (I[0] + I[-1] + 4 * I[1:-1:2].sum() + 2 * I[2:-1:2].sum())
    drop = float(ref.risk[0] - ref.risk[-1])
    assert drop > 0 and math.isclose(drop, 2 * 0.8 * simpson, rel_tol=1e-5)


def test_profiles_and_rescaled_time():
    from scipy.integrate import quad

    d = Decaying(0.9, 3.0, 0.5)
    assert math.isclose(d.integral(7.0), quad(d, 0, 7.0)[0], rel_tol=1e-10)
    d1 = Decaying(0.9, 3.0, 1.0)
    assert math.isclose(d1.integral(7.0), quad(d1, 0, 7.0)[0], rel_tol=1e-10)
    assert rescaled_time(0.5, 4.0) == 4.0
    assert math.isclose(rescaled_time(lambda t: 1 / (1 + t), 3.0), 2 * math.log(4.0), rel_tol=1e-10)
    with pytest.raises(ValueError, match="^power"):
        Decaying(1.0, 1.0, 1.5)
    with pytest.raises(ValueError, match="^zeta"):
        as_profile("fast")
    with pytest.raises(ValueError, match="^zeta"):
        Constant(-1.0)


def test_bad_arguments_raise(task):
    h0 = cloud(task, 3, 0)
    g = torch.Generator()
    with pytest.raises(ValueError, match="^eps"):
        sgd(task.model, task.data, h0, eps=0.3, T=1.0, record_every=0.5, generator=g)
    with pytest.raises(ValueError, match="^T"):
        sgd(task.model, task.data, h0, eps=0.1, T=1.05, record_every=0.5, generator=g)
    with pytest.raises(ValueError, match="^batch_size"):
        sgd(task.model, task.data, h0, eps=0.1, T=1.0, record_every=0.5, generator=g, batch_size=0)
    with pytest.raises(ValueError, match="^heads0"):
        sgd(task.model, task.data, h0[:, :-1], eps=0.1, T=1.0, record_every=0.5, generator=g)
    with pytest.raises(ValueError, match="^generator"):
        sgd(task.model, task.data, h0, eps=0.1, T=1.0, record_every=0.5, generator=None)
    with pytest.raises(ValueError, match="^step"):
        reference_flow(task.model, task.data, h0, T=1.0, step=-0.1, record_every=0.5)


def test_resumed_sweep_equals_uninterrupted(tmp_path):
    calls = []

    def fn(a, b):
        calls.append((a, b))
        if len(calls) == 3 and interrupt["on"]:
            raise KeyboardInterrupt
        return {"value": a * 10 + b, "sq": [a, b * b]}

    points = [{"a": a, "b": b} for a in range(2) for b in range(3)]
    interrupt = {"on": False}
    whole = run_sweep(fn, points, tmp_path / "whole", progress=False)
    calls.clear()
    interrupt["on"] = True
    with pytest.raises(KeyboardInterrupt):
        run_sweep(fn, points, tmp_path / "resumed", progress=False)
    assert len(list((tmp_path / "resumed").glob("*.json"))) == 2  # two finished points saved
    interrupt["on"] = False
    calls.clear()
    resumed = run_sweep(fn, points, tmp_path / "resumed", progress=False)
    assert len(calls) == 4  # only the unfinished points ran
    assert resumed == whole
    saved = [json.loads(p.read_text()) for p in (tmp_path / "resumed").glob("*.json")]
    assert sorted(s["result"]["value"] for s in saved) == sorted(w["value"] for w in whole)


def test_wasserstein_of_a_translate_and_lipschitz_discrepancy():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(40, 5, generator=g, dtype=torch.float64)
    v = torch.tensor([0.3, -0.4, 0.0, 0.0, 0.0], dtype=torch.float64)
    assert math.isclose(wasserstein(a, a + v, p=2), 0.5, rel_tol=1e-9)  # a translate moves every point by v
    w1 = wasserstein(a, torch.randn(50, 5, generator=g, dtype=torch.float64), p=1)
    w2 = wasserstein(a, torch.randn(50, 5, generator=g, dtype=torch.float64), p=2)
    assert 0 < w1 and 0 < w2
    sliced = wasserstein(a, a + v, p=2, exact_max=10)
    assert sliced <= 0.5 + 1e-9
    dirs = torch.cat([v[None] / 0.5, torch.randn(3, 5, generator=g, dtype=torch.float64)])
    centers = torch.randn(4, 5, generator=g, dtype=torch.float64)
    assert math.isclose(lipschitz_discrepancy(a + v, a, dirs, centers), 0.5, rel_tol=1e-12)
    with pytest.raises(ValueError, match="^b"):
        wasserstein(a, a[:, :3])


def test_sgd_records_dissipation_statistics_and_a_subsample(task):
    h0 = cloud(task, 6, 8)
    tr = sgd(task.model, task.data, h0, eps=0.1, T=0.4, record_every=0.2, keep=2, dissipation=True,
             statistics={"mean_norm": lambda h: h.norm(dim=1).mean()},
             generator=torch.Generator().manual_seed(2), progress=False)
    assert tr.heads.shape == (3, 2, task.model.d_omega)
    torch.testing.assert_close(tr.heads[0], h0[:2])
    torch.testing.assert_close(tr.dissipation[0], task.model.dissipation(task.data, h0))
    assert tr.stats["mean_norm"].shape == (3,)
    assert math.isclose(float(tr.stats["mean_norm"][0]), float(h0.norm(dim=1).mean()), rel_tol=1e-12)
    with pytest.raises(ValueError, match="^statistics"):
        sgd(task.model, task.data, h0, eps=0.1, T=0.2, record_every=0.2, statistics={"x": 1},
            generator=torch.Generator())


def test_chaos_errors_against_the_tagged_characteristics(task):
    """The discrepancies against the run's own tagged characteristics vanish at t = 0 (same draw), are
    bounded by the mean pathwise error (every test function of (24) is 1-Lipschitz: the coupling bound),
    and the risk discrepancy is |E_N(run) - E_N(tags)| computed directly."""
    from mfattn.analysis.chaos import chaos_errors

    h0 = cloud(task, 6, 3)
    P0 = cloud(task, 64, 4)
    ref = reference_flow(task.model, task.data, P0, T=0.5, step=1 / 32, record_every=0.25, progress=False)
    run = sgd(task.model, task.data, h0, eps=0.05, T=0.5, record_every=0.25, batch_size=2,
              generator=torch.Generator().manual_seed(0), progress=False)
    tags = ref.characteristics(h0)
    g = torch.Generator().manual_seed(1)
    dirs = torch.randn(5, task.model.d_omega, generator=g, dtype=torch.float64)
    centers = torch.randn(3, task.model.d_omega, generator=g, dtype=torch.float64)
    out = chaos_errors(run, tags, ref.population, ref.risk, dirs, centers, model=task.model, data=task.data)
    assert out["d24_tags"][0] == 0.0 and out["d25_tags"][0] == 0.0
    mean_e = (run.heads - tags).norm(dim=-1).mean(1)
    assert all(d <= float(m) + 1e-12 for d, m in zip(out["d24_tags"], mean_e))
    assert max(out["d24_tags"]) > 0
    for j in range(len(out["d25_tags"])):
        direct = abs(float(task.model.risk(task.data, run.heads[j])) - float(task.model.risk(task.data, tags[j])))
        assert math.isclose(out["d25_tags"][j], direct, rel_tol=1e-12, abs_tol=1e-15)
    assert "d25_tags" not in chaos_errors(run, tags, ref.population, ref.risk, dirs, centers)


@pytest.mark.parametrize("d", [1, 2, 32])
def test_uniform_ball_is_uniform_on_the_ball(d):
    """The compact rho_0 of chapter 02 (Assumption 3.2): inside the ball, the second moment d R^2/(d+2),
    the radial law P(||w|| <= r) = (r/R)^d, no preferred direction, reproducible for a seed."""
    n, R = 20000, 1.7
    w = uniform_ball(n, d, R, generator=torch.Generator().manual_seed(d))
    assert w.shape == (n, d) and w.dtype == torch.float64 and w.device.type == "cpu"
    r = w.norm(dim=1)
    assert float(r.max()) <= R and float(r.max()) > R * (1 - 10 / (d * n))  # the boundary is reached
    m2, var = R**2 * d / (d + 2), R**4 * d / (d + 4) - (R**2 * d / (d + 2)) ** 2  # moments of ||w||^2
    assert abs(float(r.pow(2).mean()) - m2) <= 4 * math.sqrt(var / n)
    for q in (0.5, 0.9):  # a radius R U (not R U^(1/d)) would put half the mass inside R/2
        p = q**d
        assert abs(float((r <= q * R).double().mean()) - p) <= 4 * math.sqrt(p * (1 - p) / n) + 1 / n
    assert float(w.mean(0).norm()) <= 4 * R * math.sqrt(d / (d + 2) / n)  # centred
    assert torch.equal(w, uniform_ball(n, d, R, generator=torch.Generator().manual_seed(d)))
    assert not torch.equal(w, uniform_ball(n, d, R, generator=torch.Generator().manual_seed(d + 100)))
    assert uniform_ball(3, d, R, generator=torch.Generator(), dtype=torch.float32).dtype == torch.float32


def test_uniform_ball_bad_arguments_raise():
    g = torch.Generator().manual_seed(0)
    for kwargs, name in ((dict(n=0, d=2, radius=1.0), "n"), (dict(n=2.5, d=2, radius=1.0), "n"),
                         (dict(n=4, d=0, radius=1.0), "d"), (dict(n=4, d=2, radius=0.0), "radius"),
                         (dict(n=4, d=2, radius=float("inf")), "radius")):
        with pytest.raises(ValueError, match=f"^{name}"):
            uniform_ball(generator=g, **kwargs)
    with pytest.raises(ValueError, match="^generator"):
        uniform_ball(4, 2, 1.0, generator=None)


@pytest.mark.parametrize("damage", [b"{not json", b"", b"PK\x03\x04 cut short"])
def test_a_damaged_cache_entry_is_named_removed_and_computed_again(tmp_path, capsys, damage):
    import torch

    from mfattn.companion.sweep import memo, point_key, run_sweep

    calls = []

    def fn(x):
        calls.append(x)
        return {"y": 2 * x}

    assert run_sweep(fn, [dict(x=1)], tmp_path, progress=False) == [{"x": 1, "y": 2}]
    entry = tmp_path / f"{point_key(dict(x=1))}.json"
    entry.write_bytes(damage)
    assert run_sweep(fn, [dict(x=1)], tmp_path, progress=False) == [{"x": 1, "y": 2}] and calls == [1, 1]
    assert str(entry) in capsys.readouterr().err and entry.exists()  # named, and written again

    def g(n):
        calls.append(n)
        return {"t": torch.arange(n, dtype=torch.float64)}

    assert memo(g, dict(n=3), tmp_path)["t"].tolist() == [0.0, 1.0, 2.0]
    saved = tmp_path / f"memo-{point_key(dict(n=3))}.pt"
    saved.write_bytes(damage)
    assert memo(g, dict(n=3), tmp_path)["t"].tolist() == [0.0, 1.0, 2.0] and calls[-2:] == [3, 3]
    assert str(saved) in capsys.readouterr().err
