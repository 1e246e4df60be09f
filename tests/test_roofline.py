"""The roofline's kernels compute what they claim, and its work counts are the fused pass's.

Rates are not asserted (benchmarks are not tests). What is asserted would fail if a ceiling measured
something else: the FMA kernel's sums against the closed form of its recurrence (a kernel the compiler
had shortened would not match), the exponential kernel against numpy's exp, the triad and the loop form
against their definitions, and the closed-form work counts against a tally that walks the loops of the
fused kernels (mfattn.models.fused) statement by statement.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from mfattn.models import fused

pytestmark = pytest.mark.skipif(not fused.available(), reason="numba not installed")

if fused.available():
    from mfattn.companion import roofline as rl


def tally(L, d_x, d_k):
    """Operations of one head on one sequence, by walking the fused kernels' loops (a multiply-add is 2)."""
    flops = exps = 0

    def softmax_row(n):
        nonlocal flops, exps
        flops += 2 * n * d_k  # scores
        flops += n - 1  # running max
        for _ in range(n):
            flops += 2  # scale (s - max)
            exps += 1
            flops += 1 + 1 + 1  # times 2^-k, into the sum, divided by the sum

    # forward sweep (_sum_kernel)
    flops += 3 * L * d_x * 2 * d_k  # projections Q, K, V
    for l in range(L):
        n = l + 1
        softmax_row(n)
        flops += d_k * n * 2  # A V
        flops += d_x * (d_k * 2 + 2)  # W_O, then the weighted head sum
    # gradient sweep (_grad_kernel)
    flops += 3 * L * d_x * 2 * d_k
    for l in range(L):
        n = l + 1
        softmax_row(n)
        flops += d_k * (n * 2 + d_x * 2 + 2)  # A V, dAV, Phi
        flops += d_k * d_x * 2  # dW_O
        flops += n * (d_k * 2 + 2)  # dA, r
        flops += n * (2 + 3 * d_k * 2)  # dS, dQ, dK, dV
        flops += d_x * d_k * 3  # dW_Q (scale dQ, then multiply-add)
    flops += L * d_x * d_k * (3 + 2)  # dW_K (scale dK, multiply-add), dW_V
    return flops, exps


@pytest.mark.parametrize("L,d_x,d_k", [(1, 1, 1), (8, 4, 2), (5, 3, 7), (64, 4, 16)])
def test_work_counts_equal_a_tally_of_the_kernels_loops(L, d_x, d_k):
    c = rl.counts(L, d_x, d_k)
    assert (c["flops"], c["exps"]) == tally(L, d_x, d_k)


def test_counts_refuse_a_bad_shape_by_name():
    with pytest.raises(ValueError, match="d_k"):
        rl.counts(8, 4, 0)
    with pytest.raises(ValueError, match="L"):
        rl.counts(2.5, 4, 2)


def test_the_fma_kernel_runs_every_step_of_its_recurrence():
    reps = 1000
    sums, x0 = rl.fma_values(reps)
    a, b = 0.999, 0.001
    exact = a ** reps * x0 + b * (1 - a ** reps) / (1 - a)
    np.testing.assert_allclose(sums, exact.sum(), rtol=1e-12)


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 4e-16), (np.float32, 2.4e-7)])
def test_the_exponential_kernel_is_exp(dtype, rtol):
    x = -np.linspace(0.0, 80.0, 333).astype(dtype)
    np.testing.assert_allclose(rl.fused_exp(x), np.exp(x.astype(np.float64)), rtol=rtol, atol=0)
    # three rounds of y <- exp(x - y)
    y = np.zeros(x.shape)
    for _ in range(3):
        y = np.exp(x.astype(np.float64) - y)
    np.testing.assert_allclose(rl.fused_exp(x, reps=3), y, rtol=8 * rtol, atol=0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_exponential_is_within_one_and_a_half_units_of_its_dtype(dtype):
    """The polynomial's remainder is below half a unit in the last place (degree 13 in float64, 7 in
    float32), so the error is that half unit plus the rounding of Horner's rule: at most 1.5 units of
    the dtype, against exp in float64, on a dense grid down to near float32's smallest normal number.
    One degree lower in either dtype gives 2 (float64) and 3 (float32) units on such a grid (the same
    steps emulated in numpy)."""
    x = -np.linspace(0.0, 87.0, 400_001).astype(dtype)
    ref = np.exp(x.astype(np.float64))
    units = np.abs(rl.fused_exp(x).astype(np.float64) - ref) / np.spacing(ref.astype(dtype)).astype(np.float64)
    assert units.max() <= 1.5, units.max()


def test_the_exponential_kernel_refuses_a_bad_array():
    with pytest.raises(ValueError, match="x"):
        rl.fused_exp(np.zeros((2, 2)))


def test_triad_and_loop_form_compute_their_definitions():
    n = 1000
    a, b, c = np.zeros(n), np.arange(n, dtype=float), np.ones(n)
    rl._triad(a, b, c, 3.0)
    np.testing.assert_array_equal(a, b + 3.0)
    g = np.random.default_rng(1)
    for width, H in ((0, 32), (64, 64), (128, 128)):  # the width read at run time, and compiled in
        x, y = g.random((4, H)), g.random((4, H))
        out = np.zeros(2)
        rl._FORMS[width](5, x, y, out)
        # acc[k, h] = reps sum_j x[j, h] y[k, h], summed over k and h
        np.testing.assert_allclose(out, 5 * (x.sum(0) * y.sum(0)).sum(), rtol=1e-12)
    with pytest.raises(ValueError, match="lanes"):
        rl.loop_form_rate(lanes=32, compiled=True)


def test_roofline_run_reports_and_rewrites_from_its_json(tmp_path):
    res = rl.run_roofline(shapes=((2, 4),), N=40, B=2, dtypes=("float64",), repeats=1, blocks=(8,),
                          progress=False)
    (row,) = res["rows"]
    c = rl.counts(4, 4, 2, itemsize=8)
    assert row["flops"] == c["flops"] and row["exps"] == c["exps"]
    ceil = res["ceilings"]["float64"]
    bounds = {"fma": c["flops"] / ceil["fma"], "exp": c["exps"] / ceil["exp"], "memory": c["bytes"] / res["bandwidth"]}
    assert row["roof_s"] == pytest.approx(40 * 2 * max(bounds.values())) and row["bound"] == max(bounds, key=bounds.get)
    assert row["fraction"] == pytest.approx(row["roof_s"] / row["fused"]["median_s"])
    assert [b["block"] for b in res["blocks"]] == [8] and (fused.BLOCK, fused.BLOCK_FLOAT32, fused.WIDE_FROM) == (32, 64, 512)
    # the cores other processes kept busy, before and after, in the table's first line (an older record: not recorded)
    assert len(res["busy"]) == 2 and all(b is None or b >= 0 for b in res["busy"])
    res["busy"] = [0.004, 1.25]
    assert "before and after the run: 0.00 and 1.25." in rl.table(res).splitlines()[0]
    assert "before and after the run: not recorded." in rl.table({k: v for k, v in res.items() if k != "busy"})
    path = tmp_path / "r.json"
    path.write_text(json.dumps(res))
    proc = subprocess.run([sys.executable, "-m", "mfattn", "bench", "--report", str(path), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "TQDM_DISABLE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| float64 | 2 | 4 |" in (tmp_path / "r.md").read_text()
    assert (tmp_path / "r.png").stat().st_size > 1000
