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
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gatekeeper.measuring.backends import Backend
from gatekeeper.measuring.confidence import Estimate, category_risk, out_of_reach, settled, tier_of
from gatekeeper.measuring.design import NEVER, WHOLE, CategoryPlan, Target, design_name
from gatekeeper.measuring.effort import effort_ignored
from gatekeeper.observe import logs
from gatekeeper.rules.tiers import DEFAULT_RISK, DEFAULT_SAMPLES, DESIGN_SCORE, Thresholds, Tier
from gatekeeper.store.profile import DEFAULT_EFFORT, Profile, TestResult
from gatekeeper.suite.checks import run_check
from gatekeeper.suite.loader import CATEGORIES, BenchTest, Suite, instantiate
from gatekeeper.types import Answer

log = logs.get_logger("gatekeeper.measuring.runner")

# `default` (no effort field), what most clients send, is measured too; the recommendation is explicit.
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


@dataclass(frozen=True)
class RunSettings:
    concurrency: int = 8
    system_prompt: str | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    samples: int = DEFAULT_SAMPLES  # at most this many runs of each test per level (stops when decided)
    risk: float = DEFAULT_RISK  # P(certified tier > true tier) at most this, per profile
    design: str = "adaptive"  # or WHOLE_DESIGN
    recommend_only: bool = False  # a sweep may skip levels costlier than one certified large


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
    calls_saved: int = 0  # calls of its budget it did not make
    inconclusive: str | None = None  # why nothing can be concluded from it
    stopped: str | None = None  # why it stopped: settled, out_of_reach, capped, skipped: ...
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

    def estimates(self) -> dict[str, Estimate]:
        """Every category's estimate; a category with no tests scores 0 (fail closed)."""
        return {c: self.plans[c].estimate() if c in self.plans else Estimate(0.0, 0.0, 0.0, 0) for c in CATEGORIES}

    def report(self, thresholds: Thresholds) -> dict[str, dict[str, Any]]:
        """Per category: calls spent, observations by design, the bounds, about how many more calls
        the next tier up would need (None when it cannot be reached), and its state."""
        found = self.estimates()
        above = _next_tier(tier_of(found, thresholds), thresholds)
        shown: dict[str, dict[str, Any]] = {}
        for c, plan in self.plans.items():
            e = found[c]
            threshold = above.get(c)
            need = 0.0 if threshold is None or e.low >= threshold else plan.needed(Target(1 - threshold))
            shown[c] = {
                "calls": plan.calls,
                "observations": dict(plan.designs),
                "bound": [math.floor(e.low * 1e4) / 1e4, math.ceil(e.high * 1e4) / 1e4],
                "needed": None if need == NEVER else math.ceil(need),
                "state": plan.status,
            }
        return shown


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
        completion = await backend.complete(model, messages, test.tools, effort, need=test.answer_tokens)
        run.answers.append(completion.answer)
        if progress is not None:
            progress.answered += 1
        run.completion_tokens += completion.completion_tokens
        run.seconds += completion.seconds
        run.effort_applied = run.effort_applied and completion.effort_applied
    return run


def _next_tier(tier: Tier, thresholds: Thresholds) -> dict[str, float]:
    """The thresholds of the tier above `tier` (none above large)."""
    return {Tier.SMALL: thresholds.medium, Tier.MEDIUM: thresholds.large}.get(tier, {})


Pick = tuple[CategoryPlan, int, float | None]  # a planned observation: category, design, bet


def _first_target(plan: CategoryPlan, settings: RunSettings) -> Target:
    """The lowest threshold of the category: what its first bet is made toward."""
    cuts = [t[plan.name] for t in (settings.thresholds.medium, settings.thresholds.large) if plan.name in t]
    return Target(1 - min(cuts, default=0.5))


