"""The multi-head attention model of paper section 2 and its mean-field derivatives.

One :class:`HeadModel` holds the fixed vocabulary projection ``W_out`` and the head size
``d_k``; every function takes the heads as a tensor ``(N, d_omega)`` (an empirical measure,
optionally weighted) and the data as a :class:`~mfattn.data.Dataset` whose average is the
expectation ``E_X``.

Engine qualities (``shared/DESIGN.md``):

* batched over heads and samples (no Python loop over either); the only loops are over
  *chunks* of heads and of samples, whose sizes bound the peak memory independently of N;
* logits are a sum over heads, so they are accumulated chunk by chunk in model space
  ``R^{d_x}``, and the fixed linear ``W_out`` is applied once, after the head sum;
* gradients pull the shared residual ``softmax(z) - Y`` back through ``W_out`` once, then
  through each chunk of heads with a hand-written backward pass of the attention head
  (checked against autograd and finite differences in ``tests/test_model.py``).

Used by every chapter; chapter 01 checks eqs. (12), (13), (18) numerically.
"""

from __future__ import annotations

import math
import torch

from ._checks import check_dim, check_positive, check_tensor
from .data import Dataset
from .particles import ParticleModel, blocks
from .softmax import cross_entropy, softmax_jacobian

__all__ = ["HeadModel"]

#: bytes of working memory for one chunk, by device type. On a CPU a chunk that stays near the caches
#: is faster than a large one (``python -m mfattn bench --budgets``: 1.2-1.9x between 32 MiB and
#: 256 MiB on 2 cores); a GPU wants large kernels.
_DEFAULT_BUDGET = {"cpu": 1 << 25, "cuda": 1 << 31}
#: on CUDA, head products with a side of width d_k <= TINY_DK and sequences of length L <= TINY_L are
#: broadcast products, not batched GEMMs (see :meth:`HeadModel._prod`). Measured on an H100, full
#: gradient, float32: 2.5x faster at (L, d_k) = (8, 2), 1.6x at (8, 4), but 3.4x slower at (32, 4)
TINY_DK, TINY_L = 4, 8


