"""The gating proxy, end to end: official openai client -> real proxy port -> scripted upstream."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import anthropic
import httpx
import openai
import pytest
from conftest import (
    make_profile,
    measuring_upstream,
    metric,
    running_proxy,
    seed_store,
    sent_tools,
    settings_for,
    tool,
    wait_until,
)
from scripted import RawAnswer, RawUpstream, ScriptedServer, SuiteScript, ThreadedServer, chat_completion, free_port

from gatekeeper import Gatekeeper
from gatekeeper.rules.tiers import Tier
from gatekeeper.server.app import create_app

TOOLS = [tool("read_file"), tool("write_file"), tool("execute_command")]


forwarded_tools = sent_tools


def ask(proxy, model: str = "m", **extra):
    return proxy.client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": "hi"}], **extra
    )


@pytest.mark.parametrize(
    ("tier", "expected"),
    [
        (Tier.SMALL, ["read_file"]),
        (Tier.MEDIUM, ["read_file", "write_file"]),
        (Tier.LARGE, ["read_file", "write_file", "execute_command"]),
    ],
)
def test_measured_profile_decides_forwarded_tools(upstream, store_path, default_suite, tier, expected):
    seed_store(store_path, make_profile("m", tier, default_suite))
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        raw = ask(proxy, tools=TOOLS)
    assert forwarded_tools(upstream) == expected
    assert raw.headers["x-gatekeeper-tier"] == tier.value
    assert raw.headers["x-gatekeeper-profile"] == "measured"


def test_effort_is_part_of_the_key(upstream, store_path, default_suite):
    seed_store(
        store_path,
        make_profile("m", Tier.LARGE, default_suite, effort="xhigh"),
        make_profile("m", Tier.SMALL, default_suite, effort="low"),
    )
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        ask(proxy, tools=TOOLS, reasoning_effort="low")
        assert forwarded_tools(upstream) == ["read_file"]
        ask(proxy, tools=TOOLS, reasoning_effort="xhigh")
        assert forwarded_tools(upstream) == ["read_file", "write_file", "execute_command"]
    assert upstream.requests[-1]["reasoning_effort"] == "xhigh"


def test_pin_beats_measurement_and_pair_pin_beats_model_pin(upstream, store_path, default_suite):
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    settings = settings_for(upstream.base_url, store_path, pins={"m": "large", "m@low": "medium"})
    with running_proxy(settings) as proxy:
        raw = ask(proxy, tools=TOOLS)
        assert raw.headers["x-gatekeeper-profile"] == "pinned"
        assert forwarded_tools(upstream) == ["read_file", "write_file", "execute_command"]
        raw = ask(proxy, tools=TOOLS, reasoning_effort="low")
        assert raw.headers["x-gatekeeper-tier"] == "medium"
        assert forwarded_tools(upstream) == ["read_file", "write_file"]


def test_stale_profile_is_ignored_after_the_suite_changes(upstream, store_path, default_suite):
    seed_store(store_path, make_profile("m", Tier.LARGE, default_suite, tests_hash="0000dead"))
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        raw = ask(proxy, tools=TOOLS)
    assert raw.headers["x-gatekeeper-tier"] == "small"
    assert raw.headers["x-gatekeeper-profile"] in ("pending", "unmeasured")


def _suite_calls(server: ScriptedServer, default_suite) -> int:
    script = SuiteScript(default_suite)  # recognises randomised tests' instances too

    def first_step_of_a_test(body: dict) -> bool:
        try:
            return script.locate(body)[1] == 0
        except (KeyError, StopIteration):
            return False

    return sum(1 for body in server.requests if first_step_of_a_test(body))


def test_fail_closed_serves_now_at_unknown_tier_and_measures_in_background(store_path, default_suite):
    with measuring_upstream(default_suite) as upstream:
        with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
            raw = ask(proxy, tools=TOOLS)
            assert raw.headers["x-gatekeeper-tier"] == "small"
            assert raw.headers["x-gatekeeper-profile"] == "pending"
            wait_until(lambda: proxy.gk.lookup("m"), "the background measurement", timeout_s=20)
            raw = ask(proxy, tools=TOOLS)
            assert raw.headers["x-gatekeeper-profile"] == "measured"
            assert raw.headers["x-gatekeeper-tier"] == "large"
            assert forwarded_tools(upstream) == ["read_file", "write_file", "execute_command"]


def test_wait_policy_holds_the_request_until_measured(store_path, default_suite):
    with measuring_upstream(default_suite) as upstream:
        settings = settings_for(upstream.base_url, store_path, unknown_models="wait", wait_timeout_s=20)
        with running_proxy(settings) as proxy:
            raw = ask(proxy, tools=TOOLS)
    assert raw.headers["x-gatekeeper-profile"] == "measured"
    assert forwarded_tools(upstream) == ["read_file", "write_file", "execute_command"]


def test_wait_policy_fails_closed_after_the_timeout(store_path, default_suite):
    with measuring_upstream(default_suite, delay_s=0.5) as upstream:
        settings = settings_for(upstream.base_url, store_path, unknown_models="wait", wait_timeout_s=0.2)
        with running_proxy(settings) as proxy:
            raw = ask(proxy, tools=TOOLS)
            assert raw.headers["x-gatekeeper-tier"] == "small"
            assert raw.headers["x-gatekeeper-profile"] == "pending"


def test_reject_policy_answers_503_until_measured(store_path, default_suite):
    with measuring_upstream(default_suite) as upstream:
        settings = settings_for(upstream.base_url, store_path, unknown_models="reject")
        with running_proxy(settings) as proxy:
            with pytest.raises(openai.InternalServerError) as info:
                ask(proxy, tools=TOOLS)
            assert info.value.status_code == 503
            assert "not been measured" in info.value.message
            wait_until(lambda: proxy.gk.lookup("m"), "the background measurement", timeout_s=20)
            assert ask(proxy, tools=TOOLS).headers["x-gatekeeper-profile"] == "measured"


def test_fifty_concurrent_requests_for_an_unknown_pair_cause_one_benchmark(store_path, default_suite):
    with measuring_upstream(default_suite, delay_s=0.05) as upstream:
        settings = settings_for(upstream.base_url, store_path, unknown_models="wait", wait_timeout_s=30)
        with running_proxy(settings) as proxy:
            with ThreadPoolExecutor(50) as pool:
                raws = list(pool.map(lambda _: ask(proxy, tools=TOOLS), range(50)))
    assert {r.headers["x-gatekeeper-profile"] for r in raws} == {"measured"}
    assert _suite_calls(upstream, default_suite) == len(default_suite.tests)


def test_failed_measurement_is_not_retried_on_every_request(store_path, default_suite):
    with ScriptedServer(lambda body: {"status": 500, "error": "down"}) as upstream:
        settings = settings_for(
            upstream.base_url, store_path, bench={"retry_after_s": 60, "max_retries": 0, "timeout_s": 10}
        )
        with running_proxy(settings) as proxy:
            with pytest.raises(openai.InternalServerError):
                ask(proxy, tools=TOOLS)
            wait_until(
                lambda: any(p.key == "m@default" and p.finished for p in proxy.gk.progress()),
                "the failed measurement to land",
            )
            measuring = sum(1 for b in upstream.requests if b["messages"][0]["content"] != "hi")
            for _ in range(5):
                with pytest.raises(openai.InternalServerError):
                    ask(proxy, tools=TOOLS)
            assert proxy.gk.lookup("m") is None
    assert 1 <= measuring <= len(default_suite.tests)
    assert sum(1 for b in upstream.requests if b["messages"][0]["content"] != "hi") == measuring


def test_benchmark_uses_upstream_key_not_the_clients(store_path, default_suite):
    with measuring_upstream(default_suite) as upstream:
        settings = settings_for(upstream.base_url, store_path, unknown_models="wait")
        with running_proxy(settings) as proxy:
            ask(proxy)
    auth = {
        h["authorization"]
        for h, b in zip(upstream.headers, upstream.requests, strict=True)
        if b["messages"][0]["content"] != "hi"
    }
    assert auth == {"Bearer upstream-key"}
    assert upstream.headers[-1]["authorization"] == "Bearer client-key"


# -- filtering details ---------------------------------------------------------------------


def test_no_tools_left_drops_tools_and_tool_choice(upstream, store_path, default_suite):
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        ask(proxy, tools=[tool("execute_command")], tool_choice="auto")
    assert "tools" not in upstream.requests[-1] and "tool_choice" not in upstream.requests[-1]


def test_tool_choice_forcing_a_hidden_tool_is_a_400_naming_tool_and_tier(upstream, store_path, default_suite):
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        with pytest.raises(openai.BadRequestError) as info:
            ask(proxy, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "execute_command"}})
    assert "execute_command" in info.value.message and "large" in info.value.message
    assert info.value.code == "tool_not_allowed"
    assert info.value.response.headers["x-gatekeeper-tier"] == "small"
    assert info.value.response.headers["x-gatekeeper-profile"] == "measured"
    assert upstream.requests == []


def test_legacy_functions_are_filtered_too(upstream, store_path, default_suite):
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        ask(proxy, functions=[{"name": "read_file", "parameters": {}}, {"name": "write_file", "parameters": {}}])
    assert [f["name"] for f in upstream.requests[-1]["functions"]] == ["read_file"]


def test_known_unowned_fields_pass_through_untouched(upstream, store_path, default_suite):
    seed_store(store_path, make_profile("m", Tier.LARGE, default_suite))
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        ask(proxy, tools=TOOLS, temperature=0.3, seed=7, metadata={"k": "v"}, logit_bias={"42": 1})
    body = upstream.requests[-1]
    assert body["temperature"] == 0.3 and body["seed"] == 7
    assert body["metadata"] == {"k": "v"} and body["logit_bias"] == {"42": 1}
    assert body["tools"] == TOOLS


def test_an_unknown_field_is_refused_by_default(upstream, store_path, default_suite):
    seed_store(store_path, make_profile("m", Tier.LARGE, default_suite))
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        with pytest.raises(openai.BadRequestError, match="custom_field"):
            ask(proxy, tools=TOOLS, extra_body={"custom_field": {"a": [1, 2]}})
    assert upstream.requests == []


# -- answers: pass-through and response-side enforcement --------------------------------


def _calls_reply(*names: str) -> callable:
    return lambda body: {
        "content": "calling",
        "tool_calls": [{"name": n, "arguments": {"path": 'a "b"\nc', "n": 3}} for n in names],
        "completion_tokens": 11,
    }


def test_non_streaming_answer_passes_through_intact(store_path, default_suite):
    with ScriptedServer(_calls_reply("read_file")) as upstream:
        seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
        with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
            completion = ask(proxy, tools=TOOLS).parse()
    call = completion.choices[0].message.tool_calls[0]
    assert completion.choices[0].message.content == "calling"
    assert call.function.name == "read_file"
    assert json.loads(call.function.arguments) == {"path": 'a "b"\nc', "n": 3}
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.usage.completion_tokens == 11


def test_streaming_answer_passes_through_intact(store_path, default_suite):
    with ScriptedServer(_calls_reply("read_file")) as upstream:
        seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
        with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
            with proxy.client.chat.completions.stream(
                model="m",
                messages=[{"role": "user", "content": "hi"}],
                tools=TOOLS,
                stream_options={"include_usage": True},
            ) as stream:
                for _ in stream:
                    pass
                final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "calling"
    assert [c.function.name for c in message.tool_calls] == ["read_file"]
    assert json.loads(message.tool_calls[0].function.arguments) == {"path": 'a "b"\nc', "n": 3}
    assert final.usage.completion_tokens == 11


@pytest.mark.parametrize("stream", [False, True])
def test_calls_to_hidden_or_invented_tools_are_removed(store_path, default_suite, stream):
    with ScriptedServer(_calls_reply("execute_command", "read_file", "made_up_tool")) as upstream:
        seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
        with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
            blocked_before = metric(proxy.url, "gatekeeper_tool_calls_blocked_total")
            if stream:
                with proxy.client.chat.completions.stream(
                    model="m", tools=TOOLS, messages=[{"role": "user", "content": "hi"}]
                ) as s:
                    for _ in s:
                        pass
                    completion = s.get_final_completion()
            else:
                completion = ask(proxy, tools=TOOLS).parse()
            # A stream is counted once it is over on the proxy's side, which may be just after the client's [DONE].
            blocked = wait_until(
                lambda: metric(proxy.url, "gatekeeper_tool_calls_blocked_total") - blocked_before,
                "the blocked-calls counter",
            )
    assert [c.function.name for c in completion.choices[0].message.tool_calls] == ["read_file"]
    assert completion.choices[0].finish_reason == "tool_calls"
    assert blocked == 2  # execute_command (hidden) and made_up_tool (never offered)


@pytest.mark.parametrize("stream", [False, True])
def test_finish_reason_becomes_stop_when_every_call_is_removed(store_path, default_suite, stream):
    with ScriptedServer(_calls_reply("execute_command")) as upstream:
        seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
        with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
            if stream:
                chunks = list(
                    proxy.client.chat.completions.create(
                        model="m", tools=TOOLS, messages=[{"role": "user", "content": "hi"}], stream=True
                    )
                )
                assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
                finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
                assert finish == ["stop"]
            else:
                completion = ask(proxy, tools=TOOLS).parse()
                assert completion.choices[0].message.tool_calls is None
                assert completion.choices[0].finish_reason == "stop"


# -- bad input and upstream trouble --------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"messages": []}', "'model' is required"),
        (b'{"model": "m", "messages": [], "tools": {"a": 1}}', "'tools' must be an array"),
        (b'{"model": "m", "messages": [], "tools": [{"type": "function"}]}', "tools[0].function.name"),
        (b'{"model": "m", "messages": [], "tools": ["x"]}', "tools[0] must be an object"),
    ],
)
def test_bad_requests_get_a_clear_400_and_the_proxy_keeps_serving(upstream, store_path, default_suite, body, fragment):
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        response = httpx.post(
            proxy.url + "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code == 400
        assert fragment in response.json()["error"]["message"]
        assert ask(proxy).parse().choices[0].message.content == "ok"


def test_oversized_body_gets_413(upstream, store_path):
    settings = settings_for(upstream.base_url, store_path, max_body_bytes=2048)
    with running_proxy(settings) as proxy:
        with pytest.raises(openai.APIStatusError) as info:
            proxy.client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x" * 5000}])
        assert info.value.status_code == 413
        assert upstream.requests == []
        assert ask(proxy).status_code == 200


def test_upstream_errors_pass_through_with_status_and_body(store_path, default_suite):
    with ScriptedServer(lambda body: {"status": 429, "error": "slow down please"}) as upstream:
        seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
        with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
            with pytest.raises(openai.RateLimitError) as info:
                ask(proxy)
    assert info.value.status_code == 429
    assert info.value.body == {"message": "slow down please", "type": "scripted_error", "code": None}


def test_unreachable_upstream_is_a_502(store_path, default_suite):
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    settings = settings_for(f"http://127.0.0.1:{free_port()}/v1", store_path)
    with running_proxy(settings) as proxy:
        with pytest.raises(openai.APIStatusError) as info:
            ask(proxy)
        assert info.value.status_code == 502
        assert httpx.get(proxy.url + "/healthz").json() == {"status": "ok"}


def test_slow_upstream_is_a_504(store_path, default_suite):
    with ScriptedServer(delay_s=1.0) as upstream:
        seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
        settings = settings_for(
            upstream.base_url,
            store_path,
            upstream={"base_url": upstream.base_url, "api_key": "upstream-key", "timeout_s": 0.2},
        )
        with running_proxy(settings) as proxy:
            with pytest.raises(openai.APIStatusError) as info:
                ask(proxy)
    assert info.value.status_code == 504


def test_truncated_upstream_stream_gives_the_client_an_error(store_path, default_suite):
    """llama.cpp's server sends 200 headers, then drops the stream without [DONE]."""
    from scripted import ThreadedServer
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def broken(request):
        async def events():
            yield b'data: {"choices": [{"index": 0, "delta": {"content": "par"}}]}\n\n'

        return StreamingResponse(events(), media_type="text/event-stream")

    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    with ThreadedServer(Starlette(routes=[Route("/v1/chat/completions", broken, methods=["POST"])])) as server:
        with running_proxy(settings_for(f"http://127.0.0.1:{server.port}/v1", store_path)) as proxy:
            with pytest.raises(openai.APIError) as info:
                list(
                    proxy.client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
                    )
                )
            assert "ended before [DONE]" in str(info.value)
            assert httpx.get(proxy.url + "/healthz").status_code == 200


