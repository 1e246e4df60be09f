"""Input validation shared by every public function of the engine.

Every check raises :class:`ValueError` whose message starts with the name of the
offending argument, so that a bad call fails at the boundary with a readable
message instead of deep inside a broadcast or as a silent NaN.
"""

from __future__ import annotations

import math
from numbers import Real

import torch

FLOAT_DTYPES = (torch.float32, torch.float64)


def simplex_tol(dtype: torch.dtype, size: int) -> float:
    """Tolerance for "sums to one" in ``dtype`` over ``size`` terms."""
    return 64.0 * max(size, 1) * torch.finfo(dtype).eps


def check_tensor(
    x,
    name: str,
    *,
    ndim: int | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | None = None,
    finite: bool = True,
) -> torch.Tensor:
    """Check that ``x`` is a floating tensor of the given rank, dtype and device."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name}: expected float32 or float64, got {x.dtype}")
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(x.shape)}")
    if dtype is not None and x.dtype != dtype:
        raise ValueError(f"{name}: dtype {x.dtype} does not match the model's {dtype}")
    if device is not None and x.device != device:
        raise ValueError(f"{name}: on device {x.device}, the model is on {device}")
    if finite and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name}: contains non-finite values (nan or inf)")
    return x


def untraced(tensors, device_type: str) -> bool:
    """Whether every tensor is a float32/float64 tensor on a ``device_type`` device that no autograd,
    ``torch.func`` transform or forward-mode dual level is tracing: what the fused kernels take
    (:func:`mfattn.models.fused.plain` on ``"cpu"``, :func:`mfattn.models.fused_cuda.plain` on ``"cuda"``)."""
    from torch.autograd import forward_ad

    for t in tensors:
        if (t.requires_grad or t.device.type != device_type or t.dtype not in FLOAT_DTYPES
                or torch._C._functorch.is_functorch_wrapped_tensor(t) or forward_ad.unpack_dual(t).tangent is not None):
            return False
    return True


def check_dim(x: torch.Tensor, name: str, axis: int, size: int, what: str) -> None:
    if x.shape[axis] != size:
        raise ValueError(
            f"{name}: dimension {axis} has size {x.shape[axis]}, expected {what} = {size}"
        )


def check_simplex_rows(y: torch.Tensor, name: str) -> None:
    """Rows (last axis) must be probability vectors."""
    y = y.detach()
    tol = simplex_tol(y.dtype, y.shape[-1])
    if bool((y < -tol).any()):
        raise ValueError(f"{name}: has negative entries; rows must lie on the probability simplex")
    err = (y.sum(-1) - 1).abs().max() if y.numel() else torch.zeros(())
    if float(err) > tol:
        raise ValueError(
            f"{name}: rows must sum to one (largest deviation {float(err):.3g} > {tol:.3g})"
        )


def check_weights(weights, n: int, like: torch.Tensor, name: str = "weights") -> torch.Tensor:
    """Weights of an empirical measure: shape (n,), nonnegative, summing to one.

    ``None`` means the uniform weights ``1/n`` of the empirical measure (2).
    """
    if weights is None:
        return torch.full((n,), 1.0 / n, dtype=like.dtype, device=like.device)
    check_tensor(weights, name, ndim=1, dtype=like.dtype, device=like.device)
    check_dim(weights, name, 0, n, "the number of heads")
    check_simplex_rows(weights, name)
    return weights


def check_generator(generator) -> torch.Generator:
    """Every random draw takes an explicit, seeded ``torch.Generator``."""
    if not isinstance(generator, torch.Generator):
        raise ValueError("generator: expected a torch.Generator")
    return generator


def check_positive(x, name: str, *, integer: bool = False, allow_zero: bool = False) -> None:
    ok_type = isinstance(x, int) and not isinstance(x, bool) if integer else isinstance(x, Real)
    if not ok_type or isinstance(x, bool):
        kind = "an integer" if integer else "a real number"
        raise ValueError(f"{name}: expected {kind}, got {x!r}")
    if not math.isfinite(float(x)) or (x < 0 if allow_zero else x <= 0):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: must be finite and {bound}, got {x!r}")
