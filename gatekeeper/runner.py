"""Runs a suite through a Backend: conversations -> check results -> scores -> Profile."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

import structlog

from gatekeeper.backends import Backend
from gatekeeper.checks import Answer, run_check
from gatekeeper.profiles import DEFAULT_EFFORT, Profile, TestResult
from gatekeeper.suite import CATEGORIES, BenchTest, Suite
from gatekeeper.tiers import Thresholds, compute_tier

log = structlog.get_logger("gatekeeper.runner")

DEFAULT_EFFORTS = ("none", "low", "medium", "xhigh")
# Known reasoning levels, cheapest first; unknown levels keep the order they were given in.
EFFORT_COST = ("none", "minimal", "low", "medium", "high", "xhigh")

ProgressFn = Callable[[str, str, str], None]  # (model, effort, test name) after each test


@dataclass
class Progress:
    """Calls answered out of the calls a measurement will make; read live by the admin console.

    `total` starts at every step of every test and shrinks when a tool chain breaks, since the
    steps after the break are never asked. Written by one event loop; plain ints, so readers in
    other threads need no lock.
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


@dataclass
class TestRun:
    """One test's conversation: the answer at each step it reached."""

    __test__ = False  # not a pytest class

    test: BenchTest
    answers: list[Answer] = field(default_factory=list)
    completion_tokens: int = 0
    seconds: float = 0.0
    effort_applied: bool = True


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
    scores = {}
    for category in CATEGORIES:
        weighted = [(t.weight, s) for t, s in results if t.category == category]
        total = sum(w for w, _ in weighted)
        scores[category] = sum(w * s for w, s in weighted) / total if total else 0.0
    return scores


def recommend(profiles: list[Profile]) -> str | None:
    """The cheapest effort level reaching the highest tier seen."""
    if not profiles:
        return None
    best = max(p.tier.rank for p in profiles)
    candidates = [p for p in profiles if p.tier.rank == best]
    known = {effort: i for i, effort in enumerate(EFFORT_COST)}
    order = {p.reasoning_effort: i for i, p in enumerate(profiles)}
    candidates.sort(key=lambda p: (known.get(p.reasoning_effort, len(known)), order[p.reasoning_effort]))
    return candidates[0].reasoning_effort


async def run_test(backend: Backend, model: str, test: BenchTest, effort: str | None, settings: RunSettings,
                   progress: Progress | None = None) -> TestRun:
    """Play a test's steps as one conversation. A `toolResult` answers the previous step's first
    tool call; when there is none the chain is broken and the remaining steps are not played."""
    run = TestRun(test)
    messages: list[dict] = [{"role": "system", "content": settings.system_prompt}] if settings.system_prompt else []
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
                messages.append({"role": "assistant", "content": previous.content, "tool_calls": [
                    {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                ]})
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


def build_profile(
    model: str, provider: str, effort: str, suite: Suite, runs: list[TestRun], thresholds: Thresholds, duration_s: float
) -> Profile:
    results = [(run.test, score_test(run.test, run.answers)) for run in runs]
    scores = category_scores(results)
    tokens = sum(run.completion_tokens for run in runs)
    seconds = sum(run.seconds for run in runs)
    calls = sum(len(run.answers) for run in runs)
    return Profile(
        model=model,
        provider=provider,
        tier=compute_tier(scores, thresholds),
        scores={k: round(v, 4) for k, v in scores.items()},
        tokens_per_second=round(tokens / seconds, 2) if seconds else 0.0,
        tested_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        benchmark_version=suite.version,
        tests_hash=suite.hash,
        test_results=[TestResult(name=t.name, category=t.category, score=round(s, 4)) for t, s in results],
        reasoning_effort=effort,
        avg_completion_tokens=round(tokens / calls, 1) if calls else 0.0,
        effort_applied=all(run.effort_applied for run in runs),
        duration_s=round(duration_s, 2),
    )


async def sweep(
    backend: Backend,
    model: str,
    suite: Suite,
    efforts: list[str],
    settings: RunSettings | None = None,
    on_progress: ProgressFn | None = None,
    progress: Progress | None = None,
) -> list[Profile]:
    """Run the suite once per effort level, all tests of all levels sharing one concurrency bound.

    Any backend failure propagates (BackendError): a broken backend must never read as a weak model.
    The level `default` sends no effort field.
    """
    settings = settings or RunSettings()
    gate = asyncio.Semaphore(max(1, settings.concurrency))
    started = time.perf_counter()
    finished: dict[str, float] = {}  # effort -> when its last test ended
    if progress is not None:
        progress.total = len(efforts) * sum(len(test.all_steps) for test in suite.tests)

    async def one(test: BenchTest, effort: str) -> TestRun:
        async with gate:
            run = await run_test(backend, model, test, None if effort == DEFAULT_EFFORT else effort, settings,
                                 progress)
        finished[effort] = time.perf_counter()
        if on_progress:
            on_progress(model, effort, test.name)
        return run

    jobs = {effort: [asyncio.ensure_future(one(test, effort)) for test in suite.tests] for effort in efforts}
    try:
        await asyncio.gather(*(job for level in jobs.values() for job in level))
    except BaseException:
        for level in jobs.values():
            for job in level:
                job.cancel()
        raise
    # Levels share the concurrency bound, so a level's duration is from the start to its last test.
    profiles = [
        build_profile(model, backend.provider, effort, suite, [job.result() for job in jobs[effort]],
                      settings.thresholds, finished[effort] - started)
        for effort in efforts
    ]
    for profile in profiles:
        log.info("profile_measured", model=model, effort=profile.reasoning_effort, tier=profile.tier.value,
                 scores=profile.scores, tokens_per_second=profile.tokens_per_second)
    return profiles

