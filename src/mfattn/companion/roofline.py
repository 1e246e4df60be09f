"""The machine's own ceilings, and the fused head pass against them (``python -m mfattn bench --roofline``).

A full gradient on the CPU is the fused head pass of :mod:`mfattn.models.fused`: a forward sweep for
the logits (8) and a second sweep for ``grad Phi`` (13), each rebuilding every head's causal softmax
(6) row by row. Three resources can bound it, and this module measures each in the same run, on the
same cores, with a kernel that the compiler vectorises:

* the multiply-add units: :func:`peak_flops`, independent multiply-add chains on 128 accumulators per
  thread, contracted to FMAs (fast-math ``contract``), so the rate is the cores' FMA peak;
* the exponential: :func:`exp_rate`, the fused pass's own exponential
  (``mfattn.models.fused.exp_parts`` and the power of two in the exponent bits), the same code,
  on lanes held in L1;
* memory: :func:`bandwidth`, a STREAM triad over arrays far larger than the last-level cache.

:func:`counts` gives the work one head and one sequence ask of a full gradient, as the fused pass
executes it: floating-point operations (a multiply-add is two; the exponentials' polynomials are not
counted here, they have their own roof), exponentials, and the bytes that must cross memory. The
roofline time of ``N`` heads on ``B`` sequences is the largest of ``work / rate`` over the three
resources, and the fused pass's *fraction of the roofline* is that time over its measured time.

A fourth, measured ceiling explains what the three do not: :func:`loop_form_rate`, the rate of the
fused pass's own statement form, a multiply-add loop over the heads of one block that reads its
operands from, and writes its accumulator to, L1, with the short outer trip counts of the chapters'
shapes: with the block's width read at run time (the form of every kernel before the widths were
compiled in, 32 lanes) and compiled in (the form of the full blocks, 128 lanes at 1024 heads). The
benchmark page shows both.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import statistics
import timeit
from pathlib import Path

import numpy as np
import torch

from .. import THREAD_POLICY, busy_elsewhere
from ..models import fused as _fused

__all__ = ["LANES", "peak_flops", "fma_values", "exp_rate", "bandwidth", "loop_form_rate", "counts", "fused_exp",
           "run_roofline", "steady_allocator", "allocator_words", "wait_words", "busy_words", "ALLOCATOR", "table",
           "plot"]

#: Independent accumulators per thread of the FMA kernel: enough chains to cover the FMA latency on
#: two pipes (8 registers of 16 float32, 16 of 8 float64 with AVX-512; twice as many with AVX2).
LANES = 128

if _fused.available():
    from numba import get_num_threads, njit, prange

    from ..models.fused import exp_parts

    @njit(parallel=True, fastmath={"contract"}, cache=True)
    def _fma_kernel(reps, a, b, x0, out):  # pragma: no cover - compiled
        # out[t] = sum_i x_i after reps steps x_i <- a x_i + b, on each thread t
        for t in prange(out.shape[0]):
            x = x0.copy()
            for r in range(reps):
                for i in range(LANES):
                    x[i] = x[i] * a + b
            out[t] = x.sum()

    # not cached: numba keys a cache on this file alone, and the kernel compiles fused.exp_parts into
    # itself, so a cached copy would outlive a change of the exponential (it did once, in float32)
    @njit(parallel=True, cache=False, error_model="numpy")
    def _exp_kernel(reps, x, C, P, out, last):  # pragma: no cover - compiled
        # reps rounds of y_h = e^(x_h - y_h) over the lanes h, each thread on its own lanes, as
        # _softmax_row computes it: (p, k) = exp_parts, 2^-k in the exponent bits, y = p 2^-k
        H = x.shape[0]
        for t in prange(out.shape[0]):
            y = np.zeros(H, x.dtype)
            p = np.empty(H, x.dtype)
            pw = np.empty(H + 2, P.dtype)
            bias, shift = P[0], P[1]
            bits = pw[2:]
            two = bits.view(x.dtype)
            for r in range(reps):
                for h in range(H):
                    v, kf = exp_parts(x[h] - y[h], C)
                    p[h] = v
                    bits[h] = (bias - int(kf)) << shift
                for h in range(H):
                    y[h] = p[h] * two[h]
            out[t] = y.sum()
            if t == 0:
                last[:] = y

    @njit(parallel=True, cache=True)
    def _triad(a, b, c, s):  # pragma: no cover - compiled
        for i in prange(a.shape[0]):
            a[i] = b[i] + s * c[i]

    def _form_kernel(width):
        # the fused pass's statement form: acc[k, h] += a[j, h] b[k, h] over n x n rows of H lanes, in L1,
        # with H = width compiled in (0: read from a at run time), as fused._head_kernels
        @njit(parallel=True, cache=True, error_model="numpy")
        def form(reps, a, b, out):  # pragma: no cover - compiled
            n, H = a.shape[0], width if width else a.shape[1]
            for t in prange(out.shape[0]):
                acc = np.zeros((n, H), a.dtype)
                for r in range(reps):
                    for k in range(n):
                        for j in range(n):
                            for h in range(H):
                                acc[k, h] += a[j, h] * b[k, h]
                out[t] = acc.sum()
        return form

    _FORMS = {w: _form_kernel(w) for w in (0, *_fused.COMPILED_WIDTHS)}


def machine(device) -> dict:
    """The machine a benchmark ran on: CPU model and logical cores (and the GPU), torch, Python, threads and
    how they wait (``mfattn.THREAD_POLICY``: small calls take about twice as long when they sleep)."""
    info = {"torch": torch.__version__, "python": platform.python_version(), "threads": torch.get_num_threads(),
            "wait": THREAD_POLICY}
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    names = [ln.split(":", 1)[1].strip() for ln in cpuinfo if ln.startswith("model name")]
    info["cpu"] = f"{names[0]} ({len(names)} logical cores)" if names else platform.processor()
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        info["gpu"] = f"{p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs"
        info["tf32"] = torch.backends.cuda.matmul.allow_tf32
    return info


def _threads() -> int:
    """numba's threads, set as the fused pass sets them; a RuntimeError where numba is missing."""
    if not _fused.available():
        raise RuntimeError("the roofline kernels need numba, which is not importable here")
    _fused.set_threads()
    return get_num_threads()


