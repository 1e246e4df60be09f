"""The thread settings that keep a run fast alone and graceful on a busy machine (book/benchmark.md,
"Under load").

The oracles are the OpenMP runtime's own report of the settings it runs with (libgomp prints them
under OMP_DISPLAY_ENV=VERBOSE): the spin of mfattn.SPIN turns, or 0 where the threads sleep
(PASSIVE); the state of the watch that throttles torch's spin while another process keeps a core
busy (mfattn.throttle), seen from the process; and, for the throttle's effect, the processor time the
runtime's waiting threads burn. The busy process is a child that burns one core, known to be busy.
"""

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import jupytext
import pytest

import mfattn

ROOT = Path(__file__).resolve().parents[1]


def _runtime_settings(code: str, **env) -> dict:
    """Run ``code`` in a fresh interpreter and return the settings torch's libgomp reports."""
    e = dict(_no_setting(), OMP_DISPLAY_ENV="VERBOSE", **env)
    out = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return dict(re.findall(r"^\s*([A-Z_]+) = '([^']*)'", out.stderr, re.M))


def _no_setting() -> dict:
    """This environment without a wait setting (this test process's import of mfattn chose one)."""
    return {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "MFATTN_WAIT_AUTO")}


@contextlib.contextmanager
def _busy_core():
    """A child process that keeps one core busy while the block runs."""
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # past its start-up
        yield
    finally:
        burner.kill()
        burner.wait()


