"""Seeded tasks that build a model and a dataset (used by every chapter).

All random draws happen on the CPU in float64 through one explicit ``torch.Generator``
seeded by ``seed``, and are cast afterwards, so a seed gives the same task on every device
and dtype. Conventions shared by the tasks:

* a vocabulary of ``V`` tokens embedded by ``E (V, d_x)`` with N(0, 1/d_x) entries, so that
  token vectors have norm about one;
* a fixed vocabulary projection ``W_out (d_x, d_v)`` with N(0, 1) entries, drawn separately
  (the paper fixes ``W_out``; it is not tied to ``E``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from .._checks import check_positive
from .data import Dataset
from .model import HeadModel
from .softmax import entropy

__all__ = ["Task", "teacher_task", "markov_task", "text_task", "text_corpus", "TASKS", "make_task", "Example", "example"]


@dataclass(frozen=True)
class Task:
    """A model with its dataset and what is known exactly about the task.

    Built by :func:`teacher_task`, :func:`markov_task`, :func:`text_task` or :func:`make_task`;
    the fields a task does not define are ``None``. The reference levels ``optimal_risk`` and
    ``bayes_risk`` (floats or ``None``) are described after the examples.

    Attributes
    ----------
    name : str
        ``"teacher"``, ``"markov"`` or ``"text"``.
    model : HeadModel
        The attention model, with the task's fixed ``W_out (d_x, d_v)``.
    data : Dataset
        Inputs ``X (n, L, d_x)`` (embedded tokens) and labels ``Y (n, L, d_v)``.
    embedding : Tensor (V, d_x)
        The token embedding ``E``; ``data.X`` is ``E[tokens]``.
    tokens : Tensor (n, L), int64
        The input token ids.
    teacher_heads : Tensor (N*, d_omega) or None
        The teacher's heads (teacher task only).
    teacher_weights : Tensor (N*,) or None
        The teacher's weights, uniform (teacher task only).
    vocab : tuple of str or None
        The character of each token id (text task only); the last one stands for every
        character outside the alphabet.
    starts : Tensor (n,), int64, or None
        Each window's offset in the corpus (text task only).

    Examples
    --------
    >>> from mfattn.models.tasks import teacher_task
    >>> task = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)
    >>> task.name, tuple(task.data.X.shape), tuple(task.data.Y.shape)
    ('teacher', (4, 3, 3), (4, 3, 4))
    >>> tuple(task.embedding.shape), tuple(task.tokens.shape), tuple(task.teacher_heads.shape)
    ((16, 3), (4, 3), (3, 24))
    >>> task.bayes_risk is None and task.vocab is None
    True
    """

    name: str
    model: HeadModel
    data: Dataset
    embedding: torch.Tensor  # (V, d_x) token embedding
    tokens: torch.Tensor  # (n, L) input token ids
    teacher_heads: torch.Tensor | None = None  # (N*, d_omega), teacher task only
    teacher_weights: torch.Tensor | None = None  # (N*,)
    #: for the teacher task, the exact infimum of the risk (10) over measures, the mean label entropy,
    #: attained by the teacher since E(rho) = mean entropy + mean KL(Y || softmax z^rho)
    optimal_risk: float | None = None
    #: for the Markov task, the mean entropy of the true next-token law at the dataset's positions,
    #: i.e. the expected risk of the Bayes predictor (a reference level, not a bound on
    #: the empirical risk of this finite dataset)
    bayes_risk: float | None = None
    vocab: tuple[str, ...] | None = None  # text task: the character of each token id
    starts: torch.Tensor | None = None  # text task: each window's offset in the corpus


def _common(seed, dims: dict):
    check_positive(seed, "seed", integer=True, allow_zero=True)
    for k, v in dims.items():
        check_positive(v, k, integer=True)
    return torch.Generator().manual_seed(seed)


def _embedding(V, d_x, d_v, g):
    E = torch.randn(V, d_x, generator=g, dtype=torch.float64) / d_x**0.5
    W_out = torch.randn(d_x, d_v, generator=g, dtype=torch.float64)
    return E, W_out


def _to(t, dtype, device):
    return t.to(device=device, dtype=dtype)


def _next_token_task(name, ids, E, W_out, d_k, V, dtype, device, **extra) -> Task:
    """The task of windows ``ids (n, L + 1)``: tokens ``ids[:, :L]`` embedded by ``E``, each labelled by
    its successor, one-hot over ``V`` tokens; ``extra`` are the task's own fields."""
    L = ids.shape[1] - 1
    X = E[ids[:, :L]]
    Y = torch.nn.functional.one_hot(ids[:, 1:], V).to(torch.float64)
    return Task(
        name=name,
        model=HeadModel(W_out, d_k).to(device=device, dtype=dtype),
        data=Dataset(_to(X, dtype, device), _to(Y, dtype, device)),
        embedding=_to(E, dtype, device),
        tokens=ids[:, :L].to(device),
        **extra,
    )


