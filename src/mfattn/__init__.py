"""mfattn: executable companion to "A Mean-Field Analysis of Multi-Head Self-Attention under
Cross-Entropy Training" (arXiv 2606.10469).

The engine: every equation of the paper is computed in exactly one place here; the book's
chapters (``notebooks/``) call it.
"""

from .data import Dataset
from .model import HeadModel
from .softmax import cross_entropy, entropy, softmax_jacobian

__all__ = ["Dataset", "HeadModel", "cross_entropy", "entropy", "softmax_jacobian"]
__version__ = "0.2.0"
