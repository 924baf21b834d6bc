"""Simulated live traffic with known fault rates, for drift's sequential tests
(tests/drift/test_sequential.py and scripts/drift_simulation.py)."""

from __future__ import annotations

import math
import random

from gatekeeper.drift.sequential import Cusum
from gatekeeper.drift.window import Fault


def first_alarm(cusums: dict[Fault, Cusum], rates: dict[Fault, float], calls: int, rng: random.Random) -> int | None:
    """The call on which the pair's first test alarms, None when none does within `calls`.

    Exactly the CUSUMs of sequential.py, run on i.i.d. calls with the given fault rates (at most
    one fault per call). Faulty calls come at geometric gaps; between two of them every score
    only falls by `down` per call (floored at 0), so a run costs one step per faulty call."""
    total = sum(rates.values())
    kinds, weights = list(rates), list(rates.values())
    scores = dict.fromkeys(cusums, 0.0)
    at = 0
    while True:
        gap = int(math.log(1.0 - rng.random()) / math.log1p(-total)) + 1
        if at + gap > calls:
            return None
        at += gap
        kind = rng.choices(kinds, weights)[0]
        for fault, test in cusums.items():
            score = max(0.0, scores[fault] + (gap - 1) * test.down)
            scores[fault] = score = test.step(score, kind)
            if score >= test.threshold:
                return at