def test_beside_a_process_busy_at_import_the_spin_is_chosen_and_throttled():
    # a process started beside a busy one chooses the spin and the watch (under PASSIVE it would stay
    # asleep, about twice as slow for small calls, for its whole life), and is throttled once torch has
    # loaded. The oracles are what libgomp reports it runs with and the watch's state, seen from the
    # process. (That the spin comes back after CALM_LOOKS calm looks is the scripted test below: here the
    # machine need not become calm, make test runs a second stream beside this one.)
    code = ("import time, mfattn, torch\n"
            "torch.ones(1 << 18).sum()\n"
            "t0 = time.monotonic()\n"
            "while not mfattn.throttled() and time.monotonic() - t0 < 10:\n"
            "    time.sleep(0.01)\n"
            "print(mfattn.THREAD_POLICY, round(time.monotonic() - t0, 2), mfattn.throttled())\n")
    with _busy_core():
        assert mfattn.busy_elsewhere() >= mfattn.BUSY_FROM
        out = subprocess.run([sys.executable, "-c", code], env=dict(_no_setting(), OMP_DISPLAY_ENV="VERBOSE"),
                             capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    policy, first, held = out.stdout.split()
    assert policy == f"GOMP_SPINCOUNT={mfattn.SPIN}", out.stdout
    assert re.search(rf"GOMP_SPINCOUNT = '{mfattn.SPIN}'", out.stderr), out.stderr
    assert held == "True" and float(first) < 1.5, out.stdout


def test_where_the_runtime_cannot_be_throttled_waiting_threads_sleep(monkeypatch):
    # where torch ships no libgomp (conda's builds link llvm's or Intel's runtime), a busy machine at
    # import gets PASSIVE, which every OpenMP runtime honours
    assert mfattn.wait_setting(1.0, throttles=False) == ("OMP_WAIT_POLICY", "PASSIVE")
    assert mfattn.wait_setting(0.0, throttles=False) == ("GOMP_SPINCOUNT", str(mfattn.SPIN))
    monkeypatch.setattr(mfattn, "_torch_has_libgomp", lambda: False)
    assert mfattn.wait_setting(mfattn.BUSY_FROM) == ("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setattr(mfattn, "_torch_has_libgomp", lambda: True)
    assert mfattn.wait_setting(mfattn.BUSY_FROM) == ("GOMP_SPINCOUNT", str(mfattn.SPIN))


def test_torch_s_libgomp_is_found_where_it_is(tmp_path, monkeypatch):
    # the oracle is a file tree: pip's CPU build keeps the runtime in torch/lib, auditwheel's builds in
    # torch.libs beside the package; a torch without one, or none at all, is not throttled
    import importlib.util
    import types
    for place, want in (("torch/lib/libgomp.so.1", True), ("torch.libs/libgomp-a34b3233.so.1", True),
                        ("torch/lib/libomp.so", False)):
        root = tmp_path / place.replace("/", "_")
        (root / place).parent.mkdir(parents=True)
        (root / place).touch()
        (root / "torch").mkdir(exist_ok=True)
        (root / "torch/__init__.py").touch()
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, r=root: types.SimpleNamespace(origin=str(r / "torch/__init__.py")))
        assert mfattn._torch_has_libgomp() is want, place
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert mfattn._torch_has_libgomp() is False
    # and the torch these tests run on: found where the runtime it has loaded (its memory map) lies
    monkeypatch.undo()
    import torch
    torch.ones(1 << 18).sum()
    folder = os.path.dirname(torch.__file__)
    loaded = {line.split()[-1] for line in open("/proc/self/maps") if "libgomp" in line}
    assert mfattn._torch_has_libgomp() is any(p.startswith((folder + "/", folder + ".libs/")) for p in loaded), loaded


def test_the_choice_reaches_the_runtime():
    # whichever setting the import chose (the machine's load decides), it is what libgomp runs with
    got = _runtime_settings("import mfattn, torch, sys; torch.ones(10**6).sum(); print(mfattn.THREAD_POLICY, "
                            "file=sys.stderr); print(\"  CHOSEN = '\" + mfattn.THREAD_POLICY + \"'\", file=sys.stderr)")
    chosen = got["CHOSEN"]
    assert chosen in ("OMP_WAIT_POLICY=PASSIVE", f"GOMP_SPINCOUNT={mfattn.SPIN}")
    assert got["GOMP_SPINCOUNT"] == ("0" if "PASSIVE" in chosen else str(mfattn.SPIN))


def test_the_setting_for_the_load():
    assert mfattn.wait_setting(0.0) == mfattn.wait_setting(mfattn.BUSY_FROM - 0.01) == ("GOMP_SPINCOUNT", str(mfattn.SPIN))
    assert mfattn.wait_setting(mfattn.BUSY_FROM, throttles=True) == ("GOMP_SPINCOUNT", str(mfattn.SPIN))
    assert mfattn.wait_setting(None) == mfattn.wait_setting(None, throttles=True) == ("OMP_WAIT_POLICY", "PASSIVE")
    for bad in (-0.5, float("nan"), "1", True):
        with pytest.raises(ValueError, match="^busy"):
            mfattn.wait_setting(bad)
    with pytest.raises(ValueError, match="^throttles"):
        mfattn.wait_setting(1.0, throttles=1)
    with pytest.raises(ValueError, match="^window"):
        mfattn.busy_elsewhere(0)


def test_a_child_chooses_again():
    # a parent that chose the spin passes it on in the environment; its child, started beside a busy
    # process, must choose again (and watch), not keep that choice as if it were the user's (unwatched)
    code = ("import time, mfattn, torch\n"
            "torch.ones(1 << 18).sum()\n"
            "t0 = time.monotonic()\n"
            "while not mfattn.throttled() and time.monotonic() - t0 < 3:\n"
            "    time.sleep(0.01)\n"
            "print(mfattn.throttled())\n")
    got = {}
    with _busy_core():
        for who, env in (("parent's", {"MFATTN_WAIT_AUTO": "GOMP_SPINCOUNT"}), ("user's", {})):
            out = subprocess.run([sys.executable, "-c", code], env=dict(_no_setting(), GOMP_SPINCOUNT=str(mfattn.SPIN),
                                 **env), capture_output=True, text=True, timeout=300)
            assert out.returncode == 0, out.stderr
            got[who] = out.stdout.strip()
    assert got == {"parent's": "True", "user's": "False"}


def test_kernels_side_by_side_sleep(monkeypatch):
    for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "MFATTN_WAIT_AUTO"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("GOMP_SPINCOUNT", str(mfattn.SPIN))
    monkeypatch.setenv("MFATTN_WAIT_AUTO", "GOMP_SPINCOUNT")  # mfattn's own choice: overridden for the kernels
    assert mfattn.shared_machine_env() == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": None, "MFATTN_WAIT_AUTO": None}
    monkeypatch.delenv("MFATTN_WAIT_AUTO")  # the user's: kept
    assert mfattn.shared_machine_env() == {}


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
                         env=_no_setting(),
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "False"
    # and said, once, with the remedy
    assert out.stderr.count("ThreadPolicyWarning") == 1 and "import mfattn first" in out.stderr
    quiet = subprocess.run([sys.executable, "-c", "import mfattn, torch"], capture_output=True, text=True, timeout=300,
                           env=_no_setting())
    assert "ThreadPolicyWarning" not in quiet.stderr


def test_numbas_openmp_runtime_reads_the_setting_too():
    # numba's "omp" layer (mfattn.models.fused) links libgomp.so.1.0.0 by file name, so the dynamic loader
    # brings the system's copy beside torch's (soname libgomp.so.1): two runtimes, two thread pools.
    # Each reads the setting when it loads, so both must report it: PASSIVE (0 turns), where their
    # default is a spin. (The throttle covers torch's; numba's kernels take a thread fewer for each core
    # busy elsewhere, mfattn.kernel_threads.)
    pytest.importorskip("numba")
    code = ("import mfattn, torch, numba\n"
            "from mfattn.models.tasks import make_task\n"
            "t = make_task('teacher', n=4, seed=0, L=3, d_x=2, d_k=1, dtype=torch.float64)\n"
            "h = torch.randn(40, t.model.d_omega, dtype=torch.float64)\n"
            "t.model.grad_phi(t.data.X, t.data.Y, h, torch.full((40,), 1 / 40, dtype=torch.float64))\n"
            "print(numba.threading_layer())\n"
            "print('\\n'.join(sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libgomp' in l})))\n")
    out = subprocess.run([sys.executable, "-c", code], env=dict(_no_setting(), OMP_DISPLAY_ENV="VERBOSE",
                         OMP_WAIT_POLICY="PASSIVE"), capture_output=True, text=True, timeout=600)
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


def _scripted_load(monkeypatch, busy_per_look, cores=4):
    """Make mfattn.kernel_threads look at a machine of ``cores`` cores where other processes kept
    ``busy_per_look[i]`` cores busy between look i and look i+1 (1000 jiffies a core per look, of which
    this process used 300), on a clock that moves past LOOK_EVERY at each call."""
    monkeypatch.setattr(mfattn, "_CORES", cores)
    monkeypatch.setattr(mfattn, "_look", None)
    t = [0.0]

    def clock():
        t[0] += 1.5 * mfattn.LOOK_EVERY
        return t[0]

    samples = [(0, 0, 0)]
    for b in busy_per_look:
        total, idle, own = samples[-1]
        samples.append((total + 1000 * cores, idle + 1000 * cores - 1000 * b - 300, own + 300))
    it = iter(samples)
    monkeypatch.setattr(mfattn, "_clock", clock)
    monkeypatch.setattr(mfattn, "_load_sample", lambda: next(it))


def test_kernel_threads_leave_the_cores_others_keep_busy(monkeypatch):
    # the first look only records; each later one counts a core from half of it on (BUSY_FROM)
    busy = [0.0, 0.49, 0.5, 1.6, 3.0, 3.9, 0.2]
    _scripted_load(monkeypatch, busy, cores=4)
    assert [mfattn.kernel_threads(3) for _ in range(len(busy) + 1)] == [3, 3, 3, 3, 2, 1, 1, 3]
    _scripted_load(monkeypatch, [0.5, 1.0], cores=4)
    assert [mfattn.kernel_threads(4) for _ in range(3)] == [4, 3, 3]
    _scripted_load(monkeypatch, [1.0], cores=2)
    assert [mfattn.kernel_threads(2) for _ in range(2)] == [2, 1]


def test_kernel_threads_look_at_most_every_interval(monkeypatch):
    _scripted_load(monkeypatch, [1.0, 1.0])
    looks = []
    sample = mfattn._load_sample
    monkeypatch.setattr(mfattn, "_load_sample", lambda: looks.append(1) or sample())
    t = [0.0]
    monkeypatch.setattr(mfattn, "_clock", lambda: t[0])
    for step in (0.0, 0.03, 0.03, 0.03, 0.02, 0.01):  # looks at 0 and at 0.11 s only
        t[0] += step
        mfattn.kernel_threads(4)
    assert len(looks) == 2 and mfattn.kernel_threads(4) == 3


def test_kernel_threads_without_proc_and_bad_counts(monkeypatch):
    monkeypatch.setattr(mfattn, "_look", None)

    def unreadable():
        raise OSError("no /proc")

    monkeypatch.setattr(mfattn, "_load_sample", unreadable)
    monkeypatch.setattr(mfattn, "_CORES", 8)
    assert mfattn.kernel_threads(5) == 5 and mfattn.kernel_threads(5) == 5
    for bad in (0, -1, 2.0, True, "2", None):
        with pytest.raises(ValueError, match="want"):
            mfattn.kernel_threads(bad)


def test_the_kernels_take_a_thread_fewer_beside_busy_cores():
    # every core but one burnt by children: the fused kernels go on with one thread (numba's own
    # report after the calls), where torch keeps its count (its sums depend on it)
    pytest.importorskip("numba")
    cores = os.cpu_count() or 1
    if cores < 2:
        pytest.skip("one core: nothing to leave")
    code = ("import mfattn, torch, numba, time\n"
            "from mfattn.models.tasks import make_task\n"
            "t = make_task('teacher', n=4, seed=0, L=3, d_x=2, d_k=1, dtype=torch.float64)\n"
            "h = torch.randn(40, t.model.d_omega, dtype=torch.float64)\n"
            "for _ in range(4):\n"
            "    t.model.grad_phi(t.data.X, t.data.Y, h, torch.full((40,), 1 / 40, dtype=torch.float64))\n"
            "    time.sleep(mfattn.LOOK_EVERY)\n"
            "print(torch.get_num_threads(), numba.get_num_threads())\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    env.update(OMP_NUM_THREADS="2", NUMBA_NUM_THREADS="2")
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores - 1)]
    try:
        time.sleep(0.5)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2", "1"]


