"""The Triton head pass (mfattn.models.fused_cuda) on the CPU, through Triton's interpreter.

The kernels run in a subprocess started with TRITON_INTERPRET=1: triton reads the variable when it
decorates a kernel, so a triton imported earlier in this pytest process (by another test) would
leave the kernels compiled for a GPU. The subprocess runs ``tests/triton_oracle.py``: the kernels
against the float64 torch engine (``HeadModel(fused=False)``) on a grid of shapes (single head,
single token and sequence of length one included), against a closed form for scores up to 1e4 (where
an unstable softmax overflows), and with large logits; float64 to 1e-10 and float32 to 1e-5,
relative to the largest entry. The same script runs on a GPU in ``tools/device_check.py``, whose
dry run (its CPU mode) is tested here too. Input validation, which runs before any kernel, is
tested in this process.
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mfattn.models import fused_cuda
from mfattn.models.model import HeadModel, fused_kernels

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton not installed")


def interpreter_env():
    src = str(ROOT / "src")
    return {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}


@pytest.fixture(scope="module")
def oracle():
    """The oracle script's checks and summary, run once through the interpreter."""
    run = subprocess.run([sys.executable, str(TESTS / "triton_oracle.py"), "--device", "cpu"], env=interpreter_env(),
                         capture_output=True, text=True, timeout=300)
    lines = [json.loads(x) for x in run.stdout.splitlines() if x.startswith("{")]
    assert lines and lines[-1].get("summary"), run.stdout[-2000:] + run.stderr[-4000:]
    return [x for x in lines if "name" in x], lines[-1], run.returncode


@needs_triton
def test_the_kernels_ran_in_the_interpreter(oracle):
    """Not a compiled kernel (the variable reached triton before its first import), on CPU tensors."""
    _, summary, _ = oracle
    assert summary["interpreted"] and summary["available"] and summary["device"] == "cpu"
    assert summary["kernel_type"] == "InterpretedFunction"


@needs_triton
def test_matches_the_float64_engine_on_every_shape(oracle):
    checks, summary, rc = oracle
    grid = [c for c in checks if " N=" in c["name"]]
    # 27 shapes x (head sum, grad, phi) at least, both dtypes, single head, token and sequence included
    assert len(grid) >= 27 * 3
    for needle in ("N=1 n=1 L=1", "N=17 n=4 L=8", "d_k=1", "d_k=2", "d_x=1", "d_x=5", "float32", "per-sample",
                   "grad=False gives None", "L=16 d_x=4 d_k=4", "N=33 n=2 L=32 d_x=4 d_k=8", "L=64 d_x=4 d_k=16"):
        assert any(needle in c["name"] for c in grid), needle
    bad = [(c["name"], c["err"], c["tol"]) for c in grid if not c["ok"]]
    assert bad == []
    tol = {c["name"]: c["tol"] for c in grid if "gives None" not in c["name"]}
    assert all(tol[n] == (1e-10 if n.startswith("float64") else 1e-5) for n in tol)


@needs_triton
def test_splits_closed_form_and_large_logits(oracle):
    checks, summary, rc = oracle
    for needle, least in (("split blocks", 14), ("closed form", 6), ("large logits", 14)):
        these = [c for c in checks if needle in c["name"]]
        assert len(these) == least and all(c["ok"] for c in these), these
    assert summary["failed"] == [] and rc == 0


@needs_triton
def test_device_check_dry_run(tmp_path):
    """tools/device_check.py's CPU mode: every part's record and output, the benchmark's rows with their
    roofline fractions, chapter 04's steps and its estimate; a part past its limit is stopped and recorded
    as such, and the next one runs."""
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "device_check.py"), "--dry-run", "--out", str(tmp_path),
                          "--limits", "oracle=0.3"], env=interpreter_env(), capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    report = json.loads((tmp_path / "device_check.json").read_text())
    parts = report["parts"]
    assert run.returncode == 1  # the stopped part fails the check
    assert parts["env"]["status"] == "ok" and parts["env"]["dry_run"]
    assert parts["oracle"]["status"] == "timeout" and parts["oracle"]["seconds"] < 5
    assert parts["bench"]["status"] == "ok", (tmp_path / "bench.log").read_text()[-3000:]
    assert parts["pytest"]["status"].startswith("skipped")
    res = parts["bench"]["results"]
    assert [(r["dtype"], r["N"]) for r in res["rows"]] == [(d, N) for d in ("float32", "float64") for N in res["Ns"]]
    for r in res["rows"]:
        assert r["agree"] < (1e-5 if r["dtype"] == "float32" else 1e-12)
        assert r["torch_s"] > 0 and r["triton_s"] > 0 and r["bound"] in ("fma", "exp", "memory")
        assert r["triton_fraction"] == pytest.approx(r["roof_s"] / r["triton_s"])
    assert set(res["ceilings"]) == {"float32", "float64"}
    assert parts["steps"]["status"] == "ok", (tmp_path / "steps.log").read_text()[-3000:]
    st = parts["steps"]["results"]["chapters"]["04"]
    assert st["rows"] and st["skipped"] == [] and all(r["step_s"] > 0 and r["count"] > 0 for r in st["rows"])
    assert st["estimate_s"] == pytest.approx(sum(r["count"] * r["step_s"] for r in st["rows"]))
    text = (tmp_path / "summary.txt").read_text()
    assert "oracle  timeout" in text and "| float64 |" in text and run.stdout.strip() == text.strip()
    assert "04-long-time" in text and "committed ci run" in text
    # the oracle's own record, read back from its JSON lines, when it is not stopped
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "device_check.py"), "--dry-run", "--out",
                          str(tmp_path / "full"), "--limits", "bench=0,steps=0"], env=interpreter_env(), capture_output=True,
                         text=True, timeout=120)
    parts = json.loads((tmp_path / "full" / "device_check.json").read_text())["parts"]
    assert parts["oracle"]["status"] == "ok" and parts["oracle"]["interpreted"] is True
    assert parts["oracle"]["checks"] >= 10 and parts["oracle"]["failed"] == []
    assert parts["bench"]["status"] == "timeout"


