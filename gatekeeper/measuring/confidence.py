"""Confidence in a measurement: one-sided bounds on category scores that hold whenever sampling stops.

What is bounded
---------------
A test's score on one instance is the weighted fraction of its checks that pass, a number in
[0, 1]. A category's true score is the weighted mean over its tests of each test's *expected*
score (over its instances and the model's sampling):

    mu_c = sum_t a_t * mu_t,        a_t = w_t / sum(w)   (the test's share of the category)

One sample runs every test once on fresh instances. The category's failed share in sample i is

    Z_i = sum_t a_t * (1 - s_ti)      in [0, 1], with mean p = 1 - mu_c,

and the point estimate (`scores`) is 1 - (Z_1 + ... + Z_n) / n. The samples are independent
and alike (fresh instances, separate conversations, the same model). Nothing is assumed about
the tests *within* a sample: they may fail together (a model having a bad moment fails every
test of the sample), in part (valid JSON with a wrong value), only on the heaviest tests, or
as a function of the drawn instance. Each of those only changes the distribution of Z_i, and
the bound holds for every distribution on [0, 1].

The bound: a betting confidence sequence
----------------------------------------
(Waudby-Smith and Ramdas, "Estimating means of bounded random variables by betting", 2023.)
For a candidate failure rate m and a bet c in (0, 1), with lam = c / (1 - m):

    K_n(m) = sum_j w_j prod_i (1 + lam_j (m - Z_i))        (weights w_j summing to 1)

Each factor is at least 1 - c_j > 0 (Z_i <= 1) and has mean 1 + lam (m - p), so at m = p the
mixture is a nonnegative martingale with K_0 = 1, and Ville's inequality gives
P(K_n(p) >= 1/risk for some n) <= risk. Each factor grows with m (its derivative is
c (1 - Z) / (1 - m)^2 >= 0), so the m the data do not rule out form an interval [0, U_n), found
by bisection; the lower bound is `low` = 1 - U_n. Hence P(mu_c < low at any n) <= risk: the level
may stop after any sample, for any reason (settled, out of reach, the cap), and the bound it
stops on is still valid at level `risk`. At m = p-hat the product is at most
exp(lam sum (p-hat - Z_i)) = 1, so the estimate itself is never ruled out, and `low` <= mean.

The upper end `high` is the mirror image: K'_n(m) = sum_j v_j prod_i (1 + (c'_j / m)(Z_i - m)),
falling with m, `high` = 1 - the smallest m not ruled out; also at level `risk`. It only
decides when sampling stops and what `bench` prints.

Why these bets
--------------
A clean sample multiplies K_n(m) by 1 + c m / (1 - m), at most 1 / (1 - m) (c = 1): that is the
most any valid bound can learn from it, since a model that fails a whole sample with
probability m passes n in a row with probability (1 - m)^n. So certifying toolCalling >= 0.90 at
risk 0.05 takes at least log(20) / -log(0.9) = 28.4 samples, whatever the bound. A sample that
fails whole multiplies it by about 1 - c. The bets: c = 0.95, near the best for a model that
rarely fails, and c = 0.8 = 1 - p1 / m, the Kelly bet (the growth-optimal lam = (m - p1) /
(m (1 - m))) for a model at the design score (p1 = 0.02) whose failures come as whole samples,
tested at toolCalling's threshold (m = 0.1); equal weights. A model passing every check is then
certified `large` after 32 whole samples at level 0.05 (below). The mirror's bets (0.1, 0.3, 0.6: the Kelly bet for a rate
p1 above m is (p1 - m) / (1 - m), small for rates near the cut) make a model clearly below a
threshold settle in a few dozen samples.

What it costs, and why it is worth it: an earlier bound counted the tests of one sample as
independent evidence (8 clean samples certified `large`), which is false when failures within
a sample are correlated: a model failing every test of a sample with probability 0.12 (true
toolCalling 0.89, `medium`) was certified `large` in 40 of 100 measurements.

Each category's bounds are computed at the full level `risk` (the argument below says why that
is enough for the tier, and for any per-category minimum judged on a lower bound, such as
`tools.requires`). The stored `scoreIntervals` are therefore each one-sided at level `risk`,
one category at a time; read together they hold simultaneously at level 3 * risk (Bonferroni),
not `risk`. An earlier version split the risk (risk / 3 per category) for the sake of that
joint reading and paid for it in calls: a model passing every check needed 44 whole samples
instead of 32, for no gain in the tier's guarantee.

Why the tier is too high with probability <= risk
-------------------------------------------------
The tier is certified on the lower bounds (`tiers.certified_tier`: the highest tier whose
thresholds, and every lower tier's, the bounds meet). If it exceeds the true tier T, the bounds
meet the thresholds of the tier just above T, which the true scores do not (else `compute_tier`
would give at least that tier): some category c, fixed by the true scores alone, has
mu_c < theta_c <= low_c. So P(tier too high) <= P(low_c > mu_c) <= risk, one category at a time:
a per-category bound at level `risk` suffices for the tier. The same holds for any set of
per-category minimums (a tool's `tools.requires`): if the true scores miss one, a category fixed
by the truth alone has its lower bound above its true score.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from gatekeeper.rules.tiers import DEFAULT_RISK, DESIGN_SCORE, Thresholds, Tier, certified_tier

# (bet c, weight): the lower bound's mixture and the mirror's (the module docstring says why).
BETS = ((0.95, 0.5), (0.8, 0.5))
MIRROR_BETS = ((0.1, 1 / 3), (0.3, 1 / 3), (0.6, 1 / 3))
_BISECTIONS = 40  # of m in [0, 1]: far finer than the 4 decimals a bound is stored with


@dataclass(frozen=True)
class Estimate:
    """A category score: the point estimate and its bounds, each one-sided at level `risk`."""

    mean: float
    low: float
    high: float
    samples: int

    @property
    def half_width(self) -> float:
        return max(self.mean - self.low, self.high - self.mean)


def estimate(
    failures: Sequence[float],
    risk: float = DEFAULT_RISK,
    bets: Sequence[float] | None = None,
    strata: tuple[Sequence[Stratum], Sequence[Stratum]] | None = None,
) -> Estimate:
    """The estimate after the samples whose failed shares of the category are `failures` (Z_i).

    With `bets` (one per observation, each chosen before it was made: a predictable bet), the
    lower bound's wealth is the single product prod_i (1 + c_i (m - Z_i) / (1 - m)) instead of
    the fixed mixture; still a nonnegative martingale at the true m, so still valid at level
    `risk` at any stopping time. The upper bound keeps the fixed mirror mixture.

    With `strata` (each test's share and its runs, for the lower bound and for the upper: see
    "stratified betting" below), each bound rules a rate out on the average of that wealth and
    the tests' own: valid at level `risk` as each alone is, and close to the better of the two."""
    n = len(failures)
    if n < 1:
        return Estimate(0.0, 0.0, 0.0, 0)
    clipped = [min(max(z, 0.0), 1.0) for z in failures]
    mean = 1 - sum(clipped) / n
    if risk >= 1:
        # Any number is a bound "at level 1": this is the seed's rule (the tier on the point
        # estimate), for tests and set-ups that choose it knowingly. Nothing is then guaranteed.
        return Estimate(mean, mean, mean, n)
    # The bound depends on the failures only through how often each value occurs (fixed bets):
    # a few distinct values, however many samples, so each evaluation is cheap.
    counts = tuple(sorted(Counter(round(z, 12) for z in clipped).items()))
    if strata is not None:
        low = 1 - combined_upper_failure(counts, bets, clipped, strata[0], risk)
        high = 1 - combined_lower_failure(counts, strata[1], risk)
        return Estimate(mean, min(low, mean), max(high, mean), n)
    upper = _upper_failure(counts, risk) if bets is None else _upper_failure_betting(_pairs(clipped, bets), risk)
    low = 1 - upper
    high = 1 - _lower_failure(counts, risk)
    return Estimate(mean, min(low, mean), max(high, mean), n)


