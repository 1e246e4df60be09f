"""mfattn: executable companion to "A Mean-Field Analysis of Multi-Head Self-Attention under
Cross-Entropy Training" (arXiv 2606.10469).

The engine: every equation of the paper is computed in exactly one place here; the book's
chapters (``notebooks/``) call it.
"""

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

from .data import Dataset  # noqa: E402  (torch loads here)
from .model import HeadModel  # noqa: E402
from .softmax import cross_entropy, entropy, softmax_jacobian

__all__ = ["Dataset", "HeadModel", "cross_entropy", "entropy", "softmax_jacobian"]

# every module of the engine, reachable as an attribute (``mfattn.dynamics``), imported on first use
# so that ``import mfattn`` stays fast
SUBMODULES = ("activations", "bench", "book", "chapters", "checkhtml", "cli", "data", "distributed", "dynamics",
              "evidence", "fitting", "fused", "integrate", "linear", "longtime", "model", "particles", "plotting", "replicate", "runner",
              "render", "seeds", "smoothness", "softmax", "stability", "static", "sweep", "tasks", "tokens", "transport",
              "twolayer", "verdicts")


def __getattr__(name):
    if name in SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(SUBMODULES))
__version__ = "0.2.0"