def _rate(call, work: float, seconds: float) -> float:
    """Best of three timed calls, each sized to about ``seconds`` (a ceiling is the best the machine does)."""
    call(1)
    reps = 1
    # grow the call until it lasts long enough that waking the threads does not count
    while (t := timeit.timeit(lambda: call(reps), number=1)) < seconds / 2:
        reps *= 2 if t <= 0 else min(64, max(2, int(seconds / t)))
    return work * reps / min(timeit.repeat(lambda: call(reps), repeat=3, number=1))


def peak_flops(dtype=np.float32, *, seconds: float = 0.2) -> float:
    """Floating-point operations per second of contracted multiply-adds on every thread: the FMA peak.

    Parameters
    ----------
    dtype : numpy dtype
        ``np.float32`` or ``np.float64``.
    seconds : float
        Length of one timed call.

    Returns
    -------
    float
        FLOP/s over all of numba's threads (a multiply-add counts two).

    Examples
    --------
    >>> from mfattn.companion import roofline
    >>> roofline.peak_flops(seconds=0.01) > 1e9
    True
    """
    return _rate(lambda reps: fma_values(16 * reps, dtype), 2 * LANES * 16 * _threads(), seconds)


def fma_values(reps: int, dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """``reps`` steps of the FMA kernel on every thread: ``(per-thread sums, x0)``, for a test against
    the closed form; :func:`peak_flops` times it."""
    dtype = np.dtype(dtype)
    x0, out = np.linspace(0, 1, LANES).astype(dtype), np.zeros(_threads(), dtype)
    _fma_kernel(reps, dtype.type(0.999), dtype.type(0.001), x0, out)
    return out, x0


def fused_exp(x: np.ndarray, reps: int = 1) -> np.ndarray:
    """``reps`` rounds of ``y <- exp(x - y)`` from ``y = 0`` by the fused pass's exponential (one round:
    ``exp(x)``), on one thread's lanes; for the tests of the exponential kernel.

    Parameters
    ----------
    x : numpy.ndarray
        1-D, float32 or float64, every entry <= 0.
    reps : int
        Rounds.

    Returns
    -------
    numpy.ndarray
        The last round's values, the dtype of ``x``.

    Examples
    --------
    >>> import numpy as np
    >>> from mfattn.companion import roofline
    >>> x = -np.linspace(0, 20, 64)
    >>> bool(np.allclose(roofline.fused_exp(x), np.exp(x), rtol=1e-15, atol=0))
    True
    """
    _threads()
    x = np.ascontiguousarray(x)
    if x.ndim != 1 or x.dtype not in (np.float32, np.float64):
        raise ValueError(f"x: expected a 1-D float32 or float64 array, got {x.dtype} of shape {x.shape}")
    C, P = _fused.exp_constants(x.dtype.type)
    last = np.empty_like(x)
    _exp_kernel(reps, x, C, P, np.zeros(1, x.dtype), last)
    return last


def exp_rate(dtype=np.float32, *, lanes: int = 1024, seconds: float = 0.2) -> float:
    """Exponentials per second of the fused pass's own exponential on every thread, lanes in L1.

    Examples
    --------
    >>> from mfattn.companion import roofline
    >>> roofline.exp_rate(seconds=0.01) > 1e8
    True
    """
    dtype, T = np.dtype(dtype), _threads()
    C, P = _fused.exp_constants(dtype.type)
    def rate(n):
        x, out, last = -np.linspace(0.5, 10.0, n).astype(dtype), np.zeros(T, dtype), np.empty(n, dtype)
        return _rate(lambda reps: _exp_kernel(reps, x, C, P, out, last), n * T, seconds / 2)

    return max(rate(n) for n in (lanes, lanes + 16, lanes + 40, lanes + 72))  # other placements of the arrays


def bandwidth(*, n: int = 1 << 24, seconds: float = 0.3) -> float:
    """Memory bandwidth in bytes per second: a STREAM triad ``a = b + s c`` over three float64 arrays
    of ``n`` entries (3 x 128 MiB by default, far beyond the last-level cache), counted as STREAM
    counts it (three arrays of ``8 n`` bytes per pass).

    Examples
    --------
    >>> from mfattn.companion import roofline
    >>> roofline.bandwidth(n=1 << 16, seconds=0.01) > 1e8
    True
    """
    _threads()
    a, b, c = np.zeros(n), np.ones(n), np.full(n, 2.0)

    def call(reps):
        for _ in range(reps):
            _triad(a, b, c, 3.0)
    return _rate(call, 3 * 8 * n, seconds)


def loop_form_rate(dtype=np.float32, *, lanes: int | None = None, rows: int = 8, seconds: float = 0.2,
                   compiled: bool = False) -> float:
    """FLOP/s of the fused pass's statement form: ``acc[k, h] += a[j, h] b[k, h]`` over ``rows x rows``
    pairs of ``lanes`` heads (default the head kernels' block for the dtype, ``fused.block_width``),
    operands and accumulator in L1, every thread; with ``compiled``, the number of lanes is a constant
    of the compiled loop, as in the head kernels of the full widths (``lanes`` must be one of them).

    Examples
    --------
    >>> from mfattn.companion import roofline
    >>> roofline.loop_form_rate(seconds=0.01) > 1e8
    True
    """
    dtype, T, g = np.dtype(dtype), _threads(), np.random.default_rng(0)
    H = lanes or _fused.block_width(dtype)
    if compiled and not (H and H in _FORMS):
        raise ValueError(f"lanes: the widths compiled in are {sorted(w for w in _FORMS if w)}, got {H}")
    form = _FORMS[H if compiled else 0]
    def rate():
        a, b = (1e-3 * g.random((rows, H))).astype(dtype), (1e-3 * g.random((rows, H))).astype(dtype)
        out = np.zeros(T, dtype)
        return _rate(lambda reps: form(reps, a, b, out), 2 * rows * rows * H * T, seconds / 2)

    # fresh arrays each time: the rate depends on where they fall (alignment, aliasing)
    return max(rate() for _ in range(4))


def counts(L: int, d_x: int, d_k: int, d_v: int = 5, itemsize: int = 4) -> dict:
    """The work of one head on one sequence in a full gradient, as the fused pass executes it.

    With ``S = L (L + 1) / 2`` causal scores per head and sequence, and a multiply-add counted as two
    operations:

    * forward sweep (:func:`mfattn.models.fused.head_sum`): projections ``6 L d_x d_k``; each softmax
      row's scores, max, scaling, power of two, sum and division ``2 S d_k + 6 S - L``; ``A V``
      ``2 S d_k``; ``W_O`` and the weighted head sum ``2 L d_x (d_k + 1)``;
    * gradient sweep (:func:`mfattn.models.fused.head_pass`): the same projections and softmax rows,
      ``A V``, and the backward pass (``dAV``, ``Phi``, ``dW_O``, the softmax backward (4), ``dQ``,
      ``dK``, ``dV``, ``dW_Q``, ``dW_K``, ``dW_V``): in all ``18 L d_x d_k + 2 L d_k - L + 12 S d_k + 10 S``;
    * ``2 S`` exponentials (each sweep rebuilds the softmax);
    * bytes that must cross memory: the head read by each sweep and its gradient written,
      ``3 d_omega`` numbers; the sequence's tokens, residual and logits (``L (d_x + d_v)`` twice), shared by
      every head of a block (``fused.block_width``: 64 heads, the narrowest block of the passes) and counted once
      per block.

    Parameters
    ----------
    L, d_x, d_k, d_v : int
        Shapes (sequence length, token, key and label dimensions).
    itemsize : int
        Bytes per number (4 for float32, 8 for float64).

    Returns
    -------
    dict
        ``{"flops", "exps", "bytes"}`` per head and sequence (bytes as a float).

    Examples
    --------
    >>> from mfattn.companion.roofline import counts
    >>> counts(8, 4, 2)
    {'flops': 3472, 'exps': 72, 'bytes': 393.0}
    """
    for name, v in (("L", L), ("d_x", d_x), ("d_k", d_k), ("d_v", d_v), ("itemsize", itemsize)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name}: expected a positive integer, got {v!r}")
    S = L * (L + 1) // 2
    forward = 6 * L * d_x * d_k + (2 * S * d_k + 6 * S - L) + 2 * S * d_k + 2 * L * d_x * (d_k + 1)
    backward = 18 * L * d_x * d_k + 2 * L * d_k - L + 12 * S * d_k + 10 * S
    d_omega = 4 * d_x * d_k
    block = _fused.block_width(np.float32 if itemsize == 4 else np.float64)
    nbytes = itemsize * (3 * d_omega + 2 * L * (d_x + d_v) / block)
    return {"flops": forward + backward, "exps": 2 * S, "bytes": nbytes}


def _summary(ts: list) -> dict:
    """The median and quartiles of timed calls."""
    q1, _, q3 = statistics.quantiles(ts, n=4) if len(ts) > 1 else ts * 3
    return {"median_s": statistics.median(ts), "q1_s": q1, "q3_s": q3}


def run_roofline(*, shapes=((2, 8), (4, 16), (8, 32), (16, 64)), N: int = 1024, B: int = 16, d_x: int = 4,
                 d_v: int = 5, dtypes=("float32", "float64"), repeats: int = 15, blocks=(8, 16, 32, 64, 128),
                 progress: bool = True, seed: int = 0) -> dict:
    """Measure the ceilings and time the fused full gradient (and the torch path's) at each ``(d_k, L)``.

    Returns a JSON-ready dict: ``machine``, ``bandwidth``, ``ceilings`` per dtype (``fma``, ``exp``,
    ``loop_form``), ``rows`` (one per dtype and shape: counts, times, rates, the roofline time, its
    binding resource and the fused pass's fraction of it), and ``blocks`` (the fused pass at the bar
    shape with other head-block widths: the loop form's evidence).
    """
    from .._progress import progress_bar
    from ..models.model import HeadModel
    from ..models.tasks import make_task

    def grad(name, dk, L, fast):  # the engine's full gradient at one shape on one path, a call of no argument
        dt = getattr(torch, name)
        tk = make_task("teacher", n=B, seed=seed, dtype=dt, L=L, d_x=d_x, d_k=dk, d_v=d_v)
        g = torch.Generator().manual_seed(seed + 1)
        heads = (0.5 * torch.randn(N, tk.model.d_omega, generator=g, dtype=torch.float64)).to(dt)
        m = HeadModel(tk.model.W_out, tk.model.d_k, fused=fast)
        return functools.partial(m.grad_phi, tk.data.X, tk.data.Y, heads, torch.full((N,), 1.0 / N, dtype=dt))

    def timed(fn, k):  # k calls after two untimed ones
        return _summary(timeit.repeat(fn, repeat=k + 2, number=1)[2:])

    busy0 = busy_elsewhere(0.5)  # cores other processes keep busy, before and after: they move every figure
    bw = bandwidth()
    out = {"machine": machine(torch.device("cpu")), "N": N, "B": B, "d_x": d_x, "d_v": d_v, "repeats": repeats,
           "bandwidth": bw, "ceilings": {}, "rows": [], "blocks": []}
    for name in dtypes:
        dt = np.dtype(name)
        # the loop form of the full blocks at N heads (the width compiled in), and the run-time form at 32 lanes
        wide = _fused.block_width(dt, N)
        out["ceilings"][name] = {"fma": peak_flops(dt), "exp": exp_rate(dt), "lanes": wide,
                                 "loop_form": loop_form_rate(dt, lanes=wide, compiled=wide in _FORMS),
                                 "loop_form_runtime": loop_form_rate(dt, lanes=32)}
    work = [(name, dk, L) for name in dtypes for dk, L in shapes]
    for name, dk, L in progress_bar(work, enabled=progress, desc="roofline", leave=False):
        c = counts(L, d_x, dk, d_v, np.dtype(name).itemsize)
        ceil = out["ceilings"][name]
        bounds = {"fma": c["flops"] / ceil["fma"], "exp": c["exps"] / ceil["exp"], "memory": c["bytes"] / bw}
        row = {"dtype": name, "d_k": dk, "L": L, **c, "flops_per_exp": c["flops"] / c["exps"],
               "roof_s": N * B * max(bounds.values()), "bound": max(bounds, key=bounds.get),
               "fused": timed(grad(name, dk, L, True), repeats)}
        row["fused_flops"] = c["flops"] * N * B / row["fused"]["median_s"]
        row["fraction"] = row["roof_s"] / row["fused"]["median_s"]
        row["fraction_of_loop_form"] = row["fused_flops"] / ceil["loop_form"]
        # the same vector pipes run the multiply-adds and the exponentials' polynomials, so their times add
        row["form_exp_s"] = N * B * (c["flops"] / ceil["loop_form"] + c["exps"] / ceil["exp"])
        row["fraction_of_form_exp"] = row["form_exp_s"] / row["fused"]["median_s"]
        row["torch"] = timed(grad(name, dk, L, False), max(3, repeats // 3))
        row["torch_flops"] = c["flops"] * N * B / row["torch"]["median_s"]
        out["rows"].append(row)
    dk, L = shapes[0]
    flops = counts(L, d_x, dk, d_v)["flops"]
    for name in dtypes:
        fast = grad(name, dk, L, True)
        default = _fused.BLOCK, _fused.BLOCK_FLOAT32, _fused.WIDE_FROM
        _fused.WIDE_FROM = 1 << 62  # every width as asked, whatever the head count
        times = {H: [] for H in blocks}
        try:
            # in rotation, one call per width per round (the first untimed), so that a drift of the machine
            # (or of where a call's scratch arrays fall) reaches every width alike
            for _ in range(repeats + 1):
                for H in blocks:
                    _fused.BLOCK = _fused.BLOCK_FLOAT32 = H
                    times[H].append(timeit.timeit(fast, number=1))
        finally:
            _fused.BLOCK, _fused.BLOCK_FLOAT32, _fused.WIDE_FROM = default
        for H in blocks:
            t = _summary(times[H][1:])
            out["blocks"].append({"dtype": name, "block": H, **t, "compiled": H in _FORMS,
                                  "fused_flops": flops * N * B / t["median_s"],
                                  "loop_form": loop_form_rate(np.dtype(name), lanes=H, compiled=H in _FORMS)})
    out["busy"] = [busy0, busy_elsewhere(0.5)]
    return out


#: glibc malloc's thresholds while the benchmark runs (:func:`steady_allocator`): blocks up to 32 MiB come
#: from the heap, and up to 128 MiB of freed heap stays with the process.
ALLOCATOR = {"mmap_threshold": 32 << 20, "trim_threshold": 128 << 20}
_MALLOPT = {"mmap_threshold": -3, "trim_threshold": -1}  # mallopt's parameter numbers (malloc.h's M_*_THRESHOLD)


def steady_allocator() -> dict | None:
    """Fix glibc malloc's thresholds (:data:`ALLOCATOR`) for the rest of this process, so that a call's
    large temporaries are reused from one call to the next instead of mapped afresh, page by page.

    By default glibc moves its thresholds as blocks are freed, and gives memory back to the system
    when much is free at the top of its heap; whether a path's temporaries of a few megabytes then
    come back as fresh pages at every call depends on the process's history. The torch paths make
    such temporaries; the fused kernels do not. Left to the defaults, the torch path of the token
    sums at (64, 96, 2) took 0.9 to 7.3 ms in different processes (5,700 page faults per call in the
    slow ones, 8 to 25 in the fast), and the head pass's torch path at N = 1024 took 16.7 to 20.9 ms
    (15.7 ms in each of three processes with the thresholds fixed): its speed-ups told processes apart, not
    paths. The fixed thresholds are the torch path's steady state, so the fused path's speed-ups over
    it are the smaller ones. Results do not depend on it.

    Returns
    -------
    dict or None
        The settings applied, or None where there is no glibc ``mallopt`` or it refused them.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    return None if any(mallopt(_MALLOPT[k], v) != 1 for k, v in ALLOCATOR.items()) else dict(ALLOCATOR)


def allocator_words(res: dict) -> str:
    """What a result says of the allocator it ran under (:func:`steady_allocator`), as a sentence."""
    a = res.get("allocator", "unrecorded")
    if a == "unrecorded":
        return "Allocator: not recorded (a run from before it was)."
    if not a:
        return "Allocator: the system's defaults (no glibc mallopt here, or it refused the thresholds)."
    return (f"Allocator: glibc malloc's thresholds fixed (blocks up to {a['mmap_threshold'] >> 20} MiB from the heap, "
            f"up to {a['trim_threshold'] >> 20} MiB of freed heap kept), so temporaries are reused between calls.")


def _g(x):
    return f"{x / 1e9:.1f}"


def wait_words(m: dict) -> str:
    """How a run's threads waited, for its machine line (runs saved before it was recorded: nothing)."""
    return f" (waiting: {m['wait']})" if m.get("wait") else ""


def busy_words(busy) -> str:
    """A run's ``busy`` record (cores other processes kept busy, before and after) in words, as the
    benchmark's tables give it: "0.00 and unknown"; "not recorded" for runs saved before it was."""
    if not busy:
        return "not recorded"
    return " and ".join("unknown" if b is None else f"{b:.2f}" for b in busy)


def _pm(t: dict) -> str:
    """A median and its calls' spread (half the interquartile range, relative), unbreakable."""
    return f"{t['median_s'] * 1e3:.2f}\u00a0±{50 * (t['q3_s'] - t['q1_s']) / t['median_s']:.0f}%"


def table(res: dict) -> str:
    """The roofline run as Markdown: the ceilings; per dtype and shape the work and the roofline,
    then the measured passes; the block widths."""
    m = res["machine"]
    lines = [f"Machine: {m.get('cpu', '?')}, {m.get('threads', '?')} threads{wait_words(m)}, "
             f"torch {m.get('torch', '?')}. "
             f"N = {res['N']} heads, B = {res['B']} sequences, d_x = {res['d_x']}, d_v = {res['d_v']}; "
             f"median of {res['repeats']} calls (±: half the interquartile range). Memory bandwidth "
             f"(STREAM triad): {res['bandwidth'] / 1e9:.1f} GB/s. Cores kept busy by other processes before and "
             f"after the run: {busy_words(res.get('busy'))}. {allocator_words(res)}", "",
             "| dtype | FMA peak (GFLOP/s) | exponential (Gexp/s) | loop form, 32 lanes, width read at run time "
             "(GFLOP/s) | loop form, the pass's width compiled in (GFLOP/s) |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {name} | {_g(c['fma'])} | {c['exp'] / 1e9:.2f} | {_g(c['loop_form_runtime'])} | "
              f"{_g(c['loop_form'])} ({c['lanes']} lanes) |" for name, c in res["ceilings"].items()]
    lines += ["", "| dtype | d_k | L | FLOPs per head and sequence | exps | FLOPs per exp | bound | roofline (ms) "
              "| loop form + exp (ms) |", "|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    lines += [f"| {r['dtype']} | {r['d_k']} | {r['L']} | {r['flops']} | {r['exps']} | "
              f"{r['flops_per_exp']:.0f} | {r['bound']} | {r['roof_s'] * 1e3:.3f} | "
              f"{r['form_exp_s'] * 1e3:.2f} |" for r in res["rows"]]
    lines += ["", "| dtype | d_k | L | fused (ms) | fused (GFLOP/s) | of the roofline | of loop form + exp | "
              "torch path (ms) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['dtype']} | {r['d_k']} | {r['L']} | {_pm(r['fused'])} | {_g(r['fused_flops'])} | "
              f"{r['fraction']:.1%} | {r['fraction_of_form_exp']:.0%} | "
              f"{_pm(r['torch']) if 'torch' in r else '-'} |" for r in res["rows"]]
    if res.get("blocks"):
        lines += ["", "| dtype | heads per block | width | fused (ms) | fused (GFLOP/s) | loop form at that width "
                  "(GFLOP/s) |", "|---|---:|---|---:|---:|---:|"]
        lines += [f"| {b['dtype']} | {b['block']} | {'compiled in' if b.get('compiled') else 'read at run time'} | "
                  f"{_pm(b)} | {_g(b['fused_flops'])} | {_g(b['loop_form'])} |" for b in res["blocks"]]
    return "\n".join(lines) + "\n"


def plot(res: dict, path) -> None:
    """The roofline figure: GFLOP/s against FLOPs per exponential, one panel per dtype; the roofline
    (FMA peak, the exponential's rate), the loop form's ceiling and the loop form plus the exponential
    (their times add), and the fused and torch paths at each shape."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, NullLocator

    from . import plotting

    with matplotlib.rc_context(plotting.STYLE):
        fig, axes = plotting.panels(len(res["ceilings"]), height=3.8)
        axes = np.atleast_1d(axes)
        for ax, (name, c) in zip(axes, res["ceilings"].items()):
            rows = [r for r in res["rows"] if r["dtype"] == name]
            xs = np.array([r["flops_per_exp"] for r in rows])
            x = np.geomspace(xs.min() / 1.6, xs.max() * 1.6)
            ax.loglog(x, np.minimum(c["fma"], c["exp"] * x) / 1e9, "k-", lw=1.5, label="roofline: FMA peak, exponential")
            ax.loglog(x, np.full_like(x, c["loop_form"] / 1e9), "k--", lw=1,
                      label=f"loop form, {c.get('lanes', 32)} lanes")
            ax.loglog(x, 1 / (1 / c["loop_form"] + 1 / (c["exp"] * x)) / 1e9, "k:", lw=1.2,
                      label="loop form + exponential")
            ax.loglog(xs, [r["fused_flops"] / 1e9 for r in rows], "D", color="C0", label="fused pass")
            if all("torch_flops" in r for r in rows):
                ax.loglog(xs, [r["torch_flops"] / 1e9 for r in rows], "o", mfc="none", color="C1", label="torch path")
            for r in rows:
                ax.annotate(f"{r['d_k']}, {r['L']}", (r["flops_per_exp"], r["fused_flops"] / 1e9),
                            textcoords="offset points", xytext=(0, -9), ha="center", va="top", fontsize=7)
            ticks = [t for t in (20, 50, 100, 200, 500) if x[0] <= t <= x[-1]]
            ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xticks(ticks, [str(t) for t in ticks])
            lo, hi = ax.get_ylim()
            yt = [t for t in (1, 2, 5, 10, 20, 50, 100, 200, 500) if lo <= t <= hi]
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.set_yticks(yt, [str(t) for t in yt])
            ax.set_ylim(lo, hi)
            ax.set(xlabel="FLOPs per exponential (labels: $d_k$, $L$)", ylabel="GFLOP/s",
                   title=f"{name}, {res['N']} heads, {res['B']} sequences")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=3)
        fig.savefig(path, dpi=plotting.DPI)
        plt.close(fig)
