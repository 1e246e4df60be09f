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
import os as _os
import sys as _sys

# Threads that wait sleep instead of spinning. torch's OpenMP runtime (libgomp), and the second copy
# that numba's "omp" threading layer loads (mfattn.models.fused), each read OMP_WAIT_POLICY once, when they
# load, and by default spin about 300,000 times at every barrier. On a machine where another
# process holds a core, the spinning thread burns the time slice its partner needs: a chapter's ci
# run beside a second one took 10.5x its time alone (chapter 02, 2 cores), against 1.5x with
# PASSIVE, which costs nothing measurable alone (book/benchmark.md, "Under load"). So it is set
# here, before the first import of torch below, unless the user chose a policy; a process that
# imported torch before mfattn keeps the runtime's default (THREAD_POLICY_APPLIED says which).
#: Whether the wait policy reached torch's OpenMP runtime: torch was not loaded before mfattn, or the
#: environment already held a policy when it was (then that policy, the user's, is in force).
THREAD_POLICY_APPLIED = "torch" not in _sys.modules or "OMP_WAIT_POLICY" in _os.environ
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


class ThreadPolicyWarning(UserWarning):
    """torch was imported before mfattn, so its OpenMP threads keep spinning while they wait."""


if not THREAD_POLICY_APPLIED:
    import warnings as _warnings

    _warnings.warn("torch was imported before mfattn, so torch's OpenMP threads spin while they wait, which "
                   "slows a run beside another busy process (about 1.5x); import mfattn first, or set "
                   "OMP_WAIT_POLICY=PASSIVE in the environment", ThreadPolicyWarning, stacklevel=2)

#: The package's layout: each subpackage and its modules (the first three are the science layer).
LAYOUT = {
    "models": ("particles", "model", "fused", "fused_cuda", "data", "softmax", "activations", "twolayer", "linear", "tokens", "baseline",
               "distributed", "tasks"),
    "flows": ("integrate", "dynamics", "optimizers", "seeds"),
    "analysis": ("static", "stability", "longtime", "smoothness", "fitting", "transport", "scaling", "chaos"),
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
__all__ = ["Dataset", "HeadModel", "cross_entropy", "entropy", "softmax_jacobian"]


def __getattr__(name):
    if name in _TOP:
        return getattr(_importlib.import_module(f"{__name__}.{_TOP[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__version__ = "0.3.0"
