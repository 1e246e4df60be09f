"""mfattn: executable companion to "A Mean-Field Analysis of Multi-Head Self-Attention under
Cross-Entropy Training" (arXiv 2606.10469).

Two layers. The science computes every equation of the paper exactly once and never imports the
companion:

* :mod:`mfattn.models`: the particle-model protocol and the models (attention heads, their fused and
  sharded forms, the two-layer network, the linear worked example, token particles), data and tasks;
* :mod:`mfattn.flows`: the integrator with its steppers, SGD (19) and the reference flow (21), seeds;
* :mod:`mfattn.analysis`: the static approximation, long-time fits, Dirac stability, smoothness
  constants, fitting and transport.

The companion, :mod:`mfattn.companion`, runs and checks the book: chapters, runner, command line,
verdicts and their rendering, evidence map, replication, HTML check, sweeps, plotting, benchmark.

Every module is imported by its path, ``mfattn.<layer>.<module>`` (``from mfattn.flows.dynamics import
sgd``); :data:`LAYOUT` lists the layers and their modules.
"""

import importlib as _importlib
import importlib.util as _importlib_util
import os as _os
import sys as _sys
import threading as _threading
import time as _time

# How threads wait. torch's OpenMP runtime (libgomp), and the second copy that numba's "omp" threading
# layer loads (mfattn.models.fused), each read the wait settings once, when they load, and by default
# spin about 300,000 times at every barrier. On a machine where another process holds a core, the
# spinning thread burns the time slice its partner needs: a chapter's ci run beside a second one took
# 10.5x its time alone (chapter 02, 2 cores). A thread that sleeps at once (OMP_WAIT_POLICY=PASSIVE)
# is safe there, but on an idle machine it takes longer to wake than a spinning one: 300 small
# gradient calls took about twice as long, for the life of the process. So the setting is chosen
# here, before torch loads (book/benchmark.md, "Under load"): the runtime's own spin
# (GOMP_SPINCOUNT=SPIN), watched: a thread of the package's cuts torch's spin to libgomp's throttled
# count while another process keeps a core busy, from the start or later, and gives it back once the
# machine is calm (throttle). PASSIVE where the load cannot be read, or where another process is busy
# at import and torch's runtime is not the libgomp the watch can throttle. A policy the user set is
# kept; a process started by one that chose (MFATTN_WAIT_AUTO names the variable chosen) chooses
# again. A process that imported torch before mfattn keeps the runtime's default
# (THREAD_POLICY_APPLIED says which).
_POLICY_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
_AUTO = "MFATTN_WAIT_AUTO"
#: The spin on an idle machine: turns at a barrier before a waiting thread sleeps, libgomp's own default
#: (a few milliseconds). While other processes keep a core busy, :func:`throttle` cuts torch's to 100.
SPIN = 300000
#: Cores busy with other processes at import from which waiting threads sleep at once.
BUSY_FROM = 0.5
_CORES = _os.cpu_count() or 1  # read once: os.cpu_count() reads a file of /sys at every call (5 us)


