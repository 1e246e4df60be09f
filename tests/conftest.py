import mfattn  # noqa: F401  (first: it sets the OpenMP wait policy before torch loads its runtime)

import pytest
import torch

from mfattn import Dataset, HeadModel


def make_problem(dtype=torch.float64, *, n=6, L=5, d_x=3, d_k=2, d_v=4, N=7, seed=0, one_hot=False, fused=None):
    g = torch.Generator().manual_seed(seed)
    W_out = torch.randn(d_x, d_v, generator=g, dtype=torch.float64)
    X = torch.randn(n, L, d_x, generator=g, dtype=torch.float64)
    if one_hot:
        Y = torch.nn.functional.one_hot(torch.randint(d_v, (n, L), generator=g), d_v).double()
    else:
        Y = torch.softmax(2 * torch.randn(n, L, d_v, generator=g, dtype=torch.float64), -1)
    model = HeadModel(W_out, d_k, fused=fused)
    heads = 0.8 * torch.randn(N, model.d_omega, generator=g, dtype=torch.float64)
    w = torch.rand(N, generator=g, dtype=torch.float64) + 0.1
    w = w / w.sum()
    cast = lambda t: t.to(dtype)
    return model.to(dtype=dtype), Dataset(cast(X), cast(Y)), cast(heads), cast(w), g


@pytest.fixture(params=[False, True], ids=["torch-path", "fused-path"])
def problem(request):
    """The small float64 problem, on the torch head pass (the CUDA path) and on the fused CPU pass."""
    return make_problem(fused=request.param)


@pytest.fixture(scope="module")
def heads_task():
    """A small teacher task's model and data with six float64 heads: the steppers' oracle tests
    (tests/test_integrate.py, tests/test_optimizers.py)."""
    from mfattn.models.tasks import teacher_task

    task = teacher_task(n=8, L=4, d_x=3, d_k=2, d_v=4, seed=3)
    h0 = torch.randn(6, task.model.d_omega, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return task.model, task.data, h0