def test_kernel_threads_after_a_fork_keep_their_last_answer(monkeypatch):
    # a forked child inherits the last look, but its own time starts again from zero: the look across
    # the fork cannot tell other processes' time from the parent's, so the answer stays as it was
    monkeypatch.setattr(mfattn, "_CORES", 4)
    monkeypatch.setattr(mfattn, "_look", None)
    t = [0.0]

    def clock():
        t[0] += 1.0
        return t[0]

    samples = iter([(0, 0, 0), (4000, 2700, 300), (8000, 5400, 10)])  # one core busy elsewhere, then the fork
    monkeypatch.setattr(mfattn, "_clock", clock)
    monkeypatch.setattr(mfattn, "_load_sample", lambda: next(samples))
    assert [mfattn.kernel_threads(4) for _ in range(3)] == [4, 3, 3]


# the CPU time a process burns between small parallel regions of torch's, 4 ms apart: a waiting thread
# that spins (libgomp's 300,000 turns, a few ms) burns most of each gap; one throttled to 100 turns sleeps
_SPIN_BURN = """
import json, os, sys, time
import mfattn, torch
x = torch.ones(1 << 18)
def burnt():
    c0 = time.process_time()
    for _ in range(60):
        x.sum()
        time.sleep(0.004)
    return time.process_time() - c0
burnt()
tasks = lambda: len(os.listdir("/proc/self/task"))
out = {"threads": tasks()}
for on in (False, True, False, True):
    mfattn.throttle(on)
    out.setdefault(str(on), []).append(burnt())
    out.setdefault("threads " + str(on), []).append(tasks())
mfattn.throttle(False)
print(json.dumps(out))
"""


