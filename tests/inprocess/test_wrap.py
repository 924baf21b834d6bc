"""`gated`: an agent runtime's own list_for_llm, filtered by a real Gatekeeper."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import pytest
import structlog
from conftest import names, tool

from gatekeeper import ToolChoiceBlocked, gated
from gatekeeper.observe.logs import merge_context

TOOLS = [tool("read_file"), tool("write_file"), tool("execute_command")]


def test_wrapping_a_sync_listing_by_keyword_model(gk):
    seen = []

    def list_for_llm(model: str, effort: str | None = None) -> list[dict]:
        seen.append((model, effort))
        return list(TOOLS)

    listing = gated(gk, list_for_llm)
    assert names(listing(model="small-model")) == ["read_file"]
    assert names(listing(model="large-model")) == ["read_file", "write_file", "execute_command"]
    assert seen == [("small-model", None), ("large-model", None)]
    assert listing.__name__ == "list_for_llm"


def test_model_and_effort_as_positional_arguments(gk):
    @gated(gk)
    def list_for_llm(model: str, effort: str | None = None) -> list[dict]:
        return TOOLS

    assert names(list_for_llm("effortful", "high")) == ["read_file", "write_file"]
    assert names(list_for_llm("effortful")) == ["read_file"]  # effortful@default is unmeasured: fail closed


def test_first_positional_argument_when_no_parameter_is_named_model(gk):
    assert names(gated(gk, lambda m, *rest: TOOLS)("large-model")) == names(TOOLS)
    assert names(gated(gk, lambda m, *rest: TOOLS)("small-model", "ignored")) == ["read_file"]


def test_a_bound_method_of_a_runtime(gk):
    class Runtime:
        def __init__(self) -> None:
            self.tools = TOOLS

        def list_for_llm(self, model: str, *, effort: str | None = None) -> list[dict]:
            return self.tools

    listing = gated(gk, Runtime().list_for_llm)
    assert names(listing("small-model")) == ["read_file"]
    assert names(listing("effortful", effort="high")) == ["read_file", "write_file"]


def test_decorating_a_method_finds_the_model_by_name(gk):
    class Runtime:
        @gated(gk)
        def list_for_llm(self, model: str) -> list[dict]:
            return TOOLS

    assert names(Runtime().list_for_llm("small-model")) == ["read_file"]


async def test_wrapping_an_async_listing(gk):
    @gated(gk)
    async def list_for_llm(model: str, effort: str | None = None) -> list[dict]:
        return TOOLS

    assert names(await list_for_llm("small-model")) == ["read_file"]
    assert names(await list_for_llm(model="effortful", effort="high")) == ["read_file", "write_file"]


async def test_an_object_with_async_call_is_treated_as_async(gk):
    class Listing:
        async def __call__(self, model: str) -> list[dict]:
            return TOOLS

    assert names(await gated(gk, Listing())("small-model")) == ["read_file"]


def test_framework_tool_objects_by_name_attribute(gk):
    @dataclass
    class FrameworkTool:
        name: str

    listing = gated(gk, lambda model: [FrameworkTool("read_file"), FrameworkTool("execute_command")])
    assert listing("small-model") == [FrameworkTool("read_file")]


def test_custom_name_of(gk):
    listing = gated(gk, lambda model: [("read_file", 1), ("write_file", 2)], name_of=lambda t: t[0])
    assert listing(model="small-model") == [("read_file", 1)]


def test_other_argument_names(gk):
    listing = gated(gk, lambda llm, level=None: TOOLS, model_arg="llm", effort_arg="level")
    assert names(listing(llm="effortful", level="high")) == ["read_file", "write_file"]


def test_a_call_without_a_model_is_a_clear_error(gk):
    with pytest.raises(TypeError, match="cannot find the model name"):
        gated(gk, lambda model=None: TOOLS)()


def test_unknown_model_fails_closed(gk):
    listing = gated(gk, lambda model: TOOLS)
    assert names(listing("never-measured")) == ["read_file"]


# -- the proxy's request step in process ------------------------------------------------------

FORCE_EXECUTE = {"type": "function", "function": {"name": "execute_command"}}


def _chat_body(model: str) -> dict:
    return {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [tool("read_file"), tool("execute_command")],
        "tool_choice": FORCE_EXECUTE,
    }


@pytest.mark.parametrize("entry", ["gate_body", "agate_body", "Gatekeeper.gate", "Gatekeeper.agate"])
async def test_every_entry_point_says_where_the_refusing_tier_came_from(gk, entry):
    from gatekeeper import agate_body, gate_body

    calls = {
        "gate_body": lambda m: gate_body(gk, "chat", _chat_body(m)),
        "agate_body": lambda m: agate_body(gk, "chat", _chat_body(m)),
        "Gatekeeper.gate": lambda m: gk.gate(_chat_body(m), m),
        "Gatekeeper.agate": lambda m: gk.agate(_chat_body(m), m),
    }
    for model, source in (("small-model", "measured"), ("pinned-model", "pinned"), ("never-seen", "pending")):
        with pytest.raises(ToolChoiceBlocked) as info:
            result = calls[entry](model)
            if inspect.isawaitable(result):
                await result
        assert (info.value.tool, info.value.source) == ("execute_command", source)


async def test_gating_in_process_leaves_the_callers_log_context_as_it_was(gk):
    from gatekeeper import agate_body, gate_body

    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(app_request="a1")
    try:
        body = _chat_body("small-model") | {"tool_choice": "auto"}
        with structlog.testing.capture_logs(processors=[merge_context]):
            gate_body(gk, "chat", dict(body))
            await agate_body(gk, "chat", dict(body))
        assert structlog.contextvars.get_contextvars() == {"app_request": "a1"}
    finally:
        structlog.contextvars.clear_contextvars()
