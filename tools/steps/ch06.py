"""Step inventory of chapter 06-token-particles: the chapter's time is the batched Euler runs of the token
systems (`mfattn.models.tokens.simulate`, called by `mfattn.analysis.clusters.TokenSweep`): the twelve
settings on the circle (`settings_batch`, one batch per activation and initial configuration: 8 settings x
len(betas) systems with ReLU, 4 x len(betas) with GeLU), the same on every sphere of sphere_dims, USA descent
in Theorem 3.5's scaling (`regime_batch`, len(betas) systems), SA descent GeLU at the largest beta at three
n (`count_at_n`, n_seeds systems) and the animation's four systems (`show_run`). A step is one snapshot
interval of `simulate`, timed as `simulate` over STRETCH = 50 steps: 50 Euler steps (one velocity pass
each) and the snapshots every 10 steps (cluster count `cluster_labels`, energy, speed, host copies), from
the batch's tokens after WARM = 500 steps (gathered into clusters, as through most of a run: the cost of
`cluster_labels` on the spheres depends on them); simulate's extra snapshot at step 0 makes 6 per 5.

A batch's loop runs until its last system stops; a system that meets the stopping rule is dropped, so a
step costs a + b x (running systems). In every ci batch but count_at_n's some system hits the cap, so the
loop runs max_steps steps. With F the share of systems that hit the cap and S the mean stopping step of
the others, a batch runs B x SYS system-steps, SYS = F x max_steps + (1 - F) x min(S, max_steps): counted
as SYS / STRETCH intervals of the full batch, plus (max_steps - SYS) / STRETCH intervals of a one-system
batch (the per-step cost a that does not shrink with the batch). F and S are properties of the dynamics,
read off the committed configuration's ci runs (seed 0, stopping record of every system; see STOPS), not
timings; at the paper's cap (40x longer) F is an estimate (some capped systems would converge, and the
metastable ones stay capped). count_at_n's runs all converge, by step STOP_AT_N at every n."""

import mfattn  # noqa: F401  first: the thread policy

import json

import torch

from mfattn.analysis import clusters as cl
from mfattn.companion.chapters import repo_root
from mfattn.models import tokens as tk

WARM = 500  # steps run in make() before the timed interval (the snapshots' cost depends on the clusters)
STRETCH = 50  # steps of one timed interval (5 snapshots, plus simulate's snapshot at step 0)
# (share of systems that hit the cap, mean stopping step of the others), per kind of batch and activation,
# from the ci runs (max_steps 5000, n 96; circle: 3 configurations, spheres: 2 per d, regime: 3)
STOPS = {("circle", "relu"): (46 / 192, 1494), ("circle", "gelu"): (18 / 96, 1040),
         ("S2", "relu"): (32 / 128, 1185), ("S2", "gelu"): (8 / 64, 778),  # d = 3
         ("S7", "relu"): (58 / 128, 1263), ("S7", "gelu"): (22 / 64, 918),  # d = 8
         ("regime", "relu"): (15 / 24, 3123), ("regime", "gelu"): (9 / 24, 2412)}
STOP_AT_N = 1310  # count_at_n: the last stop of its runs (1310, 1240, 1280 steps at n = 96, 200, 400)
SHOWN = [("USA", "ascent", "none"), ("USA", "ascent", "gelu"), ("SA", "descent", "none"), ("SA", "descent", "gelu")]


def _stops(kind, d, act):
    """(F, S) of a batch: the circle's, the regime's, or on S^(d-1) interpolated linearly in d between the
    measured d = 3 and d = 8 (held constant outside)."""
    if kind != "sphere":
        return STOPS[kind, act]
    (f3, s3), (f8, s8) = STOPS["S2", act], STOPS["S7", act]
    x = min(max((d - 3) / 5, 0.0), 1.0)
    return f3 + x * (f8 - f3), s3 + x * (s8 - s3)


def _sweep(p, device):
    with open(repo_root() / "notebooks" / "data" / "06-public-code.json") as f:
        public = json.load(f)
    return cl.TokenSweep(n=p["n"], betas=p["betas"], dt=p["dt"], max_steps=p["max_steps"], seed=p["seed"],
                         beta_show=p["beta_show"], given=public["perceptrons"], device=device)