def teacher_task(
    *,
    n: int = 256,
    L: int = 8,
    d_x: int = 4,
    d_k: int = 2,
    d_v: int = 5,
    vocab_size: int = 16,
    n_teacher: int = 3,
    teacher_scale: float = 1.0,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    device="cpu",
) -> Task:
    r"""Soft labels of a teacher measure: ``Y = softmax(z^{rho*}(X))``.

    The teacher is ``n_teacher`` heads with N(0, teacher_scale^2) entries and uniform
    weights; tokens are i.i.d. uniform over the vocabulary. Because the cross-entropy with
    soft labels is ``H(Y) + KL(Y || softmax z)``, the infimum of (10) over any set of measures
    that contains the teacher is the mean label entropy, attained by the teacher.

    Parameters
    ----------
    n : int
        Number of sequences.
    L : int
        Sequence length.
    d_x : int
        Embedding dimension.
    d_k : int
        Head (query/key/value) dimension; ``d_omega = 4 d_x d_k``.
    d_v : int
        Number of label classes (columns of ``W_out``).
    vocab_size : int
        Number of tokens ``V``.
    n_teacher : int
        Number of teacher heads ``N*``.
    teacher_scale : float
        Standard deviation of the teacher's head entries (> 0).
    seed : int
        Seed of the one generator behind every draw (>= 0).
    dtype : torch.dtype
        Dtype of the model, data and teacher (the draws are made in float64).
    device : str or torch.device
        Device of the model, data and teacher.

    Returns
    -------
    Task
        With ``teacher_heads (N*, d_omega)``, ``teacher_weights (N*,)`` and ``optimal_risk``
        set; ``data.Y (n, L, d_v)`` holds soft labels.

    Examples
    --------
    >>> from mfattn.models.tasks import teacher_task
    >>> task = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)
    >>> task.model
    HeadModel(d_x=3, d_k=2, d_v=4, d_omega=24, dtype=torch.float64, device=cpu)
    >>> risk = task.model.risk(task.data, task.teacher_heads, task.teacher_weights)
    >>> abs(float(risk) - task.optimal_risk) < 1e-12  # the teacher attains the infimum
    True
    """
    g = _common(seed, dict(n=n, L=L, d_x=d_x, d_k=d_k, d_v=d_v, vocab_size=vocab_size, n_teacher=n_teacher))
    check_positive(teacher_scale, "teacher_scale")
    E, W_out = _embedding(vocab_size, d_x, d_v, g)
    model64 = HeadModel(W_out, d_k)
    teacher = teacher_scale * torch.randn(n_teacher, model64.d_omega, generator=g, dtype=torch.float64)
    tokens = torch.randint(vocab_size, (n, L), generator=g)
    X = E[tokens]
    Y = torch.softmax(model64.logits(X, teacher), dim=-1)
    opt = float(entropy(Y).mean())
    model = model64.to(device=device, dtype=dtype)
    return Task(
        name="teacher",
        model=model,
        data=Dataset(_to(X, dtype, device), _to(Y, dtype, device)),
        embedding=_to(E, dtype, device),
        tokens=tokens.to(device),
        teacher_heads=_to(teacher, dtype, device),
        teacher_weights=torch.full((n_teacher,), 1.0 / n_teacher, dtype=dtype, device=device),
        optimal_risk=opt,
    )


