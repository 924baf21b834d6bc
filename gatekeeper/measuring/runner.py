"""Runs a suite through a Backend: conversations -> check results -> scores -> Profile.

One measurement of a model runs one or more effort levels; each level runs the suite up to
`samples` times (a sample = every test once, randomised tests on fresh instances), stopping
early once the tier is settled or the next tier is out of reach (`confidence.settled`,
`confidence.out_of_reach`). The tier is certified on lower bounds that stay valid whenever the
level stops (`confidence`: P(tier too high) <= risk).
Randomised tests are drawn from one seed per measurement, the same instances at every level, so
levels are compared on identical prompts (and `effort.effort_ignored` can pair them).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gatekeeper import logs
from gatekeeper.measuring.backends import Backend
from gatekeeper.measuring.confidence import Estimate, category_risk, estimate, out_of_reach, settled, tier_of
from gatekeeper.measuring.effort import effort_ignored
from gatekeeper.store.profile import DEFAULT_EFFORT, Profile, TestResult
from gatekeeper.suite.checks import run_check
from gatekeeper.suite.loader import CATEGORIES, BenchTest, Suite
from gatekeeper.tiers import DEFAULT_RISK, DEFAULT_SAMPLES, Thresholds
from gatekeeper.types import Answer

log = logs.get_logger("gatekeeper.measuring.runner")

# `default` (no effort field) is what most clients send, so it is measured too; the
# recommendation still chooses among the explicit levels.
DEFAULT_EFFORTS = ("default", "none", "low", "medium", "xhigh")
# Known reasoning levels, cheapest first; unknown levels keep the order they were given in.
EFFORT_COST = ("none", "minimal", "low", "medium", "high", "xhigh")
# A level whose answers are at least this often empty and cut at max_tokens measured nothing:
# "almost all", leaving room for the few short answers a thinking model still finishes.
INCONCLUSIVE_FRACTION = 0.75

ProgressFn = Callable[[str, str, str], None]  # (model, effort, test name) after each test


@dataclass
class Progress:
    """Calls answered out of the calls a measurement will make; read live by the admin console.

    `total` starts at every step of every test of every sample and level, and shrinks when a
    tool chain breaks or a level stops early (settled, inconclusive), since those calls are
    never made. Written by one event loop; plain ints, so readers in other threads need no lock.
    """

    key: str
    answered: int = 0
    total: int = 0
    started: float = field(default_factory=time.time)
    finished: float | None = None
    error: str | None = None
    tier: str | None = None


@dataclass(frozen=True)
class RunSettings:
    concurrency: int = 8
    system_prompt: str | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    samples: int = DEFAULT_SAMPLES  # at most this many runs of each test per level (stops when decided)
    risk: float = DEFAULT_RISK  # P(certified tier > true tier) at most this, per profile


@dataclass
class TestRun:
    """One test's conversation: the answer at each step it reached."""

    __test__ = False  # not a pytest class

    test: BenchTest
    answers: list[Answer] = field(default_factory=list)
    completion_tokens: int = 0
    seconds: float = 0.0
    effort_applied: bool = True
    _score: float | None = field(default=None, repr=False)

    def score(self) -> float:
        """score_test of the answers, computed once: read after every sample, when the run is over."""
        if self._score is None:
            self._score = score_test(self.test, self.answers)
        return self._score


@dataclass
class Level:
    """What one effort level of a measurement produced."""

    effort: str
    samples: list[list[TestRun]] = field(default_factory=list)  # [sample][test]
    finished_s: float = 0.0  # when its last test ended, from the start of the measurement
    calls_saved: int = 0  # calls sequential stopping did not make
    inconclusive: str | None = None  # why nothing can be concluded from it


@dataclass
class Measured:
    """A measurement of one model: its profiles, and what the levels told apart."""

    profiles: list[Profile]
    inconclusive: dict[str, str]  # effort -> reason (no profile for it)
    effort_ignored: bool  # no level's scores or tokens differed from the others': the effort made no difference
    calls: int
    calls_saved: int
    seed: int


def score_test(test: BenchTest, answers: list[Answer]) -> float:
    """Weighted fraction of passed checks over all steps; steps never reached score 0 but still count."""
    total = passed = 0.0
    for i, step in enumerate(test.all_steps):
        for check in step.checks:
            total += check.weight
            if i < len(answers) and run_check(check, answers[i]):
                passed += check.weight
    return passed / total if total else 0.0


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
    known = {effort: i for i, effort in enumerate(EFFORT_COST)}
    order = {p.reasoning_effort: i for i, p in enumerate(explicit)}
    candidates.sort(key=lambda p: (known.get(p.reasoning_effort, len(known)), order[p.reasoning_effort]))
    return candidates[0].reasoning_effort


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
        completion = await backend.complete(model, messages, test.tools, effort)
        run.answers.append(completion.answer)
        if progress is not None:
            progress.answered += 1
        run.completion_tokens += completion.completion_tokens
        run.seconds += completion.seconds
        run.effort_applied = run.effort_applied and completion.effort_applied
    return run


def failed_shares(samples: list[list[TestRun]], suite: Suite, category: str) -> list[float]:
    """Z_i per sample: the weighted share of the category's checks that failed (confidence's docstring)."""
    total = sum(t.weight for t in suite.by_category(category))
    return [
        sum(run.test.weight / total * (1 - run.score()) for run in sample if run.test.category == category)
        for sample in samples
    ]


