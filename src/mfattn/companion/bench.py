"""Benchmark of the engine's hot path: ``python -m mfattn bench``.

Measures, in one process and on the same seeded data, two operations for N over powers of two:

* ``grad``: a full-gradient evaluation, i.e. the logits over all heads (8), the residual, and
  ``grad Phi(omega_i; rho)`` (13) of every head over the whole dataset;
* ``sgd``: one SGD step (19) on one drawn sequence (the paper's step).

Up to four implementations compute the same numbers (the benchmark checks they agree):

* ``fused``: :class:`mfattn.models.model.HeadModel` on the CPU, its default there: the fused head pass of
  :mod:`mfattn.models.fused` (one sweep per block of heads, compiled with numba); its first-call time
  (compiling, or loading numba's disk cache) is measured in fresh processes;
* ``engine``: :class:`mfattn.models.model.HeadModel` on its torch path (``fused=False``: streamed head
  chunks, batched kernels, hand-written backward pass), the CUDA path;
* ``loop``: what a user would write, a Python loop over the heads, each through
  ``torch.nn.functional.scaled_dot_product_attention``, and autograd;
* ``naive``: a straightforward batched version that materialises every head's features
  ``psi (N, B, L, d_v)`` at once (batched SDPA) and calls autograd.

The two baselines are independent implementations of eqs. (5)-(10), kept here (not in the engine)
because their only purpose is comparison. Figures: median wall time of ``repeats`` calls after a
warm-up; throughput in head-samples per second (``N x sequences / time``); peak working memory
(CPU: rise of the resident set's high-water mark over the resident set before the call, after
``malloc_trim``; CUDA: ``torch.cuda.max_memory_allocated`` over the allocation before the call);
achieved FLOP/s from the FLOP count of :func:`flop_count` against the rate of a matrix product of
the same dtype and the copy bandwidth, both measured in the same run on the same device. Results go to a JSON file, a Markdown
table and a plot for the book's benchmark page.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

import torch
import torch.nn.functional as F

from .. import BUSY_FROM, busy_elsewhere
from ..models import fused as _fused
from ..models.model import HeadModel
from . import roofline

__all__ = ["flop_count", "time_call", "device_peaks", "problem", "loop_grad", "naive_grad", "engine_grad", "fused_grad", "compile_time", "run_benchmark",
           "run_tokens", "run_wait", "main"]

IMPLS = ("fused", "engine", "naive", "loop")
_LABEL = {"fused": "fused", "engine": "torch path", "naive": "naive", "loop": "loop"}


# --------------------------------------------------------------------------- baselines
def _autograd(model: HeadModel, Y, heads, weights, logits):
    """The risk's gradient by autograd through ``logits(W_Q, W_K, W_V, W_O)``, each ``(N, ...)``, over
    ``w_i``: the risk's gradient in ``omega_i`` is ``w_i grad Phi(omega_i; rho)``."""
    h = heads.detach().requires_grad_(True)
    *qkv, o = h.split(model.d_x * model.d_k, dim=1)
    z = logits(*(w.unflatten(1, (model.d_x, model.d_k)) for w in qkv), o.unflatten(1, (model.d_k, model.d_x)))
    (g,) = torch.autograd.grad((torch.logsumexp(z, -1) - (Y * z).sum(-1)).mean(), h)
    return g / weights[:, None]


def loop_grad(model: HeadModel, X, Y, heads, weights):
    """``grad Phi(omega_i; rho)`` of every head by a per-head Python loop over SDPA and autograd."""
    def logits(W_Q, W_K, W_V, W_O):
        outs = (F.scaled_dot_product_attention(X @ W_Q[i], X @ W_K[i], X @ W_V[i], is_causal=True) @ W_O[i]
                for i in range(len(W_O)))  # one SDPA call per head
        return sum(w * o for w, o in zip(weights, outs)) @ model.W_out
    return _autograd(model, Y, heads, weights, logits)


def naive_grad(model: HeadModel, X, Y, heads, weights):
    """The same by one batched pass that materialises every head's features ``psi (N, B, L, d_v)``."""
    def logits(W_Q, W_K, W_V, W_O):
        o = F.scaled_dot_product_attention(*(X @ W[:, None] for W in (W_Q, W_K, W_V)), is_causal=True)
        return torch.einsum("n,nblv->blv", weights, o @ W_O[:, None] @ model.W_out)  # psi: (N, B, L, d_v)
    return _autograd(model, Y, heads, weights, logits)


def engine_grad(model: HeadModel, X, Y, heads, weights):
    """The engine's hot path on its torch path (no validation): the call SGD (19) and the
    characteristics (21) make, with ``fused=False``."""
    return _with(model, False).grad_phi(X, Y, heads, weights)


def fused_grad(model: HeadModel, X, Y, heads, weights):
    """The same call on the fused CPU path (:mod:`mfattn.models.fused`)."""
    return _with(model, True).grad_phi(X, Y, heads, weights)


def _with(model: HeadModel, fused: bool) -> HeadModel:
    if model.fused is fused:
        return model
    cache = model.__dict__.setdefault("_bench_variants", {})
    if fused not in cache:  # one model per path, so that its mask cache is reused across calls
        cache[fused] = HeadModel(model.W_out, model.d_k, chunk_size=model.chunk_size,
                                 sample_chunk=model.sample_chunk, memory_budget=model.memory_budget, fused=fused)
    return cache[fused]


GRADS = {"fused": fused_grad, "engine": engine_grad, "naive": naive_grad, "loop": loop_grad}