def markov_task(
    *,
    n: int = 256,
    L: int = 8,
    d_x: int = 4,
    d_k: int = 2,
    vocab_size: int = 6,
    sharpness: float = 2.0,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    device="cpu",
) -> Task:
    r"""Next-token prediction on a Markov chain with one-hot labels (the paper's setting).

    Transition matrix ``P = softmax(sharpness * G)`` row-wise with ``G`` standard normal;
    the first token is uniform; ``Y_l`` is the one-hot of token ``l+1``; ``d_v = vocab_size``.

    Parameters
    ----------
    n : int
        Number of sequences.
    L : int
        Sequence length (each sequence is drawn with ``L + 1`` tokens).
    d_x : int
        Embedding dimension.
    d_k : int
        Head (query/key/value) dimension; ``d_omega = 4 d_x d_k``.
    vocab_size : int
        Number of tokens ``V``, also the number of label classes ``d_v``.
    sharpness : float
        Scale of the Gaussian scores of the transition matrix (>= 0; 0 gives the uniform
        chain, large values a nearly deterministic one).
    seed : int
        Seed of the one generator behind every draw (>= 0).
    dtype : torch.dtype
        Dtype of the model and data (the draws are made in float64).
    device : str or torch.device
        Device of the model and data.

    Returns
    -------
    Task
        With one-hot labels ``data.Y (n, L, V)`` and ``bayes_risk`` set.

    Examples
    --------
    >>> from mfattn.models.tasks import markov_task
    >>> task = markov_task(n=4, L=3, d_x=3, vocab_size=5, seed=0)
    >>> tuple(task.data.X.shape), tuple(task.data.Y.shape), task.model.d_v
    ((4, 3, 3), (4, 3, 5), 5)
    >>> bool((task.data.Y.sum(-1) == 1).all())  # one-hot rows
    True
    >>> round(task.bayes_risk, 4)
    0.9044
    """
    g = _common(seed, dict(n=n, L=L, d_x=d_x, d_k=d_k, vocab_size=vocab_size))
    check_positive(sharpness, "sharpness", allow_zero=True)
    E, W_out = _embedding(vocab_size, d_x, vocab_size, g)
    P = torch.softmax(sharpness * torch.randn(vocab_size, vocab_size, generator=g, dtype=torch.float64), -1)
    ids = torch.empty(n, L + 1, dtype=torch.long)
    ids[:, 0] = torch.randint(vocab_size, (n,), generator=g)
    for l in range(L):  # loop over positions (data generation), vectorised over sequences
        ids[:, l + 1] = torch.multinomial(P[ids[:, l]], 1, generator=g).squeeze(1)
    bayes = float(entropy(P[ids[:, :L]]).mean())
    return _next_token_task("markov", ids, E, W_out, d_k, vocab_size, dtype, device, bayes_risk=bayes)


_OTHER = "\u00a4"  # the token standing for every character outside the alphabet


#: The corpus as the book was executed on it, shipped with the package (``models/corpus/``): the help
#: pages of ``pydoc_data.topics`` from CPython 3.11.7, so that chapter 09 reads the same text under
#: any Python. Its sha256 (of the preprocessed text) is checked on every read.
CORPUS_FILE = Path(__file__).with_name("corpus") / "pydoc_topics.json.gz"
CORPUS_SHA256 = "5388d2870b0fe0895922050a9166d25a6d89a22691e2510d2d0032d93ef9f775"


def _corpus() -> str:
    import gzip
    import hashlib
    import json

    topics = json.loads(gzip.decompress(CORPUS_FILE.read_bytes()).decode("utf-8"))
    text = re.sub(r"\s+", " ", " ".join(topics[k] for k in sorted(topics)).lower())
    digest = hashlib.sha256(text.encode()).hexdigest()
    if digest != CORPUS_SHA256:
        raise RuntimeError(f"{CORPUS_FILE} is damaged: its text hashes to {digest}, not {CORPUS_SHA256}; restore it "
                           "from the repository (git checkout -- src/mfattn/models/corpus)")
    return text


def _token_stream(alphabet: str, heldout: float, split: str):
    """The corpus as token ids, its vocabulary, and the index where the held-out part begins, after
    checking the arguments :func:`text_corpus` and :func:`text_task` share."""
    if split not in ("all", "train", "heldout"):
        raise ValueError(f"split: expected 'all', 'train' or 'heldout', got {split!r}")
    if not (isinstance(heldout, (int, float)) and 0 < heldout < 1):
        raise ValueError(f"heldout: expected a fraction in (0, 1), got {heldout!r}")
    if not isinstance(alphabet, str) or len(set(alphabet)) != len(alphabet) or not alphabet.isascii() or not alphabet:
        raise ValueError("alphabet: expected a non-empty string of distinct ASCII characters")
    vocab = tuple(alphabet) + (_OTHER,)
    lut = np.full(256, len(vocab) - 1, dtype=np.int64)
    for i, c in enumerate(alphabet):
        lut[ord(c)] = i
    raw = np.frombuffer(_corpus().encode("ascii", errors="replace"), dtype=np.uint8)
    return torch.from_numpy(lut[raw]), vocab, int(round(raw.size * (1 - heldout)))