def log_wealth(failures: Sequence[float], m: float, mirror: bool = False, bets: Sequence[float] | None = None) -> float:
    """log K_n(m) after these observations: the lower bound's wealth (the mirror's with `mirror`;
    with `bets`, the predictable bets' product) at candidate failure rate m; m is ruled out once
    it reaches log(1 / risk)."""
    if not failures:
        return 0.0
    if not 0 < m < 1:
        return -math.inf
    if bets is not None and not mirror:
        return _betting_wealth(_pairs(failures, bets), m)
    counts = tuple(sorted(Counter(round(min(max(z, 0.0), 1.0), 12) for z in failures).items()))
    return _log_wealth(counts, MIRROR_BETS if mirror else BETS, _Factor(m, mirror))


def samples_to_reach(mean: float, samples: int, threshold: float, risk: float, limit: int = 1000) -> int | None:
    """About how many more samples would lift the lower bound to `threshold` if the failures went
    on at the rate seen, spread evenly (the most favourable way: a guide, not a promise); None
    when even `limit` more would not (the estimate is at or below the threshold)."""
    if samples < 1 or mean <= threshold:
        return None
    rate = 1 - mean

    def reaches(n: int) -> bool:
        return 1 - _upper_failure(((round(rate, 12), n),), risk) >= threshold

    if reaches(samples):
        return 0
    if not reaches(samples + limit):
        return None
    lo, hi = samples, samples + limit  # reaches(lo) is False, reaches(hi) True
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if reaches(mid) else (mid, hi)
    return hi - samples


