"""How a routed request is rewritten in each protocol's own fields (gatekeeper.protocols.reroute)."""

from __future__ import annotations

from gatekeeper.protocols import table
from gatekeeper.protocols.reroute import rerouted

CHAT, RESPONSES, MESSAGES = (table.codec(n) for n in ("chat", "responses", "messages"))


def test_chat_carries_the_effort_in_reasoning_effort():
    body = {"model": "m", "messages": [], "reasoning_effort": "low"}
    out = rerouted(CHAT, body, "m", "high")
    assert out == {"model": "m", "messages": [], "reasoning_effort": "high"}
    assert body["reasoning_effort"] == "low"  # the client's body is not changed


def test_chat_at_default_sends_no_effort_and_the_other_model():
    out = rerouted(CHAT, {"model": "m", "messages": [], "reasoning_effort": "low"}, "big", "default")
    assert out == {"model": "big", "messages": []}


def test_responses_carries_it_in_reasoning_effort_keeping_the_summary():
    body = {"model": "m", "input": "hi", "reasoning": {"effort": "low", "summary": "auto"}}
    assert rerouted(RESPONSES, body, "m", "xhigh")["reasoning"] == {"effort": "xhigh", "summary": "auto"}
    assert "reasoning" not in rerouted(
        RESPONSES, {"model": "m", "input": "hi", "reasoning": {"effort": "low"}}, "b", "default"
    )


def test_messages_carries_it_in_output_config_effort():
    body = {"model": "m", "max_tokens": 10, "messages": [], "output_config": {"effort": "low"}}
    assert rerouted(MESSAGES, body, "m", "high")["output_config"] == {"effort": "high"}


def test_messages_with_a_thinking_budget_cannot_go_to_default():
    # Without output_config.effort the budget still reads as an effort: not the routed pair.
    body = {"model": "m", "max_tokens": 9000, "messages": [], "thinking": {"type": "enabled", "budget_tokens": 2048}}
    assert rerouted(MESSAGES, body, "big", "default") is None
    # The budget moves with the effort (one effort per request): to the smallest that reads as it,
    # and no route where that budget is not below max_tokens.
    medium = rerouted(MESSAGES, body, "m", "medium")
    assert medium["output_config"] == {"effort": "medium"}
    assert medium["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}  # the client's body untouched
    assert rerouted(MESSAGES, body, "m", "high") is None  # 16384 >= max_tokens 9000
    assert rerouted(MESSAGES, body, "m", "xhigh") is None  # no budget reads as xhigh
