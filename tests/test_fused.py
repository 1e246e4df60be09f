"""The fused CPU head pass (mfattn.models.fused) against the torch head pass, its oracle (itself checked
against SDPA, autograd and finite differences in test_model.py): equal to rounding on random shapes
(L = 1 and d_k = 1 included), weighted measures, sample chunks, per-sample gradients, each head's
feature energy (against the materialised feature maps), and the same bits for any thread count and
any block width, with the width compiled in or read at run time; the
same errors on bad input; traced calls fall back to torch."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from mfattn import Dataset, HeadModel
from mfattn.models import fused

from conftest import make_problem

pytestmark = pytest.mark.skipif(not fused.available(), reason="numba not installed")

# float64: 1e-12 relative to the largest entry (the sums run in another order; each head's arithmetic
# is the same up to the exponential, whose polynomial is within 2e-16 of exp)
REL = {torch.float64: 1e-12, torch.float32: 2e-5}


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def random_case(seed, dtype):
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 7, (1,), generator=g))
    L = int(torch.randint(1, 10, (1,), generator=g))
    d_x = int(torch.randint(1, 6, (1,), generator=g))
    d_k = int(torch.randint(1, 4, (1,), generator=g))
    d_v = int(torch.randint(2, 6, (1,), generator=g))
    N = int(torch.randint(1, 80, (1,), generator=g))
    return make_problem(dtype, n=n, L=L, d_x=d_x, d_k=d_k, d_v=d_v, N=N, seed=seed, fused=True)


SHAPES = [(1, 1, 1, 1, 2, 1), (3, 1, 2, 1, 3, 5), (2, 6, 3, 1, 4, 33), (4, 7, 4, 3, 5, 64), (16, 8, 4, 2, 5, 70)]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("case", [f"shape{i}" for i in range(len(SHAPES))] + [f"random{s}" for s in range(8)])
def test_fused_equals_torch_path(case, dtype):
    if case.startswith("shape"):
        n, L, d_x, d_k, d_v, N = SHAPES[int(case[5:])]
        model, data, heads, w, g = make_problem(dtype, n=n, L=L, d_x=d_x, d_k=d_k, d_v=d_v, N=N, fused=True)
    else:
        model, data, heads, w, g = random_case(int(case[6:]), dtype)
    assert model._fused
    ref = HeadModel(model.W_out, model.d_k, fused=False)
    # the streamed torch path, a few head and sample chunks
    chunked = HeadModel(model.W_out, model.d_k, fused=False, chunk_size=max(2, heads.shape[0] // 3),
                        sample_chunk=max(1, data.n // 3))
    q = (torch.randn(5, model.d_omega, generator=g, dtype=torch.float64)).to(dtype)
    tol = REL[dtype]
    for oracle in (ref, chunked):
        assert rel(model.logits(data.X, heads, w), oracle.logits(data.X, heads, w)) < tol
        assert rel(model.risk(data, heads, w), oracle.risk(data, heads, w)) < tol
        assert rel(model.first_variation(data, q, heads, w), oracle.first_variation(data, q, heads, w)) < tol
        assert rel(model.grad_first_variation(data, q, heads, w), oracle.grad_first_variation(data, q, heads, w)) < tol
        assert rel(model.per_sample_grad_first_variation(data, q, heads, w),
                   oracle.per_sample_grad_first_variation(data, q, heads, w)) < tol
        assert rel(model.dissipation(data, heads, w), oracle.dissipation(data, heads, w)) < tol
        assert rel(model.feature_energy(data.X, heads), oracle.features(data.X, heads).pow(2).mean((1, 2, 3))) < tol
        r1, G1, g1, p1 = model.evaluate(data.X, data.Y, heads, w, phi=True)
        r0, G0, g0, p0 = oracle.evaluate(data.X, data.Y, heads, w, phi=True)
        for a, b in ((r1, r0), (G1, G0), (g1, g0), (p1, p0)):
            assert rel(a, b) < tol


def test_fused_pass_uses_the_kernels(monkeypatch):
    """The model's fused path really calls the kernels (and the torch path does not)."""
    model, data, heads, w, _ = make_problem(fused=True)
    calls = []
    orig_sum, orig_pass = fused.head_sum, fused.head_pass
    monkeypatch.setattr(fused, "head_sum", lambda *a, **k: calls.append("sum") or orig_sum(*a, **k))
    monkeypatch.setattr(fused, "head_pass", lambda *a, **k: calls.append("pass") or orig_pass(*a, **k))
    model.grad_first_variation(data, heads, heads, w)
    assert calls == ["sum", "pass"]
    calls.clear()
    HeadModel(model.W_out, model.d_k, fused=False).grad_first_variation(data, heads, heads, w)
    assert calls == []
    orig_energy = fused.head_energy
    monkeypatch.setattr(fused, "head_energy", lambda *a, **k: calls.append("energy") or orig_energy(*a, **k))
    model.feature_energy(data.X, heads)
    HeadModel(model.W_out, model.d_k, fused=False).feature_energy(data.X, heads)
    assert calls == ["energy"]


