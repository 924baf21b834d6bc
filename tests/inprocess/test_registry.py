"""ToolRegistry: the in-process front end, over a real Gatekeeper and (when measuring) real HTTP."""

from __future__ import annotations

import asyncio
import enum
import threading
from typing import Annotated, Literal, Optional

import pytest
from conftest import measuring_upstream, names, settings_for, tool, wait_until
from pydantic import BaseModel, Field

from gatekeeper import Gatekeeper, NotMeasured, ToolArgumentsInvalid, ToolNotAllowed, ToolRegistry
from gatekeeper.inprocess.registry import function_schema
from gatekeeper.rules.tiers import Tier


@pytest.fixture
def registry(gk) -> ToolRegistry:
    """read_file (default: small), write_file (config write_*: medium), execute_command (config: large),
    deploy (registered as large), write_note (registered as small, beating write_*)."""
    registry = ToolRegistry(gk)
    for name in ("read_file", "write_file", "execute_command"):
        registry.register(tool(name), handler=lambda **kwargs: "done")
    registry.register(tool("deploy"), required_tier="large")
    registry.register(tool("write_note"), required_tier=Tier.SMALL)
    return registry


# -- listing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("small-model", ["read_file", "write_note"]),
        ("medium-model", ["read_file", "write_file", "write_note"]),
        ("large-model", ["read_file", "write_file", "execute_command", "deploy", "write_note"]),
    ],
)
def test_each_measured_tier_sees_only_its_tools(registry, model, expected):
    assert names(registry.list_for_llm(model)) == expected


def test_effort_is_part_of_the_key(registry):
    assert names(registry.list_for_llm("effortful", effort="low")) == ["read_file", "write_note"]
    assert "execute_command" in names(registry.list_for_llm("effortful", effort="xhigh"))


def test_pin_decides_the_tier(registry):
    assert names(registry.list_for_llm("pinned-model")) == ["read_file", "write_file", "write_note"]


def test_listed_schemas_are_the_registered_ones(registry):
    assert registry.list_for_llm("small-model")[0] == tool("read_file")


def test_registering_a_tool_updates_the_lists(registry):
    assert "search" not in names(registry.list_for_llm("large-model"))
    registry.register(tool("search"))
    assert names(registry.list_for_llm("large-model"))[-1] == "search"
    assert names(registry.list_for_llm("small-model"))[-1] == "search"


def test_each_call_returns_a_new_list(registry):
    registry.list_for_llm("small-model").clear()
    assert names(registry.list_for_llm("small-model")) == ["read_file", "write_note"]


def test_registering_a_name_twice_is_an_error(registry):
    with pytest.raises(ValueError, match="'read_file' is already registered"):
        registry.register(tool("read_file"))


def test_a_malformed_schema_is_refused_at_registration(gk):
    with pytest.raises(ValueError, match=r"function\.name"):
        ToolRegistry(gk).register({"type": "function", "function": {"description": "no name"}})


def test_reject_policy_raises_for_an_unmeasured_model(upstream, store_path):
    gk = Gatekeeper(settings_for(upstream.base_url, store_path, unknown_models="reject"))
    try:
        with pytest.raises(NotMeasured, match="not been measured"):
            ToolRegistry(gk).list_for_llm("never-seen")
    finally:
        gk.close()


async def test_async_listing_matches_the_sync_one(registry):
    for model in ("small-model", "medium-model", "large-model"):
        assert await registry.alist_for_llm(model) == registry.list_for_llm(model)


def test_sync_listing_does_not_block_while_an_unknown_model_is_measured(store_path, default_suite):
    with measuring_upstream(default_suite, delay_s=1.0) as upstream:
        gk = Gatekeeper(settings_for(upstream.base_url, store_path))  # fail_closed, unknown_tier small
        try:
            registry = ToolRegistry(gk)
            registry.register(tool("read_file"))
            registry.register(tool("execute_command"))
            tools = registry.list_for_llm("new-model")
            assert names(tools) == ["read_file"]
            assert gk.lookup("new-model") is None, "list_for_llm waited for the measurement"

            def measured() -> bool:
                listed = names(registry.list_for_llm("new-model"))
                assert listed in (["read_file"], ["read_file", "execute_command"])
                return gk.lookup("new-model") is not None

            wait_until(measured, "the background measurement of new-model", timeout_s=30)
            assert names(registry.list_for_llm("new-model")) == ["read_file", "execute_command"]
        finally:
            gk.close()
    assert upstream.requests, "the background measurement talked to the upstream"


# -- the decorator -------------------------------------------------------------------------


