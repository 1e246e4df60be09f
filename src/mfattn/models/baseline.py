"""What a practitioner trains instead: one causal ``torch.nn.MultiheadAttention`` layer (chapter 09).

The mean-field model of the paper (§2.2, eqs. (5)-(8)) averages ``N`` heads with weight ``1/N``
through a fixed vocabulary projection and trains only the heads. The baseline here is the layer a
user of PyTorch would write for the same next-token task: a trainable token embedding of width
``E = n_heads * head_dim``, ``nn.MultiheadAttention(E, n_heads)`` under a causal mask, and a
trainable linear readout to the vocabulary, in PyTorch's standard parametrisation (its default
initialisation, no ``1/N`` in the head sum), trained by Adam on the cross-entropy.

Its query and output projections are ``E x E`` matrices, so its parameter count grows like
``N^2`` at a fixed head width, against ``4 d_x d_k N`` for the mean-field heads:
:func:`parameter_count` gives both.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .._checks import check_positive

__all__ = ["PractitionerAttention", "parameter_count", "train_practitioner"]


class PractitionerAttention(nn.Module):
    r"""A causal multi-head attention layer in the standard parametrisation (chapter 09's baseline).

    ``logits = readout(MHA(embed(tokens)))``: ``embed`` is ``nn.Embedding(V, E)``, ``MHA`` is
    ``nn.MultiheadAttention(E, n_heads, bias=False, batch_first=True)`` with a causal mask (a position
    attends to itself and the earlier ones, as in (5)), ``readout`` is ``nn.Linear(E, V, bias=False)``,
    and ``E = n_heads * head_dim``. The parameters take PyTorch's default initialisation, drawn from
    ``generator``.

    Parameters
    ----------
    vocab_size : int
        Number of tokens ``V``.
    n_heads : int
        Number of heads.
    head_dim : int
        Width of each head (``d_k`` of the mean-field model).
    generator : torch.Generator
        Draws the initial parameters (on the CPU).
    dtype : torch.dtype, default float64

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.baseline import PractitionerAttention
    >>> net = PractitionerAttention(5, n_heads=3, head_dim=2, generator=torch.Generator().manual_seed(0))
    >>> net(torch.tensor([[0, 4, 2, 1]])).shape  # (batch, positions, vocabulary)
    torch.Size([1, 4, 5])
    >>> sum(p.numel() for p in net.parameters())  # 2 V E + 4 E^2
    204
    """

    def __init__(self, vocab_size: int, n_heads: int, head_dim: int, *, generator: torch.Generator,
                 dtype: torch.dtype = torch.float64):
        super().__init__()
        for v, name in ((vocab_size, "vocab_size"), (n_heads, "n_heads"), (head_dim, "head_dim")):
            check_positive(v, name, integer=True)
        if not isinstance(generator, torch.Generator):
            raise ValueError("generator: expected a torch.Generator")
        E = n_heads * head_dim
        self.vocab_size, self.n_heads, self.head_dim = vocab_size, n_heads, head_dim
        self.embed = nn.Embedding(vocab_size, E, dtype=dtype)
        self.attn = nn.MultiheadAttention(E, n_heads, bias=False, batch_first=True, dtype=dtype)
        self.readout = nn.Linear(E, vocab_size, bias=False, dtype=dtype)
        # PyTorch's own default initialisations, drawn from the explicit generator
        with torch.no_grad():
            nn.init.normal_(self.embed.weight, generator=generator)
            nn.init.xavier_uniform_(self.attn.in_proj_weight, generator=generator)
            for lin in (self.attn.out_proj, self.readout):
                nn.init.kaiming_uniform_(lin.weight, a=math.sqrt(5), generator=generator)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """The logits of every position of a batch of token sequences.

        Parameters
        ----------
        tokens : Tensor (B, L), int64
            Token ids below ``V``.

        Returns
        -------
        Tensor (B, L, V)
            The logits; position ``l`` sees the tokens ``0..l`` only.

        Examples
        --------
        >>> import torch
        >>> from mfattn.models.baseline import PractitionerAttention
        >>> net = PractitionerAttention(4, n_heads=2, head_dim=2, generator=torch.Generator().manual_seed(0))
        >>> z = net(torch.tensor([[1, 2, 3]]))
        >>> bool(torch.allclose(net(torch.tensor([[1, 2, 0]]))[:, :2], z[:, :2]))  # causal
        True
        """
        if not (isinstance(tokens, torch.Tensor) and tokens.dtype == torch.int64 and tokens.ndim == 2):
            raise ValueError("tokens: expected an int64 tensor of shape (B, L)")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(f"tokens: ids must lie in [0, {self.vocab_size})")
        L = tokens.shape[1]
        future = torch.ones(L, L, dtype=torch.bool, device=tokens.device).triu(1)  # True: not attended
        x = self.embed(tokens)
        y = self.attn(x, x, x, attn_mask=future, need_weights=False)[0]
        return self.readout(y)


def parameter_count(kind: str, *, n_heads: int, head_dim: int, d_x: int = 8, vocab_size: int = 29) -> int:
    """Trainable parameters of ``N = n_heads`` heads of width ``head_dim`` (chapter 09).

    ``"mean-field"``: ``4 d_x d_k N`` (the heads of (7); the embedding and ``W_out`` are fixed);
    ``"practitioner"``: ``2 V E + 4 E^2`` with ``E = N d_k`` (:class:`PractitionerAttention`).

    Parameters
    ----------
    kind : str
        ``"mean-field"`` or ``"practitioner"``.
    n_heads : int
    head_dim : int
    d_x : int, default 8
        The mean-field model's token dimension.
    vocab_size : int, default 29

    Returns
    -------
    int

    Examples
    --------
    >>> from mfattn.models.baseline import parameter_count
    >>> parameter_count("mean-field", n_heads=16, head_dim=2), parameter_count("practitioner", n_heads=16, head_dim=2)
    (1024, 5952)
    """
    for v, name in ((n_heads, "n_heads"), (head_dim, "head_dim"), (d_x, "d_x"), (vocab_size, "vocab_size")):
        check_positive(v, name, integer=True)
    if kind == "mean-field":
        return 4 * d_x * head_dim * n_heads
    if kind == "practitioner":
        E = n_heads * head_dim
        return 2 * vocab_size * E + 4 * E * E
    raise ValueError(f"kind: expected 'mean-field' or 'practitioner', got {kind!r}")


def _cross_entropy(net, tokens, targets) -> torch.Tensor:
    logits = net(tokens)
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def train_practitioner(net: PractitionerAttention, tokens: torch.Tensor, targets: torch.Tensor, *, lr: float,
                       steps: int, eval_sets: dict | None = None, eval_every: int = 1) -> dict:
    """Train ``net`` by ``torch.optim.Adam`` on the whole of ``(tokens, targets)`` for ``steps`` steps.

    The loss is the mean cross-entropy over sequences and positions: the risk (10) with one-hot labels.

    Parameters
    ----------
    net : PractitionerAttention
    tokens, targets : Tensor (B, L), int64
        Input ids and the next-token ids at each position.
    lr : float
        Adam's learning rate (its other settings are PyTorch's defaults).
    steps : int
        Number of full-batch steps.
    eval_sets : dict of str to (tokens, targets), optional
        Sets on which the cross-entropy is recorded, besides ``"train"``.
    eval_every : int, default 1
        Steps between two recordings (the last step is always recorded).

    Returns
    -------
    dict
        ``"steps"`` (list of int) and, for ``"train"`` and each of ``eval_sets``, the list of the
        cross-entropy at those steps.

    Examples
    --------
    >>> import torch
    >>> from mfattn.models.baseline import PractitionerAttention, train_practitioner
    >>> g = torch.Generator().manual_seed(0)
    >>> net = PractitionerAttention(4, n_heads=2, head_dim=2, generator=g)
    >>> x = torch.randint(4, (8, 5), generator=g)
    >>> out = train_practitioner(net, x, x.roll(-1, 1), lr=0.05, steps=20, eval_every=10)
    >>> out["steps"], bool(out["train"][-1] < out["train"][0])
    ([0, 10, 20], True)
    """
    if not isinstance(net, PractitionerAttention):
        raise ValueError("net: expected a PractitionerAttention")
    check_positive(lr, "lr")
    check_positive(steps, "steps", integer=True)
    check_positive(eval_every, "eval_every", integer=True)
    if not (isinstance(targets, torch.Tensor) and targets.shape == tokens.shape and targets.dtype == torch.int64):
        raise ValueError("targets: expected an int64 tensor of the shape of tokens")
    sets = {"train": (tokens, targets), **(eval_sets or {})}
    out = {"steps": [], **{k: [] for k in sets}}
    opt = torch.optim.Adam(net.parameters(), lr=lr)

    def record(k):
        with torch.no_grad():
            out["steps"].append(k)
            for name, (x, y) in sets.items():
                out[name].append(float(_cross_entropy(net, x, y)))

    record(0)
    for k in range(1, steps + 1):
        opt.zero_grad()
        _cross_entropy(net, tokens, targets).backward()
        opt.step()
        if k % eval_every == 0 or k == steps:
            record(k)
    return out
