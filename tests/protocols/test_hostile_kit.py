"""What a hostile client got through on the main of 2026-12-01 (the red-team run for issue 20), each
through the real proxy on a real port, sent by the official client; what the upstream received
is the evidence.

- A chat request's `chat_template_kwargs` can set the effort the server really runs at (vLLM
  merges them over the top-level fields: `reasoning_effort` for gpt-oss templates,
  `enable_thinking` / `thinking` false for Qwen3 / DeepSeek), so a request gated at the tier of
  `reasoning_effort: high` ran at low effort, or without reasoning, with the high tier's tools.
- The tool-free endpoints (/v1/completions, /v1/embeddings) refused only the tool fields by name:
  `extra_body`, `messages` or `Tools` were forwarded to an upstream that may merge them into a
  chat call (LiteLLM's text completion does).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest
from conftest import Proxy, make_profile, running_proxy, seed_store, settings_for, tool
from scripted import RawAnswer, RawUpstream, ScriptedServer, chat_completion, free_port
from serving import served

from gatekeeper.observe.redact import redact, redact_url
from gatekeeper.protocols.chat.codec import ChatCodec
from gatekeeper.protocols.reroute import rerouted
from gatekeeper.rules.tiers import Tier

HI = [{"role": "user", "content": "hi"}]
HIDDEN = "execute_command"  # large under settings_for's rules


@pytest.fixture
def upstream() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        yield server


@pytest.fixture
def proxy(upstream, store_path, default_suite) -> Iterator[Proxy]:
    """`m` is large at its default and at `high`, small at `low`; `none` is unmeasured."""
    seed_store(
        store_path,
        make_profile("m", Tier.LARGE, default_suite),
        make_profile("m", Tier.LARGE, default_suite, effort="high"),
        make_profile("m", Tier.SMALL, default_suite, effort="low"),
    )
    with running_proxy(settings_for(upstream.base_url, store_path, lazy={"allow": []})) as running:
        yield running


def offered(upstream: ScriptedServer) -> list[str]:
    return [t["function"]["name"] for t in upstream.requests[-1].get("tools") or []]


# -- the effort a chat template runs at ------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [{"reasoning_effort": "low"}, {"enable_thinking": False}, {"thinking": False}],
    ids=["reasoning_effort", "enable_thinking", "thinking"],
)
def test_a_template_effort_that_contradicts_reasoning_effort_is_refused(proxy, upstream, kwargs):
    with pytest.raises(openai.BadRequestError, match=r"chat_template_kwargs\..* contradicts 'reasoning_effort'"):
        proxy.client.chat.completions.create(
            model="m",
            messages=HI,
            tools=[tool(HIDDEN)],
            reasoning_effort="high",
            extra_body={"chat_template_kwargs": kwargs},
        )
    assert upstream.requests == []


def test_a_template_effort_is_the_request_s_effort(proxy, upstream):
    # m's default is large, m@low small: the run at low effort gets low's tier.
    answer = proxy.client.chat.completions.with_raw_response.create(
        model="m", messages=HI, tools=[tool(HIDDEN)], extra_body={"chat_template_kwargs": {"reasoning_effort": "low"}}
    )
    assert answer.headers["x-gatekeeper-tier"] == "small"
    assert offered(upstream) == []


def test_reasoning_turned_off_in_the_template_is_effort_none(proxy, upstream):
    # m@none is unmeasured (and lazy.allow admits no name): the unknown tier, never m's large.
    answer = proxy.client.chat.completions.with_raw_response.create(
        model="m", messages=HI, tools=[tool(HIDDEN)], extra_body={"chat_template_kwargs": {"enable_thinking": False}}
    )
    assert answer.headers["x-gatekeeper-tier"] == "small"
    assert offered(upstream) == []
    # Agreeing knobs are one effort: allowed, and judged at it.
    proxy.client.chat.completions.create(
        model="m",
        messages=HI,
        tools=[tool(HIDDEN)],
        reasoning_effort="high",
        extra_body={"chat_template_kwargs": {"reasoning_effort": "high", "enable_thinking": True}},
    )
    assert offered(upstream) == [HIDDEN]


def test_routing_does_not_escalate_past_a_template_effort():
    body = {"model": "m", "messages": HI, "chat_template_kwargs": {"reasoning_effort": "low"}}
    assert rerouted(ChatCodec(), body, "m", "high") is None  # would run at low with high's tools
    assert rerouted(ChatCodec(), body, "m", "low") is not None


# -- the tool-free endpoints: an allowlist too -------------------------------------------------------


@pytest.mark.parametrize(
    "smuggled",
    [
        {"extra_body": {"tools": [tool(HIDDEN)]}},
        {"messages": [{"role": "user", "content": "x"}]},
        {"Tools": [tool(HIDDEN)]},
    ],
    ids=["extra_body", "messages", "Tools"],
)
def test_tool_free_endpoints_refuse_fields_they_do_not_know(proxy, upstream, smuggled):
    field = next(iter(smuggled))
    with pytest.raises(openai.BadRequestError, match=f"'{field}' is not a field"):
        proxy.client.completions.create(model="m", prompt="hi", extra_body=smuggled)
    with pytest.raises(openai.BadRequestError, match=f"'{field}' is not a field"):
        proxy.client.embeddings.create(model="m", input="hi", extra_body=smuggled)
    assert upstream.requests == []


# -- what a hostile upstream puts in a response header ----------------------------------------------


def test_the_blocked_calls_header_stays_small_whatever_the_upstream_names(store_path, default_suite):
    # A hostile upstream chose the names (and how many): 40 calls of 3000 non-ASCII characters
    # were a 700 KB header, more than Node's http client reads (16 KB).
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "é" * 3000 + str(i), "arguments": "{}"}}
        for i in range(40)
    ]
    answer = RawAnswer(json.dumps(chat_completion({"tool_calls": calls}, "tool_calls")).encode())
    with RawUpstream(answer) as upstream:
        with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
            raw = proxy.client.chat.completions.with_raw_response.create(
                model="m", messages=HI, tools=[tool("read_file")]
            )
    header = raw.headers["x-gatekeeper-blocked-calls"]
    assert len(header) < 8 * 1024 and header.endswith(",(+24)")  # 16 names, each at most 64 characters encoded
    assert header.split(",")[0] == "%C3%A9" * 64
    assert raw.parse().choices[0].message.tool_calls is None


# -- secrets in a URL's query -------------------------------------------------------------------------


def test_a_redis_password_in_the_url_query_never_reaches_a_log_line_or_an_error_body(upstream, tmp_path):
    # redis-py takes `?password=` (the documented form for a unix socket); only user info was redacted.
    password = "s3cret-Query-pw"
    config = f"""