def test_models_are_forwarded(upstream, store_path):
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        assert [m.id for m in proxy.client.models.list()] == ["scripted"]


# -- admin ---------------------------------------------------------------------------------


def test_admin_api_refuses_without_the_key(upstream, store_path):
    with running_proxy(settings_for(upstream.base_url, store_path, admin_key="s3cret")) as proxy:
        assert httpx.get(proxy.url + "/admin/profiles").status_code == 401
        assert httpx.get(proxy.url + "/admin/profiles", headers={"authorization": "Bearer nope"}).status_code == 401
        ok = httpx.get(proxy.url + "/admin/profiles", headers={"authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and ok.json()["profiles"] == {}


def test_admin_api_is_absent_without_a_configured_key(upstream, store_path):
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        assert httpx.get(proxy.url + "/admin/profiles", headers={"authorization": "Bearer x"}).status_code == 404


def test_admin_benchmark_and_invalidate(store_path, default_suite):
    auth = {"authorization": "Bearer k"}
    with measuring_upstream(default_suite) as upstream:
        with running_proxy(settings_for(upstream.base_url, store_path, admin_key="k")) as proxy:
            started = httpx.post(proxy.url + "/admin/profiles/m@low/benchmark", headers=auth)
            assert started.status_code == 202
            wait_until(lambda: proxy.gk.lookup("m", "low"), "the background measurement", timeout_s=20)
            listed = httpx.get(proxy.url + "/admin/profiles", headers=auth).json()
            assert listed["profiles"]["m@low"]["tier"] == "large" and listed["profiles"]["m@low"]["valid"]
            gone = httpx.delete(proxy.url + "/admin/profiles/m@low", headers=auth).json()
            assert gone == {"invalidated": "m@low", "existed": True}
            assert proxy.gk.lookup("m", "low") is None


# -- models routed through litellm ------------------------------------------------------------


def test_configured_litellm_route_is_measured_and_served_through_litellm(store_path, default_suite):
    with measuring_upstream(default_suite) as upstream:
        route = {
            "name": "routed",
            "litellm_model": "openai/behind-litellm",
            "api_base": upstream.base_url,
            "api_key": "route-key",
        }
        settings = settings_for(
            f"http://127.0.0.1:{free_port()}/v1", store_path, models=[route], unknown_models="wait", wait_timeout_s=30
        )
        with running_proxy(settings) as proxy:
            raw = ask(proxy, model="routed", tools=TOOLS)
            assert raw.parse().choices[0].message.content == "agent answer"
            assert raw.headers["x-gatekeeper-profile"] == "measured"
            assert proxy.gk.lookup("routed").profile.provider == "litellm"
    assert {b["model"] for b in upstream.requests} == {"behind-litellm"}
    assert forwarded_tools(upstream) == ["read_file", "write_file", "execute_command"]
    assert upstream.headers[-1]["authorization"] == "Bearer route-key"


def test_a_non_json_upstream_error_is_put_in_the_openai_error_shape(store_path, default_suite):
    from scripted import ThreadedServer
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    async def bare_400(request):
        return Response(b"", status_code=400)

    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    with ThreadedServer(Starlette(routes=[Route("/v1/chat/completions", bare_400, methods=["POST"])])) as server:
        with running_proxy(settings_for(f"http://127.0.0.1:{server.port}/v1", store_path)) as proxy:
            with pytest.raises(openai.BadRequestError) as info:
                ask(proxy)
    assert info.value.body["message"] == "upstream answered HTTP 400: empty body"


def test_the_clients_request_id_is_echoed_but_not_forwarded(upstream, store_path, default_suite):
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        raw = proxy.client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "hi"}], extra_headers={"x-request-id": "agent-run-42"}
        )
    assert raw.headers["x-request-id"] == "agent-run-42"
    assert "x-request-id" not in upstream.headers[-1]


