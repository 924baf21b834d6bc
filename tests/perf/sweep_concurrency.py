"""How much the runner's concurrency buys: the full 4-level sweep of the default suite against a
scripted server that adds a fixed delay to every call, sequential vs. the default concurrency.

    python tests/perf/sweep_concurrency.py [--delay-ms 200]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import answers
from scripted import ScriptedServer, SuiteScript

from gatekeeper.measuring.backends import OpenAIBackend
from gatekeeper.measuring.runner import DEFAULT_EFFORTS, RunSettings, sweep
from gatekeeper.suite.loader import DEFAULT_SUITE_DIR, load_suite


def timed_sweep(server: ScriptedServer, suite, concurrency: int) -> tuple[float, int]:
    async def go() -> None:
        backend = OpenAIBackend(server.base_url)
        try:
            await sweep(backend, "perf-model", suite, list(DEFAULT_EFFORTS), RunSettings(concurrency=concurrency))
        finally:
            await backend.aclose()

    before = len(server.requests)
    started = time.perf_counter()
    asyncio.run(go())
    return time.perf_counter() - started, len(server.requests) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay-ms", type=float, default=200)
    args = parser.parse_args()
    suite = load_suite(DEFAULT_SUITE_DIR)
    default = RunSettings().concurrency
    with ScriptedServer(SuiteScript(suite).responder(answers.perfect), delay_s=args.delay_ms / 1000) as server:
        sequential, calls = timed_sweep(server, suite, 1)
        concurrent, _ = timed_sweep(server, suite, default)
    print(
        f"default suite: {len(suite.tests)} tests x {len(DEFAULT_EFFORTS)} effort levels = {calls} calls, "
        f"{args.delay_ms:.0f} ms added per call"
    )
    print(f"{'concurrency':>12} {'wall s':>8}")
    print(f"{1:>12} {sequential:>8.2f}")
    print(f"{default:>12} {concurrent:>8.2f}")
    print(f"speed-up: {sequential / concurrent:.1f}x (goal: at least 4x)")


if __name__ == "__main__":
    main()
