"""ToolRegistry: the in-process front end. Register tools once; each model sees only its tier's tools.

    registry = ToolRegistry(gk)

    @registry.tool(required_tier="medium")
    def write_file(path: str, content: str) -> str:
        '''Write a text file.

        Args:
            path: Where to write, relative to the workspace.
            content: The text to write.
        '''

    tools = registry.list_for_llm("some-model", effort="low")        # OpenAI tool schemas
    result = registry.call("some-model", "write_file", call.function.arguments)

    routed = registry.route_for_llm("some-model", effort="low")      # with a `routing:` section
    # call routed.model at routed.effort, offering routed.tools

Tier resolution and the config's tool rules come from the `Gatekeeper` core; schemas and the
check of a call's arguments come from `gatekeeper.inprocess.tool_schema` (pydantic + jsonschema). This
module adds the registry: who may see and run which tool.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import threading
from dataclasses import dataclass, field, replace
from typing import Any

from jsonschema.protocols import Validator

from gatekeeper.core.budget import held_to_budget
from gatekeeper.core.gatekeeper import Gatekeeper, Resolution, Route
from gatekeeper.core.route_choice import Need
from gatekeeper.errors import GatekeeperError, ToolNotAllowed
from gatekeeper.inprocess.tool_schema import FunctionTool, Handler, check_arguments, compile_schema, function_tool
from gatekeeper.observe import logs
from gatekeeper.protocols.gate import tool_name
from gatekeeper.rules.requirements import meets, unmet
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolPolicy

log = logs.get_logger(__name__)


@dataclass(frozen=True)
class RegisteredTool:
    """One tool: its OpenAI schema, the tier it requires, and what runs it (if anything)."""

    name: str
    schema: dict[str, Any]
    tier: Tier | None  # the tier given at registration; None: the config's rule, as it is now
    handler: Handler | None
    validator: Validator  # the schema's `parameters`, compiled once at registration
    function: FunctionTool | None = None  # set for a typed function: converts checked arguments
    gk: Gatekeeper | None = field(default=None, repr=False, compare=False)

    @property
    def required_tier(self) -> Tier:
        """The tier the tool requires: the one given at registration, else the rule of the
        settings in force (read each time: a reload that raises a tool's rule applies at once)."""
        if self.gk is None:
            return self.tier or Tier.LARGE
        if self.tier is not None:  # argument rules (tools.arguments) may still offer it lower
            return self.gk.policy.lowest_call_tier(self.name, self.tier)
        return self.gk.policy.required_tier(self.name)

    def call_tier(self, arguments: str | dict[str, Any] | None) -> Tier:
        """The tier one call with `arguments` needs (`tools.arguments`; the registered tier, or
        the config's rule, when no entry matches)."""
        if self.gk is None:
            return self.tier or Tier.LARGE
        return self.gk.policy.call_tier(self.name, arguments, self.tier)

    @property
    def parameters(self) -> dict[str, Any]:
        parameters: dict[str, Any] = self.schema["function"].get("parameters") or {"type": "object", "properties": {}}
        return parameters

    def arguments(self, arguments: str | dict[str, Any] | None) -> dict[str, Any]:
        """The handler's keyword arguments from a call's arguments; `ToolArgumentsInvalid` if they do not fit."""
        checked = check_arguments(self.name, self.validator, arguments)
        return self.function.to_kwargs(self.name, checked) if self.function else checked


@dataclass(frozen=True)
class RoutedTools:
    """Where to send a request offering the registry's tools (`ToolRegistry.route_for_llm`): call
    `model` at `effort` ("default": send no effort field) and offer it `tools`."""

    model: str
    effort: str
    reason: str  # escalated | economized | fallback | none
    tools: list[dict[str, Any]]
    route: Route


class ToolRegistry:
    """The tools an application offers, gated per model by a `Gatekeeper`.

    A tool's required tier is the one given to `register`/`tool`, else the config's rule
    (`tools.required_tier`, then `tools.default_tier`). Lists returned by `list_for_llm` share
    the registered schema dicts: treat them as read-only.
    """

    def __init__(self, gk: Gatekeeper) -> None:
        self.gk = gk
        self._tools: dict[str, RegisteredTool] = {}
        self._lock = threading.Lock()
        # The visible list per tier under one tool policy (a reload makes a new one), rebuilt
        # lazily after each register and each reload (see tools_for_tier).
        self._visible: tuple[ToolPolicy | None, dict[Tier, list[dict[str, Any]]]] = (None, {})

    # -- registering -----------------------------------------------------------------------

    def register(
        self, schema: dict[str, Any], required_tier: Tier | str | None = None, handler: Handler | None = None
    ) -> RegisteredTool:
        """Add an OpenAI tool schema (`{"type": "function", "function": {...}}`).

        `required_tier` overrides the config's rule for this tool. `handler(**arguments)` is what
        `call`/`acall` run; without one the tool can be listed but not called through the registry.
        A schema whose constraints cannot all be enforced (see `tool_schema`) is refused here.
        """
        return self._add(schema, required_tier, handler, None)

    def _add(
        self,
        schema: dict[str, Any],
        required_tier: Tier | str | None,
        handler: Handler | None,
        function: FunctionTool | None,
    ) -> RegisteredTool:
        name = tool_name(schema, "tool schema")
        parameters = schema["function"].get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise ValueError(f"tool {name!r}: function.parameters must be a JSON schema object")
        schema = copy.deepcopy(schema)  # the caller's dict may change later; ours may not
        validator = compile_schema(name, schema["function"].get("parameters") or {"type": "object"})
        tier = Tier(required_tier) if required_tier is not None else None
        tool = RegisteredTool(name, schema, tier, handler, validator, function, self.gk)
        with self._lock:
            if name in self._tools:
                raise ValueError(f"tool {name!r} is already registered")
            self._tools[name] = tool
            self._visible = (None, {})  # after the tool is in: a reader that sees the new dict sees the tool
        return tool

    def tool(
        self,
        fn: Handler | None = None,
        *,
        required_tier: Tier | str | None = None,
        name: str | None = None,
        description: str | None = None,
    ) -> Any:
        """Decorator: register a typed function as a tool, its schema derived by pydantic (`function_schema`).

        Use as `@registry.tool` or `@registry.tool(required_tier="medium")`; the function is
        returned unchanged.
        """

        def decorate(func: Handler) -> Handler:
            function = function_tool(func, name=name, description=description)
            self._add(function.schema, required_tier, func, function)
            return func

        if fn is not None and not callable(fn):
            raise TypeError(f"@registry.tool got {fn!r}: write @registry.tool(required_tier={fn!r})")
        return decorate(fn) if fn is not None else decorate

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def get(self, name: str) -> RegisteredTool | None:
        return self._tools.get(name)

    # -- listing ---------------------------------------------------------------------------

    def list_for_llm(self, model: str, effort: str | None = None) -> list[dict[str, Any]]:
        """The OpenAI tool schemas `model` may see at `effort`, in registration order.

        Follows the core's `unknown_models` policy: under `fail_closed` (the default) an unmeasured
        model gets `unknown_tier` at once while it is measured in the background; `wait` blocks up to
        `wait_timeout_s` (use `alist_for_llm` in async code); `reject` raises `NotMeasured`.
        """
        return self._within_budget(self.gk.resolve(model, effort))

    async def alist_for_llm(self, model: str, effort: str | None = None) -> list[dict[str, Any]]:
        """`list_for_llm` for async code: never blocks the event loop."""
        return self._within_budget(await self.gk.aresolve(model, effort))

    def _within_budget(self, resolution: Resolution) -> list[dict[str, Any]]:
        """`tools_for`, held to the pair's tool budget (`tools.budget`: trimmed in registration
        order after `tools.budget_priority`, refused with ToolBudgetExceeded, or reported in the
        log and metrics; `route` is `route_for_llm`'s, and reports here)."""
        tools = self.tools_for(resolution)
        names = [tool_name(t, "tool schema") for t in tools]
        kept, _ = held_to_budget(self.gk.settings, resolution, names)
        if len(kept) == len(names):
            return tools
        shown = set(kept)
        return [t for t, name in zip(tools, names, strict=True) if name in shown]

    def route_for_llm(self, model: str, effort: str | None = None) -> RoutedTools:
        """Capability routing (`routing:`) for the registry's tools: the pair that can use them all
        (a higher effort of `model`, or a fallback model), and the tools that pair may see. Without
        a `routing:` section, or when no pair qualifies, it is `model@effort` with `list_for_llm`'s
        tools (reason "none")."""
        return self._routed(self.gk.route_need(self.gk.resolve(model, effort), self._need()))

    async def aroute_for_llm(self, model: str, effort: str | None = None) -> RoutedTools:
        """`route_for_llm` for async code."""
        return self._routed(self.gk.route_need(await self.gk.aresolve(model, effort), self._need()))

    def _need(self) -> Need | None:
        requirements = self.gk.requirements
        tools = list(self._tools.values())
        need = Need.of((t.required_tier, requirements.of(t.name)) for t in tools)
        if need is not None and self.gk.settings.tools.budget == "route":
            need = replace(need, tools=len(tools))
        return need

    def _routed(self, route: Route) -> RoutedTools:
        return RoutedTools(route.model, route.effort, route.reason, self._within_budget(route.resolution), route)

    def tools_for(self, resolution: Resolution) -> list[dict[str, Any]]:
        """The schemas a resolved pair may see: its tier's, less the tools whose category minimums
        (`tools.requires`) its measurement does not meet."""
        tools = self.tools_for_tier(resolution.tier)
        requirements = self.gk.requirements
        if not requirements:
            return tools
        bounds = self.gk.capability(resolution).bounds
        return [t for t in tools if meets(requirements.of(tool_name(t, "tool schema")), bounds)]

    def tools_for_tier(self, tier: Tier) -> list[dict[str, Any]]:
        """The schemas a model at `tier` may see (a new list each call)."""
        policy = self.gk.policy
        owner, visible = self._visible  # read the dict before the tools: see register
        if owner is not policy:
            visible = {}
            self._visible = (policy, visible)
        tools = visible.get(tier)
        if tools is None:
            tools = [t.schema for t in list(self._tools.values()) if tier.allows(t.required_tier)]
            visible[tier] = tools
        return list(tools)

    # -- calling ---------------------------------------------------------------------------

    def call(
        self, model: str, name: str, arguments: str | dict[str, Any] | None = None, effort: str | None = None
    ) -> Any:
        """Run tool `name` for `model` if its tier allows the tool and the arguments fit the schema.

        `arguments` is the model's JSON string (or a dict). Raises `ToolNotAllowed` for a tool the
        model may not see (or that is not registered) and `ToolArgumentsInvalid` naming the argument.
        An async handler is run to completion here when no event loop is running.
        """
        tool = self._callable(name)
        self._authorize(tool, self.gk.resolve(model, effort), arguments)
        kwargs = tool.arguments(arguments)
        handler = tool.handler
        if not _is_async(handler):
            return handler(**kwargs)  # type: ignore[misc]
        if _loop_running():
            raise GatekeeperError(f"tool {name!r} has an async handler: use `await registry.acall(...)` here")
        return asyncio.run(handler(**kwargs))  # type: ignore[misc]

    async def acall(
        self, model: str, name: str, arguments: str | dict[str, Any] | None = None, effort: str | None = None
    ) -> Any:
        """`call` for async code. Async handlers are awaited; sync handlers run in a worker thread."""
        tool = self._callable(name)
        self._authorize(tool, await self.gk.aresolve(model, effort), arguments)
        kwargs = tool.arguments(arguments)
        handler = tool.handler
        if _is_async(handler):
            return await handler(**kwargs)  # type: ignore[misc]
        result = await asyncio.to_thread(handler, **kwargs)  # type: ignore[arg-type]
        return await result if inspect.isawaitable(result) else result

    def _callable(self, name: str) -> RegisteredTool:
        tool = self._tools.get(name)
        if tool is None:
            # The registered names are not listed: the message often goes back to the model.
            raise ToolNotAllowed(f"unknown tool {name!r}: no tool of that name is registered")
        if tool.handler is None:
            raise GatekeeperError(f"tool {name!r} was registered without a handler; nothing to run")
        return tool

    def _authorize(self, tool: RegisteredTool, resolution: Resolution, arguments: str | dict[str, Any] | None) -> None:
        if resolution.tier.allows(tool.required_tier):
            minimums = self.gk.requirements.of(tool.name)
            missing = unmet(minimums, self.gk.capability(resolution).bounds) if minimums else []
            if not missing:
                self._authorize_arguments(tool, resolution, arguments)
                return
            log.warning(
                "tool_call_refused", tool=tool.name, unmet=missing, key=resolution.key, source=resolution.source
            )
            raise ToolNotAllowed(
                f"tool {tool.name!r} requires {', '.join(missing)}; model {resolution.key!r} ({resolution.source}) "
                "does not meet it, so the tool was hidden from it and is not run"
            )
        log.warning(
            "tool_call_refused",
            tool=tool.name,
            required_tier=tool.required_tier.value,
            key=resolution.key,
            tier=resolution.tier.value,
            source=resolution.source,
        )
        raise ToolNotAllowed(
            f"tool {tool.name!r} requires tier {tool.required_tier.value!r}; model {resolution.key!r} has tier "
            f"{resolution.tier.value!r} ({resolution.source}), so the tool was hidden from it and is not run"
        )

    def _authorize_arguments(
        self, tool: RegisteredTool, resolution: Resolution, arguments: str | dict[str, Any] | None
    ) -> None:
        """Refuse a call whose arguments need more than the pair's tier (`tools.arguments`)."""
        needs = tool.call_tier(arguments if arguments is not None else {})
        if resolution.tier.allows(needs):
            return
        log.warning(
            "tool_call_refused",
            tool=tool.name,
            required_tier=needs.value,
            key=resolution.key,
            tier=resolution.tier.value,
            source=resolution.source,
            reason="arguments",
        )
        raise ToolNotAllowed(
            f"tool {tool.name!r} with these arguments requires tier {needs.value!r} (tools.arguments); model "
            f"{resolution.key!r} has tier {resolution.tier.value!r} ({resolution.source}), so the call is not run"
        )


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004 - an async __call__


def function_schema(fn: Handler, *, name: str | None = None, description: str | None = None) -> dict[str, Any]:
    """The OpenAI tool schema pydantic derives from a typed function (what `@registry.tool` registers)."""
    return function_tool(fn, name=name, description=description).schema