@pytest.mark.parametrize("key", ["@low", "m@"])
def test_admin_rejects_a_malformed_pair(upstream, store_path, key):
    with running_proxy(settings_for(upstream.base_url, store_path, admin_key="k")) as proxy:
        response = httpx.delete(f"{proxy.url}/admin/profiles/{key}", headers={"authorization": "Bearer k"})
    assert response.status_code == 400 and "MODEL@EFFORT" in response.json()["error"]["message"]


def test_a_corrupt_store_fails_closed(upstream, store_path, default_suite):
    seed_store(store_path, make_profile("m", Tier.LARGE, default_suite))
    store_path.write_bytes(store_path.read_bytes()[:-40])  # cut short, as by a crash mid-copy
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        raw = ask(proxy, tools=TOOLS)
    assert raw.headers["x-gatekeeper-tier"] == "small"
    agent = next(b for b in upstream.requests if b["messages"][0]["content"] == "hi")
    assert [t["function"]["name"] for t in agent["tools"]] == ["read_file"]


def test_new_upstream_settings_take_effect_without_a_restart(store_path, default_suite):
    """What a config reload does to `gk.settings`: the next request goes to the new upstream."""
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    with ScriptedServer() as first, ScriptedServer(lambda body: {"content": "second"}) as second:
        with running_proxy(settings_for(first.base_url, store_path)) as proxy:
            assert ask(proxy).parse().choices[0].message.content == "ok"
            config = store_path.with_name("gatekeeper.yaml")  # JSON is YAML
            config.write_text(json.dumps(settings_for(second.base_url, store_path).model_dump(mode="json")))
            proxy.gk.reload(config)
            assert ask(proxy).parse().choices[0].message.content == "second"
    assert len(first.requests) == 1 and len(second.requests) == 1


