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

Every module also answers to its short name, ``mfattn.<module>`` (``from mfattn.dynamics import sgd``
is ``mfattn.flows.dynamics``): the chapters and the docstrings' examples import it so, and
:data:`LAYOUT_OF` lists the table.
"""

import importlib as _importlib
import importlib.abc as _abc
import importlib.util as _util
import os as _os
import sys as _sys

# Threads that wait sleep instead of spinning. torch's OpenMP runtime (libgomp), and the second copy
# that numba's "omp" threading layer loads (mfattn.fused), each read OMP_WAIT_POLICY once, when they
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
#: Short module name -> its path below ``mfattn`` (``"dynamics"`` -> ``"flows.dynamics"``).
LAYOUT_OF = {m: f"{pkg}.{m}" for pkg, mods in LAYOUT.items() for m in mods}
# every module of the engine, reachable as an attribute (``mfattn.dynamics``), imported on first use
# so that ``import mfattn`` stays fast
SUBMODULES = tuple(sorted(LAYOUT_OF))


class _ShortName(_abc.MetaPathFinder, _abc.Loader):
    """Imports ``mfattn.<module>`` as the module itself, ``mfattn.<subpackage>.<module>``: one module
    object under two names (so monkeypatching, pickling and identity checks see the same thing)."""

    def find_spec(self, fullname, path=None, target=None):
        head, _, short = fullname.partition(".")
        if head != __name__ or short not in LAYOUT_OF:
            return None
        return _util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = _importlib.import_module(f"{__name__}.{LAYOUT_OF[spec.name.partition('.')[2]]}")
        spec.loader_state = module.__spec__  # the import machinery sets __spec__ to the short name's: put it back
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state or module.__spec__


if not any(isinstance(f, _ShortName) for f in _sys.meta_path):
    _sys.meta_path.append(_ShortName())

# The top-level names load on first use, so that `import mfattn` (and the command line's help, its
# listings and its usage errors) does not load torch.
_TOP = {"Dataset": "models.data", "HeadModel": "models.model", "cross_entropy": "models.softmax",
        "entropy": "models.softmax", "softmax_jacobian": "models.softmax"}
__all__ = ["Dataset", "HeadModel", "cross_entropy", "entropy", "softmax_jacobian"]


def __getattr__(name):
    if name in LAYOUT_OF:
        return _importlib.import_module(f"{__name__}.{name}")
    if name in _TOP:
        return getattr(_importlib.import_module(f"{__name__}.{_TOP[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(SUBMODULES))
__version__ = "0.3.0"
