"""An answer past its call's bound (gatekeeper.measuring.backends CallBound) is a failed answer
whatever the server says it finished on, in the suite and in the tool budget, and the log line
saying so names the test and the effort."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import answers
import pytest
from scripted import RawAnswer, RawUpstream, ScriptedServer, SuiteScript, budget_reply, chat_completion
from structlog.contextvars import merge_contextvars
from structlog.testing import capture_logs

from gatekeeper.errors import BackendError
from gatekeeper.measuring.backends import OpenAIBackend, RequestSettings
from gatekeeper.measuring.budget import measure_budget
from gatekeeper.measuring.runner import RunSettings, sweep
from gatekeeper.rules.tiers import Tier

RAMBLING = {"completion_tokens": 50_000}  # a server that ignored max_tokens, and says `stop`


def backend(server: ScriptedServer | RawUpstream) -> OpenAIBackend:
    return OpenAIBackend(server.base_url, settings=RequestSettings(max_retries=0))


def one_test_rambles(default_suite, name: str):
    """Perfect answers; `name`'s run past their bound but finish as if they had not."""
    script = SuiteScript(default_suite)

    def respond(body: dict) -> dict:
        test, step = script.locate(body)
        return answers.perfect(test, step) | (RAMBLING if test.name == name else {})

    return respond


def scores_of(server: ScriptedServer, suite) -> dict[str, float]:
    (profile,) = asyncio.run(sweep(backend(server), "m", suite, ["default"], RunSettings(samples=1))).profiles
    return {r.name: r.score for r in profile.test_results}


def test_an_answer_reporting_more_tokens_than_its_bound_is_a_failed_answer(default_suite):
    with ScriptedServer(one_test_rambles(default_suite, "sentence_seven_words")) as server:
        scores = scores_of(server, default_suite)
    assert server.requests[0]["max_tokens"] < RAMBLING["completion_tokens"]
    assert scores.pop("sentence_seven_words") == 0  # the text would pass: past its bound, not an answer
    assert set(scores.values()) == {1.0}


def test_a_tool_call_reporting_more_tokens_than_its_bound_is_a_failed_answer(default_suite):
    name = default_suite.by_category("toolCalling")[0].name
    with ScriptedServer(one_test_rambles(default_suite, name)) as server:
        scores = scores_of(server, default_suite)
    assert scores.pop(name) == 0
    assert set(scores.values()) == {1.0}


def _ask(upstream: RawUpstream, need: int):
    async def ask():
        client = backend(upstream)
        try:
            return await client.complete("m", [{"role": "user", "content": "hi"}], [], None, need=need)
        finally:
            await client.aclose()

    return asyncio.run(ask()).answer


def _without_usage(content: str) -> RawAnswer:
    doc = chat_completion({"content": content})
    del doc["usage"]
    return RawAnswer(json.dumps(doc).encode())


def test_without_usage_a_text_far_longer_than_its_bound_allows_is_cut():
    with RawUpstream(_without_usage("word " * 20_000)) as upstream:
        answer = _ask(upstream, need=128)
    assert answer.cut and answer.finish_reason == "length"


def test_without_usage_a_long_but_possible_answer_is_not_cut():
    # 128 tokens may well write 1,000 characters: only text no tokenizer fits in the bound is cut.
    with RawUpstream(_without_usage("x" * 1_000)) as upstream:
        answer = _ask(upstream, need=128)
    assert not answer.cut and answer.finish_reason == "stop"


def test_an_answer_within_its_bound_is_not_cut(default_suite):
    with ScriptedServer(SuiteScript(default_suite).responder(answers.perfect)) as server:
        assert set(scores_of(server, default_suite).values()) == {1.0}


def _budget_of(respond) -> int:
    with ScriptedServer(respond) as server:
        return asyncio.run(measure_budget(backend(server), "m", None, Tier.LARGE)).budget


def test_the_tool_budget_counts_an_answer_cut_at_its_bound_as_a_failure():
    def cut(body: dict) -> dict:
        return budget_reply(body["messages"]) | {"finish_reason": "length"}  # type: ignore[operator]

    assert _budget_of(cut) == 1


def test_the_tool_budget_counts_an_answer_past_its_token_bound_as_a_failure():
    def rambling(body: dict) -> dict:
        return budget_reply(body["messages"]) | RAMBLING  # type: ignore[operator]

    assert _budget_of(rambling) == 1