def plan_round(level: Level, settings: RunSettings) -> tuple[str | None, list[Pick]]:
    """Why the level stops (None while it goes on) and the observations of its next round.

    Adaptive: only the categories the next tier up still needs (lower bound under its
    threshold) are spent on. When each of them is expected to reach its threshold within its
    budget, every one gets the observations it is expected to need (at most `concurrency`),
    each of the design deciding soonest per call; otherwise the one expected to fall soonest is
    spent on alone, since one category below a threshold decides the tier. The next tier is out
    of reach when a category it needs cannot reach its threshold within its budget at the rate
    seen and its upper bound is below halfway from the threshold to the design score (the old
    rule, `confidence.out_of_reach`, now also asking that the budget cannot make it up).
    A category's last observation within its budget is whole.
    """
    found = level.estimates()
    if settled(found, settings.thresholds):
        return "settled", []
    if settings.design == WHOLE_DESIGN:
        if out_of_reach(found, settings.thresholds):
            return "out_of_reach", []
        if any(plan.remaining() <= 0 for plan in level.plans.values()):
            return "capped", []
        return None, [(plan, WHOLE, None) for plan in level.plans.values()]
    unseen = [plan for plan in level.plans.values() if not plan.failures]
    if unseen:  # the first round runs every test once: what draws are predicted from (the seed's one sample)
        return None, [(plan, WHOLE, plan.growth(WHOLE, _first_target(plan, settings))[1]) for plan in unseen]
    above = _next_tier(tier_of(found, settings.thresholds), settings.thresholds)
    rising, falling = [], []
    for c, threshold in above.items():
        plan = level.plans.get(c)
        if plan is None or found[c].low >= threshold:
            continue
        if plan.remaining() <= 0:
            return "capped", []
        up = Target(1 - threshold)
        need = plan.needed(up)
        if need <= plan.remaining():
            rising.append((plan, up, up, need))
            continue
        halfway = (threshold + DESIGN_SCORE) / 2 if threshold < DESIGN_SCORE else threshold
        if found[c].high < halfway:
            return "out_of_reach", []
        down = Target(1 - halfway, mirror=True)
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
        limit = max(1, settings.concurrency // len(plan.tests) if design == WHOLE else settings.concurrency)
        picks += [(plan, design, plan.growth(design, up)[1])] * max(1, min(count, room, limit))
    return None, picks


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


def build_profile(model: str, provider: str, suite: Suite, level: Level, settings: RunSettings, seed: int) -> Profile:
    runs = level.runs
    found = level.estimates()
    tokens = sum(run.completion_tokens for run in runs)
    seconds = sum(run.seconds for run in runs)
    calls = level.calls
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
        # Rounded outwards, so the stored bound is never above the one the tier was decided on.
        score_intervals={c: [math.floor(e.low * 1e4) / 1e4, math.ceil(e.high * 1e4) / 1e4] for c, e in found.items()},
        instance_seed=seed if suite.randomised else None,
    )


def fresh(suite: Suite, test: BenchTest, key: str) -> BenchTest:
    """`test` on the instance drawn from `key` (a fixed test as written)."""
    template = suite.templates.get(test.name)
    return test if template is None else instantiate(template, test.name, key)


