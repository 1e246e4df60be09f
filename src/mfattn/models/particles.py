r"""The particle-model protocol: what a mean-field model provides so that the engine's dynamics,
static and stability tools run on it.

A mean-field model maps a weighted empirical measure :math:`\rho=\sum_i w_i\delta_{\omega_i}` of
particles ``heads (N, d_omega)`` with weights ``weights (N,)`` on the simplex to a prediction that is
an average of per-particle features, :math:`z^\rho=\sum_i w_i\psi(\cdot;\omega_i)` (8), a risk
:math:`\mathcal E(\rho)` (10) of that prediction, and the first variation :math:`\Phi(\omega;\rho)` (11)
whose gradient drives every particle (13), (19)-(21). :class:`~mfattn.models.model.HeadModel` (attention heads
under cross-entropy, paper section 2) and :class:`~mfattn.models.twolayer.TwoLayerModel` (neurons under the
square loss, chapter 07) implement it, and so does :class:`~mfattn.models.linear.LinearModel`, the worked
example of a new model: a linear predictor whose flow has a closed form, written against this protocol
alone. ``tests/test_conformance.py`` runs the same checks on every model the package ships.

A model subclasses :class:`ParticleModel` and provides, besides ``d_omega``, ``dtype`` and ``device``:

validation (public entry points call these first; each raises ``ValueError`` naming the argument)
    ``check_data(data)``: the dataset object, with ``data.X`` (inputs, first axis the ``n`` samples),
    ``data.Y`` (targets, first axis ``n``) and ``data.n``; ``check_heads(heads, name)``: a floating
    ``(N, d_omega)`` tensor of the model's dtype and device.

the hot path (no validation; ``X, Y`` are the dataset's tensors or a minibatch of them)
    ``evaluate(X, Y, heads, weights, *, phi=False, risk=True) -> (risk, G, grad, phi)``: the risk (10) (a
    0-dim tensor; None with ``risk=False``, for a call that wants the gradient alone), the *residual* ``G`` (the loss's gradient in the prediction, divided by the number of
    terms of the dataset average: everything :math:`\nabla\Phi(\cdot;\rho)` needs of :math:`\rho`),
    ``grad (N, d_omega)`` :math:`=\nabla_\omega\Phi(\omega_i;\rho)` at the particles (13), and with ``phi``
    the values ``Phi (N,)`` there (11), else ``None``.

    ``grad_at(X, G, query) -> (M, d_omega)``: :math:`\nabla_\omega\Phi` at other points ``query (M,
    d_omega)`` for a frozen residual ``G`` (the tagged characteristics (21), the local solves of
    chapter 03). ``phi_at(X, G, query) -> (M,)``: :math:`\Phi` there.

for the static tools (:mod:`mfattn.analysis.static`)
    ``features(X, heads) -> (N, S..., V)``: one particle's prediction :math:`\psi` at every sample (and
    position); ``loss(Y, z) -> (*S)``: the loss per sample for predictions ``z (S..., V)``;
    ``loss_hessian(Y, z) -> (S..., V, V)``: its Hessian in ``z``.

:class:`ParticleModel` supplies the rest from these: ``check_measure``, ``grad_phi`` (the drift of
SGD (19)), ``risk_and_dissipation`` (the recorders; (10) and (38)), ``weighted_sq_norm`` and the
validated values ``risk``, ``first_variation``, ``grad_first_variation`` and ``dissipation``.

:mod:`mfattn.flows.integrate`, :mod:`mfattn.flows.dynamics`, :func:`mfattn.analysis.static.iid_construction`,
:func:`mfattn.analysis.static.iid_gap_coefficient` and the fits of :mod:`mfattn.analysis.longtime` call nothing else.
The tools that read the attention head's parameter layout (the minimisers and certificates of
:mod:`mfattn.analysis.static`, :mod:`mfattn.analysis.stability`, :mod:`mfattn.analysis.smoothness`,
:func:`mfattn.analysis.longtime.inward_products`) refuse another model with a ``ValueError``
(:func:`mfattn.models.model.require_heads`).
Particles interact only through sums over the measure, and every such sum ends in :meth:`ParticleModel.reduce`
(the identity; an all-reduce in :class:`mfattn.models.distributed.ShardedHeadModel`).
"""

from __future__ import annotations

import torch

from .._checks import check_dim, check_tensor, check_weights