def settled(found: Mapping[str, Estimate], thresholds: Thresholds) -> bool:
    """True when more samples cannot change the tier (with confidence): the tier certified on the
    lower bounds is the one the upper bounds would give. Only thresholds that matter keep sampling
    going: a json bound straddling 0.85 does not matter when toolCalling is clearly below 0.6."""
    return tier_of(found, thresholds) == certified_tier({c: e.high for c, e in found.items()}, thresholds)


def out_of_reach(found: Mapping[str, Estimate], thresholds: Thresholds) -> bool:
    """True when the next tier up needs a category whose upper bound is below halfway from its
    threshold to the design score: the model is then shown (at level risk) to be far from the
    score the sample budget is sized for, and sampling on would only spend the cap. Stopping
    never costs validity (the bounds hold at any stopping time); it costs power only when a
    model at or above the design score has its upper bound fall that far below its true score,
    which happens with probability at most `risk` (in the simulation: never)."""
    for category, threshold in next_tier(tier_of(found, thresholds), thresholds).items():
        e = found.get(category)
        if e is None or e.low >= threshold:
            continue
        if threshold < DESIGN_SCORE and e.high < halfway(threshold):
            return True
    return False


def next_tier(tier: Tier, thresholds: Thresholds) -> dict[str, float]:
    """The thresholds of the tier above `tier` (none above large): what sampling on could reach."""
    return {Tier.SMALL: thresholds.medium, Tier.MEDIUM: thresholds.large}.get(tier, {})


def halfway(threshold: float) -> float:
    """Halfway from `threshold` to the design score the budget is sized for (the threshold itself
    when it is at or above it): an upper bound under it shows the model far from the score a
    budget could certify, and the next tier out of reach."""
    return (threshold + DESIGN_SCORE) / 2 if threshold < DESIGN_SCORE else threshold


def outward(e: Estimate) -> list[float]:
    """[low, high] to 4 decimals, rounded outwards: a stored or shown bound is never tighter
    than the one the tier was decided on."""
    return [math.floor(e.low * 1e4) / 1e4, math.ceil(e.high * 1e4) / 1e4]


