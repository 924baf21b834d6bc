"""Did the effort level make a difference? A test on the levels' scores and completion tokens.

Identical answers at every level proved a deterministic backend ignores `reasoning_effort`, but
a sampling backend never answers identically twice, ignored effort or not. So the levels are
compared as treatments in a randomised block design: every (sample k, test) pair is a block,
played at every level on the same instance (the runner draws sample k's instances once for all
levels), and Friedman's test asks whether any level ranks consistently higher or lower within
the blocks, for the test scores and, separately, for the completion tokens. Ranks within a block
make a long JSON answer and a one-word answer comparable, and ties (most scores are 0 or 1) are
mid-ranked with Friedman's tie correction; blocks where every level ties carry no information
and drop out. The statistic is compared with chi-square on (levels - 1) degrees of freedom.

The effort counts as ignored when neither the scores nor the tokens differ at `LEVEL` (5%): a
backend that really applies the effort spends visibly different tokens at different levels, so
a miss needs both signals to be weak. Identical answers everywhere give no differences at all
(p = 1): the deterministic case reads as before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

LEVEL = 0.05

# One level's runs: sample k -> test name -> (score, completion tokens).
Runs = Sequence[Mapping[str, tuple[float, int]]]


def effort_ignored(levels: Mapping[str, Runs], explicit: Sequence[str]) -> bool:
    """True when at least two levels, one of them in `explicit` (an effort actually sent), show
    no significant difference in scores or in completion tokens over the blocks they share."""
    if len(levels) < 2 or not any(name in explicit for name in levels):
        return False
    runs = list(levels.values())
    shared = min(len(r) for r in runs)
    if shared == 0:
        return False
    names = set.intersection(*(set(r[k]) for r in runs for k in range(shared)))
    blocks = [(k, name) for k in range(shared) for name in sorted(names)]
    if not blocks:
        return False  # no run was made alike at every level: nothing to compare, nothing concluded
    scores = [[r[k][name][0] for r in runs] for k, name in blocks]
    tokens = [[float(r[k][name][1]) for r in runs] for k, name in blocks]
    return friedman_p(scores) > LEVEL and friedman_p(tokens) > LEVEL


def friedman_p(blocks: Sequence[Sequence[float]]) -> float:
    """The p-value of Friedman's test (tie-corrected, chi-square approximation) that every
    treatment (column) has the same distribution within blocks (rows); 1.0 without variation."""
    if not blocks:
        return 1.0
    k = len(blocks[0])
    if k < 2:
        return 1.0
    rank_sums = [0.0] * k
    spread = 0.0  # sum over blocks of sum_j (r_j - (k + 1) / 2)^2: what ties leave of the variance
    for row in blocks:
        ranks = _mid_ranks(row)
        for j, r in enumerate(ranks):
            rank_sums[j] += r
        spread += sum((r - (k + 1) / 2) ** 2 for r in ranks)
    if spread == 0:
        return 1.0
    n = len(blocks)
    between = sum((s - n * (k + 1) / 2) ** 2 for s in rank_sums)
    statistic = (k - 1) * between / spread
    return chi2_sf(statistic, k - 1)


def _mid_ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for m in range(i, j + 1):
            ranks[order[m]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def chi2_sf(x: float, df: int) -> float:
    """P(chi-square(df) >= x) for an integer df >= 1 (closed forms: no scipy needed)."""
    if x <= 0:
        return 1.0
    half = x / 2
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for i in range(1, df // 2):
            term *= half / i
            total += term
        return min(1.0, math.exp(-half) * total)
    root = math.sqrt(x)
    total = math.erfc(root / math.sqrt(2))
    term = math.sqrt(2 * x / math.pi) * math.exp(-half)  # x^(1/2) e^(-x/2) / Gamma(3/2) / 2^(1/2)
    for i in range(1, (df + 1) // 2):
        total += term
        term *= x / (2 * i + 1)
    return min(1.0, total)