# -- one settings snapshot per request; upstream backoff headers ------------------------------


def test_a_reload_while_the_body_uploads_changes_nothing_for_that_request(upstream, store_path):
    """Issue 20: config A (`mx` pinned small, execute_command: medium) reloaded to B (`mx` pinned
    medium, execute_command: large) while the body uploads. Each config alone hides
    execute_command from `mx`; B's tier with A's rules would offer it. The request is decided by A
    throughout, the config in force when it arrived."""
    config = store_path.with_name("gatekeeper.yaml")

    def write(pin: str, rule: str) -> None:
        settings = settings_for(
            upstream.base_url, store_path, pins={"mx": pin}, tools={"required_tier": {"execute_command": rule}}
        )
        config.write_text(json.dumps(settings.model_dump(mode="json")))  # JSON is YAML

    write("small", "medium")
    gk = Gatekeeper.from_config(config)
    arrived, uploaded = threading.Event(), threading.Event()
    snapshot = gk.snapshot

    def taken():  # the request took its snapshot: it has arrived, its body has not
        arrived.set()
        return snapshot()

    gk.snapshot = taken
    body = json.dumps({"model": "mx", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}).encode()

    def upload():
        yield body[:16]
        assert uploaded.wait(20), "the test never released the rest of the body"
        yield body[16:]

    try:
        with ThreadedServer(create_app(gk)) as server, ThreadPoolExecutor(1) as pool:
            url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
            sent = pool.submit(httpx.post, url, content=upload(), headers={"content-type": "application/json"})
            assert arrived.wait(20), "the request never reached the proxy"
            write("medium", "large")
            gk.reload()
            assert gk.resolve("mx").tier is Tier.MEDIUM  # B is in force for the next request
            uploaded.set()
            response = sent.result(timeout=30)
    finally:
        gk.close()
    assert response.status_code == 200, response.text
    assert response.headers["x-gatekeeper-tier"] == "small"
    assert forwarded_tools(upstream) == ["read_file", "write_file"]


