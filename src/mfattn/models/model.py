"""The multi-head attention model of paper section 2 and its mean-field derivatives.

One :class:`HeadModel` holds the fixed vocabulary projection ``W_out`` and the head size
``d_k``; every function takes the heads as a tensor ``(N, d_omega)`` (an empirical measure,
optionally weighted) and the data as a :class:`~mfattn.models.data.Dataset` whose average is the
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

from . import fused as _fused
from .._checks import check_dim, check_positive, check_tensor
from .data import Dataset
from .particles import ParticleModel, blocks
from .softmax import cross_entropy, softmax_jacobian

__all__ = ["HeadModel", "fused_kernels", "require_heads"]

#: bytes of working memory for one chunk, by device type. On a CPU a chunk that stays near the caches
#: is faster than a large one (``python -m mfattn bench --budgets``: 1.2-1.9x between 32 MiB and
#: 256 MiB on 2 cores); a GPU wants large kernels.
_DEFAULT_BUDGET = {"cpu": 1 << 25, "cuda": 1 << 31}
#: on CUDA, head products with a side of width d_k <= TINY_DK and sequences of length L <= TINY_L are
#: broadcast products, not batched GEMMs (see :meth:`HeadModel._prod`). Measured on an H100, full
#: gradient, float32: 2.5x faster at (L, d_k) = (8, 2), 1.6x at (8, 4), but 3.4x slower at (32, 4)
TINY_DK, TINY_L = 4, 8


def fused_kernels(device):
    """The module of fused kernels that :class:`HeadModel` uses on ``device`` by default, or None.

    :mod:`mfattn.models.fused` (numba) on the CPU when numba imports; :mod:`mfattn.models.fused_cuda`
    (Triton) on a CUDA device when triton imports; None elsewhere (the torch path). The Triton module
    is imported only for a CUDA device, so a CPU run never loads triton.

    Parameters
    ----------
    device : torch.device or str
        The model's device.

    Returns
    -------
    module or None
        A module with ``plain``, ``head_sum`` and ``head_pass``.

    Examples
    --------
    >>> from mfattn.models.model import fused_kernels
    >>> fused_kernels("cpu").__name__
    'mfattn.models.fused'
    >>> fused_kernels("meta") is None
    True
    """
    kind = torch.device(device).type
    if kind == "cpu":
        return _fused if _fused.available() else None
    if kind == "cuda":
        from . import fused_cuda

        return fused_cuda if fused_cuda.available() else None
    return None


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
    fused : bool, optional
        Use a fused head pass for the logits, ``Phi`` and ``grad Phi`` (it needs no chunks: its memory
        does not grow with the heads): on a CPU the numba pass of :mod:`mfattn.models.fused`, on a
        CUDA device the Triton pass of :mod:`mfattn.models.fused_cuda` (see :func:`fused_kernels`).
        Default (None): where the device's pass can run (numba, resp. triton, imports); False forces
        the torch path (the fused passes' oracle). A call that autograd or ``torch.func`` traces
        always takes the torch path.

    Attributes
    ----------
    W_out : Tensor (d_x, d_v)
        The vocabulary projection.
    d_x : int
        Model (token) dimension.
    d_v : int
        Vocabulary size.
    d_k : int
        Head dimension.
    d_omega : int
        Length ``4 d_x d_k`` of a head vector.
    dtype : torch.dtype
        The dtype of ``W_out``, which heads and data must share.
    device : torch.device
        The device of ``W_out``, which heads and data must share.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.model import HeadModel
    >>> g = torch.Generator().manual_seed(0)
    >>> model = HeadModel(torch.randn(3, 4, generator=g, dtype=torch.float64), d_k=2)
    >>> model
    HeadModel(d_x=3, d_k=2, d_v=4, d_omega=24, dtype=torch.float64, device=cpu)
    >>> heads = torch.randn(5, model.d_omega, generator=g, dtype=torch.float64)
    >>> X = torch.randn(2, 6, 3, generator=g, dtype=torch.float64)
    >>> model.logits(X, heads).shape  # (B, L, d_v), uniform weights 1/5
    torch.Size([2, 6, 4])
    """

    def __init__(
        self,
        W_out: torch.Tensor,
        d_k: int,
        *,
        chunk_size: int | None = None,
        sample_chunk: int | None = None,
        memory_budget: int | None = None,
        fused: bool | None = None,
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
        if fused not in (None, True, False):
            raise ValueError(f"fused must be None, True or False, got {fused!r}")
        kernels = fused_kernels(W_out.device)
        if fused and kernels is None:
            raise ValueError("fused=True needs W_out on the CPU with numba installed, or on a CUDA device with "
                             "triton installed")
        self.fused = fused
        self._fused = kernels is not None if fused is None else fused

    @property
    def _kernels(self):
        """The fused kernels of the model's device (a property, not an attribute: a module does not pickle)."""
        return fused_kernels(self.W_out.device)

    def _fast(self, *tensors) -> bool:
        """Whether this call takes the fused path of the model's device (see ``fused``)."""
        if not self._fused:
            return False
        kernels = self._kernels
        return kernels is not None and kernels.plain(*tensors)

    # ------------------------------------------------------------------ basics
    @property
    def dtype(self) -> torch.dtype:
        return self.W_out.dtype

    @property
    def device(self) -> torch.device:
        return self.W_out.device

    def to(self, device=None, dtype=None) -> "HeadModel":
        """A copy of the model with ``W_out`` moved to ``device`` and/or cast to ``dtype``.

        Parameters
        ----------
        device : torch.device or str, optional
            Target device. Default: unchanged.
        dtype : torch.dtype, optional
            ``torch.float32`` or ``torch.float64``. Default: unchanged.

        Returns
        -------
        HeadModel
            A new model with the same ``d_k``, ``chunk_size``, ``sample_chunk`` and ``memory_budget``
            (an unset budget becomes the new device's default). Convert heads and data alike
            (:meth:`mfattn.models.data.Dataset.to`).

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.model import HeadModel
        >>> model = HeadModel(torch.ones(3, 4, dtype=torch.float64), d_k=2, chunk_size=8)
        >>> model32 = model.to(dtype=torch.float32)
        >>> model32.dtype, model32.W_out.dtype, model32.d_omega, model32.chunk_size
        (torch.float32, torch.float32, 24, 8)
        """
        return HeadModel(
            self.W_out.to(device=device, dtype=dtype),
            self.d_k,
            chunk_size=self.chunk_size,
            sample_chunk=self.sample_chunk,
            memory_budget=self.memory_budget,
            # fused=True cannot follow W_out off the CPU: the copy takes the default there
            fused=None if self.fused and device is not None and torch.device(device).type != "cpu" else self.fused,
        )

    def __repr__(self) -> str:
        return (
            f"HeadModel(d_x={self.d_x}, d_k={self.d_k}, d_v={self.d_v}, d_omega={self.d_omega}, "
            f"dtype={self.dtype}, device={self.device})"
        )

    def unpack(self, omega: torch.Tensor):
        """Split ``omega (..., d_omega)`` into ``W_Q, W_K, W_V (..., d_x, d_k)``, ``W_O (..., d_k, d_x)``.

        Parameters
        ----------
        omega : Tensor (..., d_omega)
            One head or a batch of heads (any leading axes).

        Returns
        -------
        tuple of Tensor
            ``(W_Q, W_K, W_V, W_O)``, the first three of shape ``(..., d_x, d_k)`` and ``W_O`` of
            shape ``(..., d_k, d_x)``.

        Raises
        ------
        ValueError
            If ``omega`` is not a tensor whose last dimension is ``d_omega``.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model = example().model
        >>> W_Q, W_K, W_V, W_O = model.unpack(torch.arange(24, dtype=torch.float64))
        >>> W_Q.shape, W_O.shape
        (torch.Size([3, 2]), torch.Size([2, 3]))
        >>> W_Q[0].tolist(), W_K[0].tolist(), W_O[0].tolist()
        ([0.0, 1.0], [6.0, 7.0], [18.0, 19.0, 20.0])
        """
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
        """Inverse of :meth:`unpack`.

        Parameters
        ----------
        W_Q : Tensor (..., d_x, d_k)
            Query projections.
        W_K : Tensor (..., d_x, d_k)
            Key projections.
        W_V : Tensor (..., d_x, d_k)
            Value projections.
        W_O : Tensor (..., d_k, d_x)
            Output projection.

        Returns
        -------
        Tensor (..., d_omega)
            The heads: the four row-major flattenings, concatenated in that order.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, _, heads, _ = example()
        >>> bool(torch.equal(model.pack(*model.unpack(heads)), heads))
        True
        """
        return torch.cat([W.flatten(-2) for W in (W_Q, W_K, W_V, W_O)], dim=-1)

    # -------------------------------------------------------------- validation
    def check_heads(self, heads, name: str = "heads") -> torch.Tensor:
        """Validate heads ``(N, d_omega)``, N >= 1, of the model's dtype and device, finite.

        Parameters
        ----------
        heads : Tensor (N, d_omega)
            The heads to check.
        name : str, optional
            The argument's name in the error message. Default: ``"heads"``.

        Returns
        -------
        Tensor (N, d_omega)
            ``heads`` itself.

        Raises
        ------
        ValueError
            Starting with ``name``, if a check fails.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model = example().model
        >>> model.check_heads(torch.zeros(5, 24, dtype=torch.float64)).shape
        torch.Size([5, 24])
        >>> model.check_heads(torch.zeros(5, 20, dtype=torch.float64), "query")
        Traceback (most recent call last):
            ...
        ValueError: query: dimension 1 has size 20, expected d_omega = 24
        """
        check_tensor(heads, name, ndim=2, dtype=self.dtype, device=self.device)
        check_dim(heads, name, 1, self.d_omega, "d_omega")
        if heads.shape[0] < 1:
            raise ValueError(f"{name}: needs at least one head")
        return heads

    def check_X(self, X) -> torch.Tensor:
        """Validate token sequences ``X (B, L, d_x)`` of the model's dtype and device, finite.

        Parameters
        ----------
        X : Tensor (B, L, d_x)
            The sequences to check.

        Returns
        -------
        Tensor (B, L, d_x)
            ``X`` itself.

        Raises
        ------
        ValueError
            Starting with ``X``, if a check fails.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model = example().model
        >>> model.check_X(torch.zeros(2, 5, 3, dtype=torch.float64)).shape
        torch.Size([2, 5, 3])
        >>> model.check_X(torch.zeros(2, 5, 3, dtype=torch.float32))
        Traceback (most recent call last):
            ...
        ValueError: X: dtype torch.float32 does not match the model's torch.float64
        """
        check_tensor(X, "X", ndim=3, dtype=self.dtype, device=self.device)
        check_dim(X, "X", 2, self.d_x, "d_x")
        return X

    def check_data(self, data) -> Dataset:
        """Validate a :class:`~mfattn.models.data.Dataset` against the model (dtype, device, ``d_x``, ``d_v``).

        Parameters
        ----------
        data : Dataset
            Sequences ``X (n, L, d_x)`` and labels ``Y (n, L, d_v)``.

        Returns
        -------
        Dataset
            ``data`` itself.

        Raises
        ------
        ValueError
            If ``data`` is not a ``Dataset`` or does not match the model.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, _, _ = example()
        >>> model.check_data(data) is data
        True
        >>> model.check_data(data.to(dtype=torch.float32))
        Traceback (most recent call last):
            ...
        ValueError: data: dtype/device torch.float32/cpu differ from the model's torch.float64/cpu
        """
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
        """Cross-entropy (9) per position: ``(..., n, L, d_v) -> (..., n, L)``.

        Parameters
        ----------
        Y : Tensor (..., n, L, d_v)
            Label distributions (broadcast against ``z``).
        z : Tensor (..., n, L, d_v)
            Logits: :meth:`logits` of a measure, or :meth:`features` (one head per leading index).

        Returns
        -------
        Tensor (..., n, L)
            The loss at each position; its mean over ``(n, L)`` is the risk (10).

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, _ = example()
        >>> z = model.logits(data.X, heads)
        >>> model.loss(data.Y, z).shape
        torch.Size([4, 3])
        >>> bool(torch.allclose(model.loss(data.Y, z).mean(), model.risk(data, heads)))
        True
        """
        return cross_entropy(Y, z)

    def loss_hessian(self, Y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        r"""Hessian of (9) in the logits, the softmax Jacobian (4): ``(n, L, d_v, d_v)``.

        Parameters
        ----------
        Y : Tensor (n, L, d_v)
            Label distributions; unused, since the Hessian of (9) does not depend on them (the argument
            is part of the particle-model protocol, :mod:`mfattn.models.particles`).
        z : Tensor (..., n, L, d_v)
            Logits.

        Returns
        -------
        Tensor (..., n, L, d_v, d_v)
            :math:`\operatorname{diag}(p) - p p^\top` with :math:`p = \mathrm{softmax}(z)`, per position.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, _ = example()
        >>> H = model.loss_hessian(data.Y, model.logits(data.X, heads))
        >>> H.shape
        torch.Size([4, 3, 4, 4])
        >>> ones = torch.ones(4, dtype=torch.float64)  # a shift of all logits changes nothing
        >>> bool(torch.allclose(H @ ones, torch.zeros(4, 3, 4, dtype=torch.float64)))
        True
        """
        return softmax_jacobian(z)

    # ------------------------------------------------------------ chunk sizes
    def chunks(self, n_samples: int, n_heads: int, L: int):
        """Chunk sizes ``(samples, heads)`` of the streamed sums, from the memory budget.

        One (head, sequence) pair holds about ``8 L^2`` numbers at the peak of a gradient pass. The
        sample chunk takes as many sequences as the budget allows, then the head chunk fills what is
        left; ``sample_chunk`` and ``chunk_size``, when set, are used as they are.

        Parameters
        ----------
        n_samples : int
            Number of sequences to stream over.
        n_heads : int
            Number of heads (or query points).
        L : int
            Sequence length.

        Returns
        -------
        tuple of int
            ``(sample_chunk, head_chunk)``, each at least 1 and, unless set, at most ``n_samples``
            and ``n_heads``.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.model import HeadModel
        >>> model = HeadModel(torch.ones(3, 4, dtype=torch.float64), d_k=2, memory_budget=1 << 20)
        >>> model.chunks(1000, 50, 8), model.chunks(10, 50, 8)
        ((256, 1), (10, 25))
        >>> HeadModel(model.W_out, 2, chunk_size=4, sample_chunk=2).chunks(1000, 50, 8)
        (2, 4)
        """
        item = torch.finfo(self.dtype).bits // 8
        # what one (head, sample) holds at the peak of a gradient pass: A and dS (L x L), the softmax's and
        # the products' temporaries, and the (L, d_k), (L, d_x) intermediates; `bench` measured the peak
        # at 1.0x (H100) to 1.7x (2-core CPU) the budget with this count (8 L^2 items)
        per = 8 * L * L * item
        sb = self.sample_chunk or max(1, min(n_samples, self._budget // per))
        hb = self.chunk_size or max(1, min(n_heads, self._budget // (per * sb)))
        return sb, hb

    def causal_bias(self, L: int) -> torch.Tensor:
        """The causal mask (5) as an additive bias: 0 on and below the diagonal, -inf above. Built
        once per sequence length and kept (a caller about to enter a ``torch.func`` transform builds
        it first, so that the kept tensor holds no autodiff level).

        Parameters
        ----------
        L : int
            Sequence length.

        Returns
        -------
        Tensor (1, L, L)
            In the model's dtype and device.

        Examples
        --------
        >>> from mfattn.models.tasks import example
        >>> model = example().model
        >>> model.causal_bias(3)[0]
        tensor([[0., -inf, -inf],
                [0., 0., -inf],
                [0., 0., 0.]], dtype=torch.float64)
        """
        if self._bias is None or self._bias.shape[-1] != L:
            future = torch.ones(L, L, dtype=torch.bool, device=self.device).triu(1)
            bias = torch.zeros(1, L, L, dtype=self.dtype, device=self.device).masked_fill(future, float("-inf"))
            if torch._C._functorch.is_functorch_wrapped_tensor(bias):
                return bias  # made inside a torch.func transform: kept, it would escape its level
            self._bias = bias
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
            S = self._prod(Q, K, "nt").mul_(self._scale).add_(self.causal_bias(L))
        else:
            S = torch.baddbmm(self.causal_bias(L), Q.reshape(-1, L, d_k), K.reshape(-1, L, d_k).transpose(1, 2),
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
        r"""Head outputs ``A_omega(X) X W_V W_O`` in model space, shape (c, B, L, d_x).

        Eqs. (5)-(7) without ``W_out``; returns the intermediates for ``_backward``.

        Parameters
        ----------
        X : Tensor (B, L, d_x)
            Token sequences (not validated).
        h : Tensor (c, d_omega)
            A chunk of heads (not validated).

        Returns
        -------
        out : Tensor (c, B, L, d_x)
            Each head's output; ``out @ W_out`` is its feature map :math:`\psi(X;\omega)` (7).
        cache : tuple of Tensor
            ``(Q, K, V, A, AV, W_O)``: the projections ``Q, K, V (c, B, L, d_k)``, the causal
            attention matrices ``A (c, B, L, L)`` (rows on the simplex, zero above the diagonal),
            their product ``AV (c, B, L, d_k)`` and the output projections ``W_O (c, d_k, d_x)``.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, _ = example()
        >>> out, (Q, K, V, A, AV, W_O) = model.forward(data.X, heads)
        >>> out.shape, Q.shape, A.shape
        (torch.Size([5, 4, 3, 3]), torch.Size([5, 4, 3, 2]), torch.Size([5, 4, 3, 3]))
        >>> bool(torch.allclose(A.sum(-1), torch.ones_like(A[..., 0])))  # rows on the simplex
        True
        >>> bool((A.triu(1) == 0).all())  # causal: no weight on later positions
        True
        >>> bool(torch.allclose(out @ model.W_out, model.features(data.X, heads)))
        True
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
        if self._fast(X, heads, weights):
            return self.reduce(self._kernels.head_sum(X, heads, weights, self.d_k))
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
        r"""Residual ``softmax(z^rho) - Y`` pulled back through ``W_out``: (n, L, d_x).

        No validation; ``z^rho`` are the logits (8) of the measure.

        Parameters
        ----------
        X : Tensor (n, L, d_x), the model's dtype and device
            Token sequences: the dataset's, or a minibatch of them.
        Y : Tensor (n, L, d_v)
            Their label distributions.
        heads : Tensor (N, d_omega)
            The atoms :math:`\omega_i` of the measure :math:`\rho`.
        weights : Tensor (N,)
            Their weights, on the simplex (no default here: see
            :meth:`~mfattn.models.particles.ParticleModel.check_measure`).

        Returns
        -------
        Tensor (n, L, d_x)
            :math:`(\mathrm{softmax}(z^\rho) - Y)\,W_\mathrm{out}^\top`, not yet divided by ``n L``.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import teacher_task
        >>> task = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)
        >>> X, Y = task.data.X, task.data.Y
        >>> r = task.model.pullback(X, Y, task.teacher_heads, task.teacher_weights)
        >>> r.shape, float(r.abs().max()) < 1e-12  # the teacher fits its own soft labels
        (torch.Size([4, 3, 3]), True)
        """
        return self._residual(self._logits(X, heads, weights), Y)

    def _residual(self, z, Y) -> torch.Tensor:
        """``(softmax(z) - Y) W_out^T`` for logits ``z (n, L, d_v)``: the residual of (11) in model space."""
        return (torch.softmax(z, dim=-1) - Y) @ self.W_out.T

    def grad_phi(self, X, Y, heads, weights, query=None) -> torch.Tensor:
        r"""``grad Phi(query; rho)`` averaged over the sequences ``(X, Y)``; no validation.

        The hot path of SGD (19) and of the characteristics (21) in :mod:`mfattn.flows.dynamics`.

        Parameters
        ----------
        X : Tensor (n, L, d_x), the model's dtype and device
            Token sequences: the dataset's, or a minibatch of them.
        Y : Tensor (n, L, d_v)
            Their label distributions.
        heads : Tensor (N, d_omega)
            The atoms :math:`\omega_i` of the measure :math:`\rho`.
        weights : Tensor (N,)
            Their weights, on the simplex (no default here: see
            :meth:`~mfattn.models.particles.ParticleModel.check_measure`).
        query : Tensor (M, d_omega), optional
            Where to evaluate the gradient. Default: ``heads``, through :meth:`evaluate`.

        Returns
        -------
        Tensor (M, d_omega)
            :math:`\nabla_\omega\Phi(q_j;\rho)` (13) at each query; ``(N, d_omega)`` by default.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, w = example()
        >>> grad = model.grad_phi(data.X, data.Y, heads, w)
        >>> grad.shape
        torch.Size([5, 24])
        >>> bool(torch.allclose(grad, model.grad_first_variation(data, heads, heads, w)))
        True
        >>> q = heads[:2] + 0.1
        >>> grad_q = model.grad_phi(data.X, data.Y, heads, w, q)
        >>> bool(torch.allclose(grad_q, model.grad_first_variation(data, q, heads, w)))
        True
        """
        if query is None:  # at the measure's own atoms: one head pass when everything fits in one chunk
            return self.evaluate(X, Y, heads, weights, risk=False)[2]
        G = self.pullback(X, Y, heads, weights) / (X.shape[0] * X.shape[1])
        return self.grad_at(X, G, query)

    def risk_and_dissipation(self, X, Y, heads, weights, *, dissipation: bool = True):
        r"""Risk (10) and, when asked, dissipation (38) of a measure (one head pass when the measure fits
        in one chunk, see :meth:`evaluate`);
        no validation. Used by :meth:`risk`, :meth:`dissipation` and the recorders of
        :mod:`mfattn.flows.dynamics`.

        Parameters
        ----------
        X : Tensor (n, L, d_x), the model's dtype and device
            Token sequences: the dataset's, or a minibatch of them.
        Y : Tensor (n, L, d_v)
            Their label distributions.
        heads : Tensor (N, d_omega)
            The atoms :math:`\omega_i` of the measure :math:`\rho`.
        weights : Tensor (N,)
            Their weights, on the simplex (no default here: see
            :meth:`~mfattn.models.particles.ParticleModel.check_measure`).
        dissipation : bool, optional
            Whether to compute the dissipation too (one backward pass). Default: True.

        Returns
        -------
        risk : Tensor ()
            The risk (10).
        dissipation : Tensor () or None
            The dissipation (38), or None when ``dissipation`` is False.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, w = example()
        >>> risk, diss = model.risk_and_dissipation(data.X, data.Y, heads, w)
        >>> bool(torch.allclose(risk, model.risk(data, heads)))
        True
        >>> bool(torch.allclose(diss, model.dissipation(data, heads)))
        True
        >>> model.risk_and_dissipation(data.X, data.Y, heads, w, dissipation=False)[1] is None
        True
        """
        if not dissipation:
            return cross_entropy(Y, self._logits(X, heads, weights)).mean(), None
        risk, _, g, _ = self.evaluate(X, Y, heads, weights)
        return risk, self.weighted_sq_norm(weights, g)

    def evaluate(self, X, Y, heads, weights, *, phi: bool = False, risk: bool = True):
        r"""Risk (10), the scaled pulled-back residual ``G = (softmax z^rho - Y) W_out^T / (n L)``,
        ``grad Phi(omega_i; rho)`` (13) at the measure's own atoms and, with ``phi``, ``Phi(omega_i; rho)``
        (11); no validation. Returns ``(risk, G, grad, phi or None)``.

        When heads and samples fit in one chunk, the forward pass that gives the logits is reused
        for the backward pass and ``Phi`` (one head pass instead of two or three); otherwise the
        streamed routines are called. The hot path of the characteristics (21) in
        :mod:`mfattn.flows.dynamics` and of the local solvers of :mod:`mfattn.analysis.static`.

        Parameters
        ----------
        X : Tensor (n, L, d_x), the model's dtype and device
            Token sequences: the dataset's, or a minibatch of them.
        Y : Tensor (n, L, d_v)
            Their label distributions.
        heads : Tensor (N, d_omega)
            The atoms :math:`\omega_i` of the measure :math:`\rho`.
        weights : Tensor (N,)
            Their weights, on the simplex (no default here: see
            :meth:`~mfattn.models.particles.ParticleModel.check_measure`).
        phi : bool, optional
            Whether to return :math:`\Phi(\omega_i;\rho)` too. Default: False.
        risk : bool, optional
            Whether to compute the risk; False skips it where only the gradient is wanted (a
            single-sequence step: 6-14 % of the call). Default: True.

        Returns
        -------
        risk : Tensor () or None
            The risk (10), None with ``risk=False``.
        G : Tensor (n, L, d_x)
            The residual :meth:`pullback` divided by ``n L``.
        grad : Tensor (N, d_omega)
            :math:`\nabla_\omega\Phi(\omega_i;\rho)` (13).
        phi : Tensor (N,) or None
            :math:`\Phi(\omega_i;\rho)` (11) with ``phi``, else None.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, w = example()
        >>> risk, G, grad, phi = model.evaluate(data.X, data.Y, heads, w, phi=True)
        >>> risk.shape, G.shape, grad.shape, phi.shape
        (torch.Size([]), torch.Size([4, 3, 3]), torch.Size([5, 24]), torch.Size([5]))
        >>> bool(torch.allclose(G, model.pullback(data.X, data.Y, heads, w) / (4 * 3)))
        True
        >>> from mfattn.models.model import HeadModel
        >>> streamed = HeadModel(model.W_out, 2, chunk_size=2, sample_chunk=1)  # the streamed path
        >>> bool(torch.allclose(streamed.evaluate(data.X, data.Y, heads, w, phi=True)[3], phi))
        True
        """
        B, L, _ = X.shape
        if self._fast(X, heads, weights):  # one fused pass for the logits, one for grad Phi and Phi
            z = self.reduce(self._kernels.head_sum(X, heads, weights, self.d_k)) @ self.W_out
            G = self._residual(z, Y) / (B * L)
            grad, p = self._kernels.head_pass(X, G, heads, self.d_k)
            return cross_entropy(Y, z).mean() if risk else None, G, grad, p if phi else None
        sb, hb = self.chunks(B, heads.shape[0], L)
        if sb < B or hb < heads.shape[0]:
            z = self._logits(X, heads, weights)
            G = self._residual(z, Y) / (B * L)
            return (cross_entropy(Y, z).mean() if risk else None, G, self.grad_at(X, G, heads),
                    self.phi_at(X, G, heads) if phi else None)
        out, cache = self.forward(X, heads)
        z = self.reduce(torch.einsum("c,cblx->blx", weights, out)) @ self.W_out
        G = self._residual(z, Y) / (B * L)
        p = torch.einsum("cblx,blx->c", out, G) if phi else None
        return cross_entropy(Y, z).mean() if risk else None, G, self._backward(X, G, cache, False), p

    def risk_grad_phi(self, X, Y, heads, weights):
        r"""Risk (10), ``grad Phi(omega_i; rho)`` (13) and ``Phi(omega_i; rho)`` (11) at the measure's own
        atoms (see :meth:`evaluate`), for the local solvers of :mod:`mfattn.analysis.static`; no validation.

        Parameters
        ----------
        X : Tensor (n, L, d_x), the model's dtype and device
            Token sequences: the dataset's, or a minibatch of them.
        Y : Tensor (n, L, d_v)
            Their label distributions.
        heads : Tensor (N, d_omega)
            The atoms :math:`\omega_i` of the measure :math:`\rho`.
        weights : Tensor (N,)
            Their weights, on the simplex (no default here: see
            :meth:`~mfattn.models.particles.ParticleModel.check_measure`).

        Returns
        -------
        risk : Tensor ()
            The risk (10).
        grad : Tensor (N, d_omega)
            :math:`\nabla_\omega\Phi(\omega_i;\rho)` (13).
        phi : Tensor (N,)
            :math:`\Phi(\omega_i;\rho)` (11).

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, w = example()
        >>> risk, grad, phi = model.risk_grad_phi(data.X, data.Y, heads, w)
        >>> grad.shape, bool(torch.allclose(phi, model.first_variation(data, heads, heads, w)))
        (torch.Size([5, 24]), True)
        """
        risk, _, grad, phi = self.evaluate(X, Y, heads, weights, phi=True)
        return risk, grad, phi

    def prepare(self, data, heads, weights, query=None, *, per_sample: bool = False):
        r"""Validate the arguments; return (data, query, heads, weights, G) with ``G`` the pulled-back
        residual scaled by ``1/(n L)`` (the E_X average of (11)), or by ``1/L`` when ``per_sample``.

        Parameters
        ----------
        data : Dataset
            Sequences ``X (n, L, d_x)`` and labels ``Y (n, L, d_v)``.
        heads : Tensor (N, d_omega)
            The atoms of :math:`\rho`.
        weights : Tensor (N,) or None
            Their weights, on the simplex; None for uniform weights ``1/N``.
        query : Tensor (M, d_omega), optional
            Query heads. Default: ``heads``.
        per_sample : bool, optional
            Scale ``G`` by ``1/L`` instead of ``1/(n L)``. Default: False.

        Returns
        -------
        tuple
            ``(data, query, heads, weights, G)``: the validated arguments (``weights`` filled in,
            ``query`` set), and ``G (n, L, d_x)``.

        Raises
        ------
        ValueError
            Naming the first argument that fails its check.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, _ = example()
        >>> data_, query, heads_, w, G = model.prepare(data, heads, None)
        >>> query is heads, w.tolist(), G.shape
        (True, [0.2, 0.2, 0.2, 0.2, 0.2], torch.Size([4, 3, 3]))
        """
        data = self.check_data(data)
        heads, weights = self.check_measure(heads, weights)
        query = heads if query is None else self.check_heads(query, "query")
        G = self.pullback(data.X, data.Y, heads, weights) / (data.L if per_sample else data.n * data.L)
        return data, query, heads, weights, G

    def phi_at(self, X, G, query) -> torch.Tensor:
        r""":math:`\Phi(q_j;\rho)`, eq. (11), at query heads for a frozen residual ``G``.

        No validation.

        :math:`\Phi(q;\rho)` is the sum over sequences and positions of
        :math:`\langle G, \mathrm{out}_q(X)\rangle`, with ``out`` the head output of :meth:`forward`;
        streamed over chunks of sequences and of query heads.

        Parameters
        ----------
        X : Tensor (n, L, d_x), the model's dtype and device
            Token sequences.
        G : Tensor (n, L, d_x)
            The residual of :math:`\rho` scaled by ``1/(n L)``, from :meth:`evaluate` or :meth:`prepare`.
        query : Tensor (M, d_omega)
            Query heads.

        Returns
        -------
        Tensor (M,)
            :math:`\Phi(q_j;\rho)` at each query.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, w = example()
        >>> G = model.evaluate(data.X, data.Y, heads, w)[1]
        >>> q = heads[:2] + 0.1
        >>> phi = model.phi_at(data.X, G, q)
        >>> phi.shape, bool(torch.allclose(phi, model.first_variation(data, q, heads, w)))
        (torch.Size([2]), True)
        """
        if self._fast(X, G, query):
            return self._kernels.head_pass(X, G, query, self.d_k, grad=False)[1]
        B, L, _ = X.shape
        sb, hb = self.chunks(B, query.shape[0], L)
        phi = X.new_zeros(query.shape[0])
        for s in blocks(B, sb):
            for h in blocks(query.shape[0], hb):
                out, _ = self.forward(X[s], query[h])
                phi[h] += torch.einsum("cblx,blx->c", out, G[s])
        return phi

    def grad_at(self, X, G, query, per_sample: bool = False) -> torch.Tensor:
        r""":math:`\nabla_\omega\Phi(q_j;\rho)`, eq. (13), at query heads for a frozen residual ``G``.

        No validation. The hand-written backward pass of the head, streamed over chunks of sequences and of query
        heads: the hot path of the tagged characteristics (21) and of the local solvers.

        Parameters
        ----------
        X : Tensor (n, L, d_x), the model's dtype and device
            Token sequences.
        G : Tensor (n, L, d_x)
            The residual of :math:`\rho` scaled by ``1/(n L)`` (from :meth:`evaluate` or
            :meth:`prepare`), or by ``1/L`` with ``per_sample``.
        query : Tensor (M, d_omega)
            Query heads.
        per_sample : bool, optional
            Keep one gradient per sequence instead of their sum. Default: False.

        Returns
        -------
        Tensor (M, d_omega)
            :math:`\nabla_\omega\Phi(q_j;\rho)`; with ``per_sample``, ``(n, M, d_omega)``, the terms
            of :meth:`per_sample_grad_first_variation`.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, w = example()
        >>> G = model.evaluate(data.X, data.Y, heads, w)[1]
        >>> q = heads[:2] + 0.1
        >>> grad = model.grad_at(data.X, G, q)
        >>> grad.shape, bool(torch.allclose(grad, model.grad_first_variation(data, q, heads, w)))
        (torch.Size([2, 24]), True)
        >>> per = model.grad_at(data.X, data.n * G, q, per_sample=True)  # G scaled by 1/L
        >>> per.shape, bool(torch.allclose(per.mean(0), grad))
        (torch.Size([4, 2, 24]), True)
        """
        if self._fast(X, G, query):
            return self._kernels.head_pass(X, G, query, self.d_k, per_sample=per_sample)[0]
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

        Parameters
        ----------
        X : Tensor (B, L, d_x), the model's dtype and device
            Token sequences.
        heads : Tensor (N, d_omega)
            Heads.

        Returns
        -------
        Tensor (N, B, L, d_v)
            :math:`\psi(X;\omega_i)` for each head ``i``.

        Raises
        ------
        ValueError
            If ``X`` or ``heads`` fails its check.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, w = example()  # uniform weights w = 0.2
        >>> F = model.features(data.X, heads)
        >>> F.shape
        torch.Size([5, 4, 3, 4])
        >>> bool(torch.allclose(torch.einsum("i,iblv->blv", w, F), model.logits(data.X, heads, w)))
        True
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

    def feature_energy(self, X: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        r"""Each head's feature energy: the mean of :math:`\psi(X;\omega_i)^2` (7) over sequences,
        positions and tokens, shape (N,).

        Equal to ``features(X, heads).pow(2).mean((1, 2, 3))`` without the (N, B, L, d_v) feature
        maps: on the CPU one fused pass (``fused.head_energy``, the quadratic form
        ``W_out W_out^T`` on each head's output), elsewhere the feature maps chunk by chunk.

        Parameters
        ----------
        X : Tensor (B, L, d_x), the model's dtype and device
            Token sequences.
        heads : Tensor (N, d_omega)
            Heads.

        Returns
        -------
        Tensor (N,)

        Raises
        ------
        ValueError
            If ``X`` or ``heads`` fails its check.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, _ = example()
        >>> e = model.feature_energy(data.X, heads)
        >>> bool(torch.allclose(e, model.features(data.X, heads).pow(2).mean((1, 2, 3)), rtol=1e-12, atol=0))
        True
        """
        X = self.check_X(X)
        heads = self.check_heads(heads)
        B, L, _ = X.shape
        if self._fast(X, heads) and hasattr(self._kernels, "head_energy"):
            return self._kernels.head_energy(X, heads, self.W_out @ self.W_out.T, self.d_k) / (B * L * self.d_v)
        hb = max(1, self.chunks(B, heads.shape[0], L)[1])
        return torch.cat([self.features(X, heads[h]).pow(2).mean((1, 2, 3)) for h in blocks(heads.shape[0], hb)])

    def mean_attention(self, X: torch.Tensor, heads: torch.Tensor, weights: torch.Tensor | None = None):
        r"""The head-averaged attention :math:`\sum_i w_i A_{\omega_i}(X)` of (5)-(6): (B, L, L).

        The attention pattern of the measure (chapter 09's figure of what the heads learn), streamed
        over head and sample chunks; each row lies on the simplex and is zero above the diagonal.

        Parameters
        ----------
        X : Tensor (B, L, d_x), the model's dtype and device
        heads : Tensor (N, d_omega)
        weights : Tensor (N,), optional
            On the simplex; default uniform, ``1/N``.

        Returns
        -------
        Tensor (B, L, L)

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, w = example()
        >>> A = model.mean_attention(data.X, heads, w)
        >>> bool(torch.allclose(A, torch.einsum("i,ibqk->bqk", w, model.forward(data.X, heads)[1][3])))
        True
        """
        X = self.check_X(X)
        heads, weights = self.check_measure(heads, weights)
        B, L, _ = X.shape
        sb, hb = self.chunks(B, heads.shape[0], L)
        acc = X.new_zeros(B, L, L)
        for s in blocks(B, sb):
            for h in blocks(heads.shape[0], hb):
                acc[s] += torch.einsum("c,cbqk->bqk", weights[h], self._attend(X[s], heads[h])[3])
        return self.reduce(acc)

    def logits(self, X: torch.Tensor, heads: torch.Tensor, weights: torch.Tensor | None = None):
        r"""Mean-field logits :math:`z^\rho(X)=\sum_i w_i\psi(X;\omega_i)`, eq. (8): (B, L, d_v).

        Parameters
        ----------
        X : Tensor (B, L, d_x), the model's dtype and device
            Token sequences.
        heads : Tensor (N, d_omega)
            The atoms :math:`\omega_i` of :math:`\rho`.
        weights : Tensor (N,), optional
            Their weights, on the simplex. Default: uniform, ``1/N``.

        Returns
        -------
        Tensor (B, L, d_v)
            The logits :math:`z^\rho(X)` at every position.

        Raises
        ------
        ValueError
            If an argument fails its check.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import teacher_task
        >>> task = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)
        >>> z = task.model.logits(task.data.X, task.teacher_heads)
        >>> z.shape, bool(torch.allclose(torch.softmax(z, -1), task.data.Y))  # the teacher's labels
        (torch.Size([4, 3, 4]), True)
        """
        X = self.check_X(X)
        heads, weights = self.check_measure(heads, weights)
        return self._logits(X, heads, weights)

    def risk(self, data: Dataset, heads: torch.Tensor, weights: torch.Tensor | None = None):
        r"""Cross-entropy risk :math:`\mathcal E(\rho)`, eq. (10): 0-dim tensor.

        ``E_X`` is the average over ``data``; log-sum-exp keeps it stable for large logits.

        Parameters
        ----------
        data : Dataset
            Sequences ``X (n, L, d_x)`` and labels ``Y (n, L, d_v)``, the model's dtype and device.
        heads : Tensor (N, d_omega)
            The atoms :math:`\omega_i` of :math:`\rho`.
        weights : Tensor (N,), optional
            Their weights, on the simplex. Default: uniform, ``1/N``.

        Returns
        -------
        Tensor ()
            The mean over sequences and positions of the cross-entropy (9) of the logits (8).

        Raises
        ------
        ValueError
            If an argument fails its check.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example, teacher_task
        >>> task = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)  # example()'s task and its teacher
        >>> model, data, heads, _ = example()
        >>> round(float(model.risk(data, task.teacher_heads)), 4), round(task.optimal_risk, 4)
        (1.2685, 1.2685)
        >>> bool(model.risk(data, heads) > task.optimal_risk)
        True
        """
        data = self.check_data(data)
        heads, weights = self.check_measure(heads, weights)
        return self.risk_and_dissipation(data.X, data.Y, heads, weights, dissipation=False)[0]

    def first_variation(self, data: Dataset, query, heads, weights=None) -> torch.Tensor:
        r"""First variation :math:`\Phi(\omega;\rho)`, eq. (11), at each query head: (M,).

        ``rho`` is the measure of ``heads`` with ``weights``; ``query (M, d_omega)``.

        Parameters
        ----------
        data : Dataset
            Sequences and labels over which ``E_X`` averages.
        query : Tensor (M, d_omega)
            Where to evaluate :math:`\Phi`.
        heads : Tensor (N, d_omega)
            The atoms of :math:`\rho`.
        weights : Tensor (N,), optional
            Their weights, on the simplex. Default: uniform, ``1/N``.

        Returns
        -------
        Tensor (M,)
            :math:`\Phi(q_j;\rho)` at each query.

        Examples
        --------
        The risk of :math:`(1-t)\rho + t\delta_q` has slope
        :math:`\Phi(q;\rho) - \int\Phi(\omega;\rho)\,\rho(d\omega)` at ``t = 0``:

        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, _ = example()
        >>> q = heads[:1] + 0.5
        >>> phi_q = model.first_variation(data, q, heads)[0]
        >>> phi_rho = model.first_variation(data, heads, heads).mean()  # uniform weights
        >>> t = 1e-6
        >>> mix = torch.tensor([(1 - t) / 5] * 5 + [t], dtype=torch.float64)
        >>> slope = (model.risk(data, torch.cat([heads, q]), mix) - model.risk(data, heads)) / t
        >>> abs(float(slope - (phi_q - phi_rho))) < 1e-4
        True
        """
        data, query, _, _, G = self.prepare(data, heads, weights, query)
        return self.phi_at(data.X, G, query)

    def grad_first_variation(self, data: Dataset, query, heads, weights=None) -> torch.Tensor:
        r""":math:`\nabla_\omega\Phi(\omega;\rho)`, eq. (13), at each query head: (M, d_omega).

        Parameters
        ----------
        data : Dataset
            Sequences and labels over which ``E_X`` averages.
        query : Tensor (M, d_omega)
            Where to evaluate the gradient.
        heads : Tensor (N, d_omega)
            The atoms of :math:`\rho`.
        weights : Tensor (N,), optional
            Their weights, on the simplex. Default: uniform, ``1/N``.

        Returns
        -------
        Tensor (M, d_omega)
            :math:`\nabla_\omega\Phi(q_j;\rho)`, from the hand-written backward pass.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, _ = example()
        >>> q = (heads[:2] + 0.1).requires_grad_()
        >>> (auto,) = torch.autograd.grad(model.first_variation(data, q, heads).sum(), q)
        >>> grad = model.grad_first_variation(data, q.detach(), heads)
        >>> grad.shape, bool(torch.allclose(grad, auto))
        (torch.Size([2, 24]), True)
        """
        data, query, _, _, G = self.prepare(data, heads, weights, query)
        return self.grad_at(data.X, G, query)

    def per_sample_grad_first_variation(self, data: Dataset, query, heads, weights=None):
        r"""Per-sequence terms of (13): ``g[b, i] = (1/L) sum_l grad psi_l(X_b; q_i)^T r_l(X_b)``.

        Shape (n, M, d_omega); their mean over ``b`` is :meth:`grad_first_variation`, and
        ``-g[b]`` at ``query = heads`` is the stochastic gradient ``G_i`` of (17) on sample ``b``.

        Parameters
        ----------
        data : Dataset
            The sequences ``X_b`` and their labels.
        query : Tensor (M, d_omega)
            Query heads ``q_i``.
        heads : Tensor (N, d_omega)
            The atoms of :math:`\rho`.
        weights : Tensor (N,), optional
            Their weights, on the simplex. Default: uniform, ``1/N``.

        Returns
        -------
        Tensor (n, M, d_omega)
            ``g[b, i]``, one gradient per sequence and query.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, _ = example()
        >>> g = model.per_sample_grad_first_variation(data, heads, heads)
        >>> g.shape, bool(torch.allclose(g.mean(0), model.grad_first_variation(data, heads, heads)))
        (torch.Size([4, 5, 24]), True)
        >>> bool(torch.allclose(-g[2], model.stochastic_gradient(data.subset([2]), heads)))
        True
        """
        data, query, _, _, G = self.prepare(data, heads, weights, query, per_sample=True)
        return self.grad_at(data.X, G, query, per_sample=True)

    def stochastic_gradient(self, sample: Dataset, heads, weights=None) -> torch.Tensor:
        r"""Stochastic gradient :math:`G_i(\omega^k; X^{k+1})`, eq. (17): (N, d_omega).

        ``sample`` holds the drawn sequence(s) (one sequence is the paper's SGD; several
        average, i.e. a minibatch). Its conditional mean is ``-grad Phi(omega_i; rho)`` (18).

        Parameters
        ----------
        sample : Dataset
            The drawn sequence(s) ``X^{k+1}`` with their labels.
        heads : Tensor (N, d_omega)
            The heads :math:`\omega^k_i`, the atoms of :math:`\rho`.
        weights : Tensor (N,), optional
            Their weights, on the simplex. Default: uniform, ``1/N``.

        Returns
        -------
        Tensor (N, d_omega)
            :math:`G_i` for each head, i.e. ``-grad Phi(omega_i; rho)`` on ``sample``.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, _ = example()
        >>> model.stochastic_gradient(data.subset([0]), heads).shape
        torch.Size([5, 24])
        >>> one_by_one = [model.stochastic_gradient(data.subset([b]), heads) for b in range(4)]
        >>> mean = sum(one_by_one) / 4
        >>> bool(torch.allclose(mean, -model.grad_first_variation(data, heads, heads)))  # (18)
        True
        """
        return -self.grad_first_variation(sample, heads, heads, weights)

    def dissipation(self, data: Dataset, heads, weights=None) -> torch.Tensor:
        r"""Dissipation :math:`\mathcal I(\rho)=\int\|\nabla\Phi(\omega;\rho)\|^2\rho(d\omega)`, eq. (38).

        Parameters
        ----------
        data : Dataset
            Sequences and labels over which ``E_X`` averages.
        heads : Tensor (N, d_omega)
            The atoms :math:`\omega_i` of :math:`\rho`.
        weights : Tensor (N,), optional
            Their weights :math:`w_i`, on the simplex. Default: uniform, ``1/N``.

        Returns
        -------
        Tensor ()
            :math:`\sum_i w_i\|\nabla_\omega\Phi(\omega_i;\rho)\|^2`.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example, teacher_task
        >>> task = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)  # example()'s task and its teacher
        >>> model, data, heads, w = example()
        >>> grad = model.grad_first_variation(data, heads, heads, w)
        >>> bool(torch.allclose(model.dissipation(data, heads, w), (w * (grad**2).sum(-1)).sum()))
        True
        >>> float(model.dissipation(data, task.teacher_heads)) < 1e-20  # the teacher is stationary
        True
        """
        data = self.check_data(data)
        heads, weights = self.check_measure(heads, weights)
        return self.risk_and_dissipation(data.X, data.Y, heads, weights)[1]

    def hessian_first_variation(self, data: Dataset, omega, heads, weights=None) -> torch.Tensor:
        r"""Hessian in omega of :math:`\Phi(\omega;\rho)` with rho frozen: (d_omega, d_omega).

        With ``heads = omega[None]`` this is :math:`H_0` of eq. (50). Computed by autograd of
        the head map (one head; not a hot path).

        Parameters
        ----------
        data : Dataset
            Sequences and labels over which ``E_X`` averages.
        omega : Tensor (d_omega,)
            The head at which to differentiate.
        heads : Tensor (N, d_omega)
            The atoms of :math:`\rho`.
        weights : Tensor (N,), optional
            Their weights, on the simplex. Default: uniform, ``1/N``.

        Returns
        -------
        Tensor (d_omega, d_omega)
            :math:`\nabla^2_\omega\Phi(\omega;\rho)`, symmetric.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, _ = example()
        >>> omega, v, eps = heads[0], heads[1], 1e-5
        >>> H = model.hessian_first_variation(data, omega, heads)
        >>> grad_phi = lambda om: model.grad_first_variation(data, om[None], heads)[0]
        >>> fd = (grad_phi(omega + eps * v) - grad_phi(omega - eps * v)) / (2 * eps)
        >>> H.shape, bool(torch.allclose(H, H.T)), bool(torch.allclose(H @ v, fd, atol=1e-6))
        (torch.Size([24, 24]), True, True)
        """
        omega = self.check_omega(omega)
        data, _, _, _, G = self.prepare(data, heads, weights)
        return self._hessian_phi(data.X, G, omega)

    def check_omega(self, omega) -> torch.Tensor:
        """Validate one head ``omega (d_omega,)`` of the model's dtype and device, finite.

        Parameters
        ----------
        omega : Tensor (d_omega,)
            The head to check.

        Returns
        -------
        Tensor (d_omega,)
            ``omega`` itself.

        Raises
        ------
        ValueError
            Starting with ``omega``, if a check fails.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model = example().model
        >>> model.check_omega(torch.zeros(24, dtype=torch.float64)).shape
        torch.Size([24])
        >>> model.check_omega(torch.zeros(1, 24, dtype=torch.float64))
        Traceback (most recent call last):
            ...
        ValueError: omega: expected 1 dimensions, got shape (1, 24)
        """
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

        Parameters
        ----------
        data : Dataset
            Sequences and labels over which ``E_X`` averages.
        omega : Tensor (d_omega,)
            The head; :math:`H_0` and the softmax Jacobians are taken at the single-head measure
            :math:`\delta_\omega`.

        Returns
        -------
        Tensor (d_omega, d_omega)
            :math:`H_{tr}`, symmetric.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.tasks import example
        >>> model, data, heads, _ = example()
        >>> omega, v, eps = heads[0], heads[1], 1e-5
        >>> H = model.translation_hessian(data, omega)
        >>> # the gradient of the single-head risk at om is grad Phi(om; delta_om)
        >>> grad_risk = lambda om: model.grad_first_variation(data, om[None], om[None])[0]
        >>> fd = (grad_risk(omega + eps * v) - grad_risk(omega - eps * v)) / (2 * eps)
        >>> H.shape, bool(torch.allclose(H, H.T)), bool(torch.allclose(H @ v, fd, atol=1e-6))
        (torch.Size([24, 24]), True, True)
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


def require_heads(model, tool: str) -> "HeadModel":
    """``model`` itself when it is a :class:`HeadModel`; otherwise a ``ValueError`` naming ``model`` that says
    ``tool`` is specific to attention heads.

    The tools that read the head's parameter layout ``(W_Q, W_K, W_V)`` (the Dirac stability of
    chapter 05, the smoothness constants, the static minimisers and certificates of chapter 03 with their
    ball of heads) call it first; everything :mod:`mfattn.flows.integrate`, :mod:`mfattn.flows.dynamics`,
    :func:`mfattn.analysis.static.iid_construction` and :mod:`mfattn.analysis.longtime`'s fits need is on the
    :class:`~mfattn.models.particles.ParticleModel` protocol and runs on any model.

    Parameters
    ----------
    model : object
        The model passed to ``tool``.
    tool : str
        The tool's name, for the message.

    Returns
    -------
    HeadModel

    Raises
    ------
    ValueError
        Naming ``model`` when it is not a :class:`HeadModel`.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.model import require_heads
    >>> from mfattn.models.linear import LinearModel
    >>> require_heads(LinearModel(3), "certificate")
    Traceback (most recent call last):
    ...
    ValueError: model: certificate is specific to attention heads (mfattn.HeadModel), got a LinearModel; ...
    """
    if not isinstance(model, HeadModel):
        raise ValueError(f"model: {tool} is specific to attention heads (mfattn.HeadModel), got a "
                         f"{type(model).__name__}; the dynamics (mfattn.flows.integrate) and the i.i.d. construction "
                         f"(mfattn.analysis.static.iid_construction) run on any mfattn.models.particles.ParticleModel")
    return model
