"""What one effort level of a measurement produced, and what its answers say.

A `Level` holds the observations a level made (each a list of `TestRun`s, one conversation per
test) and the per-category `CategoryPlan`s they were recorded in; it reports per category, says
when its answers say nothing about the model (`inconclusive_reason`), and when its retried
errors look like the model's own (`uneven_errors`). The runner (`runner.Sweep`) decides what a
level does next; this module only reads what it did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gatekeeper.measuring.confidence import Estimate, next_tier, outward, tier_of
from gatekeeper.measuring.design import NEVER, CategoryPlan, CategoryState, StopReason, Target
from gatekeeper.measuring.effort import chi2_sf
from gatekeeper.rules.tiers import Thresholds
from gatekeeper.suite.checks import run_check
from gatekeeper.suite.loader import CATEGORIES, BenchTest
from gatekeeper.types import Answer

# A level whose answers are at least this often empty and cut at max_tokens measured nothing:
# "almost all", leaving room for the few short answers a thinking model still finishes.
INCONCLUSIVE_FRACTION = 0.75
UNEVEN_LEVEL = 0.05  # the level of the test that retried errors fell evenly on the categories


def score_test(test: BenchTest, answers: list[Answer]) -> float:
    """Weighted fraction of passed checks over all steps; steps never reached score 0 but still
    count, and so does an answer cut short (past its bound, or past the context): it passes no check."""
    total = passed = 0.0
    for i, step in enumerate(test.all_steps):
        for check in step.checks:
            total += check.weight
            if i < len(answers) and not answers[i].cut and run_check(check, answers[i]):
                passed += check.weight
    return passed / total if total else 0.0


@dataclass
class TestRun:
    """One test's conversation: the answer at each step it reached."""

    __test__ = False  # not a pytest class

    test: BenchTest
    answers: list[Answer] = field(default_factory=list)
    completion_tokens: int = 0
    seconds: float = 0.0
    effort_applied: bool = True
    retries: int = 0  # failed attempts the backend retried (transport, rate limit, server error)
    _score: float | None = field(default=None, repr=False)

    def score(self) -> float:
        """score_test of the answers, computed once: read after every sample, when the run is over."""
        if self._score is None:
            self._score = score_test(self.test, self.answers)
        return self._score


@dataclass
class Observation:
    """One observation of a category: its design and the runs it made."""

    category: str
    index: int  # the category's index-th observation at this level
    design: int
    bet: float | None  # chosen before it was made (None: the fixed mixture of bench.design whole)
    runs: list[TestRun]


@dataclass
class Level:
    """What one effort level of a measurement produced."""

    effort: str
    plans: dict[str, CategoryPlan]  # per category with tests
    suite_calls: int  # the calls of one run of every test
    observations: list[Observation] = field(default_factory=list)
    finished_s: float = 0.0  # when its last test ended, from the start of the measurement
    round_ended: float = 0.0  # time.monotonic() when its last round ended (bench.design spaced)
    shared_with: str | None = None  # the level whose evidence stands for this one's (StopReason.SHARED)
    calls_saved: int = 0  # calls of its budget it did not make
    inconclusive: str | None = None  # why nothing can be concluded from it
    stopped: StopReason | None = None  # why it stopped
    skipped_for: str | None = None  # StopReason.SKIPPED: the cheaper level certified large
    expected: int = 0  # calls made plus those still expected (for Progress.total)

    @property
    def runs(self) -> list[TestRun]:
        return [run for o in self.observations for run in o.runs]

    @property
    def calls(self) -> int:
        return sum(len(run.answers) for run in self.runs)

    @property
    def samples(self) -> int:
        """Its size in runs of the whole suite (what `samples` meant when every test ran each time)."""
        return max(1, math.ceil(self.calls / self.suite_calls)) if self.observations else 0

    def retries(self) -> dict[str, int]:
        """Per category, the failed attempts its calls were retried after."""
        found = dict.fromkeys(self.plans, 0)
        for o in self.observations:
            found[o.category] += sum(run.retries for run in o.runs)
        return found

    def cut(self) -> dict[str, dict[str, dict[str, int]]]:
        """Per category, its tests whose answers were cut (past their bound, or the context): how
        many, by finish_reason. A cut answer scores 0 like a wrong one; this says which it was."""
        found: dict[str, dict[str, dict[str, int]]] = {c: {} for c in self.plans}
        for o in self.observations:
            for run in o.runs:
                for answer in run.answers:
                    if answer.cut:
                        reasons = found[o.category].setdefault(run.test.name, {})
                        reasons[str(answer.finish_reason)] = reasons.get(str(answer.finish_reason), 0) + 1
        return found

    def estimates(self) -> dict[str, Estimate]:
        """Every category's estimate; a category with no tests scores 0 (fail closed)."""
        return {c: self.plans[c].estimate() if c in self.plans else Estimate(0.0, 0.0, 0.0, 0) for c in CATEGORIES}

    def report(self, thresholds: Thresholds) -> dict[str, dict[str, Any]]:
        """Per category: calls spent, observations by design, the bounds, about how many more calls
        the next tier up would need (None when it cannot be reached), its state, and its tests'
        answers that were cut (`gatekeeper bench --json` shows it under `categories`)."""
        found = self.estimates()
        above = next_tier(tier_of(found, thresholds), thresholds)
        shown: dict[str, dict[str, Any]] = {}
        retries, cut = self.retries(), self.cut()
        for c, plan in self.plans.items():
            e = found[c]
            threshold = above.get(c)
            need = 0.0 if threshold is None or e.low >= threshold else plan.needed(Target(1 - threshold))
            shown[c] = {
                "calls": plan.calls,
                "observations": dict(plan.designs),
                "bound": outward(e),
                "needed": None if need == NEVER else math.ceil(need),
                "state": plan.status,
                "retries": retries[c],
                "cut": cut[c],  # test -> finish_reason -> answers
            }
        return shown


