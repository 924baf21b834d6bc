"""`gated`: put gatekeeper in front of an agent runtime's own tool listing.

    list_for_llm = gated(gk, runtime.list_for_llm)     # or, on your own function:

    @gated(gk)
    async def list_for_llm(model: str, effort: str | None = None) -> list[dict]: ...

The wrapped callable returns the same list minus the tools the model's tier may not see. The
model is the argument named `model` (else the first positional argument), the effort the one
named `effort`. Tier resolution and the tool rules are the `Gatekeeper` core's.

Forms for agent frameworks whose tool hooks have their own signatures:

    # pydantic-ai: its tool-preparation hook takes (run context, tool definitions)
    from pydantic_ai.capabilities import PrepareTools
    agent = Agent(model, tools=[...], capabilities=[PrepareTools(gated_prepare_tools(gk))])

    # OpenAI Agents SDK: every tool of the agent gated by the tier of `agent.model` at each turn
    agent = gate_agent(gk, Agent(name="a", model="m", tools=[...]))

And the request step of the proxy, in process, for a body of any client protocol:

    resolution, gated = gate_body(gk, "responses", body)   # or await agate_body(...)
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from gatekeeper.core.admit import Decision, aadmit, adecide, admit, decide
from gatekeeper.core.gatekeeper import Gatekeeper, Resolution, Snapshot
from gatekeeper.errors import ToolNotAllowed
from gatekeeper.inprocess.answers import AnswerGate
from gatekeeper.observe import logs
from gatekeeper.observe.redact import clip
from gatekeeper.protocols import schema
from gatekeeper.protocols import table as protocols
from gatekeeper.protocols.base import Codec
from gatekeeper.protocols.gate import Gated, listed_tool_id, tool_name
from gatekeeper.rules.tools import BUILTIN_FAMILIES, ToolId

F = TypeVar("F", bound=Callable[..., Any])


def gated(
    gk: Gatekeeper,
    fn: F | None = None,
    *,
    name_of: Callable[[Any], str] | None = None,
    model_arg: str = "model",
    effort_arg: str = "effort",
) -> Any:
    """Wrap `fn` (sync or async, returning a list of tools) so it returns only the allowed tools.

    Tools may be dicts in any protocol's shape (chat `{"type": "function", "function": {"name":
    ...}}`, Responses `{"type": "function", "name": ...}`, Messages `{"name": ...}`, typed
    built-ins judged by their type) or objects with a `name` attribute; pass `name_of` for
    anything else. Usable as `gated(gk, fn)`, `@gated(gk)` or `@gated(gk, name_of=...)`.
    """
    if fn is None:
        return functools.partial(gated, gk, name_of=name_of, model_arg=model_arg, effort_arg=effort_arg)
    name: Callable[[Any], str | ToolId] = name_of or default_tool_identity
    locate = _argument_finder(fn, model_arg, effort_arg)

    def keep(decision: Decision, tools: Iterable[Any] | None) -> list[Any] | None:
        if tools is None:
            return None
        return [t for t in tools if decision.allows(name(t))]

    if _is_async(fn):

        @functools.wraps(fn)
        async def gated_async(*args: Any, **kwargs: Any) -> Any:
            model, effort = locate(args, kwargs)
            tools = await fn(*args, **kwargs)
            return keep(await adecide(gk, model, effort), tools)

        return gated_async

    @functools.wraps(fn)
    def gated_sync(*args: Any, **kwargs: Any) -> Any:
        model, effort = locate(args, kwargs)
        tools = fn(*args, **kwargs)
        # Under fail_closed this never blocks: an unmeasured model gets unknown_tier at once.
        return keep(decide(gk, model, effort), tools)

    return gated_sync


def default_tool_identity(tool: Any) -> str | ToolId:
    """What `gated` judges a tool by: a dict's typed identity in any protocol's shape
    (protocols.gate.listed_tool_id: a built-in by its type, never by a name put on it), else the
    `name` attribute of an object."""
    if isinstance(tool, dict):
        return listed_tool_id(tool, "tool")
    return default_tool_name(tool)


def default_tool_name(tool: Any) -> str:
    """The name of an OpenAI tool schema, a legacy function dict, or an object with `.name`."""
    if isinstance(tool, dict):
        if "function" in tool:
            return tool_name(tool, "tool")
        name = tool.get("name")
        if isinstance(name, str):
            return name
    elif isinstance(name := getattr(tool, "name", None), str):
        return name
    raise TypeError(f"cannot tell the name of tool {tool!r}: pass name_of= to gated()")


def _argument_finder(
    fn: Callable[..., Any], model_arg: str, effort_arg: str
) -> Callable[[tuple[Any, ...], dict[str, Any]], tuple[str, str | None]]:
    try:
        signature: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins and C callables have none
        signature = None

    def locate(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, str | None]:
        named = dict(kwargs)
        if signature is not None:
            with contextlib.suppress(TypeError):  # let fn itself report the bad call
                named = signature.bind_partial(*args, **kwargs).arguments | named
        model = named.get(model_arg)
        if model is None and args and model_arg not in named:
            model = args[0]
        if not isinstance(model, str) or not model:
            raise TypeError(
                f"gated {getattr(fn, '__qualname__', fn)!r}: cannot find the model name; pass it as "
                f"{model_arg}= or as the first argument"
            )
        effort = named.get(effort_arg)
        return model, effort if isinstance(effort, str) else None

    return locate


def _is_async(fn: Any) -> bool:
    # an object whose __call__ is a coroutine function is async too (callable() cannot tell)
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004


# -- one request body of a client protocol ---------------------------------------------------


def _entry(protocol: str) -> protocols.ClientProtocol:
    entry = protocols.protocol(protocol)
    if entry is None:
        raise ValueError(f"unknown protocol {protocol!r}: expected one of {protocols.served()}")
    return entry


def _codec(protocol: str) -> Codec:
    return _entry(protocol).codec


@contextlib.contextmanager
def _set_aside(snapshot: Snapshot, codec: Codec, body: dict[str, Any], foreign: Iterable[str]) -> Iterator[None]:
    """The caller's own arguments (an SDK's extra_headers, timeout, ...; LiteLLM's bookkeeping)
    are not request fields: set aside while the body is gated, except `extra_body`, whose fields
    reach the wire and are checked. The log context is the caller's again afterwards."""
    aside = {k: body.pop(k) for k in foreign if k in body}
    try:
        if "extra_body" in aside:
            schema.check_extra_body(
                aside["extra_body"], _entry(codec.name).request_fields, snapshot.policy.unknown_fields
            )
        with logs.request_scope():
            yield
    finally:
        body.update(aside)


def tool_carriers(protocol: str, body: dict[str, Any]) -> list[str]:
    """The fields of a `protocol` request body that offer or could offer tools (`extra_body`
    included); empty when there is nothing to gate (the protocol's `carriers`, protocols/table.py)."""
    return _entry(protocol).carriers(body)


def unlisted_fields(protocol: str, body: dict[str, Any]) -> set[str]:
    """The keys of `body` that are not request fields of `protocol` (its registry entry's)."""
    return set(body) - set(_entry(protocol).request_fields)


def gate_body(
    gk: Gatekeeper, protocol: str, body: dict[str, Any], foreign: Iterable[str] = ()
) -> tuple[Resolution, Gated]:
    """Gate (in place) a request body of `protocol` ("chat" | "responses" | "messages") with the
    proxy's own request step (gatekeeper/core/admit.py). Keys named in `foreign` are the caller's
    own arguments, not request fields (an SDK's `extra_headers`, `timeout`); they are left as
    they are, except `extra_body`, whose fields must be ones the codec relays as is.

    Raises RequestInvalid, ToolChoiceBlocked and NotMeasured like the proxy."""
    codec, snapshot = _codec(protocol), gk.snapshot()
    with _set_aside(snapshot, codec, body, foreign):
        admitted = admit(gk, codec, body, snapshot)
    return admitted.resolution, admitted.gated


async def agate_body(
    gk: Gatekeeper, protocol: str, body: dict[str, Any], foreign: Iterable[str] = ()
) -> tuple[Resolution, Gated]:
    """`gate_body` for async code."""
    codec, snapshot = _codec(protocol), gk.snapshot()
    with _set_aside(snapshot, codec, body, foreign):
        admitted = await aadmit(gk, codec, body, snapshot)
    return admitted.resolution, admitted.gated


async def agate_call(
    gk: Gatekeeper, protocol: str, body: dict[str, Any], foreign: Iterable[str] = ()
) -> tuple[Resolution, Gated, AnswerGate]:
    """`agate_body`, and the answer side of the call: what its answer may carry, to enforce."""
    codec, snapshot = _codec(protocol), gk.snapshot()
    with _set_aside(snapshot, codec, body, foreign):
        admitted = await aadmit(gk, codec, body, snapshot)
    return admitted.resolution, admitted.gated, AnswerGate.of(gk, protocol, body, admitted)


# -- pydantic-ai ----------------------------------------------------------------------------


def gated_prepare_tools(gk: Gatekeeper, effort: str | None = None) -> Callable[..., Any]:
    """A pydantic-ai `ToolsPrepareFunc` (`(ctx: RunContext, tool_defs) -> tool_defs`): keeps the
    tool definitions the tier of `ctx.model.model_name` at `effort` allows. Without `effort`, the
    run's `model_settings["thinking"]` (pydantic-ai's unified effort level) is used when it is a
    string, else the `default` level."""

    async def prepare_tools(ctx: Any, tool_defs: list[Any]) -> list[Any]:
        decision = await _pydantic_ai_decision(gk, ctx, ctx.model, effort, "gated_prepare_tools")
        return [t for t in tool_defs if decision.allows(t.name)]

    return prepare_tools


async def _pydantic_ai_decision(gk: Gatekeeper, ctx: Any, model: Any, effort: str | None, who: str) -> Decision:
    """The decision for a pydantic-ai run step: `model`'s name, at `effort` or else the run's
    `model_settings["thinking"]` when it is a string, else the `default` level."""
    name = getattr(model, "model_name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{who}: cannot tell the model name of {model!r}")
    level = effort
    settings = getattr(ctx, "model_settings", None) or {}
    if level is None and isinstance(settings.get("thinking"), str):
        level = settings["thinking"]
    return await adecide(gk, name, level)


# pydantic-ai native tool kind -> the built-in families it is sent as (OpenAI's code interpreter
# and Anthropic's code execution are one pydantic-ai tool): each must be admitted.
_NATIVE_FAMILIES = {"code_execution": ("code_execution", "code_interpreter")}


def gated_capability(gk: Gatekeeper, effort: str | None = None) -> Any:
    """A pydantic-ai capability: `gated_prepare_tools`'s function tools, and each request's native
    (provider built-in) tools judged by their family as the proxy judges them (`web_search:
    large` hides `WebSearchTool`; an `MCPServerTool` is judged as its server, and hidden when a
    rule hides any of its tools). `PrepareTools` sees function tools only, so a native tool went
    to the provider ungated unless the client was a gated one.

        agent = Agent(model, tools=[...], capabilities=[NativeTool(WebSearchTool()), gated_capability(gk)])
    """
    import dataclasses

    from pydantic_ai.capabilities import AbstractCapability  # pydantic-ai: only needed by this form

    prepare = gated_prepare_tools(gk, effort)

    async def decision_for(ctx: Any, model: Any) -> Decision:
        return await _pydantic_ai_decision(gk, ctx, model, effort, "gated_capability")

    def admits(decision: Decision, tool: Any) -> bool:
        kind = getattr(tool, "kind", None)
        if not isinstance(kind, str):
            return False
        if kind == "mcp_server":
            server = getattr(tool, "id", None)
            if not isinstance(server, str):
                return False
            tier = decision.resolution.tier
            return (
                decision.allows(ToolId.mcp(server, "*")) and decision.policy.rule_hiding_part_of(server, tier) is None
            )
        return all(decision.allows(ToolId.builtin(family)) for family in _NATIVE_FAMILIES.get(kind, (kind,)))

    @dataclasses.dataclass
    class GatedTools(AbstractCapability[Any]):
        @classmethod
        def get_serialization_name(cls) -> str | None:
            return None  # not spec-serializable (holds a Gatekeeper)

        async def prepare_tools(self, ctx: Any, tool_defs: list[Any]) -> list[Any]:
            return list(await prepare(ctx, tool_defs))

        async def prepare_model_request(self, ctx: Any, request_context: Any) -> Any:
            params = request_context.model_request_parameters
            if params.native_tools:
                decision = await decision_for(ctx, request_context.model)
                kept = [t for t in params.native_tools if admits(decision, t)]
                request_context.model_request_parameters = dataclasses.replace(params, native_tools=kept)
            return request_context

    return GatedTools()


# -- OpenAI Agents SDK ----------------------------------------------------------------------


def gate_agent(gk: Gatekeeper, agent: Any) -> Any:
    """A clone of an OpenAI Agents SDK `Agent` whose function tools are enabled only when the tier
    of the agent's model (at `model_settings.reasoning.effort`) allows them, decided at each turn;
    its hosted tools are gated once, here, as the proxy gates them: a built-in (web search, code
    interpreter, local shell, ...) by its type and family, a `HostedMCPTool` by its server and
    each of its tools (narrowed, or RequestInvalid when a rule hides some of a server offered
    without a tool list); any other tool by its name.

    Its handoffs are tools too (the model sees `transfer_to_<agent>` functions): each is enabled
    only when the tier allows its tool name (a rule may name it: `transfer_to_*: medium`), and the
    agent it hands to is gated the same way, by its own model. The tools of its MCP servers
    (`mcp_servers`, listed at each turn) are listed and called only when the tier allows
    `<server name>.<tool>`."""
    return _gate_agent(gk, agent, {})


def _gate_agent(gk: Gatekeeper, agent: Any, gated_agents: dict[int, Any]) -> Any:
    """`gate_agent`, with the agents already gated on this walk (handoffs may form a cycle)."""
    import dataclasses

    from agents import Agent, FunctionTool, Handoff, handoff  # the Agents SDK: only needed by this form

    if id(agent) in gated_agents:
        return gated_agents[id(agent)]
    model = agent.model if isinstance(agent.model, str) else getattr(agent.model, "model", None)
    if not isinstance(model, str) or not model:
        raise TypeError(f"gate_agent: agent {agent.name!r} needs a model name (agent.model)")
    reasoning = getattr(agent.model_settings, "reasoning", None)
    effort = getattr(reasoning, "effort", None) if reasoning is not None else None

    def enabled(name: str, original: Any) -> Callable[..., Any]:
        async def is_enabled(ctx: Any, current: Any) -> bool:
            if not (await adecide(gk, model, effort)).allows(name):
                return False
            if isinstance(original, bool):
                return original
            result = original(ctx, current)
            return bool(await result) if inspect.isawaitable(result) else bool(result)

        return is_enabled

    decision = decide(gk, model, effort)
    tools = []
    for tool in agent.tools:
        if isinstance(tool, FunctionTool):
            tools.append(dataclasses.replace(tool, is_enabled=enabled(tool.name, tool.is_enabled)))
        else:
            tools += _hosted(tool, model, decision)
    servers = [_GatedMCPServer(gk, server, model, effort) for server in agent.mcp_servers]
    clone = gated_agents[id(agent)] = agent.clone(tools=tools, mcp_servers=servers)
    handoffs = []
    for item in agent.handoffs:
        if isinstance(item, Agent):
            item = handoff(_gate_agent(gk, item, gated_agents))
        elif isinstance(item, Handoff):
            item = _gated_handoff(gk, item)
        else:
            raise TypeError(f"gate_agent: cannot gate handoff {item!r} of agent {agent.name!r}")
        gated = dataclasses.replace(item, is_enabled=enabled(item.tool_name, item.is_enabled))
        gated._agent_ref = item._agent_ref  # not an init field: the SDK reads the target through it
        handoffs.append(gated)
    clone.handoffs = handoffs
    return clone


def _gated_handoff(gk: Gatekeeper, item: Any) -> Any:
    """A handoff built by the caller: the agent it returns when invoked is gated."""
    import asyncio
    import dataclasses

    invoke = item.on_invoke_handoff

    async def on_invoke_handoff(ctx: Any, arguments: str) -> Any:
        # gate_agent resolves tiers synchronously (under `wait` it may block): off the event loop.
        return await asyncio.to_thread(gate_agent, gk, await invoke(ctx, arguments))

    gated = dataclasses.replace(item, on_invoke_handoff=on_invoke_handoff)
    gated._agent_ref = item._agent_ref
    return gated


class _GatedMCPServer:
    """An Agents SDK MCP server as a gated agent sees it: its tools listed, and called, only
    when the tier of the agent's model allows `<server name>.<tool>` (a label the client chose:
    the rules of every server it may be apply, rules.tools.ToolPolicy). Anything else is the server's."""

    def __init__(self, gk: Gatekeeper, server: Any, model: str, effort: str | None) -> None:
        self._gk, self._server, self._model, self._effort = gk, server, model, effort

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)

    async def _allows(self, tool: str) -> bool:
        decision = await adecide(self._gk, self._model, self._effort)
        return decision.allows(ToolId.mcp(self._server.name, tool))

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> list[Any]:
        return [t for t in await self._server.list_tools(run_context, agent) if await self._allows(t.name)]

    async def call_tool(self, tool_name: str, arguments: dict[str, Any] | None, meta: Any = None) -> Any:
        decision = await adecide(self._gk, self._model, self._effort)
        tool = ToolId.mcp(self._server.name, tool_name)
        if not decision.allows(tool):  # a call of a tool it never listed: a hallucination
            raise ToolNotAllowed(f"tool {clip(self._server.name)}.{clip(tool_name)} is hidden from {clip(self._model)}")
        if not decision.admits_call(tool, arguments or {}):
            raise ToolNotAllowed(
                f"tool {clip(self._server.name)}.{clip(tool_name)} with these arguments needs a higher tier "
                f"than {clip(self._model)}'s (tools.arguments); the call was not run"
            )
        return await self._server.call_tool(tool_name, arguments, meta)


def _hosted(tool: Any, model: str, decision: Decision) -> list[Any]:
    """A hosted tool as the agent may offer it ([] when hidden). By its name, a rule for its
    family did not apply (`shell: large` left `local_shell` in) and an MCP server was one tool
    named `hosted_mcp` (`github.delete_*: large` left every tool of the server in)."""
    import dataclasses

    name = getattr(tool, "name", type(tool).__name__)
    config = getattr(tool, "tool_config", None)
    if isinstance(config, dict) and config.get("type") == "mcp":
        body: dict[str, Any] = {"model": model, "tools": [dict(config)]}
        protocols.PROTOCOLS["responses"].codec.gate(body, decision.resolution.tier, decision.policy)
        kept = body.get("tools") or []
        return [dataclasses.replace(tool, tool_config=kept[0])] if kept else []
    if isinstance(name, str) and name in BUILTIN_FAMILIES:
        return [tool] if decision.allows(ToolId.builtin(name)) else []
    return [tool] if decision.allows(name) else []
