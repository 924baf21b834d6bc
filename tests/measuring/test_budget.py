"""Measuring the tool budget (gatekeeper.measuring.budget): instances drawn from the pool of
similar tools, the ladder climbed until a rung is not certified, the stored `toolBudget`, pinned
pairs skipped, a call written as text counted as a failure."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter

import pytest
from conftest import make_profile, settings_for

from gatekeeper.measuring.backends import BackendRequest, MockBackend
from gatekeeper.measuring.budget import (
    LADDER,
    POOL,
    answer_key,
    failure,
    instance,
    measure_budget,
    passed,
    threshold_for,
    with_budgets,
)
from gatekeeper.rules.tiers import Thresholds, Tier
from gatekeeper.types import Answer, ToolCall


def right(request: BackendRequest) -> Answer:
    key = answer_key(request.messages[-1]["content"])
    assert key is not None
    name, argument, value = key
    return Answer("", (ToolCall("c1", name, json.dumps({argument: value})),))


def confused_from(n: int):
    """Right below `n` offered tools; from `n` on, always a wrong one of the offered (its sibling)."""

    def answer(request: BackendRequest) -> Answer:
        if len(request.tools) < n:
            return right(request)
        name, argument, value = answer_key(request.messages[-1]["content"])  # type: ignore[misc]
        wrong = next(t["function"]["name"] for t in request.tools if t["function"]["name"] != name)
        return Answer("", (ToolCall("c1", wrong, json.dumps({argument: value})),))

    return answer


def measure(handler, tier: Tier = Tier.LARGE, **kwargs):
    return asyncio.run(measure_budget(MockBackend(handler), "m", None, tier, **kwargs))


def test_the_pool_has_enough_distinct_tools_for_the_top_rung() -> None:
    assert len({t.name for t in POOL}) == len(POOL) >= max(LADDER)


def test_an_instance_offers_n_distinct_tools_with_the_right_one_anywhere() -> None:
    positions = Counter()
    for i in range(400):
        case = instance(8, random.Random(i))
        names = [t["function"]["name"] for t in case.tools]
        assert len(set(names)) == 8 and case.target in names
        assert answer_key(case.prompt) == (case.target, case.argument, case.value)
        positions[names.index(case.target)] += 1
    assert set(positions) == set(range(8))


def test_an_instance_offers_the_right_tools_siblings_first() -> None:
    case = instance(4, random.Random(7))
    target = next(t for t in POOL if t.name == case.target)
    others = [t for t in POOL if t.name in {x["function"]["name"] for x in case.tools} and t != target]
    assert all(t.obj == target.obj or t.action == target.action for t in others)


def test_only_a_structured_call_to_the_right_tool_with_the_id_passes() -> None:
    case = instance(4, random.Random(1))
    good = ToolCall("c", case.target, json.dumps({case.argument: case.value}))
    assert passed(case, Answer("", (good,)))
    as_text = f'<tool_call>{{"name": "{case.target}", "arguments": {{"{case.argument}": "{case.value}"}}}}</tool_call>'
    assert not passed(case, Answer(as_text))
    assert not passed(case, Answer("", (ToolCall("c", case.target, json.dumps({case.argument: "XXX-0000"})),)))
    assert not passed(case, Answer("", (ToolCall("c", case.target, "{not json"),)))


def test_a_model_that_never_errs_is_certified_at_the_top_rung() -> None:
    found = measure(right)
    assert found.budget == 64
    assert all(r.certified for r in found.rungs)
    # About 30 calls a rung at 0.9 and risk 0.05 (the module docstring's figure).
    assert 25 * len(LADDER) <= found.calls <= 40 * len(LADDER)


def test_the_climb_stops_at_the_first_rung_not_certified() -> None:
    found = measure(confused_from(16))
    assert found.budget == 8
    assert [r.n for r in found.rungs] == [4, 8, 16]
    assert len(found.rungs[-1].failures) < 12  # a rung failing every call is given up quickly


def test_no_certified_rung_is_a_budget_of_one() -> None:
    assert measure(confused_from(2)).budget == 1


def test_the_threshold_is_the_tiers_and_small_takes_the_lowest() -> None:
    thresholds = Thresholds()
    assert threshold_for(Tier.LARGE, thresholds) == 0.9
    assert threshold_for(Tier.MEDIUM, thresholds) == 0.6
    assert threshold_for(Tier.SMALL, thresholds) == 0.6


def test_a_medium_pair_is_certified_at_its_lower_threshold() -> None:
    # Right seven times in eight at every N: certified at 0.6 (medium), never at 0.9 (large).
    count = iter(range(10**6))

    def mostly(request: BackendRequest) -> Answer:
        return right(request) if next(count) % 8 else confused_from(0)(request)

    assert measure(mostly, Tier.MEDIUM).budget == 64
    assert measure(mostly, Tier.LARGE).budget == 1


def test_with_budgets_stores_the_budget_and_skips_a_pinned_pair(tmp_path, default_suite) -> None:
    settings = settings_for("http://u/v1", tmp_path / "s.json", pins={"pinned": "large"}, bench={"risk": 0.05})
    backend = MockBackend(confused_from(32))
    profiles = [
        make_profile("m", Tier.LARGE, default_suite),
        make_profile("pinned", Tier.LARGE, default_suite),
    ]
    found = asyncio.run(with_budgets(backend, profiles, settings, seed=3))
    assert found[0].tool_budget == 16
    assert found[1].tool_budget is None
    assert {r.model for r in backend.requests} == {"m"}
    assert found[0].to_json()["toolBudget"] == 16


def test_a_level_sent_as_default_takes_defaults_budget_without_measuring_its_own(tmp_path, default_suite) -> None:
    settings = settings_for("http://u/v1", tmp_path / "s.json", bench={"risk": 0.05})
    backend = MockBackend(confused_from(32))
    default = make_profile("m", Tier.LARGE, default_suite)
    low = default.model_copy(update={"reasoning_effort": "low"})
    other = make_profile("n", Tier.LARGE, default_suite).model_copy(update={"reasoning_effort": "low"})
    found = asyncio.run(with_budgets(backend, [default, low, other], settings, seed=3, shared={"low": "default"}))
    assert [(p.model, p.reasoning_effort, p.tool_budget) for p in found] == [
        ("m", "default", 16),
        ("m", "low", 16),
        ("n", "low", None),  # its own default was not measured here: nothing to take
    ]
    assert {(r.model, r.effort) for r in backend.requests} == {("m", None)}


@pytest.mark.parametrize("effort", ["low", "default"])
def test_the_effort_is_sent_as_the_level_was_measured(tmp_path, default_suite, effort) -> None:
    settings = settings_for("http://u/v1", tmp_path / "s.json")
    backend = MockBackend(confused_from(4))
    asyncio.run(with_budgets(backend, [make_profile("m", Tier.LARGE, default_suite, effort=effort)], settings, 0))
    assert {r.effort for r in backend.requests} == {None if effort == "default" else effort}


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        ('<tool_call>{"name": "TARGET", "arguments": {}}</tool_call>', "text_call"),
        ('{"name": "TARGET", "arguments": {"ARG": "VALUE"}}', "text_call"),
        ("I cannot help with that.", "no_call"),
    ],
)
def test_an_answer_without_a_call_is_told_apart_from_one_written_as_text(answer, kind) -> None:
    case = instance(4, random.Random(2))
    text = answer.replace("TARGET", case.target).replace("ARG", case.argument).replace("VALUE", case.value)
    assert failure(case, Answer(text)) == kind


def test_a_wrong_call_is_classified_by_what_is_wrong() -> None:
    case = instance(4, random.Random(3))
    other = next(t["function"]["name"] for t in case.tools if t["function"]["name"] != case.target)
    good = json.dumps({case.argument: case.value})
    assert failure(case, Answer("", (ToolCall("c", "rm_rf", good),))) == "not_offered"
    assert failure(case, Answer("", (ToolCall("c", other, good),))) == "wrong_tool"
    assert failure(case, Answer("", (ToolCall("c", case.target, "{oops"),))) == "bad_arguments"
    assert failure(case, Answer("", (ToolCall("c", case.target, good),))) is None


def test_a_rung_counts_its_failures_by_kind() -> None:
    def as_text(request: BackendRequest) -> Answer:
        name, argument, value = answer_key(request.messages[-1]["content"])  # type: ignore[misc]
        return Answer(f'<tool_call>{{"name": "{name}", "arguments": {{"{argument}": "{value}"}}}}</tool_call>')

    found = measure(as_text)
    assert found.budget == 1
    assert found.rungs[0].kinds == {"text_call": len(found.rungs[0].failures)}
