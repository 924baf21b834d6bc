"""`settle_heap`: what a serving process does to the cycle collector before taking requests. Run in
a fresh interpreter each, since freezing the test process's heap would outlive the test."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_start_up_objects_leave_the_collectors_walks_and_the_threshold_is_the_serving_one() -> None:
    out = run(
        """
        import gc
        from gatekeeper.server.app import SERVING_GC_THRESHOLD, settle_heap
        settle_heap()
        print(gc.get_freeze_count() > 10_000, gc.get_threshold()[0] == SERVING_GC_THRESHOLD)
        """
    )
    assert out == "True True"


def test_garbage_cycles_made_while_serving_are_still_collected_without_being_asked() -> None:
    out = run(
        """
        import gc, weakref
        from gatekeeper.server.app import settle_heap
        settle_heap()

        class Node:
            pass

        freed = []
        for _ in range(30_000):  # cycles only the collector can free, as an error's traceback makes
            a, b = Node(), Node()
            a.other, b.other = b, a
            weakref.finalize(a, freed.append, 1)
            del a, b
        print(len(freed) > 0, len(gc.get_objects()) < 60_000)
        """
    )
    assert out == "True True"