def compile_time() -> dict:
    """First-call time of the fused kernels in fresh processes: with an empty numba cache (they are
    compiled, for float32 and float64) and again with the cache that run wrote (they are loaded).

    Returns
    -------
    dict
        ``{"cold_s": float, "cached_s": float}``, seconds from the first call to both kernels ready.
    """
    code = "from mfattn.models import fused; print(fused.compile_seconds()['seconds'])"
    with tempfile.TemporaryDirectory() as d:
        run = lambda: float(subprocess.run([sys.executable, "-c", code], env={**os.environ, "NUMBA_CACHE_DIR": d},
                                           capture_output=True, text=True, check=True).stdout.split()[-1])
        return {"cold_s": run(), "cached_s": run()}


def flop_count(L: int, d_x: int, d_k: int) -> int:
    """Floating-point operations of one head on one sequence, forward and backward (dense, as executed).

    Forward ``F = 2L (3 d_x d_k)`` (projections) ``+ 2 L^2 d_k`` (scores) ``+ 2 L^2 d_k`` (``A V``)
    ``+ 2 L d_k d_x`` (``W_O``); a backward pass costs two forward passes' matrix products, so one
    gradient evaluation is counted as ``3 F``. The softmax, the mask and ``W_out`` (shared, once
    after the head sum) are not counted."""
    return 3 * (2 * L * 3 * d_x * d_k + 4 * L * L * d_k + 2 * L * d_k * d_x)


# ------------------------------------------------------------------------ measurement
def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


#: A figure whose calls spread by more than this (interquartile range over the median) is flagged:
#: on a busy machine the other jobs, not the engine, decide it.
UNSTEADY = 0.2
#: Seconds each timed sample of the N sweep and of the token benchmark lasts at least (``time_call``'s
#: ``least``): calls of a fraction of a millisecond are timed in batches.
SAMPLE_SECONDS = 0.01


