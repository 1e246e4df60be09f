"""Token particles on the sphere (mfattn.models.tokens): the gradient structure against autograd, energy
monotonicity, the sphere constraint, integrator orders, cluster counting and the stopping rule."""

import math

import numpy as np
import pytest
import torch

from mfattn.models import tokens as tk


def _systems(perceptron, betas=(0.5, 4.0, 20.0)):
    """Ascent and descent, USA and SA, with and without the perceptron, for each beta."""
    out = []
    for sign in (1, -1):
        for normalized in (False, True):
            for mlp in (False, True):
                out.append(tk.TokenSystem.grid(betas, sign=sign, normalized=normalized, mlp=mlp, perceptron=perceptron))
    return tk.TokenSystem.concat(out)


@pytest.mark.parametrize("d,activation", [(2, "relu"), (3, "gelu"), (5, "relu")])
def test_usa_velocity_is_n_times_the_spherical_gradient_of_the_energy(d, activation):
    g = torch.Generator().manual_seed(0)
    per = tk.Perceptron.sample(d, generator=g, activation=activation, units=3)
    s = _systems(per)
    X = tk.uniform_sphere(s.B, 9, d, generator=g)
    Xr = X.clone().requires_grad_()
    (grad,) = torch.autograd.grad(tk.energy(Xr, s).sum(), Xr)
    tangent = grad - (grad * X).sum(-1, keepdim=True) * X
    v = tk.velocity(X, s)
    usa = ~s.normalized
    expect = s.sign[:, None, None] * 9 * tangent
    assert torch.allclose(v[usa], expect[usa], rtol=1e-10, atol=1e-12)
    # SA without perceptron: the same direction, rescaled token by token by n / sum_j g(x_i, x_j)
    sa = s.normalized & (s.mlp == 0)
    W = torch.exp(s.beta[:, None, None] * ((X @ X.transpose(1, 2)).clamp(max=1) - 1))
    scale = 9 / W.sum(-1, keepdim=True)
    assert torch.allclose(v[sa], (expect * scale)[sa], rtol=1e-10, atol=1e-12)


