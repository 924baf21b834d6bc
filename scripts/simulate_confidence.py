"""How often a stored tier is too high, against a model whose true scores are known exactly.

The model (tests/stochastic.py) passes each test run with a chosen probability and otherwise
answers nothing, so every category's true score, and the true tier, are known. Each scenario is
measured many times in-process (the real runner and bounds through a MockBackend) and a few
dozen times through the real `gatekeeper bench` CLI against the model served over HTTP, at the
default settings unless told otherwise. Printed per scenario: the true scores and tier, how
often the stored tier was too high, how often `large` was certified, how often each stored lower
bound sat at or under the true score (per category and all three at once), and the upstream
calls one measurement of one level made.

    .venv/bin/python scripts/simulate_confidence.py                    # 200 in-process + 30 CLI
    .venv/bin/python scripts/simulate_confidence.py --inprocess 50 --cli 0 --scenario chain
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from stochastic import StochasticModel, pass_probabilities, true_scores  # noqa: E402

from gatekeeper import logs  # noqa: E402
from gatekeeper.config import Settings  # noqa: E402
from gatekeeper.measuring.runner import RunSettings, sweep  # noqa: E402
from gatekeeper.suite.loader import CATEGORIES, DEFAULT_SUITE_DIR, Suite, load_suite  # noqa: E402
from gatekeeper.tiers import Tier, compute_tier  # noqa: E402

Targets = Callable[[Suite], dict[str, float]]


def per_category(instruction: float, json_: float, tool_calling: float) -> Targets:
    by = {"instruction": instruction, "json": json_, "toolCalling": tool_calling}
    return lambda suite: {t.name: by[t.category] for t in suite.tests}


def one_chain_coin_flip(suite: Suite) -> dict[str, float]:
    return {t.name: 0.5 if t.name == "tool_chain_distractor_ids" else 1.0 for t in suite.tests}


SCENARIOS: dict[str, tuple[str, Targets]] = {
    "medium": ("0.97/0.97/0.88 (every test at its category's score)", per_category(0.97, 0.97, 0.88)),
    "chain": ("one weight-4 chain passing half the time (1/1/0.88)", one_chain_coin_flip),
    "large99": ("clearly large: 0.99 everywhere", per_category(0.99, 0.99, 0.99)),
    "large98": ("the power target: 0.98 everywhere", per_category(0.98, 0.98, 0.98)),
}


@dataclass
class Tally:
    n: int = 0
    too_high: int = 0
    too_low: int = 0
    large: int = 0
    under: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    all_under: int = 0
    calls: list[int] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)

    def add(self, tier: Tier, intervals: dict[str, list[float]], truth: dict[str, float], calls: int, n: int) -> None:
        self.n += 1
        self.too_high += tier.rank > compute_tier(truth).rank
        self.too_low += tier.rank < compute_tier(truth).rank
        self.large += tier == Tier.LARGE
        under = {c: intervals[c][0] <= truth[c] for c in CATEGORIES}
        for c, ok in under.items():
            self.under[c] += ok
        self.all_under += all(under.values())
        self.calls.append(calls)
        self.samples.append(n)

    def row(self, label: str) -> str:
        pct = lambda k: f"{100 * k / self.n:5.1f}%"  # noqa: E731
        unders = " ".join(f"{c[:4]} {pct(self.under[c])}" for c in CATEGORIES)
        return (
            f"  {label:<10} n={self.n:<4} too high {pct(self.too_high)}  too low {pct(self.too_low)}  "
            f"large {pct(self.large)}  "
            f"bound <= truth: {unders}, all {pct(self.all_under)}  "
            f"calls {statistics.mean(self.calls):.0f} (max {max(self.calls)}), samples {statistics.mean(self.samples):.1f}"
        )


def run_inprocess(suite: Suite, probabilities: dict[str, float], count: int, settings: RunSettings) -> Tally:
    truth, tally = true_scores(suite, probabilities), Tally()
    for i in range(count):
        model = StochasticModel(suite, probabilities, seed=i)
        measured = asyncio.run(sweep(model.backend(), "m", suite, ["default"], settings, seed=i))
        (profile,) = measured.profiles
        tally.add(profile.tier, profile.score_intervals or {}, truth, measured.calls, profile.samples or 1)
    return tally


def run_cli(suite: Suite, probabilities: dict[str, float], count: int, extra: list[str]) -> Tally:
    truth, tally = true_scores(suite, probabilities), Tally()
    model = StochasticModel(suite, probabilities, seed=12345)
    with model.server() as server, tempfile.TemporaryDirectory() as tmp:
        for i in range(count):
            done = subprocess.run(
                [sys.executable, "-m", "gatekeeper", "bench", "m", "--effort", "default", "--json"]
                + ["--base-url", server.base_url, "--store", f"{tmp}/{i}.json", *extra],
                capture_output=True,
                text=True,
                timeout=900,
                cwd=ROOT,
                env=os.environ | {"PYTHONPATH": str(ROOT)},
            )
            if done.returncode != 0:
                raise SystemExit(f"bench failed: {done.stderr[-2000:]}")
            (result,) = json.loads(done.stdout)["results"]
            (profile,) = result["profiles"]
            tally.add(Tier(profile["tier"]), profile["scoreIntervals"], truth, result["calls"], profile["samples"])
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inprocess", type=int, default=200, help="in-process measurements per scenario")
    parser.add_argument("--cli", type=int, default=30, help="measurements through `gatekeeper bench` per scenario")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="default: all")
    parser.add_argument("--samples", type=int, help="bench.samples (default: the config default)")
    parser.add_argument("--risk", type=float, help="bench.risk (default: the config default)")
    args = parser.parse_args()
    logs.configure("warning", json=False)

    suite = load_suite(DEFAULT_SUITE_DIR)
    bench = Settings().bench
    samples, risk = args.samples or bench.samples, args.risk or bench.risk
    settings = RunSettings(samples=samples, risk=risk, thresholds=bench.thresholds)
    extra = [*(["--samples", str(args.samples)] if args.samples else [])]
    if args.risk and args.cli:
        raise SystemExit("--risk applies in-process only (the CLI reads bench.risk from a config file): add --cli 0")
    print(f"suite {suite.hash} ({len(suite.tests)} tests), bench.samples {samples}, bench.risk {risk}")
    for name in args.scenario or list(SCENARIOS):
        label, targets = SCENARIOS[name]
        probabilities = pass_probabilities(suite, targets(suite))
        truth = true_scores(suite, probabilities)
        shown = "/".join(f"{truth[c]:.3f}" for c in CATEGORIES)
        print(f"{name}: {label}; true instruction/json/toolCalling {shown} -> {compute_tier(truth).value}")
        for where, count in (("in-process", args.inprocess), ("CLI", args.cli)):
            if count:
                started = time.perf_counter()
                if where == "CLI":
                    tally = run_cli(suite, probabilities, count, extra)
                else:
                    tally = run_inprocess(suite, probabilities, count, settings)
                print(tally.row(where) + f"  ({time.perf_counter() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
