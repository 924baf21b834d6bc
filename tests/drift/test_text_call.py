"""A tool call written as text (`text_call`): found only when it names an offered tool."""

from __future__ import annotations

import json

import pytest

from gatekeeper.drift.sequential import cusums_for
from gatekeeper.drift.text_call import MAX_CHARS, TextCall, text_call
from gatekeeper.drift.window import DriftSettings, Fault, classify, observe
from gatekeeper.protocols.base import Call
from gatekeeper.rules.tiers import Tier

OFFERED = {"get_weather", "read_file"}
CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        'Let me check.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}',  # cut before the closing tag
        json.dumps(CALL),
        "  \n" + json.dumps(CALL, indent=2) + "\n",
        "```json\n" + json.dumps(CALL) + "\n```",
        "```\n" + json.dumps(CALL) + "\n```",
        '{"name": "get_weather", "parameters": {"city": "Paris"}}',  # Llama 3.x
        '{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}',  # arguments as a string
        '{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}',
        "[" + json.dumps(CALL) + "]",
    ],
)
def test_a_call_written_as_text_naming_an_offered_tool_is_found(text: str) -> None:
    found = text_call(text, OFFERED)
    assert found is not None and found.name == "get_weather"
    assert json.loads(found.arguments) == {"city": "Paris"}


@pytest.mark.parametrize(
    "text",
    [
        "I will use get_weather to look up Paris.",
        'Call it like {"name": "get_weather", "arguments": {"city": "Paris"}} and you get the forecast.',
        'Here is an example:\n```json\n{"name": "get_weather", "arguments": {}}\n```\nTry it.',
        json.dumps({"name": "send_email", "arguments": {"to": "x"}}),  # a tool not offered
        "<tool_call>" + json.dumps({"name": "send_email", "arguments": {}}) + "</tool_call>",
        json.dumps({"name": "get_weather"}),  # no arguments: a record, not a call
        json.dumps({"name": "get_weather", "arguments": 5}),
        json.dumps({"city": "Paris", "forecast": {"name": "get_weather"}}),  # nested, not a call
        json.dumps({"result": CALL}),
        "<tool_call>not json</tool_call>",
        "{not json",
        "",
    ],
)
def test_prose_json_and_other_tools_are_not_a_text_call(text: str) -> None:
    assert text_call(text, OFFERED) is None


def test_no_tools_offered_means_no_text_call() -> None:
    assert text_call(json.dumps(CALL), set()) is None


def test_an_answer_longer_than_the_cap_is_not_parsed() -> None:
    text = json.dumps({"name": "get_weather", "arguments": {"pad": "x" * MAX_CHARS}})
    assert text_call(text, OFFERED) is None


def test_a_text_call_is_its_own_fault_and_keeps_only_the_arguments_shape() -> None:
    found = text_call(json.dumps({"name": "read_file", "arguments": {"path": "/etc/secret"}}), OFFERED)
    assert found == TextCall("read_file", json.dumps({"path": "/etc/secret"}))
    call = Call(found.name, found.arguments, True, text=True)
    assert classify(call, {"read_file": None}) is Fault.TEXT_CALL
    seen = observe(call, {"read_file": None}, at=0.0)
    assert seen.fault is Fault.TEXT_CALL and seen.arguments is None
    assert seen.shape["keys"] == {"path": "string(11)"}
    assert "/etc/secret" not in json.dumps(seen.example())


def test_text_call_is_judged_only_where_an_operator_sets_a_ceiling() -> None:
    default = DriftSettings()
    assert all(default.ceilings_for(tier).of(Fault.TEXT_CALL) is None for tier in Tier)
    assert Fault.TEXT_CALL not in cusums_for(default.ceilings_for(Tier.LARGE), default)
    judged = DriftSettings.model_validate({"ceilings": {"large": {"text_call": 0.02}}})
    assert judged.ceilings_for(Tier.LARGE).of(Fault.TEXT_CALL) == 0.02
    assert judged.ceilings_for(Tier.LARGE).not_offered == 0.02  # the other defaults kept
    assert Fault.TEXT_CALL in cusums_for(judged.ceilings_for(Tier.LARGE), judged)