def tier_of(found: Mapping[str, Estimate], thresholds: Thresholds) -> Tier:
    """The tier a measurement certifies: decided on the lower bounds."""
    return certified_tier({c: e.low for c, e in found.items()}, thresholds)


def show(mean: float, interval: Sequence[float] | None) -> str:
    """`0.82 (>= 0.77)`: the point estimate and the lower bound the tier was decided on."""
    if not interval:
        return f"{mean:.2f}"
    return f"{mean:.2f} (>= {interval[0]:.2f})"


def shown_scores(scores: Mapping[str, float], intervals: Mapping[str, Sequence[float]] | None) -> dict[str, str]:
    """Every category's score as `show` prints it (what the admin API returns next to the numbers)."""
    return {c: show(v, (intervals or {}).get(c)) for c, v in scores.items()}


# --- the arithmetic -------------------------------------------------------------------------

Counts = tuple[tuple[float, int], ...]  # (failed share Z, how many samples had it)


def _log_wealth(counts: Counts, bets: Sequence[tuple[float, float]], factor: _Factor) -> float:
    """log K_n: the log of the weighted sum over bets of prod_i factor(c, Z_i)."""
    terms = []
    for c, weight in bets:
        total = math.log(weight)
        for z, k in counts:
            f = factor(c, z)
            if f <= 0:
                total = -math.inf
                break
            total += k * math.log(f)
        terms.append(total)
    top = max(terms)
    if top == -math.inf:
        return top
    return top + math.log(sum(math.exp(t - top) for t in terms))


class _Factor:
    """One sample's factor of a bet at candidate rate m (a callable (c, z) -> factor)."""

    def __init__(self, m: float, mirror: bool) -> None:
        self.m, self.mirror = m, mirror

    def __call__(self, c: float, z: float) -> float:
        m = self.m
        if self.mirror:
            return 1 + c * (z - m) / m  # lam = c / m: at least 1 - c at z = 0
        return 1 + c * (m - z) / (1 - m)  # lam = c / (1 - m): at least 1 - c at z = 1


def _edge(inside: float, outside: float, ruled_out: Callable[[float], bool]) -> float:
    """The far end of the rates not ruled out, from `inside` (never ruled out) towards `outside`,
    by bisection (a wealth grows monotonically towards `outside`): the conservative end."""
    for _ in range(_BISECTIONS):
        mid = (inside + outside) / 2
        inside, outside = (inside, mid) if ruled_out(mid) else (mid, outside)
    return outside


@lru_cache(maxsize=65536)
def _upper_failure(counts: Counts, risk: float) -> float:
    """U_n: the largest failure rate m the data cannot rule out (K_n(m) < 1/risk)."""
    limit = math.log(1 / risk)
    mean = sum(z * k for z, k in counts) / sum(k for _, k in counts)  # the estimate is never ruled out
    if mean >= 1:
        return 1.0
    return _edge(mean, 1.0, lambda m: _log_wealth(counts, BETS, _Factor(m, mirror=False)) >= limit)


Pairs = tuple[tuple[tuple[float, float], int], ...]  # ((failed share Z, bet c), how many)


def _pairs(failures: Sequence[float], bets: Sequence[float]) -> Pairs:
    if len(bets) != len(failures):
        raise ValueError(f"{len(bets)} bets for {len(failures)} observations")
    clipped = (round(min(max(z, 0.0), 1.0), 12) for z in failures)
    return tuple(sorted(Counter(zip(clipped, bets, strict=True)).items()))


def _betting_wealth(pairs: Pairs, m: float) -> float:
    total = 0.0
    for (z, c), k in pairs:
        f = 1 + c * (m - z) / (1 - m)
        if f <= 0:
            return -math.inf
        total += k * math.log(f)
    return total


