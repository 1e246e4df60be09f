r"""The two-layer mean-field network under the square loss: the classical baseline (chapter 07).

Neurons are the particles. A neuron is ``omega = (a, w, b)`` in ``R^{d + 2}``, laid out as ``a``,
then ``w (d)``, then ``b``, and a weighted measure ``rho = sum_i p_i delta_{omega_i}`` predicts

.. math:: f(x;\rho)=\sum_i p_i\,a_i\,\sigma(\langle w_i,x\rangle+b_i),

which is ``(1/m) sum_j a_j sigma(<w_j, x> + b_j)`` for the uniform weights of ``m`` neurons (the
lecture notes' network; Mei, Montanari and Nguyen 2018). The risk over a dataset of ``n`` pairs is

.. math::

    R(\rho)=\frac1{2n}\sum_k\big(f(x_k;\rho)-y_k\big)^2,

    \Phi(\omega;\rho)=\frac1n\sum_k\big(f(x_k;\rho)-y_k\big)\,a\,\sigma(\langle w,x_k\rangle+b),

``Phi`` being its first variation (the function ``Psi`` of Mei et al.). The model implements the
:class:`~mfattn.models.particles.ParticleModel` protocol, so :func:`mfattn.flows.dynamics.sgd` runs the particle
SGD ``omega^{k+1} = omega^k - 2 eps zeta grad Phi`` and :func:`mfattn.flows.dynamics.reference_flow` the
characteristics of ``d rho / dt = 2 zeta div(rho grad Phi)``, with the same time convention as the
heads' (19)-(21); :func:`mfattn.analysis.static.iid_construction` and :func:`mfattn.analysis.static.iid_gap_coefficient`
give the static gap. Heads are streamed in chunks, as for the attention heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_dim, check_generator, check_positive, check_tensor
from .activations import get_activation
from .particles import blocks
from .particles import ParticleModel

__all__ = ["RegressionData", "TwoLayerModel", "teacher_regression"]


@dataclass(frozen=True)
class RegressionData:
    """``n`` inputs ``X (n, d)`` with real targets ``Y (n, 1)``; averages over it are exact expectations.

    Attributes
    ----------
    X : Tensor (n, d)
        The inputs, one per row (``n >= 1``).
    Y : Tensor (n, 1)
        The targets, of the dtype and device of ``X``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.twolayer import RegressionData
    >>> X = torch.randn(5, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    >>> data = RegressionData(X, X[:, :1] ** 2)
    >>> data.n, data.d, len(data)
    (5, 3, 5)
    """

    X: torch.Tensor
    Y: torch.Tensor

    def __post_init__(self):
        check_tensor(self.X, "X", ndim=2)
        check_tensor(self.Y, "Y", ndim=2, dtype=self.X.dtype, device=self.X.device)
        if self.X.shape[0] < 1:
            raise ValueError("X: needs at least one sample")
        check_dim(self.Y, "Y", 0, self.X.shape[0], "the number of samples of X")
        check_dim(self.Y, "Y", 1, 1, "one target per sample")

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[1]

    def __len__(self) -> int:
        return self.n


class TwoLayerModel(ParticleModel):
    """The mean-field two-layer network ``f(x) = sum_i p_i a_i sigma(<w_i, x> + b_i)`` of chapter 07.

    Parameters
    ----------
    d : int
        Input dimension (``d_omega = d + 2``).
    activation : str
        ``tanh`` (default, smooth and bounded, as Mei et al.'s assumptions ask), ``gelu`` or ``relu``.
    dtype, device
        Of the neurons and the data.
    chunk_size : int, optional
        Neurons per chunk; by default chosen so that one ``(n, chunk)`` block holds about 4 M numbers.

    Attributes
    ----------
    d : int
        Input dimension.
    d_omega : int
        Neuron dimension ``d + 2``.
    act : Activation
        The activation ``sigma`` with its derivative.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.twolayer import TwoLayerModel
    >>> model = TwoLayerModel(3)
    >>> model
    TwoLayerModel(d=3, activation=tanh, d_omega=5, dtype=torch.float64)
    >>> X = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    >>> neuron = torch.tensor([[2.0, 1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)  # a, w, b
    >>> round(float(model.output(X, neuron)), 4)  # 2 tanh(1)
    1.5232
    """

    def __init__(self, d: int, *, activation: str = "tanh", dtype=torch.float64, device="cpu",
                 chunk_size: int | None = None):
        check_positive(d, "d", integer=True)
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype: expected torch.float32 or torch.float64, got {dtype}")
        if chunk_size is not None:
            check_positive(chunk_size, "chunk_size", integer=True)
        self.d = d
        self.d_omega = d + 2
        self.act = get_activation(activation)
        self._dtype = dtype
        self._device = torch.device(device)
        self.chunk_size = chunk_size

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def device(self) -> torch.device:
        return self._device

    def __repr__(self) -> str:
        return f"TwoLayerModel(d={self.d}, activation={self.act.name}, d_omega={self.d_omega}, dtype={self.dtype})"

    # -------------------------------------------------------------- validation
    def check_heads(self, heads, name: str = "heads") -> torch.Tensor:
        """Validate neurons: a finite ``(N, d + 2)`` tensor of the model's dtype and device, ``N >= 1``.

        Parameters
        ----------
        heads : Tensor (N, d_omega)
            The neurons ``(a, w, b)``, one per row.
        name : str
            The argument's name in the error message.

        Returns
        -------
        Tensor (N, d_omega)
            ``heads`` itself; a ``ValueError`` naming ``name`` is raised if it is invalid.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.twolayer import TwoLayerModel
        >>> model = TwoLayerModel(3)
        >>> tuple(model.check_heads(torch.zeros(4, 5, dtype=torch.float64)).shape)
        (4, 5)
        >>> model.check_heads(torch.zeros(4, 3, dtype=torch.float64), "query")
        Traceback (most recent call last):
        ...
        ValueError: query: ...
        """
        return self._check_rows(heads, name, "d_omega = d + 2", "neuron")

    def check_data(self, data) -> RegressionData:
        """Validate a dataset: a :class:`RegressionData` with ``d`` inputs, of the model's dtype and device.

        Parameters
        ----------
        data : RegressionData
            Inputs ``X (n, d)`` and targets ``Y (n, 1)``.

        Returns
        -------
        RegressionData
            ``data`` itself; a ``ValueError`` is raised if it does not fit the model.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.twolayer import RegressionData, TwoLayerModel
        >>> data = RegressionData(torch.zeros(5, 3, dtype=torch.float64), torch.zeros(5, 1, dtype=torch.float64))
        >>> TwoLayerModel(3).check_data(data).n
        5
        >>> TwoLayerModel(2).check_data(data)
        Traceback (most recent call last):
        ...
        ValueError: data.X: ...
        """
        if not isinstance(data, RegressionData):
            raise ValueError(f"data: expected a mfattn.models.twolayer.RegressionData, got {type(data).__name__}")
        if data.X.dtype != self.dtype or data.X.device != self.device:
            raise ValueError(f"data: dtype/device {data.X.dtype}/{data.X.device} differ from the model's "
                             f"{self.dtype}/{self.device}")
        check_dim(data.X, "data.X", 1, self.d, "d")
        return data

    # ------------------------------------------------------------------ blocks
    def _chunk(self, n: int, N: int) -> int:
        return self.chunk_size or max(1, min(N, (1 << 22) // max(n, 1)))

    def _pre(self, X, h):
        return torch.addmm(h[:, -1], X, h[:, 1:-1].T)  # (n, c): <w, x> + b

    def loss(self, Y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Square loss per sample, ``(..., n, 1) -> (..., n)``: ``(z - y)^2 / 2``.

        Parameters
        ----------
        Y : Tensor (..., n, 1)
            Targets.
        z : Tensor (..., n, 1)
            Predictions.

        Returns
        -------
        Tensor (..., n)
            The loss of every sample.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.twolayer import TwoLayerModel
        >>> Y = torch.tensor([[1.0], [0.0]], dtype=torch.float64)
        >>> z = torch.tensor([[3.0], [0.5]], dtype=torch.float64)
        >>> TwoLayerModel(3).loss(Y, z).tolist()
        [2.0, 0.125]
        """
        return 0.5 * (z - Y).pow(2).sum(-1)

    def loss_hessian(self, Y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """The identity: the square loss is exactly quadratic. ``(n, 1, 1)``.

        Parameters
        ----------
        Y : Tensor (..., n, 1)
            Targets (unused: the Hessian does not depend on them).
        z : Tensor (..., n, 1)
            Predictions; fix the shape, dtype and device.

        Returns
        -------
        Tensor (..., n, 1, 1)
            Ones: the ``1 x 1`` Hessian in ``z`` of every sample's loss.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.twolayer import TwoLayerModel
        >>> z = torch.zeros(4, 1, dtype=torch.float64)
        >>> H = TwoLayerModel(3).loss_hessian(z, z)
        >>> tuple(H.shape), bool((H == 1).all())
        ((4, 1, 1), True)
        """
        return torch.ones(*z.shape, 1, dtype=z.dtype, device=z.device)

    def _output(self, X, heads, weights) -> torch.Tensor:
        """``f(x_k; rho)`` for every input: (n, 1), streamed over chunks of neurons."""
        f = X.new_zeros(X.shape[0])
        for h in blocks(heads.shape[0], self._chunk(X.shape[0], heads.shape[0])):
            f += self.act.f(self._pre(X, heads[h])) @ (weights[h] * heads[h, 0])
        return self.reduce(f)[:, None]

    def grad_at(self, X, G, query) -> torch.Tensor:
        r"""``grad Phi`` at ``query`` for the scaled residual ``G = (f - y) / n`` (n,): (M, d + 2).

        Hot path: no validation.

        Parameters
        ----------
        X : Tensor (n, d)
            Inputs.
        G : Tensor (n,)
            The residual ``(f(x_k; rho) - y_k) / n`` of the measure ``rho`` (frozen).
        query : Tensor (M, d_omega)
            The neurons at which to evaluate.

        Returns
        -------
        Tensor (M, d_omega)
            :math:`\nabla_\omega\Phi(\omega;\rho)` at every query neuron, in the layout
            ``(a, w, b)``.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.twolayer import teacher_regression
        >>> g = torch.Generator().manual_seed(0)
        >>> model, data, teacher = teacher_regression(3, 5, m_teacher=2, generator=g)
        >>> heads = 0.5 * torch.randn(4, model.d_omega, generator=g, dtype=torch.float64)
        >>> weights = torch.full((4,), 0.25, dtype=torch.float64)
        >>> _, G, grad, _ = model.evaluate(data.X, data.Y, heads, weights)
        >>> bool(torch.allclose(model.grad_at(data.X, G, heads), grad))
        True
        """
        out = X.new_empty(query.shape[0], self.d_omega)
        for h in blocks(query.shape[0], self._chunk(X.shape[0], query.shape[0])):
            q = query[h]
            pre = self._pre(X, q)
            u = G[:, None] * self.act.df(pre) * q[:, 0]  # (n, c): d Phi / d pre
            out[h, 0] = G @ self.act.f(pre)
            out[h, 1:-1] = u.T @ X
            out[h, -1] = u.sum(0)
        return out

    def phi_at(self, X, G, query) -> torch.Tensor:
        r"""``Phi`` at ``query`` for the scaled residual ``G = (f - y) / n`` (n,): (M,).

        Hot path: no validation.

        Parameters
        ----------
        X : Tensor (n, d)
            Inputs.
        G : Tensor (n,)
            The residual ``(f(x_k; rho) - y_k) / n`` of the measure ``rho`` (frozen).
        query : Tensor (M, d_omega)
            The neurons at which to evaluate.

        Returns
        -------
        Tensor (M,)
            :math:`\Phi(\omega;\rho) =` :math:`\sum_k G_k\,a\,\sigma(\langle w,x_k\rangle+b)` at every
            query neuron.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.twolayer import teacher_regression
        >>> g = torch.Generator().manual_seed(0)
        >>> model, data, teacher = teacher_regression(3, 5, m_teacher=2, generator=g)
        >>> heads = 0.5 * torch.randn(4, model.d_omega, generator=g, dtype=torch.float64)
        >>> weights = torch.full((4,), 0.25, dtype=torch.float64)
        >>> _, G, _, phi = model.evaluate(data.X, data.Y, heads, weights, phi=True)
        >>> bool(torch.allclose(model.phi_at(data.X, G, heads), phi))
        True
        """
        out = X.new_empty(query.shape[0])
        for h in blocks(query.shape[0], self._chunk(X.shape[0], query.shape[0])):
            out[h] = query[h, 0] * (G @ self.act.f(self._pre(X, query[h])))
        return out

    def evaluate(self, X, Y, heads, weights, *, phi: bool = False, risk: bool = True):
        r"""Risk, ``G = (f - y) / n``, ``grad Phi`` at the atoms and, with ``phi``, ``Phi`` there; no validation.

        Parameters
        ----------
        X : Tensor (n, d)
            Inputs (the dataset's or a minibatch of them).
        Y : Tensor (n, 1)
            Targets.
        heads : Tensor (N, d_omega)
            The neurons (atoms) of the measure.
        weights : Tensor (N,)
            Their weights, on the simplex.
        phi : bool
            Whether to evaluate ``Phi`` at the atoms too.
        risk : bool
            Whether to compute the risk (else None: a call for the gradient alone).

        Returns
        -------
        risk : Tensor () or None
            The risk ``R(rho)`` on ``X, Y``; None with ``risk=False``.
        G : Tensor (n,)
            The residual ``(f(x_k; rho) - y_k) / n``.
        grad : Tensor (N, d_omega)
            :math:`\nabla_\omega\Phi` at the atoms.
        phi : Tensor (N,) or None
            ``Phi`` at the atoms with ``phi``, else None.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.twolayer import teacher_regression
        >>> g = torch.Generator().manual_seed(0)
        >>> model, data, teacher = teacher_regression(3, 5, m_teacher=2, generator=g)
        >>> heads = 0.5 * torch.randn(4, model.d_omega, generator=g, dtype=torch.float64)
        >>> weights = torch.full((4,), 0.25, dtype=torch.float64)
        >>> risk, G, grad, phi = model.evaluate(data.X, data.Y, heads, weights)
        >>> round(float(risk), 4), tuple(G.shape), tuple(grad.shape), phi is None
        (0.039, (5,), (4, 5), True)
        """
        r = self._output(X, heads, weights) - Y
        G = r[:, 0] / X.shape[0]
        return (0.5 * r.pow(2).mean() if risk else None, G, self.grad_at(X, G, heads),
                self.phi_at(X, G, heads) if phi else None)

    def grad_phi(self, X, Y, heads, weights) -> torch.Tensor:
        r""":math:`\nabla_\omega\Phi(\omega_i;\rho)` at the neurons on the samples ``X, Y``: the drift of SGD (19).

        Hot path: no validation.

        Parameters
        ----------
        X : Tensor (n, d)
            Inputs (the dataset's or a minibatch of them).
        Y : Tensor (n, 1)
            Targets.
        heads : Tensor (N, d_omega)
            The neurons of the measure.
        weights : Tensor (N,)
            Their weights, on the simplex.

        Returns
        -------
        Tensor (N, d_omega)
            One gradient per neuron.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.twolayer import teacher_regression
        >>> g = torch.Generator().manual_seed(0)
        >>> model, data, teacher = teacher_regression(3, 5, m_teacher=2, generator=g)
        >>> heads = 0.5 * torch.randn(4, model.d_omega, generator=g, dtype=torch.float64)
        >>> weights = torch.full((4,), 0.25, dtype=torch.float64)
        >>> g = model.grad_phi(data.X, data.Y, heads, weights)
        >>> bool(torch.allclose(g, model.grad_first_variation(data, heads, heads)))
        True
        """
        return self.evaluate(X, Y, heads, weights, risk=False)[2]

    def risk_and_dissipation(self, X, Y, heads, weights, *, dissipation: bool = True):
        r"""The risk and, with ``dissipation``, the dissipation :math:`\int|\nabla\Phi|^2d\rho`; no validation.

        Parameters
        ----------
        X : Tensor (n, d)
            Inputs.
        Y : Tensor (n, 1)
            Targets.
        heads : Tensor (N, d_omega)
            The neurons of the measure.
        weights : Tensor (N,)
            Their weights, on the simplex.
        dissipation : bool
            Whether to compute the dissipation (without it, no gradient is computed).

        Returns
        -------
        tuple of Tensor () and (Tensor () or None)
            ``(risk, dissipation)``; the second is None without ``dissipation``.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.twolayer import teacher_regression
        >>> g = torch.Generator().manual_seed(0)
        >>> model, data, teacher = teacher_regression(3, 5, m_teacher=2, generator=g)
        >>> heads = 0.5 * torch.randn(4, model.d_omega, generator=g, dtype=torch.float64)
        >>> weights = torch.full((4,), 0.25, dtype=torch.float64)
        >>> risk, diss = model.risk_and_dissipation(data.X, data.Y, heads, weights)
        >>> round(float(risk), 4), round(float(diss), 4)
        (0.039, 0.0134)
        """
        if not dissipation:
            return 0.5 * (self._output(X, heads, weights) - Y).pow(2).mean(), None
        risk, _, g, _ = self.evaluate(X, Y, heads, weights)
        return risk, self.weighted_sq_norm(weights, g)

    # -------------------------------------------------------------- public API
    def features(self, X: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """One neuron's output ``a sigma(<w, x> + b)`` at every input: (N, n, 1).

        Parameters
        ----------
        X : Tensor (n, d)
            Inputs.
        heads : Tensor (N, d_omega)
            The neurons.

        Returns
        -------
        Tensor (N, n, 1)
            The output of every neuron at every input; their ``weights``-average over the
            first axis is :meth:`output`.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.twolayer import teacher_regression
        >>> g = torch.Generator().manual_seed(0)
        >>> model, data, teacher = teacher_regression(3, 5, m_teacher=2, generator=g)
        >>> heads = 0.5 * torch.randn(4, model.d_omega, generator=g, dtype=torch.float64)
        >>> F = model.features(data.X, heads)
        >>> tuple(F.shape), bool(torch.allclose(F.mean(0), model.output(data.X, heads)))
        ((4, 5, 1), True)
        """
        check_tensor(X, "X", ndim=2, dtype=self.dtype, device=self.device)
        check_dim(X, "X", 1, self.d, "d")
        heads = self.check_heads(heads)
        return (self.act.f(self._pre(X, heads)) * heads[:, 0]).T[..., None]

    def output(self, X: torch.Tensor, heads, weights=None) -> torch.Tensor:
        """The network's prediction ``f(x; rho)`` at every row of ``X (n, d)``: (n, 1).

        Parameters
        ----------
        X : Tensor (n, d)
            Inputs.
        heads : Tensor (N, d_omega)
            The neurons of the measure.
        weights : Tensor (N,), optional
            Their weights, on the simplex; uniform ``1 / N`` by default.

        Returns
        -------
        Tensor (n, 1)
            ``f(x_k; rho)`` for every input.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.twolayer import teacher_regression
        >>> g = torch.Generator().manual_seed(0)
        >>> model, data, teacher = teacher_regression(3, 5, m_teacher=2, generator=g)
        >>> heads = 0.5 * torch.randn(4, model.d_omega, generator=g, dtype=torch.float64)
        >>> bool(torch.allclose(model.output(data.X, teacher), data.Y))  # the teacher fits exactly
        True
        """
        check_tensor(X, "X", ndim=2, dtype=self.dtype, device=self.device)
        check_dim(X, "X", 1, self.d, "d")
        heads, weights = self.check_measure(heads, weights)
        return self._output(X, heads, weights)

    def risk(self, data: RegressionData, heads, weights=None) -> torch.Tensor:
        """The square-loss risk ``R(rho) = (1/2n) sum_k (f(x_k) - y_k)^2``: 0-dim tensor.

        Parameters
        ----------
        data : RegressionData
            Inputs ``X (n, d)`` and targets ``Y (n, 1)``.
        heads : Tensor (N, d_omega)
            The neurons of the measure.
        weights : Tensor (N,), optional
            Their weights, on the simplex; uniform ``1 / N`` by default.

        Returns
        -------
        Tensor ()
            The risk.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.twolayer import teacher_regression
        >>> g = torch.Generator().manual_seed(0)
        >>> model, data, teacher = teacher_regression(3, 5, m_teacher=2, generator=g)
        >>> heads = 0.5 * torch.randn(4, model.d_omega, generator=g, dtype=torch.float64)
        >>> round(float(model.risk(data, heads)), 4), float(model.risk(data, teacher))
        (0.039, 0.0)
        """
        data = self.check_data(data)
        heads, weights = self.check_measure(heads, weights)
        return self.risk_and_dissipation(data.X, data.Y, heads, weights, dissipation=False)[0]

    def prepare(self, data, heads, weights, query):
        """Validate the arguments of the public first-variation methods and compute the residual.

        Parameters
        ----------
        data : RegressionData
            Inputs ``X (n, d)`` and targets ``Y (n, 1)``.
        heads : Tensor (N, d_omega)
            The neurons of the measure.
        weights : Tensor (N,) or None
            Their weights, on the simplex; uniform ``1 / N`` when None.
        query : Tensor (M, d_omega) or None
            Neurons at which to evaluate; ``heads`` when None.

        Returns
        -------
        tuple of RegressionData, Tensor (M, d_omega) and Tensor (n,)
            ``(data, query, G)`` with ``G = (f(x_k; rho) - y_k) / n``.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.twolayer import teacher_regression
        >>> g = torch.Generator().manual_seed(0)
        >>> model, data, teacher = teacher_regression(3, 5, m_teacher=2, generator=g)
        >>> heads = 0.5 * torch.randn(4, model.d_omega, generator=g, dtype=torch.float64)
        >>> _, query, G = model.prepare(data, heads, None, None)
        >>> query is heads, tuple(G.shape)
        (True, (5,))
        """
        data = self.check_data(data)
        heads, weights = self.check_measure(heads, weights)
        query = heads if query is None else self.check_heads(query, "query")
        G = (self._output(data.X, heads, weights) - data.Y)[:, 0] / data.n
        return data, query, G

    def first_variation(self, data: RegressionData, query, heads, weights=None) -> torch.Tensor:
        """``Phi(omega; rho) = (1/n) sum_k (f(x_k) - y_k) a sigma(<w, x_k> + b)`` at each query neuron: (M,).

        Parameters
        ----------
        data : RegressionData
            Inputs ``X (n, d)`` and targets ``Y (n, 1)``.
        query : Tensor (M, d_omega) or None
            Neurons at which to evaluate; ``heads`` when None.
        heads : Tensor (N, d_omega)
            The neurons of the measure ``rho``.
        weights : Tensor (N,), optional
            Their weights, on the simplex; uniform ``1 / N`` by default.

        Returns
        -------
        Tensor (M,)
            ``Phi`` at every query neuron.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.twolayer import teacher_regression
        >>> g = torch.Generator().manual_seed(0)
        >>> model, data, teacher = teacher_regression(3, 5, m_teacher=2, generator=g)
        >>> heads = 0.5 * torch.randn(4, model.d_omega, generator=g, dtype=torch.float64)
        >>> tuple(model.first_variation(data, heads[:2], heads).shape)
        (2,)
        >>> bool((model.first_variation(data, heads, teacher) == 0).all())  # zero residual
        True
        """
        data, query, G = self.prepare(data, heads, weights, query)
        return self.phi_at(data.X, G, query)

    def grad_first_variation(self, data: RegressionData, query, heads, weights=None) -> torch.Tensor:
        """``grad_omega Phi(omega; rho)`` at each query neuron: (M, d + 2).

        Parameters
        ----------
        data : RegressionData
            Inputs ``X (n, d)`` and targets ``Y (n, 1)``.
        query : Tensor (M, d_omega) or None
            Neurons at which to evaluate; ``heads`` when None.
        heads : Tensor (N, d_omega)
            The neurons of the measure ``rho`` (frozen).
        weights : Tensor (N,), optional
            Their weights, on the simplex; uniform ``1 / N`` by default.

        Returns
        -------
        Tensor (M, d_omega)
            The gradient at every query neuron, in the layout ``(a, w, b)``.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.twolayer import teacher_regression
        >>> g = torch.Generator().manual_seed(0)
        >>> model, data, teacher = teacher_regression(3, 5, m_teacher=2, generator=g)
        >>> heads = 0.5 * torch.randn(4, model.d_omega, generator=g, dtype=torch.float64)
        >>> tuple(model.grad_first_variation(data, heads[:2], heads).shape)
        (2, 5)
        """
        data, query, G = self.prepare(data, heads, weights, query)
        return self.grad_at(data.X, G, query)

def teacher_regression(d: int, n: int, *, m_teacher: int = 4, activation: str = "tanh",
                       generator: torch.Generator, dtype=torch.float64, device="cpu"):
    """A teacher-student regression task for chapter 07: ``x ~ N(0, I_d)``, ``y = f(x; teacher)`` with
    ``m_teacher`` neurons ``a ~ N(0, 1)``, ``w ~ N(0, I_d / d)``, ``b = 0``. Returns
    ``(model, data, teacher_neurons)``; the teacher's risk is 0.

    The targets are the teacher network with uniform weights ``1 / m_teacher``.

    Parameters
    ----------
    d : int
        Input dimension.
    n : int
        Number of samples.
    m_teacher : int
        Number of teacher neurons.
    activation : str
        ``tanh`` (default), ``gelu`` or ``relu``, of the teacher and the model.
    generator : torch.Generator
        The source of every draw (made in float64 on the CPU, then cast).
    dtype : torch.dtype
        Dtype of the model, the data and the teacher.
    device : str or torch.device
        Their device.

    Returns
    -------
    model : TwoLayerModel
        The model of input dimension ``d``.
    data : RegressionData
        Inputs ``X (n, d)`` and targets ``Y (n, 1)``.
    teacher : Tensor (m_teacher, d + 2)
        The teacher's neurons ``(a, w, b)``.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.twolayer import teacher_regression
    >>> g = torch.Generator().manual_seed(0)
    >>> model, data, teacher = teacher_regression(3, 5, m_teacher=2, generator=g)
    >>> tuple(data.X.shape), tuple(data.Y.shape), tuple(teacher.shape)
    ((5, 3), (5, 1), (2, 5))
    >>> float(model.risk(data, teacher)), bool((teacher[:, -1] == 0).all())
    (0.0, True)
    """
    check_positive(d, "d", integer=True)
    check_positive(n, "n", integer=True)
    check_positive(m_teacher, "m_teacher", integer=True)
    check_generator(generator)
    model = TwoLayerModel(d, activation=activation, dtype=dtype, device=device)
    X = torch.randn(n, d, generator=generator, dtype=torch.float64)
    t = torch.zeros(m_teacher, d + 2, dtype=torch.float64)
    t[:, 0] = torch.randn(m_teacher, generator=generator, dtype=torch.float64)
    t[:, 1:-1] = torch.randn(m_teacher, d, generator=generator, dtype=torch.float64) / d ** 0.5
    t = t.to(device=device, dtype=dtype)
    X = X.to(device=device, dtype=dtype)
    Y = model._output(X, t, torch.full((m_teacher,), 1.0 / m_teacher, dtype=dtype, device=device))
    return model, RegressionData(X, Y), t
