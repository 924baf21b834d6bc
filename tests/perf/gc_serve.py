"""`gatekeeper serve` with the cycle collector's work counted, for tests/perf/gc_trial.py.

    GK_GC_VARIANT=python|frozen|shipped python tests/perf/gc_serve.py serve --config gk.yaml --port 9003

`python`: no `settle_heap` (the collector as Python sets it up); `frozen`: `gc.freeze()` without
the serving threshold; `shipped`: what `gatekeeper serve` does. SIGUSR1 writes one line to stderr:
`GCSTATS {"ms": [gen0, gen1, gen2], "runs": [...]}`, the time and runs of each generation so far.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import time

_spent = [0.0, 0.0, 0.0]
_runs = [0, 0, 0]
_started = [0.0]


def _count(phase: str, info: dict) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
    else:
        _spent[info["generation"]] += time.perf_counter() - _started[0]
        _runs[info["generation"]] += 1


def _report(*_: object) -> None:
    doc = {"ms": [round(s * 1e3, 1) for s in _spent], "runs": _runs}
    sys.stderr.write(f"GCSTATS {json.dumps(doc)}\n")
    sys.stderr.flush()


def main() -> None:
    import gatekeeper.server.app as served
    from gatekeeper.cli import app

    variant = os.environ.get("GK_GC_VARIANT", "shipped")
    if variant == "python":
        served.settle_heap = lambda: None
    elif variant == "frozen":
        served.settle_heap = lambda: (gc.collect(), gc.freeze())
    elif variant != "shipped":
        raise SystemExit(f"GK_GC_VARIANT: {variant!r} is not one of python, frozen, shipped")
    gc.callbacks.append(_count)
    signal.signal(signal.SIGUSR1, _report)
    sys.argv = ["gatekeeper", *sys.argv[1:]]
    app()


if __name__ == "__main__":
    main()