def test_decorator_derives_the_schema_from_signature_and_docstring(gk):
    registry = ToolRegistry(gk)

    @registry.tool(required_tier="medium")
    def search_notes(
        query: str,
        limit: int = 5,
        score: float = 0.5,
        exact: bool = False,
        tags: list[str] | None = None,
        mode: Literal["fast", "deep"] = "fast",
        owner: Optional[str] = None,  # noqa: UP045 - the old spelling is supported too
        filters: dict[str, int] | None = None,
    ) -> list[str]:
        """Search the notes
        by their text.

        Longer explanation that is not part of the description.

        Args:
            query: Words to look for.
            limit (int): At most this many
                results.
            mode: How hard to look.

        Returns:
            The names of the matching notes.
        """
        return []

    assert registry.get("search_notes").required_tier == Tier.MEDIUM
    assert registry.get("search_notes").handler is search_notes
    assert registry.get("search_notes").schema == {
        "type": "function",
        "function": {
            "name": "search_notes",
            "description": "Search the notes by their text.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to look for."},
                    "limit": {"type": "integer", "description": "At most this many results.", "default": 5},
                    "score": {"type": "number", "default": 0.5},
                    "exact": {"type": "boolean", "default": False},
                    "tags": {
                        "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                        "default": None,
                    },
                    "mode": {
                        "type": "string",
                        "enum": ["fast", "deep"],
                        "description": "How hard to look.",
                        "default": "fast",
                    },
                    "owner": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
                    "filters": {
                        "anyOf": [{"type": "object", "additionalProperties": {"type": "integer"}}, {"type": "null"}],
                        "default": None,
                    },
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    }


def test_bare_decorator_uses_the_config_rule(gk):
    registry = ToolRegistry(gk)

    @registry.tool
    def execute_command(command: str) -> str:
        """Run a shell command."""
        return command

    assert registry.get("execute_command").required_tier == Tier.LARGE
    assert execute_command("x") == "x"  # the function itself is unchanged


def test_unsupported_parameter_types_fail_at_decoration(gk):
    registry = ToolRegistry(gk)
    with pytest.raises(TypeError, match=r"parameter 'when'.*unsupported annotation"):

        @registry.tool
        def schedule(when: threading.Event) -> None:
            pass

    with pytest.raises(TypeError, match=r"\*args"):

        @registry.tool
        def variadic(*items: str) -> None:
            pass

    with pytest.raises(TypeError, match="pass name="):
        registry.tool(lambda: None)
    with pytest.raises(TypeError, match=r"registry.tool\(required_tier='medium'\)"):
        registry.tool("medium")


def test_schema_without_docstring_or_parameters():
    def ping() -> str:
        return "pong"

    assert function_schema(ping) == {
        "type": "function",
        "function": {"name": "ping", "parameters": {"type": "object", "properties": {}, "additionalProperties": False}},
    }


# -- calling -------------------------------------------------------------------------------


@pytest.fixture
def calls() -> list:
    return []


@pytest.fixture
def typed(gk, calls) -> ToolRegistry:
    registry = ToolRegistry(gk)

    @registry.tool
    def read_file(
        path: str, max_lines: int = 100, mode: Literal["text", "hex"] = "text", ranges: list[int] | None = None
    ) -> str:
        """Read a file."""
        calls.append(("read_file", path, max_lines, mode, ranges))
        return f"contents of {path}"

    @registry.tool
    def execute_command(command: str) -> str:
        """Run a shell command."""
        calls.append(("execute_command", command))
        return "ran"

    return registry


def test_an_allowed_call_runs_the_handler_with_parsed_arguments(typed, calls):
    assert typed.call("small-model", "read_file", '{"path": "a.txt", "max_lines": 3}') == "contents of a.txt"
    assert typed.call("small-model", "read_file", {"path": "b.txt"}) == "contents of b.txt"
    assert calls == [("read_file", "a.txt", 3, "text", None), ("read_file", "b.txt", 100, "text", None)]


def test_a_hidden_tool_is_refused_and_not_run(typed, calls):
    with pytest.raises(ToolNotAllowed) as info:
        typed.call("small-model", "execute_command", '{"command": "rm -rf /"}')
    message = str(info.value)
    assert "'execute_command'" in message and "'large'" in message and "'small'" in message
    assert calls == []


def test_the_same_tool_runs_for_a_model_whose_tier_allows_it(typed, calls):
    assert typed.call("large-model", "execute_command", {"command": "ls"}) == "ran"


def test_an_unknown_tool_is_refused_clearly(typed):
    with pytest.raises(ToolNotAllowed, match="unknown tool 'made_up': no tool of that name is registered") as info:
        typed.call("large-model", "made_up", "{}")
    assert "execute_command" not in str(info.value)  # the message may go back to the model: no names leak