def test_large_scores_and_padding():
    """Scores of a few hundred (softmax rows near one-hot, exponentials near underflow) and a head
    count that is not a multiple of the block (the padded heads are dropped)."""
    model, data, heads, w, g = make_problem(N=fused.BLOCK + 3, fused=True)
    big = 12.0 * heads
    ref = HeadModel(model.W_out, model.d_k, fused=False)
    assert rel(model.logits(data.X, big, w), ref.logits(data.X, big, w)) < 1e-12
    assert rel(model.grad_first_variation(data, big, big, w), ref.grad_first_variation(data, big, big, w)) < 1e-12
    assert rel(model.feature_energy(data.X, big), ref.feature_energy(data.X, big)) < 1e-12


def test_float32_blocks_narrow_and_wide():
    """float32 heads in blocks of BLOCK_FLOAT32, and of twice that from WIDE_FROM heads on, each with a
    padded last block: the same results as the torch path, to float32's tolerance."""
    for N in (fused.BLOCK_FLOAT32 + 3, fused.WIDE_FROM + 5):
        model, data, heads, w, g = make_problem(torch.float32, n=3, L=5, N=N, fused=True)
        assert fused.block_width(torch.float32, N) == (fused.BLOCK_FLOAT32 if N < fused.WIDE_FROM
                                                       else 2 * fused.BLOCK_FLOAT32)
        ref = HeadModel(model.W_out, model.d_k, fused=False)
        tol = REL[torch.float32]
        assert rel(model.logits(data.X, heads, w), ref.logits(data.X, heads, w)) < tol
        assert rel(model.grad_first_variation(data, heads, heads, w),
                   ref.grad_first_variation(data, heads, heads, w)) < tol
        assert rel(model.feature_energy(data.X, heads), ref.feature_energy(data.X, heads)) < tol