@lru_cache(maxsize=65536)
def _upper_failure_betting(pairs: Pairs, risk: float) -> float:
    """U_n under predictable bets: the largest m with prod_i (1 + c_i (m - Z_i) / (1 - m)) < 1/risk.

    The product grows with m (each factor does), so bisection finds it; at m = the mean the
    log product is at most sum c_i (mean - Z_i) / (1 - mean), which may be positive with unequal
    bets, so the search starts at 0 and the bound is then capped at the estimate."""
    limit = math.log(1 / risk)
    if _betting_wealth(pairs, 0.0) >= limit:
        return 0.0
    return _edge(0.0, 1.0, lambda m: _betting_wealth(pairs, m) >= limit)


@lru_cache(maxsize=65536)
def _lower_failure(counts: Counts, risk: float) -> float:
    """The smallest failure rate m the data cannot rule out (the mirror bound)."""
    limit = math.log(1 / risk)
    mean = sum(z * k for z, k in counts) / sum(k for _, k in counts)
    if mean <= 0:
        return 0.0
    return _edge(mean, 0.0, lambda m: _log_wealth(counts, MIRROR_BETS, _Factor(m, mirror=True)) >= limit)


# --- stratified betting: one wealth per test ---------------------------------------------------
#
# (docs/statistics.md, "Each test's own wealth (stratified betting)", has the argument.) Each run of test t
# multiplies the test's own wealth by 1 + c (x_t - z) / (1 - x_t), its bet c chosen before the
# run; at the test's true failure rate x_t = p_t each factor has conditional mean 1, so the
# product over every run of every test, at the true rates, is a nonnegative martingale. A
# category rate m is ruled out when the least total log wealth over every per-test vector x with
# sum_t a_t x_t = m passes the limit: the true vector is one of them. That least total V(m) is a
# convex problem (each test's log wealth g_t is convex and increasing in x_t); its Lagrange dual
# gives lower bounds V(m) >= nu m + sum_t phi_t(nu a_t), phi_t(s) = min_x g_t(x) - s x, for every
# nu >= 0, so a rate ruled out on them is ruled out on V itself: a coarse grid of nu costs
# tightness, never validity, and each phi_t is rounded down (the tangent below its bracket).

Runs = tuple[tuple[tuple[float, float], int], ...]  # one test's ((failed share z, bet c), how many)
Stratum = tuple[float, Runs]  # (the test's share a_t of the category, its runs)
# The average's weight on the observations' wealth: a model passing every check is decided by
# it (log(1 / (0.75 risk)) instead of log(1 / risk): 10% more calls), a model whose tests differ
# by the tests' own (log(1 / (0.25 risk)): 46% more than alone, still far fewer than the pooled
# wealth's); measured against 0.5 in docs/statistics.md.
POOLED_WEIGHT = 0.75
NUS = tuple(10 ** (k / 8) for k in range(-16, 57))  # the dual's grid: 0.01 .. 1e7, ratio 1.33


def stratified_runs(runs: Sequence[tuple[float, float]]) -> Runs:
    """One test's (z, bet) runs in the counted form the bound caches on."""
    return tuple(sorted(Counter((round(min(max(z, 0.0), 1.0), 12), c) for z, c in runs).items()))


def stratified_log_wealth(strata: Sequence[Stratum], m: float) -> float:
    """A lower bound on V(m), the least total log wealth of the tests over the per-test rates
    whose weighted mean is m (-inf outside (0, 1))."""
    if not 0 <= m <= 1:
        return -math.inf
    duals = [_dual(runs, share) for share, runs in strata]
    return max(nu * m + sum(d[j] for d in duals) for j, nu in enumerate(NUS))


