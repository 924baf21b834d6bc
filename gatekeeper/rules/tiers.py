"""Tiers: the ordered levels of trust a model earns, and how scores map to one."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class Tier(StrEnum):
    SMALL = "small"
    MEDIUM = "medium"
    LARGE = "large"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def allows(self, required: Tier) -> bool:
        """True when a model at this tier may see a tool that requires `required`."""
        return _RANK[self] >= _RANK[required]

    # Ordered by trust (small < medium < large), not as the strings compare ("large" < "small"):
    # outside code sorts and compares tiers, and the string order would rank large lowest.
    def __lt__(self, other: object) -> bool:
        return self.rank < _rank_of(other)

    def __le__(self, other: object) -> bool:
        return self.rank <= _rank_of(other)

    def __gt__(self, other: object) -> bool:
        return self.rank > _rank_of(other)

    def __ge__(self, other: object) -> bool:
        return self.rank >= _rank_of(other)


_RANK = {Tier.SMALL: 0, Tier.MEDIUM: 1, Tier.LARGE: 2}


def _rank_of(other: object) -> int:
    """A tier's rank; a tier's name ("medium") compares as that tier, anything else cannot."""
    if isinstance(other, str) and other in _RANK:
        return _RANK[Tier(other)]
    raise TypeError(f"a Tier compares with a Tier or 'small' | 'medium' | 'large', not {other!r}")


def lowest(*tiers: Tier) -> Tier:
    return min(tiers, key=lambda t: t.rank)


Score = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class Thresholds(BaseModel):
    """Minimum category scores for each tier above `small` (defaults from the seed)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # A score is in [0, 1]: a threshold outside it (or NaN) would make a tier free or unreachable.
    large: dict[str, Score] = Field(default_factory=lambda: {"toolCalling": 0.9, "instruction": 0.85, "json": 0.85})
    medium: dict[str, Score] = Field(default_factory=lambda: {"toolCalling": 0.6, "json": 0.5})


def compute_tier(scores: dict[str, float], thresholds: Thresholds | None = None) -> Tier:
    """The highest tier whose every threshold the scores reach; a missing score counts as 0."""
    thresholds = thresholds or Thresholds()
    for tier, needs in ((Tier.LARGE, thresholds.large), (Tier.MEDIUM, thresholds.medium)):
        if all(scores.get(category, 0.0) >= minimum for category, minimum in needs.items()):
            return tier
    return Tier.SMALL


def certified_tier(bounds: dict[str, float], thresholds: Thresholds | None = None) -> Tier:
    """The tier lower confidence bounds certify: the highest tier whose thresholds *and every lower
    tier's* the bounds meet. With nested thresholds (the defaults: large asks at least what medium
    asks) this is `compute_tier`; with others it never skips a tier, which is what keeps
    P(certified tier > true tier) at most the bounds' risk (measuring/confidence.py)."""
    thresholds = thresholds or Thresholds()
    tier = Tier.SMALL
    for candidate, needs in ((Tier.MEDIUM, thresholds.medium), (Tier.LARGE, thresholds.large)):
        if not all(bounds.get(category, 0.0) >= minimum for category, minimum in needs.items()):
            break
        tier = candidate
    return tier


# The defaults of the certification (`bench.risk`, `bench.samples`), here so that the config and
# the measurement read one value; the arithmetic behind them is measuring/confidence.py's.
# The score a model must have in every category to be certified `large` at least 90% of the
# time with the default samples (docs/statistics.md): the bets and the out-of-reach rule are
# tuned to it.
DESIGN_SCORE = 0.98
DEFAULT_RISK = 0.05
# A category's budget per level, in whole passes' worth of calls (a level stops as soon as its tier
# is settled or the next tier is out of reach): the cap at which even a model at 0.98 whose
# failures come as whole samples (the hardest way to be at 0.98) is certified `large` >= 90% of
# the time at risk 0.05 under `bench.design: whole`. The adaptive design rarely comes near it: a
# model passing every check stops after about 112 calls (5 passes' worth), most models at 0.98
# after 150-350 (docs/statistics.md).
DEFAULT_SAMPLES = 200
