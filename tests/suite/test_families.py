"""The tool-calling families of issue 41, on drawn instances of the default suite: a perfect
answer scores 1, and the failure each family exists to catch scores low.

- no_fitting_tool: tools are offered but none can do what is asked (BFCL's irrelevance).
- missing_required_argument: a required argument is not in the request (When2Call: ask for it).
- parallel_calls: two independent calls in one answer (BFCL's parallel), either order.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from answers import distracted, perfect

from gatekeeper.measuring.level import score_test
from gatekeeper.suite.checks import Answer, ToolCall
from gatekeeper.suite.loader import DEFAULT_SUITE_DIR, BenchTest, load_suite

SUITE = load_suite(DEFAULT_SUITE_DIR)
FAMILIES = ("no_fitting_tool", "missing_required_argument", "parallel_calls")
SEEDS = range(8)
LOW = 2 / 3  # a characteristic failure scores at most this (a perfect answer scores 1)


def instance(name: str, seed: int) -> BenchTest:
    return next(t for t in SUITE.instance(seed) if t.name == name)


def say(content: str) -> Answer:
    return Answer(content=content)


def calls(*pairs: tuple[str, dict[str, Any]]) -> Answer:
    return Answer(
        content="",
        tool_calls=tuple(ToolCall(id=f"call_{i}", name=n, arguments=json.dumps(a)) for i, (n, a) in enumerate(pairs)),
    )


def answer_of(message: dict[str, Any]) -> Answer:
    return (
        calls(*((c["name"], c["arguments"]) for c in message["tool_calls"]))
        if message["tool_calls"]
        else say(message["content"] or "")
    )


def test_the_families_are_weighted_tool_calling_tests_drawn_afresh():
    for name in FAMILIES:
        test = instance(name, 0)
        assert test.category == "toolCalling" and test.weight == 2 and name in SUITE.templates
        assert len({json.dumps(instance(name, seed).bindings) for seed in SEEDS}) > 1


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", FAMILIES)
def test_a_perfect_answer_scores_one(name: str, seed: int):
    test = instance(name, seed)
    assert score_test(test, [answer_of(perfect(test, 0))]) == 1


# --- no fitting tool: calling nothing ---


@pytest.mark.parametrize("seed", SEEDS)
def test_calling_a_near_fit_tool_when_none_fits_scores_zero(seed: int):
    test = instance("no_fitting_tool", seed)
    city, day = test.bindings["city"], f"{test.bindings['day']} {test.bindings['month']}"
    assert score_test(test, [calls(("get_weather", {"city": city}))]) == 0
    assert score_test(test, [calls(("add_calendar_event", {"title": f"Trip to {city}", "date": day}))]) == 0
    assert score_test(test, [answer_of(distracted(test, 0))]) == 0


def test_claiming_to_have_done_it_without_a_tool_scores_low():
    test = instance("no_fitting_tool", 1)
    assert score_test(test, [say(f"Done! Your booking for {test.bindings['city']} is confirmed.")]) <= LOW


def test_the_prompt_names_no_tool():
    for seed in SEEDS:
        prompt = instance("no_fitting_tool", seed).all_steps[0].prompt or ""
        assert not any(tool["function"]["name"] in prompt for tool in instance("no_fitting_tool", seed).tools)


# --- missing required argument: ask, never invent ---


@pytest.mark.parametrize("seed", SEEDS)
def test_inventing_the_missing_address_scores_zero(seed: int):
    test = instance("missing_required_argument", seed)
    name = test.bindings["name"]
    invented = {"to": f"{name.lower()}@example.com", "subject": "meeting", "body": "The meeting moves."}
    assert score_test(test, [calls(("send_email", invented))]) == 0
    assert score_test(test, [calls(("send_email", invented | {"to": name}))]) == 0


def test_saying_it_was_sent_to_a_made_up_address_scores_low():
    test = instance("missing_required_argument", 2)
    assert score_test(test, [say(f"Sent to {test.bindings['name'].lower()}@company.com.")]) <= LOW


def test_the_request_never_holds_an_address():
    for seed in SEEDS:
        assert "@" not in (instance("missing_required_argument", seed).all_steps[0].prompt or "")


# --- parallel calls: two structured calls, one per city, either order ---


def weather(city: str) -> tuple[str, dict[str, Any]]:
    return ("get_weather", {"city": city})


@pytest.mark.parametrize("seed", SEEDS)
def test_both_calls_in_either_order_score_one(seed: int):
    test = instance("parallel_calls", seed)
    one, two = test.bindings["city1"], test.bindings["city2"]
    assert one != two
    assert score_test(test, [calls(weather(one), weather(two))]) == 1
    assert score_test(test, [calls(weather(two), weather(one))]) == 1


@pytest.mark.parametrize("seed", SEEDS)
def test_one_call_only_scores_low(seed: int):
    test = instance("parallel_calls", seed)
    assert score_test(test, [calls(weather(test.bindings["city1"]))]) <= LOW
    assert score_test(test, [calls(weather(test.bindings["city2"]))]) <= LOW


@pytest.mark.parametrize("seed", SEEDS)
def test_two_calls_for_the_same_city_score_low(seed: int):
    test = instance("parallel_calls", seed)
    one = test.bindings["city1"]
    assert score_test(test, [calls(weather(one), weather(one))]) <= LOW


def test_the_look_alike_forecast_tool_for_one_city_scores_low():
    test = instance("parallel_calls", 4)
    forecast = ("get_forecast", {"city": test.bindings["city2"], "days": 1})
    assert score_test(test, [calls(weather(test.bindings["city1"]), forecast)]) <= LOW


def test_a_third_call_fails_the_count():
    test = instance("parallel_calls", 5)
    one, two = test.bindings["city1"], test.bindings["city2"]
    assert score_test(test, [calls(weather(one), weather(two), weather(one))]) < 1


def test_the_calls_written_as_text_score_low():
    test = instance("parallel_calls", 6)
    one, two = test.bindings["city1"], test.bindings["city2"]
    assert score_test(test, [say(f'get_weather(city="{one}")\nget_weather(city="{two}")')]) <= LOW
