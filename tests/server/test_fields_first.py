"""A request refused for its fields is refused before its tier is resolved: it never starts a
measurement (core/gate.py `check_fields`), through the proxy, in process and through the SDK step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
from conftest import claude, measuring_upstream, running_proxy, settings_for, tool, wait_until
from structlog.testing import capture_logs

from gatekeeper import Gatekeeper
from gatekeeper.errors import RequestInvalid
from gatekeeper.inprocess.wrap import gate_body

HI = [{"role": "user", "content": "hi"}]


def _chat(proxy: Any, **extra: Any) -> Any:
    return proxy.client.chat.completions.create(model="new-model", messages=HI, tools=[tool("read_file")], **extra)


def _responses(proxy: Any, **extra: Any) -> Any:
    return proxy.client.responses.create(model="new-model", input="hi", **extra)


def _messages(proxy: Any, **extra: Any) -> Any:
    return claude(proxy).messages.create(model="new-model", max_tokens=16, messages=HI, **extra)


SENDS: dict[str, Callable[..., Any]] = {"chat": _chat, "responses": _responses, "messages": _messages}
REFUSED = (openai.BadRequestError, anthropic.BadRequestError)


@pytest.mark.parametrize("protocol", sorted(SENDS))
def test_a_request_refused_for_an_unknown_field_starts_no_measurement(store_path, default_suite, protocol):
    send = SENDS[protocol]
    with measuring_upstream(default_suite) as upstream:
        with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
            with pytest.raises(REFUSED) as info:
                send(proxy, extra_body={"smuggled_field": 1})
            assert info.value.status_code == 400 and "smuggled_field" in str(info.value)
            assert proxy.gk.progress() == []
            assert upstream.requests == []
            # The same request without the field is served, and starts the measurement the other did not.
            send(proxy)
            wait_until(lambda: proxy.gk.progress(), "the lazy measurement to start")
            assert upstream.requests != []


def test_a_dropped_field_is_dropped_and_logged_once(store_path, default_suite):
    with measuring_upstream(default_suite) as upstream:
        settings = settings_for(
            upstream.base_url, store_path, upstream={"base_url": upstream.base_url, "unknown_fields": "drop"}
        )
        with running_proxy(settings) as proxy, capture_logs() as logs:
            _chat(proxy, extra_body={"smuggled_field": 1})
    agent = next(b for b in upstream.requests if b["messages"] == HI)
    assert "smuggled_field" not in agent
    assert [e["field"] for e in logs if e["event"] == "request_field_dropped"] == ["smuggled_field"]


def test_gatekeeper_gate_refuses_an_unknown_field_before_resolving(upstream, store_path):
    with Gatekeeper(settings_for(upstream.base_url, store_path)) as gk:
        with pytest.raises(RequestInvalid, match="smuggled_field"):
            gk.gate({"model": "new-model", "messages": HI, "smuggled_field": 1}, "new-model")
        assert gk.progress() == []
        gk.gate({"model": "new-model", "messages": HI}, "new-model")
        assert [p.key for p in gk.progress()] == ["new-model@default"]


@pytest.mark.parametrize(
    ("protocol", "body"),
    [
        ("chat", {"model": "new-model", "messages": HI}),
        ("responses", {"model": "new-model", "input": "hi"}),
        ("messages", {"model": "new-model", "max_tokens": 16, "messages": HI}),
    ],
)
def test_the_in_process_request_step_refuses_before_resolving(upstream, store_path, protocol, body):
    with Gatekeeper(settings_for(upstream.base_url, store_path)) as gk:
        with pytest.raises(RequestInvalid, match="smuggled_field"):
            gate_body(gk, protocol, body | {"smuggled_field": 1})
        assert gk.progress() == []
        gate_body(gk, protocol, dict(body))
        assert [p.key for p in gk.progress()] == ["new-model@default"]
