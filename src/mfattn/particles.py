"""The particle-model protocol shared by the attention heads and the two-layer baseline.

A mean-field model is a map from a weighted empirical measure of particles ``(N, d_omega)`` to a
prediction that is an average over the particles, a loss on that prediction, and the first
variation ``Phi(omega; rho)`` of the risk. :class:`~mfattn.model.HeadModel` (heads under
cross-entropy, paper section 2) and :class:`~mfattn.twolayer.TwoLayerModel` (neurons under the
square loss, chapter 07) both derive from :class:`ParticleModel`, so the dynamics of
:mod:`mfattn.dynamics` (SGD (19), the characteristics (21)) and the i.i.d. construction of
:mod:`mfattn.static` run on either without a second copy.

What the dynamics and the static tools call (no validation inside, the hot paths):

* ``_fused(X, Y, heads, weights, phi=False) -> (risk, G, grad Phi at the atoms, Phi or None)``, with
  ``G`` the residual the drift needs, already scaled by the dataset average;
* ``_grad(X, G, query)``: ``grad Phi`` at other points for a frozen residual ``G`` (the tagged
  characteristics of :class:`~mfattn.dynamics.ReferenceFlow`);
* ``_grad_phi``, ``_risk_and_dissipation``: the SGD step and the recorders;
* ``features(X, heads) (N, *S, V)`` and ``_loss(Y, z) -> (*S)``: one particle's prediction and the
  loss per sample (and position), for :func:`mfattn.static.iid_construction`;
* ``_loss_hessian(Y, z) -> (*S, V, V)``: the loss's Hessian in the prediction, for
  :func:`mfattn.static.iid_gap_coefficient`.
"""

from __future__ import annotations

import torch

from ._checks import check_weights

__all__ = ["ParticleModel"]


class ParticleModel:
    """Base class of the engine's mean-field models: the measure's checks and its sums over particles."""

    d_omega: int

    @property
    def dtype(self) -> torch.dtype:  # pragma: no cover - every model defines it
        raise NotImplementedError

    @property
    def device(self) -> torch.device:  # pragma: no cover - every model defines it
        raise NotImplementedError

    def _check_heads(self, heads, name: str = "heads") -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    def _check_measure(self, heads, weights, name: str = "heads"):
        heads = self._check_heads(heads, name)
        return heads, self._check_weights(weights, heads)

    def _check_weights(self, weights, heads):
        return check_weights(weights, heads.shape[0], heads)

    # Particles interact only through sums over the measure: the prediction and the dissipation (38).
    # Every such sum ends in ``_reduce``, the identity here; :class:`mfattn.distributed.ShardedHeadModel`
    # makes it an all-reduce over the processes that each hold a shard of the heads.
    def _reduce(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def _weighted_sq_norm(self, weights: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """``sum_i w_i |g_i|^2``: the dissipation (38) when ``g_i = grad Phi(omega_i; rho)``."""
        return self._reduce((weights * (g * g).sum(-1)).sum())
