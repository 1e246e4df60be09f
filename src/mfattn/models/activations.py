"""Activation functions with their derivative and primitive (chapters 06 and 07).

The two-layer network of :mod:`mfattn.models.twolayer` needs ``sigma`` and ``sigma'``; the perceptron
potential of :mod:`mfattn.models.tokens` (arXiv 2606.10469's companion on perceptrons, eq. (2.6)) needs a
primitive ``Sigma`` with ``Sigma' = sigma`` and ``Sigma(0) = 0``. Each activation lives here once.

* ``relu``: ``max(u, 0)``, ``1{u > 0}``, ``max(u, 0)^2 / 2``;
* ``gelu`` (exact, with the normal CDF ``P`` and density ``p``): ``u P(u)``, ``P(u) + u p(u)``,
  ``(u^2 P(u) + u p(u) - P(u)) / 2 + 1/4``;
* ``tanh``: ``tanh u``, ``1 - tanh^2 u``, ``log cosh u``.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch

__all__ = ["Activation", "ACTIVATIONS", "get_activation"]


class Activation(NamedTuple):
    r"""An activation :math:`\sigma`, its derivative :math:`\sigma'` and its primitive :math:`\Sigma`.

    The three maps act elementwise on tensors of any shape and keep their dtype. The primitive
    satisfies :math:`\Sigma' = \sigma` and :math:`\Sigma(0) = 0`. The built-in ones are in
    ``ACTIVATIONS`` and are looked up by :func:`get_activation`.

    Parameters
    ----------
    name : str
        The key of the activation in ``ACTIVATIONS``.
    f : callable, Tensor -> Tensor of the same shape
        The activation :math:`\sigma`.
    df : callable, Tensor -> Tensor of the same shape
        Its derivative :math:`\sigma'`.
    primitive : callable, Tensor -> Tensor of the same shape
        Its primitive :math:`\Sigma`, zero at zero.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.activations import Activation
    >>> square = Activation("square", lambda u: u * u, lambda u: 2 * u, lambda u: u**3 / 3)
    >>> u = torch.tensor([-3.0, 0.0, 3.0], dtype=torch.float64)
    >>> square.name, square.f(u).tolist(), square.df(u).tolist(), square.primitive(u).tolist()
    ('square', [9.0, 0.0, 9.0], [-6.0, 0.0, 6.0], [-9.0, 0.0, 9.0])
    >>> import pickle
    >>> from mfattn.models.activations import get_activation
    >>> pickle.loads(pickle.dumps(get_activation("gelu"))) is get_activation("gelu")
    True
    """

    name: str
    f: Callable[[torch.Tensor], torch.Tensor]
    df: Callable[[torch.Tensor], torch.Tensor]
    primitive: Callable[[torch.Tensor], torch.Tensor]

    def __reduce__(self):
        # a built-in activation pickles by name (its maps are lambdas), so that a model holding one,
        # and a reference flow holding the model, can be cached (chapter 07); others pickle as tuples
        if ACTIVATIONS.get(self.name) is self:
            return get_activation, (self.name,)
        return Activation, tuple(self)


_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _cdf(u):
    return 0.5 * (1.0 + torch.erf(u * _INV_SQRT2))


def _pdf(u):
    return _INV_SQRT2PI * torch.exp(-0.5 * u * u)


def _log_cosh(u):
    a = u.abs()  # log cosh u = |u| + log1p(exp(-2|u|)) - log 2, stable for large |u|
    return a + torch.log1p(torch.exp(-2.0 * a)) - math.log(2.0)


ACTIVATIONS = {
    "relu": Activation("relu", torch.relu, lambda u: (u > 0).to(u.dtype), lambda u: 0.5 * torch.relu(u) ** 2),
    "gelu": Activation("gelu", lambda u: u * _cdf(u), lambda u: _cdf(u) + u * _pdf(u),
                       lambda u: 0.5 * (u * u * _cdf(u) + u * _pdf(u) - _cdf(u)) + 0.25),
    "tanh": Activation("tanh", torch.tanh, lambda u: 1.0 - torch.tanh(u) ** 2, _log_cosh),
}


def get_activation(name: str) -> Activation:
    """The activation called ``name`` (one of ``relu``, ``gelu``, ``tanh``).

    Parameters
    ----------
    name : str
        ``"relu"``, ``"gelu"`` or ``"tanh"``.

    Returns
    -------
    Activation
        The activation, its derivative and its primitive (the entry of ``ACTIVATIONS``).

    Raises
    ------
    ValueError
        If ``name`` is not one of the three.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.activations import get_activation
    >>> gelu = get_activation("gelu")
    >>> u = torch.linspace(-2.0, 2.0, 5, dtype=torch.float64, requires_grad=True)
    >>> (dSigma,) = torch.autograd.grad(gelu.primitive(u).sum(), u)  # the primitive's derivative
    >>> bool(torch.allclose(dSigma, gelu.f(u)))
    True
    >>> float(gelu.primitive(torch.zeros(1, dtype=torch.float64)))
    0.0
    >>> get_activation("sigmoid")
    Traceback (most recent call last):
        ...
    ValueError: activation: expected one of ['gelu', 'relu', 'tanh'], got 'sigmoid'
    """
    if name not in ACTIVATIONS:
        raise ValueError(f"activation: expected one of {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]
