"""Heads sharded over processes with ``torch.distributed`` (gloo on CPUs, NCCL on GPUs).

Heads interact only through sums over the measure: the logits (8) ``z = sum_i w_i psi(X; omega_i)``
and the dissipation (38). So each process holds a contiguous slice of the heads (and of their
weights), computes its partial sum, and one all-reduce gives every process the same logits; the
pulled-back residual, the risk and the gradients of its own heads then follow locally, and each
process updates its own heads. The heavy communication is one ``(n, L, d_x)`` all-reduce per
head pass; besides it, scalars only (the head count for uniform weights, the weights' sum, the
dissipation). The seeded minibatch draws of :func:`mfattn.flows.dynamics.sgd` happen identically on every
process (same generator, same seed), so the sharded run is the single-process run with the head
sum reordered.

Launch with torchrun, e.g. two CPU processes (the launcher is ``mfattn.companion.shard``)::

    torchrun --standalone --nproc-per-node 2 -m mfattn shard \\
        --task teacher --N 4096 --out run.pt

Used by the ``paper`` profiles that need more heads than one device holds; checked against the
single-process engine, step for step, in ``tests/test_distributed.py``.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from .._checks import check_positive, check_tensor, simplex_tol
from .model import HeadModel

__all__ = ["ShardedHeadModel", "init", "shard_slice", "gather_heads"]


class ShardedHeadModel(HeadModel):
    """A :class:`~mfattn.models.model.HeadModel` whose every ``heads`` argument is this process's shard of
    one measure shared by the processes of ``group``.

    Weights default to ``1 / N`` with ``N`` the total number of heads over the group (the uniform
    empirical measure (2)); given weights must sum to one over the group. Every sum over heads (the
    logits (8), the dissipation (38)) is all-reduced, so every process sees the same logits, risk and
    residual. Each call is a collective: every process of the group must make the same calls in the
    same order. Quantities of a single head (``translation_hessian``) belong to a plain
    :class:`~mfattn.models.model.HeadModel`.

    Parameters
    ----------
    W_out : Tensor (d_x, d_v)
        Fixed vocabulary projection, the same on every process.
    d_k : int
        Head (query/key/value) dimension.
    group : ProcessGroup, optional
        The processes that share the measure; the default group when None.
    **kwargs
        ``chunk_size``, ``sample_chunk``, ``memory_budget`` of :class:`~mfattn.models.model.HeadModel`.

    Attributes
    ----------
    group : ProcessGroup or None
        The group of the all-reduces.

    Examples
    --------
    The model can only be built inside an initialised process group (under torchrun, after
    :func:`init`), so the lines marked ``+SKIP`` are not run as doctests. Launched on two
    processes, each holds half of a teacher's heads and gets the risk of the whole measure:

    >>> from mfattn.models.distributed import ShardedHeadModel, init, shard_slice
    >>> from mfattn.models.tasks import teacher_task
    >>> task = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, n_teacher=4, seed=0)
    >>> rank, world, device = init("cpu")  # doctest: +SKIP
    >>> model = ShardedHeadModel.from_model(task.model)  # doctest: +SKIP
    >>> local = task.teacher_heads[shard_slice(4, rank, world)]  # doctest: +SKIP
    >>> risk = model.risk(task.data, local)  # the same on every process  # doctest: +SKIP
    >>> abs(float(risk) - task.optimal_risk) < 1e-12  # doctest: +SKIP
    True

    In a process without a group, construction fails:

    >>> ShardedHeadModel.from_model(task.model)
    Traceback (most recent call last):
    ...
    ValueError: group: torch.distributed is not initialised (call mfattn.models.distributed.init())
    """

    def __init__(self, W_out: torch.Tensor, d_k: int, *, group=None, **kwargs):
        super().__init__(W_out, d_k, **kwargs)
        if not dist.is_initialized():
            raise ValueError("group: torch.distributed is not initialised (call mfattn.models.distributed.init())")
        self.group = group

    @classmethod
    def from_model(cls, model: HeadModel, group=None) -> "ShardedHeadModel":
        """The sharded version of a plain model: same ``W_out``, ``d_k`` and chunking settings.

        Parameters
        ----------
        model : HeadModel
            The single-process model.
        group : ProcessGroup, optional
            The processes that share the measure; the default group when None.

        Returns
        -------
        ShardedHeadModel
            Usable only inside an initialised process group (else ``ValueError``).

        Examples
        --------
        The lines marked ``+SKIP`` need an initialised process group (torchrun and :func:`init`):

        >>> from mfattn.models.distributed import ShardedHeadModel, init
        >>> from mfattn.models.tasks import example
        >>> plain = example().model
        >>> rank, world, device = init("cpu")  # doctest: +SKIP
        >>> model = ShardedHeadModel.from_model(plain)  # doctest: +SKIP
        >>> model.d_omega == plain.d_omega  # doctest: +SKIP
        True
        """
        return cls(model.W_out, model.d_k, group=group, chunk_size=model.chunk_size,
                   sample_chunk=model.sample_chunk, memory_budget=model.memory_budget)

    def to(self, device=None, dtype=None) -> "ShardedHeadModel":
        """The same sharded model with ``W_out`` moved to ``device`` and cast to ``dtype``.

        Parameters
        ----------
        device : str or torch.device, optional
            Target device; unchanged when None.
        dtype : torch.dtype, optional
            Target dtype; unchanged when None.

        Returns
        -------
        ShardedHeadModel
            A new model on the same ``group``.

        Examples
        --------
        The lines marked ``+SKIP`` need an initialised process group (torchrun and :func:`init`):

        >>> import torch
        >>> from mfattn.models.distributed import ShardedHeadModel, init
        >>> from mfattn.models.tasks import example
        >>> plain = example().model
        >>> rank, world, device = init("cpu")  # doctest: +SKIP
        >>> model = ShardedHeadModel.from_model(plain)  # doctest: +SKIP
        >>> model.to(dtype=torch.float32).dtype  # doctest: +SKIP
        torch.float32
        """
        return ShardedHeadModel.from_model(super().to(device=device, dtype=dtype), self.group)

    def reduce(self, t: torch.Tensor) -> torch.Tensor:
        """The sum of ``t`` over the processes of the group (an all-reduce of a copy).

        Every sum over heads (logits, dissipation) ends here, so each process gets the value of
        the whole measure. A collective: every process must call it.

        Parameters
        ----------
        t : Tensor, any shape
            This process's partial sum, on the model's device.

        Returns
        -------
        Tensor, the shape of ``t``
            The sum over the group, the same on every process; ``t`` is left unchanged.

        Examples
        --------
        The lines marked ``+SKIP`` need an initialised process group (torchrun and :func:`init`);
        on two processes:

        >>> import torch
        >>> from mfattn.models.distributed import ShardedHeadModel, init
        >>> from mfattn.models.tasks import example
        >>> plain = example().model
        >>> rank, world, device = init("cpu")  # doctest: +SKIP
        >>> model = ShardedHeadModel.from_model(plain)  # doctest: +SKIP
        >>> model.reduce(torch.tensor([1.0 + rank])).tolist()  # doctest: +SKIP
        [3.0]

        In one process the plain model's ``reduce`` is the identity:

        >>> plain.reduce(torch.tensor([1.0])).tolist()
        [1.0]
        """
        t = t.clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.group)
        return t

    def total_heads(self, local: int) -> int:
        """The number of heads over the group, from each process's count (an all-reduce).

        Parameters
        ----------
        local : int
            The number of heads held by this process.

        Returns
        -------
        int
            The total ``N``, the same on every process.

        Examples
        --------
        The lines marked ``+SKIP`` need an initialised process group (torchrun and :func:`init`);
        on two processes holding 3 and 2 heads:

        >>> from mfattn.models.distributed import ShardedHeadModel, init
        >>> from mfattn.models.tasks import example
        >>> plain = example().model
        >>> rank, world, device = init("cpu")  # doctest: +SKIP
        >>> model = ShardedHeadModel.from_model(plain)  # doctest: +SKIP
        >>> model.total_heads(3 - rank)  # doctest: +SKIP
        5
        """
        n = torch.tensor([local], dtype=torch.int64, device=self.device)
        dist.all_reduce(n, group=self.group)
        return int(n)

    def check_weights(self, weights, heads):
        """This shard's weights: uniform ``1 / N`` (``N`` over the group) when None, else validated.

        Given weights must be nonnegative, one per local head, and sum to one over the whole
        group (to the tolerance of the dtype); a ``ValueError`` says otherwise. A collective:
        every process must call it.

        Parameters
        ----------
        weights : Tensor (N_local,) or None
            This process's weights, of the dtype and device of ``heads``.
        heads : Tensor (N_local, d_omega)
            This process's shard of the heads.

        Returns
        -------
        Tensor (N_local,)
            The weights of the local heads.

        Examples
        --------
        The lines marked ``+SKIP`` need an initialised process group (torchrun and :func:`init`);
        on two processes holding 3 and 2 heads:

        >>> import torch
        >>> from mfattn.models.distributed import ShardedHeadModel, init
        >>> from mfattn.models.tasks import example
        >>> plain = example().model
        >>> rank, world, device = init("cpu")  # doctest: +SKIP
        >>> model = ShardedHeadModel.from_model(plain)  # doctest: +SKIP
        >>> heads = torch.zeros(3 - rank, model.d_omega, dtype=torch.float64)  # doctest: +SKIP
        >>> model.check_weights(None, heads).tolist()  # on rank 1  # doctest: +SKIP
        [0.2, 0.2]
        """
        if weights is None:
            N = self.total_heads(heads.shape[0])
            return torch.full((heads.shape[0],), 1.0 / N, dtype=heads.dtype, device=heads.device)
        check_tensor(weights, "weights", ndim=1, dtype=heads.dtype, device=heads.device)
        if weights.shape[0] != heads.shape[0]:
            raise ValueError(f"weights: {weights.shape[0]} weights for a shard of {heads.shape[0]} heads")
        if bool((weights < 0).any()):
            raise ValueError("weights: has negative entries")
        total = float(self.reduce(weights.sum()))
        N = self.total_heads(heads.shape[0])
        if abs(total - 1) > simplex_tol(heads.dtype, N):
            raise ValueError(f"weights: must sum to one over the whole group, got {total:.17g}")
        return weights


def init(device: str = "cpu") -> tuple[int, int, torch.device]:
    """Initialise the default process group from torchrun's environment (gloo for ``cpu``, NCCL for
    ``cuda``). Returns ``(rank, world_size, device)``; on CUDA each process takes the GPU of its local rank.

    An already initialised group is kept. Outside torchrun (``RANK`` unset) it raises ``ValueError``.

    Parameters
    ----------
    device : str
        ``"cpu"`` (gloo) or ``"cuda"`` (NCCL, one GPU per process, by ``LOCAL_RANK``).

    Returns
    -------
    rank : int
        This process's rank in the default group.
    world_size : int
        The number of processes.
    device : torch.device
        The device this process computes on.

    Examples
    --------
    It must run under torchrun, so the lines marked ``+SKIP`` are not run as doctests; on two
    CPU processes:

    >>> from mfattn.models.distributed import init
    >>> rank, world, device = init("cpu")  # doctest: +SKIP
    >>> world, device  # doctest: +SKIP
    (2, device(type='cpu'))
    """
    if "RANK" not in os.environ:
        raise ValueError("init: no torchrun environment (RANK unset); launch with torchrun")
    if device == "cuda":
        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
        backend = "nccl"
    elif device == "cpu":
        dev, backend = torch.device("cpu"), "gloo"
    else:
        raise ValueError(f"device: expected 'cpu' or 'cuda', got {device!r}")
    if not dist.is_initialized():
        dist.init_process_group(backend, device_id=dev if backend == "nccl" else None)
    return dist.get_rank(), dist.get_world_size(), dev


def shard_slice(N: int, rank: int, world: int) -> slice:
    """The contiguous slice of ``N`` heads held by ``rank`` of ``world`` (sizes differ by at most one).

    The first ``N mod world`` ranks hold one head more; the slices of ranks ``0, 1, ...`` follow
    each other and cover ``range(N)``. Pure arithmetic: no process group is needed.

    Parameters
    ----------
    N : int
        Total number of heads (``N >= world``).
    rank : int
        The process, ``0 <= rank < world``.
    world : int
        Number of processes.

    Returns
    -------
    slice
        The rows of the ``(N, d_omega)`` population that ``rank`` holds.

    Examples
    --------
    >>> from mfattn.models.distributed import shard_slice
    >>> [shard_slice(7, rank, 3) for rank in range(3)]
    [slice(0, 3, None), slice(3, 5, None), slice(5, 7, None)]
    """
    check_positive(N, "N", integer=True)
    check_positive(world, "world", integer=True)
    if not 0 <= rank < world:
        raise ValueError(f"rank: must lie in [0, {world}), got {rank}")
    if N < world:
        raise ValueError(f"N: {N} heads cannot be shared by {world} processes")
    q, r = divmod(N, world)
    start = rank * q + min(rank, r)
    return slice(start, start + q + (rank < r))


def gather_heads(local: torch.Tensor, N: int, group=None) -> torch.Tensor:
    """The whole ``(..., N, d)`` population from every process's ``(..., N_local, d)`` shard (on every
    process), in the order of :func:`shard_slice`. Uses padded ``all_gather`` (shards differ by at most one).

    A collective: every process of ``group`` must call it.

    Parameters
    ----------
    local : Tensor (..., N_local, d)
        This process's shard, ``N_local`` the size of its :func:`shard_slice`; any leading axes
        (e.g. recorded times) must agree over the processes.
    N : int
        Total number of heads.
    group : ProcessGroup, optional
        The processes; the default group when None.

    Returns
    -------
    Tensor (..., N, d)
        The whole population, the same on every process.

    Examples
    --------
    The lines marked ``+SKIP`` need an initialised process group (torchrun and :func:`init`).
    The gathered tensor is the concatenation of the shards in rank order:

    >>> import torch
    >>> from mfattn.models.distributed import gather_heads, init, shard_slice
    >>> heads = torch.arange(10.0).reshape(5, 2)
    >>> rank, world, device = init("cpu")  # doctest: +SKIP
    >>> torch.equal(gather_heads(heads[shard_slice(5, rank, world)], 5), heads)  # doctest: +SKIP
    True
    >>> torch.equal(torch.cat([heads[shard_slice(5, r, 2)] for r in range(2)]), heads)
    True
    """
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    size = shard_slice(N, rank, world)
    if local.shape[-2] != size.stop - size.start:
        raise ValueError(f"local: holds {local.shape[-2]} heads, shard {rank} of {N} has {size.stop - size.start}")
    width = shard_slice(N, 0, world).stop
    pad = torch.zeros(*local.shape[:-2], width, local.shape[-1], dtype=local.dtype, device=local.device)
    pad[..., : local.shape[-2], :] = local
    parts = [torch.empty_like(pad) for _ in range(world)]
    dist.all_gather(parts, pad.contiguous(), group=group)
    out = []
    for r, part in enumerate(parts):
        s = shard_slice(N, r, world)
        out.append(part[..., : s.stop - s.start, :])
    return torch.cat(out, dim=-2)
