"""Datasets of token sequences and next-token label distributions (paper section 2.3)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._checks import check_dim, check_simplex_rows, check_tensor


@dataclass(frozen=True)
class Dataset:
    """A finite dataset over which the expectations E_X of (10), (11), (13) are exact averages.

    Attributes
    ----------
    X : Tensor (n, L, d_x)
        Token sequences.
    Y : Tensor (n, L, d_v)
        Label distributions, one row per position on the probability simplex: one-hot rows
        are the paper's next-token labels, soft rows give a teacher's population risk.
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
        """The sequences at ``index`` (a slice, an int tensor or a list), as a new dataset."""
        return Dataset(self.X[index], self.Y[index])

    def to(self, device=None, dtype=None) -> "Dataset":
        return Dataset(self.X.to(device=device, dtype=dtype), self.Y.to(device=device, dtype=dtype))