def _chosen(act):
    return [s for s in tk.SETTINGS if s[2] == act or (act == "relu" and s[2] == "none")]


def _system(sw, kind, d, act, one):
    """The batch's systems as the chapter builds them; ``one``: a single system of it."""
    if kind == "regime":
        betas, w = (sw.betas[-1:], tk.theorem35_weight(sw.betas[-1:])) if one else (sw.betas, tk.theorem35_weight(sw.betas))
        return tk.TokenSystem.settings([("USA", "descent", act)], betas, sw.perceptron(2, act), weight=w)
    if kind == "at_n":
        return tk.TokenSystem.settings([("SA", "descent", "gelu")], [float(sw.betas[-1])] * (1 if one else d),
                                       sw.perceptron(2, "gelu"))
    if kind == "show":
        return tk.TokenSystem.settings(SHOWN, [sw.beta_show], sw.perceptron(2, "gelu"))
    chosen = _chosen(act)
    return tk.TokenSystem.settings(chosen[-1:] if one else chosen, sw.betas[-1:] if one else sw.betas,
                                   sw.perceptron(d, act))


def _interval(p, device, kind, d, act, one=False, n=None):
    """STRETCH steps of `simulate` on the batch (or one system of it) from a uniform configuration, with
    its snapshots; no system stops (drift_tol 0)."""
    def make():
        sw = _sweep(p, device)
        dim = 2 if kind in ("regime", "at_n", "show") else d
        system = _system(sw, kind, d, act, one)
        X0 = sw.tokens(dim, 0, n).expand(system.B, -1, -1).contiguous()
        if not one:  # the tokens after WARM steps: gathered into clusters, as through most of a run
            X0 = tk.simulate(X0, system, dt=p["dt"], max_steps=min(WARM, p["max_steps"]), progress=False).X

        def step():
            run = tk.simulate(X0, system, dt=p["dt"], max_steps=STRETCH, drift_tol=1e-300, progress=False)
            float(run.X[0, 0, 0])
        return step
    return make


def _batch_entries(p, device, kind, d, act, n_batches, B):
    M = p["max_steps"]
    F, S = _stops(kind, d, act)
    sys_steps = F * M + (1 - F) * min(S, M)
    where = {"circle": "circle", "sphere": f"S^{d - 1}", "regime": "circle, Thm 3.5 scaling"}[kind]
    return [
        dict(what=f"{where} {act}: {STRETCH} Euler steps + snapshots, {B} systems x n = {p['n']}",
             count=n_batches * sys_steps / STRETCH, make=_interval(p, device, kind, d, act)),
        dict(what=f"{where} {act}: {STRETCH} steps of one system (the loop's fixed cost)",
             count=n_batches * (M - sys_steps) / STRETCH, make=_interval(p, device, kind, d, act, one=True)),
    ]


def inventory(p: dict, device) -> list[dict]:
    nb, M = len(p["betas"]), p["max_steps"]
    out = []
    for act, k in (("relu", 8), ("gelu", 4)):  # settings per batch
        out += _batch_entries(p, device, "circle", 2, act, p["n_seeds"], k * nb)
        for d in p["sphere_dims"]:
            out += _batch_entries(p, device, "sphere", d, act, p["sphere_seeds"], k * nb)
    for act in ("relu", "gelu"):
        out += _batch_entries(p, device, "regime", 2, act, p["n_seeds"], nb)
    for n_ in sorted({p["n"], 200, 400}):  # count_at_n: every system runs until about STOP_AT_N
        out.append(dict(what=f"count_at_n: {STRETCH} Euler steps + snapshots, {p['n_seeds']} systems x n = {n_}",
                        count=min(STOP_AT_N, M) / STRETCH, make=_interval(p, device, "at_n", p["n_seeds"], "gelu", n=n_)))
    # show_run: four systems until the last stops, at the cap in the ci run
    out.append(dict(what=f"show_run: {STRETCH} Euler steps + snapshots, 4 systems x n = {p['n']}", count=M / STRETCH,
                    make=_interval(p, device, "show", 2, "gelu")))
    return out
