"""What a stored profile says (issue 39): the seed's scores, a fresh seed, a model's own failures.

The scores are the stratified estimate (each test's mean weighted by its share), so a
deterministic model stores exactly what one pass of the seed's scoring gives; every measurement
draws and stores its own seed; a server's "your model's output did not parse" is a failed answer,
while other errors are retried, counted per category, and reported when they fall unevenly.
"""

from __future__ import annotations

import asyncio
import json

import answers
import httpx
import pytest
from conftest import SEED_SUITE, needs_seed_suite
from scripted import SuiteScript

from gatekeeper.config import Settings
from gatekeeper.measuring.backends import BackendRequest, MockBackend, OpenAIBackend, RequestSettings
from gatekeeper.measuring.runner import RunSettings, category_scores, run_test, sweep
from gatekeeper.measuring.service import MeasurementService
from gatekeeper.store import JsonFileStore
from gatekeeper.suite.loader import CATEGORIES, Suite, load_suite
from gatekeeper.types import Answer, ToolCall


def scripted(script: SuiteScript, behaviour) -> MockBackend:
    def handle(request: BackendRequest) -> Answer:
        message = behaviour(*script.locate({"messages": request.messages}))
        calls = tuple(
            ToolCall(f"call_{i}", c["name"], json.dumps(c["arguments"])) for i, c in enumerate(message["tool_calls"])
        )
        return Answer(message["content"] or "", calls)

    return MockBackend(handle)


def single_pass(suite: Suite, behaviour) -> dict[str, float]:
    """The seed's scoring: every test once, each category the weighted mean of its tests' scores."""
    backend = scripted(SuiteScript(suite), behaviour)
    runs = [asyncio.run(run_test(backend, "m", t, None, RunSettings())) for t in suite.tests]
    return category_scores([(run.test, run.score()) for run in runs])


def weighted_test_results(profile, suite: Suite) -> dict[str, float]:
    weight = {t.name: t.weight for t in suite.tests}
    found = {}
    for c in CATEGORIES:
        results = [r for r in profile.test_results if r.category == c]
        found[c] = sum(weight[r.name] * r.score for r in results) / sum(weight[r.name] for r in results)
    return found


@needs_seed_suite
@pytest.mark.parametrize("persona", sorted(answers.BEHAVIOURS))
def test_every_deterministic_persona_stores_the_seeds_single_pass_scores(persona):
    suite = load_suite(SEED_SUITE)
    behaviour = answers.BEHAVIOURS[persona]
    expected = {c: round(v, 4) for c, v in single_pass(suite, behaviour).items()}
    for seed in (1, 2):
        measured = asyncio.run(sweep(scripted(SuiteScript(suite), behaviour), "m", suite, ["default"], seed=seed))
        (profile,) = measured.profiles
        assert profile.scores == expected
        assert profile.scores == pytest.approx(weighted_test_results(profile, suite), abs=1e-4)


@needs_seed_suite
def test_distracted_on_the_seed_suite_is_stored_medium_whatever_the_seed():
    # toolCalling exactly 0.65 (medium from 0.60): stored `small` every time when every
    # measurement drew seed 0, and about one time in five after, until each test kept its own
    # wealth (the observations' alone were predicted to need more than the budget left).
    suite = load_suite(SEED_SUITE)
    backend = scripted(SuiteScript(suite), answers.BEHAVIOURS["distracted"])
    for seed in range(5):
        (profile,) = asyncio.run(sweep(backend, "m", suite, ["default"], seed=seed)).profiles
        assert profile.tier == "medium" and profile.scores["toolCalling"] == 0.65


def test_scores_are_the_weighted_mean_of_the_test_results_when_tests_are_drawn(default_suite):
    # wrong_distractor fails the chains only: the adaptive design draws tool tests unevenly,
    # and the unweighted mean of its observations would not be the seed's score.
    measured = asyncio.run(
        sweep(scripted(SuiteScript(default_suite), answers.wrong_distractor), "m", default_suite, ["default"], seed=3)
    )
    (profile,) = measured.profiles
    assert measured.reports["default"]["toolCalling"]["observations"].keys() - {"whole"}  # draws were made
    assert profile.scores == pytest.approx(weighted_test_results(profile, default_suite), abs=1e-4)
    assert profile.scores["toolCalling"] == round(
        single_pass(default_suite, answers.wrong_distractor)["toolCalling"], 4
    )


@needs_seed_suite
def test_every_measurement_of_a_fixed_suite_draws_a_fresh_seed_and_replays_with_it(tmp_path):
    suite = load_suite(SEED_SUITE)
    assert not suite.randomised
    backends: list[MockBackend] = []

    def factory(model: str) -> MockBackend:
        backends.append(scripted(SuiteScript(suite), answers.wrong_distractor))
        return backends[-1]

    service = MeasurementService(Settings(), suite, JsonFileStore(tmp_path / "p.json"), factory)
    seeds = [asyncio.run(service.measure("m")).instance_seed for _ in range(3)]
    assert None not in seeds and len(set(seeds)) == 3
    replay = asyncio.run(service.measure("m", seed=seeds[0]))
    assert replay.instance_seed == seeds[0]
    assert [r.messages for r in backends[-1].requests] == [r.messages for r in backends[0].requests]


# -- errors: the model's own, and the transport's -----------------------------------------------