def test_the_tool_budget_of_answers_within_their_bound_is_the_top_rung():
    assert _budget_of(lambda body: budget_reply(body["messages"])) == 64


def test_the_over_bound_log_line_names_the_test_and_the_effort(default_suite):
    with ScriptedServer(one_test_rambles(default_suite, "sentence_seven_words")) as server:
        with capture_logs(processors=[merge_contextvars]) as logs:
            asyncio.run(sweep(backend(server), "m", default_suite, ["default", "low"], RunSettings(samples=1)))
    over = {(e["test"], e["effort"], e["bound"]) for e in logs if e["event"] == "answer_over_bound"}
    assert over == {("sentence_seven_words", "default", "tokens"), ("sentence_seven_words", "low", "tokens")}


def test_a_call_past_its_time_bound_is_logged_with_its_test_and_effort(default_suite):
    script = SuiteScript(default_suite)

    def slow_one(body: dict) -> dict:
        test, step = script.locate(body)
        return answers.perfect(test, step) | ({"delay_s": 3} if test.name == "json_inventory_selection" else {})

    with ScriptedServer(slow_one) as server:
        client = OpenAIBackend(
            server.base_url, settings=RequestSettings(max_retries=0, prompt_allowance_s=0.5, min_tokens_per_s=1e6)
        )
        with capture_logs(processors=[merge_contextvars]) as logs:
            asyncio.run(sweep(client, "m", default_suite, ["default"], RunSettings(samples=1)))
    over = {(e["test"], e["effort"], e["bound"]) for e in logs if e["event"] == "answer_over_bound"}
    assert over == {("json_inventory_selection", "default", "seconds")}


def test_the_report_says_which_test_was_cut_and_why(default_suite):
    with ScriptedServer(one_test_rambles(default_suite, "sentence_seven_words")) as server:
        measured = asyncio.run(sweep(backend(server), "m", default_suite, ["default"], RunSettings(samples=1)))
    report = measured.reports["default"]  # `bench --json`'s `categories`
    (reasons,) = report["instruction"]["cut"].values()
    assert list(report["instruction"]["cut"]) == ["sentence_seven_words"] and set(reasons) == {"length"}
    assert all(not r["cut"] for c, r in report.items() if c != "instruction")


# A backend that fails is never a weak model: when a call's bound runs out while it waits to retry
# a failed attempt, the measurement fails (BackendError), it does not score a failed answer.
RETRYING = RequestSettings(max_retries=6, backoff_s=0.2, prompt_allowance_s=0.3, min_tokens_per_s=1e6)


def _sweep_raises(client: OpenAIBackend, suite) -> str:
    async def run() -> None:
        try:
            await sweep(client, "m", suite, ["default"], RunSettings(samples=1))
        finally:
            await client.aclose()

    with pytest.raises(BackendError) as failed:
        asyncio.run(run())
    return str(failed.value)


def test_a_backend_erroring_until_the_bound_runs_out_fails_the_measurement(default_suite):
    with ScriptedServer(lambda body: {"status": 503, "error": "overloaded"}) as server:
        message = _sweep_raises(OpenAIBackend(server.base_url, settings=RETRYING), default_suite)
    assert "HTTP 503" in message and "bound" in message


def test_a_dead_backend_fails_the_measurement_within_the_bound(default_suite):
    from scripted import free_port

    client = OpenAIBackend(f"http://127.0.0.1:{free_port()}/v1", settings=RETRYING)
    assert "connection failed" in _sweep_raises(client, default_suite)


def test_a_retried_call_that_then_runs_past_its_bound_is_a_failed_answer():
    # One 503, then an attempt in flight when the bound runs out: slow generation, the model's.
    calls = []

    def flaky_then_slow(body: dict) -> dict:
        calls.append(body)
        return {"status": 503, "error": "busy"} if len(calls) == 1 else {"content": "hi", "delay_s": 3}

    async def ask():
        client = OpenAIBackend(server.base_url, settings=replace(RETRYING, backoff_s=0.05, prompt_allowance_s=1.0))
        try:
            return await client.complete("m", [{"role": "user", "content": "hi"}], [], None, need=16)
        finally:
            await client.aclose()

    with ScriptedServer(flaky_then_slow) as server:
        answer = asyncio.run(ask()).answer
    assert len(calls) == 2 and answer.finish_reason == "timeout"