def test_a_tool_without_handler_cannot_be_called(registry):
    with pytest.raises(Exception, match="'deploy' was registered without a handler"):
        registry.call("large-model", "deploy", "{}")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ("{}", "missing required argument 'path'"),
        ('{"path": "a", "colour": "red"}', "unknown argument 'colour' (expected: path, max_lines, mode, ranges)"),
        ('{"path": "a", "max_lines": true}', "argument 'max_lines': expected integer, got boolean true"),
        ('{"path": "a", "max_lines": "3"}', "argument 'max_lines': expected integer, got string \"3\""),
        ('{"path": "a", "max_lines": 2.5}', "argument 'max_lines': expected integer, got number 2.5"),
        ('{"path": 7}', "argument 'path': expected string, got integer 7"),
        ('{"path": "a", "mode": "binary"}', 'argument \'mode\': "binary" is not one of ["text", "hex"]'),
        ('{"path": "a", "ranges": [1, "2"]}', "argument 'ranges[1]': expected integer, got string \"2\""),
        ('{"path": "a", "ranges": 5}', "argument 'ranges': expected array or null, got integer 5"),
        ('{"path": ', "arguments are not valid JSON"),
        ('["a"]', "arguments must be a JSON object, got array"),
    ],
)
def test_invalid_arguments_are_refused_naming_the_argument(typed, calls, arguments, message):
    with pytest.raises(ToolArgumentsInvalid) as info:
        typed.call("small-model", "read_file", arguments)
    assert str(info.value).startswith(f"tool 'read_file': {message}")
    assert calls == []


def test_hand_written_schemas_are_validated_too(gk):
    registry = ToolRegistry(gk)
    registry.register(
        tool(
            "create_user",
            {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "role": {"enum": ["admin", "viewer"]},
                    "address": {"type": "object", "properties": {"zip": {"type": "string"}}, "required": ["zip"]},
                },
                "required": ["name"],
            },
        ),
        handler=lambda **kwargs: kwargs,
    )
    extra_allowed = {"name": "ada", "nickname": "a", "address": {"zip": "123", "city": "x"}}
    assert registry.call("small-model", "create_user", extra_allowed) == extra_allowed
    with pytest.raises(ToolArgumentsInvalid, match=r"missing required argument 'address\.zip'"):
        registry.call("small-model", "create_user", {"name": "ada", "address": {}})
    with pytest.raises(ToolArgumentsInvalid, match=r"argument 'role': 1 is not one of"):
        registry.call("small-model", "create_user", {"name": "ada", "role": 1})
    with pytest.raises(ToolArgumentsInvalid, match=r"argument 'address\.zip': expected string, got integer 123"):
        registry.call("small-model", "create_user", {"name": "ada", "address": {"zip": 123}})


def test_empty_arguments_mean_no_arguments(gk):
    registry = ToolRegistry(gk)
    registry.tool(lambda: "pong", name="ping")
    assert registry.call("small-model", "ping", "") == "pong"
    assert registry.call("small-model", "ping", None) == "pong"


def test_sync_call_runs_an_async_handler(gk):
    registry = ToolRegistry(gk)

    @registry.tool
    async def fetch(url: str) -> str:
        await asyncio.sleep(0)
        return f"fetched {url}"

    assert registry.call("small-model", "fetch", {"url": "u"}) == "fetched u"


async def test_acall_awaits_async_handlers_and_threads_sync_ones(gk):
    registry = ToolRegistry(gk)
    threads: list[str] = []

    @registry.tool
    async def fetch(url: str) -> str:
        return f"fetched {url}"

    @registry.tool
    def compute(n: int) -> int:
        threads.append(threading.current_thread().name)
        return n * 2

    assert await registry.acall("small-model", "fetch", '{"url": "u"}') == "fetched u"
    assert await registry.acall("small-model", "compute", {"n": 21}) == 42
    assert threads and threads[0] != threading.current_thread().name


async def test_acall_refuses_hidden_tools_and_bad_arguments(typed, calls):
    with pytest.raises(ToolNotAllowed, match="requires tier 'large'"):
        await typed.acall("medium-model", "execute_command", '{"command": "ls"}')
    with pytest.raises(ToolArgumentsInvalid, match="missing required argument 'command'"):
        await typed.acall("large-model", "execute_command", "{}")
    assert calls == []


# -- constraints the schema states are enforced (jsonschema), or the tool is refused ------------


