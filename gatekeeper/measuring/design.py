"""How a level spends its calls: per category, which observation to make next, and when to stop.

An observation of a category is a number Z in [0, 1] whose mean, given everything measured
before it, is the category's failure rate p = 1 - mu_c (confidence.py's docstring). Two kinds
of design give one:

- `k` draws (k >= 1): k tests drawn with replacement, each with probability its share a_t of
  the category, each on a fresh instance in its own conversation; Z is the mean of their failed
  shares 1 - s. One draw has mean sum_t a_t (1 - mu_t) = p, whatever the model, so the mean of
  k has too.
- `WHOLE`: every test of the category once; Z = sum_t a_t (1 - s_t) (the earlier "sample").

The betting confidence sequence stays valid when the design of each observation is chosen from
the observations before it: every factor 1 + lam (m - Z) still has conditional mean 1 at the
true m = p, so the wealth stays a nonnegative martingale and Ville's inequality holds, at any
stopping time. A round plans its observations from the rounds before it only, then runs them
concurrently; the product of the factors does not depend on their order.

What it assumes: separate conversations are independent given the model (true of a stateless
API serving independent requests). A backend whose quality drifts in streaks (several
consecutive calls failing together) breaks that for draws, and `bench.design: whole` is then
the safer choice: a whole observation only assumes its runs are independent of *other*
observations (docs/statistics.md measures both).

Which design: the one expected to grow the deciding wealth fastest per call, predicted from the
category's own runs (each test's failed shares seen so far, tests assumed independent), at the
rate the category has to be told apart from (`target`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from gatekeeper.measuring.confidence import BETS, MIRROR_BETS, Estimate, estimate, log_wealth
from gatekeeper.suite.loader import BenchTest

WHOLE = 0  # the design running every test of the category once; k >= 1 is k draws by weight
DRAWS = (1, 2, 4)  # the draw counts a plan chooses among, beside WHOLE
_PREDICTIONS = 200  # predicted observations per design when choosing (a fixed-seed Monte Carlo)
NEVER = math.inf
# The bets an observation may be given (c in lam = c / (1 - m)): up to 0.95, as the fixed mixture.
BET_GRID = (
    0.05,
    0.1,
    0.2,
    0.3,
    0.4,
    0.5,
    0.6,
    0.7,
    0.8,
    0.85,
    0.9,
    0.95,
)  # calls still needed when no design can decide


@dataclass(frozen=True)
class Target:
    """What the category must be told apart from: failure rate `m` (1 - a threshold), from below
    (`mirror` False: the lower bound must rise above 1 - m) or from above (the upper bound fall)."""

    m: float
    mirror: bool = False


@dataclass
class CategoryPlan:
    """One category at one level: its observations so far and what to spend next."""

    name: str
    tests: Sequence[BenchTest]
    risk: float  # the level of the category's bounds
    budget: int  # the most calls it may spend (bench.samples whole observations)
    failures: list[float] = field(default_factory=list)  # Z of each observation
    bets: list[float] | None = field(default_factory=list)  # its predictable bet; None: the fixed mixture
    seen: dict[str, list[float]] = field(default_factory=dict)  # test -> failed share of each run
    calls: int = 0  # calls made
    spent: int = 0  # calls planned: every step of every test run (a broken chain makes fewer calls)
    designs: dict[str, int] = field(default_factory=dict)  # design name -> observations made
    status: str = "open"  # open | decided | out of reach | capped | stopped | inconclusive

    def __post_init__(self) -> None:
        self._predicted: dict[int, list[float]] = {}  # design -> predicted observations, until the next record
        total = sum(t.weight for t in self.tests)
        self.shares = [t.weight / total for t in self.tests]
        self.steps = [len(t.all_steps) for t in self.tests]

    @property
    def whole_cost(self) -> int:
        return sum(self.steps)

    def cost(self, design: int) -> float:
        """Expected calls of one observation (a broken chain makes fewer)."""
        if design == WHOLE:
            return self.whole_cost
        return design * sum(a * s for a, s in zip(self.shares, self.steps, strict=True))

    def draw(self, design: int, rng: random.Random) -> list[BenchTest]:
        """The tests of one observation: every test (WHOLE), or `design` drawn by weight."""
        if design == WHOLE:
            return list(self.tests)
        return rng.choices(list(self.tests), weights=self.shares, k=design)

    def record(self, design: int, runs: Sequence[tuple[BenchTest, float, int]], bet: float | None = None) -> None:
        """One observation's runs: (test, score, calls made), made with `bet` (chosen before it)."""
        self._predicted.clear()
        index = {t.name: i for i, t in enumerate(self.tests)}
        for test, score, calls in runs:
            self.seen.setdefault(test.name, []).append(1 - score)
            self.calls += calls
            self.spent += len(test.all_steps)
        if design == WHOLE:
            z = sum(self.shares[index[t.name]] * (1 - s) for t, s, _ in runs)
        else:
            z = sum(1 - s for _, s, _ in runs) / len(runs)
        self.failures.append(z)
        if self.bets is not None:
            if bet is None:
                raise ValueError(f"{self.name}: an observation without its bet")
            self.bets.append(bet)
        name = design_name(design)
        self.designs[name] = self.designs.get(name, 0) + 1

    def estimate(self) -> Estimate:
        """The bounds so far; before any observation, nothing is known: [0, 1]."""
        return estimate(self.failures, self.risk, self.bets) if self.failures else Estimate(0.0, 0.0, 1.0, 0)

    # -- choosing ------------------------------------------------------------------------------

    def predicted(self, design: int) -> list[float]:
        """Observations of `design` as the runs seen predict them: each test's failed shares,
        drawn independently (a fixed-seed Monte Carlo; an unseen test as the category's runs)."""
        if design in self._predicted:
            return self._predicted[design]
        pooled = [z for runs in self.seen.values() for z in runs] or [0.0]
        pools = [self.seen.get(t.name) or pooled for t in self.tests]
        rng = random.Random(0)
        found = []
        for _ in range(_PREDICTIONS):
            if design == WHOLE:
                found.append(sum(a * rng.choice(p) for a, p in zip(self.shares, pools, strict=True)))
            else:
                picks = rng.choices(pools, weights=self.shares, k=design)
                found.append(sum(rng.choice(p) for p in picks) / design)
        self._predicted[design] = found
        return found

    def growth(self, design: int, target: Target) -> tuple[float, float]:
        """(predicted mean log-growth per observation of `design`, the bet giving it): the best
        bet of the grid toward `target` (the mirror's fixed bets toward an upper one)."""
        predicted = self.predicted(design)
        fixed = MIRROR_BETS if target.mirror else BETS if self.bets is None else None
        grid = BET_GRID if fixed is None else [c for c, _ in fixed]
        return max((_mean_log_factor(predicted, c, target), c) for c in grid)

    def choose(self, target: Target) -> int:
        """The design expected to decide soonest per call (WHOLE when none is expected to grow)."""
        rates = {d: self.growth(d, target)[0] / self.cost(d) for d in (*DRAWS, WHOLE)}
        best = max(rates, key=lambda d: rates[d])
        return best if rates[best] > 0 else WHOLE

    def needed(self, target: Target) -> float:
        """About how many more calls would decide at `target` if the runs went on as seen: the
        wealth's remaining distance to 1/risk over the best design's growth per call (NEVER when
        no design grows it). A guide for the display and the out-of-reach rule, not a promise."""
        bets = None if target.mirror else self.bets
        missing = math.log(1 / self.risk) - log_wealth(self.failures, target.m, target.mirror, bets)
        if missing <= 0:
            return 0.0
        design = self.choose(target)
        rate = self.growth(design, target)[0] / self.cost(design)
        return missing / rate if rate > 0 else NEVER

    def remaining(self) -> int:
        """What is left of the budget, counted in planned calls (so that `bench.samples` 1 runs
        every test once, whatever breaks)."""
        return max(0, self.budget - self.spent)


def design_name(design: int) -> str:
    return "whole" if design == WHOLE else f"draws{design}"


def _mean_log_factor(predicted: Sequence[float], c: float, target: Target) -> float:
    m = target.m
    if not 0 < m < 1:
        return -math.inf
    total = 0.0
    for z in predicted:
        f = 1 + c * (z - m) / m if target.mirror else 1 + c * (m - z) / (1 - m)
        if f <= 0:
            return -math.inf
        total += math.log(f)
    return total / len(predicted)
