r"""Tokens as particles on the sphere: attention with a perceptron as an interacting particle system
(chapter 06; the companion paper on perceptrons, arXiv 2601.21366, sections 2 and 4).

``B`` independent systems of ``n`` tokens on :math:`S^{d-1}` are held in one tensor ``X (B, n, d)``; each
system has its own inverse temperature :math:`\beta`, sign (ascent or descent), normalisation (USA or
SA) and perceptron switch, so a whole sweep (all betas, several settings, several seeds) advances in
one batched step. With the kernel :math:`g_\beta(x,y)=e^{\beta(\langle x,y\rangle-1)}` and a perceptron
potential :math:`V(x)=\sum_m s_m\Sigma(\langle a_m,x\rangle)` (:math:`\Sigma'=\sigma`, eq. (2.6)), token
:math:`i` moves with

.. math::

    \dot x_i=\pm P_{x_i}\Big(A_i+\sum_m s_m\sigma(\langle a_m,x_i\rangle)\,a_m\Big),

    A_i=\frac1n\sum_j g_\beta(x_i,x_j)\,x_j\ \text{(USA)},\quad
    A_i=\frac{\sum_j g_\beta(x_i,x_j)\,x_j}{\sum_j g_\beta(x_i,x_j)}\ \text{(SA, (2.8))},

``+`` for ascent and ``-`` for descent (eq. (2.5)), :math:`P_x=I-xx^\top`. USA is the Wasserstein
gradient flow of the energy

.. math:: \mathsf F(\mu)=\frac1{2\beta}\iint g_\beta\,d\mu\,d\mu+\int V\,d\mu ,

(ascent raises it, descent lowers it: :math:`\dot x_i=\pm n\nabla^{S}_{x_i}\mathsf F`). SA divides the
attention field by its normaliser and leaves the perceptron as it is; pure SA is then a weighted
gradient flow of the same energy, SA with a perceptron is not a gradient flow of it.

These are the equations of the companion paper's public simulation code (checked beside it in
chapter 06): the kernel carries the factor :math:`e^{-\beta}` (the paper's :math:`e^{\beta\langle x,y\rangle}`
up to a time change by :math:`e^\beta`), the perceptron has unit directions :math:`a_m` and scales
:math:`s_m\sim N(0,1)`, and clusters are groups within geodesic distance
:math:`\min(c/\sqrt\beta,\pi/(2d))`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ._checks import check_generator, check_positive, check_tensor
from ._progress import progress_bar
from .activations import get_activation

__all__ = ["Perceptron", "TokenSystem", "uniform_sphere", "velocity", "energy", "step", "cluster_threshold",
           "cluster_labels", "anchored_counts", "cluster_masses", "TokenRun", "simulate"]


# ----------------------------------------------------------------------------- perceptron
@dataclass(frozen=True)
class Perceptron:
    """A fixed perceptron ``x -> sum_m s_m sigma(<a_m, x>) a_m``, the gradient of ``V = sum_m s_m Sigma(<a_m, x>)``.

    ``directions (K, d)`` are unit vectors ``a_m``, ``scales (K,)`` the ``s_m``; no bias (as in the paper).
    """

    directions: torch.Tensor
    scales: torch.Tensor
    activation: str = "relu"

    def __post_init__(self):
        check_tensor(self.directions, "directions", ndim=2)
        check_tensor(self.scales, "scales", ndim=1, dtype=self.directions.dtype, device=self.directions.device)
        if self.scales.shape[0] != self.directions.shape[0]:
            raise ValueError(f"scales: {self.scales.shape[0]} scales for {self.directions.shape[0]} directions")
        norms = self.directions.norm(dim=1)
        if float((norms - 1).abs().max()) > 1e-10:
            raise ValueError("directions: rows must be unit vectors")
        get_activation(self.activation)

    @classmethod
    def sample(cls, d: int, *, generator: torch.Generator, units: int | None = None, scale: float = 1.0,
               activation: str = "relu", dtype=torch.float64) -> "Perceptron":
        """``units`` (default ``d``) directions uniform on the sphere, then scales ``s_m ~ N(0, scale^2)``."""
        check_positive(d, "d", integer=True)
        check_generator(generator)
        units = d if units is None else units
        check_positive(units, "units", integer=True)
        check_positive(scale, "scale")
        g = torch.randn(units, d, generator=generator, dtype=torch.float64)
        s = scale * torch.randn(units, generator=generator, dtype=torch.float64)
        return cls((g / g.norm(dim=1, keepdim=True)).to(dtype), s.to(dtype), activation)

    def potential(self, X: torch.Tensor) -> torch.Tensor:
        """``V(x)`` at every row: ``(..., d) -> (...)``."""
        return get_activation(self.activation).primitive(X @ self.directions.T) @ self.scales

    def drift(self, X: torch.Tensor) -> torch.Tensor:
        """The ambient gradient ``sum_m s_m sigma(<a_m, x>) a_m``: ``(..., d) -> (..., d)``."""
        return (get_activation(self.activation).f(X @ self.directions.T) * self.scales) @ self.directions


# --------------------------------------------------------------------------------- systems
@dataclass(frozen=True)
class TokenSystem:
    """Per-system settings of a batch of ``B`` systems.

    ``beta (B,)`` > 0; ``sign (B,)`` +1 (ascent) or -1 (descent); ``normalized (B,)`` bool, True for SA;
    ``mlp (B,)`` 0 or 1, whether the perceptron acts on that system; ``perceptron`` shared by all.
    """

    beta: torch.Tensor
    sign: torch.Tensor
    normalized: torch.Tensor
    mlp: torch.Tensor
    perceptron: Perceptron | None = None

    def __post_init__(self):
        check_tensor(self.beta, "beta", ndim=1)
        B = self.beta.shape[0]
        if B < 1 or bool((self.beta <= 0).any()):
            raise ValueError("beta: needs at least one system and every beta > 0")
        for name in ("sign", "normalized", "mlp"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.shape != (B,):
                raise ValueError(f"{name}: expected a tensor of shape ({B},)")
        if not bool(((self.sign == 1) | (self.sign == -1)).all()):
            raise ValueError("sign: entries must be +1 (ascent) or -1 (descent)")
        if self.normalized.dtype != torch.bool:
            raise ValueError("normalized: expected a bool tensor")
        if not bool(((self.mlp == 0) | (self.mlp == 1)).all()):
            raise ValueError("mlp: entries must be 0 or 1")
        if bool((self.mlp == 1).any()) and self.perceptron is None:
            raise ValueError("perceptron: some systems have mlp = 1 but no perceptron is given")

    @classmethod
    def grid(cls, betas, *, sign: int = 1, normalized: bool = False, mlp: bool = False,
             perceptron: Perceptron | None = None, dtype=torch.float64) -> "TokenSystem":
        """One system per beta, all with the same sign, normalisation and perceptron switch."""
        beta = torch.as_tensor([float(b) for b in betas], dtype=dtype)
        B = beta.shape[0]
        return cls(beta, torch.full((B,), float(sign), dtype=dtype), torch.full((B,), bool(normalized)),
                   torch.full((B,), float(mlp), dtype=dtype), perceptron)

    @classmethod
    def concat(cls, systems) -> "TokenSystem":
        systems = list(systems)
        per = {s.perceptron for s in systems if s.perceptron is not None}
        if len(per) > 1:
            raise ValueError("systems: all systems of a batch must share one perceptron")
        return cls(*(torch.cat([getattr(s, k) for s in systems]) for k in ("beta", "sign", "normalized", "mlp")),
                   per.pop() if per else None)

    @property
    def B(self) -> int:
        return self.beta.shape[0]


def _check_X(X, system: TokenSystem) -> torch.Tensor:
    check_tensor(X, "X", ndim=3)
    if X.shape[0] != system.B:
        raise ValueError(f"X: {X.shape[0]} systems, the TokenSystem has {system.B}")
    if X.shape[1] < 1 or X.shape[2] < 2:
        raise ValueError(f"X: needs at least one token and d >= 2, got {tuple(X.shape)}")
    if float((X.detach().norm(dim=-1) - 1).abs().max()) > 1e-6:
        raise ValueError("X: tokens must lie on the unit sphere")
    if system.perceptron is not None and system.perceptron.directions.shape[1] != X.shape[2]:
        raise ValueError(f"perceptron: dimension {system.perceptron.directions.shape[1]} differs from d = {X.shape[2]}")
    return X


def uniform_sphere(B: int, n: int, d: int, *, generator: torch.Generator, dtype=torch.float64) -> torch.Tensor:
    """``B`` systems of ``n`` i.i.d. uniform points on :math:`S^{d-1}` (normalised Gaussians): (B, n, d)."""
    for v, name in ((B, "B"), (n, "n"), (d, "d")):
        check_positive(v, name, integer=True)
    check_generator(generator)
    g = torch.randn(B, n, d, generator=generator, dtype=torch.float64)
    return (g / g.norm(dim=-1, keepdim=True)).to(dtype)


def _kernel(X, beta):
    G = (X @ X.transpose(1, 2)).clamp(max=1.0)
    return torch.exp(beta.to(X)[:, None, None] * (G - 1.0))


def _velocity(X, s: TokenSystem):
    W = _kernel(X, s.beta)
    A = W @ X
    Z = torch.where(s.normalized.to(X.device)[:, None, None], W.sum(-1, keepdim=True),
                    torch.full_like(W[..., :1], float(X.shape[1])))
    amb = A / Z
    if s.perceptron is not None:
        amb = amb + s.mlp.to(X)[:, None, None] * s.perceptron.drift(X)
    v = amb - (amb * X).sum(-1, keepdim=True) * X  # P_x
    return s.sign.to(X)[:, None, None] * v


def velocity(X: torch.Tensor, system: TokenSystem) -> torch.Tensor:
    r"""The tangent velocity :math:`\dot x_i` of every token of every system, eqs. (2.5) and (2.8): (B, n, d)."""
    return _velocity(_check_X(X, system), system)


def energy(X: torch.Tensor, system: TokenSystem) -> torch.Tensor:
    r"""The energy :math:`\mathsf F=\frac1{2\beta n^2}\sum_{i,j}g_\beta(x_i,x_j)+\frac1n\sum_iV(x_i)` of every
    system (the perceptron term only where ``mlp = 1``): (B,)."""
    X = _check_X(X, system)
    n = X.shape[1]
    E = _kernel(X, system.beta).sum((1, 2)) / (2 * system.beta.to(X) * n * n)
    if system.perceptron is not None:
        E = E + system.mlp.to(X) * system.perceptron.potential(X).mean(1)
    return E


def _project(X):
    return X / X.norm(dim=-1, keepdim=True)


_METHODS = ("euler", "heun", "rk4")


def _step(X, s, dt, method):
    if method == "euler":
        return _project(X + dt * _velocity(X, s))
    if method == "heun":
        k1 = _velocity(X, s)
        k2 = _velocity(_project(X + dt * k1), s)
        return _project(X + 0.5 * dt * (k1 + k2))
    k1 = _velocity(X, s)
    k2 = _velocity(_project(X + 0.5 * dt * k1), s)
    k3 = _velocity(_project(X + 0.5 * dt * k2), s)
    k4 = _velocity(_project(X + dt * k3), s)
    return _project(X + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4))


def step(X: torch.Tensor, system: TokenSystem, dt: float, method: str = "euler") -> torch.Tensor:
    """One step of size ``dt``: explicit Euler followed by the projection back to the sphere (the paper's
    scheme), or Heun / classical Runge-Kutta whose stages are projected likewise (second and fourth order)."""
    X = _check_X(X, system)
    check_positive(dt, "dt")
    if method not in _METHODS:
        raise ValueError(f"method: expected one of {_METHODS}, got {method!r}")
    return _step(X, system, dt, method)


# ---------------------------------------------------------------------------------- clusters
def cluster_threshold(beta, d: int, c: float = 0.5) -> np.ndarray:
    r"""Geodesic grouping radius :math:`\min(c/\sqrt\beta,\pi/(2d))` (the interaction scale of Lemma 5.3,
    :math:`r_\beta\sim1/\sqrt\beta`; the cap keeps small betas from merging the whole sphere)."""
    b = np.asarray(beta, dtype=float)
    if np.any(b <= 0):
        raise ValueError("beta: must be > 0")
    check_positive(d, "d", integer=True)
    check_positive(c, "c")
    return np.minimum(c / np.sqrt(b), math.pi / (2 * d))


def cluster_labels(X: torch.Tensor, threshold) -> tuple[torch.Tensor, torch.Tensor]:
    """Single-linkage clusters: tokens joined when their geodesic distance is at most ``threshold`` (per
    system), then closed transitively. Returns ``(labels (B, n) int64, counts (B,) int64)``.

    On the circle the components are the arcs between consecutive gaps wider than the threshold
    (sorting, vectorised over systems); for ``d >= 3`` the connected components of the graph.
    """
    check_tensor(X, "X", ndim=3)
    B, n, d = X.shape
    thr = torch.as_tensor(np.broadcast_to(np.asarray(threshold, dtype=float), (B,)).copy(), dtype=torch.float64)
    if d == 2:
        ang = torch.atan2(X[..., 1], X[..., 0]).to(torch.float64)
        a, order = torch.sort(ang, dim=1)
        gaps = torch.diff(a, dim=1, append=a[:, :1] + 2 * math.pi)  # gap after each sorted token
        cut = gaps > thr[:, None]
        counts = cut.sum(1).clamp(min=1)
        # labels: a new cluster starts after every cut; the arc wrapping past the last cut joins the first
        start = torch.cumsum(torch.cat([torch.zeros(B, 1, dtype=torch.long), cut[:, :-1].long()], 1), 1)
        wrap = ~cut[:, -1]
        start = torch.where(wrap[:, None] & (start == start[:, -1:]), torch.zeros_like(start), start)
        start = torch.where(cut.any(1)[:, None], start, torch.zeros_like(start))
        # relabel to 0..k-1 in order of first appearance
        labels = torch.empty(B, n, dtype=torch.long)
        labels.scatter_(1, order.cpu(), start.cpu())
        return _compact(labels), counts.cpu()
    from scipy.sparse.csgraph import connected_components

    cosines = (X @ X.transpose(1, 2)).clamp(-1, 1).to(torch.float64).cpu()
    adj = torch.arccos(cosines) <= thr[:, None, None]
    labels = torch.empty(B, n, dtype=torch.long)
    counts = torch.empty(B, dtype=torch.long)
    for b in range(B):  # one graph per system (systems, not tokens)
        k, lab = connected_components(adj[b].numpy(), directed=False)
        labels[b], counts[b] = torch.from_numpy(lab), k
    return labels, counts


def anchored_counts(X: torch.Tensor, threshold) -> np.ndarray:
    """Cluster counts on the circle by anchored chaining, the rule of the companion paper's public code:
    cut the circle at its widest gap, walk the sorted angles, and start a new cluster whenever a token is
    farther than ``threshold`` from the *first* token of the current one. Unlike single linkage it chops a
    diffuse arc into pieces of length ``threshold``; on atomic configurations the two agree. (B,) counts.
    """
    check_tensor(X, "X", ndim=3)
    if X.shape[2] != 2:
        raise ValueError("X: anchored chaining is defined on the circle (d = 2) only")
    B = X.shape[0]
    thr = np.broadcast_to(np.asarray(threshold, dtype=float), (B,))
    ang = np.sort(np.arctan2(X[..., 1].cpu().numpy(), X[..., 0].cpu().numpy()), axis=1)
    out = np.empty(B, dtype=int)
    for b in range(B):  # once per system, at the end of a run
        a = ang[b]
        gaps = np.diff(np.append(a, a[0] + 2 * np.pi))
        a = np.roll(a, -(int(np.argmax(gaps)) + 1))
        a = np.unwrap(a)
        k, first = 1, a[0]
        for x in a[1:]:
            if x - first > thr[b]:
                k, first = k + 1, x
        out[b] = k
    return out


def _compact(labels):
    out = torch.empty_like(labels)
    for b in range(labels.shape[0]):
        _, inv = torch.unique(labels[b], return_inverse=True)
        out[b] = inv
    return out


def cluster_masses(labels: torch.Tensor) -> list[np.ndarray]:
    """The masses (fractions of tokens) of every cluster of every system, largest first."""
    n = labels.shape[1]
    return [np.sort(np.bincount(l.numpy()) / n)[::-1] for l in labels]


# ----------------------------------------------------------------------------------- runs
@dataclass
class TokenRun:
    """A batched run: histories at every snapshot (every ``snapshot_every`` steps) and the stopping record."""

    X: torch.Tensor  # (B, n, d) final tokens (each system frozen at its stop)
    steps: np.ndarray  # (S,) step index of every snapshot
    energy: np.ndarray  # (S, B)
    counts: np.ndarray  # (S, B) number of clusters
    speed: np.ndarray  # (S, B) max_i |x_i'|
    stop_step: np.ndarray  # (B,) step at which each system met the stopping rule (max_steps if never)
    converged: np.ndarray  # (B,) whether it met it
    kept: dict  # step -> (B, n, d) tokens at the requested steps
    threshold: np.ndarray  # (B,) grouping radius


def simulate(X0: torch.Tensor, system: TokenSystem, *, dt: float, max_steps: int, snapshot_every: int = 10,
             window: int = 5, drift_tol: float = 1e-4, c: float = 0.5, method: str = "euler", keep_at=(),
             progress: bool = True) -> TokenRun:
    """Run every system until the stopping rule of the companion paper's section 4 holds, or ``max_steps``.

    Every ``snapshot_every`` steps the clusters are counted at :func:`cluster_threshold`; a system stops
    (and is frozen) once its count has been the same over the last ``window`` snapshots and its largest
    token speed is at most ``drift_tol``. The energy, counts and speeds of all systems are recorded at
    every snapshot, and the tokens at the steps of ``keep_at``.
    """
    X = _check_X(X0, system).clone()
    check_positive(dt, "dt")
    check_positive(max_steps, "max_steps", integer=True)
    check_positive(snapshot_every, "snapshot_every", integer=True)
    check_positive(window, "window", integer=True)
    check_positive(drift_tol, "drift_tol")
    if method not in _METHODS:
        raise ValueError(f"method: expected one of {_METHODS}, got {method!r}")
    B, n, d = X.shape
    thr = cluster_threshold(system.beta.cpu().numpy(), d, c)
    keep_at = sorted({int(k) for k in keep_at})
    active = torch.ones(B, dtype=torch.bool, device=X.device)
    stop = np.full(B, max_steps)
    conv = np.zeros(B, dtype=bool)
    rec = {"steps": [], "energy": [], "counts": [], "speed": []}
    kept = {}

    def snapshot(k):
        _, cnt = cluster_labels(X, thr)
        sp = _velocity(X, system).norm(dim=-1).amax(1)
        rec["steps"].append(k)
        rec["energy"].append(energy(X, system).cpu().numpy())
        rec["counts"].append(cnt.numpy())
        rec["speed"].append(sp.cpu().numpy())

    snapshot(0)
    if 0 in keep_at:
        kept[0] = X.clone()
    bar = progress_bar(total=max_steps, enabled=progress, desc="token steps", leave=False)
    for k in range(1, max_steps + 1):
        Xn = _step(X, system, dt, method)
        X = torch.where(active[:, None, None], Xn, X)
        if k in keep_at:
            kept[k] = X.clone()
        if k % snapshot_every == 0 or k == max_steps:
            snapshot(k)
            if len(rec["counts"]) >= window:
                last = np.stack(rec["counts"][-window:])
                done = (last == last[-1]).all(0) & (rec["speed"][-1] <= drift_tol) & active.cpu().numpy()
                stop[done] = k
                conv |= done
                active &= ~torch.as_tensor(done, device=X.device)
            bar.update(snapshot_every)
            if not bool(active.any()):
                break
    bar.close()
    return TokenRun(X, np.array(rec["steps"]), np.stack(rec["energy"]), np.stack(rec["counts"]),
                    np.stack(rec["speed"]), stop, conv, kept, thr)