def time_call(fn, device, repeats: int, warmup: int = 1, spread: list | None = None, least: float = 0.0) -> float:
    """The median wall time of ``repeats`` calls of ``fn``, after ``warmup`` calls, the device
    synchronised around each (a CUDA call is timed to its end, not to its launch). A call shorter
    than ``least`` seconds is timed in batches: each timed sample is as many calls back to back as
    last at least ``least`` (judged from the last warm-up call), divided by their number, so that a
    sub-millisecond call is not measured at the grain of the clock and the scheduler.

    Parameters
    ----------
    fn : callable
        Called with no argument.
    device : torch.device
        Where ``fn`` runs.
    repeats : int
        Timed calls, positive.
    warmup : int, default 1
        Untimed calls first (compilation, caches).
    spread : list, optional
        When given, the calls' relative spread (interquartile range over the median, 0 for fewer
        than 3 calls) is appended to it.
    least : float, default 0
        Seconds a timed sample lasts at least (0: one call per sample).

    Returns
    -------
    float
        Seconds.

    Raises
    ------
    ValueError
        Naming ``repeats`` or ``warmup`` when invalid.

    Examples
    --------
    >>> import time, torch
    >>> from mfattn.companion.bench import time_call
    >>> spread = []
    >>> t = time_call(lambda: time.sleep(0.002), torch.device("cpu"), 3, spread=spread)
    >>> 0.002 <= t < 0.5, len(spread)
    (True, 1)
    """
    for name, value, low in (("repeats", repeats, 1), ("warmup", warmup, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name}: expected an integer >= {low}, got {value!r}")
    if not (isinstance(least, (int, float)) and math.isfinite(least) and least >= 0):
        raise ValueError(f"least: expected seconds >= 0, got {least!r}")
    call = lambda: (fn(), _sync(device))  # noqa: E731
    warm = timeit.repeat(call, repeat=warmup, number=1)
    number = max(1, math.ceil(least / warm[-1])) if least > 0 and warm and warm[-1] > 0 else 1
    times = [t / number for t in timeit.repeat(call, repeat=repeats, number=number)]
    med = statistics.median(times)
    if spread is not None:
        q = statistics.quantiles(times, n=4) if len(times) >= 3 else [med, med, med]
        spread.append((q[2] - q[0]) / med if med > 0 else 0.0)
    return med


def _status_kb(field: str) -> int:
    return int(re.search(rf"^{field}:\s*(\d+)", Path("/proc/self/status").read_text(), re.M)[1])


def _peak_memory(fn, device) -> int | None:
    """Bytes of working memory one call needs above what was allocated before it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # hand freed pages back, so that the RSS is live data
        Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark VmHWM
        base = _status_kb("VmRSS")
        fn()
        return 1024 * max(_status_kb("VmHWM") - base, 0)
    except OSError:
        return None


def device_peaks(device, dtype) -> dict:
    """Matrix-product FLOP/s and copy bandwidth measured now, on this device: the run's own roofline.

    Parameters
    ----------
    device : torch.device
        The device measured (a CUDA device multiplies two 8192 x 8192 matrices and copies 1 GiB; the
        CPU 1024 x 1024 and 64 MiB).
    dtype : torch.dtype
        The matrices' dtype.

    Returns
    -------
    dict
        ``matmul_flops`` (FLOP/s), ``matmul_size`` (the matrices' side), ``copy_bytes_per_s``
        (bytes read and written per second by a copy).

    Examples
    --------
    >>> import torch
    >>> from mfattn.companion.bench import device_peaks
    >>> pk = device_peaks(torch.device("cpu"), torch.float32)
    >>> pk["matmul_size"], pk["matmul_flops"] > 1e8, pk["copy_bytes_per_s"] > 1e8
    (1024, True, True)
    """
    n = 8192 if device.type == "cuda" else 1024
    a, b = torch.randn(2, n, n, device=device, dtype=dtype)
    t = time_call(lambda: a @ b, device, 5)
    x = torch.empty(1 << (28 if device.type == "cuda" else 24), device=device, dtype=torch.float32)
    tc = time_call(lambda: x.clone(), device, 5)
    return {"matmul_flops": 2 * n**3 / t, "matmul_size": n, "copy_bytes_per_s": 2 * x.numel() * 4 / tc}


def problem(task: str, n_data: int, L: int, d_x: int, d_k: int, dtype, device, seed=0):
    """The benchmark's problem: the task ``task`` (:func:`mfattn.models.tasks.make_task`) at the given
    sizes; the teacher task takes ``L``, ``d_x`` and ``d_k``, the others their own.

    Parameters
    ----------
    task : str
        A task of :func:`~mfattn.models.tasks.make_task` (``"teacher"``, ``"markov"``, ``"text"``).
    n_data, L, d_x, d_k : int
        Sequences, their length, the token and key dimensions.
    dtype : torch.dtype
        The model's dtype.
    device : torch.device or str
        The model's device.
    seed : int, default 0
        The task's seed.

    Returns
    -------
    Task
        As :func:`~mfattn.models.tasks.make_task` returns it.

    Examples
    --------
    >>> import torch
    >>> from mfattn.companion.bench import problem
    >>> tk = problem("teacher", 8, 4, 3, 2, torch.float64, "cpu")
    >>> tk.data.n, tk.data.L, tk.model.d_omega
    (8, 4, 24)
    """
    from ..models.tasks import make_task

    shape = dict(L=L, d_x=d_x, d_k=d_k) if task == "teacher" else {}
    return make_task(task, n=n_data, seed=seed, dtype=dtype, device=device, **shape)


def run_benchmark(
    *, Ns, task="teacher", n_data=16, L=8, d_x=4, d_k=2, device="cpu", dtype="float32", repeats=5,
    loop_max_seconds=20.0, naive_max_bytes=None, memory=True, budgets=(), profile=0, seed=0, progress=True,
    compile_time_too=True,
) -> dict:
    """Run the benchmark; returns the results as a JSON-ready dict (see the module docstring)."""
    # imported here: the timing helpers import without tqdm (tools/device_check.py)
    from .._progress import progress_bar

    dev, dt = torch.device(device), getattr(torch, dtype)
    tk = problem(task, n_data, L, d_x, d_k, dt, dev, seed)
    model, X, Y = tk.model, tk.data.X, tk.data.Y
    n, L = X.shape[0], X.shape[1]
    if naive_max_bytes is None:  # the naive pass keeps about 8 (N, B, L, L) tensors for autograd
        naive_max_bytes = (torch.cuda.get_device_properties(dev).total_memory if dev.type == "cuda"
                           else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")) // 4
    item = torch.finfo(dt).bits // 8
    g = torch.Generator().manual_seed(seed + 1)

    def draw(N):  # N heads and their equal weights
        heads = 0.5 * torch.randn(N, model.d_omega, generator=g, dtype=torch.float64)
        return heads.to(device=dev, dtype=dt), torch.full((N,), 1.0 / N, dtype=dt, device=dev)

    flops = flop_count(L, model.d_x, model.d_k)
    load0, busy0 = os.getloadavg()[0], busy_elsewhere(0.5)
    # the best path on this device is the reference of every row: the fused pass on a CPU
    best = "fused" if dev.type == "cpu" and _fused.available() else "engine"
    impls = [i for i in IMPLS if i != "fused" or best == "fused"]
    out = {"machine": roofline.machine(dev), "device": str(dev), "dtype": dtype, "task": task, "n_data": n,
           "L": L, "d_x": model.d_x, "d_k": model.d_k, "d_v": model.d_v, "repeats": repeats,
           "flops_per_head_sample": flops, "peaks": device_peaks(dev, dt), "rows": [], "budgets": [],
           "best": best, "sample_seconds": SAMPLE_SECONDS}
    loop_stopped = False
    for N in progress_bar(list(Ns), enabled=progress, desc="bench N", leave=False):
        heads, w = draw(N)
        idx = torch.randint(n, (1,), generator=g).to(dev)
        Xs, Ys = X[idx], Y[idx]
        row = {"N": N}
        ref = GRADS[best](model, X, Y, heads, w)
        scale = float(ref.abs().max())
        skip = {"loop": loop_stopped, "naive": 8 * N * n * L * L * item > naive_max_bytes}
        for impl in impls:
            if skip.get(impl):
                continue
            grad = GRADS[impl]
            full = lambda: grad(model, X, Y, heads, w)  # noqa: E731
            row[f"{impl}_agree"] = float((full() - ref).abs().max()) / scale  # relative to the largest entry
            sp = []
            row[f"{impl}_grad_s"] = time_call(full, dev, repeats, spread=sp, least=SAMPLE_SECONDS)
            row[f"{impl}_sgd_s"] = time_call(lambda: heads - 0.1 * grad(model, Xs, Ys, heads, w), dev, repeats,
                                             spread=sp, least=SAMPLE_SECONDS)
            row[f"{impl}_grad_spread"], row[f"{impl}_sgd_spread"] = sp
            if memory:
                row[f"{impl}_grad_mem"] = _peak_memory(full, dev)
            # larger N would only take longer; the ratio is already clear
            loop_stopped |= impl == "loop" and row["loop_grad_s"] * repeats > loop_max_seconds
        for impl in ("fused", "engine"):
            if f"{impl}_grad_s" in row:
                row[f"{impl}_head_samples_per_s"] = N * n / row[f"{impl}_grad_s"]
                row[f"{impl}_flops"] = flops * N * n / row[f"{impl}_grad_s"]
        row["heads_bytes"] = N * model.d_omega * item
        for impl in impls:
            if impl != best and f"{impl}_grad_s" in row:
                row[f"speedup_grad_vs_{impl}"] = row[f"{impl}_grad_s"] / row[f"{best}_grad_s"]
                row[f"speedup_sgd_vs_{impl}"] = row[f"{impl}_sgd_s"] / row[f"{best}_sgd_s"]
        out["rows"].append(row)
        del heads
    heads, w = draw(max(Ns))
    for b in map(int, budgets):
        m = HeadModel(model.W_out, model.d_k, memory_budget=b, fused=False)
        grad_s = time_call(lambda: engine_grad(m, X, Y, heads, w), dev, repeats)
        out["budgets"].append({"N": max(Ns), "budget": b, "grad_s": grad_s})
    out["load"] = [round(load0, 2), round(os.getloadavg()[0], 2)]  # 1-minute load average, before and after
    # cores other processes kept busy, before and after (the load average counts this run's own threads)
    out["busy"] = [busy0, busy_elsewhere(0.5)]
    if best == "fused" and compile_time_too:
        # after the sweep: the compiling processes slowed the first rows when they ran before it
        # (N = 16: 0.51 ms against 0.18-0.28 ms in runs without them before)
        out["fused_compile"] = compile_time()
    if profile:
        out["profile"] = {**profile_engine(model, X, Y, *draw(profile), dev), "N": profile}
    return out


def profile_engine(model, X, Y, heads, w, device, top: int = 12) -> dict:
    """The kernels of one full-gradient evaluation on the torch path by ``torch.profiler``: on CUDA the
    ``top`` GPU kernels by device time (kernel rows only, so that no time is counted twice), on a CPU
    the ``top`` operators by their own CPU time; with their share of the total. (The fused path is one
    compiled kernel per pass, which the profiler does not see into.)"""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    call = lambda: (engine_grad(model, X, Y, heads, w), _sync(device))  # noqa: E731
    call()  # warm-up, not profiled
    with profile(activities=acts) as prof:
        call()
    events = prof.key_averages()
    if device.type == "cuda":
        own = lambda e: getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        events = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    else:
        own = lambda e: e.self_cpu_time_total
    rows = sorted(events, key=own, reverse=True)
    total = sum(own(e) for e in events) or 1.0
    return {"total_ms": total / 1e3, "kernels": [
        {"name": e.key[:90], "calls": e.count, "ms": own(e) / 1e3, "share": own(e) / total} for e in rows[:top]]}


# --------------------------------------------------------------------------- reports
def _fmt_s(v):
    return "" if v is None else (f"{v * 1e3:.3g} ms" if v < 1 else f"{v:.3g} s")


def _fmt_b(v):
    if v is None:
        return ""
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if v >= 1 << k:
            return f"{v / (1 << k):.3g} {unit}"
    return f"{v} B"


def _kernel(name: str) -> str:
    """A CUDA kernel's name without its return type, namespaces and template arguments
    (``void at::native::(anonymous namespace)::softmax_warp_forward<float, ...>`` is
    ``softmax_warp_forward``), with the functor an elementwise kernel applies, cut at 40
    characters: the profile table fits the column."""
    bare, prev = name, None
    while bare != prev:  # innermost brackets first; then whatever an unclosed one opens (a cut name)
        bare, prev = re.sub(r"[<(][^<>()]*[>)]", "", bare), bare
    text = (re.split(r"[<(]", bare)[0].split() or [name])[-1].rsplit("::", 1)[-1] or name
    if op := re.search(r"(\w+Functor)\b", name) or re.search(r"(\w+Op)\b", name):
        text += f" ({op.group(1)})"
    return text if len(text) <= 40 else text[:39] + "…"


def table(res: dict) -> str:
    """The results as a Markdown table (the book's benchmark page includes it)."""
    m, pk, name = res["machine"], res["peaks"], _LABEL
    where = m.get("gpu") or m["cpu"]
    best = res.get("best", "engine")  # results saved before the fused path have only the torch path
    others = [i for i in IMPLS if i != best and (i != "fused" or best == "fused")]

    def pm(r, impl, op):  # the median and the calls' spread (results saved before spreads have none)
        v = r.get(f"{impl}_{op}_spread")
        # the number and its unit held together; the spread may go to a line of its own (a narrow column)
        return _fmt_s(r[f"{impl}_{op}_s"]).replace(" ", "\u00a0") + ("" if v is None else f" ±{50 * v:.0f}%")

    def sp(r, impl):
        k = f"speedup_grad_vs_{impl}"
        return f"{r[k]:.3g} / {r[f'speedup_sgd_vs_{impl}']:.3g}" if k in r else "not run"

    lines = [
        f"Machine: {where}; torch {m['torch']}, {m['threads']} CPU threads{roofline.wait_words(m)}; {res['dtype']}.",
        f"Problem: task `{res['task']}`, {res['n_data']} sequences of L = {res['L']}, d_x = {res['d_x']}, "
        f"d_k = {res['d_k']}, d_v = {res['d_v']}; median of {res['repeats']} "
        + (f"samples, each at least {1e3 * res['sample_seconds']:g} ms of calls back to back (a call's time: the "
           "sample's over its calls)." if res.get("sample_seconds") else "calls."),
        f"Same-run roofline: {res['dtype']} matrix product {pk['matmul_flops'] / 1e12:.3g} TFLOP/s "
        f"({pk['matmul_size']}^3), copy {pk['copy_bytes_per_s'] / 1e9:.3g} GB/s (read + write). "
        + roofline.allocator_words(res),
        "",  # two tables that fit the book's column: speed, then memory
        f"| N | {name[best]} grad | {name[best]} SGD step | GFLOP/s | % of product rate | "
        + " | ".join(f"× {name[i]}" for i in others) + " |",
        "|" + "---:|" * (5 + len(others)),
    ]
    lines += [f"| {r['N']} | {pm(r, best, 'grad')} | {pm(r, best, 'sgd')} | {r[f'{best}_flops'] / 1e9:.3g} | "
              f"{100 * r[f'{best}_flops'] / pk['matmul_flops']:.2g}% | "
              + " | ".join(sp(r, i) for i in others) + " |" for r in res["rows"]]
    lines += ["", f"'× {name[others[0]]}': the {name[best]} pass's speed-up, full gradient / SGD step.", "",
              "| N | " + " | ".join(f"memory {name[i]}" for i in [best] + others) + " | heads |",
              "|" + "---:|" * (len(others) + 3)]
    lines += [f"| {r['N']} | " + " | ".join(_fmt_b(r.get(f"{i}_grad_mem")) for i in [best] + others)
              + f" | {_fmt_b(r['heads_bytes'])} |" for r in res["rows"]]
    lines += ["", "±: half the interquartile range of the calls, relative to the median."]
    lines += ["", warn] if (warn := warning(res)) else []
    worst = max(max(r.get(f"{i}_agree", 0.0) for i in others) for r in res["rows"])
    lines += ["", f"The {len(others) + 1} implementations agree to {worst:.1e} (largest gradient difference "
              f"relative to the largest gradient entry, against the {name[best]}). 'not run': the naive pass "
              "would exceed a quarter of the memory, or the loop exceeded its time budget at a smaller N."]
    if c := res.get("fused_compile"):
        lines += ["", "First call of the fused kernels in a fresh process (float32 and float64): "
                  f"{c['cold_s']:.3g} s compiling with an empty numba cache, {c['cached_s']:.3g} s loading "
                  "the cache that run wrote."]
    if prof := res.get("profile"):
        lines += ["", f"Profile of one full-gradient evaluation on the torch path at N = {prof['N']} "
                  f"({prof['total_ms']:.3g} ms of kernel time):", "", "| kernel | calls | ms | share |",
                  "|---|---:|---:|---:|"]
        lines += [f"| `{_kernel(k['name'])}` | {k['calls']} | {k['ms']:.3g} | {100 * k['share']:.1f}% |"
                  for k in prof["kernels"]]
    if res["budgets"]:
        lines += ["", "Chunk budget (torch path, full gradient, N = " + str(res["budgets"][0]["N"]) + "): " +
                  ", ".join(f"{_fmt_b(b['budget'])}: {_fmt_s(b['grad_s'])}" for b in res["budgets"]) + "."]
    return "\n".join(lines) + "\n"


def warning(res: dict) -> str | None:
    """A warning when the calls of some figures spread by more than :data:`UNSTEADY`, with the load
    average that explains it; ``None`` when every figure is steady."""
    bad = [(r["N"], k[:-7]) for r in res["rows"] for k, v in r.items() if k.endswith("_spread") and v > UNSTEADY]
    if not bad:
        return None
    load, busy = res.get("load"), res.get("busy") or [None, None]
    head = (f"**Warning: {len(bad)} figure(s) spread by more than {100 * UNSTEADY:.0f}% between calls** ("
            + ", ".join(f"{what} at N = {N}" for N, what in bad[:6]) + (", ..." if len(bad) > 6 else "") + "): ")
    where = res["machine"].get("cpu", "this machine")
    if None not in busy:
        cores = f"{busy[0]:.2f} and {busy[1]:.2f} cores busy before and after the run, on {where}"
        if max(busy) < BUSY_FROM:
            return (head + f"no other process was busy ({cores}), so the spread is this machine's own at those "
                    "sizes. Rerun and compare the runs before relying on those rows.")
        return (head + f"other processes kept {cores}; they decide those rows as much as the engine. Rerun on an "
                "idle machine before comparing them.")
    old = (f" The load average was {load[0]:g} before the run and {load[1]:g} after it, on {where}."
           if load else "")
    return (head + f"another job may have shared the machine, and those rows measure it as much as the "
            f"engine.{old} Rerun on an idle machine before comparing them.")


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from . import plotting

    with matplotlib.rc_context(plotting.STYLE):
        fig, (a, b) = plotting.panels(2, height=3.4)
        rows = res["rows"]
        for impl, style in zip(IMPLS, ("D-", "o-", "s--", "^:")):
            for ax, key in ((a, f"{impl}_grad_s"), (b, f"{impl}_grad_mem")):
                pts = [(r["N"], r[key]) for r in rows if r.get(key)]
                if pts:
                    ax.loglog(*zip(*pts), style, label=_LABEL[impl])
        b.loglog([r["N"] for r in rows], [r["heads_bytes"] for r in rows], "k-", lw=0.8, label="head storage")
        a.set(xlabel="heads N", ylabel="seconds per full gradient",
              title=f"time ({res['device']}, {res['dtype']})")
        b.set(xlabel="heads N", ylabel="bytes", title="peak working memory")
        for ax in (a, b):
            ax.grid(True, which="major", alpha=0.3)
        handles, labels = b.get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=len(labels))
        fig.savefig(path, dpi=plotting.DPI)
        plt.close(fig)


#: Chapter 06's shapes (systems B, tokens n, dimension d): the circle's batch of ReLU settings at
#: every beta, the batch on S^7, and the largest n of its sweep in n.
TOKEN_SHAPES = ((64, 96, 2), (32, 96, 8), (3, 400, 2))


def run_tokens(repeats: int = 15) -> dict:
    """The attention sums of chapter 06's token systems (:func:`mfattn.models.fused.token_sums`)
    against the torch path that stores each system's ``(n, n)`` kernel and multiplies it
    (the path of :mod:`mfattn.models.tokens` on CUDA), in float64 at :data:`TOKEN_SHAPES`, with one
    whole Euler step of the chapter (sums, GeLU perceptron, projection) on the fused path for
    scale. The two paths' sums are checked to agree to 1e-12 relative before timing."""
    from ..models import tokens as tk

    cpu, rows = torch.device("cpu"), []
    for B, n, d in TOKEN_SHAPES:
        g = torch.Generator().manual_seed(0)
        X = tk.uniform_sphere(B, n, d, generator=g)
        s = tk.TokenSystem.grid(torch.logspace(-1, 1.7, B).tolist(), mlp=True,
                                perceptron=tk.Perceptron.sample(d, generator=g, activation="gelu"))

        def stored():
            W = tk.interaction_kernel(X, s.beta)
            return W @ X, W.sum(-1)

        S, Z = _fused.token_sums(X, s.beta)
        S0, Z0 = stored()
        err = max(float((S - S0).abs().max() / S0.abs().max()), float(((Z - Z0) / Z0).abs().max()))
        if not err < 1e-12:
            raise RuntimeError(f"token sums: the fused and torch paths differ by {err:.2e} at {(B, n, d)}")
        spread, calls = [], (lambda: _fused.token_sums(X, s.beta), stored, lambda: tk.step(X, s, 0.1))
        t_f, t_t, t_s = [time_call(f, cpu, repeats, spread=spread, least=SAMPLE_SECONDS) for f in calls]
        rows.append(dict(B=B, n=n, d=d, fused_s=t_f, torch_s=t_t, step_s=t_s, spread=max(spread),
                         pair_rate=B * n * n / t_f))
    return {"kind": "tokens", "dtype": "float64", "threads": torch.get_num_threads(),
            "machine": roofline.machine(cpu), "load": list(os.getloadavg()), "rows": rows}


def tokens_table(res: dict) -> str:
    """The token benchmark as a Markdown table."""
    lines = [f"Token systems of chapter 06, float64, {res['threads']} threads"
             f"{roofline.wait_words(res.get('machine', {}))}: the attention sums "
             "$S_i=\\sum_j g_{ij}x_j$ and $Z_i=\\sum_j g_{ij}$ of every token, and one whole Euler step; "
             "spread: the largest of the three figures' spreads over their calls. " + roofline.allocator_words(res), "",
             "| B, n, d | fused | torch path (stored kernel) | speed-up | pairs per second | "
             "whole Euler step, fused | spread |", "|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['B']}, {r['n']}, {r['d']} | {_fmt_s(r['fused_s'])} | {_fmt_s(r['torch_s'])} | "
              f"{r['torch_s'] / r['fused_s']:.1f}x | {r['pair_rate']:.3g} | {_fmt_s(r['step_s'])} | "
              f"{100 * r['spread']:.0f}% |" for r in res["rows"]]
    return "\n".join(lines) + "\n"


# the workload of --wait, in a fresh process: many small parallel regions, as in a chapter's small steps.
# It says "ready" once imported and warm, and times on the next line of its input: a busy process
# beside it may start in between, after the import chose how to wait, or end there
_WAIT_WORK = """
import statistics, sys, time
import mfattn, torch
from mfattn.models.tasks import make_task
t = make_task("teacher", n=32, seed=0, dtype=torch.float32)
g = torch.Generator().manual_seed(1)
heads, w = 0.5 * torch.randn(64, t.model.d_omega, generator=g), torch.full((64,), 1 / 64)
mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 64))
x = torch.randn(256, 64, generator=g)
work = {"grad": lambda: t.model.grad_phi(t.data.X, t.data.Y, heads, w),
        "autograd": lambda: mlp(x).pow(2).mean().backward()}
for f in work.values():
    f()
print("ready", flush=True)
sys.stdin.readline()
time.sleep(3 * mfattn.LOOK_EVERY)  # the package's looks at the load see the busy process (mfattn.throttle)
def run(f):
    t0 = time.perf_counter()
    for _ in range(300):
        f()
    return time.perf_counter() - t0
out = {name: statistics.median([run(f) for _ in range(REPEATS)]) for name, f in work.items()}
print(out["grad"], out["autograd"], mfattn.THREAD_POLICY or "-", mfattn.throttled())
"""

#: The other process of each --wait case, a child that keeps one core busy: none; started after the
#: import chose how to wait (``later``); busy from before the import (``start``); busy at import and
#: ended before the timing (``ended``, timed once the watch has had its calm looks).
WAIT_CASES = {"none": "none", "later": "busy core started after the import",
              "start": "busy core from before the import", "ended": "busy at import, ended before the timing"}


def _wait_process(name: str, env: dict, case: str, repeats: int) -> list:
    """One process of :func:`run_wait`: its gradient and autograd times, its policy and whether it was throttled."""
    import mfattn

    burn, work = [sys.executable, "-c", "while True: pass"], None
    burner = subprocess.Popen(burn) if case in ("start", "ended") else None
    try:
        if burner:
            time.sleep(0.5)  # past its start-up: busy when the work process imports the package
        work = subprocess.Popen([sys.executable, "-c", _WAIT_WORK.replace("REPEATS", str(repeats))], env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready = work.stdout.readline().strip() == "ready"  # else it failed: its error follows
        if ready and case == "later":
            burner = subprocess.Popen(burn)
            time.sleep(0.5)
        elif ready and case == "ended":
            burner.kill()
            burner.wait()
            burner = None
            time.sleep((mfattn.CALM_LOOKS + 3) * mfattn.LOOK_EVERY)  # the watch's calm looks
        out, err = work.communicate("go\n" if ready else "")
    finally:  # on any error or interruption too: no child left behind
        for child in (burner, work):
            if child and child.poll() is None:
                child.kill()
                child.wait()
    if work.returncode or not ready:
        raise RuntimeError(f"--wait: the {name} process failed: {err[-2000:]}")
    grad, auto, policy, held = out.split()[:4]
    return [float(grad), float(auto), policy, held == "True"]


def run_wait(repeats: int = 5, spins=(), rounds: int = 5, progress: bool = True) -> dict:
    """How long many small parallel operations take under each wait setting of the OpenMP runtime,
    alone and beside a process that keeps one core busy (:data:`WAIT_CASES`): 300 fused gradient calls
    of 64 heads and 300 steps of a small autograd network, the median of ``repeats`` in each process,
    each setting and case in fresh processes (the runtime reads the setting when it loads), ``rounds``
    of them in turn; a row holds the median over its processes and each process's figures.
    ``"auto"`` is the package's own choice (no variable set): the runtime's spin, throttled while
    another process keeps a core busy (``mfattn.throttle``), whether it started before or after the
    import. ``spins``: spin counts (GOMP_SPINCOUNT, unwatched) to time beside it."""
    import mfattn

    from .._progress import progress_bar

    settings = {"auto": {}, "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
                "default": {"OMP_WAIT_POLICY": ""},  # an empty value: the runtime's default, a long spin, unwatched
                **{f"spin {n}": {"GOMP_SPINCOUNT": str(n)} for n in spins}}
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "MFATTN_WAIT_AUTO")}
    cases = [(name, case) for name in settings for case in (WAIT_CASES if name == "auto" else ("none", "later"))]
    got, busy = {c: [] for c in cases}, [mfattn.busy_elsewhere(0.5)]  # cores other processes keep busy, before and after
    for _ in progress_bar(range(rounds), enabled=progress, desc="--wait rounds", leave=False):
        for name, case in cases:  # in turn: a drift of the machine's speed touches every row alike
            got[(name, case)].append(_wait_process(name, dict(base, **settings[name]), case, repeats))
    busy.append(mfattn.busy_elsewhere(0.5))
    rows = [{"setting": name, "busy": case, "grad_s": statistics.median(p[0] for p in procs),
             "autograd_s": statistics.median(p[1] for p in procs), "policy": procs[0][2],
             "throttled": [p[3] for p in procs], "processes": [p[:2] for p in procs]} for (name, case), procs in got.items()]
    return {"kind": "wait", "spin": mfattn.SPIN, "threads": torch.get_num_threads(), "rounds": rounds, "rows": rows,
            "busy": busy}


def wait_table(res: dict) -> str:
    """The figures of :func:`run_wait` and the ratios the package's choice is held to."""
    at = {(r["setting"], r["busy"]): r for r in res["rows"]}
    label = {"auto": f"the package's choice ({at[('auto', 'none')]['policy']}, watched)",
             "passive": "sleep at once (PASSIVE; the choice beside a busy core where the watch cannot throttle)",
             "default": "the runtime's default spin, unwatched",
             **{k: f"bounded spin (GOMP_SPINCOUNT={k[5:]}), unwatched" for k, _ in at if k.startswith("spin ")}}
    busy = roofline.busy_words(res["busy"])
    lines = [f"300 small calls each; each figure the median over {res['rounds']} processes run in turn (each "
             f"process's own: the median of its repeats), {res['threads']} threads. Cores kept busy by other "
             f"processes before and after the run: {busy} (alone means an idle machine: rerun above 0.1). The fused "
             "gradient calls take one thread fewer beside a busy core (mfattn.kernel_threads); the autograd steps "
             "are torch's and keep their threads.", "",
             "| setting | other process | gradient calls | autograd steps | throttled when timed |",
             "|---|---|---:|---:|---:|"]
    lines += [f"| {label[k]} | {WAIT_CASES[c]} | {_fmt_s(r['grad_s'])} | {_fmt_s(r['autograd_s'])} | "
              f"{sum(r['throttled'])} of {len(r['throttled'])} |" for (k, c), r in at.items()]
    ratio = lambda a, b: " | ".join(f"{at[a][f] / at[b][f]:.2f}" for f in ("grad_s", "autograd_s"))  # noqa: E731
    lines += ["", "| ratio | grad | autograd |", "|---|---:|---:|",
              f"| idle: the package's choice over the runtime's default, both alone (at most 1.10) | "
              f"{ratio(('auto', 'none'), ('default', 'none'))} |",
              f"| busy later: the package's choice beside a core busy from after the import, over alone (at most 2.5) | "
              f"{ratio(('auto', 'later'), ('auto', 'none'))} |",
              f"| busy at start: beside a core busy from before the import, over alone (at most 2.5) | "
              f"{ratio(('auto', 'start'), ('auto', 'none'))} |",
              f"| busy at start, then idle: once that core is idle, over the runtime's default alone (at most 1.10) | "
              f"{ratio(('auto', 'ended'), ('default', 'none'))} |",
              f"| the same for PASSIVE, which a process busy at import kept for its life before the watch | "
              f"{ratio(('passive', 'none'), ('default', 'none'))} |"]
    spins = sorted((k for k in label if k.startswith("spin ")), key=lambda k: int(k[5:]))
    if spins:
        lines += ["", "| spin count, unwatched | idle: over the runtime's default, grad | autograd | beside a busy core "
                  "over alone, grad | autograd |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {k[5:]} | {ratio((k, 'none'), ('default', 'none'))} | {ratio((k, 'later'), (k, 'none'))} |"
                  for k in spins]
    return "\n".join(lines) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--roofline", action="store_true",
                   help="measure this machine's ceilings (FMA peak, the fused pass's exponential, memory bandwidth, "
                        "the fused pass's loop form) and time the fused full gradient against them at d_k, L = "
                        "(2, 8), (4, 16), (8, 32), (16, 64), float32 and float64 (mfattn.companion.roofline; about "
                        "a minute); with --out writes roofline.json, .md, .png")
    p.add_argument("--tokens", action="store_true",
                   help="time the attention sums of chapter 06's token systems, fused pass against the torch path, "
                        "at its shapes (float64; a few seconds); with --out writes tokens.json and tokens.md")
    p.add_argument("--wait", action="store_true",
                   help="time many small calls under each OpenMP wait setting, alone and beside a busy core (started after "
                        "the import, or before it, ending or not), each in fresh processes, five rounds in turn "
                        "(about five minutes); with --out writes wait.json and wait.md")
    p.add_argument("--spins", default="", metavar="N,N",
                   help="with --wait: spin counts (GOMP_SPINCOUNT, unwatched) to time beside the package's choice")
    p.add_argument("--report", default=None, metavar="JSON",
                   help="print (and with --out rewrite) the table and plot of a saved result; measures nothing")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--Ns", default=None, help="comma-separated head counts (default: 16 .. 16384 on CPU, "
                   "16 .. 1048576 on CUDA, powers of two)")
    p.add_argument("--task", default="teacher")
    for flag, default in (("--n-data", 16), ("--L", 8), ("--d-x", 4), ("--d-k", 2)):
        p.add_argument(flag, type=int, default=default)
    p.add_argument("--repeats", type=int, default=None, help="timed calls per figure (default 5; 15 with --roofline)")
    p.add_argument("--loop-max-seconds", type=float, default=20.0,
                   help="stop the per-head loop once its repeats take longer than this")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurements")
    p.add_argument("--no-compile-time", action="store_true",
                   help="skip timing the fused kernels' first call in fresh processes (about a minute)")
    p.add_argument("--budgets", default="", help="comma-separated chunk budgets in bytes, timed at the largest N")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="profile one engine evaluation with N heads")
    p.add_argument("--out", default=None, help="folder for NAME.json, NAME.md, NAME.png (default: print only)")
    p.add_argument("--name", default=None, help="file stem (default: the device type)")


