"""How long `ToolRegistry.list_for_llm` takes: 1,000 tools, a measured profile in the store.

    python tests/perf/registry_bench.py [--tools 1000] [--calls 20000]

Prints the median (and p99) time per call; the goal is well under 1 ms. Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from gatekeeper import Gatekeeper, JsonFileStore, Profile, Settings, ToolRegistry
from gatekeeper.observe.logs import configure as configure_logs
from gatekeeper.rules.tiers import Tier
from gatekeeper.suite.loader import DEFAULT_SUITE_DIR, load_suite

GOAL_S = 0.001


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    configure_logs("warning")

    suite = load_suite(DEFAULT_SUITE_DIR)
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "models_profile.json"
        JsonFileStore(store).save(
            [
                Profile(
                    model="bench-model",
                    provider="openai-compatible",
                    tier=Tier.MEDIUM,
                    scores={"instruction": 0.7, "json": 0.7, "toolCalling": 0.7},
                    tokens_per_second=40.0,
                    tested_at=datetime.now(UTC).isoformat(),
                    benchmark_version=suite.version,
                    tests_hash=suite.hash,
                )
            ]
        )
        settings = Settings.model_validate(
            {
                "store": str(store),
                "tools": {"required_tier": {"execute_*": "large", "write_*": "medium", "admin_*": "large"}},
            }
        )
        gk = Gatekeeper(settings, suite=suite)
        try:
            registry = ToolRegistry(gk)
            prefixes = ("read", "write", "execute", "admin", "search")
            for i in range(args.tools):
                registry.register(
                    {
                        "type": "function",
                        "function": {
                            "name": f"{prefixes[i % len(prefixes)]}_tool_{i}",
                            "description": f"tool number {i}",
                            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
                        },
                    }
                )
            assert gk.lookup("bench-model") is not None, "the seeded profile must be valid"
            visible = len(registry.list_for_llm("bench-model"))
            samples = []
            for _ in range(args.calls):
                started = time.perf_counter()
                registry.list_for_llm("bench-model")
                samples.append(time.perf_counter() - started)
        finally:
            gk.close()

    samples.sort()
    median = statistics.median(samples)
    p99 = samples[int(len(samples) * 0.99)]
    print(f"list_for_llm: {args.tools} tools registered, {visible} visible at tier medium, {args.calls} calls")
    mean = statistics.fmean(samples)
    print(
        f"  median {median * 1e6:.1f} us/call, p99 {p99 * 1e6:.1f} us, mean {mean * 1e6:.1f} us, "
        f"max {samples[-1] * 1e3:.2f} ms ({'under' if median < GOAL_S else 'OVER'} the 1 ms goal)"
    )
    return 0 if median < GOAL_S else 1


if __name__ == "__main__":
    sys.exit(main())