RATE_LIMITED = {"retry-after": "2", "x-ratelimit-remaining-requests": "0", "anthropic-ratelimit-tokens-remaining": "0"}


def _rate_limited_once(error_body: bytes, answer: bytes) -> Callable[[dict], RawAnswer]:
    answers = [RawAnswer(error_body, 429, headers=RATE_LIMITED | {"retry-after-ms": "10"}), RawAnswer(answer)]
    return lambda body: answers.pop(0) if len(answers) > 1 else answers[0]


@pytest.mark.parametrize("protocol", ["chat", "messages"])
def test_an_upstream_429_keeps_retry_after_and_the_rate_limit_headers(store_path, default_suite, protocol):
    error = json.dumps({"error": {"message": "slow down", "type": "rate_limit_error"}}).encode()
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    with RawUpstream(RawAnswer(error, 429, headers=RATE_LIMITED | {"set-cookie": "a=b"})) as upstream:
        with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
            with pytest.raises((openai.RateLimitError, anthropic.RateLimitError)) as info:
                if protocol == "chat":
                    ask(proxy)
                else:  # translated to chat: the chat-only upstream's error, in Anthropic's shape
                    anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0).messages.create(
                        model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
                    )
    headers = info.value.response.headers
    assert {name: headers.get(name) for name in RATE_LIMITED} == RATE_LIMITED
    assert "set-cookie" not in headers


