"""nbval over the chapters: the longest chapter first.

`make test` hands the chapters to two pytest-xdist workers, one notebook per worker at a time
(``--dist loadfile --no-loadscope-reorder``), in the order collected here. Collected longest first,
by the run time each committed notebook recorded (:func:`mfattn.companion.runner.ci_seconds`), the
longest chapter starts at once and the short ones fill the other worker, instead of the longest
starting last and running alone. The cells of a notebook keep their order.
"""

from mfattn.companion.runner import ci_seconds


def pytest_collection_modifyitems(items):
    seconds = {}
    for item in items:
        if item.path not in seconds:
            seconds[item.path] = ci_seconds(item.path) or 0.0  # a notebook without a recorded time goes last
    # sort is stable: items of one notebook stay in cell order
    items.sort(key=lambda item: (-seconds[item.path], str(item.path)))


def pytest_sessionfinish(session):
    # nbval kills each chapter's kernel, which therefore leaves its temporary folder behind
    # (mfattn.companion.sweep.scratch_folder); the next chapter's setup removes it, and this the last ones
    from mfattn.companion.sweep import remove_ended

    remove_ended()