# The bodies servers send when the model's output did not parse (backends.py names the sources).
UNPARSED = [
    (500, {"error": {"code": 500, "message": "Failed to parse input at pos 12: </tool_call>", "type": "server_error"}}),
    (500, {"error": {"code": 500, "message": "Failed to parse tool call arguments as JSON", "type": "server_error"}}),
    (
        500,
        {"error": "error parsing tool call: raw='{\"path\":\"a\"}]', err=invalid character ']' after top-level value"},
    ),
    (500, {"error": "Failed to parse tool call: Unexpected end of content."}),
    (400, {"object": "error", "message": "Invalid \\escape: line 1 column 2271 (char 2270)", "code": 400}),
]


def over_http(script: SuiteScript, behaviour, fail) -> tuple[OpenAIBackend, list[dict]]:
    """The real OpenAIBackend over an httpx MockTransport: `fail(test, step, attempt)` returns a
    (status, body) to send instead of the answer, or None (`attempt` counts the requests with
    the same conversation, 1 first: two runs of one fixed test are the same conversation, so a
    test counting on it runs one call at a time)."""
    seen: list[dict] = []
    attempts: dict[str, int] = {}

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        test, step = script.locate(body)
        key = json.dumps(body["messages"])
        attempts[key] = attempts.get(key, 0) + 1
        failed = fail(test, step, attempts[key])
        if failed is not None:
            return httpx.Response(failed[0], json=failed[1])
        message = behaviour(test, step)
        calls = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
            }
            for i, c in enumerate(message["tool_calls"])
        ]
        doc = {"role": "assistant", "content": message["content"]} | ({"tool_calls": calls} if calls else {})
        return httpx.Response(200, json={"choices": [{"message": doc, "finish_reason": "stop"}], "usage": {}})

    settings = RequestSettings(backoff_s=0.0, max_retries=3)
    return OpenAIBackend("http://model.invalid/v1", settings=settings, transport=httpx.MockTransport(handle)), seen


@pytest.mark.parametrize(("status", "body"), UNPARSED)
def test_an_answer_the_server_could_not_parse_is_a_failed_answer_not_a_retry(default_suite, status, body):
    test = next(t for t in default_suite.tests if t.name == "integer_argument")
    backend, seen = over_http(SuiteScript(default_suite), answers.perfect, lambda t, s, n: (status, body))
    run = asyncio.run(run_test(backend, "m", test, None, RunSettings()))
    assert len(seen) == 1 and run.retries == 0
    assert run.answers[0].content == "" and not run.answers[0].tool_calls and run.score() == 0.0


def test_a_model_failing_its_tool_calls_as_http_500_is_not_measured_as_passing_them(default_suite):
    # Every chain's second call fails to parse: retried, the model would look perfect.
    def fail(test, step, attempt):
        return UNPARSED[0] if test.category == "toolCalling" and step == 1 else None

    backend, _ = over_http(SuiteScript(default_suite), answers.perfect, fail)
    (profile,) = asyncio.run(sweep(backend, "m", default_suite, ["default"], seed=4)).profiles
    assert profile.scores["toolCalling"] < 0.9 and profile.tier != "large"
    assert profile.retries is None


def test_other_errors_are_retried_counted_per_category_and_uneven_ones_reported(default_suite):
    # The first attempt of every toolCalling call fails with a plain HTTP 500: retried (the
    # answers are perfect), counted on toolCalling only, and reported as uneven.
    def fail(test, step, attempt):
        plain = (500, {"error": {"message": "upstream overloaded", "type": "server_error"}})
        return plain if test.category == "toolCalling" and attempt % 2 else None

    backend, _ = over_http(SuiteScript(default_suite), answers.perfect, fail)
    measured = asyncio.run(sweep(backend, "m", default_suite, ["default"], RunSettings(concurrency=1), seed=5))
    (profile,) = measured.profiles
    tool_calls = measured.reports["default"]["toolCalling"]["calls"]
    assert profile.retries == {"instruction": 0, "json": 0, "toolCalling": tool_calls}
    assert measured.reports["default"]["toolCalling"]["retries"] == tool_calls
    assert "unevenly" in measured.uneven_errors["default"]
    assert profile.scores["toolCalling"] == 1.0  # a retried transport error never costs the model


def test_errors_spread_evenly_are_counted_but_not_reported(default_suite):
    def fail(test, step, attempt):  # every call's first attempt fails, whatever the category
        return (503, {"error": {"message": "busy"}}) if attempt % 2 else None

    backend, _ = over_http(SuiteScript(default_suite), answers.perfect, fail)
    measured = asyncio.run(sweep(backend, "m", default_suite, ["default"], RunSettings(concurrency=1), seed=6))
    (profile,) = measured.profiles
    assert profile.retries and all(profile.retries.values())
    assert measured.uneven_errors == {}


def test_recommend_only_measures_levels_cheapest_first_and_skips_the_rest(default_suite):
    backend = scripted(SuiteScript(default_suite), answers.perfect)
    efforts = ["default", "xhigh", "medium", "low", "none"]
    measured = asyncio.run(sweep(backend, "m", default_suite, efforts, RunSettings(recommend_only=True), seed=7))
    assert measured.calls <= 300
    assert measured.skipped == dict.fromkeys(["low", "medium", "xhigh"], "none")
    assert {p.reasoning_effort for p in measured.profiles} == {"default", "none"}
    assert {p.tier for p in measured.profiles} == {"large"}
