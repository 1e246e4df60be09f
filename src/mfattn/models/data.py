"""Datasets of token sequences and next-token label distributions (paper section 2.3)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import check_dim, check_simplex_rows, check_tensor


@dataclass(frozen=True)
class Dataset:
    """A finite dataset over which the expectations E_X of (10), (11), (13) are exact averages.

    ``X`` and ``Y`` are checked on construction: floating tensors of one dtype and device, finite,
    with at least one sequence and one position, matching ``n`` and ``L``, and rows of ``Y`` on the
    simplex; otherwise ``ValueError`` names the argument. The dataset is frozen.

    Attributes
    ----------
    X : Tensor (n, L, d_x)
        Token sequences.
    Y : Tensor (n, L, d_v)
        Label distributions, one row per position on the probability simplex: one-hot rows
        are the paper's next-token labels, soft rows give a teacher's population risk.
    n : int
        Number of sequences (read-only, as are the next three); ``len(data)`` is ``n``.
    L : int
        Sequence length.
    d_x : int
        Token (model) dimension.
    d_v : int
        Vocabulary size, the length of a label row.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.data import Dataset
    >>> g = torch.Generator().manual_seed(0)
    >>> X = torch.randn(4, 3, 2, generator=g, dtype=torch.float64)
    >>> Y = torch.softmax(torch.randn(4, 3, 5, generator=g, dtype=torch.float64), dim=-1)
    >>> data = Dataset(X, Y)
    >>> len(data), data.n, data.L, data.d_x, data.d_v
    (4, 4, 3, 2, 5)
    >>> Dataset(X, 2 * Y)
    Traceback (most recent call last):
        ...
    ValueError: Y: rows must sum to one ...
    """

    X: torch.Tensor
    Y: torch.Tensor

    def __post_init__(self):
        check_tensor(self.X, "X", ndim=3)
        check_tensor(self.Y, "Y", ndim=3, dtype=self.X.dtype, device=self.X.device)
        if self.X.shape[0] < 1 or self.X.shape[1] < 1:
            raise ValueError(f"X: needs at least one sequence and one position, got {tuple(self.X.shape)}")
        check_dim(self.Y, "Y", 0, self.X.shape[0], "the number of sequences of X")
        check_dim(self.Y, "Y", 1, self.X.shape[1], "the sequence length of X")
        check_simplex_rows(self.Y, "Y")

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def L(self) -> int:
        return self.X.shape[1]

    @property
    def d_x(self) -> int:
        return self.X.shape[2]

    @property
    def d_v(self) -> int:
        return self.Y.shape[2]

    def __len__(self) -> int:
        return self.n

    def subset(self, index) -> "Dataset":
        """The sequences at ``index`` (a slice, an int tensor or a list), as a new dataset.

        Parameters
        ----------
        index : slice, int Tensor (m,) or list of int
            Which sequences to keep (any index of the first axis that keeps it, so not a bare
            ``int``); repeats are allowed, as in a minibatch drawn with replacement.

        Returns
        -------
        Dataset
            ``X[index]`` and ``Y[index]``, of shapes ``(m, L, d_x)`` and ``(m, L, d_v)``.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.data import Dataset
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.randn(4, 3, 2, generator=g, dtype=torch.float64)
        >>> Y = torch.softmax(torch.randn(4, 3, 5, generator=g, dtype=torch.float64), dim=-1)
        >>> data = Dataset(X, Y)
        >>> data.subset(slice(0, 2)).n
        2
        >>> batch = data.subset([3, 1, 3])
        >>> batch.X.shape, bool(torch.equal(batch.Y[1], data.Y[1]))
        (torch.Size([3, 3, 2]), True)
        """
        return Dataset(self.X[index], self.Y[index])

    def to(self, device=None, dtype=None) -> "Dataset":
        """The dataset moved to ``device`` and/or cast to ``dtype``, as a new dataset.

        Parameters
        ----------
        device : torch.device or str, optional
            Target device of ``X`` and ``Y``. Default: unchanged.
        dtype : torch.dtype, optional
            Target dtype, ``torch.float32`` or ``torch.float64``. Default: unchanged.

        Returns
        -------
        Dataset
            ``X`` and ``Y`` converted by ``torch.Tensor.to`` (and checked again), ready for a
            model of that dtype and device (see :meth:`mfattn.models.model.HeadModel.to`).

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.data import Dataset
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.randn(4, 3, 2, generator=g, dtype=torch.float64)
        >>> Y = torch.softmax(torch.randn(4, 3, 5, generator=g, dtype=torch.float64), dim=-1)
        >>> data32 = Dataset(X, Y).to(dtype=torch.float32)
        >>> data32.X.dtype, data32.Y.dtype, data32.X.device.type
        (torch.float32, torch.float32, 'cpu')
        """
        return Dataset(self.X.to(device=device, dtype=dtype), self.Y.to(device=device, dtype=dtype))