class HeadModel(ParticleModel):
    r"""Single-layer causal multi-head attention with a fixed vocabulary projection (paper §2.2).

    A head is a vector ``omega`` of length ``d_omega = 4 d_x d_k``: the row-major
    flattening of ``W_Q (d_x, d_k)``, ``W_K (d_x, d_k)``, ``W_V (d_x, d_k)``,
    ``W_O (d_k, d_x)``, concatenated in that order.

    Parameters
    ----------
    W_out : Tensor (d_x, d_v)
        Fixed vocabulary projection; fixes ``d_x``, ``d_v``, the dtype and the device.
    d_k : int
        Head (query/key/value) dimension.
    chunk_size : int, optional
        Heads per chunk. Default: chosen from ``memory_budget``.
    sample_chunk : int, optional
        Sequences per chunk. Default: chosen from ``memory_budget``.
    memory_budget : int, optional
        Bytes of working memory for one chunk of heads and samples (counted as 8 tensors of size
        ``(chunk, samples, L, L)``). Default: 32 MiB on a CPU, 2 GiB on a GPU.
    """

    def __init__(
        self,
        W_out: torch.Tensor,
        d_k: int,
        *,
        chunk_size: int | None = None,
        sample_chunk: int | None = None,
        memory_budget: int | None = None,
    ):
        check_tensor(W_out, "W_out", ndim=2)
        check_positive(d_k, "d_k", integer=True)
        if chunk_size is not None:
            check_positive(chunk_size, "chunk_size", integer=True)
        if sample_chunk is not None:
            check_positive(sample_chunk, "sample_chunk", integer=True)
        if memory_budget is not None:
            check_positive(memory_budget, "memory_budget", integer=True)
        self.W_out = W_out
        self.d_x, self.d_v = W_out.shape
        self.d_k = d_k
        self.d_omega = 4 * self.d_x * self.d_k
        self.chunk_size = chunk_size
        self.sample_chunk = sample_chunk
        self.memory_budget = memory_budget
        self._budget = memory_budget or _DEFAULT_BUDGET.get(W_out.device.type, 1 << 27)
        self._scale = 1.0 / math.sqrt(d_k)
        self._bias = None
        self._tiny = W_out.device.type == "cuda" and d_k <= TINY_DK

    # ------------------------------------------------------------------ basics
    @property
    def dtype(self) -> torch.dtype:
        return self.W_out.dtype

    @property
    def device(self) -> torch.device:
        return self.W_out.device

    def to(self, device=None, dtype=None) -> "HeadModel":
        return HeadModel(
            self.W_out.to(device=device, dtype=dtype),
            self.d_k,
            chunk_size=self.chunk_size,
            sample_chunk=self.sample_chunk,
            memory_budget=self.memory_budget,
        )

    def __repr__(self) -> str:
        return (
            f"HeadModel(d_x={self.d_x}, d_k={self.d_k}, d_v={self.d_v}, d_omega={self.d_omega}, "
            f"dtype={self.dtype}, device={self.device})"
        )

    def unpack(self, omega: torch.Tensor):
        """Split ``omega (..., d_omega)`` into ``W_Q, W_K, W_V (..., d_x, d_k)``, ``W_O (..., d_k, d_x)``."""
        if not isinstance(omega, torch.Tensor) or omega.ndim < 1 or omega.shape[-1] != self.d_omega:
            shape = tuple(omega.shape) if isinstance(omega, torch.Tensor) else type(omega).__name__
            raise ValueError(f"omega: last dimension must be d_omega = {self.d_omega}, got {shape}")
        m = self.d_x * self.d_k
        lead = omega.shape[:-1]
        W_Q = omega[..., 0 * m : 1 * m].reshape(*lead, self.d_x, self.d_k)
        W_K = omega[..., 1 * m : 2 * m].reshape(*lead, self.d_x, self.d_k)
        W_V = omega[..., 2 * m : 3 * m].reshape(*lead, self.d_x, self.d_k)
        W_O = omega[..., 3 * m : 4 * m].reshape(*lead, self.d_k, self.d_x)
        return W_Q, W_K, W_V, W_O

    def pack(self, W_Q, W_K, W_V, W_O) -> torch.Tensor:
        """Inverse of :meth:`unpack`."""
        return torch.cat([W.flatten(-2) for W in (W_Q, W_K, W_V, W_O)], dim=-1)

    # -------------------------------------------------------------- validation
    def check_heads(self, heads, name: str = "heads") -> torch.Tensor:
        check_tensor(heads, name, ndim=2, dtype=self.dtype, device=self.device)
        check_dim(heads, name, 1, self.d_omega, "d_omega")
        if heads.shape[0] < 1:
            raise ValueError(f"{name}: needs at least one head")
        return heads

    def check_X(self, X) -> torch.Tensor:
        check_tensor(X, "X", ndim=3, dtype=self.dtype, device=self.device)
        check_dim(X, "X", 2, self.d_x, "d_x")
        return X

    def check_data(self, data) -> Dataset:
        if not isinstance(data, Dataset):
            raise ValueError(f"data: expected a mfattn.Dataset, got {type(data).__name__}")
        if data.X.dtype != self.dtype or data.X.device != self.device:
            raise ValueError(
                f"data: dtype/device {data.X.dtype}/{data.X.device} differ from the model's "
                f"{self.dtype}/{self.device}"
            )
        check_dim(data.X, "data.X", 2, self.d_x, "d_x")
        check_dim(data.Y, "data.Y", 2, self.d_v, "d_v")
        return data

    # ------------------------------------------------------------------ loss
    def loss(self, Y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Cross-entropy (9) per position: ``(..., n, L, d_v) -> (..., n, L)``."""
        return cross_entropy(Y, z)

    def loss_hessian(self, Y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Hessian of (9) in the logits, the softmax Jacobian (4): ``(n, L, d_v, d_v)``."""
        return softmax_jacobian(z)

    # ------------------------------------------------------------ chunk sizes
    def chunks(self, n_samples: int, n_heads: int, L: int):
        item = torch.finfo(self.dtype).bits // 8
        # what one (head, sample) holds at the peak of a gradient pass: A and dS (L x L), the softmax's and
        # the products' temporaries, and the (L, d_k), (L, d_x) intermediates; `bench` measured the peak
        # at 1.0x (H100) to 1.7x (2-core CPU) the budget with this count (8 L^2 items)
        per = 8 * L * L * item
        sb = self.sample_chunk or max(1, min(n_samples, self._budget // per))
        hb = self.chunk_size or max(1, min(n_heads, self._budget // (per * sb)))
        return sb, hb

    def _mask_bias(self, L: int) -> torch.Tensor:
        """The causal mask (5) as an additive bias: 0 on and below the diagonal, -inf above."""
        if self._bias is None or self._bias.shape[-1] != L:
            future = torch.ones(L, L, dtype=torch.bool, device=self.device).triu(1)
            self._bias = torch.zeros(1, L, L, dtype=self.dtype, device=self.device).masked_fill(future, float("-inf"))
        return self._bias

    # ----------------------------------------------------------- head kernels
    def _attend(self, X: torch.Tensor, h: torch.Tensor):
        """Eqs. (5)-(6) for a chunk of ``c`` heads: ``Q, K, V, AV (c, B, L, d_k)`` and ``A (c, B, L, L)``.

        The three projections of every head of the chunk are one matrix product
        ``X (B L, d_x) @ [W_Q | W_K | W_V] (d_x, 3 c d_k)``; the scores, the masked row softmax and
        ``A V`` are batched over (head, sequence).
        """
        c = h.shape[0]
        B, L, d_x = X.shape
        d_k = self.d_k
        W = h[:, : 3 * d_x * d_k].reshape(c, 3, d_x, d_k).permute(2, 0, 1, 3).reshape(d_x, 3 * c * d_k)
        P = (X.reshape(B * L, d_x) @ W).reshape(B, L, c, 3, d_k).permute(3, 2, 0, 1, 4).contiguous()
        Q, K, V = P[0], P[1], P[2]
        # scores Q K^T / sqrt(d_k) with the causal mask (5) as an additive -inf bias, in one batched product
        if self._tiny and L <= TINY_L:
            S = self._prod(Q, K, "nt").mul_(self._scale).add_(self._mask_bias(L))
        else:
            S = torch.baddbmm(self._mask_bias(L), Q.reshape(-1, L, d_k), K.reshape(-1, L, d_k).transpose(1, 2),
                              alpha=self._scale).view(c, B, L, L)
        A = torch.softmax(S, dim=-1)  # row softmax (6)
        return Q, K, V, A, self._prod(A, V, "nn")

    def _prod(self, a: torch.Tensor, b: torch.Tensor, kind: str) -> torch.Tensor:
        """Batched ``a @ b`` (``"nn"``), ``a^T @ b`` (``"tn"``) or ``a @ b^T`` (``"nt"``), where one side is
        ``(..., L, d_k)`` (``L = a.shape[-2]`` in every call). On CUDA with ``d_k <= TINY_DK`` and
        ``L <= TINY_L`` it is a broadcast product and a sum, whose memory traffic is a few passes over
        the ``(L, L)`` tile; cuBLAS's batched kernels for matrices of width 2 run far below the memory
        bandwidth (``python -m mfattn bench --profile``)."""
        if not (self._tiny and a.shape[-2] <= TINY_L):
            if kind == "nn":
                return a @ b
            return a.transpose(-1, -2) @ b if kind == "tn" else a @ b.transpose(-1, -2)
        if kind == "nn":  # a (.., L, M), b (.., M, k)
            return (a.unsqueeze(-1) * b.unsqueeze(-3)).sum(-2)
        if kind == "tn":  # a (.., L, M), b (.., L, k) -> (.., M, k)
            return (a.unsqueeze(-1) * b.unsqueeze(-2)).sum(-3)
        return (a.unsqueeze(-2) * b.unsqueeze(-3)).sum(-1)  # a (.., L, k), b (.., M, k) -> (.., L, M)

    def _W_O(self, h: torch.Tensor) -> torch.Tensor:
        return h[:, 3 * self.d_x * self.d_k :].reshape(h.shape[0], self.d_k, self.d_x)

    def forward(self, X: torch.Tensor, h: torch.Tensor):
        """Head outputs ``A_omega(X) X W_V W_O`` in model space, shape (c, B, L, d_x).

        Eqs. (5)-(7) without ``W_out``; returns the intermediates for ``_backward``.
        """
        Q, K, V, A, AV = self._attend(X, h)
        W_O = self._W_O(h)
        c, B, L, d_k = AV.shape
        out = (AV.reshape(c, B * L, d_k) @ W_O).reshape(c, B, L, self.d_x)
        return out, (Q, K, V, A, AV, W_O)

    def _head_sum(self, X: torch.Tensor, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``sum_i w_i A_i X W_V,i W_O,i`` over a chunk, (B, L, d_x): the weighted head sum of (8) as one
        matrix product ``AV (B L, c d_k) @ [w_i W_O,i] (c d_k, d_x)``, with no per-head output."""
        AV = self._attend(X, h)[4]
        c, B, L, d_k = AV.shape
        W_O = (w.reshape(c, 1, 1) * self._W_O(h)).reshape(c * d_k, self.d_x)
        return (AV.permute(1, 2, 0, 3).reshape(B * L, c * d_k) @ W_O).reshape(B, L, self.d_x)

    def _backward(self, X: torch.Tensor, G: torch.Tensor, cache, per_sample: bool) -> torch.Tensor:
        """Gradient in omega of ``sum_{b,l} <G[b,l], out_omega(X)[b,l]>`` for each head of a chunk.

        ``G (B, L, d_x)`` is the pulled-back residual. Returns (c, d_omega), or
        (c, B, d_omega) with ``per_sample`` (no sum over sequences).
        """
        Q, K, V, A, AV, W_O = cache
        c, B, L, d_k = AV.shape
        d_x = self.d_x
        Gf = G.reshape(B * L, d_x)
        dAV = (Gf @ W_O.permute(2, 0, 1).reshape(d_x, c * d_k)).reshape(B, L, c, d_k).permute(2, 0, 1, 3)
        dAV = dAV.contiguous()
        if per_sample:
            dW_O = torch.einsum("cblk,blx->cbkx", AV, G)
        else:
            dW_O = AV.reshape(c, B * L, d_k).transpose(1, 2) @ Gf  # (c, d_k, d_x)
        dV = self._prod(A, dAV, "tn")
        dS = self._prod(dAV, V, "nt")  # dA, turned into dS in place: softmax backward (4)
        dS.sub_(torch.linalg.vecdot(dS, A).unsqueeze(-1)).mul_(A)
        # S = scale Q K^T: the scale goes on the (c, B, L, d_k) products, not on the (c, B, L, L) dS
        dP = torch.stack([self._prod(dS, K, "nn").mul_(self._scale), self._prod(dS, Q, "tn").mul_(self._scale), dV])
        dP = dP.permute(2, 3, 1, 0, 4)  # (B, L, c, 3, d_k)
        if per_sample:
            dW = X.transpose(1, 2) @ dP.reshape(B, L, 3 * c * d_k)  # (B, d_x, 3 c d_k)
            dW = dW.reshape(B, d_x, c, 3, d_k).permute(2, 0, 3, 1, 4).reshape(c, B, 3 * d_x * d_k)
            return torch.cat([dW, dW_O.reshape(c, B, d_k * d_x)], dim=-1)
        dW = X.reshape(B * L, d_x).T @ dP.reshape(B * L, 3 * c * d_k)  # (d_x, 3 c d_k)
        dW = dW.reshape(d_x, c, 3, d_k).permute(1, 2, 0, 3).reshape(c, 3 * d_x * d_k)
        return torch.cat([dW, dW_O.reshape(c, d_k * d_x)], dim=-1)

    def _logits_model_space(self, X: torch.Tensor, heads: torch.Tensor, weights: torch.Tensor):
        """``sum_i w_i A_i X W_V,i W_O,i`` (B, L, d_x), streamed over sample and head chunks."""
        B, L, _ = X.shape
        sb, hb = self.chunks(B, heads.shape[0], L)
        acc = X.new_zeros(B, L, self.d_x)
        for s in blocks(B, sb):
            for h in blocks(heads.shape[0], hb):
                acc[s] += self._head_sum(X[s], heads[h], weights[h])
        return self.reduce(acc)

    def _logits(self, X, heads, weights):
        return self._logits_model_space(X, heads, weights) @ self.W_out  # W_out once, eq. (8)

    def pullback(self, X, Y, heads, weights) -> torch.Tensor:
        """Residual ``softmax(z^rho) - Y`` pulled back through ``W_out``: (n, L, d_x)."""
        return self._residual(self._logits(X, heads, weights), Y)

    def _residual(self, z, Y) -> torch.Tensor:
        """``(softmax(z) - Y) W_out^T`` for logits ``z (n, L, d_v)``: the residual of (11) in model space."""
        return (torch.softmax(z, dim=-1) - Y) @ self.W_out.T

    def grad_phi(self, X, Y, heads, weights, query=None) -> torch.Tensor:
        """``grad Phi(query; rho)`` averaged over the sequences ``(X, Y)``; no validation.

        The hot path of SGD (19) and of the characteristics (21) in :mod:`mfattn.dynamics`.
        """
        if query is None:  # at the measure's own atoms: one head pass when everything fits in one chunk
            return self.evaluate(X, Y, heads, weights)[2]
        G = self.pullback(X, Y, heads, weights) / (X.shape[0] * X.shape[1])
        return self.grad_at(X, G, query)

    def risk_and_dissipation(self, X, Y, heads, weights, *, dissipation: bool = True):
        """Risk (10) and, when asked, dissipation (38) of a measure (one head pass when the measure fits
        in one chunk, see :meth:`evaluate`);
        no validation. Used by :meth:`risk`, :meth:`dissipation` and the recorders of
        :mod:`mfattn.dynamics`."""
        if not dissipation:
            return cross_entropy(Y, self._logits(X, heads, weights)).mean(), None
        risk, _, g, _ = self.evaluate(X, Y, heads, weights)
        return risk, self.weighted_sq_norm(weights, g)

    def evaluate(self, X, Y, heads, weights, *, phi: bool = False):
        """Risk (10), the scaled pulled-back residual ``G = (softmax z^rho - Y) W_out^T / (n L)``,
        ``grad Phi(omega_i; rho)`` (13) at the measure's own atoms and, with ``phi``, ``Phi(omega_i; rho)``
        (11); no validation. Returns ``(risk, G, grad, phi or None)``.

        When heads and samples fit in one chunk, the forward pass that gives the logits is reused
        for the backward pass and ``Phi`` (one head pass instead of two or three); otherwise the
        streamed routines are called. The hot path of the characteristics (21) in
        :mod:`mfattn.dynamics` and of the local solvers of :mod:`mfattn.static`.
        """
        B, L, _ = X.shape
        sb, hb = self.chunks(B, heads.shape[0], L)
        if sb < B or hb < heads.shape[0]:
            z = self._logits(X, heads, weights)
            G = self._residual(z, Y) / (B * L)
            return (cross_entropy(Y, z).mean(), G, self.grad_at(X, G, heads),
                    self.phi_at(X, G, heads) if phi else None)
        out, cache = self.forward(X, heads)
        z = self.reduce(torch.einsum("c,cblx->blx", weights, out)) @ self.W_out
        G = self._residual(z, Y) / (B * L)
        p = torch.einsum("cblx,blx->c", out, G) if phi else None
        return cross_entropy(Y, z).mean(), G, self._backward(X, G, cache, False), p

    def risk_grad_phi(self, X, Y, heads, weights):
        """Risk (10), ``grad Phi(omega_i; rho)`` (13) and ``Phi(omega_i; rho)`` (11) at the measure's own
        atoms (see :meth:`evaluate`), for the local solvers of :mod:`mfattn.static`; no validation."""
        risk, _, grad, phi = self.evaluate(X, Y, heads, weights, phi=True)
        return risk, grad, phi

    def prepare(self, data, heads, weights, query=None, *, per_sample: bool = False):
        """Validate the arguments; return (data, query, heads, weights, G) with ``G`` the pulled-back
        residual scaled by ``1/(n L)`` (the E_X average of (11)), or by ``1/L`` when ``per_sample``."""
        data = self.check_data(data)
        heads, weights = self.check_measure(heads, weights)
        query = heads if query is None else self.check_heads(query, "query")
        G = self.pullback(data.X, data.Y, heads, weights) / (data.L if per_sample else data.n * data.L)
        return data, query, heads, weights, G

    def phi_at(self, X, G, query) -> torch.Tensor:
        B, L, _ = X.shape
        sb, hb = self.chunks(B, query.shape[0], L)
        phi = X.new_zeros(query.shape[0])
        for s in blocks(B, sb):
            for h in blocks(query.shape[0], hb):
                out, _ = self.forward(X[s], query[h])
                phi[h] += torch.einsum("cblx,blx->c", out, G[s])
        return phi

    def grad_at(self, X, G, query, per_sample: bool = False) -> torch.Tensor:
        B, L, _ = X.shape
        M = query.shape[0]
        sb, hb = self.chunks(B, M, L)
        shape = (B, M, self.d_omega) if per_sample else (M, self.d_omega)
        grad = X.new_zeros(shape)
        for s in blocks(B, sb):
            for h in blocks(M, hb):
                _, cache = self.forward(X[s], query[h])
                g = self._backward(X[s], G[s], cache, per_sample)
                if per_sample:
                    grad[s, h] = g.transpose(0, 1)
                else:
                    grad[h] += g
        return grad

    # -------------------------------------------------------------- public API
    def features(self, X: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        r"""Per-head logit features :math:`\psi(X;\omega_i)`, eq. (7): shape (N, B, L, d_v).

        Materialises one feature map per head; the streamed sums (:meth:`logits`,
        :meth:`risk`, ...) never do.
        """
        X = self.check_X(X)
        heads = self.check_heads(heads)
        B, L, _ = X.shape
        sb, hb = self.chunks(B, heads.shape[0], L)
        out = X.new_empty(heads.shape[0], B, L, self.d_v)
        for s in blocks(B, sb):
            for h in blocks(heads.shape[0], hb):
                out[h, s] = self.forward(X[s], heads[h])[0] @ self.W_out
        return out

    def logits(self, X: torch.Tensor, heads: torch.Tensor, weights: torch.Tensor | None = None):
        r"""Mean-field logits :math:`z^\rho(X)=\sum_i w_i\psi(X;\omega_i)`, eq. (8): (B, L, d_v)."""
        X = self.check_X(X)
        heads, weights = self.check_measure(heads, weights)
        return self._logits(X, heads, weights)

    def risk(self, data: Dataset, heads: torch.Tensor, weights: torch.Tensor | None = None):
        r"""Cross-entropy risk :math:`\mathcal E(\rho)`, eq. (10): 0-dim tensor.

        ``E_X`` is the average over ``data``; log-sum-exp keeps it stable for large logits.
        """
        data = self.check_data(data)
        heads, weights = self.check_measure(heads, weights)
        return self.risk_and_dissipation(data.X, data.Y, heads, weights, dissipation=False)[0]

    def first_variation(self, data: Dataset, query, heads, weights=None) -> torch.Tensor:
        r"""First variation :math:`\Phi(\omega;\rho)`, eq. (11), at each query head: (M,).

        ``rho`` is the measure of ``heads`` with ``weights``; ``query (M, d_omega)``.
        """
        data, query, _, _, G = self.prepare(data, heads, weights, query)
        return self.phi_at(data.X, G, query)

    def grad_first_variation(self, data: Dataset, query, heads, weights=None) -> torch.Tensor:
        r""":math:`\nabla_\omega\Phi(\omega;\rho)`, eq. (13), at each query head: (M, d_omega)."""
        data, query, _, _, G = self.prepare(data, heads, weights, query)
        return self.grad_at(data.X, G, query)

    def per_sample_grad_first_variation(self, data: Dataset, query, heads, weights=None):
        r"""Per-sequence terms of (13): ``g[b, i] = (1/L) sum_l grad psi_l(X_b; q_i)^T r_l(X_b)``.

        Shape (n, M, d_omega); their mean over ``b`` is :meth:`grad_first_variation`, and
        ``-g[b]`` at ``query = heads`` is the stochastic gradient ``G_i`` of (17) on sample ``b``.
        """
        data, query, _, _, G = self.prepare(data, heads, weights, query, per_sample=True)
        return self.grad_at(data.X, G, query, per_sample=True)

    def stochastic_gradient(self, sample: Dataset, heads, weights=None) -> torch.Tensor:
        r"""Stochastic gradient :math:`G_i(\omega^k; X^{k+1})`, eq. (17): (N, d_omega).

        ``sample`` holds the drawn sequence(s) (one sequence is the paper's SGD; several
        average, i.e. a minibatch). Its conditional mean is ``-grad Phi(omega_i; rho)`` (18).
        """
        return -self.grad_first_variation(sample, heads, heads, weights)

    def dissipation(self, data: Dataset, heads, weights=None) -> torch.Tensor:
        r"""Dissipation :math:`\mathcal I(\rho)=\int\|\nabla\Phi(\omega;\rho)\|^2\rho(d\omega)`, eq. (38)."""
        data = self.check_data(data)
        heads, weights = self.check_measure(heads, weights)
        return self.risk_and_dissipation(data.X, data.Y, heads, weights)[1]

    def hessian_first_variation(self, data: Dataset, omega, heads, weights=None) -> torch.Tensor:
        r"""Hessian in omega of :math:`\Phi(\omega;\rho)` with rho frozen: (d_omega, d_omega).

        With ``heads = omega[None]`` this is :math:`H_0` of eq. (50). Computed by autograd of
        the head map (one head; not a hot path).
        """
        omega = self.check_omega(omega)
        data, _, _, _, G = self.prepare(data, heads, weights)
        return self._hessian_phi(data.X, G, omega)

    def check_omega(self, omega) -> torch.Tensor:
        check_tensor(omega, "omega", ndim=1, dtype=self.dtype, device=self.device)
        check_dim(omega, "omega", 0, self.d_omega, "d_omega")
        return omega

    def _hessian_phi(self, X, G, omega):
        sb, _ = self.chunks(X.shape[0], 1, X.shape[1])
        H = X.new_zeros(self.d_omega, self.d_omega)
        for s in blocks(X.shape[0], sb):
            Xs, Gs = X[s], G[s]

            def phi(w):
                return (self.forward(Xs, w.unsqueeze(0))[0][0] * Gs).sum()

            H += torch.func.hessian(phi)(omega)
        return H

    def translation_hessian(self, data: Dataset, omega) -> torch.Tensor:
        r"""Translation Hessian :math:`H_{tr}`, eq. (59), at omega: (d_omega, d_omega).

        :math:`H_{tr} = H_0 + E_X[\frac1L\sum_l J_l^\top S_l J_l]` with ``J_l`` the Jacobian of
        :math:`\psi_l(X;\omega)` and :math:`S_l` the softmax Jacobian (4) at
        :math:`\psi_l(X;\omega)`. For every omega (stationary or not) this equals the Hessian of
        the single-head risk :math:`\omega\mapsto\mathcal E(\delta_\omega)`.
        """
        omega = self.check_omega(omega)
        data, _, _, _, G = self.prepare(data, omega.unsqueeze(0), None)
        H = self._hessian_phi(data.X, G, omega)
        sb, _ = self.chunks(data.n, 1, data.L)
        scale = 1.0 / (data.n * data.L)
        for s in blocks(data.n, sb):
            Xs = data.X[s]

            def head_out(w):
                return self.forward(Xs, w.unsqueeze(0))[0][0]

            J = torch.func.jacfwd(head_out)(omega)  # (B, L, d_x, d_omega)
            J = torch.einsum("blxw,xv->blvw", J, self.W_out)  # Jacobian of psi
            p = torch.softmax(head_out(omega) @ self.W_out, dim=-1)
            pJ = torch.einsum("blv,blvw->blw", p, J)
            H += scale * (
                torch.einsum("blv,blvw,blvu->wu", p, J, J) - torch.einsum("blw,blu->wu", pJ, pJ)
            )
        return H
