"""Stream enforcement event by event (the proxy tests cover it end to end)."""

from __future__ import annotations

import json

import structlog

from gatekeeper.streaming import StreamEnforcer


def event(delta: dict, finish: str | None = None) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).encode() + b"\n\n"


def parsed(out: bytes | None) -> dict | None:
    return None if out is None else json.loads(out[len(b"data: "):])


def enforcer(*allowed: str) -> StreamEnforcer:
    return StreamEnforcer(set(allowed), {"request_id": "t"}, structlog.get_logger())


def test_events_without_tool_calls_pass_as_the_same_bytes():
    raw = event({"content": "hello"})
    assert enforcer().filter_event(raw) is raw


def test_allowed_calls_are_renumbered_after_a_blocked_one():
    e = enforcer("read")
    assert e.filter_event(event({"tool_calls": [{"index": 0, "function": {"name": "rm", "arguments": ""}}]})) is None
    out = parsed(e.filter_event(event({"tool_calls": [{"index": 1, "function": {"name": "read", "arguments": ""}}]})))
    assert out["choices"][0]["delta"]["tool_calls"][0]["index"] == 0
    assert e.filter_event(event({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]})) is None
    assert e.blocked == ["rm"]


def test_legacy_function_call_deltas_follow_the_first_decision():
    e = enforcer("read")
    assert e.filter_event(event({"function_call": {"name": "rm", "arguments": ""}})) is None
    assert e.filter_event(event({"function_call": {"arguments": "{\"path\": \"/\"}"}})) is None
    assert parsed(e.filter_event(event({}, "function_call")))["choices"][0]["finish_reason"] == "stop"
