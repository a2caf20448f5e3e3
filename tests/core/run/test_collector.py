"""A crawl keeps the garbage collector's full passes off the objects that existed before it, and leaves them to
a process that keeps its long-lived objects frozen itself (a Celery pool process) once told so."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Freezes what exists, runs a crawl's collector guard, and prints how many objects are frozen before and after.
SCRIPT = """
import gc, sys
from pipelines_dagster.core.run import engine
if sys.argv[1] == "process":
    engine.leave_the_collector_to_the_process()
gc.freeze()
before = gc.get_freeze_count()
with engine._collector_off_old_objects():
    pass
print(before, gc.get_freeze_count())
"""


@pytest.mark.parametrize(("keeper", "kept"), [("crawl", False), ("process", True)])
def test_a_crawl_unfreezes_only_where_the_process_does_not_keep_objects_frozen(keeper: str, kept: bool) -> None:
    before, after = map(int, subprocess.check_output([sys.executable, "-c", SCRIPT, keeper], text=True).split())
    assert before > 0
    # A crawl on its own hands back all it froze; in a process that keeps its own frozen, nothing is handed back.
    assert (after == before) is kept and (after == 0) is not kept
