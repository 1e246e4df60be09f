"""The thread settings that keep a run graceful on a busy machine (book/benchmark.md, "Under load").

The oracle is the OpenMP runtime's own report of the settings it runs with (libgomp prints them
under OMP_DISPLAY_ENV=VERBOSE): a thread that waits must sleep (GOMP_SPINCOUNT 0), not spin.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _runtime_settings(code: str, **env) -> dict:
    """Run ``code`` in a fresh interpreter and return the settings torch's libgomp reports."""
    e = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    e.update(OMP_DISPLAY_ENV="VERBOSE", **env)
    out = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return dict(re.findall(r"^\s*([A-Z_]+) = '([^']*)'", out.stderr, re.M))


def test_import_mfattn_makes_waiting_threads_sleep():
    got = _runtime_settings("import mfattn, torch; torch.ones(10**6).sum(); assert mfattn.THREAD_POLICY_APPLIED")
    assert got["GOMP_SPINCOUNT"] == "0"


def test_the_runtime_spins_without_it():
    # the counterfactual: torch alone spins at every barrier (libgomp's default, 300,000 turns), so the
    # test above would fail were the policy not set by mfattn
    got = _runtime_settings("import torch; torch.ones(10**6).sum()")
    assert int(got["GOMP_SPINCOUNT"]) > 0


def test_a_users_own_policy_is_kept():
    got = _runtime_settings("import mfattn, torch; torch.ones(10**6).sum()", OMP_WAIT_POLICY="ACTIVE")
    assert got["OMP_WAIT_POLICY"] == "ACTIVE"


def test_torch_loaded_first_is_reported():
    out = subprocess.run([sys.executable, "-c", "import torch, mfattn; print(mfattn.THREAD_POLICY_APPLIED)"],
                         env={k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"},
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "False"
    # and said, once, with the remedy
    assert out.stderr.count("ThreadPolicyWarning") == 1 and "import mfattn first" in out.stderr
    quiet = subprocess.run([sys.executable, "-c", "import mfattn, torch"], capture_output=True, text=True, timeout=300,
                           env={k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"})
    assert "ThreadPolicyWarning" not in quiet.stderr


def test_numbas_openmp_runtime_sleeps_too():
    # numba's "omp" layer (mfattn.models.fused) links libgomp.so.1.0.0 by file name, so the dynamic loader
    # brings the system's copy beside torch's (soname libgomp.so.1): two runtimes, two thread pools.
    # Each reads the policy when it loads, so both must report that their waiting threads sleep.
    pytest.importorskip("numba")
    code = ("import mfattn, torch, numba\n"
            "from mfattn.models.tasks import make_task\n"
            "t = make_task('teacher', n=4, seed=0, L=3, d_x=2, d_k=1, dtype=torch.float64)\n"
            "h = torch.randn(40, t.model.d_omega, dtype=torch.float64)\n"
            "t.model.grad_phi(t.data.X, t.data.Y, h, torch.full((40,), 1 / 40, dtype=torch.float64))\n"
            "print(numba.threading_layer())\n"
            "print('\\n'.join(sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libgomp' in l})))\n")
    e = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", code], env=dict(e, OMP_DISPLAY_ENV="VERBOSE"),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    layer, *libs = out.stdout.split()
    spins = re.findall(r"GOMP_SPINCOUNT = '(\d+)'", out.stderr)
    assert layer == "omp" and len(spins) == len(libs) >= 1
    assert set(spins) == {"0"}


@pytest.mark.parametrize("how", ["OMP_NUM_THREADS=1", "torch.set_num_threads(1)"])
def test_a_thread_count_of_one_holds_after_the_kernels_start(how):
    # numba's OpenMP pool, started by the first fused call, sets the process's OpenMP thread count to
    # every core, and torch reads its own count back from there: the run went on with two threads in
    # torch and in the kernels (found in make test's one-thread nbval pass). The oracle is what torch
    # and numba report after each of two calls.
    pytest.importorskip("numba")
    code = ("import mfattn, torch, numba\n"
            + ("torch.set_num_threads(1)\n" if how.startswith("torch") else "")
            + "from mfattn.models.tasks import make_task\n"
            "t = make_task('teacher', n=4, seed=0, L=3, d_x=2, d_k=1, dtype=torch.float64)\n"
            "h = torch.randn(40, t.model.d_omega, dtype=torch.float64)\n"
            "for _ in range(2):\n"
            "    t.model.grad_phi(t.data.X, t.data.Y, h, torch.full((40,), 1 / 40, dtype=torch.float64))\n"
            "    print(torch.get_num_threads(), numba.get_num_threads())\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    env["NUMBA_NUM_THREADS"] = "2"  # a pool of two, whatever this machine has, so that one means one
    if how.startswith("OMP"):
        env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1", "1", "1"]


@pytest.mark.parametrize("md", sorted((ROOT / "notebooks").glob("*.md")) + [ROOT / "src/mfattn/companion/templates/chapter.md"],
                         ids=lambda p: p.stem)
def test_chapters_import_mfattn_before_torch(md):
    code = "\n".join(c.source for c in jupytext.read(md).cells if c.cell_type == "code")
    imports = re.findall(r"^(?:import|from) (\w+)", code, re.M)
    # mfattn first: it sets the wait policy before torch (imported directly or through mfattn) loads
    assert imports and imports[0] == "mfattn"