@pytest.fixture
def constrained(gk) -> ToolRegistry:
    registry = ToolRegistry(gk)
    registry.register(
        tool(
            "book",
            {
                "type": "object",
                "properties": {
                    "seats": {"type": "integer", "minimum": 1, "maximum": 8},
                    "code": {"type": "string", "pattern": "^[A-Z]+$", "maxLength": 3},
                    "cabin": {"type": "string", "enum": ["economy", "business"]},
                    "contact": {"type": "string", "format": "email"},
                    "when": {"type": "string", "format": "date-time"},
                    "passenger": {"$ref": "#/$defs/passenger"},
                },
                "$defs": {
                    "passenger": {
                        "type": "object",
                        "properties": {"age": {"type": "integer", "minimum": 0}},
                        "required": ["age"],
                    }
                },
            },
        ),
        handler=lambda **kwargs: kwargs,
    )
    return registry


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"seats": 0}, "argument 'seats': 0 is less than the minimum of 1"),
        ({"seats": 9}, "argument 'seats': 9 is greater than the maximum of 8"),
        ({"seats": 3.0}, "argument 'seats': expected integer, got number 3.0"),
        ({"code": "ab1"}, "argument 'code': 'ab1' does not match '^[A-Z]+$'"),
        ({"code": "ABCD"}, "argument 'code': 'ABCD' is too long"),
        ({"cabin": "first"}, 'argument \'cabin\': "first" is not one of ["economy", "business"]'),
        ({"contact": "not-an-address"}, "argument 'contact': 'not-an-address' is not a 'email'"),
        ({"when": "tomorrow"}, "argument 'when': 'tomorrow' is not a 'date-time'"),
        ({"passenger": {"age": -1}}, "argument 'passenger.age': -1 is less than the minimum of 0"),
        ({"passenger": {}}, "missing required argument 'passenger.age'"),
    ],
)
def test_every_stated_constraint_is_enforced(constrained, arguments, message):
    with pytest.raises(ToolArgumentsInvalid) as info:
        constrained.call("small-model", "book", arguments)
    assert str(info.value) == f"tool 'book': {message}"


def test_arguments_within_the_constraints_pass(constrained):
    good = {
        "seats": 2,
        "code": "LHR",
        "cabin": "economy",
        "contact": "a@example.org",
        "when": "2026-11-30T12:00:00Z",
        "passenger": {"age": 40},
    }
    assert constrained.call("small-model", "book", good) == good


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"type": "object", "properties": {"x": {"type": "string", "format": "credit-card"}}},
            "format 'credit-card' cannot be checked here",
        ),
        ({"type": "object", "properties": {"x": {"$ref": "https://example.org/x.json"}}}, "does not resolve"),
        ({"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}, "does not resolve"),
        ({"type": "object", "properties": {"x": {"type": "strin"}}}, "not a valid JSON schema"),
    ],
)
def test_a_schema_that_cannot_be_enforced_is_refused_at_registration(gk, parameters, message):
    with pytest.raises(ValueError, match=message):
        ToolRegistry(gk).register(tool("risky", parameters))


def test_an_error_message_never_echoes_a_huge_argument(constrained):
    with pytest.raises(ToolArgumentsInvalid) as info:
        constrained.call("small-model", "book", {"code": "A" * 100_000})
    assert len(str(info.value)) <= 300


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


class Address(BaseModel):
    street: str
    zip: Annotated[str, Field(pattern=r"^\d{5}$")]


def test_typed_function_constraints_and_types_come_from_its_signature(gk):
    registry = ToolRegistry(gk)
    received: list[tuple] = []

    @registry.tool
    def ship(count: Annotated[int, Field(ge=1, le=10)], address: Address, priority: Priority = Priority.LOW) -> str:
        """Ship items."""
        received.append((count, address, priority))
        return "shipped"

    parameters = registry.get("ship").parameters
    assert parameters["properties"]["count"] == {"type": "integer", "minimum": 1, "maximum": 10}
    assert (
        registry.call(
            "small-model", "ship", {"count": 2, "address": {"street": "Main", "zip": "12345"}, "priority": "high"}
        )
        == "shipped"
    )
    assert received == [(2, Address(street="Main", zip="12345"), Priority.HIGH)]  # converted to its types
    with pytest.raises(ToolArgumentsInvalid, match="argument 'count': 11 is greater than the maximum of 10"):
        registry.call("small-model", "ship", {"count": 11, "address": {"street": "Main", "zip": "12345"}})
    with pytest.raises(ToolArgumentsInvalid, match=r"argument 'address.zip': '1' does not match"):
        registry.call("small-model", "ship", {"count": 1, "address": {"street": "Main", "zip": "1"}})
    with pytest.raises(ToolArgumentsInvalid, match=r"argument 'priority': \"urgent\" is not one of"):
        registry.call(
            "small-model", "ship", {"count": 1, "address": {"street": "M", "zip": "12345"}, "priority": "urgent"}
        )
    assert len(received) == 1


def test_a_parameter_named_like_a_model_attribute_works(gk):
    registry = ToolRegistry(gk)

    @registry.tool
    def convert(json: str, copy: bool = False) -> str:
        return f"{json}:{copy}"

    assert registry.call("small-model", "convert", {"json": "x"}) == "x:False"
