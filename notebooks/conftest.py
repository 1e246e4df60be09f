"""nbval over the chapters: the longest chapter first.

`make test` hands the chapters to two pytest-xdist workers, one notebook per worker at a time
(``--dist loadfile --no-loadscope-reorder``), in the order collected here. Collected longest first,
by the run time each committed notebook recorded (``metadata.mfattn.ci_seconds``), the longest
chapter starts at once and the short ones fill the other worker, instead of the longest starting
last and running alone. The cells of a notebook keep their order.
"""

import json


def recorded_seconds(path):
    try:
        with open(path, encoding="utf-8") as f:
            return float(json.load(f)["metadata"]["mfattn"]["ci_seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0  # a notebook without a recorded time goes last


def pytest_collection_modifyitems(items):
    seconds = {}
    for item in items:
        if item.path not in seconds:
            seconds[item.path] = recorded_seconds(item.path)
    # sort is stable: items of one notebook stay in cell order
    items.sort(key=lambda item: (-seconds[item.path], str(item.path)))
