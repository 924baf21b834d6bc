"""Runs a suite through a Backend: conversations -> check results -> scores -> Profile.

One measurement of a model runs one or more effort levels. A level spends its calls in rounds:
each round plans, per category still open, observations by design (`design`: tests drawn by
weight, or the whole category), runs them concurrently, and stops the level once the tier is
settled, the next tier is out of reach, or a category has spent its budget (`bench.samples`
whole runs of it). The tier is certified on lower bounds that stay valid whenever and however
the level stops (`confidence`: P(tier too high) <= risk). `bench.design: whole` runs every test
once per round instead. Instances are drawn from one seed, keyed by (category, observation,
position): levels making the same observations see the same prompts (`effort_ignored` pairs them).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from structlog.contextvars import bound_contextvars

from gatekeeper.measuring.backends import Backend, together
from gatekeeper.measuring.confidence import outward, tier_of
from gatekeeper.measuring.design import CategoryPlan, StopReason, design_name, plan_round
from gatekeeper.measuring.effort import effort_ignored
from gatekeeper.measuring.level import (
    Level,
    Observation,
    TestRun,
    blocks,
    category_state,
    inconclusive_reason,
    uneven_errors,
)
from gatekeeper.observe import logs
from gatekeeper.rules.tiers import DEFAULT_RISK, DEFAULT_SAMPLES, Thresholds, Tier
from gatekeeper.store.profile import DEFAULT_EFFORT, Profile, TestResult
from gatekeeper.suite.loader import CATEGORIES, BenchTest, Suite, instantiate

log = logs.get_logger(__name__)

# `default` (no effort field), what most clients send, is measured too; the recommendation is explicit.
DEFAULT_EFFORTS = ("default", "none", "low", "medium", "xhigh")
# Known reasoning levels, cheapest first; unknown levels keep the order they were given in.
EFFORT_COST = ("none", "minimal", "low", "medium", "high", "xhigh")

ProgressFn = Callable[[str, str, str], None]  # (model, effort, test name) after each test


@dataclass
class Progress:
    """Calls answered out of the calls a measurement will make; read live by the admin console.

    `total` starts at the levels' budgets (every step of every test, `bench.samples` times per
    level) and is re-estimated after every round: the calls made, plus what each open category
    is expected to still need (`levels`: per effort, per category, what `CategoryPlan.report`
    says). Written by one event loop; readers in other threads read plain values.
    """

    key: str
    answered: int = 0
    total: int = 0
    started: float = field(default_factory=time.time)
    finished: float | None = None
    error: str | None = None
    tier: str | None = None
    levels: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)


WHOLE_DESIGN = "whole"  # bench.design: every test of the suite once per round (the earlier samples)
SPACED_DESIGN = "spaced"  # bench.design: adaptive, one observation per category a round, rounds bench.spacing_s apart


@dataclass(frozen=True)
class RunSettings:
    concurrency: int = 8
    system_prompt: str | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    samples: int = DEFAULT_SAMPLES  # at most this many runs of each test per level (stops when decided)
    risk: float = DEFAULT_RISK  # P(certified tier > true tier) at most this, per profile
    design: str = "adaptive"  # or WHOLE_DESIGN, SPACED_DESIGN
    spacing_s: float = 0.0  # SPACED_DESIGN: the least time from the end of a round to the next
    recommend_only: bool = False  # a sweep may skip levels costlier than one certified large


@dataclass
class Measured:
    """A measurement of one model: its profiles, and what the levels told apart."""

    profiles: list[Profile]
    inconclusive: dict[str, str]  # effort -> reason (no profile for it)
    skipped: dict[str, str]  # effort -> why it was not measured to the end (no profile for it)
    reports: dict[str, dict[str, dict[str, Any]]]  # effort -> Level.report
    effort_ignored: bool  # no level's scores or tokens differed from the others': the effort made no difference
    calls: int
    calls_saved: int
    seed: int
    uneven_errors: dict[str, str] = field(default_factory=dict)  # effort -> how retries fell on categories
    shared: dict[str, str] = field(default_factory=dict)  # effort -> the level whose evidence it took


def category_scores(results: list[tuple[BenchTest, float]]) -> dict[str, float]:
    """Weighted mean of test scores per category; a category with no tests scores 0 (fail closed)."""
    scores: dict[str, float] = {}
    for category in CATEGORIES:
        weighted = [(t.weight, s) for t, s in results if t.category == category]
        total = sum(w for w, _ in weighted)
        scores[category] = sum(w * s for w, s in weighted) / total if total else 0.0
    return scores


def recommend(profiles: list[Profile]) -> str | None:
    """The cheapest explicit effort level reaching the highest tier seen among explicit levels.

    `default` (no effort field) is never recommended: a recommendation is a level to send.
    """
    explicit = [p for p in profiles if p.reasoning_effort != DEFAULT_EFFORT]
    if not explicit:
        return None
    best = max(p.tier.rank for p in explicit)
    candidates = [p for p in explicit if p.tier.rank == best]
    return min(candidates, key=lambda p: effort_rank(p.reasoning_effort)).reasoning_effort


def effort_rank(effort: str) -> int:
    """Where `effort` stands on the ladder of known levels, cheapest first; unknown levels after
    every known one (a stable sort, or `min`, keeps them in the order they were given)."""
    return EFFORT_COST.index(effort) if effort in EFFORT_COST else len(EFFORT_COST)


async def run_test(
    backend: Backend,
    model: str,
    test: BenchTest,
    effort: str | None,
    settings: RunSettings,
    progress: Progress | None = None,
) -> TestRun:
    """Play a test's steps as one conversation. A `toolResult` answers the previous step's first
    tool call; when there is none the chain is broken and the remaining steps are not played."""
    run = TestRun(test)
    messages: list[dict[str, Any]] = (
        [{"role": "system", "content": settings.system_prompt}] if settings.system_prompt else []
    )
    for i, step in enumerate(test.all_steps):
        if i > 0:
            previous = run.answers[-1]
            if step.tool_result is not None:
                if not previous.tool_calls:
                    log.info("chain_broken", model=model, effort=effort, test=test.name, step=i)
                    if progress is not None:
                        progress.total -= len(test.all_steps) - i
                    break
                call = previous.tool_calls[0]
                # content "" rather than null: llama.cpp's server rejects a null assistant content.
                messages.append(
                    {
                        "role": "assistant",
                        "content": previous.content,
                        "tool_calls": [
                            {
                                "id": call.id,
                                "type": "function",
                                "function": {"name": call.name, "arguments": call.arguments},
                            }
                        ],
                    }
                )
                messages.append({"role": "tool", "tool_call_id": call.id, "content": step.tool_result})
            else:
                messages.append({"role": "assistant", "content": previous.content})
        if step.prompt is not None:
            messages.append({"role": "user", "content": step.prompt})
        with bound_contextvars(test=test.name):  # so a call past its bound says whose it was (backends._bounded)
            completion = await backend.complete(model, messages, test.tools, effort, need=test.answer_tokens)
        run.answers.append(completion.answer)
        if progress is not None:
            progress.answered += 1
        run.completion_tokens += completion.completion_tokens
        run.seconds += completion.seconds
        run.effort_applied = run.effort_applied and completion.effort_applied
        run.retries += completion.retries
    return run


def build_profile(model: str, provider: str, suite: Suite, level: Level, settings: RunSettings, seed: int) -> Profile:
    runs = level.runs
    found = level.estimates()
    tokens = sum(run.completion_tokens for run in runs)
    seconds = sum(run.seconds for run in runs)
    calls = level.calls
    retries = level.retries()
    # testResults keep the seed's shape: one score per test that ran, its mean over its runs.
    test_scores: dict[str, list[float]] = {}
    category_of = {t.name: t.category for t in suite.tests}
    for run in runs:
        test_scores.setdefault(run.test.name, []).append(run.score())
    order = {t.name: i for i, t in enumerate(suite.tests)}
    return Profile(
        model=model,
        provider=provider,
        tier=tier_of(found, settings.thresholds),
        scores={c: round(e.mean, 4) for c, e in found.items()},
        tokens_per_second=round(tokens / seconds, 2) if seconds else 0.0,
        tested_at=datetime.now(UTC).isoformat(timespec="seconds"),
        benchmark_version=suite.version,
        tests_hash=suite.hash,
        test_results=[
            TestResult(name=n, category=category_of[n], score=round(sum(s) / len(s), 4))
            for n, s in sorted(test_scores.items(), key=lambda item: order[item[0]])
        ],
        reasoning_effort=level.effort,
        avg_completion_tokens=round(tokens / calls, 1) if calls else 0.0,
        effort_applied=all(run.effort_applied for run in runs),
        duration_s=round(level.finished_s, 2),
        samples=level.samples,
        score_intervals={c: outward(e) for c, e in found.items()},
        instance_seed=seed,  # what the draws (tests, instances) came from: `--seed` replays them
        retries=retries if any(retries.values()) else None,
    )


def fresh(suite: Suite, test: BenchTest, key: str) -> BenchTest:
    """`test` on the instance drawn from `key` (a fixed test as written)."""
    template = suite.templates.get(test.name)
    return test if template is None else instantiate(template, test.name, key)


class Sweep:
    """One measurement of one model: its levels, the calls they share, and how each is spent.

    Every level runs `measure_level`: rounds planned by `design.plan_round` until it gives a
    `StopReason`, then `certified` (the place for a phase that needs the level's tier). Levels
    run side by side under one concurrency bound; with `recommend_only` the explicit ones run
    one after the other, cheapest first, so a costlier level is skipped before it spends a call
    once a cheaper one is certified large.
    """

    def __init__(
        self,
        backend: Backend,
        model: str,
        suite: Suite,
        efforts: list[str],
        settings: RunSettings,
        on_progress: ProgressFn | None,
        seed: int,
        progress: Progress | None,
    ) -> None:
        self.backend, self.model, self.suite, self.settings = backend, model, suite, settings
        self.on_progress, self.seed, self.progress = on_progress, seed, progress
        self.gate = asyncio.Semaphore(max(1, settings.concurrency))
        self.started = time.perf_counter()
        self.wanted = max(1, settings.samples)
        self.steps = sum(len(test.all_steps) for test in suite.tests)
        self.levels = [self._new_level(effort) for effort in efforts]
        self.done = {level.effort: asyncio.Event() for level in self.levels}
        if progress is not None:
            progress.total = sum(level.expected for level in self.levels)

    def _new_level(self, effort: str) -> Level:
        # Each category at the full bench.risk: confidence.py's last section says why that suffices.
        plans: dict[str, CategoryPlan] = {
            c: CategoryPlan(
                c,
                tests,
                self.settings.risk,
                self.wanted * sum(len(t.all_steps) for t in tests),
                bets=None if self.settings.design == WHOLE_DESIGN else [],
                # a round's runs may fail together under whole and spaced: no wealth per test
                stakes={} if self.settings.design == "adaptive" else None,
            )
            for c in CATEGORIES
            if (tests := self.suite.by_category(c))
        }
        return Level(effort, plans, self.steps, expected=self.wanted * self.steps)

    # -- running --------------------------------------------------------------------------------

    async def run(self) -> Measured:
        if self.settings.recommend_only:
            # `default` is never recommended: it runs beside the explicit levels.
            explicit = sorted(
                (lv for lv in self.levels if lv.effort != DEFAULT_EFFORT), key=lambda lv: effort_rank(lv.effort)
            )
            work = [self._one_by_one([lv]) for lv in self.levels if lv.effort == DEFAULT_EFFORT]
            work.append(self._one_by_one(explicit))
        else:
            work = [self.measure_level(level) for level in self.levels]
        await together(work)
        return self._measured()

    async def _one_by_one(self, levels: list[Level]) -> None:
        for level in levels:
            await self.measure_level(level)

    async def measure_level(self, level: Level) -> None:
        try:
            await self._measure_level(level)
        finally:
            self.done[level.effort].set()

    async def _measure_level(self, level: Level) -> None:
        settings = self.settings
        while True:
            level.skipped_for = self._cheaper_large(level) if settings.recommend_only else None
            if level.skipped_for:
                reason: StopReason | None = StopReason.SKIPPED
                break
            reason, picks = plan_round(
                level.plans,
                level.estimates(),
                settings.thresholds,
                # spaced: one observation per category a round, so rounds apart are independent
                1 if settings.design == SPACED_DESIGN else settings.concurrency,
                whole=settings.design == WHOLE_DESIGN,
            )
            if reason is not None:
                break
            if settings.design == SPACED_DESIGN and level.observations:
                await asyncio.sleep(max(0.0, level.round_ended + settings.spacing_s - time.monotonic()))
            made = await together(
                self._observe(level, plan, design, bet, len(plan.failures) + sum(p is plan for p, *_ in picks[:i]))
                for i, (plan, design, bet) in enumerate(picks)
            )
            level.round_ended = time.monotonic()
            for observation in made:
                plan = level.plans[observation.category]
                runs = [(r.test, r.score(), len(r.answers)) for r in observation.runs]
                plan.record(observation.design, runs, observation.bet)
                level.observations.append(observation)
            level.inconclusive = inconclusive_reason(level.runs)
            if level.inconclusive:
                reason = StopReason.INCONCLUSIVE
                break
            if self._sent_as_default(level):
                reason = StopReason.SHARED
                break
            self._account(level)
        level.stopped = reason
        if reason == StopReason.SHARED:
            # Every request went out without the effort (the backend refused it): the requests
            # `default` sends. Its evidence is this level's, and it is measured once, there.
            await self.done[DEFAULT_EFFORT].wait()
            level.shared_with = DEFAULT_EFFORT
            log.warning("effort_not_applied", model=self.model, effort=level.effort, shares=DEFAULT_EFFORT)
        for plan in level.plans.values():
            plan.status = category_state(plan, level, settings.thresholds)
        budget = self.wanted * self.steps
        if level.calls < budget and reason in (StopReason.SETTLED, StopReason.OUT_OF_REACH, StopReason.SKIPPED):
            level.calls_saved = budget - level.calls
            log.info(
                "sampling_stopped",
                model=self.model,
                effort=level.effort,
                samples=level.samples,
                of=self.wanted,
                calls=level.calls,
                calls_saved=level.calls_saved,
                reason=reason.value,
                categories=level.report(settings.thresholds),
            )
        self._account(level)
        if reason not in (StopReason.SKIPPED, StopReason.INCONCLUSIVE, StopReason.SHARED):
            await self.certified(level)

    def _sent_as_default(self, level: Level) -> bool:
        """True when `default` is measured too and none of this level's requests carried its
        effort (the backend refused it and each was sent again without: `effort_applied`)."""
        return (
            level.effort != DEFAULT_EFFORT
            and DEFAULT_EFFORT in self.done
            and bool(level.runs)
            and not any(run.effort_applied for run in level.runs)
        )

    def evidence(self, level: Level) -> Level:
        """The level whose runs stand for `level`'s: `default`'s for a level sent as it."""
        if level.shared_with is None:
            return level
        return next(other for other in self.levels if other.effort == level.shared_with)

    async def certified(self, level: Level) -> None:
        """Called once per level that stopped with a tier (not skipped, not inconclusive): the
        place for a phase measured at that tier (a tool budget). Nothing yet."""

    async def _one(self, test: BenchTest, level: Level) -> TestRun:
        async with self.gate:
            effort = None if level.effort == DEFAULT_EFFORT else level.effort
            run = await run_test(self.backend, self.model, test, effort, self.settings, self.progress)
        level.finished_s = time.perf_counter() - self.started
        if self.on_progress:
            self.on_progress(self.model, level.effort, test.name)
        return run

    async def _observe(
        self, level: Level, plan: CategoryPlan, design: int, bet: float | None, index: int
    ) -> Observation:
        seed = self.seed
        rng = random.Random(f"{seed}/{plan.name}/{index}/{design_name(design)}")
        tests = [
            fresh(self.suite, t, f"{seed}/{plan.name}{index}.{i}/{t.name}")
            for i, t in enumerate(plan.draw(design, rng))
        ]
        runs = await together(self._one(t, level) for t in tests)
        return Observation(plan.name, index, design, bet, runs)

    def _account(self, level: Level) -> None:
        """The level's expected calls (made, plus what its open categories still need) into Progress."""
        thresholds = self.settings.thresholds
        if level.stopped or level.inconclusive:
            level.expected = level.calls
        else:
            report = level.report(thresholds)
            more = sum(min(r["needed"] or 0, level.plans[c].remaining()) for c, r in report.items())
            level.expected = level.calls + more
        if self.progress is not None:
            self.progress.levels[level.effort] = level.report(thresholds)
            self.progress.total = max(self.progress.answered, sum(lv.expected for lv in self.levels))

    def _cheaper_large(self, level: Level) -> str | None:
        """An explicit level cheaper than `level` that has stopped certified large, if any."""
        if level.effort == DEFAULT_EFFORT:
            return None
        for other in self.levels:
            found = self.evidence(other)
            if (
                other.effort != DEFAULT_EFFORT
                and effort_rank(other.effort) < effort_rank(level.effort)
                and found.stopped in (StopReason.SETTLED, StopReason.CAPPED, StopReason.OUT_OF_REACH)
                and tier_of(found.estimates(), self.settings.thresholds) == Tier.LARGE
            ):
                return other.effort
        return None

    # -- what it found --------------------------------------------------------------------------

    def _measured(self) -> Measured:
        model, levels = self.model, self.levels
        skipped = {level.effort: level.skipped_for or "" for level in levels if level.stopped == StopReason.SKIPPED}
        shared = {level.effort: level.shared_with for level in levels if level.shared_with}
        conclusive = [
            level for level in levels if self.evidence(level).inconclusive is None and level.effort not in skipped
        ]
        own = [level for level in conclusive if level.effort not in shared]
        explicit = [level.effort for level in own if level.effort != DEFAULT_EFFORT]
        # every explicit level sent as `default`: the effort made no difference by construction
        ignored = effort_ignored({level.effort: [blocks(level)] for level in own}, explicit) or (
            bool(shared) and not explicit
        )
        profiles = []
        for level in conclusive:
            found = self.evidence(level)
            profile = build_profile(model, self.backend.provider, self.suite, found, self.settings, self.seed)
            if level is not found:
                profile = profile.model_copy(update={"reasoning_effort": level.effort, "effort_applied": False})
            if ignored and level.effort != DEFAULT_EFFORT:
                profile = profile.model_copy(update={"effort_applied": False})
            profiles.append(profile)
            log.info(
                "profile_measured",
                model=model,
                effort=profile.reasoning_effort,
                tier=profile.tier.value,
                scores=profile.scores,
                intervals=profile.score_intervals,
                samples=level.samples,
                tokens_per_second=profile.tokens_per_second,
            )
        uneven = {level.effort: why for level in levels if (why := uneven_errors(level))}
        for level in levels:
            if level.inconclusive:
                log.error("measurement_inconclusive", model=model, effort=level.effort, reason=level.inconclusive)
            if level.effort in uneven:
                log.warning(
                    "errors_uneven",
                    model=model,
                    effort=level.effort,
                    retries=level.retries(),
                    reason=uneven[level.effort],
                )
        if ignored:
            log.warning(
                "effort_ignored",
                model=model,
                efforts=[level.effort for level in conclusive],
                reason="no level's scores or completion tokens differed significantly from the others'",
            )
        return Measured(
            profiles=profiles,
            inconclusive={level.effort: why for level in levels if (why := self.evidence(level).inconclusive)},
            skipped=skipped,
            reports={level.effort: level.report(self.settings.thresholds) for level in levels},
            effort_ignored=ignored,
            calls=sum(level.calls for level in levels),
            calls_saved=sum(level.calls_saved for level in levels),
            seed=self.seed,
            uneven_errors=uneven,
            shared=shared,
        )


async def sweep(
    backend: Backend,
    model: str,
    suite: Suite,
    efforts: list[str],
    settings: RunSettings | None = None,
    on_progress: ProgressFn | None = None,
    seed: int = 0,
    progress: Progress | None = None,
) -> Measured:
    """Run the suite at each effort level, all tests of all levels sharing one concurrency bound.

    Any backend failure propagates (BackendError): a broken backend must never read as a weak model.
    A level whose answers are almost all empty-by-length is inconclusive: no profile, a reason.
    The level `default` sends no effort field.
    """
    return await Sweep(backend, model, suite, efforts, settings or RunSettings(), on_progress, seed, progress).run()