def estimates(samples: list[list[TestRun]], suite: Suite, settings: RunSettings) -> dict[str, Estimate]:
    """Every category's point estimate and bounds after these samples."""
    found: dict[str, Estimate] = {}
    for c in CATEGORIES:
        if not suite.by_category(c):
            found[c] = Estimate(0.0, 0.0, 0.0, len(samples))  # a category with no tests scores 0 (fail closed)
        else:
            found[c] = estimate(failed_shares(samples, suite, c), category_risk(settings.risk, len(CATEGORIES)))
    return found


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
            f"'length'): a reasoning model spending bench.max_tokens on thinking looks like this; "
            f"raise bench.max_tokens. Nothing stored"
        )
    return None


def build_profile(model: str, provider: str, suite: Suite, level: Level, settings: RunSettings, seed: int) -> Profile:
    runs = [run for sample in level.samples for run in sample]
    found = estimates(level.samples, suite, settings)
    tier = tier_of(found, settings.thresholds)
    last = level.samples[-1]
    tokens = sum(run.completion_tokens for run in runs)
    seconds = sum(run.seconds for run in runs)
    calls = sum(len(run.answers) for run in runs)
    # testResults keep the seed's shape: one score per test, its mean over the samples.
    test_scores: dict[str, list[float]] = {run.test.name: [] for run in last}
    category_of = {run.test.name: run.test.category for run in last}
    for sample in level.samples:
        for run in sample:
            test_scores[run.test.name].append(score_test(run.test, run.answers))
    return Profile(
        model=model,
        provider=provider,
        tier=tier,
        scores={c: round(e.mean, 4) for c, e in found.items()},
        tokens_per_second=round(tokens / seconds, 2) if seconds else 0.0,
        tested_at=datetime.now(UTC).isoformat(timespec="seconds"),
        benchmark_version=suite.version,
        tests_hash=suite.hash,
        test_results=[
            TestResult(name=n, category=category_of[n], score=round(sum(s) / len(s), 4)) for n, s in test_scores.items()
        ],
        reasoning_effort=level.effort,
        avg_completion_tokens=round(tokens / calls, 1) if calls else 0.0,
        effort_applied=all(run.effort_applied for run in runs),
        duration_s=round(level.finished_s, 2),
        samples=len(level.samples),
        # Rounded outwards, so the stored bound is never above the one the tier was decided on.
        score_intervals={c: [math.floor(e.low * 1e4) / 1e4, math.ceil(e.high * 1e4) / 1e4] for c, e in found.items()},
        instance_seed=seed if suite.randomised else None,
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
    settings = settings or RunSettings()
    gate = asyncio.Semaphore(max(1, settings.concurrency))
    started = time.perf_counter()
    wanted = max(1, settings.samples)
    steps = sum(len(test.all_steps) for test in suite.tests)
    if progress is not None:
        progress.total = len(efforts) * wanted * steps

    async def one(test: BenchTest, level: Level) -> TestRun:
        async with gate:
            effort = None if level.effort == DEFAULT_EFFORT else level.effort
            run = await run_test(backend, model, test, effort, settings, progress)
        level.finished_s = time.perf_counter() - started
        if on_progress:
            on_progress(model, level.effort, test.name)
        return run

    async def measure_level(level: Level) -> None:
        await run_samples(level)
        if progress is not None:  # samples not run (stopped early) are calls never made
            progress.total -= (wanted - len(level.samples)) * steps

    async def run_samples(level: Level) -> None:
        for k in range(wanted):
            tests = suite.instance(seed, k)
            level.samples.append(list(await asyncio.gather(*(one(test, level) for test in tests))))
            level.inconclusive = inconclusive_reason(level.samples[-1])
            if level.inconclusive:
                return
            if len(level.samples) >= wanted:
                return
            found = estimates(level.samples, suite, settings)
            reason = (
                "settled"
                if settled(found, settings.thresholds)
                else "out_of_reach"
                if out_of_reach(found, settings.thresholds)
                else None
            )
            if reason is not None:
                calls = sum(len(run.answers) for sample in level.samples for run in sample)
                level.calls_saved = round(calls / len(level.samples) * (wanted - len(level.samples)))
                log.info(
                    "sampling_stopped",
                    model=model,
                    effort=level.effort,
                    samples=len(level.samples),
                    of=wanted,
                    calls_saved=level.calls_saved,
                    reason=reason,
                )
                return

    levels = [Level(effort) for effort in efforts]
    jobs = [asyncio.ensure_future(measure_level(level)) for level in levels]
    try:
        await asyncio.gather(*jobs)
    except BaseException:
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        raise
    conclusive = [level for level in levels if level.inconclusive is None]
    ignored = effort_ignored(
        {
            level.effort: [
                {run.test.name: (score_test(run.test, run.answers), run.completion_tokens) for run in sample}
                for sample in level.samples
            ]
            for level in conclusive
        },
        explicit=[level.effort for level in conclusive if level.effort != DEFAULT_EFFORT],
    )
    profiles = []
    for level in conclusive:
        profile = build_profile(model, backend.provider, suite, level, settings, seed)
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
            samples=len(level.samples),
            tokens_per_second=profile.tokens_per_second,
        )
    for level in levels:
        if level.inconclusive:
            log.error("measurement_inconclusive", model=model, effort=level.effort, reason=level.inconclusive)
    if ignored:
        log.warning(
            "effort_ignored",
            model=model,
            efforts=[level.effort for level in conclusive],
            reason="no level's scores or completion tokens differed significantly from the others'",
        )
    return Measured(
        profiles=profiles,
        inconclusive={level.effort: level.inconclusive for level in levels if level.inconclusive},
        effort_ignored=ignored,
        calls=sum(len(run.answers) for level in levels for sample in level.samples for run in sample),
        calls_saved=sum(level.calls_saved for level in levels),
        seed=seed,
    )