def text_corpus(split: str = "all", *, heldout: float = 0.1, alphabet: str = "abcdefghijklmnopqrstuvwxyz ."):
    """The token stream of :func:`text_task`'s corpus, or of one of its two parts (chapter 09).

    The characters before the boundary ``round(len * (1 - heldout))`` are the training part and the
    rest the held-out part; :func:`text_task`'s windows of either split lie wholly inside its part.

    Parameters
    ----------
    split : str
        ``"all"``, ``"train"`` or ``"heldout"``.
    heldout : float
        The held-out fraction of the corpus, in ``(0, 1)``.
    alphabet : str
        The characters that are tokens of their own (as in :func:`text_task`).

    Returns
    -------
    ids : Tensor (n_chars,), int64
        Token ids of the part, in corpus order.
    vocab : tuple of str
        The character of each token id; the last one stands for every character outside ``alphabet``.

    Examples
    --------
    >>> from mfattn.models.tasks import text_corpus
    >>> ids, vocab = text_corpus()
    >>> train, _ = text_corpus("train")
    >>> heldout, _ = text_corpus("heldout")
    >>> train.numel() + heldout.numel() == ids.numel(), len(vocab)
    (True, 29)
    >>> round(heldout.numel() / ids.numel(), 3)
    0.1
    """
    stream, vocab, boundary = _token_stream(alphabet, heldout, split)
    part = {"all": stream, "train": stream[:boundary], "heldout": stream[boundary:]}[split]
    return part, vocab


def text_task(
    *,
    n: int = 256,
    L: int = 16,
    d_x: int = 8,
    d_k: int = 2,
    alphabet: str = "abcdefghijklmnopqrstuvwxyz .",
    seed: int = 0,
    split: str = "all",
    heldout: float = 0.1,
    dtype: torch.dtype = torch.float64,
    device="cpu",
) -> Task:
    """Character-level next-token prediction on English text shipped with CPython.

    The corpus is ``pydoc_data.topics`` of CPython 3.11.7 (the help texts of the Python language
    reference, written by the Python developers and distributed with CPython under the Python
    Software Foundation License), shipped with the package and checked by its hash
    (:data:`CORPUS_SHA256`) so that it is the same under any Python; lower-cased, with whitespace runs collapsed to one space. Characters of ``alphabet``
    are tokens; every other character maps to one extra token. ``n`` windows of ``L + 1``
    characters start at seeded uniform offsets; ``d_v`` is the vocabulary size.

    ``split`` picks where the windows start: anywhere (``"all"``), or on one side of a boundary that
    leaves the last ``heldout`` fraction of the characters to the held-out windows (``"train"``:
    every window ends before the boundary; ``"heldout"``: every window starts at or after it), so a
    training window and a held-out window share no character. The two splits of one ``seed`` share
    the embedding and ``W_out`` (the same model) and draw their offsets independently.

    Parameters
    ----------
    n : int
        Number of windows (sequences).
    L : int
        Sequence length (each window holds ``L + 1`` characters).
    d_x : int
        Embedding dimension.
    d_k : int
        Head (query/key/value) dimension; ``d_omega = 4 d_x d_k``.
    alphabet : str
        Distinct ASCII characters that are tokens of their own; the vocabulary has
        ``V = len(alphabet) + 1`` tokens.
    seed : int
        Seed of the one generator behind every draw (>= 0).
    split : str
        ``"all"``, ``"train"`` or ``"heldout"``.
    heldout : float
        The held-out fraction of the corpus, in ``(0, 1)`` (used by the two splits).
    dtype : torch.dtype
        Dtype of the model and data (the draws are made in float64).
    device : str or torch.device
        Device of the model and data.

    Returns
    -------
    Task
        With one-hot labels ``data.Y (n, L, V)``, ``vocab`` and ``starts`` (each window's offset in
        the corpus) set. The corpus, hence the windows, depends on the Python version.

    Examples
    --------
    >>> from mfattn.models.tasks import text_task
    >>> task = text_task(n=4, L=6, d_x=4, seed=0)
    >>> tuple(task.data.X.shape), tuple(task.data.Y.shape), len(task.vocab)
    ((4, 6, 4), (4, 6, 29), 29)
    >>> task.vocab[:3], task.model.d_v
    (('a', 'b', 'c'), 29)
    >>> train = text_task(n=4, L=6, d_x=4, seed=0, split="train")
    >>> test = text_task(n=4, L=6, d_x=4, seed=0, split="heldout")
    >>> bool((train.starts + 7 <= test.starts.min()).all())   # no window crosses the boundary
    True
    >>> bool((train.model.W_out == test.model.W_out).all())
    True
    """
    g = _common(seed, dict(n=n, L=L, d_x=d_x, d_k=d_k))
    stream, vocab, boundary = _token_stream(alphabet, heldout, split)
    V = len(vocab)
    if stream.numel() < L + 2:
        raise ValueError(f"L: longer than the corpus ({stream.numel()} characters)")
    E, W_out = _embedding(V, d_x, V, g)
    if split == "all":
        start = torch.randint(stream.numel() - L - 1, (n,), generator=g)
    else:
        lo, hi = (0, boundary - L - 1) if split == "train" else (boundary, stream.numel() - L - 1)
        if hi <= lo:
            raise ValueError(f"L: the {split} part of the corpus ({hi + L + 1 - lo} characters) is shorter than a window")
        # a stream of its own per split (drawn after the shared embedding), so the offsets are independent
        gs = torch.Generator().manual_seed(int(torch.randint(2**62, (1,), generator=g)) + (split == "heldout"))
        start = lo + torch.randint(hi - lo, (n,), generator=gs)
    ids = stream[start[:, None] + torch.arange(L + 1)]
    return _next_token_task("text", ids, E, W_out, d_k, V, dtype, device, vocab=vocab, starts=start)


