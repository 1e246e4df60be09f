"""mfattn: executable companion to "A Mean-Field Analysis of Multi-Head Self-Attention under
Cross-Entropy Training" (arXiv 2606.10469).

The engine: every equation of the paper is computed in exactly one place here; the book's
chapters (``notebooks/``) call it.
"""

from .data import Dataset
from .model import HeadModel
from .softmax import cross_entropy, entropy, softmax_jacobian

__all__ = ["Dataset", "HeadModel", "cross_entropy", "entropy", "softmax_jacobian"]

# every module of the engine, reachable as an attribute (``mfattn.dynamics``), imported on first use
# so that ``import mfattn`` stays fast
SUBMODULES = ("activations", "bench", "book", "chapters", "checkhtml", "cli", "data", "distributed", "dynamics",
              "evidence", "fitting", "fused", "longtime", "model", "particles", "plotting", "runner", "smoothness",
              "softmax", "stability", "static", "sweep", "tasks", "tokens", "transport", "twolayer")


def __getattr__(name):
    if name in SUBMODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(SUBMODULES))
__version__ = "0.2.0"