def _head_results(X, G, heads, w, Mq, d_k):
    """Every head kernel's output on one problem: its layout (shape, strides) and its bytes."""
    out = [fused.head_sum(X, heads, w, d_k), *fused.head_pass(X, G, heads, d_k),
           *fused.head_pass(X, G, heads, d_k, per_sample=True), fused.head_energy(X, heads, Mq, d_k)]
    return [(t.shape, t.stride(), t.numpy().tobytes()) for t in out]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_same_bits_with_the_block_width_compiled_in_and_at_every_width(dtype, monkeypatch):
    """The kernels of the full widths (64, 128) are compiled with the width a constant; each head's
    arithmetic is the same statement by statement, so they give the bits of the kernels that read the
    width at run time. A head's gradient, Phi and energy do not depend on the block it is in either:
    float64 passes at 8, 64 and 128 heads per block give the same bits (float32's head sum sets the
    sequence slices, so its passes are compared at one width). The float64 head sum adds runs of 32
    heads in a fixed order, whether a block holds one run or four."""
    g = torch.Generator().manual_seed(5)
    B, L, d_x, d_k, M = 9, 7, 3, 2, 2 * 128 + 64 + 7  # 11 runs of 32 (the last padded), in 7 groups
    monkeypatch.setattr(fused.numba, "get_num_threads", lambda: 1)  # the head sum in blocks of 128
    X, G = (torch.randn(B, L, d_x, generator=g, dtype=torch.float64).to(dtype) for _ in range(2))
    heads = (0.7 * torch.randn(M, 4 * d_x * d_k, generator=g, dtype=torch.float64)).to(dtype)
    w = torch.rand(M, generator=g, dtype=torch.float64).to(dtype)
    Mq = torch.randn(d_x, d_x, generator=g, dtype=torch.float64).to(dtype)
    Mq = Mq + Mq.T
    generic = {0: fused._KERNELS[0]}
    monkeypatch.setattr(fused, "ROW_BYTES", 8 * 128)  # float64 blocks of 128 too (the package's are 64)
    for width, wide_from in ((64, 10 ** 9), (128, 0)):
        monkeypatch.setattr(fused, "WIDE_FROM", wide_from)
        assert fused.block_width(dtype, M) == width
        compiled = _head_results(X, G, heads, w, Mq, d_k)
        with monkeypatch.context() as m:
            m.setattr(fused, "_KERNELS", generic)
            assert _head_results(X, G, heads, w, Mq, d_k) == compiled
    if dtype == torch.float64:
        # the head sum in runs of 32 heads (its order), computed in blocks of 128 (several runs to a
        # block, one task a slice) or of 32 (one task a group of blocks and a slice): the same bits
        with monkeypatch.context() as m:
            m.setattr(fused.numba, "get_num_threads", lambda: 10 ** 6)  # too few slices: blocks of 32
            narrow = fused.head_sum(X, heads, w, d_k).numpy().tobytes()
        assert compiled[0][2] == narrow
        monkeypatch.setattr(fused, "BLOCK_FLOAT32", 8)
        monkeypatch.setattr(fused, "WIDE_FROM", 10 ** 9)
        assert _head_results(X, G, heads, w, Mq, d_k) == compiled


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_same_bits_with_the_shape_compiled_in(dtype, monkeypatch):
    """At the shapes of fused.SHAPES the kernels of the compiled widths are compiled with L, d_x and d_k
    constants too, their scratch on the stack; each head's arithmetic is the same statement by
    statement, so every output (head sum, gradient and Phi, per sequence and Phi alone, energy) has
    the bits and layout of the kernels that read the shape at run time. The last block is padded."""
    g = torch.Generator().manual_seed(6)
    (L, d_x, d_k), B, M = fused.SHAPES[0], 5, 2 * 128 + 64 + 7
    X, G = (torch.randn(B, L, d_x, generator=g, dtype=torch.float64).to(dtype) for _ in range(2))
    heads = (0.7 * torch.randn(M, 4 * d_x * d_k, generator=g, dtype=torch.float64)).to(dtype)
    w = torch.rand(M, generator=g, dtype=torch.float64).to(dtype)
    Mq = torch.randn(d_x, d_x, generator=g, dtype=torch.float64).to(dtype)
    Mq = Mq + Mq.T
    shaped = _head_results(X, G, heads, w, Mq, d_k)
    H = fused.block_width(dtype, M)
    assert (H, L, d_x, d_k) in fused._SHAPED  # the shaped kernels ran
    monkeypatch.setattr(fused, "SHAPES", ())
    assert _head_results(X, G, heads, w, Mq, d_k) == shaped
    with monkeypatch.context() as m:  # and the same as the kernels of the width read at run time
        m.setattr(fused, "_KERNELS", {0: fused._KERNELS[0]})
        assert _head_results(X, G, heads, w, Mq, d_k) == shaped
    monkeypatch.setattr(fused, "SHAPES", ((L, d_x, d_k),))  # the shaped kernels only where their scratch fits
    monkeypatch.setattr(fused, "STACK_BYTES", 1000)
    assert fused._kernels(H, X, d_k) is fused._KERNELS[H]


def test_scratch_rows_start_on_cache_lines():
    """The kernels' scratch arrays, on the heap (shapes read at run time) or on the stack (a size that
    is a constant of the code), start on a 64-byte line and have the shape asked for."""
    scratch = fused._scratch

    @fused.numba.njit
    def addresses(a, b):
        arrays = (scratch(0, (a, b), np.float32), scratch(0, (a,), np.float64), scratch(0, (a, b, 3), np.int32))
        on_stack = scratch(24, (2, 3, 4), np.float64)
        on_stack[:] = 1.5  # writable, all 24 numbers
        offsets = [arrays[0].ctypes.data % 64, arrays[1].ctypes.data % 64, arrays[2].ctypes.data % 64,
                   on_stack.ctypes.data % 64]
        return offsets, arrays[0].shape, arrays[2].shape, on_stack.shape, on_stack.sum()

    for a in range(1, 9):
        assert addresses(a, 5) == ([0, 0, 0, 0], (a, 5), (a, 5, 3), (2, 3, 4), 36.0)


