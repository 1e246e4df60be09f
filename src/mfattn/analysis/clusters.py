r"""Cluster experiments on token systems (chapter 06; the companion paper on perceptrons, arXiv
2601.21366, sections 3 and 4).

:class:`TokenSweep` holds one configuration of the chapter's protocol (tokens per system, the betas,
the Euler step, the step cap, the seed) and runs its batches: the twelve settings of
:data:`mfattn.models.tokens.SETTINGS` at every beta from one initial configuration
(:meth:`TokenSweep.settings_batch`), USA descent in the scaling of Theorem 3.5
(:meth:`TokenSweep.regime_batch`), one setting at several token counts (:meth:`TokenSweep.count_at_n`) and
the runs of the animation (:meth:`TokenSweep.show_run`). Every draw comes from a named stream of
:mod:`mfattn.flows.seeds`: the tokens of initial configuration ``k`` on :math:`S^{d-1}` from
``("tokens", d, k)``, a perceptron not given as arrays from ``("perceptron", d)``.

The functions below read the batches' results: one row per system (:func:`system_rows`), the count
of a setting at a beta as the tables print it (:func:`count_cells`), its spread over the initial
configurations (:func:`seed_spread`), the comparison with the counts of the companion paper's public
code (:func:`compare_counts`), the masses of the descent runs with a perceptron (:func:`descent_masses`)
and the test of Theorem 3.5's bound (3.3) in its own scaling (:func:`regime_test`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch

from .._checks import check_positive
from ..flows.seeds import stream
from ..models import tokens as tk

__all__ = ["TokenSweep", "ShowRun", "system_rows", "gradient_flow", "ATOMIC", "CountCell", "count_cells",
           "SeedSpread", "seed_spread", "Comparison", "compare_counts", "DescentMasses", "descent_masses",
           "RegimeTest", "regime_test", "shown_tokens", "angle_histograms", "cluster_centres", "cell_series"]


def gradient_flow(setting) -> bool:
    """Whether a setting is a gradient flow of the energy ``F``: USA, or SA without a perceptron.

    Parameters
    ----------
    setting : (str, str, str)
        ``(mode, direction, perceptron)``, as in :data:`mfattn.models.tokens.SETTINGS`.

    Returns
    -------
    bool

    Examples
    --------
    >>> from mfattn.analysis.clusters import gradient_flow
    >>> [gradient_flow(s) for s in [("USA", "descent", "relu"), ("SA", "ascent", "none"), ("SA", "descent", "gelu")]]
    [True, True, False]
    """
    return setting[0] == "USA" or setting[2] == "none"


#: The settings whose stops are atomic: ascent, and descent with GeLU.
ATOMIC = tuple(s for s in tk.SETTINGS if s[1] == "ascent" or s[2] == "gelu")


class ShowRun(NamedTuple):
    """The tokens of a few systems at logarithmically spaced steps (:meth:`TokenSweep.show_run`).

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.clusters import ShowRun
    >>> ShowRun([0, 10], np.zeros((2, 1, 3, 2))).frames.shape
    (2, 1, 3, 2)
    """

    steps: list  # (F,) the steps of the frames, the last one the latest stop
    frames: np.ndarray  # (F, B, n, d) the tokens of every system at those steps


@dataclass
class TokenSweep:
    """One configuration of chapter 06's protocol, and the batches it runs.

    Attributes
    ----------
    n : int
        Tokens per system.
    betas : sequence of float
        The inverse temperatures of the sweep (> 0).
    dt : float
        The Euler step (> 0).
    max_steps : int
        The step cap of a run.
    seed : int
        The seed of the named streams (:func:`mfattn.flows.seeds.stream`).
    beta_show : float
        The beta of the systems whose tokens a batch keeps for the figures.
    given : dict, optional
        Perceptrons given as arrays, by ``str(d)``: ``{"directions": (K, d), "scales": (K,)}`` or
        ``{"directions": (K, d), "omega": (K, d)}`` (gradient-form vectors ``s_m a_m``); the public code's.
    keep_at : tuple of int
        The steps at which a batch on the circle keeps the tokens of its shown systems.
    device : str or torch.device
        Where the runs go.

    Examples
    --------
    >>> from mfattn.analysis.clusters import TokenSweep
    >>> sw = TokenSweep(n=8, betas=[1.0, 25.0], dt=0.1, max_steps=50, seed=0, beta_show=1.0)
    >>> sw.perceptron(2, "relu").directions.shape
    torch.Size([2, 2])
    """

    n: int
    betas: tuple
    dt: float
    max_steps: int
    seed: int
    beta_show: float
    given: dict = field(default_factory=dict)
    keep_at: tuple = ()
    device: object = "cpu"

    def __post_init__(self):
        check_positive(self.n, "n", integer=True)
        check_positive(self.dt, "dt")
        check_positive(self.max_steps, "max_steps", integer=True)
        self.betas = tuple(self.betas)
        if not self.betas or any(not np.isfinite(b) or b <= 0 for b in self.betas):
            raise ValueError(f"betas: expected finite values > 0, got {self.betas!r}")
        if not isinstance(self.seed, (int, np.integer)) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"seed: expected an integer >= 0, got {self.seed!r}")
        self.given = dict(self.given or {})
        self.keep_at = tuple(self.keep_at)

    def perceptron(self, d: int, activation: str) -> tk.Perceptron:
        """The perceptron on :math:`S^{d-1}`: the one given as arrays for ``d``, with its directions
        normalised, or else a draw of :meth:`mfattn.models.tokens.Perceptron.sample` (``d`` units) from the
        stream ``("perceptron", d)``.

        Parameters
        ----------
        d : int
            The ambient dimension.
        activation : str
            The perceptron's activation (``"relu"``, ``"gelu"``).

        Returns
        -------
        mfattn.models.tokens.Perceptron
            On ``device``.

        Examples
        --------
        >>> from mfattn.analysis.clusters import TokenSweep
        >>> given = {"2": {"directions": [[3.0, 4.0]], "scales": [0.5]}}
        >>> sw = TokenSweep(n=8, betas=[1.0], dt=0.1, max_steps=50, seed=0, beta_show=1.0, given=given)
        >>> sw.perceptron(2, "gelu").directions.tolist(), sw.perceptron(3, "gelu").directions.shape[0]
        ([[0.6, 0.8]], 3)
        """
        check_positive(d, "d", integer=True)
        if str(d) not in self.given:
            return tk.Perceptron.sample(d, generator=stream(self.seed, ("perceptron", d)),
                                        activation=activation).to(self.device)
        p = {k: torch.tensor(v, dtype=torch.float64) for k, v in self.given[str(d)].items()}
        a = p["directions"] / p["directions"].norm(dim=1, keepdim=True)
        return tk.Perceptron(a, p["scales"] if "scales" in p else (p["omega"] * a).sum(1), activation).to(self.device)

    def tokens(self, d: int, k: int, n: int | None = None) -> torch.Tensor:
        """Initial configuration ``k`` on :math:`S^{d-1}`: ``n`` uniform tokens from the stream
        ``("tokens", d, k)``.

        Parameters
        ----------
        d : int
            The ambient dimension.
        k : int
            The configuration's index (``>= 0``).
        n : int, optional
            Tokens (default: the sweep's ``n``).

        Returns
        -------
        Tensor (1, n, d)
            On ``device``.

        Examples
        --------
        >>> import torch
        >>> from mfattn.analysis.clusters import TokenSweep
        >>> sw = TokenSweep(n=8, betas=[1.0], dt=0.1, max_steps=50, seed=0, beta_show=1.0)
        >>> X = sw.tokens(3, 0)
        >>> X.shape, torch.equal(X, sw.tokens(3, 0)), torch.equal(X, sw.tokens(3, 1))
        (torch.Size([1, 8, 3]), True, False)
        """
        return tk.uniform_sphere(1, self.n if n is None else n, d,
                                 generator=stream(self.seed, ("tokens", d, k))).to(self.device)

    def _run(self, X0, system, keep_at=()):
        return tk.simulate(X0.expand(system.B, -1, -1).contiguous(), system, dt=self.dt, max_steps=self.max_steps,
                           keep_at=keep_at, progress=False)

    def settings_batch(self, d: int, activation: str, seed_: int) -> dict:
        """The settings of :data:`~mfattn.models.tokens.SETTINGS` that use ``activation`` (those without a
        perceptron ride with ``"relu"``) at every beta, from initial configuration ``seed_`` on
        :math:`S^{d-1}`, in one batched run.

        Parameters
        ----------
        d : int
            The ambient dimension.
        activation : str
            ``"relu"`` or ``"gelu"``.
        seed_ : int
            The initial configuration (:meth:`tokens`).

        Returns
        -------
        dict
            :func:`mfattn.models.tokens.summarize` of the run (with the paths on the circle), and
            ``setting`` (one per system), ``show`` (the systems at ``beta_show``, for configuration 0 on
            the circle and on :math:`S^2`) and ``kept`` (their tokens at ``keep_at`` on the circle, by
            ``str(step)``, and ``"final"``).

        Examples
        --------
        >>> from mfattn.analysis.clusters import TokenSweep
        >>> sw = TokenSweep(n=8, betas=[1.0, 25.0], dt=0.1, max_steps=40, seed=0, beta_show=1.0, keep_at=(0, 20))
        >>> out = sw.settings_batch(2, "gelu", 0)
        >>> len(out["beta"]), out["setting"][0], out["show"], sorted(out["kept"])
        (8, ['USA', 'ascent', 'gelu'], [0, 2, 4, 6], ['0', '20', 'final'])
        """
        if activation not in ("relu", "gelu"):
            raise ValueError(f"activation: expected 'relu' or 'gelu', got {activation!r}")
        chosen = [s for s in tk.SETTINGS if s[2] == activation or (activation == "relu" and s[2] == "none")]
        system = tk.TokenSystem.settings(chosen, self.betas, self.perceptron(d, activation))
        run = self._run(self.tokens(d, seed_), system, self.keep_at if d == 2 else ())
        show = [i for i, b in enumerate(list(self.betas) * len(chosen))
                if b == self.beta_show and seed_ == 0 and d <= 3]
        kept = {str(k): X[show].cpu().tolist() for k, X in run.kept.items()} | {"final": run.X[show].cpu().tolist()}
        return tk.summarize(run, system, dt=self.dt, paths=d == 2) | {
            "setting": [list(s) for s in chosen for _ in self.betas], "show": show, "kept": kept}

    def regime_batch(self, activation: str, seed_: int) -> dict:
        """USA descent on the circle with the perceptron weighted by ``exp(-beta)``
        (:func:`mfattn.models.tokens.theorem35_weight`): Theorem 3.5's scaling, at every beta, from initial
        configuration ``seed_``.

        Parameters
        ----------
        activation : str
            The perceptron's activation.
        seed_ : int
            The initial configuration (:meth:`tokens`).

        Returns
        -------
        dict
            Lists over the betas: ``beta``, ``counts`` (single linkage at the stop), ``converged`` and
            ``arc`` (:func:`mfattn.models.tokens.arc_mass` at the diameter ``1 / (2 sqrt(beta))``).

        Examples
        --------
        >>> from mfattn.analysis.clusters import TokenSweep
        >>> sw = TokenSweep(n=8, betas=[1.0, 25.0], dt=0.1, max_steps=40, seed=0, beta_show=1.0)
        >>> out = sw.regime_batch("relu", 0)
        >>> sorted(out), len(out["arc"])
        (['arc', 'beta', 'converged', 'counts'], 2)
        """
        system = tk.TokenSystem.settings([("USA", "descent", activation)], self.betas, self.perceptron(2, activation),
                                         weight=tk.theorem35_weight(self.betas))
        run = self._run(self.tokens(2, seed_), system)
        return {"beta": system.beta.tolist(), "counts": run.counts[-1].tolist(), "converged": run.converged.tolist(),
                "arc": tk.arc_mass(run.X, 0.5 / np.sqrt(self.betas)).tolist()}

    def count_at_n(self, n: int, n_seeds: int, setting=("SA", "descent", "gelu")) -> dict:
        """One setting at the largest beta on the circle, from the initial configurations ``0 .. n_seeds - 1``
        drawn with ``n`` tokens (the circle's streams), counted by the public code's rule.

        Parameters
        ----------
        n : int
            Tokens per system.
        n_seeds : int
            The number of initial configurations.
        setting : (str, str, str), default ("SA", "descent", "gelu")
            The setting (its perceptron, if any, is :meth:`perceptron`'s on the circle).

        Returns
        -------
        dict
            ``counts`` (:func:`mfattn.models.tokens.anchored_counts`, one per configuration) and
            ``converged`` (whether every run met the stopping rule).

        Examples
        --------
        >>> from mfattn.analysis.clusters import TokenSweep
        >>> sw = TokenSweep(n=8, betas=[1.0, 25.0], dt=0.1, max_steps=40, seed=0, beta_show=1.0)
        >>> len(sw.count_at_n(12, 2)["counts"])
        2
        """
        check_positive(n, "n", integer=True)
        check_positive(n_seeds, "n_seeds", integer=True)
        system = tk.TokenSystem.settings([setting], [float(self.betas[-1])] * n_seeds,
                                         self.perceptron(2, setting[2] if setting[2] != "none" else "relu"))
        X0 = torch.cat([self.tokens(2, k, n) for k in range(n_seeds)])
        run = tk.simulate(X0, system, dt=self.dt, max_steps=self.max_steps, progress=False)
        return {"counts": tk.anchored_counts(run.X, run.threshold).tolist(), "converged": bool(run.converged.all())}

    def show_run(self, settings, activation: str = "gelu", frames: int = 48) -> ShowRun:
        """A few settings at ``beta_show`` from initial configuration 0 on the circle, the tokens kept at
        about ``frames`` logarithmically spaced steps up to the latest stop.

        Parameters
        ----------
        settings : list of (str, str, str)
            The settings, one system each.
        activation : str, default "gelu"
            The perceptron's activation (for the settings that have one).
        frames : int, default 48
            The number of logarithmically spaced steps from 1 to ``max_steps`` (step 0 is added).

        Returns
        -------
        ShowRun
            The steps and the tokens at them; the last frame is every system's stop.

        Examples
        --------
        >>> from mfattn.analysis.clusters import TokenSweep
        >>> sw = TokenSweep(n=8, betas=[1.0], dt=0.1, max_steps=40, seed=0, beta_show=1.0)
        >>> out = sw.show_run([("USA", "ascent", "none"), ("SA", "descent", "gelu")], frames=5)
        >>> out.steps[0], out.frames.shape[1:]
        (0, (2, 8, 2))
        """
        check_positive(frames, "frames", integer=True)
        system = tk.TokenSystem.settings(settings, [self.beta_show], self.perceptron(2, activation))
        at = sorted({0} | {int(k) for k in np.unique(np.geomspace(1, self.max_steps, frames).round())})
        run = self._run(self.tokens(2, 0), system, at)
        last = int(run.stop_step.max())
        at = [k for k in at if k < last] + [last]
        return ShowRun(at, np.stack([(run.kept.get(k, run.X) if k < last else run.X).cpu().numpy() for k in at]))


_PER_SYSTEM = ("beta", "count", "anchored", "converged", "stop_t", "masses", "heaviest", "against", "energy",
               "count_path")


def system_rows(results) -> list[dict]:
    """One row per system of the batches of :meth:`TokenSweep.settings_batch`: its sphere, initial
    configuration, setting and the entries of its summary.

    Parameters
    ----------
    results : list of dict
        The batches, each with the point that made it (``d``, ``seed_``), as :func:`mfattn.companion.sweep.run_sweep`
        returns them.

    Returns
    -------
    list of dict
        ``d``, ``seed``, ``setting`` (a tuple), ``t`` (the snapshot times, empty off the circle) and every
        per-system entry the batch has (``energy`` and ``count_path`` as arrays).

    Raises
    ------
    ValueError
        If a batch lacks its point or its settings.

    Examples
    --------
    >>> from mfattn.analysis.clusters import system_rows
    >>> batch = {"d": 3, "seed_": 1, "setting": [["USA", "ascent", "none"]] * 2, "beta": [1.0, 5.0],
    ...          "count": [1, 2], "anchored": None}
    >>> [(r["setting"], r["beta"], r["count"], "anchored" in r) for r in system_rows([batch])]
    [(('USA', 'ascent', 'none'), 1.0, 1, False), (('USA', 'ascent', 'none'), 5.0, 2, False)]
    """
    for r in results:
        if not {"d", "seed_", "setting", "beta"} <= set(r):
            raise ValueError("results: every batch needs d, seed_, setting and beta")
    return [dict(d=r["d"], seed=r["seed_"], setting=tuple(r["setting"][i]), t=np.array(r.get("t", [])),
                 **{k: np.array(r[k][i]) if k in ("energy", "count_path") else r[k][i] for k in _PER_SYSTEM
                    if r.get(k) is not None})
            for r in results for i in range(len(r["beta"]))]


class CountCell(NamedTuple):
    """The systems of one setting at one beta on one sphere (:func:`count_cells`).

    Examples
    --------
    >>> from mfattn.analysis.clusters import CountCell
    >>> CountCell("3-4*", []).text
    '3-4*'
    """

    text: str  # the count as the tables print it: the range over the systems, * if one hit the step cap
    systems: list  # their rows (system_rows)

    def values(self, key: str = "count") -> list:
        """The entry ``key`` of every system.

        Parameters
        ----------
        key : str, default "count"
            An entry of the rows.

        Returns
        -------
        list

        Examples
        --------
        >>> from mfattn.analysis.clusters import CountCell
        >>> CountCell("1-2", [{"count": 1}, {"count": 2}]).values()
        [1, 2]
        """
        return [r[key] for r in self.systems]

    @property
    def converged(self) -> bool:
        """Whether every system met the stopping rule."""
        return all(r["converged"] for r in self.systems)


def count_cells(rows, settings, betas, d: int = 2) -> dict:
    """The systems of every setting at every beta on :math:`S^{d-1}`, with their count as the tables print
    it: the range over the initial configurations, ``*`` where a run hit the step cap.

    Parameters
    ----------
    rows : list of dict
        Rows of :func:`system_rows`.
    settings : iterable of (str, str, str)
    betas : iterable of float
    d : int, default 2

    Returns
    -------
    dict
        ``(setting, beta) -> CountCell``, setting-major.

    Raises
    ------
    ValueError
        Naming ``rows`` when a setting has no system at a beta on that sphere.

    Examples
    --------
    >>> from mfattn.analysis.clusters import count_cells
    >>> s = ("USA", "ascent", "none")
    >>> rows = [dict(d=2, setting=s, beta=1.0, count=c, converged=c < 3) for c in (2, 3)]
    >>> count_cells(rows, [s], [1.0])[s, 1.0].text
    '2-3*'
    """
    out = {}
    for s in settings:
        for b in betas:
            rs = [r for r in rows if r["d"] == d and r["setting"] == s and r["beta"] == b]
            if not rs:
                raise ValueError(f"rows: no system of {s} at beta = {b:g} on d = {d}")
            c = [r["count"] for r in rs]
            out[s, b] = CountCell((f"{min(c)}" if min(c) == max(c) else f"{min(c)}-{max(c)}")
                                  + ("" if all(r["converged"] for r in rs) else "*"), rs)
    return out


class SeedSpread(NamedTuple):
    """How much the count varies over the initial configurations (:func:`seed_spread`).

    Examples
    --------
    >>> from mfattn.analysis.clusters import SeedSpread
    >>> SeedSpread({}, 1, 3, 5).capped
    3
    """

    by_setting: dict  # setting -> the largest range of the count over the betas
    converged: int  # the largest range in an atomic setting where every run met the stopping rule
    capped: int  # the largest range in an atomic setting where a run hit the step cap
    relu_descent: int  # the largest range in ReLU descent


def seed_spread(cells: dict) -> SeedSpread:
    """The range (largest minus smallest) of the count over the initial configurations, cell by cell.

    Parameters
    ----------
    cells : dict
        ``(setting, beta) -> CountCell`` (:func:`count_cells`).

    Returns
    -------
    SeedSpread
        The largest range by setting, and in the atomic settings (:data:`ATOMIC`) with and without a
        run at the step cap, and in ReLU descent (0 where there is no such cell).

    Raises
    ------
    ValueError
        If ``cells`` is empty.

    Examples
    --------
    >>> from mfattn.analysis.clusters import CountCell, seed_spread
    >>> s = ("USA", "ascent", "none")
    >>> cells = {(s, 1.0): CountCell("1-3", [dict(count=1, converged=True), dict(count=3, converged=True)])}
    >>> seed_spread(cells)
    SeedSpread(by_setting={('USA', 'ascent', 'none'): 2}, converged=2, capped=0, relu_descent=0)
    """
    if not cells:
        raise ValueError("cells: empty")
    spread = {k: max(c.values()) - min(c.values()) for k, c in cells.items()}
    by_setting = {}
    for (s, _), v in spread.items():
        by_setting[s] = max(by_setting.get(s, v), v)
    return SeedSpread(by_setting,
                      max([v for k, v in spread.items() if k[0] in ATOMIC and cells[k].converged], default=0),
                      max([v for k, v in spread.items() if k[0] in ATOMIC and not cells[k].converged], default=0),
                      max([v for k, v in spread.items() if k[0][1:] == ("descent", "relu")], default=0))


class Comparison(NamedTuple):
    """The public code's counts against the range of ours over the initial configurations
    (:func:`compare_counts`).

    Examples
    --------
    >>> from mfattn.analysis.clusters import Comparison
    >>> Comparison({}, {}, {}, [], set(), {}).both
    []
    """

    public: dict  # (setting, beta) -> the public code's count
    ours: dict  # (setting, beta) -> (smallest, largest) of our counts
    agree: dict  # (setting, beta) -> whether the public count lies within ours widened by one cluster
    both: list  # the atomic (setting, beta) where neither code's run hit the step cap
    capped: set  # the (setting, beta) where the public code's run hit its cap
    converged: dict  # (setting, beta) -> whether every run of ours met the stopping rule

    def entry(self, setting, beta) -> str | None:
        """The table's entry: the public code's count, our range, ``!`` for a disagreement.

        Parameters
        ----------
        setting : (str, str, str)
        beta : float

        Returns
        -------
        str or None
            ``None`` where the public code has no count.

        Examples
        --------
        >>> from mfattn.analysis.clusters import Comparison
        >>> k = (("SA", "descent", "gelu"), 50.0)
        >>> Comparison({k: 9}, {k: (5, 6)}, {k: False}, [], set(), {k: True}).entry(*k)
        '   9  5-6 !'
        """
        k = (setting, beta)
        if k not in self.agree:
            return None
        return f"{self.public[k]:>4d} {self.ours[k][0]:>2d}-{self.ours[k][1]:<2d}{' ' if self.agree[k] else '!'}"

    def disagreements(self) -> list:
        """The (setting, beta) where the public count lies outside our range widened by one cluster.

        Returns
        -------
        list

        Examples
        --------
        >>> from mfattn.analysis.clusters import Comparison
        >>> Comparison({}, {}, {("a", 1.0): True, ("b", 2.0): False}, [], set(), {}).disagreements()
        [('b', 2.0)]
        """
        return [k for k, ok in self.agree.items() if not ok]

    def kinds(self) -> dict:
        """The disagreements by kind: ``diffuse`` (descent without a perceptron), ``relu`` (ReLU descent,
        tokens left in the dead zone), and in the atomic settings ``capped`` (a run of either code hit
        the step cap) and ``converged`` (both codes' runs met the stopping rule).

        Returns
        -------
        dict
            Kind -> the disagreeing (setting, beta), in the order of :meth:`disagreements`.

        Examples
        --------
        >>> from mfattn.analysis.clusters import Comparison
        >>> a, b = (("SA", "descent", "none"), 5.0), (("USA", "ascent", "gelu"), 5.0)
        >>> Comparison({}, {}, {a: False, b: False}, [], set(), {a: True, b: False}).kinds()["capped"]
        [(('USA', 'ascent', 'gelu'), 5.0)]
        """
        off = self.disagreements()
        diffuse = [k for k in off if k[0][1:] == ("descent", "none")]
        relu = [k for k in off if k[0][1:] == ("descent", "relu")]
        rest = [k for k in off if k not in diffuse and k not in relu]  # atomic settings
        capped = [k for k in rest if k in self.capped or not self.converged[k]]
        return {"diffuse": diffuse, "relu": relu, "capped": capped, "converged": [k for k in rest if k not in capped]}


def compare_counts(cells: dict, public: dict, public_betas, key: str = "count") -> Comparison:
    """Our counts (the range over the initial configurations) against the public code's one run, per
    setting and beta that both have; an entry agrees when the public count lies within our range
    widened by one cluster.

    Parameters
    ----------
    cells : dict
        ``(setting, beta) -> CountCell`` (:func:`count_cells`).
    public : dict
        The public code's ``counts`` (by setting, as ``"USA ascent none"``, one per beta of
        ``public_betas``) and ``capped`` (``[setting, beta]`` pairs whose run hit its cap).
    public_betas : list of float
        The betas of the public counts.
    key : str, default "count"
        Our count: ``"count"`` (single linkage) or ``"anchored"`` (the public code's rule on the circle).

    Returns
    -------
    Comparison

    Raises
    ------
    ValueError
        Naming ``public`` when it lacks its counts or caps.

    Examples
    --------
    >>> from mfattn.analysis.clusters import CountCell, compare_counts
    >>> s = ("USA", "ascent", "gelu")
    >>> cells = {(s, 5.0): CountCell("2-3", [dict(count=2, converged=True), dict(count=3, converged=True)])}
    >>> cmp = compare_counts(cells, {"counts": {"USA ascent gelu": [5]}, "capped": []}, [5.0])
    >>> cmp.agree, cmp.both
    ({(('USA', 'ascent', 'gelu'), 5.0): False}, [(('USA', 'ascent', 'gelu'), 5.0)])
    """
    if not {"counts", "capped"} <= set(public):
        raise ValueError("public: expected its counts and capped")
    capped = {(tuple(s.split()), b) for s, b in public["capped"]}
    pub, ours, agree, conv = {}, {}, {}, {}
    for (s, b), cell in cells.items():
        if b not in public_betas:
            continue
        k, c = (s, b), cell.values(key)
        pub[k], ours[k] = public["counts"][" ".join(s)][list(public_betas).index(b)], (min(c), max(c))
        agree[k], conv[k] = min(c) - 1 <= pub[k] <= max(c) + 1, cell.converged
    both = [k for k in agree if k[0] in ATOMIC and k not in capped and conv[k]]
    return Comparison(pub, ours, agree, both, capped, conv)


class DescentMasses(NamedTuple):
    """The cluster masses of the descent runs with a perceptron (:func:`descent_masses`).

    Examples
    --------
    >>> from mfattn.analysis.clusters import DescentMasses
    >>> DescentMasses([], 0, [0.5]).single
    0
    """

    systems: list  # their rows
    single: int  # how many end in a single cluster
    by_beta: list  # the heaviest cluster's mass over the runs at each beta


def descent_masses(rows, betas) -> DescentMasses:
    """The descent runs with a perceptron among ``rows``, how many end in one cluster, and the heaviest
    cluster at each beta.

    Parameters
    ----------
    rows : list of dict
        Rows of :func:`system_rows`.
    betas : iterable of float
        The betas of the sweep.

    Returns
    -------
    DescentMasses

    Raises
    ------
    ValueError
        Naming ``rows`` when a beta has no such run.

    Examples
    --------
    >>> from mfattn.analysis.clusters import descent_masses
    >>> rows = [dict(setting=("SA", "descent", "gelu"), beta=1.0, masses=[0.6, 0.4]),
    ...         dict(setting=("USA", "descent", "relu"), beta=1.0, masses=[1.0]),
    ...         dict(setting=("USA", "ascent", "relu"), beta=1.0, masses=[1.0])]
    >>> out = descent_masses(rows, [1.0])
    >>> len(out.systems), out.single, out.by_beta
    (2, 1, [1.0])
    """
    desc = [r for r in rows if r["setting"][1] == "descent" and r["setting"][2] != "none"]
    by_beta = []
    for b in betas:
        at = [r["masses"][0] for r in desc if r["beta"] == b]
        if not at:
            raise ValueError(f"rows: no descent run with a perceptron at beta = {b:g}")
        by_beta.append(max(at))
    return DescentMasses(desc, sum(len(r["masses"]) == 1 for r in desc), by_beta)


class RegimeTest(NamedTuple):
    """Theorem 3.5's bound (3.3) against the heaviest arcs of the runs in its scaling (:func:`regime_test`).

    Examples
    --------
    >>> from mfattn.analysis.clusters import RegimeTest
    >>> RegimeTest([0.1], 0).ratios
    [0.1]
    """

    ratios: list  # heaviest arc / bound, for every converged run whose bound is below one
    singles: int  # converged runs with every token within the diameter (heaviest arc 1)


def regime_test(results, bounds: dict) -> RegimeTest:
    """The runs of :meth:`TokenSweep.regime_batch` against the bound (3.3): the heaviest arc over the bound
    for every converged run whose beta makes the bound informative (below one), and the converged runs
    that hold every token within the diameter.

    Parameters
    ----------
    results : list of dict
        The batches, each with its ``activation`` (the sweep's point).
    bounds : dict
        ``activation -> bound per beta`` (:func:`mfattn.models.tokens.mass_bound`).

    Returns
    -------
    RegimeTest

    Raises
    ------
    ValueError
        Naming ``bounds`` when a batch's activation has none.

    Examples
    --------
    >>> from mfattn.analysis.clusters import regime_test
    >>> batch = dict(activation="relu", arc=[1.0, 0.3, 0.2], converged=[True, True, False])
    >>> regime_test([batch], {"relu": [2.0, 0.6, 0.6]})
    RegimeTest(ratios=[0.5], singles=1)
    """
    for r in results:
        if r["activation"] not in bounds:
            raise ValueError(f"bounds: none for {r['activation']!r}")
    # beta-major, as the chapter's table runs
    ratios = [r["arc"][j] / bounds[r["activation"]][j] for j in range(max(len(r["arc"]) for r in results))
              for r in results if j < len(r["arc"]) and bounds[r["activation"]][j] < 1 and r["converged"][j]]
    singles = sum(bool(c) and a == 1.0 for r in results for a, c in zip(r["arc"], r["converged"]))
    return RegimeTest(ratios, singles)


def shown_tokens(results, d: int) -> dict:
    """The systems that the batches of :meth:`TokenSweep.settings_batch` on :math:`S^{d-1}` keep for the
    figures, by setting.

    Parameters
    ----------
    results : list of dict
        The batches, with their points.
    d : int
        The ambient dimension.

    Returns
    -------
    dict
        ``setting -> dict`` with ``kept`` (the tokens by ``str(step)`` and ``"final"``, arrays (n, d)),
        ``count`` and ``stop_t`` at the stop.

    Examples
    --------
    >>> from mfattn.analysis.clusters import shown_tokens
    >>> batch = dict(d=2, setting=[["USA", "ascent", "none"]], show=[0], count=[2], stop_t=[3.0],
    ...              kept={"final": [[[1.0, 0.0]]]})
    >>> out = shown_tokens([batch], 2)[("USA", "ascent", "none")]
    >>> out["kept"]["final"].shape, out["count"], out["stop_t"]
    ((1, 2), 2, 3.0)
    """
    return {tuple(r["setting"][i]): dict(kept={k: np.asarray(v[j]) for k, v in r["kept"].items()},
                                         count=r["count"][i], stop_t=r["stop_t"][i])
            for r in results if r["d"] == d for j, i in enumerate(r["show"])}


def angle_histograms(X, bins) -> np.ndarray:
    """The number of tokens in each bin of angle on the circle, system by system.

    Parameters
    ----------
    X : array_like (B, n, 2)
        Tokens on the circle.
    bins : array_like (K + 1,)
        Increasing bin edges in ``[-pi, pi]`` (the last bin closed, as ``numpy.histogram``).

    Returns
    -------
    numpy.ndarray (B, K), int

    Raises
    ------
    ValueError
        Naming ``X`` when it is not (B, n, 2).

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.clusters import angle_histograms
    >>> X = [[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]]
    >>> angle_histograms(X, np.linspace(-np.pi, np.pi, 5)).tolist()
    [[0, 0, 1, 2]]
    """
    X = np.asarray(X, dtype=float)
    if X.ndim != 3 or X.shape[2] != 2:
        raise ValueError(f"X: expected (B, n, 2), got {X.shape}")
    ang = np.arctan2(X[..., 1], X[..., 0])
    return np.array([np.histogram(a, bins=bins)[0] for a in ang])


def cluster_centres(X, threshold) -> tuple[np.ndarray, np.ndarray]:
    """The single-linkage clusters of one configuration on the sphere: the mass of each and its centre,
    the mean of its tokens projected back to the sphere.

    Parameters
    ----------
    X : array_like (n, d)
        Tokens on the unit sphere.
    threshold : float
        The geodesic grouping radius (:func:`mfattn.models.tokens.cluster_threshold`).

    Returns
    -------
    masses : numpy.ndarray (k,)
        The fraction of the tokens in each cluster, in the order of :func:`mfattn.models.tokens.cluster_labels`.
    centres : numpy.ndarray (k, d)
        Unit vectors.

    Raises
    ------
    ValueError
        Naming ``X`` when it is not (n, d).

    Examples
    --------
    >>> from mfattn.analysis.clusters import cluster_centres
    >>> X = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.6, 0.8]]  # the last two 0.93 apart
    >>> masses, centres = cluster_centres(X, 1.0)
    >>> masses.round(3).tolist(), centres.round(3).tolist()
    ([0.333, 0.667], [[1.0, 0.0, 0.0], [0.0, 0.894, 0.447]])
    """
    X = torch.as_tensor(np.asarray(X, dtype=float))
    if X.ndim != 2:
        raise ValueError(f"X: expected (n, d), got {tuple(X.shape)}")
    labels = tk.cluster_labels(X[None], threshold)[0][0]
    size = torch.bincount(labels)
    centres = torch.zeros(len(size), X.shape[1], dtype=X.dtype).index_add_(0, labels, X) / size[:, None]
    return (size.double() / len(X)).numpy(), (centres / centres.norm(dim=1, keepdim=True)).numpy()


def cell_series(cells: dict, setting, betas, key: str = "count", reduce=None) -> list:
    """One setting's cells along the betas: at each beta the entry ``key`` of every system of the cell, or
    that list reduced to one number (its mean, its largest: a curve against beta).

    Parameters
    ----------
    cells : dict
        ``(setting, beta) -> CountCell`` (:func:`count_cells`).
    setting : (str, str, str)
        The setting.
    betas : iterable of float
        The betas, in the order of the series.
    key : str, default "count"
        An entry of the rows (``"count"``, ``"anchored"``, ``"heaviest"``).
    reduce : callable, optional
        Applied to each beta's list (``max``, ``numpy.mean``); default: the lists themselves.

    Returns
    -------
    list
        One entry per beta: the list of the systems' values, or ``reduce`` of it.

    Raises
    ------
    ValueError
        Naming ``cells`` when the setting has no cell at one of the betas.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.analysis.clusters import CountCell, cell_series
    >>> s = ("USA", "ascent", "none")
    >>> cells = {(s, 1.0): CountCell("1-3", [{"count": 1}, {"count": 3}]), (s, 5.0): CountCell("4", [{"count": 4}])}
    >>> cell_series(cells, s, [1.0, 5.0]), cell_series(cells, s, [5.0, 1.0], reduce=max)
    ([[1, 3], [4]], [4, 3])
    >>> [float(m) for m in cell_series(cells, s, [1.0, 5.0], reduce=np.mean)]
    [2.0, 4.0]
    """
    setting = tuple(setting)
    missing = [b for b in betas if (setting, b) not in cells]
    if missing:
        raise ValueError(f"cells: no cell of {setting} at beta = {missing[0]:g}")
    values = [cells[setting, b].values(key) for b in betas]
    return values if reduce is None else [reduce(v) for v in values]
