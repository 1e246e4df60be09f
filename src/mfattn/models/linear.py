r"""The mean-field linear predictor: the package's worked example of a new particle model.

A particle is a vector :math:`\omega\in\mathbb R^d`; a measure :math:`\rho` predicts with its mean,

.. math:: f(x;\rho)=\int\langle\omega,x\rangle\,\rho(d\omega)=\langle m_\rho,x\rangle,

and the risk over ``n`` pairs and its first variation are

.. math::

    \mathcal E(\rho)=\frac1{2n}\sum_k\big(f(x_k;\rho)-y_k\big)^2,\qquad
    \Phi(\omega;\rho)=\frac1n\sum_k\big(f(x_k;\rho)-y_k\big)\langle\omega,x_k\rangle .

So :math:`\nabla_\omega\Phi=\hat\Sigma m_\rho-\hat b` (with :math:`\hat\Sigma=X^\top X/n`,
:math:`\hat b=X^\top y/n`) is the same for every particle: the characteristics (21),
:math:`\dot W=-2\zeta(t)\nabla\Phi`, translate the whole cloud with its mean, which solves the linear
equation :math:`\dot m=-2\zeta(t)(\hat\Sigma m-\hat b)`. :meth:`LinearModel.exact_flow` gives that
solution in closed form, an oracle for every stepper of :mod:`mfattn.flows.integrate` (explicit Euler and
the Runge-Kutta scheme are powers of a matrix polynomial on it).

It is written against :class:`~mfattn.models.particles.ParticleModel` alone (about 150 lines of code): the
conformance suite ``tests/test_conformance.py`` runs it beside the attention heads, the sharded heads
and the two-layer network. It is the template for a model of one's own; the attention-specific tools
(Dirac stability, smoothness constants, the static minimisers of :mod:`mfattn.analysis.static`) refuse it with
a ``ValueError`` that says so.
"""

from __future__ import annotations

import torch

from .._checks import check_dim, check_generator, check_positive, check_tensor
from .particles import ParticleModel
from .twolayer import RegressionData, TwoLayerModel

__all__ = ["LinearModel", "linear_regression"]


