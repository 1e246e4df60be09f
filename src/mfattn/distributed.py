"""Heads sharded over processes with ``torch.distributed`` (gloo on CPUs, NCCL on GPUs).

Heads interact only through sums over the measure: the logits (8) ``z = sum_i w_i psi(X; omega_i)``
and the dissipation (38). So each process holds a contiguous slice of the heads (and of their
weights), computes its partial sum, and one all-reduce gives every process the same logits; the
pulled-back residual, the risk and the gradients of its own heads then follow locally, and each
process updates its own heads. Nothing else is communicated: one ``(n, L, d_x)`` all-reduce per
head pass. The seeded minibatch draws of :func:`mfattn.dynamics.sgd` happen identically on every
process (same generator, same seed), so the sharded run is the single-process run with the head
sum reordered.

Launch with torchrun, e.g. two CPU processes::

    torchrun --standalone --nproc-per-node 2 -m mfattn shard \\
        --task teacher --N 4096 --out run.pt

Used by the ``paper`` profiles that need more heads than one device holds; checked against the
single-process engine, step for step, in ``tests/test_distributed.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

from ._checks import check_positive, check_tensor, simplex_tol
from .model import HeadModel

__all__ = ["ShardedHeadModel", "init", "shard_slice", "gather_heads", "main"]


class ShardedHeadModel(HeadModel):
    """A :class:`~mfattn.model.HeadModel` whose every ``heads`` argument is this process's shard of
    one measure shared by the processes of ``group``.

    Weights default to ``1 / N`` with ``N`` the total number of heads over the group (the uniform
    empirical measure (2)); given weights must sum to one over the group. Every sum over heads (the
    logits (8), the dissipation (38)) is all-reduced, so every process sees the same logits, risk and
    residual. Each call is a collective: every process of the group must make the same calls in the
    same order. Quantities of a single head (``translation_hessian``) belong to a plain
    :class:`~mfattn.model.HeadModel`.
    """

    def __init__(self, W_out: torch.Tensor, d_k: int, *, group=None, **kwargs):
        super().__init__(W_out, d_k, **kwargs)
        if not dist.is_initialized():
            raise ValueError("group: torch.distributed is not initialised (call mfattn.distributed.init())")
        self.group = group

    @classmethod
    def from_model(cls, model: HeadModel, group=None) -> "ShardedHeadModel":
        return cls(model.W_out, model.d_k, group=group, chunk_size=model.chunk_size,
                   sample_chunk=model.sample_chunk, memory_budget=model.memory_budget)

    def to(self, device=None, dtype=None) -> "ShardedHeadModel":
        return ShardedHeadModel.from_model(super().to(device=device, dtype=dtype), self.group)

    def reduce(self, t: torch.Tensor) -> torch.Tensor:
        t = t.clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.group)
        return t

    def total_heads(self, local: int) -> int:
        n = torch.tensor([local], dtype=torch.int64, device=self.device)
        dist.all_reduce(n, group=self.group)
        return int(n)

    def check_weights(self, weights, heads):
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
    ``cuda``). Returns ``(rank, world_size, device)``; on CUDA each process takes the GPU of its local rank."""
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
    """The contiguous slice of ``N`` heads held by ``rank`` of ``world`` (sizes differ by at most one)."""
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
    process), in the order of :func:`shard_slice`. Uses padded ``all_gather`` (shards differ by at most one)."""
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


# ------------------------------------------------------------------------------- launcher
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", choices=["sgd", "flow"], default="sgd",
                   help="sgd: SGD (19); flow: the reference flow (21) by Runge-Kutta")
    p.add_argument("--task", default="teacher", help="teacher, markov or text (mfattn.tasks)")
    p.add_argument("--n-data", type=int, default=64, help="sequences in the dataset")
    p.add_argument("--N", type=int, default=1024, help="heads over all processes")
    p.add_argument("--init-scale", type=float, default=0.5, help="initial heads ~ N(0, s^2 I)")
    p.add_argument("--step", type=float, default=0.05, help="SGD eps, or the Runge-Kutta step")
    p.add_argument("--T", type=float, default=1.0, help="horizon (time t = k eps)")
    p.add_argument("--record-every", type=float, default=None, help="recording interval (default: T)")
    p.add_argument("--batch-size", type=int, default=1, help="SGD minibatch; 0: full batch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    p.add_argument("--out", default=None, help="rank 0 saves the gathered run here (torch.save)")


def run(args) -> dict:
    """Run ``args.method`` with the heads sharded over the torchrun processes; rank 0 returns and saves
    the gathered recorded heads, the risk and the wall time."""
    from .dynamics import reference_flow, sgd
    from .tasks import make_task

    rank, world, dev = init(args.device)
    dtype = getattr(torch, args.dtype)
    task = make_task(args.task, n=args.n_data, seed=args.seed, dtype=dtype, device=dev)
    model = ShardedHeadModel.from_model(task.model)
    # every process draws the whole initial population from the same seed and keeps its slice
    g = torch.Generator().manual_seed(args.seed + 1)
    heads0 = args.init_scale * torch.randn(args.N, model.d_omega, generator=g, dtype=torch.float64)
    mine = shard_slice(args.N, rank, world)
    local0 = heads0[mine].to(device=dev, dtype=dtype)
    every = args.record_every or args.T
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    if args.method == "sgd":
        run_ = sgd(model, task.data, local0, eps=args.step, T=args.T, record_every=every,
                   generator=torch.Generator().manual_seed(args.seed + 2),
                   batch_size=args.batch_size or None, progress=rank == 0)
        local_rec, risk = run_.heads, run_.risk
    else:
        flow = reference_flow(model, task.data, local0, T=args.T, step=args.step, record_every=every,
                              keep_stages=False, progress=rank == 0)
        local_rec, risk = flow.population, flow.risk
    if dev.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    heads = gather_heads(local_rec, args.N)
    result = {"heads": heads.cpu(), "risk": risk, "wall_s": wall, "world": world, "N": args.N,
              "steps": round(args.T / args.step), "device": str(dev), "args": vars(args)}
    if rank == 0:
        if args.out:
            torch.save(result, args.out)
        summary = {k: result[k] for k in ("world", "N", "steps", "wall_s", "device")}
        summary["risk_T"] = float(risk[-1])
        if dev.type == "cuda":
            summary["peak_gpu_bytes"] = torch.cuda.max_memory_allocated(dev)
        print(json.dumps(summary))
    dist.destroy_process_group()
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="torchrun ... -m mfattn shard", description=__doc__.splitlines()[0])
    add_arguments(p)
    run(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
