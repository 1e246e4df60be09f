"""The device check of the Triton head pass (``make device-check``), for a GPU machine that has torch
and triton (no Jupyter, no venv needed)::

    PYTHONPATH=src python tools/device_check.py --out device-check

Five parts, each in its own process under its own time limit (a part that runs over is stopped and
recorded as ``timeout``; the next part starts on time), about 8 minutes in all:

* ``env``: torch, triton, CUDA and the card;
* ``oracle``: ``tests/triton_oracle.py --device cuda``, the compiled kernels against the float64 torch
  engine and a closed form (one JSON line per check, so a part stopped half-way keeps what it checked);
* ``bench``: the full gradient (logits, residual, ``grad Phi`` of every head) on the torch path
  (``HeadModel(fused=False)``) and on the Triton path (the model's default on CUDA), at N = 1024,
  16384, 65536, 262144 heads, 16 sequences, L = 8, d_x = 4, d_k = 2, d_v = 5, float32 then float64,
  timed by :func:`mfattn.companion.bench.time_call`; each time also as a fraction of the card's roofline,
  measured in the same process: the multiply-add rate (the larger of a float matrix product and a
  Triton multiply-add kernel), the exponential rate (a Triton kernel) and the copy bandwidth,
  against the work of :func:`mfattn.companion.roofline.counts`;
* ``steps``: one step of each kind of work every chapter repeats, at its ``paper`` profile's sizes
  (``tools/chapter_steps.py``, the inventories in ``tools/steps``), and each chapter's paper profile
  estimated from them (count x time of one step); chapter 02 first, a step not started by the part's
  deadline is listed as not timed;
* ``pytest``: ``tests/test_triton.py`` and ``tests/test_cuda.py`` (when pytest is installed).

Writes into ``--out``: ``device_check.json`` (every part: status, seconds, limit, results),
``summary.txt``, and each part's own output (``oracle.jsonl``, ``bench.json``, ``steps.json``, ``pytest.txt``).
``--dry-run`` runs the same code on the CPU in seconds (Triton's interpreter, tiny sizes, chapter 04's
ci steps, no pytest):
``tests/test_triton.py`` runs it so.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Each part's time limit in seconds; their sum stays under the budget (8 minutes) with a margin.
LIMITS = {"env": 20.0, "oracle": 130.0, "bench": 110.0, "steps": 130.0, "pytest": 80.0}
BUDGET = 470.0
#: The benchmark's shapes (those of ``python -m mfattn bench`` and of the book's benchmark page).
NS = (1024, 16384, 65536, 262144)
SHAPE = dict(n_data=16, L=8, d_x=4, d_k=2, d_v=5)
#: The order in which the steps part times the chapters: the headline chapter first.
STEP_ORDER = ("02", "01", "03", "04", "05", "06", "07", "08", "09")


# ------------------------------------------------------------------------------------ the parts
def part_env(out: Path, dry: bool) -> dict:
    import importlib.metadata as md

    import torch

    info = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda_available": torch.cuda.is_available(),
            "cuda": torch.version.cuda, "dry_run": dry}
    try:
        info["triton"] = md.version("triton")
    except md.PackageNotFoundError:
        info["triton"] = None
    try:
        import pytest  # noqa: F401

        info["pytest"] = True
    except ImportError:
        info["pytest"] = False
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info["gpu"] = f"{p.name}, {p.total_memory / 2**30:.0f} GiB, {p.multi_processor_count} SMs"
    return info


def _ceiling_kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def fma_kernel(out, a, b, reps, BLOCK: tl.constexpr):
        # four independent multiply-add chains per lane; a and b are arguments, so nothing folds
        i = tl.arange(0, BLOCK)
        dt = out.dtype.element_ty
        x0 = i.to(dt) * 1e-3
        x1 = x0 + 0.25
        x2 = x0 + 0.5
        x3 = x0 + 0.75
        for _ in range(reps):
            x0 = x0 * a + b
            x1 = x1 * a + b
            x2 = x2 * a + b
            x3 = x3 * a + b
        tl.store(out + tl.program_id(0) * BLOCK + i, x0 + x1 + x2 + x3)

    @triton.jit
    def exp_kernel(out, c, reps, BLOCK: tl.constexpr):
        # four independent chains y <- exp(c - y) per lane (c - y stays in [c - e^c, c])
        i = tl.arange(0, BLOCK)
        dt = out.dtype.element_ty
        y0 = i.to(dt) * 1e-4
        y1 = y0 + 0.1
        y2 = y0 + 0.2
        y3 = y0 + 0.3
        for _ in range(reps):
            y0 = tl.exp(c - y0)
            y1 = tl.exp(c - y1)
            y2 = tl.exp(c - y2)
            y3 = tl.exp(c - y3)
        tl.store(out + tl.program_id(0) * BLOCK + i, y0 + y1 + y2 + y3)

    return fma_kernel, exp_kernel


def ceilings(dev, dtype, dry: bool) -> dict:
    """The card's rates in ``dtype``, measured now: ``fma`` (FLOP/s, a multiply-add counted two: the larger
    of a matrix product and the Triton multiply-add kernel), ``exp`` (exponentials per second, Triton),
    ``bandwidth`` (bytes per second, a copy read + write)."""
    import torch

    from mfattn.companion import bench

    fma_kernel, exp_kernel = _ceiling_kernels()
    if dry:
        programs, block, reps = 1, 16, 4
    else:
        programs, block, reps = 64 * torch.cuda.get_device_properties(dev).multi_processor_count, 512, 512
    buf = torch.empty(programs * block, dtype=dtype, device=dev)
    rates = {}
    t = bench.time_call(lambda: fma_kernel[(programs,)](buf, 0.999, 0.001, reps, BLOCK=block), dev, 3)
    rates["fma_triton"] = 2 * 4 * programs * block * reps / t
    t = bench.time_call(lambda: exp_kernel[(programs,)](buf, -0.5, reps, BLOCK=block), dev, 3)
    rates["exp"] = 4 * programs * block * reps / t
    if dry:  # bench.device_peaks sizes its operands for a real device
        a = torch.randn(64, 64, dtype=dtype)
        x = torch.empty(1 << 16, dtype=torch.float32)
        rates["matmul"] = 2 * 64**3 / bench.time_call(lambda: a @ a, dev, 3)
        rates["bandwidth"] = 2 * x.numel() * 4 / bench.time_call(lambda: x.clone(), dev, 3)
    else:
        pk = bench.device_peaks(dev, dtype)
        rates["matmul"], rates["bandwidth"] = pk["matmul_flops"], pk["copy_bytes_per_s"]
    rates["fma"] = max(rates["fma_triton"], rates["matmul"])
    return rates


def part_bench(out: Path, dry: bool, deadline: float) -> dict:
    """Torch path against Triton path, full gradient, with the roofline; writes bench.json after each row."""
    import torch

    import mfattn  # noqa: F401
    from mfattn.models import fused_cuda
    from mfattn.companion import bench
    from mfattn.companion.roofline import counts
    from mfattn.models.model import HeadModel

    dev = torch.device("cpu" if dry else "cuda")
    Ns, n_data, repeats = ((2, 5), 2, 1) if dry else (NS, SHAPE["n_data"], 5)
    res = {"device": str(dev), "shape": {**SHAPE, "n_data": n_data}, "Ns": list(Ns), "repeats": repeats,
           "block": fused_cuda.BLOCK, "ceilings": {}, "rows": [], "skipped": []}
    if not dry:
        res["gpu"] = torch.cuda.get_device_name(dev)
        res["tf32"] = torch.backends.cuda.matmul.allow_tf32

    def save():
        (out / "bench.json").write_text(json.dumps(res, indent=1))

    for name in ("float32", "float64"):
        dt = getattr(torch, name)
        if time.monotonic() > deadline:
            res["skipped"].append(f"{name}: out of time")
            continue
        res["ceilings"][name] = ceilings(dev, dt, dry)
        save()
        task = bench.problem("teacher", n_data, SHAPE["L"], SHAPE["d_x"], SHAPE["d_k"], dt, dev)
        model, X, Y = task.model, task.data.X, task.data.Y
        torch_path = HeadModel(model.W_out, model.d_k, fused=False)
        if dry:  # the interpreter on CPU tensors: the model's own fused path there is numba's, so call the kernels
            def triton_grad(heads, w):
                B, L = X.shape[:2]
                z = fused_cuda.head_sum(X, heads, w, model.d_k) @ model.W_out
                G = (torch.softmax(z, -1) - Y) @ model.W_out.T / (B * L)
                return fused_cuda.head_pass(X, G, heads, model.d_k)[0]
            dispatch = "direct calls (dry run)"
        else:
            default = HeadModel(model.W_out, model.d_k)
            dispatch = getattr(default._kernels, "__name__", "torch path")
            triton_grad = lambda heads, w: default.grad_phi(X, Y, heads, w)  # noqa: E731
        c = counts(SHAPE["L"], SHAPE["d_x"], SHAPE["d_k"], SHAPE["d_v"], torch.finfo(dt).bits // 8)
        ceil = res["ceilings"][name]
        g = torch.Generator().manual_seed(1)
        for N in Ns:
            if time.monotonic() > deadline:
                res["skipped"].append(f"{name} N={N}: out of time")
                continue
            heads = (0.5 * torch.randn(N, model.d_omega, generator=g, dtype=torch.float64)).to(device=dev, dtype=dt)
            w = torch.full((N,), 1.0 / N, dtype=dt, device=dev)
            ref = torch_path.grad_phi(X, Y, heads, w)
            got = triton_grad(heads, w)
            bounds = {"fma": c["flops"] / ceil["fma"], "exp": c["exps"] / ceil["exp"],
                      "memory": c["bytes"] / ceil["bandwidth"]}
            row = {"dtype": name, "N": N, "dispatch": dispatch,
                   "agree": float((got - ref).abs().max() / ref.abs().max()),
                   "roof_s": N * n_data * max(bounds.values()), "bound": max(bounds, key=bounds.get)}
            for path, fn in (("torch", lambda: torch_path.grad_phi(X, Y, heads, w)),
                             ("triton", lambda: triton_grad(heads, w))):
                row[f"{path}_s"] = bench.time_call(fn, dev, repeats)
                row[f"{path}_fraction"] = row["roof_s"] / row[f"{path}_s"]
                row[f"{path}_gflops"] = c["flops"] * N * n_data / row[f"{path}_s"] / 1e9
            row["speedup"] = row["torch_s"] / row["triton_s"]
            res["rows"].append(row)
            save()
            del heads, ref, got
    save()
    return res


def _chapter_steps():
    """tools/chapter_steps.py as a module (its table of chapter estimates)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("chapter_steps", ROOT / "tools" / "chapter_steps.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------------------- the driver
def run_part(cmd: list[str], limit: float, env: dict, log: Path | None) -> dict:
    """Run ``cmd`` in its own process group for at most ``limit`` seconds; its output goes to ``log``."""
    t0 = time.monotonic()
    with open(log, "w") if log else open(os.devnull, "w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=max(0.0, limit))
            status = "ok" if rc == 0 else f"failed (exit {rc})"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the group of the process started here, and only it
            proc.wait()
            status = "timeout"
    return {"status": status, "seconds": round(time.monotonic() - t0, 2), "limit": round(limit, 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for device_check.json, summary.txt and each part's output")
    p.add_argument("--dry-run", action="store_true", help="on the CPU, through Triton's interpreter, tiny sizes")
    p.add_argument("--limits", default="", help="override time limits, e.g. oracle=60,bench=100 (seconds)")
    p.add_argument("--part", default=None, help=argparse.SUPPRESS)  # internal: run one part in this process
    p.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    if a.part == "bench":  # the child process of the bench part
        part_bench(out, a.dry_run, a.deadline or float("inf"))
        return 0

    limits = dict(LIMITS)
    for item in filter(None, a.limits.split(",")):
        k, _, v = item.partition("=")
        if k not in limits:
            raise SystemExit(f"--limits: unknown part {k!r} (parts: {', '.join(limits)})")
        limits[k] = float(v)
    start = time.monotonic()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    if a.dry_run:
        env["TRITON_INTERPRET"] = "1"
    report = {"dry_run": a.dry_run, "budget_s": BUDGET, "parts": {}}

    def left(name):  # the part's limit, cut to what the budget has left
        return max(0.0, min(limits[name], BUDGET - (time.monotonic() - start)))

    t0 = time.monotonic()
    try:
        report["parts"]["env"] = {"status": "ok", **part_env(out, a.dry_run)}
    except Exception as e:  # noqa: BLE001  a broken install is a result to report
        report["parts"]["env"] = {"status": f"failed ({type(e).__name__}: {e})"}
    report["parts"]["env"]["seconds"] = round(time.monotonic() - t0, 2)

    py = sys.executable
    oracle = [py, "tests/triton_oracle.py", "--device", "cpu" if a.dry_run else "cuda"] + (["--quick"] if a.dry_run else [])
    r = run_part(oracle, left("oracle"), env, out / "oracle.jsonl")
    lines = [json.loads(x) for x in (out / "oracle.jsonl").read_text().splitlines() if x.startswith("{")]
    checks = [x for x in lines if "name" in x]
    r["interpreted"] = next((x.get("interpreted") for x in lines if x.get("summary")), None)
    r.update(checks=len(checks), failed=[c["name"] for c in checks if not c["ok"]],
             worst={c["name"]: c["err"] for c in sorted(checks, key=lambda c: -c["err"] / max(c["tol"], 1e-300))[:3]})
    report["parts"]["oracle"] = r

    limit = left("bench")
    r = run_part([py, __file__, "--part", "bench", "--out", str(out), "--deadline",
                  str(time.monotonic() + 0.8 * limit)] + (["--dry-run"] if a.dry_run else []),
                 limit, env, out / "bench.log")
    # the child's deadline is on this clock: time.monotonic() is system-wide on Linux
    if (out / "bench.json").exists():
        r["results"] = json.loads((out / "bench.json").read_text())
    report["parts"]["bench"] = r

    limit = left("steps")
    steps = [py, str(ROOT / "tools" / "chapter_steps.py"), "--out", str(out), "--deadline",
             str(time.monotonic() + 0.85 * limit)]
    steps += ["--profile", "ci", "--device", "cpu", "--chapters", "04", "--reps", "1"] if a.dry_run else \
        ["--profile", "paper", "--device", "cuda", "--reps", "1", "--chapters", ",".join(STEP_ORDER)]
    r = run_part(steps, limit, env, out / "steps.log")
    if (out / "steps.json").exists():
        r["results"] = json.loads((out / "steps.json").read_text())
    report["parts"]["steps"] = r

    if a.dry_run:
        report["parts"]["pytest"] = {"status": "skipped (dry run)"}
    elif not report["parts"]["env"].get("pytest"):
        report["parts"]["pytest"] = {"status": "skipped (pytest is not installed)"}
    else:
        report["parts"]["pytest"] = run_part([py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                                              "tests/test_triton.py", "tests/test_cuda.py"],
                                             left("pytest"), env, out / "pytest.txt")
        tail = (out / "pytest.txt").read_text().strip().splitlines()
        report["parts"]["pytest"]["last_line"] = tail[-1] if tail else ""
    report["seconds"] = round(time.monotonic() - start, 2)
    (out / "device_check.json").write_text(json.dumps(report, indent=1))
    text = summary(report)
    (out / "summary.txt").write_text(text)
    print(text)
    return 0 if all(v["status"].startswith(("ok", "skipped")) for v in report["parts"].values()) else 1


def summary(report: dict) -> str:
    """The report as text: each part's status and time, the oracle's worst checks, the benchmark table."""
    env = report["parts"]["env"]
    lines = [f"device check{' (dry run)' if report['dry_run'] else ''}: {report['seconds']:.0f} s of "
             f"{report['budget_s']:.0f}; {env.get('gpu', 'no GPU')}; torch {env.get('torch')}, triton {env.get('triton')}", ""]
    for name, r in report["parts"].items():
        lines.append(f"{name:7s} {r['status']}" + (f" in {r['seconds']:.1f} s (limit {r['limit']:.1f} s)" if "limit" in r else ""))
    o = report["parts"]["oracle"]
    lines += ["", f"oracle: {o.get('checks', 0)} checks, {len(o.get('failed', []))} failed"]
    lines += [f"  failed: {n}" for n in o.get("failed", [])[:10]]
    lines += [f"  worst: {n}: {e:.2e}" for n, e in o.get("worst", {}).items()]
    res = report["parts"]["bench"].get("results")
    if res:
        lines += ["", f"full gradient, {res['shape']['n_data']} sequences, L = {res['shape']['L']}, d_x = "
                  f"{res['shape']['d_x']}, d_k = {res['shape']['d_k']}, d_v = {res['shape']['d_v']}; median of "
                  f"{res['repeats']} calls; roofline: N B max(flops / fma, exps / exp, bytes / bandwidth)"]
        for name, c in res["ceilings"].items():
            lines.append(f"  {name} ceilings: fma {c['fma'] / 1e12:.3g} TFLOP/s (matmul {c['matmul'] / 1e12:.3g}, "
                         f"triton {c['fma_triton'] / 1e12:.3g}), exp {c['exp'] / 1e9:.3g} G/s, "
                         f"copy {c['bandwidth'] / 1e9:.3g} GB/s")
        lines += ["", "| dtype | N | torch path (ms) | of roofline | Triton (ms) | of roofline | speed-up | agree | bound |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in res["rows"]:
            lines.append(f"| {r['dtype']} | {r['N']} | {1e3 * r['torch_s']:.3g} | {r['torch_fraction']:.1%} | "
                         f"{1e3 * r['triton_s']:.3g} | {r['triton_fraction']:.1%} | {r['speedup']:.2f}x | "
                         f"{r['agree']:.1e} | {r['bound']} |")
        lines += [f"  skipped: {s}" for s in res.get("skipped", [])]
        if res["rows"]:
            lines.append(f"  the Triton path's calls went through: {res['rows'][0]['dispatch']}")
    steps = report["parts"].get("steps", {}).get("results")
    if steps:
        lines += ["", _chapter_steps().table(steps).rstrip()]
        why = [f"  not timed, {c['name'][:2]}: {w}" for c in steps["chapters"].values()
               for w in [*c["skipped"], *(f"{q}: not reached (the part's time limit)" for q in c.get("pending", ()))]]
        lines += why[:12] + ([f"  ... and {len(why) - 12} more (steps.json)"] if len(why) > 12 else [])
    pt = report["parts"]["pytest"]
    if pt.get("last_line"):
        lines += ["", f"pytest: {pt['last_line']}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