class LinearModel(ParticleModel):
    r"""Particles :math:`\omega\in\mathbb R^d` predicting :math:`f(x;\rho)=\langle m_\rho,x\rangle` under
    the square loss (module docstring); ``d_omega = d``.

    Parameters
    ----------
    d : int
        Input dimension, positive.
    dtype : torch.dtype, default float64
        float32 or float64.
    device : str or torch.device, default ``"cpu"``

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.linear import linear_regression
    >>> model, data, m_star = linear_regression(d=3, n=20, generator=torch.Generator().manual_seed(0))
    >>> model
    LinearModel(d=3, dtype=torch.float64)
    >>> heads = m_star.expand(4, 3).clone()          # every particle at the solution
    >>> float(model.risk(data, heads)) < 1e-28       # noiseless targets
    True
    """

    def __init__(self, d: int, *, dtype=torch.float64, device="cpu"):
        check_positive(d, "d", integer=True)
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype: expected torch.float32 or torch.float64, got {dtype}")
        self.d = self.d_omega = d
        self._dtype, self._device = dtype, torch.device(device)

    # the two-layer network's properties, not copies
    dtype = TwoLayerModel.dtype
    device = TwoLayerModel.device

    def __repr__(self) -> str:
        return f"LinearModel(d={self.d}, dtype={self.dtype})"

    # ------------------------------------------------------------------ protocol
    def check_heads(self, heads, name: str = "heads") -> torch.Tensor:
        """Validated particles.

        Parameters
        ----------
        heads : Tensor (N, d)
            Particles in the model's dtype and device.
        name : str, default ``"heads"``
            The argument's name in error messages.

        Returns
        -------
        Tensor (N, d)
            ``heads`` itself.

        Raises
        ------
        ValueError
            Naming ``name`` when the shape, dtype, device or values are wrong.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.linear import linear_regression
        >>> model, data, m_star = linear_regression(d=2, n=6, generator=torch.Generator().manual_seed(0))
        >>> heads, w = torch.zeros(3, 2, dtype=torch.float64), torch.full((3,), 1 / 3, dtype=torch.float64)
        >>> model.check_heads(heads[:, :1], "omega0")
        Traceback (most recent call last):
        ...
        ValueError: omega0: dimension 1 has size 1, expected d = 2
        """
        return self._check_rows(heads, name, "d", "particle")

    # the same data and the same square loss as the two-layer network: its methods, not copies
    check_data = TwoLayerModel.check_data
    loss = TwoLayerModel.loss
    loss_hessian = TwoLayerModel.loss_hessian

    def evaluate(self, X, Y, heads, weights, *, phi: bool = False, risk: bool = True):
        r"""Risk, residual, :math:`\nabla\Phi` and, with ``phi``, :math:`\Phi` at the atoms; no validation.

        Parameters
        ----------
        X : Tensor (n, d)
        Y : Tensor (n, 1)
        heads : Tensor (N, d)
        weights : Tensor (N,)
        phi : bool, default False
        risk : bool, default True
            Whether to compute the risk (else None).

        Returns
        -------
        risk : Tensor () or None
        G : Tensor (n,)
            The residual ``(f(x_k; rho) - y_k) / n``.
        grad : Tensor (N, d)
            :math:`X^\top G` in every row.
        phi : Tensor (N,) or None

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.linear import linear_regression
        >>> model, data, m_star = linear_regression(d=2, n=6, generator=torch.Generator().manual_seed(0))
        >>> heads, w = torch.zeros(3, 2, dtype=torch.float64), torch.full((3,), 1 / 3, dtype=torch.float64)
        >>> risk, G, grad, phi = model.evaluate(data.X, data.Y, heads, w, phi=True)
        >>> bool(torch.isclose(risk, 0.5 * (data.Y ** 2).mean())), phi.tolist()
        (True, [0.0, 0.0, 0.0])
        """
        m = self.reduce(weights @ heads)
        G = (X @ m - Y[:, 0]) / X.shape[0]
        r = 0.5 * X.shape[0] * (G * G).sum() if risk else None
        v = X.T @ G  # grad Phi, the same at every particle
        return r, G, v.expand(heads.shape[0], -1).clone(), (heads @ v if phi else None)

    def grad_at(self, X, G, query) -> torch.Tensor:
        r""":math:`\nabla_\omega\Phi(q;\rho)=X^\top G` at every query for a frozen residual; no validation.

        Parameters
        ----------
        X : Tensor (n, d)
        G : Tensor (n,)
            The residual of :meth:`evaluate`.
        query : Tensor (M, d)

        Returns
        -------
        Tensor (M, d)

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.linear import linear_regression
        >>> model, data, m_star = linear_regression(d=2, n=6, generator=torch.Generator().manual_seed(0))
        >>> heads, w = torch.zeros(3, 2, dtype=torch.float64), torch.full((3,), 1 / 3, dtype=torch.float64)
        >>> _, G, grad, _ = model.evaluate(data.X, data.Y, heads, w)
        >>> bool(torch.equal(model.grad_at(data.X, G, heads), grad))
        True
        """
        return (X.T @ G).expand(query.shape[0], -1).clone()

    def phi_at(self, X, G, query) -> torch.Tensor:
        r""":math:`\Phi(q;\rho)=\langle q, X^\top G\rangle` at every query; no validation.

        Parameters
        ----------
        X : Tensor (n, d)
        G : Tensor (n,)
            The residual of :meth:`evaluate`.
        query : Tensor (M, d)

        Returns
        -------
        Tensor (M,)

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.linear import linear_regression
        >>> model, data, m_star = linear_regression(d=2, n=6, generator=torch.Generator().manual_seed(0))
        >>> heads, w = torch.zeros(3, 2, dtype=torch.float64), torch.full((3,), 1 / 3, dtype=torch.float64)
        >>> _, G, _, _ = model.evaluate(data.X, data.Y, heads, w)
        >>> bool(model.phi_at(data.X, G, m_star[None]) < 0)     # moving towards m* lowers the risk
        True
        """
        return query @ (X.T @ G)

    def features(self, X, heads) -> torch.Tensor:
        r"""One particle's prediction :math:`\langle\omega_i,x_k\rangle` at every input.

        Parameters
        ----------
        X : Tensor (n, d)
        heads : Tensor (N, d)

        Returns
        -------
        Tensor (N, n, 1)

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.linear import linear_regression
        >>> model, data, m_star = linear_regression(d=2, n=6, generator=torch.Generator().manual_seed(0))
        >>> heads, w = torch.zeros(3, 2, dtype=torch.float64), torch.full((3,), 1 / 3, dtype=torch.float64)
        >>> torch.equal(model.features(data.X, m_star[None])[0], data.Y)   # noiseless targets
        True
        """
        check_tensor(X, "X", ndim=2, dtype=self.dtype, device=self.device)
        check_dim(X, "X", 1, self.d, "d")
        return (self.check_heads(heads) @ X.T)[..., None]

    def exact_flow(self, data: RegressionData, heads0, times, zeta=1.0) -> torch.Tensor:
        r"""The characteristics (21) in closed form: the particles at each of ``times``, ``(R, N, d)``.

        With :math:`\hat\Sigma=V\Lambda V^\top` and :math:`Z(t)=\int_0^t\zeta`, the mean's coordinates
        :math:`c=V^\top m` solve :math:`\dot c_i=-2\zeta(\lambda_i c_i-\beta_i)`:
        :math:`c_i(t)=c_i(0)e^{-2\lambda_iZ}` :math:`{}+\beta_i(1-e^{-2\lambda_iZ})/\lambda_i` (``2 beta_i Z`` when
        :math:`\lambda_i=0`), and every particle moves by :math:`m(t)-m(0)` (uniform weights).

        Parameters
        ----------
        data : RegressionData
        heads0 : Tensor (N, d)
            The particles at ``t = 0``.
        times : sequence of float
            Times ``>= 0``.
        zeta : float or profile, default 1.0
            The learning-rate profile: a constant, or anything with ``integral(t)``
            (:class:`~mfattn.flows.integrate.Constant`, :class:`~mfattn.flows.integrate.Decaying`,
            :func:`~mfattn.flows.integrate.as_profile` of a function).

        Returns
        -------
        Tensor (R, N, d)

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.linear import linear_regression
        >>> model, data, m_star = linear_regression(d=3, n=20, generator=torch.Generator().manual_seed(0))
        >>> W = model.exact_flow(data, torch.zeros(2, 3, dtype=torch.float64), [0.0, 50.0])
        >>> bool(torch.allclose(W[-1], m_star.expand(2, 3), atol=1e-10))   # the flow reaches m*
        True
        """
        if isinstance(zeta, (int, float)) and not isinstance(zeta, bool):
            c = float(zeta)
            clock = lambda t: c * t  # noqa: E731
        elif callable(getattr(zeta, "integral", None)):
            clock = zeta.integral
        else:
            raise ValueError("zeta: expected a number or a profile with integral(t) "
                             "(mfattn.flows.integrate.as_profile turns a function into one)")
        data = self.check_data(data)
        heads0, weights = self.check_measure(heads0, None, "heads0")
        X, y = data.X.double(), data.Y[:, 0].double()
        n = X.shape[0]
        lam, V = torch.linalg.eigh(X.T @ X / n)
        lam = lam.clamp_min(0)
        beta = V.T @ (X.T @ y / n)
        m0 = weights.double() @ heads0.double()
        c0 = V.T @ m0
        out = []
        for t in times:
            Z = float(clock(float(t)))
            decay = torch.exp(-2 * lam * Z)
            gain = torch.where(lam > 0, -torch.expm1(-2 * lam * Z) / torch.where(lam > 0, lam, 1.0), 2 * Z)
            m = V @ (c0 * decay + beta * gain)
            out.append(heads0.double() + (m - m0))
        return torch.stack(out).to(self.dtype)


