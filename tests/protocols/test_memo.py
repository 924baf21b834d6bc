"""The memos of what codecs derive from a request's tool lists (gatekeeper/protocols/memo.py):
keyed by the exact JSON, sharing no object with a request, never remembering a failed or
changed check, and bounded."""

from __future__ import annotations

import enum
from typing import Any

import orjson
import pytest

from gatekeeper.errors import RequestInvalid
from gatekeeper.protocols import table as protocols
from gatekeeper.protocols.memo import JsonChecked, JsonMemo
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolPolicy


def counting(calls: list[Any]) -> JsonMemo[list[Any]]:
    def derive(values: Any) -> list[Any]:
        calls.append(values)
        return [values]

    return JsonMemo(derive)


def test_the_same_json_is_derived_once() -> None:
    calls: list[Any] = []
    memo = counting(calls)
    first = memo([{"name": "read_file"}])
    assert memo([{"name": "read_file"}]) is first
    assert len(calls) == 1


def test_other_json_is_derived_again() -> None:
    calls: list[Any] = []
    memo = counting(calls)
    memo([{"name": "read_file"}])
    memo([{"name": "read_file", "x": 1}])
    memo([{"name": "read_file", "x": 1.0}])  # another JSON text: another entry
    assert len(calls) == 3


def test_an_entry_shares_no_object_with_the_request() -> None:
    memo: JsonMemo[Any] = JsonMemo(lambda values: values)
    tools = [{"name": "read_file", "parameters": {"type": "object"}}]
    derived = memo(tools)
    assert derived == tools and derived is not tools and derived[0]["parameters"] is not tools[0]["parameters"]
    tools[0]["parameters"]["type"] = "string"  # a later change to the request's body, in place
    assert memo([{"name": "read_file", "parameters": {"type": "object"}}])[0]["parameters"] == {"type": "object"}


def test_values_that_are_not_plain_json_are_derived_uncached() -> None:
    class Named(str):
        pass

    calls: list[Any] = []
    memo = counting(calls)
    for _ in range(2):
        memo([{"name": Named("read_file")}])
        memo([{"names": {"a", "b"}}])
    assert len(calls) == 4


def test_the_memo_is_bounded_by_the_bytes_of_its_keys() -> None:
    memo: JsonMemo[Any] = JsonMemo(lambda values: values, maxbytes=1000, largest=100)
    for i in range(200):
        memo([i, "x" * 20])
    assert 0 < memo._cache.currsize <= 1000
    kept = [i for i in range(200) if memo._cache.get(orjson.dumps([i, "x" * 20])) is not None]
    assert kept == list(range(200 - len(kept), 200))  # the first stored went first
    calls: list[Any] = []
    big = counting(calls)
    big._largest = 10
    big(["a long value, above the largest key"])
    big(["a long value, above the largest key"])
    assert len(calls) == 2


def check_names(tools: list[Any], mode: str, checks: list[Any]) -> None:
    checks.append(tools)
    for tool in tools:
        if "bad" in tool:
            raise RequestInvalid("bad")
        if mode == "drop":
            tool.pop("unknown", None)


def checked(memo: JsonChecked, tools: list[Any], mode: str, checks: list[Any]) -> None:
    key = memo.key(tools, mode)
    if not memo.passed(key, tools):
        check_names(tools, mode, checks)
        memo.remember(key, tools, mode)


def test_values_that_passed_are_not_checked_again() -> None:
    memo, checks = JsonChecked(), []
    checked(memo, [{"name": "a"}], "refuse", checks)
    checked(memo, [{"name": "a"}], "refuse", checks)
    assert len(checks) == 1


def test_what_passed_is_a_private_copy_a_later_change_to_the_values_does_not_reach() -> None:
    memo, checks = JsonChecked(), []
    tools = [{"name": "a"}]
    checked(memo, tools, "refuse", checks)
    key = memo.key([{"name": "a"}], "refuse")
    tools[0]["name"] = "b"  # the first request's own list, changed after it passed
    assert not memo.passed(key, tools)
    assert memo.passed(key, [{"name": "a"}])
    assert len(checks) == 1


def test_the_mode_is_part_of_the_key() -> None:
    memo, checks = JsonChecked(), []
    checked(memo, [{"name": "a"}], "refuse", checks)
    checked(memo, [{"name": "a"}], "drop", checks)
    assert len(checks) == 2


def test_a_check_that_raised_is_not_remembered() -> None:
    memo, checks = JsonChecked(), []
    for _ in range(2):
        with pytest.raises(RequestInvalid):
            checked(memo, [{"bad": 1}], "refuse", checks)
    assert len(checks) == 2


def test_a_check_that_changed_its_values_is_not_remembered() -> None:
    memo, checks = JsonChecked(), []
    for _ in range(2):
        tools = [{"name": "a", "unknown": 1}]
        checked(memo, tools, "drop", checks)
        assert tools == [{"name": "a"}]  # dropped every time, as without the memo
    assert len(checks) == 2


class Kind(enum.Enum):
    FUNCTION = "function"


def function_tools(kind: Any) -> list[dict[str, Any]]:
    return [{"type": kind, "name": name, "parameters": {"type": "object"}} for name in ("read_file", "execute_command")]


@pytest.mark.parametrize("protocol", ["responses", "messages"])
def test_a_tool_list_checked_before_is_still_gated_by_what_it_is(protocol: str) -> None:
    # The same JSON bytes, but a type that is not the string it is written as (an in-process
    # caller's Enum): its own check runs again, and refuses it as it would without the memo.
    codec = protocols.codec(protocol)
    assert codec is not None
    policy = ToolPolicy({"execute_command": Tier.LARGE})
    plain = "function" if protocol == "responses" else "custom"

    def body(kind: Any) -> dict[str, Any]:
        tools = function_tools(kind)
        if protocol == "messages":
            tools = [{"type": t["type"], "name": t["name"], "input_schema": t["parameters"]} for t in tools]
            return {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], "tools": tools}
        return {"model": "m", "input": "hi", "tools": tools}

    for _ in range(2):  # the second time from the memo
        gated = body(plain)
        assert codec.gate(gated, Tier.SMALL, policy).hidden == ["execute_command"]
        assert [t["name"] for t in gated["tools"]] == ["read_file"]
    enum_kind = Kind.FUNCTION if protocol == "responses" else enum.Enum("K", {"CUSTOM": "custom"}).CUSTOM
    with pytest.raises(RequestInvalid):
        codec.gate(body(enum_kind), Tier.SMALL, policy)


@pytest.mark.parametrize(
    "lookalike",
    [
        [{"name": "a", "required": ("x",)}],  # a tuple, written as the array
        [{"name": Kind.FUNCTION, "required": ["x"]}],  # an Enum, written as its value
        [{"name": "a", "required": ["x"], "limit": float("nan")}],  # NaN, written as null
    ],
)
def test_values_written_as_the_same_json_but_not_equal_to_it_are_checked_again(lookalike: list[Any]) -> None:
    memo, checks = JsonChecked(), []
    plain: list[Any] = [{"name": "a", "required": ["x"]}]
    if "limit" in lookalike[0]:
        plain[0]["limit"] = None
    if isinstance(lookalike[0]["name"], Kind):
        plain[0]["name"] = "function"
    checked(memo, plain, "refuse", checks)
    assert memo.key(lookalike, "refuse") == memo.key(plain, "refuse")  # the same bytes
    checked(memo, lookalike, "refuse", checks)
    assert len(checks) == 2