TASKS = {"teacher": teacher_task, "markov": markov_task, "text": text_task}


def make_task(name: str, **kwargs) -> Task:
    """The task called ``name`` (a key of :data:`TASKS`), built with ``kwargs``; chapters select
    their task by this name so that papermill can override it.

    Parameters
    ----------
    name : str
        ``"teacher"``, ``"markov"`` or ``"text"``.
    **kwargs
        Keyword arguments of the task's builder (:func:`teacher_task`, :func:`markov_task`
        or :func:`text_task`).

    Returns
    -------
    Task
        The built task.

    Examples
    --------
    >>> from mfattn.models.tasks import make_task
    >>> task = make_task("markov", n=2, L=3, d_x=3, vocab_size=4, seed=1)
    >>> task.name, tuple(task.data.Y.shape)
    ('markov', (2, 3, 4))
    """
    if name not in TASKS:
        raise ValueError(f"task: {name!r} is not one of {sorted(TASKS)}")
    return TASKS[name](**kwargs)


class Example(NamedTuple):
    """What :func:`example` returns: a small model, its data and a measure of five heads.

    Examples
    --------
    >>> from mfattn.models.tasks import example
    >>> ex = example()
    >>> ex._fields, float(ex.weights.sum())
    (('model', 'data', 'heads', 'weights'), 1.0)
    """

    model: HeadModel
    data: Dataset
    heads: torch.Tensor  # (5, d_omega)
    weights: torch.Tensor  # (5,) uniform


def example() -> Example:
    """The small problem every docstring example of the engine starts from, in one line.

    The teacher task with ``n=4`` sequences of ``L=3`` tokens in ``d_x=3`` dimensions, heads of
    ``d_k=2`` and ``d_v=4`` labels (seed 0, so ``d_omega = 24``), five heads drawn from ``N(0, I)`` with
    ``torch.Generator().manual_seed(0)``, and uniform weights ``0.2``; all float64 on the CPU. It
    replaces the same seven lines written out in each docstring.

    Returns
    -------
    Example
        ``(model, data, heads (5, 24), weights (5,))``.

    Examples
    --------
    >>> from mfattn.models.tasks import example
    >>> model, data, heads, w = example()
    >>> model.d_omega, tuple(data.X.shape), tuple(heads.shape), w.tolist()
    (24, (4, 3, 3), (5, 24), [0.2, 0.2, 0.2, 0.2, 0.2])
    """
    task = teacher_task(n=4, L=3, d_x=3, d_k=2, d_v=4, seed=0)
    g = torch.Generator().manual_seed(0)
    heads = torch.randn(5, task.model.d_omega, generator=g, dtype=torch.float64)
    return Example(task.model, task.data, heads, torch.full((5,), 0.2, dtype=torch.float64))