def linear_regression(d: int, n: int, *, generator: torch.Generator, noise: float = 0.0,
                      dtype=torch.float64, device="cpu"):
    r"""A :class:`LinearModel` with ``n`` Gaussian inputs and targets ``y = <m*, x> + noise * xi``.

    Parameters
    ----------
    d : int
        Input dimension.
    n : int
        Number of samples.
    generator : torch.Generator
        Draws ``X``, ``m*`` and the noise.
    noise : float, default 0.0
        Standard deviation of the target noise, ``>= 0``.
    dtype : torch.dtype, default float64
    device : str or torch.device, default ``"cpu"``

    Returns
    -------
    model : LinearModel
    data : RegressionData
        ``X (n, d)``, ``Y (n, 1)``.
    m_star : Tensor (d,)
        The teacher's vector.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.linear import linear_regression
    >>> model, data, m_star = linear_regression(d=3, n=5, generator=torch.Generator().manual_seed(0))
    >>> tuple(data.X.shape), tuple(data.Y.shape), tuple(m_star.shape)
    ((5, 3), (5, 1), (3,))
    """
    check_positive(d, "d", integer=True)
    check_positive(n, "n", integer=True)
    check_generator(generator)
    if not (isinstance(noise, (int, float)) and noise >= 0):
        raise ValueError(f"noise: expected a number >= 0, got {noise!r}")
    model = LinearModel(d, dtype=dtype, device=device)
    X = torch.randn(n, d, generator=generator, dtype=torch.float64)
    m_star = torch.randn(d, generator=generator, dtype=torch.float64) / d ** 0.5
    Y = (X @ m_star + noise * torch.randn(n, generator=generator, dtype=torch.float64))[:, None]
    to = dict(dtype=dtype, device=device)
    return model, RegressionData(X.to(**to), Y.to(**to)), m_star.to(**to)