@pytest.mark.parametrize("M", [5, 32, 40, 64, 70, 100, 327, 600])
def test_float64_passes_keep_the_layout_and_bits_of_blocks_of_32(M, monkeypatch):
    """float64 passes run in blocks of 64 or 128 heads where that leaves every result as blocks of 32
    heads gave it, bits and memory layout alike (a transposed view, a copy, the padded row length
    per sequence), since torch's later sums follow the layout; elsewhere in blocks of 32. Against the
    package with every block 32 heads wide."""
    g = torch.Generator().manual_seed(M)
    B, L, d_x, d_k = 4, 5, 3, 2
    X, G = (torch.randn(B, L, d_x, generator=g, dtype=torch.float64) for _ in range(2))
    heads = 0.7 * torch.randn(M, 4 * d_x * d_k, generator=g, dtype=torch.float64)
    w = torch.rand(M, generator=g, dtype=torch.float64)
    Mq = torch.eye(d_x, dtype=torch.float64)
    now = _head_results(X, G, heads, w, Mq, d_k)
    monkeypatch.setattr(fused, "BLOCK_FLOAT32", 32)
    monkeypatch.setattr(fused, "WIDE_FROM", 10 ** 9)
    assert now == _head_results(X, G, heads, w, Mq, d_k)


def test_exponential_against_a_closed_form():
    """The kernels' exponential (Cody-Waite reduction, Taylor polynomial of degree 13 in float64 and 7
    in float32, 2^-k table) over x in
    [-1e4, 0], through a head whose output is a sigmoid: tokens X = (0, 1), d_x = d_k = 1,
    W_Q = W_V = W_O = 1, W_K = x. Row 1 has scores (0, x), so its output is A_11 v_1 = e^x / (1 + e^x);
    Phi with G = (0, 1) reads it off, one head per x."""
    x = -torch.cat([torch.logspace(-20, 3, 4001, dtype=torch.float64), torch.tensor([0.0, 745.0, 746.0, 1e4])])
    X = torch.tensor([[[0.0], [1.0]]], dtype=torch.float64)
    heads = torch.ones(x.shape[0], 4, dtype=torch.float64)
    heads[:, 1] = x
    _, phi = fused.head_pass(X, X, heads, 1, grad=False)
    expect = torch.sigmoid(x)
    normal = expect > 1e-300  # below, e^x is subnormal (torch's sigmoid flushes it to 0 from about -709)
    # our exponential within about 1 ulp, the division 0.5 ulp, torch's sigmoid about 1 ulp: 2.5 ulp
    assert float(((phi - expect).abs() / expect)[normal].max()) < 2.5 * 2.0**-52
    assert float((phi - expect)[~normal].abs().max()) < 1e-300
    for dtype in (torch.float32,):
        _, phi32 = fused.head_pass(X.to(dtype), X.to(dtype), heads.to(dtype), 1, grad=False)
        e32 = torch.sigmoid(x.to(dtype))
        normal = e32 > 1e-30
        assert float(((phi32 - e32).abs() / e32)[normal].max()) < 2.5 * 2.0**-23
        assert float((phi32 - e32)[~normal].abs().max()) < 1e-30


def test_same_bits_for_any_thread_count():
    code = (
        "import torch, sys\n"
        "from conftest import make_problem\n"
        "m, d, h, w, g = make_problem(n=40, L=6, N=300, fused=True)\n"
        "torch.set_num_threads(int(sys.argv[1]))\n"
        "r, G, gr, p = m.evaluate(d.X, d.Y, h, w, phi=True)\n"
        "e = m.feature_energy(d.X, h)\n"
        "import hashlib\n"
        "print(hashlib.sha1(gr.numpy().tobytes() + p.numpy().tobytes() + G.numpy().tobytes()\n"
        "                   + e.numpy().tobytes()).hexdigest())\n"
    )
    import pathlib

    tests = str(pathlib.Path(__file__).parent)
    out = {t: subprocess.run([sys.executable, "-c", code, str(t)], capture_output=True, text=True, cwd=tests,
                             check=True).stdout for t in (1, 2)}
    assert out[1] == out[2] and len(out[1]) > 20