def main(args) -> dict:
    fresh = not (args.report or args.wait)  # --wait times fresh processes of the system's defaults
    allocator = roofline.steady_allocator() if fresh else None
    if args.report:
        res, name = json.loads(Path(args.report).read_text()), Path(args.report).stem
    elif args.tokens:
        res, name = run_tokens(repeats=args.repeats or 15), "tokens"
    elif args.wait:
        res, name = run_wait(repeats=args.repeats or 5, spins=[int(n) for n in args.spins.split(",") if n]), "wait"
    elif args.roofline:
        res, name = roofline.run_roofline(repeats=args.repeats or 15), "roofline"
    else:
        if args.device == "cuda" and not torch.cuda.is_available():
            raise SystemExit("mfattn bench: --device cuda, but no CUDA device is available")
        top = 20 if args.device == "cuda" else 14
        Ns = [int(v) for v in args.Ns.split(",")] if args.Ns else [2**k for k in range(4, top + 1)]
        res = run_benchmark(Ns=Ns, task=args.task, n_data=args.n_data, L=args.L, d_x=args.d_x, d_k=args.d_k,
                            device=args.device, dtype=args.dtype, repeats=args.repeats or 5,
                            loop_max_seconds=args.loop_max_seconds, memory=not args.no_memory,
                            compile_time_too=not args.no_compile_time, profile=args.profile,
                            budgets=[int(float(b)) for b in args.budgets.split(",") if b])
        name = args.device
    if fresh:
        res["allocator"] = allocator
    _write(res, args, name)
    if not args.report and (warn := warning(res)):  # a token or roofline run has no figure's spread
        print("mfattn bench: " + warn.replace("**", ""), file=sys.stderr)
    return res


def _write(res: dict, args, default_name: str) -> None:
    # a token run, a roofline run (--roofline) or an N sweep
    text, draw = ((tokens_table(res), None) if res.get("kind") == "tokens" else (wait_table(res), None)
                  if res.get("kind") == "wait" else
                  (roofline.table(res), roofline.plot) if "ceilings" in res else (table(res), plot))
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        stem = Path(args.out) / (args.name or default_name)
        Path(f"{stem}.json").write_text(json.dumps(res, indent=1))
        Path(f"{stem}.md").write_text(text)
        if draw:
            draw(res, Path(f"{stem}.png"))
        print(f"wrote {stem}.json, .md" + (", .png" if draw else ""))