def test_perceptron_drift_is_the_gradient_of_its_potential():
    per = tk.Perceptron.sample(4, generator=torch.Generator().manual_seed(1), units=6, activation="gelu")
    X = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(per.potential(X).sum(), X)
    assert torch.allclose(g, per.drift(X.detach()), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("method", ["euler", "heun", "rk4"])
def test_tokens_stay_on_the_sphere(method):
    g = torch.Generator().manual_seed(2)
    per = tk.Perceptron.sample(3, generator=g)
    s = _systems(per)
    X = tk.uniform_sphere(s.B, 40, 3, generator=g)
    for _ in range(200):
        X = tk.step(X, s, 0.1, method)
    assert float((X.norm(dim=-1) - 1).abs().max()) < 1e-14


def test_energy_rises_along_ascent_and_falls_along_descent():
    """USA (with and without the perceptron) and pure SA are gradient flows of F: monotone for small steps."""
    g = torch.Generator().manual_seed(3)
    per = tk.Perceptron.sample(2, generator=g, activation="relu")
    s = _systems(per, betas=(0.5, 3.0, 10.0))
    grad_flow = ~s.normalized | (s.mlp == 0)
    X = tk.uniform_sphere(s.B, 64, 2, generator=g)
    E = [tk.energy(X, s)]
    for _ in range(300):
        X = tk.step(X, s, 0.01)
        E.append(tk.energy(X, s))
    dE = torch.diff(torch.stack(E), dim=0) * s.sign  # ascent: dE >= 0; descent: -dE >= 0
    assert bool((dE[:, grad_flow] >= -1e-15).all())
    # and it moved: not a vacuous monotonicity
    assert bool(((E[-1] - E[0]).abs()[grad_flow] > 1e-5).all())


def test_integrator_orders():
    g = torch.Generator().manual_seed(4)
    per = tk.Perceptron.sample(3, generator=g, activation="gelu")  # smooth field: ReLU's kink caps the order
    s = tk.TokenSystem.grid([2.0], sign=-1, mlp=True, perceptron=per)
    X0 = tk.uniform_sphere(1, 12, 3, generator=g)

    def run(dt, method, T=0.5):
        X = X0
        for _ in range(round(T / dt)):
            X = tk.step(X, s, dt, method)
        return X

    ref = run(1 / 2048, "rk4")
    for method, order in (("euler", 1), ("heun", 2), ("rk4", 4)):
        e1 = float((run(1 / 16, method) - ref).norm())
        e2 = float((run(1 / 32, method) - ref).norm())
        assert math.log2(e1 / e2) == pytest.approx(order, abs=0.3), (method, e1, e2)


def _clusters_on_circle(centres, sizes, jitter, g):
    ang = torch.cat([c + jitter * (torch.rand(k, generator=g, dtype=torch.float64) - 0.5)
                     for c, k in zip(centres, sizes)])
    return torch.stack([torch.cos(ang), torch.sin(ang)], -1)


def test_cluster_counting_on_constructed_configurations():
    g = torch.Generator().manual_seed(5)
    # three clusters on the circle, one straddling the cut at angle pi; masses 10/40, 20/40, 10/40
    A = _clusters_on_circle([math.pi, 0.3, -1.7], [10, 20, 10], 0.05, g)
    # the same three merge into one at a threshold wider than their gaps
    labels, counts = tk.cluster_labels(A[None], [0.1])
    assert counts.tolist() == [3]
    assert sorted(tk.cluster_masses(labels)[0].tolist()) == [0.25, 0.25, 0.5]
    assert len(set(labels[0, :10].tolist())) == 1  # the straddling cluster has one label
    assert tk.cluster_labels(A[None], [2.5])[1].tolist() == [1]
    # a chain of points spaced 0.08 apart is one cluster at threshold 0.1 (single linkage), 12 at 0.05
    chain = _clusters_on_circle([0.08 * k for k in range(12)], [1] * 12, 0.0, g)
    assert tk.cluster_labels(chain[None], [0.1])[1].tolist() == [1]
    assert tk.cluster_labels(chain[None], [0.05])[1].tolist() == [12]
    # anchored chaining (the public code's circle rule) agrees on atoms and chops the chain into arcs
    assert tk.anchored_counts(A[None], [0.1]).tolist() == [3]
    assert tk.anchored_counts(chain[None], [0.1]).tolist() == [6]  # arcs of two: 0.08 <= 0.1 < 0.16
    # on S^2: four tight groups at the vertices of a tetrahedron, batched with a uniform cloud
    V = torch.tensor([[1, 1, 1], [1, -1, -1], [-1, 1, -1], [-1, -1, 1]], dtype=torch.float64) / math.sqrt(3)
    P = (V.repeat_interleave(5, 0) + 0.01 * torch.randn(20, 3, generator=g, dtype=torch.float64))
    P = P / P.norm(dim=1, keepdim=True)
    U = tk.uniform_sphere(1, 20, 3, generator=g)[0]
    labels, counts = tk.cluster_labels(torch.stack([P, U]), [0.2, 1e-6])
    assert counts.tolist() == [4, 20]
    assert tk.cluster_masses(labels)[0].tolist() == [0.25] * 4
    # thresholds: c / sqrt(beta), capped at pi / (2 d)
    assert np.allclose(tk.cluster_threshold([0.01, 4.0], 2), [math.pi / 4, 0.25])


def test_stopping_rule_and_freezing():
    """A system already at a stationary point stops after `window` snapshots; a moving one does not."""
    g = torch.Generator().manual_seed(6)
    s = tk.TokenSystem.grid([1.0, 1.0], sign=1)
    X0 = tk.uniform_sphere(2, 30, 2, generator=g)
    X0[0] = X0[0, :1].expand(30, 2)  # all tokens at one point: a Dirac mass, stationary
    run = tk.simulate(X0, s, dt=0.05, max_steps=200, snapshot_every=10, window=5, progress=False)
    assert run.converged.tolist() == [True, False] or (run.converged[0] and run.stop_step[1] > run.stop_step[0])
    assert run.stop_step[0] == 40  # snapshots at 0, 10, 20, 30, 40: five equal counts
    assert torch.equal(run.X[0], X0[0])
    assert run.counts[0, 0] == 1


def test_bad_inputs():
    s = tk.TokenSystem.grid([1.0])
    X = tk.uniform_sphere(1, 5, 3, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="X"):
        tk.velocity(2 * X, s)
    with pytest.raises(ValueError, match="X"):
        tk.velocity(X.repeat(2, 1, 1), s)
    with pytest.raises(ValueError, match="beta"):
        tk.TokenSystem.grid([0.0])
    with pytest.raises(ValueError, match="perceptron"):
        tk.TokenSystem.grid([1.0], mlp=True)
    with pytest.raises(ValueError, match="dt"):
        tk.step(X, s, -0.1)
    with pytest.raises(ValueError, match="method"):
        tk.step(X, s, 0.1, "midpoint")
    with pytest.raises(ValueError, match="directions"):
        tk.Perceptron(torch.ones(2, 3, dtype=torch.float64), torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="perceptron"):
        per = tk.Perceptron.sample(2, generator=torch.Generator().manual_seed(0))
        tk.velocity(X, tk.TokenSystem.grid([1.0], mlp=True, perceptron=per))


@pytest.mark.parametrize("d", [2, 3, 6])
def test_batched_cluster_labels_match_scipy_connected_components(d):
    """The batched components (no loop over systems) against scipy's graph algorithm, one system at a time."""
    from scipy.sparse.csgraph import connected_components

    g = torch.Generator().manual_seed(d)
    # clumpy configurations: a few centres, tokens scattered around them at several scales
    B, n = 7, 60
    centres = tk.uniform_sphere(B, 5, d, generator=g)
    pick = torch.randint(0, 5, (B, n), generator=g)
    X = centres[torch.arange(B)[:, None], pick] + 0.15 * torch.randn(B, n, d, generator=g, dtype=torch.float64)
    X = X / X.norm(dim=-1, keepdim=True)
    thr = np.linspace(0.05, 0.6, B)
    labels, counts = tk.cluster_labels(X, thr)
    for b in range(B):
        adj = np.arccos(np.clip((X[b] @ X[b].T).numpy(), -1, 1)) <= thr[b]
        k, lab = connected_components(adj, directed=False)
        assert counts[b] == k
        # the same partition: labels agree up to a renumbering
        pairs = set(zip(labels[b].tolist(), lab.tolist()))
        assert len(pairs) == k == len(set(labels[b].tolist()))
        assert sorted(labels[b].unique().tolist()) == list(range(k))
        if d > 2:  # on the spheres numbered by their smallest token (on the circle in angular order)
            first = [labels[b].tolist().index(c) for c in range(k)]
            assert first == sorted(first)
    if d > 2:  # the GPU's path (label propagation), run here on the CPU, gives the same labels
        adj = torch.arccos((X @ X.transpose(1, 2)).clamp(-1, 1)) <= torch.as_tensor(thr)[:, None, None]
        assert torch.equal(tk._components_on_device(adj), labels)


def test_theorem35_weight_makes_the_engine_a_time_change_of_the_papers_dynamics():
    """With the perceptron weighted by exp(-beta), exp(beta) times the engine's velocity is the paper's, whose
    kernel is exp(beta <x, y>) (written out here independently of the engine)."""
    g = torch.Generator().manual_seed(21)
    d, n = 3, 9
    per = tk.Perceptron.sample(d, generator=g, activation="gelu")
    betas = [0.5, 2.0, 7.0]
    X = tk.uniform_sphere(len(betas), n, d, generator=g)
    w = torch.as_tensor(tk.theorem35_weight(betas))
    for sign in (1, -1):
        base = tk.TokenSystem.grid(betas, sign=sign, mlp=True, perceptron=per)
        s = tk.TokenSystem(base.beta, base.sign, base.normalized, w, per)
        v = tk.velocity(X, s) * torch.exp(torch.tensor(betas, dtype=torch.float64))[:, None, None]
        for b, beta in enumerate(betas):
            x = X[b]
            att = (torch.exp(beta * (x @ x.T)) @ x) / n
            mlp = (per.scales * torch.nn.functional.gelu(x @ per.directions.T)) @ per.directions
            amb = att + mlp
            paper = sign * (amb - (amb * x).sum(1, keepdim=True) * x)
            assert torch.allclose(v[b], paper, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="mlp"):
        tk.TokenSystem(base.beta, base.sign, base.normalized, -w, per)


def test_mass_bound_constant_and_limits():
    a = torch.eye(2, dtype=torch.float64)
    relu = tk.Perceptron(a, torch.tensor([0.3, -0.9], dtype=torch.float64), "relu")
    gelu = tk.Perceptron(a, torch.tensor([0.3, -0.9], dtype=torch.float64), "gelu")
    betas = np.array([1.0, 3.0, 10.0, 200.0])
    mb = tk.mass_bound(betas, relu)
    floor = 4 / (4 + 0.75 * math.exp(11 / 8))
    assert abs(mb[-1] - floor) < 1e-12 and np.all(np.diff(mb) < 0)
    # the excess over the floor is proportional to C_theta e^{-beta}; C_theta scales with Lip(sigma) sum |s_m|
    z = torch.linspace(-6, 6, 120001, dtype=torch.float64, requires_grad=True)
    (dg,) = torch.autograd.grad(torch.nn.functional.gelu(z).sum(), z)
    lip_gelu = float(dg.abs().max())
    ratio = (tk.mass_bound(betas[:3], gelu) - floor) / (mb[:3] - floor)
    assert np.allclose(ratio, lip_gelu, rtol=1e-6)
    double = tk.Perceptron(a, torch.tensor([0.6, -1.8], dtype=torch.float64), "relu")
    assert np.allclose(tk.mass_bound(betas, double) - floor, 2 * (mb - floor))
    with pytest.raises(ValueError, match="beta"):
        tk.mass_bound([0.0], relu)


def test_arc_mass_against_brute_force():
    g = torch.Generator().manual_seed(8)
    B, n = 5, 40
    ang = torch.cat([0.3 * torch.randn(B, n // 2, generator=g, dtype=torch.float64),
                     2 * math.pi * torch.rand(B, n // 2, generator=g, dtype=torch.float64)], 1)
    X = torch.stack([torch.cos(ang), torch.sin(ang)], -1)
    widths = [0.0, 0.05, 0.2, 1.0, 3.5]
    got = tk.arc_mass(X, widths)
    for b, w in enumerate(widths):
        th = torch.atan2(X[b, :, 1], X[b, :, 0])
        best = 0
        for i in range(n):  # arcs starting at a token, counterclockwise
            delta = torch.remainder(th - th[i], 2 * math.pi)
            best = max(best, int((delta <= w + 1e-12).sum()))
        assert got[b] == best / n
    with pytest.raises(ValueError, match="X"):
        tk.arc_mass(tk.uniform_sphere(1, 4, 3, generator=g), 0.1)


def test_settings_grid_order_weight_and_refusals():
    """TokenSystem.settings: system i * len(betas) + j is setting i at betas[j]; the perceptron's weight
    is the given one where a setting has a perceptron and 0 elsewhere; a setting whose activation is
    not the perceptron's is refused."""
    per = tk.Perceptron.sample(2, generator=torch.Generator().manual_seed(3), activation="gelu")
    chosen = [("USA", "ascent", "none"), ("SA", "descent", "gelu")]
    w = [0.5, 0.25, 0.125]
    s = tk.TokenSystem.settings(chosen, [1.0, 2.0, 4.0], per, weight=w)
    assert s.beta.tolist() == [1.0, 2.0, 4.0] * 2
    assert s.sign.tolist() == [1.0] * 3 + [-1.0] * 3
    assert s.normalized.tolist() == [False] * 3 + [True] * 3
    assert s.mlp.tolist() == [0.0] * 3 + w
    assert s.perceptron is per
    assert len(tk.SETTINGS) == 12 and len(set(tk.SETTINGS)) == 12
    with pytest.raises(ValueError, match="settings"):
        tk.TokenSystem.settings([("USA", "ascent", "relu")], [1.0], per)
    with pytest.raises(ValueError, match="settings"):
        tk.TokenSystem.settings([("USA", "sideways", "none")], [1.0])
    with pytest.raises(ValueError, match="settings"):
        tk.TokenSystem.settings([("USA", "ascent")], [1.0])
    with pytest.raises(ValueError, match="settings"):
        tk.TokenSystem.settings([], [1.0])
    with pytest.raises(ValueError, match="weight"):
        tk.TokenSystem.settings(chosen, [1.0, 2.0, 4.0], per, weight=[1.0, 2.0])


def test_summarize_against_the_run_read_directly():
    """summarize's entries, recomputed from the run's histories by hand: the step against the flow's
    direction, the clusters' masses (summing to one, heaviest first), anchored counts only on the
    circle."""
    for d in (2, 3):
        system = tk.TokenSystem.settings([("USA", "ascent", "none"), ("USA", "descent", "none")], [1.0, 30.0])
        X0 = tk.uniform_sphere(1, 24, d, generator=torch.Generator().manual_seed(d)).expand(4, -1, -1).contiguous()
        run = tk.simulate(X0, system, dt=0.1, max_steps=200, progress=False)
        out = tk.summarize(run, system, dt=0.1, paths=True)
        for b in range(4):
            steps = system.sign[b].item() * np.diff(run.energy[:, b])
            assert out["against"][b] == max(0.0, float(-steps.min()))
            assert abs(sum(out["masses"][b]) - 1) < 1e-12 and out["masses"][b] == sorted(out["masses"][b], reverse=True)
            assert out["heaviest"][b] == out["masses"][b][0] and len(out["masses"][b]) == out["count"][b]
            assert out["energy"][b] == run.energy[:, b].tolist()
        assert out["stop_t"] == (run.stop_step * 0.1).tolist()
        assert (out["anchored"] is None) == (d == 3)
        assert not any(math.copysign(1.0, a) < 0 for a in out["against"])  # no -0.0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("B,n,d", [(3, 1, 2), (4, 31, 2), (2, 33, 3), (5, 96, 8), (1, 200, 2)])
def test_fused_token_sums_equal_the_stored_kernel(B, n, d, dtype):
    """The fused pass against the torch path that stores the (n, n) kernel: S = W X, Z = W 1, for betas
    from 0.1 to 2000 (where most of the kernel underflows), token counts across the 32-lane blocks."""
    from mfattn.models import fused

    g = torch.Generator().manual_seed(B * n * d)
    X = tk.uniform_sphere(B, n, d, generator=g)
    beta = torch.logspace(-1, 3.3, B, dtype=torch.float64)
    S, Z = fused.token_sums(X.to(dtype), beta.to(dtype))
    X = X.to(dtype).double()  # the oracle in float64 on the same tokens
    W = tk.interaction_kernel(X, beta)
    assert S.dtype == Z.dtype == dtype and S.shape == (B, n, d) and Z.shape == (B, n)
    # the exponent beta (<x_i, x_j> - 1) carries the dot product's rounding times beta
    eps = torch.finfo(dtype).eps
    tol = 8 * eps * (1 + beta)
    assert bool(((S.double() - W @ X).abs().amax((1, 2)) / (W @ X).abs().amax((1, 2)) < tol).all())
    assert bool(((Z.double() - W.sum(-1)) / W.sum(-1)).abs().amax(1).lt(tol).all())


def test_simulated_systems_do_not_depend_on_the_systems_beside_them():
    """simulate steps only the systems still running: each system of a batch ends with the same bits,
    stop and record as when it runs alone."""
    g = torch.Generator().manual_seed(11)
    p = tk.Perceptron.sample(2, generator=g, activation="gelu")
    s = tk.TokenSystem.settings([("USA", "ascent", "none"), ("SA", "descent", "gelu")], [0.5, 5.0, 25.0], p)
    X0 = tk.uniform_sphere(s.B, 24, 2, generator=g)
    kw = dict(dt=0.1, max_steps=600, snapshot_every=10, keep_at=(0, 50, 400), progress=False)
    run = tk.simulate(X0, s, **kw)
    assert 0 < run.converged.sum() < s.B  # some stop early, some do not: the batch shrinks during the run
    for b in range(s.B):
        one = tk.TokenSystem(*(getattr(s, f)[b:b + 1] for f in ("beta", "sign", "normalized", "mlp")), p)
        alone = tk.simulate(X0[b:b + 1], one, **kw)
        assert torch.equal(alone.X[0], run.X[b])
        assert alone.stop_step[0] == run.stop_step[b] and alone.converged[0] == run.converged[b]
        S = len(alone.steps)  # a system alone ends its record at its stop; in the batch it repeats after
        np.testing.assert_array_equal(alone.energy[:, 0], run.energy[:S, b])
        np.testing.assert_array_equal(alone.counts[:, 0], run.counts[:S, b])
        assert (run.counts[S - 1:, b] == run.counts[S - 1, b]).all()
        for k in alone.kept:
            assert torch.equal(alone.kept[k][0], run.kept[k][b])


def test_fused_token_sums_same_bits_for_any_thread_count():
    import subprocess
    import sys

    code = ("import sys, hashlib, torch\n"
            "from mfattn.models import fused, tokens as tk\n"
            "torch.set_num_threads(int(sys.argv[1]))\n"
            "X = tk.uniform_sphere(6, 70, 3, generator=torch.Generator().manual_seed(0))\n"
            "S, Z = fused.token_sums(X, torch.linspace(0.5, 9, 6, dtype=torch.float64))\n"
            "print(hashlib.sha1(S.numpy().tobytes() + Z.numpy().tobytes()).hexdigest())\n")
    out = {t: subprocess.run([sys.executable, "-c", code, str(t)], capture_output=True, text=True,
                             check=True).stdout for t in (1, 2)}
    assert out[1] == out[2] and len(out[1]) > 20


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("d", [2, 3, 8])
def test_fused_velocity_equals_the_torch_path(d, activation, monkeypatch):
    """The fused velocity (attention sums, perceptron drift, projection in one pass) against the torch
    path that stores the kernel, for ascent and descent, USA and SA, with and without the perceptron,
    and a perceptron weight exp(-beta) (Theorem 3.5's scaling)."""
    from mfattn.models import fused

    g = torch.Generator().manual_seed(d)
    p = tk.Perceptron.sample(d, generator=g, units=5, activation=activation)
    s = _systems(p)
    s = tk.TokenSystem(s.beta, s.sign, s.normalized, s.mlp * torch.exp(-s.beta / 10), p)
    X = tk.uniform_sphere(s.B, 45, d, generator=g)
    v = tk.velocity(X, s)
    E = tk.energy(X, s)
    monkeypatch.setattr(fused, "available", lambda: False)
    v0, E0 = tk.velocity(X, s), tk.energy(X, s)
    scale = v0.abs().amax((1, 2), keepdim=True)
    assert float(((v - v0).abs() / scale).max()) < 1e-13
    assert float(((E - E0) / E0).abs().max()) < 1e-13


# ------------------------------------------------- chapter 06's experiments (mfattn.analysis.clusters)
def _sweep(**kw):
    from mfattn.analysis.clusters import TokenSweep

    return TokenSweep(**({"n": 10, "betas": [1.0, 5.0], "dt": 0.1, "max_steps": 60, "seed": 3, "beta_show": 5.0}
                         | kw))


def test_settings_batch_runs_the_streams_draws_through_the_plain_engine():
    """settings_batch against the engine called by hand: the tokens of stream ("tokens", d, k), one system
    per setting and beta built with TokenSystem.grid, the perceptron drawn from ("perceptron", d); the same
    final tokens, counts and stops, and the shown systems are those at beta_show."""
    from mfattn.flows.seeds import stream

    sw = _sweep(keep_at=(0, 20))
    out = sw.settings_batch(2, "gelu", 0)
    per = tk.Perceptron.sample(2, generator=stream(3, ("perceptron", 2)), activation="gelu")
    X0 = tk.uniform_sphere(1, 10, 2, generator=stream(3, ("tokens", 2, 0)))
    settings = [s for s in tk.SETTINGS if s[2] == "gelu"]
    assert [tuple(s) for s in out["setting"]] == [s for s in settings for _ in (1.0, 5.0)]
    for i, (mode, direction, _) in enumerate(settings):
        one = tk.TokenSystem.grid([1.0, 5.0], sign=1 if direction == "ascent" else -1, normalized=mode == "SA",
                                  mlp=True, perceptron=per)
        run = tk.simulate(X0.expand(2, -1, -1).contiguous(), one, dt=0.1, max_steps=60, keep_at=(0, 20),
                          progress=False)
        assert out["count"][2 * i:2 * i + 2] == run.counts[-1].tolist()
        assert out["stop_t"][2 * i:2 * i + 2] == (run.stop_step * 0.1).tolist()
        assert out["kept"]["final"][i] == run.X[1].tolist() and out["kept"]["20"][i] == run.kept[20][1].tolist()
    assert out["show"] == [1, 3, 5, 7] and all(out["beta"][i] == 5.0 for i in out["show"])
    assert sw.settings_batch(2, "gelu", 1)["show"] == [] and sw.settings_batch(4, "relu", 0)["show"] == []


def test_sweep_perceptron_from_gradient_form_vectors_and_refusals():
    """A perceptron given as omega_m = s_m a_m (raw directions) comes back with unit directions and the
    scales s_m; bad sizes are refused naming the argument."""
    a = torch.tensor([[3.0, 4.0, 0.0], [0.0, 0.0, 2.0]], dtype=torch.float64)
    s = torch.tensor([0.7, -1.3], dtype=torch.float64)
    unit = a / a.norm(dim=1, keepdim=True)
    given = {"3": {"directions": a.tolist(), "omega": (s[:, None] * unit).tolist()}}
    p = _sweep(given=given).perceptron(3, "relu")
    assert torch.allclose(p.directions, unit, atol=1e-15) and torch.allclose(p.scales, s, atol=1e-15)
    for kw, name in ((dict(n=0), "n"), (dict(dt=-1.0), "dt"), (dict(betas=[1.0, 0.0]), "betas"),
                     (dict(seed=-1), "seed")):
        with pytest.raises(ValueError, match=f"^{name}"):
            _sweep(**kw)


def test_count_at_n_and_show_run_against_systems_run_alone():
    """count_at_n batches one system per configuration: each count equals the anchored count of that
    configuration run alone; show_run's first frame is the initial configuration and its last frame the
    run's end."""
    from mfattn.analysis.clusters import TokenSweep

    sw = TokenSweep(n=10, betas=[1.0, 8.0], dt=0.1, max_steps=80, seed=1, beta_show=8.0)
    out = sw.count_at_n(12, 3)
    one = tk.TokenSystem.settings([("SA", "descent", "gelu")], [8.0], sw.perceptron(2, "gelu"))
    for k in range(3):
        run = tk.simulate(sw.tokens(2, k, 12), one, dt=0.1, max_steps=80, progress=False)
        assert out["counts"][k] == int(tk.anchored_counts(run.X, run.threshold)[0])
    settings = [("USA", "ascent", "none"), ("SA", "descent", "gelu")]
    show = sw.show_run(settings, frames=6)
    full = tk.simulate(sw.tokens(2, 0).expand(2, -1, -1).contiguous(),
                       tk.TokenSystem.settings(settings, [8.0], sw.perceptron(2, "gelu")), dt=0.1, max_steps=80,
                       progress=False)
    assert show.steps[0] == 0 and show.steps[-1] == int(full.stop_step.max())
    assert np.array_equal(show.frames[0], sw.tokens(2, 0).expand(2, -1, -1).numpy())
    assert np.array_equal(show.frames[-1], full.X.numpy())


def test_count_cells_spread_and_comparison_on_a_constructed_table():
    """count_cells, seed_spread and compare_counts on rows whose answers are known: ranges, the * of a
    capped run, the agreement within one cluster, and the kinds of the disagreements."""
    from mfattn.analysis.clusters import compare_counts, count_cells, seed_spread

    asc, dsc, relu = ("USA", "ascent", "gelu"), ("USA", "descent", "none"), ("SA", "descent", "relu")
    counts = {(asc, 1.0): [2, 2], (asc, 5.0): [3, 6], (dsc, 1.0): [1, 1], (dsc, 5.0): [9, 12],
              (relu, 1.0): [4, 7], (relu, 5.0): [5, 5]}
    rows = [dict(d=2, setting=s, beta=b, count=c, converged=not (s == asc and b == 5.0 and c == 6))
            for (s, b), cs in counts.items() for c in cs] + [dict(d=3, setting=asc, beta=1.0, count=40, converged=True)]
    cells = count_cells(rows, [asc, dsc, relu], [1.0, 5.0])
    assert [cells[k].text for k in counts] == ["2", "3-6*", "1", "9-12", "4-7", "5"]
    spread = seed_spread(cells)
    assert spread.by_setting == {asc: 3, dsc: 3, relu: 3} and (spread.converged, spread.capped) == (0, 3)
    assert spread.relu_descent == 3
    public = {"counts": {"USA ascent gelu": [4, 7, 0], "USA descent none": [3, 11, 0], "SA descent relu": [8, 5, 0]},
              "capped": [["USA ascent gelu", 1.0]]}
    cmp = compare_counts(cells, public, [1.0, 5.0, 9.0])
    # agree iff min - 1 <= public <= max + 1
    assert cmp.agree == {(asc, 1.0): False, (asc, 5.0): True, (dsc, 1.0): False, (dsc, 5.0): True,
                         (relu, 1.0): True, (relu, 5.0): True}
    assert cmp.both == [] and cmp.kinds() == {"diffuse": [(dsc, 1.0)], "relu": [], "capped": [(asc, 1.0)],
                                              "converged": []}
    with pytest.raises(ValueError, match="^rows"):
        count_cells(rows, [asc], [2.0])


def test_regime_test_and_descent_masses_against_plain_loops():
    """regime_test's ratios and single clusters, and descent_masses, against loops written out."""
    from mfattn.analysis.clusters import descent_masses, regime_test

    g = np.random.default_rng(0)
    reg = [dict(activation=a, arc=g.uniform(0.2, 1.0, 5).round(1).tolist(),
                converged=(g.uniform(size=5) < 0.7).tolist()) for a in ("relu", "gelu", "relu")]
    reg[1]["arc"][2], reg[1]["converged"][2], reg[2]["arc"][3], reg[2]["converged"][3] = 1.0, True, 1.0, False
    bounds = {"relu": g.uniform(0.5, 1.5, 5), "gelu": g.uniform(0.5, 1.5, 5)}
    ratios, singles = [], 0
    for j in range(5):
        for r in reg:
            if r["converged"][j]:
                singles += r["arc"][j] == 1.0
                if bounds[r["activation"]][j] < 1:
                    ratios.append(r["arc"][j] / bounds[r["activation"]][j])
    assert regime_test(reg, bounds) == (ratios, singles) and len(ratios) > 2 and singles > 0
    with pytest.raises(ValueError, match="^bounds"):
        regime_test(reg, {"relu": bounds["relu"]})
    rows = [dict(setting=s, beta=b, masses=sorted(g.dirichlet(np.ones(k)), reverse=True))
            for s in tk.SETTINGS for b in (1.0, 5.0) for k in (1, 3)]
    out = descent_masses(rows, [1.0, 5.0])
    desc = [r for r in rows if r["setting"][1] == "descent" and r["setting"][2] != "none"]
    assert out.systems == desc and out.single == sum(len(r["masses"]) == 1 for r in desc) == 8
    assert out.by_beta == [max(r["masses"][0] for r in desc if r["beta"] == b) for b in (1.0, 5.0)] == [1.0, 1.0]


def test_cluster_centres_and_angle_histograms_against_loops():
    """cluster_centres against the mean of each cluster's tokens taken one cluster at a time;
    angle_histograms against numpy.histogram system by system on the angles."""
    from mfattn.analysis.clusters import angle_histograms, cluster_centres

    g = torch.Generator().manual_seed(5)
    X = tk.uniform_sphere(1, 40, 3, generator=g)[0]
    masses, centres = cluster_centres(X.numpy(), 0.4)
    labels = tk.cluster_labels(X[None], 0.4)[0][0]
    assert masses.tolist() == (np.bincount(labels.numpy()) / 40).tolist() and abs(masses.sum() - 1) < 1e-12
    for k in range(len(masses)):
        c = X[labels == k].mean(0)
        assert np.allclose(centres[k], (c / c.norm()).numpy(), atol=1e-14)
    P = tk.uniform_sphere(3, 25, 2, generator=g).numpy()
    bins = np.linspace(-np.pi, np.pi, 13)
    expect = [np.bincount(np.minimum(np.digitize(np.arctan2(p[:, 1], p[:, 0]), bins) - 1, 11), minlength=12)
              for p in P]
    assert angle_histograms(P, bins).tolist() == [e.tolist() for e in expect]
    with pytest.raises(ValueError, match="^X"):
        angle_histograms(P[..., :1], bins)


def test_cell_series_against_the_rows_read_by_a_plain_loop():
    """cell_series along the betas equals the rows of each setting and beta collected by a loop over the
    rows (not through the cells), reduced by max and by the mean; a missing beta is refused."""
    from mfattn.analysis.clusters import cell_series, count_cells

    g = np.random.default_rng(4)
    settings, betas = [("USA", "ascent", "none"), ("SA", "descent", "gelu")], [1.0, 5.0, 25.0]
    rows = [dict(d=2, setting=s, beta=b, count=int(g.integers(1, 9)), heaviest=float(g.uniform()), converged=True)
            for s in settings for b in betas for _ in range(int(g.integers(1, 4)))]
    cells = count_cells(rows, settings, betas)
    for s in settings:
        for key in ("count", "heaviest"):
            expect = []
            for b in betas[::-1]:
                expect.append([r[key] for r in rows if r["setting"] == s and r["beta"] == b])
            assert cell_series(cells, s, betas[::-1], key) == expect
            assert cell_series(cells, list(s), betas[::-1], key, max) == [max(v) for v in expect]
            means = cell_series(cells, s, betas[::-1], key, np.mean)
            assert means == pytest.approx([sum(v) / len(v) for v in expect], rel=1e-15)
    with pytest.raises(ValueError, match="^cells"):
        cell_series(cells, settings[0], [1.0, 2.0])
