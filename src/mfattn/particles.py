r"""The particle-model protocol: what a mean-field model provides so that the engine's dynamics,
static and stability tools run on it.

A mean-field model maps a weighted empirical measure :math:`\rho=\sum_i w_i\delta_{\omega_i}` of
particles ``heads (N, d_omega)`` with weights ``weights (N,)`` on the simplex to a prediction that is
an average of per-particle features, :math:`z^\rho=\sum_i w_i\psi(\cdot;\omega_i)` (8), a risk
:math:`\mathcal E(\rho)` (10) of that prediction, and the first variation :math:`\Phi(\omega;\rho)` (11)
whose gradient drives every particle (13), (19)-(21). :class:`~mfattn.model.HeadModel` (attention heads
under cross-entropy, paper section 2) and :class:`~mfattn.twolayer.TwoLayerModel` (neurons under the
square loss, chapter 07) implement it; ``tests/test_particles.py`` builds a third, a linear model
whose flow has a closed form, on the protocol alone.

A model subclasses :class:`ParticleModel` and provides, besides ``d_omega``, ``dtype`` and ``device``:

validation (public entry points call these first; each raises ``ValueError`` naming the argument)
    ``check_data(data)``: the dataset object, with ``data.X`` (inputs, first axis the ``n`` samples),
    ``data.Y`` (targets, first axis ``n``) and ``data.n``; ``check_heads(heads, name)``: a floating
    ``(N, d_omega)`` tensor of the model's dtype and device.

the hot path (no validation; ``X, Y`` are the dataset's tensors or a minibatch of them)
    ``evaluate(X, Y, heads, weights, *, phi=False) -> (risk, G, grad, phi)``: the risk (10) (a 0-dim
    tensor), the *residual* ``G`` (the loss's gradient in the prediction, divided by the number of
    terms of the dataset average: everything :math:`\nabla\Phi(\cdot;\rho)` needs of :math:`\rho`),
    ``grad (N, d_omega)`` :math:`=\nabla_\omega\Phi(\omega_i;\rho)` at the particles (13), and with ``phi``
    the values ``Phi (N,)`` there (11), else ``None``.

    ``grad_at(X, G, query) -> (M, d_omega)``: :math:`\nabla_\omega\Phi` at other points ``query (M,
    d_omega)`` for a frozen residual ``G`` (the tagged characteristics (21), the local solves of
    chapter 03). ``phi_at(X, G, query) -> (M,)``: :math:`\Phi` there.

for the static tools (:mod:`mfattn.static`)
    ``features(X, heads) -> (N, *S, V)``: one particle's prediction :math:`\psi` at every sample (and
    position); ``loss(Y, z) -> (*S)``: the loss per sample for predictions ``z (*S, V)``;
    ``loss_hessian(Y, z) -> (*S, V, V)``: its Hessian in ``z``.

:class:`ParticleModel` supplies the rest from these: ``check_measure``, ``grad_phi`` (the drift of
SGD (19)), ``risk_and_dissipation`` (the recorders; (10) and (38)) and ``weighted_sq_norm``.
Particles interact only through sums over the measure, and every such sum ends in :meth:`ParticleModel.reduce`
(the identity; an all-reduce in :class:`mfattn.distributed.ShardedHeadModel`).
"""

from __future__ import annotations

import torch

from ._checks import check_weights

__all__ = ["ParticleModel", "blocks"]


def blocks(n: int, size: int):
    """Slices ``[0, size), [size, 2 size), ...`` covering ``range(n)``: the chunks over which the models
    stream samples and particles within a memory budget."""
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


class ParticleModel:
    """Base class of the engine's mean-field models: the measure's checks and its sums over particles."""

    d_omega: int

    @property
    def dtype(self) -> torch.dtype:  # pragma: no cover - every model defines it
        raise NotImplementedError

    @property
    def device(self) -> torch.device:  # pragma: no cover - every model defines it
        raise NotImplementedError

    def check_data(self, data):  # pragma: no cover - every model defines it
        """The dataset (``data.X``, ``data.Y``, ``data.n``), validated against the model."""
        raise NotImplementedError

    def check_heads(self, heads, name: str = "heads") -> torch.Tensor:  # pragma: no cover
        """``heads (N, d_omega)`` of the model's dtype and device, finite."""
        raise NotImplementedError

    def evaluate(self, X, Y, heads, weights, *, phi: bool = False):  # pragma: no cover
        """``(risk, G, grad Phi at the particles, Phi at the particles or None)``: see the module."""
        raise NotImplementedError

    def grad_at(self, X, G, query) -> torch.Tensor:  # pragma: no cover
        """``grad Phi (M, d_omega)`` at ``query (M, d_omega)`` for the residual ``G``."""
        raise NotImplementedError

    def phi_at(self, X, G, query) -> torch.Tensor:  # pragma: no cover
        """``Phi (M,)`` at ``query (M, d_omega)`` for the residual ``G``."""
        raise NotImplementedError

    def grad_phi(self, X, Y, heads, weights) -> torch.Tensor:
        """:math:`\\nabla_\\omega\\Phi(\\omega_i;\\rho)` at the particles, (N, d_omega), on the samples
        ``X, Y``: SGD (19) moves particle ``i`` by ``-2 eps zeta`` times its row."""
        return self.evaluate(X, Y, heads, weights)[2]

    def risk_and_dissipation(self, X, Y, heads, weights, *, dissipation: bool = True):
        """``(risk (10), dissipation (38) or None)``, both 0-dim tensors."""
        risk, _, g, _ = self.evaluate(X, Y, heads, weights)
        return risk, (self.weighted_sq_norm(weights, g) if dissipation else None)

    def check_measure(self, heads, weights, name: str = "heads"):
        """``(heads, weights)``: validated particles and weights (uniform when ``weights`` is None)."""
        heads = self.check_heads(heads, name)
        return heads, self.check_weights(weights, heads)

    def check_weights(self, weights, heads):
        """``weights (N,)`` on the simplex, or uniform weights when ``None``."""
        return check_weights(weights, heads.shape[0], heads)

    # Particles interact only through sums over the measure: the prediction and the dissipation (38).
    # Every such sum ends in ``reduce``, the identity here; :class:`mfattn.distributed.ShardedHeadModel`
    # makes it an all-reduce over the processes that each hold a shard of the heads.
    def reduce(self, t: torch.Tensor) -> torch.Tensor:
        """The sum of ``t`` over the processes that hold shards of the particles: ``t`` itself here."""
        return t

    def weighted_sq_norm(self, weights: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """``sum_i w_i |g_i|^2``: the dissipation (38) when ``g_i = grad Phi(omega_i; rho)``."""
        return self.reduce((weights * (g * g).sum(-1)).sum())