def _cheaper_large(level: Level, levels: list[Level], thresholds: Thresholds) -> str | None:
    """An explicit level cheaper than `level` that has stopped certified large, if any."""
    if level.effort == DEFAULT_EFFORT:
        return None
    known = {effort: i for i, effort in enumerate(EFFORT_COST)}
    rank = known.get(level.effort, len(known))
    for other in levels:
        if (
            other.effort != DEFAULT_EFFORT
            and known.get(other.effort, len(known)) < rank
            and other.stopped in ("settled", "capped", "out_of_reach")
            and other.inconclusive is None
            and tier_of(other.estimates(), thresholds) == Tier.LARGE
        ):
            return other.effort
    return None


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
    risk = category_risk(settings.risk, len(CATEGORIES))

    def new_level(effort: str) -> Level:
        plans: dict[str, CategoryPlan] = {
            c: CategoryPlan(
                c,
                tests,
                risk,
                wanted * sum(len(t.all_steps) for t in tests),
                bets=None if settings.design == WHOLE_DESIGN else [],
            )
            for c in CATEGORIES
            if (tests := suite.by_category(c))
        }
        return Level(effort, plans, steps, expected=wanted * steps)

    levels = [new_level(effort) for effort in efforts]
    if progress is not None:
        progress.total = sum(level.expected for level in levels)

    async def one(test: BenchTest, level: Level) -> TestRun:
        async with gate:
            effort = None if level.effort == DEFAULT_EFFORT else level.effort
            run = await run_test(backend, model, test, effort, settings, progress)
        level.finished_s = time.perf_counter() - started
        if on_progress:
            on_progress(model, level.effort, test.name)
        return run

    async def observe(level: Level, plan: CategoryPlan, design: int, bet: float | None, index: int) -> Observation:
        rng = random.Random(f"{seed}/{plan.name}/{index}/{design_name(design)}")
        tests = [
            fresh(suite, t, f"{seed}/{plan.name}{index}.{i}/{t.name}") for i, t in enumerate(plan.draw(design, rng))
        ]
        runs = list(await asyncio.gather(*(one(t, level) for t in tests)))
        return Observation(plan.name, index, design, bet, runs)

    def account(level: Level) -> None:
        """The level's expected calls (made, plus what its open categories still need) into Progress."""
        if level.stopped or level.inconclusive:
            level.expected = level.calls
        else:
            report = level.report(settings.thresholds)
            more = sum(min(r["needed"] or 0, level.plans[c].remaining()) for c, r in report.items())
            level.expected = level.calls + more
        if progress is not None:
            progress.levels[level.effort] = level.report(settings.thresholds)
            progress.total = max(progress.answered, sum(lv.expected for lv in levels))

    async def measure_level(level: Level) -> None:
        while True:
            cheaper = _cheaper_large(level, levels, settings.thresholds) if settings.recommend_only else None
            reason, picks = ("skipped: " + (cheaper or ""), []) if cheaper else plan_round(level, settings)
            if reason is not None:
                break
            made = await asyncio.gather(
                *(
                    observe(level, plan, design, bet, len(plan.failures) + sum(p is plan for p, *_ in picks[:i]))
                    for i, (plan, design, bet) in enumerate(picks)
                )
            )
            for observation in made:
                plan = level.plans[observation.category]
                runs = [(r.test, r.score(), len(r.answers)) for r in observation.runs]
                plan.record(observation.design, runs, observation.bet)
                level.observations.append(observation)
            level.inconclusive = inconclusive_reason(level.runs)
            if level.inconclusive:
                reason = "inconclusive"
                break
            account(level)
        level.stopped = reason
        for plan in level.plans.values():
            plan.status = _state(plan, level, settings.thresholds)
        budget = wanted * steps
        if level.calls < budget and (reason in ("settled", "out_of_reach") or reason.startswith("skipped")):
            level.calls_saved = budget - level.calls
            log.info(
                "sampling_stopped",
                model=model,
                effort=level.effort,
                samples=level.samples,
                of=wanted,
                calls=level.calls,
                calls_saved=level.calls_saved,
                reason=reason,
                categories=level.report(settings.thresholds),
            )
        account(level)

    jobs = [asyncio.ensure_future(measure_level(level)) for level in levels]
    try:
        await asyncio.gather(*jobs)
    except BaseException:
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        raise
    skipped = {level.effort: level.stopped for level in levels if level.stopped and level.stopped.startswith("skipped")}
    conclusive = [level for level in levels if level.inconclusive is None and level.effort not in skipped]
    ignored = effort_ignored(
        {level.effort: [_blocks(level)] for level in conclusive},
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
            samples=level.samples,
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
        skipped={effort: why.removeprefix("skipped: ") for effort, why in skipped.items()},
        reports={level.effort: level.report(settings.thresholds) for level in levels},
        effort_ignored=ignored,
        calls=sum(level.calls for level in levels),
        calls_saved=sum(level.calls_saved for level in levels),
        seed=seed,
    )


def _state(plan: CategoryPlan, level: Level, thresholds: Thresholds) -> str:
    """What a category's measurement ended as, for the report."""
    if level.inconclusive:
        return "inconclusive"
    if level.stopped and level.stopped.startswith("skipped"):
        return "skipped"
    e = level.estimates()[plan.name]
    cuts = sorted({t[plan.name] for t in (thresholds.medium, thresholds.large) if plan.name in t})
    if all(e.low >= cut or e.high < cut for cut in cuts):
        return "decided"
    return {"capped": "capped", "out_of_reach": "out of reach"}.get(level.stopped or "", "not needed")


def _blocks(level: Level) -> dict[str, tuple[float, int]]:
    """The level's runs keyed by where they were drawn (category, observation, position, test):
    levels that made the same observation ran the same test on the same instance."""
    return {
        f"{o.category}/{o.index}/{i}/{run.test.name}": (run.score(), run.completion_tokens)
        for o in level.observations
        for i, run in enumerate(o.runs)
    }
