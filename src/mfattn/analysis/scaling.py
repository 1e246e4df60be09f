r"""The coordinate check: how the sizes a practitioner watches scale with the number of heads (chapter 09).

Two parametrisations of the same ``N`` heads, trained by gradient descent on the whole dataset:

* **mean-field** (the paper, (8) and (19)): logits :math:`z = \frac1N\sum_i\psi(\omega_i)`, and each
  head moves by :math:`-h\nabla\Phi(\omega_i;\rho^N)`, i.e. by ``N h`` times the risk's own gradient;
* **standard** (PyTorch's default): logits :math:`z = \frac1{\sqrt N}\sum_i\psi(\omega_i)` and a fixed
  learning rate ``h`` on the risk's own gradient, :math:`\partial_{\omega_i}\mathcal E = \frac1{\sqrt N}
  \nabla_\omega\psi(\omega_i)^\top(\ldots)`.

The standard one is the mean-field model with ``W_out`` multiplied by :math:`\sqrt N` (then
:math:`\frac1N\sum\psi_{\sqrt N W_{out}} = \frac1{\sqrt N}\sum\psi`), whose risk gradient is
:math:`\frac1N\nabla\Phi`: the engine's gradient descent (19) with :math:`\zeta=\frac12` and the step
``h / N``. Both coincide at ``N = 1``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .._checks import check_positive
from ..flows.integrate import integrate
from ..models.model import HeadModel, require_heads

__all__ = ["PARAMETRISATIONS", "parametrised", "coordinate_check", "tail_share"]

#: The two parametrisations of :func:`coordinate_check`.
PARAMETRISATIONS = ("mean-field", "standard")


def parametrised(model: HeadModel, N: int, parametrisation: str, step: float) -> tuple[HeadModel, float]:
    r"""The model and the step of (19) (with :math:`\zeta = \frac12`) that train ``N`` heads in a parametrisation.

    ``"mean-field"``: ``model`` and ``step`` unchanged. ``"standard"``: ``W_out`` times :math:`\sqrt N`
    and the step ``step / N`` (a learning rate ``step`` on the risk's own gradient).

    Parameters
    ----------
    model : HeadModel
    N : int
        Number of heads.
    parametrisation : str
        ``"mean-field"`` or ``"standard"``.
    step : float
        The base step ``h`` (> 0).

    Returns
    -------
    (HeadModel, float)

    Examples
    --------
    >>> from mfattn.analysis.scaling import parametrised
    >>> from mfattn.models.tasks import example
    >>> model = example().model
    >>> sp, h = parametrised(model, 16, "standard", 0.5)
    >>> float(sp.W_out[0, 0] / model.W_out[0, 0]), h
    (4.0, 0.03125)
    """
    require_heads(model, "parametrised")
    check_positive(N, "N", integer=True)
    check_positive(step, "step")
    if parametrisation == "mean-field":
        return model, float(step)
    if parametrisation == "standard":
        return HeadModel(model.W_out * math.sqrt(N), model.d_k), float(step) / N
    raise ValueError(f"parametrisation: expected one of {PARAMETRISATIONS}, got {parametrisation!r}")


def coordinate_check(model: HeadModel, data, heads0: torch.Tensor, *, step: float, steps: int,
                     parametrisation: str = "mean-field") -> dict:
    r"""The sizes of a coordinate check along ``steps`` steps of gradient descent (chapter 09).

    Trains ``heads0`` in the chosen parametrisation (:func:`parametrised`) and records, at every step
    ``k = 0..steps``:

    * ``"logits"``: the RMS over sequences, positions and tokens of the logits :math:`z_k`;
    * ``"logit_change"``: the RMS of :math:`z_k - z_0`;
    * ``"displacement"``: the RMS over heads of :math:`\|\omega_i^k - \omega_i^0\|`;
    * ``"gradient"`` (``k < steps``): the RMS over heads of the norm of the gradient that moves head
      ``i`` at step ``k``, divided by the base step: :math:`\nabla\Phi(\omega_i;\rho^N)` for the
      mean-field model, the risk's own gradient for the standard one.

    Parameters
    ----------
    model : HeadModel
        The mean-field model.
    data : Dataset
    heads0 : Tensor (N, d_omega)
    step : float
        The base step ``h``.
    steps : int
    parametrisation : str, default ``"mean-field"``

    Returns
    -------
    dict of str to numpy.ndarray

    Examples
    --------
    >>> from mfattn.analysis.scaling import coordinate_check
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, _ = example()
    >>> c = coordinate_check(model, data, heads, step=0.1, steps=2)
    >>> c["logits"].shape, c["gradient"].shape, float(c["displacement"][0])
    ((3,), (2,), 0.0)
    """
    require_heads(model, "coordinate_check")
    heads0 = model.check_heads(heads0, "heads0")
    check_positive(steps, "steps", integer=True)
    N = heads0.shape[0]
    m, h = parametrised(model, N, parametrisation, step)
    run = integrate(m, data, heads0, stepper="gd", step=h, T=steps * h, record_every=h, zeta=0.5,
                    batch_size=None, progress=False)
    path = run.heads  # (steps + 1, N, d_omega)
    rms = lambda t: float(t.pow(2).mean().sqrt())  # noqa: E731
    z = [m.logits(data.X, w) for w in path]
    move = (path[1:] - path[:-1]).norm(dim=-1)  # h * |velocity| of each head at each step
    return {
        "logits": np.array([rms(zk) for zk in z]),
        "logit_change": np.array([rms(zk - z[0]) for zk in z]),
        "displacement": (path - heads0).norm(dim=-1).pow(2).mean(-1).sqrt().cpu().numpy(),
        "gradient": (move.pow(2).mean(-1).sqrt() / float(step)).cpu().numpy(),
    }


def tail_share(model: HeadModel, X: torch.Tensor, heads: torch.Tensor, fraction: float = 0.01) -> float:
    r"""The share of the heads' feature energy carried by the largest ``fraction`` of them (chapter 09).

    Each head's energy is the mean over ``X``'s positions and tokens of :math:`\psi(X;\omega_i)^2` (7);
    the result is the sum over the ``ceil(fraction * N)`` most energetic heads over the sum over all.
    It is ``fraction`` for identical heads and 1 when one head carries everything: a measure
    supported in a compact set (Assumption 3.2) keeps it near its initial value, a heavy tail of far
    heads drives it up.

    Parameters
    ----------
    model : HeadModel
    X : Tensor (B, L, d_x)
    heads : Tensor (N, d_omega)
    fraction : float, default 0.01
        In ``(0, 1]``.

    Returns
    -------
    float

    Examples
    --------
    >>> import torch
    >>> from mfattn.analysis.scaling import tail_share
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, _ = example()
    >>> round(tail_share(model, data.X, heads[:1].repeat(10, 1), fraction=0.2), 12)  # identical heads
    0.2
    """
    require_heads(model, "tail_share")
    X = model.check_X(X)
    heads = model.check_heads(heads)
    if not (isinstance(fraction, (int, float)) and 0 < fraction <= 1):
        raise ValueError(f"fraction: expected a number in (0, 1], got {fraction!r}")
    energy = model.feature_energy(X, heads)
    k = math.ceil(fraction * heads.shape[0])
    return float(energy.topk(k).values.sum() / energy.sum())