upstream: {{base_url: "{upstream.base_url}", api_key: upstream-key}}
store: "redis://127.0.0.1:{free_port()}/0?password={password}"
admin_key: admin-secret
"""
    with served(config, tmp_path) as proxy:
        admin = {"authorization": "Bearer admin-secret"}
        refused = httpx.delete(proxy.url + "/admin/profiles/m@default", headers=admin, timeout=30)
        assert refused.status_code == 503
        assert password not in refused.text and "redis" not in refused.text  # where the store is: the log's
    log = proxy.log_text()
    assert "redis_unavailable" in log and "?password=***" in log
    assert password not in log


def test_redaction_hides_credentials_in_a_query():
    assert redact_url("unix:///run/redis.sock?db=0&password=pw") == "unix:///run/redis.sock?db=0&password=***"
    assert redact("GET https://h/v1?key=AIza-secret&alt=json failed") == "GET https://h/v1?key=***&alt=json failed"
    assert redact("at redis://:pw@h/0?Password=pw2") == "at redis://***@h/0?Password=***"
    assert (
        redact_url("http://127.0.0.1:8080/v1?api-version=2024-10-01")
        == "http://127.0.0.1:8080/v1?api-version=2024-10-01"
    )


# -- an upstream URL with user info ------------------------------------------------------------------


def test_an_upstream_url_with_user_info_serves_and_never_shows_it(store_path, default_suite):
    # aiohttp refused a URL with user info next to an Authorization header: every model call was a
    # 500 (the client's key, or upstream.api_key, is always such a header).
    answer = RawAnswer(json.dumps(chat_completion({"content": "ok"})).encode())
    with RawUpstream(answer) as upstream:
        url = upstream.base_url.replace("http://", "http://op:s3cr%40t@")
        seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
        with running_proxy(settings_for(url, store_path, upstream={"base_url": url})) as proxy:
            assert proxy.client.chat.completions.create(model="m", messages=HI).choices[0].message.content == "ok"
            assert (
                httpx.post(proxy.url + "/v1/chat/completions", json={"model": "m", "messages": HI}).status_code == 200
            )
    assert upstream.headers[0]["authorization"] == "Bearer client-key"  # the client's own key
    assert upstream.headers[1]["authorization"] == "Basic b3A6czNjckB0"  # none given: the URL's, op:s3cr@t
