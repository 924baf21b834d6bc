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
API serving independent requests). That also lets each test keep a wealth of its own, over its
own runs (`CategoryPlan.stake`, confidence.py's "stratified betting"), averaged with the
observations'. A backend whose quality drifts in streaks (several consecutive calls failing
together) breaks it. `bench.design: whole` assumes less: a round is one whole observation per
category, so it holds for streaks shorter than a round. `bench.design: spaced` makes at most
one observation per category a round and starts each round `bench.spacing_s` after the last
ended, so it holds for streaks in time shorter than that. Neither keeps the tests' own wealths
(the runs of a round may fail together); docs/statistics.md measures all three.

Which design: the one expected to grow the deciding wealth fastest per call, predicted from the
category's own runs (each test's failed shares seen so far, tests assumed independent), at the
rate the category has to be told apart from (`target`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gatekeeper.measuring.confidence import (
    BETS,
    MIRROR_BETS,
    Estimate,
    Stratum,
    averaged,
    estimate,
    halfway,
    log_wealth,
    next_tier,
    out_of_reach,
    settled,
    stratified_log_wealth,
    stratified_runs,
    tier_of,
)
from gatekeeper.rules.tiers import Thresholds
from gatekeeper.suite.loader import BenchTest

WHOLE = 0  # the design running every test of the category once; k >= 1 is k draws by weight
DRAWS = (1, 2, 4)  # the draw counts a plan chooses among, beside WHOLE
_PREDICTIONS = 200  # predicted observations per design when choosing (a fixed-seed Monte Carlo)
NEVER = math.inf
PRIOR = 0.02  # the failures a test is credited with before its first run (the design score's rate)
MAX_BET = 0.95  # a test's bet, as the observations' (a failed run keeps 5% of the wealth)
FIRST_BET = 0.5  # a test's first run, on nothing seen yet: a failure keeps half
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


class StopReason(StrEnum):
    """Why a level stopped spending calls."""

    SETTLED = "settled"  # more calls cannot change the tier (with confidence)
    OUT_OF_REACH = "out_of_reach"  # the next tier up cannot be reached within the budget
    CAPPED = "capped"  # a category the next tier needs has spent its budget
    SKIPPED = "skipped"  # --recommend-only: a cheaper explicit level is certified large
    INCONCLUSIVE = "inconclusive"  # the answers say nothing about the model (cut at max_tokens)
    SHARED = "shared"  # the backend sent its requests without the effort: `default`'s evidence is its own


class CategoryState(StrEnum):
    """What a category's measurement ended as (the report's `state`)."""

    OPEN = "open"
    DECIDED = "decided"  # no threshold of the category lies inside its bounds
    OUT_OF_REACH = "out of reach"
    CAPPED = "capped"
    NOT_NEEDED = "not needed"  # undecided, but the tier did not depend on it
    SKIPPED = "skipped"
    INCONCLUSIVE = "inconclusive"
    SHARED = "shared with default"


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
    status: CategoryState = CategoryState.OPEN
    # Each test's own wealth (confidence.py, "stratified betting"): per test, each run's failed
    # share and its two bets (the lower bound's, the upper's), chosen before the run. None: the
    # tests' runs are not independent by design (bench.design whole), only the observations are.
    stakes: dict[str, list[tuple[float, float, float]]] | None = field(default_factory=dict)
    # The failure rate the lower bound is pushed above and the score the upper bound is pushed
    # under (set by `plan_round` before each round): what the tests' bets are aimed at.
    aims: tuple[float, float] = (0.4, 0.9)

    def __post_init__(self) -> None:
        self._predicted: dict[int, list[float]] = {}  # design -> predicted observations, until the next record
        self._found: Estimate | None = None
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
        self._found = None
        index = {t.name: i for i, t in enumerate(self.tests)}
        for test, score, calls in runs:
            if self.stakes is not None:  # bets from the runs recorded before this one only
                self.stakes.setdefault(test.name, []).append((1 - score, *self.stake(test.name)))
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
        """The bounds so far, around the stratified estimate; before any observation, nothing is
        known: [0, 1].

        The bounds come from the observations Z (valid whatever the design); the point estimate
        is `stratified()`, not 1 - mean(Z): each test's own runs already say what it scores, and
        a whole observation and a one-test draw are not worth the same. Moving the point never
        loosens a bound: `low` is kept at or under the point and `high` at or over it."""
        if not self.failures:
            return Estimate(0.0, 0.0, 1.0, 0)
        if self._found is None:
            found = estimate(self.failures, self.risk, self.bets, self.strata())
            mean = self.stratified()
            self._found = Estimate(mean, min(found.low, mean), max(found.high, mean), found.samples)
        return self._found

    def strata(self) -> tuple[list[Stratum], list[Stratum]] | None:
        """Each test's share and runs for the two bounds: (failed share, lower bet) and
        (passed share, upper bet); a test never run has none (it may fail always)."""
        if self.stakes is None:
            return None
        runs = [self.stakes.get(t.name, []) for t in self.tests]
        low = [(a, stratified_runs([(z, c) for z, c, _ in r])) for a, r in zip(self.shares, runs, strict=True)]
        high = [(a, stratified_runs([(1 - z, c) for z, _, c in r])) for a, r in zip(self.shares, runs, strict=True)]
        return low, high

    def stake(self, name: str) -> tuple[float, float]:
        """The bets of test `name`'s next run, for the lower bound and for the upper: the
        approximate Kelly bet lam = (x - mu) / (var + (x - mu)^2) (Waudby-Smith and Ramdas'
        aGRAPA) for the test's failed share (its mean and variance from its runs, smoothed
        by PRIOR) against a target x, the test's mean shifted by as much as the category must
        move to reach its aim (how the least-wealth rates spread the gap when the tests look
        alike); the upper bound's the same on the passed share 1 - z. A test that fails every
        run gets no lower bet, one that passes every run none on the upper."""
        moments = {t.name: _moments(self.seen.get(t.name, [])) for t in self.tests}
        mean = sum(a * moments[t.name][0] for t, a in zip(self.tests, self.shares, strict=True))
        mu, var = moments[name]
        fail_aim, pass_aim = self.aims
        most = MAX_BET if name in self.seen else FIRST_BET
        return _kelly(mu, var, mu + fail_aim - mean, most), _kelly(1 - mu, var, (1 - mu) + pass_aim - (1 - mean), most)

    def stratified(self) -> float:
        """sum_t a_t * (the mean score of test t's runs): the seed's category score (each test's
        score weighted by its share), exact for a deterministic model after one run of each
        test, and the weighted mean of the profile's `testResults`. A test never run counts 0
        (fail closed; the first round runs every test)."""
        total = 0.0
        for test, share in zip(self.tests, self.shares, strict=True):
            runs = self.seen.get(test.name)
            if runs:
                total += share * (1 - sum(runs) / len(runs))
        return total

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
        pooled = log_wealth(self.failures, target.m, target.mirror, bets)
        strata = self.strata()
        if strata is None:
            missing = math.log(1 / self.risk) - pooled
        else:  # the average of the observations' wealth and the tests' own (confidence.estimate)
            own = (
                stratified_log_wealth(strata[1], 1 - target.m)
                if target.mirror
                else stratified_log_wealth(strata[0], target.m)
            )
            missing = math.log(1 / self.risk) - averaged(pooled, own)
        if missing <= 0:
            return 0.0
        design = self.choose(target)
        rate = self.growth(design, target)[0] / self.cost(design)
        if strata is not None:
            rate = max(rate, self.own_growth(target))
        return missing / rate if rate > 0 else NEVER

    def own_growth(self, target: Target) -> float:
        """The tests' own wealth's predicted growth per call under draws by weight: each test's
        runs so far replayed at the bet and target `stake` would give it."""
        moments = {t.name: _moments(self.seen.get(t.name, [])) for t in self.tests}
        mean = sum(a * moments[t.name][0] for t, a in zip(self.tests, self.shares, strict=True))
        grown = cost = 0.0
        for test, share, steps in zip(self.tests, self.shares, self.steps, strict=True):
            mu, var = moments[test.name]
            runs = self.seen.get(test.name) or [mu]
            if target.mirror:  # the upper bound's wealth is on passed shares
                mu, runs, x = 1 - mu, [1 - z for z in runs], (1 - mu) + (1 - target.m) - (1 - mean)
            else:
                x = mu + target.m - mean
            c = _kelly(mu, var, x, MAX_BET)
            if c > 0:
                grown += share * sum(math.log(1 + c * (x - z) / (1 - x)) for z in runs) / len(runs)
            cost += share * steps
        return grown / cost

    def remaining(self) -> int:
        """What is left of the budget, counted in planned calls (so that `bench.samples` 1 runs
        every test once, whatever breaks)."""
        return max(0, self.budget - self.spent)


def _moments(failed: Sequence[float]) -> tuple[float, float]:
    """A test's failed share: mean and variance of its runs, each as if PRIOR had been seen once
    more (so a test never run, or never failed, is not bet on as certain)."""
    n = len(failed)
    mean = (sum(failed) + PRIOR) / (n + 1)
    var = (sum((z - mean) ** 2 for z in failed) + PRIOR * (1 - PRIOR)) / (n + 1)
    return mean, var


def _kelly(mu: float, var: float, x: float, most: float) -> float:
    """aGRAPA's bet c = lam (1 - x), lam = (x - mu) / (var + (x - mu)^2), in [0, most]; none
    when the target is not above the mean or not below 1 (nothing left to rule out)."""
    if not mu < x < 1:
        return 0.0
    return min((x - mu) / (var + (x - mu) ** 2) * (1 - x), most)


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


# -- the adaptive policy: what a level does next ------------------------------------------------

Pick = tuple[CategoryPlan, int, float | None]  # a planned observation: category, design, bet


def first_target(plan: CategoryPlan, thresholds: Thresholds) -> Target:
    """The lowest threshold of the category: what its first bet is made toward."""
    cuts = [t[plan.name] for t in (thresholds.medium, thresholds.large) if plan.name in t]
    return Target(1 - min(cuts, default=0.5))


def aims(category: str, found: Estimate | None, thresholds: Thresholds) -> tuple[float, float]:
    """What the category's next runs are bet toward: (the failure rate the lower bound must rise
    past: 1 - the lowest cut above it, and the score the upper bound must fall under: the highest
    cut below it), cuts being the category's thresholds; the outermost cut when none is left."""
    cuts = sorted(t[category] for t in (thresholds.medium, thresholds.large) if category in t) or [0.5]
    low, high = (found.low, found.high) if found is not None and found.samples else (0.0, 1.0)
    up = next((c for c in cuts if c > low), cuts[-1])
    down = next((c for c in reversed(cuts) if c < high), cuts[0])
    return 1 - up, down


def plan_round(
    plans: Mapping[str, CategoryPlan],
    found: Mapping[str, Estimate],
    thresholds: Thresholds,
    concurrency: int,
    whole: bool = False,
) -> tuple[StopReason | None, list[Pick]]:
    """Why the level stops (None while it goes on) and the observations of its next round.

    `whole` (bench.design whole): every test once per round, until settled, out of reach
    (`confidence.out_of_reach`) or a category's budget is spent. Adaptive: the first round runs
    every test once (what draws are predicted from: the seed's one sample). Then only the
    categories the next tier up still needs (lower bound under its threshold) are spent on. When
    each of them is expected to reach its threshold within its budget, every one gets the
    observations it is expected to need (at most `concurrency`), each of the design deciding
    soonest per call; otherwise the one expected to fall soonest is spent on alone, since one
    category below a threshold decides the tier. The next tier is out of reach when a category
    it needs cannot reach its threshold within its budget at the rate seen and its upper bound
    is below `halfway`. A category's last observation within its budget is whole.
    """
    if settled(found, thresholds):
        return StopReason.SETTLED, []
    for each in plans.values():
        each.aims = aims(each.name, found.get(each.name), thresholds)
    if whole:
        if out_of_reach(found, thresholds):
            return StopReason.OUT_OF_REACH, []
        if any(plan.remaining() <= 0 for plan in plans.values()):
            return StopReason.CAPPED, []
        return None, [(plan, WHOLE, None) for plan in plans.values()]
    unseen = [plan for plan in plans.values() if not plan.failures]
    if unseen:
        return None, [(plan, WHOLE, plan.growth(WHOLE, first_target(plan, thresholds))[1]) for plan in unseen]
    rising, falling = [], []
    for c, threshold in next_tier(tier_of(found, thresholds), thresholds).items():
        plan = plans.get(c)
        if plan is None or found[c].low >= threshold:
            continue
        if plan.remaining() <= 0:
            return StopReason.CAPPED, []
        up = Target(1 - threshold)
        need = plan.needed(up)
        if need <= plan.remaining():
            rising.append((plan, up, up, need))
            continue
        if found[c].high < halfway(threshold):
            return StopReason.OUT_OF_REACH, []
        down = Target(1 - halfway(threshold), mirror=True)
        falling.append((plan, down, up, plan.needed(down)))
    chosen = [min(falling, key=lambda f: f[3])] if falling else rising
    picks: list[Pick] = []
    for plan, target, up, need in chosen:
        if plan.remaining() <= plan.whole_cost:  # the last observation within the budget
            picks.append((plan, WHOLE, plan.growth(WHOLE, up)[1]))
            continue
        design = plan.choose(target)
        per = plan.cost(design)
        count = 1 if need == NEVER else math.ceil(need / per)
        room = math.floor((plan.remaining() - plan.whole_cost) / per)
        limit = max(1, concurrency // len(plan.tests) if design == WHOLE else concurrency)
        picks += [(plan, design, plan.growth(design, up)[1])] * max(1, min(count, room, limit))
    return None, picks