__all__ = ["ParticleModel", "blocks"]


def blocks(n: int, size: int):
    """Slices ``[0, size), [size, 2 size), ...`` covering ``range(n)``: the chunks over which the models
    stream samples and particles within a memory budget.

    Parameters
    ----------
    n : int
        Length of the range to cover (samples or particles).
    size : int
        Length of a chunk, at least 1; the last chunk is shorter when ``size`` does not divide ``n``.

    Yields
    ------
    slice
        ``slice(start, min(start + size, n))`` for ``start = 0, size, 2 size, ...``; none when ``n = 0``.

    Examples
    --------
    >>> from mfattn.models.particles import blocks
    >>> [(s.start, s.stop) for s in blocks(7, 3)]
    [(0, 3), (3, 6), (6, 7)]
    """
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


class ParticleModel:
    """Base class of the engine's mean-field models: the measure's checks and its sums over particles.

    A subclass provides the validation, the hot path and the static-tool methods listed in the
    module's description (:meth:`check_data`, :meth:`check_heads`, :meth:`evaluate`,
    :meth:`grad_at`, :meth:`phi_at`, ...); the methods below that raise ``NotImplementedError`` here
    are illustrated on :class:`~mfattn.models.model.HeadModel`, which implements them.

    Attributes
    ----------
    d_omega : int
        Dimension of one particle ``omega``.
    dtype : torch.dtype
        Floating dtype of the particles and of the data (a property every model defines).
    device : torch.device
        Device of the particles and of the data (a property every model defines).

    Examples
    --------
    >>> from mfattn.models.particles import ParticleModel
    >>> from mfattn.models.tasks import example
    >>> model = example().model
    >>> isinstance(model, ParticleModel), model.d_omega, model.dtype
    (True, 24, torch.float64)
    """

    d_omega: int

    @property
    def dtype(self) -> torch.dtype:  # pragma: no cover - every model defines it
        raise NotImplementedError

    @property
    def device(self) -> torch.device:  # pragma: no cover - every model defines it
        raise NotImplementedError

    def _check_rows(self, heads, name: str, label: str, unit: str) -> torch.Tensor:
        # the body of a model's ``check_heads``: a finite (N, d_omega) tensor of the model's dtype and
        # device, N >= 1; ``label`` names d_omega and ``unit`` a particle in the error messages
        check_tensor(heads, name, ndim=2, dtype=self.dtype, device=self.device)
        check_dim(heads, name, 1, self.d_omega, label)
        if heads.shape[0] < 1:
            raise ValueError(f"{name}: needs at least one {unit}")
        return heads

    def check_data(self, data):  # pragma: no cover - every model defines it
        """The dataset (``data.X``, ``data.Y``, ``data.n``), validated against the model.

        Parameters
        ----------
        data : dataset object
            The model's dataset type (:class:`mfattn.Dataset` for :class:`~mfattn.models.model.HeadModel`):
            ``data.X`` the inputs and ``data.Y`` the targets, first axis the ``n`` samples, in the
            model's dtype and on its device.

        Returns
        -------
        dataset object
            ``data`` itself when it is valid.

        Raises
        ------
        ValueError
            Naming ``data`` when its type, dtype, device or dimensions do not fit the model.

        Examples
        --------
        >>> from mfattn.models.tasks import example
        >>> model, data, _, _ = example()
        >>> model.check_data(data) is data
        True
        >>> model.check_data("sequences")
        Traceback (most recent call last):
        ...
        ValueError: data: expected a mfattn.Dataset, got str
        """
        raise NotImplementedError

    def check_heads(self, heads, name: str = "heads") -> torch.Tensor:  # pragma: no cover
        """``heads (N, d_omega)`` of the model's dtype and device, finite.

        Parameters
        ----------
        heads : Tensor (N, d_omega)
            Particles, one per row, ``N >= 1``, finite, in the model's dtype and on its device.
        name : str, default ``"heads"``
            Argument name used in the error message.

        Returns
        -------
        Tensor (N, d_omega)
            ``heads`` itself when it is valid.

        Raises
        ------
        ValueError
            Naming ``name`` when the type, shape, dtype or device is wrong or an entry is not finite.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model = example().model
        >>> heads = torch.zeros(5, model.d_omega, dtype=torch.float64)
        >>> model.check_heads(heads) is heads
        True
        >>> model.check_heads(heads[:, :3], "query")
        Traceback (most recent call last):
        ...
        ValueError: query: dimension 1 has size 3, expected d_omega = 24
        """
        raise NotImplementedError

    def evaluate(self, X, Y, heads, weights, *, phi: bool = False, risk: bool = True):  # pragma: no cover
        r"""``(risk, G, grad Phi at the particles, Phi at the particles or None)``: see the module.

        The hot path: no validation of the arguments.

        Parameters
        ----------
        X : Tensor
            Inputs, first axis the ``n`` samples: the dataset's ``X`` or a minibatch of it
            (``(n, L, d_x)`` for :class:`~mfattn.models.model.HeadModel`).
        Y : Tensor
            Targets of the same samples (``(n, L, d_v)`` for :class:`~mfattn.models.model.HeadModel`).
        heads : Tensor (N, d_omega)
            Particles :math:`\omega_i`, model's dtype and device.
        weights : Tensor (N,)
            Weights :math:`w_i` of the measure :math:`\rho`, on the simplex.
        phi : bool, default False
            Also return :math:`\Phi(\omega_i;\rho)` (11).
        risk : bool, default True
            Compute the risk; with False it is None, so that a call for the gradient alone (the
            integrator's steps between records, :meth:`grad_phi`) does not pay for it.

        Returns
        -------
        risk : Tensor () or None
            The risk (10) of :math:`\rho` on ``X, Y``; None with ``risk=False``.
        G : Tensor
            The residual: the loss's gradient in the prediction divided by the number of terms of the
            average, the input of :meth:`grad_at` and :meth:`phi_at` (for
            :class:`~mfattn.models.model.HeadModel` ``(softmax z - Y) W_out^T / (n L)``, shape ``(n, L, d_x)``).
        grad : Tensor (N, d_omega)
            :math:`\nabla_\omega\Phi(\omega_i;\rho)` (13) at the particles.
        phi : Tensor (N,) or None
            :math:`\Phi(\omega_i;\rho)` (11) with ``phi=True``, else ``None``.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, w = example()
        >>> risk, G, grad, phi = model.evaluate(data.X, data.Y, heads, w, phi=True)
        >>> risk.shape, G.shape, grad.shape, phi.shape
        (torch.Size([]), torch.Size([4, 3, 3]), torch.Size([5, 24]), torch.Size([5]))
        >>> round(float(risk), 4)
        1.6279
        """
        raise NotImplementedError

    def grad_at(self, X, G, query) -> torch.Tensor:  # pragma: no cover
        r"""``grad Phi (M, d_omega)`` at ``query (M, d_omega)`` for the residual ``G``.

        The measure enters only through ``G`` (frozen): this moves points that are not particles of
        the measure, e.g. the tagged characteristics (21). No validation.

        Parameters
        ----------
        X : Tensor
            Inputs, first axis the samples, as for :meth:`evaluate`.
        G : Tensor
            The residual returned by :meth:`evaluate` on the same ``X``.
        query : Tensor (M, d_omega)
            Points at which to evaluate the gradient.

        Returns
        -------
        Tensor (M, d_omega)
            :math:`\nabla_\omega\Phi(q_j;\rho)` (13) at the rows ``q_j`` of ``query``.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, w = example()
        >>> _, G, grad, _ = model.evaluate(data.X, data.Y, heads, w)
        >>> torch.allclose(model.grad_at(data.X, G, heads), grad)
        True
        >>> model.grad_at(data.X, G, heads[:2]).shape
        torch.Size([2, 24])
        """
        raise NotImplementedError

    def phi_at(self, X, G, query) -> torch.Tensor:  # pragma: no cover
        r"""``Phi (M,)`` at ``query (M, d_omega)`` for the residual ``G``.

        No validation.

        Parameters
        ----------
        X : Tensor
            Inputs, first axis the samples, as for :meth:`evaluate`.
        G : Tensor
            The residual returned by :meth:`evaluate` on the same ``X``.
        query : Tensor (M, d_omega)
            Points at which to evaluate the first variation.

        Returns
        -------
        Tensor (M,)
            :math:`\Phi(q_j;\rho)` (11) at the rows ``q_j`` of ``query``.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, w = example()
        >>> _, G, _, phi = model.evaluate(data.X, data.Y, heads, w, phi=True)
        >>> torch.allclose(model.phi_at(data.X, G, heads), phi)
        True
        """
        raise NotImplementedError

    def grad_phi(self, X, Y, heads, weights) -> torch.Tensor:
        r""":math:`\nabla_\omega\Phi(\omega_i;\rho)` at the particles, (N, d_omega), on the samples
        ``X, Y``: SGD (19) moves particle ``i`` by ``-2 eps zeta`` times its row.

        No validation (the third output of :meth:`evaluate`).

        Parameters
        ----------
        X : Tensor
            Inputs, first axis the samples: the dataset's or a minibatch's.
        Y : Tensor
            Targets of the same samples.
        heads : Tensor (N, d_omega)
            Particles :math:`\omega_i`.
        weights : Tensor (N,)
            Weights of the measure, on the simplex.

        Returns
        -------
        Tensor (N, d_omega)
            :math:`\nabla_\omega\Phi(\omega_i;\rho)` (13), one row per particle.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, w = example()
        >>> grad = model.grad_phi(data.X, data.Y, heads, w)
        >>> grad.shape
        torch.Size([5, 24])
        >>> torch.allclose(grad, model.evaluate(data.X, data.Y, heads, w)[2])
        True
        """
        return self.evaluate(X, Y, heads, weights, risk=False)[2]

    # ------------------------------------------------ for the static tools: prediction as an average
    def features(self, X, heads) -> torch.Tensor:  # pragma: no cover - every model defines it
        r""":math:`\psi(\cdot;\omega_i)` (8): one particle's prediction at every sample, ``(N, S..., V)``; the
        prediction of the measure is ``tensordot(weights, features, 1)``.

        ``S`` indexes the terms of the dataset average (``(n, L)`` for heads, ``(n,)`` for a regression)
        and ``V`` is the prediction's dimension (``d_v`` for heads, 1 for a regression).

        Parameters
        ----------
        X : Tensor
            Inputs, first axis the samples.
        heads : Tensor (N, d_omega)
            Particles.

        Returns
        -------
        Tensor (N, S..., V)

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.linear import linear_regression
        >>> model, data, m_star = linear_regression(d=2, n=8, generator=torch.Generator().manual_seed(0))
        >>> heads = torch.stack([m_star, -m_star])          # mean 0: f = 0
        >>> tuple(model.features(data.X, heads).shape)
        (2, 8, 1)
        """
        raise NotImplementedError

    def loss(self, Y, z) -> torch.Tensor:  # pragma: no cover - every model defines it
        """The loss of every term for predictions ``z (S..., V)``: its mean is the risk (10).

        Parameters
        ----------
        Y : Tensor (S..., V)
            Targets.
        z : Tensor (S..., V)
            Predictions.

        Returns
        -------
        Tensor (S...)

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.linear import linear_regression
        >>> model, data, m_star = linear_regression(d=2, n=8, generator=torch.Generator().manual_seed(0))
        >>> heads = torch.stack([m_star, -m_star])          # mean 0: f = 0
        >>> z = torch.tensordot(torch.full((2,), 0.5, dtype=torch.float64), model.features(data.X, heads), 1)
        >>> bool(torch.isclose(model.loss(data.Y, z).mean(), model.risk(data, heads)))
        True
        """
        raise NotImplementedError

    def loss_hessian(self, Y, z) -> torch.Tensor:  # pragma: no cover - every model defines it
        r"""The Hessian of :meth:`loss` in ``z`` (the softmax Jacobian (4) under cross-entropy, the
        identity under the square loss).

        Parameters
        ----------
        Y : Tensor (S..., V)
            Targets.
        z : Tensor (S..., V)
            Predictions.

        Returns
        -------
        Tensor (S..., V, V)

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.linear import linear_regression
        >>> model, data, m_star = linear_regression(d=2, n=8, generator=torch.Generator().manual_seed(0))
        >>> heads = torch.stack([m_star, -m_star])          # mean 0: f = 0
        >>> tuple(model.loss_hessian(data.Y, data.Y).shape)
        (8, 1, 1)
        """
        raise NotImplementedError

    # ----------------------------------------------------------------- validated values
    def risk(self, data, heads, weights=None) -> torch.Tensor:
        r""":math:`\mathcal E(\rho)` (10) of the measure ``(heads, weights)``, validated.

        Parameters
        ----------
        data : dataset object
        heads : Tensor (N, d_omega)
        weights : Tensor (N,) or None
            On the simplex; uniform when ``None``.

        Returns
        -------
        Tensor ()

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.linear import linear_regression
        >>> model, data, m_star = linear_regression(d=2, n=8, generator=torch.Generator().manual_seed(0))
        >>> float(model.risk(data, torch.stack([m_star, m_star])))
        0.0
        """
        data = self.check_data(data)
        heads, weights = self.check_measure(heads, weights)
        return self.evaluate(data.X, data.Y, heads, weights)[0]

    def _frozen_residual(self, data, query, heads, weights):
        # ``(X, G, query)`` validated, G the residual of the measure: what phi_at and grad_at take
        data = self.check_data(data)
        heads, weights = self.check_measure(heads, weights)
        query = self.check_heads(query, "query")
        _, G, _, _ = self.evaluate(data.X, data.Y, heads, weights)
        return data.X, G, query

    def first_variation(self, data, query, heads, weights=None) -> torch.Tensor:
        r""":math:`\Phi(q_j;\rho)` (11) at the points ``query``, validated.

        Parameters
        ----------
        data : dataset object
        query : Tensor (M, d_omega)
        heads : Tensor (N, d_omega)
            The atoms of :math:`\rho`.
        weights : Tensor (N,) or None
            Uniform when ``None``.

        Returns
        -------
        Tensor (M,)

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.linear import linear_regression
        >>> model, data, m_star = linear_regression(d=2, n=8, generator=torch.Generator().manual_seed(0))
        >>> heads = torch.stack([m_star, -m_star])          # mean 0: f = 0
        >>> phi = model.first_variation(data, heads, heads)    # -mean(y <omega, x>) when f = 0
        >>> bool(phi[0] < 0), bool(torch.isclose(phi[1], -phi[0]))
        (True, True)
        """
        return self.phi_at(*self._frozen_residual(data, query, heads, weights))

    def grad_first_variation(self, data, query, heads, weights=None) -> torch.Tensor:
        r""":math:`\nabla_\omega\Phi(q_j;\rho)` (13) at the points ``query``, validated.

        Parameters
        ----------
        data : dataset object
        query : Tensor (M, d_omega)
        heads : Tensor (N, d_omega)
            The atoms of :math:`\rho`.
        weights : Tensor (N,) or None
            Uniform when ``None``.

        Returns
        -------
        Tensor (M, d_omega)

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.linear import linear_regression
        >>> model, data, m_star = linear_regression(d=2, n=8, generator=torch.Generator().manual_seed(0))
        >>> heads = torch.stack([m_star, -m_star])          # mean 0: f = 0
        >>> g = model.grad_first_variation(data, heads, heads)
        >>> bool(torch.equal(g[0], g[1]))      # the linear model's drift is the same everywhere
        True
        """
        return self.grad_at(*self._frozen_residual(data, query, heads, weights))

    def dissipation(self, data, heads, weights=None) -> torch.Tensor:
        r""":math:`\mathcal I(\rho)=\sum_i w_i|\nabla\Phi(\omega_i;\rho)|^2` (38), validated.

        Parameters
        ----------
        data : dataset object
        heads : Tensor (N, d_omega)
        weights : Tensor (N,) or None
            Uniform when ``None``.

        Returns
        -------
        Tensor ()

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.linear import linear_regression
        >>> model, data, m_star = linear_regression(d=2, n=8, generator=torch.Generator().manual_seed(0))
        >>> heads = torch.stack([m_star, -m_star])          # mean 0: f = 0
        >>> g = model.grad_first_variation(data, heads, heads)
        >>> bool(torch.isclose(model.dissipation(data, heads), (g[0] ** 2).sum()))
        True
        """
        data = self.check_data(data)
        heads, weights = self.check_measure(heads, weights)
        return self.risk_and_dissipation(data.X, data.Y, heads, weights)[1]

    def risk_and_dissipation(self, X, Y, heads, weights, *, dissipation: bool = True):
        r"""``(risk (10), dissipation (38) or None)``, both 0-dim tensors.

        No validation: the recorders of :mod:`mfattn.flows.dynamics` call it at every recording time.

        Parameters
        ----------
        X : Tensor
            Inputs, first axis the samples.
        Y : Tensor
            Targets of the same samples.
        heads : Tensor (N, d_omega)
            Particles.
        weights : Tensor (N,)
            Weights of the measure, on the simplex.
        dissipation : bool, default True
            Also compute :math:`\mathcal I(\rho)=\sum_i w_i\|\nabla\Phi(\omega_i;\rho)\|^2` (38).

        Returns
        -------
        risk : Tensor ()
            :math:`\mathcal E(\rho)` (10).
        dissipation : Tensor () or None
            :math:`\mathcal I(\rho)` (38), or ``None`` when ``dissipation`` is False.

        Examples
        --------
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, w = example()
        >>> risk, diss = model.risk_and_dissipation(data.X, data.Y, heads, w)
        >>> round(float(risk), 4), round(float(diss), 4)
        (1.6279, 0.5171)
        >>> model.risk_and_dissipation(data.X, data.Y, heads, w, dissipation=False)[1] is None
        True
        """
        risk, _, g, _ = self.evaluate(X, Y, heads, weights)
        return risk, (self.weighted_sq_norm(weights, g) if dissipation else None)

    def check_measure(self, heads, weights, name: str = "heads"):
        """``(heads, weights)``: validated particles and weights (uniform when ``weights`` is None).

        Parameters
        ----------
        heads : Tensor (N, d_omega)
            Particles, checked by :meth:`check_heads`.
        weights : Tensor (N,) or None
            Weights on the simplex in the particles' dtype and device, or ``None`` for ``1/N`` each.
        name : str, default ``"heads"``
            Argument name of ``heads`` in error messages.

        Returns
        -------
        heads : Tensor (N, d_omega)
            ``heads`` itself.
        weights : Tensor (N,)
            ``weights`` itself, or the uniform weights.

        Raises
        ------
        ValueError
            Naming the argument that is invalid.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model = example().model
        >>> heads, weights = model.check_measure(torch.zeros(4, 24, dtype=torch.float64), None)
        >>> weights.tolist()
        [0.25, 0.25, 0.25, 0.25]
        """
        heads = self.check_heads(heads, name)
        return heads, self.check_weights(weights, heads)

    def check_weights(self, weights, heads):
        """``weights (N,)`` on the simplex, or uniform weights when ``None``.

        Parameters
        ----------
        weights : Tensor (N,) or None
            Nonnegative weights summing to one, in ``heads``' dtype and device; ``None`` for ``1/N``.
        heads : Tensor (N, d_omega)
            The particles the weights belong to (gives ``N``, the dtype and the device).

        Returns
        -------
        Tensor (N,)
            ``weights`` itself, or the uniform weights.

        Raises
        ------
        ValueError
            Naming ``weights`` when its shape, dtype, device or sum is wrong.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model = example().model
        >>> heads = torch.zeros(2, model.d_omega, dtype=torch.float64)
        >>> model.check_weights(None, heads).tolist()
        [0.5, 0.5]
        >>> model.check_weights(torch.ones(2, dtype=torch.float64), heads)
        Traceback (most recent call last):
        ...
        ValueError: weights: rows must sum to one ...
        """
        return check_weights(weights, heads.shape[0], heads)

    # Particles interact only through sums over the measure: the prediction and the dissipation (38).
    # Every such sum ends in ``reduce``, the identity here; :class:`mfattn.models.distributed.ShardedHeadModel`
    # makes it an all-reduce over the processes that each hold a shard of the heads.
    def reduce(self, t: torch.Tensor) -> torch.Tensor:
        """The sum of ``t`` over the processes that hold shards of the particles: ``t`` itself here.

        Parameters
        ----------
        t : Tensor
            A partial sum over this process's particles (any shape).

        Returns
        -------
        Tensor
            The sum over all shards, of ``t``'s shape: ``t`` itself in a single process.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.particles import ParticleModel
        >>> t = torch.ones(3)
        >>> ParticleModel().reduce(t) is t
        True
        """
        return t

    def weighted_sq_norm(self, weights: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """``sum_i w_i |g_i|^2``: the dissipation (38) when ``g_i = grad Phi(omega_i; rho)``.

        Parameters
        ----------
        weights : Tensor (N,)
            Weights ``w_i`` of the particles.
        g : Tensor (N, d_omega)
            One vector per particle.

        Returns
        -------
        Tensor ()
            The weighted sum of squared norms, summed over the shards by :meth:`reduce`.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.particles import ParticleModel
        >>> w = torch.tensor([0.5, 0.5])
        >>> g = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
        >>> float(ParticleModel().weighted_sq_norm(w, g))
        2.5
        """
        return self.reduce((weights * (g * g).sum(-1)).sum())
