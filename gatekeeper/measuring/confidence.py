"""Confidence in a measurement: one-sided bounds on category scores that hold whenever sampling stops.

What is bounded
---------------
A test's score on one instance is the weighted fraction of its checks that pass, a number in
[0, 1]. A category's true score is the weighted mean over its tests of each test's *expected*
score (over its instances and the model's sampling):

    mu_c = sum_t a_t * mu_t,        a_t = w_t / sum(w)   (the test's share of the category)

One sample runs every test once on fresh instances. With y_ti = 1 - s_ti the share of test t's
checks that failed in sample i, a category's failures in sample i are Z_i = sum_t a_t * y_ti
(in [0, 1], mean p = 1 - mu_c), and after n samples F_n = Z_1 + ... + Z_n. The point estimate
(`scores`) is 1 - F_n / n.

The bound
---------
For any lam > 0, convexity of exp on [0, 1] (the chord lies above the curve) gives, whatever
the distribution of a test's score, E exp(-lam a_t y) <= 1 - p_t (1 - exp(-lam a_t)): a
Bernoulli score is the worst case, so checks of one test may fail together (a broken chain
fails all of them) without breaking the bound. Tests within a sample are separate
conversations and samples draw fresh instances, so they are independent, and

    E exp(-lam Z_i) <= exp(-h(lam, p)),   h(lam, p) = min over per-test failure rates x_t in
                      [0, 1] with sum_t a_t x_t = p of sum_t -log(1 - x_t (1 - exp(-lam a_t)))

The minimum is over every way the category's failures could be spread over its tests (it
puts them on the heaviest tests: one weight-4 chain failing half the time is the hard case);
its KKT conditions give it in closed form (`_min_cost`). So for the true p,

    M_n = sum_j pi_j exp(-lam_j F_n + n h(lam_j, p))

is a nonnegative supermartingale with M_0 = 1 (a mixture over a few exponents lam_j, weights
pi_j), and Ville's inequality gives P(M_n >= 1/risk for some n) <= risk. The lower bound
`low` is 1 - U_n, U_n the largest p0 with M_n(p0) < 1/risk (h grows with p0): the true score
lies at or above `low` at every n at once with probability >= 1 - risk. That is what makes
sequential stopping free: the level may stop after any sample, for any reason (settled, the
cap, inconclusive), and the bound it stops on is still valid at level `risk`. It cannot
collapse to zero width: with every check of every sample passing, `low` is
1 - U_n < 1, e.g. 0.90 for toolCalling's shares after 8 samples at risk 0.05 (and 0.83 after 4).

The upper end `high` is the mirror image (E exp(lam a y) <= 1 + p (exp(lam a) - 1), the
maximum over spreads, `_max_gain`), also at level `risk`; it only decides when sampling can stop
and what `bench` prints.

The exponents: a Chernoff bound is most powerful at one lam; the mixture is centred on the lam
that best tells a model at the category's highest threshold p0 = 1 - theta from one at the
design score 0.98 (p1 = 0.02): lam* = T_eff * log(p0 (1 - p1) / (p1 (1 - p0))), T_eff = 1 / sum
a_t^2 the category's effective number of tests, with equal weights on lam*/4, lam*/2, lam*,
2 lam*. The price of tuning for power at few samples, said plainly: a finite set of exponents is
not consistent. With many samples the upper bound on the failure rate tends to about 1.3 times
the rate seen (toolCalling), so a model at 0.93 is certified at 0.90 only slowly and one at 0.92
never; `bench` then says that no number of samples would decide.

Why the tier is too high with probability <= risk
-------------------------------------------------
The tier is certified on the lower bounds (`tiers.certified_tier`: the highest tier whose
thresholds, and every lower tier's, the bounds meet). If it exceeds the true tier T, the bounds
meet the thresholds of the tier just above T, which the true scores do not (else `compute_tier`
would give at least that tier): some category c, fixed by the true scores alone, has
mu_c < theta_c <= low_c. So P(tier too high) <= P(low_c > mu_c) <= risk, one category at a time:
a per-category bound at level `risk` suffices, and no correction over categories is needed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from gatekeeper.tiers import DEFAULT_RISK, DESIGN_SCORE, Thresholds, Tier, certified_tier

_MIXTURE = (0.25, 0.5, 1.0, 2.0)  # multiples of lam*, equal weights
_BISECTIONS = 40  # of p0 in [0, 1]: far finer than the 4 decimals a bound is stored with


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


@dataclass(frozen=True)
class Strata:
    """What the bound needs to know about a category before any data: its tests' shares and
    the exponents (chosen from the shares and the category's highest threshold)."""

    shares: tuple[float, ...]
    exponents: tuple[float, ...]

    @classmethod
    def of(cls, weights: Sequence[float], threshold: float | None) -> Strata:
        total = sum(weights)
        shares = tuple(w / total for w in weights) if total > 0 else ()
        return cls(shares, _exponents(shares, threshold))


def _exponents(shares: Sequence[float], threshold: float | None) -> tuple[float, ...]:
    if not shares:
        return ()
    effective_tests = 1 / sum(a * a for a in shares)
    p1 = 1 - DESIGN_SCORE
    p0 = 1 - (threshold if threshold is not None else 0.85)
    # A threshold at or above the design score leaves no contrast to tune to: fall back to 1 nat.
    contrast = math.log(p0 * (1 - p1) / (p1 * (1 - p0))) if p1 < p0 < 1 else 1.0
    best = effective_tests * contrast
    return tuple(best * k for k in _MIXTURE)


def estimate(category: Strata, failures: float, samples: int, risk: float = DEFAULT_RISK) -> Estimate:
    """The estimate after `samples` samples whose weighted failures add up to `failures` (F_n)."""
    if not category.shares or samples < 1:
        return Estimate(0.0, 0.0, 0.0, samples)  # a category with no tests scores 0 (fail closed)
    failures = min(max(failures, 0.0), float(samples))
    mean = 1 - failures / samples
    if risk >= 1:
        # Any number is a bound "at level 1": this is the seed's rule (the tier on the point
        # estimate), for tests and set-ups that choose it knowingly. Nothing is then guaranteed.
        return Estimate(mean, mean, mean, samples)
    low = 1 - _upper_failure(category.shares, category.exponents, failures, samples, risk)
    high = 1 - _lower_failure(category.shares, category.exponents, failures, samples, risk)
    return Estimate(mean, min(low, mean), max(high, mean), samples)


def samples_to_reach(
    category: Strata, failures: float, samples: int, threshold: float, risk: float, limit: int = 1000
) -> int | None:
    """How many more samples, failing at the rate seen so far, would lift the lower bound to
    `threshold`; None when even `limit` more would not (the estimate is at or below it)."""
    if samples < 1 or not category.shares:
        return None
    rate = failures / samples
    if 1 - rate <= threshold:
        return None

    def reaches(n: int) -> bool:
        return estimate(category, rate * n, n, risk).low >= threshold

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


@lru_cache(maxsize=65536)
def _upper_failure(shares: tuple[float, ...], exponents: tuple[float, ...], f: float, n: int, risk: float) -> float:
    """U_n: the largest weighted failure rate p0 the data cannot rule out (M_n(p0) < 1/risk)."""
    weight, limit = 1 / len(exponents), math.log(1 / risk)

    def ruled_out(p0: float) -> bool:
        return _log_sum(math.log(weight) - lam * f + n * _min_cost(lam, shares, p0) for lam in exponents) >= limit

    lo, hi = f / n, 1.0  # M_n(f/n) <= 1: the estimate itself is never ruled out
    if not ruled_out(hi):
        return 1.0
    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if ruled_out(mid) else (mid, hi)
    return hi  # the conservative end


@lru_cache(maxsize=65536)
def _lower_failure(shares: tuple[float, ...], exponents: tuple[float, ...], f: float, n: int, risk: float) -> float:
    """The smallest weighted failure rate p0 the data cannot rule out (the mirror bound)."""
    weight, limit = 1 / len(exponents), math.log(1 / risk)

    def ruled_out(p0: float) -> bool:
        return _log_sum(math.log(weight) + lam * f - n * _max_gain(lam, shares, p0) for lam in exponents) >= limit

    lo, hi = 0.0, f / n
    if not ruled_out(lo):
        return 0.0
    for _ in range(_BISECTIONS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ruled_out(mid) else (lo, mid)
    return lo  # the conservative end


def _log_sum(terms: Iterable[float]) -> float:
    values = list(terms)
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def _min_cost(lam: float, shares: Sequence[float], p: float) -> float:
    """h(lam, p): min of sum_t -log(1 - x_t b_t), b_t = 1 - exp(-lam a_t), over x in [0, 1]^T with
    sum_t a_t x_t = p. Convex, so by KKT x_t = clip(1/b_t - m/a_t, 0, 1) for the multiplier m
    that meets the constraint; between breakpoints the constraint is linear in m, solved exactly."""
    if p <= 0:
        return 0.0
    if p >= 1:
        return lam  # every test always fails: sum_t lam a_t
    b = [-math.expm1(-lam * a) for a in shares]
    # x_t = 1 - (1 - b_t) ... falls from 1 (m <= a_t (1 - b_t) / b_t) to 0 (m >= a_t / b_t).
    pieces = [(a * (1 - bt) / bt, a / bt, 1 / bt, a) for a, bt in zip(shares, b, strict=True)]
    m = _multiplier(pieces, p)
    return sum(
        -math.log((1 - x) + x * math.exp(-lam * a))  # -log(1 - x b), exact at x = 1
        for a, x in zip(shares, (min(1.0, max(0.0, top - m / a)) for _, _, top, a in pieces), strict=True)
    )


def _max_gain(lam: float, shares: Sequence[float], p: float) -> float:
    """g(lam, p): max of sum_t log(1 + x_t c_t), c_t = exp(lam a_t) - 1, over the same x. Concave,
    so x_t = clip(m/a_t - 1/c_t, 0, 1), rising with m; solved the same way."""
    if p <= 0:
        return 0.0
    if p >= 1:
        return lam
    c = [math.expm1(min(lam * a, 700.0)) for a in shares]
    xs = _rising(shares, c, p)
    return sum(math.log1p(x * ct) for x, ct in zip(xs, c, strict=True))


def _multiplier(pieces: list[tuple[float, float, float, float]], p: float) -> float:
    """The m with sum_t a_t clip(top_t - m/a_t, 0, 1) = p: the sum falls with m, linearly between
    the breakpoints (full_t, zero_t) of the tests, so find the piece and solve it."""

    def total(m: float) -> float:
        return sum(a * min(1.0, max(0.0, top - m / a)) for _, _, top, a in pieces)

    points = sorted({edge for full, zero, _, _ in pieces for edge in (full, zero)})
    previous = 0.0
    for point in points:
        if total(point) <= p:  # the solution lies in [previous, point]
            mid = (previous + point) / 2
            inner = [(top, a) for full, zero, top, a in pieces if full < mid < zero]
            fixed = sum(a for full, _, _, a in pieces if mid <= full)
            if not inner:
                return point
            # p = fixed + sum_inner (a top - m)  ->  m
            return (fixed + sum(a * top for top, a in inner) - p) / len(inner)
        previous = point
    return points[-1]


def _rising(shares: Sequence[float], c: Sequence[float], p: float) -> list[float]:
    """x_t = clip(m/a_t - 1/c_t, 0, 1) with sum_t a_t x_t = p (the sum rises with m)."""
    pieces = [(a / ct, a * (1 + ct) / ct, a, ct) for a, ct in zip(shares, c, strict=True)]  # (zero, full)

    def xs(m: float) -> list[float]:
        return [min(1.0, max(0.0, m / a - 1 / ct)) for _, _, a, ct in pieces]

    points = sorted({edge for zero, full, _, _ in pieces for edge in (zero, full)})
    previous = 0.0
    for point in points:
        if sum(a * x for a, x in zip(shares, xs(point), strict=True)) >= p:
            mid = (previous + point) / 2
            inner = [(a, ct) for zero, full, a, ct in pieces if zero < mid < full]
            fixed = sum(a for _, full, a, _ in pieces if mid >= full)
            if not inner:
                return xs(point)
            # p = fixed + sum_inner (m - a/c)  ->  m
            return xs((p - fixed + sum(a / ct for a, ct in inner)) / len(inner))
        previous = point
    return xs(points[-1])