def test_the_throttle_cuts_torch_s_spin():
    # the oracle is the time the runtime's waiting threads burn (GOMP_SPINCOUNT's manual: 100 turns while
    # the runtime manages more threads than cores). Spinning, the worker burns much of each 4 ms gap;
    # throttled, a few turns. Under the runtime's default (the user's empty OMP_WAIT_POLICY: no watch)
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: torch makes no team")
    out = subprocess.run([sys.executable, "-c", _SPIN_BURN], env=dict(_no_setting(), OMP_WAIT_POLICY="",
                         OMP_NUM_THREADS="2"), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    spinning, throttled = min(got["False"]), max(got["True"])
    assert spinning > 0.03 and throttled < spinning / 3, got
    # the throttle is a thread of the package's and the worker of its team, gone when it ends
    assert all(n >= got["threads"] + 2 for n in got["threads True"]), got


def test_the_watch_throttles_while_others_are_busy(monkeypatch):
    # one look a second of a 2-core machine (1000 jiffies a core per look, 300 of them this process's):
    # the first look only records; from half a core busy elsewhere it throttles, after CALM_LOOKS calm
    # looks in a row it spins again
    calls = []
    monkeypatch.setattr(mfattn, "throttle", lambda on: calls.append(on))
    monkeypatch.setattr(mfattn, "_CORES", 2)
    state, sample = {}, (0, 0, 0)
    busy = [0.0, 0.6, 0.3] + [0.2] * (mfattn.CALM_LOOKS - 1) + [0.1, 1.0]
    for b in [0.0] + busy:
        total, idle, own = sample
        sample = (total + 2000, idle + 2000 - 1000 * b - 300, own + 300)
        mfattn._watch_step(state, sample)
    assert calls == [True, False, True]


def test_the_watch_throttles_beside_a_busy_process():
    # end to end: a process that chose the spin, then a second one that keeps a core busy: within a
    # second the watch has throttled torch's runtime
    code = ("import time, mfattn, torch\n"
            "torch.ones(1 << 18).sum()\n"
            "mfattn._start_watch()\n"
            "print('ready', flush=True)\n"
            "input()\n"
            "t0 = time.monotonic()\n"
            "while not mfattn.throttled() and time.monotonic() - t0 < 5:\n"
            "    time.sleep(0.01)\n"
            "print(mfattn.throttled(), round(time.monotonic() - t0, 2))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], env=dict(_no_setting(), GOMP_SPINCOUNT=str(mfattn.SPIN)),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    with _busy_core():
        out, err = proc.communicate("go\n", timeout=60)
    assert proc.returncode == 0, err
    held, seconds = out.split()
    assert held == "True" and float(seconds) < 1.5, out


def test_the_throttle_needs_a_working_torch(monkeypatch):
    # before torch is loaded, or where its parallel region fails, nothing is held and it says so
    monkeypatch.setattr(mfattn, "_held", None)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert mfattn.throttle(True) is False and not mfattn.throttled()

    class Broken:
        __spec__ = None

        @staticmethod
        def ones(*args):
            raise RuntimeError("no parallel region here")

    monkeypatch.setitem(sys.modules, "torch", Broken)
    assert mfattn.throttle(True) is False and not mfattn.throttled()
    for bad in (1, None, "yes"):
        with pytest.raises(ValueError, match="^on"):
            mfattn.throttle(bad)
