"""Confidence in a measurement: category means, 95% intervals over samples, sequential stopping.

`bench.samples: N` runs every test N times. Each category's score is the weighted mean of its
tests' mean scores; its interval is the Student-t 95% interval of that weighted mean, built
from each test's own spread across samples (a stratified mean: tests are the strata):

    mean = sum(w_t * m_t) / W          m_t, s_t = mean and sample std. dev. of test t's scores
    se   = sqrt(sum((w_t / W)^2 * s_t^2 / n_t))
    [low, high] = mean -/+ t(0.975, n - 1) * se, clipped to [0, 1]

where n is the fewest samples any test of the category has. Exact under a normal model of
per-sample scores and deliberately conservative at small N (t = 4.30 at N = 3). Its limit, said
plainly: when every sample of every test agrees the interval has zero width, which is the truth
about repeat noise at temperature 0 but not about unseen instances; randomised tests (`vars`)
are what makes samples differ where they should.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gatekeeper.tiers import Thresholds, compute_tier

# Two-sided 95% Student-t quantiles t(0.975, df) for df = 1..30; past 30 the normal 1.96 is
# within 4% and errs on the narrow side by less than the rounding of a score.
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t975(df: int) -> float:
    """The 97.5% quantile of Student's t with `df` degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96


@dataclass(frozen=True)
class TestScores:
    """One test's scores across samples, with what it counts for."""

    __test__ = False  # not a pytest class

    category: str
    weight: float
    scores: tuple[float, ...]


@dataclass(frozen=True)
class Estimate:
    """A category score: the mean and its 95% interval (equal to the mean with one sample)."""

    mean: float
    low: float
    high: float
    samples: int

    @property
    def half_width(self) -> float:
        """What `±` shows: the larger distance to either bound (bounds are clipped to [0, 1])."""
        return max(self.mean - self.low, self.high - self.mean)


def estimate(tests: Iterable[TestScores]) -> Estimate:
    """Weighted mean of the tests' mean scores and its t-interval (see the module docstring)."""
    tests = [t for t in tests if t.scores]
    total = sum(t.weight for t in tests)
    if not total:
        return Estimate(0.0, 0.0, 0.0, 0)  # a category with no tests scores 0 (fail closed)
    n = min(len(t.scores) for t in tests)
    mean = sum(t.weight * _mean(t.scores) for t in tests) / total
    if n < 2:
        return Estimate(mean, mean, mean, n)
    variance = sum((t.weight / total) ** 2 * _variance(t.scores) / len(t.scores) for t in tests)
    half = t975(n - 1) * math.sqrt(variance)
    return Estimate(mean, max(0.0, mean - half), min(1.0, mean + half), n)


def estimates(tests: Iterable[TestScores], categories: Sequence[str]) -> dict[str, Estimate]:
    tests = list(tests)
    return {c: estimate(t for t in tests if t.category == c) for c in categories}


def settled(found: Mapping[str, Estimate], thresholds: Thresholds) -> bool:
    """True when the tier can no longer change: the same tier from every interval's lower bounds
    and from every upper bound.

    The tier is monotone in each score, so every score inside the intervals then gives that tier:
    only thresholds that matter keep sampling going (a json interval straddling 0.85 does not
    matter when toolCalling is clearly below medium's 0.6).
    """
    lows = {c: e.low for c, e in found.items()}
    highs = {c: e.high for c, e in found.items()}
    return compute_tier(lows, thresholds) == compute_tier(highs, thresholds)


def show(mean: float, interval: Sequence[float] | None) -> str:
    """`0.82 ± 0.05` (or `0.82` for one sample): how scores are printed everywhere."""
    if not interval:
        return f"{mean:.2f}"
    low, high = interval
    return f"{mean:.2f} ± {max(mean - low, high - mean):.2f}"


def shown_scores(scores: Mapping[str, float], intervals: Mapping[str, Sequence[float]] | None) -> dict[str, str]:
    """Every category's score as `show` prints it (what the admin API returns next to the numbers)."""
    return {c: show(v, (intervals or {}).get(c)) for c, v in scores.items()}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _variance(values: Sequence[float]) -> float:
    """Sample variance (n - 1); 0 for a single value."""
    if len(values) < 2:
        return 0.0
    m = _mean(values)
    return sum((v - m) ** 2 for v in values) / (len(values) - 1)
