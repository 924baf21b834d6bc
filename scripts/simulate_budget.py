"""How often a stored tool budget is too high, against models whose accuracy per N is known.

Each scenario is a model that chooses the right tool among N offered with a known probability
acc(N) (and otherwise calls a wrong tool of the offered ones); the true budget is the largest rung
of the ladder up to which every rung reaches the tier's toolCalling threshold (1 when the first
does not). The real measurement (gatekeeper.measuring.budget, through a MockBackend) is run many
times per scenario; printed: the true budget, how often the stored one was too high (the
guarantee: at most `risk`), too low, and the calls one measurement made.

    .venv/bin/python scripts/simulate_budget.py                     # 1000 runs per scenario
    .venv/bin/python scripts/simulate_budget.py --runs 200 --scenario cliff16
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from gatekeeper.measuring.backends import BackendRequest, MockBackend  # noqa: E402
from gatekeeper.measuring.budget import ACTIONS, LADDER, POOL, measure_budget, threshold_for  # noqa: E402
from gatekeeper.rules.tiers import Thresholds, Tier  # noqa: E402
from gatekeeper.types import Answer, ToolCall  # noqa: E402

# name -> (tier, acc per rung of LADDER). Thresholds: large 0.9, medium and small 0.6.
SCENARIOS: dict[str, tuple[Tier, tuple[float, ...]]] = {
    "perfect": (Tier.LARGE, (1.0, 1.0, 1.0, 1.0, 1.0)),
    "cliff16": (Tier.LARGE, (0.99, 0.97, 0.89, 0.7, 0.5)),  # true budget 8; 16 just under 0.9
    "edge": (Tier.LARGE, (0.895, 0.89, 0.85, 0.8, 0.7)),  # true budget 1: every rung just under
    "over": (Tier.LARGE, (0.93, 0.92, 0.91, 0.905, 0.9)),  # true budget 64, hard to certify
    "medium": (Tier.MEDIUM, (0.9, 0.8, 0.65, 0.58, 0.4)),  # true budget 16 at 0.6
    "small": (Tier.SMALL, (0.7, 0.55, 0.4, 0.3, 0.2)),  # true budget 4 at 0.6
}


def true_budget(accuracy: tuple[float, ...], threshold: float) -> int:
    budget = 1
    for n, acc in zip(LADDER, accuracy, strict=True):
        if acc < threshold:
            break
        budget = n
    return budget


def model(accuracy: tuple[float, ...], rng: random.Random) -> MockBackend:
    """Right with probability acc(N), else a call to another offered tool (with the right id)."""
    by_n = dict(zip(LADDER, accuracy, strict=True))
    by_name = {t.name: t for t in POOL}

    def answer(request: BackendRequest) -> Answer:
        prompt = request.messages[-1]["content"]
        offered = [by_name[t["function"]["name"]] for t in request.tools]
        value = re.search(r"[A-Z]{3}-\d{4}", prompt).group(0)  # type: ignore[union-attr]
        right = next(t for t in offered if ACTIONS[t.action][2].format(o=t.obj, id=value) == prompt)
        chosen = right if rng.random() < by_n[len(offered)] else rng.choice([t for t in offered if t != right])
        return Answer("", (ToolCall("c1", chosen.name, json.dumps({chosen.argument: value})),))

    return MockBackend(answer)


async def run(name: str, runs: int, risk: float) -> dict[str, object]:
    tier, accuracy = SCENARIOS[name]
    threshold = threshold_for(tier, Thresholds())
    truth = true_budget(accuracy, threshold)
    budgets, calls = [], []
    for i in range(runs):
        backend = model(accuracy, random.Random(f"{name}/{i}"))
        found = await measure_budget(backend, "m", None, tier, risk=risk, seed=i)
        budgets.append(found.budget)
        calls.append(found.calls)
    return {
        "scenario": name,
        "tier": tier.value,
        "threshold": threshold,
        "true budget": truth,
        "too high": sum(b > truth for b in budgets) / runs,
        "too low": sum(b < truth for b in budgets) / runs,
        "most stored": statistics.mode(budgets),
        "calls mean": statistics.fmean(calls),
        "calls p90": sorted(calls)[int(0.9 * (runs - 1))],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--risk", type=float, default=0.05)
    parser.add_argument("--scenario", choices=list(SCENARIOS), action="append")
    args = parser.parse_args()
    print(f"runs per scenario: {args.runs}, risk {args.risk}, ladder {LADDER}")
    print("| scenario | tier | threshold | true budget | too high | too low | most stored | calls mean | calls p90 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.scenario or list(SCENARIOS):
        r = asyncio.run(run(name, args.runs, args.risk))
        print(
            f"| {r['scenario']} | {r['tier']} | {r['threshold']} | {r['true budget']} | {r['too high']:.3f} | "
            f"{r['too low']:.3f} | {r['most stored']} | {r['calls mean']:.0f} | {r['calls p90']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