def test_value_errors_name_the_argument():
    """The public functions check their inputs before they need triton or a device."""
    X = torch.zeros(2, 3, 4, dtype=torch.float64)
    H = torch.zeros(5, 4 * 4 * 2, dtype=torch.float64)
    w = torch.full((5,), 0.2, dtype=torch.float64)
    cases = [
        (lambda: fused_cuda.head_sum(X[0], H, w, 2), "X: expected 3 dimensions"),
        (lambda: fused_cuda.head_sum(X.int(), H, w, 2), "X: expected float32 or float64"),
        (lambda: fused_cuda.head_sum(X[:, :0], H, w, 2), "X: expected a non-empty"),
        (lambda: fused_cuda.head_sum(X, H[:, :-1], w, 2), "heads: dimension 1 has size 31, expected d_omega"),
        (lambda: fused_cuda.head_sum(X, H[:0], w[:0], 2), "heads: needs at least one head"),
        (lambda: fused_cuda.head_sum(X, H.float(), w, 2), "heads: dtype torch.float32"),
        (lambda: fused_cuda.head_sum(X, H, w[:3], 2), "weights: dimension 0 has size 3"),
        (lambda: fused_cuda.head_sum(X, H, w.float(), 2), "weights: dtype"),
        (lambda: fused_cuda.head_sum(X, H, w, 0), "d_k: expected a positive integer"),
        (lambda: fused_cuda.head_sum(X, H, w, 2.0), "d_k: expected a positive integer"),
        (lambda: fused_cuda.head_pass(X, X[:1], H, 2), "G: shape (1, 3, 4) does not match"),
        (lambda: fused_cuda.head_pass(X, X.float(), H, 2), "G: dtype"),
        (lambda: fused_cuda.head_pass(X, X, H, 2, grad=1), "grad: expected True or False"),
        (lambda: fused_cuda.head_pass(X, X, H, 2, per_sample="yes"), "per_sample: expected True or False"),
    ]
    if not fused_cuda.interpreted():
        cases.append((lambda: fused_cuda.head_pass(X, X, H, 2), "X: on device cpu; the Triton pass needs CUDA"))
    for call, message in cases:
        with pytest.raises(ValueError) as e:
            call()
        assert str(e.value).startswith(message), (str(e.value), message)


def test_the_model_picks_the_kernels_of_its_device(monkeypatch):
    """CPU: numba's pass, never triton (so CPU results are what they were); CUDA: the Triton pass when
    it can run, else the torch path; fused=False: the torch path everywhere."""
    from mfattn.models import fused

    assert fused_kernels("cpu") is (fused if fused.available() else None)
    assert fused_kernels("meta") is None
    monkeypatch.setattr(fused_cuda, "available", lambda: True)
    assert fused_kernels("cuda") is fused_cuda
    assert fused_kernels(torch.device("cuda", 0)) is fused_cuda
    monkeypatch.setattr(fused_cuda, "available", lambda: False)
    assert fused_kernels("cuda") is None
    model = HeadModel(torch.ones(3, 4, dtype=torch.float64), 2)
    assert model._kernels is fused_kernels("cpu") and not HeadModel(model.W_out, 2, fused=False)._fast(model.W_out)


def test_availability_follows_the_interpreter_flag():
    code = "from mfattn.models import fused_cuda; print(fused_cuda.available(), fused_cuda.interpreted())"
    run = lambda env: subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                     check=True).stdout.split()
    env = interpreter_env()
    has_triton = importlib.util.find_spec("triton") is not None
    assert run(env) == [str(has_triton), "True"]
    env.pop("TRITON_INTERPRET")
    assert run(env) == [str(has_triton and torch.cuda.is_available()), "False"]
