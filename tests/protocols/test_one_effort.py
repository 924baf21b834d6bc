"""One effort per request (issue 32), through the real proxy on a real port, sent by the official
clients (openai for Responses, anthropic for Messages) to real scripted upstreams; what the
upstream received is the evidence.

What was wrong, and what happens now:
- Responses: a `configuration_update` input item sets the effort the model runs at from there on,
  but the tier was decided on `reasoning.effort` alone: an update to `minimal` beside `xhigh` got
  xhigh's tier and tools. Now the last update is the request's effort, and `reasoning.effort` is
  sent saying the same, so an upstream that ignores update items runs at it too; translated to
  chat it is the `reasoning_effort` sent. An update that says no effort is refused, and so is one
  the upstream would keep (stored, or in a conversation) to set the effort of later requests.
- Messages: `output_config.effort: high` beside a thinking budget that reads as low (or beside
  disabled thinking) got high's tier. Now the two must agree, or the request is a 400 naming both.
- Routing rewrote only the top-level effort field: a Responses request whose update still said
  low was escalated with medium's tools, and a Messages budget kept reading low beside the new
  `output_config.effort`. Now the budget moves with the effort, and a route the update
  contradicts is not taken.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
import structlog
import structlog.testing
from conftest import Proxy, make_profile, running_proxy, seed_store, settings_for
from upstreams import NativeServer

from gatekeeper.observe.logs import merge_context
from gatekeeper.rules.tiers import Tier

HI = {"role": "user", "content": "hi"}
HIDDEN = "execute_command"  # large under settings_for's rules; write_file is medium
STREAMED = [False, True]


def update(effort: str) -> dict[str, Any]:
    return {"type": "configuration_update", "reasoning": {"effort": effort}}


def responses_tool(name: str) -> dict[str, Any]:
    return {"type": "function", "name": name, "parameters": {"type": "object"}}


def messages_tool(name: str) -> dict[str, Any]:
    return {"name": name, "input_schema": {"type": "object"}}


@pytest.fixture
def upstream() -> Iterator[NativeServer]:
    with NativeServer(lambda body: {"content": "ok"}) as server:
        yield server


def effort_proxy(upstream: NativeServer, store_path, suite, protocols: list[str], **changes: Any):
    """`m`: small at minimal and low, medium at medium, large at high and xhigh; nothing measured
    lazily, so only the requests a test sends reach the upstream."""
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, suite, effort="minimal"),
        make_profile("m", Tier.SMALL, suite, effort="low"),
        make_profile("m", Tier.MEDIUM, suite, effort="medium"),
        make_profile("m", Tier.LARGE, suite, effort="high"),
        make_profile("m", Tier.LARGE, suite, effort="xhigh"),
    )
    upstream_settings = {"base_url": upstream.base_url, "api_key": "upstream-key", "protocols": protocols}
    settings = settings_for(upstream.base_url, store_path, upstream=upstream_settings, lazy={"allow": []}, **changes)
    return running_proxy(settings)


def respond(proxy: Proxy, stream: bool, **request: Any) -> Any:
    """A Responses request, not stored (as clients that send update items send them)."""
    raw = proxy.client.responses.with_raw_response.create(model="m", stream=stream, **request | {"store": False})
    list(raw.parse()) if stream else raw.parse()
    return raw.headers


# -- Responses: configuration_update items ---------------------------------------------------------


@pytest.mark.parametrize("stream", STREAMED)
def test_an_update_to_a_lower_effort_is_the_effort_the_tier_is_decided_at(upstream, store_path, default_suite, stream):
    with (
        effort_proxy(upstream, store_path, default_suite, ["responses"]) as proxy,
        structlog.testing.capture_logs(processors=[merge_context]) as logs,
    ):
        headers = respond(
            proxy,
            stream,
            input=[HI, update("minimal")],
            reasoning={"effort": "xhigh", "summary": "auto"},
            tools=[responses_tool(HIDDEN)],
        )
    sent = upstream.responses_requests[-1]
    assert headers["x-gatekeeper-tier"] == "small"
    assert "tools" not in sent
    # Whoever reads the effort, the upstream runs at minimal: the item and the field agree.
    assert sent["reasoning"] == {"effort": "minimal", "summary": "auto"}
    assert sent["input"][-1] == update("minimal")
    (line,) = [line for line in logs if line["event"] == "effort_set_from_configuration_update"]
    assert (line["stated"], line["effort"], line["model"]) == ("xhigh", "minimal", "m")


def test_an_update_to_a_higher_effort_is_served_at_it_and_sent_as_one_effort(upstream, store_path, default_suite):
    # The documented use: a stable request-level baseline (the prompt cache), an update for one turn.
    with effort_proxy(upstream, store_path, default_suite, ["responses"]) as proxy:
        headers = respond(
            proxy, False, input=[update("xhigh"), HI], reasoning={"effort": "low"}, tools=[responses_tool(HIDDEN)]
        )
    sent = upstream.responses_requests[-1]
    assert headers["x-gatekeeper-tier"] == "large"
    assert [t["name"] for t in sent["tools"]] == [HIDDEN]
    assert sent["reasoning"] == {"effort": "xhigh"}


def test_a_translated_update_is_the_chat_effort_sent(upstream, store_path, default_suite):
    with effort_proxy(upstream, store_path, default_suite, ["chat"]) as proxy:
        headers = respond(
            proxy, False, input=[HI, update("minimal")], reasoning={"effort": "xhigh"}, tools=[responses_tool(HIDDEN)]
        )
    sent = upstream.requests[-1]
    assert headers["x-gatekeeper-tier"] == "small"
    assert sent["reasoning_effort"] == "minimal" and "tools" not in sent
    assert sent["messages"] == [{"role": "user", "content": "hi"}]


def test_an_update_that_says_no_effort_is_refused(upstream, store_path, default_suite):
    with effort_proxy(upstream, store_path, default_suite, ["responses"]) as proxy:
        with pytest.raises(openai.BadRequestError, match=r"input\[1\]\.reasoning\.effort"):
            respond(
                proxy,
                False,
                input=[HI, {"type": "configuration_update", "reasoning": {}}],
                reasoning={"effort": "xhigh"},
            )
    assert upstream.received() == []


@pytest.mark.parametrize(
    "kept", [{"store": True}, {"store": False, "conversation": "conv_1"}], ids=["store", "conversation"]
)
def test_an_update_the_upstream_would_keep_is_refused(upstream, store_path, default_suite, kept):
    # Kept, it would set the effort of a later request chained to it, unseen by gatekeeper there.
    with effort_proxy(upstream, store_path, default_suite, ["responses"]) as proxy:
        with pytest.raises(openai.BadRequestError, match=r"needs 'store': false"):
            proxy.client.responses.create(
                model="m", input=[HI, update("minimal")], reasoning={"effort": "xhigh"}, **kept
            )
    assert upstream.received() == []


def test_routing_does_not_escalate_past_an_update(upstream, store_path, default_suite):
    with effort_proxy(upstream, store_path, default_suite, ["responses"], routing={}) as proxy:
        # Without an update, low's request for write_file is escalated to medium ...
        routed = respond(proxy, False, input=[HI], reasoning={"effort": "low"}, tools=[responses_tool("write_file")])
        assert routed["x-gatekeeper-routed"] == "m@medium"
        assert upstream.responses_requests[-1]["reasoning"] == {"effort": "medium"}
        # ... but an update saying low would keep the model at low with medium's tools: not routed.
        kept = respond(
            proxy, False, input=[HI, update("low")], reasoning={"effort": "low"}, tools=[responses_tool("write_file")]
        )
    sent = upstream.responses_requests[-1]
    assert "x-gatekeeper-routed" not in kept and kept["x-gatekeeper-tier"] == "small"
    assert sent["reasoning"] == {"effort": "low"} and "tools" not in sent


# -- Messages: output_config.effort and thinking --------------------------------------------------


@pytest.mark.parametrize("protocols", [["messages"], ["chat"]], ids=["native", "translated"])
@pytest.mark.parametrize(
    "thinking, member",
    [
        ({"type": "enabled", "budget_tokens": 1024}, r"'thinking\.budget_tokens' 1024 \(effort 'low'\)"),
        ({"type": "disabled"}, r"'thinking\.type' disabled"),
    ],
    ids=["budget", "disabled"],
)
def test_an_effort_beside_thinking_that_says_another_is_refused(
    upstream, store_path, default_suite, protocols, thinking, member
):
    with effort_proxy(upstream, store_path, default_suite, protocols) as proxy:
        claude = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
        with pytest.raises(anthropic.BadRequestError, match=rf"'output_config\.effort' 'high' contradicts {member}"):
            claude.messages.create(
                model="m",
                max_tokens=4096,
                messages=[HI],
                tools=[messages_tool(HIDDEN)],
                output_config={"effort": "high"},
                thinking=thinking,
            )
    assert upstream.received() == []


@pytest.mark.parametrize("stream", STREAMED)
def test_an_effort_and_a_budget_that_agree_are_one_effort(upstream, store_path, default_suite, stream):
    with effort_proxy(upstream, store_path, default_suite, ["messages"]) as proxy:
        claude = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
        thinking = {"type": "enabled", "budget_tokens": 16384}  # >= 16384: high
        raw = claude.messages.with_raw_response.create(
            model="m",
            max_tokens=20000,  # the SDK wants a stream above ~21k
            messages=[HI],
            tools=[messages_tool(HIDDEN)],
            output_config={"effort": "high"},
            thinking=thinking,
            stream=stream,
        )
        list(raw.parse()) if stream else raw.parse()
    sent = upstream.messages_requests[-1]
    assert raw.headers["x-gatekeeper-tier"] == "large"
    assert [t["name"] for t in sent["tools"]] == [HIDDEN]
    assert sent["thinking"] == thinking and sent["output_config"] == {"effort": "high"}


def test_routing_moves_the_budget_with_the_effort(upstream, store_path, default_suite):
    with effort_proxy(upstream, store_path, default_suite, ["messages"], routing={}) as proxy:
        claude = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
        raw = claude.messages.with_raw_response.create(
            model="m",
            max_tokens=8000,
            messages=[HI],
            tools=[messages_tool("write_file")],
            thinking={"type": "enabled", "budget_tokens": 2000},  # low: small, and write_file is medium
        )
        raw.parse()
    sent = upstream.messages_requests[-1]
    assert raw.headers["x-gatekeeper-routed"] == "m@medium" and raw.headers["x-gatekeeper-tier"] == "medium"
    assert sent["output_config"] == {"effort": "medium"}
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 4096}  # the smallest medium budget
    assert [t["name"] for t in sent["tools"]] == ["write_file"]