def combined_upper_failure(
    counts: Counts, bets: Sequence[float] | None, failures: Sequence[float], strata: Sequence[Stratum], risk: float
) -> float:
    """U_n of the weighted mean of two wealths, the category's observations' and the tests' own:
    w K_Z(m) + (1 - w) exp V(m) >= 1 / risk rules m out (w = POOLED_WEIGHT; a weighted mean of
    two nonnegative martingales is one)."""
    limit = math.log(1 / risk)
    duals = tuple(_dual(runs, share) for share, runs in strata)
    if bets is None:
        pooled: Callable[[float], float] = lambda m: _log_wealth(counts, BETS, _Factor(m, mirror=False))  # noqa: E731
    else:
        pairs = _pairs(failures, bets)
        pooled = lambda m: _betting_wealth(pairs, m)  # noqa: E731

    def ruled_out(m: float) -> bool:
        own = max(nu * m + sum(d[j] for d in duals) for j, nu in enumerate(NUS))
        return averaged(pooled(m), own) >= limit

    if ruled_out(0.0):
        return 0.0
    return _edge(0.0, 1.0, ruled_out)


def combined_lower_failure(counts: Counts, strata: Sequence[Stratum], risk: float) -> float:
    """The mirror: the smallest failure rate not ruled out by the average of the observations'
    fixed mirror mixture and the tests' own wealths on successes (a run's success 1 - z is
    bounded from above as its failure is from below: `strata` hold (1 - z, bet) runs)."""
    limit = math.log(1 / risk)
    duals = tuple(_dual(runs, share) for share, runs in strata)

    def ruled_out(success: float) -> bool:
        own = max(nu * success + sum(d[j] for d in duals) for j, nu in enumerate(NUS))
        pooled = _log_wealth(counts, MIRROR_BETS, _Factor(1 - success, mirror=True)) if success < 1 else -math.inf
        return averaged(pooled, own) >= limit

    if ruled_out(0.0):
        return 1.0
    return 1 - _edge(0.0, 1.0, ruled_out)


def averaged(pooled: float, own: float) -> float:
    """log of the weighted mean of the two wealths (given as logs): POOLED_WEIGHT on the
    observations', the rest on the tests' own."""
    return logaddexp(math.log(POOLED_WEIGHT) + pooled, math.log(1 - POOLED_WEIGHT) + own)


def logaddexp(a: float, b: float) -> float:
    """log(exp(a) + exp(b)), without overflow."""
    top = max(a, b)
    if top == -math.inf:
        return top
    return top + math.log(math.exp(a - top) + math.exp(b - top))


@lru_cache(maxsize=65536)
def _dual(runs: Runs, share: float) -> tuple[float, ...]:
    """phi(nu share) for every nu of NUS, each rounded down: min over x in [0, 1] of
    g(x) - nu share x, g the test's log wealth at rate x."""
    moving = [(z, c, k) for (z, c), k in runs if c > 0 and z < 1]  # a factor that depends on x
    fixed = sum(k * math.log(1 - c) for (z, c), k in runs if c > 0 and z >= 1)  # 1 - c whatever x
    found = []
    for nu in NUS:
        s = nu * share
        if not moving:
            found.append(fixed - s)  # nothing rules any x out: the test may fail always
            continue
        if _moving_slope(moving, 0.0) >= s:
            found.append(fixed + _moving_wealth(moving, 0.0))
            continue
        lo, hi = 0.0, 1.0  # slope(lo) < s; slope grows without bound towards 1
        for _ in range(_BISECTIONS):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _moving_slope(moving, mid) < s else (lo, mid)
        # Convexity: g(x) - s x >= its tangent at lo, whose least value on [lo, hi] is at hi.
        value = _moving_wealth(moving, lo) - s * lo + (_moving_slope(moving, lo) - s) * (hi - lo)
        found.append(fixed + value)
    return tuple(found)


def _moving_wealth(moving: Sequence[tuple[float, float, int]], x: float) -> float:
    return sum(k * math.log(1 + c * (x - z) / (1 - x)) for z, c, k in moving)


def _moving_slope(moving: Sequence[tuple[float, float, int]], x: float) -> float:
    """g'(x): each factor's log, log(1 - c z - (1 - c) x) - log(1 - x), differentiated."""
    return sum(k * (1 / (1 - x) - (1 - c) / (1 - c * z - (1 - c) * x)) for z, c, k in moving)