def test_the_official_clients_retry_after_the_relayed_retry_after(store_path, default_suite):
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    error = json.dumps({"error": {"message": "slow down"}}).encode()
    text = json.dumps(chat_completion({"content": "after the wait"})).encode()
    with RawUpstream(_rate_limited_once(error, text)) as upstream:
        with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
            client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=1)
            raw = client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
    assert raw.parse().choices[0].message.content == "after the wait"
    assert raw.retries_taken == 1 and len(upstream.requests) == 2


def test_a_litellm_route_keeps_the_providers_retry_after_on_a_429(store_path, default_suite):
    error = json.dumps({"error": {"message": "slow down", "type": "rate_limit_error"}}).encode()
    seed_store(store_path, make_profile("routed", Tier.SMALL, default_suite))
    with RawUpstream(RawAnswer(error, 429, headers=RATE_LIMITED)) as provider:
        route = {"name": "routed", "litellm_model": "openai/behind", "api_base": provider.base_url, "api_key": "k"}
        settings = settings_for(f"http://127.0.0.1:{free_port()}/v1", store_path, models=[route])
        with running_proxy(settings) as proxy:
            with pytest.raises(openai.RateLimitError) as info:
                ask(proxy, model="routed")
    assert info.value.response.headers["retry-after"] == "2"
    assert info.value.response.headers["x-ratelimit-remaining-requests"] == "0"