def test_traced_calls_take_the_torch_path():
    """Autograd and torch.func see a differentiable computation: the fused kernels are skipped."""
    model, data, heads, w, g = make_problem(fused=True)
    q = heads[:2].clone().requires_grad_()
    (auto,) = torch.autograd.grad(model.first_variation(data, q, heads, w).sum(), q)
    torch.testing.assert_close(auto, model.grad_first_variation(data, heads[:2], heads, w), rtol=1e-10, atol=1e-12)
    jac = torch.func.jacfwd(lambda h: model.logits(data.X, h, w).sum())(heads)
    ref = HeadModel(model.W_out, model.d_k, fused=False)
    torch.testing.assert_close(jac, torch.func.jacfwd(lambda h: ref.logits(data.X, h, w).sum())(heads))


def test_bad_inputs_give_the_same_errors():
    model, data, heads, w, _ = make_problem(fused=True)
    ref = HeadModel(model.W_out, model.d_k, fused=False)
    bad = [
        lambda m: m.risk(data, heads[:, :-1], w),
        lambda m: m.risk(data, heads, -w),
        lambda m: m.risk(data, heads.float(), w),
        lambda m: m.grad_first_variation(data, heads[:, :3], heads, w),
        lambda m: m.risk(Dataset(data.X[..., :2], data.Y), heads, w),
        lambda m: m.logits(data.X, heads * float("nan"), w),
    ]
    for call in bad:
        msgs = []
        for m in (model, ref):
            with pytest.raises(ValueError) as e:
                call(m)
            msgs.append(str(e.value))
        assert msgs[0] == msgs[1]


def test_fused_flag_is_checked():
    W = torch.ones(3, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="fused"):
        HeadModel(W, 2, fused="yes")
    assert HeadModel(W, 2)._fused and not HeadModel(W, 2, fused=False)._fused
    assert HeadModel(W, 2, fused=True).to(dtype=torch.float32)._fused
    if torch.cuda.is_available():  # on CUDA the fused pass is the Triton one (mfattn.models.fused_cuda), when it imports
        from mfattn.models import fused_cuda

        if fused_cuda.available():
            assert HeadModel(W.cuda(), 2, fused=True)._fused
        else:
            with pytest.raises(ValueError, match="fused=True needs"):
                HeadModel(W.cuda(), 2, fused=True)


def test_kernels_are_cached_across_processes(tmp_path):
    """Every kernel keeps its compiled code on disk (numba's FunctionCache, not the NullCache of a
    kernel without ``cache=True``). A first process compiles one of them into NUMBA_CACHE_DIR; a
    second one loads it (numba's dispatcher counts cache hits and misses) and compiles nothing."""
    import os

    kernels = (fused._sum_kernel, fused._grad_kernel, fused._token_kernel, fused._velocity_kernel)
    assert all(type(k._cache).__name__ == "FunctionCache" for k in kernels)
    code = ("import torch\n"
            "from mfattn.models import fused\n"
            "fused.token_sums(torch.ones(1, 3, 2, dtype=torch.float64), torch.ones(1, dtype=torch.float64))\n"
            "k = fused._token_kernel\n"
            "print(sum(k.stats.cache_hits.values()), sum(k.stats.cache_misses.values()))")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    run = lambda: subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                 check=True).stdout.split()
    assert run() == ["0", "1"]  # compiled
    assert list(tmp_path.rglob("*.nbi")) and list(tmp_path.rglob("*.nbc"))
    assert run() == ["1", "0"]  # loaded


def test_compile_seconds_readies_every_head_kernel():
    """compile_seconds, which the benchmark reports as the first call's cost, readies each head kernel
    the package calls (run-time width and each width compiled in): in a fresh process, the kernels of
    the run-time width and of 64 heads hold a float32 and a float64 compilation after it, those of 128
    heads a float32 one only (float64 rows stop at ROW_BYTES, 64 heads)."""
    code = ("from mfattn.models import fused\n"
            "fused.compile_seconds()\n"
            "print({w: sorted({len(k.signatures) for k in ks}) for w, ks in sorted(fused._KERNELS.items())})")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")[0]
    assert fused.COMPILED_WIDTHS == (64, 128) and fused.block_width(torch.float64, 10 ** 6) == 64
    assert out == "{0: [2], 64: [2], 128: [1]}"
