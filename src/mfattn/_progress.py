"""One progress bar for every long engine loop.

In a terminal or a notebook the bar is plain ``tqdm.std`` (``tqdm.auto`` warns without ipywidgets).
``disable`` is passed only when the caller turns the bar off, so that ``TQDM_DISABLE=1`` (set by the
Makefile so that recorded and re-executed notebook outputs compare exactly) silences it everywhere
else.

Under ``python -m mfattn run`` the chapter's kernel has ``MFATTN_PROGRESS`` set to a file: every bar
then writes its state there as JSON lines (at most a few per second) and nothing into the notebook;
the command reads that file and draws the bars in the terminal (:mod:`mfattn.companion.runner`).
"""

from __future__ import annotations

import itertools
import json
import os
import time

from tqdm.std import tqdm

ENV = "MFATTN_PROGRESS"
_ids = itertools.count()


class FileBar:
    """A minimal tqdm stand-in that appends ``{"id", "desc", "n", "total", "done"}`` JSON lines to a
    file; ``python -m mfattn run`` turns them into terminal bars with remaining-time estimates."""

    def __init__(self, iterable=None, *, path, total=None, desc=None, every=0.25, **_):
        self.iterable, self.path, self.desc, self.every = iterable, path, desc or "", every
        if total is None and iterable is not None:
            try:
                total = len(iterable)
            except TypeError:
                total = None
        self.total, self.n, self.id = total, 0, f"{os.getpid()}-{next(_ids)}"
        self._last = 0.0
        self._write(force=True)

    def _write(self, force=False, done=False):
        now = time.monotonic()
        if not (force or done) and now - self._last < self.every:
            return
        self._last = now
        line = json.dumps({"id": self.id, "desc": self.desc, "n": self.n, "total": self.total, "done": done})
        try:
            with open(self.path, "a") as f:
                f.write(line + "\n")
        except OSError:  # the reader went away: progress is not worth failing a run for
            pass

    def __iter__(self):
        try:
            for x in self.iterable:
                yield x
                self.update(1)
        finally:
            self.close()

    def __len__(self):
        return self.total or 0

    def update(self, n=1):
        self.n += n
        self._write(force=self.total is not None and self.n >= self.total)

    def set_postfix(self, *args, **kwargs):
        pass

    def set_description(self, desc=None, refresh=True):
        self.desc = desc or ""

    def close(self):
        if self.path is not None:
            self._write(done=True)
            self.path = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def progress_bar(iterable=None, *, enabled: bool = True, **kwargs):
    if not enabled:
        kwargs["disable"] = True
        return tqdm(iterable, **kwargs)
    path = os.environ.get(ENV)
    if path:
        return FileBar(iterable, path=path, **kwargs)
    return tqdm(iterable, **kwargs)
