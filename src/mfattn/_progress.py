"""One progress bar for every long engine loop.

Plain ``tqdm.std`` (``tqdm.auto`` warns without ipywidgets). ``disable`` is passed only when the
caller turns the bar off, so that ``TQDM_DISABLE=1`` (set by the Makefile so that recorded and
re-executed notebook outputs compare exactly) silences it everywhere else.
"""

from tqdm.std import tqdm


def progress_bar(iterable=None, *, enabled: bool = True, **kwargs):
    if not enabled:
        kwargs["disable"] = True
    return tqdm(iterable, **kwargs)
