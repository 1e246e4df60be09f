r"""Propagation of chaos (Theorem 5.2) as one experiment, the same for every chapter that measures it.

A *run* is ``N`` heads drawn from :math:`\rho_0` and moved by a stepper; its *tagged characteristics*
are the same ``N`` starting points carried by a *reference* population of ``n_ref`` heads drawn from
:math:`\rho_0` and moved the same way (:meth:`mfattn.flows.integrate.Run.characteristics`): the flow
(21) of the run's own initial heads, up to the reference's own sampling error. Theorem 5.2 bounds
the distance between the two at rate :math:`N^{-1/2}`.

The reference is itself an empirical measure, with an error of order :math:`n_\text{ref}^{-1/2}`.
The experiment measures that *floor* with a second, independent reference: every quantity is also
computed between the two references' characteristics of the same points. The correction rule
(:func:`floor_corrected`) removes it in quadrature and flags the points where it dominates.

The pieces:

* :func:`chaos_errors`: the quantities of Theorem 5.2 for one run against one reference;
* :class:`ChaosSetup`: a model, its data, how heads are drawn and trained, and the test functions of
  (24); :meth:`ChaosSetup.reference` and :meth:`ChaosSetup.point` compute a reference and one run
  of the grid (a JSON-ready dict, so that a sweep can save it);
* :class:`ChaosResult`: the runs of a grid of ``N`` and seeds, with the supremum over time of each
  quantity, its floor, the floor-corrected values and the fits in ``N``.

Persistence (saving references and points as they finish, resuming after an interruption) is the
companion's: :func:`mfattn.companion.sweep.run_chaos` runs a :class:`ChaosSetup` over a grid through
the chapters' cache. Nothing here imports the companion.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np
import torch

from .._checks import check_positive
from ..flows.integrate import Run
from ..models.particles import ParticleModel
from .fitting import LogLogFit, loglog_fit, rms_fit
from .transport import lipschitz_discrepancy, lipschitz_means, lipschitz_parts

__all__ = ["QUANTITIES", "FIRST", "DOMINATED_BELOW", "ChaosSetup", "ChaosResult", "Corrected", "ExtremeValue",
           "chaos_errors", "expected_floor_ratio", "floor_corrected"]

#: The quantities of a run, each a list over the recording times (see :func:`chaos_errors`).
QUANTITIES = ("e_max", "e_max_first", "e_rms", "d24", "d24_tags", "d24_tags_lin", "d24_tags_dist", "d25", "d25_tags")

#: The heads of ``e_max_first``: the maximum over a number of heads that does not grow with ``N`` (the
#: smallest ``N`` of the chapters' grids), which tells the growth of a maximum over more heads apart
#: from the rate of each head's error.
FIRST = 16

#: A point is dominated by the floor when its raw value is below this multiple of the floor.
DOMINATED_BELOW = 2.0


def _pathwise(e: torch.Tensor) -> tuple[list, list]:
    """max_i and RMS over heads of the distances ``e (times, heads)``, per recording time."""
    return e.max(1).values.tolist(), e.pow(2).mean(1).sqrt().tolist()


def chaos_errors(run: Run, tags: torch.Tensor, reference_population: torch.Tensor,
                 reference_risk: torch.Tensor, directions: torch.Tensor, centers: torch.Tensor, *,
                 model: ParticleModel | None = None, data=None) -> dict:
    r"""The quantities of Theorem 5.2 at every recording time, as lists (JSON-ready).

    * ``e_max``: :math:`\max_i\|e_i^k\|` with :math:`e_i^k=\omega_i^k-\bar\omega_i(t_k)` (36), ``tags`` being the
      tagged characteristics ``(R, N, d_omega)`` of the run's initial heads;
    * ``e_rms``: :math:`(\frac1N\sum_i\|e_i^k\|^2)^{1/2}`;
    * ``d24``: the test-function discrepancy (24) over the family of
      :func:`mfattn.analysis.transport.lipschitz_discrepancy`, against the reference population;
    * ``d25``: :math:`|\mathcal E_N(\omega^k)-\mathcal E(\rho_{t_k})|` (25), against the reference risk.

    ``d24`` and ``d25`` include the sampling error of the initial draw, which is of order
    :math:`N^{-1/2}` at ``t = 0`` already and often dominates their supremum over time. What the
    theorem adds to that draw is measured against the empirical measure :math:`\bar\mu^N_t` of the
    run's own tagged characteristics (the flow (21) of the same initial heads), which equals the run
    at ``t = 0``:

    * ``d24_tags``: the discrepancy (24) between :math:`\mu^N_t` and :math:`\bar\mu^N_t`;
    * ``d25_tags`` (when ``model`` and ``data`` are given): :math:`|\mathcal E_N(\omega^k)-\mathcal E(\bar\mu^N_{t_k})|`.

    Parameters
    ----------
    run : Run
        A run of :func:`mfattn.flows.integrate.integrate` (or :func:`mfattn.flows.dynamics.sgd`); its
        recorded heads ``(R, N, d_omega)`` are the ones compared.
    tags : Tensor (R, N, d_omega)
        The tagged characteristics of the run's recorded initial heads at the same recording times
        (:meth:`~mfattn.flows.integrate.Run.characteristics`).
    reference_population : Tensor (R, M, d_omega)
        The reference population at the same recording times (:attr:`~mfattn.flows.integrate.Run.population`).
    reference_risk : Tensor (R,)
        :math:`\mathcal E(\rho_t)` at the same times (:attr:`~mfattn.flows.integrate.Run.risk`).
    directions : Tensor (P, d_omega)
        Directions of the linear test functions (normalised here).
    centers : Tensor (Q, d_omega)
        Centres of the distance test functions.
    model : ParticleModel, optional
        With ``data``, adds ``d25_tags`` (the risk of ``tags`` with uniform weights).
    data : dataset object, optional
        The model's dataset, for ``d25_tags``.

    Returns
    -------
    dict of str to list of float
        ``e_max``, ``e_rms``, ``d24``, ``d25``, ``d24_tags`` and, with ``model`` and ``data``,
        ``d25_tags``, each a list of ``R`` values.

    Raises
    ------
    ValueError
        Naming ``tags`` when its shape differs from ``run.heads``'.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.chaos import chaos_errors
    >>> from mfattn.flows.dynamics import reference_flow, sgd
    >>> from mfattn.models.tasks import example
    >>> model, data, _, _ = example()
    >>> g = torch.Generator().manual_seed(0)
    >>> cloud = torch.randn(12, model.d_omega, generator=g, dtype=torch.float64)
    >>> h0 = torch.randn(4, model.d_omega, generator=g, dtype=torch.float64)
    >>> ref = reference_flow(model, data, cloud, T=0.4, step=0.1, record_every=0.2, progress=False)
    >>> run = sgd(model, data, h0, eps=0.1, T=0.4, record_every=0.2, batch_size=None,
    ...           generator=g, progress=False)
    >>> out = chaos_errors(run, ref.characteristics(h0), ref.population, ref.risk,
    ...                    directions=torch.eye(model.d_omega, dtype=torch.float64),
    ...                    centers=cloud[:2], model=model, data=data)
    >>> sorted(out)
    ['d24', 'd24_tags', 'd25', 'd25_tags', 'e_max', 'e_rms']
    >>> len(out["e_max"]), out["e_max"][0], out["d24_tags"][0]
    (3, 0.0, 0.0)
    """
    if run.heads.shape != tags.shape:
        raise ValueError(f"tags: shape {tuple(tags.shape)} differs from the run's heads {tuple(run.heads.shape)}")
    e_max, e_rms = _pathwise((run.heads - tags).norm(dim=-1))
    R = run.heads.shape[0]
    return {
        "e_max": e_max,
        "e_rms": e_rms,
        "d24": [lipschitz_discrepancy(run.heads[j], reference_population[j], directions, centers) for j in range(R)],
        "d25": (run.risk - reference_risk).abs().tolist(),
        "d24_tags": [lipschitz_discrepancy(run.heads[j], tags[j], directions, centers) for j in range(R)],
        **({} if model is None else {"d25_tags": [abs(float(run.risk[j]) - float(model.risk(data, tags[j])))
                                                  for j in range(R)]}),
    }


@dataclass(frozen=True)
class ChaosSetup:
    r"""What one propagation-of-chaos experiment is made of.

    Attributes
    ----------
    model : ParticleModel
        The model.
    data : dataset object
        Its data (the whole dataset: the characteristics need every stage's residual).
    draw : callable
        ``draw(n, *name) -> Tensor (n, d_omega)``: ``n`` heads from :math:`\rho_0`, from the seed
        stream named by ``name`` (:func:`mfattn.flows.seeds.stream`). Runs draw ``(N, "heads", s)``,
        references ``(n_ref, "reference", which)``.
    train : callable
        ``train(heads0, **kw) -> Run``: the dynamics of a run (stepper, step, horizon, recording
        times, learning-rate profile). ``kw`` holds :func:`~mfattn.flows.integrate.integrate`'s
        ``keep`` and ``keep_stages`` when a reference is trained.
    reference_train : callable, optional
        The reference's dynamics when they differ from a run's (e.g. the Runge-Kutta flow (21) as
        the limit of gradient descent); ``train`` by default. Its recording times must be the run's.
    tests : tuple of Tensor, optional
        ``(directions (P, d_omega), centers (Q, d_omega))``, the 1-Lipschitz test family of (24);
        without it a point has no ``d24``/``d24_tags``.
    risks : bool, default True
        Also measure (25) against the reference risk and against the tagged characteristics.
    measure : callable, optional
        ``measure(run, refs) -> dict``: what else a chapter measures on each run (a risk on held-out
        data, an attention pattern against the reference's), given the trained run and the two
        references; its JSON-ready entries join the point's record. Their names must differ from
        the point's own.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.chaos import ChaosResult, ChaosSetup
    >>> from mfattn.flows.integrate import integrate
    >>> from mfattn.flows.seeds import stream
    >>> from mfattn.models.linear import linear_regression
    >>> model, data, _ = linear_regression(d=3, n=20, generator=torch.Generator().manual_seed(0))
    >>> setup = ChaosSetup(
    ...     model, data,
    ...     draw=lambda n, *name: torch.randn(n, 3, generator=stream(0, name), dtype=torch.float64),
    ...     train=lambda h0, **kw: integrate(model, data, h0, stepper="gd", step=0.1, T=1.0,
    ...                                      record_every=0.5, batch_size=None, progress=False, **kw))
    >>> refs = [setup.reference(w, n_ref=8192) for w in (1, 2)]
    >>> res = ChaosResult([{"N": N, "s": s, **setup.point(refs, N, s)} for N in (4, 16, 64) for s in range(4)])
    >>> sorted(res.records[0])[:4]
    ['N', 'd25', 'd25_tags', 'e_heads']
    >>> res.fit("e_rms").n, int(res.corrected("e_rms").dominated.sum())  # runs fitted; left out (the floor's)
    (12, 0)
    """

    model: ParticleModel
    data: object
    draw: Callable[..., torch.Tensor]
    train: Callable[..., Run]
    reference_train: Callable[..., Run] | None = None
    tests: tuple | None = None
    risks: bool = True
    measure: Callable[..., dict] | None = None
    # the side of (24) that depends on the references alone (_reference_side), for the last pair seen
    _sides: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def reference(self, which: int, n_ref: int) -> Run:
        """The reference flow ``which`` (1, 2, ...): ``n_ref`` heads drawn from the stream
        ``("reference", which)`` and trained by ``reference_train``, every stage's residual kept
        (for the characteristics) and its whole population when (24) is measured.

        Parameters
        ----------
        which : int
            Which of the independent references (1 for the one compared with, 2 for the floor).
        n_ref : int
            Its number of heads, positive.

        Returns
        -------
        Run
            Bound to the model and data; ``population`` holds every head when (24) is measured.

        Examples
        --------
        >>> import torch
        >>> from mfattn.analysis.chaos import ChaosSetup
        >>> from mfattn.flows.integrate import integrate
        >>> from mfattn.flows.seeds import stream
        >>> from mfattn.models.linear import linear_regression
        >>> model, data, _ = linear_regression(d=3, n=20, generator=torch.Generator().manual_seed(0))
        >>> setup = ChaosSetup(
        ...     model, data,
        ...     draw=lambda n, *name: torch.randn(n, 3, generator=stream(0, name), dtype=torch.float64),
        ...     train=lambda h0, **kw: integrate(model, data, h0, stepper="gd", step=0.1, T=1.0,
        ...                                      record_every=0.5, batch_size=None, progress=False, **kw))
        >>> ref = setup.reference(1, n_ref=100)
        >>> tuple(ref.heads.shape), ref.stage_residuals is not None    # no head kept: no (24) asked
        ((3, 0, 3), True)
        """
        check_positive(which, "which", integer=True)
        check_positive(n_ref, "n_ref", integer=True)
        train = self.reference_train or self.train
        return train(self.draw(n_ref, "reference", which), keep=None if self.tests else 0, keep_stages=True)

    def point(self, refs, N: int, s: int) -> dict:
        """One run of the grid: ``N`` heads drawn from the stream ``("heads", s)``, trained, and
        compared with their tagged characteristics under ``refs[0]``; the same quantities between
        ``refs[0]``'s and ``refs[1]``'s characteristics of the same heads are its floor.

        Parameters
        ----------
        refs : sequence of two Run
            The references of :meth:`reference` (which 1 and 2), bound to the model and data.
        N : int
            Number of heads, positive.
        s : int
            The run's seed index, ``>= 0``.

        Returns
        -------
        dict
            JSON-ready: each quantity of :func:`chaos_errors` present (``e_max``, ``e_rms`` always, and
            ``e_max_first``, the maximum over the first :data:`FIRST` heads only (all of them when
            ``N`` is smaller);
            ``e_heads``, each head's supremum over the recording times of ``|e_i|``, in the
            order drawn (a list over the heads, not over time; :meth:`ChaosResult.extreme_value`);
            ``d24``, ``d24_tags`` with ``tests``, and the halves of ``d24_tags`` over the linear and
            the distance test functions, ``d24_tags_lin`` and ``d24_tags_dist``
            (:func:`~mfattn.analysis.transport.lipschitz_parts`); ``d25``, ``d25_tags`` with
            ``risks``) and its floor
            under ``floor_<quantity>``, each a list over the recording times; ``risk`` (the run's),
            ``norm0``, the largest initial head norm (Assumption 3.2), ``travel``, the RMS over
            heads of the distance from the start to the last recording time (the scale on which the
            errors are read), and the entries of ``measure``.

        Raises
        ------
        ValueError
            Naming the argument that is invalid, ``refs`` when their recording times differ from
            the run's, or ``measure`` when it returns a name the point uses itself.

        Examples
        --------
        >>> import torch
        >>> from mfattn.analysis.chaos import ChaosSetup
        >>> from mfattn.flows.integrate import integrate
        >>> from mfattn.flows.seeds import stream
        >>> from mfattn.models.linear import linear_regression
        >>> model, data, _ = linear_regression(d=3, n=20, generator=torch.Generator().manual_seed(0))
        >>> setup = ChaosSetup(
        ...     model, data,
        ...     draw=lambda n, *name: torch.randn(n, 3, generator=stream(0, name), dtype=torch.float64),
        ...     train=lambda h0, **kw: integrate(model, data, h0, stepper="gd", step=0.1, T=1.0,
        ...                                      record_every=0.5, batch_size=None, progress=False, **kw))
        >>> out = setup.point([setup.reference(w, n_ref=100) for w in (1, 2)], N=8, s=0)
        >>> len(out["e_rms"]), out["e_rms"][0]          # three recording times; one start for run and tags
        (3, 0.0)
        >>> out["travel"] > 0
        True
        """
        check_positive(N, "N", integer=True)
        check_positive(s, "s", integer=True, allow_zero=True)
        if len(refs) != 2:
            raise ValueError(f"refs: expected the two references of ChaosSetup.reference, got {len(refs)}")
        a, b = refs
        h0 = self.draw(N, "heads", s)
        run = self.train(h0)
        if run.heads.shape[0] != a.times.shape[0] or not torch.allclose(run.times, a.times):
            raise ValueError("refs: the references' recording times differ from the run's")
        ta, tb = a.characteristics(h0), b.characteristics(h0)
        out = {"risk": run.risk.tolist(), "norm0": float(h0.norm(dim=1).max()),
               "travel": float((run.heads[-1] - h0).norm(dim=-1).pow(2).mean().sqrt())}
        e, floor = (run.heads - ta).norm(dim=-1), (tb - ta).norm(dim=-1)  # (times, heads)
        out["e_max"], out["e_rms"] = _pathwise(e)
        out["floor_e_max"], out["floor_e_rms"] = _pathwise(floor)
        out["e_max_first"] = e[:, :FIRST].max(1).values.tolist()
        out["floor_e_max_first"] = floor[:, :FIRST].max(1).values.tolist()
        out["e_heads"] = e.max(0).values.tolist()
        R = range(run.heads.shape[0])
        if self.tests:
            D, C = self.tests
            means, floor = self._reference_side(a, b)
            out["d24"] = [lipschitz_discrepancy(run.heads[j], means[j], D, C) for j in R]
            out["floor_d24"] = list(floor)
            parts = [lipschitz_parts(run.heads[j], ta[j], D, C) for j in R]
            floor_parts = [lipschitz_parts(tb[j], ta[j], D, C) for j in R]
            out["d24_tags"], out["floor_d24_tags"] = [max(p) for p in parts], [max(p) for p in floor_parts]
            for i, half in enumerate(("lin", "dist")):  # which half of the family carries the maximum
                out[f"d24_tags_{half}"] = [p[i] for p in parts]
                out[f"floor_d24_tags_{half}"] = [p[i] for p in floor_parts]
        if self.risks:
            risk_a = [float(self.model.risk(self.data, ta[j])) for j in R]
            risk_b = [float(self.model.risk(self.data, tb[j])) for j in R]
            out["d25"] = (run.risk - a.risk).abs().tolist()
            out["floor_d25"] = (b.risk - a.risk).abs().tolist()
            out["d25_tags"] = [abs(float(run.risk[j]) - risk_a[j]) for j in R]
            out["floor_d25_tags"] = [abs(rb - ra) for ra, rb in zip(risk_a, risk_b)]
        if self.measure is not None:
            extra = self.measure(run, refs)
            clash = sorted(set(extra) & set(out) | set(extra) & {"N", "s"})
            if clash:
                raise ValueError(f"measure: returned {', '.join(map(repr, clash))}, names the point uses itself")
            out.update(extra)
        return out

    def _reference_side(self, a: Run, b: Run) -> tuple[list, list]:
        """Reference ``a``'s :func:`~mfattn.analysis.transport.lipschitz_means` at every recording time,
        and the floor of (24), ``b``'s population against ``a``'s. Both depend on the two references
        alone, so a grid computes them once, not once per run: at chapter 02's ci sizes they were
        most of a run's record (two passes over ``n_ref`` heads at every recording time; a record
        took 14 to 17 ms with them, 1.0 to 2.7 ms without). The numbers are those of the
        populations themselves, bit for bit. Kept for the last pair of references seen, by identity
        (weak references, so a pair the caller has dropped is neither kept alive nor mistaken for a
        new one)."""
        hit = self._sides.get((id(a), id(b)))
        if hit is not None and hit[0]() is a and hit[1]() is b:
            return hit[2], hit[3]
        D, C = self.tests
        means = [lipschitz_means(a.population[j], D, C) for j in range(a.population.shape[0])]
        floor = [lipschitz_discrepancy(b.population[j], means[j], D, C) for j in range(len(means))]
        self._sides.clear()
        self._sides[(id(a), id(b))] = (weakref.ref(a), weakref.ref(b), means, floor)
        return means, floor


class Corrected(NamedTuple):
    """Floor-corrected values (:func:`floor_corrected`), a named tuple with the fields below.

    Parameters
    ----------
    values : ndarray
        The corrected values.
    dominated : ndarray of bool
        Where the raw value is below :data:`DOMINATED_BELOW` times the floor.

    Examples
    --------
    >>> from mfattn.analysis.chaos import floor_corrected
    >>> floor_corrected([3.0], [1.0])
    Corrected(values=array([2.91547595]), dominated=array([False]))
    """

    values: np.ndarray  # the corrected values
    dominated: np.ndarray  # bool: the raw value is below DOMINATED_BELOW times the floor


def floor_corrected(raw, floor) -> Corrected:
    r"""The reference's own error removed from a measured distance, with the points it dominates flagged.

    The rule: the reference's error :math:`\delta` is independent of the run's own error :math:`e`
    and adds to it in quadrature, :math:`\text{raw}^2\approx e^2+\delta^2`. Two independent
    references differ by :math:`\sqrt2\,\delta`, which is the measured ``floor``. So

    .. math:: e \approx \sqrt{\max(\text{raw}^2-\text{floor}^2/2,\ 0)} .

    A point whose raw value is below :data:`DOMINATED_BELOW` (2) times the floor is *dominated*:
    there the correction is larger than the error it leaves, and :meth:`ChaosResult.fit` leaves it
    out (deciding per number of heads, see :meth:`ChaosResult.corrected`). At every other point the correction lowers the raw value by at most
    :math:`1-\sqrt{7/8}`, about 6.5 %.

    Parameters
    ----------
    raw : array-like of float
        The measured distances, ``>= 0``.
    floor : array-like of float
        The distance between the two references at the same points, ``>= 0``, broadcastable to
        ``raw``.

    Returns
    -------
    Corrected
        ``(values, dominated)``, arrays of the shape of ``raw``.

    Raises
    ------
    ValueError
        Naming ``raw`` or ``floor`` when it holds a negative or non-finite value.

    Examples
    --------
    >>> from mfattn.analysis.chaos import floor_corrected
    >>> c = floor_corrected([5.0, 1.0], [4.0, 1.0])      # 25 - 16/2 = 17; 1 - 1/2
    >>> [round(float(v), 4) for v in c.values], c.dominated.tolist()
    ([4.1231, 0.7071], [True, True])
    >>> floor_corrected([3.0], [1.0]).dominated.tolist()
    [False]
    """
    raw, floor = np.asarray(raw, dtype=float), np.asarray(floor, dtype=float)
    for x, name in ((raw, "raw"), (floor, "floor")):
        if not np.all(np.isfinite(x)) or np.any(x < 0):
            raise ValueError(f"{name}: expected finite values >= 0")
    floor = np.broadcast_to(floor, raw.shape)
    return Corrected(np.sqrt(np.maximum(raw**2 - floor**2 / 2, 0.0)), raw < DOMINATED_BELOW * floor)


class ExtremeValue(NamedTuple):
    """The maximum over heads against the maximum over as many heads of larger runs
    (:meth:`ChaosResult.extreme_value`), a named tuple with the fields below.

    Parameters
    ----------
    N : ndarray
        The number of heads of each run.
    ratio : ndarray
        Per run, the largest head's supremum error over the RMS over heads of the same.
    grid : ndarray
        The numbers of heads of the grid but the largest, increasing.
    predicted : ndarray
        Per ``N`` of ``grid``, the mean ratio of random subsets of ``N`` heads of the larger runs.

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.chaos import ChaosResult
    >>> rows = [{"N": 2, "e_heads": [1.0, 1.0]}, {"N": 4, "e_heads": [2.0, 2.0, 2.0, 2.0]}]
    >>> ev = ChaosResult(rows).extreme_value(torch.Generator().manual_seed(0))
    >>> ev.ratio.tolist(), ev.grid.tolist(), ev.predicted.tolist()
    ([1.0, 1.0], [2.0], [1.0])
    """

    N: np.ndarray
    ratio: np.ndarray
    grid: np.ndarray
    predicted: np.ndarray


def _max_over_rms(s: torch.Tensor) -> torch.Tensor:
    """max over RMS along the last dimension."""
    return s.max(-1).values / s.pow(2).mean(-1).sqrt()


@dataclass
class ChaosResult:
    r"""The runs of a grid of ``N`` and seeds: each quantity's supremum over time, its floor, the
    floor-corrected values and the fits in ``N``.

    Attributes
    ----------
    records : list of dict
        One per run, with ``N`` and the entries of :meth:`ChaosSetup.point` (a sweep's result rows).
    references : list of Run, optional
        The two references the runs were compared with (:meth:`ChaosSetup.reference`), when known.

    Examples
    --------
    >>> from mfattn.analysis.chaos import ChaosResult
    >>> rows = [{"N": N, "e_rms": [0.0, 1 / N ** 0.5], "floor_e_rms": [0.0, 0.01]} for N in (4, 16, 64, 256)]
    >>> res = ChaosResult(rows)
    >>> round(float(res.fit("e_rms", corrected=False).slope), 6)
    -0.5
    >>> res.corrected("e_rms").dominated.tolist()
    [False, False, False, False]
    """

    records: list
    references: list | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if not isinstance(self.records, (list, tuple)) or not self.records:
            raise ValueError("records: expected a non-empty list of run records")
        if any(not isinstance(r, dict) or "N" not in r for r in self.records):
            raise ValueError("records: every record must be a dict with an entry N")

    @property
    def N(self) -> np.ndarray:
        """The number of heads of each run."""
        return np.array([r["N"] for r in self.records], dtype=float)

    def _series(self, key: str, upto: int | None) -> np.ndarray:
        if key not in self.records[0]:
            have = sorted(k for k in self.records[0] if k in QUANTITIES)
            raise ValueError(f"quantity: {key!r} was not measured (these were: {', '.join(have)})")
        if upto is not None:
            check_positive(upto, "upto", integer=True, allow_zero=True)
        return np.array([max(r[key][: None if upto is None else upto + 1]) for r in self.records])

    def sup(self, quantity: str, *, upto: int | None = None) -> np.ndarray:
        """Per run, the supremum of ``quantity`` over the recording times ``0..upto``.

        Parameters
        ----------
        quantity : str
            One of :data:`QUANTITIES` that the runs measured.
        upto : int, optional
            The last recording time's index (``0`` is the start); all by default.

        Returns
        -------
        ndarray
            One value per run.

        Raises
        ------
        ValueError
            Naming ``quantity`` when the runs did not measure it, or ``upto`` when it is negative.

        Examples
        --------
        >>> from mfattn.analysis.chaos import ChaosResult
        >>> res = ChaosResult([{"N": N, "e_rms": [0.0, 2 / N ** 0.5, 1 / N ** 0.5], "floor_e_rms": [0.0, 0.01, 0.2]}
        ...                    for N in (4, 16, 64, 256)])
        >>> res.sup("e_rms").tolist(), res.sup("e_rms", upto=0).tolist()
        ([1.0, 0.5, 0.25, 0.125], [0.0, 0.0, 0.0, 0.0])
        """
        return self._series(quantity, upto)

    def floor(self, quantity: str, *, upto: int | None = None) -> np.ndarray:
        """Per run, the supremum over the same times of the floor: the quantity between the two references.

        Parameters
        ----------
        quantity : str
            One of :data:`QUANTITIES` that the runs measured.
        upto : int, optional
            The last recording time's index (``0`` is the start); all by default.

        Returns
        -------
        ndarray
            One value per run.

        Examples
        --------
        >>> from mfattn.analysis.chaos import ChaosResult
        >>> res = ChaosResult([{"N": N, "e_rms": [0.0, 2 / N ** 0.5, 1 / N ** 0.5], "floor_e_rms": [0.0, 0.01, 0.2]}
        ...                    for N in (4, 16, 64, 256)])
        >>> res.floor("e_rms", upto=1).tolist()
        [0.01, 0.01, 0.01, 0.01]
        """
        return self._series(f"floor_{quantity}", upto)

    def corrected(self, quantity: str, *, upto: int | None = None) -> Corrected:
        r"""Per run, the supremum with the floor removed by :func:`floor_corrected`, and which runs the floor dominates.

        The correction is decided per number of heads, never per run, from the medians at that
        ``N``: :func:`floor_corrected` of the median raw value and the median floor gives one factor
        (between :math:`\sqrt{7/8}` and 1 where the floor does not dominate) that scales every run at
        that ``N``, and every run there is dominated when the median raw value is below
        :data:`DOMINATED_BELOW` times the median floor. A run's own floor would correct a small
        error to zero, and leaving out single runs by their own value would keep the large errors
        and drop the small ones at the largest ``N``, and so flatten the fitted slope.

        Parameters
        ----------
        quantity : str
            One of :data:`QUANTITIES` that the runs measured.
        upto : int, optional
            The last recording time's index (``0`` is the start); all by default.

        Returns
        -------
        Corrected

        Examples
        --------
        >>> from mfattn.analysis.chaos import ChaosResult
        >>> res = ChaosResult([{"N": N, "e_rms": [0.0, 2 / N ** 0.5, 1 / N ** 0.5], "floor_e_rms": [0.0, 0.01, 0.2]}
        ...                    for N in (4, 16, 64, 256)])
        >>> res.corrected("e_rms").dominated.tolist()       # the floor 0.2 beside sups 0.25 and 0.125
        [False, False, True, True]
        """
        raw = self.sup(quantity, upto=upto)
        values, dominated = np.empty(len(raw)), np.zeros(len(raw), dtype=bool)
        for _, at, m_raw, m_floor in self._medians(quantity, upto):
            typical = floor_corrected(m_raw, m_floor)
            values[at] = raw[at] * (typical.values / max(m_raw, 1e-300))
            dominated[at] = typical.dominated
        return Corrected(values, dominated)

    def _medians(self, quantity: str, upto: int | None):
        """Per number of heads (increasing): ``(N, runs at N, median raw supremum, median floor)``."""
        raw, floor = self.sup(quantity, upto=upto), self.floor(quantity, upto=upto)
        for n in np.unique(self.N):
            at = self.N == n
            yield int(n), at, np.median(raw[at]), np.median(floor[at])

    def fit(self, quantity: str, *, upto: int | None = None, corrected: bool = True, rms: bool = False,
            level: float = 0.95) -> LogLogFit:
        """The power law in ``N`` of the supremum of ``quantity`` (:func:`~mfattn.analysis.fitting.loglog_fit`):
        of the floor-corrected values with the dominated points left out (``corrected=True``), or of
        the raw values. ``n`` of the fit says how many runs it kept. With ``rms=True`` the law is that
        of the root mean square over the draws at each ``N`` (:func:`~mfattn.analysis.fitting.rms_fit`):
        the fit for the size of a signed quantity, such as ``d25_tags``, whose single values
        scatter widely in the logarithm.

        Parameters
        ----------
        quantity : str
            One of :data:`QUANTITIES` that the runs measured.
        upto : int, optional
            The last recording time's index (``0`` is the start); all by default.
        corrected : bool, default True
            Fit the floor-corrected values (dominated runs left out), or the raw ones.
        rms : bool, default False
            Fit the root mean square over the draws at each ``N`` instead of every run's value.
        level : float, default 0.95
            Confidence level of the slope's interval.

        Returns
        -------
        LogLogFit

        Raises
        ------
        ValueError
            Naming ``quantity`` when it was not measured or when the floor dominates so many runs
            that fewer than three (or a single ``N``) are left.

        Examples
        --------
        >>> from mfattn.analysis.chaos import ChaosResult
        >>> res = ChaosResult([{"N": N, "e_rms": [0.0, 2 / N ** 0.5, 1 / N ** 0.5], "floor_e_rms": [0.0, 0.01, 0.2]}
        ...                    for N in (4, 16, 64, 256)])
        >>> round(float(res.fit("e_rms", corrected=False).slope), 6), res.fit("e_rms", upto=1).n
        (-0.5, 4)
        >>> twice = ChaosResult([{"N": N, "d25_tags": [0.0, c / N ** 0.5], "floor_d25_tags": [0.0, 0.0]}
        ...                      for N in (4, 16, 64) for c in (1.0, 3.0)])
        >>> round(float(twice.fit("d25_tags", rms=True).slope), 6)
        -0.5
        """
        fitter = rms_fit if rms else loglog_fit
        if not corrected:
            return fitter(self.N, self.sup(quantity, upto=upto), level=level)
        c = self.corrected(quantity, upto=upto)
        keep = ~c.dominated
        if keep.sum() < 3 or len(np.unique(self.N[keep])) < 2:
            raise ValueError(f"quantity: the floor dominates {int(c.dominated.sum())} of {len(keep)} runs of "
                             f"{quantity!r}; too few are left to fit (a larger reference lowers the floor)")
        return fitter(self.N[keep], c.values[keep], level=level)

    def left_out(self, quantity: str, *, upto: int | None = None) -> list:
        """The numbers of heads that :meth:`fit` leaves out, the floor dominating there.

        Parameters
        ----------
        quantity : str
            One of :data:`QUANTITIES` that the runs measured.
        upto : int, optional
            The last recording time's index (``0`` is the start); all by default.

        Returns
        -------
        list of int
            Sorted; empty when every ``N`` is fitted.

        Examples
        --------
        >>> from mfattn.analysis.chaos import ChaosResult
        >>> res = ChaosResult([{"N": N, "e_rms": [0.0, 2 / N ** 0.5, 1 / N ** 0.5], "floor_e_rms": [0.0, 0.01, 0.2]}
        ...                    for N in (4, 16, 64, 256)])
        >>> res.left_out("e_rms"), res.left_out("e_rms", upto=1)
        ([64, 256], [])
        """
        return sorted({int(n) for n in self.N[self.corrected(quantity, upto=upto).dominated]})

    def margin(self, quantity: str, *, upto: int | None = None) -> dict:
        """Per number of heads, how far the raw supremum lies above the floor: the median raw value
        over the median floor (:meth:`corrected` leaves an ``N`` out below :data:`DOMINATED_BELOW`).

        Parameters
        ----------
        quantity : str
            One of :data:`QUANTITIES` that the runs measured.
        upto : int, optional
            The last recording time's index (``0`` is the start); all by default.

        Returns
        -------
        dict of int to float
            In increasing ``N``; ``inf`` where the floor is zero.

        Examples
        --------
        >>> from mfattn.analysis.chaos import ChaosResult
        >>> res = ChaosResult([{"N": N, "e_rms": [0.0, 2 / N ** 0.5, 1 / N ** 0.5], "floor_e_rms": [0.0, 0.01, 0.2]}
        ...                    for N in (4, 16, 64, 256)])
        >>> {n: round(m, 3) for n, m in res.margin("e_rms").items()}
        {4: 5.0, 16: 2.5, 64: 1.25, 256: 0.625}
        """
        return {n: float(m_raw) / float(m_floor) if m_floor > 0 else math.inf
                for n, _, m_raw, m_floor in self._medians(quantity, upto)}

    def dominated_share(self, quantity: str, *, upto: int | None = None) -> float:
        """The fraction of runs whose ``quantity`` the floor dominates.

        Parameters
        ----------
        quantity : str
            One of :data:`QUANTITIES` that the runs measured.
        upto : int, optional
            The last recording time's index (``0`` is the start); all by default.

        Returns
        -------
        float

        Examples
        --------
        >>> from mfattn.analysis.chaos import ChaosResult
        >>> res = ChaosResult([{"N": N, "e_rms": [0.0, 2 / N ** 0.5, 1 / N ** 0.5], "floor_e_rms": [0.0, 0.01, 0.2]}
        ...                    for N in (4, 16, 64, 256)])
        >>> res.dominated_share("e_rms"), res.dominated_share("e_rms", upto=1)
        (0.5, 0.0)
        """
        return float(self.corrected(quantity, upto=upto).dominated.mean())

    def extreme_value(self, generator: torch.Generator, subsets: int = 200) -> ExtremeValue:
        r"""The maximum over heads, read as the largest of more and more draws of one head's error.

        Each head's error is its supremum over time, :math:`s_i=\sup_k\|e_i^k\|` (``e_heads``), so
        that :math:`\max_i s_i` is the supremum of ``e_max``. Per run the *ratio* is
        :math:`\max_i s_i` over the RMS over heads of :math:`s_i`: the run's common size, which falls
        like :math:`N^{-1/2}`, cancels in it. If one head's error, in units of its run's RMS, has a
        law that does not depend on ``N``, a run of ``N`` heads and ``N`` heads chosen at random
        among the heads of a larger run give the same ratio in law. The prediction at each ``N`` is
        therefore the mean ratio of ``subsets`` random subsets of ``N`` heads (without replacement)
        of every run with more heads. The ratio then climbs with ``N`` as long as more draws reach
        further into the law's upper end, and a maximum over heads falls more slowly than the RMS
        by the slope of that climb. The largest ``N`` has no larger run, and no prediction.

        Parameters
        ----------
        generator : torch.Generator
            Draws the subsets (a named stream, :func:`mfattn.flows.seeds.stream`).
        subsets : int, default 200
            Random subsets per larger run and ``N``, positive.

        Returns
        -------
        ExtremeValue
            ``(N, ratio, grid, predicted)``: the ratio of every run; the numbers of heads but the
            largest, and their predictions.

        Raises
        ------
        ValueError
            Naming ``records`` when the runs did not record ``e_heads``, when a run's errors are all
            zero, or when the grid has a single ``N`` (nothing larger to choose from); ``subsets``
            when it is not a positive integer.

        Examples
        --------
        >>> import torch
        >>> from mfattn.analysis.chaos import ChaosResult
        >>> rows = [{"N": 2, "e_heads": [1.0, 3.0]}, {"N": 4, "e_heads": [1.0, 1.0, 1.0, 3.0]}]
        >>> ev = ChaosResult(rows).extreme_value(torch.Generator().manual_seed(0), subsets=4000)
        >>> [round(float(r), 3) for r in ev.ratio]    # 3 / sqrt(5), 3 / sqrt(3)
        [1.342, 1.732]
        >>> round(float(ev.predicted[0]), 1)          # half the pairs hold the 3: (1 + 3 / sqrt(5)) / 2
        1.2
        """
        check_positive(subsets, "subsets", integer=True)
        if any("e_heads" not in r for r in self.records):
            raise ValueError("records: the runs did not record e_heads (ChaosSetup.point records it)")
        s = [torch.tensor(r["e_heads"], dtype=torch.float64) for r in self.records]
        if any(not bool(v.pow(2).sum() > 0) for v in s):
            raise ValueError("records: a run has zero error at every head")
        N = self.N
        grid = np.unique(N)[:-1]
        if grid.size == 0:
            raise ValueError("records: the runs have a single number of heads; nothing larger to choose from")
        predicted = []
        for g in grid:
            ratios = [_max_over_rms(v[torch.rand(subsets, v.numel(), generator=generator).argsort(-1)[:, :int(g)]])
                      for v, n in zip(s, N) if n > g]
            predicted.append(float(torch.cat(ratios).mean()))
        return ExtremeValue(N, np.array([float(_max_over_rms(v)) for v in s]), grid, np.array(predicted))


def expected_floor_ratio(n_ref: int, N: int) -> float:
    r"""How far above the floor the RMS pathwise error should lie at ``N`` heads, were both of
    the order their sampling gives: :math:`\sqrt{n_\text{ref}/(2N)}` (the floor is two references'
    errors in quadrature). For choosing ``n_ref``: :data:`DOMINATED_BELOW` or more at the largest
    ``N`` keeps that point in the fit.

    Parameters
    ----------
    n_ref : int
        Heads of each reference.
    N : int
        Heads of a run.

    Returns
    -------
    float

    Examples
    --------
    >>> from mfattn.analysis.chaos import expected_floor_ratio
    >>> round(expected_floor_ratio(4096, 1024), 3)
    1.414
    """
    check_positive(n_ref, "n_ref", integer=True)
    check_positive(N, "N", integer=True)
    return math.sqrt(n_ref / (2 * N))
