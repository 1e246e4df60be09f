"""The particle-model protocol (mfattn.models.particles) is enough to run the dynamics: a third model, a
linear predictor under the square loss written here on the protocol alone, runs through
`reference_flow` and full-batch `sgd`, and both follow its closed-form flow.

Model: f(x; rho) = <w_bar, x> with w_bar = sum_i w_i omega_i, risk R = |X w_bar - y|^2 / (2n).
Phi(omega; rho) = (1/n) sum_k (f(x_k) - y_k) <omega, x_k>, so grad Phi = S w_bar - b with
S = X^T X / n, b = X^T y / n, the same for every particle. The PDE (20) moves every particle by the
same amount: w_bar(t) = w* + exp(-2 S t) (w_bar(0) - w*), w* = S^{-1} b, and omega_i(t) = omega_i(0) +
w_bar(t) - w_bar(0). Full-batch SGD (19) with step eps is the Euler scheme: w_bar_k = w* +
(I - 2 eps S)^k (w_bar(0) - w*).
"""

from dataclasses import dataclass

import pytest
import torch

from mfattn.flows.dynamics import reference_flow, sgd
from mfattn.models.particles import ParticleModel


@dataclass
class LinearData:
    X: torch.Tensor  # (n, d)
    Y: torch.Tensor  # (n,)

    @property
    def n(self):
        return self.X.shape[0]


class LinearModel(ParticleModel):
    def __init__(self, d):
        self.d_omega = d

    dtype = property(lambda self: torch.float64)
    device = property(lambda self: torch.device("cpu"))

    def check_data(self, data):
        if not isinstance(data, LinearData) or data.X.shape != (data.n, self.d_omega):
            raise ValueError("data: expected LinearData with X (n, d)")
        return data

    def check_heads(self, heads, name="heads"):
        if heads.ndim != 2 or heads.shape[1] != self.d_omega:
            raise ValueError(f"{name}: expected (N, {self.d_omega})")
        return heads

    def evaluate(self, X, Y, heads, weights, *, phi=False, risk=True):
        r = X @ (weights @ heads) - Y
        G = r / X.shape[0]
        return (0.5 * (r * r).mean() if risk else None, G, self.grad_at(X, G, heads),
                self.phi_at(X, G, heads) if phi else None)

    def grad_at(self, X, G, query):
        return (X.T @ G).expand_as(query)

    def phi_at(self, X, G, query):
        return query @ (X.T @ G)


@pytest.fixture(scope="module")
def problem():
    g = torch.Generator().manual_seed(0)
    n, d, N = 20, 3, 7
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    Y = X @ torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    heads0 = torch.randn(N, d, generator=g, dtype=torch.float64)
    S, b = X.T @ X / n, X.T @ Y / n
    return LinearModel(d), LinearData(X, Y), heads0, S, torch.linalg.solve(S, b)


def test_reference_flow_follows_the_closed_form(problem):
    model, data, heads0, S, w_star = problem
    flow = reference_flow(model, data, heads0, T=1.0, step=0.01, record_every=0.25, progress=False)
    mean0 = heads0.mean(0)
    for t, pop in zip(flow.times, flow.population):
        mean_t = w_star + torch.linalg.matrix_exp(-2 * S * float(t)) @ (mean0 - w_star)
        assert torch.allclose(pop, heads0 + (mean_t - mean0), atol=1e-9)  # RK4 with h = 0.01
    # the tagged characteristics of the population's own starts are its particles
    assert torch.allclose(flow.characteristics(heads0), flow.population, atol=1e-12)
    # the recorded risk is that of the closed-form mean, and it decreases
    risk_T = 0.5 * ((data.X @ flow.population[-1].mean(0) - data.Y) ** 2).mean()
    assert abs(float(flow.risk[-1]) - float(risk_T)) < 1e-12 and bool((flow.risk.diff() < 0).all())


def test_full_batch_sgd_is_the_euler_scheme(problem):
    model, data, heads0, S, w_star = problem
    eps = 0.01
    traj = sgd(model, data, heads0, eps=eps, T=0.5, record_every=0.1, batch_size=None,
               generator=torch.Generator().manual_seed(1), progress=False)
    mean0 = heads0.mean(0)
    step = torch.eye(3, dtype=torch.float64) - 2 * eps * S
    for j, h in enumerate(traj.heads):
        mean_k = w_star + torch.linalg.matrix_power(step, 10 * j) @ (mean0 - w_star)
        assert torch.allclose(h, heads0 + (mean_k - mean0), atol=1e-12)


def test_a_model_missing_the_protocol_is_rejected_by_name():
    with pytest.raises(ValueError, match="model"):
        reference_flow(object(), None, torch.zeros(2, 3, dtype=torch.float64), T=1.0, step=0.5, record_every=0.5)
