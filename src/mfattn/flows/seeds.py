"""Named random streams derived from one seed (every chapter's draws; chapter 08 on).

A chapter has one ``seed`` parameter and many independent draws: the initial measure, each
replicate's minibatches, the starts of a minimiser. :func:`stream` gives each a generator of its own,
named, derived from the seed by :class:`numpy.random.SeedSequence` with the name's bytes as the
spawn key: two different names (or two seeds) are two different keys, so the streams never coincide
the way hand-written offsets (``seed + 7``, ``1000 * seed + k``) can, and a stream's draws do not
depend on which other streams a chapter asks for or in which order.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["stream_seed", "stream", "streams"]


def _key(name) -> tuple[int, ...]:
    parts = name if isinstance(name, tuple) else (name,) if isinstance(name, str) else ()
    if not parts or not all((isinstance(p, str) and p) or (isinstance(p, int) and not isinstance(p, bool) and p >= 0)
                            for p in parts):
        raise ValueError(f"name: expected a non-empty string, or a tuple of strings and integers >= 0, got {name!r}")
    key = []
    for p in parts:  # strings as their UTF-8 bytes, integers as themselves, each closed by a tag: injective
        key += list(p.encode()) + [256] if isinstance(p, str) else [p, 257]
    return tuple(key)


def stream_seed(seed: int, name) -> int:
    """The 64-bit seed of the stream ``name`` under ``seed``.

    Parameters
    ----------
    seed : int
        The chapter's seed, ``>= 0``.
    name : str or tuple of str and int
        The stream's name, e.g. ``"init"`` or ``("replicate", 3)``.

    Returns
    -------
    int
        In ``[0, 2**64)``.

    Raises
    ------
    ValueError
        Naming ``seed`` or ``name`` when invalid.

    Examples
    --------
    >>> from mfattn.flows.seeds import stream_seed
    >>> stream_seed(0, "init") == stream_seed(0, "init"), stream_seed(0, "init") == stream_seed(1, "init")
    (True, False)
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed: expected an integer >= 0, got {seed!r}")
    ss = np.random.SeedSequence(int(seed), spawn_key=_key(name))
    return int(ss.generate_state(1, np.uint64)[0])


def stream(seed: int, name, *, device="cpu") -> torch.Generator:
    """A torch generator for the stream ``name`` under ``seed`` (see :func:`stream_seed`).

    Parameters
    ----------
    seed : int
    name : str or tuple of str and int
    device : str or torch.device, default ``"cpu"``

    Returns
    -------
    torch.Generator
        Seeded with :func:`stream_seed`.

    Examples
    --------
    >>> import torch
    >>> from mfattn.flows.seeds import stream
    >>> a = torch.rand(2, generator=stream(4, ("replicate", 0)))
    >>> bool((a == torch.rand(2, generator=stream(4, ("replicate", 0)))).all())
    True
    """
    return torch.Generator(device=device).manual_seed(stream_seed(seed, name))


def streams(seed: int, *names, device="cpu") -> dict:
    """``{name: stream(seed, name)}`` for every name.

    Parameters
    ----------
    seed : int
    *names : str or tuple of str and int
    device : str or torch.device, default ``"cpu"``

    Returns
    -------
    dict of name to torch.Generator

    Examples
    --------
    >>> from mfattn.flows.seeds import streams
    >>> sorted(streams(0, "init", "batches"))
    ['batches', 'init']
    """
    return {name: stream(seed, name, device=device) for name in names}