def _load_sample():
    """Jiffies since boot from ``/proc/stat``: all, idle (with I/O wait), and this process's own (user and
    system, all its threads)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    with open("/proc/self/stat") as f:
        own = f.read().rsplit(")", 1)[1].split()
    return sum(v), v[3] + v[4], int(own[11]) + int(own[12])


def _busy_between(a, b):
    """Cores kept busy by other processes between two :func:`_load_sample` samples; ``None`` if no time passed
    or the two are not of one process (a forked child's own time starts again from zero)."""
    (t0, i0, o0), (t1, i1, o1) = a, b
    if t1 <= t0 or o1 < o0:
        return None
    return max(0.0, _CORES * ((t1 - t0) - (i1 - i0) - (o1 - o0)) / (t1 - t0))


def busy_elsewhere(window: float = 0.05):
    """Cores kept busy by other processes over ``window`` seconds, from ``/proc/stat`` less this
    process's own time; ``None`` where that cannot be read (not Linux).

    Examples
    --------
    >>> import mfattn
    >>> b = mfattn.busy_elsewhere()
    >>> b is None or b >= 0
    True
    """
    if not window > 0:
        raise ValueError(f"window: expected seconds > 0, got {window!r}")
    try:
        a = _load_sample()
        _time.sleep(window)
        return _busy_between(a, _load_sample())
    except (OSError, ValueError, IndexError):
        return None


#: Seconds between two looks at the machine's load by :func:`kernel_threads`.
LOOK_EVERY = 0.1
_clock = _time.monotonic
_look = None  # (clock, sample, cores busy elsewhere) of the last look; sample None where /proc cannot be read


def kernel_threads(want: int) -> int:
    """Threads for the next call of a fused CPU kernel (:mod:`mfattn.models.fused`): ``want``, less one
    for each core that other processes kept busy since the previous look (a core counts from
    :data:`BUSY_FROM` of it on), and at least one. It looks at ``/proc/stat`` at most every
    :data:`LOOK_EVERY` seconds and otherwise answers as last time, so a call costs a clock read.

    The wait setting is chosen once, at import; a process that becomes busy later (a second notebook,
    a build) would take the kernels' second thread's core and keep the first waiting at every
    barrier. With one thread fewer the kernel runs beside it instead. The fused kernels give the same
    bits on any number of threads (``tests/test_fused.py``), so this decides how fast, never what.
    torch's own thread count is left as it is: its sums depend on it.

    Parameters
    ----------
    want : int
        The thread count wanted on an idle machine (torch's), at least 1.

    Returns
    -------
    int
        Between 1 and ``want``.

    Examples
    --------
    >>> import mfattn
    >>> 1 <= mfattn.kernel_threads(2) <= 2
    True
    """
    global _look
    if isinstance(want, bool) or not isinstance(want, int) or want < 1:
        raise ValueError(f"want: expected a thread count >= 1, got {want!r}")
    now = _clock()
    if _look is None or now - _look[0] >= LOOK_EVERY:
        try:
            sample = _load_sample()
        except (OSError, ValueError, IndexError):
            sample = None
        busy = 0
        if _look is not None and _look[1] is not None and sample is not None:
            others = _busy_between(_look[1], sample)
            busy = _look[2] if others is None else int(others + 1 - BUSY_FROM)
        _look = (now, sample, busy)
    return max(1, min(want, _CORES - _look[2]))


#: Looks in a row with less than :data:`BUSY_FROM` of a core busy elsewhere after which the watch lets
#: torch's runtime spin again.
CALM_LOOKS = 10
_held = None  # (thread, event) of the thread that throttles torch's runtime, while it does
_held_lock = _threading.Lock()


def throttle(on: bool) -> bool:
    """Cut (``on``) or give back the spin of torch's OpenMP runtime (libgomp) at its barriers.

    libgomp spins :data:`SPIN` turns before a waiting thread sleeps, but only 100 while it manages
    more threads than the process may use cores ("throttled", GOMP_SPINCOUNT in its manual). Its
    setting is read once, when it loads. To throttle it later, a thread of the package's starts one
    parallel region of torch's and then waits: its team adds to the threads the runtime manages, and
    every barrier of torch's spins briefly until that thread ends. It computes nothing and changes no
    thread count, so no result changes. The watch started at import (when the package chose the spin)
    throttles while another process keeps :data:`BUSY_FROM` of a core busy and gives the spin back
    after :data:`CALM_LOOKS` calm looks: a process that becomes busy beside a run then costs its
    waiting threads a few turns, not a time slice at every barrier. No effect before torch is loaded.

    Parameters
    ----------
    on : bool
        Throttle (True) or spin again (False).

    Returns
    -------
    bool
        Whether torch's runtime is throttled now.

    Examples
    --------
    >>> import mfattn, torch
    >>> mfattn.throttle(True), mfattn.throttle(False)
    (True, False)
    """
    global _held
    if not isinstance(on, bool):
        raise ValueError(f"on: expected True or False, got {on!r}")
    with _held_lock:  # the watch's thread and the user's may both call it
        if on and _held is None:
            torch = _sys.modules.get("torch")
            if torch is None or getattr(torch.__spec__, "_initializing", False) or not hasattr(torch, "ones"):
                return False  # not loaded, or loading in another thread
            stop, ready, ran = _threading.Event(), _threading.Event(), []

            def hold():
                try:
                    torch.ones(1 << 18).sum()  # a parallel region: this thread's own team in torch's runtime
                    ran.append(True)
                except Exception:  # noqa: BLE001  torch unusable from this thread: no throttle
                    pass
                finally:
                    ready.set()
                if ran:
                    stop.wait()

            thread = _threading.Thread(target=hold, name="mfattn-throttle", daemon=True)
            thread.start()
            ready.wait()
            _held = (thread, stop) if ran else None
        elif not on and _held is not None:
            thread, stop = _held
            stop.set()
            thread.join()
            _held = None
        return _held is not None


def throttled() -> bool:
    """Whether torch's OpenMP runtime is throttled now (:func:`throttle`).

    Examples
    --------
    >>> import mfattn
    >>> mfattn.throttled() in (True, False)
    True
    """
    return _held is not None


def _watch_step(state: dict, sample) -> None:
    """One look of the watch: ``state`` holds the last sample and the calm looks in a row; throttle from
    :data:`BUSY_FROM` of a core busy elsewhere, spin again after :data:`CALM_LOOKS` calm looks."""
    others = _busy_between(state["sample"], sample) if state.get("sample") else None
    state["sample"] = sample
    if others is None:
        return
    state["calm"] = 0 if others >= BUSY_FROM else state.get("calm", 0) + 1
    if state["calm"] == 0:
        throttle(True)
    elif state["calm"] == CALM_LOOKS:
        throttle(False)


def _watch() -> None:
    """The watch's thread: a look every :data:`LOOK_EVERY` seconds, for the life of the process."""
    state = {}
    while True:
        try:
            _watch_step(state, _load_sample())
        except (OSError, ValueError, IndexError):
            return  # no /proc: nothing to watch
        _time.sleep(LOOK_EVERY)


def _start_watch() -> None:
    _threading.Thread(target=_watch, name="mfattn-watch", daemon=True).start()


def _torch_has_libgomp() -> bool:
    """Whether the torch that would load ships libgomp (pip's builds: ``torch/lib`` or ``torch.libs``), the
    runtime whose spin :func:`throttle` cuts; found without importing torch."""
    try:
        spec = _importlib_util.find_spec("torch")
        folder = _os.path.dirname(spec.origin)
        return any(name.startswith("libgomp") for d in (folder, _os.path.join(folder, "lib"), folder + ".libs")
                   if _os.path.isdir(d) for name in _os.listdir(d))
    except (ImportError, AttributeError, TypeError, ValueError, OSError):
        return False


def wait_setting(busy, throttles: bool | None = None) -> tuple[str, str]:
    """The variable and value that tell OpenMP how to wait, for ``busy`` cores used elsewhere
    (:func:`busy_elsewhere`): a spin of :data:`SPIN` turns, watched (:func:`throttle`); PASSIVE when
    the load is unknown (``None``), or from :data:`BUSY_FROM` cores when torch's runtime cannot be
    throttled (``throttles`` False; ``None``: whether the torch that would load ships libgomp).

    Examples
    --------
    >>> from mfattn import wait_setting
    >>> wait_setting(0.0), wait_setting(1.0, throttles=True), wait_setting(None)
    (('GOMP_SPINCOUNT', '300000'), ('GOMP_SPINCOUNT', '300000'), ('OMP_WAIT_POLICY', 'PASSIVE'))
    >>> wait_setting(1.0, throttles=False)
    ('OMP_WAIT_POLICY', 'PASSIVE')
    """
    if busy is not None and (isinstance(busy, bool) or not isinstance(busy, (int, float)) or not busy >= 0):
        raise ValueError(f"busy: expected cores >= 0 or None, got {busy!r}")
    if throttles is not None and not isinstance(throttles, bool):
        raise ValueError(f"throttles: expected True, False or None, got {throttles!r}")
    if busy is not None and busy >= BUSY_FROM and throttles is None:
        throttles = _torch_has_libgomp()
    if busy is None or (busy >= BUSY_FROM and not throttles):
        return "OMP_WAIT_POLICY", "PASSIVE"
    return "GOMP_SPINCOUNT", str(SPIN)


def shared_machine_env() -> dict:
    """The environment for processes started to run side by side (several kernels at once): their
    waiting threads sleep (PASSIVE), unless the user chose a policy. For ``unittest.mock.patch.dict``
    on ``os.environ``; ``None`` values are to be removed.

    Examples
    --------
    >>> import os
    >>> from mfattn import shared_machine_env
    >>> env = shared_machine_env()
    >>> env == {} or env["OMP_WAIT_POLICY"] == "PASSIVE"
    True
    """
    if _os.environ.get(_AUTO) not in _POLICY_VARS and any(k in _os.environ for k in _POLICY_VARS):
        return {}  # the user's own
    return {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": None, _AUTO: None}


if "torch" not in _sys.modules and _os.environ.get(_AUTO) in _POLICY_VARS:
    _os.environ.pop(_os.environ.pop(_AUTO), None)  # the choice of the process that started this one
#: Whether the wait setting reached torch's OpenMP runtime: torch was not loaded before mfattn, or the
#: environment already held a setting when it was (then that one, the user's, is in force).
THREAD_POLICY_APPLIED = "torch" not in _sys.modules or any(k in _os.environ for k in _POLICY_VARS)
if not any(k in _os.environ for k in _POLICY_VARS):
    _name, _value = wait_setting(busy_elsewhere())
    _os.environ[_name], _os.environ[_AUTO] = _value, _name
    if _name == "GOMP_SPINCOUNT" and THREAD_POLICY_APPLIED:
        _start_watch()
#: The wait setting in force for this process's OpenMP runtimes, e.g. ``"GOMP_SPINCOUNT=300000"``.
THREAD_POLICY = " ".join(f"{k}={_os.environ[k]}" for k in _POLICY_VARS if k in _os.environ)


class ThreadPolicyWarning(UserWarning):
    """torch was imported before mfattn, so its OpenMP threads keep spinning while they wait."""


if not THREAD_POLICY_APPLIED:
    import warnings as _warnings

    _warnings.warn("torch was imported before mfattn, so torch's OpenMP threads spin while they wait, which "
                   "slows a run beside another busy process (several times); import mfattn first, or set "
                   "OMP_WAIT_POLICY=PASSIVE in the environment", ThreadPolicyWarning, stacklevel=2)

#: The package's layout: each subpackage and its modules (the first three are the science layer).
LAYOUT = {
    "models": ("particles", "model", "fused", "fused_cuda", "data", "softmax", "activations", "twolayer", "linear", "tokens", "baseline",
               "distributed", "tasks"),
    "flows": ("integrate", "dynamics", "optimizers", "seeds"),
    "analysis": ("static", "stability", "longtime", "smoothness", "fitting", "transport", "scaling", "chaos", "clusters"),
    "companion": ("book", "verdicts", "render", "chapters", "runner", "cli", "evidence", "results", "replicate", "shard",
                  "checkhtml", "sweep", "plotting", "bench", "roofline", "disk"),
}
#: Module name -> its path below ``mfattn`` (``"dynamics"`` -> ``"flows.dynamics"``); a table only: a module is
#: imported by its path.
LAYOUT_OF = {m: f"{pkg}.{m}" for pkg, mods in LAYOUT.items() for m in mods}

# The top-level names load on first use, so that `import mfattn` (and the command line's help, its
# listings and its usage errors) does not load torch.
_TOP = {"Dataset": "models.data", "HeadModel": "models.model", "cross_entropy": "models.softmax",
        "entropy": "models.softmax", "softmax_jacobian": "models.softmax"}
__all__ = ["Dataset", "HeadModel", "cross_entropy", "entropy", "softmax_jacobian", "busy_elsewhere", "wait_setting",
           "kernel_threads", "shared_machine_env", "throttle", "throttled"]


def __getattr__(name):
    if name in _TOP:
        return getattr(_importlib.import_module(f"{__name__}.{_TOP[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__version__ = "0.3.0"
