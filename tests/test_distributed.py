"""Heads sharded over processes (mfattn.models.distributed): the sharded run is the single-process run.

The oracle is the plain single-process engine (HeadModel, dynamics.sgd / reference_flow) on the same
seeded task and initial heads; the sharded run only reorders the head sum, so the two agree to
round-off at every recorded step.
"""

import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from mfattn.models.distributed import ShardedHeadModel, gather_heads, shard_slice
from mfattn.flows.dynamics import reference_flow, sgd
from mfattn.models.tasks import make_task

from conftest import make_problem


def test_shard_slices_partition_the_heads():
    for N in (2, 3, 7, 64, 1001):
        for world in range(1, min(N, 5) + 1):
            parts = [shard_slice(N, r, world) for r in range(world)]
            assert parts[0].start == 0 and parts[-1].stop == N
            assert all(a.stop == b.start for a, b in zip(parts, parts[1:]))
            sizes = [p.stop - p.start for p in parts]
            assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError, match="N"):
        shard_slice(1, 0, 2)
    with pytest.raises(ValueError, match="rank"):
        shard_slice(8, 2, 2)


@pytest.fixture
def one_process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_one_process_group_is_the_plain_engine(one_process_group):
    model, data, heads, w, g = make_problem()
    sharded = ShardedHeadModel.from_model(model)
    torch.testing.assert_close(sharded.risk(data, heads, w), model.risk(data, heads, w), rtol=0, atol=0)
    torch.testing.assert_close(sharded.grad_first_variation(data, heads, heads, w),
                               model.grad_first_variation(data, heads, heads, w), rtol=0, atol=0)
    torch.testing.assert_close(sharded.dissipation(data, heads), model.dissipation(data, heads), rtol=0, atol=0)
    torch.testing.assert_close(gather_heads(heads, heads.shape[0]), heads, rtol=0, atol=0)
    with pytest.raises(ValueError, match="weights: must sum to one over the whole group"):
        sharded.risk(data, heads, 0.5 * w)
    with pytest.raises(ValueError, match="weights: 3 weights"):
        sharded.risk(data, heads, w[:3])


def _single_process(method, N, n_data, step, T, seed=0, init_scale=0.5):
    """The reference: the plain engine with every head in one process (the launcher's conventions)."""
    task = make_task("teacher", n=n_data, seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    heads0 = init_scale * torch.randn(N, task.model.d_omega, generator=g, dtype=torch.float64)
    if method == "sgd":
        run = sgd(task.model, task.data, heads0, eps=step, T=T, record_every=step,
                  generator=torch.Generator().manual_seed(seed + 2), batch_size=1, progress=False)
        return run.heads, run.risk
    flow = reference_flow(task.model, task.data, heads0, T=T, step=step, record_every=step,
                          keep_stages=False, progress=False)
    return flow.population, flow.risk


@pytest.mark.parametrize("method,N,step,T", [("sgd", 13, 0.05, 0.6), ("flow", 11, 0.1, 0.5)])
def test_two_processes_equal_one_process_step_for_step(tmp_path, method, N, step, T):
    out = tmp_path / "run.pt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "mfattn", "shard", "--method", method, "--N", str(N), "--n-data", "24",
           "--step", str(step), "--T", str(T), "--record-every", str(step), "--out", str(out)]
    # torchrun leaves its (empty) log folders in the temporary folder: this test's own
    env = dict(os.environ, OMP_NUM_THREADS="1", TQDM_DISABLE="1", TMPDIR=str(tmp_path))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = torch.load(out)
    assert got["world"] == 2
    heads, risk = _single_process(method, N, 24, step, T)
    assert got["heads"].shape == heads.shape == (round(T / step) + 1, N, heads.shape[-1])
    # every recorded step: the head sum is only reordered, so the runs agree to round-off
    torch.testing.assert_close(got["heads"], heads, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got["risk"], risk, rtol=1e-12, atol=1e-12)
    assert float((got["heads"][-1] - got["heads"][0]).abs().max()) > 1e-3  # the heads did move
