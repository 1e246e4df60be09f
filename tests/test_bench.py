"""The benchmark's implementations compute the engine's numbers, and its command writes its report.

The per-head SDPA loop and the naive batched pass are independent implementations of eqs. (5)-(10)
differentiated by autograd; in float64 they must give the engine's hand-written gradient to round-off.
Timings are not asserted (benchmarks are not tests).
"""

import json
import os
import subprocess
import sys

import pytest
import torch

from mfattn import bench, fused

from conftest import make_problem


@pytest.mark.parametrize("impl", ["naive", "loop", "engine", "fused"])
def test_baselines_equal_the_engine_in_float64(impl):
    if impl == "fused" and not fused.available():
        pytest.skip("numba not installed")
    model, data, heads, w, _ = make_problem(n=5, L=7, N=6)
    got = bench.GRADS[impl](model, data.X, data.Y, heads, w)
    torch.testing.assert_close(got, model.grad_first_variation(data, heads, heads, w), rtol=1e-10, atol=1e-12)


def test_flop_count_matches_the_products_of_one_head():
    # count the multiply-adds of the forward pass by hand for L = 3, d_x = 2, d_k = 1
    L, d_x, d_k = 3, 2, 1
    fwd = 3 * (L * d_x * d_k) + L * L * d_k + L * L * d_k + L * d_k * d_x  # multiply-adds
    assert bench.flop_count(L, d_x, d_k) == 3 * 2 * fwd


def test_bench_command_writes_json_table_and_plot(tmp_path):
    cmd = [sys.executable, "-m", "mfattn", "bench", "--Ns", "4,8", "--repeats", "1", "--n-data", "3",
           "--no-compile-time", "--out", str(tmp_path), "--name", "t"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "TQDM_DISABLE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads((tmp_path / "t.json").read_text())
    assert [r["N"] for r in res["rows"]] == [4, 8]
    best = res["best"]
    assert best == ("fused" if fused.available() else "engine")
    for r in res["rows"]:
        assert r[f"{best}_agree"] == 0.0 and r["loop_agree"] < 1e-5 and r["naive_agree"] < 1e-5
        assert r["engine_agree"] < 1e-5
        assert r["speedup_grad_vs_loop"] == pytest.approx(r["loop_grad_s"] / r[f"{best}_grad_s"])
    assert "| 8 |" in (tmp_path / "t.md").read_text()
    assert (tmp_path / "t.png").stat().st_size > 1000
    # --report rebuilds the same table from the saved JSON without measuring
    again = subprocess.run([sys.executable, "-m", "mfattn", "bench", "--report", str(tmp_path / "t.json")],
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and (tmp_path / "t.md").read_text() in again.stdout