def uneven_errors(level: Level) -> str | None:
    """Why the level's retried errors look like the model's, or None when they fall evenly.

    A retried error is resampled until an answer comes: harmless when the transport fails
    whatever the model says, a hidden bias when the errors depend on the answer (a server
    failing the calls it cannot parse in a form no pattern knows). Such errors fall more on the
    categories the model finds hard; a chi-square test of homogeneity at 5% on each category's
    failed and answered attempts asks whether they did."""
    retries = level.retries()
    attempts = {c: (retries[c], plan.calls) for c, plan in level.plans.items() if plan.calls or retries[c]}
    failed = sum(r for r, _ in attempts.values())
    total = sum(r + n for r, n in attempts.values())
    if not failed or len(attempts) < 2 or failed == total:
        return None
    statistic = 0.0
    for r, n in attempts.values():
        for observed, row in ((r, failed), (n, total - failed)):
            expected = row * (r + n) / total
            statistic += (observed - expected) ** 2 / expected
    p = chi2_sf(statistic, len(attempts) - 1)
    if p >= UNEVEN_LEVEL:
        return None
    shown = ", ".join(f"{c} {r} of {r + n}" for c, (r, n) in attempts.items())
    return (
        f"retried errors fell unevenly on the categories (failed attempts: {shown}; chi-square p = {p:.2g}): "
        f"errors that depend on the answer are the model's own failures retried away, and the scores may be too high"
    )


def inconclusive_reason(runs: list[TestRun]) -> str | None:
    """Why a sample's answers say nothing about the model, or None when they do.

    Almost every answer empty and cut by `length` is a model that spent its whole token budget
    (typically thinking), not a model that failed: scoring it would store a false `small`.
    """
    answers = [a for run in runs for a in run.answers]
    empty = sum(1 for a in answers if a.empty_by_length)
    if answers and empty / len(answers) >= INCONCLUSIVE_FRACTION:
        return (
            f"{empty} of {len(answers)} answers were empty and cut at the token limit (finish_reason "
            f"'length'): a reasoning model spending its tokens on thinking looks like this; at an "
            f"explicit effort level raise bench.max_tokens (the default level, no effort sent, is "
            f"given each test's answer bound only: measure the model's explicit levels). Nothing stored"
        )
    return None


def category_state(plan: CategoryPlan, level: Level, thresholds: Thresholds) -> CategoryState:
    """What a category's measurement ended as, for the report."""
    if level.inconclusive:
        return CategoryState.INCONCLUSIVE
    if level.stopped == StopReason.SKIPPED:
        return CategoryState.SKIPPED
    if level.stopped == StopReason.SHARED:
        return CategoryState.SHARED
    e = level.estimates()[plan.name]
    cuts = sorted({t[plan.name] for t in (thresholds.medium, thresholds.large) if plan.name in t})
    if all(e.low >= cut or e.high < cut for cut in cuts):
        return CategoryState.DECIDED
    if level.stopped == StopReason.CAPPED:
        return CategoryState.CAPPED
    if level.stopped == StopReason.OUT_OF_REACH:
        return CategoryState.OUT_OF_REACH
    return CategoryState.NOT_NEEDED


def blocks(level: Level) -> dict[str, tuple[float, int]]:
    """The level's runs keyed by where they were drawn (category, observation, position, test):
    levels that made the same observation ran the same test on the same instance."""
    return {
        f"{o.category}/{o.index}/{i}/{run.test.name}": (run.score(), run.completion_tokens)
        for o in level.observations
        for i, run in enumerate(o.runs)
    }
