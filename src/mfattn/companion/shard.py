"""The launcher of sharded runs: SGD (19) or the reference flow (21) with the heads of
:class:`mfattn.models.distributed.ShardedHeadModel` spread over ``torchrun`` processes.

Two CPU processes, for example::

    torchrun --standalone --nproc-per-node 2 -m mfattn shard --task teacher --N 4096 --out run.pt

Rank 0 prints a JSON summary (world size, heads, steps, wall time, final risk) and saves the
gathered run. ``tests/test_distributed.py`` checks it against the single-process engine.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.distributed as dist

from ..models.distributed import ShardedHeadModel, gather_heads, init, shard_slice

__all__ = ["main"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", choices=["sgd", "flow"], default="sgd",
                   help="sgd: SGD (19); flow: the reference flow (21) by Runge-Kutta")
    p.add_argument("--task", default="teacher", help="teacher, markov or text (mfattn.models.tasks)")
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
    from ..flows.dynamics import reference_flow, sgd
    from ..models.tasks import make_task

    rank, world, dev = init(args.device)
    dtype = getattr(torch, args.dtype)
    task = make_task(args.task, n=args.n_data, seed=args.seed, dtype=dtype, device=dev)
    model = ShardedHeadModel.from_model(task.model)
    # every process draws the whole initial population from the same seed and keeps its slice
    g = torch.Generator().manual_seed(args.seed + 1)
    heads0 = args.init_scale * torch.randn(args.N, model.d_omega, generator=g, dtype=torch.float64)
    local0 = heads0[shard_slice(args.N, rank, world)].to(device=dev, dtype=dtype)
    every = args.record_every or args.T
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    sync()
    dist.barrier()
    t0 = time.perf_counter()
    if args.method == "sgd":
        run_ = sgd(model, task.data, local0, eps=args.step, T=args.T, record_every=every,
                   generator=torch.Generator().manual_seed(args.seed + 2),
                   batch_size=args.batch_size or None, progress=rank == 0)
    else:
        run_ = reference_flow(model, task.data, local0, T=args.T, step=args.step, record_every=every,
                              keep_stages=False, progress=rank == 0)
    sync()
    wall = time.perf_counter() - t0
    result = {"heads": gather_heads(run_.heads, args.N).cpu(), "risk": run_.risk, "wall_s": wall,
              "world": world, "N": args.N, "steps": round(args.T / args.step), "device": str(dev),
              "args": vars(args)}
    if rank == 0:
        if args.out:
            torch.save(result, args.out)
        summary = {**{k: result[k] for k in ("world", "N", "steps", "wall_s", "device")},
                   "risk_T": float(run_.risk[-1])}
        if dev.type == "cuda":
            summary["peak_gpu_bytes"] = torch.cuda.max_memory_allocated(dev)
        print(json.dumps(summary))
    dist.destroy_process_group()
    return result


def main(argv=None) -> int:
    """The launcher's command line, to be started with torchrun: ``-m mfattn.companion.shard`` runs
    it directly, and ``-m mfattn shard`` takes the same options.

    Parses the options (method, task, number of heads, step, horizon, device, dtype, output
    file; ``--help`` lists them), runs the sharded dynamics and destroys the process group;
    rank 0 prints a JSON summary and saves the gathered run to ``--out``.

    Parameters
    ----------
    argv : list of str, optional
        The command-line arguments; ``sys.argv[1:]`` when None.

    Returns
    -------
    int
        0, the exit status.

    Examples
    --------
    ``--help`` prints the options and exits before any process group is started:

    >>> from mfattn.companion.shard import main
    >>> try:
    ...     main(["--help"])
    ... except SystemExit as exit:
    ...     print("exit status", exit.code)
    usage: torchrun ... -m mfattn shard ...
    exit status 0
    """
    p = argparse.ArgumentParser(prog="torchrun ... -m mfattn shard", description=__doc__.splitlines()[0])  # noqa: E501
    add_arguments(p)
    run(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
